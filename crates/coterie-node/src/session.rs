//! The rules every client session follows, whatever carries it: a
//! connection of the binary protocol ([`handler`](crate::handler)), which
//! lives as long as the connection and its pings, or an HTTP session with
//! a TTL ([`sessions`](crate::sessions)), which lives as long as its
//! keepalives. Both ask for locks, wait, let go and are lost the same way,
//! here:
//!
//! - **Asking** ([`Shared::ask`]): the names are checked (1–256 bytes, no
//!   control character, none twice, at most [`MAX_NAMES_PER_REQUEST`]),
//!   sorted bytewise, and the permits checked against the algorithm.
//! - **Taking** ([`Shared::take`]): the names are taken one after the other
//!   in that order, all or none, so that two sessions asking for
//!   overlapping sets never hold one each and wait for the other's. Each
//!   wait is queued in the application's table ([`Locks`]), then the agent
//!   follows ([`Agent::sync`]). A timeout or refusal on the way releases
//!   what was taken; the session's loss on the way *loses* it (after the
//!   lock delay, if one is configured).
//! - **A waiting session is under lease** as a holding one is: while it
//!   waits, its [`Lease`] is watched, and a session found lost gives up its
//!   place, so that a grant never goes to a client that cannot take it.
//! - **Letting go** ([`Shared::release`]) frees a name at once; **being
//!   lost** ([`Shared::lose`]) frees it after the lock delay (Chubby's and
//!   Consul's), so that a resource which cannot check fences sees the lost
//!   holder's last writes land first. A holder that gave a value leads its
//!   election by name while it holds; every node is told when it stops.

use crate::agent::Agent;
use crate::cluster::Cluster;
use crate::events::Events;
use crate::faults::Injector;
use crate::locks::{Client, Locks, Refused};
use crate::metrics::{Loss, Metrics};
use crate::peers::Peers;
use crate::protocol::{Acquire, Leader, NodeEvent};
use coterie_core::engine::RequestError;
use coterie_core::{Fence, Mode, Name, NodeId};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::info;

/// The most locks one request may name.
pub const MAX_NAMES_PER_REQUEST: usize = 64;

/// The longest value or client label, in bytes.
pub const MAX_LABEL_LEN: usize = 4096;

/// What a client sent, quoted for an error message: whole if short, else
/// its start and its length, so that a 10,000-byte name does not make a
/// 10,000-byte error line.
pub(crate) fn clip(text: &str) -> String {
    const SHOWN: usize = 48;
    if text.len() <= SHOWN + 16 {
        return format!("{text:?}");
    }
    let end = (0..=SHOWN).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{:?}... ({} bytes)", &text[..end], text.len())
}

/// What every client session of a node shares.
pub(crate) struct Shared {
    pub(crate) agent: Arc<Agent>,
    pub(crate) locks: Arc<Locks>,
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) events: Arc<Events>,
    pub(crate) faults: Arc<Injector>,
    pub(crate) peers: Arc<Peers>,
    /// `[cluster] lock_delay`.
    pub(crate) lock_delay: Duration,
    /// `[cluster] count`: the permits of a lock asked for without any.
    pub(crate) default_permits: u32,
}

/// A request for locks, checked: what [`Shared::take`] takes.
#[derive(Clone, Debug)]
pub(crate) struct Asked {
    /// The names, sorted bytewise, none twice.
    pub(crate) names: Vec<Name>,
    /// The permits of each.
    pub(crate) permits: u32,
    /// The campaign's value, if the holder leads the names' elections.
    pub(crate) value: Option<String>,
    /// How long to wait at most (`None`: as long as the session lives).
    pub(crate) limit: Option<Duration>,
    /// A try: giving up is [`Taken::Busy`], not [`Taken::TimedOut`].
    pub(crate) try_lock: bool,
    /// Whether the session reads or writes.
    pub(crate) mode: Mode,
}

/// What came of taking the names of an [`Asked`].
#[derive(Debug)]
pub(crate) enum Taken {
    /// Every name, with its fence, in name order.
    Granted(Vec<(Name, Fence)>),
    /// A try gave up: the names are held elsewhere.
    Busy,
    /// The time limit ran out.
    TimedOut,
    /// The session was lost while it waited, for this reason.
    Lost(Loss),
    /// Refused, with a one-line reason.
    Refused(Refusal),
}

/// Why a request for locks was refused, by whose doing: what an HTTP
/// status tells (400, 409, 429).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// The request itself will not do: a bad name, label or permits.
    #[error("{0}")]
    Invalid(String),
    /// It clashes with what the session or the node's other sessions hold
    /// or want: the name twice, other permits.
    #[error("{0}")]
    Conflict(String),
    /// A limit of the node's (`[limits]`) is reached.
    #[error("{0}")]
    Limit(String),
    /// The node holds no lease from a majority (`partitions =
    /// "majority"`): it grants nothing, so it takes no new request. The
    /// reason starts `no quorum:`.
    #[error("{0}")]
    NoQuorum(String),
}

impl From<Refused> for Refusal {
    fn from(r: Refused) -> Refusal {
        match r {
            Refused::Twice(_) | Refused::Permits { .. } => Refusal::Conflict(r.to_string()),
            Refused::Busy(_) | Refused::Names(_) => Refusal::Limit(r.to_string()),
        }
    }
}

/// What keeps a waiting session alive, watched while it waits: its
/// connection and pings, or its TTL.
pub(crate) trait Lease: Send {
    /// What was heard of the client.
    type Heard: Send;

    /// The next thing heard of the client. Cancel-safe: it is dropped
    /// when the grant comes first, and must lose nothing then.
    fn listen(&mut self) -> impl Future<Output = Self::Heard> + Send + '_;

    /// Deals with what was heard (answers a ping, say); why the client is
    /// lost, if it is. Not cancelled once started.
    fn heard(&mut self, heard: Self::Heard) -> impl Future<Output = Result<(), Loss>> + Send + '_;

    /// The grant did not come at once: whatever the connection held back
    /// to send with the answer goes out now. Not cancelled once started.
    fn before_wait(&mut self) -> impl Future<Output = Result<(), Loss>> + Send + '_ {
        std::future::ready(Ok(()))
    }
}

impl Shared {
    /// This node's id.
    pub(crate) fn node(&self) -> NodeId {
        self.agent.id()
    }

    /// The node's heartbeat period and failure timeout.
    pub(crate) fn timing(&self) -> (Duration, Duration) {
        self.agent.view().timing()
    }

    /// The node's status, for `coterie status` and the watchers' first
    /// snapshot.
    pub(crate) fn status(&self) -> coterie_core::Status {
        self.agent.view().status()
    }

    /// Whether the node has joined the cluster.
    pub(crate) fn joined(&self) -> bool {
        self.agent.view().joined()
    }

    /// The node's metrics.
    pub(crate) fn metrics(&self) -> &Metrics {
        self.agent.metrics()
    }

    /// Checks a request: its names, labels and permits. A one-line reason
    /// when it will not do.
    pub(crate) fn ask(&self, req: &Acquire) -> Result<Asked, Refusal> {
        let asked = self.check(req).map_err(Refusal::Invalid)?;
        let no_quorum = self.agent.view().no_quorum();
        if let Some(why) = no_quorum {
            return Err(Refusal::NoQuorum(why));
        }
        Ok(asked)
    }

    fn check(&self, req: &Acquire) -> Result<Asked, String> {
        if req.names.len() > MAX_NAMES_PER_REQUEST {
            return Err(format!(
                "{} locks in one request; at most {MAX_NAMES_PER_REQUEST}",
                req.names.len()
            ));
        }
        for (what, text) in [("value", req.value.as_deref()), ("client", Some(&req.client[..]))] {
            if text.is_some_and(|t| t.len() > MAX_LABEL_LEN) {
                return Err(format!("the {what} is longer than {MAX_LABEL_LEN} bytes"));
            }
        }
        let mut names = Vec::with_capacity(req.names.len().max(1));
        for text in &req.names {
            names.push(Name::new(text).map_err(|e| format!("{e}: {}", clip(text)))?);
        }
        if names.is_empty() {
            names.push(Name::default());
        }
        names.sort();
        if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("the lock {:?} is named twice", twice[0].as_str()));
        }
        let permits = if req.permits == 0 { self.default_permits } else { req.permits };
        if req.mode == Mode::Read && permits > 1 {
            return Err(format!(
                "a read needs a lock of one permit, and this one has {permits}: readers share a \
                 lock, and a semaphore's permits are all alike (ask for 1 permit, or write)"
            ));
        }
        for name in &names {
            self.agent.view().check_permits(name, permits).map_err(|e| e.to_string())?;
        }
        let limit = match (req.timeout_ms, req.try_lock) {
            (Some(ms), _) => Some(Duration::from_millis(ms)),
            // A try waits as long as one failure timeout: long enough for
            // any algorithm's round trips, short enough to be a try.
            (None, true) => Some(self.agent.view().timing().1),
            (None, false) => None,
        };
        let (value, try_lock, mode) = (req.value.clone(), req.try_lock, req.mode);
        Ok(Asked { names, permits, value, limit, try_lock, mode })
    }

    /// Takes every name `asked` names for `client`, all or none, in name
    /// order, watching `lease` while it waits.
    pub(crate) async fn take(
        &self,
        client: &Client,
        asked: &Asked,
        lease: &mut impl Lease,
    ) -> Taken {
        let give_up = asked.limit.map(|d| Instant::now() + d);
        let mut taken: Vec<(Name, Fence)> = Vec::with_capacity(asked.names.len());
        for name in &asked.names {
            let waited = self.wait_for(client, name, asked, give_up, lease).await;
            match waited {
                Ok(Some(fence)) => taken.push((name.clone(), fence)),
                Ok(None) => {
                    self.leave(client.session, name);
                    self.release_all(client.session, taken, false);
                    self.metrics().gave_up(asked.try_lock);
                    return if asked.try_lock { Taken::Busy } else { Taken::TimedOut };
                }
                Err(Gone::Lost(loss)) => {
                    self.lose(client.session, name, None, loss);
                    for (name, _) in taken {
                        self.lose(client.session, &name, None, loss);
                    }
                    return Taken::Lost(loss);
                }
                Err(Gone::Refused(why)) => {
                    self.release_all(client.session, taken, false);
                    return Taken::Refused(why);
                }
            }
        }
        if let Some(value) = &asked.value {
            let node = self.agent.id().0;
            for (name, fence) in &taken {
                let leader = Leader { node, value: value.clone(), fence: fence.0 };
                self.cluster.announce(name, Some(leader), fence.0);
            }
        }
        Taken::Granted(taken)
    }

    /// Waits for `name` on `client`'s behalf until `give_up`: its fence,
    /// `None` at the time limit.
    async fn wait_for(
        &self,
        client: &Client,
        name: &Name,
        asked: &Asked,
        give_up: Option<Instant>,
        lease: &mut impl Lease,
    ) -> Result<Option<Fence>, Gone> {
        let (tx, mut rx) = oneshot::channel();
        let now = self.agent.now();
        let value = asked.value.clone();
        self.locks
            .wait(client.clone(), name, (asked.permits, asked.mode), value, now, tx)
            .map_err(|e| Gone::Refused(e.into()))?;
        if let Err(e) = self.agent.sync(name) {
            self.leave(client.session, name);
            return Err(Gone::Refused(match e {
                RequestError::TooManyLocks(_) => {
                    Refusal::Limit(format!("{e} ([limits] max_names)"))
                }
                e => Refusal::Conflict(e.to_string()),
            }));
        }
        // Granted at once (the node held the lock's permissions, or is its
        // coordinator): nothing to wait for.
        if let Ok(fence) = rx.try_recv() {
            return Ok(Some(fence));
        }
        lease.before_wait().await.map_err(Gone::Lost)?;
        loop {
            let timer = async {
                match give_up {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // What was heard of the client comes first: a ping that came
                // is not taken for silence, nor a departure for a wait.
                biased;
                heard = lease.listen() => lease.heard(heard).await.map_err(Gone::Lost)?,
                granted = &mut rx => match granted {
                    Ok(fence) => return Ok(Some(fence)),
                    // The table dropped the wait: the session was lost
                    // meanwhile, by another path (an HTTP session's expiry).
                    Err(_) => return Err(Gone::Lost(Loss::Expired)),
                },
                // The grant may have raced the timer: then the session holds
                // and must let go; the caller's `leave` does either.
                _ = timer => return Ok(None),
            }
        }
    }

    /// Takes `session` off `name` (waiting or holding) and lets the agent
    /// follow; a leader that held it steps down.
    pub(crate) fn release(&self, session: u64, name: &Name, fence: Fence, led: bool) {
        self.leave(session, name);
        if led {
            self.cluster.announce(name, None, fence.0);
        }
    }

    /// `session`, leading election `name` with `fence`, proclaims `value`
    /// as its new value: every node is told. `false` if it does not hold
    /// the name with that fence.
    pub(crate) fn proclaim(&self, session: u64, name: &Name, fence: Fence, value: String) -> bool {
        if !self.locks.proclaim(session, name, fence, value.clone()) {
            return false;
        }
        let leader = Leader { node: self.agent.id().0, value, fence: fence.0 };
        self.cluster.announce(name, Some(leader), fence.0);
        true
    }

    /// Asks every holder of lock `text`, cluster wide, to let go, for
    /// `reason` (cooperative revocation: each decides): how many were
    /// asked, and the nodes that did not answer within `patience`.
    /// Refused for a bad name or an overlong reason, and for a lock that
    /// nobody holds (at the nodes that answered): there is no one to ask.
    pub(crate) async fn revoke(
        &self,
        text: &str,
        reason: Option<String>,
        patience: Duration,
    ) -> Result<(u32, Vec<u32>), Refusal> {
        let name = Name::new(text).map_err(|e| Refusal::Invalid(format!("{e}: {}", clip(text))))?;
        if let Some(r) = reason.as_ref().filter(|r| r.len() > MAX_REASON) {
            let len = r.len();
            return Err(Refusal::Invalid(format!(
                "the reason is {len} bytes long; at most {MAX_REASON} are kept"
            )));
        }
        let (holders, unreachable) = self.cluster.revoke(&name, reason, patience).await;
        if holders == 0 {
            let mut why = format!("lock {name:?} is free: nobody holds it to be asked to let go");
            if !unreachable.is_empty() {
                why = format!(
                    "nobody holds lock {name:?} at the nodes that answered; node(s) {unreachable:?} \
                     did not answer"
                );
            }
            return Err(Refusal::Conflict(why));
        }
        info!(%name, holders, "holders asked to let go");
        Ok((holders, unreachable))
    }

    fn release_all(&self, session: u64, held: Vec<(Name, Fence)>, led: bool) {
        for (name, fence) in held {
            self.release(session, &name, fence, led);
        }
    }

    /// Takes `session` off `name` (waiting or holding) and lets the agent
    /// follow.
    pub(crate) fn leave(&self, session: u64, name: &Name) {
        if self.locks.leave(session, name, self.agent.now()) {
            self.events.emit(NodeEvent::Released { name: name.to_string(), session });
        }
        let _ = self.agent.sync(name);
    }

    /// `session` was lost, for `loss`, while holding `name` (fence
    /// `fence` if it knew it, a leader if it gave a value) or waiting for
    /// it: it gives up its place, and what it held after the lock delay.
    pub(crate) fn lose(&self, session: u64, name: &Name, led: Option<Fence>, loss: Loss) {
        let now = self.agent.now();
        let until = (!self.lock_delay.is_zero()).then(|| now + self.lock_delay);
        if self.locks.lose(session, name, now, until) {
            self.metrics().lost(loss);
            info!(session, %name, reason = loss.as_str(), "client lost while holding: released on its behalf");
            self.events.emit(NodeEvent::Released { name: name.to_string(), session });
        }
        let _ = self.agent.sync(name);
        if let Some(fence) = led {
            self.cluster.announce(name, None, fence.0);
        }
    }
}

/// The longest reason a revocation may give, in bytes.
pub(crate) const MAX_REASON: usize = 1024;

/// Why a wait ended without the lock.
enum Gone {
    Lost(Loss),
    Refused(Refusal),
}
