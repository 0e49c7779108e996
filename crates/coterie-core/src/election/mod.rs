//! Leader-election algorithms, one per file.

pub mod bully;
pub mod ring;
