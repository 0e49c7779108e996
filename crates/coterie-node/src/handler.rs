//! One client connection, as tokio-rs/mini-redis's `Handler` serves one:
//! it reads the client's requests and answers each, until the client goes
//! or the node stops. The connection is the client's *session*: it asks
//! for locks and waits for them (each grant comes on a oneshot channel,
//! the seed's semaphore `s`), releases them, reads the status and the
//! cluster's locks and leaders, injects faults, or turns into a stream of
//! events or of an election's leaders.
//!
//! **Many locks at once.** A request names one lock or several; several
//! are taken all or none, one after the other in name order (bytewise),
//! so that two clients asking for overlapping sets never hold one each
//! and wait for the other's. A timeout, a refusal or the client's loss on
//! the way releases what was taken.
//!
//! **A session is a lease** while it waits for a lock or holds one (and
//! after a ping, until its next other request): its client pings
//! ([`ClientRequest::Ping`]) once a heartbeat, and a session silent for a
//! failure timeout is taken for hung or cut off. A session lost while
//! holding (disconnected, or silent) is released by the node, after the
//! lock delay if one is configured; one lost while waiting gives up its
//! place, so a grant never goes to a client that cannot take it.
//!
//! Everything it asks of the locks it asks of the application's table
//! ([`Locks`]) first, then of the agent ([`Agent::sync`]), which makes
//! the engine follow.

use crate::agent::Agent;
use crate::cluster::Cluster;
use crate::codec::{write_frame, FrameError, FrameReader};
use crate::events::Events;
use crate::faults::Injector;
use crate::locks::{Client, Locks};
use crate::peers::Peers;
use crate::protocol::{
    Acquire, ClientRequest, ClientResponse, FaultCommand, Leader, NodeEvent, WatchEvent,
};
use crate::shutdown::Shutdown;
use coterie_core::engine::RequestError;
use coterie_core::{Fence, Name};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// How long a new connection to the client port may stay silent before
/// its first request (or, with a secret, its handshake).
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The most locks one request may name.
pub const MAX_NAMES_PER_REQUEST: usize = 64;

/// The longest value or client label, in bytes.
pub const MAX_LABEL_LEN: usize = 4096;

/// How long a watch stream waits for more events to send with one.
const WATCH_LINGER: Duration = Duration::from_millis(2);

/// A watch stream writes at once when this many bytes are waiting.
const WATCH_BATCH: usize = 64 * 1024;

/// What every client connection of a node shares.
pub(crate) struct Shared {
    pub(crate) agent: Arc<Agent>,
    pub(crate) locks: Arc<Locks>,
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) events: Arc<Events>,
    pub(crate) faults: Arc<Injector>,
    pub(crate) peers: Arc<Peers>,
    /// `[cluster] lock_delay`.
    pub(crate) lock_delay: Duration,
    /// `[cluster] count`: the permits of a lock asked for without any.
    pub(crate) default_permits: u32,
}

/// A client connection's read half, read a frame at a time.
type Reader = FrameReader<OwnedReadHalf>;

/// What a session waits for from its client, at most.
#[derive(Clone, Copy)]
enum Deadline {
    /// The first request of a connection.
    First,
    /// The next ping of a session under lease: one that waits for a
    /// lock, holds one, or has pinged since its last other request.
    Lease(Duration),
    /// Nothing: the client may think as long as it likes.
    None,
}

/// What came of waiting for one lock.
enum Waited {
    Granted(Fence),
    TimedOut,
    /// The client vanished or fell silent meanwhile.
    Lost,
}

/// One client session; see the module documentation.
struct Handler {
    shared: Arc<Shared>,
    client: Client,
    reader: Reader,
    writer: OwnedWriteHalf,
    /// What the session holds, in name order, and the value it gave.
    holding: Vec<(Name, Fence)>,
    value: Option<String>,
}

/// Serves one client connection until it closes or the node stops. The
/// listener has admitted it (and authenticated it, with a secret).
pub(crate) async fn serve(shared: Arc<Shared>, stream: TcpStream, mut shutdown: Shutdown) {
    let from = stream.peer_addr().ok();
    let _ = stream.set_nodelay(true);
    let (reader, writer) = stream.into_split();
    let session = shared.locks.new_session();
    let client = Client { session, label: format!("session-{session}") };
    let mut h = Handler {
        shared,
        client,
        reader: FrameReader::new(reader),
        writer,
        holding: Vec::new(),
        value: None,
    };
    h.run(from, &mut shutdown).await;
    h.lose();
}

impl Handler {
    async fn run(&mut self, from: Option<std::net::SocketAddr>, shutdown: &mut Shutdown) {
        let session = self.client.session;
        let failure_timeout = self.shared.agent.timing().1;
        // Without a handshake, the first request is what a silent
        // connection is dropped for lacking.
        let mut deadline = Deadline::First;
        loop {
            let silence = async {
                match deadline {
                    Deadline::First => tokio::time::sleep(FIRST_REQUEST_TIMEOUT).await,
                    Deadline::Lease(limit) => tokio::time::sleep(limit).await,
                    Deadline::None => std::future::pending().await,
                }
            };
            let request = tokio::select! {
                // A request that came is read before a silence that ran out
                // meanwhile is believed: after this process was stopped, both
                // are ready at once, and the client was not the silent one.
                biased;
                r = self.reader.next::<ClientRequest>() => r,
                _ = shutdown.recv() => return,
                _ = silence => {
                    if self.shared.faults.paused() {
                        // A paused node is a stopped one that can still be
                        // resumed: its leases do not run out meanwhile. What
                        // came is read once it resumes, and the lease runs anew.
                        self.shared.faults.unpaused().await;
                        continue;
                    }
                    match deadline {
                        Deadline::Lease(limit) => {
                            let silent_ms = limit.as_millis();
                            warn!(?from, session, silent_ms, "client fell silent: its session is lost");
                        }
                        _ => debug!(?from, "a client connection sent nothing: dropped"),
                    }
                    return;
                }
            };
            if matches!(request, Ok(Some(ref r)) if !matches!(r, ClientRequest::Fault(_))) {
                self.shared.faults.unpaused().await;
            }
            let response = match request {
                Ok(Some(ClientRequest::Fault(command))) => self.fault(&command),
                Ok(Some(ClientRequest::Acquire(acquire))) => match self.acquire(acquire).await {
                    Some(r) => r,
                    None => return, // the client vanished or fell silent while waiting
                },
                Ok(Some(ClientRequest::Release)) => self.release(),
                Ok(Some(ClientRequest::Status)) => {
                    let status = self.shared.agent.status();
                    ClientResponse::Status(Box::new(status))
                }
                Ok(Some(ClientRequest::Ping)) => self.pong(),
                Ok(Some(ClientRequest::Watch)) => return self.watch(shutdown).await,
                Ok(Some(ClientRequest::WatchMessages { heartbeats })) => {
                    let events = self.shared.events.clone();
                    let _counted = events.watch_messages(heartbeats);
                    return self.watch(shutdown).await;
                }
                Ok(Some(ClientRequest::Locks { prefix })) => {
                    let (locks, unreachable) =
                        self.shared.cluster.locks(&prefix, failure_timeout).await;
                    ClientResponse::Locks { locks, unreachable }
                }
                Ok(Some(ClientRequest::Leader { name })) => match Name::new(&name) {
                    Ok(name) => ClientResponse::Leader(
                        self.shared.cluster.leader(&name, failure_timeout).await,
                    ),
                    Err(e) => ClientResponse::Error(e.to_string()),
                },
                Ok(Some(ClientRequest::Observe { name })) => match Name::new(&name) {
                    Ok(name) => return self.observe(&name, shutdown).await,
                    Err(e) => ClientResponse::Error(e.to_string()),
                },
                Ok(None) => return,
                Err(FrameError::Io(_)) => return,
                Err(e) => {
                    warn!(?from, "closing client connection: {e}");
                    let _ =
                        write_frame(&mut self.writer, &ClientResponse::Error(e.to_string())).await;
                    return;
                }
            };
            // The lease: while the session holds, and after a ping until the
            // client asks something else, the next ping is due within a
            // failure timeout.
            let pinged = matches!(response, ClientResponse::Pong { .. });
            deadline = if !self.holding.is_empty() || pinged {
                Deadline::Lease(failure_timeout)
            } else {
                Deadline::None
            };
            if write_frame(&mut self.writer, &response).await.is_err() {
                return;
            }
        }
    }

    /// The answer to a keepalive: the node's timing, which the client paces
    /// its pings by.
    fn pong(&self) -> ClientResponse {
        let (heartbeat, failure_timeout) = self.shared.agent.timing();
        ClientResponse::Pong {
            heartbeat_ms: heartbeat.as_millis() as u64,
            failure_timeout_ms: failure_timeout.as_millis() as u64,
        }
    }

    /// Carries out a fault command and answers with the faults in force.
    fn fault(&self, command: &FaultCommand) -> ClientResponse {
        let node = self.shared.agent.id().0;
        match self.shared.faults.command(command) {
            Err(e) => {
                warn!(node, ?command, "fault refused: {e}");
                ClientResponse::Error(e)
            }
            Ok(injected) => {
                warn!(node, ?command, state = ?injected.state, "fault injected");
                if let Some(peers) = injected.reset {
                    self.shared.peers.reset(&peers);
                }
                self.shared.events.emit(NodeEvent::Fault(injected.state.clone()));
                ClientResponse::Faults(injected.state)
            }
        }
    }

    /// Takes every lock `req` names, all or none, and answers with their
    /// fences; `None` when the client vanished or fell silent meanwhile.
    async fn acquire(&mut self, req: Acquire) -> Option<ClientResponse> {
        if !self.holding.is_empty() {
            let why = "this session holds locks already: release them first";
            return Some(ClientResponse::Error(why.into()));
        }
        let names = match self.check(&req) {
            Ok(names) => names,
            Err(why) => return Some(ClientResponse::Error(why)),
        };
        let permits = if req.permits == 0 { self.shared.default_permits } else { req.permits };
        for name in &names {
            if let Err(e) = self.shared.agent.check_permits(name, permits) {
                return Some(ClientResponse::Error(e.to_string()));
            }
        }
        if !req.client.is_empty() {
            self.client.label = req.client.clone();
        }
        self.value = req.value.clone();
        let limit = match (req.timeout_ms, req.try_lock) {
            (Some(ms), _) => Some(Duration::from_millis(ms)),
            // A try waits as long as one failure timeout: long enough for any
            // algorithm's round trips, short enough to be a try.
            (None, true) => Some(self.shared.agent.timing().1),
            (None, false) => None,
        };
        let give_up = limit.map(|d| Instant::now() + d);
        for name in names {
            match self.wait_for(&name, permits, give_up).await {
                Ok(Waited::Granted(fence)) => self.holding.push((name, fence)),
                Ok(Waited::TimedOut) => {
                    self.release();
                    return Some(if req.try_lock {
                        ClientResponse::Busy
                    } else {
                        ClientResponse::TimedOut
                    });
                }
                Ok(Waited::Lost) => return None,
                Err(why) => {
                    self.release();
                    return Some(ClientResponse::Error(why));
                }
            }
        }
        if let Some(value) = &self.value {
            let node = self.shared.agent.id().0;
            for (name, fence) in &self.holding {
                let leader = Leader { node, value: value.clone(), fence: fence.0 };
                self.shared.cluster.announce(name, Some(leader), fence.0);
            }
        }
        let fences = self.holding.iter().map(|(n, f)| (n.to_string(), f.0)).collect();
        Some(ClientResponse::Granted { fences, node: self.shared.agent.id().0 })
    }

    /// The names a request asks for, checked and in the order they are
    /// taken; a one-line reason when they will not do.
    fn check(&self, req: &Acquire) -> Result<Vec<Name>, String> {
        if req.names.len() > MAX_NAMES_PER_REQUEST {
            return Err(format!(
                "{} locks in one request; at most {MAX_NAMES_PER_REQUEST}",
                req.names.len()
            ));
        }
        for (what, text) in [("value", req.value.as_deref()), ("client", Some(&req.client[..]))] {
            if text.is_some_and(|t| t.len() > MAX_LABEL_LEN) {
                return Err(format!("the {what} is longer than {MAX_LABEL_LEN} bytes"));
            }
        }
        let mut names = Vec::with_capacity(req.names.len().max(1));
        for text in &req.names {
            names.push(Name::new(text).map_err(|e| format!("{e}: {text:?}"))?);
        }
        if names.is_empty() {
            names.push(Name::default());
        }
        names.sort();
        if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("the lock {:?} is named twice", twice[0].as_str()));
        }
        Ok(names)
    }

    /// Waits for lock `name` on behalf of the session, until `give_up`.
    ///
    /// A waiting session is under lease as a holding one is: its client
    /// pings while it waits, and one silent for a failure timeout (its
    /// process stopped, its network cut) is lost. Otherwise the grant
    /// would go to a client that cannot take it, and with the session
    /// still open the lock would be held for ever.
    async fn wait_for(
        &mut self,
        name: &Name,
        permits: u32,
        give_up: Option<Instant>,
    ) -> Result<Waited, String> {
        let (tx, mut rx) = oneshot::channel();
        let now = self.shared.agent.now();
        let value = self.value.clone();
        self.shared
            .locks
            .wait(self.client.clone(), name, permits, value, now, tx)
            .map_err(|e| e.to_string())?;
        if let Err(e) = self.shared.agent.sync(name) {
            self.leave(name);
            return Err(match e {
                RequestError::TooManyLocks(_) => format!("{e} ([limits] max_names)"),
                e => e.to_string(),
            });
        }
        let lease = self.shared.agent.timing().1;
        let mut silent_at = Instant::now() + lease;
        loop {
            let timer = async {
                match give_up {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // What the client sent is read first: a ping that came is not
                // taken for silence, nor a departure for a wait.
                biased;
                request = self.reader.next::<ClientRequest>() => match request {
                    Ok(Some(ClientRequest::Ping)) => {
                        silent_at = Instant::now() + lease;
                        let pong = self.pong();
                        if write_frame(&mut self.writer, &pong).await.is_err() {
                            self.lose_wait(name);
                            return Ok(Waited::Lost);
                        }
                    }
                    Ok(Some(other)) => {
                        // Nothing else may be asked before the answer.
                        let why = format!("{other:?} while waiting for a lock: only Ping may be sent");
                        warn!(session = self.client.session, "closing client connection: {why}");
                        self.lose_wait(name);
                        let _ = write_frame(&mut self.writer, &ClientResponse::Error(why)).await;
                        return Ok(Waited::Lost);
                    }
                    // It left (or broke the connection) while waiting.
                    Ok(None) | Err(_) => {
                        self.lose_wait(name);
                        return Ok(Waited::Lost);
                    }
                },
                granted = &mut rx => match granted {
                    Ok(fence) => return Ok(Waited::Granted(fence)),
                    Err(_) => return Err(format!("the wait for {name:?} was dropped")),
                },
                _ = timer => {
                    // The grant may have raced the timer: then it holds and
                    // must let go; either way it leaves the queue.
                    self.leave(name);
                    return Ok(Waited::TimedOut);
                }
                _ = tokio::time::sleep_until(silent_at) => {
                    if self.shared.faults.paused() {
                        self.shared.faults.unpaused().await;
                        silent_at = Instant::now() + lease;
                        continue;
                    }
                    let silent_ms = lease.as_millis();
                    warn!(session = self.client.session, silent_ms, "waiting client fell silent: its request is withdrawn");
                    self.lose_wait(name);
                    return Ok(Waited::Lost);
                }
            }
        }
    }

    /// Takes the session off `name` (waiting or holding) and lets the
    /// agent follow.
    fn leave(&self, name: &Name) {
        if self.shared.locks.leave(self.client.session, name) {
            self.released(name);
        }
        let _ = self.shared.agent.sync(name);
    }

    /// The session was lost while waiting for `name`: its place goes, and
    /// so does everything it took on the way (after the lock delay).
    fn lose_wait(&mut self, name: &Name) {
        self.lose_one(name);
        self.lose();
    }

    fn released(&self, name: &Name) {
        let session = self.client.session;
        self.shared.events.emit(NodeEvent::Released { name: name.to_string(), session });
    }

    /// Lets go of everything the session holds; the answer to a release.
    fn release(&mut self) -> ClientResponse {
        if self.holding.is_empty() {
            return ClientResponse::NotHolding;
        }
        for (name, fence) in std::mem::take(&mut self.holding) {
            self.leave(&name);
            self.resign(&name, fence);
        }
        ClientResponse::Released
    }

    /// A leader let go of election `name`: everyone is told.
    fn resign(&self, name: &Name, fence: Fence) {
        if self.value.is_some() {
            self.shared.cluster.announce(name, None, fence.0);
        }
    }

    /// The session was lost (its client vanished or fell silent): it
    /// gives up what it holds, after the lock delay, if one is configured.
    fn lose(&mut self) {
        for (name, fence) in std::mem::take(&mut self.holding) {
            self.lose_one(&name);
            self.resign(&name, fence);
        }
    }

    fn lose_one(&self, name: &Name) {
        let until = (!self.shared.lock_delay.is_zero())
            .then(|| self.shared.agent.now() + self.shared.lock_delay);
        if self.shared.locks.lose(self.client.session, name, until) {
            info!(session = self.client.session, %name, "client lost while holding: released on its behalf");
            self.released(name);
        }
        let _ = self.shared.agent.sync(name);
    }

    /// Streams the node's events to a watcher until it goes away or the
    /// node stops. The session can hold nothing from here on: its
    /// requests are not read.
    async fn watch(&mut self, shutdown: &mut Shutdown) {
        let mut events = self.shared.events.subscribe();
        let status = self.shared.agent.status();
        let snapshot = NodeEvent::Snapshot {
            coordinator: status.coordinator,
            epoch: status.epoch,
            alive: status.alive,
            joined: status.joined,
        };
        let first =
            WatchEvent { node: status.id, unix_us: crate::protocol::unix_us(), event: snapshot };
        if write_frame(&mut self.writer, &ClientResponse::Event(first)).await.is_err() {
            return;
        }
        debug!(session = self.client.session, "watcher subscribed");
        let mut probe = [0u8; 1];
        let mut batch = Vec::new();
        loop {
            // The first event wakes the stream; what follows within
            // WATCH_LINGER goes out with it in one write, so a busy node
            // wakes its watchers (and makes a system call) once per batch
            // rather than once per event.
            let mut deadline = None;
            loop {
                let linger = async {
                    match deadline {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                let event = tokio::select! {
                    e = events.recv() => e,
                    // A watcher sends nothing more: a read returning is it leaving.
                    _ = self.reader.get_mut().read(&mut probe) => return,
                    _ = shutdown.recv() => return,
                    () = linger => break,
                };
                let event = match event {
                    Ok(e) => e,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        self.shared.events.missed(missed)
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                coterie_core::wire::write_frame(&ClientResponse::Event(event), &mut batch);
                if batch.len() >= WATCH_BATCH {
                    break;
                }
                deadline.get_or_insert_with(|| Instant::now() + WATCH_LINGER);
            }
            if self.writer.write_all(&batch).await.is_err() {
                return;
            }
            batch.clear();
        }
    }

    /// Streams every change of election `name`'s leader, starting with
    /// the leader now, until the observer goes away or the node stops.
    async fn observe(&mut self, name: &Name, shutdown: &mut Shutdown) {
        // Subscribed before asking, so that no change falls between.
        let mut changes = self.shared.cluster.changes();
        let patience = self.shared.agent.timing().1;
        let now = self.shared.cluster.leader(name, patience).await;
        let mut last = now.leader.as_ref().map(|l| l.fence);
        if write_frame(&mut self.writer, &ClientResponse::Leader(now)).await.is_err() {
            return;
        }
        let mut probe = [0u8; 1];
        loop {
            let change = tokio::select! {
                c = Cluster::next_change(&mut changes, name.as_str()) => c,
                _ = self.reader.get_mut().read(&mut probe) => return,
                _ = shutdown.recv() => return,
            };
            let Some(change) = change else { return };
            // What the first answer already showed is not news.
            let fence = change.leader.as_ref().map(|l| l.fence);
            if fence.is_some() && fence <= last {
                continue;
            }
            if change.leader.is_none() && last.is_none() {
                continue;
            }
            last = fence;
            if write_frame(&mut self.writer, &ClientResponse::Leader(change)).await.is_err() {
                return;
            }
        }
    }
}
