//! Real nodes speaking TLS on loopback, in one process: the lock as
//! without it, refusals with their reasons at the peer port, and a
//! tampered peer link that breaks, is redialled and loses nothing.
//!
//! Deadlines bound liveness; they assert nothing about speed.

mod support;

use coterie_core::wire::{Hello, PeerFrame, PROTOCOL_VERSION};
use coterie_core::NodeId;
use coterie_node::codec::{read_frame, write_frame};
use coterie_node::config::Config;
use coterie_node::tls::{self, TlsClient};
use coterie_node::{pki, ClientError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{bound_config, exclusive, TestCluster, PATIENCE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A directory of its own for a test's certificates, removed after.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("coterie-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Makes certificates for `cfg`'s nodes in `dir` and points `cfg` at them.
fn with_tls(cfg: &mut Config, dir: &Path) {
    support::certify(cfg, dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_lock_is_exclusive_and_fences_rise() {
    let dir = Scratch::new("exclusive");
    for mutex in ["centralized", "ricart-agrawala", "maekawa"] {
        let cluster = TestCluster::start_with(3, mutex, |cfg| with_tls(cfg, &dir.0)).await;
        exclusive(&cluster, 15, || {}).await;
    }
}

/// A Hello on the peer port, as node `node` of the test cluster says it,
/// meant for an earlier incarnation of the node dialled: let in, it is
/// answered with a Welcome and closed, and changes nothing.
fn hello(node: u32) -> Hello {
    Hello {
        cluster: "test".into(),
        node: NodeId(node),
        protocol: PROTOCOL_VERSION,
        mutex: "centralized".into(),
        election: "bully".into(),
        detector: "all".into(),
        boot: 1,
        expects: Some(1),
        delivered: 0,
        dial_back: false,
        partitions: "majority".into(),
    }
}

/// Node 1's answer to `hello` on its peer port over TLS, shown as the
/// certificate `cert` of `dir` (node 2's, say) from the CA of `ca_dir`.
async fn peer_answer(
    cluster: &TestCluster,
    dir: &Path,
    ca_dir: &Path,
    cert: &str,
    hello: Hello,
) -> Result<Option<PeerFrame>, String> {
    let (cert, key) = (dir.join(format!("{cert}.pem")), dir.join(format!("{cert}.key")));
    let client = TlsClient::from_files(&ca_dir.join("ca.pem"), Some((&cert, &key))).unwrap();
    let tcp = TcpStream::connect(cluster.peer_addr(1)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(tls::node_name(1)).unwrap();
    let mut stream = client.connect(name, tcp).await.map_err(|e| tls::explain(&e))?;
    write_frame(&mut stream, &PeerFrame::Hello(hello)).await.map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    read_frame::<PeerFrame, _>(&mut stream, &mut buf).await.map_err(|e| {
        tls::explain(&match e {
            coterie_node::codec::FrameError::Io(e) => e,
            other => std::io::Error::other(other.to_string()),
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_port_refuses_another_ca_another_nodes_certificate_and_plain_tcp() {
    let (dir, foreign) = (Scratch::new("peer-refusals"), Scratch::new("peer-foreign"));
    let cluster = TestCluster::start_with(3, "centralized", |cfg| with_tls(cfg, &dir.0)).await;
    let mut other = cluster.cfg.clone();
    pki::make(&mut other, &foreign.0, Duration::from_secs(3600)).unwrap();

    // Node 2's own certificate, saying it is node 2: let in.
    let answer = peer_answer(&cluster, &dir.0, &dir.0, "node2", hello(2)).await;
    assert!(matches!(answer, Ok(Some(PeerFrame::Welcome { .. }))), "{answer:?}");
    // Node 2's certificate, saying it is node 3: refused, with the reason.
    match peer_answer(&cluster, &dir.0, &dir.0, "node2", hello(3)).await {
        Ok(Some(PeerFrame::Refused(why))) => {
            assert!(why.contains("does not name node 3"), "{why}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The client certificate: it names no node.
    match peer_answer(&cluster, &dir.0, &dir.0, "client", hello(2)).await {
        Ok(Some(PeerFrame::Refused(why))) => assert!(why.contains("node 2"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A certificate from another CA: the handshake fails, and says why.
    let why = peer_answer(&cluster, &foreign.0, &dir.0, "node2", hello(2)).await.unwrap_err();
    assert!(why.contains("does not trust this client's certificate"), "{why}");
    // This client trusting another CA: it refuses the node.
    let why = peer_answer(&cluster, &dir.0, &foreign.0, "node2", hello(2)).await.unwrap_err();
    assert!(why.contains("not from the CA this client trusts"), "{why}");
    // Plain TCP: a refusal in the peer protocol, naming TLS.
    let mut plain = TcpStream::connect(cluster.peer_addr(1)).await.unwrap();
    write_frame(&mut plain, &PeerFrame::Hello(hello(2))).await.unwrap();
    let mut buf = Vec::new();
    match read_frame::<PeerFrame, _>(&mut plain, &mut buf).await {
        Ok(Some(PeerFrame::Refused(why))) => assert!(why.contains("speaks TLS"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A plain client on the client port: told, in its protocol.
    let plain = coterie_node::Client::connect(&cluster.client_addr(1)).await.unwrap();
    let mut plain = plain;
    match plain.status().await {
        Err(ClientError::Refused(why)) => assert!(why.contains("speaks TLS"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // None of it cost the cluster anything.
    exclusive(&cluster, 3, || {}).await;
}

/// A node whose certificates expired an hour ago still starts (and says
/// so in its log), but whoever dials it refuses it, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_refused_with_the_reason() {
    let (dir, expired) = (Scratch::new("fresh"), Scratch::new("expired"));
    let (mut cfg, listeners) = bound_config(1, "centralized").await;
    let mut old = cfg.clone();
    with_tls(&mut cfg, &dir.0);
    let now = std::time::SystemTime::now();
    let day = Duration::from_secs(24 * 3600);
    pki::make_between(&mut old, &expired.0, now - 2 * day, now - day / 24).unwrap();
    let client = TlsClient::from_files(&expired.0.join("ca.pem"), None).unwrap();
    let l1 = listeners.into_iter().next().unwrap();
    let peer = l1.peer.local_addr().unwrap().to_string();
    // Node 1 on the expired set.
    let mut expired_cfg = cfg.clone();
    let s = &mut expired_cfg.security;
    s.tls_ca = Some(expired.0.join("ca.pem"));
    s.tls_cert = Some(expired.0.join("node{id}.pem"));
    s.tls_key = Some(expired.0.join("node{id}.key"));
    let cluster = TestCluster { cfg: cfg.clone(), stops: Vec::new(), credentials: None };
    let _stop = cluster.spawn_as(1, l1, expired_cfg);
    let name = rustls::pki_types::ServerName::try_from(tls::node_name(1)).unwrap();
    let dial = async {
        loop {
            match TcpStream::connect(&peer).await {
                Ok(tcp) => return client.connect(name.clone(), tcp).await,
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    };
    let e = tokio::time::timeout(PATIENCE, dial).await.unwrap().expect_err("trusted");
    let why = tls::explain(&e);
    assert!(why.contains("has expired"), "{why}");
}

/// A proxy from `listener` to `target` that flips one bit of what the
/// dialler writes, once, when `armed` is set; counts the connections it
/// carried and the bits it flipped.
async fn tamper(
    listener: TcpListener,
    target: String,
    armed: Arc<AtomicBool>,
    seen: Arc<AtomicU64>,
    flipped: Arc<AtomicU64>,
) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else { return };
        let Ok(outbound) = TcpStream::connect(&target).await else { continue };
        seen.fetch_add(1, Ordering::SeqCst);
        let (mut from_dialler, mut to_dialler) = inbound.into_split();
        let (mut from_target, mut to_target) = outbound.into_split();
        let (armed, flipped) = (armed.clone(), flipped.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match from_dialler.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if armed.swap(false, Ordering::SeqCst) {
                    buf[n / 2] ^= 0x10;
                    flipped.fetch_add(1, Ordering::SeqCst);
                }
                if to_target.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = to_target.shutdown().await;
        });
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from_target, &mut to_dialler).await;
            let _ = to_dialler.shutdown().await;
        });
    }
}

/// Node 1 reaches node 2's peer port through a proxy that flips one bit
/// of the stream while clients on every node take the lock. TLS finds
/// the record's authentication tag wrong: node 2 drops the connection,
/// node 1 dials it again (through the proxy, which flips nothing more),
/// the session resends what the broken connection lost, and the clients
/// finish with never two holders and every fence rising. On plain TCP the
/// same flip would be read as another frame, or another value in one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bit_flipped_on_a_peer_link_breaks_it_and_loses_nothing() {
    let dir = Scratch::new("tamper");
    let (mut cfg, listeners) = bound_config(3, "ricart-agrawala").await;
    with_tls(&mut cfg, &dir.0);
    let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut through_proxy = cfg.clone();
    through_proxy.nodes[1].peer = proxy.local_addr().unwrap().to_string();
    let (armed, seen, flipped) = Default::default();
    let (armed, seen, flipped): (Arc<AtomicBool>, Arc<AtomicU64>, Arc<AtomicU64>) =
        (armed, seen, flipped);
    tokio::spawn(tamper(
        proxy,
        cfg.nodes[1].peer.clone(),
        armed.clone(),
        seen.clone(),
        flipped.clone(),
    ));
    let tls = cfg.client_tls().unwrap();
    let credentials = Some(coterie_node::Credentials { tls, ..Default::default() });
    let mut cluster = TestCluster { cfg, stops: Vec::new(), credentials };
    for (i, l) in listeners.into_iter().enumerate() {
        let id = i as u32 + 1;
        let cfg = if id == 1 { through_proxy.clone() } else { cluster.cfg.clone() };
        let stop = cluster.spawn_as(id, l, cfg);
        cluster.stops.push(Some(stop));
    }
    cluster.agreed_on(3).await;
    let connections = seen.load(Ordering::SeqCst);
    assert!(connections >= 1, "node 1 never dialled node 2 through the proxy");
    let arm = armed.clone();
    exclusive(&cluster, 40, move || arm.store(true, Ordering::SeqCst)).await;
    assert_eq!(flipped.load(Ordering::SeqCst), 1, "the proxy flipped nothing");
    let redialled = async {
        while seen.load(Ordering::SeqCst) <= connections {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(PATIENCE, redialled).await.expect("the tampered link was never redialled");
    exclusive(&cluster, 5, || {}).await;
}
