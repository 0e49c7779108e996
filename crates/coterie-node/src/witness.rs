//! The witness: the shared resource of the seeds' printer example.
//!
//! A client that holds a lock *enters* the witness with the lock's name and
//! its fencing token and *leaves* when done. The witness keeps each name
//! apart, as the locks are: it counts holders of a name that overlap
//! beyond the capacity (a safety violation) and refuses tokens that are
//! stale for that name: for a mutex, a token not greater than the newest
//! it accepted; for a counting semaphore, whose grants may legitimately
//! arrive out of order, a token it has already seen. A holder whose
//! connection drops leaves at once: its process is gone and can no longer
//! touch the resource.
//!
//! An overlap is counted when it happens, and judged again when a holder
//! it involved leaves *lost* (its session broke while it held: its node
//! was killed). The cluster rightly hands the lock on once the holder's
//! node is gone, and the holder learns of the death a moment later than
//! the peers may: if every holder the newer one overlapped beyond the
//! capacity had a lower fence and was lost, the overlap was a **lease
//! overlap** — the one the fence exists for (a resource that checks
//! fences refuses the old holder), and the one a lock delay prevents —
//! and it is counted as that instead of as a violation. The history
//! checker of `coterie nemesis` draws the same line. The same race the
//! other way round, a holder whose node granted it and died before it
//! came in, and whose successor came in first, is refused as stale; if
//! that holder then says its session was lost, the refusal is counted
//! as a **late entry** instead of as a stale fence.
//!
//! It also serves a **register** per lock name, the data a lock protects
//! in a history test (`coterie nemesis`, `coterie history client`): holders
//! read it and write back one more. Each register has two copies. The
//! *plain* copy takes every read and write, as a resource that knows
//! nothing of fences. The *fenced* copy is the resource Kleppmann asks
//! for: it remembers the highest fence any read or write brought, and
//! refuses a write with a lower one, and a read with a fence below the
//! last write's. Reads raise the bar for writes as well as writes do: a
//! stale holder that read before a newer holder read or wrote must not
//! write back what it read. Reads do not bar reads: readers of a
//! readers-writers lock hold at once, each with its own fence, and read
//! in any order; a reader whose fence is below a write's read after a
//! newer writer, and is refused.

use crate::codec::{read_frame, write_frame};
use crate::protocol::{WitnessReport, WitnessRequest, WitnessResponse};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tracing::{info, warn};

/// The most registers a witness keeps (a test's lock names).
pub const MAX_REGISTERS: usize = 65_536;

/// The longest register name, in bytes (a lock name's limit).
pub const MAX_REGISTER_NAME: usize = 256;

/// The witness's counters and holders.
#[derive(Debug, Default)]
pub struct Witness {
    report: WitnessReport,
    /// Each lock's holders and fences.
    locks: HashMap<String, Held>,
    registers: HashMap<String, Register>,
}

/// One lock, as the witness has seen it used.
#[derive(Debug, Default)]
struct Held {
    /// The fences of the holders inside now.
    inside: Vec<u64>,
    /// Overlaps whose older holders are still inside: each may yet turn
    /// out to be a lease overlap.
    open: Vec<Overlap>,
    /// The newest fence accepted.
    last_fence: u64,
    entries: u64,
    /// Every fence accepted (for capacity > 1).
    seen: BTreeSet<u64>,
    /// The latest fences refused as stale, while their holders may yet
    /// say they were lost (at most [`REFUSED_KEPT`]).
    refused: VecDeque<u64>,
}

/// How many refused fences a lock keeps for a loss to explain.
const REFUSED_KEPT: usize = 64;

/// An entry that took a lock's holders over the capacity, while it is
/// undecided whether a loss explains it.
#[derive(Debug)]
struct Overlap {
    /// Holders beyond the capacity that are not yet known lost.
    excess: u32,
    /// The older holders (lower fences) it overlapped that are still
    /// inside: any of them may still leave lost.
    older: Vec<u64>,
}

/// The two copies of one register.
#[derive(Clone, Copy, Debug, Default)]
struct Register {
    plain: i64,
    fenced: i64,
    /// The highest fence an operation on the fenced copy brought.
    highest: u64,
    /// The fence of the last write to the fenced copy.
    written: u64,
}

impl Witness {
    /// A witness admitting `capacity` holders at once.
    pub fn new(capacity: u32) -> Witness {
        Witness {
            report: WitnessReport { capacity: capacity.max(1), ..WitnessReport::default() },
            locks: HashMap::new(),
            registers: HashMap::new(),
        }
    }

    /// Serves one request of a session; `inside` holds the locks (and
    /// fences) this session has entered and not left.
    pub fn apply(
        &mut self,
        request: WitnessRequest,
        inside: &mut Vec<(String, u64)>,
    ) -> WitnessResponse {
        match request {
            WitnessRequest::Enter { name, fence, node } => {
                let answer = self.enter(&name, fence, node);
                if matches!(answer, WitnessResponse::Accepted { .. }) {
                    inside.push((name, fence));
                }
                answer
            }
            WitnessRequest::Leave { name, fence } => {
                match inside.iter().position(|(n, f)| *n == name && *f == fence) {
                    Some(i) => {
                        inside.swap_remove(i);
                        self.leave(&name, fence);
                    }
                    None => {
                        self.unrefuse(&name, fence);
                    }
                }
                WitnessResponse::Left
            }
            WitnessRequest::Lost { name, fence } => {
                match inside.iter().position(|(n, f)| *n == name && *f == fence) {
                    Some(i) => {
                        inside.swap_remove(i);
                        WitnessResponse::LeftLost {
                            explained: self.lost(&name, fence),
                            late: false,
                        }
                    }
                    None => WitnessResponse::LeftLost {
                        explained: 0,
                        late: self.late_entry(&name, fence),
                    },
                }
            }
            WitnessRequest::Report => WitnessResponse::Report(self.report()),
            WitnessRequest::Read { name, fenced, fence } => self.read(&name, fenced, fence),
            WitnessRequest::Write { name, fenced, fence, value } => {
                self.write(&name, fenced, fence, value)
            }
        }
    }

    /// The register `name`, made on first use.
    fn register(&mut self, name: &str) -> Result<&mut Register, WitnessResponse> {
        checked(&mut self.registers, name)
    }

    /// Reads a register's plain copy, or its fenced copy with `fence`.
    pub fn read(&mut self, name: &str, fenced: bool, fence: Option<u64>) -> WitnessResponse {
        let r = match self.register(name) {
            Ok(r) => r,
            Err(refused) => return refused,
        };
        if !fenced {
            return WitnessResponse::Value(r.plain);
        }
        if let Some(fence) = fence {
            if fence < r.written {
                return WitnessResponse::Fenced { highest: r.written };
            }
            r.highest = r.highest.max(fence);
        }
        WitnessResponse::Value(r.fenced)
    }

    /// Writes a register's plain copy, or its fenced copy with `fence`.
    pub fn write(
        &mut self,
        name: &str,
        fenced: bool,
        fence: Option<u64>,
        value: i64,
    ) -> WitnessResponse {
        let r = match self.register(name) {
            Ok(r) => r,
            Err(refused) => return refused,
        };
        if !fenced {
            r.plain = value;
            return WitnessResponse::Written;
        }
        match fence {
            Some(fence) if fence >= r.highest => {
                (r.highest, r.written) = (fence, fence);
                r.fenced = value;
                WitnessResponse::Written
            }
            _ => WitnessResponse::Fenced { highest: r.highest },
        }
    }

    /// A holder of lock `name` enters with `fence`.
    pub fn enter(&mut self, name: &str, fence: u64, node: u32) -> WitnessResponse {
        let capacity = self.report.capacity;
        let lock = match checked(&mut self.locks, name) {
            Ok(lock) => lock,
            Err(refused) => return refused,
        };
        let r = &mut self.report;
        let stale = if capacity == 1 {
            lock.entries > 0 && fence <= lock.last_fence
        } else {
            lock.seen.contains(&fence)
        };
        if stale {
            r.stale_fences += 1;
            warn!(name, fence, node, last = lock.last_fence, "stale fence refused");
            if lock.refused.len() == REFUSED_KEPT {
                lock.refused.pop_front();
            }
            lock.refused.push_back(fence);
            return WitnessResponse::Stale { last: lock.last_fence };
        }
        if capacity > 1 {
            lock.seen.insert(fence);
        }
        lock.entries += 1;
        r.entries += 1;
        lock.last_fence = lock.last_fence.max(fence);
        r.last_fence = r.last_fence.max(fence);
        let older: Vec<u64> = lock.inside.iter().copied().filter(|f| *f < fence).collect();
        lock.inside.push(fence);
        let holders = lock.inside.len() as u32;
        r.holders += 1;
        r.max_holders = r.max_holders.max(holders);
        let violation = holders > capacity;
        if violation {
            r.violations += 1;
            warn!(name, fence, node, holders, "VIOLATION: more holders than allowed");
            let excess = holders - capacity;
            if older.len() as u32 >= excess {
                lock.open.push(Overlap { excess, older });
            }
        }
        WitnessResponse::Accepted { holders, violation }
    }

    /// The holder of lock `name` with `fence` leaves.
    pub fn leave(&mut self, name: &str, fence: u64) {
        self.depart(name, fence, false);
    }

    /// The holder of lock `name` with `fence` leaves, its session lost;
    /// returns how many overlaps that explains (now lease overlaps).
    pub fn lost(&mut self, name: &str, fence: u64) -> u32 {
        self.depart(name, fence, true)
    }

    fn depart(&mut self, name: &str, fence: u64, lost: bool) -> u32 {
        let Some(lock) = self.locks.get_mut(name) else { return 0 };
        let Some(i) = lock.inside.iter().position(|f| *f == fence) else { return 0 };
        lock.inside.swap_remove(i);
        let r = &mut self.report;
        r.holders = r.holders.saturating_sub(1);
        let mut explained = 0;
        // Whether the newer holder is still inside does not matter: it may
        // well have left before the lost one heard of its loss.
        lock.open.retain_mut(|o| {
            let Some(j) = o.older.iter().position(|f| *f == fence) else { return true };
            o.older.swap_remove(j);
            if lost {
                o.excess -= 1;
                if o.excess == 0 {
                    explained += 1;
                    return false;
                }
            }
            // Too few older holders are left to explain it: it stands.
            o.older.len() as u32 >= o.excess
        });
        if explained > 0 {
            r.violations -= u64::from(explained);
            r.lease_overlaps += u64::from(explained);
            info!(name, fence, explained, "a holder lost with its session: lease overlaps");
        }
        explained
    }

    /// A holder refused with `fence` says how it left: forget the
    /// refusal; returns whether there was one.
    fn unrefuse(&mut self, name: &str, fence: u64) -> bool {
        let Some(lock) = self.locks.get_mut(name) else { return false };
        let Some(i) = lock.refused.iter().position(|f| *f == fence) else { return false };
        lock.refused.remove(i);
        true
    }

    /// A holder refused with `fence` says its session was lost: a late
    /// entry, no longer counted as a stale fence. Returns whether it was
    /// one.
    fn late_entry(&mut self, name: &str, fence: u64) -> bool {
        if !self.unrefuse(name, fence) {
            return false;
        }
        let r = &mut self.report;
        r.stale_fences = r.stale_fences.saturating_sub(1);
        r.late_entries += 1;
        info!(name, fence, "a holder refused as stale was lost with its session: a late entry");
        true
    }

    /// The counters.
    pub fn report(&self) -> WitnessReport {
        self.report.clone()
    }
}

/// `map`'s entry for lock or register `name`, made on first use: refused
/// for a name that is not one, or past [`MAX_REGISTERS`] names.
fn checked<'a, T: Default>(
    map: &'a mut HashMap<String, T>,
    name: &str,
) -> Result<&'a mut T, WitnessResponse> {
    if name.is_empty() || name.len() > MAX_REGISTER_NAME || name.chars().any(char::is_control) {
        return Err(WitnessResponse::Refused(format!(
            "a lock or register name is 1 to {MAX_REGISTER_NAME} bytes with no control characters"
        )));
    }
    if !map.contains_key(name) && map.len() >= MAX_REGISTERS {
        return Err(WitnessResponse::Refused(format!(
            "the witness keeps at most {MAX_REGISTERS} locks and registers"
        )));
    }
    Ok(map.entry(name.to_string()).or_default())
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
    // Locks (and fences) this connection entered and has not left.
    let mut inside = Vec::new();
    let result = loop {
        let request = match read_frame::<WitnessRequest, _>(&mut stream, &mut buf).await {
            Ok(Some(r)) => r,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        // The lock is never held across an .await: each arm computes its
        // answer, and only then is it written.
        let response = witness.lock().expect("witness lock").apply(request, &mut inside);
        if let Err(e) = write_frame(&mut stream, &response).await {
            break Err(e.into());
        }
    };
    let mut w = witness.lock().expect("witness lock");
    for (name, fence) in inside {
        w.leave(&name, fence);
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
        assert_eq!(w.enter("x", 10, 1), ok(1, false));
        assert_eq!(w.enter("x", 11, 2), ok(2, true));
        assert_eq!(w.report().violations, 1);
        assert_eq!(w.report().max_holders, 2);
    }

    #[test]
    fn a_stale_refusal_of_a_holder_found_lost_is_a_late_entry() {
        let mut w = Witness::new(1);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let enter = |name: &str, fence| WitnessRequest::Enter { name: name.into(), fence, node: 1 };
        let lost = |name: &str, fence| WitnessRequest::Lost { name: name.into(), fence };
        let leave = |name: &str, fence| WitnessRequest::Leave { name: name.into(), fence };
        // 10's node granted it and died; 11 came in and left first.
        w.apply(enter("x", 11), &mut b);
        w.apply(leave("x", 11), &mut b);
        assert_eq!(w.apply(enter("x", 10), &mut a), WitnessResponse::Stale { last: 11 });
        assert_eq!(w.report().stale_fences, 1);
        let late = WitnessResponse::LeftLost { explained: 0, late: true };
        assert_eq!(w.apply(lost("x", 10), &mut a), late);
        let r = w.report();
        assert_eq!((r.stale_fences, r.late_entries, r.violations), (0, 1, 0));
        // Once only; and a refused holder that leaves in good order stays
        // a stale fence, even if a loss is claimed after.
        let not = WitnessResponse::LeftLost { explained: 0, late: false };
        assert_eq!(w.apply(lost("x", 10), &mut a), not);
        w.apply(enter("x", 9), &mut a);
        w.apply(leave("x", 9), &mut a);
        assert_eq!(w.apply(lost("x", 9), &mut a), not);
        let r = w.report();
        assert_eq!((r.stale_fences, r.late_entries), (1, 1));
    }

    #[test]
    fn an_overlap_with_an_older_holder_found_lost_is_a_lease_overlap() {
        let mut w = Witness::new(1);
        // 10 is inside when its node dies; 11 is granted and enters before
        // 10 hears of it: a lease overlap once 10 says it was lost.
        w.enter("x", 10, 5);
        assert_eq!(w.enter("x", 11, 1), WitnessResponse::Accepted { holders: 2, violation: true });
        assert_eq!(w.report().violations, 1);
        assert_eq!(w.lost("x", 10), 1);
        let r = w.report();
        assert_eq!((r.violations, r.lease_overlaps, r.holders), (0, 1, 1));
        // An older holder that leaves in good order explains nothing, and
        // a loss after that does not either.
        w.enter("x", 12, 2);
        w.leave("x", 11);
        assert_eq!(w.lost("x", 12), 0);
        // Nor does a loss of the newer holder, nor of one of two older
        // holders when two were too many.
        let mut w = Witness::new(1);
        w.enter("y", 1, 1);
        w.enter("y", 2, 2);
        w.enter("y", 3, 3);
        assert_eq!(w.report().violations, 2);
        assert_eq!(w.lost("y", 3), 0);
        // 2's overlap with 1 is explained even though 2 has left since;
        // 3's excess of two is not, by one loss.
        w.leave("y", 2);
        assert_eq!(w.lost("y", 1), 1);
        let r = w.report();
        assert_eq!((r.violations, r.lease_overlaps, r.holders), (1, 1, 0));
    }

    #[test]
    fn mutex_fences_must_grow() {
        let mut w = Witness::new(1);
        w.enter("x", 10, 1);
        w.leave("x", 10);
        assert_eq!(w.enter("x", 10, 2), WitnessResponse::Stale { last: 10 });
        assert_eq!(w.enter("x", 9, 2), WitnessResponse::Stale { last: 10 });
        assert_eq!(w.enter("x", 11, 2), WitnessResponse::Accepted { holders: 1, violation: false });
        assert_eq!(w.report().stale_fences, 2);
        assert_eq!(w.report().violations, 0);
    }

    #[test]
    fn the_fenced_copy_refuses_a_stale_holder_that_read_before_a_newer_one_wrote() {
        let mut w = Witness::new(1);
        let value = |r| match r {
            WitnessResponse::Value(v) => v,
            other => panic!("{other:?}"),
        };
        // Holder 5 reads 0; holder 6 (its lease ran out) reads 0 and
        // writes 1; holder 5 writes 1 back. The plain copy loses an update.
        for fenced in [false, true] {
            assert_eq!(value(w.read("x", fenced, Some(5))), 0);
            assert_eq!(value(w.read("x", fenced, Some(6))), 0);
            assert_eq!(w.write("x", fenced, Some(6), 1), WitnessResponse::Written);
        }
        assert_eq!(w.write("x", false, Some(5), 1), WitnessResponse::Written);
        assert_eq!(w.write("x", true, Some(5), 1), WitnessResponse::Fenced { highest: 6 });
        assert_eq!(w.read("x", true, Some(5)), WitnessResponse::Fenced { highest: 6 });
        // Readers read in any order above the last write; a reader's read
        // raises the bar for writes.
        assert_eq!(value(w.read("x", true, Some(8))), 1);
        assert_eq!(value(w.read("x", true, Some(7))), 1);
        assert_eq!(w.write("x", true, Some(7), 2), WitnessResponse::Fenced { highest: 8 });
        // A look without a fence neither checks nor raises.
        assert_eq!(value(w.read("x", true, None)), 1);
        assert_eq!(w.write("x", true, None, 9), WitnessResponse::Fenced { highest: 8 });
        // Names are registers of their own.
        assert_eq!(value(w.read("y", true, Some(1))), 0);
        assert!(matches!(w.read("", false, None), WitnessResponse::Refused(_)));
    }

    #[test]
    fn semaphore_fences_may_arrive_out_of_order_but_never_twice() {
        let mut w = Witness::new(2);
        let ok = |holders| WitnessResponse::Accepted { holders, violation: false };
        assert_eq!(w.enter("x", 12, 1), ok(1));
        assert_eq!(w.enter("x", 11, 2), ok(2));
        w.leave("x", 12);
        assert_eq!(w.enter("x", 11, 3), WitnessResponse::Stale { last: 12 });
        assert_eq!(w.report().violations, 0);
    }

    #[test]
    fn locks_are_judged_apart() {
        let mut w = Witness::new(1);
        let ok = |holders| WitnessResponse::Accepted { holders, violation: false };
        // Two names held at once are no overlap; a lower fence on another
        // name is not stale.
        assert_eq!(w.enter("a", 10, 1), ok(1));
        assert_eq!(w.enter("b", 3, 2), ok(1));
        assert_eq!(w.enter("a", 11, 3), WitnessResponse::Accepted { holders: 2, violation: true });
        w.leave("a", 10);
        w.leave("a", 11);
        assert_eq!(w.enter("b", 3, 2), WitnessResponse::Stale { last: 3 });
        let r = w.report();
        assert_eq!((r.violations, r.stale_fences, r.entries, r.holders), (1, 1, 3, 1));
        assert!(matches!(w.enter("", 1, 1), WitnessResponse::Refused(_)));
    }
}
