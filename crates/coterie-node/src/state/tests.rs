use super::*;
use coterie_core::{Epoch, Name, NodeId};
use std::time::{Duration, Instant};

/// An empty scratch directory for one test (the storage tests use it
/// too).
pub(crate) fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("coterie-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A change setting lock `lock`'s record to `record` (`None`: removing
/// it), at epoch `epoch`.
fn change(epoch: u64, lock: &str, record: Option<&[u8]>) -> Delta {
    Delta {
        epoch: Epoch::new(epoch, NodeId(1)),
        watermark: 7 * epoch,
        promised: Epoch(0),
        names: vec![(Name::new(lock).unwrap(), record.map(<[u8]>::to_vec))],
    }
}

/// The record `changes` make, applied in order to nothing.
fn folded(changes: &[Delta]) -> Restored {
    let mut record = Restored::default();
    for c in changes {
        record.apply(c.clone());
    }
    record
}

fn encoded(changes: &[Delta]) -> Vec<Vec<u8>> {
    changes.iter().map(Delta::encode).collect()
}

fn open(dir: &Path, sync: bool) -> Opened {
    StateFile::open(dir, "t", 1, sync).unwrap()
}

#[test]
fn what_is_appended_is_recovered_both_ways() {
    for sync in [true, false] {
        let dir = scratch(&format!("state-{sync}"));
        let first = open(&dir, sync);
        assert_eq!((first.restored.clone(), first.found), (None, Found::Nothing));
        let changes = [change(1, "a", Some(b"one")), change(2, "b", Some(b"two"))];
        first.file.append(&encoded(&changes[..1])).unwrap();
        first.file.append(&encoded(&changes[1..])).unwrap();
        let more = change(3, "a", None);
        first.file.append(&encoded(std::slice::from_ref(&more))).unwrap();
        assert!(first.file.path().ends_with("t-node1.log"));
        drop(first);
        // The next run reads what this one wrote, whichever way.
        let again = open(&dir, !sync);
        let all = [changes[0].clone(), changes[1].clone(), more];
        assert_eq!(again.restored, Some(folded(&all)), "sync {sync}");
        assert_eq!(again.found, Found::Record { changes: 3, torn: false });
        // It started from a snapshot of that and an empty log, and goes on.
        assert_eq!(std::fs::metadata(again.file.path()).unwrap().len(), LOG_HEADER);
        again.file.append(&encoded(&[change(4, "c", Some(b"four"))])).unwrap();
        drop(again);
        let third = open(&dir, sync);
        let mut expected = folded(&all);
        expected.apply(change(4, "c", Some(b"four")));
        assert_eq!(third.restored, Some(expected));
        assert_eq!(third.found, Found::Record { changes: 1, torn: false });
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn a_change_costs_its_own_bytes_whatever_the_record_holds() {
    let dir = scratch("cost");
    let opened = open(&dir, false);
    let mut record = Restored::default();
    let mut per_change = Vec::new();
    for locks in [1_000, 10_000, 100_000] {
        while record.names.len() < locks {
            let name = format!("lock-{}", record.names.len());
            let delta = change(1, &name, Some(&[1; 24]));
            record.apply(delta.clone());
            opened.file.append(&[delta.encode()]).unwrap();
        }
        let before = opened.file.counts().log_bytes;
        opened.file.append(&[change(1, "lock-0", Some(&[2; 24])).encode()]).unwrap();
        per_change.push(opened.file.counts().log_bytes - before);
    }
    assert_eq!(per_change[0], per_change[2], "bytes per change at 1k, 10k, 100k: {per_change:?}");
    // The log was folded as it outgrew the snapshot, and the snapshots'
    // bytes, spread over the changes, stay a small multiple of a change.
    let counts = opened.file.counts();
    assert!(counts.snapshots > 3, "{counts:?}");
    assert!(counts.snapshot_bytes < 4 * counts.log_bytes, "{counts:?}");
    // A record far larger than a frame reads back whole.
    record.apply(change(1, "lock-0", Some(&[2; 24])));
    drop(opened);
    assert!(record.encode().len() > coterie_core::wire::MAX_FRAME);
    assert_eq!(open(&dir, false).restored, Some(record));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_log_is_folded_once_it_outgrows_the_snapshot_and_recovery_is_the_same() {
    let dir = scratch("fold");
    let opened = open(&dir, true);
    let changes: Vec<Delta> = (0..3000)
        .map(|i| change(1 + i / 1000, &format!("l{}", i % 50), Some(&[i as u8; 40])))
        .collect();
    for batch in changes.chunks(7) {
        opened.file.append(&encoded(batch)).unwrap();
    }
    let counts = opened.file.counts();
    assert!(counts.snapshots >= 2, "{counts:?}");
    assert!(
        std::fs::metadata(opened.file.path()).unwrap().len() <= LOG_HEADER + FOLD_AT + 1000,
        "the log was reset at each fold"
    );
    drop(opened);
    assert_eq!(open(&dir, true).restored, Some(folded(&changes)));
    assert!(!dir.join("t-node1.snapshot.tmp").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn recovery_stops_at_the_first_change_that_is_not_whole_and_goes_on_from_there() {
    let dir = scratch("torn");
    let opened = open(&dir, true);
    let changes: Vec<Delta> = (1..=5).map(|i| change(i, "a", Some(&[i as u8; 30]))).collect();
    opened.file.append(&encoded(&changes)).unwrap();
    let log = opened.file.path().to_path_buf();
    drop(opened);
    let whole = std::fs::read(&log).unwrap();
    let each = (whole.len() - LOG_HEADER as usize) / 5;
    // Cut inside the fourth change: three are whole.
    std::fs::write(&log, &whole[..LOG_HEADER as usize + 3 * each + 5]).unwrap();
    let again = open(&dir, true);
    assert_eq!(again.restored, Some(folded(&changes[..3])));
    assert_eq!(again.found, Found::Record { changes: 3, torn: true });
    // The next change is number 4, after the three kept.
    again.file.append(&encoded(&[change(9, "b", Some(b"after"))])).unwrap();
    drop(again);
    let mut expected = folded(&changes[..3]);
    expected.apply(change(9, "b", Some(b"after")));
    assert_eq!(open(&dir, true).restored, Some(expected));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_flipped_byte_a_gap_or_a_log_from_another_moment_ends_the_log() {
    let changes: Vec<Delta> = (1..=4).map(|i| change(i, "a", Some(&[i as u8; 8]))).collect();
    let numbered = |from: u64| -> Vec<(u64, Vec<u8>)> {
        changes.iter().enumerate().map(|(i, c)| (from + i as u64, c.encode())).collect()
    };
    let log = log_image(&numbered(1));
    assert_eq!(recover(None, Some(&log)).unwrap().restored, Some(folded(&changes)));
    // A flipped byte in the third change (its header or its body).
    let each = (log.len() - LOG_HEADER as usize) / 4;
    for at in [0, 4, 8, 16, each - 1] {
        let mut bytes = log.clone();
        bytes[LOG_HEADER as usize + 2 * each + at] ^= 0x10;
        let r = recover(None, Some(&bytes)).unwrap();
        assert_eq!((r.restored, r.changes, r.torn), (Some(folded(&changes[..2])), 2, true), "{at}");
    }
    // A log that starts above the snapshot's next number: a gap.
    let snapshot = snapshot_image(&folded(&changes[..1]), 1);
    let r = recover(Some(&snapshot), Some(&log_image(&numbered(3)))).unwrap();
    assert_eq!((r.restored, r.upto, r.torn), (Some(folded(&changes[..1])), 1, true));
    // A crash between a fold's rename and the log's reset: the changes the
    // snapshot holds are skipped, the rest applied.
    let snapshot = snapshot_image(&folded(&changes[..3]), 3);
    let r = recover(Some(&snapshot), Some(&log)).unwrap();
    assert_eq!((r.restored, r.upto, r.changes), (Some(folded(&changes)), 4, 1));
    // No log, an empty log, a log cut inside its header.
    assert_eq!(recover(Some(&snapshot), None).unwrap().upto, 3);
    assert!(!recover(None, Some(&[])).unwrap().torn);
    assert!(recover(None, Some(&log[..9])).unwrap().torn);
}

#[test]
fn a_newer_format_is_refused_with_a_reason_and_a_damaged_snapshot_is_an_error() {
    let snapshot = snapshot_image(&Restored::default(), 0);
    let mut newer = snapshot.clone();
    newer[8..12].copy_from_slice(&(FORMAT + 1).to_le_bytes());
    let e = recover(Some(&newer), None).unwrap_err().to_string();
    assert!(e.contains("newer coterie") && e.contains("format 3"), "{e}");
    let mut log = log_image(&[]);
    log[8..12].copy_from_slice(&(FORMAT + 1).to_le_bytes());
    let e = recover(Some(&snapshot), Some(&log)).unwrap_err().to_string();
    assert!(e.contains("log of storage format 3"), "{e}");
    for at in [12, 16, 24, SNAPSHOT_HEADER] {
        let mut damaged = snapshot_image(&folded(&[change(1, "a", Some(b"x"))]), 1);
        damaged[at] ^= 1;
        let e = recover(Some(&damaged), None).unwrap_err().to_string();
        assert!(e.contains("checksum"), "byte {at}: {e}");
    }
    let e = recover(Some(&snapshot[..20]), None).unwrap_err().to_string();
    assert!(e.contains("cut short"), "{e}");
    let e = recover(Some(b"something else entirely, 32 bytes"), None).unwrap_err().to_string();
    assert!(e.contains("not a coterie snapshot"), "{e}");
    // And through `open`, as a node meets it.
    let dir = scratch("newer");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("t-node1.snapshot"), &newer).unwrap();
    let e = StateFile::open(&dir, "t", 1, true).unwrap_err().to_string();
    assert!(e.contains("newer coterie"), "{e}");
    assert_eq!(std::fs::read(dir.join("t-node1.snapshot")).unwrap(), newer, "left as it was");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_second_opener_of_the_same_state_is_refused_until_the_first_closes() {
    let dir = scratch("locked");
    let first = open(&dir, true);
    let e = StateFile::open(&dir, "t", 1, true).unwrap_err().to_string();
    assert!(e.contains("t-node1.lock") && e.contains("already running"), "{e}");
    assert!(StateFile::open(&dir, "t", 2, true).is_ok(), "another node's state is its own");
    drop(first);
    assert!(StateFile::open(&dir, "t", 1, true).is_ok());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_earlier_single_file_is_migrated_once() {
    let dir = scratch("migrate");
    std::fs::create_dir_all(&dir).unwrap();
    let record = folded(&[change(4, "a", Some(b"kept")), change(5, "b", Some(b"too"))]);
    let old = dir.join("t-node1.state");
    std::fs::write(&old, legacy::image(&record.encode())).unwrap();
    let opened = open(&dir, true);
    assert_eq!((opened.restored.as_ref(), opened.found), (Some(&record), Found::Migrated));
    assert!(!old.exists(), "the old file is gone");
    assert!(opened.file.snapshot_path().exists());
    opened.file.append(&encoded(&[change(6, "a", None)])).unwrap();
    drop(opened);
    let mut expected = record.clone();
    expected.apply(change(6, "a", None));
    let again = open(&dir, true);
    assert_eq!(again.restored, Some(expected));
    assert_eq!(again.found, Found::Record { changes: 1, torn: false });
    drop(again);
    // A file of the earlier format whose record is not understood: afresh.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&old, legacy::image(&[0xff; 40])).unwrap();
    let opened = open(&dir, true);
    assert_eq!((opened.restored, opened.found), (None, Found::NotUnderstood));
    // One whose slots are both damaged: an error, and the file left.
    let mut damaged = legacy::image(&record.encode());
    damaged[20] ^= 1;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&old, &damaged).unwrap();
    assert!(StateFile::open(&dir, "t", 1, true).is_err());
    assert!(old.exists());
    let _ = std::fs::remove_dir_all(dir);
}

/// The way the state was written before the log: the whole record
/// through a temporary file, flushed, renamed, the directory flushed.
fn store_by_rename(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_data()?;
    std::fs::rename(&tmp, path)?;
    File::open(path.parent().unwrap())?.sync_all()
}

/// By hand: `cargo test -p coterie-node --release --lib
/// measure_synced_changes -- --ignored --nocapture`, with `COTERIE_STORES`
/// (default 500) changes of one lock's 60-byte record, in
/// `COTERIE_STATE_DIR` (default the temporary directory), against a
/// record of `COTERIE_LOCKS` locks (default 10,000) rewritten whole.
#[test]
#[ignore = "a measurement, run by hand"]
fn measure_synced_changes() {
    let var = |name: &str, default: u32| -> u32 {
        std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
    };
    let (n, locks) = (var("COTERIE_STORES", 500), var("COTERIE_LOCKS", 10_000));
    let base =
        std::env::var_os("COTERIE_STATE_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("coterie-measure-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = |what: &str, took: Duration| {
        let each = took / n;
        let rate = f64::from(n) / took.as_secs_f64();
        println!("{what:<40} {n} changes in {took:>10.2?}: {each:>9.2?} each, {rate:>9.0}/s");
    };
    let record = folded(
        &(0..locks).map(|i| change(1, &format!("lock-{i}"), Some(&[1; 60]))).collect::<Vec<_>>(),
    );
    let whole = record.encode();
    let start = Instant::now();
    for _ in 0..n {
        store_by_rename(&dir.join("whole"), &whole).unwrap();
    }
    report(&format!("synced, whole record of {locks} locks"), start.elapsed());
    for (sync, what) in [(true, "synced, one change appended"), (false, "unsynced, appended")] {
        let opened = StateFile::open(&dir, &format!("m{sync}"), 1, sync).unwrap();
        let delta = [change(1, "lock-0", Some(&[2; 60])).encode()];
        opened.file.append(&delta).unwrap();
        let start = Instant::now();
        for _ in 0..n {
            opened.file.append(&delta).unwrap();
        }
        report(what, start.elapsed());
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// By hand: `cargo test -p coterie-node --release --lib measure_recovery
/// -- --ignored --nocapture`: the state of `COTERIE_LOCKS` locks (default
/// 1,000,000) with a 40-byte record each, as a quorum arbiter keeps them
/// with `forget_after = "0s"`: its size on disk, and how long a start
/// takes to read it back (snapshot, then a log of 10,000 changes).
#[test]
#[ignore = "a measurement, run by hand"]
fn measure_recovery() {
    let locks: usize =
        std::env::var("COTERIE_LOCKS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let dir = scratch("measure-recovery");
    let opened = open(&dir, false);
    let changes: Vec<Vec<u8>> =
        (0..locks).map(|i| change(1, &format!("r{i}"), Some(&[7; 40])).encode()).collect();
    for batch in changes.chunks(1000) {
        opened.file.append(batch).unwrap();
    }
    let tail: Vec<Vec<u8>> =
        (0..10_000).map(|i| change(2, &format!("r{i}"), Some(&[8; 40])).encode()).collect();
    opened.file.append(&tail).unwrap();
    drop(opened);
    let size = |name: &str| std::fs::metadata(dir.join(name)).map_or(0, |m| m.len());
    let (snapshot, log) = (size("t-node1.snapshot"), size("t-node1.log"));
    let start = Instant::now();
    let again = open(&dir, false);
    let took = start.elapsed();
    let names = again.restored.as_ref().map_or(0, |r| r.names.len());
    assert_eq!(names, locks);
    println!(
        "{locks} locks: snapshot {snapshot} B + log {log} B ({:.1} B a lock); a start read \
         them back in {took:.2?}",
        (snapshot + log) as f64 / locks as f64
    );
    let _ = std::fs::remove_dir_all(dir);
}
