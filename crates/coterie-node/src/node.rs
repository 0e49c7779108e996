//! One node's runtime: binds its sockets, builds its engine from the
//! configuration (and what stable storage kept), and runs its tasks until
//! told to stop. The parts, each in a file of its own:
//! - [`agent`](crate::agent): the engine and its output driver;
//! - [`transport`](crate::transport): peer connections, dial and accept,
//!   and the reliable sessions over them;
//! - [`app`](crate::app): the application task, serving clients;
//! - [`faults`](crate::faults): faults injected on request.

use crate::agent::{Agent, Settings, Storage};
use crate::app::client_session;
use crate::config::Config;
use crate::faults::Faults;
use crate::state::StateFile;
use crate::storage::StateWriter;
use crate::transport::{delay_lane, dial_task, serve_peer, Transport};
use coterie_core::wire::{Hello, PROTOCOL_VERSION};
use coterie_core::{Engine, NodeId, Restored};
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{error, info, warn, Instrument};

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The id is not in the configuration.
    #[error("node {0} is not in the configuration")]
    UnknownNode(u32),
    /// A listening address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// Stable storage failed while the node ran: it stopped rather than
    /// send what it could not back.
    #[error("stable storage failed: {0}")]
    Storage(String),
    /// The secret file could not be read.
    #[error("{0}")]
    Secret(#[from] crate::config::ConfigError),
    /// The state directory or file could not be used.
    #[error("cannot use the state file {path}: {source}")]
    State {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// The two listening sockets of a node, bound before it runs (so a test
/// can bind port 0 and read the address back).
pub struct Listeners {
    /// Agent-to-agent traffic.
    pub peer: TcpListener,
    /// Clients and status.
    pub client: TcpListener,
}

/// Binds the addresses of node `id` in `cfg`.
pub async fn bind(cfg: &Config, id: u32) -> Result<Listeners, NodeError> {
    let me = cfg.node(id).ok_or(NodeError::UnknownNode(id))?;
    Ok(Listeners { peer: listen(&me.peer).await?, client: listen(&me.client).await? })
}

/// How long a node waits for its own name to resolve, and to an address
/// of its own: in Kubernetes a pod's DNS record appears a moment after the
/// pod starts (and may name its previous address for a moment).
const BIND_PATIENCE: Duration = Duration::from_secs(30);

/// Binds `addr`, a name resolved now, waiting up to [`BIND_PATIENCE`] for
/// the name to resolve to an address of this host. Any other failure (the
/// port is taken, say) is reported at once.
async fn listen(addr: &str) -> Result<TcpListener, NodeError> {
    let error = |source| NodeError::Bind { addr: addr.to_string(), source };
    let start = std::time::Instant::now();
    loop {
        let e = match tokio::net::lookup_host(addr).await {
            Ok(resolved) => {
                let resolved: Vec<_> = resolved.collect();
                match TcpListener::bind(&resolved[..]).await {
                    Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => e,
                    bound => return bound.map_err(error),
                }
            }
            Err(e) => e,
        };
        if start.elapsed() >= BIND_PATIENCE {
            return Err(error(e));
        }
        warn!(addr, "cannot bind this node's own address yet ({e}); trying again");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Runs node `id` of `cfg` on `listeners` until `shutdown` completes.
pub async fn run(
    cfg: Config,
    id: u32,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NodeError> {
    cfg.node(id).ok_or(NodeError::UnknownNode(id))?;
    let secret = cfg.secret()?;
    let wall = std::time::SystemTime::now();
    let incarnation = wall.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let since_unix = wall.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let wall_origin = since_unix.saturating_sub(coterie_core::CLUSTER_ERA);
    let state_file = match &cfg.cluster.state_dir {
        None => None,
        Some(dir) => {
            let error = |source| NodeError::State { path: dir.clone(), source };
            let sync = cfg.cluster.state_sync;
            Some(StateFile::open(dir, &cfg.cluster.name, id, sync).map_err(error)?)
        }
    };
    let mut algo = cfg.algo_config(id, incarnation, wall_origin);
    if let Some(file) = &state_file {
        let error = |source| NodeError::State { path: file.path().to_path_buf(), source };
        if let Some(bytes) = file.load().map_err(error)? {
            let path = file.path().display();
            match Restored::decode(&bytes) {
                Some(record) => {
                    info!(node = id, %path, epoch = record.epoch.0, "restored the state of the previous run");
                    algo.restored = Some(record);
                }
                None => warn!(node = id, %path, "state file not understood: starting afresh"),
            }
        }
    }
    let engine = Engine::new(algo, &cfg.cluster.mutex, &cfg.cluster.election, Duration::ZERO)
        .expect("the configuration's algorithm names were checked when it was loaded");
    let hello = Hello {
        cluster: cfg.cluster.name.clone(),
        node: NodeId(id),
        protocol: PROTOCOL_VERSION,
        mutex: cfg.cluster.mutex.clone(),
        election: cfg.cluster.election.clone(),
        detector: cfg.timing().detector.to_string(),
        boot: incarnation,
        expects: None,
    };
    let peers: Vec<(NodeId, String)> =
        cfg.nodes.iter().filter(|n| n.id != id).map(|n| (NodeId(n.id), n.peer.clone())).collect();
    let (transport, lanes) = Transport::new(&peers);
    let allow_faults = cfg.security.allow_faults;
    let faults = Faults::new(peers.iter().map(|(p, _)| *p).collect(), incarnation, allow_faults);
    if allow_faults {
        warn!(id, "fault injection is allowed ([security] allow_faults): for labs and tests only");
    }
    let storage = match state_file {
        None => Storage::None,
        Some(file) if cfg.cluster.state_sync => Storage::Synced(StateWriter::spawn(file)),
        Some(file) => Storage::Unsynced(file),
    };
    let span = tracing::info_span!("node", id);
    if secret.is_none() {
        warn!(parent: &span, "no secret configured ([security] secret_file): peers and clients are \
            not authenticated; anyone who reaches this node's ports can speak for a member");
    }
    let settings = Settings { lock_delay: cfg.cluster.lock_delay, secret, limits: cfg.limits };
    let agent = Arc::new(Agent::new(engine, hello, faults, storage, transport, settings));
    info!(parent: &span, peer = ?listeners.peer.local_addr().ok(), client = ?listeners.client.local_addr().ok(),
        mutex = %cfg.cluster.mutex, election = %cfg.cluster.election, cluster = %cfg.cluster.name, "node starting");

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    // The engine queued its first heartbeats when it was built.
    agent.input(|_, _| ());
    let a = agent.clone();
    let stop = stop_rx.clone();
    tasks.spawn(async move { a.run_timers(stop).await }.instrument(span.clone()));
    let a = agent.clone();
    let stop = stop_rx.clone();
    tasks.spawn(async move { a.release_durable(stop).await }.instrument(span.clone()));
    for (peer, lane) in lanes {
        tasks.spawn(delay_lane(agent.clone(), peer, lane, stop_rx.clone()));
    }
    for (peer, _) in &peers {
        tasks.spawn(dial_task(agent.clone(), *peer, stop_rx.clone()).instrument(span.clone()));
    }
    let peer_port = accept_loop(agent.clone(), listeners.peer, stop_rx.clone(), "peer", serve_peer);
    tasks.spawn(peer_port.instrument(span.clone()));
    let clients =
        accept_loop(agent.clone(), listeners.client, stop_rx.clone(), "client", client_session);
    tasks.spawn(clients.instrument(span.clone()));

    let outcome = tokio::select! {
        _ = shutdown => Ok(()),
        reason = agent.broken() => {
            error!(parent: &span, "stopping: stable storage failed: {reason}");
            Err(NodeError::Storage(reason))
        }
    };
    info!(parent: &span, "node stopping");
    let _ = stop_tx.send(true);
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(2), drain).await.is_err() {
        tasks.abort_all();
    }
    outcome
}

/// Resolves once the node is told to stop.
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Accepts connections until the node stops, serving each with `serve` in
/// a task of its own. `what` names the port in log lines.
async fn accept_loop<F, Fut>(
    agent: Arc<Agent>,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
    serve: F,
) where
    F: Fn(Arc<Agent>, TcpStream, std::net::SocketAddr, watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, from)) => {
                    conns.spawn(serve(agent.clone(), stream, from, stop.clone()).in_current_span());
                }
                Err(e) => warn!("{what} accept failed: {e}"),
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = stopped(&mut stop) => return,
        }
    }
}
