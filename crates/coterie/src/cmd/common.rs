//! What several subcommands share: picking nodes, logging, runtimes,
//! signals.

use anyhow::{bail, Context, Result};
use coterie_core::registry::{self, ElectionInfo, MutexInfo};
use coterie_core::Partitions;
use coterie_node::{Client, ClientError, Config, Credentials};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

/// How a command finds the node(s) it talks to: `--config FILE` (every
/// node, or `--node ID`), or `--addr HOST:PORT` (one client port).
#[derive(clap::Args, Clone, Debug)]
pub struct Target {
    /// The cluster's configuration file (or COTERIE_CONFIG). Its
    /// `[cluster]` keys `mutex`, `election`, `count` and `lock_delay` can
    /// be overridden with COTERIE_MUTEX, COTERIE_ELECTION, COTERIE_COUNT
    /// and COTERIE_LOCK_DELAY: a flag wins over the environment, the
    /// environment over the file.
    #[arg(long, short = 'c', value_name = "FILE", env = "COTERIE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Only this node of the configuration.
    #[arg(long, value_name = "ID")]
    pub node: Option<u32>,
    /// A node's client address, instead of a configuration.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "node")]
    pub addr: Option<String>,
}

/// A node to talk to: its id (when known), client address, and what to
/// prove ourselves with if the cluster has a secret.
#[derive(Clone, Debug)]
pub struct NodeAddr {
    pub id: Option<u32>,
    pub addr: String,
    pub credentials: Option<Arc<Credentials>>,
}

impl NodeAddr {
    /// A client session with the node.
    pub async fn connect(&self) -> Result<Client, ClientError> {
        Client::connect_with(&self.addr, self.credentials.as_deref()).await
    }
}

/// `n` ports free on `host` now (see [`coterie_node::config::free_ports`]).
pub fn free_ports(host: &str, n: usize) -> Result<Vec<u16>> {
    coterie_node::config::free_ports(host, n)
        .with_context(|| format!("finding free ports on {host}"))
}

/// Asks each node in turn (each within `limit`, if given) until one
/// answers `ask`; else every node's error, `addr: error`, joined.
pub async fn first_answer<T, F, Fut>(
    nodes: &[NodeAddr],
    limit: Option<std::time::Duration>,
    ask: F,
) -> Result<T, String>
where
    F: Fn(Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let mut errors = Vec::new();
    for node in nodes {
        let asked = async { ask(node.connect().await?).await };
        let answer = match limit {
            Some(limit) => match tokio::time::timeout(limit, asked).await {
                Ok(answer) => answer.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no answer within {limit:?}")),
            },
            None => asked.await.map_err(|e| e.to_string()),
        };
        match answer {
            Ok(answer) => return Ok(answer),
            Err(e) => errors.push(format!("{}: {e}", node.addr)),
        }
    }
    Err(errors.join("; "))
}

/// The credentials a cluster's configuration gives, if any: TLS (the CA
/// and a client certificate, each of which `COTERIE_TLS_CA`,
/// `COTERIE_TLS_CERT` and `COTERIE_TLS_KEY` override), or else its secret
/// (`COTERIE_SECRET_FILE` overriding the file).
pub fn credentials(cfg: &Config) -> Result<Option<Arc<Credentials>>> {
    let cluster = cfg.cluster.name.clone();
    if let Some(tls) = cfg.client_tls()? {
        return Ok(Some(Arc::new(Credentials { secret: None, cluster, tls: Some(tls) })));
    }
    let secret = cfg.secret()?;
    Ok(secret.map(|secret| Arc::new(Credentials::with_secret(secret, cluster))))
}

impl Target {
    pub fn load_config(&self) -> Result<Option<Config>> {
        self.config.as_deref().map(|p| Config::load(p).map_err(Into::into)).transpose()
    }

    /// Every node of the configuration file at `config`.
    pub fn of(config: &std::path::Path) -> Target {
        Target { config: Some(config.to_path_buf()), node: None, addr: None }
    }

    /// The nodes the command should address, in id order.
    pub fn nodes(&self) -> Result<Vec<NodeAddr>> {
        if let Some(addr) = &self.addr {
            // No configuration: TLS or a secret only from the
            // environment, and whichever cluster the node belongs to.
            let tls = coterie_node::config::client_tls_from(None, None, None)?;
            let credentials = match std::env::var_os("COTERIE_SECRET_FILE") {
                _ if tls.is_some() => {
                    Some(Arc::new(Credentials { secret: None, cluster: String::new(), tls }))
                }
                Some(path) if !path.is_empty() => {
                    let secret = coterie_node::config::read_secret(std::path::Path::new(&path))?;
                    Some(Arc::new(Credentials::with_secret(secret, "")))
                }
                _ => None,
            };
            return Ok(vec![NodeAddr { id: None, addr: addr.clone(), credentials }]);
        }
        let Some(cfg) = self.load_config()? else {
            bail!("say which cluster: --config FILE (or --addr HOST:PORT for one node)");
        };
        let credentials = credentials(&cfg)?;
        let nodes: Vec<NodeAddr> = cfg
            .nodes
            .iter()
            .filter(|n| self.node.is_none_or(|id| id == n.id))
            .map(|n| NodeAddr {
                id: Some(n.id),
                addr: n.client.clone(),
                credentials: credentials.clone(),
            })
            .collect();
        if nodes.is_empty() {
            bail!("node {} is not in the configuration", self.node.unwrap_or_default());
        }
        Ok(nodes)
    }

    /// Every node of the configuration, the one `--node` names first: for
    /// a command that may move on to another node when its own goes.
    pub fn nodes_named_first(&self) -> Result<Vec<NodeAddr>> {
        let named = self.nodes()?;
        if self.node.is_none() {
            return Ok(named);
        }
        let mut all = Target { node: None, ..self.clone() }.nodes()?;
        all.sort_by_key(|n| n.id != self.node); // stable: the rest in id order
        Ok(all)
    }
}

/// Keeps the background log writer alive; logs are flushed when it drops.
pub type LogGuard = tracing_appender::non_blocking::WorkerGuard;

/// Lines the log writer holds at most before it drops them. Its queue is
/// allocated whole: tracing-appender's default of 128,000 lines is 4 MB
/// resident in every node, more than the rest of its heap.
const LOG_LINES_BUFFERED: usize = 4096;

/// Sets up logging on stderr. `default` applies when RUST_LOG is unset.
/// Lines are handed to a background thread that writes them, so a node's
/// hot path (a grant is logged at info) never waits on the terminal; if
/// the terminal falls [`LOG_LINES_BUFFERED`] lines behind, lines are
/// dropped rather than the node held up.
pub fn init_logging(format: &str, default: &str) -> LogGuard {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(LOG_LINES_BUFFERED)
        .lossy(true)
        .finish(std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer);
    if format == "json" {
        builder.json().init();
    } else {
        builder.with_target(false).with_ansi(std::io::stderr().is_terminal()).init();
    }
    guard
}

/// A runtime on the calling thread: a node or witness needs no more, and
/// one thread keeps an idle node's footprint small.
pub fn small_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting tokio")
}

/// A multi-threaded runtime for drivers that run many clients.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}

/// Parses "250ms", "2s", ...
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration like \"5s\": {e}"))
}

/// Sends signal number `signal` to process `pid` (to process group
/// `-pid` when negative). The one place this binary calls kill(2).
pub fn signal(pid: i32, signal: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions; a pid that is no
    // longer ours, or a bad number, only makes it fail.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// The algorithms a new cluster runs, wherever one is made (`init`,
/// `demo`): `--mutex`, `--election`, `--count`, `--partition-mode`.
#[derive(clap::Args)]
pub struct Algorithms {
    /// Mutual-exclusion algorithm.
    #[arg(long, default_value = "centralized", value_parser = registry::mutex)]
    pub mutex: &'static MutexInfo,
    /// Election algorithm.
    #[arg(long, default_value = "bully", value_parser = registry::election)]
    pub election: &'static ElectionInfo,
    /// Holders at once: a counting semaphore, for the algorithms that
    /// count (centralized, centralized-lending, raymond-k).
    #[arg(long, default_value_t = 1)]
    pub count: usize,
    #[command(flatten)]
    pub partitions: PartitionMode,
}

/// The algorithms a simulated cluster runs (`sim`, `check`): `--mutex`,
/// `--election`, `--partition-mode`. The simulator starts from
/// ricart-agrawala, the textbook's first distributed algorithm, where a
/// new cluster starts from centralized, the cheapest.
#[derive(clap::Args)]
pub struct Simulated {
    /// Mutual-exclusion algorithm.
    #[arg(long, default_value = "ricart-agrawala", value_parser = registry::mutex)]
    pub mutex: &'static MutexInfo,
    /// Election algorithm.
    #[arg(long, default_value = "bully", value_parser = registry::election)]
    pub election: &'static ElectionInfo,
    #[command(flatten)]
    pub partitions: PartitionMode,
}

/// `--partition-mode`, wherever a cluster is made, run or simulated.
#[derive(clap::Args, Clone, Copy)]
pub struct PartitionMode {
    /// Who decides that a peer is down: `majority` (a peer leaves only
    /// through a view a majority agreed to, and a node acts only under a
    /// majority's lease: a minority grants nothing) or `detector` (the
    /// textbook assumption: a suspected peer has crashed, so under a
    /// partition both sides go on, and both may grant). `[cluster]
    /// partitions` of a cluster file.
    #[arg(
        long = "partition-mode",
        env = "COTERIE_PARTITIONS",
        default_value = "majority",
        value_parser = partition_mode
    )]
    pub mode: Partitions,
}

/// Parses `--partition-mode`.
fn partition_mode(text: &str) -> Result<Partitions, String> {
    text.parse().map_err(|e: coterie_core::UnknownPartitions| e.to_string())
}

/// `--diagram`, `--shiviz` and their options, wherever a run is made or
/// replayed (`sim --seed`, `watch`, `demo`, `run`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Drawing {
    /// Write the run's space-time diagram to this SVG file: a line per
    /// node, an arrow per message, the critical section as a bar with its
    /// fence, faults, suspicions and elections marked.
    #[arg(long, value_name = "FILE.svg")]
    pub diagram: Option<std::path::PathBuf>,
    /// Write the run as a ShiViz log with vector clocks (its first line is
    /// the expression ShiViz parses it with).
    #[arg(long, value_name = "FILE.log")]
    pub shiviz: Option<std::path::PathBuf>,
    /// With --diagram or --shiviz: heartbeats too.
    #[arg(long)]
    pub heartbeats: bool,
    /// With --diagram or --shiviz: start this long into the run.
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub from: Option<std::time::Duration>,
    /// With --diagram or --shiviz: end this long into the run.
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub until: Option<std::time::Duration>,
    /// With --diagram or --shiviz: draw only the moments around the first
    /// message of this kind (after --from, if given): `election`,
    /// `inquire`, `flush`...
    #[arg(long, value_name = "KIND")]
    pub around: Option<String>,
    /// With --around: how much of the run to draw (a quarter before the
    /// message, the rest after).
    #[arg(long, value_name = "TIME", value_parser = parse_duration, default_value = "40ms")]
    pub span: std::time::Duration,
}

impl Drawing {
    /// Whether anything is to be drawn (so the run must be recorded).
    pub fn wanted(&self) -> bool {
        self.diagram.is_some() || self.shiviz.is_some()
    }

    /// Writes what was asked for of `run`, saying where on standard error.
    pub fn write(&self, run: &coterie_diagram::Run) -> Result<()> {
        let mut options = coterie_diagram::svg::Options {
            heartbeats: self.heartbeats,
            from_us: self.from.map(|d| d.as_micros() as u64),
            until_us: self.until.map(|d| d.as_micros() as u64),
        };
        if let Some(kind) = &self.around {
            let after = options.from_us.unwrap_or(0);
            let Some(first) = run
                .messages
                .iter()
                .filter(|m| &m.kind == kind && m.sent_us >= after)
                .map(|m| m.sent_us)
                .min()
            else {
                bail!("--around {kind}: the run sent no {kind} message (after --from)");
            };
            let span = self.span.as_micros() as u64;
            options.from_us = Some(first.saturating_sub(span / 4));
            options.until_us = Some(first + span - span / 4);
        }
        let write = |path: &std::path::Path, text: String| {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
        };
        if let Some(path) = &self.diagram {
            write(path, coterie_diagram::svg::render(run, &options))?;
            let shown = run.messages.iter().filter(|m| self.heartbeats || !m.heartbeat).count();
            eprintln!(
                "diagram: {} ({shown} messages{}, {} entries, {:.1} ms)",
                path.display(),
                if self.heartbeats { "" } else { " besides heartbeats" },
                run.sections.len(),
                run.end_us as f64 / 1000.0
            );
        }
        if let Some(path) = &self.shiviz {
            write(path, coterie_diagram::shiviz::render(run, &options))?;
            eprintln!("shiviz log: {} (upload it on ShiViz's input page)", path.display());
        }
        Ok(())
    }
}

/// What a cluster of `cfg`'s size must know about majority mode, when it
/// is the size where that bites: two nodes, a majority of which is both.
pub fn majority_note(cfg: &Config) -> Option<&'static str> {
    (cfg.cluster.partitions == coterie_core::Partitions::Majority && cfg.nodes.len() == 2)
        .then_some(
            "with partitions = \"majority\" (the default) a majority of 2 nodes is both: one \
         failure stops the cluster (3 nodes survive one, 5 survive two; partitions = \"detector\" \
         keeps serving, unsafely under a partition)",
        )
}

/// A share between 0 and 1 (`--read-share`).
pub fn parse_share(text: &str) -> Result<f64, String> {
    let share: f64 = text.parse().map_err(|_| format!("{text:?} is not a number"))?;
    if (0.0..=1.0).contains(&share) {
        Ok(share)
    } else {
        Err(format!("{share} is not a share: give one from 0 to 1"))
    }
}
