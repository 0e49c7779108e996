//! The two algorithm traits and what every algorithm is built from.
//!
//! Naming follows quinn-proto: `handle_*` methods are inputs, and every
//! effect goes into the [`Outbox`] passed alongside. Handlers never block,
//! never read a clock and never touch a socket; the engine (and through it
//! the simulator or the tokio node) performs what the outbox asks.

use crate::name::Name;
use crate::outbox::{Message, Outbox, Time, Timer};
pub use crate::stable::{Restored, WATERMARK_RESERVE};
use crate::types::{CsState, Epoch, Fence, Mode, NodeId, Stamp};
use std::time::Duration;

/// Heartbeat and failure-detection periods, shared by every layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How often a node heartbeats (or probes) the peers it is watched by.
    pub heartbeat: Duration,
    /// How long a watched peer may stay silent before it is suspected down.
    pub failure_timeout: Duration,
    /// Who watches whom.
    pub detector: Detector,
    /// Who decides that a peer is down, and the lease a node acts under
    /// when a majority does ([`membership`](crate::membership)).
    pub lease: crate::membership::LeaseTiming,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            heartbeat: Duration::from_millis(50),
            failure_timeout: Duration::from_millis(250),
            detector: Detector::All,
            lease: crate::membership::LeaseTiming::default(),
        }
    }
}

/// Who watches whom for failures: what the heartbeats cost, and how a
/// hang is found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Detector {
    /// Every node heartbeats every peer each period and suspects any peer
    /// silent for the failure timeout: N(N−1) heartbeats a period, and
    /// every node finds a hang within one timeout.
    #[default]
    All,
    /// Each node probes, each period, the `watch` peers that follow it by
    /// id among those it counts up (wrapping round), and the coordinator
    /// it follows; a probed peer answers at once, and a peer heard from
    /// since the previous period is not asked. So every node is watched
    /// by `watch` others and the coordinator by all: at most
    /// 2(`watch`·N + N) messages a period, about half that when idle. A
    /// node that suspects one of its `watch` neighbours announces it to
    /// every other, and each of them then suspects the
    /// peer only if it does not hear from it within a failure timeout of
    /// its own: a hang is found by the coordinator's followers within one
    /// timeout, and by everyone within two, and no node suspects a peer
    /// it can still hear. Closed connections are seen by every node at
    /// once, as with `All`. (The probing and the announcement are those
    /// of SWIM: A. Das, I. Gupta and A. Motivala, "SWIM: Scalable
    /// Weakly-consistent Infection-style Process Group Membership
    /// Protocol", DSN 2002; the fixed ring of monitors is Akka's cluster
    /// heartbeat.)
    Ring {
        /// How many peers each node probes, besides its coordinator.
        watch: u32,
    },
}

impl std::fmt::Display for Detector {
    /// `all`, or `ring, watch 2`: as a Hello names it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Detector::All => f.write_str("all"),
            Detector::Ring { watch } => write!(f, "ring, watch {watch}"),
        }
    }
}

impl Detector {
    /// Above this many nodes, `auto` picks [`Detector::Ring`].
    pub const AUTO_RING_ABOVE: usize = 16;

    /// What `detector = "auto"` means for `nodes` nodes: every peer
    /// watched in a small cluster, a ring of 2 in a larger one.
    pub fn auto(nodes: usize) -> Detector {
        if nodes > Self::AUTO_RING_ABOVE {
            Detector::Ring { watch: 2 }
        } else {
            Detector::All
        }
    }
}

/// The order in which `ricart-agrawala` and `raymond-k` serve concurrent
/// requests (D. W. Jones, lecture notes for 22C:116, University of Iowa,
/// 2002, "Breaking ties"). The value is frozen when a request
/// goes out and kept until that request is done; the request's stamp, and
/// through it the node id, breaks ties.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Priority {
    /// Earliest Lamport timestamp first: the classic algorithm.
    #[default]
    Timestamp,
    /// The node with the fewest entries so far (in this run of it) first.
    FewestEntries,
    /// The node served least recently first: the Lamport time of its last
    /// entry, with a node that never entered ahead of all.
    LeastRecent,
}

impl Priority {
    /// Every priority, in the order `--help` lists them.
    pub const ALL: [Priority; 3] =
        [Priority::Timestamp, Priority::FewestEntries, Priority::LeastRecent];

    /// The spelling used in configuration files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Timestamp => "timestamp",
            Priority::FewestEntries => "fewest-entries",
            Priority::LeastRecent => "least-recent",
        }
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A priority name that is not one of [`Priority::ALL`].
#[derive(Debug, thiserror::Error)]
#[error("unknown priority {0:?} (known: timestamp, fewest-entries, least-recent)")]
pub struct UnknownPriority(pub String);

impl std::str::FromStr for Priority {
    type Err = UnknownPriority;

    fn from_str(s: &str) -> Result<Priority, UnknownPriority> {
        Priority::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPriority(s.to_string()))
    }
}

/// Variants of the mutual-exclusion algorithms that have them: those
/// whose registry entry claims the option (see
/// [`Claims::options`](crate::registry::Claims::options)) read these; the
/// defaults give the classic algorithms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MutexOptions {
    /// The fault-tolerant form of Jones's lecture notes (22C:116, Iowa, 2002): a deferred request is answered at
    /// once with a negative acknowledgement, a silent peer is probed ("are
    /// you still there?") and, after a few unanswered probes, given up on
    /// for the request.
    pub fault_tolerant: bool,
    /// The order concurrent requests are served in.
    pub priority: Priority,
    /// How many grants a centralized term, or a token-ring generation, may
    /// number before it must move to a new one (see
    /// [`MutexAlgorithm::term_spent`]): all that a fence's minor part holds
    /// ([`Fence::MINOR_MAX`](crate::types::Fence::MINOR_MAX)) when `None`.
    /// A cluster file's `fence_room`, or the simulator's `--fence-room`,
    /// makes it small, to see the move happen.
    pub fence_room: Option<u64>,
}

impl MutexOptions {
    /// The grants a term or generation may number (see
    /// [`fence_room`](Self::fence_room)), at least one.
    pub fn fence_room(&self) -> u64 {
        let max = crate::types::Fence::MINOR_MAX;
        self.fence_room.map_or(max, |room| room.clamp(1, max))
    }
}

/// What an algorithm instance is told when it is built.
#[derive(Clone, Debug)]
pub struct AlgoConfig {
    /// This node.
    pub id: NodeId,
    /// The lock this instance serves: each name is an instance of its own
    /// (see [`Name`]). An election ignores it.
    pub name: Name,
    /// Every member of the cluster, this node included, sorted ascending.
    pub members: Vec<NodeId>,
    /// How many nodes may hold the critical section at once (1 for a mutex,
    /// k for a counting semaphore). Algorithms that support only 1 ignore it.
    pub capacity: usize,
    /// Heartbeat and failure-detection periods.
    pub timing: Timing,
    /// Distinguishes this run of the node from its earlier runs (a boot
    /// id). Heartbeats carry it, so peers notice a restart even when it was
    /// quicker than the failure timeout.
    pub incarnation: u64,
    /// Where this node's `now` starts on a clock the whole cluster shares:
    /// wall-clock time since [`CLUSTER_ERA`](crate::CLUSTER_ERA) on a real
    /// cluster, zero in the simulator (whose nodes share simulated time).
    /// Algorithms that want timestamps to track real time across a loss of
    /// state use it; none may rely on it for safety.
    pub wall_origin: Duration,
    /// Variants of the mutual-exclusion algorithm (fault tolerance,
    /// priority), for those that have them.
    pub mutex_options: MutexOptions,
    /// What this node's previous run left in stable storage, if anything
    /// (see [`Restored`]).
    pub restored: Option<Restored>,
    /// When the engine forgets an idle lock's instance (`None`: never).
    pub forgetting: Option<Forgetting>,
}

/// When the engine forgets the instance of a lock nobody here holds or
/// wants ([`MutexAlgorithm::forgettable`]), so that an idle lock costs
/// nothing but, for some algorithms, its remnant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forgetting {
    /// Once it has stayed forgettable this long.
    pub after: Duration,
    /// The most remnants kept ([`MutexAlgorithm::remnant`]); beyond it the
    /// oldest are dropped, their highest value kept as a floor.
    pub remnants: usize,
    /// The most instances at once. A lock new to the node takes the place
    /// of the one idle longest, forgotten early; a request here is refused
    /// when none is idle (a peer's message still makes one, so that no
    /// request elsewhere is left without an answer).
    pub locks: usize,
}

impl Default for Forgetting {
    /// After 5 s; 100,000 remnants and instances.
    fn default() -> Forgetting {
        Forgetting { after: Duration::from_secs(5), remnants: 100_000, locks: 100_000 }
    }
}

/// The most reads ([`Mode::Read`]) of one lock a node holds or asks for
/// at once: one per client session that reads it. A reader form accepts
/// no more from a peer, so that a report of reads is bounded.
pub const MAX_READS: u32 = 1 << 16;

impl AlgoConfig {
    /// A config for `id` in a cluster of ids `1..=n` with default timing,
    /// in detector mode.
    pub fn for_test(id: u32, n: u32) -> AlgoConfig {
        AlgoConfig {
            id: NodeId(id),
            name: Name::default(),
            members: (1..=n).map(NodeId).collect(),
            capacity: 1,
            // The textbook's mode: the algorithms' and the engine's
            // tests drive peer up and down from the failure detector.
            timing: Timing {
                lease: crate::membership::LeaseTiming {
                    partitions: crate::membership::Partitions::Detector,
                    ..Default::default()
                },
                ..Timing::default()
            },
            incarnation: 0,
            wall_origin: Duration::ZERO,
            mutex_options: MutexOptions::default(),
            restored: None,
            forgetting: None,
        }
    }

    /// Every member but this node.
    pub fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members.iter().copied().filter(move |&m| m != self.id)
    }
}

/// What every algorithm handles, mutual exclusion and election alike: its
/// peers' messages, its own timers, and peers coming and going.
///
/// Peers start out unknown: the engine reports each one with
/// [`handle_peer_up`](Self::handle_peer_up) when it is first heard from and
/// [`handle_peer_down`](Self::handle_peer_down) when the failure detector
/// suspects it; with `partitions = "majority"`, when a view a majority
/// agreed to counts it in or leaves it out
/// ([`membership`](crate::membership)), so that a peer counted down has
/// stopped acting, as these handlers assume.
pub trait Algorithm: Send + Clone + std::hash::Hash + 'static {
    /// The algorithm's messages.
    type Msg: Message;
    /// The algorithm's timers ([`NoTimer`](crate::NoTimer) if it arms none).
    type Timer: Timer;

    /// A message arrived from a peer.
    fn handle_message(
        &mut self,
        now: Time,
        from: NodeId,
        msg: Self::Msg,
        out: &mut Outbox<Self::Msg, Self::Timer>,
    );

    /// One of this algorithm's timers fired.
    fn handle_timer(
        &mut self,
        _now: Time,
        _timer: Self::Timer,
        _out: &mut Outbox<Self::Msg, Self::Timer>,
    ) {
    }

    /// The failure detector heard from `peer` after not counting it as up.
    fn handle_peer_up(
        &mut self,
        _now: Time,
        _peer: NodeId,
        _out: &mut Outbox<Self::Msg, Self::Timer>,
    ) {
    }

    /// `peer` and this node were out of touch without either restarting:
    /// this node suspected `peer` and hears from it again, or `peer` says
    /// it suspected this node and counts it up again (the engine's
    /// *re-admission*). Whichever suspected forgot what the other had
    /// asked of it and stopped telling it things (a release went to the
    /// live peers only), yet the other knows nothing of it: unlike a
    /// restarted node, it still believes what it believed. So each side
    /// tells the other what a newcomer must be told, and what the other
    /// may still wrongly believe of it. The default is
    /// [`handle_peer_up`](Self::handle_peer_up), enough for an algorithm
    /// that tells a newcomer everything it holds or wants.
    fn handle_peer_back(
        &mut self,
        now: Time,
        peer: NodeId,
        out: &mut Outbox<Self::Msg, Self::Timer>,
    ) {
        self.handle_peer_up(now, peer, out);
    }

    /// The failure detector suspects `peer` has crashed.
    fn handle_peer_down(
        &mut self,
        _now: Time,
        _peer: NodeId,
        _out: &mut Outbox<Self::Msg, Self::Timer>,
    ) {
    }

    /// Feeds the whole state to a checker's hash, every time in it as seen
    /// from `now`, so that states alike but for the moment hash alike. The
    /// default hashes the state as it is, right for the algorithms that
    /// keep no time of their own (their timers are the engine's); one that
    /// keeps a time overrides it.
    fn hash_at(&self, h: &mut dyn std::hash::Hasher, _now: Time) {
        let mut h = h;
        self.hash(&mut h);
    }
}

/// The outbox of algorithm `A`.
pub type Out<A> = Outbox<<A as Algorithm>::Msg, <A as Algorithm>::Timer>;

/// A distributed mutual-exclusion algorithm, seen from one node.
///
/// The node's application asks for the critical section with
/// [`handle_request`](Self::handle_request) and leaves it with
/// [`handle_release`](Self::handle_release); between them the algorithm
/// emits exactly one [`Action::Grant`](crate::Action::Grant). A node asks
/// for one entry at a time (the node multiplexes its own clients), unless
/// the algorithm counts sessions
/// ([`Claims::counting`](crate::registry::Claims::counting)): then it may
/// ask again while it waits or holds, up to the lock's permits, each
/// request granted once and each grant released by its fence
/// ([`handle_release_of`](Self::handle_release_of)). What it shares with
/// an election (messages, timers, peers) is [`Algorithm`]'s.
pub trait MutexAlgorithm: Algorithm {
    /// The local application wants the critical section.
    fn handle_request(&mut self, now: Time, out: &mut Out<Self>);

    /// The local application wants the critical section in `mode`. An
    /// algorithm with a reader form
    /// ([`Claims::readers`](crate::registry::Claims::readers)) lets reads
    /// share and tells each grant's mode by
    /// [`mode_of`](Self::mode_of); the default takes every request as a
    /// write ([`handle_request`](Self::handle_request)), which is always
    /// safe. The engine asks a reader form for reads only on a lock of one
    /// permit.
    fn handle_request_in(&mut self, now: Time, _mode: Mode, out: &mut Out<Self>) {
        self.handle_request(now, out);
    }

    /// The mode of this node's grant `fence`, which it holds: what it was
    /// asked with. The default, for an algorithm without a reader form,
    /// is [`Mode::Write`].
    fn mode_of(&self, _fence: Fence) -> Mode {
        Mode::Write
    }

    /// The local application left the critical section.
    fn handle_release(&mut self, now: Time, out: &mut Out<Self>);

    /// The local application left the critical section it entered with
    /// `fence`. An algorithm that grants a node one entry at a time has
    /// one to leave (the default); one that counts sessions may hold
    /// several grants of the lock here and leaves this one.
    fn handle_release_of(&mut self, now: Time, _fence: Fence, out: &mut Out<Self>) {
        self.handle_release(now, out);
    }

    /// This instance was just made for a lock new to this node (or one it
    /// forgot while idle), with the node running and `peer` counted up.
    /// Unlike a peer that comes up, this one has no state of this node's
    /// for the lock, since the node had none: there is nothing to tell it
    /// or ask of it, and the instance counts it up as if they had always
    /// run side by side. The default is
    /// [`handle_peer_up`](Algorithm::handle_peer_up), right for the
    /// algorithms that tell a newcomer only what they hold or want (a new
    /// instance holds and wants nothing).
    fn handle_adopt(&mut self, now: Time, peer: NodeId, out: &mut Out<Self>) {
        self.handle_peer_up(now, peer, out);
    }

    /// The election layer settled on `leader` for `epoch`.
    fn handle_coordinator(
        &mut self,
        _now: Time,
        _leader: NodeId,
        _epoch: Epoch,
        _out: &mut Out<Self>,
    ) {
    }

    /// Where this node stands with respect to the critical section.
    fn cs_state(&self) -> CsState;

    /// The timestamp of this node's current request, while it wants or
    /// holds the critical section, for algorithms that order requests by
    /// timestamp. The simulator uses it to check fairness.
    fn request_stamp(&self) -> Option<Stamp> {
        None
    }

    /// A monotone value that heartbeats carry to every peer (a Lamport
    /// clock, typically) so that a node that just joined catches up before
    /// it first asks for the critical section. The engine also keeps a
    /// reserve above it in stable storage and hands that to
    /// [`observe_watermark`](Self::observe_watermark) when the node
    /// restarts: every stamp, ticket or generation issued after
    /// `observe_watermark(w)` must be above everything issued at or below
    /// `w`, which is what keeps fences rising across a restart of every
    /// node.
    fn watermark(&self) -> u64 {
        0
    }

    /// How far ahead of the [`watermark`](Self::watermark) the engine keeps
    /// the stored one: a write each time the watermark climbs this much,
    /// and a jump of at most this much at each restart. The default suits
    /// a clock that ticks by one; an algorithm whose watermark climbs in
    /// larger steps reserves in those.
    const WATERMARK_RESERVE: u64 = WATERMARK_RESERVE;

    /// How far above its [`watermark`](Self::watermark) what the
    /// algorithm hands out may reach, beside what it issues itself: the
    /// engine keeps the stored watermark more than this far above the
    /// watermark, before any message of the step leaves, so that a
    /// restarted node starts above that too. `roucairol-carvalho` owes
    /// the peers it answers a ceiling up to its reservation above their
    /// stamps, which its clock has seen; the others issue nothing above
    /// their watermark (0).
    const WATERMARK_AHEAD: u64 = 0;

    /// A peer's [`watermark`](Self::watermark), seen on its heartbeat.
    fn observe_watermark(&mut self, _watermark: u64) {}

    /// The highest value this instance chose itself in this run, as
    /// opposed to learned, that its lock's later instances at this node,
    /// and new locks, may go on from (token ring: a generation it
    /// proposed). The engine keeps the highest over every lock, in memory
    /// only, so a restart or a reset starts it again at 0, and hands it to
    /// each new instance ([`observe_made`](Self::observe_made)). The
    /// default, 0, makes nothing.
    fn made(&self) -> u64 {
        0
    }

    /// A new instance: the highest [`made`](Self::made) of any lock at
    /// this node in this run. Called as it is built, before any input.
    fn observe_made(&mut self, _made: u64) {}

    /// What must outlive a crash of this node, encoded: the engine hands
    /// it to its driver for stable storage whenever it changes, before any
    /// message of the step that changed it leaves (unless
    /// [`covered_by`](Self::covered_by) says they rest on an earlier
    /// record), and the next run of the node finds it in
    /// [`Restored::mutex_of`]. Most algorithms keep nothing (`None`): a
    /// restarted node learns what it needs from its peers. The quorum
    /// algorithms keep who may hold their arbiter's permission.
    fn durable_state(&self) -> Option<Vec<u8>> {
        None
    }

    /// Whether this instance holds nothing a new one would lack, so that
    /// the engine may forget it once it has stayed so a while, and make a
    /// new one when the lock is next used here: an idle lock then costs
    /// nothing. It must neither want nor hold the lock, wait for nothing
    /// (no timer armed), owe no peer an answer, and keep nothing peers
    /// count on it to keep (a coordinator's queue or holders, an arbiter's
    /// permission, a token). Its clock needs no keeping: every new
    /// instance starts above the node's floor, which covers it. What else
    /// must outlive it goes into its [`remnant`](Self::remnant). A message
    /// the peers sent this instance may still reach the new one: it must
    /// take it as an idle instance would have. The default, `false`, never
    /// forgets.
    fn forgettable(&self) -> bool {
        false
    }

    /// What a forgotten instance leaves the next instance of the same lock
    /// at this node ([`observe_remnant`](Self::observe_remnant)), if it
    /// must leave anything: one number whose meaning is the algorithm's
    /// (a coordinator's last fence, the token's generation).
    fn remnant(&self) -> Option<u64> {
        None
    }

    /// A new instance of a lock this node forgot: `own` is what the last
    /// instance of this lock left ([`remnant`](Self::remnant)), if the
    /// engine still keeps it; `floor` the highest remnant of any lock the
    /// engine had to drop for room. Called before any other input.
    fn observe_remnant(&mut self, _own: Option<u64>, _floor: u64) {}

    /// As coordinator: whether this term has issued every fence it has
    /// room for ([`MutexOptions::fence_room`]) and a request waits. The
    /// engine then asks the election for a new term
    /// ([`ElectionAlgorithm::handle_renew`]), whose fences start above
    /// this one's. Only algorithms whose fences count grants within an
    /// epoch run out; the default is `false`.
    fn term_spent(&self) -> bool {
        false
    }

    /// Whether every message of the step just taken rests on what
    /// `record` (the lock's record last handed to the driver, perhaps not
    /// yet durable; `None` if the lock has none) already holds, so that
    /// the new [`durable_state`](Self::durable_state) may follow the
    /// messages out instead of going before them. An algorithm that
    /// writes down ahead of time what its next messages will rest on (the
    /// quorum arbiter records its next grantee while the current one
    /// holds) keeps the flush off the path of those messages this way; one
    /// whose step rests on no record at all (an arbiter that granted no
    /// other node) says so for `None` too, and its messages wait for no
    /// other lock's flush. The default, `false`, is always safe.
    fn covered_by(&self, _record: Option<&[u8]>) -> bool {
        false
    }
}

/// A leader-election algorithm, seen from one node.
///
/// Peers start out unknown, as for every [`Algorithm`]. The engine calls
/// [`handle_start`](Self::handle_start) once the node has joined: it has
/// heard from every peer, or waited one failure timeout for the silent ones.
pub trait ElectionAlgorithm: Algorithm {
    /// The node has joined the cluster: time to find (or become) the
    /// coordinator.
    fn handle_start(&mut self, now: Time, out: &mut Out<Self>);

    /// A peer's heartbeat said it follows `coordinator` at `epoch`.
    fn handle_epoch_hint(
        &mut self,
        _now: Time,
        _from: NodeId,
        _epoch: Epoch,
        _coordinator: Option<NodeId>,
        _out: &mut Out<Self>,
    ) {
    }

    /// This node's mutual exclusion has run out of fences for the term it
    /// coordinates ([`MutexAlgorithm::term_spent`]): a sitting
    /// coordinator opens a new term of its own, with a new epoch, as
    /// ZooKeeper's leader does when its transaction counter is about to
    /// roll over. Any other node does nothing.
    fn handle_renew(&mut self, now: Time, out: &mut Out<Self>);

    /// The coordinator this node follows, if any.
    fn coordinator(&self) -> Option<NodeId>;

    /// The epoch of the coordinator this node follows (or the highest epoch
    /// seen, when it follows none).
    fn epoch(&self) -> Epoch;
}
