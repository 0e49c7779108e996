//! `coterie check`: the exhaustive explorer finds what it should, and the
//! state spaces it explores are pinned, so a change that alters one is
//! noticed (as stateright's examples pin theirs). The pins are of majority
//! mode, the default; the tests about what the failure detector lets
//! through say `detector`.

use coterie_core::Partitions;
use coterie_sim::check::{self, CheckConfig};

/// One request per node of `mutex` and `election` on three nodes.
fn config(mutex: &str, election: &str) -> CheckConfig {
    CheckConfig::new(mutex.parse().unwrap(), election.parse().unwrap(), 3)
}

/// The same in detector mode: a suspected peer is taken for crashed.
fn detector(mutex: &str, election: &str) -> CheckConfig {
    CheckConfig { partition_mode: Partitions::Detector, ..config(mutex, election) }
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
        ..detector("centralized", "bully")
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
    let cfg = CheckConfig { partitions: 1, delay_ticks: 1, ..detector("centralized", "bully") };
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
    let cfg = CheckConfig {
        one_way_partitions: 1,
        delay_ticks: 1,
        ..detector("ricart-agrawala", "bully")
    };
    let report = check::check(&cfg, |_| {});
    assert!(report.exhausted);
    assert!(report.counterexamples.is_empty(), "{:#?}", report.counterexamples);
    assert_eq!((report.states, report.distinct_states), (86_817, 69_249));
}

/// The algorithms that claim safety under partitions keep it (and
/// liveness after the heal) in every schedule of one partition, even in
/// detector mode: every minority, every moment of the first ticks and
/// every length.
#[test]
fn check_exhausts_partitions_of_the_partition_safe_algorithms() {
    let safe: Vec<&str> = coterie_core::registry::MUTEXES
        .iter()
        .filter(|m| m.claims.safe_under_partitions)
        .map(|m| m.name)
        .collect();
    assert!(!safe.is_empty());
    for mutex in safe {
        let cfg = CheckConfig { partitions: 1, delay_ticks: 1, ..detector(mutex, "bully") };
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
    ("centralized", [9_954, 9_954, 14_087], 2),
    ("centralized-lending", [9_954, 9_954, 14_087], 2),
    ("bakery", [1_929, 1_929, 1_986], 1),
    ("lamport", [2_998, 2_998, 3_055], 1),
    ("ricart-agrawala", [276_446, 276_446, 279_971], 2),
    ("roucairol-carvalho", [287_859, 287_859, 291_504], 2),
    ("raymond-k", [276_446, 276_446, 279_971], 2),
    ("lodha-kshemkalyani", [32_780, 32_780, 36_215], 2),
    ("token-ring", [20_503, 20_503, 31_458], 2),
    ("maekawa", [191_709, 191_709, 402_792], 2),
    ("tree-quorum", [65_716, 65_716, 275_805], 2),
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
    ("centralized", [84_984, 86_047, 102_384]),
    ("centralized-lending", [84_960, 86_023, 102_352]),
    ("bakery", [73_694, 74_459, 81_804]),
    ("lamport", [149_787, 151_968, 164_410]),
    ("ricart-agrawala", [55_917, 56_616, 62_801]),
    ("roucairol-carvalho", [64_345, 65_220, 71_934]),
    ("raymond-k", [55_917, 56_616, 62_801]),
    ("lodha-kshemkalyani", [55_762, 57_145, 62_904]),
    ("token-ring", [84_798, 85_883, 100_371]),
    ("maekawa", [58_073, 59_624, 67_183]),
    ("tree-quorum", [60_037, 62_600, 69_375]),
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
    let pins = [1_632_395, 1_646_154, 1_819_854];
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
    let pins = [1_035_031, 1_035_031, 1_080_377];
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
    let pins = [1_834_298, 1_895_561, 2_141_339];
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

/// Several clients at a node: two nodes with two clients each, two
/// permits, two requests per client with up to 12 ticks of thought, so
/// that a node holds two permits at once and a client asks while its
/// node's loan is in use: every schedule, under every election.
#[test]
fn permits_go_to_sessions_at_one_node_in_every_schedule() {
    let mut changed = Vec::new();
    let table: &[(&str, [u64; 3])] = &[
        ("centralized", [57_597, 57_597, 58_650]),
        ("centralized-lending", [58_057, 58_057, 59_428]),
        ("raymond-k", [307_806, 307_806, 312_093]),
    ];
    for &(mutex, pins) in table {
        exhaust_pinned(mutex, pins, &mut changed, |cfg| CheckConfig {
            nodes: 2,
            sessions: 2,
            count: 2,
            requests: 2,
            delay_ticks: 1,
            think_ticks: 12,
            ..cfg
        });
    }
    assert!(changed.is_empty(), "the state space changed; if on purpose, pin: {changed:#?}");
}

/// Readers and writers, for every algorithm with a reader form: three
/// nodes, two of them reading and one writing, two requests each with up
/// to 8 ticks of thought, and one crash and restart anywhere in the
/// first four ticks: in every schedule no reader holds beside the
/// writer, a writer's fence is above every earlier grant's and a
/// reader's above every earlier writer's, and nothing deadlocks.
#[test]
fn readers_and_a_writer_are_exhausted_for_every_reader_form() {
    let table: &[(&str, [u64; 3])] = &[
        ("centralized", [1_082_967, 1_089_339, 1_232_994]),
        ("centralized-lending", [1_098_993, 1_105_387, 1_259_968]),
        ("lamport", [2_319_102, 2_372_560, 2_570_115]),
        ("ricart-agrawala", [554_663, 563_118, 619_158]),
        ("roucairol-carvalho", [701_044, 720_984, 780_737]),
        ("maekawa", [794_746, 847_274, 894_245]),
        ("tree-quorum", [852_257, 885_924, 938_062]),
        ("raymond-k", [511_376, 518_753, 567_437]),
    ];
    let forms = coterie_core::registry::MUTEXES.iter().filter(|m| m.claims.readers);
    assert_eq!(forms.count(), table.len(), "a reader form is not pinned");
    let mut changed = Vec::new();
    for &(mutex, pins) in table {
        let counts = exhaust_pinned(mutex, pins, &mut changed, |cfg| CheckConfig {
            readers: 2,
            requests: 2,
            crashes: 1,
            delay_ticks: 1,
            think_ticks: 8,
            ..cfg
        });
        eprintln!("(\"{mutex}\", {counts:?}),");
    }
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
    ("centralized", [8_506, 8_506, 8_968]),
    ("centralized-lending", [8_506, 8_506, 8_968]),
    ("bakery", [22_622, 22_622, 23_078]),
    ("lamport", [43_834, 43_834, 44_818]),
    ("ricart-agrawala", [6_250, 6_250, 6_706]),
    ("roucairol-carvalho", [6_436, 6_436, 6_892]),
    ("raymond-k", [6_250, 6_250, 6_706]),
    ("lodha-kshemkalyani", [5_354, 5_354, 5_810]),
    ("token-ring", [11_692, 11_692, 12_172]),
    ("maekawa", [25_552, 25_552, 27_328]),
    ("tree-quorum", [19_152, 19_152, 20_796]),
];

/// Two of three locks per request, taken in name order: besides safety
/// and fences per lock, no schedule leaves requests waiting on each other
/// (the deadlock invariant).
const TWO_OF_THREE_LOCKS: &[(&str, [u64; 3])] = &[
    // mutex, [bully, ring, garcia-molina]
    ("centralized", [34_281, 34_281, 36_358]),
    ("centralized-lending", [34_281, 34_281, 36_358]),
    ("bakery", [113_584, 113_584, 116_573]),
    ("lamport", [496_459, 496_459, 500_541]),
    ("ricart-agrawala", [47_019, 47_019, 48_486]),
    ("roucairol-carvalho", [72_657, 72_657, 75_809]),
    ("raymond-k", [47_019, 47_019, 48_486]),
    ("lodha-kshemkalyani", [34_304, 34_304, 35_897]),
    ("token-ring", [42_234, 42_234, 44_324]),
    ("maekawa", [74_738, 74_738, 83_028]),
    ("tree-quorum", [54_020, 54_020, 62_306]),
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
        ..detector("centralized", "bully")
    };
    let split = check::check(&base, |_| {});
    assert!(split.violations > 0);
    let cfg = CheckConfig { partition_mode: Partitions::Majority, ..base };
    let report = check::check(&cfg, |_| {});
    assert!(report.exhausted);
    assert_eq!(report.violations, 0, "{:?}", report.counterexamples);
}
