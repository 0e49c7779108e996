//! The life of one request in the timestamp-ordered algorithms (`lamport`,
//! `ricart-agrawala`): idle, wanting with a stamp and the
//! peers still to hear from, holding. Not an algorithm: a part they share.

use crate::types::{CsState, NodeId, Stamp};
use std::collections::BTreeSet;

/// Where this node's request stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Ask {
    /// No request.
    Idle,
    /// Asked with `stamp`; still to hear from each of `awaiting` (what
    /// counts as hearing is the algorithm's rule).
    Wanting { stamp: Stamp, awaiting: BTreeSet<NodeId> },
    /// Inside the critical section with the request `stamp`.
    Held { stamp: Stamp },
}

impl Ask {
    /// The request as the engine reports it.
    pub(crate) fn cs_state(&self) -> CsState {
        match self {
            Ask::Idle => CsState::Idle,
            Ask::Wanting { .. } => CsState::Wanting,
            Ask::Held { .. } => CsState::Held,
        }
    }

    /// The stamp of the request under way, if any.
    pub(crate) fn stamp(&self) -> Option<Stamp> {
        match self {
            Ask::Idle => None,
            Ask::Wanting { stamp, .. } | Ask::Held { stamp } => Some(*stamp),
        }
    }

    /// `peer` no longer needs to be heard from (it answered, or is down).
    pub(crate) fn heard_from(&mut self, peer: NodeId) {
        if let Ask::Wanting { awaiting, .. } = self {
            awaiting.remove(&peer);
        }
    }
}
