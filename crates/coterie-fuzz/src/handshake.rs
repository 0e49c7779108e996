//! Target `handshake`: the authentication handshake (`coterie_node::auth`)
//! that opens every peer and client connection when the cluster has a
//! secret, from both ends: bytes that a dialler sends a node (byte 0 even:
//! the node's `accept` reads them), and bytes that a node answers a
//! dialler with (byte 0 odd: `dial` reads them). The nonces are fresh, so
//! no input can prove knowledge of the secret: what is tried is every way
//! to be refused, which must end in an error and never a panic or a hang.

use coterie_node::auth::{self, Role, Secret};
use std::cell::RefCell;

thread_local! {
    static RUNTIME: RefCell<tokio::runtime::Runtime> = RefCell::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime"),
    );
}

/// The secret every input is checked against.
pub fn secret() -> Secret {
    Secret::from_file_bytes(b"the fuzz cluster's secret").expect("not empty")
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let [mode, rest @ ..] = data else { return };
    let secret = secret();
    RUNTIME.with(|rt| {
        rt.borrow().block_on(async {
            let mut io = tokio::io::join(rest, tokio::io::sink());
            if mode & 1 == 0 {
                let result = auth::accept(&mut io, &secret, "fuzz", 1).await;
                assert!(result.is_err(), "a fuzzed dialler proved a secret it cannot know");
            } else {
                let result = auth::dial(&mut io, &secret, "fuzz", Role::Peer, 2).await;
                assert!(result.is_err(), "a fuzzed node proved a secret it cannot know");
            }
        })
    });
}
