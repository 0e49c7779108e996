//! Sessions with a TTL, for clients that keep no connection open: the
//! HTTP API's ([`http`](crate::http)), as Consul's sessions and etcd's
//! leases are. A client creates one with a TTL, keeps it alive, and takes
//! and releases locks in its name, each request on any connection; the
//! locks live as long as the session, so a client that reconnects within
//! the TTL keeps them. A session that misses its TTL is *lost*, exactly as
//! a binary-protocol connection that falls silent is
//! ([`session`](crate::session)): what it holds is released after the
//! lock delay, and its waits are withdrawn, so no grant goes to it.
//! Closing a session releases what it holds at once.
//!
//! The registry maps each session's id (128 random bits, in hex: an id is
//! a capability, not to be guessed) to its number in the application's
//! table and what it holds. An expiry task ([`Sessions::expire_due`])
//! ends the sessions whose TTL ran out.

use crate::locks::{Client, Plea};
use crate::metrics::Loss;
use crate::protocol::Acquire;
use crate::session::{clip, Asked, Lease, Refusal, Shared, Taken};
use crate::shutdown::Shutdown;
use coterie_core::{Fence, Mode, Name};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{broadcast, watch, Notify};
use tokio::time::Instant;
use tracing::info;

/// The shortest TTL a session may ask for.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// The longest TTL a session may ask for (Consul's limit).
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Why a request about a session was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SessionError {
    /// No session has this id: it never did, it expired or was closed.
    #[error(
        "no session {} at this node: it expired or was closed, or it was made at another \
         node (a session lives at the node that made it: call that one)",
        crate::session::clip(.0)
    )]
    Unknown(String),
    /// `[limits] max_sessions` sessions are open already.
    #[error("this node has {0} sessions open already ([limits] max_sessions)")]
    TooMany(usize),
    /// The TTL is out of bounds.
    #[error("a session's ttl must be between {min:?} and {max:?}, not {0:?}", min = MIN_TTL, max = MAX_TTL)]
    Ttl(Duration),
}

/// One session.
struct Entry {
    client: Client,
    ttl: Duration,
    expires: Instant,
    /// What it holds, by name.
    holding: BTreeMap<Name, Hold>,
    /// Set when the session ends: its waiting requests give up, its
    /// watchers are told.
    ended: watch::Sender<Option<End>>,
}

/// A lock a session holds.
#[derive(Clone, Copy, Debug)]
struct Hold {
    fence: Fence,
    /// Whether the session leads the name's election (it gave a value).
    led: bool,
    /// How often the session took it (`"reentrant": true`): as many
    /// releases let it go.
    count: u32,
    /// Whether it reads or writes.
    mode: Mode,
}

/// How a session ended, as its watchers are told
/// ([`Sessions::watch`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct End {
    pub(crate) id: String,
    pub(crate) reason: EndReason,
    /// The locks it held then: let go (closed) or lost (expired).
    pub(crate) held: Vec<HeldView>,
}

/// Why a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum EndReason {
    /// Its client closed it.
    Closed,
    /// It missed its TTL.
    Expired,
    /// Its node lost the lease of a majority while it held a lock
    /// (`partitions = "majority"`): a majority may grant the lock again.
    #[serde(rename = "no_quorum")]
    NoQuorum,
}

/// A lock a session holds, as its watchers see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct HeldView {
    pub(crate) name: String,
    pub(crate) fence: u64,
    /// Why the session was asked to let go of it, once it was (a watcher
    /// that comes late learns so here): the reason, empty if none.
    pub(crate) revoke: Option<String>,
}

/// A session as its watchers see it first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct SessionNow {
    pub(crate) id: String,
    pub(crate) ttl: String,
    pub(crate) held: Vec<HeldView>,
}

impl Entry {
    /// What it holds, and whether it was asked to let go of each
    /// (`asked`, as the application's table says).
    fn held(&self, asked: impl Fn(&Name) -> Option<String>) -> Vec<HeldView> {
        let h = self.holding.iter();
        h.map(|(name, hold)| HeldView {
            name: name.to_string(),
            fence: hold.fence.0,
            revoke: asked(name),
        })
        .collect()
    }

    /// Ends the session: its waits give up and its watchers are told.
    fn end(&self, id: &str, reason: EndReason) {
        let end = End { id: id.to_string(), reason, held: self.held(|_| None) };
        self.ended.send_replace(Some(end));
    }
}

/// A session watched ([`Sessions::watch`]).
pub(crate) struct Watched {
    /// The session as it stands.
    pub(crate) now: SessionNow,
    /// Set when it ends.
    pub(crate) ended: watch::Receiver<Option<End>>,
    /// Its number in the application's table, which pleas name.
    pub(crate) session: u64,
    /// Every plea to let go ([`Locks::ask_to_let_go`]), the session's
    /// among them.
    ///
    /// [`Locks::ask_to_let_go`]: crate::locks::Locks::ask_to_let_go
    pub(crate) pleas: broadcast::Receiver<Plea>,
}

/// What came of releasing a lock by its fence.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// Released once: the session still holds it this many times more
    /// (0: let go).
    Done(u32),
    /// The session does not hold that lock with that fence.
    NotHeld,
}

/// The registry; see the module documentation.
pub(crate) struct Sessions {
    shared: Arc<Shared>,
    by_id: Mutex<HashMap<String, Entry>>,
    /// Poked when a session's expiry may come sooner.
    changed: Notify,
    max: usize,
}

impl Sessions {
    /// An empty registry that admits at most `max` sessions at once.
    pub(crate) fn new(shared: Arc<Shared>, max: usize) -> Sessions {
        Sessions { shared, by_id: Mutex::new(HashMap::new()), changed: Notify::new(), max }
    }

    fn table(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a session that lives `ttl` past each keepalive; its id.
    pub(crate) fn create(
        &self,
        ttl: Duration,
        label: Option<String>,
    ) -> Result<String, SessionError> {
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            return Err(SessionError::Ttl(ttl));
        }
        let mut t = self.table();
        if t.len() >= self.max {
            return Err(SessionError::TooMany(self.max));
        }
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).expect("the operating system's random source");
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let session = self.shared.locks.new_session();
        let label = label.unwrap_or_else(|| format!("session-{session}"));
        let (ended, _) = watch::channel(None);
        let entry = Entry {
            client: Client { session, label },
            ttl,
            expires: Instant::now() + ttl,
            holding: BTreeMap::new(),
            ended,
        };
        t.insert(id.clone(), entry);
        drop(t);
        self.changed.notify_one();
        Ok(id)
    }

    /// Keeps session `id` alive for another TTL; the TTL.
    pub(crate) fn keepalive(&self, id: &str) -> Result<Duration, SessionError> {
        let mut t = self.table();
        let entry = t.get_mut(id).ok_or_else(|| SessionError::Unknown(id.to_string()))?;
        entry.expires = Instant::now() + entry.ttl;
        Ok(entry.ttl)
    }

    /// Closes session `id`: what it holds is released at once, its waits
    /// withdrawn.
    pub(crate) fn close(&self, id: &str) -> Result<(), SessionError> {
        let entry = self.table().remove(id).ok_or_else(|| SessionError::Unknown(id.to_string()))?;
        entry.end(id, EndReason::Closed);
        for (name, hold) in entry.holding {
            self.shared.release(entry.client.session, &name, hold.fence, hold.led);
        }
        Ok(())
    }

    /// Session `id` as it stands, what tells when it ends, and what tells
    /// when it is asked to let go of a lock it holds.
    pub(crate) fn watch(&self, id: &str) -> Result<Watched, SessionError> {
        // Heard from before the session is read, so that no plea falls
        // between.
        let pleas = self.shared.locks.pleas();
        let t = self.table();
        let entry = t.get(id).ok_or_else(|| SessionError::Unknown(id.to_string()))?;
        let ttl = humantime::format_duration(entry.ttl).to_string();
        let session = entry.client.session;
        let held = entry.held(|name| self.shared.locks.asked(session, name));
        let now = SessionNow { id: id.to_string(), ttl, held };
        Ok(Watched { now, ended: entry.ended.subscribe(), session, pleas })
    }

    /// Session `id`, leading election `name`, proclaims `value` as the
    /// leader's new value: the fence of its leadership, `None` if it does
    /// not lead it.
    pub(crate) fn proclaim(
        &self,
        id: &str,
        name: &Name,
        value: String,
    ) -> Result<Option<Fence>, SessionError> {
        let t = self.table();
        let entry = t.get(id).ok_or_else(|| SessionError::Unknown(id.to_string()))?;
        let Some(&Hold { fence, led: true, .. }) = entry.holding.get(name) else {
            return Ok(None);
        };
        let session = entry.client.session;
        drop(t);
        // A release that comes between is safe: the table refuses a fence
        // no longer held, and peers take no value for a leadership ended.
        let proclaimed = self.shared.proclaim(session, name, fence, value);
        Ok(proclaimed.then_some(fence))
    }

    /// Session `id` resigns its leadership of election `name`: the fence
    /// it led with, `None` if it does not lead it.
    pub(crate) fn resign(&self, id: &str, name: &Name) -> Result<Option<Fence>, SessionError> {
        self.let_go(id, name, |_, led| led)
    }

    /// How many sessions are open.
    pub(crate) fn len(&self) -> usize {
        self.table().len()
    }

    /// Takes lock `req` names (one) for session `id`, waiting as `req`
    /// says while the session lives; with it, how often the session now
    /// holds it. A session that holds the name already and asks
    /// `reentrant` takes it again at once, with the same fence (a count);
    /// without `reentrant` it is refused. If the request is dropped while
    /// it waits (its HTTP client went away), the wait is withdrawn, and a
    /// grant that came meanwhile let go.
    pub(crate) async fn acquire(
        &self,
        id: &str,
        req: &Acquire,
        reentrant: bool,
    ) -> Result<(Taken, u32), SessionError> {
        let (client, ended) = {
            let t = self.table();
            let entry = t.get(id).ok_or_else(|| SessionError::Unknown(id.to_string()))?;
            (entry.client.clone(), entry.ended.subscribe())
        };
        let asked = match self.shared.ask(req) {
            Ok(asked) => asked,
            Err(why) => return Ok((Taken::Refused(why), 0)),
        };
        if let Some(again) = self.again(id, &asked, reentrant)? {
            return Ok(again);
        }
        let mut guard =
            Withdraw { shared: &self.shared, session: client.session, names: &asked.names };
        let taken = self.shared.take(&client, &asked, &mut Ttl { ended }).await;
        guard.names = &[];
        let Taken::Granted(held) = taken else { return Ok((taken, 0)) };
        let led = asked.value.is_some();
        let mut t = self.table();
        match t.get_mut(id) {
            Some(entry) => {
                for (name, fence) in &held {
                    let hold = Hold { fence: *fence, led, count: 1, mode: asked.mode };
                    entry.holding.insert(name.clone(), hold);
                }
                Ok((Taken::Granted(held), 1))
            }
            None => {
                // It ended between the grant and now: what came is its
                // loss, as if it had ended a moment later.
                drop(t);
                for (name, fence) in &held {
                    self.shared.lose(client.session, name, led.then_some(*fence), Loss::Expired);
                }
                Err(SessionError::Unknown(id.to_string()))
            }
        }
    }

    /// Session `id` asks for the one name of `asked` again, if it holds
    /// it: a count where it asks `reentrant`, else a refusal that says
    /// why. `None` where it does not hold the name (or leads its
    /// election: the table refuses that). Other permits than the lock's
    /// were refused before, by [`Shared::ask`].
    fn again(
        &self,
        id: &str,
        asked: &Asked,
        reentrant: bool,
    ) -> Result<Option<(Taken, u32)>, SessionError> {
        let [name] = asked.names.as_slice() else { return Ok(None) };
        let mut t = self.table();
        let entry = t.get_mut(id).ok_or_else(|| SessionError::Unknown(id.to_string()))?;
        let Some(hold) = entry.holding.get_mut(name).filter(|h| !h.led) else {
            return Ok(None);
        };
        if asked.value.is_some() {
            return Ok(None);
        }
        if reentrant && hold.mode == Mode::Read && asked.mode == Mode::Write {
            let refused = format!(
                "this session holds {} to read, and a read does not become a write: release it \
                 and ask to write (two readers each waiting to write would wait for ever)",
                clip(name.as_str())
            );
            return Ok(Some((Taken::Refused(Refusal::Conflict(refused)), 0)));
        }
        if reentrant {
            hold.count = hold.count.saturating_add(1);
            return Ok(Some((Taken::Granted(vec![(name.clone(), hold.fence)]), hold.count)));
        }
        let refused = format!(
            "this session holds {} already: ask with \"reentrant\": true to take it again (a \
             count, with the same fence; as many releases let it go)",
            clip(name.as_str())
        );
        Ok(Some((Taken::Refused(Refusal::Conflict(refused)), 0)))
    }

    /// Releases lock `name`, held by session `id` with fence `fence`: once,
    /// where the session took it more than once.
    pub(crate) fn release(
        &self,
        id: &str,
        name: &Name,
        fence: Fence,
    ) -> Result<Released, SessionError> {
        {
            let mut t = self.table();
            let entry = t.get_mut(id).ok_or_else(|| SessionError::Unknown(id.to_string()))?;
            if let Some(hold) = entry.holding.get_mut(name) {
                if hold.fence == fence && hold.count > 1 {
                    hold.count -= 1;
                    return Ok(Released::Done(hold.count));
                }
            }
        }
        let released = self.let_go(id, name, |held, _| held == fence)?;
        Ok(if released.is_some() { Released::Done(0) } else { Released::NotHeld })
    }

    /// Lets go of lock `name` for session `id`, if it holds it as `which`
    /// (its fence, and whether it leads) says: the fence it held.
    fn let_go(
        &self,
        id: &str,
        name: &Name,
        which: impl Fn(Fence, bool) -> bool,
    ) -> Result<Option<Fence>, SessionError> {
        let mut t = self.table();
        let entry = t.get_mut(id).ok_or_else(|| SessionError::Unknown(id.to_string()))?;
        let Some(&Hold { fence, led, .. }) =
            entry.holding.get(name).filter(|h| which(h.fence, h.led))
        else {
            return Ok(None);
        };
        entry.holding.remove(name);
        let session = entry.client.session;
        drop(t);
        self.shared.release(session, name, fence, led);
        Ok(Some(fence))
    }

    /// Ends every session whose TTL ran out by `now`: each is lost.
    fn expire(&self, now: Instant) {
        let ended: Vec<(String, Entry)> = {
            let mut t = self.table();
            let due: Vec<String> =
                t.iter().filter(|(_, e)| e.expires <= now).map(|(id, _)| id.clone()).collect();
            due.into_iter().filter_map(|id| t.remove(&id).map(|e| (id, e))).collect()
        };
        for (id, entry) in ended {
            let session = entry.client.session;
            let held = entry.holding.len();
            info!(session, id = %&id[..8], held, "session missed its ttl: lost");
            entry.end(&id, EndReason::Expired);
            for (name, hold) in entry.holding {
                self.shared.lose(session, &name, hold.led.then_some(hold.fence), Loss::Expired);
            }
        }
    }

    /// Ends the session that held `name` as client session `session`:
    /// the node gave the lock up (its lease ran out), and what else the
    /// session held here went with it.
    fn take_back(&self, session: u64, name: &Name) {
        let ended: Option<(String, Entry)> = {
            let mut t = self.table();
            let id = t
                .iter()
                .find(|(_, e)| e.client.session == session && e.holding.contains_key(name))
                .map(|(id, _)| id.clone());
            id.and_then(|id| t.remove(&id).map(|e| (id, e)))
        };
        let Some((id, entry)) = ended else { return };
        info!(session, id = %&id[..8], %name, "session ended: its node lost its quorum's lease");
        entry.end(&id, EndReason::NoQuorum);
        for (held, hold) in entry.holding {
            if held != *name {
                self.shared.lose(session, &held, hold.led.then_some(hold.fence), Loss::NoQuorum);
            }
        }
    }

    /// Ends the sessions whose locks the node gives up
    /// ([`Locks::take_back`](crate::locks::Locks::take_back)), until `shutdown`.
    pub(crate) async fn end_taken_back(&self, mut shutdown: Shutdown) {
        let mut taken = self.shared.locks.takings_back();
        loop {
            tokio::select! {
                r = taken.recv() => match r {
                    Ok((session, name)) => self.take_back(session, &name),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        // Look at the table itself for holds it lost.
                        let lost: Vec<(u64, Name)> = self
                            .table()
                            .values()
                            .flat_map(|e| e.holding.iter().map(move |(n, h)| (e.client.session, n.clone(), h.fence)))
                            .filter(|(s, n, f)| !self.shared.locks.holds(*s, n, *f))
                            .map(|(s, n, _)| (s, n))
                            .collect();
                        for (session, name) in lost {
                            self.take_back(session, &name);
                        }
                    }
                    Err(_) => return,
                },
                _ = shutdown.recv() => return,
            }
        }
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.table().values().map(|e| e.expires).min()
    }

    /// Ends sessions as their TTLs run out, until `shutdown`. A paused
    /// node (`coterie fault pause`) ends none meanwhile: a stopped process
    /// that resumes finds its clients' keepalives waiting.
    pub(crate) async fn expire_due(&self, mut shutdown: Shutdown) {
        loop {
            let next = self.next_expiry();
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => {
                    self.shared.faults.unpaused().await;
                    self.expire(Instant::now());
                }
                _ = self.changed.notified() => {}
                _ = shutdown.recv() => return,
            }
        }
    }
}

/// The lease of a session with a TTL, while one of its requests waits:
/// lost when the session ends.
struct Ttl {
    ended: watch::Receiver<Option<End>>,
}

impl Lease for Ttl {
    type Heard = ();

    async fn listen(&mut self) {
        // A closed channel is an ended session too.
        let _ = self.ended.wait_for(Option::is_some).await;
    }

    async fn heard(&mut self, (): ()) -> Result<(), Loss> {
        Err(Loss::Expired)
    }
}

/// Withdraws a request's waits (and lets go of a grant that raced in) if
/// the request is dropped while it waits.
struct Withdraw<'a> {
    shared: &'a Shared,
    session: u64,
    names: &'a [Name],
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        for name in self.names {
            self.shared.leave(self.session, name);
        }
    }
}
