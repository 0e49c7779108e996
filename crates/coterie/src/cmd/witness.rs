//! `coterie witness`: the shared resource that checks safety.

use super::common;
use anyhow::{bail, Context, Result};
use coterie_node::{witness, WitnessClient};
use std::process::ExitCode;

/// Run the witness, or ask one what it saw.
///
/// The witness is the printer of the seeds' example: a client holding the
/// lock enters it with its fencing token and leaves when done. It counts
/// holders that overlap beyond --capacity (violations) and refuses tokens
/// that are stale (not greater than the newest it accepted). An overlap
/// whose older holders all had lower fences and later left saying their
/// node died while they held is a lease overlap instead: the lock moved on
/// before they heard. `workload` and `demo` check every entry there. It also keeps a register per lock name,
/// in a plain and a fenced copy, which `coterie nemesis` clients increment
/// while they hold the lock.
#[derive(clap::Args)]
pub struct Args {
    /// Serve the witness on this address.
    #[arg(long, value_name = "ADDR", required_unless_present = "check")]
    listen: Option<String>,
    /// Holders allowed at once (match the cluster's `count`).
    #[arg(long, default_value_t = 1)]
    capacity: u32,
    /// Instead of serving, print the counters of the witness at ADDR and
    /// exit non-zero if it saw a violation or a stale fence.
    #[arg(long, value_name = "ADDR", conflicts_with = "listen")]
    check: Option<String>,
    /// With --check: print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args, log_format: &str) -> Result<ExitCode> {
    if let Some(addr) = args.check {
        return check(&addr, args.json);
    }
    let _logs = common::init_logging(log_format, "info");
    let addr = args.listen.expect("clap requires --listen or --check");
    common::small_runtime()?.block_on(async {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        tracing::info!(%addr, capacity = args.capacity, "witness listening");
        witness::serve(listener, args.capacity, common::shutdown_signal()).await;
        Ok(ExitCode::SUCCESS)
    })
}

fn check(addr: &str, json: bool) -> Result<ExitCode> {
    let report = common::small_runtime()?.block_on(async {
        let mut w = WitnessClient::connect(addr).await?;
        w.report().await
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "witness {addr}: {} entries, {} violations, {} lease overlaps, {} stale fences, {} late entries, at most {} holders (capacity {}), last fence {}",
            report.entries, report.violations, report.lease_overlaps, report.stale_fences, report.late_entries, report.max_holders, report.capacity, report.last_fence
        );
    }
    if report.violations > 0 || report.stale_fences > 0 {
        if !json {
            bail!(
                "the witness saw {} violations and {} stale fences",
                report.violations,
                report.stale_fences
            );
        }
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
