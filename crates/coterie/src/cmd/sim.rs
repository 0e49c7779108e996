//! `coterie sim`: the deterministic simulator from the command line.

use super::common::{self, parse_duration};
use anyhow::Result;
use coterie_core::{Detector, LeaseTiming, Mode, MutexOptions, Partitions, Priority, Timing};
use coterie_sim::run_seeds;
use coterie_sim::sim::{self, Load, SimConfig};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// Run algorithms in the deterministic simulator.
///
/// Each seed is one run: a cluster of --nodes nodes, every node's client
/// asking for the critical section --requests times, messages delayed at
/// random on FIFO links, and (with --crashes) nodes crashing and restarting.
/// Safety, fences, liveness and agreement on the coordinator are checked
/// after every step. A violation prints the seed that reproduces it; replay
/// it with --seed and --trace, and draw it with --diagram.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    algorithms: common::Simulated,
    /// Cluster size.
    #[arg(long, default_value_t = 5)]
    nodes: u32,
    /// How many seeds to run (0, 1, 2, ...), unless --seed names one.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// Run only this seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Crash and restart up to this many nodes per run.
    #[arg(long, default_value_t = 0)]
    crashes: u32,
    /// Partition the network this many times per run: a random minority
    /// cut off for one to six failure timeouts, then healed.
    #[arg(long, default_value_t = 0, num_args = 0..=1, default_missing_value = "1")]
    partitions: u32,
    /// Partition the network one way this many times per run: a random
    /// minority hears nothing from the rest, or the rest nothing from it,
    /// for one to six failure timeouts, then healed.
    #[arg(long, default_value_t = 0, num_args = 0..=1, default_missing_value = "1")]
    one_way_partitions: u32,
    /// Pause a random node this many times per run (frozen with its state
    /// for up to four failure timeouts, then carrying on).
    #[arg(long, default_value_t = 0, num_args = 0..=1, default_missing_value = "1")]
    pauses: u32,
    /// Slow a random node's messages this many times per run: each spike
    /// adds 0.2 to 3 failure timeouts to everything the node sends, for
    /// one to six failure timeouts (FIFO kept, nothing lost).
    #[arg(long, default_value_t = 0, num_args = 0..=1, default_missing_value = "1")]
    delays: u32,
    /// The range a delay spike's extra delay is drawn from, as MIN..MAX
    /// (e.g. 0ms..125ms); by default 0.2 to 3 failure timeouts.
    #[arg(long, value_name = "MIN..MAX", value_parser = duration_range)]
    delay_spike: Option<(Duration, Duration)>,
    /// Each client's thought between a release and its next request,
    /// drawn uniformly from MIN..MAX (default 0ms..20ms): a long one
    /// leaves the lock quiet, as locality needs.
    #[arg(long, value_name = "MIN..MAX", value_parser = duration_range)]
    think: Option<(Duration, Duration)>,
    /// Lose 10% to 50% of a random node's outgoing messages (heartbeats
    /// included) this many times per run, for one to six failure timeouts
    /// each. Liveness is not promised meanwhile.
    #[arg(long, default_value_t = 0, num_args = 0..=1, default_missing_value = "1")]
    drops: u32,
    /// Break a random node's connections to and from every peer this many
    /// times per run, with frames in flight in them; both sides redial at
    /// once and their sessions send again what was lost.
    #[arg(long, default_value_t = 0, num_args = 0..=1, default_missing_value = "1")]
    resets: u32,
    /// Cap each session at this many unacknowledged frames (default 8192):
    /// a small cap makes sessions overflow, and their peers be declared
    /// failed, to see what that costs.
    #[arg(long, value_name = "FRAMES")]
    session_cap: Option<usize>,
    /// Give the nodes no stable storage: a restarted node remembers
    /// nothing (as a real node run without a state directory).
    #[arg(long)]
    no_stable_storage: bool,
    /// Holders allowed at once (counting semaphore), where supported.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// ricart-agrawala, raymond-k: the fault-tolerant form (NACKs, "are
    /// you still there?" probes, giving up on a silent peer).
    #[arg(long)]
    ra_fault_tolerant: bool,
    /// ricart-agrawala, raymond-k: serve concurrent requests by
    /// timestamp, fewest-entries or least-recent.
    #[arg(long, default_value = "timestamp", value_parser = priority)]
    priority: Priority,
    /// centralized, centralized-lending, token-ring: how many grants a
    /// term (a token's generation) may number before it moves to a new
    /// one: 2^24 - 1, the room a fence gives, unless a cluster file's
    /// fence_room says less. Make it small to watch terms run out and be
    /// renewed.
    #[arg(long, value_name = "N")]
    fence_room: Option<u64>,
    /// Who watches whom for failures: `all` (every node heartbeats every
    /// peer) or `ring` (each probes --watch peers and its coordinator; a
    /// suspicion is announced and checked by each node).
    #[arg(long, value_enum, default_value = "all")]
    detector: DetectorArg,
    /// With --detector ring: peers each node probes, besides its
    /// coordinator.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    watch: u32,
    /// Judge only progress (liveness, deadlock, agreement), not safety
    /// and fences, so that a run goes on past an overlap: whether an
    /// algorithm comes back from faults it does not tolerate (a pause, for
    /// those that trust timeouts).
    #[arg(long)]
    progress_only: bool,
    /// Critical-section entries per node's client.
    #[arg(long, default_value_t = 10)]
    requests: u32,
    /// Locks the requests spread over, each drawn uniformly (`r0`, `r1`,
    /// ...; 1: the default lock alone). Safety, fences and fairness are
    /// judged per lock.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    names: u32,
    /// Locks each request takes at once, one after the other in name
    /// order, before it enters; a stall of such requests is a deadlock.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    per_request: u32,
    /// Clients at each node, each its own session (as several processes
    /// taking locks through one node): where the algorithm counts
    /// sessions they hold --count permits side by side, otherwise they
    /// take turns with their node's grant. Not with --sequential.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64),
          conflicts_with = "sequential")]
    sessions: u32,
    /// How many of the clients read (spread evenly over the nodes; the
    /// others write): readers share the lock where the algorithm has a
    /// reader form, and a read is a write elsewhere. Not with --sequential.
    #[arg(long, default_value_t = 0, conflicts_with = "sequential")]
    readers: u32,
    /// Forget a lock nobody at a node holds or wants after it has stayed
    /// so this long (and make it anew on its next use), as a node does
    /// with `forget_after`; default: never.
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    forget_after: Option<Duration>,
    /// One request at a time in the whole cluster (exact message counts).
    #[arg(long, conflicts_with = "burst")]
    sequential: bool,
    /// Every node asks at the same instant, once per burst; --requests
    /// bursts (the textbook's case of N concurrent requests).
    #[arg(long)]
    burst: bool,
    /// Print every event of the run (with --seed).
    #[arg(long)]
    trace: bool,
    /// --diagram, --shiviz (with --seed).
    #[command(flatten)]
    drawing: common::Drawing,
    /// Print a JSON report instead of text.
    #[arg(long)]
    json: bool,
}

/// Parses a `--priority` value.
pub fn priority(text: &str) -> Result<Priority, String> {
    text.parse().map_err(|e: coterie_core::UnknownPriority| e.to_string())
}

/// Parses a `--delay-spike` range: `MIN..MAX`, two durations.
pub fn duration_range(text: &str) -> Result<(Duration, Duration), String> {
    let (lo, hi) =
        text.split_once("..").ok_or_else(|| format!("{text:?} is not a range like 0ms..125ms"))?;
    let (lo, hi) = (parse_duration(lo)?, parse_duration(hi)?);
    if hi < lo {
        return Err(format!("{text:?}: the maximum is below the minimum"));
    }
    Ok((lo, hi))
}

/// The flags that choose `options`, for a replay line (empty for the
/// defaults).
pub fn options_flags(options: MutexOptions) -> String {
    let mut flags = String::new();
    if options.fault_tolerant {
        flags.push_str(" --ra-fault-tolerant");
    }
    if options.priority != Priority::default() {
        flags.push_str(&format!(" --priority {}", options.priority));
    }
    flags
}

pub fn run(args: Args) -> Result<ExitCode> {
    if args.per_request > args.names {
        anyhow::bail!(
            "--per-request {} is more than the {} lock(s) of --names",
            args.per_request,
            args.names
        );
    }
    let defaults = SimConfig::new(args.algorithms.mutex, args.algorithms.election);
    let base = SimConfig {
        nodes: args.nodes,
        capacity: args.count,
        mutex_options: MutexOptions {
            fault_tolerant: args.ra_fault_tolerant,
            priority: args.priority,
            fence_room: args.fence_room,
        },
        crashes: args.crashes,
        partitions: args.partitions,
        one_way_partitions: args.one_way_partitions,
        pauses: args.pauses,
        delays: args.delays,
        drops: args.drops,
        resets: args.resets,
        session_limits: match args.session_cap {
            Some(max_frames) => {
                coterie_core::session::Limits { max_frames, ..defaults.session_limits }
            }
            None => defaults.session_limits,
        },
        stable_storage: !args.no_stable_storage,
        delay_spike: args.delay_spike.unwrap_or(defaults.delay_spike),
        think: args.think.unwrap_or(defaults.think),
        timing: Timing {
            detector: match args.detector {
                DetectorArg::All => Detector::All,
                DetectorArg::Ring => Detector::Ring { watch: args.watch },
            },
            lease: LeaseTiming {
                partitions: args.algorithms.partitions.mode,
                ..defaults.timing.lease
            },
            ..defaults.timing
        },
        requests: args.requests,
        names: args.names,
        per_request: args.per_request,
        sessions: args.sessions,
        readers: args.readers,
        forgetting: args
            .forget_after
            .map(|after| coterie_core::Forgetting { after, ..coterie_core::Forgetting::default() }),
        progress_only: args.progress_only,
        load: if args.sequential {
            Load::Sequential
        } else if args.burst {
            Load::Burst
        } else {
            Load::Concurrent
        },
        ..defaults
    };
    let seeds = match args.seed {
        Some(s) => s..s + 1,
        None => 0..args.seeds,
    };
    if args.drawing.wanted() && args.seed.is_none() {
        anyhow::bail!("--diagram and --shiviz draw one run: name it with --seed");
    }
    if args.trace || args.drawing.wanted() {
        for seed in seeds.clone() {
            let config = SimConfig { seed, trace: args.trace, record: true, ..base.clone() };
            let report = sim::run(config);
            for line in &report.trace {
                println!("{line}");
            }
            if let Some(run) = &report.diagram {
                args.drawing.write(run)?;
            }
        }
    }
    let total = seeds.end - seeds.start;
    let show_progress = !args.json && total >= 50;
    let summary = run_seeds(&base, seeds, |done, _| {
        if show_progress && (done % 50 == 0 || done == total) {
            eprint!("\r  {done}/{total} seeds");
            let _ = std::io::stderr().flush();
        }
    });
    if show_progress {
        eprintln!();
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        let mut faults = match (args.crashes, args.partitions) {
            (0, 0) => String::new(),
            (c, 0) => format!(", up to {c} crashes each"),
            (0, p) => format!(", {p} partitions each"),
            (c, p) => format!(", up to {c} crashes and {p} partitions each"),
        };
        for (n, what) in [
            (args.one_way_partitions, "one-way partitions"),
            (args.pauses, "pauses"),
            (args.delays, "delay spikes"),
            (args.drops, "loss windows"),
            (args.resets, "connection resets"),
        ] {
            if n > 0 {
                faults.push_str(&format!(", {n} {what}"));
            }
        }
        println!(
            "{} + {} on {} nodes, {} seeds{}: {} entries, {} violations",
            summary.mutex,
            summary.election,
            summary.nodes,
            summary.seeds,
            faults,
            summary.counts.entries,
            summary.violations
        );
        if summary.violations > 0 {
            let by: Vec<String> =
                summary.violations_by_invariant.iter().map(|(i, n)| format!("{i} {n}")).collect();
            println!("runs by first invariant broken: {}", by.join(", "));
        }
        println!("messages per entry: {:.2}", summary.messages_per_entry);
        if args.forget_after.is_some() {
            println!("idle locks forgotten: {}", summary.counts.forgotten);
        }
        if args.readers > 0 {
            println!("reads granted beside another reader: {}", summary.counts.shared_reads);
            println!("most reads granted while one writer waited: {}", summary.write_bypass_max);
        }
        if summary.counts.entries > 0 {
            let per_entry = summary.counts.records as f64 / summary.counts.entries as f64;
            println!(
                "stable-storage records: {} ({per_entry:.3} per entry, start-up included)",
                summary.counts.records
            );
        }
        let asked = [
            args.crashes,
            args.partitions,
            args.one_way_partitions,
            args.pauses,
            args.delays,
            args.drops,
            args.resets,
        ];
        if asked.iter().sum::<u32>() > 0 {
            println!(
                "injected: {} crashes, {} partitions ({} one-way), {} pauses, {} delay spikes, {} loss windows \
                 ({} messages lost), {} connection resets ({} frames written again); {} sessions \
                 overflowed, {} gaps seen",
                summary.injected.crashes,
                summary.injected.partitions,
                summary.injected.one_way_partitions,
                summary.injected.pauses,
                summary.injected.delays,
                summary.injected.drops,
                summary.injected.lost,
                summary.injected.resets,
                summary.injected.resent,
                summary.injected.overflows,
                summary.injected.gaps
            );
        }
        if args.drops > 0 {
            println!(
                "note: the algorithms assume reliable links; under loss a request may never be \
                 served (a liveness violation), but two holders at once is a real bug"
            );
        }
        let info = args.algorithms.mutex;
        if args.partitions + args.one_way_partitions > 0 && !info.claims.safe_under_partitions {
            println!(
                "note: {} trusts timeouts, so under partitions it may grant on both sides; see \
                 the README's partition table",
                args.algorithms.mutex
            );
        }
        let n = u64::from(args.nodes);
        let (remote, local) =
            ((info.light_load)(n, false, Mode::Write), (info.light_load)(n, true, Mode::Write));
        let range =
            |(lo, hi): (u64, u64)| if lo == hi { lo.to_string() } else { format!("{lo}..{hi}") };
        if args.burst {
            let (lo, hi) = (info.burst_load)(n);
            let range = if lo == hi { format!("{lo:.2}") } else { format!("{lo:.2}..{hi:.2}") };
            println!("theory under a burst: {range} per entry");
        } else if remote == local {
            println!("theory: {} per entry", range(remote));
        } else {
            println!(
                "theory: {} per entry from a node that is not the coordinator, {} from the coordinator \
                 itself ({} of {} entries here)",
                range(remote),
                range(local),
                summary.counts.coordinator_entries,
                summary.counts.entries
            );
        }
        // Every flag that shapes a run, for a replay line that replays it.
        let mut extra = match args.delay_spike {
            Some((lo, hi)) => format!(
                " --delay-spike {}..{}",
                humantime::format_duration(lo),
                humantime::format_duration(hi)
            ),
            None => String::new(),
        };
        if let Some((lo, hi)) = args.think {
            let (lo, hi) = (humantime::format_duration(lo), humantime::format_duration(hi));
            extra.push_str(&format!(" --think {lo}..{hi}"));
        }
        if args.no_stable_storage {
            extra.push_str(" --no-stable-storage");
        }
        if args.count != 1 {
            extra.push_str(&format!(" --count {}", args.count));
        }
        if args.requests != defaults.requests {
            extra.push_str(&format!(" --requests {}", args.requests));
        }
        if args.names != 1 {
            extra.push_str(&format!(" --names {}", args.names));
        }
        if args.per_request != 1 {
            extra.push_str(&format!(" --per-request {}", args.per_request));
        }
        if args.sessions != 1 {
            extra.push_str(&format!(" --sessions {}", args.sessions));
        }
        if args.readers != 0 {
            extra.push_str(&format!(" --readers {}", args.readers));
        }
        if let Some(after) = args.forget_after {
            extra.push_str(&format!(" --forget-after {}", humantime::format_duration(after)));
        }
        if args.sequential {
            extra.push_str(" --sequential");
        }
        if args.burst {
            extra.push_str(" --burst");
        }
        if args.progress_only {
            extra.push_str(" --progress-only");
        }
        if args.one_way_partitions > 0 {
            extra.push_str(&format!(" --one-way-partitions {}", args.one_way_partitions));
        }
        if let Some(cap) = args.session_cap {
            extra.push_str(&format!(" --session-cap {cap}"));
        }
        if args.detector == DetectorArg::Ring {
            extra.push_str(&format!(" --detector ring --watch {}", args.watch));
        }
        if args.algorithms.partitions.mode != Partitions::default() {
            extra.push_str(&format!(" --partition-mode {}", args.algorithms.partitions.mode));
        }
        for f in &summary.failures {
            println!(
                "  seed {}: {}: {}\n    replay: coterie sim --mutex {} --election {} --nodes {} --crashes {} --partitions {} --pauses {} --delays {} --drops {} --resets {}{}{} --seed {} --trace --diagram seed-{}.svg",
                f.seed, f.invariant, f.detail, summary.mutex, summary.election, summary.nodes, args.crashes, args.partitions, args.pauses,
                args.delays, args.drops, args.resets, extra, options_flags(base.mutex_options), f.seed, f.seed
            );
        }
    }
    Ok(if summary.violations == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `--detector`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum DetectorArg {
    All,
    Ring,
}
