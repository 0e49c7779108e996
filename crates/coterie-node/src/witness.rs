//! The witness: the shared resource of the seeds' printer example.
//!
//! A client that holds the lock *enters* the witness with its fencing token
//! and *leaves* when done. The witness counts holders that overlap beyond
//! the capacity (a safety violation) and refuses tokens that are stale: for
//! a mutex, a token not greater than the newest it accepted; for a counting
//! semaphore, whose grants may legitimately arrive out of order, a token it
//! has already seen. A holder whose connection drops leaves at once: its
//! process is gone and can no longer touch the resource.

use crate::codec::{read_frame, write_frame};
use crate::protocol::{WitnessReport, WitnessRequest, WitnessResponse};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tracing::{info, warn};

/// The witness's counters and holders.
#[derive(Debug, Default)]
pub struct Witness {
    report: WitnessReport,
    /// Every fence accepted (for capacity > 1).
    seen: BTreeSet<u64>,
}

impl Witness {
    /// A witness admitting `capacity` holders at once.
    pub fn new(capacity: u32) -> Witness {
        Witness {
            report: WitnessReport { capacity: capacity.max(1), ..WitnessReport::default() },
            seen: BTreeSet::new(),
        }
    }

    /// A holder enters with `fence`.
    pub fn enter(&mut self, fence: u64, node: u32) -> WitnessResponse {
        let r = &mut self.report;
        let stale = if r.capacity == 1 {
            r.entries > 0 && fence <= r.last_fence
        } else {
            self.seen.contains(&fence)
        };
        if stale {
            r.stale_fences += 1;
            warn!(fence, node, last = r.last_fence, "stale fence refused");
            return WitnessResponse::Stale { last: r.last_fence };
        }
        if r.capacity > 1 {
            self.seen.insert(fence);
        }
        r.entries += 1;
        r.last_fence = r.last_fence.max(fence);
        r.holders += 1;
        r.max_holders = r.max_holders.max(r.holders);
        let violation = r.holders > r.capacity;
        if violation {
            r.violations += 1;
            warn!(fence, node, holders = r.holders, "VIOLATION: more holders than allowed");
        }
        WitnessResponse::Accepted { holders: r.holders, violation }
    }

    /// A holder leaves.
    pub fn leave(&mut self) {
        self.report.holders = self.report.holders.saturating_sub(1);
    }

    /// The counters.
    pub fn report(&self) -> WitnessReport {
        self.report.clone()
    }
}

/// Serves the witness on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, capacity: u32, shutdown: impl Future<Output = ()>) {
    let witness = Arc::new(Mutex::new(Witness::new(capacity)));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    let witness = witness.clone();
                    tokio::spawn(async move {
                        if let Err(e) = session(stream, &witness).await {
                            warn!(%addr, "witness client dropped: {e}");
                        }
                    });
                }
                Err(e) => warn!("witness accept failed: {e}"),
            },
        }
    }
    let report = witness.lock().expect("witness lock").report();
    info!(?report, "witness stopping");
}

async fn session(
    mut stream: TcpStream,
    witness: &Mutex<Witness>,
) -> Result<(), crate::codec::FrameError> {
    stream.set_nodelay(true)?;
    let mut buf = Vec::new();
    // Holders this connection entered and has not left.
    let mut inside = 0u32;
    let result = loop {
        let request = match read_frame::<WitnessRequest, _>(&mut stream, &mut buf).await {
            Ok(Some(r)) => r,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        // The lock is never held across an .await: each arm computes its
        // answer, and only then is it written.
        let response = {
            let mut w = witness.lock().expect("witness lock");
            match request {
                WitnessRequest::Enter { fence, node } => {
                    let answer = w.enter(fence, node);
                    if matches!(answer, WitnessResponse::Accepted { .. }) {
                        inside += 1;
                    }
                    answer
                }
                WitnessRequest::Leave { .. } => {
                    if inside > 0 {
                        inside -= 1;
                        w.leave();
                    }
                    WitnessResponse::Left
                }
                WitnessRequest::Report => WitnessResponse::Report(w.report()),
            }
        };
        if let Err(e) = write_frame(&mut stream, &response).await {
            break Err(e.into());
        }
    };
    let mut w = witness.lock().expect("witness lock");
    for _ in 0..inside {
        w.leave();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_beyond_capacity_is_a_violation() {
        let mut w = Witness::new(1);
        let ok = |holders, violation| WitnessResponse::Accepted { holders, violation };
        assert_eq!(w.enter(10, 1), ok(1, false));
        assert_eq!(w.enter(11, 2), ok(2, true));
        assert_eq!(w.report().violations, 1);
        assert_eq!(w.report().max_holders, 2);
    }

    #[test]
    fn mutex_fences_must_grow() {
        let mut w = Witness::new(1);
        w.enter(10, 1);
        w.leave();
        assert_eq!(w.enter(10, 2), WitnessResponse::Stale { last: 10 });
        assert_eq!(w.enter(9, 2), WitnessResponse::Stale { last: 10 });
        assert_eq!(w.enter(11, 2), WitnessResponse::Accepted { holders: 1, violation: false });
        assert_eq!(w.report().stale_fences, 2);
        assert_eq!(w.report().violations, 0);
    }

    #[test]
    fn semaphore_fences_may_arrive_out_of_order_but_never_twice() {
        let mut w = Witness::new(2);
        let ok = |holders| WitnessResponse::Accepted { holders, violation: false };
        assert_eq!(w.enter(12, 1), ok(1));
        assert_eq!(w.enter(11, 2), ok(2));
        w.leave();
        assert_eq!(w.enter(11, 3), WitnessResponse::Stale { last: 12 });
        assert_eq!(w.report().violations, 0);
    }
}
