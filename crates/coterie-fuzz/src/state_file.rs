//! Target `state_file`: the stable storage a restarted node reads — a
//! snapshot and a log ([`state::recover`](coterie_node::state::recover)),
//! or a file of the earlier single-file format
//! ([`state::legacy::parse`](coterie_node::state::legacy::parse)) — then
//! every mutex algorithm built from the record found (quorum arbiters read
//! their grants back from it), as `coterie node` does at start.
//!
//! Byte 0 says what the rest is, by its low three bits:
//! - 0: a whole snapshot, as found on disk (torn, of another format);
//! - 1: a record, wrapped in a valid snapshot, so that the checksum
//!   passes and the record's own decoder is reached;
//! - 2: a whole log, as found on disk, after no snapshot;
//! - 3: one change, wrapped in a valid log, so that its decoder is reached;
//! - 4 and up: a file of the earlier format.

use coterie_core::{registry, AlgoConfig, Engine, Restored};
use coterie_node::state;
use std::time::Duration;

/// Runs one input.
pub fn run(data: &[u8]) {
    let [mode, rest @ ..] = data else { return };
    let record = match mode & 7 {
        0 => state::recover(Some(rest), None).ok().and_then(|r| r.restored),
        1 => {
            let found = state::recover(Some(&state::snapshot_bytes(rest, 0)), None);
            let found = found.ok().and_then(|r| r.restored);
            assert_eq!(found, Restored::decode(rest), "a record does not read back from its file");
            found
        }
        2 => state::recover(None, Some(rest)).ok().and_then(|r| r.restored),
        3 => {
            let log = state::log_image(&[(1, rest.to_vec())]);
            let found = state::recover(None, Some(&log)).expect("a log is never an error");
            assert_eq!(found.changes, u64::from(found.restored.is_some()));
            found.restored
        }
        _ => match state::legacy::parse(rest) {
            Ok(Some(bytes)) => Restored::decode(&bytes),
            _ => None,
        },
    };
    let Some(record) = record else { return };
    for mutex in registry::MUTEXES {
        let mut cfg = AlgoConfig::for_test(1 + u32::from(mode >> 6), 5);
        cfg.restored = Some(record.clone());
        let mut engine = Engine::new(cfg, mutex, &registry::ELECTIONS[0], Duration::ZERO);
        engine.request(Duration::ZERO, &coterie_core::Name::default(), 1).ok();
        while engine.poll_output().is_some() {}
    }
}
