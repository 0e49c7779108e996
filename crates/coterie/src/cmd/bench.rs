//! `coterie bench`: every algorithm through the simulator, side by side.

use super::chart;
use super::common;
use super::harness::{Cluster, LocalCluster, Shape};
use super::timeline::Reach;
use super::workload;
use anyhow::{bail, Context, Result};
use coterie_core::registry::{self, ElectionInfo, MutexInfo, MUTEXES};
use coterie_core::{Epoch, Mode, MutexOptions, Partitions, Priority};
use coterie_sim::sim::{self, Counts, Load, SimConfig};
use serde::Serialize;
use std::process::ExitCode;
use std::time::Duration;

/// Compare mutual-exclusion algorithms in the simulator.
///
/// For each algorithm and cluster size, three workloads run over several
/// seeds with no faults:
/// - light load: one request at a time in the whole cluster; the messages
///   each entry costs are counted exactly;
/// - heavy load: every node always wanting (no think time, 1 ms inside);
/// - bursts: every node asking at the same instant, once per burst (the
///   textbook's case of N concurrent requests).
///
/// Columns: messages per entry at light and heavy load and in bursts; synchronisation
/// delay (from a release to the next grant while someone waits) in mean
/// one-way message delays; entries per simulated second under heavy load;
/// grants made while a request that came earlier still waited (out of
/// order): earlier by timestamp for the algorithms that stamp requests,
/// by the time of asking for the others.
///
/// With --read-share, heavy load runs again with that share of the
/// clients reading (two clients per node, both runs): messages per entry
/// and entries per simulated second with readers, against the same load
/// all writing. Where the algorithm has no reader form a read is a write,
/// and the two match.
#[derive(clap::Args)]
pub struct Args {
    /// Algorithms to compare, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_parser = registry::mutex)]
    mutex: Vec<&'static MutexInfo>,
    /// Election algorithm underneath.
    #[arg(long, default_value = "bully", value_parser = registry::election)]
    election: &'static ElectionInfo,
    /// Cluster sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "3,5,7,9,13")]
    nodes: Vec<u32>,
    /// Seeds per measurement.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// ricart-agrawala, raymond-k: the fault-tolerant form (simulator
    /// rows only).
    #[arg(long)]
    ra_fault_tolerant: bool,
    /// ricart-agrawala, raymond-k: serve concurrent requests by timestamp,
    /// fewest-entries or least-recent (simulator rows only).
    #[arg(long, default_value = "timestamp", value_parser = super::sim::priority)]
    priority: Priority,
    /// With no fault the two partition modes must cost the same messages
    /// per entry: the lease rides on heartbeats.
    #[command(flatten)]
    partitions: common::PartitionMode,
    /// Also run heavy load with this share of the clients reading (0 to
    /// 1), against the same load all writing.
    #[arg(long, value_name = "SHARE", value_parser = common::parse_share)]
    read_share: Option<f64>,
    /// Print a JSON array of rows.
    #[arg(long)]
    json: bool,
    /// Also run each algorithm on a local cluster of real processes (over
    /// TCP, with the witness checking every grant) and report throughput
    /// and latency.
    #[arg(long)]
    real: bool,
    /// With --real: how long clients hammer each cluster.
    #[arg(long, default_value = "2s", value_parser = common::parse_duration)]
    duration: Duration,
    /// With --real: clients per node, each asking again as soon as it leaves.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Also write SVG plots against N, one line per algorithm, to this
    /// file: messages per entry at light load, and with --real throughput
    /// and p50/p99 latency on real processes.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
}

/// One row of the table.
#[derive(Serialize)]
struct Row {
    mutex: &'static MutexInfo,
    nodes: u32,
    partitions: Partitions,
    light_messages_per_entry: f64,
    heavy_messages_per_entry: f64,
    burst_messages_per_entry: f64,
    sync_delay: f64,
    throughput_per_s: f64,
    out_of_order: u64,
    violations: u64,
    /// What theory allows, as the registry claims it (and the conformance
    /// suite holds the algorithm to).
    theory: Theory,
    /// With `--real`: the same algorithm on real processes.
    #[serde(skip_serializing_if = "Option::is_none")]
    real: Option<Real>,
    /// With `--read-share`: heavy load with readers, against all writing.
    #[serde(skip_serializing_if = "Option::is_none")]
    reads: Option<Reads>,
}

/// Heavy load with a share of the clients reading, against the same load
/// with every client writing (two clients per node in both).
#[derive(Serialize)]
struct Reads {
    /// The share asked for, and the clients it made readers, of all.
    share: f64,
    readers: u32,
    clients: u32,
    /// Messages per entry, and entries per simulated second, with readers.
    messages_per_entry: f64,
    throughput_per_s: f64,
    /// The same, every client writing.
    exclusive_messages_per_entry: f64,
    exclusive_throughput_per_s: f64,
    /// Reads granted while another reader held: readers sharing.
    shared_reads: u64,
    /// Messages per entry at light load with every client reading, which
    /// theory puts at `theory.light_read`.
    light_read_messages_per_entry: f64,
    violations: u64,
}

/// Heavy load of `base` over `seeds`, two clients per node, with
/// `readers` of them reading: what the runs did, and how many broke an
/// invariant.
fn heavy_reads(base: &SimConfig, seeds: u64, readers: u32) -> (Counts, u64) {
    let mut sums = (Counts::default(), 0);
    for seed in 0..seeds {
        let run = sim::run(SimConfig {
            seed,
            load: Load::Concurrent,
            sessions: 2,
            readers,
            requests: 20,
            hold: (Duration::from_millis(1), Duration::from_millis(1)),
            think: (Duration::ZERO, Duration::ZERO),
            ..base.clone()
        });
        sums.0 += run.counts;
        sums.1 += u64::from(!run.violations.is_empty());
    }
    sums
}

/// [`Reads`] for `base` over `seeds`.
fn measure_reads(base: &SimConfig, seeds: u64, share: f64) -> Reads {
    let clients = base.nodes * 2;
    let readers = (share * f64::from(clients)).round() as u32;
    let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let (shared, broken) = heavy_reads(base, seeds, readers);
    let (exclusive, x_broken) = heavy_reads(base, seeds, 0);
    let (mut light_msgs, mut light_entries) = (0, 0);
    for seed in 0..seeds {
        let run = sim::run(SimConfig {
            seed,
            load: Load::Sequential,
            requests: 30,
            readers: base.nodes,
            ..base.clone()
        });
        light_msgs += run.per_entry.iter().map(|e| e.messages).sum::<u64>();
        light_entries += run.per_entry.len() as u64;
    }
    Reads {
        share,
        readers,
        clients,
        messages_per_entry: per(shared.mutex_messages, shared.entries),
        throughput_per_s: per(shared.entries * 1_000_000, shared.workload_us),
        exclusive_messages_per_entry: per(exclusive.mutex_messages, exclusive.entries),
        exclusive_throughput_per_s: per(exclusive.entries * 1_000_000, exclusive.workload_us),
        shared_reads: shared.shared_reads,
        light_read_messages_per_entry: per(light_msgs, light_entries),
        violations: broken + x_broken,
    }
}

/// The inclusive ranges of messages per entry theory allows in a cluster
/// of `nodes`: one request at a time from a node that is not the
/// coordinator (from the coordinator itself, where the algorithm has one,
/// `light_at_coordinator`), every node always wanting, and a burst.
#[derive(Serialize)]
struct Theory {
    light: (u64, u64),
    light_at_coordinator: (u64, u64),
    /// A read's `light` and `light_at_coordinator`, which differ from a
    /// write's where the reader form asks fewer nodes.
    light_read: (u64, u64),
    light_read_at_coordinator: (u64, u64),
    heavy: (f64, f64),
    burst: (f64, f64),
}

impl Theory {
    fn of(mutex: &MutexInfo, nodes: u32) -> Theory {
        let n = u64::from(nodes);
        Theory {
            light: (mutex.light_load)(n, false, Mode::Write),
            light_at_coordinator: (mutex.light_load)(n, true, Mode::Write),
            light_read: (mutex.light_load)(n, false, Mode::Read),
            light_read_at_coordinator: (mutex.light_load)(n, true, Mode::Read),
            heavy: (mutex.heavy_load)(n),
            burst: (mutex.burst_load)(n),
        }
    }
}

/// A run on a local cluster of real processes.
#[derive(Serialize)]
struct Real {
    throughput_per_s: f64,
    latency_p50_ms: f64,
    latency_p99_ms: f64,
    messages_per_entry: f64,
    entries: u64,
    /// Overlaps the witness saw; must be 0.
    violations: u64,
    /// Grants the witness refused as stale; 0 with no faults.
    stale_fences: u64,
}

/// Starts a cluster of `nodes` real processes running `mutex`, drives
/// `clients` clients per node for `duration` with no think time, and stops
/// it again.
async fn measure_real(
    mutex: &'static MutexInfo,
    election: &'static ElectionInfo,
    nodes: u32,
    duration: Duration,
    clients: usize,
    partitions: Partitions,
) -> Result<Real> {
    let dir =
        std::env::temp_dir().join(format!("coterie-bench-{}-{mutex}-{nodes}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let shape = Shape {
        nodes,
        mutex,
        election,
        count: 1,
        lock_delay: std::time::Duration::ZERO,
        partitions,
        tls: false,
    };
    let (cluster, witness) = LocalCluster::launch(&shape, "text", &dir).await?;
    let mut cluster = Cluster::Local(cluster);
    let result = async {
        cluster.agree(&Reach::default(), Epoch(0), Duration::from_secs(15)).await?;
        workload::drive(workload::Spec {
            http: None,
            no_chain: false,
            nodes: cluster.nodes().to_vec(),
            clients,
            choice: Default::default(),
            requests: u64::MAX,
            hold: Duration::ZERO,
            think: Duration::ZERO,
            witness: Some(witness.addr().to_string()),
            deadline: Some(std::time::Instant::now() + duration),
            progress: false,
            answer_within: Duration::from_secs(10),
            events: None,
        })
        .await
    }
    .await;
    cluster.stop_all().await;
    witness.stop().await;
    let r =
        result.with_context(|| format!("{mutex} on {nodes} nodes (logs in {})", dir.display()))?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Real {
        throughput_per_s: r.throughput_per_s,
        latency_p50_ms: r.latency_ms.p50,
        latency_p99_ms: r.latency_ms.p99,
        messages_per_entry: r.messages_per_entry,
        entries: r.entries,
        violations: r.violations,
        stale_fences: r.stale_fences,
    })
}

fn measure(
    mutex: &'static MutexInfo,
    election: &'static ElectionInfo,
    nodes: u32,
    seeds: u64,
    mutex_options: MutexOptions,
    partitions: Partitions,
    read_share: Option<f64>,
) -> Result<Row> {
    let mut base = SimConfig { nodes, mutex_options, ..SimConfig::new(mutex, election) };
    base.timing.lease.partitions = partitions;
    let mean_delay = (base.delay.0 + base.delay.1).as_secs_f64() / 2.0;
    let (mut light_msgs, mut light_entries) = (0u64, 0u64);
    let (mut heavy, mut burst) = (Counts::default(), Counts::default());
    let (mut delays, mut violations) = (Vec::new(), 0);
    for seed in 0..seeds {
        let light =
            sim::run(SimConfig { seed, load: Load::Sequential, requests: 30, ..base.clone() });
        light_msgs += light.per_entry.iter().map(|e| e.messages).sum::<u64>();
        light_entries += light.per_entry.len() as u64;
        let heavy_run = sim::run(SimConfig {
            seed,
            load: Load::Concurrent,
            requests: 20,
            hold: (Duration::from_millis(1), Duration::from_millis(1)),
            think: (Duration::ZERO, Duration::ZERO),
            ..base.clone()
        });
        let burst_run =
            sim::run(SimConfig { seed, load: Load::Burst, requests: 5, ..base.clone() });
        heavy += heavy_run.counts;
        burst += burst_run.counts;
        delays.extend(heavy_run.sync_delays_us.iter().copied());
        violations += (light.violations.len()
            + heavy_run.violations.len()
            + burst_run.violations.len()) as u64;
    }
    let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let mean_sync = per(delays.iter().sum(), delays.len() as u64) / 1e6;
    let reads = read_share.map(|share| measure_reads(&base, seeds, share));
    violations += reads.as_ref().map_or(0, |r| r.violations);
    Ok(Row {
        mutex,
        nodes,
        partitions,
        light_messages_per_entry: per(light_msgs, light_entries),
        heavy_messages_per_entry: per(heavy.mutex_messages, heavy.entries),
        burst_messages_per_entry: per(burst.mutex_messages, burst.entries),
        sync_delay: mean_sync / mean_delay,
        throughput_per_s: per(heavy.entries * 1_000_000, heavy.workload_us),
        out_of_order: heavy.out_of_order,
        violations,
        theory: Theory::of(mutex, nodes),
        real: None,
        reads,
    })
}

pub fn run(args: Args) -> Result<ExitCode> {
    let mutexes: Vec<&'static MutexInfo> =
        if args.mutex.is_empty() { MUTEXES.iter().collect() } else { args.mutex.clone() };
    if args.nodes.iter().any(|&n| n < 2) {
        bail!("every cluster size must be at least 2");
    }
    let mut rows = Vec::new();
    for &mutex in &mutexes {
        for &n in &args.nodes {
            if !args.json {
                eprint!("\r  measuring {mutex} with {n} nodes...          ");
            }
            let options = MutexOptions {
                fault_tolerant: args.ra_fault_tolerant,
                priority: args.priority,
                ..MutexOptions::default()
            };
            let (seeds, partitions) = (args.seeds, args.partitions.mode);
            let row =
                measure(mutex, args.election, n, seeds, options, partitions, args.read_share)?;
            rows.push(row);
        }
    }
    if args.real {
        let runtime = common::runtime()?;
        for row in &mut rows {
            if !args.json {
                eprint!("\r  running {} on {} real processes...          ", row.mutex, row.nodes);
            }
            let real = runtime.block_on(measure_real(
                row.mutex,
                args.election,
                row.nodes,
                args.duration,
                args.clients,
                args.partitions.mode,
            ))?;
            row.real = Some(real);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        eprint!("\r{:60}\r", "");
        println!(
            "{:<20} {:>3}  {:>11}  {:>11}  {:>11}  {:>10}  {:>11}  {:>12}",
            "MUTEX",
            "N",
            "MSGS LIGHT",
            "MSGS HEAVY",
            "MSGS BURST",
            "SYNC (T)",
            "ENTRIES/S",
            "OUT OF ORDER"
        );
        for r in &rows {
            println!(
                "{:<20} {:>3}  {:>11.2}  {:>11.2}  {:>11.2}  {:>10.2}  {:>11.0}  {:>12}",
                r.mutex,
                r.nodes,
                r.light_messages_per_entry,
                r.heavy_messages_per_entry,
                r.burst_messages_per_entry,
                r.sync_delay,
                r.throughput_per_s,
                r.out_of_order
            );
        }
        println!(
            "({} seeds per cell, no faults; SYNC in mean one-way message delays; ENTRIES/S in simulated time)",
            args.seeds
        );
        if let Some(share) = args.read_share {
            println!(
                "\n{:<20} {:>3}  {:>9}  {:>11}  {:>11}  {:>11}  {:>11}  {:>8}  {:>10}  {:>6}",
                "READ-HEAVY LOAD",
                "N",
                "READERS",
                "MSGS/ENTRY",
                "ENTRIES/S",
                "EXCL. MSGS",
                "EXCL. E/S",
                "SPEED-UP",
                "LIGHT READ",
                "THEORY"
            );
            for r in &rows {
                let Some(x) = &r.reads else { continue };
                let speedup =
                    x.throughput_per_s / x.exclusive_throughput_per_s.max(f64::MIN_POSITIVE);
                let (remote, local) = (r.theory.light_read, r.theory.light_read_at_coordinator);
                let (lo, hi) = (remote.0.min(local.0), remote.1.max(local.1));
                println!(
                    "{:<20} {:>3}  {:>9}  {:>11.2}  {:>11.0}  {:>11.2}  {:>11.0}  {:>7.2}x  {:>10.2}  {:>6}",
                    r.mutex,
                    r.nodes,
                    format!("{}/{}", x.readers, x.clients),
                    x.messages_per_entry,
                    x.throughput_per_s,
                    x.exclusive_messages_per_entry,
                    x.exclusive_throughput_per_s,
                    speedup,
                    x.light_read_messages_per_entry,
                    format!("{lo}..{hi}")
                );
            }
            println!(
                "(heavy load, two clients per node, {share} of them reading, against all writing; \
                 ENTRIES/S in simulated time; LIGHT READ: one request at a time, every client \
                 reading)"
            );
        }
        if args.real {
            println!(
                "\n{:<20} {:>3}  {:>11}  {:>9}  {:>9}  {:>10}  {:>10}",
                "REAL CLUSTER", "N", "ENTRIES/S", "P50 MS", "P99 MS", "MSGS/ENTRY", "WITNESS"
            );
            for r in &rows {
                let Some(real) = &r.real else { continue };
                let witness = if real.violations == 0 { "ok" } else { "VIOLATION" };
                println!(
                    "{:<20} {:>3}  {:>11.0}  {:>9.3}  {:>9.3}  {:>10.2}  {:>10}",
                    r.mutex,
                    r.nodes,
                    real.throughput_per_s,
                    real.latency_p50_ms,
                    real.latency_p99_ms,
                    real.messages_per_entry,
                    witness
                );
            }
            println!(
                "({} client(s) per node for {:?}, no hold, no think; loopback TCP on this machine)",
                args.clients, args.duration
            );
        }
    }
    if let Some(path) = &args.svg {
        std::fs::write(path, plot(&rows))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        if !args.json {
            println!("plot written to {}", path.display());
        }
    }
    let violations: u64 =
        rows.iter().map(|r| r.violations + r.real.as_ref().map_or(0, |real| real.violations)).sum();
    if violations > 0 {
        eprintln!(
            "coterie bench: {violations} runs broke an invariant; run `coterie sim` to see them"
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The plots of `rows`: messages per entry at light load against N, one
/// line per algorithm; with `--real` rows, also throughput, and p50 (solid)
/// and p99 (dashed) latency on real processes.
fn plot(rows: &[Row]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if !names.contains(&r.mutex.name) {
            names.push(r.mutex.name);
        }
    }
    let series = |name: &str, label: String, dashed: bool, value: &dyn Fn(&Row) -> Option<f64>| {
        let points: Vec<(u32, f64)> = rows
            .iter()
            .filter(|r| r.mutex.name == name)
            .filter_map(|r| value(r).map(|v| (r.nodes, v)))
            .collect();
        (!points.is_empty()).then(|| chart::Series {
            name: label,
            points,
            dashed,
            colour_key: name.to_string(),
        })
    };
    let mut panels = vec![chart::Panel {
        title: "messages per entry at light load (coterie bench)".into(),
        unit: "messages per entry".into(),
        series: names
            .iter()
            .filter_map(|n| series(n, n.to_string(), false, &|r| Some(r.light_messages_per_entry)))
            .collect(),
    }];
    if rows.iter().any(|r| r.real.is_some()) {
        panels.push(chart::Panel {
            title: "throughput on real processes (coterie bench --real)".into(),
            unit: "entries per second".into(),
            series: names
                .iter()
                .filter_map(|n| {
                    series(n, n.to_string(), false, &|r| {
                        r.real.as_ref().map(|x| x.throughput_per_s)
                    })
                })
                .collect(),
        });
        let mut latency = Vec::new();
        for n in &names {
            latency.extend(series(n, format!("{n} p50"), false, &|r| {
                r.real.as_ref().map(|x| x.latency_p50_ms)
            }));
            latency.extend(series(n, format!("{n} p99"), true, &|r| {
                r.real.as_ref().map(|x| x.latency_p99_ms)
            }));
        }
        panels.push(chart::Panel {
            title: "latency on real processes, p50 solid, p99 dashed".into(),
            unit: "milliseconds".into(),
            series: latency,
        });
    }
    chart::render(&panels)
}
