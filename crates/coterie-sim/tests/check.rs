//! `coterie check`: the exhaustive explorer finds what it should, and the
//! state spaces it explores are pinned, so a change that alters one is
//! noticed (as stateright's examples pin theirs).

use coterie_sim::check::{self, CheckConfig};

/// A timeout-trusting algorithm under a partition: the node cut off gives
/// up on the coordinator, elects itself and grants itself the lock while
/// the coordinator's own holder is still inside. The checker finds it,
/// with a schedule that ends at the violation and replays to it.
#[test]
fn check_finds_a_partition_breaking_a_timeout_trusting_algorithm() {
    let cfg = CheckConfig {
        partitions: 1,
        hold_ticks: 20,
        ..CheckConfig::new("centralized", "bully", 3)
    };
    let report = check::check(&cfg, |_| {}).unwrap();
    assert!(report.exhausted);
    assert!(report.violations > 0, "a partition with a long hold and no violation found");
    let safety = report
        .counterexamples
        .iter()
        .find(|c| c.invariant == coterie_sim::Invariant::Safety)
        .expect("a safety counterexample");
    // 22 steps from the workload's start, and a second pass proves no
    // schedule does it in fewer.
    assert_eq!((safety.steps, safety.proven_shortest), (22, true));
    let last = safety.schedule.last().expect("a schedule");
    assert!(last.contains("VIOLATION safety"), "the schedule ends at the violation: {last}");
    assert!(safety.schedule.iter().any(|l| l.contains("PARTITION")), "{:#?}", safety.schedule);
    // The path replays to the same violation.
    let again = check::replay(&cfg.sim_config(), &safety.path);
    assert_eq!(again, safety.schedule);
}

/// Ricart-Agrawala never asks again for a message it lost: a one-way
/// partition swallows a REQUEST, the partition heals, and the requester
/// waits forever while the others hear its heartbeats. The checker calls
/// it a deadlock at the moment it is certain (every node idle, only
/// heartbeats left, a failure timeout of them changing nothing), not a
/// liveness failure at the time limit, with the shortest schedule.
#[test]
fn check_finds_a_deadlock_after_a_one_way_partition() {
    let cfg =
        CheckConfig { one_way_partitions: 1, ..CheckConfig::new("ricart-agrawala", "bully", 3) };
    let report = check::check(&cfg, |_| {}).unwrap();
    assert!(report.exhausted);
    let deadlock = report
        .counterexamples
        .iter()
        .find(|c| c.invariant == coterie_sim::Invariant::Deadlock)
        .unwrap_or_else(|| panic!("no deadlock among {:#?}", report.counterexamples));
    assert!(deadlock.proven_shortest);
    let last = deadlock.schedule.last().expect("a schedule");
    assert!(last.contains("VIOLATION deadlock"), "{last}");
    assert!(deadlock.schedule.iter().any(|l| l.contains("HEAL")), "{:#?}", deadlock.schedule);
    let again = check::replay(&cfg.sim_config(), &deadlock.path);
    assert_eq!(again, deadlock.schedule);
}

/// The same configuration with a holder that leaves within a tick: nothing
/// overlaps, and every schedule is explored.
#[test]
fn check_exhausts_a_safe_configuration() {
    let cfg = CheckConfig { partitions: 1, ..CheckConfig::new("centralized", "bully", 3) };
    let report = check::check(&cfg, |_| {}).unwrap();
    assert!(report.exhausted);
    assert_eq!(report.violations, 0, "{:?}", report.counterexamples);
}

/// Distinct states of every pair at N = 3, one request per node, no
/// faults, messages taking one or two ticks. Bakery's eight messages a
/// node at two delays each are more than CI's budget (tens of millions of
/// states), so it is pinned with messages of one tick (every order of
/// simultaneous events still tried).
const NO_FAULTS: &[(&str, [u64; 3], u32)] = &[
    // mutex, [bully, ring, garcia-molina], delay ticks
    ("centralized", [2_641, 2_641, 9_131], 2),
    ("bakery", [1_578, 1_578, 1_615], 1),
    ("lamport", [1_113_438, 1_113_438, 1_210_149], 2),
    ("ricart-agrawala", [17_867, 17_867, 21_047], 2),
    ("raymond-k", [17_867, 17_867, 21_047], 2),
    ("lodha-kshemkalyani", [3_296, 3_296, 4_995], 2),
    ("token-ring", [1_893, 1_893, 9_254], 2),
    ("maekawa", [44_847, 44_847, 227_069], 2),
    ("tree-quorum", [35_208, 35_208, 228_448], 2),
];

#[test]
fn every_pair_at_three_nodes_is_exhausted_with_its_pinned_state_count() {
    let elections = ["bully", "ring", "garcia-molina"];
    assert_eq!(NO_FAULTS.len(), coterie_core::registry::MUTEXES.len(), "a mutex is not pinned");
    for &(mutex, pins, delay_ticks) in NO_FAULTS {
        for (election, pin) in elections.iter().zip(pins) {
            let cfg = CheckConfig { delay_ticks, ..CheckConfig::new(mutex, election, 3) };
            let report = check::check(&cfg, |_| {}).unwrap();
            assert!(report.exhausted, "{mutex}/{election}: a bound was hit");
            assert_eq!(report.violations, 0, "{mutex}/{election}: {:?}", report.counterexamples);
            assert_eq!(
                report.distinct_states, pin,
                "{mutex}/{election}: the state space changed; if on purpose, pin the new count"
            );
        }
    }
}

/// With one crash and restart (its victim, moment and downtime all
/// tried), under bully and ring. Garcia-Molina's periodic checks, the
/// quorum algorithms, lamport and bakery take from half a minute to more
/// than CI's budget here; the README gives what each needed.
const ONE_CRASH: &[(&str, [u64; 2])] = &[
    // mutex, [bully, ring]
    ("centralized", [205_080, 95_715]),
    ("ricart-agrawala", [190_368, 43_602]),
    ("raymond-k", [190_368, 43_602]),
    ("lodha-kshemkalyani", [185_741, 38_736]),
    ("token-ring", [834_112, 189_834]),
];

#[test]
fn one_crash_is_exhausted_with_its_pinned_state_count() {
    for &(mutex, pins) in ONE_CRASH {
        for (election, pin) in ["bully", "ring"].iter().zip(pins) {
            let cfg = CheckConfig { crashes: 1, ..CheckConfig::new(mutex, election, 3) };
            let report = check::check(&cfg, |_| {}).unwrap();
            assert!(report.exhausted, "{mutex}/{election}: a bound was hit");
            assert_eq!(report.violations, 0, "{mutex}/{election}: {:?}", report.counterexamples);
            assert_eq!(
                report.distinct_states, pin,
                "{mutex}/{election} with a crash: the state space changed; if on purpose, pin \
                 the new count"
            );
        }
    }
}
