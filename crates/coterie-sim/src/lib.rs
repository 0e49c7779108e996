//! # coterie-sim
//!
//! A deterministic simulator for coterie's engines. A run builds one
//! [`Engine`](coterie_core::Engine) per node and drives them from a single
//! seeded event queue: messages travel reliable FIFO links with a random
//! delay, nodes crash and restart, clients ask for the critical section and
//! leave it. Faults on demand: partitions, pauses, delay spikes (a node's
//! messages slowed, FIFO kept) and loss windows (a share of a node's
//! messages lost). The same seed always replays the same run.
//!
//! After every step the invariants are checked:
//! - **safety**: never more than `capacity` live nodes hold at once;
//! - **fences**: every grant's fence exceeds every earlier grant's (with
//!   capacity k > 1, where grants may land out of order: no fence is
//!   granted twice);
//! - **liveness**: every request of a node that stays up is granted;
//! - **agreement**: once faults stop, every live node follows the highest
//!   live id, at the same epoch.
//!
//! ## Layout
//! - [`sim`]: one run: the event queue, the nodes, the workload, the checks.
//! - [`suite`]: many seeds of a run, summarised; the conformance suite
//!   (in `tests/`) and `coterie sim` are built on it.
#![warn(missing_docs)]

pub mod sim;
pub mod suite;

pub use sim::{Load, RunReport, SimConfig, Violation};
pub use suite::{run_seeds, Failure, Summary};
