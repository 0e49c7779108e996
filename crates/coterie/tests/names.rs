//! Many named locks on real node processes: what `coterie lock NAME...`,
//! `coterie locks`, `coterie elect` and `coterie leader` promise, for
//! every algorithm where it differs.
//!
//! Deadlines bound liveness so that a broken build fails instead of
//! hanging; they are generous and assert nothing about speed.

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use support::*;

/// A cluster of `n` nodes running `mutex`.
fn cluster(n: u32, mutex: &str, test: &str) -> Up {
    let env = [("COTERIE_MUTEX", mutex)];
    Up::start_in(n, &format!("{test}-{mutex}"), |_| {}, &env)
}

/// `coterie lock` for `names` at `node`, running `script` with `$D` set.
fn lock(up: &Up, node: u32, names: &[&str], flags: &[&str], script: &str, dir: &Path) -> Child {
    let mut args: Vec<&str> = names.to_vec();
    args.extend_from_slice(flags);
    lock_running(up.config(), node, &args, script, dir)
}

/// Waits for a background `coterie lock` to end, and its exit code.
fn exit_code(child: Child, dir: &Path) -> Option<i32> {
    finished(child, dir).0
}

/// The fences a file of one fence per line holds, in order.
fn fences(path: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| l.trim().parse().unwrap()).collect()
}

/// On five real nodes, for every algorithm: two clients hold two names
/// at once; one name is never held twice, and its fences rise; a
/// holder's node killed leaves the other names alone, and its name is
/// granted again.
#[test]
fn every_algorithm_keeps_named_locks_apart_on_real_processes() {
    for mutex in mutexes() {
        let mut up = cluster(5, mutex, "named");
        let dir = scratch(&format!("named-{mutex}"));
        let d = &dir.0;

        // Two names, held at the same time: each waits to see the other in.
        let both = |me: &str, other: &str| {
            format!(
                "touch $D/{me}-in; n=0; while [ ! -e $D/{other}-in ]; do \
                 n=$((n+1)); [ $n -gt 1000 ] && exit 9; sleep 0.01; done"
            )
        };
        let a = lock(&up, 1, &["a"], &[], &both("a", "b"), d);
        let b = lock(&up, 2, &["b"], &[], &both("b", "a"), d);
        assert_eq!(exit_code(a, d), Some(0), "{mutex}: a did not see b held meanwhile");
        assert_eq!(exit_code(b, d), Some(0), "{mutex}: b did not see a held meanwhile");

        // One name from four nodes, three times each: never two inside,
        // and every fence above the one before.
        let inside = "mkdir $D/x.in || touch $D/overlap; echo $COTERIE_FENCE >> $D/x.fences; \
                      sleep 0.02; rmdir $D/x.in";
        for _ in 0..3 {
            let all: Vec<Child> =
                (2..=5).map(|node| lock(&up, node, &["x"], &[], inside, d)).collect();
            for c in all {
                assert_eq!(exit_code(c, d), Some(0), "{mutex}");
            }
        }
        assert!(!d.join("overlap").exists(), "{mutex}: two holders of x at once");
        let xs = fences(&d.join("x.fences"));
        assert_eq!(xs.len(), 12, "{mutex}");
        assert!(xs.windows(2).all(|w| w[0] < w[1]), "{mutex}: x's fences did not rise: {xs:?}");

        // c held at node 1, d at node 2; node 1 is killed.
        let c = lock(&up, 1, &["c"], &[], "echo $COTERIE_FENCE > $D/c.fence; exec sleep 60", d);
        let dd = lock(&up, 2, &["d"], &[], "touch $D/d-in; sleep 1.5; touch $D/d-done", d);
        appears(&d.join("c.fence"));
        appears(&d.join("d-in"));
        let c_fence = fences(&d.join("c.fence"))[0];
        up.control("kill 1");
        assert_eq!(exit_code(c, d), Some(76), "{mutex}: c's command was not stopped");
        assert_eq!(exit_code(dd, d), Some(0), "{mutex}: d's holder was disturbed");
        assert!(d.join("d-done").exists(), "{mutex}");
        // The quorum algorithms keep the permissions a dead holder had until
        // it comes back and says it no longer holds; the others go on.
        if matches!(mutex, "maekawa" | "tree-quorum") {
            up.control("start 1");
        }
        let again =
            lock_now(&up, 3, &["--timeout", "20s", "c"], &["sh", "-c", "echo $COTERIE_FENCE"]);
        assert!(
            again.status.success(),
            "{mutex}: c was not granted again: {}",
            text(&again.stderr)
        );
        let fence: u64 = text(&again.stdout).trim().parse().unwrap();
        assert!(fence > c_fence, "{mutex}: c's fence went from {c_fence} to {fence}");
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `coterie locks --json`, from `node`.
fn locks(up: &Up, node: u32) -> Vec<Value> {
    let out = coterie(&["locks", "--config", up.config(), "--node", &node.to_string(), "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Who holds and who waits, cluster wide, the same from every node, with
/// the waiters in the order they will be served where the algorithm knows
/// it.
#[test]
fn every_node_lists_every_holder_and_waiter() {
    for mutex in ["centralized", "ricart-agrawala"] {
        let up = cluster(4, mutex, "listing");
        let dir = scratch(&format!("listing-{mutex}"));
        let d = &dir.0;
        let hold = |name: &str| format!("touch $D/{name}-in; exec sleep 60");
        let p = lock(&up, 1, &["printer"], &["--value", "tray-2"], &hold("p"), d);
        appears(&d.join("p-in"));
        let j = lock(&up, 2, &["jobs/nightly"], &[], &hold("j"), d);
        appears(&d.join("j-in"));
        let w3 = lock(&up, 3, &["printer"], &[], "true", d);
        std::thread::sleep(Duration::from_millis(300));
        let w4 = lock(&up, 4, &["printer"], &[], "true", d);
        let waiting = |rows: &[Value]| {
            rows.iter()
                .find(|l| l["name"] == "printer")
                .map_or(0, |l| l["waiters"].as_array().unwrap().len())
        };
        let start = Instant::now();
        while waiting(&locks(&up, 1)) < 2 {
            assert!(start.elapsed() < Duration::from_secs(20), "{mutex}: waiters never listed");
            std::thread::sleep(Duration::from_millis(50));
        }
        for node in 1..=4 {
            let rows = locks(&up, node);
            let names: Vec<&str> = rows.iter().map(|l| l["name"].as_str().unwrap()).collect();
            assert_eq!(names, ["jobs/nightly", "printer"], "{mutex} from n{node}");
            let printer = &rows[1];
            let holders = printer["holders"].as_array().unwrap();
            assert_eq!(holders.len(), 1, "{mutex} from n{node}: {printer}");
            assert_eq!(holders[0]["node"], 1);
            assert_eq!(holders[0]["value"], "tray-2");
            assert!(holders[0]["fence"].as_u64().unwrap() > 0);
            let waiters: Vec<u64> = printer["waiters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w["node"].as_u64().unwrap())
                .collect();
            // n3 asked first: first in line, whether the order is the
            // algorithm's (timestamps) or the longest wait.
            assert_eq!(waiters, [3, 4], "{mutex} from n{node}: {printer}");
            assert_eq!(rows[0]["holders"][0]["node"], 2, "{mutex} from n{node}");
        }
        let prefix = coterie(&["locks", "--config", up.config(), "--json", "jobs/"]);
        let rows: Vec<Value> = serde_json::from_slice(&prefix.stdout).unwrap();
        assert_eq!(rows.len(), 1, "{mutex}: the prefix filters");
        for c in [p, j] {
            unsafe_kill(c.id(), 15);
            let _ = exit_code(c, d);
        }
        assert_eq!(exit_code(w3, d), Some(0));
        assert_eq!(exit_code(w4, d), Some(0));
    }
}

/// `-n 3`: three holders and no fourth, for the algorithms that count;
/// the others refuse it, naming those that can.
#[test]
fn permits_admit_k_holders_where_the_algorithm_counts() {
    for mutex in ["centralized", "raymond-k", "ricart-agrawala"] {
        let up = cluster(5, mutex, "permits");
        let dir = scratch(&format!("permits-{mutex}"));
        let d = &dir.0;
        if mutex == "ricart-agrawala" {
            let out = coterie(&["lock", "--config", up.config(), "-n", "3", "pool", "--", "true"]);
            assert_eq!(out.status.code(), Some(69), "{mutex}");
            let why = text(&out.stderr);
            assert!(why.contains("centralized, centralized-lending or raymond-k"), "{why}");
            continue;
        }
        let holders: Vec<Child> = (1..=3)
            .map(|node| {
                let script = format!("touch $D/in-{node}; exec sleep 60");
                lock(&up, node, &["pool"], &["-n", "3"], &script, d)
            })
            .collect();
        for node in 1..=3 {
            appears(&d.join(format!("in-{node}")));
        }
        let fourth = lock_now(&up, 4, &["-n", "3", "--try", "pool"], &["true"]);
        assert_eq!(fourth.status.code(), Some(75), "{mutex}: a fourth was let in");
        let rows = locks(&up, 5);
        assert_eq!(rows[0]["permits"], 3);
        assert_eq!(rows[0]["holders"].as_array().unwrap().len(), 3, "{mutex}");
        for c in holders {
            unsafe_kill(c.id(), 15);
            let _ = exit_code(c, d);
        }
        // The permits are the name's: with the semaphore idle, the same
        // name is a plain lock at once, not refused until it is forgotten.
        let deadline = Instant::now() + Duration::from_secs(30);
        while (1..=5)
            .any(|n| locks(&up, n).iter().any(|r| !r["holders"].as_array().unwrap().is_empty()))
        {
            assert!(Instant::now() < deadline, "{mutex}: the holders never left");
            std::thread::sleep(Duration::from_millis(50));
        }
        let plain = lock_now(&up, 1, &["pool"], &["true"]);
        assert_eq!(plain.status.code(), Some(0), "{mutex}: {}", text(&plain.stderr));
    }
}

/// A semaphore counts sessions, not nodes, under every algorithm that
/// counts: three `coterie lock -n 3 pool` through one node hold at once,
/// each with its own fence, and a fourth (a CLI try, an HTTP session's) is
/// refused until one lets go.
#[test]
fn a_semaphores_permits_go_to_sessions_at_one_node() {
    for mutex in ["centralized", "centralized-lending", "raymond-k"] {
        let up = cluster(3, mutex, "sessions");
        let dir = scratch(&format!("sessions-{mutex}"));
        let d = &dir.0;
        let holders: Vec<Child> = (1..=3)
            .map(|i| {
                let script = format!(
                    "echo $COTERIE_FENCE > $D/in-{i}; while [ ! -e $D/go ]; do sleep 0.05; done"
                );
                lock(&up, 1, &["pool"], &["-n", "3"], &script, d)
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        let count = || (1..=3).filter(|i| d.join(format!("in-{i}")).exists()).count();
        while count() < 3 {
            assert!(Instant::now() < deadline, "{mutex}: {} inside", count());
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(count(), 3, "{mutex}: holders through one node");
        let rows = locks(&up, 2);
        let held = rows[0]["holders"].as_array().unwrap();
        assert_eq!(held.len(), 3, "{mutex}: {rows:?}");
        assert!(held.iter().all(|h| h["node"] == 1), "{mutex}: {rows:?}");
        let fences: std::collections::BTreeSet<String> =
            (1..=3).map(|i| std::fs::read_to_string(d.join(format!("in-{i}"))).unwrap()).collect();
        assert_eq!(fences.len(), 3, "{mutex}: each holder its own fence: {fences:?}");
        let fourth = lock_now(&up, 1, &["-n", "3", "--try", "pool"], &["true"]);
        assert_eq!(fourth.status.code(), Some(75), "{mutex}: a fourth was let in");
        // An HTTP session at the same node: refused while three hold,
        // granted once one lets go.
        let n1 = up.http(1);
        let post = |path: &str, body: &str| {
            curl(&[
                "-X",
                "POST",
                "-H",
                "content-type: application/json",
                "-d",
                body,
                &format!("{n1}{path}"),
            ])
        };
        let id: Value = serde_json::from_str(&post("/v1/sessions", "{}")).unwrap();
        let id = id["id"].as_str().unwrap().to_string();
        let ask = format!(r#"{{"session": "{id}", "permits": 3, "try": true}}"#);
        let busy: Value = serde_json::from_str(&post("/v1/locks/pool/acquire", &ask)).unwrap();
        assert_eq!(busy["error"], "busy", "{mutex}: {busy}");
        std::fs::write(d.join("go"), "").unwrap();
        for c in holders {
            assert_eq!(exit_code(c, d), Some(0), "{mutex}");
        }
        let ask = format!(r#"{{"session": "{id}", "permits": 3, "timeout": "10s"}}"#);
        let granted: Value = serde_json::from_str(&post("/v1/locks/pool/acquire", &ask)).unwrap();
        assert!(granted["fence"].is_u64(), "{mutex}: {granted}");
    }
}

/// A plain lock asked for through one node while a semaphore of the same
/// name is held through another is granted once the semaphore is let go:
/// the node where the name is in use with two permits keeps the request's
/// messages until the name is idle there (it used to drop them, and the
/// plain lock waited until its timeout ran out, exit 75).
#[test]
fn a_plain_lock_waits_for_a_semaphore_held_elsewhere_and_then_gets_it() {
    for mutex in ["centralized", "raymond-k"] {
        let up = cluster(3, mutex, "other-permits");
        let dir = scratch(&format!("other-permits-{mutex}"));
        let d = &dir.0;
        let hold = "touch $D/in; while [ ! -e $D/go ]; do sleep 0.05; done";
        let holder = lock(&up, 2, &["z"], &["-n", "2"], hold, d);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !d.join("in").exists() {
            assert!(Instant::now() < deadline, "{mutex}: the semaphore was not granted");
            std::thread::sleep(Duration::from_millis(50));
        }
        let plain = lock(&up, 1, &["z"], &["--timeout", "20s"], "touch $D/plain", d);
        std::thread::sleep(Duration::from_millis(1000));
        assert!(!d.join("plain").exists(), "{mutex}: a plain lock beside the semaphore");
        std::fs::write(d.join("go"), "").unwrap();
        assert_eq!(exit_code(holder, d), Some(0), "{mutex}");
        assert_eq!(exit_code(plain, d), Some(0), "{mutex}: the plain lock once the name is idle");
        assert!(d.join("plain").exists(), "{mutex}");
    }
}

/// Several names are taken all or none: one that stays busy makes the
/// request time out holding nothing.
#[test]
fn several_names_are_taken_all_or_none() {
    let up = cluster(3, "ricart-agrawala", "all-or-none");
    let dir = scratch("all-or-none");
    let d = &dir.0;
    let b = lock(&up, 1, &["b"], &[], "touch $D/b-in; exec sleep 60", d);
    appears(&d.join("b-in"));
    let out = lock_now(&up, 2, &["--timeout", "1s", "a", "b", "c"], &["true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    let held: Vec<String> = locks(&up, 3)
        .iter()
        .filter(|l| !l["holders"].as_array().unwrap().is_empty())
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(held, ["b"], "what was taken on the way was released");
    // Once b is free, all three at once, each with its fence.
    unsafe_kill(b.id(), 15);
    let _ = exit_code(b, d);
    let script = "echo $COTERIE_LOCK; echo $COTERIE_FENCES";
    let out = lock_now(&up, 2, &["--timeout", "20s", "c", "a", "b"], &["sh", "-c", script]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("a b c"));
    let fences: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    for name in ["a", "b", "c"] {
        assert!(fences[name].as_u64().unwrap() > 0, "{stdout}");
    }
}

/// Names that are not names, names given twice, -n 0, and a node's
/// `max_names`: each gets one clear line, and the node serves on.
#[test]
fn bad_names_and_too_many_names_get_a_clear_error() {
    let up = Up::start_with(3, "bad-names", |c| c.limits.max_names = 2);
    let long = "x".repeat(257);
    for (args, why) in [
        (vec![""], "cannot be empty"),
        (vec![long.as_str()], "257 bytes long"),
        (vec!["tab\there"], "control character"),
        (vec!["a", "b", "a"], "named twice"),
        (vec!["-n", "0", "a"], "at least 1 permit"),
        (vec!["--read", "-n", "2", "a"], "one permit"),
    ] {
        let mut cmd = vec!["lock", "--config", up.config()];
        cmd.extend(args.iter().copied());
        cmd.extend(["--", "true"]);
        let out = coterie(&cmd);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(why) && stderr.lines().count() == 1, "{args:?}: {stderr}");
    }
    let out = lock_now(&up, 1, &["a", "b", "c"], &["true"]);
    assert_eq!(out.status.code(), Some(69));
    assert!(text(&out.stderr).contains("max_names"), "{}", text(&out.stderr));
    let out = lock_now(&up, 1, &["a", "b"], &["true"]);
    assert!(out.status.success(), "the node serves on: {}", text(&out.stderr));
}

/// `coterie lock --read`: two commands reading through two nodes run at
/// once and `coterie locks` marks both readers; a writer's try finds the
/// lock busy while they run, and writes once they are done.
#[test]
fn readers_run_side_by_side_and_a_writer_waits_for_them() {
    let up = Up::start(3, "cli-readers");
    let (a, b) = (scratch("cli-reader-a"), scratch("cli-reader-b"));
    let script = "touch \"$D/in\"; while [ ! -e \"$D/go\" ]; do sleep 0.05; done";
    let first = lock_running(up.config(), 1, &["--read", "cfg"], script, &a.0);
    let second = lock_running(up.config(), 2, &["--read", "cfg"], script, &b.0);
    appears(&a.0.join("in"));
    appears(&b.0.join("in"));
    let listed = coterie(&["locks", "--config", up.config()]);
    let listing = text(&listed.stdout);
    assert_eq!(listing.matches("(read), fence").count(), 2, "two readers: {listing}");
    let busy = lock_now(&up, 3, &["--try", "cfg"], &["true"]);
    assert_eq!(busy.status.code(), Some(75), "{}", text(&busy.stderr));
    for dir in [&a, &b] {
        std::fs::write(dir.0.join("go"), "").unwrap();
    }
    assert_eq!(finished(first, &a.0).0, Some(0));
    assert_eq!(finished(second, &b.0).0, Some(0));
    let wrote = lock_now(&up, 3, &["cfg"], &["true"]);
    assert!(wrote.status.success(), "{}", text(&wrote.stderr));
}

/// An application's election: the leader's node dies, the next
/// campaigner leads, observers on other nodes print each change, and the
/// old leader's command got SIGTERM. While an observer's node hangs, the
/// `coterie elect` observer there moves to another node; a stream that
/// stays (an HTTP one) catches up on what it missed when the node resumes.
#[test]
fn elect_hands_leadership_on_when_the_leaders_node_dies() {
    // Five nodes: with n1 killed and n4 hung, n2, n3 and n5 are still a
    // majority, and grant.
    let mut up = cluster(5, "centralized", "elect");
    let dir = scratch("elect");
    let config = up.config().to_string();
    let d = &dir.0;
    let observe = |node: u32, file: &str| {
        Command::new(BIN)
            .args([
                "elect",
                "--config",
                &config,
                "--node",
                &node.to_string(),
                "sched",
                "--observe",
                "--json",
            ])
            .stdout(std::fs::File::create(d.join(file)).unwrap())
            .stderr(std::fs::File::create(d.join(format!("{file}.err"))).unwrap())
            .spawn()
            .unwrap()
    };
    let sse = Command::new("curl")
        .args(["-sN", &format!("{}/v1/elections/sched/observe", up.http(4))])
        .stdout(std::fs::File::create(d.join("sse4")).unwrap())
        .spawn()
        .unwrap();
    let mut observers = [observe(3, "obs3"), observe(4, "obs4"), sse];
    let campaign = |node: u32, value: &str| {
        use std::os::unix::process::CommandExt;
        let script = format!(
            "trap 'touch $D/{value}-term; exit 0' TERM; echo $COTERIE_VALUE > $D/{value}-leads; \
             while true; do sleep 0.05; done"
        );
        Command::new(BIN)
            .process_group(0)
            .args([
                "elect",
                "--config",
                &config,
                "--node",
                &node.to_string(),
                "sched",
                "--value",
                value,
            ])
            .args(["--", "sh", "-c", &script])
            .env("D", d)
            .stderr(std::fs::File::create(d.join(format!("{value}.err"))).unwrap())
            .spawn()
            .unwrap()
    };
    let alpha = campaign(1, "alpha");
    appears(&d.join("alpha-leads"));
    let beta = campaign(2, "beta");
    let leader = coterie(&["leader", "--config", up.config(), "--node", "3", "sched", "--json"]);
    let report: Value = serde_json::from_slice(&leader.stdout).unwrap();
    assert_eq!(report["leader"]["value"], "alpha", "{report}");
    assert_eq!(report["leader"]["node"], 1);
    up.control("kill 1");
    appears(&d.join("beta-leads"));
    appears(&d.join("alpha-term"));
    assert_eq!(finished(alpha, d).0, Some(76), "the old leader lost leadership");
    let leader = coterie(&["leader", "--config", up.config(), "--node", "4", "sched"]);
    assert!(text(&leader.stdout).contains("led by n2 with \"beta\""), "{}", text(&leader.stdout));
    // Every observer saw alpha, then no leader, then beta. The news of
    // beta may come before a node suspects alpha's.
    for file in ["obs3", "obs4"] {
        observed(&d.join(file), Some("alpha"), "beta");
    }
    // n4 hangs; beta resigns and gamma takes over meanwhile. Neither
    // change reaches n4 until it resumes: then its stream names gamma. The
    // CLI observer there finds n4 silent and watches from another node.
    up.control("stop 4");
    let suspects_n4 = |row: &Value| row["alive"].as_array().is_some_and(|a| !a.contains(&4.into()));
    up.wait_for(|rows| rows.iter().filter(|r| r["id"] == 2 || r["id"] == 3).all(suspects_n4));
    unsafe_kill(beta.id(), 15);
    let _ = finished(beta, d);
    let gamma = campaign(3, "gamma");
    appears(&d.join("gamma-leads"));
    let start = Instant::now();
    while !std::fs::read_to_string(d.join("obs4.err")).unwrap().contains("another node") {
        assert!(start.elapsed() < Duration::from_secs(20), "the observer at n4 never moved on");
        std::thread::sleep(Duration::from_millis(50));
    }
    observed(&d.join("obs4"), Some("beta"), "gamma");
    up.control("resume 4");
    // Had n4 not been told, its stream would never name gamma.
    observed(&d.join("sse4"), None, "gamma");
    for o in &mut observers {
        let _ = o.kill();
        let _ = o.wait();
    }
    unsafe_kill(gamma.id(), 15);
    let _ = finished(gamma, d);
}

/// Waits until the observer's `file` (one JSON report a line, or a
/// stream of Server-Sent Events with one in each `data:` line) shows
/// `from`'s leadership (if given) followed by `to`'s, with at most "no
/// leader" between them and nothing after.
fn observed(file: &Path, from: Option<&str>, to: &str) {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let values: Vec<Option<String>> = text
            .lines()
            .filter(|l| l.starts_with('{') || l.starts_with("data: "))
            // A line still being written is read again next time.
            .filter_map(|l| serde_json::from_str::<Value>(l.trim_start_matches("data: ")).ok())
            .map(|r| r["leader"]["value"].as_str().map(str::to_string))
            .collect();
        let after = match from {
            Some(from) => values.iter().rposition(|v| v.as_deref() == Some(from)).map(|i| i + 1),
            None => values.iter().position(|v| v.as_deref() == Some(to)),
        }
        .map(|i| &values[i..]);
        if after.is_some_and(|rest| {
            rest.last().and_then(Option::as_deref) == Some(to)
                && rest.iter().all(|v| v.is_none() || v.as_deref() == Some(to))
        }) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{}: {values:?}\n{text}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The dining philosophers: five clients, each taking its two
/// neighbouring forks of five, never deadlock.
#[test]
fn philosophers_never_deadlock() {
    for mutex in ["ricart-agrawala", "token-ring", "maekawa"] {
        let up = cluster(5, mutex, "philosophers");
        let out = coterie(&[
            "workload",
            "--config",
            up.config(),
            "--no-witness",
            "--names",
            "5",
            "--per-request",
            "2",
            "--ring",
            "--requests",
            "200",
            "--answer-within",
            "20s",
            "--json",
        ]);
        assert!(out.status.success(), "{mutex}: {}", text(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["entries"], 1000, "{mutex}: {report}");
        assert_eq!(report["unanswered"], 0, "{mutex}: {report}");
    }
}
