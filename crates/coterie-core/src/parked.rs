//! Messages for a lock whose instance here is in use with another number
//! of permits, kept until it is not.
//!
//! A lock's permits are the name's while the name is in use: a message
//! from a peer whose instance was made with other permits cannot go to
//! this node's instance (the two would count holders differently). It is
//! not dropped either: the algorithms assume reliable links, and a
//! REQUEST dropped is one its sender waits on for ever, even after the
//! name here has gone idle. So it is *parked*, in arrival order with every
//! later message of that sender for that lock, and delivered once this
//! node's instance holds and wants nothing (the engine then makes the
//! instance anew with the sender's permits, as it does for a message that
//! finds it idle). A peer that goes down takes its parked messages with
//! it. The room is bounded: past it a message is dropped, as before.

use crate::name::Name;
use crate::types::NodeId;
use std::collections::{BTreeMap, VecDeque};

/// Messages parked for one lock, at most.
pub(crate) const PER_LOCK: usize = 64;
/// Messages parked in all, at most.
pub(crate) const TOTAL: usize = 1024;

/// One parked message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Parked {
    /// The sender.
    pub(crate) from: NodeId,
    /// The permits of the sender's instance.
    pub(crate) permits: u32,
    /// The message, as the algorithm encoded it.
    pub(crate) bytes: Vec<u8>,
}

/// The parked messages, by lock, each lock's in arrival order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Lot {
    by_lock: BTreeMap<Name, VecDeque<Parked>>,
    total: usize,
}

impl Lot {
    /// Whether a message from `from` for `name` waits here: a later one
    /// must wait behind it.
    pub(crate) fn holds(&self, name: &Name, from: NodeId) -> bool {
        self.by_lock.get(name).is_some_and(|q| q.iter().any(|p| p.from == from))
    }

    /// Parks `message` for `name`; `false` (and nothing kept) when the
    /// room is full.
    pub(crate) fn park(&mut self, name: &Name, message: Parked) -> bool {
        if self.total >= TOTAL {
            return false;
        }
        let queue = self.by_lock.entry(name.clone()).or_default();
        if queue.len() >= PER_LOCK {
            return false;
        }
        queue.push_back(message);
        self.total += 1;
        true
    }

    /// The permits of the messages parked for `name`.
    pub(crate) fn permits(&self, name: &Name) -> impl Iterator<Item = u32> + '_ {
        self.by_lock.get(name).into_iter().flatten().map(|p| p.permits)
    }

    /// The locks with messages parked.
    pub(crate) fn names(&self) -> Vec<Name> {
        self.by_lock.keys().cloned().collect()
    }

    /// Takes every message parked for `name`, in arrival order.
    pub(crate) fn take(&mut self, name: &Name) -> VecDeque<Parked> {
        let queue = self.by_lock.remove(name).unwrap_or_default();
        self.total -= queue.len();
        queue
    }

    /// `peer` went down: what it sent is void.
    pub(crate) fn forget_peer(&mut self, peer: NodeId) {
        for queue in self.by_lock.values_mut() {
            let before = queue.len();
            queue.retain(|p| p.from != peer);
            self.total -= before - queue.len();
        }
        self.by_lock.retain(|_, q| !q.is_empty());
    }

    /// Whether nothing is parked.
    pub(crate) fn is_empty(&self) -> bool {
        self.total == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(from: u32, byte: u8) -> Parked {
        Parked { from: NodeId(from), permits: 1, bytes: vec![byte] }
    }

    #[test]
    fn messages_wait_in_order_and_go_with_their_sender() {
        let mut lot = Lot::default();
        let x = Name::new("x").unwrap();
        assert!(lot.park(&x, msg(1, 1)));
        assert!(lot.park(&x, msg(2, 2)));
        assert!(lot.park(&x, msg(1, 3)));
        assert!(lot.holds(&x, NodeId(1)) && !lot.holds(&x, NodeId(3)));
        lot.forget_peer(NodeId(2));
        let bytes: Vec<u8> = lot.take(&x).into_iter().map(|p| p.bytes[0]).collect();
        assert_eq!(bytes, vec![1, 3]);
        assert!(lot.is_empty());
    }

    #[test]
    fn the_room_is_bounded() {
        let mut lot = Lot::default();
        let x = Name::new("x").unwrap();
        for _ in 0..PER_LOCK {
            assert!(lot.park(&x, msg(1, 0)));
        }
        assert!(!lot.park(&x, msg(1, 0)), "one lock's share is full");
        for i in 0..(TOTAL - PER_LOCK) {
            let name = Name::new(&format!("n{}", i / PER_LOCK)).unwrap();
            assert!(lot.park(&name, msg(1, 0)));
        }
        assert!(!lot.park(&Name::new("y").unwrap(), msg(1, 0)), "the whole room is full");
    }
}
