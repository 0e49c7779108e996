//! # `bakery` — Lamport's bakery, every node serving its own slot
//!
//! **Source.** Lamport's bakery algorithm (1974) as reviewed in Jones's lecture notes (22C:116, Iowa, 2002),
//! with the seed's "moving to a distributed context": each node keeps its
//! own `choosing` flag and ticket `number` and answers the other nodes'
//! reads of them; a node that does not answer is taken for failed.
//!
//! **Assumptions.** Reliable links while both ends are up (safety does
//! not rest on FIFO order: every answer names the read it answers);
//! crashes reported by the failure detector, a restarted node having lost
//! all its state but the engine's stored watermark (below); no partitions (a peer wrongly suspected is no longer
//! read, so both sides could enter). A READ that stays unanswered for a
//! failure timeout is sent again, in case a frame was lost on a link that
//! came back before the detector noticed.
//!
//! **Messages per entry.** 4(N-1), at light load and under contention
//! alike. The seed counts three reads of every peer, about 6N messages:
//! one to pick a ticket, one to wait while the peer is choosing, one to
//! wait while it holds a smaller ticket. Here the last two are one READ,
//! since the VALUE that answers it carries both the flag and the number;
//! and rather than being polled until it lets the reader through, the peer
//! *holds its answer* until its own state lets the reader pass (it is done
//! choosing, and it is idle or holds a larger ticket), exactly like a
//! deferred reply in `ricart-agrawala`. So each peer costs a doorway READ
//! and VALUE plus a check READ and VALUE, however long the wait. Polling
//! instead would add two messages per peer per retry period for as long
//! as the wait lasts, which under contention grows with the queue ahead.
//! Synchronisation delay: 1 message delay (the held VALUE) when the next
//! node already holds its ticket; up to two round trips (doorway and
//! check) when it is still choosing, which with few nodes and short holds
//! is common (about 2 delays measured at N = 3, 1 from N = 7 on). Extra
//! messages come only with faults: a retried READ, the reads of a peer
//! that comes up, and a new doorway when a request was overtaken (below).
//! One exception: a wait longer than the retry period (a failure timeout)
//! sends each still-held READ once more per period, its answer still
//! single; with the simulator's holds that takes a queue far beyond N = 7.
//!
//! **State walk.** An *idle* node answers every READ at once with
//! `choosing = false`, `number = 0`. Asked for the critical section it
//! enters the *doorway*: `choosing` is raised and it sends a doorway READ
//! to every live peer; doorway READs are always answered at once, with the
//! peer's number and high-water mark (below). With every answer in (or
//! the peer reported down) the node takes the ticket (high-water mark + 1,
//! node id), lowers `choosing`, answers the check READs it held while
//! choosing that now come first, and is *waiting*: it sends a check READ,
//! carrying the ticket, to every live peer. A peer answers a check READ
//! once the reader may pass it: at once when it is idle or waits with a
//! larger ticket, otherwise when it has chosen a larger ticket or left.
//! With every check answered the node *holds*; leaving, it answers every
//! held READ and is idle again.
//!
//! **Fences.** The ticket, number in the high bits and node id in the low
//! bits. Entries happen in ticket order, as in the shared-memory bakery;
//! but a node that reads an idle peer sees number 0, so tickets alone would
//! start over at 1 once the queue empties. Every node therefore keeps a
//! *high-water mark*, the largest ticket number it has seen (its own, those
//! in check READs, those in VALUEs and heartbeat watermarks), and a new
//! ticket is one above the largest mark it read in the doorway. Since a
//! check READ carries the final ticket and a node enters only once every
//! live peer has answered one, every live peer has recorded the ticket
//! before the grant: a crash of the holder right after it entered loses
//! one copy of it, never the only one. A newcomer catches up from the
//! heartbeats' watermarks before it first asks, and from the marks in the
//! VALUEs of its own doorway. A node that enters while every peer is down
//! holds the only copy; should it crash then, its own stable storage keeps
//! it: the watermark (`high`) is this algorithm's, and the engine stores a
//! reserve above it, so the node restarts with tickets above its old one.
//! Without stable storage (a node run without a state directory) nothing
//! remembers that ticket, and the same goes for the Lamport clocks of
//! `ricart-agrawala` and `lamport`; the simulator meets the gap only when
//! every node of the cluster crashes in turn.
//!
//! **Crashes and newcomers.** A peer reported down is no longer awaited,
//! and a READ it left held here is dropped. A peer that comes up (or
//! restarts, with number 0 and everything forgotten) while this node is in
//! the doorway or waiting is read too, with the kind of READ the phase
//! needs, and its answer awaited: it may have a ticket this node has not
//! seen. A peer that comes up while this node holds the critical section
//! is sent a check READ too, its answer not awaited, so that it records
//! the ticket: otherwise a holder that crashes right after a restarted
//! peer came up could take the only copy with it. One node can still miss
//! another, if each thought the other down when it read: a node may then
//! enter ahead of an older ticket it never read. When such a holder
//! leaves, the answers it held name its entry's ticket; a reader whose own
//! ticket is smaller was overtaken, and goes back through the doorway for
//! a ticket above it, so ticket order and entry order stay one.

use crate::algorithm::{AlgoConfig, Algorithm, MutexAlgorithm, Out};
use crate::outbox::{message_kinds, timers, Time};
use crate::types::{CsState, Fence, NodeId, Stamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The largest ticket number a fence can carry. A peer that reports a
/// larger one is talking nonsense and is ignored.
const MAX_NUMBER: u64 = u64::MAX >> Fence::MINOR_BITS;

/// The messages of [`Bakery`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum BakeryMsg {
    /// Tell me your `choosing` flag and your number.
    Read {
        /// Names this read; its VALUE echoes it.
        seq: u64,
        /// `None` for a doorway read, answered at once. `Some(n)` for a
        /// check read by a node holding ticket (n, sender): answered once
        /// the sender may pass the one it reads.
        ticket: Option<u64>,
        /// The reader's high-water mark.
        high: u64,
    },
    /// The answer to a READ.
    Value {
        /// The read answered.
        seq: u64,
        /// Whether the answerer is picking a ticket.
        choosing: bool,
        /// The answerer's ticket number, 0 when it has none.
        number: u64,
        /// The answerer's high-water mark: the largest ticket number it
        /// has seen.
        high: u64,
        /// For a check read held while the answerer entered: the ticket it
        /// entered with.
        after: Option<Stamp>,
    },
}

message_kinds!(BakeryMsg {
    Read => "read",
    Value => "value",
});

timers! {
    /// The timers of [`Bakery`].
    pub enum BakeryTimer {
        /// The one timer: re-sends READs left unanswered for a retry period.
        Retry,
    }
}

/// A READ sent and not answered yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Pending {
    /// The read's sequence number.
    seq: u64,
    /// When it was (last) sent, for the retry timer.
    sent_at: Time,
}

/// A check READ held back: its reader may not pass this node yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct HeldRead {
    /// The read's sequence number, echoed by the eventual VALUE.
    seq: u64,
    /// The reader's ticket.
    ticket: Stamp,
}

/// Where this node's request stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase {
    /// No request; number 0.
    Idle,
    /// `choosing` is up: reading every live peer's high-water mark.
    Doorway { awaiting: BTreeMap<NodeId, Pending> },
    /// Holding `ticket`, waiting until every live peer lets it pass.
    Waiting { ticket: Stamp, awaiting: BTreeMap<NodeId, Pending> },
    /// Inside the critical section with `ticket`.
    Held { ticket: Stamp },
}

impl Phase {
    fn ticket(&self) -> Option<Stamp> {
        match self {
            Phase::Waiting { ticket, .. } | Phase::Held { ticket } => Some(*ticket),
            Phase::Idle | Phase::Doorway { .. } => None,
        }
    }

    /// The READs outstanding, in the two phases that read.
    fn awaiting_mut(&mut self) -> Option<&mut BTreeMap<NodeId, Pending>> {
        match self {
            Phase::Doorway { awaiting } | Phase::Waiting { awaiting, .. } => Some(awaiting),
            Phase::Idle | Phase::Held { .. } => None,
        }
    }

    /// What a READ sent now carries: `None` outside the reading phases,
    /// `Some(None)` in the doorway, `Some(Some(number))` while waiting.
    fn read_kind(&self) -> Option<Option<u64>> {
        match self {
            Phase::Doorway { .. } => Some(None),
            Phase::Waiting { ticket, .. } => Some(Some(ticket.ts)),
            Phase::Idle | Phase::Held { .. } => None,
        }
    }
}

/// Lamport's bakery algorithm over messages; see the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct Bakery {
    id: NodeId,
    /// Every other member: messages from anyone else are ignored.
    peers: BTreeSet<NodeId>,
    /// Peers the failure detector counts as up.
    alive: BTreeSet<NodeId>,
    phase: Phase,
    /// The largest ticket number this node has seen anywhere.
    high: u64,
    /// Check READs not answered yet, by reader (one each: a newer READ
    /// from the same reader replaces its older one).
    held: BTreeMap<NodeId, HeldRead>,
    /// The next READ's sequence number. It starts at the incarnation, so
    /// a late answer to an earlier run of this node is unlikely to match.
    next_seq: u64,
    /// How long a READ may go unanswered before it is sent again.
    retry: Duration,
    /// Whether the retry timer is armed.
    retry_armed: bool,
}

impl Bakery {
    /// A node with nobody known to be up yet.
    pub fn new(cfg: &AlgoConfig) -> Self {
        Bakery {
            id: cfg.id,
            peers: cfg.peers().collect(),
            alive: BTreeSet::new(),
            phase: Phase::Idle,
            high: 0,
            held: BTreeMap::new(),
            next_seq: cfg.incarnation,
            retry: cfg.timing.failure_timeout,
            retry_armed: false,
        }
    }

    /// Whether a reader holding `theirs` may pass this node now.
    fn lets_pass(&self, theirs: Stamp) -> bool {
        match &self.phase {
            Phase::Idle => true,
            Phase::Doorway { .. } | Phase::Held { .. } => false,
            Phase::Waiting { ticket, .. } => theirs < *ticket,
        }
    }

    fn observe(&mut self, number: u64) {
        if number <= MAX_NUMBER {
            self.high = self.high.max(number);
        }
    }

    /// Answers READ `seq` from `to` with this node's current state.
    fn answer(&self, to: NodeId, seq: u64, after: Option<Stamp>, out: &mut Out<Bakery>) {
        let choosing = matches!(self.phase, Phase::Doorway { .. });
        let number = self.phase.ticket().map_or(0, |t| t.ts);
        out.send(to, BakeryMsg::Value { seq, choosing, number, high: self.high, after });
    }

    /// Answers every held READ whose reader may now pass.
    fn release_held(&mut self, after: Option<Stamp>, out: &mut Out<Bakery>) {
        let passing: Vec<(NodeId, u64)> = self
            .held
            .iter()
            .filter(|(_, h)| self.lets_pass(h.ticket))
            .map(|(&reader, h)| (reader, h.seq))
            .collect();
        for (reader, seq) in passing {
            self.held.remove(&reader);
            self.answer(reader, seq, after, out);
        }
    }

    /// Sends a fresh READ to `to`.
    fn send_read(
        &mut self,
        now: Time,
        to: NodeId,
        ticket: Option<u64>,
        out: &mut Out<Bakery>,
    ) -> Pending {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        out.send(to, BakeryMsg::Read { seq, ticket, high: self.high });
        Pending { seq, sent_at: now }
    }

    /// Arms the retry timer, unless it already is: a READ just sent will
    /// be due no earlier than any deadline already set, and the timer
    /// re-arms itself for whatever is still outstanding when it fires.
    fn arm_retry(&mut self, now: Time, out: &mut Out<Bakery>) {
        if !self.retry_armed {
            self.retry_armed = true;
            out.set_timer(BakeryTimer::Retry, now + self.retry);
        }
    }

    /// Sends a READ to every live peer.
    fn read_all(
        &mut self,
        now: Time,
        ticket: Option<u64>,
        out: &mut Out<Bakery>,
    ) -> BTreeMap<NodeId, Pending> {
        let peers: Vec<NodeId> = self.alive.iter().copied().collect();
        let reads: BTreeMap<NodeId, Pending> =
            peers.into_iter().map(|p| (p, self.send_read(now, p, ticket, out))).collect();
        if !reads.is_empty() {
            self.arm_retry(now, out);
        }
        reads
    }

    /// Raises `choosing` and reads every live peer.
    fn enter_doorway(&mut self, now: Time, out: &mut Out<Bakery>) {
        let awaiting = self.read_all(now, None, out);
        self.phase = Phase::Doorway { awaiting };
        self.progress(now, out);
    }

    /// Takes a ticket above everything seen, lowers `choosing`, and starts
    /// checking every live peer.
    fn choose(&mut self, now: Time, out: &mut Out<Bakery>) {
        let number = self.high.saturating_add(1).min(MAX_NUMBER);
        self.high = number;
        let ticket = Stamp { ts: number, node: self.id };
        self.phase = Phase::Waiting { ticket, awaiting: BTreeMap::new() };
        // Readers held while this node was choosing, with smaller tickets.
        self.release_held(None, out);
        let reads = self.read_all(now, Some(number), out);
        if let Phase::Waiting { awaiting, .. } = &mut self.phase {
            *awaiting = reads;
        }
    }

    /// Moves on when the current phase has nothing left to wait for.
    fn progress(&mut self, now: Time, out: &mut Out<Bakery>) {
        if matches!(&self.phase, Phase::Doorway { awaiting } if awaiting.is_empty()) {
            self.choose(now, out);
        }
        if let Phase::Waiting { ticket, awaiting } = &self.phase {
            if awaiting.is_empty() {
                let ticket = *ticket;
                self.phase = Phase::Held { ticket };
                out.grant(Fence::from(ticket));
            }
        }
    }

    fn on_read(
        &mut self,
        from: NodeId,
        seq: u64,
        ticket: Option<u64>,
        high: u64,
        out: &mut Out<Bakery>,
    ) {
        if high > MAX_NUMBER || ticket.is_some_and(|n| n == 0 || n > MAX_NUMBER) {
            return;
        }
        self.observe(high);
        // A new READ supersedes whatever the reader asked before.
        self.held.remove(&from);
        let Some(number) = ticket else {
            return self.answer(from, seq, None, out);
        };
        self.observe(number);
        let theirs = Stamp { ts: number, node: from };
        if self.lets_pass(theirs) {
            self.answer(from, seq, None, out);
        } else {
            self.held.insert(from, HeldRead { seq, ticket: theirs });
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_value(
        &mut self,
        now: Time,
        from: NodeId,
        seq: u64,
        choosing: bool,
        number: u64,
        high: u64,
        after: Option<Stamp>,
        out: &mut Out<Bakery>,
    ) {
        if number > MAX_NUMBER || high > MAX_NUMBER || after.is_some_and(|a| a.ts > MAX_NUMBER) {
            return;
        }
        self.observe(high);
        self.observe(number);
        let ticket = self.phase.ticket();
        let Some(awaiting) = self.phase.awaiting_mut() else {
            return;
        };
        if awaiting.get(&from).is_none_or(|p| p.seq != seq) {
            return; // answers a read this node no longer makes
        }
        if let Some(mine) = ticket {
            if after.is_some_and(|entered| entered > mine) {
                // Overtaken by an entry that never read this node: go
                // back through the doorway for a ticket above it.
                return self.enter_doorway(now, out);
            }
            let theirs = Stamp { ts: number, node: from };
            if choosing || (number != 0 && theirs < mine) {
                // The peer answered before this node may pass it: leave
                // the read pending, and the retry timer polls again.
                return;
            }
        }
        awaiting.remove(&from);
        self.progress(now, out);
    }
}

impl Algorithm for Bakery {
    type Msg = BakeryMsg;
    type Timer = BakeryTimer;

    fn handle_message(&mut self, now: Time, from: NodeId, msg: BakeryMsg, out: &mut Out<Bakery>) {
        if !self.peers.contains(&from) {
            return; // not a peer (or this node itself)
        }
        match msg {
            BakeryMsg::Read { seq, ticket, high } => self.on_read(from, seq, ticket, high, out),
            BakeryMsg::Value { seq, choosing, number, high, after } => {
                self.on_value(now, from, seq, choosing, number, high, after, out)
            }
        }
    }

    fn handle_timer(&mut self, now: Time, timer: BakeryTimer, out: &mut Out<Bakery>) {
        if timer != BakeryTimer::Retry {
            return;
        }
        self.retry_armed = false;
        let Some(ticket) = self.phase.read_kind() else {
            return;
        };
        let (retry, high) = (self.retry, self.high);
        let Some(awaiting) = self.phase.awaiting_mut() else {
            return;
        };
        for (&peer, pending) in awaiting.iter_mut() {
            if pending.sent_at + retry <= now {
                out.send(peer, BakeryMsg::Read { seq: pending.seq, ticket, high });
                pending.sent_at = now;
            }
        }
        if let Some(earliest) = awaiting.values().map(|p| p.sent_at).min() {
            self.retry_armed = true;
            out.set_timer(BakeryTimer::Retry, earliest + retry);
        }
    }

    fn handle_peer_up(&mut self, now: Time, peer: NodeId, out: &mut Out<Bakery>) {
        if !self.peers.contains(&peer) {
            return;
        }
        self.alive.insert(peer);
        if let Phase::Held { ticket } = self.phase {
            // The newcomer must hold a copy of the entry's ticket too, in
            // case this node crashes before its next heartbeat: a check
            // READ carries it. Its answer is not needed.
            self.send_read(now, peer, Some(ticket.ts), out);
            return;
        }
        let Some(ticket) = self.phase.read_kind() else {
            return;
        };
        let pending = self.send_read(now, peer, ticket, out);
        self.arm_retry(now, out);
        if let Some(awaiting) = self.phase.awaiting_mut() {
            awaiting.insert(peer, pending);
        }
    }

    fn handle_peer_down(&mut self, now: Time, peer: NodeId, out: &mut Out<Bakery>) {
        self.alive.remove(&peer);
        self.held.remove(&peer);
        if let Some(awaiting) = self.phase.awaiting_mut() {
            awaiting.remove(&peer);
        }
        self.progress(now, out);
    }

    /// The state with each unanswered READ's sending time as its age.
    fn hash_at(&self, h: &mut dyn std::hash::Hasher, now: Time) {
        let mut aged = self.clone();
        for pending in aged.phase.awaiting_mut().into_iter().flat_map(|a| a.values_mut()) {
            pending.sent_at = now.saturating_sub(pending.sent_at);
        }
        let mut h = h;
        std::hash::Hash::hash(&aged, &mut h);
    }
}

impl MutexAlgorithm for Bakery {
    /// Idle (number 0), holding no reader's answer back, no retry due: its
    /// high-water mark is the watermark the node's floor keeps.
    fn forgettable(&self) -> bool {
        matches!(self.phase, Phase::Idle) && self.held.is_empty() && !self.retry_armed
    }

    fn handle_request(&mut self, now: Time, out: &mut Out<Bakery>) {
        if self.phase == Phase::Idle {
            self.enter_doorway(now, out);
        }
    }

    fn handle_release(&mut self, _now: Time, out: &mut Out<Bakery>) {
        let Phase::Held { ticket } = self.phase else {
            return;
        };
        self.phase = Phase::Idle;
        self.release_held(Some(ticket), out);
    }

    fn cs_state(&self) -> CsState {
        match self.phase {
            Phase::Idle => CsState::Idle,
            Phase::Doorway { .. } | Phase::Waiting { .. } => CsState::Wanting,
            Phase::Held { .. } => CsState::Held,
        }
    }

    fn request_stamp(&self) -> Option<Stamp> {
        self.phase.ticket()
    }

    fn watermark(&self) -> u64 {
        self.high
    }

    fn observe_watermark(&mut self, watermark: u64) {
        self.observe(watermark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::Action;
    use crate::testkit::*;

    const RETRY_AT: Duration = Duration::from_millis(250);

    fn node(id: u32, members: u32) -> Bakery {
        let cfg = AlgoConfig::for_test(id, members);
        let mut b = Bakery::new(&cfg);
        let mut out = Out::<Bakery>::new();
        for p in cfg.peers() {
            b.handle_peer_up(T, p, &mut out);
        }
        assert!(out.is_empty(), "an idle node reads nobody");
        b
    }

    fn doorway(seq: u64, high: u64) -> BakeryMsg {
        BakeryMsg::Read { seq, ticket: None, high }
    }

    fn check(seq: u64, number: u64) -> BakeryMsg {
        BakeryMsg::Read { seq, ticket: Some(number), high: number }
    }

    fn value(seq: u64, choosing: bool, number: u64, high: u64) -> BakeryMsg {
        BakeryMsg::Value { seq, choosing, number, high, after: None }
    }

    fn grant(number: u64, id: u32) -> Action<BakeryMsg, BakeryTimer> {
        Action::Grant { fence: Fence::new(number, u64::from(id)) }
    }

    fn retry_timer() -> Action<BakeryMsg, BakeryTimer> {
        Action::SetTimer { timer: BakeryTimer::Retry, at: RETRY_AT }
    }

    #[test]
    fn uncontended_entry_reads_every_peer_twice() {
        let (mut p1, mut p2, mut p3) = (node(1, 3), node(2, 3), node(3, 3));
        let (mut o1, mut o2, mut o3) =
            (Out::<Bakery>::new(), Out::<Bakery>::new(), Out::<Bakery>::new());

        // Doorway: choosing goes up, every peer is read.
        p1.handle_request(T, &mut o1);
        assert_eq!(o1.take(), vec![send(2, doorway(0, 0)), send(3, doorway(1, 0)), retry_timer()]);
        assert_eq!(p1.cs_state(), CsState::Wanting);
        assert_eq!(p1.request_stamp(), None, "no ticket while choosing");

        // Idle peers answer at once: not choosing, number 0.
        p2.handle_message(T, n(1), doorway(0, 0), &mut o2);
        assert_eq!(o2.take(), vec![send(1, value(0, false, 0, 0))]);
        p3.handle_message(T, n(1), doorway(1, 0), &mut o3);
        assert_eq!(o3.take(), vec![send(1, value(1, false, 0, 0))]);

        // Both answers in: ticket (1, n1), then the check reads carry it.
        p1.handle_message(T, n(2), value(0, false, 0, 0), &mut o1);
        assert!(o1.is_empty());
        p1.handle_message(T, n(3), value(1, false, 0, 0), &mut o1);
        assert_eq!(o1.take(), vec![send(2, check(2, 1)), send(3, check(3, 1))]);
        assert_eq!(p1.request_stamp(), Some(stamp(1, 1)));

        // Idle peers let it pass at once, and remember the ticket.
        p2.handle_message(T, n(1), check(2, 1), &mut o2);
        assert_eq!(o2.take(), vec![send(1, value(2, false, 0, 1))]);
        assert_eq!(p2.watermark(), 1);
        p3.handle_message(T, n(1), check(3, 1), &mut o3);
        assert_eq!(o3.take(), vec![send(1, value(3, false, 0, 1))]);

        p1.handle_message(T, n(2), value(2, false, 0, 1), &mut o1);
        assert!(o1.is_empty());
        p1.handle_message(T, n(3), value(3, false, 0, 1), &mut o1);
        assert_eq!(o1.take(), vec![grant(1, 1)]);
        assert_eq!(p1.cs_state(), CsState::Held);

        // Nobody was held back, so leaving sends nothing.
        p1.handle_release(T, &mut o1);
        assert!(o1.is_empty());
        assert_eq!(p1.cs_state(), CsState::Idle);
    }

    /// Nodes 1 and 2 walk in together and both draw number 1; the tie goes
    /// to the smaller id. Node 2's check read waits at node 1 until it
    /// leaves.
    #[test]
    fn tied_tickets_go_to_the_smaller_id_first() {
        let (mut p1, mut p2) = (node(1, 3), node(2, 3));
        let (mut o1, mut o2) = (Out::<Bakery>::new(), Out::<Bakery>::new());
        p1.handle_request(T, &mut o1);
        p2.handle_request(T, &mut o2);
        o1.take();
        o2.take();

        // Each reads the other while both are choosing.
        p1.handle_message(T, n(2), doorway(0, 0), &mut o1);
        assert_eq!(o1.take(), vec![send(2, value(0, true, 0, 0))]);
        p2.handle_message(T, n(1), doorway(0, 0), &mut o2);
        assert_eq!(o2.take(), vec![send(1, value(0, true, 0, 0))]);

        for (p, o) in [(&mut p1, &mut o1), (&mut p2, &mut o2)] {
            let other = if p.id == n(1) { 2 } else { 1 };
            p.handle_message(T, n(other), value(0, true, 0, 0), o);
            p.handle_message(T, n(3), value(1, false, 0, 0), o);
        }
        let id1 = o1.take();
        let id2 = o2.take();
        assert_eq!(id1, vec![send(2, check(2, 1)), send(3, check(3, 1))]);
        assert_eq!(id2, vec![send(1, check(2, 1)), send(3, check(3, 1))]);

        // (1, n1) < (1, n2): node 2 lets node 1 pass, node 1 holds node 2.
        p2.handle_message(T, n(1), check(2, 1), &mut o2);
        assert_eq!(o2.take(), vec![send(1, value(2, false, 1, 1))]);
        p1.handle_message(T, n(2), check(2, 1), &mut o1);
        assert!(o1.is_empty(), "node 1 holds its answer to node 2");

        // Node 3 is idle and lets both pass.
        p1.handle_message(T, n(3), value(3, false, 0, 1), &mut o1);
        p1.handle_message(T, n(2), value(2, false, 1, 1), &mut o1);
        assert_eq!(o1.take(), vec![grant(1, 1)]);
        p2.handle_message(T, n(3), value(3, false, 0, 1), &mut o2);
        assert!(o2.is_empty());
        assert_eq!(p2.cs_state(), CsState::Wanting);

        // Node 1 leaves and releases the held answer, naming its entry.
        p1.handle_release(T, &mut o1);
        let released = BakeryMsg::Value {
            seq: 2,
            choosing: false,
            number: 0,
            high: 1,
            after: Some(stamp(1, 1)),
        };
        assert_eq!(o1.take(), vec![send(2, released.clone())]);
        p2.handle_message(T, n(1), released, &mut o2);
        assert_eq!(o2.take(), vec![grant(1, 2)]);
        assert!(Fence::new(1, 2) > Fence::new(1, 1));
    }

    #[test]
    fn a_check_read_waits_while_the_peer_is_choosing() {
        let mut p2 = node(2, 2);
        let mut out = Out::<Bakery>::new();
        p2.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(1, doorway(0, 0)), retry_timer()]);

        // Node 1 already holds ticket 1 and checks node 2, still choosing.
        p2.handle_message(T, n(1), check(0, 1), &mut out);
        assert!(out.is_empty(), "held while choosing");

        // Node 1's answer to the doorway read shows its ticket: node 2
        // draws 2, lets node 1 through, then checks it.
        p2.handle_message(T, n(1), value(0, false, 1, 1), &mut out);
        assert_eq!(out.take(), vec![send(1, value(0, false, 2, 2)), send(1, check(1, 2))]);
        // Node 1 holds that read until it leaves.
        let released = BakeryMsg::Value {
            seq: 1,
            choosing: false,
            number: 0,
            high: 2,
            after: Some(stamp(1, 1)),
        };
        p2.handle_message(T, n(1), released, &mut out);
        assert_eq!(out.take(), vec![grant(2, 2)]);
    }

    #[test]
    fn holder_holds_every_check_read_until_it_leaves() {
        let mut p = node(1, 2);
        let mut out = Out::<Bakery>::new();
        p.handle_request(T, &mut out);
        p.handle_message(T, n(2), value(0, false, 0, 0), &mut out);
        p.handle_message(T, n(2), value(1, false, 0, 1), &mut out);
        assert_eq!(out.take().last(), Some(&grant(1, 1)));

        // Even a smaller ticket waits while the critical section is held;
        // a doorway read is answered at once, with the ticket.
        p.handle_message(T, n(2), BakeryMsg::Read { seq: 9, ticket: Some(1), high: 1 }, &mut out);
        assert!(out.is_empty());
        p.handle_message(T, n(2), doorway(10, 0), &mut out);
        assert_eq!(out.take(), vec![send(2, value(10, false, 1, 1))]);
        // That doorway read replaced the held check read: nothing is owed.
        p.handle_release(T, &mut out);
        assert!(out.is_empty());
    }

    /// The previous holder is idle again and reads as number 0, but its
    /// high-water mark keeps the next ticket above its own.
    #[test]
    fn next_ticket_is_above_an_earlier_holders_even_when_it_left() {
        let mut p = node(2, 3);
        let mut out = Out::<Bakery>::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(1), value(0, false, 0, 7), &mut out);
        p.handle_message(T, n(3), value(1, false, 0, 3), &mut out);
        assert_eq!(out.take(), vec![send(1, check(2, 8)), send(3, check(3, 8))]);
        assert_eq!(p.request_stamp(), Some(stamp(8, 2)));
    }

    #[test]
    fn crashed_peer_is_no_longer_awaited() {
        let mut p = node(1, 3);
        let mut out = Out::<Bakery>::new();
        p.handle_request(T, &mut out);
        out.take();
        // Node 3 never answers the doorway read: reported down, skipped.
        p.handle_message(T, n(2), value(0, false, 0, 0), &mut out);
        assert!(out.is_empty());
        p.handle_peer_down(T, n(3), &mut out);
        assert_eq!(out.take(), vec![send(2, check(2, 1))]);
        p.handle_message(T, n(2), value(2, false, 0, 1), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
    }

    #[test]
    fn crashed_peer_is_skipped_while_waiting_and_its_held_read_dropped() {
        let mut p = node(1, 3);
        let mut out = Out::<Bakery>::new();
        p.handle_request(T, &mut out);
        p.handle_message(T, n(2), value(0, false, 0, 0), &mut out);
        p.handle_message(T, n(3), value(1, false, 0, 0), &mut out);
        out.take();
        // Node 3 checks with a larger ticket (held), then crashes.
        p.handle_message(T, n(3), check(7, 4), &mut out);
        p.handle_message(T, n(2), value(2, false, 0, 1), &mut out);
        assert!(out.is_empty());
        p.handle_peer_down(T, n(3), &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
        p.handle_release(T, &mut out);
        assert!(out.is_empty(), "nothing owed to a crashed reader");
    }

    #[test]
    fn newcomer_is_read_in_the_doorway_and_while_waiting() {
        let mut p = node(1, 3);
        let mut out = Out::<Bakery>::new();
        p.handle_peer_down(T, n(3), &mut out);
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![send(2, doorway(0, 0)), retry_timer()]);

        // Node 3 comes up during the doorway: it is read as well.
        p.handle_peer_up(T, n(3), &mut out);
        assert_eq!(out.take(), vec![send(3, doorway(1, 0))]);
        p.handle_message(T, n(2), value(0, false, 0, 0), &mut out);
        assert!(out.is_empty(), "the newcomer's number is awaited too");
        p.handle_message(T, n(3), value(1, false, 0, 4), &mut out);
        assert_eq!(out.take(), vec![send(2, check(2, 5)), send(3, check(3, 5))]);

        // Node 2 restarts while node 1 waits: down, then up, read again.
        p.handle_peer_down(T, n(2), &mut out);
        p.handle_peer_up(T, n(2), &mut out);
        assert_eq!(out.take(), vec![send(2, check(4, 5))]);
        p.handle_message(T, n(3), value(3, false, 0, 5), &mut out);
        // The answer to the read lost in the crash no longer counts.
        p.handle_message(T, n(2), value(2, false, 0, 5), &mut out);
        assert!(out.is_empty());
        p.handle_message(T, n(2), value(4, false, 0, 5), &mut out);
        assert_eq!(out.take(), vec![grant(5, 1)]);
    }

    #[test]
    fn newcomer_learns_the_ticket_of_an_entry_under_way() {
        let mut p = node(1, 3);
        let mut out = Out::<Bakery>::new();
        p.handle_peer_down(T, n(3), &mut out);
        p.handle_request(T, &mut out);
        p.handle_message(T, n(2), value(0, false, 0, 0), &mut out);
        p.handle_message(T, n(2), value(1, false, 0, 1), &mut out);
        assert_eq!(out.take().last(), Some(&grant(1, 1)));

        // Node 3 restarts while node 1 holds: it is told the ticket.
        p.handle_peer_up(T, n(3), &mut out);
        assert_eq!(out.take(), vec![send(3, check(2, 1))]);
        let mut p3 = node(3, 3);
        p3.handle_message(T, n(1), check(2, 1), &mut out);
        assert_eq!(out.take(), vec![send(1, value(2, false, 0, 1))]);
        assert_eq!(p3.watermark(), 1);
        // The answer is not needed and changes nothing.
        p.handle_message(T, n(3), value(2, false, 0, 1), &mut out);
        assert!(out.is_empty());
        assert_eq!(p.cs_state(), CsState::Held);
    }

    #[test]
    fn overtaken_request_goes_back_through_the_doorway() {
        // Node 2 holds ticket (3, 2); node 3 entered with (9, 3) without
        // having read it, and names that entry when it answers.
        let mut p = node(2, 3);
        let mut out = Out::<Bakery>::new();
        p.handle_request(T, &mut out);
        p.handle_message(T, n(1), value(0, false, 0, 2), &mut out);
        p.handle_message(T, n(3), value(1, false, 0, 0), &mut out);
        out.take();
        assert_eq!(p.request_stamp(), Some(stamp(3, 2)));
        p.handle_message(T, n(1), value(2, false, 0, 3), &mut out);
        let overtaken = BakeryMsg::Value {
            seq: 3,
            choosing: false,
            number: 0,
            high: 9,
            after: Some(stamp(9, 3)),
        };
        p.handle_message(T, n(3), overtaken, &mut out);
        assert_eq!(out.take(), vec![send(1, doorway(4, 9)), send(3, doorway(5, 9))]);
        assert_eq!(p.request_stamp(), None);
        p.handle_message(T, n(1), value(4, false, 0, 9), &mut out);
        p.handle_message(T, n(3), value(5, false, 0, 9), &mut out);
        assert_eq!(out.take(), vec![send(1, check(6, 10)), send(3, check(7, 10))]);
    }

    #[test]
    fn unanswered_reads_are_sent_again_on_the_timer() {
        let mut p = node(1, 3);
        let mut out = Out::<Bakery>::new();
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), value(0, false, 0, 0), &mut out);
        p.handle_timer(RETRY_AT, BakeryTimer::Retry, &mut out);
        let again = Action::SetTimer { timer: BakeryTimer::Retry, at: RETRY_AT * 2 };
        assert_eq!(out.take(), vec![send(3, doorway(1, 0)), again]);
        // A duplicate answer to the retried read counts once.
        let later = Duration::from_millis(300);
        p.handle_message(later, n(3), value(1, false, 0, 0), &mut out);
        assert_eq!(out.take(), vec![send(2, check(2, 1)), send(3, check(3, 1))]);
        p.handle_message(later, n(3), value(1, false, 0, 0), &mut out);
        assert!(out.is_empty());
        // A timer with nothing due only re-arms for the oldest read.
        p.handle_timer(RETRY_AT * 2, BakeryTimer::Retry, &mut out);
        assert_eq!(
            out.take(),
            vec![Action::SetTimer { timer: BakeryTimer::Retry, at: later + RETRY_AT }]
        );
    }

    #[test]
    fn lone_node_enters_at_once() {
        let mut p = node(1, 1);
        let mut out = Out::<Bakery>::new();
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![grant(1, 1)]);
        p.handle_release(T, &mut out);
        p.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![grant(2, 1)]);
    }

    #[test]
    fn nonsense_is_ignored() {
        let mut p = node(1, 3);
        let mut out = Out::<Bakery>::new();
        // From itself, from a stranger, with ticket 0 or an absurd number.
        p.handle_message(T, n(1), doorway(0, 0), &mut out);
        p.handle_message(T, n(9), doorway(0, 0), &mut out);
        p.handle_message(T, n(2), BakeryMsg::Read { seq: 0, ticket: Some(0), high: 0 }, &mut out);
        p.handle_message(T, n(2), doorway(0, u64::MAX), &mut out);
        p.handle_peer_up(T, n(1), &mut out);
        p.observe_watermark(u64::MAX);
        assert!(out.is_empty());
        assert_eq!(p.watermark(), 0);

        // Answers nobody asked for, or with absurd numbers.
        p.handle_message(T, n(2), value(0, false, 0, 0), &mut out);
        p.handle_request(T, &mut out);
        out.take();
        p.handle_message(T, n(2), value(5, false, 0, 0), &mut out);
        p.handle_message(T, n(2), value(0, false, u64::MAX, 0), &mut out);
        p.handle_message(T, n(3), value(1, false, 0, MAX_NUMBER + 1), &mut out);
        assert!(out.is_empty());
        assert_eq!(p.watermark(), 0);
        // An early answer (the peer still choosing) does not let it pass.
        p.handle_message(T, n(2), value(0, false, 0, 0), &mut out);
        p.handle_message(T, n(3), value(1, false, 0, 0), &mut out);
        out.take();
        p.handle_message(T, n(2), value(2, true, 0, 0), &mut out);
        p.handle_message(T, n(3), value(3, false, 0, 1), &mut out);
        assert!(out.is_empty());
        assert_eq!(p.cs_state(), CsState::Wanting);
    }
}
