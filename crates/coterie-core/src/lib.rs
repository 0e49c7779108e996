//! # coterie-core
//!
//! The sans-IO heart of coterie: every mutual-exclusion and election
//! algorithm as a deterministic state machine. Nothing here opens a socket,
//! reads a clock or draws an unseeded random number; time arrives as `now`,
//! effects leave as [`Action`]s, so the same code runs in the simulator and
//! on real TCP.
//!
//! ## Layout
//! - [`types`]: node ids, epochs, fencing tokens, Lamport clocks, stamps.
//! - [`name`]: the names of a cluster's locks.
//! - [`outbox`]: the actions an algorithm can ask for, and its outbox.
//! - [`algorithm`]: the [`MutexAlgorithm`] and [`ElectionAlgorithm`] traits.
//! - [`mutex`] and [`election`]: the algorithms, one file each.
//! - [`detector`]: the heartbeat failure detector.
//! - [`membership`]: views a majority agreed to, and the lease without
//!   which a node does nothing (`partitions = "majority"`).
//! - [`registry`]: the one table where an algorithm is added.
//! - [`engine`]: one node's stack composed: detector → election → mutex.
//! - [`parked`]: messages for a lock in use here with other permits, kept
//!   until it is idle.
//! - [`session`]: numbered, acknowledged and resent frames: reliable links
//!   across broken connections.
//! - [`wire`]: frames, the codec and the peer handshake.
#![warn(missing_docs)]

pub mod algorithm;
mod demand;
pub mod detector;
pub mod election;
pub mod engine;
pub mod erased;
pub mod membership;
pub mod mutex;
pub mod name;
pub mod outbox;
pub mod parked;
mod records;
pub mod registry;
mod resources;
pub mod session;
pub mod stable;
#[cfg(test)]
mod testkit;
pub mod types;
pub mod wire;

/// The start of the cluster's shared clock, 2020-01-01T00:00:00Z, as time
/// since the Unix epoch: milliseconds on that clock fit the 40-bit major
/// part of a [`Fence`] until 2054.
pub const CLUSTER_ERA: std::time::Duration = std::time::Duration::from_secs(1_577_836_800);

pub use algorithm::{
    AlgoConfig, Algorithm, Detector, ElectionAlgorithm, Forgetting, MutexAlgorithm, MutexOptions,
    Priority, Timing, UnknownPriority, MAX_READS,
};
pub use demand::{Demand, Takers};
pub use engine::{Engine, EngineError, Output, Status, ViewStatus};
pub use membership::{LeaseTiming, Partitions, UnknownPartitions, View};
pub use name::{Name, NameError};
pub use outbox::{Action, Message, NoTimer, Outbox, Time, Timer, TimerId};
pub use stable::{Delta, Restored};
pub use types::{CsState, Epoch, Fence, LamportClock, Mode, NodeId, Stamp, Way};
