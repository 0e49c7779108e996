//! `coterie watch`: every node's events, merged, as they happen.

use super::common::{self, Target};
use super::recording::Recording;
use super::watchers::{describe, is_grant, spawn, Watched};
use anyhow::Result;
use coterie_node::protocol::NodeEvent;
use std::process::ExitCode;
use std::time::Duration;
use tokio::sync::mpsc;

/// Stream what happens at every node: suspicions, recoveries, coordinator
/// changes, joins, faults injected (and, with --grants, every grant and
/// release), one line per event, merged across the nodes.
///
/// A node that dies is reported once and watched again when it comes
/// back: start it before killing nodes and watch the election happen.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Also show every grant and release (a busy lock makes many).
    #[arg(long)]
    grants: bool,
    /// Stop after this long (default: until interrupted).
    #[arg(long, value_parser = common::parse_duration)]
    duration: Option<Duration>,
    /// Print one JSON object per line instead.
    #[arg(long)]
    json: bool,
    /// Record every message too, and draw the run when the watch ends
    /// (--duration, or Ctrl-C).
    #[command(flatten)]
    drawing: common::Drawing,
}

/// A wall-clock time of day, UTC, to the millisecond.
fn clock(unix_us: u64) -> String {
    let ms = unix_us / 1000;
    let (h, m, s) = (ms / 3_600_000 % 24, ms / 60_000 % 60, ms / 1000 % 60);
    format!("{h:02}:{m:02}:{s:02}.{:03}", ms % 1000)
}

pub fn run(args: Args) -> Result<ExitCode> {
    let nodes = args.target.nodes()?;
    let recording = args.drawing.wanted();
    let mut record = recording.then(|| {
        let ids = nodes.iter().enumerate().map(|(i, n)| n.id.unwrap_or(i as u32 + 1)).collect();
        Recording::new(ids, format!("watched on {} nodes", nodes.len()))
    });
    common::small_runtime()?.block_on(async {
        let (tx, mut rx) = mpsc::unbounded_channel();
        spawn(&nodes, tx, recording.then_some(args.drawing.heartbeats));
        let deadline = async {
            match args.duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let shutdown = common::shutdown_signal();
        tokio::pin!(deadline, shutdown);
        loop {
            let watched = tokio::select! {
                w = rx.recv() => w,
                _ = &mut deadline => break,
                _ = &mut shutdown => break,
            };
            let Some(watched) = watched else { break };
            if let Some(record) = &mut record {
                record.watched(&watched);
            }
            match watched {
                Watched::Event(e) if is_message(&e.event) && !args.json => {}
                Watched::Event(e) if !args.grants && is_grant(&e.event) => {}
                Watched::Event(e) if args.json => println!("{}", serde_json::to_string(&e)?),
                Watched::Event(e) => {
                    println!("{}  n{:<3} {}", clock(e.unix_us), e.node, describe(&e.event))
                }
                Watched::Lost { node } if args.json => {
                    println!("{}", serde_json::json!({"node": node, "event": "Lost"}))
                }
                Watched::Lost { node } => {
                    println!("{:12}  n{node:<3} gone (watching for its return)", "")
                }
            }
        }
        anyhow::Ok(())
    })?;
    if let Some(record) = record {
        args.drawing.write(&record.finish())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `event` reports a message (many: left out of the text stream).
fn is_message(event: &NodeEvent) -> bool {
    matches!(event, NodeEvent::Sent { .. } | NodeEvent::Delivered { .. })
}
