//! Who may talk to this node: the handshake that opens every connection,
//! peer or client, when the cluster has a secret ([`auth`](crate::auth)
//! is the protocol; this is the node's side of it), and the rate-limited
//! log line for whoever is turned away.

use crate::auth::{self, AuthError, AuthFrame, Dialler, Role, Secret};
use crate::codec::{self, write_frame, FrameError};
use crate::protocol::ClientResponse;
use crate::throttle::Throttle;
use coterie_core::NodeId;
use std::net::SocketAddr;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::debug;

/// Which of the node's ports a connection came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Port {
    /// Agent-to-agent traffic.
    Peer,
    /// Clients and status.
    Client,
    /// The HTTP/JSON API.
    Http,
}

impl Port {
    fn name(self) -> &'static str {
        match self {
            Port::Peer => "peer",
            Port::Client => "client",
            Port::Http => "http",
        }
    }
}

/// The node's door; see the module documentation.
pub(crate) struct Admission {
    node: NodeId,
    cluster: String,
    secret: Option<Secret>,
    refusals: Refusals,
}

impl Admission {
    /// The door of node `node` of `cluster`, locked with `secret` if given.
    pub(crate) fn new(node: NodeId, cluster: String, secret: Option<Secret>) -> Admission {
        Admission { node, cluster, secret, refusals: Refusals::default() }
    }

    /// Whether connections must authenticate (the node has a secret).
    pub(crate) fn authenticates(&self) -> bool {
        self.secret.is_some()
    }

    /// The acceptor's side of the handshake on a new connection to `port`:
    /// who dialled (`None` when the node runs open), or `Err` when the
    /// connection is to be dropped (logged, at most a line a second).
    pub(crate) async fn admit(
        &self,
        stream: &mut TcpStream,
        from: SocketAddr,
        port: Port,
    ) -> Result<Option<Dialler>, ()> {
        let Some(secret) = &self.secret else { return Ok(None) };
        match auth::accept(stream, secret, &self.cluster, self.node.0).await {
            Ok(dialler) => Ok(Some(dialler)),
            Err(e) => {
                if port == Port::Client && matches!(e, AuthError::Frame(FrameError::Wire(_))) {
                    // A client that did not try to authenticate: tell it so
                    // in its own protocol.
                    let why = "this node requires authentication: give the cluster's secret \
                               ([security] secret_file in the configuration, or \
                               COTERIE_SECRET_FILE)";
                    let _ = write_frame(stream, &ClientResponse::Error(why.into())).await;
                }
                if dropped(&e) {
                    // Closed without a word (a port probe or a scan), or
                    // dropped by its dialler mid-way: a peer gives up a
                    // dial of its own when this node dials it first, as
                    // nodes starting together do by the dozen. Nothing
                    // was claimed, so nothing failed.
                    debug!(%from, port = port.name(), "a connection closed before authenticating: {e}");
                } else {
                    let why = format_args!("it failed authentication: {e}");
                    self.refusals.refused(port.name(), from, &why);
                }
                Err(())
            }
        }
    }

    /// The dialler's side of the handshake on a connection to a peer.
    pub(crate) async fn dial(&self, stream: &mut TcpStream) -> Result<(), AuthError> {
        match &self.secret {
            Some(secret) => {
                auth::dial(stream, secret, &self.cluster, Role::Peer, self.node.0).await?;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Tells a connection to `port` that it is turned away, `why`, in the
    /// first thing its client reads — the handshake's frame with a secret,
    /// a client frame without, an HTTP `503` on the HTTP port — and logs it
    /// (at most a line a second).
    pub(crate) async fn turn_away(
        &self,
        stream: &mut TcpStream,
        from: SocketAddr,
        port: Port,
        why: &str,
    ) {
        self.refusals.refused(port.name(), from, &why);
        let _ = match port {
            Port::Http => stream.write_all(&unavailable(why)).await,
            _ if self.authenticates() => {
                write_frame(stream, &AuthFrame::Refused(why.to_string())).await
            }
            _ => write_frame(stream, &ClientResponse::Error(why.to_string())).await,
        };
    }
}

/// A whole HTTP/1.1 `503` response carrying the API's JSON error, written
/// before hyper ever sees the connection.
fn unavailable(why: &str) -> Vec<u8> {
    let body = serde_json::json!({ "error": "unavailable", "detail": why }).to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The log line for connections refused at the door (they failed the
/// handshake, or the node serves all the clients it may), at most one a
/// second: whoever knocks without the secret cannot flood the log.
#[derive(Default)]
struct Refusals {
    throttle: std::sync::Mutex<Throttle>,
}

impl Refusals {
    /// A connection from `from` on the `port` port was refused, `why`.
    fn refused(&self, port: &str, from: std::net::SocketAddr, why: &dyn std::fmt::Display) {
        let mut throttle = self.throttle.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(also) = throttle.admit(std::time::Instant::now()) {
            tracing::warn!(%from, port, also_refused_since_last_line = also, "refused a connection: {why}");
        }
    }
}

/// Whether a handshake ended because the dialler went away, not because
/// it failed: the connection closed, was reset or aborted.
fn dropped(e: &AuthError) -> bool {
    match e {
        AuthError::Closed => true,
        AuthError::Frame(FrameError::Io(e)) => codec::hung_up(e),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A dialler that gives up mid-handshake, its socket reset as a
    /// dropped dial's is, leaves an error taken for its going away, not
    /// for a failed authentication; a wrong secret or a timeout is not.
    #[tokio::test]
    async fn a_dial_dropped_mid_handshake_is_not_an_authentication_failure() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let secret = Secret::from_file_bytes(b"the cluster's secret").unwrap();
        let dialler = tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let hello = AuthFrame::Hello {
                cluster: "test".into(),
                role: Role::Peer,
                id: 2,
                nonce: [7; 32],
            };
            write_frame(&mut stream, &hello).await.unwrap();
            socket2::SockRef::from(&stream).set_linger(Some(std::time::Duration::ZERO)).unwrap();
        });
        let (mut stream, _) = listener.accept().await.unwrap();
        dialler.await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let e = auth::accept(&mut stream, &secret, "test", 1).await.unwrap_err();
        assert!(dropped(&e), "{e:?}");
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::ConnectionAborted,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::UnexpectedEof,
        ] {
            assert!(dropped(&AuthError::Frame(FrameError::Io(kind.into()))), "{kind:?}");
        }
        assert!(dropped(&AuthError::Closed));
        assert!(!dropped(&AuthError::Refused("wrong secret".into())));
        assert!(!dropped(&AuthError::Timeout));
    }
}
