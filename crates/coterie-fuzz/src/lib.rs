//! # coterie-fuzz
//!
//! One fuzz target per input that comes from outside a node's process: what
//! a peer sends ([`peer`]), what a client sends ([`client`]), the
//! authentication handshake either may open with ([`handshake`]), what a
//! node sends the witness ([`witness`]), and the state file a restarted node
//! reads ([`state_file`]). Each target takes arbitrary bytes and drives
//! the same decoders and the same engine the node uses; the property is
//! that nothing panics, hangs or allocates without bound, and that what is
//! accepted is handled as the node would.
//!
//! The targets are plain functions, so that three drivers share them:
//! - `fuzz/` at the repository's root, a cargo-fuzz (libFuzzer) crate with
//!   one coverage-guided binary per target (`scripts/fuzz.sh`);
//! - this crate's tests, which run every target over its committed corpus
//!   (`fuzz/corpus/<target>/`), every input that once crashed it
//!   (`fuzz/regressions/<target>/`), the [`seeds`], and a few thousand
//!   seeded mutations of them: a few seconds in CI;
//! - [`seeds`], which `scripts/fuzz.sh` writes into an empty corpus to start
//!   from well-formed inputs.
#![warn(missing_docs)]

pub mod client;
pub mod handshake;
pub mod mutate;
pub mod peer;
pub mod seeds;
pub mod state_file;
pub mod witness;

/// A fuzz target.
pub struct Target {
    /// Its name: the cargo-fuzz binary and the corpus directory.
    pub name: &'static str,
    /// Runs one input.
    pub run: fn(&[u8]),
    /// Well-formed inputs to start from.
    pub seeds: fn() -> Vec<Vec<u8>>,
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target { name: "peer", run: peer::run, seeds: seeds::peer },
    Target { name: "handshake", run: handshake::run, seeds: seeds::handshake },
    Target { name: "client", run: client::run, seeds: seeds::client },
    Target { name: "witness", run: witness::run, seeds: seeds::witness },
    Target { name: "state_file", run: state_file::run, seeds: seeds::state_file },
];

/// Splits `bytes` into the bodies of the frames they hold, as the node's
/// reader does: a length prefix over [`MAX_FRAME`](coterie_core::wire::MAX_FRAME)
/// or a torn frame ends the stream (the node closes the connection).
pub fn frames(mut bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let header: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
        let len = coterie_core::wire::frame_len(header).ok()?;
        let body = bytes.get(4..4 + len)?;
        bytes = &bytes[4 + len..];
        Some(body)
    })
}

/// The frames of `values`, each with its length prefix, one after another.
pub fn stream<T: serde::Serialize>(values: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        coterie_core::wire::write_frame(v, &mut out);
    }
    out
}
