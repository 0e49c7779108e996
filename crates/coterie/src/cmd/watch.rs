//! `coterie watch`: every node's events, merged, as they happen.

use super::common::{self, NodeAddr, Target};
use super::recording::Recording;
use anyhow::Result;
use coterie_core::Epoch;
use coterie_node::protocol::{NodeEvent, WatchEvent};
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

/// What a watcher task reports about its node.
#[derive(Debug)]
pub enum Watched {
    /// An event from the node's stream.
    Event(WatchEvent),
    /// The stream from this node ended (it died or stopped); the watcher
    /// keeps dialling it.
    Lost {
        /// The node.
        node: u32,
    },
}

/// Watches every node in `nodes` until `tx` is closed, reporting on it.
/// Each stream starts with the node's snapshot; each node's watcher dials
/// again whenever its stream ends, so a restarted node is watched anew.
/// With `messages` (`Some(heartbeats too)`), every message sent and taken
/// in is reported as well.
pub fn spawn(nodes: &[NodeAddr], tx: mpsc::UnboundedSender<Watched>, messages: Option<bool>) {
    for node in nodes {
        let (node, tx) = (node.clone(), tx.clone());
        tokio::spawn(async move {
            while !tx.is_closed() {
                if let Ok(client) = node.connect().await {
                    let watched = match messages {
                        Some(heartbeats) => client.watch_messages(heartbeats).await,
                        None => client.watch().await,
                    };
                    if let Ok((first, mut stream)) = watched {
                        let id = first.node;
                        if tx.send(Watched::Event(first)).is_err() {
                            return;
                        }
                        loop {
                            tokio::select! {
                                next = stream.next() => match next {
                                    Ok(Some(e)) => {
                                        if tx.send(Watched::Event(e)).is_err() {
                                            return;
                                        }
                                    }
                                    _ => break,
                                },
                                _ = tx.closed() => return,
                            }
                        }
                        if tx.send(Watched::Lost { node: id }).is_err() {
                            return;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
    }
}

/// Whether `event` is one of the frequent grant/release events.
pub fn is_grant(event: &NodeEvent) -> bool {
    matches!(event, NodeEvent::Granted { .. } | NodeEvent::Released { .. })
}

/// The event in words, without its node.
pub fn describe(event: &NodeEvent) -> String {
    match event {
        NodeEvent::Snapshot { coordinator, epoch, alive, joined } => format!(
            "follows {} ({}), sees {alive:?} up{}",
            coordinator.map_or("nobody".into(), |c| format!("n{c}")),
            Epoch(*epoch),
            if *joined { "" } else { ", still joining" },
        ),
        NodeEvent::Joined { alive } => format!("joined the cluster with {alive:?} up"),
        NodeEvent::PeerUp { peer } => format!("hears from n{peer}"),
        NodeEvent::PeerDown { peer } => format!("suspects n{peer}"),
        NodeEvent::Coordinator { leader, epoch } => {
            format!("follows n{leader} ({})", Epoch(*epoch))
        }
        NodeEvent::Granted { name, fence, session } => {
            format!("grants session {session} {}, fence {fence}", lock_name(name))
        }
        NodeEvent::Released { name, session } => {
            format!("session {session} releases {}", lock_name(name))
        }
        NodeEvent::Fault(state) => format!("faults now: {state}"),
        NodeEvent::Missed { events } => format!("(watcher fell behind: {events} events skipped)"),
        NodeEvent::Sent { to, seq, text, .. } => {
            format!("sends n{to} #{seq} {}", coterie_diagram::label::short(text))
        }
        NodeEvent::Delivered { from, seq } => format!("takes in #{seq} from n{from}"),
    }
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

/// How a lock is named in a line: `the lock` for the default one.
fn lock_name(name: &str) -> String {
    if name == coterie_core::Name::DEFAULT {
        "the lock".into()
    } else {
        format!("lock {name:?}")
    }
}
