//! `coterie up`: every node of a configuration as local child processes.

use super::common;
use super::dashboard::Order;
use super::harness::step::HELP;
use super::harness::{Cluster, LocalCluster, Process, Step};
use super::timeline::Reach;
use anyhow::{Context, Result};
use coterie_node::Config;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

/// Run every node of the configuration (and its witness, if it names one)
/// as child processes of this one; Ctrl-C stops them all.
///
/// Their logs interleave on stderr, each line naming its node. Type
/// steps on standard input to fail nodes and watch the others elect, in
/// the language of scenario files: `kill N` (SIGKILL, a crash), `stop N`
/// (SIGSTOP, a hang only heartbeats reveal), `resume N`, `restart N`
/// (bring a killed node back), `partition N`, `delay N 100ms`, `drop N
/// 10%`, `reset N`, `heal`; N is an id or `coordinator`, `holder`,
/// `waiter`. With --dashboard, a page in the browser shows the cluster
/// live, and its buttons do the same.
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

pub fn run(args: Args, log_format: &str) -> Result<ExitCode> {
    let cfg = Config::load(&args.config)?;
    // Started in the background of an interactive shell (`coterie up &`),
    // a read of the terminal would stop the whole process (SIGTTIN), and a
    // stopped process takes no SIGTERM until continued. Ignored, the read
    // fails instead, and `up` runs on without its console.
    // SAFETY: setting a signal's disposition to SIG_IGN touches no memory.
    unsafe {
        libc::signal(libc::SIGTTIN, libc::SIG_IGN);
    }
    let runtime = common::runtime()?;
    let result = runtime.block_on(async {
        let mut witness = None;
        if let Some(w) = &cfg.witness {
            let process = Process::witness(&w.addr, cfg.cluster.count, log_format)?;
            eprintln!(
                "coterie up: witness on {} (pid {})",
                w.addr,
                process.pid().unwrap_or_default()
            );
            witness = Some(process);
        }
        let mut local = LocalCluster::from_config(&args.config, log_format)?;
        for node in &cfg.nodes {
            let scheme = if cfg.security.tls() { "https" } else { "http" };
            let http = node.http.as_ref().map_or(String::new(), |a| format!(" {scheme}://{a}"));
            eprintln!(
                "coterie up: node {} peer {} client {}{http} (pid {})",
                node.id,
                node.peer,
                node.client,
                local.pid(node.id).unwrap_or_default()
            );
        }
        eprintln!(
            "coterie up: {} nodes running {} + {}; Ctrl-C stops them; type help for commands",
            cfg.nodes.len(),
            cfg.cluster.mutex,
            cfg.cluster.election
        );
        if let Some(note) = common::majority_note(&cfg) {
            eprintln!("coterie up: note: {note}");
        }
        let mut cluster = Cluster::Local(local);
        // The dashboard's buttons speak the same language as stdin.
        let (control, mut orders) = mpsc::unbounded_channel::<Order>();
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
            let nodes = cluster.nodes().to_vec();
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
        let mut previous = None;
        let shutdown = common::shutdown_signal();
        tokio::pin!(shutdown);
        let mut look = tokio::time::interval(std::time::Duration::from_millis(500));
        loop {
            let (step, reply) = tokio::select! {
                _ = &mut shutdown => break,
                _ = look.tick() => {
                    // A node that died by itself is said, not left silent.
                    if let Cluster::Local(local) = &mut cluster {
                        for (id, status) in local.reap() {
                            eprintln!(
                                "coterie up: node {id} exited by itself ({status}); \
                                 `restart {id}` starts it again"
                            );
                        }
                    }
                    continue;
                }
                line = lines.next_line(), if stdin_open => {
                    let line = match line {
                        Ok(Some(line)) => line,
                        Ok(None) => {
                            stdin_open = false; // no (more) commands; keep running
                            continue;
                        }
                        Err(e) => {
                            // In the background of a terminal (EIO).
                            eprintln!(
                                "coterie up: no console ({e}): running on; the dashboard \
                                 (--dashboard) and `coterie fault` act on the cluster, \
                                 kill {} stops it",
                                std::process::id()
                            );
                            stdin_open = false;
                            continue;
                        }
                    };
                    if matches!(line.trim(), "" | "help") {
                        eprintln!("coterie up: {HELP}");
                        continue;
                    }
                    match line.parse::<Step>() {
                        Ok(step) => (step, None),
                        Err(e) => {
                            eprintln!("coterie up: {e} (type help)");
                            continue;
                        }
                    }
                }
                Some(order) = orders.recv() => (order.step, Some(order.reply)),
            };
            let outcome = carry_out(&mut cluster, &step, &mut previous).await;
            match &outcome {
                Ok(done) => eprintln!("coterie up: {done}"),
                Err(e) => eprintln!("coterie up: {e}"),
            }
            if let Some(reply) = reply {
                let _ = reply.send(outcome);
            }
        }
        eprintln!("coterie up: stopping");
        cluster.stop_all().await;
        Process::terminate_all(witness).await;
        Ok(ExitCode::SUCCESS)
    });
    // The stdin reader blocks in a thread of its own until a line or EOF
    // comes; waiting for it would keep `up` alive after Ctrl-C.
    runtime.shutdown_background();
    result
}

/// Carries out `step`; says what was done, or why not.
async fn carry_out(
    cluster: &mut Cluster,
    step: &Step,
    previous: &mut Option<u32>,
) -> Result<String, String> {
    let id = match step.node {
        None => None,
        Some(target) => {
            let id = cluster.resolve(target, &Reach::default(), *previous).await;
            Some(id.ok_or_else(|| format!("no node was {target}"))?)
        }
    };
    *previous = id.or(*previous);
    let what = step.action.describe(id);
    match cluster.apply(&step.action, id).await {
        Ok(faults) if faults.is_empty() => Ok(what),
        Ok(faults) => Ok(format!("{what}: {faults}")),
        Err(e) => Err(format!("{what}: {e:#}")),
    }
}
