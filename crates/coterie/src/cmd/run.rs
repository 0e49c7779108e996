//! `coterie run SCENARIO.toml`: a local cluster, a workload, a timeline of
//! faults and the expectations they must meet.

use super::common::{self, NodeAddr};
use super::demo::{self, Cluster, Shape};
use super::recording::{write_incidents, Recording};
use super::timeline::{self, Reach, Timeline};
use super::{status, workload};
use anyhow::{bail, Context, Result};
use coterie_core::{registry, CsState, Epoch, Status};
use coterie_node::config::humantime_serde_str;
use coterie_node::protocol::{self, FaultCommand};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Run a fault scenario against a local cluster of real processes.
///
/// The scenario file names the cluster (size and algorithms), a workload,
/// a timeline of steps (kill, restart, stop, resume, partition, heal,
/// delay, drop) and expectations (no violation at the witness; a new
/// coordinator within a bound after each step that takes the coordinator
/// away; the coordinator at the end; entries after the last step). It
/// prints the timeline as it happens and a summary, and exits 1 if an
/// expectation fails. See `scenarios/` for examples.
#[derive(clap::Args)]
pub struct Args {
    /// The scenario file.
    scenario: PathBuf,
    /// Run it with this election algorithm instead of the file's.
    #[arg(long)]
    election: Option<String>,
    /// Run it with this mutual-exclusion algorithm instead of the file's.
    #[arg(long)]
    mutex: Option<String>,
    /// Print a JSON report instead of the timeline.
    #[arg(long)]
    json: bool,
    /// Play it against this running docker compose project (started from
    /// docker-compose.yml with config/docker.toml) instead of starting a
    /// local cluster: steps become `docker compose kill/start/pause/
    /// unpause`, faults go through the nodes' client ports, and the
    /// compose file's witness checks every grant.
    #[arg(long, value_name = "PROJECT")]
    compose: Option<String>,
    /// With --compose: the compose file.
    #[arg(long, default_value = "docker-compose.yml", requires = "compose")]
    compose_file: PathBuf,
    /// With --compose: the cluster file the containers were started with,
    /// as seen from here (or COTERIE_CONFIG); its secret is used to talk
    /// to them. Without --compose it is not read: the local cluster is
    /// the scenario's.
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        env = "COTERIE_CONFIG",
        default_value = "config/docker.toml"
    )]
    config: PathBuf,
    /// --diagram, --shiviz: draw the run (every message, recorded from
    /// the nodes' streams).
    #[command(flatten)]
    drawing: common::Drawing,
}

/// The cluster a scenario is played against.
enum Backend {
    /// Processes this command started.
    Local(Cluster),
    /// A docker compose project someone else started.
    Compose(Compose),
}

struct Compose {
    /// `docker compose` or, where only the old tool is, `docker-compose`,
    /// with the project and file.
    command: Vec<String>,
    /// Each node's client address, by container IP.
    nodes: Vec<NodeAddr>,
}

impl Compose {
    /// `docker compose -p PROJECT -f FILE`, or the same with the old
    /// `docker-compose`.
    fn prefix(project: &str, file: &std::path::Path) -> Vec<String> {
        let v2 = std::process::Command::new("docker")
            .args(["compose", "version"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let mut command: Vec<String> = if v2 {
            vec!["docker".into(), "compose".into()]
        } else {
            vec!["docker-compose".into()]
        };
        command.extend(["-p".into(), project.into(), "-f".into(), file.display().to_string()]);
        command
    }

    fn run(prefix: &[String], args: &[&str]) -> std::io::Result<std::process::Output> {
        std::process::Command::new(&prefix[0]).args(&prefix[1..]).args(args).output()
    }

    fn command(&self, verb: &str, service: &str) -> Result<()> {
        let status = Compose::run(&self.command, &[verb, service])
            .context("cannot run docker compose")?
            .status;
        if !status.success() {
            bail!("docker compose {verb} {service} failed ({status})");
        }
        Ok(())
    }

    /// The IP of `service`'s container on the compose network.
    fn ip(prefix: &[String], service: &str) -> Result<String> {
        let out =
            Compose::run(prefix, &["ps", "-q", service]).context("cannot run docker compose")?;
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if id.is_empty() {
            bail!("no container for {service} in `{}`", prefix.join(" "));
        }
        let out = std::process::Command::new("docker")
            .args(["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"])
            .arg(&id)
            .output()
            .context("cannot run docker")?;
        let ips = String::from_utf8_lossy(&out.stdout).to_string();
        ips.split_whitespace()
            .next()
            .map(str::to_string)
            .with_context(|| format!("{service} has no IP address"))
    }
}

impl Backend {
    fn nodes(&self) -> &[NodeAddr] {
        match self {
            Backend::Local(c) => &c.nodes,
            Backend::Compose(c) => &c.nodes,
        }
    }

    /// The status of every node but the `down` ones (a dead container's
    /// address would only time out).
    async fn views(&self, down: &[u32]) -> Vec<(u32, Result<Status, String>)> {
        match self {
            Backend::Local(c) => c.views(None).await,
            Backend::Compose(c) => {
                let mut out = Vec::new();
                for (i, node) in c.nodes.iter().enumerate() {
                    let id = i as u32 + 1;
                    if !down.contains(&id) {
                        out.push((id, status::fetch(node).await));
                    }
                }
                out
            }
        }
    }

    async fn kill(&mut self, id: u32) -> Result<()> {
        match self {
            Backend::Local(c) => c.kill(id).await,
            Backend::Compose(c) => c.command("kill", &format!("node{id}")),
        }
    }

    /// How long a step may take to carry out.
    fn step_overhead(&self) -> Duration {
        match self {
            Backend::Local(_) => Duration::ZERO,
            Backend::Compose(_) => Duration::from_secs(5),
        }
    }

    fn start(&mut self, id: u32) -> Result<()> {
        match self {
            Backend::Local(c) => c.start(id),
            Backend::Compose(c) => c.command("start", &format!("node{id}")),
        }
    }

    fn pause(&self, id: u32, pause: bool) -> Result<()> {
        match self {
            Backend::Local(c) => {
                c.signal(id, if pause { libc::SIGSTOP } else { libc::SIGCONT });
                Ok(())
            }
            Backend::Compose(c) => {
                c.command(if pause { "pause" } else { "unpause" }, &format!("node{id}"))
            }
        }
    }
}

/// A scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenario {
    name: String,
    #[serde(default)]
    description: String,
    cluster: ClusterSpec,
    #[serde(default)]
    workload: WorkloadSpec,
    #[serde(default, rename = "step")]
    steps: Vec<Step>,
    #[serde(default)]
    expect: Expect,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterSpec {
    #[serde(default = "default_nodes")]
    nodes: u32,
    #[serde(default = "default_mutex")]
    mutex: String,
    #[serde(default = "default_election")]
    election: String,
    #[serde(default = "default_count")]
    count: usize,
    /// `[cluster] lock_delay` of the nodes: after a holder is lost, nobody
    /// is granted the lock for this long.
    #[serde(default, with = "humantime_serde_str::option")]
    lock_delay: Option<Duration>,
}

fn default_nodes() -> u32 {
    5
}
fn default_mutex() -> String {
    "centralized".into()
}
fn default_election() -> String {
    "bully".into()
}
fn default_count() -> usize {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadSpec {
    /// Clients per node.
    #[serde(default = "default_clients")]
    clients: usize,
    #[serde(default = "default_hold", with = "humantime_serde_str")]
    hold: Duration,
    #[serde(default = "default_think", with = "humantime_serde_str")]
    think: Duration,
    #[serde(default = "default_duration", with = "humantime_serde_str")]
    duration: Duration,
    /// Only the clients of these nodes ask (default: every node's).
    #[serde(default)]
    on: Vec<u32>,
    /// A request not granted within this long counts as unanswered.
    #[serde(default = "default_answer_within", with = "humantime_serde_str")]
    answer_within: Duration,
}

fn default_answer_within() -> Duration {
    Duration::from_secs(10)
}

fn default_clients() -> usize {
    1
}
fn default_hold() -> Duration {
    Duration::from_millis(1)
}
fn default_think() -> Duration {
    Duration::from_millis(2)
}
fn default_duration() -> Duration {
    Duration::from_secs(4)
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec {
            clients: default_clients(),
            hold: default_hold(),
            think: default_think(),
            duration: default_duration(),
            on: Vec::new(),
            answer_within: default_answer_within(),
        }
    }
}

/// One action of the timeline.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    /// When, from the start of the workload.
    #[serde(with = "humantime_serde_str")]
    at: Duration,
    /// kill | restart | stop | resume | partition | heal | delay | drop |
    /// reset
    #[serde(rename = "do")]
    action: String,
    /// A node id, or "coordinator", "holder" (a node inside the critical
    /// section at that moment) or "waiter" (one waiting for it).
    #[serde(default)]
    node: Option<NodeRef>,
    /// partition / delay / drop: the peers concerned (default: all).
    #[serde(default)]
    peers: Vec<u32>,
    /// delay: how long.
    #[serde(default, with = "humantime_serde_str::option")]
    delay: Option<Duration>,
    /// drop: percent of messages lost.
    #[serde(default)]
    percent: Option<u8>,
    /// reset: again this often (with `for`), in the background while the
    /// next steps go on.
    #[serde(default, with = "humantime_serde_str::option")]
    every: Option<Duration>,
    /// reset: for this long (with `every`).
    #[serde(default, rename = "for", with = "humantime_serde_str::option")]
    lasting: Option<Duration>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum NodeRef {
    Id(u32),
    Role(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    /// The witness saw no two holders at once.
    #[serde(default = "yes")]
    no_violation: bool,
    /// Grants refused as stale are fine (after a hang or a partition, that
    /// is the fence doing its job); otherwise there must be none.
    #[serde(default)]
    allow_stale_fences: bool,
    /// At least this many grants refused as stale (a split brain the fence
    /// caught).
    #[serde(default)]
    stale_fences_at_least: u64,
    /// After each step that takes the coordinator away, the nodes still in
    /// reach agree on a new one within this long.
    #[serde(default, with = "humantime_serde_str::option")]
    election_within: Option<Duration>,
    /// At the end, every running node follows this node.
    #[serde(default)]
    final_coordinator: Option<u32>,
    /// Entries are still granted after the last step.
    #[serde(default = "yes")]
    progress_after_last_step: bool,
    /// Every request is granted within the workload's `answer_within`
    /// (one to a node that dies meanwhile is answered by its death).
    #[serde(default = "yes")]
    every_request_answered: bool,
    /// After each kill or stop, no entry is granted anywhere for this long
    /// (the lock delay at work). The time to the first entry after each
    /// such step is measured and reported whenever this is set.
    #[serde(default, with = "humantime_serde_str::option")]
    no_entry_within: Option<Duration>,
}

fn yes() -> bool {
    true
}

impl Default for Expect {
    fn default() -> Self {
        Expect {
            no_violation: true,
            allow_stale_fences: false,
            stale_fences_at_least: 0,
            election_within: None,
            final_coordinator: None,
            progress_after_last_step: true,
            every_request_answered: true,
            no_entry_within: None,
        }
    }
}

/// The report `--json` prints.
#[derive(Debug, Serialize)]
struct Report {
    scenario: String,
    mutex: String,
    election: String,
    nodes: u32,
    timeline: Vec<timeline::Event>,
    /// From each step that took the coordinator away to agreement on a new
    /// one, as the driver measured it.
    elections_ms: Vec<f64>,
    /// Every election the nodes' event streams showed, with its cause.
    elections: Vec<timeline::Election>,
    workload: workload::Report,
    failed: Vec<String>,
    passed: bool,
    /// A diagram of the second around each thing the witness caught.
    incident_diagrams: Vec<String>,
}

fn load(path: &PathBuf) -> Result<Scenario> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read scenario {}", path.display()))?;
    let scenario: Scenario = toml::from_str(&text)
        .with_context(|| format!("{} is not a valid scenario", path.display()))?;
    const ACTIONS: [&str; 9] =
        ["kill", "restart", "stop", "resume", "partition", "heal", "delay", "drop", "reset"];
    for (i, step) in scenario.steps.iter().enumerate() {
        if !ACTIONS.contains(&step.action.as_str()) {
            bail!(
                "{}: step {} does {:?}; known: {}",
                path.display(),
                i + 1,
                step.action,
                ACTIONS.join(", ")
            );
        }
        if step.action != "heal" && step.node.is_none() {
            bail!("{}: step {} ({}) names no node", path.display(), i + 1, step.action);
        }
        if step.every.is_some() != step.lasting.is_some()
            || (step.every.is_some() && step.action != "reset")
        {
            bail!(
                "{}: step {}: `every` and `for` go together, and only with reset",
                path.display(),
                i + 1
            );
        }
        if let Some(NodeRef::Role(r)) = &step.node {
            if !["coordinator", "holder", "waiter"].contains(&r.as_str()) {
                bail!("{}: step {}: unknown node {r:?}", path.display(), i + 1);
            }
        }
        if let Some(NodeRef::Id(id)) = step.node {
            if id == 0 || id > scenario.cluster.nodes {
                bail!("{}: step {}: node {id} is not in the cluster", path.display(), i + 1);
            }
        }
    }
    if scenario.steps.windows(2).any(|w| w[1].at < w[0].at) {
        bail!("{}: steps must be in time order", path.display());
    }
    Ok(scenario)
}

pub fn run(args: Args, log_format: &str) -> Result<ExitCode> {
    let mut scenario = load(&args.scenario)?;
    if let Some(e) = &args.election {
        scenario.cluster.election = e.clone();
    }
    if let Some(m) = &args.mutex {
        scenario.cluster.mutex = m.clone();
    }
    registry::mutex(&scenario.cluster.mutex)?;
    registry::election(&scenario.cluster.election)?;
    let compose = args.compose.as_ref().map(|p| (p, &args.compose_file, &args.config));
    if compose.is_some() && (args.mutex.is_some() || args.election.is_some()) {
        bail!(
            "--compose plays against the compose cluster's own algorithms: drop --mutex/--election"
        );
    }
    let report = common::runtime()?.block_on(play(
        &scenario,
        args.json,
        log_format,
        compose,
        &args.drawing,
    ))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("\nsummary:");
        workload::print(&report.workload);
        if !report.elections_ms.is_empty() {
            let times: Vec<String> =
                report.elections_ms.iter().map(|t| format!("{t:.1} ms")).collect();
            println!("elections after a step: {}", times.join(", "));
        }
        for e in &report.elections {
            let took = match (e.duration_ms, &e.cause) {
                (Some(ms), Some(cause)) => format!(" {ms:.1} ms after {cause}"),
                _ => String::new(),
            };
            println!("election at {:.1} ms: n{} coordinates {}{took}", e.t_ms, e.leader, e.epoch);
        }
        if report.passed {
            println!("PASSED: {}", report.scenario);
        } else {
            for f in &report.failed {
                println!("FAILED: {f}");
            }
        }
    }
    Ok(if report.passed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn play(
    s: &Scenario,
    quiet: bool,
    log_format: &str,
    compose: Option<(&String, &PathBuf, &PathBuf)>,
    drawing: &common::Drawing,
) -> Result<Report> {
    let c = &s.cluster;
    let dir = std::env::temp_dir().join(format!("coterie-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let shape = Shape {
        nodes: c.nodes,
        mutex: c.mutex.clone(),
        election: c.election.clone(),
        count: c.count,
        lock_delay: c.lock_delay.unwrap_or_default(),
    };
    let timeline = Timeline::new(quiet);
    if !quiet {
        println!(
            "coterie run: {} ({} nodes, {} + {}); logs in {}",
            s.name,
            c.nodes,
            c.mutex,
            c.election,
            dir.display()
        );
        if !s.description.is_empty() {
            println!("{}\n", s.description.trim());
        }
    }
    let (workload, elections_ms, elections, mut failed, incident_diagrams) = match compose {
        None => {
            let (cluster, listener, witness_addr) = demo::launch(&shape, log_format, &dir).await?;
            let witness = demo::Witness::serve(listener, c.count as u32);
            let mut backend = Backend::Local(cluster);
            let result =
                timeline_run(s, &mut backend, &witness_addr, &timeline, drawing, &dir).await;
            if let Backend::Local(cluster) = &mut backend {
                cluster.stop_all().await;
            }
            witness.stop().await;
            result?
        }
        Some((project, file, config)) => {
            let cfg = coterie_node::Config::load(config).with_context(|| {
                format!("--compose reads the containers' cluster from {}", config.display())
            })?;
            if cfg.nodes.len() != c.nodes as usize {
                bail!(
                    "the scenario wants {} nodes; the compose cluster has {}",
                    c.nodes,
                    cfg.nodes.len()
                );
            }
            let prefix = Compose::prefix(project, file);
            let credentials = super::common::credentials(&cfg)?;
            let mut nodes = Vec::new();
            for n in &cfg.nodes {
                let port = n.client.rsplit(':').next().unwrap_or("7200");
                let ip = Compose::ip(&prefix, &format!("node{}", n.id))?;
                let addr = format!("{ip}:{port}");
                nodes.push(NodeAddr { id: Some(n.id), addr, credentials: credentials.clone() });
            }
            let witness = cfg.witness.as_ref().map(|w| w.addr.clone()).context("no [witness]")?;
            let port = witness.rsplit(':').next().unwrap_or("7300");
            let witness_addr = format!("{}:{port}", Compose::ip(&prefix, "witness")?);
            let mut backend = Backend::Compose(Compose { command: prefix, nodes });
            timeline_run(s, &mut backend, &witness_addr, &timeline, drawing, &dir).await?
        }
    };
    let e = &s.expect;
    if e.no_violation && workload.violations > 0 {
        failed.push(format!("the witness saw {} overlapping holders", workload.violations));
    }
    if !e.allow_stale_fences && workload.stale_fences > 0 {
        failed.push(format!("the witness refused {} stale fences", workload.stale_fences));
    }
    if workload.stale_fences < e.stale_fences_at_least {
        failed.push(format!(
            "the witness refused {} stale fences, expected at least {}",
            workload.stale_fences, e.stale_fences_at_least
        ));
    }
    if workload.entries == 0 {
        failed.push("no entry was granted at all".into());
    }
    if e.every_request_answered && workload.unanswered > 0 {
        failed.push(format!(
            "{} request(s) went unanswered for {:?}",
            workload.unanswered, s.workload.answer_within
        ));
    }
    Ok(Report {
        scenario: s.name.clone(),
        mutex: c.mutex.clone(),
        election: c.election.clone(),
        nodes: c.nodes,
        timeline: timeline.events(),
        elections_ms,
        elections,
        workload,
        passed: failed.is_empty(),
        failed,
        incident_diagrams,
    })
}

/// The workload's report, the elections (as measured, and as seen), what
/// failed, and the diagrams of what the witness caught.
type Outcome = (workload::Report, Vec<f64>, Vec<timeline::Election>, Vec<String>, Vec<String>);

async fn timeline_run(
    s: &Scenario,
    cluster: &mut Backend,
    witness_addr: &str,
    timeline: &Timeline,
    drawing: &common::Drawing,
    dir: &std::path::Path,
) -> Result<Outcome> {
    let everyone = Reach::default();
    let (leader, epoch) = agree(cluster, &everyone, Epoch(0), Duration::from_secs(30)).await?;
    let (seen_tx, seen_rx) = tokio::sync::mpsc::unbounded_channel();
    // Recorded whether drawn or not: whatever the witness catches is drawn.
    let ids = cluster.nodes().iter().filter_map(|n| n.id).collect();
    let title = format!("{}: {} + {}", s.name, s.cluster.mutex, s.cluster.election);
    let origin = Some(timeline.started_unix_us());
    let record = Some((Recording::since(ids, title, origin), drawing.heartbeats));
    let observer = timeline::observe(cluster.nodes(), timeline, Some(seen_rx), record).await;
    timeline.note("note", None, format!("cluster up: every node follows n{leader} ({epoch})"));
    let w = &s.workload;
    let clients_on: Vec<_> = cluster
        .nodes()
        .iter()
        .filter(|n| w.on.is_empty() || n.id.is_some_and(|id| w.on.contains(&id)))
        .cloned()
        .collect();
    let start = Instant::now();
    let spec = workload::Spec {
        nodes: clients_on,
        clients: w.clients,
        requests: u64::MAX,
        hold: w.hold,
        think: w.think,
        witness: Some(witness_addr.to_string()),
        // Docker commands take seconds each: under compose, the workload
        // runs on long enough to see what follows every step.
        deadline: Some(start + w.duration + cluster.step_overhead() * s.steps.len() as u32),
        progress: false,
        answer_within: w.answer_within,
        events: Some(seen_tx),
    };
    let driver = tokio::spawn(workload::drive(spec));
    timeline.note(
        "note",
        None,
        format!("workload starts: {} client(s) per node for {:?}", w.clients, w.duration),
    );

    let mut nodes = Reach::default();
    let mut elections = Vec::new();
    let mut failed = Vec::new();
    let mut entries_at_last_step = 0;
    // Kills and stops, for the lock delay: which step, when, of whom.
    let mut losses = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        tokio::time::sleep_until((start + step.at).into()).await;
        let (coordinator, epoch) = current(cluster, &nodes).await;
        let target = match &step.node {
            None => None,
            Some(NodeRef::Id(id)) => Some(*id),
            Some(NodeRef::Role(role)) => pick(cluster, &nodes, role, coordinator).await,
        };
        let Some(target) = target.or(if step.action == "heal" { Some(0) } else { None }) else {
            failed.push(format!("step {}: no node was {:?}", i + 1, step.node));
            continue;
        };
        let took_coordinator = Some(target) == coordinator
            && ["kill", "stop", "partition"].contains(&step.action.as_str());
        // On the timeline from the moment it is taken: what it causes may
        // come before the command returns.
        let what = describe(step, target);
        timeline.note("step", None, format!("step {}: {what}", i + 1));
        if ["kill", "stop"].contains(&step.action.as_str()) {
            losses.push((i + 1, protocol::unix_us(), target));
        }
        act(cluster, &mut nodes, step, target).await?;
        observer.set_reach(&nodes);
        // From the moment the step took effect (a docker command returns
        // only once it has).
        let t0 = Instant::now();
        if took_coordinator {
            // The observer narrates the election; this measures it from the
            // step, for the expectation.
            let limit = s.expect.election_within.unwrap_or(Duration::from_secs(10));
            match agree(cluster, &nodes, epoch, limit).await {
                Ok(_) => elections.push(t0.elapsed().as_secs_f64() * 1000.0),
                Err(e) => {
                    timeline.note("note", None, format!("step {}: {e}", i + 1));
                    failed.push(format!("step {}: {e}", i + 1))
                }
            }
        }
        if i + 1 == s.steps.len() {
            entries_at_last_step = total_entries(cluster, &nodes).await;
        }
    }
    let report = driver.await.context("the workload task failed")??;
    timeline.note("note", None, format!("workload done: {} entries", report.entries));
    if s.expect.progress_after_last_step
        && !s.steps.is_empty()
        && total_entries(cluster, &nodes).await <= entries_at_last_step
    {
        failed.push("no entry was granted after the last step".into());
    }
    if let Some(want) = s.expect.final_coordinator {
        match agree(cluster, &nodes, Epoch(0), Duration::from_secs(10)).await {
            Ok((leader, e)) if leader == want => timeline.note(
                "note",
                None,
                format!("at the end every node follows n{leader} ({e})"),
            ),
            Ok((leader, e)) => {
                failed.push(format!("at the end n{leader} coordinates ({e}), expected n{want}"))
            }
            Err(e) => failed.push(format!("at the end: {e}")),
        }
    }
    // Let the last events of the nodes' streams arrive.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut incident_diagrams = Vec::new();
    if let Some((run, incidents)) = observer.recorded() {
        if drawing.wanted() {
            drawing.write(&run)?;
        }
        incident_diagrams = write_incidents(&run, &incidents, dir)?;
    }
    if let Some(quiet) = s.expect.no_entry_within {
        for (step, at, target) in losses {
            // The nodes stamp their grants with the same host clock.
            let Some((granted, node)) = observer.first_grant_after(at, target) else {
                failed.push(format!("step {step}: no entry was granted after it"));
                continue;
            };
            let gap = Duration::from_micros(granted - at);
            timeline.note(
                "note",
                None,
                format!(
                    "step {step}: the first entry after it was granted {gap:.1?} later, at n{node}"
                ),
            );
            if gap < quiet {
                failed.push(format!(
                    "step {step}: an entry was granted {gap:.1?} after it, within {quiet:?}"
                ));
            }
        }
    }
    Ok((report, elections, observer.stop(), failed, incident_diagrams))
}

/// What a step does, in words, for the timeline.
fn describe(step: &Step, id: u32) -> String {
    let peers = peers_text(&step.peers);
    match step.action.as_str() {
        "kill" => format!("kill n{id} (SIGKILL)"),
        "restart" => format!("restart n{id}"),
        "stop" => format!("stop n{id} (SIGSTOP)"),
        "resume" => format!("resume n{id} (SIGCONT)"),
        "partition" => format!("cut n{id} off from {peers}"),
        "delay" => format!("n{id} delays what it sends to {peers} by {:?}", step_delay(step)),
        "drop" => format!("n{id} drops {}% of what it sends to {peers}", step_percent(step)),
        "heal" => "heal every fault".to_string(),
        "reset" => match (step.every, step.lasting) {
            (Some(every), Some(lasting)) => format!(
                "reset n{id}'s connections to {peers} every {} for {}",
                humantime::format_duration(every),
                humantime::format_duration(lasting)
            ),
            _ => format!("reset n{id}'s connections to {peers}"),
        },
        other => format!("{other} n{id}"),
    }
}

fn step_delay(step: &Step) -> Duration {
    step.delay.unwrap_or(Duration::from_millis(50))
}

fn step_percent(step: &Step) -> u8 {
    step.percent.unwrap_or(10)
}

/// Carries out one step.
async fn act(cluster: &mut Backend, nodes: &mut Reach, step: &Step, id: u32) -> Result<()> {
    let node = cluster.nodes().get((id as usize).wrapping_sub(1)).cloned();
    let fault_node = node.clone();
    let fault = |command: FaultCommand| async move {
        let mut client = fault_node.context("no such node")?.connect().await?;
        client.fault(command).await.map_err(anyhow::Error::from)
    };
    match step.action.as_str() {
        "kill" => {
            cluster.kill(id).await?;
            nodes.down.push(id);
        }
        "restart" => {
            cluster.start(id)?;
            nodes.down.retain(|&n| n != id);
        }
        "stop" => {
            cluster.pause(id, true)?;
            nodes.away.push(id);
        }
        "resume" => {
            cluster.pause(id, false)?;
            nodes.away.retain(|&n| n != id);
        }
        "partition" => {
            fault(FaultCommand::Partition { peers: step.peers.clone() }).await?;
            nodes.away.push(id);
        }
        "delay" => {
            let ms = step_delay(step).as_millis() as u64;
            fault(FaultCommand::Delay { peers: step.peers.clone(), ms }).await?;
        }
        "drop" => {
            let percent = step_percent(step);
            fault(FaultCommand::Drop { peers: step.peers.clone(), percent }).await?;
        }
        "reset" => {
            let command = FaultCommand::Reset { peers: step.peers.clone() };
            match (step.every, step.lasting) {
                (Some(every), Some(lasting)) => {
                    let node = node.context("no such node")?;
                    tokio::spawn(repeat_fault(node, command, every, lasting));
                }
                _ => {
                    fault(command).await?;
                }
            }
        }
        "heal" => {
            for node in cluster.nodes().to_vec() {
                if let Ok(mut client) = node.connect().await {
                    let _ = client.fault(FaultCommand::Heal).await;
                }
            }
            nodes.away.clear();
        }
        other => bail!("unknown step {other:?}"),
    }
    Ok(())
}

/// Sends `command` to `node` every `every` for `lasting` (a repeating
/// step, in the background).
async fn repeat_fault(node: NodeAddr, command: FaultCommand, every: Duration, lasting: Duration) {
    let end = Instant::now() + lasting;
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
    while Instant::now() < end {
        tick.tick().await;
        if let Ok(mut client) = node.connect().await {
            let _ = client.fault(command.clone()).await;
        }
    }
}

fn peers_text(peers: &[u32]) -> String {
    if peers.is_empty() {
        "every peer".into()
    } else {
        peers.iter().map(|p| format!("n{p}")).collect::<Vec<_>>().join(", ")
    }
}

/// The status of every node in reach.
async fn in_reach(cluster: &Backend, nodes: &Reach) -> Vec<(u32, Result<Status, String>)> {
    let mut views = cluster.views(&nodes.down).await;
    views.retain(|(id, _)| nodes.includes(*id));
    views
}

/// The coordinator the nodes in reach agree on now, if they do.
async fn current(cluster: &Backend, nodes: &Reach) -> (Option<u32>, Epoch) {
    let mut agreed = None;
    for (_, v) in in_reach(cluster, nodes).await {
        if let Ok(s) = v {
            agreed = agreed.or(Some((s.coordinator, Epoch(s.epoch))));
        }
    }
    agreed.unwrap_or((None, Epoch(0)))
}

/// A node in the role named, among those running and in reach.
async fn pick(
    cluster: &Backend,
    nodes: &Reach,
    role: &str,
    coordinator: Option<u32>,
) -> Option<u32> {
    if role == "coordinator" {
        return coordinator;
    }
    let want = if role == "holder" { CsState::Held } else { CsState::Wanting };
    // Sample until some node is in that state (a busy cluster gets there
    // within a few milliseconds); give up after a second.
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        for (id, v) in in_reach(cluster, nodes).await {
            if v.is_ok_and(|s| s.cs_state == want) {
                return Some(id);
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

/// Waits until the nodes in reach agree on a coordinator at an epoch newer
/// than `after`.
async fn agree(
    cluster: &Backend,
    nodes: &Reach,
    after: Epoch,
    limit: Duration,
) -> Result<(u32, Epoch)> {
    let start = Instant::now();
    loop {
        let views = in_reach(cluster, nodes).await;
        if let Some(agreed) = demo::settled(&views, after) {
            return Ok(agreed);
        }
        if start.elapsed() > limit {
            bail!("no agreement on a new coordinator within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Entries granted so far, over the nodes that answer.
async fn total_entries(cluster: &Backend, nodes: &Reach) -> u64 {
    cluster
        .views(&nodes.down)
        .await
        .into_iter()
        .filter_map(|(_, v)| v.ok())
        .map(|s| s.cs_entries)
        .sum()
}
