//! The clients: when each asks for the critical section and leaves it,
//! under concurrent, sequential and burst load.

use super::*;

impl<C: Chooser> Simulation<C> {
    pub(super) fn schedule_workload(&mut self) {
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

    pub(super) fn after_release(&mut self, node: NodeId) {
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
    pub(super) fn after_burst_entry(&mut self) {
        if self.burst_over() && self.bursts_left > 0 && !self.burst_due {
            self.burst_due = true;
            let quiet = self.cfg.delay.1 * 4 + STEP;
            self.push(self.now + quiet, Event::NextBurst);
        }
    }

    /// Whether every live node's entry of the burst under way is done.
    pub(super) fn burst_over(&self) -> bool {
        self.nodes.values().all(|n| n.engine.is_none() || n.client == ClientState::Done)
    }

    pub(super) fn next_burst(&mut self) {
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

    pub(super) fn next_sequential(&mut self) {
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

    /// Whether the workload has finished on every node that is up.
    pub(super) fn workload_done(&self) -> bool {
        match self.cfg.load {
            Load::Concurrent => {
                self.nodes.values().all(|n| n.engine.is_none() || n.client == ClientState::Done)
            }
            Load::Sequential => self.sequential_left == 0 && self.sequential.is_none(),
            Load::Burst => self.bursts_left == 0 && self.burst_over(),
        }
    }
}
