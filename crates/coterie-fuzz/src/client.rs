//! Target `client`: what a client sends a node's client port (byte 0
//! even), and what a node sends back to the client library (byte 0 odd),
//! frame by frame as the node's session loop and `coterie_node::Client`
//! read them. A frame that does not decode ends the stream, as either side
//! closes the connection; every value that decodes must read back as itself
//! once encoded again (not necessarily to the same bytes: bincode's
//! integers also decode from their longer, non-canonical forms).

use crate::frames;
use coterie_core::wire;
use coterie_node::protocol::{ClientRequest, ClientResponse};
use serde::{de::DeserializeOwned, Serialize};

/// Runs one input.
pub fn run(data: &[u8]) {
    let [mode, rest @ ..] = data else { return };
    if mode & 1 == 0 {
        each::<ClientRequest>(rest);
    } else {
        each::<ClientResponse>(rest);
    }
}

/// Decodes each frame of `bytes` as a `T` until one does not decode,
/// checking that what decodes reads back as itself.
pub(crate) fn each<T>(bytes: &[u8]) -> Vec<T>
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let mut values = Vec::new();
    for body in frames(bytes) {
        let Ok(value) = wire::decode::<T>(body) else { break };
        let again = wire::decode::<T>(&wire::encode(&value)).ok();
        assert_eq!(again.as_ref(), Some(&value), "does not read back as itself");
        values.push(value);
    }
    values
}
