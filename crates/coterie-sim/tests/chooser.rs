//! The chooser: a seed replays to the very same run, and the depth-first
//! chooser drives the same simulator through different schedules, each of
//! which replays from its path.

use coterie_sim::chooser::{Enumerate, Random};
use coterie_sim::sim::{self, Simulation};
use coterie_sim::SimConfig;
use std::time::Duration;

/// A run of the mutex and election algorithms named.
fn pair(mutex: &str, election: &str) -> SimConfig {
    SimConfig::new(mutex.parse().unwrap(), election.parse().unwrap())
}

/// Everything a run reports, with its trace, as text to compare.
fn fingerprint(report: &coterie_sim::RunReport) -> String {
    format!("{report:?}")
}

#[test]
fn a_seed_replays_to_the_very_same_run() {
    let configs = [
        SimConfig { crashes: 2, ..pair("ricart-agrawala", "bully") },
        SimConfig { partitions: 1, pauses: 1, ..pair("maekawa", "ring") },
        SimConfig { drops: 1, resets: 1, delays: 1, ..pair("lamport", "garcia-molina") },
    ];
    for cfg in configs {
        for seed in 0..5 {
            let cfg = SimConfig { seed, trace: true, ..cfg.clone() };
            let first = sim::run(cfg.clone());
            let again = sim::run(cfg.clone());
            assert!(!first.trace.is_empty());
            assert_eq!(fingerprint(&first), fingerprint(&again), "{} seed {seed}", cfg.mutex);
            // The seed's chooser, handed in, is the same run.
            let chosen = Simulation::with_chooser(cfg.clone(), Random::new(seed)).run();
            assert_eq!(fingerprint(&first), fingerprint(&chosen), "{} seed {seed}", cfg.mutex);
        }
    }
}

#[test]
fn the_depth_first_chooser_walks_schedules_that_replay() {
    let tick = Duration::from_millis(1);
    let cfg = SimConfig {
        nodes: 2,
        requests: 1,
        delay: (tick, tick * 2),
        hold: (tick, tick),
        think: (Duration::ZERO, Duration::ZERO),
        trace: true,
        ..pair("ricart-agrawala", "bully")
    };
    let mut chooser = Enumerate::new(tick);
    let mut schedules = Vec::new();
    for _ in 0..30 {
        let report = Simulation::with_chooser(cfg.clone(), &mut chooser).run();
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.counts.entries, 2);
        let path = chooser.path().to_vec();
        // The schedule, followed again, is the same run.
        let replay = Simulation::with_chooser(cfg.clone(), Enumerate::replay(tick, path)).run();
        assert_eq!(report.trace, replay.trace);
        schedules.push(report.trace);
        // Vary the first choices (the boot's dials and first messages):
        // the deepest ones are heartbeats after the workload, which the
        // trace leaves out.
        if !chooser.advance_from(10) {
            break;
        }
    }
    let distinct: std::collections::BTreeSet<_> = schedules.iter().collect();
    assert!(distinct.len() > 1, "every schedule was the same");
}

/// A simulation copied part-way goes on exactly as the original: the
/// engines, sessions, connections, queue and chooser are all copied, so a
/// checker can fork a run at a state and explore each way on from it.
#[test]
fn a_run_forked_part_way_ends_as_the_original() {
    let configs = [
        SimConfig { crashes: 2, ..pair("ricart-agrawala", "bully") },
        SimConfig { partitions: 1, pauses: 1, ..pair("maekawa", "ring") },
        SimConfig { resets: 2, drops: 1, ..pair("token-ring", "garcia-molina") },
    ];
    for cfg in configs {
        for seed in 0..3 {
            let cfg = SimConfig { seed, trace: true, ..cfg.clone() };
            let whole = sim::run(cfg.clone());
            let mut sim = Simulation::new(cfg.clone());
            for _ in 0..(500 + 300 * seed) {
                assert!(sim.step(), "{} seed {seed}: the run ended early", cfg.mutex);
            }
            let fork = sim.clone();
            let (mut a, mut b) = (sim, fork);
            while a.step() {}
            while b.step() {}
            let (a, b) = (a.finish(), b.finish());
            assert_eq!(fingerprint(&a), fingerprint(&b), "{} seed {seed}", cfg.mutex);
            assert_eq!(fingerprint(&a), fingerprint(&whole), "{} seed {seed}", cfg.mutex);
        }
    }
}
