//! The agent: the node's protocol driver, after the "agent" picture of
//! Jones's lecture notes (22C:116, Iowa, 2002)
//! and quinn's connection driver. It owns the engine (detector → election
//! → mutex), feeds it every input (a frame from the transport, a timer, a
//! client's request or release) and carries out every output: frames to
//! the transport, grants to the application's waiting sessions, records to
//! stable storage, events to watchers.
//!
//! Everything that must change together lives in one [`State`] behind a
//! std `Mutex`: the engine, the peers' sessions (so that a frame is
//! numbered in the order the engine sent it, and delivered in the order it
//! was numbered) and the application's queue of waiting sessions. The
//! mutex is never held across an `.await`: each input is one critical
//! section that feeds the engine, carries out what it asked and lets go.
//!
//! **Stable storage.** Each output rests on a record the engine handed
//! over ([`Output::Persist`]), and is held back by the [`Gate`] until that
//! record is durable. With `state_sync` the records go to a group-commit
//! writer thread ([`StateWriter`]) and held outputs are released as its
//! flushes land; unsynced, a record is one `pwrite`, made on the spot. A
//! write that fails holds everything back for good, and the node stops
//! with the error.

use crate::auth::{self, Dialler, Refusals, Role, Secret};
use crate::codec::{write_frame, FrameError};
use crate::config::LimitsSection;
use crate::faults::{Fate, Faults};
use crate::gate::Gate;
use crate::links::PeerLinks;
use crate::local::{Due, Handed, LocalQueue};
use crate::protocol::{unix_us, ClientResponse, FaultCommand, NodeEvent, WatchEvent};
use crate::state::StateFile;
use crate::storage::{Durability, StateWriter};
use crate::transport::Transport;
use coterie_core::engine::Output;
use coterie_core::wire::{self, Envelope, Hello};
use coterie_core::{CsState, Engine, Epoch, Fence, NodeId, Status};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, oneshot, watch, Notify};
use tracing::{debug, error, info, warn};

/// Events a slow watcher may fall behind by before it is told it missed
/// some.
const WATCH_BACKLOG: usize = 4096;

/// What changes together, under the agent's one lock.
pub(crate) struct State {
    pub(crate) engine: Engine,
    /// The transport's sessions, one per peer.
    pub(crate) links: PeerLinks,
    /// The application's sessions waiting for the critical section.
    pub(crate) local: LocalQueue,
    /// Outputs waiting for their record to be durable.
    gate: Gate,
    /// The epoch whose first grant was logged at info; later grants of the
    /// same epoch are logged at debug (a line per grant would cost more
    /// than the grant itself at thousands per second).
    logged_epoch: Option<Epoch>,
}

/// How records reach the disk.
pub(crate) enum Storage {
    /// No state directory.
    None,
    /// In place, at once (a few microseconds).
    Unsynced(StateFile),
    /// Flushed by a group-commit thread; outputs wait for it.
    Synced(StateWriter),
}

/// One node's agent; see the module documentation.
pub(crate) struct Agent {
    id: NodeId,
    /// What this node says first on every connection it dials (its
    /// cluster, id, incarnation and algorithms).
    hello: Hello,
    started: Instant,
    state: Mutex<State>,
    /// Injected faults (`coterie fault`).
    faults: Mutex<Faults>,
    /// Whether the node is paused by a fault; inputs wait while it is.
    paused: watch::Sender<bool>,
    /// Poked after every input so the timer task re-reads the deadline.
    deadline_changed: Notify,
    /// What watchers (`coterie watch`) are told.
    events: broadcast::Sender<WatchEvent>,
    /// Watchers that asked for every message, and those of them that
    /// asked for heartbeats too: while there are none, sends and
    /// deliveries cost nothing extra.
    message_watchers: std::sync::atomic::AtomicUsize,
    heartbeat_watchers: std::sync::atomic::AtomicUsize,
    storage: Storage,
    /// Set when stable storage failed: the node stops, with this reason.
    broken: watch::Sender<Option<String>>,
    /// The per-peer handles of the connections' tasks.
    pub(crate) transport: Transport,
    /// `[cluster] lock_delay`.
    lock_delay: Duration,
    /// The cluster's secret, if connections are authenticated.
    secret: Option<Secret>,
    /// Connections refused at the handshake, for a rate-limited log line.
    /// `[limits]`.
    limits: LimitsSection,
    /// Client connections open now, handshakes included.
    clients: std::sync::atomic::AtomicUsize,
    refusals: Refusals,
}

/// What the configuration says of the agent's ways.
pub(crate) struct Settings {
    /// `[cluster] lock_delay`.
    pub(crate) lock_delay: Duration,
    /// The cluster's secret (`[security] secret_file`).
    pub(crate) secret: Option<Secret>,
    /// `[limits]`.
    pub(crate) limits: LimitsSection,
}

/// A watcher of every message, counted in while it lives
/// ([`Agent::watch_messages`]).
pub(crate) struct MessageWatch<'a> {
    agent: &'a Agent,
    heartbeats: bool,
}

impl Drop for MessageWatch<'_> {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.agent.message_watchers.fetch_sub(1, Relaxed);
        if self.heartbeats {
            self.agent.heartbeat_watchers.fetch_sub(1, Relaxed);
        }
    }
}

/// A message's kind from its text (`StateQuery { .. }` is `state_query`),
/// as the algorithms' message counters name it.
fn kind_of(text: &str) -> String {
    let mut kind = String::new();
    for (i, c) in text.chars().take_while(char::is_ascii_alphanumeric).enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            kind.push('_');
        }
        kind.push(c.to_ascii_lowercase());
    }
    kind
}

/// One client connection counted against `[limits] max_clients`.
pub(crate) struct ClientSlot<'a> {
    count: &'a std::sync::atomic::AtomicUsize,
}

impl Drop for ClientSlot<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// What became of a client's request for the lock ([`Agent::ask`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// It waits in the node's queue.
    Queued,
    /// The session already holds the lock.
    AlreadyHolds,
    /// `[limits] max_pending` requests already wait here.
    Full(usize),
}

impl Agent {
    pub(crate) fn new(
        engine: Engine,
        hello: Hello,
        faults: Faults,
        storage: Storage,
        transport: Transport,
        settings: Settings,
    ) -> Agent {
        let peers = engine.config().peers().collect::<Vec<_>>();
        Agent {
            id: engine.id(),
            hello,
            started: Instant::now(),
            state: Mutex::new(State {
                engine,
                links: PeerLinks::new(&peers),
                local: LocalQueue::default(),
                gate: Gate::default(),
                logged_epoch: None,
            }),
            faults: Mutex::new(faults),
            paused: watch::channel(false).0,
            deadline_changed: Notify::new(),
            events: broadcast::channel(WATCH_BACKLOG).0,
            message_watchers: std::sync::atomic::AtomicUsize::new(0),
            heartbeat_watchers: std::sync::atomic::AtomicUsize::new(0),
            storage,
            broken: watch::channel(None).0,
            transport,
            lock_delay: settings.lock_delay,
            secret: settings.secret,
            limits: settings.limits,
            clients: std::sync::atomic::AtomicUsize::new(0),
            refusals: Refusals::default(),
        }
    }

    pub(crate) fn id(&self) -> NodeId {
        self.id
    }

    /// This process's incarnation, named in every handshake.
    pub(crate) fn boot(&self) -> u64 {
        self.hello.boot
    }

    /// This node's Hello.
    pub(crate) fn hello(&self) -> Hello {
        self.hello.clone()
    }

    /// Checks a dialler's Hello against this node's: the reason if it may
    /// not talk to us.
    pub(crate) fn check_hello(&self, theirs: &Hello) -> Result<(), String> {
        let state = self.lock();
        self.hello.check(theirs, &state.engine.config().members)
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug in this process; carrying
        // on with the state it left is better than a cascade of panics.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Feeds one input to the engine (through `f`) and carries out every
    /// output it causes. The lock is taken and released here, with no
    /// `.await` in between.
    pub(crate) fn input<R>(&self, f: impl FnOnce(&mut State, Duration) -> R) -> R {
        let now = self.now();
        let mut state = self.lock();
        let result = f(&mut state, now);
        self.carry_out(&mut state, now);
        if let Some(arrived) = state.local.awaiting_peers() {
            if state.engine.all_peers_heard_since(arrived) {
                state.local.recheck_now();
                self.lock_delay_due(&mut state, now);
                self.carry_out(&mut state, now);
            }
        }
        drop(state);
        self.deadline_changed.notify_one();
        result
    }

    /// Reads or changes the state with no input to the engine (the
    /// transport's bookkeeping of its sessions): nothing to carry out, and
    /// the timer task is not woken.
    pub(crate) fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.lock())
    }

    /// Tells the watchers, if any, that `event` happened.
    pub(crate) fn emit(&self, event: NodeEvent) {
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(WatchEvent { node: self.id.0, unix_us: unix_us(), event });
        }
    }

    /// Whether anyone watches every message.
    fn watching_messages(&self) -> bool {
        self.message_watchers.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// A message's kind and text, for its watchers; `None` for a
    /// heartbeat nobody watches.
    fn describe(&self, state: &State, body: &[u8]) -> Option<(String, String)> {
        let envelope: Envelope = wire::decode(body).ok()?;
        if let Envelope::Heartbeat(_) = envelope {
            if self.heartbeat_watchers.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                return None;
            }
            return Some(("heartbeat".into(), state.engine.describe(&envelope)));
        }
        let text = state.engine.describe(&envelope);
        Some((kind_of(&text), text))
    }

    /// The message numbered `seq` from `peer` was delivered to the
    /// algorithms: told to whoever watches messages.
    pub(crate) fn delivered(&self, peer: NodeId, seq: u64, heartbeat: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        let watched = if heartbeat {
            self.heartbeat_watchers.load(Relaxed) > 0
        } else {
            self.message_watchers.load(Relaxed) > 0
        };
        if watched {
            self.emit(NodeEvent::Delivered { from: peer.0, seq });
        }
    }

    /// Whether a fault pauses the node now.
    pub(crate) fn paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Resolves at once unless a fault paused the node; then when resumed.
    pub(crate) async fn unpaused(&self) {
        if !*self.paused.borrow() {
            return; // the common case, on every message: no subscription
        }
        let mut paused = self.paused.subscribe();
        let _ = paused.wait_for(|p| !*p).await;
    }

    /// Whether a message from `peer` is let in (an injected partition
    /// keeps it out).
    pub(crate) fn admits(&self, peer: NodeId) -> bool {
        self.faults().admits(peer)
    }

    /// The acceptor's side of the handshake on a new connection to the
    /// `port` port, if the node has a secret: who dialled (`None` when the
    /// node runs open), or `Err` when the connection is to be dropped
    /// (logged, at most a line a second).
    pub(crate) async fn admit(
        &self,
        stream: &mut tokio::net::TcpStream,
        from: std::net::SocketAddr,
        port: &str,
    ) -> Result<Option<Dialler>, ()> {
        let Some(secret) = &self.secret else { return Ok(None) };
        match auth::accept(stream, secret, &self.hello.cluster, self.id.0).await {
            Ok(dialler) => Ok(Some(dialler)),
            Err(e) => {
                if port == "client" && matches!(e, auth::AuthError::Frame(FrameError::Wire(_))) {
                    // A client that did not try to authenticate: tell it so
                    // in its own protocol.
                    let why = "this node requires authentication: give the cluster's secret \
                               ([security] secret_file in the configuration, or \
                               COTERIE_SECRET_FILE)";
                    let _ = write_frame(stream, &ClientResponse::Error(why.into())).await;
                }
                if matches!(e, auth::AuthError::Closed) {
                    // Closed without a word: a port probe or a scan.
                    debug!(%from, port, "a connection closed before authenticating");
                } else {
                    let why = format_args!("it failed authentication: {e}");
                    self.refusals.refused(port, from, &why);
                }
                Err(())
            }
        }
    }

    /// The dialler's side of the handshake on a connection to a peer, if
    /// the node has a secret.
    pub(crate) async fn authenticate(
        &self,
        stream: &mut tokio::net::TcpStream,
    ) -> Result<(), auth::AuthError> {
        match &self.secret {
            Some(secret) => {
                auth::dial(stream, secret, &self.hello.cluster, Role::Peer, self.id.0).await?;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Resolves with the reason once stable storage has failed.
    pub(crate) async fn broken(&self) -> String {
        let mut broken = self.broken.subscribe();
        let reason = match broken.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone(),
            Err(_) => None,
        };
        match reason {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }

    fn carry_out(&self, state: &mut State, now: Duration) {
        while let Some((output, rests_on)) = state.engine.poll_output_resting() {
            if let Output::Persist(record) = output {
                self.persist(state, record.encode());
            } else if let Some(output) = state.gate.admit(output, rests_on) {
                self.perform(state, output, now);
            }
        }
    }

    /// Hands a record to stable storage: what follows waits for it.
    fn persist(&self, state: &mut State, record: Vec<u8>) {
        let number = state.gate.hand();
        match &self.storage {
            Storage::None => state.gate.all_written(),
            Storage::Unsynced(file) => match file.store(&record) {
                Ok(()) => state.gate.all_written(),
                Err(e) => {
                    let reason = format!("cannot write {}: {e}", file.path().display());
                    self.fail(state, reason);
                }
            },
            Storage::Synced(writer) => writer.submit(number, record),
        }
    }

    fn fail(&self, state: &mut State, reason: String) {
        if state.gate.fail() {
            error!(
                node = self.id.0,
                "stable storage failed, holding every message back and stopping: {reason}"
            );
            self.broken.send_replace(Some(reason));
        }
    }

    /// Follows the group-commit writer: releases what each flush covers,
    /// and stops the node when a write fails.
    pub(crate) async fn release_durable(&self, mut stop: watch::Receiver<bool>) {
        let Storage::Synced(writer) = &self.storage else {
            return;
        };
        let mut durable = writer.durable();
        loop {
            let latest = durable.borrow_and_update().clone();
            match latest {
                Durability::Upto(generation) => self.input(|state, now| {
                    for output in state.gate.durable_upto(generation) {
                        self.perform(state, output, now);
                    }
                }),
                Durability::Failed(reason) => {
                    let mut state = self.lock();
                    self.fail(&mut state, reason);
                    return;
                }
            }
            tokio::select! {
                changed = durable.changed() => if changed.is_err() { return },
                _ = crate::node::stopped(&mut stop) => return,
            }
        }
    }

    /// Carries out one output the engine asked for.
    fn perform(&self, state: &mut State, output: Output, now: Duration) {
        let id = self.id.0;
        match output {
            Output::Send { to, envelope, kind } => {
                self.transmit(state, to, &envelope, now);
                if kind != "heartbeat" {
                    debug!(node = id, to = to.0, kind, "send");
                }
            }
            Output::Granted { fence } => self.grant(state, fence, now),
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
                if !self.lock_delay.is_zero() {
                    // It may have held: nothing is handed out here until
                    // the lock delay has passed.
                    state.local.block_until(now + self.lock_delay);
                }
                self.emit(NodeEvent::PeerDown { peer: peer.0 });
            }
            // `carry_out` hands records to storage as they come; none is held.
            Output::Persist(record) => self.persist(state, record.encode()),
            Output::Joined => {
                let alive: Vec<u32> = state.engine.status().alive;
                info!(node = id, ?alive, "joined the cluster");
                self.emit(NodeEvent::Joined { alive });
            }
        }
    }

    /// Sends `envelope` to `peer` through whatever faults are in force:
    /// they act above the session, so what they drop is never numbered.
    fn transmit(&self, state: &mut State, peer: NodeId, envelope: &Envelope, now: Duration) {
        let body = wire::encode(envelope);
        match self.faults().outgoing(peer) {
            Fate::Drop => {}
            Fate::Pass if !self.transport.delaying(peer) => self.send_now(state, peer, body, now),
            Fate::Pass => self.transport.delay(peer, Duration::ZERO, body),
            Fate::Delay(d) => self.transport.delay(peer, d, body),
        }
    }

    /// Numbers `body` in `peer`'s session and wakes its connection.
    pub(crate) fn send_now(&self, state: &mut State, peer: NodeId, body: Vec<u8>, now: Duration) {
        let watched = self.watching_messages().then(|| self.describe(state, &body)).flatten();
        let (seq, overflow) = state.links.send(peer, body);
        if let Some((kind, text)) = watched {
            self.emit(NodeEvent::Sent { to: peer.0, seq, kind, text });
        }
        if let Some(dropped) = overflow {
            warn!(
                node = self.id.0,
                peer = peer.0,
                dropped,
                "session to peer overflowed: its unacknowledged frames are dropped and it is \
                 declared failed"
            );
            state.engine.handle_link_down(now, peer);
        }
        self.transport.wake(peer);
    }

    fn grant(&self, state: &mut State, fence: Fence, now: Duration) {
        let id = self.id.0;
        if !self.lock_delay.is_zero() {
            // The holder this grant follows may have died with its node,
            // and the node that handed the lock on noticed before this one
            // did. So the grant waits until every peer counted up has been
            // heard from since it came: a dead one never is, and is
            // suspected, and then the lock delay runs. The node asks every
            // peer for a heartbeat at once (a round trip, not a heartbeat
            // period), looks again as each arrives ([`Agent::input`]), and
            // by a fifth of a heartbeat period at the latest.
            let arrived = state.local.arrived(now);
            if !state.engine.all_peers_heard_since(arrived) {
                if arrived == now {
                    state.engine.probe_peers(now);
                }
                let heartbeat = state.engine.config().timing.heartbeat;
                state.local.hold_back(fence, now + heartbeat / 5);
                debug!(
                    node = id,
                    fence = fence.0,
                    "grant held back until every peer is heard from"
                );
                self.deadline_changed.notify_one();
                return;
            }
        }
        let session = match state.local.grant(fence, now) {
            Handed::To(session) => session,
            Handed::Later => {
                debug!(node = id, fence = fence.0, "grant held back by the lock delay");
                self.deadline_changed.notify_one();
                return;
            }
            Handed::Nobody => {
                // Everyone who asked has gone: give it back.
                debug!(node = id, fence = fence.0, "grant with no waiter, releasing");
                state.engine.release(now);
                return;
            }
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

    /// Sleeps until the engine's (or the lock delay's) next deadline and
    /// fires it, until the node stops.
    pub(crate) async fn run_timers(&self, mut stop: watch::Receiver<bool>) {
        loop {
            let deadline = {
                let state = self.lock();
                let deadlines = [state.engine.next_deadline(), state.local.deadline()];
                deadlines.into_iter().flatten().min()
            };
            let wake = deadline.map(|d| tokio::time::Instant::from_std(self.started + d));
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => {
                    self.unpaused().await;
                    self.input(|s, now| {
                        s.engine.handle_timeout(now);
                        self.lock_delay_due(s, now);
                    });
                }
                _ = self.deadline_changed.notified() => {}
                _ = crate::node::stopped(&mut stop) => return,
            }
        }
    }

    // ---- what the application asks of the agent ----

    /// A new client session's number.
    pub(crate) fn new_session(&self) -> u64 {
        self.lock().local.new_session()
    }

    /// Puts `session` in the queue for the critical section, to be granted
    /// through `grant`, and asks the engine if the node is idle. `false`
    /// if the session already holds.
    pub(crate) fn ask(&self, session: u64, grant: oneshot::Sender<Fence>) -> Asked {
        self.input(|s, now| {
            if s.local.waiting() >= self.limits.max_pending {
                return Asked::Full(self.limits.max_pending);
            }
            if !s.local.wait(session, grant) {
                return Asked::AlreadyHolds;
            }
            if s.engine.cs_state() == CsState::Idle {
                s.engine.request(now);
            }
            Asked::Queued
        })
    }

    /// Counts a new client connection in, unless `[limits] max_clients`
    /// are open already: then `Err` with the limit. The count goes down
    /// when the returned guard is dropped.
    pub(crate) fn client_slot(&self) -> Result<ClientSlot<'_>, usize> {
        use std::sync::atomic::Ordering;
        let max = self.limits.max_clients;
        self.clients
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .map(|_| ClientSlot { count: &self.clients })
            .map_err(|_| max)
    }

    /// Whether connections must authenticate (the node has a secret).
    pub(crate) fn authenticates(&self) -> bool {
        self.secret.is_some()
    }

    /// Logs (at most a line a second) that a connection was turned away.
    pub(crate) fn turned_away(&self, port: &str, from: std::net::SocketAddr, why: &str) {
        self.refusals.refused(port, from, &why);
    }

    /// Lets `session` go, whether it holds or waits; if it held, the node
    /// releases and asks again for the next waiter. `true` if it held.
    pub(crate) fn leave(&self, session: u64) -> bool {
        self.input(|s, now| {
            if !s.local.leave(session) {
                return false;
            }
            self.emit(NodeEvent::Released { session });
            s.engine.release(now);
            if s.local.anyone_waiting() {
                s.engine.request(now);
            }
            true
        })
    }

    /// `session` was lost (its client vanished or fell silent): it gives
    /// up its place, and if it held, the node holds on its behalf for the
    /// lock delay, then releases. `true` if it held.
    pub(crate) fn lose(&self, session: u64) -> bool {
        if self.lock_delay.is_zero() {
            return self.leave(session);
        }
        self.input(|s, now| {
            if !s.local.lose(session, now + self.lock_delay) {
                return false;
            }
            self.emit(NodeEvent::Released { session });
            true
        })
    }

    /// Carries out what the lock delay lets happen by `now`.
    fn lock_delay_due(&self, state: &mut State, now: Duration) {
        match state.local.due(now) {
            Some(Due::Release) => {
                info!(node = self.id.0, "lock delay over: releasing for the lost session");
                state.engine.release(now);
                if state.local.anyone_waiting() {
                    state.engine.request(now);
                }
            }
            Some(Due::Grant(fence)) => self.grant(state, fence, now),
            None => {}
        }
    }

    /// The node's heartbeat period.
    pub(crate) fn heartbeat(&self) -> Duration {
        self.lock().engine.config().timing.heartbeat
    }

    /// How long a peer may be silent before it is suspected.
    pub(crate) fn failure_timeout(&self) -> Duration {
        self.lock().engine.config().timing.failure_timeout
    }

    /// The node's status, for `coterie status`, its sessions included.
    pub(crate) fn status(&self) -> Status {
        let state = self.lock();
        Status { sessions: state.links.status(), ..state.engine.status() }
    }

    /// A subscription to the node's events, and the snapshot that opens
    /// the stream (taken after subscribing, so nothing falls between).
    /// Counts a watcher of every message (and of heartbeats, if asked) in,
    /// until the returned guard is dropped.
    pub(crate) fn watch_messages(&self, heartbeats: bool) -> MessageWatch<'_> {
        use std::sync::atomic::Ordering::Relaxed;
        self.message_watchers.fetch_add(1, Relaxed);
        if heartbeats {
            self.heartbeat_watchers.fetch_add(1, Relaxed);
        }
        MessageWatch { agent: self, heartbeats }
    }

    pub(crate) fn watch(&self) -> (broadcast::Receiver<WatchEvent>, WatchEvent) {
        let events = self.events.subscribe();
        let status = self.status();
        let snapshot = NodeEvent::Snapshot {
            coordinator: status.coordinator,
            epoch: status.epoch,
            alive: status.alive,
            joined: status.joined,
        };
        (events, WatchEvent { node: self.id.0, unix_us: unix_us(), event: snapshot })
    }

    /// Carries out a fault command and answers with the faults in force.
    pub(crate) fn fault(&self, command: &FaultCommand) -> ClientResponse {
        let mut faults = self.faults();
        if let Err(e) = faults.permits(command) {
            warn!(node = self.id.0, ?command, "fault refused: not allowed by the configuration");
            return ClientResponse::Error(e);
        }
        let reset = match command {
            FaultCommand::Reset { peers } => match faults.targets(peers) {
                Ok(peers) => Some(peers),
                Err(e) => return ClientResponse::Error(e),
            },
            other => {
                if let Err(e) = faults.apply(other) {
                    return ClientResponse::Error(e);
                }
                None
            }
        };
        let state = faults.state();
        drop(faults);
        warn!(node = self.id.0, ?command, ?state, "fault injected");
        if let Some(peers) = reset {
            self.transport.reset(&peers);
        }
        self.paused.send_replace(state.paused);
        self.emit(NodeEvent::Fault(state.clone()));
        ClientResponse::Faults(state)
    }
}
