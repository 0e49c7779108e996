//! Mutual-exclusion algorithms, one per file.

pub mod centralized;
pub mod ricart_agrawala;
