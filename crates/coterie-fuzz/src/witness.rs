//! Target `witness`: what a node (or anyone who reaches it) sends the
//! witness, decoded frame by frame and applied to a witness of capacity 1
//! to 4 (byte 0), as its sessions do.

use crate::client::each;
use coterie_node::protocol::{WitnessRequest, WitnessResponse};
use coterie_node::witness::Witness;

/// Runs one input.
pub fn run(data: &[u8]) {
    let [capacity, rest @ ..] = data else { return };
    let mut witness = Witness::new(1 + u32::from(capacity % 4));
    let mut entered = 0u64;
    let mut inside = Vec::new();
    for request in each::<WitnessRequest>(rest) {
        let report = matches!(request, WitnessRequest::Report);
        match witness.apply(request, &mut inside) {
            WitnessResponse::Accepted { .. } => entered += 1,
            WitnessResponse::Report(r) => assert!(report && r.entries <= entered),
            _ => {}
        }
    }
}
