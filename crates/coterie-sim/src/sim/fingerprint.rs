//! A run's state, hashed: the checker's way to know a state it has seen.

use super::*;

/// The hasher of states: the same seed every run, so a state always
/// hashes alike. (foldhash's quality variant: 64 bits well spread, at a
/// fraction of SipHash's cost on the many small writes a state makes.)
pub(super) fn state_hasher() -> impl std::hash::Hasher {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::with_seed(0x636f_7465_7269_6521).build_hasher()
}

impl<C: Chooser> Simulation<C> {
    /// A hash of the run's state, for the checker: two runs with the same
    /// fingerprint go on alike, whatever led to it. It covers each node
    /// (its engine's state, incarnation, sessions and stable storage), the
    /// network (connections and the faults on messages), every queued
    /// event with its time relative to now (as a set: the chooser orders
    /// ties), the paused nodes, the clients and the workload left, and
    /// what the checker holds (holders, the highest fence granted). Left
    /// out, since they decide nothing that follows: the report's counters
    /// and measurements, the recorder, and what each part leaves out of
    /// its own hash.
    /// Every time in it is taken relative to now (timers, the detectors'
    /// last-heard times, a connection's tail while still ahead), so states
    /// alike but for the moment merge.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = state_hasher();
        let now = self.now;
        for (id, n) in &self.nodes {
            id.hash(&mut h);
            n.incarnation.hash(&mut h);
            n.wake_at.map(|t| t.saturating_sub(now)).hash(&mut h);
            match &n.engine {
                Some(engine) => {
                    true.hash(&mut h);
                    engine.hash_state(&mut h, now);
                }
                None => false.hash(&mut h),
            }
            n.sessions.hash(&mut h);
            n.stable.hash(&mut h);
        }
        self.net.hash_at(&mut h, now);
        // The queue as a multiset of (when, what): the order in which
        // events due at the same moment were queued decides nothing when
        // the chooser orders ties, and with a random chooser nobody
        // hashes. Each element is hashed alone and the hashes summed, so
        // the order does not count and nothing need be sorted.
        let mut queued = 0u64;
        for (at, event) in self.agenda.iter() {
            let mut e = state_hasher();
            at.saturating_sub(now).hash(&mut e);
            event.hash(&mut e);
            queued = queued.wrapping_add(e.finish());
        }
        (self.agenda.len(), queued).hash(&mut h);
        self.faults.hash_state(&mut h);
        self.workload.hash_state(&mut h);
        self.checker.hash_state(&mut h);
        // How long the cluster has been quiet decides when the run ends,
        // once the workload is done: up to the settling time.
        now.saturating_sub(self.quiet_since()).min(self.settle()).hash(&mut h);
        h.finish()
    }
}
