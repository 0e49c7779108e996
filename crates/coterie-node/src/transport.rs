//! The transport: one connection per pair of nodes, used both ways, and
//! the reliable sessions over it.
//!
//! Of each pair, the node with the lower id dials and the other accepts;
//! then both write their frames to the other and read the other's on that
//! one connection. One connection a pair, not one each way, halves what a
//! cluster holds and makes at start (N(N − 1)/2 connections: at 128 nodes
//! on one host the kernel's connection-tracking table filled with twice
//! that), and an answer carries the kernel's acknowledgement of its
//! question, where a connection each way costs an empty segment back for
//! every message. Under the connection sits
//! one [`Session`](coterie_core::session::Session) per peer (kept in the
//! agent's [`Stack`](crate::effects::Stack), so frames are numbered in the
//! order the engine sends them and delivered in the order they were
//! numbered). A connection that breaks while both processes live loses
//! nothing: the dialler connects again at once, the Hello says how much
//! of the acceptor's session the dialler delivered and the Welcome how much
//! of the dialler's the acceptor did, and each writes the rest before
//! anything new. A connection that breaks is a hint, not a verdict: only a
//! refused reconnection (the process is gone) or a session that overflowed
//! declares the peer failed at once; otherwise the failure detector's
//! timeout decides.
//!
//! - [`dial_task`]: one per peer above this node: connect, hand-shake,
//!   [`converse`]; redial at once after a break, with backoff after a
//!   failed dial (the longest at once when nobody listens), and at once
//!   when the peer asks to be dialled (it is up).
//! - [`call_task`]: one per peer below this node, whose connection it is
//!   to dial: asks it to dial (a Hello marked `dial_back`) when this node
//!   starts, and again when its connection closes, which also tells
//!   whether its process is still there.
//! - [`serve_peer`]: one per accepted connection: hand-shake, then
//!   [`converse`]. A newer connection with the same peer supersedes an
//!   older one, so two connections never deliver or write at once.
//! - [`delay_lane`]: one per peer: frames held back by an injected delay.
//! - `coterie fault reset` closes the connection, through [`Peers::reset`].
//!
//! The sessions themselves live in [`links`](crate::links), in the agent's
//! stack; each peer's handles in [`peers`](crate::peers).

use crate::admission::{Admission, Port, Proof};
use crate::agent::{Agent, Delivery};
use crate::auth::{AuthError, Role};
use crate::codec::{self, read_frame, write_frame, write_out, FrameError};
use crate::faults::Injector;
use crate::links::Accepted;
use crate::peers::{Lane, Peers};
use crate::shutdown::Shutdown;
use crate::stream::{ReadHalf, Stream, WriteHalf};
use crate::throttle::Throttle;
use coterie_core::wire::{self, Hello, PeerFrame};
use coterie_core::NodeId;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tracing::{debug, error, info, warn};

/// How long a dialled peer has to answer our Hello, and a new connection to
/// send its own.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// What a peer connection reads at once: a frame's length prefix and
/// body, or several frames, in one system call.
const READ_BUFFER: usize = 4096;
/// Redial delays grow from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(20), Duration::from_secs(1));

/// What the connection tasks work with: the agent they feed, the peers'
/// handles, the node's door and the faults in force.
pub(crate) struct Transport {
    pub(crate) agent: Arc<Agent>,
    pub(crate) peers: Arc<Peers>,
    pub(crate) admission: Arc<Admission>,
    pub(crate) faults: Arc<Injector>,
}

/// Holds frames to one peer back until they are due (an injected delay),
/// then numbers them in its session, in the order they were sent.
pub(crate) async fn delay_lane(
    transport: Arc<Transport>,
    peer: NodeId,
    mut frames: Lane,
    mut shutdown: Shutdown,
) {
    loop {
        let (due, body) = tokio::select! {
            next = frames.recv() => match next {
                Some(f) => f,
                None => return,
            },
            _ = shutdown.recv() => return,
        };
        tokio::select! {
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(due)) => {}
            _ = shutdown.recv() => return,
        }
        transport.agent.send_delayed(peer, body);
        transport.peers.undelayed(peer);
    }
}

/// Keeps the connection with `peer`, above this node, and converses on it.
pub(crate) async fn dial_task(t: Arc<Transport>, peer: NodeId, mut shutdown: Shutdown) {
    let handle = t.peers.get(peer);
    let mut backoff = BACKOFF.0;
    // Set after a connection we had closed: the next refused dial means the
    // peer's process is gone.
    let mut lost = false;
    loop {
        // A dial to a peer whose host is gone can hang until its timeout
        // (nothing answers the SYN: a container that was killed, say). If
        // the peer asks to be dialled meanwhile it is back: drop the
        // attempt and dial again at once. The handshake is not dropped so
        // (it has its own timeout): the acceptor may have taken the
        // connection up already, and when it closes, the acceptor asks to
        // be dialled again, which would drop the next handshake the same
        // way, and the next.
        let connected = tokio::select! {
            result = connect(&t, peer, &handle.addr) => result,
            _ = handle.redial.notified() => continue,
            _ = shutdown.recv() => return,
        };
        let attempt = match connected {
            Ok(stream) => tokio::select! {
                result = handshake(&t, peer, stream) => result,
                _ = shutdown.recv() => return,
            },
            Err(e) => Err(e),
        };
        match attempt {
            Ok(Connected { stream, boot, delivered, written }) => {
                let (restarted, connection) = t.agent.links(|l| l.welcomed(peer, boot, delivered));
                backoff = BACKOFF.0;
                if restarted {
                    info!(
                        peer = peer.0,
                        "peer restarted: a new session, what was kept for it is dropped"
                    );
                    continue; // dial its new process, with the new session
                } else if lost {
                    debug!(peer = peer.0, delivered, "reconnected: resuming the session");
                }
                match converse(&t, peer, (connection, boot), stream, written, &mut shutdown).await {
                    End::Stopped => return,
                    End::Closed | End::Superseded => {
                        debug!(peer = peer.0, "connection to peer closed");
                        t.agent.metrics().redialed();
                        lost = true;
                        continue; // redial at once: is it still there?
                    }
                }
            }
            Err(DialError::Refused | DialError::Reset) if lost => {
                // Connection closed, redial refused (or taken by a listener
                // that then reset it before a word: the process dying
                // between accept and answer): the process is gone.
                info!(peer = peer.0, "peer's connection closed and redial refused");
                t.agent.link_down(peer);
                lost = false;
            }
            Err(DialError::Handshake(reason)) => {
                error!(peer = peer.0, addr = %handle.addr, "the handshake with the peer failed: {reason}");
                backoff = BACKOFF.1;
            }
            Err(DialError::Refused) => {
                // Nobody listens there: the peer has not started yet, or
                // has gone. A peer asks every node below it to dial as it
                // starts, and that cuts this wait short (`redial`), so
                // redialling sooner finds nothing sooner: it only loads the
                // machine (128 nodes started together on two cores once
                // made some 29,000 refused dials, as many as every other
                // connection of their start-up together).
                backoff = BACKOFF.1;
            }
            Err(_) => {}
        }
        // Wait before redialling (frames wait in the session meanwhile); a
        // call from the peer cuts the wait short.
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = handle.redial.notified() => {}
            _ = shutdown.recv() => return,
        }
        backoff = (backoff * 2).min(BACKOFF.1);
    }
}

/// For `peer`, below this node, whose connection it is to dial: asks it to
/// dial now when this node starts (it may be waiting out a refused dial),
/// and again whenever its connection closes. A refusal then means its
/// process is gone, as a refused redial does to a dialler.
pub(crate) async fn call_task(t: Arc<Transport>, peer: NodeId, mut shutdown: Shutdown) {
    let handle = t.peers.get(peer);
    // Set when the peer's connection closed: a refused call means it is gone.
    let mut lost = false;
    loop {
        let called = tokio::select! {
            result = call(&t, peer, &handle.addr) => result,
            _ = shutdown.recv() => return,
        };
        match called {
            Err(DialError::Refused | DialError::Reset) if lost => {
                info!(peer = peer.0, "peer's connection closed and its address refuses another");
                t.agent.link_down(peer);
            }
            Err(DialError::Handshake(reason)) => {
                error!(peer = peer.0, addr = %handle.addr, "the handshake with the peer failed: {reason}");
            }
            _ => {}
        }
        tokio::select! {
            _ = handle.closed.notified() => lost = true,
            _ = shutdown.recv() => return,
        }
    }
}

enum DialError {
    /// Nobody listens at the address.
    Refused,
    /// The connection was taken, then closed or reset before the peer said
    /// a word: a process dying, or one that is not a coterie node.
    Reset,
    /// The handshake failed, `why`: the peer refused this node (another
    /// cluster, another secret, another algorithm) or this node refused the
    /// peer's proof.
    Handshake(String),
    Other,
}

impl DialError {
    /// What an I/O error while the dial waited for the peer's first word
    /// means.
    fn broken(e: &io::Error) -> DialError {
        if crate::tls::tls_error(e).is_some() {
            // The peer refused this node's certificate after the
            // handshake (TLS 1.3 says so in the first thing read).
            DialError::Handshake(format!("TLS: {}", crate::tls::explain(e)))
        } else if codec::hung_up(e) {
            DialError::Reset
        } else {
            DialError::Other
        }
    }
}

/// Sets what a peer connection needs on either end: no Nagle delay, and an
/// end to a connection whose writes the peer's kernel does not acknowledge
/// within the failure timeout (see [`converse`]).
fn tune(t: &Transport, stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
    let (_, failure_timeout) = t.agent.view().timing();
    let _ = socket2::SockRef::from(stream).set_tcp_user_timeout(Some(failure_timeout));
}

/// Connects to `peer` at `addr` and authenticates: over TLS, checking
/// that its certificate names `peer`, if the cluster has certificates;
/// with the challenge–response, if it has a secret.
async fn connect(t: &Transport, peer: NodeId, addr: &str) -> Result<Stream, DialError> {
    let mut stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
            return Err(DialError::Refused)
        }
        Ok(Err(e)) => {
            debug!(peer = peer.0, %addr, "dial failed: {e}");
            return Err(DialError::Other);
        }
        Err(_) => return Err(DialError::Other),
    };
    tune(t, &stream);
    if let Some(certs) = t.admission.certs() {
        let name = rustls::pki_types::ServerName::try_from(crate::tls::node_name(peer.0))
            .map_err(|e| DialError::Handshake(e.to_string()))?;
        let dialler = certs.dialler();
        let handshake = dialler.connect(name, stream);
        return match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
            Ok(Ok(tls)) => Ok(Stream::Tls(Box::new(tls.into()))),
            Ok(Err(e)) if codec::hung_up(&e) => Err(DialError::Reset),
            Ok(Err(e)) => Err(DialError::Handshake(format!("TLS: {}", crate::tls::explain(&e)))),
            Err(_) => Err(DialError::Other),
        };
    }
    match t.admission.dial(&mut stream).await {
        Ok(()) => Ok(Stream::Plain(stream)),
        Err(AuthError::Closed) => Err(DialError::Reset),
        Err(AuthError::Frame(FrameError::Io(e))) => Err(DialError::broken(&e)),
        Err(AuthError::Timeout) => Err(DialError::Other),
        Err(refused) => Err(DialError::Handshake(refused.to_string())),
    }
}

/// A dial that was answered.
struct Connected {
    stream: Stream,
    /// The peer's incarnation.
    boot: u64,
    /// How much of our session it had delivered.
    delivered: u64,
    /// The last frame written behind the Hello.
    written: u64,
}

/// Writes the Hello and every frame the session keeps behind it (the peer
/// drops what it had: no round trip before data flows), and reads the
/// answer. The peer's own frames follow its Welcome.
async fn handshake(
    t: &Transport,
    peer: NodeId,
    mut stream: Stream,
) -> Result<Connected, DialError> {
    let (expects, delivered, batch) = t.agent.links(|l| l.dialling(peer));
    let mut bytes = Vec::with_capacity(64 + batch.bytes.len());
    let hello = Hello { expects, delivered, ..t.agent.hello().clone() };
    wire::write_frame(&PeerFrame::Hello(hello), &mut bytes);
    bytes.extend_from_slice(&batch.bytes);
    let written = batch.last.unwrap_or(0);
    let answer = async {
        write_out(&mut stream, &bytes).await?;
        let mut buf = Vec::new();
        // Exactly the Welcome: what follows it is the conversation's.
        read_frame::<PeerFrame, _>(&mut stream, &mut buf).await
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, answer).await {
        Ok(Ok(Some(PeerFrame::Welcome { boot, delivered }))) => {
            info!(peer = peer.0, "connected to peer");
            Ok(Connected { stream, boot, delivered, written })
        }
        Ok(Ok(Some(PeerFrame::Refused(reason)))) => Err(DialError::Handshake(reason)),
        Ok(Ok(Some(other))) => Err(DialError::Handshake(format!("unexpected answer {other:?}"))),
        Ok(Ok(None)) => Err(DialError::Reset),
        Ok(Err(FrameError::Io(e))) => Err(DialError::broken(&e)),
        Ok(Err(_)) | Err(_) => Err(DialError::Other),
    }
}

/// Asks `peer`, below this node, to dial it: a Hello marked `dial_back`,
/// which the peer answers by closing (or with its refusal).
async fn call(t: &Transport, peer: NodeId, addr: &str) -> Result<(), DialError> {
    let mut stream = connect(t, peer, addr).await?;
    let hello = Hello { dial_back: true, ..t.agent.hello().clone() };
    let answer = async {
        write_frame(&mut stream, &PeerFrame::Hello(hello)).await?;
        let mut buf = Vec::new();
        read_frame::<PeerFrame, _>(&mut stream, &mut buf).await
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, answer).await {
        Ok(Ok(None)) => Ok(()),
        Ok(Ok(Some(PeerFrame::Refused(reason)))) => Err(DialError::Handshake(reason)),
        Ok(Ok(Some(other))) => Err(DialError::Handshake(format!("unexpected answer {other:?}"))),
        Ok(Err(FrameError::Io(e))) => Err(DialError::broken(&e)),
        Ok(Err(_)) | Err(_) => Err(DialError::Other),
    }
}

/// How a conversation on a connection ended.
enum End {
    /// The node is stopping.
    Stopped,
    /// The connection closed, broke, timed out, or was reset by a fault.
    Closed,
    /// A newer connection with the peer took over, or the peer restarted.
    Superseded,
}

/// Reads the peer's frames and writes ours on connection `connection` to
/// its incarnation `boot`, having written up to `written` already, until
/// the connection ends.
///
/// A connection can also die without closing: the peer's host vanished, or
/// its address changed (a container disconnected from its network and
/// connected again), and nothing answers, not even a reset. Writes still
/// succeed into the socket's buffer. The kernel sees it, though: what it
/// sent goes unacknowledged, and with `TCP_USER_TIMEOUT` set to the failure
/// timeout ([`tune`]) it gives the connection up after that long and the
/// read fails. The session loses nothing either way. The acknowledgements
/// are the peer kernel's, not its process's: a peer that is merely slow or
/// stopped keeps its connection (the failure detector judges it), and so
/// does a node too starved to read its own timers.
async fn converse(
    t: &Transport,
    peer: NodeId,
    link: (u64, u64),
    stream: Stream,
    written: u64,
    shutdown: &mut Shutdown,
) -> End {
    let handle = t.peers.get(peer);
    let mut reset = handle.reset.subscribe();
    let (reader, writer) = stream.into_split();
    let end = tokio::select! {
        end = read_frames(t, peer, link, reader) => end,
        end = write_frames(t, peer, link, writer, written) => end,
        _ = reset.changed() => {
            info!(peer = peer.0, "connection with peer reset by a fault");
            End::Closed
        }
        _ = shutdown.recv() => End::Stopped,
    };
    if matches!(end, End::Superseded) {
        // This connection's writer may have taken a wake-up meant for the
        // one that superseded it: pass it on.
        handle.wake.notify_one();
    }
    end
}

/// Delivers every frame the peer writes, through the session, to the
/// engine.
async fn read_frames(t: &Transport, peer: NodeId, link: (u64, u64), reader: ReadHalf) -> End {
    // What the peer sends that cannot be used is logged, a line a second.
    let mut drops = Throttle::default();
    // Frames are read a few at a time, not a header and a body per call.
    let mut stream = tokio::io::BufReader::with_capacity(READ_BUFFER, reader);
    let mut buf = Vec::new();
    loop {
        match read_frame::<PeerFrame, _>(&mut stream, &mut buf).await {
            Ok(Some(PeerFrame::Message { seq, ack, body })) => {
                t.faults.unpaused().await;
                match t.agent.deliver(peer, link, (seq, ack), &body) {
                    Delivery::Taken => {}
                    Delivery::Dropped(e) => {
                        if let Some(also) = drops.admit(std::time::Instant::now()) {
                            warn!(
                                peer = peer.0,
                                also_dropped_since_last_line = also,
                                "dropped a message: {e}"
                            );
                        }
                    }
                    Delivery::Parked(e) => {
                        if let Some(also) = drops.admit(std::time::Instant::now()) {
                            info!(peer = peer.0, also_since_last_line = also, "{e}");
                        }
                    }
                    Delivery::Superseded => {
                        debug!(peer = peer.0, "a newer connection with the peer took over");
                        return End::Superseded;
                    }
                }
            }
            Ok(Some(other)) => {
                warn!(peer = peer.0, "closing peer connection: unexpected {}", frame_name(&other));
                return End::Closed;
            }
            Ok(None) => return End::Closed,
            Err(FrameError::Io(e)) => {
                if e.kind() == io::ErrorKind::TimedOut {
                    warn!(peer = peer.0, "what was written to peer went unacknowledged for the failure timeout: the connection is presumed dead");
                } else {
                    debug!(peer = peer.0, "peer connection lost: {e}");
                }
                return End::Closed;
            }
            Err(e) => {
                warn!(peer = peer.0, "closing peer connection: {e}");
                return End::Closed;
            }
        }
    }
}

/// Writes every frame the session keeps after `written` (all it keeps, on
/// a connection just accepted), then each frame it numbers, until the
/// connection breaks or another takes over.
async fn write_frames(
    t: &Transport,
    peer: NodeId,
    link: (u64, u64),
    mut writer: WriteHalf,
    mut written: u64,
) -> End {
    let handle = t.peers.get(peer);
    loop {
        let Some(batch) = t.agent.links(|l| l.pending(peer, link, written)) else {
            return End::Superseded;
        };
        if let Some(last) = batch.last {
            if write_out(&mut writer, &batch.bytes).await.is_err() {
                return End::Closed;
            }
            written = last;
        }
        handle.wake.notified().await;
    }
}

/// Serves one accepted peer connection: the handshake, then the
/// conversation; or, for a peer above asking to be dialled, the dial.
pub(crate) async fn serve_peer(
    t: Arc<Transport>,
    stream: TcpStream,
    from: std::net::SocketAddr,
    mut shutdown: Shutdown,
) {
    tune(&t, &stream);
    let Ok((mut stream, proof)) = t.admission.admit(stream, from, Port::Peer).await else {
        return;
    };
    let mut buf = Vec::new();
    let hello = match tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        read_frame::<PeerFrame, _>(&mut stream, &mut buf),
    )
    .await
    {
        Ok(Ok(Some(PeerFrame::Hello(h)))) => h,
        Ok(Ok(None)) => return,
        Ok(Ok(Some(other))) => {
            warn!(%from, "refused peer connection: expected a Hello, got {}", frame_name(&other));
            return;
        }
        Ok(Err(e)) => {
            warn!(%from, "refused peer connection: {e}");
            return;
        }
        Err(_) => {
            warn!(%from, "refused peer connection: no Hello within {HANDSHAKE_TIMEOUT:?}");
            return;
        }
    };
    let check = match proof {
        Proof::Secret(d) if d.role != Role::Peer || d.id != hello.node.0 => Err(format!(
            "authenticated as {:?} {}, but says it is node {}",
            d.role, d.id, hello.node.0
        )),
        Proof::Certificate(cert) if !crate::certs::names_node(&cert, hello.node) => {
            t.agent.metrics().tls_refused("peer");
            Err(format!(
                "its certificate does not name node {} ({}), which it says it is",
                hello.node.0,
                crate::tls::node_name(hello.node.0)
            ))
        }
        _ => t.agent.check_hello(&hello),
    };
    if let Err(reason) = check {
        warn!(%from, claimed = hello.node.0, "refused peer connection: {reason}");
        let _ = write_frame(&mut stream, &PeerFrame::Refused(reason)).await;
        return;
    }
    let (peer, boot) = (hello.node, hello.boot);
    let handle = t.peers.get(peer);
    if hello.dial_back {
        // It is up: our dialler dials now if it was waiting, and drops a
        // connection to its previous incarnation.
        if t.agent.links(|l| l.called(peer, boot)) {
            info!(peer = peer.0, "peer restarted: a new session");
            handle.wake.notify_one();
        }
        handle.redial.notify_one();
        return; // closing it is the answer
    }
    if hello.expects.is_some_and(|b| b != t.agent.hello().boot) {
        // Dialled for a previous incarnation of this node: answered, so the
        // dialler starts a new session, and closed with its frames unread.
        debug!(peer = peer.0, "a dial meant for this node's previous incarnation");
        let welcome = PeerFrame::Welcome { boot: t.agent.hello().boot, delivered: 0 };
        let _ = write_frame(&mut stream, &welcome).await;
        return;
    }
    let Accepted { restarted, delivered, connection } =
        t.agent.links(|l| l.accepted(peer, boot, hello.delivered));
    // The Welcome alone: what the dialler lacks of our session follows it
    // from the conversation's writer, while its reader takes in what the
    // dialler wrote behind its Hello. Written here, in one go, before
    // reading, two sessions each holding more than the sockets buffer
    // would each wait for the other to read.
    let welcome = PeerFrame::Welcome { boot: t.agent.hello().boot, delivered };
    if write_frame(&mut stream, &welcome).await.is_err() {
        return;
    }
    info!(peer = peer.0, "connected to peer");
    if restarted {
        // A connection to its previous incarnation writes no more.
        info!(peer = peer.0, "peer restarted: a new session");
        handle.wake.notify_one();
    }
    if let End::Closed = converse(&t, peer, (connection, boot), stream, 0, &mut shutdown).await {
        // The peer dials it again (it is the peer's to dial), as this
        // node's dialler does for the peers above it: counted the same.
        t.agent.metrics().redialed();
        handle.closed.notify_one();
    }
}

/// A frame's kind, for log lines (not its contents: they may be anything).
fn frame_name(frame: &PeerFrame) -> &'static str {
    match frame {
        PeerFrame::Hello(_) => "Hello",
        PeerFrame::Welcome { .. } => "Welcome",
        PeerFrame::Refused(_) => "Refused",
        PeerFrame::Message { .. } => "Message",
    }
}
