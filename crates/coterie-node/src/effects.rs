//! The agent's output side: everything the engine asks for, carried out
//! ([`Effects`]), and what changes together under the agent's one lock
//! ([`Stack`]). As quinn keeps a connection's state apart from the driver
//! that moves its bytes, the [`Agent`](crate::agent::Agent) feeds inputs
//! and keeps the lock and the timers; this side performs: frames to the
//! transport through the injected faults ([`Effects::transmit`]), grants
//! to the application's [`Locks`] past the lock delay
//! ([`Effects::grant`]), records to stable storage with the outputs that
//! rest on them held in the [`Gate`] ([`Effects::persist`]), and events,
//! notices and metrics for whoever watches.

use crate::events::Events;
use crate::faults::{Fate, Injector};
use crate::gate::Gate;
use crate::holdback::{Holdback, Verdict};
use crate::links::PeerLinks;
use crate::locks::{Handed, Locks};
use crate::metrics::Metrics;
use crate::peers::Peers;
use crate::protocol::NodeEvent;
use crate::state::StateFile;
use crate::storage::{Durability, StateWriter};
use coterie_core::engine::{Output, RequestError};
use coterie_core::wire::{self, Envelope};
use coterie_core::{Demand, Engine, Epoch, Fence, Name, NodeId, ViewStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
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

impl Stack {
    /// A node's stack around `engine`, with a session per peer.
    pub(crate) fn new(engine: Engine) -> Stack {
        let peers: Vec<NodeId> = engine.config().peers().collect();
        Stack {
            engine,
            links: PeerLinks::new(&peers),
            gate: Gate::default(),
            holdback: Holdback::default(),
            logged_epoch: None,
        }
    }

    /// The engine.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine, to feed.
    pub(crate) fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// The peers' sessions.
    pub(crate) fn links(&self) -> &PeerLinks {
        &self.links
    }

    /// The peers' sessions, to change.
    pub(crate) fn links_mut(&mut self) -> &mut PeerLinks {
        &mut self.links
    }

    /// When the engine or the lock delay next needs the timer task.
    pub(crate) fn next_deadline(&self) -> Option<Duration> {
        [self.engine.next_deadline(), self.holdback.deadline()].into_iter().flatten().min()
    }
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

/// What the application task must hear of the agent (sent by its output
/// side).
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

/// The output side's parts: what it carries the engine's outputs to.
pub(crate) struct Effects {
    id: NodeId,
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

/// What [`Effects`] is built from.
pub(crate) struct Outlets {
    pub(crate) storage: Storage,
    pub(crate) lock_delay: Duration,
    pub(crate) peers: Arc<Peers>,
    pub(crate) faults: Arc<Injector>,
    pub(crate) events: Arc<Events>,
    pub(crate) locks: Arc<Locks>,
    pub(crate) metrics: Metrics,
    pub(crate) notices: mpsc::UnboundedSender<Notice>,
}

impl Effects {
    pub(crate) fn new(id: NodeId, o: Outlets) -> Effects {
        Effects {
            id,
            storage: o.storage,
            broken: watch::channel(None).0,
            lock_delay: o.lock_delay,
            peers: o.peers,
            faults: o.faults,
            events: o.events,
            locks: o.locks,
            metrics: o.metrics,
            notices: o.notices,
        }
    }

    /// What the node counts, for `/metrics`.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The injected faults.
    pub(crate) fn faults(&self) -> &Injector {
        &self.faults
    }

    /// Whether messages are being watched (heartbeats too, for
    /// `heartbeat`).
    pub(crate) fn events(&self) -> &Events {
        &self.events
    }

    /// What the application's sessions want of `name`.
    pub(crate) fn demand(&self, name: &Name) -> Demand {
        self.locks.demand(name)
    }

    /// Carries out what an input caused, then every grant held back by
    /// the lock delay that may now go (and what that causes).
    pub(crate) fn settle(&self, s: &mut Stack, now: Duration) {
        self.carry_out(s, now);
        if !self.lock_delay.is_zero() {
            for (name, fence) in s.holdback.pending() {
                if s.engine.fences_of(&name).contains(&fence) {
                    self.grant(s, name, fence, now);
                } else {
                    s.holdback.forget_grant(&name, fence);
                }
            }
            self.carry_out(s, now);
        }
    }

    /// The group-commit writer's flushes, if records go to one.
    pub(crate) fn durable(&self) -> Option<watch::Receiver<Durability>> {
        match &self.storage {
            Storage::Synced(writer) => Some(writer.durable()),
            _ => None,
        }
    }

    /// Every record up to `generation` is durable: what rested on them goes.
    pub(crate) fn durable_upto(&self, s: &mut Stack, generation: u64, now: Duration) {
        for output in s.gate.durable_upto(generation) {
            self.perform(s, output, now);
        }
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

    /// Has the engine follow `demand`, `name`'s sessions' wants
    /// ([`Engine::follow`](coterie_core::Engine::follow)). A grant still
    /// in the gate, waiting for its record, is kept: no session uses it
    /// because none has been handed it yet, and giving it back would let
    /// the coordinator grant the lock again while the gate is about to
    /// hand this one out (when it does, [`grant`](Self::grant) hands it
    /// to a waiting session or gives it back). A grant held back by the
    /// lock delay is kept while a session waits for it, and forgotten
    /// when it is given back.
    pub(crate) fn follow(
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

    /// Carries out every output the engine has, each once the record it
    /// rests on is durable; records go to stable storage as they come.
    pub(crate) fn carry_out(&self, s: &mut Stack, now: Duration) {
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

    /// Stable storage failed: everything is held back for good, and the
    /// node stops with `reason`.
    pub(crate) fn fail(&self, s: &mut Stack, reason: String) {
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
    pub(crate) fn send_now(&self, s: &mut Stack, peer: NodeId, body: Vec<u8>, now: Duration) {
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
        Effects::follow(&mut s, &name, &waiting(1), now).unwrap();
        let left = pump(&mut s);
        let held = s.engine.fences_of(&name).to_vec();
        assert_eq!(held.len(), 1, "the lone coordinator grants itself");
        let fence = held[0];
        assert!(grants(&left).is_empty(), "the grant waits for its record: {left:?}");
        assert!(s.gate.holds_grant(&name, fence));
        // A second session waits too: the grant in the gate stays.
        Effects::follow(&mut s, &name, &waiting(2), now).unwrap();
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
