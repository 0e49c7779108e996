//! What a run is judged by: at every grant (safety, fences, fairness), at
//! every step (deadlock) and at its end (liveness, agreement). The
//! [`Checker`] keeps what judging needs (who holds which lock, every fence
//! granted, who waits since when); the invariants themselves are named in
//! [`crate::invariant`]. The simulation hands it what it judges and
//! reports what it finds.

use super::client::ClientId;
use super::report::RunReport;
use coterie_core::{Epoch, Fence, Mode, Name, NodeId, Stamp, Time};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

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

impl Verdict {
    /// Counts the grant, to a client in `mode`, in `report`.
    pub(super) fn count(&self, mode: Mode, report: &mut RunReport) {
        if self.overtook {
            report.counts.out_of_order += 1;
        }
        if mode == Mode::Read {
            report.counts.read_entries += 1;
        }
        if self.shared {
            report.counts.shared_reads += 1;
        }
        if let Some(reads) = self.bypassed {
            report.write_bypass_max = report.write_bypass_max.max(reads);
        }
        if let Some(delay) = self.sync_delay {
            report.sync_delays_us.push(delay.as_micros() as u64);
        }
    }
}

/// Whether the nodes up at a run's end agree, each given with the
/// coordinator it follows and its epoch: every one follows the highest
/// of them, in one epoch. `None` if they do; otherwise what disagrees.
pub(super) fn disagreement(live: &[(NodeId, Option<NodeId>, Epoch)]) -> Option<String> {
    let highest = live.iter().map(|(id, _, _)| *id).max();
    let epoch = live.first().map(|(_, _, e)| *e);
    let (id, ..) =
        live.iter().find(|&&(_, coordinator, e)| coordinator != highest || Some(e) != epoch)?;
    let views: Vec<String> = live
        .iter()
        .map(|(id, c, e)| format!("{id}:{}@{e}", c.map_or("none".into(), |c| c.to_string())))
        .collect();
    Some(format!(
        "{id} disagrees; expected {} everywhere, views {}",
        highest.map_or("none".into(), |h| h.to_string()),
        views.join(" ")
    ))
}
