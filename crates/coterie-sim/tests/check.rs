//! `coterie check`: the exhaustive explorer finds what it should, and the
//! state spaces it explores are pinned, so a change that alters one is
//! noticed (as stateright's examples pin theirs).

use coterie_sim::check::{self, CheckConfig};

/// One request per node of `mutex` and `election` on three nodes.
fn config(mutex: &str, election: &str) -> CheckConfig {
    CheckConfig::new(mutex.parse().unwrap(), election.parse().unwrap(), 3)
}

/// A timeout-trusting algorithm under a partition: the node cut off gives
/// up on the coordinator, elects itself and grants itself the lock while
/// the coordinator's own holder is still inside. The checker finds it,
/// with the shortest schedule, which ends at the violation and replays to
/// it.
#[test]
fn check_finds_a_partition_breaking_a_timeout_trusting_algorithm() {
    let cfg = CheckConfig {
        partitions: 1,
        hold_ticks: 20,
        delay_ticks: 1,
        ..config("centralized", "bully")
    };
    let report = check::check(&cfg, |_| {});
    assert!(report.exhausted);
    assert!(report.violations > 0, "a partition with a long hold and no violation found");
    let safety = report
        .counterexamples
        .iter()
        .find(|c| c.invariant == coterie_sim::Invariant::Safety)
        .expect("a safety counterexample");
    // 24 steps from the workload's start, and a second pass proves no
    // schedule does it in fewer.
    assert_eq!((safety.steps, safety.proven_shortest), (24, true));
    let last = safety.schedule.last().expect("a schedule");
    assert!(last.contains("VIOLATION safety"), "the schedule ends at the violation: {last}");
    assert!(safety.schedule.iter().any(|l| l.contains("PARTITION")), "{:#?}", safety.schedule);
    // The path replays to the same violation.
    let again = check::replay(&cfg.sim_config(), &safety.path);
    assert_eq!(again, safety.schedule);
}

/// Even a holder that leaves within a tick does not save it: a GRANT
/// lost to the cut leaves the cut-off node to elect itself and enter
/// under its own epoch, and the old coordinator's next grant carries a
/// fence below that one. A resource checking fences refuses the late
/// holder; the checker reports the fence.
#[test]
fn check_finds_a_stale_fence_after_a_lost_grant() {
    let cfg = CheckConfig { partitions: 1, delay_ticks: 1, ..config("centralized", "bully") };
    let report = check::check(&cfg, |_| {});
    assert!(report.exhausted);
    assert!(report.counterexamples.iter().all(|c| c.invariant == coterie_sim::Invariant::Fence));
    let fence = report.counterexamples.first().expect("a fence counterexample");
    assert!(fence.proven_shortest);
    assert!(fence.schedule.iter().any(|l| l.contains("PARTITION")), "{:#?}", fence.schedule);
}

/// A one-way partition swallows a REQUEST and heals; the side that
/// suspected the requester forgot the request, and the requester, never
/// suspected in its own eyes, waited for ever: a deadlock in 90 steps,
/// until suspicion was made mutual on the way back (the engine's
/// re-admission: the peer that suspected says so, and the requester asks
/// again with a fresh stamp). Every schedule of it is now explored with no
/// violation at all; the states pin the exploration.
#[test]
fn check_proves_no_deadlock_after_a_one_way_partition() {
    let cfg =
        CheckConfig { one_way_partitions: 1, delay_ticks: 1, ..config("ricart-agrawala", "bully") };
    let report = check::check(&cfg, |_| {});
    assert!(report.exhausted);
    assert!(report.counterexamples.is_empty(), "{:#?}", report.counterexamples);
    assert_eq!((report.states, report.distinct_states), (86_817, 69_249));
}

/// The algorithms that claim safety under partitions keep it (and
/// liveness after the heal) in every schedule of one partition: every
/// minority, every moment of the first ticks and every length.
#[test]
fn check_exhausts_partitions_of_the_partition_safe_algorithms() {
    let safe: Vec<&str> = coterie_core::registry::MUTEXES
        .iter()
        .filter(|m| m.claims.safe_under_partitions)
        .map(|m| m.name)
        .collect();
    assert!(!safe.is_empty());
    for mutex in safe {
        let cfg = CheckConfig { partitions: 1, delay_ticks: 1, ..config(mutex, "bully") };
        let report = check::check(&cfg, |_| {});
        assert!(report.exhausted, "{mutex}: a bound was hit");
        assert_eq!(report.violations, 0, "{mutex}: {:?}", report.counterexamples);
    }
}

/// Distinct states of every pair at N = 3, one request per node, no
/// faults, messages taking one or two ticks. Bakery's eight messages a
/// node and Lamport's six, at two delays each, are more than CI's budget
/// (millions of states; the README has what they needed), so they are
/// pinned with messages of one tick (every order of simultaneous events
/// still tried).
const NO_FAULTS: &[(&str, [u64; 3], u32)] = &[
    // mutex, [bully, ring, garcia-molina], delay ticks
    ("centralized", [7_226, 7_226, 19_019], 2),
    ("centralized-lending", [7_226, 7_226, 19_019], 2),
    ("bakery", [1_867, 1_867, 1_933], 1),
    ("lamport", [2_250, 2_250, 2_354], 1),
    ("ricart-agrawala", [98_263, 98_263, 103_983], 2),
    ("roucairol-carvalho", [99_130, 99_130, 106_716], 2),
    ("raymond-k", [98_263, 98_263, 103_983], 2),
    ("lodha-kshemkalyani", [17_576, 17_576, 19_275], 2),
    ("token-ring", [13_512, 13_512, 51_557], 2),
    ("maekawa", [67_059, 67_059, 284_958], 2),
    ("tree-quorum", [45_607, 45_607, 275_949], 2),
];

#[test]
fn every_pair_at_three_nodes_is_exhausted_with_its_pinned_state_count() {
    assert_eq!(NO_FAULTS.len(), coterie_core::registry::MUTEXES.len(), "a mutex is not pinned");
    let mut changed = Vec::new();
    for &(mutex, pins, delay_ticks) in NO_FAULTS {
        let counts =
            exhaust_pinned(mutex, pins, &mut changed, |cfg| CheckConfig { delay_ticks, ..cfg });
        eprintln!("(\"{mutex}\", {counts:?}, {delay_ticks}),");
    }
    // Every count is printed above, so a change on purpose is pinned at once.
    assert!(changed.is_empty(), "the state space changed; if on purpose, pin: {changed:#?}");
}

/// Exhausts `mutex` under every election (as `tweak` sets the check up),
/// expecting no violation; its counts, and in `changed` each that left
/// its pin.
fn exhaust_pinned(
    mutex: &str,
    pins: [u64; 3],
    changed: &mut Vec<String>,
    tweak: impl Fn(CheckConfig) -> CheckConfig,
) -> Vec<u64> {
    let mut counts = Vec::new();
    for (election, pin) in ["bully", "ring", "garcia-molina"].iter().zip(pins) {
        let cfg = tweak(config(mutex, election));
        let report = check::check(&cfg, |_| {});
        assert!(report.exhausted, "{mutex}/{election}: a bound was hit");
        assert_eq!(report.violations, 0, "{mutex}/{election}: {:?}", report.counterexamples);
        counts.push(report.distinct_states);
        if report.distinct_states != pin {
            changed.push(format!("{mutex}/{election}: {pin} -> {}", report.distinct_states));
        }
    }
    counts
}

/// With one crash and restart: every victim, every moment of the first
/// four ticks of the workload and every downtime (at their ends and
/// middle), the crash silent and not, under every election. Messages
/// take one tick here: with two, a crash multiplies each space above by
/// a hundred or more, past CI's budget (the README has what they
/// needed); the order of simultaneous events is still tried every way.
const ONE_CRASH: &[(&str, [u64; 3])] = &[
    // mutex, [bully, ring, garcia-molina]
    ("centralized", [79_804, 82_355, 100_285]),
    ("centralized-lending", [79_786, 82_337, 100_267]),
    ("bakery", [63_809, 64_876, 76_704]),
    ("lamport", [176_719, 176_561, 229_700]),
    ("ricart-agrawala", [53_137, 53_793, 68_769]),
    ("roucairol-carvalho", [69_859, 69_569, 91_698]),
    ("raymond-k", [53_137, 53_793, 68_769]),
    ("lodha-kshemkalyani", [50_042, 51_006, 62_813]),
    ("token-ring", [84_381, 89_215, 113_965]),
    ("maekawa", [45_799, 48_040, 60_089]),
    ("tree-quorum", [59_021, 59_555, 79_722]),
];

/// Locality: a node that keeps the permissions it was given re-enters on
/// them without a message, and its fence, which no peer has seen, must
/// still rise above every earlier one when it crashes. Two requests per
/// node with up to 24 ticks of thought before each, so that one node asks
/// again after the others went quiet, and one crash anywhere in the first
/// twelve ticks of the workload: every schedule, under every election.
/// (Without the bound a peer that went down holding this node's
/// permission leaves, the same check finds 161, 246 and 122 stale fences.)
#[test]
fn kept_permissions_survive_a_crash_after_a_local_re_entry() {
    let mut changed = Vec::new();
    let pins = [1_729_202, 1_774_423, 2_175_322];
    exhaust_pinned("roucairol-carvalho", pins, &mut changed, |cfg| CheckConfig {
        requests: 2,
        crashes: 1,
        delay_ticks: 1,
        think_ticks: 24,
        fault_window_ticks: 12,
        ..cfg
    });
    assert!(changed.is_empty(), "the state space changed; if on purpose, pin: {changed:#?}");
}

/// Locality at the coordinator's hand: a node that asks twice in a row,
/// the others quiet, is lent the lock, and its third request enters on
/// the loan's next fence without a message. Three requests per node with
/// up to 12 ticks of thought before each, every schedule under every
/// election: every fence rises, whoever the coordinator grants after a
/// recall. (Granting after a loan just above its first fence instead of
/// above its whole range, the same check finds 84 stale fences under
/// bully.)
#[test]
fn fences_issued_on_a_loan_stay_below_every_later_grant() {
    let mut changed = Vec::new();
    let pins = [951_132, 951_132, 1_050_151];
    exhaust_pinned("centralized-lending", pins, &mut changed, |cfg| CheckConfig {
        requests: 3,
        delay_ticks: 1,
        think_ticks: 12,
        ..cfg
    });
    assert!(changed.is_empty(), "the state space changed; if on purpose, pin: {changed:#?}");
}

/// The same with a crash: two requests per node (a plain grant, then the
/// loan) with up to 24 ticks of thought, and one crash of any node in the
/// first twelve ticks, so that the borrower crashes with the loan, or the
/// coordinator while the lock is lent or being recalled, and a new term
/// begins with a loan out: nobody overlaps, every fence rises. (Three
/// requests with a crash, so that entries on the loan meet the crash too,
/// are 32.7 million states under bully, too many for the suite; the
/// guide's `check` chapter has that run.)
#[test]
fn a_lent_lock_survives_a_crash_of_borrower_or_coordinator() {
    let mut changed = Vec::new();
    let pins = [1_991_155, 2_044_436, 2_475_069];
    exhaust_pinned("centralized-lending", pins, &mut changed, |cfg| CheckConfig {
        requests: 2,
        crashes: 1,
        delay_ticks: 1,
        think_ticks: 24,
        fault_window_ticks: 12,
        ..cfg
    });
    assert!(changed.is_empty(), "the state space changed; if on purpose, pin: {changed:#?}");
}

#[test]
fn one_crash_is_exhausted_with_its_pinned_state_count() {
    exhaust_table(ONE_CRASH, |cfg| CheckConfig { crashes: 1, delay_ticks: 1, ..cfg });
}

/// Exhausts every mutex of `table` as `tweak` sets the check up, and
/// holds each count to its pin.
fn exhaust_table(table: &[(&str, [u64; 3])], tweak: impl Fn(CheckConfig) -> CheckConfig) {
    assert_eq!(table.len(), coterie_core::registry::MUTEXES.len(), "a mutex is not pinned");
    let mut changed = Vec::new();
    for &(mutex, pins) in table {
        let counts = exhaust_pinned(mutex, pins, &mut changed, &tweak);
        eprintln!("(\"{mutex}\", {counts:?}),");
    }
    assert!(changed.is_empty(), "the state space changed; if on purpose, pin: {changed:#?}");
}

/// Two locks: one request per node, each for either lock, one-tick
/// messages (every order of simultaneous events is still tried). Safety
/// and fences are judged per lock.
const TWO_LOCKS: &[(&str, [u64; 3])] = &[
    // mutex, [bully, ring, garcia-molina]
    ("centralized", [6_400, 6_400, 6_796]),
    ("centralized-lending", [6_400, 6_400, 6_796]),
    ("bakery", [21_770, 21_770, 22_352]),
    ("lamport", [34_594, 34_594, 36_508]),
    ("ricart-agrawala", [5_396, 5_396, 5_706]),
    ("roucairol-carvalho", [5_582, 5_582, 5_920]),
    ("raymond-k", [5_396, 5_396, 5_706]),
    ("lodha-kshemkalyani", [4_774, 4_774, 5_070]),
    ("token-ring", [8_812, 8_812, 9_310]),
    ("maekawa", [22_414, 22_414, 24_352]),
    ("tree-quorum", [18_174, 18_174, 20_016]),
];

/// Two of three locks per request, taken in name order: besides safety
/// and fences per lock, no schedule leaves requests waiting on each other
/// (the deadlock invariant).
const TWO_OF_THREE_LOCKS: &[(&str, [u64; 3])] = &[
    // mutex, [bully, ring, garcia-molina]
    ("centralized", [25_978, 25_978, 28_246]),
    ("centralized-lending", [25_978, 25_978, 28_246]),
    ("bakery", [112_455, 112_455, 125_123]),
    ("lamport", [407_921, 407_921, 442_123]),
    ("ricart-agrawala", [32_756, 32_756, 35_157]),
    ("roucairol-carvalho", [54_031, 54_031, 58_160]),
    ("raymond-k", [32_756, 32_756, 35_157]),
    ("lodha-kshemkalyani", [24_856, 24_856, 26_892]),
    ("token-ring", [28_373, 28_373, 31_994]),
    ("maekawa", [62_247, 62_247, 74_951]),
    ("tree-quorum", [50_545, 50_545, 57_883]),
];

/// Exhausts every pair at three nodes over `names` locks, `per_request`
/// at a time, and holds each count to its pin.
fn exhaust_many_locks(pins: &[(&str, [u64; 3])], names: u32, per_request: u32) {
    exhaust_table(pins, |cfg| CheckConfig { names, per_request, delay_ticks: 1, ..cfg });
}

#[test]
fn two_locks_are_exhausted_for_every_pair() {
    exhaust_many_locks(TWO_LOCKS, 2, 1);
}

#[test]
fn requests_for_two_of_three_locks_never_deadlock() {
    exhaust_many_locks(TWO_OF_THREE_LOCKS, 3, 2);
}

/// With a majority deciding who is down (`partitions = "majority"`),
/// every algorithm, the timeout-trusting ones included, keeps safety,
/// fences and liveness in every schedule of one partition on three
/// nodes: every minority, every start in the first ticks, every length.
#[test]
fn check_exhausts_a_partition_of_every_pair_in_majority_mode() {
    for mutex in coterie_core::registry::MUTEXES {
        for election in coterie_core::registry::ELECTIONS {
            let cfg = CheckConfig {
                partitions: 1,
                delay_ticks: 1,
                partition_mode: coterie_core::Partitions::Majority,
                ..CheckConfig::new(mutex, election, 3)
            };
            let report = check::check(&cfg, |_| {});
            let pair = format!("{}/{}", mutex.name, election.name);
            assert!(report.exhausted, "{pair}: a bound was hit");
            assert_eq!(report.violations, 0, "{pair}: {:?}", report.counterexamples);
        }
    }
}

/// The split brain the first test finds (a holder inside while the
/// cut-off node elects itself and grants) is gone in majority mode: the
/// cut-off node stops at the end of its lease, and the majority waits it
/// out. Same configuration, every schedule.
#[test]
fn majority_mode_closes_the_split_brain_the_detector_lets_through() {
    let base = CheckConfig {
        partitions: 1,
        hold_ticks: 20,
        delay_ticks: 1,
        ..config("centralized", "bully")
    };
    let detector = check::check(&base, |_| {});
    assert!(detector.violations > 0);
    let cfg = CheckConfig { partition_mode: coterie_core::Partitions::Majority, ..base };
    let report = check::check(&cfg, |_| {});
    assert!(report.exhausted);
    assert_eq!(report.violations, 0, "{:?}", report.counterexamples);
}
