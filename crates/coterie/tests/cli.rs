//! The `coterie` binary end to end: real processes on loopback.
//!
//! Deadlines bound liveness so that a broken build fails instead of
//! hanging; they are generous and assert nothing about speed.

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

#[test]
fn lock_runs_the_command_with_a_fence_and_returns_its_exit_code() {
    let up = Up::start(3, "lock");
    let out = coterie(&[
        "lock",
        "--config",
        up.config(),
        "--",
        "sh",
        "-c",
        "echo fence=$COTERIE_FENCE; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let fence: u64 = stdout.trim().strip_prefix("fence=").unwrap().parse().unwrap();
    assert!(fence > 0);
}

#[test]
fn concurrent_locks_never_overlap() {
    let up = Up::start(3, "overlap");
    let dir = std::env::temp_dir().join(format!("coterie-overlap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = TempDir(dir.clone());
    let script =
        "date +%s%N > $D/start.$COTERIE_NODE; sleep 0.5; date +%s%N > $D/end.$COTERIE_NODE";
    let children: Vec<Child> = [1, 2]
        .iter()
        .map(|node| {
            Command::new(BIN)
                .args([
                    "lock",
                    "--config",
                    up.config(),
                    "--node",
                    &node.to_string(),
                    "--",
                    "sh",
                    "-c",
                    script,
                ])
                .env("D", &dir)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let read = |name: &str| -> u128 {
        std::fs::read_to_string(dir.join(name)).unwrap().trim().parse().unwrap()
    };
    let (s1, e1, s2, e2) = (read("start.1"), read("end.1"), read("start.2"), read("end.2"));
    assert!(e1 <= s2 || e2 <= s1, "the two critical sections overlapped");
}

#[test]
fn try_on_a_held_lock_and_timeouts_exit_75() {
    let up = Up::start(2, "try");
    let mut holder = Command::new(BIN)
        .args(["lock", "--config", up.config(), "--node", "1", "--", "sleep", "60"])
        // Killed below, it leaves its `sleep` behind, which must not hold
        // the test's output open.
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    up.wait_for(|rows| rows.iter().any(|r| r["cs_state"] == "held"));
    let tried = coterie(&["lock", "--config", up.config(), "--node", "2", "--try", "--", "true"]);
    assert_eq!(tried.status.code(), Some(75));
    assert!(String::from_utf8_lossy(&tried.stderr).contains("busy"));
    let timed = coterie(&[
        "lock",
        "--config",
        up.config(),
        "--node",
        "2",
        "--timeout",
        "100ms",
        "--",
        "true",
    ]);
    assert_eq!(timed.status.code(), Some(75));
    assert!(String::from_utf8_lossy(&timed.stderr).contains("not acquired within 100ms"));
    // The holder dies; its node releases on its behalf and the lock is free.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let after = coterie(&[
        "lock",
        "--config",
        up.config(),
        "--node",
        "2",
        "--timeout",
        "20s",
        "--",
        "true",
    ]);
    assert!(after.status.success(), "{}", String::from_utf8_lossy(&after.stderr));
}

/// The command writes its pid, then sleeps for a minute (exec: the pid is
/// the sleep's).
const SLEEPER: &str = "echo $$ > $D/pid; exec sleep 60";

/// A node that dies (SIGKILL) or hangs (SIGSTOP) under a running command:
/// the command is stopped, and `coterie lock` exits 76 with one line
/// saying what happened.
#[test]
fn lock_stops_the_command_when_its_node_dies_or_hangs_and_exits_76() {
    for (signal, says) in [(9, "closed the session"), (19, "did not answer")] {
        let up = Up::start(3, &format!("lost-{signal}"));
        let dir = scratch(&format!("lost-{signal}"));
        let lock = lock_running(up.config(), 2, &[], SLEEPER, &dir.0);
        appears(&dir.0.join("pid"));
        let pid: u32 = std::fs::read_to_string(dir.0.join("pid")).unwrap().trim().parse().unwrap();
        let node = up.node_pid(2);
        unsafe_kill(node, signal);
        let (code, stderr) = finished(lock, &dir.0);
        assert_eq!(code, Some(76), "{stderr}");
        assert!(stderr.contains("lost the lock") && stderr.contains(says), "{stderr}");
        assert!(stderr.contains("node 2"), "{stderr}");
        assert!(gone(pid), "the command still runs after its lock was lost");
        unsafe_kill(node, 18); // SIGCONT, so that up can stop it
    }
}

/// `--no-kill`: the command runs to its end, and the loss is still
/// reported, with exit 76.
#[test]
fn lock_with_no_kill_lets_the_command_finish_and_still_exits_76() {
    let up = Up::start(3, "no-kill");
    let dir = scratch("no-kill");
    let script = "touch $D/started; sleep 1; touch $D/finished";
    let lock = lock_running(up.config(), 2, &["--no-kill"], script, &dir.0);
    appears(&dir.0.join("started"));
    unsafe_kill(up.node_pid(2), 9);
    let (code, stderr) = finished(lock, &dir.0);
    assert_eq!(code, Some(76), "{stderr}");
    assert!(stderr.contains("--no-kill"), "{stderr}");
    assert!(dir.0.join("finished").exists(), "--no-kill stopped the command");
}

/// A signal to `coterie lock` goes on to the command; its status comes
/// back, and the lock is released.
#[test]
fn lock_passes_signals_on_to_the_command() {
    let up = Up::start(2, "signals");
    let dir = scratch("signals");
    let script =
        "trap 'touch $D/got-term; kill $!; exit 3' TERM; touch $D/started; sleep 60 & wait";
    let lock = lock_running(up.config(), 1, &[], script, &dir.0);
    appears(&dir.0.join("started"));
    unsafe_kill(lock.id(), 15);
    let (code, stderr) = finished(lock, &dir.0);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(dir.0.join("got-term").exists());
    let next = coterie(&["lock", "--config", up.config(), "--try", "--", "true"]);
    assert!(next.status.success(), "{}", String::from_utf8_lossy(&next.stderr));
}

/// `coterie revoke` asks; each holder decides. Under ricart-agrawala (the
/// request travels as the application's, whatever the algorithm), a
/// holder at node 2 with `--on-revoke USR1` gets SIGUSR1 with the reason
/// reported, and its command ends by itself; one without the flag is told
/// nothing and keeps the lock (`coterie locks` shows it was asked).
/// Revoking a free lock exits 1, a bad name 2, a bad signal is refused.
#[test]
fn a_revoke_reaches_a_cli_holder_as_its_chosen_signal_and_forces_nothing() {
    let up = Up::start_with(3, "revoke", |cfg| {
        cfg.cluster.mutex = coterie_core::registry::mutex("ricart-agrawala").unwrap();
    });
    let dir = scratch("revoke");
    let script = "trap 'touch $D/asked; exit 0' USR1; touch $D/started; \
                  while :; do sleep 0.05; done";
    let lock = lock_running(up.config(), 2, &["--on-revoke", "usr1", "job"], script, &dir.0);
    appears(&dir.0.join("started"));
    let asked = coterie(&[
        "revoke",
        "--config",
        up.config(),
        "--node",
        "3",
        "job",
        "--reason",
        "deploy",
        "--json",
    ]);
    assert!(asked.status.success(), "{}", String::from_utf8_lossy(&asked.stderr));
    let report: Value = serde_json::from_slice(&asked.stdout).unwrap();
    assert_eq!(report, serde_json::json!({ "name": "job", "holders": 1, "unreachable": [] }));
    let (code, stderr) = finished(lock, &dir.0);
    assert_eq!(code, Some(0), "the command chose to end: {stderr}");
    assert!(dir.0.join("asked").exists(), "no SIGUSR1 reached the command: {stderr}");
    assert!(stderr.contains("asked to let go of \"job\" (deploy); sent SIGUSR1"), "{stderr}");

    let free = coterie(&["revoke", "--config", up.config(), "job"]);
    let err = String::from_utf8_lossy(&free.stderr);
    assert_eq!(free.status.code(), Some(1), "{err}");
    assert!(err.contains("free"), "{err}");
    let bad = coterie(&["revoke", "--config", up.config(), ""]);
    assert_eq!(bad.status.code(), Some(2));
    let signal = coterie(&["lock", "--config", up.config(), "--on-revoke", "NOPE", "--", "true"]);
    assert_eq!(signal.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&signal.stderr).contains("USR1"));

    // Without --on-revoke the command is not told, and keeps the lock.
    let quiet = scratch("revoke-quiet");
    let script = "touch $D/started; sleep 2; touch $D/finished";
    let lock = lock_running(up.config(), 1, &["job"], script, &quiet.0);
    appears(&quiet.0.join("started"));
    let asked = coterie(&["revoke", "--config", up.config(), "--node", "2", "job"]);
    assert!(asked.status.success(), "{}", String::from_utf8_lossy(&asked.stderr));
    let listed = coterie(&["locks", "--config", up.config()]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("asked to let go"), "{listed}");
    let (code, stderr) = finished(lock, &quiet.0);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(quiet.0.join("finished").exists(), "the command ran to its end");
    assert!(stderr.contains("not told"), "{stderr}");
}

/// With a lock delay, a holder lost with its node (SIGKILL): the next
/// grant, at another node, comes no sooner than the delay after the loss.
#[test]
fn the_lock_delay_holds_grants_back_after_a_holder_dies_with_its_node() {
    let up = Up::start_with(3, "delay-node", |c| c.cluster.lock_delay = Duration::from_secs(1));
    let dir = scratch("delay-node");
    let lock = lock_running(up.config(), 1, &[], SLEEPER, &dir.0);
    appears(&dir.0.join("pid"));
    unsafe_kill(up.node_pid(1), 9);
    let killed = Instant::now();
    let next = coterie(&["lock", "--config", up.config(), "--node", "2", "--", "true"]);
    assert!(next.status.success(), "{}", String::from_utf8_lossy(&next.stderr));
    assert!(killed.elapsed() >= Duration::from_secs(1), "granted within the lock delay");
    assert_eq!(finished(lock, &dir.0).0, Some(76));
}

/// A client that hangs while holding (its process stopped) stops pinging:
/// its node takes the session for lost and releases, and with a lock
/// delay configured, only once the delay has passed.
#[test]
fn a_hung_holder_loses_the_lock_after_the_lock_delay() {
    let up = Up::start_with(2, "hung-holder", |c| c.cluster.lock_delay = Duration::from_secs(1));
    let dir = scratch("hung-holder");
    let lock = lock_running(up.config(), 1, &[], SLEEPER, &dir.0);
    appears(&dir.0.join("pid"));
    std::thread::sleep(Duration::from_millis(200)); // a few pings
    unsafe_kill(lock.id(), 19);
    let stopped = Instant::now();
    let next = coterie(&["lock", "--config", up.config(), "--node", "2", "--", "true"]);
    assert!(next.status.success(), "{}", String::from_utf8_lossy(&next.stderr));
    // Lost after a failure timeout of silence (250 ms), then held for the
    // lock delay: never sooner.
    assert!(stopped.elapsed() >= Duration::from_secs(1), "granted within the lock delay");
    unsafe_kill(lock.id(), 9);
    let _ = finished(lock, &dir.0);
    let pid: u32 = std::fs::read_to_string(dir.0.join("pid")).unwrap().trim().parse().unwrap();
    unsafe_kill(pid, 9);
}

/// The blocking Rust client on real nodes: while its program works under
/// the lock and calls nothing, its keeper thread keeps the lease (another
/// session finds the lock busy long after a failure timeout); when its
/// node dies or hangs, the session is found lost and every later call
/// says so.
#[test]
fn the_blocking_client_keeps_its_lease_while_it_works_and_learns_its_node_is_gone() {
    use coterie_client::{blocking, ClientError, LockRequest, Loss, Outcome};
    let up = Up::start(3, "blocking");
    let nodes = up.configuration().nodes;
    let jobs = LockRequest::new(["jobs"]);
    let until_lost = |client: &blocking::Client| {
        let start = Instant::now();
        loop {
            if let Some(loss) = client.lost() {
                return loss;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "the session was never found lost");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let credentials = up.credentials();
    let mut a = blocking::Client::connect_with(&nodes[0].client, credentials.as_ref()).unwrap();
    let mut b = blocking::Client::connect_with(&nodes[1].client, credentials.as_ref()).unwrap();
    let Outcome::Granted(first) = a.request(&jobs).unwrap() else { panic!("not granted") };
    // Eight failure timeouts of work without a call.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(a.lost(), None);
    assert_eq!(b.request(&jobs.clone().try_lock(true)).unwrap(), Outcome::Busy);
    let Outcome::Granted(again) = a.release_and_request(&jobs).unwrap() else { panic!() };
    assert!(again.fence() > first.fence(), "{again:?} after {first:?}");
    a.release().unwrap();
    assert!(matches!(b.request(&jobs).unwrap(), Outcome::Granted(_)));

    // B's node dies under it: the session is closed.
    unsafe_kill(up.node_pid(2), 9);
    assert_eq!(until_lost(&b), Loss::Closed);
    assert!(matches!(b.release(), Err(ClientError::Lost(Loss::Closed))));
    // A's node hangs: the session falls silent.
    let hung = up.node_pid(1);
    unsafe_kill(hung, 19);
    let loss = until_lost(&a);
    unsafe_kill(hung, 18);
    assert!(matches!(loss, Loss::Silent(_)), "{loss:?}");
    assert!(matches!(a.request(&jobs), Err(ClientError::Lost(Loss::Silent(_)))));
}

/// A term out of fences, on real nodes: with `fence_room = 3` every third
/// grant of a lock spends its coordinator's term (or its token's
/// generation), and the next grant waits for a new one. Fences rise through
/// it all, their era part moving on every third grant, under every
/// election; the cluster agrees at the end.
#[test]
fn a_spent_term_is_renewed_on_real_nodes_with_fences_rising() {
    use coterie_client::{blocking, LockRequest, Outcome};
    let runs = [
        ("centralized", "bully"),
        ("centralized", "ring"),
        ("centralized", "garcia-molina"),
        ("token-ring", "ring"),
    ];
    for (mutex, election) in runs {
        let env = [("COTERIE_MUTEX", mutex), ("COTERIE_ELECTION", election)];
        let name = format!("renew-{mutex}-{election}");
        let up = Up::start_in(3, &name, |c| c.cluster.fence_room = Some(3), &env);
        let nodes = up.configuration().nodes;
        let jobs = LockRequest::new(["jobs"]);
        let mut fences = Vec::new();
        // One client away from the coordinator, one at it, in turns.
        for addr in [&nodes[0].client, &nodes[2].client] {
            let mut client =
                blocking::Client::connect_with(addr, up.credentials().as_ref()).unwrap();
            for i in 0..6 {
                let outcome =
                    if i == 0 { client.request(&jobs) } else { client.release_and_request(&jobs) };
                let Ok(Outcome::Granted(grant)) = outcome else { panic!("{name}: {outcome:?}") };
                fences.push(grant.fence());
            }
            client.release().unwrap();
        }
        assert!(fences.windows(2).all(|w| w[0] < w[1]), "{name}: fences {fences:?}");
        let eras: std::collections::BTreeSet<u64> = fences.iter().map(|f| f >> 24).collect();
        assert!(eras.len() >= 4, "{name}: {} eras for 12 grants: {fences:?}", eras.len());
        up.wait_for(|rows| agreed(rows).is_some_and(|(c, n)| c == 3 && n == 3));
    }
}

/// The blocking client on a cluster with a secret: with the secret it is
/// let in; with a wrong one the handshake fails and says so; with none
/// the node tells it that it must authenticate.
#[test]
fn the_blocking_client_proves_the_secret_or_is_told_why_not() {
    if plain_only("the_blocking_client_proves_the_secret_or_is_told_why_not") {
        return;
    }
    use coterie_client::auth::Secret;
    use coterie_client::{blocking, ClientError, Credentials, LockRequest, Outcome};
    let dir = scratch("blocking-secret");
    let up = Up::start_with(2, "blocking-secret", api_security(&dir.0, "token\n"));
    let addr = &up.configuration().nodes[0].client;
    let credentials = |secret: &str| {
        Credentials::with_secret(Secret::from_file_bytes(secret.as_bytes()).unwrap(), "")
    };
    let jobs = LockRequest::new(["jobs"]);
    let right = credentials("a shared secret for the tests");
    let mut client = blocking::Client::connect_with(addr, Some(&right)).unwrap();
    assert!(matches!(client.request(&jobs).unwrap(), Outcome::Granted(_)));
    let wrong = credentials("another secret");
    let err = blocking::Client::connect_with(addr, Some(&wrong)).err().expect("let in");
    assert!(matches!(err, ClientError::Auth { .. }), "{err}");
    let mut open = blocking::Client::connect(addr).unwrap();
    match open.request(&jobs) {
        Err(ClientError::Refused(why)) => assert!(why.contains("authentication"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// A client stopped (SIGSTOP) while it *waits* for the lock must not be
/// handed it: before waiting sessions were leases, the grant went to the
/// frozen client's open connection and the lock was held for ever. Now
/// the frozen waiter falls silent, loses its place within the failure
/// timeout, and a third client gets the lock. Every algorithm, since the
/// rule lives in the node, not in any of them.
#[test]
fn a_client_frozen_while_waiting_is_never_granted_the_lock_for_good() {
    for mutex in mutexes() {
        let env = [("COTERIE_MUTEX", mutex)];
        let up = Up::start_in(3, &format!("frozen-waiter-{mutex}"), |_| {}, &env);
        let dir = scratch(&format!("frozen-waiter-{mutex}"));
        let holder = "touch $D/a-holds; while [ ! -e $D/a-may-go ]; do sleep 0.01; done";
        let a = lock_running(up.config(), 1, &[], holder, &dir.0);
        appears(&dir.0.join("a-holds"));
        let b = lock_running(up.config(), 2, &[], "touch $D/b-held", &dir.0);
        up.wait_for(|rows| rows.iter().any(|r| r["id"] == 2 && r["cs_state"] == "wanting"));
        unsafe_kill(b.id(), 19); // SIGSTOP: B waits, and can no longer answer
        std::fs::write(dir.0.join("a-may-go"), "").unwrap();
        assert_eq!(finished(a, &dir.0).0, Some(0), "{mutex}: A ran to its end");
        let c = coterie(&[
            "lock",
            "--config",
            up.config(),
            "--node",
            "3",
            "--timeout",
            "10s",
            "--",
            "true",
        ]);
        assert!(
            c.status.success(),
            "{mutex}: the third client never got the lock: {}",
            String::from_utf8_lossy(&c.stderr)
        );
        assert!(!dir.0.join("b-held").exists(), "{mutex}: the frozen client ran its command");
        unsafe_kill(b.id(), 9);
        let _ = finished(b, &dir.0);
    }
}

#[test]
fn killed_coordinator_is_replaced_by_the_next_highest() {
    let up = Up::start(4, "kill");
    unsafe_kill(up.node_pid(4), 9);
    let rows = up.wait_for(|rows| agreed(rows).is_some_and(|(c, n)| c == 3 && n == 3));
    let dead = rows.iter().find(|r| r["id"] == 4).unwrap();
    assert_eq!(dead["reachable"], false, "the killed node is reported, not skipped");
    assert!(dead["error"].as_str().is_some());
}

#[test]
fn watch_streams_the_suspicion_and_the_election_that_follow_a_kill() {
    let up = Up::start(3, "watch");
    let mut watch = Command::new(BIN)
        .args(["watch", "--config", up.config(), "--grants", "--json", "--duration", "20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(serde_json::from_str(&line).expect("a JSON object per line"));
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |what: &str, pred: &dyn Fn(&Value) -> bool| {
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until {
            if seen.iter().any(pred) {
                return;
            }
            if let Ok(v) = rx.recv_timeout(Duration::from_millis(100)) {
                seen.push(v);
            }
        }
        panic!("no {what} in {seen:#?}");
    };
    // Every node's stream opens with where it stands.
    for id in 1..=3 {
        wait_for("snapshot", &|v| v["node"] == id && !v["event"]["Snapshot"].is_null());
    }
    let lock = coterie(&["lock", "--config", up.config(), "--node", "1", "--", "true"]);
    assert!(lock.status.success());
    wait_for("grant", &|v| v["node"] == 1 && !v["event"]["Granted"].is_null());
    wait_for("release", &|v| v["node"] == 1 && !v["event"]["Released"].is_null());
    unsafe_kill(up.node_pid(3), 9);
    wait_for("lost stream", &|v| v["node"] == 3 && v["event"] == "Lost");
    for id in [1, 2] {
        wait_for("suspicion", &|v| v["node"] == id && v["event"]["PeerDown"]["peer"] == 3);
        wait_for("new coordinator", &|v| {
            v["node"] == id && v["event"]["Coordinator"]["leader"] == 2
        });
    }
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn broken_config_gets_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("coterie-badcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = TempDir(dir.clone());
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[cluster]\nname = \"x\"\nmutex = \"paxos\"\nelection = \"bully\"\n[[node]]\nid=1\npeer=\"a:1\"\nclient=\"a:2\"\n").unwrap();
    let out = coterie(&["status", "--config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown mutex algorithm \"paxos\""), "{err}");
    let missing = coterie(&["status", "--config", "/nonexistent/cluster.toml"]);
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("cannot read /nonexistent/cluster.toml"), "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "the reason said once: {err}");
}

/// `coterie init` writes a file `coterie up` runs (here three nodes of
/// ricart-agrawala on free ports, with the API), and refuses what the
/// configuration would refuse, saying why.
#[test]
fn init_writes_a_cluster_file_that_up_runs() {
    let dir = scratch("init");
    let file = dir.0.join("three.toml");
    let out = coterie(&[
        "init",
        "--nodes",
        "3",
        "--mutex",
        "ricart-agrawala",
        "--free-ports",
        "--http",
        "--heartbeat",
        "50ms",
        "--failure-timeout",
        "250ms",
        "--out",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cfg = coterie_node::Config::load(&file).unwrap();
    assert_eq!((cfg.nodes.len(), cfg.cluster.mutex.name), (3, "ricart-agrawala"));
    let mut up = Command::new(BIN)
        .args(["up", "--config", file.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let began = Instant::now();
    let lock = loop {
        let lock = coterie(&["lock", "--config", file.to_str().unwrap(), "--", "echo", "in"]);
        if lock.status.success() || began.elapsed() > Duration::from_secs(10) {
            break lock;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    unsafe_kill(up.id(), 15);
    let _ = up.wait();
    assert_eq!(
        String::from_utf8_lossy(&lock.stdout),
        "in\n",
        "{}",
        String::from_utf8_lossy(&lock.stderr)
    );
    // The file written is kept: init again refuses, saying how to
    // overwrite it, and --force does.
    let written = std::fs::read(&file).unwrap();
    let path = file.to_str().unwrap();
    let again = coterie(&["init", "--nodes", "5", "--out", path]);
    assert_eq!(again.status.code(), Some(2));
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("exists") && said.contains("--force"), "{said}");
    assert_eq!(std::fs::read(&file).unwrap(), written, "the file was changed");
    let forced = coterie(&["init", "--nodes", "5", "--force", "--out", path]);
    assert!(forced.status.success(), "{}", String::from_utf8_lossy(&forced.stderr));
    assert_eq!(coterie_node::Config::load(&file).unwrap().nodes.len(), 5);
    let refused = coterie(&["init", "--nodes", "3", "--mutex", "maekawa", "--count", "2"]);
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("maekawa admits one holder at a time"), "{said}");
    // An API beyond loopback needs a secret and tokens, or api_open: the
    // rule is checked on the file as written, after --set.
    let exposed = ["init", "--nodes", "2", "--http", "--host", "0.0.0.0", "--base-port", "7600"];
    let refused = coterie(&exposed);
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("served on loopback only"), "{said}");
    let open = coterie(&[&exposed[..], &["--set", "security.api_open=true"]].concat());
    assert!(open.status.success(), "{}", String::from_utf8_lossy(&open.stderr));
    // Two nodes in majority mode (the default): said plainly, once.
    let said = String::from_utf8_lossy(&open.stderr);
    assert!(said.contains("one failure stops the cluster"), "{said}");
    let three = coterie(&["init", "--nodes", "3"]);
    assert!(!String::from_utf8_lossy(&three.stderr).contains("one failure"));
}

/// `demo --base-port P` runs its nodes on the ports asked for (laid out
/// as `init --base-port` lays them), says them, and refuses clearly when
/// one is taken.
#[test]
fn demo_runs_on_the_ports_it_is_given() {
    // Seven ports in a row, free now: three nodes' two each, the witness's.
    let base = (20_000..60_000u16)
        .step_by(97)
        .map(|p| p + (std::process::id() % 89) as u16)
        .find(|&p| (p..p + 7).all(|q| std::net::TcpListener::bind(("127.0.0.1", q)).is_ok()))
        .expect("seven free ports in a row");
    let port = base.to_string();
    let out = coterie(&["demo", "--nodes", "3", "--duration", "2s", "--base-port", &port]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    for (id, client) in [(1, base + 1), (3, base + 5)] {
        assert!(said.contains(&format!("node {id} client 127.0.0.1:{client}")), "{said}");
    }
    assert!(said.contains(&format!("witness 127.0.0.1:{}", base + 6)), "{said}");
    let _taken = std::net::TcpListener::bind(("127.0.0.1", base + 6)).unwrap();
    let out = coterie(&["demo", "--nodes", "3", "--duration", "2s", "--base-port", &port]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(&format!("port 127.0.0.1:{} is taken", base + 6)), "{said}");
}

#[test]
fn demo_runs_kills_the_coordinator_and_reports_no_violation() {
    let out = coterie(&["demo", "--duration", "3s", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["entries"].as_u64().unwrap() > 0);
    assert_eq!(report["violations"], 0);
    assert_eq!(report["stale_fences"], 0);
    let elections = report["elections"].as_array().unwrap();
    assert_eq!(elections.len(), 3, "start, kill, restart");
    assert_eq!(elections[1]["coordinator"], 4, "the next highest takes over");
    assert_eq!(elections[2]["coordinator"], 5, "the restarted highest bullies back");
    assert!(elections[1]["epoch"].as_u64() > elections[0]["epoch"].as_u64());
    let logs = Path::new(report["logs"].as_str().unwrap());
    assert!(logs.join("node5.log").exists(), "the demo keeps each node's log");
    // Two nodes: majority mode says why it cannot show a failover;
    // detector mode shows one.
    let two = coterie(&["demo", "--nodes", "2", "--duration", "2s", "--json"]);
    assert_eq!(two.status.code(), Some(2), "refused as a usage error");
    let said = String::from_utf8_lossy(&two.stderr);
    assert!(said.contains("a majority of 2 is both"), "{said}");
    let detector =
        ["demo", "--nodes", "2", "--partition-mode", "detector", "--duration", "2s", "--json"];
    let out = coterie(&detector);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["elections"][1]["coordinator"], 1, "n1 takes over from n2");
}

#[test]
fn demo_succeeds_for_every_mutual_exclusion_algorithm() {
    for m in coterie_core::registry::MUTEXES {
        let out = coterie(&["demo", "--mutex", m.name, "--duration", "2s", "--json"]);
        assert!(out.status.success(), "{}: {}", m.name, String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(report["entries"].as_u64().unwrap() > 0, "{}: no entries", m.name);
        assert_eq!(report["violations"], 0, "{}", m.name);
    }
    for m in coterie_core::registry::MUTEXES.iter().filter(|m| m.claims.counting) {
        let out =
            coterie(&["demo", "--mutex", m.name, "--count", "2", "--duration", "2s", "--json"]);
        assert!(
            out.status.success(),
            "{} --count 2: {}",
            m.name,
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["violations"], 0, "{} --count 2", m.name);
    }
}

#[test]
fn bench_reports_every_algorithm_against_theory() {
    let out = coterie(&["bench", "--nodes", "3,5", "--seeds", "2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 2 * coterie_core::registry::MUTEXES.len());
    for row in &rows {
        for field in [
            "mutex",
            "nodes",
            "light_messages_per_entry",
            "heavy_messages_per_entry",
            "burst_messages_per_entry",
            "sync_delay",
            "out_of_order",
        ] {
            assert!(!row[field].is_null(), "{field} missing in {row}");
        }
        let n = row["nodes"].as_f64().unwrap();
        if row["mutex"] == "ricart-agrawala" {
            assert_eq!(row["light_messages_per_entry"].as_f64(), Some(2.0 * (n - 1.0)));
            assert_eq!(row["burst_messages_per_entry"].as_f64(), Some(2.0 * (n - 1.0)));
        }
        if row["mutex"] == "lamport" {
            assert_eq!(row["light_messages_per_entry"].as_f64(), Some(3.0 * (n - 1.0)));
        }
    }
}

#[test]
fn bench_real_runs_real_processes_and_writes_a_plot() {
    let svg = std::env::temp_dir().join(format!("coterie-bench-{}.svg", std::process::id()));
    let out = coterie(&[
        "bench",
        "--mutex",
        "token-ring,maekawa",
        "--nodes",
        "3",
        "--seeds",
        "1",
        "--real",
        "--duration",
        "500ms",
        "--svg",
        svg.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        let real = &row["real"];
        assert!(real["entries"].as_u64().unwrap() > 0, "no entry on the real cluster: {row}");
        assert_eq!(real["violations"].as_u64(), Some(0), "{row}");
        assert!(
            real["latency_p99_ms"].as_f64().unwrap() >= real["latency_p50_ms"].as_f64().unwrap()
        );
    }
    let plot = std::fs::read_to_string(&svg).unwrap();
    // Three panels: messages per entry, throughput, and latency (p50 and
    // p99): a line per algorithm in each, two in the last.
    assert_eq!(plot.matches("<polyline").count(), 2 + 2 + 4, "lines per algorithm and panel");
    assert!(plot.contains("throughput on real processes") && plot.contains("p99"));
    assert!(plot.contains("token-ring") && plot.contains("maekawa"));
    let _ = std::fs::remove_file(svg);
}

/// Each reachable node's (id, coordinator).
fn views(rows: &[Value]) -> Vec<(u64, Option<u64>)> {
    rows.iter()
        .filter(|r| r["reachable"] == true)
        .map(|r| (r["id"].as_u64().unwrap(), r["coordinator"].as_u64()))
        .collect()
}

#[test]
fn fault_partitions_a_node_and_heal_rejoins_it() {
    let up = Up::start(3, "fault");
    let fault = |node: &str, args: &[&str]| {
        let mut all = vec!["fault", "--config", up.config(), "--node", node, "--json"];
        all.extend_from_slice(args);
        let out = coterie(&all);
        let (stdout, stderr) =
            (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{stderr}{stdout}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let shown = fault("3", &["partition"]);
    assert_eq!(shown[0]["faults"]["partitioned"], serde_json::json!([1, 2]));
    // Split brain, in plain sight: the majority elects n2, and n3, hearing
    // nobody, keeps itself.
    up.wait_for(|rows| views(rows) == vec![(1, Some(2)), (2, Some(2)), (3, Some(3))]);
    let healed = fault("3", &["heal"]);
    assert_eq!(healed[0]["faults"]["partitioned"], serde_json::json!([]));
    up.wait_for(|rows| agreed(rows).is_some_and(|(c, n)| c == 3 && n == 3));

    // A paused node still answers `fault`, and its peers see it go.
    let paused = fault("1", &["pause"]);
    assert_eq!(paused[0]["faults"]["paused"], true);
    up.wait_for(|rows| {
        rows.iter()
            .filter(|r| r["reachable"] == true && r["id"] != 1)
            .all(|r| r["alive"].as_array().is_some_and(|a| !a.contains(&Value::from(1))))
    });
    fault("1", &["resume"]);
    up.wait_for(|rows| agreed(rows).is_some_and(|(c, n)| c == 3 && n == 3));
    // Nonsense is refused, and changes nothing.
    let out = coterie(&["fault", "--config", up.config(), "--node", "2", "partition", "9"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a peer"));
}

/// A node whose configuration does not allow faults refuses them, naming
/// the key on stderr, and keeps serving; `show` still answers.
#[test]
fn fault_is_refused_unless_the_configuration_allows_it() {
    let up = Up::start_with(3, "no-faults", |c| c.security.allow_faults = false);
    for command in ["partition", "pause", "reset", "heal"] {
        let out = coterie(&["fault", "--config", up.config(), "--node", "2", command]);
        // The refusal is an error: on stderr, and nothing on stdout.
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command} was taken: {said}");
        assert!(said.contains("allow_faults = true"), "{command}: {said}");
        assert!(out.stdout.is_empty(), "{command}: {}", String::from_utf8_lossy(&out.stdout));
    }
    let shown = coterie(&["fault", "--config", up.config(), "--node", "2", "show"]);
    assert!(shown.status.success(), "{}", String::from_utf8_lossy(&shown.stderr));
    let lock = coterie(&["lock", "--config", up.config(), "--node", "2", "--", "true"]);
    assert!(lock.status.success(), "{}", String::from_utf8_lossy(&lock.stderr));
}

/// Nodes started one by one with `coterie node`, so that each can have an
/// environment of its own. Killed when dropped.
struct Nodes(Vec<Child>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// With a secret configured, only those who know it get in: a node with
/// another secret is never counted up by the others, a client with the
/// wrong secret is refused at the handshake and one with none is told the
/// node requires one (both exit 69 from `lock`), and the right secret
/// works for every command.
#[test]
fn with_a_secret_only_those_who_know_it_get_in() {
    if plain_only("with_a_secret_only_those_who_know_it_get_in") {
        return;
    }
    let dir = scratch("secret");
    std::fs::write(dir.0.join("secret"), "right secret\n").unwrap();
    std::fs::write(dir.0.join("wrong"), "wrong secret\n").unwrap();
    let mut cfg = test_config(3);
    cfg.cluster.name = "sec".into();
    cfg.security = Default::default();
    cfg.security.secret_file = Some("secret".into());
    cfg.nodes.iter_mut().for_each(|node| node.http = None);
    let config = dir.0.join("cluster.toml");
    std::fs::write(&config, cfg.to_toml()).unwrap();
    let config = config.to_str().unwrap();
    let wrong = dir.0.join("wrong");
    let nodes = Nodes(
        (1..=3)
            .map(|id| {
                let log = std::fs::File::create(dir.0.join(format!("node{id}.log"))).unwrap();
                let mut node = Command::new(BIN);
                node.args(["node", "--config", config, "--id", &id.to_string()]).stderr(log);
                if id == 3 {
                    node.env("COTERIE_SECRET_FILE", &wrong); // an impostor
                }
                node.spawn().unwrap()
            })
            .collect(),
    );
    let status = |env: Option<&Path>| {
        let mut c = Command::new(BIN);
        c.args(["status", "--config", config, "--json"]);
        if let Some(secret) = env {
            c.env("COTERIE_SECRET_FILE", secret);
        }
        let out = c.output().unwrap();
        serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap_or_default()
    };
    let alive = |rows: &[Value], id: u64| -> Option<Vec<u64>> {
        let row = rows.iter().find(|r| r["id"] == id)?;
        row["alive"].as_array().map(|a| a.iter().filter_map(Value::as_u64).collect())
    };
    let start = Instant::now();
    loop {
        let rows = status(None);
        if alive(&rows, 1) == Some(vec![1, 2]) && alive(&rows, 2) == Some(vec![1, 2]) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "n1 and n2 never met: {rows:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Give the impostor time to be counted, were it to be.
    std::thread::sleep(Duration::from_secs(1));
    let rows = status(None);
    assert_eq!(alive(&rows, 1), Some(vec![1, 2]), "{rows:#?}");
    assert_eq!(alive(&rows, 2), Some(vec![1, 2]), "{rows:#?}");
    let n3 = rows.iter().find(|r| r["id"] == 3).unwrap();
    assert_eq!(n3["reachable"], false, "n3 does not know our secret: {n3}");
    // n1 dials n3 (the lower id of a pair dials) and finds its proof
    // wrong; n3 hears that it was turned away. Whether n3's call reaches
    // n1 first depends on which of them started listening first.
    let log = std::fs::read_to_string(dir.0.join("node1.log")).unwrap();
    let refused = |line: &str| line.contains("peer=3") && line.contains("the secrets differ");
    assert!(log.lines().any(refused), "{log}");
    assert!(!log.contains("no secret configured"), "{log}");
    let log = std::fs::read_to_string(dir.0.join("node3.log")).unwrap();
    assert!(log.contains("failed authentication"), "{log}");

    let lock = |node: &str, env: Option<&Path>, addr: Option<&str>| {
        let mut c = Command::new(BIN);
        match addr {
            Some(addr) => c.args(["lock", "--addr", addr]),
            None => c.args(["lock", "--config", config, "--node", node]),
        };
        c.args(["--timeout", "10s", "--", "true"]);
        if let Some(secret) = env {
            c.env("COTERIE_SECRET_FILE", secret);
        }
        c.output().unwrap()
    };
    let right = lock("1", None, None);
    assert!(right.status.success(), "{}", String::from_utf8_lossy(&right.stderr));
    let refused = lock("1", Some(&wrong), None);
    assert_eq!(refused.status.code(), Some(69));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("authentication") && said.contains("secrets differ"), "{said}");
    let n1 = cfg.nodes[0].client.clone();
    let none = lock("1", None, Some(&n1));
    assert_eq!(none.status.code(), Some(69));
    let said = String::from_utf8_lossy(&none.stderr);
    assert!(said.contains("requires authentication"), "{said}");
    // `--addr` with the secret from the environment works too.
    let secret = dir.0.join("secret");
    let by_addr = lock("1", Some(&secret), Some(&n1));
    assert!(by_addr.status.success(), "{}", String::from_utf8_lossy(&by_addr.stderr));
    drop(nodes);
}

/// `COTERIE_CONFIG` stands for `--config`, and `COTERIE_MUTEX` overrides
/// the file's algorithm for every node `up` starts and every command that
/// reads the file.
#[test]
fn the_environment_names_the_configuration_and_overrides_its_algorithm() {
    // `up` and its nodes inherit the override.
    let env = [("COTERIE_MUTEX", "ricart-agrawala")];
    let up = Up::start_in(3, "env", |_| {}, &env);
    let out = Command::new(BIN)
        .args(["status", "--json"])
        .env("COTERIE_CONFIG", up.config())
        .output()
        .unwrap();
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 3, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(rows.iter().all(|r| r["mutex"] == "ricart-agrawala"), "{rows:#?}");
}

#[test]
fn up_kills_and_restarts_its_nodes_on_command() {
    let mut up = Up::start(3, "control");
    up.control("kill 3");
    let rows = up.wait_for(|rows| agreed(rows).is_some_and(|(c, n)| c == 2 && n == 2));
    assert_eq!(rows.iter().find(|r| r["id"] == 3).unwrap()["reachable"], false);
    up.control("start 3");
    up.wait_for(|rows| agreed(rows).is_some_and(|(c, n)| c == 3 && n == 3));
}

/// `[limits]`: a connection beyond `max_clients` and a request beyond
/// `max_pending` are refused with a message naming the key (exit 69 for
/// `lock`), and connections that say nothing are dropped after the
/// first-request timeout, giving their slots back.
#[test]
fn a_node_refuses_clients_beyond_its_limits_and_drops_silent_ones() {
    if plain_only("a_node_refuses_clients_beyond_its_limits_and_drops_silent_ones") {
        return;
    }
    let up = Up::start_with(2, "limits", |c| {
        c.limits.max_clients = 3;
        c.limits.max_pending = 1;
    });
    let addr = up.configuration().nodes[0].client.clone();

    // Three connections that say nothing take every client slot of node 1.
    let idle: Vec<std::net::TcpStream> =
        (0..3).map(|_| std::net::TcpStream::connect(&addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let refused = coterie(&["lock", "--config", up.config(), "--node", "1", "--", "true"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("max_clients"), "{stderr}");
    // The node closes them, having heard nothing (5 s).
    for mut conn in idle {
        use std::io::Read;
        conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(conn.read(&mut byte).unwrap(), 0, "a silent connection was kept");
    }

    // One holder and one waiter: the next request is one too many.
    let held = scratch("limits-held");
    let holder = lock_running(up.config(), 1, &[], SLEEPER, &held.0);
    appears(&held.0.join("pid"));
    let waited = scratch("limits-waited");
    let waiter = lock_running(up.config(), 1, &[], "touch $D/ran", &waited.0);
    std::thread::sleep(Duration::from_millis(500)); // it queues
    let third = coterie(&["lock", "--config", up.config(), "--node", "1", "--", "true"]);
    let stderr = String::from_utf8_lossy(&third.stderr);
    assert_eq!(third.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("max_pending"), "{stderr}");

    // The holder's command ends; the waiter gets its turn.
    let pid: u32 = std::fs::read_to_string(held.0.join("pid")).unwrap().trim().parse().unwrap();
    unsafe_kill(pid, 15);
    let _ = finished(holder, &held.0);
    let (code, stderr) = finished(waiter, &waited.0);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(waited.0.join("ran").exists());
}

/// A failing seed's replay line offers its diagram, and the diagram holds
/// exactly the messages its trace lists, with the violation marked.
#[test]
fn a_failing_seed_is_drawn_with_exactly_the_messages_of_its_trace() {
    // centralized trusts timeouts in detector mode: a partition makes a
    // second coordinator.
    let sweep = coterie(&[
        "sim",
        "--mutex",
        "centralized",
        "--partitions",
        "1",
        "--seeds",
        "5",
        "--partition-mode",
        "detector",
    ]);
    assert!(!sweep.status.success(), "expected violations");
    let text = String::from_utf8_lossy(&sweep.stdout);
    let replay = text.lines().find(|l| l.contains("replay:")).expect("a replay line");
    assert!(replay.contains("--trace --diagram seed-"), "{replay}");
    let seed = replay.rsplit("--seed ").next().unwrap().split(' ').next().unwrap();

    let dir = scratch("diagram");
    let svg = dir.0.join("seed.svg");
    assert!(replay.contains("--partition-mode detector"), "{replay}");
    let args = [
        "sim",
        "--mutex",
        "centralized",
        "--partitions",
        "1",
        "--partition-mode",
        "detector",
        "--seed",
        seed,
        "--trace",
    ];
    let out = Command::new(BIN).args(args).arg("--diagram").arg(&svg).output().unwrap();
    let trace = String::from_utf8_lossy(&out.stdout);
    let sends = trace.lines().filter(|l| l.contains(" -> ")).count();
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(sends > 0);
    assert_eq!(drawn.matches("<g class=\"msg").count(), sends, "an arrow per traced message");
    assert!(drawn.contains("data-kind=\"violation\""), "the violation is marked");
    assert!(String::from_utf8_lossy(&out.stderr).contains("diagram: "));
}

/// `watch --diagram` on a real cluster under a workload: an arrow per
/// message the nodes' own counters say they sent meanwhile, none whose
/// head comes before its tail, a bar per entry, a line per node.
#[test]
fn watch_draws_a_real_run_with_every_message_the_nodes_counted() {
    let up = Up::start(3, "watch-diagram");
    let sent = |rows: &[Value]| -> u64 {
        rows.iter()
            .flat_map(|r| r["messages_sent"].as_object().unwrap().iter())
            .filter(|(kind, _)| kind.as_str() != "heartbeat")
            .map(|(_, n)| n.as_u64().unwrap())
            .sum()
    };
    let before = sent(&up.status());
    let dir = scratch("watch-diagram");
    let svg = dir.0.join("run.svg");
    let mut watch = Command::new(BIN)
        .args(["watch", "--config", up.config(), "--duration", "4s", "--diagram"])
        .arg(&svg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700)); // the streams open
    let work = coterie(&[
        "workload",
        "--config",
        up.config(),
        "--clients",
        "1",
        "--requests",
        "10",
        "--hold",
        "2ms",
        "--think",
        "5ms",
        "--json",
    ]);
    assert!(work.status.success(), "{}", String::from_utf8_lossy(&work.stderr));
    let report: Value = serde_json::from_slice(&work.stdout).unwrap();
    let status = watch.wait().unwrap();
    assert!(status.success());
    let after = sent(&up.status());
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(drawn.matches("<line class=\"node\"").count(), 3);
    assert_eq!(
        drawn.matches("<g class=\"msg").count() as u64,
        after - before,
        "an arrow per message"
    );
    for tag in drawn.split("<g class=\"msg").skip(1) {
        let tag = &tag[..tag.find('>').unwrap()];
        let time = |name: &str| -> Option<u64> {
            let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
            tag[at..].split('"').next()?.parse().ok()
        };
        let t0 = time("data-t0").unwrap();
        assert!(time("data-t1").is_none_or(|t1| t1 > t0), "delivered before sent: {tag}");
    }
    assert_eq!(
        drawn.matches("<rect class=\"cs\"").count() as u64,
        report["entries"].as_u64().unwrap(),
        "a bar per entry"
    );
}

#[test]
fn check_drives_several_clients_per_node_and_refuses_permits_a_mutex_lacks() {
    let out = coterie(&[
        "check",
        "--mutex",
        "centralized",
        "--nodes",
        "2",
        "--sessions",
        "2",
        "--count",
        "2",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((r["sessions"].as_u64(), r["count"].as_u64()), (Some(2), Some(2)), "{r}");
    assert_eq!((r["exhausted"].as_bool(), r["violations"].as_u64()), (Some(true), Some(0)));

    let out = coterie(&["check", "--mutex", "lamport", "--count", "2"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lamport admits one holder at a time"), "{err}");
}

#[test]
fn check_reports_an_exhausted_space_and_a_found_split_brain_as_json() {
    let out = coterie(&["check", "--mutex", "token-ring", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    for field in
        ["mutex", "election", "nodes", "states", "distinct_states", "max_depth", "states_per_s"]
    {
        assert!(!r[field].is_null(), "{field} missing in {r}");
    }
    assert_eq!(r["exhausted"], true);
    assert_eq!(r["violations"], 0);

    let out = coterie(&[
        "check",
        "--mutex",
        "centralized",
        "--partitions",
        "1",
        "--hold-ticks",
        "20",
        "--delay-ticks",
        "1",
        "--partition-mode",
        "detector",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "a violation exits 1");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["violations"].as_u64().unwrap() > 0);
    let first = &r["counterexamples"][0];
    assert_eq!(first["invariant"], "safety");
    assert_eq!(first["proven_shortest"], true, "a second pass proves it shortest");
    let schedule = first["schedule"].as_array().unwrap();
    assert!(schedule.last().unwrap().as_str().unwrap().contains("VIOLATION"));

    let out = coterie(&["check", "--mutex", "lamport", "--max-states", "1000", "--json"]);
    assert_eq!(out.status.code(), Some(3), "a bound hit exits 3");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["exhausted"], false);
}

/// `partitions = "majority"` on five real nodes, cut {n1, n2} | {n3, n4,
/// n5} with the agents' own partition fault: the minority refuses new
/// requests with `no quorum` (exit 69) and its holder loses its lock
/// (exit 76, the command stopped) before the majority grants the same
/// lock, with a higher fence; given the cluster file, `lock` moves on to
/// a node with a quorum. After the heal the minority comes back through a
/// new view and grants again, fences still rising. The same cut without
/// the mode (`detector`) is the split brain `fault_partitions_...` shows.
#[test]
fn a_minority_grants_nothing_and_its_holder_stops_before_the_majority_grants() {
    let up = Up::start_with(5, "majority", |c| c.cluster.partitions = "majority".parse().unwrap());
    let one_view_of_all = |rows: &[Value]| {
        rows.iter().all(|r| {
            r["quorum"] == true && r["view"]["members"].as_array().is_some_and(|m| m.len() == 5)
        })
    };
    // The fence `lock` is granted `cut` with, through `node` (or the
    // cluster file's first node with a quorum).
    let fence_at = |node: Option<&str>| -> u64 {
        let mut args = vec!["lock", "--config", up.config(), "--timeout", "20s"];
        args.extend(node.map(|n| ["--node", n]).into_iter().flatten());
        args.extend(["cut", "--", "sh", "-c", "echo $COTERIE_FENCE"]);
        let out = coterie(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    up.wait_for(one_view_of_all);
    let dir = scratch("majority-holder");
    let script = "echo $$ > $D/pid; echo $COTERIE_FENCE > $D/fence; exec sleep 60";
    let holder = lock_running(up.config(), 1, &["cut"], script, &dir.0);
    appears(&dir.0.join("fence"));
    let pid: u32 = std::fs::read_to_string(dir.0.join("pid")).unwrap().trim().parse().unwrap();
    let first: u64 = std::fs::read_to_string(dir.0.join("fence")).unwrap().trim().parse().unwrap();
    for (nodes, peers) in [(["1", "2"].as_slice(), "3,4,5"), (["3", "4", "5"].as_slice(), "1,2")] {
        for node in nodes {
            let out =
                coterie(&["fault", "--config", up.config(), "--node", node, "partition", peers]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
    }
    // The majority's grant comes only after the holder was told.
    let second = fence_at(Some("4"));
    assert!(second > first, "the majority's fence {second} is above the minority's {first}");
    let (code, stderr) = finished(holder, &dir.0);
    assert_eq!(code, Some(76), "{stderr}");
    assert!(stderr.contains("quorum"), "{stderr}");
    assert!(gone(pid), "the minority's holder still runs");
    // The minority refuses; the cluster file finds a node with a quorum.
    let out = coterie(&["lock", "--config", up.config(), "--node", "2", "cut", "--", "true"]);
    assert_eq!(out.status.code(), Some(69));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no quorum: n2 hears n1, n2 of 5"), "{said}");
    let third = fence_at(None);
    assert!(third > second);
    let rows = up.status();
    let minority: Vec<&Value> = rows.iter().filter(|r| r["id"] == 1 || r["id"] == 2).collect();
    assert!(minority.iter().all(|r| r["quorum"] == false), "{rows:?}");
    // Healed: one view of all five, and the old minority grants again.
    assert!(coterie(&["fault", "--config", up.config(), "heal"]).status.success());
    up.wait_for(one_view_of_all);
    assert!(fence_at(Some("1")) > third);
}

/// `coterie up --config FILE &` in an interactive shell, as the README
/// shows it: `up` runs on in the background (a read of the terminal would
/// stop it, and a stopped job takes no SIGTERM), says it has no console,
/// and `kill %1` stops it and its nodes.
#[test]
fn up_in_the_background_of_a_shell_runs_and_stops_when_killed() {
    let dir = scratch("up-background");
    let file = dir.0.join("three.toml");
    let file = file.to_str().unwrap();
    let init = coterie(&["init", "--nodes", "3", "--free-ports", "--out", file]);
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    // An interactive bash on a pseudo-terminal, with job control.
    let script = r#"
import os, pty, re, select, sys, time
bin, config = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    os.execvp("bash", ["bash", "--norc", "--noprofile", "-i"])
seen = b""
def until(text, limit):
    global seen
    end = time.time() + limit
    while not re.search(text.encode(), seen):
        if time.time() > end:
            sys.exit("not within %ss: %r\n%s" % (limit, text, seen.decode(errors="replace")))
        if select.select([fd], [], [], 0.2)[0]:
            seen += os.read(fd, 65536)
os.write(fd, ("%s up --config %s &\n" % (bin, config)).encode())
until("no console", 30)
time.sleep(1)
os.write(fd, b"jobs; kill %1; wait; echo EXIT=$?\n")
until("EXIT=[0-9]", 30)  # not the echo of the line typed
print(seen.decode(errors="replace"))
"#;
    let out = Command::new("python3").args(["-c", script, BIN, file]).output().expect("python3");
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("Stopped"), "the job stopped itself: {said}");
    assert!(said.contains("coterie up: stopping"), "{said}");
    let cfg = coterie_node::Config::load(Path::new(file)).unwrap();
    let peer = &cfg.nodes[0].peer;
    let start = Instant::now();
    while std::net::TcpStream::connect(peer).is_ok() {
        assert!(start.elapsed() < Duration::from_secs(10), "n1 still listens on {peer}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A node that `up` started and that died by itself (here SIGKILLed from
/// outside) is said on `up`'s stderr, and `restart N` brings it back.
#[test]
fn up_says_when_a_node_dies_by_itself_and_restarts_it() {
    let mut up = Up::start(3, "reap");
    let log = Path::new(up.config()).parent().unwrap().join("up.log");
    // `up` says where each node serves, the HTTP API too.
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    for id in 1..=3 {
        assert!(said.contains(&format!("{} (pid", up.http(id))), "no API address: {said}");
    }
    unsafe_kill(up.node_pid(2), 9);
    let start = Instant::now();
    loop {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        if said.contains("coterie up: node 2 exited by itself") {
            assert!(said.contains("`restart 2` starts it again"), "{said}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "up said nothing: {said}");
        std::thread::sleep(Duration::from_millis(50));
    }
    up.control("restart 2");
    up.wait_for(|rows| agreed(rows).is_some_and(|(c, n_up)| c == 3 && n_up == 3));
}
