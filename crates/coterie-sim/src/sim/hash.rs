//! The hasher of a run's states.

/// The hasher of states: the same seed every run, so a state always
/// hashes alike. (foldhash's quality variant: 64 bits well spread, at a
/// fraction of SipHash's cost on the many small writes a state makes.)
pub(super) fn state_hasher() -> impl std::hash::Hasher {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::with_seed(0x636f_7465_7269_6521).build_hasher()
}
