//! The application task, after the picture in Jones's
//! lecture notes (22C:116, Iowa, 2002): it serves the node's
//! clients. The algorithms grant the *node*; the node hands each grant to
//! one client session at a time, from its own queue
//! ([`LocalQueue`](crate::local::LocalQueue)).
//!
//! A client session is its connection: it asks for the critical section
//! and waits for the grant on a oneshot channel (the seed's semaphore
//! `s`), releases, reads the status, injects faults, or turns into a watch
//! stream. A session that pings ([`ClientRequest::Ping`]) is watched until
//! its next other request: if it falls silent for a failure timeout, its
//! client is taken for hung or cut off. A session lost while holding (disconnected, or silent) is released
//! by the node, after the lock delay if one is configured; one that
//! disconnects while waiting gives up its place. Everything it needs of
//! the engine it asks of the [`Agent`] through methods.
//!
//! Limits (`[limits]`): a connection beyond `max_clients` is told so and
//! closed; a request beyond `max_pending` waiting ones is refused; and a
//! connection that sends nothing within [`FIRST_REQUEST_TIMEOUT`] of
//! opening is dropped (with a secret, the handshake's own timeout comes
//! first).

use crate::agent::{Agent, Asked};
use crate::auth::AuthFrame;
use crate::codec::{read_frame, write_frame, FrameError};
use crate::node::stopped;
use crate::protocol::{ClientRequest, ClientResponse, NodeEvent, WatchEvent};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// A client connection's read half, buffered.
type ClientReader = tokio::io::BufReader<OwnedReadHalf>;
use tokio::net::TcpStream;
use tokio::sync::{broadcast, oneshot, watch};
use tracing::{debug, info, warn};

/// How long a new connection to the client port may stay silent before
/// its first request (or, with a secret, its handshake).
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What a session waits for from its client, at most.
#[derive(Clone, Copy)]
enum Deadline {
    /// The first request of a connection.
    First,
    /// The next ping of a session that pings.
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
    // A request's length prefix and body in one system call.
    let mut reader = tokio::io::BufReader::with_capacity(1024, reader);
    let session = agent.new_session();
    let mut buf = Vec::new();
    // Without a handshake, the first request is what a silent connection
    // is dropped for lacking; once the client pings, it must be heard from
    // within the failure timeout.
    let mut deadline = if agent.authenticates() { Deadline::None } else { Deadline::First };
    loop {
        let silence = async {
            match deadline {
                Deadline::First => tokio::time::sleep(FIRST_REQUEST_TIMEOUT).await,
                Deadline::Lease(limit) => tokio::time::sleep(limit).await,
                Deadline::None => std::future::pending().await,
            }
        };
        let request = tokio::select! {
            r = read_frame::<ClientRequest, _>(&mut reader, &mut buf) => r,
            _ = stopped(&mut stop) => break,
            _ = silence => {
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
        // Pings are a lease: after one, the next is due within the limit,
        // until the client asks something else.
        deadline = Deadline::None;
        if matches!(request, Ok(Some(ref r)) if !matches!(r, ClientRequest::Fault(_))) {
            agent.unpaused().await;
        }
        let response = match request {
            Ok(Some(ClientRequest::Fault(command))) => agent.fault(&command),
            Ok(Some(ClientRequest::Acquire { timeout_ms, try_lock })) => {
                match acquire(&agent, session, timeout_ms, try_lock, &mut reader).await {
                    Some(r) => r,
                    None => break, // the client vanished while waiting
                }
            }
            Ok(Some(ClientRequest::Release)) => {
                if agent.leave(session) {
                    ClientResponse::Released
                } else {
                    ClientResponse::NotHolding
                }
            }
            Ok(Some(ClientRequest::Status)) => ClientResponse::Status(Box::new(agent.status())),
            Ok(Some(ClientRequest::Ping)) => {
                let (heartbeat, failure_timeout) = (agent.heartbeat(), agent.failure_timeout());
                deadline = Deadline::Lease(failure_timeout);
                ClientResponse::Pong {
                    heartbeat_ms: heartbeat.as_millis() as u64,
                    failure_timeout_ms: failure_timeout.as_millis() as u64,
                }
            }
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
        if write_frame(&mut writer, &response).await.is_err() {
            break;
        }
    }
    if agent.lose(session) {
        info!(session, "client lost while holding: released on its behalf");
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
                _ = reader.read(&mut probe) => return,
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

/// Waits for the critical section on behalf of `session`. `None` when the
/// client disconnected meanwhile (its place is given up).
async fn acquire(
    agent: &Agent,
    session: u64,
    timeout_ms: Option<u64>,
    try_lock: bool,
    reader: &mut ClientReader,
) -> Option<ClientResponse> {
    let (tx, rx) = oneshot::channel();
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
    let timer = async {
        match limit {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let mut probe = [0u8; 1];
    let outcome = tokio::select! {
        granted = rx => granted.ok(),
        _ = timer => None,
        _ = reader.read(&mut probe) => {
            // A client waiting for a grant sends nothing: this is it leaving.
            agent.leave(session);
            return None;
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
