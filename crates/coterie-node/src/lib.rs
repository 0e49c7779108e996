//! # coterie-node
//!
//! The tokio runtime of a coterie node, around the sans-IO engine of
//! `coterie-core`.
//!
//! ## Layout
//! - [`config`]: the cluster's TOML file, checked as it is read.
//! - [`codec`]: frames on tokio streams.
//! - [`protocol`]: what clients and the witness say.
//! - [`node`]: one node's runtime, which starts the parts below.
//! - `agent`: the engine and its output driver (grants, frames, records).
//! - `transport`: peer connections, dial and accept, frames.
//! - `links`: the reliable session with each peer, in the agent's state.
//! - `app`: the application task: client sessions and their local queue.
//! - `faults`: faults injected on request (`coterie fault`).
//! - `throttle`: at most a log line a second for what a remote party repeats.
//! - [`state`]: a node's stable storage, one record in two checksummed slots.
//! - [`storage`]: the group-commit writer that makes records durable off the
//!   runtime's thread.
//! - [`client`]: the client side of the client port and of the witness.
//! - [`witness`]: the shared resource that checks safety on a real cluster.
#![warn(missing_docs)]

mod agent;
mod app;
pub mod auth;
pub mod client;
pub mod codec;
pub mod config;
mod faults;
mod gate;
mod links;
mod local;
pub mod node;
pub mod protocol;
pub mod state;
pub mod storage;
mod throttle;
mod transport;
pub mod witness;

pub use client::{
    Acquired, Client, ClientError, Credentials, Entry, Lock, Loss, Watch, WitnessClient,
};
pub use config::Config;
