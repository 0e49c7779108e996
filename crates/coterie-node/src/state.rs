//! A node's stable storage: a snapshot of its record and a log of the
//! changes since, which the engine's
//! [`Output::Persist`](coterie_core::engine::Output::Persist) appends to and
//! a restarted node reads back ([`AlgoConfig::restored`](coterie_core::AlgoConfig)).
//!
//! The engine asks for a change to be durable before the messages that
//! rest on it leave, and the agent makes it so before it sends them.
//! [`storage`](crate::storage) has the group-commit writer that makes
//! these writes off the runtime's thread.
//!
//! ## Why a log
//! A change names one lock (or none); the record holds every lock the node
//! remembers. Rewriting the record on every change made a change cost
//! what the node remembers: the quorum algorithms, which keep a record per
//! lock, created locks some thirty times slower than the others, and
//! slower as locks piled up. Appending the change costs the change: its
//! bytes on disk are the same at a thousand locks and at a million. When
//! the log has grown past the snapshot (and past [`FOLD_AT`]), the two are
//! folded into a new snapshot and the log starts again, so the log's
//! bytes pay for the fold: a constant amount of disk work per change,
//! averaged. etcd keeps its state the same way (a write-ahead log and
//! snapshots of bbolt).
//!
//! ## Files
//! In the state directory, for node `id` of cluster `c`:
//! `c-node{id}.snapshot` and `c-node{id}.log`, and `c-node{id}.lock`, which
//! a node holds locked (`flock`) while it runs, so that a second process
//! on the same state is refused. Little-endian throughout.
//!
//! The **snapshot** is written whole to a temporary file, flushed, renamed
//! over the old one, and the directory flushed: it is the old snapshot or
//! the new one, never a mix.
//!
//! | bytes | what |
//! | --- | --- |
//! | `0..8` | `coterieS` |
//! | `8..12` | the format, [`FORMAT`] |
//! | `12..16` | CRC-32 ([`crc32fast`]) of bytes `16..32+n` |
//! | `16..24` | `upto`: the number of the last change folded in |
//! | `24..32` | the record's length `n` |
//! | `32..32+n` | the record ([`Restored`]) |
//!
//! The **log** is a 16-byte header (`coterieL`, the format, four zero
//! bytes), then the changes, each:
//!
//! | bytes | what |
//! | --- | --- |
//! | `0..4` | the change's length `n` |
//! | `4..8` | CRC-32 of bytes `0..4` and `8..16+n` |
//! | `8..16` | the change's number: one above the one before |
//! | `16..16+n` | the change ([`Delta`]) |
//!
//! A batch of changes is one `pwrite` at the log's end, then one
//! `fdatasync`. Numbers go on across runs and folds.
//!
//! ## Recovery
//! Read the snapshot (none: the empty record), then apply the log's
//! changes numbered above its `upto`, in order, stopping at the first that
//! is torn (shorter than its length says), fails its checksum, is not the
//! next number, or is not understood. Whatever follows such a change was
//! written after it and is dropped with it: a power loss mid-write, a
//! truncated file or a copy of another moment (what the nemesis's disk
//! faults make) all leave a record that was once whole. A change numbered
//! at or below `upto` was folded in already (a crash between the fold's
//! rename and the log's reset leaves them); it is skipped.
//!
//! Then, if the log held anything, the recovered record is folded into a
//! new snapshot and the log reset, so that every run starts from a
//! snapshot and an empty log. A node refuses a file of a newer format
//! with a message saying so; a snapshot whose checksum fails is an error
//! (it is never written in place, so this is damage, not a torn write).
//!
//! The earlier single-file format (`c-node{id}.state`, the whole record in
//! one of two slots) is read once, when there is no snapshot yet, written
//! as the first snapshot, and removed: see [`legacy`].
//!
//! ## Synced or not
//! - **synced** (the default): every batch and every fold is flushed
//!   before [`StateFile::append`] returns. Durable against a power loss.
//! - **unsynced**: the same writes without the flushes. A batch is one
//!   `pwrite`; a killed process cannot interrupt a system call half-way,
//!   and the page cache outlives it, so this is durable against crashes of
//!   the process (what `coterie demo`, `run` and `bench` inflict), not
//!   against a power loss.

pub mod legacy;

use coterie_core::{Delta, Restored};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// The storage format this build writes, and the newest it reads. The
/// earlier single-file format was 1.
pub const FORMAT: u32 = 2;
/// The log is folded into the snapshot once its changes take more bytes
/// than the snapshot and than this.
pub const FOLD_AT: u64 = 64 * 1024;

const SNAPSHOT_MAGIC: &[u8; 8] = b"coterieS";
const LOG_MAGIC: &[u8; 8] = b"coterieL";
/// A snapshot's bytes before its record.
const SNAPSHOT_HEADER: usize = 32;
/// The log's own header, before its first change.
const LOG_HEADER: u64 = 16;
/// A change's bytes before the change itself.
const CHANGE_HEADER: usize = 16;

/// The files holding one node's durable state.
#[derive(Debug)]
pub struct StateFile {
    snapshot: PathBuf,
    log: PathBuf,
    /// Whether every write is flushed before it returns.
    sync: bool,
    inner: Mutex<Inner>,
    /// Read without the lock, which a write holds across its flush.
    counted: Counted,
    /// `c-node{id}.lock`, locked for as long as this is open: a second
    /// process on the same state (a node started twice) is refused.
    _lock: File,
}

/// What a write must know of the files as they are.
#[derive(Debug)]
struct Inner {
    /// The log, open for writing once it has a header.
    log: Option<File>,
    /// Where the next change goes in the log.
    log_len: u64,
    /// The snapshot's length, to tell when the log outgrows it.
    snapshot_len: u64,
    /// The number the next change takes.
    next: u64,
}

/// [`Counts`], as the writes keep them.
#[derive(Debug, Default)]
struct Counted {
    changes: AtomicU64,
    batches: AtomicU64,
    log_bytes: AtomicU64,
    snapshots: AtomicU64,
    snapshot_bytes: AtomicU64,
}

impl Counted {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// What a node's storage has written since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Changes appended to the log.
    pub changes: u64,
    /// Batches written (one flush each when synced).
    pub batches: u64,
    /// Bytes appended to the log.
    pub log_bytes: u64,
    /// Snapshots written (folds, and the one a start may write).
    pub snapshots: u64,
    /// Bytes of snapshots written.
    pub snapshot_bytes: u64,
}

/// What a start found in the state directory.
#[derive(Debug)]
pub struct Opened {
    /// The files, to append to.
    pub file: StateFile,
    /// The record the previous run left, if any.
    pub restored: Option<Restored>,
    /// What was there, in a few words, for the log.
    pub found: Found,
}

/// Where the record a start found came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// Nothing was there: a first start, or a lost state directory.
    Nothing,
    /// A snapshot (or none) and this many changes after it; `torn` if a
    /// change was dropped with what followed it.
    Record {
        /// Changes applied from the log.
        changes: u64,
        /// Whether the log ended in a change that was not whole.
        torn: bool,
    },
    /// The earlier single-file format, migrated to a snapshot.
    Migrated,
    /// A file of the earlier format whose record was not understood: the
    /// node starts afresh, as that format's readers did.
    NotUnderstood,
}

/// A snapshot and a log as [`recover`] reads them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The record (`None`: no snapshot and no change).
    pub restored: Option<Restored>,
    /// The number of the last change in it (the snapshot's `upto`, or the
    /// last change applied).
    pub upto: u64,
    /// Changes applied from the log.
    pub changes: u64,
    /// Whether the log held anything beyond its header: a change applied,
    /// skipped or dropped.
    pub log_used: bool,
    /// Whether the log ended in something that was not a whole change.
    pub torn: bool,
}

impl StateFile {
    /// Opens the state of node `id` of cluster `cluster` in `dir`, creating
    /// `dir` if need be, and recovers what the previous run left (see the
    /// module documentation). With `sync`, every write is flushed to disk
    /// before it returns.
    pub fn open(dir: &Path, cluster: &str, id: u32, sync: bool) -> io::Result<Opened> {
        std::fs::create_dir_all(dir)?;
        let lock_path = dir.join(format!("{cluster}-node{id}.lock"));
        let lock = OpenOptions::new().write(true).create(true).truncate(false).open(&lock_path)?;
        if let Err(e) = lock.try_lock() {
            let why = match e {
                std::fs::TryLockError::WouldBlock => "another process holds it".to_string(),
                std::fs::TryLockError::Error(e) => e.to_string(),
            };
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "cannot lock {}: {why} (is node {id} already running on this state?)",
                    lock_path.display()
                ),
            ));
        }
        let [snapshot, log] = files(dir, cluster, id);
        let file = StateFile {
            snapshot,
            log,
            sync,
            inner: Mutex::new(Inner { log: None, log_len: 0, snapshot_len: 0, next: 1 }),
            counted: Counted::default(),
            _lock: lock,
        };
        let (snapshot, log) = (read_all(&file.snapshot)?, read_all(&file.log)?);
        let old = dir.join(format!("{cluster}-node{id}.state"));
        if snapshot.is_none() && log.is_none() {
            if let Some(bytes) = read_all(&old)? {
                return file.migrate(&old, &bytes);
            }
        }
        let recovered = recover(snapshot.as_deref(), log.as_deref())?;
        let mut inner = file.inner();
        inner.next = recovered.upto + 1;
        inner.snapshot_len = snapshot.as_ref().map_or(0, |s| s.len() as u64);
        if recovered.log_used || recovered.torn {
            // Start from a snapshot of what was recovered and an empty log.
            if let Some(record) = &recovered.restored {
                file.write_snapshot(&mut inner, record)?;
            }
            file.reset_log(&mut inner)?;
        } else if log.is_some_and(|l| l.len() as u64 >= LOG_HEADER) {
            inner.log = Some(OpenOptions::new().read(true).write(true).open(&file.log)?);
            inner.log_len = LOG_HEADER;
        } // else no log, or an empty one: the first append writes its header
        drop(inner);
        let found = match &recovered.restored {
            None => Found::Nothing,
            Some(_) => Found::Record { changes: recovered.changes, torn: recovered.torn },
        };
        Ok(Opened { file, restored: recovered.restored, found })
    }

    /// What a start of node `id` of cluster `cluster` would recover from
    /// `dir`, read without writing anything (the earlier single-file
    /// format aside): for tools and tests that look at a running node's
    /// state.
    pub fn read(dir: &Path, cluster: &str, id: u32) -> io::Result<Recovered> {
        let [snapshot, log] = files(dir, cluster, id);
        read_files(&snapshot, &log)
    }

    /// Reads the earlier format's `bytes` (from `old`), writes its record
    /// as the first snapshot and removes `old`.
    fn migrate(self, old: &Path, bytes: &[u8]) -> io::Result<Opened> {
        let restored = match legacy::parse(bytes) {
            Ok(record) => record.map(|r| Restored::decode(&r)),
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", old.display()))),
        };
        let found = match &restored {
            None => Found::Nothing,
            Some(None) => Found::NotUnderstood,
            Some(Some(_)) => Found::Migrated,
        };
        let restored = restored.flatten();
        if let Some(record) = &restored {
            let mut inner = self.inner();
            self.write_snapshot(&mut inner, record)?;
            self.reset_log(&mut inner)?;
        }
        std::fs::remove_file(old)?;
        if self.sync {
            self.sync_dir()?;
        }
        Ok(Opened { file: self, restored, found })
    }

    /// Where the changes go: the file whose writes can fail in use.
    pub fn path(&self) -> &Path {
        &self.log
    }

    /// Where the snapshot is.
    pub fn snapshot_path(&self) -> &Path {
        &self.snapshot
    }

    /// What has been written since the files were opened.
    pub fn counts(&self) -> Counts {
        let c = &self.counted;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Counts {
            changes: get(&c.changes),
            batches: get(&c.batches),
            log_bytes: get(&c.log_bytes),
            snapshots: get(&c.snapshots),
            snapshot_bytes: get(&c.snapshot_bytes),
        }
    }

    /// Appends `changes` (each an encoded [`Delta`]), in order, in one
    /// write, and flushes them if synced; then folds the log into a new
    /// snapshot if it has outgrown the one there. After an error the files
    /// hold what they held before, perhaps with a torn change at the log's
    /// end, which recovery drops.
    pub fn append(&self, changes: &[Vec<u8>]) -> io::Result<()> {
        let mut inner = self.inner();
        if inner.log.is_none() {
            self.reset_log(&mut inner)?;
        }
        let mut batch = Vec::with_capacity(changes.iter().map(|c| CHANGE_HEADER + c.len()).sum());
        for change in changes {
            let number = inner.next;
            inner.next += 1;
            frame(&mut batch, number, change)?;
        }
        let log = inner.log.as_ref().expect("the log was just opened");
        log.write_all_at(&batch, inner.log_len)?;
        if self.sync {
            log.sync_data()?;
        }
        inner.log_len += batch.len() as u64;
        Counted::add(&self.counted.changes, changes.len() as u64);
        Counted::add(&self.counted.batches, 1);
        Counted::add(&self.counted.log_bytes, batch.len() as u64);
        if inner.log_len - LOG_HEADER > inner.snapshot_len.max(FOLD_AT) {
            self.fold(&mut inner)?;
        }
        Ok(())
    }

    /// Folds the log into a new snapshot and resets the log: reads both
    /// back as a restart would (from the page cache, as a rule), writes
    /// the record as the snapshot, then empties the log. A crash between
    /// the two leaves changes the snapshot already holds, which recovery
    /// skips.
    fn fold(&self, inner: &mut Inner) -> io::Result<()> {
        let recovered = read_files(&self.snapshot, &self.log)?;
        if recovered.upto + 1 != inner.next {
            return Err(invalid("the log does not read back as written"));
        }
        self.write_snapshot(inner, &recovered.restored.unwrap_or_default())?;
        self.reset_log(inner)
    }

    /// Replaces the snapshot with `record`, holding every change numbered
    /// below `inner.next`: through a temporary file, renamed over it.
    fn write_snapshot(&self, inner: &mut Inner, record: &Restored) -> io::Result<()> {
        let bytes = snapshot_image(record, inner.next - 1);
        let tmp = self.snapshot.with_extension("snapshot.tmp");
        let mut file = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        file.write_all(&bytes)?;
        if self.sync {
            file.sync_data()?;
        }
        std::fs::rename(&tmp, &self.snapshot)?;
        if self.sync {
            self.sync_dir()?; // the rename itself lives in the directory
        }
        inner.snapshot_len = bytes.len() as u64;
        Counted::add(&self.counted.snapshots, 1);
        Counted::add(&self.counted.snapshot_bytes, bytes.len() as u64);
        Ok(())
    }

    /// Makes the log its header alone, creating it if need be.
    fn reset_log(&self, inner: &mut Inner) -> io::Result<()> {
        let existed = self.log.try_exists()?;
        let log = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.log)?;
        log.write_all_at(&log_header(), 0)?;
        if log.metadata()?.len() > LOG_HEADER {
            log.set_len(LOG_HEADER)?;
        }
        if self.sync {
            log.sync_data()?;
            if !existed {
                self.sync_dir()?;
            }
        }
        inner.log = Some(log);
        inner.log_len = LOG_HEADER;
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        match self.log.parent() {
            Some(dir) => File::open(dir)?.sync_all(),
            None => Ok(()),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The files that hold node `id`'s state in `dir`: its snapshot, then its
/// log.
pub fn files(dir: &Path, cluster: &str, id: u32) -> [PathBuf; 2] {
    ["snapshot", "log"].map(|ext| dir.join(format!("{cluster}-node{id}.{ext}")))
}

/// What the files at `snapshot` and `log` hold, as [`recover`] reads it.
fn read_files(snapshot: &Path, log: &Path) -> io::Result<Recovered> {
    recover(read_all(snapshot)?.as_deref(), read_all(log)?.as_deref())
}

/// The record a snapshot's and a log's bytes hold, as a start reads them
/// (see the module documentation): `None` for a missing file. An error
/// for a snapshot that is damaged or not a snapshot, and for either file
/// of a newer format; a log's damage only ends it.
pub fn recover(snapshot: Option<&[u8]>, log: Option<&[u8]>) -> io::Result<Recovered> {
    let (mut restored, upto) = match snapshot {
        Some(bytes) => {
            let (record, upto) = parse_snapshot(bytes)?;
            (Some(record), upto)
        }
        None => (None, 0),
    };
    let mut recovered = Recovered { upto, ..Recovered::default() };
    let Some(log) = log else {
        recovered.restored = restored;
        return Ok(recovered);
    };
    let mut rest = match log.get(..LOG_HEADER as usize) {
        // Shorter than its header: created, and cut short before or as
        // the header was written. Nothing was appended to it.
        None => {
            recovered.torn = !log.is_empty();
            recovered.restored = restored;
            return Ok(recovered);
        }
        Some(header) => {
            check_magic(header, LOG_MAGIC, "log")?;
            &log[LOG_HEADER as usize..]
        }
    };
    recovered.log_used = !rest.is_empty();
    while !rest.is_empty() {
        let Some((number, change, after)) = unframe(rest) else {
            recovered.torn = true;
            break;
        };
        rest = after;
        if recovered.changes == 0 && number <= recovered.upto {
            continue; // folded in already
        }
        let Some(delta) = (number == recovered.upto + 1).then(|| Delta::decode(change)).flatten()
        else {
            recovered.torn = true;
            break;
        };
        restored.get_or_insert_with(Restored::default).apply(delta);
        recovered.upto = number;
        recovered.changes += 1;
    }
    recovered.restored = restored;
    Ok(recovered)
}

/// A whole snapshot holding `record`, as the changes up to `upto` left it.
pub fn snapshot_image(record: &Restored, upto: u64) -> Vec<u8> {
    snapshot_bytes(&record.encode(), upto)
}

/// A whole snapshot holding the encoded record `encoded` (for the fuzzer,
/// any bytes).
pub fn snapshot_bytes(encoded: &[u8], upto: u64) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(SNAPSHOT_HEADER + encoded.len());
    bytes.extend_from_slice(SNAPSHOT_MAGIC);
    bytes.extend_from_slice(&FORMAT.to_le_bytes());
    bytes.extend_from_slice(&[0; 4]); // the checksum, below
    bytes.extend_from_slice(&upto.to_le_bytes());
    bytes.extend_from_slice(&(encoded.len() as u64).to_le_bytes());
    bytes.extend_from_slice(encoded);
    let crc = crc32fast::hash(&bytes[16..]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// A whole log holding `changes` (number, encoded [`Delta`]), in order.
pub fn log_image(changes: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut bytes = log_header().to_vec();
    for (number, change) in changes {
        frame(&mut bytes, *number, change).expect("a change shorter than 4 GiB");
    }
    bytes
}

fn log_header() -> [u8; LOG_HEADER as usize] {
    let mut header = [0; LOG_HEADER as usize];
    header[..8].copy_from_slice(LOG_MAGIC);
    header[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    header
}

/// A snapshot's record and `upto`.
fn parse_snapshot(bytes: &[u8]) -> io::Result<(Restored, u64)> {
    let header = bytes.get(..SNAPSHOT_HEADER).ok_or_else(|| invalid("snapshot cut short"))?;
    check_magic(header, SNAPSHOT_MAGIC, "snapshot")?;
    let crc = u32::from_le_bytes(header[12..16].try_into().expect("four bytes"));
    let upto = u64::from_le_bytes(header[16..24].try_into().expect("eight bytes"));
    let len = u64::from_le_bytes(header[24..32].try_into().expect("eight bytes"));
    let end = usize::try_from(len).ok().and_then(|l| l.checked_add(SNAPSHOT_HEADER));
    let whole = end.and_then(|end| bytes.get(16..end));
    let Some(whole) = whole.filter(|w| crc32fast::hash(w) == crc) else {
        return Err(invalid("snapshot damaged: its checksum fails"));
    };
    let record = Restored::decode(&whole[16..])
        .ok_or_else(|| invalid("snapshot's record not understood"))?;
    Ok((record, upto))
}

/// Checks a file's first twelve bytes: its magic, and a format this build
/// reads.
fn check_magic(header: &[u8], magic: &[u8; 8], what: &str) -> io::Result<()> {
    if &header[..8] != magic {
        return Err(invalid(&format!("not a coterie {what}")));
    }
    let format = u32::from_le_bytes(header[8..12].try_into().expect("four bytes"));
    if format > FORMAT {
        return Err(invalid(&format!(
            "{what} of storage format {format}, written by a newer coterie: this one reads \
             formats up to {FORMAT}; run that version, or move the state directory aside to \
             start this node afresh"
        )));
    }
    if format < FORMAT {
        return Err(invalid(&format!("{what} of unknown storage format {format}")));
    }
    Ok(())
}

/// Appends change `number` to `out`.
fn frame(out: &mut Vec<u8>, number: u64, change: &[u8]) -> io::Result<()> {
    let len = u32::try_from(change.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "change too long"))?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len.to_le_bytes());
    crc.update(&number.to_le_bytes());
    crc.update(change);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&number.to_le_bytes());
    out.extend_from_slice(change);
    Ok(())
}

/// The first change in `bytes` (its number, its bytes) and what follows
/// it, if it is whole and its checksum holds.
fn unframe(bytes: &[u8]) -> Option<(u64, &[u8], &[u8])> {
    let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?);
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    let number = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
    let end = CHANGE_HEADER.checked_add(len as usize)?;
    let change = bytes.get(CHANGE_HEADER..end)?;
    let mut sum = crc32fast::Hasher::new();
    sum.update(&len.to_le_bytes());
    sum.update(&number.to_le_bytes());
    sum.update(change);
    (sum.finalize() == crc).then(|| (number, change, &bytes[end..]))
}

/// The file's bytes, `None` if there is no file. Reads no more than the
/// file's length says, so that a device (a length of 0) reads as empty.
fn read_all(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(len).read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
pub(crate) mod tests;
