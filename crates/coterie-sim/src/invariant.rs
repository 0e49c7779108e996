//! The invariants every run is judged by.

use serde::Serialize;
use std::fmt;

/// What a run must never break.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Invariant {
    /// Never more than `capacity` live nodes hold at once.
    Safety,
    /// Every grant's fence exceeds every earlier grant's (with k holders:
    /// no fence is granted twice).
    Fence,
    /// Every request of a node that stays up is granted.
    Liveness,
    /// No state is reached where a client waits, no fault is pending or in
    /// force, and nothing but heartbeats can ever happen again: every node
    /// idle (no algorithm timer armed, every peer up), no other message in
    /// flight, and a failure timeout of heartbeats changing nothing. It is
    /// a liveness failure caught the moment it is certain, rather than at
    /// the run's time limit.
    Deadlock,
    /// Once faults stop, every live node follows the highest live id, at
    /// the same epoch.
    Agreement,
    /// Every message a node sends, its peer can read.
    Wire,
}

impl Invariant {
    /// Its name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::Safety => "safety",
            Invariant::Fence => "fence",
            Invariant::Liveness => "liveness",
            Invariant::Deadlock => "deadlock",
            Invariant::Agreement => "agreement",
            Invariant::Wire => "wire",
        }
    }

    /// Whether it is judged at a state, the moment it breaks (safety,
    /// fences, the wire, deadlock), rather than at a run's end (liveness at
    /// the time limit, agreement once the cluster has settled).
    pub fn at_a_state(self) -> bool {
        matches!(self, Invariant::Safety | Invariant::Fence | Invariant::Wire | Invariant::Deadlock)
    }

    /// Whether breaking it lets two holders act at once (safety or a
    /// fence), rather than a request wait or a view lag.
    pub fn is_unsafe(self) -> bool {
        matches!(self, Invariant::Safety | Invariant::Fence)
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
