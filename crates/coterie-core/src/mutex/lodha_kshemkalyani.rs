//! # `lodha-kshemkalyani` — local request queues, REPLY and FLUSH
//!
//! **Source.** Lodha and Kshemkalyani, "A fair distributed mutual exclusion
//! algorithm" (IEEE TPDS, 2000), as Algorithm 9.4 of Kshemkalyani & Singhal (2008, §9.6)
//! gives it: REQUEST, REPLY and FLUSH messages, a local request queue (LRQ)
//! and a reply vector (RV) on every node, and the example of figures
//! 9.11–9.15.
//!
//! **Assumptions.** Reliable FIFO links while both ends are up (a REPLY must
//! not be overtaken by the same sender's next REQUEST); crash-stop failures
//! reported by the failure detector; no partitions (a peer wrongly
//! suspected is no longer waited for, so both sides of a partition can
//! enter).
//!
//! **Messages per entry.** 2(N-1) at light load: a REQUEST to every other
//! live node and a REPLY from each, as in Ricart–Agrawala. Under contention
//! it is cheaper, down to N-1: two requests that cross each other are
//! *concurrent*, and each one's REQUEST stands in for the REPLY the other
//! would have waited for; the node that goes first then hands over with a
//! single FLUSH to the next concurrent request instead of a REPLY to each
//! (the book counts 2N - |CSet| or 2N - 1 - |CSet| for a concurrency set of
//! |CSet| requests). When every node always wants, the saving is small: a
//! node that asks again right after leaving has already been heard from by
//! everyone still waiting, so its new request is deferred rather than
//! concurrent and costs its REPLYs as usual (the simulator measures about
//! 0.3 to 0.9 messages under 2(N-1) for N = 3 to 13). Synchronisation
//! delay: 1 message delay (the FLUSH or the deferred REPLY).
//!
//! **State walk.** An *idle* node answers every REQUEST at once with a REPLY
//! naming its last entry. To ask, a node stamps a request with its Lamport
//! clock and id, empties its queue but for that request, sends REQUEST to
//! every live peer and is *wanting*; it has heard from nobody yet (the RV is
//! all clear). While it wants, a REQUEST from a peer it has not heard from
//! since asking is a *concurrent* request: it goes into the queue in stamp
//! order and counts as that peer's answer (the peer in turn queues this
//! node's request, so whichever is later waits for the earlier). A REQUEST
//! from a peer already heard from came after that peer answered, so it is
//! later than this node's own: its answer is *deferred*. A REPLY or FLUSH
//! counts as its sender's answer, and since entries happen in stamp order
//! it also says that every request up to the entry it names is done, so
//! those leave the queue. The node *holds* once every live peer has
//! answered and its own request heads its queue. Leaving, it sends a FLUSH
//! to the next request in its queue (the following concurrent request, now
//! free to go as far as this node is concerned) and a REPLY to every
//! deferred request, and is idle again.
//!
//! **Crashes.** A peer reported down leaves the queue, the deferred set and
//! the answers awaited. A node that flushed a peer that then goes down
//! hands the FLUSH on to the next live request of the queue it had when it
//! left, so the chain of hand-overs is not cut by a dead link: a crash
//! between receiving a FLUSH and passing it on would otherwise strand every
//! later request whose queue still lists an entry only that chain clears.
//! As a last resort a node that has waited long (twice the failure timeout)
//! asks again the peers it still waits for and those whose requests are
//! ahead of its own: an idle peer answers a repeated REQUEST with a REPLY,
//! which clears what it had done.
//!
//! **Newcomers.** A peer that comes up (or restarts) while this node waits
//! is sent the request and its answer awaited, as in Ricart–Agrawala. A
//! restarted node comes back empty, with a clock caught up from its peers'
//! watermarks before it first asks.
//!
//! **Fences.** Entries happen in stamp order, so the request's stamp,
//! timestamp in the high bits and node id in the low bits, is the fence; it
//! stays valid when a holder crashes, since the next entrant's stamp is
//! larger. The one way to be overtaken is to be new: a node that restarted
//! may stamp its request below an entry already under way that never asked
//! it. Every message carries an entry of its sender (a REPLY and a REQUEST
//! the sender's last entry, a FLUSH the entry it ends), so a waiting node
//! that learns of an entry stamped above its own request knows it was
//! overtaken: it takes a fresh stamp and asks again. Peers that hold its
//! old request in their queue replace it in place (the re-stamped request
//! only moves back, so whoever waited for it still does), and a REPLY
//! names the request it answers, so a reply to an abandoned request never
//! counts. (A newcomer overtaken by an entry whose holder then crashes
//! before anyone tells it is not caught; this needs a restart, a request
//! inside the few milliseconds before its peers see it, and a second
//! crash, as for `ricart-agrawala`.)

use super::ask::Ask;
use crate::algorithm::{AlgoConfig, Algorithm, MutexAlgorithm, Out};
use crate::outbox::{message_kinds, timers, Time};
use crate::types::{CsState, Fence, LamportClock, NodeId, Stamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The messages of [`LodhaKshemkalyani`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum LkMsg {
    /// I want the critical section; this is my place in line.
    Request {
        /// The request's stamp.
        stamp: Stamp,
        /// The sender's last entry, if it ever entered.
        last: Option<Stamp>,
    },
    /// I am not competing with your request: go ahead as far as I am
    /// concerned. Every request up to `last` is done.
    Reply {
        /// The request answered.
        to: Stamp,
        /// The sender's last entry, if it ever entered.
        last: Option<Stamp>,
    },
    /// I left the critical section and you are next in my queue. Every
    /// request up to `done` is done.
    Flush {
        /// The request handed over to.
        to: Stamp,
        /// The entry the sender just ended.
        done: Stamp,
    },
}

message_kinds!(LkMsg {
    Request => "request",
    Reply => "reply",
    Flush => "flush",
});

timers! {
    /// The timers of [`LodhaKshemkalyani`].
    pub enum LkTimer {
        /// The timer that makes a long-waiting node ask again.
        Reask,
    }
}

/// The largest timestamp accepted from a peer: anything above would
/// saturate the fence's high part (and could overflow the clock), so it can
/// only be forged and the message is dropped.
const MAX_TS: u64 = (u64::MAX >> Fence::MINOR_BITS) - 1;

/// The FLUSH a node sent when it left, kept so that it can be handed on if
/// its receiver goes down before passing it further.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Baton {
    /// The entry that ended.
    done: Stamp,
    /// The request it was handed to.
    to: Stamp,
    /// The rest of the queue at the time, in stamp order.
    rest: Vec<Stamp>,
}

/// The Lodha–Kshemkalyani algorithm; see the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct LodhaKshemkalyani {
    id: NodeId,
    alive: BTreeSet<NodeId>,
    clock: LamportClock,
    /// This node's request; while wanting, `awaiting` is the reply vector's
    /// complement: the live peers not heard from since asking.
    state: Ask,
    /// The local request queue: this node's request and the concurrent
    /// requests of its peers (at most one each), in stamp order.
    queue: BTreeSet<Stamp>,
    /// Requests answered only when this node leaves, by requester.
    deferred: BTreeMap<NodeId, Stamp>,
    /// The newest request seen from each live peer: anything older is
    /// stale, the same one again is a peer asking again.
    seen: BTreeMap<NodeId, Stamp>,
    /// This node's last entry.
    last: Option<Stamp>,
    /// The last FLUSH sent, while it may still need handing on.
    baton: Option<Baton>,
    /// How long a node waits before asking again.
    reask_every: Duration,
    /// Whether the re-ask timer is armed (so that a grant cancels it).
    reask_armed: bool,
}

impl LodhaKshemkalyani {
    /// A node with nobody known to be up yet.
    pub fn new(cfg: &AlgoConfig) -> Self {
        LodhaKshemkalyani {
            id: cfg.id,
            alive: BTreeSet::new(),
            clock: LamportClock::default(),
            state: Ask::Idle,
            queue: BTreeSet::new(),
            deferred: BTreeMap::new(),
            seen: BTreeMap::new(),
            last: None,
            baton: None,
            reask_every: cfg.timing.failure_timeout * 2,
            reask_armed: false,
        }
    }

    fn request_msg(&self, stamp: Stamp) -> LkMsg {
        LkMsg::Request { stamp, last: self.last }
    }

    /// Enters once every live peer has answered and this node's request
    /// heads its queue.
    fn try_enter(&mut self, out: &mut Out<LodhaKshemkalyani>) {
        let Ask::Wanting { stamp, awaiting } = &self.state else {
            return;
        };
        if !awaiting.is_empty() || self.queue.first() != Some(stamp) {
            return;
        }
        let stamp = *stamp;
        self.state = Ask::Held { stamp };
        out.grant(Fence::from(stamp));
        if std::mem::take(&mut self.reask_armed) {
            out.cancel_timer(LkTimer::Reask);
        }
    }

    /// A peer told of `entry`, a request that has been granted: every
    /// request stamped up to it is done. A waiting request stamped below it
    /// was overtaken and is stamped afresh.
    fn learn_entry(&mut self, entry: Stamp, out: &mut Out<LodhaKshemkalyani>) {
        self.clock.observe(entry.ts);
        if matches!(self.state, Ask::Wanting { stamp, .. } if stamp < entry) {
            self.restamp(out);
        }
        let own = self.state.stamp();
        self.queue.retain(|s| Some(*s) == own || *s > entry);
    }

    /// Overtaken: takes a stamp above everything seen and asks again. The
    /// concurrent requests queued stay (their owners replace this node's
    /// old request in place, and it only moves back); a deferred request
    /// that now comes first joins the queue, since its owner will not wait
    /// for this one. Every other peer must answer afresh.
    fn restamp(&mut self, out: &mut Out<LodhaKshemkalyani>) {
        let Ask::Wanting { stamp: old, .. } = self.state else {
            return;
        };
        let stamp = Stamp { ts: self.clock.tick(), node: self.id };
        self.queue.remove(&old);
        self.queue.insert(stamp);
        let ahead: Vec<NodeId> =
            self.deferred.iter().filter(|(_, s)| **s < stamp).map(|(&n, _)| n).collect();
        for peer in ahead {
            if let Some(s) = self.deferred.remove(&peer) {
                self.queue.insert(s);
            }
        }
        let awaiting: BTreeSet<NodeId> = self
            .alive
            .iter()
            .copied()
            .filter(|p| !self.deferred.contains_key(p) && !self.queue.iter().any(|s| s.node == *p))
            .collect();
        self.state = Ask::Wanting { stamp, awaiting };
        out.broadcast(self.alive.iter().copied(), self.request_msg(stamp));
    }

    fn on_request(
        &mut self,
        from: NodeId,
        stamp: Stamp,
        last: Option<Stamp>,
        out: &mut Out<LodhaKshemkalyani>,
    ) {
        if stamp.node != from {
            return; // a request always names its sender
        }
        self.clock.observe(stamp.ts);
        if let Some(entry) = last {
            self.learn_entry(entry, out);
        }
        let seen = self.seen.get(&from).copied();
        let newer = seen.iter().all(|&s| stamp > s);
        let again = seen == Some(stamp);
        if !(newer || again && self.state == Ask::Idle) {
            return; // stale, or asked again of a node already dealing with it
        }
        self.seen.insert(from, stamp);
        match &mut self.state {
            Ask::Idle => out.send(from, LkMsg::Reply { to: stamp, last: self.last }),
            Ask::Held { .. } => {
                // An older request of the sender's, still queued, was
                // abandoned for this one.
                self.queue.retain(|s| s.node != from);
                self.deferred.insert(from, stamp);
            }
            Ask::Wanting { awaiting, .. } => {
                if let Some(old) = self.queue.iter().find(|s| s.node == from).copied() {
                    // The sender was overtaken and stamped afresh: its
                    // request keeps its standing as a concurrent one.
                    self.queue.remove(&old);
                    self.queue.insert(stamp);
                } else if self.deferred.contains_key(&from) || !awaiting.remove(&from) {
                    // Sent after the sender answered this node's request.
                    self.deferred.insert(from, stamp);
                } else {
                    // Concurrent: queued, and it answers for its sender.
                    self.queue.insert(stamp);
                }
                self.try_enter(out);
            }
        }
    }

    fn on_reply(
        &mut self,
        from: NodeId,
        to: Stamp,
        last: Option<Stamp>,
        out: &mut Out<LodhaKshemkalyani>,
    ) {
        if to.node != self.id {
            return;
        }
        if let Some(entry) = last {
            self.learn_entry(entry, out);
        }
        // A REPLY is sent only by a node that competes for nothing: any
        // request of its queued here is over.
        self.queue.retain(|s| s.node != from);
        if let Ask::Wanting { stamp, awaiting } = &mut self.state {
            if to == *stamp {
                awaiting.remove(&from);
            }
        }
        self.try_enter(out);
    }

    fn on_flush(&mut self, from: NodeId, to: Stamp, done: Stamp, out: &mut Out<LodhaKshemkalyani>) {
        if to.node != self.id || done.node != from {
            return;
        }
        self.learn_entry(done, out);
        if let Ask::Wanting { stamp, awaiting } = &mut self.state {
            if to == *stamp {
                awaiting.remove(&from);
            }
        }
        self.try_enter(out);
    }
}

/// Whether every stamp a message carries is one a peer could honestly send.
fn plausible(msg: &LkMsg) -> bool {
    let ok = |s: &Stamp| s.ts <= MAX_TS;
    match msg {
        LkMsg::Request { stamp, last } => ok(stamp) && last.iter().all(ok),
        LkMsg::Reply { to, last } => ok(to) && last.iter().all(ok),
        LkMsg::Flush { to, done } => ok(to) && ok(done),
    }
}

impl Algorithm for LodhaKshemkalyani {
    type Msg = LkMsg;
    type Timer = LkTimer;

    fn handle_message(
        &mut self,
        _now: Time,
        from: NodeId,
        msg: LkMsg,
        out: &mut Out<LodhaKshemkalyani>,
    ) {
        if from == self.id || !self.alive.contains(&from) || !plausible(&msg) {
            return;
        }
        match msg {
            LkMsg::Request { stamp, last } => self.on_request(from, stamp, last, out),
            LkMsg::Reply { to, last } => self.on_reply(from, to, last, out),
            LkMsg::Flush { to, done } => self.on_flush(from, to, done, out),
        }
    }

    fn handle_timer(&mut self, now: Time, timer: LkTimer, out: &mut Out<LodhaKshemkalyani>) {
        if timer != LkTimer::Reask {
            return;
        }
        self.reask_armed = false;
        let Ask::Wanting { stamp, awaiting } = &self.state else {
            return;
        };
        let stamp = *stamp;
        let mut ask: BTreeSet<NodeId> = awaiting.clone();
        ask.extend(self.queue.iter().filter(|s| **s < stamp).map(|s| s.node));
        out.broadcast(ask, self.request_msg(stamp));
        out.set_timer(LkTimer::Reask, now + self.reask_every);
        self.reask_armed = true;
    }

    fn handle_peer_up(&mut self, _now: Time, peer: NodeId, out: &mut Out<LodhaKshemkalyani>) {
        if peer == self.id || !self.alive.insert(peer) {
            return;
        }
        if let Ask::Wanting { stamp, awaiting } = &mut self.state {
            awaiting.insert(peer);
            let stamp = *stamp;
            out.send(peer, self.request_msg(stamp));
        }
    }

    fn handle_peer_down(&mut self, _now: Time, peer: NodeId, out: &mut Out<LodhaKshemkalyani>) {
        self.alive.remove(&peer);
        self.seen.remove(&peer);
        self.deferred.remove(&peer);
        self.queue.retain(|s| s.node != peer);
        self.state.heard_from(peer);
        if let Some(baton) = &mut self.baton {
            baton.rest.retain(|s| s.node != peer);
            if baton.to.node == peer {
                if baton.rest.is_empty() {
                    self.baton = None;
                } else {
                    baton.to = baton.rest.remove(0);
                    out.send(baton.to.node, LkMsg::Flush { to: baton.to, done: baton.done });
                }
            }
        }
        self.try_enter(out);
    }
}

impl MutexAlgorithm for LodhaKshemkalyani {
    /// Idle with an empty queue, no reply held back, no FLUSH to hand on
    /// and no re-ask due. (A peer's old REQUEST that reaches the next
    /// instance is answered at once, as by any idle node; a REPLY names
    /// the request it answers, so the peer takes it for what it is.)
    fn forgettable(&self) -> bool {
        self.state == Ask::Idle
            && self.queue.is_empty()
            && self.deferred.is_empty()
            && self.baton.is_none()
            && !self.reask_armed
    }

    fn handle_request(&mut self, now: Time, out: &mut Out<LodhaKshemkalyani>) {
        if self.state != Ask::Idle {
            return;
        }
        let stamp = Stamp { ts: self.clock.tick(), node: self.id };
        self.queue.clear();
        self.queue.insert(stamp);
        self.state = Ask::Wanting { stamp, awaiting: self.alive.clone() };
        out.broadcast(self.alive.iter().copied(), self.request_msg(stamp));
        self.try_enter(out);
        if self.state != (Ask::Held { stamp }) {
            out.set_timer(LkTimer::Reask, now + self.reask_every);
            self.reask_armed = true;
        }
    }

    fn handle_release(&mut self, _now: Time, out: &mut Out<LodhaKshemkalyani>) {
        let Ask::Held { stamp } = self.state else {
            return;
        };
        self.state = Ask::Idle;
        self.last = Some(stamp);
        let rest: Vec<Stamp> =
            std::mem::take(&mut self.queue).into_iter().filter(|s| *s > stamp).collect();
        self.baton = rest.split_first().map(|(&to, rest)| {
            out.send(to.node, LkMsg::Flush { to, done: stamp });
            Baton { done: stamp, to, rest: rest.to_vec() }
        });
        for (peer, theirs) in std::mem::take(&mut self.deferred) {
            out.send(peer, LkMsg::Reply { to: theirs, last: Some(stamp) });
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
        if watermark <= MAX_TS {
            self.clock.observe(watermark);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::Action;
    use crate::testkit::*;
    use std::time::Duration;

    /// The re-ask period of a node built with default timing.
    const REASK_AT: Duration = Duration::from_millis(500);

    fn node(id: u32, members: u32) -> LodhaKshemkalyani {
        let cfg = AlgoConfig::for_test(id, members);
        let mut lk = LodhaKshemkalyani::new(&cfg);
        let mut out = Out::<LodhaKshemkalyani>::new();
        for p in cfg.peers() {
            lk.handle_peer_up(T, p, &mut out);
        }
        assert!(out.is_empty());
        lk
    }

    fn request(ts: u64, id: u32) -> LkMsg {
        LkMsg::Request { stamp: stamp(ts, id), last: None }
    }

    fn reply(to: Stamp, last: Option<Stamp>) -> LkMsg {
        LkMsg::Reply { to, last }
    }

    fn flush(to: Stamp, done: Stamp) -> LkMsg {
        LkMsg::Flush { to, done }
    }

    fn arm() -> Action<LkMsg, LkTimer> {
        Action::SetTimer { timer: LkTimer::Reask, at: REASK_AT }
    }

    fn enter(ts: u64, id: u32) -> Vec<Action<LkMsg, LkTimer>> {
        vec![
            Action::Grant { fence: Fence::new(ts, u64::from(id)) },
            Action::CancelTimer { timer: LkTimer::Reask },
        ]
    }

    /// Kshemkalyani & Singhal (2008), figures 9.11–9.15. P1 and P2 ask concurrently, P1 first
    /// in priority; P1's REQUEST to P3 is slow. P3, idle, replies to P2,
    /// then asks itself, concurrently with P1 but after P2. P1 enters and
    /// hands over to P2 with one FLUSH; P2, which had P3's REQUEST deferred,
    /// answers it when leaving (the figure draws that message as a FLUSH;
    /// step 5b of Algorithm 9.4 makes it a REPLY, and it does the same:
    /// P3 drops (1,1) from its queue and enters). Nine messages for three
    /// entries, where Ricart–Agrawala needs twelve.
    #[test]
    fn paper_example_figures_9_11_to_9_15() {
        let (mut p1, mut p2, mut p3) = (node(1, 3), node(2, 3), node(3, 3));
        let (mut o1, mut o2, mut o3) = (
            Out::<LodhaKshemkalyani>::new(),
            Out::<LodhaKshemkalyani>::new(),
            Out::<LodhaKshemkalyani>::new(),
        );
        let (r1, r2, r3) = (stamp(1, 1), stamp(1, 2), stamp(2, 3));

        // Figure 9.11: P1 and P2 send out their REQUESTs.
        p1.handle_request(T, &mut o1);
        assert_eq!(o1.take(), vec![send(2, request(1, 1)), send(3, request(1, 1)), arm()]);
        p2.handle_request(T, &mut o2);
        assert_eq!(o2.take(), vec![send(1, request(1, 2)), send(3, request(1, 2)), arm()]);
        // Each queues the other's: concurrent, so no REPLY either way.
        p1.handle_message(T, n(2), request(1, 2), &mut o1);
        p2.handle_message(T, n(1), request(1, 1), &mut o2);
        assert!(o1.is_empty() && o2.is_empty());

        // Figure 9.12: P3, idle, replies to P2 only.
        p3.handle_message(T, n(2), request(1, 2), &mut o3);
        assert_eq!(o3.take(), vec![send(2, reply(r2, None))]);
        p2.handle_message(T, n(3), reply(r2, None), &mut o2);
        assert!(o2.is_empty(), "P2 has every answer but (1,1) heads its queue");

        // Figure 9.13: P3 asks; P1's slow REQUEST reaches it afterwards.
        p3.handle_request(T, &mut o3);
        assert_eq!(o3.take(), vec![send(1, request(2, 3)), send(2, request(2, 3)), arm()]);
        p3.handle_message(T, n(1), request(1, 1), &mut o3);
        assert!(o3.is_empty(), "queued ahead of P3's own");
        // P3's REQUEST is P1's last answer: P1 enters.
        p1.handle_message(T, n(3), request(2, 3), &mut o1);
        assert_eq!(o1.take(), enter(1, 1));
        // P2 already heard from P3 (its REPLY): this request came later.
        p2.handle_message(T, n(3), request(2, 3), &mut o2);
        assert!(o2.is_empty(), "deferred");

        // Figure 9.14: P1 leaves and sends a FLUSH to the next in its
        // queue, P2, and nothing to P3.
        p1.handle_release(T, &mut o1);
        assert_eq!(o1.take(), vec![send(2, flush(r2, r1))]);
        p2.handle_message(T, n(1), flush(r2, r1), &mut o2);
        assert_eq!(o2.take(), enter(1, 2));

        // Figure 9.15: P2 leaves and answers P3, which enters.
        p2.handle_release(T, &mut o2);
        assert_eq!(o2.take(), vec![send(3, reply(r3, Some(r2)))]);
        p3.handle_message(T, n(2), reply(r3, Some(r2)), &mut o3);
        assert_eq!(o3.take(), enter(2, 3));
        p3.handle_release(T, &mut o3);
        assert!(o3.is_empty());
        assert!(Fence::new(1, 1) < Fence::new(1, 2) && Fence::new(1, 2) < Fence::new(2, 3));
    }

    #[test]
    fn uncontended_entry_costs_a_request_and_a_reply_per_peer() {
        let mut p = node(1, 4);
        let mut out = Out::<LodhaKshemkalyani>::new();
        p.handle_request(T, &mut out);
        let asks: Vec<_> = (2..=4).map(|i| send(i, request(1, 1))).chain([arm()]).collect();
        assert_eq!(out.take(), asks);
        for i in 2..=4 {
            p.handle_message(T, n(i), reply(stamp(1, 1), None), &mut out);
        }
        assert_eq!(out.take(), enter(1, 1));
        p.handle_release(T, &mut out);
        assert!(out.is_empty(), "no FLUSH and no deferred REPLY when nobody else asked");
        // Idle again, it answers with the entry it made.
        p.handle_message(T, n(2), request(3, 2), &mut out);
        assert_eq!(out.take(), vec![send(2, reply(stamp(3, 2), Some(stamp(1, 1))))]);
    }

    #[test]
    fn holder_defers_every_request_and_answers_when_leaving() {
        let mut p = node(1, 2);
        let mut out = Out::<LodhaKshemkalyani>::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), reply(stamp(1, 1), None), &mut out);
        assert_eq!(out.take(), enter(1, 1));
        p.handle_message(T, n(2), request(0, 2), &mut out);
        assert!(out.is_empty(), "even an older stamp waits while held");
        p.handle_release(T, &mut out);
        assert_eq!(out.take(), vec![send(2, reply(stamp(0, 2), Some(stamp(1, 1))))]);
    }

    /// P1 leaves and flushes P2, which crashes before passing the FLUSH
    /// on. P3, whose queue still lists P1's entry, would wait for ever:
    /// P1 hands the FLUSH on to the next live request it had queued.
    #[test]
    fn crash_of_the_node_owed_a_flush_hands_it_on() {
        let (mut p1, mut p3) = (node(1, 4), node(3, 4));
        let (mut o1, mut o3) = (Out::<LodhaKshemkalyani>::new(), Out::<LodhaKshemkalyani>::new());
        let (r1, r2, r3) = (stamp(1, 1), stamp(1, 2), stamp(1, 3));
        p1.handle_request(T, &mut o1);
        p3.handle_request(T, &mut o3);
        o1.take();
        o3.take();
        // Requests 1, 2 and 3 are concurrent; P4 is idle.
        for (from, msg) in [(2, request(1, 2)), (3, request(1, 3)), (4, reply(r1, None))] {
            p1.handle_message(T, n(from), msg, &mut o1);
        }
        assert_eq!(o1.take(), enter(1, 1));
        for (from, msg) in [(1, request(1, 1)), (2, request(1, 2)), (4, reply(r3, None))] {
            p3.handle_message(T, n(from), msg, &mut o3);
        }
        assert!(o3.is_empty(), "(1,1) and (1,2) come first");

        p1.handle_release(T, &mut o1);
        assert_eq!(o1.take(), vec![send(2, flush(r2, r1))]);
        // P2 crashes with the FLUSH.
        p1.handle_peer_down(T, n(2), &mut o1);
        assert_eq!(o1.take(), vec![send(3, flush(r3, r1))]);
        p3.handle_peer_down(T, n(2), &mut o3);
        assert!(o3.is_empty(), "(1,1) is still queued");
        p3.handle_message(T, n(1), flush(r3, r1), &mut o3);
        assert_eq!(o3.take(), enter(1, 3));

        // Nobody left to hand over to: a later crash sends nothing.
        p1.handle_peer_down(T, n(3), &mut o1);
        assert!(o1.is_empty());
    }

    #[test]
    fn crashed_waiter_or_holder_blocks_nobody() {
        let mut p = node(3, 3);
        let mut out = Out::<LodhaKshemkalyani>::new();
        p.observe_watermark(4);
        p.handle_request(T, &mut out);
        out.take();
        // P1 asked first and holds (or waits); P2 answered.
        p.handle_message(T, n(1), request(2, 1), &mut out);
        p.handle_message(T, n(2), reply(stamp(5, 3), None), &mut out);
        assert!(out.is_empty());
        p.handle_peer_down(T, n(1), &mut out);
        assert_eq!(out.take(), enter(5, 3));

        // A peer that never answered is not waited for once it is down.
        let mut q = node(1, 3);
        q.handle_request(T, &mut out);
        out.take();
        q.handle_message(T, n(2), reply(stamp(1, 1), None), &mut out);
        assert!(out.is_empty());
        q.handle_peer_down(T, n(3), &mut out);
        assert_eq!(out.take(), enter(1, 1));
    }

    #[test]
    fn newcomer_is_asked_while_waiting() {
        let mut p = node(1, 3);
        let mut out = Out::<LodhaKshemkalyani>::new();
        p.handle_peer_down(T, n(3), &mut out);
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(2, request(1, 1)), arm()]);
        p.handle_peer_up(T, n(3), &mut out);
        assert_eq!(out.take(), vec![send(3, request(1, 1))]);
        p.handle_message(T, n(2), reply(stamp(1, 1), None), &mut out);
        assert!(out.is_empty(), "the newcomer's answer is awaited too");
        p.handle_message(T, n(3), reply(stamp(1, 1), None), &mut out);
        assert_eq!(out.take(), enter(1, 1));
    }

    #[test]
    fn overtaken_request_is_restamped_and_asked_again() {
        // Node 2 restarted and stamped (1, 2) while node 3 held (9, 3).
        let mut p = node(2, 3);
        let mut out = Out::<LodhaKshemkalyani>::new();
        p.handle_request(T, &mut out);
        out.take();
        let old = stamp(1, 2);
        p.handle_message(T, n(1), reply(old, None), &mut out);
        assert!(out.is_empty());
        p.handle_message(T, n(3), reply(old, Some(stamp(9, 3))), &mut out);
        assert_eq!(out.take(), vec![send(1, request(10, 2)), send(3, request(10, 2))]);
        assert_eq!(p.request_stamp(), Some(stamp(10, 2)));
        // A late answer to the old request does not count for the new one.
        p.handle_message(T, n(1), reply(old, None), &mut out);
        p.handle_message(T, n(3), reply(stamp(10, 2), Some(stamp(9, 3))), &mut out);
        assert!(out.is_empty());
        p.handle_message(T, n(1), reply(stamp(10, 2), None), &mut out);
        assert_eq!(out.take(), enter(10, 2));
    }

    #[test]
    fn request_stamped_again_keeps_its_place_as_a_concurrent_one() {
        let mut p = node(1, 3);
        let mut out = Out::<LodhaKshemkalyani>::new();
        p.observe_watermark(4);
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), request(3, 2), &mut out);
        p.handle_message(T, n(3), reply(stamp(5, 1), None), &mut out);
        assert!(out.is_empty(), "(3,2) comes first");
        // Node 2 learnt it was overtaken and asks again, behind (5, 1).
        p.handle_message(T, n(2), request(7, 2), &mut out);
        assert_eq!(out.take(), enter(5, 1));
        p.handle_release(T, &mut out);
        assert_eq!(out.take(), vec![send(2, flush(stamp(7, 2), stamp(5, 1)))]);
    }

    #[test]
    fn long_wait_asks_again_and_an_idle_peer_answers_again() {
        let mut p = node(1, 3);
        let mut out = Out::<LodhaKshemkalyani>::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), reply(stamp(1, 1), None), &mut out);
        p.handle_timer(REASK_AT, LkTimer::Reask, &mut out);
        let again = Action::SetTimer { timer: LkTimer::Reask, at: REASK_AT * 2 };
        assert_eq!(out.take(), vec![send(3, request(1, 1)), again]);

        let mut q = node(3, 3);
        q.handle_message(T, n(1), request(1, 1), &mut out);
        q.handle_message(T, n(1), request(1, 1), &mut out);
        let answer = send(1, reply(stamp(1, 1), None));
        assert_eq!(out.take(), vec![answer.clone(), answer]);
        // A stale request is not answered, and a waiting node ignores a
        // repeat of one it has queued.
        q.handle_message(T, n(1), request(0, 1), &mut out);
        q.handle_request(T, &mut out);
        out.take();
        q.handle_message(T, n(1), request(1, 1), &mut out);
        assert!(out.is_empty());
        // Once granted, the timer is gone and a late firing does nothing.
        p.handle_message(T, n(3), reply(stamp(1, 1), None), &mut out);
        assert_eq!(out.take(), enter(1, 1));
        p.handle_timer(REASK_AT * 2, LkTimer::Reask, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn lone_node_enters_at_once() {
        let mut p = node(1, 1);
        let mut out = Out::<LodhaKshemkalyani>::new();
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 1) }]);
        p.handle_release(T, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn forged_stale_and_stranger_messages_are_ignored() {
        let mut p = node(1, 3);
        let mut out = Out::<LodhaKshemkalyani>::new();
        // A stamp that does not name its sender.
        p.handle_message(T, n(2), request(1, 3), &mut out);
        // A stamp beyond any honest clock.
        p.handle_message(T, n(2), request(u64::MAX, 2), &mut out);
        // A node that is not a live peer, and this node itself.
        p.handle_message(T, n(9), request(1, 9), &mut out);
        p.handle_message(T, n(1), request(1, 1), &mut out);
        assert!(out.is_empty());
        assert_eq!(p.watermark(), 0);
        p.observe_watermark(u64::MAX);
        assert_eq!(p.watermark(), 0);

        p.handle_request(T, &mut out);
        out.take();
        let mine = stamp(1, 1);
        // Answers to somebody else's request, or to an old one of this node.
        p.handle_message(T, n(2), reply(stamp(1, 3), None), &mut out);
        p.handle_message(T, n(2), reply(stamp(0, 1), None), &mut out);
        // A FLUSH whose entry is not its sender's.
        p.handle_message(T, n(2), flush(mine, stamp(0, 3)), &mut out);
        p.handle_message(T, n(3), reply(mine, None), &mut out);
        assert!(out.is_empty(), "node 2 has not answered");
        p.handle_message(
            T,
            n(2),
            LkMsg::Reply { to: mine, last: Some(stamp(u64::MAX, 2)) },
            &mut out,
        );
        assert!(out.is_empty());
        p.handle_message(T, n(2), reply(mine, None), &mut out);
        assert_eq!(out.take(), enter(1, 1));
        // Nothing of this arrives while held or after leaving, either.
        p.handle_message(T, n(2), flush(mine, stamp(0, 2)), &mut out);
        p.handle_release(T, &mut out);
        p.handle_release(T, &mut out);
        p.handle_message(T, n(3), flush(mine, stamp(0, 3)), &mut out);
        assert!(out.is_empty());
    }
}
