//! Histories of what a cluster's clients were told, and the checker that
//! judges them.
//!
//! Jepsen's way of testing a lock service (Kingsbury's analyses of etcd,
//! Hazelcast and Redis): do not ask the service whether it was safe; record
//! every operation each client *invoked* and how it *completed* — `ok`,
//! `fail` (it certainly did not happen) or `info` (nobody knows) — on one
//! clock, and check the whole history against a model afterwards.
//!
//! - [`op`]: one line of a history ([`Op`]), as JSON.
//! - [`recorder`]: appends a process's operations to a JSON-lines file,
//!   stamped with the machine's monotonic clock (`CLOCK_MONOTONIC`, the
//!   same for every process on one host, and never stepped by NTP or by
//!   anyone setting the date).
//! - [`check`]: reads a history and reports, per lock name, holds that
//!   overlap, fences that do not rise in real-time order, updates lost on
//!   the unfenced and on the fenced register, and a stall after the
//!   nemesis ends.
//! - [`plot`]: the history as a picture, latencies over time with the
//!   faults behind them.
//!
//! The register is the resource a lock protects, as in Kleppmann's "How to
//! do distributed locking" (2016): clients read it, think, and write back
//! the value plus one, while they hold the lock. There are two copies of
//! it. The *plain* one takes every write, as a resource that knows nothing
//! of fences; the *fenced* one refuses a read or a write whose fence is
//! below the highest it has seen. Updates lost on the plain copy are what
//! a lock that trusts timeouts costs an unprotected resource; the fenced
//! copy must lose none.

#![warn(missing_docs)]

pub mod check;
pub mod op;
pub mod plot;
pub mod recorder;

pub use check::{check, Options, Report, Violation, ViolationKind};
pub use op::{Func, Kind, Mode, Op, Register, NEMESIS};
pub use recorder::{monotonic_ns, Recorder};

/// Why a history could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A line is not an operation.
    #[error("{path}:{line}: not an operation: {source}")]
    Parse {
        /// The file.
        path: String,
        /// The line number, from 1.
        line: usize,
        /// What serde said.
        source: serde_json::Error,
    },
}

/// Reads the histories in `paths` and merges them into one, in time order
/// (stable: two operations at the same nanosecond keep their files' order).
pub fn read(paths: &[std::path::PathBuf]) -> Result<Vec<Op>, HistoryError> {
    let mut all = Vec::new();
    for path in paths {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|source| HistoryError::Io { path: shown.clone(), source })?;
        all.extend(parse(&text, &shown)?);
    }
    all.sort_by_key(|op: &Op| op.time_ns);
    Ok(all)
}

/// Parses a history's JSON lines (blank lines are skipped). A last line
/// cut short, as a killed writer may leave it, is skipped too: everything
/// before it was whole.
pub fn parse(text: &str, path: &str) -> Result<Vec<Op>, HistoryError> {
    let mut ops = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Op>(line) {
            Ok(op) => ops.push(op),
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => break,
            Err(source) => {
                return Err(HistoryError::Parse { path: path.to_string(), line: i + 1, source })
            }
        }
    }
    Ok(ops)
}
