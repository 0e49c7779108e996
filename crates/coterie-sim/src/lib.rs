//! # coterie-sim
//!
//! A deterministic simulator for coterie's engines. A run builds one
//! [`Engine`](coterie_core::Engine) per node and drives them from a single
//! seeded event queue: messages travel FIFO connections with a random
//! delay, under the same reliable sessions as the node's (numbered,
//! acknowledged, sent again after a connection breaks); nodes crash and
//! restart, clients ask for the critical section and leave it. Faults on
//! demand: partitions, pauses, delay spikes (a node's messages slowed,
//! FIFO kept), loss windows (a share of a node's messages lost, above the
//! sessions) and connection resets (frames in flight lost below them).
//!
//! Every choice a run makes (delays, faults, the next requester, ties)
//! comes from one [`chooser`]: a seeded generator (the same seed always
//! replays the same run), or a depth-first enumeration of every choice.
//!
//! After every step the invariants are checked:
//! - **safety**: never more than `capacity` live nodes hold at once;
//! - **fences**: every grant's fence exceeds every earlier grant's (with
//!   capacity k > 1, where grants may land out of order: no fence is
//!   granted twice);
//! - **liveness**: every request of a node that stays up is granted;
//! - **deadlock**: never a state where a client waits and nothing but
//!   heartbeats can happen again;
//! - **agreement**: once faults stop, every live node follows the highest
//!   live id, at the same epoch.
//!
//! ## Layout
//! - [`chooser`]: where a run's choices come from.
//! - [`check`]: every schedule of a small configuration, explored.
//! - [`sim`]: one run: the [`Simulation`](sim::Simulation), the loop
//!   that carries out each event, with beside it a type per part, each
//!   owning its state (as TigerBeetle's simulator has its packet
//!   simulator, workload and state checker): the agenda of events to
//!   come, the nodes, the links between them (connections, which resets
//!   break, and the faults on messages), the faults on processes (their
//!   schedule, drawn at the start, and the paused nodes), the workload's
//!   clients and the checker that judges every grant, step and run's end;
//!   and the configuration and the report.
//! - [`invariant`]: the invariants, by name.
//! - [`suite`]: many seeds of a run, summarised; the conformance suite
//!   (in `tests/`) and `coterie sim` are built on it.
#![warn(missing_docs)]

pub mod check;
pub mod chooser;
pub mod invariant;
mod record;
pub mod sim;
pub mod suite;

pub use invariant::Invariant;
pub use sim::{Counts, EntryCost, Load, RunReport, SimConfig, Violation};
pub use suite::{run_seeds, Failure, Summary};
