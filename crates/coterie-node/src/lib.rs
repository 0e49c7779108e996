//! # coterie-node
//!
//! The tokio runtime of a coterie node, around the sans-IO engine of
//! `coterie-core`.
//!
//! ## Layout
//! - [`config`]: the cluster's TOML file, checked as it is read.
//! - [`codec`], [`protocol`], [`auth`], [`tls`], [`stream`]: the wire — frames on tokio
//!   streams, what clients and the witness say, the challenge–response
//!   handshake — shared with the clients of the `coterie-client` crate.
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
//! - Beside them: `admission` (the handshake at the door), `certs` (its
//!   TLS configurations, reloaded when their files change), `faults`
//!   (faults injected on request, `coterie fault`), `events` (what
//!   watchers are told), `shutdown` (the stop signal), `throttle` (at most
//!   a log line a second for what a remote party repeats).
//! - [`state`]: a node's stable storage: a snapshot and a log of changes.
//! - [`storage`]: the group-commit writer that makes records durable off the
//!   runtime's thread.
//! - [`Client`], [`WitnessClient`]: re-exported from `coterie-client`.
//! - [`witness`]: the shared resource that checks safety on a real cluster.
//! - [`pki`]: certificates a lab can make (`coterie init --tls`).
#![warn(missing_docs)]

mod admission;
mod agent;
mod certs;
mod cluster;
pub mod config;
mod effects;
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
pub mod pki;
mod session;
mod sessions;
mod shutdown;
mod sse;
pub mod state;
pub mod storage;
mod throttle;
mod transport;
mod view;
pub mod witness;

pub use config::Config;
/// The wire and the client side of it live in `coterie-client`; the node
/// serves what they say.
pub use coterie_client::{auth, codec, protocol, stream, tls};
pub use coterie_client::{
    client_label, Acquired, Client, ClientError, Credentials, Entry, Grant, HoldEvent, Lock,
    LockRequest, Loss, Mode, Observer, Outcome, Watch, WitnessClient,
};
