//! Algorithms with their message and timer types erased, so that one
//! engine drives every combination without generics.
//!
//! [`DynAlgorithm`] is what both layers handle alike ([`Algorithm`]: a
//! peer's message, a timer, a peer up or down), erased once;
//! [`DynMutex`] and [`DynElection`] add what only one layer does. Messages
//! cross this line encoded ([`Encoded`]), timers as [`TimerId`]s.

use crate::algorithm::{Algorithm, ElectionAlgorithm, MutexAlgorithm, Out};
use crate::outbox::{Action, Message, Outbox, Time, Timer, TimerId};
use crate::types::{CsState, Epoch, Fence, Mode, NodeId, Stamp};
use crate::wire::{self, WireError};
use std::hash::Hasher;

/// An encoded message and the kind it was, for counting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// The message's [`Message::kind`].
    pub kind: &'static str,
    /// Its bincode encoding.
    pub bytes: Vec<u8>,
}

/// The actions of an erased algorithm.
pub type Actions = Vec<Action<Encoded, TimerId>>;

/// An [`Algorithm`] with its message and timer types erased.
pub trait DynAlgorithm: Send {
    /// Decodes and handles a peer's message; returns its kind.
    fn handle_message(
        &mut self,
        now: Time,
        from: NodeId,
        bytes: &[u8],
        out: &mut Actions,
    ) -> Result<&'static str, WireError>;
    /// See [`Algorithm::handle_timer`]; an id the algorithm has no timer
    /// for is ignored.
    fn handle_timer(&mut self, now: Time, timer: TimerId, out: &mut Actions);
    /// See [`Algorithm::handle_peer_up`].
    fn handle_peer_up(&mut self, now: Time, peer: NodeId, out: &mut Actions);
    /// See [`Algorithm::handle_peer_back`].
    fn handle_peer_back(&mut self, now: Time, peer: NodeId, out: &mut Actions);
    /// See [`Algorithm::handle_peer_down`].
    fn handle_peer_down(&mut self, now: Time, peer: NodeId, out: &mut Actions);
    /// Decodes `bytes` for a trace line.
    fn describe(&self, bytes: &[u8]) -> String;
    /// See [`Algorithm::hash_at`].
    fn hash_state(&self, h: &mut dyn Hasher, now: Time);
}

/// A [`MutexAlgorithm`] with its types erased.
pub trait DynMutex: DynAlgorithm {
    /// See [`MutexAlgorithm::handle_request`].
    fn handle_request(&mut self, now: Time, out: &mut Actions);
    /// See [`MutexAlgorithm::handle_request_in`].
    fn handle_request_in(&mut self, now: Time, mode: Mode, out: &mut Actions);
    /// See [`MutexAlgorithm::mode_of`].
    fn mode_of(&self, fence: Fence) -> Mode;
    /// See [`MutexAlgorithm::handle_release`].
    fn handle_release(&mut self, now: Time, out: &mut Actions);
    /// See [`MutexAlgorithm::handle_release_of`].
    fn handle_release_of(&mut self, now: Time, fence: Fence, out: &mut Actions);
    /// See [`MutexAlgorithm::handle_adopt`].
    fn handle_adopt(&mut self, now: Time, peer: NodeId, out: &mut Actions);
    /// See [`MutexAlgorithm::handle_coordinator`].
    fn handle_coordinator(&mut self, now: Time, leader: NodeId, epoch: Epoch, out: &mut Actions);
    /// See [`MutexAlgorithm::cs_state`].
    fn cs_state(&self) -> CsState;
    /// See [`MutexAlgorithm::request_stamp`].
    fn request_stamp(&self) -> Option<Stamp>;
    /// See [`MutexAlgorithm::watermark`].
    fn watermark(&self) -> u64;
    /// See [`MutexAlgorithm::WATERMARK_RESERVE`].
    fn watermark_reserve(&self) -> u64;
    /// See [`MutexAlgorithm::WATERMARK_AHEAD`].
    fn watermark_ahead(&self) -> u64;
    /// See [`MutexAlgorithm::observe_watermark`].
    fn observe_watermark(&mut self, watermark: u64);
    /// See [`MutexAlgorithm::made`].
    fn made(&self) -> u64;
    /// See [`MutexAlgorithm::observe_made`].
    fn observe_made(&mut self, made: u64);
    /// See [`MutexAlgorithm::durable_state`].
    fn durable_state(&self) -> Option<Vec<u8>>;
    /// See [`MutexAlgorithm::covered_by`].
    fn covered_by(&self, record: Option<&[u8]>) -> bool;
    /// See [`MutexAlgorithm::forgettable`].
    fn forgettable(&self) -> bool;
    /// See [`MutexAlgorithm::term_spent`].
    fn term_spent(&self) -> bool;
    /// See [`MutexAlgorithm::remnant`].
    fn remnant(&self) -> Option<u64>;
    /// See [`MutexAlgorithm::observe_remnant`].
    fn observe_remnant(&mut self, own: Option<u64>, floor: u64);
    /// A copy of this instance, state and all (a checker forks runs).
    fn clone_box(&self) -> Box<dyn DynMutex>;
}

/// An [`ElectionAlgorithm`] with its types erased.
pub trait DynElection: DynAlgorithm {
    /// See [`ElectionAlgorithm::handle_start`].
    fn handle_start(&mut self, now: Time, out: &mut Actions);
    /// See [`ElectionAlgorithm::handle_epoch_hint`].
    fn handle_epoch_hint(
        &mut self,
        now: Time,
        from: NodeId,
        epoch: Epoch,
        coordinator: Option<NodeId>,
        out: &mut Actions,
    );
    /// See [`ElectionAlgorithm::handle_renew`].
    fn handle_renew(&mut self, now: Time, out: &mut Actions);
    /// See [`ElectionAlgorithm::coordinator`].
    fn coordinator(&self) -> Option<NodeId>;
    /// See [`ElectionAlgorithm::epoch`].
    fn epoch(&self) -> Epoch;
    /// A copy of this instance, state and all (a checker forks runs).
    fn clone_box(&self) -> Box<dyn DynElection>;
}

/// Wraps a typed algorithm: its outbox is drained after every call, every
/// message in it encoded and every timer named by its id.
struct Erased<A: Algorithm> {
    alg: A,
    scratch: Out<A>,
}

/// `alg`, erased for the engine.
pub(crate) fn erase_mutex<A: MutexAlgorithm>(alg: A) -> Box<dyn DynMutex> {
    Box::new(Erased { alg, scratch: Outbox::new() })
}

/// `alg`, erased for the engine.
pub(crate) fn erase_election<A: ElectionAlgorithm>(alg: A) -> Box<dyn DynElection> {
    Box::new(Erased { alg, scratch: Outbox::new() })
}

impl<A: Algorithm> Erased<A> {
    /// Runs `f` against the algorithm and its outbox, then moves the
    /// outbox's actions, encoded, into `out`.
    fn with(&mut self, out: &mut Actions, f: impl FnOnce(&mut A, &mut Out<A>)) {
        f(&mut self.alg, &mut self.scratch);
        out.extend(self.scratch.drain().map(|action| match action {
            Action::Send { to, msg } => {
                Action::Send { to, msg: Encoded { kind: msg.kind(), bytes: wire::encode(&msg) } }
            }
            Action::SetTimer { timer, at } => Action::SetTimer { timer: timer.id(), at },
            Action::CancelTimer { timer } => Action::CancelTimer { timer: timer.id() },
            Action::Grant { fence } => Action::Grant { fence },
            Action::Coordinator { leader, epoch } => Action::Coordinator { leader, epoch },
        }));
    }

    /// A copy of the algorithm, with an empty outbox of its own.
    fn fork(&self) -> Self {
        Erased { alg: self.alg.clone(), scratch: Outbox::new() }
    }
}

impl<A: Algorithm> DynAlgorithm for Erased<A> {
    fn handle_message(
        &mut self,
        now: Time,
        from: NodeId,
        bytes: &[u8],
        out: &mut Actions,
    ) -> Result<&'static str, WireError> {
        let msg: A::Msg = wire::decode(bytes)?;
        let kind = msg.kind();
        self.with(out, |a, o| a.handle_message(now, from, msg, o));
        Ok(kind)
    }
    fn handle_timer(&mut self, now: Time, timer: TimerId, out: &mut Actions) {
        if let Some(timer) = A::Timer::from_id(timer) {
            self.with(out, |a, o| a.handle_timer(now, timer, o));
        }
    }
    fn handle_peer_up(&mut self, now: Time, peer: NodeId, out: &mut Actions) {
        self.with(out, |a, o| a.handle_peer_up(now, peer, o));
    }
    fn handle_peer_back(&mut self, now: Time, peer: NodeId, out: &mut Actions) {
        self.with(out, |a, o| a.handle_peer_back(now, peer, o));
    }
    fn handle_peer_down(&mut self, now: Time, peer: NodeId, out: &mut Actions) {
        self.with(out, |a, o| a.handle_peer_down(now, peer, o));
    }
    fn describe(&self, bytes: &[u8]) -> String {
        match wire::decode::<A::Msg>(bytes) {
            Ok(msg) => format!("{msg:?}"),
            Err(e) => format!("<undecodable: {e}>"),
        }
    }
    fn hash_state(&self, h: &mut dyn Hasher, now: Time) {
        self.alg.hash_at(h, now);
    }
}

impl<A: MutexAlgorithm> DynMutex for Erased<A> {
    fn handle_request(&mut self, now: Time, out: &mut Actions) {
        self.with(out, |a, o| a.handle_request(now, o));
    }
    fn handle_request_in(&mut self, now: Time, mode: Mode, out: &mut Actions) {
        self.with(out, |a, o| a.handle_request_in(now, mode, o));
    }
    fn mode_of(&self, fence: Fence) -> Mode {
        self.alg.mode_of(fence)
    }
    fn handle_release(&mut self, now: Time, out: &mut Actions) {
        self.with(out, |a, o| a.handle_release(now, o));
    }
    fn handle_release_of(&mut self, now: Time, fence: Fence, out: &mut Actions) {
        self.with(out, |a, o| a.handle_release_of(now, fence, o));
    }
    fn handle_adopt(&mut self, now: Time, peer: NodeId, out: &mut Actions) {
        self.with(out, |a, o| a.handle_adopt(now, peer, o));
    }
    fn handle_coordinator(&mut self, now: Time, leader: NodeId, epoch: Epoch, out: &mut Actions) {
        self.with(out, |a, o| a.handle_coordinator(now, leader, epoch, o));
    }
    fn cs_state(&self) -> CsState {
        self.alg.cs_state()
    }
    fn request_stamp(&self) -> Option<Stamp> {
        self.alg.request_stamp()
    }
    fn watermark(&self) -> u64 {
        self.alg.watermark()
    }
    fn watermark_reserve(&self) -> u64 {
        A::WATERMARK_RESERVE
    }
    fn watermark_ahead(&self) -> u64 {
        A::WATERMARK_AHEAD
    }
    fn observe_watermark(&mut self, watermark: u64) {
        self.alg.observe_watermark(watermark);
    }
    fn made(&self) -> u64 {
        self.alg.made()
    }
    fn observe_made(&mut self, made: u64) {
        self.alg.observe_made(made);
    }
    fn durable_state(&self) -> Option<Vec<u8>> {
        self.alg.durable_state()
    }
    fn covered_by(&self, record: Option<&[u8]>) -> bool {
        self.alg.covered_by(record)
    }
    fn forgettable(&self) -> bool {
        self.alg.forgettable()
    }
    fn term_spent(&self) -> bool {
        self.alg.term_spent()
    }
    fn remnant(&self) -> Option<u64> {
        self.alg.remnant()
    }
    fn observe_remnant(&mut self, own: Option<u64>, floor: u64) {
        self.alg.observe_remnant(own, floor);
    }
    fn clone_box(&self) -> Box<dyn DynMutex> {
        Box::new(self.fork())
    }
}

impl<A: ElectionAlgorithm> DynElection for Erased<A> {
    fn handle_start(&mut self, now: Time, out: &mut Actions) {
        self.with(out, |a, o| a.handle_start(now, o));
    }
    fn handle_epoch_hint(
        &mut self,
        now: Time,
        from: NodeId,
        epoch: Epoch,
        coordinator: Option<NodeId>,
        out: &mut Actions,
    ) {
        self.with(out, |a, o| a.handle_epoch_hint(now, from, epoch, coordinator, o));
    }
    fn handle_renew(&mut self, now: Time, out: &mut Actions) {
        self.with(out, |a, o| a.handle_renew(now, o));
    }
    fn coordinator(&self) -> Option<NodeId> {
        self.alg.coordinator()
    }
    fn epoch(&self) -> Epoch {
        self.alg.epoch()
    }
    fn clone_box(&self) -> Box<dyn DynElection> {
        Box::new(self.fork())
    }
}

#[cfg(test)]
mod tests {
    use crate::algorithm::AlgoConfig;
    use crate::outbox::{Time, TimerId};
    use crate::registry::{ELECTIONS, MUTEXES};
    use crate::types::NodeId;

    /// Delivers every message the nodes send, in order, until none is
    /// left (timers are not run).
    fn settle(nodes: &mut [Box<dyn super::DynElection>], mut queue: Vec<(NodeId, super::Actions)>) {
        while let Some((from, actions)) = queue.pop() {
            for action in actions {
                if let crate::outbox::Action::Send { to, msg } = action {
                    let mut out = Vec::new();
                    let node = &mut nodes[to.0 as usize - 1];
                    node.handle_message(Time::ZERO, from, &msg.bytes, &mut out).unwrap();
                    queue.insert(0, (to, out));
                }
            }
        }
    }

    /// A sitting coordinator asked to renew its term (its mutual exclusion
    /// ran out of fences) ends in a new, higher epoch of its own that
    /// every node follows; a follower asked does nothing. Every election.
    #[test]
    fn a_renewal_gives_the_sitting_coordinator_a_newer_term() {
        for info in ELECTIONS {
            let mut nodes: Vec<_> =
                (1..=3).map(|id| (info.build)(&AlgoConfig::for_test(id, 3))).collect();
            let mut queue = Vec::new();
            for (i, node) in nodes.iter_mut().enumerate() {
                let mut out = Vec::new();
                for peer in (1..=3).filter(|p| *p != i as u32 + 1) {
                    node.handle_peer_up(Time::ZERO, NodeId(peer), &mut out);
                }
                node.handle_start(Time::ZERO, &mut out);
                queue.push((NodeId(i as u32 + 1), out));
            }
            settle(&mut nodes, queue);
            let before = nodes[2].epoch();
            assert!(nodes.iter().all(|n| n.coordinator() == Some(NodeId(3))), "{}", info.name);
            let mut out = Vec::new();
            nodes[0].handle_renew(Time::ZERO, &mut out);
            assert!(out.is_empty(), "{}: a follower renewed: {out:?}", info.name);
            nodes[2].handle_renew(Time::ZERO, &mut out);
            settle(&mut nodes, vec![(NodeId(3), out)]);
            for node in &nodes {
                assert_eq!(node.coordinator(), Some(NodeId(3)), "{}", info.name);
                assert!(node.epoch() > before, "{}: still {before:?}", info.name);
                assert_eq!(node.epoch(), nodes[2].epoch(), "{}", info.name);
            }
        }
    }

    /// A timer id an algorithm never armed (a stranger's, or one from a
    /// build with other timers) does nothing, whatever the algorithm.
    #[test]
    fn a_timer_id_an_algorithm_has_no_timer_for_is_ignored() {
        let cfg = AlgoConfig::for_test(1, 3);
        for info in MUTEXES {
            let mut m = (info.build)(&cfg);
            let mut out = Vec::new();
            m.handle_peer_up(Time::ZERO, NodeId(2), &mut out);
            out.clear();
            m.handle_timer(Time::ZERO, TimerId(99), &mut out);
            assert!(out.is_empty(), "{}: {out:?}", info.name);
        }
        for info in ELECTIONS {
            let mut e = (info.build)(&cfg);
            let mut out = Vec::new();
            e.handle_timer(Time::ZERO, TimerId(99), &mut out);
            assert!(out.is_empty(), "{}: {out:?}", info.name);
        }
    }
}
