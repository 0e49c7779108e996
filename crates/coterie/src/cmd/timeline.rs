//! A live timeline of a cluster under test (`coterie run`, `coterie demo`):
//! what the driver did, and what the nodes and the witness saw, as it
//! happens. The nodes' own events come through their watch streams
//! (`coterie watch`), stamped by the nodes' clocks.

use super::common::NodeAddr;
use super::recording::Recording;
use super::watchers::{self, Watched};
use super::workload::Seen;
use coterie_core::Epoch;
use coterie_node::protocol::{unix_us, NodeEvent, WatchEvent};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// Whether `n` is 1, 10, 100, 1000, ...
fn power_of_ten(mut n: u64) -> bool {
    while n >= 10 && n.is_multiple_of(10) {
        n /= 10;
    }
    n == 1
}

/// One line of the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    /// Milliseconds since the timeline began.
    pub t_ms: f64,
    /// step | suspect | recover | join | follow | election | gone | back |
    /// stale_fence | overlap | lease_overlap | late_entry | unanswered | note
    pub kind: &'static str,
    /// The node it happened at, if one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// What happened, in words.
    pub event: String,
}

/// The timeline: printed as it grows unless quiet, kept for the report.
#[derive(Clone)]
pub struct Timeline {
    events: Arc<Mutex<Vec<Event>>>,
    started: Instant,
    started_unix_us: u64,
    quiet: bool,
}

impl Timeline {
    /// A timeline starting now; `quiet` keeps it off stdout.
    pub fn new(quiet: bool) -> Timeline {
        Timeline {
            events: Arc::default(),
            started: Instant::now(),
            started_unix_us: unix_us(),
            quiet,
        }
    }

    /// When the timeline began (µs since the Unix epoch): time 0 of its
    /// lines, and of the diagram of the same run.
    pub fn started_unix_us(&self) -> u64 {
        self.started_unix_us
    }

    /// Milliseconds since the timeline began.
    pub fn now_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1000.0
    }

    /// Adds a line for something that happens now.
    pub fn note(&self, kind: &'static str, node: Option<u32>, text: impl Into<String>) {
        self.push(Event { t_ms: self.now_ms(), kind, node, event: text.into() });
    }

    /// Where a node's `unix_us` stamp falls on the timeline, in ms.
    fn ms_of(&self, unix_us: u64) -> f64 {
        (unix_us as f64 - self.started_unix_us as f64) / 1000.0
    }

    /// Adds a line for something a node stamped at `unix_us`.
    fn note_at(&self, unix_us: u64, kind: &'static str, node: u32, text: String) {
        self.push(Event { t_ms: self.ms_of(unix_us), kind, node: Some(node), event: text });
    }

    fn push(&self, event: Event) {
        if !self.quiet {
            let who = event.node.map_or(String::new(), |n| format!("n{n}  "));
            let indent = if event.kind == "step" || event.kind == "note" { "" } else { "  " };
            println!("{:>9.1} ms  {indent}{who}{}", event.t_ms, event.event);
        }
        self.events.lock().expect("timeline lock").push(event);
    }

    /// Every line so far, in time order.
    pub fn events(&self) -> Vec<Event> {
        let mut events = self.events.lock().expect("timeline lock").clone();
        events.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        events
    }
}

/// The nodes the observer should not count on to agree: killed ones, and
/// stopped or cut-off ones.
#[derive(Clone, Debug, Default)]
pub struct Reach {
    /// Killed and not restarted.
    pub down: Vec<u32>,
    /// Stopped or cut off: running, but not to be counted on to agree.
    pub away: Vec<u32>,
}

impl Reach {
    /// The nodes down or away.
    pub fn excluded(&self) -> Vec<u32> {
        self.down.iter().chain(&self.away).copied().collect()
    }

    /// Whether node `id` is neither down nor away.
    pub fn includes(&self, id: u32) -> bool {
        !self.down.contains(&id) && !self.away.contains(&id)
    }
}

/// An election the observer saw end: every node in reach came to follow
/// the same new coordinator.
#[derive(Clone, Debug, Serialize)]
pub struct Election {
    /// When the last node in reach took the new coordinator.
    pub t_ms: f64,
    /// The new coordinator.
    pub leader: u32,
    /// Its epoch.
    pub epoch: String,
    /// From what set it off (see `cause`) to agreement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// The first suspicion of the old coordinator, else the first join or
    /// recovery, else the first suspicion since the previous agreement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// Every node in reach following one coordinator, as their event streams
/// tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Agreement {
    /// The coordinator.
    pub leader: u32,
    /// Its epoch.
    pub epoch: u64,
    /// When the last of them came to follow it, or was first seen to
    /// (µs since the Unix epoch, by that node's clock).
    pub unix_us: u64,
}

/// Watches a cluster's nodes and a workload's clients, writing what they
/// see into a timeline; see [`observe`].
pub struct Observer {
    reach: Arc<Mutex<Reach>>,
    agreement: watch::Receiver<Option<Agreement>>,
    elections: Arc<Mutex<Vec<Election>>>,
    edges: Arc<Mutex<Vec<(u64, u32, Edge)>>>,
    recording: Arc<Mutex<Option<Recording>>>,
    incidents: Arc<Mutex<Vec<(u64, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

/// An entry's two ends, as the nodes report them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Edge {
    Granted,
    Released,
}

impl Observer {
    /// Tells the observer which nodes are down or away now.
    pub fn set_reach(&self, reach: &Reach) {
        *self.reach.lock().expect("reach lock") = reach.clone();
    }

    /// Waits up to `limit` for every node in reach to have joined and to
    /// follow one coordinator at an epoch newer than `after`, and returns
    /// the first such agreement. Unlike asking the nodes' status, this
    /// costs them nothing: their streams are open already, and each
    /// reports its own change of coordinator once, stamped as it happens.
    pub async fn agreed_after(&self, after: u64, limit: Duration) -> Option<Agreement> {
        let mut rx = self.agreement.clone();
        let newer = |a: &Option<Agreement>| a.is_some_and(|a| a.epoch > after);
        let seen = tokio::time::timeout(limit, rx.wait_for(newer)).await.ok()?.ok()?;
        *seen
    }

    /// The elections seen so far.
    pub fn elections(&self) -> Vec<Election> {
        self.elections.lock().expect("elections lock").clone()
    }

    /// The first grant a node other than `except` stamped after
    /// `unix_us`: when (`unix_us`) and at which node.
    pub fn first_grant_after(&self, unix_us: u64, except: u32) -> Option<(u64, u32)> {
        let edges = self.edges.lock().expect("edges lock");
        let grants = edges
            .iter()
            .filter(|&&(at, node, edge)| edge == Edge::Granted && at > unix_us && node != except);
        grants.map(|&(at, node, _)| (at, node)).min()
    }

    /// Whether a client of `node` held the lock at `unix_us`: the last
    /// grant or release the node stamped before then was a grant.
    pub fn held_at(&self, node: u32, unix_us: u64) -> bool {
        let edges = self.edges.lock().expect("edges lock");
        let before = edges.iter().filter(|&&(at, n, _)| n == node && at <= unix_us);
        before.max_by_key(|&&(at, _, _)| at).is_some_and(|&(_, _, edge)| edge == Edge::Granted)
    }

    /// The run recorded so far, for its diagram, if it was asked to
    /// record ([`observe`]'s `record`), and what the witness caught in it
    /// (the first stale fence and overlap of each node: when in the run,
    /// µs, and in words); the recording ends here.
    pub fn recorded(&self) -> Option<(coterie_diagram::Run, Vec<(u64, String)>)> {
        let recording = self.recording.lock().expect("recording lock").take()?;
        let incidents = self.incidents.lock().expect("incidents lock");
        let incidents = incidents.iter().map(|(at, what)| (recording.time_of(*at), what.clone()));
        let incidents = incidents.collect();
        Some((recording.finish(), incidents))
    }

    /// Stops watching.
    pub fn stop(self) -> Vec<Election> {
        self.task.abort();
        self.elections()
    }
}

/// Starts watching `nodes` (and the workload's reports on `seen`), and
/// returns once every node's watch stream is open (or after five
/// seconds), so that nothing the caller does next goes unseen.
/// With `record` (a recording, and whether it takes heartbeats), every
/// message is recorded too, for the run's diagram ([`Observer::recorded`]).
pub async fn observe(
    nodes: &[NodeAddr],
    timeline: &Timeline,
    seen: Option<mpsc::UnboundedReceiver<Seen>>,
    record: Option<(Recording, bool)>,
) -> Observer {
    let (tx, rx) = mpsc::unbounded_channel();
    watchers::spawn(nodes, tx, record.as_ref().map(|(_, heartbeats)| *heartbeats));
    let recording = Arc::new(Mutex::new(record.map(|(r, _)| r)));
    let incidents = Arc::new(Mutex::new(Vec::new()));
    let (ready_tx, ready_rx) = oneshot::channel();
    let (agreement_tx, agreement) = watch::channel(None);
    let reach = Arc::new(Mutex::new(Reach::default()));
    let elections = Arc::new(Mutex::new(Vec::new()));
    let edges = Arc::new(Mutex::new(Vec::new()));
    let mut state = State {
        timeline: timeline.clone(),
        reach: reach.clone(),
        elections: elections.clone(),
        edges: edges.clone(),
        recording: recording.clone(),
        incidents: incidents.clone(),
        ids: nodes.iter().filter_map(|n| n.id).collect(),
        follows: BTreeMap::new(),
        agreement: agreement_tx,
        joined: BTreeSet::new(),
        gone: BTreeSet::new(),
        agreed: None,
        since: Vec::new(),
        seen: BTreeMap::new(),
        waiting_for: nodes.len(),
        ready: Some(ready_tx),
    };
    let task = tokio::spawn(async move {
        let mut rx = rx;
        let mut seen = seen;
        loop {
            tokio::select! {
                w = rx.recv() => match w {
                    Some(w) => state.on_watched(w),
                    None => return,
                },
                s = async { seen.as_mut()?.recv().await }, if seen.is_some() => match s {
                    Some(s) => state.on_seen(s),
                    None => seen = None,
                },
            }
        }
    });
    let _ = tokio::time::timeout(Duration::from_secs(5), ready_rx).await;
    Observer { reach, agreement, elections, edges, recording, incidents, task }
}

/// Something that may set off an election.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trigger {
    /// A node suspected this peer.
    Suspect(u32),
    /// A node joined (it restarted), or heard from a peer again.
    Back,
}

/// What the observer knows.
struct State {
    timeline: Timeline,
    reach: Arc<Mutex<Reach>>,
    elections: Arc<Mutex<Vec<Election>>>,
    /// Every grant and release the nodes reported: when (`unix_us`), at
    /// which node.
    edges: Arc<Mutex<Vec<(u64, u32, Edge)>>>,
    /// The run, message by message, when asked to record it.
    recording: Arc<Mutex<Option<Recording>>>,
    /// What the witness caught, the first of each kind per node: when
    /// (`unix_us`), in words.
    incidents: Arc<Mutex<Vec<(u64, String)>>>,
    /// The nodes watched.
    ids: BTreeSet<u32>,
    /// The coordinator and epoch each node follows.
    follows: BTreeMap<u32, (Option<u32>, u64)>,
    /// The last agreement of every node in reach, for
    /// [`Observer::agreed_after`].
    agreement: watch::Sender<Option<Agreement>>,
    /// Nodes that have joined the cluster (a joining node's peer-ups are
    /// its start, not news).
    joined: BTreeSet<u32>,
    /// Nodes whose stream ended and has not come back.
    gone: BTreeSet<u32>,
    /// The last coordinator every node in reach agreed on.
    agreed: Option<(u32, u64)>,
    /// What may have set off an election since that agreement: when, in
    /// words, and what kind of thing it was.
    since: Vec<(f64, String, Trigger)>,
    /// Witness refusals, overlaps and unanswered requests, by kind and node.
    seen: BTreeMap<(&'static str, u32), u64>,
    /// Nodes whose first snapshot has yet to come.
    waiting_for: usize,
    ready: Option<oneshot::Sender<()>>,
}

impl State {
    fn on_watched(&mut self, watched: Watched) {
        if let Some(recording) = self.recording.lock().expect("recording lock").as_mut() {
            recording.watched(&watched);
        }
        let e = match watched {
            Watched::Lost { node } => {
                if self.gone.insert(node) {
                    self.joined.remove(&node);
                    self.timeline.note("gone", Some(node), "is gone: its event stream ended");
                    self.publish_agreement(unix_us());
                }
                return;
            }
            Watched::Event(e) => e,
        };
        self.on_event(&e);
        if matches!(
            e.event,
            NodeEvent::Snapshot { .. } | NodeEvent::Joined { .. } | NodeEvent::Coordinator { .. }
        ) {
            self.publish_agreement(e.unix_us);
        }
    }

    fn on_event(&mut self, e: &WatchEvent) {
        let node = e.node;
        // What a stopped or cut-off node sees sets off no election among
        // the others.
        let in_reach = self.reach.lock().expect("reach lock").includes(node);
        let trigger = |me: &mut State, what: String, why: Trigger| {
            if in_reach {
                let at = me.timeline.ms_of(e.unix_us);
                me.since.push((at, what, why));
            }
        };
        let note = |me: &State, kind: &'static str, text: String| {
            me.timeline.note_at(e.unix_us, kind, node, text)
        };
        match &e.event {
            NodeEvent::Snapshot { coordinator, epoch, joined, .. } => {
                if *joined {
                    self.joined.insert(node);
                }
                self.follows.insert(node, (*coordinator, *epoch));
                if self.gone.remove(&node) {
                    note(self, "back", format!("is back, {}", watchers::describe(&e.event)));
                } else if self.waiting_for > 0 {
                    self.waiting_for -= 1;
                    if self.waiting_for == 0 {
                        self.start();
                    }
                }
            }
            NodeEvent::Joined { .. } => {
                self.joined.insert(node);
                trigger(self, format!("n{node} joined"), Trigger::Back);
                note(self, "join", watchers::describe(&e.event));
            }
            NodeEvent::PeerUp { .. } if !self.joined.contains(&node) => {}
            NodeEvent::PeerUp { peer } => {
                trigger(self, format!("n{node} heard from n{peer}"), Trigger::Back);
                note(self, "recover", watchers::describe(&e.event))
            }
            NodeEvent::PeerDown { peer } => {
                trigger(self, format!("n{node} suspected n{peer}"), Trigger::Suspect(*peer));
                note(self, "suspect", watchers::describe(&e.event));
            }
            NodeEvent::Coordinator { leader, epoch } => {
                self.follows.insert(node, (Some(*leader), *epoch));
                note(self, "follow", watchers::describe(&e.event));
                self.check_agreement(e.unix_us);
            }
            NodeEvent::Missed { .. } => note(self, "note", watchers::describe(&e.event)),
            NodeEvent::View(_) => note(self, "view", watchers::describe(&e.event)),
            NodeEvent::Quorum { .. } => note(self, "quorum", watchers::describe(&e.event)),
            // Grants are too many to list (they are kept, not written), and
            // faults are the driver's own steps, already on the timeline.
            NodeEvent::Granted { .. } => {
                self.edges.lock().expect("edges lock").push((e.unix_us, node, Edge::Granted));
            }
            NodeEvent::Released { .. } => {
                self.edges.lock().expect("edges lock").push((e.unix_us, node, Edge::Released));
            }
            NodeEvent::Fault(_) | NodeEvent::Sent { .. } | NodeEvent::Delivered { .. } => {}
        }
    }

    /// Every node has sent its snapshot: what they agree on now is the
    /// starting point, and the caller may go on.
    fn start(&mut self) {
        let mut views = self.follows.values();
        if let Some(&(Some(leader), epoch)) = views.next() {
            if views.all(|v| *v == (Some(leader), epoch)) {
                self.agreed = Some((leader, epoch));
            }
        }
        if let Some(ready) = self.ready.take() {
            let _ = ready.send(());
        }
    }

    /// Publishes what every node in reach has joined and follows, if they
    /// all do and it is news; `unix_us` is when the event that completed it
    /// happened. (Stricter than [`check_agreement`](Self::check_agreement),
    /// which narrates: a node not yet heard from counts against it.)
    fn publish_agreement(&mut self, unix_us: u64) {
        let Some(first) = self.common_term(true) else { return };
        let (leader, epoch) = first;
        self.agreement.send_if_modified(|last| {
            let news = last.is_none_or(|a| (a.leader, a.epoch) != first);
            if news {
                *last = Some(Agreement { leader, epoch, unix_us });
            }
            news
        });
    }

    /// The coordinator and epoch that every node in reach whose stream
    /// has not ended follows, if they all follow the same one. `strict`:
    /// every such node counts and must have joined; otherwise a node not
    /// yet heard from is left out (the narration's view).
    fn common_term(&self, strict: bool) -> Option<(u32, u64)> {
        let reach = self.reach.lock().expect("reach lock").clone();
        let counted = self.ids.iter().filter(|id| reach.includes(**id) && !self.gone.contains(id));
        let mut terms = counted.filter_map(|id| match self.follows.get(id) {
            Some(&(Some(leader), epoch)) if !strict || self.joined.contains(id) => {
                Some(Some((leader, epoch)))
            }
            None if !strict => None,
            _ => Some(None),
        });
        let first = terms.next()??;
        terms.all(|term| term == Some(first)).then_some(first)
    }

    /// Announces an election's end when every node in reach follows the
    /// same coordinator, and it is not the one announced last.
    fn check_agreement(&mut self, unix_us: u64) {
        let t_ms = self.timeline.ms_of(unix_us);
        let Some((leader, epoch)) = self.common_term(false) else { return };
        if self.agreed == Some((leader, epoch)) {
            return;
        }
        // The old coordinator's loss, else a node's return, else whatever
        // came first.
        let lost = self.agreed.map(|(old, _)| Trigger::Suspect(old));
        let first = |pick: &dyn Fn(Trigger) -> bool| {
            self.since.iter().filter(|(_, _, why)| pick(*why)).min_by(|a, b| a.0.total_cmp(&b.0))
        };
        let cause = first(&|why| Some(why) == lost)
            .or_else(|| first(&|why| why == Trigger::Back))
            .or_else(|| first(&|_| true));
        let (duration_ms, cause) = match cause {
            Some((at, what, _)) => (Some(t_ms - at), Some(what.clone())),
            None => (None, None),
        };
        self.agreed = Some((leader, epoch));
        self.since.clear();
        let after = match (duration_ms, &cause) {
            (Some(ms), Some(what)) => format!(", {ms:.1} ms after {what}"),
            _ => String::new(),
        };
        self.timeline.note_at(
            unix_us,
            "election",
            leader,
            format!("coordinates {} at every node in reach{after}", Epoch(epoch)),
        );
        self.elections.lock().expect("elections lock").push(Election {
            t_ms,
            leader,
            epoch: Epoch(epoch).to_string(),
            duration_ms,
            cause,
        });
    }

    fn on_seen(&mut self, seen: Seen) {
        // The first of each kind per node is told in full; after that, the
        // 10th, 100th, ...: a split brain refuses hundreds of grants.
        let (kind, node) = match seen {
            Seen::Stale { node, .. } => ("stale_fence", node),
            Seen::Overlap { node, .. } => ("overlap", node),
            Seen::LeaseOverlap { node, .. } => ("lease_overlap", node),
            Seen::LateEntry { node, .. } => ("late_entry", node),
            Seen::Unanswered { node } => ("unanswered", node),
        };
        let count = self.seen.entry((kind, node)).or_insert(0);
        *count += 1;
        let count = *count;
        if count == 1 && !matches!(kind, "unanswered" | "lease_overlap" | "late_entry") {
            let what = format!("n{node}: {}", kind.replace('_', " "));
            self.incidents.lock().expect("incidents lock").push((unix_us(), what));
        }
        if count > 1 {
            if power_of_ten(count) {
                let what = match kind {
                    "stale_fence" => "grants refused as stale",
                    "overlap" => "overlapping entries (VIOLATIONS)",
                    "lease_overlap" => "lease overlaps",
                    "late_entry" => "late entries",
                    _ => "requests unanswered",
                };
                self.timeline.note(kind, Some(node), format!("{count} of its {what} so far"));
            }
            return;
        }
        match seen {
            Seen::Stale { node, fence, last } => self.timeline.note(
                "stale_fence",
                Some(node),
                format!(
                    "witness refuses its grant: fence {fence} is not above {last} (a stale holder kept out)"
                ),
            ),
            Seen::Overlap { node, fence, holders } => self.timeline.note(
                "overlap",
                Some(node),
                format!(
                    "witness lets its holder in (fence {fence}) while others are inside: {holders} holders, a VIOLATION (unless each older one turns out lost with its node)"
                ),
            ),
            Seen::LeaseOverlap { node, fence, overlaps } => self.timeline.note(
                "lease_overlap",
                Some(node),
                format!(
                    "its holder (fence {fence}) leaves the witness lost with its node, after {overlaps} newer holder(s) came in: lease overlaps, not violations (the newer fences are higher)"
                ),
            ),
            Seen::LateEntry { node, fence } => self.timeline.note(
                "late_entry",
                Some(node),
                format!(
                    "its holder (fence {fence}), refused as stale, leaves the witness lost with its node: a late entry (its node granted and died; the next holder came in first), not a stale grant"
                ),
            ),
            Seen::Unanswered { node } => self.timeline.note(
                "unanswered",
                Some(node),
                "a request to it went unanswered".to_string(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An observer's state for nodes 1..=n, with no task behind it.
    fn state(n: u32) -> (State, watch::Receiver<Option<Agreement>>) {
        let (agreement, rx) = watch::channel(None);
        let state = State {
            timeline: Timeline::new(true),
            reach: Arc::default(),
            elections: Arc::default(),
            edges: Arc::default(),
            recording: Arc::default(),
            incidents: Arc::default(),
            ids: (1..=n).collect(),
            follows: BTreeMap::new(),
            agreement,
            joined: BTreeSet::new(),
            gone: BTreeSet::new(),
            agreed: None,
            since: Vec::new(),
            seen: BTreeMap::new(),
            waiting_for: n as usize,
            ready: None,
        };
        (state, rx)
    }

    fn event(node: u32, unix_us: u64, event: NodeEvent) -> Watched {
        Watched::Event(WatchEvent { node, unix_us, event })
    }

    fn snapshot(coordinator: Option<u32>, epoch: u64, joined: bool) -> NodeEvent {
        NodeEvent::Snapshot { coordinator, epoch, alive: vec![], joined, view: None, quorum: true }
    }

    fn seen(rx: &watch::Receiver<Option<Agreement>>) -> Option<(u32, u64, u64)> {
        rx.borrow().map(|a| (a.leader, a.epoch, a.unix_us))
    }

    #[test]
    fn agreement_waits_for_every_node_to_be_heard_from_and_joined() {
        let (mut s, rx) = state(3);
        s.on_watched(event(1, 10, snapshot(Some(3), 7, true)));
        s.on_watched(event(2, 11, snapshot(Some(3), 7, true)));
        // Node 3 has not been heard from: two of three is no agreement.
        assert_eq!(seen(&rx), None);
        s.on_watched(event(3, 12, snapshot(Some(3), 7, false)));
        assert_eq!(seen(&rx), None, "node 3 has not joined");
        s.on_watched(event(3, 20, NodeEvent::Joined { alive: vec![1, 2, 3] }));
        assert_eq!(seen(&rx), Some((3, 7, 20)), "stamped by the event that completed it");
    }

    #[test]
    fn after_a_kill_the_agreement_is_the_survivors_stamped_by_the_last_of_them() {
        let (mut s, rx) = state(3);
        for id in 1..=3 {
            s.on_watched(event(id, id as u64, snapshot(Some(3), 7, true)));
        }
        assert_eq!(seen(&rx), Some((3, 7, 3)));
        s.on_watched(Watched::Lost { node: 3 });
        *s.reach.lock().unwrap() = Reach { down: vec![3], away: vec![] };
        s.on_watched(event(1, 100, NodeEvent::Coordinator { leader: 2, epoch: 8 }));
        assert_eq!(seen(&rx).map(|a| a.1), Some(7), "node 2 still follows node 3");
        s.on_watched(event(2, 140, NodeEvent::Coordinator { leader: 2, epoch: 8 }));
        assert_eq!(seen(&rx), Some((2, 8, 140)));
        // The same term again is no news: its stamp stays the first one.
        s.on_watched(event(1, 150, NodeEvent::Coordinator { leader: 2, epoch: 8 }));
        assert_eq!(seen(&rx), Some((2, 8, 140)));
    }
}
