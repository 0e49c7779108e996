//! Mutual-exclusion algorithms, one per file.

pub mod centralized;
pub mod lamport;
pub mod ricart_agrawala;
