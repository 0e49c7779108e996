//! # coterie-client
//!
//! Clients for a coterie cluster, for Rust programs and for the `coterie`
//! CLI itself: async ones on tokio, and a blocking one.
//!
//! - [`Client`]: a session on a node's client port, in the binary protocol
//!   the CLI speaks. A lock lives as long as the connection (or, with a
//!   ping, as long as its lease): `lock`, `release`, `lost` to learn that
//!   a held lock is gone, `locks`, elections, `status`, `watch`.
//! - [`blocking::Client`]: the same lock session on a standard-library
//!   socket, for programs without an async runtime; a thread of its own
//!   keeps the lease while the program works.
//! - [`HttpClient`]: the HTTP/JSON API's sessions and named locks, over a
//!   keep-alive connection ([`http`]).
//! - [`WitnessClient`]: the witness a test cluster checks its entries at.
//! - The wire underneath, shared with the node: [`protocol`] (what is
//!   said), [`codec`] (frames on tokio streams), [`auth`] (the
//!   challenge–response handshake when the cluster has a secret),
//!   [`tls`] (TLS on every port, when the cluster has certificates) and
//!   [`stream`] (a connection, plain or TLS).
//!
//! ```no_run
//! # async fn run() -> Result<(), coterie_client::ClientError> {
//! use coterie_client::{Client, LockRequest, Outcome};
//! let mut client = Client::connect("127.0.0.1:7101").await?;
//! let req = LockRequest::new(["jobs/nightly"]).timeout(Some(std::time::Duration::from_secs(5)));
//! if let Outcome::Granted(grant) = client.request(&req).await? {
//!     println!("held with fence {}", grant.fence());
//!     client.release().await?;
//! }
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod auth;
pub mod blocking;
mod client;
pub mod codec;
pub mod http;
pub mod protocol;
pub mod stream;
pub mod tls;

pub use client::{
    client_label, Acquired, Client, ClientError, Credentials, Entry, Grant, HoldEvent, Lock,
    LockRequest, Loss, Observer, Outcome, Watch, WitnessClient,
};
pub use coterie_core::Mode;
pub use http::{HttpClient, HttpError, HttpGrant, Wait};
