//! `coterie run SCENARIO.toml`: a local cluster, a workload, a timeline of
//! faults and the expectations they must meet.

use super::common;
use super::harness::scenario::Scenario;
use super::harness::{play, Cluster, Compose, LocalCluster, Shape};
use super::timeline::{self, Timeline};
use super::workload;
use anyhow::{bail, Context, Result};
use coterie_core::registry::{self, ElectionInfo, MutexInfo};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

/// Run a fault scenario against a local cluster of real processes.
///
/// The scenario file names the cluster (size and algorithms), a workload,
/// a timeline of steps (kill, restart, stop, resume, pause, unpause,
/// partition, heal, delay, drop, reset; the same language as `up`'s
/// standard input and the dashboard's buttons) and expectations (no violation at the witness; a new
/// coordinator within a bound after each step that takes the coordinator
/// away; the coordinator at the end; entries after the last step). It
/// prints the timeline as it happens and a summary, and exits 1 if an
/// expectation fails. See `scenarios/` for examples.
#[derive(clap::Args)]
pub struct Args {
    /// The scenario file.
    scenario: PathBuf,
    /// Run it with this election algorithm instead of the file's.
    #[arg(long, value_parser = registry::election)]
    election: Option<&'static ElectionInfo>,
    /// Run it with this mutual-exclusion algorithm instead of the file's.
    #[arg(long, value_parser = registry::mutex)]
    mutex: Option<&'static MutexInfo>,
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

/// The report `--json` prints.
#[derive(Debug, Serialize)]
struct Report {
    scenario: String,
    mutex: &'static MutexInfo,
    election: &'static ElectionInfo,
    nodes: u32,
    timeline: Vec<timeline::Event>,
    /// From each step that took the coordinator away (or asked to settle)
    /// to agreement on a new one, as the driver measured it.
    elections_ms: Vec<f64>,
    /// Every election the nodes' event streams showed, with its cause.
    elections: Vec<timeline::Election>,
    workload: workload::Report,
    failed: Vec<String>,
    passed: bool,
    /// A diagram of the second around each thing the witness caught.
    incident_diagrams: Vec<String>,
}

pub fn run(args: Args, log_format: &str) -> Result<ExitCode> {
    let mut scenario = Scenario::load(&args.scenario)?;
    if let Some(e) = args.election {
        scenario.cluster.election = e;
    }
    if let Some(m) = args.mutex {
        scenario.cluster.mutex = m;
    }
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
    let played = match compose {
        None => {
            let shape = Shape {
                nodes: c.nodes,
                mutex: c.mutex,
                election: c.election,
                count: c.count,
                lock_delay: c.lock_delay.unwrap_or_default(),
                partitions: c.partitions,
                tls: false,
            };
            let (cluster, witness) = LocalCluster::launch(&shape, log_format, &dir).await?;
            let mut cluster = Cluster::Local(cluster);
            let played =
                play::play(s, &mut cluster, witness.addr(), &timeline, drawing, &dir).await;
            cluster.stop_all().await;
            witness.stop().await;
            played?
        }
        Some((project, file, config)) => {
            let compose = Compose::attach(project, file, config)?;
            if compose.nodes().len() != c.nodes as usize {
                bail!(
                    "the scenario wants {} nodes; the compose cluster has {}",
                    c.nodes,
                    compose.nodes().len()
                );
            }
            let witness = compose.witness().to_string();
            let mut cluster = Cluster::Compose(compose);
            play::play(s, &mut cluster, &witness, &timeline, drawing, &dir).await?
        }
    };
    Ok(Report {
        scenario: s.name.clone(),
        mutex: c.mutex,
        election: c.election,
        nodes: c.nodes,
        timeline: timeline.events(),
        elections_ms: played.measured.iter().skip(1).map(|m| m.duration_ms).collect(),
        elections: played.seen,
        workload: played.workload,
        passed: played.failed.is_empty(),
        failed: played.failed,
        incident_diagrams: played.incident_diagrams,
    })
}
