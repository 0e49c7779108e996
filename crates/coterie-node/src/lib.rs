//! # coterie-node
//!
//! The tokio runtime of a coterie node, around the sans-IO engine of
//! `coterie-core`.
//!
//! ## Layout
//! - [`config`]: the cluster's TOML file, checked as it is read.
//! - [`codec`]: frames on tokio streams.
//! - [`protocol`]: what clients and the witness say.
//! - [`node`]: the agent and the application task of one node.
//! - [`client`]: the client side of the client port and of the witness.
//! - [`witness`]: the shared resource that checks safety on a real cluster.
#![warn(missing_docs)]

pub mod client;
pub mod codec;
pub mod config;
mod faults;
pub mod node;
pub mod protocol;
pub mod state;
pub mod witness;

pub use client::{Acquired, Client, ClientError, Entry, Watch, WitnessClient};
pub use config::Config;
