//! The checker: judges a whole history, name by name.
//!
//! What it checks, for each lock name:
//! - **Overlap.** A client holds from the moment it was told `ok` to its
//!   acquire until it invokes its release, or learns the lock was lost
//!   (`lose`), or the history ends. These are the holds the clients
//!   *acknowledged*; the lock service held each for at least as long. More
//!   than `permits` of them at one instant is a violation: a *lease
//!   overlap* when one of the holds ended in a loss (the client was told
//!   later that its lease had run out or its node had died, or its release
//!   got no answer), else an *overlap*: two clients each granted the lock
//!   and each releasing it as its own. Readers (acquires with `mode:
//!   read`) may hold together, any number of them; a writer holds alone,
//!   so a writer's hold overlapping any other is a violation.
//! - **Fence order.** If one acquire was acknowledged before another was
//!   invoked, real time orders them, and so must their fences: the later
//!   grant's fence must be greater, except that a reader's need only be
//!   above the writers' before it (readers that hold together are not
//!   ordered among themselves). Two grants with one fence are a
//!   violation even when concurrent: a resource could not tell them apart.
//!   Readers that share one grant of their node are not two grants: they
//!   hold it at once, through the same node, under its one fence.
//!   With several permits only the repeats are judged: k holders' grants
//!   are not ordered in time (Raymond's come from request stamps), so a
//!   resource checks that a fence is never reused, not that it grows.
//! - **Lost updates**, per register. Clients write the value they read
//!   plus one, so the final value must equal the writes acknowledged `ok`
//!   (up to the writes whose outcome is unknown). Fewer is a lost update;
//!   more than both together is an update from nowhere. The final value is
//!   the driver's last read (process 0); without one, the register is not
//!   judged. Two acknowledged writes of one value show the loss in a
//!   window of their own. With several permits the registers are not
//!   judged: several holders read and write them at once by design.
//! - **Stall.** After the nemesis's last `end`, some acquire must be
//!   acknowledged within the recovery bound.
//!
//! Each violation comes with the smallest window of the history that shows
//! it: the operations of the processes involved between the first and the
//! last operation the argument needs, with the nemesis's operations of a
//! little before it for context. Each is also put down to the fault that
//! was in force as it began (or had been healed less than a second
//! before: a paused node acts on what it believed just after it resumes),
//! so a report can say which faults cost what.

use crate::op::{Func, Kind, Mode, Op, Register, NEMESIS};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// How a history is judged.
#[derive(Clone, Debug)]
pub struct Options {
    /// Holders allowed at once per name (the cluster's `count`).
    pub permits: u32,
    /// How soon after the nemesis ends an acquire must succeed.
    pub recovery_bound_ns: u64,
    /// Violations of each kind that get a window (all are counted).
    pub windows_per_kind: usize,
    /// How much of the nemesis before a window is shown with it.
    pub context_ns: u64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            permits: 1,
            recovery_bound_ns: 10_000_000_000,
            windows_per_kind: 5,
            context_ns: 3_000_000_000,
        }
    }
}

/// A kind of violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViolationKind {
    /// More acknowledged holds at once than permits, each released as
    /// held.
    Overlap,
    /// More acknowledged holds at once than permits, one of them later
    /// found lost (its lease ran out, its node died).
    LeaseOverlap,
    /// A grant's fence is not above one acknowledged before it was asked.
    FenceOrder,
    /// Two grants carry one fence.
    DuplicateFence,
    /// The plain register lost updates.
    LostUpdatePlain,
    /// The fenced register lost updates.
    LostUpdateFenced,
    /// A register holds more than every write could have put there.
    PhantomUpdate,
    /// Nothing was granted within the bound after the nemesis ended.
    Stall,
}

impl ViolationKind {
    /// Every kind, in report order.
    pub const ALL: [ViolationKind; 8] = [
        ViolationKind::Overlap,
        ViolationKind::LeaseOverlap,
        ViolationKind::FenceOrder,
        ViolationKind::DuplicateFence,
        ViolationKind::LostUpdatePlain,
        ViolationKind::LostUpdateFenced,
        ViolationKind::PhantomUpdate,
        ViolationKind::Stall,
    ];

    /// Its name, as in the JSON report.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::Overlap => "overlap",
            ViolationKind::LeaseOverlap => "lease-overlap",
            ViolationKind::FenceOrder => "fence-order",
            ViolationKind::DuplicateFence => "duplicate-fence",
            ViolationKind::LostUpdatePlain => "lost-update-plain",
            ViolationKind::LostUpdateFenced => "lost-update-fenced",
            ViolationKind::PhantomUpdate => "phantom-update",
            ViolationKind::Stall => "stall",
        }
    }
}

/// One violation, with the window of the history that shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    /// What.
    pub kind: ViolationKind,
    /// The lock's name.
    pub name: String,
    /// In words.
    pub detail: String,
    /// The window's first and last instant.
    pub from_ns: u64,
    /// See `from_ns`.
    pub to_ns: u64,
    /// The fault in force as it began (the nemesis's `detail`), if any.
    pub during: Option<String>,
    /// The operations in the window that show it.
    pub window: Vec<Op>,
}

/// How long after its heal a fault is still blamed for what begins.
const AFTERMATH_NS: u64 = 1_000_000_000;

/// How operations of one function ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Acknowledged.
    pub ok: u64,
    /// Certainly not done.
    pub fail: u64,
    /// Unknown: completed `info`, or never completed.
    pub info: u64,
}

/// One register of one name.
#[derive(Clone, Debug, Serialize)]
pub struct RegisterReport {
    /// Which copy.
    pub register: Register,
    /// Writes acknowledged.
    pub writes_ok: u64,
    /// Writes refused (a stale fence, at the fenced copy).
    pub writes_refused: u64,
    /// Writes whose outcome is unknown.
    pub writes_unknown: u64,
    /// The driver's final read, if there was one.
    pub final_value: Option<i64>,
    /// Acknowledged writes the final value does not account for.
    pub lost_updates: Option<u64>,
}

/// One lock name.
#[derive(Clone, Debug, Serialize)]
pub struct NameReport {
    /// The name.
    pub name: String,
    /// Acquires acknowledged.
    pub grants: u64,
    /// Of them, readers' (`mode: read`).
    pub read_grants: u64,
    /// Holds that ended in a loss (`lose`).
    pub holds_lost: u64,
    /// The most acknowledged holds at one instant.
    pub max_holders: u32,
    /// The two registers.
    pub registers: Vec<RegisterReport>,
}

/// The verdict on a history.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// No violation of any kind.
    pub valid: bool,
    /// Operations, by function.
    pub ops: BTreeMap<String, Counts>,
    /// Per name.
    pub names: Vec<NameReport>,
    /// Violations found, by kind (all of them).
    pub violation_counts: BTreeMap<ViolationKind, u64>,
    /// Violations by kind and by the kind of fault in force as each began
    /// (the fault's name, as the nemesis's `detail` starts; `none`).
    pub by_fault: BTreeMap<ViolationKind, BTreeMap<String, u64>>,
    /// Violations with windows (at most `windows_per_kind` of each kind).
    pub violations: Vec<Violation>,
    /// When the nemesis ended (its last `end`), if it did.
    pub nemesis_end_ns: Option<u64>,
    /// From the nemesis's end to the first acquire acknowledged after it.
    pub recovery_ns: Option<u64>,
    /// The bound the recovery was held to.
    pub recovery_bound_ns: u64,
    /// The longest stretch, from the first grant to the last operation,
    /// with no acquire acknowledged.
    pub longest_gap_ns: u64,
}

impl Report {
    /// How many violations of `kind`.
    pub fn count(&self, kind: ViolationKind) -> u64 {
        self.violation_counts.get(&kind).copied().unwrap_or(0)
    }
}

/// A hold a client acknowledged.
#[derive(Clone, Debug)]
struct Hold {
    process: u32,
    /// Acquire invoked, acknowledged.
    invoked: u64,
    start: u64,
    /// Release invoked, loss learnt, or the history's end.
    end: u64,
    fence: Option<u64>,
    /// Ended in a loss: `lose`, or a release whose outcome is unknown.
    lost: bool,
    /// Shared with other readers, or alone.
    mode: Mode,
    /// The node that granted it, where the history says.
    node: Option<u32>,
}

impl Hold {
    /// Whether `self` and `other` are readers sharing one grant of their
    /// node: both read, through the same node, at one time.
    fn shares_a_grant_with(&self, other: &Hold) -> bool {
        let reads = self.mode == Mode::Read && other.mode == Mode::Read;
        let together = self.start < other.end && other.start < self.end;
        reads && together && self.node.is_some() && self.node == other.node
    }
}

/// Judges `history` (in time order, as [`read`](crate::read) returns it).
pub fn check(history: &[Op], options: &Options) -> Report {
    let mut found = Found::new(history, options);
    let end_of_history = history.last().map_or(0, |op| op.time_ns);
    let completions = pair(history);

    let mut ops: BTreeMap<String, Counts> = BTreeMap::new();
    for (i, op) in history.iter().enumerate() {
        if op.kind != Kind::Invoke || op.process == NEMESIS {
            continue;
        }
        let counts = ops.entry(func_name(op.f)).or_default();
        match completions[i].map(|j| history[j].kind) {
            Some(Kind::Ok) => counts.ok += 1,
            Some(Kind::Fail) => counts.fail += 1,
            _ => counts.info += 1,
        }
    }

    let mut names: Vec<String> = history
        .iter()
        .filter(|op| op.process != NEMESIS || op.f == Func::Read)
        .filter(|op| matches!(op.f, Func::Acquire | Func::Read | Func::Write))
        .map(|op| op.name.clone())
        .collect();
    names.sort();
    names.dedup();

    let mut reports = Vec::new();
    for name in &names {
        let holds = holds_of(history, &completions, name, end_of_history);
        let max_holders = found.overlaps(name, &holds);
        found.fence_order(name, &holds);
        let registers = [Register::Plain, Register::Fenced]
            .into_iter()
            .filter(|_| options.permits <= 1)
            .filter_map(|r| found.register(name, r, &completions))
            .collect();
        reports.push(NameReport {
            name: name.clone(),
            grants: holds.len() as u64,
            read_grants: holds.iter().filter(|h| h.mode == Mode::Read).count() as u64,
            holds_lost: history
                .iter()
                .filter(|op| op.f == Func::Lose && &op.name == name && op.process != NEMESIS)
                .count() as u64,
            max_holders,
            registers,
        });
    }

    let nemesis_end_ns = history
        .iter()
        .filter(|op| op.f == Func::End && op.process == NEMESIS)
        .map(|op| op.time_ns)
        .max();
    let grants: Vec<u64> = history
        .iter()
        .filter(|op| op.f == Func::Acquire && op.kind == Kind::Ok && op.process != NEMESIS)
        .map(|op| op.time_ns)
        .collect();
    let recovery_ns =
        nemesis_end_ns.and_then(|end| grants.iter().find(|&&t| t > end).map(|t| t - end));
    if let Some(end) = nemesis_end_ns {
        if recovery_ns.is_none_or(|r| r > options.recovery_bound_ns) {
            let detail = match recovery_ns {
                Some(r) => format!(
                    "the first acquire after the nemesis ended was acknowledged {} ms later, over the bound of {} ms",
                    r / 1_000_000,
                    options.recovery_bound_ns / 1_000_000
                ),
                None => format!(
                    "no acquire was acknowledged in the {} ms after the nemesis ended",
                    end_of_history.saturating_sub(end) / 1_000_000
                ),
            };
            let to = end + recovery_ns.unwrap_or(end_of_history.saturating_sub(end));
            found.add(ViolationKind::Stall, "*", detail, (end, end, to), &|_| false);
        }
    }
    let longest_gap_ns = grants
        .windows(2)
        .map(|w| w[1] - w[0])
        .chain(grants.last().map(|&t| end_of_history.saturating_sub(t)))
        .max()
        .unwrap_or(0);

    let valid = found.counts.values().all(|&n| n == 0);
    Report {
        valid,
        ops,
        names: reports,
        violation_counts: found.counts,
        by_fault: found.by_fault,
        violations: found.violations,
        nemesis_end_ns,
        recovery_ns,
        recovery_bound_ns: options.recovery_bound_ns,
        longest_gap_ns,
    }
}

fn func_name(f: Func) -> String {
    serde_json::to_value(f).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// For each invoke, the index of its completion: the same process's next
/// operation of the same function, if that is not another invoke.
fn pair(history: &[Op]) -> Vec<Option<usize>> {
    let mut pending: HashMap<u32, usize> = HashMap::new();
    let mut completion = vec![None; history.len()];
    for (i, op) in history.iter().enumerate() {
        if op.process == NEMESIS {
            continue;
        }
        match op.kind {
            Kind::Invoke => {
                pending.insert(op.process, i);
            }
            _ => {
                if let Some(&j) = pending.get(&op.process) {
                    if history[j].f == op.f {
                        completion[j] = Some(i);
                        pending.remove(&op.process);
                    }
                }
            }
        }
    }
    completion
}

/// The acknowledged holds of `name`, in order of their start.
fn holds_of(history: &[Op], completions: &[Option<usize>], name: &str, end: u64) -> Vec<Hold> {
    let mut open: HashMap<u32, Hold> = HashMap::new();
    let mut holds = Vec::new();
    for (i, op) in history.iter().enumerate() {
        if op.name != name || op.process == NEMESIS {
            continue;
        }
        match (op.f, op.kind) {
            (Func::Acquire, Kind::Invoke) => {
                if let Some(ok) = completions[i].map(|j| &history[j]).filter(|c| c.kind == Kind::Ok)
                {
                    if let Some(before) = open.remove(&op.process) {
                        holds.push(Hold { end: op.time_ns, ..before });
                    }
                    open.insert(
                        op.process,
                        Hold {
                            process: op.process,
                            invoked: op.time_ns,
                            start: ok.time_ns,
                            end,
                            fence: ok.fence,
                            lost: false,
                            mode: op.mode,
                            node: ok.node.or(op.node),
                        },
                    );
                }
            }
            (Func::Release, Kind::Invoke) | (Func::Lose, _) => {
                if let Some(hold) = open.remove(&op.process) {
                    let unanswered = op.f == Func::Release
                        && completions[i].is_none_or(|j| history[j].kind != Kind::Ok);
                    let lost = op.f == Func::Lose || unanswered;
                    holds.push(Hold { end: op.time_ns.max(hold.start), lost, ..hold });
                }
            }
            _ => {}
        }
    }
    holds.extend(open.into_values());
    holds.sort_by_key(|h| (h.start, h.process));
    holds
}

/// The violations found so far.
struct Found<'a> {
    history: &'a [Op],
    options: &'a Options,
    counts: BTreeMap<ViolationKind, u64>,
    by_fault: BTreeMap<ViolationKind, BTreeMap<String, u64>>,
    violations: Vec<Violation>,
    /// Each fault of the nemesis: its start, its heal, its detail.
    faults: Vec<(u64, u64, String)>,
}

impl<'a> Found<'a> {
    fn new(history: &'a [Op], options: &'a Options) -> Found<'a> {
        let counts = ViolationKind::ALL.iter().map(|&k| (k, 0)).collect();
        let mut faults: Vec<(u64, u64, String)> = Vec::new();
        for op in history.iter().filter(|op| op.process == NEMESIS) {
            match op.f {
                Func::Fault => {
                    faults.push((op.time_ns, u64::MAX, op.detail.clone().unwrap_or_default()))
                }
                Func::Heal | Func::End => {
                    for f in faults.iter_mut().filter(|f| f.1 == u64::MAX) {
                        f.1 = op.time_ns;
                    }
                }
                _ => {}
            }
        }
        Found {
            history,
            options,
            counts,
            by_fault: BTreeMap::new(),
            violations: Vec::new(),
            faults,
        }
    }

    /// The faults in force at `t`: begun by then, and healed no more than
    /// [`AFTERMATH_NS`] before (a fault's effects outlast its heal a
    /// little, so two may be blamed at once).
    fn during(&self, t: u64) -> Vec<&str> {
        self.faults
            .iter()
            .filter(|(start, heal, _)| *start <= t && heal.saturating_add(AFTERMATH_NS) >= t)
            .map(|(_, _, detail)| detail.as_str())
            .collect()
    }

    /// Counts a violation, blamed on the faults in force at `blame` (the
    /// moment it began), and keeps its window while there are few of its
    /// kind: the operations of `involved` processes in `[from, to]`, and the
    /// nemesis's from a little before.
    fn add(
        &mut self,
        kind: ViolationKind,
        name: &str,
        detail: String,
        (from, blame, to): (u64, u64, u64),
        involved: &dyn Fn(u32) -> bool,
    ) {
        let faults = self.during(blame);
        let during = (!faults.is_empty()).then(|| faults.join("; "));
        let names: Vec<&str> = faults.iter().map(|d| d.split(':').next().unwrap_or(d)).collect();
        let key = if names.is_empty() { "none".to_string() } else { names.join("+") };
        *self.by_fault.entry(kind).or_default().entry(key).or_default() += 1;
        let count = self.counts.entry(kind).or_default();
        *count += 1;
        if *count as usize > self.options.windows_per_kind {
            return;
        }
        let context = from.saturating_sub(self.options.context_ns);
        let window = self
            .history
            .iter()
            .filter(|op| {
                let t = op.time_ns;
                if op.process == NEMESIS {
                    (context..=to).contains(&t) && op.f != Func::Read
                } else {
                    (from..=to).contains(&t) && involved(op.process) && op.name == name
                }
            })
            .cloned()
            .collect();
        self.violations.push(Violation {
            kind,
            name: name.to_string(),
            detail,
            from_ns: from,
            to_ns: to,
            during,
            window,
        });
    }

    /// More than `permits` writers' holds at once, or a writer's with a
    /// reader's; returns the most holds seen at once.
    fn overlaps(&mut self, name: &str, holds: &[Hold]) -> u32 {
        let permits = self.options.permits.max(1) as usize;
        let mut active: Vec<&Hold> = Vec::new();
        let mut most = 0;
        for hold in holds {
            active.retain(|h| h.end > hold.start);
            active.push(hold);
            most = most.max(active.len());
            let writers = active.iter().filter(|h| h.mode == Mode::Write).count();
            let readers = active.len() - writers;
            let clash = if readers == 0 { writers > permits } else { writers > 0 };
            if clash {
                let first_end = active.iter().map(|h| h.end).min().unwrap_or(hold.start);
                let from = active.iter().map(|h| h.start).min().unwrap_or(hold.start);
                let who: Vec<String> = active
                    .iter()
                    .map(|h| {
                        let read = if h.mode == Mode::Read { ", read" } else { "" };
                        format!("process {} (fence {}{read})", h.process, fence_text(h.fence))
                    })
                    .collect();
                let what = if readers > 0 { ", a writer among readers" } else { "" };
                let detail = format!(
                    "{} acknowledged holds at once (permits {permits}{what}): {}",
                    active.len(),
                    who.join(", ")
                );
                let procs: Vec<u32> = active.iter().map(|h| h.process).collect();
                let kind = if active.iter().any(|h| h.lost) {
                    ViolationKind::LeaseOverlap
                } else {
                    ViolationKind::Overlap
                };
                let span = (from, hold.start, first_end);
                self.add(kind, name, detail, span, &|p| procs.contains(&p));
            }
        }
        most as u32
    }

    /// Grants ordered in real time whose fences are not; fences granted twice.
    fn fence_order(&mut self, name: &str, holds: &[Hold]) {
        let mut by_fence: BTreeMap<u64, &Hold> = BTreeMap::new();
        for hold in holds {
            let Some(fence) = hold.fence else { continue };
            if let Some(other) = by_fence.get(&fence) {
                if hold.shares_a_grant_with(other) {
                    continue;
                }
                let detail = format!(
                    "processes {} and {} were both granted fence {fence}",
                    other.process, hold.process
                );
                let procs = [other.process, hold.process];
                let (from, to) = (other.invoked.min(hold.invoked), other.start.max(hold.start));
                self.add(ViolationKind::DuplicateFence, name, detail, (from, to, to), &|p| {
                    procs.contains(&p)
                });
            } else {
                by_fence.insert(fence, hold);
            }
        }
        if self.options.permits > 1 {
            return;
        }
        // Sweep the grants in the order they were asked, folding in every
        // grant acknowledged before each was asked: the highest fence so
        // far must be below it (for a reader, the highest writer's).
        let mut asked: Vec<&Hold> = holds.iter().filter(|h| h.fence.is_some()).collect();
        asked.sort_by_key(|h| h.invoked);
        let mut acked: Vec<&Hold> = asked.clone();
        acked.sort_by_key(|h| h.start);
        let mut next = 0;
        let mut highest: Option<&Hold> = None;
        let mut highest_writer: Option<&Hold> = None;
        fn raise<'h>(high: &mut Option<&'h Hold>, h: &'h Hold) {
            if high.is_none_or(|top| h.fence > top.fence) {
                *high = Some(h);
            }
        }
        for hold in asked {
            while next < acked.len() && acked[next].start < hold.invoked {
                raise(&mut highest, acked[next]);
                if acked[next].mode == Mode::Write {
                    raise(&mut highest_writer, acked[next]);
                }
                next += 1;
            }
            let above = if hold.mode == Mode::Read { highest_writer } else { highest };
            if let Some(before) = above.filter(|h| h.fence > hold.fence) {
                let detail = format!(
                    "process {} was granted fence {} after process {} had been granted {}",
                    hold.process,
                    fence_text(hold.fence),
                    before.process,
                    fence_text(before.fence)
                );
                let procs = [before.process, hold.process];
                let span = (before.start, hold.start, hold.start);
                self.add(ViolationKind::FenceOrder, name, detail, span, &|p| procs.contains(&p));
            }
        }
    }

    /// The writes to one register of `name`, and what the final read says.
    fn register(
        &mut self,
        name: &str,
        register: Register,
        completions: &[Option<usize>],
    ) -> Option<RegisterReport> {
        let history = self.history;
        let mut report = RegisterReport {
            register,
            writes_ok: 0,
            writes_refused: 0,
            writes_unknown: 0,
            final_value: None,
            lost_updates: None,
        };
        let mut seen = false;
        // The first acknowledged write of each value: two writes of one
        // value show a lost update by themselves.
        let mut first_write: HashMap<i64, usize> = HashMap::new();
        let mut twice: Option<(usize, usize)> = None;
        for (i, op) in history.iter().enumerate() {
            if op.name != name || op.register != Some(register) {
                continue;
            }
            seen = true;
            if op.process == NEMESIS {
                if op.f == Func::Read && op.kind == Kind::Ok {
                    report.final_value = op.value;
                }
                continue;
            }
            if op.f != Func::Write || op.kind != Kind::Invoke {
                continue;
            }
            match completions[i].map(|j| (j, history[j].kind)) {
                Some((j, Kind::Ok)) => {
                    report.writes_ok += 1;
                    if let Some(v) = history[j].value.or(op.value) {
                        match first_write.get(&v) {
                            Some(&k) if twice.is_none() => twice = Some((k, i)),
                            Some(_) => {}
                            None => {
                                first_write.insert(v, i);
                            }
                        }
                    }
                }
                Some((_, Kind::Fail)) => report.writes_refused += 1,
                _ => report.writes_unknown += 1,
            }
        }
        if !seen {
            return None;
        }
        let Some(final_value) = report.final_value else { return Some(report) };
        let lost = report.writes_ok.saturating_sub(final_value.max(0) as u64);
        report.lost_updates = Some(lost);
        let kind = match register {
            Register::Plain => ViolationKind::LostUpdatePlain,
            Register::Fenced => ViolationKind::LostUpdateFenced,
        };
        if lost > 0 {
            let detail = format!(
                "the {} register ends at {final_value} after {} acknowledged increments: {lost} lost",
                register_name(register),
                report.writes_ok
            );
            let (from, to, procs) = match twice {
                Some((a, b)) => {
                    // From the read before the first write to the second write.
                    let pa = history[a].process;
                    let read_before = history[..a]
                        .iter()
                        .rev()
                        .find(|op| {
                            op.process == pa && op.f == Func::Read && op.kind == Kind::Invoke
                        })
                        .map_or(history[a].time_ns, |op| op.time_ns);
                    let read_b = history[..b]
                        .iter()
                        .rev()
                        .find(|op| {
                            op.process == history[b].process
                                && op.f == Func::Read
                                && op.kind == Kind::Invoke
                        })
                        .map_or(history[b].time_ns, |op| op.time_ns);
                    let end = completions[b].map_or(history[b].time_ns, |j| history[j].time_ns);
                    (read_before.min(read_b), end, vec![pa, history[b].process])
                }
                None => (
                    history.first().map_or(0, |op| op.time_ns),
                    history.last().map_or(0, |op| op.time_ns),
                    Vec::new(),
                ),
            };
            self.add(kind, name, detail, (from, from, to), &|p| procs.contains(&p));
        }
        let possible = report.writes_ok + report.writes_unknown;
        if final_value > possible as i64 {
            let detail = format!(
                "the {} register ends at {final_value}, more than the {possible} writes that could have reached it",
                register_name(register)
            );
            let last = history.last().map_or(0, |op| op.time_ns);
            self.add(ViolationKind::PhantomUpdate, name, detail, (last, last, last), &|_| false);
        }
        Some(report)
    }
}

fn register_name(register: Register) -> &'static str {
    match register {
        Register::Plain => "plain",
        Register::Fenced => "fenced",
    }
}

fn fence_text(fence: Option<u64>) -> String {
    fence.map_or("?".into(), |f| f.to_string())
}
