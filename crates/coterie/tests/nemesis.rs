//! `coterie nemesis` and `coterie history` through the binary, on real
//! processes: every mutex under the mixed nemesis, judged by the history
//! checker; a run interrupted half-way leaves no process behind; and
//! `history check` fails on a history that shows a violation.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_coterie");

/// The runs of whole clusters take turns: three at once on two cores
/// would starve the failure detectors into suspecting live nodes.
static CLUSTERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    CLUSTERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether this is a deep run (`COTERIE_DEEP=1`): the nemesis acts
/// longer where a test's point is the number of faults it deals.
fn deep() -> bool {
    std::env::var_os("COTERIE_DEEP").is_some_and(|v| !v.is_empty() && v != "0")
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("coterie-nemesis-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Processes whose command line mentions `dir`, but this test's own.
fn processes_under(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        // A zombie has an empty command line and holds nothing.
        if cmdline.contains(&needle) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

/// Runs `coterie nemesis --json ARGS` (split at spaces) to its end, keeping
/// its runs under `out` if given: its reports, whether it exited 0, and
/// its stderr.
fn nemesis_json(args: &str, out: Option<&Path>) -> (Vec<Value>, bool, String) {
    let mut command = Command::new(BIN);
    command.args(["nemesis", "--json"]).args(args.split_whitespace());
    if let Some(dir) = out {
        command.arg("--out").arg(dir);
    }
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let reports: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}); stderr: {stderr}"));
    (reports.as_array().unwrap().clone(), out.status.success(), stderr)
}

#[test]
fn every_mutex_under_the_mixed_nemesis_loses_no_fenced_update_and_recovers() {
    let _turn = one_cluster_at_a_time();
    let dir = scratch("mixed");
    let (reports, success, stderr) =
        nemesis_json("--mutex all --duration 16s --every 1.5s --recover 3s --seed 7", Some(&dir));
    assert_eq!(reports.len(), coterie_core::registry::MUTEXES.len());
    let mut kinds = std::collections::BTreeSet::new();
    for r in &reports {
        let mutex = r["mutex"].as_str().unwrap();
        let h = &r["history"];
        assert_eq!(r["failures"], Value::Array(vec![]), "{mutex}: {r:#}");
        assert!(h["ops"]["acquire"]["ok"].as_u64().unwrap() > 50, "{mutex}: {:#}", h["ops"]);
        let registers = h["names"][0]["registers"].as_array().unwrap();
        let fenced = registers.iter().find(|x| x["register"] == "fenced").unwrap();
        assert_eq!(fenced["lost_updates"], 0, "{mutex}: {fenced:#}");
        assert!(fenced["writes_ok"].as_u64().unwrap() > 50, "{mutex}: {fenced:#}");
        let recovery = h["recovery_ns"].as_u64().unwrap_or(u64::MAX);
        assert!(recovery < 10_000_000_000, "{mutex}: recovery {recovery}");
        assert_eq!(r["stuck_nodes"], Value::Array(vec![]));
        for kind in r["faults"].as_object().unwrap().keys() {
            kinds.insert(kind.clone());
        }
        // The merged history is on disk and checks the same through
        // `history check`.
        let run = Path::new(r["dir"].as_str().unwrap());
        let check = Command::new(BIN)
            .args(["history", "check", "--json"])
            .arg(run.join("history.jsonl"))
            .output()
            .unwrap();
        let again: Value = serde_json::from_slice(&check.stdout).unwrap();
        assert_eq!(again["violation_counts"], h["violation_counts"], "{mutex}");
        assert_eq!(check.status.success(), h["valid"].as_bool().unwrap());
    }
    // Ten faults deal every kind at least once (clock where libfaketime is).
    let mut every = vec!["kill", "pause", "freeze-waiter", "freeze-holder", "partition"];
    every.extend(["bridge", "ring", "disk"]);
    if Path::new("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1").exists() {
        every.push("clock");
    }
    for kind in every {
        assert!(kinds.contains(kind), "{kind} never drawn: {kinds:?}");
    }
    assert!(success, "{stderr}");
    assert_eq!(processes_under(&dir), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A read-heavy mix, 70 % of the acquires reading, under kills, pauses
/// and partitions: under centralized and ricart-agrawala, which have
/// reader forms, readers hold at once, and under bakery (none: a read is a
/// write) one holder at a time; under each no reader holds beside a
/// writer, fences rise as the modes say, and no fenced update is lost.
#[test]
fn a_read_heavy_mix_shares_reads_where_it_may_and_loses_no_fenced_update() {
    let _turn = one_cluster_at_a_time();
    let dir = scratch("readers");
    let args =
        "--mutex centralized,ricart-agrawala,bakery --read-share 0.7 --faults kill,pause,partition \
                --duration 10s --every 1.5s --recover 3s --seed 11";
    let (reports, success, stderr) = nemesis_json(args, Some(&dir));
    assert_eq!(reports.len(), 3);
    for r in &reports {
        let mutex = r["mutex"].as_str().unwrap();
        assert_eq!(r["failures"], Value::Array(vec![]), "{mutex}: {r:#}");
        let name = &r["history"]["names"][0];
        let (reads, grants) =
            (name["read_grants"].as_u64().unwrap(), name["grants"].as_u64().unwrap());
        assert!(reads > 20 && reads < grants, "{mutex}: {reads} reads of {grants} grants");
        let most = name["max_holders"].as_u64().unwrap();
        if coterie_core::registry::mutex(mutex).unwrap().claims.readers {
            assert!(most > 1, "{mutex}: readers never shared");
        } else {
            assert_eq!(most, 1, "{mutex} has no reader form, yet holders overlapped");
        }
        let registers = name["registers"].as_array().unwrap();
        let fenced = registers.iter().find(|x| x["register"] == "fenced").unwrap();
        assert_eq!(fenced["lost_updates"], 0, "{mutex}: {fenced:#}");
    }
    assert!(success, "{stderr}");
    assert_eq!(processes_under(&dir), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lost_truncated_or_rolled_back_state_files_and_stepped_clocks_never_bring_a_fence_back() {
    let _turn = one_cluster_at_a_time();
    let dir = scratch("disk");
    let mut faults = "disk".to_string();
    if Path::new("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1").exists() {
        faults += ",clock";
    }
    let args = format!("--mutex all --duration 12s --every 1.5s --faults {faults} --recover 3s");
    let (reports, success, stderr) = nemesis_json(&args, Some(&dir));
    for r in &reports {
        let mutex = r["mutex"].as_str().unwrap();
        let counts = &r["history"]["violation_counts"];
        // Every form of each fault came: the state file lost, rolled back
        // and truncated; the clock an hour behind, ahead, and fast.
        assert!(r["faults"]["disk"].as_u64().unwrap() >= 3, "{mutex}: {:#}", r["faults"]);
        // Overlaps only where a client was told later that it had lost
        // the hold (its node was killed while it held): a restarted node
        // never grants a permission twice.
        for kind in ["overlap", "fence-order", "duplicate-fence", "lost-update-fenced", "stall"] {
            assert_eq!(counts[kind], 0, "{mutex}: {kind}: {:#}", r["history"]["violations"]);
        }
        assert_eq!(r["failures"], Value::Array(vec![]), "{mutex}");
    }
    assert!(success, "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pauses_with_and_without_lock_delay_leave_no_node_wanting_and_a_lock_granted_soon() {
    let _turn = one_cluster_at_a_time();
    // Four pauses a run in a deep run, two in CI's (a pause every 2 s).
    let (duration, pauses) = if deep() { ("9s", 4) } else { ("5s", 2) };
    for delay in ["0s", "1s"] {
        let args = format!(
            "--mutex all --duration {duration} --every 2s --faults pause --lock-delay {delay}"
        );
        let args = args + " --recover 3s --recovery-bound 5s";
        let (reports, success, stderr) = nemesis_json(&args, None);
        for r in &reports {
            let mutex = r["mutex"].as_str().unwrap();
            assert_eq!(r["faults"]["pause"], pauses, "{mutex}");
            // No node wanting with no client left, a grant within 5 s of
            // the last pause's end, and the fenced register whole.
            assert_eq!(r["stuck_nodes"], Value::Array(vec![]), "{mutex}, lock delay {delay}");
            assert_eq!(r["failures"], Value::Array(vec![]), "{mutex}, lock delay {delay}");
            assert!(r["history"]["recovery_ns"].as_u64().unwrap() < 5_000_000_000);
        }
        assert!(success, "{stderr}");
    }
}

/// The most holds acknowledged at once through one node, in a run's
/// history: from a client's `ok` to its acquire until it asks to release
/// or learns the hold was lost.
fn most_at_one_node(history: &Path) -> usize {
    let text = std::fs::read_to_string(history).unwrap();
    let mut events: Vec<(u64, u64, Option<u64>)> = Vec::new();
    for op in text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
        let (p, f, kind) = (op["process"].as_u64().unwrap(), &op["f"], &op["type"]);
        let t = op["time_ns"].as_u64().unwrap();
        if p == 0 {
            continue;
        }
        if f == "acquire" && kind == "ok" {
            events.push((t, p, op["node"].as_u64()));
        } else if (f == "release" && kind == "invoke") || f == "lose" {
            events.push((t, p, None));
        }
    }
    events.sort();
    let mut holding = std::collections::BTreeMap::new();
    let mut most = 0;
    for (_, p, node) in events {
        match node {
            Some(n) => holding.insert(p, n),
            None => holding.remove(&p),
        };
        for n in holding.values() {
            most = most.max(holding.values().filter(|m| *m == n).count());
        }
    }
    most
}

/// A semaphore of three permits under the mixed nemesis, ten clients on
/// five nodes: never more than three hold, no fence is granted twice,
/// and several clients of one node hold at once: permits go to sessions.
#[test]
fn a_semaphore_under_the_nemesis_never_admits_more_than_its_permits() {
    let _turn = one_cluster_at_a_time();
    let dir = scratch("count");
    let args = "--mutex centralized,raymond-k --count 3 --clients 10 --duration 12s --every 1.5s \
                --faults partition,bridge,kill,pause --recover 3s";
    let (reports, success, stderr) = nemesis_json(args, Some(&dir));
    assert_eq!(reports.len(), 2, "{stderr}");
    for r in &reports {
        let mutex = r["mutex"].as_str().unwrap();
        let counts = &r["history"]["violation_counts"];
        for kind in ["overlap", "duplicate-fence", "stall"] {
            assert_eq!(counts[kind], 0, "{mutex}: {kind}: {:#}", r["history"]["violations"]);
        }
        assert_eq!(r["failures"], Value::Array(vec![]), "{mutex}");
        assert_eq!(r["count"], 3);
        // The most acknowledged holds at once: three, but for holds later
        // found lost (a holder cut off whose lease ran out is told so
        // after the majority granted again: a lease overlap, never an
        // overlap, as the counts above prove).
        let max = r["history"]["names"][0]["max_holders"].as_u64().unwrap();
        let lost = counts["lease-overlap"].as_u64().unwrap();
        assert!(max >= 2, "{mutex}: {max} at once");
        assert!(max <= 3 || lost > 0, "{mutex}: {max} at once with no hold lost");
        let at_one = most_at_one_node(&Path::new(r["dir"].as_str().unwrap()).join("history.jsonl"));
        assert!(at_one >= 2, "{mutex}: never two holders at one node");
    }
    assert!(success, "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Starts a nemesis of `mutex` under `faults` that keeps `dir`, and
/// returns once its nodes and clients run and a fault or two has come.
fn nemesis_under_way(dir: &Path, mutex: &str, faults: &str) -> std::process::Child {
    let child = Command::new(BIN)
        .args(["nemesis", "--mutex", mutex, "--duration", "30s", "--every", "1s"])
        .args(["--faults", faults, "--out"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while processes_under(dir).len() < 12 && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(2600));
    assert!(processes_under(dir).len() >= 11, "{:?}", processes_under(dir));
    child
}

/// Waits up to five seconds for every process under `dir` to be gone
/// (killed children go at once; the kernel reaps them a moment later).
fn all_gone(dir: &Path) {
    let gone = std::time::Instant::now();
    while !processes_under(dir).is_empty() && gone.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(processes_under(dir), Vec::<String>::new());
}

#[test]
fn an_interrupted_nemesis_leaves_no_process_behind() {
    let _turn = one_cluster_at_a_time();
    let dir = scratch("interrupted");
    let mut child =
        nemesis_under_way(&dir, "centralized", "pause,partition,freeze-holder,freeze-waiter");
    // SAFETY: a plain kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    all_gone(&dir);
    // Nor a network namespace (where the machine lets it make them).
    let prefix = format!("coterie-{}-", child.id());
    let namespaces = namespaces();
    assert!(!namespaces.iter().any(|n| n.starts_with(&prefix)), "{namespaces:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn namespaces() -> Vec<String> {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout).lines().map(|l| l.to_string()).collect()
}

#[test]
fn a_nemesis_killed_outright_takes_its_processes_with_it() {
    let _turn = one_cluster_at_a_time();
    let dir = scratch("killed");
    let mut child = nemesis_under_way(&dir, "ricart-agrawala", "pause,partition,freeze-holder");
    child.kill().unwrap();
    child.wait().unwrap();
    all_gone(&dir);
    // Its namespaces outlive it; the next run deletes them before it starts.
    let prefix = format!("coterie-{}-", child.id());
    if Command::new("nft").arg("-V").output().is_ok_and(|o| o.status.success()) {
        assert!(namespaces().iter().any(|n| n.starts_with(&prefix)), "{:?}", namespaces());
    }
    let sweep = Command::new(BIN)
        .args(["nemesis", "--mutex", "centralized", "--duration", "1s", "--faults", "pause"])
        .args(["--recover", "1s", "--json"])
        .output()
        .unwrap();
    assert!(sweep.status.success(), "{}", String::from_utf8_lossy(&sweep.stderr));
    let namespaces = namespaces();
    assert!(!namespaces.iter().any(|n| n.starts_with(&prefix)), "{namespaces:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn history_check_fails_on_an_overlap_and_passes_a_clean_history() {
    let dir = scratch("check");
    let line = |t: u64, p: u32, kind: &str, f: &str, extra: &str| {
        format!(r#"{{"time_ns":{t},"process":{p},"type":"{kind}","f":"{f}"{extra}}}"#)
    };
    let clean = [
        line(1, 1, "invoke", "acquire", ""),
        line(2, 1, "ok", "acquire", r#","fence":5"#),
        line(3, 1, "invoke", "release", ""),
        line(4, 1, "ok", "release", ""),
        line(5, 2, "invoke", "acquire", ""),
        line(6, 2, "ok", "acquire", r#","fence":6"#),
        line(7, 2, "invoke", "release", ""),
        line(8, 2, "ok", "release", ""),
    ];
    let path = dir.join("clean.jsonl");
    std::fs::write(&path, clean.join("\n") + "\n").unwrap();
    let ok = Command::new(BIN).args(["history", "check"]).arg(&path).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stdout));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("valid: no violation"));
    // Process 2 is granted before process 1 releases.
    let mut overlap = clean.to_vec();
    overlap[4] = line(2, 2, "invoke", "acquire", "");
    overlap[5] = line(2, 2, "ok", "acquire", r#","fence":6"#);
    let path = dir.join("overlap.jsonl");
    std::fs::write(&path, overlap.join("\n") + "\n").unwrap();
    let bad = Command::new(BIN).args(["history", "check"]).arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(1), "{text}");
    assert!(text.contains("INVALID: overlap 1"), "{text}");
    // A line that is not an operation is an error with its line number.
    std::fs::write(&path, "{\"time_ns\":1}\n{}\n").unwrap();
    let garbage = Command::new(BIN).args(["history", "check"]).arg(&path).output().unwrap();
    assert_eq!(garbage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&garbage.stderr).contains("overlap.jsonl:1: not an operation"));
    std::fs::remove_dir_all(&dir).unwrap();
}
