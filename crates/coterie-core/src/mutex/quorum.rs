//! Quorum locking: the machinery `maekawa` and `tree-quorum` share. Not an
//! algorithm by itself: an algorithm is this machinery plus a
//! [`QuorumRule`] saying whose permission a node needs.
//!
//! **Roles.** Every node plays two parts. As a *requester* it asks every
//! member of its quorum for permission and enters once all have given it.
//! As an *arbiter* it gives its permission to one request at a time, and
//! queues the rest in timestamp order. Because any two quorums share a
//! member, and that member has granted only one of them, two nodes are
//! never inside together. A node is usually a member of its own quorum; it
//! asks itself without a message.
//!
//! **Deadlock.** Grants in different orders at different arbiters could
//! leave a cycle of requesters each holding what the next one needs.
//! Maekawa's cure is implemented: an arbiter holding its grant for a
//! younger request than one that arrives INQUIREs of the holder; an arbiter
//! that queues a request behind an older one says FAILED; a requester that
//! knows it cannot get everything yet (it has a FAILED, or has already
//! yielded) YIELDs the permission it was inquired about, and the oldest
//! request in the cluster always makes progress. This relies on FIFO
//! links.
//!
//! **Fences.** Entries do not follow timestamp order here (a younger
//! request can lock everything before an older one arrives), so a stamp is
//! not a fence by itself. Each arbiter remembers `high`, the largest stamp
//! among the grants it made that could have been used to enter (released,
//! or whose holder crashed; not the ones yielded back), and sends it with
//! every grant. A requester enters only if its stamp is above every `high`
//! it was sent; otherwise it takes a fresh stamp above them, tells every
//! member (RESTAMP), and enters once each has acknowledged (RESTAMPED).
//! Two entries share an arbiter, which granted the earlier one first and
//! sent the later one a `high` at least the earlier one's final stamp: so
//! the stamp, used as the fence, rises with every entry, also when a
//! holder crashes inside or its RELEASE is lost (its arbiters count its
//! stamp as used). A RESTAMP is needed only when the requester's stamp
//! fell behind an entry that went first; stamps are hybrid logical clocks
//! (below), so at light load that is rare.
//!
//! **Crashes and partitions.** Suspicion never frees a permission: an
//! arbiter whose holder is reported down keeps the permission with it, so
//! no timeout can ever let two nodes in, and a partition costs liveness,
//! never safety. Whenever a node comes up in another's view (it restarted,
//! or a partition healed), the other sends it a RECOVER saying whether it
//! holds or waits for that node's permission; an arbiter whose holder says
//! it no longer holds (it restarted with nothing, or released while cut
//! off) takes the permission back, counted as used. Messages lost while a
//! peer was out of reach are made good the same way: a requester still
//! waiting for a permission it was granted gets the GRANT again, and the
//! FAILED and INQUIRE it may have missed are sent again. Grants are
//! numbered per arbiter, so a late copy of a grant already given back
//! (YIELD) never counts. The price: a holder
//! that crashes and never returns blocks its arbiters' permission for good,
//! as in Maekawa's original. A requester whose quorum member goes down
//! drops that member's permission and asks the rule for a quorum of the
//! nodes up: a tree quorum routes round the failed member (any quorum
//! will do, as every arbiter still grants one request at a time).
//! Maekawa's fixed set has none without it, so the requester withdraws
//! its request (CANCEL to every member it asked) and asks again once the
//! member is back: meanwhile it holds no permission that a node whose set
//! does not contain the failed one needs. (Holding them while it waited,
//! as the textbook's requester does, stalled every node of a five-node
//! grid while any one was down.)
//!
//! **Readers and writers.** A request says whether it reads or writes,
//! and an arbiter gives its permission to one writer or to any number of
//! readers at once. A read asks the rule's *read quorum*, which must meet
//! every write quorum, whatever either requester saw up, but need not meet
//! another read quorum ([`QuorumRule::read_quorum`]; where the rule has
//! nothing smaller, it is the write quorum). So two nodes are inside
//! together only if both read. An arbiter grants from the front of its
//! queue: the oldest request alone if it writes and nobody holds, the
//! oldest reads together, up to the first write queued, while only reads
//! hold. No read is let in ahead of an older write queued there, so a
//! steady stream of later readers cannot starve a writer: their stamps,
//! hybrid clocks, soon pass its stamp. The deadlock cure works on
//! conflicts. An arbiter INQUIREs of every holder younger than a
//! conflicting request that nothing older holds up there, and says FAILED
//! to every queued request behind an older one it conflicts with; the
//! oldest request in the cluster still makes progress. Fences: each
//! arbiter keeps a second mark beside `high`, the largest stamp among
//! used *write* grants, and a GRANT carries the mark its request must
//! pass. So a writer's fence is above every earlier grant's and a
//! reader's above every earlier writer's. A RECOVER carries the mode, so
//! a restarted arbiter takes back every reader that still holds. Entries
//! keep no request order, reads as writes: a read that holds every
//! permission it needs enters, even while an older write is on its way
//! to one of its arbiters. Read and write quorums come from replicated
//! data (Gifford, "Weighted voting for replicated data", SOSP 1979);
//! sharing an arbiter among readers, with Maekawa's FAILED, INQUIRE and
//! YIELD taken over to conflicts, is this project's.
//!
//! **Many locks.** Each lock name has an instance of its own, arbiter and
//! requester, at every node that uses it. One made for a lock new to this
//! node knows its peers have nothing of it to recover, and sends no
//! RECOVER ([`handle_adopt`](crate::MutexAlgorithm::handle_adopt)); one
//! that is idle, its permission free and nobody queued, is forgotten, and
//! the next one starts its high-water mark at its clock, which covers
//! every stamp the node has seen.
//!
//! **Restarts.** Who may hold an arbiter's permission is the one thing
//! that must outlive it. Without it a restarted arbiter could learn of its
//! holder only from the holder's RECOVER, and a holder silent at that
//! moment (stopped, or cut off) would later use a permission given again
//! meanwhile: the simulator found this with two crashes and two pauses. So
//! a GRANT to another node leaves only once stable storage names that
//! node ([`durable_state`](MutexAlgorithm::durable_state)). The record
//! names the holder *and the request next in line*, written ahead while
//! the holder is inside: when the RELEASE comes, the next GRANT is already
//! covered and leaves at once, and the record naming its successor
//! follows it out ([`covered_by`](MutexAlgorithm::covered_by)). It also
//! names the last few holders ([`RECENT`]), likely to ask again: under
//! steady load the same nodes take turns, the record stops changing, and
//! no flush is on the path of an entry at all; one is only when a node
//! not named asks. A node seen down is struck off (unless it holds). The price: a
//! restarted arbiter grants nothing until each node written down has sent
//! its RECOVER, live or not (one of them may hold the permission), so one
//! that crashed together with the arbiter and never returns blocks it, as
//! a holder that never returns does in Maekawa's original. Grant numbers are
//! reserved [`GRANT_RESERVE`] at a time, so a restarted arbiter numbers
//! its grants above every earlier one. A grant to the node's own request
//! is neither written down nor numbered under the reserve: it crosses no
//! link and dies with the run. So an arbiter that has granted no other
//! node keeps no record at all, and a new lock is written down only at
//! the arbiters that grant it to another node. It also waits until it
//! has joined and every live peer has sent its RECOVER; its `high`
//! restarts at least at its Lamport clock, which starts above the
//! engine's stored watermark reserve and has by then caught up with every
//! peer's (so its own request, which died with it and is never written
//! down, counts as used too). A driver without stable storage (a node run
//! without a state directory) keeps the rest of the guarantees, and
//! stamps stay above the shared clock's milliseconds (hybrid, below).

use crate::algorithm::AlgoConfig;
use crate::outbox::{message_kinds, NoTimer, Outbox, Time};
use crate::types::{CsState, Epoch, Fence, LamportClock, Mode, NodeId, Stamp};
use crate::{Algorithm, MutexAlgorithm};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Debug;

/// Whose permission a node needs: the one thing that differs between the
/// quorum algorithms.
pub trait QuorumRule: Debug + Clone + std::hash::Hash + Send + 'static {
    /// The rule for `cfg.id` in the cluster `cfg.members`.
    fn new(cfg: &AlgoConfig) -> Self;

    /// The quorum this node asks to write, given the nodes up (this one
    /// included), or `None` if no quorum can be formed from them (the
    /// requester then withdraws its request and asks again when a node
    /// comes up). Any two meet, whatever each requester saw up.
    fn quorum(&self, up: &BTreeSet<NodeId>) -> Option<BTreeSet<NodeId>>;

    /// The quorum this node asks to read. Two reads need not meet, but a
    /// read must meet every write quorum any node may ask, whatever each
    /// saw up. The default is the write quorum, which always does.
    fn read_quorum(&self, up: &BTreeSet<NodeId>) -> Option<BTreeSet<NodeId>> {
        self.quorum(up)
    }
}

/// The messages of [`QuorumLock`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum QuorumMsg {
    /// Requester to arbiter: may I? (A new stamp from the same requester
    /// replaces its earlier request.)
    Request {
        /// The request's stamp.
        stamp: Stamp,
        /// To read (shared with other readers) or to write (alone).
        mode: Mode,
    },
    /// Arbiter to requester: you have my permission.
    Grant {
        /// The request granted.
        to: Stamp,
        /// The largest stamp among this arbiter's earlier grants that could
        /// have been used to enter and that conflict with this one: every
        /// earlier grant for a write, the writes for a read.
        high: Option<Stamp>,
        /// Which of this arbiter's grants it is: a copy sent again carries
        /// the same number, so a requester that gave the grant back can
        /// tell a stale copy from a new grant.
        seq: u64,
    },
    /// Arbiter to requester: an older request is ahead of yours here.
    Failed {
        /// The request refused for now.
        to: Stamp,
    },
    /// Arbiter to the holder of its permission: an older request waits;
    /// can you give my permission back?
    Inquire {
        /// The request the permission was granted to.
        to: Stamp,
    },
    /// Requester to arbiter: your permission back; keep my request queued.
    Yield {
        /// The request yielding.
        stamp: Stamp,
    },
    /// Requester to arbiter: I hold your permission and enter under this
    /// larger stamp (the one to count as used).
    Restamp {
        /// The stamp the permission was granted to.
        old: Stamp,
        /// The stamp entered under.
        new: Stamp,
    },
    /// Arbiter to requester: your permission now stands under this stamp.
    Restamped {
        /// The new stamp.
        stamp: Stamp,
    },
    /// Requester to arbiter: done with your permission.
    Release {
        /// The request that entered.
        stamp: Stamp,
    },
    /// Requester to arbiter: forget my request (not used to enter; the
    /// requester chose another quorum).
    Cancel {
        /// The request withdrawn.
        stamp: Stamp,
    },
    /// To a node that came up in the sender's view (restarted, or back
    /// from a partition): what the sender has of its arbiter.
    Recover {
        /// The sender holds this arbiter's permission for this request
        /// (granted, or inside the critical section with it).
        holding: Option<Stamp>,
        /// The sender waits for this arbiter's permission for this request.
        waiting: Option<Stamp>,
        /// The mode of the request held or waited for.
        mode: Mode,
        /// Answer with your own RECOVER: the sender may have forgotten
        /// your request while you were out of its view.
        ask: bool,
    },
}

message_kinds!(QuorumMsg {
    Request => "request",
    Grant => "grant",
    Failed => "failed",
    Inquire => "inquire",
    Yield => "yield",
    Restamp => "restamp",
    Restamped => "restamped",
    Release => "release",
    Cancel => "cancel",
    Recover => "recover",
});

/// A request under way.
#[derive(Debug, Clone, Hash)]
struct Want {
    stamp: Stamp,
    /// To read or to write: which quorum is asked, and what it shares.
    mode: Mode,
    /// The members asked; `None` while no quorum can be formed.
    quorum: Option<BTreeSet<NodeId>>,
    granted: BTreeSet<NodeId>,
    /// Members that said FAILED, or that this node yielded to, since their
    /// last grant: proof that the request cannot complete yet.
    blocked: BTreeSet<NodeId>,
    /// Members that inquired while nothing proved the request blocked.
    inquired: BTreeSet<NodeId>,
    /// The largest `high` any grant carried.
    high: Option<Stamp>,
    /// With every permission in hand but a stamp too small: the members
    /// still to acknowledge the new stamp (RESTAMPED) before it enters.
    restamping: Option<BTreeSet<NodeId>>,
    /// The number of the grant held from each member.
    seqs: BTreeMap<NodeId, u64>,
    /// The number of the last grant given back to each member (YIELD).
    spent: BTreeMap<NodeId, u64>,
}

impl Want {
    /// Stops counting on anything `peer` granted or said: it went down, or
    /// came back having perhaps forgotten it. A RESTAMP under way needs
    /// every permission in hand, so it is off too: the request goes on
    /// under its new stamp, and enters once all grant that.
    fn forget(&mut self, peer: NodeId) {
        self.granted.remove(&peer);
        self.blocked.remove(&peer);
        self.inquired.remove(&peer);
        // Grant numbers are compared per run of the arbiter: whatever a
        // restarted one sends is counted anew.
        self.seqs.remove(&peer);
        self.spent.remove(&peer);
        self.restamping = None;
    }
}

#[derive(Debug, Clone, Hash)]
enum Requester {
    Idle,
    Wanting(Want),
    Held { stamp: Stamp, mode: Mode, quorum: BTreeSet<NodeId> },
}

/// How many grant numbers an arbiter reserves in stable storage at a
/// time: a restarted arbiter numbers its grants above the reserve, so one
/// record in this many is written for the numbers alone.
const GRANT_RESERVE: u64 = 1024;

/// How many of the latest holders an arbiter keeps written down besides
/// the current one and the next in line: under steady load the same few
/// nodes take turns, and once all are named no grant waits for a flush.
const RECENT: usize = 4;

/// What an arbiter keeps in stable storage.
#[derive(Debug, Serialize, Deserialize, Clone, Hash)]
struct Durable {
    /// Every other node that may hold this arbiter's permission: its
    /// holder, and the request next in line, written down ahead.
    may_hold: BTreeSet<NodeId>,
    /// Grant numbers up to this one may have been used.
    grants: u64,
}

/// A grant of an arbiter's permission, held by the request it names.
#[derive(Debug, Clone, Copy, Hash)]
struct Holding {
    mode: Mode,
    /// The grant's number: a copy sent again carries it too.
    seq: u64,
}

/// The arbiter's side of one node.
#[derive(Debug, Default, Clone, Hash)]
struct Arbiter {
    /// The requests holding this arbiter's permission: one writer, or any
    /// number of readers (at most one request of each node).
    holders: BTreeMap<Stamp, Holding>,
    /// Requests waiting, oldest first, each with its mode.
    queue: BTreeMap<Stamp, Mode>,
    /// Holders an INQUIRE is out for, about their current grant.
    inquired: BTreeSet<Stamp>,
    /// Queued requests already told FAILED (or that yielded).
    failed: BTreeSet<Stamp>,
    /// The largest stamp among grants that may have been used to enter.
    high: Option<Stamp>,
    /// The same among write grants alone: what a reader must be above.
    write_high: Option<Stamp>,
    /// The other nodes that held the permission last (at most
    /// [`RECENT`]), oldest first: written down, as they are likely to ask
    /// again.
    recent: VecDeque<NodeId>,
    /// The number of the latest grant.
    grants: u64,
    /// Grant numbers reserved in stable storage: the latest grant's at
    /// most.
    reserved: u64,
    /// Nodes that the previous run wrote down as perhaps holding its
    /// permission and whose RECOVER this run has not had yet.
    awaited: BTreeSet<NodeId>,
    /// Whether it may grant: it has joined and heard every live peer's
    /// RECOVER.
    ready: bool,
    /// Peers whose RECOVER this run of the arbiter has had.
    reported: BTreeSet<NodeId>,
}

/// A quorum-locking mutual-exclusion algorithm; see the module
/// documentation and [`QuorumRule`].
#[derive(Debug, Clone, Hash)]
pub struct QuorumLock<R> {
    id: NodeId,
    /// Where `now` starts on the cluster's shared clock.
    wall_origin: std::time::Duration,
    /// The `now` of the input being handled.
    now: Time,
    rule: R,
    clock: LamportClock,
    /// Peers up (this node not included).
    alive: BTreeSet<NodeId>,
    joined: bool,
    me: Requester,
    arbiter: Arbiter,
    /// Messages to this node itself, handled without the network.
    local: VecDeque<QuorumMsg>,
    /// The other nodes granted in the step under way, which the record
    /// must name before their GRANTs leave.
    step_grants: BTreeSet<NodeId>,
}

impl<R: QuorumRule> QuorumLock<R> {
    /// A node with nobody known to be up yet, its arbiter restored from
    /// `cfg.restored` if the previous run left anything readable there.
    pub fn new(cfg: &AlgoConfig) -> Self {
        let mut arbiter = Arbiter::default();
        if let Some(Ok(d)) = crate::Restored::mutex_of(cfg).map(crate::wire::decode::<Durable>) {
            arbiter.grants = d.grants;
            arbiter.reserved = d.grants;
            // Each of them says in its RECOVER whether it holds. (A grant
            // to this node's own request died with the previous run, and
            // is never written down.)
            arbiter.awaited = d.may_hold;
            arbiter.awaited.remove(&cfg.id);
        }
        QuorumLock {
            id: cfg.id,
            wall_origin: cfg.wall_origin,
            now: Time::ZERO,
            rule: R::new(cfg),
            clock: LamportClock::default(),
            alive: BTreeSet::new(),
            joined: false,
            me: Requester::Idle,
            arbiter,
            local: VecDeque::new(),
            step_grants: BTreeSet::new(),
        }
    }

    /// Starts a step: an input handled at `now`.
    fn begin(&mut self, now: Time) {
        self.now = now;
        self.step_grants.clear();
    }

    /// Gives the permission to the request `to` under a new grant number,
    /// and sends its GRANT.
    fn grant(&mut self, to: Stamp, mode: Mode, out: &mut Outbox<QuorumMsg>) {
        let a = &mut self.arbiter;
        a.grants += 1;
        a.holders.insert(to, Holding { mode, seq: a.grants });
        a.inquired.remove(&to);
        a.failed.remove(&to);
        self.send_grant(to, out);
    }

    /// Sends the GRANT of the permission `to` holds (a new grant, or a
    /// copy of one, with the same number), with the high-water mark its
    /// mode must pass, reserving grant numbers in the record when they
    /// run out.
    fn send_grant(&mut self, to: Stamp, out: &mut Outbox<QuorumMsg>) {
        let a = &mut self.arbiter;
        let Some(&Holding { mode, seq }) = a.holders.get(&to) else {
            return;
        };
        // A grant to this node's own request crosses no link and dies with
        // the run, so no later copy of it can be mistaken for a new one:
        // only a grant sent to another node must be numbered under the
        // stored reserve.
        if to.node != self.id && a.grants > a.reserved {
            a.reserved = a.grants + GRANT_RESERVE;
        }
        let high = match mode {
            Mode::Write => a.high,
            Mode::Read => a.write_high,
        };
        if to.node != self.id {
            self.step_grants.insert(to.node);
        }
        self.send(to.node, QuorumMsg::Grant { to, high, seq }, out);
    }

    /// A new stamp: a Lamport timestamp that is also at least the shared
    /// clock's milliseconds (a hybrid logical clock), so that stamps keep
    /// rising across a crash of every node that knew the last one.
    fn next_stamp(&mut self, now: Time) -> Stamp {
        self.clock.observe((self.wall_origin + now).as_millis() as u64);
        Stamp { ts: self.clock.tick(), node: self.id }
    }

    fn up(&self) -> BTreeSet<NodeId> {
        let mut up = self.alive.clone();
        up.insert(self.id);
        up
    }

    fn send(&mut self, to: NodeId, msg: QuorumMsg, out: &mut Outbox<QuorumMsg>) {
        if to == self.id {
            self.local.push_back(msg);
        } else {
            out.send(to, msg);
        }
    }

    /// Handles what this node sent itself.
    fn drain_local(&mut self, now: Time, out: &mut Outbox<QuorumMsg>) {
        while let Some(msg) = self.local.pop_front() {
            self.on_message(now, self.id, msg, out);
        }
    }

    // ---- requester ------------------------------------------------------

    /// The quorum a request in `mode` asks, with the nodes up now.
    fn quorum_for(&self, mode: Mode) -> Option<BTreeSet<NodeId>> {
        let up = self.up();
        match mode {
            Mode::Write => self.rule.quorum(&up),
            Mode::Read => self.rule.read_quorum(&up),
        }
    }

    /// Stamps a fresh request in `mode` and asks a quorum. A request
    /// already under way is replaced: arbiters asked again replace it, the
    /// others are told to forget it.
    fn ask(&mut self, now: Time, mode: Mode, out: &mut Outbox<QuorumMsg>) {
        let old = match &self.me {
            Requester::Wanting(w) => Some((w.stamp, w.quorum.clone().unwrap_or_default())),
            _ => None,
        };
        let stamp = self.next_stamp(now);
        let quorum = self.quorum_for(mode);
        if let Some((old_stamp, old_quorum)) = old {
            self.cancel_outside(old_stamp, &old_quorum, quorum.as_ref(), out);
        }
        for &a in quorum.iter().flatten() {
            self.send(a, QuorumMsg::Request { stamp, mode }, out);
        }
        self.me = Requester::Wanting(Want {
            stamp,
            mode,
            quorum,
            granted: BTreeSet::new(),
            blocked: BTreeSet::new(),
            inquired: BTreeSet::new(),
            high: None,
            restamping: None,
            seqs: BTreeMap::new(),
            spent: BTreeMap::new(),
        });
    }

    /// Tells the members of `old` that are not in `new` to drop the
    /// request `stamp`.
    fn cancel_outside(
        &mut self,
        stamp: Stamp,
        old: &BTreeSet<NodeId>,
        new: Option<&BTreeSet<NodeId>>,
        out: &mut Outbox<QuorumMsg>,
    ) {
        for &a in old {
            if new.is_none_or(|q| !q.contains(&a)) && (a == self.id || self.alive.contains(&a)) {
                self.send(a, QuorumMsg::Cancel { stamp }, out);
            }
        }
    }

    /// What this node has of `arbiter`'s permission: (holding, waiting).
    fn held_of(&self, arbiter: NodeId) -> (Option<Stamp>, Option<Stamp>) {
        match &self.me {
            Requester::Held { stamp, quorum, .. } if quorum.contains(&arbiter) => {
                (Some(*stamp), None)
            }
            Requester::Wanting(w) if w.granted.contains(&arbiter) => (Some(w.stamp), None),
            Requester::Wanting(w) if w.quorum.as_ref().is_some_and(|q| q.contains(&arbiter)) => {
                (None, Some(w.stamp))
            }
            _ => (None, None),
        }
    }

    /// The RECOVER telling `arbiter` what this node has of its permission.
    fn recover_to(&self, arbiter: NodeId, ask: bool) -> QuorumMsg {
        let (holding, waiting) = self.held_of(arbiter);
        QuorumMsg::Recover { holding, waiting, mode: self.mode(), ask }
    }

    /// The mode of the request under way (a write when there is none).
    fn mode(&self) -> Mode {
        match &self.me {
            Requester::Idle => Mode::Write,
            Requester::Wanting(w) => w.mode,
            Requester::Held { mode, .. } => *mode,
        }
    }

    fn stamp(&self) -> Option<Stamp> {
        match &self.me {
            Requester::Idle => None,
            Requester::Wanting(w) => Some(w.stamp),
            Requester::Held { stamp, .. } => Some(*stamp),
        }
    }

    /// Picks a new quorum for the request under way (a member failed, or
    /// a node came up while none could be formed). The request is made
    /// afresh, under a new stamp: a GRANT still in flight from a member
    /// told to cancel must not count for the new round.
    fn requorum(&mut self, now: Time, out: &mut Outbox<QuorumMsg>) {
        let Requester::Wanting(w) = &self.me else {
            return;
        };
        let mode = w.mode;
        if self.quorum_for(mode) != w.quorum {
            self.ask(now, mode, out);
        }
    }

    /// Enters once every member has granted, if the stamp is above every
    /// `high` seen; takes a fresh stamp otherwise.
    fn try_enter(&mut self, now: Time, out: &mut Outbox<QuorumMsg>) {
        let Requester::Wanting(w) = &self.me else {
            return;
        };
        let Some(quorum) = &w.quorum else {
            return;
        };
        if !quorum.is_subset(&w.granted) {
            return;
        }
        let (stamp, mode, quorum) = (w.stamp, w.mode, quorum.clone());
        match &w.restamping {
            Some(waiting) if !waiting.is_empty() => return,
            Some(_) => {} // every member knows the new stamp
            None => {
                if let Some(high) = w.high.filter(|&h| h >= stamp) {
                    // An entry with a larger stamp already went through one
                    // of these arbiters: enter under a larger stamp, once
                    // every member knows it, so that each counts the right
                    // one as used whatever happens next.
                    self.clock.observe(high.ts);
                    let new = self.next_stamp(now);
                    for &a in &quorum {
                        self.send(a, QuorumMsg::Restamp { old: stamp, new }, out);
                    }
                    if let Requester::Wanting(w) = &mut self.me {
                        w.stamp = new;
                        w.restamping = Some(quorum);
                    }
                    return;
                }
            }
        }
        self.me = Requester::Held { stamp, mode, quorum };
        out.grant(Fence::from(stamp));
    }

    /// Gives back every permission an arbiter inquired about, once the
    /// request is known to be blocked.
    fn yield_inquired(&mut self, out: &mut Outbox<QuorumMsg>) {
        let Requester::Wanting(w) = &mut self.me else {
            return;
        };
        if w.blocked.is_empty() || w.restamping.is_some() {
            // Nothing proves it blocked, or it holds every permission and
            // is only making its new stamp known: keep the inquiries for
            // later.
            return;
        }
        let stamp = w.stamp;
        let give: Vec<NodeId> =
            std::mem::take(&mut w.inquired).into_iter().filter(|a| w.granted.remove(a)).collect();
        w.blocked.extend(give.iter().copied());
        for a in &give {
            if let Some(&seq) = w.seqs.get(a) {
                w.spent.insert(*a, seq);
            }
        }
        for a in give {
            self.send(a, QuorumMsg::Yield { stamp }, out);
        }
    }

    fn on_requester_message(
        &mut self,
        now: Time,
        from: NodeId,
        msg: QuorumMsg,
        out: &mut Outbox<QuorumMsg>,
    ) {
        if let QuorumMsg::Grant { to, .. } | QuorumMsg::Inquire { to } = msg {
            if to.node == self.id && Some(to) != self.stamp() {
                // The permission is held for a request this node gave up
                // (it restamped, or chose another quorum while the arbiter
                // looked down): hand it back, or it stays locked for good.
                return self.send(from, QuorumMsg::Cancel { stamp: to }, out);
            }
        }
        let Requester::Wanting(w) = &mut self.me else {
            return; // holding (INQUIREs are answered by the release) or idle
        };
        match msg {
            QuorumMsg::Restamped { stamp } if stamp == w.stamp => {
                if let Some(waiting) = &mut w.restamping {
                    waiting.remove(&from);
                }
                self.try_enter(now, out);
            }
            QuorumMsg::Grant { to, high, seq } if to == w.stamp => {
                if let Some(h) = high {
                    self.clock.observe(h.ts);
                }
                if w.spent.get(&from).is_some_and(|&given_back| seq <= given_back) {
                    return; // a copy of a grant this node already gave back
                }
                w.seqs.insert(from, seq);
                if let Some(waiting) = &mut w.restamping {
                    waiting.remove(&from); // it knows the new stamp
                }
                w.granted.insert(from);
                w.blocked.remove(&from);
                w.inquired.remove(&from);
                w.high = w.high.max(high);
                self.try_enter(now, out);
            }
            QuorumMsg::Failed { to } if to == w.stamp => {
                w.blocked.insert(from);
                self.yield_inquired(out);
            }
            QuorumMsg::Inquire { to } if to == w.stamp && w.granted.contains(&from) => {
                w.inquired.insert(from);
                self.yield_inquired(out);
            }
            _ => {} // about a request this node no longer makes
        }
    }

    // ---- arbiter --------------------------------------------------------

    /// Grants what the front of the queue allows (the oldest request if
    /// it writes and the permission is free; the oldest reads, up to the
    /// first write waiting, while only reads hold it), then sends whatever
    /// INQUIRE and FAILED the queue now calls for.
    fn arbitrate(&mut self, out: &mut Outbox<QuorumMsg>) {
        if !self.arbiter.ready {
            return;
        }
        while let Some((&next, &mode)) = self.arbiter.queue.first_key_value() {
            if !self.may_share(mode) {
                break;
            }
            self.arbiter.queue.remove(&next);
            self.grant(next, mode, out);
        }
        // A holder younger than a request it conflicts with, which nothing
        // older holds up here, is asked whether it can give way.
        let a = &self.arbiter;
        let ahead: Vec<(Stamp, Mode)> = a
            .queue
            .iter()
            .map(|(&s, &m)| (s, m))
            .filter(|&(s, m)| !self.blocked_here(s, m))
            .collect();
        let inquire: Vec<Stamp> = a
            .holders
            .iter()
            .filter(|(s, _)| !a.inquired.contains(s))
            .filter(|&(&s, h)| ahead.iter().any(|&(q, m)| q < s && m.conflicts(h.mode)))
            .map(|(&s, _)| s)
            .collect();
        for s in inquire {
            self.arbiter.inquired.insert(s);
            self.send(s.node, QuorumMsg::Inquire { to: s }, out);
        }
        // Every queued request behind an older one it conflicts with must
        // know, so it can yield elsewhere.
        let a = &self.arbiter;
        let behind: Vec<Stamp> = a
            .queue
            .iter()
            .filter(|&(s, &m)| !a.failed.contains(s) && self.blocked_here(*s, m))
            .map(|(&s, _)| s)
            .collect();
        for s in behind {
            self.arbiter.failed.insert(s);
            self.send(s.node, QuorumMsg::Failed { to: s }, out);
        }
    }

    /// Whether a request in `mode` may hold the permission beside its
    /// holders now: a write only when there are none, a read when only
    /// reads hold it.
    fn may_share(&self, mode: Mode) -> bool {
        let holders = &self.arbiter.holders;
        match mode {
            Mode::Write => holders.is_empty(),
            Mode::Read => holders.values().all(|h| h.mode == Mode::Read),
        }
    }

    /// Whether the queued request `stamp`, in `mode`, waits here behind an
    /// older request it conflicts with, holding or queued.
    fn blocked_here(&self, stamp: Stamp, mode: Mode) -> bool {
        let a = &self.arbiter;
        let held = a.holders.iter().map(|(&s, h)| (s, h.mode));
        let queued = a.queue.range(..stamp).map(|(&s, &m)| (s, m));
        held.chain(queued).any(|(s, m)| s < stamp && m.conflicts(mode))
    }

    /// The request of `node` that holds this arbiter's permission, if any.
    fn holding_of(&self, node: NodeId) -> Option<(Stamp, Holding)> {
        self.arbiter.holders.iter().find(|(s, _)| s.node == node).map(|(&s, &h)| (s, h))
    }

    /// Forgets every request of `node` (it is down, or replaced them).
    fn forget_requests_of(&mut self, node: NodeId) {
        self.arbiter.queue.retain(|s, _| s.node != node);
        self.arbiter.failed.retain(|s| s.node != node);
    }

    /// Counts the grant to `stamp`, in `mode`, as used to enter: a later
    /// grant that conflicts with it carries a high-water mark above it.
    fn count_used(&mut self, stamp: Stamp, mode: Mode) {
        let a = &mut self.arbiter;
        a.high = a.high.max(Some(stamp));
        if mode == Mode::Write {
            a.write_high = a.write_high.max(Some(stamp));
        }
    }

    /// Frees the permission held by `stamp`, `used` when it may have been
    /// used to enter; the mode it was held in, if it was held.
    fn free(&mut self, stamp: Stamp, used: bool) -> Option<Mode> {
        let held = self.arbiter.holders.remove(&stamp)?;
        self.arbiter.inquired.remove(&stamp);
        let recent = &mut self.arbiter.recent;
        recent.retain(|&n| n != stamp.node);
        if stamp.node != self.id && recent.len() == RECENT {
            recent.pop_front();
        }
        if stamp.node != self.id {
            recent.push_back(stamp.node);
        }
        if used {
            self.count_used(stamp, held.mode);
        }
        Some(held.mode)
    }

    fn on_arbiter_message(&mut self, from: NodeId, msg: QuorumMsg, out: &mut Outbox<QuorumMsg>) {
        match msg {
            QuorumMsg::Request { stamp, mode } => {
                if stamp.node != from {
                    return; // a stamp always names its sender
                }
                self.forget_requests_of(from);
                match self.holding_of(from) {
                    Some((held, h)) => {
                        // The holder asked anew: it keeps the permission
                        // if the new request may share it with the other
                        // holders, and waits in line otherwise. The stamp
                        // it replaces counts as used: the request may be a
                        // restarted holder's, come before its RECOVER, and
                        // the entry its previous incarnation made under
                        // that stamp must stay below every later fence
                        // that conflicts with it.
                        self.arbiter.holders.remove(&held);
                        self.arbiter.inquired.remove(&held);
                        self.count_used(held, h.mode);
                        if !self.may_share(mode) {
                            self.arbiter.queue.insert(stamp, mode);
                        } else if self.arbiter.ready {
                            self.grant(stamp, mode, out);
                        } else {
                            let seq = self.arbiter.grants;
                            self.arbiter.holders.insert(stamp, Holding { mode, seq });
                        }
                    }
                    None => {
                        self.arbiter.queue.insert(stamp, mode);
                    }
                }
            }
            QuorumMsg::Yield { stamp } => {
                if let Some(mode) = self.free(stamp, false) {
                    self.arbiter.queue.insert(stamp, mode);
                    self.arbiter.failed.insert(stamp);
                }
            }
            QuorumMsg::Release { stamp } => {
                if self.free(stamp, true).is_none() {
                    self.arbiter.queue.remove(&stamp);
                }
            }
            QuorumMsg::Restamp { old, new } => {
                if old.node == from && new.node == from {
                    if let Some(h) = self.arbiter.holders.remove(&old) {
                        self.arbiter.holders.insert(new, h);
                        if self.arbiter.inquired.remove(&old) {
                            self.arbiter.inquired.insert(new);
                        }
                    }
                }
                if self.arbiter.holders.contains_key(&new) {
                    self.send(from, QuorumMsg::Restamped { stamp: new }, out);
                }
            }
            QuorumMsg::Cancel { stamp } => {
                self.free(stamp, false);
                self.arbiter.queue.remove(&stamp);
                self.arbiter.failed.remove(&stamp);
            }
            QuorumMsg::Recover { holding, waiting, mode, ask } => {
                if ask {
                    let answer = self.recover_to(from, false);
                    self.send(from, answer, out);
                }
                self.arbiter.reported.insert(from);
                self.arbiter.awaited.remove(&from);
                if let Some((lock, _)) = self.holding_of(from) {
                    if waiting == Some(lock) {
                        // It waits for what it was granted: the GRANT is
                        // still on its way, or was lost while it was out of
                        // reach. Another copy is harmless.
                        if self.arbiter.ready {
                            self.send_grant(lock, out);
                            // An INQUIRE that went before the copy found the
                            // requester not counting this grant: ask again.
                            self.arbiter.inquired.remove(&lock);
                        }
                    } else if holding != Some(lock) {
                        // It no longer holds what it was granted: it
                        // restarted, or released while cut off. The
                        // permission comes back, counted as used.
                        self.free(lock, true);
                    }
                }
                if let Some(s) = holding.filter(|s| s.node == from) {
                    if self.holding_of(from).is_none() && self.may_share(mode) {
                        let seq = self.arbiter.grants;
                        self.arbiter.holders.insert(s, Holding { mode, seq });
                    }
                    if self.arbiter.holders.contains_key(&s) {
                        // Its RESTAMP may have been lost: confirm the stamp.
                        self.send(from, QuorumMsg::Restamped { stamp: s }, out);
                    }
                }
                if let Some(s) = waiting.filter(|s| s.node == from) {
                    if !self.arbiter.holders.contains_key(&s) {
                        self.arbiter.queue.insert(s, mode);
                    }
                    // It may have forgotten a FAILED of ours (it saw this
                    // node go down and up): tell it again if it still holds.
                    self.arbiter.failed.remove(&s);
                }
                // Likewise an INQUIRE.
                self.arbiter.inquired.retain(|s| s.node != from);
                self.check_ready();
            }
            _ => return,
        }
        self.arbitrate(out);
    }

    /// The arbiter may grant once it has joined, every live peer has said
    /// what it holds, and so has every node the previous run wrote down as
    /// perhaps holding its permission, live or not.
    fn check_ready(&mut self) {
        let a = &self.arbiter;
        if a.ready || !self.joined || !self.alive.is_subset(&a.reported) || !a.awaited.is_empty() {
            return;
        }
        self.arbiter.ready = true;
        // What this run did not restore or hear through RECOVER, it does
        // not know. Every stamp in use is at most the clock, which started
        // above the stored reserve and has seen every live peer's
        // watermark, or the shared clock's milliseconds: stamps are hybrid,
        // and entries before this restart are older.
        let wall = (self.wall_origin + self.now).as_millis() as u64;
        let floor = Stamp { ts: self.clock.now().max(wall), node: NodeId(u32::MAX) };
        self.count_used(floor, Mode::Write);
    }

    fn on_message(&mut self, now: Time, from: NodeId, msg: QuorumMsg, out: &mut Outbox<QuorumMsg>) {
        match &msg {
            QuorumMsg::Request { stamp, .. }
            | QuorumMsg::Yield { stamp }
            | QuorumMsg::Release { stamp }
            | QuorumMsg::Cancel { stamp } => self.clock.observe(stamp.ts),
            QuorumMsg::Grant { to, .. } | QuorumMsg::Failed { to } | QuorumMsg::Inquire { to } => {
                self.clock.observe(to.ts)
            }
            QuorumMsg::Restamp { new, .. } => self.clock.observe(new.ts),
            QuorumMsg::Restamped { stamp } => self.clock.observe(stamp.ts),
            QuorumMsg::Recover { holding, waiting, .. } => {
                for s in holding.iter().chain(waiting) {
                    self.clock.observe(s.ts);
                }
            }
        }
        match msg {
            QuorumMsg::Grant { .. }
            | QuorumMsg::Failed { .. }
            | QuorumMsg::Inquire { .. }
            | QuorumMsg::Restamped { .. } => self.on_requester_message(now, from, msg, out),
            _ => self.on_arbiter_message(from, msg, out),
        }
    }
}

impl<R: QuorumRule> Algorithm for QuorumLock<R> {
    type Msg = QuorumMsg;
    type Timer = NoTimer;

    fn handle_message(
        &mut self,
        now: Time,
        from: NodeId,
        msg: QuorumMsg,
        out: &mut Outbox<QuorumMsg>,
    ) {
        self.begin(now);
        if from == self.id {
            return; // only this node's own queue may speak for it
        }
        self.on_message(now, from, msg, out);
        self.drain_local(now, out);
    }

    fn handle_peer_up(&mut self, now: Time, peer: NodeId, out: &mut Outbox<QuorumMsg>) {
        self.begin(now);
        self.alive.insert(peer);
        // An INQUIRE or FAILED this arbiter sent the peer may have been lost
        // while it was out of reach: let `arbitrate` send them again.
        self.arbiter.inquired.retain(|s| s.node != peer);
        self.arbiter.failed.retain(|s| s.node != peer);
        // Whatever the peer's arbiter knew of this node may be gone (it may
        // have restarted): a permission it gave while waiting is not
        // counted on, and the peer is told what this node holds of it, or
        // waits for, and asked for the same in return.
        if let Requester::Wanting(w) = &mut self.me {
            w.forget(peer);
        }
        out.send(peer, self.recover_to(peer, true));
        if matches!(&self.me, Requester::Wanting(w) if w.quorum.is_none()) {
            self.requorum(now, out);
        }
        self.check_ready();
        self.arbitrate(out);
        self.drain_local(now, out);
    }

    fn handle_peer_down(&mut self, now: Time, peer: NodeId, out: &mut Outbox<QuorumMsg>) {
        self.begin(now);
        self.alive.remove(&peer);
        self.arbiter.reported.remove(&peer);
        // A restart need not wait for it (unless it holds).
        self.arbiter.recent.retain(|&n| n != peer);
        // As arbiter: a permission it holds stays with it. Suspicion is not
        // proof (it may be cut off, not dead), and handing the permission
        // on would let two nodes in; it comes back when the peer, restarted
        // or reconnected, says it no longer holds it (RECOVER).
        self.forget_requests_of(peer);
        // As requester: its permission is gone with it.
        if let Requester::Wanting(w) = &mut self.me {
            w.forget(peer);
            let member = w.quorum.as_ref().is_some_and(|q| q.contains(&peer));
            if member {
                self.requorum(now, out);
            }
        }
        self.check_ready();
        self.arbitrate(out);
        self.drain_local(now, out);
    }
}

impl<R: QuorumRule> MutexAlgorithm for QuorumLock<R> {
    fn handle_request(&mut self, now: Time, out: &mut Outbox<QuorumMsg>) {
        self.handle_request_in(now, Mode::Write, out);
    }

    fn handle_request_in(&mut self, now: Time, mode: Mode, out: &mut Outbox<QuorumMsg>) {
        self.begin(now);
        if matches!(self.me, Requester::Idle) {
            self.ask(now, mode, out);
            self.drain_local(now, out);
        }
    }

    fn mode_of(&self, fence: Fence) -> Mode {
        match self.me {
            Requester::Held { stamp, mode, .. } if Fence::from(stamp) == fence => mode,
            _ => Mode::Write,
        }
    }

    fn handle_release(&mut self, now: Time, out: &mut Outbox<QuorumMsg>) {
        self.begin(now);
        let Requester::Held { stamp, quorum, .. } =
            std::mem::replace(&mut self.me, Requester::Idle)
        else {
            return;
        };
        for a in quorum {
            if a == self.id || self.alive.contains(&a) {
                self.send(a, QuorumMsg::Release { stamp }, out);
            }
        }
        self.drain_local(now, out);
    }

    /// A lock new to this node: the peer holds and waits for nothing of
    /// this arbiter's, and this node for nothing of the peer's, so there
    /// is nothing to recover (a RECOVER each way is what
    /// [`handle_peer_up`](Algorithm::handle_peer_up) costs). Unless the
    /// previous run of this node wrote the peer down as perhaps holding
    /// this arbiter's permission: it is asked, as after a restart.
    fn handle_adopt(&mut self, now: Time, peer: NodeId, out: &mut Outbox<QuorumMsg>) {
        self.begin(now);
        self.alive.insert(peer);
        self.arbiter.reported.insert(peer);
        if self.arbiter.awaited.contains(&peer) {
            out.send(peer, self.recover_to(peer, true));
        }
    }

    fn handle_coordinator(
        &mut self,
        now: Time,
        _leader: NodeId,
        _epoch: Epoch,
        out: &mut Outbox<QuorumMsg>,
    ) {
        // The engine reports a coordinator only once the node has joined:
        // it has heard from every live peer.
        self.begin(now);
        self.joined = true;
        self.check_ready();
        self.arbitrate(out);
        self.drain_local(now, out);
    }

    fn cs_state(&self) -> CsState {
        match self.me {
            Requester::Idle => CsState::Idle,
            Requester::Wanting(_) => CsState::Wanting,
            Requester::Held { .. } => CsState::Held,
        }
    }

    fn request_stamp(&self) -> Option<Stamp> {
        self.stamp()
    }

    /// Idle as requester, and as arbiter with its permission free, nobody
    /// queued and nobody from a previous run still to report. (Its
    /// high-water mark need not be kept: a new arbiter starts it at its
    /// clock, above the node's floor, which covers every stamp seen here.)
    fn forgettable(&self) -> bool {
        matches!(self.me, Requester::Idle)
            && self.arbiter.holders.is_empty()
            && self.arbiter.queue.is_empty()
            && self.arbiter.awaited.is_empty()
            && self.local.is_empty()
    }

    fn watermark(&self) -> u64 {
        self.clock.now()
    }

    fn observe_watermark(&mut self, watermark: u64) {
        self.clock.observe(watermark);
    }

    /// Who may hold the permission, and the grant numbers reserved; no
    /// record at all while it has granted no other node anything, which
    /// a restarted arbiter takes exactly as it takes an empty record: so a
    /// lock made here and taken only by this node's own requests, as
    /// every new lock is until another node asks, writes nothing.
    fn durable_state(&self) -> Option<Vec<u8>> {
        let a = &self.arbiter;
        let named = a.holders.keys().chain(a.queue.keys().next()).map(|s| s.node);
        let may_hold: BTreeSet<NodeId> =
            named.chain(a.recent.iter().copied()).filter(|&n| n != self.id).collect();
        if may_hold.is_empty() && a.reserved == 0 {
            return None;
        }
        Some(crate::wire::encode(&Durable { may_hold, grants: a.reserved }))
    }

    /// Only GRANTs to other nodes rest on the record: a step that sent
    /// none is covered by any record, and by none.
    fn covered_by(&self, record: Option<&[u8]>) -> bool {
        self.step_grants.is_empty()
            || record.and_then(|r| crate::wire::decode::<Durable>(r).ok()).is_some_and(|r| {
                self.arbiter.grants <= r.grants && self.step_grants.is_subset(&r.may_hold)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutex::maekawa::Maekawa;
    use crate::outbox::Action;
    use crate::testkit::*;

    type Out = Outbox<QuorumMsg>;

    const W: Mode = Mode::Write;
    const R: Mode = Mode::Read;

    /// The arbiter's starting `high`: nothing granted before this run.
    const FLOOR: Option<Stamp> = Some(Stamp { ts: 0, node: NodeId(u32::MAX) });

    /// Node `id` of a three-node Maekawa cluster (grid sets: n1 asks
    /// {1, 2, 3}, n2 asks {1, 2}, n3 asks {1, 3}), joined, with every peer's
    /// RECOVER in hand.
    fn node(id: u32) -> Maekawa {
        node_of(id, 3)
    }

    /// Node `id` of an `n`-node Maekawa cluster, joined, with every peer's
    /// RECOVER in hand.
    fn node_of(id: u32, size: u32) -> Maekawa {
        let cfg = AlgoConfig::for_test(id, size);
        let mut m = Maekawa::new(&cfg);
        let mut out = Out::new();
        for p in cfg.peers() {
            m.handle_peer_up(T, p, &mut out);
            m.handle_message(
                T,
                p,
                QuorumMsg::Recover { holding: None, waiting: None, mode: W, ask: false },
                &mut out,
            );
        }
        m.handle_coordinator(T, n(3), Epoch::default(), &mut out);
        m
    }

    fn ask(stamp: Stamp, mode: Mode) -> QuorumMsg {
        QuorumMsg::Request { stamp, mode }
    }

    fn grant(to: Stamp, high: Option<Stamp>, seq: u64) -> QuorumMsg {
        QuorumMsg::Grant { to, high, seq }
    }

    fn release(stamp: Stamp) -> QuorumMsg {
        QuorumMsg::Release { stamp }
    }

    #[test]
    fn readers_share_an_arbiter_and_a_writer_waits_for_them_all() {
        let mut a = node(1);
        let mut out = Out::new();
        a.handle_message(T, n(2), ask(stamp(5, 2), R), &mut out);
        a.handle_message(T, n(3), ask(stamp(6, 3), R), &mut out);
        assert_eq!(
            out.take(),
            vec![send(2, grant(stamp(5, 2), FLOOR, 1)), send(3, grant(stamp(6, 3), FLOOR, 2))]
        );
        // A write waits for every reader: it is behind an older one.
        a.handle_message(T, n(2), release(stamp(5, 2)), &mut out);
        a.handle_message(T, n(2), ask(stamp(7, 2), W), &mut out);
        assert_eq!(out.take(), vec![send(2, QuorumMsg::Failed { to: stamp(7, 2) })]);
        // The last reader leaves: the writer holds alone, above both reads.
        a.handle_message(T, n(3), release(stamp(6, 3)), &mut out);
        assert_eq!(out.take(), vec![send(2, grant(stamp(7, 2), Some(stamp(6, 3)), 3))]);
        a.handle_message(T, n(3), ask(stamp(8, 3), R), &mut out);
        assert_eq!(out.take(), vec![send(3, QuorumMsg::Failed { to: stamp(8, 3) })]);
        a.handle_message(T, n(2), release(stamp(7, 2)), &mut out);
        assert_eq!(out.take(), vec![send(3, grant(stamp(8, 3), Some(stamp(7, 2)), 4))]);
    }

    #[test]
    fn a_reader_does_not_join_readers_ahead_of_an_older_writer() {
        let mut a = node_of(1, 5);
        let mut out = Out::new();
        a.handle_message(T, n(2), ask(stamp(5, 2), R), &mut out);
        a.handle_message(T, n(3), ask(stamp(6, 3), W), &mut out);
        a.handle_message(T, n(4), ask(stamp(7, 4), R), &mut out);
        // Only a read holds, yet the later read waits behind the write.
        assert_eq!(
            out.take(),
            vec![
                send(2, grant(stamp(5, 2), FLOOR, 1)),
                send(3, QuorumMsg::Failed { to: stamp(6, 3) }),
                send(4, QuorumMsg::Failed { to: stamp(7, 4) }),
            ]
        );
        a.handle_message(T, n(2), release(stamp(5, 2)), &mut out);
        assert_eq!(out.take(), vec![send(3, grant(stamp(6, 3), Some(stamp(5, 2)), 2))]);
        a.handle_message(T, n(3), release(stamp(6, 3)), &mut out);
        assert_eq!(out.take(), vec![send(4, grant(stamp(7, 4), Some(stamp(6, 3)), 3))]);
    }

    #[test]
    fn an_older_writer_inquires_of_every_younger_reader_and_enters_once_all_yield() {
        let mut a = node_of(1, 5);
        let mut out = Out::new();
        a.handle_message(T, n(2), ask(stamp(5, 2), R), &mut out);
        a.handle_message(T, n(3), ask(stamp(6, 3), R), &mut out);
        out.take();
        a.handle_message(T, n(4), ask(stamp(3, 4), W), &mut out);
        assert_eq!(
            out.take(),
            vec![
                send(2, QuorumMsg::Inquire { to: stamp(5, 2) }),
                send(3, QuorumMsg::Inquire { to: stamp(6, 3) }),
            ]
        );
        a.handle_message(T, n(2), QuorumMsg::Yield { stamp: stamp(5, 2) }, &mut out);
        assert!(out.is_empty(), "a reader still holds");
        a.handle_message(T, n(3), QuorumMsg::Yield { stamp: stamp(6, 3) }, &mut out);
        // Yielded grants were never used: the high mark stays.
        assert_eq!(out.take(), vec![send(4, grant(stamp(3, 4), FLOOR, 3))]);
        // The writer leaves: both readers come back together.
        a.handle_message(T, n(4), release(stamp(3, 4)), &mut out);
        let high = Some(stamp(3, 4));
        assert_eq!(
            out.take(),
            vec![send(2, grant(stamp(5, 2), high, 4)), send(3, grant(stamp(6, 3), high, 5))]
        );
    }

    #[test]
    fn a_read_is_held_above_the_writes_before_it_and_a_write_above_everything() {
        let mut a = node(1);
        let mut out = Out::new();
        a.handle_message(T, n(2), ask(stamp(5, 2), W), &mut out);
        a.handle_message(T, n(2), release(stamp(5, 2)), &mut out);
        a.handle_message(T, n(3), ask(stamp(9, 3), R), &mut out);
        a.handle_message(T, n(3), release(stamp(9, 3)), &mut out);
        out.take();
        // The read at 9 is no concern of a later read's, only of a write's.
        a.handle_message(T, n(2), ask(stamp(10, 2), R), &mut out);
        assert_eq!(out.take(), vec![send(2, grant(stamp(10, 2), Some(stamp(5, 2)), 3))]);
        a.handle_message(T, n(2), release(stamp(10, 2)), &mut out);
        a.handle_message(T, n(3), ask(stamp(11, 3), W), &mut out);
        assert_eq!(out.take(), vec![send(3, grant(stamp(11, 3), Some(stamp(10, 2)), 4))]);
    }

    #[test]
    fn a_reader_asks_its_read_set_and_holds_to_read() {
        // Five nodes in a grid of rows {1,2,3} and {4,5}: node 1 writes
        // with its row and column {1,2,3,4}, and reads with its row.
        let mut m = node_of(1, 5);
        let mut out = Out::new();
        m.handle_request_in(T, R, &mut out);
        let s = stamp(1, 1);
        assert_eq!(out.take(), vec![send(2, ask(s, R)), send(3, ask(s, R))]);
        m.handle_message(T, n(2), grant(s, FLOOR, 1), &mut out);
        m.handle_message(T, n(3), grant(s, FLOOR, 1), &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 1) }]);
        assert_eq!(m.mode_of(Fence::new(1, 1)), R);
        m.handle_release(T, &mut out);
        assert_eq!(out.take(), vec![send(2, release(s)), send(3, release(s))]);
        m.handle_request(T, &mut out);
        let s = stamp(2, 1);
        assert_eq!(out.take(), vec![send(2, ask(s, W)), send(3, ask(s, W)), send(4, ask(s, W))]);
    }

    #[test]
    fn a_requester_whose_set_lost_a_member_gives_back_what_it_holds_until_the_member_returns() {
        // Node 1 writes with {1,2,3,4}; node 4 goes down while node 1 holds
        // node 2's grant: it withdraws its request everywhere it asked, so
        // that node 3, whose set {1,2,3} does not contain node 4, can have
        // every permission it needs, and asks again once node 4 is up.
        let mut m = node_of(1, 5);
        let mut out = Out::new();
        m.handle_request(T, &mut out);
        let s = stamp(1, 1);
        assert_eq!(out.take(), vec![send(2, ask(s, W)), send(3, ask(s, W)), send(4, ask(s, W))]);
        m.handle_message(T, n(2), grant(s, FLOOR, 1), &mut out);
        m.handle_peer_down(T, n(4), &mut out);
        let cancel = |s| QuorumMsg::Cancel { stamp: s };
        let sent = out.take();
        for a in [2, 3] {
            assert!(sent.contains(&send(a, cancel(s))), "{a} is told: {sent:?}");
        }
        assert!(!sent.iter().any(|a| matches!(a, Action::Grant { .. })));
        assert_eq!(m.cs_state(), CsState::Wanting, "it still wants");
        m.handle_peer_up(T, n(4), &mut out);
        let asked: Vec<NodeId> = out
            .take()
            .into_iter()
            .filter_map(|a| match a {
                Action::Send { to, msg: QuorumMsg::Request { mode: W, .. } } => Some(to),
                _ => None,
            })
            .collect();
        assert_eq!(asked, [n(2), n(3), n(4)], "its whole set, again");
    }

    #[test]
    fn a_restarted_arbiter_takes_every_reader_back_from_their_recovers() {
        let cfg = AlgoConfig::for_test(1, 5);
        let mut a = Maekawa::new(&cfg);
        let mut out = Out::new();
        for p in cfg.peers() {
            a.handle_peer_up(T, p, &mut out);
        }
        a.handle_coordinator(T, n(5), Epoch::default(), &mut out);
        out.take();
        let recover =
            |holding, waiting, mode| QuorumMsg::Recover { holding, waiting, mode, ask: false };
        a.handle_message(T, n(2), recover(Some(stamp(2, 2)), None, R), &mut out);
        a.handle_message(T, n(3), recover(Some(stamp(3, 3)), None, R), &mut out);
        a.handle_message(T, n(4), recover(None, Some(stamp(4, 4)), W), &mut out);
        a.handle_message(T, n(5), recover(None, None, W), &mut out);
        // Both readers are confirmed and the writer waits for them.
        assert_eq!(
            out.take(),
            vec![
                send(2, QuorumMsg::Restamped { stamp: stamp(2, 2) }),
                send(3, QuorumMsg::Restamped { stamp: stamp(3, 3) }),
                send(4, QuorumMsg::Failed { to: stamp(4, 4) }),
            ]
        );
        a.handle_message(T, n(2), release(stamp(2, 2)), &mut out);
        assert!(out.is_empty());
        a.handle_message(T, n(3), release(stamp(3, 3)), &mut out);
        let sent = out.take();
        assert!(matches!(&sent[..],
            [Action::Send { to, msg: QuorumMsg::Grant { to: s, .. } }] if *to == n(4) && *s == stamp(4, 4)));
    }

    #[test]
    fn an_uncontended_entry_asks_the_other_members_only() {
        let mut m = node(2);
        let mut out = Out::new();
        m.handle_request(T, &mut out);
        // Its own permission is taken without a message.
        assert_eq!(out.take(), vec![send(1, QuorumMsg::Request { stamp: stamp(1, 2), mode: W })]);
        m.handle_message(
            T,
            n(1),
            QuorumMsg::Grant { to: stamp(1, 2), high: FLOOR, seq: 1 },
            &mut out,
        );
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 2) }]);
        m.handle_release(T, &mut out);
        assert_eq!(out.take(), vec![send(1, QuorumMsg::Release { stamp: stamp(1, 2) })]);
    }

    #[test]
    fn an_arbiter_inquires_for_an_older_request_and_regrants_after_a_yield() {
        let mut a = node(1);
        let mut out = Out::new();
        a.handle_message(T, n(2), QuorumMsg::Request { stamp: stamp(5, 2), mode: W }, &mut out);
        assert_eq!(
            out.take(),
            vec![send(2, QuorumMsg::Grant { to: stamp(5, 2), high: FLOOR, seq: 1 })]
        );
        // An older request: ask the holder whether it can give way.
        a.handle_message(T, n(3), QuorumMsg::Request { stamp: stamp(3, 3), mode: W }, &mut out);
        assert_eq!(out.take(), vec![send(2, QuorumMsg::Inquire { to: stamp(5, 2) })]);
        // It yields: the older request gets the permission, and the high
        // mark does not move (a yielded grant was never used).
        a.handle_message(T, n(2), QuorumMsg::Yield { stamp: stamp(5, 2) }, &mut out);
        assert_eq!(
            out.take(),
            vec![send(3, QuorumMsg::Grant { to: stamp(3, 3), high: FLOOR, seq: 2 })]
        );
        // Its release counts as used, and the yielder is next.
        a.handle_message(T, n(3), QuorumMsg::Release { stamp: stamp(3, 3) }, &mut out);
        let high = Some(stamp(3, 3));
        assert_eq!(out.take(), vec![send(2, QuorumMsg::Grant { to: stamp(5, 2), high, seq: 3 })]);
    }

    #[test]
    fn a_holder_that_asks_anew_keeps_the_permission_and_its_old_stamp_counts_as_used() {
        let mut a = node(1);
        let mut out = Out::new();
        a.handle_message(T, n(2), QuorumMsg::Request { stamp: stamp(5, 2), mode: W }, &mut out);
        out.take();
        // n2 entered under 5 and restarted; its new incarnation's request
        // comes before its RECOVER. The permission moves to the new stamp,
        // and the grant says 5 was used: whoever enters after it must be
        // above it.
        a.handle_peer_down(T, n(2), &mut out);
        a.handle_peer_up(T, n(2), &mut out);
        out.take();
        a.handle_message(T, n(2), QuorumMsg::Request { stamp: stamp(9, 2), mode: W }, &mut out);
        let high = Some(stamp(5, 2));
        assert_eq!(out.take(), vec![send(2, QuorumMsg::Grant { to: stamp(9, 2), high, seq: 2 })]);
    }

    #[test]
    fn a_younger_request_behind_the_holder_is_told_failed() {
        let mut a = node(1);
        let mut out = Out::new();
        a.handle_message(T, n(2), QuorumMsg::Request { stamp: stamp(5, 2), mode: W }, &mut out);
        out.take();
        a.handle_message(T, n(3), QuorumMsg::Request { stamp: stamp(8, 3), mode: W }, &mut out);
        assert_eq!(out.take(), vec![send(3, QuorumMsg::Failed { to: stamp(8, 3) })]);
    }

    #[test]
    fn a_requester_yields_what_was_inquired_once_it_knows_it_is_blocked() {
        let mut m = node(1);
        let mut out = Out::new();
        m.handle_request(T, &mut out);
        let s = stamp(1, 1);
        let ask = QuorumMsg::Request { stamp: s, mode: W };
        assert_eq!(out.take(), vec![send(2, ask.clone()), send(3, ask)]);
        m.handle_message(T, n(2), QuorumMsg::Grant { to: s, high: FLOOR, seq: 1 }, &mut out);
        m.handle_message(T, n(2), QuorumMsg::Inquire { to: s }, &mut out);
        assert!(out.is_empty(), "nothing says it is blocked yet: keep the permission");
        m.handle_message(T, n(3), QuorumMsg::Failed { to: s }, &mut out);
        assert_eq!(out.take(), vec![send(2, QuorumMsg::Yield { stamp: s })]);
        assert_eq!(m.cs_state(), CsState::Wanting);
    }

    #[test]
    fn a_copy_of_a_grant_given_back_does_not_count() {
        let mut m = node(1);
        let mut out = Out::new();
        m.handle_request(T, &mut out);
        out.take();
        let s = stamp(1, 1);
        let grant = QuorumMsg::Grant { to: s, high: FLOOR, seq: 4 };
        m.handle_message(T, n(2), grant.clone(), &mut out);
        m.handle_message(T, n(3), QuorumMsg::Failed { to: s }, &mut out);
        m.handle_message(T, n(2), QuorumMsg::Inquire { to: s }, &mut out);
        assert_eq!(out.take(), vec![send(2, QuorumMsg::Yield { stamp: s })]);
        // A copy of grant 4 (sent again after a reconnection) arrives late:
        // node 2 has since given its permission to someone else.
        m.handle_message(T, n(2), grant, &mut out);
        m.handle_message(T, n(3), QuorumMsg::Grant { to: s, high: FLOOR, seq: 9 }, &mut out);
        assert!(out.is_empty(), "entered on a permission it gave back");
        // A new grant from node 2 does count.
        m.handle_message(T, n(2), QuorumMsg::Grant { to: s, high: FLOOR, seq: 5 }, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 1) }]);
    }

    #[test]
    fn a_stamp_below_a_used_one_enters_under_a_new_stamp_and_says_so() {
        let mut m = node(2);
        let mut out = Out::new();
        m.handle_request(T, &mut out);
        out.take();
        // Node 3 entered with stamp 9 through node 1 already.
        let high = Some(stamp(9, 3));
        m.handle_message(T, n(1), QuorumMsg::Grant { to: stamp(1, 2), high, seq: 1 }, &mut out);
        let restamp = QuorumMsg::Restamp { old: stamp(1, 2), new: stamp(10, 2) };
        assert_eq!(out.take(), vec![send(1, restamp)]);
        // An INQUIRE now changes nothing: it is as good as in.
        m.handle_message(T, n(1), QuorumMsg::Inquire { to: stamp(10, 2) }, &mut out);
        assert!(out.is_empty());
        // Every member knows the new stamp: enter under it.
        m.handle_message(T, n(1), QuorumMsg::Restamped { stamp: stamp(10, 2) }, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(10, 2) }]);
        m.handle_release(T, &mut out);
        assert_eq!(out.take(), vec![send(1, QuorumMsg::Release { stamp: stamp(10, 2) })]);
    }

    #[test]
    fn a_grant_for_an_abandoned_request_is_handed_back() {
        let mut m = node(2);
        let mut out = Out::new();
        m.handle_message(
            T,
            n(1),
            QuorumMsg::Grant { to: stamp(7, 2), high: FLOOR, seq: 1 },
            &mut out,
        );
        assert_eq!(out.take(), vec![send(1, QuorumMsg::Cancel { stamp: stamp(7, 2) })]);
    }

    #[test]
    fn a_suspected_holder_keeps_the_permission_until_it_says_it_let_go() {
        let mut a = node(1);
        let mut out = Out::new();
        a.handle_message(T, n(2), QuorumMsg::Request { stamp: stamp(5, 2), mode: W }, &mut out);
        a.handle_message(T, n(3), QuorumMsg::Request { stamp: stamp(8, 3), mode: W }, &mut out);
        out.take();
        // Down, or cut off? Suspicion alone hands nothing on.
        a.handle_peer_down(T, n(2), &mut out);
        assert!(out.is_empty());
        // Back (restarted with nothing, or reconnected after releasing):
        // the permission returns, and counts as used.
        a.handle_peer_up(T, n(2), &mut out);
        out.take();
        a.handle_message(
            T,
            n(2),
            QuorumMsg::Recover { holding: None, waiting: None, mode: W, ask: false },
            &mut out,
        );
        let high = Some(stamp(5, 2));
        assert_eq!(out.take(), vec![send(3, QuorumMsg::Grant { to: stamp(8, 3), high, seq: 2 })]);
    }

    #[test]
    fn a_restarted_arbiter_grants_nothing_until_every_peer_has_reported() {
        let cfg = AlgoConfig::for_test(1, 3);
        let mut a = Maekawa::new(&cfg);
        let mut out = Out::new();
        a.handle_peer_up(T, n(2), &mut out);
        a.handle_peer_up(T, n(3), &mut out);
        a.handle_coordinator(T, n(3), Epoch::default(), &mut out);
        out.take();
        a.handle_message(T, n(3), QuorumMsg::Request { stamp: stamp(4, 3), mode: W }, &mut out);
        assert!(out.is_empty(), "it may have granted before it restarted");
        // Node 2 still holds what the earlier run granted it.
        let holding = Some(stamp(2, 2));
        a.handle_message(
            T,
            n(2),
            QuorumMsg::Recover { holding, waiting: None, mode: W, ask: false },
            &mut out,
        );
        let waiting = Some(stamp(4, 3));
        a.handle_message(
            T,
            n(3),
            QuorumMsg::Recover { holding: None, waiting, mode: W, ask: false },
            &mut out,
        );
        // Node 2's permission is confirmed (a RESTAMP of its may have been
        // lost with the old run); node 3 waits behind it.
        let confirmed = QuorumMsg::Restamped { stamp: stamp(2, 2) };
        let failed = QuorumMsg::Failed { to: stamp(4, 3) };
        assert_eq!(out.take(), vec![send(2, confirmed), send(3, failed)]);
        a.handle_message(T, n(2), QuorumMsg::Release { stamp: stamp(2, 2) }, &mut out);
        let Action::Send { msg: QuorumMsg::Grant { to, .. }, .. } = &out.take()[0] else {
            panic!("the permission goes to node 3 once node 2 is done");
        };
        assert_eq!(*to, stamp(4, 3));
    }

    /// Node 1 of a three-node cluster restarted from `durable`.
    fn restarted(durable: &Durable) -> Maekawa {
        let cfg = AlgoConfig {
            restored: Some(crate::Restored {
                epoch: Epoch(0),
                watermark: 0,
                names: [(crate::Name::default(), crate::wire::encode(durable))].into(),
                promised: Epoch(0),
            }),
            ..AlgoConfig::for_test(1, 3)
        };
        Maekawa::new(&cfg)
    }

    #[test]
    fn a_restarted_arbiter_waits_for_every_node_written_down_even_a_silent_one() {
        // The previous run wrote down node 2, which is silent now (paused).
        let mut a = restarted(&Durable { may_hold: [n(2)].into(), grants: 1024 });
        let mut out = Out::new();
        a.handle_peer_up(T, n(3), &mut out);
        a.handle_coordinator(T, n(3), Epoch::default(), &mut out);
        out.take();
        let waiting = Some(stamp(4, 3));
        a.handle_message(T, n(3), QuorumMsg::Request { stamp: stamp(4, 3), mode: W }, &mut out);
        a.handle_message(
            T,
            n(3),
            QuorumMsg::Recover { holding: None, waiting, mode: W, ask: false },
            &mut out,
        );
        assert!(out.is_empty(), "node 2 may hold the permission: nothing is granted");
        // Node 2 resumes, sees the restart, and says it holds the grant.
        a.handle_peer_up(T, n(2), &mut out);
        out.take();
        let holding = Some(stamp(2, 2));
        a.handle_message(
            T,
            n(2),
            QuorumMsg::Recover { holding, waiting: None, mode: W, ask: false },
            &mut out,
        );
        let confirmed = QuorumMsg::Restamped { stamp: stamp(2, 2) };
        let failed = QuorumMsg::Failed { to: stamp(4, 3) };
        assert_eq!(out.take(), vec![send(2, confirmed), send(3, failed)]);
        // Once it releases, node 3 is granted, numbered above the reserve.
        a.handle_message(T, n(2), QuorumMsg::Release { stamp: stamp(2, 2) }, &mut out);
        let sent = out.take();
        assert!(matches!(&sent[0],
            Action::Send { to, msg: QuorumMsg::Grant { to: s, seq: 1025, .. } } if *to == n(3) && *s == stamp(4, 3)));
        // Its own old request died with the previous run: nothing to await.
        let a = restarted(&Durable { may_hold: [n(1)].into(), grants: 1 });
        assert!(a.arbiter.awaited.is_empty());
    }

    #[test]
    fn an_arbiter_writes_its_next_grantee_down_ahead_so_that_grant_waits_for_no_flush() {
        let mut a = node(1);
        let mut out = Out::new();
        let record = |a: &Maekawa| a.durable_state().unwrap();
        assert!(a.durable_state().is_none(), "nothing granted yet: no record");
        let empty = crate::wire::encode(&Durable { may_hold: BTreeSet::new(), grants: 0 });
        a.handle_message(T, n(2), QuorumMsg::Request { stamp: stamp(5, 2), mode: W }, &mut out);
        // A grant to a node not written down: the record goes first.
        assert!(!a.covered_by(Some(&empty)));
        assert!(!a.covered_by(None), "nor by no record");
        let granted = record(&a);
        let r: Durable = crate::wire::decode(&granted).unwrap();
        assert_eq!((r.may_hold, r.grants), ([n(2)].into(), 1 + GRANT_RESERVE));
        a.handle_message(T, n(3), QuorumMsg::Request { stamp: stamp(7, 3), mode: W }, &mut out);
        // Node 3 is next in line: written down, and this step's messages
        // (a FAILED) rest on nothing new.
        assert!(a.covered_by(Some(&granted)));
        let ahead = record(&a);
        let r: Durable = crate::wire::decode(&ahead).unwrap();
        assert_eq!(r.may_hold, [n(2), n(3)].into());
        out.take();
        a.handle_message(T, n(2), QuorumMsg::Release { stamp: stamp(5, 2) }, &mut out);
        assert!(matches!(&out.take()[0],
            Action::Send { to, msg: QuorumMsg::Grant { .. } } if *to == n(3)));
        // Node 3 was written down before: its GRANT leaves at once. Node 2
        // stays named, as a recent holder: when it asks again, nothing new
        // is written.
        assert!(a.covered_by(Some(&ahead)));
        assert_eq!(record(&a), ahead);
        a.handle_message(T, n(2), QuorumMsg::Request { stamp: stamp(9, 2), mode: W }, &mut out);
        assert_eq!(record(&a), ahead);
        // Seen down while not holding, it is struck off.
        a.handle_peer_down(T, n(2), &mut out);
        let r: Durable = crate::wire::decode(&record(&a)).unwrap();
        assert_eq!(r.may_hold, [n(3)].into());
    }

    #[test]
    fn a_lock_taken_only_by_its_own_node_writes_nothing_and_numbers_the_next_grant_above() {
        // Node 2 of three asks {1, 2}: its own arbiter grants it locally.
        let mut b = node(2);
        let mut out = Out::new();
        b.handle_request(T, &mut out);
        assert!(b.durable_state().is_none(), "a grant to itself is not written down");
        let empty = crate::wire::encode(&Durable { may_hold: BTreeSet::new(), grants: 0 });
        assert!(b.covered_by(Some(&empty)));
        assert!(b.covered_by(None), "its messages wait for no other lock's record");
        let mine = b.stamp().unwrap();
        b.handle_message(T, n(1), grant(mine, FLOOR, 1), &mut out);
        assert_eq!(b.cs_state(), CsState::Held);
        b.handle_release(T, &mut out);
        assert!(b.durable_state().is_none(), "released: still nothing to keep");
        out.take();
        // Node 3 asks: its grant is the second, and the record that goes
        // before it names node 3 and reserves numbers above it.
        b.handle_message(T, n(3), QuorumMsg::Request { stamp: stamp(40, 3), mode: W }, &mut out);
        let r: Durable = crate::wire::decode(&b.durable_state().unwrap()).unwrap();
        assert_eq!((r.may_hold, r.grants), ([n(3)].into(), 2 + GRANT_RESERVE));
        assert!(matches!(&out.take()[..],
            [Action::Send { to, msg: QuorumMsg::Grant { seq: 2, .. } }] if *to == n(3)));
    }
}
