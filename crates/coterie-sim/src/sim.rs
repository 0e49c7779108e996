//! One simulated run.

use crate::chooser::{Chooser, Random};
use crate::invariant::Invariant;
use crate::network::Network;
use crate::record::Recorder;
use coterie_core::engine::Output;
use coterie_core::registry;
use coterie_core::session::{Limits, Received, Sent, Session};
use coterie_core::wire::{self, Envelope};
use coterie_core::{AlgoConfig, Engine, Epoch, Fence, MutexOptions, NodeId, Time, Timing, Way};
use coterie_diagram::MarkKind;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
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
    /// Mutual-exclusion algorithm, by registry name.
    pub mutex: String,
    /// Election algorithm, by registry name.
    pub election: String,
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
    /// Critical-section entries each node's client makes (concurrent load),
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
    /// ([`RunReport::diagram`]).
    pub record: bool,
    /// Judge safety against this many holders instead of `capacity` (a way
    /// to prove the checker catches an overlap; leave `None` otherwise).
    pub checked_capacity: Option<usize>,
}

impl SimConfig {
    /// A five-node run of `mutex` and `election` with default parameters.
    pub fn new(mutex: &str, election: &str) -> SimConfig {
        SimConfig {
            mutex: mutex.to_string(),
            election: election.to_string(),
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
        }
    }
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Which one.
    pub invariant: Invariant,
    /// What was seen.
    pub detail: String,
    /// Simulated time, in microseconds.
    pub at_us: u64,
}

/// What one run saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunReport {
    /// The run's seed.
    pub seed: u64,
    /// Critical-section entries granted.
    pub entries: u64,
    /// Entries granted to the node that was the coordinator at the time
    /// (free under `centralized`: a node sends itself nothing).
    pub coordinator_entries: u64,
    /// Mutex-layer messages sent once the workload began.
    pub mutex_messages: u64,
    /// Every message sent once the workload began, by kind.
    pub messages_by_kind: BTreeMap<String, u64>,
    /// Sequential load only: for each entry, the mutex messages it cost and
    /// whether its requester was the coordinator.
    pub per_entry: Vec<(u64, bool)>,
    /// Every coordinator change: (time in µs, node, leader, epoch).
    pub elections: Vec<(u64, u32, u32, u64)>,
    /// Crashes injected.
    pub crashes: u32,
    /// Partitions injected, one-way ones included.
    pub partitions: u32,
    /// One-way partitions injected.
    pub one_way_partitions: u32,
    /// Pauses injected.
    pub pauses: u32,
    /// Delay spikes injected.
    pub delays: u32,
    /// Loss windows injected.
    pub drops: u32,
    /// Messages lost in loss windows.
    pub lost: u64,
    /// Connection resets injected.
    pub resets: u32,
    /// Frames the sessions wrote once a connection came up, having waited
    /// in them (a connection being made, or one that broke with them in
    /// flight).
    pub resent: u64,
    /// Sessions that overflowed their cap (their peer declared failed).
    pub overflows: u64,
    /// Gaps receivers saw after an overflow (the sender declared failed).
    pub gaps: u64,
    /// Records the nodes wrote to stable storage (the durable epoch, clock
    /// reserve and mutex state), start-up included.
    pub records: u64,
    /// Simulated time at the end, in microseconds.
    pub end_us: u64,
    /// Broken invariants, in the order seen.
    pub violations: Vec<Violation>,
    /// One line per event, when tracing.
    pub trace: Vec<String>,
    /// Every message sent in the whole run (from the start, not the
    /// workload's), by kind.
    pub sent_by_kind: BTreeMap<String, u64>,
    /// The run, for its space-time diagram, when recording.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagram: Option<coterie_diagram::Run>,
    /// Grants made while a node that asked earlier was still waiting:
    /// earlier by request timestamp for algorithms that stamp requests
    /// (see `MutexAlgorithm::request_stamp`), by time of asking otherwise.
    pub out_of_order: u64,
    /// Synchronisation delays: from a release to the next grant, when
    /// someone was waiting at the release (µs).
    pub sync_delays_us: Vec<u64>,
    /// Simulated time from the workload's start to its last release (µs).
    pub workload_us: u64,
}

/// A share of messages lost, hashed by its bits (a run's state is hashed
/// for the checker).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Share(f64);

impl std::hash::Hash for Share {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.to_bits().hash(h);
    }
}

/// What a frame carries, as far as the simulator cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Carries {
    /// A heartbeat: a fixed delay when checking, and no sign of progress.
    Heartbeat,
    /// An election-layer message.
    Election,
    /// A mutex-layer message (counted while in flight).
    Mutex,
}

impl Carries {
    fn of(envelope: &Envelope) -> Carries {
        match envelope {
            Envelope::Heartbeat(_) => Carries::Heartbeat,
            Envelope::Election(_) => Carries::Election,
            Envelope::Mutex(_) => Carries::Mutex,
        }
    }
}

#[derive(Clone, Debug, Hash)]
enum Event {
    /// A frame reaches `to`, unless its connection broke meanwhile.
    Deliver {
        from: NodeId,
        to: NodeId,
        conn: u64,
        seq: u64,
        ack: u64,
        bytes: Vec<u8>,
        carries: Carries,
    },
    /// `from`'s dial reaches `to`.
    Hello {
        from: NodeId,
        to: NodeId,
        conn: u64,
        boot: u64,
    },
    /// `to`'s answer to `from`'s dial reaches `from`.
    Welcome {
        from: NodeId,
        to: NodeId,
        conn: u64,
        boot: u64,
        delivered: u64,
    },
    /// Every connection to and from `node` breaks.
    Reset {
        node: NodeId,
    },
    /// `observer`'s connection to `peer` (incarnation `peer_incarnation`)
    /// closed and a redial was refused.
    LinkDown {
        observer: NodeId,
        peer: NodeId,
        incarnation: u32,
        peer_incarnation: u32,
    },
    /// The node's engine has a deadline now.
    Wake {
        node: NodeId,
        incarnation: u32,
    },
    /// The node's client asks for the critical section.
    Request {
        node: NodeId,
        incarnation: u32,
    },
    /// The node's client leaves the critical section.
    Release {
        node: NodeId,
        incarnation: u32,
    },
    /// Draw the fault schedule now (see [`FaultDraw::AtWorkload`]).
    DrawFaults,
    /// Sequential load: choose the next requester.
    NextSequential,
    /// Burst load: every live node asks now, if the last burst is over.
    NextBurst,
    Crash {
        node: NodeId,
        silent: bool,
    },
    Restart {
        node: NodeId,
    },
    /// Cut `side` off from every other node, both ways or one (unless
    /// another partition is in force).
    Partition {
        id: u32,
        side: BTreeSet<NodeId>,
        way: Way,
    },
    /// End partition `id`.
    Heal {
        id: u32,
    },
    /// Freeze `node` (a `Resume` is scheduled with it).
    Pause {
        node: NodeId,
    },
    /// `node` carries on.
    Resume {
        node: NodeId,
    },
    /// `node`'s messages take `extra` longer (unless a spike is already
    /// slowing it).
    DelaySpike {
        id: u32,
        node: NodeId,
        extra: Duration,
    },
    /// End delay spike `id` on `node`.
    DelayOver {
        id: u32,
        node: NodeId,
    },
    /// `node` loses `share` of its messages (unless a loss window is
    /// already open on it).
    Loss {
        id: u32,
        node: NodeId,
        share: Share,
    },
    /// End loss window `id` on `node`.
    LossOver {
        id: u32,
        node: NodeId,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum ClientState {
    Thinking,
    Waiting,
    Holding,
    Done,
}

#[derive(Clone)]
struct SimNode {
    engine: Option<Engine>,
    incarnation: u32,
    /// The deadline a `Wake` is queued for.
    wake_at: Option<Time>,
    client: ClientState,
    /// Concurrent load: entries still to make.
    remaining: u32,
    /// The session with each peer, new with each incarnation.
    sessions: BTreeMap<NodeId, Session>,
    /// The node's stable storage: what its engine last asked to persist.
    /// It survives a crash, as a disk would.
    stable: Option<coterie_core::Restored>,
}

/// One run of the simulator, its choices made by `C`; see the crate
/// documentation. A copy (with a copy of its chooser) goes on exactly as
/// the original would: a checker forks runs at a state.
#[derive(Clone)]
pub struct Simulation<C: Chooser = Random> {
    cfg: SimConfig,
    /// Where every choice of the run comes from.
    chooser: C,
    now: Time,
    seq: u64,
    queue: BinaryHeap<Reverse<(Time, u64, usize)>>,
    /// Event payloads, indexed from the queue (keeps the heap's items small
    /// and `Ord` without ordering events themselves).
    events: Vec<Option<Event>>,
    nodes: BTreeMap<NodeId, SimNode>,
    /// The connections between them.
    net: Network,
    /// Who holds now, and with which fence.
    holders: BTreeMap<NodeId, Fence>,
    /// Every fence granted so far.
    fences: BTreeSet<Fence>,
    /// When each waiting client asked.
    asked: BTreeMap<NodeId, Time>,
    /// A release with someone waiting, not yet followed by a grant.
    release_pending: Option<Time>,
    /// When the workload began; messages are counted from then on.
    workload_start: Time,
    last_fault: Time,
    /// Sequential load: the entry in progress (requester, messages before,
    /// requester was coordinator) and entries left.
    sequential: Option<(NodeId, u64, bool)>,
    sequential_left: u32,
    /// Burst load: bursts still to come, and whether the next is queued.
    bursts_left: u32,
    burst_due: bool,
    mutex_sent_total: u64,
    /// Mutex messages sent and not yet delivered (or dropped).
    mutex_in_flight: u64,
    /// The side of the partition in force, if any.
    cut: Option<(u32, BTreeSet<NodeId>, Way)>,
    /// Paused nodes.
    paused: BTreeSet<NodeId>,
    /// What reached each paused node, in order.
    deferred: BTreeMap<NodeId, std::collections::VecDeque<Event>>,
    /// The delay spikes in force, by node: the spike's id, the extra delay.
    spikes: BTreeMap<NodeId, (u32, Duration)>,
    /// The loss windows in force, by node: the window's id, the share lost.
    losses: BTreeMap<NodeId, (u32, Share)>,
    /// Since when, and in which state of the algorithms, the run has been
    /// stuck but for heartbeats (see [`Invariant::Deadlock`]).
    stuck: Option<(Time, u64)>,
    /// The run for its diagram, when recording.
    recorder: Option<Recorder>,
    report: RunReport,
}

const STEP: Duration = Duration::from_micros(1);

/// The hasher of states: the same seed every run, so a state always
/// hashes alike. (foldhash's quality variant: 64 bits well spread, at a
/// fraction of SipHash's cost on the many small writes a state makes.)
fn state_hasher() -> impl std::hash::Hasher {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::with_seed(0x636f_7465_7269_6521).build_hasher()
}

impl Simulation {
    /// Prepares a run of seed `cfg.seed`; fails on an unknown algorithm
    /// name.
    pub fn new(cfg: SimConfig) -> Result<Simulation, registry::UnknownAlgorithm> {
        let chooser = Random::new(cfg.seed);
        Simulation::with_chooser(cfg, chooser)
    }
}

impl<C: Chooser> Simulation<C> {
    /// Prepares a run whose choices come from `chooser` (`cfg.seed` only
    /// names it in reports).
    pub fn with_chooser(
        cfg: SimConfig,
        chooser: C,
    ) -> Result<Simulation<C>, registry::UnknownAlgorithm> {
        registry::mutex(&cfg.mutex)?;
        registry::election(&cfg.election)?;
        let mut sim = Simulation {
            chooser,
            now: Time::ZERO,
            seq: 0,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            nodes: BTreeMap::new(),
            net: Network::default(),
            holders: BTreeMap::new(),
            fences: BTreeSet::new(),
            asked: BTreeMap::new(),
            release_pending: None,
            workload_start: cfg.timing.failure_timeout * 3,
            last_fault: Time::ZERO,
            sequential: None,
            sequential_left: cfg.requests,
            bursts_left: cfg.requests,
            burst_due: false,
            mutex_sent_total: 0,
            mutex_in_flight: 0,
            cut: None,
            paused: BTreeSet::new(),
            deferred: BTreeMap::new(),
            spikes: BTreeMap::new(),
            losses: BTreeMap::new(),
            stuck: None,
            report: RunReport { seed: cfg.seed, ..RunReport::default() },
            recorder: cfg.record.then(|| {
                let nodes: Vec<NodeId> = (1..=cfg.nodes).map(NodeId).collect();
                let title = format!(
                    "{} + {}, {} nodes, seed {}",
                    cfg.mutex, cfg.election, cfg.nodes, cfg.seed
                );
                Recorder::new(&nodes, title)
            }),
            cfg,
        };
        for id in 1..=sim.cfg.nodes {
            let node = NodeId(id);
            let remaining = match sim.cfg.load {
                Load::Concurrent => sim.cfg.requests,
                Load::Sequential | Load::Burst => 0,
            };
            sim.nodes.insert(
                node,
                SimNode {
                    engine: None,
                    incarnation: 0,
                    wake_at: None,
                    client: ClientState::Thinking,
                    remaining,
                    sessions: BTreeMap::new(),
                    stable: None,
                },
            );
        }
        for id in 1..=sim.cfg.nodes {
            sim.boot(NodeId(id));
        }
        for id in 1..=sim.cfg.nodes {
            sim.dial_peers(NodeId(id));
        }
        sim.schedule_workload();
        match sim.cfg.fault_draw {
            FaultDraw::Upfront => sim.schedule_faults(),
            FaultDraw::AtWorkload => sim.push(sim.workload_start, Event::DrawFaults),
        }
        Ok(sim)
    }

    fn algo_config(&self, id: NodeId) -> AlgoConfig {
        AlgoConfig {
            id,
            members: (1..=self.cfg.nodes).map(NodeId).collect(),
            capacity: self.cfg.capacity,
            timing: self.cfg.timing,
            incarnation: u64::from(self.nodes.get(&id).map_or(0, |n| n.incarnation)),
            wall_origin: Duration::ZERO,
            mutex_options: self.cfg.mutex_options,
            restored: self.nodes.get(&id).and_then(|n| n.stable.clone()),
        }
    }

    fn boot(&mut self, node: NodeId) {
        let cfg = self.algo_config(node);
        let engine = Engine::new(cfg, &self.cfg.mutex, &self.cfg.election, self.now)
            .expect("names were checked in Simulation::new");
        let limits = self.cfg.session_limits;
        let peers = self.peers(node);
        let n = self.nodes.get_mut(&node).expect("known node");
        n.engine = Some(engine);
        n.wake_at = None;
        n.sessions = peers.into_iter().map(|p| (p, Session::new(limits))).collect();
        self.after_input(node);
    }

    fn peers(&self, node: NodeId) -> Vec<NodeId> {
        (1..=self.cfg.nodes).map(NodeId).filter(|&p| p != node).collect()
    }

    fn boot_id(&self, node: NodeId) -> u64 {
        u64::from(self.nodes[&node].incarnation)
    }

    fn session(&mut self, node: NodeId, peer: NodeId) -> &mut Session {
        let n = self.nodes.get_mut(&node).expect("known node");
        n.sessions.get_mut(&peer).expect("a session per peer")
    }

    /// When a frame `from` → `to` written now lands: a random delay, plus
    /// any delay spike on `from`, after the frame written before it.
    fn flight(&mut self, from: NodeId, to: NodeId) -> Time {
        let mut delay = self.uniform(self.cfg.delay);
        if let Some(&(_, extra)) = self.spikes.get(&from) {
            delay += extra;
        }
        self.net.land(from, to, self.now + delay, STEP)
    }

    /// `from` dials `to` (anew, breaking any connection it had), writing
    /// every frame its session keeps right behind the Hello.
    fn dial(&mut self, from: NodeId, to: NodeId) {
        let boot = self.boot_id(from);
        let expects = self.session(from, to).peer_boot();
        let conn = self.net.dial(from, to, boot, expects);
        let at = self.flight(from, to);
        self.push(at, Event::Hello { from, to, conn, boot });
        let frames: Vec<(u64, Vec<u8>)> =
            self.session(from, to).after(0).map(|(seq, body)| (seq, body.to_vec())).collect();
        for (seq, body) in frames {
            self.report.resent += 1;
            let carries = match wire::decode::<Envelope>(&body) {
                Ok(envelope) => Carries::of(&envelope),
                Err(_) => Carries::Mutex, // reported as a wire violation on arrival
            };
            self.write(from, to, seq, body, carries);
        }
    }

    fn dial_peers(&mut self, node: NodeId) {
        for peer in self.peers(node) {
            self.dial(node, peer);
        }
    }

    /// Writes frame `seq` of `from`'s session with `to` into their
    /// connection, if there is one; otherwise it waits in the session.
    fn write(&mut self, from: NodeId, to: NodeId, seq: u64, bytes: Vec<u8>, carries: Carries) {
        let Some(conn) = self.net.writable(from, to) else {
            return;
        };
        let ack = self.session(from, to).ack();
        if carries == Carries::Mutex {
            self.mutex_in_flight += 1;
        }
        let fixed = self.cfg.heartbeat_delay.filter(|_| carries == Carries::Heartbeat);
        let at = match fixed {
            Some(delay) => self.net.land(from, to, self.now + delay, STEP),
            None => self.flight(from, to),
        };
        self.push(at, Event::Deliver { from, to, conn: conn.id, seq, ack, bytes, carries });
    }

    fn push(&mut self, at: Time, event: Event) {
        self.seq += 1;
        self.events.push(Some(event));
        self.queue.push(Reverse((at, self.seq, self.events.len() - 1)));
    }

    fn uniform(&mut self, (lo, hi): (Duration, Duration)) -> Duration {
        self.chooser.duration(lo, hi)
    }

    /// A node, any of the cluster's.
    fn any_node(&mut self) -> NodeId {
        NodeId(self.chooser.number(1, self.cfg.nodes))
    }

    fn schedule_workload(&mut self) {
        let start = self.workload_start;
        match self.cfg.load {
            Load::Concurrent => {
                let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
                for node in ids {
                    let at = start + self.uniform(self.cfg.think);
                    self.push(at, Event::Request { node, incarnation: 0 });
                }
            }
            Load::Sequential => self.push(start, Event::NextSequential),
            Load::Burst => {
                self.burst_due = true;
                self.push(start, Event::NextBurst);
            }
        }
    }

    /// Crashes land at random moments of the first part of the workload;
    /// each restarts after a random downtime of up to four failure timeouts.
    fn schedule_faults(&mut self) {
        let typical = (self.cfg.hold.1 + self.cfg.think.1) * self.cfg.requests.max(1) / 2;
        let window = self.cfg.fault_window.unwrap_or(typical);
        let ft = self.cfg.timing.failure_timeout;
        for _ in 0..self.cfg.crashes {
            let at = self.workload_start + self.uniform((Duration::ZERO, window));
            let node = self.any_node();
            let silent = self.chooser.chance(0.5);
            self.push(at, Event::Crash { node, silent });
            let down_for = self.uniform((ft / 2, ft * 4));
            self.push(at + down_for, Event::Restart { node });
        }
        for _ in 0..self.cfg.pauses {
            let at = self.workload_start + self.uniform((Duration::ZERO, window));
            let node = self.any_node();
            let until = at + self.uniform((ft / 2, ft * 4));
            self.push(at, Event::Pause { node });
            self.push(until, Event::Resume { node });
        }
        for id in 0..self.cfg.partitions {
            let at = self.workload_start + self.uniform((Duration::ZERO, window));
            let side = self.minority();
            self.push(at, Event::Partition { id, side, way: Way::Both });
            let lasts = self.uniform((ft, ft * 6));
            self.push(at + lasts, Event::Heal { id });
        }
        for id in 0..self.cfg.delays {
            let at = self.workload_start + self.uniform((Duration::ZERO, window));
            let node = self.any_node();
            let extra = self.uniform(self.cfg.delay_spike);
            let lasts = self.uniform((ft, ft * 6));
            self.push(at, Event::DelaySpike { id, node, extra });
            self.push(at + lasts, Event::DelayOver { id, node });
        }
        for _ in 0..self.cfg.resets {
            let at = self.workload_start + self.uniform((Duration::ZERO, window));
            let node = self.any_node();
            self.push(at, Event::Reset { node });
        }
        for id in 0..self.cfg.drops {
            let at = self.workload_start + self.uniform((Duration::ZERO, window));
            let node = self.any_node();
            let share = self.chooser.fraction(0.1, 0.5);
            let lasts = self.uniform((ft, ft * 6));
            self.push(at, Event::Loss { id, node, share: Share(share) });
            self.push(at + lasts, Event::LossOver { id, node });
        }
        // After the others, so that runs without them draw what they
        // always drew.
        for n in 0..self.cfg.one_way_partitions {
            let id = self.cfg.partitions + n;
            let at = self.workload_start + self.uniform((Duration::ZERO, window));
            let side = self.minority();
            let way = if self.chooser.chance(0.5) { Way::Inbound } else { Way::Outbound };
            self.push(at, Event::Partition { id, side, way });
            let lasts = self.uniform((ft, ft * 6));
            self.push(at + lasts, Event::Heal { id });
        }
    }

    /// A random minority of the cluster (one node of two).
    fn minority(&mut self) -> BTreeSet<NodeId> {
        let minority = self.chooser.number(1, (self.cfg.nodes / 2).max(1));
        let mut ids: Vec<NodeId> = (1..=self.cfg.nodes).map(NodeId).collect();
        let mut side = BTreeSet::new();
        for _ in 0..minority {
            side.insert(ids.swap_remove(self.chooser.index(ids.len())));
        }
        side
    }

    /// Tells the recorder, if the run is recorded, with the time in µs.
    fn record<R>(&mut self, f: impl FnOnce(&mut Recorder, u64) -> R) -> Option<R> {
        let at = self.now.as_micros() as u64;
        self.recorder.as_mut().map(|r| f(r, at))
    }

    fn trace(&mut self, line: impl FnOnce() -> String) {
        if self.cfg.trace {
            let t = self.now.as_micros() as f64 / 1000.0;
            self.report.trace.push(format!("{t:>10.3}ms {}", line()));
        }
    }

    fn violation(&mut self, invariant: Invariant, detail: String) {
        self.trace(|| format!("VIOLATION {invariant}: {detail}"));
        let text = format!("{invariant}: {detail}");
        self.record(|r, at| r.mark(at, None, MarkKind::Violation, text));
        self.report.violations.push(Violation {
            invariant,
            detail,
            at_us: self.now.as_micros() as u64,
        });
    }

    /// Drains a node's outputs and re-arms its wake-up.
    fn after_input(&mut self, node: NodeId) {
        loop {
            let Some(engine) = self.nodes.get_mut(&node).and_then(|n| n.engine.as_mut()) else {
                return;
            };
            let Some(output) = engine.poll_output() else {
                break;
            };
            self.on_output(node, output);
        }
        let n = self.nodes.get_mut(&node).expect("known node");
        let now = self.now;
        let deadline = n.engine.as_ref().and_then(Engine::next_deadline).map(|d| d.max(now));
        if let Some(at) = deadline.filter(|_| deadline != n.wake_at) {
            n.wake_at = deadline;
            let incarnation = n.incarnation;
            self.push(at, Event::Wake { node, incarnation });
        }
    }

    fn on_output(&mut self, node: NodeId, output: Output) {
        match output {
            Output::Send { to, envelope, kind } => {
                *self.report.sent_by_kind.entry(kind.to_string()).or_default() += 1;
                let recorded = if self.recorder.is_some() {
                    let text = self.nodes[&node].engine.as_ref().map(|e| e.describe(&envelope));
                    let text = text.unwrap_or_default();
                    self.record(|r, at| r.sent(at, node, to, kind, text))
                } else {
                    None
                };
                if self.now >= self.workload_start {
                    *self.report.messages_by_kind.entry(kind.to_string()).or_default() += 1;
                }
                let carries = Carries::of(&envelope);
                if carries == Carries::Mutex {
                    self.mutex_sent_total += 1;
                    if self.now >= self.workload_start {
                        self.report.mutex_messages += 1;
                    }
                }
                // In a loss window, a share of the node's messages never
                // arrive, heartbeats as much as the rest.
                let lost = match self.losses.get(&node) {
                    Some(&(_, share)) => self.chooser.chance(share.0),
                    None => false,
                };
                if lost {
                    self.report.lost += 1;
                }
                if self.cfg.trace && kind != "heartbeat" {
                    let text = self.nodes[&node].engine.as_ref().map(|e| e.describe(&envelope));
                    let fate = if lost { " LOST" } else { "" };
                    self.trace(|| format!("{node} -> {to} {}{fate}", text.unwrap_or_default()));
                }
                // Loss and partitions act above the session, as `coterie
                // fault` does on a node: the session never sees the message.
                if lost || self.severed(node, to) {
                    return;
                }
                let bytes = wire::encode(&envelope);
                let sent = self.session(node, to).send(bytes.clone());
                if let Some(index) = recorded {
                    self.record(|r, _| r.numbered(index, sent.seq()));
                }
                if let Sent::Overflowed { dropped, .. } = sent {
                    self.report.overflows += 1;
                    self.trace(|| format!("{node}'s session to {to} overflowed: {dropped} frames dropped, {to} declared failed"));
                    let now = self.now;
                    self.engine(node).handle_link_down(now, to);
                }
                self.write(node, to, sent.seq(), bytes, carries);
            }
            Output::Granted { fence } => self.on_grant(node, fence),
            Output::Coordinator { leader, epoch } => {
                self.trace(|| format!("{node} follows {leader} for {epoch}"));
                let text = format!("{node} follows {leader} ({epoch})");
                self.record(|r, at| r.mark(at, Some(node), MarkKind::Coordinator, text));
                self.report.elections.push((
                    self.now.as_micros() as u64,
                    node.0,
                    leader.0,
                    epoch.0,
                ));
            }
            Output::PeerUp(p) => self.trace(|| format!("{node} sees {p} up")),
            Output::PeerDown(p) => {
                self.trace(|| format!("{node} suspects {p}"));
                let text = format!("{node} suspects {p}");
                self.record(|r, at| r.mark(at, Some(node), MarkKind::Suspect, text));
            }
            Output::Joined => self.trace(|| format!("{node} joined")),
            Output::Persist(record) => {
                self.report.records += 1;
                if let Some(n) = self.nodes.get_mut(&node).filter(|_| self.cfg.stable_storage) {
                    n.stable = Some(record);
                }
            }
        }
    }

    /// Whether `node`, which asked at `asked_at`, entered ahead of a
    /// waiting node that asked before it: by request timestamp when the
    /// algorithm orders requests by timestamp, by the time of asking
    /// otherwise.
    fn overtook_someone(&self, node: NodeId, asked_at: Time) -> bool {
        let stamp = |id: &NodeId| self.nodes[id].engine.as_ref().and_then(Engine::request_stamp);
        match stamp(&node) {
            Some(mine) => self.asked.keys().filter_map(stamp).any(|other| other < mine),
            None => self.asked.values().any(|&other| other < asked_at),
        }
    }

    fn on_grant(&mut self, node: NodeId, fence: Fence) {
        self.trace(|| format!("{node} ENTERS with fence {fence}"));
        self.record(|r, at| r.enter(at, node, fence.0));
        self.report.entries += 1;
        if let Some(mine) = self.asked.remove(&node) {
            if self.overtook_someone(node, mine) {
                self.report.out_of_order += 1;
            }
        }
        if let Some(released) = self.release_pending.take() {
            self.report.sync_delays_us.push((self.now - released).as_micros() as u64);
        }
        if self.nodes[&node].engine.as_ref().and_then(Engine::coordinator) == Some(node) {
            self.report.coordinator_entries += 1;
        }
        let allowed = self.cfg.checked_capacity.unwrap_or(self.cfg.capacity);
        if self.holders.len() >= allowed {
            let holders: Vec<String> = self.holders.keys().map(|h| h.to_string()).collect();
            self.violation(
                Invariant::Safety,
                format!("{node} entered while {} held (capacity {allowed})", holders.join(", ")),
            );
        }
        // A mutex's fences must rise with every grant. With k holders a
        // grant may land after later ones (and after their release), so the
        // sound check there is that no fence is ever granted twice.
        let max = self.fences.last().copied();
        let stale = self.cfg.capacity == 1 && max.is_some_and(|m| fence <= m);
        if stale || self.fences.contains(&fence) {
            self.violation(
                Invariant::Fence,
                format!(
                    "{node} was granted fence {fence}, not above the earlier {}",
                    max.unwrap_or_default()
                ),
            );
        }
        self.fences.insert(fence);
        self.holders.insert(node, fence);
        let n = self.nodes.get_mut(&node).expect("known node");
        if n.client != ClientState::Waiting {
            let state = n.client;
            self.violation(
                Invariant::Safety,
                format!("{node} was granted while its client was {state:?}"),
            );
            return;
        }
        n.client = ClientState::Holding;
        let incarnation = n.incarnation;
        let hold = self.uniform(self.cfg.hold);
        self.push(self.now + hold, Event::Release { node, incarnation });
    }

    /// Whether a partition stops what `from` sends `to` now.
    fn severed(&self, from: NodeId, to: NodeId) -> bool {
        self.cut.as_ref().is_some_and(|(_, side, way)| {
            let (from_side, to_side) = (side.contains(&from), side.contains(&to));
            match way {
                Way::Both => from_side != to_side,
                Way::Inbound => !from_side && to_side,
                Way::Outbound => from_side && !to_side,
            }
        })
    }

    fn live(&self, node: NodeId, incarnation: u32) -> bool {
        let n = &self.nodes[&node];
        n.engine.is_some() && n.incarnation == incarnation
    }

    fn engine(&mut self, node: NodeId) -> &mut Engine {
        self.nodes.get_mut(&node).and_then(|n| n.engine.as_mut()).expect("live node")
    }

    /// The node an event is for, when that node could be paused.
    fn target(event: &Event) -> Option<NodeId> {
        match event {
            Event::Deliver { to, .. } | Event::Hello { to, .. } => Some(*to),
            Event::Welcome { from, .. } => Some(*from),
            Event::LinkDown { observer, .. } => Some(*observer),
            Event::Wake { node, .. }
            | Event::Request { node, .. }
            | Event::Release { node, .. } => Some(*node),
            _ => None,
        }
    }

    fn handle(&mut self, event: Event) {
        if let Some(node) = Self::target(&event) {
            if self.paused.contains(&node) {
                // Frozen: it happens when the node carries on, in order.
                if !matches!(event, Event::Wake { .. }) {
                    self.deferred.entry(node).or_default().push_back(event);
                }
                return;
            }
        }
        match event {
            Event::Deliver { from, to, conn, seq, ack, bytes, carries } => {
                if carries == Carries::Mutex {
                    self.mutex_in_flight -= 1;
                }
                self.deliver(from, to, conn, seq, ack, bytes);
            }
            Event::Hello { from, to, conn, boot } => self.hello(from, to, conn, boot),
            Event::Welcome { from, to, conn, boot, delivered } => {
                self.welcome(from, to, conn, boot, delivered)
            }
            Event::Reset { node } => {
                if self.nodes[&node].engine.is_none() {
                    return;
                }
                self.last_fault = self.now;
                self.report.resets += 1;
                self.trace(|| format!("RESET: {node}'s connections break"));
                let text = format!("{node}'s connections break");
                self.record(|r, at| r.mark(at, Some(node), MarkKind::Reset, text));
                for peer in self.peers(node) {
                    for (a, b) in [(node, peer), (peer, node)] {
                        if self.nodes[&a].engine.is_some() {
                            self.dial(a, b);
                        } else {
                            self.net.close(a, b);
                        }
                    }
                }
            }
            Event::LinkDown { observer, peer, incarnation, peer_incarnation } => {
                if !self.live(observer, incarnation)
                    || self.nodes[&peer].incarnation != peer_incarnation
                {
                    return; // the peer is back already, and was dialled again
                }
                let now = self.now;
                self.trace(|| format!("{observer}: link to {peer} closed"));
                self.net.close(observer, peer);
                self.engine(observer).handle_link_down(now, peer);
                self.after_input(observer);
            }
            Event::Wake { node, incarnation } => {
                if !self.live(node, incarnation) || self.nodes[&node].wake_at != Some(self.now) {
                    return;
                }
                let now = self.now;
                self.nodes.get_mut(&node).expect("known").wake_at = None;
                self.engine(node).handle_timeout(now);
                self.after_input(node);
            }
            Event::Request { node, incarnation } => {
                if !self.live(node, incarnation) {
                    return;
                }
                let now = self.now;
                self.nodes.get_mut(&node).expect("known").client = ClientState::Waiting;
                self.asked.insert(node, now);
                self.trace(|| format!("{node} requests"));
                self.engine(node).request(now);
                self.after_input(node);
            }
            Event::Release { node, incarnation } => {
                if !self.live(node, incarnation) {
                    return;
                }
                let now = self.now;
                self.holders.remove(&node);
                if !self.asked.is_empty() {
                    self.release_pending = Some(now);
                }
                self.report.workload_us =
                    now.saturating_sub(self.workload_start).as_micros() as u64;
                self.trace(|| format!("{node} releases"));
                self.record(|r, at| r.exit(at, node));
                self.engine(node).release(now);
                self.after_input(node);
                self.after_release(node);
            }
            Event::DrawFaults => self.schedule_faults(),
            Event::NextSequential => self.next_sequential(),
            Event::NextBurst => self.next_burst(),
            Event::Crash { node, silent } => self.crash(node, silent),
            Event::Partition { id, side, way } => {
                if self.cut.is_some() {
                    return; // one partition at a time
                }
                self.last_fault = self.now;
                self.report.partitions += 1;
                if way != Way::Both {
                    self.report.one_way_partitions += 1;
                }
                let names: Vec<String> = side.iter().map(|n| n.to_string()).collect();
                let names = names.join(", ");
                let what = match way {
                    Way::Both => format!("{{{names}}} cut off from the rest"),
                    Way::Inbound => format!("{{{names}}} hear nothing from the rest"),
                    Way::Outbound => format!("the rest hear nothing from {{{names}}}"),
                };
                self.trace(|| format!("PARTITION: {what}"));
                let text = format!("partition: {what}");
                self.record(|r, at| r.begin(at, None, MarkKind::Partition, text));
                self.cut = Some((id, side, way));
            }
            Event::Pause { node } => {
                if self.nodes[&node].engine.is_none() || self.paused.contains(&node) {
                    return;
                }
                self.last_fault = self.now;
                self.report.pauses += 1;
                self.trace(|| format!("{node} PAUSES"));
                let text = format!("{node} paused");
                self.record(|r, at| r.begin(at, Some(node), MarkKind::Pause, text));
                self.paused.insert(node);
            }
            Event::Resume { node } => {
                if !self.paused.remove(&node) {
                    return;
                }
                self.last_fault = self.now;
                self.trace(|| format!("{node} RESUMES"));
                self.record(|r, at| r.end(at, Some(node), MarkKind::Pause));
                // What reached it meanwhile, in order, before anything else.
                for event in self.deferred.remove(&node).unwrap_or_default() {
                    self.handle(event);
                }
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.wake_at = None; // its timers are overdue: wake it now
                }
                self.after_input(node);
            }
            Event::DelaySpike { id, node, extra } => {
                if self.spikes.contains_key(&node) {
                    return; // one spike at a time per node
                }
                self.last_fault = self.now;
                self.report.delays += 1;
                let ms = extra.as_secs_f64() * 1000.0;
                self.trace(|| format!("DELAY: {node}'s messages take +{ms:.1} ms"));
                let text = format!("{node}'s messages take +{ms:.1} ms");
                self.record(|r, at| r.begin(at, Some(node), MarkKind::Degraded, text));
                self.spikes.insert(node, (id, extra));
            }
            Event::DelayOver { id, node } => {
                if self.spikes.get(&node).is_some_and(|&(current, _)| current == id) {
                    self.spikes.remove(&node);
                    self.last_fault = self.now;
                    self.trace(|| format!("DELAY over: {node}'s messages back to normal"));
                    self.record(|r, at| r.end(at, Some(node), MarkKind::Degraded));
                }
            }
            Event::Loss { id, node, share } => {
                if self.losses.contains_key(&node) {
                    return; // one loss window at a time per node
                }
                self.last_fault = self.now;
                self.report.drops += 1;
                let percent = share.0 * 100.0;
                self.trace(|| format!("DROP: {node} loses {percent:.0}% of its messages"));
                let text = format!("{node} loses {percent:.0}% of its messages");
                self.record(|r, at| r.begin(at, Some(node), MarkKind::Degraded, text));
                self.losses.insert(node, (id, share));
            }
            Event::LossOver { id, node } => {
                if self.losses.get(&node).is_some_and(|&(current, _)| current == id) {
                    self.losses.remove(&node);
                    self.last_fault = self.now;
                    self.trace(|| format!("DROP over: {node} loses nothing more"));
                    self.record(|r, at| r.end(at, Some(node), MarkKind::Degraded));
                }
            }
            Event::Heal { id } => {
                if self.cut.as_ref().is_some_and(|(current, _, _)| *current == id) {
                    self.cut = None;
                    self.last_fault = self.now;
                    self.trace(|| "HEAL: the partition is over".to_string());
                    self.record(|r, at| r.end(at, None, MarkKind::Partition));
                }
            }
            Event::Restart { node } => {
                if self.nodes[&node].engine.is_some() {
                    return;
                }
                self.last_fault = self.now;
                self.trace(|| format!("{node} RESTARTS"));
                let text = format!("{node} restarts");
                self.record(|r, at| r.mark(at, Some(node), MarkKind::Restart, text));
                let n = self.nodes.get_mut(&node).expect("known");
                n.incarnation += 1;
                let incarnation = n.incarnation;
                let resume = n.client != ClientState::Done && self.cfg.load == Load::Concurrent;
                n.client = if resume { ClientState::Thinking } else { ClientState::Done };
                self.boot(node);
                // Its dials reach the peers, which dial it back.
                self.dial_peers(node);
                if resume {
                    let at = self.now + self.uniform(self.cfg.think);
                    self.push(at, Event::Request { node, incarnation });
                }
            }
        }
    }

    /// Frame `seq` on connection `conn` reaches `to`, through its session.
    fn deliver(&mut self, from: NodeId, to: NodeId, conn: u64, seq: u64, ack: u64, bytes: Vec<u8>) {
        let Some(&c) = self.net.get(from, to).filter(|c| c.id == conn && c.accepted) else {
            return; // lost with its connection, or refused with its Hello
        };
        if !self.live(to, c.to_boot as u32) {
            return; // written to a process that is gone
        }
        let session = self.session(to, from);
        session.acked(c.from_boot, ack);
        match session.receive(c.from_boot, seq) {
            Received::Deliver => {}
            Received::Duplicate | Received::Stale => return,
            Received::Gap { lost } => {
                self.report.gaps += 1;
                self.trace(|| format!("{to} missed {lost} frames from {from}: declared failed"));
                let now = self.now;
                self.engine(to).handle_link_down(now, from);
            }
        }
        // A partition drops what arrives above the session, as a node's
        // `coterie fault partition` does.
        if self.severed(from, to) {
            return self.after_input(to);
        }
        self.record(|r, at| r.delivered(at, from, to, seq));
        let now = self.now;
        let envelope: Envelope = match wire::decode(&bytes) {
            Ok(e) => e,
            Err(e) => return self.violation(Invariant::Wire, format!("{from} -> {to}: {e}")),
        };
        if let Err(e) = self.engine(to).handle_message(now, from, envelope) {
            return self.violation(Invariant::Wire, format!("{to} refused a message: {e}"));
        }
        self.after_input(to);
    }

    /// `from`'s dial (incarnation `boot`) reaches `to`.
    fn hello(&mut self, from: NodeId, to: NodeId, conn: u64, boot: u64) {
        if !self.net.current(from, to, conn) || !self.live(from, boot as u32) {
            return;
        }
        if self.nodes[&to].engine.is_none() {
            // Refused, or no answer: the dialler waits to be poked.
            self.net.close(from, to);
            return;
        }
        let my_boot = self.boot_id(to);
        let mut delay = self.uniform(self.cfg.delay);
        if let Some(&(_, extra)) = self.spikes.get(&to) {
            delay += extra;
        }
        let expects = self.net.get(from, to).and_then(|c| c.expects);
        if expects.is_some_and(|b| b != my_boot) {
            // Meant for a previous incarnation of this node: answered (so
            // the dialler learns) and closed, its frames unread.
            let welcome = Event::Welcome { from, to, conn, boot: my_boot, delivered: 0 };
            return self.push(self.now + delay, welcome);
        }
        self.net.accepted(from, to, conn, my_boot);
        let restarted = self.session(to, from).bind(boot);
        let delivered = self.session(to, from).ack();
        self.push(self.now + delay, Event::Welcome { from, to, conn, boot: my_boot, delivered });
        // The peer is up: a dialler of ours that gave up on it, or that is
        // connected to its previous incarnation, dials again at once.
        if restarted || self.net.writable(to, from).is_none() {
            self.dial(to, from);
        }
    }

    /// `to` (incarnation `boot`) answered `from`'s dial, having delivered
    /// `delivered` of `from`'s frames (those written behind the Hello went
    /// again already; the duplicates among them are dropped).
    fn welcome(&mut self, from: NodeId, to: NodeId, conn: u64, boot: u64, delivered: u64) {
        if !self.net.welcomed(from, to, conn) {
            return;
        }
        if self.session(from, to).bind(boot) {
            // A new incarnation: what was kept for the old one is dropped,
            // and the connection is made again for the new session.
            return self.dial(from, to);
        }
        self.session(from, to).acked(boot, delivered);
    }

    fn after_release(&mut self, node: NodeId) {
        let n = self.nodes.get_mut(&node).expect("known");
        match self.cfg.load {
            Load::Concurrent => {
                n.remaining = n.remaining.saturating_sub(1);
                if n.remaining == 0 {
                    n.client = ClientState::Done;
                } else {
                    n.client = ClientState::Thinking;
                    let incarnation = n.incarnation;
                    let at = self.now + self.uniform(self.cfg.think);
                    self.push(at, Event::Request { node, incarnation });
                }
            }
            Load::Sequential => {
                n.client = ClientState::Done;
                // Leave time for every message the entry caused to land.
                let quiet = self.cfg.delay.1 * 4 + STEP;
                self.push(self.now + quiet, Event::NextSequential);
            }
            Load::Burst => {
                n.client = ClientState::Done;
                self.after_burst_entry();
            }
        }
    }

    /// Burst load: once every live node's entry of this burst is done (or
    /// its node died), the next burst comes after a quiet gap.
    fn after_burst_entry(&mut self) {
        if self.burst_over() && self.bursts_left > 0 && !self.burst_due {
            self.burst_due = true;
            let quiet = self.cfg.delay.1 * 4 + STEP;
            self.push(self.now + quiet, Event::NextBurst);
        }
    }

    /// Whether every live node's entry of the burst under way is done.
    fn burst_over(&self) -> bool {
        self.nodes.values().all(|n| n.engine.is_none() || n.client == ClientState::Done)
    }

    fn next_burst(&mut self) {
        if self.mutex_in_flight > 0 {
            // The last burst's messages are still moving: wait for them.
            let wait = self.cfg.delay.1 + STEP;
            self.push(self.now + wait, Event::NextBurst);
            return;
        }
        self.burst_due = false;
        let Some(left) = self.bursts_left.checked_sub(1) else { return };
        self.bursts_left = left;
        self.trace(|| "BURST: every live node asks".to_string());
        let live: Vec<(NodeId, u32)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.engine.is_some())
            .map(|(&id, n)| (id, n.incarnation))
            .collect();
        for (node, incarnation) in live {
            self.nodes.get_mut(&node).expect("known").client = ClientState::Thinking;
            self.push(self.now, Event::Request { node, incarnation });
        }
    }

    fn next_sequential(&mut self) {
        if self.mutex_in_flight > 0 && self.sequential.is_some() {
            // The entry's messages are still moving (a token finishing its
            // lap, say): count them all before the next request.
            let wait = self.cfg.delay.1 + STEP;
            self.push(self.now + wait, Event::NextSequential);
            return;
        }
        if let Some((node, before, local)) = self.sequential.take() {
            let cost = self.mutex_sent_total - before;
            self.trace(|| format!("{node}'s entry cost {cost} mutex messages"));
            self.report.per_entry.push((cost, local));
        }
        if self.sequential_left == 0 {
            return;
        }
        self.sequential_left -= 1;
        let live: Vec<NodeId> =
            self.nodes.iter().filter(|(_, n)| n.engine.is_some()).map(|(&id, _)| id).collect();
        let node = live[self.chooser.index(live.len())];
        let local = self.nodes[&node].engine.as_ref().and_then(Engine::coordinator) == Some(node);
        self.sequential = Some((node, self.mutex_sent_total, local));
        let incarnation = self.nodes[&node].incarnation;
        self.handle(Event::Request { node, incarnation });
    }

    fn crash(&mut self, node: NodeId, silent: bool) {
        let live = self.nodes.values().filter(|n| n.engine.is_some()).count();
        if self.nodes[&node].engine.is_none() || live <= 1 {
            return; // already down, or the last one standing
        }
        self.last_fault = self.now;
        self.report.crashes += 1;
        self.paused.remove(&node);
        self.deferred.remove(&node);
        self.trace(|| format!("{node} CRASHES{}", if silent { " (silently)" } else { "" }));
        let text = format!("{node} crashes{}", if silent { " (silently)" } else { "" });
        self.record(|r, at| {
            r.exit(at, node);
            r.end(at, Some(node), MarkKind::Pause);
            r.mark(at, Some(node), MarkKind::Crash, text)
        });
        let n = self.nodes.get_mut(&node).expect("known");
        n.engine = None;
        n.wake_at = None;
        self.holders.remove(&node);
        self.asked.remove(&node);
        if self.sequential.is_some_and(|(requester, _, _)| requester == node) {
            // The entry under way died with its node: on to the next one,
            // without charging this one's messages to anybody.
            self.sequential = None;
            self.push(self.now, Event::NextSequential);
        }
        if self.cfg.load == Load::Burst {
            // The entry it waited for, or held, will not come: the burst
            // may be over without it.
            self.after_burst_entry();
        }
        if !silent {
            // Every peer's connection closes once what was in flight lands.
            let peers: Vec<(NodeId, u32)> = self
                .nodes
                .iter()
                .filter(|(&id, n)| id != node && n.engine.is_some())
                .map(|(&id, n)| (id, n.incarnation))
                .collect();
            let peer_incarnation = self.nodes[&node].incarnation;
            for (observer, incarnation) in peers {
                let at = self.flight(node, observer);
                self.push(
                    at,
                    Event::LinkDown { observer, peer: node, incarnation, peer_incarnation },
                );
            }
        }
    }

    /// Reports a deadlock once the run has been stuck (see
    /// [`stuck_state`](Self::stuck_state)) in one state of the algorithms
    /// for a whole failure timeout. By then every node has heard every
    /// peer's heartbeat, sent in that state, and changed nothing; the next
    /// heartbeats say the same (a heartbeat carries only the sender's
    /// state), so nothing ever changes again. This rests on the handlers
    /// acting on what a heartbeat says, never on the time alone: an
    /// algorithm that waits for time to pass arms a timer, and an armed
    /// timer means not stuck.
    fn watch_for_deadlock(&mut self) {
        let Some(state) = self.stuck_state() else {
            self.stuck = None;
            return;
        };
        match self.stuck {
            Some((since, same)) if same == state => {
                if self.now >= since + self.cfg.timing.failure_timeout {
                    self.stuck = None;
                    let waiting = self.describe(|n| n.client == ClientState::Waiting);
                    self.violation(
                        Invariant::Deadlock,
                        format!("{waiting} wait, and nothing but heartbeats is left to happen"),
                    );
                }
            }
            _ => self.stuck = Some((self.now, state)),
        }
    }

    /// A hash of the algorithms' state if the run is stuck but for
    /// heartbeats: a client waits; every node is up, unpaused and idle
    /// ([`Engine::idle`]); no partition, spike or loss is in force; and
    /// nothing is queued but heartbeats and wake-ups (so no fault, no
    /// client step and no other message is to come).
    fn stuck_state(&self) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        let waiting = self.nodes.values().any(|n| n.client == ClientState::Waiting);
        if !waiting
            || self.mutex_in_flight > 0
            || self.cut.is_some()
            || !self.paused.is_empty()
            || !self.spikes.is_empty()
            || !self.losses.is_empty()
            || !self.nodes.values().all(|n| n.engine.as_ref().is_some_and(Engine::idle))
        {
            return None;
        }
        let only_beats = self.queue.iter().all(|Reverse((_, _, idx))| {
            matches!(
                self.events[*idx],
                Some(Event::Deliver { carries: Carries::Heartbeat, .. } | Event::Wake { .. })
            )
        });
        if !only_beats {
            return None;
        }
        let mut h = state_hasher();
        for (id, n) in &self.nodes {
            id.hash(&mut h);
            n.client.hash(&mut h);
            n.engine.as_ref().expect("checked above").hash_algorithms(&mut h, self.now);
        }
        Some(h.finish())
    }

    /// The live nodes `which` picks, each with its client's and engine's
    /// state and the coordinator it follows, for a violation's detail.
    fn describe(&self, which: impl Fn(&SimNode) -> bool) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| which(n))
            .filter_map(|(id, n)| {
                let e = n.engine.as_ref()?;
                let coordinator = e.coordinator().map_or("none".into(), |c| c.to_string());
                Some(format!(
                    "{id} ({:?}, engine {}, coordinator {coordinator})",
                    n.client,
                    e.cs_state()
                ))
            })
            .collect();
        nodes.join(", ")
    }

    /// Whether the workload has finished on every node that is up.
    fn workload_done(&self) -> bool {
        match self.cfg.load {
            Load::Concurrent => {
                self.nodes.values().all(|n| n.engine.is_none() || n.client == ClientState::Done)
            }
            Load::Sequential => self.sequential_left == 0 && self.sequential.is_none(),
            Load::Burst => self.bursts_left == 0 && self.burst_over(),
        }
    }

    /// Runs to the end and returns what was seen.
    pub fn run(mut self) -> RunReport {
        while self.step() {}
        self.finish()
    }

    /// Carries out the next event; `false` once the run is over: nothing
    /// left to happen, the time limit reached, a violation seen (unless
    /// tracing or recording, when the run goes on to show what follows),
    /// or the workload done and the cluster quiet long enough to judge
    /// agreement.
    pub fn step(&mut self) -> bool {
        let Some((at, idx)) = self.next_event() else { return false };
        if at > self.cfg.max_time {
            self.now = self.cfg.max_time;
            return false;
        }
        self.now = at;
        let event = self.events[idx].take().expect("each event runs once");
        self.handle(event);
        self.watch_for_deadlock();
        if !self.report.violations.is_empty() && !self.cfg.trace && !self.cfg.record {
            return false; // the seed will be replayed with a trace
        }
        // Once the workload is done and faults are over, give the cluster
        // time to settle before judging agreement.
        let settle = self.cfg.timing.failure_timeout * 6;
        let quiet_since = self.last_fault.max(self.workload_start);
        if self.workload_done() && self.now >= quiet_since + settle {
            return false;
        }
        // Keep the payload table from growing without bound.
        if self.events.len() > 4096 && self.events.len() > self.queue.len() * 4 {
            self.compact();
        }
        true
    }

    /// Judges the end state and returns what the run saw.
    pub fn finish(mut self) -> RunReport {
        self.final_checks();
        self.report.end_us = self.now.as_micros() as u64;
        let end = self.report.end_us;
        self.report.diagram = self.recorder.take().map(|r| r.finish(end));
        self.report
    }

    /// The chooser the run draws from.
    pub fn chooser(&self) -> &C {
        &self.chooser
    }

    /// The same, to change.
    pub fn chooser_mut(&mut self) -> &mut C {
        &mut self.chooser
    }

    /// Whether the next event is still part of start-up: due before the
    /// workload begins.
    pub fn in_start_up(&self) -> bool {
        self.queue.peek().is_some_and(|Reverse((at, _, _))| *at < self.workload_start)
    }

    /// Whether the run has seen a broken invariant.
    pub fn violated(&self) -> bool {
        !self.report.violations.is_empty()
    }

    /// A hash of the run's state, for the checker: two runs with the same
    /// fingerprint go on alike, whatever led to it. It covers each node
    /// (its engine's state, incarnation, client, sessions and stable
    /// storage), the connections, every queued event with its time
    /// relative to now (as a set: the chooser orders ties), the holders
    /// and the highest fence granted, the faults in force and the
    /// workload left. Left out, since they decide nothing that follows:
    /// the report's counters and measurements, when each waiting client
    /// asked (used only to count out-of-order grants), the recorder, and
    /// since when the run has been stuck (a state is stuck or not by
    /// itself, and a stuck one is reported as a deadlock by every run that
    /// reaches it; only the moment differs).
    /// Times inside the engines are absolute, so states at different
    /// moments never merge; interleavings that meet at the same moment do.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = state_hasher();
        let now = self.now;
        for (id, n) in &self.nodes {
            id.hash(&mut h);
            n.incarnation.hash(&mut h);
            n.client.hash(&mut h);
            n.remaining.hash(&mut h);
            n.wake_at.map(|t| t.saturating_sub(now)).hash(&mut h);
            match &n.engine {
                Some(engine) => {
                    true.hash(&mut h);
                    engine.hash_state(&mut h, now);
                }
                None => false.hash(&mut h),
            }
            n.sessions.hash(&mut h);
            n.stable.hash(&mut h);
        }
        self.net.hash_at(&mut h, now);
        // The queue as a set of (when, what): the order in which events
        // due at the same moment were queued decides nothing when the
        // chooser orders ties, and with a random chooser nobody hashes.
        let mut queued: Vec<(Time, u64)> = self
            .queue
            .iter()
            .map(|Reverse((at, _, idx))| {
                let mut e = state_hasher();
                self.events[*idx].hash(&mut e);
                (at.saturating_sub(now), e.finish())
            })
            .collect();
        queued.sort_unstable();
        queued.hash(&mut h);
        self.holders.hash(&mut h);
        self.fences.last().hash(&mut h);
        self.cut.hash(&mut h);
        self.paused.hash(&mut h);
        self.deferred.hash(&mut h);
        self.spikes.hash(&mut h);
        self.losses.hash(&mut h);
        self.sequential.map(|(node, _, local)| (node, local)).hash(&mut h);
        self.sequential_left.hash(&mut h);
        self.bursts_left.hash(&mut h);
        self.burst_due.hash(&mut h);
        // How long the cluster has been quiet decides when the run ends,
        // once the workload is done: up to the settling time.
        let settle = self.cfg.timing.failure_timeout * 6;
        let quiet_since = self.last_fault.max(self.workload_start);
        now.saturating_sub(quiet_since).min(settle).hash(&mut h);
        h.finish()
    }

    /// The next event: the earliest due, and among several due at the
    /// same instant the first queued, unless the chooser orders ties.
    fn next_event(&mut self) -> Option<(Time, usize)> {
        let Reverse((at, _, idx)) = self.queue.pop()?;
        if !self.chooser.orders_ties() {
            return Some((at, idx));
        }
        let mut tied = vec![idx];
        while let Some(&Reverse((next, _, other))) = self.queue.peek() {
            if next != at {
                break;
            }
            self.queue.pop();
            tied.push(other);
        }
        // Events at different nodes commute (each touches its own node's
        // state, and what it sends lands a tick later at the earliest), so
        // only the order among one node's events is chosen: the node with
        // the lowest id goes first (a fault, at no node, before any).
        let node_of = |idx: &usize| self.events[*idx].as_ref().and_then(Self::target);
        let first = tied.iter().map(node_of).min().flatten();
        let mine: Vec<usize> = (0..tied.len()).filter(|&i| node_of(&tied[i]) == first).collect();
        let pick = mine[self.chooser.index(mine.len())];
        let chosen = tied.remove(pick);
        for other in tied {
            // Back in the queue, behind nothing: their order among
            // themselves is chosen again at the next pop.
            self.seq += 1;
            self.queue.push(Reverse((at, self.seq, other)));
        }
        Some((at, chosen))
    }

    fn compact(&mut self) {
        let mut events = Vec::with_capacity(self.queue.len());
        let mut queue = BinaryHeap::with_capacity(self.queue.len());
        for Reverse((at, seq, idx)) in self.queue.drain() {
            events.push(self.events[idx].take());
            queue.push(Reverse((at, seq, events.len() - 1)));
        }
        self.events = events;
        self.queue = queue;
    }

    fn final_checks(&mut self) {
        if !self.report.violations.is_empty() {
            return;
        }
        if !self.workload_done() {
            let stuck = self.describe(|n| n.client != ClientState::Done);
            self.violation(Invariant::Liveness, format!("requests never served by {stuck}"));
            return;
        }
        let live: Vec<(NodeId, Option<NodeId>, Epoch)> = self
            .nodes
            .iter()
            .filter_map(|(&id, n)| n.engine.as_ref().map(|e| (id, e.coordinator(), e.epoch())))
            .collect();
        let highest = live.iter().map(|(id, _, _)| *id).max();
        let epoch = live.first().map(|(_, _, e)| *e);
        for &(id, coordinator, e) in &live {
            if coordinator != highest || Some(e) != epoch {
                let views: Vec<String> = live
                    .iter()
                    .map(|(id, c, e)| {
                        format!("{id}:{}@{e}", c.map_or("none".into(), |c| c.to_string()))
                    })
                    .collect();
                self.violation(
                    Invariant::Agreement,
                    format!(
                        "{id} disagrees; expected {} everywhere, views {}",
                        highest.map_or("none".into(), |h| h.to_string()),
                        views.join(" ")
                    ),
                );
                return;
            }
        }
    }
}

/// Runs one seed to completion.
pub fn run(cfg: SimConfig) -> Result<RunReport, registry::UnknownAlgorithm> {
    Ok(Simulation::new(cfg)?.run())
}
