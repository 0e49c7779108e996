//! The simulator's connections: one per ordered pair of nodes, as the
//! node's transport keeps one dialled connection per peer.
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

use coterie_core::{NodeId, Time};
use std::collections::BTreeMap;

/// Where a connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
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
pub(crate) struct Conn {
    /// Bumped every time the connection is broken or redialled.
    pub(crate) id: u64,
    pub(crate) phase: Phase,
    /// The incarnations it joins: the dialler's when it dialled, the
    /// acceptor's once its Hello was taken.
    pub(crate) from_boot: u64,
    pub(crate) to_boot: u64,
    /// The acceptor's incarnation the dialler expects, if any.
    pub(crate) expects: Option<u64>,
    /// Whether the acceptor took the Hello: frames behind it are read.
    pub(crate) accepted: bool,
    /// When the last frame written into it lands: later ones land after
    /// it (FIFO).
    pub(crate) tail: Time,
}

/// Every connection of the cluster.
#[derive(Clone, Debug, Default)]
pub(crate) struct Network {
    conns: BTreeMap<(NodeId, NodeId), Conn>,
    next_id: u64,
}

impl Network {
    /// Feeds every connection to `h`, for a state's fingerprint, with its
    /// tail as seen from `now`: a tail already past decides nothing (a
    /// frame written now lands a tick later at the earliest), so it hashes
    /// as zero.
    pub(crate) fn hash_at<H: std::hash::Hasher>(&self, h: &mut H, now: Time) {
        use std::hash::Hash;
        for (&(from, to), c) in &self.conns {
            (from, to, c.id, c.phase, c.from_boot, c.to_boot, c.expects, c.accepted).hash(h);
            c.tail.saturating_sub(now).hash(h);
        }
        self.next_id.hash(h);
    }

    /// The connection `from` → `to`, if it was ever dialled.
    pub(crate) fn get(&self, from: NodeId, to: NodeId) -> Option<&Conn> {
        self.conns.get(&(from, to))
    }

    /// Starts a new connection `from` (incarnation `boot`) → `to`, breaking
    /// the old one: returns its id, for the Hello.
    pub(crate) fn dial(
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
    pub(crate) fn close(&mut self, from: NodeId, to: NodeId) {
        self.next_id += 1;
        if let Some(c) = self.conns.get_mut(&(from, to)) {
            c.id = self.next_id;
            c.phase = Phase::Down;
        }
    }

    /// The acceptor (incarnation `boot`) took connection `id`'s Hello: the
    /// frames behind it will be read.
    pub(crate) fn accepted(&mut self, from: NodeId, to: NodeId, id: u64, boot: u64) {
        if let Some(c) = self.conns.get_mut(&(from, to)).filter(|c| c.id == id) {
            c.accepted = true;
            c.to_boot = boot;
        }
    }

    /// The acceptor's Welcome for connection `id` arrived: `true` if it is
    /// still the current one, now up.
    pub(crate) fn welcomed(&mut self, from: NodeId, to: NodeId, id: u64) -> bool {
        match self.conns.get_mut(&(from, to)) {
            Some(c) if c.id == id && c.phase == Phase::Dialling => {
                c.phase = Phase::Up;
                true
            }
            _ => false,
        }
    }

    /// Whether connection `id` is still the current one `from` → `to`.
    pub(crate) fn current(&self, from: NodeId, to: NodeId, id: u64) -> bool {
        self.conns.get(&(from, to)).is_some_and(|c| c.id == id)
    }

    /// The connection `from` → `to` frames are written into now (up, or
    /// being dialled: frames follow the Hello), if any.
    pub(crate) fn writable(&self, from: NodeId, to: NodeId) -> Option<Conn> {
        self.conns.get(&(from, to)).filter(|c| c.phase != Phase::Down).copied()
    }

    /// Records that a frame written into `from` → `to` lands at `at`, no
    /// earlier than the one before it: returns the landing time.
    pub(crate) fn land(&mut self, from: NodeId, to: NodeId, at: Time, step: Time) -> Time {
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
