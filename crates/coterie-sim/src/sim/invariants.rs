//! What a run is judged by: at every grant (safety, fences, fairness), at
//! every step (deadlock) and at its end (liveness, agreement). The
//! invariants themselves are named in [`crate::invariant`].

use super::fingerprint::state_hasher;
use super::*;

impl<C: Chooser> Simulation<C> {
    pub(super) fn violation(&mut self, invariant: Invariant, detail: String) {
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

    /// Whether `node`, which asked at `asked_at`, entered ahead of a
    /// waiting node that asked before it: by request timestamp when the
    /// algorithm orders requests by timestamp, by the time of asking
    /// otherwise.
    pub(super) fn overtook_someone(&self, node: NodeId, asked_at: Time) -> bool {
        let stamp = |id: &NodeId| self.nodes[id].engine.as_ref().and_then(Engine::request_stamp);
        match stamp(&node) {
            Some(mine) => self.asked.keys().filter_map(stamp).any(|other| other < mine),
            None => self.asked.values().any(|&other| other < asked_at),
        }
    }

    pub(super) fn on_grant(&mut self, node: NodeId, fence: Fence) {
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
            // Judged as safety (ignored when only progress is judged): a
            // grant nobody asked for is not handed to the client.
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

    /// Reports a deadlock once the run has been stuck (see
    /// [`stuck_state`](Self::stuck_state)) in one state of the algorithms
    /// for a whole failure timeout. By then every node has heard every
    /// peer's heartbeat, sent in that state, and changed nothing; the next
    /// heartbeats say the same (a heartbeat carries only the sender's
    /// state), so nothing ever changes again. This rests on the handlers
    /// acting on what a heartbeat says, never on the time alone: an
    /// algorithm that waits for time to pass arms a timer, and an armed
    /// timer means not stuck.
    pub(super) fn watch_for_deadlock(&mut self) {
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
    pub(super) fn stuck_state(&self) -> Option<u64> {
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
    pub(super) fn describe(&self, which: impl Fn(&SimNode) -> bool) -> String {
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

    pub(super) fn final_checks(&mut self) {
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
