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
            Invariant::Agreement => "agreement",
            Invariant::Wire => "wire",
        }
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
