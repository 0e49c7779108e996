//! What the nemesis does and when: a seeded schedule of faults.
//!
//! The schedule depends only on the seed and the run's shape, so a run can
//! be repeated fault for fault (what the cluster makes of them is real
//! timing, and is not repeatable; the history says what happened).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt;
use std::time::Duration;

/// A kind of fault, as `--faults` names it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, serde::Serialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// SIGKILL a node, start it again when the fault ends.
    Kill,
    /// SIGSTOP a node, SIGCONT it when the fault ends.
    Pause,
    /// SIGSTOP a client while it waits for the lock.
    FreezeWaiter,
    /// SIGSTOP a client while it holds the lock.
    FreezeHolder,
    /// Cut the nodes into two halves.
    Partition,
    /// Two halves and one node that sees both.
    Bridge,
    /// Each node sees only its ring neighbours (Jepsen's majorities ring).
    Ring,
    /// Step a node's wall clock by an hour either way, or make it run
    /// fast, and restart it under that clock.
    Clock,
    /// Kill a node, lose or roll back its state or truncate its log, restart it.
    Disk,
}

impl Kind {
    /// Every kind: the mixed nemesis.
    pub const ALL: [Kind; 9] = [
        Kind::Kill,
        Kind::Pause,
        Kind::FreezeWaiter,
        Kind::FreezeHolder,
        Kind::Partition,
        Kind::Bridge,
        Kind::Ring,
        Kind::Clock,
        Kind::Disk,
    ];

    /// How long the fault lasts before it is healed.
    pub fn length(self) -> Duration {
        match self {
            Kind::Pause => Duration::from_millis(1200),
            Kind::Kill | Kind::Disk | Kind::Clock => Duration::from_millis(1000),
            _ => Duration::from_millis(1500),
        }
    }

    /// The name `--faults` takes.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Kill => "kill",
            Kind::Pause => "pause",
            Kind::FreezeWaiter => "freeze-waiter",
            Kind::FreezeHolder => "freeze-holder",
            Kind::Partition => "partition",
            Kind::Bridge => "bridge",
            Kind::Ring => "ring",
            Kind::Clock => "clock",
            Kind::Disk => "disk",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a clock fault does to a node's wall clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// An hour ahead.
    Ahead,
    /// An hour behind.
    Behind,
    /// Twice as fast from now on (drift).
    Fast,
}

impl Clock {
    /// The libfaketime setting.
    pub fn faketime(self) -> &'static str {
        match self {
            Clock::Ahead => "+1h",
            Clock::Behind => "-1h",
            Clock::Fast => "+0 x2",
        }
    }
}

/// What a disk fault does to a node's state files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disk {
    /// Deleted.
    Lose,
    /// Cut to half its length.
    Truncate,
    /// Replaced by the copy taken at the previous disk fault (or at the
    /// start).
    Rollback,
}

/// One fault of the schedule.
#[derive(Clone, Debug)]
pub struct Fault {
    /// From the start of the run.
    pub at: Duration,
    pub kind: Kind,
    /// Which node (kill, pause, clock, disk; the bridge for a bridge), or
    /// which client (freezes); partitions draw their halves from `seed`.
    pub target: u32,
    pub clock: Clock,
    pub disk: Disk,
    /// For the partition's halves and the ring's order.
    pub seed: u64,
}

/// A seeded schedule: one fault every `every`, from `every / 2`, each
/// healed by `duration`, each of a kind dealt from `kinds` (each kind once
/// in every `kinds.len()` faults), on a node (or client)
/// drawn from `1..=nodes` (`1..=clients`).
pub fn schedule(
    seed: u64,
    kinds: &[Kind],
    every: Duration,
    duration: Duration,
    nodes: u32,
    clients: u32,
) -> Vec<Fault> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut faults = Vec::new();
    if kinds.is_empty() {
        return faults;
    }
    // Kinds are dealt from a shuffled deck, shuffled again when it runs
    // out: every kind comes once in each `kinds.len()` faults.
    let mut deck: Vec<Kind> = Vec::new();
    let mut at = every / 2;
    // Every fault is healed before the nemesis ends.
    let longest = Kind::ALL.iter().map(|k| k.length()).max().unwrap_or_default();
    while at + longest <= duration {
        if deck.is_empty() {
            deck = kinds.to_vec();
            for i in (1..deck.len()).rev() {
                deck.swap(i, rng.random_range(0..=i));
            }
        }
        let kind = deck.pop().unwrap_or(Kind::Pause);
        let target = match kind {
            Kind::FreezeWaiter | Kind::FreezeHolder => rng.random_range(1..=clients.max(1)),
            _ => rng.random_range(1..=nodes),
        };
        // Clock and disk faults take their forms in turn.
        let nth = faults.iter().filter(|f: &&Fault| f.kind == kind).count();
        let clock = [Clock::Behind, Clock::Ahead, Clock::Fast][nth % 3];
        let disk = [Disk::Lose, Disk::Rollback, Disk::Truncate][nth % 3];
        faults.push(Fault { at, kind, target, clock, disk, seed: rng.random() });
        at += every;
    }
    faults
}

/// Which peers each node must not hear, for a partition of `kind` among
/// nodes `1..=n`: `cuts[i]` are node `i + 1`'s. Symmetric.
pub fn cuts(kind: Kind, n: u32, bridge: u32, seed: u64) -> Vec<Vec<u32>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<u32> = (1..=n).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let sees = |a: u32, b: u32| -> bool {
        let (pa, pb) = (
            order.iter().position(|&x| x == a).unwrap_or(0),
            order.iter().position(|&x| x == b).unwrap_or(0),
        );
        match kind {
            // A majority and a minority: the first n/2 in the shuffled
            // order against the rest.
            Kind::Partition => (pa < (n / 2) as usize) == (pb < (n / 2) as usize),
            // The same halves around the bridge, which sees everyone.
            Kind::Bridge => {
                let rest: Vec<u32> = order.iter().copied().filter(|&x| x != bridge).collect();
                let half = rest.len() / 2;
                let side = |x: u32| rest.iter().position(|&y| y == x).unwrap_or(0) < half;
                a == bridge || b == bridge || side(a) == side(b)
            }
            // Neighbours on the shuffled ring.
            Kind::Ring => {
                let d = pa.abs_diff(pb);
                d <= 1 || d == n as usize - 1
            }
            _ => true,
        }
    };
    (1..=n).map(|a| (1..=n).filter(|&b| b != a && !sees(a, b)).collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_schedule() {
        let a = schedule(7, &Kind::ALL, Duration::from_secs(2), Duration::from_secs(30), 5, 6);
        let b = schedule(7, &Kind::ALL, Duration::from_secs(2), Duration::from_secs(30), 5, 6);
        assert_eq!(a.len(), 14);
        let key = |f: &Fault| (f.at, f.kind, f.target, f.seed);
        assert!(a.iter().map(key).eq(b.iter().map(key)));
        assert!(a
            .iter()
            .all(|f| f.target >= 1 && f.at + f.kind.length() < Duration::from_secs(30)));
    }

    #[test]
    fn seeds_draw_different_partitions() {
        let schedule =
            schedule(1, &[Kind::Partition], Duration::from_secs(2), Duration::from_secs(60), 5, 6);
        let drawn: std::collections::BTreeSet<Vec<Vec<u32>>> =
            schedule.iter().map(|f| cuts(f.kind, 5, f.target, f.seed)).collect();
        assert!(drawn.len() >= 5, "{drawn:?}");
    }

    #[test]
    fn partitions_are_symmetric_and_shaped_as_named() {
        for seed in 0..20 {
            for kind in [Kind::Partition, Kind::Bridge, Kind::Ring] {
                for n in [2, 3, 5, 7] {
                    let cuts = cuts(kind, n, 1 + (seed as u32 % n), seed);
                    for a in 1..=n {
                        for &b in &cuts[a as usize - 1] {
                            assert!(cuts[b as usize - 1].contains(&a), "{kind} n={n} seed={seed}");
                        }
                    }
                    let seen = |a: u32| n - 1 - cuts[a as usize - 1].len() as u32;
                    match kind {
                        // Halves: the minority sees n/2 - 1 peers.
                        Kind::Partition => assert!((1..=n).any(|a| seen(a) == n / 2 - 1)),
                        Kind::Bridge => assert_eq!(seen(1 + (seed as u32 % n)), n - 1),
                        _ => assert!((1..=n).all(|a| seen(a) == 2.min(n - 1))),
                    }
                }
            }
        }
    }
}
