//! `coterie locks`: every live lock, cluster wide: who holds it and who
//! waits.

use super::common::{self, Target};
use anyhow::Result;
use coterie_node::protocol::{LockInfo, WaitOrder};
use coterie_node::Mode;
use std::process::ExitCode;

/// List the cluster's live locks: who holds each (node, client, fence,
/// how long, value) and who waits, in the order they will be served.
///
/// The first node that answers asks every other for its part and merges
/// them, so one node is enough. Waiters are listed in timestamp order
/// where the algorithm serves requests so (bakery, lamport,
/// ricart-agrawala and raymond-k under the classic priority,
/// lodha-kshemkalyani): that is the order they will be served in.
/// Otherwise (centralized's queue lives at the coordinator, token ring
/// serves in ring order, the quorum algorithms in no fixed one) they are
/// listed longest waiting first, and `order` says so. A node that does
/// not answer is named on standard error, and the exit status is 1.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Only the locks whose name starts with this.
    #[arg(value_name = "PREFIX", default_value = "")]
    prefix: String,
    /// Print the listing as a JSON array, a lock each.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let nodes = args.target.nodes()?;
    let prefix = args.prefix.as_str();
    let answer =
        common::small_runtime()?.block_on(common::first_answer(&nodes, None, |mut c| async move {
            c.locks(prefix).await
        }));
    let (locks, unreachable) = match answer {
        Ok(answer) => answer,
        Err(why) => {
            eprintln!("coterie locks: no node answered ({why})");
            return Ok(ExitCode::from(super::lock::EXIT_UNAVAILABLE));
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&locks)?);
    } else {
        print!("{}", table(&locks));
    }
    if !unreachable.is_empty() {
        let ids: Vec<String> = unreachable.iter().map(|n| format!("n{n}")).collect();
        eprintln!("coterie locks: no answer from {}: their clients are not listed", ids.join(", "));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// How a listing marks a reader: writers, the usual case, go unmarked.
fn reading(mode: Mode) -> &'static str {
    match mode {
        Mode::Read => " (read)",
        Mode::Write => "",
    }
}

/// The listing as a table, a line per lock and one per holder and waiter.
fn table(locks: &[LockInfo]) -> String {
    if locks.is_empty() {
        return "no lock is held or wanted\n".into();
    }
    let mut out = String::new();
    for lock in locks {
        let permits =
            if lock.permits > 1 { format!(" ({} permits)", lock.permits) } else { String::new() };
        out.push_str(&format!("{}{permits}\n", lock.name));
        for h in &lock.holders {
            let client = h.client.as_deref().unwrap_or("(lost: held for the lock delay)");
            let value = h.value.as_deref().map(|v| format!(", value {v:?}")).unwrap_or_default();
            let asked = match h.revoke.as_deref() {
                Some("") => ", asked to let go".to_string(),
                Some(why) => format!(", asked to let go ({why})"),
                None => String::new(),
            };
            let reading = reading(h.mode);
            out.push_str(&format!(
                "  held by   n{} {client}{reading}, fence {}, for {}{value}{asked}\n",
                h.node,
                h.fence,
                ms(h.held_ms)
            ));
        }
        for (i, w) in lock.waiters.iter().enumerate() {
            out.push_str(&format!(
                "  {:>2}. wait n{} {}{}, for {}\n",
                i + 1,
                w.node,
                w.client,
                reading(w.mode),
                ms(w.waited_ms)
            ));
        }
        if lock.waiters.len() > 1 && lock.order != WaitOrder::Timestamp {
            out.push_str("      (no global order known: longest waiting first)\n");
        }
    }
    out
}

fn ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}
