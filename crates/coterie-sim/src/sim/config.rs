//! What a run is asked to do: the cluster, the workload, the faults and
//! the timing.

use coterie_core::registry::{ElectionInfo, MutexInfo};
use coterie_core::session::Limits;
use coterie_core::{MutexOptions, Timing};
use serde::Serialize;
use std::time::Duration;

/// How clients load the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Load {
    /// Every node runs its own client loop: think, request, hold, release.
    Concurrent,
    /// One request at a time in the whole cluster, from a random node, with
    /// a quiet gap after each release: the messages each entry costs are
    /// counted exactly.
    Sequential,
    /// Every live node asks at the same instant, once; the next burst comes
    /// when every entry of this one is done and its messages have landed.
    /// `requests` bursts in all. The case the textbook states
    /// Lodha-Kshemkalyani's saving for: all N requests concurrent.
    Burst,
}

/// When a run draws its fault schedule (every fault's moment, victim and
/// length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultDraw {
    /// When the run is made, before start-up: what every seed has always
    /// drawn, so replay lines keep working.
    Upfront,
    /// When the workload begins, after start-up: the checker runs start-up
    /// once, with every choice its first answer, and explores every fault
    /// schedule from there.
    AtWorkload,
}

/// The parameters of one run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Mutual-exclusion algorithm.
    pub mutex: &'static MutexInfo,
    /// Election algorithm.
    pub election: &'static ElectionInfo,
    /// Cluster size; ids are `1..=nodes`.
    pub nodes: u32,
    /// Holders allowed at once.
    pub capacity: usize,
    /// Variants of the mutual-exclusion algorithm (fault tolerance,
    /// priority), for those that have them.
    pub mutex_options: MutexOptions,
    /// The seed every random choice of the run comes from.
    pub seed: u64,
    /// Up to this many crash-and-restart faults during the workload.
    pub crashes: u32,
    /// This many network partitions during the workload: a random minority
    /// is cut off from the rest (both ways, connections staying up) for
    /// one to six failure timeouts, then healed. Algorithms that trust
    /// timeouts may grant on both sides meanwhile.
    pub partitions: u32,
    /// This many one-way partitions during the workload, drawn as
    /// `partitions` are, but cutting one way only: the minority hears
    /// nothing from the rest, or the rest nothing from the minority (the
    /// way drawn too). It is the fault that confuses failure detectors
    /// most: one side suspects the other, which suspects nobody.
    pub one_way_partitions: u32,
    /// This many pauses during the workload: a random node freezes, state
    /// and all, for half a failure timeout to four, then carries on where
    /// it stopped (a stopped process, a long GC pause, a VM migration).
    /// What reached it meanwhile waits for it. Algorithms that trust
    /// timeouts may grant twice around a pause, as around a partition.
    pub pauses: u32,
    /// This many delay spikes during the workload: a random node's
    /// messages to every peer each take an extra delay, drawn once per
    /// spike from `delay_spike`, for one to six failure timeouts; then the
    /// spike ends. Links stay FIFO and nothing is lost, but a spike longer
    /// than the failure timeout gets the node suspected while it is alive.
    /// Spikes on different nodes may overlap; one that lands on a node
    /// already slowed is skipped. A spike slows the node's outgoing path,
    /// not its process: it outlasts a crash and restart of the node, and
    /// what the node sent before crashing still arrives.
    pub delays: u32,
    /// The range a delay spike's extra delay is drawn from (by default 0.2
    /// to 3 failure timeouts of the default timing).
    pub delay_spike: (Duration, Duration),
    /// This many loss windows during the workload: a random node loses a
    /// share of its outgoing messages, heartbeats included (the share drawn
    /// once per window from 10% to 50%), for one to six failure timeouts.
    /// The algorithms assume reliable links, so only safety is promised
    /// meanwhile. Windows on different nodes may overlap; one that lands on
    /// a node already losing messages is skipped.
    pub drops: u32,
    /// This many connection resets during the workload: a random node's
    /// connections to and from every peer break at once, with whatever
    /// frames are in flight in them, while every process lives on (a NAT,
    /// a load balancer or a flapping link). Both sides redial at once, and
    /// the sessions send again what was lost: the algorithms should see
    /// nothing but a delay.
    pub resets: u32,
    /// The cap on each session's unacknowledged frames.
    pub session_limits: Limits,
    /// Whether nodes have stable storage: what an engine asks to persist
    /// survives its crash and comes back on restart (as a node with a
    /// state directory). Off, a restarted node remembers nothing.
    pub stable_storage: bool,
    /// The shape of the workload.
    pub load: Load,
    /// How many locks the clients spread their requests over: `default`
    /// alone when 1, else `r0`, `r1`, ... each drawn uniformly.
    pub names: u32,
    /// When the engines forget idle locks (`None`: never).
    pub forgetting: Option<coterie_core::Forgetting>,
    /// How many distinct names each request takes at once (all of them,
    /// one after the other in name order, before entering; at most
    /// `names`).
    pub per_request: u32,
    /// Clients at each node (concurrent and burst load), each its own
    /// session, as several processes taking locks through one node: where
    /// the algorithm counts sessions they hold permits side by side, and
    /// otherwise take turns with their node's grant.
    pub sessions: u32,
    /// How many of the clients (concurrent and burst load) read
    /// ([`Mode::Read`](coterie_core::Mode::Read)); the others write. They
    /// are spread evenly over the clients in node order. Where the
    /// algorithm has no reader form, or the lock more than one permit,
    /// reads are asked for as writes, and judged as such.
    pub readers: u32,
    /// Critical-section entries each client makes (concurrent load),
    /// entries in all (sequential load), or bursts (burst load).
    pub requests: u32,
    /// Heartbeat and failure-detection periods.
    pub timing: Timing,
    /// One-way message delay, drawn uniformly from this range.
    pub delay: (Duration, Duration),
    /// Heartbeats take exactly this long instead, when set: the checker
    /// explores every delay of the algorithms' messages and every order of
    /// simultaneous events, but not every delay of every heartbeat, which
    /// would multiply the states by three at every beat and change
    /// nothing but the detectors' last-heard times.
    pub heartbeat_delay: Option<Duration>,
    /// Time spent in the critical section, drawn uniformly.
    pub hold: (Duration, Duration),
    /// Time between a release and the next request, drawn uniformly.
    pub think: (Duration, Duration),
    /// The run gives up (and reports a liveness failure) at this time.
    pub max_time: Duration,
    /// When the fault schedule is drawn.
    pub fault_draw: FaultDraw,
    /// Faults begin within this long of the workload's start; by default
    /// half the time a client spends holding and thinking over all its
    /// requests, at the most.
    pub fault_window: Option<Duration>,
    /// Record a line per event.
    pub trace: bool,
    /// Record the run for its space-time diagram
    /// ([`RunReport::diagram`](crate::sim::RunReport::diagram)).
    pub record: bool,
    /// Judge safety against this many holders instead of `capacity` (a way
    /// to prove the checker catches an overlap; leave `None` otherwise).
    pub checked_capacity: Option<usize>,
    /// Judge only progress (liveness, deadlock, agreement), not safety and
    /// fences: what a run under faults the algorithm does not tolerate
    /// (a pause, for those that trust timeouts) must still do is come
    /// back, and a run that ends at its first overlap cannot show that.
    pub progress_only: bool,
}

impl SimConfig {
    /// A five-node run of `mutex` and `election` with default parameters.
    pub fn new(mutex: &'static MutexInfo, election: &'static ElectionInfo) -> SimConfig {
        SimConfig {
            mutex,
            election,
            nodes: 5,
            capacity: 1,
            mutex_options: MutexOptions::default(),
            seed: 1,
            crashes: 0,
            partitions: 0,
            one_way_partitions: 0,
            pauses: 0,
            delays: 0,
            delay_spike: (
                Timing::default().failure_timeout / 5,
                Timing::default().failure_timeout * 3,
            ),
            drops: 0,
            resets: 0,
            session_limits: Limits::default(),
            stable_storage: true,
            load: Load::Concurrent,
            names: 1,
            forgetting: None,
            per_request: 1,
            sessions: 1,
            readers: 0,
            requests: 10,
            timing: Timing::default(),
            delay: (Duration::from_micros(500), Duration::from_millis(5)),
            heartbeat_delay: None,
            hold: (Duration::from_millis(1), Duration::from_millis(10)),
            think: (Duration::ZERO, Duration::from_millis(20)),
            max_time: Duration::from_secs(120),
            fault_draw: FaultDraw::Upfront,
            fault_window: None,
            trace: false,
            record: false,
            checked_capacity: None,
            progress_only: false,
        }
    }
}
