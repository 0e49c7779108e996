//! Faults a node injects into its own traffic on request (`coterie fault`):
//! cut peers off (both ways, or one), delay or drop what it sends them, or pause.
//! They act on whole messages above the reliable session (see
//! `transport`), so connections stay up, what they drop is never numbered
//! (the session cannot send it again), and the failure detector sees
//! exactly what a real partition or a slow link would show it: silence, or
//! late heartbeats. A `reset`, by contrast, breaks the connections under
//! the sessions, which hide it.
//!
//! [`Faults`] is what is in force; [`Injector`] shares it between the
//! tasks that consult it and the command that changes it.
//!
//! A node takes fault commands only when its configuration allows them
//! (`[security] allow_faults = true`): on a shared network, anyone who
//! reaches a client port could otherwise cut a production node off.

use crate::protocol::{FaultCommand, FaultState};
use coterie_core::NodeId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// What happens to one message to a peer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Send it now.
    Pass,
    /// Send it after this long.
    Delay(Duration),
    /// Lose it.
    Drop,
}

/// The faults in force at one node.
#[derive(Debug)]
pub(crate) struct Faults {
    /// `[security] allow_faults`.
    allowed: bool,
    peers: Vec<NodeId>,
    /// Peers whose messages are not let in.
    cut_in: BTreeSet<NodeId>,
    /// Peers this node's messages are not sent to.
    cut_out: BTreeSet<NodeId>,
    delay: BTreeMap<NodeId, Duration>,
    drop_percent: BTreeMap<NodeId, u8>,
    paused: bool,
    /// Seeded with the node's incarnation: drops are reproducible per run.
    rng: ChaCha8Rng,
}

impl Faults {
    /// No fault, for a node whose peers are `peers`; `allowed` says
    /// whether it takes fault commands at all.
    pub(crate) fn new(peers: Vec<NodeId>, seed: u64, allowed: bool) -> Faults {
        Faults {
            allowed,
            peers,
            cut_in: BTreeSet::new(),
            cut_out: BTreeSet::new(),
            delay: BTreeMap::new(),
            drop_percent: BTreeMap::new(),
            paused: false,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Whether this node takes `command`: looking (`show`) always, the
    /// rest only where the configuration allows faults.
    pub(crate) fn permits(&self, command: &FaultCommand) -> Result<(), String> {
        if self.allowed || matches!(command, FaultCommand::Show) {
            return Ok(());
        }
        Err("fault injection is not allowed on this node: set `allow_faults = true` under \
             [security] in its configuration (for a lab or a test cluster, never on a shared \
             network)"
            .into())
    }

    /// The peers `ids` names (all of them if empty). A peer not in the
    /// cluster is an error.
    pub(crate) fn targets(&self, ids: &[u32]) -> Result<Vec<NodeId>, String> {
        if ids.is_empty() {
            return Ok(self.peers.clone());
        }
        ids.iter()
            .map(|&id| {
                let peer = NodeId(id);
                if self.peers.contains(&peer) {
                    Ok(peer)
                } else {
                    Err(format!("node {id} is not a peer of this node"))
                }
            })
            .collect()
    }

    /// Carries out `command`. Peers not in the cluster are an error, and
    /// change nothing. A reset changes no fault in force: the transport
    /// carries it out.
    pub(crate) fn apply(&mut self, command: &FaultCommand) -> Result<(), String> {
        let targets = |ids: &[u32]| self.targets(ids);
        match command {
            FaultCommand::Partition { peers, way } => {
                let peers = targets(peers)?;
                if way.cuts_inbound() {
                    self.cut_in.extend(&peers);
                }
                if way.cuts_outbound() {
                    self.cut_out.extend(&peers);
                }
            }
            FaultCommand::Delay { peers, ms } => {
                for p in targets(peers)? {
                    if *ms == 0 {
                        self.delay.remove(&p);
                    } else {
                        self.delay.insert(p, Duration::from_millis(*ms));
                    }
                }
            }
            FaultCommand::Drop { peers, percent } => {
                if *percent > 100 {
                    return Err(format!("cannot drop {percent}% of messages"));
                }
                for p in targets(peers)? {
                    if *percent == 0 {
                        self.drop_percent.remove(&p);
                    } else {
                        self.drop_percent.insert(p, *percent);
                    }
                }
            }
            FaultCommand::Pause => self.paused = true,
            FaultCommand::Resume => self.paused = false,
            FaultCommand::Heal => {
                self.cut_in.clear();
                self.cut_out.clear();
                self.delay.clear();
                self.drop_percent.clear();
                self.paused = false;
            }
            FaultCommand::Show => {}
            FaultCommand::Reset { peers } => {
                targets(peers)?;
            }
        }
        Ok(())
    }

    /// What becomes of the next message to `peer`.
    pub(crate) fn outgoing(&mut self, peer: NodeId) -> Fate {
        if self.cut_out.contains(&peer) {
            return Fate::Drop;
        }
        if let Some(&percent) = self.drop_percent.get(&peer) {
            if self.rng.random_range(0..100u8) < percent {
                return Fate::Drop;
            }
        }
        match self.delay.get(&peer) {
            Some(&d) => Fate::Delay(d),
            None => Fate::Pass,
        }
    }

    /// Whether a message from `peer` is let in.
    pub(crate) fn admits(&self, peer: NodeId) -> bool {
        !self.cut_in.contains(&peer)
    }

    /// The faults in force, for the client.
    pub(crate) fn state(&self) -> FaultState {
        FaultState {
            partitioned: self.cut_in.intersection(&self.cut_out).map(|p| p.0).collect(),
            deaf_to: self.cut_in.difference(&self.cut_out).map(|p| p.0).collect(),
            mute_to: self.cut_out.difference(&self.cut_in).map(|p| p.0).collect(),
            delay_ms: self.delay.iter().map(|(p, d)| (p.0, d.as_millis() as u64)).collect(),
            drop_percent: self.drop_percent.iter().map(|(p, &d)| (p.0, d)).collect(),
            paused: self.paused,
        }
    }
}

/// The node's faults, shared by the tasks that consult them (every frame
/// in and out) and the client that changes them (`coterie fault`); with
/// the pause as a watch, so that inputs can wait for a resume.
pub(crate) struct Injector {
    faults: std::sync::Mutex<Faults>,
    paused: tokio::sync::watch::Sender<bool>,
}

/// What a fault command left to do besides changing the faults.
pub(crate) struct Injected {
    /// The faults now in force.
    pub(crate) state: FaultState,
    /// A `reset`: the connections with these peers are to break.
    pub(crate) reset: Option<Vec<NodeId>>,
}

impl Injector {
    /// No fault yet; see [`Faults::new`].
    pub(crate) fn new(faults: Faults) -> Injector {
        Injector {
            faults: std::sync::Mutex::new(faults),
            paused: tokio::sync::watch::channel(false).0,
        }
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        // A panic while holding the lock is a bug in this process; the
        // faults it left are still the best account of what is in force.
        self.faults.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Carries out `command`, if the configuration allows it; the reason
    /// otherwise, with nothing changed.
    pub(crate) fn command(&self, command: &FaultCommand) -> Result<Injected, String> {
        let mut faults = self.faults();
        faults.permits(command)?;
        let reset = match command {
            FaultCommand::Reset { peers } => Some(faults.targets(peers)?),
            other => {
                faults.apply(other)?;
                None
            }
        };
        let state = faults.state();
        self.paused.send_replace(state.paused);
        Ok(Injected { state, reset })
    }

    /// What becomes of the next message to `peer`.
    pub(crate) fn outgoing(&self, peer: NodeId) -> Fate {
        self.faults().outgoing(peer)
    }

    /// Whether a message from `peer` is let in (an injected partition
    /// keeps it out).
    pub(crate) fn admits(&self, peer: NodeId) -> bool {
        self.faults().admits(peer)
    }

    /// Whether a fault pauses the node now.
    pub(crate) fn paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Resolves at once unless a fault paused the node; then when resumed.
    pub(crate) async fn unpaused(&self) {
        if !*self.paused.borrow() {
            return; // the common case, on every message: no subscription
        }
        let mut paused = self.paused.subscribe();
        let _ = paused.wait_for(|p| !*p).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Way;

    fn faults() -> Faults {
        Faults::new(vec![NodeId(2), NodeId(3)], 7, true)
    }

    #[test]
    fn a_partition_cuts_both_ways_and_heal_restores() {
        let mut f = faults();
        f.apply(&FaultCommand::Partition { peers: vec![3], way: Way::Both }).unwrap();
        assert_eq!(f.outgoing(NodeId(3)), Fate::Drop);
        assert!(!f.admits(NodeId(3)));
        assert_eq!(f.outgoing(NodeId(2)), Fate::Pass);
        assert_eq!(f.state().to_string(), "cut off from n3");
        f.apply(&FaultCommand::Heal).unwrap();
        assert_eq!(f.outgoing(NodeId(3)), Fate::Pass);
        assert!(f.admits(NodeId(3)));
    }

    #[test]
    fn a_one_way_partition_cuts_one_way() {
        let mut f = faults();
        f.apply(&FaultCommand::Partition { peers: vec![3], way: Way::Inbound }).unwrap();
        assert!(!f.admits(NodeId(3)), "deaf to n3");
        assert_eq!(f.outgoing(NodeId(3)), Fate::Pass, "n3 still hears it");
        f.apply(&FaultCommand::Partition { peers: vec![2], way: Way::Outbound }).unwrap();
        assert!(f.admits(NodeId(2)), "it still hears n2");
        assert_eq!(f.outgoing(NodeId(2)), Fate::Drop, "n2 hears nothing");
        assert_eq!(f.state().to_string(), "hears nothing from n3; unheard by n2");
        // The other way too: cut both ways.
        f.apply(&FaultCommand::Partition { peers: vec![3], way: Way::Outbound }).unwrap();
        assert_eq!(f.state().partitioned, vec![3]);
        f.apply(&FaultCommand::Heal).unwrap();
        assert!(f.admits(NodeId(3)) && f.outgoing(NodeId(2)) == Fate::Pass);
    }

    #[test]
    fn delays_and_drops_apply_to_the_peers_named_or_all() {
        let mut f = faults();
        f.apply(&FaultCommand::Delay { peers: vec![], ms: 40 }).unwrap();
        assert_eq!(f.outgoing(NodeId(2)), Fate::Delay(Duration::from_millis(40)));
        f.apply(&FaultCommand::Drop { peers: vec![2], percent: 100 }).unwrap();
        assert_eq!(f.outgoing(NodeId(2)), Fate::Drop);
        f.apply(&FaultCommand::Drop { peers: vec![3], percent: 50 }).unwrap();
        let dropped = (0..1000).filter(|_| f.outgoing(NodeId(3)) == Fate::Drop).count();
        assert!((400..600).contains(&dropped), "{dropped} of 1000 dropped at 50%");
        let state = f.state();
        assert_eq!(state.delay_ms, vec![(2, 40), (3, 40)]);
        assert_eq!(state.drop_percent, vec![(2, 100), (3, 50)]);
    }

    #[test]
    fn unknown_peers_and_impossible_rates_are_refused_without_effect() {
        let mut f = faults();
        assert!(f.apply(&FaultCommand::Partition { peers: vec![2, 9], way: Way::Both }).is_err());
        assert!(f.state().partitioned.is_empty());
        assert!(f.apply(&FaultCommand::Drop { peers: vec![], percent: 101 }).is_err());
    }
}
