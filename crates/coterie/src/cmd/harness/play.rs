//! The engine that plays a [`Scenario`] against a cluster: agreement at
//! the start, the workload under the witness, each step at its time, the
//! elections they cause timed, the expectations checked, and the run
//! recorded for its diagram.

use super::scenario::Scenario;
use super::step::{Action, Target};
use super::Cluster;
use crate::cmd::common::Drawing;
use crate::cmd::recording::{write_incidents, Recording};
use crate::cmd::timeline::{self, Observer, Reach, Timeline};
use crate::cmd::workload;
use anyhow::{Context, Result};
use coterie_core::Epoch;
use coterie_node::protocol::unix_us;
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};

/// The largest cluster whose runs are recorded, message by message, for
/// the diagrams of what the witness catches without a diagram asked for.
/// Above it a diagram has more lines than a page shows, and recording
/// has every node describe every message to the driver: at 128 nodes on
/// two cores, enough work that the coordinator's watcher fell thousands of
/// events behind and its peers suspected it.
pub const RECORDED_UNASKED: usize = 32;

/// An agreement on a coordinator the driver waited for and timed.
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    /// The step it followed (1 is the first); none for the cluster's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
    /// What set it off, in words.
    pub cause: String,
    pub coordinator: u32,
    pub epoch: u64,
    pub round: u64,
    /// From the step taking effect (the launch, for the start) to every
    /// node in reach following the new coordinator.
    pub duration_ms: f64,
}

/// What playing a scenario found.
pub struct Played {
    pub workload: workload::Report,
    /// The agreements the driver timed: at the start, then after each step
    /// that took the coordinator away or asked to settle.
    pub measured: Vec<Measured>,
    /// Every election the nodes' event streams showed, with its cause.
    pub seen: Vec<timeline::Election>,
    /// The expectations that failed, in words.
    pub failed: Vec<String>,
    /// A diagram of the second around each thing the witness caught.
    pub incident_diagrams: Vec<String>,
}

/// Which nodes are out of reach, and why (a heal brings back only what a
/// fault took away, not a stopped process).
#[derive(Default)]
struct Standing {
    killed: Vec<u32>,
    stopped: Vec<u32>,
    paused: Vec<u32>,
    partitioned: Vec<u32>,
}

impl Standing {
    fn after(&mut self, action: &Action, id: Option<u32>) {
        let Some(id) = id else {
            if *action == Action::Heal {
                self.paused.clear();
                self.partitioned.clear();
            }
            return;
        };
        let (list, add) = match action {
            Action::Kill => (&mut self.killed, true),
            Action::Restart => (&mut self.killed, false),
            Action::Stop => (&mut self.stopped, true),
            Action::Resume => (&mut self.stopped, false),
            Action::Pause => (&mut self.paused, true),
            Action::Unpause => (&mut self.paused, false),
            Action::Partition { .. } => (&mut self.partitioned, true),
            Action::Heal => {
                self.paused.retain(|&n| n != id);
                (&mut self.partitioned, false)
            }
            Action::Delay { .. } | Action::Drop { .. } | Action::Reset { .. } => return,
        };
        list.retain(|&n| n != id);
        if add {
            list.push(id);
        }
    }

    fn reach(&self) -> Reach {
        let away = [&self.stopped, &self.paused, &self.partitioned];
        Reach { down: self.killed.clone(), away: away.into_iter().flatten().copied().collect() }
    }
}

/// Waits up to `limit` for every node in `reach` to have joined and to
/// follow one coordinator at an epoch newer than `after`, and returns it
/// with the moment the last of them took it (µs since the Unix epoch).
///
/// The observer's event streams tell it, each node stamping its own change
/// of coordinator; a round of status asks confirms it. The nodes are also
/// asked every half second meanwhile, in case a stream lost the change:
/// an agreement only the asks found is timed by the ask that found it.
/// Asking costs each node a connection and a handshake, and on 128 nodes
/// and two cores, asking all of them every few milliseconds (as the driver
/// once did) loads the very processes whose election is timed.
async fn agreement(
    cluster: &Cluster,
    observer: &Observer,
    reach: &Reach,
    after: Epoch,
    limit: Duration,
) -> Result<(u32, Epoch, u64)> {
    let deadline = Instant::now() + limit;
    // An agreement the asks did not confirm (the nodes moved on, or one
    // did not answer) is not waited for again.
    let mut refused = after.0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let seen = observer.agreed_after(refused, left.min(ASK_EVERY)).await;
        let asked = cluster.settled_now(reach, after).await;
        match (seen, asked) {
            (Some(seen), Some(term)) if (seen.leader, Epoch(seen.epoch)) == term => {
                return Ok((term.0, term.1, seen.unix_us));
            }
            (_, Some((leader, epoch))) => return Ok((leader, epoch, unix_us())),
            (Some(seen), None) => refused = seen.epoch,
            (None, None) => {}
        }
        if Instant::now() >= deadline {
            // One more round of asks, which says who is behind.
            let (leader, epoch, _) = cluster.agree_at(reach, after, Duration::ZERO).await?;
            return Ok((leader, epoch, unix_us()));
        }
    }
}

/// How often [`agreement`] asks the nodes while it waits for their streams.
const ASK_EVERY: Duration = Duration::from_millis(500);

/// Plays `s` against `cluster`, whose witness listens at `witness`; the
/// timeline narrates, `drawing` says what to draw, incident diagrams go
/// into `dir`.
pub async fn play(
    s: &Scenario,
    cluster: &mut Cluster,
    witness: &str,
    timeline: &Timeline,
    drawing: &Drawing,
    dir: &Path,
) -> Result<Played> {
    let boot = unix_us();
    let everyone = Reach::default();
    // Its own quiet observer, without the messages: the run's timeline and
    // diagram begin once the cluster is up.
    let starting = timeline::observe(cluster.nodes(), &Timeline::new(true), None, None).await;
    let agreed = agreement(cluster, &starting, &everyone, Epoch(0), Duration::from_secs(30)).await;
    starting.stop();
    let (leader, epoch, at) = agreed?;
    let mut measured = vec![Measured {
        step: None,
        cause: "cluster start".into(),
        coordinator: leader,
        epoch: epoch.0,
        round: epoch.round(),
        duration_ms: at.saturating_sub(boot) as f64 / 1000.0,
    }];
    let (seen_tx, seen_rx) = tokio::sync::mpsc::unbounded_channel();
    // Recorded whether drawn or not, so that whatever the witness catches
    // is drawn; but not unasked on a cluster too large to draw legibly,
    // whose every node would describe every message it sends and takes
    // in to the driver.
    let ids: Vec<u32> = cluster.nodes().iter().filter_map(|n| n.id).collect();
    let title = format!("{}: {} + {}", s.name, s.cluster.mutex, s.cluster.election);
    let origin = Some(timeline.started_unix_us());
    let record = (drawing.wanted() || ids.len() <= RECORDED_UNASKED)
        .then(|| (Recording::since(ids, title, origin), drawing.heartbeats));
    let observer = timeline::observe(cluster.nodes(), timeline, Some(seen_rx), record).await;
    let note = |text: String| timeline.note("note", None, text);
    note(format!("cluster up: every node follows n{leader} ({epoch})"));
    let w = &s.workload;
    let clients_on: Vec<_> = cluster
        .nodes()
        .iter()
        .filter(|n| w.on.is_empty() || n.id.is_some_and(|id| w.on.contains(&id)))
        .cloned()
        .collect();
    let start = Instant::now();
    let spec = workload::Spec {
        http: None,
        no_chain: false,
        nodes: clients_on,
        clients: w.clients,
        choice: workload::Choice { names: w.names, ..Default::default() },
        requests: u64::MAX,
        hold: w.hold,
        think: w.think,
        witness: Some(witness.to_string()),
        // Docker commands take seconds each: under compose, the workload
        // runs on long enough to see what follows every step.
        deadline: Some(start + w.duration + cluster.step_overhead() * s.steps.len() as u32),
        progress: false,
        answer_within: w.answer_within,
        events: Some(seen_tx),
    };
    let driver = tokio::spawn(workload::drive(spec));
    note(format!("workload starts: {} client(s) per node for {:?}", w.clients, w.duration));

    let mut standing = Standing::default();
    let mut failed = Vec::new();
    let mut entries_at_last_step = 0;
    let mut previous = None;
    // Kills and stops, for the lock delay: which step, when, of whom.
    let mut losses = Vec::new();
    for (i, timed) in s.steps.iter().enumerate() {
        tokio::time::sleep_until((start + timed.at).into()).await;
        let reach = standing.reach();
        let (coordinator, epoch) = cluster.current(&reach).await;
        let step = &timed.step;
        let id = match step.node {
            None => None,
            Some(target) => match cluster.resolve(target, &reach, previous).await {
                Some(id) => Some(id),
                None => {
                    failed.push(format!("step {}: no node was {target}", i + 1));
                    continue;
                }
            },
        };
        previous = id.or(previous);
        let took_coordinator = id.is_some() && id == coordinator && step.action.takes_away();
        // On the timeline from the moment it is taken: what it causes may
        // come before the command returns.
        let what = step.action.describe(id);
        let role = match step.node {
            Some(role @ (Target::Coordinator | Target::Holder | Target::Waiter)) => {
                format!(", {role}")
            }
            _ => String::new(),
        };
        timeline.note("step", None, format!("step {}: {what}{role}", i + 1));
        let sent = unix_us();
        cluster.apply(&step.action, id).await.with_context(|| format!("step {}: {what}", i + 1))?;
        if let (true, Some(id)) = (step.action.loses_holder(), id) {
            // Held once the node is gone (until then its client may
            // release, and another node's grant is no loss of anything);
            // the delay counts from the signal, which no node can notice
            // before it is sent.
            losses.push((i + 1, sent, unix_us(), id));
        }
        standing.after(&step.action, id);
        observer.set_reach(&standing.reach());
        // From the moment the step took effect: a signal to a local
        // process, when it was sent (the nodes may have noticed the loss
        // and elected before the driver has reaped the process); a docker
        // command, when it returned (it does once it has acted).
        let t0 = if cluster.step_overhead().is_zero() { sent } else { unix_us() };
        if took_coordinator || timed.settle {
            // The observer narrates the election; this times it from the
            // step, for the expectation.
            let limit = s.expect.election_within.unwrap_or(Duration::from_secs(10));
            match agreement(cluster, &observer, &standing.reach(), epoch, limit).await {
                Ok((leader, epoch, at)) => {
                    // Agreed before a docker command returned: timed from
                    // the command instead, an upper bound (not 0).
                    let from = if at < t0 { sent } else { t0 };
                    let ms = at.saturating_sub(from) as f64 / 1000.0;
                    note(format!(
                        "step {}: every node in reach follows n{leader} ({epoch}), {ms:.1} ms after it",
                        i + 1
                    ));
                    measured.push(Measured {
                        step: Some(i + 1),
                        cause: what,
                        coordinator: leader,
                        epoch: epoch.0,
                        round: epoch.round(),
                        duration_ms: ms,
                    });
                }
                Err(e) => {
                    note(format!("step {}: {e}", i + 1));
                    failed.push(format!("step {}: {e}", i + 1))
                }
            }
        }
        if i + 1 == s.steps.len() {
            entries_at_last_step = cluster.total_entries(&standing.reach()).await;
        }
    }
    let report = driver.await.context("the workload task failed")??;
    note(format!("workload done: {} entries", report.entries));
    let reach = standing.reach();
    if s.expect.progress_after_last_step
        && !s.steps.is_empty()
        && cluster.total_entries(&reach).await <= entries_at_last_step
    {
        failed.push("no entry was granted after the last step".into());
    }
    if let Some(want) = s.expect.final_coordinator {
        match cluster.agree(&reach, Epoch(0), Duration::from_secs(10)).await {
            Ok((leader, e)) if leader == want => {
                note(format!("at the end every node follows n{leader} ({e})"))
            }
            Ok((leader, e)) => {
                failed.push(format!("at the end n{leader} coordinates ({e}), expected n{want}"))
            }
            Err(e) => failed.push(format!("at the end: {e}")),
        }
    }
    // Let the last events of the nodes' streams arrive.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut incident_diagrams = Vec::new();
    if let Some((run, incidents)) = observer.recorded() {
        if drawing.wanted() {
            drawing.write(&run)?;
        }
        incident_diagrams = write_incidents(&run, &incidents, dir)?;
    }
    if let Some(quiet) = s.expect.no_entry_within {
        for (step, at, gone, target) in losses {
            // The nodes stamp their grants with the same host clock.
            if !observer.held_at(target, gone) {
                // Its client released between the look and the step.
                note(format!(
                    "step {step}: n{target} held nothing when it went: no lock delay to keep"
                ));
                continue;
            }
            let Some((granted, node)) = observer.first_grant_after(at, target) else {
                failed.push(format!("step {step}: no entry was granted after it"));
                continue;
            };
            let gap = Duration::from_micros(granted - at);
            note(format!(
                "step {step}: the first entry after it was granted {gap:.1?} later, at n{node}"
            ));
            if gap < quiet {
                failed.push(format!(
                    "step {step}: an entry was granted {gap:.1?} after it, within {quiet:?}"
                ));
            }
        }
    }
    failed.extend(s.expect.judge(&report, w.answer_within));
    Ok(Played { workload: report, measured, seen: observer.stop(), failed, incident_diagrams })
}
