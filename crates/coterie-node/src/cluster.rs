//! The application's view of the whole cluster: who holds and who waits
//! for each lock at every node (`coterie locks`), the leaders of the
//! applications' elections (`coterie elect`, `coterie leader`), and
//! requests to a lock's holders to let go (`coterie revoke`).
//!
//! The algorithms know which *node* holds a lock; which of its clients,
//! since when and with what value only that node knows. So a listing asks
//! every peer counted up for its part ([`Talk::Ask`]) over the peer
//! sessions, as application messages that travel in order with the
//! engine's own ([`Envelope::Application`](coterie_core::wire::Envelope)),
//! waits for the answers ([`Talk::Tell`]) for at most a failure timeout,
//! and merges them with its own part; a peer that does not answer is
//! named in the answer, not guessed at. A revocation (`coterie revoke`)
//! travels the same way ([`Talk::Revoke`]): each node asks its own
//! holders of the name to let go, and answers how many it asked.
//!
//! An election is a lock whose holder gave a value: the holder is the
//! leader. Its node tells every peer when a leader takes over or lets go
//! ([`Talk::Leader`]), and each node tells its observers. Announcements
//! from different nodes may cross on the way; fences order them (a new
//! leader's is higher, and a leader's end names the fence it ends), so an
//! observer sees each change once and in order. A leader whose node is
//! suspected is gone as far as this node can tell, and its observers are
//! told so at once.
//!
//! News goes to every member, not only to the peers counted up: the peer
//! sessions keep it for a peer that is suspected but alive (hung, or cut
//! off) and deliver it when it is back, so its observers catch up on
//! every change it missed. What a session cannot keep (the peer
//! restarted, or its session overflowed) is made good when the peer is
//! counted up again: each node then tells it the leaderships its own
//! clients hold, and a leadership presumed gone with its node's
//! suspicion is back.

use crate::agent::Agent;
use crate::effects::Notice;
use crate::locks::{LocalLock, Locks};
use crate::protocol::{HolderInfo, Leader, LeaderReport, LockInfo, WaitOrder, WaiterInfo};
use crate::shutdown::Shutdown;
use crate::throttle::Throttle;
use crate::view::LockView;
use coterie_core::{CsState, Name, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::warn;

/// What the nodes' application tasks say to each other.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Talk {
    /// Tell me your part of every lock whose name starts with `prefix`.
    Ask {
        /// The question's number at the asker, for the answer.
        id: u64,
        /// The names' common start.
        prefix: String,
    },
    /// The answer to [`Talk::Ask`].
    Tell {
        /// The question's number.
        id: u64,
        /// The sender's part of each lock.
        parts: Vec<Part>,
    },
    /// Election `name` has a new leader at the sender, or the one it had
    /// there let go (`leader` is `None`, `fence` the fence of the
    /// leadership that ended).
    Leader {
        /// The election.
        name: String,
        /// The new leader.
        leader: Option<Leader>,
        /// The fence of the leadership that began or ended.
        fence: u64,
    },
    /// Ask your clients holding lock `name` to let go.
    Revoke {
        /// The question's number at the asker, for the answer.
        id: u64,
        /// The lock.
        name: String,
        /// Why, as the holders are told.
        reason: Option<String>,
    },
    /// The answer to [`Talk::Revoke`].
    Revoked {
        /// The question's number.
        id: u64,
        /// How many holders were asked.
        asked: u32,
    },
}

/// One node's part of one lock.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Part {
    name: String,
    permits: u32,
    /// The node's holders: one at most, but for an algorithm that counts
    /// sessions.
    holders: Vec<HolderInfo>,
    /// Its waiting clients, in the order the node will serve them.
    waiters: Vec<WaiterInfo>,
    /// The stamp of the node's request for the lock, when the algorithm
    /// orders requests by timestamp: (timestamp, node).
    stamp: Option<(u64, u32)>,
}

/// A question under way: the peers still to answer, and the answers
/// (parts of locks for a listing, holders asked for a revocation).
struct Query {
    awaiting: BTreeSet<NodeId>,
    parts: Vec<Part>,
    asked: u32,
    done: Option<oneshot::Sender<()>>,
}

/// Who leads an election, as this node knows it.
#[derive(Clone, Debug)]
struct Known {
    /// The last fence seen begin or end a leadership: older news is stale.
    fence: u64,
    leader: Option<Leader>,
    /// The leadership `fence` began was taken for ended because its node
    /// was suspected, not because the node said so: the node may yet say
    /// it still leads.
    presumed_ended: bool,
}

/// How news of a leader came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Heard {
    /// From the leader's node, in order.
    Announced,
    /// From this node's detector: the leader's node is suspected.
    Suspected,
    /// In a listing's answer, read at some time before it came.
    Listed,
}

#[derive(Default)]
struct State {
    next_query: u64,
    queries: HashMap<u64, Query>,
    leaders: BTreeMap<Name, Known>,
}

/// The cluster-wide view; see the module documentation.
pub(crate) struct Cluster {
    agent: Arc<Agent>,
    locks: Arc<Locks>,
    /// Whether the algorithm serves requests in timestamp order.
    timestamp_order: bool,
    state: Mutex<State>,
    /// Every change of leader this node learns of.
    changes: broadcast::Sender<LeaderReport>,
}

impl Cluster {
    /// The view of `agent`'s cluster, this node's part kept in `locks`;
    /// `timestamp_order` when its algorithm serves requests in timestamp
    /// order (the waiters are then listed so).
    pub(crate) fn new(agent: Arc<Agent>, locks: Arc<Locks>, timestamp_order: bool) -> Cluster {
        Cluster {
            agent,
            locks,
            timestamp_order,
            state: Mutex::new(State::default()),
            changes: broadcast::channel(1024).0,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every live lock whose name starts with `prefix`, cluster wide, and
    /// the nodes that did not answer within `patience`.
    pub(crate) async fn locks(
        &self,
        prefix: &str,
        patience: Duration,
    ) -> (Vec<LockInfo>, Vec<u32>) {
        let (query, unreachable) =
            self.ask(|id| Talk::Ask { id, prefix: prefix.to_string() }, patience).await;
        let mut parts = self.parts(prefix);
        parts.extend(query.parts);
        (self.merge(parts), unreachable)
    }

    /// Asks every holder of lock `name`, cluster wide, to let go, for
    /// `reason` ([`Locks::ask_to_let_go`]): how many were asked, and the
    /// nodes that did not answer within `patience`.
    pub(crate) async fn revoke(
        &self,
        name: &Name,
        reason: Option<String>,
        patience: Duration,
    ) -> (u32, Vec<u32>) {
        let asked = self.locks.ask_to_let_go(name, reason.clone());
        let talk = |id| Talk::Revoke { id, name: name.to_string(), reason: reason.clone() };
        let (query, unreachable) = self.ask(talk, patience).await;
        (asked + query.asked, unreachable)
    }

    /// Sends `talk` (given the question's number) to every peer counted
    /// up and waits at most `patience` for their answers: the answers,
    /// and the members that did not give one.
    async fn ask(&self, talk: impl FnOnce(u64) -> Talk, patience: Duration) -> (Query, Vec<u32>) {
        let peers = self.agent.view().peers_up();
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut s = self.state();
            s.next_query += 1;
            let id = s.next_query;
            let awaiting: BTreeSet<NodeId> = peers.iter().copied().collect();
            let done = if awaiting.is_empty() { None } else { Some(tx) };
            s.queries.insert(id, Query { awaiting, parts: Vec::new(), asked: 0, done });
            id
        };
        let question = encode(&talk(id));
        for &peer in &peers {
            self.agent.send_application(peer, question.clone());
        }
        if !peers.is_empty() {
            let _ = tokio::time::timeout(patience, rx).await;
        }
        let query = self.state().queries.remove(&id).expect("registered above");
        let members = self.agent.view().members();
        let unreachable: Vec<u32> = members
            .into_iter()
            .filter(|&m| {
                m != self.agent.id() && (!peers.contains(&m) || query.awaiting.contains(&m))
            })
            .map(|m| m.0)
            .collect();
        (query, unreachable)
    }

    /// Lock `name` as the cluster's nodes report it now: free, with
    /// `permits`, if none knows it.
    pub(crate) async fn lock(&self, name: &Name, patience: Duration, permits: u32) -> LockInfo {
        let (locks, _) = self.locks(name.as_str(), patience).await;
        locks.into_iter().find(|l| l.name == name.as_str()).unwrap_or(LockInfo {
            name: name.to_string(),
            permits,
            holders: Vec::new(),
            waiters: Vec::new(),
            order: if self.timestamp_order { WaitOrder::Timestamp } else { WaitOrder::Waited },
        })
    }

    /// The leader of election `name`, as the cluster's nodes report it
    /// now.
    pub(crate) async fn leader(&self, name: &Name, patience: Duration) -> LeaderReport {
        let (locks, _) = self.locks(name.as_str(), patience).await;
        let leader = locks
            .into_iter()
            .filter(|l| l.name == name.as_str())
            .flat_map(|l| l.holders)
            .filter_map(|h| Some(Leader { node: h.node, value: h.value?, fence: h.fence }))
            .max_by_key(|l| l.fence);
        if let Some(l) = &leader {
            self.learn(name, Some(l.clone()), l.fence, Heard::Listed);
        }
        LeaderReport { name: name.to_string(), leader }
    }

    /// A client of this node took election `name`'s lock with `value`
    /// (`Some`), or let go of the leadership that `fence` began (`None`):
    /// every peer is told, and every observer.
    pub(crate) fn announce(&self, name: &Name, leader: Option<Leader>, fence: u64) {
        self.learn(name, leader.clone(), fence, Heard::Announced);
        let talk = encode(&Talk::Leader { name: name.to_string(), leader, fence });
        // Every member: a suspected peer's session keeps it (module docs).
        let me = self.agent.id();
        let members = self.agent.view().members();
        for peer in members.into_iter().filter(|&m| m != me) {
            self.agent.send_application(peer, talk.clone());
        }
    }

    /// `peer` is counted up: tells it every leadership this node's
    /// clients hold, in case its session lost what was said.
    fn peer_up(&self, peer: NodeId) {
        let me = self.agent.id().0;
        let held: Vec<Vec<u8>> = self
            .state()
            .leaders
            .iter()
            .filter_map(|(name, k)| {
                let l = k.leader.as_ref().filter(|l| l.node == me)?;
                Some(encode(&Talk::Leader {
                    name: name.to_string(),
                    leader: Some(l.clone()),
                    fence: l.fence,
                }))
            })
            .collect();
        for talk in held {
            self.agent.send_application(peer, talk);
        }
    }

    /// Takes in news of a leader; tells the observers if it is news.
    fn learn(&self, name: &Name, leader: Option<Leader>, fence: u64, heard: Heard) {
        let mut s = self.state();
        let known = s.leaders.entry(name.clone()).or_insert(Known {
            fence: 0,
            leader: None,
            presumed_ended: false,
        });
        let news = match &leader {
            // A new leader: newer than anything seen.
            Some(_) if fence > known.fence => true,
            // A leadership presumed gone with its node's suspicion, which
            // its node says goes on.
            Some(_) if fence == known.fence && known.leader.is_none() => {
                heard == Heard::Announced && known.presumed_ended
            }
            // The leader in force proclaims a new value. Only its node's
            // own word counts: that travels in order, where a listing's
            // answer may have been read before the proclamation.
            Some(l) => {
                heard == Heard::Announced
                    && known.leader.as_ref().is_some_and(|k| k.fence == fence && k.value != l.value)
            }
            // An end: of the leadership in force.
            None => known.leader.as_ref().is_some_and(|l| l.fence == fence),
        };
        if !news {
            return;
        }
        known.fence = fence;
        known.leader = leader.clone();
        known.presumed_ended = heard == Heard::Suspected;
        if known.leader.is_none() && self.changes.receiver_count() == 0 {
            s.leaders.remove(name);
        }
        drop(s);
        let _ = self.changes.send(LeaderReport { name: name.to_string(), leader });
    }

    /// Serves the peers' questions and answers and the leaders' news, as
    /// the agent passes them on, until the node stops.
    pub(crate) async fn run(
        &self,
        mut notices: mpsc::UnboundedReceiver<Notice>,
        mut shutdown: Shutdown,
    ) {
        let mut garbage = Throttle::default();
        loop {
            let notice = tokio::select! {
                n = notices.recv() => match n {
                    Some(n) => n,
                    None => return,
                },
                _ = shutdown.recv() => return,
            };
            match notice {
                Notice::Application { from, bytes } => match decode(&bytes) {
                    Some(talk) => self.hear(from, talk),
                    None => {
                        if let Some(also) = garbage.admit(std::time::Instant::now()) {
                            warn!(
                                peer = from.0,
                                also_dropped_since_last_line = also,
                                "dropped an application message that does not decode"
                            );
                        }
                    }
                },
                Notice::PeerDown(peer) => self.peer_down(peer),
                Notice::PeerUp(peer) => self.peer_up(peer),
            }
        }
    }

    fn hear(&self, from: NodeId, talk: Talk) {
        match talk {
            Talk::Ask { id, prefix } => {
                let parts = self.parts(&prefix);
                self.agent.send_application(from, encode(&Talk::Tell { id, parts }));
            }
            Talk::Tell { id, parts } => self.answered(from, id, |q| {
                q.parts.extend(parts.into_iter().map(|mut p| {
                    // A node speaks for its own clients only.
                    for h in &mut p.holders {
                        h.node = from.0;
                    }
                    for w in &mut p.waiters {
                        w.node = from.0;
                    }
                    p
                }))
            }),
            Talk::Revoke { id, name, reason } => {
                let asked = Name::new(&name).map_or(0, |n| self.locks.ask_to_let_go(&n, reason));
                self.agent.send_application(from, encode(&Talk::Revoked { id, asked }));
            }
            Talk::Revoked { id, asked } => self.answered(from, id, |q| q.asked += asked),
            Talk::Leader { name, leader, fence } => {
                let Ok(name) = Name::new(&name) else { return };
                let leader = leader.map(|l| Leader { node: from.0, ..l });
                self.learn(&name, leader, fence, Heard::Announced);
            }
        }
    }

    /// `from` answered question `id`: `take` takes the answer in, once.
    fn answered(&self, from: NodeId, id: u64, take: impl FnOnce(&mut Query)) {
        let mut s = self.state();
        let Some(q) = s.queries.get_mut(&id) else { return };
        if q.awaiting.remove(&from) {
            take(q);
            if q.awaiting.is_empty() {
                q.done.take().map(|done| done.send(()));
            }
        }
    }

    /// A peer is suspected: listings stop waiting for it, and a leader
    /// there is gone.
    fn peer_down(&self, peer: NodeId) {
        let mut s = self.state();
        for q in s.queries.values_mut() {
            if q.awaiting.remove(&peer) && q.awaiting.is_empty() {
                q.done.take().map(|done| done.send(()));
            }
        }
        let gone: Vec<(Name, u64)> = s
            .leaders
            .iter()
            .filter_map(|(n, k)| {
                k.leader.as_ref().filter(|l| l.node == peer.0).map(|l| (n.clone(), l.fence))
            })
            .collect();
        drop(s);
        for (name, fence) in gone {
            self.learn(&name, None, fence, Heard::Suspected);
        }
    }

    /// This node's part of every lock starting with `prefix`.
    fn parts(&self, prefix: &str) -> Vec<Part> {
        let local = self.locks.snapshot(prefix);
        let names: Vec<Name> = local.iter().map(|l| l.name.clone()).collect();
        let views = self.agent.view().lock_views(&names);
        let now = self.agent.now();
        let node = self.agent.id().0;
        local.into_iter().zip(views).map(|(l, v)| part(node, now, l, v)).collect()
    }

    /// Every node's parts merged into one listing per lock.
    fn merge(&self, parts: Vec<Part>) -> Vec<LockInfo> {
        let mut by_name: BTreeMap<String, Vec<Part>> = BTreeMap::new();
        for p in parts {
            by_name.entry(p.name.clone()).or_default().push(p);
        }
        by_name
            .into_iter()
            .map(|(name, mut parts)| {
                let permits = parts.iter().map(|p| p.permits).max().unwrap_or(1);
                let mut holders: Vec<HolderInfo> =
                    parts.iter().flat_map(|p| p.holders.iter().cloned()).collect();
                holders.sort_by_key(|h| h.fence);
                let timestamp = self.timestamp_order && parts.iter().any(|p| p.stamp.is_some());
                if timestamp {
                    // Nodes in the order of their requests; a node's own
                    // clients in the order it serves them.
                    parts.sort_by_key(|p| p.stamp.unwrap_or((u64::MAX, u32::MAX)));
                } else {
                    let longest = |p: &Part| p.waiters.iter().map(|w| w.waited_ms).max();
                    parts.sort_by_key(|p| std::cmp::Reverse(longest(p)));
                }
                let waiters = parts.into_iter().flat_map(|p| p.waiters).collect();
                let order = if timestamp { WaitOrder::Timestamp } else { WaitOrder::Waited };
                LockInfo { name, permits, holders, waiters, order }
            })
            .collect()
    }

    /// Observes election `name`: its leader now, as the cluster's nodes
    /// report it, and what tells every change from then on.
    pub(crate) async fn observe(
        &self,
        name: &Name,
        patience: Duration,
    ) -> (LeaderReport, Observer) {
        // Subscribed before asking, so that no change falls between.
        let changes = self.changes.subscribe();
        let now = self.leader(name, patience).await;
        let observer = Observer { name: name.to_string(), changes, last: now.leader.clone() };
        (now, observer)
    }
}

/// An observer of one election ([`Cluster::observe`]): each change of
/// its leader or of the leader's value, once and in order.
pub(crate) struct Observer {
    name: String,
    changes: broadcast::Receiver<LeaderReport>,
    /// The leader last told.
    last: Option<Leader>,
}

impl Observer {
    /// The next change; `None` once the node stops telling.
    pub(crate) async fn next(&mut self) -> Option<LeaderReport> {
        loop {
            let change = match self.changes.recv().await {
                Ok(report) if report.name == self.name => report,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            // What was told already (the first answer) is not news.
            let told = match (&change.leader, &self.last) {
                (None, None) => true,
                (Some(new), Some(old)) => {
                    new.fence < old.fence || (new.fence == old.fence && new.value == old.value)
                }
                _ => false,
            };
            if !told {
                self.last = change.leader.clone();
                return Some(change);
            }
        }
    }
}

/// A node's part of a lock, from its table and its engine.
fn part(node: u32, now: Duration, l: LocalLock, view: LockView) -> Part {
    let ms = |since: Duration| now.saturating_sub(since).as_millis() as u64;
    // A holder the node lost is listed without a client, for as long as
    // the node holds on its behalf.
    let holders = l
        .holders
        .iter()
        .map(|(h, orphaned)| HolderInfo {
            node,
            client: (!orphaned).then(|| h.client.label.clone()),
            fence: h.fence.0,
            held_ms: ms(h.since),
            value: h.value.clone().filter(|_| !orphaned),
            revoke: h.revoke.clone().filter(|_| !orphaned),
            mode: h.mode,
        })
        .collect();
    let waiters = l
        .waiters
        .iter()
        .map(|&(ref c, since, mode)| WaiterInfo {
            node,
            client: c.label.clone(),
            waited_ms: ms(since),
            mode,
        })
        .collect();
    let stamp = view.stamp.filter(|_| view.state == CsState::Wanting).map(|s| (s.ts, s.node.0));
    Part { name: l.name.to_string(), permits: l.permits, holders, waiters, stamp }
}

fn encode(talk: &Talk) -> Vec<u8> {
    coterie_core::wire::encode(talk)
}

fn decode(bytes: &[u8]) -> Option<Talk> {
    coterie_core::wire::decode(bytes).ok()
}
