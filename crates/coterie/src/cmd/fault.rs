//! `coterie fault`: inject faults into running nodes through their client
//! ports, and heal them.

use super::common::{self, Target};
use anyhow::Result;
use coterie_node::protocol::FaultCommand;
use coterie_node::Client;
use serde_json::json;
use std::process::ExitCode;
use std::time::Duration;

/// Inject a fault into nodes' agents, or clear them.
///
/// Faults act on whole messages inside the node, above TCP: a partition
/// drops everything to and from the peers named, a delay holds what the
/// node sends, a drop loses a share of it, and a pause freezes the node's
/// handling of messages, timers and clients (as SIGSTOP would) while its
/// client port still takes `fault` commands. `--config FILE` alone applies
/// the fault at every node; add `--node ID`, or use `--addr`, for one.
/// Under docker compose the same experiments come from `docker compose
/// kill/start/pause/unpause` and `docker network disconnect/connect`.
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
    /// Cut the node off from these peers, both ways (all peers if none).
    Partition {
        /// Peer ids, comma-separated.
        #[arg(value_delimiter = ',')]
        peers: Vec<u32>,
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
    /// Clear every fault.
    Heal,
    /// Show the faults in force.
    Show,
}

impl Fault {
    fn command(&self) -> FaultCommand {
        match self {
            Fault::Partition { peers } => FaultCommand::Partition { peers: peers.clone() },
            Fault::Delay { delay, peers } => {
                FaultCommand::Delay { peers: peers.clone(), ms: delay.as_millis() as u64 }
            }
            Fault::Drop { percent, peers } => {
                FaultCommand::Drop { peers: peers.clone(), percent: *percent }
            }
            Fault::Pause => FaultCommand::Pause,
            Fault::Resume => FaultCommand::Resume,
            Fault::Heal => FaultCommand::Heal,
            Fault::Show => FaultCommand::Show,
        }
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let nodes = args.target.nodes()?;
    let command = args.fault.command();
    common::small_runtime()?.block_on(async {
        let mut ok = true;
        let mut rows = Vec::new();
        for node in &nodes {
            let name = node.id.map_or(node.addr.clone(), |id| format!("n{id}"));
            let result = match Client::connect(&node.addr).await {
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
                    Err(e) => println!("{name:<6} error: {e}"),
                }
            }
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    })
}
