//! `coterie fault`: inject faults into running nodes through their client
//! ports, and heal them.

use super::common::{self, Target};
use anyhow::Result;
use coterie_node::protocol::{FaultCommand, Way};
use serde_json::json;
use std::process::ExitCode;
use std::time::Duration;

/// Inject a fault into nodes' agents, or clear them.
///
/// Faults act on whole messages inside the node, above its reliable
/// sessions: a partition drops everything to and from the peers named, a
/// delay holds what the node sends, a drop loses a share of it (the
/// sessions cannot send again what they never saw), and a pause freezes
/// the node's handling of messages, timers and clients (as SIGSTOP would)
/// while its client port still takes `fault` commands. A reset, below the
/// sessions, breaks the node's peer connections: they are redialled and
/// nothing is lost. `--config FILE` alone applies
/// the fault at every node; add `--node ID`, or use `--addr`, for one.
/// Under docker compose the same experiments come from `docker compose
/// kill/start/pause/unpause` and `docker network disconnect/connect`.
///
/// A node refuses every fault but `show` unless its configuration says
/// `allow_faults = true` under `[security]` (labs and tests only).
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Print the faults in force at each node as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    fault: Fault,
}

#[derive(clap::Subcommand)]
enum Fault {
    /// Cut the node off from these peers (all peers if none): both ways,
    /// or one way with --inbound or --outbound.
    Partition {
        /// Peer ids, comma-separated.
        #[arg(value_delimiter = ',')]
        peers: Vec<u32>,
        /// Only what comes in: the node hears nothing from the peers,
        /// which still hear it.
        #[arg(long, conflicts_with = "outbound")]
        inbound: bool,
        /// Only what goes out: the peers hear nothing from the node, which
        /// still hears them.
        #[arg(long)]
        outbound: bool,
    },
    /// Delay what the node sends (to --peers, or to everyone); 0 removes.
    Delay {
        /// The added delay, e.g. "50ms".
        #[arg(value_parser = common::parse_duration)]
        delay: Duration,
        /// Only to these peers, comma-separated.
        #[arg(long, value_delimiter = ',')]
        peers: Vec<u32>,
    },
    /// Drop a share of what the node sends (to --peers, or to everyone).
    Drop {
        /// Percent of messages lost, 0 to 100 (0 removes).
        percent: u8,
        /// Only to these peers, comma-separated.
        #[arg(long, value_delimiter = ',')]
        peers: Vec<u32>,
    },
    /// Freeze the node until `resume`.
    Pause,
    /// Unfreeze a paused node.
    Resume,
    /// Close the node's connection with each of these peers (all if
    /// none), as a NAT or a flapping link would; it is redialled at once
    /// and the sessions send again what was in flight. `--every 300ms
    /// --for 6s` repeats it.
    Reset {
        /// Peer ids, comma-separated.
        #[arg(value_delimiter = ',')]
        peers: Vec<u32>,
        /// Reset again this often...
        #[arg(long, value_parser = common::parse_duration, requires = "for_")]
        every: Option<Duration>,
        /// ...for this long.
        #[arg(long = "for", id = "for_", value_parser = common::parse_duration, requires = "every")]
        for_: Option<Duration>,
    },
    /// Clear every fault.
    Heal,
    /// Show the faults in force.
    Show,
}

impl Fault {
    fn command(&self) -> FaultCommand {
        match self {
            Fault::Partition { peers, inbound, outbound } => {
                let way = match (inbound, outbound) {
                    (true, _) => Way::Inbound,
                    (_, true) => Way::Outbound,
                    _ => Way::Both,
                };
                FaultCommand::Partition { peers: peers.clone(), way }
            }
            Fault::Delay { delay, peers } => {
                FaultCommand::Delay { peers: peers.clone(), ms: delay.as_millis() as u64 }
            }
            Fault::Drop { percent, peers } => {
                FaultCommand::Drop { peers: peers.clone(), percent: *percent }
            }
            Fault::Pause => FaultCommand::Pause,
            Fault::Resume => FaultCommand::Resume,
            Fault::Reset { peers, .. } => FaultCommand::Reset { peers: peers.clone() },
            Fault::Heal => FaultCommand::Heal,
            Fault::Show => FaultCommand::Show,
        }
    }

    /// How often, and for how long, to repeat the command (`reset --every
    /// D --for D`); once otherwise.
    fn repeat(&self) -> Option<(Duration, Duration)> {
        match self {
            Fault::Reset { every: Some(every), for_: Some(span), .. } => Some((*every, *span)),
            _ => None,
        }
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let nodes = args.target.nodes()?;
    let command = args.fault.command();
    common::small_runtime()?.block_on(async {
        if let Some((every, span)) = args.fault.repeat() {
            return repeat(&nodes, &command, every, span, args.json).await;
        }
        let mut ok = true;
        let mut rows = Vec::new();
        for node in &nodes {
            let name = node.id.map_or(node.addr.clone(), |id| format!("n{id}"));
            let result = match node.connect().await {
                Ok(mut client) => client.fault(command.clone()).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            ok &= result.is_ok();
            if args.json {
                rows.push(match &result {
                    Ok(state) => json!({"node": node.id, "addr": node.addr, "faults": state}),
                    Err(e) => json!({"node": node.id, "addr": node.addr, "error": e}),
                });
            } else {
                match &result {
                    Ok(state) => println!("{name:<6} {state}"),
                    Err(e) => eprintln!("coterie fault: {name}: {e}"),
                }
            }
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    })
}

/// Sends `command` to every node each `every` for `span`, with a progress
/// line per round, and reports how many rounds every node took.
async fn repeat(
    nodes: &[common::NodeAddr],
    command: &FaultCommand,
    every: Duration,
    span: Duration,
    json: bool,
) -> Result<ExitCode> {
    let every = every.max(Duration::from_millis(1));
    let start = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(every);
    let mut done = vec![0u64; nodes.len()];
    let mut failed = vec![0u64; nodes.len()];
    while start.elapsed() < span {
        tick.tick().await;
        for (i, node) in nodes.iter().enumerate() {
            let result = match node.connect().await {
                Ok(mut client) => client.fault(command.clone()).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match result {
                Ok(_) => done[i] += 1,
                Err(_) => failed[i] += 1,
            }
        }
        if !json {
            let rounds = done.iter().chain(&failed).max().copied().unwrap_or(0);
            eprint!("\r  {rounds} rounds in {:.1}s", start.elapsed().as_secs_f64());
        }
    }
    if json {
        let rows: Vec<_> = nodes
            .iter()
            .zip(done.iter().zip(&failed))
            .map(|(n, (d, f))| json!({"node": n.id, "addr": n.addr, "done": d, "failed": f}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        eprintln!();
        for (node, (d, f)) in nodes.iter().zip(done.iter().zip(&failed)) {
            let name = node.id.map_or(node.addr.clone(), |id| format!("n{id}"));
            println!("{name:<6} connections reset {d} times, {f} failed");
        }
    }
    Ok(if failed.iter().all(|&f| f == 0) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
