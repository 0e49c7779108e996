//! Target `state_file`: the stable-storage file a restarted node reads
//! (`coterie_node::state::parse`), then the record in it
//! (`Restored::decode`), then every mutex algorithm built from that record
//! (quorum arbiters read their grants back from it), as `coterie node`
//! does at start.
//!
//! Byte 0 even: the rest is the whole file, as found on disk (torn,
//! truncated, of another format). Byte 0 odd: the rest is the record,
//! wrapped in a valid file ([`state::image`](coterie_node::state::image)),
//! so that the checksums pass and the record's own decoders are reached.

use coterie_core::{registry, AlgoConfig, Engine, Restored};
use coterie_node::state;
use std::time::Duration;

/// Runs one input.
pub fn run(data: &[u8]) {
    let [mode, rest @ ..] = data else { return };
    let file = if mode & 1 == 1 { state::image(rest) } else { rest.to_vec() };
    let Ok(Some(bytes)) = state::parse(&file) else { return };
    if mode & 1 == 1 {
        assert_eq!(bytes, rest, "a record does not read back from its own file");
    }
    let Some(record) = Restored::decode(&bytes) else { return };
    for mutex in registry::MUTEXES {
        let mut cfg = AlgoConfig::for_test(1 + u32::from(mode >> 6), 5);
        cfg.restored = Some(record.clone());
        let mut engine = Engine::new(cfg, mutex, &registry::ELECTIONS[0], Duration::ZERO);
        engine.request(Duration::ZERO, &coterie_core::Name::default(), 1).ok();
        while engine.poll_output().is_some() {}
    }
}
