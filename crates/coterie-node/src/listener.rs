//! Accepting connections on one of the node's ports, as
//! tokio-rs/mini-redis's `Listener` does: each connection is served in a
//! task of its own, at most `max` at once (a semaphore permit per
//! connection, given back as it closes), until the node stops, when the
//! tasks still running get a second to finish and are then dropped with
//! the listener.
//!
//! A client connection beyond `[limits] max_clients` (an HTTP one beyond
//! `max_http`) is told why it is refused, in the first frame its client
//! reads (an HTTP `503`), and closed; one that fails the handshake (with
//! a secret) is dropped and logged, a line a second. Peer connections
//! hand-shake in [`transport`](crate::transport), where the Hello that
//! follows is checked too.

use crate::admission::{Admission, Port};
use crate::shutdown::Shutdown;
use crate::stream::Stream;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{warn, Instrument};

/// One port's accept loop; see the module documentation.
pub(crate) struct Listener {
    pub(crate) listener: TcpListener,
    pub(crate) port: Port,
    pub(crate) admission: Arc<Admission>,
    /// Connections served at once, at most.
    pub(crate) max: usize,
}

impl Listener {
    /// Accepts connections until `shutdown`, serving each with `serve`.
    pub(crate) async fn run<F, Fut>(self, serve: F, mut shutdown: Shutdown)
    where
        F: Fn(TcpStream, SocketAddr, Shutdown) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let limit = Arc::new(Semaphore::new(self.max));
        let mut conns = JoinSet::new();
        loop {
            let (stream, from) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        warn!(port = ?self.port, "accept failed: {e}");
                        // Out of file descriptors, say: let some close.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => continue,
                _ = shutdown.recv() => break,
            };
            let Ok(permit) = limit.clone().try_acquire_owned() else {
                let admission = self.admission.clone();
                let (port, max) = (self.port, self.max);
                conns.spawn(
                    async move {
                        let (what, key) = match port {
                            Port::Http => ("HTTP", "max_http"),
                            _ => ("client", "max_clients"),
                        };
                        let why = format!(
                            "this node serves {max} {what} connections already ([limits] {key}): \
                             try again later, or another node"
                        );
                        if let Some(stream) = admission.turn_away(stream, from, port, &why).await {
                            linger(stream).await;
                        }
                    }
                    .in_current_span(),
                );
                continue;
            };
            let served = serve(stream, from, shutdown.clone());
            conns.spawn(
                async move {
                    let _permit = permit;
                    served.await;
                }
                .in_current_span(),
            );
        }
        // Each connection saw the shutdown too: let those that can finish
        // what they are answering, briefly.
        let drain = async { while conns.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
    }
}

/// Serves a client or HTTP connection once it has passed the handshake
/// (TLS, or the secret's on the client port): `serve` gets the stream, or
/// nothing happens if it failed.
pub(crate) async fn admitted<F, Fut>(
    admission: Arc<Admission>,
    stream: TcpStream,
    from: SocketAddr,
    port: Port,
    serve: F,
) where
    F: FnOnce(Stream) -> Fut,
    Fut: Future<Output = ()>,
{
    if let Ok((stream, _)) = admission.admit(stream, from, port).await {
        serve(stream).await;
    }
}

/// Closes a refused connection gracefully: what the client sent meanwhile
/// is read and dropped, for a second at most, so that the close does not
/// reset the connection before the client has read why.
async fn linger(mut stream: Stream) {
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 512];
    let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}
