//! Real nodes on loopback sockets, in one process: the lock, failover, and
//! what happens to bad input and vanishing clients.
//!
//! Deadlines here bound liveness (a test that would hang fails instead);
//! they are generous and assert nothing about speed.

use coterie_core::wire::{Hello, PeerFrame, PROTOCOL_VERSION};
use coterie_core::NodeId;
use coterie_node::codec::{read_frame, write_frame};
use coterie_node::config::DetectorChoice;
use coterie_node::node;
use coterie_node::protocol::FaultCommand;
use coterie_node::{witness, Acquired, Client, Entry, WitnessClient};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

mod support;
use support::{bound_config, exclusive, plain_only, TestCluster, PATIENCE};

/// Several clients on every node: never two inside at once, fences rising.
async fn exclusive_with_rising_fences(mutex: &str) {
    let cluster = TestCluster::start(3, mutex).await;
    exclusive(&cluster, 25, || {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn centralized_lock_is_exclusive_and_fences_rise() {
    exclusive_with_rising_fences("centralized").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ricart_agrawala_lock_is_exclusive_and_fences_rise() {
    exclusive_with_rising_fences("ricart-agrawala").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_coordinator_is_replaced_and_the_lock_keeps_working() {
    let mut cluster = TestCluster::start(3, "centralized").await;
    let mut holder = cluster.client(1).await;
    let Acquired::Granted(before) = holder.acquire(Some(PATIENCE), false).await.unwrap() else {
        panic!("not granted")
    };
    holder.release().await.unwrap();
    cluster.stop(3);
    cluster.agreed_on(2).await;
    let mut client = cluster.client(1).await;
    let Acquired::Granted(after) = client.acquire(Some(PATIENCE), false).await.unwrap() else {
        panic!("not granted after failover")
    };
    assert!(after > before, "the new coordinator's fence {after} exceeds {before}");
}

/// Until every node but `hung` that runs counts `hung` as `up`.
async fn all_count(cluster: &TestCluster, hung: u32, up: bool) {
    let wait = async {
        loop {
            let mut all = true;
            for id in (1..=cluster.stops.len() as u32).filter(|&id| id != hung) {
                let status = cluster.client(id).await.status().await.unwrap();
                all &= status.alive.contains(&hung) == up;
            }
            if all {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let what = if up { "up again" } else { "down" };
    if tokio::time::timeout(PATIENCE, wait).await.is_err() {
        let mut seen = Vec::new();
        for id in (1..=cluster.stops.len() as u32).filter(|&id| id != hung) {
            let s = cluster.client(id).await.status().await.unwrap();
            seen.push(format!("n{id}: alive {:?}, follows {:?}", s.alive, s.coordinator));
        }
        panic!("n{hung} never {what}: {}", seen.join("; "));
    }
}

/// The ring detector on seven nodes: n2 is watched by n1 and n7 only. It
/// hangs; they suspect it and say so, and the others check it for
/// themselves, so every node counts it down and Ricart–Agrawala, which
/// waits for every peer counted up, grants again. It comes back and
/// every node counts it up. Then the coordinator hangs: every node
/// watches it, and they agree on the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_ring_every_node_finds_a_hang_it_does_not_watch() {
    let mut cluster = TestCluster::start_with(7, "ricart-agrawala", |c| {
        c.timing.detector = DetectorChoice::Ring;
        c.timing.watch = 2;
    })
    .await;
    let mut control = cluster.client(2).await;
    control.fault(FaultCommand::Pause).await.unwrap();
    all_count(&cluster, 2, false).await;
    let mut client = cluster.client(4).await;
    assert!(matches!(client.acquire(Some(PATIENCE), false).await.unwrap(), Acquired::Granted(_)));
    client.release().await.unwrap();
    control.fault(FaultCommand::Resume).await.unwrap();
    all_count(&cluster, 2, true).await;
    let mut coordinator = cluster.client(7).await;
    coordinator.fault(FaultCommand::Pause).await.unwrap();
    all_count(&cluster, 7, false).await;
    cluster.stop(7);
    cluster.agreed_on(6).await;
    assert!(matches!(client.acquire(Some(PATIENCE), false).await.unwrap(), Acquired::Granted(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_vanishes_while_holding_is_released() {
    let cluster = TestCluster::start(3, "centralized").await;
    let mut first = cluster.client(1).await;
    assert!(matches!(first.acquire(Some(PATIENCE), false).await.unwrap(), Acquired::Granted(_)));
    // A holder keeps its session alive (it is a lease) until it vanishes.
    let holding = tokio::spawn(async move { first.lost().await });
    let mut second = cluster.client(2).await;
    assert_eq!(
        second.acquire(Some(Duration::from_millis(600)), false).await.unwrap(),
        Acquired::TimedOut,
        "held by the first client"
    );
    holding.abort();
    let _ = holding.await;
    assert!(matches!(second.acquire(Some(PATIENCE), false).await.unwrap(), Acquired::Granted(_)));
}

/// A plea to let go reaches a Rust holder between answers, in any of its
/// calls: `hold_event` hears it (one the holder's own call read first is
/// kept for it), `lost` passes over it, and nothing is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plea_to_let_go_reaches_the_holder_and_takes_nothing() {
    let cluster = TestCluster::start(3, "ricart-agrawala").await;
    let mut holder = cluster.client(1).await;
    let Acquired::Granted(fence) = holder.acquire(Some(PATIENCE), false).await.unwrap() else {
        panic!("not granted");
    };
    let mut other = cluster.client(3).await;
    let asked = other.revoke("default", Some("rotate".into())).await.unwrap();
    assert_eq!(asked, (1, vec![]));
    let want = coterie_node::protocol::RevokeAsked {
        name: "default".into(),
        fence,
        reason: Some("rotate".into()),
    };
    let heard = tokio::time::timeout(PATIENCE, holder.hold_event()).await.unwrap();
    assert_eq!(heard, coterie_node::HoldEvent::RevokeAsked(want.clone()));
    // Asked while the holder waits for another answer: kept for it.
    other.revoke("default", Some("rotate".into())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(holder.status().await.unwrap().cs_state, coterie_core::CsState::Held);
    let heard = tokio::time::timeout(PATIENCE, holder.hold_event()).await.unwrap();
    assert_eq!(heard, coterie_node::HoldEvent::RevokeAsked(want));
    // `lost` passes over pleas (and keeps the lease): the holder still
    // holds after one.
    let keeping = tokio::spawn(async move {
        let kept = tokio::time::timeout(Duration::from_millis(1000), holder.lost()).await;
        (holder, kept)
    });
    other.revoke("default", None).await.unwrap();
    assert_eq!(other.acquire(None, true).await.unwrap(), Acquired::Busy, "nothing was taken");
    let (mut holder, kept) = keeping.await.unwrap();
    assert!(kept.is_err(), "a plea is no loss: {kept:?}");
    holder.release().await.unwrap();
    let free = other.revoke("default", None).await;
    assert!(
        matches!(free, Err(coterie_node::ClientError::Refused(ref why)) if why.contains("free"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_vanishes_while_waiting_gives_up_its_place() {
    if plain_only("client_that_vanishes_while_waiting_gives_up_its_place") {
        return;
    }
    let cluster = TestCluster::start(3, "centralized").await;
    let mut holder = cluster.client(1).await;
    assert!(matches!(holder.acquire(Some(PATIENCE), false).await.unwrap(), Acquired::Granted(_)));
    // A waiter on node 2 gives up by disconnecting mid-wait.
    let mut raw = TcpStream::connect(cluster.client_addr(2)).await.unwrap();
    let request = coterie_node::protocol::ClientRequest::Acquire(
        coterie_node::protocol::Acquire::default_lock(),
    );
    write_frame(&mut raw, &request).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(raw);
    let mut next = cluster.client(2).await;
    holder.release().await.unwrap();
    assert!(matches!(next.acquire(Some(PATIENCE), false).await.unwrap(), Acquired::Granted(_)));
    let status = next.status().await.unwrap();
    assert_eq!(status.cs_state, coterie_core::CsState::Held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_on_a_held_lock_is_busy() {
    let cluster = TestCluster::start(2, "centralized").await;
    let mut holder = cluster.client(1).await;
    assert!(matches!(holder.acquire(None, false).await.unwrap(), Acquired::Granted(_)));
    // A holder keeps its session alive: it is a lease.
    let holding = tokio::spawn(async move { holder.lost().await });
    let mut other = cluster.client(2).await;
    assert_eq!(other.acquire(None, true).await.unwrap(), Acquired::Busy);
    holding.abort();
}

async fn still_serves(cluster: &TestCluster) {
    let mut client = cluster.client(1).await;
    assert!(matches!(client.acquire(Some(PATIENCE), false).await.unwrap(), Acquired::Granted(_)));
    client.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_frames_are_refused_and_the_node_keeps_serving() {
    let cluster = TestCluster::start(2, "centralized").await;
    for addr in [cluster.peer_addr(1), cluster.client_addr(1)] {
        // Random bytes.
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(&[0, 0, 0, 12, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8]).await.unwrap();
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut rest)).await.expect("not closed");
        // A length prefix far over the limit.
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut rest)).await.expect("not closed");
    }
    still_serves(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_for_another_cluster_or_node_is_refused_with_the_reason() {
    if plain_only("hello_for_another_cluster_or_node_is_refused_with_the_reason") {
        return;
    }
    let cluster = TestCluster::start(2, "centralized").await;
    let hello = Hello {
        cluster: "test".into(),
        node: NodeId(2),
        protocol: PROTOCOL_VERSION,
        mutex: "centralized".into(),
        election: "bully".into(),
        detector: "all".into(),
        boot: 1,
        expects: None,
        delivered: 0,
        dial_back: false,
        partitions: "majority".into(),
    };
    let cases = [
        (Hello { cluster: "prod".into(), ..hello.clone() }, "cluster"),
        (Hello { node: NodeId(9), ..hello.clone() }, "not a peer"),
        (Hello { mutex: "ricart-agrawala".into(), ..hello.clone() }, "algorithms"),
        (Hello { detector: "ring, watch 2".into(), ..hello.clone() }, "failure detector"),
        (Hello { protocol: PROTOCOL_VERSION + 1, ..hello }, "protocol"),
    ];
    for (bad, reason) in cases {
        let mut s = TcpStream::connect(cluster.peer_addr(1)).await.unwrap();
        write_frame(&mut s, &PeerFrame::Hello(bad)).await.unwrap();
        let mut buf = Vec::new();
        match read_frame::<PeerFrame, _>(&mut s, &mut buf).await.unwrap() {
            Some(PeerFrame::Refused(why)) => {
                assert!(why.contains(reason), "{why:?} should say {reason}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    still_serves(&cluster).await;
}

/// Maekawa on three nodes: n2 asks {n1, n2}, n3 asks {n1, n3}, so n1's
/// permission is what keeps them apart. n2 holds it and is paused; n1
/// restarts. Were n1 to forget whom it granted, it would hear no RECOVER
/// from the silent n2 and grant n3. It finds n2 named in its state file
/// instead, and n3 waits until n2 carries on and lets go. Written in
/// place and flushed by the group-commit writer alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_arbiter_remembers_whom_it_granted() {
    for sync in [false, true] {
        a_restarted_arbiter_remembers_whom_it_granted_with(sync).await;
    }
}

async fn a_restarted_arbiter_remembers_whom_it_granted_with(sync: bool) {
    let dir = std::env::temp_dir().join(format!("coterie-arbiter-{}-{sync}", std::process::id()));
    // In detector mode: in majority mode the paused holder's node loses
    // its lease, and with it the lock, which is another test's subject.
    let mut cluster = TestCluster::start_with(3, "maekawa", |c| {
        c.cluster.state_dir = Some(dir.clone());
        c.cluster.state_sync = sync;
        c.cluster.partitions = coterie_core::Partitions::Detector;
    })
    .await;
    let mut holder = cluster.client(2).await;
    assert!(matches!(holder.acquire(Some(PATIENCE), false).await.unwrap(), Acquired::Granted(_)));
    let mut control = cluster.client(2).await;
    control.fault(coterie_node::protocol::FaultCommand::Pause).await.unwrap();
    cluster.stop(1);
    cluster.restart(1).await;
    let mut other = cluster.client(3).await;
    let asked = other.acquire(Some(Duration::from_millis(1500)), false).await.unwrap();
    assert_eq!(asked, Acquired::TimedOut, "n1 granted n3 while n2 held its permission");
    control.fault(coterie_node::protocol::FaultCommand::Resume).await.unwrap();
    holder.release().await.unwrap();
    assert!(matches!(other.acquire(Some(PATIENCE), false).await.unwrap(), Acquired::Granted(_)));
    let _ = std::fs::remove_dir_all(dir);
}

/// Every node stops and starts again (a whole-cluster restart, with the
/// resource it guards still running): the fences of the next grants must
/// still be above every fence issued before, or the resource would refuse
/// every holder from then on. Epochs and clocks come back from the state
/// files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_keep_rising_across_a_restart_of_the_whole_cluster() {
    for mutex in ["centralized", "ricart-agrawala", "maekawa", "token-ring"] {
        let dir = std::env::temp_dir()
            .join(format!("coterie-restart-all-{mutex}-{}", std::process::id()));
        let mut cluster = TestCluster::start_with(3, mutex, |c| {
            c.cluster.state_dir = Some(dir.clone());
            c.cluster.state_sync = false;
        })
        .await;
        let mut before = 0;
        for id in 1..=3 {
            let mut client = cluster.client(id).await;
            let Acquired::Granted(fence) = client.acquire(Some(PATIENCE), false).await.unwrap()
            else {
                panic!("{mutex}: not granted");
            };
            client.release().await.unwrap();
            before = before.max(fence);
        }
        for id in 1..=3 {
            cluster.stop(id);
        }
        for id in 1..=3 {
            cluster.restart(id).await;
        }
        cluster.agreed_on(3).await;
        for id in 1..=3 {
            let mut client = cluster.client(id).await;
            let Acquired::Granted(fence) = client.acquire(Some(PATIENCE), false).await.unwrap()
            else {
                panic!("{mutex}: not granted after the restart");
            };
            assert!(fence > before, "{mutex}: fence {fence} after the restart, {before} before");
            client.release().await.unwrap();
        }
        for id in 1..=3 {
            cluster.stop(id);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The fault that deadlocked five algorithms for good before sessions: one
/// node's peer connections, both ways, broken every 300 ms for 6 s while
/// two clients per node go through the witness. Every request must be
/// answered, the witness must see no overlap and no stale fence, and the
/// lock must be had at every node right after. The failure timeout is
/// generous (a reset is not a failure, and a busy test machine must not
/// make it look like one).
async fn resets_lose_nothing(mutex: &str) {
    let cluster = TestCluster::start_with(5, mutex, |c| {
        c.timing.heartbeat = Duration::from_millis(50);
        c.timing.failure_timeout = Duration::from_secs(1);
    })
    .await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let witness_addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(witness::serve(listener, 1, std::future::pending()));
    let resetting = Arc::new(AtomicBool::new(true));
    let mut tasks = Vec::new();
    for id in 1..=5 {
        for _ in 0..2 {
            let mut client = cluster.client(id).await;
            let mut witness = WitnessClient::connect(&witness_addr).await.unwrap();
            let resetting = resetting.clone();
            tasks.push(tokio::spawn(async move {
                let mut entries = 0u32;
                while resetting.load(Ordering::SeqCst) || entries < 3 {
                    match client.acquire(Some(Duration::from_secs(10)), false).await.unwrap() {
                        Acquired::Granted(fence) => {
                            let entry = witness.enter("default", fence, id).await.unwrap();
                            assert!(
                                matches!(entry, Entry::Accepted { violation: false, .. }),
                                "n{id}: the witness saw {entry:?} for fence {fence}"
                            );
                            witness.leave("default", fence).await.unwrap();
                            client.release().await.unwrap();
                            entries += 1;
                        }
                        other => panic!("n{id}: a request was not answered: {other:?}"),
                    }
                }
                entries
            }));
        }
    }
    let mut control = cluster.client(5).await;
    let mut resets = 0;
    let start = tokio::time::Instant::now();
    while start.elapsed() < Duration::from_secs(6) {
        control.fault(FaultCommand::Reset { peers: vec![] }).await.unwrap();
        resets += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    resetting.store(false, Ordering::SeqCst);
    let mut entries = 0;
    for t in tasks {
        entries += tokio::time::timeout(PATIENCE, t).await.expect("workload hung").unwrap();
    }
    let report = WitnessClient::connect(&witness_addr).await.unwrap().report().await.unwrap();
    assert_eq!((report.violations, report.stale_fences), (0, 0), "{mutex}: {report:?}");
    assert_eq!(report.entries, u64::from(entries));
    assert!(resets >= 15, "only {resets} resets");
    // n5 redialled every peer after the resets, and its sessions show it.
    let sessions = control.status().await.unwrap().sessions;
    assert_eq!(sessions.len(), 4, "{sessions:?}");
    for s in &sessions {
        assert!(s.connections >= 2, "{mutex}: n5 never reconnected to n{}: {s:?}", s.peer);
        assert_eq!((s.overflows, s.gaps), (0, 0), "{mutex}: {s:?}");
    }
    for id in 1..=5 {
        let mut client = cluster.client(id).await;
        let granted = client.acquire(Some(PATIENCE), false).await.unwrap();
        assert!(
            matches!(granted, Acquired::Granted(_)),
            "{mutex}: n{id} after the resets: {granted:?}"
        );
        client.release().await.unwrap();
    }
}

macro_rules! reset_tests {
    ($($name:ident: $mutex:literal,)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            resets_lose_nothing($mutex).await;
        }
    )*};
}

reset_tests! {
    centralized_loses_nothing_to_connection_resets: "centralized",
    token_ring_loses_nothing_to_connection_resets: "token-ring",
    bakery_loses_nothing_to_connection_resets: "bakery",
    lamport_loses_nothing_to_connection_resets: "lamport",
    ricart_agrawala_loses_nothing_to_connection_resets: "ricart-agrawala",
    raymond_k_loses_nothing_to_connection_resets: "raymond-k",
    lodha_kshemkalyani_loses_nothing_to_connection_resets: "lodha-kshemkalyani",
    maekawa_loses_nothing_to_connection_resets: "maekawa",
    tree_quorum_loses_nothing_to_connection_resets: "tree-quorum",
}

/// A node whose stable storage refuses writes (its state file is
/// `/dev/full`: every write fails with ENOSPC, root or not) must not send
/// what it could not record: it holds its messages back and stops with the
/// error, and the others carry on without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_state_cannot_be_written_stops_and_the_rest_serve() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        println!("no /dev/full here: skipping");
        return;
    }
    let dir = std::env::temp_dir().join(format!("coterie-full-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(full, dir.join("test-node1.log")).unwrap();
    let (mut cfg, listeners) = bound_config(3, "centralized").await;
    cfg.cluster.state_dir = Some(dir.clone());
    cfg.cluster.state_sync = true;
    let mut outcomes = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let (cfg, (tx, rx)) = (cfg.clone(), oneshot::channel());
        tokio::spawn(async move {
            let _ = tx.send(node::run(cfg, i as u32 + 1, l, std::future::pending()).await);
        });
        outcomes.push(rx);
    }
    let first = outcomes.remove(0);
    let outcome = tokio::time::timeout(PATIENCE, first).await.expect("n1 kept running").unwrap();
    let error = outcome.expect_err("n1 ran on without stable storage").to_string();
    assert!(error.contains("No space left on device"), "{error}");
    // n1's client port is closed; n2 and n3 go on without it.
    let n1 = cfg.node(1).unwrap().client.clone();
    let tls = cfg.client_tls().unwrap();
    let credentials = coterie_node::Credentials { tls, ..Default::default() };
    assert!(Client::connect_with(&n1, Some(&credentials)).await.is_err(), "n1 still takes clients");
    let n2 = cfg.node(2).unwrap().client.clone();
    let mut client = Client::connect_with(&n2, Some(&credentials)).await.unwrap();
    let granted = client.acquire(Some(PATIENCE), false).await.unwrap();
    assert!(matches!(granted, Acquired::Granted(_)), "{granted:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Every log line of this test process, for the tests that check what a
/// node says. Installed once; the nodes' tasks log from any thread.
fn captured_logs() -> Arc<std::sync::Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<std::sync::Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = logs.clone();
        let writer = move || LogWriter(sink.clone());
        let subscriber = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        logs
    })
    .clone()
}

struct LogWriter(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A member that lies, inside the trust boundary (it dialled as node 3 of
/// the cluster; with a secret it would have had to know it): garbage in
/// both layers, another algorithm's message, a grant nobody asked for with
/// the largest fence, a heartbeat with the largest epoch and clock that asks for an
/// answer, and a flood of all of these. Neither honest node panics, holds without asking, or stops
/// serving; each says what it dropped, a line a second at most; once the
/// liar falls silent the two agree again and grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_lies_crashes_nothing_and_grants_nothing_unasked() {
    if plain_only("a_member_that_lies_crashes_nothing_and_grants_nothing_unasked") {
        return;
    }
    use coterie_core::mutex::centralized::CentralizedMsg;
    use coterie_core::mutex::token_ring::TokenMsg;
    use coterie_core::wire::{self, Envelope, Heartbeat};
    use coterie_core::{CsState, Epoch, Fence, Stamp};

    let logs = captured_logs();
    // Detector mode, so that what the liar sends reaches the decoders: in
    // majority mode a node outside the view is dropped before that, as
    // `stale`.
    let mut cluster = TestCluster::start_with(3, "centralized", |c| {
        c.cluster.partitions = coterie_core::Partitions::Detector;
    })
    .await;
    cluster.stop(3);
    cluster.agreed_on(2).await;
    let lies = [
        Envelope::Mutex { name: Default::default(), permits: 1, bytes: vec![0xff; 40] },
        Envelope::Election(vec![0xee; 40]),
        Envelope::Mutex {
            name: Default::default(),
            permits: 1,
            bytes: wire::encode(&TokenMsg::Want { wanter: NodeId(3), hops: u32::MAX }),
        },
        Envelope::Mutex {
            name: Default::default(),
            permits: 1,
            bytes: wire::encode(&CentralizedMsg::Grant {
                epoch: Epoch(u64::MAX),
                request: Stamp { ts: u64::MAX, node: NodeId(3) },
                fence: Fence(u64::MAX),
                clock: u64::MAX,
                lent_until: Some(Fence(u64::MAX)),
            }),
        },
        Envelope::Heartbeat(Heartbeat {
            epoch: Epoch(u64::MAX),
            coordinator: Some(NodeId(3)),
            watermark: u64::MAX,
            incarnation: 424242,
            you: None,
            probe: true,
            readmitted: true,
            lease: coterie_core::membership::Lease::default(),
        }),
    ];
    let mut liars = Vec::new();
    for target in [1, 2] {
        let mut s = TcpStream::connect(cluster.peer_addr(target)).await.unwrap();
        let hello = Hello {
            cluster: "test".into(),
            node: NodeId(3),
            protocol: PROTOCOL_VERSION,
            mutex: "centralized".into(),
            election: "bully".into(),
            detector: "all".into(),
            boot: 424242,
            expects: None,
            delivered: 0,
            dial_back: false,
            partitions: "detector".into(),
        };
        write_frame(&mut s, &PeerFrame::Hello(hello)).await.unwrap();
        let mut buf = Vec::new();
        let welcome = read_frame::<PeerFrame, _>(&mut s, &mut buf).await.unwrap();
        assert!(matches!(welcome, Some(PeerFrame::Welcome { .. })), "{welcome:?}");
        let mut frames = Vec::new();
        for (seq, lie) in (1..).zip(lies.iter().cycle().take(5 * 2000)) {
            let body = wire::encode(lie);
            wire::write_frame(&PeerFrame::Message { seq, ack: 0, body }, &mut frames);
        }
        s.write_all(&frames).await.unwrap();
        liars.push(s);
    }
    // Once each has read the flood (its heartbeats counted): nobody asked,
    // so nobody holds, whatever the grant said.
    for id in [1, 2] {
        let read = async {
            loop {
                let status = cluster.client(id).await.status().await.unwrap();
                if status.messages_received.get("heartbeat").is_some_and(|&n| n >= 2000) {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let status = tokio::time::timeout(PATIENCE, read).await.expect("the flood was never read");
        assert_eq!(status.cs_state, CsState::Idle, "node {id} holds unasked: {status:?}");
        assert_eq!(status.cs_entries, 0, "node {id}");
        assert_eq!(status.fence, None, "node {id}");
    }
    let said = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
    let drops: Vec<&str> = said.lines().filter(|l| l.contains("dropped a message")).collect();
    assert!(
        drops.iter().any(|l| l.contains("undecodable") && l.contains("peer=3")),
        "the drops are not logged: {said}"
    );
    assert!(drops.len() <= 2 * 3, "{} lines for 4000 drops in a moment: {said}", drops.len());
    drop(liars);
    cluster.agreed_on(2).await;
    still_serves(&cluster).await;
}
