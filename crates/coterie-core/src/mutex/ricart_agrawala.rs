//! # `ricart-agrawala` — requests in line, deferred replies
//!
//! **Source.** Ricart and Agrawala, "An optimal algorithm for mutual
//! exclusion in computer networks" (CACM 24(1), 1981), in the
//! `pending`/`need` formulation with a communication thread and a
//! semaphore; the REQUEST(5)/REQUEST(3) race is the textbook exercise; and
//! D. W. Jones's lecture notes (22C:116, University of Iowa, 2002) give the
//! two variants built in here: the fault-tolerant form (an
//! immediate "I got your request and I can't reply yet", "are you still
//! there?" probes, a few retries, then giving up on the silent peer) and
//! dynamic priorities (fewest entries first, or least recently served
//! first), frozen before the request goes out, with the id appended as the
//! tie-breaker. Both are chosen by [`MutexOptions`](crate::MutexOptions).
//!
//! **Assumptions.** Reliable links while both ends are up (FIFO is not
//! needed); crash-stop failures reported by the failure detector; no
//! partitions (a peer wrongly suspected is no longer asked, so both sides of
//! a partition can enter). The fault-tolerant form adds a second way to
//! stop waiting for a peer, its own timeout, and with it the same caveat:
//! giving up on a peer that is alive but slow breaks mutual exclusion
//! exactly as a false suspicion of the failure detector does. So it gives
//! up only on a peer that answered nothing at all — neither the request,
//! nor [`PROBES`] probes a patience (the failure timeout) apart; a peer that
//! sent a NACK is known to be alive and is never given up on while it keeps
//! answering probes. The detector normally suspects a crashed peer long
//! before that; the give-up covers a peer whose heartbeats still arrive but
//! whose algorithm no longer answers.
//!
//! **Messages per entry.** 2(N-1) at light load in every mode: a REQUEST to
//! every other live node and a REPLY from each. Synchronisation delay: 1
//! message delay (the deferred REPLY). Under contention:
//! - fault-tolerant: one NACK per deferred request, so up to 3(N-1), plus a
//!   PROBE (and its answer) to each peer still awaited for every patience
//!   the wait lasts beyond the first — none while waits stay short;
//! - dynamic priority: a request that let through requests with larger
//!   stamps asks again before entering (see *Fences*), another 2(N-1) each
//!   time; with every node always wanting (`coterie bench`, N = 3..7) that
//!   is 0.6 to 0.7 extra rounds per entry, and the synchronisation delay
//!   grows to about 3 message delays.
//!
//! **State walk.** An *idle* node answers every REQUEST at once. A node
//! that wants the critical section takes a *place* in line — its priority
//! (0 for every request under timestamp order, its entry count, or the
//! Lamport time of its last entry), then its stamp (Lamport time, then id)
//! — sends it with the stamp to every live peer and becomes *wanting*. It
//! answers a REQUEST at once if that request has the better (lower) place,
//! and *defers* the reply otherwise (fault-tolerant: and sends a NACK at
//! once). With a reply from every peer it asked (or that peer reported
//! down, or given up on) it *holds*; while holding it defers every request
//! it conflicts with (every one, for a writer; see *Readers and writers*).
//! Leaving, it sends every deferred reply and is idle again.
//!
//! The place is frozen when the request first goes out. With a dynamic
//! priority a node could otherwise answer a request while idle and then,
//! with fewer entries, claim a better place for its own: the other node,
//! holding its reply, would answer it too, and both would enter. So a node
//! ranks its own request no better than every request it has answered and
//! not yet seen finish (its priority is raised to theirs, and its stamp,
//! taken after theirs, puts it behind them). It learns a request has
//! finished from the requester's next request, or from a reply of the
//! requester sent after that request began (the reply's clock says when).
//! Under timestamp order every priority is 0 and this changes nothing.
//!
//! **Fault tolerance.** While wanting, every patience (the failure timeout)
//! the node looks at each peer it still awaits: one that sent a NACK or
//! answered a probe since the last look is left alone; one that did not is
//! sent a PROBE, which carries the request again (so a lost request is
//! retried, and a node that already answered answers again); one that let
//! [`PROBES`] probes in a row go unanswered is given up on for this
//! request. The answer to a probe of a deferred request is another NACK.
//!
//! **Newcomers.** A peer that comes up (or restarts) while this node waits
//! is sent the request too and its reply awaited: otherwise the newcomer,
//! unaware of the request, could grant itself while this node enters. A
//! peer that was only suspected (stopped, or cut off) and is heard again,
//! or that says it had suspected this node, is met with a fresh round to
//! every live peer: one side forgot the request, and entries made while
//! they were apart never asked the other, so the old stamp may be below
//! their fences (see *Fences*).
//!
//! **Fences.** A grant's fence is the stamp of the last *round* of its
//! request — timestamp in the high bits, node id in the low bits — and every
//! live peer has seen that stamp, because it answered that round. A node
//! enters only with a round stamp above (a) every round stamp it has
//! answered and (b) every entry it learns it was deferred behind (a deferred
//! REPLY names the holder's stamp); otherwise it asks again, keeping its
//! place, with a fresh stamp, which the Lamport clock puts above both. Why
//! that makes fences rise with every grant: if X enters before Y, then Y
//! answered X's last round (X needed Y's reply), either before Y's own last
//! round began — so the clock put Y's stamp above X's — or after, and then
//! (a) holds Y back until its stamp is above X's. This holds when X crashes
//! after entering and Y gives up on it: Y never needs X's reply, only the
//! stamp X announced. The one way to enter without having answered is to be
//! new (a restarted node, which X never asked); then X, still holding,
//! defers the newcomer and (b) applies. Under timestamp order requests are
//! served in stamp order and (a) never holds anyone back without failures;
//! with a dynamic priority a request with a later stamp often goes first,
//! and the one it overtook pays a second round. Fences must be known to
//! every live peer before they are used: a fence built at entry from what
//! the replies carried would die with a holder that crashes, and the next
//! entrant could not know to exceed it.
//!
//! **Readers and writers.** A request says whether it reads or writes,
//! and a request defers only the requests it conflicts with: two reads do
//! not conflict, so a reader answers another reader at once, wanting or
//! holding, and readers enter side by side. A writer conflicts with
//! everyone and is served exactly as above. So no reader overtakes a
//! writer that asked before it (the writer, ranked ahead, defers it), and
//! a writer waits for the readers ranked ahead of it: the fair readers and
//! writers of Courtois, Heymans and Parnas ("Concurrent control with
//! 'readers' and 'writers'", CACM 14(10), 1971) in Ricart and Agrawala's
//! scheme. Messages per entry stay 2(N−1), read or write. The fence rule
//! above is kept for conflicting pairs only: a writer enters with a round
//! stamp above every round it answered and every entry it was deferred
//! behind; a reader above every *writer's* round it answered and every
//! entry it was deferred behind (always a writer's). The argument of
//! *Fences* holds for any two conflicting entries, so a writer's fence is
//! above every earlier grant's and a reader's above every earlier
//! writer's, while readers that answer each other do not ask again for
//! it. With a dynamic priority a node still ranks its next request behind
//! every request it answered, reads included (a reader's answer may be
//! held by a request that later conflicts with its own write), and learns
//! that a request is over from a reply only when the two conflict (a
//! reader answers a reader at once, whatever it does).
//!
//! [`raymond_k`](super::raymond_k) is this algorithm for k holders, with
//! several requests per node and counts in the answers.
//!
//! Every REPLY and NACK names the round it answers, so an answer to an
//! abandoned round never counts.

use super::ask::Ask;
use crate::algorithm::{AlgoConfig, Algorithm, MutexAlgorithm, Out, Priority};
use crate::outbox::{message_kinds, timers, Time};
use crate::types::{CsState, Fence, LamportClock, Mode, NodeId, Stamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Probes a peer may leave unanswered in a row before a fault-tolerant node
/// gives up on it for the current request.
pub const PROBES: u32 = 3;

/// Where a request stands in line: the lower place is served first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Place {
    /// The priority frozen when the request first went out: 0 under
    /// timestamp order, else the requester's entry count or the Lamport
    /// time of its last entry, raised to that of every request it had
    /// answered and not seen finish.
    pub rank: u64,
    /// The stamp of the request's first round, the tie-breaker.
    pub first: Stamp,
}

/// The messages of [`RicartAgrawala`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum RaMsg {
    /// I want the critical section; this is my place in line.
    Request {
        /// The round's stamp: what answers name, and the fence if the
        /// requester enters on this round.
        stamp: Stamp,
        /// The request's place, the same for all its rounds.
        place: Place,
        /// Whether it reads or writes.
        mode: Mode,
    },
    /// Go ahead as far as I am concerned.
    Reply {
        /// The round answered.
        to: Stamp,
        /// The replier's Lamport clock.
        clock: u64,
        /// For a reply deferred behind the replier's own entry: that
        /// entry's stamp (its fence).
        after: Option<Stamp>,
    },
    /// Fault-tolerant form: I have your request, and my reply must wait.
    Nack {
        /// The round deferred.
        to: Stamp,
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

message_kinds!(RaMsg {
    Request => "request",
    Reply => "reply",
    Nack => "nack",
    Probe => "probe",
});

timers! {
    /// The timers of [`RicartAgrawala`].
    pub enum RaTimer {
        /// The fault-tolerant form's one timer: look at the peers still awaited.
        Patience,
    }
}

/// The Ricart–Agrawala algorithm; see the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct RicartAgrawala {
    id: NodeId,
    alive: BTreeSet<NodeId>,
    clock: LamportClock,
    state: Ask,
    /// The place of the request under way, while wanting or holding.
    place: Option<Place>,
    /// The mode of the request under way (or of the last one).
    mode: Mode,
    /// Requests this node has not answered yet, by requester: the round,
    /// its place and its mode.
    deferred: BTreeMap<NodeId, (Stamp, Place, Mode)>,
    /// Each peer's request this node answered and has not seen finish, and
    /// its mode: its own next request takes a place behind all of them.
    answered: BTreeMap<NodeId, (Place, Mode)>,
    /// The largest round stamp this node has answered or been deferred
    /// behind: its own round must be above it to enter as a writer (see
    /// *Fences*).
    floor: Option<Stamp>,
    /// The largest writer's round stamp this node has answered, or entry
    /// it has been deferred behind: its own round must be above it to
    /// enter as a reader (see *Readers and writers*).
    write_floor: Option<Stamp>,
    priority: Priority,
    /// Entries granted to this node (in this run of it).
    entries: u64,
    /// The Lamport time of this node's last entry (0 before the first).
    last_entry: u64,
    /// The fault-tolerant form's state, when it is on.
    tolerance: Option<Tolerance>,
}

/// What a fault-tolerant requester keeps about the peers it awaits.
#[derive(Debug, Clone, Hash)]
struct Tolerance {
    /// How long a peer may stay silent before it is probed: the failure
    /// timeout.
    patience: Duration,
    /// Awaited peers that sent a NACK since the last look.
    heard: BTreeSet<NodeId>,
    /// Awaited peers' unanswered probes in a row.
    unanswered: BTreeMap<NodeId, u32>,
}

impl RicartAgrawala {
    /// A node with nobody known to be up yet.
    pub fn new(cfg: &AlgoConfig) -> Self {
        let opts = cfg.mutex_options;
        RicartAgrawala {
            id: cfg.id,
            alive: BTreeSet::new(),
            clock: LamportClock::default(),
            state: Ask::Idle,
            place: None,
            mode: Mode::Write,
            deferred: BTreeMap::new(),
            answered: BTreeMap::new(),
            floor: None,
            write_floor: None,
            priority: opts.priority,
            entries: 0,
            last_entry: 0,
            tolerance: opts.fault_tolerant.then(|| Tolerance {
                patience: cfg.timing.failure_timeout,
                heard: BTreeSet::new(),
                unanswered: BTreeMap::new(),
            }),
        }
    }

    /// Enters once no reply is outstanding and the round's stamp is above
    /// the floor; asks again with a fresh stamp if it is not.
    fn try_enter(&mut self, now: Time, out: &mut Out<RicartAgrawala>) {
        let Ask::Wanting { stamp, awaiting } = &self.state else {
            return;
        };
        if !awaiting.is_empty() {
            return;
        }
        let stamp = *stamp;
        let floor = match self.mode {
            Mode::Write => self.floor,
            Mode::Read => self.write_floor,
        };
        if floor.is_some_and(|floor| floor >= stamp) {
            // A request this node let through may enter first with a
            // larger stamp: announce a larger one before entering.
            self.ask_again(now, out);
            return;
        }
        self.state = Ask::Held { stamp };
        self.entries += 1;
        self.last_entry = stamp.ts;
        if self.tolerance.is_some() {
            out.cancel_timer(RaTimer::Patience);
        }
        out.grant(Fence::from(stamp));
    }

    /// Answers `to`'s round `request` (at `place`, in `mode`), remembering
    /// what an answer commits this node to.
    fn reply(
        &mut self,
        to: NodeId,
        (request, place, mode): (Stamp, Place, Mode),
        after: Option<Stamp>,
        out: &mut Out<RicartAgrawala>,
    ) {
        self.answered.insert(to, (place, mode));
        self.floor = self.floor.max(Some(request));
        if mode == Mode::Write {
            self.write_floor = self.write_floor.max(Some(request));
        }
        let clock = self.clock.now();
        out.send(to, RaMsg::Reply { to: request, clock, after });
    }

    /// Takes a place for a new request and sends its first round.
    fn ask(&mut self, now: Time, out: &mut Out<RicartAgrawala>) {
        let own = match self.priority {
            Priority::Timestamp => 0,
            Priority::FewestEntries => self.entries,
            Priority::LeastRecent => self.last_entry,
        };
        // No better than any request this node has answered that may still
        // be under way: the requester holds this node's reply.
        let rank = self.answered.values().map(|(p, _)| p.rank).fold(own, u64::max);
        let first = Stamp { ts: self.clock.tick(), node: self.id };
        self.place = Some(Place { rank, first });
        self.send_round(first, now, out);
    }

    /// Asks again for the request under way, in the same place, with a
    /// fresh stamp.
    fn ask_again(&mut self, now: Time, out: &mut Out<RicartAgrawala>) {
        let stamp = Stamp { ts: self.clock.tick(), node: self.id };
        self.send_round(stamp, now, out);
    }

    /// Sends the round `stamp` of the request under way to every live
    /// peer, and waits for all of them again.
    fn send_round(&mut self, stamp: Stamp, now: Time, out: &mut Out<RicartAgrawala>) {
        let Some(place) = self.place else {
            return;
        };
        let mode = self.mode;
        out.broadcast(self.alive.iter().copied(), RaMsg::Request { stamp, place, mode });
        self.state = Ask::Wanting { stamp, awaiting: self.alive.clone() };
        if let Some(t) = &mut self.tolerance {
            t.heard.clear();
            t.unanswered.clear();
            out.set_timer(RaTimer::Patience, now + t.patience);
        }
        self.try_enter(now, out);
    }

    /// A request (or a probe carrying one) from `from`: answer or defer.
    fn on_request(
        &mut self,
        from: NodeId,
        (stamp, place, mode): (Stamp, Place, Mode),
        out: &mut Out<RicartAgrawala>,
    ) {
        // One request at a time: whatever `from` asked before is over, or
        // this is a new round of it, which needs a new answer.
        self.answered.remove(&from);
        // Two reads never wait for each other.
        let conflicts = self.mode.conflicts(mode);
        let defer = match &self.state {
            Ask::Idle => false,
            Ask::Held { .. } => conflicts,
            Ask::Wanting { .. } => conflicts && self.place.is_some_and(|mine| mine < place),
        };
        if defer {
            self.deferred.insert(from, (stamp, place, mode));
            if self.tolerance.is_some() {
                out.send(from, RaMsg::Nack { to: stamp });
            }
        } else {
            if !conflicts {
                // A read that replaces one of `from`'s deferred writes
                // (it restarted) is answered now, and the old round never.
                self.deferred.remove(&from);
            }
            self.reply(from, (stamp, place, mode), None, out);
        }
    }

    /// Whether `stamp` names a round of this node's request under way.
    fn is_mine(&self, stamp: Stamp) -> bool {
        stamp.node == self.id && self.place.is_some_and(|p| stamp.ts >= p.first.ts)
    }
}

impl Algorithm for RicartAgrawala {
    type Msg = RaMsg;
    type Timer = RaTimer;

    fn handle_message(
        &mut self,
        now: Time,
        from: NodeId,
        msg: RaMsg,
        out: &mut Out<RicartAgrawala>,
    ) {
        match msg {
            RaMsg::Request { stamp, place, mode } => {
                self.clock.observe(stamp.ts);
                if stamp.node != from || place.first.node != from {
                    return; // a stamp always names its sender
                }
                self.on_request(from, (stamp, place, mode), out);
            }
            RaMsg::Probe { stamp, place, mode } => {
                self.clock.observe(stamp.ts);
                if stamp.node != from || place.first.node != from {
                    return;
                }
                match self.deferred.get(&from) {
                    // Still deferred: say so again.
                    Some(&(round, ..)) if round == stamp => {
                        out.send(from, RaMsg::Nack { to: stamp });
                    }
                    Some(&(round, ..)) if round > stamp => {} // about a round since replaced
                    // Unknown here (lost, or answered already): take it as
                    // the request, which answers again or defers.
                    _ => self.on_request(from, (stamp, place, mode), out),
                }
            }
            RaMsg::Reply { to, clock, after } => {
                self.clock.observe(clock);
                if let (Some(mine), Some(&(theirs, how))) = (self.place, self.answered.get(&from)) {
                    // `from` answers a request that ranks behind one of its
                    // own this node answered and conflicts with it, and did
                    // so after making that one: it would have deferred, so
                    // that one is over.
                    let conflicts = how.conflicts(self.mode);
                    if self.is_mine(to) && conflicts && theirs < mine && clock >= theirs.first.ts {
                        self.answered.remove(&from);
                    }
                }
                let Ask::Wanting { stamp, awaiting } = &mut self.state else {
                    return;
                };
                if to != *stamp {
                    return; // answers a round this node no longer waits on
                }
                // Deferred behind an entry: this node's fence must be above
                // that one's. Under timestamp order it already is, unless
                // the entry never asked this node (it was down then). It
                // conflicted with this node's request, so a reader's too.
                self.floor = self.floor.max(after);
                self.write_floor = self.write_floor.max(after);
                awaiting.remove(&from);
                if let Some(t) = &mut self.tolerance {
                    t.heard.remove(&from);
                    t.unanswered.remove(&from);
                }
                self.try_enter(now, out);
            }
            RaMsg::Nack { to } => {
                let Ask::Wanting { stamp, awaiting } = &self.state else {
                    return;
                };
                if let Some(t) = &mut self.tolerance {
                    if to == *stamp && awaiting.contains(&from) {
                        t.heard.insert(from);
                        t.unanswered.remove(&from);
                    }
                }
            }
        }
    }

    fn handle_timer(&mut self, now: Time, timer: RaTimer, out: &mut Out<RicartAgrawala>) {
        if timer != RaTimer::Patience {
            return;
        }
        let (Some(t), Ask::Wanting { stamp, awaiting }, Some(place)) =
            (&mut self.tolerance, &mut self.state, self.place)
        else {
            return;
        };
        let mut silent = Vec::new();
        for &peer in awaiting.iter() {
            if t.heard.remove(&peer) {
                continue; // it said "wait" since the last look: alive
            }
            let probes = t.unanswered.entry(peer).or_default();
            if *probes >= PROBES {
                silent.push(peer);
            } else {
                *probes += 1;
                out.send(peer, RaMsg::Probe { stamp: *stamp, place, mode: self.mode });
            }
        }
        // Given up on for this request: treated as failed, though the
        // failure detector may still count it as up (see the caveat above).
        for peer in silent {
            awaiting.remove(&peer);
            t.unanswered.remove(&peer);
        }
        let patience = t.patience;
        self.try_enter(now, out);
        if matches!(self.state, Ask::Wanting { .. }) {
            out.set_timer(RaTimer::Patience, now + patience);
        }
    }

    fn handle_peer_up(&mut self, _now: Time, peer: NodeId, out: &mut Out<RicartAgrawala>) {
        self.alive.insert(peer);
        if let (Ask::Wanting { stamp, awaiting }, Some(place)) = (&mut self.state, self.place) {
            awaiting.insert(peer);
            out.send(peer, RaMsg::Request { stamp: *stamp, place, mode: self.mode });
        }
        if let Some(t) = &mut self.tolerance {
            t.heard.remove(&peer);
            t.unanswered.remove(&peer);
        }
    }

    /// A request under way asks again, with a fresh stamp, everyone: the
    /// peer forgot it, or this node left the peer out of it, and others
    /// may have entered meanwhile with rounds this node never answered, so
    /// the old stamp could be below their fences. The heartbeat that told
    /// of the re-admission carried the peer's clock, and the fresh stamp
    /// is above every round the peer answered.
    fn handle_peer_back(&mut self, now: Time, peer: NodeId, out: &mut Out<RicartAgrawala>) {
        self.alive.insert(peer);
        if let Some(t) = &mut self.tolerance {
            t.heard.remove(&peer);
            t.unanswered.remove(&peer);
        }
        if matches!(self.state, Ask::Wanting { .. }) {
            self.ask_again(now, out);
        }
    }

    fn handle_peer_down(&mut self, now: Time, peer: NodeId, out: &mut Out<RicartAgrawala>) {
        self.alive.remove(&peer);
        self.deferred.remove(&peer);
        self.answered.remove(&peer);
        self.state.heard_from(peer);
        if let Some(t) = &mut self.tolerance {
            t.heard.remove(&peer);
            t.unanswered.remove(&peer);
        }
        self.try_enter(now, out);
    }
}

impl MutexAlgorithm for RicartAgrawala {
    /// Idle with no reply owed. Under a dynamic priority, also no peer's
    /// request answered and not seen finish (it ranks the next request).
    fn forgettable(&self) -> bool {
        self.state == Ask::Idle
            && self.deferred.is_empty()
            && (self.priority == Priority::Timestamp || self.answered.is_empty())
    }

    fn handle_request(&mut self, now: Time, out: &mut Out<RicartAgrawala>) {
        self.handle_request_in(now, Mode::Write, out);
    }

    fn handle_request_in(&mut self, now: Time, mode: Mode, out: &mut Out<RicartAgrawala>) {
        if self.state != Ask::Idle {
            return;
        }
        self.mode = mode;
        self.ask(now, out);
    }

    fn mode_of(&self, fence: Fence) -> Mode {
        match self.state {
            Ask::Held { stamp } if Fence::from(stamp) == fence => self.mode,
            _ => Mode::Write,
        }
    }

    fn handle_release(&mut self, _now: Time, out: &mut Out<RicartAgrawala>) {
        let Ask::Held { stamp } = self.state else {
            return;
        };
        self.state = Ask::Idle;
        self.place = None;
        for (peer, request) in std::mem::take(&mut self.deferred) {
            self.reply(peer, request, Some(stamp), out);
        }
    }

    fn cs_state(&self) -> CsState {
        self.state.cs_state()
    }

    /// Under timestamp order, the stamp of the request's first round: the
    /// order it is served in. `None` under a dynamic priority, where the
    /// order is by place and a later stamp may go first, so the
    /// simulator's timestamp-order check does not apply.
    fn request_stamp(&self) -> Option<Stamp> {
        match self.priority {
            Priority::Timestamp => self.place.map(|p| p.first),
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

    const W: Mode = Mode::Write;
    const R: Mode = Mode::Read;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn node_with(id: u32, members: u32, mutex_options: MutexOptions) -> RicartAgrawala {
        let cfg = AlgoConfig { mutex_options, ..AlgoConfig::for_test(id, members) };
        with_up(RicartAgrawala::new(&cfg), cfg.peers())
    }

    fn node(id: u32, members: u32) -> RicartAgrawala {
        node_with(id, members, MutexOptions::default())
    }

    fn tolerant(id: u32, members: u32) -> RicartAgrawala {
        node_with(id, members, MutexOptions { fault_tolerant: true, ..MutexOptions::default() })
    }

    fn fewest(id: u32, members: u32) -> RicartAgrawala {
        let priority = Priority::FewestEntries;
        node_with(id, members, MutexOptions { priority, ..MutexOptions::default() })
    }

    /// The place of a first round under timestamp order.
    fn place(ts: u64, id: u32) -> Place {
        Place { rank: 0, first: stamp(ts, id) }
    }

    fn request(ts: u64, id: u32) -> RaMsg {
        RaMsg::Request { stamp: stamp(ts, id), place: place(ts, id), mode: W }
    }

    fn reply(to: Stamp, clock: u64) -> RaMsg {
        RaMsg::Reply { to, clock, after: None }
    }

    fn grant(ts: u64, id: u32) -> Action<RaMsg, RaTimer> {
        Action::Grant { fence: Fence::new(ts, u64::from(id)) }
    }

    fn patience_at(at: Duration) -> Action<RaMsg, RaTimer> {
        Action::SetTimer { timer: RaTimer::Patience, at }
    }

    /// The textbook two-requester exercise: P1 sends REQUEST(5), P2 sends REQUEST(3), P3 is
    /// not interested. P2 enters first; P1 enters after P2's deferred reply.
    #[test]
    fn two_requester_trace_from_seed_001() {
        let (mut p1, mut p2, mut p3) = (node(1, 3), node(2, 3), node(3, 3));
        let (mut o1, mut o2, mut o3) = (
            Out::<RicartAgrawala>::new(),
            Out::<RicartAgrawala>::new(),
            Out::<RicartAgrawala>::new(),
        );
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
        assert_eq!(o2.take(), vec![grant(3, 2)]);

        // P1 has P3's reply but waits for P2's.
        p1.handle_message(T, n(3), reply(s1, 5), &mut o1);
        assert!(o1.is_empty());
        assert_eq!(p1.cs_state(), CsState::Wanting);

        // P2 leaves and sends the deferred reply; P1 enters.
        p2.handle_release(T, &mut o2);
        let deferred = RaMsg::Reply { to: s1, clock: 5, after: Some(s2) };
        assert_eq!(o2.take(), vec![send(1, deferred.clone())]);
        p1.handle_message(T, n(2), deferred, &mut o1);
        assert_eq!(o1.take(), vec![grant(5, 1)]);
        assert!(Fence::new(5, 1) > Fence::new(3, 2));
    }

    fn read_request(ts: u64, id: u32) -> RaMsg {
        RaMsg::Request { stamp: stamp(ts, id), place: place(ts, id), mode: R }
    }

    /// Two readers answer each other at once, wanting or holding, and
    /// both enter; the later one does not ask again although it answered
    /// a round above its own.
    #[test]
    fn readers_answer_readers_at_once_and_hold_together() {
        let (mut p1, mut p2) = (node(1, 2), node(2, 2));
        let (mut o1, mut o2) = (Out::<RicartAgrawala>::new(), Out::<RicartAgrawala>::new());
        p1.handle_request_in(T, R, &mut o1);
        assert_eq!(o1.take(), vec![send(2, read_request(1, 1))]);
        p2.observe_watermark(4);
        p2.handle_request_in(T, R, &mut o2);
        assert_eq!(o2.take(), vec![send(1, read_request(5, 2))]);
        // Wanting, ranked ahead: node 1 still answers the reader at once.
        p1.handle_message(T, n(2), read_request(5, 2), &mut o1);
        assert_eq!(o1.take(), vec![send(2, reply(stamp(5, 2), 5))]);
        p2.handle_message(T, n(1), read_request(1, 1), &mut o2);
        assert_eq!(o2.take(), vec![send(1, reply(stamp(1, 1), 5))]);
        p1.handle_message(T, n(2), reply(stamp(1, 1), 5), &mut o1);
        assert_eq!(o1.take(), vec![grant(1, 1)], "(5, 2) was a read: no second round");
        p2.handle_message(T, n(1), reply(stamp(5, 2), 5), &mut o2);
        assert_eq!(o2.take(), vec![grant(5, 2)]);
        assert_eq!(p1.mode_of(Fence::new(1, 1)), R);
        assert_eq!(p1.mode_of(Fence::new(5, 2)), W, "not a grant of node 1");
        // Holding a read, node 1 answers a third reader at once too.
        p1.handle_message(T, n(2), read_request(6, 2), &mut o1);
        assert_eq!(o1.take(), vec![send(2, reply(stamp(6, 2), 6))]);
    }

    /// A writer ranked ahead defers a later reader, and a holding reader
    /// defers a writer: no reader overtakes an earlier writer, and the
    /// writer's deferred reply names the reader's fence.
    #[test]
    fn writers_and_readers_defer_each_other_in_stamp_order() {
        let mut w = node(1, 2);
        let mut out = Out::<RicartAgrawala>::new();
        w.handle_request_in(T, W, &mut out);
        out.take();
        w.handle_message(T, n(2), read_request(2, 2), &mut out);
        assert!(out.is_empty(), "the writer asked first: the reader waits");
        w.handle_message(T, n(2), reply(stamp(1, 1), 2), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
        w.handle_release(T, &mut out);
        let after = Some(stamp(1, 1));
        assert_eq!(out.take(), vec![send(2, RaMsg::Reply { to: stamp(2, 2), clock: 2, after })]);

        let mut r = node(2, 2);
        r.handle_request_in(T, R, &mut out);
        out.take();
        r.handle_message(T, n(1), reply(stamp(1, 2), 1), &mut out);
        assert_eq!(out.take(), vec![grant(1, 2)]);
        r.handle_message(T, n(1), request(0, 1), &mut out);
        assert!(out.is_empty(), "a reader holding defers every writer");
    }

    /// A reader that answered a writer's round above its own asks again
    /// before entering, as a writer would; a writer that answered a
    /// reader's does too.
    #[test]
    fn a_round_answered_across_modes_raises_the_floor() {
        let mut r = node(1, 2);
        let mut out = Out::<RicartAgrawala>::new();
        r.handle_request_in(T, R, &mut out);
        out.take();
        // Node 2's writer, restarted, ranks ahead of nobody but stamps (4, 2)
        // with place (0, 2): ahead of (1, 1), so it is answered.
        let ahead = RaMsg::Request { stamp: stamp(4, 2), place: place(0, 2), mode: W };
        r.handle_message(T, n(2), ahead, &mut out);
        assert_eq!(out.take(), vec![send(2, reply(stamp(4, 2), 4))]);
        r.handle_message(T, n(2), reply(stamp(1, 1), 4), &mut out);
        let again = RaMsg::Request { stamp: stamp(5, 1), place: place(1, 1), mode: R };
        assert_eq!(out.take(), vec![send(2, again)], "a writer's round (4, 2) is above (1, 1)");

        let mut w = node(1, 2);
        w.handle_request_in(T, W, &mut out);
        out.take();
        let ahead = RaMsg::Request { stamp: stamp(4, 2), place: place(0, 2), mode: R };
        w.handle_message(T, n(2), ahead, &mut out);
        assert_eq!(out.take(), vec![send(2, reply(stamp(4, 2), 4))]);
        w.handle_message(T, n(2), reply(stamp(1, 1), 4), &mut out);
        let again = RaMsg::Request { stamp: stamp(5, 1), place: place(1, 1), mode: W };
        assert_eq!(out.take(), vec![send(2, again)], "a writer asks again above a reader's round");
    }

    #[test]
    fn holder_defers_every_request_until_it_leaves() {
        let mut p = node(1, 2);
        let mut out = Out::<RicartAgrawala>::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), reply(stamp(1, 1), 1), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
        p.handle_message(T, n(2), request(0, 2), &mut out);
        assert!(out.is_empty(), "even an older stamp waits while held");
        p.handle_release(T, &mut out);
        let after = Some(stamp(1, 1));
        assert_eq!(out.take(), vec![send(2, RaMsg::Reply { to: stamp(0, 2), clock: 1, after })]);
    }

    #[test]
    fn crashed_peer_is_dropped_from_the_replies_awaited() {
        let mut p = node(1, 3);
        let mut out = Out::<RicartAgrawala>::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), reply(stamp(1, 1), 1), &mut out);
        assert!(out.is_empty());
        p.handle_peer_down(T, n(3), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
    }

    #[test]
    fn newcomer_is_asked_while_waiting() {
        let mut p = node(1, 3);
        let mut out = Out::<RicartAgrawala>::new();
        p.handle_peer_down(T, n(3), &mut out);
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(2, request(1, 1))]);
        p.handle_peer_up(T, n(3), &mut out);
        assert_eq!(out.take(), vec![send(3, request(1, 1))]);
        p.handle_message(T, n(2), reply(stamp(1, 1), 1), &mut out);
        assert!(out.is_empty(), "the newcomer's reply is awaited too");
    }

    #[test]
    fn overtaken_request_asks_again_with_a_larger_stamp_in_the_same_place() {
        // Node 2 restarted and stamped (1, 2) while node 3 held with (9, 3).
        let mut p = node(2, 3);
        let mut out = Out::<RicartAgrawala>::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(1), reply(stamp(1, 2), 1), &mut out);
        let overtaken = RaMsg::Reply { to: stamp(1, 2), clock: 9, after: Some(stamp(9, 3)) };
        p.handle_message(T, n(3), overtaken, &mut out);
        let again = RaMsg::Request { stamp: stamp(10, 2), place: place(1, 2), mode: W };
        assert_eq!(out.take(), vec![send(1, again.clone()), send(3, again)]);
        // A late reply to the old round does not count for the new one.
        p.handle_message(T, n(1), reply(stamp(1, 2), 9), &mut out);
        p.handle_message(T, n(3), reply(stamp(10, 2), 10), &mut out);
        assert!(out.is_empty());
        p.handle_message(T, n(1), reply(stamp(10, 2), 10), &mut out);
        assert_eq!(out.take(), vec![grant(10, 2)]);
    }

    #[test]
    fn lone_node_enters_at_once() {
        let mut p = node(1, 1);
        let mut out = Out::<RicartAgrawala>::new();
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
    }

    #[test]
    fn request_with_a_forged_stamp_is_ignored() {
        let mut p = node(1, 3);
        let mut out = Out::<RicartAgrawala>::new();
        p.handle_message(T, n(2), request(1, 3), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn fault_tolerant_node_nacks_every_request_it_must_defer() {
        let mut p = tolerant(1, 3);
        let mut out = Out::<RicartAgrawala>::new();
        p.handle_request(T, &mut out);
        assert_eq!(
            out.take(),
            vec![send(2, request(1, 1)), send(3, request(1, 1)), patience_at(ms(250))]
        );
        // Wanting, ahead of node 2: "wait", at once.
        p.handle_message(T, n(2), request(4, 2), &mut out);
        assert_eq!(out.take(), vec![send(2, RaMsg::Nack { to: stamp(4, 2) })]);
        // A probe about the same round gets the same answer.
        let probe = RaMsg::Probe { stamp: stamp(4, 2), place: place(4, 2), mode: W };
        p.handle_message(T, n(2), probe, &mut out);
        assert_eq!(out.take(), vec![send(2, RaMsg::Nack { to: stamp(4, 2) })]);
        // Holding: "wait" too.
        p.handle_message(T, n(2), reply(stamp(1, 1), 4), &mut out);
        p.handle_message(T, n(3), reply(stamp(1, 1), 4), &mut out);
        assert_eq!(out.take(), vec![Action::CancelTimer { timer: RaTimer::Patience }, grant(1, 1)]);
        p.handle_message(T, n(3), request(5, 3), &mut out);
        assert_eq!(out.take(), vec![send(3, RaMsg::Nack { to: stamp(5, 3) })]);
        // An idle fault-tolerant node answers at once, with no NACK.
        p.handle_release(T, &mut out);
        out.take();
        p.handle_message(T, n(2), request(7, 2), &mut out);
        assert_eq!(out.take(), vec![send(2, reply(stamp(7, 2), 7))]);
    }

    #[test]
    fn silent_peer_is_probed_then_given_up_on() {
        let mut p = tolerant(1, 3);
        let mut out = Out::<RicartAgrawala>::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(ms(3), n(2), reply(stamp(1, 1), 1), &mut out);
        assert!(out.is_empty(), "node 3 has said nothing yet");
        let probe = RaMsg::Probe { stamp: stamp(1, 1), place: place(1, 1), mode: W };
        for k in 1..=u64::from(PROBES) {
            p.handle_timer(ms(250 * k), RaTimer::Patience, &mut out);
            assert_eq!(out.take(), vec![send(3, probe.clone()), patience_at(ms(250 * (k + 1)))]);
        }
        // The last probe went unanswered too: node 3 counts as failed for
        // this request.
        p.handle_timer(ms(1000), RaTimer::Patience, &mut out);
        assert_eq!(out.take(), vec![Action::CancelTimer { timer: RaTimer::Patience }, grant(1, 1)]);
    }

    #[test]
    fn peer_that_nacked_is_not_given_up_on_while_it_answers_probes() {
        let mut p = tolerant(1, 2);
        let mut out = Out::<RicartAgrawala>::new();
        p.handle_request(T, &mut out);
        out.take();
        let nack = RaMsg::Nack { to: stamp(1, 1) };
        let probe = RaMsg::Probe { stamp: stamp(1, 1), place: place(1, 1), mode: W };
        p.handle_message(ms(1), n(2), nack.clone(), &mut out);
        for k in 0..10u64 {
            // Heard from since the last look: left alone.
            p.handle_timer(ms(500 * k + 250), RaTimer::Patience, &mut out);
            assert_eq!(out.take(), vec![patience_at(ms(500 * k + 500))]);
            // Silent since: probed, and it says "wait" again.
            p.handle_timer(ms(500 * k + 500), RaTimer::Patience, &mut out);
            assert_eq!(out.take(), vec![send(2, probe.clone()), patience_at(ms(500 * k + 750))]);
            p.handle_message(ms(500 * k + 501), n(2), nack.clone(), &mut out);
        }
        assert_eq!(p.cs_state(), CsState::Wanting);
        p.handle_message(ms(5000), n(2), reply(stamp(1, 1), 3), &mut out);
        assert_eq!(out.take(), vec![Action::CancelTimer { timer: RaTimer::Patience }, grant(1, 1)]);
    }

    #[test]
    fn probe_about_a_lost_request_is_answered_as_the_request() {
        let mut p = tolerant(2, 3);
        let mut out = Out::<RicartAgrawala>::new();
        let probe = RaMsg::Probe { stamp: stamp(3, 1), place: place(3, 1), mode: W };
        p.handle_message(T, n(1), probe, &mut out);
        assert_eq!(out.take(), vec![send(1, reply(stamp(3, 1), 3))]);
    }

    /// Node 1 has entered once, node 2 never: node 2 goes first although
    /// node 1 asked earlier, with the smaller stamp.
    #[test]
    fn fewer_entries_go_first_even_with_a_later_stamp() {
        let (mut p1, mut p2) = (fewest(1, 2), fewest(2, 2));
        let (mut o1, mut o2) = (Out::<RicartAgrawala>::new(), Out::<RicartAgrawala>::new());
        p1.handle_request(T, &mut o1);
        o1.take();
        p1.handle_message(T, n(2), reply(stamp(1, 1), 1), &mut o1);
        assert_eq!(o1.take(), vec![grant(1, 1)]);
        p1.handle_release(T, &mut o1);

        p1.handle_request(T, &mut o1);
        let p1_place = Place { rank: 1, first: stamp(2, 1) };
        let r1 = RaMsg::Request { stamp: stamp(2, 1), place: p1_place, mode: W };
        assert_eq!(o1.take(), vec![send(2, r1.clone())]);
        p2.observe_watermark(6);
        p2.handle_request(T, &mut o2);
        let r2 = RaMsg::Request { stamp: stamp(7, 2), place: place(7, 2), mode: W };
        assert_eq!(o2.take(), vec![send(1, r2.clone())]);

        // Node 1, with one entry, ranks behind: it answers node 2 ...
        p1.handle_message(T, n(2), r2, &mut o1);
        assert_eq!(o1.take(), vec![send(2, reply(stamp(7, 2), 7))]);
        // ... and node 2 defers node 1's earlier stamp.
        p2.handle_message(T, n(1), r1, &mut o2);
        assert!(o2.is_empty());
        p2.handle_message(T, n(1), reply(stamp(7, 2), 7), &mut o2);
        assert_eq!(o2.take(), vec![grant(7, 2)]);

        // Node 2 leaves; node 1 learns it was deferred behind (7, 2) and
        // asks again above it, keeping its place.
        p2.handle_release(T, &mut o2);
        let deferred = RaMsg::Reply { to: stamp(2, 1), clock: 7, after: Some(stamp(7, 2)) };
        assert_eq!(o2.take(), vec![send(1, deferred.clone())]);
        p1.handle_message(T, n(2), deferred, &mut o1);
        let again = RaMsg::Request { stamp: stamp(8, 1), place: p1_place, mode: W };
        assert_eq!(o1.take(), vec![send(2, again)]);
        p1.handle_message(T, n(2), reply(stamp(8, 1), 8), &mut o1);
        assert_eq!(o1.take(), vec![grant(8, 1)]);
        assert!(Fence::new(8, 1) > Fence::new(7, 2), "the fence still rises");
    }

    /// Node 1 let node 2's request, with a later stamp, go first; node 2
    /// entered and crashed. Node 1 never hears node 2's fence, but knows
    /// the stamp it announced and asks again above it.
    #[test]
    fn fence_rises_above_a_holder_that_went_first_and_crashed() {
        let mut p = fewest(1, 3);
        let mut out = Out::<RicartAgrawala>::new();
        p.entries = 4;
        p.handle_request(T, &mut out);
        let mine = Place { rank: 4, first: stamp(1, 1) };
        out.take();
        p.handle_message(T, n(2), request(9, 2), &mut out);
        assert_eq!(out.take(), vec![send(2, reply(stamp(9, 2), 9))]);
        p.handle_message(T, n(3), reply(stamp(1, 1), 9), &mut out);
        assert!(out.is_empty(), "node 2 defers node 1 while it holds");
        p.handle_peer_down(T, n(2), &mut out);
        let again = RaMsg::Request { stamp: stamp(10, 1), place: mine, mode: W };
        assert_eq!(out.take(), vec![send(3, again)], "(1, 1) is below (9, 2): ask again");
        p.handle_message(T, n(3), reply(stamp(10, 1), 10), &mut out);
        assert_eq!(out.take(), vec![grant(10, 1)]);
    }

    /// A node that answered a request ranks its own behind it, whatever its
    /// priority: otherwise both could hold each other's reply.
    #[test]
    fn answered_request_stays_ahead_of_the_answerers_own() {
        let mut p = fewest(2, 3);
        let mut out = Out::<RicartAgrawala>::new();
        let theirs = Place { rank: 5, first: stamp(3, 1) };
        p.handle_message(
            T,
            n(1),
            RaMsg::Request { stamp: stamp(3, 1), place: theirs, mode: W },
            &mut out,
        );
        assert_eq!(out.take(), vec![send(1, reply(stamp(3, 1), 3))]);
        p.handle_request(T, &mut out);
        let mine = Place { rank: 5, first: stamp(4, 2) };
        let r = RaMsg::Request { stamp: stamp(4, 2), place: mine, mode: W };
        assert_eq!(out.take(), vec![send(1, r.clone()), send(3, r)]);
        assert!(theirs < mine);
        // Node 1's reply, sent after its request began, shows that request
        // is over: the next request of node 2 is ranked by its own count.
        p.handle_message(T, n(1), reply(stamp(4, 2), 4), &mut out);
        p.handle_message(T, n(3), reply(stamp(4, 2), 4), &mut out);
        assert_eq!(out.take(), vec![grant(4, 2)]);
        p.handle_release(T, &mut out);
        p.handle_request(T, &mut out);
        let next = Place { rank: 1, first: stamp(5, 2) };
        let r = RaMsg::Request { stamp: stamp(5, 2), place: next, mode: W };
        assert_eq!(out.take(), vec![send(1, r.clone()), send(3, r)]);
    }

    #[test]
    fn least_recent_ranks_by_the_time_of_the_last_entry() {
        let priority = Priority::LeastRecent;
        let mut p = node_with(1, 2, MutexOptions { priority, ..MutexOptions::default() });
        let mut out = Out::<RicartAgrawala>::new();
        p.observe_watermark(6);
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(2, request(7, 1))], "never served: rank 0");
        p.handle_message(T, n(2), reply(stamp(7, 1), 7), &mut out);
        p.handle_release(T, &mut out);
        out.take();
        p.handle_request(T, &mut out);
        let r = RaMsg::Request {
            stamp: stamp(8, 1),
            place: Place { rank: 7, first: stamp(8, 1) },
            mode: W,
        };
        assert_eq!(out.take(), vec![send(2, r)]);
        assert_eq!(p.request_stamp(), None, "order by place, not by stamp");
    }
}
