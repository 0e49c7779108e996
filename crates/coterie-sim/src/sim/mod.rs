//! One simulated run and its parts, a file each: the [`Simulation`]
//! itself (the loop that carries out each event, with every part at
//! hand) and the parts it asks, each a type that owns its state: the
//! `Agenda` (the events to come), the `Nodes` (engines, sessions, stable
//! storage), the `Links` (connections, and the faults on messages), the
//! `Faults` on processes (the schedule drawn for a run; paused nodes),
//! the `Workload` (the clients and what they still have to do) and the
//! `Checker` (what every grant, step and run's end is judged by). Beside
//! them: [`config`] (what a run is asked to do), [`report`] (what it
//! saw), the clients' ids and the hasher of states. No part imports the
//! simulation: it hands each what it needs.

mod agenda;
mod checker;
mod client;
pub mod config;
mod faults;
mod hash;
mod links;
mod nodes;
pub mod report;
mod simulation;
mod workload;

pub use config::{FaultDraw, Load, SimConfig};
pub use report::{Counts, EntryCost, Injected, RunReport, Violation};
pub use simulation::{run, Simulation};
