//! What the rest of the node reads of the engine: a [`View`], taken from
//! the agent under its lock (and holding it until dropped, so never across
//! an `.await`: the guard is not `Send`), with a getter for each thing the
//! application, the transport and the exporter ask.

use crate::effects::{Effects, Stack};
use coterie_core::engine::RequestError;
use coterie_core::{CsState, Name, NodeId, Stamp, Status};
use std::sync::MutexGuard;
use std::time::Duration;

/// Where the engine stands with one lock, for listings.
#[derive(Clone, Debug)]
pub(crate) struct LockView {
    /// Whether the node holds, wants or ignores it.
    pub(crate) state: CsState,
    /// The stamp of the node's request, for the algorithms that order
    /// requests by it.
    pub(crate) stamp: Option<Stamp>,
}

/// The engine as it stands now; see the module documentation.
pub(crate) struct View<'a> {
    stack: MutexGuard<'a, Stack>,
    now: Duration,
    effects: &'a Effects,
}

impl<'a> View<'a> {
    pub(crate) fn new(stack: MutexGuard<'a, Stack>, now: Duration, effects: &'a Effects) -> Self {
        View { stack, now, effects }
    }

    /// Why the node takes no new request, if it holds no lease from a
    /// majority (`partitions = "majority"`) and has had time to get one:
    /// `no quorum: n1 hears n1, n2 of 5`. A node that has installed no
    /// view yet and started less than two failure timeouts ago is given
    /// them to form its first.
    pub(crate) fn no_quorum(&self) -> Option<String> {
        let (engine, now) = (self.stack.engine(), self.now);
        let membership = engine.membership();
        let patience = 2 * engine.config().timing.failure_timeout;
        let forming = membership.view().is_none() && now < patience;
        if !membership.majority_mode() || membership.quorum(now) || forming {
            return None;
        }
        let hears: Vec<String> =
            membership.vouchers(now).iter().map(|n| format!("n{}", n.0)).collect();
        Some(format!(
            "no quorum: n{} hears {} of {}; a majority ({}) must vouch for a node before it \
             grants",
            engine.id().0,
            hears.join(", "),
            engine.config().members.len(),
            membership.majority()
        ))
    }

    /// Whether the node has joined the cluster (the engine's view).
    pub(crate) fn joined(&self) -> bool {
        self.stack.engine().joined()
    }

    /// Whether lock `name` may be asked for with `permits` (the engine's
    /// rules: see [`Engine::check_permits`](coterie_core::Engine::check_permits)).
    pub(crate) fn check_permits(&self, name: &Name, permits: u32) -> Result<(), RequestError> {
        self.stack.engine().check_permits(name, permits)
    }

    /// Every member of the cluster, this node included.
    pub(crate) fn members(&self) -> Vec<NodeId> {
        self.stack.engine().config().members.clone()
    }

    /// The peers counted up now.
    pub(crate) fn peers_up(&self) -> Vec<NodeId> {
        let engine = self.stack.engine();
        engine.config().peers().filter(|&p| engine.is_up(p)).collect()
    }

    /// Where the engine stands with each of `names`.
    pub(crate) fn lock_views(&self, names: &[Name]) -> Vec<LockView> {
        let engine = self.stack.engine();
        names
            .iter()
            .map(|n| LockView { state: engine.cs_state_of(n), stamp: engine.request_stamp(n) })
            .collect()
    }

    /// The node's heartbeat period and failure timeout.
    pub(crate) fn timing(&self) -> (Duration, Duration) {
        let timing = self.stack.engine().config().timing;
        (timing.heartbeat, timing.failure_timeout)
    }

    /// The node's status, for `coterie status`, its sessions included.
    pub(crate) fn status(&self) -> Status {
        Status { sessions: self.stack.links().status(), ..self.stack.engine().status_at(self.now) }
    }

    /// What stable storage has written since the node started (`None`:
    /// no state directory).
    pub(crate) fn storage_counts(&self) -> Option<crate::state::Counts> {
        self.effects.storage_counts()
    }
}
