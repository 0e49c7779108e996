//! `coterie status`: one row per node.

use super::common::{self, NodeAddr, Target};
use anyhow::Result;
use coterie_core::{Epoch, Status};
use serde_json::{json, Value};
use std::process::ExitCode;
use std::time::Duration;

/// Show every node's view: coordinator, epoch, critical-section state, who
/// it believes alive, entries and message counts.
///
/// EPOCH is written eROUND.LEADER: `e7.3` is election round 7, won by
/// node 3. `--json` and the `coterie_epoch` metric give it as one number,
/// ROUND * 65536 + LEADER (`e7.3` is 458755), and `--json` as `epoch_name`
/// too.
///
/// A node that does not answer is listed as unreachable, not skipped; the
/// exit status is non-zero if any node was unreachable.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Print a JSON array, one object per node.
    #[arg(long)]
    json: bool,
}

/// One node's answer, or why there was none.
pub async fn fetch(node: &NodeAddr) -> Result<Status, String> {
    let ask = async {
        let mut client = node.connect().await?;
        client.status().await
    };
    match tokio::time::timeout(Duration::from_secs(2), ask).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 2s".into()),
    }
}

/// The JSON object of one row.
pub fn to_json(node: &NodeAddr, result: &Result<Status, String>) -> Value {
    match result {
        Ok(status) => {
            let mut v = serde_json::to_value(status).expect("status serialises");
            // The epoch as the table writes it (eROUND.LEADER) beside the
            // number (ROUND * 65536 + LEADER), as `view` has `name`.
            v["epoch_name"] = json!(Epoch(status.epoch).to_string());
            v["reachable"] = json!(true);
            v["addr"] = json!(node.addr);
            v
        }
        Err(e) => json!({"id": node.id, "addr": node.addr, "reachable": false, "error": e}),
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let nodes = args.target.nodes()?;
    let results = common::small_runtime()?.block_on(async {
        let mut out = Vec::new();
        for node in &nodes {
            out.push(fetch(node).await);
        }
        out
    });
    if args.json {
        let rows: Vec<Value> = nodes.iter().zip(&results).map(|(n, r)| to_json(n, r)).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{:>4}  {:<22} {:>5}  {:>8}  {:<8} {:<14} {:>8} {:>9} {:>9} {:>7} {:>7}",
            "ID",
            "ADDR",
            "COORD",
            "EPOCH",
            "CS",
            "ALIVE",
            "ENTRIES",
            "SENT",
            "RECEIVED",
            "UNACKED",
            "REDIALS"
        );
        for (node, result) in nodes.iter().zip(&results) {
            match result {
                Ok(s) => {
                    let alive: Vec<String> = s.alive.iter().map(u32::to_string).collect();
                    // Frames waiting for acknowledgement, and connections
                    // made again after the first, over every peer.
                    let unacked: usize = s.sessions.iter().map(|x| x.unacked).sum();
                    let redials: u64 =
                        s.sessions.iter().map(|x| x.connections.saturating_sub(1)).sum();
                    println!(
                        "{:>4}  {:<22} {:>5}  {:>8}  {:<8} {:<14} {:>8} {:>9} {:>9} {:>7} {:>7}",
                        s.id,
                        node.addr,
                        s.coordinator.map_or("-".into(), |c| c.to_string()),
                        Epoch(s.epoch).to_string(),
                        s.cs_state.to_string(),
                        alive.join(","),
                        s.cs_entries,
                        s.messages_sent.values().sum::<u64>(),
                        s.messages_received.values().sum::<u64>(),
                        unacked,
                        redials,
                    );
                }
                Err(e) => println!(
                    "{:>4}  {:<22} unreachable: {e}",
                    node.id.map_or("?".into(), |i| i.to_string()),
                    node.addr
                ),
            }
        }
        // A node starved of the processor waits longer before suspecting
        // anyone; say so, since it is slower to notice a failure then.
        for s in results.iter().flatten() {
            if s.awareness > 0 {
                println!(
                    "n{}: its timer ran late; it suspects a peer only after {} ms of silence",
                    s.id, s.failure_timeout_ms
                );
            }
            // partitions = "majority": a node without a majority's lease
            // grants nothing; say where it stands.
            if !s.quorum {
                let view = s.view.as_ref().map_or("no view yet".to_string(), |v| {
                    let members: Vec<String> = v.members.iter().map(u32::to_string).collect();
                    format!("its view {} is of {}", v.name, members.join(","))
                });
                println!(
                    "n{}: minority: no lease from a majority ({view}); it grants nothing",
                    s.id
                );
            }
        }
    }
    Ok(if results.iter().all(Result::is_ok) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
