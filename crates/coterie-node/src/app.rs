//! The application task, after the picture in Jones's
//! lecture notes (22C:116, Iowa, 2002): it serves the node's
//! clients. The algorithms grant the *node*; the node hands each grant to
//! one client session at a time, from its own queue
//! ([`LocalQueue`](crate::local::LocalQueue)).
//!
//! A client session is its connection: it asks for the critical section
//! and waits for the grant on a oneshot channel (the seed's semaphore
//! `s`), releases, reads the status, injects faults, or turns into a watch
//! stream. A session is a lease while it waits for the lock or holds it
//! (and after a ping, until its next other request): its client pings
//! ([`ClientRequest::Ping`]) once a heartbeat, and a session silent for a
//! failure timeout is taken for hung or cut off. A session lost while
//! holding (disconnected, or silent) is released by the node, after the
//! lock delay if one is configured; one lost while waiting gives up its
//! place, so a grant never goes to a client that cannot take it. Everything it needs of
//! the engine it asks of the [`Agent`] through methods.
//!
//! Limits (`[limits]`): a connection beyond `max_clients` is told so and
//! closed; a request beyond `max_pending` waiting ones is refused; and a
//! connection that sends nothing within [`FIRST_REQUEST_TIMEOUT`] of
//! opening is dropped (with a secret, the handshake's own timeout comes
//! first).

use crate::agent::{Agent, Asked};
use crate::auth::AuthFrame;
use crate::codec::{write_frame, FrameError, FrameReader};
use crate::node::stopped;
use crate::protocol::{ClientRequest, ClientResponse, NodeEvent, WatchEvent};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// A client connection's read half, read a frame at a time.
type ClientReader = FrameReader<OwnedReadHalf>;
use tokio::net::TcpStream;
use tokio::sync::{broadcast, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// How long a new connection to the client port may stay silent before
/// its first request (or, with a secret, its handshake).
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What a session waits for from its client, at most.
#[derive(Clone, Copy)]
enum Deadline {
    /// The first request of a connection.
    First,
    /// The next ping of a session under lease: one that waits for the
    /// lock, holds it, or has pinged since its last other request.
    Lease(Duration),
    /// Nothing: the client may think as long as it likes.
    None,
}

/// Serves one client connection until it closes or the node stops.
pub(crate) async fn client_session(
    agent: Arc<Agent>,
    stream: TcpStream,
    from: std::net::SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let mut stream = stream;
    let _slot = match agent.client_slot() {
        Ok(slot) => slot,
        Err(max) => return turn_away(&agent, stream, from, max).await,
    };
    if agent.admit(&mut stream, from, "client").await.is_err() {
        return;
    }
    let (reader, mut writer) = stream.into_split();
    let mut reader = FrameReader::new(reader);
    let session = agent.new_session();
    // Without a handshake, the first request is what a silent connection
    // is dropped for lacking. A session that holds the lock, or has
    // pinged, must then be heard from within the failure timeout.
    let mut deadline = if agent.authenticates() { Deadline::None } else { Deadline::First };
    let mut holds = false;
    loop {
        let silence = async {
            match deadline {
                Deadline::First => tokio::time::sleep(FIRST_REQUEST_TIMEOUT).await,
                Deadline::Lease(limit) => tokio::time::sleep(limit).await,
                Deadline::None => std::future::pending().await,
            }
        };
        let request = tokio::select! {
            // A request that came is read before a silence that ran out
            // meanwhile is believed: after this process was stopped, both
            // are ready at once, and the client was not the silent one.
            biased;
            r = reader.next::<ClientRequest>() => r,
            _ = stopped(&mut stop) => break,
            _ = silence => {
                if agent.paused() {
                    // A paused node is a stopped one that can still be
                    // resumed: its leases do not run out meanwhile. What
                    // came is read once it resumes, and the lease runs anew.
                    agent.unpaused().await;
                    continue;
                }
                match deadline {
                    Deadline::Lease(limit) => {
                        let silent_ms = limit.as_millis();
                        warn!(%from, session, silent_ms, "client fell silent: its session is lost");
                    }
                    _ => debug!(%from, "a client connection sent nothing: dropped"),
                }
                break;
            }
        };
        if matches!(request, Ok(Some(ref r)) if !matches!(r, ClientRequest::Fault(_))) {
            agent.unpaused().await;
        }
        let response = match request {
            Ok(Some(ClientRequest::Fault(command))) => agent.fault(&command),
            Ok(Some(ClientRequest::Acquire { timeout_ms, try_lock })) => {
                let asked = Asking { session, timeout_ms, try_lock };
                match acquire(&agent, asked, &mut reader, &mut writer).await {
                    Some(r) => {
                        holds = matches!(r, ClientResponse::Granted { .. });
                        r
                    }
                    None => break, // the client vanished or fell silent while waiting
                }
            }
            Ok(Some(ClientRequest::Release)) => {
                holds = false;
                if agent.leave(session) {
                    ClientResponse::Released
                } else {
                    ClientResponse::NotHolding
                }
            }
            Ok(Some(ClientRequest::Status)) => ClientResponse::Status(Box::new(agent.status())),
            Ok(Some(ClientRequest::Ping)) => pong(&agent),
            Ok(Some(ClientRequest::Watch)) => {
                watch_session(&agent, session, &mut reader, &mut writer, &mut stop).await;
                break;
            }
            Ok(Some(ClientRequest::WatchMessages { heartbeats })) => {
                let _counted = agent.watch_messages(heartbeats);
                watch_session(&agent, session, &mut reader, &mut writer, &mut stop).await;
                break;
            }
            Ok(None) => break,
            Err(FrameError::Io(_)) => break,
            Err(e) => {
                warn!(%from, "closing client connection: {e}");
                let _ = write_frame(&mut writer, &ClientResponse::Error(e.to_string())).await;
                break;
            }
        };
        // The lease: while the session holds, and after a ping until the
        // client asks something else, the next ping is due within a
        // failure timeout.
        let pinged = matches!(response, ClientResponse::Pong { .. });
        deadline =
            if holds || pinged { Deadline::Lease(agent.failure_timeout()) } else { Deadline::None };
        if write_frame(&mut writer, &response).await.is_err() {
            break;
        }
    }
    if agent.lose(session) {
        info!(session, "client lost while holding: released on its behalf");
    }
}

/// The answer to a keepalive: the node's timing, which the client paces
/// its pings by.
fn pong(agent: &Agent) -> ClientResponse {
    let (heartbeat, failure_timeout) = (agent.heartbeat(), agent.failure_timeout());
    ClientResponse::Pong {
        heartbeat_ms: heartbeat.as_millis() as u64,
        failure_timeout_ms: failure_timeout.as_millis() as u64,
    }
}

/// Streams the node's events to a watcher until it goes away or the node
/// stops. The session can hold nothing from here on: its requests are
/// not read.
async fn watch_session(
    agent: &Agent,
    session: u64,
    reader: &mut ClientReader,
    writer: &mut OwnedWriteHalf,
    stop: &mut watch::Receiver<bool>,
) {
    let (mut events, first) = agent.watch();
    if write_frame(writer, &ClientResponse::Event(first)).await.is_err() {
        return;
    }
    debug!(session, "watcher subscribed");
    let mut probe = [0u8; 1];
    let mut batch = Vec::new();
    loop {
        // The first event wakes the stream; what follows within
        // WATCH_LINGER goes out with it in one write, so a busy node wakes
        // its watchers (and makes a system call) once per batch rather
        // than once per event.
        let mut deadline = None;
        loop {
            let linger = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let event = tokio::select! {
                e = events.recv() => e,
                // A watcher sends nothing more: a read returning is it leaving.
                _ = reader.get_mut().read(&mut probe) => return,
                _ = stopped(stop) => return,
                () = linger => break,
            };
            let event = match event {
                Ok(e) => e,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    let event = NodeEvent::Missed { events: missed };
                    WatchEvent { node: agent.id().0, unix_us: crate::protocol::unix_us(), event }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            coterie_core::wire::write_frame(&ClientResponse::Event(event), &mut batch);
            if batch.len() >= WATCH_BATCH {
                break;
            }
            deadline.get_or_insert_with(|| tokio::time::Instant::now() + WATCH_LINGER);
        }
        if writer.write_all(&batch).await.is_err() {
            return;
        }
        batch.clear();
    }
}

/// How long a watch stream waits for more events to send with one.
const WATCH_LINGER: Duration = Duration::from_millis(2);

/// A watch stream writes at once when this many bytes are waiting.
const WATCH_BATCH: usize = 64 * 1024;

/// A client's request for the critical section.
struct Asking {
    session: u64,
    timeout_ms: Option<u64>,
    try_lock: bool,
}

/// Waits for the critical section on behalf of a session. `None` when the
/// client disconnected or fell silent meanwhile: it gives up its place (or
/// the grant that raced its loss, after the lock delay).
///
/// A waiting session is under lease as a holding one is: its client pings
/// while it waits, and one silent for a failure timeout (its process
/// stopped, its network cut) is lost. Otherwise the grant would go to a
/// client that cannot take it, and with the session still open the lock
/// would be held for ever.
async fn acquire(
    agent: &Agent,
    asked: Asking,
    reader: &mut ClientReader,
    writer: &mut OwnedWriteHalf,
) -> Option<ClientResponse> {
    let Asking { session, timeout_ms, try_lock } = asked;
    let (tx, mut rx) = oneshot::channel();
    match agent.ask(session, tx) {
        Asked::Queued => {}
        Asked::AlreadyHolds => {
            return Some(ClientResponse::Error("this session already holds the lock".into()))
        }
        Asked::Full(max) => {
            return Some(ClientResponse::Error(format!(
                "this node has {max} requests waiting already ([limits] max_pending): \
                 try again later, or another node"
            )))
        }
    }
    let limit = match (timeout_ms, try_lock) {
        (Some(ms), _) => Some(Duration::from_millis(ms)),
        // A try waits as long as one failure timeout: long enough for any
        // algorithm's round trips, short enough to be a try.
        (None, true) => Some(agent.failure_timeout()),
        (None, false) => None,
    };
    let give_up = limit.map(|d| Instant::now() + d);
    let lease = agent.failure_timeout();
    let mut silent_at = Instant::now() + lease;
    let outcome = loop {
        let timer = async {
            match give_up {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // What the client sent is read first: a ping that came is not
            // taken for silence, nor a departure for a wait.
            biased;
            request = reader.next::<ClientRequest>() => match request {
                Ok(Some(ClientRequest::Ping)) => {
                    silent_at = Instant::now() + lease;
                    if write_frame(writer, &pong(agent)).await.is_err() {
                        agent.lose(session);
                        return None;
                    }
                }
                Ok(Some(other)) => {
                    // Nothing else may be asked before the answer.
                    let why = format!("{other:?} while waiting for the lock: only Ping may be sent");
                    warn!(session, "closing client connection: {why}");
                    agent.lose(session);
                    let _ = write_frame(writer, &ClientResponse::Error(why)).await;
                    return None;
                }
                // It left (or broke the connection) while waiting.
                Ok(None) | Err(_) => {
                    agent.lose(session);
                    return None;
                }
            },
            granted = &mut rx => break granted.ok(),
            _ = timer => break None,
            _ = tokio::time::sleep_until(silent_at) => {
                if agent.paused() {
                    agent.unpaused().await;
                    silent_at = Instant::now() + lease;
                    continue;
                }
                let silent_ms = lease.as_millis();
                warn!(session, silent_ms, "waiting client fell silent: its request is withdrawn");
                agent.lose(session);
                return None;
            }
        }
    };
    match outcome {
        Some(fence) => Some(ClientResponse::Granted { fence: fence.0, node: agent.id().0 }),
        None => {
            // Timed out. The grant may have raced the timer: then it holds
            // and must let go; either way it leaves the queue.
            agent.leave(session);
            Some(if try_lock { ClientResponse::Busy } else { ClientResponse::TimedOut })
        }
    }
}

/// Tells a connection beyond `[limits] max_clients` why it is refused,
/// in the first frame its client reads (the handshake's, with a secret),
/// and closes it. What the client sent meanwhile is read and dropped, for
/// a second at most, so that the close does not reset the connection
/// before the client has read why.
async fn turn_away(agent: &Agent, mut stream: TcpStream, from: std::net::SocketAddr, max: usize) {
    let why = format!(
        "this node serves {max} client connections already ([limits] max_clients): \
         try again later, or another node"
    );
    agent.turned_away("client", from, &why);
    let _ = if agent.authenticates() {
        write_frame(&mut stream, &AuthFrame::Refused(why)).await
    } else {
        write_frame(&mut stream, &ClientResponse::Error(why)).await
    };
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 512];
    let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}
