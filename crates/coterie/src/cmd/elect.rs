//! `coterie elect` and `coterie leader`: leader election by name, for
//! applications (etcd's Election, Curator's LeaderLatch). A campaign
//! holds the election's lock with a value; whoever holds it leads. This
//! is not the cluster's own coordinator election, which stays as it is.

use super::common::{self, NodeAddr, Target};
use super::lock::{self, Holding, RunArgs};
use anyhow::Result;
use coterie_node::protocol::LeaderReport;
use coterie_node::{client_label, LockRequest};
use std::process::ExitCode;

/// Campaign in election NAME and run CMD while leader; or, with
/// --observe, print every change of its leader.
///
/// A campaign waits for the election's lock (the lock named NAME) and
/// holds it with --value (default: this process, `pid@host`): while it
/// holds, it leads, and everyone who asks (`coterie leader`, observers)
/// is told the value. CMD runs while it leads, with COTERIE_FENCE set to
/// the leadership's fencing token (a later leader's is higher) and
/// COTERIE_VALUE to the value. When leadership is lost (the node died,
/// hung or was cut off), CMD gets SIGTERM and SIGKILL after --kill-grace,
/// and elect exits 76; when CMD ends by itself, the campaign resigns and
/// the next campaigner leads. Exit statuses otherwise as `coterie lock`'s.
///
/// --observe prints the leader now, then one line per change, for as long
/// as it runs. It watches from the node --node names (else the first that
/// answers), pings it, and moves on to another node of the configuration
/// if that one dies, hangs or is cut off; given one node by --addr, it
/// exits 69 then. Observers see every change their node learns of: each
/// leader's node tells every other node as it takes over and as it lets
/// go (a node that hung or was cut off hears it when it is back), and a
/// leader whose node is suspected is reported gone at once.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The election (a lock name).
    #[arg(value_name = "NAME")]
    name: String,
    /// What the leader announces (an address, an id).
    #[arg(long, value_name = "V", conflicts_with = "observe")]
    value: Option<String>,
    /// Print every change of leader instead of campaigning.
    #[arg(long)]
    observe: bool,
    /// With --observe: a JSON object per change (`coterie leader --json`'s).
    #[arg(long, requires = "observe")]
    json: bool,
    /// Give up if not leader within this long (e.g. "5s"); default: wait.
    #[arg(long, value_parser = common::parse_duration, conflicts_with = "observe")]
    timeout: Option<std::time::Duration>,
    /// Give up unless leader promptly (within one failure timeout).
    #[arg(long = "try", conflicts_with = "observe")]
    try_lock: bool,
    /// How long CMD has to exit after SIGTERM once leadership is lost,
    /// before SIGKILL.
    #[arg(long, value_parser = common::parse_duration, default_value = "5s")]
    kill_grace: std::time::Duration,
    /// When leadership is lost, let CMD run on (still report the loss, and
    /// exit 76 when it ends).
    #[arg(long)]
    no_kill: bool,
    /// When someone asks the leader to step down (`coterie revoke NAME`),
    /// send CMD's process group this signal (USR1, HUP, 10 ...); CMD
    /// decides whether to end, and so resign.
    #[arg(long, value_name = "SIGNAL", value_parser = lock::parse_signal, conflicts_with = "observe")]
    on_revoke: Option<lock::Signo>,
    /// The command to run while leader, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    if let Err(why) = lock::check_names(std::slice::from_ref(&args.name)) {
        eprintln!("coterie elect: {why}");
        return Ok(ExitCode::from(2));
    }
    if args.observe {
        // An observer may watch from any node: the one named first.
        let nodes = args.target.nodes_named_first()?;
        return common::small_runtime()?.block_on(observe(&nodes, &args.name, args.json));
    }
    let nodes = args.target.nodes()?;
    if args.command.is_empty() {
        eprintln!("coterie elect: give the command to run while leader after --, or --observe");
        return Ok(ExitCode::from(2));
    }
    let value = args.value.unwrap_or_else(client_label);
    let req = LockRequest::new([args.name])
        .value(Some(value.clone()))
        .timeout(args.timeout)
        .try_lock(args.try_lock);
    let run = RunArgs {
        timeout: args.timeout,
        try_lock: args.try_lock,
        kill_grace: args.kill_grace,
        no_kill: args.no_kill,
        on_revoke: args.on_revoke,
        command: args.command,
    };
    let holding =
        Holding { who: "coterie elect", what: "leadership", env: vec![("COTERIE_VALUE", value)] };
    common::small_runtime()?.block_on(lock::hold(&nodes, &req, &run, holding))
}

/// Prints election `name`'s leader and every change, moving to another
/// node when the one it watches goes.
async fn observe(nodes: &[NodeAddr], name: &str, json: bool) -> Result<ExitCode> {
    let mut last: Option<LeaderReport> = None;
    // Where to start asking: after the node lost last, which is asked last.
    let mut start = 0;
    loop {
        let mut watched = None;
        for i in (0..nodes.len()).map(|k| (start + k) % nodes.len()) {
            let Ok(client) = nodes[i].connect().await else { continue };
            if let Ok(stream) = client.observe(name).await {
                watched = Some((i, stream));
                break;
            }
        }
        let Some((i, (first, mut stream))) = watched else {
            eprintln!("coterie elect: no node answered");
            return Ok(ExitCode::from(lock::EXIT_UNAVAILABLE));
        };
        let mut report = first;
        let why = loop {
            if last.as_ref() != Some(&report) {
                println!("{}", line(&report, json)?);
                last = Some(report);
            }
            report = match stream.next().await {
                Ok(Some(report)) => report,
                Ok(None) => break "the node closed the stream (it died or stopped)".to_string(),
                Err(e) => break e.to_string(),
            };
        };
        let addr = &nodes[i].addr;
        if nodes.len() == 1 {
            eprintln!("coterie elect: lost {addr}, the only node given: {why}");
            return Ok(ExitCode::from(lock::EXIT_UNAVAILABLE));
        }
        eprintln!("coterie elect: lost {addr}: {why}; observing from another node");
        start = i + 1;
    }
}

/// One change, as a line.
fn line(report: &LeaderReport, json: bool) -> Result<String> {
    if json {
        return Ok(serde_json::to_string(report)?);
    }
    Ok(match &report.leader {
        Some(l) => {
            format!("{}: led by n{} with {:?} (fence {})", report.name, l.node, l.value, l.fence)
        }
        None => format!("{}: no leader", report.name),
    })
}

/// Print the leader of election NAME: its node, value and fence.
///
/// The first node that answers asks the others. Exits 0 with a leader, 1
/// without one.
#[derive(clap::Args)]
pub struct LeaderArgs {
    #[command(flatten)]
    target: Target,
    /// The election (a lock name).
    #[arg(value_name = "NAME")]
    name: String,
    /// Print the leader as a JSON object.
    #[arg(long)]
    json: bool,
}

pub fn leader(args: LeaderArgs) -> Result<ExitCode> {
    if let Err(why) = lock::check_names(std::slice::from_ref(&args.name)) {
        eprintln!("coterie leader: {why}");
        return Ok(ExitCode::from(2));
    }
    let nodes = args.target.nodes()?;
    let name = &args.name;
    let report =
        common::small_runtime()?.block_on(common::first_answer(&nodes, None, |mut c| async move {
            c.leader(name).await
        }));
    let report = match report {
        Ok(report) => report,
        Err(why) => {
            eprintln!("coterie leader: no node answered ({why})");
            return Ok(ExitCode::from(lock::EXIT_UNAVAILABLE));
        }
    };
    println!("{}", line(&report, args.json)?);
    Ok(if report.leader.is_some() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
