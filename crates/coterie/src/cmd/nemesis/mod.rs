//! `coterie nemesis`: a real cluster, recorded clients and a seeded
//! nemesis, judged by the history checker.
//!
//! Jepsen's shape on one machine. Launch nodes as processes; start client
//! processes (`coterie history client`) that take the lock and increment
//! the witness's register, each recording what it was told; run a seeded
//! schedule of faults against nodes and clients, recording each in the
//! history too; heal everything, let the clients run on to show recovery,
//! stop them, read the registers; then merge and check the history.

mod clients;
mod inflict;
mod netns;
pub mod plan;

use super::common;
use super::harness::{Cluster, LocalCluster, Placement, Shape};
use super::timeline::Reach;
use anyhow::{bail, Context, Result};
use coterie_core::registry::{ElectionInfo, MutexInfo};
use coterie_core::{CsState, Epoch};
use coterie_history::{Func, Kind as OpKind, Op, Options, Recorder, Register, Report, NEMESIS};
use plan::Kind;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Run a cluster under a nemesis, record every client operation, check
/// the history.
///
/// Nodes and clients are real processes on this machine. The nemesis
/// kills and restarts nodes, pauses them (SIGSTOP), freezes clients while
/// they wait and while they hold, partitions the nodes (halves, a bridge
/// node that sees both, a majorities ring; with the agents' own faults),
/// steps or speeds a node's wall clock (libfaketime) and restarts it, and
/// loses or rolls back a node's state, or truncates its state log, before a restart.
/// One fault every --every, each healed before the next, for --duration;
/// then everything is healed and the clients run on for --recover.
///
/// The history checker then reports, per lock name: acknowledged holds
/// that overlapped (lease overlaps: one of them was later found lost),
/// fences out of real-time order or granted twice, lost updates on the
/// plain and on the fenced register, and how long after the nemesis ended
/// a lock was granted again. Overlaps, fences out of order and plain lost
/// updates are what a lock that trusts timeouts costs (a frozen holder's
/// lease runs out while it believes it holds; a cut-off minority goes on
/// granting); a fence granted twice, a fenced lost update, a stall or a
/// node left wanting are failures. See docs/src/nemesis.md.
///
/// Exit status: 0 when no run has a failure, 1 otherwise.
#[derive(clap::Args)]
pub struct Args {
    /// Mutual-exclusion algorithm: a name, several separated by commas,
    /// or `all`.
    #[arg(long, default_value = "ricart-agrawala")]
    mutex: String,
    /// Election algorithm: a name, several separated by commas, or `all`.
    #[arg(long, default_value = "bully")]
    election: String,
    /// Nodes.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..=64))]
    nodes: u32,
    /// Recorded client processes (spread over the nodes).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=64))]
    clients: u32,
    /// A semaphore of this many permits (`[cluster] count`, for the
    /// algorithms that count; with `--mutex all` the others are left out):
    /// every client asks for one of them, so that clients sharing a node
    /// hold at once. The history is judged against as many holders at
    /// once; fences only for repeats (with several holders, grants are not
    /// ordered), and the registers not at all (several holders write them
    /// at once by design).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    count: u32,
    /// Spread the clients' operations over this many locks (`r0` ..
    /// `rK-1`, each with its register; default: the `default` lock
    /// alone): every check is made per lock.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    names: Option<u32>,
    /// The share of acquires (0 to 1) that take the lock to read: a
    /// read-heavy mix. A reader reads the registers and writes nothing;
    /// readers may hold at once (under an algorithm with a reader form),
    /// never with a writer, and the history is judged so.
    #[arg(long, default_value_t = 0.0, value_parser = common::parse_share)]
    read_share: f64,
    /// How long the nemesis acts.
    #[arg(long, value_parser = common::parse_duration, default_value = "30s")]
    duration: Duration,
    /// The faults to draw from, separated by commas (default: all that
    /// this machine can make; `clock` needs libfaketime).
    #[arg(long, value_delimiter = ',')]
    faults: Vec<Kind>,
    /// One fault this often.
    #[arg(long, value_parser = common::parse_duration, default_value = "2s")]
    every: Duration,
    /// Seeds the schedule: the same seed, the same faults at the same times.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where partitions are made: `netns` puts each node in a network
    /// namespace of its own and cuts links with nftables (root only);
    /// `agent` uses the nodes' own partition fault; `auto` takes netns
    /// where it can.
    #[arg(long, value_enum, default_value_t = Network::Auto)]
    network: Network,
    /// `[cluster] lock_delay`.
    #[arg(long, value_parser = common::parse_duration, default_value = "0s")]
    lock_delay: Duration,
    #[command(flatten)]
    partitions: common::PartitionMode,
    /// TLS on every port of the cluster (certificates made for it, as
    /// `init --tls` makes them) instead of a secret.
    #[arg(long)]
    tls: bool,
    /// How long a client holds the lock between reading the register and
    /// writing it back.
    #[arg(long, value_parser = common::parse_duration, default_value = "20ms")]
    hold: Duration,
    /// How long the clients run on after the nemesis ends.
    #[arg(long, value_parser = common::parse_duration, default_value = "5s")]
    recover: Duration,
    /// How soon after the nemesis ends a lock must be granted again.
    #[arg(long, value_parser = common::parse_duration, default_value = "10s")]
    recovery_bound: Duration,
    /// Keep each run's histories, logs and report under DIR/MUTEX-ELECTION
    /// (default: a temporary directory, removed unless the run failed).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print JSON: an array with one report per run.
    #[arg(long)]
    json: bool,
    /// Run nothing: check again the histories of the runs kept under DIR
    /// (an earlier --out) and print their tables.
    #[arg(long, value_name = "DIR")]
    report_from: Option<PathBuf>,
}

/// Where partitions are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// netns where this machine allows it, else agent.
    Auto,
    /// Network namespaces, veth links and nftables rules.
    Netns,
    /// The agents' own partition fault.
    Agent,
}

/// What one run found.
#[derive(Serialize)]
pub struct RunReport {
    pub mutex: String,
    pub election: String,
    pub nodes: u32,
    pub clients: u32,
    /// Permits of the lock (the cluster's `count`).
    pub count: u32,
    /// Locks the operations were spread over.
    pub names: u32,
    /// The share of acquires that read.
    pub read_share: f64,
    pub seed: u64,
    pub lock_delay_ms: u64,
    /// `[cluster] partitions`: `detector` or `majority`.
    pub partitions: String,
    pub duration_s: f64,
    /// Where partitions were made: `netns` or `agent`.
    pub network: Network,
    /// Faults made, by kind.
    pub faults: BTreeMap<String, u32>,
    /// Nodes still wanting or holding five seconds after every client
    /// stopped: a lock that would never come back.
    pub stuck_nodes: Vec<u32>,
    /// Failures: what nothing excuses.
    pub failures: Vec<String>,
    /// Where the histories, logs and this report are.
    pub dir: String,
    /// The checker's report.
    pub history: Report,
}

pub fn run(args: Args) -> Result<ExitCode> {
    if let Some(root) = &args.report_from {
        let reports = recheck(root, args.recovery_bound)?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&reports)?);
        } else {
            println!("{}\n{}", table(&reports), by_fault_table(&reports));
        }
        let failed = reports.iter().any(|r| !r.failures.is_empty());
        return Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS });
    }
    use coterie_core::registry::{self, ELECTIONS, MUTEXES};
    let mut mutexes = expand(&args.mutex, MUTEXES, registry::mutex)?;
    if args.count > 1 {
        let counting: Vec<&str> =
            MUTEXES.iter().filter(|m| m.claims.counting).map(|m| m.name).collect();
        if args.mutex == "all" {
            mutexes.retain(|m| m.claims.counting);
        } else if let Some(m) = mutexes.iter().find(|m| !m.claims.counting) {
            bail!(
                "--count {} does not fit {m}, which admits one holder at a time; these count: {}",
                args.count,
                counting.join(", ")
            );
        }
    }
    let elections = expand(&args.election, ELECTIONS, registry::election)?;
    let kinds = kinds(&args.faults)?;
    let keep = args.out.clone();
    let root = match &keep {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("coterie-nemesis-{}", std::process::id())),
    };
    let mut reports = Vec::new();
    let runtime = common::runtime()?;
    for &mutex in &mutexes {
        for &election in &elections {
            let dir = root.join(format!("{mutex}-{election}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("history"))
                .with_context(|| format!("cannot create {}", dir.display()))?;
            if !args.json {
                eprintln!(
                    "nemesis: {mutex} + {election}, {} nodes, {} clients, {} s of {} (seed {}); in {}",
                    args.nodes,
                    args.clients,
                    args.duration.as_secs_f64(),
                    kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(","),
                    args.seed,
                    dir.display()
                );
            }
            // Ctrl-C or SIGTERM drops the run: every node and client this
            // process started is killed as it is dropped (stopped ones too).
            let report = runtime.block_on(async {
                tokio::select! {
                    report = one(&args, mutex, election, &kinds, &dir, reports.len() as u32) => report.map(Some),
                    _ = common::shutdown_signal() => Ok(None),
                }
            })?;
            let Some(report) = report else {
                eprintln!(
                    "nemesis: interrupted; every node and client stopped ({})",
                    dir.display()
                );
                return Ok(ExitCode::from(130));
            };
            if !args.json {
                let history = coterie_history::read(&[dir.join("history.jsonl")])?;
                print!("{}", super::history::render(&history, &report.history));
                println!("{}", summary_line(&report));
            }
            if keep.is_none() && report.failures.is_empty() {
                let _ = std::fs::remove_dir_all(&dir);
            }
            reports.push(report);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else if reports.len() > 1 {
        println!("\n{}\n{}", table(&reports), by_fault_table(&reports));
    }
    if keep.is_none() {
        let _ = std::fs::remove_dir(&root);
    }
    let failed = reports.iter().any(|r| !r.failures.is_empty());
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `all` (every entry of `table`), one name or a comma list, each looked
/// up once.
fn expand<T>(
    asked: &str,
    table: &'static [T],
    lookup: fn(&str) -> Result<&'static T, coterie_core::registry::UnknownAlgorithm>,
) -> Result<Vec<&'static T>> {
    if asked == "all" {
        return Ok(table.iter().collect());
    }
    Ok(asked.split(',').map(|name| lookup(name.trim())).collect::<Result<_, _>>()?)
}

/// The faults asked for, or every one this machine can make.
fn kinds(asked: &[Kind]) -> Result<Vec<Kind>> {
    if asked.is_empty() {
        let all = Kind::ALL.iter().copied();
        return Ok(all.filter(|&k| k != Kind::Clock || inflict::clock_faults_possible()).collect());
    }
    if asked.contains(&Kind::Clock) && !inflict::clock_faults_possible() {
        bail!(
            "the clock fault needs libfaketime ({}): apt-get install faketime",
            inflict::LIBFAKETIME
        );
    }
    Ok(asked.to_vec())
}

/// One run: launch, nemesis, heal, recover, stop, check.
async fn one(
    args: &Args,
    mutex: &'static MutexInfo,
    election: &'static ElectionInfo,
    kinds: &[Kind],
    dir: &Path,
    run: u32,
) -> Result<RunReport> {
    let shape = Shape {
        nodes: args.nodes,
        mutex,
        election,
        count: args.count as usize,
        lock_delay: args.lock_delay,
        partitions: args.partitions.mode,
        tls: args.tls,
    };
    let clocks = kinds.contains(&Kind::Clock);
    let env = |id| if clocks { inflict::clock_env(dir, id) } else { Vec::new() };
    let mode = match args.network {
        Network::Auto if netns::Network::possible() => Network::Netns,
        Network::Auto => Network::Agent,
        Network::Netns if !netns::Network::possible() => {
            bail!("--network netns needs root, and `ip` and `nft` on the path")
        }
        other => other,
    };
    // Declared before the cluster, so dropped after it: the nodes are
    // killed before their namespaces go.
    let network = match mode {
        Network::Netns => Some(netns::Network::create(args.nodes, run)?),
        _ => None,
    };
    let wrap = |id| network.as_ref().map_or(Vec::new(), |n| n.wrap(id));
    let addrs = |id| {
        let n = network.as_ref().expect("addresses only with a network");
        (format!("{}:7001", n.address(id)), format!("{}:7002", n.address(id)))
    };
    let placement = Placement {
        env: &env,
        wrap: &wrap,
        addrs: network.as_ref().map(|_| &addrs as &dyn Fn(u32) -> (String, String)),
        base_port: None,
    };
    let (cluster, witness) = LocalCluster::launch_with(&shape, "text", dir, &placement).await?;
    let cluster = Cluster::Local(cluster);
    let agreed = cluster.agree(&Reach::default(), Epoch(0), Duration::from_secs(20)).await;
    let Cluster::Local(mut local) = cluster else { unreachable!("launched locally") };
    if let Err(e) = agreed {
        local.stop_all().await;
        witness.stop().await;
        return Err(e.context("the cluster did not elect a coordinator before the nemesis"));
    }
    let history_dir = dir.join("history");
    let mut recorder = Recorder::create(&history_dir.join("nemesis.jsonl"), NEMESIS)?;
    let setup = clients::Setup {
        config: &dir.join("cluster.toml"),
        witness: witness.addr(),
        dir: &history_dir,
        hold: args.hold,
        timeout: Duration::from_secs(5),
        names: args.names,
        read_share: args.read_share,
    };
    let mut clients = clients::Clients::start(args.clients, &setup)?;
    let schedule =
        plan::schedule(args.seed, kinds, args.every, args.duration, args.nodes, args.clients);
    let mut faults: BTreeMap<String, u32> = BTreeMap::new();
    let outcome = {
        let mut nemesis =
            inflict::Nemesis::new(&mut local, &mut clients, dir, args.nodes, network.as_ref());
        nemesis.snapshot();
        let played = play(&mut nemesis, &schedule, &mut recorder, &mut faults, args).await;
        nemesis.heal_all().await;
        played
    };
    let end = driver_op(coterie_history::monotonic_ns(), OpKind::Info, Func::End);
    recorder
        .record(&end.detail("every fault healed: nodes running, no partition, clients thawed"))?;
    if outcome.is_ok() {
        tokio::time::sleep(args.recover).await;
    }
    clients.stop().await;
    let stuck_nodes = settle(&local).await;
    // The driver's final reads of both copies of every lock's register.
    let locks: Vec<String> = match args.names {
        Some(k) => (0..k).map(|i| format!("r{i}")).collect(),
        None => vec![coterie_core::Name::DEFAULT.to_string()],
    };
    if let Ok(mut w) = coterie_node::WitnessClient::connect(witness.addr()).await {
        for name in &locks {
            for register in [Register::Plain, Register::Fenced] {
                if let Ok(Ok(v)) = w.read(name, register == Register::Fenced, None).await {
                    let now = coterie_history::monotonic_ns();
                    let read = Op::new(now, NEMESIS, OpKind::Ok, Func::Read, name);
                    recorder.record(&read.register(register).value(v))?;
                }
            }
        }
    }
    local.stop_all().await;
    witness.stop().await;
    outcome?;

    let files = super::history::files_in(&history_dir)?;
    let history = coterie_history::read(&files)?;
    let merged: String = history.iter().map(|op| op.to_json() + "\n").collect();
    std::fs::write(dir.join("history.jsonl"), merged)?;
    let title = format!(
        "{mutex} + {election}, {} nodes, {} clients: {} (seed {})",
        args.nodes,
        args.clients,
        kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(", "),
        args.seed
    );
    std::fs::write(dir.join("timeline.svg"), coterie_history::plot::svg(&history, &title))?;
    let options = Options {
        permits: args.count,
        recovery_bound_ns: args.recovery_bound.as_nanos() as u64,
        ..Options::default()
    };
    let checked = coterie_history::check(&history, &options);
    let failures = failures(&checked, &stuck_nodes);
    let report = RunReport {
        mutex: mutex.to_string(),
        election: election.to_string(),
        nodes: args.nodes,
        clients: args.clients,
        count: args.count,
        names: args.names.unwrap_or(1),
        read_share: args.read_share,
        seed: args.seed,
        lock_delay_ms: args.lock_delay.as_millis() as u64,
        partitions: args.partitions.mode.name().to_string(),
        duration_s: args.duration.as_secs_f64(),
        network: mode,
        faults,
        stuck_nodes,
        failures,
        dir: dir.display().to_string(),
        history: checked,
    };
    std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(&report)?)?;
    Ok(report)
}

/// What nothing excuses: a fence granted twice, a fenced or phantom
/// update, a stall, a node left wanting.
fn failures(checked: &Report, stuck_nodes: &[u32]) -> Vec<String> {
    use coterie_history::ViolationKind as V;
    let mut failures = Vec::new();
    for kind in [V::DuplicateFence, V::LostUpdateFenced, V::PhantomUpdate, V::Stall] {
        if checked.count(kind) > 0 {
            failures.push(format!("{} {}", checked.count(kind), kind.as_str()));
        }
    }
    if !stuck_nodes.is_empty() {
        failures
            .push(format!("nodes {stuck_nodes:?} still wanting or holding with no client left"));
    }
    failures
}

/// The reports of the runs kept under `root` (`--out` of an earlier
/// nemesis), with their histories checked again by this checker.
fn recheck(root: &Path, recovery_bound: Duration) -> Result<Vec<RunReport>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .with_context(|| format!("cannot read {}", root.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("report.json").exists())
        .collect();
    dirs.sort();
    let mut reports = Vec::new();
    for dir in dirs {
        let text = std::fs::read_to_string(dir.join("report.json"))?;
        let old: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{}/report.json", dir.display()))?;
        let history = coterie_history::read(&[dir.join("history.jsonl")])?;
        let count = old["count"].as_u64().map_or(1, |c| c.max(1) as u32);
        let options = Options {
            permits: count,
            recovery_bound_ns: recovery_bound.as_nanos() as u64,
            ..Options::default()
        };
        let checked = coterie_history::check(&history, &options);
        let field = |k: &str| old[k].as_str().unwrap_or_default().to_string();
        let number = |k: &str| old[k].as_u64().unwrap_or_default();
        let stuck_nodes: Vec<u32> = serde_json::from_value(old["stuck_nodes"].clone())?;
        reports.push(RunReport {
            mutex: field("mutex"),
            election: field("election"),
            nodes: number("nodes") as u32,
            clients: number("clients") as u32,
            count,
            names: number("names").max(1) as u32,
            read_share: old["read_share"].as_f64().unwrap_or_default(),
            seed: number("seed"),
            lock_delay_ms: number("lock_delay_ms"),
            partitions: Some(field("partitions"))
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "detector".into()),
            duration_s: old["duration_s"].as_f64().unwrap_or_default(),
            network: if field("network") == "netns" { Network::Netns } else { Network::Agent },
            faults: serde_json::from_value(old["faults"].clone())?,
            failures: failures(&checked, &stuck_nodes),
            stuck_nodes,
            dir: dir.display().to_string(),
            history: checked,
        });
    }
    if reports.is_empty() {
        bail!("no run under {} (no */report.json)", root.display());
    }
    Ok(reports)
}

/// An operation of the nemesis (process 0) on the run's lock, at `time_ns`.
fn driver_op(time_ns: u64, kind: OpKind, f: Func) -> Op {
    Op::new(time_ns, NEMESIS, kind, f, "default")
}

/// Plays the schedule, recording each fault and heal.
async fn play(
    nemesis: &mut inflict::Nemesis<'_>,
    schedule: &[plan::Fault],
    recorder: &mut Recorder,
    faults: &mut BTreeMap<String, u32>,
    args: &Args,
) -> Result<()> {
    let start = tokio::time::Instant::now();
    for fault in schedule {
        tokio::time::sleep_until(start + fault.at).await;
        nemesis.snapshot();
        // Stamped as it starts: a kill's effects begin before it returns.
        let began = coterie_history::monotonic_ns();
        let done =
            nemesis.start(fault).await.with_context(|| format!("starting {}", fault.kind))?;
        let op = driver_op(began, OpKind::Info, Func::Fault);
        recorder.record(&op.detail(format!("{}: {done}", fault.kind)))?;
        *faults.entry(fault.kind.name().to_string()).or_default() += 1;
        tokio::time::sleep(fault.kind.length()).await;
        let began = coterie_history::monotonic_ns();
        let healed =
            nemesis.heal(fault).await.with_context(|| format!("healing {}", fault.kind))?;
        let op = driver_op(began, OpKind::Info, Func::Heal);
        recorder.record(&op.detail(format!("{}: {healed}", fault.kind)))?;
        if !args.json {
            eprintln!("  {:>6.1} s  {}: {done}; then {healed}", fault.at.as_secs_f64(), fault.kind);
        }
    }
    tokio::time::sleep_until(start + args.duration).await;
    Ok(())
}

/// Nodes still wanting or holding after every client stopped, given five
/// seconds to let go.
async fn settle(cluster: &LocalCluster) -> Vec<u32> {
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let busy: Vec<u32> = cluster
            .views(&[])
            .await
            .into_iter()
            .filter(|(_, v)| v.as_ref().is_ok_and(|s| s.cs_state != CsState::Idle))
            .map(|(id, _)| id)
            .collect();
        if busy.is_empty() || tokio::time::Instant::now() > until {
            return busy;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The run's mutex as the tables name it: with its permits when several.
fn mutex_cell(r: &RunReport) -> String {
    if r.count > 1 {
        format!("{} (-n {})", r.mutex, r.count)
    } else {
        r.mutex.clone()
    }
}

/// One line per run: the verdict.
fn summary_line(r: &RunReport) -> String {
    if r.failures.is_empty() {
        format!("nemesis {} + {}: no failure", mutex_cell(r), r.election)
    } else {
        format!(
            "nemesis {} + {}: FAILED: {} (see {})",
            mutex_cell(r),
            r.election,
            r.failures.join("; "),
            r.dir
        )
    }
}

/// The runs as a Markdown table.
pub fn table(reports: &[RunReport]) -> String {
    use coterie_history::ViolationKind as V;
    let mut out = String::from(
        "| mutex | election | partitions | faults | acquires ok/fail/info | overlaps | lease overlaps | fences out of order | lost (plain) | lost (fenced) | recovery | failures |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        let h = &r.history;
        let acquire = h.ops.get("acquire").cloned().unwrap_or_default();
        let lost = |reg: Register| {
            h.names
                .iter()
                .flat_map(|n| &n.registers)
                .filter(|x| x.register == reg)
                .filter_map(|x| x.lost_updates)
                .sum::<u64>()
        };
        let recovery = h.recovery_ns.map_or("none".into(), |ns| format!("{} ms", ns / 1_000_000));
        let faults: u32 = r.faults.values().sum();
        out += &format!(
            "| {} | {} | {} | {faults} | {}/{}/{} | {} | {} | {} | {} | {} | {recovery} | {} |\n",
            mutex_cell(r),
            r.election,
            r.partitions,
            acquire.ok,
            acquire.fail,
            acquire.info,
            h.count(V::Overlap),
            h.count(V::LeaseOverlap),
            h.count(V::FenceOrder) + h.count(V::DuplicateFence),
            lost(Register::Plain),
            lost(Register::Fenced),
            if r.failures.is_empty() { "none".to_string() } else { r.failures.join("; ") }
        );
    }
    out
}

/// What each kind of violation came with, per run: the faults in force as
/// the violations began (`a+b` when two were: one in force, one healed
/// less than a second before), most first.
pub fn by_fault_table(reports: &[RunReport]) -> String {
    use coterie_history::ViolationKind as V;
    let kinds = [V::Overlap, V::LeaseOverlap, V::FenceOrder, V::LostUpdatePlain];
    let mut out = String::from(
        "| mutex | election | overlaps during | lease overlaps during | fences out of order during | plain lost updates during |\n|---|---|---|---|---|---|\n",
    );
    for r in reports {
        let cells: Vec<String> = kinds
            .iter()
            .map(|k| {
                let Some(by) = r.history.by_fault.get(k) else { return "-".to_string() };
                let mut by: Vec<(&String, &u64)> = by.iter().collect();
                by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
                let mut parts: Vec<String> =
                    by.iter().take(4).map(|(f, n)| format!("{f} {n}")).collect();
                let rest: u64 = by.iter().skip(4).map(|(_, n)| **n).sum();
                if rest > 0 {
                    parts.push(format!("other {rest}"));
                }
                if parts.is_empty() {
                    "-".to_string()
                } else {
                    parts.join(", ")
                }
            })
            .collect();
        out += &format!("| {} | {} | {} |\n", mutex_cell(r), r.election, cells.join(" | "));
    }
    out
}
