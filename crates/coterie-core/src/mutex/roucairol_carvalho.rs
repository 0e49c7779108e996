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
//! every request. (Between reads, only a write conflicts: see *Readers
//! and writers*.) Leaving, it answers the deferred ones. A peer that goes
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
//! requester answers one of its own. What it owes outlives it in the
//! node's stored watermark (with a state directory) and in the remnant a
//! forgotten instance leaves, and the next instance's first request starts
//! above it. A ceiling owed is at most [`RESERVE`] above a stamp the
//! answerer's clock has seen, and the engine keeps the stored watermark
//! more than that above the clock
//! ([`WATERMARK_AHEAD`](crate::MutexAlgorithm::WATERMARK_AHEAD)), written
//! before the REPLY leaves when it must be: one write per 65,536 ticks for
//! the whole node, where each lock's record once held its own ceilings and
//! every new lock cost each answering peer a write. A REPLY's clock also
//! covers the ceilings of peers the replier saw go down, for a requester
//! that restarted without its records. Local fences so rise past crashes
//! of the holder as well as of everyone else. The ceilings owed stay out
//! of the heartbeat watermark: it reaches the very node that holds the
//! permissions, whose next new instance would start above its own
//! reservation and spend it. (A node that restarts does carry the stored
//! bound in its heartbeats, so after a restart the holders of its
//! permissions renew once.)
//!
//! **Order.** A node that holds every permission enters at once, even while
//! an older request of another node is on its way to it: entries do not
//! follow request timestamps, and the algorithm claims no such order.
//!
//! **Readers and writers.** Two reads do not conflict, so a node answers a
//! read request at once unless it holds, or is ranked ahead wanting, a
//! write; and answering a read gives the pair's permission away *for
//! reading only*: the answerer keeps the right to read, which the
//! requester now has too. So a permission is held by one node whole (it
//! may read or write on it), shared by both for reading, or by neither;
//! a reader enters on a whole or shared permission from every live peer,
//! a writer only on whole ones, and asks for the rest — a writer's
//! request takes the permission whole from the answerer, which asks again
//! if it still wants. Once every pair shares, a read costs no message at
//! all, wherever it is made; a write costs a REQUEST and a REPLY to each
//! peer, and after it each other node's next read one round trip to the
//! writer. Readers and writers in Ricart and Agrawala's scheme are the
//! fair readers and writers of Courtois, Heymans and Parnas ("Concurrent
//! control with 'readers' and 'writers'", CACM 14(10), 1971); keeping
//! permissions shared for reading is this project's extension of Carvalho
//! and Roucairol's idea, and like their entries follows no request order.
//! Fences: a node answering a read goes on owing the ceiling while the
//! requester may read on it, and a requester keeps owing the ceiling it
//! gave a peer that answered its read (the peer may still read on it); a
//! writer asks every peer whose whole permission it lacks, so its fence is
//! above every reader's that shared, and a reader's is above every
//! writer's, whose reply it needed.

use crate::algorithm::{AlgoConfig, Algorithm, MutexAlgorithm, Out, Restored};
use crate::outbox::{message_kinds, NoTimer, Time};
use crate::types::{CsState, Fence, LamportClock, Mode, NodeId, Stamp};
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
        /// Whether the permission is asked for reading only (the
        /// answerer keeps that much) or whole.
        mode: Mode,
    },
    /// You have my permission (until you answer a request of mine).
    Reply {
        /// The round answered.
        to: Stamp,
        /// The replier's Lamport clock, above its own fences.
        clock: u64,
    },
}

message_kinds!(RcMsg {
    Request => "request",
    Reply => "reply",
});

/// A peer's permission this node holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Kept {
    /// Fences issued on it stay below this (see *Fences*).
    ceiling: u64,
    /// [`Mode::Write`] whole, [`Mode::Read`] shared with the peer for
    /// reading only.
    mode: Mode,
}

impl Kept {
    /// Whether this permission lets a request of `mode` enter.
    fn serves(self, mode: Mode) -> bool {
        self.mode >= mode
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
    /// The mode of the request under way, or of the last one.
    mode: Mode,
    /// The permissions this node holds: each peer's, with the ceiling it
    /// was given under and whether it is whole or shared for reading.
    kept: BTreeMap<NodeId, Kept>,
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
    /// The highest ceiling this instance has owed, for its remnant.
    owed_high: u64,
    /// The bound a record of an earlier version stored (the ceilings it
    /// owed), kept as this lock's record until the clock has passed it
    /// and the stored watermark covers it.
    stored: u64,
    /// Requests not answered yet, by requester: the round, its ceiling
    /// and its mode.
    deferred: BTreeMap<NodeId, (Stamp, u64, Mode)>,
}

impl RoucairolCarvalho {
    /// A node with nobody known to be up yet.
    pub fn new(cfg: &AlgoConfig) -> Self {
        RoucairolCarvalho {
            id: cfg.id,
            alive: BTreeSet::new(),
            clock: LamportClock::default(),
            state: Want::Idle,
            mode: Mode::Write,
            kept: BTreeMap::new(),
            owed: BTreeMap::new(),
            lost: 0,
            floor: 0,
            caught_up: false,
            owed_high: 0,
            stored: 0,
            deferred: BTreeMap::new(),
        }
        .restored(cfg)
    }

    /// Takes in what this lock's instance stored before the node crashed,
    /// under a version that kept the ceilings owed in each lock's record
    /// (this one keeps none: see *Fences*).
    fn restored(mut self, cfg: &AlgoConfig) -> Self {
        if let Some(Ok(stored)) = Restored::mutex_of(cfg).map(crate::wire::decode::<u64>) {
            self.floor = stored;
            self.stored = stored;
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
        out.broadcast(peers, RcMsg::Request { stamp, place: *place, ceiling, mode: self.mode });
    }

    /// Whether this node holds `peer`'s permission as far as the request
    /// under way needs it: whole for a write, at least shared for a read.
    fn serves(&self, peer: NodeId) -> bool {
        self.kept.get(&peer).is_some_and(|k| k.serves(self.mode))
    }

    /// The live peers whose permission this node lacks for the request
    /// under way.
    fn missing(&self) -> Vec<NodeId> {
        self.alive.iter().filter(|&&p| !self.serves(p)).copied().collect()
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
            .filter(|&(p, k)| self.alive.contains(p) && k.ceiling <= next)
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
    /// reserved up to `ceiling`: whole for a write; for a read, shared,
    /// keeping the right to read on it.
    fn reply(
        &mut self,
        to: NodeId,
        (round, ceiling, mode): (Stamp, u64, Mode),
        out: &mut Out<RoucairolCarvalho>,
    ) {
        // What it asked for, never more than a reservation above its
        // stamp, which the clock has seen: so every ceiling owed is within
        // WATERMARK_AHEAD of the watermark, and stable storage covers it.
        let ceiling = ceiling.max(round.ts).min(round.ts.saturating_add(RESERVE));
        match mode {
            Mode::Write => {
                self.kept.remove(&to);
            }
            Mode::Read => {
                if let Some(kept) = self.kept.get_mut(&to) {
                    kept.mode = Mode::Read;
                }
            }
        }
        // A peer that still reads on an earlier answer goes on owing that.
        let owed = self.owed.entry(to).or_default();
        *owed = (*owed).max(ceiling);
        self.owed_high = self.owed_high.max(ceiling);
        // Above this node's fences, and above those a peer that went down
        // with its permission may have issued: a requester that restarted
        // without its records learns them here.
        let clock = self.clock.now().max(self.lost);
        out.send(to, RcMsg::Reply { to: round, clock });
    }

    fn on_request(
        &mut self,
        from: NodeId,
        (round, place): (Stamp, Stamp),
        (ceiling, mode): (u64, Mode),
        out: &mut Out<RoucairolCarvalho>,
    ) {
        self.clock.observe(round.ts);
        if round.node != from || place.node != from {
            return; // a stamp always names its sender
        }
        let conflicts = self.mode.conflicts(mode);
        let defer = match &self.state {
            Want::Idle => false,
            Want::Held => conflicts,
            Want::Wanting { place: mine, .. } => conflicts && *mine < place,
        };
        if defer {
            self.deferred.insert(from, (round, ceiling, mode));
            return;
        }
        self.deferred.remove(&from);
        self.reply(from, (round, ceiling, mode), out);
        // Wanting, behind `from` (or reading beside it): if the answer took
        // a permission the request under way needs, it is needed again. If
        // this node had asked for it already, that round is still on its
        // way and `from` answers it after its own entry.
        if let Want::Wanting { awaiting, .. } = &self.state {
            if self.alive.contains(&from) && !awaiting.contains_key(&from) && !self.serves(from) {
                self.ask(vec![from], out);
            }
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
        if self.mode == Mode::Write {
            // `from` gave all of it: nothing of this node's is left there.
            // Answering a read, it kept the right to read on what it holds.
            self.owed.remove(&from);
        }
        let ceiling = to.ts.saturating_add(RESERVE);
        self.kept.insert(from, Kept { ceiling, mode: self.mode });
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
            RcMsg::Request { stamp, place, ceiling, mode } => {
                self.on_request(from, (stamp, place), (ceiling, mode), out)
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

    fn handle_request(&mut self, now: Time, out: &mut Out<RoucairolCarvalho>) {
        self.handle_request_in(now, Mode::Write, out);
    }

    fn handle_request_in(&mut self, _now: Time, mode: Mode, out: &mut Out<RoucairolCarvalho>) {
        if self.state != Want::Idle {
            return;
        }
        self.mode = mode;
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

    fn mode_of(&self, _fence: Fence) -> Mode {
        match self.state {
            Want::Held => self.mode,
            _ => Mode::Write,
        }
    }

    fn handle_release(&mut self, _now: Time, out: &mut Out<RoucairolCarvalho>) {
        if self.state != Want::Held {
            return;
        }
        self.state = Want::Idle;
        for (peer, request) in std::mem::take(&mut self.deferred) {
            self.reply(peer, request, out);
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

    /// A ceiling owed is at most a reservation above a stamp the clock
    /// has seen.
    const WATERMARK_AHEAD: u64 = RESERVE;

    fn observe_watermark(&mut self, watermark: u64) {
        self.floor = self.floor.max(watermark);
    }

    /// Nothing of this version's: the stored watermark covers every
    /// ceiling owed ([`WATERMARK_AHEAD`](MutexAlgorithm::WATERMARK_AHEAD)).
    /// A bound an earlier version stored stays until the clock has passed
    /// it.
    fn durable_state(&self) -> Option<Vec<u8>> {
        (self.stored > self.clock.now()).then(|| crate::wire::encode(&self.stored))
    }

    /// Every ceiling owed, and every fence issued here.
    fn remnant(&self) -> Option<u64> {
        Some(self.owed_high.max(self.stored).max(self.watermark()))
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
        RcMsg::Request { stamp: round, place, ceiling: round.ts + RESERVE, mode: Mode::Write }
    }

    fn read(round: Stamp, place: Stamp) -> RcMsg {
        RcMsg::Request { stamp: round, place, ceiling: round.ts + RESERVE, mode: Mode::Read }
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
        assert_eq!(p.durable_state(), None, "no record of its own");
        let ahead = <RoucairolCarvalho as MutexAlgorithm>::WATERMARK_AHEAD;
        assert!(p.watermark() + ahead >= 9 + RESERVE, "the stored watermark covers the ceiling");
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

    /// A record an earlier version stored (the ceilings it owed) bounds
    /// the restarted instance's fences, and stays until the clock has
    /// passed it: from then on the stored watermark covers it.
    #[test]
    fn a_ceiling_an_earlier_version_stored_bounds_fences_until_passed() {
        let cfg = AlgoConfig {
            restored: Some(Restored {
                names: [(crate::Name::default(), crate::wire::encode(&5_000u64))].into(),
                ..Restored::default()
            }),
            ..AlgoConfig::for_test(1, 2)
        };
        let mut p = with_up(RoucairolCarvalho::new(&cfg), cfg.peers());
        assert_eq!(p.durable_state(), Some(crate::wire::encode(&5_000u64)));
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_request(T, &mut out);
        let [(_, RcMsg::Request { stamp: round, .. })] = sends(&mut out)[..] else {
            panic!("asks its peer");
        };
        assert!(round.ts > 5_000, "above the stored bound: {round:?}");
        assert_eq!(p.durable_state(), None, "passed: the watermark covers it now");
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

    /// Node 1 of 3 reading on permissions shared with both peers.
    fn reading_with_both() -> RoucairolCarvalho {
        let mut p = node(1, 3);
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_request_in(T, Mode::Read, &mut out);
        let first = read(stamp(1, 1), stamp(1, 1));
        assert_eq!(out.take(), vec![send(2, first.clone()), send(3, first)]);
        p.handle_message(T, n(2), reply(stamp(1, 1), 1), &mut out);
        p.handle_message(T, n(3), reply(stamp(1, 1), 1), &mut out);
        assert_eq!(granted(&mut out), Fence::new(2, 1));
        assert_eq!(p.mode_of(Fence::new(2, 1)), Mode::Read);
        p
    }

    /// A reader answers a reader at once, holding or not, and keeps the
    /// right to read on what it gave: its next read costs nothing, its
    /// next write asks everyone.
    #[test]
    fn readers_share_permissions_and_read_again_without_a_message() {
        let mut p = reading_with_both();
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_message(T, n(2), read(stamp(5, 2), stamp(5, 2)), &mut out);
        assert_eq!(out.take(), vec![send(2, reply(stamp(5, 2), 5))], "answered while reading");
        p.handle_release(T, &mut out);
        assert!(out.is_empty());
        for _ in 0..3 {
            p.handle_request_in(T, Mode::Read, &mut out);
            granted(&mut out);
            p.handle_release(T, &mut out);
        }
        p.handle_request(T, &mut out);
        let write = request(stamp(12, 1), stamp(12, 1));
        assert_eq!(out.take(), vec![send(2, write.clone()), send(3, write)]);
    }

    /// A holding reader defers a writer; a holding writer defers a reader.
    #[test]
    fn readers_and_writers_defer_each_other_while_holding() {
        let mut p = reading_with_both();
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_message(T, n(2), request(stamp(5, 2), stamp(5, 2)), &mut out);
        assert!(out.is_empty(), "a write waits for the reader");
        p.handle_release(T, &mut out);
        assert_eq!(out.take(), vec![send(2, reply(stamp(5, 2), 5))]);
        let mut w = holding_both();
        w.handle_request(T, &mut out);
        granted(&mut out);
        w.handle_message(T, n(3), read(stamp(9, 3), stamp(9, 3)), &mut out);
        assert!(out.is_empty(), "a read waits for the writer");
        w.handle_release(T, &mut out);
        assert_eq!(out.take(), vec![send(3, reply(stamp(9, 3), 9))]);
        // Shared now: node 1 may read on node 3's permission, not write.
        w.handle_request_in(T, Mode::Read, &mut out);
        granted(&mut out);
        w.handle_release(T, &mut out);
        w.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(3, request(stamp(12, 1), stamp(12, 1)))]);
    }

    /// A wanting writer ranked behind a reader answers it, which leaves it
    /// the shared half only, and so asks again for the whole.
    #[test]
    fn a_writer_behind_a_reader_answers_it_and_asks_again() {
        let mut p = holding_both();
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_message(T, n(3), request(stamp(5, 3), stamp(5, 3)), &mut out);
        out.take();
        p.handle_request(T, &mut out);
        let mine = stamp(6, 1);
        assert_eq!(out.take(), vec![send(3, request(mine, mine))]);
        p.handle_message(T, n(2), read(stamp(4, 2), stamp(4, 2)), &mut out);
        assert_eq!(
            out.take(),
            vec![send(2, reply(stamp(4, 2), 6)), send(2, request(stamp(7, 1), mine))]
        );
        // A later reader waits behind the write.
        p.handle_message(T, n(2), read(stamp(20, 2), stamp(20, 2)), &mut out);
        assert!(out.is_empty());
    }

    /// A peer that answered this node's read keeps the right to read on
    /// this node's permission: if it goes down, its ceiling is a bound.
    #[test]
    fn a_peer_that_shares_for_reading_is_still_owed_its_ceiling() {
        let mut p = holding_both();
        let mut out = Out::<RoucairolCarvalho>::new();
        p.handle_message(T, n(2), request(stamp(9, 2), stamp(9, 2)), &mut out);
        out.take();
        p.handle_request_in(T, Mode::Read, &mut out);
        let place = stamp(10, 1);
        assert_eq!(out.take(), vec![send(2, read(place, place))]);
        p.handle_message(T, n(2), reply(place, 11), &mut out);
        granted(&mut out);
        p.handle_release(T, &mut out);
        p.handle_peer_down(T, n(2), &mut out);
        p.handle_request(T, &mut out);
        out.take();
        assert!(p.clock.now() > 9 + RESERVE, "above what node 2 may have read with");
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
