//! # `roucairol-carvalho` — Ricart–Agrawala that keeps the permissions it was given
//!
//! **Source.** O. Carvalho and G. Roucairol, "On mutual exclusion in
//! computer networks" (technical correspondence, CACM 26(2), 1983), the
//! improvement of Ricart–Agrawala presented in Kshemkalyani & Singhal,
//! *Distributed Computing: Principles, Algorithms, and Systems* (2008),
//! ch. 9: once node i has had j's reply, i may enter again and again
//! without asking j, until i replies to a request of j's. A lock used over
//! and over at one node then costs no message at all.
//!
//! **Assumptions.** Reliable FIFO links while both ends are up (a reply
//! must not overtake the request its sender made after it); crash-stop
//! failures reported by the failure detector; no partitions, as for
//! Ricart–Agrawala (a peer wrongly suspected is no longer asked).
//!
//! **Messages per entry.** 0 when no other node has asked since this
//! node's last entry; otherwise a REQUEST to each live peer whose
//! permission it lacks and a REPLY from each: 0 to 2(N−1). Holding
//! permissions has one more price, the *reservation* (see *Fences*): every
//! [`RESERVE`] ticks of its clock a holder asks again, 2(N−1) messages per
//! half a million entries. Synchronisation delay: 1 message delay, as
//! Ricart–Agrawala.
//!
//! **State walk.** Between every pair of nodes there is one permission,
//! held by one of them or on its way in a REPLY. A node that wants the
//! critical section takes a *place* (a Lamport stamp), sends a REQUEST to
//! every live peer whose permission it does not hold, and enters once it
//! holds every live peer's. Idle, it answers every REQUEST at once, and so
//! gives its permission away. Wanting, it answers a request with a better
//! (lower) place and asks that peer again at once, since it now lacks its
//! permission, and *defers* one with a worse place. Holding, it defers
//! every request. Leaving, it answers the deferred ones. A peer that goes
//! down is no longer needed; one that comes up (or back) is asked, and its
//! permission is never kept across its restart.
//!
//! **Fences.** A fence is a fresh tick of the entrant's Lamport clock,
//! taken at entry after every reply has been seen, so it is above the
//! fence of every entry the replies followed: a REPLY carries the
//! replier's clock, which is above its own fences. That does not cover an
//! entrant that does not hear from the last holder because it crashed —
//! and a node that enters on kept permissions has told no one its fence.
//! So every REQUEST *reserves* fences: it carries a *ceiling*, its stamp
//! plus [`RESERVE`], and a node that answers it owes the requester that
//! ceiling. The requester enters on the kept permission only with a fence
//! below the ceiling that permission was given under, and asks again (a
//! *renewal*, to just those peers) when its clock reaches it; a node's own
//! fences must be above every ceiling it owes to a peer it saw go down
//! holding its permission, and it takes that into its clock before it
//! enters. A peer that answered a request goes on owing it until the
//! requester answers one of its own; what it owes outlives it in the
//! lock's stored record (with a state directory) and in the remnant a
//! forgotten instance leaves, and the next instance's first request starts
//! above it. A REPLY's clock also covers the ceilings of peers the replier
//! saw go down, for a requester that restarted without its records. Local
//! fences so rise past crashes of the holder as well as of everyone else.
//! The ceilings owed stay out of the heartbeat watermark: it reaches the
//! very node that holds the permissions, whose next new instance would
//! start above its own reservation and spend it.
//!
//! **Order.** A node that holds every permission enters at once, even while
//! an older request of another node is on its way to it: entries do not
//! follow request timestamps, and the algorithm claims no such order.

use crate::algorithm::{AlgoConfig, Algorithm, MutexAlgorithm, Out, Restored};
use crate::outbox::{Message, NoTimer, Time};
use crate::types::{CsState, Fence, LamportClock, NodeId, Stamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// How many clock ticks above its stamp a request reserves for fences
/// issued on the permissions it obtains: a node renews its permissions
/// (one REQUEST and REPLY per peer) once per half this many local entries
/// (an entry ticks twice: its place and its fence). Only the ceilings owed
/// to a crashed or restarted peer, or by a forgotten instance, move a
/// clock up by as much: with fences' 40-bit timestamps that leaves a
/// million such jumps.
pub const RESERVE: u64 = 1 << 20;

/// How far above the highest ceiling owed the stored one is kept: one
/// write per this many ticks of the ceilings.
pub const DURABLE_AHEAD: u64 = 1 << 16;

/// The messages of [`RoucairolCarvalho`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum RcMsg {
    /// Give me your permission.
    Request {
        /// This round's stamp, which the answer names.
        stamp: Stamp,
        /// The request's place in line, the same for all its rounds.
        place: Stamp,
        /// Fences issued on the permission this round obtains stay below
        /// it; the answerer's own later fences go above it.
        ceiling: u64,
    },
    /// You have my permission (until you answer a request of mine).
    Reply {
        /// The round answered.
        to: Stamp,
        /// The replier's Lamport clock, above its own fences.
        clock: u64,
    },
}

impl Message for RcMsg {
    fn kind(&self) -> &'static str {
        match self {
            RcMsg::Request { .. } => "request",
            RcMsg::Reply { .. } => "reply",
        }
    }
}

/// Where this node's request stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Want {
    Idle,
    /// Asked, in line at `place`; still to hear from each peer of
    /// `awaiting`, in the round named.
    Wanting {
        place: Stamp,
        awaiting: BTreeMap<NodeId, Stamp>,
    },
    Held,
}

/// The Roucairol–Carvalho algorithm; see the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct RoucairolCarvalho {
    id: NodeId,
    alive: BTreeSet<NodeId>,
    clock: LamportClock,
    state: Want,
    /// The permissions this node holds: each peer's, with the ceiling it
    /// was given under.
    kept: BTreeMap<NodeId, u64>,
    /// The ceilings this node owes: the peers that hold its permission,
    /// with the ceiling of the request it answered.
    owed: BTreeMap<NodeId, u64>,
    /// The highest ceiling owed to a peer that went down holding this
    /// node's permission: it may have entered with any fence below it.
    lost: u64,
    /// The node's floor (peers' and stored watermarks) and what this
    /// lock's earlier instance here left (its remnant, or the record a
    /// crashed run stored): taken into the clock by this instance's first
    /// request.
    floor: u64,
    /// Whether the first request has been made (and the floor taken in).
    caught_up: bool,
    /// The ceiling stored for a restart: at least every ceiling owed, kept
    /// [`DURABLE_AHEAD`] above the highest so that a write is rare.
    durable: u64,
    /// Requests not answered yet, by requester: the round and its
    /// ceiling.
    deferred: BTreeMap<NodeId, (Stamp, u64)>,
}

impl RoucairolCarvalho {
    /// A node with nobody known to be up yet.
    pub fn new(cfg: &AlgoConfig) -> Self {
        RoucairolCarvalho {
            id: cfg.id,
            alive: BTreeSet::new(),
            clock: LamportClock::default(),
            state: Want::Idle,
            kept: BTreeMap::new(),
            owed: BTreeMap::new(),
            lost: 0,
            floor: 0,
            caught_up: false,
            durable: 0,
            deferred: BTreeMap::new(),
        }
        .restored(cfg)
    }

    /// Takes in what this lock's instance stored before the node crashed.
    fn restored(mut self, cfg: &AlgoConfig) -> Self {
        if let Some(Ok(durable)) = Restored::mutex_of(cfg).map(crate::wire::decode::<u64>) {
            self.floor = durable;
            self.durable = durable;
        }
        self
    }

    fn stamp(&mut self) -> Stamp {
        Stamp { ts: self.clock.tick(), node: self.id }
    }

    /// Sends a new round of the request under way to `peers` and waits
    /// for each of them in it.
    fn ask(&mut self, peers: Vec<NodeId>, out: &mut Out<RoucairolCarvalho>) {
        if !peers.is_empty() {
            let stamp = self.stamp();
            self.send_round(stamp, peers, out);
        }
    }

    /// Sends round `stamp` to `peers`, reserving fences up to its ceiling.
    fn send_round(&mut self, stamp: Stamp, peers: Vec<NodeId>, out: &mut Out<RoucairolCarvalho>) {
        let Want::Wanting { place, awaiting } = &mut self.state else {
            return;
        };
        for &p in &peers {
            self.kept.remove(&p);
            awaiting.insert(p, stamp);
        }
        let ceiling = stamp.ts.saturating_add(RESERVE);
        out.broadcast(peers, RcMsg::Request { stamp, place: *place, ceiling });
    }

    /// The live peers whose permission this node lacks.
    fn missing(&self) -> Vec<NodeId> {
        self.alive.iter().filter(|p| !self.kept.contains_key(p)).copied().collect()
    }

    /// Enters once every live peer's permission is here and its fence
    /// would stay below the ceilings they were given under; renews those
    /// it would not.
    fn try_enter(&mut self, out: &mut Out<RoucairolCarvalho>) {
        let Want::Wanting { awaiting, .. } = &self.state else {
            return;
        };
        if !awaiting.is_empty() {
            return;
        }
        let missing = self.missing();
        if !missing.is_empty() {
            self.ask(missing, out);
            return;
        }
        // Above whatever a peer that went down with this node's permission
        // may have issued.
        self.clock.observe(self.lost);
        let next = self.clock.now().saturating_add(1);
        let spent: Vec<NodeId> = self
            .kept
            .iter()
            .filter(|&(p, &c)| self.alive.contains(p) && c <= next)
            .map(|(&p, _)| p)
            .collect();
        if !spent.is_empty() {
            self.ask(spent, out);
            return;
        }
        let fence = self.stamp();
        self.state = Want::Held;
        out.grant(Fence::from(fence));
    }

    /// Gives `to` this node's permission, answering its round `round`
    /// reserved up to `ceiling`.
    fn reply(&mut self, to: NodeId, round: Stamp, ceiling: u64, out: &mut Out<RoucairolCarvalho>) {
        let ceiling = ceiling.max(round.ts);
        self.kept.remove(&to);
        self.owed.insert(to, ceiling);
        if ceiling > self.durable {
            self.durable = ceiling.saturating_add(DURABLE_AHEAD);
        }
        // Above this node's fences, and above those a peer that went down
        // with its permission may have issued: a requester that restarted
        // without its records learns them here.
        let clock = self.clock.now().max(self.lost);
        out.send(to, RcMsg::Reply { to: round, clock });
    }

    fn on_request(
        &mut self,
        from: NodeId,
        round: Stamp,
        place: Stamp,
        ceiling: u64,
        out: &mut Out<RoucairolCarvalho>,
    ) {
        self.clock.observe(round.ts);
        if round.node != from || place.node != from {
            return; // a stamp always names its sender
        }
        let defer = match &self.state {
            Want::Idle => false,
            Want::Held => true,
            Want::Wanting { place: mine, .. } => *mine < place,
        };
        if defer {
            self.deferred.insert(from, (round, ceiling));
            return;
        }
        self.deferred.remove(&from);
        let had = self.kept.contains_key(&from);
        self.reply(from, round, ceiling, out);
        // Wanting, behind `from`: its permission is needed again. If this
        // node had asked for it already, that round is still on its way
        // and `from` answers it after its own entry.
        if had && matches!(self.state, Want::Wanting { .. }) {
            self.ask(vec![from], out);
        }
    }

    fn on_reply(&mut self, from: NodeId, to: Stamp, clock: u64, out: &mut Out<RoucairolCarvalho>) {
        self.clock.observe(clock);
        let Want::Wanting { awaiting, .. } = &mut self.state else {
            return;
        };
        if awaiting.get(&from) != Some(&to) {
            return; // answers a round this node no longer waits on
        }
        awaiting.remove(&from);
        self.owed.remove(&from);
        self.kept.insert(from, to.ts.saturating_add(RESERVE));
        self.try_enter(out);
    }

    /// `peer` no longer holds this node's permission: if it went down with
    /// it, what it may have issued stays a bound.
    fn forget_peer(&mut self, peer: NodeId) {
        self.kept.remove(&peer);
        if let Some(ceiling) = self.owed.remove(&peer) {
            self.lost = self.lost.max(ceiling);
        }
    }
}

impl Algorithm for RoucairolCarvalho {
    type Msg = RcMsg;
    type Timer = NoTimer;

    fn handle_message(
        &mut self,
        _now: Time,
        from: NodeId,
        msg: RcMsg,
        out: &mut Out<RoucairolCarvalho>,
    ) {
        match msg {
            RcMsg::Request { stamp, place, ceiling } => {
                self.on_request(from, stamp, place, ceiling, out)
            }
            RcMsg::Reply { to, clock } => self.on_reply(from, to, clock, out),
        }
    }

    /// A newcomer (or a restarted peer) holds nothing of this node's and
    /// kept nothing: asked at once if this node wants.
    fn handle_peer_up(&mut self, _now: Time, peer: NodeId, out: &mut Out<RoucairolCarvalho>) {
        self.alive.insert(peer);
        self.forget_peer(peer);
        if matches!(self.state, Want::Wanting { .. }) {
            self.ask(vec![peer], out);
        }
    }

    fn handle_peer_down(&mut self, _now: Time, peer: NodeId, out: &mut Out<RoucairolCarvalho>) {
        self.alive.remove(&peer);
        self.deferred.remove(&peer);
        self.forget_peer(peer);
        if let Want::Wanting { awaiting, .. } = &mut self.state {
            awaiting.remove(&peer);
        }
        self.try_enter(out);
    }
}

impl MutexAlgorithm for RoucairolCarvalho {
    /// A lock made new here: the peer has nothing of this node's, and this
    /// node nothing of the peer's.
    fn handle_adopt(&mut self, _now: Time, peer: NodeId, _out: &mut Out<RoucairolCarvalho>) {
        self.alive.insert(peer);
    }

    /// Idle, owing no answer. The permissions kept die with the instance
    /// (both ends then lack them: safe, and one round dearer), and what it
    /// owes is covered by its watermark, which the floor keeps.
    fn forgettable(&self) -> bool {
        self.state == Want::Idle && self.deferred.is_empty()
    }

    fn handle_request(&mut self, _now: Time, out: &mut Out<RoucairolCarvalho>) {
        if self.state != Want::Idle {
            return;
        }
        if !self.caught_up {
            // A new instance (a lock new here, forgotten, or a restarted
            // node) starts above everything its peers have seen; from then
            // on it sees for itself every reply and every peer that goes
            // down owing it a ceiling. Taking the floor in again would
            // only jump the clock past this node's own ceilings, which
            // peers' watermarks reflect back.
            self.clock.observe(self.floor);
            self.caught_up = true;
        }
        // The first round's stamp is the request's place.
        let place = self.stamp();
        self.state = Want::Wanting { place, awaiting: BTreeMap::new() };
        let missing = self.missing();
        if missing.is_empty() {
            self.try_enter(out);
        } else {
            self.send_round(place, missing, out);
        }
    }

    fn handle_release(&mut self, _now: Time, out: &mut Out<RoucairolCarvalho>) {
        if self.state != Want::Held {
            return;
        }
        self.state = Want::Idle;
        for (peer, (round, ceiling)) in std::mem::take(&mut self.deferred) {
            self.reply(peer, round, ceiling, out);
        }
    }

    fn cs_state(&self) -> CsState {
        match self.state {
            Want::Idle => CsState::Idle,
            Want::Wanting { .. } => CsState::Wanting,
            Want::Held => CsState::Held,
        }
    }

    /// Above every fence issued here and every bound learned from a
    /// crash. Not the ceilings owed: heartbeats carry the watermark to the
    /// very nodes that hold them, and a new instance there would start
    /// above its own reservation and spend it.
    fn watermark(&self) -> u64 {
        self.clock.now().max(self.lost)
    }

    fn observe_watermark(&mut self, watermark: u64) {
        self.floor = self.floor.max(watermark);
    }

    /// The ceilings owed, for a restart: a peer holding this node's
    /// permission may enter on it, and crash, while this node is down.
    fn durable_state(&self) -> Option<Vec<u8>> {
        (self.durable > 0).then(|| crate::wire::encode(&self.durable))
    }

    /// Every ceiling owed, and every fence issued here.
    fn remnant(&self) -> Option<u64> {
        Some(self.durable.max(self.watermark()))
    }

    fn observe_remnant(&mut self, own: Option<u64>, floor: u64) {
        self.floor = self.floor.max(own.unwrap_or(0)).max(floor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::Action;
    use crate::testkit::*;

    fn node(id: u32, members: u32) -> RoucairolCarvalho {
        let cfg = AlgoConfig::for_test(id, members);
        with_up(RoucairolCarvalho::new(&cfg), cfg.peers())
    }

    fn request(round: Stamp, place: Stamp) -> RcMsg {
        RcMsg::Request { stamp: round, place, ceiling: round.ts + RESERVE }
    }

    fn reply(to: Stamp, clock: u64) -> RcMsg {
        RcMsg::Reply { to, clock }
    }

    fn granted(out: &mut Out<RoucairolCarvalho>) -> Fence {
        match out.take().as_slice() {
            [Action::Grant { fence }] => *fence,
            other => panic!("expected a grant alone, got {other:?}"),
        }
    }

    /// Node 1 of 3 holding both peers' permissions.
    fn holding_both() -> RoucairolCarvalho {
        let mut p = node(1, 3);
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_request(T, &mut out);
        let first = request(stamp(1, 1), stamp(1, 1));
        assert_eq!(out.take(), vec![send(2, first.clone()), send(3, first)]);
        p.handle_message(T, n(2), reply(stamp(1, 1), 1), &mut out);
        assert!(out.is_empty());
        p.handle_message(T, n(3), reply(stamp(1, 1), 1), &mut out);
        assert_eq!(granted(&mut out), Fence::new(2, 1));
        p.handle_release(T, &mut out);
        assert!(out.is_empty());
        p
    }

    #[test]
    fn entries_after_the_first_cost_no_message_and_fences_rise() {
        let mut p = holding_both();
        let mut out = Out::<RoucairolCarvalho>::new();
        let mut last = Fence::new(2, 1);
        for _ in 0..10 {
            p.handle_request(T, &mut out);
            let fence = granted(&mut out);
            assert!(fence > last, "{fence} after {last}");
            last = fence;
            p.handle_release(T, &mut out);
            assert!(out.is_empty());
        }
    }

    #[test]
    fn a_reply_gives_the_permission_away_and_only_that_peer_is_asked_again() {
        let mut p = holding_both();
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_message(T, n(2), request(stamp(9, 2), stamp(9, 2)), &mut out);
        assert_eq!(out.take(), vec![send(2, reply(stamp(9, 2), 9))]);
        p.handle_request(T, &mut out);
        let again = request(stamp(10, 1), stamp(10, 1));
        assert_eq!(out.take(), vec![send(2, again)]);
        p.handle_message(T, n(2), reply(stamp(10, 1), 20), &mut out);
        assert_eq!(granted(&mut out), Fence::new(21, 1), "above the replier's clock");
    }

    #[test]
    fn a_better_request_is_answered_and_its_permission_asked_for_again() {
        let mut p = holding_both();
        let mut out = Out::<RoucairolCarvalho>::new();
        // Node 3 takes its permission; node 1 then asks node 3 alone.
        p.handle_message(T, n(3), request(stamp(5, 3), stamp(5, 3)), &mut out);
        assert_eq!(out.take(), vec![send(3, reply(stamp(5, 3), 5))]);
        p.handle_request(T, &mut out);
        let mine = stamp(6, 1);
        assert_eq!(out.take(), vec![send(3, request(mine, mine))]);
        // Node 2 asks with a better place: answered, and asked again.
        p.handle_message(T, n(2), request(stamp(4, 2), stamp(4, 2)), &mut out);
        assert_eq!(
            out.take(),
            vec![send(2, reply(stamp(4, 2), 6)), send(2, request(stamp(7, 1), mine))]
        );
        // A worse place is deferred until node 1 leaves.
        p.handle_message(T, n(3), reply(mine, 7), &mut out);
        assert!(out.is_empty());
        p.handle_message(T, n(3), request(stamp(12, 3), stamp(12, 3)), &mut out);
        assert!(out.is_empty(), "deferred: 12 is behind 6");
        p.handle_message(T, n(2), reply(stamp(7, 1), 8), &mut out);
        assert_eq!(granted(&mut out), Fence::new(13, 1));
        p.handle_release(T, &mut out);
        assert_eq!(out.take(), vec![send(3, reply(stamp(12, 3), 13))]);
    }

    #[test]
    fn a_reply_to_a_replaced_round_does_not_count() {
        let mut p = node(1, 2);
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), reply(stamp(0, 1), 3), &mut out);
        assert!(out.is_empty());
        assert_eq!(p.cs_state(), CsState::Wanting);
    }

    #[test]
    fn the_reservation_is_renewed_when_the_clock_reaches_its_ceiling() {
        let mut p = holding_both();
        let mut out = Out::<RoucairolCarvalho>::new();
        // Ceilings are 1 + RESERVE; local entries tick the clock towards it.
        p.clock.observe(RESERVE - 1);
        p.handle_request(T, &mut out);
        let place = stamp(RESERVE, 1);
        let renewal = request(stamp(RESERVE + 1, 1), place);
        assert_eq!(out.take(), vec![send(2, renewal.clone()), send(3, renewal)]);
        p.handle_message(T, n(2), reply(stamp(RESERVE + 1, 1), 3), &mut out);
        p.handle_message(T, n(3), reply(stamp(RESERVE + 1, 1), 3), &mut out);
        assert_eq!(granted(&mut out), Fence::new(RESERVE + 2, 1));
    }

    /// Node 2 held node 1's permission under ceiling 9 + RESERVE and may
    /// have entered locally with any fence below it, then crashed.
    #[test]
    fn a_peer_down_with_this_nodes_permission_leaves_its_ceiling_as_a_bound() {
        let mut p = holding_both();
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_message(T, n(2), request(stamp(9, 2), stamp(9, 2)), &mut out);
        out.take();
        let stored = p.durable_state().map(|d| crate::wire::decode::<u64>(&d).unwrap());
        assert!(stored >= Some(9 + RESERVE), "the ceiling owed is stored: {stored:?}");
        assert_eq!(p.watermark(), 9, "but kept out of heartbeats");
        p.handle_peer_down(T, n(2), &mut out);
        p.handle_request(T, &mut out);
        // Node 3's permission, given under 1 + RESERVE, is spent by the
        // jump: renewed first.
        let place = stamp(10, 1);
        assert_eq!(out.take(), vec![send(3, request(stamp(9 + RESERVE + 1, 1), place))]);
        p.handle_message(T, n(3), reply(stamp(9 + RESERVE + 1, 1), 4), &mut out);
        assert!(granted(&mut out) > Fence::new(9 + RESERVE, 2));
    }

    #[test]
    fn a_peer_that_comes_up_is_asked_even_if_its_permission_was_kept() {
        let mut p = holding_both();
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_peer_down(T, n(3), &mut out);
        p.handle_peer_up(T, n(3), &mut out);
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(3, request(stamp(3, 1), stamp(3, 1)))]);
    }

    #[test]
    fn a_newcomer_is_asked_while_this_node_waits() {
        let mut p = node(1, 3);
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_peer_down(T, n(3), &mut out);
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(2, request(stamp(1, 1), stamp(1, 1)))]);
        p.handle_peer_up(T, n(3), &mut out);
        assert_eq!(out.take(), vec![send(3, request(stamp(2, 1), stamp(1, 1)))]);
        p.handle_message(T, n(2), reply(stamp(1, 1), 2), &mut out);
        assert!(out.is_empty(), "the newcomer's permission is awaited too");
    }

    #[test]
    fn a_request_with_a_forged_stamp_is_ignored() {
        let mut p = node(1, 3);
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_message(T, n(2), request(stamp(1, 3), stamp(1, 3)), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn a_new_instance_starts_its_request_above_the_floor() {
        let mut p = node(1, 2);
        let mut out = Out::<RoucairolCarvalho>::new();
        p.observe_watermark(5000);
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(2, request(stamp(5001, 1), stamp(5001, 1)))]);
    }
}
