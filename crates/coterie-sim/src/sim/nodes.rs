//! The simulated nodes: each one's engine while it is up, its
//! incarnation, its sessions with its peers, the deadline its wake-up is
//! queued for, and its stable storage, which outlives a crash as a disk
//! would.

use coterie_core::session::{Limits, Session};
use coterie_core::{Delta, Engine, NodeId, Restored, Time};
use std::collections::BTreeMap;

#[derive(Clone)]
struct SimNode {
    /// The running process: `None` while the node is down.
    engine: Option<Engine>,
    incarnation: u32,
    /// The deadline a `Wake` is queued for.
    wake_at: Option<Time>,
    /// The session with each peer, new with each incarnation.
    sessions: BTreeMap<NodeId, Session>,
    /// The changes its engine asked to persist, applied in order.
    stable: Option<Restored>,
}

/// The cluster's nodes, `n1` to `nN`.
#[derive(Clone)]
pub(super) struct Nodes(BTreeMap<NodeId, SimNode>);

impl Nodes {
    /// `count` nodes, none of them booted yet.
    pub(super) fn new(count: u32) -> Nodes {
        let node = SimNode {
            engine: None,
            incarnation: 0,
            wake_at: None,
            sessions: BTreeMap::new(),
            stable: None,
        };
        Nodes((1..=count).map(|id| (NodeId(id), node.clone())).collect())
    }

    /// Starts `id`'s incarnation with `engine` and a new session with each
    /// of `peers`.
    pub(super) fn boot(&mut self, id: NodeId, engine: Engine, peers: &[NodeId], limits: Limits) {
        let n = self.get_mut(id);
        n.engine = Some(engine);
        n.wake_at = None;
        n.sessions = peers.iter().map(|&p| (p, Session::new(limits))).collect();
    }

    /// `id` goes down, its stable storage kept: what its engine forgot of
    /// its locks, for the report.
    pub(super) fn crash(&mut self, id: NodeId) -> u64 {
        let n = self.get_mut(id);
        n.wake_at = None;
        n.engine.take().map_or(0, |e| e.counters().forgotten)
    }

    /// `id`'s next incarnation, before it boots.
    pub(super) fn next_incarnation(&mut self, id: NodeId) -> u32 {
        let n = self.get_mut(id);
        n.incarnation += 1;
        n.incarnation
    }

    /// Whether `id` is up.
    pub(super) fn up(&self, id: NodeId) -> bool {
        self.0[&id].engine.is_some()
    }

    /// Whether `id` is up in incarnation `incarnation`.
    pub(super) fn live(&self, id: NodeId, incarnation: u32) -> bool {
        let n = &self.0[&id];
        n.engine.is_some() && n.incarnation == incarnation
    }

    /// The nodes that are up.
    pub(super) fn up_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.0.iter().filter(|(_, n)| n.engine.is_some()).map(|(&id, _)| id)
    }

    /// `id`'s incarnation (0 for its first).
    pub(super) fn incarnation(&self, id: NodeId) -> u32 {
        self.0.get(&id).map_or(0, |n| n.incarnation)
    }

    /// `id`'s engine, while it is up.
    pub(super) fn engine(&self, id: NodeId) -> Option<&Engine> {
        self.0[&id].engine.as_ref()
    }

    /// The same, to drive.
    pub(super) fn engine_mut(&mut self, id: NodeId) -> Option<&mut Engine> {
        self.0.get_mut(&id).and_then(|n| n.engine.as_mut())
    }

    /// Every node up, with its engine.
    pub(super) fn engines(&self) -> impl Iterator<Item = (NodeId, &Engine)> + '_ {
        self.0.iter().filter_map(|(&id, n)| Some((id, n.engine.as_ref()?)))
    }

    /// `id`'s session with `peer`.
    pub(super) fn session(&mut self, id: NodeId, peer: NodeId) -> &mut Session {
        self.get_mut(id).sessions.get_mut(&peer).expect("a session per peer")
    }

    /// The deadline `id`'s wake-up is queued for.
    pub(super) fn wake_at(&self, id: NodeId) -> Option<Time> {
        self.0[&id].wake_at
    }

    /// Notes the deadline `id`'s wake-up is queued for (`None`: none is).
    pub(super) fn set_wake_at(&mut self, id: NodeId, at: Option<Time>) {
        self.get_mut(id).wake_at = at;
    }

    /// What `id` kept in stable storage, for its next incarnation.
    pub(super) fn stable(&self, id: NodeId) -> Option<Restored> {
        self.0.get(&id).and_then(|n| n.stable.clone())
    }

    /// `id` makes `delta` durable.
    pub(super) fn persist(&mut self, id: NodeId, delta: Delta) {
        self.get_mut(id).stable.get_or_insert_with(Default::default).apply(delta);
    }

    /// Feeds every node's state to `h`, its times taken relative to `now`:
    /// id, incarnation, queued wake-up, engine (or that it is down),
    /// sessions and stable storage.
    pub(super) fn hash_at<H: std::hash::Hasher>(&self, h: &mut H, now: Time) {
        use std::hash::Hash;
        for (id, n) in &self.0 {
            id.hash(h);
            n.incarnation.hash(h);
            n.wake_at.map(|t| t.saturating_sub(now)).hash(h);
            match &n.engine {
                Some(engine) => {
                    true.hash(h);
                    engine.hash_state(h, now);
                }
                None => false.hash(h),
            }
            n.sessions.hash(h);
            n.stable.hash(h);
        }
    }

    fn get_mut(&mut self, id: NodeId) -> &mut SimNode {
        self.0.get_mut(&id).expect("a known node")
    }
}
