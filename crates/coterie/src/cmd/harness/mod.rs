//! The one harness every command that launches or steers a cluster under
//! test goes through (`demo`, `run`, `bench --real`, `up`, `dashboard`):
//! start the processes, carry out a [`Step`] on them, ask the nodes where
//! they stand, wait for agreement on a coordinator, and play a scenario
//! against them.

mod compose;
mod local;
pub mod play;
mod process;
pub mod scenario;
pub mod step;

pub use compose::Compose;
pub use local::{LocalCluster, Placement, Shape};
pub use process::{die_with_parent, Process, Signal};
pub use step::{Action, Step, Target};

use super::common::NodeAddr;
use super::timeline::Reach;
use anyhow::{bail, Context, Result};
use coterie_core::{CsState, Epoch, Status};
use std::time::{Duration, Instant};

/// A cluster under test.
pub enum Cluster {
    /// Processes this command started.
    Local(LocalCluster),
    /// A docker compose project someone else started.
    Compose(Compose),
}

/// The status of each of `nodes`, asked all at once: asked one after
/// another, 64 nodes on a busy machine took a hundred milliseconds a round,
/// and an election was timed by that.
async fn views_of<'a>(
    nodes: impl Iterator<Item = &'a NodeAddr>,
) -> Vec<(u32, Result<Status, String>)> {
    futures_util::future::join_all(nodes.map(ask)).await
}

/// `node`'s id and its status.
async fn ask(node: &NodeAddr) -> (u32, Result<Status, String>) {
    (node.id.unwrap_or_default(), super::status::fetch(node).await)
}

impl Cluster {
    /// The nodes' client addresses, in id order.
    pub fn nodes(&self) -> &[NodeAddr] {
        match self {
            Cluster::Local(c) => c.nodes(),
            Cluster::Compose(c) => c.nodes(),
        }
    }

    /// How long a step may take to carry out (a docker command takes
    /// seconds).
    pub fn step_overhead(&self) -> Duration {
        match self {
            Cluster::Local(_) => Duration::ZERO,
            Cluster::Compose(_) => Duration::from_secs(5),
        }
    }

    /// The status of every running node but those in `skip` (a dead
    /// container's address would only time out).
    pub async fn views(&self, skip: &[u32]) -> Vec<(u32, Result<Status, String>)> {
        views_of(self.asked(skip)).await
    }

    /// The nodes worth asking, but those in `skip`: a node whose process
    /// this command stopped is not.
    fn asked<'a>(&'a self, skip: &'a [u32]) -> Box<dyn Iterator<Item = &'a NodeAddr> + 'a> {
        match self {
            Cluster::Local(c) => Box::new(c.running_but(skip)),
            Cluster::Compose(c) => {
                Box::new(c.nodes().iter().filter(|n| !skip.contains(&n.id.unwrap_or_default())))
            }
        }
    }

    /// Carries out `action` on node `id` (on every node: a heal without
    /// one); returns what the node says of its faults, for a fault.
    pub async fn apply(&mut self, action: &Action, id: Option<u32>) -> Result<String> {
        if !action.on_process() {
            return fault(self.nodes(), action, id).await;
        }
        let id = id.context("a process step needs a node")?;
        match self {
            Cluster::Local(c) => match action {
                Action::Kill => c.kill(id).await?,
                Action::Restart => c.start(id)?,
                Action::Stop => c.signal(id, Signal::Stop)?,
                _ => c.signal(id, Signal::Continue)?,
            },
            Cluster::Compose(c) => {
                let verb = match action {
                    Action::Kill => "kill",
                    Action::Restart => "start",
                    Action::Stop => "pause",
                    _ => "unpause",
                };
                c.node_command(verb, id)?
            }
        }
        Ok(String::new())
    }

    /// The status of every node in reach (a stopped node is not asked: it
    /// would answer only when its client gave up).
    pub async fn in_reach(&self, reach: &Reach) -> Vec<(u32, Result<Status, String>)> {
        let out = reach.excluded();
        self.views(&out).await
    }

    /// The coordinator the first node in reach to answer follows now.
    pub async fn current(&self, reach: &Reach) -> (Option<u32>, Epoch) {
        let answer = self.first_answer(reach, |_, s| Some((s.coordinator, Epoch(s.epoch))));
        answer.await.unwrap_or((None, Epoch(0)))
    }

    /// What `pick` makes of the first answer it makes something of, the
    /// nodes in reach asked all at once. (The first to answer, not the
    /// first by id: on a busy machine one slow node held every step up by
    /// its two seconds' timeout.)
    async fn first_answer<T>(
        &self,
        reach: &Reach,
        pick: impl Fn(u32, Status) -> Option<T>,
    ) -> Option<T> {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let out = reach.excluded();
        let mut asks: FuturesUnordered<_> = self.asked(&out).map(ask).collect();
        while let Some((id, answer)) = asks.next().await {
            if let Some(found) = answer.ok().and_then(|s| pick(id, s)) {
                return Some(found);
            }
        }
        None
    }

    /// The node `target` names now, among those in reach; `previous` is
    /// the node the step before acted on. A holder or a waiter is sampled
    /// for up to a second (a busy cluster has one within milliseconds),
    /// the first node found in that state taken.
    pub async fn resolve(
        &self,
        target: Target,
        reach: &Reach,
        previous: Option<u32>,
    ) -> Option<u32> {
        let want = match target {
            Target::Node(id) => return Some(id),
            Target::Previous => return previous,
            Target::Coordinator => return self.current(reach).await.0,
            Target::Holder => CsState::Held,
            Target::Waiter => CsState::Wanting,
        };
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            let found = self.first_answer(reach, |id, s| (s.cs_state == want).then_some(id));
            if let Some(id) = found.await {
                return Some(id);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        None
    }

    /// Waits until every node in reach has joined and follows the same
    /// coordinator at an epoch newer than `after`; returns it.
    pub async fn agree(
        &self,
        reach: &Reach,
        after: Epoch,
        limit: Duration,
    ) -> Result<(u32, Epoch)> {
        self.agree_at(reach, after, limit).await.map(|(leader, epoch, _)| (leader, epoch))
    }

    /// [`agree`](Self::agree), with the moment the last node was seen to
    /// follow the agreed term.
    ///
    /// The first round asks every node in reach; the next ones only those
    /// not yet seen following the newest term any node follows, and once
    /// all are, one more round asks everyone again, in case one moved on
    /// meanwhile. Asking all of them every round would be a connection and
    /// a handshake to every node every few milliseconds: on 128 nodes and
    /// two cores, load on the very processes whose election is timed.
    pub async fn agree_at(
        &self,
        reach: &Reach,
        after: Epoch,
        limit: Duration,
    ) -> Result<(u32, Epoch, Instant)> {
        let start = Instant::now();
        let away = reach.excluded();
        let mut views = self.in_reach(reach).await;
        let mut seen_at = Instant::now();
        loop {
            if let Some(agreed) = settled(&views, after) {
                let again = self.in_reach(reach).await;
                if settled(&again, after) == Some(agreed) {
                    return Ok((agreed.0, agreed.1, seen_at));
                }
                views = again;
                seen_at = Instant::now();
                continue;
            }
            if start.elapsed() > limit {
                let seen: Vec<String> = views
                    .iter()
                    .map(|(id, v)| match v {
                        Ok(s) => {
                            format!("n{id} follows {:?} at {}", s.coordinator, Epoch(s.epoch))
                        }
                        Err(e) => format!("n{id}: {e}"),
                    })
                    .collect();
                bail!("no agreement on a new coordinator within {limit:?}: {}", seen.join("; "));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            let behind = behind_newest(&views, after);
            let current = views.iter().map(|(id, _)| *id).filter(|id| !behind.contains(id));
            let skip: Vec<u32> = current.chain(away.iter().copied()).collect();
            for (id, fresh) in self.views(&skip).await {
                if let Some(slot) = views.iter_mut().find(|(i, _)| *i == id) {
                    slot.1 = fresh;
                }
            }
            seen_at = Instant::now();
        }
    }

    /// The coordinator and epoch every node in reach follows now, if they
    /// all answer, have joined, and agree on one newer than `after`.
    pub async fn settled_now(&self, reach: &Reach, after: Epoch) -> Option<(u32, Epoch)> {
        settled(&self.in_reach(reach).await, after)
    }

    /// Entries granted so far, over the nodes in reach that answer.
    pub async fn total_entries(&self, reach: &Reach) -> u64 {
        let views = self.in_reach(reach).await;
        views.into_iter().filter_map(|(_, v)| v.ok()).map(|s| s.cs_entries).sum()
    }

    /// Stops the processes this command started (a compose project is
    /// left running: it is someone else's).
    pub async fn stop_all(&mut self) {
        if let Cluster::Local(c) = self {
            c.stop_all().await;
        }
    }
}

/// The nodes of `views` that have not joined, did not answer, follow no
/// coordinator (as during an election), or follow anything but the newest
/// term any of them follows, or one no newer than `after`.
fn behind_newest(views: &[(u32, Result<Status, String>)], after: Epoch) -> Vec<u32> {
    let term = |s: &Status| (s.epoch, s.coordinator);
    let newest = views.iter().filter_map(|(_, v)| v.as_ref().ok()).map(term).max();
    let current = |v: &Result<Status, String>| {
        v.as_ref().is_ok_and(|s| {
            s.joined && s.coordinator.is_some() && Some(term(s)) == newest && Epoch(s.epoch) > after
        })
    };
    views.iter().filter(|(_, v)| !current(v)).map(|(id, _)| *id).collect()
}

/// The coordinator and epoch every node of `views` follows, once all have
/// joined, answer, and agree on an epoch newer than `after`.
fn settled(views: &[(u32, Result<Status, String>)], after: Epoch) -> Option<(u32, Epoch)> {
    if !behind_newest(views, after).is_empty() {
        return None;
    }
    let first = views.first()?.1.as_ref().ok()?;
    Some((first.coordinator?, Epoch(first.epoch)))
}

/// Sends the agent fault `action` to node `id`'s client port (every
/// node's, for a heal without one, where errors are skipped); returns the
/// faults now in force there. A repeated reset goes on in the background.
pub async fn fault(nodes: &[NodeAddr], action: &Action, id: Option<u32>) -> Result<String> {
    let command = action.fault_command().context("not a fault of the agent")?;
    let Some(id) = id else {
        for node in nodes {
            if let Ok(mut client) = node.connect().await {
                let _ = client.fault(command.clone()).await;
            }
        }
        return Ok("healed".into());
    };
    let node = nodes.iter().find(|n| n.id == Some(id)).with_context(|| format!("no node {id}"))?;
    if let Action::Reset { repeat: Some(r), .. } = action {
        tokio::spawn(repeat_fault(node.clone(), command, r.every, r.lasting));
        return Ok(format!("resetting every {:?}", r.every));
    }
    let state = node.connect().await?.fault(command).await?;
    Ok(state.to_string())
}

/// Sends `command` to `node` every `every` for `lasting`.
async fn repeat_fault(
    node: NodeAddr,
    command: coterie_node::protocol::FaultCommand,
    every: Duration,
    lasting: Duration,
) {
    let end = Instant::now() + lasting;
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
    while Instant::now() < end {
        tick.tick().await;
        if let Ok(mut client) = node.connect().await {
            let _ = client.fault(command.clone()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: u32, joined: bool, term: Option<(u64, u32)>) -> (u32, Result<Status, String>) {
        let (epoch, coordinator) = term.map_or((0, None), |(e, c)| (e, Some(c)));
        let status = serde_json::from_value(serde_json::json!({
            "id": id, "mutex": "centralized", "election": "bully",
            "coordinator": coordinator, "epoch": epoch, "cs_state": "idle", "alive": [id],
            "cs_entries": 0, "fence": null, "joined": joined,
            "messages_sent": {}, "messages_received": {}, "mutex_messages_sent": 0,
        }))
        .expect("a status");
        (id, Ok(status))
    }

    #[test]
    fn only_the_nodes_behind_the_newest_term_are_asked_again() {
        let views = vec![
            view(1, true, Some((7, 3))),
            view(2, true, Some((5, 4))),
            view(3, false, Some((7, 3))),
            (4, Err("no answer within 2s".into())),
            view(5, true, Some((7, 3))),
        ];
        assert_eq!(behind_newest(&views, Epoch(5)), vec![2, 3, 4]);
        assert_eq!(settled(&views, Epoch(5)), None);
    }

    #[test]
    fn agreement_on_a_term_no_newer_than_the_last_leaves_everyone_behind() {
        // Every node still follows the coordinator just killed: all of them
        // are asked again, or the wait would never see the next term.
        let views = vec![view(1, true, Some((7, 3))), view(2, true, Some((7, 3)))];
        assert_eq!(behind_newest(&views, Epoch(7)), vec![1, 2]);
        assert_eq!(settled(&views, Epoch(7)), None);
        assert_eq!(settled(&views, Epoch(6)), Some((3, Epoch(7))));
    }

    #[test]
    fn nodes_that_follow_no_coordinator_yet_are_asked_again() {
        // In an election's midst a node may know the term and no leader.
        let views = vec![view(1, true, Some((7, 3))), view(2, true, None), view(3, true, None)];
        let mut leaderless = views.clone();
        if let Ok(s) = &mut leaderless[0].1 {
            s.coordinator = None;
        }
        assert_eq!(behind_newest(&leaderless, Epoch(0)), vec![1, 2, 3]);
        assert_eq!(behind_newest(&views, Epoch(0)), vec![2, 3]);
    }
}
