//! The agent: the node's protocol driver, after the "agent" picture of
//! Jones's lecture notes (22C:116, Iowa, 2002) and quinn's connection
//! driver. It owns the engine (detector → election → mutex, one instance
//! per lock name) and the peers' sessions, feeds the engine every input (a
//! frame from the transport, a timer, what the application's sessions
//! want) and carries out every output: frames to the transport, grants to
//! the application's [`Locks`], records to stable storage, events to
//! watchers, and what the application task must know ([`Notice`]).
//!
//! What must change together lives in one [`Stack`] behind a std `Mutex`:
//! the engine, the peers' sessions (so that a frame is numbered in the
//! order the engine sent it, and delivered in the order it was numbered),
//! the grants held back by a lock delay, and the outputs waiting for
//! stable storage. The mutex is never held across an `.await`: each input
//! is one critical section that feeds the engine, carries out what it
//! asked and lets go.
//!
//! **What the application wants.** The application's table of sessions
//! ([`Locks`]) is the demand; [`Agent::sync`] makes the engine follow it
//! for one name: ask when a session waits and the node neither holds nor
//! wants the lock, release when the node holds it for nobody. The agent
//! reads the table under its own lock, so every decision for a name is
//! taken against one consistent view of both.
//!
//! **Stable storage.** Each output rests on a record the engine handed
//! over ([`Output::Persist`]), and is held back by the [`Gate`] until that
//! record is durable. With `state_sync` the records go to a group-commit
//! writer thread ([`StateWriter`]) and held outputs are released as its
//! flushes land; unsynced, a record is one `pwrite`, made on the spot. A
//! write that fails holds everything back for good, and the node stops
//! with the error.

use crate::events::Events;
use crate::faults::{Fate, Injector};
use crate::gate::Gate;
use crate::holdback::{Holdback, Verdict};
use crate::links::{Inbound, PeerLinks};
use crate::locks::{Handed, Locks};
use crate::metrics::Metrics;
use crate::peers::Peers;
use crate::protocol::NodeEvent;
use crate::shutdown::Shutdown;
use crate::state::StateFile;
use crate::storage::{Durability, StateWriter};
use coterie_core::engine::{Output, RequestError};
use coterie_core::wire::{self, Envelope, Hello};
use coterie_core::{
    CsState, Demand, Engine, EngineError, Epoch, Fence, Name, NodeId, Stamp, Status, ViewStatus,
};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Notify};
use tracing::{debug, error, info, warn};

/// What changes together, under the agent's one lock.
pub(crate) struct Stack {
    engine: Engine,
    /// The transport's sessions, one per peer.
    links: PeerLinks,
    /// Outputs waiting for their record to be durable.
    gate: Gate,
    /// Grants held back by the lock delay.
    holdback: Holdback,
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

/// What the application task must hear of the agent.
#[derive(Debug)]
pub(crate) enum Notice {
    /// A peer's application task sent this.
    Application {
        /// The sender.
        from: NodeId,
        /// What it sent.
        bytes: Vec<u8>,
    },
    /// A peer is suspected: whatever it held is gone with it.
    PeerDown(NodeId),
    /// A peer is counted up, at start or again after a suspicion: it may
    /// have missed what this node told while it was down.
    PeerUp(NodeId),
}

/// What became of a frame from a peer ([`Agent::deliver`]).
pub(crate) enum Delivery {
    /// Handed to the engine, or dropped by the session as a duplicate.
    Taken,
    /// It could not be used, for this reason (logged by the caller).
    Dropped(String),
    /// It waits until the lock it is for is idle here, for this reason
    /// (logged by the caller): its sender asked with other permits.
    Parked(String),
    /// A newer connection from the peer took over: stop reading this one.
    Superseded,
}

/// Where the engine stands with one lock, for listings.
#[derive(Clone, Debug)]
pub(crate) struct LockView {
    /// Whether the node holds, wants or ignores it.
    pub(crate) state: CsState,
    /// The stamp of the node's request, for the algorithms that order
    /// requests by it.
    pub(crate) stamp: Option<Stamp>,
}

/// What the agent is built from.
pub(crate) struct Parts {
    pub(crate) engine: Engine,
    pub(crate) hello: Hello,
    pub(crate) storage: Storage,
    pub(crate) lock_delay: Duration,
    pub(crate) peers: Arc<Peers>,
    pub(crate) faults: Arc<Injector>,
    pub(crate) events: Arc<Events>,
    pub(crate) locks: Arc<Locks>,
    pub(crate) metrics: Metrics,
    pub(crate) notices: mpsc::UnboundedSender<Notice>,
}

/// One node's agent; see the module documentation.
pub(crate) struct Agent {
    id: NodeId,
    /// What this node says first on every connection it dials (its
    /// cluster, id, incarnation and algorithms).
    hello: Hello,
    started: Instant,
    stack: Mutex<Stack>,
    /// Poked when an input brought the next deadline forward, so the timer
    /// task re-reads it.
    deadline_changed: Notify,
    /// The deadline the timer task sleeps until, in nanoseconds from the
    /// start (`u64::MAX`: none); set and compared under the stack's lock.
    armed: std::sync::atomic::AtomicU64,
    storage: Storage,
    /// Set when stable storage failed: the node stops, with this reason.
    broken: watch::Sender<Option<String>>,
    /// `[cluster] lock_delay`.
    lock_delay: Duration,
    peers: Arc<Peers>,
    faults: Arc<Injector>,
    events: Arc<Events>,
    locks: Arc<Locks>,
    metrics: Metrics,
    notices: mpsc::UnboundedSender<Notice>,
}

impl Agent {
    pub(crate) fn new(parts: Parts) -> Agent {
        let peers: Vec<NodeId> = parts.engine.config().peers().collect();
        Agent {
            id: parts.engine.id(),
            hello: parts.hello,
            started: Instant::now(),
            stack: Mutex::new(Stack {
                engine: parts.engine,
                links: PeerLinks::new(&peers),
                gate: Gate::default(),
                holdback: Holdback::default(),
                logged_epoch: None,
            }),
            deadline_changed: Notify::new(),
            armed: std::sync::atomic::AtomicU64::new(u64::MAX),
            storage: parts.storage,
            broken: watch::channel(None).0,
            lock_delay: parts.lock_delay,
            peers: parts.peers,
            faults: parts.faults,
            events: parts.events,
            locks: parts.locks,
            metrics: parts.metrics,
            notices: parts.notices,
        }
    }

    pub(crate) fn id(&self) -> NodeId {
        self.id
    }

    /// What the node counts, for `/metrics`.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
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
        self.hello.check(theirs, &self.lock().engine.config().members)
    }

    /// The node's clock: time since the agent started.
    pub(crate) fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn lock(&self) -> MutexGuard<'_, Stack> {
        // A panic while holding the lock is a bug in this process; carrying
        // on with the state it left is better than a cascade of panics.
        self.stack.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Feeds one input to the engine (through `f`) and carries out every
    /// output it causes, and every grant held back that may now go. The
    /// lock is taken and released here, with no `.await` in between.
    fn input<R>(&self, f: impl FnOnce(&mut Stack, Duration) -> R) -> R {
        let now = self.now();
        let mut stack = self.lock();
        let result = f(&mut stack, now);
        self.carry_out(&mut stack, now);
        if !self.lock_delay.is_zero() {
            for (name, fence) in stack.holdback.pending() {
                if stack.engine.fences_of(&name).contains(&fence) {
                    self.grant(&mut stack, name, fence, now);
                } else {
                    stack.holdback.forget_grant(&name, fence);
                }
            }
            self.carry_out(&mut stack, now);
        }
        // The timer task is woken only when its sleep must end sooner: it
        // re-reads the deadline whenever it wakes anyway.
        let next = next_deadline(&stack).map_or(u64::MAX, |d| d.as_nanos() as u64);
        if next < self.armed.load(std::sync::atomic::Ordering::Relaxed) {
            self.deadline_changed.notify_one();
        }
        drop(stack);
        result
    }

    /// Reads or changes the peers' sessions (the transport's bookkeeping)
    /// with no input to the engine: nothing to carry out, and the timer
    /// task is not woken.
    pub(crate) fn links<R>(&self, f: impl FnOnce(&mut PeerLinks) -> R) -> R {
        f(&mut self.lock().links)
    }

    // ---- what the transport brings ----

    /// Frame `seq` (acknowledging `ack`) from `peer`'s incarnation `boot`,
    /// read on the connection numbered `connection`: through the
    /// session, and unless an injected partition keeps it out, to the
    /// engine.
    pub(crate) fn deliver(
        &self,
        peer: NodeId,
        (connection, boot): (u64, u64),
        (seq, ack): (u64, u64),
        body: &[u8],
    ) -> Delivery {
        let admitted = self.faults.admits(peer);
        self.input(|s, now| {
            match s.links.receive(peer, connection, boot, seq, ack) {
                Inbound::Superseded => return Delivery::Superseded,
                Inbound::Skip => return Delivery::Taken,
                Inbound::AfterGap(lost) => {
                    warn!(
                        peer = peer.0,
                        lost,
                        "frames from peer were lost (its session overflowed): declared failed"
                    );
                    s.engine.handle_link_down(now, peer);
                }
                Inbound::Deliver => {}
            }
            if !admitted {
                return Delivery::Taken; // an injected partition, above the session
            }
            let envelope = match wire::decode::<Envelope>(body) {
                Ok(envelope) => envelope,
                Err(e) => return Delivery::Dropped(e.to_string()),
            };
            let heartbeat = matches!(envelope, Envelope::Heartbeat(_));
            match s.engine.handle_message(now, peer, envelope) {
                Ok(()) => {
                    if self.events.watching_messages(heartbeat) {
                        self.events.emit(NodeEvent::Delivered { from: peer.0, seq });
                    }
                    Delivery::Taken
                }
                Err(e @ EngineError::Permits { kept: true, .. }) => Delivery::Parked(e.to_string()),
                Err(e) => Delivery::Dropped(e.to_string()),
            }
        })
    }

    /// The transport has evidence that `peer` failed (its connection closed,
    /// and its address then refused a new one).
    pub(crate) fn link_down(&self, peer: NodeId) {
        self.input(|s, now| s.engine.handle_link_down(now, peer));
    }

    /// A frame to `peer` held back by an injected delay is due: numbered
    /// now, behind what went before it.
    pub(crate) fn send_delayed(&self, peer: NodeId, body: Vec<u8>) {
        self.input(|s, now| self.send_now(s, peer, body, now));
    }

    // ---- what the application asks ----

    /// Makes the engine follow what the application's sessions want of
    /// lock `name` ([`Locks::demand`]): asks for it when a session waits
    /// and the node neither holds nor wants it; releases it when the node
    /// holds it for nobody, and asks again if sessions still wait (the
    /// node goes back in line behind the other nodes). A request already
    /// under way is left to run: what it brings back is handed to whoever
    /// waits then, or given back at once. Refused when the engine will not
    /// take the request (permits that do not fit).
    ///
    /// With an algorithm that counts sessions the same holds grant by
    /// grant: each grant no session holds (or is held back for) is
    /// released, and the node asks for one more grant for each session
    /// that waits, up to the lock's permits.
    pub(crate) fn sync(&self, name: &Name) -> Result<(), RequestError> {
        self.input(|s, now| Self::follow(s, name, &self.locks.demand(name), now))
    }

    /// Has the engine follow `demand`, `name`'s sessions' wants
    /// ([`Engine::follow`](coterie_core::Engine::follow)). A grant still
    /// in the gate, waiting for its record, is kept: no session uses it
    /// because none has been handed it yet, and giving it back would let
    /// the coordinator grant the lock again while the gate is about to
    /// hand this one out (when it does, [`grant`](Self::grant) hands it
    /// to a waiting session or gives it back). A grant held back by the
    /// lock delay is kept while a session waits for it, and forgotten
    /// when it is given back.
    fn follow(
        s: &mut Stack,
        name: &Name,
        demand: &Demand,
        now: Duration,
    ) -> Result<(), RequestError> {
        let (gate, holdback) = (&s.gate, &mut s.holdback);
        s.engine.follow(now, name, demand, |fence| {
            if gate.holds_grant(name, fence) {
                return true;
            }
            let kept = demand.waiting > 0 && holdback.holds_grant(name, fence);
            if !kept {
                holdback.forget_grant(name, fence);
            }
            kept
        })
    }

    /// Why the node takes no new request, if it holds no lease from a
    /// majority (`partitions = "majority"`) and has had time to get one:
    /// `no quorum: n1 hears n1, n2 of 5`. A node that has installed no
    /// view yet and started less than two failure timeouts ago is given
    /// them to form its first.
    pub(crate) fn no_quorum(&self) -> Option<String> {
        let now = self.now();
        let s = self.lock();
        let membership = s.engine.membership();
        let patience = 2 * s.engine.config().timing.failure_timeout;
        let forming = membership.view().is_none() && now < patience;
        if !membership.majority_mode() || membership.quorum(now) || forming {
            return None;
        }
        let hears: Vec<String> =
            membership.vouchers(now).iter().map(|n| format!("n{}", n.0)).collect();
        Some(format!(
            "no quorum: n{} hears {} of {}; a majority ({}) must vouch for a node before it \
             grants",
            self.id.0,
            hears.join(", "),
            s.engine.config().members.len(),
            membership.majority()
        ))
    }

    /// Whether the node has joined the cluster (the engine's view).
    pub(crate) fn joined(&self) -> bool {
        self.lock().engine.joined()
    }

    /// Whether lock `name` may be asked for with `permits` (the engine's
    /// rules: see [`Engine::check_permits`]).
    pub(crate) fn check_permits(&self, name: &Name, permits: u32) -> Result<(), RequestError> {
        self.lock().engine.check_permits(name, permits)
    }

    /// Sends `bytes` to `peer`'s application task, in order with the
    /// engine's messages to it.
    pub(crate) fn send_application(&self, peer: NodeId, bytes: Vec<u8>) {
        self.input(|s, _| s.engine.send_application(peer, bytes));
    }

    /// Every member of the cluster, this node included.
    pub(crate) fn members(&self) -> Vec<NodeId> {
        self.lock().engine.config().members.clone()
    }

    /// The peers counted up now.
    pub(crate) fn peers_up(&self) -> Vec<NodeId> {
        let s = self.lock();
        s.engine.config().peers().filter(|&p| s.engine.is_up(p)).collect()
    }

    /// Where the engine stands with each of `names`.
    pub(crate) fn lock_views(&self, names: &[Name]) -> Vec<LockView> {
        let s = self.lock();
        names
            .iter()
            .map(|n| LockView { state: s.engine.cs_state_of(n), stamp: s.engine.request_stamp(n) })
            .collect()
    }

    /// The node's heartbeat period and failure timeout.
    pub(crate) fn timing(&self) -> (Duration, Duration) {
        let timing = self.lock().engine.config().timing;
        (timing.heartbeat, timing.failure_timeout)
    }

    /// What stable storage has written since the node started (`None`:
    /// no state directory).
    pub(crate) fn storage_counts(&self) -> Option<crate::state::Counts> {
        match &self.storage {
            Storage::None => None,
            Storage::Unsynced(file) => Some(file.counts()),
            Storage::Synced(writer) => Some(writer.counts()),
        }
    }

    /// The node's status, for `coterie status`, its sessions included.
    pub(crate) fn status(&self) -> Status {
        let now = self.now();
        let s = self.lock();
        Status { sessions: s.links.status(), ..s.engine.status_at(now) }
    }

    // ---- the agent's own tasks ----

    /// Sleeps until the engine's (or the lock delay's) next deadline and
    /// fires it, until the node stops.
    pub(crate) async fn run_timers(&self, mut shutdown: Shutdown) {
        // Locks forgotten when the process last gave memory back, and when.
        let (mut trimmed_at, mut trimmed_when) = (0, Instant::now());
        loop {
            let deadline = {
                let s = self.lock();
                let deadline = next_deadline(&s);
                let nanos = deadline.map_or(u64::MAX, |d| d.as_nanos() as u64);
                self.armed.store(nanos, std::sync::atomic::Ordering::Relaxed);
                deadline
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
                    self.faults.unpaused().await;
                    let forgotten = self.input(|s, now| {
                        s.engine.handle_timeout(now);
                        s.engine.counters().forgotten
                    });
                    if forgotten > trimmed_at && trimmed_when.elapsed() >= TRIM_EVERY {
                        (trimmed_at, trimmed_when) = (forgotten, Instant::now());
                        give_memory_back();
                    }
                }
                _ = self.deadline_changed.notified() => {}
                _ = shutdown.recv() => return,
            }
        }
    }

    /// Follows the group-commit writer: releases what each flush covers,
    /// and stops the node when a write fails.
    pub(crate) async fn release_durable(&self, mut shutdown: Shutdown) {
        let Storage::Synced(writer) = &self.storage else {
            return;
        };
        let mut durable = writer.durable();
        loop {
            let latest = durable.borrow_and_update().clone();
            match latest {
                Durability::Upto(generation) => self.input(|s, now| {
                    for output in s.gate.durable_upto(generation) {
                        self.perform(s, output, now);
                    }
                }),
                Durability::Failed(reason) => {
                    let mut s = self.lock();
                    self.fail(&mut s, reason);
                    return;
                }
            }
            tokio::select! {
                changed = durable.changed() => if changed.is_err() { return },
                _ = shutdown.recv() => return,
            }
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

    // ---- carrying out what the engine asked ----

    fn carry_out(&self, s: &mut Stack, now: Duration) {
        while let Some((output, rests_on)) = s.engine.poll_output_resting() {
            if let Output::Persist(record) = output {
                self.persist(s, record.encode());
            } else if let Some(output) = s.gate.admit(output, rests_on) {
                self.perform(s, output, now);
            }
        }
    }

    /// Hands a change to stable storage: what follows waits for it.
    fn persist(&self, s: &mut Stack, record: Vec<u8>) {
        let number = s.gate.hand();
        match &self.storage {
            Storage::None => s.gate.all_written(),
            Storage::Unsynced(file) => match file.append(&[record]) {
                Ok(()) => s.gate.all_written(),
                Err(e) => {
                    let reason = format!("cannot write {}: {e}", file.path().display());
                    self.fail(s, reason);
                }
            },
            Storage::Synced(writer) => writer.submit(number, record),
        }
    }

    fn fail(&self, s: &mut Stack, reason: String) {
        if s.gate.fail() {
            error!(
                node = self.id.0,
                "stable storage failed, holding every message back and stopping: {reason}"
            );
            self.broken.send_replace(Some(reason));
        }
    }

    /// Carries out one output the engine asked for.
    fn perform(&self, s: &mut Stack, output: Output, now: Duration) {
        let id = self.id.0;
        match output {
            Output::Send { to, envelope, kind } => {
                self.transmit(s, to, &envelope, now);
                if kind != "heartbeat" {
                    debug!(node = id, to = to.0, kind, "send");
                }
            }
            Output::Granted { name, fence } => self.grant(s, name, fence, now),
            Output::Coordinator { leader, epoch } => {
                info!(
                    node = id,
                    coordinator = leader.0,
                    epoch = epoch.0,
                    round = epoch.round(),
                    "coordinator elected"
                );
                self.metrics.coordinator_changed();
                self.events.emit(NodeEvent::Coordinator { leader: leader.0, epoch: epoch.0 });
            }
            Output::PeerUp(peer) => {
                info!(node = id, peer = peer.0, "peer up");
                self.events.emit(NodeEvent::PeerUp { peer: peer.0 });
                let _ = self.notices.send(Notice::PeerUp(peer));
            }
            Output::PeerDown(peer) => {
                warn!(node = id, peer = peer.0, "peer down");
                if !self.lock_delay.is_zero() {
                    // It may have held: nothing is handed out here until
                    // the lock delay has passed.
                    s.holdback.block_until(now + self.lock_delay);
                }
                self.events.emit(NodeEvent::PeerDown { peer: peer.0 });
                let _ = self.notices.send(Notice::PeerDown(peer));
            }
            Output::Application { from, bytes } => {
                let _ = self.notices.send(Notice::Application { from, bytes });
            }
            // `carry_out` hands records to storage as they come; none is held.
            Output::Persist(record) => self.persist(s, record.encode()),
            Output::Joined => {
                let alive: Vec<u32> = s.engine.status().alive;
                info!(node = id, ?alive, "joined the cluster");
                self.events.emit(NodeEvent::Joined { alive });
            }
            Output::Lost { name, fence } => {
                s.holdback.forget(&name);
                let sessions = self.locks.take_back(&name, fence, now);
                warn!(
                    node = id,
                    %name,
                    fence = fence.0,
                    ?sessions,
                    "lost the lease while holding: the holder is told to stop"
                );
                for session in if sessions.is_empty() { vec![0] } else { sessions } {
                    self.events.emit(NodeEvent::Released { name: name.to_string(), session });
                }
                let _ = Self::follow(s, &name, &self.locks.demand(&name), now);
            }
            Output::View(view) => {
                let members: Vec<u32> = view.members.iter().map(|m| m.0).collect();
                info!(node = id, view = %view.epoch, ?members, "installed a view");
                self.metrics.view_changed();
                self.events.emit(NodeEvent::View(ViewStatus::of(&view)));
            }
            Output::Quorum(held) => {
                if held {
                    info!(node = id, "holds a lease from a majority: serving");
                } else {
                    warn!(node = id, "lost the lease of a majority: granting nothing until back");
                }
                self.events.emit(NodeEvent::Quorum { held });
            }
        }
    }

    /// Sends `envelope` to `peer` through whatever faults are in force:
    /// they act above the session, so what they drop is never numbered.
    fn transmit(&self, s: &mut Stack, peer: NodeId, envelope: &Envelope, now: Duration) {
        let body = wire::encode(envelope);
        match self.faults.outgoing(peer) {
            Fate::Drop => {}
            Fate::Pass if !self.peers.delaying(peer) => self.send_now(s, peer, body, now),
            Fate::Pass => self.peers.delay(peer, Instant::now(), body),
            Fate::Delay(d) => self.peers.delay(peer, Instant::now() + d, body),
        }
    }

    /// Numbers `body` in `peer`'s session and wakes its connection.
    fn send_now(&self, s: &mut Stack, peer: NodeId, body: Vec<u8>, now: Duration) {
        let watched = self.describe(s, &body);
        let (seq, overflow) = s.links.send(peer, body);
        if let Some((kind, text)) = watched {
            self.events.emit(NodeEvent::Sent { to: peer.0, seq, kind, text });
        }
        if let Some(dropped) = overflow {
            warn!(
                node = self.id.0,
                peer = peer.0,
                dropped,
                "session to peer overflowed: its unacknowledged frames are dropped and it is \
                 declared failed"
            );
            s.engine.handle_link_down(now, peer);
        }
        self.peers.wake(peer);
    }

    /// A message's kind and text, for its watchers; `None` when nobody
    /// watches messages (or heartbeats, for one).
    fn describe(&self, s: &Stack, body: &[u8]) -> Option<(String, String)> {
        if !self.events.watching_messages(false) {
            return None;
        }
        let envelope: Envelope = wire::decode(body).ok()?;
        let heartbeat = matches!(envelope, Envelope::Heartbeat(_));
        if heartbeat && !self.events.watching_messages(true) {
            return None;
        }
        let text = s.engine.describe(&envelope);
        let kind = if heartbeat { "heartbeat".into() } else { kind_of(&text) };
        Some((kind, text))
    }

    /// Hands the node's grant of `name` to the application's first waiting
    /// session, unless the lock delay holds it back; gives it back when
    /// nobody waits any more.
    fn grant(&self, s: &mut Stack, name: Name, fence: Fence, now: Duration) {
        let id = self.id.0;
        if !self.lock_delay.is_zero() {
            let heartbeat = s.engine.config().timing.heartbeat;
            let engine = &s.engine;
            let verdict =
                s.holdback.judge(&name, fence, now, heartbeat, |t| engine.all_peers_heard_since(t));
            match verdict {
                Verdict::Hand => {}
                Verdict::AwaitPeers { probe, .. } => {
                    if probe {
                        s.engine.probe_peers(now);
                    }
                    debug!(node = id, %name, fence = fence.0, "grant held back until every peer is heard from");
                    return;
                }
                Verdict::Blocked => {
                    debug!(node = id, %name, fence = fence.0, "grant held back by the lock delay");
                    return;
                }
            }
        }
        let takers = s.engine.takers(&name, fence);
        let clients = match self.locks.grant(&name, fence, takers, now) {
            Handed::To(clients) => clients,
            Handed::Nobody => {
                // Everyone who asked in its mode has gone: give it back,
                // and ask again for those left (a read grant, when only
                // writers are left, where the node asks once for all).
                debug!(node = id, %name, fence = fence.0, "grant with no waiter, releasing");
                s.engine.release_grant(now, &name, fence);
                if !s.engine.counts_sessions() {
                    let _ = Self::follow(s, &name, &self.locks.demand(&name), now);
                }
                return;
            }
        };
        for session in clients.iter().map(|c| c.session) {
            self.events.emit(NodeEvent::Granted {
                name: name.to_string(),
                fence: fence.0,
                session,
            });
        }
        let session = clients[0].session;
        let shared = clients.len();
        let epoch = s.engine.epoch();
        if s.logged_epoch != Some(epoch) {
            s.logged_epoch = Some(epoch);
            info!(node = id, %name, session, shared, fence = fence.0, epoch = epoch.0, "first grant of this epoch");
        } else {
            debug!(node = id, %name, session, shared, fence = fence.0, epoch = epoch.0, "granted");
        }
    }
}

/// How often, at most, the memory forgotten locks freed is handed back.
const TRIM_EVERY: Duration = Duration::from_secs(1);

/// Hands the memory the allocator keeps free back to the system: after a
/// burst of locks was forgotten, an idle node shrinks to what it holds.
/// (glibc's allocator keeps what was freed for reuse otherwise.)
fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it has
    // no precondition and is safe to call at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// When the engine or the lock delay next needs the timer task.
fn next_deadline(s: &Stack) -> Option<Duration> {
    [s.engine.next_deadline(), s.holdback.deadline()].into_iter().flatten().min()
}

/// A message's kind from its text (`StateQuery { .. }` is `state_query`),
/// as the algorithms' message counters name it; a named lock's message
/// (`"printer" Request { .. }`) by the message, not the name.
fn kind_of(text: &str) -> String {
    let text = match text.strip_prefix('"') {
        Some(rest) => rest.split_once("\" ").map_or(rest, |(_, msg)| msg),
        None => text,
    };
    let mut kind = String::new();
    for (i, c) in text.chars().take_while(char::is_ascii_alphanumeric).enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            kind.push('_');
        }
        kind.push(c.to_ascii_lowercase());
    }
    kind
}

#[cfg(test)]
mod tests {
    use super::*;
    use coterie_core::{registry, AlgoConfig};

    /// A lone node's stack, its records never made durable unless the
    /// test says so.
    fn lone_stack() -> Stack {
        let engine = Engine::new(
            AlgoConfig::for_test(1, 1),
            registry::mutex("centralized").unwrap(),
            registry::election("bully").unwrap(),
            Duration::ZERO,
        );
        Stack {
            engine,
            links: PeerLinks::new(&[]),
            gate: Gate::default(),
            holdback: Holdback::default(),
            logged_epoch: None,
        }
    }

    /// What `carry_out` does, with the outputs that leave collected
    /// instead of performed.
    fn pump(s: &mut Stack) -> Vec<Output> {
        let mut left = Vec::new();
        while let Some((output, rests_on)) = s.engine.poll_output_resting() {
            if matches!(output, Output::Persist(_)) {
                s.gate.hand();
            } else if let Some(output) = s.gate.admit(output, rests_on) {
                left.push(output);
            }
        }
        left
    }

    fn waiting(sessions: u32) -> Demand {
        Demand { permits: 1, used: Vec::new(), waiting: sessions, reads: 0, waiting_reads: 0 }
    }

    fn grants(outputs: &[Output]) -> Vec<Fence> {
        outputs
            .iter()
            .filter_map(|o| match o {
                Output::Granted { fence, .. } => Some(*fence),
                _ => None,
            })
            .collect()
    }

    /// The race the docker end-to-end test once caught as two holders: a
    /// grant waits in the gate for its record, a second session asks
    /// meanwhile, and following the sessions' demand must not give the
    /// grant back (nobody uses it only because nobody was handed it yet),
    /// or the coordinator grants again and the gate then hands out both.
    #[test]
    fn a_grant_waiting_for_its_record_is_not_given_back_when_another_session_asks() {
        let mut s = lone_stack();
        let name = Name::default();
        let now = Duration::from_millis(1);
        s.engine.handle_timeout(now);
        pump(&mut s);
        Agent::follow(&mut s, &name, &waiting(1), now).unwrap();
        let left = pump(&mut s);
        let held = s.engine.fences_of(&name).to_vec();
        assert_eq!(held.len(), 1, "the lone coordinator grants itself");
        let fence = held[0];
        assert!(grants(&left).is_empty(), "the grant waits for its record: {left:?}");
        assert!(s.gate.holds_grant(&name, fence));
        // A second session waits too: the grant in the gate stays.
        Agent::follow(&mut s, &name, &waiting(2), now).unwrap();
        let left = pump(&mut s);
        assert_eq!(s.engine.fences_of(&name), [fence], "given back while in the gate");
        assert!(grants(&left).is_empty(), "granted again: {left:?}");
        // The record lands: the one grant leaves, and nothing else.
        let freed = s.gate.durable_upto(u64::MAX);
        assert_eq!(grants(&freed), [fence]);
    }

    #[test]
    fn kinds_are_read_off_a_messages_text() {
        assert_eq!(kind_of("StateQuery { epoch: 3 }"), "state_query");
        assert_eq!(kind_of("\"jobs/nightly\" Request { stamp: 1 }"), "request");
        assert_eq!(kind_of("Token(Token { .. })"), "token");
    }
}
