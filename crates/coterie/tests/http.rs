//! The HTTP/JSON API on real node processes, called with `curl` as a user
//! would: sessions with a TTL take and release named locks; a session
//! that misses its TTL loses its lock to the next waiter, and one that
//! stops its keepalives while waiting is never granted; the CLI and HTTP
//! clients share one lock and its fences; bad input gets a JSON error with
//! the status a user expects and changes nothing; with a secret, the API
//! asks for a bearer token.

mod support;

use serde_json::{json, Value};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};
use support::*;

/// One HTTP call through curl: the status and the JSON body (`Null` when
/// the body is not JSON).
fn call(method: &str, url: &str, body: Option<&str>, token: Option<&str>) -> (u16, Value) {
    let mut cmd = Command::new("curl");
    cmd.args(curl_tls());
    cmd.args(["-sS", "-X", method, "-o", "-", "-w", "\n%{http_code}", url]);
    if let Some(body) = body {
        cmd.args(["-H", "content-type: application/json", "--data-binary", body]);
    }
    if let Some(token) = token {
        cmd.args(["-H", &format!("authorization: Bearer {token}")]);
    }
    let out = cmd.output().expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, status) = text.rsplit_once('\n').expect("curl's status line");
    let status = status.trim().parse().unwrap_or_else(|_| panic!("no status from curl: {text:?}"));
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn post(url: &str, body: Value) -> (u16, Value) {
    call("POST", url, Some(&body.to_string()), None)
}

fn session(base: &str, ttl: &str) -> String {
    let (status, body) = post(&format!("{base}/v1/sessions"), json!({ "ttl": ttl }));
    assert_eq!(status, 200, "{body}");
    body["id"].as_str().expect("a session id").to_string()
}

fn acquire(base: &str, name: &str, body: Value) -> (u16, Value) {
    post(&format!("{base}/v1/locks/{name}/acquire"), body)
}

fn release(base: &str, name: &str, session: &str, fence: u64) -> (u16, Value) {
    post(&format!("{base}/v1/locks/{name}/release"), json!({ "session": session, "fence": fence }))
}

fn holders(base: &str, name: &str) -> Vec<Value> {
    let (status, body) = call("GET", &format!("{base}/v1/locks/{name}"), None, None);
    assert_eq!(status, 200, "{body}");
    body["holders"].as_array().cloned().unwrap_or_default()
}

/// Keeps session `id` alive every 200 ms until `stop` is set.
fn keep_alive(base: String, id: String, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            call("POST", &format!("{base}/v1/sessions/{id}/keepalive"), None, None);
            thread::sleep(Duration::from_millis(200));
        }
    });
}

/// Reentrancy by choice: a session that holds a lock and asks again is
/// refused with a reason that names `"reentrant"`; with it, it gets a
/// count and the same fence, and the lock goes at the last release, not
/// before. A reentrant ask with other permits than the lock's, or with a
/// `value`, is refused and changes nothing.
#[test]
fn a_reentrant_session_counts_up_and_down_and_the_last_release_frees_the_lock() {
    let up = Up::start(3, "http-reentrant");
    let (n1, n2) = (up.http(1), up.http(2));
    let a = session(&n1, "10s");
    let b = session(&n2, "10s");
    let (status, first) = acquire(&n1, "reports", json!({ "session": a }));
    assert_eq!((status, first["count"].as_u64()), (200, Some(1)), "{first}");
    let fence = first["fence"].as_u64().unwrap();
    let (status, twice) = acquire(&n1, "reports", json!({ "session": a, "try": true }));
    assert_eq!(status, 409, "{twice}");
    assert!(twice["detail"].as_str().unwrap().contains("\"reentrant\": true"), "{twice}");
    for _ in 0..2 {
        let (status, again) = acquire(&n1, "reports", json!({ "session": a, "reentrant": true }));
        assert_eq!(status, 200, "{again}");
        assert_eq!(again["fence"].as_u64(), Some(fence), "the first grant's fence: {again}");
    }
    let (_, third) = acquire(&n1, "reports", json!({ "session": a, "reentrant": true }));
    assert_eq!(third["count"].as_u64(), Some(4), "{third}");
    let odd = json!({ "session": a, "reentrant": true, "permits": 2 });
    let (status, other) = acquire(&n1, "reports", odd);
    assert_eq!(status, 400, "other permits: {other}");
    let led = json!({ "session": a, "reentrant": true, "value": "x" });
    let (status, bad) = acquire(&n1, "reports", led);
    assert_eq!((status, bad["error"].as_str()), (400, Some("bad request")), "{bad}");
    // Three releases of four leave it held: another session waits.
    for left in [3, 2, 1] {
        let (status, done) = release(&n1, "reports", &a, fence);
        assert_eq!((status, done["count"].as_u64()), (200, Some(left)), "{done}");
        let (status, busy) = acquire(&n2, "reports", json!({ "session": b, "try": true }));
        assert_eq!(status, 409, "held {left} more times: {busy}");
    }
    let (status, done) = release(&n1, "reports", &a, fence);
    assert_eq!((status, done["count"].as_u64()), (200, Some(0)), "{done}");
    let (status, next) = acquire(&n2, "reports", json!({ "session": b, "timeout": "10s" }));
    assert_eq!(status, 200, "the last release let it go: {next}");
    assert!(next["fence"].as_u64().unwrap() > fence, "{next}");
    let (status, _) = release(&n1, "reports", &a, fence);
    assert_eq!(status, 409, "nothing left to release");
}

/// The waiters `GET /v1/locks/{name}` lists at `base`.
fn waiters(base: &str, name: &str) -> Vec<Value> {
    let (status, body) = call("GET", &format!("{base}/v1/locks/{name}"), None, None);
    assert_eq!(status, 200, "{body}");
    body["waiters"].as_array().cloned().unwrap_or_default()
}

/// Polls `done` every 50 ms for up to 10 s.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < until, "not within 10 s: {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Readers and writers on five real nodes: four sessions reading through
/// four nodes hold the lock at once; a writer that asks then waits for
/// every one of them to leave, and holds alone; a reader that asks after
/// the writer waits behind it although readers hold, and enters only once
/// the writer has left, with a fence above the writer's, itself above
/// every reader's. Listings give each holder's and waiter's mode. An
/// unknown mode, and a read of a lock of two permits, are refused and
/// change nothing. Under centralized, whose coordinator queues readers.
#[test]
fn four_readers_through_four_nodes_share_and_a_writer_waits_for_them_then_holds_alone() {
    readers_share_and_a_writer_waits("centralized");
}

/// The same under ricart-agrawala, where readers answer readers and a
/// writer ranked ahead defers a later reader; the late reader's node
/// holds a read for another session, and asks again once it is over.
#[test]
fn ricart_agrawala_readers_share_through_four_nodes_and_a_writer_holds_alone() {
    readers_share_and_a_writer_waits("ricart-agrawala");
}

/// The same under lamport, whose readers wait only for the writers queued
/// ahead of them.
#[test]
fn lamport_readers_share_through_four_nodes_and_a_writer_holds_alone() {
    readers_share_and_a_writer_waits("lamport");
}

/// The same under roucairol-carvalho, whose readers keep the permissions
/// they share: the writer takes each whole from a reader as it leaves,
/// and the late reader's node must ask the writer, which defers it.
#[test]
fn roucairol_carvalho_readers_share_through_four_nodes_and_a_writer_holds_alone() {
    readers_share_and_a_writer_waits("roucairol-carvalho");
}

/// The same under maekawa, whose readers share arbiters and ask a grid
/// row (three nodes of five) where a writer asks a row and a column: the
/// late reader's node is one of the writer's arbiters, and queues the
/// late read behind the write.
#[test]
fn maekawa_readers_share_through_four_nodes_and_a_writer_holds_alone() {
    readers_share_and_a_writer_waits("maekawa");
}

/// The same under tree-quorum, whose readers share the arbiters on their
/// root-to-leaf paths.
#[test]
fn tree_quorum_readers_share_through_four_nodes_and_a_writer_holds_alone() {
    readers_share_and_a_writer_waits("tree-quorum");
}

/// The same under raymond-k, where each session asks on its own and a
/// reader counts only the writers in its way: the late reader's request,
/// ranked behind the writer's, is held back by it at the writer's node
/// while the reader beside it at its own node still holds.
#[test]
fn raymond_k_readers_share_through_four_nodes_and_a_writer_holds_alone() {
    readers_share_and_a_writer_waits("raymond-k");
}

/// Readers waiting at one node share its grant. Under ricart-agrawala a
/// node asks once for all its sessions: two sessions that wait at node 2
/// to read while a writer holds at node 1 enter together on node 2's one
/// read grant (one fence, above the writer's), and node 2 keeps the grant
/// until the second of them leaves, so a writer at node 3 waits for both.
#[test]
fn readers_waiting_at_one_node_share_its_grant_and_a_writer_waits_for_both() {
    let algorithm = coterie_core::registry::mutex("ricart-agrawala").unwrap();
    let up = Up::start_with(3, "http-node-readers", |cfg| cfg.cluster.mutex = algorithm);
    let nodes: Vec<String> = (1..=3).map(|i| up.http(i)).collect();
    let taker = |base: &str, body: Value| {
        let base = base.to_string();
        thread::spawn(move || acquire(&base, "cfg", body))
    };
    let w = session(&nodes[0], "20s");
    let (status, wrote) = acquire(&nodes[0], "cfg", json!({ "session": w }));
    assert_eq!(status, 200, "{wrote}");
    let written = wrote["fence"].as_u64().unwrap();
    let (r1, r2) = (session(&nodes[1], "20s"), session(&nodes[1], "20s"));
    let read = |id: &str| json!({ "session": id, "mode": "read", "timeout": "15s" });
    let (a, b) = (taker(&nodes[1], read(&r1)), taker(&nodes[1], read(&r2)));
    eventually("both readers wait", || waiters(&nodes[2], "cfg").len() == 2);
    let (status, _) = release(&nodes[0], "cfg", &w, written);
    assert_eq!(status, 200);
    let ((sa, ga), (sb, gb)) = (a.join().unwrap(), b.join().unwrap());
    assert_eq!((sa, sb), (200, 200), "{ga} {gb}");
    let shared = ga["fence"].as_u64().unwrap();
    assert_eq!(gb["fence"].as_u64(), Some(shared), "one grant, one fence: {ga} {gb}");
    assert!(shared > written, "the readers' fence {shared} is above the writer's {written}");
    let listed = holders(&nodes[2], "cfg");
    assert_eq!(listed.len(), 2, "both readers hold: {listed:?}");
    assert!(listed.iter().all(|h| h["node"] == 2 && h["mode"] == "read"), "{listed:?}");

    let w2 = session(&nodes[2], "20s");
    let writer = taker(&nodes[2], json!({ "session": w2, "timeout": "15s" }));
    eventually("the writer waits", || waiters(&nodes[0], "cfg").len() == 1);
    let (status, _) = release(&nodes[1], "cfg", &r1, shared);
    assert_eq!(status, 200);
    thread::sleep(Duration::from_millis(300));
    assert!(!writer.is_finished(), "the writer entered beside a reader still on the grant");
    let (status, _) = release(&nodes[1], "cfg", &r2, shared);
    assert_eq!(status, 200);
    let (status, got) = writer.join().unwrap();
    assert_eq!(status, 200, "{got}");
    assert!(got["fence"].as_u64().unwrap() > shared, "{got} after {shared}");
}

fn readers_share_and_a_writer_waits(mutex: &str) {
    let algorithm = coterie_core::registry::mutex(mutex).unwrap();
    let up = Up::start_with(5, &format!("http-readers-{mutex}"), |cfg| {
        cfg.cluster.mutex = algorithm;
    });
    let nodes: Vec<String> = (1..=5).map(|i| up.http(i)).collect();
    let (status, bad) = acquire(&nodes[0], "config", json!({ "session": "x", "mode": "append" }));
    assert_eq!(status, 400, "an unknown mode: {bad}");
    let s = session(&nodes[0], "20s");
    let (status, bad) =
        acquire(&nodes[0], "pool", json!({ "session": s, "mode": "read", "permits": 2 }));
    assert_eq!(status, 400, "a read of two permits: {bad}");
    assert!(bad["detail"].as_str().unwrap().contains("one permit"), "{bad}");

    let mut readers = Vec::new();
    for base in &nodes[..4] {
        let id = session(base, "20s");
        let body = json!({ "session": id, "mode": "read", "timeout": "10s" });
        let (status, got) = acquire(base, "config", body);
        assert_eq!((status, got["mode"].as_str()), (200, Some("read")), "{got}");
        readers.push((base.clone(), id, got["fence"].as_u64().unwrap()));
    }
    let listed = holders(&nodes[4], "config");
    assert_eq!(listed.len(), 4, "four readers at once: {listed:?}");
    assert!(listed.iter().all(|h| h["mode"] == "read"), "{listed:?}");

    // The writer asks, and waits; then a reader asks, after it.
    let taker = |base: &str, body: Value| {
        let base = base.to_string();
        thread::spawn(move || acquire(&base, "config", body))
    };
    let w = session(&nodes[4], "20s");
    let writer = taker(&nodes[4], json!({ "session": w, "timeout": "15s" }));
    eventually("the writer waits", || waiters(&nodes[0], "config").len() == 1);
    let late = session(&nodes[1], "20s");
    let reader = taker(&nodes[1], json!({ "session": late, "mode": "read", "timeout": "15s" }));
    eventually("the late reader waits", || waiters(&nodes[0], "config").len() == 2);
    let modes: Vec<Value> =
        waiters(&nodes[2], "config").iter().map(|w| w["mode"].clone()).collect();
    assert_eq!(modes, [json!("write"), json!("read")], "writer first, then the reader");

    // The readers leave one by one: the writer waits for the last.
    for (i, (base, id, fence)) in readers.iter().enumerate() {
        thread::sleep(Duration::from_millis(300));
        assert!(!writer.is_finished(), "the writer entered beside {} reader(s)", 4 - i);
        let (status, _) = release(base, "config", id, *fence);
        assert_eq!(status, 200);
    }
    let (status, wrote) = writer.join().unwrap();
    assert_eq!((status, wrote["mode"].as_str()), (200, Some("write")), "{wrote}");
    let written = wrote["fence"].as_u64().unwrap();
    assert!(readers.iter().all(|r| r.2 < written), "the writer's fence is above the readers'");
    thread::sleep(Duration::from_millis(300));
    assert!(!reader.is_finished(), "the late reader entered beside the writer");
    let listed = holders(&nodes[0], "config");
    assert_eq!(listed.len(), 1, "the writer alone: {listed:?}");
    assert_eq!(listed[0]["mode"], "write");
    let (status, _) = release(&nodes[4], "config", &w, written);
    assert_eq!(status, 200);
    let (status, read) = reader.join().unwrap();
    assert_eq!(status, 200, "{read}");
    assert!(read["fence"].as_u64().unwrap() > written, "{read} after {written}");
}

/// Cooperative revocation over HTTP: a revoke at any node reaches each
/// holder's session stream as a `revoke` event with the reason, wherever
/// the holder's node is; nothing is taken (the holder still holds, and
/// listings say it was asked); a watcher that opens late learns of the
/// plea from the first `session` event. Revoking a free lock is a 409,
/// and a bad body a 400, both changing nothing.
#[test]
fn a_revoke_reaches_the_http_holders_as_an_event_and_takes_nothing() {
    let up = Up::start(3, "http-revoke");
    let (n1, n2, n3) = (up.http(1), up.http(2), up.http(3));
    let revoke =
        |base: &str, name: &str, body: Value| post(&format!("{base}/v1/locks/{name}/revoke"), body);
    let (status, free) = revoke(&n3, "pool", json!({}));
    assert_eq!((status, free["error"].as_str()), (409, Some("conflict")), "{free}");
    assert!(free["detail"].as_str().unwrap().contains("free"), "{free}");

    // Two holders of a two-permit lock, at two nodes, each watching.
    let (a, b) = (session(&n1, "10s"), session(&n2, "10s"));
    let (_, first) = acquire(&n1, "pool", json!({ "session": a, "permits": 2 }));
    let (_, second) = acquire(&n2, "pool", json!({ "session": b, "permits": 2 }));
    let fences = [first["fence"].as_u64().unwrap(), second["fence"].as_u64().unwrap()];
    let watch_a = Events::open(&format!("{n1}/v1/sessions/{a}/watch"));
    let watch_b = Events::open(&format!("{n2}/v1/sessions/{b}/watch"));
    for (watch, fence) in [(&watch_a, fences[0]), (&watch_b, fences[1])] {
        let (kind, now) = watch.next();
        assert_eq!(kind, "session");
        assert_eq!(now["held"], json!([{ "name": "pool", "fence": fence, "revoke": null }]));
    }

    let (status, bad) = revoke(&n3, "pool", json!({ "why": "x" }));
    assert_eq!(status, 400, "{bad}");
    let long = "x".repeat(2000);
    let (status, bad) = revoke(&n3, "pool", json!({ "reason": long }));
    assert_eq!(status, 400, "an overlong reason: {bad}");
    assert!(holders(&n3, "pool").iter().all(|h| h["revoke"].is_null()), "nobody was asked");

    let (status, asked) = revoke(&n3, "pool", json!({ "reason": "resize" }));
    assert_eq!(status, 200, "{asked}");
    assert_eq!(asked, json!({ "name": "pool", "holders": 2, "unreachable": [] }));
    for (watch, fence) in [(&watch_a, fences[0]), (&watch_b, fences[1])] {
        let (kind, plea) = watch.next();
        assert_eq!(kind, "revoke");
        assert_eq!(plea, json!({ "name": "pool", "fence": fence, "reason": "resize" }));
    }
    for (base, asked) in [(&n1, 1), (&n2, 1), (&n3, 0)] {
        let text = curl(&[&format!("{base}/metrics")]);
        let line = format!("coterie_revoke_asked_total {asked}\n");
        assert!(text.contains(&line), "{base}: no {line:?} in\n{text}");
    }
    let listed = holders(&n1, "pool");
    assert_eq!(listed.len(), 2, "nothing was taken: {listed:?}");
    assert!(listed.iter().all(|h| h["revoke"] == "resize"), "{listed:?}");
    let late = Events::open(&format!("{n1}/v1/sessions/{a}/watch"));
    let (_, now) = late.next();
    assert_eq!(now["held"][0]["revoke"], "resize", "{now}");

    // The holders decide: one lets go, and the next holder is not asked.
    let (status, _) = release(&n1, "pool", &a, fences[0]);
    assert_eq!(status, 200);
    let c = session(&n3, "10s");
    let (status, third) = acquire(&n3, "pool", json!({ "session": c, "permits": 2 }));
    assert_eq!(status, 200, "{third}");
    let asked: Vec<bool> = holders(&n2, "pool").iter().map(|h| !h["revoke"].is_null()).collect();
    assert_eq!(asked, [true, false], "only the holders of the moment were asked");
}

#[test]
fn sessions_take_and_release_named_locks_beside_the_cli() {
    let up = Up::start(3, "http-basic");
    let (n1, n2, n3) = (up.http(1), up.http(2), up.http(3));
    let a = session(&n1, "5s");
    let b = session(&n2, "5s");
    // `jobs/nightly`, percent-encoded in the path.
    let name = "jobs%2Fnightly";
    let (status, first) = acquire(&n1, name, json!({ "session": a, "timeout": "5s" }));
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["name"], "jobs/nightly");
    assert_eq!(first["node"], 1);
    let fence = first["fence"].as_u64().unwrap();
    // Another session is refused a try, and another name is free.
    let (status, busy) = acquire(&n2, name, json!({ "session": b, "try": true }));
    assert_eq!((status, busy["error"].as_str()), (409, Some("busy")), "{busy}");
    let (status, other) = acquire(&n2, "printer-2", json!({ "session": b, "try": true }));
    assert_eq!(status, 200, "two names are held at once: {other}");
    // Any node lists the holder, as `coterie locks` does.
    let listed = holders(&n3, name);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!((listed[0]["node"].as_u64(), listed[0]["fence"].as_u64()), (Some(1), Some(fence)));
    // The CLI is refused it too: one lock, whoever asks.
    let cli = lock_now(&up, 3, &["--try", "jobs/nightly"], &["true"]);
    assert_eq!(cli.status.code(), Some(75), "{}", String::from_utf8_lossy(&cli.stderr));
    // A release names the fence it releases.
    let (status, wrong) = release(&n1, name, &a, fence + 1);
    assert_eq!((status, wrong["error"].as_str()), (409, Some("not held")), "{wrong}");
    let (status, _) = release(&n2, name, &b, fence);
    assert_eq!(status, 409, "session b holds no such fence");
    // A session lives at the node that made it.
    let (status, _) = release(&n1, name, &b, fence);
    assert_eq!(status, 404, "session b is node 2's");
    let (status, done) = release(&n1, name, &a, fence);
    assert_eq!(status, 200, "{done}");
    // The next holder's fence is higher, through either door.
    let (status, second) = acquire(&n2, name, json!({ "session": b, "timeout": "5s" }));
    assert_eq!(status, 200, "{second}");
    assert!(second["fence"].as_u64().unwrap() > fence, "{first} then {second}");
    // Closing a session releases what it holds: the CLI takes the lock.
    let (status, _) = call("DELETE", &format!("{n2}/v1/sessions/{b}"), None, None);
    assert_eq!(status, 200);
    let cli = lock_now(
        &up,
        3,
        &["--timeout", "5s", "jobs/nightly"],
        &["sh", "-c", "echo $COTERIE_FENCE"],
    );
    assert_eq!(cli.status.code(), Some(0), "{}", String::from_utf8_lossy(&cli.stderr));
    let cli_fence: u64 = String::from_utf8_lossy(&cli.stdout).trim().parse().unwrap();
    assert!(cli_fence > second["fence"].as_u64().unwrap());
    // A closed session is gone.
    let (status, gone) = call("POST", &format!("{n2}/v1/sessions/{b}/keepalive"), None, None);
    assert_eq!((status, gone["error"].as_str()), (404, Some("unknown session")), "{gone}");
}

#[test]
fn a_session_that_misses_its_ttl_loses_its_lock_to_the_waiter() {
    let up = Up::start(3, "http-ttl");
    let (n1, n2) = (up.http(1), up.http(2));
    let lapsing = session(&n1, "1s");
    let (status, held) = acquire(&n1, "jobs", json!({ "session": lapsing }));
    assert_eq!(status, 200, "{held}");
    let waiting = session(&n2, "2s");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    keep_alive(n2.clone(), waiting.clone(), stop.clone());
    let asked = Instant::now();
    let (status, granted) = acquire(&n2, "jobs", json!({ "session": waiting, "timeout": "20s" }));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(status, 200, "the waiter gets the lock once the holder's session lapses: {granted}");
    assert!(asked.elapsed() >= Duration::from_millis(500), "granted before the ttl ran out");
    assert!(granted["fence"].as_u64() > held["fence"].as_u64());
    let (status, _) = call("POST", &format!("{n1}/v1/sessions/{lapsing}/keepalive"), None, None);
    assert_eq!(status, 404, "a lapsed session is gone");
    let (status, _) = release(&n1, "jobs", &lapsing, held["fence"].as_u64().unwrap());
    assert_eq!(status, 404);
}

#[test]
fn a_waiting_session_that_stops_its_keepalives_is_never_granted() {
    let up = Up::start(3, "http-silent-waiter");
    let (n1, n2, n3) = (up.http(1), up.http(2), up.http(3));
    let holder = session(&n1, "2s");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    keep_alive(n1.clone(), holder.clone(), stop.clone());
    let (status, held) = acquire(&n1, "jobs", json!({ "session": holder }));
    assert_eq!(status, 200, "{held}");
    // A waiter that never keeps its session alive: its wait ends with it.
    let silent = session(&n2, "1s");
    let (status, lapsed) = acquire(&n2, "jobs", json!({ "session": silent }));
    assert_eq!((status, lapsed["error"].as_str()), (404, Some("unknown session")), "{lapsed}");
    let (status, _) = release(&n1, "jobs", &holder, held["fence"].as_u64().unwrap());
    assert_eq!(status, 200);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    // Nobody holds it now (not the silent waiter), and anyone can take it.
    thread::sleep(Duration::from_millis(300));
    assert!(holders(&n3, "jobs").is_empty(), "the lapsed waiter was granted");
    let next = session(&n3, "5s");
    let (status, body) = acquire(&n3, "jobs", json!({ "session": next, "try": true }));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn bad_input_gets_a_json_error_and_changes_nothing() {
    let up = Up::start(3, "http-bad-input");
    let n1 = up.http(1);
    let id = session(&n1, "5s");
    let url = format!("{n1}/v1/locks/jobs/acquire");
    let huge = format!("{{\"session\": \"{id}\", \"value\": \"{}\"}}", "x".repeat(100_000));
    let n2 = up.http(2);
    let with_id = json!({ "session": id }).to_string();
    let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
        ("malformed JSON", url.clone(), Some("{\"session\":".into()), 400, ""),
        ("an array for an object", url.clone(), Some(json!([id]).to_string()), 400, ""),
        (
            "an unknown field",
            url.clone(),
            Some(json!({ "session": id, "colour": 1 }).to_string()),
            400,
            "",
        ),
        ("a huge body", url.clone(), Some(huge), 413, ""),
        (
            "a control character in the name",
            format!("{n1}/v1/locks/a%01b/acquire"),
            Some(json!({ "session": id }).to_string()),
            400,
            "",
        ),
        (
            "a name over 256 bytes",
            format!("{n1}/v1/locks/{}/acquire", "n".repeat(300)),
            Some(json!({ "session": id }).to_string()),
            400,
            "",
        ),
        (
            "an unknown session",
            url.clone(),
            Some(json!({ "session": "feed" }).to_string()),
            404,
            "",
        ),
        (
            "a bad timeout",
            url.clone(),
            Some(json!({ "session": id, "timeout": "soon" }).to_string()),
            400,
            "",
        ),
        (
            "a value over 4,096 bytes",
            url.clone(),
            Some(json!({ "session": id, "value": "v".repeat(5000) }).to_string()),
            400,
            "",
        ),
        (
            "a ttl of zero",
            format!("{n1}/v1/sessions"),
            Some(json!({ "ttl": "0s" }).to_string()),
            400,
            "",
        ),
        (
            "a release of nothing held",
            format!("{n1}/v1/locks/jobs/release"),
            Some(json!({ "session": id, "fence": 7 }).to_string()),
            409,
            "",
        ),
        ("an unknown path", format!("{n1}/v2/locks"), None, 404, ""),
        (
            "a GET of a path that takes POST",
            format!("{n1}/v1/sessions"),
            None,
            405,
            "does not take GET",
        ),
        (
            "a name that is not UTF-8",
            format!("{n1}/v1/locks/bad%FF/acquire"),
            Some(with_id.clone()),
            400,
            "percent-encoded UTF-8",
        ),
        (
            "a slash left unencoded",
            format!("{n1}/v1/locks/jobs/nightly/acquire"),
            Some(with_id.clone()),
            404,
            "jobs%2Fnightly",
        ),
        (
            "a 10,000-byte name",
            format!("{n1}/v1/locks/{}/acquire", "n".repeat(10_000)),
            Some(with_id.clone()),
            400,
            "(10000 bytes)",
        ),
        (
            "try and a timeout",
            url.clone(),
            Some(json!({ "session": id, "try": true, "timeout": "1s" }).to_string()),
            400,
            "one or the other",
        ),
        (
            "a session made at another node",
            format!("{n2}/v1/locks/jobs/acquire"),
            Some(with_id.clone()),
            404,
            "node that made it",
        ),
    ];
    for (what, url, body, expected, says) in cases {
        let method = if body.is_some() { "POST" } else { "GET" };
        let (status, answer) = call(method, &url, body.as_deref(), None);
        assert_eq!(status, expected, "{what}: {answer}");
        assert!(answer["error"].is_string() && answer["detail"].is_string(), "{what}: {answer}");
        let detail = answer["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{what}: {detail}");
        assert!(detail.len() < 400, "{what}: a {}-byte message", detail.len());
    }
    // A body over the limit sent whole, without `Expect: 100-continue`,
    // still gets its 413 (the node reads it to its end before answering).
    let dir = scratch("http-huge-body");
    let file = dir.0.join("body.json");
    std::fs::write(&file, format!("{{\"value\": \"{}\"}}", "x".repeat(8 << 20))).unwrap();
    let out = Command::new("curl")
        .args(curl_tls())
        .args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-H", "Expect:", "--data-binary"])
        .arg(format!("@{}", file.display()))
        .args(["-H", "content-type: application/json", &url])
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("\n413"), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("body too large"), "{text}");
    // Nothing changed: the session is alive and takes the lock.
    let (status, body) = acquire(&n1, "jobs", json!({ "session": id, "try": true }));
    assert_eq!(status, 200, "{body}");
    let (status, health) = call("GET", &format!("{n1}/healthz"), None, None);
    assert_eq!((status, health["sessions"].as_u64()), (200, Some(1)), "{health}");
}

#[test]
fn with_a_secret_the_api_asks_for_a_bearer_token() {
    let dir = scratch("http-token");
    let security = api_security(&dir.0, "# one per line\ns3cret-token\n");
    let up = Up::start_with(3, "http-token", &security);
    let url = format!("{}/v1/sessions", up.http(1));
    let body = json!({ "ttl": "5s" }).to_string();
    let (status, none) = call("POST", &url, Some(&body), None);
    assert_eq!((status, none["error"].as_str()), (401, Some("unauthorized")), "{none}");
    let (status, wrong) = call("POST", &url, Some(&body), Some("s3cret-tokeN"));
    assert_eq!(status, 401, "{wrong}");
    let (status, made) = call("POST", &url, Some(&body), Some("s3cret-token"));
    assert_eq!(status, 200, "{made}");

    // The Rust client (coterie-client's HttpClient, under `coterie
    // workload --http`) finds the token in the configuration, and takes
    // and releases over keep-alive connections at every node.
    let workload = |env: &[(&str, &str)], more: &[&str]| {
        let mut args = vec!["workload", "--config", up.config(), "--http", "--clients", "2"];
        args.extend(more);
        args.extend(["--no-witness", "--json"]);
        let out = Command::new(BIN).args(&args).envs(env.iter().copied()).output().unwrap();
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        report
    };
    let report = workload(&[], &["--requests", "40"]);
    assert_eq!(report["entries"], 3 * 2 * 40, "{report}");
    assert_eq!((report["errors"].as_u64(), report["unanswered"].as_u64()), (Some(0), Some(0)));
    // With a wrong token it gets nothing, and says so in its errors.
    let report = workload(&[("COTERIE_TOKEN", "nope")], &["--duration", "1s"]);
    assert_eq!(report["entries"], 0, "{report}");
    assert!(report["errors"].as_u64() > Some(0), "{report}");
}

/// A stream of Server-Sent Events read with `curl -N`, as it comes.
struct Events {
    child: std::process::Child,
    events: std::sync::mpsc::Receiver<(String, Value)>,
}

impl Events {
    fn open(url: &str) -> Events {
        use std::io::BufRead;
        let mut child = Command::new("curl")
            .args(curl_tls())
            .args(["-sN", url])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run curl");
        let stdout = child.stdout.take().unwrap();
        let (tx, events) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let mut kind = String::new();
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(k) = line.strip_prefix("event: ") {
                    kind = k.to_string();
                } else if let Some(data) = line.strip_prefix("data: ") {
                    let data = serde_json::from_str(data).unwrap_or(Value::Null);
                    if tx.send((kind.clone(), data)).is_err() {
                        return;
                    }
                }
            }
        });
        Events { child, events }
    }

    /// The next event, which must come within 10 s.
    fn next(&self) -> (String, Value) {
        self.events.recv_timeout(Duration::from_secs(10)).expect("an event within 10 s")
    }

    /// The next event of kind `kind` for which `want` holds, skipping others.
    fn until(&self, kind: &str, want: impl Fn(&Value) -> bool) -> Value {
        loop {
            let (k, data) = self.next();
            if k == kind && want(&data) {
                return data;
            }
        }
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn elections_campaign_proclaim_and_resign_and_the_streams_see_each_change() {
    let up = Up::start(3, "http-elect");
    let (n1, n2, n3) = (up.http(1), up.http(2), up.http(3));
    let node = Events::open(&format!("{n1}/v1/watch"));
    let (kind, first) = node.next();
    assert_eq!((kind.as_str(), first["node"].as_u64()), ("event", Some(1)), "{first}");
    assert!(first["event"]["Snapshot"].is_object(), "a snapshot first: {first}");
    let observer = Events::open(&format!("{n3}/v1/elections/sched/observe"));
    let (kind, now) = observer.next();
    assert_eq!((kind.as_str(), &now["leader"]), ("leader", &Value::Null), "{now}");
    let watch = Events::open(&format!("{n2}/v1/locks/sched/watch"));
    let (kind, free) = watch.next();
    assert_eq!((kind.as_str(), free["holders"].as_array().map(Vec::len)), ("lock", Some(0)));

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let a = session(&n1, "5s");
    keep_alive(n1.clone(), a.clone(), stop.clone());
    let campaign = |base: &str, s: &str, v: &str| {
        post(&format!("{base}/v1/elections/sched/campaign"), json!({ "session": s, "value": v }))
    };
    let (status, led) = campaign(&n1, &a, "v1");
    assert_eq!(status, 200, "{led}");
    let f1 = led["fence"].as_u64().unwrap();
    assert_eq!((led["value"].as_str(), led["node"].as_u64()), (Some("v1"), Some(1)));
    let seen = observer.until("leader", |r| !r["leader"].is_null());
    assert_eq!(seen["leader"], json!({ "node": 1, "value": "v1", "fence": f1 }));
    let lock = watch.until("lock", |l| l["holders"].as_array().is_some_and(|h| !h.is_empty()));
    assert_eq!(
        (lock["holders"][0]["fence"].as_u64(), &lock["holders"][0]["value"]),
        (Some(f1), &json!("v1"))
    );
    node.until("event", |e| e["event"]["Granted"]["name"] == "sched");

    // A proclamation: the same leadership, a new value, seen everywhere.
    let (status, proclaimed) =
        post(&format!("{n1}/v1/elections/sched/proclaim"), json!({ "session": a, "value": "v2" }));
    assert_eq!((status, proclaimed["fence"].as_u64()), (200, Some(f1)), "{proclaimed}");
    let seen = observer.until("leader", |r| r["leader"]["value"] == "v2");
    assert_eq!(seen["leader"]["fence"].as_u64(), Some(f1));
    let (_, leader) = call("GET", &format!("{n2}/v1/elections/sched"), None, None);
    assert_eq!(leader["leader"]["value"], "v2", "{leader}");

    // Another session may not proclaim or resign; it campaigns and waits.
    let b = session(&n2, "5s");
    keep_alive(n2.clone(), b.clone(), stop.clone());
    let proclaim = json!({ "session": b, "value": "x" });
    for (verb, body) in [("proclaim", proclaim), ("resign", json!({ "session": b }))] {
        let (status, refused) = post(&format!("{n2}/v1/elections/sched/{verb}"), body);
        assert_eq!((status, refused["error"].as_str()), (409, Some("not leader")), "{refused}");
    }
    let ended = Events::open(&format!("{n2}/v1/sessions/{b}/watch"));
    let (kind, now) = ended.next();
    assert_eq!((kind.as_str(), now["id"].as_str()), ("session", Some(b.as_str())), "{now}");
    let (n2c, bc) = (n2.clone(), b.clone());
    let second = thread::spawn(move || campaign(&n2c, &bc, "w"));
    watch.until("lock", |l| l["waiters"].as_array().is_some_and(|w| w.len() == 1));
    let (status, resigned) =
        post(&format!("{n1}/v1/elections/sched/resign"), json!({ "session": a }));
    assert_eq!((status, resigned["fence"].as_u64()), (200, Some(f1)), "{resigned}");
    let (status, led) = second.join().unwrap();
    assert_eq!(status, 200, "{led}");
    let f2 = led["fence"].as_u64().unwrap();
    assert!(f2 > f1, "a later leader's fence is higher: {f1} then {f2}");
    let seen = observer.until("leader", |r| r["leader"]["node"] == 2);
    assert_eq!(seen["leader"], json!({ "node": 2, "value": "w", "fence": f2 }));
    // Each node counts the named elections its sessions won.
    for (base, won) in [(&n1, 1), (&n2, 1), (&n3, 0)] {
        let text = curl(&[&format!("{base}/metrics")]);
        let line = format!("coterie_elections_won_total {won}\n");
        assert!(text.contains(&line), "{base}: no {line:?} in\n{text}");
    }

    // Closing the leader's session ends its leadership; its watch says so.
    let (status, _) = call("DELETE", &format!("{n2}/v1/sessions/{b}"), None, None);
    assert_eq!(status, 200);
    let (kind, end) = ended.next();
    assert_eq!(kind, "ended");
    assert_eq!(
        end,
        json!({
            "id": b,
            "reason": "closed",
            "held": [{ "name": "sched", "fence": f2, "revoke": null }]
        })
    );
    observer.until("leader", |r| r["leader"].is_null());
    watch.until("lock", |l| l["holders"].as_array().is_some_and(Vec::is_empty));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    // An unknown session's watch is a 404, as for every call about it.
    let (status, _) = call("GET", &format!("{n2}/v1/sessions/{b}/watch"), None, None);
    assert_eq!(status, 404);
}

#[test]
fn cli_and_http_clients_on_one_name_never_overlap_and_their_fences_rise() {
    use std::io::Write;
    let up = std::sync::Arc::new(Up::start(3, "http-mixed"));
    let dir = scratch("http-mixed");
    // The witness: a file every holder appends to as it enters and leaves
    // (O_APPEND: each line lands whole, in the order written).
    let log = dir.0.join("witness.log");
    std::fs::File::create(&log).unwrap();
    let rounds = 8;
    let mut clients = Vec::new();
    for node in 1..=3u32 {
        let (cluster, file) = (up.clone(), log.clone());
        clients.push(thread::spawn(move || {
            let (up, log) = (cluster, file);
            let script = format!(
                "echo enter $COTERIE_FENCE >> {0}; sleep 0.01; echo leave $COTERIE_FENCE >> {0}",
                log.display()
            );
            for _ in 0..rounds {
                let out =
                    lock_now(&up, node, &["--timeout", "30s", "mixed"], &["sh", "-c", &script]);
                assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
            }
        }));
        let (base, log) = (up.http(node), log.clone());
        clients.push(thread::spawn(move || {
            let id = session(&base, "5s");
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            keep_alive(base.clone(), id.clone(), stop.clone());
            let append = |line: String| {
                let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
                f.write_all(line.as_bytes()).unwrap();
            };
            for _ in 0..rounds {
                let (status, granted) =
                    acquire(&base, "mixed", json!({ "session": id, "timeout": "30s" }));
                assert_eq!(status, 200, "{granted}");
                let fence = granted["fence"].as_u64().unwrap();
                append(format!("enter {fence}\n"));
                thread::sleep(Duration::from_millis(10));
                append(format!("leave {fence}\n"));
                let (status, done) = release(&base, "mixed", &id, fence);
                assert_eq!(status, 200, "{done}");
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }));
    }
    for c in clients {
        c.join().unwrap();
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<(&str, u64)> = text
        .lines()
        .map(|l| {
            let (what, fence) = l.split_once(' ').unwrap();
            (what, fence.parse().unwrap())
        })
        .collect();
    assert_eq!(lines.len(), 2 * 2 * 3 * rounds, "every entry entered and left:\n{text}");
    let mut last = 0;
    for pair in lines.chunks(2) {
        let [(enter, f), (leave, g)] = pair else { unreachable!() };
        assert_eq!((*enter, *leave, f), ("enter", "leave", g), "two holders overlapped:\n{text}");
        assert!(*f > last, "fence {f} after {last}: fences must rise:\n{text}");
        last = *f;
    }
}

/// Lets this process open `wanted` files, if its hard limit allows: the
/// number it may open.
fn open_files(wanted: u64) -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read or write only the struct given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted.min(limit.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
    limit.rlim_cur
}

/// The files node `pid` has open.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

#[test]
fn ten_thousand_idle_connections_are_capped_then_closed_and_change_nothing() {
    if plain_only("ten_thousand_idle_connections_are_capped_then_closed_and_change_nothing") {
        return;
    }
    use std::io::Read;
    use std::net::TcpStream;
    let (cap, idle) = (2000, Duration::from_secs(15));
    let up = Up::start_with(3, "http-idle", |c| {
        c.limits.max_http = cap;
        c.limits.http_idle = idle;
    });
    let (n1, n2) = (up.http(1), up.http(2));
    // A lock held through node 2's API, kept alive throughout.
    let id = session(&n2, "3s");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    keep_alive(n2.clone(), id.clone(), stop.clone());
    let (status, held) = acquire(&n2, "kept", json!({ "session": id, "try": true }));
    assert_eq!(status, 200, "{held}");
    let pid = up.node_pid(1);
    let before = fds(pid);

    // 10,000 connections to node 1's API that never send a byte (fewer
    // only if this machine's hard limit on open files forbids them).
    let wanted = (open_files(10_300) - 300).min(10_000) as usize;
    let addr = n1.trim_start_matches("http://").to_string();
    let began = Instant::now();
    let mut idle_conns: Vec<TcpStream> = (0..wanted)
        .map(|i| TcpStream::connect(&addr).unwrap_or_else(|e| panic!("connection {i}: {e}")))
        .collect();
    let connected = began.elapsed();
    eprintln!("{wanted} connections opened in {connected:?}");

    // While they are open: the peers, the binary protocol and the other
    // nodes' APIs go on as before.
    let out = lock_now(&up, 1, &["--timeout", "10s", "busy-node"], &["true"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(agreed(&up.status()).is_some_and(|(_, n_up)| n_up == 3), "{:?}", up.status());
    assert_eq!(holders(&n2, "kept").len(), 1);
    // Node 1 itself answers, or says in JSON why not.
    let (status, answer) = call("GET", &format!("{n1}/healthz"), None, None);
    assert!(
        status == 200 || (status == 503 && answer["error"] == "unavailable"),
        "{status} {answer}"
    );

    // Those beyond the cap were told why, in a JSON 503, and closed.
    let mut refused = 0;
    for conn in &mut idle_conns {
        conn.set_nonblocking(true).unwrap();
        let mut answer = Vec::new();
        match conn.read_to_end(&mut answer) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("an idle connection: {e} after {answer:?}"),
        }
        if answer.is_empty() {
            continue; // Held, or closed for idling already (a slow machine).
        }
        let text = String::from_utf8_lossy(&answer);
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
        assert!(head.starts_with("HTTP/1.1 503 "), "{text}");
        let body: Value = serde_json::from_str(body).expect("a JSON body");
        assert_eq!(body["error"], "unavailable", "{body}");
        assert!(body["detail"].as_str().unwrap().contains("max_http"), "{body}");
        refused += 1;
    }
    eprintln!("{refused} refused with a 503");
    if connected < idle {
        // None of the first `cap` could have timed out yet.
        assert_eq!(refused, wanted - cap, "the cap holds exactly {cap}");
    } else {
        assert!(refused > 0);
    }

    // Within the idle timeout (and a margin), node 1 closes every one.
    let deadline = began + idle + Duration::from_secs(10);
    for conn in &mut idle_conns {
        conn.set_nonblocking(false).unwrap();
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        conn.set_read_timeout(Some(left)).unwrap();
        let mut sink = Vec::new();
        match conn.read_to_end(&mut sink) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("an idle connection still open after {:?}: {e}", began.elapsed()),
        }
    }
    drop(idle_conns);
    // Nothing else changed: node 1 answers, gave its descriptors back,
    // and the lock held throughout is still held by its session.
    let (status, health) = call("GET", &format!("{n1}/healthz"), None, None);
    assert_eq!(status, 200, "{health}");
    let settled = Instant::now();
    while fds(pid) > before + 20 && settled.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(100));
    }
    assert!(fds(pid) <= before + 20, "node 1 holds {} files, {before} before", fds(pid));
    let held_now = holders(&n2, "kept");
    assert_eq!(held_now.len(), 1, "{held_now:?}");
    assert_eq!(held_now[0]["fence"], held["fence"], "{held_now:?}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
}
