//! One client connection, as tokio-rs/mini-redis's `Handler` serves one:
//! it reads the client's requests and answers each, until the client goes
//! or the node stops. The connection is the client's *session*: it asks
//! for locks and waits for them (each grant comes on a oneshot channel,
//! the seed's semaphore `s`), releases them, reads the status and the
//! cluster's locks and leaders, injects faults, or turns into a stream of
//! events or of an election's leaders.
//!
//! What it asks of the locks follows the rules every session follows
//! ([`session`](crate::session)): names taken all or none in name order,
//! a waiting session under lease, a lost one released after the lock
//! delay. Here **the lease is the connection**: while its session waits
//! for a lock or holds one (and after a ping, until its next other
//! request), the client pings ([`ClientRequest::Ping`]) once a heartbeat,
//! and a session silent for a failure timeout is taken for hung or cut
//! off, as is one whose connection closes.

use crate::codec::{write_frame, FrameError, FrameReader};
use crate::locks::{plea_for, Client};
use crate::metrics::Loss;
use crate::protocol::{Acquire, ClientRequest, ClientResponse, FaultCommand, NodeEvent, Revoked};
use crate::session::{Lease, Shared, Taken};
use crate::shutdown::Shutdown;
use crate::stream::{ReadHalf, Stream, WriteHalf};
use coterie_core::{Fence, Name};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tracing::{debug, warn};

/// How long a new connection to the client port may stay silent before
/// its first request (or, with a secret, its handshake).
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a watch stream waits for more events to send with one.
const WATCH_LINGER: Duration = Duration::from_millis(2);

/// A watch stream writes at once when this many bytes are waiting.
const WATCH_BATCH: usize = 64 * 1024;

/// A client connection's read half, read a frame at a time.
type Reader = FrameReader<ReadHalf>;

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

/// One client session; see the module documentation.
struct Handler {
    shared: Arc<Shared>,
    client: Client,
    reader: Reader,
    writer: WriteHalf,
    /// Answers held back while the client's next request is already here,
    /// to go out with its answer in one write (a chained release and
    /// acquire cost the client one wake-up, not two).
    unsent: Vec<u8>,
    /// What the session holds, in name order, and the value it gave.
    holding: Vec<(Name, Fence)>,
    value: Option<String>,
}

/// The next name taken back from `session` ([`Locks::take_back`]); a
/// receiver that lagged behind answers with no name (the handler then
/// looks at the table).
///
/// [`Locks::take_back`]: crate::locks::Locks::take_back
async fn taking_back(taken: &mut broadcast::Receiver<(u64, Name)>, session: u64) -> Option<Name> {
    loop {
        match taken.recv().await {
            Ok((s, name)) if s == session => return Some(name),
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return None,
            Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}

/// Serves one client connection until it closes or the node stops. The
/// listener has admitted it (and authenticated it, with a secret).
pub(crate) async fn serve(shared: Arc<Shared>, stream: Stream, mut shutdown: Shutdown) {
    let from = stream.tcp().peer_addr().ok();
    let _ = stream.tcp().set_nodelay(true);
    let (reader, writer) = stream.into_split();
    let session = shared.locks.new_session();
    let client = Client { session, label: format!("session-{session}") };
    let mut h = Handler {
        shared,
        client,
        reader: FrameReader::new(reader),
        writer,
        unsent: Vec::new(),
        holding: Vec::new(),
        value: None,
    };
    let _counted = h.shared.metrics().connection();
    let loss = h.run(from, &mut shutdown).await;
    h.lose(loss);
}

impl Handler {
    /// Serves requests until the session ends: how it ended, should it
    /// hold anything then.
    async fn run(&mut self, from: Option<std::net::SocketAddr>, shutdown: &mut Shutdown) -> Loss {
        let session = self.client.session;
        let failure_timeout = self.shared.timing().1;
        let mut taken = self.shared.locks.takings_back();
        let mut pleas = self.shared.locks.pleas();
        // Without a handshake, the first request is what a silent
        // connection is dropped for lacking.
        let mut deadline = Deadline::First;
        loop {
            if let Some(name) = self.took_back(&mut taken) {
                return self.taken_back(&name).await;
            }
            let holding = !self.holding.is_empty();
            let took_back = async {
                match holding {
                    true => taking_back(&mut taken, session).await,
                    false => std::future::pending().await,
                }
            };
            let asked = async {
                match holding {
                    true => match plea_for(&mut pleas, session).await {
                        Some(plea) => plea,
                        None => std::future::pending().await,
                    },
                    false => std::future::pending().await,
                }
            };
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
                _ = shutdown.recv() => return Loss::Disconnected,
                name = took_back => match name.or_else(|| self.lost_hold()) {
                    Some(name) => return self.taken_back(&name).await,
                    None => continue,
                },
                plea = asked => {
                    // Told between answers: the client takes it aside.
                    if self.holding.iter().any(|(n, f)| *n == plea.name && *f == plea.fence) {
                        let push = ClientResponse::RevokeAsked(plea.told());
                        coterie_core::wire::write_frame(&push, &mut self.unsent);
                        if self.flush().await.is_err() {
                            return Loss::Disconnected;
                        }
                    }
                    continue;
                }
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
                            return Loss::Silent;
                        }
                        _ => debug!(?from, "a client connection sent nothing: dropped"),
                    }
                    return Loss::Disconnected;
                }
            };
            if matches!(request, Ok(Some(ref r)) if !matches!(r, ClientRequest::Fault(_))) {
                self.shared.faults.unpaused().await;
            }
            let response = match request {
                Ok(Some(ClientRequest::Fault(command))) => self.fault(&command),
                Ok(Some(ClientRequest::Acquire(acquire))) => match self.acquire(acquire).await {
                    Ok(r) => r,
                    Err(loss) => return loss, // the client vanished or fell silent while waiting
                },
                Ok(Some(ClientRequest::Release)) => self.release(),
                Ok(Some(ClientRequest::Status)) => {
                    let status = self.shared.status();
                    ClientResponse::Status(Box::new(status))
                }
                Ok(Some(ClientRequest::Ping)) => pong(&self.shared),
                Ok(Some(ClientRequest::Watch)) => {
                    self.watch(shutdown).await;
                    return Loss::Disconnected;
                }
                Ok(Some(ClientRequest::WatchMessages { heartbeats })) => {
                    let events = self.shared.events.clone();
                    let _counted = events.watch_messages(heartbeats);
                    self.watch(shutdown).await;
                    return Loss::Disconnected;
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
                Ok(Some(ClientRequest::Revoke { name, reason })) => {
                    self.revoke(&name, reason, failure_timeout).await
                }
                Ok(Some(ClientRequest::Observe { name })) => match Name::new(&name) {
                    Ok(name) => {
                        self.observe(&name, shutdown).await;
                        return Loss::Disconnected;
                    }
                    Err(e) => ClientResponse::Error(e.to_string()),
                },
                Ok(None) | Err(FrameError::Io(_)) => return Loss::Disconnected,
                Err(e) => {
                    warn!(?from, "closing client connection: {e}");
                    let _ = self.flush().await;
                    let _ =
                        write_frame(&mut self.writer, &ClientResponse::Error(e.to_string())).await;
                    return Loss::Disconnected;
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
            coterie_core::wire::write_frame(&response, &mut self.unsent);
            if self.reader.has_frame() {
                continue;
            }
            if self.flush().await.is_err() {
                return Loss::Disconnected;
            }
        }
    }

    /// A hold of this session's the node gave up since it last looked,
    /// if any (a lagging receiver looks at the table itself).
    fn took_back(&self, taken: &mut broadcast::Receiver<(u64, Name)>) -> Option<Name> {
        let session = self.client.session;
        loop {
            match taken.try_recv() {
                Ok((s, name)) if s == session => return Some(name),
                Ok(_) => {}
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    if let Some(name) = self.lost_hold() {
                        return Some(name);
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// A name this session believes it holds that the table says it does
    /// not: what a receiver that lagged behind looks for.
    fn lost_hold(&self) -> Option<Name> {
        let (session, locks) = (self.client.session, &self.shared.locks);
        let lost = self.holding.iter().find(|(name, fence)| !locks.holds(session, name, *fence));
        lost.map(|(name, _)| name.clone())
    }

    /// The node gave up `name`, which this session held: its lease ran
    /// out, and a majority of the cluster may grant the lock again. The
    /// client hears why, and the session ends: whatever else it held here
    /// was given up with it.
    async fn taken_back(&mut self, name: &Name) -> Loss {
        self.holding.retain(|(n, _)| n != name);
        let why = format!(
            "node {} lost its quorum's lease while this session held {name:?}: a majority may \
             grant it again",
            self.shared.node().0
        );
        warn!(session = self.client.session, %name, "holder told its lock is lost: no quorum");
        let _ = self.flush().await;
        let _ = write_frame(&mut self.writer, &ClientResponse::Error(why)).await;
        Loss::NoQuorum
    }

    /// Asks every holder of `name` to let go ([`ClientRequest::Revoke`]).
    async fn revoke(
        &self,
        name: &str,
        reason: Option<String>,
        patience: Duration,
    ) -> ClientResponse {
        match self.shared.revoke(name, reason, patience).await {
            Ok((holders, unreachable)) => {
                ClientResponse::Revoked(Revoked { name: name.to_string(), holders, unreachable })
            }
            Err(e) => ClientResponse::Error(e.to_string()),
        }
    }

    /// Sends the answers held back.
    async fn flush(&mut self) -> std::io::Result<()> {
        send_unsent(&mut self.writer, &mut self.unsent).await
    }

    /// Carries out a fault command and answers with the faults in force.
    fn fault(&self, command: &FaultCommand) -> ClientResponse {
        let node = self.shared.node().0;
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
    /// fences; how the session was lost if the client vanished or fell
    /// silent meanwhile.
    async fn acquire(&mut self, req: Acquire) -> Result<ClientResponse, Loss> {
        if !self.holding.is_empty() {
            let why = "this session holds locks already: release them first";
            return Ok(ClientResponse::Error(why.into()));
        }
        let shared = self.shared.clone();
        let asked = match shared.ask(&req) {
            Ok(asked) => asked,
            Err(why) => return Ok(ClientResponse::Error(why.to_string())),
        };
        if !req.client.is_empty() {
            self.client.label = req.client.clone();
        }
        self.value = req.value.clone();
        let lease = shared.timing().1;
        let mut pings = Pings {
            reader: &mut self.reader,
            writer: &mut self.writer,
            unsent: &mut self.unsent,
            shared: &shared,
            session: self.client.session,
            lease,
            silent_at: Instant::now() + lease,
        };
        Ok(match shared.take(&self.client, &asked, &mut pings).await {
            Taken::Granted(held) => {
                let fences = held.iter().map(|(n, f)| (n.to_string(), f.0)).collect();
                self.holding = held;
                ClientResponse::Granted { fences, node: shared.node().0 }
            }
            Taken::Busy => ClientResponse::Busy,
            Taken::TimedOut => ClientResponse::TimedOut,
            Taken::Refused(why) => ClientResponse::Error(why.to_string()),
            Taken::Lost(loss) => return Err(loss),
        })
    }

    /// Lets go of everything the session holds; the answer to a release.
    fn release(&mut self) -> ClientResponse {
        if self.holding.is_empty() {
            return ClientResponse::NotHolding;
        }
        let led = self.value.is_some();
        for (name, fence) in std::mem::take(&mut self.holding) {
            self.shared.release(self.client.session, &name, fence, led);
        }
        ClientResponse::Released
    }

    /// The session was lost (its client vanished or fell silent): it
    /// gives up what it holds, after the lock delay, if one is configured.
    fn lose(&mut self, loss: Loss) {
        let led = self.value.is_some();
        for (name, fence) in std::mem::take(&mut self.holding) {
            self.shared.lose(self.client.session, &name, led.then_some(fence), loss);
        }
    }

    /// Streams the node's events to a watcher until it goes away or the
    /// node stops. The session can hold nothing from here on: its
    /// requests are not read.
    async fn watch(&mut self, shutdown: &mut Shutdown) {
        if self.flush().await.is_err() {
            return;
        }
        let mut events = self.shared.events.subscribe();
        let first = self.shared.events.snapshot(self.shared.status());
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
            if crate::codec::write_out(&mut self.writer, &batch).await.is_err() {
                return;
            }
            batch.clear();
        }
    }

    /// Streams every change of election `name`'s leader, starting with
    /// the leader now, until the observer goes away or the node stops. The
    /// observer's pings are answered, so that it can tell a node that hangs
    /// from an election that does not change; anything else it sends ends
    /// the stream.
    async fn observe(&mut self, name: &Name, shutdown: &mut Shutdown) {
        if self.flush().await.is_err() {
            return;
        }
        let patience = self.shared.timing().1;
        let (now, mut observer) = self.shared.cluster.observe(name, patience).await;
        if write_frame(&mut self.writer, &ClientResponse::Leader(now)).await.is_err() {
            return;
        }
        loop {
            let answer = tokio::select! {
                c = observer.next() => match c {
                    Some(change) => ClientResponse::Leader(change),
                    None => return,
                },
                r = self.reader.next::<ClientRequest>() => match r {
                    Ok(Some(ClientRequest::Ping)) => pong(&self.shared),
                    _ => return,
                },
                _ = shutdown.recv() => return,
            };
            if write_frame(&mut self.writer, &answer).await.is_err() {
                return;
            }
        }
    }
}

/// The answer to a keepalive: the node's timing, which the client paces
/// its pings by.
fn pong(shared: &Shared) -> ClientResponse {
    let (heartbeat, failure_timeout) = shared.timing();
    ClientResponse::Pong {
        heartbeat_ms: heartbeat.as_millis() as u64,
        failure_timeout_ms: failure_timeout.as_millis() as u64,
    }
}

/// The lease of a session waiting on a connection: its client pings once
/// a heartbeat, and one silent for a failure timeout (its process
/// stopped, its network cut), or whose connection closes, is lost.
/// Otherwise the grant would go to a client that cannot take it, and with
/// the session still open the lock would be held for ever.
struct Pings<'a> {
    reader: &'a mut Reader,
    writer: &'a mut WriteHalf,
    /// The session's answers held back, sent before it waits.
    unsent: &'a mut Vec<u8>,
    shared: &'a Shared,
    session: u64,
    lease: Duration,
    silent_at: Instant,
}

/// Writes the answers a session held back (see `Handler::unsent`), if any.
async fn send_unsent(writer: &mut WriteHalf, unsent: &mut Vec<u8>) -> std::io::Result<()> {
    if unsent.is_empty() {
        return Ok(());
    }
    let written = crate::codec::write_out(writer, unsent).await;
    unsent.clear();
    written
}

/// What a waiting connection brought.
enum Heard {
    Request(Result<Option<ClientRequest>, FrameError>),
    Silent,
}

impl Lease for Pings<'_> {
    type Heard = Heard;

    async fn before_wait(&mut self) -> Result<(), Loss> {
        send_unsent(self.writer, self.unsent).await.map_err(|_| Loss::Disconnected)
    }

    async fn listen(&mut self) -> Heard {
        tokio::select! {
            // A request that came is read before a silence that ran out
            // meanwhile is believed.
            biased;
            r = self.reader.next::<ClientRequest>() => Heard::Request(r),
            _ = tokio::time::sleep_until(self.silent_at) => Heard::Silent,
        }
    }

    async fn heard(&mut self, heard: Heard) -> Result<(), Loss> {
        match heard {
            Heard::Request(Ok(Some(ClientRequest::Ping))) => {
                self.silent_at = Instant::now() + self.lease;
                let written = write_frame(self.writer, &pong(self.shared)).await;
                written.map_err(|_| Loss::Disconnected)
            }
            Heard::Request(Ok(Some(other))) => {
                // Nothing else may be asked before the answer.
                let why = format!("{other:?} while waiting for a lock: only Ping may be sent");
                warn!(session = self.session, "closing client connection: {why}");
                let _ = write_frame(self.writer, &ClientResponse::Error(why)).await;
                Err(Loss::Disconnected)
            }
            // It left (or broke the connection) while waiting.
            Heard::Request(Ok(None) | Err(_)) => Err(Loss::Disconnected),
            Heard::Silent if self.shared.faults.paused() => {
                // A paused node's leases do not run out meanwhile.
                self.shared.faults.unpaused().await;
                self.silent_at = Instant::now() + self.lease;
                Ok(())
            }
            Heard::Silent => {
                let silent_ms = self.lease.as_millis();
                warn!(
                    session = self.session,
                    silent_ms, "waiting client fell silent: its request is withdrawn"
                );
                Err(Loss::Silent)
            }
        }
    }
}
