//! `/metrics` scraped by a real Prometheus (Debian's `prometheus`, which
//! `scripts/test.sh` installs), as an operator would set it up: a cluster
//! with a secret, Prometheus reading every node with a bearer token from a
//! file. After a workload — locks held for a known time through the CLI,
//! one holder killed — and the coordinator killed, Prometheus's query API
//! must show the grants, the hold times, the loss and the new coordinator.
//! And a cluster from `coterie init --tls` with client certificates,
//! scraped over HTTPS as the guide's security page sets Prometheus up.

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const PROMETHEUS: &str = "/usr/bin/prometheus";

/// A Prometheus server, stopped when dropped.
struct Prometheus {
    child: Child,
    url: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus in `dir`, scraping `targets` every 250 ms with
    /// the bearer token in `token_file`.
    fn start(dir: &Path, targets: &[String], token_file: &Path) -> Prometheus {
        let auth = format!(
            "    authorization:\n      credentials_file: {:?}\n",
            token_file.display().to_string()
        );
        Prometheus::start_with(dir, targets, &auth)
    }

    /// Starts Prometheus in `dir`, scraping `targets` every 250 ms, its
    /// scrape configuration's `auth` lines (YAML, indented for the job)
    /// saying how.
    fn start_with(dir: &Path, targets: &[String], auth: &str) -> Prometheus {
        assert!(
            Path::new(PROMETHEUS).exists(),
            "{PROMETHEUS} is missing: install Debian's prometheus package (scripts/test.sh does)"
        );
        let targets: Vec<String> = targets.iter().map(|t| format!("{t:?}")).collect();
        let config = format!(
            "global:\n  scrape_interval: 250ms\n  scrape_timeout: 200ms\n\
             scrape_configs:\n  - job_name: coterie\n{auth}    static_configs:\n      \
             - targets: [{}]\n",
            targets.join(", "),
        );
        let file = dir.join("prometheus.yml");
        std::fs::write(&file, config).unwrap();
        let port = free_ports(1)[0];
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus { child, url: format!("http://127.0.0.1:{port}") };
        let start = Instant::now();
        while !curl(&[&format!("{}/-/ready", prometheus.url)]).contains("Ready") {
            assert!(start.elapsed() < Duration::from_secs(30), "prometheus never became ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        prometheus
    }

    /// An instant query's result: each series' labels and value.
    fn query(&self, promql: &str) -> Vec<(Value, f64)> {
        let url = format!("{}/api/v1/query", self.url);
        let text = curl(&["-G", &url, "--data-urlencode", &format!("query={promql}")]);
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(body["status"], "success", "{promql}: {text}");
        let series = body["data"]["result"].as_array().cloned().unwrap_or_default();
        series
            .into_iter()
            .map(|s| {
                let value = s["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
                (s["metric"].clone(), value)
            })
            .collect()
    }

    /// One number: a query whose result is one series.
    fn scalar(&self, promql: &str) -> Option<f64> {
        match &self.query(promql)[..] {
            [(_, value)] => Some(*value),
            _ => None,
        }
    }

    /// Waits until `done` holds of what Prometheus answers, up to 30 s.
    fn until(&self, what: &str, done: impl Fn(&Prometheus) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(start.elapsed() < Duration::from_secs(30), "Prometheus never saw {what}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The value each node's series of `promql` has, by node id (read off
/// `instance`, whose port says which node it is).
fn by_node(p: &Prometheus, promql: &str, targets: &[String]) -> Vec<(u32, f64)> {
    let mut values: Vec<(u32, f64)> = p
        .query(promql)
        .into_iter()
        .filter_map(|(labels, v)| {
            let instance = labels["instance"].as_str()?;
            let node = targets.iter().position(|t| t == instance)? as u32 + 1;
            Some((node, v))
        })
        .collect();
    values.sort_by_key(|(node, _)| *node);
    values
}

#[test]
fn prometheus_sees_grants_hold_times_losses_and_the_new_coordinator() {
    let dir = scratch("prometheus");
    let security = api_security(&dir.0, "scrape-token\n");
    // Prometheus reads the token alone from its own file.
    let credentials = dir.0.join("credentials");
    std::fs::write(&credentials, "scrape-token").unwrap();
    let up = Up::start_with(3, "prometheus", &security);
    let targets: Vec<String> =
        (1..=3).map(|n| up.http(n).trim_start_matches("http://").to_string()).collect();
    let prom = Prometheus::start(&dir.0, &targets, &credentials);
    prom.until("every node up, following node 3", |p| {
        by_node(p, "up", &targets) == [(1, 1.0), (2, 1.0), (3, 1.0)]
            && by_node(p, "coterie_coordinator", &targets) == [(1, 3.0), (2, 3.0), (3, 3.0)]
    });

    // The workload: six locks held for 200 ms each, two through each node.
    for node in [1, 2, 3, 1, 2, 3] {
        let out = lock_now(&up, node, &["--timeout", "10s", "jobs/report"], &["sleep", "0.2"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // A holder killed while it holds: its session is lost (disconnected).
    let work = scratch("prometheus-holder");
    let script = "echo $$ > $D/pid; touch $D/held; exec sleep 60";
    let mut holder = lock_running(up.config(), 1, &["jobs/killed"], script, &work.0);
    appears(&work.0.join("held"));
    std::thread::sleep(Duration::from_millis(300));
    // `coterie lock` killed outright (its group). The command it runs has a
    // group of its own, which a SIGKILL cannot reach through `lock`: it is
    // killed too, or it would outlive the test holding its output open.
    let group = format!("-{}", holder.id());
    Command::new("kill").args(["-9", "--", &group]).status().unwrap();
    holder.wait().unwrap();
    let command = std::fs::read_to_string(work.0.join("pid")).unwrap();
    let command = format!("-{}", command.trim());
    Command::new("kill").args(["-9", "--", &command]).status().unwrap();

    prom.until("the grants, hold times and the loss", |p| {
        p.scalar("sum(coterie_grants_total)").is_some_and(|n| n >= 7.0)
            && p.scalar("sum(coterie_hold_seconds_count)").is_some_and(|n| n >= 7.0)
            && p.scalar("sum(coterie_hold_seconds_sum)").is_some_and(|s| s >= 6.0 * 0.2)
            && p.scalar("sum(coterie_locks_lost_total{reason=\"disconnected\"})") == Some(1.0)
            && p.scalar("sum(coterie_client_connections)") == Some(0.0)
    });
    // Every hold was 200 ms or more: none under 0.1 s.
    let short = prom.scalar("sum(coterie_hold_seconds_bucket{le=\"0.1\"})");
    assert_eq!(short, Some(0.0), "holds under 0.1 s");
    let waits = prom.scalar("sum(coterie_acquire_wait_seconds_count)").unwrap_or_default();
    assert!(waits >= 7.0, "acquire waits counted: {waits}");

    // The coordinator killed: the survivors follow node 2, and Prometheus
    // says so, with node 3 down.
    let changes = prom.scalar("sum(coterie_coordinator_changes_total)").unwrap_or_default();
    unsafe_kill(up.node_pid(3), 9);
    prom.until("node 3 down and node 2 the coordinator", |p| {
        by_node(p, "up", &targets) == [(1, 1.0), (2, 1.0), (3, 0.0)]
            && by_node(p, "coterie_coordinator", &targets) == [(1, 2.0), (2, 2.0)]
            && by_node(p, "coterie_is_coordinator", &targets) == [(1, 0.0), (2, 1.0)]
            && by_node(p, "coterie_peers_up", &targets) == [(1, 1.0), (2, 1.0)]
    });
    let after = prom.scalar("sum(coterie_coordinator_changes_total)").unwrap_or_default();
    assert!(after > changes, "coordinator changes counted: {changes} then {after}");
    // No label per lock name: the workload's names appear nowhere.
    let series = prom.query("{__name__=~\"coterie_.+\", job=\"coterie\"}");
    let named = series.iter().find(|(labels, _)| labels.to_string().contains("jobs/"));
    assert!(named.is_none(), "a series labelled with a lock's name: {named:?}");
}

#[test]
fn prometheus_scrapes_a_tls_cluster_over_https_with_a_client_certificate() {
    let init = ["--tls", "--http", "--set", "security.client_cert_auth=true"];
    let up = Up::init(3, "prometheus-tls", &init);
    let targets: Vec<String> = (1..=3).map(|n| up.http_addr(n).to_string()).collect();
    let file = |name: &str| format!("{:?}", up.dir().join(name).display().to_string());
    let auth = format!(
        "    scheme: https\n    tls_config:\n      ca_file: {}\n      cert_file: {}\n      \
         key_file: {}\n",
        file("ca.pem"),
        file("client.pem"),
        file("client.key")
    );
    let dir = scratch("prometheus-tls");
    let prom = Prometheus::start_with(&dir.0, &targets, &auth);
    prom.until("every node up over HTTPS, following node 3", |p| {
        by_node(p, "up", &targets) == [(1, 1.0), (2, 1.0), (3, 1.0)]
            && by_node(p, "coterie_coordinator", &targets) == [(1, 3.0), (2, 3.0), (3, 3.0)]
    });
    // Each node's certificates expire within the year init gives them.
    let left = by_node(&prom, "coterie_tls_cert_expiry_timestamp_seconds - time()", &targets);
    assert_eq!(left.len(), 3, "{left:?}");
    for (node, seconds) in left {
        assert!(seconds > 364.0 * 86400.0 && seconds <= 365.0 * 86400.0, "node {node}: {seconds}");
    }
    // A scrape without the client certificate is refused, and counted.
    let ca = up.dir().join("ca.pem");
    let metrics = format!("https://{}/metrics", targets[0]);
    let out =
        Command::new("curl").args(["-sS", "--cacert"]).arg(&ca).arg(&metrics).output().unwrap();
    assert!(!out.status.success(), "scraped without a client certificate");
    prom.until("the refusal counted", |p| {
        by_node(p, "coterie_tls_refusals_total{port=\"http\"}", &targets)
            .first()
            .is_some_and(|(node, n)| *node == 1 && *n >= 1.0)
    });
}
