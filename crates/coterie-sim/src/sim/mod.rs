//! One simulated run: the nodes and their engines, and the loop that hands
//! each event to its node.
//!
//! The rest of a run lives beside it, each part a type that owns its own
//! state: the [`Agenda`](agenda) (the events to come), the `Network`
//! (connections, and the faults on messages), the `Faults` on processes
//! (paused nodes; the schedule and what each fault does), the `Workload`
//! (the clients and what they still have to do) and the `Checker` (what
//! every grant, step and run's end is judged by). Besides them:
//! [`config`] (what a run is asked to do), `links` (connections dialled
//! and frames delivered through the sessions), `fingerprint` (a state's
//! hash, for the checker) and [`report`] (what a run saw).

use crate::chooser::{Chooser, Random};
use crate::invariant::Invariant;
use crate::network::Network;
use crate::record::Recorder;
use agenda::{Agenda, Carries, Event, Share};
use checker::Checker;
use coterie_core::engine::Output;
use coterie_core::session::{Received, Sent, Session};
use coterie_core::wire::{self, Envelope};
use coterie_core::{AlgoConfig, Engine, Epoch, Fence, Mode, Name, NodeId, Time, Way};
use coterie_diagram::MarkKind;
use faults::Faults;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use workload::Workload;

mod agenda;
mod checker;
pub mod config;
mod faults;
mod fingerprint;
mod links;
pub mod report;
mod workload;

pub use config::{FaultDraw, Load, SimConfig};
pub use report::{EntryCost, Injected, RunReport, Violation};

#[derive(Clone)]
struct SimNode {
    engine: Option<Engine>,
    incarnation: u32,
    /// The deadline a `Wake` is queued for.
    wake_at: Option<Time>,
    /// The session with each peer, new with each incarnation.
    sessions: BTreeMap<NodeId, Session>,
    /// The node's stable storage: the changes its engine asked to persist,
    /// applied in order.
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
    /// The events to come.
    agenda: Agenda,
    nodes: BTreeMap<NodeId, SimNode>,
    /// The connections between them, and the faults on messages.
    net: Network,
    /// The faults on processes.
    faults: Faults,
    /// The clients.
    workload: Workload,
    /// What the run is judged by.
    checker: Checker,
    /// The run for its diagram, when recording.
    recorder: Option<Recorder>,
    report: RunReport,
}

const STEP: Duration = Duration::from_micros(1);

impl Simulation {
    /// Prepares a run of seed `cfg.seed`.
    pub fn new(cfg: SimConfig) -> Simulation {
        let chooser = Random::new(cfg.seed);
        Simulation::with_chooser(cfg, chooser)
    }
}

impl<C: Chooser> Simulation<C> {
    /// Prepares a run whose choices come from `chooser` (`cfg.seed` only
    /// names it in reports).
    pub fn with_chooser(cfg: SimConfig, chooser: C) -> Simulation<C> {
        let mut sim = Simulation {
            chooser,
            now: Time::ZERO,
            agenda: Agenda::default(),
            nodes: (1..=cfg.nodes)
                .map(|id| {
                    let node = SimNode {
                        engine: None,
                        incarnation: 0,
                        wake_at: None,
                        sessions: BTreeMap::new(),
                        stable: None,
                    };
                    (NodeId(id), node)
                })
                .collect(),
            net: Network::default(),
            faults: Faults::default(),
            workload: Workload::new(&cfg),
            checker: Checker::default(),
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
            sim.boot(NodeId(id));
        }
        for id in 1..=sim.cfg.nodes {
            sim.dial_peers(NodeId(id));
        }
        sim.schedule_workload();
        match sim.cfg.fault_draw {
            FaultDraw::Upfront => sim.schedule_faults(),
            FaultDraw::AtWorkload => sim.push(sim.workload.start(), Event::DrawFaults),
        }
        sim
    }

    fn algo_config(&self, id: NodeId) -> AlgoConfig {
        AlgoConfig {
            id,
            name: Name::default(),
            members: (1..=self.cfg.nodes).map(NodeId).collect(),
            capacity: self.cfg.capacity,
            timing: self.cfg.timing,
            incarnation: u64::from(self.nodes.get(&id).map_or(0, |n| n.incarnation)),
            wall_origin: Duration::ZERO,
            mutex_options: self.cfg.mutex_options,
            restored: self.nodes.get(&id).and_then(|n| n.stable.clone()),
            forgetting: self.cfg.forgetting,
        }
    }

    fn boot(&mut self, node: NodeId) {
        let cfg = self.algo_config(node);
        let engine = Engine::new(cfg, self.cfg.mutex, self.cfg.election, self.now);
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
        self.agenda.push(at, event);
    }

    /// The nodes that are up.
    fn live_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.iter().filter(|(_, n)| n.engine.is_some()).map(|(&id, _)| id)
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
                let counted = self.now >= self.workload.start();
                if counted {
                    *self.report.messages_by_kind.entry(kind).or_default() += 1;
                }
                let carries = Carries::of(&envelope);
                if carries == Carries::Mutex {
                    self.net.mutex_sent();
                    if counted {
                        self.report.mutex_messages += 1;
                    }
                }
                // In a loss window, a share of the node's messages never
                // arrive, heartbeats as much as the rest.
                let lost = match self.net.loss(node) {
                    Some(share) => self.chooser.chance(share),
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
                if lost || self.net.severed(node, to) {
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
            Output::Granted { name, fence } => self.on_grant(node, name, fence),
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
            Output::Lost { name, fence } => self.lost(node, name, fence),
            Output::View(view) => {
                let members: Vec<String> = view.members.iter().map(NodeId::to_string).collect();
                let text = format!("{node} installs view {} of {}", view.epoch, members.join(" "));
                self.trace(|| text.clone());
                self.record(|r, at| r.mark(at, Some(node), MarkKind::Coordinator, text));
                self.report.views += 1;
            }
            Output::Quorum(quorum) => {
                let text = if quorum {
                    format!("{node} holds a lease")
                } else {
                    format!("{node} lost its lease")
                };
                self.trace(|| text);
            }
            // The simulator runs no application tasks.
            Output::Application { .. } => {}
            Output::Persist(record) => {
                self.report.records += 1;
                if let Some(n) = self.nodes.get_mut(&node).filter(|_| self.cfg.stable_storage) {
                    n.stable.get_or_insert_with(Default::default).apply(record);
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

    fn handle(&mut self, event: Event) {
        if let Some(node) = event.target().filter(|&node| self.faults.paused(node)) {
            // Frozen: it happens when the node carries on, in order (its
            // timers fire when it does).
            if !matches!(event, Event::Wake { .. }) {
                self.faults.defer(node, event);
            }
            return;
        }
        match event {
            Event::Deliver { from, to, conn, seq, ack, bytes, carries } => {
                if carries == Carries::Mutex {
                    self.net.mutex_landed();
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
            Event::Request { client, incarnation } => {
                if self.live(client.node, incarnation) {
                    self.request(client);
                }
            }
            Event::Release { client, incarnation } => {
                // A client that lost its hold meanwhile has moved on.
                if self.live(client.node, incarnation)
                    && self.workload.state(client) == workload::ClientState::Holding
                {
                    self.release(client);
                }
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
        let Some((at, event)) = self.agenda.pop(&mut self.chooser) else { return false };
        if at > self.cfg.max_time {
            self.now = self.cfg.max_time;
            return false;
        }
        self.now = at;
        self.handle(event);
        self.watch_for_deadlock();
        if !self.report.violations.is_empty() && !self.cfg.trace && !self.cfg.record {
            return false; // the seed will be replayed with a trace
        }
        // Once the workload is done and faults are over, give the cluster
        // time to settle before judging agreement.
        if self.workload_done() && self.now >= self.quiet_since() + self.settle() {
            return false;
        }
        true
    }

    /// How long the cluster must be quiet once the workload is done before
    /// the run ends and agreement is judged.
    fn settle(&self) -> Duration {
        self.cfg.timing.failure_timeout * 6
    }

    /// Since when the cluster has been quiet: the last fault's beginning
    /// or end, the last change of coordinator at any node (a term renewed
    /// because its fences ran out is an election that no fault began), or
    /// the workload's start.
    fn quiet_since(&self) -> Time {
        let elected = self.report.elections.last().map(|&(at, ..)| Time::from_micros(at));
        self.faults.last().max(self.workload.start()).max(elected.unwrap_or_default())
    }

    /// Judges the end state and returns what the run saw.
    pub fn finish(mut self) -> RunReport {
        self.final_checks();
        for n in self.nodes.values() {
            self.report.forgotten += n.engine.as_ref().map_or(0, |e| e.counters().forgotten);
        }
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
        self.agenda.next_at().is_some_and(|at| at < self.workload.start())
    }

    /// Whether the run has seen a broken invariant.
    pub fn violated(&self) -> bool {
        !self.report.violations.is_empty()
    }
}

/// Runs one seed to completion.
pub fn run(cfg: SimConfig) -> RunReport {
    Simulation::new(cfg).run()
}
