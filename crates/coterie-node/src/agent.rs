//! The agent: the node's protocol driver, after the "agent" picture of
//! Jones's lecture notes (22C:116, Iowa, 2002) and quinn's connection
//! driver. It owns the engine (detector → election → mutex, one instance
//! per lock name) and the peers' sessions, feeds the engine every input (a
//! frame from the transport, a timer, what the application's sessions
//! want) and has its output side, [`Effects`], carry out every output:
//! frames to the transport, grants to the application's locks, records to
//! stable storage, events to watchers, and what the application task must
//! know ([`Notice`](crate::effects::Notice)). What the rest of the node
//! reads of the engine it reads through a [`View`].
//!
//! What must change together lives in one [`Stack`] behind a std `Mutex`:
//! the engine, the peers' sessions (so that a frame is numbered in the
//! order the engine sent it, and delivered in the order it was numbered),
//! the grants held back by a lock delay, and the outputs waiting for
//! stable storage. The mutex is never held across an `.await`: each input
//! is one critical section that feeds the engine, carries out what it
//! asked and lets go.
//!
//! **What the application wants.** The application's table of sessions
//! (`Locks`) is the demand; [`Agent::sync`] makes the engine follow it
//! for one name: ask when a session waits and the node neither holds nor
//! wants the lock, release when the node holds it for nobody. The agent
//! reads the table under its own lock, so every decision for a name is
//! taken against one consistent view of both.
//!
//! **Stable storage.** Each output rests on a record the engine handed
//! over (`Output::Persist`), and is held back by the `Gate` until that
//! record is durable. With `state_sync` the records go to a group-commit
//! writer thread (`StateWriter`) and held outputs are released as its
//! flushes land; unsynced, a record is one `pwrite`, made on the spot. A
//! write that fails holds everything back for good, and the node stops
//! with the error.

use crate::effects::{Effects, Outlets, Stack};
use crate::links::{Inbound, PeerLinks};
use crate::metrics::Metrics;
use crate::protocol::NodeEvent;
use crate::shutdown::Shutdown;
use crate::storage::Durability;
use crate::view::View;
use coterie_core::engine::RequestError;
use coterie_core::wire::{self, Envelope, Hello};
use coterie_core::{Engine, EngineError, Name, NodeId};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tracing::warn;

/// What became of a frame from a peer ([`Agent::deliver`]).
pub(crate) enum Delivery {
    /// Handed to the engine, or dropped by the session as a duplicate.
    Taken,
    /// It could not be used, for this reason (logged by the caller).
    Dropped(String),
    /// It waits until the lock it is for is idle here, for this reason
    /// (logged by the caller): its sender asked with other permits.
    Parked(String),
    /// A newer connection from the peer took over: stop reading this one.
    Superseded,
}

/// What the agent is built from.
pub(crate) struct Parts {
    pub(crate) engine: Engine,
    pub(crate) hello: Hello,
    /// Where its outputs go.
    pub(crate) outlets: Outlets,
}

/// One node's agent; see the module documentation.
pub(crate) struct Agent {
    id: NodeId,
    /// What this node says first on every connection it dials (its
    /// cluster, id, incarnation and algorithms).
    hello: Hello,
    started: Instant,
    stack: Mutex<Stack>,
    /// Poked when an input brought the next deadline forward, so the timer
    /// task re-reads it.
    deadline_changed: Notify,
    /// The deadline the timer task sleeps until, in nanoseconds from the
    /// start (`u64::MAX`: none); set and compared under the stack's lock.
    armed: std::sync::atomic::AtomicU64,
    /// The output side.
    effects: Effects,
}

impl Agent {
    pub(crate) fn new(parts: Parts) -> Agent {
        let id = parts.engine.id();
        Agent {
            id,
            hello: parts.hello,
            started: Instant::now(),
            stack: Mutex::new(Stack::new(parts.engine)),
            deadline_changed: Notify::new(),
            armed: std::sync::atomic::AtomicU64::new(u64::MAX),
            effects: Effects::new(id, parts.outlets),
        }
    }

    pub(crate) fn id(&self) -> NodeId {
        self.id
    }

    /// What the node counts, for `/metrics`.
    pub(crate) fn metrics(&self) -> &Metrics {
        self.effects.metrics()
    }

    /// This node's Hello (its incarnation is `boot`).
    pub(crate) fn hello(&self) -> &Hello {
        &self.hello
    }

    /// Checks a dialler's Hello against this node's: the reason if it may
    /// not talk to us.
    pub(crate) fn check_hello(&self, theirs: &Hello) -> Result<(), String> {
        self.hello.check(theirs, &self.lock().engine().config().members)
    }

    /// The node's clock: time since the agent started.
    pub(crate) fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// What the engine says now, read under the agent's lock (held until
    /// the view is dropped: never across an `.await`).
    pub(crate) fn view(&self) -> View<'_> {
        let now = self.now();
        View::new(self.lock(), now, &self.effects)
    }

    fn lock(&self) -> MutexGuard<'_, Stack> {
        // A panic while holding the lock is a bug in this process; carrying
        // on with the state it left is better than a cascade of panics.
        self.stack.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Feeds one input to the engine (through `f`) and carries out every
    /// output it causes, and every grant held back that may now go. The
    /// lock is taken and released here, with no `.await` in between.
    fn input<R>(&self, f: impl FnOnce(&mut Stack, Duration) -> R) -> R {
        let now = self.now();
        let mut stack = self.lock();
        let result = f(&mut stack, now);
        self.effects.settle(&mut stack, now);
        // The timer task is woken only when its sleep must end sooner: it
        // re-reads the deadline whenever it wakes anyway.
        let next = stack.next_deadline().map_or(u64::MAX, |d| d.as_nanos() as u64);
        if next < self.armed.load(std::sync::atomic::Ordering::Relaxed) {
            self.deadline_changed.notify_one();
        }
        drop(stack);
        result
    }

    /// Reads or changes the peers' sessions (the transport's bookkeeping)
    /// with no input to the engine: nothing to carry out, and the timer
    /// task is not woken.
    pub(crate) fn links<R>(&self, f: impl FnOnce(&mut PeerLinks) -> R) -> R {
        f(self.lock().links_mut())
    }

    // ---- what the transport brings ----

    /// Frame `seq` (acknowledging `ack`) from `peer`'s incarnation `boot`,
    /// read on the connection numbered `connection`: through the
    /// session, and unless an injected partition keeps it out, to the
    /// engine.
    pub(crate) fn deliver(
        &self,
        peer: NodeId,
        (connection, boot): (u64, u64),
        (seq, ack): (u64, u64),
        body: &[u8],
    ) -> Delivery {
        let admitted = self.effects.faults().admits(peer);
        self.input(|s, now| {
            match s.links_mut().receive(peer, connection, boot, seq, ack) {
                Inbound::Superseded => return Delivery::Superseded,
                Inbound::Skip => return Delivery::Taken,
                Inbound::AfterGap(lost) => {
                    warn!(
                        peer = peer.0,
                        lost,
                        "frames from peer were lost (its session overflowed): declared failed"
                    );
                    s.engine_mut().handle_link_down(now, peer);
                }
                Inbound::Deliver => {}
            }
            if !admitted {
                return Delivery::Taken; // an injected partition, above the session
            }
            let envelope = match wire::decode::<Envelope>(body) {
                Ok(envelope) => envelope,
                Err(e) => return Delivery::Dropped(e.to_string()),
            };
            let heartbeat = matches!(envelope, Envelope::Heartbeat(_));
            match s.engine_mut().handle_message(now, peer, envelope) {
                Ok(()) => {
                    let events = self.effects.events();
                    if events.watching_messages(heartbeat) {
                        events.emit(NodeEvent::Delivered { from: peer.0, seq });
                    }
                    Delivery::Taken
                }
                Err(e @ EngineError::Permits { kept: true, .. }) => Delivery::Parked(e.to_string()),
                Err(e) => Delivery::Dropped(e.to_string()),
            }
        })
    }

    /// The transport has evidence that `peer` failed (its connection closed,
    /// and its address then refused a new one).
    pub(crate) fn link_down(&self, peer: NodeId) {
        self.input(|s, now| s.engine_mut().handle_link_down(now, peer));
    }

    /// A frame to `peer` held back by an injected delay is due: numbered
    /// now, behind what went before it.
    pub(crate) fn send_delayed(&self, peer: NodeId, body: Vec<u8>) {
        self.input(|s, now| self.effects.send_now(s, peer, body, now));
    }

    // ---- what the application asks ----

    /// Makes the engine follow what the application's sessions want of
    /// lock `name` ([`Locks::demand`]): asks for it when a session waits
    /// and the node neither holds nor wants it; releases it when the node
    /// holds it for nobody, and asks again if sessions still wait (the
    /// node goes back in line behind the other nodes). A request already
    /// under way is left to run: what it brings back is handed to whoever
    /// waits then, or given back at once. Refused when the engine will not
    /// take the request (permits that do not fit).
    ///
    /// With an algorithm that counts sessions the same holds grant by
    /// grant: each grant no session holds (or is held back for) is
    /// released, and the node asks for one more grant for each session
    /// that waits, up to the lock's permits.
    pub(crate) fn sync(&self, name: &Name) -> Result<(), RequestError> {
        self.input(|s, now| Effects::follow(s, name, &self.effects.demand(name), now))
    }

    /// Sends `bytes` to `peer`'s application task, in order with the
    /// engine's messages to it.
    pub(crate) fn send_application(&self, peer: NodeId, bytes: Vec<u8>) {
        self.input(|s, _| s.engine_mut().send_application(peer, bytes));
    }

    // ---- the agent's own tasks ----

    /// Sleeps until the engine's (or the lock delay's) next deadline and
    /// fires it, until the node stops.
    pub(crate) async fn run_timers(&self, mut shutdown: Shutdown) {
        // Locks forgotten when the process last gave memory back, and when.
        let (mut trimmed_at, mut trimmed_when) = (0, Instant::now());
        loop {
            let deadline = {
                let deadline = self.lock().next_deadline();
                let nanos = deadline.map_or(u64::MAX, |d| d.as_nanos() as u64);
                self.armed.store(nanos, std::sync::atomic::Ordering::Relaxed);
                deadline
            };
            let wake = deadline.map(|d| tokio::time::Instant::from_std(self.started + d));
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => {
                    self.effects.faults().unpaused().await;
                    let forgotten = self.input(|s, now| {
                        s.engine_mut().handle_timeout(now);
                        s.engine().counters().forgotten
                    });
                    if forgotten > trimmed_at && trimmed_when.elapsed() >= TRIM_EVERY {
                        (trimmed_at, trimmed_when) = (forgotten, Instant::now());
                        give_memory_back();
                    }
                }
                _ = self.deadline_changed.notified() => {}
                _ = shutdown.recv() => return,
            }
        }
    }

    /// Follows the group-commit writer: releases what each flush covers,
    /// and stops the node when a write fails.
    pub(crate) async fn release_durable(&self, mut shutdown: Shutdown) {
        let Some(mut durable) = self.effects.durable() else {
            return;
        };
        loop {
            let latest = durable.borrow_and_update().clone();
            match latest {
                Durability::Upto(generation) => {
                    self.input(|s, now| self.effects.durable_upto(s, generation, now))
                }
                Durability::Failed(reason) => {
                    let mut s = self.lock();
                    self.effects.fail(&mut s, reason);
                    return;
                }
            }
            tokio::select! {
                changed = durable.changed() => if changed.is_err() { return },
                _ = shutdown.recv() => return,
            }
        }
    }

    /// Resolves with the reason once stable storage has failed.
    pub(crate) async fn broken(&self) -> String {
        self.effects.broken().await
    }
}

/// How often, at most, the memory forgotten locks freed is handed back.
const TRIM_EVERY: Duration = Duration::from_secs(1);

/// Hands the memory the allocator keeps free back to the system: after a
/// burst of locks was forgotten, an idle node shrinks to what it holds.
/// (glibc's allocator keeps what was freed for reuse otherwise.)
fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it has
    // no precondition and is safe to call at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
