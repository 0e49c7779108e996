//! One node's runtime: binds its sockets, builds its parts from the
//! configuration (and what stable storage kept), and runs their tasks
//! until told to stop, as tokio-rs/mini-redis's `server::run` does (the
//! caller binds the sockets and owns the shutdown trigger, so a test binds
//! port 0 and passes any future).
//!
//! The parts, each in a file of its own, and who holds whom:
//! - the **agent** ([`agent`](crate::agent)) owns the engine and the
//!   peers' sessions; the **transport** ([`transport`](crate::transport))
//!   owns the peer connections and feeds it frames; each peer's handles
//!   are in [`peers`](crate::peers);
//! - the **application**: client connections ([`handler`](crate::handler),
//!   accepted by a [`listener`](crate::listener)), the table of what its
//!   sessions hold and want ([`locks`](crate::locks)), and the cluster-wide
//!   view ([`cluster`](crate::cluster)), which the agent's notices feed;
//! - beside them: the door ([`admission`](crate::admission)), the faults
//!   in force ([`faults`](crate::faults)), the watchers' events
//!   ([`events`](crate::events)) and the stop signal
//!   ([`shutdown`](crate::shutdown)).
//!
//! The agent serves what the application's table wants; the application
//! hears back through that table (grants) and the agent's notices.

use crate::admission::{Admission, Lock, Port};
use crate::agent::{Agent, Parts};
use crate::certs::Certs;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::effects::{Outlets, Storage};
use crate::events::Events;
use crate::exporter::Exporter;
use crate::faults::{Faults, Injector};
use crate::handler;
use crate::http::Api;
use crate::http_conn;
use crate::listener::{self, Listener};
use crate::locks::{Limits, Locks};
use crate::metrics::Metrics;
use crate::peers::Peers;
use crate::session::Shared;
use crate::sessions::Sessions;
use crate::shutdown::Trigger;
use crate::state::{Found, StateFile};
use crate::storage::StateWriter;
use crate::transport::{call_task, delay_lane, dial_task, serve_peer, Transport};
use coterie_core::wire::{Hello, PROTOCOL_VERSION};
use coterie_core::{Engine, NodeId, Priority};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::mpsc;
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
    /// The HTTP API would be open to anyone, or its tokens are missing.
    #[error("the HTTP API on {addr}: {why}")]
    Api {
        /// Its address.
        addr: String,
        /// Why it is not served.
        why: String,
    },
    /// The node's TLS files could not be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// The state directory or its files could not be used.
    #[error("cannot use the state in {path}: {source}")]
    State {
        /// The state directory.
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
    /// The HTTP/JSON API, if the node serves it (`[[node]] http`).
    pub http: Option<TcpListener>,
}

/// Binds the addresses of node `id` in `cfg`.
pub async fn bind(cfg: &Config, id: u32) -> Result<Listeners, NodeError> {
    let me = cfg.node(id).ok_or(NodeError::UnknownNode(id))?;
    let http = match &me.http {
        Some(addr) => Some(listen(addr).await?),
        None => None,
    };
    Ok(Listeners { peer: listen(&me.peer).await?, client: listen(&me.client).await?, http })
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
            Ok(resolved) => match bind_first(resolved) {
                Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => e,
                bound => return bound.map_err(error),
            },
            Err(e) => e,
        };
        if start.elapsed() >= BIND_PATIENCE {
            return Err(error(e));
        }
        warn!(addr, "cannot bind this node's own address yet ({e}); trying again");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Listens on the first of `addrs` that can be bound, with room for
/// [`BACKLOG`] connections not yet accepted.
fn bind_first(addrs: impl Iterator<Item = SocketAddr>) -> io::Result<TcpListener> {
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "the address resolves to nothing");
    for addr in addrs {
        let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        match socket.bind(addr).and_then(|()| socket.listen(BACKLOG)) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Connections the kernel queues for a port before the node accepts them.
/// std's 128 overflows when many clients connect at once (a thousand
/// connecting in a burst waited a second each for a SYN retry); the kernel
/// caps it at `net.core.somaxconn`.
const BACKLOG: u32 = 4096;

/// Runs node `id` of `cfg` on `listeners` until `shutdown` completes.
pub async fn run(
    cfg: Config,
    id: u32,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NodeError> {
    cfg.node(id).ok_or(NodeError::UnknownNode(id))?;
    let secret = cfg.secret()?;
    let certs = match cfg.security.tls_files(id) {
        Some(files) => {
            Some(Arc::new(Certs::load(files, NodeId(id), cfg.security.client_cert_auth)?))
        }
        None => None,
    };
    // Who must show who they are on the HTTP port: with a secret, tokens;
    // with TLS and client certificates, the certificate does.
    let api_by_certificate = certs.as_ref().is_some_and(|c| c.client_cert_auth());
    let api_guarded = secret.is_some() && !api_by_certificate;
    let tokens = match &listeners.http {
        Some(http) => api_tokens(&cfg, api_guarded, api_by_certificate, http)?,
        None => None,
    };
    make_room_for_connections(&cfg, listeners.http.is_some());
    let wall = std::time::SystemTime::now();
    let incarnation = wall.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let since_unix = wall.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let wall_origin = since_unix.saturating_sub(coterie_core::CLUSTER_ERA);
    let mut algo = cfg.algo_config(id, incarnation, wall_origin);
    let state_file = match &cfg.cluster.state_dir {
        None => {
            warn!(
                node = id,
                "no [cluster] state_dir: what must outlive a crash is kept in memory only, so \
                 fences may repeat after every node restarts"
            );
            None
        }
        Some(dir) => {
            let error = |source| NodeError::State { path: dir.clone(), source };
            let sync = cfg.cluster.state_sync;
            let opened = StateFile::open(dir, &cfg.cluster.name, id, sync).map_err(error)?;
            let path = opened.file.snapshot_path().display().to_string();
            let epoch = opened.restored.as_ref().map_or(0, |r| r.epoch.0);
            let names = opened.restored.as_ref().map_or(0, |r| r.names.len());
            match opened.found {
                Found::Nothing => {}
                Found::Record { changes, torn } => {
                    info!(node = id, %path, epoch, names, changes, "restored the state of the previous run");
                    if torn {
                        warn!(
                            node = id,
                            "the state log ended in a change that was not whole \
                            (cut short or damaged): restored what came before it"
                        );
                    }
                }
                Found::Migrated => info!(node = id, %path, epoch, names,
                    "restored the state of the previous run from the earlier single-file format, \
                     now a snapshot and a log"),
                Found::NotUnderstood => {
                    warn!(
                        node = id,
                        "state file of the earlier format not understood: starting afresh"
                    )
                }
            }
            algo.restored = opened.restored;
            Some(opened.file)
        }
    };
    let engine = Engine::new(algo, cfg.cluster.mutex, cfg.cluster.election, Duration::ZERO);
    let hello = Hello {
        cluster: cfg.cluster.name.clone(),
        node: NodeId(id),
        protocol: PROTOCOL_VERSION,
        mutex: cfg.cluster.mutex.name.to_string(),
        election: cfg.cluster.election.name.to_string(),
        detector: cfg.timing().detector.to_string(),
        boot: incarnation,
        expects: None,
        delivered: 0,
        dial_back: false,
        partitions: cfg.cluster.partitions.name().to_string(),
    };
    let peers: Vec<(NodeId, String)> =
        cfg.nodes.iter().filter(|n| n.id != id).map(|n| (NodeId(n.id), n.peer.clone())).collect();
    let (peer_handles, lanes) = Peers::new(&peers);
    let peer_handles = Arc::new(peer_handles);
    let allow_faults = cfg.security.allow_faults;
    let faults = Faults::new(peers.iter().map(|(p, _)| *p).collect(), incarnation, allow_faults);
    let faults = Arc::new(Injector::new(faults));
    if allow_faults {
        warn!(id, "fault injection is allowed ([security] allow_faults): for labs and tests only");
    }
    let storage = match state_file {
        None => Storage::None,
        Some(file) if cfg.cluster.state_sync => Storage::Synced(StateWriter::spawn(file)),
        Some(file) => Storage::Unsynced(file),
    };
    let span = tracing::info_span!("node", id);
    match (&certs, &secret) {
        (Some(certs), _) if !certs.client_cert_auth() => info!(parent: &span,
            "TLS on every port; clients are not asked for a certificate ([security] \
             client_cert_auth): anyone who reaches the client port may take locks"),
        (Some(_), _) => info!(parent: &span, "TLS on every port, clients with certificates"),
        (None, None) => warn!(parent: &span, "no secret configured ([security] secret_file): \
            peers and clients are not authenticated; anyone who reaches this node's ports can \
            speak for a member"),
        (None, Some(_)) => {}
    }
    let events = Arc::new(Events::new(NodeId(id)));
    let limits = Limits { max_pending: cfg.limits.max_pending, max_names: cfg.limits.max_names };
    let metrics = Metrics::default();
    let locks = Arc::new(Locks::new(limits, metrics.clone()));
    let (notices, notices_rx) = mpsc::unbounded_channel();
    let outlets = Outlets {
        storage,
        lock_delay: cfg.cluster.lock_delay,
        peers: peer_handles.clone(),
        faults: faults.clone(),
        events: events.clone(),
        locks: locks.clone(),
        metrics,
        notices,
    };
    let agent = Arc::new(Agent::new(Parts { engine, hello, outlets }));
    let lock = match (&certs, secret) {
        (Some(certs), _) => Lock::Tls(certs.clone()),
        (None, Some(secret)) => Lock::Secret(secret),
        (None, None) => Lock::Open,
    };
    let admission = Arc::new(Admission::new(
        NodeId(id),
        cfg.cluster.name.clone(),
        lock,
        agent.metrics().clone(),
    ));
    let transport = Arc::new(Transport {
        agent: agent.clone(),
        peers: peer_handles.clone(),
        admission: admission.clone(),
        faults: faults.clone(),
    });
    // Waiters are listed in timestamp order where the algorithm serves
    // them so: the fair ones, under the classic priority.
    let timestamp_order =
        cfg.cluster.mutex.claims.fair && cfg.cluster.priority == Priority::Timestamp;
    let cluster = Arc::new(Cluster::new(agent.clone(), locks.clone(), timestamp_order));
    let shared: Arc<Shared> = Arc::new(Shared {
        agent: agent.clone(),
        locks: locks.clone(),
        cluster: cluster.clone(),
        events: events.clone(),
        faults: faults.clone(),
        peers: peer_handles.clone(),
        lock_delay: cfg.cluster.lock_delay,
        default_permits: u32::try_from(cfg.cluster.count).unwrap_or(u32::MAX),
    });
    info!(parent: &span, peer = ?listeners.peer.local_addr().ok(), client = ?listeners.client.local_addr().ok(),
        mutex = %cfg.cluster.mutex, election = %cfg.cluster.election, cluster = %cfg.cluster.name, "node starting");

    let (trigger, shutdown_signal) = Trigger::new();
    let mut tasks = JoinSet::new();
    let a = agent.clone();
    let stop = shutdown_signal.clone();
    tasks.spawn(async move { a.run_timers(stop).await }.instrument(span.clone()));
    let a = agent.clone();
    let stop = shutdown_signal.clone();
    tasks.spawn(async move { a.release_durable(stop).await }.instrument(span.clone()));
    let c = cluster.clone();
    let stop = shutdown_signal.clone();
    tasks.spawn(async move { c.run(notices_rx, stop).await }.instrument(span.clone()));
    let (l, a) = (locks.clone(), agent.clone());
    let stop = shutdown_signal.clone();
    let expiry = async move {
        let follow = |name: &coterie_core::Name| {
            let _ = a.sync(name);
        };
        l.expire_delays(|| a.now(), follow, stop).await
    };
    tasks.spawn(expiry.instrument(span.clone()));
    if let Some(certs) = certs {
        let stop = shutdown_signal.clone();
        let metrics = agent.metrics().clone();
        tasks.spawn(certs.watch(metrics, stop).instrument(span.clone()));
    }
    for (peer, lane) in lanes {
        tasks.spawn(delay_lane(transport.clone(), peer, lane, shutdown_signal.clone()));
    }
    // Each pair of nodes shares one connection, which the lower id dials.
    for &(peer, _) in &peers {
        let (t, stop) = (transport.clone(), shutdown_signal.clone());
        if peer.0 > id {
            tasks.spawn(dial_task(t, peer, stop).instrument(span.clone()));
        } else {
            tasks.spawn(call_task(t, peer, stop).instrument(span.clone()));
        }
    }
    let peer_port = Listener {
        listener: listeners.peer,
        port: Port::Peer,
        admission: admission.clone(),
        max: usize::MAX >> 4,
    };
    let t = transport.clone();
    let serve = move |stream, from, stop| serve_peer(t.clone(), stream, from, stop);
    tasks.spawn(peer_port.run(serve, shutdown_signal.clone()).instrument(span.clone()));
    let client_port = Listener {
        listener: listeners.client,
        port: Port::Client,
        admission: admission.clone(),
        max: cfg.limits.max_clients,
    };
    let (api_shared, api_admission) = (shared.clone(), admission.clone());
    let serve = move |stream, from, stop| {
        let (admission, shared) = (admission.clone(), shared.clone());
        listener::admitted(admission, stream, from, Port::Client, move |stream| {
            handler::serve(shared, stream, stop)
        })
    };
    tasks.spawn(client_port.run(serve, shutdown_signal.clone()).instrument(span.clone()));
    if let Some(http) = listeners.http {
        let sessions = Arc::new(Sessions::new(api_shared.clone(), cfg.limits.max_sessions));
        let (s, stop) = (sessions.clone(), shutdown_signal.clone());
        tasks.spawn(async move { s.expire_due(stop).await }.instrument(span.clone()));
        let (s, stop) = (sessions.clone(), shutdown_signal.clone());
        tasks.spawn(async move { s.end_taken_back(stop).await }.instrument(span.clone()));
        let metrics = agent.metrics();
        let exporter = Exporter::new(metrics, agent.clone(), locks.clone(), sessions.clone());
        let stop = shutdown_signal.clone();
        let api = Arc::new(Api { shared: api_shared, sessions, tokens, exporter, stop });
        let router = crate::http::router(api);
        let http_port = Listener {
            listener: http,
            port: Port::Http,
            admission: api_admission.clone(),
            max: cfg.limits.max_http,
        };
        let idle = cfg.limits.http_idle;
        let serve = move |stream, from, stop| {
            let router = router.clone();
            listener::admitted(api_admission.clone(), stream, from, Port::Http, move |stream| {
                http_conn::serve(router, stream, idle, stop)
            })
        };
        tasks.spawn(http_port.run(serve, shutdown_signal.clone()).instrument(span.clone()));
    }

    let outcome = tokio::select! {
        _ = shutdown => Ok(()),
        reason = agent.broken() => {
            error!(parent: &span, "stopping: stable storage failed: {reason}");
            Err(NodeError::Storage(reason))
        }
    };
    info!(parent: &span, "node stopping");
    trigger.fire();
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(2), drain).await.is_err() {
        tasks.abort_all();
    }
    outcome
}

/// Makes room for the connections `[limits]` allows: raises the process's
/// soft limit on open files toward its hard limit, as far as they need
/// (as Go's runtime does at start), and warns when even the hard limit is
/// short — the node would then fail to accept before its own caps refuse.
fn make_room_for_connections(cfg: &Config, http: bool) {
    let l = &cfg.limits;
    let connections = l.max_clients + if http { l.max_http } else { 0 };
    // Peer links both ways, the state file, the log, a margin.
    let needed = (connections + 2 * cfg.nodes.len() + 64) as libc::rlim_t;
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read or write only the struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 || limit.rlim_cur >= needed
    {
        return;
    }
    let raised = libc::rlimit { rlim_cur: needed.min(limit.rlim_max), rlim_max: limit.rlim_max };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        limit.rlim_cur = raised.rlim_cur;
    }
    if limit.rlim_cur < needed {
        warn!(
            open_files = limit.rlim_cur,
            needed,
            "[limits] max_clients and max_http allow more connections than this process may \
             open files: raise its limit (ulimit -n, LimitNOFILE=) or lower theirs"
        );
    }
}

/// The HTTP API's tokens: required with a secret (and no TLS); without
/// one, the API is served on loopback only unless clients show
/// certificates (TLS with `client_cert_auth`) or `[security] api_open`
/// says otherwise.
fn api_tokens(
    cfg: &Config,
    secret: bool,
    by_certificate: bool,
    http: &TcpListener,
) -> Result<Option<Vec<Vec<u8>>>, NodeError> {
    let addr =
        http.local_addr().map_err(|source| NodeError::Bind { addr: "http".into(), source })?;
    let refuse = |why: &str| NodeError::Api { addr: addr.to_string(), why: why.to_string() };
    let tokens = cfg.api_tokens()?;
    match (secret, tokens) {
        (true, None) => Err(refuse(
            "the cluster has a secret, so the API asks for bearer tokens: name a file of them in \
             [security] api_token_file",
        )),
        (_, Some(tokens)) => Ok(Some(tokens)),
        (false, None) if addr.ip().is_loopback() || by_certificate || cfg.security.api_open => {
            Ok(None)
        }
        (false, None) => Err(refuse(
            "without a secret and tokens, the API is served on loopback only (anyone who \
             reaches it could take and release locks); set [security] api_open = true to serve \
             it anyway",
        )),
    }
}
