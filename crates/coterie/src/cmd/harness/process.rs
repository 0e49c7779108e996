//! A node (or witness) running as a child process of this one.

use anyhow::{Context, Result};
use std::path::Path;
use std::time::Duration;
use tokio::process::{Child, Command};

/// A signal the harness sends to a process it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGSTOP: a hang that the sockets do not reveal.
    Stop,
    /// SIGCONT: the hang ends.
    Continue,
    /// SIGTERM: a clean shutdown.
    Terminate,
}

impl Signal {
    fn number(self) -> i32 {
        match self {
            Signal::Stop => libc::SIGSTOP,
            Signal::Continue => libc::SIGCONT,
            Signal::Terminate => libc::SIGTERM,
        }
    }
}

/// A child process: a node or a witness.
pub struct Process {
    child: Child,
}

impl Process {
    /// Starts `coterie node --config CONFIG --id ID` with this same binary,
    /// its log on `stderr`.
    pub fn node(
        config: &Path,
        id: u32,
        log_format: &str,
        stderr: std::process::Stdio,
        env: &[(String, String)],
        wrap: &[String],
    ) -> Result<Process> {
        let exe = std::env::current_exe().context("finding the binary")?;
        // Under a wrapper (`ip netns exec NS`, which execs the node in its
        // place, so the process is still the node's), or on its own.
        let mut command = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        command
            .args(["--log-format", log_format, "node", "--config"])
            .arg(config)
            .args(["--id", &id.to_string()])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stderr(stderr);
        Process::spawn(command).with_context(|| format!("starting node {id}"))
    }

    /// Starts `coterie witness --listen ADDR --capacity K`.
    pub fn witness(addr: &str, capacity: usize, log_format: &str) -> Result<Process> {
        let mut command = Command::new(std::env::current_exe().context("finding the binary")?);
        command.args(["--log-format", log_format, "witness", "--listen", addr]);
        command.args(["--capacity", &capacity.to_string()]);
        Process::spawn(command).context("starting the witness")
    }

    fn spawn(mut command: Command) -> std::io::Result<Process> {
        command
            .stdin(std::process::Stdio::null())
            // A process group of its own: a node stopped on purpose
            // (SIGSTOP, a hang) must not share a group with its siblings
            // and its parent, or the whole group is sent SIGHUP when it
            // becomes orphaned (POSIX does that to an orphaned group with
            // a stopped member). Ctrl-C reaches the command that started
            // it, which stops its children itself.
            .process_group(0)
            .kill_on_drop(true);
        die_with_parent(&mut command);
        let child = command.spawn()?;
        Ok(Process { child })
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends it `signal`.
    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = self.child.id() {
            super::super::common::signal(pid as i32, signal.number());
        }
    }

    /// SIGKILL, as in a crash (no goodbye), and waits for it to go.
    pub async fn kill(mut self) -> Result<()> {
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }

    /// Whether it has exited on its own.
    pub fn exited(&mut self) -> bool {
        self.exit_status().is_some()
    }

    /// How it ended, once it has exited on its own.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Asks every process of `all` to stop (SIGCONT first: a stopped
    /// process cannot act on SIGTERM), then waits up to three seconds for
    /// each; what is left is killed when dropped.
    pub async fn terminate_all(all: impl IntoIterator<Item = Process>) {
        let mut all: Vec<Process> = all.into_iter().collect();
        for p in &all {
            p.signal(Signal::Continue);
            p.signal(Signal::Terminate);
        }
        for p in &mut all {
            let _ = tokio::time::timeout(Duration::from_secs(3), p.child.wait()).await;
        }
    }
}

/// Makes the child killed when this process dies, however it dies (a
/// SIGKILL leaves no time to stop children): a harness never leaves nodes
/// or clients behind. Linux's parent-death signal, kept across `exec`.
pub fn die_with_parent(command: &mut Command) {
    // SAFETY: between fork and exec only async-signal-safe calls are
    // allowed; prctl is one, and nothing is allocated.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
