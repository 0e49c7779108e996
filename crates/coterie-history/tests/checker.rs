//! The checker against hand-made histories: a clean one passes, and each
//! kind of violation, made on purpose, is caught with a window that shows
//! it. Each check is shown failing on a history that differs from a clean
//! one by the one thing it looks for.

use coterie_history::{check, Func, Kind, Mode, Op, Options, Register, ViolationKind, NEMESIS};

const MS: u64 = 1_000_000;

/// A history being written by hand, in milliseconds.
#[derive(Default)]
struct H {
    ops: Vec<Op>,
    plain: i64,
    fenced: i64,
}

impl H {
    fn push(&mut self, ms: u64, p: u32, kind: Kind, f: Func) -> &mut Op {
        self.ops.push(Op::new(ms * MS, p, kind, f, "default"));
        self.ops.last_mut().unwrap()
    }

    /// Process `p` asks at `at` and is granted `fence` 1 ms later.
    fn acquire(&mut self, p: u32, at: u64, fence: u64) {
        self.push(at, p, Kind::Invoke, Func::Acquire);
        self.push(at + 1, p, Kind::Ok, Func::Acquire).fence = Some(fence);
    }

    /// Process `p` asks to read at `at` and is granted `fence` 1 ms later.
    fn acquire_read(&mut self, p: u32, at: u64, fence: u64) {
        self.push(at, p, Kind::Invoke, Func::Acquire).mode = Mode::Read;
        let ok = self.push(at + 1, p, Kind::Ok, Func::Acquire);
        ok.mode = Mode::Read;
        ok.fence = Some(fence);
    }

    fn release(&mut self, p: u32, at: u64) {
        self.push(at, p, Kind::Invoke, Func::Release);
        self.push(at + 1, p, Kind::Ok, Func::Release);
    }

    fn read(&mut self, p: u32, at: u64, register: Register, fence: u64, value: i64) {
        for kind in [Kind::Invoke, Kind::Ok] {
            let op = self.push(at, p, kind, Func::Read);
            op.register = Some(register);
            op.fence = Some(fence);
            op.value = (kind == Kind::Ok).then_some(value);
        }
    }

    fn write(&mut self, p: u32, at: u64, register: Register, fence: u64, value: i64, kind: Kind) {
        for k in [Kind::Invoke, kind] {
            let op = self.push(at, p, k, Func::Write);
            op.register = Some(register);
            op.fence = Some(fence);
            op.value = Some(value);
        }
    }

    /// A whole critical section of `p` from `at` to `at + 10`, reading the
    /// registers as they stand (as a lone holder would).
    fn section(&mut self, p: u32, at: u64, fence: u64) {
        self.acquire(p, at, fence);
        let (plain, fenced) = (self.plain, self.fenced);
        self.read(p, at + 2, Register::Plain, fence, plain);
        self.read(p, at + 3, Register::Fenced, fence, fenced);
        self.write(p, at + 6, Register::Plain, fence, plain + 1, Kind::Ok);
        self.write(p, at + 7, Register::Fenced, fence, fenced + 1, Kind::Ok);
        self.plain += 1;
        self.fenced += 1;
        self.release(p, at + 9);
    }

    fn nemesis(&mut self, at: u64, f: Func, detail: &str) {
        self.push(at, NEMESIS, Kind::Info, f).detail = Some(detail.into());
    }

    /// The driver's final reads, at `at`.
    fn finish(&mut self, at: u64) -> Vec<Op> {
        let (plain, fenced) = (self.plain, self.fenced);
        for (register, value) in [(Register::Plain, plain), (Register::Fenced, fenced)] {
            let op = self.push(at, NEMESIS, Kind::Ok, Func::Read);
            op.register = Some(register);
            op.value = Some(value);
        }
        let mut ops = std::mem::take(&mut self.ops);
        ops.sort_by_key(|op| op.time_ns);
        ops
    }
}

/// Three processes taking turns, a pause of node 2 in the middle, the
/// nemesis ending at 100 ms and a grant after it.
fn clean() -> H {
    let mut h = H::default();
    h.section(1, 0, 10);
    h.section(2, 20, 20);
    h.nemesis(35, Func::Fault, "pause n2");
    h.section(3, 40, 30);
    h.nemesis(60, Func::Heal, "resume n2");
    h.section(1, 70, 40);
    h.nemesis(100, Func::End, "every fault healed");
    h.section(2, 110, 50);
    h
}

fn kinds(report: &coterie_history::Report) -> Vec<ViolationKind> {
    ViolationKind::ALL.into_iter().filter(|&k| report.count(k) > 0).collect()
}

#[test]
fn a_clean_history_passes_every_check() {
    let ops = clean().finish(200);
    let report = check(&ops, &Options::default());
    assert!(report.valid, "{:#?}", report.violations);
    assert_eq!(report.names.len(), 1);
    let name = &report.names[0];
    assert_eq!((name.grants, name.max_holders, name.holds_lost), (5, 1, 0));
    for r in &name.registers {
        assert_eq!((r.writes_ok, r.final_value, r.lost_updates), (5, Some(5), Some(0)));
    }
    assert_eq!(report.recovery_ns, Some(11 * MS));
    assert_eq!(report.ops["acquire"].ok, 5);
}

#[test]
fn overlapping_holds_are_caught_with_the_window_that_shows_them() {
    let mut h = clean();
    // Process 4 is granted while process 3 holds (40..49).
    h.acquire(4, 44, 15);
    h.release(4, 47);
    let report = check(&h.finish(200), &Options::default());
    assert_eq!(kinds(&report), [ViolationKind::Overlap, ViolationKind::FenceOrder]);
    let v = report.violations.iter().find(|v| v.kind == ViolationKind::Overlap).unwrap();
    assert_eq!((v.from_ns, v.to_ns), (41 * MS, 47 * MS));
    assert!(v.detail.contains("process 3 (fence 30)") && v.detail.contains("process 4 (fence 15)"));
    // The window holds both processes' operations and the pause before it.
    assert!(v.window.iter().any(|op| op.process == 4 && op.f == Func::Acquire));
    assert!(v.window.iter().any(|op| op.process == 3 && op.f == Func::Read));
    assert!(v.window.iter().any(|op| op.f == Func::Fault));
    assert!(v.window.iter().all(|op| [3, 4, NEMESIS].contains(&op.process)));
    // It began while node 2 was paused, and is put down to the pause.
    assert_eq!(v.during.as_deref(), Some("pause n2"));
    assert_eq!(report.by_fault[&ViolationKind::Overlap]["pause n2"], 1);
    // Two permits allow it.
    let two = Options { permits: 2, ..Options::default() };
    assert_eq!(check(&h.finish(200), &two).count(ViolationKind::Overlap), 0);
}

#[test]
fn a_hold_ends_when_its_loss_is_learnt_not_when_the_lease_ran_out() {
    let mut h = clean();
    // Process 4 holds from 21 and learns at 28 that it lost the lock;
    // process 2 (fence 20, 21..29) overlaps it all along.
    h.acquire(4, 20, 16);
    h.push(28, 4, Kind::Info, Func::Lose).error = Some("session expired".into());
    let ops = h.finish(200);
    let report = check(&ops, &Options::default());
    assert_eq!(report.count(ViolationKind::Overlap), 0);
    assert_eq!(report.count(ViolationKind::LeaseOverlap), 1);
    assert_eq!(report.names[0].holds_lost, 1);
    let v = &report.violations[0];
    assert_eq!(v.to_ns, 28 * MS);
    // Without the overlap (the loss learnt before process 2 was granted),
    // the same hold is fine.
    let mut h = clean();
    h.acquire(4, 12, 15);
    h.push(19, 4, Kind::Info, Func::Lose);
    assert!(check(&h.finish(200), &Options::default()).valid);
    // A release with no answer ends the hold as a loss too.
    let mut h = clean();
    h.acquire(4, 20, 16);
    h.push(28, 4, Kind::Invoke, Func::Release);
    h.push(29, 4, Kind::Info, Func::Release).error = Some("connection reset".into());
    let report = check(&h.finish(200), &Options::default());
    assert_eq!(report.count(ViolationKind::LeaseOverlap), 1);
}

#[test]
fn a_fence_below_one_granted_before_it_was_asked_is_caught() {
    let mut h = clean();
    // After process 1 was granted 40 (at 71), process 4 asks at 85 and is
    // granted 9: stale.
    h.acquire(4, 85, 9);
    h.release(4, 88);
    let report = check(&h.finish(200), &Options::default());
    assert_eq!(kinds(&report), [ViolationKind::FenceOrder]);
    let v = &report.violations[0];
    assert!(
        v.detail.contains("granted fence 9 after process 1 had been granted 40"),
        "{}",
        v.detail
    );
    assert_eq!((v.from_ns, v.to_ns), (71 * MS, 86 * MS));
    // Concurrent asks may be granted in either order: process 4 asks at
    // 65, before 40 was granted at 71, and is granted 35 at 86.
    let mut h = clean();
    h.push(65, 4, Kind::Invoke, Func::Acquire);
    h.push(86, 4, Kind::Ok, Func::Acquire).fence = Some(35);
    h.release(4, 88);
    assert!(check(&h.finish(200), &Options::default()).valid);
}

#[test]
fn one_fence_granted_twice_is_caught_even_when_concurrent() {
    let mut h = clean();
    h.push(65, 4, Kind::Invoke, Func::Acquire);
    h.push(86, 4, Kind::Ok, Func::Acquire).fence = Some(40);
    h.release(4, 88);
    let report = check(&h.finish(200), &Options::default());
    assert_eq!(kinds(&report), [ViolationKind::DuplicateFence]);
    assert!(report.violations[0].detail.contains("processes 1 and 4 were both granted fence 40"));
}

#[test]
fn a_lost_update_is_caught_on_each_register_and_fencing_prevents_it() {
    // Process 4, whose lease ran out unnoticed, reads 1 (fence 9, before
    // process 2's fence 11) and writes 2 after process 2 wrote 2: process
    // 2's increment is lost on the plain register. The fenced register
    // refuses the write, so it loses nothing.
    let mut h = H::default();
    h.section(1, 0, 10);
    h.acquire(4, 12, 9);
    h.read(4, 14, Register::Plain, 9, 1);
    h.read(4, 14, Register::Fenced, 9, 1);
    h.section(2, 20, 11);
    h.write(4, 35, Register::Plain, 9, 2, Kind::Ok);
    h.write(4, 35, Register::Fenced, 9, 2, Kind::Fail);
    h.plain = 2;
    h.release(4, 36);
    let ops = h.finish(200);
    let report = check(&ops, &Options::default());
    assert_eq!(report.count(ViolationKind::LostUpdatePlain), 1);
    assert_eq!(report.count(ViolationKind::LostUpdateFenced), 0);
    let plain = &report.names[0].registers[0];
    assert_eq!((plain.writes_ok, plain.final_value, plain.lost_updates), (3, Some(2), Some(1)));
    let fenced = &report.names[0].registers[1];
    assert_eq!((fenced.writes_ok, fenced.writes_refused, fenced.lost_updates), (2, 1, Some(0)));
    // The window runs from process 4's read to its write of the value
    // process 2 had written.
    let v = report.violations.iter().find(|v| v.kind == ViolationKind::LostUpdatePlain).unwrap();
    assert_eq!((v.from_ns, v.to_ns), (14 * MS, 35 * MS));
    assert!(v.window.iter().any(|op| op.process == 2 && op.f == Func::Write));

    // The same on the fenced register, as a register that did not check
    // fences would have it: caught as a fenced lost update.
    let mut ops = ops;
    for op in &mut ops {
        if op.process == 4 && op.f == Func::Write && op.register == Some(Register::Fenced) {
            op.kind = if op.kind == Kind::Fail { Kind::Ok } else { op.kind };
        }
        if op.process == NEMESIS && op.register == Some(Register::Fenced) {
            op.value = Some(2);
        }
    }
    ops.sort_by_key(|op| op.time_ns);
    let report = check(&ops, &Options::default());
    assert_eq!(report.count(ViolationKind::LostUpdateFenced), 1);
}

#[test]
fn a_register_above_every_write_is_caught() {
    let mut h = clean();
    h.plain += 3;
    let report = check(&h.finish(200), &Options::default());
    assert_eq!(kinds(&report), [ViolationKind::PhantomUpdate]);
}

#[test]
fn a_stall_after_the_nemesis_ends_is_caught() {
    let mut h = clean();
    h.nemesis(105, Func::End, "every fault healed, again");
    // The only grant after the end is at 111: 6 ms. A bound of 5 ms is
    // missed; 10 s is not.
    let tight = Options { recovery_bound_ns: 5 * MS, ..Options::default() };
    let report = check(&h.finish(200), &tight);
    assert_eq!(kinds(&report), [ViolationKind::Stall]);
    assert!(report.violations[0].detail.contains("6 ms later"), "{}", report.violations[0].detail);
    let mut h = clean();
    h.nemesis(105, Func::End, "every fault healed, again");
    assert!(check(&h.finish(200), &Options::default()).valid);
    // No grant at all after the end.
    let mut h = clean();
    h.nemesis(150, Func::End, "healed");
    h.acquire(3, 160, 60);
    h.ops.pop();
    let report = check(&h.finish(9_000), &Options::default());
    assert_eq!(kinds(&report), [ViolationKind::Stall]);
    assert!(report.violations[0].detail.contains("no acquire was acknowledged in the 8850 ms"));
}

#[test]
fn operations_are_counted_by_how_they_ended() {
    let mut h = clean();
    h.push(120, 5, Kind::Invoke, Func::Acquire);
    h.push(125, 5, Kind::Fail, Func::Acquire).error = Some("timeout".into());
    h.push(130, 6, Kind::Invoke, Func::Acquire);
    h.push(131, 6, Kind::Info, Func::Acquire).error = Some("session lost".into());
    // Process 7 asked and died before an answer.
    h.push(140, 7, Kind::Invoke, Func::Acquire);
    let report = check(&h.finish(200), &Options::default());
    let acquire = &report.ops["acquire"];
    assert_eq!((acquire.ok, acquire.fail, acquire.info), (5, 1, 2));
    assert!(report.valid);
}

/// A semaphore's history: with several permits, as many holders at once
/// pass and one more is an overlap; fences out of time order pass (k
/// holders' grants are not ordered) but a fence granted twice does not;
/// the registers, written by several holders at once, are not judged.
#[test]
fn with_several_permits_only_too_many_holders_and_repeated_fences_count() {
    let mut h = clean();
    // Process 4 is granted a lower fence while process 3 holds.
    h.acquire(4, 44, 15);
    h.release(4, 47);
    let two = Options { permits: 2, ..Options::default() };
    let report = check(&h.finish(200), &two);
    assert!(report.valid, "{:#?}", report.violations);
    assert_eq!(report.names[0].max_holders, 2);
    assert!(report.names[0].registers.is_empty(), "registers judged with two holders");
    // A third holder at once is one too many; a repeated fence is caught.
    let mut h = clean();
    h.acquire(4, 44, 15);
    h.acquire(5, 45, 30);
    h.release(4, 47);
    h.release(5, 48);
    let report = check(&h.finish(200), &two);
    assert_eq!(kinds(&report), [ViolationKind::Overlap, ViolationKind::DuplicateFence]);
}

/// Readers hold together; a writer holds alone. Three readers overlapping
/// between two writers' sections are fine, and so are their fences, which
/// need only be above the writers' before them; a writer that overlaps a
/// reader, or a reader whose fence is below a writer's granted before it
/// asked, is caught.
#[test]
fn readers_share_and_a_writer_is_alone() {
    let mut h = clean();
    // Between process 2's section (20..29) and process 3's (40..49):
    // three readers, 30..38, granted out of their order of asking.
    h.acquire_read(4, 30, 23);
    h.acquire_read(5, 31, 22);
    h.acquire_read(6, 32, 21);
    for p in [4, 5, 6] {
        h.release(p, 37);
    }
    let report = check(&h.finish(200), &Options::default());
    assert!(report.valid, "{:#?}", report.violations);
    assert_eq!((report.names[0].max_holders, report.names[0].read_grants), (3, 3));

    // A writer granted while a reader holds.
    let mut w = clean();
    w.acquire_read(4, 30, 23);
    w.acquire(5, 33, 24);
    w.release(5, 35);
    w.release(4, 37);
    let report = check(&w.finish(200), &Options::default());
    assert_eq!(kinds(&report), [ViolationKind::Overlap]);
    let v = &report.violations[0];
    assert!(v.detail.contains("a writer among readers"), "{}", v.detail);
    assert!(v.detail.contains("process 4 (fence 23, read)"), "{}", v.detail);

    // A reader granted while a writer holds, even with one permit more.
    let mut r = clean();
    r.acquire_read(4, 42, 35);
    r.release(4, 45);
    let two = Options { permits: 2, ..Options::default() };
    assert_eq!(check(&r.finish(200), &two).count(ViolationKind::Overlap), 1);

    // A reader's fence below a writer's granted before it asked.
    let mut f = clean();
    f.acquire_read(4, 52, 25);
    f.release(4, 55);
    let report = check(&f.finish(200), &Options::default());
    assert_eq!(kinds(&report), [ViolationKind::FenceOrder]);
    assert!(report.violations[0].detail.contains("after process 3 had been granted 30"));
}

/// Readers that share one grant of their node hold it under its one
/// fence: through the same node at one time, that is no repeat. The same
/// fence through another node, at another time, or to a writer is.
#[test]
fn readers_sharing_one_grant_of_their_node_may_hold_its_fence_together() {
    let through = |h: &mut H, p: u32, at: u64, node: u32| {
        h.acquire_read(p, at, 23);
        h.ops.last_mut().unwrap().node = Some(node);
    };
    let mut h = clean();
    through(&mut h, 4, 30, 2);
    through(&mut h, 5, 30, 2);
    h.release(4, 35);
    h.release(5, 37);
    let report = check(&h.finish(200), &Options::default());
    assert!(report.valid, "{:#?}", report.violations);
    assert_eq!(report.names[0].max_holders, 2);

    for (node, second_at) in [(3, 30), (2, 36)] {
        let mut h = clean();
        through(&mut h, 4, 30, 2);
        h.release(4, 35);
        through(&mut h, 5, second_at, node);
        h.release(5, 38);
        let report = check(&h.finish(200), &Options::default());
        assert_eq!(kinds(&report), [ViolationKind::DuplicateFence], "node {node} at {second_at}");
    }

    let mut h = clean();
    through(&mut h, 4, 30, 2);
    h.push(30, 5, Kind::Invoke, Func::Acquire);
    let ok = h.push(31, 5, Kind::Ok, Func::Acquire);
    (ok.fence, ok.node) = (Some(23), Some(2));
    h.release(5, 33);
    h.release(4, 35);
    let report = check(&h.finish(200), &Options::default());
    assert!(report.count(ViolationKind::DuplicateFence) == 1, "{:#?}", report.violations);
}
