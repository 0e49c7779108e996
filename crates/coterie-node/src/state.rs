//! A node's stable storage: one small file that the engine's
//! [`Output::Persist`](coterie_core::engine::Output::Persist) replaces and a
//! restarted node reads back ([`AlgoConfig::restored`](coterie_core::AlgoConfig)).
//!
//! The file holds one record: its length (4 bytes, little-endian), then
//! the bytes. The engine asks for a write before the messages that rest on
//! it leave, and the agent makes it before it sends them. Two ways to
//! write, as the configuration's `state_sync` says:
//! - **synced** (the default): a temporary file, flushed to disk, renamed
//!   over the old one. A power loss at any point leaves the old record or
//!   the new, never a torn mix. A flush costs about a millisecond or more.
//! - **unsynced**: the record overwrites the old one in place, in a single
//!   `pwrite`. A killed process cannot interrupt a system call half-way, and
//!   the page cache outlives it, so this is durable against crashes of the
//!   process (what `coterie demo`, `run` and `bench` inflict), at a few
//!   microseconds; not against a power loss.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The file holding one node's durable state.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    /// Unsynced: the file, open for overwriting in place. (Synced writes
    /// go through a temporary file each time.)
    file: Option<File>,
}

impl StateFile {
    /// The state file of node `id` of cluster `cluster` in `dir`, creating
    /// `dir` if need be. With `sync`, every write is flushed to disk before
    /// it returns.
    pub fn open(dir: &Path, cluster: &str, id: u32, sync: bool) -> std::io::Result<StateFile> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{cluster}-node{id}.state"));
        let file = if sync {
            None
        } else {
            Some(
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)?,
            )
        };
        Ok(StateFile { path, file })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the previous run left, if anything. A file too short for its
    /// own length prefix was never completely written: an error.
    pub fn load(&self) -> std::io::Result<Option<Vec<u8>>> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if bytes.is_empty() {
            return Ok(None); // created, never written
        }
        let torn = || std::io::Error::new(std::io::ErrorKind::InvalidData, "truncated record");
        let len = bytes.get(..4).ok_or_else(torn)?;
        let len = u32::from_le_bytes(len.try_into().expect("four bytes")) as usize;
        let record = bytes.get(4..4 + len).ok_or_else(torn)?;
        Ok(Some(record.to_vec()))
    }

    /// Replaces the record with `bytes`.
    pub fn store(&self, bytes: &[u8]) -> std::io::Result<()> {
        let len = u32::try_from(bytes.len()).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "record too long")
        })?;
        let mut record = Vec::with_capacity(4 + bytes.len());
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(bytes);
        match &self.file {
            Some(file) => file.write_all_at(&record, 0),
            None => {
                let tmp = self.path.with_extension("state.tmp");
                let mut file = File::create(&tmp)?;
                file.write_all(&record)?;
                file.sync_data()?;
                std::fs::rename(&tmp, &self.path)?;
                // The rename itself lives in the directory.
                if let Some(dir) = self.path.parent() {
                    File::open(dir)?.sync_all()?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_stored_is_loaded_and_replaced_whole_both_ways() {
        for sync in [true, false] {
            let dir =
                std::env::temp_dir().join(format!("coterie-state-{}-{sync}", std::process::id()));
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
        let dir = std::env::temp_dir().join(format!("coterie-torn-{}", std::process::id()));
        let file = StateFile::open(&dir, "t", 1, true).unwrap();
        std::fs::write(file.path(), [9, 0, 0, 0, 1, 2]).unwrap();
        assert!(file.load().is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
