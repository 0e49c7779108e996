//! # `centralized` — one coordinator, a queue, and an optional count
//!
//! **Source.** The centralized algorithm (Tanenbaum, *Distributed Operating
//! Systems*, 1995, §3.2: a manager with a `resourceIsFree` flag and a FIFO
//! queue) and the message-passing semaphore server of Jones's lecture
//! notes (22C:116, Iowa, 2002: a `count` and a queue of blocked clients). With a capacity `k > 1` the
//! coordinator is a counting semaphore: up to `k` client sessions hold at
//! once, in any mix of nodes.
//!
//! **Assumptions.** Reliable FIFO links while both ends are up; crash-stop
//! failures reported by the failure detector; an election layer that names
//! the coordinator and gives every coordinator a larger epoch than the last.
//!
//! **Messages per entry.** 3 for a node other than the coordinator
//! (REQUEST, GRANT, RELEASE); 0 for the coordinator's own entries, which it
//! grants itself. Synchronisation delay: 2 message delays (RELEASE, GRANT).
//!
//! **State walk.** A client is *idle*, *waiting* (its request stamped with
//! its Lamport clock) or *holding* (with a fence). It sends its request to
//! the coordinator it follows, or holds it until an election names one. The
//! coordinator keeps the holders and a FIFO queue in order of arrival; while
//! fewer than `k` nodes hold, it grants the head of the queue a fence made
//! of its epoch (high bits) and a grant counter (low bits), so fences grow
//! across coordinators. The counter has room for 2²⁴ − 1 grants a term
//! (fewer with `fence_room`); a coordinator that has granted the last of
//! them grants no more, and the engine has the election open a new term
//! of the same coordinator (`handle_renew`), whose rebuild goes on from
//! the queue with fences above the spent term's, as after any change of
//! coordinator.
//!
//! **Recovery.** A node that becomes coordinator knows nothing of its
//! predecessor's queue, but every node knows its own part of it.
//! The new coordinator sends STATE_QUERY to every live peer and *rebuilds*:
//! each STATE_REPORT says idle, waiting (with the original stamp) or holding
//! (with its fence). Holders keep holding, and waiters are queued by their
//! original stamps: the arrival order died with the old coordinator, and
//! the stamps keep every causal order (a client that asked after seeing
//! another's grant queues behind it). Nobody is dropped, and nothing is
//! granted until every live peer has reported. A holder or waiter the detector
//! reports down leaves the holders or the queue. A peer that comes up later
//! is queried too (costing two messages per rejoin): one that was wrongly
//! suspected may still hold. A peer that had suspected the coordinator
//! (its session broke, the coordinator did not suspect it) may have lost
//! a grant on the way: on the re-admission the coordinator sends it once
//! more, and a client takes a grant only for the request it waits with,
//! so a copy that finds it past that request is handed back or ignored.
//!
//! **Semaphores of sessions.** A node asks for a permit per client session
//! that wants one, each request with its own stamp, and holds as many
//! grants as the coordinator gives it, each with its own fence; it
//! releases each by its fence (the RELEASE names it). Its first request is
//! a REQUEST; one made while it holds or waits for others is its whole
//! state (STATE_REPORT with every request waiting and every fence held),
//! which the coordinator takes in place of what it knew of the node, as
//! it takes any report, so a RELEASE lost with a broken session is
//! repaired by the next. Messages per entry stay 3 (0 at the
//! coordinator); a report is larger than a REQUEST by a stamp or a fence
//! per permit the node holds or wants. A report of more entries than the
//! lock has permits, or with another node's stamps, is ignored.
//!
//! **Readers and writers.** A request says whether it reads or writes
//! (on a lock of one permit; a semaphore's requests all write). The
//! queue stays one FIFO queue, and the coordinator grants its head while
//! the head is compatible with the holders: a writer when nobody holds, a
//! reader while only readers hold. So readers adjacent in the queue enter
//! together, a writer waits for the readers before it to leave, and no
//! reader overtakes a writer that asked before it: the "fair" readers and
//! writers of Courtois, Heymans and Parnas ("Concurrent control with
//! 'readers' and 'writers'", CACM 14(10), 1971), served by a manager.
//! Every grant takes the next fence of the term, so a writer's fence is
//! above every earlier grant's and a reader's above every earlier
//! writer's. Messages per entry stay 3, read or write; what readers gain
//! is that they wait for no other reader. A loan goes to a writer only,
//! and covers reads made on it.
//!
//! **Many locks.** Every lock name has an instance of its own at every
//! node that uses it, and its coordinator's instance rebuilds the way any
//! new coordinator does: a coordinator that meets a lock for the first time
//! in its term asks every live peer for its part of it first (2(N−1)
//! messages, once per lock and term). A lock nobody holds or wants is
//! forgotten (at the coordinator once the rebuild is done and the queue
//! empty); what the coordinator's instance leaves is the fence of its last
//! grant, and a new manager of the same term counts on from there, so
//! fences rise per lock across forgetting. A request that names a term this
//! node does not follow yet (it is that term's coordinator and has not
//! heard) keeps the instance until the term begins here, when the rebuild
//! hears of it again.
//!
//! Clocks: a request's stamp comes from the node's Lamport clock, which
//! follows the coordinator's (GRANT carries it) and every peer's (through
//! the heartbeat watermark). Stamps order only a rebuilt queue: ordering
//! the live queue by them instead of by arrival lets a node whose clock
//! lags jump ahead (`coterie bench` counted 166 of 200 grants out of
//! arrival order that way at N = 5).
//!
//! **Lending.** The same state machine, built with
//! [`Centralized::lending`], is `centralized-lending`: the coordinator
//! lends a lock to the node that keeps asking for it, so that its
//! re-entries cost no message, and recalls it when another node asks.
//! Its header, with the fences a loan reserves, is in
//! `centralized_lending.rs`.

use crate::algorithm::MAX_READS;
use crate::algorithm::{AlgoConfig, Algorithm, MutexAlgorithm, Out};
use crate::outbox::{message_kinds, NoTimer, Time};
use crate::types::{CsState, Epoch, Fence, LamportClock, Mode, NodeId, Stamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The messages of [`Centralized`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum CentralizedMsg {
    /// Client to coordinator: queue me.
    Request {
        /// The epoch of the coordinator the client follows.
        epoch: Epoch,
        /// The request's stamp, its place in the queue.
        stamp: Stamp,
        /// Whether it reads or writes.
        mode: Mode,
    },
    /// Coordinator to client: enter.
    Grant {
        /// The coordinator's epoch.
        epoch: Epoch,
        /// The request granted: a client takes a grant only for the
        /// request it waits with (a grant sent again after a re-admission
        /// may find it past that request).
        request: Stamp,
        /// The grant's fencing token.
        fence: Fence,
        /// The coordinator's Lamport clock.
        clock: u64,
        /// A loan (`centralized-lending` only): the client keeps the lock
        /// after its release and enters again on its own, with fences up
        /// to this one, until the coordinator recalls it.
        lent_until: Option<Fence>,
    },
    /// Coordinator to a client it lent the lock: another node asks; hand
    /// the loan back (at once, or when leaving the critical section).
    Recall {
        /// The coordinator's epoch.
        epoch: Epoch,
        /// The grant the loan came with.
        grant: Fence,
    },
    /// Client to coordinator: I left (or: I hand back a grant I did not
    /// want).
    Release {
        /// The epoch of the coordinator the client follows.
        epoch: Epoch,
        /// The fence of the grant released, so that a stale or duplicate
        /// release never frees a slot someone else's grant holds.
        fence: Fence,
    },
    /// New coordinator to every live peer: tell me your state.
    StateQuery {
        /// The new coordinator's epoch.
        epoch: Epoch,
    },
    /// Answer to [`CentralizedMsg::StateQuery`].
    StateReport {
        /// The epoch being answered.
        epoch: Epoch,
        /// The client's own state.
        state: Report,
    },
}

/// One client's account of itself, for a coordinator that rebuilds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum Report {
    /// Not interested.
    Idle,
    /// Waiting with this request.
    Waiting(Stamp),
    /// Inside the critical section with this fence.
    Holding(Fence),
    /// Several of the lock's permits held or asked for here, one per
    /// client session: the requests waiting (oldest first) and the fences
    /// of the grants held.
    Many {
        /// The requests waiting.
        waiting: Vec<Stamp>,
        /// The grants held.
        holding: Vec<Fence>,
    },
    /// As [`Report::Many`], with some of them reads: each request and
    /// grant with its mode.
    Modes {
        /// The requests waiting, and how.
        waiting: Vec<(Stamp, Mode)>,
        /// The grants held, and how.
        holding: Vec<(Fence, Mode)>,
    },
}

impl Report {
    /// The report of a client waiting with `waiting` and holding `holding`.
    fn of(waiting: &[Stamp], holding: &[Fence]) -> Report {
        match (waiting, holding) {
            ([], []) => Report::Idle,
            ([stamp], []) => Report::Waiting(*stamp),
            ([], [fence]) => Report::Holding(*fence),
            _ => Report::Many { waiting: waiting.to_vec(), holding: holding.to_vec() },
        }
    }

    /// The requests it says wait, each with its mode.
    fn waiting(&self) -> impl Iterator<Item = (Stamp, Mode)> + '_ {
        let (writes, modes): (&[Stamp], &[(Stamp, Mode)]) = match self {
            Report::Waiting(stamp) => (std::slice::from_ref(stamp), &[]),
            Report::Many { waiting, .. } => (waiting, &[]),
            Report::Modes { waiting, .. } => (&[], waiting),
            Report::Idle | Report::Holding(_) => (&[], &[]),
        };
        writes.iter().map(|&stamp| (stamp, Mode::Write)).chain(modes.iter().copied())
    }

    /// The grants it says are held, each with its mode.
    fn holding(&self) -> impl Iterator<Item = (Fence, Mode)> + '_ {
        let (writes, modes): (&[Fence], &[(Fence, Mode)]) = match self {
            Report::Holding(fence) => (std::slice::from_ref(fence), &[]),
            Report::Many { holding, .. } => (holding, &[]),
            Report::Modes { holding, .. } => (&[], holding),
            Report::Idle | Report::Waiting(_) => (&[], &[]),
        };
        writes.iter().map(|&fence| (fence, Mode::Write)).chain(modes.iter().copied())
    }

    /// How many reads and how many writes it says wait or are held.
    fn count(&self) -> (usize, usize) {
        let modes = self.waiting().map(|(_, m)| m).chain(self.holding().map(|(_, m)| m));
        modes.fold((0, 0), |(r, w), m| if m == Mode::Read { (r + 1, w) } else { (r, w + 1) })
    }
}

message_kinds!(CentralizedMsg {
    Request => "request",
    Grant => "grant",
    Recall => "recall",
    Release => "release",
    StateQuery => "state_query",
    StateReport => "state_report",
});

/// The coordinator's side, present only on the coordinator.
#[derive(Debug, Clone, Hash)]
struct Manager {
    /// The epoch this node coordinates.
    epoch: Epoch,
    /// Peers whose state report is still missing; nothing is granted until
    /// it is empty.
    awaiting: BTreeSet<NodeId>,
    /// Who holds, by the fence of their grant.
    holders: BTreeMap<Fence, Holder>,
    /// Who waits, in order of arrival (a request per client session that
    /// waits, with its mode); sorted by stamp once, when a rebuild
    /// completes.
    queue: VecDeque<(Stamp, Mode)>,
    /// Whether the rebuilt queue has been put in stamp order.
    ordered: bool,
    /// Grants made in this epoch, and fences lent; the low part of the
    /// next fence.
    grants: u64,
    /// The node of this epoch's last grant: asking again right after it,
    /// it is lent the lock.
    last: Option<NodeId>,
}

/// One holder, as the coordinator knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Holder {
    node: NodeId,
    fence: Fence,
    /// The request this coordinator granted (none for a holder it learnt of
    /// from a report).
    granted_for: Option<Stamp>,
    /// Whether the lock is lent to it, and if so whether it was recalled.
    loan: Lent,
    /// Whether it reads or writes.
    mode: Mode,
}

impl Holder {
    /// The grant as sent to the holder, sent again after a re-admission:
    /// with its loan unless the loan was recalled meanwhile.
    fn grant(&self, epoch: Epoch, clock: u64) -> Option<CentralizedMsg> {
        let request = self.granted_for?;
        let lent_until = match self.loan {
            Lent::Yes(until) => Some(until),
            Lent::No | Lent::Recalled(_) => None,
        };
        Some(CentralizedMsg::Grant { epoch, request, fence: self.fence, clock, lent_until })
    }

    /// Whether the holder may be in the critical section with `fence`:
    /// its grant's, or one its loan issues.
    fn covers(&self, fence: Fence) -> bool {
        match self.loan {
            Lent::No => self.fence == fence,
            Lent::Yes(until) | Lent::Recalled(until) => (self.fence..=until).contains(&fence),
        }
    }
}

/// A holder's loan, as the coordinator knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Lent {
    /// A plain grant, released at the holder's exit.
    No,
    /// Lent, with fences up to this one: the holder keeps the lock until
    /// recalled.
    Yes(Fence),
    /// Recalled, with fences up to this one: on its way back.
    Recalled(Fence),
}

impl Manager {
    fn rebuilding(&self) -> bool {
        !self.awaiting.is_empty()
    }

    /// Records `node`'s state as reported (or implied by a request). A new
    /// report replaces whatever the manager believed of that node, except
    /// for a request it still shows waiting that was granted already: the
    /// grant is on its way and the report predates it, so the grant stays
    /// and the request is not queued again. (If the grant was lost
    /// instead, with a session that broke, the re-admission that follows
    /// sends it again: see `handle_peer_back`.) A loan in use stays a
    /// loan too: a node with several sessions reports the fence it issued
    /// on it beside its other permits, and hands the loan back only when
    /// recalled.
    fn absorb(&mut self, node: NodeId, state: &Report) {
        let in_flight =
            |h: &Holder| h.granted_for.is_some_and(|s| state.waiting().any(|(w, _)| w == s));
        let lent_in_use =
            |h: &Holder| h.loan != Lent::No && state.holding().any(|(fence, _)| h.covers(fence));
        self.queue.retain(|(s, _)| s.node != node);
        self.holders.retain(|_, h| h.node != node || in_flight(h) || lent_in_use(h));
        for (stamp, mode) in state.waiting() {
            if !self.holders.values().any(|h| h.granted_for == Some(stamp)) {
                self.queue.push_back((stamp, mode));
            }
        }
        for (fence, mode) in state.holding() {
            if self.holders.values().any(|h| h.node == node && h.covers(fence)) {
                continue;
            }
            let holder = Holder { node, fence, granted_for: None, loan: Lent::No, mode };
            self.holders.insert(fence, holder);
        }
    }

    /// Whether a request in `mode` may be granted beside the holders, on
    /// a lock of `capacity` permits: on a semaphore while a permit is
    /// free, whatever the mode; else a writer alone and a reader beside
    /// readers only.
    fn admits(&self, mode: Mode, capacity: usize) -> bool {
        if capacity > 1 {
            return self.holders.len() < capacity;
        }
        match mode {
            Mode::Write => self.holders.is_empty(),
            Mode::Read => self.holders.values().all(|h| h.mode == Mode::Read),
        }
    }

    fn forget(&mut self, node: NodeId) {
        self.absorb(node, &Report::Idle);
        self.awaiting.remove(&node);
    }
}

/// The lock as lent to this node (`centralized-lending`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Loan {
    /// The term of the coordinator that lent it; it lives no longer.
    epoch: Epoch,
    /// The grant it came with, as the coordinator recorded it: named when
    /// the loan goes back.
    grant: Fence,
    /// The last fence issued on it.
    last: Fence,
    /// The highest fence it may issue.
    until: Fence,
    /// Recalled while held: it goes back at the release.
    recalled: bool,
}

impl Loan {
    /// The next fence the loan may issue, if any is left.
    fn next(&self) -> Option<Fence> {
        (self.last < self.until).then(|| Fence(self.last.0 + 1))
    }
}

/// How many fences a loan reserves: a client that keeps the lock hands
/// it back and asks again (REQUEST, RELEASE, GRANT) once per this many
/// entries. With 24-bit grant counters a term has room for 16,384 loans.
pub const LOAN: u64 = 1 << 10;

/// The centralized algorithm; see the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct Centralized {
    id: NodeId,
    capacity: usize,
    /// Whether the coordinator lends the lock to a node that asks again
    /// (`centralized-lending`).
    lending: bool,
    /// The grants a term may number ([`MutexOptions::fence_room`](crate::algorithm::MutexOptions::fence_room)).
    room: u64,
    /// Peers counted as up.
    alive: BTreeSet<NodeId>,
    clock: LamportClock,
    /// The coordinator this node follows and its epoch.
    view: Option<(NodeId, Epoch)>,
    /// This node's requests that wait, oldest first: one at most unless
    /// the node's clients hold several permits (`centralized` counts
    /// sessions), each asked for on its own.
    waiting: Vec<Stamp>,
    /// The fences of the grants this node holds, oldest first.
    holding: Vec<Fence>,
    /// Of the requests waiting and the grants held here, the reads.
    reading: BTreeSet<Stamp>,
    read_held: BTreeSet<Fence>,
    /// The lock as lent to this node, if it is.
    loan: Option<Loan>,
    manager: Option<Manager>,
    /// The last fence a forgotten instance of this lock granted as
    /// coordinator (or a bound on it): a manager of the same epoch counts
    /// its grants on from there, so fences keep rising across forgetting.
    remnant: Option<Fence>,
    /// A peer's request or report named a newer term than this node
    /// follows: this node is that term's coordinator and does not know it
    /// yet. It was dropped, and the rebuild the new term starts with will
    /// ask for it again: until then this instance must not be forgotten.
    early: Option<Epoch>,
}

impl Centralized {
    /// A node with nobody known to be up yet.
    pub fn new(cfg: &AlgoConfig) -> Self {
        Centralized {
            id: cfg.id,
            capacity: cfg.capacity.max(1),
            lending: false,
            room: cfg.mutex_options.fence_room(),
            alive: BTreeSet::new(),
            clock: LamportClock::default(),
            view: None,
            waiting: Vec::new(),
            holding: Vec::new(),
            reading: BTreeSet::new(),
            read_held: BTreeSet::new(),
            loan: None,
            manager: None,
            remnant: None,
            early: None,
        }
    }

    /// A node whose coordinator lends the lock to a node that asks for it
    /// twice in a row; see [`centralized_lending`](super::centralized_lending).
    pub fn lending(cfg: &AlgoConfig) -> Self {
        Centralized { lending: true, ..Centralized::new(cfg) }
    }

    /// A peer spoke of term `epoch`: if it is newer than the one followed,
    /// remember to keep this instance until that term begins here.
    fn heard_of(&mut self, epoch: Epoch) {
        if self.view.is_none_or(|(_, e)| epoch > e) {
            self.early = self.early.max(Some(epoch));
        }
    }

    fn report(&self) -> Report {
        if self.reading.is_empty() && self.read_held.is_empty() {
            return Report::of(&self.waiting, &self.holding);
        }
        Report::Modes {
            waiting: self.waiting.iter().map(|&s| (s, self.mode_of_request(s))).collect(),
            holding: self.holding.iter().map(|&f| (f, self.mode_of(f))).collect(),
        }
    }

    /// The mode of this node's request `stamp`, waiting.
    fn mode_of_request(&self, stamp: Stamp) -> Mode {
        if self.reading.contains(&stamp) {
            Mode::Read
        } else {
            Mode::Write
        }
    }

    /// What tells the coordinator of `epoch` that this node waits: a
    /// REQUEST when its one request is all it has, or its whole state.
    fn ask(&self, epoch: Epoch) -> CentralizedMsg {
        match (&self.waiting[..], &self.holding[..]) {
            (&[stamp], []) => {
                CentralizedMsg::Request { epoch, stamp, mode: self.mode_of_request(stamp) }
            }
            _ => CentralizedMsg::StateReport { epoch, state: self.report() },
        }
    }

    /// This node's request `stamp` is granted with `fence`.
    fn enter(&mut self, stamp: Stamp, fence: Fence) {
        self.waiting.retain(|&s| s != stamp);
        self.holding.push(fence);
        if self.reading.remove(&stamp) {
            self.read_held.insert(fence);
        }
    }

    /// Whether the grant on loan here is in use.
    fn on_loan(&self) -> bool {
        self.loan.is_some_and(|l| self.holding.contains(&l.last))
    }

    /// Coordinator only: grants the head of the queue while the holders
    /// admit it.
    fn dispatch(&mut self, out: &mut Out<Centralized>) {
        let Some(mut m) = self.manager.take() else {
            return;
        };
        self.serve(&mut m, out);
        self.manager = Some(m);
    }

    /// [`dispatch`](Self::dispatch), with the manager taken out.
    fn serve(&mut self, m: &mut Manager, out: &mut Out<Centralized>) {
        if m.rebuilding() {
            return;
        }
        if !std::mem::replace(&mut m.ordered, true) {
            m.queue.make_contiguous().sort();
        }
        // A term whose fences have run out grants nothing more: the engine
        // sees the term spent and has the election open a new one.
        while m.grants < self.room {
            let Some(&(stamp, mode)) =
                m.queue.front().filter(|(_, mode)| m.admits(*mode, self.capacity))
            else {
                break;
            };
            m.queue.pop_front();
            m.grants += 1;
            let fence = Fence::new(m.epoch.0, m.grants);
            // Lent to a peer that asks again with nobody else waiting, if
            // the term's grant counter has room for the loan's fences. A
            // node whose clients hold or want other permits (it counts
            // sessions) gets plain grants: a loan is the node's one permit.
            let lend = self.lending
                && mode == Mode::Write
                && stamp.node != self.id
                && m.last == Some(stamp.node)
                && m.queue.is_empty()
                && !m.holders.values().any(|h| h.node == stamp.node)
                && m.grants - 1 + LOAN <= self.room;
            let lent_until = lend.then(|| {
                m.grants += LOAN - 1;
                Fence::new(m.epoch.0, m.grants)
            });
            m.last = Some(stamp.node);
            let loan = lent_until.map_or(Lent::No, Lent::Yes);
            let holder = Holder { node: stamp.node, fence, granted_for: Some(stamp), loan, mode };
            m.holders.insert(fence, holder);
            if stamp.node == self.id {
                self.enter(stamp, fence);
                out.grant(fence);
            } else {
                let clock = self.clock.tick();
                let epoch = m.epoch;
                let request = stamp;
                out.send(
                    stamp.node,
                    CentralizedMsg::Grant { epoch, request, fence, clock, lent_until },
                );
            }
        }
        // Someone waits with no room: recall the lock from whoever has it
        // on loan.
        if !m.queue.is_empty() {
            for holder in m.holders.values_mut() {
                if let Lent::Yes(until) = holder.loan {
                    holder.loan = Lent::Recalled(until);
                    let recall = CentralizedMsg::Recall { epoch: m.epoch, grant: holder.fence };
                    out.send(holder.node, recall);
                }
            }
        }
    }

    /// Hands the loan back to the coordinator it came from, if that is
    /// still the coordinator followed.
    fn return_loan(&mut self, out: &mut Out<Centralized>) {
        let Some(loan) = self.loan.take() else { return };
        if let Some((leader, epoch)) = self.view.filter(|&(_, e)| e == loan.epoch) {
            out.send(leader, CentralizedMsg::Release { epoch, fence: loan.grant });
        }
    }

    fn become_manager(&mut self, epoch: Epoch, out: &mut Out<Centralized>) {
        let mut m = Manager {
            epoch,
            awaiting: self.alive.clone(),
            holders: BTreeMap::new(),
            queue: VecDeque::new(),
            ordered: false,
            last: None,
            // Above every grant a forgotten manager of this epoch made.
            grants: self
                .remnant
                .filter(|f| f.major() == Fence::new(epoch.0, 0).major())
                .map_or(0, Fence::minor),
        };
        m.absorb(self.id, &self.report());
        self.manager = Some(m);
        out.broadcast(self.alive.iter().copied(), CentralizedMsg::StateQuery { epoch });
        self.dispatch(out);
    }

    /// The manager for `epoch`, if this node is it.
    fn manager_for(&mut self, epoch: Epoch) -> Option<&mut Manager> {
        self.manager.as_mut().filter(|m| m.epoch == epoch)
    }
}

impl Algorithm for Centralized {
    type Msg = CentralizedMsg;
    type Timer = NoTimer;

    fn handle_message(
        &mut self,
        _now: Time,
        from: NodeId,
        msg: CentralizedMsg,
        out: &mut Out<Centralized>,
    ) {
        match msg {
            CentralizedMsg::Request { epoch, stamp, mode } => {
                self.clock.observe(stamp.ts);
                // A stamp names its requester; one that names another node
                // is a confused or hostile peer and is ignored.
                if stamp.node != from {
                    return;
                }
                self.heard_of(epoch);
                if let Some(m) = self.manager_for(epoch) {
                    let state = match mode {
                        Mode::Write => Report::Waiting(stamp),
                        Mode::Read => {
                            Report::Modes { waiting: vec![(stamp, mode)], holding: Vec::new() }
                        }
                    };
                    m.absorb(from, &state);
                    self.dispatch(out);
                }
            }
            CentralizedMsg::Grant { epoch, request, fence, clock, lent_until } => {
                self.clock.observe(clock);
                if self.view != Some((from, epoch)) {
                    return; // from a coordinator this node no longer follows
                }
                if self.waiting.contains(&request) {
                    self.enter(request, fence);
                    // A loan's fences are the grant's term's. A plain grant
                    // beside a loan in use leaves the loan as it is.
                    let lent = lent_until.filter(|&u| u > fence && u.major() == fence.major());
                    if let Some(until) = lent {
                        self.loan =
                            Some(Loan { epoch, grant: fence, last: fence, until, recalled: false });
                    }
                    out.grant(fence);
                } else if self.holding.contains(&fence)
                    || self.loan.is_some_and(|l| l.grant == fence)
                {
                    // The same grant again, sent after a re-admission: taken
                    // already.
                } else {
                    // Not wanted (this node restarted, or has released it
                    // and asks again): hand it back so the coordinator does
                    // not wait on a holder that isn't. The fence keeps a
                    // second release of one grant from freeing another.
                    out.send(from, CentralizedMsg::Release { epoch, fence });
                }
            }
            CentralizedMsg::Recall { epoch, grant } => {
                if self.view != Some((from, epoch)) {
                    return; // from a coordinator this node no longer follows
                }
                let held = self.on_loan();
                let lent = self.loan.as_mut().filter(|l| l.epoch == epoch && l.grant == grant);
                match lent {
                    Some(loan) if held => loan.recalled = true,
                    Some(_) => self.return_loan(out),
                    // No such loan here (this node forgot the lock, or
                    // restarted): say so, or the coordinator waits on a
                    // holder that isn't. A node holding answers at its
                    // release.
                    None if !held => {
                        out.send(from, CentralizedMsg::Release { epoch, fence: grant });
                    }
                    None => {}
                }
            }
            CentralizedMsg::Release { epoch, fence } => {
                if let Some(m) = self.manager_for(epoch) {
                    if m.holders.get(&fence).is_some_and(|h| h.node == from) {
                        m.holders.remove(&fence);
                        self.dispatch(out);
                    }
                }
            }
            CentralizedMsg::StateQuery { epoch } => {
                if self.view.is_some_and(|(_, e)| epoch < e) {
                    return; // a query from an older term
                }
                self.view = Some((from, epoch));
                if from != self.id {
                    self.manager = None;
                }
                // The report replaces the loan: a holder on it holds with
                // the fence it reports, an idle one reports idle.
                self.loan = None;
                let state = self.report();
                out.send(from, CentralizedMsg::StateReport { epoch, state });
            }
            CentralizedMsg::StateReport { epoch, state } => {
                for (stamp, _) in state.waiting() {
                    self.clock.observe(stamp.ts);
                }
                // A report with another node's stamps, or more than the
                // lock's permits (reads beside writes on a lock of one), is
                // a confused or hostile peer's.
                let (reads, writes) = state.count();
                let too_many = if self.capacity > 1 {
                    reads + writes > self.capacity
                } else {
                    writes > 1 || reads > MAX_READS as usize
                };
                if state.waiting().any(|(s, _)| s.node != from) || too_many {
                    return;
                }
                if let Some(m) = self.manager_for(epoch) {
                    m.absorb(from, &state);
                    m.awaiting.remove(&from);
                    self.dispatch(out);
                }
            }
        }
    }

    fn handle_peer_up(&mut self, _now: Time, peer: NodeId, out: &mut Out<Centralized>) {
        self.alive.insert(peer);
        // A coordinator asks a peer it did not hear from when it took over
        // for its state: a restarted peer answers idle, but one that was
        // wrongly suspected may still hold, and must be counted.
        if let Some(m) = &self.manager {
            out.send(peer, CentralizedMsg::StateQuery { epoch: m.epoch });
        }
    }

    /// As to a newcomer, and if `peer` is the coordinator, what this node
    /// wants or holds: a coordinator that suspected this node dropped its
    /// request or its hold, and one that forgot the lock meanwhile would
    /// not ask for them again (the message makes the lock anew there, and
    /// the new manager rebuilds).
    ///
    /// As coordinator, it sends `peer` its grant again, before the query: a
    /// grant sent while the two were out of touch may have been lost with
    /// the session, and `peer` would report waiting with the request it
    /// answers, a report the manager takes for one older than the grant.
    /// The client takes the grant only for the request it still waits with.
    fn handle_peer_back(&mut self, now: Time, peer: NodeId, out: &mut Out<Centralized>) {
        if let Some(m) = &self.manager {
            let epoch = m.epoch;
            for holder in m.holders.values().filter(|h| h.node == peer) {
                if let Some(grant) = holder.grant(epoch, self.clock.now()) {
                    out.send(peer, grant);
                }
            }
        }
        self.handle_peer_up(now, peer, out);
        let Some((leader, epoch)) = self.view.filter(|(l, _)| *l == peer) else { return };
        // A coordinator that went down lent nothing that still stands.
        self.loan = None;
        if self.report() != Report::Idle {
            out.send(leader, self.ask(epoch));
        }
    }

    fn handle_peer_down(&mut self, _now: Time, peer: NodeId, out: &mut Out<Centralized>) {
        self.alive.remove(&peer);
        // A loan lives only while its coordinator is counted up.
        if self.view.is_some_and(|(leader, _)| leader == peer) {
            self.loan = None;
        }
        if let Some(m) = self.manager.as_mut() {
            m.forget(peer);
            self.dispatch(out);
        }
    }
}

impl MutexAlgorithm for Centralized {
    /// Asks for one more permit, as a write.
    fn handle_request(&mut self, now: Time, out: &mut Out<Centralized>) {
        self.handle_request_in(now, Mode::Write, out);
    }

    /// Asks for one more permit: the only one, or (`centralized` counts
    /// sessions) another beside those this node holds or waits for; a
    /// read, on a lock of one permit, beside any number of reads.
    fn handle_request_in(&mut self, _now: Time, mode: Mode, out: &mut Out<Centralized>) {
        let mode = if self.capacity > 1 { Mode::Write } else { mode };
        let reads = self.reading.len() + self.read_held.len();
        let full = match mode {
            Mode::Write => self.waiting.len() + self.holding.len() - reads >= self.capacity,
            Mode::Read => reads >= MAX_READS as usize,
        };
        if full {
            return;
        }
        // On loan and the loan not in use: enter with its next fence, no
        // message. A spent loan goes back, and the request goes out as any
        // other.
        if !self.on_loan() {
            if let Some(loan) = self.loan.as_mut() {
                let current = self.view.is_some_and(|(_, epoch)| epoch == loan.epoch);
                if let Some(fence) = loan.next().filter(|_| current) {
                    loan.last = fence;
                    self.holding.push(fence);
                    if mode == Mode::Read {
                        self.read_held.insert(fence);
                    }
                    out.grant(fence);
                    return;
                }
                self.return_loan(out);
            }
        }
        let stamp = Stamp { ts: self.clock.tick(), node: self.id };
        self.waiting.push(stamp);
        if mode == Mode::Read {
            self.reading.insert(stamp);
        }
        match self.view {
            Some((leader, _)) if leader == self.id => {
                let state = self.report();
                if let Some(m) = self.manager.as_mut() {
                    m.absorb(self.id, &state);
                }
                self.dispatch(out);
            }
            Some((leader, epoch)) => out.send(leader, self.ask(epoch)),
            // No coordinator yet: the request goes out once one is named.
            None => {}
        }
    }

    /// Leaves the oldest grant held here.
    fn handle_release(&mut self, now: Time, out: &mut Out<Centralized>) {
        if let Some(&fence) = self.holding.first() {
            self.handle_release_of(now, fence, out);
        }
    }

    fn handle_release_of(&mut self, _now: Time, fence: Fence, out: &mut Out<Centralized>) {
        let Some(at) = self.holding.iter().position(|&f| f == fence) else { return };
        self.holding.remove(at);
        self.read_held.remove(&fence);
        // A loan stays here until recalled.
        if let Some(loan) = self.loan.filter(|l| l.last == fence) {
            if loan.recalled {
                self.return_loan(out);
            }
            return;
        }
        match self.view {
            Some((leader, _)) if leader == self.id => {
                if let Some(m) = self.manager.as_mut() {
                    m.holders.remove(&fence);
                }
                self.dispatch(out);
            }
            Some((leader, epoch)) => out.send(leader, CentralizedMsg::Release { epoch, fence }),
            // The next coordinator's query will find this node idle.
            None => {}
        }
    }

    fn handle_coordinator(
        &mut self,
        _now: Time,
        leader: NodeId,
        epoch: Epoch,
        out: &mut Out<Centralized>,
    ) {
        // Nothing to do for the term already followed, and an older term
        // (an election result that arrived after a newer coordinator's
        // query) must not turn the view back.
        if self.view.is_some_and(|(_, current)| epoch <= current) {
            return;
        }
        self.view = Some((leader, epoch));
        self.loan = None;
        if self.early.is_some_and(|e| e <= epoch) {
            self.early = None;
        }
        if leader == self.id {
            self.become_manager(epoch, out);
        } else {
            self.manager = None;
            // A coordinator that rebuilds would ask anyway, but one that was
            // re-confirmed to a newcomer will not: tell it.
            if !self.waiting.is_empty() {
                out.send(leader, self.ask(epoch));
            }
        }
    }

    fn cs_state(&self) -> CsState {
        if !self.holding.is_empty() {
            CsState::Held
        } else if !self.waiting.is_empty() {
            CsState::Wanting
        } else {
            CsState::Idle
        }
    }

    fn mode_of(&self, fence: Fence) -> Mode {
        if self.read_held.contains(&fence) {
            Mode::Read
        } else {
            Mode::Write
        }
    }

    fn watermark(&self) -> u64 {
        self.clock.now()
    }

    /// Idle, and as coordinator with nobody holding or queued and the
    /// rebuild done. An idle loan is forgotten with the rest: a recall
    /// finds no loan and is answered by a release.
    fn forgettable(&self) -> bool {
        self.waiting.is_empty()
            && self.holding.is_empty()
            && self.early.is_none()
            && self
                .manager
                .as_ref()
                .is_none_or(|m| !m.rebuilding() && m.holders.is_empty() && m.queue.is_empty())
    }

    /// As coordinator, with someone queued: the term has granted its last
    /// fence.
    fn term_spent(&self) -> bool {
        self.manager.as_ref().is_some_and(|m| m.grants >= self.room && !m.queue.is_empty())
    }

    /// As coordinator: the fence of its last grant.
    fn remnant(&self) -> Option<u64> {
        self.manager.as_ref().map(|m| Fence::new(m.epoch.0, m.grants).0)
    }

    fn observe_remnant(&mut self, own: Option<u64>, floor: u64) {
        self.remnant = Some(Fence(own.unwrap_or(floor)));
    }

    fn observe_watermark(&mut self, watermark: u64) {
        self.clock.observe(watermark);
    }
}

#[cfg(test)]
mod tests {
    use super::CentralizedMsg::*;
    use super::*;
    use crate::outbox::Action;
    use crate::testkit::*;

    /// A node of a cluster 1..=n with every peer up.
    fn node(id: u32, members: u32, capacity: usize) -> Centralized {
        let mut cfg = AlgoConfig::for_test(id, members);
        cfg.capacity = capacity;
        with_up(Centralized::new(&cfg), cfg.peers())
    }

    /// A coordinator (id 3 of 3) that has finished rebuilding at epoch 1.
    fn serving_coordinator(capacity: usize) -> Centralized {
        let mut c = node(3, 3, capacity);
        let mut out = Out::<Centralized>::new();
        c.handle_coordinator(T, n(3), Epoch(1), &mut out);
        c.handle_message(T, n(1), StateReport { epoch: Epoch(1), state: Report::Idle }, &mut out);
        c.handle_message(T, n(2), StateReport { epoch: Epoch(1), state: Report::Idle }, &mut out);
        c
    }

    /// A node whose clients want several permits asks for each on its
    /// own: the first with a REQUEST, the next with its whole state (the
    /// coordinator replaces what it knew of the node), and releases each
    /// grant by its fence. The coordinator grants a node as many as there
    /// are permits, each its own fence.
    #[test]
    fn a_node_asks_for_a_permit_per_session_and_releases_each_by_fence() {
        let mut client = node(1, 3, 3);
        let mut out = Out::<Centralized>::new();
        client.handle_coordinator(T, n(3), Epoch(1), &mut out);
        client.handle_request(T, &mut out);
        client.handle_request(T, &mut out);
        let (a, b) = (stamp(1, 1), stamp(2, 1));
        let many = Report::Many { waiting: vec![a, b], holding: vec![] };
        assert_eq!(
            out.take(),
            vec![
                Action::Send {
                    to: n(3),
                    msg: Request { epoch: Epoch(1), stamp: a, mode: Mode::Write }
                },
                Action::Send {
                    to: n(3),
                    msg: StateReport { epoch: Epoch(1), state: many.clone() }
                },
            ]
        );
        let mut coordinator = serving_coordinator(3);
        coordinator.handle_message(
            T,
            n(1),
            Request { epoch: Epoch(1), stamp: a, mode: Mode::Write },
            &mut out,
        );
        coordinator.handle_message(T, n(1), StateReport { epoch: Epoch(1), state: many }, &mut out);
        let grants: Vec<(Stamp, Fence)> = out
            .take()
            .into_iter()
            .filter_map(|act| match act {
                Action::Send { msg: Grant { request, fence, .. }, .. } => Some((request, fence)),
                _ => None,
            })
            .collect();
        assert_eq!(grants, vec![(a, Fence::new(1, 1)), (b, Fence::new(1, 2))], "each its fence");
        for (request, fence) in &grants {
            let grant = Grant {
                epoch: Epoch(1),
                request: *request,
                fence: *fence,
                clock: 9,
                lent_until: None,
            };
            client.handle_message(T, n(3), grant, &mut out);
        }
        assert_eq!(
            out.take(),
            vec![Action::Grant { fence: grants[0].1 }, Action::Grant { fence: grants[1].1 }]
        );
        assert_eq!(
            client.report(),
            Report::Many { waiting: vec![], holding: vec![grants[0].1, grants[1].1] }
        );
        // The later grant goes first: the other stays held.
        client.handle_release_of(T, grants[1].1, &mut out);
        let release = Release { epoch: Epoch(1), fence: grants[1].1 };
        assert_eq!(out.take(), vec![Action::Send { to: n(3), msg: release }]);
        assert_eq!(client.report(), Report::Holding(grants[0].1));
        assert_eq!(client.cs_state(), CsState::Held);
    }

    #[test]
    fn remote_entry_costs_request_grant_release() {
        let mut client = node(1, 3, 1);
        let mut out = Out::<Centralized>::new();
        client.handle_coordinator(T, n(3), Epoch(1), &mut out);
        assert!(out.is_empty());
        client.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![Action::Send { to: n(3), msg: write(1, 1, 1) }]);
        let fence = Fence::new(1, 1);
        client.handle_message(
            T,
            n(3),
            Grant { epoch: Epoch(1), request: stamp(1, 1), fence, clock: 5, lent_until: None },
            &mut out,
        );
        assert_eq!(out.take(), vec![Action::Grant { fence }]);
        assert_eq!(client.cs_state(), CsState::Held);
        client.handle_release(T, &mut out);
        assert_eq!(
            out.take(),
            vec![Action::Send {
                to: n(3),
                msg: Release { epoch: Epoch(1), fence: Fence::new(1, 1) }
            }]
        );
    }

    #[test]
    fn new_coordinator_queries_every_live_peer_before_granting() {
        let mut c = node(3, 3, 1);
        let mut out = Out::<Centralized>::new();
        c.handle_coordinator(T, n(3), Epoch(4), &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::Send { to: n(1), msg: StateQuery { epoch: Epoch(4) } },
                Action::Send { to: n(2), msg: StateQuery { epoch: Epoch(4) } },
            ]
        );
        // A request while rebuilding is queued but not yet granted.
        c.handle_message(T, n(1), write(4, 7, 1), &mut out);
        assert!(out.is_empty());
        c.handle_message(
            T,
            n(1),
            StateReport { epoch: Epoch(4), state: Report::Waiting(stamp(7, 1)) },
            &mut out,
        );
        assert!(out.is_empty());
        c.handle_message(T, n(2), StateReport { epoch: Epoch(4), state: Report::Idle }, &mut out);
        let fence = Fence::new(4, 1);
        assert_eq!(
            out.take(),
            vec![Action::Send {
                to: n(1),
                msg: Grant {
                    epoch: Epoch(4),
                    request: stamp(7, 1),
                    fence,
                    clock: 8,
                    lent_until: None
                }
            }]
        );
    }

    #[test]
    fn rebuild_keeps_holders_and_orders_waiters_by_original_stamp() {
        let mut c = node(4, 4, 1);
        let mut out = Out::<Centralized>::new();
        c.handle_coordinator(T, n(4), Epoch(2), &mut out);
        out.take();
        // Node 1 still holds the lock granted by the dead coordinator; 2 and
        // 3 wait, 3 having asked first.
        let old = Fence::new(1, 9);
        c.handle_message(
            T,
            n(2),
            StateReport { epoch: Epoch(2), state: Report::Waiting(stamp(12, 2)) },
            &mut out,
        );
        c.handle_message(
            T,
            n(3),
            StateReport { epoch: Epoch(2), state: Report::Waiting(stamp(10, 3)) },
            &mut out,
        );
        c.handle_message(
            T,
            n(1),
            StateReport { epoch: Epoch(2), state: Report::Holding(old) },
            &mut out,
        );
        assert!(out.is_empty(), "the old holder still holds");
        c.handle_message(T, n(1), Release { epoch: Epoch(2), fence: old }, &mut out);
        assert_eq!(
            out.take(),
            vec![Action::Send {
                to: n(3),
                msg: Grant {
                    epoch: Epoch(2),
                    request: stamp(10, 3),
                    fence: Fence::new(2, 1),
                    clock: 13,
                    lent_until: None
                }
            }]
        );
        assert!(Fence::new(2, 1) > old, "the new epoch's fences exceed the old");
        c.handle_message(T, n(3), Release { epoch: Epoch(2), fence: Fence::new(2, 1) }, &mut out);
        assert_eq!(
            out.take(),
            vec![Action::Send {
                to: n(2),
                msg: Grant {
                    epoch: Epoch(2),
                    request: stamp(12, 2),
                    fence: Fence::new(2, 2),
                    clock: 14,
                    lent_until: None
                }
            }]
        );
    }

    #[test]
    fn a_term_out_of_fences_grants_no_more_until_the_next_term() {
        let mut c = serving_coordinator(1);
        let mut out = Out::<Centralized>::new();
        c.manager.as_mut().unwrap().grants = Fence::MINOR_MAX - 1;
        c.handle_message(T, n(1), write(1, 5, 1), &mut out);
        let last = Fence::new(1, Fence::MINOR_MAX);
        assert!(
            matches!(out.take()[..], [Action::Send { msg: Grant { fence, .. }, .. }] if fence == last)
        );
        assert!(!c.term_spent(), "nobody waits");
        c.handle_message(T, n(2), write(1, 6, 2), &mut out);
        c.handle_message(T, n(1), Release { epoch: Epoch(1), fence: last }, &mut out);
        assert!(out.is_empty(), "a repeated fence was granted: {:?}", out.take());
        assert!(c.term_spent());
        // The new term: rebuilt as after any change of coordinator, the
        // waiter granted with the new term's first fence.
        let next = Epoch(2);
        c.handle_coordinator(T, n(3), next, &mut out);
        out.take();
        let waiting = Report::Waiting(stamp(6, 2));
        c.handle_message(T, n(1), StateReport { epoch: next, state: Report::Idle }, &mut out);
        c.handle_message(T, n(2), StateReport { epoch: next, state: waiting }, &mut out);
        let first = Fence::new(2, 1);
        assert!(
            matches!(out.take()[..], [Action::Send { msg: Grant { fence, .. }, .. }] if fence == first)
        );
        assert!(first > last && !c.term_spent());
    }

    #[test]
    fn coordinator_grants_itself_without_messages() {
        let mut c = serving_coordinator(1);
        let mut out = Out::<Centralized>::new();
        c.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 1) }]);
        c.handle_release(T, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn fifo_queue_grants_in_arrival_order_not_stamp_order() {
        let mut c = serving_coordinator(1);
        let mut out = Out::<Centralized>::new();
        c.handle_message(T, n(1), write(1, 5, 1), &mut out);
        out.take();
        // Node 2 asks first, with a larger stamp; node 3's lagging clock
        // gives its later request a smaller one.
        c.handle_message(T, n(2), write(1, 9, 2), &mut out);
        c.handle_message(T, n(3), write(1, 2, 3), &mut out);
        assert!(out.is_empty(), "one holder at a time");
        c.handle_message(T, n(1), Release { epoch: Epoch(1), fence: Fence::new(1, 1) }, &mut out);
        assert!(matches!(out.take()[..], [Action::Send { to, msg: Grant { .. } }] if to == n(2)));
    }

    /// The nodes `out`'s grants went to, the coordinator's own as itself,
    /// taking every action.
    fn granted_to(out: &mut Out<Centralized>, me: NodeId) -> Vec<NodeId> {
        let grants = out.take().into_iter().filter_map(|a| match a {
            Action::Send { to, msg: Grant { .. } } => Some(to),
            Action::Grant { .. } => Some(me),
            _ => None,
        });
        grants.collect()
    }

    /// A REQUEST of `epoch`, stamped `(ts, node)`, in `mode`.
    fn request(epoch: u64, ts: u64, node: u32, mode: Mode) -> CentralizedMsg {
        Request { epoch: Epoch(epoch), stamp: stamp(ts, node), mode }
    }

    /// The same, to write.
    fn write(epoch: u64, ts: u64, node: u32) -> CentralizedMsg {
        request(epoch, ts, node, Mode::Write)
    }

    /// Readers adjacent in the queue enter together; a writer waits for
    /// every reader before it, then holds alone; a reader that asks after
    /// a waiting writer waits behind it, even while readers hold.
    #[test]
    fn readers_share_and_a_writer_waits_its_turn_in_the_queue() {
        let mut c = serving_coordinator(1);
        let mut out = Out::<Centralized>::new();
        c.handle_message(T, n(1), request(1, 5, 1, Mode::Read), &mut out);
        c.handle_message(T, n(2), request(1, 6, 2, Mode::Read), &mut out);
        assert_eq!(granted_to(&mut out, n(3)), vec![n(1), n(2)], "two readers at once");
        c.handle_message(T, n(1), Release { epoch: Epoch(1), fence: Fence::new(1, 1) }, &mut out);
        c.handle_message(T, n(1), request(1, 7, 1, Mode::Write), &mut out);
        assert!(granted_to(&mut out, n(3)).is_empty(), "the writer waits for n2's read");
        c.handle_request_in(T, Mode::Read, &mut out);
        assert!(granted_to(&mut out, n(3)).is_empty(), "no reader overtakes a waiting writer");
        c.handle_message(T, n(2), Release { epoch: Epoch(1), fence: Fence::new(1, 2) }, &mut out);
        assert_eq!(granted_to(&mut out, n(3)), vec![n(1)], "the writer, alone");
        c.handle_message(T, n(1), Release { epoch: Epoch(1), fence: Fence::new(1, 3) }, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 4) }]);
        assert_eq!(c.mode_of(Fence::new(1, 4)), Mode::Read);
    }

    /// A node reads for several sessions at once beside its one write
    /// permit, and a rebuilding coordinator learns each grant's and
    /// request's mode from the reports: readers it learns of share with
    /// the next reader, and a writer waits for them.
    #[test]
    fn modes_survive_a_rebuild() {
        let mut client = node(1, 3, 1);
        let mut out = Out::<Centralized>::new();
        client.handle_coordinator(T, n(3), Epoch(1), &mut out);
        client.handle_request_in(T, Mode::Read, &mut out);
        client.handle_request_in(T, Mode::Read, &mut out);
        client.handle_request_in(T, Mode::Write, &mut out);
        let (a, b, w) = (stamp(1, 1), stamp(2, 1), stamp(3, 1));
        let grant = |request, minor| Grant {
            epoch: Epoch(1),
            request,
            fence: Fence::new(1, minor),
            clock: 9,
            lent_until: None,
        };
        out.take();
        client.handle_message(T, n(3), grant(a, 1), &mut out);
        client.handle_message(T, n(3), grant(b, 2), &mut out);
        assert_eq!(out.take().len(), 2, "both reads entered");
        assert_eq!(client.cs_state(), CsState::Held);
        client.handle_message(T, n(2), StateQuery { epoch: Epoch(2) }, &mut out);
        let report = Report::Modes {
            waiting: vec![(w, Mode::Write)],
            holding: vec![(Fence::new(1, 1), Mode::Read), (Fence::new(1, 2), Mode::Read)],
        };
        let expected = StateReport { epoch: Epoch(2), state: report.clone() };
        assert_eq!(out.take(), vec![Action::Send { to: n(2), msg: expected }]);
        // The new coordinator, n2, rebuilds from that report and n3's.
        let mut coordinator = node(2, 3, 1);
        coordinator.handle_coordinator(T, n(2), Epoch(2), &mut out);
        out.take();
        coordinator.handle_message(
            T,
            n(1),
            StateReport { epoch: Epoch(2), state: report },
            &mut out,
        );
        let n3 = Report::Modes { waiting: vec![(stamp(9, 3), Mode::Read)], holding: vec![] };
        coordinator.handle_message(T, n(3), StateReport { epoch: Epoch(2), state: n3 }, &mut out);
        assert!(granted_to(&mut out, n(2)).is_empty(), "n3's read waits behind n1's write");
        for minor in [1, 2] {
            let release = Release { epoch: Epoch(2), fence: Fence::new(1, minor) };
            coordinator.handle_message(T, n(1), release, &mut out);
        }
        assert_eq!(granted_to(&mut out, n(2)), vec![n(1)], "the writer once the reads are done");
    }

    /// On a semaphore a read is a write: every permit alike.
    #[test]
    fn a_read_on_a_semaphore_takes_a_permit_like_a_write() {
        let mut c = serving_coordinator(2);
        let mut out = Out::<Centralized>::new();
        c.handle_message(T, n(1), request(1, 5, 1, Mode::Read), &mut out);
        c.handle_message(T, n(2), request(1, 6, 2, Mode::Write), &mut out);
        c.handle_request_in(T, Mode::Read, &mut out);
        assert_eq!(granted_to(&mut out, n(3)), vec![n(1), n(2)], "two permits, two holders");
        assert_eq!(c.cs_state(), CsState::Wanting);
    }

    /// A report of more than one write, or a request in read mode that
    /// does not name its sender, changes nothing.
    #[test]
    fn a_report_of_two_writes_on_a_lock_of_one_is_ignored() {
        let mut c = serving_coordinator(1);
        let mut out = Out::<Centralized>::new();
        let two = Report::Modes {
            waiting: vec![(stamp(1, 1), Mode::Write), (stamp(2, 1), Mode::Write)],
            holding: vec![],
        };
        c.handle_message(T, n(1), StateReport { epoch: Epoch(1), state: two }, &mut out);
        c.handle_message(T, n(1), request(1, 3, 2, Mode::Read), &mut out);
        assert!(out.is_empty());
        c.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 1) }]);
    }

    #[test]
    fn capacity_k_admits_k_holders() {
        let mut c = serving_coordinator(2);
        let mut out = Out::<Centralized>::new();
        c.handle_message(T, n(1), write(1, 5, 1), &mut out);
        c.handle_message(T, n(2), write(1, 6, 2), &mut out);
        assert_eq!(out.take().len(), 2, "two grants");
        c.handle_request(T, &mut out);
        assert!(out.is_empty(), "third must wait");
        c.handle_message(T, n(2), Release { epoch: Epoch(1), fence: Fence::new(1, 2) }, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 3) }]);
    }

    #[test]
    fn crashed_holder_frees_the_lock_and_crashed_waiter_leaves_the_queue() {
        let mut c = serving_coordinator(1);
        let mut out = Out::<Centralized>::new();
        c.handle_message(T, n(1), write(1, 5, 1), &mut out);
        c.handle_message(T, n(2), write(1, 6, 2), &mut out);
        c.handle_request(T, &mut out);
        out.take();
        c.handle_peer_down(T, n(2), &mut out);
        assert!(out.is_empty(), "a waiter leaving frees nothing");
        c.handle_peer_down(T, n(1), &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 2) }]);
    }

    #[test]
    fn unwanted_grant_is_handed_back() {
        let mut client = node(1, 3, 1);
        let mut out = Out::<Centralized>::new();
        client.handle_coordinator(T, n(3), Epoch(1), &mut out);
        client.handle_message(
            T,
            n(3),
            Grant {
                epoch: Epoch(1),
                request: stamp(1, 1),
                fence: Fence::new(1, 1),
                clock: 1,
                lent_until: None,
            },
            &mut out,
        );
        assert_eq!(
            out.take(),
            vec![Action::Send {
                to: n(3),
                msg: Release { epoch: Epoch(1), fence: Fence::new(1, 1) }
            }]
        );
    }

    #[test]
    fn waiting_client_resends_its_request_to_a_new_coordinator() {
        let mut client = node(1, 3, 1);
        let mut out = Out::<Centralized>::new();
        client.handle_request(T, &mut out);
        assert!(out.is_empty(), "no coordinator yet");
        client.handle_coordinator(T, n(2), Epoch(3), &mut out);
        assert_eq!(out.take(), vec![Action::Send { to: n(2), msg: write(3, 1, 1) }]);
        // A grant from the previous coordinator is not taken.
        client.handle_message(
            T,
            n(3),
            Grant {
                epoch: Epoch(1),
                request: stamp(1, 1),
                fence: Fence::new(1, 1),
                clock: 1,
                lent_until: None,
            },
            &mut out,
        );
        assert!(out.is_empty());
        assert_eq!(client.cs_state(), CsState::Wanting);
    }

    #[test]
    fn a_waiting_report_older_than_its_grant_does_not_grant_twice() {
        let mut c = serving_coordinator(1);
        let mut out = Out::<Centralized>::new();
        // The request, then the report sent before its grant arrived.
        c.handle_message(T, n(2), write(1, 6, 2), &mut out);
        assert_eq!(out.take().len(), 1, "one grant");
        let report = StateReport { epoch: Epoch(1), state: Report::Waiting(stamp(6, 2)) };
        c.handle_message(T, n(2), report, &mut out);
        assert!(out.is_empty(), "no second grant");
        c.handle_request(T, &mut out);
        assert!(out.is_empty(), "node 2 still holds");
    }

    #[test]
    fn a_grant_lost_out_of_touch_is_sent_again_on_readmission() {
        let mut c = serving_coordinator(1);
        let mut out = Out::<Centralized>::new();
        c.handle_message(T, n(2), write(1, 6, 2), &mut out);
        let sent = out.take();
        assert!(matches!(sent[..], [Action::Send { msg: Grant { .. }, .. }]), "{sent:?}");
        // The session broke and the grant with it; node 2, which had
        // suspected the coordinator, asks and reports waiting once more.
        c.handle_peer_back(T, n(2), &mut out);
        let again = out.take();
        assert_eq!(again[0], sent[0], "the same grant first, then the query");
        assert!(matches!(again[1..], [Action::Send { msg: StateQuery { .. }, .. }]));
        let report = StateReport { epoch: Epoch(1), state: Report::Waiting(stamp(6, 2)) };
        c.handle_message(T, n(2), report, &mut out);
        assert!(out.is_empty(), "no second grant");

        let mut client = node(2, 3, 1);
        client.handle_coordinator(T, n(3), Epoch(1), &mut out);
        client.observe_watermark(5);
        client.handle_request(T, &mut out);
        assert_eq!(client.report(), Report::Waiting(stamp(6, 2)));
        out.take();
        let Action::Send { msg: grant, .. } = again[0].clone() else { unreachable!() };
        client.handle_message(T, n(3), grant, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 1) }]);
    }

    #[test]
    fn a_grant_copy_is_taken_once_and_handed_back_past_its_request() {
        let mut client = node(1, 3, 1);
        let mut out = Out::<Centralized>::new();
        client.handle_coordinator(T, n(3), Epoch(1), &mut out);
        client.handle_request(T, &mut out);
        out.take();
        let fence = Fence::new(1, 1);
        let grant =
            Grant { epoch: Epoch(1), request: stamp(1, 1), fence, clock: 1, lent_until: None };
        client.handle_message(T, n(3), grant.clone(), &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence }]);
        client.handle_message(T, n(3), grant.clone(), &mut out);
        assert!(out.is_empty(), "a copy of the grant held is ignored");
        client.handle_release(T, &mut out);
        client.handle_request(T, &mut out);
        out.take();
        // Asking again, a copy of the old grant is not taken for the new
        // request: it is handed back by its fence.
        client.handle_message(T, n(3), grant, &mut out);
        assert_eq!(
            out.take(),
            vec![Action::Send { to: n(3), msg: Release { epoch: Epoch(1), fence } }]
        );
        assert_eq!(client.cs_state(), CsState::Wanting);
    }

    #[test]
    fn a_release_of_another_grant_frees_nothing() {
        let mut c = serving_coordinator(1);
        let mut out = Out::<Centralized>::new();
        c.handle_message(T, n(2), write(1, 6, 2), &mut out);
        out.take();
        c.handle_request(T, &mut out);
        let wrong = Release { epoch: Epoch(1), fence: Fence::new(1, 7) };
        c.handle_message(T, n(2), wrong, &mut out);
        assert!(out.is_empty(), "node 2's grant (1, 1) still holds");
        c.handle_message(T, n(2), Release { epoch: Epoch(1), fence: Fence::new(1, 1) }, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 2) }]);
    }

    #[test]
    fn an_older_coordinator_announcement_does_not_turn_the_view_back() {
        let mut client = node(1, 3, 1);
        let mut out = Out::<Centralized>::new();
        // A newer coordinator's query arrives before the older election result.
        client.handle_message(T, n(3), StateQuery { epoch: Epoch(5) }, &mut out);
        out.take();
        client.handle_coordinator(T, n(3), Epoch(4), &mut out);
        client.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![Action::Send { to: n(3), msg: write(5, 1, 1) }]);
    }
}
