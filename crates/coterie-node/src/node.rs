//! One node's runtime, after seed 002's "agent" picture: a tokio process
//! whose **agent** owns the sockets and timers and feeds everything into the
//! engine, and whose **application task** serves the node's clients.
//!
//! - The agent: a dialer task per peer (outbound frames, with a Hello that
//!   names cluster, node, protocol and algorithms), a reader task per
//!   inbound peer connection, and a timer task that sleeps until the
//!   engine's next deadline.
//! - The application task: accepts client connections; each session asks
//!   for the critical section, waits for it on a oneshot channel (the seed's
//!   semaphore `s`), and releases. A session that disconnects while holding
//!   is released by the node; one that disconnects while waiting gives up
//!   its place.
//!
//! Both share the engine and the local queue of waiting sessions behind a
//! std `Mutex`. It is never held across an `.await`: every critical section
//! feeds one input, carries out the outputs (queueing frames on unbounded
//! channels, which never blocks) and lets go.

use crate::codec::{read_frame, write_frame, FrameError};
use crate::config::Config;
use crate::faults::{Fate, Faults};
use crate::protocol::{unix_us, ClientRequest, ClientResponse, NodeEvent, WatchEvent};
use crate::state::StateFile;
use coterie_core::engine::Output;
use coterie_core::wire::{self, Hello, PeerFrame, PROTOCOL_VERSION};
use coterie_core::{CsState, Engine, Fence, NodeId, Restored, Status};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc, oneshot, watch, Notify};
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn, Instrument};

/// How long a dialled peer has to answer our Hello, and a new connection to
/// send its own.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// Frames kept for a peer while its connection is (re)established. Older
/// ones are dropped first; the algorithms tolerate loss to a peer that is
/// down, and a peer that is merely slow to connect needs only the recent.
const BACKLOG: usize = 1024;
/// Events a slow watcher may fall behind by before it is told it missed
/// some.
const WATCH_BACKLOG: usize = 4096;
/// Redial delays grow from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(20), Duration::from_secs(1));

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
    let listen = |addr: String| async move {
        TcpListener::bind(&addr).await.map_err(|source| NodeError::Bind { addr, source })
    };
    Ok(Listeners { peer: listen(me.peer.clone()).await?, client: listen(me.client.clone()).await? })
}

/// A session waiting for the critical section.
struct Waiter {
    session: u64,
    grant: oneshot::Sender<Fence>,
}

/// The node's own queue of client sessions: the algorithms grant the
/// *node*; the node hands each grant to one session at a time.
#[derive(Default)]
struct LocalQueue {
    waiters: VecDeque<Waiter>,
    /// The session holding, and its fence.
    holder: Option<(u64, Fence)>,
    next_session: u64,
}

/// What the agent and the application share.
struct State {
    engine: Engine,
    local: LocalQueue,
    /// The epoch whose first grant was logged at info; later grants of the
    /// same epoch are logged at debug (a line per grant would cost more
    /// than the grant itself at thousands per second).
    logged_epoch: Option<coterie_core::Epoch>,
}

/// Frames held back for one peer, each with the moment it is due, and how
/// many are waiting.
type DelayLane = (mpsc::UnboundedSender<(Instant, Vec<u8>)>, Arc<AtomicUsize>);

/// Everything a node's tasks need, shared through an `Arc`.
struct Inner {
    id: NodeId,
    hello: Hello,
    started: Instant,
    /// Outbound frame queues, one per peer.
    links: BTreeMap<NodeId, mpsc::UnboundedSender<Vec<u8>>>,
    /// Injected faults (`coterie fault`).
    faults: Mutex<Faults>,
    /// Whether the node is paused by a fault; inputs wait while it is.
    paused: watch::Sender<bool>,
    /// Per peer: frames held back by an injected delay, in order, and how
    /// many are waiting (while any are, later frames queue behind them).
    lanes: BTreeMap<NodeId, DelayLane>,
    /// Poked after every input so the timer task re-reads the deadline.
    deadline_changed: Notify,
    /// Poked when a peer dials us: it is up, so our dialer to it should
    /// stop backing off and dial now.
    redial: BTreeMap<NodeId, Notify>,
    state: Mutex<State>,
    /// What watchers (`coterie watch`) are told.
    events: broadcast::Sender<WatchEvent>,
    /// Stable storage, if the configuration names a state directory.
    state_file: Option<StateFile>,
}

impl Inner {
    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// Tells the watchers, if any, that `event` happened.
    fn emit(&self, event: NodeEvent) {
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(WatchEvent { node: self.id.0, unix_us: unix_us(), event });
        }
    }

    fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Resolves at once unless a fault paused the node; then when resumed.
    async fn unpaused(&self) {
        if !*self.paused.borrow() {
            return; // the common case, on every message: no subscription
        }
        let mut paused = self.paused.subscribe();
        let _ = paused.wait_for(|p| !*p).await;
    }

    /// Sends `frame` to `peer` through whatever faults are in force.
    fn transmit(&self, peer: NodeId, frame: Vec<u8>) {
        let Some(link) = self.links.get(&peer) else {
            return;
        };
        let (lane, waiting) = &self.lanes[&peer];
        let fate = self.faults().outgoing(peer);
        match fate {
            Fate::Drop => {}
            Fate::Pass if waiting.load(Ordering::Acquire) == 0 => {
                let _ = link.send(frame);
            }
            Fate::Pass | Fate::Delay(_) => {
                let delay = if let Fate::Delay(d) = fate { d } else { Duration::ZERO };
                waiting.fetch_add(1, Ordering::AcqRel);
                let _ = lane.send((Instant::now() + delay, frame));
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug in this process; carrying
        // on with the state it left is better than a cascade of panics.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Feeds one input to the engine (through `f`) and carries out every
    /// output it causes. The lock is taken and released here, with no
    /// `.await` in between.
    fn input<R>(&self, f: impl FnOnce(&mut State, Duration) -> R) -> R {
        let now = self.now();
        let mut state = self.lock();
        let result = f(&mut state, now);
        self.carry_out(&mut state, now);
        drop(state);
        self.deadline_changed.notify_one();
        result
    }

    fn carry_out(&self, state: &mut State, now: Duration) {
        let id = self.id.0;
        while let Some(output) = state.engine.poll_output() {
            match output {
                Output::Send { to, envelope, kind } => {
                    let mut frame = Vec::with_capacity(32);
                    wire::write_frame(&PeerFrame::Message(envelope), &mut frame);
                    self.transmit(to, frame);
                    if kind != "heartbeat" {
                        debug!(node = id, to = to.0, kind, "send");
                    }
                }
                Output::Granted { fence } => {
                    let Some(session) = grant_to_waiter(&mut state.local, fence) else {
                        // Everyone who asked has gone: give it back.
                        debug!(node = id, fence = fence.0, "grant with no waiter, releasing");
                        state.engine.release(now);
                        continue;
                    };
                    self.emit(NodeEvent::Granted { fence: fence.0, session });
                    let epoch = state.engine.epoch();
                    if state.logged_epoch != Some(epoch) {
                        state.logged_epoch = Some(epoch);
                        info!(
                            node = id,
                            session,
                            fence = fence.0,
                            epoch = epoch.0,
                            "first grant of this epoch"
                        );
                    } else {
                        debug!(node = id, session, fence = fence.0, epoch = epoch.0, "granted");
                    }
                }
                Output::Coordinator { leader, epoch } => {
                    info!(
                        node = id,
                        coordinator = leader.0,
                        epoch = epoch.0,
                        round = epoch.round(),
                        "coordinator elected"
                    );
                    self.emit(NodeEvent::Coordinator { leader: leader.0, epoch: epoch.0 });
                }
                Output::PeerUp(peer) => {
                    info!(node = id, peer = peer.0, "peer up");
                    self.emit(NodeEvent::PeerUp { peer: peer.0 });
                }
                Output::PeerDown(peer) => {
                    warn!(node = id, peer = peer.0, "peer down");
                    self.emit(NodeEvent::PeerDown { peer: peer.0 });
                }
                Output::Persist(record) => {
                    // Before the messages that follow it leave.
                    if let Some(file) = &self.state_file {
                        if let Err(e) = file.store(&record.encode()) {
                            error!(node = id, path = %file.path().display(), "cannot write the state file: {e}");
                        }
                    }
                }
                Output::Joined => {
                    let alive: Vec<u32> = state.engine.status().alive;
                    info!(node = id, ?alive, "joined the cluster");
                    self.emit(NodeEvent::Joined { alive });
                }
            }
        }
    }
}

/// Hands `fence` to the first session still waiting; `None` if there is none.
fn grant_to_waiter(local: &mut LocalQueue, fence: Fence) -> Option<u64> {
    while let Some(waiter) = local.waiters.pop_front() {
        if waiter.grant.send(fence).is_ok() {
            local.holder = Some((waiter.session, fence));
            return Some(waiter.session);
        }
    }
    None
}

/// Lets `session` go, whether it holds or waits, and asks again for the next
/// waiter if it held.
fn leave(inner: &Inner, state: &mut State, session: u64, now: Duration) -> bool {
    state.local.waiters.retain(|w| w.session != session);
    if state.local.holder.is_some_and(|(s, _)| s == session) {
        state.local.holder = None;
        inner.emit(NodeEvent::Released { session });
        state.engine.release(now);
        if !state.local.waiters.is_empty() {
            state.engine.request(now);
        }
        true
    } else {
        false
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
    let wall = std::time::SystemTime::now();
    let incarnation = wall.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let since_unix = wall.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let wall_origin = since_unix.saturating_sub(coterie_core::CLUSTER_ERA);
    let started = Instant::now();
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
    };
    let mut links = BTreeMap::new();
    let mut outboxes = Vec::new();
    let mut lanes = BTreeMap::new();
    let mut lane_tasks = Vec::new();
    for peer in cfg.nodes.iter().filter(|n| n.id != id) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (lane_tx, lane_rx) = mpsc::unbounded_channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        let (link, count) = (tx.clone(), waiting.clone());
        lane_tasks.push(move |stop| delay_lane(lane_rx, link, count, stop));
        lanes.insert(NodeId(peer.id), (lane_tx, waiting));
        links.insert(NodeId(peer.id), tx);
        outboxes.push((NodeId(peer.id), peer.peer.clone(), rx));
    }
    let peers: Vec<NodeId> = links.keys().copied().collect();
    let inner = Arc::new(Inner {
        id: NodeId(id),
        hello,
        started,
        redial: links.keys().map(|&p| (p, Notify::new())).collect(),
        links,
        faults: Mutex::new(Faults::new(peers, incarnation)),
        paused: watch::channel(false).0,
        lanes,
        deadline_changed: Notify::new(),
        state: Mutex::new(State { engine, local: LocalQueue::default(), logged_epoch: None }),
        events: broadcast::channel(WATCH_BACKLOG).0,
        state_file,
    });
    let span = tracing::info_span!("node", id);
    info!(parent: &span, peer = ?listeners.peer.local_addr().ok(), client = ?listeners.client.local_addr().ok(),
        mutex = %cfg.cluster.mutex, election = %cfg.cluster.election, cluster = %cfg.cluster.name, "node starting");

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    // The engine queued its first heartbeats when it was built.
    inner.input(|_, _| ());
    tasks.spawn(timer_task(inner.clone(), stop_rx.clone()).instrument(span.clone()));
    for lane in lane_tasks {
        tasks.spawn(lane(stop_rx.clone()));
    }
    for (peer, addr, rx) in outboxes {
        tasks.spawn(
            dial_task(inner.clone(), peer, addr, rx, stop_rx.clone()).instrument(span.clone()),
        );
    }
    let peers = accept_loop(inner.clone(), listeners.peer, stop_rx.clone(), "peer", serve_peer);
    tasks.spawn(peers.instrument(span.clone()));
    let clients =
        accept_loop(inner.clone(), listeners.client, stop_rx.clone(), "client", client_session);
    tasks.spawn(clients.instrument(span.clone()));

    shutdown.await;
    info!(parent: &span, "node stopping");
    let _ = stop_tx.send(true);
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(2), drain).await.is_err() {
        tasks.abort_all();
    }
    Ok(())
}

/// Resolves once the node is told to stop.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn timer_task(inner: Arc<Inner>, mut stop: watch::Receiver<bool>) {
    loop {
        let deadline = inner.lock().engine.next_deadline();
        let wake = deadline.map(|d| tokio::time::Instant::from_std(inner.started + d));
        let sleep = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {
                inner.unpaused().await;
                inner.input(|s, now| s.engine.handle_timeout(now));
            }
            _ = inner.deadline_changed.notified() => {}
            _ = stopped(&mut stop) => return,
        }
    }
}

/// Holds frames to one peer back until they are due (an injected delay),
/// then hands them to the peer's link in the order they were sent.
async fn delay_lane(
    mut frames: mpsc::UnboundedReceiver<(Instant, Vec<u8>)>,
    link: mpsc::UnboundedSender<Vec<u8>>,
    waiting: Arc<AtomicUsize>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let (due, frame) = tokio::select! {
            next = frames.recv() => match next {
                Some(f) => f,
                None => return,
            },
            _ = stopped(&mut stop) => return,
        };
        tokio::select! {
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(due)) => {}
            _ = stopped(&mut stop) => return,
        }
        let _ = link.send(frame);
        waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Keeps one outbound connection to `peer` and writes its frames.
async fn dial_task(
    inner: Arc<Inner>,
    peer: NodeId,
    addr: String,
    mut frames: mpsc::UnboundedReceiver<Vec<u8>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backlog: VecDeque<Vec<u8>> = VecDeque::new();
    let mut backoff = BACKOFF.0;
    // Set after a connection we had closed: the next refused dial means the
    // peer's process is gone.
    let mut lost = false;
    loop {
        // A dial to a peer whose host is gone can hang until its timeout
        // (nothing answers the SYN: a container that was killed, say). If
        // the peer dials us meanwhile it is back: drop the attempt and dial
        // again at once, or our messages to it (our part of its join) would
        // wait out the timeout.
        let attempt = tokio::select! {
            result = connect(&inner, peer, &addr) => result,
            _ = inner.redial[&peer].notified() => continue,
            _ = stopped(&mut stop) => return,
        };
        match attempt {
            Ok(stream) => {
                if lost {
                    debug!(peer = peer.0, "reconnected");
                }
                backoff = BACKOFF.0;
                match pump(stream, &mut frames, &mut backlog, &mut stop).await {
                    Pump::Stopped => return,
                    Pump::Closed => {
                        debug!(peer = peer.0, "connection to peer closed");
                        lost = true;
                        continue; // redial at once: is it still there?
                    }
                }
            }
            Err(DialError::Refused) if lost => {
                // Connection closed, redial refused: the process is gone.
                info!(peer = peer.0, "peer's connection closed and redial refused");
                inner.input(|s, now| s.engine.handle_link_down(now, peer));
                backlog.clear();
                lost = false;
            }
            Err(DialError::Handshake(reason)) => {
                error!(peer = peer.0, %addr, "peer refused this node: {reason}");
                backoff = BACKOFF.1;
            }
            Err(_) => {}
        }
        // Wait before redialling, keeping the newest frames meanwhile; a
        // connection from the peer cuts the wait short.
        let sleep = tokio::time::sleep(backoff);
        tokio::pin!(sleep);
        let poked = inner.redial[&peer].notified();
        tokio::pin!(poked);
        loop {
            tokio::select! {
                _ = &mut sleep => break,
                _ = &mut poked => break,
                frame = frames.recv() => match frame {
                    Some(f) => {
                        if backlog.len() == BACKLOG {
                            backlog.pop_front();
                        }
                        backlog.push_back(f);
                    }
                    None => return,
                },
                _ = stopped(&mut stop) => return,
            }
        }
        backoff = (backoff * 2).min(BACKOFF.1);
    }
}

enum DialError {
    Refused,
    Handshake(String),
    Other,
}

async fn connect(inner: &Inner, peer: NodeId, addr: &str) -> Result<TcpStream, DialError> {
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
            return Err(DialError::Refused)
        }
        Ok(Err(e)) => {
            debug!(peer = peer.0, %addr, "dial failed: {e}");
            return Err(DialError::Other);
        }
        Err(_) => return Err(DialError::Other),
    };
    let _ = stream.set_nodelay(true);
    let mut stream = stream;
    let handshake = async {
        write_frame(&mut stream, &PeerFrame::Hello(inner.hello.clone())).await?;
        let mut buf = Vec::new();
        read_frame::<PeerFrame, _>(&mut stream, &mut buf).await
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(Some(PeerFrame::Welcome))) => {
            info!(peer = peer.0, %addr, "connected to peer");
            Ok(stream)
        }
        Ok(Ok(Some(PeerFrame::Refused(reason)))) => Err(DialError::Handshake(reason)),
        Ok(Ok(Some(other))) => Err(DialError::Handshake(format!("unexpected answer {other:?}"))),
        Ok(Ok(None)) | Ok(Err(_)) | Err(_) => Err(DialError::Other),
    }
}

enum Pump {
    Stopped,
    Closed,
}

/// Writes frames until the connection closes or the node stops. Frames that
/// queued up meanwhile go out in one write.
async fn pump(
    stream: TcpStream,
    frames: &mut mpsc::UnboundedReceiver<Vec<u8>>,
    backlog: &mut VecDeque<Vec<u8>>,
    stop: &mut watch::Receiver<bool>,
) -> Pump {
    let (mut reader, mut writer) = stream.into_split();
    let mut batch: Vec<u8> = backlog.drain(..).flatten().collect();
    let mut probe = [0u8; 64];
    loop {
        if !batch.is_empty() {
            if writer.write_all(&batch).await.is_err() {
                return Pump::Closed;
            }
            batch.clear();
        }
        tokio::select! {
            frame = frames.recv() => match frame {
                Some(f) => {
                    batch.extend_from_slice(&f);
                    while let Ok(more) = frames.try_recv() {
                        batch.extend_from_slice(&more);
                    }
                }
                None => return Pump::Stopped,
            },
            // The peer never writes on this connection: a read returning
            // is the connection closing.
            read = reader.read(&mut probe) => match read {
                Ok(0) | Err(_) => return Pump::Closed,
                Ok(_) => {}
            },
            _ = stopped(stop) => return Pump::Stopped,
        }
    }
}

/// Accepts connections until the node stops, serving each with `serve` in
/// a task of its own. `what` names the port in log lines.
async fn accept_loop<F, Fut>(
    inner: Arc<Inner>,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
    serve: F,
) where
    F: Fn(Arc<Inner>, TcpStream, std::net::SocketAddr, watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, from)) => {
                    conns.spawn(serve(inner.clone(), stream, from, stop.clone()).in_current_span());
                }
                Err(e) => warn!("{what} accept failed: {e}"),
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = stopped(&mut stop) => return,
        }
    }
}

async fn serve_peer(
    inner: Arc<Inner>,
    mut stream: TcpStream,
    from: std::net::SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    let hello = match tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        read_frame::<PeerFrame, _>(&mut stream, &mut buf),
    )
    .await
    {
        Ok(Ok(Some(PeerFrame::Hello(h)))) => h,
        Ok(Ok(None)) => return,
        Ok(Ok(Some(other))) => {
            warn!(%from, "refused peer connection: expected a Hello, got {other:?}");
            return;
        }
        Ok(Err(e)) => {
            warn!(%from, "refused peer connection: {e}");
            return;
        }
        Err(_) => {
            warn!(%from, "refused peer connection: no Hello within {HANDSHAKE_TIMEOUT:?}");
            return;
        }
    };
    let members: Vec<NodeId> = inner.lock().engine.config().members.clone();
    if let Err(reason) = inner.hello.check(&hello, &members) {
        warn!(%from, claimed = hello.node.0, "refused peer connection: {reason}");
        let _ = write_frame(&mut stream, &PeerFrame::Refused(reason)).await;
        return;
    }
    if write_frame(&mut stream, &PeerFrame::Welcome).await.is_err() {
        return;
    }
    let peer = hello.node;
    if let Some(poke) = inner.redial.get(&peer) {
        poke.notify_one();
    }
    loop {
        let frame = tokio::select! {
            f = read_frame::<PeerFrame, _>(&mut stream, &mut buf) => f,
            _ = stopped(&mut stop) => return,
        };
        match frame {
            Ok(Some(PeerFrame::Message(envelope))) => {
                if !inner.faults().admits(peer) {
                    continue; // an injected partition
                }
                inner.unpaused().await;
                if let Err(e) = inner.input(|s, now| s.engine.handle_message(now, peer, envelope)) {
                    warn!(peer = peer.0, "dropped a message: {e}");
                }
            }
            Ok(Some(other)) => {
                warn!(peer = peer.0, "closing peer connection: unexpected {other:?}");
                return;
            }
            Ok(None) => return,
            Err(FrameError::Io(e)) => {
                debug!(peer = peer.0, "peer connection lost: {e}");
                return;
            }
            Err(e) => {
                warn!(peer = peer.0, %from, "closing peer connection: {e}");
                return;
            }
        }
    }
}

/// Serves one client connection. The session *is* the connection: when it
/// closes, whatever the client held or waited for is let go.
async fn client_session(
    inner: Arc<Inner>,
    stream: TcpStream,
    from: std::net::SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.into_split();
    let session = {
        let mut s = inner.lock();
        s.local.next_session += 1;
        s.local.next_session
    };
    let mut buf = Vec::new();
    loop {
        let request = tokio::select! {
            r = read_frame::<ClientRequest, _>(&mut reader, &mut buf) => r,
            _ = stopped(&mut stop) => break,
        };
        if matches!(request, Ok(Some(ref r)) if !matches!(r, ClientRequest::Fault(_))) {
            inner.unpaused().await;
        }
        let response = match request {
            Ok(Some(ClientRequest::Fault(command))) => fault(&inner, &command),
            Ok(Some(ClientRequest::Acquire { timeout_ms, try_lock })) => {
                match acquire(&inner, session, timeout_ms, try_lock, &mut reader).await {
                    Some(r) => r,
                    None => break, // the client vanished while waiting
                }
            }
            Ok(Some(ClientRequest::Release)) => {
                if inner.input(|s, now| leave(&inner, s, session, now)) {
                    ClientResponse::Released
                } else {
                    ClientResponse::NotHolding
                }
            }
            Ok(Some(ClientRequest::Status)) => ClientResponse::Status(Box::new(status(&inner))),
            Ok(Some(ClientRequest::Watch)) => {
                watch_session(&inner, session, &mut reader, &mut writer, &mut stop).await;
                break;
            }
            Ok(None) => break,
            Err(FrameError::Io(_)) => break,
            Err(e) => {
                warn!(%from, "closing client connection: {e}");
                let _ = write_frame(&mut writer, &ClientResponse::Error(e.to_string())).await;
                break;
            }
        };
        if write_frame(&mut writer, &response).await.is_err() {
            break;
        }
    }
    if inner.input(|s, now| leave(&inner, s, session, now)) {
        info!(session, "client left while holding: released on its behalf");
    }
}

/// Streams the node's events to a watcher until it goes away or the node
/// stops. The session can hold nothing from here on: its requests are
/// not read.
async fn watch_session(
    inner: &Inner,
    session: u64,
    reader: &mut tokio::net::tcp::OwnedReadHalf,
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    stop: &mut watch::Receiver<bool>,
) {
    // Subscribe before the snapshot so nothing falls between them.
    let mut events = inner.events.subscribe();
    let snapshot = {
        let s = inner.lock();
        let status = s.engine.status();
        NodeEvent::Snapshot {
            coordinator: status.coordinator,
            epoch: status.epoch,
            alive: status.alive,
            joined: status.joined,
        }
    };
    let first = WatchEvent { node: inner.id.0, unix_us: unix_us(), event: snapshot };
    if write_frame(writer, &ClientResponse::Event(first)).await.is_err() {
        return;
    }
    debug!(session, "watcher subscribed");
    let mut probe = [0u8; 1];
    loop {
        let event = tokio::select! {
            e = events.recv() => e,
            // A watcher sends nothing more: a read returning is it leaving.
            _ = reader.read(&mut probe) => return,
            _ = stopped(stop) => return,
        };
        let event = match event {
            Ok(e) => e,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                let event = NodeEvent::Missed { events: missed };
                WatchEvent { node: inner.id.0, unix_us: unix_us(), event }
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if write_frame(writer, &ClientResponse::Event(event)).await.is_err() {
            return;
        }
    }
}

/// Carries out a fault command and answers with the faults in force.
fn fault(inner: &Inner, command: &crate::protocol::FaultCommand) -> ClientResponse {
    let mut faults = inner.faults();
    if let Err(e) = faults.apply(command) {
        return ClientResponse::Error(e);
    }
    let state = faults.state();
    drop(faults);
    warn!(node = inner.id.0, ?command, ?state, "fault injected");
    inner.paused.send_replace(state.paused);
    inner.emit(NodeEvent::Fault(state.clone()));
    ClientResponse::Faults(state)
}

fn status(inner: &Inner) -> Status {
    inner.lock().engine.status()
}

/// Waits for the critical section on behalf of `session`. `None` when the
/// client disconnected meanwhile (its place is given up).
async fn acquire(
    inner: &Inner,
    session: u64,
    timeout_ms: Option<u64>,
    try_lock: bool,
    reader: &mut tokio::net::tcp::OwnedReadHalf,
) -> Option<ClientResponse> {
    let (tx, rx) = oneshot::channel();
    let refused_at_once = inner.input(|s, now| {
        if s.local.holder.is_some_and(|(h, _)| h == session) {
            return true; // already holds: a second acquire is an error
        }
        s.local.waiters.push_back(Waiter { session, grant: tx });
        if s.engine.cs_state() == CsState::Idle {
            s.engine.request(now);
        }
        false
    });
    if refused_at_once {
        return Some(ClientResponse::Error("this session already holds the lock".into()));
    }
    let failure_timeout = inner.lock().engine.config().timing.failure_timeout;
    let limit = match (timeout_ms, try_lock) {
        (Some(ms), _) => Some(Duration::from_millis(ms)),
        // A try waits as long as one failure timeout: long enough for any
        // algorithm's round trips, short enough to be a try.
        (None, true) => Some(failure_timeout),
        (None, false) => None,
    };
    let timer = async {
        match limit {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let mut probe = [0u8; 1];
    let outcome = tokio::select! {
        granted = rx => granted.ok(),
        _ = timer => None,
        _ = reader.read(&mut probe) => {
            // A client waiting for a grant sends nothing: this is it leaving.
            inner.input(|s, now| leave(inner, s, session, now));
            return None;
        }
    };
    match outcome {
        Some(fence) => Some(ClientResponse::Granted { fence: fence.0, node: inner.id.0 }),
        None => {
            // Timed out. The grant may have raced the timer: then it holds
            // and must let go; either way it leaves the queue.
            inner.input(|s, now| leave(inner, s, session, now));
            Some(if try_lock { ClientResponse::Busy } else { ClientResponse::TimedOut })
        }
    }
}
