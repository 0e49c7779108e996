//! # `raymond-k` — Ricart–Agrawala for k holders, counted by session
//!
//! **Source.** Raymond, "A distributed algorithm for multiple entries to a
//! critical section" (Information Processing Letters 30(4), 1989), the
//! extension of Ricart–Agrawala "to the case where more than 1 process can
//! be in the critical region at one time": a node enters once at most k-1
//! of the replies it awaits are outstanding. Raymond's nodes ask for one
//! entry at a time; here a node asks once per client session, so a lock's
//! k permits go to up to k sessions wherever they are, several at one node
//! (the counting form below). The readers and writers are k-exclusion's
//! classic reduction (a reader takes one permit, a writer all of them),
//! ordered as Courtois, Heymans and Parnas's fair form ("Concurrent
//! control with 'readers' and 'writers'", CACM 14(10), 1971).
//!
//! **Assumptions.** As for [`ricart_agrawala`](super::ricart_agrawala):
//! reliable links while both ends are up (FIFO is not needed), crash-stop
//! failures reported by the failure detector, no partitions. `k` is the
//! lock's permits (the cluster's `count`, or a name's own).
//!
//! **Messages per entry.** 2(N-1) at light load: a REQUEST to every live
//! peer and a REPLY from each. With k = 1 exactly Ricart–Agrawala's, under
//! contention too (a deferred REPLY). With k > 1 a peer whose own requests
//! come first answers at once with a WAIT saying how many, and again each
//! time one of them finishes: up to 3(N-1) when every node has one
//! request, one more per peer for every further request of that peer's
//! that finishes first. Reads cost what writes do.
//!
//! **State walk.** A node keeps each request of its own *wanting* or
//! *holding*, each with a *place* in line (priority, then the stamp of its
//! first round, exactly as in Ricart–Agrawala). A peer's request is
//! *blocked* here by every request of this node that conflicts with it
//! (see *Readers and writers*; with k > 1, every one) and holds, or wants
//! with a better (lower) place. Given a REQUEST, a node counts them:
//! none, and it REPLYs at once; some, and it owes the requester its
//! REPLY, sends the count in a WAIT (with k = 1, where any count holds the
//! request back, it stays silent as Ricart–Agrawala does, or sends its
//! NACK in the fault-tolerant form), and sends the count again each time
//! one of those requests finishes: a WAIT while some are left (again
//! silent with k = 1), the REPLY when none is.
//! Its own requests made meanwhile do not count, so every owed REPLY goes
//! out once the requests it waited for are over. A request enters
//! once the counts it holds for its peers (the last each sent; 1 for a
//! silent peer with k = 1, too many for one not yet heard from with k > 1)
//! plus the requests of its own node that block it add up to at most k-1.
//!
//! Why at most k hold: let k+1 hold at once, and L be the one with the
//! worst place. Each of the other k, X, was made before L's REQUEST
//! reached X's node, since a request made after it takes a stamp above
//! L's, and, under timestamp order, a worse place (a dynamic priority
//! keeps this, see below). So X's node counted X in its answer to L and
//! takes it out only when X finishes, after L entered: L entered with k
//! requests counted, one too many. A peer's count for L only falls, and L
//! keeps the smallest count each peer sent, so reordered messages do no
//! harm.
//!
//! **Variants.** Ricart–Agrawala's, both chosen by
//! [`MutexOptions`](crate::MutexOptions). Fault-tolerant: a WAIT is the
//! "I got your request and I can't reply yet", every patience the node
//! probes each peer it still awaits for each request that has not sent
//! one since the last look, and gives up on a peer after [`PROBES`]
//! unanswered probes; a probe of a request still owed is answered with a
//! WAIT. Dynamic priorities: a node ranks a new request no better than
//! every request it owes an answer to or has answered and not seen finish,
//! and it sees a peer's requests finish when the peer REPLYs, after making
//! them, to a request of this node's that ranks behind them all.
//!
//! **Readers and writers.** On a lock of one permit a request says
//! whether it reads or writes, and only requests that conflict count: a
//! node's answer to a read counts its writes that hold or come first, its
//! answer to a write everything that holds or comes first, and a request
//! of its own is held back by its own conflicting ones alike. This is
//! k-exclusion's reduction with k as large as the readers are many: a
//! reader is one permit, a writer all of them. So readers enter side by
//! side and a writer alone (the argument above, for two conflicting
//! requests); no reader passes a writer that asked before it (the writer,
//! ranked ahead, is counted against it), and a writer waits only for the
//! readers ranked ahead of it, so a stream of readers never starves it.
//! A node may then have several requests under way at k = 1: one write
//! and any number of reads, one per session. Under a dynamic priority a
//! reply to a read says nothing of the reads the replier made (readers
//! answer readers at once), so only a reply to a write, or to a read when
//! none of them read, tells that they are over.
//!
//! **Fences.** The stamp (timestamp, node id) of the request's last round,
//! unique per grant. With k holders grants are not totally ordered in time,
//! so a resource checks that a fence is never reused rather than that it
//! grows. With k = 1 (a plain lock) fences rise as Ricart–Agrawala's
//! reader form makes them rise, for every two conflicting grants: a write
//! enters only with a round stamp above every round its node has answered
//! and every entry it was deferred behind, a read above every *writer's*
//! round answered and every entry it was deferred behind, and either asks
//! again otherwise. A node's own entries count as entries it was deferred
//! behind: a read of its own may have asked again, with a fresh stamp,
//! while a write of its own waited behind it. A deferred REPLY names the
//! highest stamp among the entries it waited for; the entries a *write*
//! waited for may be reads, so they bind the node's writes only. So a
//! writer's fence is above every earlier grant's and a reader's above
//! every earlier writer's.

use super::ricart_agrawala::{Place, RaTimer, PROBES};
use crate::algorithm::{AlgoConfig, Algorithm, MutexAlgorithm, Out, Priority};
use crate::outbox::{message_kinds, Time};
use crate::types::{CsState, Fence, LamportClock, Mode, NodeId, Stamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The messages of [`RaymondK`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum RkMsg {
    /// I want one of the permits; this is my place in line.
    Request {
        /// The round's stamp: what answers name, and the fence if the
        /// request enters on this round.
        stamp: Stamp,
        /// The request's place, the same for all its rounds.
        place: Place,
        /// Whether it reads or writes.
        mode: Mode,
    },
    /// None of my requests stands in your way.
    Reply {
        /// The round answered.
        to: Stamp,
        /// The replier's Lamport clock.
        clock: u64,
        /// For a reply that waited for the replier's own entries to end:
        /// the highest of their stamps (their fences).
        after: Option<Stamp>,
    },
    /// `blocking` of my requests stand in your way; I will say when fewer
    /// do. In the fault-tolerant form also "I am alive".
    Wait {
        /// The round answered.
        to: Stamp,
        /// How many of the sender's requests hold or come first.
        blocking: u32,
    },
    /// Fault-tolerant form: are you still there? The request again, in
    /// case it was lost.
    Probe {
        /// The round asked about.
        stamp: Stamp,
        /// Its place.
        place: Place,
        /// Its mode.
        mode: Mode,
    },
}

message_kinds!(RkMsg {
    Request => "request",
    Reply => "reply",
    Wait => "wait",
    Probe => "probe",
});

/// Raymond's k-exclusion; see the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct RaymondK {
    id: NodeId,
    /// The lock's permits, k.
    capacity: u32,
    alive: BTreeSet<NodeId>,
    clock: LamportClock,
    /// This node's requests waiting, by place.
    wanting: BTreeMap<Place, Want>,
    /// This node's requests inside, by the stamp they entered on (their
    /// fence).
    held: BTreeMap<Stamp, Held>,
    /// Peers' requests this node still owes a REPLY, by requester and
    /// first stamp.
    owed: BTreeMap<(NodeId, Stamp), Owed>,
    /// Under a dynamic priority, what this node has answered of each peer
    /// and not seen finish: its own next request ranks behind it.
    answered: BTreeMap<NodeId, Answered>,
    /// With k = 1, the largest round stamp this node has answered or been
    /// deferred behind: a write's round must be above it to enter.
    floor: Option<Stamp>,
    /// With k = 1, the same over the writers' rounds it has answered and
    /// the entries it was deferred behind: a read's round must be above
    /// it to enter.
    write_floor: Option<Stamp>,
    priority: Priority,
    /// Entries granted to this node (in this run of it).
    entries: u64,
    /// The Lamport time of this node's last entry (0 before the first).
    last_entry: u64,
    /// The fault-tolerant form's patience (the failure timeout), when on.
    patience: Option<Duration>,
}

/// One of this node's requests, waiting.
#[derive(Debug, Clone, Hash)]
struct Want {
    /// Whether it reads or writes.
    mode: Mode,
    /// The round under way.
    round: Stamp,
    /// Each peer still in the way and the count it last sent (`None`: not
    /// heard from on this round).
    awaiting: BTreeMap<NodeId, Option<u32>>,
    /// Fault-tolerant form: awaited peers that sent a WAIT since the last
    /// look, and awaited peers' unanswered probes in a row.
    heard: BTreeSet<NodeId>,
    unanswered: BTreeMap<NodeId, u32>,
}

/// One of this node's requests, inside.
#[derive(Debug, Clone, Copy, Hash)]
struct Held {
    place: Place,
    mode: Mode,
}

/// A peer's request this node owes a REPLY.
#[derive(Debug, Clone, Hash)]
struct Owed {
    round: Stamp,
    place: Place,
    mode: Mode,
    /// The places of this node's requests that stood in its way when its
    /// round arrived and have not finished: the count the requester holds
    /// for this node. Only these count, so it only falls, and reaches 0
    /// once they are over whatever this node asks meanwhile.
    ahead: BTreeSet<Place>,
    /// The highest stamp among those of them that have finished: the
    /// REPLY names it, so that the requester's fence goes above it.
    after: Option<Stamp>,
}

impl Owed {
    fn count(&self) -> u32 {
        u32::try_from(self.ahead.len()).unwrap_or(u32::MAX)
    }
}

/// What this node has answered of one peer, under a dynamic priority.
#[derive(Debug, Clone, Copy, Hash)]
struct Answered {
    /// The worst place among them.
    worst: Place,
    /// The latest of their first stamps' times.
    latest: u64,
    /// Whether any of them reads: a reply to a read then says nothing of
    /// them (readers answer readers at once).
    reads: bool,
}

impl RaymondK {
    /// A node with nobody known to be up yet, admitting the lock's
    /// `capacity` holders.
    pub fn new(cfg: &AlgoConfig) -> Self {
        let opts = cfg.mutex_options;
        RaymondK {
            id: cfg.id,
            capacity: u32::try_from(cfg.capacity.max(1)).unwrap_or(u32::MAX),
            alive: BTreeSet::new(),
            clock: LamportClock::default(),
            wanting: BTreeMap::new(),
            held: BTreeMap::new(),
            owed: BTreeMap::new(),
            answered: BTreeMap::new(),
            floor: None,
            write_floor: None,
            priority: opts.priority,
            entries: 0,
            last_entry: 0,
            patience: opts.fault_tolerant.then_some(cfg.timing.failure_timeout),
        }
    }

    /// The places of this node's requests that stand in the way of a
    /// request at `place` in `mode`: every one inside, and every one
    /// waiting ahead of it, that conflicts with it (all of them, for a
    /// write; the writes, for a read).
    fn ahead_of(&self, place: Place, mode: Mode) -> impl Iterator<Item = Place> + '_ {
        let held = self.held.values().map(|h| (h.place, h.mode));
        let waiting = self.wanting.range(..place).map(|(&p, w)| (p, w.mode));
        held.chain(waiting).filter(move |&(_, m)| mode.conflicts(m)).map(|(p, _)| p)
    }

    /// The mode a request in `mode` is made in: a read stays a read only
    /// on a lock of one permit (a semaphore's permits are all alike).
    fn effective(&self, mode: Mode) -> Mode {
        if self.capacity == 1 {
            mode
        } else {
            Mode::Write
        }
    }

    /// With k = 1, what a request in `mode` must enter above: every round
    /// this node answered and every entry it was deferred behind, for a
    /// write; for a read, the writers' rounds and those entries.
    fn floor_for(&self, mode: Mode) -> Option<Stamp> {
        match mode {
            Mode::Write => self.floor,
            Mode::Read => self.write_floor,
        }
    }

    /// With k = 1, this node's next writes must enter above `stamp`, and
    /// its next reads too if `reads_too` (`stamp` is a write's, or an
    /// entry a read of this node's was deferred behind).
    fn raise_floors(&mut self, stamp: Option<Stamp>, reads_too: bool) {
        if self.capacity == 1 {
            self.floor = self.floor.max(stamp);
            if reads_too {
                self.write_floor = self.write_floor.max(stamp);
            }
        }
    }

    /// Whether this node says "wait" aloud: with k > 1, where the count
    /// matters, and in the fault-tolerant form, where it also says "I am
    /// alive". With k = 1 a requester takes silence for a request in its
    /// way.
    fn says_wait(&self) -> bool {
        self.capacity > 1 || self.patience.is_some()
    }

    /// The count a requester holds for a peer: what it last sent, or, for
    /// one not heard from, 1 with k = 1 (Ricart–Agrawala's silent
    /// deferral) and k otherwise (it may have any number).
    fn view(&self, count: Option<u32>) -> u32 {
        count.unwrap_or(if self.capacity == 1 { 1 } else { self.capacity })
    }

    /// Lets in every waiting request whose counts allow it, best place
    /// first; with k = 1, one whose round is not above the floor asks
    /// again instead.
    fn try_enter(&mut self, now: Time, out: &mut Out<RaymondK>) {
        let places: Vec<Place> = self.wanting.keys().copied().collect();
        for place in places {
            let Some(want) = self.wanting.get(&place) else {
                continue;
            };
            let peers: u32 = want.awaiting.values().map(|&c| self.view(c)).sum();
            let (round, mode) = (want.round, want.mode);
            let own = u32::try_from(self.ahead_of(place, mode).count()).unwrap_or(u32::MAX);
            if own.saturating_add(peers) >= self.capacity {
                continue;
            }
            if self.capacity == 1 && self.floor_for(mode).is_some_and(|floor| floor >= round) {
                self.ask_again(place, now, out);
                continue;
            }
            self.wanting.remove(&place);
            // This node's own entries bind its next ones too: a read that
            // asked again while a write of this node's waited behind it
            // entered above the write's round.
            self.raise_floors(Some(round), mode == Mode::Write);
            self.held.insert(round, Held { place, mode });
            self.entries += 1;
            self.last_entry = round.ts;
            out.grant(Fence::from(round));
        }
        if self.patience.is_some() && self.wanting.is_empty() {
            out.cancel_timer(RaTimer::Patience);
        }
    }

    /// Sends `to` the REPLY for its round `request` at `place` in
    /// `mode`, owing it nothing more.
    fn reply(
        &mut self,
        to: NodeId,
        (request, place, mode): (Stamp, Place, Mode),
        after: Option<Stamp>,
        out: &mut Out<RaymondK>,
    ) {
        self.owed.remove(&(to, place.first));
        if self.priority != Priority::Timestamp {
            let reads = mode == Mode::Read;
            let seen = Answered { worst: place, latest: place.first.ts, reads };
            self.answered
                .entry(to)
                .and_modify(|a| {
                    a.worst = a.worst.max(place);
                    a.latest = a.latest.max(place.first.ts);
                    a.reads |= reads;
                })
                .or_insert(seen);
        }
        self.raise_floors(Some(request), mode == Mode::Write);
        let clock = self.clock.now();
        out.send(to, RkMsg::Reply { to: request, clock, after });
    }

    /// This node's request at `place`, which entered on `stamp`, is over:
    /// tells every requester it stood in the way of its new count (a WAIT
    /// only where [`says_wait`](Self::says_wait)), or its REPLY.
    fn settle(&mut self, place: Place, stamp: Stamp, out: &mut Out<RaymondK>) {
        let aloud = self.says_wait();
        let mut done = Vec::new();
        for (&(peer, _), o) in self.owed.iter_mut() {
            if !o.ahead.remove(&place) {
                continue;
            }
            o.after = o.after.max(Some(stamp));
            if o.ahead.is_empty() {
                done.push((peer, (o.round, o.place, o.mode), o.after));
            } else if aloud {
                out.send(peer, RkMsg::Wait { to: o.round, blocking: o.count() });
            }
        }
        for (peer, request, after) in done {
            self.reply(peer, request, after, out);
        }
    }

    /// A new request of this node's, in `mode`: takes its place and sends
    /// its first round.
    fn ask(&mut self, now: Time, mode: Mode, out: &mut Out<RaymondK>) {
        let own = match self.priority {
            Priority::Timestamp => 0,
            Priority::FewestEntries => self.entries,
            Priority::LeastRecent => self.last_entry,
        };
        // No better than a request this node has answered that may still
        // be under way, or one it owes: their requesters count on it.
        let answered = self.answered.values().map(|a| a.worst.rank);
        let owed = self.owed.values().map(|o| o.place.rank);
        let rank = answered.chain(owed).fold(own, u64::max);
        let first = Stamp { ts: self.clock.tick(), node: self.id };
        self.send_round((Place { rank, first }, mode), first, now, out);
    }

    /// Asks again for the request at `place`, with a fresh stamp.
    fn ask_again(&mut self, place: Place, now: Time, out: &mut Out<RaymondK>) {
        let Some(mode) = self.wanting.get(&place).map(|w| w.mode) else {
            return;
        };
        let round = Stamp { ts: self.clock.tick(), node: self.id };
        self.send_round((place, mode), round, now, out);
    }

    /// Sends round `round` of the request at `place` in `mode` to every
    /// live peer and waits for all of them again.
    fn send_round(
        &mut self,
        (place, mode): (Place, Mode),
        round: Stamp,
        now: Time,
        out: &mut Out<RaymondK>,
    ) {
        out.broadcast(self.alive.iter().copied(), RkMsg::Request { stamp: round, place, mode });
        let awaiting = self.alive.iter().map(|&p| (p, None)).collect();
        let (heard, unanswered) = (BTreeSet::new(), BTreeMap::new());
        let want = Want { mode, round, awaiting, heard, unanswered };
        self.wanting.insert(place, want);
        if let Some(patience) = self.patience {
            if self.wanting.len() == 1 {
                out.set_timer(RaTimer::Patience, now + patience);
            }
        }
        self.try_enter(now, out);
    }

    /// A request (or a probe carrying one) from `from`: reply, or say how
    /// many stand in its way.
    fn on_request(
        &mut self,
        from: NodeId,
        (stamp, place, mode): (Stamp, Place, Mode),
        out: &mut Out<RaymondK>,
    ) {
        if self.owed.get(&(from, place.first)).is_some_and(|o| o.round > stamp) {
            return; // a round since replaced
        }
        let mode = self.effective(mode);
        let ahead: BTreeSet<Place> = self.ahead_of(place, mode).collect();
        if ahead.is_empty() {
            self.reply(from, (stamp, place, mode), None, out);
            return;
        }
        let owed = Owed { round: stamp, place, mode, ahead, after: None };
        let blocking = owed.count();
        self.owed.insert((from, place.first), owed);
        if self.says_wait() {
            out.send(from, RkMsg::Wait { to: stamp, blocking });
        }
    }

    /// The place of this node's waiting request whose round is `round`.
    fn waiting_on(&self, round: Stamp) -> Option<Place> {
        self.wanting.iter().find(|(_, w)| w.round == round).map(|(&p, _)| p)
    }

    /// `peer` needs hearing from no more, by any request.
    fn forget_awaited(&mut self, peer: NodeId) {
        for want in self.wanting.values_mut() {
            want.awaiting.remove(&peer);
            want.heard.remove(&peer);
            want.unanswered.remove(&peer);
        }
    }

    /// Releases the grant entered on `stamp`.
    fn leave(&mut self, stamp: Stamp, now: Time, out: &mut Out<RaymondK>) {
        let Some(held) = self.held.remove(&stamp) else {
            return;
        };
        self.settle(held.place, stamp, out);
        self.try_enter(now, out);
    }
}

impl Algorithm for RaymondK {
    type Msg = RkMsg;
    type Timer = RaTimer;

    fn handle_message(&mut self, now: Time, from: NodeId, msg: RkMsg, out: &mut Out<RaymondK>) {
        match msg {
            RkMsg::Request { stamp, place, mode } => {
                self.clock.observe(stamp.ts);
                if stamp.node != from || place.first.node != from {
                    return; // a stamp always names its sender
                }
                self.on_request(from, (stamp, place, mode), out);
            }
            RkMsg::Probe { stamp, place, mode } => {
                self.clock.observe(stamp.ts);
                if stamp.node != from || place.first.node != from {
                    return;
                }
                match self.owed.get(&(from, place.first)) {
                    // Still owed: say so again.
                    Some(o) if o.round == stamp => {
                        out.send(from, RkMsg::Wait { to: stamp, blocking: o.count() });
                    }
                    Some(o) if o.round > stamp => {} // about a round since replaced
                    // Unknown here (lost, or answered already): take it as
                    // the request, which answers again.
                    _ => self.on_request(from, (stamp, place, mode), out),
                }
            }
            RkMsg::Reply { to, clock, after } => {
                self.clock.observe(clock);
                let Some(place) = self.waiting_on(to) else {
                    return; // answers a round no longer waited on
                };
                let mode = self.wanting.get(&place).map_or(Mode::Write, |w| w.mode);
                if let Some(theirs) = self.answered.get(&from) {
                    // `from` lets through a request ranking behind all it
                    // asked for that this node answered, and did so after
                    // making them, and would have held it back for each:
                    // they are over.
                    let conflicting = mode == Mode::Write || !theirs.reads;
                    if conflicting && theirs.worst < place && clock >= theirs.latest {
                        self.answered.remove(&from);
                    }
                }
                // Deferred behind entries: this node's next write must be
                // above them. A read was deferred behind writes only, which
                // its node's reads pass too; the entries a write waited for
                // may be reads, which reads need not pass.
                self.raise_floors(after, mode == Mode::Read);
                if let Some(want) = self.wanting.get_mut(&place) {
                    want.awaiting.remove(&from);
                    want.heard.remove(&from);
                    want.unanswered.remove(&from);
                }
                self.try_enter(now, out);
            }
            RkMsg::Wait { to, blocking } => {
                let Some(place) = self.waiting_on(to) else {
                    return;
                };
                let Some(want) = self.wanting.get_mut(&place) else {
                    return;
                };
                let Some(count) = want.awaiting.get_mut(&from) else {
                    return; // replied already
                };
                // Counts only fall: a smaller one sent later may arrive
                // first.
                *count = Some(count.map_or(blocking, |c| c.min(blocking)));
                want.heard.insert(from);
                want.unanswered.remove(&from);
                self.try_enter(now, out);
            }
        }
    }

    fn handle_timer(&mut self, now: Time, timer: RaTimer, out: &mut Out<RaymondK>) {
        let RaTimer::Patience = timer;
        let Some(patience) = self.patience else {
            return;
        };
        for (&place, want) in self.wanting.iter_mut() {
            let mut silent = Vec::new();
            for &peer in want.awaiting.keys() {
                if want.heard.remove(&peer) {
                    continue; // it said "wait" since the last look: alive
                }
                let probes = want.unanswered.entry(peer).or_default();
                if *probes >= PROBES {
                    silent.push(peer);
                } else {
                    *probes += 1;
                    let mode = want.mode;
                    out.send(peer, RkMsg::Probe { stamp: want.round, place, mode });
                }
            }
            // Given up on for this request: treated as failed, though the
            // failure detector may still count it as up (the caveat of
            // Ricart–Agrawala's fault-tolerant form).
            for peer in silent {
                want.awaiting.remove(&peer);
                want.unanswered.remove(&peer);
            }
        }
        self.try_enter(now, out);
        if !self.wanting.is_empty() {
            out.set_timer(RaTimer::Patience, now + patience);
        }
    }

    fn handle_peer_up(&mut self, _now: Time, peer: NodeId, out: &mut Out<RaymondK>) {
        self.alive.insert(peer);
        for (&place, want) in self.wanting.iter_mut() {
            want.awaiting.insert(peer, None);
            want.heard.remove(&peer);
            want.unanswered.remove(&peer);
            let mode = want.mode;
            out.send(peer, RkMsg::Request { stamp: want.round, place, mode });
        }
    }

    /// Every request under way asks again, with a fresh stamp, everyone,
    /// as in Ricart–Agrawala: the peer forgot them, or they left it out.
    fn handle_peer_back(&mut self, now: Time, peer: NodeId, out: &mut Out<RaymondK>) {
        self.alive.insert(peer);
        let places: Vec<Place> = self.wanting.keys().copied().collect();
        for place in places {
            self.ask_again(place, now, out);
        }
    }

    fn handle_peer_down(&mut self, now: Time, peer: NodeId, out: &mut Out<RaymondK>) {
        self.alive.remove(&peer);
        self.owed.retain(|&(from, _), _| from != peer);
        self.answered.remove(&peer);
        self.forget_awaited(peer);
        self.try_enter(now, out);
    }
}

impl MutexAlgorithm for RaymondK {
    /// Nothing wanted, held or owed. Under a dynamic priority, also no
    /// peer's request answered and not seen finish (it ranks the next
    /// request).
    fn forgettable(&self) -> bool {
        self.wanting.is_empty()
            && self.held.is_empty()
            && self.owed.is_empty()
            && (self.priority == Priority::Timestamp || self.answered.is_empty())
    }

    /// One more write of this node's, up to the lock's permits.
    fn handle_request(&mut self, now: Time, out: &mut Out<RaymondK>) {
        self.handle_request_in(now, Mode::Write, out);
    }

    /// One more request of this node's in `mode`: writes up to the lock's
    /// permits, reads (on a lock of one permit) without a bound here.
    fn handle_request_in(&mut self, now: Time, mode: Mode, out: &mut Out<RaymondK>) {
        let mode = self.effective(mode);
        let modes = self.held.values().map(|h| h.mode).chain(self.wanting.values().map(|w| w.mode));
        let writes = modes.filter(|&m| m == Mode::Write).count();
        if mode == Mode::Write && writes >= self.capacity as usize {
            return;
        }
        self.ask(now, mode, out);
    }

    fn mode_of(&self, fence: Fence) -> Mode {
        let held = self.held.iter().find(|(&s, _)| Fence::from(s) == fence);
        held.map_or(Mode::Write, |(_, h)| h.mode)
    }

    /// Leaves the oldest grant held here.
    fn handle_release(&mut self, now: Time, out: &mut Out<RaymondK>) {
        if let Some(&stamp) = self.held.keys().next() {
            self.leave(stamp, now, out);
        }
    }

    fn handle_release_of(&mut self, now: Time, fence: Fence, out: &mut Out<RaymondK>) {
        let stamp = self.held.keys().copied().find(|&s| Fence::from(s) == fence);
        if let Some(stamp) = stamp {
            self.leave(stamp, now, out);
        }
    }

    fn cs_state(&self) -> CsState {
        if !self.held.is_empty() {
            CsState::Held
        } else if !self.wanting.is_empty() {
            CsState::Wanting
        } else {
            CsState::Idle
        }
    }

    /// Under timestamp order, the first stamp of this node's oldest
    /// request under way.
    fn request_stamp(&self) -> Option<Stamp> {
        match self.priority {
            Priority::Timestamp => {
                let held = self.held.values().map(|h| &h.place);
                held.chain(self.wanting.keys()).min().map(|p| p.first)
            }
            Priority::FewestEntries | Priority::LeastRecent => None,
        }
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
    use crate::algorithm::MutexOptions;
    use crate::outbox::Action;
    use crate::testkit::*;

    fn node_with(id: u32, members: u32, k: usize, mutex_options: MutexOptions) -> RaymondK {
        let mut cfg = AlgoConfig { mutex_options, ..AlgoConfig::for_test(id, members) };
        cfg.capacity = k;
        with_up(RaymondK::new(&cfg), cfg.peers())
    }

    fn node(id: u32, members: u32, k: usize) -> RaymondK {
        node_with(id, members, k, MutexOptions::default())
    }

    fn place(ts: u64, id: u32) -> Place {
        Place { rank: 0, first: stamp(ts, id) }
    }

    fn request(ts: u64, id: u32) -> RkMsg {
        request_in(ts, id, Mode::Write)
    }

    fn request_in(ts: u64, id: u32, mode: Mode) -> RkMsg {
        RkMsg::Request { stamp: stamp(ts, id), place: place(ts, id), mode }
    }

    fn reply(to: Stamp, clock: u64) -> RkMsg {
        RkMsg::Reply { to, clock, after: None }
    }

    fn wait(to: Stamp, blocking: u32) -> RkMsg {
        RkMsg::Wait { to, blocking }
    }

    fn grant(ts: u64, id: u32) -> Action<RkMsg, RaTimer> {
        Action::Grant { fence: Fence::new(ts, u64::from(id)) }
    }

    #[test]
    fn with_k_2_a_node_enters_with_one_peer_still_in_the_way() {
        let mut p = node(1, 3, 2);
        let mut out = Out::<RaymondK>::new();
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(2, request(1, 1)), send(3, request(1, 1))]);
        let mine = stamp(1, 1);
        p.handle_message(T, n(2), reply(mine, 1), &mut out);
        assert!(out.is_empty(), "node 3 has not said how many it has");
        p.handle_message(T, n(3), wait(mine, 1), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
        // Node 3's reply comes late and changes nothing.
        p.handle_message(T, n(3), reply(mine, 2), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn two_sessions_at_one_node_hold_two_permits_with_their_own_fences() {
        let mut p = node(1, 2, 2);
        let mut out = Out::<RaymondK>::new();
        p.handle_request(T, &mut out);
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(2, request(1, 1)), send(2, request(2, 1))]);
        p.handle_message(T, n(2), reply(stamp(2, 1), 2), &mut out);
        assert_eq!(out.take(), vec![grant(2, 1)], "its own first request is one in the way");
        p.handle_message(T, n(2), reply(stamp(1, 1), 2), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
        assert_eq!(p.cs_state(), CsState::Held);
        // A third session waits: the lock has two permits.
        p.handle_request(T, &mut out);
        assert!(out.is_empty());
        p.handle_release_of(T, Fence::new(2, 1), &mut out);
        p.handle_release_of(T, Fence::new(1, 1), &mut out);
        assert_eq!(p.cs_state(), CsState::Idle);
        assert!(p.forgettable());
    }

    #[test]
    fn a_peer_holding_two_says_so_and_again_as_each_leaves() {
        let mut q = node(2, 2, 2);
        let mut out = Out::<RaymondK>::new();
        q.handle_request(T, &mut out);
        q.handle_request(T, &mut out);
        out.take();
        q.handle_message(T, n(1), reply(stamp(1, 2), 2), &mut out);
        q.handle_message(T, n(1), reply(stamp(2, 2), 2), &mut out);
        assert_eq!(out.take(), vec![grant(1, 2), grant(2, 2)]);

        // Node 1 asks: both permits are in use here.
        let theirs = stamp(3, 1);
        q.handle_message(T, n(1), request(3, 1), &mut out);
        assert_eq!(out.take(), vec![send(1, wait(theirs, 2))]);
        q.handle_release_of(T, Fence::new(1, 2), &mut out);
        assert_eq!(out.take(), vec![send(1, wait(theirs, 1))]);
        q.handle_release_of(T, Fence::new(2, 2), &mut out);
        let last = RkMsg::Reply { to: theirs, clock: 3, after: Some(stamp(2, 2)) };
        assert_eq!(out.take(), vec![send(1, last)]);

        // The requester's side: 2 in the way, then 1, then it enters.
        let mut p = node(1, 2, 2);
        p.observe_watermark(2);
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), wait(theirs, 2), &mut out);
        assert!(out.is_empty());
        p.handle_message(T, n(2), wait(theirs, 1), &mut out);
        assert_eq!(out.take(), vec![grant(3, 1)]);
    }

    /// A node that always holds something still replies: what it asked
    /// for after the request came does not count against it, or a busy
    /// node would owe replies for ever.
    #[test]
    fn a_reply_owed_goes_out_once_the_requests_it_waited_for_are_over() {
        let mut q = node(2, 2, 3);
        let mut out = Out::<RaymondK>::new();
        q.handle_request(T, &mut out);
        q.handle_message(T, n(1), reply(stamp(1, 2), 1), &mut out);
        assert_eq!(out.take(), vec![send(1, request(1, 2)), grant(1, 2)]);
        let theirs = stamp(2, 1);
        q.handle_message(T, n(1), request(2, 1), &mut out);
        assert_eq!(out.take(), vec![send(1, wait(theirs, 1))]);
        // A second session here asks and enters while node 1's request
        // waits; then the first leaves.
        q.handle_request(T, &mut out);
        q.handle_message(T, n(1), reply(stamp(3, 2), 3), &mut out);
        assert_eq!(out.take(), vec![send(1, request(3, 2)), grant(3, 2)]);
        q.handle_release_of(T, Fence::new(1, 2), &mut out);
        let owed = RkMsg::Reply { to: theirs, clock: 3, after: Some(stamp(1, 2)) };
        assert_eq!(out.take(), vec![send(1, owed)]);
        assert_eq!(q.cs_state(), CsState::Held);
    }

    #[test]
    fn counts_arriving_out_of_order_keep_the_smaller() {
        let mut p = node(1, 2, 2);
        let mut out = Out::<RaymondK>::new();
        p.handle_request(T, &mut out);
        out.take();
        let mine = stamp(1, 1);
        p.handle_message(T, n(2), wait(mine, 1), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
        let mut p = node(1, 2, 3);
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), wait(mine, 1), &mut out);
        out.take();
        p.handle_request(T, &mut out);
        out.take();
        // The first WAIT, sent before the one that arrived: still 1.
        p.handle_message(T, n(2), wait(stamp(2, 1), 1), &mut out);
        assert_eq!(out.take(), vec![grant(2, 1)], "1 at node 2 and 1 here: 2 of 3");
    }

    #[test]
    fn with_k_1_it_is_ricart_agrawala_silent_deferral_and_rising_fences() {
        let mut p = node(1, 2, 1);
        let mut out = Out::<RaymondK>::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), reply(stamp(1, 1), 1), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
        p.handle_message(T, n(2), request(0, 2), &mut out);
        assert!(out.is_empty(), "a holder defers in silence, even an older stamp");
        p.handle_release(T, &mut out);
        let after = Some(stamp(1, 1));
        assert_eq!(out.take(), vec![send(2, RkMsg::Reply { to: stamp(0, 2), clock: 1, after })]);
        // The next entry here is above the round it answered.
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(2, request(2, 1))]);
    }

    #[test]
    fn a_third_request_at_one_node_waits_behind_its_own_two() {
        let mut p = node(1, 1, 2);
        let mut out = Out::<RaymondK>::new();
        p.handle_request(T, &mut out);
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![grant(1, 1), grant(2, 1)]);
        p.handle_request(T, &mut out);
        assert!(out.is_empty(), "at most k requests under way");
    }

    #[test]
    fn a_probe_of_a_request_still_in_the_way_gets_its_count_again() {
        let opts = MutexOptions { fault_tolerant: true, ..MutexOptions::default() };
        let mut q = node_with(2, 2, 2, opts);
        let mut out = Out::<RaymondK>::new();
        q.handle_request(T, &mut out);
        q.handle_request(T, &mut out);
        q.handle_message(T, n(1), reply(stamp(1, 2), 2), &mut out);
        q.handle_message(T, n(1), reply(stamp(2, 2), 2), &mut out);
        out.take();
        let theirs = stamp(3, 1);
        q.handle_message(T, n(1), request(3, 1), &mut out);
        assert_eq!(out.take(), vec![send(1, wait(theirs, 2))]);
        q.handle_message(
            T,
            n(1),
            RkMsg::Probe { stamp: theirs, place: place(3, 1), mode: Mode::Write },
            &mut out,
        );
        assert_eq!(out.take(), vec![send(1, wait(theirs, 2))]);
    }

    #[test]
    fn a_silent_peer_is_probed_then_given_up_on() {
        let opts = MutexOptions { fault_tolerant: true, ..MutexOptions::default() };
        let mut p = node_with(1, 2, 2, opts);
        let mut out = Out::<RaymondK>::new();
        p.handle_request(T, &mut out);
        out.take();
        let probe = RkMsg::Probe { stamp: stamp(1, 1), place: place(1, 1), mode: Mode::Write };
        for _ in 0..PROBES {
            p.handle_timer(T, RaTimer::Patience, &mut out);
            assert!(out.take().contains(&send(2, probe.clone())));
        }
        p.handle_timer(T, RaTimer::Patience, &mut out);
        assert!(out.take().contains(&grant(1, 1)));
    }

    #[test]
    fn readers_answer_readers_at_once_while_holding() {
        let mut p = node(1, 2, 1);
        let mut out = Out::<RaymondK>::new();
        p.handle_request_in(T, Mode::Read, &mut out);
        assert_eq!(out.take(), vec![send(2, request_in(1, 1, Mode::Read))]);
        p.handle_message(T, n(2), reply(stamp(1, 1), 1), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
        assert_eq!(p.mode_of(Fence::new(1, 1)), Mode::Read);
        // A second session here reads too, and a peer's reader is let in.
        p.handle_request_in(T, Mode::Read, &mut out);
        p.handle_message(T, n(2), reply(stamp(2, 1), 2), &mut out);
        assert_eq!(out.take(), vec![send(2, request_in(2, 1, Mode::Read)), grant(2, 1)]);
        p.handle_message(T, n(2), request_in(3, 2, Mode::Read), &mut out);
        let to = stamp(3, 2);
        assert_eq!(out.take(), vec![send(2, RkMsg::Reply { to, clock: 3, after: None })]);
        // A peer's writer waits for both, and hears the later fence.
        p.handle_message(T, n(2), request(4, 2), &mut out);
        assert!(out.is_empty(), "deferred in silence");
        p.handle_release_of(T, Fence::new(2, 1), &mut out);
        assert!(out.is_empty(), "one reader is still inside");
        p.handle_release_of(T, Fence::new(1, 1), &mut out);
        let after = Some(stamp(2, 1));
        assert_eq!(out.take(), vec![send(2, RkMsg::Reply { to: stamp(4, 2), clock: 4, after })]);
    }

    #[test]
    fn no_reader_passes_a_writer_that_asked_first() {
        let mut p = node(1, 2, 1);
        let mut out = Out::<RaymondK>::new();
        p.handle_request(T, &mut out);
        out.take();
        // A peer's later reader is held back by the waiting writer...
        p.handle_message(T, n(2), request_in(2, 2, Mode::Read), &mut out);
        assert!(out.is_empty());
        // ...and so is a reader of this node's own, asked after it.
        p.handle_request_in(T, Mode::Read, &mut out);
        assert_eq!(out.take(), vec![send(2, request_in(3, 1, Mode::Read))]);
        p.handle_message(T, n(2), reply(stamp(3, 1), 4), &mut out);
        assert!(out.is_empty(), "the writer ahead of it has not entered");
        p.handle_message(T, n(2), reply(stamp(1, 1), 4), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
        // The writer leaves: both readers go, the peer's and this node's.
        p.handle_release(T, &mut out);
        let after = Some(stamp(1, 1));
        let theirs = RkMsg::Reply { to: stamp(2, 2), clock: 4, after };
        assert_eq!(out.take(), vec![send(2, theirs), grant(3, 1)]);
        // A node asks for one write at a time, and reads beside it.
        p.handle_request(T, &mut out);
        p.handle_request(T, &mut out);
        p.handle_request_in(T, Mode::Read, &mut out);
        assert_eq!(out.take().len(), 2, "one more write, one more read");
    }

    #[test]
    fn a_read_enters_above_the_writers_rounds_it_answered_a_write_above_all() {
        // A peer's request ranked ahead, on a later round: answered.
        let ahead = |ts, mode| RkMsg::Request { stamp: stamp(ts, 2), place: place(0, 2), mode };
        for (theirs, mine, asks_again) in [
            (Mode::Read, Mode::Read, false),
            (Mode::Write, Mode::Read, true),
            (Mode::Read, Mode::Write, true),
        ] {
            let mut p = node(1, 2, 1);
            let mut out = Out::<RaymondK>::new();
            p.handle_request_in(T, mine, &mut out);
            out.take();
            p.handle_message(T, n(2), ahead(5, theirs), &mut out);
            assert_eq!(out.take().len(), 1, "the reply");
            p.handle_message(T, n(2), reply(stamp(1, 1), 6), &mut out);
            if asks_again {
                let again = RkMsg::Request { stamp: stamp(7, 1), place: place(1, 1), mode: mine };
                assert_eq!(out.take(), vec![send(2, again)], "{theirs:?} then {mine:?}");
            } else {
                assert_eq!(out.take(), vec![grant(1, 1)], "{theirs:?} then {mine:?}");
            }
        }
    }

    /// A node's own read asks again (above a writer's round it answered),
    /// enters, leaves; the write that waited behind it on an older round
    /// asks again too rather than enter below the read.
    #[test]
    fn a_write_asks_again_above_a_read_of_its_own_node_that_entered_first() {
        let mut p = node(1, 2, 1);
        let mut out = Out::<RaymondK>::new();
        p.handle_request_in(T, Mode::Read, &mut out);
        out.take();
        let ahead = RkMsg::Request { stamp: stamp(2, 2), place: place(0, 2), mode: Mode::Write };
        p.handle_message(T, n(2), ahead, &mut out);
        assert_eq!(out.take(), vec![send(2, reply(stamp(2, 2), 2))]);
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), reply(stamp(3, 1), 3), &mut out);
        assert!(out.is_empty(), "the write waits behind this node's read");
        p.handle_message(T, n(2), reply(stamp(1, 1), 3), &mut out);
        let again = RkMsg::Request { stamp: stamp(4, 1), place: place(1, 1), mode: Mode::Read };
        assert_eq!(out.take(), vec![send(2, again)], "round 1 is below the writer's 2");
        p.handle_message(T, n(2), reply(stamp(4, 1), 4), &mut out);
        assert_eq!(out.take(), vec![grant(4, 1)]);
        p.handle_release_of(T, Fence::new(4, 1), &mut out);
        let again = RkMsg::Request { stamp: stamp(5, 1), place: place(3, 1), mode: Mode::Write };
        assert_eq!(out.take(), vec![send(2, again)], "not on round 3, below the read's 4");
    }

    /// The entries a write was deferred behind may be reads: the node's
    /// next write goes above them, its reads need not.
    #[test]
    fn a_read_need_not_pass_the_reads_a_write_of_its_node_waited_for() {
        let mut p = node(1, 2, 1);
        let mut out = Out::<RaymondK>::new();
        p.handle_request_in(T, Mode::Read, &mut out);
        p.handle_request(T, &mut out);
        out.take();
        let after = Some(stamp(1, 2));
        p.handle_message(T, n(2), RkMsg::Reply { to: stamp(2, 1), clock: 2, after }, &mut out);
        p.handle_message(T, n(2), reply(stamp(1, 1), 2), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)], "the read enters on round 1");
        p.handle_release_of(T, Fence::new(1, 1), &mut out);
        assert_eq!(out.take(), vec![grant(2, 1)], "the write is above (1, 2) and the read");
    }

    #[test]
    fn a_semaphore_takes_a_read_as_a_write() {
        let mut p = node(1, 2, 2);
        let mut out = Out::<RaymondK>::new();
        p.handle_request_in(T, Mode::Read, &mut out);
        assert_eq!(out.take(), vec![send(2, request(1, 1))]);
        p.handle_message(T, n(2), request_in(0, 2, Mode::Read), &mut out);
        assert_eq!(out.take(), vec![send(2, reply(stamp(0, 2), 1))]);
    }

    #[test]
    fn a_peer_going_down_takes_what_it_was_owed_and_its_count() {
        let mut p = node(1, 3, 2);
        let mut out = Out::<RaymondK>::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), wait(stamp(1, 1), 2), &mut out);
        p.handle_message(T, n(3), wait(stamp(1, 1), 1), &mut out);
        assert!(out.is_empty());
        p.handle_peer_down(T, n(2), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
    }
}
