//! # `lamport` — a replicated request queue
//!
//! **Source.** Lamport, "Time, Clocks, and the Ordering of Events in a
//! Distributed System" (1978), the algorithm Kshemkalyani & Singhal (2008, ch. 9) measure the others
//! against: every node keeps a copy of one queue of requests ordered by
//! timestamp, and the head of the queue may enter.
//!
//! **Assumptions.** Reliable FIFO links while both ends are up (a RELEASE
//! must not overtake its REQUEST); crash-stop failures reported by the
//! failure detector; no partitions.
//!
//! **Messages per entry.** 3(N-1): a REQUEST to every other live node, a
//! REPLY from each, a RELEASE to each. Synchronisation delay: 1 message
//! delay (the RELEASE).
//!
//! **State walk.** To ask, a node stamps a request with its Lamport clock
//! and id, queues it and sends REQUEST to every live peer, which queues it
//! and answers REPLY at once. The node *enters* when (1) its request heads
//! its own queue (a reader: no writer is ahead of it; see *Readers and
//! writers*) and (2) from every live peer it has a message stamped
//! later than the request: by FIFO, no earlier request can still be on its
//! way. Leaving, it dequeues the request and sends RELEASE; a RELEASE
//! dequeues the sender's request everywhere.
//!
//! **Failures and newcomers.** A peer reported down leaves every queue and
//! is no longer waited for; a RELEASE dequeues every request of its
//! sender up to the stamp it names. A peer that was suspected without
//! crashing (stopped, or cut off) comes back believing what it believed:
//! meeting again, each side withdraws a request under way and asks again
//! with a fresh stamp (entries made meanwhile never asked the other side,
//! and may be stamped above it), or, if idle, sends a RELEASE of
//! everything it ever asked (the RELEASEs it sent meanwhile went to the
//! live peers only). A node that wants or holds the critical section
//! sends its request to a peer that comes up, so the newcomer's queue has
//! it; a waiting node also waits for the newcomer's reply. Because a holder
//! entered before the newcomer could ask, a request stamped *below* the
//! holder's own can only come from a node that missed it: the holder defers
//! that reply until it leaves (the condition-(2) proof no longer covers it)
//! and then names its own entry in the reply. The newcomer, overtaken by a
//! larger stamp, withdraws its request and asks again with a fresh one, so
//! stamp order and entry order stay one.
//!
//! **Fences.** The request's stamp, timestamp in the high bits and node id
//! in the low bits: entries follow stamp order, so fences grow.
//!
//! **Readers and writers.** A request says whether it reads or writes, and
//! the queue keeps each request's mode. Condition (1) becomes: no request
//! that conflicts with this one is queued ahead of it. A writer still
//! waits to head the queue; a reader waits only for the writers ahead of
//! it, so readers adjacent in stamp order hold together, and no reader
//! enters ahead of a writer stamped before it: the fair readers and
//! writers of Courtois, Heymans and Parnas ("Concurrent control with
//! 'readers' and 'writers'", CACM 14(10), 1971) on Lamport's queue.
//! Conflicting entries still follow stamp order, so a writer's fence is
//! above every earlier grant's and a reader's above every earlier
//! writer's; two readers may enter out of stamp order, which nothing
//! needs. Messages per entry stay 3(N−1), read or write. A holder defers
//! a request stamped below its own whatever the modes (only a newcomer
//! sends one), so a newcomer still asks again above every entry it missed.

use super::ask::Ask;
use crate::algorithm::{AlgoConfig, Algorithm, MutexAlgorithm, Out};
use crate::outbox::{message_kinds, NoTimer, Time};
use crate::types::{CsState, Fence, LamportClock, Mode, NodeId, Stamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The messages of [`Lamport`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum LamportMsg {
    /// Queue my request.
    Request {
        /// The request.
        stamp: Stamp,
        /// Whether it reads or writes.
        mode: Mode,
    },
    /// Your request is queued here; this is my clock.
    Reply {
        /// The replier's Lamport clock, later than the request's stamp.
        clock: u64,
        /// For a reply deferred behind the replier's own entry: that
        /// entry's stamp.
        after: Option<Stamp>,
    },
    /// Dequeue my request: I left (or withdrew it).
    Release {
        /// The request being removed.
        stamp: Stamp,
        /// The sender's Lamport clock.
        clock: u64,
    },
}

message_kinds!(LamportMsg {
    Request => "request",
    Reply => "reply",
    Release => "release",
});

/// Lamport's algorithm; see the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct Lamport {
    id: NodeId,
    alive: BTreeSet<NodeId>,
    clock: LamportClock,
    state: Ask,
    /// The mode of the request under way (or of the last one).
    mode: Mode,
    /// Every request known, this node's own included, in stamp order, and
    /// its mode.
    queue: BTreeMap<Stamp, Mode>,
    /// Replies held back while holding (requests stamped below this node's
    /// own entry), by requester.
    deferred: BTreeMap<NodeId, Stamp>,
}

impl Lamport {
    /// A node with nobody known to be up yet.
    pub fn new(cfg: &AlgoConfig) -> Self {
        Lamport {
            id: cfg.id,
            alive: BTreeSet::new(),
            clock: LamportClock::default(),
            state: Ask::Idle,
            mode: Mode::Write,
            queue: BTreeMap::new(),
            deferred: BTreeMap::new(),
        }
    }

    /// Stamps a new request, queues it and sends it to every live peer.
    fn ask(&mut self, out: &mut Out<Lamport>) {
        let (stamp, mode) = (Stamp { ts: self.clock.tick(), node: self.id }, self.mode);
        self.queue.insert(stamp, mode);
        out.broadcast(self.alive.iter().copied(), LamportMsg::Request { stamp, mode });
        self.state = Ask::Wanting { stamp, awaiting: self.alive.clone() };
        self.try_enter(out);
    }

    /// A message stamped `ts` arrived from `from`: it no longer blocks
    /// condition (2) if it is later than this node's request.
    fn heard(&mut self, from: NodeId, ts: u64) {
        if let Ask::Wanting { stamp, awaiting } = &mut self.state {
            if (Stamp { ts, node: from }) > *stamp {
                awaiting.remove(&from);
            }
        }
    }

    /// Enters once condition (2) holds and no request queued ahead
    /// conflicts with this one (condition (1)).
    fn try_enter(&mut self, out: &mut Out<Lamport>) {
        if let Ask::Wanting { stamp, awaiting } = &self.state {
            let mode = self.mode;
            let clear = || self.queue.range(..*stamp).all(|(_, &m)| !m.conflicts(mode));
            if awaiting.is_empty() && clear() {
                let stamp = *stamp;
                self.state = Ask::Held { stamp };
                out.grant(Fence::from(stamp));
            }
        }
    }

    fn reply(&mut self, to: NodeId, after: Option<Stamp>, out: &mut Out<Lamport>) {
        let clock = self.clock.tick();
        out.send(to, LamportMsg::Reply { clock, after });
    }
}

impl Algorithm for Lamport {
    type Msg = LamportMsg;
    type Timer = NoTimer;

    fn handle_message(
        &mut self,
        _now: Time,
        from: NodeId,
        msg: LamportMsg,
        out: &mut Out<Lamport>,
    ) {
        match msg {
            LamportMsg::Request { stamp, mode } => {
                self.clock.observe(stamp.ts);
                if stamp.node != from {
                    return; // a stamp always names its sender
                }
                // One outstanding request per node: a new one replaces it.
                self.queue.retain(|s, _| s.node != from);
                self.queue.insert(stamp, mode);
                self.heard(from, stamp.ts);
                match self.state {
                    // Only a node that missed this one's request can stamp
                    // below it once it holds: answer when leaving.
                    Ask::Held { stamp: mine } if stamp < mine => {
                        self.deferred.insert(from, stamp);
                    }
                    _ => self.reply(from, None, out),
                }
            }
            LamportMsg::Reply { clock, after } => {
                self.clock.observe(clock);
                if let Ask::Wanting { stamp, .. } = &self.state {
                    if after.is_some_and(|entered| entered > *stamp) {
                        // Overtaken by a larger stamp that never saw this
                        // request: withdraw it and ask again, later.
                        let old = *stamp;
                        self.queue.remove(&old);
                        let clock = self.clock.tick();
                        let release = LamportMsg::Release { stamp: old, clock };
                        out.broadcast(self.alive.iter().copied(), release);
                        self.ask(out);
                        return;
                    }
                }
                self.heard(from, clock);
                self.try_enter(out);
            }
            LamportMsg::Release { stamp, clock } => {
                self.clock.observe(clock);
                // A node has one request at a time, each stamped above the
                // last: whatever it asked up to this one is over.
                if stamp.node == from {
                    self.queue.retain(|s, _| s.node != from || *s > stamp);
                }
                self.heard(from, clock);
                self.try_enter(out);
            }
        }
    }

    fn handle_peer_up(&mut self, _now: Time, peer: NodeId, out: &mut Out<Lamport>) {
        self.alive.insert(peer);
        match &mut self.state {
            Ask::Wanting { stamp, awaiting } => {
                awaiting.insert(peer);
                out.send(peer, LamportMsg::Request { stamp: *stamp, mode: self.mode });
            }
            Ask::Held { stamp } => {
                out.send(peer, LamportMsg::Request { stamp: *stamp, mode: self.mode })
            }
            Ask::Idle => {}
        }
    }

    /// As to a newcomer, and when idle, a RELEASE of everything this node
    /// ever asked: a peer that was out of touch missed the RELEASEs sent
    /// meanwhile, and would keep a finished request at the head of its
    /// queue for ever. Likewise the peer's own requests leave this queue:
    /// it says again what it still wants (as this node does), and if its
    /// instance of the lock was forgotten meanwhile, nobody would release
    /// them here. Neither side can enter on the strength of this: one
    /// that wants asks again, and needs the other's reply, which comes
    /// behind whatever the other says again.
    fn handle_peer_back(&mut self, now: Time, peer: NodeId, out: &mut Out<Lamport>) {
        self.alive.insert(peer);
        self.queue.retain(|s, _| s.node != peer);
        self.deferred.remove(&peer);
        match self.state {
            // Entries made while the two were apart never asked the other
            // side, and may carry stamps above this request's: withdraw
            // it and ask again, later (as when overtaken).
            Ask::Wanting { stamp, .. } => {
                self.queue.remove(&stamp);
                let clock = self.clock.tick();
                out.broadcast(self.alive.iter().copied(), LamportMsg::Release { stamp, clock });
                self.ask(out);
            }
            Ask::Held { .. } => self.handle_peer_up(now, peer, out),
            Ask::Idle => {
                let clock = self.clock.tick();
                let stamp = Stamp { ts: clock, node: self.id };
                out.send(peer, LamportMsg::Release { stamp, clock });
            }
        }
    }

    fn handle_peer_down(&mut self, _now: Time, peer: NodeId, out: &mut Out<Lamport>) {
        self.alive.remove(&peer);
        self.queue.retain(|s, _| s.node != peer);
        self.deferred.remove(&peer);
        self.state.heard_from(peer);
        self.try_enter(out);
    }
}

impl MutexAlgorithm for Lamport {
    /// Idle with an empty queue and no reply held back.
    fn forgettable(&self) -> bool {
        self.state == Ask::Idle && self.queue.is_empty() && self.deferred.is_empty()
    }

    fn handle_request(&mut self, now: Time, out: &mut Out<Lamport>) {
        self.handle_request_in(now, Mode::Write, out);
    }

    fn handle_request_in(&mut self, _now: Time, mode: Mode, out: &mut Out<Lamport>) {
        if self.state == Ask::Idle {
            self.mode = mode;
            self.ask(out);
        }
    }

    fn mode_of(&self, fence: Fence) -> Mode {
        match self.state {
            Ask::Held { stamp } if Fence::from(stamp) == fence => self.mode,
            _ => Mode::Write,
        }
    }

    fn handle_release(&mut self, _now: Time, out: &mut Out<Lamport>) {
        let Ask::Held { stamp } = self.state else { return };
        self.state = Ask::Idle;
        self.queue.remove(&stamp);
        let clock = self.clock.tick();
        out.broadcast(self.alive.iter().copied(), LamportMsg::Release { stamp, clock });
        for (peer, _) in std::mem::take(&mut self.deferred) {
            self.reply(peer, Some(stamp), out);
        }
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
    use super::LamportMsg::*;
    use super::*;
    use crate::outbox::Action;
    use crate::testkit::*;

    const W: Mode = Mode::Write;
    const R: Mode = Mode::Read;

    fn node(id: u32, members: u32) -> Lamport {
        let cfg = AlgoConfig::for_test(id, members);
        with_up(Lamport::new(&cfg), cfg.peers())
    }

    #[test]
    fn entry_costs_request_reply_release_to_every_peer() {
        let mut p = node(1, 3);
        let mut out = Out::<Lamport>::new();
        p.handle_request(T, &mut out);
        assert_eq!(
            out.take(),
            vec![
                send(2, Request { stamp: stamp(1, 1), mode: W }),
                send(3, Request { stamp: stamp(1, 1), mode: W })
            ]
        );
        p.handle_message(T, n(2), Reply { clock: 2, after: None }, &mut out);
        assert!(out.is_empty(), "still waiting for node 3");
        p.handle_message(T, n(3), Reply { clock: 2, after: None }, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 1) }]);
        p.handle_release(T, &mut out);
        assert_eq!(
            out.take(),
            vec![
                send(2, Release { stamp: stamp(1, 1), clock: 3 }),
                send(3, Release { stamp: stamp(1, 1), clock: 3 }),
            ]
        );
    }

    #[test]
    fn every_request_is_answered_at_once_and_queued() {
        let mut p = node(2, 3);
        let mut out = Out::<Lamport>::new();
        p.handle_message(T, n(1), Request { stamp: stamp(4, 1), mode: W }, &mut out);
        assert_eq!(out.take(), vec![send(1, Reply { clock: 5, after: None })]);
        assert_eq!(p.queue.first_key_value(), Some((&stamp(4, 1), &W)));
    }

    #[test]
    fn the_head_of_the_queue_enters_first() {
        // Node 2 asks with (1, 2); node 1's earlier (1, 1) is queued ahead.
        let mut p = node(2, 3);
        let mut out = Out::<Lamport>::new();
        p.handle_request(T, &mut out);
        p.handle_message(T, n(1), Request { stamp: stamp(1, 1), mode: W }, &mut out);
        p.handle_message(T, n(3), Reply { clock: 5, after: None }, &mut out);
        out.take();
        assert_eq!(p.cs_state(), CsState::Wanting, "(1, 1) heads the queue");
        p.handle_message(T, n(1), Release { stamp: stamp(1, 1), clock: 6 }, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 2) }]);
    }

    #[test]
    fn a_crashed_requester_leaves_the_queue() {
        let mut p = node(2, 3);
        let mut out = Out::<Lamport>::new();
        p.handle_request(T, &mut out);
        p.handle_message(T, n(1), Request { stamp: stamp(1, 1), mode: W }, &mut out);
        p.handle_message(T, n(3), Reply { clock: 5, after: None }, &mut out);
        out.take();
        p.handle_peer_down(T, n(1), &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 2) }]);
    }

    #[test]
    fn a_newcomer_gets_the_holders_request_and_a_lower_stamp_waits() {
        let mut p = node(1, 3);
        let mut out = Out::<Lamport>::new();
        p.handle_peer_down(T, n(3), &mut out);
        p.observe_watermark(8);
        p.handle_request(T, &mut out);
        p.handle_message(T, n(2), Reply { clock: 10, after: None }, &mut out);
        assert_eq!(out.take().last(), Some(&Action::Grant { fence: Fence::new(9, 1) }));
        // Node 3 comes back and is told of the holder's request.
        p.handle_peer_up(T, n(3), &mut out);
        assert_eq!(out.take(), vec![send(3, Request { stamp: stamp(9, 1), mode: W })]);
        // Its own request, stamped lower, is answered only when the holder
        // leaves, naming the entry that overtook it.
        p.handle_message(T, n(3), Request { stamp: stamp(2, 3), mode: W }, &mut out);
        assert!(out.is_empty());
        p.handle_release(T, &mut out);
        assert_eq!(
            out.take(),
            vec![
                send(2, Release { stamp: stamp(9, 1), clock: 11 }),
                send(3, Release { stamp: stamp(9, 1), clock: 11 }),
                send(3, Reply { clock: 12, after: Some(stamp(9, 1)) }),
            ]
        );
    }

    #[test]
    fn an_overtaken_request_is_withdrawn_and_asked_again() {
        let mut p = node(3, 3);
        let mut out = Out::<Lamport>::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(1), Reply { clock: 9, after: Some(stamp(9, 1)) }, &mut out);
        assert_eq!(
            out.take(),
            vec![
                send(1, Release { stamp: stamp(1, 3), clock: 10 }),
                send(2, Release { stamp: stamp(1, 3), clock: 10 }),
                send(1, Request { stamp: stamp(11, 3), mode: W }),
                send(2, Request { stamp: stamp(11, 3), mode: W }),
            ]
        );
    }

    /// Readers queued side by side enter together; a writer stamped
    /// between them keeps the later reader out until it has left.
    #[test]
    fn readers_wait_only_for_the_writers_ahead() {
        let mut p = node(3, 3);
        let mut out = Out::<Lamport>::new();
        p.handle_message(T, n(1), Request { stamp: stamp(1, 1), mode: R }, &mut out);
        p.handle_message(T, n(2), Request { stamp: stamp(2, 2), mode: W }, &mut out);
        out.take();
        p.handle_request_in(T, R, &mut out);
        out.take();
        p.handle_message(T, n(1), Reply { clock: 5, after: None }, &mut out);
        p.handle_message(T, n(2), Reply { clock: 5, after: None }, &mut out);
        assert!(out.is_empty(), "the writer (2, 2) is ahead of (4, 3)");
        p.handle_message(T, n(2), Release { stamp: stamp(2, 2), clock: 6 }, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(4, 3) }], "(1, 1) reads");
        assert_eq!(p.mode_of(Fence::new(4, 3)), R);

        let mut w = node(3, 3);
        w.handle_message(T, n(1), Request { stamp: stamp(1, 1), mode: R }, &mut out);
        out.take();
        w.handle_request(T, &mut out);
        out.take();
        w.handle_message(T, n(1), Reply { clock: 5, after: None }, &mut out);
        w.handle_message(T, n(2), Reply { clock: 5, after: None }, &mut out);
        assert!(out.is_empty(), "a writer waits for the reader (1, 1)");
        w.handle_message(T, n(1), Release { stamp: stamp(1, 1), clock: 6 }, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(3, 3) }]);
    }
}
