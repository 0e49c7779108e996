//! A real cluster's run, recorded from its nodes' event streams
//! ([`watchers::spawn`](super::watchers::spawn) with messages) for its
//! space-time diagram: each node reports the messages it sends and takes
//! in, numbered in their sessions, so a delivery is matched with its send
//! whichever stream reports first.
//!
//! Times are the nodes' clocks, from the first event seen. Nodes on one
//! host share a clock; across hosts a delivery stamped before its send
//! (the receiver's clock behind) is drawn just after the send instead, so
//! no arrow ever runs back in time.

use super::watchers::Watched;
use coterie_diagram::{Mark, MarkKind, Message, Run, Section};
use coterie_node::protocol::{unix_us, NodeEvent};
use std::collections::{BTreeMap, BTreeSet};

/// The run so far.
pub struct Recording {
    run: Run,
    /// The Unix time (µs) of the run's start.
    origin: Option<u64>,
    /// Messages sent and not yet seen delivered, by sender, receiver and
    /// number.
    in_flight: BTreeMap<(u32, u32, u64), usize>,
    /// Deliveries reported before their sends were.
    early: BTreeMap<(u32, u32, u64), u64>,
    holding: BTreeMap<u32, usize>,
    /// Nodes whose stream ended, not yet back.
    gone: BTreeSet<u32>,
}

impl Recording {
    /// A recording of a cluster of `nodes`, titled `title`, whose time 0
    /// is the first event it hears of.
    pub fn new(nodes: Vec<u32>, title: String) -> Recording {
        Recording::since(nodes, title, None)
    }

    /// The same with time 0 at `origin` (µs since the Unix epoch): a
    /// scenario's timeline and its diagram then tell the same times.
    pub fn since(nodes: Vec<u32>, title: String, origin: Option<u64>) -> Recording {
        Recording {
            run: Run { title, nodes, ..Run::default() },
            origin,
            in_flight: BTreeMap::new(),
            early: BTreeMap::new(),
            holding: BTreeMap::new(),
            gone: BTreeSet::new(),
        }
    }

    /// Where a Unix time (µs) falls in the run.
    pub fn time_of(&self, unix: u64) -> u64 {
        unix.saturating_sub(self.origin.unwrap_or(unix))
    }

    /// The run's time of a node's stamp.
    fn at(&mut self, unix: u64) -> u64 {
        let origin = *self.origin.get_or_insert(unix);
        let t = unix.saturating_sub(origin);
        self.run.end_us = self.run.end_us.max(t);
        t
    }

    fn mark(&mut self, at: u64, node: u32, kind: MarkKind, text: String) {
        self.run.marks.push(Mark { node: Some(node), at_us: at, until_us: None, kind, text });
    }

    /// Takes in what a watcher reported.
    pub fn watched(&mut self, watched: &Watched) {
        let e = match watched {
            Watched::Lost { node } => {
                if self.gone.insert(*node) {
                    let at = self.at(unix_us());
                    if let Some(i) = self.holding.remove(node) {
                        self.run.sections[i].exit_us = Some(at);
                    }
                    self.mark(at, *node, MarkKind::Crash, format!("n{node} is gone"));
                }
                return;
            }
            Watched::Event(e) => e,
        };
        let (node, at) = (e.node, self.at(e.unix_us));
        match &e.event {
            NodeEvent::Sent { to, seq, kind, text } => {
                let key = (node, *to, *seq);
                let delivered = self.early.remove(&key).map(|t| t.max(at + 1));
                self.run.messages.push(Message {
                    from: node,
                    to: *to,
                    sent_us: at,
                    delivered_us: delivered,
                    kind: kind.clone(),
                    text: text.clone(),
                    heartbeat: kind == "heartbeat",
                });
                if delivered.is_none() {
                    self.in_flight.insert(key, self.run.messages.len() - 1);
                }
            }
            NodeEvent::Delivered { from, seq } => {
                let key = (*from, node, *seq);
                match self.in_flight.remove(&key) {
                    Some(i) => {
                        let m = &mut self.run.messages[i];
                        m.delivered_us = Some(at.max(m.sent_us + 1));
                    }
                    None => {
                        self.early.insert(key, at);
                    }
                }
            }
            NodeEvent::Granted { fence, .. } => {
                self.run.sections.push(Section {
                    node,
                    fence: *fence,
                    enter_us: at,
                    exit_us: None,
                });
                self.holding.insert(node, self.run.sections.len() - 1);
            }
            NodeEvent::Released { .. } => {
                if let Some(i) = self.holding.remove(&node) {
                    self.run.sections[i].exit_us = Some(at);
                }
            }
            NodeEvent::PeerDown { peer } => {
                self.mark(at, node, MarkKind::Suspect, format!("n{node} suspects n{peer}"))
            }
            NodeEvent::Coordinator { leader, epoch } => {
                let epoch = coterie_core::Epoch(*epoch);
                self.mark(
                    at,
                    node,
                    MarkKind::Coordinator,
                    format!("n{node} follows n{leader} ({epoch})"),
                )
            }
            NodeEvent::Snapshot { .. } if self.gone.remove(&node) => {
                self.mark(at, node, MarkKind::Restart, format!("n{node} is back"))
            }
            NodeEvent::Fault(state) => {
                self.mark(at, node, MarkKind::Degraded, format!("n{node} faults now: {state}"))
            }
            NodeEvent::Quorum { held: false } => self.mark(
                at,
                node,
                MarkKind::Degraded,
                format!("n{node} lost a majority's lease: grants nothing"),
            ),
            NodeEvent::Snapshot { .. }
            | NodeEvent::View(_)
            | NodeEvent::Quorum { .. }
            | NodeEvent::Joined { .. }
            | NodeEvent::PeerUp { .. }
            | NodeEvent::Missed { .. } => {}
        }
    }

    /// The run as recorded.
    pub fn finish(self) -> Run {
        self.run
    }

    /// The run so far, the recording going on.
    pub fn snapshot(&self) -> Run {
        self.run.clone()
    }
}

/// For each thing the witness caught (`incidents`: when in the run, µs,
/// and in words), the diagram of the moments around it (a busy cluster
/// sends thousands of messages a second: more would be a smudge), the
/// moment itself marked, written to `dir`: `incident-1.svg`, ... Says
/// where on standard error; returns the paths.
pub fn write_incidents(
    run: &coterie_diagram::Run,
    incidents: &[(u64, String)],
    dir: &std::path::Path,
) -> anyhow::Result<Vec<String>> {
    const AROUND: u64 = 150_000;
    let mut paths = Vec::new();
    for (i, (at, what)) in incidents.iter().enumerate() {
        let options = coterie_diagram::svg::Options {
            heartbeats: false,
            from_us: Some(at.saturating_sub(AROUND)),
            until_us: Some(at + AROUND),
        };
        let mut framed = run.clone();
        let when = *at as f64 / 1000.0;
        framed.title = format!("{} — the witness caught {what} at {when:.1} ms", run.title);
        framed.marks.push(Mark {
            node: None,
            at_us: *at,
            until_us: None,
            kind: MarkKind::Violation,
            text: format!("witness: {what}"),
        });
        let path = dir.join(format!("incident-{}.svg", i + 1));
        std::fs::write(&path, coterie_diagram::svg::render(&framed, &options))?;
        eprintln!("diagram of {what} at {:.1} ms: {}", *at as f64 / 1000.0, path.display());
        paths.push(path.display().to_string());
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use coterie_node::protocol::WatchEvent;

    fn event(node: u32, unix_us: u64, event: NodeEvent) -> Watched {
        Watched::Event(WatchEvent { node, unix_us, event })
    }

    #[test]
    fn deliveries_meet_their_sends_in_either_order_and_never_before_them() {
        let mut r = Recording::new(vec![1, 2], "test".into());
        let sent =
            |to, seq| NodeEvent::Sent { to, seq, kind: "request".into(), text: "Request".into() };
        r.watched(&event(1, 1_000, sent(2, 1)));
        r.watched(&event(2, 1_500, NodeEvent::Delivered { from: 1, seq: 1 }));
        // Reported the other way round, and stamped early (clock skew).
        r.watched(&event(1, 1_800, NodeEvent::Delivered { from: 2, seq: 1 }));
        r.watched(&event(2, 2_000, sent(1, 1)));
        r.watched(&event(2, 2_100, sent(1, 2))); // never delivered
        let run = r.finish();
        let got: Vec<(u64, Option<u64>)> =
            run.messages.iter().map(|m| (m.sent_us, m.delivered_us)).collect();
        assert_eq!(got, [(0, Some(500)), (1000, Some(1001)), (1100, None)]);
    }
}
