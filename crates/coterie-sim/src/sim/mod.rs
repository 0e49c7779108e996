//! One simulated run: the event queue, the nodes and their engines, and
//! the loop that hands each event to its node.
//!
//! The rest of a run lives beside it: [`config`] (what a run is asked to
//! do), `links` (connections and sessions between the nodes), `workload`
//! (the clients), `faults` (the fault schedule and each fault),
//! `invariants` (what every step and every run's end is judged by),
//! `fingerprint` (a state's hash, for the checker) and [`report`] (what a
//! run saw).

use crate::chooser::{Chooser, Random};
use crate::invariant::Invariant;
use crate::network::Network;
use crate::record::Recorder;
use coterie_core::engine::Output;
use coterie_core::registry;
use coterie_core::session::{Received, Sent, Session};
use coterie_core::wire::{self, Envelope};
use coterie_core::{AlgoConfig, Engine, Epoch, Fence, NodeId, Time, Way};
use coterie_diagram::MarkKind;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::Duration;

pub mod config;
mod faults;
mod fingerprint;
mod invariants;
mod links;
pub mod report;
mod workload;

pub use config::{FaultDraw, Load, SimConfig};
pub use report::{Injected, RunReport, Violation};

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
    /// Failure-detector traffic (a heartbeat, a suspicion announced): a
    /// fixed delay when checking, and no sign of progress.
    Heartbeat,
    /// An election-layer message.
    Election,
    /// A mutex-layer message (counted while in flight).
    Mutex,
}

impl Carries {
    fn of(envelope: &Envelope) -> Carries {
        match envelope {
            Envelope::Heartbeat(_) | Envelope::Suspect(_) => Carries::Heartbeat,
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
                *self.report.sent_by_kind.entry(kind).or_default() += 1;
                let recorded = if self.recorder.is_some() {
                    let text = self.nodes[&node].engine.as_ref().map(|e| e.describe(&envelope));
                    let text = text.unwrap_or_default();
                    self.record(|r, at| r.sent(at, node, to, kind, text))
                } else {
                    None
                };
                if self.now >= self.workload_start {
                    *self.report.messages_by_kind.entry(kind).or_default() += 1;
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
                    self.report.injected.lost += 1;
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
                    self.report.injected.overflows += 1;
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
            Event::Reset { node } => self.reset(node),
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
            Event::Partition { id, side, way } => self.partition(id, side, way),
            Event::Pause { node } => self.pause(node),
            Event::Resume { node } => self.resume(node),
            Event::DelaySpike { id, node, extra } => self.delay_spike(id, node, extra),
            Event::DelayOver { id, node } => self.delay_over(id, node),
            Event::Loss { id, node, share } => self.loss(id, node, share),
            Event::LossOver { id, node } => self.loss_over(id, node),
            Event::Heal { id } => self.heal(id),
            Event::Restart { node } => self.restart(node),
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
        // Keep the payload table from growing without bound, and small:
        // a checker copies a run, table and all, at every fork.
        if self.events.len() > 64 && self.events.len() > self.queue.len() * 4 {
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
}

/// Runs one seed to completion.
pub fn run(cfg: SimConfig) -> Result<RunReport, registry::UnknownAlgorithm> {
    Ok(Simulation::new(cfg)?.run())
}
