//! `coterie check`: every schedule of a small configuration, explored with
//! the simulator's own code.

use anyhow::Result;
use coterie_sim::check::{self, CheckConfig};
use std::io::IsTerminal;
use std::process::ExitCode;

/// Explore every schedule of a small cluster, exhaustively.
///
/// Time is discrete: a message takes one to --delay-ticks ticks,
/// heartbeats go every 4 ticks (one tick in flight) and a silent peer is
/// suspected after 16, so timers fire as they would for real. Start-up
/// (dials, joins, the first election) runs once; from the workload on,
/// every delay of every message, every order of one node's events due in
/// the same tick, and every victim of each fault, with its moment (within
/// --fault-window-ticks) and its length at their ends and middle, is
/// tried. A state seen before is not explored again. Every run is judged
/// by the simulator's invariants (safety, fences, deadlock, liveness,
/// agreement), and each broken one is printed with the shortest schedule
/// that breaks it (proven shortest by a second pass for all but liveness
/// and agreement, which are judged at a run's end). Exits 1 if one was
/// broken, 3 if a bound was hit before the whole space was explored.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    algorithms: super::common::Simulated,
    /// Cluster size.
    #[arg(long, default_value_t = 3)]
    nodes: u32,
    /// Critical-section entries each client asks for.
    #[arg(long, default_value_t = 1)]
    requests: u32,
    /// Locks the requests spread over (`r0`, `r1`, ...; 1: the default
    /// lock alone). Safety and fences are judged per lock.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    names: u32,
    /// Locks each request takes at once, one after the other in name
    /// order, before it enters: with more than one, deadlock freedom of
    /// multi-lock requests is checked too.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    per_request: u32,
    /// Clients at each node, each its own session: where the algorithm
    /// counts sessions they hold --count permits side by side, otherwise
    /// they take turns with their node's grant.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    sessions: u32,
    /// How many of the clients read (spread evenly over the nodes; the
    /// others write): readers share the lock where the algorithm has a
    /// reader form, and a read is a write elsewhere.
    #[arg(long, default_value_t = 0)]
    readers: u32,
    /// Holders allowed at once (a semaphore's permits), for the counting
    /// algorithms.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    count: u64,
    /// Crash-and-restart faults per run.
    #[arg(long, default_value_t = 0)]
    crashes: u32,
    /// Partitions per run (a minority cut off both ways, then healed).
    #[arg(long, default_value_t = 0)]
    partitions: u32,
    /// One-way partitions per run.
    #[arg(long, default_value_t = 0)]
    one_way_partitions: u32,
    /// A message takes one to this many ticks.
    #[arg(long, default_value_t = 2)]
    delay_ticks: u32,
    /// A holder stays inside one to this many ticks (tried at the ends and
    /// the middle); past 16, the failure timeout, a cut-off holder is
    /// still inside when the others give up on it.
    #[arg(long, default_value_t = 1)]
    hold_ticks: u32,
    /// A client thinks zero to this many ticks before each request (tried
    /// at the ends and the middle), so that a node may ask again after
    /// the others went quiet.
    #[arg(long, default_value_t = 0)]
    think_ticks: u32,
    /// Each fault begins zero to this many ticks into the workload (tried
    /// at the ends and the middle).
    #[arg(long, default_value_t = 4)]
    fault_window_ticks: u32,
    /// Steps per run before it is cut (a bound).
    #[arg(long, default_value_t = 5_000)]
    max_depth: usize,
    /// Distinct states before the check stops (a bound).
    #[arg(long, default_value_t = 20_000_000)]
    max_states: u64,
    /// Print a JSON report instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    if args.nodes < 2 {
        anyhow::bail!("a check needs at least 2 nodes");
    }
    if args.per_request > args.names {
        anyhow::bail!(
            "--per-request {} is more than the {} lock(s) of --names",
            args.per_request,
            args.names
        );
    }
    if args.count > 1 && !args.algorithms.mutex.claims.counting {
        anyhow::bail!("{} admits one holder at a time: --count must be 1", args.algorithms.mutex);
    }
    let cfg = CheckConfig {
        requests: args.requests,
        names: args.names,
        per_request: args.per_request,
        sessions: args.sessions,
        readers: args.readers,
        count: args.count as usize,
        crashes: args.crashes,
        partitions: args.partitions,
        one_way_partitions: args.one_way_partitions,
        partition_mode: args.algorithms.partitions.mode,
        max_depth: args.max_depth,
        delay_ticks: args.delay_ticks,
        max_states: args.max_states,
        hold_ticks: args.hold_ticks,
        think_ticks: args.think_ticks,
        fault_window_ticks: args.fault_window_ticks,
        ..CheckConfig::new(args.algorithms.mutex, args.algorithms.election, args.nodes)
    };
    let tty = std::io::stderr().is_terminal();
    let report = check::check(&cfg, |p| {
        let line = format!(
            "  {} runs, {} states, {} distinct, {:.0?}",
            p.runs, p.states, p.distinct_states, p.elapsed
        );
        if tty {
            eprint!("\r{line}   ");
        } else if !args.json {
            eprintln!("{line}");
        }
    });
    if tty {
        eprint!("\r{:70}\r", "");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let mut locks = match (report.config.names, report.config.per_request) {
            (1, _) => String::new(),
            (k, 1) => format!(" over {k} locks"),
            (k, m) => format!(" of {m} locks each, over {k}"),
        };
        if report.config.sessions > 1 {
            locks.push_str(&format!(", {} clients per node", report.config.sessions));
        }
        if report.config.readers > 0 {
            locks.push_str(&format!(", {} reading", report.config.readers));
        }
        if report.config.count > 1 {
            locks.push_str(&format!(", {} permits", report.config.count));
        }
        println!(
            "{} + {} on {} nodes, {} request(s) each{locks}, {} crash(es), {} partition(s), {} one-way: {}",
            report.config.mutex,
            report.config.election,
            report.config.nodes,
            report.config.requests,
            report.config.crashes,
            report.config.partitions,
            report.config.one_way_partitions,
            if report.exhausted { "every schedule explored" } else { "stopped at a bound" }
        );
        println!(
            "{} states ({} distinct) in {} runs, deepest {} steps, {:.1} s ({:.0} states/s)",
            report.states,
            report.distinct_states,
            report.runs,
            report.max_depth,
            report.seconds,
            report.states_per_s
        );
        println!("violations: {} run(s)", report.violations);
        for c in &report.counterexamples {
            let shortest = if c.proven_shortest { "the shortest" } else { "the shortest found" };
            println!("\n{}: {} ({shortest}: {} steps)", c.invariant, c.detail, c.steps);
            for line in &c.schedule {
                println!("  {line}");
            }
        }
    }
    Ok(if report.violations > 0 {
        ExitCode::FAILURE
    } else if !report.exhausted {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}
