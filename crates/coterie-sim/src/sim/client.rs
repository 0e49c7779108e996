//! A client of the workload, and where it stands.

use coterie_core::NodeId;

/// A client: the `slot`-th session at `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct ClientId {
    pub(super) node: NodeId,
    pub(super) slot: u32,
}

impl std::fmt::Display for ClientId {
    /// `n2` for a node's first client, `n2.2` for its second, and so on:
    /// a run with one client per node reads as it always did.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.slot {
            0 => write!(f, "{}", self.node),
            slot => write!(f, "{}.{}", self.node, slot + 1),
        }
    }
}

/// Where a client stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum ClientState {
    Thinking,
    Waiting,
    Holding,
    Done,
}
