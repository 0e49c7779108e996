//! Mutual-exclusion algorithms, one per file.

mod ask;
pub mod centralized;
pub mod lamport;
pub mod raymond_k;
pub mod ricart_agrawala;
pub mod token_ring;
