//! `coterie init`: a cluster file, written by the same builder the tests,
//! the harness and the bench scripts use (`Config::new`, `to_toml`), and
//! checked as `coterie up` will read it.

use super::common;
use anyhow::{bail, Context, Result};
use coterie_node::config::{ClusterSection, Config, WitnessSection};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Write a cluster's configuration file: `coterie init --nodes 3 >
/// cluster.toml`, then `coterie up --config cluster.toml`.
///
/// The nodes listen on 127.0.0.1 (or --host): node i's peer port is
/// --base-port + i, its client port 100 above, its HTTP API's 300 above
/// (with --http), as in config/local.toml; or, with --free-ports, ports
/// the system has free now. Every other key is at its default (see the
/// guide's configuration reference).
#[derive(clap::Args)]
pub struct Args {
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=65535))]
    nodes: u32,
    /// The cluster's name; nodes refuse peers from another cluster.
    #[arg(long, default_value = "local")]
    name: String,
    /// --mutex, --election, --count.
    #[command(flatten)]
    algorithms: common::Algorithms,
    /// The address the nodes listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Node i's peer port is this plus i (client +100, HTTP +300).
    #[arg(long, default_value_t = 7100, conflicts_with = "free_ports")]
    base_port: u16,
    /// Ports free on this machine now, instead of --base-port's.
    #[arg(long)]
    free_ports: bool,
    /// Serve the HTTP/JSON API on every node.
    #[arg(long)]
    http: bool,
    /// TLS on every port: write a CA (`ca.pem`, and its key `ca.key`), a
    /// certificate and key per node (`nodeN.pem`, `nodeN.key`) and one for
    /// clients (`client.pem`, `client.key`) beside the --out file, valid
    /// for a year, and the `[security]` keys that name them. Add `--set
    /// security.client_cert_auth=true` to make clients show theirs.
    #[arg(long, requires = "out")]
    tls: bool,
    /// Take `coterie fault` commands: labs and tests only.
    #[arg(long)]
    allow_faults: bool,
    /// Keep what must outlive a crash in this directory (relative to the
    /// file): the highest epoch, a clock reserve, a quorum arbiter's grant,
    /// a view's promise. Without it, fences may repeat after every node
    /// restarts.
    #[arg(long, value_name = "DIR", default_value = "state")]
    state_dir: PathBuf,
    /// Keep that state in memory only (see --state-dir).
    #[arg(long, conflicts_with = "state_dir")]
    no_state_dir: bool,
    /// Do not sync the state file on every change.
    #[arg(long)]
    no_state_sync: bool,
    /// After a holder is lost, hand the lock to nobody for this long.
    #[arg(long, value_parser = common::parse_duration)]
    lock_delay: Option<Duration>,
    /// How often heartbeats go out.
    #[arg(long, value_parser = common::parse_duration)]
    heartbeat: Option<Duration>,
    /// Silence after which a peer is suspected.
    #[arg(long, value_parser = common::parse_duration)]
    failure_timeout: Option<Duration>,
    /// The witness workloads check their entries at.
    #[arg(long, value_name = "ADDR")]
    witness: Option<String>,
    /// Any other key: `--set limits.max_names=6000`, `--set
    /// timing.detector=ring`, `--set security.secret_file=secret` (a value
    /// that is not TOML is taken as a string). Checked as `up` reads it.
    #[arg(long, value_name = "SECTION.KEY=VALUE")]
    set: Vec<String>,
    /// Write the file here instead of on stdout. A file already there is
    /// kept, and init refuses, unless --force.
    #[arg(long, short = 'o', value_name = "FILE")]
    out: Option<PathBuf>,
    /// Overwrite the --out file if it exists.
    #[arg(long, short = 'f', requires = "out")]
    force: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    if let Some(path) = args.out.as_deref().filter(|p| !args.force && p.exists()) {
        anyhow::bail!(
            "{} exists; init keeps it (--force overwrites it, or choose another --out)",
            path.display()
        );
    }
    let mut config = build(&args)?;
    if args.tls {
        let out = args.out.as_deref().expect("clap: --tls requires --out");
        let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        coterie_node::pki::make(&mut config, dir, coterie_node::pki::VALID_FOR)?;
    }
    let text = set(config.to_toml(), &args.set)?;
    // As `up` will read it: what the builder cannot refuse, this does.
    let written = Config::parse(&text, args.out.as_deref().unwrap_or(Path::new("cluster.toml")))?;
    refuse_an_open_api(&written)?;
    if let Some(note) = common::majority_note(&written) {
        eprintln!("coterie init: note: {note}");
    }
    match &args.out {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("writing {}", path.display()))?
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

fn build(args: &Args) -> Result<Config> {
    let per_node = if args.http { 3 } else { 2 };
    let ports: Vec<u16> = if args.free_ports {
        common::free_ports(&args.host, per_node * args.nodes as usize)?
    } else {
        let mut ports = Vec::new();
        for i in 1..=args.nodes {
            let port = |offset: u32| {
                u16::try_from(u32::from(args.base_port) + offset + i)
                    .map_err(|_| anyhow::anyhow!("--base-port {} leaves no room", args.base_port))
            };
            ports.extend([port(0)?, port(100)?]);
            if args.http {
                ports.push(port(300)?);
            }
        }
        ports
    };
    let mut cluster =
        ClusterSection::new(&args.name, args.algorithms.mutex, args.algorithms.election);
    cluster.count = args.algorithms.count;
    cluster.partitions = args.algorithms.partitions.mode;
    cluster.state_dir = (!args.no_state_dir).then(|| args.state_dir.clone());
    cluster.state_sync = !args.no_state_sync;
    if let Some(delay) = args.lock_delay {
        cluster.lock_delay = delay;
    }
    let mut config = Config::on(cluster, &args.host, &ports, args.http);
    config.security.allow_faults = args.allow_faults;
    if let Some(heartbeat) = args.heartbeat {
        config.timing.heartbeat = heartbeat;
    }
    if let Some(timeout) = args.failure_timeout {
        config.timing.failure_timeout = timeout;
    }
    config.witness = args.witness.clone().map(|addr| WitnessSection { addr });
    Ok(config)
}

/// The node's own rule, on the file as written (after `--set`): an API
/// served beyond loopback needs a secret and tokens, or `api_open`.
fn refuse_an_open_api(config: &Config) -> Result<()> {
    let security = &config.security;
    if security.secret_file.is_some()
        || security.api_token_file.is_some()
        || security.api_open
        || security.client_cert_auth
    {
        return Ok(());
    }
    let exposed = config.nodes.iter().filter_map(|n| n.http.as_deref()).find(|addr| {
        let host = addr.rsplit_once(':').map_or(*addr, |(host, _)| host);
        !is_loopback(host.trim_start_matches('[').trim_end_matches(']'))
    });
    if let Some(addr) = exposed {
        bail!(
            "the API on {addr}: without a secret or client certificates the API is served on \
             loopback only; write the file for 127.0.0.1, add [security] secret_file and \
             api_token_file (--set security.secret_file=... --set security.api_token_file=...), \
             use --tls with --set security.client_cert_auth=true, or --set \
             security.api_open=true"
        );
    }
    Ok(())
}

/// `text` with each `SECTION.KEY=VALUE` of `sets` set.
fn set(text: String, sets: &[String]) -> Result<String> {
    if sets.is_empty() {
        return Ok(text);
    }
    let mut table: toml::Table = text.parse()?;
    for assignment in sets {
        let Some((path, value)) = assignment.split_once('=') else {
            bail!("--set {assignment}: say SECTION.KEY=VALUE");
        };
        let Some((section, key)) = path.split_once('.') else {
            bail!("--set {assignment}: name the key with its section, as in limits.max_names");
        };
        let value: toml::Value = format!("v = {value}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.to_string()));
        let entry = table.entry(section).or_insert_with(|| toml::Table::new().into());
        let Some(section_table) = entry.as_table_mut() else {
            bail!("--set {assignment}: [{section}] is not a section of one table");
        };
        section_table.insert(key.to_string(), value);
    }
    Ok(toml::to_string(&table)?)
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}
