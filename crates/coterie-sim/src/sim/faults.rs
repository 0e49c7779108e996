//! The faults: the schedule drawn for a run, the processes' own (paused
//! nodes and what reached them meanwhile, [`Faults`]), and what each fault
//! does when it comes (crashes and restarts, partitions, pauses, delay
//! spikes, loss windows, connection resets). The faults on messages are
//! the [`Network`]'s to keep.

use super::*;
use std::collections::VecDeque;

/// The faults on processes in force, and when the last fault of any kind
/// struck or ended.
#[derive(Clone, Default)]
pub(super) struct Faults {
    /// Paused nodes, each with what reached it meanwhile, in order.
    paused: BTreeMap<NodeId, VecDeque<Event>>,
    /// When the last fault began or ended.
    last: Time,
}

impl Faults {
    /// Notes that a fault began or ended `now`.
    pub(super) fn struck(&mut self, now: Time) {
        self.last = now;
    }

    /// When the last fault began or ended.
    pub(super) fn last(&self) -> Time {
        self.last
    }

    /// Freezes `node`: `false` if it is frozen already.
    pub(super) fn pause(&mut self, node: NodeId) -> bool {
        if self.paused.contains_key(&node) {
            return false;
        }
        self.paused.insert(node, VecDeque::new());
        true
    }

    /// Whether `node` is frozen.
    pub(super) fn paused(&self, node: NodeId) -> bool {
        self.paused.contains_key(&node)
    }

    /// Whether no node is frozen.
    pub(super) fn none_paused(&self) -> bool {
        self.paused.is_empty()
    }

    /// Keeps `event`, which reached frozen `node`, for when it carries on.
    pub(super) fn defer(&mut self, node: NodeId, event: Event) {
        if let Some(waiting) = self.paused.get_mut(&node) {
            waiting.push_back(event);
        }
    }

    /// Thaws `node`: what reached it meanwhile, in order; `None` if it was
    /// not frozen.
    pub(super) fn resume(&mut self, node: NodeId) -> Option<VecDeque<Event>> {
        self.paused.remove(&node)
    }

    /// `node` crashed: frozen no longer, and what waited for it is lost.
    pub(super) fn crashed(&mut self, node: NodeId) {
        self.paused.remove(&node);
    }

    /// Feeds the frozen nodes and what waits for them to `h`.
    pub(super) fn hash_state<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        self.paused.hash(h);
    }
}

impl<C: Chooser> Simulation<C> {
    /// Crashes land at random moments of the first part of the workload;
    /// each restarts after a random downtime of up to four failure timeouts.
    pub(super) fn schedule_faults(&mut self) {
        let typical = (self.cfg.hold.1 + self.cfg.think.1) * self.cfg.requests.max(1) / 2;
        let window = self.cfg.fault_window.unwrap_or(typical);
        let ft = self.cfg.timing.failure_timeout;
        let start = self.workload.start();
        for _ in 0..self.cfg.crashes {
            let at = start + self.uniform((Duration::ZERO, window));
            let node = self.any_node();
            let silent = self.chooser.chance(0.5);
            self.push(at, Event::Crash { node, silent });
            let down_for = self.uniform((ft / 2, ft * 4));
            self.push(at + down_for, Event::Restart { node });
        }
        for _ in 0..self.cfg.pauses {
            let at = start + self.uniform((Duration::ZERO, window));
            let node = self.any_node();
            let until = at + self.uniform((ft / 2, ft * 4));
            self.push(at, Event::Pause { node });
            self.push(until, Event::Resume { node });
        }
        for id in 0..self.cfg.partitions {
            let at = start + self.uniform((Duration::ZERO, window));
            let side = self.minority();
            self.push(at, Event::Partition { id, side, way: Way::Both });
            let lasts = self.uniform((ft, ft * 6));
            self.push(at + lasts, Event::Heal { id });
        }
        for id in 0..self.cfg.delays {
            let at = start + self.uniform((Duration::ZERO, window));
            let node = self.any_node();
            let extra = self.uniform(self.cfg.delay_spike);
            let lasts = self.uniform((ft, ft * 6));
            self.push(at, Event::DelaySpike { id, node, extra });
            self.push(at + lasts, Event::DelayOver { id, node });
        }
        for _ in 0..self.cfg.resets {
            let at = start + self.uniform((Duration::ZERO, window));
            let node = self.any_node();
            self.push(at, Event::Reset { node });
        }
        for id in 0..self.cfg.drops {
            let at = start + self.uniform((Duration::ZERO, window));
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
            let at = start + self.uniform((Duration::ZERO, window));
            let side = self.minority();
            let way = if self.chooser.chance(0.5) { Way::Inbound } else { Way::Outbound };
            self.push(at, Event::Partition { id, side, way });
            let lasts = self.uniform((ft, ft * 6));
            self.push(at + lasts, Event::Heal { id });
        }
    }

    /// A random minority of the cluster (one node of two).
    pub(super) fn minority(&mut self) -> BTreeSet<NodeId> {
        let minority = self.chooser.number(1, (self.cfg.nodes / 2).max(1));
        let mut ids: Vec<NodeId> = (1..=self.cfg.nodes).map(NodeId).collect();
        let mut side = BTreeSet::new();
        for _ in 0..minority {
            side.insert(ids.swap_remove(self.chooser.index(ids.len())));
        }
        side
    }

    pub(super) fn crash(&mut self, node: NodeId, silent: bool) {
        let live = self.nodes.values().filter(|n| n.engine.is_some()).count();
        if self.nodes[&node].engine.is_none() || live <= 1 {
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
        let n = self.nodes.get_mut(&node).expect("known");
        self.report.forgotten += n.engine.as_ref().map_or(0, |e| e.counters().forgotten);
        n.engine = None;
        n.wake_at = None;
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

    /// Every connection to and from `node` breaks, with what is in flight in them; both sides
    /// redial at once.
    pub(super) fn reset(&mut self, node: NodeId) {
        if self.nodes[&node].engine.is_none() {
            return;
        }
        self.faults.struck(self.now);
        self.report.injected.resets += 1;
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

    /// Partition `id` cuts `side` off, one way or both (unless another is in force).
    pub(super) fn partition(&mut self, id: u32, side: BTreeSet<NodeId>, way: Way) {
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
    pub(super) fn pause(&mut self, node: NodeId) {
        if self.nodes[&node].engine.is_none() || !self.faults.pause(node) {
            return;
        }
        self.faults.struck(self.now);
        self.report.injected.pauses += 1;
        self.trace(|| format!("{node} PAUSES"));
        let text = format!("{node} paused");
        self.record(|r, at| r.begin(at, Some(node), MarkKind::Pause, text));
    }

    /// `node` carries on where it stopped, handling first what reached it meanwhile.
    pub(super) fn resume(&mut self, node: NodeId) {
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
        if let Some(n) = self.nodes.get_mut(&node) {
            n.wake_at = None; // its timers are overdue: wake it now
        }
        self.after_input(node);
    }

    /// Spike `id` slows `node`'s messages by `extra` (unless one already does).
    pub(super) fn delay_spike(&mut self, id: u32, node: NodeId, extra: Duration) {
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
    pub(super) fn delay_over(&mut self, id: u32, node: NodeId) {
        if self.net.unslow(id, node) {
            self.faults.struck(self.now);
            self.trace(|| format!("DELAY over: {node}'s messages back to normal"));
            self.record(|r, at| r.end(at, Some(node), MarkKind::Degraded));
        }
    }

    /// Loss window `id` opens on `node` (unless one already is).
    pub(super) fn loss(&mut self, id: u32, node: NodeId, share: Share) {
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
    pub(super) fn loss_over(&mut self, id: u32, node: NodeId) {
        if self.net.unlose(id, node) {
            self.faults.struck(self.now);
            self.trace(|| format!("DROP over: {node} loses nothing more"));
            self.record(|r, at| r.end(at, Some(node), MarkKind::Degraded));
        }
    }

    /// Partition `id` ends.
    pub(super) fn heal(&mut self, id: u32) {
        if self.net.heal(id) {
            self.faults.struck(self.now);
            self.trace(|| "HEAL: the partition is over".to_string());
            self.record(|r, at| r.end(at, None, MarkKind::Partition));
        }
    }

    /// `node` comes back: a new incarnation, its stable storage kept, dialling its peers.
    pub(super) fn restart(&mut self, node: NodeId) {
        if self.nodes[&node].engine.is_some() {
            return;
        }
        self.faults.struck(self.now);
        self.trace(|| format!("{node} RESTARTS"));
        let text = format!("{node} restarts");
        self.record(|r, at| r.mark(at, Some(node), MarkKind::Restart, text));
        let n = self.nodes.get_mut(&node).expect("known");
        n.incarnation += 1;
        let incarnation = n.incarnation;
        let resumed = self.workload.restarted(node);
        self.boot(node);
        // Its dials reach the peers, which dial it back.
        self.dial_peers(node);
        for client in resumed {
            let at = self.now + self.uniform(self.cfg.think);
            self.push(at, Event::Request { client, incarnation });
        }
    }
}
