//! The in-process cluster the node's integration tests share: real nodes
//! on loopback sockets, each a task of the test's runtime.
//!
//! With `COTERIE_TEST_TLS=1` in the environment every cluster speaks TLS,
//! its certificates made afresh ([`bound_config`]) and its clients given
//! the CA: `scripts/test.sh` runs the cluster suite so a second time. The
//! few tests that speak the plain wire by hand skip themselves then
//! ([`plain_only`]).
#![allow(dead_code)] // each test file uses its own part

use coterie_core::registry;
use coterie_node::config::{ClusterSection, NodeSection};
use coterie_node::node::{self, Listeners};
use coterie_node::{Acquired, Client, ClientError, Config, Credentials};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub const PATIENCE: Duration = Duration::from_secs(20);

pub struct TestCluster {
    pub cfg: Config,
    pub stops: Vec<Option<oneshot::Sender<()>>>,
    /// What clients show and check (TLS or a secret), if anything.
    pub credentials: Option<Credentials>,
}

impl TestCluster {
    pub async fn start(n: u32, mutex: &str) -> TestCluster {
        TestCluster::start_with(n, mutex, |_| {}).await
    }

    /// A cluster of [`bound_config`] as `configure` changes it.
    pub async fn start_with(n: u32, mutex: &str, configure: impl Fn(&mut Config)) -> TestCluster {
        let (mut cfg, listeners) = bound_config(n, mutex).await;
        configure(&mut cfg);
        let tls = cfg.client_tls().unwrap();
        let credentials = tls.map(|tls| Credentials { tls: Some(tls), ..Credentials::default() });
        let mut cluster = TestCluster { cfg, stops: Vec::new(), credentials };
        for (i, l) in listeners.into_iter().enumerate() {
            let tx = cluster.spawn(i as u32 + 1, l);
            cluster.stops.push(Some(tx));
        }
        cluster.agreed_on(n).await;
        cluster
    }

    pub fn spawn(&self, id: u32, listeners: Listeners) -> oneshot::Sender<()> {
        self.spawn_as(id, listeners, self.cfg.clone())
    }

    /// Runs node `id` on `listeners` with a configuration of its own.
    pub fn spawn_as(&self, id: u32, listeners: Listeners, cfg: Config) -> oneshot::Sender<()> {
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            node::run(cfg, id, listeners, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        tx
    }

    /// Starts node `id` again, on its old addresses, once they are free.
    pub async fn restart(&mut self, id: u32) {
        let bind = async {
            loop {
                let peer = TcpListener::bind(self.peer_addr(id)).await;
                let client = TcpListener::bind(self.client_addr(id)).await;
                if let (Ok(peer), Ok(client)) = (peer, client) {
                    return Listeners { peer, client, http: None };
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let listeners = tokio::time::timeout(PATIENCE, bind).await.expect("addresses never freed");
        let tx = self.spawn(id, listeners);
        self.stops[id as usize - 1] = Some(tx);
    }

    pub fn client_addr(&self, id: u32) -> String {
        self.cfg.node(id).unwrap().client.clone()
    }

    pub fn peer_addr(&self, id: u32) -> String {
        self.cfg.node(id).unwrap().peer.clone()
    }

    pub async fn client(&self, id: u32) -> Client {
        self.connect(id).await.unwrap()
    }

    /// A session with node `id`, with the cluster's credentials.
    pub async fn connect(&self, id: u32) -> Result<Client, ClientError> {
        Client::connect_with(&self.client_addr(id), self.credentials.as_ref()).await
    }

    pub fn stop(&mut self, id: u32) {
        if let Some(tx) = self.stops[id as usize - 1].take() {
            let _ = tx.send(());
        }
    }

    /// Waits until every running node follows `leader`.
    pub async fn agreed_on(&self, leader: u32) {
        let wait = async {
            loop {
                let mut all = true;
                for (i, stop) in self.stops.iter().enumerate() {
                    if stop.is_none() {
                        continue;
                    }
                    let s = match self.connect(i as u32 + 1).await {
                        Ok(mut c) => c.status().await.ok(),
                        Err(_) => None,
                    };
                    all &= s.is_some_and(|s| s.coordinator == Some(leader) && s.joined);
                }
                if all {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(PATIENCE, wait).await.expect("nodes never agreed on the coordinator");
    }
}

/// Whether the clusters speak TLS (`COTERIE_TEST_TLS`).
pub fn tls_on() -> bool {
    std::env::var_os("COTERIE_TEST_TLS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether test `name`, which speaks the plain wire by hand, is to be
/// skipped: it is under TLS, and says so.
pub fn plain_only(name: &str) -> bool {
    let skip = tls_on();
    if skip {
        println!("{name}: speaks plain TCP by hand: skipped under COTERIE_TEST_TLS");
    }
    skip
}

/// Where this test process keeps its clusters' certificates: nodes read
/// them while they run, so they stay until the process is gone, and the
/// next run removes them.
fn certificates_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("coterie-test-tls-{}", std::process::id()))
}

/// Removes the certificates of test processes that have ended.
fn remove_certificates_of_earlier_runs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("coterie-test-tls-")) else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Certificates for `cfg`'s nodes in a directory of their own, and `cfg`
/// pointed at them by absolute path (a configuration not read from a
/// file has nothing to be relative to). The directory is left for the
/// nodes to read while the test runs, under the system's temporary one.
pub fn certify(cfg: &mut Config, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    coterie_node::pki::make(cfg, dir, Duration::from_secs(3600)).unwrap();
    let s = &mut cfg.security;
    for p in [&mut s.tls_ca, &mut s.tls_cert, &mut s.tls_key]
        .into_iter()
        .chain([&mut s.tls_client_cert, &mut s.tls_client_key])
    {
        *p = p.as_ref().map(|p| dir.join(p));
    }
}

/// The configuration of an `n`-node cluster of `mutex` under bully on
/// free loopback ports, heartbeats every 20 ms, a failure timeout of
/// 150 ms, faults allowed (and TLS, under `COTERIE_TEST_TLS`); and its
/// bound sockets.
pub async fn bound_config(n: u32, mutex: &str) -> (Config, Vec<Listeners>) {
    let mut listeners = Vec::new();
    let mut nodes = Vec::new();
    for id in 1..=n {
        let peer = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (peer_addr, client_addr) = (peer.local_addr().unwrap(), client.local_addr().unwrap());
        nodes.push(NodeSection {
            id,
            peer: peer_addr.to_string(),
            client: client_addr.to_string(),
            http: None,
        });
        listeners.push(Listeners { peer, client, http: None });
    }
    let mutex = registry::mutex(mutex).unwrap();
    let election = registry::election("bully").unwrap();
    let mut cfg = Config::new(ClusterSection::new("test", mutex, election), nodes);
    cfg.timing.heartbeat = Duration::from_millis(20);
    cfg.timing.failure_timeout = Duration::from_millis(150);
    cfg.security.allow_faults = true;
    if tls_on() {
        static CLUSTERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let made = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        if made == 0 {
            remove_certificates_of_earlier_runs();
        }
        certify(&mut cfg, &certificates_dir().join(made.to_string()));
    }
    // Through its file, as a node reads it.
    (Config::parse(&cfg.to_toml(), Path::new("test.toml")).unwrap(), listeners)
}

/// Clients on every node, acquiring and releasing `rounds` times each:
/// never two inside at once, fences rising. `midway` runs once, after the
/// first client's first round.
pub async fn exclusive(cluster: &TestCluster, rounds: u32, midway: impl FnOnce() + Send + 'static) {
    let inside = Arc::new(AtomicBool::new(false));
    let last_fence = Arc::new(AtomicU64::new(0));
    let mut midway = Some(midway);
    let mut tasks = Vec::new();
    for id in 1..=cluster.stops.len() as u32 {
        for _ in 0..2 {
            let mut client = cluster.client(id).await;
            let (inside, last_fence) = (inside.clone(), last_fence.clone());
            let mut midway = midway.take();
            tasks.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let Acquired::Granted(fence) =
                        client.acquire(Some(PATIENCE), false).await.unwrap()
                    else {
                        panic!("not granted");
                    };
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    let previous = last_fence.swap(fence, Ordering::SeqCst);
                    assert!(fence > previous, "fence {fence} after {previous}");
                    tokio::task::yield_now().await;
                    inside.store(false, Ordering::SeqCst);
                    client.release().await.unwrap();
                    if let Some(midway) = midway.take() {
                        midway();
                    }
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(PATIENCE, t).await.expect("workload hung").unwrap();
    }
}
