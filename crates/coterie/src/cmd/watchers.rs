//! The watcher tasks: one per node, following its event stream
//! (`coterie watch`, the timeline, the dashboard and the recordings read
//! what they report), and the events in words.

use super::common::NodeAddr;
use coterie_core::Epoch;
use coterie_node::protocol::{NodeEvent, WatchEvent};
use std::time::Duration;
use tokio::sync::mpsc;

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
/// again whenever its stream ends, so a restarted node is watched anew,
/// and when the node says the watcher fell behind, for a fresh snapshot.
/// With `messages` (`Some(heartbeats too)`), every message sent and taken
/// in is reported as well.
pub fn spawn(nodes: &[NodeAddr], tx: mpsc::UnboundedSender<Watched>, messages: Option<bool>) {
    for node in nodes {
        let (node, tx) = (node.clone(), tx.clone());
        tokio::spawn(async move {
            // Redials back off, 5 ms doubling to 50 ms: a hundred nodes
            // still booting are not to be dialled thousands of times a
            // second.
            let mut pause = Duration::from_millis(5);
            while !tx.is_closed() {
                if let Ok(client) = node.connect().await {
                    let watched = match messages {
                        Some(heartbeats) => client.watch_messages(heartbeats).await,
                        None => client.watch().await,
                    };
                    if let Ok((first, mut stream)) = watched {
                        pause = Duration::from_millis(5);
                        let id = first.node;
                        if tx.send(Watched::Event(first)).is_err() {
                            return;
                        }
                        let mut behind = false;
                        loop {
                            tokio::select! {
                                next = stream.next() => match next {
                                    Ok(Some(e)) => {
                                        behind = matches!(e.event, NodeEvent::Missed { .. });
                                        if tx.send(Watched::Event(e)).is_err() {
                                            return;
                                        }
                                        if behind {
                                            break;
                                        }
                                    }
                                    _ => break,
                                },
                                _ = tx.closed() => return,
                            }
                        }
                        // Events were skipped, a change of coordinator
                        // perhaps: a new stream starts with where the node
                        // stands now.
                        if behind {
                            continue;
                        }
                        if tx.send(Watched::Lost { node: id }).is_err() {
                            return;
                        }
                    }
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
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
        NodeEvent::Snapshot { coordinator, epoch, alive, joined, view, quorum } => format!(
            "follows {} ({}), sees {alive:?} up{}{}{}",
            coordinator.map_or("nobody".into(), |c| format!("n{c}")),
            Epoch(*epoch),
            if *joined { "" } else { ", still joining" },
            view.as_ref().map_or(String::new(), |v| format!(", view {} {:?}", v.name, v.members)),
            if *quorum { "" } else { ", minority: grants nothing" },
        ),
        NodeEvent::View(view) => format!("installs view {} of {:?}", view.name, view.members),
        NodeEvent::Quorum { held: true } => "holds a majority's lease: serves".to_string(),
        NodeEvent::Quorum { held: false } => {
            "lost a majority's lease: grants nothing (minority)".to_string()
        }
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

/// How a lock is named in a line: `the lock` for the default one.
fn lock_name(name: &str) -> String {
    if name == coterie_core::Name::DEFAULT {
        "the lock".into()
    } else {
        format!("lock {name:?}")
    }
}
