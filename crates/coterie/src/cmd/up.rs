//! `coterie up`: every node of a configuration as local child processes.

use super::common;
use anyhow::{Context, Result};
use coterie_node::Config;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tokio::process::{Child, Command};

/// Run every node of the configuration (and its witness, if it names one)
/// as child processes of this one; Ctrl-C stops them all.
///
/// Their logs interleave on stderr, each line naming its node. Kill one
/// (`kill -9 PID`, the pids are printed) and watch the others elect.
#[derive(clap::Args)]
pub struct Args {
    /// The cluster's configuration file.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: PathBuf,
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
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting node {id}"))
}

pub fn run(args: Args, log_format: &str) -> Result<ExitCode> {
    let cfg = Config::load(&args.config)?;
    common::runtime()?.block_on(async {
        let mut children = Vec::new();
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
            children.push(child);
        }
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
            children.push(child);
        }
        eprintln!(
            "coterie up: {} nodes running {} + {}; Ctrl-C stops them",
            cfg.nodes.len(),
            cfg.cluster.mutex,
            cfg.cluster.election
        );
        common::shutdown_signal().await;
        eprintln!("coterie up: stopping");
        for child in &children {
            if let Some(pid) = child.id() {
                common::terminate(pid);
            }
        }
        for child in &mut children {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(3), child.wait()).await;
        }
        Ok(ExitCode::SUCCESS)
    })
}
