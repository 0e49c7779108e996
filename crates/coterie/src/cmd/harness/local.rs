//! A cluster of node processes on this machine: launched on free ports of
//! 127.0.0.1 with a configuration written for it (`demo`, `run`, `bench
//! --real`), or from a user's configuration file (`up`).

use super::process::{Process, Signal};
use crate::cmd::common::{self, NodeAddr};
use anyhow::{bail, Context, Result};
use coterie_core::registry::{ElectionInfo, MutexInfo};
use coterie_core::Status;
use coterie_node::config::{ClusterSection, Config, NodeSection, WitnessSection};
use coterie_node::witness;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a local cluster has to answer, every node, once started: this
/// much, and [`START_WAIT_PER_NODE`] more for each node (128 processes
/// take seconds to come up on two cores, and a busy machine more).
const START_WAIT: Duration = Duration::from_secs(10);
/// See [`START_WAIT`].
const START_WAIT_PER_NODE: Duration = Duration::from_millis(100);

/// What a launched cluster runs: its size and algorithms.
pub struct Shape {
    pub nodes: u32,
    pub mutex: &'static MutexInfo,
    pub election: &'static ElectionInfo,
    pub count: usize,
    /// `[cluster] lock_delay`.
    pub lock_delay: Duration,
    /// `[cluster] partitions`.
    pub partitions: coterie_core::Partitions,
    /// TLS on every port (certificates made for the cluster, as `init
    /// --tls` makes them), instead of a secret.
    pub tls: bool,
}

/// Node processes this command started and owns.
pub struct LocalCluster {
    config: PathBuf,
    nodes: Vec<NodeAddr>,
    processes: Vec<Option<Process>>,
    /// Where each node's log goes: `DIR/nodeN.log`, or this command's
    /// stderr when `None`.
    log_dir: Option<PathBuf>,
    log_format: String,
    /// Environment variables each node is started with (by id).
    env: std::collections::BTreeMap<u32, Vec<(String, String)>>,
    /// The command each node is started under (by id), if any.
    wrap: std::collections::BTreeMap<u32, Vec<String>>,
}

/// Where and how each node of a launched cluster runs.
pub struct Placement<'a> {
    /// Environment variables node `id` is started with.
    pub env: &'a dyn Fn(u32) -> Vec<(String, String)>,
    /// A command node `id` is started under (`ip netns exec NS`), or none.
    pub wrap: &'a dyn Fn(u32) -> Vec<String>,
    /// Node `id`'s peer and client addresses; free ports of 127.0.0.1
    /// when `None`.
    pub addrs: Option<&'a dyn Fn(u32) -> (String, String)>,
    /// Ports of 127.0.0.1 from this one up, laid out as `init
    /// --base-port` lays them (node `id`'s peer port at `2 * (id - 1)`
    /// above it, its client port next), and the witness's after the last
    /// node's; free ports when `None`. Ignored where `addrs` is given.
    pub base_port: Option<u16>,
}

impl Placement<'_> {
    /// Every node on 127.0.0.1, started as it is.
    pub const LOCAL: Placement<'static> =
        Placement { env: &|_| Vec::new(), wrap: &|_| Vec::new(), addrs: None, base_port: None };
}

impl LocalCluster {
    /// Starts every node of the configuration file `config`, their logs
    /// on this command's stderr (`up`).
    pub fn from_config(config: &Path, log_format: &str) -> Result<LocalCluster> {
        let nodes = common::Target::of(config).nodes()?;
        let mut cluster = LocalCluster {
            config: config.to_path_buf(),
            processes: nodes.iter().map(|_| None).collect(),
            nodes,
            log_dir: None,
            log_format: log_format.to_string(),
            env: Default::default(),
            wrap: Default::default(),
        };
        // Highest first, as `launch_with` does.
        for id in cluster.ids().into_iter().rev() {
            cluster.start(id)?;
        }
        Ok(cluster)
    }

    /// Picks free ports, writes a configuration into `dir`, binds a
    /// witness and starts every node; returns the cluster and its witness.
    /// Ports are found by binding and releasing them, so another process
    /// may take one in between; a node that exits at start-up (its port
    /// taken) makes this try again with fresh ports.
    pub async fn launch(
        shape: &Shape,
        log_format: &str,
        dir: &Path,
    ) -> Result<(LocalCluster, Witness)> {
        LocalCluster::launch_with(shape, log_format, dir, &Placement::LOCAL).await
    }

    /// As [`launch`](Self::launch), with each node placed as `placement`
    /// says.
    pub async fn launch_with(
        shape: &Shape,
        log_format: &str,
        dir: &Path,
        placement: &Placement<'_>,
    ) -> Result<(LocalCluster, Witness)> {
        let mut last_error = None;
        // Free ports may be taken between finding and using them: try
        // again with others. Ports asked for are tried once.
        let attempts = if placement.base_port.is_some() { 1 } else { 5 };
        for _attempt in 0..attempts {
            let n = shape.nodes as usize;
            let ports = match placement.base_port {
                Some(base) => (0..=2 * n)
                    .map(|i| u16::try_from(i).ok().and_then(|i| base.checked_add(i)))
                    .collect::<Option<Vec<u16>>>()
                    .with_context(|| format!("{n} nodes from port {base} go past 65535"))?,
                None => common::free_ports("127.0.0.1", 2 * n + 1)?,
            };
            let witness_addr = format!("127.0.0.1:{}", ports[2 * n]);
            let Ok(listener) = tokio::net::TcpListener::bind(&witness_addr).await else {
                last_error = Some(format!("the witness's port {witness_addr} is taken"));
                continue;
            };
            let addrs: Vec<(String, String)> = (0..n)
                .map(|i| match placement.addrs {
                    Some(addrs) => addrs(i as u32 + 1),
                    None => (
                        format!("127.0.0.1:{}", ports[2 * i]),
                        format!("127.0.0.1:{}", ports[2 * i + 1]),
                    ),
                })
                .collect();
            let mut cluster = LocalCluster::configure(shape, &addrs, &witness_addr, dir)?;
            log_format.clone_into(&mut cluster.log_format);
            // Highest first, as an operator starts a bully cluster: each
            // later node finds its coordinator there already and learns
            // it, rather than taking over from a lower one.
            for id in cluster.ids().into_iter().rev() {
                cluster.env.insert(id, (placement.env)(id));
                cluster.wrap.insert(id, (placement.wrap)(id));
                cluster.start(id)?;
            }
            // Every node up and listening, or one gone (its port taken).
            // A node that answered once is not asked again: at 128 nodes
            // on two cores the processes take seconds to come up, and
            // asking all of them every round only slows the rest.
            let wait = START_WAIT + START_WAIT_PER_NODE * shape.nodes;
            let deadline = Instant::now() + wait;
            let mut answered: Vec<u32> = Vec::new();
            loop {
                if let Some(id) = cluster.exited() {
                    last_error = Some(format!(
                        "node {id} exited at start-up (see {}/node{id}.log)",
                        dir.display()
                    ));
                    cluster.stop_all().await;
                    break;
                }
                for (id, view) in cluster.views(&answered).await {
                    if view.is_ok() {
                        answered.push(id);
                    }
                }
                if answered.len() == n {
                    let witness = Witness::serve(listener, witness_addr, shape.count as u32);
                    return Ok((cluster, witness));
                }
                if Instant::now() > deadline {
                    cluster.stop_all().await;
                    bail!(
                        "the nodes did not start within {wait:?}: {} of {n} answered (logs in {})",
                        answered.len(),
                        dir.display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        bail!(
            "could not start the cluster: {}",
            last_error.unwrap_or_else(|| "no free ports".into())
        )
    }

    /// Writes `dir/cluster.toml` and a fresh secret (or, with `shape.tls`,
    /// certificates) for a cluster whose nodes have `addrs` (a peer and a
    /// client address each).
    fn configure(
        shape: &Shape,
        addrs: &[(String, String)],
        witness_addr: &str,
        dir: &Path,
    ) -> Result<LocalCluster> {
        let mut cluster = ClusterSection::new("demo", shape.mutex, shape.election);
        cluster.count = shape.count;
        cluster.lock_delay = shape.lock_delay;
        cluster.partitions = shape.partitions;
        cluster.state_dir = Some("state".into());
        cluster.state_sync = false;
        let nodes = addrs
            .iter()
            .zip(1..)
            .map(|((peer, client), id)| NodeSection {
                id,
                peer: peer.clone(),
                client: client.clone(),
                http: None,
            })
            .collect();
        let mut cfg = Config::new(cluster, nodes);
        cfg.security.allow_faults = true;
        cfg.timing.heartbeat = Duration::from_millis(50);
        cfg.timing.failure_timeout = Duration::from_millis(250);
        cfg.witness = Some(WitnessSection { addr: witness_addr.to_string() });
        // A fresh secret (or CA) for every cluster launched: its nodes and
        // this driver authenticate each other, as a production cluster
        // should.
        let credentials = if shape.tls {
            coterie_node::pki::make(&mut cfg, dir, coterie_node::pki::VALID_FOR)?;
            let s = &cfg.security;
            let file = |p: &Option<PathBuf>| p.as_ref().map(|p| dir.join(p));
            let tls = coterie_node::config::client_tls_from(
                file(&s.tls_ca).as_deref(),
                file(&s.tls_client_cert).as_deref(),
                file(&s.tls_client_key).as_deref(),
            )?;
            let credentials = coterie_node::Credentials { tls, ..Default::default() };
            std::sync::Arc::new(coterie_node::Credentials { cluster: "demo".into(), ..credentials })
        } else {
            cfg.security.secret_file = Some("secret".into());
            let secret = coterie_node::auth::Secret::generate_hex()?;
            std::fs::write(dir.join("secret"), &secret)?;
            let secret = coterie_node::auth::Secret::from_file_bytes(secret.as_bytes())
                .context("an empty secret")?;
            std::sync::Arc::new(coterie_node::Credentials::with_secret(secret, "demo"))
        };
        let mut nodes = Vec::new();
        for node in &cfg.nodes {
            let credentials = Some(credentials.clone());
            nodes.push(NodeAddr { id: Some(node.id), addr: node.client.clone(), credentials });
        }
        let config = dir.join("cluster.toml");
        std::fs::write(&config, cfg.to_toml())?;
        Ok(LocalCluster {
            config,
            processes: nodes.iter().map(|_| None).collect(),
            nodes,
            log_dir: Some(dir.to_path_buf()),
            log_format: String::new(),
            env: Default::default(),
            wrap: Default::default(),
        })
    }

    /// The nodes' client addresses, in id order.
    pub fn nodes(&self) -> &[NodeAddr] {
        &self.nodes
    }

    fn ids(&self) -> Vec<u32> {
        self.nodes.iter().enumerate().map(|(i, n)| n.id.unwrap_or(i as u32 + 1)).collect()
    }

    fn slot(&mut self, id: u32) -> Result<&mut Option<Process>> {
        let index = self.nodes.iter().position(|n| n.id == Some(id));
        match index {
            Some(i) => Ok(&mut self.processes[i]),
            None => bail!("there is no node {id}"),
        }
    }

    /// Starts node `id` (again); an error if it runs.
    pub fn start(&mut self, id: u32) -> Result<()> {
        let stderr = match &self.log_dir {
            Some(dir) => {
                let path = dir.join(format!("node{id}.log"));
                std::fs::OpenOptions::new().create(true).append(true).open(&path)?.into()
            }
            None => std::process::Stdio::inherit(),
        };
        let (config, format) = (self.config.clone(), self.log_format.clone());
        let env = self.env.get(&id).cloned().unwrap_or_default();
        let wrap = self.wrap.get(&id).cloned().unwrap_or_default();
        let slot = self.slot(id)?;
        if slot.is_some() {
            bail!("node {id} is running");
        }
        *slot = Some(Process::node(&config, id, &format, stderr, &env, &wrap)?);
        Ok(())
    }

    /// Whether node `id`'s process runs (started, and not killed by us).
    pub fn running(&mut self, id: u32) -> bool {
        self.slot(id).is_ok_and(|p| p.is_some())
    }

    /// Kills node `id` (SIGKILL: no goodbye, as in a crash).
    pub async fn kill(&mut self, id: u32) -> Result<()> {
        match self.slot(id)?.take() {
            Some(process) => process.kill().await,
            None => bail!("node {id} is not running"),
        }
    }

    /// Sends `signal` to node `id`'s process.
    pub fn signal(&mut self, id: u32, signal: Signal) -> Result<()> {
        match self.slot(id)? {
            Some(process) => {
                process.signal(signal);
                Ok(())
            }
            None => bail!("node {id} is not running"),
        }
    }

    /// The process id of node `id`, while it runs.
    pub fn pid(&mut self, id: u32) -> Option<u32> {
        self.slot(id).ok()?.as_ref().and_then(Process::pid)
    }

    /// The first node whose process has exited on its own, if any.
    fn exited(&mut self) -> Option<u32> {
        let ids = self.ids();
        let mut processes = self.processes.iter_mut();
        ids.into_iter()
            .find(|_| processes.next().is_some_and(|p| p.as_mut().is_some_and(Process::exited)))
    }

    /// The nodes whose processes have exited on their own since the last
    /// look, each with how it ended; their slots are free again, so that
    /// `start` brings them back.
    pub fn reap(&mut self) -> Vec<(u32, std::process::ExitStatus)> {
        let ids = self.ids();
        let mut gone = Vec::new();
        for (id, slot) in ids.into_iter().zip(self.processes.iter_mut()) {
            if let Some(status) = slot.as_mut().and_then(Process::exit_status) {
                *slot = None;
                gone.push((id, status));
            }
        }
        gone
    }

    /// Stops every node (SIGTERM, after a SIGCONT for a stopped one).
    pub async fn stop_all(&mut self) {
        Process::terminate_all(self.processes.iter_mut().filter_map(Option::take)).await;
    }

    /// The status of every running node but those in `absent`.
    pub async fn views(&self, absent: &[u32]) -> Vec<(u32, Result<Status, String>)> {
        super::views_of(self.running_but(absent)).await
    }

    /// The nodes whose processes run, but those in `absent`.
    pub fn running_but<'a>(&'a self, absent: &'a [u32]) -> impl Iterator<Item = &'a NodeAddr> {
        let running = self.nodes.iter().zip(&self.processes).filter(|(_, p)| p.is_some());
        running.map(|(node, _)| node).filter(|n| !absent.contains(&n.id.unwrap_or_default()))
    }
}

/// A witness served by this process, on a real socket.
pub struct Witness {
    addr: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Witness {
    /// Serves a witness admitting `capacity` holders at once.
    fn serve(listener: tokio::net::TcpListener, addr: String, capacity: u32) -> Witness {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(witness::serve(listener, capacity, async {
            let _ = stopped.await;
        }));
        Witness { addr, stop, task }
    }

    /// Where it listens.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Stops serving, once every connection has been answered.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}
