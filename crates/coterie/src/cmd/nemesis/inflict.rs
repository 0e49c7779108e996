//! Carrying out each fault of the schedule on a local cluster, and undoing
//! it: signals to node and client processes, the agents' own partition
//! faults, libfaketime clock files, and a node's state files.

use super::clients::{Clients, Doing};
use super::netns::Network;
use super::plan::{cuts, Clock, Disk, Fault, Kind};
use crate::cmd::harness::{LocalCluster, Signal};
use anyhow::{Context, Result};
use coterie_node::protocol::{FaultCommand, Way};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where Debian's libfaketime lives (the multi-threaded build, for the
/// node's runtime threads).
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// Whether clock faults can be made here.
pub fn clock_faults_possible() -> bool {
    Path::new(LIBFAKETIME).exists()
}

/// The environment that gives node `id` a wall clock of its own, read
/// from `dir/clock-nID` (at most a second late), while its monotonic clock
/// stays the machine's: a stepped clock, as NTP or an operator steps it.
pub fn clock_env(dir: &Path, id: u32) -> Vec<(String, String)> {
    let file = clock_file(dir, id);
    let _ = std::fs::write(&file, "+0\n");
    vec![
        ("LD_PRELOAD".into(), LIBFAKETIME.into()),
        ("FAKETIME_TIMESTAMP_FILE".into(), file.display().to_string()),
        ("FAKETIME_CACHE_DURATION".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}

fn clock_file(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("clock-n{id}"))
}

/// A node's state files: its snapshot, then its log.
fn state_files(dir: &Path, id: u32) -> [PathBuf; 2] {
    coterie_node::state::files(&dir.join("state"), "demo", id)
}

/// A copy of a node's state files, as [`state_files`] lists them; `None`
/// where there was no file.
type Copy = [Option<Vec<u8>>; 2];

/// A node's state copied at two looks: (the older, the newer).
type Copies = (Option<Copy>, Option<Copy>);

/// The nemesis's hold on the cluster: what it has done and must undo.
pub struct Nemesis<'a> {
    pub cluster: &'a mut LocalCluster,
    pub clients: &'a mut Clients,
    pub dir: PathBuf,
    pub nodes: u32,
    /// The nodes' namespaces, when partitions are made there (else by the
    /// agents' own faults).
    network: Option<&'a Network>,
    /// Each node's state files as they were at the previous look, and at
    /// the one before (a rollback restores the older).
    copies: BTreeMap<u32, Copies>,
    /// Clients frozen and not yet thawed.
    frozen: Vec<u32>,
}

impl<'a> Nemesis<'a> {
    pub fn new(
        cluster: &'a mut LocalCluster,
        clients: &'a mut Clients,
        dir: &Path,
        nodes: u32,
        network: Option<&'a Network>,
    ) -> Self {
        Nemesis {
            cluster,
            clients,
            dir: dir.to_path_buf(),
            nodes,
            network,
            copies: BTreeMap::new(),
            frozen: Vec::new(),
        }
    }

    /// Copies every node's state files aside, keeping the previous copy
    /// for a rollback.
    pub fn snapshot(&mut self) {
        for id in 1..=self.nodes {
            let now = state_files(&self.dir, id).map(|path| std::fs::read(path).ok());
            let entry = self.copies.entry(id).or_default();
            entry.0 = entry.1.take().or(Some(now.clone()));
            entry.1 = Some(now);
        }
    }

    /// Starts `fault`; says what was done.
    pub async fn start(&mut self, fault: &Fault) -> Result<String> {
        let id = fault.target;
        Ok(match fault.kind {
            Kind::Kill => {
                self.cluster.kill(id).await?;
                format!("kill -9 n{id}")
            }
            Kind::Pause => {
                self.cluster.signal(id, Signal::Stop)?;
                format!("SIGSTOP n{id}")
            }
            Kind::FreezeWaiter | Kind::FreezeHolder => {
                let want =
                    if fault.kind == Kind::FreezeWaiter { Doing::Waiting } else { Doing::Holding };
                let (p, found) = self.find_client(id, want).await;
                self.clients.signal(p, libc::SIGSTOP);
                self.frozen.push(p);
                let doing = if want == Doing::Waiting { "waiting" } else { "holding" };
                if found {
                    format!("SIGSTOP client p{p} while {doing}")
                } else {
                    format!("SIGSTOP client p{p} (none was {doing} within 1 s)")
                }
            }
            Kind::Partition | Kind::Bridge | Kind::Ring => {
                let cuts = cuts(fault.kind, self.nodes, id, fault.seed);
                for (i, peers) in cuts.iter().enumerate() {
                    if peers.is_empty() {
                        continue;
                    }
                    match self.network {
                        Some(network) => network.cut(i as u32 + 1, peers)?,
                        None => {
                            let command =
                                FaultCommand::Partition { peers: peers.clone(), way: Way::Both };
                            self.agent(i as u32 + 1, command).await?;
                        }
                    }
                }
                describe_cuts(fault.kind, &cuts, id)
            }
            Kind::Clock => {
                std::fs::write(clock_file(&self.dir, id), format!("{}\n", fault.clock.faketime()))?;
                self.cluster.kill(id).await?;
                self.cluster.start(id)?;
                let what = match fault.clock {
                    Clock::Ahead => "an hour ahead",
                    Clock::Behind => "an hour behind",
                    Clock::Fast => "running twice as fast",
                };
                format!("n{id}'s wall clock {what}, and n{id} restarted under it")
            }
            Kind::Disk => {
                self.cluster.kill(id).await?;
                let files = state_files(&self.dir, id);
                let what = match fault.disk {
                    Disk::Lose => {
                        for path in &files {
                            let _ = std::fs::remove_file(path);
                        }
                        "state lost"
                    }
                    Disk::Truncate => {
                        // The log is the file a power loss can tear (the
                        // snapshot is replaced by a rename).
                        if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&files[1]) {
                            let len = f.metadata().map_or(0, |m| m.len());
                            f.set_len(len / 2)?;
                        }
                        "state log truncated to half"
                    }
                    Disk::Rollback => {
                        let old =
                            self.copies.get(&id).and_then(|c| c.0.clone()).unwrap_or_default();
                        for (path, old) in files.iter().zip(old) {
                            match old {
                                Some(old) => std::fs::write(path, old)?,
                                None => {
                                    let _ = std::fs::remove_file(path);
                                }
                            }
                        }
                        "state rolled back to an earlier copy"
                    }
                };
                format!("kill -9 n{id}, its {what}")
            }
        })
    }

    /// Ends `fault`; says what was done.
    pub async fn heal(&mut self, fault: &Fault) -> Result<String> {
        let id = fault.target;
        Ok(match fault.kind {
            Kind::Kill | Kind::Disk => {
                self.cluster.start(id)?;
                format!("restart n{id}")
            }
            Kind::Pause => {
                self.cluster.signal(id, Signal::Continue)?;
                format!("SIGCONT n{id}")
            }
            Kind::FreezeWaiter | Kind::FreezeHolder => {
                let thawed: Vec<String> = self.thaw().iter().map(|p| format!("p{p}")).collect();
                format!("SIGCONT client {}", thawed.join(", "))
            }
            Kind::Partition | Kind::Bridge | Kind::Ring => {
                self.lift_cuts().await?;
                "heal the partition".to_string()
            }
            Kind::Clock => format!("n{id} keeps its clock"),
        })
    }

    /// Undoes whatever may still be in force: every node running and
    /// resumed, no partition, no client frozen. Runs even after an error.
    pub async fn heal_all(&mut self) {
        self.thaw();
        for id in 1..=self.nodes {
            if self.cluster.running(id) {
                let _ = self.cluster.signal(id, Signal::Continue);
            } else {
                let _ = self.cluster.start(id);
            }
        }
        let _ = self.lift_cuts().await;
    }

    /// Resumes every frozen client; returns which.
    fn thaw(&mut self) -> Vec<u32> {
        let thawed = std::mem::take(&mut self.frozen);
        for &p in &thawed {
            self.clients.signal(p, libc::SIGCONT);
        }
        thawed
    }

    /// Lifts every node's cuts (in its namespace, or by its agent); every
    /// node is asked even if one fails, and the first failure is returned.
    async fn lift_cuts(&self) -> Result<()> {
        let mut first_error = Ok(());
        for id in 1..=self.nodes {
            match self.network {
                Some(network) => network.heal(id),
                None => {
                    let healed = self.agent(id, FaultCommand::Heal).await;
                    if first_error.is_ok() {
                        first_error = healed;
                    }
                }
            }
        }
        first_error
    }

    /// A client doing `want`: `first` if it is, else the first other that
    /// is within a second, else `first`; and whether one was found.
    async fn find_client(&mut self, first: u32, want: Doing) -> (u32, bool) {
        let n = self.clients.len();
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            for k in 0..n {
                let p = (first - 1 + k) % n + 1;
                if self.clients.doing(p) == want {
                    return (p, true);
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        (first, false)
    }

    /// Sends a fault command to node `id`'s agent.
    async fn agent(&self, id: u32, command: FaultCommand) -> Result<()> {
        let node = self
            .cluster
            .nodes()
            .iter()
            .find(|n| n.id == Some(id))
            .with_context(|| format!("no node {id}"))?;
        node.connect().await?.fault(command).await?;
        Ok(())
    }
}

/// A partition in words: the groups each node sees.
fn describe_cuts(kind: Kind, cuts: &[Vec<u32>], bridge: u32) -> String {
    let n = cuts.len() as u32;
    let sees = |a: u32| -> Vec<String> {
        (1..=n)
            .filter(|&b| b != a && !cuts[a as usize - 1].contains(&b))
            .map(|b| format!("n{b}"))
            .collect()
    };
    match kind {
        Kind::Ring => {
            let links: Vec<String> =
                (1..=n).map(|a| format!("n{a}:{}", sees(a).join("+"))).collect();
            format!("majorities ring ({})", links.join(" "))
        }
        _ => {
            let mut groups: Vec<Vec<u32>> = Vec::new();
            for a in (1..=n).filter(|&a| kind != Kind::Bridge || a != bridge) {
                match groups.iter_mut().find(|g| !cuts[a as usize - 1].contains(&g[0])) {
                    Some(g) => g.push(a),
                    None => groups.push(vec![a]),
                }
            }
            let text: Vec<String> = groups
                .iter()
                .map(|g| g.iter().map(|a| format!("n{a}")).collect::<Vec<_>>().join(","))
                .collect();
            if kind == Kind::Bridge {
                format!("partition {} bridged by n{bridge}", text.join(" | "))
            } else {
                format!("partition {}", text.join(" | "))
            }
        }
    }
}
