//! The clients: one per node, with what it wants and holds, and when each
//! asks for the critical section and leaves it, under concurrent,
//! sequential and burst load ([`Workload`] keeps their state; the
//! simulation queues their steps).

use super::*;

/// Where a node's client stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum ClientState {
    Thinking,
    Waiting,
    Holding,
    Done,
}

/// A node's client.
#[derive(Clone, Debug, Hash)]
struct Client {
    state: ClientState,
    /// The names its request still has to take, in the order it takes
    /// them (ascending).
    want: Vec<Name>,
    /// The names it holds.
    held: Vec<Name>,
    /// Concurrent load: entries still to make.
    remaining: u32,
    /// It lost a lock it held while it waited for the next of its request
    /// (its node lost its lease): the request is given up once granted.
    lost: bool,
}

/// What a grant did to its client's request.
pub(super) enum Taken {
    /// The request has more names to take: the next at once.
    More,
    /// The request holds every name it wanted: it is in.
    Entered,
    /// Nobody asked for it: the client was in this state, or waited for
    /// another name.
    Unasked(ClientState),
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
    clients: BTreeMap<NodeId, Client>,
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
        };
        Workload {
            load: cfg.load,
            start: cfg.timing.failure_timeout * 3,
            per_request: (cfg.per_request.max(1) as usize).min(names.len()),
            names,
            clients: (1..=cfg.nodes).map(|id| (NodeId(id), client.clone())).collect(),
            sequential: None,
            sequential_left: cfg.requests,
            bursts_left: cfg.requests,
            // The first burst is queued with the workload.
            burst_due: cfg.load == Load::Burst,
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

    /// Where `node`'s client stands.
    pub(super) fn state(&self, node: NodeId) -> ClientState {
        self.clients[&node].state
    }

    /// Whether any client waits.
    pub(super) fn anyone_waits(&self) -> bool {
        self.clients.values().any(|c| c.state == ClientState::Waiting)
    }

    fn client(&mut self, node: NodeId) -> &mut Client {
        self.clients.get_mut(&node).expect("a client per node")
    }

    /// The name `node`'s client asks for next, and it waits: the next of
    /// its request under way, or the first of a new request, drawn now
    /// from `chooser`. One name is drawn without a choice, so runs on the
    /// default lock alone replay the seeds they always did.
    pub(super) fn ask(&mut self, node: NodeId, chooser: &mut impl Chooser) -> Name {
        let per_request = self.per_request;
        if self.clients[&node].want.is_empty() {
            let mut pool: Vec<Name> = self.names.clone();
            let mut want: Vec<Name> = Vec::with_capacity(per_request);
            while want.len() < per_request {
                let i = if pool.len() == 1 { 0 } else { chooser.index(pool.len()) };
                want.push(pool.swap_remove(i));
            }
            want.sort();
            self.client(node).want = want;
        }
        let client = self.client(node);
        client.state = ClientState::Waiting;
        client.want[0].clone()
    }

    /// `node`'s client was granted `name`.
    pub(super) fn granted(&mut self, node: NodeId, name: Name) -> Taken {
        let client = self.client(node);
        if client.state != ClientState::Waiting || client.want.first() != Some(&name) {
            return Taken::Unasked(client.state);
        }
        client.want.remove(0);
        client.held.push(name);
        if std::mem::take(&mut client.lost) {
            client.want.clear();
            return Taken::Abandoned;
        }
        if !client.want.is_empty() {
            return Taken::More;
        }
        client.state = ClientState::Holding;
        Taken::Entered
    }

    /// `node`'s client lets go: the names it held, in the order taken.
    pub(super) fn release(&mut self, node: NodeId) -> Vec<Name> {
        std::mem::take(&mut self.client(node).held)
    }

    /// `node`'s client lost `name`, which its node released (its lease ran
    /// out): the names it holds besides, which it lets go. A client that
    /// held them all is out; one still waiting for more gives its request
    /// up once the name it waits for comes.
    pub(super) fn lost(&mut self, node: NodeId, name: &Name) -> Vec<Name> {
        let client = self.client(node);
        client.held.retain(|n| n != name);
        if client.state == ClientState::Waiting {
            client.lost = true;
        }
        std::mem::take(&mut client.held)
    }

    /// `node`'s entry is over: `true` if its client asks again (after
    /// thinking), under concurrent load with requests left.
    pub(super) fn entry_over(&mut self, node: NodeId) -> bool {
        let concurrent = self.load == Load::Concurrent;
        let client = self.client(node);
        client.remaining = client.remaining.saturating_sub(1);
        let again = concurrent && client.remaining > 0;
        client.state = if again { ClientState::Thinking } else { ClientState::Done };
        again
    }

    /// `node` crashed: its client wants and holds nothing (it stays where
    /// it stood until the node restarts). `true` if the sequential entry
    /// under way was its: that entry is given up.
    pub(super) fn crashed(&mut self, node: NodeId) -> bool {
        let client = self.client(node);
        client.want.clear();
        client.held.clear();
        if self.sequential.is_some_and(|(requester, _, _)| requester == node) {
            self.sequential = None;
            return true;
        }
        false
    }

    /// `node` restarted: `true` if its client carries on (concurrent load,
    /// requests left), thinking; otherwise it is done.
    pub(super) fn restarted(&mut self, node: NodeId) -> bool {
        let concurrent = self.load == Load::Concurrent;
        let client = self.client(node);
        let resume = client.state != ClientState::Done && concurrent;
        client.state = if resume { ClientState::Thinking } else { ClientState::Done };
        resume
    }

    /// Whether every client `live` says is up is done.
    fn all_done(&self, live: impl Fn(NodeId) -> bool) -> bool {
        self.clients.iter().all(|(&id, c)| !live(id) || c.state == ClientState::Done)
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

    /// Burst load: a burst begins now, if any is left; every client in
    /// `live` thinks, about to ask.
    pub(super) fn burst(&mut self, live: &[NodeId]) -> bool {
        self.burst_due = false;
        let Some(left) = self.bursts_left.checked_sub(1) else { return false };
        self.bursts_left = left;
        for node in live {
            self.client(*node).state = ClientState::Thinking;
        }
        true
    }

    /// Sequential load: the entry under way, if one is, is over; returns
    /// its requester, whether it was the coordinator, and the messages
    /// `sent_total` says were sent since it began.
    pub(super) fn sequential_over(&mut self, sent_total: u64) -> Option<(NodeId, u64, bool)> {
        let (node, before, local) = self.sequential.take()?;
        Some((node, sent_total - before, local))
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

    /// The live clients `which` picks, for a violation's detail.
    pub(super) fn select(&self, which: impl Fn(ClientState) -> bool) -> Vec<NodeId> {
        self.clients.iter().filter(|(_, c)| which(c.state)).map(|(&id, _)| id).collect()
    }

    /// Feeds the clients and the load left to `h`, for a state's
    /// fingerprint (leaving out the messages counted before the
    /// sequential entry under way, which decide nothing that follows).
    pub(super) fn hash_state<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        self.clients.hash(h);
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

impl<C: Chooser> Simulation<C> {
    pub(super) fn schedule_workload(&mut self) {
        let start = self.workload.start();
        match self.cfg.load {
            Load::Concurrent => {
                let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
                for node in ids {
                    let at = start + self.uniform(self.cfg.think);
                    self.push(at, Event::Request { node, incarnation: 0 });
                }
            }
            Load::Sequential => self.push(start, Event::NextSequential),
            Load::Burst => self.push(start, Event::NextBurst),
        }
    }

    /// `node`'s client asks for the next name of its request.
    pub(super) fn request(&mut self, node: NodeId) {
        let now = self.now;
        let name = self.workload.ask(node, &mut self.chooser);
        self.checker.asked(node, name.clone(), now);
        self.trace(|| format!("{node} requests {name}"));
        let permits = u32::try_from(self.cfg.capacity).unwrap_or(u32::MAX);
        if let Err(e) = self.engine(node).request(now, &name, permits) {
            panic!("the simulator's own request for {name} was refused: {e}");
        }
        self.after_input(node);
    }

    /// `node`'s node released `name`, which its client held, on its own:
    /// its lease ran out. The client stops at once, as the node tells it
    /// to, lets go of what else it held, and its entry is over.
    pub(super) fn lost(&mut self, node: NodeId, name: Name, fence: Fence) {
        let now = self.now;
        self.trace(|| format!("{node} LOSES {name:?} (fence {fence})"));
        let state = self.workload.state(node);
        let others = self.workload.lost(node, &name);
        let mut gone = others.clone();
        gone.push(name);
        self.checker.released(node, &gone, now);
        self.record(|r, at| r.exit(at, node));
        for other in others.iter().rev() {
            self.engine(node).release(now, other);
        }
        self.after_input(node);
        if state == ClientState::Holding {
            self.after_release(node);
        }
    }

    /// `node`'s client lets go of every name it holds, last taken first.
    pub(super) fn release(&mut self, node: NodeId) {
        let now = self.now;
        let held = self.workload.release(node);
        self.checker.released(node, &held, now);
        self.report.workload_us = now.saturating_sub(self.workload.start()).as_micros() as u64;
        self.trace(|| format!("{node} releases"));
        self.record(|r, at| r.exit(at, node));
        for name in held.iter().rev() {
            self.engine(node).release(now, name);
        }
        self.after_input(node);
        self.after_release(node);
    }

    /// `node`'s client was granted `name`: it asks for its request's next
    /// name at once, or holds for a while.
    pub(super) fn take(&mut self, node: NodeId, name: Name) {
        let incarnation = self.nodes[&node].incarnation;
        match self.workload.granted(node, name.clone()) {
            Taken::More => self.push(self.now, Event::Request { node, incarnation }),
            Taken::Entered => {
                let hold = self.uniform(self.cfg.hold);
                self.push(self.now + hold, Event::Release { node, incarnation });
            }
            Taken::Abandoned => self.release(node),
            Taken::Unasked(state) => {
                // Judged as safety (ignored when only progress is
                // judged): a grant nobody asked for is not handed to the
                // client.
                let named = self.named(&name);
                self.violation(
                    Invariant::Safety,
                    format!("{node} was granted{named} while its client was {state:?}"),
                );
            }
        }
    }

    fn after_release(&mut self, node: NodeId) {
        match self.cfg.load {
            Load::Concurrent => {
                if self.workload.entry_over(node) {
                    let incarnation = self.nodes[&node].incarnation;
                    let at = self.now + self.uniform(self.cfg.think);
                    self.push(at, Event::Request { node, incarnation });
                }
            }
            Load::Sequential => {
                self.workload.entry_over(node);
                // Leave time for every message the entry caused to land.
                let quiet = self.cfg.delay.1 * 4 + STEP;
                self.push(self.now + quiet, Event::NextSequential);
            }
            Load::Burst => {
                self.workload.entry_over(node);
                self.after_burst_entry();
            }
        }
    }

    /// Burst load: once every live node's entry of this burst is done (or
    /// its node died), the next burst comes after a quiet gap.
    pub(super) fn after_burst_entry(&mut self) {
        let nodes = &self.nodes;
        if self.workload.burst_next(|id| nodes[&id].engine.is_some()) {
            let quiet = self.cfg.delay.1 * 4 + STEP;
            self.push(self.now + quiet, Event::NextBurst);
        }
    }

    pub(super) fn next_burst(&mut self) {
        if self.net.mutex_in_flight() > 0 {
            // The last burst's messages are still moving: wait for them.
            let wait = self.cfg.delay.1 + STEP;
            self.push(self.now + wait, Event::NextBurst);
            return;
        }
        let live: Vec<NodeId> = self.live_nodes().collect();
        if !self.workload.burst(&live) {
            return;
        }
        self.trace(|| "BURST: every live node asks".to_string());
        for node in live {
            let incarnation = self.nodes[&node].incarnation;
            self.push(self.now, Event::Request { node, incarnation });
        }
    }

    pub(super) fn next_sequential(&mut self) {
        if self.net.mutex_in_flight() > 0 && self.workload.sequential_busy() {
            // The entry's messages are still moving (a token finishing its
            // lap, say): count them all before the next request.
            let wait = self.cfg.delay.1 + STEP;
            self.push(self.now + wait, Event::NextSequential);
            return;
        }
        if let Some((node, cost, local)) =
            self.workload.sequential_over(self.net.mutex_sent_total())
        {
            self.trace(|| format!("{node}'s entry cost {cost} mutex messages"));
            self.report.per_entry.push((cost, local));
        }
        let live: Vec<NodeId> = self.live_nodes().collect();
        let mut chosen = None;
        let chooser = &mut self.chooser;
        let nodes = &self.nodes;
        let pick = || {
            let node = live[chooser.index(live.len())];
            let local = nodes[&node].engine.as_ref().and_then(Engine::coordinator) == Some(node);
            chosen = Some(node);
            (node, local)
        };
        if !self.workload.sequential_next(pick, self.net.mutex_sent_total()) {
            return;
        }
        let node = chosen.expect("picked");
        let incarnation = self.nodes[&node].incarnation;
        self.handle(Event::Request { node, incarnation });
    }

    /// Whether the workload has finished on every node that is up.
    pub(super) fn workload_done(&self) -> bool {
        self.workload.done(|id| self.nodes[&id].engine.is_some())
    }
}
