//! Identifiers, epochs, fencing tokens and Lamport clocks.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A node's identity: a small integer that doubles as its election priority
/// (the higher the id, the stronger the claim to be coordinator).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// The term of one coordinator, as a ballot: an election *round* in the
/// high bits and the winner's id in the low 16 bits. A winner takes a round
/// one greater than every round it has seen, so epochs only grow across the
/// cluster; and because the winner's id is part of the epoch, two nodes can
/// never claim the same one, not even on two sides of a partition (whose
/// fences therefore never collide either).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub struct Epoch(pub u64);

impl Epoch {
    /// Bits given to the leader's id.
    const LEADER_BITS: u32 = 16;

    /// The epoch of `round` won by `leader`.
    pub const fn new(round: u64, leader: NodeId) -> Epoch {
        Epoch((round << Self::LEADER_BITS) | (leader.0 & 0xffff) as u64)
    }

    /// The election round.
    pub fn round(self) -> u64 {
        self.0 >> Self::LEADER_BITS
    }

    /// The node that won it (meaningless for the zero epoch).
    pub fn leader(self) -> NodeId {
        NodeId((self.0 & 0xffff) as u32)
    }

    /// The epoch `leader` takes when it wins the round after this one. At
    /// the last round (2^48 − 1, reached only by believing a member that
    /// lies) it stays there instead of wrapping round to epoch 0: epochs,
    /// and the fences built on them, never go back.
    pub fn next_for(self, leader: NodeId) -> Epoch {
        Epoch::new((self.round() + 1).min(u64::MAX >> Self::LEADER_BITS), leader)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e{}.{}", self.round(), self.leader().0)
    }
}

/// A fencing token: every grant in the cluster carries one, strictly greater
/// than the token of every earlier grant. A resource that remembers the
/// largest token it accepted can refuse a holder whose grant went stale.
///
/// Algorithms build tokens from two parts: a `major` part that orders eras
/// (an election epoch, a Lamport timestamp) in the high 40 bits and a `minor`
/// part (a grant counter, a node id) in the low 24 bits.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub struct Fence(pub u64);

impl Fence {
    /// Bits given to the minor part.
    pub const MINOR_BITS: u32 = 24;

    /// The largest minor part. A counter that has reached it has run out:
    /// the algorithm must move to a new major part (a new term, a new
    /// generation) before it grants again, since [`Fence::new`] saturates
    /// and a second grant would repeat the token.
    pub const MINOR_MAX: u64 = (1 << Self::MINOR_BITS) - 1;

    /// Packs `major` and `minor` into one token. Parts wider than their
    /// fields saturate rather than wrap, so ordering is never inverted.
    pub fn new(major: u64, minor: u64) -> Fence {
        let major_max = u64::MAX >> Self::MINOR_BITS;
        Fence((major.min(major_max) << Self::MINOR_BITS) | minor.min(Self::MINOR_MAX))
    }

    /// The high part: the era the token was issued in.
    pub fn major(self) -> u64 {
        self.0 >> Self::MINOR_BITS
    }

    /// The low part: the position within the era.
    pub fn minor(self) -> u64 {
        self.0 & Self::MINOR_MAX
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A Lamport logical clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LamportClock(u64);

impl LamportClock {
    /// The current value.
    pub fn now(self) -> u64 {
        self.0
    }

    /// Advances the clock for a local event and returns the new value.
    /// It stops at `u64::MAX` rather than wrap round to small values: only
    /// a member that lies sends a timestamp that high, and a clock that
    /// went back would break every timestamp order; a stopped one keeps
    /// requests ordered by node id.
    pub fn tick(&mut self) -> u64 {
        self.0 = self.0.saturating_add(1);
        self.0
    }

    /// Merges a timestamp seen on an incoming message.
    pub fn observe(&mut self, seen: u64) {
        self.0 = self.0.max(seen);
    }
}

/// A request's priority in timestamp-ordered algorithms: earlier timestamp
/// first, lower node id breaking ties. The derived ordering is exactly that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Stamp {
    /// Lamport timestamp of the request.
    pub ts: u64,
    /// The requester, the tie-breaker.
    pub node: NodeId,
}

impl From<Stamp> for Fence {
    /// The fence of an entry made in stamp order: the timestamp in the
    /// high part, the node id in the low, so fences order as stamps do.
    fn from(stamp: Stamp) -> Fence {
        Fence::new(stamp.ts, u64::from(stamp.node.0))
    }
}

/// Where a node stands with respect to the critical section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CsState {
    /// Not interested.
    Idle,
    /// Asked for the critical section and waiting to be granted.
    Wanting,
    /// Inside the critical section.
    Held,
}

impl fmt::Display for CsState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CsState::Idle => "idle",
            CsState::Wanting => "wanting",
            CsState::Held => "held",
        })
    }
}

/// Which way a partition cuts a link between a node (or a side) and its
/// peers (or the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Way {
    /// Nothing passes either way.
    #[default]
    Both,
    /// The node (side) hears nothing from the peers (the rest), which
    /// still hear it.
    Inbound,
    /// The peers (the rest) hear nothing from the node (side), which
    /// still hears them.
    Outbound,
}

impl Way {
    /// Whether it stops what comes in.
    pub fn cuts_inbound(self) -> bool {
        matches!(self, Way::Both | Way::Inbound)
    }

    /// Whether it stops what goes out.
    pub fn cuts_outbound(self) -> bool {
        matches!(self, Way::Both | Way::Outbound)
    }
}

/// How a grant holds its lock: as one of any number of readers, or as
/// its one writer. Readers share the lock; a writer holds it alone. An
/// algorithm without a reader form
/// ([`Claims::readers`](crate::registry::Claims::readers)) takes every
/// read as a write, which is always safe.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Shared with other readers, never with a writer.
    Read,
    /// Alone: the classic critical section.
    #[default]
    Write,
}

impl Mode {
    /// Whether a grant of this mode and one of `other` may not be held at
    /// once: unless both read.
    pub fn conflicts(self, other: Mode) -> bool {
        self == Mode::Write || other == Mode::Write
    }

    /// The one mode a request made for `waiting` sessions, `reading` of
    /// them to read, is asked in (by a node that an algorithm grants once
    /// for all its sessions): a read when every one of them reads, else a
    /// write, which serves a reader too.
    pub fn serving(waiting: u32, reading: u32) -> Mode {
        if reading >= waiting {
            Mode::Read
        } else {
            Mode::Write
        }
    }

    /// The spelling used by the CLI, the HTTP API and listings.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Read => "read",
            Mode::Write => "write",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_orders_by_major_then_minor() {
        assert!(Fence::new(2, 0) > Fence::new(1, 999));
        assert!(Fence::new(1, 2) > Fence::new(1, 1));
        assert_eq!(Fence::new(7, 9).major(), 7);
        assert_eq!(Fence::new(7, 9).minor(), 9);
    }

    #[test]
    fn clocks_and_epochs_stop_at_the_top_instead_of_wrapping() {
        let mut clock = LamportClock::default();
        clock.observe(u64::MAX); // a liar's timestamp
        assert_eq!(clock.tick(), u64::MAX);
        let top = Epoch(u64::MAX);
        assert!(top.next_for(NodeId(2)).round() == top.round());
        assert!(Epoch::new(5, NodeId(1)).next_for(NodeId(1)) > Epoch::new(5, NodeId(9)));
    }

    #[test]
    fn fence_parts_saturate_instead_of_wrapping() {
        let big = Fence::new(3, u64::MAX);
        assert!(big < Fence::new(4, 0));
        assert_eq!(big.major(), 3);
    }

    #[test]
    fn epochs_order_by_round_then_leader_and_never_collide() {
        let a = Epoch::new(3, NodeId(5));
        let b = Epoch::new(3, NodeId(4));
        assert_ne!(a, b);
        assert!(a > b);
        assert!(Epoch::new(4, NodeId(1)) > a);
        assert_eq!(a.next_for(NodeId(2)), Epoch::new(4, NodeId(2)));
        assert_eq!((a.round(), a.leader()), (3, NodeId(5)));
    }

    #[test]
    fn stamps_order_by_timestamp_then_id() {
        let a = Stamp { ts: 3, node: NodeId(9) };
        let b = Stamp { ts: 5, node: NodeId(1) };
        let c = Stamp { ts: 5, node: NodeId(2) };
        assert!(a < b && b < c);
    }
}
