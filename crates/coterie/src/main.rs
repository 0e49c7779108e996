//! `coterie`: distributed mutual exclusion and leader election over TCP.
//!
//! The binary is thin: each subcommand parses its flags and calls into
//! `coterie-node` (real sockets) or `coterie-sim` (the simulator).

mod cmd;

use clap::{Parser, Subcommand};

/// Distributed mutual exclusion and leader election over real TCP.
///
/// Start with `coterie demo`: it runs a five-node cluster on this machine,
/// kills the coordinator part-way and shows the election that follows.
#[derive(Parser)]
#[command(name = "coterie", version, propagate_version = true)]
struct Cli {
    /// Log format on stderr: `text` for people, `json` for machines.
    /// RUST_LOG selects what is logged (default: info).
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the deterministic simulator over many seeds and report violations.
    Sim(cmd::sim::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => cmd::sim::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("coterie: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
