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
    for request in each::<WitnessRequest>(rest) {
        match request {
            WitnessRequest::Enter { fence, node } => {
                if let WitnessResponse::Accepted { .. } = witness.enter(fence, node) {
                    entered += 1;
                }
            }
            WitnessRequest::Leave { .. } => witness.leave(),
            WitnessRequest::Report => {
                let report = witness.report();
                assert!(report.entries <= entered);
            }
        }
    }
}
