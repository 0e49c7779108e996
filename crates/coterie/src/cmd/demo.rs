//! `coterie demo`: a local cluster, a workload, a coordinator killed and
//! brought back, and what happened.

use super::common::{self, NodeAddr};
use super::recording::{write_incidents, Recording};
use super::timeline::{self, Reach, Timeline};
use super::{status, up, workload};
use anyhow::{bail, Context, Result};
use coterie_core::{registry, Epoch, Status};
use coterie_node::witness;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tokio::process::Child;

/// Start a local cluster, run a workload, kill the coordinator part-way,
/// bring it back, and print what happened.
///
/// Needs no configuration: it picks free ports on 127.0.0.1, starts
/// --nodes node processes and a witness, and drives two clients per node
/// through the critical section, every entry checked at the witness. A
/// third of the way in it kills the coordinator's process (SIGKILL; or
/// stops it with SIGSTOP, `--fault stop`) and times the election that
/// follows; two thirds in it restarts (or resumes) it. The
/// timeline shows each election and how long the cluster took to agree;
/// the summary shows entries, throughput, latency, messages per entry and
/// what the witness saw. Exits non-zero if the witness saw a violation
/// (after a kill, a stale fence counts as one too).
#[derive(clap::Args)]
pub struct Args {
    /// Mutual-exclusion algorithm.
    #[arg(long, default_value = "centralized")]
    mutex: String,
    /// Election algorithm.
    #[arg(long, default_value = "bully")]
    election: String,
    /// Holders allowed at once (a counting semaphore, for `centralized` and
    /// `raymond-k`); the witness is told the same.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Cluster size.
    #[arg(long, default_value_t = 5)]
    nodes: u32,
    /// How long the workload runs.
    #[arg(long, default_value = "6s", value_parser = common::parse_duration)]
    duration: Duration,
    /// Clients per node.
    #[arg(long, default_value_t = 2)]
    clients: usize,
    /// Time inside the critical section.
    #[arg(long, default_value = "1ms", value_parser = common::parse_duration)]
    hold: Duration,
    /// Time between a release and the next request.
    #[arg(long, default_value = "2ms", value_parser = common::parse_duration)]
    think: Duration,
    /// How the coordinator fails: `kill` (SIGKILL, then a restart) or
    /// `stop` (SIGSTOP, a hang its sockets do not reveal, then SIGCONT).
    #[arg(long, default_value = "kill", value_parser = ["kill", "stop"])]
    fault: String,
    /// Print a JSON report instead of text.
    #[arg(long)]
    json: bool,
    /// --diagram, --shiviz: draw the run (every message, recorded from
    /// the nodes' streams).
    #[command(flatten)]
    drawing: common::Drawing,
}

#[derive(Serialize)]
struct Election {
    epoch: u64,
    round: u64,
    coordinator: u32,
    duration_ms: f64,
    cause: String,
}

#[derive(Serialize)]
struct DemoReport {
    mutex: String,
    election: String,
    nodes: u32,
    #[serde(flatten)]
    workload: workload::Report,
    elections: Vec<Election>,
    timeline: Vec<timeline::Event>,
    logs: String,
    /// A diagram of the second around each thing the witness caught.
    incident_diagrams: Vec<String>,
}

pub(crate) struct Cluster {
    dir: PathBuf,
    config: PathBuf,
    pub(crate) nodes: Vec<NodeAddr>,
    children: Vec<Option<Child>>,
    log_format: String,
}

impl Cluster {
    fn log_file(&self, id: u32) -> Result<std::process::Stdio> {
        let path = self.dir.join(format!("node{id}.log"));
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(file.into())
    }

    pub(crate) fn start(&mut self, id: u32) -> Result<()> {
        let child = up::spawn_node(&self.config, id, &self.log_format, self.log_file(id)?)?;
        self.children[id as usize - 1] = Some(child);
        Ok(())
    }

    pub(crate) async fn kill(&mut self, id: u32) -> Result<()> {
        if let Some(mut child) = self.children[id as usize - 1].take() {
            child.start_kill()?; // SIGKILL: no goodbye, as in a crash
            child.wait().await?;
        }
        Ok(())
    }

    /// The first node whose process has exited, if any.
    fn exited(&mut self) -> Option<u32> {
        self.children.iter_mut().enumerate().find_map(|(i, c)| {
            c.as_mut().and_then(|child| child.try_wait().ok().flatten()).map(|_| i as u32 + 1)
        })
    }

    /// Sends `signal` to node `id`'s process (SIGSTOP, SIGCONT).
    pub(crate) fn signal(&self, id: u32, signal: i32) {
        if let Some(pid) = self.children[id as usize - 1].as_ref().and_then(Child::id) {
            // SAFETY: kill(2) on our own child with a valid signal number.
            unsafe {
                libc::kill(pid as libc::pid_t, signal);
            }
        }
    }

    pub(crate) async fn stop_all(&mut self) {
        for id in 1..=self.children.len() as u32 {
            self.signal(id, libc::SIGCONT); // a stopped child cannot die of SIGTERM
        }
        for child in self.children.iter().flatten() {
            if let Some(pid) = child.id() {
                common::terminate(pid);
            }
        }
        for child in self.children.iter_mut().flatten() {
            let _ = tokio::time::timeout(Duration::from_secs(3), child.wait()).await;
        }
    }

    /// The status of every running node but `absent`.
    pub(crate) async fn views(&self, absent: Option<u32>) -> Vec<(u32, Result<Status, String>)> {
        let mut out = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if self.children[i].is_some() && absent != Some(i as u32 + 1) {
                out.push((i as u32 + 1, status::fetch(node).await));
            }
        }
        out
    }

    /// Waits until every running node follows the same coordinator, for an
    /// epoch newer than `after`; returns it.
    pub(crate) async fn agreement(&self, after: Epoch, limit: Duration) -> Result<(u32, Epoch)> {
        self.agreement_among(None, after, limit).await
    }

    /// As [`agreement`](Self::agreement), leaving `absent` (a stopped node,
    /// which cannot answer) out.
    async fn agreement_without(
        &self,
        absent: u32,
        after: Epoch,
        limit: Duration,
    ) -> Result<(u32, Epoch)> {
        self.agreement_among(Some(absent), after, limit).await
    }

    async fn agreement_among(
        &self,
        absent: Option<u32>,
        after: Epoch,
        limit: Duration,
    ) -> Result<(u32, Epoch)> {
        let start = Instant::now();
        loop {
            let views = self.views(absent).await;
            if let Some(agreed) = settled(&views, after) {
                return Ok(agreed);
            }
            if start.elapsed() > limit {
                let seen: Vec<String> = views
                    .iter()
                    .map(|(id, v)| match v {
                        Ok(s) => format!(
                            "n{id}: coordinator {:?} epoch {}",
                            s.coordinator,
                            Epoch(s.epoch)
                        ),
                        Err(e) => format!("n{id}: {e}"),
                    })
                    .collect();
                bail!("no agreement on a coordinator within {limit:?}: {}", seen.join("; "));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Reserves `n` free ports on 127.0.0.1 (bound, read, released).
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners: Vec<std::net::TcpListener> =
        (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    Ok(listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<Result<_, _>>()?)
}

pub fn run(args: Args, log_format: &str) -> Result<ExitCode> {
    let info = registry::mutex(&args.mutex)?;
    registry::election(&args.election)?;
    if args.count == 0 || (args.count > 1 && !info.counting) {
        bail!(
            "--count {} does not fit {}, which admits one holder at a time",
            args.count,
            args.mutex
        );
    }
    if args.nodes < 2 {
        bail!("a demo needs at least 2 nodes");
    }
    common::runtime()?.block_on(demo(args, log_format))
}

async fn demo(args: Args, log_format: &str) -> Result<ExitCode> {
    let n = args.nodes as usize;
    let dir = std::env::temp_dir().join(format!("coterie-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let quiet = args.json;
    let timeline = Timeline::new(quiet);
    let mut elections = Vec::new();

    let shape = Shape {
        nodes: args.nodes,
        mutex: args.mutex.clone(),
        election: args.election.clone(),
        count: args.count,
        lock_delay: std::time::Duration::ZERO,
    };
    let (mut cluster, listener, witness_addr) = launch(&shape, log_format, &dir).await?;
    let nodes = cluster.nodes.clone();
    // The witness runs in this process, on a real socket.
    let witness = Witness::serve(listener, args.count as u32);
    if !quiet {
        println!(
            "coterie demo: {} nodes running {} + {} on 127.0.0.1, witness {witness_addr}",
            n, args.mutex, args.election
        );
        println!("logs: {}\n", dir.display());
    }
    let result =
        run_timeline(&args, &mut cluster, &nodes, &witness_addr, &timeline, &mut elections, &dir)
            .await;
    cluster.stop_all().await;
    witness.stop().await;
    let (report, incident_diagrams) = result?;

    // Overlapping holders fail the demo. A stale fence is a grant the
    // witness refused: after a hang the old coordinator may grant from its
    // old epoch before it learns it was replaced, and refusing that grant
    // is the fence doing its job; after a kill nothing should be stale.
    let clean = report.violations == 0
        && report.entries > 0
        && (args.fault == "stop" || report.stale_fences == 0);
    let out = DemoReport {
        mutex: args.mutex.clone(),
        election: args.election.clone(),
        nodes: args.nodes,
        workload: report,
        elections,
        timeline: timeline.events(),
        logs: dir.display().to_string(),
        incident_diagrams,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("\nelections:");
        for e in &out.elections {
            println!(
                "  {:<34} -> n{} coordinates {} after {:.1} ms",
                e.cause,
                e.coordinator,
                Epoch(e.epoch),
                e.duration_ms
            );
        }
        println!("\nsummary:");
        workload::print(&out.workload);
        println!(
            "{}",
            if clean { "OK: the witness saw no violation" } else { "FAILED: see above" }
        );
    }
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The coordinator and epoch every node of `views` follows, once all have
/// joined, answer, and agree on an epoch newer than `after`.
pub(crate) fn settled(
    views: &[(u32, Result<Status, String>)],
    after: Epoch,
) -> Option<(u32, Epoch)> {
    let first = views.first().and_then(|(_, v)| v.as_ref().ok()).map(|s| (s.coordinator, s.epoch));
    let all = views.iter().all(|(_, v)| {
        v.as_ref().is_ok_and(|s| s.joined && Some((s.coordinator, s.epoch)) == first)
    });
    match (all, first) {
        (true, Some((Some(leader), epoch))) if Epoch(epoch) > after => Some((leader, Epoch(epoch))),
        _ => None,
    }
}

/// The witness, served by this process on the listener `launch` bound.
pub(crate) struct Witness {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Witness {
    /// Serves a witness admitting `capacity` holders at once.
    pub(crate) fn serve(listener: tokio::net::TcpListener, capacity: u32) -> Witness {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(witness::serve(listener, capacity, async {
            let _ = stopped.await;
        }));
        Witness { stop, task }
    }

    /// Stops serving, once every connection has been answered.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// What a local cluster runs: its size and algorithms.
pub(crate) struct Shape {
    pub nodes: u32,
    pub mutex: String,
    pub election: String,
    pub count: usize,
    /// `[cluster] lock_delay`.
    pub lock_delay: std::time::Duration,
}

/// Picks free ports, writes the configuration, binds the witness and
/// starts every node. Ports are found by binding and releasing them, so
/// another process may take one in between; a node that exits at start-up
/// (its port taken) makes this try again with fresh ports.
pub(crate) async fn launch(
    shape: &Shape,
    log_format: &str,
    dir: &std::path::Path,
) -> Result<(Cluster, tokio::net::TcpListener, String)> {
    let n = shape.nodes as usize;
    let mut last_error = None;
    for _attempt in 0..5 {
        let ports = free_ports(2 * n + 1)?;
        let witness_addr = format!("127.0.0.1:{}", ports[2 * n]);
        let Ok(listener) = tokio::net::TcpListener::bind(&witness_addr).await else { continue };
        let mut toml = format!(
            "[cluster]\nname = \"demo\"\nmutex = \"{}\"\nelection = \"{}\"\ncount = {}\nlock_delay = \"{}ms\"\nstate_dir = \"state\"\nstate_sync = false\n\n[security]\nsecret_file = \"secret\"\nallow_faults = true\n\n[timing]\nheartbeat = \"50ms\"\nfailure_timeout = \"250ms\"\n\n[witness]\naddr = \"{witness_addr}\"\n",
            shape.mutex,
            shape.election,
            shape.count,
            shape.lock_delay.as_millis()
        );
        // A fresh secret for every cluster launched: its nodes and this
        // driver authenticate each other, as a production cluster should.
        let secret = coterie_node::auth::Secret::generate_hex()?;
        std::fs::write(dir.join("secret"), &secret)?;
        let secret = coterie_node::auth::Secret::from_file_bytes(secret.as_bytes())
            .context("an empty secret")?;
        let credentials =
            std::sync::Arc::new(coterie_node::Credentials { secret, cluster: "demo".into() });
        let mut nodes = Vec::new();
        for i in 0..n {
            let (peer, client) =
                (format!("127.0.0.1:{}", ports[2 * i]), format!("127.0.0.1:{}", ports[2 * i + 1]));
            write!(toml, "\n[[node]]\nid = {}\npeer = \"{peer}\"\nclient = \"{client}\"\n", i + 1)?;
            let credentials = Some(credentials.clone());
            nodes.push(NodeAddr { id: Some(i as u32 + 1), addr: client, credentials });
        }
        let config = dir.join("cluster.toml");
        std::fs::write(&config, &toml)?;
        let mut cluster = Cluster {
            dir: dir.to_path_buf(),
            config,
            nodes,
            children: (0..n).map(|_| None).collect(),
            log_format: log_format.to_string(),
        };
        for id in 1..=shape.nodes {
            cluster.start(id)?;
        }
        // Every node up and listening, or one gone (its port taken).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(id) = cluster.exited() {
                last_error = Some(format!(
                    "node {id} exited at start-up (see {}/node{id}.log)",
                    dir.display()
                ));
                cluster.stop_all().await;
                break;
            }
            let views = cluster.views(None).await;
            if views.iter().all(|(_, v)| v.is_ok()) {
                return Ok((cluster, listener, witness_addr));
            }
            if Instant::now() > deadline {
                cluster.stop_all().await;
                bail!("the nodes did not start within 10 s (logs in {})", dir.display());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    bail!("could not start the cluster: {}", last_error.unwrap_or_else(|| "no free ports".into()))
}

async fn run_timeline(
    args: &Args,
    cluster: &mut Cluster,
    nodes: &[NodeAddr],
    witness_addr: &str,
    timeline: &Timeline,
    elections: &mut Vec<Election>,
    dir: &std::path::Path,
) -> Result<(workload::Report, Vec<String>)> {
    let boot = Instant::now();
    let (leader, epoch) = cluster.agreement(Epoch(0), Duration::from_secs(15)).await?;
    // Each node's own account of what follows, as it happens.
    let (seen_tx, seen_rx) = tokio::sync::mpsc::unbounded_channel();
    // Recorded whether drawn or not: whatever the witness catches is drawn.
    let ids = nodes.iter().filter_map(|n| n.id).collect();
    let title = format!("coterie demo: {} + {}, {} nodes", args.mutex, args.election, args.nodes);
    let origin = Some(timeline.started_unix_us());
    let record = Some((Recording::since(ids, title, origin), args.drawing.heartbeats));
    let observer = timeline::observe(nodes, timeline, Some(seen_rx), record).await;
    let note = |text: String| timeline.note("step", None, text);
    note(format!("cluster up: all {} nodes follow n{leader} ({epoch})", args.nodes));
    elections.push(Election {
        epoch: epoch.0,
        round: epoch.round(),
        coordinator: leader,
        duration_ms: boot.elapsed().as_secs_f64() * 1000.0,
        cause: "cluster start".into(),
    });

    let spec = workload::Spec {
        nodes: nodes.to_vec(),
        clients: args.clients,
        requests: u64::MAX,
        hold: args.hold,
        think: args.think,
        witness: Some(witness_addr.to_string()),
        deadline: Some(Instant::now() + args.duration),
        progress: false,
        answer_within: Duration::from_secs(10),
        events: Some(seen_tx),
    };
    note(format!("workload starts: {} clients per node for {:?}", args.clients, args.duration));
    let driver = tokio::spawn(workload::drive(spec));

    tokio::time::sleep(args.duration / 3).await;
    let failed_at = Instant::now();
    let (failed, back) = if args.fault == "stop" {
        note(format!("stop n{leader}, the coordinator (SIGSTOP: a hang)"));
        cluster.signal(leader, libc::SIGSTOP);
        observer.set_reach(&Reach { down: vec![], away: vec![leader] });
        ("stopped", "resumed")
    } else {
        note(format!("kill n{leader}, the coordinator (SIGKILL)"));
        cluster.kill(leader).await?;
        ("killed", "restarted")
    };
    // A stopped node cannot answer status: agreement is among the others.
    let (next, next_epoch) =
        cluster.agreement_without(leader, epoch, Duration::from_secs(15)).await?;
    let took = failed_at.elapsed().as_secs_f64() * 1000.0;
    note(format!(
        "survivors agree: n{next} coordinates {next_epoch}, {took:.1} ms after n{leader} {failed}"
    ));
    elections.push(Election {
        epoch: next_epoch.0,
        round: next_epoch.round(),
        coordinator: next,
        duration_ms: took,
        cause: format!("n{leader} {failed}"),
    });

    tokio::time::sleep(args.duration / 3).await;
    let back_at = Instant::now();
    if args.fault == "stop" {
        note(format!("resume n{leader} (SIGCONT)"));
        cluster.signal(leader, libc::SIGCONT);
    } else {
        note(format!("restart n{leader}"));
        cluster.start(leader)?;
    }
    observer.set_reach(&Reach::default());
    let (coordinator, back_epoch) = cluster.agreement(next_epoch, Duration::from_secs(15)).await?;
    let took = back_at.elapsed().as_secs_f64() * 1000.0;
    note(format!(
            "all {} nodes agree: n{coordinator} coordinates {back_epoch}, {took:.1} ms after n{leader} was {back}",
            args.nodes
        ),
    );
    elections.push(Election {
        epoch: back_epoch.0,
        round: back_epoch.round(),
        coordinator,
        duration_ms: took,
        cause: format!("n{leader} {back}"),
    });

    let report = driver.await.context("workload task")??;
    note(format!("workload done: {} entries", report.entries));
    let mut incident_diagrams = Vec::new();
    if let Some((run, incidents)) = observer.recorded() {
        if args.drawing.wanted() {
            args.drawing.write(&run)?;
        }
        incident_diagrams = write_incidents(&run, &incidents, dir)?;
    }
    observer.stop();
    Ok((report, incident_diagrams))
}
