//! The faults on processes: the schedule of a run's faults, drawn at its
//! start ([`Faults::draw`]), and the nodes paused meanwhile with what
//! reached them. What each fault does when it comes is the simulation's
//! to carry out; the faults on messages (partitions, delay spikes, loss
//! windows) are the [`Links`](super::links::Links)' to keep.

use super::agenda::{Event, Share};
use super::config::SimConfig;
use crate::chooser::Chooser;
use coterie_core::{NodeId, Time, Way};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

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
    /// The faults `cfg` asks for, each with its end, at random moments of
    /// the first part of the workload, which begins at `start`: a crash
    /// is followed by its restart after up to four failure timeouts of
    /// downtime; a pause, a partition, a delay spike and a loss window
    /// each by its end.
    pub(super) fn draw(
        cfg: &SimConfig,
        start: Time,
        chooser: &mut impl Chooser,
    ) -> Vec<(Time, Event)> {
        let typical = (cfg.hold.1 + cfg.think.1) * cfg.requests.max(1) / 2;
        let window = cfg.fault_window.unwrap_or(typical);
        let ft = cfg.timing.failure_timeout;
        let mut events = Vec::new();
        let mut push = |at: Time, event: Event| events.push((at, event));
        for _ in 0..cfg.crashes {
            let at = start + chooser.duration(Duration::ZERO, window);
            let node = NodeId(chooser.number(1, cfg.nodes));
            let silent = chooser.chance(0.5);
            push(at, Event::Crash { node, silent });
            let down_for = chooser.duration(ft / 2, ft * 4);
            push(at + down_for, Event::Restart { node });
        }
        for _ in 0..cfg.pauses {
            let at = start + chooser.duration(Duration::ZERO, window);
            let node = NodeId(chooser.number(1, cfg.nodes));
            let until = at + chooser.duration(ft / 2, ft * 4);
            push(at, Event::Pause { node });
            push(until, Event::Resume { node });
        }
        for id in 0..cfg.partitions {
            let at = start + chooser.duration(Duration::ZERO, window);
            let side = minority(cfg.nodes, chooser);
            push(at, Event::Partition { id, side, way: Way::Both });
            let lasts = chooser.duration(ft, ft * 6);
            push(at + lasts, Event::Heal { id });
        }
        for id in 0..cfg.delays {
            let at = start + chooser.duration(Duration::ZERO, window);
            let node = NodeId(chooser.number(1, cfg.nodes));
            let extra = chooser.duration(cfg.delay_spike.0, cfg.delay_spike.1);
            let lasts = chooser.duration(ft, ft * 6);
            push(at, Event::DelaySpike { id, node, extra });
            push(at + lasts, Event::DelayOver { id, node });
        }
        for _ in 0..cfg.resets {
            let at = start + chooser.duration(Duration::ZERO, window);
            let node = NodeId(chooser.number(1, cfg.nodes));
            push(at, Event::Reset { node });
        }
        for id in 0..cfg.drops {
            let at = start + chooser.duration(Duration::ZERO, window);
            let node = NodeId(chooser.number(1, cfg.nodes));
            let share = chooser.fraction(0.1, 0.5);
            let lasts = chooser.duration(ft, ft * 6);
            push(at, Event::Loss { id, node, share: Share(share) });
            push(at + lasts, Event::LossOver { id, node });
        }
        // After the others, so that runs without them draw what they
        // always drew.
        for n in 0..cfg.one_way_partitions {
            let id = cfg.partitions + n;
            let at = start + chooser.duration(Duration::ZERO, window);
            let side = minority(cfg.nodes, chooser);
            let way = if chooser.chance(0.5) { Way::Inbound } else { Way::Outbound };
            push(at, Event::Partition { id, side, way });
            let lasts = chooser.duration(ft, ft * 6);
            push(at + lasts, Event::Heal { id });
        }
        events
    }

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

/// A random minority of a cluster of `nodes` (one node of two).
fn minority(nodes: u32, chooser: &mut impl Chooser) -> BTreeSet<NodeId> {
    let minority = chooser.number(1, (nodes / 2).max(1));
    let mut ids: Vec<NodeId> = (1..=nodes).map(NodeId).collect();
    let mut side = BTreeSet::new();
    for _ in 0..minority {
        side.insert(ids.swap_remove(chooser.index(ids.len())));
    }
    side
}
