//! The recorded clients of a nemesis run: one `coterie history client`
//! process each, so that the nemesis can freeze one (SIGSTOP) as a real
//! program is frozen, and read from its history whether it waits or holds.

use anyhow::{Context, Result};
use coterie_history::{Func, Kind, Op};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::{Child, Command};

/// What a client is doing, as its history's last line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Doing {
    /// Between operations on the lock.
    Idle,
    /// Asked for the lock, not yet answered.
    Waiting,
    /// Holds the lock (granted, not yet released or lost).
    Holding,
}

/// One client process and its history file.
struct Client {
    child: Child,
    history: PathBuf,
    /// How far the history has been read, and the last operation in it.
    read_to: u64,
    last: Option<Op>,
}

/// The clients of a run.
pub struct Clients {
    clients: Vec<Client>,
}

/// How the clients are run.
pub struct Setup<'a> {
    pub config: &'a Path,
    pub witness: &'a str,
    pub dir: &'a Path,
    pub hold: Duration,
    pub timeout: Duration,
    /// Locks to spread the operations over (`None`: the default lock).
    pub names: Option<u32>,
    /// The share of acquires that read.
    pub read_share: f64,
}

impl Clients {
    /// Starts `n` clients, numbered from 1, writing `dir/pN.jsonl`.
    pub fn start(n: u32, setup: &Setup) -> Result<Clients> {
        let exe = std::env::current_exe().context("finding the binary")?;
        let mut clients = Vec::new();
        for p in 1..=n {
            let history = setup.dir.join(format!("p{p}.jsonl"));
            let log = std::fs::File::create(setup.dir.join(format!("p{p}.log")))?;
            let mut command = Command::new(&exe);
            command
                .args(["history", "client", "--config"])
                .arg(setup.config)
                .args(["--witness", setup.witness, "--process", &p.to_string(), "--out"])
                .arg(&history)
                .args(["--hold", &format!("{}ms", setup.hold.as_millis())])
                .args(["--timeout", &format!("{}ms", setup.timeout.as_millis())])
                .args(setup.names.map(|k| format!("--names={k}")))
                .args([format!("--read-share={}", setup.read_share)])
                .stdin(std::process::Stdio::null())
                .stderr(log)
                // A group of its own, as for nodes: a stopped member must
                // not get the whole group a SIGHUP.
                .process_group(0)
                .kill_on_drop(true);
            crate::cmd::harness::die_with_parent(&mut command);
            let child = command.spawn().with_context(|| format!("starting client {p}"))?;
            clients.push(Client { child, history, read_to: 0, last: None });
        }
        Ok(Clients { clients })
    }

    /// How many.
    pub fn len(&self) -> u32 {
        self.clients.len() as u32
    }

    /// What client `p` is doing now.
    pub fn doing(&mut self, p: u32) -> Doing {
        let Some(c) = self.clients.get_mut(p as usize - 1) else { return Doing::Idle };
        c.catch_up();
        match &c.last {
            Some(op) if op.f == Func::Acquire && op.kind == Kind::Invoke => Doing::Waiting,
            Some(op) if op.f == Func::Acquire && op.kind == Kind::Ok => Doing::Holding,
            Some(op) if matches!(op.f, Func::Read | Func::Write) => Doing::Holding,
            Some(op) if op.f == Func::Release && op.kind == Kind::Invoke => Doing::Holding,
            _ => Doing::Idle,
        }
    }

    /// Sends client `p` `signal`.
    pub fn signal(&self, p: u32, signal: i32) {
        if let Some(pid) = self.clients.get(p as usize - 1).and_then(|c| c.child.id()) {
            crate::cmd::common::signal(pid as i32, signal);
        }
    }

    /// Stops every client: SIGCONT (a frozen one must run to stop), then
    /// SIGTERM, which ends a wait at once and a critical section after its
    /// release; what has not exited in five seconds is killed.
    pub async fn stop(mut self) {
        for c in &self.clients {
            if let Some(pid) = c.child.id() {
                crate::cmd::common::signal(pid as i32, libc::SIGCONT);
                crate::cmd::common::signal(pid as i32, libc::SIGTERM);
            }
        }
        for c in &mut self.clients {
            if tokio::time::timeout(Duration::from_secs(5), c.child.wait()).await.is_err() {
                let _ = c.child.start_kill();
                let _ = c.child.wait().await;
            }
        }
    }
}

impl Client {
    /// Reads what the client wrote since the last look.
    fn catch_up(&mut self) {
        let Ok(mut file) = std::fs::File::open(&self.history) else { return };
        if file.seek(SeekFrom::Start(self.read_to)).is_err() {
            return;
        }
        let mut fresh = String::new();
        if file.read_to_string(&mut fresh).is_err() {
            return;
        }
        // Whole lines only: a line being written is read next time.
        let whole = fresh.rfind('\n').map_or(0, |i| i + 1);
        if let Some(line) = fresh[..whole].lines().rev().find(|l| !l.trim().is_empty()) {
            if let Ok(op) = serde_json::from_str::<Op>(line) {
                self.last = Some(op);
            }
        }
        self.read_to += whole as u64;
    }
}
