//! A scenario: a cluster, a workload, a timeline of steps and the
//! expectations they must meet. Read from a file by `coterie run`; `coterie
//! demo` is the built-in one ([`Scenario::demo`]).

use super::step::{Action, Step, StepText, Target};
use crate::cmd::workload;
use anyhow::{bail, Context, Result};
use coterie_core::registry::{self, ElectionInfo, MutexInfo};
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// A scenario, checked.
#[derive(Debug)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub cluster: ClusterSpec,
    pub workload: WorkloadSpec,
    pub steps: Vec<Timed>,
    pub expect: Expect,
}

/// A step and when it comes.
#[derive(Debug)]
pub struct Timed {
    /// From the start of the workload.
    pub at: Duration,
    pub step: Step,
    /// Time the agreement on a coordinator that follows it, even if it did
    /// not take the coordinator away.
    pub settle: bool,
}

/// A scenario file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: String,
    #[serde(default)]
    description: String,
    cluster: ClusterSpec,
    #[serde(default)]
    workload: WorkloadSpec,
    #[serde(default, rename = "step")]
    steps: Vec<StepText>,
    #[serde(default)]
    expect: Expect,
}

/// `[cluster]`: what the local cluster runs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    #[serde(default = "default_nodes")]
    pub nodes: u32,
    #[serde(default = "default_mutex")]
    pub mutex: &'static MutexInfo,
    #[serde(default = "default_election")]
    pub election: &'static ElectionInfo,
    #[serde(default = "default_count")]
    pub count: usize,
    /// `[cluster] lock_delay` of the nodes: after a holder is lost, nobody
    /// is granted the lock for this long.
    #[serde(default, with = "humantime_serde::option")]
    pub lock_delay: Option<Duration>,
    /// `[cluster] partitions` of the nodes: `"detector"` or `"majority"`.
    #[serde(default)]
    pub partitions: coterie_core::Partitions,
}

fn default_nodes() -> u32 {
    5
}
fn default_mutex() -> &'static MutexInfo {
    registry::mutex("centralized").expect("a registered mutex")
}
fn default_election() -> &'static ElectionInfo {
    registry::election("bully").expect("a registered election")
}
fn default_count() -> usize {
    1
}

/// `[workload]`: the clients that ask for the lock meanwhile.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Clients per node.
    #[serde(default = "default_clients")]
    pub clients: usize,
    #[serde(default = "default_hold", with = "humantime_serde")]
    pub hold: Duration,
    #[serde(default = "default_think", with = "humantime_serde")]
    pub think: Duration,
    #[serde(default = "default_duration", with = "humantime_serde")]
    pub duration: Duration,
    /// Only the clients of these nodes ask (default: every node's).
    #[serde(default)]
    pub on: Vec<u32>,
    /// The requests spread over this many locks, `r0` .. (default: 1).
    #[serde(default = "default_names")]
    pub names: u32,
    /// A request not granted within this long counts as unanswered.
    #[serde(default = "default_answer_within", with = "humantime_serde")]
    pub answer_within: Duration,
}

fn default_names() -> u32 {
    1
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
            names: default_names(),
            answer_within: default_answer_within(),
        }
    }
}

/// `[expect]`: what must hold for the scenario to pass.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The witness saw no two holders at once.
    #[serde(default = "yes")]
    pub no_violation: bool,
    /// Grants refused as stale are fine (after a hang or a partition, that
    /// is the fence doing its job); otherwise there must be none.
    #[serde(default)]
    pub allow_stale_fences: bool,
    /// At least this many grants refused as stale (a split brain the fence
    /// caught).
    #[serde(default)]
    pub stale_fences_at_least: u64,
    /// After each step that takes the coordinator away, the nodes still in
    /// reach agree on a new one within this long.
    #[serde(default, with = "humantime_serde::option")]
    pub election_within: Option<Duration>,
    /// At the end, every running node follows this node.
    #[serde(default)]
    pub final_coordinator: Option<u32>,
    /// Entries are still granted after the last step.
    #[serde(default = "yes")]
    pub progress_after_last_step: bool,
    /// Every request is granted within the workload's `answer_within`
    /// (one to a node that dies meanwhile is answered by its death).
    #[serde(default = "yes")]
    pub every_request_answered: bool,
    /// After each kill or stop, no entry is granted anywhere for this long
    /// (the lock delay at work). The time to the first entry after each
    /// such step is measured and reported whenever this is set.
    #[serde(default, with = "humantime_serde::option")]
    pub no_entry_within: Option<Duration>,
}

fn yes() -> bool {
    true
}

impl Expect {
    /// What the witness and the clients saw that these expectations do
    /// not allow, in words; `answer_within` is the workload's.
    pub fn judge(&self, seen: &workload::Report, answer_within: Duration) -> Vec<String> {
        let mut failed = Vec::new();
        if self.no_violation && seen.violations > 0 {
            failed.push(format!("the witness saw {} overlapping holders", seen.violations));
        }
        if !self.allow_stale_fences && seen.stale_fences > 0 {
            failed.push(format!("the witness refused {} stale fences", seen.stale_fences));
        }
        if seen.stale_fences < self.stale_fences_at_least {
            failed.push(format!(
                "the witness refused {} stale fences, expected at least {}",
                seen.stale_fences, self.stale_fences_at_least
            ));
        }
        if seen.entries == 0 {
            failed.push("no entry was granted at all".into());
        }
        if self.every_request_answered && seen.unanswered > 0 {
            failed.push(format!(
                "{} request(s) went unanswered for {answer_within:?}",
                seen.unanswered
            ));
        }
        failed
    }
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

impl Scenario {
    /// Reads and checks the scenario file at `path`.
    pub fn load(path: &Path) -> Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read scenario {}", path.display()))?;
        let file: File = toml::from_str(&text)
            .with_context(|| format!("{} is not a valid scenario", path.display()))?;
        let mut steps = Vec::new();
        for (i, text) in file.steps.iter().enumerate() {
            let what = |why: String| format!("{}: step {}: {why}", path.display(), i + 1);
            let step = text.step().map_err(|e| anyhow::anyhow!(what(e)))?;
            let Some(at) = text.at else { bail!(what("says no `at`".into())) };
            match step.node {
                Some(Target::Node(id)) if id > file.cluster.nodes => {
                    bail!(what(format!("node {id} is not in the cluster")))
                }
                Some(Target::Previous) if i == 0 => {
                    bail!(what("\"previous\": there is no step before".into()))
                }
                _ => {}
            }
            steps.push(Timed { at, step, settle: text.settle });
        }
        if steps.windows(2).any(|w| w[1].at < w[0].at) {
            bail!("{}: steps must be in time order", path.display());
        }
        if file.workload.names == 0 {
            bail!("{}: [workload] names must be at least 1", path.display());
        }
        Ok(Scenario {
            name: file.name,
            description: file.description,
            cluster: file.cluster,
            workload: file.workload,
            steps,
            expect: file.expect,
        })
    }

    /// `coterie demo`: `away` done to the coordinator a third of the way
    /// in (a kill, a stop, a cut), and `back` two thirds in (a restart, a
    /// resume, a heal); the cluster must agree after each, and the
    /// witness see no violation (after a hang or a cut, a grant refused
    /// as stale is the fence doing its job).
    pub fn demo(
        cluster: ClusterSpec,
        workload: WorkloadSpec,
        away: Action,
        back: Action,
    ) -> Scenario {
        let third = workload.duration / 3;
        // Only a killed coordinator's grants stop with it: a hung or
        // cut-off one may have handed out a fence the next one's pass.
        let stale = away != Action::Kill;
        Scenario {
            name: "demo".into(),
            description: String::new(),
            steps: vec![
                Timed {
                    at: third,
                    step: Step { action: away, node: Some(Target::Coordinator) },
                    settle: true,
                },
                Timed {
                    at: 2 * third,
                    step: Step { action: back, node: Some(Target::Previous) },
                    settle: true,
                },
            ],
            expect: Expect {
                allow_stale_fences: stale,
                election_within: Some(Duration::from_secs(15)),
                every_request_answered: false,
                progress_after_last_step: false,
                ..Expect::default()
            },
            cluster,
            workload,
        }
    }
}
