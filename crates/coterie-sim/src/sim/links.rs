//! The simulator's connections: one per ordered pair of nodes, each
//! carrying one direction's frames.
//!
//! The node's transport shares one connection per pair, both ways, dialled
//! by the lower id (so that an answer carries the kernel's acknowledgement
//! of the question, which costs nothing here). The simulator keeps the two
//! directions apart: each breaks, is dialled and resumes on its own, which
//! includes the node's case of both breaking at once, and what the
//! sessions above must survive is the same: frames lost in a broken
//! connection, sent again once it is made anew, delivered once and in
//! order.
//!
//! A connection has an id; every frame in flight carries the id of the
//! connection it was written into, and a frame whose connection was since
//! broken (reset, redialled, or its receiver restarted) is lost, as the
//! bytes in a broken TCP connection are. What is lost this way the
//! [`Session`](coterie_core::session::Session) above sends again once the
//! dialler is connected anew: the simulator runs the same session code as
//! the node.
//!
//! A connection is opened the node's way: the dialler writes its Hello
//! (naming the incarnation of the acceptor it expects) and every frame its
//! session keeps right behind it; the acceptor takes them if it is that
//! incarnation (or none was expected), and its Welcome comes back with its
//! incarnation and how much of the dialler's session it has delivered.
//!
//! The network also owns its weather, the faults that act on messages
//! rather than on processes: the partition in force (which stops messages
//! above the sessions, as `coterie fault partition` does on a node), each
//! node's delay spike (its messages slowed, FIFO kept) and loss window (a
//! share of its messages lost, above the sessions); and it counts the
//! mutex messages sent and those still in flight, which the workload waits
//! on and the deadlock watch reads.

use coterie_core::{NodeId, Time, Way};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The partition in force: `side` cut off from the rest, one way or both.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Cut {
    id: u32,
    side: BTreeSet<NodeId>,
    way: Way,
}

/// Where a connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Phase {
    /// No connection, and none being made: the dialler waits for a poke
    /// (the peer dialling in) or a restart.
    Down,
    /// A Hello is on its way; frames wait in the session.
    Dialling,
    /// Welcomed.
    Up,
}

/// One dialled connection, `from` → `to`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Conn {
    /// Bumped every time the connection is broken or redialled.
    pub(super) id: u64,
    pub(super) phase: Phase,
    /// The incarnations it joins: the dialler's when it dialled, the
    /// acceptor's once its Hello was taken.
    pub(super) from_boot: u64,
    pub(super) to_boot: u64,
    /// The acceptor's incarnation the dialler expects, if any.
    pub(super) expects: Option<u64>,
    /// Whether the acceptor took the Hello: frames behind it are read.
    pub(super) accepted: bool,
    /// When the last frame written into it lands: later ones land after
    /// it (FIFO).
    pub(super) tail: Time,
}

/// Every connection of the cluster, and the faults on its messages.
#[derive(Clone, Debug, Default)]
pub(super) struct Links {
    conns: BTreeMap<(NodeId, NodeId), Conn>,
    next_id: u64,
    /// The partition in force, if any.
    cut: Option<Cut>,
    /// The delay spikes in force, by node: the spike's id, the extra delay.
    spikes: BTreeMap<NodeId, (u32, Duration)>,
    /// The loss windows in force, by node: the window's id, the share
    /// lost, as the bits of an `f64` (so that the state hashes).
    losses: BTreeMap<NodeId, (u32, u64)>,
    /// Mutex messages sent since the run began.
    mutex_sent: u64,
    /// Mutex messages written into a connection and not yet delivered (or
    /// lost with it).
    mutex_in_flight: u64,
}

impl Links {
    /// Feeds the network's state to `h`, for a state's fingerprint: every
    /// connection, with its tail as seen from `now` (a tail already past
    /// decides nothing: a frame written now lands a tick later at the
    /// earliest, so it hashes as zero), and the faults in force. The
    /// message counts are left out: what is in flight is in the agenda.
    pub(super) fn hash_at<H: std::hash::Hasher>(&self, h: &mut H, now: Time) {
        use std::hash::Hash;
        for (&(from, to), c) in &self.conns {
            (from, to, c.id, c.phase, c.from_boot, c.to_boot, c.expects, c.accepted).hash(h);
            c.tail.saturating_sub(now).hash(h);
        }
        self.next_id.hash(h);
        self.cut.hash(h);
        self.spikes.hash(h);
        self.losses.hash(h);
    }

    /// Whether the partition in force stops what `from` sends `to`.
    pub(super) fn severed(&self, from: NodeId, to: NodeId) -> bool {
        self.cut.as_ref().is_some_and(|cut| {
            let (from_side, to_side) = (cut.side.contains(&from), cut.side.contains(&to));
            match cut.way {
                Way::Both => from_side != to_side,
                Way::Inbound => !from_side && to_side,
                Way::Outbound => from_side && !to_side,
            }
        })
    }

    /// Puts partition `id` in force: `false` (and nothing changes) if
    /// another is (one at a time).
    pub(super) fn cut_off(&mut self, id: u32, side: BTreeSet<NodeId>, way: Way) -> bool {
        if self.cut.is_some() {
            return false;
        }
        self.cut = Some(Cut { id, side, way });
        true
    }

    /// Ends partition `id`: `false` if it is not the one in force.
    pub(super) fn heal(&mut self, id: u32) -> bool {
        if self.cut.as_ref().is_some_and(|cut| cut.id == id) {
            self.cut = None;
            return true;
        }
        false
    }

    /// The extra delay of `node`'s messages now (zero without a spike).
    pub(super) fn spike(&self, node: NodeId) -> Duration {
        self.spikes.get(&node).map_or(Duration::ZERO, |&(_, extra)| extra)
    }

    /// Spike `id` slows `node`'s messages by `extra`: `false` (and nothing
    /// changes) if a spike slows it already.
    pub(super) fn slow(&mut self, id: u32, node: NodeId, extra: Duration) -> bool {
        if self.spikes.contains_key(&node) {
            return false;
        }
        self.spikes.insert(node, (id, extra));
        true
    }

    /// Ends spike `id` on `node`: `false` if it is not the one in force.
    pub(super) fn unslow(&mut self, id: u32, node: NodeId) -> bool {
        if self.spikes.get(&node).is_some_and(|&(current, _)| current == id) {
            self.spikes.remove(&node);
            return true;
        }
        false
    }

    /// The share of `node`'s messages lost now, if a loss window is open.
    pub(super) fn loss(&self, node: NodeId) -> Option<f64> {
        self.losses.get(&node).map(|&(_, bits)| f64::from_bits(bits))
    }

    /// Loss window `id` opens on `node`: `false` (and nothing changes) if
    /// one is open on it already.
    pub(super) fn lose(&mut self, id: u32, node: NodeId, share: f64) -> bool {
        if self.losses.contains_key(&node) {
            return false;
        }
        self.losses.insert(node, (id, share.to_bits()));
        true
    }

    /// Closes loss window `id` on `node`: `false` if it is not the one open.
    pub(super) fn unlose(&mut self, id: u32, node: NodeId) -> bool {
        if self.losses.get(&node).is_some_and(|&(current, _)| current == id) {
            self.losses.remove(&node);
            return true;
        }
        false
    }

    /// Whether no partition, spike or loss window is in force.
    pub(super) fn calm(&self) -> bool {
        self.cut.is_none() && self.spikes.is_empty() && self.losses.is_empty()
    }

    /// Counts a mutex message sent.
    pub(super) fn mutex_sent(&mut self) {
        self.mutex_sent += 1;
    }

    /// Mutex messages sent since the run began.
    pub(super) fn mutex_sent_total(&self) -> u64 {
        self.mutex_sent
    }

    /// Counts a mutex message written into a connection.
    pub(super) fn mutex_written(&mut self) {
        self.mutex_in_flight += 1;
    }

    /// Counts a mutex message taken off the wire (delivered or not).
    pub(super) fn mutex_landed(&mut self) {
        self.mutex_in_flight -= 1;
    }

    /// Mutex messages written and not yet landed.
    pub(super) fn mutex_in_flight(&self) -> u64 {
        self.mutex_in_flight
    }

    /// The connection `from` → `to`, if it was ever dialled.
    pub(super) fn get(&self, from: NodeId, to: NodeId) -> Option<&Conn> {
        self.conns.get(&(from, to))
    }

    /// Starts a new connection `from` (incarnation `boot`) → `to`, breaking
    /// the old one: returns its id, for the Hello.
    pub(super) fn dial(
        &mut self,
        from: NodeId,
        to: NodeId,
        boot: u64,
        expects: Option<u64>,
    ) -> u64 {
        self.next_id += 1;
        let tail = self.conns.get(&(from, to)).map_or(Time::ZERO, |c| c.tail);
        let conn = Conn {
            id: self.next_id,
            phase: Phase::Dialling,
            from_boot: boot,
            to_boot: 0,
            expects,
            accepted: false,
            tail,
        };
        self.conns.insert((from, to), conn);
        self.next_id
    }

    /// Breaks the connection `from` → `to`: what is in flight is lost, and
    /// nothing is written until it is dialled again.
    pub(super) fn close(&mut self, from: NodeId, to: NodeId) {
        self.next_id += 1;
        if let Some(c) = self.conns.get_mut(&(from, to)) {
            c.id = self.next_id;
            c.phase = Phase::Down;
        }
    }

    /// The acceptor (incarnation `boot`) took connection `id`'s Hello: the
    /// frames behind it will be read.
    pub(super) fn accepted(&mut self, from: NodeId, to: NodeId, id: u64, boot: u64) {
        if let Some(c) = self.conns.get_mut(&(from, to)).filter(|c| c.id == id) {
            c.accepted = true;
            c.to_boot = boot;
        }
    }

    /// The acceptor's Welcome for connection `id` arrived: `true` if it is
    /// still the current one, now up.
    pub(super) fn welcomed(&mut self, from: NodeId, to: NodeId, id: u64) -> bool {
        match self.conns.get_mut(&(from, to)) {
            Some(c) if c.id == id && c.phase == Phase::Dialling => {
                c.phase = Phase::Up;
                true
            }
            _ => false,
        }
    }

    /// Whether connection `id` is still the current one `from` → `to`.
    pub(super) fn current(&self, from: NodeId, to: NodeId, id: u64) -> bool {
        self.conns.get(&(from, to)).is_some_and(|c| c.id == id)
    }

    /// The connection `from` → `to` frames are written into now (up, or
    /// being dialled: frames follow the Hello), if any.
    pub(super) fn writable(&self, from: NodeId, to: NodeId) -> Option<Conn> {
        self.conns.get(&(from, to)).filter(|c| c.phase != Phase::Down).copied()
    }

    /// Records that a frame written into `from` → `to` lands at `at`, no
    /// earlier than the one before it: returns the landing time.
    pub(super) fn land(&mut self, from: NodeId, to: NodeId, at: Time, step: Time) -> Time {
        let conn = self.conns.entry((from, to)).or_insert(Conn {
            id: 0,
            phase: Phase::Down,
            from_boot: 0,
            to_boot: 0,
            expects: None,
            accepted: false,
            tail: Time::ZERO,
        });
        let at = at.max(conn.tail + step);
        conn.tail = at;
        at
    }
}
