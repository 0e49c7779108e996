//! # `ricart-agrawala` — timestamped requests and deferred replies
//!
//! **Source.** Ricart and Agrawala (1981), as given in seeds 000 (the
//! `pending`/`need` formulation with a communication thread and a semaphore),
//! 001 (the protocol and the REQUEST(5)/REQUEST(3) trace) and 002.
//!
//! **Assumptions.** Reliable links while both ends are up (FIFO is not
//! needed); crash-stop failures reported by the failure detector; no
//! partitions (a peer wrongly suspected is no longer asked, so both sides of
//! a partition can enter).
//!
//! **Messages per entry.** 2(N-1): a REQUEST to every other live node and a
//! REPLY from each. Synchronisation delay: 1 message delay (the deferred
//! REPLY).
//!
//! **State walk.** An *idle* node answers every REQUEST at once. A node that
//! wants the critical section stamps its request with its Lamport clock and
//! its id, sends it to every live peer and becomes *wanting*; it answers a
//! REQUEST at once if that request has priority (a smaller stamp), and
//! *defers* the reply otherwise. With a reply from every peer it asked (or
//! that peer reported down) it *holds*; while holding it defers every reply.
//! Leaving, it sends every deferred reply and is idle again.
//!
//! **Newcomers.** A peer that comes up (or restarts) while this node waits
//! is sent the request too and its reply awaited: otherwise the newcomer,
//! unaware of the request, could grant itself while this node enters.
//!
//! **Fences.** Entries happen in stamp order: a node enters only after every
//! live peer has replied, and a peer with an older pending request defers.
//! So the stamp itself, timestamp in the high bits and node id in the low
//! bits, is a fence that grows with every entry, and one that stays valid
//! when a holder crashes (the next entrant's stamp is larger). The one way
//! to be overtaken is to be new: a node that restarted may stamp its request
//! below an entry already under way that never asked it. The holder's
//! deferred REPLY names the entry it was deferred behind; a requester that
//! learns it was overtaken by a larger stamp takes a fresh stamp and asks
//! again, so stamp order and entry order stay one. Every REPLY names the
//! request it answers, so a reply to an abandoned request never counts.

use super::ask::Ask;
use crate::algorithm::{AlgoConfig, MutexAlgorithm};
use crate::outbox::{Message, Outbox, Time};
use crate::types::{CsState, Fence, LamportClock, NodeId, Stamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The messages of [`RicartAgrawala`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RaMsg {
    /// I want the critical section; this is my place in line.
    Request {
        /// The request's stamp.
        stamp: Stamp,
    },
    /// Go ahead as far as I am concerned.
    Reply {
        /// The request answered.
        to: Stamp,
        /// The replier's Lamport clock.
        clock: u64,
        /// For a reply deferred behind the replier's own entry: that
        /// entry's stamp.
        after: Option<Stamp>,
    },
}

impl Message for RaMsg {
    fn kind(&self) -> &'static str {
        match self {
            RaMsg::Request { .. } => "request",
            RaMsg::Reply { .. } => "reply",
        }
    }
}

/// The Ricart–Agrawala algorithm; see the module documentation.
#[derive(Debug)]
pub struct RicartAgrawala {
    id: NodeId,
    /// Holders allowed at once: a node enters with at most `capacity - 1`
    /// replies outstanding (1 here; `raymond-k` builds it with k).
    capacity: usize,
    alive: BTreeSet<NodeId>,
    clock: LamportClock,
    state: Ask,
    /// Requests this node has not answered yet, by requester.
    deferred: BTreeMap<NodeId, Stamp>,
}

impl RicartAgrawala {
    /// A node with nobody known to be up yet.
    pub fn new(cfg: &AlgoConfig) -> Self {
        RicartAgrawala {
            id: cfg.id,
            capacity: 1,
            alive: BTreeSet::new(),
            clock: LamportClock::default(),
            state: Ask::Idle,
            deferred: BTreeMap::new(),
        }
    }

    /// The same machine admitting `capacity` holders at once: Raymond's
    /// k-exclusion (see `raymond_k`).
    pub fn with_capacity(cfg: &AlgoConfig) -> Self {
        RicartAgrawala { capacity: cfg.capacity.max(1), ..RicartAgrawala::new(cfg) }
    }

    /// Enters once at most `capacity - 1` replies are outstanding (none,
    /// for a mutex).
    fn try_enter(&mut self, out: &mut Outbox<RaMsg>) {
        if let Ask::Wanting { stamp, awaiting } = &self.state {
            if awaiting.len() < self.capacity {
                let stamp = *stamp;
                self.state = Ask::Held { stamp };
                out.grant(Fence::new(stamp.ts, u64::from(stamp.node.0)));
            }
        }
    }

    fn reply(&mut self, to: NodeId, request: Stamp, after: Option<Stamp>, out: &mut Outbox<RaMsg>) {
        let clock = self.clock.now();
        out.send(to, RaMsg::Reply { to: request, clock, after });
    }

    /// Stamps a new request and sends it to every live peer.
    fn ask(&mut self, out: &mut Outbox<RaMsg>) {
        let stamp = Stamp { ts: self.clock.tick(), node: self.id };
        out.broadcast(self.alive.iter().copied(), RaMsg::Request { stamp });
        self.state = Ask::Wanting { stamp, awaiting: self.alive.clone() };
        // Deferred requests that now come first are answered.
        let first: Vec<(NodeId, Stamp)> =
            self.deferred.iter().filter(|(_, s)| **s < stamp).map(|(&n, &s)| (n, s)).collect();
        for (peer, theirs) in first {
            self.deferred.remove(&peer);
            self.reply(peer, theirs, None, out);
        }
        self.try_enter(out);
    }
}

impl MutexAlgorithm for RicartAgrawala {
    type Msg = RaMsg;

    fn handle_request(&mut self, _now: Time, out: &mut Outbox<RaMsg>) {
        if self.state != Ask::Idle {
            return;
        }
        self.ask(out);
    }

    fn handle_release(&mut self, _now: Time, out: &mut Outbox<RaMsg>) {
        let Ask::Held { stamp } = self.state else {
            return;
        };
        self.state = Ask::Idle;
        for (peer, theirs) in std::mem::take(&mut self.deferred) {
            self.reply(peer, theirs, Some(stamp), out);
        }
    }

    fn handle_message(&mut self, _now: Time, from: NodeId, msg: RaMsg, out: &mut Outbox<RaMsg>) {
        match msg {
            RaMsg::Request { stamp } => {
                self.clock.observe(stamp.ts);
                if stamp.node != from {
                    return; // a stamp always names its sender
                }
                let defer = match &self.state {
                    Ask::Idle => false,
                    Ask::Held { .. } => true,
                    Ask::Wanting { stamp: mine, .. } => *mine < stamp,
                };
                if defer {
                    self.deferred.insert(from, stamp);
                } else {
                    self.reply(from, stamp, None, out);
                }
            }
            RaMsg::Reply { to, clock, after } => {
                self.clock.observe(clock);
                let Ask::Wanting { stamp, awaiting } = &mut self.state else {
                    return;
                };
                if to != *stamp {
                    return; // answers a request this node no longer makes
                }
                if after.is_some_and(|entered| entered > *stamp) {
                    // Overtaken by an entry with a larger stamp that never
                    // asked this node (it was down): ask again, later.
                    self.ask(out);
                    return;
                }
                awaiting.remove(&from);
                self.try_enter(out);
            }
        }
    }

    fn handle_peer_up(&mut self, _now: Time, peer: NodeId, out: &mut Outbox<RaMsg>) {
        self.alive.insert(peer);
        if let Ask::Wanting { stamp, awaiting } = &mut self.state {
            awaiting.insert(peer);
            out.send(peer, RaMsg::Request { stamp: *stamp });
        }
    }

    fn handle_peer_down(&mut self, _now: Time, peer: NodeId, out: &mut Outbox<RaMsg>) {
        self.alive.remove(&peer);
        self.deferred.remove(&peer);
        self.state.heard_from(peer);
        self.try_enter(out);
    }

    fn cs_state(&self) -> CsState {
        self.state.cs_state()
    }

    fn request_stamp(&self) -> Option<Stamp> {
        self.state.stamp()
    }

    fn watermark(&self) -> u64 {
        self.clock.now()
    }

    fn observe_watermark(&mut self, watermark: u64) {
        self.clock.observe(watermark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::Action;
    use std::time::Duration;

    const T: Duration = Duration::ZERO;
    type Out = Outbox<RaMsg>;

    fn n(id: u32) -> NodeId {
        NodeId(id)
    }

    fn node(id: u32, members: u32) -> RicartAgrawala {
        let cfg = AlgoConfig::for_test(id, members);
        let mut ra = RicartAgrawala::new(&cfg);
        let mut out = Out::new();
        for p in cfg.peers() {
            ra.handle_peer_up(T, p, &mut out);
        }
        ra
    }

    fn stamp(ts: u64, id: u32) -> Stamp {
        Stamp { ts, node: n(id) }
    }

    fn request(ts: u64, id: u32) -> RaMsg {
        RaMsg::Request { stamp: stamp(ts, id) }
    }

    fn reply(to: Stamp, clock: u64) -> RaMsg {
        RaMsg::Reply { to, clock, after: None }
    }

    fn send(to: u32, msg: RaMsg) -> Action<RaMsg> {
        Action::Send { to: n(to), msg }
    }

    /// Seed 001, exercise 2: P1 sends REQUEST(5), P2 sends REQUEST(3), P3 is
    /// not interested. P2 enters first; P1 enters after P2's deferred reply.
    #[test]
    fn two_requester_trace_from_seed_001() {
        let (mut p1, mut p2, mut p3) = (node(1, 3), node(2, 3), node(3, 3));
        let (mut o1, mut o2, mut o3) = (Out::new(), Out::new(), Out::new());
        p1.observe_watermark(4);
        p2.observe_watermark(2);
        let (s1, s2) = (stamp(5, 1), stamp(3, 2));

        p1.handle_request(T, &mut o1);
        assert_eq!(o1.take(), vec![send(2, request(5, 1)), send(3, request(5, 1))]);
        p2.handle_request(T, &mut o2);
        assert_eq!(o2.take(), vec![send(1, request(3, 2)), send(3, request(3, 2))]);

        // P3 is not interested: it answers both at once.
        p3.handle_message(T, n(1), request(5, 1), &mut o3);
        p3.handle_message(T, n(2), request(3, 2), &mut o3);
        assert_eq!(o3.take(), vec![send(1, reply(s1, 5)), send(2, reply(s2, 5))]);

        // P1 wants too, but 3 < 5: P2 has priority and gets a reply.
        p1.handle_message(T, n(2), request(3, 2), &mut o1);
        assert_eq!(o1.take(), vec![send(2, reply(s2, 5))]);
        // P2 defers P1: 5 > 3.
        p2.handle_message(T, n(1), request(5, 1), &mut o2);
        assert!(o2.is_empty(), "P2 defers its reply to P1");

        // P2 has both replies and enters first.
        p2.handle_message(T, n(1), reply(s2, 5), &mut o2);
        assert!(o2.is_empty());
        p2.handle_message(T, n(3), reply(s2, 5), &mut o2);
        assert_eq!(o2.take(), vec![Action::Grant { fence: Fence::new(3, 2) }]);

        // P1 has P3's reply but waits for P2's.
        p1.handle_message(T, n(3), reply(s1, 5), &mut o1);
        assert!(o1.is_empty());
        assert_eq!(p1.cs_state(), CsState::Wanting);

        // P2 leaves and sends the deferred reply; P1 enters.
        p2.handle_release(T, &mut o2);
        let deferred = RaMsg::Reply { to: s1, clock: 5, after: Some(s2) };
        assert_eq!(o2.take(), vec![send(1, deferred.clone())]);
        p1.handle_message(T, n(2), deferred, &mut o1);
        assert_eq!(o1.take(), vec![Action::Grant { fence: Fence::new(5, 1) }]);
        assert!(Fence::new(5, 1) > Fence::new(3, 2));
    }

    #[test]
    fn holder_defers_every_request_until_it_leaves() {
        let mut p = node(1, 2);
        let mut out = Out::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), reply(stamp(1, 1), 1), &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 1) }]);
        p.handle_message(T, n(2), request(0, 2), &mut out);
        assert!(out.is_empty(), "even an older stamp waits while held");
        p.handle_release(T, &mut out);
        let after = Some(stamp(1, 1));
        assert_eq!(out.take(), vec![send(2, RaMsg::Reply { to: stamp(0, 2), clock: 1, after })]);
    }

    #[test]
    fn crashed_peer_is_dropped_from_the_replies_awaited() {
        let mut p = node(1, 3);
        let mut out = Out::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), reply(stamp(1, 1), 1), &mut out);
        assert!(out.is_empty());
        p.handle_peer_down(T, n(3), &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 1) }]);
    }

    #[test]
    fn newcomer_is_asked_while_waiting() {
        let mut p = node(1, 3);
        let mut out = Out::new();
        p.handle_peer_down(T, n(3), &mut out);
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(2, request(1, 1))]);
        p.handle_peer_up(T, n(3), &mut out);
        assert_eq!(out.take(), vec![send(3, request(1, 1))]);
        p.handle_message(T, n(2), reply(stamp(1, 1), 1), &mut out);
        assert!(out.is_empty(), "the newcomer's reply is awaited too");
    }

    #[test]
    fn overtaken_request_is_restamped_and_asked_again() {
        // Node 2 restarted and stamped (1, 2) while node 3 held with (9, 3).
        let mut p = node(2, 3);
        let mut out = Out::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(1), reply(stamp(1, 2), 1), &mut out);
        let overtaken = RaMsg::Reply { to: stamp(1, 2), clock: 9, after: Some(stamp(9, 3)) };
        p.handle_message(T, n(3), overtaken, &mut out);
        assert_eq!(out.take(), vec![send(1, request(10, 2)), send(3, request(10, 2))]);
        // A late reply to the old request does not count for the new one.
        p.handle_message(T, n(1), reply(stamp(1, 2), 9), &mut out);
        p.handle_message(T, n(3), reply(stamp(10, 2), 10), &mut out);
        assert!(out.is_empty());
        p.handle_message(T, n(1), reply(stamp(10, 2), 10), &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(10, 2) }]);
    }

    #[test]
    fn lone_node_enters_at_once() {
        let mut p = node(1, 1);
        let mut out = Out::new();
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 1) }]);
    }

    #[test]
    fn request_with_a_forged_stamp_is_ignored() {
        let mut p = node(1, 3);
        let mut out = Out::new();
        p.handle_message(T, n(2), request(1, 3), &mut out);
        assert!(out.is_empty());
    }
}
