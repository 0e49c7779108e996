//! `coterie history`: record what clients were told, and check it.
//!
//! `history client` is one recorded client process: it takes the lock over
//! and over, and while it holds it increments the witness's register for
//! that lock (or, holding it to read, reads the register only), writing
//! every operation it invokes and how it completed to its own history
//! file. `history check` merges such files and judges
//! them (see `coterie_history::check`). `coterie nemesis` runs clients of
//! this kind against a cluster under faults.

use super::common::{self, Target};
use anyhow::{Context, Result};
use coterie_history::{check, Func, Kind, Mode, Op, Options, Recorder, Register, Report};
use coterie_node::{Client, ClientError, LockRequest, Outcome, WitnessClient};
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Record a client's operations, or check recorded histories.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Run one recorded client: take the lock again and again, increment
    /// the witness's register while holding it, and write every operation
    /// to a history file (JSON lines on the host's monotonic clock).
    Client(ClientArgs),
    /// Check histories: overlapping holds, fences out of real-time order,
    /// lost updates on the plain and the fenced register, a stall after
    /// the nemesis ended. Exits 1 if any is found.
    Check(CheckArgs),
}

#[derive(clap::Args)]
struct ClientArgs {
    #[command(flatten)]
    target: Target,
    /// The witness whose register the lock protects.
    #[arg(long, value_name = "ADDR")]
    witness: String,
    /// This client's process number in the history (1 and up; 0 is the
    /// nemesis).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    process: u32,
    /// Where to write the history.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// The lock (and register) name.
    #[arg(long, default_value = "default", conflicts_with = "names")]
    name: String,
    /// Spread the operations over this many locks (`r0` .. `rK-1`, each
    /// with its register), one drawn for each acquire from a generator
    /// seeded with the process number.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    names: Option<u32>,
    /// How long to hold the lock between reading the register and writing
    /// it back.
    #[arg(long, value_parser = common::parse_duration, default_value = "20ms")]
    hold: Duration,
    /// How long to wait between releasing and asking again.
    #[arg(long, value_parser = common::parse_duration, default_value = "0ms")]
    think: Duration,
    /// The share of acquires (0 to 1, drawn for each from the generator
    /// seeded with the process number) that take the lock to read: such a
    /// holder reads the registers and writes nothing.
    #[arg(long, default_value_t = 0.0, value_parser = common::parse_share)]
    read_share: f64,
    /// Give up an acquire after this long (recorded as a failed acquire).
    #[arg(long, value_parser = common::parse_duration, default_value = "5s")]
    timeout: Duration,
    /// Stop after this long (default: at SIGTERM or SIGINT).
    #[arg(long, value_parser = common::parse_duration)]
    duration: Option<Duration>,
}

#[derive(clap::Args)]
struct CheckArgs {
    /// History files (JSON lines); merged in time order.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Holders allowed at once per name (the cluster's `count`).
    #[arg(long, default_value_t = 1)]
    permits: u32,
    /// How soon after the nemesis ends an acquire must succeed.
    #[arg(long, value_parser = common::parse_duration, default_value = "10s")]
    recovery_bound: Duration,
    /// Violations of each kind shown with their window (all are counted).
    #[arg(long, default_value_t = 5)]
    windows: usize,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Also draw the history (acquire latencies over time, faults behind
    /// them) as an SVG picture in FILE.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        Command::Client(a) => client(a),
        Command::Check(a) => {
            let history = coterie_history::read(&a.files)?;
            let options = Options {
                permits: a.permits,
                recovery_bound_ns: a.recovery_bound.as_nanos() as u64,
                windows_per_kind: a.windows,
                ..Options::default()
            };
            let report = check(&history, &options);
            if let Some(path) = &a.plot {
                let title = a.files.first().map(|f| f.display().to_string()).unwrap_or_default();
                std::fs::write(path, coterie_history::plot::svg(&history, &title))
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", render(&history, &report));
            }
            Ok(if report.valid { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
    }
}

/// The report in words: counts, per-name registers, recovery, and each
/// violation with its window.
pub fn render(history: &[Op], report: &Report) -> String {
    use std::fmt::Write as _;
    let origin = history.first().map_or(0, |op| op.time_ns);
    let at = |t: u64| format!("{:>9.3} s", t.saturating_sub(origin) as f64 / 1e9);
    let mut out = String::new();
    let processes: std::collections::BTreeSet<u32> =
        history.iter().map(|op| op.process).filter(|&p| p != coterie_history::NEMESIS).collect();
    let _ = writeln!(out, "{} operations by {} client processes", history.len(), processes.len());
    for (f, c) in &report.ops {
        let _ = writeln!(out, "  {f:<8} ok {:>7}  fail {:>6}  info {:>5}", c.ok, c.fail, c.info);
    }
    for name in &report.names {
        let _ = writeln!(
            out,
            "lock {:?}: {} grants, {} holds lost, at most {} holders at once",
            name.name, name.grants, name.holds_lost, name.max_holders
        );
        for r in &name.registers {
            let lost = r.lost_updates.map_or("not judged (no final read)".into(), |n| {
                format!("final {}, {n} lost updates", r.final_value.unwrap_or_default())
            });
            let _ = writeln!(
                out,
                "  {:<7} register: {} writes ok, {} refused, {} unknown; {lost}",
                format!("{:?}", r.register).to_lowercase(),
                r.writes_ok,
                r.writes_refused,
                r.writes_unknown
            );
        }
    }
    match (report.nemesis_end_ns, report.recovery_ns) {
        (Some(_), Some(r)) => {
            let _ = writeln!(
                out,
                "recovery: an acquire was acknowledged {:.0} ms after the nemesis ended (bound {} ms)",
                r as f64 / 1e6,
                report.recovery_bound_ns / 1_000_000
            );
        }
        (Some(_), None) => {
            let _ = writeln!(out, "recovery: no acquire was acknowledged after the nemesis ended");
        }
        _ => {}
    }
    let _ = writeln!(
        out,
        "longest stretch without a grant: {:.0} ms",
        report.longest_gap_ns as f64 / 1e6
    );
    let found: Vec<String> = report
        .violation_counts
        .iter()
        .filter(|(_, &n)| n > 0)
        .map(|(k, n)| format!("{} {n}", k.as_str()))
        .collect();
    if found.is_empty() {
        let _ = writeln!(out, "valid: no violation");
        return out;
    }
    let _ = writeln!(out, "INVALID: {}", found.join(", "));
    for v in &report.violations {
        let during = v.during.as_deref().map_or(String::new(), |d| format!(" (during {d})"));
        let _ = writeln!(
            out,
            "\n{} on {:?}, {} .. {}{during}: {}",
            v.kind.as_str(),
            v.name,
            at(v.from_ns),
            at(v.to_ns),
            v.detail
        );
        for op in &v.window {
            let _ = writeln!(out, "  {}  {}", at(op.time_ns), describe(op));
        }
    }
    out
}

/// One operation, in a line.
fn describe(op: &Op) -> String {
    let who = if op.process == coterie_history::NEMESIS {
        "nemesis".to_string()
    } else {
        format!("p{}", op.process)
    };
    let mut line = format!(
        "{who:<7} {:<6} {:<7}",
        format!("{:?}", op.kind).to_lowercase(),
        format!("{:?}", op.f).to_lowercase()
    );
    if let Some(r) = op.register {
        line += &format!(" {}", format!("{r:?}").to_lowercase());
    }
    if let Some(n) = op.node {
        line += &format!(" node={n}");
    }
    if let Some(f) = op.fence {
        line += &format!(" fence={f}");
    }
    if let Some(v) = op.value {
        line += &format!(" value={v}");
    }
    if let Some(e) = &op.error {
        line += &format!(" ({e})");
    }
    if let Some(d) = &op.detail {
        line += &format!(" {d}");
    }
    line
}

/// Runs one recorded client until its duration ends or it is told to stop.
fn client(args: ClientArgs) -> Result<ExitCode> {
    let nodes = args.target.nodes()?;
    let mut recorder = Recorder::create(&args.out, args.process)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    common::small_runtime()?.block_on(async move {
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            common::shutdown_signal().await;
            let _ = stop_tx.send(true);
        });
        let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
        let mut c = Recorded {
            args: &args,
            recorder: &mut recorder,
            stop,
            session: None,
            name: args.name.clone(),
            draw: rand_chacha::ChaCha8Rng::seed_from_u64(u64::from(args.process)),
            mode: Mode::Write,
        };
        let mut witness: Option<WitnessClient> = None;
        let mut turn = 0usize;
        while !c.stopping() && deadline.is_none_or(|d| tokio::time::Instant::now() < d) {
            if c.session.is_none() {
                // Each client keeps to one node, the others in turn when
                // it does not answer.
                let node = &nodes[(args.process as usize - 1 + turn) % nodes.len()];
                match node.connect().await {
                    Ok(session) => c.session = Some((session, node.id.unwrap_or_default())),
                    Err(e) => {
                        turn += 1;
                        let asked = c.op(Func::Acquire).node(node.id.unwrap_or_default());
                        let asked = c.recorder.invoke(asked)?;
                        c.recorder.complete(
                            asked.complete(0, Kind::Fail).error(format!("no session: {e}")),
                        )?;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
            if let Some(fence) = c.acquire().await? {
                if witness.is_none() {
                    witness = WitnessClient::connect(&args.witness).await.ok();
                }
                c.critical_section(fence, &mut witness).await?;
            }
            if !args.think.is_zero() {
                tokio::time::sleep(args.think).await;
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// A recorded client's state between operations.
struct Recorded<'a> {
    args: &'a ClientArgs,
    recorder: &'a mut Recorder,
    stop: tokio::sync::watch::Receiver<bool>,
    /// The session with a node, and the node's id.
    session: Option<(Client, u32)>,
    /// The lock (and register) of the operation under way.
    name: String,
    /// Where the locks are drawn from, with --names, and the modes, with
    /// --read-share.
    draw: rand_chacha::ChaCha8Rng,
    /// How the operation under way holds the lock.
    mode: Mode,
}

impl Recorded<'_> {
    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    fn op(&self, f: Func) -> Op {
        Op::new(0, 0, Kind::Invoke, f, &self.name)
    }

    /// Asks for the lock (with --names, one drawn now); the fence if
    /// granted.
    async fn acquire(&mut self) -> Result<Option<u64>> {
        if let Some(k) = self.args.names {
            self.name = format!("r{}", self.draw.random_range(0..k));
        }
        let read = self.args.read_share > 0.0 && self.draw.random_bool(self.args.read_share);
        self.mode = if read { Mode::Read } else { Mode::Write };
        let ask = self.op(Func::Acquire).mode(self.mode);
        let Some((session, node)) = self.session.as_mut() else { return Ok(None) };
        let asked = self.recorder.invoke(ask.node(*node))?;
        let mut stop = self.stop.clone();
        let mode = if read { coterie_node::Mode::Read } else { coterie_node::Mode::Write };
        let request =
            LockRequest::new([self.name.clone()]).timeout(Some(self.args.timeout)).mode(mode);
        let outcome = tokio::select! {
            outcome = session.request(&request) => outcome,
            _ = stop.wait_for(|&s| s) => {
                self.session = None;
                self.recorder.complete(asked.complete(0, Kind::Info).error("stopped while waiting"))?;
                return Ok(None);
            }
        };
        let (kind, fence, error) = match outcome {
            Ok(Outcome::Granted(grant)) => (Kind::Ok, Some(grant.fence()), None),
            Ok(Outcome::TimedOut) => (Kind::Fail, None, Some("timeout".to_string())),
            Ok(Outcome::Busy) => (Kind::Fail, None, Some("busy".to_string())),
            Err(ClientError::Refused(why)) => {
                self.session = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
                (Kind::Fail, None, Some(format!("refused: {why}")))
            }
            Err(e) => {
                // The session broke with the request in flight: the node
                // releases a grant that raced the break, but the client
                // cannot know whether there was one.
                self.session = None;
                (Kind::Info, None, Some(e.to_string()))
            }
        };
        let mut done = asked.complete(0, kind);
        done.fence = fence;
        done.error = error;
        self.recorder.complete(done)?;
        Ok(fence)
    }

    /// Reads both registers, holds, writes each back plus one, releases;
    /// records a loss of the lock if the session reports one meanwhile.
    async fn critical_section(
        &mut self,
        fence: u64,
        witness: &mut Option<WitnessClient>,
    ) -> Result<()> {
        let plain = self.register_op(witness, Func::Read, Register::Plain, fence, None).await?;
        let fenced = self.register_op(witness, Func::Read, Register::Fenced, fence, None).await?;
        // Hold, keeping the session's lease. Like any client, this one may
        // be stopped here and wake after its lease ran out: whether it
        // notices before it writes is a race, as it is for a real program.
        let lost = match self.session.as_mut() {
            Some((session, _)) => tokio::select! {
                loss = session.lost() => Some(loss),
                _ = tokio::time::sleep(self.args.hold) => None,
            },
            None => None,
        };
        if let Some(loss) = lost {
            self.session = None;
            let lost = self.op(Func::Lose).fence(fence).complete(0, Kind::Info);
            self.recorder.complete(lost.error(loss.to_string()))?;
            return Ok(());
        }
        // A reader writes nothing back.
        let (plain, fenced) = match self.mode {
            Mode::Read => (None, None),
            Mode::Write => (plain, fenced),
        };
        if let Some(v) = plain {
            self.register_op(witness, Func::Write, Register::Plain, fence, Some(v + 1)).await?;
        }
        if let Some(v) = fenced {
            self.register_op(witness, Func::Write, Register::Fenced, fence, Some(v + 1)).await?;
        }
        let release = self.op(Func::Release).fence(fence);
        let Some((session, _)) = self.session.as_mut() else { return Ok(()) };
        let asked = self.recorder.invoke(release)?;
        match session.release().await {
            Ok(()) => self.recorder.complete(asked.complete(0, Kind::Ok))?,
            Err(e) => {
                self.session = None;
                self.recorder.complete(asked.complete(0, Kind::Info).error(e.to_string()))?
            }
        };
        Ok(())
    }

    /// One read or write of a register, recorded; the value read.
    async fn register_op(
        &mut self,
        witness: &mut Option<WitnessClient>,
        f: Func,
        register: Register,
        fence: u64,
        value: Option<i64>,
    ) -> Result<Option<i64>> {
        let mut op = self.op(f).register(register).fence(fence);
        op.value = value;
        let asked = self.recorder.invoke(op)?;
        let fenced = register == Register::Fenced;
        let name = &self.name;
        let outcome = match witness.as_mut() {
            None => Err(ClientError::Closed),
            Some(w) => match (f, value) {
                (Func::Write, Some(v)) => {
                    w.write(name, fenced, Some(fence), v).await.map(|r| r.map(|()| v))
                }
                _ => w.read(name, fenced, Some(fence)).await,
            },
        };
        let (done, read) = match outcome {
            Ok(Ok(v)) => (asked.complete(0, Kind::Ok).value(v), Some(v)),
            Ok(Err(highest)) => (
                asked
                    .complete(0, Kind::Fail)
                    .error(format!("stale fence: the register has seen {highest}")),
                None,
            ),
            Err(e) => {
                *witness = None;
                (asked.complete(0, Kind::Info).error(e.to_string()), None)
            }
        };
        self.recorder.complete(done)?;
        Ok(read)
    }
}

/// The history files of a run directory: every `*.jsonl` in `dir`.
pub fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    Ok(files)
}
