//! Group commit: the writer that makes a node's records durable, off the
//! runtime's thread.
//!
//! The rule it serves: **a record is durable before any message that
//! depends on it leaves.** A crashed node that comes back must not
//! contradict what it told others, so whatever it promised them has to be
//! on disk first. A synced write costs a flush, a millisecond or so, and
//! flushing each record in turn under the node's state, on its
//! single-threaded runtime, caps the node at one record per flush.
//!
//! Records are changes, applied in order ([`Delta`](coterie_core::Delta)).
//! [`StateWriter`] owns a thread of its own (a flush blocks, so not a
//! tokio task) and the [`StateFile`]. The node hands it a change with
//! [`submit`](StateWriter::submit), which never waits on the disk, and
//! goes on; the messages that depend on the change wait in the caller.
//! When the thread wakes it takes everything submitted meanwhile and
//! appends it all in one write: one flush covers them all (group commit),
//! so under load the number of flushes stays flat while the rate of
//! changes rises. Then it says so on a watch channel,
//! [`durable`](StateWriter::durable): [`Durability::Upto`]`(n)` means every
//! generation up to `n` is on disk, and the caller sends the messages it
//! held back for them.
//!
//! A failed write stops the writer for good ([`Durability::Failed`]): after
//! an I/O error the file's state is not known (a failed flush may even have
//! dropped pages it had accepted), so nothing later can be called durable,
//! and the node must stop rather than send what it cannot back.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use tokio::sync::watch;

use crate::state::{Counts, StateFile};

/// How far the writer has got, on [`StateWriter::durable`]'s channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Every generation up to and including this one is on disk (0:
    /// nothing written yet).
    Upto(u64),
    /// A write failed, for this reason (path and OS error); nothing more
    /// will be written, and no later generation will be durable.
    Failed(String),
}

/// A group-commit writer: a thread that owns a [`StateFile`] and appends
/// the changes submitted to it, in batches, as often as the disk allows.
/// Dropping it writes what was submitted and then stops the thread,
/// blocking until it has (a flush, at most two).
#[derive(Debug)]
pub struct StateWriter {
    shared: Arc<Shared>,
    file: Arc<StateFile>,
    durable: watch::Receiver<Durability>,
    thread: Option<JoinHandle<()>>,
}

/// What the caller and the thread share.
#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// Rung when there is a record to write or the writer is dropped.
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Queue {
    /// The changes submitted and not yet taken by the thread, in order.
    pending: Vec<Vec<u8>>,
    /// The highest generation submitted.
    submitted: u64,
    /// The writer is being dropped: write what is pending, then stop.
    closing: bool,
    /// A write failed: take nothing more.
    failed: bool,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl StateWriter {
    /// Starts the writer's thread, which owns `file` from now on.
    /// [`durable`](Self::durable) says `Upto(0)` until the first write.
    pub fn spawn(file: StateFile) -> StateWriter {
        let shared = Arc::new(Shared { queue: Mutex::new(Queue::default()), wake: Condvar::new() });
        let (tx, durable) = watch::channel(Durability::Upto(0));
        let file = Arc::new(file);
        let thread = std::thread::Builder::new()
            .name("coterie-state".into())
            .spawn({
                let (shared, file) = (Arc::clone(&shared), Arc::clone(&file));
                move || run(&shared, &file, &tx)
            })
            .expect("cannot start the state writer's thread");
        StateWriter { shared, file, durable, thread: Some(thread) }
    }

    /// Hands the thread change `generation`, to append after every change
    /// submitted before it. Never waits on the disk. Generations start at
    /// 1 and rise by one with every call: skipping or reusing one would let
    /// a change that is not on disk pass for durable, so it panics. After
    /// a failed write the change is dropped.
    pub fn submit(&self, generation: u64, change: Vec<u8>) {
        let mut queue = self.shared.queue();
        let last = queue.submitted;
        if generation != last + 1 {
            drop(queue);
            panic!("state generation {generation} submitted after {last}");
        }
        queue.submitted = generation;
        if queue.failed {
            return;
        }
        queue.pending.push(change);
        drop(queue);
        self.shared.wake.notify_one();
    }

    /// How far the writer has got: wait on it (`wait_for`, `changed`)
    /// before sending the messages that depend on a generation.
    pub fn durable(&self) -> watch::Receiver<Durability> {
        self.durable.clone()
    }

    /// How many batches the thread has written: one flush each when
    /// synced. Far fewer than the changes submitted under load.
    pub fn writes(&self) -> u64 {
        self.file.counts().batches
    }

    /// What the file has written, as of now.
    pub fn counts(&self) -> Counts {
        self.file.counts()
    }
}

impl Drop for StateWriter {
    /// Writes what was submitted, then stops and joins the thread.
    fn drop(&mut self) {
        self.shared.queue().closing = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The writer's thread: takes the pending changes, appends them, says
/// so; until dropped or a write fails.
fn run(shared: &Shared, file: &StateFile, tx: &watch::Sender<Durability>) {
    loop {
        let (generation, batch) = {
            let mut queue = shared.queue();
            loop {
                if !queue.pending.is_empty() {
                    break (queue.submitted, std::mem::take(&mut queue.pending));
                }
                if queue.closing {
                    return;
                }
                queue = shared.wake.wait(queue).unwrap_or_else(PoisonError::into_inner);
            }
        };
        match file.append(&batch) {
            Ok(()) => {
                tx.send_replace(Durability::Upto(generation));
            }
            Err(e) => {
                let path: PathBuf = file.path().into();
                let why = format!("cannot write {}: {e}", path.display());
                tracing::error!(generation, "{why}");
                let mut queue = shared.queue();
                queue.failed = true;
                queue.pending.clear();
                drop(queue);
                tx.send_replace(Durability::Failed(why));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::tests::scratch;
    use std::path::Path;
    use std::time::Duration;

    /// Waits (10 s at most) until the writer's durability satisfies `ok`,
    /// the way an async caller would.
    fn wait(
        mut rx: watch::Receiver<Durability>,
        ok: impl FnMut(&Durability) -> bool,
    ) -> Durability {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            let seen = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(ok));
            seen.await.expect("in time").expect("writer alive").clone()
        })
    }

    /// What a restart would read: the watermark the last change set.
    fn load(dir: &Path) -> Option<u64> {
        StateFile::read(dir, "t", 1).unwrap().restored.map(|r| r.watermark)
    }

    /// Change `n`: the watermark set to `n`.
    fn change(n: u64) -> Vec<u8> {
        coterie_core::Delta { watermark: n, ..Default::default() }.encode()
    }

    #[test]
    fn a_submitted_record_becomes_durable_and_is_loaded() {
        let dir = scratch("writer");
        let writer = StateWriter::spawn(StateFile::open(&dir, "t", 1, true).unwrap().file);
        assert_eq!(*writer.durable().borrow(), Durability::Upto(0));
        writer.submit(1, change(1));
        assert_eq!(wait(writer.durable(), |d| *d == Durability::Upto(1)), Durability::Upto(1));
        assert_eq!(load(&dir), Some(1));
        assert_eq!(writer.writes(), 1);
        // Dropping writes what was submitted before stopping.
        writer.submit(2, change(2));
        writer.submit(3, change(3));
        drop(writer);
        assert_eq!(load(&dir), Some(3));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn records_submitted_meanwhile_share_one_flush() {
        let dir = scratch("group");
        let writer = StateWriter::spawn(StateFile::open(&dir, "t", 1, true).unwrap().file);
        for generation in 1..=1000u64 {
            writer.submit(generation, change(generation));
        }
        wait(writer.durable(), |d| *d == Durability::Upto(1000));
        let writes = writer.writes();
        println!("1000 records submitted, {writes} written");
        assert!(writes <= 100, "{writes} writes for 1000 records");
        drop(writer);
        assert_eq!(load(&dir), Some(1000));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_failed_write_stops_the_writer_and_nothing_later_is_durable() {
        let full = Path::new("/dev/full");
        if !full.exists() {
            println!("no /dev/full here: skipping the write-failure test");
            return;
        }
        let dir = scratch("full");
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(full, dir.join("t-node1.log")).unwrap();
        let writer = StateWriter::spawn(StateFile::open(&dir, "t", 1, true).unwrap().file);
        writer.submit(1, change(1));
        let failed = wait(writer.durable(), |d| *d != Durability::Upto(0));
        let Durability::Failed(why) = &failed else {
            panic!("a write to /dev/full reported {failed:?}")
        };
        assert!(why.contains("t-node1.log"), "{why}");
        assert!(why.contains("No space left on device"), "{why}");
        // Later records are neither written nor called durable.
        let durable = writer.durable();
        writer.submit(2, change(2));
        writer.submit(3, change(3));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(writer.writes(), 0);
        drop(writer);
        assert_eq!(*durable.borrow(), failed, "the last word is the failure");
        assert!(durable.has_changed().is_err(), "and the writer has stopped");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    #[should_panic(expected = "state generation 3 submitted after 1")]
    fn a_generation_is_never_skipped() {
        struct Cleanup(PathBuf);
        impl Drop for Cleanup {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let dir = scratch("reuse");
        let _cleanup = Cleanup(dir.clone());
        let writer = StateWriter::spawn(StateFile::open(&dir, "t", 1, false).unwrap().file);
        writer.submit(1, change(1));
        writer.submit(3, change(3));
    }
}
