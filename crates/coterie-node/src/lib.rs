//! # coterie-node
//!
//! The tokio runtime of a coterie node, around the sans-IO engine of
//! `coterie-core`.
//!
//! ## Layout
//! - [`config`]: the cluster's TOML file, checked as it is read.
//! - [`codec`]: frames on tokio streams.
//! - [`protocol`]: what clients and the witness say.
//! - [`node`]: one node's runtime, which builds the parts below and runs
//!   their tasks.
//! - The agent's side: `agent` (the engine and its output driver),
//!   `transport` (peer connections, dial and accept), `peers` (each peer's
//!   handles), `links` (the reliable session with each peer), `gate`
//!   (outputs held for stable storage), `holdback` (grants held by the
//!   lock delay).
//! - The application's side: `listener` (accepting connections),
//!   `handler` (one client connection), `session` (the rules every
//!   session follows), `sessions` (sessions with a TTL), `http` (the
//!   HTTP/JSON API over them), `sse` (its Server-Sent Event streams), `locks` (what its sessions hold and
//!   want, per name), `cluster` (who holds and who waits cluster wide;
//!   elections by name).
//! - What it counts: `metrics` (recorded as it happens), `exporter`
//!   (`/metrics`, with what is read off the node at each scrape).
//! - Beside them: `admission` (the handshake at the door), `faults`
//!   (faults injected on request, `coterie fault`), `events` (what
//!   watchers are told), `shutdown` (the stop signal), `throttle` (at most
//!   a log line a second for what a remote party repeats).
//! - [`auth`]: the challenge–response handshake itself.
//! - [`state`]: a node's stable storage, one record in two checksummed slots.
//! - [`storage`]: the group-commit writer that makes records durable off the
//!   runtime's thread.
//! - [`client`]: the client side of the client port and of the witness.
//! - [`witness`]: the shared resource that checks safety on a real cluster.
#![warn(missing_docs)]

mod admission;
mod agent;
pub mod auth;
pub mod client;
mod cluster;
pub mod codec;
pub mod config;
mod events;
mod exporter;
mod faults;
mod gate;
mod handler;
mod holdback;
mod http;
mod http_conn;
mod links;
mod listener;
mod locks;
mod metrics;
pub mod node;
mod peers;
pub mod protocol;
mod session;
mod sessions;
mod shutdown;
mod sse;
pub mod state;
pub mod storage;
mod throttle;
mod transport;
pub mod witness;

pub use client::{
    client_label, Acquired, Client, ClientError, Credentials, Entry, Grant, Lock, LockRequest,
    Loss, Observer, Outcome, Watch, WitnessClient,
};
pub use config::Config;
