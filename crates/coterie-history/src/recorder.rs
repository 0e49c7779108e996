//! Appends a process's operations to its history file, one JSON line each.

use crate::op::Op;
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Nanoseconds of the host's monotonic clock (`CLOCK_MONOTONIC`).
///
/// Every process on one machine reads the same clock, so histories written
/// by different processes merge on it; and it is never stepped, so neither
/// NTP nor a clock-jump fault moves it (`libfaketime` is told to leave it
/// alone). It stops while the machine sleeps, which a test run does not.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec, and CLOCK_MONOTONIC is
    // always supported on Linux; the call writes nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A history file being written.
///
/// Each operation is written with one `write` call as soon as it is
/// recorded (no buffer held back), so a process killed or stopped at any
/// moment leaves every operation it recorded in the file, and at worst a
/// line cut short at the end, which [`parse`](crate::parse) skips.
pub struct Recorder {
    file: File,
    process: u32,
}

impl Recorder {
    /// Creates (or truncates) the history at `path` for `process`.
    pub fn create(path: &Path, process: u32) -> std::io::Result<Recorder> {
        Ok(Recorder { file: File::create(path)?, process })
    }

    /// The process whose history this is.
    pub fn process(&self) -> u32 {
        self.process
    }

    /// Records `op` (its time and process are taken as given).
    pub fn record(&mut self, op: &Op) -> std::io::Result<()> {
        let mut line = op.to_json();
        line.push('\n');
        self.file.write_all(line.as_bytes())
    }

    /// Records the invocation of `op` now, and returns it, stamped, to be
    /// completed later with [`Recorder::complete`].
    pub fn invoke(&mut self, mut op: Op) -> std::io::Result<Op> {
        op.time_ns = monotonic_ns();
        op.process = self.process;
        op.kind = crate::Kind::Invoke;
        self.record(&op)?;
        Ok(op)
    }

    /// Records that `invoked` completed now as `completed`: its kind and
    /// whatever it learnt (the fence granted, the value read, the error).
    pub fn complete(&mut self, completed: Op) -> std::io::Result<Op> {
        let op = Op { time_ns: monotonic_ns(), process: self.process, ..completed };
        self.record(&op)?;
        Ok(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Func, Kind};

    #[test]
    fn operations_are_on_disk_as_soon_as_recorded_and_in_time_order() {
        let dir = std::env::temp_dir().join(format!("coterie-history-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p1.jsonl");
        let mut r = Recorder::create(&path, 1).unwrap();
        let asked = r.invoke(Op::new(0, 0, Kind::Invoke, Func::Acquire, "a").node(1)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(crate::parse(&text, "p1").unwrap(), vec![asked.clone()]);
        let got = r.complete(asked.complete(0, Kind::Ok).fence(5)).unwrap();
        let ops = crate::read(&[path]).unwrap();
        assert_eq!(ops.len(), 2);
        assert!(ops[0].time_ns <= ops[1].time_ns);
        assert_eq!(ops[1], got);
        assert_eq!((got.process, got.fence, got.node), (1, Some(5), Some(1)));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_last_line_cut_short_is_skipped_but_a_bad_line_inside_is_an_error() {
        let whole = Op::new(1, 1, Kind::Invoke, Func::Acquire, "default").to_json();
        let cut = format!("{whole}\n{{\"time_ns\":2,\"pro");
        assert_eq!(crate::parse(&cut, "h").unwrap().len(), 1);
        let bad = format!("{{\"time_ns\":2,\"pro\n{whole}\n");
        let err = crate::parse(&bad, "h").unwrap_err().to_string();
        assert!(err.starts_with("h:1: not an operation"), "{err}");
    }
}
