//! The agenda: every event a run has still to carry out, by the moment it
//! is due, and the events themselves.

use super::client::ClientId;
use crate::chooser::Chooser;
use coterie_core::wire::Envelope;
use coterie_core::{NodeId, Time, Way};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::time::Duration;

/// A share of messages lost, hashed by its bits (a run's state is hashed
/// for the checker).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Share(pub(super) f64);

impl std::hash::Hash for Share {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.to_bits().hash(h);
    }
}

/// What a frame carries, as far as the simulator cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Carries {
    /// Failure-detector traffic (a heartbeat, a suspicion announced): a
    /// fixed delay when checking, and no sign of progress.
    Heartbeat,
    /// An election-layer message.
    Election,
    /// A mutex-layer message (counted while in flight).
    Mutex,
}

impl Carries {
    pub(super) fn of(envelope: &Envelope) -> Carries {
        match envelope {
            Envelope::Heartbeat(_) | Envelope::Suspect(_) => Carries::Heartbeat,
            Envelope::Election(_) | Envelope::Application(_) | Envelope::Membership(_) => {
                Carries::Election
            }
            Envelope::Mutex { .. } => Carries::Mutex,
        }
    }
}

/// Something that happens at a moment of the run.
#[derive(Clone, Debug, Hash)]
pub(super) enum Event {
    /// A frame reaches `to`, unless its connection broke meanwhile.
    Deliver {
        from: NodeId,
        to: NodeId,
        conn: u64,
        seq: u64,
        ack: u64,
        bytes: Vec<u8>,
        carries: Carries,
    },
    /// `from`'s dial reaches `to`.
    Hello {
        from: NodeId,
        to: NodeId,
        conn: u64,
        boot: u64,
    },
    /// `to`'s answer to `from`'s dial reaches `from`.
    Welcome {
        from: NodeId,
        to: NodeId,
        conn: u64,
        boot: u64,
        delivered: u64,
    },
    /// Every connection to and from `node` breaks.
    Reset {
        node: NodeId,
    },
    /// `observer`'s connection to `peer` (incarnation `peer_incarnation`)
    /// closed and a redial was refused.
    LinkDown {
        observer: NodeId,
        peer: NodeId,
        incarnation: u32,
        peer_incarnation: u32,
    },
    /// The node's engine has a deadline now.
    Wake {
        node: NodeId,
        incarnation: u32,
    },
    /// A client asks for the critical section: for the next name of its
    /// request under way, or for a new request's first.
    Request {
        client: ClientId,
        incarnation: u32,
    },
    /// A client leaves the critical section.
    Release {
        client: ClientId,
        incarnation: u32,
    },
    /// Draw the fault schedule now (see
    /// [`FaultDraw::AtWorkload`](super::FaultDraw::AtWorkload)).
    DrawFaults,
    /// Sequential load: choose the next requester.
    NextSequential,
    /// Burst load: every live node asks now, if the last burst is over.
    NextBurst,
    Crash {
        node: NodeId,
        silent: bool,
    },
    Restart {
        node: NodeId,
    },
    /// Cut `side` off from every other node, both ways or one (unless
    /// another partition is in force).
    Partition {
        id: u32,
        side: BTreeSet<NodeId>,
        way: Way,
    },
    /// End partition `id`.
    Heal {
        id: u32,
    },
    /// Freeze `node` (a `Resume` is scheduled with it).
    Pause {
        node: NodeId,
    },
    /// `node` carries on.
    Resume {
        node: NodeId,
    },
    /// `node`'s messages take `extra` longer (unless a spike is already
    /// slowing it).
    DelaySpike {
        id: u32,
        node: NodeId,
        extra: Duration,
    },
    /// End delay spike `id` on `node`.
    DelayOver {
        id: u32,
        node: NodeId,
    },
    /// `node` loses `share` of its messages (unless a loss window is
    /// already open on it).
    Loss {
        id: u32,
        node: NodeId,
        share: Share,
    },
    /// End loss window `id` on `node`.
    LossOver {
        id: u32,
        node: NodeId,
    },
}

impl Event {
    /// The node the event happens at, when that node could be paused (a
    /// fault happens at no node).
    pub(super) fn target(&self) -> Option<NodeId> {
        match self {
            Event::Deliver { to, .. } | Event::Hello { to, .. } => Some(*to),
            Event::Welcome { from, .. } => Some(*from),
            Event::LinkDown { observer, .. } => Some(*observer),
            Event::Wake { node, .. } => Some(*node),
            Event::Request { client, .. } | Event::Release { client, .. } => Some(client.node),
            _ => None,
        }
    }
}

/// The events still to come, earliest first; among several due at one
/// moment, the first queued, unless the chooser orders ties.
#[derive(Clone, Default)]
pub(super) struct Agenda {
    seq: u64,
    heap: BinaryHeap<Reverse<(Time, u64, usize)>>,
    /// Event payloads, indexed from the heap (keeps the heap's items small
    /// and `Ord` without ordering events themselves).
    events: Vec<Option<Event>>,
}

impl Agenda {
    /// Queues `event` for `at`.
    pub(super) fn push(&mut self, at: Time, event: Event) {
        self.seq += 1;
        self.events.push(Some(event));
        self.heap.push(Reverse((at, self.seq, self.events.len() - 1)));
    }

    /// Takes the next event: the earliest due, and among several due at
    /// the same instant the first queued, unless `chooser` orders ties.
    pub(super) fn pop(&mut self, chooser: &mut impl Chooser) -> Option<(Time, Event)> {
        let Reverse((at, _, idx)) = self.heap.pop()?;
        let idx = if chooser.orders_ties() { self.choose_tie(at, idx, chooser) } else { idx };
        let event = self.events[idx].take().expect("each event runs once");
        // Keep the payload table from growing without bound, and small:
        // a checker copies a run, table and all, at every fork.
        if self.events.len() > 64 && self.events.len() > self.heap.len() * 4 {
            self.compact();
        }
        Some((at, event))
    }

    /// Among the events due at `at` (`first` popped already), the one to
    /// carry out now; the others go back.
    fn choose_tie(&mut self, at: Time, first: usize, chooser: &mut impl Chooser) -> usize {
        let mut tied = vec![first];
        while let Some(&Reverse((next, _, other))) = self.heap.peek() {
            if next != at {
                break;
            }
            self.heap.pop();
            tied.push(other);
        }
        // Events at different nodes commute (each touches its own node's
        // state, and what it sends lands a tick later at the earliest), so
        // only the order among one node's events is chosen: the node with
        // the lowest id goes first (a fault, at no node, before any).
        let node_of = |idx: &usize| self.events[*idx].as_ref().and_then(Event::target);
        let first = tied.iter().map(node_of).min().flatten();
        let mine: Vec<usize> = (0..tied.len()).filter(|&i| node_of(&tied[i]) == first).collect();
        let pick = mine[chooser.index(mine.len())];
        let chosen = tied.remove(pick);
        for other in tied {
            // Back in the queue, behind nothing: their order among
            // themselves is chosen again at the next pop.
            self.seq += 1;
            self.heap.push(Reverse((at, self.seq, other)));
        }
        chosen
    }

    /// When the next event is due.
    pub(super) fn next_at(&self) -> Option<Time> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Every event queued, with its moment, in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (Time, &Event)> {
        self.heap
            .iter()
            .filter_map(|Reverse((at, _, idx))| self.events[*idx].as_ref().map(|e| (*at, e)))
    }

    /// How many events are queued.
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }

    fn compact(&mut self) {
        let mut events = Vec::with_capacity(self.heap.len());
        let mut heap = BinaryHeap::with_capacity(self.heap.len());
        for Reverse((at, seq, idx)) in self.heap.drain() {
            events.push(self.events[idx].take());
            heap.push(Reverse((at, seq, events.len() - 1)));
        }
        self.events = events;
        self.heap = heap;
    }
}
