//! `coterie lock`: run a command while holding the cluster's lock, and
//! stop it if the lock is lost.

use super::common::{self, Target};
use anyhow::{Context, Result};
use coterie_node::{Acquired, ClientError, Loss};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Exit status when the lock was not acquired in time (EX_TEMPFAIL).
const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status when no node could be reached (EX_UNAVAILABLE).
const EXIT_UNAVAILABLE: u8 = 69;
/// Exit status when the lock was lost while CMD ran.
const EXIT_LOST: u8 = 76;

/// Acquire the cluster's lock, run CMD while holding it, release.
///
/// Like `etcdctl lock` or `consul lock`. CMD runs in a process group of its
/// own, with COTERIE_FENCE set to the grant's fencing token (pass it to the
/// resource you protect, so it can refuse a holder whose grant went stale)
/// and COTERIE_NODE to the node that granted it.
///
/// While the lock is awaited and while CMD runs, the session with the node
/// is kept alive (a stopped `coterie lock` loses its place in line, and is
/// never handed the lock it cannot take). While CMD runs, a node that
/// dies is noticed at once, one that hangs (or is cut off) within its
/// failure timeout and a heartbeat. Then the lock is no longer CMD's:
/// coterie prints one line saying why, sends CMD's process group SIGTERM,
/// and SIGKILL after --kill-grace, unless --no-kill lets it run on. The
/// node in turn releases the lock if this process hangs or dies (after
/// the cluster's `lock_delay`, if it has one).
///
/// Signals coterie receives (INT, TERM, HUP, QUIT) are passed on to CMD
/// while it runs; while the lock is still awaited, they withdraw the
/// request and coterie exits.
///
/// Exit status: CMD's, when it ran to its end holding the lock; 75 when
/// the lock was not acquired within --timeout (or at once, with --try); 69
/// when no node answered, or none accepted our credentials (the cluster's
/// secret: `[security] secret_file`, or COTERIE_SECRET_FILE), or the node
/// died or hung while we waited; 76 when the lock was lost while CMD ran;
/// 128 + the signal when a signal ended the wait for the lock.
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
    /// How long CMD has to exit after SIGTERM once the lock is lost,
    /// before SIGKILL.
    #[arg(long, value_parser = common::parse_duration, default_value = "5s")]
    kill_grace: Duration,
    /// When the lock is lost, let CMD run on (still report the loss, and
    /// exit 76 when it ends).
    #[arg(long)]
    no_kill: bool,
    /// The command to run, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// The signals passed on to CMD.
struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
    quit: Signal,
}

impl Signals {
    fn new() -> Result<Signals> {
        let listen = |kind| signal(kind).context("listening for signals");
        Ok(Signals {
            int: listen(SignalKind::interrupt())?,
            term: listen(SignalKind::terminate())?,
            hup: listen(SignalKind::hangup())?,
            quit: listen(SignalKind::quit())?,
        })
    }

    /// The next signal received: its number and name.
    async fn recv(&mut self) -> (i32, &'static str) {
        tokio::select! {
            _ = self.int.recv() => (libc::SIGINT, "SIGINT"),
            _ = self.term.recv() => (libc::SIGTERM, "SIGTERM"),
            _ = self.hup.recv() => (libc::SIGHUP, "SIGHUP"),
            _ = self.quit.recv() => (libc::SIGQUIT, "SIGQUIT"),
        }
    }
}

/// Sends `signal` to CMD's process group.
fn signal_group(pgid: u32, signal: i32) {
    super::common::signal(-(pgid as i32), signal);
}

pub fn run(args: Args) -> Result<ExitCode> {
    let nodes = args.target.nodes()?;
    common::small_runtime()?.block_on(async {
        let mut signals = Signals::new()?;
        // The first node that answers serves the session.
        let mut session = None;
        let mut errors = Vec::new();
        for node in &nodes {
            match node.connect().await {
                Ok(c) => {
                    session = Some((c, node));
                    break;
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        let Some((mut client, node)) = session else {
            eprintln!("coterie lock: no node answered and accepted us ({})", errors.join("; "));
            return Ok(ExitCode::from(EXIT_UNAVAILABLE));
        };
        let acquired = tokio::select! {
            acquired = client.acquire(args.timeout, args.try_lock) => match acquired {
                Ok(acquired) => acquired,
                Err(ClientError::Refused(why)) => {
                    eprintln!("coterie lock: {} refused us: {why}", node.addr);
                    return Ok(ExitCode::from(EXIT_UNAVAILABLE));
                }
                Err(ClientError::Lost(loss)) => {
                    eprintln!("coterie lock: lost {} while waiting for the lock: {loss}", node.addr);
                    return Ok(ExitCode::from(EXIT_UNAVAILABLE));
                }
                Err(e) => return Err(e.into()),
            },
            (number, name) = signals.recv() => {
                // Dropping the session withdraws the request (the node
                // gives up its place, or releases a grant that raced this).
                drop(client);
                eprintln!("coterie lock: {name} while waiting for the lock; request withdrawn");
                return Ok(ExitCode::from(128 + number as u8));
            }
        };
        let fence = match acquired {
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
        let spawned = tokio::process::Command::new(program)
            .args(rest)
            .env("COTERIE_FENCE", fence.to_string())
            .env("COTERIE_NODE", status.id.to_string())
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                client.release().await?;
                return Err(e).with_context(|| format!("cannot run {program}"));
            }
        };
        let pgid = child.id().context("the command exited at once")?;
        let who = format!("node {} at {}", status.id, node.addr);
        let mut lost: Option<Loss> = None;
        let mut kill_at: Option<tokio::time::Instant> = None;
        let exit = loop {
            let kill_timer = async {
                match kill_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                exit = child.wait() => break exit.context("waiting for the command")?,
                loss = client.lost(), if lost.is_none() => {
                    let when = humantime::format_rfc3339_millis(SystemTime::now());
                    let action = if args.no_kill {
                        "letting it run on (--no-kill)".to_string()
                    } else {
                        format!(
                            "sending SIGTERM to {program}, SIGKILL in {}",
                            humantime::format_duration(args.kill_grace)
                        )
                    };
                    eprintln!("coterie lock: lost the lock at {when}: {who}: {loss}; {action}");
                    if !args.no_kill {
                        signal_group(pgid, libc::SIGTERM);
                        kill_at = Some(tokio::time::Instant::now() + args.kill_grace);
                    }
                    lost = Some(loss);
                }
                _ = kill_timer => {
                    signal_group(pgid, libc::SIGKILL);
                    kill_at = None;
                }
                (number, _) = signals.recv() => signal_group(pgid, number),
            }
        };
        if lost.is_some() {
            return Ok(ExitCode::from(EXIT_LOST));
        }
        client.release().await?;
        Ok(ExitCode::from(exit_status(exit)))
    })
}

/// CMD's exit status as a shell reports it: its code, or 128 + the signal
/// that ended it.
fn exit_status(exit: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (exit.code(), exit.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128 + signal as u8,
        (None, None) => 1,
    }
}
