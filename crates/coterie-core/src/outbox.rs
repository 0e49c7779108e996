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

/// An algorithm's timers: an enum of its own, one variant per thing it
/// waits for (as quinn-proto's `connection::timer::Timer`). A handler
/// arms and matches variants; the engine keeps them as [`TimerId`]s.
pub trait Timer: Copy + Eq + std::hash::Hash + Debug + Send + 'static {
    /// Every variant, each once: its place in this list is its id.
    const ALL: &'static [Self];

    /// The timer's id, its place in [`ALL`](Self::ALL).
    fn id(self) -> TimerId {
        let place = Self::ALL.iter().position(|&t| t == self);
        TimerId(place.expect("Timer::ALL lists every variant") as u32)
    }

    /// The timer `id` names, if any.
    fn from_id(id: TimerId) -> Option<Self> {
        Self::ALL.get(id.0 as usize).copied()
    }
}

/// Implements [`Message`] for an algorithm's message enum, naming the
/// kind each variant is counted under:
///
/// ```ignore
/// message_kinds!(RaMsg {
///     Request => "request",
///     Reply => "reply",
/// });
/// ```
macro_rules! message_kinds {
    ($msg:ident { $($variant:ident => $kind:literal),+ $(,)? }) => {
        impl $crate::outbox::Message for $msg {
            fn kind(&self) -> &'static str {
                match self {
                    $($msg::$variant { .. } => $kind,)+
                }
            }
        }
    };
}
pub(crate) use message_kinds;

/// Declares an algorithm's timer enum (its variants unit-like, each with
/// its documentation) and implements [`Timer`] for it, `ALL` listing
/// every variant in the order declared, so that no variant can be left
/// out of it:
///
/// ```ignore
/// timers! {
///     /// The timers of [`Bully`].
///     pub enum BullyTimer {
///         /// Waiting for an OK from a higher node.
///         Answer,
///     }
/// }
/// ```
macro_rules! timers {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $crate::outbox::Timer for $name {
            const ALL: &'static [Self] = &[$($name::$variant),+];
        }
    };
}
pub(crate) use timers;

/// The timers of an algorithm that arms none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NoTimer {}

impl Timer for NoTimer {
    const ALL: &'static [Self] = &[];
}

/// A timer with its algorithm's type erased: what the engine keys armed
/// timers by, with the layer. Ids repeat across layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId(pub u32);

/// One effect an algorithm asks for. It is a plain value so that tests can
/// assert exactly what a handler emitted. `T` names the timers: the
/// algorithm's own [`Timer`] enum ([`NoTimer`] if it has none), or
/// [`TimerId`] once erased.
#[derive(Clone, Debug, PartialEq)]
pub enum Action<M, T = NoTimer> {
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
        timer: T,
        /// The absolute deadline.
        at: Time,
    },
    /// Disarm `timer`. Cancelling a timer that is not armed is harmless.
    CancelTimer {
        /// Which timer.
        timer: T,
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
pub struct Outbox<M, T = NoTimer> {
    actions: Vec<Action<M, T>>,
}

impl<M, T> Default for Outbox<M, T> {
    fn default() -> Self {
        Outbox { actions: Vec::new() }
    }
}

impl<M: Clone, T> Outbox<M, T> {
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
    pub fn set_timer(&mut self, timer: T, at: Time) {
        self.actions.push(Action::SetTimer { timer, at });
    }

    /// Disarms `timer`.
    pub fn cancel_timer(&mut self, timer: T) {
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
    pub fn drain(&mut self) -> std::vec::Drain<'_, Action<M, T>> {
        self.actions.drain(..)
    }

    /// Takes every queued action into a `Vec` (handy in tests).
    pub fn take(&mut self) -> Vec<Action<M, T>> {
        std::mem::take(&mut self.actions)
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }
}
