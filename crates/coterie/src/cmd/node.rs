//! `coterie node`: run one node.

use super::common;
use anyhow::Result;
use coterie_node::{node, Config};
use std::path::PathBuf;
use std::process::ExitCode;

/// Run one node of a cluster until SIGINT or SIGTERM.
///
/// The node binds the `peer` and `client` addresses of its [[node]] entry,
/// dials every node above it (each pair of nodes shares one connection,
/// which the lower id dials), and logs elections, coordinator changes, grants
/// and peers going up and down at info level.
#[derive(clap::Args)]
pub struct Args {
    /// The cluster's configuration file (or COTERIE_CONFIG).
    #[arg(long, short = 'c', value_name = "FILE", env = "COTERIE_CONFIG")]
    config: PathBuf,
    /// This node's id in the configuration (or COTERIE_ID: in Kubernetes,
    /// from the pod's index).
    #[arg(long, env = "COTERIE_ID")]
    id: u32,
}

pub fn run(args: Args, log_format: &str) -> Result<ExitCode> {
    let _logs = common::init_logging(log_format, "info");
    let cfg = Config::load(&args.config)?;
    common::small_runtime()?.block_on(async {
        let listeners = node::bind(&cfg, args.id).await?;
        node::run(cfg, args.id, listeners, common::shutdown_signal()).await?;
        Ok(ExitCode::SUCCESS)
    })
}
