//! The clients: `sessions` per node, each with what it wants and holds,
//! and when each asks for the critical section and leaves it, under
//! concurrent, sequential and burst load ([`Workload`] keeps their state;
//! the simulation queues their steps). A node serves its clients as a
//! real node serves its sessions: where the algorithm counts sessions it
//! asks for a permit per waiting client; otherwise its clients take turns
//! with the node's one grant.

use super::agenda::Event;
use super::client::{ClientId, ClientState};
use super::config::{Load, SimConfig};
use super::report::EntryCost;
use crate::chooser::Chooser;
use coterie_core::{Demand, Fence, Mode, Name, NodeId, Takers, Time};
use std::collections::BTreeMap;
use std::time::Duration;

/// A client.
#[derive(Clone, Debug, Hash)]
struct Client {
    state: ClientState,
    /// The names its request still has to take, in the order it takes
    /// them (ascending).
    want: Vec<Name>,
    /// The names it holds, each with the fence of its grant.
    held: Vec<(Name, Fence)>,
    /// Concurrent load: entries still to make.
    remaining: u32,
    /// It lost a lock it held while it waited for the next of its request
    /// (its node lost its lease): the request is given up once granted.
    lost: bool,
    /// Whether it reads or writes, always.
    mode: Mode,
}

/// What a grant did to its client's request.
pub(super) enum Taken {
    /// The request has more names to take: the next at once.
    More,
    /// The request holds every name it wanted: it is in.
    Entered,
    /// The request had lost a name it held: it lets go at once.
    Abandoned,
}

/// The clients' state, and what the load has still to do.
#[derive(Clone)]
pub(super) struct Workload {
    load: Load,
    /// When it begins; messages are counted from then on.
    start: Time,
    /// The locks the clients ask for.
    names: Vec<Name>,
    /// Names each request takes at once (at most as many as there are).
    per_request: usize,
    clients: BTreeMap<ClientId, Client>,
    /// Each node's waiting clients, in the order they asked: a grant goes
    /// to the first that waits for its lock, as a node hands a lock to
    /// its sessions in the order they asked.
    lines: BTreeMap<NodeId, Vec<u32>>,
    /// Sequential load: the entry in progress (requester, mutex messages
    /// sent before it, requester was coordinator), and entries left.
    sequential: Option<(NodeId, u64, bool)>,
    sequential_left: u32,
    /// Burst load: bursts still to come, and whether the next is queued.
    bursts_left: u32,
    burst_due: bool,
}

impl Workload {
    /// The workload `cfg` asks for.
    pub(super) fn new(cfg: &SimConfig) -> Workload {
        let names = match cfg.names {
            0 | 1 => vec![Name::default()],
            k => (0..k).map(|i| Name::new(&format!("r{i}")).expect("a valid name")).collect(),
        };
        let remaining = match cfg.load {
            Load::Concurrent => cfg.requests,
            Load::Sequential | Load::Burst => 0,
        };
        let client = Client {
            state: ClientState::Thinking,
            want: Vec::new(),
            held: Vec::new(),
            remaining,
            lost: false,
            mode: Mode::Write,
        };
        // Sequential load runs one request at a time in the whole
        // cluster: one client per node is all it uses.
        let sessions = if cfg.load == Load::Sequential { 1 } else { cfg.sessions.max(1) };
        let total = u64::from(cfg.nodes) * u64::from(sessions);
        let readers = u64::from(cfg.readers).min(total);
        // The i-th client reads when the readers' even share steps up at
        // it: `readers` of them, spread over the nodes.
        let reads = |i: u64| (i + 1) * readers / total > i * readers / total;
        let clients = (1..=cfg.nodes)
            .flat_map(|id| (0..sessions).map(move |slot| ClientId { node: NodeId(id), slot }))
            .enumerate()
            .map(|(i, c)| {
                let mode = if reads(i as u64) { Mode::Read } else { Mode::Write };
                (c, Client { mode, ..client.clone() })
            })
            .collect();
        Workload {
            load: cfg.load,
            start: cfg.timing.failure_timeout * 3,
            per_request: (cfg.per_request.max(1) as usize).min(names.len()),
            names,
            clients,
            lines: BTreeMap::new(),
            sequential: None,
            sequential_left: cfg.requests,
            bursts_left: cfg.requests,
            // The first burst is queued with the workload.
            burst_due: cfg.load == Load::Burst,
        }
    }

    /// The workload's first steps, from its start on: each client's first
    /// request after a thought drawn from `think` (concurrent load), or
    /// the first sequential entry or burst.
    pub(super) fn first_steps(
        &self,
        think: (Duration, Duration),
        chooser: &mut impl Chooser,
    ) -> Vec<(Time, Event)> {
        let start = self.start;
        match self.load {
            Load::Concurrent => self
                .clients
                .keys()
                .map(|&client| {
                    let at = start + chooser.duration(think.0, think.1);
                    (at, Event::Request { client, incarnation: 0 })
                })
                .collect(),
            Load::Sequential => vec![(start, Event::NextSequential)],
            Load::Burst => vec![(start, Event::NextBurst)],
        }
    }

    /// When the workload begins.
    pub(super) fn start(&self) -> Time {
        self.start
    }

    /// Whether the clients spread over several locks.
    pub(super) fn named(&self) -> bool {
        self.names.len() > 1
    }

    /// `node`'s clients.
    fn at(&self, node: NodeId) -> impl Iterator<Item = ClientId> + '_ {
        let first = ClientId { node, slot: 0 };
        self.clients.range(first..).map(|(&c, _)| c).take_while(move |c| c.node == node)
    }

    /// Where `client` stands.
    pub(super) fn state(&self, client: ClientId) -> ClientState {
        self.clients[&client].state
    }

    /// Whether any client waits.
    pub(super) fn anyone_waits(&self) -> bool {
        self.clients.values().any(|c| c.state == ClientState::Waiting)
    }

    fn client(&mut self, client: ClientId) -> &mut Client {
        self.clients.get_mut(&client).expect("a known client")
    }

    /// The name `client` asks for next, and it waits: the next of its
    /// request under way, or the first of a new request, drawn now from
    /// `chooser`. One name is drawn without a choice, so runs on the
    /// default lock alone replay the seeds they always did.
    pub(super) fn ask(&mut self, client: ClientId, chooser: &mut impl Chooser) -> Name {
        let per_request = self.per_request;
        if self.clients[&client].want.is_empty() {
            let mut pool: Vec<Name> = self.names.clone();
            let mut want: Vec<Name> = Vec::with_capacity(per_request);
            while want.len() < per_request {
                let i = if pool.len() == 1 { 0 } else { chooser.index(pool.len()) };
                want.push(pool.swap_remove(i));
            }
            want.sort();
            self.client(client).want = want;
        }
        self.lines.entry(client.node).or_default().push(client.slot);
        let c = self.client(client);
        c.state = ClientState::Waiting;
        c.want[0].clone()
    }

    /// What `node`'s clients hold and want of `name`.
    pub(super) fn demand(&self, node: NodeId, name: &Name, permits: u32) -> Demand {
        let holding = |id: &ClientId| self.clients[id].held.iter().any(|(n, _)| n == name);
        let used = self
            .at(node)
            .flat_map(|id| &self.clients[&id].held)
            .filter(|(n, _)| n == name)
            .map(|&(_, f)| f)
            .collect();
        let reading = |id: &ClientId| self.clients[id].mode == Mode::Read;
        let waiting = self.in_line(node, name).count() as u32;
        let waiting_reads = self.in_line(node, name).filter(reading).count() as u32;
        let held_reads = self.at(node).filter(holding).filter(reading).count() as u32;
        Demand { permits, used, waiting, reads: held_reads + waiting_reads, waiting_reads }
    }

    /// `node`'s clients that have asked for `name` and wait for it, in the
    /// order they asked. (A client granted one name of its request waits
    /// for the next only once it has asked.)
    fn in_line<'a>(&'a self, node: NodeId, name: &'a Name) -> impl Iterator<Item = ClientId> + 'a {
        let line = self.lines.get(&node).map_or(&[][..], Vec::as_slice);
        line.iter().map(move |&slot| ClientId { node, slot }).filter(move |id| {
            let c = &self.clients[id];
            c.state == ClientState::Waiting && c.want.first() == Some(name)
        })
    }

    /// Whether `client` reads or writes.
    pub(super) fn mode(&self, client: ClientId) -> Mode {
        self.clients[&client].mode
    }

    /// The clients of `node` a grant of `name` goes to, as a node hands
    /// its grants (`Engine::takers` says which): the first in line that
    /// waits for it, or the first that waits in a mode; or, for readers
    /// sharing it, the first reader in line and every reader after it up
    /// to the next writer.
    pub(super) fn takers(&self, node: NodeId, name: &Name, takers: Takers) -> Vec<ClientId> {
        let reads = |id: &ClientId| self.clients[id].mode == Mode::Read;
        let mut line = self.in_line(node, name);
        match takers {
            Takers::First => line.next().into_iter().collect(),
            Takers::FirstIn(mode) => {
                line.find(|id| self.clients[id].mode == mode).into_iter().collect()
            }
            Takers::Readers => line.skip_while(|id| !reads(id)).take_while(reads).collect(),
        }
    }

    /// The states of `node`'s clients, for a grant nobody took.
    pub(super) fn states_at(&self, node: NodeId) -> Vec<ClientState> {
        self.at(node).map(|id| self.clients[&id].state).collect()
    }

    /// The clients of `node` that hold `name` with `fence`: one, or
    /// readers sharing it.
    pub(super) fn holders(&self, node: NodeId, name: &Name, fence: Fence) -> Vec<ClientId> {
        let holds =
            |id: &ClientId| self.clients[id].held.iter().any(|(n, f)| n == name && *f == fence);
        self.at(node).filter(holds).collect()
    }

    /// `client`, the taker of a grant, was granted `name` with `fence`.
    pub(super) fn granted(&mut self, client: ClientId, name: Name, fence: Fence) -> Taken {
        if let Some(line) = self.lines.get_mut(&client.node) {
            line.retain(|&slot| slot != client.slot);
            if line.is_empty() {
                self.lines.remove(&client.node);
            }
        }
        let c = self.client(client);
        c.want.remove(0);
        c.held.push((name, fence));
        if std::mem::take(&mut c.lost) {
            c.want.clear();
            return Taken::Abandoned;
        }
        if !c.want.is_empty() {
            return Taken::More;
        }
        c.state = ClientState::Holding;
        Taken::Entered
    }

    /// `client` lets go: the names it held, in the order taken.
    pub(super) fn release(&mut self, client: ClientId) -> Vec<(Name, Fence)> {
        std::mem::take(&mut self.client(client).held)
    }

    /// `client` lost `name`, which its node released (its lease ran out):
    /// the names it holds besides, which it lets go. A client that held
    /// them all is out; one still waiting for more gives its request up
    /// once the name it waits for comes.
    pub(super) fn lost(&mut self, client: ClientId, name: &Name) -> Vec<(Name, Fence)> {
        let c = self.client(client);
        c.held.retain(|(n, _)| n != name);
        if c.state == ClientState::Waiting {
            c.lost = true;
        }
        std::mem::take(&mut c.held)
    }

    /// `client`'s entry is over: `true` if it asks again (after thinking),
    /// under concurrent load with requests left.
    pub(super) fn entry_over(&mut self, client: ClientId) -> bool {
        let concurrent = self.load == Load::Concurrent;
        let c = self.client(client);
        c.remaining = c.remaining.saturating_sub(1);
        let again = concurrent && c.remaining > 0;
        c.state = if again { ClientState::Thinking } else { ClientState::Done };
        again
    }

    /// `node` crashed: its clients want and hold nothing (each stays where
    /// it stood until the node restarts). `true` if the sequential entry
    /// under way was its: that entry is given up.
    pub(super) fn crashed(&mut self, node: NodeId) -> bool {
        let ids: Vec<ClientId> = self.at(node).collect();
        for id in ids {
            let c = self.client(id);
            c.want.clear();
            c.held.clear();
        }
        self.lines.remove(&node);
        if self.sequential.is_some_and(|(requester, _, _)| requester == node) {
            self.sequential = None;
            return true;
        }
        false
    }

    /// `node` restarted: the clients that carry on (concurrent load,
    /// requests left), thinking; the others are done.
    pub(super) fn restarted(&mut self, node: NodeId) -> Vec<ClientId> {
        let concurrent = self.load == Load::Concurrent;
        let ids: Vec<ClientId> = self.at(node).collect();
        let mut resumed = Vec::new();
        for id in ids {
            let c = self.client(id);
            let resume = c.state != ClientState::Done && concurrent;
            c.state = if resume { ClientState::Thinking } else { ClientState::Done };
            if resume {
                resumed.push(id);
            }
        }
        resumed
    }

    /// Whether every client `live` says is up is done.
    fn all_done(&self, live: impl Fn(NodeId) -> bool) -> bool {
        self.clients.iter().all(|(id, c)| !live(id.node) || c.state == ClientState::Done)
    }

    /// Whether the workload has finished on every node `live` says is up.
    pub(super) fn done(&self, live: impl Fn(NodeId) -> bool) -> bool {
        match self.load {
            Load::Concurrent => self.all_done(live),
            Load::Sequential => self.sequential_left == 0 && self.sequential.is_none(),
            Load::Burst => self.bursts_left == 0 && self.all_done(live),
        }
    }

    /// Burst load: whether the next burst is to be queued now (every live
    /// node's entry of this one done, bursts left, none queued yet); it
    /// then counts as queued.
    pub(super) fn burst_next(&mut self, live: impl Fn(NodeId) -> bool) -> bool {
        if self.all_done(live) && self.bursts_left > 0 && !self.burst_due {
            self.burst_due = true;
            return true;
        }
        false
    }

    /// Burst load: a burst begins now, if any is left: every client of a
    /// node in `live` thinks, about to ask; they are returned (none when
    /// no burst is left).
    pub(super) fn burst(&mut self, live: &[NodeId]) -> Vec<ClientId> {
        self.burst_due = false;
        let Some(left) = self.bursts_left.checked_sub(1) else { return Vec::new() };
        self.bursts_left = left;
        let ids: Vec<ClientId> = live.iter().flat_map(|&node| self.at(node)).collect();
        for &id in &ids {
            self.client(id).state = ClientState::Thinking;
        }
        ids
    }

    /// Sequential load: the entry under way, if one is, is over; returns
    /// its requester, whether it was the coordinator, and the messages
    /// `sent_total` says were sent since it began.
    pub(super) fn sequential_over(&mut self, sent_total: u64) -> Option<(NodeId, EntryCost)> {
        let (node, before, local) = self.sequential.take()?;
        let mode = self.mode(ClientId { node, slot: 0 });
        Some((node, EntryCost { messages: sent_total - before, local, mode }))
    }

    /// Sequential load: whether an entry is under way.
    pub(super) fn sequential_busy(&self) -> bool {
        self.sequential.is_some()
    }

    /// Sequential load: an entry of `node` (the coordinator: `local`)
    /// begins, `sent_total` mutex messages sent so far; `false` if none
    /// is left.
    pub(super) fn sequential_next(
        &mut self,
        pick: impl FnOnce() -> (NodeId, bool),
        sent_total: u64,
    ) -> bool {
        if self.sequential_left == 0 {
            return false;
        }
        self.sequential_left -= 1;
        let (node, local) = pick();
        self.sequential = Some((node, sent_total, local));
        true
    }

    /// The clients `which` picks, for a violation's detail.
    pub(super) fn select(&self, which: impl Fn(ClientState) -> bool) -> Vec<ClientId> {
        self.clients.iter().filter(|(_, c)| which(c.state)).map(|(&id, _)| id).collect()
    }

    /// Feeds the clients and the load left to `h`, for a state's
    /// fingerprint (leaving out the messages counted before the
    /// sequential entry under way, which decide nothing that follows).
    pub(super) fn hash_state<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        self.clients.hash(h);
        self.lines.hash(h);
        self.sequential.map(|(node, _, local)| (node, local)).hash(h);
        self.sequential_left.hash(h);
        self.bursts_left.hash(h);
        self.burst_due.hash(h);
    }

    /// Feeds the clients' states alone to `h`, for the deadlock watch.
    pub(super) fn hash_states<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        for (id, c) in &self.clients {
            id.hash(h);
            c.state.hash(h);
        }
    }
}
