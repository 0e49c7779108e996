//! `coterie workload`: drive clients against a cluster and measure.

use super::common::{self, NodeAddr, Target};
use super::status;
use anyhow::{bail, Result};
use coterie_node::{Acquired, Entry, WitnessClient};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Drive clients against every node and report throughput, latency,
/// messages per entry and what the witness saw.
///
/// Each client connects to its node's client port and loops: acquire, enter
/// the witness with the fence (if the configuration names one), hold, leave,
/// release, think. A client whose node goes away keeps trying to reconnect
/// until the run ends: give --duration when a node may stay down.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Clients per node.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Entries each client makes.
    #[arg(long, default_value_t = 100)]
    requests: u64,
    /// Stop after this long even with requests left (a client whose node is
    /// down keeps retrying until then).
    #[arg(long, value_parser = common::parse_duration)]
    duration: Option<Duration>,
    /// Time inside the critical section.
    #[arg(long, default_value = "0ms", value_parser = common::parse_duration)]
    hold: Duration,
    /// Time between a release and the next request.
    #[arg(long, default_value = "0ms", value_parser = common::parse_duration)]
    think: Duration,
    /// Check entries at this witness (default: the configuration's).
    #[arg(long, value_name = "ADDR")]
    witness: Option<String>,
    /// Do not check entries at any witness (measures the lock alone).
    #[arg(long, conflicts_with = "witness")]
    no_witness: bool,
    /// A request not granted within this long is counted as unanswered,
    /// given up and made again.
    #[arg(long, default_value = "10s", value_parser = common::parse_duration)]
    answer_within: Duration,
    /// Print a JSON report.
    #[arg(long)]
    json: bool,
}

/// What a run of clients should do.
#[derive(Clone, Debug)]
pub struct Spec {
    pub nodes: Vec<NodeAddr>,
    pub clients: usize,
    pub requests: u64,
    pub hold: Duration,
    pub think: Duration,
    pub witness: Option<String>,
    /// Clients stop at this moment even with requests left.
    pub deadline: Option<Instant>,
    /// Print progress on stderr once a second.
    pub progress: bool,
    /// A request not granted within this long counts as unanswered (and
    /// the client gives it up and asks again).
    pub answer_within: Duration,
    /// Where to report what the witness refused or caught, as it happens.
    pub events: Option<tokio::sync::mpsc::UnboundedSender<Seen>>,
}

/// Something a client saw that a live timeline should show.
#[derive(Clone, Debug)]
pub enum Seen {
    /// The witness refused a grant of `node` as stale.
    Stale { node: u32, fence: u64, last: u64 },
    /// The witness let a holder of `node` in over the capacity.
    Overlap { node: u32, fence: u64, holders: u32 },
    /// A request to `node` was not granted within the limit.
    Unanswered { node: u32 },
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// What a run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub entries: u64,
    pub errors: u64,
    pub seconds: f64,
    pub throughput_per_s: f64,
    /// From asking to being granted.
    pub latency_ms: Latency,
    pub messages_per_entry: f64,
    pub violations: u64,
    pub stale_fences: u64,
    /// Requests not granted within the limit (`answer_within`).
    pub unanswered: u64,
}

#[derive(Default)]
struct Tally {
    entries: AtomicU64,
    errors: AtomicU64,
    stale: AtomicU64,
    unanswered: AtomicU64,
}

/// Total mutex-layer messages sent by the nodes that answer.
async fn mutex_messages(nodes: &[NodeAddr]) -> u64 {
    let mut total = 0;
    for node in nodes {
        if let Ok(s) = status::fetch(node).await {
            total += s.mutex_messages_sent;
        }
    }
    total
}

/// Runs the clients and gathers the report.
pub async fn drive(spec: Spec) -> Result<Report> {
    let before = mutex_messages(&spec.nodes).await;
    let witness_before = match &spec.witness {
        Some(addr) => Some(WitnessClient::connect(addr).await?.report().await?),
        None => None,
    };
    let tally = Arc::new(Tally::default());
    // Microseconds, from 1 µs to an hour; `saturating_record` clamps to the
    // bounds (an unbounded `new` would clamp everything to its initial 2).
    let histogram = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds");
    let histogram = Arc::new(Mutex::new(histogram));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for node in &spec.nodes {
        for _ in 0..spec.clients {
            let (node, spec, tally, histogram) =
                (node.clone(), spec.clone(), tally.clone(), histogram.clone());
            tasks.spawn(async move { client_loop(node, spec, tally, histogram).await });
        }
    }
    let total = spec.requests.saturating_mul((spec.nodes.len() * spec.clients) as u64);
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.tick().await;
    loop {
        tokio::select! {
            next = tasks.join_next() => if next.is_none() { break },
            _ = ticker.tick(), if spec.progress => {
                eprint!("\r  {} / {} entries, {:.0}/s ", tally.entries.load(Ordering::Relaxed), total,
                    tally.entries.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64());
                let _ = std::io::stderr().flush();
            }
        }
    }
    if spec.progress {
        eprintln!();
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = mutex_messages(&spec.nodes).await;
    let entries = tally.entries.load(Ordering::Relaxed);
    let (violations, stale_fences) = match (&spec.witness, witness_before) {
        (Some(addr), Some(before)) => {
            let now = WitnessClient::connect(addr).await?.report().await?;
            (now.violations - before.violations, now.stale_fences - before.stale_fences)
        }
        _ => (0, tally.stale.load(Ordering::Relaxed)),
    };
    let h = histogram.lock().expect("histogram lock");
    let ms = |us: u64| us as f64 / 1000.0;
    Ok(Report {
        entries,
        errors: tally.errors.load(Ordering::Relaxed),
        seconds,
        throughput_per_s: entries as f64 / seconds.max(1e-9),
        latency_ms: Latency {
            p50: ms(h.value_at_quantile(0.5)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
        },
        messages_per_entry: if entries > 0 {
            after.saturating_sub(before) as f64 / entries as f64
        } else {
            0.0
        },
        violations,
        stale_fences,
        unanswered: tally.unanswered.load(Ordering::Relaxed),
    })
}

async fn client_loop(
    node: NodeAddr,
    spec: Spec,
    tally: Arc<Tally>,
    histogram: Arc<Mutex<Histogram<u64>>>,
) {
    let mut done = 0;
    let past_deadline = || spec.deadline.is_some_and(|d| Instant::now() >= d);
    while done < spec.requests && !past_deadline() {
        match one_session(&node, &spec, &mut done, &tally, &histogram, &past_deadline).await {
            Ok(()) => {}
            Err(_) => {
                // The node or the witness went away: count it, wait, retry.
                tally.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn one_session(
    node: &NodeAddr,
    spec: &Spec,
    done: &mut u64,
    tally: &Tally,
    histogram: &Mutex<Histogram<u64>>,
    past_deadline: &impl Fn() -> bool,
) -> Result<()> {
    let mut client = node.connect().await?;
    let mut witness = match &spec.witness {
        Some(addr) => Some(WitnessClient::connect(addr).await?),
        None => None,
    };
    let id = node.id.unwrap_or_default();
    let tell = |seen: Seen| {
        if let Some(events) = &spec.events {
            let _ = events.send(seen);
        }
    };
    while *done < spec.requests && !past_deadline() {
        let asked = Instant::now();
        let fence = match client.acquire(Some(spec.answer_within), false).await? {
            Acquired::Granted(f) => f,
            Acquired::TimedOut | Acquired::Busy => {
                tally.unanswered.fetch_add(1, Ordering::Relaxed);
                tell(Seen::Unanswered { node: id });
                bail!("not granted within {:?}", spec.answer_within)
            }
        };
        let waited = asked.elapsed().as_micros() as u64;
        histogram.lock().expect("histogram lock").saturating_record(waited.max(1));
        if let Some(w) = witness.as_mut() {
            match w.enter(fence, id).await? {
                Entry::Stale { last } => {
                    tally.stale.fetch_add(1, Ordering::Relaxed);
                    tell(Seen::Stale { node: id, fence, last });
                }
                Entry::Accepted { holders, violation: true } => {
                    tell(Seen::Overlap { node: id, fence, holders })
                }
                Entry::Accepted { .. } => {}
            }
        }
        if !spec.hold.is_zero() {
            // A careful holder stops using the resource the moment its
            // session ends: its node died, and the lock is no longer its.
            tokio::select! {
                _ = tokio::time::sleep(spec.hold) => {}
                loss = client.lost() => {
                    if let Some(w) = witness.as_mut() {
                        w.leave(fence).await?;
                    }
                    bail!("lost the lock while holding it: {loss}");
                }
            }
        }
        if let Some(w) = witness.as_mut() {
            w.leave(fence).await?;
        }
        client.release().await?;
        *done += 1;
        tally.entries.fetch_add(1, Ordering::Relaxed);
        if !spec.think.is_zero() {
            tokio::time::sleep(spec.think).await;
        }
    }
    Ok(())
}

pub fn print(report: &Report) {
    println!(
        "{} entries in {:.2}s: {:.0} entries/s; latency p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        report.entries,
        report.seconds,
        report.throughput_per_s,
        report.latency_ms.p50,
        report.latency_ms.p99,
        report.latency_ms.max
    );
    println!(
        "messages per entry {:.2}; witness: {} violations, {} stale fences; {} failed client attempts ({} unanswered)",
        report.messages_per_entry, report.violations, report.stale_fences, report.errors, report.unanswered
    );
}

pub fn run(args: Args) -> Result<ExitCode> {
    let cfg = args.target.load_config()?;
    let configured = cfg.as_ref().and_then(|c| c.witness.as_ref()).map(|w| w.addr.clone());
    let witness = if args.no_witness { None } else { args.witness.clone().or(configured) };
    let spec = Spec {
        nodes: args.target.nodes()?,
        clients: args.clients,
        requests: args.requests,
        hold: args.hold,
        think: args.think,
        witness,
        deadline: args.duration.map(|d| Instant::now() + d),
        progress: !args.json,
        answer_within: args.answer_within,
        events: None,
    };
    let report = common::small_runtime()?.block_on(drive(spec))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(if report.violations == 0 && report.stale_fences == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
