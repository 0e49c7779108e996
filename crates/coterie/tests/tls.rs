//! TLS as a user meets it: `coterie init --tls`, `coterie up`, `coterie
//! lock` and `curl --cacert` against the HTTPS API; a plain client and a
//! client with another CA's certificate refused with a reason (exit 69);
//! the refusals counted in `/metrics`.

mod support;

use std::process::Command;
use support::{coterie, lock_now, Up};

/// `coterie lock` at `addr` (no configuration), with `env` only.
fn lock_at(addr: &str, env: &[(&str, &std::path::Path)]) -> std::process::Output {
    let mut cmd = Command::new(support::BIN);
    cmd.args(["lock", "--addr", addr, "--try", "jobs", "--", "true"]);
    for var in ["COTERIE_TLS_CA", "COTERIE_TLS_CERT", "COTERIE_TLS_KEY", "COTERIE_CONFIG"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_os_str())));
    cmd.output().unwrap()
}

/// `curl ARGS`: its exit status and what it printed (standard output,
/// then standard error).
fn curl(args: &[&str]) -> (i32, String) {
    let out = Command::new("curl").arg("-sS").args(args).output().expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), text + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_cluster_from_init_tls_locks_serves_https_and_refuses_plain_tcp() {
    let up = Up::init(3, "tls", &["--tls", "--http"]);
    for file in ["ca.pem", "ca.key", "node1.pem", "node3.key", "client.pem", "client.key"] {
        assert!(up.dir().join(file).exists(), "init wrote no {file}");
    }
    let cli = lock_now(&up, 2, &["--try", "jobs"], &["true"]);
    assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));

    let ca = up.dir().join("ca.pem");
    let health = format!("https://{}/healthz", up.http_addr(1));
    let (status, body) = curl(&["--cacert", ca.to_str().unwrap(), &health]);
    assert_eq!(status, 0, "{body}");
    // Without the CA, curl does not trust the node.
    let (status, body) = curl(&[&health]);
    assert_ne!(status, 0, "curl trusted a node without its CA: {body}");
    // Plain HTTP to the HTTPS port: told so.
    let (_, body) = curl(&[&format!("http://{}/healthz", up.http_addr(1))]);
    assert!(body.contains("speaks TLS"), "{body}");

    // A plain client on the client port: refused with the reason, 69.
    let client = up.configuration().nodes[0].client.clone();
    let plain = lock_at(&client, &[]);
    let said = String::from_utf8_lossy(&plain.stderr);
    assert_eq!(plain.status.code(), Some(69), "{said}");
    assert!(said.contains("speaks TLS"), "{said}");
    // With the CA from the environment: let in.
    let with_ca = lock_at(&client, &[("COTERIE_TLS_CA", &ca)]);
    assert!(with_ca.status.success(), "{}", String::from_utf8_lossy(&with_ca.stderr));

    // The Rust clients: the blocking one's session, and the API's over
    // HTTPS, with the CA alone (the node asks for no certificate).
    let tls = coterie_client::tls::TlsClient::from_files(&ca, None).unwrap();
    let credentials = coterie_client::Credentials { tls: Some(tls.clone()), ..Default::default() };
    let jobs = coterie_client::LockRequest::new(["jobs/blocking"]);
    let mut blocking = coterie_client::blocking::Client::connect_with(&client, Some(&credentials))
        .expect("the blocking client over TLS");
    let granted = blocking.request(&jobs).unwrap();
    assert!(matches!(granted, coterie_client::Outcome::Granted(_)), "{granted:?}");
    std::thread::sleep(std::time::Duration::from_millis(300)); // the keeper pings meanwhile
    assert!(blocking.lost().is_none(), "{:?}", blocking.lost());
    blocking.release().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let addr = up.http_addr(1);
        let mut api =
            coterie_client::HttpClient::connect_with(addr, None, Some(&tls)).await.unwrap();
        let session = api.create_session(std::time::Duration::from_secs(10)).await.unwrap();
        let wait = coterie_client::Wait::Block(Some(std::time::Duration::from_secs(5)));
        let grant = api.acquire("jobs/https", &session, wait).await.unwrap();
        api.release("jobs/https", &session, grant.fence).await.unwrap();
        api.close_session(&session).await.unwrap();
    });

    let metrics = format!("https://{}/metrics", up.http_addr(1));
    let (_, text) = curl(&["--cacert", ca.to_str().unwrap(), &metrics]);
    let refused = |port: &str| {
        let line = format!("coterie_tls_refusals_total{{port=\"{port}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&line)?.parse::<u64>().ok())
    };
    assert!(refused("client") >= Some(1), "{text}");
    assert!(refused("http") >= Some(1), "{text}");
}

#[test]
fn with_client_certificates_another_cas_client_and_none_are_refused() {
    let up = Up::init(3, "tls-mutual", &["--tls", "--set", "security.client_cert_auth=true"]);
    let other = support::scratch("tls-other-ca");
    let made = Command::new(support::BIN)
        .args(["init", "--tls", "--nodes", "1", "--name", "tls-mutual", "--out"])
        .arg(other.0.join("cluster.toml"))
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));

    // The configuration's own client certificate: let in.
    let cli = lock_now(&up, 1, &["--try", "jobs"], &["true"]);
    assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));

    let client = up.configuration().nodes[0].client.clone();
    let ca = up.dir().join("ca.pem");
    // No certificate at all.
    let none = lock_at(&client, &[("COTERIE_TLS_CA", &ca)]);
    let said = String::from_utf8_lossy(&none.stderr);
    assert_eq!(none.status.code(), Some(69), "{said}");
    assert!(said.contains("client certificate"), "{said}");
    // Another CA's client certificate.
    let (cert, key) = (other.0.join("client.pem"), other.0.join("client.key"));
    let env =
        [("COTERIE_TLS_CA", ca.as_path()), ("COTERIE_TLS_CERT", &cert), ("COTERIE_TLS_KEY", &key)];
    let foreign = lock_at(&client, &env);
    let said = String::from_utf8_lossy(&foreign.stderr);
    assert_eq!(foreign.status.code(), Some(69), "{said}");
    assert!(said.contains("does not trust this client's certificate"), "{said}");
    // The node said why too, and kept serving.
    assert!(up.log().contains("its TLS handshake failed"), "{}", up.log());
    let cli = lock_now(&up, 1, &["--try", "jobs"], &["true"]);
    assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));
}

#[test]
fn a_node_whose_certificate_names_another_node_does_not_start() {
    let dir = support::scratch("tls-wrong-id");
    let config = dir.0.join("cluster.toml");
    let made = Command::new(support::BIN)
        .args(["init", "--tls", "--nodes", "2", "--free-ports", "--out"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    std::fs::copy(dir.0.join("node1.pem"), dir.0.join("node2.pem")).unwrap();
    std::fs::copy(dir.0.join("node1.key"), dir.0.join("node2.key")).unwrap();
    let out = coterie(&["node", "--config", config.to_str().unwrap(), "--id", "2"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("does not name this node (node-2.coterie)"), "{said}");
}
