//! Exhaustive checking: every schedule of a small configuration, explored
//! depth first with the simulator's own code.
//!
//! Each run is a [`Simulation`] whose choices come from an [`Enumerate`]
//! chooser: time is discrete (whole ticks), a message's delay is one of a
//! few ticks, a wider range (when a crash comes, how long a node stays
//! down) is tried at its ends and middle, and one node's events due at
//! the same tick happen in every order (events at different nodes
//! commute, and run in node order). Start-up (dials, joins, the first
//! election) runs once, every choice its first answer; the exploring
//! begins with the workload, and the fault schedule is drawn there
//! ([`FaultDraw::AtWorkload`]): every victim, every moment of the first
//! `fault_window_ticks` and every length at their ends and middle, crashes
//! silent and not. After every step of a run's fresh part the
//! state is hashed ([`Simulation::fingerprint`]); a state seen before is
//! not explored again (its continuations were, from its first visit:
//! depth-first order finishes every choice below a state before changing
//! one above it), and the run is cut there. A run that ends is judged by
//! the simulator's own invariants: safety, fences, deadlock, liveness and
//! agreement. Each broken invariant judged at a state (all but liveness
//! and agreement) is then searched for again, no deeper than the schedule
//! found, to prove its counterexample the shortest there is.
//!
//! A new path resumes from a copy of the run taken on the way down, before
//! the choice it changes (copies are taken every few steps), and replays
//! at most those few steps. Bounds: `max_depth` steps per run, and
//! heartbeats travel in exactly one tick (their delays would multiply the
//! states at every beat and change only the detectors' last-heard times).

use crate::chooser::{Choice, Enumerate};
use crate::invariant::Invariant;
use crate::sim::{FaultDraw, Load, SimConfig, Simulation};
use coterie_core::registry::{ElectionInfo, MutexInfo};
use coterie_core::{LeaseTiming, Partitions, Timing};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

/// Fresh steps between two snapshots of a run.
const SNAPSHOT_EVERY: usize = 8;

/// What to check. A report carries it, as what was checked: the bounds
/// and timings in ticks are left out of it (the report says whether a
/// bound was hit).
#[derive(Clone, Debug, Serialize)]
pub struct CheckConfig {
    /// Mutual-exclusion algorithm.
    pub mutex: &'static MutexInfo,
    /// Election algorithm.
    pub election: &'static ElectionInfo,
    /// Cluster size.
    pub nodes: u32,
    /// Critical-section entries each node asks for.
    pub requests: u32,
    /// Locks the requests spread over (1: the default lock alone).
    pub names: u32,
    /// Locks each request takes at once, in name order.
    pub per_request: u32,
    /// Clients at each node, each its own session.
    pub sessions: u32,
    /// How many of the clients read (spread evenly over the nodes); the
    /// others write.
    pub readers: u32,
    /// Holders allowed at once (a semaphore's permits).
    pub count: usize,
    /// Crash-and-restart faults per run.
    pub crashes: u32,
    /// Partitions per run.
    pub partitions: u32,
    /// One-way partitions per run.
    pub one_way_partitions: u32,
    /// Who decides that a peer is down.
    #[serde(skip)]
    pub partition_mode: Partitions,
    /// Steps per run before the run is cut (a bound: the report says
    /// whether it was hit).
    #[serde(skip)]
    pub max_depth: usize,
    /// A message takes one to this many ticks.
    #[serde(skip)]
    pub delay_ticks: u32,
    /// Stop after this many distinct states (a bound, like `max_depth`).
    #[serde(skip)]
    pub max_states: u64,
    /// A holder stays in the critical section one to this many ticks
    /// (tried at the ends and the middle). Past the failure timeout (16),
    /// a holder cut off by a partition is still inside when the others
    /// give up on it.
    #[serde(skip)]
    pub hold_ticks: u32,
    /// A client thinks zero to this many ticks before each request (tried
    /// at the ends and the middle): with more than one request per node,
    /// a node may ask again after the others have gone quiet, which is
    /// when an algorithm that keeps permissions re-enters on them.
    #[serde(skip)]
    pub think_ticks: u32,
    /// Each fault begins zero to this many ticks into the workload (tried
    /// at the ends and the middle): at the requests, while they are
    /// answered, around the first grant.
    #[serde(skip)]
    pub fault_window_ticks: u32,
}

impl CheckConfig {
    /// One request per node on `nodes` nodes, no faults.
    pub fn new(
        mutex: &'static MutexInfo,
        election: &'static ElectionInfo,
        nodes: u32,
    ) -> CheckConfig {
        CheckConfig {
            mutex,
            election,
            nodes,
            requests: 1,
            names: 1,
            per_request: 1,
            sessions: 1,
            readers: 0,
            count: 1,
            crashes: 0,
            partitions: 0,
            one_way_partitions: 0,
            partition_mode: Partitions::Majority,
            max_depth: 5_000,
            delay_ticks: 2,
            max_states: 20_000_000,
            hold_ticks: 1,
            think_ticks: 0,
            fault_window_ticks: 4,
        }
    }

    /// The tick every duration is a whole number of.
    pub const TICK: Duration = Duration::from_millis(1);

    /// The simulator configuration each run uses: delays of one to
    /// `delay_ticks` ticks, heartbeats every four ticks and one tick in flight, a
    /// failure timeout of sixteen ticks (so that no timeout fires on a
    /// live, connected peer), one to `hold_ticks` ticks inside the
    /// critical section and zero to `think_ticks` thinking before each
    /// request.
    pub fn sim_config(&self) -> SimConfig {
        let tick = Self::TICK;
        SimConfig {
            nodes: self.nodes,
            requests: self.requests,
            names: self.names,
            per_request: self.per_request,
            sessions: self.sessions,
            readers: self.readers,
            capacity: self.count,
            crashes: self.crashes,
            partitions: self.partitions,
            one_way_partitions: self.one_way_partitions,
            load: Load::Concurrent,
            timing: Timing {
                heartbeat: tick * 4,
                failure_timeout: tick * 16,
                lease: LeaseTiming {
                    partitions: self.partition_mode,
                    lease: tick * 16,
                    ..LeaseTiming::default()
                },
                ..Timing::default()
            },
            delay: (tick, tick * self.delay_ticks.max(1)),
            heartbeat_delay: Some(tick),
            hold: (tick, tick * self.hold_ticks.max(1)),
            think: (Duration::ZERO, tick * self.think_ticks),
            delay_spike: (tick, tick),
            max_time: Duration::from_secs(2),
            fault_draw: FaultDraw::AtWorkload,
            fault_window: Some(tick * self.fault_window_ticks),
            ..SimConfig::new(self.mutex, self.election)
        }
    }
}

/// A broken invariant and a schedule that reaches it.
#[derive(Clone, Debug, Serialize)]
pub struct Counterexample {
    /// Which invariant.
    pub invariant: Invariant,
    /// What was seen.
    pub detail: String,
    /// The run's trace up to the violation (as `sim --trace` prints it).
    pub schedule: Vec<String>,
    /// Steps the run took.
    pub steps: usize,
    /// Whether no schedule breaks the invariant in fewer steps: proven by
    /// a second pass for what is judged at a state (safety, fences, the
    /// wire, deadlock); what is judged at a run's end (liveness,
    /// agreement) is the shortest found.
    pub proven_shortest: bool,
    /// The choices that make it, for a replay.
    #[serde(skip)]
    pub path: Vec<Choice>,
}

/// What a check found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// What was checked.
    #[serde(flatten)]
    pub config: CheckConfig,
    /// Steps taken in the fresh part of the runs (states reached,
    /// repeats included), over both passes when there was a second (see
    /// [`Counterexample::proven_shortest`]).
    pub states: u64,
    /// Distinct states, in the first pass.
    pub distinct_states: u64,
    /// Runs (paths through the tree of choices).
    pub runs: u64,
    /// The most steps a run took.
    pub max_depth: usize,
    /// Whether every schedule was explored: no bound (`max_depth`,
    /// `max_states`) was hit.
    pub exhausted: bool,
    /// How long the check took.
    pub seconds: f64,
    /// States reached per second.
    pub states_per_s: f64,
    /// Runs that broke an invariant.
    pub violations: u64,
    /// For each invariant broken, the shortest schedule found that breaks it.
    pub counterexamples: Vec<Counterexample>,
}

/// How far a check has got, for progress lines.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Runs so far.
    pub runs: u64,
    /// States reached so far.
    pub states: u64,
    /// Distinct states so far.
    pub distinct_states: u64,
    /// Time since the check began.
    pub elapsed: Duration,
}

/// Explores every schedule of `cfg`; `progress` is called now and then.
pub fn check(cfg: &CheckConfig, mut progress: impl FnMut(Progress)) -> CheckReport {
    let sim_cfg = cfg.sim_config();
    let start = Instant::now();
    let root = start_up(&sim_cfg);
    let mut search = Search { root, start, progress: &mut progress, states: 0, runs: 0 };
    let found = search.explore(cfg.max_depth, cfg.max_states, Seen::Once(HashSet::new()));
    // A state-invariant counterexample is the shortest found, not yet the
    // shortest there is: depth-first order may first reach a state by a
    // long way round, and cut the short way when it gets there later. A
    // second pass, as deep as the longest of them, explores again and
    // cuts a state only if it was reached before in as few steps: every
    // state is then explored from its shallowest visit, so the first
    // violating state of every schedule within the bound is met by its
    // shortest path.
    let mut shortest = found.shortest.clone();
    let bound = shortest.values().filter(|c| c.invariant.at_a_state()).map(|c| c.steps).max();
    if let Some(bound) = bound {
        let again = search.explore(bound + 1, cfg.max_states, Seen::Shallowest(HashMap::new()));
        for (invariant, c) in again.shortest {
            if invariant.at_a_state() && !again.bound_hit_by_states {
                let best = shortest.entry(invariant).or_insert_with(|| c.clone());
                if c.steps <= best.steps {
                    *best = Counterexample { proven_shortest: true, ..c };
                }
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut counterexamples: Vec<Counterexample> = shortest.into_values().collect();
    for c in &mut counterexamples {
        c.schedule = replay(&sim_cfg, &c.path);
    }
    counterexamples.sort_by_key(|c| c.steps);
    CheckReport {
        config: cfg.clone(),
        states: search.states,
        distinct_states: found.distinct,
        runs: search.runs,
        max_depth: found.max_depth,
        exhausted: !found.bound_hit,
        seconds,
        states_per_s: if seconds > 0.0 { search.states as f64 / seconds } else { 0.0 },
        violations: found.violations,
        counterexamples,
    }
}

/// The states a pass has been to.
enum Seen {
    /// Each once: a state seen before is cut.
    Once(HashSet<u64>),
    /// Each with the fewest steps it was reached in: a state is cut only
    /// if it was reached before in as few.
    Shallowest(HashMap<u64, usize>),
}

impl Seen {
    /// Records `state`, reached in `steps`; whether it is to be explored.
    fn visit(&mut self, state: u64, steps: usize) -> bool {
        match self {
            Seen::Once(seen) => seen.insert(state),
            Seen::Shallowest(seen) => match seen.get_mut(&state) {
                Some(fewest) if *fewest <= steps => false,
                Some(fewest) => {
                    *fewest = steps;
                    true
                }
                None => {
                    seen.insert(state, steps);
                    true
                }
            },
        }
    }

    fn len(&self) -> u64 {
        match self {
            Seen::Once(seen) => seen.len() as u64,
            Seen::Shallowest(seen) => seen.len() as u64,
        }
    }
}

/// What one depth-first pass found.
struct Pass {
    distinct: u64,
    max_depth: usize,
    violations: u64,
    /// A bound cut the pass short: a run's depth or the distinct states.
    bound_hit: bool,
    /// The distinct-states bound, in particular.
    bound_hit_by_states: bool,
    /// For each invariant broken, the shortest schedule the pass found.
    shortest: BTreeMap<Invariant, Counterexample>,
}

/// A depth-first search of the tree of choices below `root`.
struct Search<'a, P: FnMut(Progress)> {
    root: Simulation<Enumerate>,
    start: Instant,
    progress: &'a mut P,
    /// States reached and runs made, over every pass.
    states: u64,
    runs: u64,
}

impl<P: FnMut(Progress)> Search<'_, P> {
    /// One pass over every schedule, runs cut at `max_depth` steps and
    /// the pass at `max_states` distinct states.
    fn explore(&mut self, max_depth: usize, max_states: u64, mut seen: Seen) -> Pass {
        // The walk's position in the tree of choices.
        let mut walk = self.root.chooser().clone();
        // Copies of the run taken on the way down (every SNAPSHOT_EVERY
        // fresh steps), each with the number of choices made before it and
        // the steps taken: a new path resumes from the deepest one taken
        // before the choice it changes, instead of replaying from the start.
        let mut snapshots: Vec<(usize, usize, Simulation<Enumerate>)> =
            vec![(0, 0, self.root.clone())];
        let mut pass = Pass {
            distinct: 0,
            max_depth: 0,
            violations: 0,
            bound_hit: false,
            bound_hit_by_states: false,
            shortest: BTreeMap::new(),
        };
        let mut last_progress = Instant::now();
        loop {
            self.runs += 1;
            let prescribed = walk.prescribed();
            // The deepest snapshot taken before the first choice this path
            // changes (snapshot positions only grow along the stack).
            while snapshots.len() > 1 && snapshots.last().is_some_and(|s| s.0 >= prescribed) {
                snapshots.pop();
            }
            let (_, steps, base) = snapshots.last().expect("the root is taken before any choice");
            let mut steps = *steps;
            let mut sim = base.clone();
            sim.chooser_mut().follow(&walk);

            let mut cut = false;
            let mut fresh = 0usize;
            while sim.step() {
                steps += 1;
                if sim.chooser().position() < prescribed {
                    continue; // still replaying the path's known prefix
                }
                self.states += 1;
                if !seen.visit(sim.fingerprint(), steps) {
                    cut = true;
                    break;
                }
                if steps >= max_depth {
                    pass.bound_hit = true;
                    cut = true;
                    break;
                }
                fresh += 1;
                if fresh.is_multiple_of(SNAPSHOT_EVERY) {
                    snapshots.push((sim.chooser().position(), steps, sim.clone()));
                }
            }
            pass.max_depth = pass.max_depth.max(steps);
            walk = sim.chooser().clone();
            if !cut {
                let report = sim.finish();
                if let Some(v) = report.violations.first() {
                    pass.violations += 1;
                    if pass.shortest.get(&v.invariant).is_none_or(|c| steps < c.steps) {
                        let c = Counterexample {
                            invariant: v.invariant,
                            detail: v.detail.clone(),
                            schedule: Vec::new(),
                            steps,
                            proven_shortest: false,
                            path: walk.path().to_vec(),
                        };
                        pass.shortest.insert(v.invariant, c);
                    }
                }
            }
            if last_progress.elapsed() > Duration::from_millis(500) {
                last_progress = Instant::now();
                (self.progress)(Progress {
                    runs: self.runs,
                    states: self.states,
                    distinct_states: seen.len(),
                    elapsed: self.start.elapsed(),
                });
            }
            if seen.len() >= max_states {
                pass.bound_hit = true;
                pass.bound_hit_by_states = true;
                break;
            }
            if !walk.advance() {
                break;
            }
        }
        pass.distinct = seen.len();
        pass
    }
}

/// The run at the start of the workload: start-up (dials, joins, the
/// first election) is run once, every choice its first answer, and the
/// exploring begins from there.
fn start_up(sim_cfg: &SimConfig) -> Simulation<Enumerate> {
    let mut chooser = Enumerate::new(CheckConfig::TICK).spread(3);
    chooser.exploring(false);
    let mut sim = Simulation::with_chooser(sim_cfg.clone(), chooser);
    while sim.in_start_up() && sim.step() {}
    sim.chooser_mut().exploring(true);
    sim
}

/// The trace of the run that `path` makes.
pub fn replay(sim_cfg: &SimConfig, path: &[Choice]) -> Vec<String> {
    let cfg = SimConfig { trace: true, ..sim_cfg.clone() };
    let mut sim = start_up(&cfg);
    sim.chooser_mut().follow(&Enumerate::replay(CheckConfig::TICK, path.to_vec()));
    let mut trace = sim.run().trace;
    // Up to the first broken invariant: what follows is not needed.
    if let Some(end) = trace.iter().position(|l| l.contains("VIOLATION")) {
        trace.truncate(end + 1);
    }
    trace
}
