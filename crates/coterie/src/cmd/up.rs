//! `coterie up`: every node of a configuration as local child processes.

use super::common;
use anyhow::{Context, Result};
use coterie_node::Config;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

/// Run every node of the configuration (and its witness, if it names one)
/// as child processes of this one; Ctrl-C stops them all.
///
/// Their logs interleave on stderr, each line naming its node. Type
/// commands on standard input to fail nodes and watch the others elect:
/// `kill N` (SIGKILL, a crash), `stop N` (SIGSTOP, a hang only heartbeats
/// reveal), `cont N` (resume), `start N` (bring a killed node back). With
/// --dashboard, a page in the browser shows the cluster live, and its
/// buttons do the same.
#[derive(clap::Args)]
pub struct Args {
    /// The cluster's configuration file (or COTERIE_CONFIG).
    #[arg(long, short = 'c', value_name = "FILE", env = "COTERIE_CONFIG")]
    config: PathBuf,
    /// Serve the live dashboard here (e.g. 127.0.0.1:8080), with buttons
    /// that kill, stop, resume and restart these processes.
    #[arg(long, value_name = "ADDR")]
    dashboard: Option<String>,
}

/// Starts `coterie node` for `id` with this same binary.
pub fn spawn_node(
    config: &Path,
    id: u32,
    log_format: &str,
    stderr: std::process::Stdio,
) -> Result<Child> {
    let exe = std::env::current_exe().context("finding the coterie binary")?;
    Command::new(exe)
        .args(["--log-format", log_format, "node", "--config"])
        .arg(config)
        .args(["--id", &id.to_string()])
        .stdin(std::process::Stdio::null())
        .stderr(stderr)
        // A process group of its own: a node stopped on purpose (SIGSTOP, a
        // hang) must not share a group with its siblings and its parent,
        // or the whole group is sent SIGHUP when it becomes orphaned (POSIX
        // does that to an orphaned group with a stopped member). Ctrl-C
        // reaches `up` or `demo`, which stop the nodes themselves.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting node {id}"))
}

/// A command typed on `up`'s standard input.
#[derive(Debug, PartialEq, Eq)]
enum Control {
    /// SIGKILL: a crash; connections close, peers notice at once.
    Kill(u32),
    /// SIGSTOP: a hang; only the heartbeat timeout notices.
    Stop(u32),
    /// SIGCONT: the hang ends.
    Cont(u32),
    /// Start the node again (after a kill).
    Start(u32),
    Help,
}

impl Control {
    fn parse(line: &str) -> Result<Control, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let id = |w: Option<&&str>| {
            w.and_then(|w| w.parse::<u32>().ok()).ok_or_else(|| format!("{line:?} needs a node id"))
        };
        match words.first().copied() {
            Some("kill") => id(words.get(1)).map(Control::Kill),
            Some("stop" | "pause") => id(words.get(1)).map(Control::Stop),
            Some("cont" | "resume") => id(words.get(1)).map(Control::Cont),
            Some("start" | "restart") => id(words.get(1)).map(Control::Start),
            Some("help") | None => Ok(Control::Help),
            Some(other) => Err(format!("unknown command {other:?}")),
        }
    }
}

const CONTROL_HELP: &str =
    "commands: kill N (crash), stop N (hang), cont N (resume), start N (after kill)";

/// Sends `signal` to a running child.
fn signal(child: &Child, signal: i32) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on our own child with a valid signal number.
        unsafe {
            libc::kill(pid as libc::pid_t, signal);
        }
    }
}

pub fn run(args: Args, log_format: &str) -> Result<ExitCode> {
    let cfg = Config::load(&args.config)?;
    let runtime = common::runtime()?;
    let result = runtime.block_on(async {
        let mut witness = None;
        if let Some(w) = &cfg.witness {
            let exe = std::env::current_exe()?;
            let child = Command::new(exe)
                .args(["--log-format", log_format, "witness", "--listen", &w.addr])
                .args(["--capacity", &cfg.cluster.count.to_string()])
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context("starting the witness")?;
            eprintln!("coterie up: witness on {} (pid {})", w.addr, child.id().unwrap_or_default());
            witness = Some(child);
        }
        let mut nodes: std::collections::BTreeMap<u32, Option<Child>> = Default::default();
        for node in &cfg.nodes {
            let child =
                spawn_node(&args.config, node.id, log_format, std::process::Stdio::inherit())?;
            eprintln!(
                "coterie up: node {} peer {} client {} (pid {})",
                node.id,
                node.peer,
                node.client,
                child.id().unwrap_or_default()
            );
            nodes.insert(node.id, Some(child));
        }
        eprintln!(
            "coterie up: {} nodes running {} + {}; Ctrl-C stops them; {CONTROL_HELP}",
            cfg.nodes.len(),
            cfg.cluster.mutex,
            cfg.cluster.election
        );
        // The dashboard's buttons speak the same language as stdin.
        let (control, mut clicks) = tokio::sync::mpsc::unbounded_channel::<String>();
        if let Some(addr) = &args.dashboard {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("serving the dashboard on {addr}"))?;
            eprintln!("coterie up: dashboard on http://{}/", listener.local_addr()?);
            let title = format!(
                "{}: {} + {}, {} nodes",
                cfg.cluster.name,
                cfg.cluster.mutex,
                cfg.cluster.election,
                cfg.nodes.len()
            );
            let nodes = common::Target::of(&args.config).nodes()?;
            tokio::spawn(async move {
                let stop = std::future::pending();
                let served =
                    super::dashboard::serve(listener, nodes, title, Some(control), stop).await;
                if let Err(e) = served {
                    eprintln!("coterie up: the dashboard stopped: {e:#}");
                }
            });
        } else {
            drop(control);
        }
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        let mut stdin_open = true;
        let shutdown = common::shutdown_signal();
        tokio::pin!(shutdown);
        loop {
            let line = tokio::select! {
                _ = &mut shutdown => break,
                line = lines.next_line(), if stdin_open => line,
                Some(click) = clicks.recv() => Ok(Some(click)),
            };
            let Ok(Some(line)) = line else {
                stdin_open = false; // no (more) commands; keep running
                continue;
            };
            let command = match Control::parse(&line) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("coterie up: {e}; {CONTROL_HELP}");
                    continue;
                }
            };
            let id = match command {
                Control::Kill(id) | Control::Stop(id) | Control::Cont(id) | Control::Start(id) => {
                    id
                }
                Control::Help => {
                    eprintln!("coterie up: {CONTROL_HELP}");
                    continue;
                }
            };
            let Some(slot) = nodes.get_mut(&id) else {
                eprintln!("coterie up: there is no node {id}");
                continue;
            };
            match (command, slot.as_mut()) {
                (Control::Kill(_), Some(child)) => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    *slot = None;
                    eprintln!("coterie up: killed node {id} (SIGKILL)");
                }
                (Control::Stop(_), Some(child)) => {
                    signal(child, libc::SIGSTOP);
                    eprintln!("coterie up: stopped node {id} (SIGSTOP)");
                }
                (Control::Cont(_), Some(child)) => {
                    signal(child, libc::SIGCONT);
                    eprintln!("coterie up: resumed node {id} (SIGCONT)");
                }
                (Control::Start(_), None) => {
                    let child =
                        spawn_node(&args.config, id, log_format, std::process::Stdio::inherit())?;
                    eprintln!(
                        "coterie up: started node {id} (pid {})",
                        child.id().unwrap_or_default()
                    );
                    *slot = Some(child);
                }
                (Control::Start(_), Some(_)) => eprintln!("coterie up: node {id} is running"),
                (_, None) => eprintln!("coterie up: node {id} is not running (start {id})"),
                (Control::Help, _) => {}
            }
        }
        eprintln!("coterie up: stopping");
        let mut children: Vec<Child> = nodes.into_values().flatten().chain(witness).collect();
        for child in &children {
            signal(child, libc::SIGCONT); // a stopped child cannot act on SIGTERM
            if let Some(pid) = child.id() {
                common::terminate(pid);
            }
        }
        for child in &mut children {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(3), child.wait()).await;
        }
        Ok(ExitCode::SUCCESS)
    });
    // The stdin reader blocks in a thread of its own until a line or EOF
    // comes; waiting for it would keep `up` alive after Ctrl-C.
    runtime.shutdown_background();
    result
}

#[cfg(test)]
mod tests {
    use super::Control;

    #[test]
    fn control_commands_parse_or_explain() {
        assert_eq!(Control::parse("kill 5"), Ok(Control::Kill(5)));
        assert_eq!(Control::parse(" pause 2 "), Ok(Control::Stop(2)));
        assert_eq!(Control::parse("resume 2"), Ok(Control::Cont(2)));
        assert_eq!(Control::parse("restart 5"), Ok(Control::Start(5)));
        assert_eq!(Control::parse(""), Ok(Control::Help));
        assert!(Control::parse("kill").unwrap_err().contains("needs a node id"));
        assert!(Control::parse("nuke 3").unwrap_err().contains("unknown command"));
    }
}
