//! Mutual-exclusion algorithms, one per file.

mod ask;
pub mod bakery;
pub mod centralized;
pub mod centralized_lending;
pub mod lamport;
pub mod lodha_kshemkalyani;
pub mod maekawa;
pub(crate) mod quorum;
pub mod raymond_k;
pub mod ricart_agrawala;
pub mod roucairol_carvalho;
pub mod token_ring;
pub mod tree_quorum;
