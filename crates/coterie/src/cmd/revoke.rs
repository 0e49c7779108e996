//! `coterie revoke`: ask a lock's holders to let go.

use super::common::{self, Target};
use anyhow::Result;
use coterie_node::protocol::Revoked;
use coterie_node::ClientError;
use std::process::ExitCode;

/// Ask every holder of a lock, cluster wide, to let go.
///
/// Revocation is cooperative, as Curator's and Chubby's are: nothing is
/// taken from anyone. Each holder hears the request and decides. A
/// `coterie lock --on-revoke SIGNAL` holder sends its command that
/// signal; an HTTP session gets a `revoke` event on its stream (`GET
/// /v1/sessions/{id}/watch`); a Rust client hears it from
/// `Client::hold_event`. `coterie locks` shows which holders were asked,
/// and why.
///
/// Exit status: 0 when holders were asked (how many is printed); 1 when
/// nobody holds the lock (there is no one to ask); 69 when no node
/// answered; 2 for a name that is not one.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The lock (default: `default`).
    #[arg(value_name = "NAME", default_value = "default")]
    name: String,
    /// Why, as the holders are told.
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// Print the answer as JSON: `{"name", "holders", "unreachable"}`.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    if let Err(why) = super::lock::check_names(std::slice::from_ref(&args.name)) {
        eprintln!("coterie revoke: {why}");
        return Ok(ExitCode::from(2));
    }
    let nodes = args.target.nodes()?;
    let (name, reason) = (args.name.as_str(), args.reason.clone());
    let answer = common::small_runtime()?.block_on(async {
        let mut errors = Vec::new();
        for node in &nodes {
            let mut client = match node.connect().await {
                Ok(c) => c,
                Err(e) => {
                    errors.push(format!("{}: {e}", node.addr));
                    continue;
                }
            };
            // One node asks the others: a refusal is the cluster's answer.
            return Ok(client.revoke(name, reason).await);
        }
        Err(errors.join("; "))
    });
    let (holders, unreachable) = match answer {
        Ok(Ok(answer)) => answer,
        Ok(Err(ClientError::Refused(why))) => {
            eprintln!("coterie revoke: {why}");
            return Ok(ExitCode::FAILURE);
        }
        Ok(Err(e)) => {
            eprintln!("coterie revoke: {e}");
            return Ok(ExitCode::from(super::lock::EXIT_UNAVAILABLE));
        }
        Err(why) => {
            eprintln!("coterie revoke: no node answered ({why})");
            return Ok(ExitCode::from(super::lock::EXIT_UNAVAILABLE));
        }
    };
    if args.json {
        let report = Revoked { name: name.to_string(), holders, unreachable: unreachable.clone() };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let whom = if holders == 1 { "holder" } else { "holders" };
        println!("asked {holders} {whom} of {name:?} to let go");
    }
    if !unreachable.is_empty() {
        let ids: Vec<String> = unreachable.iter().map(|n| format!("n{n}")).collect();
        eprintln!(
            "coterie revoke: no answer from {}: a holder there was not asked",
            ids.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
