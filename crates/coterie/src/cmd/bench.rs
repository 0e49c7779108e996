//! `coterie bench`: every algorithm through the simulator, side by side.

use anyhow::{bail, Result};
use coterie_core::registry::{self, MUTEXES};
use coterie_sim::sim::{self, Load, SimConfig};
use serde::Serialize;
use std::process::ExitCode;
use std::time::Duration;

/// Compare mutual-exclusion algorithms in the simulator.
///
/// For each algorithm and cluster size, two workloads run over several
/// seeds with no faults:
/// - light load: one request at a time in the whole cluster; the messages
///   each entry costs are counted exactly;
/// - heavy load: every node always wanting (no think time, 1 ms inside).
///
/// Columns: messages per entry at light and heavy load; synchronisation
/// delay (from a release to the next grant while someone waits) in mean
/// one-way message delays; entries per simulated second under heavy load;
/// grants made while a node that asked earlier, in simulated real time,
/// still waited (out of order; timestamp-ordered algorithms serve by
/// Lamport time, and requests reach a coordinator after varying delays).
#[derive(clap::Args)]
pub struct Args {
    /// Algorithms to compare, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    mutex: Vec<String>,
    /// Election algorithm underneath.
    #[arg(long, default_value = "bully")]
    election: String,
    /// Cluster sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "3,5,7,9,13")]
    nodes: Vec<u32>,
    /// Seeds per measurement.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// Print a JSON array of rows.
    #[arg(long)]
    json: bool,
}

/// One row of the table.
#[derive(Serialize)]
struct Row {
    mutex: String,
    nodes: u32,
    light_messages_per_entry: f64,
    heavy_messages_per_entry: f64,
    sync_delay: f64,
    throughput_per_s: f64,
    out_of_order: u64,
    violations: u64,
}

fn measure(mutex: &str, election: &str, nodes: u32, seeds: u64) -> Result<Row> {
    let base = SimConfig { nodes, ..SimConfig::new(mutex, election) };
    let mean_delay = (base.delay.0 + base.delay.1).as_secs_f64() / 2.0;
    let (mut light_msgs, mut light_entries) = (0u64, 0u64);
    let (mut heavy_msgs, mut heavy_entries, mut heavy_us) = (0u64, 0u64, 0u64);
    let (mut delays, mut out_of_order, mut violations) = (Vec::new(), 0, 0);
    for seed in 0..seeds {
        let light =
            sim::run(SimConfig { seed, load: Load::Sequential, requests: 30, ..base.clone() })?;
        light_msgs += light.per_entry.iter().map(|(m, _)| m).sum::<u64>();
        light_entries += light.per_entry.len() as u64;
        let heavy = sim::run(SimConfig {
            seed,
            load: Load::Concurrent,
            requests: 20,
            hold: (Duration::from_millis(1), Duration::from_millis(1)),
            think: (Duration::ZERO, Duration::ZERO),
            ..base.clone()
        })?;
        heavy_msgs += heavy.mutex_messages;
        heavy_entries += heavy.entries;
        heavy_us += heavy.workload_us;
        delays.extend(heavy.sync_delays_us.iter().copied());
        out_of_order += heavy.out_of_order;
        violations += (light.violations.len() + heavy.violations.len()) as u64;
    }
    let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let mean_sync = per(delays.iter().sum(), delays.len() as u64) / 1e6;
    Ok(Row {
        mutex: mutex.to_string(),
        nodes,
        light_messages_per_entry: per(light_msgs, light_entries),
        heavy_messages_per_entry: per(heavy_msgs, heavy_entries),
        sync_delay: mean_sync / mean_delay,
        throughput_per_s: per(heavy_entries * 1_000_000, heavy_us),
        out_of_order,
        violations,
    })
}

pub fn run(args: Args) -> Result<ExitCode> {
    registry::election(&args.election)?;
    let names: Vec<String> = if args.mutex.is_empty() {
        MUTEXES.iter().map(|m| m.name.to_string()).collect()
    } else {
        args.mutex.clone()
    };
    for name in &names {
        registry::mutex(name)?;
    }
    if args.nodes.iter().any(|&n| n < 2) {
        bail!("every cluster size must be at least 2");
    }
    let mut rows = Vec::new();
    for name in &names {
        for &n in &args.nodes {
            if !args.json {
                eprint!("\r  measuring {name} with {n} nodes...          ");
            }
            rows.push(measure(name, &args.election, n, args.seeds)?);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        eprint!("\r{:60}\r", "");
        println!(
            "{:<20} {:>3}  {:>11}  {:>11}  {:>10}  {:>11}  {:>12}",
            "MUTEX", "N", "MSGS LIGHT", "MSGS HEAVY", "SYNC (T)", "ENTRIES/S", "OUT OF ORDER"
        );
        for r in &rows {
            println!(
                "{:<20} {:>3}  {:>11.2}  {:>11.2}  {:>10.2}  {:>11.0}  {:>12}",
                r.mutex,
                r.nodes,
                r.light_messages_per_entry,
                r.heavy_messages_per_entry,
                r.sync_delay,
                r.throughput_per_s,
                r.out_of_order
            );
        }
        println!(
            "({} seeds per cell, no faults; SYNC in mean one-way message delays; ENTRIES/S in simulated time)",
            args.seeds
        );
    }
    let violations: u64 = rows.iter().map(|r| r.violations).sum();
    if violations > 0 {
        eprintln!(
            "coterie bench: {violations} runs broke an invariant; run `coterie sim` to see them"
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
