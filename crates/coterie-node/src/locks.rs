//! The application's locks, after the picture in Jones's lecture notes
//! (22C:116, Iowa, 2002): the algorithms grant the *node*, and the node
//! hands each grant to one of its client sessions, in the order they
//! asked. Most algorithms grant a node one permit of a lock at a time; one
//! that counts sessions grants it as many as its sessions ask for, up to
//! the lock's permits, each grant to a session of its own. This is that
//! table: for every name this node's clients hold or want, who holds the
//! node's grants of it and who waits, with what they said of themselves.
//!
//! It is the demand the agent serves: the agent reads what a name's
//! sessions want ([`Locks::demand`]) and asks or releases the engine so
//! that it follows, and hands what the engine grants to the first session
//! still waiting ([`Locks::grant`]). The agent takes this table's lock
//! inside its own, never the other way round: client sessions change the
//! table first, let go, and then ask the agent to follow
//! ([`Agent::sync`](crate::agent::Agent::sync)).
//!
//! It also keeps the **lock delay** for sessions lost while holding
//! (Chubby's and Consul's): the node holds on their behalf until the delay
//! ends ([`Locks::lose`]), so that a resource which cannot check fences
//! sees the lost holder's last writes land first. Times are the node's,
//! measured from its start.

use crate::metrics::Metrics;
use crate::protocol::RevokeAsked;
use coterie_core::{Demand, Fence, Mode, Name, Takers};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{broadcast, oneshot, Notify};

/// Who a session is, as listings show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Client {
    /// The session's number at this node.
    pub(crate) session: u64,
    /// What the client calls itself (`pid@host` for the CLI).
    pub(crate) label: String,
}

/// A session holding a name's grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    /// Who.
    pub(crate) client: Client,
    /// The grant's fence.
    pub(crate) fence: Fence,
    /// Since when.
    pub(crate) since: Duration,
    /// What it said it holds the lock for (a campaign's value).
    pub(crate) value: Option<String>,
    /// Why it was asked to let go, once someone asked
    /// ([`Locks::ask_to_let_go`]): the reason given, empty if none was.
    pub(crate) revoke: Option<String>,
    /// Whether it reads or writes.
    pub(crate) mode: Mode,
}

/// A request to a session to let go of a name it holds
/// ([`Locks::ask_to_let_go`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plea {
    /// The session asked.
    pub(crate) session: u64,
    /// The name.
    pub(crate) name: Name,
    /// The fence of the session's grant.
    pub(crate) fence: Fence,
    /// Why, as whoever asked said.
    pub(crate) reason: Option<String>,
}

impl Plea {
    /// The plea as its session is told it: a pushed frame, or a `revoke`
    /// event on an HTTP session's stream.
    pub(crate) fn told(self) -> RevokeAsked {
        RevokeAsked { name: self.name.to_string(), fence: self.fence.0, reason: self.reason }
    }
}

/// A session waiting for a name.
struct Waiter {
    client: Client,
    since: Duration,
    value: Option<String>,
    mode: Mode,
    grant: oneshot::Sender<Fence>,
}

/// One name at this node.
struct Local {
    permits: u32,
    /// The sessions holding the node's grants, in the order granted.
    holders: Vec<Holder>,
    waiters: VecDeque<Waiter>,
    /// Sessions lost while holding: the node holds on their behalf until
    /// then (what they held is kept for listings).
    orphans: Vec<(Holder, Duration)>,
}

impl Local {
    fn unused(&self) -> bool {
        self.holders.is_empty() && self.waiters.is_empty() && self.orphans.is_empty()
    }
}

/// What became of a grant handed to the table.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Handed {
    /// To these sessions, first first: one, or readers sharing it.
    To(Vec<Client>),
    /// Nobody waits any more: the node should give it back.
    Nobody,
}

/// Why a session may not wait for a name.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    /// It holds or waits for it already.
    #[error("this session holds or waits for {0:?} already")]
    Twice(Name),
    /// Its clients here ask it with other permits.
    #[error("lock {name:?} is asked for here with {live} permits, not {asked}")]
    Permits {
        /// The name.
        name: Name,
        /// The permits it is asked with.
        live: u32,
        /// The permits this session asked.
        asked: u32,
    },
    /// `[limits] max_pending` sessions wait already.
    #[error(
        "this node has {0} requests waiting already ([limits] max_pending): try again later, \
         or another node"
    )]
    Busy(usize),
    /// `[limits] max_names` names are in use here already.
    #[error(
        "this node serves {0} lock names already ([limits] max_names): release some, or use \
         another node"
    )]
    Names(usize),
}

/// A name as listings show it: this node's part of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LocalLock {
    /// The name.
    pub(crate) name: Name,
    /// Its permits.
    pub(crate) permits: u32,
    /// The sessions holding the node's grants, and whether the node
    /// holds it for that session, lost (the lock delay).
    pub(crate) holders: Vec<(Holder, bool)>,
    /// Sessions waiting, first served first: who, since when, and how.
    pub(crate) waiters: Vec<(Client, Duration, Mode)>,
}

/// The limits the table keeps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Sessions that may wait at once.
    pub(crate) max_pending: usize,
    /// Names that may be in use at once.
    pub(crate) max_names: usize,
}

/// How much of the table is in use ([`Locks::load`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Load {
    /// Grants a session holds, or the node holds for a lost one.
    pub(crate) held: usize,
    /// Sessions waiting.
    pub(crate) waiting: usize,
}

#[derive(Default)]
struct Table {
    next_session: u64,
    names: BTreeMap<Name, Local>,
    waiting: usize,
}

/// The table; see the module documentation.
pub(crate) struct Locks {
    table: Mutex<Table>,
    limits: Limits,
    /// Where waits and holds are timed.
    metrics: Metrics,
    /// Poked when a lock delay starts: the application's timer task looks
    /// at the deadline again.
    changed: Notify,
    /// Tells each session that lost a hold the node itself gave up (its
    /// lease ran out): the session's number and the name.
    taken_back: broadcast::Sender<(u64, Name)>,
    /// Tells each session asked to let go of a name it holds.
    pleas: broadcast::Sender<Plea>,
}

impl Locks {
    /// An empty table.
    pub(crate) fn new(limits: Limits, metrics: Metrics) -> Locks {
        Locks {
            table: Mutex::new(Table::default()),
            limits,
            metrics,
            changed: Notify::new(),
            taken_back: broadcast::channel(256).0,
            pleas: broadcast::channel(256).0,
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock is a bug in this process; carrying
        // on with the table it left is better than a cascade of panics.
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new client session's number.
    pub(crate) fn new_session(&self) -> u64 {
        let mut t = self.table();
        t.next_session += 1;
        t.next_session
    }

    /// Queues `client` for `name` (`permits` of it, in `mode`), to be
    /// handed the grant through `grant`; then the agent must follow
    /// ([`Agent::sync`](crate::agent::Agent::sync)).
    pub(crate) fn wait(
        &self,
        client: Client,
        name: &Name,
        (permits, mode): (u32, Mode),
        value: Option<String>,
        now: Duration,
        grant: oneshot::Sender<Fence>,
    ) -> Result<(), Refused> {
        let mut t = self.table();
        if t.waiting >= self.limits.max_pending {
            return Err(Refused::Busy(self.limits.max_pending));
        }
        let names = t.names.len();
        let local = match t.names.get_mut(name) {
            Some(local) => local,
            None if names >= self.limits.max_names => {
                return Err(Refused::Names(self.limits.max_names))
            }
            None => t.names.entry(name.clone()).or_insert(Local {
                permits,
                holders: Vec::new(),
                waiters: VecDeque::new(),
                orphans: Vec::new(),
            }),
        };
        if local.permits != permits {
            let live = local.permits;
            return Err(Refused::Permits { name: name.clone(), live, asked: permits });
        }
        let mine = |c: &Client| c.session == client.session;
        if local.holders.iter().any(|h| mine(&h.client))
            || local.waiters.iter().any(|w| mine(&w.client))
        {
            return Err(Refused::Twice(name.clone()));
        }
        local.waiters.push_back(Waiter { client, since: now, value, mode, grant });
        t.waiting += 1;
        Ok(())
    }

    /// Takes `session` off `name` at `now`, whether it holds or waits;
    /// `true` if it held. The agent must then follow.
    pub(crate) fn leave(&self, session: u64, name: &Name, now: Duration) -> bool {
        self.lose(session, name, now, None)
    }

    /// `session`, holding `name` with `fence`, now says it holds it for
    /// `value` (a leader's proclamation); `false` if it does not hold it
    /// with that fence.
    pub(crate) fn proclaim(&self, session: u64, name: &Name, fence: Fence, value: String) -> bool {
        let mut t = self.table();
        let Some(local) = t.names.get_mut(name) else { return false };
        let holder =
            local.holders.iter_mut().find(|h| h.client.session == session && h.fence == fence);
        match holder {
            Some(h) => {
                h.value = Some(value);
                true
            }
            None => false,
        }
    }

    /// `session` was lost (its client vanished or fell silent): it gives up
    /// its place for `name`, and if it held, the node holds on its behalf
    /// until `until` (the lock delay, if any). `true` if it held. The
    /// agent must then follow.
    pub(crate) fn lose(
        &self,
        session: u64,
        name: &Name,
        now: Duration,
        until: Option<Duration>,
    ) -> bool {
        let mut t = self.table();
        let Some(local) = t.names.get_mut(name) else { return false };
        let before = local.waiters.len();
        local.waiters.retain(|w| w.client.session != session);
        let left = before - local.waiters.len();
        let at = local.holders.iter().position(|h| h.client.session == session);
        let holder = at.map(|at| local.holders.remove(at));
        let held = holder.is_some();
        if let Some(holder) = holder {
            self.metrics.held(now.saturating_sub(holder.since));
            local.orphans.extend(until.map(|until| (holder, until)));
        }
        if local.unused() {
            t.names.remove(name);
        }
        t.waiting -= left;
        drop(t);
        if held && until.is_some() {
            self.changed.notify_one();
        }
        held
    }

    /// The node no longer holds `name` under the grant `fence` (its lease
    /// ran out, or it started over in a new view): the sessions holding it
    /// (one, or readers sharing it) are told, and a lost holder's lock
    /// delay ends with it. The agent must then follow. The sessions they
    /// were.
    pub(crate) fn take_back(&self, name: &Name, fence: Fence, now: Duration) -> Vec<u64> {
        let mut t = self.table();
        let Some(local) = t.names.get_mut(name) else { return Vec::new() };
        local.orphans.retain(|(h, _)| h.fence != fence);
        let (taken, kept) =
            std::mem::take(&mut local.holders).into_iter().partition(|h| h.fence == fence);
        local.holders = kept;
        if local.unused() {
            t.names.remove(name);
        }
        drop(t);
        let taken: Vec<Holder> = taken;
        taken
            .into_iter()
            .map(|holder| {
                self.metrics.held(now.saturating_sub(holder.since));
                let _ = self.taken_back.send((holder.client.session, name.clone()));
                holder.client.session
            })
            .collect()
    }

    /// Hears of the holds taken from sessions ([`take_back`](Self::take_back)).
    pub(crate) fn takings_back(&self) -> broadcast::Receiver<(u64, Name)> {
        self.taken_back.subscribe()
    }

    /// Asks every session holding `name` here to let go, for `reason`
    /// (cooperative revocation: nothing is taken from them). Each is
    /// told ([`pleas`](Self::pleas)), and listings show that it was
    /// asked. Holders the node keeps for lost sessions are not asked:
    /// nobody is there to hear. How many were asked.
    pub(crate) fn ask_to_let_go(&self, name: &Name, reason: Option<String>) -> u32 {
        let mut t = self.table();
        let Some(local) = t.names.get_mut(name) else { return 0 };
        let asked: Vec<Plea> = local
            .holders
            .iter_mut()
            .map(|h| {
                h.revoke = Some(reason.clone().unwrap_or_default());
                Plea {
                    session: h.client.session,
                    name: name.clone(),
                    fence: h.fence,
                    reason: reason.clone(),
                }
            })
            .collect();
        drop(t);
        for plea in &asked {
            let _ = self.pleas.send(plea.clone());
        }
        let asked = asked.len() as u32;
        self.metrics.asked_to_let_go(asked);
        asked
    }

    /// Why `session` was asked to let go of `name`, if it holds it and
    /// was asked: the reason given, empty if none was.
    pub(crate) fn asked(&self, session: u64, name: &Name) -> Option<String> {
        let t = self.table();
        let holders = t.names.get(name).map_or(&[][..], |l| &l.holders);
        holders.iter().find(|h| h.client.session == session).and_then(|h| h.revoke.clone())
    }

    /// Hears of the sessions asked to let go
    /// ([`ask_to_let_go`](Self::ask_to_let_go)).
    pub(crate) fn pleas(&self) -> broadcast::Receiver<Plea> {
        self.pleas.subscribe()
    }

    /// Whether `session` holds `name` with `fence`.
    pub(crate) fn holds(&self, session: u64, name: &Name, fence: Fence) -> bool {
        let t = self.table();
        let holders = t.names.get(name).map_or(&[][..], |l| &l.holders);
        holders.iter().any(|h| h.client.session == session && h.fence == fence)
    }

    /// What `name`'s sessions want of the engine.
    pub(crate) fn demand(&self, name: &Name) -> Demand {
        let t = self.table();
        match t.names.get(name) {
            None => Demand::NONE,
            Some(l) => {
                let held = l.holders.iter().chain(l.orphans.iter().map(|(h, _)| h));
                let reading = |m: &Mode| *m == Mode::Read;
                let waiting_reads = l.waiters.iter().map(|w| w.mode).filter(reading).count();
                let held_reads = held.clone().map(|h| h.mode).filter(reading).count();
                Demand {
                    permits: l.permits,
                    used: held.map(|h| h.fence).collect(),
                    waiting: l.waiters.len() as u32,
                    reads: (held_reads + waiting_reads) as u32,
                    waiting_reads: waiting_reads as u32,
                }
            }
        }
    }

    /// Hands the node's grant of `name` to the sessions still waiting for
    /// it that `takers` names (the engine's
    /// [`takers`](coterie_core::Engine::takers)); one that went away
    /// meanwhile is skipped. For [`Takers::Readers`], the first reader
    /// waiting and every reader after it up to the next writer: they all
    /// hold the grant, and the node keeps it until the last lets go.
    pub(crate) fn grant(&self, name: &Name, fence: Fence, takers: Takers, now: Duration) -> Handed {
        let mut t = self.table();
        let Some(local) = t.names.get_mut(name) else { return Handed::Nobody };
        let first = |waiters: &VecDeque<Waiter>| match takers {
            Takers::First => (!waiters.is_empty()).then_some(0),
            Takers::FirstIn(mode) => waiters.iter().position(|w| w.mode == mode),
            Takers::Readers => waiters.iter().position(|w| w.mode == Mode::Read),
        };
        let mut taken = 0;
        let mut handed = Vec::new();
        let mut next = first(&local.waiters);
        while let Some(at) = next {
            let Some(waiter) = local.waiters.remove(at) else { break };
            taken += 1;
            if waiter.grant.send(fence).is_ok() {
                self.metrics.granted(now.saturating_sub(waiter.since), waiter.value.is_some());
                handed.push(waiter.client.clone());
                let (value, since, mode) = (waiter.value, now, waiter.mode);
                let holder =
                    Holder { client: waiter.client, fence, since, value, revoke: None, mode };
                local.holders.push(holder);
            }
            let reads_on = local.waiters.get(at).is_some_and(|w| w.mode == Mode::Read);
            next = match takers {
                _ if handed.is_empty() => first(&local.waiters),
                Takers::Readers if reads_on => Some(at),
                _ => None,
            };
        }
        if local.unused() {
            t.names.remove(name);
        }
        t.waiting -= taken;
        if handed.is_empty() {
            Handed::Nobody
        } else {
            Handed::To(handed)
        }
    }

    /// When the next lock delay for a lost holder ends.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        self.table().names.values().flat_map(|l| l.orphans.iter().map(|(_, t)| *t)).min()
    }

    /// Ends the lock delays due by `now`: the names the agent must follow.
    pub(crate) fn expire(&self, now: Duration) -> Vec<Name> {
        let mut t = self.table();
        let mut due = Vec::new();
        for (name, local) in t.names.iter_mut() {
            let before = local.orphans.len();
            local.orphans.retain(|(_, until)| *until > now);
            if local.orphans.len() < before {
                due.push(name.clone());
            }
        }
        t.names.retain(|_, l| !l.unused());
        due
    }

    /// Ends each lock delay for a lost holder when it is due, and has
    /// `follow` make the engine follow (the agent's
    /// [`sync`](crate::agent::Agent::sync)), until `shutdown`. `now` is the
    /// node's clock.
    pub(crate) async fn expire_delays(
        &self,
        now: impl Fn() -> Duration,
        follow: impl Fn(&Name),
        mut shutdown: crate::shutdown::Shutdown,
    ) {
        loop {
            let wait = self.deadline().map(|d| d.saturating_sub(now()));
            let sleep = async {
                match wait {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => {
                    for name in self.expire(now()) {
                        tracing::info!(%name, "lock delay over: releasing for the lost session");
                        follow(&name);
                    }
                }
                _ = self.changed.notified() => {}
                _ = shutdown.recv() => return,
            }
        }
    }

    /// This node's part of every name starting with `prefix`.
    pub(crate) fn snapshot(&self, prefix: &str) -> Vec<LocalLock> {
        let t = self.table();
        t.names
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(|(name, _)| name.as_str().starts_with(prefix))
            .map(|(name, l)| LocalLock {
                name: name.clone(),
                permits: l.permits,
                holders: l
                    .holders
                    .iter()
                    .map(|h| (h.clone(), false))
                    .chain(l.orphans.iter().map(|(h, _)| (h.clone(), true)))
                    .collect(),
                waiters: l.waiters.iter().map(|w| (w.client.clone(), w.since, w.mode)).collect(),
            })
            .collect()
    }

    /// How many names are held here, and how many sessions wait.
    pub(crate) fn load(&self) -> Load {
        let t = self.table();
        let held = t.names.values().map(|l| l.holders.len() + l.orphans.len()).sum();
        Load { held, waiting: t.waiting }
    }

    /// How many names are in use here.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table().names.len()
    }
}

/// The next plea to `session` to let go of a lock it holds
/// ([`Locks::ask_to_let_go`]); `None` once the table is gone. Pleas lost
/// to a receiver that lagged behind are not made good: a revocation
/// asks, it takes nothing.
pub(crate) async fn plea_for(pleas: &mut broadcast::Receiver<Plea>, session: u64) -> Option<Plea> {
    loop {
        match pleas.recv().await {
            Ok(plea) if plea.session == session => return Some(plea),
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn name(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    fn locks() -> Locks {
        Locks::new(Limits { max_pending: 3, max_names: 2 }, Metrics::default())
    }

    fn client(locks: &Locks) -> Client {
        Client { session: locks.new_session(), label: "test".into() }
    }

    #[test]
    fn a_grant_goes_to_the_first_session_still_waiting() {
        let locks = locks();
        let (a, b) = (client(&locks), client(&locks));
        let (tx_a, rx_a) = oneshot::channel();
        let (tx_b, mut rx_b) = oneshot::channel();
        locks.wait(a.clone(), &name("x"), (1, Mode::Write), None, ms(0), tx_a).unwrap();
        locks.wait(b.clone(), &name("x"), (1, Mode::Write), Some("v".into()), ms(1), tx_b).unwrap();
        assert_eq!(
            locks.demand(&name("x")),
            Demand { permits: 1, used: vec![], waiting: 2, reads: 0, waiting_reads: 0 }
        );
        drop(rx_a); // a went away
        assert_eq!(
            locks.grant(&name("x"), Fence(7), Takers::First, ms(2)),
            Handed::To(vec![b.clone()])
        );
        assert_eq!(rx_b.try_recv(), Ok(Fence(7)));
        let snap = locks.snapshot("");
        assert_eq!(snap[0].holders[0].0.value.as_deref(), Some("v"));
        assert_eq!(locks.load(), Load { held: 1, waiting: 0 });
        assert!(locks.leave(b.session, &name("x"), ms(3)));
        assert_eq!(locks.demand(&name("x")), Demand::NONE);
        assert_eq!(locks.len(), 0, "an unused name is forgotten");
        assert_eq!(locks.grant(&name("x"), Fence(8), Takers::First, ms(3)), Handed::Nobody);
    }

    /// A read grant, where the node asks once for all its sessions, goes
    /// to every reader waiting ahead of the first writer; they share it,
    /// the node uses it until the last lets go, and losing it takes it
    /// from each of them.
    #[test]
    fn readers_waiting_together_share_one_grant_and_lose_it_together() {
        let locks = Locks::new(Limits { max_pending: 8, max_names: 2 }, Metrics::default());
        let who: Vec<Client> = (0..4).map(|_| client(&locks)).collect();
        let mut rx = Vec::new();
        for (c, mode) in who.iter().zip([Mode::Read, Mode::Read, Mode::Write, Mode::Read]) {
            let (tx, r) = oneshot::channel();
            locks.wait(c.clone(), &name("x"), (1, mode), None, ms(0), tx).unwrap();
            rx.push(r);
        }
        let shared = vec![who[0].clone(), who[1].clone()];
        assert_eq!(locks.grant(&name("x"), Fence(9), Takers::Readers, ms(1)), Handed::To(shared));
        assert_eq!((rx[0].try_recv(), rx[1].try_recv()), (Ok(Fence(9)), Ok(Fence(9))));
        assert!(rx[3].try_recv().is_err(), "the reader behind the writer waits");
        let demand = locks.demand(&name("x"));
        assert_eq!((demand.used, demand.waiting), (vec![Fence(9), Fence(9)], 2));
        // One reader leaves: the other still uses the grant.
        assert!(locks.leave(who[0].session, &name("x"), ms(2)));
        assert_eq!(locks.demand(&name("x")).used, vec![Fence(9)]);
        locks.leave(who[2].session, &name("x"), ms(2));
        // Losing the grant takes it from every reader still on it.
        let (tx, _r) = oneshot::channel();
        locks.wait(who[2].clone(), &name("x"), (1, Mode::Read), None, ms(3), tx).unwrap();
        let shared = vec![who[3].clone(), who[2].clone()];
        assert_eq!(locks.grant(&name("x"), Fence(10), Takers::Readers, ms(4)), Handed::To(shared));
        let mut told = locks.takings_back();
        let taken = locks.take_back(&name("x"), Fence(10), ms(5));
        assert_eq!(taken, vec![who[3].session, who[2].session]);
        assert_eq!(told.try_recv().unwrap().0, who[3].session);
        assert_eq!(told.try_recv().unwrap().0, who[2].session);
        assert_eq!(locks.demand(&name("x")).used, vec![Fence(9)]);
    }

    /// Grants of a lock of several permits go to as many sessions, each
    /// with its own fence; the demand counts them and what still waits.
    #[test]
    fn several_grants_of_one_name_go_to_as_many_sessions() {
        let locks = locks();
        let (a, b, c) = (client(&locks), client(&locks), client(&locks));
        let mut rx = Vec::new();
        for who in [&a, &b, &c] {
            let (tx, r) = oneshot::channel();
            locks.wait(who.clone(), &name("x"), (2, Mode::Write), None, ms(0), tx).unwrap();
            rx.push(r);
        }
        assert_eq!(locks.demand(&name("x")).waiting, 3);
        assert_eq!(
            locks.grant(&name("x"), Fence(5), Takers::First, ms(1)),
            Handed::To(vec![a.clone()])
        );
        assert_eq!(
            locks.grant(&name("x"), Fence(6), Takers::First, ms(1)),
            Handed::To(vec![b.clone()])
        );
        let demand = locks.demand(&name("x"));
        assert_eq!(
            (demand.used, demand.waiting, locks.load().held),
            (vec![Fence(5), Fence(6)], 1, 2)
        );
        assert!(locks.holds(a.session, &name("x"), Fence(5)));
        assert!(!locks.holds(a.session, &name("x"), Fence(6)), "b's grant");
        assert!(locks.leave(a.session, &name("x"), ms(2)));
        assert_eq!(locks.demand(&name("x")).used, vec![Fence(6)]);
        assert_eq!(
            locks.grant(&name("x"), Fence(7), Takers::First, ms(3)),
            Handed::To(vec![c.clone()])
        );
        let holders: Vec<u64> =
            locks.snapshot("x")[0].holders.iter().map(|(h, _)| h.fence.0).collect();
        assert_eq!(holders, [6, 7]);
    }

    #[test]
    fn only_the_holder_with_its_fence_proclaims_a_new_value() {
        let locks = locks();
        let (a, b) = (client(&locks), client(&locks));
        let (tx, _rx) = oneshot::channel();
        locks.wait(a.clone(), &name("x"), (1, Mode::Write), Some("v1".into()), ms(0), tx).unwrap();
        locks.grant(&name("x"), Fence(4), Takers::First, ms(0));
        assert!(!locks.proclaim(b.session, &name("x"), Fence(4), "b".into()), "not the holder");
        assert!(!locks.proclaim(a.session, &name("x"), Fence(3), "old".into()), "an old fence");
        assert!(!locks.proclaim(a.session, &name("y"), Fence(4), "y".into()), "not held");
        assert!(locks.proclaim(a.session, &name("x"), Fence(4), "v2".into()));
        let snap = locks.snapshot("x");
        assert_eq!(snap[0].holders[0].0.value.as_deref(), Some("v2"));
    }

    #[test]
    fn a_session_lost_while_holding_keeps_the_node_holding_for_the_delay() {
        let locks = locks();
        let a = client(&locks);
        let (tx, _rx) = oneshot::channel();
        locks.wait(a.clone(), &name("x"), (1, Mode::Write), None, ms(0), tx).unwrap();
        locks.grant(&name("x"), Fence(1), Takers::First, ms(0));
        assert!(locks.lose(a.session, &name("x"), ms(0), Some(ms(500))));
        assert!(locks.demand(&name("x")).holding(), "held for the lost session");
        assert_eq!(locks.load(), Load { held: 1, waiting: 0 }, "held for the lost session");
        assert_eq!(locks.deadline(), Some(ms(500)));
        assert!(locks.expire(ms(499)).is_empty());
        assert_eq!(locks.expire(ms(500)), vec![name("x")]);
        assert_eq!(locks.demand(&name("x")), Demand::NONE);
        assert_eq!(locks.deadline(), None);
    }

    #[test]
    fn limits_and_mismatches_are_refused_and_change_nothing() {
        let locks = locks();
        let a = client(&locks);
        let wait = |c: &Client, n: &str, permits| {
            locks.wait(
                c.clone(),
                &name(n),
                (permits, Mode::Write),
                None,
                ms(0),
                oneshot::channel().0,
            )
        };
        wait(&a, "x", 2).unwrap();
        assert!(matches!(wait(&a, "x", 2), Err(Refused::Twice(_))));
        let b = client(&locks);
        assert!(matches!(wait(&b, "x", 1), Err(Refused::Permits { live: 2, asked: 1, .. })));
        wait(&b, "y", 1).unwrap();
        assert_eq!(wait(&b, "z", 1), Err(Refused::Names(2)));
        wait(&b, "x", 2).unwrap();
        let c = client(&locks);
        assert_eq!(wait(&c, "x", 2), Err(Refused::Busy(3)));
        assert_eq!(locks.len(), 2);
        assert_eq!(locks.load(), Load { held: 0, waiting: 3 });
    }

    #[test]
    fn listings_are_by_prefix() {
        let locks = Locks::new(Limits { max_pending: 10, max_names: 10 }, Metrics::default());
        let a = client(&locks);
        for n in ["jobs/a", "jobs/b", "job", "printer"] {
            locks
                .wait(a.clone(), &name(n), (1, Mode::Write), None, ms(0), oneshot::channel().0)
                .unwrap();
        }
        let names: Vec<String> =
            locks.snapshot("jobs/").iter().map(|l| l.name.to_string()).collect();
        assert_eq!(names, ["jobs/a", "jobs/b"]);
        assert_eq!(locks.snapshot("").len(), 4);
    }
}
