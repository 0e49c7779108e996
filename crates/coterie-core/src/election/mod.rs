//! Leader-election algorithms, one per file.

pub mod bully;
pub mod garcia_molina;
pub mod ring;
