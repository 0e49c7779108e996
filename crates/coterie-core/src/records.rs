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

use crate::algorithm::Restored;
use crate::name::Name;
use std::collections::VecDeque;

/// How many of the latest records are kept to look back over: a record
/// older than these is long on disk on any driver that keeps up.
const LOOK_BACK: usize = 8;

/// The numbered records; see the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Records {
    /// The latest record handed over (or restored).
    latest: Restored,
    /// How many records have been handed over: the latest one's number.
    handed: u64,
    /// The latest few, with their numbers, oldest first.
    recent: VecDeque<(u64, Restored)>,
}

impl Records {
    /// Starts from what a previous run left (numbered 0: already durable).
    pub(crate) fn new(restored: Restored) -> Records {
        Records { latest: restored, handed: 0, recent: VecDeque::new() }
    }

    /// The latest record handed over.
    pub(crate) fn latest(&self) -> &Restored {
        &self.latest
    }

    /// The latest record's number: what a message rests on by default.
    pub(crate) fn latest_number(&self) -> u64 {
        self.handed
    }

    /// Hands `record` over; returns its number.
    pub(crate) fn hand(&mut self, record: Restored) -> u64 {
        self.handed += 1;
        if self.recent.len() == LOOK_BACK {
            self.recent.pop_front();
        }
        self.recent.push_back((self.handed, record.clone()));
        self.latest = record;
        self.handed
    }

    /// The earliest record that messages covered by every record of lock
    /// `name` from it to the latest (as `covers` says) may rest on; the
    /// latest one's number if `covers` refuses the latest.
    pub(crate) fn covering(&self, name: &Name, covers: impl Fn(&[u8]) -> bool) -> u64 {
        let same_clock =
            |r: &Restored| r.epoch == self.latest.epoch && r.watermark == self.latest.watermark;
        let mut number = self.handed;
        for (n, record) in self.recent.iter().rev() {
            if !same_clock(record) || !record.names.get(name).is_some_and(|r| covers(r)) {
                break;
            }
            number = *n;
        }
        number
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Epoch, NodeId};

    fn record(epoch: u64, mutex: u8) -> Restored {
        let names = [(Name::default(), vec![mutex])].into();
        Restored { epoch: Epoch::new(epoch, NodeId(1)), watermark: 0, names, promised: Epoch(0) }
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
        assert_eq!(r.covering(&Name::default(), |m| m[0] >= 2), 2);
        assert_eq!(
            r.covering(&Name::default(), |m| m[0] == 1),
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
}
