//! The transport: peer connections and the reliable sessions over them.
//!
//! Each node dials every peer and writes its frames to it on that
//! connection; it reads what the peer writes on the connection the peer
//! dialled. Under the connections sits one
//! [`Session`](coterie_core::session::Session) per peer (kept in the
//! agent's [`Stack`](crate::agent::Stack), so frames are numbered in the
//! order the engine sends them and delivered in the order they were
//! numbered). A connection that breaks while both processes live loses
//! nothing: the dialler connects again at once, the acceptor's Welcome says
//! how much it delivered, and the dialler writes the rest before anything
//! new. A connection that breaks is a hint, not a verdict: only a refused
//! redial (the process is gone) or a session that overflowed declares the
//! peer failed at once; otherwise the failure detector's timeout decides.
//!
//! - [`dial_task`]: one per peer: connect, hand-shake, write frames; redial
//!   at once after a break, with backoff after a failed dial (the longest
//!   at once when nobody listens), and at once when the peer dials in (it
//!   is up).
//! - [`serve_peer`]: one per accepted connection: hand-shake, read frames,
//!   deliver them through the session. A newer connection from the same
//!   peer supersedes an older one, so two readers never interleave.
//! - [`delay_lane`]: one per peer: frames held back by an injected delay.
//! - `coterie fault reset` closes both directions at once, through
//!   [`Peers::reset`].
//!
//! The sessions themselves live in [`links`](crate::links), in the agent's
//! stack; each peer's handles in [`peers`](crate::peers).

use crate::admission::{Admission, Port};
use crate::agent::{Agent, Delivery};
use crate::auth::{AuthError, Role};
use crate::codec::{self, read_frame, write_frame, FrameError};
use crate::faults::Injector;
use crate::links::Batch;
use crate::peers::{Lane, Peers};
use crate::shutdown::Shutdown;
use crate::throttle::Throttle;
use coterie_core::wire::{self, Hello, PeerFrame};
use coterie_core::NodeId;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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

/// Keeps one outbound connection to `peer` and writes its session's frames.
pub(crate) async fn dial_task(t: Arc<Transport>, peer: NodeId, mut shutdown: Shutdown) {
    let handle = t.peers.get(peer);
    let mut backoff = BACKOFF.0;
    // Set after a connection we had closed: the next refused dial means the
    // peer's process is gone.
    let mut lost = false;
    loop {
        // A dial to a peer whose host is gone can hang until its timeout
        // (nothing answers the SYN: a container that was killed, say). If
        // the peer dials us meanwhile it is back: drop the attempt and dial
        // again at once.
        let attempt = tokio::select! {
            result = dial(&t, peer, &handle.addr) => result,
            _ = handle.redial.notified() => continue,
            _ = shutdown.recv() => return,
        };
        match attempt {
            Ok(Connected { stream, boot, delivered, written }) => {
                let restarted = t.agent.links(|l| l.welcomed(peer, boot, delivered));
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
                match pump(&t, peer, boot, stream, written, &mut shutdown).await {
                    Pump::Stopped => return,
                    Pump::Closed => {
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
                error!(peer = peer.0, addr = %handle.addr, "peer refused this node: {reason}");
                backoff = BACKOFF.1;
            }
            Err(DialError::Refused) => {
                // Nobody listens there: the peer has not started yet, or
                // has gone. A peer dials every other as it starts, and its
                // connection cuts this wait short (`redial`), so redialling
                // sooner finds nothing sooner: it only loads the machine
                // (128 nodes started together on two cores once made some
                // 29,000 refused dials, as many as every other connection
                // of their start-up together).
                backoff = BACKOFF.1;
            }
            Err(_) => {}
        }
        // Wait before redialling (frames wait in the session meanwhile); a
        // connection from the peer cuts the wait short.
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = handle.redial.notified() => {}
            _ = shutdown.recv() => return,
        }
        backoff = (backoff * 2).min(BACKOFF.1);
    }
}

enum DialError {
    /// Nobody listens at the address.
    Refused,
    /// The connection was taken, then closed or reset before the peer said
    /// a word: a process dying, or one that is not a coterie node.
    Reset,
    /// The peer answered and refused (another cluster, another secret).
    Handshake(String),
    Other,
}

impl DialError {
    /// What an I/O error while the dial waited for the peer's first word
    /// means.
    fn broken(e: &io::Error) -> DialError {
        if codec::hung_up(e) {
            DialError::Reset
        } else {
            DialError::Other
        }
    }
}

/// A dial that was answered.
struct Connected {
    stream: TcpStream,
    /// The peer's incarnation.
    boot: u64,
    /// How much of our session it had delivered.
    delivered: u64,
    /// The last frame written behind the Hello.
    written: u64,
}

/// Dials `peer`, writes the Hello and every frame the session keeps behind
/// it (the peer drops what it had: no round trip before data flows), and
/// reads the answer.
async fn dial(t: &Transport, peer: NodeId, addr: &str) -> Result<Connected, DialError> {
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, TcpStream::connect(addr)).await {
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
    let _ = stream.set_nodelay(true);
    // What this node writes and the peer's kernel does not acknowledge
    // within the failure timeout ends the connection (see [`pump`]).
    let (_, failure_timeout) = t.agent.timing();
    let _ = socket2::SockRef::from(&stream).set_tcp_user_timeout(Some(failure_timeout));
    let mut stream = stream;
    if let Err(e) = t.admission.dial(&mut stream).await {
        return Err(match e {
            AuthError::Closed => DialError::Reset,
            AuthError::Frame(FrameError::Io(e)) => DialError::broken(&e),
            AuthError::Timeout => DialError::Other,
            refused => DialError::Handshake(refused.to_string()),
        });
    }
    let (expects, batch) = t.agent.links(|l| l.dialling(peer));
    let mut bytes = Vec::with_capacity(64 + batch.bytes.len());
    wire::write_frame(&PeerFrame::Hello(Hello { expects, ..t.agent.hello() }), &mut bytes);
    bytes.extend_from_slice(&batch.bytes);
    let written = batch.last.unwrap_or(0);
    let handshake = async {
        stream.write_all(&bytes).await?;
        let mut buf = Vec::new();
        read_frame::<PeerFrame, _>(&mut stream, &mut buf).await
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(Some(PeerFrame::Welcome { boot, delivered }))) => {
            info!(peer = peer.0, %addr, "connected to peer");
            Ok(Connected { stream, boot, delivered, written })
        }
        Ok(Ok(Some(PeerFrame::Refused(reason)))) => Err(DialError::Handshake(reason)),
        Ok(Ok(Some(other))) => Err(DialError::Handshake(format!("unexpected answer {other:?}"))),
        Ok(Ok(None)) => Err(DialError::Reset),
        Ok(Err(FrameError::Io(e))) => Err(DialError::broken(&e)),
        Ok(Err(_)) | Err(_) => Err(DialError::Other),
    }
}

enum Pump {
    Stopped,
    Closed,
}

/// Writes every frame the session numbers after `written`, until the
/// connection closes, is reset, or the peer turns out to have restarted.
///
/// A connection can also die without closing: the peer's host vanished, or
/// its address changed (a container disconnected from its network and
/// connected again), and nothing answers, not even a reset. Writes still
/// succeed into the socket's buffer. The kernel sees it, though: what it
/// sent goes unacknowledged, and with `TCP_USER_TIMEOUT` set to the failure
/// timeout ([`dial`]) it gives the connection up after that long, the
/// pump's read fails, and the connection is dialled anew. The session
/// loses nothing either way. The acknowledgements are the peer kernel's,
/// not its process's: a peer that is merely slow or stopped keeps its
/// connection (the failure detector judges it), and so does a node too
/// starved to read its own timers.
async fn pump(
    t: &Transport,
    peer: NodeId,
    boot: u64,
    stream: TcpStream,
    mut written: u64,
    shutdown: &mut Shutdown,
) -> Pump {
    let handle = t.peers.get(peer);
    let mut reset = handle.reset.subscribe();
    let (mut reader, mut writer) = stream.into_split();
    let mut batch = Batch { bytes: Vec::new(), last: None };
    let mut probe = [0u8; 64];
    loop {
        if let Some(last) = batch.last.take() {
            if writer.write_all(&batch.bytes).await.is_err() {
                return Pump::Closed;
            }
            written = last;
        }
        tokio::select! {
            _ = handle.wake.notified() => {
                match t.agent.links(|l| l.pending(peer, boot, written)) {
                    Some(next) => batch = next,
                    None => return Pump::Closed, // the peer restarted: dial its new process
                }
            }
            // The peer never writes on this connection: a read returning
            // is the connection closing (or timing out).
            read = reader.read(&mut probe) => match read {
                Ok(0) => return Pump::Closed,
                Err(e) => {
                    if e.kind() == io::ErrorKind::TimedOut {
                        warn!(peer = peer.0, "what was written to peer went unacknowledged for the failure timeout: the connection is presumed dead, dialling again");
                    }
                    return Pump::Closed;
                }
                Ok(_) => {}
            },
            _ = reset.changed() => {
                info!(peer = peer.0, "connection to peer reset by a fault");
                return Pump::Closed;
            }
            _ = shutdown.recv() => return Pump::Stopped,
        }
    }
}

/// Serves one accepted peer connection: the handshake, then every frame
/// through the session to the engine.
pub(crate) async fn serve_peer(
    t: Arc<Transport>,
    mut stream: TcpStream,
    from: std::net::SocketAddr,
    mut shutdown: Shutdown,
) {
    let _ = stream.set_nodelay(true);
    let Ok(dialler) = t.admission.admit(&mut stream, from, Port::Peer).await else { return };
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
    let check = match dialler {
        Some(d) if d.role != Role::Peer || d.id != hello.node.0 => Err(format!(
            "authenticated as {:?} {}, but says it is node {}",
            d.role, d.id, hello.node.0
        )),
        _ => t.agent.check_hello(&hello),
    };
    if let Err(reason) = check {
        warn!(%from, claimed = hello.node.0, "refused peer connection: {reason}");
        let _ = write_frame(&mut stream, &PeerFrame::Refused(reason)).await;
        return;
    }
    let (peer, boot) = (hello.node, hello.boot);
    if hello.expects.is_some_and(|b| b != t.agent.boot()) {
        // Dialled for a previous incarnation of this node: answered, so the
        // dialler starts a new session, and closed with its frames unread.
        debug!(peer = peer.0, "a dial meant for this node's previous incarnation");
        let welcome = PeerFrame::Welcome { boot: t.agent.boot(), delivered: 0 };
        let _ = write_frame(&mut stream, &welcome).await;
        return;
    }
    let (restarted, delivered, reader) = t.agent.links(|l| l.accepted(peer, boot));
    let welcome = PeerFrame::Welcome { boot: t.agent.boot(), delivered };
    if write_frame(&mut stream, &welcome).await.is_err() {
        return;
    }
    let handle = t.peers.get(peer);
    // It is up: our dialler dials now if it was waiting, and drops a
    // connection to its previous incarnation.
    handle.redial.notify_one();
    if restarted {
        info!(peer = peer.0, "peer restarted: a new session");
        handle.wake.notify_one();
    }
    let mut reset = handle.reset.subscribe();
    // What the peer sends that cannot be used is logged, a line a second.
    let mut drops = Throttle::default();
    // Frames are read a few at a time, not a header and a body per call:
    // nothing but the Hello was read before, so nothing is lost.
    let mut stream = tokio::io::BufReader::with_capacity(READ_BUFFER, stream);
    loop {
        let frame = tokio::select! {
            f = read_frame::<PeerFrame, _>(&mut stream, &mut buf) => f,
            _ = reset.changed() => return, // closes it: the peer redials
            _ = shutdown.recv() => return,
        };
        match frame {
            Ok(Some(PeerFrame::Message { seq, ack, body })) => {
                t.faults.unpaused().await;
                match t.agent.deliver(peer, (reader, boot), (seq, ack), &body) {
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
                    Delivery::Superseded => {
                        debug!(peer = peer.0, "a newer connection from the peer took over");
                        return;
                    }
                }
            }
            Ok(Some(other)) => {
                warn!(peer = peer.0, "closing peer connection: unexpected {}", frame_name(&other));
                return;
            }
            Ok(None) => return,
            Err(FrameError::Io(e)) => {
                debug!(peer = peer.0, "peer connection lost: {e}");
                return;
            }
            Err(e) => {
                warn!(peer = peer.0, %from, "closing peer connection: {e}");
                return;
            }
        }
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
