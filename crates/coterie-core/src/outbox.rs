//! What an algorithm can ask of the world: the [`Action`]s it pushes into an
//! [`Outbox`] while handling an input.

use crate::types::{Epoch, Fence, NodeId};
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::Debug;
use std::time::Duration;

/// Simulated or real time: the time elapsed since the node (or the
/// simulation) started. The core never reads a clock; `now` is passed in.
pub type Time = Duration;

/// `t` as seen from `now`, in nanoseconds: negative in the past. A
/// checker hashes times this way so that states alike but for the moment
/// hash alike.
pub fn relative(t: Time, now: Time) -> i128 {
    t.as_nanos() as i128 - now.as_nanos() as i128
}

/// A message type of one algorithm. `kind` names the variant for the
/// per-kind message counters (`status`, the simulator's reports).
pub trait Message: Serialize + DeserializeOwned + Clone + Debug + Send + 'static {
    /// A short, stable, lowercase name of the variant, e.g. `"request"`.
    fn kind(&self) -> &'static str;
}

/// Names one of an algorithm's timers. Each algorithm has its own namespace;
/// the engine keys timers by layer and id, so ids may repeat across layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId(pub u32);

/// One effect an algorithm asks for. It is a plain value so that tests can
/// assert exactly what a handler emitted.
#[derive(Clone, Debug, PartialEq)]
pub enum Action<M> {
    /// Send `msg` to `to`. Links are assumed FIFO and reliable while both
    /// ends are up; a message to a node that is down is lost.
    Send {
        /// The destination, never the sender itself.
        to: NodeId,
        /// The message.
        msg: M,
    },
    /// Arm `timer` to fire at `at`, replacing any earlier deadline it had.
    SetTimer {
        /// Which timer.
        timer: TimerId,
        /// The absolute deadline.
        at: Time,
    },
    /// Disarm `timer`. Cancelling a timer that is not armed is harmless.
    CancelTimer {
        /// Which timer.
        timer: TimerId,
    },
    /// Mutual exclusion only: this node may enter the critical section.
    Grant {
        /// The grant's fencing token.
        fence: Fence,
    },
    /// Election only: this node now follows `leader` for `epoch`.
    Coordinator {
        /// The elected coordinator.
        leader: NodeId,
        /// The epoch the coordinator was elected for.
        epoch: Epoch,
    },
}

/// The buffer handlers push their actions into, in the order they happen.
#[derive(Debug)]
pub struct Outbox<M> {
    actions: Vec<Action<M>>,
}

impl<M> Default for Outbox<M> {
    fn default() -> Self {
        Outbox { actions: Vec::new() }
    }
}

impl<M: Clone> Outbox<M> {
    /// An empty outbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `msg` for `to`.
    pub fn send(&mut self, to: NodeId, msg: M) {
        self.actions.push(Action::Send { to, msg });
    }

    /// Queues a copy of `msg` for every node in `to`.
    pub fn broadcast<I: IntoIterator<Item = NodeId>>(&mut self, to: I, msg: M) {
        for node in to {
            self.send(node, msg.clone());
        }
    }

    /// Arms `timer` for `at`.
    pub fn set_timer(&mut self, timer: TimerId, at: Time) {
        self.actions.push(Action::SetTimer { timer, at });
    }

    /// Disarms `timer`.
    pub fn cancel_timer(&mut self, timer: TimerId) {
        self.actions.push(Action::CancelTimer { timer });
    }

    /// Grants the critical section to this node with `fence`.
    pub fn grant(&mut self, fence: Fence) {
        self.actions.push(Action::Grant { fence });
    }

    /// Announces, to this node, that `leader` coordinates `epoch`.
    pub fn coordinator(&mut self, leader: NodeId, epoch: Epoch) {
        self.actions.push(Action::Coordinator { leader, epoch });
    }

    /// Takes every queued action, oldest first.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Action<M>> {
        self.actions.drain(..)
    }

    /// Takes every queued action into a `Vec` (handy in tests).
    pub fn take(&mut self) -> Vec<Action<M>> {
        std::mem::take(&mut self.actions)
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }
}
