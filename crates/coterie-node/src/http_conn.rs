//! One HTTP/1.1 connection to the API, served by hyper with the timer
//! `axum::serve` leaves out: a connection that sends no complete request
//! header within `[limits] http_idle` is closed — a client that connects
//! and says nothing, a slow-loris header, a keep-alive connection left
//! idle. hyper's header-read timeout covers all three: it runs whenever the
//! connection waits for the head of a request, and never while a request is
//! being answered, so a blocking acquire or an event stream is not cut.
//!
//! The cap on connections at once is the [`listener`](crate::listener)'s
//! (`[limits] max_http`); when the node stops, the connection finishes the
//! response it is writing and closes.

use crate::shutdown::Shutdown;
use crate::stream::Stream;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::time::Duration;
use tracing::debug;

/// Serves `router` on `stream` (plain, or TLS: HTTPS) until the client
/// closes, `idle` passes without a request, or the node stops.
pub(crate) async fn serve(router: Router, stream: Stream, idle: Duration, mut stop: Shutdown) {
    // Answers are small and awaited one by one: do not let Nagle hold them.
    let _ = stream.tcp().set_nodelay(true);
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(idle)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
    tokio::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        _ = stop.recv() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = ended {
        // A timeout, a reset, a malformed request: the client's business.
        debug!("an HTTP connection ended: {e}");
    }
}
