//! Many named locks in one engine: each name an instance of its own,
//! multiplexed over the same peers, on a small in-memory cluster where
//! every message arrives at once and in order.

use coterie_core::engine::{Output, RequestError};
use coterie_core::registry::{self, MUTEXES};
use coterie_core::wire::Envelope;
use coterie_core::{
    AlgoConfig, CsState, Engine, EngineError, Epoch, Fence, Forgetting, Mode, Name, NodeId, Time,
};
use std::collections::VecDeque;
use std::time::Duration;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

/// A cluster of engines whose messages arrive at once, in order.
struct Net {
    engines: Vec<Engine>,
    now: Time,
    /// Messages on their way: (from, to, envelope).
    wire: VecDeque<(NodeId, NodeId, Envelope)>,
    /// Every grant so far: (node, lock, fence).
    grants: Vec<(NodeId, Name, Fence)>,
    /// Mutex-layer messages sent so far.
    mutex_messages: u64,
    /// Application messages delivered: (from, to, bytes).
    delivered: Vec<(NodeId, NodeId, Vec<u8>)>,
}

impl Net {
    /// `n` nodes running `mutex` under bully, joined, with a coordinator.
    fn new(mutex: &str, n: u32) -> Net {
        Net::with(mutex, n, 1)
    }

    fn with(mutex: &str, n: u32, capacity: usize) -> Net {
        Net::build(mutex, n, capacity, None)
    }

    fn build(mutex: &str, n: u32, capacity: usize, forgetting: Option<Forgetting>) -> Net {
        let engines = (1..=n)
            .map(|id| {
                let cfg = AlgoConfig { capacity, forgetting, ..AlgoConfig::for_test(id, n) };
                let mutex = registry::mutex(mutex).expect("a known mutex");
                Engine::new(cfg, mutex, registry::election("bully").unwrap(), Time::ZERO)
            })
            .collect();
        let mut net = Net {
            engines,
            now: Time::ZERO,
            wire: VecDeque::new(),
            grants: Vec::new(),
            mutex_messages: 0,
            delivered: Vec::new(),
        };
        net.run_until(ms(1000));
        assert!(net.engines.iter().all(|e| e.coordinator() == Some(NodeId(n))), "elected");
        net
    }

    fn engine(&mut self, id: u32) -> &mut Engine {
        &mut self.engines[id as usize - 1]
    }

    /// Carries every output of every engine out, and every message in
    /// flight to its end, until nothing moves.
    fn settle(&mut self) {
        loop {
            for i in 0..self.engines.len() {
                let from = self.engines[i].id();
                while let Some(output) = self.engines[i].poll_output() {
                    match output {
                        Output::Send { to, envelope, .. } => {
                            if matches!(envelope, Envelope::Mutex { .. }) {
                                self.mutex_messages += 1;
                            }
                            self.wire.push_back((from, to, envelope));
                        }
                        Output::Granted { name, fence } => self.grants.push((from, name, fence)),
                        Output::Application { from: sender, bytes } => {
                            self.delivered.push((sender, from, bytes))
                        }
                        _ => {}
                    }
                }
            }
            let Some((from, to, envelope)) = self.wire.pop_front() else { return };
            let now = self.now;
            let _ = self.engine(to.0).handle_message(now, from, envelope);
        }
    }

    /// Lets time pass to `until`, a millisecond at a time.
    fn run_until(&mut self, until: Time) {
        while self.now < until {
            self.now += ms(1);
            let now = self.now;
            for e in &mut self.engines {
                if e.next_deadline().is_some_and(|d| d <= now) {
                    e.handle_timeout(now);
                }
            }
            self.settle();
        }
    }

    fn request(&mut self, id: u32, lock: &str) {
        let now = self.now;
        self.engine(id).request(now, &name(lock), 1).unwrap();
        self.run_until(now + ms(50));
    }

    fn release(&mut self, id: u32, lock: &str) {
        let now = self.now;
        self.engine(id).release(now, &name(lock));
        self.run_until(now + ms(50));
    }

    fn holds(&mut self, id: u32, lock: &str) -> bool {
        self.engine(id).cs_state_of(&name(lock)) == CsState::Held
    }
}

/// Two nodes hold two different locks at once; a third waits for one of
/// them and gets it when it is released, with a higher fence.
#[test]
fn two_names_are_held_at_once_and_one_name_by_one_node_at_a_time() {
    for info in MUTEXES {
        let mut net = Net::new(info.name, 3);
        net.request(1, "printer-1");
        net.request(2, "printer-2");
        assert!(net.holds(1, "printer-1"), "{}: n1 holds printer-1", info.name);
        assert!(net.holds(2, "printer-2"), "{}: n2 holds printer-2 meanwhile", info.name);
        net.request(3, "printer-1");
        assert!(!net.holds(3, "printer-1"), "{}: n3 waits for printer-1", info.name);
        assert_eq!(net.engine(3).cs_state_of(&name("printer-1")), CsState::Wanting);
        net.release(1, "printer-1");
        assert!(net.holds(3, "printer-1"), "{}: n3 holds printer-1 once n1 let go", info.name);
        assert!(net.holds(2, "printer-2"), "{}: printer-2 was never disturbed", info.name);
        let fences: Vec<Fence> = net
            .grants
            .iter()
            .filter(|(_, lock, _)| lock.as_str() == "printer-1")
            .map(|(_, _, f)| *f)
            .collect();
        assert_eq!(fences.len(), 2, "{}", info.name);
        assert!(fences[1] > fences[0], "{}: fences rise per name: {fences:?}", info.name);
        assert_eq!(net.engine(1).names(), 3, "{}: default and both printers", info.name);
    }
}

/// A lock new to the cluster costs what the algorithm's entry costs and,
/// for the algorithms whose coordinator keeps each lock's queue or token,
/// the coordinator's rebuild of that lock (a query to each peer and its
/// answer) on the lock's first use in its term: making an instance sends
/// nothing by itself.
#[test]
fn a_new_name_costs_its_entry_and_at_most_a_coordinators_rebuild() {
    for info in MUTEXES {
        let n = 5;
        let mut net = Net::new(info.name, n);
        let (_, hi) = (info.light_load)(u64::from(n), false, Mode::Write);
        // A coordinator that keeps the lock's state rebuilds it per lock:
        // a query and an answer from every peer, and for the token its
        // first lap.
        let rebuild = match info.name {
            "centralized" | "centralized-lending" => 2 * u64::from(n - 1),
            "token-ring" => 2 * u64::from(n - 1) + u64::from(n),
            // A quorum arbiter made for a lock starts its high-water mark
            // at its clock: a requester behind it restamps once.
            "maekawa" | "tree-quorum" => hi / 3,
            _ => 0,
        };
        for (round, lock) in ["a", "b", "c"].into_iter().enumerate() {
            let before = net.mutex_messages;
            net.request(1, lock);
            assert!(net.holds(1, lock), "{}: {lock}", info.name);
            net.release(1, lock);
            let cost = net.mutex_messages - before;
            assert!(
                cost <= hi + rebuild,
                "{}: entry {round} on a new lock cost {cost} messages, more than {hi} + {rebuild}",
                info.name
            );
        }
        // The same lock again costs only its entry.
        let before = net.mutex_messages;
        net.request(1, "a");
        net.release(1, "a");
        let cost = net.mutex_messages - before;
        assert!(
            cost <= hi + if info.name == "token-ring" { 2 } else { 0 },
            "{}: {cost}",
            info.name
        );
    }
}

/// Permits are checked where they enter: zero, more than one from an
/// algorithm that grants one holder, or another count than the lock has.
#[test]
fn permits_that_do_not_fit_are_refused_with_a_reason() {
    let mut net = Net::new("ricart-agrawala", 3);
    let now = net.now;
    let err = net.engine(1).request(now, &name("s"), 2).unwrap_err();
    assert!(err.to_string().contains("centralized, centralized-lending or raymond-k"), "{err}");
    assert!(net.engine(1).request(now, &name("s"), 0).is_err());

    let mut net = Net::with("centralized", 3, 1);
    let now = net.now;
    net.engine(1).request(now, &name("s"), 3).unwrap();
    net.run_until(now + ms(50));
    let err = net.engine(1).request(now, &name("s"), 1).unwrap_err();
    assert!(err.to_string().contains("with 3 permit(s)"), "{err}");
    // A peer that made the lock with other permits is refused too.
    let bytes = coterie_core::wire::encode(&0u8);
    let wrong = Envelope::Mutex { name: name("s"), permits: 1, bytes };
    let now = net.now;
    assert!(matches!(
        net.engine(1).handle_message(now, NodeId(2), wrong),
        Err(EngineError::Permits { theirs: 1, ours: 3, kept: true, .. })
    ));
    // Permits no lock may have are refused outright.
    let bytes = coterie_core::wire::encode(&0u8);
    let none = Envelope::Mutex { name: name("t"), permits: 0, bytes };
    let err = net.engine(1).handle_message(now, NodeId(2), none).unwrap_err();
    assert!(matches!(err, EngineError::BadPermits { theirs: 0, .. }), "{err}");
    assert!(err.to_string().contains("at least 1 permit"), "{err}");
}

/// A lock's permits are the name's: once a semaphore is idle everywhere,
/// the same name taken as a plain lock is granted at once (not refused
/// until the semaphore is forgotten), and admits one holder.
#[test]
fn an_idle_semaphore_is_a_plain_lock_at_once() {
    for mutex in ["centralized", "centralized-lending", "raymond-k"] {
        let mut net = Net::with(mutex, 3, 1);
        let now = net.now;
        net.engine(1).request(now, &name("y"), 2).unwrap();
        net.run_until(now + ms(50));
        assert!(net.holds(1, "y"), "{mutex}");
        net.release(1, "y");
        net.run_until(net.now + ms(50));
        for id in [1, 2] {
            let now = net.now;
            net.engine(id).request(now, &name("y"), 1).unwrap_or_else(|e| panic!("{mutex}: {e}"));
            net.run_until(now + ms(50));
        }
        assert!(net.holds(1, "y"), "{mutex}: the plain lock is granted");
        assert!(!net.holds(2, "y"), "{mutex}: and admits one holder");
        net.release(1, "y");
        assert!(net.holds(2, "y"), "{mutex}");
    }
}

/// A request with other permits than the lock has where it is in use is
/// not lost there: its messages wait until the lock is idle at that node,
/// and it is served then (dropped, the requester waited for ever).
#[test]
fn a_request_with_other_permits_waits_for_the_lock_to_go_idle() {
    for mutex in ["centralized", "centralized-lending", "raymond-k"] {
        let mut net = Net::with(mutex, 3, 1);
        let now = net.now;
        net.engine(2).request(now, &name("z"), 2).unwrap();
        net.run_until(now + ms(50));
        assert!(net.holds(2, "z"), "{mutex}");
        let now = net.now;
        net.engine(1).request(now, &name("z"), 1).unwrap_or_else(|e| panic!("{mutex}: {e}"));
        net.run_until(now + ms(50));
        assert!(!net.holds(1, "z"), "{mutex}: not beside a holder of the 2-permit lock");
        net.release(2, "z");
        net.run_until(net.now + ms(50));
        assert!(net.holds(1, "z"), "{mutex}: served once the lock is idle");
        let now = net.now;
        net.engine(2).request(now, &name("z"), 1).unwrap_or_else(|e| panic!("{mutex}: {e}"));
        net.run_until(now + ms(50));
        assert!(!net.holds(2, "z"), "{mutex}: the lock has one permit now");
    }
}

/// Three holders of a lock of three permits at once, and a fourth waits.
#[test]
fn a_lock_of_k_permits_admits_k_holders() {
    for mutex in ["centralized", "raymond-k"] {
        let mut net = Net::with(mutex, 5, 1);
        for id in 1..=4 {
            let now = net.now;
            net.engine(id).request(now, &name("pool"), 3).unwrap();
            net.run_until(now + ms(50));
        }
        let holding = (1..=4).filter(|&id| net.holds(id, "pool")).count();
        assert_eq!(holding, 3, "{mutex}");
        assert!(net.holds(1, "pool") && !net.holds(4, "pool"), "{mutex}: in order");
        net.release(1, "pool");
        assert!(net.holds(4, "pool"), "{mutex}");
    }
}

/// An algorithm that counts grants one node several permits of a lock at
/// once, each its own fence, and no more than the lock has: a
/// coordinator's clients and another node's alike, the last released by
/// its fence letting a waiter of another node in.
#[test]
fn a_node_holds_as_many_permits_as_its_clients_ask_for() {
    for info in MUTEXES.iter().filter(|m| m.claims.counting) {
        for node in [1, 3] {
            let mut net = Net::with(info.name, 3, 1);
            for _ in 0..3 {
                let now = net.now;
                net.engine(node).request(now, &name("pool"), 3).unwrap();
                net.run_until(now + ms(50));
            }
            let mine = net.engine(node).fences_of(&name("pool")).to_vec();
            let other = if node == 1 { 2 } else { 1 };
            let now = net.now;
            net.engine(other).request(now, &name("pool"), 3).unwrap();
            net.run_until(now + ms(50));
            assert_eq!(mine.len(), 3, "{} at n{node}: {mine:?}", info.name);
            let distinct: std::collections::BTreeSet<_> = mine.iter().collect();
            assert_eq!(distinct.len(), 3, "{}: each its own fence", info.name);
            assert!(!net.holds(other, "pool"), "{}: a fourth was let in", info.name);
            // A fourth request here waits too, and asks for nothing more.
            let now = net.now;
            net.engine(node).request(now, &name("pool"), 3).unwrap();
            net.run_until(now + ms(50));
            assert_eq!(net.engine(node).outstanding(&name("pool")), 3, "{}", info.name);
            let now = net.now;
            net.engine(node).release_grant(now, &name("pool"), mine[1]);
            net.run_until(now + ms(50));
            assert_eq!(net.engine(node).fences_of(&name("pool")), [mine[0], mine[2]]);
            assert!(net.holds(other, "pool"), "{}: the waiter gets the permit", info.name);
        }
    }
}

/// A peer's message for a lock this node never had, that does not decode,
/// leaves nothing behind.
#[test]
fn garbage_for_a_new_name_leaves_no_instance() {
    for info in MUTEXES {
        let mut net = Net::new(info.name, 3);
        let before = net.engine(1).names();
        let garbage = Envelope::Mutex { name: name("junk"), permits: 1, bytes: vec![0xff; 9] };
        let now = net.now;
        assert!(net.engine(1).handle_message(now, NodeId(2), garbage).is_err(), "{}", info.name);
        assert_eq!(net.engine(1).names(), before, "{}", info.name);
        assert!(registry::mutex(info.name).is_ok());
    }
}

/// What one node's application sends another arrives, in order, and
/// counts as hearing from the sender.
#[test]
fn application_messages_arrive_in_order() {
    let mut net = Net::new("centralized", 3);
    for i in 0..3u8 {
        net.engine(1).send_application(NodeId(2), vec![i]);
    }
    net.engine(1).send_application(NodeId(9), vec![9]); // not a member: dropped
    net.settle();
    let got: Vec<_> = net.delivered.iter().map(|(f, t, b)| (f.0, t.0, b[0])).collect();
    assert_eq!(got, [(1, 2, 0), (1, 2, 1), (1, 2, 2)]);
}

/// A lock nobody holds or wants is forgotten everywhere (a parked token
/// with it), costing no instance; used again, it is made anew, and
/// its fences go on rising from where they were.
#[test]
fn idle_names_are_forgotten_and_their_fences_keep_rising() {
    let forgetting = Forgetting { after: ms(100), remnants: 10, locks: 100 };
    for info in MUTEXES {
        let n = 4;
        let mut net = Net::build(info.name, n, 1, Some(forgetting));
        let mut last = None;
        for round in 0..3 {
            let who = 1 + round % n;
            net.request(who, "job");
            assert!(net.holds(who, "job"), "{}: round {round}", info.name);
            let fence = net.grants.last().unwrap().2;
            assert!(last.is_none_or(|l| fence > l), "{}: {fence:?} after {last:?}", info.name);
            last = Some(fence);
            net.release(who, "job");
            let now = net.now;
            net.run_until(now + ms(400));
            let live: u32 = (1..=n).map(|id| net.engine(id).names() as u32).sum();
            // Only the default lock is left at each node.
            assert_eq!(live, n, "{}: round {round}: instances left", info.name);
        }
        let forgotten: u64 = (1..=n).map(|id| net.engine(id).counters().forgotten).sum();
        assert!(forgotten > 0, "{}", info.name);
    }
}

/// Token ring's fences are per lock, so new locks share their first
/// generation, and making locks does not spend the rounds a fence has
/// room for (2^24); a lock made again after every node dropped its
/// remnant for room still goes above its earlier fences.
#[test]
fn new_token_ring_locks_share_a_generation_and_still_rise_per_lock() {
    let n = 3;
    let forgetting = Forgetting { after: ms(100), remnants: 3, locks: 100 };
    let mut net = Net::build("token-ring", n, 1, Some(forgetting));
    let use_once = |net: &mut Net, lock: &str, who: u32| {
        net.request(who, lock);
        assert!(net.holds(who, lock), "{lock}");
        let fence = net.grants.last().unwrap().2;
        net.release(who, lock);
        let now = net.now;
        net.run_until(now + ms(400));
        assert_eq!((1..=n).map(|id| net.engine(id).names()).sum::<usize>(), n as usize);
        fence
    };
    let first: Vec<Fence> =
        ["a", "b", "c"].iter().zip(1..).map(|(l, w)| use_once(&mut net, l, w)).collect();
    assert!(first.iter().all(|f| f.major() == first[0].major()), "one generation: {first:?}");
    // Three more push a, b and c's remnants out at every node: the
    // generation they share is in the floor now, and the next new lock
    // goes above it.
    let more: Vec<Fence> =
        ["d", "e", "f"].iter().zip(1..).map(|(l, w)| use_once(&mut net, l, w)).collect();
    assert!(more.iter().all(|f| f.major() >= first[0].major()), "{more:?}");
    let again = use_once(&mut net, "a", 2);
    assert!(again > first[0], "a again: {again:?} after {:?}", first[0]);
    let rounds = |f: Fence| Epoch(f.major()).round();
    assert!(rounds(again) <= rounds(first[0]) + 3, "{} rounds for 7 locks", rounds(again));
}

/// At the limit of instances a new lock takes the place of the one idle
/// longest, forgotten early (its fences still rise when it is used
/// again); with no lock idle, the request is refused.
#[test]
fn at_the_limit_the_lock_idle_longest_makes_room() {
    // The default lock and two more; nothing forgotten by time.
    let forgetting = Forgetting { after: ms(600_000), remnants: 10, locks: 3 };
    for info in MUTEXES {
        let mut net = Net::build(info.name, 3, 1, Some(forgetting));
        let mut fence_of_a = None;
        for lock in ["a", "b"] {
            net.request(1, lock);
            assert!(net.holds(1, lock), "{}: {lock}", info.name);
            fence_of_a = fence_of_a.or(Some(net.grants.last().unwrap().2));
            net.release(1, lock);
            // Idle, but not yet forgettable everywhere at once (bakery
            // keeps a retry due for 200 ms).
            let now = net.now;
            net.run_until(now + ms(400));
        }
        // `c` makes room: `a` goes (it was idle longest).
        net.request(1, "c");
        assert!(net.holds(1, "c"), "{}: c", info.name);
        assert_eq!(net.engine(1).names(), 3, "{}", info.name);
        assert!(net.engine(1).counters().evicted >= 1, "{}", info.name);
        // `d` makes room too (`b` goes); then nothing is idle at node 1.
        net.request(1, "d");
        assert!(net.holds(1, "d"), "{}: d", info.name);
        let now = net.now;
        let refused = net.engine(1).request(now, &name("e"), 1);
        assert!(
            matches!(refused, Err(RequestError::TooManyLocks(3))),
            "{}: {refused:?}",
            info.name
        );
        // Released, `c` makes room for `a` again, whose fence still rises.
        net.release(1, "c");
        let now = net.now;
        net.run_until(now + ms(400));
        net.request(1, "a");
        assert!(net.holds(1, "a"), "{}: a again", info.name);
        let fence = net.grants.last().unwrap().2;
        assert!(fence > fence_of_a.unwrap(), "{}: {fence:?} after {fence_of_a:?}", info.name);
    }
}

/// Locality: under `roucairol-carvalho` a lock taken over and over at one
/// node costs no message once that node holds every peer's permission,
/// heartbeats flowing all the while (their watermarks carry the ceilings
/// the peers owe it, which must not spend its reservation); another
/// node's use of the lock costs the first one only that node's
/// permission back. Each lock keeps its own permissions.
#[test]
fn kept_permissions_make_repeated_entries_free_per_lock() {
    let n = 5;
    let mut net = Net::new("roucairol-carvalho", n);
    let mut last: Option<Fence> = None;
    let mut rises = |net: &Net| {
        let fence = net.grants.last().expect("a grant").2;
        assert!(last.is_none_or(|l| fence > l), "fence {fence} after {last:?}");
        last = Some(fence);
    };
    for lock in ["jobs", "shard-7"] {
        let before = net.mutex_messages;
        net.request(1, lock);
        net.release(1, lock);
        assert_eq!(net.mutex_messages - before, 2 * u64::from(n - 1), "{lock}: the first entry");
    }
    for _ in 0..40 {
        let before = net.mutex_messages;
        net.request(1, "jobs");
        assert!(net.holds(1, "jobs"));
        rises(&net);
        net.release(1, "jobs");
        assert_eq!(net.mutex_messages, before, "a re-entry sent a message");
    }
    let before = net.mutex_messages;
    net.request(3, "jobs");
    rises(&net);
    net.release(3, "jobs");
    assert_eq!(net.mutex_messages - before, 2 * u64::from(n - 1), "n3 asks everyone");
    let before = net.mutex_messages;
    net.request(1, "jobs");
    rises(&net);
    net.release(1, "jobs");
    assert_eq!(net.mutex_messages - before, 2, "n1 asks n3 alone");
    // The other lock kept its permissions throughout.
    let before = net.mutex_messages;
    net.request(1, "shard-7");
    net.release(1, "shard-7");
    assert_eq!(net.mutex_messages, before);
}
