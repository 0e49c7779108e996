//! `coterie demo`: a local cluster, a workload, a coordinator killed and
//! brought back, and what happened.

use super::common;
use super::harness::play::{play, Measured};
use super::harness::scenario::{ClusterSpec, Scenario, WorkloadSpec};
use super::harness::step::Action;
use super::harness::{Cluster, LocalCluster, Placement, Shape};
use super::timeline::{self, Timeline};
use super::workload;
use anyhow::{bail, Context, Result};
use coterie_core::registry::{ElectionInfo, MutexInfo};
use coterie_core::{Epoch, Partitions, Way};
use serde::Serialize;
use std::process::ExitCode;
use std::time::Duration;

/// How the demo's coordinator fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Fault {
    /// SIGKILL, then a restart.
    Kill,
    /// SIGSTOP, a hang its sockets do not reveal, then SIGCONT.
    Stop,
    /// Cut off from every peer (its agent drops all it sends and hears),
    /// then healed: in majority mode a minority of one that must stop
    /// granting, in detector mode a second coordinator.
    Partition,
}

impl Fault {
    /// The step that makes the fault, and the one that ends it.
    fn steps(self) -> (Action, Action) {
        match self {
            Fault::Kill => (Action::Kill, Action::Restart),
            Fault::Stop => (Action::Stop, Action::Resume),
            Fault::Partition => (Action::Partition { peers: vec![], way: Way::Both }, Action::Heal),
        }
    }
}

/// Start a local cluster, run a workload, kill the coordinator part-way,
/// bring it back, and print what happened.
///
/// Needs no configuration: it picks free ports on 127.0.0.1, starts
/// --nodes node processes and a witness, and drives two clients per node
/// through the critical section (of one lock, or of --names locks), every
/// entry checked at the witness. A
/// third of the way in it kills the coordinator's process (SIGKILL; or
/// stops it with SIGSTOP, `--fault stop`) and times the election that
/// follows; two thirds in it restarts (or resumes) it. The
/// timeline shows each election and how long the cluster took to agree;
/// the summary shows entries, throughput, latency, messages per entry and
/// what the witness saw. Exits non-zero if the witness saw a violation
/// (after a kill, a stale fence counts as one too, but not a late entry:
/// the killed node's last grant, whose holder came in after the next).
#[derive(clap::Args)]
pub struct Args {
    /// --mutex, --election, --count (the witness is told the count too).
    #[command(flatten)]
    algorithms: common::Algorithms,
    /// Cluster size.
    #[arg(long, default_value_t = 5)]
    nodes: u32,
    /// How long the workload runs.
    #[arg(long, default_value = "6s", value_parser = common::parse_duration)]
    duration: Duration,
    /// Clients per node.
    #[arg(long, default_value_t = 2)]
    clients: usize,
    /// How many locks the clients' requests spread over, `r0` ..: with
    /// 1 every client queues for the same lock, and the latency is that
    /// queue's; with as many as nodes, two clients want each on average.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    names: u32,
    /// Time inside the critical section.
    #[arg(long, default_value = "1ms", value_parser = common::parse_duration)]
    hold: Duration,
    /// Time between a release and the next request.
    #[arg(long, default_value = "2ms", value_parser = common::parse_duration)]
    think: Duration,
    /// How the coordinator fails: `kill` (SIGKILL, then a restart),
    /// `stop` (SIGSTOP, a hang its sockets do not reveal, then SIGCONT) or
    /// `partition` (cut off from every peer, then healed).
    #[arg(long, value_enum, default_value = "kill")]
    fault: Fault,
    /// Run the nodes on ports of 127.0.0.1 from this one up, as `init
    /// --base-port` lays them out (node 1's peer port, its client port,
    /// node 2's ...), the witness's after them; free ports by default.
    #[arg(long, value_name = "PORT")]
    base_port: Option<u16>,
    /// Print a JSON report instead of text.
    #[arg(long)]
    json: bool,
    /// --diagram, --shiviz: draw the run (every message, recorded from
    /// the nodes' streams).
    #[command(flatten)]
    drawing: common::Drawing,
}

#[derive(Serialize)]
struct DemoReport {
    mutex: &'static MutexInfo,
    election: &'static ElectionInfo,
    nodes: u32,
    #[serde(flatten)]
    workload: workload::Report,
    /// The agreements the driver timed: at the start, after the fault,
    /// after the node came back.
    elections: Vec<Measured>,
    timeline: Vec<timeline::Event>,
    logs: String,
    /// A diagram of the second around each thing the witness caught.
    incident_diagrams: Vec<String>,
    /// What went wrong, if anything.
    failed: Vec<String>,
}

pub fn run(args: Args, log_format: &str) -> Result<ExitCode> {
    if args.algorithms.count == 0
        || (args.algorithms.count > 1 && !args.algorithms.mutex.claims.counting)
    {
        bail!(
            "--count {} does not fit {}, which admits one holder at a time",
            args.algorithms.count,
            args.algorithms.mutex
        );
    }
    if args.nodes < 2 {
        bail!("a demo needs at least 2 nodes");
    }
    if args.nodes == 2 && args.algorithms.partitions.mode == Partitions::Majority {
        bail!(
            "with 2 nodes in majority mode the demo's fault stops the cluster: a majority of 2 \
             is both, so the survivor grants nothing and elects nobody until the coordinator \
             is back; give --nodes 3 or more, or --partition-mode detector"
        );
    }
    common::runtime()?.block_on(demo(args, log_format))
}

/// The demo is a built-in scenario ([`Scenario::demo`]), played by the
/// same engine as `coterie run`.
async fn demo(args: Args, log_format: &str) -> Result<ExitCode> {
    let dir = std::env::temp_dir().join(format!("coterie-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let cluster = ClusterSpec {
        nodes: args.nodes,
        mutex: args.algorithms.mutex,
        election: args.algorithms.election,
        count: args.algorithms.count,
        lock_delay: None,
        partitions: args.algorithms.partitions.mode,
    };
    let workload = WorkloadSpec {
        clients: args.clients,
        hold: args.hold,
        think: args.think,
        duration: args.duration,
        names: args.names,
        ..WorkloadSpec::default()
    };
    let (away, back) = args.fault.steps();
    let scenario = Scenario::demo(cluster, workload, away, back);
    let shape = Shape {
        nodes: args.nodes,
        mutex: args.algorithms.mutex,
        election: args.algorithms.election,
        count: args.algorithms.count,
        lock_delay: Duration::ZERO,
        partitions: args.algorithms.partitions.mode,
        tls: false,
    };
    let placement = Placement { base_port: args.base_port, ..Placement::LOCAL };
    let (cluster, witness) =
        LocalCluster::launch_with(&shape, log_format, &dir, &placement).await?;
    if !args.json {
        println!(
            "coterie demo: {} nodes running {} + {} on 127.0.0.1, witness {}",
            args.nodes,
            args.algorithms.mutex,
            args.algorithms.election,
            witness.addr()
        );
        for node in cluster.nodes() {
            println!("  node {} client {}", node.id.unwrap_or_default(), node.addr);
        }
        println!("config: {} (for coterie status --config)", dir.join("cluster.toml").display());
        println!("logs: {}\n", dir.display());
    }
    let timeline = Timeline::new(args.json);
    let mut cluster = Cluster::Local(cluster);
    let played =
        play(&scenario, &mut cluster, witness.addr(), &timeline, &args.drawing, &dir).await;
    cluster.stop_all().await;
    witness.stop().await;
    let played = played?;
    let clean = played.failed.is_empty();
    let out = DemoReport {
        mutex: args.algorithms.mutex,
        election: args.algorithms.election,
        nodes: args.nodes,
        workload: played.workload,
        elections: played.measured,
        timeline: timeline.events(),
        logs: dir.display().to_string(),
        incident_diagrams: played.incident_diagrams,
        failed: played.failed,
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
        for f in &out.failed {
            println!("FAILED: {f}");
        }
        if clean {
            println!("OK: the witness saw no violation");
        }
    }
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
