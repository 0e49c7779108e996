//! What the algorithms' unit tests share: short names for nodes and
//! stamps, the shape of a sent message, and a node with its peers up.

use crate::algorithm::{Algorithm, Out};
use crate::outbox::{Action, Outbox, Time};
use crate::types::{NodeId, Stamp};
use std::time::Duration;

/// The moment a test's inputs happen at, unless it says otherwise.
pub(crate) const T: Time = Duration::ZERO;

/// Node `id`.
pub(crate) fn n(id: u32) -> NodeId {
    NodeId(id)
}

/// The stamp `(ts, id)`.
pub(crate) fn stamp(ts: u64, id: u32) -> Stamp {
    Stamp { ts, node: n(id) }
}

/// The action of sending `msg` to node `to`.
pub(crate) fn send<M, X>(to: u32, msg: M) -> Action<M, X> {
    Action::Send { to: n(to), msg }
}

/// `alg` once it has heard from every one of `peers` (the engine reports
/// each peer up as it first hears from it); what it did meanwhile is
/// dropped.
pub(crate) fn with_up<A: Algorithm>(mut alg: A, peers: impl IntoIterator<Item = NodeId>) -> A {
    let mut out = Out::<A>::new();
    for p in peers {
        alg.handle_peer_up(T, p, &mut out);
    }
    alg
}

/// The messages among `out`'s actions, in order, taking them all.
pub(crate) fn sends<M: Clone, X>(out: &mut Outbox<M, X>) -> Vec<(NodeId, M)> {
    out.take()
        .into_iter()
        .filter_map(|a| match a {
            Action::Send { to, msg } => Some((to, msg)),
            _ => None,
        })
        .collect()
}
