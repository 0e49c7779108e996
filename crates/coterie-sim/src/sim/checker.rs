//! What a run is judged by: at every grant (safety, fences, fairness), at
//! every step (deadlock) and at its end (liveness, agreement). The
//! [`Checker`] keeps what judging needs (who holds which lock, every fence
//! granted, who waits since when); the invariants themselves are named in
//! [`crate::invariant`].

use super::fingerprint::state_hasher;
use super::workload::{ClientId, ClientState};
use super::*;
use coterie_core::{Stamp, Takers};

/// The state checker: what the clients hold and wait for, as the grants
/// and releases say, and every fence granted.
#[derive(Clone, Default)]
pub(super) struct Checker {
    /// Which client holds which lock now, with which fence, and how.
    holders: BTreeMap<(Name, ClientId), (Fence, Mode)>,
    /// Every fence granted so far, by lock.
    fences: BTreeMap<Name, BTreeSet<Fence>>,
    /// The highest fence granted to a writer, by lock.
    written: BTreeMap<Name, Fence>,
    /// Which lock each waiting client waits for, how, and since when.
    asked: BTreeMap<ClientId, (Name, Mode, Time)>,
    /// For each waiting writer, the reads of its lock granted to others
    /// since it asked: what a stream of readers made it wait for.
    bypassed: BTreeMap<ClientId, u64>,
    /// A release with someone waiting, not yet followed by a grant.
    release_pending: Option<Time>,
    /// Since when, and in which state of the algorithms, the run has been
    /// stuck but for heartbeats (see [`Invariant::Deadlock`]).
    stuck: Option<(Time, u64)>,
}

/// What a grant was found to be.
pub(super) struct Verdict {
    /// It went to a node ahead of one that asked for the lock earlier.
    pub(super) overtook: bool,
    /// How long after the last release with someone waiting it came.
    pub(super) sync_delay: Option<Duration>,
    /// The holders it joined, when they were already as many as allowed.
    pub(super) crowd: Option<Vec<ClientId>>,
    /// The highest fence granted before, when this one is not above it
    /// (or was granted before).
    pub(super) stale: Option<Fence>,
    /// It went to a reader while another reader held.
    pub(super) shared: bool,
    /// It went to a writer, after this many reads of the lock were
    /// granted to others while it waited.
    pub(super) bypassed: Option<u64>,
}

impl Checker {
    /// `client` asks for `name` in `mode` now.
    pub(super) fn asked(&mut self, client: ClientId, (name, mode): (Name, Mode), now: Time) {
        self.asked.insert(client, (name, mode, now));
    }

    /// `client` lets go of `held` now.
    pub(super) fn released(&mut self, client: ClientId, held: &[Name], now: Time) {
        for name in held {
            self.holders.remove(&(name.clone(), client));
        }
        if !self.asked.is_empty() {
            self.release_pending = Some(now);
        }
    }

    /// Who holds `name` now.
    pub(super) fn holders_of(&self, name: &Name) -> Vec<ClientId> {
        self.holders.keys().filter(|(n, _)| n == name).map(|&(_, h)| h).collect()
    }

    /// Who holds `name` now in a mode that conflicts with `mode`.
    fn conflicting(&self, name: &Name, mode: Mode) -> Vec<ClientId> {
        let holds = self.holders.iter().filter(|((n, _), _)| n == name);
        holds.filter(|(_, &(_, m))| m.conflicts(mode)).map(|(&(_, h), _)| h).collect()
    }

    /// `node` crashed: its clients hold and wait for nothing.
    pub(super) fn crashed(&mut self, node: NodeId) {
        self.holders.retain(|(_, holder), _| holder.node != node);
        self.asked.retain(|client, _| client.node != node);
        self.bypassed.retain(|client, _| client.node != node);
    }

    /// Judges the grant of `name` to `client` with `fence` in `mode` now,
    /// with `allowed` holders at once (and fences that must rise when
    /// `rising`); `stamp` gives a node's request timestamp for a lock
    /// where the algorithm orders requests by timestamp. On a lock of one
    /// holder, readers may share it: a reader may not join a writer, nor
    /// a writer anyone; a writer's fence must be above every earlier
    /// grant's, a reader's above every earlier writer's. A fence is
    /// granted once, but for a reader that `joined` readers of its node on
    /// the grant they entered on just before.
    pub(super) fn granted(
        &mut self,
        client: ClientId,
        name: &Name,
        (fence, mode, joined): (Fence, Mode, bool),
        now: Time,
        (allowed, rising): (usize, bool),
        stamp: impl Fn(NodeId) -> Option<Stamp>,
    ) -> Verdict {
        let overtook = match self.asked.remove(&client) {
            Some((.., asked_at)) => self.overtakes(client, (name, mode), asked_at, stamp),
            None => false,
        };
        let bypassed = match mode {
            Mode::Write => Some(self.bypassed.remove(&client).unwrap_or(0)),
            Mode::Read => {
                let writers =
                    self.asked.iter().filter(|(_, (n, m, _))| n == name && *m == Mode::Write);
                for (&writer, _) in writers {
                    *self.bypassed.entry(writer).or_default() += 1;
                }
                None
            }
        };
        let sync_delay = self.release_pending.take().map(|released| now - released);
        let shared = mode == Mode::Read && !self.holders_of(name).is_empty();
        let crowd = if allowed == 1 {
            Some(self.conflicting(name, mode)).filter(|c| !c.is_empty())
        } else {
            Some(self.holders_of(name)).filter(|h| h.len() >= allowed)
        };
        // A mutex's fences must rise with every grant (a reader's with
        // every writer's). With k holders a grant may land after later
        // ones (and after their release), so the sound check there is that
        // no fence is ever granted twice.
        let fences = self.fences.entry(name.clone()).or_default();
        let max = match mode {
            Mode::Write => fences.last().copied(),
            Mode::Read => self.written.get(name).copied(),
        };
        let below = rising && max.is_some_and(|m| fence <= m);
        let twice = !fences.insert(fence) && !joined;
        let stale = (below || twice).then(|| max.unwrap_or_default());
        if mode == Mode::Write {
            let written = self.written.entry(name.clone()).or_default();
            *written = fence.max(*written);
        }
        self.holders.insert((name.clone(), client), (fence, mode));
        let shared = shared && crowd.is_none();
        Verdict { overtook, sync_delay, crowd, stale, shared, bypassed }
    }

    /// Whether `client`, which asked at `asked_at`, enters `name` in
    /// `mode` ahead of a waiting client that asked for it before in a mode
    /// that conflicts (a reader may pass a reader): by its node's request
    /// timestamp when the algorithm orders requests by timestamp, by the
    /// time of asking otherwise.
    fn overtakes(
        &self,
        client: ClientId,
        (name, mode): (&Name, Mode),
        asked_at: Time,
        stamp: impl Fn(NodeId) -> Option<Stamp>,
    ) -> bool {
        let rivals =
            || self.asked.iter().filter(move |(_, (n, how, _))| n == name && how.conflicts(mode));
        match stamp(client.node) {
            Some(mine) => rivals().filter_map(|(id, _)| stamp(id.node)).any(|other| other < mine),
            None => rivals().any(|(_, &(_, _, other))| other < asked_at),
        }
    }

    /// The run is in stuck state `state` now (`None`: not stuck): `true`
    /// once it has stayed in the same one for `timeout`, when it counts
    /// as a deadlock (and the watch starts over).
    pub(super) fn watch(&mut self, now: Time, state: Option<u64>, timeout: Duration) -> bool {
        let Some(state) = state else {
            self.stuck = None;
            return false;
        };
        match self.stuck {
            Some((since, same)) if same == state => {
                if now >= since + timeout {
                    self.stuck = None;
                    return true;
                }
                false
            }
            _ => {
                self.stuck = Some((now, state));
                false
            }
        }
    }

    /// Feeds the holders and each lock's highest fence to `h`, for a
    /// state's fingerprint. Left out: when each waiting client asked (used
    /// only to count out-of-order grants) and since when the run has been
    /// stuck (a state is stuck or not by itself, and a stuck one is
    /// reported as a deadlock by every run that reaches it; only the
    /// moment differs).
    pub(super) fn hash_state<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        self.holders.hash(h);
        for (name, fences) in &self.fences {
            (name, fences.last(), self.written.get(name)).hash(h);
        }
    }
}

impl<C: Chooser> Simulation<C> {
    pub(super) fn violation(&mut self, invariant: Invariant, detail: String) {
        if self.cfg.progress_only && invariant.is_unsafe() {
            self.trace(|| format!("(not judged) {invariant}: {detail}"));
            return;
        }
        self.trace(|| format!("VIOLATION {invariant}: {detail}"));
        let text = format!("{invariant}: {detail}");
        self.record(|r, at| r.mark(at, None, MarkKind::Violation, text));
        self.report.violations.push(Violation {
            invariant,
            detail,
            at_us: self.now.as_micros() as u64,
        });
    }

    /// `" name"` when the clients spread over several locks, for a line
    /// about a grant.
    pub(super) fn named(&self, name: &Name) -> String {
        if self.workload.named() {
            format!(" {name}")
        } else {
            String::new()
        }
    }

    pub(super) fn on_grant(&mut self, node: NodeId, name: Name, fence: Fence) {
        let named = self.named(&name);
        let engine = self.nodes[&node].engine.as_ref();
        let mode = engine.map_or(Mode::Write, |e| e.mode_of(&name, fence));
        let takers = engine.map_or(Takers::First, |e| e.takers(&name, fence));
        let clients = self.workload.takers(node, &name, takers);
        if clients.is_empty() {
            // Judged as safety (ignored when only progress is judged): a
            // grant nobody asked for is not handed to any client.
            let states = self.workload.states_at(node);
            self.violation(
                Invariant::Safety,
                format!("{node} was granted{named} while no client of it waited ({states:?})"),
            );
            return;
        }
        for (i, &client) in clients.iter().enumerate() {
            self.client_enters(client, &name, (fence, mode), i > 0);
        }
        // All hold the grant before any acts on it: one that lets go at
        // once must not find it unused while the others are still to take
        // it.
        let taken: Vec<_> =
            clients.iter().map(|&c| (c, self.workload.granted(c, name.clone(), fence))).collect();
        for (client, taken) in taken {
            self.taken(client, taken);
        }
    }

    /// `client` enters `name` on its node's grant `fence`, in `mode`;
    /// `joined` when it shares the grant with the readers of its node
    /// that entered on it just before.
    fn client_enters(
        &mut self,
        client: ClientId,
        name: &Name,
        (fence, mode): (Fence, Mode),
        joined: bool,
    ) {
        let (node, name) = (client.node, name.clone());
        let named = self.named(&name);
        let reading = if mode == Mode::Read { " to read" } else { "" };
        self.trace(|| format!("{client} ENTERS{named}{reading} with fence {fence}"));
        self.record(|r, at| r.enter(at, node, fence.0));
        self.report.entries += 1;
        self.end_frozen_holds(&name);
        let allowed = self.cfg.checked_capacity.unwrap_or(self.cfg.capacity);
        let rising = self.cfg.capacity == 1;
        let nodes = &self.nodes;
        let stamp = |id: NodeId| nodes[&id].engine.as_ref().and_then(|e| e.request_stamp(&name));
        let verdict = self.checker.granted(
            client,
            &name,
            (fence, mode, joined),
            self.now,
            (allowed, rising),
            stamp,
        );
        if verdict.overtook {
            self.report.out_of_order += 1;
        }
        if mode == Mode::Read {
            self.report.read_entries += 1;
        }
        if verdict.shared {
            self.report.shared_reads += 1;
        }
        if let Some(reads) = verdict.bypassed {
            self.report.write_bypass_max = self.report.write_bypass_max.max(reads);
        }
        if let Some(delay) = verdict.sync_delay {
            self.report.sync_delays_us.push(delay.as_micros() as u64);
        }
        if self.nodes[&node].engine.as_ref().and_then(Engine::coordinator) == Some(node) {
            self.report.coordinator_entries += 1;
        }
        if let Some(crowd) = verdict.crowd {
            let holders: Vec<String> = crowd.iter().map(ClientId::to_string).collect();
            self.violation(
                Invariant::Safety,
                format!(
                    "{client} entered{named}{reading} while {} held (capacity {allowed})",
                    holders.join(", ")
                ),
            );
        }
        if let Some(max) = verdict.stale {
            self.violation(
                Invariant::Fence,
                format!("{client} was granted{named} fence {fence}, not above the earlier {max}"),
            );
        }
    }

    /// In majority mode, a holder whose node is paused and whose lease
    /// has run out holds no longer: its node tells it so the moment it
    /// runs again, before it can touch anything (the client here is frozen
    /// with its node). Such a hold is counted as a lease overlap, not
    /// judged as two holders, as a frozen client's is on a real cluster.
    fn end_frozen_holds(&mut self, name: &Name) {
        if self.cfg.timing.lease.partitions != coterie_core::Partitions::Majority {
            return;
        }
        let now = self.now;
        for holder in self.checker.holders_of(name) {
            let over = self.faults.paused(holder.node)
                && self.nodes[&holder.node]
                    .engine
                    .as_ref()
                    .is_some_and(|e| e.membership().lease_end().is_none_or(|end| end <= now));
            if over {
                self.trace(|| {
                    format!("{holder}'s lease ran out while it was paused holding {name:?}")
                });
                self.checker.released(holder, std::slice::from_ref(name), now);
                self.report.lease_overlaps += 1;
            }
        }
    }

    /// Reports a deadlock once the run has been stuck (see
    /// [`stuck_state`](Self::stuck_state)) in one state of the algorithms
    /// for a whole failure timeout. By then every node has heard every
    /// peer's heartbeat, sent in that state, and changed nothing; the next
    /// heartbeats say the same (a heartbeat carries only the sender's
    /// state), so nothing ever changes again. This rests on the handlers
    /// acting on what a heartbeat says, never on the time alone: an
    /// algorithm that waits for time to pass arms a timer, and an armed
    /// timer means not stuck.
    pub(super) fn watch_for_deadlock(&mut self) {
        let state = self.stuck_state();
        if self.checker.watch(self.now, state, self.cfg.timing.failure_timeout) {
            let waiting = self.describe(|state| state == ClientState::Waiting);
            self.violation(
                Invariant::Deadlock,
                format!("{waiting} wait, and nothing but heartbeats is left to happen"),
            );
        }
    }

    /// A hash of the algorithms' state if the run is stuck but for
    /// heartbeats: a client waits; every node is up, unpaused and idle
    /// ([`Engine::idle`]); no partition, spike or loss is in force; and
    /// nothing is queued but heartbeats and wake-ups (so no fault, no
    /// client step and no other message is to come).
    fn stuck_state(&self) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        if !self.workload.anyone_waits()
            || self.net.mutex_in_flight() > 0
            || !self.net.calm()
            || !self.faults.none_paused()
            || !self.nodes.values().all(|n| n.engine.as_ref().is_some_and(Engine::idle))
        {
            return None;
        }
        let only_beats = self.agenda.iter().all(|(_, event)| {
            matches!(event, Event::Deliver { carries: Carries::Heartbeat, .. } | Event::Wake { .. })
        });
        if !only_beats {
            return None;
        }
        let mut h = state_hasher();
        self.workload.hash_states(&mut h);
        for (id, n) in &self.nodes {
            id.hash(&mut h);
            n.engine.as_ref().expect("checked above").hash_algorithms(&mut h, self.now);
        }
        Some(h.finish())
    }

    /// The live nodes whose clients' state `which` picks, each with its
    /// client's and engine's state and the coordinator it follows, for a
    /// violation's detail.
    fn describe(&self, which: impl Fn(ClientState) -> bool) -> String {
        let nodes: Vec<String> = self
            .workload
            .select(which)
            .into_iter()
            .filter_map(|id| {
                let e = self.nodes[&id.node].engine.as_ref()?;
                let coordinator = e.coordinator().map_or("none".into(), |c| c.to_string());
                Some(format!(
                    "{id} ({:?}, engine {}, coordinator {coordinator})",
                    self.workload.state(id),
                    e.cs_state()
                ))
            })
            .collect();
        nodes.join(", ")
    }

    pub(super) fn final_checks(&mut self) {
        if !self.report.violations.is_empty() {
            return;
        }
        if !self.workload_done() {
            let stuck = self.describe(|state| state != ClientState::Done);
            self.violation(Invariant::Liveness, format!("requests never served by {stuck}"));
            return;
        }
        let live: Vec<(NodeId, Option<NodeId>, Epoch)> = self
            .nodes
            .iter()
            .filter_map(|(&id, n)| n.engine.as_ref().map(|e| (id, e.coordinator(), e.epoch())))
            .collect();
        let highest = live.iter().map(|(id, _, _)| *id).max();
        let epoch = live.first().map(|(_, _, e)| *e);
        for &(id, coordinator, e) in &live {
            if coordinator != highest || Some(e) != epoch {
                let views: Vec<String> = live
                    .iter()
                    .map(|(id, c, e)| {
                        format!("{id}:{}@{e}", c.map_or("none".into(), |c| c.to_string()))
                    })
                    .collect();
                self.violation(
                    Invariant::Agreement,
                    format!(
                        "{id} disagrees; expected {} everywhere, views {}",
                        highest.map_or("none".into(), |h| h.to_string()),
                        views.join(" ")
                    ),
                );
                return;
            }
        }
    }
}
