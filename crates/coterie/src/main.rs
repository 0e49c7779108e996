//! `coterie`: distributed mutual exclusion and leader election over TCP.
//!
//! The binary is thin: each subcommand parses its flags and calls into
//! `coterie-node` (real sockets) or `coterie-sim` (the simulator).

mod cmd;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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
    /// Start a local cluster, kill its coordinator part-way, show the election.
    Demo(cmd::demo::Args),
    /// Write a cluster's configuration file.
    Init(cmd::init::Args),
    /// Make a CA and TLS certificates for the nodes of a configuration.
    Certs(cmd::certs::Args),
    /// Run one node of a cluster.
    Node(cmd::node::Args),
    /// Run every node of a configuration as local processes.
    Up(cmd::up::Args),
    /// Show each node's coordinator, epoch, state, live peers and counters.
    Status(cmd::status::Args),
    /// Stream every node's events as they happen: suspicions, elections, faults.
    Watch(cmd::watch::Args),
    // The help text is cmd::lock::Args's: it explains losing the lock and
    // the exit statuses.
    Lock(cmd::lock::Args),
    /// List the cluster's live locks: who holds each, who waits.
    Locks(cmd::locks::Args),
    /// Ask a lock's holders to let go (each decides: nothing is forced).
    Revoke(cmd::revoke::Args),
    // The help text is cmd::elect::Args's: campaigns and observers.
    Elect(cmd::elect::Args),
    /// Print the leader of an application's election.
    Leader(cmd::elect::LeaderArgs),
    /// Drive clients against a cluster; report throughput, latency, safety.
    Workload(cmd::workload::Args),
    /// Run the deterministic simulator over many seeds and report violations.
    Sim(cmd::sim::Args),
    /// Explore every schedule of a small cluster, exhaustively.
    Check(cmd::check::Args),
    /// Compare mutual-exclusion algorithms in the simulator: messages, delay, order.
    Bench(cmd::bench::Args),
    /// Run the witness that checks safety, or ask one what it saw.
    Witness(cmd::witness::Args),
    // The help text is cmd::fault::Args's (it says which nodes take faults).
    Fault(cmd::fault::Args),
    /// Play a fault scenario (scenarios/*.toml) against a local cluster.
    Run(cmd::run::Args),
    /// Serve a live page of a running cluster: nodes, messages, controls.
    Dashboard(cmd::dashboard::Args),
    /// Record clients' operations as a history, or check histories.
    History(cmd::history::Args),
    // The help text is cmd::nemesis::Args's: it lists the faults.
    Nemesis(cmd::nemesis::Args),
    /// Print shell completions: `coterie completions bash`.
    Completions(cmd::help::CompletionsArgs),
    /// Print the manual page (`coterie man | man -l -`), or write them all.
    Man(cmd::help::ManArgs),
}

/// The command line's definition, its top-level help grouped.
fn definition() -> clap::Command {
    cmd::help::grouped(Cli::command())
}

fn main() -> std::process::ExitCode {
    let cli = Cli::from_arg_matches(&definition().get_matches()).unwrap_or_else(|e| e.exit());
    let log = cli.log_format.as_str();
    let result = match cli.command {
        Command::Demo(args) => cmd::demo::run(args, log),
        Command::Init(args) => cmd::init::run(args),
        Command::Certs(args) => cmd::certs::run(args),
        Command::Node(args) => cmd::node::run(args, log),
        Command::Up(args) => cmd::up::run(args, log),
        Command::Status(args) => cmd::status::run(args),
        Command::Watch(args) => cmd::watch::run(args),
        Command::Lock(args) => cmd::lock::run(args),
        Command::Locks(args) => cmd::locks::run(args),
        Command::Revoke(args) => cmd::revoke::run(args),
        Command::Elect(args) => cmd::elect::run(args),
        Command::Leader(args) => cmd::elect::leader(args),
        Command::Workload(args) => cmd::workload::run(args),
        Command::Sim(args) => cmd::sim::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Witness(args) => cmd::witness::run(args, log),
        Command::Fault(args) => cmd::fault::run(args),
        Command::Run(args) => cmd::run::run(args, log),
        Command::Dashboard(args) => cmd::dashboard::run(args),
        Command::History(args) => cmd::history::run(args),
        Command::Nemesis(args) => cmd::nemesis::run(args),
        Command::Completions(args) => cmd::help::completions(args, definition()),
        Command::Man(args) => cmd::help::man(args, definition()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("coterie: {e:#}");
            // Refused at a node's door (TLS, or the secret): unavailable to
            // this client, as `coterie lock` says when no node lets it in.
            let refused = e.chain().any(|cause| {
                matches!(
                    cause.downcast_ref::<coterie_node::ClientError>(),
                    Some(
                        coterie_node::ClientError::Tls { .. }
                            | coterie_node::ClientError::Auth { .. }
                    )
                )
            });
            std::process::ExitCode::from(if refused { cmd::lock::EXIT_UNAVAILABLE } else { 2 })
        }
    }
}
