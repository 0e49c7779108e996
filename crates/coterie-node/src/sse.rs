//! The HTTP API's streams, as Server-Sent Events (the WHATWG HTML
//! standard's `text/event-stream`): a line `event: KIND` and a line
//! `data: JSON` per event, a comment every 15 s to keep idle proxies from
//! cutting the stream, and the stream ends when the node stops.
//!
//! | path | events |
//! |---|---|
//! | `GET /v1/watch` | `event`: the node's events, each as `coterie watch --json` prints it, a `Snapshot` first |
//! | `GET /v1/locks/{name}/watch` | `lock`: the lock as `GET /v1/locks/{name}` shows it, now and at every change of its holders or waiters |
//! | `GET /v1/elections/{name}/observe` | `leader`: as `GET /v1/elections/{name}`, now and at every change of leader or value |
//! | `GET /v1/sessions/{id}/watch` | `session` now; `revoke` each time someone asks it to let go of a lock it holds (`POST /v1/locks/{name}/revoke`), with the name, the fence and the reason; `ended` once it ends, with why and what it held, and the stream ends |
//!
//! A lock's holders and waiters live at every node; its watch re-reads
//! the cluster's view ([`Cluster::locks`](crate::cluster::Cluster)) when
//! a client of this node takes or lets go of it, and at least once a
//! heartbeat otherwise, and sends only what changed (the times held and
//! waited do not count as change). So a watched lock costs two small
//! messages per peer per heartbeat while it is watched, and nothing
//! when it is not.

use crate::locks::plea_for;
use crate::protocol::{LockInfo, NodeEvent, WatchEvent};
use crate::session::Shared;
use crate::sessions::{End, SessionError, Sessions, Watched};
use crate::shutdown::Shutdown;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use coterie_core::Name;
use serde::Serialize;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc};

/// Events a stream may be ahead of its client by before its producer waits.
const BUFFER: usize = 64;

/// A stream's answer.
pub(crate) type Events = Response;

/// Where a producer sends its stream's events.
struct Feed(mpsc::Sender<Event>);

/// The client went away.
struct Gone;

impl Feed {
    /// Sends one event of kind `kind` with `data` as JSON.
    async fn send(&self, kind: &str, data: &impl Serialize) -> Result<(), Gone> {
        let json = serde_json::to_string(data).map_err(|_| Gone)?;
        self.0.send(Event::default().event(kind).data(json)).await.map_err(|_| Gone)
    }
}

/// A stream fed by `produce` until it returns, the client goes or the
/// node stops (`stop`).
fn stream<F>(mut stop: Shutdown, produce: impl FnOnce(Feed) -> F) -> Events
where
    F: Future<Output = Result<(), Gone>> + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel(BUFFER);
    let left = tx.clone();
    let producing = produce(Feed(tx));
    tokio::spawn(async move {
        tokio::select! {
            _ = producing => {}
            () = left.closed() => {}
            () = stop.recv() => {}
        }
    });
    let events = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|e| e.map(Ok::<_, Infallible>))
    });
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

/// `GET /v1/watch`: the node's events.
pub(crate) fn node_events(shared: &Arc<Shared>, stop: Shutdown) -> Events {
    let shared = shared.clone();
    let mut events = shared.events.subscribe();
    let first = shared.events.snapshot(shared.status());
    stream(stop, |feed| async move {
        feed.send("event", &first).await?;
        loop {
            let event = match events.recv().await {
                Ok(e) => e,
                Err(broadcast::error::RecvError::Lagged(missed)) => shared.events.missed(missed),
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            };
            feed.send("event", &event).await?;
        }
    })
}

/// `GET /v1/elections/{name}/observe`: the leader now and every change.
pub(crate) async fn observe(shared: &Shared, stop: Shutdown, name: Name) -> Events {
    let patience = shared.timing().1;
    let (now, mut observer) = shared.cluster.observe(&name, patience).await;
    stream(stop, |feed| async move {
        feed.send("leader", &now).await?;
        while let Some(change) = observer.next().await {
            feed.send("leader", &change).await?;
        }
        Ok(())
    })
}

/// `GET /v1/locks/{name}/watch`: the lock now and at every change.
pub(crate) fn lock(shared: &Arc<Shared>, stop: Shutdown, name: Name) -> Events {
    let shared = shared.clone();
    let mut events = shared.events.subscribe();
    stream(stop, |feed| async move {
        let (heartbeat, patience) = shared.timing();
        let mut last: Option<LockInfo> = None;
        loop {
            let now = shared.cluster.lock(&name, patience, shared.default_permits).await;
            if last.as_ref().is_none_or(|l| !l.same_as(&now)) {
                feed.send("lock", &now).await?;
                last = Some(now);
            }
            // Until a client here takes or lets go of it, or a heartbeat.
            let tick = tokio::time::sleep(heartbeat);
            tokio::pin!(tick);
            loop {
                tokio::select! {
                    () = &mut tick => break,
                    e = events.recv() => match e {
                        Ok(WatchEvent { event: NodeEvent::Granted { name: n, .. }, .. })
                        | Ok(WatchEvent { event: NodeEvent::Released { name: n, .. }, .. })
                            if n == name.as_str() => break,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => return Ok(()),
                    },
                }
            }
        }
    })
}

/// `GET /v1/sessions/{id}/watch`: the session now, each plea to let go
/// of a lock it holds, and its end.
pub(crate) fn session(
    sessions: &Sessions,
    stop: Shutdown,
    id: String,
) -> Result<Events, SessionError> {
    let Watched { now, mut ended, session, mut pleas } = sessions.watch(&id)?;
    Ok(stream(stop, |feed| async move {
        feed.send("session", &now).await?;
        let end: Option<End> = loop {
            tokio::select! {
                // A closed channel is an ended session whose end was told
                // already.
                end = async { ended.wait_for(Option::is_some).await.ok().map(|e| e.clone()) } => {
                    break end.flatten();
                }
                Some(plea) = plea_for(&mut pleas, session) => {
                    feed.send("revoke", &plea.told()).await?;
                }
            }
        };
        if let Some(end) = end {
            feed.send("ended", &end).await?;
        }
        Ok(())
    }))
}
