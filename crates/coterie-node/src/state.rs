//! A node's stable storage: one small file that the engine's
//! [`Output::Persist`](coterie_core::engine::Output::Persist) replaces and a
//! restarted node reads back ([`AlgoConfig::restored`](coterie_core::AlgoConfig)).
//!
//! The engine asks for a write before the messages that rest on it leave,
//! and the agent makes it before it sends them. [`storage`](crate::storage)
//! has the group-commit writer that makes these writes off the runtime's
//! thread.
//!
//! ## Format: two slots
//! The file is two slots of `S` bytes each, `S` a multiple of 4096 and at
//! least 4096, so the file is `2·S` long. A slot holds, little-endian:
//!
//! | bytes | what |
//! | --- | --- |
//! | `0..8` | the generation, a `u64` that every write raises by one |
//! | `8..12` | the record's length `n`, a `u32` |
//! | `12..16` | CRC-32 ([`crc32fast`]) of bytes `0..12` and the record |
//! | `16..16+n` | the record; the rest of the slot is unused |
//!
//! A write goes, with the next generation, to the slot that does *not* hold
//! the newest record (double-buffering, as file systems keep their
//! superblocks), then comes one `fdatasync`. [`StateFile::load`] reads both
//! slots and takes the valid one (checksum right) with the higher
//! generation.
//!
//! Why: the previous format was one record replaced through a temporary
//! file, flushed, renamed over the old one, and the directory flushed: three
//! flushes, a new inode and journal traffic on every write. Overwriting
//! blocks that are already allocated, in a file whose length does not
//! change, needs one `fdatasync` and no metadata (`fdatasync` leaves the
//! modification time alone): one flush per write. On the ext4 disk where
//! it was measured (`measure_synced_stores` below), a synced write went
//! from about 0.7 ms to about 0.13 ms (from ~1,450 to ~7,700 a second).
//! A power loss in the middle of a write can tear only the slot being
//! written, whose checksum then fails, and `load` falls back to the other
//! slot: the old record or the new one, never a torn mix.
//!
//! Slots are sized from the records: `S` is the smallest power of two, at
//! least 4096, that holds the header and the record. A record that no
//! longer fits has the file rewritten whole with larger slots, the old way
//! (temporary file, flush, rename, directory flush), once; later writes are
//! in place again. The first write to a file that holds nothing (missing,
//! empty, or only zeros) lays it out in place: zeros first, flushed, then
//! the record; a power loss in between leaves a file of zeros, which holds
//! no record.
//!
//! ## Synced or not
//! One format both ways, as the configuration's `state_sync` says:
//! - **synced** (the default): every write is flushed (`fdatasync`) before
//!   [`StateFile::store`] returns. Durable against a power loss.
//! - **unsynced**: the same writes without the flushes. A slot is written
//!   in a single `pwrite`; a killed process cannot interrupt a system call
//!   half-way, and the page cache outlives it, so this is durable against
//!   crashes of the process (what `coterie demo`, `run` and `bench`
//!   inflict), at a few microseconds; not against a power loss.
//!
//! A file in the earlier format (a 4-byte length, then the record) is still
//! read, and replaced by the two-slot file on the first write.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// A slot's header: generation, length, checksum.
const HEADER: usize = 16;
/// The smallest slot, and what every slot size is a multiple of.
const MIN_SLOT: u64 = 4096;

/// The file holding one node's durable state.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    /// Whether every write is flushed before `store` returns.
    sync: bool,
    inner: Mutex<Inner>,
}

/// What a write must know of the file as it is.
#[derive(Debug)]
struct Inner {
    layout: Layout,
    /// The generation of the newest record in the file, 0 if none.
    generation: u64,
}

#[derive(Debug)]
enum Layout {
    /// No record: the file is missing, empty or only zeros (and not the
    /// length of two slots). The first write lays it out in place.
    Blank,
    /// Two slots of `slot` bytes each; the next write goes to slot `next`
    /// (0 or 1), the one that does not hold the newest record.
    Slots { file: File, slot: u64, next: u64 },
    /// Something else, such as the earlier format: the first write
    /// replaces it whole, through a temporary file.
    Other,
}

impl StateFile {
    /// The state file of node `id` of cluster `cluster` in `dir`, creating
    /// `dir` if need be. With `sync`, every write is flushed to disk before
    /// it returns. Reads what is there, to go on from its newest
    /// generation; a file whose contents do not make sense is not an error
    /// here, but for [`load`](Self::load).
    pub fn open(dir: &Path, cluster: &str, id: u32, sync: bool) -> io::Result<StateFile> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{cluster}-node{id}.state"));
        let (layout, generation) = match read_all(&path)? {
            None => (Layout::Blank, 0),
            Some(bytes) => match slot_size(bytes.len()) {
                Some(slot) => {
                    let file = OpenOptions::new().read(true).write(true).open(&path)?;
                    match newest(&bytes, slot) {
                        Some((generation, index, _)) => {
                            (Layout::Slots { file, slot, next: 1 - index }, generation)
                        }
                        None => (Layout::Slots { file, slot, next: 0 }, 0),
                    }
                }
                None if is_zero(&bytes) => (Layout::Blank, 0),
                None => (Layout::Other, 0),
            },
        };
        Ok(StateFile { path, sync, inner: Mutex::new(Inner { layout, generation }) })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the previous run left, if anything: the newest record whose
    /// checksum holds. A file in slots with no valid record, or in the
    /// earlier format too short for its own length prefix, was damaged or
    /// never completely written: an error, not a guess.
    pub fn load(&self) -> io::Result<Option<Vec<u8>>> {
        match read_all(&self.path)? {
            Some(bytes) => parse(&bytes),
            None => Ok(None),
        }
    }

    /// Replaces the record with `bytes`: writes it, with the next
    /// generation, to the slot that does not hold the newest record, and
    /// flushes it if synced. Rewrites the file with larger slots if it does
    /// not fit. After an error the newest record that was stored whole is
    /// still there, and the next write goes to the same slot again.
    pub fn store(&self, bytes: &[u8]) -> io::Result<()> {
        let len = u32::try_from(bytes.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "record too long"))?;
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = inner.generation + 1;
        let image = encode(generation, len, bytes);
        let needed = image.len() as u64;
        match &mut inner.layout {
            Layout::Slots { file, slot, next } if needed <= *slot => {
                file.write_all_at(&image, *next * *slot)?;
                if self.sync {
                    file.sync_data()?;
                }
                *next ^= 1;
            }
            layout => {
                let slot = needed.next_power_of_two().max(MIN_SLOT);
                let file = match layout {
                    Layout::Blank => self.lay_out(slot, &image)?,
                    _ => self.rewrite(slot, &image)?,
                };
                *layout = Layout::Slots { file, slot, next: 1 };
            }
        }
        inner.generation = generation;
        Ok(())
    }

    /// Makes a file that holds nothing two slots of `slot` bytes, in place,
    /// with `image` in the first: zeros first, flushed, so that a power
    /// loss before the record is whole leaves zeros, which hold no record.
    fn lay_out(&self, slot: u64, image: &[u8]) -> io::Result<File> {
        let existed = self.path.try_exists()?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)?;
        let len = 2 * slot;
        file.write_all_at(&vec![0; len as usize], 0)?;
        let meta = file.metadata()?;
        if meta.is_file() && meta.len() > len {
            file.set_len(len)?; // zeros beyond two slots
        }
        if self.sync {
            file.sync_data()?;
            if !existed {
                self.sync_dir()?;
            }
        }
        file.write_all_at(image, 0)?;
        if self.sync {
            file.sync_data()?;
        }
        Ok(file)
    }

    /// Replaces the file whole with two slots of `slot` bytes, `image` in
    /// the first, through a temporary file renamed over it: the old record
    /// stays until the new one is complete.
    fn rewrite(&self, slot: u64, image: &[u8]) -> io::Result<File> {
        let tmp = self.path.with_extension("state.tmp");
        let mut whole = vec![0; 2 * slot as usize];
        whole[..image.len()].copy_from_slice(image);
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&tmp)?;
        file.write_all(&whole)?;
        if self.sync {
            file.sync_data()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if self.sync {
            self.sync_dir()?; // the rename itself lives in the directory
        }
        Ok(file) // the same inode, now at `path`
    }

    fn sync_dir(&self) -> io::Result<()> {
        match self.path.parent() {
            Some(dir) => File::open(dir)?.sync_all(),
            None => Ok(()),
        }
    }
}

/// The record a state file's `bytes` hold, as [`StateFile::load`] reads
/// it: the newest slot whose checksum holds, or the earlier format's
/// length-prefixed record. A file of zeros (or none) holds nothing; a file
/// in slots with no valid record, or in the earlier format too short for
/// its own length prefix, is an error.
pub fn parse(bytes: &[u8]) -> io::Result<Option<Vec<u8>>> {
    if is_zero(bytes) {
        return Ok(None); // created, never written
    }
    if let Some(slot) = slot_size(bytes.len()) {
        return match newest(bytes, slot) {
            Some((_, _, record)) => Ok(Some(record.to_vec())),
            None => Err(invalid("neither slot holds a valid record")),
        };
    }
    // The earlier format: a length, then the record (then, perhaps, the
    // tail of a longer record it overwrote in place).
    let len = bytes.get(..4).ok_or_else(|| invalid("truncated record"))?;
    let len = u32::from_le_bytes(len.try_into().expect("four bytes")) as usize;
    let end = len.checked_add(4).ok_or_else(|| invalid("truncated record"))?;
    let record = bytes.get(4..end).ok_or_else(|| invalid("truncated record"))?;
    Ok(Some(record.to_vec()))
}

/// A whole state file that holds `record` (generation 1, first slot), as
/// the first [`StateFile::store`] lays it out: for tests and fuzzing of
/// [`parse`].
pub fn image(record: &[u8]) -> Vec<u8> {
    let len = u32::try_from(record.len()).unwrap_or(u32::MAX);
    let slot = encode(1, len, record);
    let size = (slot.len() as u64).next_power_of_two().max(MIN_SLOT) as usize;
    let mut file = vec![0; 2 * size];
    file[..slot.len()].copy_from_slice(&slot);
    file
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

/// The size of a slot, if a file of `len` bytes is two of them.
fn slot_size(len: usize) -> Option<u64> {
    let len = len as u64;
    (len >= 2 * MIN_SLOT && len.is_multiple_of(2 * MIN_SLOT)).then_some(len / 2)
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// A slot's contents: header, then record.
fn encode(generation: u64, len: u32, record: &[u8]) -> Vec<u8> {
    let mut image = Vec::with_capacity(HEADER + record.len());
    image.extend_from_slice(&generation.to_le_bytes());
    image.extend_from_slice(&len.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&image);
    crc.update(record);
    image.extend_from_slice(&crc.finalize().to_le_bytes());
    image.extend_from_slice(record);
    image
}

/// The generation and record in `slot`, if its checksum holds.
fn decode(slot: &[u8]) -> Option<(u64, &[u8])> {
    let generation = u64::from_le_bytes(slot.get(0..8)?.try_into().ok()?);
    let len = u32::from_le_bytes(slot.get(8..12)?.try_into().ok()?) as usize;
    let sum = u32::from_le_bytes(slot.get(12..16)?.try_into().ok()?);
    let record = slot.get(HEADER..HEADER.checked_add(len)?)?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&slot[..12]);
    crc.update(record);
    (generation > 0 && crc.finalize() == sum).then_some((generation, record))
}

/// The valid slot with the highest generation: its generation, its index
/// (0 or 1) and its record.
fn newest(bytes: &[u8], slot: u64) -> Option<(u64, u64, &[u8])> {
    let (first, second) = bytes.split_at(slot as usize);
    let a = decode(first).map(|(g, r)| (g, 0, r));
    let b = decode(second).map(|(g, r)| (g, 1, r));
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.0 > a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// An empty scratch directory for one test (the storage tests use it
    /// too).
    pub(crate) fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("coterie-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// The generation in each slot of the file, 0 where it is not valid.
    fn generations(file: &StateFile) -> [u64; 2] {
        let bytes = std::fs::read(file.path()).unwrap();
        let slot = slot_size(bytes.len()).expect("two slots");
        let (a, b) = bytes.split_at(slot as usize);
        [decode(a).map_or(0, |s| s.0), decode(b).map_or(0, |s| s.0)]
    }

    #[test]
    fn what_is_stored_is_loaded_and_replaced_whole_both_ways() {
        for sync in [true, false] {
            let dir = scratch(&format!("state-{sync}"));
            let file = StateFile::open(&dir, "t", 3, sync).unwrap();
            assert_eq!(file.load().unwrap(), None, "nothing before the first store");
            file.store(b"first, longer contents").unwrap();
            file.store(b"second").unwrap();
            assert_eq!(file.load().unwrap().as_deref(), Some(&b"second"[..]), "sync {sync}");
            assert!(file.path().ends_with("t-node3.state"));
            // The next run reads what this one wrote, whichever way.
            let again = StateFile::open(&dir, "t", 3, !sync).unwrap();
            assert_eq!(again.load().unwrap().as_deref(), Some(&b"second"[..]));
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn a_torn_record_is_an_error_not_a_guess() {
        let dir = scratch("torn");
        let file = StateFile::open(&dir, "t", 1, true).unwrap();
        std::fs::write(file.path(), [9, 0, 0, 0, 1, 2]).unwrap();
        assert!(file.load().is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn load_takes_the_newest_valid_slot_and_writes_alternate() {
        let dir = scratch("slots");
        let file = StateFile::open(&dir, "t", 1, true).unwrap();
        file.store(b"one").unwrap();
        assert_eq!(generations(&file), [1, 0]);
        assert_eq!(std::fs::metadata(file.path()).unwrap().len(), 2 * MIN_SLOT);
        file.store(b"two").unwrap();
        assert_eq!(generations(&file), [1, 2]);
        file.store(b"three").unwrap();
        assert_eq!(generations(&file), [3, 2], "the older slot is overwritten");
        assert_eq!(file.load().unwrap().as_deref(), Some(&b"three"[..]));
        // A new run goes on from the newest generation, into the older slot.
        drop(file);
        let file = StateFile::open(&dir, "t", 1, true).unwrap();
        assert_eq!(file.load().unwrap().as_deref(), Some(&b"three"[..]));
        file.store(b"four").unwrap();
        assert_eq!(generations(&file), [3, 4]);
        assert_eq!(file.load().unwrap().as_deref(), Some(&b"four"[..]));
        assert_eq!(std::fs::metadata(file.path()).unwrap().len(), 2 * MIN_SLOT, "in place");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_damaged_newest_slot_falls_back_to_the_older_one() {
        let dir = scratch("damaged");
        let file = StateFile::open(&dir, "t", 1, true).unwrap();
        file.store(b"old record").unwrap();
        file.store(b"new record").unwrap();
        assert_eq!(generations(&file), [1, 2]);
        let pristine = std::fs::read(file.path()).unwrap();
        // A flipped byte anywhere in the newest slot's header or record.
        for at in [0, 8, 12, HEADER, HEADER + 9] {
            let mut bytes = pristine.clone();
            bytes[MIN_SLOT as usize + at] ^= 0x20;
            std::fs::write(file.path(), &bytes).unwrap();
            assert_eq!(file.load().unwrap().as_deref(), Some(&b"old record"[..]), "byte {at}");
        }
        // Generation 2 torn: the next run writes over it, not over 1.
        let again = StateFile::open(&dir, "t", 1, true).unwrap();
        again.store(b"newer").unwrap();
        assert_eq!(generations(&again), [1, 2]);
        assert_eq!(again.load().unwrap().as_deref(), Some(&b"newer"[..]));
        // Both slots damaged: an error, not a guess.
        let mut bytes = std::fs::read(again.path()).unwrap();
        bytes[HEADER] ^= 1;
        bytes[MIN_SLOT as usize + HEADER] ^= 1;
        std::fs::write(again.path(), &bytes).unwrap();
        assert!(again.load().is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn records_of_every_size_fit_and_the_file_grows_once_for_a_big_one() {
        for sync in [true, false] {
            let dir = scratch(&format!("sizes-{sync}"));
            let file = StateFile::open(&dir, "t", 1, sync).unwrap();
            let len = |f: &StateFile| std::fs::metadata(f.path()).unwrap().len();
            let fits = MIN_SLOT as usize - HEADER;
            for (size, file_len) in [
                (0, 2 * MIN_SLOT),
                (1, 2 * MIN_SLOT),
                (300, 2 * MIN_SLOT),
                (fits, 2 * MIN_SLOT),
                (fits + 1, 4 * MIN_SLOT),
                (10_000, 8 * MIN_SLOT),
                (100_000, 2 * 131_072),
                (5, 2 * 131_072), // slots do not shrink
            ] {
                let record: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
                file.store(&record).unwrap();
                assert_eq!(file.load().unwrap(), Some(record.clone()), "size {size}");
                assert_eq!(len(&file), file_len, "size {size}");
                let again = StateFile::open(&dir, "t", 1, sync).unwrap();
                assert_eq!(again.load().unwrap(), Some(record), "size {size}, reopened");
            }
            assert!(!dir.join("t-node1.state.tmp").exists());
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn the_earlier_format_is_read_and_replaced_by_the_first_store() {
        let dir = scratch("legacy");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t-node1.state");
        std::fs::write(&path, [3, 0, 0, 0, b'a', b'b', b'c', b'z']).unwrap();
        let file = StateFile::open(&dir, "t", 1, true).unwrap();
        assert_eq!(file.load().unwrap().as_deref(), Some(&b"abc"[..]));
        file.store(b"new").unwrap();
        assert_eq!(generations(&file), [1, 0]);
        file.store(b"newer").unwrap();
        assert_eq!(file.load().unwrap().as_deref(), Some(&b"newer"[..]));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_file_of_zeros_holds_nothing_and_is_laid_out_by_the_first_store() {
        let dir = scratch("zeros");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t-node1.state");
        for len in [0, 100, 2 * MIN_SLOT as usize, 3 * MIN_SLOT as usize] {
            std::fs::write(&path, vec![0; len]).unwrap();
            let file = StateFile::open(&dir, "t", 1, true).unwrap();
            assert_eq!(file.load().unwrap(), None, "{len} zeros");
            file.store(b"first").unwrap();
            assert_eq!(file.load().unwrap().as_deref(), Some(&b"first"[..]), "{len} zeros");
            assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * MIN_SLOT);
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The previous synced write: temporary file, flush, rename, directory
    /// flush.
    fn store_by_rename(path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut record = Vec::with_capacity(4 + bytes.len());
        record.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        record.extend_from_slice(bytes);
        let tmp = path.with_extension("state.tmp");
        let mut file = File::create(&tmp)?;
        file.write_all(&record)?;
        file.sync_data()?;
        std::fs::rename(&tmp, path)?;
        File::open(path.parent().unwrap())?.sync_all()
    }

    /// By hand: `cargo test -p coterie-node --release --lib
    /// measure_synced_stores -- --ignored --nocapture`, with
    /// `COTERIE_STORES` (default 500) stores of a 200-byte record in
    /// `COTERIE_STATE_DIR` (default the temporary directory).
    #[test]
    #[ignore = "a measurement, run by hand"]
    fn measure_synced_stores() {
        let n: u32 =
            std::env::var("COTERIE_STORES").ok().and_then(|s| s.parse().ok()).unwrap_or(500);
        let base = std::env::var_os("COTERIE_STATE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("coterie-measure-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let record = vec![0x5a; 200];
        let report = |what: &str, took: Duration| {
            let each = took / n;
            let rate = f64::from(n) / took.as_secs_f64();
            println!("{what:<32} {n} stores in {took:>10.2?}: {each:>9.2?} each, {rate:>9.0}/s");
        };
        let old = dir.join("old.state");
        let start = Instant::now();
        for _ in 0..n {
            store_by_rename(&old, &record).unwrap();
        }
        report("synced, temp+rename (before)", start.elapsed());
        for (sync, what) in [(true, "synced, two slots (now)"), (false, "unsynced, two slots")] {
            let file = StateFile::open(&dir, &format!("m{sync}"), 1, sync).unwrap();
            file.store(&record).unwrap(); // lays the file out
            file.store(&record).unwrap();
            let start = Instant::now();
            for _ in 0..n {
                file.store(&record).unwrap();
            }
            report(what, start.elapsed());
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
