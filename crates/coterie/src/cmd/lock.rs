//! `coterie lock`: run a command while holding the cluster's lock.

use super::common::{self, Target};
use anyhow::{Context, Result};
use coterie_node::{Acquired, Client};
use std::process::ExitCode;
use std::time::Duration;

/// Exit status when the lock was not acquired in time (EX_TEMPFAIL).
const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status when no node could be reached (EX_UNAVAILABLE).
const EXIT_UNAVAILABLE: u8 = 69;

/// Acquire the cluster's lock, run CMD while holding it, release.
///
/// Like `etcdctl lock` or `consul lock`. CMD runs with COTERIE_FENCE set to
/// the grant's fencing token (pass it to the resource you protect, so it can
/// refuse a holder whose grant went stale) and COTERIE_NODE to the node that
/// granted it. The exit status is CMD's; if the lock is not acquired within
/// --timeout (or at once, with --try) coterie exits with 75, and with 69 if
/// no node answers. If this process dies, its node releases the lock.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Give up if not granted within this long (e.g. "5s"); default: wait.
    #[arg(long, value_parser = common::parse_duration)]
    timeout: Option<Duration>,
    /// Give up unless granted promptly (within one failure timeout).
    #[arg(long = "try")]
    try_lock: bool,
    /// The command to run, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<String>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let nodes = args.target.nodes()?;
    common::small_runtime()?.block_on(async {
        // The first node that answers serves the session.
        let mut session = None;
        let mut errors = Vec::new();
        for node in &nodes {
            match Client::connect(&node.addr).await {
                Ok(c) => {
                    session = Some(c);
                    break;
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        let Some(mut client) = session else {
            eprintln!("coterie lock: no node answered ({})", errors.join("; "));
            return Ok(ExitCode::from(EXIT_UNAVAILABLE));
        };
        let fence = match client.acquire(args.timeout, args.try_lock).await? {
            Acquired::Granted(fence) => fence,
            Acquired::TimedOut => {
                let waited =
                    args.timeout.map_or("?".into(), |d| humantime::format_duration(d).to_string());
                eprintln!("coterie lock: not acquired within {waited}");
                return Ok(ExitCode::from(EXIT_NOT_ACQUIRED));
            }
            Acquired::Busy => {
                eprintln!("coterie lock: the lock is busy (--try)");
                return Ok(ExitCode::from(EXIT_NOT_ACQUIRED));
            }
        };
        let status = client.status().await?;
        let (program, rest) = args.command.split_first().expect("clap requires a command");
        let exit = tokio::process::Command::new(program)
            .args(rest)
            .env("COTERIE_FENCE", fence.to_string())
            .env("COTERIE_NODE", status.id.to_string())
            .status()
            .await
            .with_context(|| format!("cannot run {program}"));
        client.release().await?;
        let exit = exit?;
        Ok(ExitCode::from(exit.code().map_or(1, |c| c as u8)))
    })
}
