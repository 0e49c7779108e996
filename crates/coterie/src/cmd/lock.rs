//! `coterie lock`: run a command while holding one or more of the
//! cluster's locks, and stop it if they are lost. The holding and the
//! running are [`hold`]'s, which `coterie elect` shares.

use super::common::{self, NodeAddr, Target};
use anyhow::{Context, Result};
use coterie_core::Mode;
use coterie_node::{ClientError, Grant, HoldEvent, LockRequest, Loss, Outcome};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Exit status when the lock was not acquired in time (EX_TEMPFAIL).
pub const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status when no node could be reached (EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;
/// Exit status when the lock was lost while CMD ran.
pub const EXIT_LOST: u8 = 76;

/// Acquire one or more of the cluster's locks, run CMD while holding
/// them, release.
///
/// Like `etcdctl lock` or `consul lock`. A cluster serves many locks, one
/// per name (`printer-2`, `jobs/nightly`); without a NAME the lock is
/// `default`. Several names are taken all or none, one after the other
/// in name order (bytewise), so two commands asking for overlapping sets
/// never deadlock; a timeout releases what was taken. With -n K the lock
/// is a counting semaphore: K holders at once (centralized,
/// centralized-lending and raymond-k; every client of a lock must give
/// the same K). With --read the command shares the locks with other
/// readers (every algorithm but token-ring, bakery and
/// lodha-kshemkalyani, which take a read as a write), and a writer (the
/// default, or --write) holds them alone; no reader is let in ahead of a
/// writer that asked before it, except under roucairol-carvalho, maekawa
/// and tree-quorum, which keep no request order (a writer there waits for
/// the readers that asked before it or entered before its request
/// reached them, and no longer).
///
/// CMD runs in a process group of its own, with COTERIE_LOCK set to the
/// names held (space-separated), COTERIE_FENCE to the first one's fencing
/// token, COTERIE_FENCES to a JSON object of every name's token (pass them
/// to the resource you protect, so it can refuse a holder whose grant went
/// stale), and COTERIE_NODE to the node that granted them.
///
/// While the locks are awaited and while CMD runs, the session with the
/// node is kept alive (a stopped `coterie lock` loses its place in line,
/// and is never handed a lock it cannot take). While CMD runs, a node that
/// dies is noticed at once, one that hangs (or is cut off) within its
/// failure timeout and a heartbeat. Then the locks are no longer CMD's:
/// coterie prints one line saying why, sends CMD's process group SIGTERM,
/// and SIGKILL after --kill-grace, unless --no-kill lets it run on. The
/// node in turn releases the locks if this process hangs or dies (after
/// the cluster's `lock_delay`, if it has one).
///
/// Signals coterie receives (INT, TERM, HUP, QUIT) are passed on to CMD
/// while it runs; while the locks are still awaited, they withdraw the
/// request and coterie exits.
///
/// Exit status: CMD's, when it ran to its end holding the locks; 75 when
/// they were not acquired within --timeout (or at once, with --try); 69
/// when no node answered, or none accepted our credentials (the cluster's
/// secret: `[security] secret_file`, or COTERIE_SECRET_FILE), or the node
/// died or hung while we waited, or it refused the request (a limit, or
/// permits that do not fit the lock); 76 when the locks were lost while
/// CMD ran; 128 + the signal when a signal ended the wait; 2 for a name
/// that is not one (empty, over 256 bytes, a control character), a name
/// given twice, -n 0, or --read with -n above 1.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The locks to take (default: `default`).
    #[arg(value_name = "NAME")]
    names: Vec<String>,
    /// Hold one of K permits of each lock: a counting semaphore
    /// (centralized, centralized-lending and raymond-k; the others admit
    /// one holder). The permits go to clients wherever they are, several
    /// through one node.
    #[arg(short = 'n', long = "permits", value_name = "K")]
    permits: Option<u32>,
    /// Read: share the locks with other readers, never with a writer.
    /// Needs locks of one permit.
    #[arg(long, conflicts_with = "write")]
    read: bool,
    /// Write: hold the locks alone (the default).
    #[arg(long)]
    write: bool,
    /// A value to hold the locks with, shown to whoever lists them.
    #[arg(long, value_name = "V")]
    value: Option<String>,
    #[command(flatten)]
    run: RunArgs,
}

/// How the locks are waited for and CMD is run: what `lock` and `elect`
/// share.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Give up if not granted within this long (e.g. "5s"); default: wait.
    #[arg(long, value_parser = common::parse_duration)]
    pub timeout: Option<Duration>,
    /// Give up unless granted promptly (within one failure timeout).
    #[arg(long = "try")]
    pub try_lock: bool,
    /// How long CMD has to exit after SIGTERM once the lock is lost,
    /// before SIGKILL.
    #[arg(long, value_parser = common::parse_duration, default_value = "5s")]
    pub kill_grace: Duration,
    /// When the lock is lost, let CMD run on (still report the loss, and
    /// exit 76 when it ends).
    #[arg(long)]
    pub no_kill: bool,
    /// When someone asks the holders to let go (`coterie revoke`), send
    /// CMD's process group this signal (USR1, SIGUSR2, HUP, 10 ...); CMD
    /// decides what to do. Without it, the request is only reported.
    #[arg(long, value_name = "SIGNAL", value_parser = parse_signal)]
    pub on_revoke: Option<Signo>,
    /// The command to run, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// A signal's number, with the name it was given by.
#[derive(Clone, Copy, Debug)]
pub struct Signo(i32, &'static str);

/// The signals `--on-revoke` takes by name.
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("TERM", libc::SIGTERM),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("WINCH", libc::SIGWINCH),
    ("ALRM", libc::SIGALRM),
    ("KILL", libc::SIGKILL),
];

/// A signal by name (`USR1`, `SIGUSR1`, `usr1`) or number.
pub fn parse_signal(text: &str) -> Result<Signo, String> {
    let upper = text.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let known = |n: i32| SIGNALS.iter().find(|(_, k)| *k == n).map(|(name, _)| *name);
    let found = match bare.parse::<i32>() {
        Ok(n) => known(n).map(|name| (n, name)),
        Err(_) => SIGNALS.iter().find(|(name, _)| *name == bare).map(|(name, n)| (*n, *name)),
    };
    let names: Vec<&str> = SIGNALS.iter().map(|(name, _)| *name).collect();
    found.map(|(n, name)| Signo(n, name)).ok_or_else(|| {
        format!(
            "{text:?} is not a signal coterie sends: one of {}, or its number",
            names.join(", ")
        )
    })
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
    if let Err(why) = check_names(&args.names) {
        eprintln!("coterie lock: {why}");
        return Ok(ExitCode::from(2));
    }
    if args.permits == Some(0) {
        eprintln!("coterie lock: -n 0: a lock needs at least 1 permit");
        return Ok(ExitCode::from(2));
    }
    if args.read && args.permits.is_some_and(|k| k > 1) {
        eprintln!(
            "coterie lock: --read with -n {}: readers share a lock of one permit, and a \
             semaphore's permits are all alike (drop --read, or -n)",
            args.permits.unwrap_or(1)
        );
        return Ok(ExitCode::from(2));
    }
    let mode = if args.read { Mode::Read } else { Mode::Write };
    let nodes = args.target.nodes()?;
    let req = LockRequest::new(args.names)
        .permits(args.permits.unwrap_or(0))
        .mode(mode)
        .value(args.value)
        .timeout(args.run.timeout)
        .try_lock(args.run.try_lock);
    common::small_runtime()?.block_on(hold(&nodes, &req, &args.run, Holding::lock()))
}

/// The names as a node will take them, or a one-line reason why not: each
/// a lock name ([`coterie_core::Name`]), none twice.
pub fn check_names(names: &[String]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for text in names {
        coterie_core::Name::new(text).map_err(|e| format!("{e}: {text:?}"))?;
        if !seen.insert(text) {
            return Err(format!("the lock {text:?} is named twice"));
        }
    }
    Ok(())
}

/// What the command is holding, for its messages and CMD's environment.
pub struct Holding {
    /// The command's name, for messages (`coterie lock`).
    pub who: &'static str,
    /// What is held (`the lock`, `leadership`).
    pub what: &'static str,
    /// More for CMD's environment.
    pub env: Vec<(&'static str, String)>,
}

impl Holding {
    fn lock() -> Holding {
        Holding { who: "coterie lock", what: "the lock", env: Vec::new() }
    }
}

/// Takes what `req` asks for at the first of `nodes` that answers, runs
/// `run.command` while it holds, and releases; the exit status as
/// `coterie lock` documents it.
pub async fn hold(
    nodes: &[NodeAddr],
    req: &LockRequest,
    run: &RunArgs,
    holding: Holding,
) -> Result<ExitCode> {
    let Holding { who, what, env } = holding;
    let mut signals = Signals::new()?;
    // The first node that answers, and has a quorum, serves the session: a
    // node cut off with a minority (`partitions = "majority"`) refuses,
    // and the next one is asked.
    let mut errors = Vec::new();
    let mut served = None;
    for node in nodes {
        let mut client = match node.connect().await {
            Ok(c) => c,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        let outcome = tokio::select! {
            outcome = client.request(req) => match outcome {
                Ok(outcome) => outcome,
                Err(ClientError::Refused(why)) if why.starts_with("no quorum") => {
                    errors.push(format!("{}: {why}", node.addr));
                    continue;
                }
                Err(ClientError::Refused(why)) => {
                    eprintln!("{who}: {} refused the request: {why}", node.addr);
                    return Ok(ExitCode::from(EXIT_UNAVAILABLE));
                }
                Err(ClientError::Lost(loss)) => {
                    eprintln!("{who}: lost {} while waiting for {what}: {loss}", node.addr);
                    return Ok(ExitCode::from(EXIT_UNAVAILABLE));
                }
                Err(e) => return Err(e.into()),
            },
            (number, name) = signals.recv() => {
                // Dropping the session withdraws the request (the node gives
                // up its place, or releases a grant that raced this).
                drop(client);
                eprintln!("{who}: {name} while waiting for {what}; request withdrawn");
                return Ok(ExitCode::from(128 + number as u8));
            }
        };
        served = Some((client, node, outcome));
        break;
    }
    let Some((mut client, node, outcome)) = served else {
        eprintln!("{who}: no node answered and accepted us ({})", errors.join("; "));
        return Ok(ExitCode::from(EXIT_UNAVAILABLE));
    };
    let grant = match outcome {
        Outcome::Granted(grant) => grant,
        Outcome::TimedOut => {
            let waited =
                run.timeout.map_or("?".into(), |d| humantime::format_duration(d).to_string());
            eprintln!("{who}: {what} was not acquired within {waited}");
            return Ok(ExitCode::from(EXIT_NOT_ACQUIRED));
        }
        Outcome::Busy => {
            eprintln!("{who}: {what} is busy (--try)");
            return Ok(ExitCode::from(EXIT_NOT_ACQUIRED));
        }
    };
    let (program, rest) = run.command.split_first().expect("clap requires a command");
    let spawned = tokio::process::Command::new(program)
        .args(rest)
        .envs(environment(&grant))
        .envs(env)
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
    let from = format!("node {} at {}", grant.node, node.addr);
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
            event = client.hold_event(), if lost.is_none() => {
                let loss = match event {
                    HoldEvent::Lost(loss) => loss,
                    HoldEvent::RevokeAsked(asked) => {
                        let why = asked.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
                        let action = match run.on_revoke {
                            Some(Signo(_, name)) => format!("sent SIG{name} to {program}"),
                            None => "no --on-revoke: CMD was not told".to_string(),
                        };
                        // One write, before the signal: what CMD prints as
                        // it gets it must not land inside the line.
                        let line = format!("{who}: asked to let go of {:?}{why}; {action}\n", asked.name);
                        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                        if let Some(Signo(number, _)) = run.on_revoke {
                            signal_group(pgid, number);
                        }
                        continue;
                    }
                };
                let when = humantime::format_rfc3339_millis(SystemTime::now());
                let action = if run.no_kill {
                    "letting it run on (--no-kill)".to_string()
                } else {
                    format!(
                        "sending SIGTERM to {program}, SIGKILL in {}",
                        humantime::format_duration(run.kill_grace)
                    )
                };
                eprintln!("{who}: lost {what} at {when}: {from}: {loss}; {action}");
                if !run.no_kill {
                    signal_group(pgid, libc::SIGTERM);
                    kill_at = Some(tokio::time::Instant::now() + run.kill_grace);
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
}

/// What CMD finds in its environment about the locks it runs under.
fn environment(grant: &Grant) -> Vec<(&'static str, String)> {
    let names: Vec<&str> = grant.fences.iter().map(|(n, _)| n.as_str()).collect();
    let fences: serde_json::Map<String, serde_json::Value> =
        grant.fences.iter().map(|(n, f)| (n.clone(), (*f).into())).collect();
    vec![
        ("COTERIE_LOCK", names.join(" ")),
        ("COTERIE_FENCE", grant.fence().to_string()),
        ("COTERIE_FENCES", serde_json::Value::Object(fences).to_string()),
        ("COTERIE_NODE", grant.node.to_string()),
    ]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_learns_every_lock_and_fence() {
        let grant = Grant { node: 3, fences: vec![("a".into(), 7), ("jobs/x".into(), 9)] };
        let env = environment(&grant);
        assert_eq!(env[0], ("COTERIE_LOCK", "a jobs/x".into()));
        assert_eq!(env[1], ("COTERIE_FENCE", "7".into()));
        assert_eq!(env[2], ("COTERIE_FENCES", r#"{"a":7,"jobs/x":9}"#.into()));
        assert_eq!(env[3], ("COTERIE_NODE", "3".into()));
    }
}
