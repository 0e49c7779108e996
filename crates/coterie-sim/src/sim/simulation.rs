//! One simulated run: the loop that takes the next event off the agenda
//! and carries it out, with every part of the run at hand.
//!
//! Every event is carried out here, in [`Simulation::handle`]'s arms: a
//! frame delivered, a connection dialled or welcomed, a timer, a client's
//! step, each fault as it strikes and ends. The parts are types that own
//! their state and answer questions, and the simulation asks them: the
//! nodes, the [`Links`] (connections and the faults on messages), the
//! [`Faults`] on processes (their schedule, drawn at the start, and the
//! paused nodes), the [`Workload`] (the clients and what they still have
//! to do) and the [`Checker`] (who holds what, every fence granted).
//! What the engines ask for (a message sent, a grant, a record to
//! persist) comes back through [`Simulation::after_input`].

use super::agenda::{Agenda, Carries, Event, Share};
use super::checker::{self, Checker};
use super::client::{ClientId, ClientState};
use super::config::{FaultDraw, Load, SimConfig};
use super::faults::Faults;
use super::hash::state_hasher;
use super::links::Links;
use super::nodes::Nodes;
use super::report::{RunReport, Violation};
use super::workload::{Taken, Workload};
use crate::chooser::{Chooser, Random};
use crate::invariant::Invariant;
use crate::record::Recorder;
use coterie_core::engine::Output;
use coterie_core::session::{Received, Sent, Session};
use coterie_core::wire::{self, Envelope};
use coterie_core::{AlgoConfig, Engine, Fence, Mode, Name, NodeId, Takers, Time, Way};
use coterie_diagram::MarkKind;
use std::collections::BTreeSet;
use std::time::Duration;

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
    /// The nodes, with their engines, sessions and stable storage.
    nodes: Nodes,
    /// The connections between them, and the faults on messages.
    net: Links,
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
            nodes: Nodes::new(cfg.nodes),
            net: Links::default(),
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
        let steps = sim.workload.first_steps(sim.cfg.think, &mut sim.chooser);
        sim.push_all(steps);
        match sim.cfg.fault_draw {
            FaultDraw::Upfront => sim.draw_faults(),
            FaultDraw::AtWorkload => sim.push(sim.workload.start(), Event::DrawFaults),
        }
        sim
    }

    /// Queues the run's faults, drawn now.
    fn draw_faults(&mut self) {
        let faults = Faults::draw(&self.cfg, self.workload.start(), &mut self.chooser);
        self.push_all(faults);
    }

    fn algo_config(&self, id: NodeId) -> AlgoConfig {
        AlgoConfig {
            id,
            name: Name::default(),
            members: (1..=self.cfg.nodes).map(NodeId).collect(),
            capacity: self.cfg.capacity,
            timing: self.cfg.timing,
            incarnation: u64::from(self.nodes.incarnation(id)),
            wall_origin: Duration::ZERO,
            mutex_options: self.cfg.mutex_options,
            restored: self.nodes.stable(id),
            forgetting: self.cfg.forgetting,
        }
    }

    fn boot(&mut self, node: NodeId) {
        let cfg = self.algo_config(node);
        let engine = Engine::new(cfg, self.cfg.mutex, self.cfg.election, self.now);
        let limits = self.cfg.session_limits;
        let peers = self.peers(node);
        self.nodes.boot(node, engine, &peers, limits);
        self.after_input(node);
    }

    fn peers(&self, node: NodeId) -> Vec<NodeId> {
        (1..=self.cfg.nodes).map(NodeId).filter(|&p| p != node).collect()
    }

    fn boot_id(&self, node: NodeId) -> u64 {
        u64::from(self.nodes.incarnation(node))
    }

    fn push(&mut self, at: Time, event: Event) {
        self.agenda.push(at, event);
    }

    fn push_all(&mut self, events: Vec<(Time, Event)>) {
        for (at, event) in events {
            self.agenda.push(at, event);
        }
    }

    fn uniform(&mut self, (lo, hi): (Duration, Duration)) -> Duration {
        self.chooser.duration(lo, hi)
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
            let Some(engine) = self.nodes.engine_mut(node) else {
                return;
            };
            let Some(output) = engine.poll_output() else {
                break;
            };
            self.on_output(node, output);
        }
        let now = self.now;
        let deadline = self.nodes.engine(node).and_then(Engine::next_deadline).map(|d| d.max(now));
        if let Some(at) = deadline.filter(|_| deadline != self.nodes.wake_at(node)) {
            self.nodes.set_wake_at(node, deadline);
            let incarnation = self.nodes.incarnation(node);
            self.push(at, Event::Wake { node, incarnation });
        }
    }

    fn on_output(&mut self, node: NodeId, output: Output) {
        match output {
            Output::Send { to, envelope, kind } => {
                *self.report.sent_by_kind.entry(kind).or_default() += 1;
                let recorded = if self.recorder.is_some() {
                    let text = self.nodes.engine(node).map(|e| e.describe(&envelope));
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
                        self.report.counts.mutex_messages += 1;
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
                    let text = self.nodes.engine(node).map(|e| e.describe(&envelope));
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
                self.report.counts.views += 1;
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
                self.report.counts.records += 1;
                if self.cfg.stable_storage {
                    self.nodes.persist(node, record);
                }
            }
        }
    }

    fn live(&self, node: NodeId, incarnation: u32) -> bool {
        self.nodes.live(node, incarnation)
    }

    fn engine(&mut self, node: NodeId) -> &mut Engine {
        self.nodes.engine_mut(node).expect("live node")
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
                    || self.nodes.incarnation(peer) != peer_incarnation
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
                if !self.live(node, incarnation) || self.nodes.wake_at(node) != Some(self.now) {
                    return;
                }
                let now = self.now;
                self.nodes.set_wake_at(node, None);
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
                    && self.workload.state(client) == ClientState::Holding
                {
                    self.release(client);
                }
            }
            Event::DrawFaults => self.draw_faults(),
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
        for (_, engine) in self.nodes.engines() {
            self.report.counts.forgotten += engine.counters().forgotten;
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

    /// A hash of the run's state, for the checker: two runs with the same
    /// fingerprint go on alike, whatever led to it. It covers each node
    /// (its engine's state, incarnation, sessions and stable storage), the
    /// links (connections and the faults on messages), every queued event
    /// with its time relative to now (as a set: the chooser orders ties),
    /// the paused nodes, the clients and the workload left, and what the
    /// checker holds (holders, the highest fence granted). Left out, since
    /// they decide nothing that follows: the report's counters and
    /// measurements, the recorder, and what each part leaves out of its
    /// own hash. Every time in it is taken relative to now (timers, the
    /// detectors' last-heard times, a connection's tail while still
    /// ahead), so states alike but for the moment merge.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = state_hasher();
        let now = self.now;
        self.nodes.hash_at(&mut h, now);
        self.net.hash_at(&mut h, now);
        // The queue as a multiset of (when, what): the order in which
        // events due at the same moment were queued decides nothing when
        // the chooser orders ties, and with a random chooser nobody
        // hashes. Each element is hashed alone and the hashes summed, so
        // the order does not count and nothing need be sorted.
        let mut queued = 0u64;
        for (at, event) in self.agenda.iter() {
            let mut e = state_hasher();
            at.saturating_sub(now).hash(&mut e);
            event.hash(&mut e);
            queued = queued.wrapping_add(e.finish());
        }
        (self.agenda.len(), queued).hash(&mut h);
        self.faults.hash_state(&mut h);
        self.workload.hash_state(&mut h);
        self.checker.hash_state(&mut h);
        // How long the cluster has been quiet decides when the run ends,
        // once the workload is done: up to the settling time.
        now.saturating_sub(self.quiet_since()).min(self.settle()).hash(&mut h);
        h.finish()
    }

    // The links: connections dialled and welcomed, frames written into
    // them and delivered through each node's sessions.

    fn session(&mut self, node: NodeId, peer: NodeId) -> &mut Session {
        self.nodes.session(node, peer)
    }

    /// When a frame `from` → `to` written now lands: a random delay, plus
    /// any delay spike on `from`, after the frame written before it.
    fn flight(&mut self, from: NodeId, to: NodeId) -> Time {
        let delay = self.uniform(self.cfg.delay) + self.net.spike(from);
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
            self.report.injected.resent += 1;
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
            self.net.mutex_written();
        }
        let fixed = self.cfg.heartbeat_delay.filter(|_| carries == Carries::Heartbeat);
        let at = match fixed {
            Some(delay) => self.net.land(from, to, self.now + delay, STEP),
            None => self.flight(from, to),
        };
        self.push(at, Event::Deliver { from, to, conn: conn.id, seq, ack, bytes, carries });
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
                self.report.injected.gaps += 1;
                self.trace(|| format!("{to} missed {lost} frames from {from}: declared failed"));
                let now = self.now;
                self.engine(to).handle_link_down(now, from);
            }
        }
        // A partition drops what arrives above the session, as a node's
        // `coterie fault partition` does.
        if self.net.severed(from, to) {
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
        if !self.nodes.up(to) {
            // Refused, or no answer: the dialler waits to be poked.
            self.net.close(from, to);
            return;
        }
        let my_boot = self.boot_id(to);
        let delay = self.uniform(self.cfg.delay) + self.net.spike(to);
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

    // The faults, as each strikes and ends.

    fn crash(&mut self, node: NodeId, silent: bool) {
        if !self.nodes.up(node) || self.nodes.up_ids().count() <= 1 {
            return; // already down, or the last one standing
        }
        self.faults.struck(self.now);
        self.report.injected.crashes += 1;
        self.faults.crashed(node);
        self.trace(|| format!("{node} CRASHES{}", if silent { " (silently)" } else { "" }));
        let text = format!("{node} crashes{}", if silent { " (silently)" } else { "" });
        self.record(|r, at| {
            r.exit_all(at, node);
            r.end(at, Some(node), MarkKind::Pause);
            r.mark(at, Some(node), MarkKind::Crash, text)
        });
        self.report.counts.forgotten += self.nodes.crash(node);
        self.checker.crashed(node);
        if self.workload.crashed(node) {
            // The sequential entry under way died with its node: on to the
            // next one, without charging this one's messages to anybody.
            self.push(self.now, Event::NextSequential);
        }
        if self.cfg.load == Load::Burst {
            // The entry it waited for, or held, will not come: the burst
            // may be over without it.
            self.after_burst_entry();
        }
        if !silent {
            // Every peer's connection closes once what was in flight lands.
            let peers: Vec<(NodeId, u32)> =
                self.nodes.up_ids().map(|id| (id, self.nodes.incarnation(id))).collect();
            let peer_incarnation = self.nodes.incarnation(node);
            for (observer, incarnation) in peers {
                let at = self.flight(node, observer);
                self.push(
                    at,
                    Event::LinkDown { observer, peer: node, incarnation, peer_incarnation },
                );
            }
        }
    }

    /// Every connection to and from `node` breaks, with what is in flight in them; both sides
    /// redial at once.
    fn reset(&mut self, node: NodeId) {
        if !self.nodes.up(node) {
            return;
        }
        self.faults.struck(self.now);
        self.report.injected.resets += 1;
        self.trace(|| format!("RESET: {node}'s connections break"));
        let text = format!("{node}'s connections break");
        self.record(|r, at| r.mark(at, Some(node), MarkKind::Reset, text));
        for peer in self.peers(node) {
            for (a, b) in [(node, peer), (peer, node)] {
                if self.nodes.up(a) {
                    self.dial(a, b);
                } else {
                    self.net.close(a, b);
                }
            }
        }
    }

    /// Partition `id` cuts `side` off, one way or both (unless another is in force).
    fn partition(&mut self, id: u32, side: BTreeSet<NodeId>, way: Way) {
        let names: Vec<String> = side.iter().map(|n| n.to_string()).collect();
        if !self.net.cut_off(id, side, way) {
            return; // one partition at a time
        }
        self.faults.struck(self.now);
        self.report.injected.partitions += 1;
        if way != Way::Both {
            self.report.injected.one_way_partitions += 1;
        }
        let names = names.join(", ");
        let what = match way {
            Way::Both => format!("{{{names}}} cut off from the rest"),
            Way::Inbound => format!("{{{names}}} hear nothing from the rest"),
            Way::Outbound => format!("the rest hear nothing from {{{names}}}"),
        };
        self.trace(|| format!("PARTITION: {what}"));
        let text = format!("partition: {what}");
        self.record(|r, at| r.begin(at, None, MarkKind::Partition, text));
    }

    /// `node` freezes, state and all.
    fn pause(&mut self, node: NodeId) {
        if !self.nodes.up(node) || !self.faults.pause(node) {
            return;
        }
        self.faults.struck(self.now);
        self.report.injected.pauses += 1;
        self.trace(|| format!("{node} PAUSES"));
        let text = format!("{node} paused");
        self.record(|r, at| r.begin(at, Some(node), MarkKind::Pause, text));
    }

    /// `node` carries on where it stopped, handling first what reached it meanwhile.
    fn resume(&mut self, node: NodeId) {
        let Some(waiting) = self.faults.resume(node) else {
            return;
        };
        self.faults.struck(self.now);
        self.trace(|| format!("{node} RESUMES"));
        self.record(|r, at| r.end(at, Some(node), MarkKind::Pause));
        // What reached it meanwhile, in order, before anything else.
        for event in waiting {
            self.handle(event);
        }
        self.nodes.set_wake_at(node, None); // its timers are overdue: wake it now
        self.after_input(node);
    }

    /// Spike `id` slows `node`'s messages by `extra` (unless one already does).
    fn delay_spike(&mut self, id: u32, node: NodeId, extra: Duration) {
        if !self.net.slow(id, node, extra) {
            return; // one spike at a time per node
        }
        self.faults.struck(self.now);
        self.report.injected.delays += 1;
        let ms = extra.as_secs_f64() * 1000.0;
        self.trace(|| format!("DELAY: {node}'s messages take +{ms:.1} ms"));
        let text = format!("{node}'s messages take +{ms:.1} ms");
        self.record(|r, at| r.begin(at, Some(node), MarkKind::Degraded, text));
    }

    /// Spike `id` on `node` ends.
    fn delay_over(&mut self, id: u32, node: NodeId) {
        if self.net.unslow(id, node) {
            self.faults.struck(self.now);
            self.trace(|| format!("DELAY over: {node}'s messages back to normal"));
            self.record(|r, at| r.end(at, Some(node), MarkKind::Degraded));
        }
    }

    /// Loss window `id` opens on `node` (unless one already is).
    fn loss(&mut self, id: u32, node: NodeId, share: Share) {
        if !self.net.lose(id, node, share.0) {
            return; // one loss window at a time per node
        }
        self.faults.struck(self.now);
        self.report.injected.drops += 1;
        let percent = share.0 * 100.0;
        self.trace(|| format!("DROP: {node} loses {percent:.0}% of its messages"));
        let text = format!("{node} loses {percent:.0}% of its messages");
        self.record(|r, at| r.begin(at, Some(node), MarkKind::Degraded, text));
    }

    /// Loss window `id` on `node` closes.
    fn loss_over(&mut self, id: u32, node: NodeId) {
        if self.net.unlose(id, node) {
            self.faults.struck(self.now);
            self.trace(|| format!("DROP over: {node} loses nothing more"));
            self.record(|r, at| r.end(at, Some(node), MarkKind::Degraded));
        }
    }

    /// Partition `id` ends.
    fn heal(&mut self, id: u32) {
        if self.net.heal(id) {
            self.faults.struck(self.now);
            self.trace(|| "HEAL: the partition is over".to_string());
            self.record(|r, at| r.end(at, None, MarkKind::Partition));
        }
    }

    /// `node` comes back: a new incarnation, its stable storage kept, dialling its peers.
    fn restart(&mut self, node: NodeId) {
        if self.nodes.up(node) {
            return;
        }
        self.faults.struck(self.now);
        self.trace(|| format!("{node} RESTARTS"));
        let text = format!("{node} restarts");
        self.record(|r, at| r.mark(at, Some(node), MarkKind::Restart, text));
        let incarnation = self.nodes.next_incarnation(node);
        let resumed = self.workload.restarted(node);
        self.boot(node);
        // Its dials reach the peers, which dial it back.
        self.dial_peers(node);
        for client in resumed {
            let at = self.now + self.uniform(self.cfg.think);
            self.push(at, Event::Request { client, incarnation });
        }
    }

    // The workload: each client's steps.

    /// `client` asks for the next name of its request.
    fn request(&mut self, client: ClientId) {
        let now = self.now;
        let name = self.workload.ask(client, &mut self.chooser);
        let mode = self.workload.mode(client);
        self.checker.asked(client, (name.clone(), mode), now);
        self.trace(|| format!("{client} requests {name}"));
        self.sync(client.node, &name);
        self.after_input(client.node);
    }

    /// Brings what `node` asks its engine for of `name` in line with what
    /// its clients hold and want, as a real node's agent does for its
    /// sessions. Where the algorithm counts sessions, each grant no client
    /// holds is released and a permit is asked for per waiting client.
    /// Otherwise the node has one grant at most: released once no client
    /// holds it, and asked for again while a client waits.
    fn sync(&mut self, node: NodeId, name: &Name) {
        let now = self.now;
        let permits = u32::try_from(self.cfg.capacity).unwrap_or(u32::MAX);
        let demand = self.workload.demand(node, name, permits);
        let asked = self.engine(node).follow(now, name, &demand, |_| false);
        if let Err(e) = asked {
            panic!("the simulator's own request for {name} was refused: {e}");
        }
    }

    /// `node`'s node released `name`, granted with `fence`, on its own:
    /// its lease ran out. Each client that held it (one, or readers
    /// sharing it) stops at once, as the node tells it to, lets go of what
    /// else it held, and its entry is over.
    fn lost(&mut self, node: NodeId, name: Name, fence: Fence) {
        self.trace(|| format!("{node} LOSES {name:?} (fence {fence})"));
        for client in self.workload.holders(node, &name, fence) {
            self.holder_lost(client, &name, fence);
        }
    }

    /// `client` lost `name`, granted to its node with `fence`.
    fn holder_lost(&mut self, client: ClientId, name: &Name, fence: Fence) {
        let (now, node, name) = (self.now, client.node, name.clone());
        let state = self.workload.state(client);
        let others = self.workload.lost(client, &name);
        let mut gone: Vec<Name> = others.iter().map(|(n, _)| n.clone()).collect();
        gone.push(name.clone());
        self.checker.released(client, &gone, now);
        self.record(|r, at| r.exit(at, node, fence.0));
        for (other, other_fence) in others.iter().rev() {
            self.record(|r, at| r.exit(at, node, other_fence.0));
            self.sync(node, other);
        }
        // Another client of the node may wait for the lock lost.
        self.sync(node, &name);
        self.after_input(node);
        if state == ClientState::Holding {
            self.after_release(client);
        }
    }

    /// `client` lets go of every name it holds, last taken first.
    fn release(&mut self, client: ClientId) {
        let now = self.now;
        let node = client.node;
        let held = self.workload.release(client);
        let names: Vec<Name> = held.iter().map(|(n, _)| n.clone()).collect();
        self.checker.released(client, &names, now);
        self.report.counts.workload_us =
            now.saturating_sub(self.workload.start()).as_micros() as u64;
        self.trace(|| format!("{client} releases"));
        for (name, fence) in held.iter().rev() {
            self.record(|r, at| r.exit(at, node, fence.0));
            self.sync(node, name);
        }
        self.after_input(node);
        self.after_release(client);
    }

    /// `client` took a grant ([`Workload::granted`] said how): it asks for
    /// its request's next name at once, or holds for a while.
    fn taken(&mut self, client: ClientId, taken: Taken) {
        let incarnation = self.nodes.incarnation(client.node);
        match taken {
            Taken::More => self.push(self.now, Event::Request { client, incarnation }),
            Taken::Entered => {
                let hold = self.uniform(self.cfg.hold);
                self.push(self.now + hold, Event::Release { client, incarnation });
            }
            Taken::Abandoned => self.release(client),
        }
    }

    fn after_release(&mut self, client: ClientId) {
        match self.cfg.load {
            Load::Concurrent => {
                if self.workload.entry_over(client) {
                    let incarnation = self.nodes.incarnation(client.node);
                    let at = self.now + self.uniform(self.cfg.think);
                    self.push(at, Event::Request { client, incarnation });
                }
            }
            Load::Sequential => {
                self.workload.entry_over(client);
                // Leave time for every message the entry caused to land.
                let quiet = self.cfg.delay.1 * 4 + STEP;
                self.push(self.now + quiet, Event::NextSequential);
            }
            Load::Burst => {
                self.workload.entry_over(client);
                self.after_burst_entry();
            }
        }
    }

    /// Burst load: once every live node's entry of this burst is done (or
    /// its node died), the next burst comes after a quiet gap.
    fn after_burst_entry(&mut self) {
        let nodes = &self.nodes;
        if self.workload.burst_next(|id| nodes.up(id)) {
            let quiet = self.cfg.delay.1 * 4 + STEP;
            self.push(self.now + quiet, Event::NextBurst);
        }
    }

    fn next_burst(&mut self) {
        if self.net.mutex_in_flight() > 0 {
            // The last burst's messages are still moving: wait for them.
            let wait = self.cfg.delay.1 + STEP;
            self.push(self.now + wait, Event::NextBurst);
            return;
        }
        let live: Vec<NodeId> = self.nodes.up_ids().collect();
        let clients = self.workload.burst(&live);
        if clients.is_empty() {
            return;
        }
        self.trace(|| "BURST: every live client asks".to_string());
        for client in clients {
            let incarnation = self.nodes.incarnation(client.node);
            self.push(self.now, Event::Request { client, incarnation });
        }
    }

    fn next_sequential(&mut self) {
        if self.net.mutex_in_flight() > 0 && self.workload.sequential_busy() {
            // The entry's messages are still moving (a token finishing its
            // lap, say): count them all before the next request.
            let wait = self.cfg.delay.1 + STEP;
            self.push(self.now + wait, Event::NextSequential);
            return;
        }
        if let Some((node, cost)) = self.workload.sequential_over(self.net.mutex_sent_total()) {
            self.trace(|| format!("{node}'s entry cost {} mutex messages", cost.messages));
            self.report.per_entry.push(cost);
        }
        let live: Vec<NodeId> = self.nodes.up_ids().collect();
        let mut chosen = None;
        let chooser = &mut self.chooser;
        let nodes = &self.nodes;
        let pick = || {
            let node = live[chooser.index(live.len())];
            let local = nodes.engine(node).and_then(Engine::coordinator) == Some(node);
            chosen = Some(node);
            (node, local)
        };
        if !self.workload.sequential_next(pick, self.net.mutex_sent_total()) {
            return;
        }
        let node = chosen.expect("picked");
        let incarnation = self.nodes.incarnation(node);
        self.handle(Event::Request { client: ClientId { node, slot: 0 }, incarnation });
    }

    /// Whether the workload has finished on every node that is up.
    fn workload_done(&self) -> bool {
        self.workload.done(|id| self.nodes.up(id))
    }

    // The checks: at every grant and step, and at the end.

    fn violation(&mut self, invariant: Invariant, detail: String) {
        if self.cfg.progress_only && invariant.is_unsafe() {
            self.trace(|| format!("(not judged) {invariant}: {detail}"));
            return;
        }
        self.trace(|| format!("VIOLATION {invariant}: {detail}"));
        let text = format!("{invariant}: {detail}");
        self.record(|r, at| r.mark(at, None, MarkKind::Violation, text));
        self.report.violations.push(Violation {
            invariant,
            detail,
            at_us: self.now.as_micros() as u64,
        });
    }

    /// `" name"` when the clients spread over several locks, for a line
    /// about a grant.
    fn named(&self, name: &Name) -> String {
        if self.workload.named() {
            format!(" {name}")
        } else {
            String::new()
        }
    }

    fn on_grant(&mut self, node: NodeId, name: Name, fence: Fence) {
        let named = self.named(&name);
        let engine = self.nodes.engine(node);
        let mode = engine.map_or(Mode::Write, |e| e.mode_of(&name, fence));
        let takers = engine.map_or(Takers::First, |e| e.takers(&name, fence));
        let clients = self.workload.takers(node, &name, takers);
        if clients.is_empty() {
            // Judged as safety (ignored when only progress is judged): a
            // grant nobody asked for is not handed to any client.
            let states = self.workload.states_at(node);
            self.violation(
                Invariant::Safety,
                format!("{node} was granted{named} while no client of it waited ({states:?})"),
            );
            return;
        }
        for (i, &client) in clients.iter().enumerate() {
            self.client_enters(client, &name, (fence, mode), i > 0);
        }
        // All hold the grant before any acts on it: one that lets go at
        // once must not find it unused while the others are still to take
        // it.
        let taken: Vec<_> =
            clients.iter().map(|&c| (c, self.workload.granted(c, name.clone(), fence))).collect();
        for (client, taken) in taken {
            self.taken(client, taken);
        }
    }

    /// `client` enters `name` on its node's grant `fence`, in `mode`;
    /// `joined` when it shares the grant with the readers of its node
    /// that entered on it just before.
    fn client_enters(
        &mut self,
        client: ClientId,
        name: &Name,
        (fence, mode): (Fence, Mode),
        joined: bool,
    ) {
        let (node, name) = (client.node, name.clone());
        let named = self.named(&name);
        let reading = if mode == Mode::Read { " to read" } else { "" };
        self.trace(|| format!("{client} ENTERS{named}{reading} with fence {fence}"));
        self.record(|r, at| r.enter(at, node, fence.0));
        self.report.counts.entries += 1;
        self.end_frozen_holds(&name);
        let allowed = self.cfg.checked_capacity.unwrap_or(self.cfg.capacity);
        let rising = self.cfg.capacity == 1;
        let nodes = &self.nodes;
        let stamp = |id: NodeId| nodes.engine(id).and_then(|e| e.request_stamp(&name));
        let verdict = self.checker.granted(
            client,
            &name,
            (fence, mode, joined),
            self.now,
            (allowed, rising),
            stamp,
        );
        verdict.count(mode, &mut self.report);
        if self.nodes.engine(node).and_then(Engine::coordinator) == Some(node) {
            self.report.counts.coordinator_entries += 1;
        }
        if let Some(crowd) = verdict.crowd {
            let holders: Vec<String> = crowd.iter().map(ClientId::to_string).collect();
            self.violation(
                Invariant::Safety,
                format!(
                    "{client} entered{named}{reading} while {} held (capacity {allowed})",
                    holders.join(", ")
                ),
            );
        }
        if let Some(max) = verdict.stale {
            self.violation(
                Invariant::Fence,
                format!("{client} was granted{named} fence {fence}, not above the earlier {max}"),
            );
        }
    }

    /// In majority mode, a holder whose node is paused and whose lease
    /// has run out holds no longer: its node tells it so the moment it
    /// runs again, before it can touch anything (the client here is frozen
    /// with its node). Such a hold is counted as a lease overlap, not
    /// judged as two holders, as a frozen client's is on a real cluster.
    fn end_frozen_holds(&mut self, name: &Name) {
        if self.cfg.timing.lease.partitions != coterie_core::Partitions::Majority {
            return;
        }
        let now = self.now;
        for holder in self.checker.holders_of(name) {
            let over = self.faults.paused(holder.node)
                && self
                    .nodes
                    .engine(holder.node)
                    .is_some_and(|e| e.membership().lease_end().is_none_or(|end| end <= now));
            if over {
                self.trace(|| {
                    format!("{holder}'s lease ran out while it was paused holding {name:?}")
                });
                self.checker.released(holder, std::slice::from_ref(name), now);
                self.report.counts.lease_overlaps += 1;
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
        let state = self.stuck_state();
        if self.checker.watch(self.now, state, self.cfg.timing.failure_timeout) {
            let waiting = self.describe(|state| state == ClientState::Waiting);
            self.violation(
                Invariant::Deadlock,
                format!("{waiting} wait, and nothing but heartbeats is left to happen"),
            );
        }
    }

    /// A hash of the algorithms' state if the run is stuck but for
    /// heartbeats: a client waits; every node is up, unpaused and idle
    /// ([`Engine::idle`]); no partition, spike or loss is in force; and
    /// nothing is queued but heartbeats and wake-ups (so no fault, no
    /// client step and no other message is to come).
    fn stuck_state(&self) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        if !self.workload.anyone_waits()
            || self.net.mutex_in_flight() > 0
            || !self.net.calm()
            || !self.faults.none_paused()
            || self.nodes.up_ids().count() < self.cfg.nodes as usize
            || !self.nodes.engines().all(|(_, e)| e.idle())
        {
            return None;
        }
        let only_beats = self.agenda.iter().all(|(_, event)| {
            matches!(event, Event::Deliver { carries: Carries::Heartbeat, .. } | Event::Wake { .. })
        });
        if !only_beats {
            return None;
        }
        let mut h = state_hasher();
        self.workload.hash_states(&mut h);
        for (id, engine) in self.nodes.engines() {
            id.hash(&mut h);
            engine.hash_algorithms(&mut h, self.now);
        }
        Some(h.finish())
    }

    /// The live nodes whose clients' state `which` picks, each with its
    /// client's and engine's state and the coordinator it follows, for a
    /// violation's detail.
    fn describe(&self, which: impl Fn(ClientState) -> bool) -> String {
        let nodes: Vec<String> = self
            .workload
            .select(which)
            .into_iter()
            .filter_map(|id| {
                let e = self.nodes.engine(id.node)?;
                let coordinator = e.coordinator().map_or("none".into(), |c| c.to_string());
                Some(format!(
                    "{id} ({:?}, engine {}, coordinator {coordinator})",
                    self.workload.state(id),
                    e.cs_state()
                ))
            })
            .collect();
        nodes.join(", ")
    }

    fn final_checks(&mut self) {
        if !self.report.violations.is_empty() {
            return;
        }
        if !self.workload_done() {
            let stuck = self.describe(|state| state != ClientState::Done);
            self.violation(Invariant::Liveness, format!("requests never served by {stuck}"));
            return;
        }
        let live: Vec<_> =
            self.nodes.engines().map(|(id, e)| (id, e.coordinator(), e.epoch())).collect();
        if let Some(detail) = checker::disagreement(&live) {
            self.violation(Invariant::Agreement, detail);
        }
    }
}

/// Runs one seed to completion.
pub fn run(cfg: SimConfig) -> RunReport {
    Simulation::new(cfg).run()
}
