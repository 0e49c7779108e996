//! Who may talk to this node: the handshake that opens every connection,
//! peer or client — TLS when the cluster has certificates
//! ([`certs`](crate::certs)), else the challenge–response when it has a
//! secret ([`auth`](crate::auth) is the protocol; this is the node's side
//! of it) — and the rate-limited log line for whoever is turned away.
//!
//! A TLS port tells a client that speaks plain TCP to it why it is
//! refused, in the client's own protocol (a client frame, a peer's
//! refusal, an HTTP `400`), before closing: its first byte is not a TLS
//! handshake record's.

use crate::auth::{self, AuthError, AuthFrame, Dialler, Role, Secret};
use crate::certs::Certs;
use crate::codec::{self, write_frame, write_out, FrameError};
use crate::metrics::Metrics;
use crate::protocol::ClientResponse;
use crate::stream::Stream;
use crate::throttle::Throttle;
use coterie_core::wire::PeerFrame;
use coterie_core::NodeId;
use rustls::pki_types::CertificateDer;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tracing::debug;

/// The first byte of a TLS record that opens a handshake.
const TLS_HANDSHAKE: u8 = 0x16;

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

/// What locks the node's door.
pub(crate) enum Lock {
    /// Nothing: the node runs open.
    Open,
    /// The cluster's secret, on the peer and client ports.
    Secret(Secret),
    /// TLS on every port.
    Tls(Arc<Certs>),
}

/// Who a connection proved to be at the door.
pub(crate) enum Proof {
    /// Nobody in particular: the node runs open (or the port asks for
    /// nothing: HTTP without TLS, a client port without client
    /// certificates).
    Nothing,
    /// Who it said it was, with the secret.
    Secret(Dialler),
    /// The certificate it showed over TLS.
    Certificate(CertificateDer<'static>),
}

/// The node's door; see the module documentation.
pub(crate) struct Admission {
    node: NodeId,
    cluster: String,
    lock: Lock,
    refusals: Refusals,
    metrics: Metrics,
}

impl Admission {
    /// The door of node `node` of `cluster`, locked with `lock`; refusals
    /// are counted in `metrics`.
    pub(crate) fn new(node: NodeId, cluster: String, lock: Lock, metrics: Metrics) -> Admission {
        Admission { node, cluster, lock, refusals: Refusals::default(), metrics }
    }

    /// Whether peer and client connections open with the secret's
    /// handshake.
    pub(crate) fn authenticates(&self) -> bool {
        matches!(self.lock, Lock::Secret(_))
    }

    /// The node's certificates, if it speaks TLS.
    pub(crate) fn certs(&self) -> Option<&Arc<Certs>> {
        match &self.lock {
            Lock::Tls(certs) => Some(certs),
            _ => None,
        }
    }

    /// The acceptor's side of the handshake on a new connection to `port`:
    /// the connection to go on with, and who dialled; or `Err` when it is
    /// to be dropped (logged, at most a line a second).
    pub(crate) async fn admit(
        &self,
        stream: TcpStream,
        from: SocketAddr,
        port: Port,
    ) -> Result<(Stream, Proof), ()> {
        match &self.lock {
            Lock::Open => Ok((Stream::Plain(stream), Proof::Nothing)),
            Lock::Secret(_) if port == Port::Http => Ok((Stream::Plain(stream), Proof::Nothing)),
            Lock::Secret(secret) => {
                let mut stream = stream;
                let dialler = self.challenge(&mut stream, secret, from, port).await?;
                Ok((Stream::Plain(stream), Proof::Secret(dialler)))
            }
            Lock::Tls(certs) => {
                let stream = self.tls(certs, stream, from, port).await?;
                let proof = match stream.peer_certificate() {
                    Some(cert) => Proof::Certificate(cert.clone().into_owned()),
                    None => Proof::Nothing,
                };
                Ok((stream, proof))
            }
        }
    }

    /// The TLS handshake on a connection to `port`, with whoever speaks
    /// plain TCP to it told why it is refused.
    async fn tls(
        &self,
        certs: &Certs,
        mut stream: TcpStream,
        from: SocketAddr,
        port: Port,
    ) -> Result<Stream, ()> {
        let mut first = [0u8; 1];
        match tokio::time::timeout(auth::HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await {
            Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => {}
            Ok(Ok(1)) => {
                let why = format!(
                    "this node's {} port speaks TLS: give the cluster's CA ([security] tls_ca \
                     in the configuration, or COTERIE_TLS_CA)",
                    port.name()
                );
                self.metrics.tls_refused(port.name());
                self.refusals.refused(port.name(), from, &"it spoke plain TCP to a TLS port");
                tell_plain(&mut stream, port, &why).await;
                return Err(());
            }
            // Closed before a word, or silent: nothing was claimed.
            _ => return Err(()),
        }
        let acceptor = match port {
            Port::Peer => certs.peer_acceptor(),
            Port::Client | Port::Http => certs.client_acceptor(),
        };
        match tokio::time::timeout(auth::HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => Ok(Stream::Tls(Box::new(tls.into()))),
            Ok(Err(e)) if codec::hung_up(&e) => {
                debug!(%from, port = port.name(), "a connection closed during its TLS handshake: {e}");
                Err(())
            }
            Ok(Err(e)) => {
                self.metrics.tls_refused(port.name());
                let why = format_args!("its TLS handshake failed: {}", refusal(&e));
                self.refusals.refused(port.name(), from, &why);
                Err(())
            }
            Err(_) => {
                debug!(%from, port = port.name(), "no TLS handshake within {:?}", auth::HANDSHAKE_TIMEOUT);
                Err(())
            }
        }
    }

    /// The secret's challenge–response, as the acceptor.
    async fn challenge(
        &self,
        stream: &mut TcpStream,
        secret: &Secret,
        from: SocketAddr,
        port: Port,
    ) -> Result<Dialler, ()> {
        match auth::accept(stream, secret, &self.cluster, self.node.0).await {
            Ok(dialler) => Ok(dialler),
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

    /// The dialler's side of the secret's handshake on a connection to a
    /// peer (TLS is [`transport`](crate::transport)'s, with
    /// [`Certs::dialler`]).
    pub(crate) async fn dial(&self, stream: &mut TcpStream) -> Result<(), AuthError> {
        match &self.lock {
            Lock::Secret(secret) => {
                auth::dial(stream, secret, &self.cluster, Role::Peer, self.node.0).await?;
                Ok(())
            }
            Lock::Open | Lock::Tls(_) => Ok(()),
        }
    }

    /// Tells a connection to `port` that it is turned away, `why`, in the
    /// first thing its client reads — over TLS if the node speaks it; the
    /// handshake's frame with a secret, a client frame without, an HTTP
    /// `503` on the HTTP port — and logs it (at most a line a second).
    /// The connection is handed back, to be closed.
    pub(crate) async fn turn_away(
        &self,
        stream: TcpStream,
        from: SocketAddr,
        port: Port,
        why: &str,
    ) -> Option<Stream> {
        self.refusals.refused(port.name(), from, &why);
        let mut stream = match &self.lock {
            Lock::Tls(certs) => self.tls(certs, stream, from, port).await.ok()?,
            _ => Stream::Plain(stream),
        };
        let _ = match port {
            Port::Http => write_out(&mut stream, &unavailable(why)).await,
            _ if self.authenticates() => {
                write_frame(&mut stream, &AuthFrame::Refused(why.to_string())).await
            }
            _ => write_frame(&mut stream, &ClientResponse::Error(why.to_string())).await,
        };
        Some(stream)
    }
}

/// Tells a client that spoke plain TCP to a TLS port why it is refused,
/// in its own protocol: an HTTP `400` on the HTTP port, a client frame on
/// the client port, and on the peer port the refusal of the handshake it
/// opened with (the secret's, or a Hello).
async fn tell_plain(stream: &mut TcpStream, port: Port, why: &str) {
    let _ = match port {
        Port::Http => write_out(stream, &http_error(400, "Bad Request", "tls_required", why)).await,
        Port::Client => write_frame(stream, &ClientResponse::Error(why.to_string())).await,
        Port::Peer => {
            let mut buf = Vec::new();
            let read = codec::read_frame::<AuthFrame, _>(stream, &mut buf);
            match tokio::time::timeout(auth::HANDSHAKE_TIMEOUT, read).await {
                Ok(Ok(Some(AuthFrame::Hello { .. }))) => {
                    write_frame(stream, &AuthFrame::Refused(why.to_string())).await
                }
                _ => write_frame(stream, &PeerFrame::Refused(why.to_string())).await,
            }
        }
    };
    let _ = tokio::io::AsyncWriteExt::shutdown(stream).await;
}

/// What a TLS handshake's failure was, in a line for the log.
fn refusal(e: &std::io::Error) -> String {
    let Some(tls) = crate::tls::tls_error(e) else { return e.to_string() };
    use rustls::{CertificateError as Cert, Error};
    match tls {
        Error::InvalidCertificate(Cert::UnknownIssuer | Cert::BadSignature) => {
            format!("{tls} (its certificate is not from this cluster's CA)")
        }
        Error::InvalidCertificate(Cert::Expired | Cert::ExpiredContext { .. }) => {
            format!("{tls} (its certificate has expired)")
        }
        Error::NoCertificatesPresented => format!("{tls} (it showed no certificate)"),
        _ => tls.to_string(),
    }
}

/// A whole HTTP/1.1 `503` response carrying the API's JSON error, written
/// before hyper ever sees the connection.
fn unavailable(why: &str) -> Vec<u8> {
    http_error(503, "Service Unavailable", "unavailable", why)
}

/// A whole HTTP/1.1 error response with the API's JSON error body.
fn http_error(status: u16, reason: &str, error: &str, why: &str) -> Vec<u8> {
    let body = serde_json::json!({ "error": error, "detail": why }).to_string();
    let retry = if status == 503 { "retry-after: 1\r\n" } else { "" };
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n\
         {retry}connection: close\r\ncontent-length: {}\r\n\r\n{body}",
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
