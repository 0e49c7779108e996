//! One node's protocol stack, composed and still free of I/O:
//! failure detector → election → mutex.
//!
//! The [`Engine`] takes inputs (`handle_*` for what arrives, [`request`]
//! and [`release`] for what the application asks), keeps one table of
//! deadlines for every layer, and queues [`Output`]s for its driver to carry
//! out: the simulator in tests, the tokio agent on real sockets. A driver
//! loop is: feed inputs, drain [`poll_output`], sleep until
//! [`next_deadline`], call [`handle_timeout`].
//!
//! Peer failures flow down (detector → election and mutex; with
//! `partitions = "majority"`, detector → membership → election and mutex,
//! and the node acts only under a majority's lease: see
//! [`membership`](crate::membership); what the algorithms send or grant
//! without a lease waits in a held queue, and what waits there for a peer
//! is dropped when they count that peer down), coordinator
//! changes flow from the election to the mutex. Before a node *joins* —
//! every peer has sent it a heartbeat that names this very incarnation as
//! up, or a failure timeout has passed with no new peer heard from (the
//! silent ones are given up on; see `join_or_wait`) — it answers
//! peers but neither starts an election nor asks for the critical section.
//! It thus learns the current epoch and clocks from their heartbeats, and
//! it asks nothing before every live peer counts it in: a peer that still
//! counted it out would leave it out of its own requests, and both could
//! enter (a restarted node whose messages are slow found this in the
//! simulator). A coordinator that others' elections name meanwhile
//! (the node itself, even) reaches the mutex layer only once it has joined:
//! a coordinator must know every live peer before it rebuilds the queue.
//!
//! **Many locks.** The mutex layer is not one instance but one per lock
//! name ([`Name`]), each made on first use, here (a request) or at a peer
//! (its first message), and multiplexed over the same peers: a mutex
//! message carries its lock's name and permits. Failures, coordinator
//! changes and re-admissions reach every instance. An instance made for a
//! lock new to this node adopts the peers that are up without the
//! newcomer's machinery ([`handle_adopt`](crate::MutexAlgorithm::handle_adopt)),
//! so making one costs no message; a coordinator's instance rebuilds its
//! lock as after any change of coordinator. Instances idle long enough are
//! forgotten (see `resources`). The clock floor is shared: heartbeats
//! carry one watermark whatever the number of locks, and stable storage
//! keeps each lock's own record beside the epoch and the clock reserve.
//!
//! [`request`]: Engine::request
//! [`release`]: Engine::release
//! [`poll_output`]: Engine::poll_output
//! [`next_deadline`]: Engine::next_deadline
//! [`handle_timeout`]: Engine::handle_timeout

use crate::algorithm::{AlgoConfig, Detector, MAX_READS};
use crate::detector::{FailureDetector, Verdict};
use crate::membership::{Event, Membership, View};
use crate::name::Name;
use crate::outbox::{Action, Time, TimerId};
use crate::parked::{Lot, Parked};
use crate::records::Records;
use crate::registry::{self, Actions, DynElection, ElectionInfo, Encoded, MutexInfo};
use crate::resources::Resources;
use crate::stable::{Delta, Restored};
use crate::types::{CsState, Epoch, Fence, Mode, NodeId, Stamp};
use crate::wire::{Envelope, Heartbeat, WireError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Which layer a timer or message belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Layer {
    /// The election algorithm.
    Election,
    /// The mutual-exclusion algorithm.
    Mutex,
}

/// Whose step an action list is, and whose a timer: the election's, or
/// one lock's instance.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Scope {
    Election,
    Mutex(Name),
}

/// What the driver must do or may want to know.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// Deliver `envelope` to `to`.
    Send {
        /// The destination.
        to: NodeId,
        /// The message.
        envelope: Envelope,
        /// Its kind, for the driver's logs and counters.
        kind: &'static str,
    },
    /// The node now holds lock `name`.
    Granted {
        /// The lock.
        name: Name,
        /// The grant's fence.
        fence: Fence,
    },
    /// The node follows a new coordinator.
    Coordinator {
        /// Who.
        leader: NodeId,
        /// For which epoch.
        epoch: Epoch,
    },
    /// The failure detector counts `peer` as up again.
    PeerUp(NodeId),
    /// The failure detector suspects `peer`.
    PeerDown(NodeId),
    /// The node has joined: it heard from every peer or waited for them.
    Joined,
    /// The node no longer holds lock `name`, though nobody released it:
    /// its lease ran out, or it started over as a joiner of a new view
    /// ([`membership`](crate::membership)). The engine released it; the
    /// driver tells the holder, who must stop at once.
    Lost {
        /// The lock.
        name: Name,
        /// The fence of the grant lost.
        fence: Fence,
    },
    /// The node installed a view ([`membership`](crate::membership)).
    View(View),
    /// The node gained (`true`) or lost its lease: whether it may act.
    Quorum(bool),
    /// A peer's application task sent this ([`Envelope::Application`]):
    /// for the driver's own application task.
    Application {
        /// The sender.
        from: NodeId,
        /// What it sent.
        bytes: Vec<u8>,
    },
    /// Apply this change to the record in stable storage, after every
    /// change given before it; give the record back in
    /// [`AlgoConfig::restored`] when the node restarts. The record changes
    /// with each new epoch and, for the algorithms that keep state across
    /// a crash, with that state; a change names only what changed, so it
    /// costs the same however many locks the record holds. Changes are
    /// numbered from 1 in the order given; an output that rests on one
    /// must wait until it is durable ([`Engine::poll_output_resting`]),
    /// and a driver that writes each change before going on meets that for
    /// every output.
    Persist(Delta),
}

/// Why an input was refused. The engine's state is unchanged, except that
/// hearing anything from a member counts as hearing from it.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The sender is not a member of this cluster.
    #[error("message from {0}, which is not a peer")]
    UnknownPeer(NodeId),
    /// The message did not decode for the algorithm this node runs.
    #[error("undecodable {layer:?} message from {from}: {source}")]
    Undecodable {
        /// The sender.
        from: NodeId,
        /// The layer it was meant for.
        layer: Layer,
        /// The decoder's complaint.
        source: WireError,
    },
    /// The sender's instance of a lock admits another number of holders
    /// than this node's: the two were asked for with different permits.
    /// The message waits until the lock is idle here (see
    /// [`parked`](crate::parked)), unless there is no room left for it.
    #[error(
        "message from {from} for lock {name:?} of {theirs} permits; it has {ours} here: {}",
        if *kept { "kept until the lock is idle here" } else { "dropped, no room to keep it" }
    )]
    Permits {
        /// The sender.
        from: NodeId,
        /// The lock.
        name: Name,
        /// The permits the sender's instance has.
        theirs: u32,
        /// The permits this node's has.
        ours: u32,
        /// Whether the message was kept, to be delivered once the lock is
        /// idle here.
        kept: bool,
    },
    /// The sender's instance of a lock has permits no instance here may
    /// have (none, or several under an algorithm that admits one holder).
    #[error("message from {from} for lock {name:?} of {theirs} permits refused: {reason}")]
    BadPermits {
        /// The sender.
        from: NodeId,
        /// The lock.
        name: Name,
        /// The permits the sender's instance has.
        theirs: u32,
        /// Why no instance here may have them.
        reason: RequestError,
    },
}

/// Why the application's request for a lock was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Zero permits.
    #[error("a lock needs at least 1 permit")]
    NoPermits,
    /// More than one permit from an algorithm that grants one holder.
    #[error("{mutex} grants one holder at a time; {permits} permits need {counting}")]
    NotCounting {
        /// The algorithm.
        mutex: &'static str,
        /// The permits asked for.
        permits: u32,
        /// The algorithms that can, as a phrase.
        counting: String,
    },
    /// The node keeps as many lock instances as it may
    /// ([`Forgetting::locks`](crate::Forgetting::locks)), none of them idle
    /// enough to make room; this one is new.
    #[error("this node keeps {0} lock instances already, none of them idle: a new name waits until one is")]
    TooManyLocks(usize),
    /// The lock is live here with another number of permits.
    #[error("lock {name:?} is held and asked for with {live} permit(s) here, not {asked}")]
    Permits {
        /// The lock.
        name: Name,
        /// Its permits here.
        live: u32,
        /// The permits asked for.
        asked: u32,
    },
}

/// Message counters by kind, plus the mutex layer's total. Kinds are the
/// algorithms' own names ([`Message::kind`](crate::Message::kind)), kept
/// as they are: an engine is copied whole at every fork of a checker's
/// run, and this way the copy allocates no names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Messages sent, by kind.
    pub sent: BTreeMap<&'static str, u64>,
    /// Messages received, by kind.
    pub received: BTreeMap<&'static str, u64>,
    /// Mutex-layer messages sent.
    pub mutex_sent: u64,
    /// Idle locks forgotten.
    pub forgotten: u64,
    /// Of those, forgotten before `forget_after`, the least recently used
    /// idle lock making room for a new one at the limit.
    pub evicted: u64,
}

impl Counters {
    fn bump(map: &mut BTreeMap<&'static str, u64>, kind: &'static str) {
        *map.entry(kind).or_default() += 1;
    }

    fn owned(map: &BTreeMap<&'static str, u64>) -> BTreeMap<String, u64> {
        map.iter().map(|(kind, n)| (kind.to_string(), *n)).collect()
    }
}

/// A node's view of itself, as `coterie status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The node.
    pub id: u32,
    /// Its mutual-exclusion algorithm.
    pub mutex: String,
    /// Its election algorithm.
    pub election: String,
    /// The coordinator it follows.
    pub coordinator: Option<u32>,
    /// That coordinator's epoch.
    pub epoch: u64,
    /// Where it stands with respect to the critical section.
    pub cs_state: CsState,
    /// The ids it believes up, itself included.
    pub alive: Vec<u32>,
    /// Critical-section entries granted to it.
    pub cs_entries: u64,
    /// The fence of its current grant, while it holds (the first lock's
    /// it holds, by name).
    pub fence: Option<u64>,
    /// How many locks have an instance at this node (live names).
    #[serde(default)]
    pub names: u64,
    /// How many forgotten locks left a remnant here.
    #[serde(default)]
    pub remnants: u64,
    /// Whether it has joined the cluster.
    pub joined: bool,
    /// Messages sent, by kind.
    pub messages_sent: BTreeMap<String, u64>,
    /// Messages received, by kind.
    pub messages_received: BTreeMap<String, u64>,
    /// Mutex-layer messages sent (the numerator of messages per entry).
    pub mutex_messages_sent: u64,
    /// The failure timeout in force, in milliseconds: the configured one,
    /// or a multiple of it while the node's own timer runs late
    /// ([`FailureDetector::ran_late`]).
    #[serde(default)]
    pub failure_timeout_ms: u64,
    /// How many times the configured failure timeout has been added to
    /// it: 0 while the node keeps time.
    #[serde(default)]
    pub awareness: u32,
    /// The reliable session with each peer; filled in by the node's
    /// transport (the engine knows nothing of sessions).
    #[serde(default)]
    pub sessions: Vec<crate::session::SessionStatus>,
    /// Who decides that a peer is down: `majority` or `detector`.
    #[serde(default)]
    pub partitions: String,
    /// The view installed here (majority mode), if any.
    #[serde(default)]
    pub view: Option<ViewStatus>,
    /// How long its lease has left, in milliseconds (majority mode;
    /// `None` without one).
    #[serde(default)]
    pub lease_ms: Option<u64>,
    /// Whether it holds a lease from a majority: always in detector mode.
    #[serde(default = "yes")]
    pub quorum: bool,
}

fn yes() -> bool {
    true
}

/// A view as `status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewStatus {
    /// Its epoch, as a number (round in the high bits, proposer in the low
    /// 16).
    pub epoch: u64,
    /// Its epoch as `e<round>.<proposer>`.
    pub name: String,
    /// Its members.
    pub members: Vec<u32>,
}

impl ViewStatus {
    /// How `view` is shown.
    pub fn of(view: &View) -> ViewStatus {
        ViewStatus {
            epoch: view.epoch.0,
            name: view.epoch.to_string(),
            members: view.members.iter().map(|m| m.0).collect(),
        }
    }
}

/// How many failure timeouts more a joining node that has heard from no
/// peer waits before it joins alone.
pub const JOIN_PATIENCE: u32 = 4;

/// One node's protocol stack; see the module documentation.
pub struct Engine {
    cfg: AlgoConfig,
    /// The mutual-exclusion algorithm's registry entry.
    mutex: &'static MutexInfo,
    election_info: &'static ElectionInfo,
    detector: FailureDetector,
    /// Which peers the algorithms count up, in majority mode, and the
    /// lease.
    membership: Membership,
    /// Outputs held back while the node may not act (no lease, or a view
    /// change under way): the algorithms' messages and grants.
    held: VecDeque<(Output, u64)>,
    /// Whether it held a lease after its last input.
    quorum: bool,
    /// Reused buffer for the membership layer's events.
    events: Vec<Event>,
    election: Box<dyn DynElection>,
    /// One instance of the mutex algorithm per lock.
    locks: Resources,
    /// Messages for a lock in use here with other permits, until it is
    /// idle.
    parked: Lot,
    /// Armed algorithm timers.
    timers: BTreeMap<(Scope, TimerId), Time>,
    next_heartbeat: Time,
    /// On a ring: when the peers not counted up (or, while joining, not
    /// yet heard count this node in) are next asked for an answer.
    next_sweep: Time,
    /// When `handle_timeout` last ran: a much later call means this node
    /// was stalled in between.
    last_tick: Time,
    /// While joining: when to stop waiting for silent peers.
    join_deadline: Option<Time>,
    /// While joining: how many times the deadline passed with no peer
    /// heard at all (see [`JOIN_PATIENCE`]).
    join_extended: u32,
    /// While joining: peers whose heartbeat (epoch, watermark) has arrived
    /// saying they count this incarnation as up.
    synced: BTreeSet<NodeId>,
    /// While joining: how far it had got when the deadline last passed
    /// (peers heard from, and synced): a cluster still arriving is waited
    /// for (see `join_or_wait`).
    join_progress: usize,
    /// A coordinator elected before this node joined (others' elections
    /// can name it): the mutex layer learns of it only on joining, when
    /// the node knows who is alive.
    coordinator_pending: Option<(NodeId, Epoch)>,
    cs_entries: u64,
    counters: Counters,
    /// Outputs, each with the number of the record it rests on.
    outputs: VecDeque<(Output, u64)>,
    /// The record the outputs of the step under way rest on.
    rests_on: u64,
    /// Reused buffer for the layers' actions.
    scratch: Actions,
    /// What was handed to the driver for stable storage.
    records: Records,
}

/// A copy of the whole stack, state and all: a checker forks a run at a
/// state and explores each way on from it.
impl Clone for Engine {
    fn clone(&self) -> Engine {
        Engine {
            cfg: self.cfg.clone(),
            mutex: self.mutex,
            election_info: self.election_info,
            detector: self.detector.clone(),
            membership: self.membership.clone(),
            held: self.held.clone(),
            parked: self.parked.clone(),
            quorum: self.quorum,
            events: Vec::new(),
            election: self.election.clone_box(),
            locks: self.locks.clone(),
            timers: self.timers.clone(),
            next_heartbeat: self.next_heartbeat,
            next_sweep: self.next_sweep,
            last_tick: self.last_tick,
            join_deadline: self.join_deadline,
            join_extended: self.join_extended,
            synced: self.synced.clone(),
            join_progress: self.join_progress,
            coordinator_pending: self.coordinator_pending,
            cs_entries: self.cs_entries,
            counters: self.counters.clone(),
            outputs: self.outputs.clone(),
            rests_on: self.rests_on,
            scratch: Actions::new(),
            records: self.records.clone(),
        }
    }
}

impl Engine {
    /// Feeds to `h` everything that decides what this engine does next:
    /// its incarnation, the failure detector, both algorithms, the timers
    /// and the join, the request and the grant under way. Left out, since
    /// none of them changes what the node sends, grants or decides: the
    /// message counters and entries made (they only grow), the outputs
    /// (a driver drains them after every step), and the numbering of
    /// stable-storage records (it decides only when the driver writes,
    /// and what is written follows from the algorithms' state).
    pub fn hash_state<H: std::hash::Hasher>(&self, h: &mut H, now: Time) {
        use std::hash::Hash;
        let at = |t: Time| crate::outbox::relative(t, now);
        self.cfg.incarnation.hash(h);
        self.detector.hash_at(h, now);
        self.membership.hash_at(h, now);
        self.held.hash(h);
        self.election.hash_state(h, now);
        self.hash_locks(h, now);
        for (key, &deadline) in &self.timers {
            (key, at(deadline)).hash(h);
        }
        at(self.next_heartbeat).hash(h);
        at(self.next_sweep).hash(h);
        at(self.last_tick).hash(h);
        self.join_deadline.map(at).hash(h);
        self.join_extended.hash(h);
        self.synced.hash(h);
        self.join_progress.hash(h);
        self.coordinator_pending.hash(h);
    }

    /// Every lock's instance, grant and held-back request.
    fn hash_locks<H: std::hash::Hasher>(&self, h: &mut H, now: Time) {
        use std::hash::Hash;
        self.locks.floor().hash(h);
        self.locks.made().hash(h);
        self.locks.hash_forgetting(h, now);
        for (name, lock) in self.locks.in_order() {
            name.hash(h);
            lock.mutex.hash_state(h, now);
            lock.fences.hash(h);
            lock.pending.hash(h);
            lock.reads.0.hash(h);
        }
    }

    /// Feeds to `h` the state of the two algorithms and the grant under
    /// way, without the failure detector's last-heard times: what stays
    /// the same while only heartbeats pass (see [`idle`](Self::idle)).
    pub fn hash_algorithms<H: std::hash::Hasher>(&self, h: &mut H, now: Time) {
        self.election.hash_state(h, now);
        self.hash_locks(h, now);
    }

    /// Whether nothing will happen here of the engine's own accord but
    /// heartbeats: no algorithm timer is armed, the node has joined, every
    /// peer counts as up and no output waits to be drained. An idle engine
    /// changes state only when a message other than a heartbeat arrives,
    /// a peer falls silent, or a heartbeat says something new.
    pub fn idle(&self) -> bool {
        self.timers.is_empty()
            && self.join_deadline.is_none()
            && self.membership.idle()
            && self.held.is_empty()
            && !self.locks.any_pending()
            && self.outputs.is_empty()
            && self.cfg.members.iter().all(|&p| self.is_up(p))
    }

    /// Builds the stack for `cfg` running `mutex_info` and
    /// `election_info`, starting at `now`.
    pub fn new(
        cfg: AlgoConfig,
        mutex_info: &'static MutexInfo,
        election_info: &'static ElectionInfo,
        now: Time,
    ) -> Engine {
        let mut cfg = cfg;
        // The records of the locks go to `records`, which keeps them up to
        // date; the configuration keeps the rest, for the election.
        let restored = cfg.restored.take();
        cfg.restored = restored.as_ref().map(Restored::header);
        if cfg.timing.lease.partitions == crate::membership::Partitions::Majority {
            // Every lease needs a majority's echoes each period: every
            // member heartbeats every other, whatever the detector.
            cfg.timing.detector = Detector::All;
        }
        let detector = FailureDetector::new(cfg.peers(), cfg.timing.failure_timeout, now);
        let promised = cfg.restored.as_ref().map_or(Epoch(0), |r| r.promised);
        let membership = Membership::new(
            cfg.id,
            &cfg.members,
            cfg.timing.lease,
            cfg.timing.failure_timeout,
            cfg.timing.heartbeat,
            promised,
        );
        let lone = cfg.members.len() <= 1;
        let mut engine = Engine {
            mutex: mutex_info,
            election_info,
            detector,
            quorum: membership.quorum(now),
            membership,
            held: VecDeque::new(),
            parked: Lot::default(),
            events: Vec::new(),
            election: (election_info.build)(&cfg),
            locks: Resources::new(mutex_info.build, cfg.forgetting),
            timers: BTreeMap::new(),
            next_heartbeat: now,
            next_sweep: now,
            last_tick: now,
            join_deadline: Some(now + cfg.timing.failure_timeout),
            join_extended: 0,
            synced: BTreeSet::new(),
            join_progress: 0,
            coordinator_pending: None,
            cs_entries: 0,
            counters: Counters::default(),
            outputs: VecDeque::new(),
            rests_on: 0,
            scratch: Actions::new(),
            records: Records::new(restored.unwrap_or_default()),
            cfg,
        };
        // A restarted node's clock starts above whatever it issued before.
        let watermark = engine.records.latest().watermark;
        engine.locks.observe(watermark);
        // The default lock exists from the start, as the one lock did
        // before there were names; every other is made on first use.
        let permits = u32::try_from(engine.cfg.capacity).unwrap_or(u32::MAX);
        engine.lock(now, &Name::default(), permits);
        // Heartbeats go out first thing, so that on every link the first
        // message of this incarnation announces it.
        engine.send_heartbeats(now);
        if engine.membership.majority_mode() {
            // A lone node installs its view at once.
            engine.membership_tick(now);
        } else if lone {
            engine.join(now);
        }
        engine
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        self.cfg.id
    }

    /// The configuration the engine was built with.
    pub fn config(&self) -> &AlgoConfig {
        &self.cfg
    }

    /// The mutual-exclusion algorithm's name.
    pub fn mutex_name(&self) -> &'static str {
        self.mutex.name
    }

    /// The election algorithm's name.
    pub fn election_name(&self) -> &'static str {
        self.election_info.name
    }

    /// The membership layer: the view, the lease.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// Whether this node holds a lease from a majority at `now` (always
    /// in detector mode): without one it grants nothing, and a request
    /// made here waits until it has one again.
    pub fn quorum(&self, now: Time) -> bool {
        self.membership.quorum(now)
    }

    /// The coordinator this node follows.
    pub fn coordinator(&self) -> Option<NodeId> {
        self.election.coordinator()
    }

    /// The epoch of that coordinator.
    pub fn epoch(&self) -> Epoch {
        self.election.epoch()
    }

    /// The timestamp of this node's current request for lock `name`, if
    /// its algorithm orders requests by timestamp.
    pub fn request_stamp(&self, name: &Name) -> Option<Stamp> {
        self.locks.get(name).and_then(|l| l.mutex.request_stamp())
    }

    /// Where this node stands over all its locks: holding if it holds
    /// any, else wanting if it wants any, else idle.
    pub fn cs_state(&self) -> CsState {
        self.locks.cs_state()
    }

    /// Where this node stands with respect to lock `name`.
    pub fn cs_state_of(&self, name: &Name) -> CsState {
        self.locks.get(name).map_or(CsState::Idle, |l| l.cs_state())
    }

    /// The fence of this node's grant of lock `name`, while it holds it
    /// (the oldest, if it holds several).
    pub fn fence_of(&self, name: &Name) -> Option<Fence> {
        self.locks.get(name).and_then(|l| l.fences.first().copied())
    }

    /// The fences of every grant of lock `name` this node holds, oldest
    /// first (one at most, but for an algorithm that counts sessions).
    pub fn fences_of(&self, name: &Name) -> &[Fence] {
        self.locks.get(name).map_or(&[], |l| &l.fences)
    }

    /// Whether the algorithm counts (permits go to sessions, not nodes:
    /// [`Claims::counting`](registry::Claims::counting)): this node may
    /// hold several grants of a lock.
    pub fn counts_sessions(&self) -> bool {
        self.mutex.claims.counting
    }

    /// How many grants of lock `name` this node holds or has asked for.
    pub fn outstanding(&self, name: &Name) -> u32 {
        self.locks.get(name).map_or(0, |l| l.outstanding())
    }

    /// How many grants of lock `name` in `mode` this node holds or has
    /// asked for.
    pub fn outstanding_in(&self, name: &Name, mode: Mode) -> u32 {
        self.locks.get(name).map_or(0, |l| l.outstanding_in(mode))
    }

    /// The mode of this node's grant `fence` of lock `name` (a write if
    /// it holds no such grant).
    pub fn mode_of(&self, name: &Name, fence: Fence) -> Mode {
        self.locks.get(name).map_or(Mode::Write, |l| l.mutex.mode_of(fence))
    }

    /// The permits lock `name`'s instance here was made with, if it has
    /// one.
    pub fn permits_of(&self, name: &Name) -> Option<u32> {
        self.locks.get(name).map(|l| l.permits)
    }

    /// How many locks have an instance here.
    pub fn names(&self) -> usize {
        self.locks.len()
    }

    /// Whether the node has joined.
    pub fn joined(&self) -> bool {
        self.join_deadline.is_none()
    }

    /// The message counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Entries granted to this node so far.
    pub fn cs_entries(&self) -> u64 {
        self.cs_entries
    }

    /// Whether every peer counted as up has been heard from after `since`
    /// (see [`FailureDetector::all_heard_since`]).
    pub fn all_peers_heard_since(&self, since: Time) -> bool {
        self.detector.all_heard_since(since)
    }

    /// Whether the failure detector counts `peer` as up.
    pub fn is_up(&self, peer: NodeId) -> bool {
        peer == self.cfg.id || self.detector.is_up(peer)
    }

    /// Decodes an election- or mutex-layer payload for a trace line.
    pub fn describe(&self, envelope: &Envelope) -> String {
        match envelope {
            Envelope::Heartbeat(hb) => format!("{hb:?}"),
            Envelope::Suspect(peer) => format!("Suspect {{ peer: n{} }}", peer.0),
            Envelope::Election(b) => self.election.describe(b),
            Envelope::Application(bytes) => format!("Application {{ {} bytes }}", bytes.len()),
            Envelope::Membership(msg) => format!("{msg:?}"),
            Envelope::Mutex { name, bytes, .. } => {
                // Every instance decodes alike; the default one always
                // exists.
                let text = self
                    .locks
                    .get(name)
                    .or_else(|| self.locks.get(&Name::default()))
                    .map_or_else(String::new, |l| l.mutex.describe(bytes));
                if name.as_str() == Name::DEFAULT {
                    text
                } else {
                    format!("{name:?} {text}")
                }
            }
        }
    }

    /// The node's status report.
    pub fn status(&self) -> Status {
        let mut alive: Vec<u32> = self.detector.up_peers().map(|p| p.0).collect();
        alive.push(self.cfg.id.0);
        alive.sort_unstable();
        Status {
            id: self.cfg.id.0,
            mutex: self.mutex.name.to_string(),
            election: self.election_info.name.to_string(),
            coordinator: self.coordinator().map(|c| c.0),
            epoch: self.epoch().0,
            cs_state: self.cs_state(),
            alive,
            cs_entries: self.cs_entries,
            fence: self
                .locks
                .in_order()
                .into_iter()
                .find_map(|(_, l)| l.fences.first())
                .map(|f| f.0),
            names: self.locks.len() as u64,
            remnants: self.locks.remnants() as u64,
            joined: self.joined(),
            messages_sent: Counters::owned(&self.counters.sent),
            messages_received: Counters::owned(&self.counters.received),
            mutex_messages_sent: self.counters.mutex_sent,
            failure_timeout_ms: self.detector.timeout().as_millis() as u64,
            awareness: self.detector.awareness(),
            sessions: Vec::new(),
            partitions: self.cfg.timing.lease.partitions.name().to_string(),
            view: self.membership.view().map(ViewStatus::of),
            lease_ms: None,
            quorum: true,
        }
    }

    /// The status at `now`: [`status`](Self::status) with the lease's time
    /// left.
    pub fn status_at(&self, now: Time) -> Status {
        let mut status = self.status();
        if self.membership.majority_mode() {
            let end = self.membership.lease_end();
            status.lease_ms = end
                .filter(|&e| e > now)
                .map(|e| e.saturating_sub(now).as_millis().min(u128::from(u64::MAX)) as u64);
            status.quorum = self.membership.quorum(now);
        }
        status
    }

    /// The next queued output.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front().map(|(output, _)| output)
    }

    /// The next queued output, with the record it rests on: the number of
    /// the [`Output::Persist`] (counted from 1, in the order given) that
    /// must be durable before it is carried out, 0 for none. Outputs to one
    /// peer still go in order. A driver that writes each record before
    /// going on can use [`poll_output`](Self::poll_output) instead.
    pub fn poll_output_resting(&mut self) -> Option<(Output, u64)> {
        self.outputs.pop_front()
    }

    fn emit(&mut self, output: Output) {
        self.outputs.push_back((output, self.rests_on));
    }

    /// Hands the latest record over; what follows rests on it.
    fn emit_record(&mut self, delta: Delta) {
        self.emit(Output::Persist(delta.clone()));
        self.rests_on = self.records.hand(delta);
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next be called.
    pub fn next_deadline(&self) -> Option<Time> {
        let timers = self.timers.values().copied().min();
        let forget = self.locks.next_forgetting();
        [
            Some(self.next_heartbeat),
            self.join_deadline,
            self.detector.next_deadline(),
            timers,
            forget,
            self.membership.next_deadline(self.last_tick),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The application wants lock `name`, one of its `permits` (made here
    /// if the lock is new to this node). An algorithm with one holder
    /// grants a node the lock once at a time: nothing happens if this node
    /// already wants or holds it, and the node asks once for all its
    /// clients. One that counts ([`Claims::counting`](registry::Claims::counting))
    /// is asked for one more permit each time, up to `permits` held or
    /// asked for here. Refused when the algorithm grants one holder and
    /// `permits` is more, or when the lock is live here with another
    /// number of permits.
    pub fn request(&mut self, now: Time, name: &Name, permits: u32) -> Result<(), RequestError> {
        self.request_in(now, name, permits, Mode::Write)
    }

    /// [`request`](Self::request) in `mode`. A read shares the lock with
    /// other reads where the algorithm has a reader form
    /// ([`Claims::readers`](registry::Claims::readers)) and the lock has
    /// one permit; elsewhere it is asked for as a write
    /// ([`mode_in_use`](Self::mode_in_use)). An algorithm that counts
    /// sessions is asked for a read per call, up to
    /// [`MAX_READS`](crate::algorithm::MAX_READS) held or asked for here.
    pub fn request_in(
        &mut self,
        now: Time,
        name: &Name,
        permits: u32,
        mode: Mode,
    ) -> Result<(), RequestError> {
        self.check_permits(name, permits)?;
        self.renumber(name, permits);
        let mode = self.mode_in_use(mode, permits);
        let busy = match self.locks.get(name) {
            Some(lock) if self.mutex.claims.counting => match mode {
                Mode::Write => lock.outstanding_in(Mode::Write) >= permits,
                Mode::Read => lock.outstanding_in(Mode::Read) >= MAX_READS,
            },
            Some(lock) => lock.cs_state() != CsState::Idle,
            None => false,
        };
        if busy {
            return Ok(());
        }
        self.lock(now, name, permits);
        if !self.joined() {
            if let Some(lock) = self.locks.get_mut(name) {
                lock.count_request(mode, true);
            }
            return Ok(());
        }
        self.locks.catch_up(name);
        self.ask(now, name, mode);
        self.settle_lease(now);
        Ok(())
    }

    /// Where the algorithm counts sessions: asks for grants of lock `name`
    /// (of `permits`) until this node holds or has asked for one for each
    /// of `sessions`, `reads` of them reads where reads share the lock
    /// ([`mode_in_use`](Self::mode_in_use)) and the others writes, at most
    /// `permits` of those. A node and the simulator ask so for the
    /// sessions that hold or wait there; elsewhere a node asks once for
    /// all of them ([`Mode::serving`]).
    pub fn request_for_sessions(
        &mut self,
        now: Time,
        name: &Name,
        permits: u32,
        (sessions, reads): (u32, u32),
    ) -> Result<(), RequestError> {
        let reads = match self.mode_in_use(Mode::Read, permits) {
            Mode::Read => reads.min(sessions),
            Mode::Write => 0,
        };
        let writes = (sessions - reads).min(permits);
        for (mode, wanted) in [(Mode::Write, writes), (Mode::Read, reads)] {
            while self.outstanding_in(name, mode) < wanted {
                let before = self.outstanding_in(name, mode);
                self.request_in(now, name, permits, mode)?;
                if self.outstanding_in(name, mode) == before {
                    break; // the engine takes no more
                }
            }
        }
        Ok(())
    }

    /// The mode a request in `mode` for a lock of `permits` is asked in:
    /// a read stays a read only where the algorithm has a reader form and
    /// the lock one permit (a semaphore's permits are all alike).
    pub fn mode_in_use(&self, mode: Mode, permits: u32) -> Mode {
        if self.mutex.claims.readers && permits == 1 {
            mode
        } else {
            Mode::Write
        }
    }

    /// Whether lock `name` may be asked for with `permits` here.
    pub fn check_permits(&self, name: &Name, permits: u32) -> Result<(), RequestError> {
        if permits == 0 {
            return Err(RequestError::NoPermits);
        }
        if permits > 1 && !self.mutex.claims.counting {
            let mut counting: Vec<&str> =
                registry::MUTEXES.iter().filter(|m| m.claims.counting).map(|m| m.name).collect();
            let last = counting.pop().unwrap_or_default();
            let counting = if counting.is_empty() {
                last.into()
            } else {
                format!("{} or {last}", counting.join(", "))
            };
            return Err(RequestError::NotCounting { mutex: self.mutex.name, permits, counting });
        }
        match self.locks.get(name) {
            Some(lock) if lock.permits != permits && !self.locks.replaceable(name) => {
                Err(RequestError::Permits {
                    name: name.clone(),
                    live: lock.permits,
                    asked: permits,
                })
            }
            Some(_) => Ok(()),
            None => match self.cfg.forgetting {
                Some(f) if self.locks.len() >= f.locks && !self.locks.has_idle() => {
                    Err(RequestError::TooManyLocks(f.locks))
                }
                _ => Ok(()),
            },
        }
    }

    /// A lock's permits are the name's, not the instance's: asked for (or
    /// sent a message about) with another number while its instance here
    /// holds nothing that would be lost, the instance is forgotten, to be
    /// made again with the new number.
    fn renumber(&mut self, name: &Name, permits: u32) {
        if self.locks.get(name).is_some_and(|l| l.permits != permits) && self.locks.forget_now(name)
        {
            self.forgotten(vec![name.clone()]);
        }
    }

    /// Hands lock `name`'s instance one more request, in `mode`.
    fn ask(&mut self, now: Time, name: &Name, mode: Mode) {
        if let Some(lock) = self.locks.get_mut(name) {
            lock.count_request(mode, false);
        }
        self.step(now, name, |m, acts| m.handle_request_in(now, mode, acts));
    }

    /// The application left lock `name` (its oldest grant, if the node
    /// holds several). Ignored unless held.
    pub fn release(&mut self, now: Time, name: &Name) {
        if let Some(fence) = self.fence_of(name) {
            self.release_grant(now, name, fence);
        }
    }

    /// The application left lock `name`'s grant `fence`. Ignored unless
    /// this node holds that grant.
    pub fn release_grant(&mut self, now: Time, name: &Name, fence: Fence) {
        let Some(lock) = self.locks.get_mut(name) else { return };
        let Some(at) = lock.fences.iter().position(|&f| f == fence) else { return };
        lock.fences.remove(at);
        // A grant the driver was never handed is taken back with it.
        self.take_back(name, fence);
        self.step(now, name, |m, acts| m.handle_release_of(now, fence, acts));
        self.unpark(now);
        self.settle_lease(now);
    }

    /// Makes lock `name`'s instance, for `permits` holders at once, if it
    /// has none yet, and tells it what the node knows: which peers are up
    /// ([`handle_adopt`](crate::MutexAlgorithm::handle_adopt): they have
    /// nothing of this node's for a lock it never had) and, once joined,
    /// who coordinates (a coordinator's instance rebuilds what the lock's
    /// holders and waiters know, as after any change of coordinator).
    fn lock(&mut self, now: Time, name: &Name, permits: u32) {
        if self.locks.contains(name) {
            return;
        }
        // At the limit, the lock idle longest makes room (a peer's message
        // makes an instance even when none is idle: see `deliver_to_lock`).
        if self.cfg.forgetting.is_some_and(|f| self.locks.len() >= f.locks) {
            if let Some(oldest) = self.locks.forget_oldest() {
                self.counters.evicted += 1;
                self.forgotten(vec![oldest]);
            }
        }
        let cfg = AlgoConfig {
            id: self.cfg.id,
            name: name.clone(),
            members: self.cfg.members.clone(),
            capacity: permits as usize,
            timing: self.cfg.timing,
            incarnation: self.cfg.incarnation,
            wall_origin: self.cfg.wall_origin,
            mutex_options: self.cfg.mutex_options,
            // What stable storage holds for this lock, if anything: left
            // by the previous run, or by this lock's instance before it
            // was forgotten (which it never is while its record matters).
            restored: self.cfg.restored.as_ref().map(|header| {
                let mut header = header.clone(); // `new` left it no names
                if let Some(record) = self.records.latest().names.get(name) {
                    header.names.insert(name.clone(), record.clone());
                }
                header
            }),
            forgetting: self.cfg.forgetting,
        };
        self.locks.create(&cfg);
        for peer in self.counted_up() {
            self.step(now, name, |m, acts| m.handle_adopt(now, peer, acts));
        }
        if self.joined() {
            if let Some(leader) = self.election.coordinator() {
                let epoch = self.election.epoch();
                self.step(now, name, |m, acts| m.handle_coordinator(now, leader, epoch, acts));
            }
        }
    }

    /// Runs one input on lock `name`'s instance, if it has one, and
    /// carries out its actions.
    fn step(
        &mut self,
        now: Time,
        name: &Name,
        input: impl FnOnce(&mut dyn crate::registry::DynMutex, &mut Actions),
    ) {
        let Some(lock) = self.locks.get_mut(name) else { return };
        let mut acts = std::mem::take(&mut self.scratch);
        input(lock.mutex.as_mut(), &mut acts);
        self.apply(now, Scope::Mutex(name.clone()), acts);
        self.locks.stepped(name, now, self.join_deadline.is_none());
    }

    /// Runs one input on every lock's instance, in name order.
    fn step_all(
        &mut self,
        now: Time,
        input: impl Fn(&mut dyn crate::registry::DynMutex, &mut Actions),
    ) {
        for name in self.locks.names() {
            self.step(now, &name, &input);
        }
    }

    /// A message arrived from `from`.
    pub fn handle_message(
        &mut self,
        now: Time,
        from: NodeId,
        envelope: Envelope,
    ) -> Result<(), EngineError> {
        if from == self.cfg.id || !self.cfg.members.contains(&from) {
            return Err(EngineError::UnknownPeer(from));
        }
        if let Envelope::Heartbeat(hb) = &envelope {
            if let Some(Verdict::Down(peer)) = self.detector.incarnation(from, hb.incarnation) {
                self.membership.restarted(peer);
                self.peer_down(now, peer);
            }
        }
        let came_up = match self.detector.heard_from(from, now) {
            Some(Verdict::Up(peer)) => {
                self.peer_up(now, peer, false);
                true
            }
            Some(Verdict::Back(peer)) => {
                self.peer_up(now, peer, true);
                true
            }
            _ => false,
        };
        // After the heartbeat is delivered: its watermark brings this
        // node's clock up to what happened while the two were apart.
        let forgotten = match &envelope {
            Envelope::Heartbeat(hb) if hb.readmitted && !came_up => Some(hb.you),
            _ => None,
        };
        let result = self.deliver(now, from, envelope);
        if let Some(you) = forgotten {
            self.forgotten_by(now, from, you);
        }
        self.join_if_complete(now);
        self.unpark(now);
        self.settle_lease(now);
        result
    }

    /// Hands a message to the layer it is for.
    fn deliver(&mut self, now: Time, from: NodeId, envelope: Envelope) -> Result<(), EngineError> {
        let mut acts = self.take_scratch();
        let result = match &envelope {
            Envelope::Heartbeat(hb) => {
                Counters::bump(&mut self.counters.received, "heartbeat");
                self.locks.observe(hb.watermark);
                let mut events = std::mem::take(&mut self.events);
                self.membership.on_heartbeat(from, &hb.lease, now, &mut events);
                self.on_membership(now, &mut events);
                self.events = events;
                if hb.probe {
                    self.send_heartbeat(from, false, now);
                }
                let this_view = !self.membership.majority_mode()
                    || hb.lease.view.is_some_and(|v| self.membership.installed_is(v));
                if self.join_deadline.is_some() && hb.you == Some(self.cfg.incarnation) && this_view
                {
                    self.synced.insert(from);
                }
                if self.membership.admits(from) {
                    self.election.handle_epoch_hint(now, from, hb.epoch, hb.coordinator, &mut acts);
                }
                self.apply(now, Scope::Election, acts);
                return Ok(());
            }
            Envelope::Membership(msg) => {
                Counters::bump(&mut self.counters.received, msg.kind());
                self.scratch = acts;
                let mut events = std::mem::take(&mut self.events);
                self.membership.handle(from, msg.clone(), now, &mut events);
                self.on_membership(now, &mut events);
                self.events = events;
                return Ok(());
            }
            Envelope::Election(_) | Envelope::Mutex { .. } if !self.membership.admits(from) => {
                // From outside the view, or of a view this node did not
                // install, or sent before a joiner started over: the
                // algorithms count its sender crashed, or do not know it
                // yet.
                Counters::bump(&mut self.counters.received, "stale");
                self.scratch = acts;
                return Ok(());
            }
            Envelope::Suspect(peer) => {
                Counters::bump(&mut self.counters.received, "suspect");
                self.scratch = acts;
                // Checked here, not believed: suspected only if it does
                // not answer this node within a failure timeout.
                if *peer != self.cfg.id && self.detector.check_on(*peer, now) {
                    self.send_heartbeat(*peer, true, now);
                }
                return Ok(());
            }
            Envelope::Election(bytes) => self
                .election
                .handle_message(now, from, bytes, &mut acts)
                .map(|kind| (Scope::Election, kind))
                .map_err(|source| (Layer::Election, source)),
            Envelope::Mutex { name, permits, bytes } => {
                self.scratch = acts;
                return self.deliver_to_lock(now, from, name, *permits, bytes);
            }
            Envelope::Application(bytes) => {
                Counters::bump(&mut self.counters.received, "application");
                self.scratch = acts;
                self.emit(Output::Application { from, bytes: bytes.clone() });
                return Ok(());
            }
        };
        match result {
            Ok((scope, kind)) => {
                Counters::bump(&mut self.counters.received, kind);
                self.apply(now, scope, acts);
                Ok(())
            }
            Err((layer, source)) => {
                self.scratch = acts;
                Err(EngineError::Undecodable { from, layer, source })
            }
        }
    }

    /// Delivers the parked messages of every lock where one of them fits
    /// now (the lock idle here, forgotten, or made anew with their
    /// permits), in the order they came, each from a sender still in the
    /// view; one that does not fit parks anew, and its sender's later ones
    /// behind it.
    fn unpark(&mut self, now: Time) {
        if self.parked.is_empty() {
            return;
        }
        for name in self.parked.names() {
            let fits = self.parked.permits(&name).any(|p| self.check_permits(&name, p).is_ok());
            if !fits {
                continue;
            }
            for p in self.parked.take(&name) {
                if self.membership.admits(p.from) {
                    // What it says was said when it arrived.
                    let _ = self.deliver_to_lock(now, p.from, &name, p.permits, &p.bytes);
                }
            }
        }
    }

    /// Hands a message to lock `name`'s instance, made here first (for the
    /// sender's `permits`) if the lock is new to this node. A message whose
    /// permits differ from those of the instance in use here is parked
    /// until the instance is idle (see [`parked`](crate::parked)), as is
    /// every later one of its sender for the lock; one that does not decode
    /// is refused, and an instance made for it alone is dropped again.
    fn deliver_to_lock(
        &mut self,
        now: Time,
        from: NodeId,
        name: &Name,
        permits: u32,
        bytes: &[u8],
    ) -> Result<(), EngineError> {
        let ours = self.locks.get(name).map_or(permits, |l| l.permits);
        let refused = |kept: bool| EngineError::Permits {
            from,
            name: name.clone(),
            theirs: permits,
            ours,
            kept,
        };
        let busy = match self.check_permits(name, permits) {
            Ok(()) | Err(RequestError::TooManyLocks(_)) => false,
            Err(RequestError::Permits { .. }) => true,
            Err(reason) => {
                let name = name.clone();
                return Err(EngineError::BadPermits { from, name, theirs: permits, reason });
            }
        };
        if busy || self.parked.holds(name, from) {
            // The default lock's permits are the cluster's, the same at
            // every node: a message that differs never fits, and waits for
            // nothing.
            let kept = name.as_str() != Name::DEFAULT
                && self.parked.park(name, Parked { from, permits, bytes: bytes.to_vec() });
            Counters::bump(&mut self.counters.received, if kept { "parked" } else { "refused" });
            return if busy { Err(refused(kept)) } else { Ok(()) };
        }
        self.renumber(name, permits);
        let made = !self.locks.contains(name);
        self.lock(now, name, permits);
        let mut acts = self.take_scratch();
        let lock = self.locks.get_mut(name).expect("made above");
        let result = lock.mutex.handle_message(now, from, bytes, &mut acts);
        match result {
            Ok(kind) => {
                Counters::bump(&mut self.counters.received, kind);
                self.apply(now, Scope::Mutex(name.clone()), acts);
                self.locks.stepped(name, now, self.join_deadline.is_none());
                Ok(())
            }
            Err(source) => {
                self.scratch = acts;
                if made {
                    self.drop_lock(name);
                }
                Err(EngineError::Undecodable { from, layer: Layer::Mutex, source })
            }
        }
    }

    /// Drops lock `name`'s instance and the timers it armed.
    fn drop_lock(&mut self, name: &Name) {
        self.locks.remove(name);
        self.timers.retain(|(scope, _), _| !matches!(scope, Scope::Mutex(n) if n == name));
    }

    /// Forgets the instances idle long enough by `now`
    /// ([`Forgetting`](crate::Forgetting)), and whatever stable storage
    /// kept for them.
    fn forget_idle(&mut self, now: Time) {
        let forgotten = self.locks.forget_due(now);
        if !forgotten.is_empty() {
            self.forgotten(forgotten);
        }
    }

    /// Drops what the engine kept for the instances just forgotten: their
    /// timers, and their records in stable storage.
    fn forgotten(&mut self, mut forgotten: Vec<Name>) {
        forgotten.sort();
        self.counters.forgotten += forgotten.len() as u64;
        self.timers.retain(
            |(scope, _), _| !matches!(scope, Scope::Mutex(n) if forgotten.binary_search(n).is_ok()),
        );
        let latest = self.records.latest();
        let mut delta = latest.unchanged();
        delta.names = forgotten
            .into_iter()
            .filter(|n| latest.names.contains_key(n))
            .map(|n| (n, None))
            .collect();
        if !delta.names.is_empty() {
            self.emit_record(delta);
        }
    }

    /// Sends `bytes` to `peer`'s application task, in order with the
    /// engine's own messages to it ([`Envelope::Application`]).
    pub fn send_application(&mut self, peer: NodeId, bytes: Vec<u8>) {
        if peer != self.cfg.id && self.cfg.members.contains(&peer) {
            self.push_send(peer, Envelope::Application(bytes), "application");
        }
    }

    /// The transport has evidence that `peer` failed: its connection
    /// closed and a redial was refused (the process is gone), or frames to
    /// or from it were lost (a [`session`](crate::session) overflowed). It
    /// is suspected at once; hearing from it again brings it back up, and
    /// every layer then treats the two as a crash and a recovery.
    pub fn handle_link_down(&mut self, now: Time, peer: NodeId) {
        if let Some(Verdict::Down(p)) = self.detector.link_down(peer) {
            self.peer_down(now, p);
        }
        self.unpark(now);
        self.settle_lease(now);
    }

    /// Time passed: fires whatever is due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        // Timeouts come at least every heartbeat period; a gap longer than
        // the failure timeout means this node was not running.
        if now.saturating_sub(self.last_tick) > self.cfg.timing.failure_timeout {
            self.detector.forgive_stall(now);
        }
        self.last_tick = now;
        // A heartbeat a whole period late: this node was starved, and its
        // peers' messages may be waiting unread. It trusts short silences
        // less until it keeps time again.
        if self.next_heartbeat <= now {
            if now - self.next_heartbeat >= self.cfg.timing.heartbeat {
                self.detector.ran_late(now);
            } else {
                self.detector.kept_time(now);
            }
        }
        if self.join_deadline.is_some_and(|d| d <= now) {
            self.join_or_wait(now);
        }
        if self.next_heartbeat <= now {
            self.send_heartbeats(now);
        }
        // On a ring, who this node watches for the others, before the
        // check counts any of them down (looked up only when a silence has
        // run out: this runs on every wake-up).
        let due = self.detector.next_deadline().is_some_and(|d| d <= now);
        let neighbours = match self.cfg.timing.detector {
            Detector::Ring { watch } if due => self.neighbours(watch),
            _ => BTreeSet::new(),
        };
        for verdict in self.detector.check(now) {
            if let Verdict::Down(peer) = verdict {
                self.peer_down(now, peer);
                if neighbours.contains(&peer) {
                    self.announce_suspicion(peer);
                }
            }
        }
        // Fire due algorithm timers in deadline order. A handler may re-arm
        // or cancel others, so look again after each one.
        while let Some((key, _)) =
            self.timers.iter().filter(|(_, &at)| at <= now).min_by_key(|(_, &at)| at)
        {
            let key = key.clone();
            self.timers.remove(&key);
            match key {
                (Scope::Election, timer) => {
                    let mut acts = self.take_scratch();
                    self.election.handle_timer(now, timer, &mut acts);
                    self.apply(now, Scope::Election, acts);
                }
                (Scope::Mutex(name), timer) => {
                    self.step(now, &name, |m, acts| m.handle_timer(now, timer, acts));
                }
            }
        }
        self.forget_idle(now);
        self.unpark(now);
        self.membership_tick(now);
    }

    /// One period's heartbeats ([`Detector`]): to every peer; or, on a
    /// ring, probes to the peers this node watches and has not heard from
    /// in the last period, and once a failure timeout to every peer it
    /// counts down (a live one answers and is up again) and, while it
    /// joins, to every peer it has not yet heard count it in.
    fn send_heartbeats(&mut self, now: Time) {
        // When the previous period's heartbeats went out.
        let previous = self.next_heartbeat.saturating_sub(self.cfg.timing.heartbeat);
        self.next_heartbeat = now + self.cfg.timing.heartbeat;
        let peers: Vec<NodeId> = self.cfg.peers().collect();
        match self.cfg.timing.detector {
            Detector::All => {
                for to in peers {
                    self.send_heartbeat(to, false, now);
                }
            }
            Detector::Ring { watch } => {
                self.rewatch(watch, now);
                // The peers it cannot count on yet are asked once a failure
                // timeout, not every period: a large cluster starting up
                // would otherwise send N² probes a period until all are up.
                // (A peer that comes back announces itself: it asks every
                // peer as it starts.)
                let sweep = self.next_sweep <= now;
                if sweep {
                    self.next_sweep = now + self.cfg.timing.failure_timeout;
                }
                let joining = self.join_deadline.is_some();
                for to in peers {
                    let unsure =
                        !self.detector.is_up(to) || (joining && !self.synced.contains(&to));
                    // Anything heard from a watched peer since the previous
                    // period's probes did what an answer would: it is asked
                    // again next period.
                    let due = self.detector.watched(to) && !self.detector.heard_since(to, previous);
                    if (unsure && sweep) || (!unsure && due) {
                        self.send_heartbeat(to, true, now);
                    }
                }
            }
        }
    }

    /// The first `watch` peers after this node by id (wrapping round)
    /// among those counted up: its neighbours on the ring.
    fn neighbours(&self, watch: u32) -> BTreeSet<NodeId> {
        let me = self.cfg.id;
        let mut ring: Vec<NodeId> = self.cfg.peers().filter(|&p| self.detector.is_up(p)).collect();
        ring.sort_unstable_by_key(|&p| (p < me, p));
        ring.into_iter().take(watch as usize).collect()
    }

    /// On a ring: watches its neighbours and its coordinator.
    fn rewatch(&mut self, watch: u32, now: Time) {
        let mut watched = self.neighbours(watch);
        watched.extend(self.election.coordinator().filter(|&c| c != self.cfg.id));
        let peers: Vec<NodeId> = self.cfg.peers().collect();
        for peer in peers {
            self.detector.set_watched(peer, watched.contains(&peer), now);
        }
    }

    /// Tells every peer counted up that `peer`, a neighbour on the ring,
    /// is suspected here; each checks for itself
    /// ([`FailureDetector::check_on`]). (Every node watches its
    /// coordinator too, but an election may move on before a node's own
    /// timeout runs out: the coordinator's neighbours speak for it as for
    /// any other.)
    fn announce_suspicion(&mut self, peer: NodeId) {
        let others: Vec<NodeId> = self.detector.up_peers().filter(|&p| p != peer).collect();
        for to in others {
            self.push_send(to, Envelope::Suspect(peer), "suspect");
        }
    }

    /// Asks every peer counted up for a heartbeat back at once, so that
    /// [`all_peers_heard_since`](Self::all_peers_heard_since) comes true
    /// within a round trip while they live (a node about to hand on a
    /// grant under a lock delay asks this). The periodic heartbeats go on
    /// as before.
    pub fn probe_peers(&mut self, now: Time) {
        let peers: Vec<NodeId> = self.cfg.peers().filter(|&p| self.detector.is_up(p)).collect();
        for to in peers {
            self.send_heartbeat(to, true, now);
        }
    }

    fn send_heartbeat(&mut self, to: NodeId, probe: bool, now: Time) {
        self.push_heartbeat(to, probe, false, now);
    }

    fn push_heartbeat(&mut self, to: NodeId, probe: bool, readmitted: bool, now: Time) {
        let lease = self.membership.heartbeat(to, now);
        // In majority mode a peer counts up here once its algorithms do:
        // a joiner waits until every member says so before it asks for
        // anything.
        let counted = !self.membership.majority_mode() || self.membership.counts(to);
        let hb = Heartbeat {
            epoch: self.election.epoch(),
            coordinator: self.election.coordinator(),
            watermark: self.locks.floor(),
            incarnation: self.cfg.incarnation,
            you: self.detector.up_incarnation(to).filter(|_| counted),
            probe,
            readmitted,
            lease,
        };
        self.push_send(to, Envelope::Heartbeat(hb), "heartbeat");
    }

    /// The join deadline passed. A node of a cluster that has heard from
    /// no peer at all is most likely the one in trouble (starved at a mass
    /// start, its own links slow), not the only one alive: it waits up to
    /// [`JOIN_PATIENCE`] more failure timeouts before it joins alone, for
    /// a lone node elects itself, and the epoch it takes makes every
    /// other node elect again once they hear of it.
    ///
    /// A node that has heard from more peers during the last timeout than
    /// before it waits one more: the cluster is still arriving (a hundred
    /// processes started together on a few cores come up over seconds),
    /// and a node that joined a partial cluster would elect among those it
    /// had heard from, only to be bullied by each higher one that arrives
    /// later, one round each. Waiting while the membership grows, every
    /// node joins once the arrivals stop, knowing the same live nodes, and
    /// the cluster starts in one election. At most two timeouts per peer
    /// (heard from, then synced): the wait ends when the arrivals stop, or
    /// with every peer synced.
    fn join_or_wait(&mut self, now: Time) {
        if self.membership.majority_mode() {
            // A view's members join together, once each has announced it
            // (see `join_if_complete`); until then, look again each
            // timeout.
            self.join_deadline = Some(now + self.cfg.timing.failure_timeout);
            return;
        }
        let heard_none = self.detector.up_peers().next().is_none();
        let timeout = self.cfg.timing.failure_timeout;
        if heard_none && self.cfg.peers().next().is_some() && self.join_extended < JOIN_PATIENCE {
            self.join_extended += 1;
            self.join_deadline = Some(now + timeout);
            return;
        }
        let progress = self.detector.up_peers().count() + self.synced.len();
        if progress > self.join_progress {
            self.join_progress = progress;
            self.join_deadline = Some(now + timeout);
            return;
        }
        self.join(now);
    }

    fn join(&mut self, now: Time) {
        if self.join_deadline.take().is_none() {
            return;
        }
        self.emit(Output::Joined);
        if let Some((leader, epoch)) = self.coordinator_pending.take() {
            self.step_all(now, |m, acts| m.handle_coordinator(now, leader, epoch, acts));
        }
        let mut acts = self.take_scratch();
        self.election.handle_start(now, &mut acts);
        self.apply(now, Scope::Election, acts);
        for name in self.locks.pending() {
            let (asked, reads) = self.locks.get_mut(&name).map_or((0, 0), |l| {
                (std::mem::take(&mut l.pending), std::mem::take(&mut l.reads.0))
            });
            self.locks.catch_up(&name);
            for at in 0..asked {
                let mode = if at < reads { Mode::Read } else { Mode::Write };
                self.ask(now, &name, mode);
            }
        }
        // What the instances made while joining hold may now be forgotten.
        for name in self.locks.names() {
            self.locks.stepped(&name, now, true);
        }
    }

    /// `peer` counts as up again; `readmitted` when it had been suspected
    /// without restarting (see [`forgotten_by`](Self::forgotten_by)).
    fn peer_up(&mut self, now: Time, peer: NodeId, readmitted: bool) {
        if self.membership.majority_mode() {
            // The algorithms hear of it through a view. It hears at once
            // that it counts as up here (and whether this node vouches for
            // it).
            self.push_heartbeat(peer, false, false, now);
            return;
        }
        self.emit(Output::PeerUp(peer));
        // Tell it at once that it counts as up here, so that it joins
        // without waiting for the next round of heartbeats, and, if it was
        // suspected, that this node forgot what it had asked.
        self.push_heartbeat(peer, false, readmitted, now);
        self.algorithms_up(now, peer, readmitted);
    }

    /// The algorithms count `peer` up: a newcomer, or (`readmitted`) one
    /// they had suspected without its restarting.
    fn algorithms_up(&mut self, now: Time, peer: NodeId, readmitted: bool) {
        if readmitted {
            self.step_all(now, |m, acts| m.handle_peer_back(now, peer, acts));
        } else {
            self.step_all(now, |m, acts| m.handle_peer_up(now, peer, acts));
        }
        let mut acts = self.take_scratch();
        self.election.handle_peer_up(now, peer, &mut acts);
        self.apply(now, Scope::Election, acts);
    }

    /// Joins once a heartbeat from every peer has been handled that counts
    /// this incarnation as up: heartbeats carry the epoch and the clock
    /// watermark the node must know before it elects or stamps a request
    /// (any other message proves a peer alive, but does not carry them).
    ///
    /// In majority mode, a node joins once every member of its view has
    /// announced it and says it counts this node up (a heartbeat of the
    /// view naming this incarnation): then no member leaves it out of a
    /// request, and it has their clocks and epochs.
    fn join_if_complete(&mut self, now: Time) {
        if self.join_deadline.is_none() {
            return;
        }
        let complete = if self.membership.majority_mode() {
            self.membership.settled()
                && self.membership.view().is_some_and(|v| {
                    v.members.iter().all(|&m| m == self.cfg.id || self.synced.contains(&m))
                })
        } else {
            self.cfg.peers().all(|p| self.synced.contains(&p))
        };
        if complete {
            self.join(now);
        }
    }

    /// `peer` says it had suspected this node and counts it up again
    /// (naming the incarnation `you`): it forgot whatever this node had
    /// asked of it, and nothing else will tell this node so. A node that
    /// was only slow — stopped, starved, cut off for longer than a failure
    /// timeout — was never down in its own eyes, and would wait for ever
    /// for answers to requests its peers dropped when they suspected it
    /// (Ricart–Agrawala's deferred reply, Lamport's queue entry). So
    /// suspicion is made mutual on the way back: both mutex layers meet
    /// again ([`handle_peer_back`](crate::Algorithm::handle_peer_back)),
    /// each telling the other what a newcomer must be told (a request
    /// under way, above all). A restarted node learns
    /// nothing here: it knows it forgot, and its peers meet it as new.
    fn forgotten_by(&mut self, now: Time, peer: NodeId, you: Option<u64>) {
        if self.membership.majority_mode()
            || you != Some(self.cfg.incarnation)
            || self.join_deadline.is_some()
            || !self.detector.is_up(peer)
        {
            return;
        }
        self.step_all(now, |m, acts| m.handle_peer_back(now, peer, acts));
    }

    fn peer_down(&mut self, now: Time, peer: NodeId) {
        if self.membership.majority_mode() {
            // Only a view counts it down.
            return;
        }
        self.emit(Output::PeerDown(peer));
        self.algorithms_down(now, peer);
    }

    /// The algorithms count `peer` down, as crashed.
    fn algorithms_down(&mut self, now: Time, peer: NodeId) {
        self.parked.forget_peer(peer);
        self.step_all(now, |m, acts| m.handle_peer_down(now, peer, acts));
        let mut acts = self.take_scratch();
        self.election.handle_peer_down(now, peer, &mut acts);
        self.apply(now, Scope::Election, acts);
    }

    /// Asks the driver to store the durable record again if a step of
    /// `scope` changed it: a newer epoch, a clock that reached its reserve,
    /// or (a lock's step) that lock's own record. Nothing is allocated
    /// when nothing changed, as on nearly every step.
    fn record_changes(&mut self, scope: &Scope) -> Change {
        let latest = self.records.latest();
        let epoch = latest.epoch.max(self.election.epoch());
        let (lock, durable) = match scope {
            Scope::Mutex(name) => {
                let lock = self.locks.get(name);
                (lock, lock.and_then(|l| l.mutex.durable_state()).map(|d| (name, d)))
            }
            Scope::Election => (None, None),
        };
        // The floor follows the stepping lock's watermark only once the
        // step is over: what this step issued counts here already.
        let watermark = self.locks.floor().max(lock.map_or(0, |l| l.mutex.watermark()));
        let (above, reserve) = self.locks.ahead_and_reserve();
        let reserve_reached = watermark.saturating_add(above) >= latest.watermark;
        let stored = match scope {
            Scope::Mutex(name) => latest.names.get(name),
            Scope::Election => None,
        };
        let lock_changed = lock.is_some() && durable.as_ref().map(|(_, d)| d) != stored;
        if epoch == latest.epoch && !reserve_reached && !lock_changed {
            return Change::None;
        }
        let ahead = epoch == latest.epoch
            && !reserve_reached
            && lock.is_some_and(|l| l.mutex.covered_by(stored.map(Vec::as_slice)));
        let mut delta = latest.unchanged();
        delta.epoch = epoch;
        if reserve_reached {
            delta.watermark = watermark.saturating_add(above).saturating_add(reserve);
        }
        if lock_changed {
            match (scope, durable) {
                (_, Some((name, d))) => delta.names.push((name.clone(), Some(d))),
                (Scope::Mutex(name), None) => delta.names.push((name.clone(), None)),
                (Scope::Election, None) => {}
            }
        }
        if ahead {
            return Change::After(delta);
        }
        self.emit_record(delta);
        Change::Before
    }

    /// The peers the algorithms count up: those the failure detector
    /// does, or in majority mode those the view does.
    fn counted_up(&self) -> Vec<NodeId> {
        if self.membership.majority_mode() {
            self.membership.counted().collect()
        } else {
            self.detector.up_peers().collect()
        }
    }

    /// Whether the node may act at `now`; if so, what was held back goes
    /// out first, in order.
    fn may_act(&mut self, now: Time) -> bool {
        let acting = self.membership.acting(now);
        if acting {
            while let Some((output, rests_on)) = self.held.pop_front() {
                if let Output::Send { kind, .. } = &output {
                    Counters::bump(&mut self.counters.sent, kind);
                }
                self.outputs.push_back((output, rests_on));
            }
        }
        acting
    }

    /// After an input: a lease that ran out costs the node what it holds
    /// (before any majority can grant it again: see
    /// [`membership`](crate::membership)); one regained lets what was held
    /// back go out.
    fn settle_lease(&mut self, now: Time) {
        if !self.membership.majority_mode() {
            return;
        }
        let quorum = self.membership.quorum(now);
        if quorum != self.quorum {
            self.quorum = quorum;
            self.emit(Output::Quorum(quorum));
            if !quorum {
                self.membership.lapse();
                let holds: Vec<(Name, Fence)> = self
                    .locks
                    .in_order()
                    .into_iter()
                    .flat_map(|(name, lock)| lock.fences.iter().map(|&f| (name.clone(), f)))
                    .collect();
                for (name, fence) in holds {
                    let seen = self.lose(name.clone(), fence);
                    let mode = self.mode_of(&name, fence);
                    if let Some(lock) = self.locks.get_mut(&name) {
                        lock.fences.retain(|&f| f != fence);
                    }
                    self.step(now, &name, |m, acts| m.handle_release_of(now, fence, acts));
                    if !seen {
                        // Nobody was handed it: whoever asked still waits,
                        // and the node asks again for them.
                        self.ask(now, &name, mode);
                    }
                }
            }
        }
        self.may_act(now);
    }

    /// The node no longer holds lock `name` (grant `fence`): the driver
    /// hears of it, unless the grant was still held back, unseen. Whether
    /// it was seen.
    fn lose(&mut self, name: Name, fence: Fence) -> bool {
        let seen = !self.take_back(&name, fence);
        if seen {
            self.emit(Output::Lost { name, fence });
        }
        seen
    }

    /// Takes grant `fence` of lock `name` back from the outputs held back
    /// for the driver; whether it was there (never handed on).
    fn take_back(&mut self, name: &Name, fence: Fence) -> bool {
        let before = self.held.len();
        self.held.retain(
            |(o, _)| !matches!(o, Output::Granted { name: n, fence: f } if n == name && *f == fence),
        );
        self.held.len() < before
    }

    /// Lets time pass for the membership layer: an acceptance waited out,
    /// a proposal given up on or made.
    fn membership_tick(&mut self, now: Time) {
        if !self.membership.majority_mode() {
            return;
        }
        let up: Vec<NodeId> = self.detector.up_peers().collect();
        let mut events = std::mem::take(&mut self.events);
        self.membership.handle_timeout(now, up.into_iter(), &mut events);
        self.on_membership(now, &mut events);
        self.events = events;
        self.join_if_complete(now);
        self.settle_lease(now);
    }

    /// Carries out what the membership layer asked, in order.
    fn on_membership(&mut self, now: Time, events: &mut Vec<Event>) {
        if events.contains(&Event::Installed) {
            // Before any step of this view can let them out: what was held
            // back for a node the view does not carry on with is for a
            // node that crashed, as far as the view goes.
            let membership = &self.membership;
            self.held.retain(|(o, _)| match o {
                Output::Send { to, .. } => membership.continuing(*to),
                _ => true,
            });
        }
        for event in events.drain(..) {
            match event {
                Event::Send(to, msg) => {
                    let kind = msg.kind();
                    self.push_send(to, Envelope::Membership(msg), kind);
                }
                Event::Promised => {
                    let mut delta = self.records.latest().unchanged();
                    delta.promised = self.membership.promised();
                    self.emit_record(delta);
                }
                Event::Reset => self.start_over(now),
                Event::Up(peer) => {
                    self.emit(Output::PeerUp(peer));
                    self.algorithms_up(now, peer, false);
                    // It hears at once that it counts here, and so may
                    // join without waiting for the next period.
                    self.send_heartbeat(peer, false, now);
                }
                Event::Down(peer) => {
                    // What was held back for it was meant for the process
                    // the algorithms now count crashed. A joiner announced
                    // within the install is counted down and up again in
                    // this same batch, after the retain above has passed
                    // it as continuing: its new process must not get its
                    // old process's messages.
                    self.held.retain(|(o, _)| !matches!(o, Output::Send { to, .. } if *to == peer));
                    self.emit(Output::PeerDown(peer));
                    self.algorithms_down(now, peer);
                }
                Event::Installed => self.view_installed(now),
            }
        }
    }

    /// A view was installed: every member hears this node announce it.
    fn view_installed(&mut self, now: Time) {
        let Some(view) = self.membership.view().cloned() else { return };
        self.emit(Output::View(view.clone()));
        for &member in &view.members {
            if member != self.cfg.id {
                self.send_heartbeat(member, false, now);
            }
        }
    }

    /// This node installed a view as a joiner: its algorithms start over,
    /// as after a restart, from what stable storage keeps. What it held is
    /// lost; what it wanted, it asks for again once it has joined.
    fn start_over(&mut self, now: Time) {
        let mut holds = Vec::new();
        // By name: the permits, the requests, and how many are reads.
        let mut wanted: BTreeMap<Name, (u32, u32, u32)> = BTreeMap::new();
        for (name, lock) in self.locks.in_order() {
            let mode = |fence| lock.mutex.mode_of(fence);
            holds.extend(lock.fences.iter().map(|&fence| (name.clone(), fence, mode(fence))));
            let asked = (lock.pending + lock.wanting)
                .max(u32::from(lock.fences.is_empty() && lock.cs_state() == CsState::Wanting));
            if asked > 0 {
                let reads = lock.reads.0 + lock.reads.1;
                wanted.insert(name.clone(), (lock.permits, asked, reads));
            }
        }
        for (name, fence, mode) in holds {
            let permits = self.locks.get(&name).map_or(1, |l| l.permits);
            if !self.lose(name.clone(), fence) {
                // Granted, but nobody was handed it: still wanted.
                let entry = wanted.entry(name).or_insert((permits, 0, 0));
                entry.1 += 1;
                entry.2 += u32::from(mode == Mode::Read);
            }
        }
        self.held.clear();
        let floor = self.locks.floor();
        let record = self.records.latest().header();
        let watermark = record.watermark;
        self.cfg.restored = Some(record);
        self.election = (self.election_info.build)(&self.cfg);
        self.locks = Resources::new(self.mutex.build, self.cfg.forgetting);
        self.locks.observe(watermark.max(floor));
        self.timers.clear();
        self.coordinator_pending = None;
        self.join_deadline = Some(now + self.cfg.timing.failure_timeout);
        self.join_extended = 0;
        self.synced.clear();
        self.join_progress = 0;
        let permits = u32::try_from(self.cfg.capacity).unwrap_or(u32::MAX);
        self.lock(now, &Name::default(), permits);
        for (name, (permits, asked, reads)) in wanted {
            self.lock(now, &name, permits);
            if let Some(lock) = self.locks.get_mut(&name) {
                lock.pending = asked;
                lock.reads = (reads.min(asked), 0);
            }
        }
    }

    fn take_scratch(&mut self) -> Actions {
        std::mem::take(&mut self.scratch)
    }

    fn push_send(&mut self, to: NodeId, envelope: Envelope, kind: &'static str) {
        Counters::bump(&mut self.counters.sent, kind);
        self.emit(Output::Send { to, envelope, kind });
    }

    /// Carries out a layer's actions in order. A coordinator change is
    /// handed to the mutex layer at once, after the election's own sends,
    /// so a new coordinator's announcement precedes its first mutex message
    /// on every link.
    fn apply(&mut self, now: Time, scope: Scope, mut acts: Actions) {
        // Stable storage first: a message this step sends may rest on what
        // the step changed (a grant given, an epoch taken). A lock's step
        // whose messages rest on nothing new (the record was written ahead)
        // rests on the earliest record that covers them, and its own new
        // record, if any, follows them out.
        let change = self.record_changes(&scope);
        if let (Scope::Mutex(name), false) = (&scope, matches!(change, Change::Before)) {
            if let Some(lock) = self.locks.get(name) {
                let mutex = &lock.mutex;
                self.rests_on = self.records.covering(name, |record| mutex.covered_by(record));
            }
        }
        let permits = match &scope {
            Scope::Mutex(name) => self.locks.get(name).map_or(1, |l| l.permits),
            Scope::Election => 1,
        };
        // A node without a lease (or in the middle of a change of view)
        // sends and grants nothing: what its algorithms decide waits, as
        // if the node were paused, and is dropped if a view counts it
        // crashed meanwhile.
        let acting = self.may_act(now);
        for action in acts.drain(..) {
            match action {
                Action::Send { to, msg: Encoded { kind, bytes } } => {
                    let envelope = match &scope {
                        Scope::Election => Envelope::Election(bytes),
                        Scope::Mutex(name) => {
                            self.counters.mutex_sent += 1;
                            Envelope::Mutex { name: name.clone(), permits, bytes }
                        }
                    };
                    if to == self.cfg.id {
                        continue; // algorithms never message themselves
                    }
                    if acting {
                        self.push_send(to, envelope, kind);
                    } else {
                        self.held.push_back((Output::Send { to, envelope, kind }, self.rests_on));
                    }
                }
                Action::SetTimer { timer, at } => {
                    self.timers.insert((scope.clone(), timer), at);
                }
                Action::CancelTimer { timer } => {
                    self.timers.remove(&(scope.clone(), timer));
                }
                Action::Grant { fence } => {
                    let Scope::Mutex(name) = &scope else { continue };
                    if let Some(lock) = self.locks.get_mut(name) {
                        lock.fences.push(fence);
                        lock.wanting = lock.wanting.saturating_sub(1);
                        if lock.mutex.mode_of(fence) == Mode::Read {
                            lock.reads.1 = lock.reads.1.saturating_sub(1);
                        }
                    }
                    self.cs_entries += 1;
                    let granted = Output::Granted { name: name.clone(), fence };
                    if acting {
                        self.emit(granted);
                    } else {
                        self.held.push_back((granted, self.rests_on));
                    }
                }
                Action::Coordinator { leader, epoch } => {
                    self.emit(Output::Coordinator { leader, epoch });
                    if !self.joined() {
                        self.coordinator_pending = Some((leader, epoch));
                        continue;
                    }
                    self.step_all(now, |m, acts| m.handle_coordinator(now, leader, epoch, acts));
                }
            }
        }
        self.rests_on = self.records.latest_number();
        if let Change::After(record) = change {
            self.emit_record(record);
        }
        if self.scratch.capacity() < acts.capacity() {
            self.scratch = acts;
        }
        // A lock whose term has no fence left for the next grant: the
        // coordinator takes a new term (the election ignores this
        // elsewhere, and while a renewal is under way).
        if let Scope::Mutex(name) = &scope {
            if self.locks.get(name).is_some_and(|lock| lock.mutex.term_spent()) {
                let mut acts = self.take_scratch();
                self.election.handle_renew(now, &mut acts);
                self.apply(now, Scope::Election, acts);
            }
        }
    }
}

/// What a step did to the durable record.
enum Change {
    None,
    /// Changed, and handed over before the step's messages.
    Before,
    /// Changed, to be handed over after them.
    After(Delta),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stable::WATERMARK_RESERVE;
    use std::time::Duration;

    const BULLY: &ElectionInfo = &registry::ELECTIONS[0];

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn engine(id: u32, n: u32) -> Engine {
        Engine::new(
            AlgoConfig::for_test(id, n),
            registry::mutex("centralized").unwrap(),
            BULLY,
            ms(0),
        )
    }

    fn drain(e: &mut Engine) -> Vec<Output> {
        std::iter::from_fn(|| e.poll_output()).collect()
    }

    /// A peer's heartbeat that counts the test engine (incarnation 0) up.
    fn heartbeat() -> Envelope {
        Envelope::Heartbeat(Heartbeat {
            epoch: Epoch(0),
            coordinator: None,
            watermark: 0,
            incarnation: 1,
            you: Some(0),
            probe: false,
            readmitted: false,
            lease: crate::membership::Lease::default(),
        })
    }

    fn state_hash(e: &Engine) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        e.hash_state(&mut h, Time::ZERO);
        std::hash::Hasher::finish(&h)
    }

    /// A copy goes on as the original does, and hashes as it does while
    /// they agree; a step taken by one only tells them apart.
    #[test]
    fn a_clone_goes_on_as_the_original_and_hashes_alike_until_they_differ() {
        for info in registry::MUTEXES {
            let mut a = Engine::new(AlgoConfig::for_test(1, 3), info, BULLY, ms(0));
            for peer in [2, 3] {
                a.handle_message(ms(1), NodeId(peer), heartbeat()).unwrap();
            }
            a.handle_timeout(ms(300));
            drain(&mut a);
            let mut b = a.clone();
            assert_eq!(state_hash(&a), state_hash(&b), "{}", info.name);
            for e in [&mut a, &mut b] {
                e.handle_timeout(ms(400));
                e.request(ms(401), &Name::default(), 1).unwrap();
                e.handle_message(ms(402), NodeId(2), heartbeat()).unwrap();
            }
            assert_eq!(drain(&mut a), drain(&mut b), "{}", info.name);
            assert_eq!(state_hash(&a), state_hash(&b), "{}", info.name);
            a.handle_timeout(ms(1000));
            drain(&mut a);
            assert_ne!(state_hash(&a), state_hash(&b), "{}: a step went unhashed", info.name);
        }
    }

    /// The same from a peer that does not count the test engine up yet.
    fn heartbeat_not_seeing_me() -> Envelope {
        let Envelope::Heartbeat(hb) = heartbeat() else { unreachable!() };
        Envelope::Heartbeat(Heartbeat { you: None, ..hb })
    }

    #[test]
    fn heartbeats_go_to_every_peer_each_period() {
        let mut e = engine(1, 3);
        let sends = drain(&mut e)
            .into_iter()
            .filter(|o| matches!(o, Output::Send { kind: "heartbeat", .. }))
            .count();
        assert_eq!(sends, 2);
        assert_eq!(e.next_deadline(), Some(ms(50)));
    }

    #[test]
    fn a_probe_is_answered_at_once_and_probes_go_to_peers_counted_up() {
        let mut e = engine(1, 3);
        e.handle_message(ms(4), NodeId(2), heartbeat()).unwrap(); // n2 is up
        drain(&mut e);
        let Envelope::Heartbeat(hb) = heartbeat() else { unreachable!() };
        let probe = Envelope::Heartbeat(Heartbeat { probe: true, ..hb });
        e.handle_message(ms(5), NodeId(2), probe).unwrap();
        let answers: Vec<_> = drain(&mut e)
            .into_iter()
            .filter_map(|o| match o {
                Output::Send { to, envelope: Envelope::Heartbeat(hb), .. } => Some((to, hb.probe)),
                _ => None,
            })
            .collect();
        assert_eq!(answers, [(NodeId(2), false)], "one answer, itself no probe");
        // Only n2 is counted up: only n2 is asked.
        e.probe_peers(ms(6));
        let asked: Vec<_> = drain(&mut e)
            .into_iter()
            .filter_map(|o| match o {
                Output::Send { to, envelope: Envelope::Heartbeat(hb), .. } if hb.probe => Some(to),
                _ => None,
            })
            .collect();
        assert_eq!(asked, [NodeId(2)]);
    }

    #[test]
    fn node_joins_once_every_peer_is_heard_and_then_elects() {
        let mut e = engine(2, 2);
        e.request(ms(1), &Name::default(), 1).unwrap();
        assert_eq!(e.cs_state(), CsState::Wanting, "held until joined");
        e.handle_message(ms(5), NodeId(1), heartbeat()).unwrap();
        let out = drain(&mut e);
        assert!(out.contains(&Output::PeerUp(NodeId(1))));
        assert!(out.contains(&Output::Joined));
        let epoch = Epoch::new(1, NodeId(2));
        assert!(out.contains(&Output::Coordinator { leader: NodeId(2), epoch }));
        // The held request was granted by itself, the coordinator, once the
        // rebuild finished with peer 1's report.
        let report = crate::wire::encode(&crate::mutex::centralized::CentralizedMsg::StateReport {
            epoch,
            state: crate::mutex::centralized::Report::Idle,
        });
        e.handle_message(
            ms(6),
            NodeId(1),
            Envelope::Mutex { name: Name::default(), permits: 1, bytes: report },
        )
        .unwrap();
        assert!(drain(&mut e).iter().any(|o| matches!(o, Output::Granted { .. })));
        assert_eq!(e.cs_entries(), 1);
    }

    #[test]
    fn node_joins_only_once_every_peer_counts_it_up() {
        let mut e = engine(2, 2);
        e.handle_message(ms(5), NodeId(1), heartbeat_not_seeing_me()).unwrap();
        let out = drain(&mut e);
        assert!(out.contains(&Output::PeerUp(NodeId(1))));
        assert!(!out.contains(&Output::Joined), "n1 does not count it in yet");
        // Hearing n1 up, it told n1 so at once, naming n1's incarnation.
        assert!(out.iter().any(|o| matches!(o,
            Output::Send { to: NodeId(1), envelope: Envelope::Heartbeat(hb), .. }
                if hb.you == Some(1))));
        e.handle_message(ms(6), NodeId(1), heartbeat()).unwrap();
        assert!(drain(&mut e).contains(&Output::Joined));
    }

    #[test]
    fn silent_peers_are_given_up_on_after_the_failure_timeout() {
        // Heard from one peer: the other is given up on once a timeout
        // passes with nobody new heard from.
        let mut e = engine(1, 3);
        e.handle_message(ms(5), NodeId(2), heartbeat_not_seeing_me()).unwrap();
        e.handle_timeout(ms(249));
        assert!(!e.joined());
        e.handle_timeout(ms(250));
        assert!(!e.joined(), "n2 arrived during the first timeout: it waits one more");
        e.handle_timeout(ms(500));
        assert!(e.joined());
        // Still arriving: a node of four hears a new peer each timeout, and
        // waits for each (a mass start), then joins knowing them all.
        let mut e = engine(1, 4);
        e.handle_message(ms(5), NodeId(2), heartbeat_not_seeing_me()).unwrap();
        e.handle_timeout(ms(250));
        e.handle_message(ms(400), NodeId(3), heartbeat_not_seeing_me()).unwrap();
        e.handle_timeout(ms(500));
        assert!(!e.joined(), "n3 arrived during the second timeout");
        e.handle_timeout(ms(750));
        assert!(e.joined());
        assert_eq!(e.status().alive, vec![1, 2, 3]);
        // Heard from nobody: it waits JOIN_PATIENCE timeouts more, then
        // joins alone and elects itself.
        let mut e = engine(1, 3);
        for k in 1..=u64::from(JOIN_PATIENCE) {
            e.handle_timeout(ms(250 * k));
            assert!(!e.joined(), "still waiting after {k} timeouts");
        }
        e.handle_timeout(ms(250 * (u64::from(JOIN_PATIENCE) + 1)));
        assert!(e.joined());
        assert_eq!(e.coordinator(), Some(NodeId(1)));
    }

    #[test]
    fn strangers_and_garbage_are_refused_without_harm() {
        let mut e = engine(1, 3);
        assert!(matches!(
            e.handle_message(ms(1), NodeId(7), heartbeat()),
            Err(EngineError::UnknownPeer(_))
        ));
        assert!(matches!(
            e.handle_message(
                ms(1),
                NodeId(2),
                Envelope::Mutex { name: Name::default(), permits: 1, bytes: vec![0xff; 9] }
            ),
            Err(EngineError::Undecodable { layer: Layer::Mutex, .. })
        ));
        assert!(e.is_up(NodeId(2)), "a live peer, however confused");
    }

    #[test]
    fn closed_link_suspects_at_once() {
        let mut e = engine(1, 2);
        e.handle_message(ms(1), NodeId(2), heartbeat()).unwrap();
        drain(&mut e);
        e.handle_link_down(ms(2), NodeId(2));
        assert!(drain(&mut e).contains(&Output::PeerDown(NodeId(2))));
    }

    #[test]
    fn a_stalled_node_does_not_suspect_its_peers() {
        let mut e = engine(1, 2);
        e.handle_message(ms(1), NodeId(2), heartbeat()).unwrap();
        e.handle_timeout(ms(50));
        drain(&mut e);
        // Stopped for two seconds, then the timer fires before any socket
        // is read.
        e.handle_timeout(ms(2050));
        assert!(!drain(&mut e).contains(&Output::PeerDown(NodeId(2))));
        assert!(e.is_up(NodeId(2)));
    }

    /// Starved rather than stopped: every tick comes 200 ms late (short of
    /// a stall) and the peer's heartbeat, sent on time, is read only after
    /// it. Without awareness the third tick would suspect the peer; with it
    /// the timeout stretches, and comes back once the node keeps time.
    #[test]
    fn a_starved_node_does_not_suspect_a_peer_it_reads_late() {
        let mut e = engine(1, 2);
        e.handle_message(ms(1), NodeId(2), heartbeat()).unwrap();
        e.handle_timeout(ms(50));
        drain(&mut e);
        let mut now = 50;
        for _ in 0..6 {
            now += 250;
            e.handle_timeout(ms(now));
            e.handle_message(ms(now), NodeId(2), heartbeat()).unwrap();
        }
        assert!(!drain(&mut e).contains(&Output::PeerDown(NodeId(2))));
        assert!(e.status().awareness > 0);
        // On time again: back to the configured timeout, and a silent peer
        // is suspected after it.
        for _ in 0..200 {
            now += 50;
            e.handle_timeout(ms(now));
            e.handle_message(ms(now), NodeId(2), heartbeat()).unwrap();
        }
        assert_eq!(e.status().awareness, 0);
        assert_eq!(e.status().failure_timeout_ms, 250);
        drain(&mut e);
        for _ in 0..5 {
            now += 50;
            e.handle_timeout(ms(now));
        }
        assert!(drain(&mut e).contains(&Output::PeerDown(NodeId(2))));
    }

    #[test]
    fn a_restarted_node_starts_above_the_epoch_and_clock_it_stored() {
        let restored =
            Restored { epoch: Epoch::new(7, NodeId(3)), watermark: 5000, ..Restored::default() };
        let cfg = AlgoConfig { restored: Some(restored), ..AlgoConfig::for_test(3, 3) };
        let mut e = Engine::new(cfg, registry::mutex("ricart-agrawala").unwrap(), BULLY, ms(0));
        assert_eq!(e.epoch(), Epoch::new(7, NodeId(3)), "the highest epoch seen before");
        // Alone after the join timeouts, it elects itself above round 7.
        for k in 1..=u64::from(JOIN_PATIENCE) + 1 {
            e.handle_timeout(ms(250 * k));
        }
        assert!(e.epoch().round() > 7);
        let out = drain(&mut e);
        // What it now stores covers its new epoch, and a clock reserve
        // above the restored one.
        let stored: Vec<&Delta> = out
            .iter()
            .filter_map(|o| if let Output::Persist(r) = o { Some(r) } else { None })
            .collect();
        let last = stored.last().expect("the new epoch is stored");
        assert_eq!(last.epoch, e.epoch());
        assert!(last.watermark >= 5000 + WATERMARK_RESERVE);
        // A request is stamped above every stamp of the previous run.
        e.request(ms(251), &Name::default(), 1).unwrap();
        assert!(e.request_stamp(&Name::default()).is_some_and(|s| s.ts > 5000));
    }
    /// Engines of a majority-mode cluster of `n`, for `mutex`.
    fn majority_cluster(mutex: &str, n: u32) -> Vec<Engine> {
        (1..=n)
            .map(|id| {
                let mut cfg = AlgoConfig::for_test(id, n);
                cfg.timing.lease.partitions = crate::membership::Partitions::Majority;
                Engine::new(cfg, registry::mutex(mutex).unwrap(), BULLY, ms(0))
            })
            .collect()
    }

    /// Runs `engines` from `from` to `to` (ms) in 1 ms steps, every
    /// message delivered at the next step over the links `open` allows;
    /// every output that is not a send, by node.
    fn run_cluster(
        engines: &mut [Engine],
        from: u64,
        to: u64,
        open: impl Fn(NodeId, NodeId) -> bool,
    ) -> Vec<(NodeId, Output)> {
        let mut seen = Vec::new();
        let mut wire: Vec<(NodeId, NodeId, Envelope)> = Vec::new();
        for t in from..to {
            for (from, to, envelope) in std::mem::take(&mut wire) {
                let e = &mut engines[to.0 as usize - 1];
                let _ = e.handle_message(ms(t), from, envelope);
            }
            for e in engines.iter_mut() {
                e.handle_timeout(ms(t));
                let id = e.id();
                while let Some(output) = e.poll_output() {
                    match output {
                        Output::Send { to, envelope, .. } if open(id, to) => {
                            wire.push((id, to, envelope));
                        }
                        Output::Send { .. } => {}
                        other => seen.push((id, other)),
                    }
                }
            }
        }
        seen
    }

    /// Majority mode, end to end in the engine: a holder cut off with a
    /// minority loses its lock (`Lost`) when its lease runs out, before
    /// the majority installs a view without it; the majority then grants
    /// with a higher fence, and the minority grants nothing meanwhile.
    #[test]
    fn a_cut_off_holder_loses_its_lock_before_the_majority_grants_it() {
        let mut engines = majority_cluster("centralized", 3);
        run_cluster(&mut engines, 0, 500, |_, _| true);
        assert!(engines.iter().all(|e| e.joined() && e.quorum(ms(500))));
        engines[0].request(ms(500), &Name::default(), 1).unwrap();
        let seen = run_cluster(&mut engines, 500, 600, |_, _| true);
        let first = seen.iter().find_map(|(n, o)| match o {
            Output::Granted { fence, .. } if *n == NodeId(1) => Some(*fence),
            _ => None,
        });
        let first = first.expect("n1 holds");
        // n1 is cut off; n2 asks for the lock at once.
        let cut = |a: NodeId, b: NodeId| (a == NodeId(1)) == (b == NodeId(1));
        engines[1].request(ms(600), &Name::default(), 1).unwrap();
        let seen = run_cluster(&mut engines, 600, 2000, cut);
        let at = |what: &dyn Fn(&(NodeId, Output)) -> bool| seen.iter().position(what);
        let lost = at(&|(n, o)| {
            *n == NodeId(1) && matches!(o, Output::Lost { fence, .. } if *fence == first)
        });
        let view = at(&|(_, o)| matches!(o, Output::View(v) if v.members.len() == 2));
        let granted =
            seen.iter().position(|(n, o)| *n == NodeId(2) && matches!(o, Output::Granted { .. }));
        let (lost, view, granted) =
            (lost.expect("lost"), view.expect("a view"), granted.expect("granted"));
        assert!(lost < view && view < granted, "{seen:?}");
        let Output::Granted { fence, .. } = seen[granted].1 else { unreachable!() };
        assert!(fence > first);
        assert!(!seen.iter().any(|(n, o)| *n == NodeId(1) && matches!(o, Output::Granted { .. })));
        assert!(!engines[0].quorum(ms(2000)));
        // Healed: n1 comes back as a joiner and is granted again, higher.
        engines[1].release(ms(2000), &Name::default());
        run_cluster(&mut engines, 2000, 3000, |_, _| true);
        assert!(engines[0].quorum(ms(3000)));
        engines[0].request(ms(3000), &Name::default(), 1).unwrap();
        let seen = run_cluster(&mut engines, 3000, 3200, |_, _| true);
        let again = seen.iter().find_map(|(n, o)| match o {
            Output::Granted { fence: f, .. } if *n == NodeId(1) => Some(*f),
            _ => None,
        });
        assert!(again.expect("n1 holds again") > fence);
    }

    /// Node 1 of a three-node maekawa cluster built from `cfg`, which has
    /// heard both peers and node 3's COORDINATOR: joined.
    fn joined_maekawa(cfg: AlgoConfig) -> Engine {
        let mut e = Engine::new(cfg, registry::mutex("maekawa").unwrap(), BULLY, ms(0));
        for p in [2, 3] {
            e.handle_message(ms(1), NodeId(p), heartbeat()).unwrap();
        }
        let epoch = Epoch::new(1, NodeId(3));
        let coordinator =
            crate::wire::encode(&crate::election::bully::BullyMsg::Coordinator { epoch });
        e.handle_message(ms(1), NodeId(3), Envelope::Election(coordinator)).unwrap();
        e
    }

    #[test]
    fn a_grant_rests_on_its_record_or_on_the_one_that_named_its_grantee_ahead() {
        use crate::mutex::quorum::QuorumMsg;
        let mut e = joined_maekawa(AlgoConfig::for_test(1, 3));
        let mutex = |e: &mut Engine, t, from, msg: QuorumMsg| {
            e.handle_message(
                ms(t),
                NodeId(from),
                Envelope::Mutex {
                    name: Name::default(),
                    permits: 1,
                    bytes: crate::wire::encode(&msg),
                },
            )
            .unwrap();
            std::iter::from_fn(|| e.poll_output_resting()).collect::<Vec<_>>()
        };
        let recover =
            QuorumMsg::Recover { holding: None, waiting: None, mode: Mode::Write, ask: false };
        for p in [2, 3] {
            mutex(&mut e, 2, p, recover.clone());
        }
        let base = e.records.latest_number();
        let stamp = |ts, id| Stamp { ts, node: NodeId(id) };
        // What the GRANT to `to` rests on, and where it and the record are.
        let grant = |out: &[(Output, u64)], to: u32| {
            let at = |f: &dyn Fn(&Output) -> bool| out.iter().position(|(o, _)| f(o));
            let grant = at(&|o| {
                matches!(o,
                Output::Send { to: t, kind: "grant", .. } if *t == NodeId(to))
            });
            let grant = grant.expect("a grant is sent");
            let persist = at(&|o| matches!(o, Output::Persist(_))).expect("a record is written");
            (out[grant].1, grant, persist)
        };
        // Node 2 is not written down: its record (base + 1) goes first, and
        // the GRANT rests on it.
        let out = mutex(&mut e, 3, 2, QuorumMsg::Request { stamp: stamp(5, 2), mode: Mode::Write });
        assert_eq!(grant(&out, 2), (base + 1, 1, 0));
        // Node 3 queues behind it and is written down ahead (base + 2), after
        // the FAILED, which rests on nothing new.
        let out = mutex(&mut e, 4, 3, QuorumMsg::Request { stamp: stamp(7, 3), mode: Mode::Write });
        assert!(
            matches!(&out[..], [(Output::Send { kind: "failed", .. }, n), (Output::Persist(_), _)] if *n <= base + 1)
        );
        // Node 2 releases: node 3's GRANT rests on the record that named
        // node 3 ahead, and nothing new is written (node 2 stays named, as
        // a recent holder).
        let out = mutex(&mut e, 5, 2, QuorumMsg::Release { stamp: stamp(5, 2) });
        assert!(matches!(&out[..],
            [(Output::Send { to: NodeId(3), kind: "grant", .. }, n)] if *n == base + 2));
        // Node 2 asks again: it is named already, so nothing is written.
        let out = mutex(&mut e, 6, 2, QuorumMsg::Request { stamp: stamp(9, 2), mode: Mode::Write });
        assert!(!out.iter().any(|(o, _)| matches!(o, Output::Persist(_))));
    }

    #[test]
    fn a_new_quorum_lock_waits_for_no_other_locks_record() {
        use crate::mutex::quorum::QuorumMsg;
        let mut e = joined_maekawa(AlgoConfig::for_test(1, 3));
        let (a, b) = (Name::default(), Name::new("b").unwrap());
        let drain = |e: &mut Engine| std::iter::from_fn(|| e.poll_output_resting()).collect();
        let mutex = |e: &mut Engine, t, from, name: &Name, msg: QuorumMsg| {
            let bytes = crate::wire::encode(&msg);
            let envelope = Envelope::Mutex { name: name.clone(), permits: 1, bytes };
            e.handle_message(ms(t), NodeId(from), envelope).unwrap();
            drain(e)
        };
        let recover =
            QuorumMsg::Recover { holding: None, waiting: None, mode: Mode::Write, ask: false };
        for name in [&a, &b] {
            for p in [2, 3] {
                mutex(&mut e, 2, p, name, recover.clone());
            }
        }
        // Lock a's arbiter grants node 2: record `granted`, perhaps not yet
        // on disk.
        let stamp = Stamp { ts: 5, node: NodeId(2) };
        let out: Vec<(Output, u64)> =
            mutex(&mut e, 3, 2, &a, QuorumMsg::Request { stamp, mode: Mode::Write });
        assert!(matches!(&out[0], (Output::Persist(_), _)));
        let granted = e.records.latest_number();
        // Node 1 asks for lock b, which has no record: its REQUESTs need
        // none, so they leave without waiting for a's.
        e.request(ms(4), &b, 1).unwrap();
        let out: Vec<(Output, u64)> = drain(&mut e);
        let requests: Vec<u64> = out
            .iter()
            .filter_map(|(o, n)| matches!(o, Output::Send { kind: "request", .. }).then_some(*n))
            .collect();
        assert_eq!(requests.len(), 2, "{out:?}");
        assert!(requests.iter().all(|&n| n < granted), "{requests:?} wait for {granted}");
        // Node 2 asks for b, held here: it is written down ahead, after the
        // FAILED, which rests on nothing new either.
        let stamp = Stamp { ts: e.request_stamp(&b).unwrap().ts + 1, node: NodeId(2) };
        let out = mutex(&mut e, 5, 2, &b, QuorumMsg::Request { stamp, mode: Mode::Write });
        assert!(
            matches!(&out[..], [(Output::Send { kind: "failed", .. }, n), (Output::Persist(_), _)] if *n < granted),
            "{out:?}"
        );
    }

    #[test]
    fn a_change_to_the_record_names_only_the_lock_it_changes() {
        use crate::mutex::quorum::QuorumMsg;
        // Node 1 of three, which remembers the records of 10,000 other
        // locks, joined.
        let mut cfg = AlgoConfig::for_test(1, 3);
        let mut restored = Restored::default();
        for i in 0..10_000 {
            restored.names.insert(Name::new(&format!("x{i}")).unwrap(), vec![0; 40]);
        }
        cfg.restored = Some(restored);
        let mut e = joined_maekawa(cfg);
        assert_eq!(e.config().restored.as_ref().map(|r| r.names.len()), Some(0), "kept once");
        drain(&mut e);
        // Node 2 asks for a lock new here: node 1's arbiter grants it, and
        // writes down first that node 2 may hold its permission.
        let lock = Name::new("used").unwrap();
        let stamp = Stamp { ts: 5, node: NodeId(2) };
        let request = QuorumMsg::Request { stamp, mode: Mode::Write };
        let bytes = crate::wire::encode(&request);
        let envelope = Envelope::Mutex { name: lock.clone(), permits: 1, bytes };
        e.handle_message(ms(2), NodeId(2), envelope).unwrap();
        let out = drain(&mut e);
        assert!(out.iter().any(|o| matches!(o, Output::Send { kind: "grant", .. })), "{out:?}");
        let changes: Vec<&Delta> = out
            .iter()
            .filter_map(|o| if let Output::Persist(d) = o { Some(d) } else { None })
            .collect();
        assert!(changes.iter().any(|d| d.names.iter().any(|(n, _)| *n == lock)), "{changes:?}");
        for change in changes {
            assert!(change.names.len() <= 1, "{change:?}");
            assert!(change.encode().len() < 200, "{} bytes", change.encode().len());
        }
        assert_eq!(e.records.latest().names.len(), 10_001);
    }

    /// A roucairol-carvalho node that answers a request owes the
    /// requester its ceiling, a reservation above the request's stamp:
    /// the stored watermark is above it before the REPLY leaves, so a
    /// restart starts the node's own fences above whatever the requester
    /// may enter with on that permission.
    #[test]
    fn a_ceiling_owed_is_stored_before_the_reply_that_owes_it_leaves() {
        use crate::mutex::roucairol_carvalho::{RcMsg, RESERVE};
        use crate::types::{Mode, Stamp};
        let cfg = AlgoConfig::for_test(1, 2);
        let mutex = registry::mutex("roucairol-carvalho").unwrap();
        let mut e = Engine::new(cfg, mutex, BULLY, ms(0));
        e.handle_message(ms(1), NodeId(2), heartbeat()).unwrap();
        for k in 1..=4 {
            e.handle_timeout(ms(250 * k));
        }
        drain(&mut e);
        for (i, ts) in [(0, 5), (1, 3 * WATERMARK_RESERVE)] {
            let stamp = Stamp { ts, node: NodeId(2) };
            let request =
                RcMsg::Request { stamp, place: stamp, ceiling: ts + RESERVE, mode: Mode::Write };
            let bytes = crate::wire::encode(&request);
            let envelope = Envelope::Mutex { name: Name::default(), permits: 1, bytes };
            e.handle_message(ms(1001 + i), NodeId(2), envelope).unwrap();
            let out = drain(&mut e);
            let reply = out
                .iter()
                .position(|o| matches!(o, Output::Send { to: NodeId(2), kind: "reply", .. }))
                .unwrap_or_else(|| panic!("answered: {out:?}"));
            let stored = e.records.latest().watermark;
            assert!(stored > ts + RESERVE, "{stored} does not cover ceiling {}", ts + RESERVE);
            if i == 1 {
                // Above what the node stored when it joined: written now,
                // and ahead of the reply.
                let written = out[..reply].iter().any(|o| matches!(o, Output::Persist(_)));
                assert!(written, "{out:?}");
            }
        }
    }

    #[test]
    fn token_ring_new_locks_share_a_generation_and_write_once() {
        let cfg = AlgoConfig::for_test(1, 1);
        let mut e = Engine::new(cfg, registry::mutex("token-ring").unwrap(), BULLY, ms(0));
        for k in 1..=u64::from(JOIN_PATIENCE) + 1 {
            e.handle_timeout(ms(250 * k));
        }
        let start = 250 * (u64::from(JOIN_PATIENCE) + 2);
        drain(&mut e);
        let locks = 3 * crate::mutex::token_ring::RESERVE_ROUNDS;
        let (mut grants, mut writes) = (0, 0);
        for i in 0..locks {
            let lock = Name::new(&format!("new{i}")).unwrap();
            e.request(ms(start + i), &lock, 1).unwrap();
            for o in drain(&mut e) {
                match o {
                    Output::Granted { .. } => grants += 1,
                    Output::Persist(_) => writes += 1,
                    _ => {}
                }
            }
            e.release(ms(start + i), &lock);
            writes += drain(&mut e).iter().filter(|o| matches!(o, Output::Persist(_))).count();
        }
        assert_eq!(grants, locks);
        // The first new lock's generation is a round above the floor, and
        // every later one shares it: the watermark stays there, and the
        // reserve written once above it covers them all.
        assert!(writes <= 1, "{writes} writes for {locks} new locks");
        let first = Epoch::new(1, NodeId(1));
        assert_eq!(Epoch(e.locks.floor()), first, "no round spent per lock");
        let reserve = Epoch(e.records.latest().watermark);
        assert!(reserve > first, "the reserve is above every generation");
    }
}
