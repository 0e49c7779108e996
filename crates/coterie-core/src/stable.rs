//! What a node keeps in stable storage: the whole record a restarted node
//! gets back ([`Restored`]), and the change the engine hands its driver
//! each time the record changes ([`Delta`]).
//!
//! The record is small in its parts that every step may touch (an epoch, a
//! clock reserve, a promise) and large in the part that grows with the
//! locks: each lock's own record, for the algorithms that keep one. So a
//! change names only what it changed. One lock change costs the same
//! whatever the number of locks the node remembers, both in the engine
//! and on disk, where the driver appends changes to a log and folds them
//! into a snapshot now and then (etcd's write-ahead log and snapshots, or
//! any log-structured store, do the same).

use crate::algorithm::AlgoConfig;
use crate::name::Name;
use crate::types::Epoch;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a node keeps in stable storage, and gets back when it restarts:
/// the fold of every [`Delta`] the engine handed out
/// ([`Output::Persist`](crate::engine::Output::Persist)), made durable
/// before the messages that rest on them leave.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Restored {
    /// The highest election epoch the node had seen. Elections start above
    /// it, so epochs, and the fences built from them, keep rising even
    /// when every node restarts at once.
    pub epoch: Epoch,
    /// A value above every watermark (Lamport clock, ticket) the node had
    /// used: the restarted node's clock starts there, so the stamps and
    /// fences it issues stay above everything issued before, even when
    /// every node restarts at once. The engine reserves ahead
    /// ([`WATERMARK_RESERVE`]) and writes again only when the clock
    /// catches up with the reserve.
    pub watermark: u64,
    /// Each lock's own record ([`MutexAlgorithm::durable_state`]), for the
    /// names whose instance keeps one.
    ///
    /// [`MutexAlgorithm::durable_state`]: crate::MutexAlgorithm::durable_state
    pub names: BTreeMap<Name, Vec<u8>>,
    /// The highest view epoch the node proposed or accepted
    /// ([`membership`](crate::membership)): it never accepts an older
    /// one, across restarts too.
    pub promised: Epoch,
}

/// One change to the record: its small parts as they now stand, and the
/// locks whose own record changed, each with its new record (`None`: it
/// has none any more). Applied in order to the record a node started
/// from, the changes it handed out give the record it holds
/// ([`Restored::apply`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Delta {
    /// [`Restored::epoch`] after the change.
    pub epoch: Epoch,
    /// [`Restored::watermark`] after the change.
    pub watermark: u64,
    /// [`Restored::promised`] after the change.
    pub promised: Epoch,
    /// The locks whose record changed, and how: most changes name one
    /// lock or none; forgetting idle locks names each it forgets.
    pub names: Vec<(Name, Option<Vec<u8>>)>,
}

/// The record as it was stored before it kept a promise: read once, when a
/// node of this version first starts on a state file of the older one.
#[derive(Deserialize)]
struct RestoredBeforeViews {
    epoch: Epoch,
    watermark: u64,
    names: BTreeMap<Name, Vec<u8>>,
}

/// How far ahead of the mutex layer's watermark the stored one is kept:
/// one write per this many ticks of the clock, and a jump of at most this
/// much at each restart.
pub const WATERMARK_RESERVE: u64 = 1 << 16;

impl Restored {
    /// The record in its stored form.
    pub fn encode(&self) -> Vec<u8> {
        crate::wire::encode(self)
    }

    /// A stored record, or `None` if `bytes` is not one (a file from
    /// another version, say). A record of the version before views (no
    /// promise) is read as promising nothing.
    pub fn decode(bytes: &[u8]) -> Option<Restored> {
        crate::wire::decode_stored(bytes).ok().or_else(|| {
            let old: RestoredBeforeViews = crate::wire::decode_stored(bytes).ok()?;
            Some(Restored {
                epoch: old.epoch,
                watermark: old.watermark,
                names: old.names,
                promised: Epoch(0),
            })
        })
    }

    /// The record without its locks' records: what every lock's instance
    /// needs to know of the node's past.
    pub fn header(&self) -> Restored {
        Restored {
            epoch: self.epoch,
            watermark: self.watermark,
            names: BTreeMap::new(),
            promised: self.promised,
        }
    }

    /// A change that leaves the record as it is, to add to.
    pub fn unchanged(&self) -> Delta {
        Delta {
            epoch: self.epoch,
            watermark: self.watermark,
            promised: self.promised,
            names: Vec::new(),
        }
    }

    /// Applies `delta`; returns what it replaced: each lock it names with
    /// the record that lock had before (`None`: none).
    pub fn apply(&mut self, delta: Delta) -> Vec<(Name, Option<Vec<u8>>)> {
        self.epoch = delta.epoch;
        self.watermark = delta.watermark;
        self.promised = delta.promised;
        delta
            .names
            .into_iter()
            .map(|(name, record)| {
                let old = match record {
                    Some(record) => self.names.insert(name.clone(), record),
                    None => self.names.remove(&name),
                };
                (name, old)
            })
            .collect()
    }

    /// The highest epoch the previous run had seen (zero if none).
    pub fn epoch_of(cfg: &AlgoConfig) -> Epoch {
        cfg.restored.as_ref().map_or(Epoch(0), |r| r.epoch)
    }

    /// The record the previous run left for the lock `cfg` builds an
    /// instance of ([`AlgoConfig::name`]), if any.
    pub fn mutex_of(cfg: &AlgoConfig) -> Option<&[u8]> {
        cfg.restored.as_ref().and_then(|r| r.names.get(&cfg.name)).map(Vec::as_slice)
    }
}

impl Delta {
    /// The change in its stored form.
    pub fn encode(&self) -> Vec<u8> {
        crate::wire::encode(self)
    }

    /// A stored change, or `None` if `bytes` is not one.
    pub fn decode(bytes: &[u8]) -> Option<Delta> {
        crate::wire::decode_stored(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::NodeId;

    #[test]
    fn changes_applied_in_order_give_the_record_and_say_what_they_replaced() {
        let a = Name::new("a").unwrap();
        let b = Name::new("b").unwrap();
        let mut record = Restored::default();
        let mut first = record.unchanged();
        first.epoch = Epoch::new(2, NodeId(1));
        first.names = vec![(a.clone(), Some(vec![1])), (b.clone(), Some(vec![2]))];
        assert_eq!(record.apply(first), [(a.clone(), None), (b.clone(), None)]);
        let mut second = record.unchanged();
        second.watermark = 7;
        second.names = vec![(a.clone(), Some(vec![3])), (b.clone(), None)];
        assert_eq!(record.apply(second), [(a.clone(), Some(vec![1])), (b, Some(vec![2]))]);
        assert_eq!(record.epoch, Epoch::new(2, NodeId(1)));
        assert_eq!(record.watermark, 7);
        assert_eq!(record.names, [(a, vec![3])].into());
        let delta = record.unchanged();
        assert_eq!(Delta::decode(&delta.encode()), Some(delta));
        assert_eq!(record.header().names.len(), 0);
    }
}
