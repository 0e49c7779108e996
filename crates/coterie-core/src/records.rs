//! The records the engine hands its driver for stable storage, numbered in
//! the order handed, and which of them a message rests on.
//!
//! A message may leave only once the record it rests on is durable: the
//! record written before it, by default. A mutex layer that writes down
//! ahead of time what its next messages will need (the quorum arbiter
//! names its next grantee while the current one holds) can say, through
//! [`MutexAlgorithm::covered_by`](crate::MutexAlgorithm::covered_by), that
//! a step's messages rest on an earlier record as well. Then they rest on
//! the earliest record of the newest run that all cover them: once any
//! record of that run is on disk, so is what they need, since every later
//! record keeps naming whoever may hold a permission. A run never reaches
//! back past a change of epoch or clock reserve, which every message after
//! it rests on.

use crate::name::Name;
use crate::stable::{Delta, Restored};
use crate::types::Epoch;
use std::collections::VecDeque;

/// How many of the latest records are kept to look back over: a record
/// older than these is long on disk on any driver that keeps up.
const LOOK_BACK: usize = 8;

/// The numbered records; see the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Records {
    /// The record as the latest change left it (or as restored).
    latest: Restored,
    /// How many changes have been handed over: the latest one's number.
    handed: u64,
    /// The latest few changes, oldest first.
    recent: VecDeque<Handed>,
}

/// A change handed over, as [`Records::covering`] looks back at it.
#[derive(Clone, Debug)]
struct Handed {
    number: u64,
    /// The record's epoch and watermark after the change.
    clock: (Epoch, u64),
    /// Each lock the change named, with the record it had before.
    replaced: Vec<(Name, Option<Vec<u8>>)>,
}

impl Records {
    /// Starts from what a previous run left (numbered 0: already durable).
    pub(crate) fn new(restored: Restored) -> Records {
        Records { latest: restored, handed: 0, recent: VecDeque::new() }
    }

    /// The record as the latest change left it.
    pub(crate) fn latest(&self) -> &Restored {
        &self.latest
    }

    /// The latest record's number: what a message rests on by default.
    pub(crate) fn latest_number(&self) -> u64 {
        self.handed
    }

    /// Hands `delta` over; returns its number. Costs what the change
    /// names, whatever the number of locks the record holds.
    pub(crate) fn hand(&mut self, delta: Delta) -> u64 {
        self.handed += 1;
        if self.recent.len() == LOOK_BACK {
            self.recent.pop_front();
        }
        let clock = (delta.epoch, delta.watermark);
        let replaced = self.latest.apply(delta);
        self.recent.push_back(Handed { number: self.handed, clock, replaced });
        self.handed
    }

    /// The earliest record that messages covered by every record of lock
    /// `name` from it to the latest (as `covers` says) may rest on; the
    /// latest one's number if `covers` refuses the latest. Walks back from
    /// the latest record, undoing each change to `name` on the way.
    pub(crate) fn covering(&self, name: &Name, covers: impl Fn(Option<&[u8]>) -> bool) -> u64 {
        let clock = (self.latest.epoch, self.latest.watermark);
        let mut record = self.latest.names.get(name).map(Vec::as_slice);
        let mut number = self.handed;
        for handed in self.recent.iter().rev() {
            // `record` is lock `name`'s record as change `handed` left it.
            if handed.clock != clock || !covers(record) {
                break;
            }
            number = handed.number;
            if let Some((_, before)) = handed.replaced.iter().find(|(n, _)| n == name) {
                record = before.as_deref();
            }
        }
        number
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::NodeId;

    fn record(epoch: u64, mutex: u8) -> Delta {
        let names = vec![(Name::default(), Some(vec![mutex]))];
        Delta { epoch: Epoch::new(epoch, NodeId(1)), watermark: 0, names, promised: Epoch(0) }
    }

    #[test]
    fn messages_rest_on_the_earliest_record_of_the_newest_covering_run() {
        let mut r = Records::new(Restored::default());
        assert_eq!(
            r.covering(&Name::default(), |_| true),
            0,
            "nothing handed: nothing to wait for"
        );
        r.hand(record(1, 1));
        r.hand(record(1, 2));
        r.hand(record(1, 3));
        assert_eq!(r.covering(&Name::default(), |m| m.is_some_and(|m| m[0] >= 2)), 2);
        assert_eq!(
            r.covering(&Name::default(), |m| m.is_some_and(|m| m[0] == 1)),
            3,
            "the latest does not cover: rest on it"
        );
        assert_eq!(r.covering(&Name::default(), |_| true), 1);
        // A new epoch is a wall nothing reaches back past.
        r.hand(record(2, 3));
        assert_eq!(r.covering(&Name::default(), |_| true), 4);
        for m in 0..20 {
            r.hand(record(2, m));
        }
        assert_eq!(
            r.covering(&Name::default(), |_| true),
            24 - LOOK_BACK as u64 + 1,
            "only so far back"
        );
    }

    #[test]
    fn a_change_to_another_lock_is_looked_through() {
        let (a, b) = (Name::new("a").unwrap(), Name::new("b").unwrap());
        let change = |name: &Name, m: u8| {
            let mut d = record(1, 0);
            d.names = vec![(name.clone(), Some(vec![m]))];
            d
        };
        let mut r = Records::new(Restored::default());
        r.hand(change(&a, 1));
        r.hand(change(&b, 9));
        r.hand(change(&a, 2));
        assert_eq!(
            r.covering(&a, |m| m.is_some_and(|m| m[0] >= 1)),
            1,
            "b's change keeps a's record"
        );
        assert_eq!(r.covering(&a, |m| m.is_some_and(|m| m[0] >= 2)), 3);
        assert_eq!(r.covering(&b, |m| m.is_some_and(|m| m[0] == 9)), 2, "before 2, b had none");
        // A lock that has no record, and whose messages need none, rests
        // on no other lock's change: on the earliest looked back at.
        let c = Name::new("c").unwrap();
        assert_eq!(r.covering(&c, |m| m.is_none()), 1);
        assert_eq!(r.covering(&c, |m| m.is_some()), 3, "needing one it has not: the latest");
        assert_eq!(r.latest().names.len(), 2);
    }
}
