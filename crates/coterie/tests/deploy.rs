//! The Kubernetes manifests in deploy/kubernetes/ agree with the cluster
//! file they carry: the file is a valid configuration with fault injection
//! off and a secret; its node ids are the StatefulSet's ordinals, its peer
//! and client names the pods' names under the headless Service, its ports
//! the containers' and the Services'; its secret, state and config paths
//! are where the pod mounts them.
//!
//! The manifests are read line by line (`key: value`), which their flat
//! layout allows; `kubectl kustomize deploy/kubernetes` renders them whole.

use coterie_node::Config;
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every value of `key` in a YAML file, in order, unquoted.
fn values(yaml: &str, key: &str) -> Vec<String> {
    yaml.lines()
        .filter_map(|line| {
            let line = line.trim_start().trim_start_matches("- ");
            let rest = line.strip_prefix(key)?.strip_prefix(':')?;
            Some(rest.trim().trim_matches('"').to_string())
        })
        .collect()
}

/// The value of the first `key` after the line that contains `marker`.
fn after(yaml: &str, marker: &str, key: &str) -> String {
    let start = yaml.find(marker).unwrap_or_else(|| panic!("no {marker:?}"));
    values(&yaml[start + marker.len()..], key).into_iter().next().unwrap_or_default()
}

fn one(yaml: &str, key: &str) -> String {
    let all = values(yaml, key);
    assert_eq!(all.len(), 1, "{key}: expected one value, found {all:?}");
    all[0].clone()
}

/// The `(host, port)` of an address `host:port`.
fn split(addr: &str) -> (&str, u16) {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    (host, port.parse().expect("a port"))
}

#[test]
fn the_kubernetes_manifests_agree_with_their_cluster_file() {
    let toml = read("coterie.toml");
    let cfg = Config::parse(&toml, &dir().join("coterie.toml")).expect("a valid cluster file");
    let statefulset = read("statefulset.yaml");
    let service = read("service.yaml");
    let kustomization = read("kustomization.yaml");

    // Security: a secret, no faults.
    assert!(!cfg.security.allow_faults, "a deployment takes no fault commands");
    let secret = cfg.security.secret_file.as_ref().expect("a secret file");

    // One pod per node; the ordinal is the id.
    let set = values(&statefulset, "name")[0].clone(); // metadata.name comes first
    let service_name = one(&statefulset, "serviceName");
    let replicas: usize = one(&statefulset, "replicas").parse().unwrap();
    let start: u32 = one(&statefulset, "start").parse().unwrap();
    assert_eq!(replicas, cfg.nodes.len());
    let ids: Vec<u32> = cfg.nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, (start..start + replicas as u32).collect::<Vec<_>>());
    assert_eq!(
        after(&statefulset, "name: COTERIE_ID", "fieldPath"),
        "metadata.labels['apps.kubernetes.io/pod-index']",
        "the node's id is the pod's index"
    );

    // Names: pod.service, as the headless Service publishes them.
    assert_eq!(values(&service, "name")[0], service_name);
    assert_eq!(values(&service, "clusterIP"), ["None"]);
    assert_eq!(values(&service, "publishNotReadyAddresses"), ["true"]);
    let mut peer_ports = Vec::new();
    let mut client_ports = Vec::new();
    for node in &cfg.nodes {
        let (host, port) = split(&node.peer);
        assert_eq!(host, format!("{set}-{}.{service_name}", node.id), "peer of node {}", node.id);
        peer_ports.push(port);
        let (host, port) = split(&node.client);
        assert_eq!(host, format!("{set}-{}.{service_name}", node.id), "client of node {}", node.id);
        client_ports.push(port);
    }
    peer_ports.dedup();
    client_ports.dedup();
    assert_eq!(peer_ports.len(), 1, "every pod listens on the same peer port");
    assert_eq!(client_ports.len(), 1, "every pod listens on the same client port");
    let container_ports = values(&statefulset, "containerPort");
    let service_ports = values(&service, "port");
    for port in [peer_ports[0], client_ports[0]] {
        assert!(container_ports.contains(&port.to_string()), "containerPort {port}");
        assert!(service_ports.contains(&port.to_string()), "Service port {port}");
    }

    // Paths: the config, the secret and the state where the pod mounts them.
    let mounts = values(&statefulset, "mountPath");
    let args = one(&statefulset, "args");
    let config_path = args
        .split(['[', ']', ',', '"', ' '])
        .filter(|s| !s.is_empty())
        .skip_while(|s| *s != "--config")
        .nth(1)
        .expect("--config in the container's args")
        .to_string();
    let config_dir = Path::new(&config_path).parent().unwrap().to_str().unwrap().to_string();
    assert!(mounts.contains(&config_dir), "{config_dir} is mounted");
    // The ConfigMap is generated from this very file, under its own name.
    let file = Path::new(&config_path).file_name().unwrap().to_str().unwrap();
    assert_eq!(file, "coterie.toml");
    assert!(kustomization.lines().any(|l| l.trim() == format!("- {file}")));
    let config_map = one(&kustomization, "name");
    assert_eq!(after(&statefulset, "configMap:", "name"), config_map);
    let secret_dir = secret.parent().unwrap().to_str().unwrap().to_string();
    assert!(mounts.contains(&secret_dir), "{secret_dir} (the secret) is mounted");
    assert_eq!(one(&statefulset, "secretName"), "coterie-secret");
    let state = cfg.cluster.state_dir.as_ref().expect("a state directory");
    assert!(mounts.contains(&state.to_str().unwrap().to_string()), "the state volume is mounted");
    assert_eq!(after(&statefulset, "name: COTERIE_CONFIG", "value"), config_path);
}

/// The TLS overlay (deploy/kubernetes-tls/) carries the same cluster with
/// certificates instead of the secret: its file differs from the base's
/// only in `[security]`, every TLS path is under the directory it mounts
/// the Secret `coterie-tls` at, and `coterie certs` can certify its nodes.
#[test]
fn the_kubernetes_tls_overlay_mounts_what_its_cluster_file_names() {
    let overlay = dir().join("../kubernetes-tls");
    let text = std::fs::read_to_string(overlay.join("coterie.toml")).unwrap();
    let tls = Config::parse(&text, &overlay.join("coterie.toml")).expect("a valid cluster file");
    let base = Config::parse(&read("coterie.toml"), &dir().join("coterie.toml")).unwrap();
    assert_eq!(tls.to_toml().split("[security]").next(), base.to_toml().split("[security]").next());
    let s = &tls.security;
    assert!(s.secret_file.is_none() && s.client_cert_auth && !s.allow_faults, "{s:?}");
    let kustomization = std::fs::read_to_string(overlay.join("kustomization.yaml")).unwrap();
    assert_eq!(after(&kustomization, "secret:", "secretName"), "coterie-tls");
    let mounted = values(&kustomization, "mountPath");
    assert_eq!(mounted, ["/tls"], "{kustomization}");
    let files = [&s.tls_ca, &s.tls_cert, &s.tls_key, &s.tls_client_cert, &s.tls_client_key];
    for file in files {
        let file = file.as_ref().expect("every TLS key set");
        assert!(file.starts_with("/tls/"), "{} is not under /tls", file.display());
    }
    // The files `coterie certs` makes are the ones named.
    let scratch = std::env::temp_dir().join(format!("coterie-k8s-tls-{}", std::process::id()));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_coterie"))
        .args(["certs", "--config"])
        .arg(overlay.join("coterie.toml"))
        .arg("--dir")
        .arg(&scratch)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for id in 1..=tls.nodes.len() {
        let name = s.tls_cert.as_ref().unwrap().to_string_lossy().replace("{id}", &id.to_string());
        let name = name.strip_prefix("/tls/").unwrap();
        assert!(scratch.join(name).exists(), "coterie certs made no {name}");
    }
    let _ = std::fs::remove_dir_all(scratch);
}
