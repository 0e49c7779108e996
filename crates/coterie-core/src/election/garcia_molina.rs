//! # `garcia-molina` — a four-phase election and a coordinator that checks
//!
//! **Source.** Garcia-Molina, "Elections in a distributed computing system"
//! (IEEE Trans. Computers, 1982): the election for a
//! *semi-synchronous* system, one where messages arrive within a known
//! deadline, so a node that has not answered in time can be taken for down.
//! Each node is in one of four states: DOWN (just recovered, in nobody's
//! group), ELECTION (halted by a candidate), REORGANIZATION (told who the new
//! coordinator is, waiting for its state) or NORMAL (working under a
//! coordinator). A candidate goes through four phases:
//!
//! 1. STATUS_POLL (are you there?) to every higher node. Any answer means a
//!    node with a better claim is alive: the candidate stops here.
//! 2. ELECTION, the HALT, to every lower node: each stops, remembers the
//!    candidate and answers. Those that answer are the group, ACTIVE.
//! 3. COORDINATOR to ACTIVE. If the answers are not all of ACTIVE, the
//!    group changed under the candidate's feet: start again from phase 1.
//! 4. NEW_STATE with the recovery information to ACTIVE; likewise.
//!
//! The coordinator then polls every node now and again and holds a new
//! election when one is not in its group or not NORMAL; a node that
//! recovers holds one straight away.
//!
//! **Recovery information.** In the seed, NEW_STATE hands the coordinator's
//! application state to the group. Here the mutex layer rebuilds its own
//! state whenever the coordinator changes (see `centralized.rs`: the new
//! coordinator's STATE_QUERY and each node's STATE_REPORT), so NEW_STATE
//! carries only the election's own state: the epoch (which names the
//! coordinator) and the members the coordinator saw answer. A node tells
//! its mutex layer about the new coordinator when NEW_STATE makes it
//! NORMAL; the coordinator tells its own as it sends NEW_STATE, so on every
//! link the NEW_STATE goes ahead of the mutex layer's first query. The seed
//! also has a halted node "stop processing"; here the mutex layer carries on
//! under the old coordinator until the new one is named, its epochs and
//! fences keeping the two apart.
//!
//! **Assumptions.** Reliable FIFO links while both ends are up; crash and
//! restart failures; the engine's failure detector, which reports every
//! crash within the failure timeout. The detector stands in for the seed's
//! deadlines (see *Deadlines*): a candidate asks only the nodes it
//! believes up, stops waiting for one as soon as it is reported down, and
//! asks again each failure timeout while it is not.
//!
//! **Messages per election.** When the highest live node elects, phase 1
//! costs nothing and each of phases 2–4 costs a message and its answer per
//! live lower node: 6(N−1) in all; after the coordinator's loss, 6(N−2)
//! (see *Failover*). A lower node that elects first costs two messages
//! (poll and answer) per live higher node before it stops. The
//! coordinator's check costs 2(N−1) messages every failure timeout.
//!
//! **Epochs.** A candidate proposes its epoch in the HALT: the round after
//! every round it has seen (every message and heartbeat carries epochs),
//! with its own id in the low bits. The same epoch tags its COORDINATOR,
//! NEW_STATE and every answer, so answers to an earlier attempt are
//! recognised and dropped, and each restart takes a new, larger epoch. The
//! epoch a node follows only grows: a HALT whose epoch is not newer, and a
//! COORDINATOR or NEW_STATE of a term the node has left, are refused with
//! the node's own, so the candidate retries above it. Epochs live in
//! memory only, as in the other elections: should every node that knew the
//! newest term restart before passing it on, the rounds start over.
//!
//! **Joining.** On joining, only a node with no live node above it
//! elects; any other *defers* at once, as if a higher node had answered
//! its poll, and elects only if no HALT comes in time. A cluster that
//! starts together then holds one election, the highest node's, instead
//! of every node polling every node above it (N²/2 polls and answers at
//! once: on 128 node processes on two cores that storm kept the nodes
//! from answering for more than 10 s in 2 of 5 starts). A node that
//! rejoins a settled group waits twice the failure timeout before its
//! election, unless the coordinator's check halts it first.
//!
//! **Failover.** In the seed every node that loses its coordinator holds
//! an election, and every one polls every node above it: N²/2 polls and
//! answers, all to elect the highest live node. Here the rule of *Joining*
//! holds after a loss too: only the highest live node (by this node's
//! detector) elects, and any other defers, electing only if no HALT comes
//! in time. The same holds when a participant loses its candidate.
//!
//! **Deadlines: the detector's, not a clock's.** In the seed a node that
//! has not answered by the phase's deadline is down: silence in phase 1
//! lets the candidate go on, in phase 2 it leaves the silent node out of
//! the group, and in phases 3 and 4 it starts the election again. Here
//! only the failure detector takes a node for down. When a phase's
//! deadline passes, the candidate asks again the nodes it still waits for
//! (each answers a repeat as it did the first), and it stops waiting for
//! one the moment the detector reports it down: phase 1 or 2 goes on
//! without it (a node lost after answering the HALT leaves the group),
//! while in phases 3 and 4 the group has changed and the election starts
//! again. Two clocks judging one node disagree under load: on 128 node
//! processes on two cores, lower nodes slowed by the election's own burst
//! answered the HALT late and were left out, the coordinator's first
//! check found them outside its group and elected again, and a kill cost
//! up to three rounds.
//!
//! **State walk.** A node starts DOWN. Whenever it joins or loses its
//! coordinator or candidate with no live node above it, or waits too long
//! as a participant or deferred, it holds an election (a node below a
//! live one defers instead: see *Joining* and *Failover*): phase 1 polls
//! the live higher nodes. An answer from one *defers* the node: it waits
//! (twice the failure timeout) for a higher candidate's HALT, and elects
//! again if none comes while it is not NORMAL under a live coordinator.
//! Every higher node reported down (or none up): phases 2–4, the
//! candidate itself in ELECTION, then REORGANIZATION as it sends
//! NEW_STATE, then NORMAL once every member has answered. A participant
//! walks ELECTION (on HALT) → REORGANIZATION (on COORDINATOR from its
//! candidate) → NORMAL (on NEW_STATE from it), answering each; if its
//! candidate goes quiet, it elects, and if the candidate is reported
//! down, it elects or defers as on a lost coordinator.
//!
//! **Concurrent candidates.** A node accepts a HALT only from a higher
//! node, so it only ever follows a coordinator at least as high as itself.
//! A HALT from a lower node is refused (with the refuser's state, so the
//! lower candidate defers), and a node already halted by a live candidate
//! higher than the new one refuses it too. A COORDINATOR or NEW_STATE not
//! from the node's own candidate is refused. A candidate refused by a node
//! that is, or follows, a higher one defers; refused for an epoch, it
//! starts again with a newer one. A candidate halted by a higher one drops
//! its own attempt.
//!
//! **Catching up.** Besides the periodic check, the coordinator checks a
//! peer the moment it comes up, and elects when a lower node halts or
//! polls it from outside its group. A candidate that hears of nodes its
//! attempt will not reach (they came up or polled it meanwhile) checks
//! everyone once it is NORMAL. A NORMAL node whose peers' heartbeats name
//! a newer term than its own missed that election and holds one, which the
//! newer coordinator answers by integrating it.

use crate::algorithm::{AlgoConfig, Algorithm, ElectionAlgorithm, Out};
use crate::outbox::{message_kinds, timers, Time};
use crate::types::{Epoch, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;

/// A node's state, with the seed's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum State {
    /// Recovered (or just started) and in no group yet.
    Down,
    /// Halted by a candidate (possibly itself), waiting for its COORDINATOR.
    Election,
    /// Told who the coordinator is, waiting for its NEW_STATE.
    Reorganization,
    /// Working under a coordinator.
    Normal,
}

/// What a node says of itself when it polls, answers a poll or refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct View {
    /// Its state.
    pub state: State,
    /// The epoch the state refers to: the candidate's proposal in
    /// ELECTION, the coordinator's epoch in REORGANIZATION and NORMAL (the
    /// low bits name that node); zero when DOWN.
    pub epoch: Epoch,
}

impl View {
    /// The candidate or coordinator the node stands by, if any.
    fn leader(self) -> Option<NodeId> {
        (self.state != State::Down).then(|| self.epoch.leader())
    }
}

/// Which message of a candidate an [`GarciaMolinaMsg::Ack`] answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum Stage {
    /// Phase 2's ELECTION (the HALT).
    Halt,
    /// Phase 3's COORDINATOR.
    Coordinator,
    /// Phase 4's NEW_STATE.
    NewState,
}

/// The messages of [`GarciaMolina`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum GarciaMolinaMsg {
    /// Are you there, and how are you? Phase 1 of an election (to the
    /// higher nodes) and the coordinator's check (to everyone).
    StatusPoll {
        /// The sender's highest epoch seen.
        seen: Epoch,
        /// The sender's own state.
        view: View,
    },
    /// The answer to a [`StatusPoll`](GarciaMolinaMsg::StatusPoll).
    Status {
        /// The sender's highest epoch seen.
        seen: Epoch,
        /// The sender's state.
        view: View,
    },
    /// Phase 2, the HALT: stop, I am electing myself for `epoch`.
    Election {
        /// The epoch the candidate will take if it wins (names it).
        epoch: Epoch,
    },
    /// Phase 3: I am your coordinator for `epoch`.
    Coordinator {
        /// The epoch of the HALT this follows.
        epoch: Epoch,
    },
    /// Phase 4: the recovery information; resume work under me.
    NewState {
        /// The new term; its low bits name the coordinator.
        epoch: Epoch,
        /// The group: the coordinator and every node that answered its
        /// HALT, ascending.
        members: Vec<NodeId>,
    },
    /// Yes to a candidate's message of `epoch`.
    Ack {
        /// The epoch of the message answered.
        epoch: Epoch,
        /// Which message it was.
        stage: Stage,
    },
    /// No to a candidate's message of `epoch`, with the refuser's state so
    /// the candidate can tell whether to defer or to retry.
    Refuse {
        /// The epoch of the message refused.
        epoch: Epoch,
        /// The refuser's highest epoch seen.
        seen: Epoch,
        /// The refuser's state.
        view: View,
    },
}

message_kinds!(GarciaMolinaMsg {
    StatusPoll => "status_poll",
    Status => "status",
    Election => "election",
    Coordinator => "coordinator",
    NewState => "new_state",
    Ack => "ack",
    Refuse => "refuse",
});

timers! {
    /// The timers of [`GarciaMolina`].
    pub enum GarciaMolinaTimer {
        /// The candidate's deadline for the answers of its current phase.
        Answer,
        /// A participant's (or deferred node's) deadline for the next step of
        /// someone else's election.
        Wait,
        /// The coordinator's next check of everyone.
        Check,
    }
}

type Msg = GarciaMolinaMsg;

/// A node's state, with the epoch that goes with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Standing {
    Down,
    /// Halted by the candidate named in the epoch it proposed.
    Election(Epoch),
    /// Waiting for the NEW_STATE of the coordinator named in the epoch.
    Reorganization(Epoch),
    /// Working under the coordinator of `current`.
    Normal,
}

/// The phases of this node's own election.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Poll,
    Halt,
    Coordinate,
    NewState,
}

/// This node's own election in progress.
#[derive(Clone, Debug, Hash)]
struct Attempt {
    phase: Phase,
    /// The proposed epoch (zero while polling).
    epoch: Epoch,
    /// Whose answer this phase still waits for.
    waiting: BTreeSet<NodeId>,
    /// The group: the lower nodes that answered the HALT.
    active: BTreeSet<NodeId>,
}

/// Garcia-Molina's election; see the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct GarciaMolina {
    id: NodeId,
    alive: BTreeSet<NodeId>,
    /// The highest epoch seen anywhere.
    seen: Epoch,
    /// The term this node follows; its low bits name the coordinator.
    current: Option<Epoch>,
    status: Standing,
    /// This node's own election, while it runs.
    attempt: Option<Attempt>,
    /// A higher node answered this node's poll: it waits for that node's
    /// election instead of holding its own.
    deferred: bool,
    /// Nodes came up or polled during this node's attempt that the attempt
    /// will not reach: check everyone once it is over.
    recheck: bool,
    /// Whether the node has joined; before that it holds no election.
    started: bool,
    /// The group of the last NEW_STATE sent or received.
    members: Vec<NodeId>,
    /// How long a candidate waits for the answers of one phase.
    timeout: Duration,
    /// How long a participant or a deferred node waits for the next step.
    patience: Duration,
    /// How often the coordinator checks everyone.
    check_every: Duration,
}

impl GarciaMolina {
    /// A node with nobody known to be up yet.
    pub fn new(cfg: &AlgoConfig) -> Self {
        let timeout = cfg.timing.failure_timeout;
        GarciaMolina {
            id: cfg.id,
            alive: BTreeSet::new(),
            seen: crate::Restored::epoch_of(cfg),
            current: None,
            status: Standing::Down,
            attempt: None,
            deferred: false,
            recheck: false,
            started: false,
            members: Vec::new(),
            timeout,
            // A candidate's phases 2 and 3 each take at most one timeout.
            patience: timeout * 2,
            check_every: timeout,
        }
    }

    /// The state the seed would give this node.
    pub fn state(&self) -> State {
        self.view().state
    }

    /// The group of the last NEW_STATE this node sent or accepted.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    fn observe(&mut self, epoch: Epoch) {
        self.seen = self.seen.max(epoch);
    }

    fn view(&self) -> View {
        let (state, epoch) = match self.status {
            Standing::Down => (State::Down, Epoch(0)),
            Standing::Election(e) => (State::Election, e),
            Standing::Reorganization(e) => (State::Reorganization, e),
            Standing::Normal => (State::Normal, self.current.unwrap_or_default()),
        };
        View { state, epoch }
    }

    fn is_up(&self, node: NodeId) -> bool {
        node == self.id || self.alive.contains(&node)
    }

    /// NORMAL and coordinating.
    fn is_coordinator(&self) -> bool {
        self.status == Standing::Normal && self.current.is_some_and(|e| e.leader() == self.id)
    }

    /// NORMAL in the term of `epoch`.
    fn follows(&self, epoch: Epoch) -> bool {
        self.status == Standing::Normal && self.current == Some(epoch)
    }

    /// NORMAL under a coordinator believed up: nothing to elect for.
    fn settled(&self) -> bool {
        self.status == Standing::Normal && self.current.is_some_and(|e| self.is_up(e.leader()))
    }

    /// Neither electing nor waiting on a higher node's election.
    fn idle(&self) -> bool {
        self.attempt.is_none() && !self.deferred
    }

    fn poll(&self) -> Msg {
        Msg::StatusPoll { seen: self.seen, view: self.view() }
    }

    fn refusal(&self, epoch: Epoch) -> Msg {
        Msg::Refuse { epoch, seen: self.seen, view: self.view() }
    }

    /// The coordinator's verdict on a peer's account of itself: one that
    /// is not NORMAL in this coordinator's term calls for an election.
    fn judge(&mut self, now: Time, view: View, out: &mut Out<GarciaMolina>) {
        let in_group = view.state == State::Normal && Some(view.epoch) == self.current;
        if self.is_coordinator() && self.idle() && !in_group {
            self.elect(now, out);
        }
    }

    /// The live nodes above this one.
    fn higher_alive(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.alive.range(NodeId(self.id.0 + 1)..).copied()
    }

    /// Phase 1 (and "Goto Elect"): poll the live higher nodes, or go
    /// straight on to phase 2 when there are none.
    fn elect(&mut self, now: Time, out: &mut Out<GarciaMolina>) {
        if !self.started {
            return;
        }
        self.deferred = false;
        out.cancel_timer(GarciaMolinaTimer::Wait);
        let higher: BTreeSet<NodeId> = self.higher_alive().collect();
        if higher.is_empty() {
            self.halt(now, out);
            return;
        }
        out.broadcast(higher.iter().copied(), self.poll());
        out.set_timer(GarciaMolinaTimer::Answer, now + self.timeout);
        self.attempt = Some(Attempt {
            phase: Phase::Poll,
            epoch: Epoch(0),
            waiting: higher,
            active: BTreeSet::new(),
        });
    }

    /// Phase 2: halt the live lower nodes under a new epoch.
    fn halt(&mut self, now: Time, out: &mut Out<GarciaMolina>) {
        let epoch = self.seen.next_for(self.id);
        self.seen = epoch;
        self.status = Standing::Election(epoch);
        // Every live node is asked now; none is left out yet.
        self.recheck = false;
        let lower: BTreeSet<NodeId> = self.alive.range(..self.id).copied().collect();
        out.broadcast(lower.iter().copied(), Msg::Election { epoch });
        self.attempt =
            Some(Attempt { phase: Phase::Halt, epoch, waiting: lower, active: BTreeSet::new() });
        self.wait_or_advance(now, out);
    }

    /// Phase 3: tell the group who coordinates.
    fn coordinate(&mut self, now: Time, out: &mut Out<GarciaMolina>) {
        let Some(a) = self.attempt.as_mut() else { return };
        a.phase = Phase::Coordinate;
        a.waiting = a.active.clone();
        out.broadcast(a.active.iter().copied(), Msg::Coordinator { epoch: a.epoch });
        self.wait_or_advance(now, out);
    }

    /// Phase 4: hand the group the new state, and take over.
    fn new_state(&mut self, now: Time, out: &mut Out<GarciaMolina>) {
        let Some(a) = self.attempt.as_mut() else { return };
        a.phase = Phase::NewState;
        a.waiting = a.active.clone();
        let epoch = a.epoch;
        let mut members = a.active.clone();
        members.insert(self.id);
        let members: Vec<NodeId> = members.into_iter().collect();
        let msg = Msg::NewState { epoch, members: members.clone() };
        out.broadcast(a.active.iter().copied(), msg);
        self.members = members;
        self.status = Standing::Reorganization(epoch);
        self.follow(epoch, out);
        self.wait_or_advance(now, out);
    }

    /// Every member answered NEW_STATE: the coordinator is NORMAL.
    fn finish(&mut self, now: Time, out: &mut Out<GarciaMolina>) {
        self.attempt = None;
        out.cancel_timer(GarciaMolinaTimer::Answer);
        self.status = Standing::Normal;
        out.set_timer(GarciaMolinaTimer::Check, now + self.check_every);
        if std::mem::take(&mut self.recheck) {
            out.broadcast(self.alive.iter().copied(), self.poll());
        }
    }

    /// Moves on if this phase waits for nobody; otherwise arms its deadline.
    fn wait_or_advance(&mut self, now: Time, out: &mut Out<GarciaMolina>) {
        if self.attempt.as_ref().is_some_and(|a| a.waiting.is_empty()) {
            self.advance(now, out);
        } else {
            out.set_timer(GarciaMolinaTimer::Answer, now + self.timeout);
        }
    }

    /// The phase's deadline passed with answers missing. Only the failure
    /// detector takes a node for down (and stops the wait for it, in
    /// `handle_peer_down`); one it still counts alive is slow, not gone,
    /// and is asked again: see *Deadlines*.
    fn unanswered(&mut self, now: Time, out: &mut Out<GarciaMolina>) {
        let Some(a) = self.attempt.as_ref() else { return };
        let again = match a.phase {
            Phase::Poll => self.poll(),
            Phase::Halt => Msg::Election { epoch: a.epoch },
            Phase::Coordinate => Msg::Coordinator { epoch: a.epoch },
            Phase::NewState => Msg::NewState { epoch: a.epoch, members: self.members.clone() },
        };
        out.broadcast(a.waiting.iter().copied(), again);
        self.wait_or_advance(now, out);
    }

    /// The current phase is over (its answers are in, or no longer awaited).
    fn advance(&mut self, now: Time, out: &mut Out<GarciaMolina>) {
        match self.attempt.as_ref().map(|a| a.phase) {
            Some(Phase::Poll) => self.halt(now, out),
            Some(Phase::Halt) => self.coordinate(now, out),
            Some(Phase::Coordinate) => self.new_state(now, out),
            Some(Phase::NewState) => self.finish(now, out),
            None => {}
        }
    }

    /// Elects if no live node is above this one; otherwise waits for the
    /// highest one's HALT (see *Joining* and *Failover*).
    fn elect_or_defer(&mut self, now: Time, out: &mut Out<GarciaMolina>) {
        if self.higher_alive().next().is_some() {
            self.defer(now, out);
        } else {
            self.elect(now, out);
        }
    }

    /// A higher node is alive and will lead: drop this node's attempt and
    /// give the higher one time to reach it.
    fn defer(&mut self, now: Time, out: &mut Out<GarciaMolina>) {
        if self.attempt.take().is_some() {
            out.cancel_timer(GarciaMolinaTimer::Answer);
        }
        self.recheck = false;
        self.deferred = true;
        out.set_timer(GarciaMolinaTimer::Wait, now + self.patience);
    }

    /// Someone else's election has reached this node: drop its own.
    fn abandon(&mut self, out: &mut Out<GarciaMolina>) {
        if self.attempt.take().is_some() {
            out.cancel_timer(GarciaMolinaTimer::Answer);
        }
        self.recheck = false;
        self.deferred = false;
    }

    fn follow(&mut self, epoch: Epoch, out: &mut Out<GarciaMolina>) {
        if self.current != Some(epoch) {
            self.current = Some(epoch);
            out.coordinator(epoch.leader(), epoch);
        }
    }

    fn on_halt(&mut self, now: Time, from: NodeId, epoch: Epoch, out: &mut Out<GarciaMolina>) {
        if epoch.leader() != from {
            return; // an epoch names its candidate; this one is forged
        }
        self.observe(epoch);
        if from < self.id {
            // A lower node elects while this one is alive: it must defer.
            out.send(from, self.refusal(epoch));
            // Outside the coordinator's group, as its check would find.
            if self.is_coordinator() && self.idle() {
                self.elect(now, out);
            }
            return;
        }
        let stands_by_higher = match self.status {
            Standing::Election(e) | Standing::Reorganization(e) => {
                e.leader() > from && self.is_up(e.leader())
            }
            _ => false,
        };
        let stale = self.current.is_some_and(|current| epoch <= current);
        if stale || stands_by_higher {
            out.send(from, self.refusal(epoch));
            // A higher node is electing: leave it the field.
            if self.attempt.is_some() {
                self.defer(now, out);
            }
            return;
        }
        self.abandon(out);
        self.status = Standing::Election(epoch);
        out.send(from, Msg::Ack { epoch, stage: Stage::Halt });
        out.set_timer(GarciaMolinaTimer::Wait, now + self.patience);
    }

    fn on_coordinator(
        &mut self,
        now: Time,
        from: NodeId,
        epoch: Epoch,
        out: &mut Out<GarciaMolina>,
    ) {
        if epoch.leader() != from {
            return;
        }
        self.observe(epoch);
        if self.status == Standing::Election(epoch) {
            self.abandon(out);
            self.status = Standing::Reorganization(epoch);
            out.send(from, Msg::Ack { epoch, stage: Stage::Coordinator });
            out.set_timer(GarciaMolinaTimer::Wait, now + self.patience);
        } else if self.status == Standing::Reorganization(epoch) || self.follows(epoch) {
            // Asked again: the first answer is on its way or was late.
            out.send(from, Msg::Ack { epoch, stage: Stage::Coordinator });
        } else {
            // Not from its candidate, or of a term it has left behind: a
            // candidate still waiting for the answer starts again.
            out.send(from, self.refusal(epoch));
        }
    }

    fn on_new_state(
        &mut self,
        from: NodeId,
        epoch: Epoch,
        members: Vec<NodeId>,
        out: &mut Out<GarciaMolina>,
    ) {
        if epoch.leader() != from {
            return;
        }
        self.observe(epoch);
        if self.status == Standing::Reorganization(epoch) {
            self.abandon(out);
            out.cancel_timer(GarciaMolinaTimer::Wait);
            self.status = Standing::Normal;
            self.members = members;
            // The answer goes first: the coordinator's mutex layer may
            // already be talking to this node's.
            out.send(from, Msg::Ack { epoch, stage: Stage::NewState });
            self.follow(epoch, out);
        } else if self.follows(epoch) {
            out.send(from, Msg::Ack { epoch, stage: Stage::NewState });
        } else {
            out.send(from, self.refusal(epoch)); // as for a COORDINATOR
        }
    }

    fn on_ack(
        &mut self,
        now: Time,
        from: NodeId,
        epoch: Epoch,
        stage: Stage,
        out: &mut Out<GarciaMolina>,
    ) {
        let Some(a) = self.attempt.as_mut() else { return };
        let expected = match a.phase {
            Phase::Poll => return,
            Phase::Halt => Stage::Halt,
            Phase::Coordinate => Stage::Coordinator,
            Phase::NewState => Stage::NewState,
        };
        // An answer to an earlier attempt, or to another phase: dropped.
        if a.epoch != epoch || stage != expected || !a.waiting.remove(&from) {
            return;
        }
        if a.phase == Phase::Halt {
            a.active.insert(from);
        }
        if a.waiting.is_empty() {
            self.advance(now, out);
        }
    }

    fn on_refuse(
        &mut self,
        now: Time,
        from: NodeId,
        epoch: Epoch,
        view: View,
        out: &mut Out<GarciaMolina>,
    ) {
        let Some(a) = self.attempt.as_ref() else { return };
        let involved = a.waiting.contains(&from) || a.active.contains(&from);
        if a.phase == Phase::Poll || a.epoch != epoch || !involved {
            return; // about an earlier attempt
        }
        if from > self.id || view.leader().is_some_and(|l| l > self.id) {
            self.defer(now, out); // a higher node leads or is electing
        } else {
            self.elect(now, out); // outbid on the epoch: again, higher
        }
    }
}

impl Algorithm for GarciaMolina {
    type Msg = GarciaMolinaMsg;
    type Timer = GarciaMolinaTimer;

    fn handle_message(&mut self, now: Time, from: NodeId, msg: Msg, out: &mut Out<GarciaMolina>) {
        match msg {
            Msg::StatusPoll { seen, view } => {
                self.observe(seen);
                out.send(from, Msg::Status { seen: self.seen, view: self.view() });
                if let Some(a) = &self.attempt {
                    let reached = a.waiting.contains(&from) || a.active.contains(&from);
                    if a.phase != Phase::Poll && !reached {
                        self.recheck = true;
                    }
                }
                self.judge(now, view, out);
            }
            Msg::Status { seen, view } => {
                self.observe(seen);
                let polling = self.attempt.as_ref().is_some_and(|a| a.phase == Phase::Poll);
                if polling && from > self.id {
                    // Phase 1 got an answer: this node cannot win.
                    self.defer(now, out);
                } else {
                    self.judge(now, view, out);
                }
            }
            Msg::Election { epoch } => self.on_halt(now, from, epoch, out),
            Msg::Coordinator { epoch } => self.on_coordinator(now, from, epoch, out),
            Msg::NewState { epoch, members } => self.on_new_state(from, epoch, members, out),
            Msg::Ack { epoch, stage } => self.on_ack(now, from, epoch, stage, out),
            Msg::Refuse { epoch, seen, view } => {
                self.observe(seen);
                self.on_refuse(now, from, epoch, view, out);
            }
        }
    }

    fn handle_timer(&mut self, now: Time, timer: GarciaMolinaTimer, out: &mut Out<GarciaMolina>) {
        match timer {
            GarciaMolinaTimer::Answer => self.unanswered(now, out),
            GarciaMolinaTimer::Wait if self.attempt.is_none() => {
                self.deferred = false;
                if !self.settled() {
                    self.elect(now, out);
                }
            }
            GarciaMolinaTimer::Check if self.is_coordinator() => {
                out.set_timer(GarciaMolinaTimer::Check, now + self.check_every);
                if self.idle() {
                    out.broadcast(self.alive.iter().copied(), self.poll());
                }
            }
            _ => {} // a timer that outlived its purpose
        }
    }

    fn handle_peer_up(&mut self, _now: Time, peer: NodeId, out: &mut Out<GarciaMolina>) {
        self.alive.insert(peer);
        let poll = self.poll();
        let coordinating = self.is_coordinator();
        match self.attempt.as_mut() {
            // A higher node appeared while this one polls: ask it too.
            Some(a) if a.phase == Phase::Poll && peer > self.id => {
                a.waiting.insert(peer);
                out.send(peer, poll);
            }
            // A lower one will be halted in phase 2 with the rest.
            Some(a) if a.phase == Phase::Poll => {}
            // Past phase 1, this attempt will not reach it.
            Some(_) => self.recheck = true,
            // The coordinator checks a newcomer at once.
            None if coordinating => out.send(peer, poll),
            None => {}
        }
    }

    fn handle_peer_down(&mut self, now: Time, peer: NodeId, out: &mut Out<GarciaMolina>) {
        self.alive.remove(&peer);
        if let Some(a) = self.attempt.as_mut() {
            let was_awaited = a.waiting.remove(&peer);
            let member = a.active.contains(&peer);
            if a.phase == Phase::Halt {
                a.active.remove(&peer); // answered, then lost: not in the group
            }
            match a.phase {
                // No longer waited for: the phase may be over.
                Phase::Poll | Phase::Halt if was_awaited && a.waiting.is_empty() => {
                    self.advance(now, out)
                }
                // A member is gone: its answers cannot match the group.
                Phase::Coordinate if member => self.elect(now, out),
                Phase::NewState if was_awaited => self.elect(now, out),
                _ => {}
            }
            return;
        }
        let leader_lost = match self.status {
            Standing::Down => false,
            Standing::Election(e) | Standing::Reorganization(e) => e.leader() == peer,
            Standing::Normal => self.current.is_some_and(|e| e.leader() == peer),
        };
        let nobody_higher = self.higher_alive().next().is_none();
        if leader_lost {
            self.elect_or_defer(now, out);
        } else if self.deferred && peer > self.id && nobody_higher {
            self.elect(now, out);
        }
    }
}

impl ElectionAlgorithm for GarciaMolina {
    /// The highest live node elects; any other waits for its HALT, as if
    /// a higher node had answered its poll (see *Joining*).
    fn handle_start(&mut self, now: Time, out: &mut Out<GarciaMolina>) {
        self.started = true;
        self.elect_or_defer(now, out);
    }

    /// A sitting coordinator with no election under way holds one: it
    /// polls the nodes above it (none, unless one came up) and halts the
    /// rest under a new epoch.
    fn handle_renew(&mut self, now: Time, out: &mut Out<GarciaMolina>) {
        if self.is_coordinator() && self.attempt.is_none() {
            self.elect(now, out);
        }
    }

    fn handle_epoch_hint(
        &mut self,
        now: Time,
        _from: NodeId,
        epoch: Epoch,
        coordinator: Option<NodeId>,
        out: &mut Out<GarciaMolina>,
    ) {
        self.observe(epoch);
        // A peer works under a newer term than this NORMAL node: it missed
        // that election. Its own election reaches the newer coordinator,
        // whose check then takes it in.
        let newer = self.current.is_none_or(|current| current < epoch);
        let follows_it = coordinator == Some(epoch.leader());
        if self.status == Standing::Normal && self.idle() && newer && follows_it {
            self.elect(now, out);
        }
    }

    fn coordinator(&self) -> Option<NodeId> {
        self.current.map(Epoch::leader)
    }

    fn epoch(&self) -> Epoch {
        self.current.unwrap_or(self.seen)
    }
}

#[cfg(test)]
mod tests {
    use super::GarciaMolinaMsg::*;
    use super::*;
    use crate::outbox::Action;
    use crate::testkit::*;

    const TIMEOUT: Duration = Duration::from_millis(250);

    fn e(round: u64, leader: u32) -> Epoch {
        Epoch::new(round, n(leader))
    }

    fn view(state: State, epoch: Epoch) -> View {
        View { state, epoch }
    }

    const DOWN: View = View { state: State::Down, epoch: Epoch(0) };

    /// Node `id` of `members`, with `up` reported up and joined.
    fn node(id: u32, members: u32, up: &[u32]) -> GarciaMolina {
        let mut g = with_up(
            GarciaMolina::new(&AlgoConfig::for_test(id, members)),
            up.iter().map(|&p| n(p)),
        );
        g.started = true;
        g
    }

    /// Node 3 of 3 with 1 and 2 up, walked through a whole election.
    fn elected_three() -> GarciaMolina {
        let mut g = node(3, 3, &[1, 2]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        for p in [1, 2] {
            g.handle_message(T, n(p), Ack { epoch: e(1, 3), stage: Stage::Halt }, &mut out);
        }
        for p in [1, 2] {
            g.handle_message(T, n(p), Ack { epoch: e(1, 3), stage: Stage::Coordinator }, &mut out);
        }
        for p in [1, 2] {
            g.handle_message(T, n(p), Ack { epoch: e(1, 3), stage: Stage::NewState }, &mut out);
        }
        assert!(g.is_coordinator());
        g
    }

    #[test]
    fn highest_live_node_skips_the_poll_and_halts_the_lower_ones() {
        let mut g = node(5, 5, &[1, 2, 3, 4]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        let mut expected = vec![Action::CancelTimer { timer: GarciaMolinaTimer::Wait }];
        expected.extend((1..=4).map(|p| send(p, Election { epoch: e(1, 5) })));
        expected.push(Action::SetTimer { timer: GarciaMolinaTimer::Answer, at: TIMEOUT });
        assert_eq!(out.take(), expected);
        assert_eq!(g.state(), State::Election);
    }

    #[test]
    fn a_joining_node_below_a_live_one_waits_for_its_halt() {
        let mut g = node(3, 5, &[1, 2, 4, 5]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        assert_eq!(
            out.take(),
            vec![Action::SetTimer { timer: GarciaMolinaTimer::Wait, at: TIMEOUT * 2 }]
        );
        assert!(g.deferred && g.attempt.is_none());
        // No HALT in time: it elects after all, polling those above.
        g.handle_timer(TIMEOUT * 2, GarciaMolinaTimer::Wait, &mut out);
        let sent = out.take();
        assert!(sent.contains(&send(5, StatusPoll { seen: Epoch(0), view: DOWN })), "{sent:?}");
    }

    #[test]
    fn lower_node_polls_the_live_higher_ones_and_defers_on_an_answer() {
        let mut g = node(3, 5, &[1, 2, 4, 5]);
        let mut out = Out::<GarciaMolina>::new();
        g.elect(T, &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: GarciaMolinaTimer::Wait },
                send(4, StatusPoll { seen: Epoch(0), view: DOWN }),
                send(5, StatusPoll { seen: Epoch(0), view: DOWN }),
                Action::SetTimer { timer: GarciaMolinaTimer::Answer, at: TIMEOUT },
            ]
        );
        g.handle_message(T, n(5), Status { seen: Epoch(0), view: DOWN }, &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: GarciaMolinaTimer::Answer },
                Action::SetTimer { timer: GarciaMolinaTimer::Wait, at: TIMEOUT * 2 },
            ]
        );
        assert!(g.deferred && g.attempt.is_none());
    }

    #[test]
    fn a_silent_higher_node_is_polled_again_until_reported_down() {
        let mut g = node(2, 3, &[1, 3]);
        let mut out = Out::<GarciaMolina>::new();
        g.elect(T, &mut out);
        out.take();
        // Node 3 is slow, not gone: the deadline only asks it again.
        g.handle_timer(TIMEOUT, GarciaMolinaTimer::Answer, &mut out);
        assert_eq!(
            out.take(),
            vec![
                send(3, StatusPoll { seen: Epoch(0), view: DOWN }),
                Action::SetTimer { timer: GarciaMolinaTimer::Answer, at: TIMEOUT * 2 },
            ]
        );
        // Once the detector takes it for down, phase 2 begins.
        g.handle_peer_down(TIMEOUT * 2, n(3), &mut out);
        assert_eq!(
            out.take(),
            vec![
                send(1, Election { epoch: e(1, 2) }),
                Action::SetTimer { timer: GarciaMolinaTimer::Answer, at: TIMEOUT * 3 },
            ]
        );
    }

    #[test]
    fn candidate_walks_the_four_phases() {
        let mut g = node(3, 3, &[1, 2]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        out.take();
        let ack = |stage| Ack { epoch: e(1, 3), stage };
        // Phase 2 → 3 once both lower nodes answered the HALT.
        g.handle_message(T, n(1), ack(Stage::Halt), &mut out);
        assert!(out.is_empty());
        g.handle_message(T, n(2), ack(Stage::Halt), &mut out);
        assert_eq!(
            out.take(),
            vec![
                send(1, Coordinator { epoch: e(1, 3) }),
                send(2, Coordinator { epoch: e(1, 3) }),
                Action::SetTimer { timer: GarciaMolinaTimer::Answer, at: TIMEOUT },
            ]
        );
        // Phase 3 → 4: NEW_STATE, then the mutex layer hears of the change.
        g.handle_message(T, n(1), ack(Stage::Coordinator), &mut out);
        g.handle_message(T, n(2), ack(Stage::Coordinator), &mut out);
        let members = vec![n(1), n(2), n(3)];
        assert_eq!(
            out.take(),
            vec![
                send(1, NewState { epoch: e(1, 3), members: members.clone() }),
                send(2, NewState { epoch: e(1, 3), members: members.clone() }),
                Action::Coordinator { leader: n(3), epoch: e(1, 3) },
                Action::SetTimer { timer: GarciaMolinaTimer::Answer, at: TIMEOUT },
            ]
        );
        assert_eq!(g.state(), State::Reorganization);
        // Every NEW_STATE answered: NORMAL, and the periodic check begins.
        g.handle_message(T, n(1), ack(Stage::NewState), &mut out);
        g.handle_message(T, n(2), ack(Stage::NewState), &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: GarciaMolinaTimer::Answer },
                Action::SetTimer { timer: GarciaMolinaTimer::Check, at: TIMEOUT },
            ]
        );
        assert_eq!(g.state(), State::Normal);
        assert_eq!(g.members(), &members[..]);
        assert_eq!((g.coordinator(), g.epoch()), (Some(n(3)), e(1, 3)));
    }

    #[test]
    fn only_the_nodes_that_answered_the_halt_form_the_group() {
        let mut g = node(3, 3, &[1, 2]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        g.handle_message(T, n(2), Ack { epoch: e(1, 3), stage: Stage::Halt }, &mut out);
        out.take();
        // Node 1 is late: halted again, and waited for while it counts alive.
        g.handle_timer(TIMEOUT, GarciaMolinaTimer::Answer, &mut out);
        assert_eq!(sends(&mut out), vec![(n(1), Election { epoch: e(1, 3) })]);
        g.handle_peer_down(TIMEOUT, n(1), &mut out);
        assert_eq!(
            sends(&mut out),
            vec![(n(2), Coordinator { epoch: e(1, 3) })],
            "node 1 was reported down before it answered"
        );
    }

    #[test]
    fn a_node_lost_after_answering_the_halt_is_left_out_of_the_group() {
        let mut g = node(3, 3, &[1, 2]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        g.handle_message(T, n(2), Ack { epoch: e(1, 3), stage: Stage::Halt }, &mut out);
        g.handle_peer_down(T, n(2), &mut out);
        out.take();
        g.handle_message(T, n(1), Ack { epoch: e(1, 3), stage: Stage::Halt }, &mut out);
        assert_eq!(sends(&mut out), vec![(n(1), Coordinator { epoch: e(1, 3) })]);
    }

    #[test]
    fn a_member_lost_in_phase_three_restarts_with_a_new_epoch() {
        let mut g = node(3, 3, &[1, 2]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        for p in [1, 2] {
            g.handle_message(T, n(p), Ack { epoch: e(1, 3), stage: Stage::Halt }, &mut out);
        }
        out.take();
        g.handle_peer_down(T, n(1), &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: GarciaMolinaTimer::Wait },
                send(2, Election { epoch: e(2, 3) }),
                Action::SetTimer { timer: GarciaMolinaTimer::Answer, at: TIMEOUT },
            ]
        );
        // The first attempt's late answer is recognised and dropped.
        g.handle_message(T, n(2), Ack { epoch: e(1, 3), stage: Stage::Halt }, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn a_slow_member_is_asked_again_and_a_lost_one_restarts_the_election() {
        let mut g = node(2, 2, &[1]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        g.handle_message(T, n(1), Ack { epoch: e(1, 2), stage: Stage::Halt }, &mut out);
        g.handle_message(T, n(1), Ack { epoch: e(1, 2), stage: Stage::Coordinator }, &mut out);
        out.take();
        g.handle_timer(TIMEOUT, GarciaMolinaTimer::Answer, &mut out);
        let members = vec![n(1), n(2)];
        assert_eq!(sends(&mut out), vec![(n(1), NewState { epoch: e(1, 2), members })]);
        // Lost: the group changed, and the election starts over (alone,
        // node 2 goes through it at once).
        g.handle_peer_down(TIMEOUT, n(1), &mut out);
        assert_eq!((g.coordinator(), g.epoch()), (Some(n(2)), e(2, 2)));
        assert_eq!(g.members(), &[n(2)][..]);
    }

    #[test]
    fn participant_walks_election_reorganization_normal() {
        let mut g = node(2, 4, &[1, 3, 4]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_message(T, n(4), Election { epoch: e(1, 4) }, &mut out);
        assert_eq!(
            out.take(),
            vec![
                send(4, Ack { epoch: e(1, 4), stage: Stage::Halt }),
                Action::SetTimer { timer: GarciaMolinaTimer::Wait, at: TIMEOUT * 2 },
            ]
        );
        assert_eq!(g.state(), State::Election);
        g.handle_message(T, n(4), Coordinator { epoch: e(1, 4) }, &mut out);
        assert_eq!(
            out.take(),
            vec![
                send(4, Ack { epoch: e(1, 4), stage: Stage::Coordinator }),
                Action::SetTimer { timer: GarciaMolinaTimer::Wait, at: TIMEOUT * 2 },
            ]
        );
        assert_eq!(g.state(), State::Reorganization);
        // Asked again by a candidate that did not hear the answer in time.
        g.handle_message(T, n(4), Coordinator { epoch: e(1, 4) }, &mut out);
        assert_eq!(out.take(), vec![send(4, Ack { epoch: e(1, 4), stage: Stage::Coordinator })]);
        let members = vec![n(1), n(2), n(4)];
        g.handle_message(T, n(4), NewState { epoch: e(1, 4), members: members.clone() }, &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: GarciaMolinaTimer::Wait },
                send(4, Ack { epoch: e(1, 4), stage: Stage::NewState }),
                Action::Coordinator { leader: n(4), epoch: e(1, 4) },
            ]
        );
        assert_eq!(g.state(), State::Normal);
        assert_eq!(g.members(), &members[..]);
    }

    #[test]
    fn coordinator_message_from_another_candidate_is_refused() {
        let mut g = node(1, 4, &[2, 3, 4]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_message(T, n(4), Election { epoch: e(2, 4) }, &mut out);
        out.take();
        g.handle_message(T, n(3), Coordinator { epoch: e(3, 3) }, &mut out);
        assert_eq!(
            out.take(),
            vec![send(
                3,
                Refuse { epoch: e(3, 3), seen: e(3, 3), view: view(State::Election, e(2, 4)) }
            )]
        );
    }

    #[test]
    fn messages_of_an_older_term_are_refused_and_their_candidate_starts_again() {
        let mut g = node(2, 5, &[4, 5]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_message(T, n(5), Election { epoch: e(5, 5) }, &mut out);
        g.handle_message(T, n(5), Coordinator { epoch: e(5, 5) }, &mut out);
        g.handle_message(T, n(5), NewState { epoch: e(5, 5), members: vec![] }, &mut out);
        out.take();
        g.handle_message(T, n(4), Coordinator { epoch: e(3, 4) }, &mut out);
        g.handle_message(T, n(4), NewState { epoch: e(3, 4), members: vec![] }, &mut out);
        let no =
            |epoch| (n(4), Refuse { epoch, seen: e(5, 5), view: view(State::Normal, e(5, 5)) });
        assert_eq!(sends(&mut out), vec![no(e(3, 4)), no(e(3, 4))]);
        assert_eq!((g.coordinator(), g.epoch()), (Some(n(5)), e(5, 5)));
        // A candidate left behind, asking again, hears the refusal and
        // elects above the newer term instead of asking for ever.
        let mut c = node(5, 5, &[2]);
        c.handle_start(T, &mut out);
        c.handle_message(T, n(2), Ack { epoch: e(1, 5), stage: Stage::Halt }, &mut out);
        out.take();
        c.handle_timer(TIMEOUT, GarciaMolinaTimer::Answer, &mut out);
        assert_eq!(sends(&mut out), vec![(n(2), Coordinator { epoch: e(1, 5) })]);
        let refusal = Refuse { epoch: e(1, 5), seen: e(7, 4), view: view(State::Normal, e(7, 4)) };
        c.handle_message(TIMEOUT, n(2), refusal, &mut out);
        assert_eq!(sends(&mut out), vec![(n(2), Election { epoch: e(8, 5) })]);
    }

    #[test]
    fn halt_of_an_older_epoch_is_refused_with_the_newer_one() {
        let mut g = node(2, 5, &[4, 5]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_message(T, n(4), Election { epoch: e(5, 4) }, &mut out);
        g.handle_message(T, n(4), Coordinator { epoch: e(5, 4) }, &mut out);
        g.handle_message(T, n(4), NewState { epoch: e(5, 4), members: vec![] }, &mut out);
        out.take();
        g.handle_message(T, n(5), Election { epoch: e(3, 5) }, &mut out);
        assert_eq!(
            out.take(),
            vec![send(
                5,
                Refuse { epoch: e(3, 5), seen: e(5, 4), view: view(State::Normal, e(5, 4)) }
            )]
        );
        // The candidate, outbid by a lower node, retries above the epoch.
        let mut c = node(5, 5, &[2]);
        c.handle_start(T, &mut out);
        out.take();
        let refusal = Refuse { epoch: e(1, 5), seen: e(5, 4), view: view(State::Normal, e(5, 4)) };
        c.handle_message(T, n(2), refusal, &mut out);
        assert_eq!(sends(&mut out), vec![(n(2), Election { epoch: e(6, 5) })]);
    }

    #[test]
    fn halt_from_a_lower_node_is_refused_and_the_coordinator_re_elects() {
        let mut g = elected_three();
        let mut out = Out::<GarciaMolina>::new();
        g.handle_message(T, n(2), Election { epoch: e(2, 2) }, &mut out);
        assert_eq!(
            out.take(),
            vec![
                send(
                    2,
                    Refuse { epoch: e(2, 2), seen: e(2, 2), view: view(State::Normal, e(1, 3)) }
                ),
                Action::CancelTimer { timer: GarciaMolinaTimer::Wait },
                send(1, Election { epoch: e(3, 3) }),
                send(2, Election { epoch: e(3, 3) }),
                Action::SetTimer { timer: GarciaMolinaTimer::Answer, at: TIMEOUT },
            ]
        );
        // The lower candidate, refused by a higher node, defers.
        let mut c = node(2, 3, &[1, 3]);
        c.handle_timer(T, GarciaMolinaTimer::Wait, &mut out); // elect: polls 3, which is silent
        c.handle_peer_down(TIMEOUT, n(3), &mut out); // reported down: phase 2 halts 1
        out.take();
        let refusal = Refuse { epoch: e(1, 2), seen: e(1, 3), view: view(State::Normal, e(1, 3)) };
        c.handle_message(TIMEOUT, n(1), refusal, &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: GarciaMolinaTimer::Answer },
                Action::SetTimer { timer: GarciaMolinaTimer::Wait, at: TIMEOUT * 3 },
            ]
        );
    }

    #[test]
    fn halt_from_a_higher_node_stops_the_own_election() {
        let mut g = node(3, 5, &[1, 2, 4]);
        let mut out = Out::<GarciaMolina>::new();
        g.elect(T, &mut out);
        g.handle_timer(TIMEOUT, GarciaMolinaTimer::Answer, &mut out); // node 4 silent: halts 1, 2
        out.take();
        g.handle_message(TIMEOUT, n(4), Election { epoch: e(2, 4) }, &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: GarciaMolinaTimer::Answer },
                send(4, Ack { epoch: e(2, 4), stage: Stage::Halt }),
                Action::SetTimer { timer: GarciaMolinaTimer::Wait, at: TIMEOUT * 3 },
            ]
        );
        // Its own group's answers no longer count.
        g.handle_message(TIMEOUT, n(1), Ack { epoch: e(1, 3), stage: Stage::Halt }, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn a_node_halted_by_a_live_higher_candidate_refuses_a_lower_one() {
        let mut g = node(1, 4, &[2, 3, 4]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_message(T, n(4), Election { epoch: e(1, 4) }, &mut out);
        out.take();
        g.handle_message(T, n(3), Election { epoch: e(1, 3) }, &mut out);
        assert_eq!(
            out.take(),
            vec![send(
                3,
                Refuse { epoch: e(1, 3), seen: e(1, 4), view: view(State::Election, e(1, 4)) }
            )]
        );
        // Once that candidate is down, the lower one may halt it.
        g.handle_peer_down(T, n(4), &mut out);
        out.take();
        g.handle_message(T, n(3), Election { epoch: e(2, 3) }, &mut out);
        assert!(out.take().contains(&send(3, Ack { epoch: e(2, 3), stage: Stage::Halt })));
    }

    #[test]
    fn coordinator_checks_everyone_periodically_and_re_elects_on_a_stranger() {
        let mut g = elected_three();
        let mut out = Out::<GarciaMolina>::new();
        g.handle_timer(TIMEOUT, GarciaMolinaTimer::Check, &mut out);
        let poll = StatusPoll { seen: e(1, 3), view: view(State::Normal, e(1, 3)) };
        assert_eq!(
            out.take(),
            vec![
                Action::SetTimer { timer: GarciaMolinaTimer::Check, at: TIMEOUT * 2 },
                send(1, poll.clone()),
                send(2, poll),
            ]
        );
        // Node 1 is NORMAL in this term: nothing to do.
        let normal = Status { seen: e(1, 3), view: view(State::Normal, e(1, 3)) };
        g.handle_message(TIMEOUT, n(1), normal, &mut out);
        assert!(out.is_empty());
        // Node 2 restarted in between and is DOWN: a new election.
        g.handle_message(TIMEOUT, n(2), Status { seen: e(1, 3), view: DOWN }, &mut out);
        let sent = sends(&mut out);
        assert_eq!(sent[0], (n(1), Election { epoch: e(2, 3) }));
    }

    #[test]
    fn coordinator_checks_a_peer_the_moment_it_comes_up() {
        let mut g = node(3, 3, &[1]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        g.handle_message(T, n(1), Ack { epoch: e(1, 3), stage: Stage::Halt }, &mut out);
        g.handle_message(T, n(1), Ack { epoch: e(1, 3), stage: Stage::Coordinator }, &mut out);
        g.handle_message(T, n(1), Ack { epoch: e(1, 3), stage: Stage::NewState }, &mut out);
        out.take();
        g.handle_peer_up(T, n(2), &mut out);
        assert_eq!(
            out.take(),
            vec![send(2, StatusPoll { seen: e(1, 3), view: view(State::Normal, e(1, 3)) })]
        );
    }

    #[test]
    fn a_node_that_joins_late_is_checked_once_the_election_is_over() {
        let mut g = node(3, 3, &[1]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        g.handle_peer_up(T, n(2), &mut out); // after the HALT went out
        g.handle_message(T, n(1), Ack { epoch: e(1, 3), stage: Stage::Halt }, &mut out);
        g.handle_message(T, n(1), Ack { epoch: e(1, 3), stage: Stage::Coordinator }, &mut out);
        out.take();
        g.handle_message(T, n(1), Ack { epoch: e(1, 3), stage: Stage::NewState }, &mut out);
        let poll = StatusPoll { seen: e(1, 3), view: view(State::Normal, e(1, 3)) };
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: GarciaMolinaTimer::Answer },
                Action::SetTimer { timer: GarciaMolinaTimer::Check, at: TIMEOUT },
                send(1, poll.clone()),
                send(2, poll),
            ]
        );
    }

    /// Node `id` of 3, with the others up, NORMAL under node 3's term 4.
    fn following_three(id: u32) -> GarciaMolina {
        let up: Vec<u32> = (1..=3).filter(|&p| p != id).collect();
        let mut g = node(id, 3, &up);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_message(T, n(3), Election { epoch: e(4, 3) }, &mut out);
        g.handle_message(T, n(3), Coordinator { epoch: e(4, 3) }, &mut out);
        g.handle_message(T, n(3), NewState { epoch: e(4, 3), members: vec![] }, &mut out);
        g
    }

    #[test]
    fn coordinator_crash_makes_the_highest_survivor_elect() {
        let mut g = following_three(2);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_peer_down(T, n(3), &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: GarciaMolinaTimer::Wait },
                send(1, Election { epoch: e(5, 2) }),
                Action::SetTimer { timer: GarciaMolinaTimer::Answer, at: TIMEOUT },
            ]
        );
    }

    #[test]
    fn a_follower_below_a_live_node_waits_for_its_halt_when_the_coordinator_is_lost() {
        let mut g = following_three(1);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_peer_down(T, n(3), &mut out);
        assert_eq!(
            out.take(),
            vec![Action::SetTimer { timer: GarciaMolinaTimer::Wait, at: TIMEOUT * 2 }]
        );
        assert!(g.deferred && g.attempt.is_none());
    }

    #[test]
    fn participant_whose_candidate_goes_quiet_elects() {
        let mut g = node(2, 3, &[1, 3]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_message(T, n(3), Election { epoch: e(1, 3) }, &mut out);
        out.take();
        g.handle_timer(TIMEOUT * 2, GarciaMolinaTimer::Wait, &mut out);
        assert_eq!(
            sends(&mut out),
            vec![(n(3), StatusPoll { seen: e(1, 3), view: view(State::Election, e(1, 3)) })]
        );
    }

    #[test]
    fn deferred_node_elects_when_nobody_higher_is_left() {
        let mut g = node(2, 3, &[1, 3]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        g.handle_message(T, n(3), Status { seen: Epoch(0), view: DOWN }, &mut out);
        out.take();
        g.handle_peer_down(T, n(3), &mut out);
        assert_eq!(sends(&mut out), vec![(n(1), Election { epoch: e(1, 2) })]);
    }

    #[test]
    fn deferred_node_settled_meanwhile_does_not_elect_again() {
        let mut g = node(2, 3, &[1, 3]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        g.handle_message(T, n(3), Status { seen: Epoch(0), view: DOWN }, &mut out);
        g.handle_message(T, n(3), Election { epoch: e(1, 3) }, &mut out);
        g.handle_message(T, n(3), Coordinator { epoch: e(1, 3) }, &mut out);
        g.handle_message(T, n(3), NewState { epoch: e(1, 3), members: vec![] }, &mut out);
        out.take();
        g.handle_timer(TIMEOUT * 2, GarciaMolinaTimer::Wait, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn normal_node_that_hears_of_a_newer_term_elects() {
        let mut g = node(2, 4, &[1, 3, 4]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_message(T, n(3), Election { epoch: e(1, 3) }, &mut out);
        g.handle_message(T, n(3), Coordinator { epoch: e(1, 3) }, &mut out);
        g.handle_message(T, n(3), NewState { epoch: e(1, 3), members: vec![] }, &mut out);
        out.take();
        // A proposal seen in passing is no reason.
        g.handle_epoch_hint(T, n(1), e(2, 4), None, &mut out);
        assert!(out.is_empty());
        // A peer that works under node 4's newer term is.
        g.handle_epoch_hint(T, n(1), e(2, 4), Some(n(4)), &mut out);
        let view = view(State::Normal, e(1, 3));
        assert_eq!(
            sends(&mut out),
            vec![
                (n(3), StatusPoll { seen: e(2, 4), view }),
                (n(4), StatusPoll { seen: e(2, 4), view }),
            ]
        );
    }

    #[test]
    fn forged_epochs_are_ignored() {
        let mut g = node(1, 3, &[2, 3]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_message(T, n(3), Election { epoch: e(1, 2) }, &mut out);
        g.handle_message(T, n(3), NewState { epoch: e(1, 2), members: vec![] }, &mut out);
        assert!(out.is_empty());
        assert_eq!(g.state(), State::Down);
    }

    #[test]
    fn a_lone_node_elects_itself_at_once() {
        let mut g = node(1, 3, &[]);
        let mut out = Out::<GarciaMolina>::new();
        g.handle_start(T, &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: GarciaMolinaTimer::Wait },
                Action::Coordinator { leader: n(1), epoch: e(1, 1) },
                Action::CancelTimer { timer: GarciaMolinaTimer::Answer },
                Action::SetTimer { timer: GarciaMolinaTimer::Check, at: TIMEOUT },
            ]
        );
        assert_eq!(g.state(), State::Normal);
    }

    #[test]
    fn nothing_is_elected_before_the_node_joins() {
        let mut g = GarciaMolina::new(&AlgoConfig::for_test(3, 3));
        let mut out = Out::<GarciaMolina>::new();
        g.handle_peer_up(T, n(1), &mut out);
        g.handle_peer_down(T, n(1), &mut out);
        g.handle_timer(T, GarciaMolinaTimer::Wait, &mut out);
        assert!(out.is_empty());
        // It answers polls meanwhile, as DOWN.
        g.handle_message(T, n(2), StatusPoll { seen: e(1, 2), view: DOWN }, &mut out);
        assert_eq!(out.take(), vec![send(2, Status { seen: e(1, 2), view: DOWN })]);
    }
}
