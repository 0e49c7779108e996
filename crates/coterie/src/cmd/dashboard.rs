//! `coterie dashboard`: one page, served by this binary with everything it
//! needs built in, that shows a running cluster live and lets a person
//! fail its nodes and watch what follows.
//!
//! The server watches every node with messages
//! ([`watchers::spawn`](super::watchers::spawn)), one stream per node whoever
//! looks, and pushes each event to every open page as a server-sent event
//! (`GET /api/events`: the events so far, then each as it comes). The page
//! keeps them all, draws the nodes and a scrolling space-time strip from
//! them, and can stop and step back and forth through them. Its buttons
//! post steps to `/api/step`, in the language of scenario files
//! (`{"do": "partition", "node": 3}`): faults go to the nodes' client
//! ports (where the cluster allows faults); kill, stop, resume and restart
//! go to `coterie up --dashboard`, which owns the processes. A workload
//! starts and stops at `/api/workload`; `/api/diagram.svg` is the run so
//! far as a diagram; `/api/locks/watch` streams every live lock with its
//! holders and waiters, as `coterie locks --json` lists them, at each
//! change: fed by the same watch streams, the listing is asked of the
//! cluster again when a node reports something (at most four times a
//! second) and at least once a second while a page watches (never while
//! none does: a listing costs every node messages), and sent on only when
//! who holds or waits has changed (`/api/locks` is the listing once).

use super::common::{self, NodeAddr, Target};
use super::harness::{self, step::StepText, Target as StepTarget};
use super::recording::Recording;
use super::watchers::{self, Watched};
use super::workload;
use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use coterie_node::protocol::{unix_us, LockInfo};
use serde::Deserialize;
use std::collections::VecDeque;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};

/// The page: HTML, CSS and script in one file, built into the binary.
const PAGE: &str = include_str!("dashboard.html");

/// Events kept for a page that opens late (and for stepping back).
const HISTORY: usize = 50_000;

/// Serve a live dashboard of a running cluster (docker compose included).
///
/// Open the address in a browser: every node's state (up, suspected,
/// down; coordinator and epoch; idle, wanting or holding, with its fence;
/// entries, messages a second), the messages flowing between them as a
/// scrolling space-time strip, and the event timeline, pushed from the
/// nodes as they happen. Stop the live view to step through what was
/// recorded, event by event, or replay it at another speed. Partition,
/// heal, reset and pause nodes where the cluster allows faults; start and
/// stop a workload; download the run so far as an SVG diagram. To kill
/// and restart node processes too, use `coterie up --dashboard ADDR`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Where to serve the page.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let nodes = args.target.nodes()?;
    common::small_runtime()?.block_on(async {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let title = format!("{} nodes", nodes.len());
        eprintln!("coterie dashboard: http://{}/ ({title})", listener.local_addr()?);
        serve(listener, nodes, title, None, common::shutdown_signal()).await
    })?;
    Ok(ExitCode::SUCCESS)
}

/// A step the dashboard asks the owner of the node processes (`coterie
/// up`) to carry out, and where to say how it went.
pub struct Order {
    pub step: harness::Step,
    pub reply: oneshot::Sender<Result<String, String>>,
}

/// Where the dashboard sends its orders.
pub type Control = mpsc::UnboundedSender<Order>;

struct Shared {
    nodes: Vec<NodeAddr>,
    title: String,
    /// Every event so far (JSON), oldest first, at most [`HISTORY`].
    history: Mutex<VecDeque<String>>,
    live: broadcast::Sender<String>,
    recording: Mutex<Recording>,
    control: Option<Control>,
    workload: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Poked at each event from the nodes: the lock table may have changed.
    stirred: tokio::sync::Notify,
    /// The latest lock listing (JSON), for `/api/locks/watch`.
    locks: tokio::sync::watch::Sender<String>,
}

/// How often the lock table is asked for at most, and at least.
const LOCKS_AT_MOST: Duration = Duration::from_millis(250);
const LOCKS_AT_LEAST: Duration = Duration::from_secs(1);

/// Serves the dashboard of `nodes` on `listener` until `shutdown`; with
/// `control`, the page can kill, stop, resume and restart node processes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    nodes: Vec<NodeAddr>,
    title: String,
    control: Option<Control>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let ids = nodes.iter().enumerate().map(|(i, n)| n.id.unwrap_or(i as u32 + 1)).collect();
    let shared = Arc::new(Shared {
        recording: Mutex::new(Recording::since(ids, title.clone(), Some(unix_us()))),
        nodes,
        title,
        history: Mutex::new(VecDeque::new()),
        live: broadcast::channel(4096).0,
        control,
        workload: Mutex::new(None),
        stirred: tokio::sync::Notify::new(),
        locks: tokio::sync::watch::channel(String::new()).0,
    });
    let (tx, mut rx) = mpsc::unbounded_channel();
    watchers::spawn(&shared.nodes, tx, Some(false));
    let feed = shared.clone();
    tokio::spawn(async move {
        while let Some(watched) = rx.recv().await {
            feed.take_in(watched);
        }
    });
    tokio::spawn(follow_locks(shared.clone()));
    let app = Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/api/cluster", get(cluster))
        .route("/api/events", get(events))
        .route("/api/step", post(step))
        .route("/api/workload", post(work))
        .route("/api/diagram.svg", get(diagram))
        .route("/api/locks", get(locks))
        .route("/api/locks/watch", get(watch_locks))
        .with_state(shared);
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await?;
    Ok(())
}

impl Shared {
    fn take_in(&self, watched: Watched) {
        self.recording.lock().expect("recording lock").watched(&watched);
        let json = match &watched {
            Watched::Event(e) => serde_json::to_string(e),
            Watched::Lost { node } => serde_json::to_string(
                &serde_json::json!({"node": node, "unix_us": unix_us(), "event": "Lost"}),
            ),
        };
        let Ok(json) = json else { return };
        let mut history = self.history.lock().expect("history lock");
        if history.len() == HISTORY {
            history.pop_front();
        }
        history.push_back(json.clone());
        let _ = self.live.send(json);
        self.stirred.notify_one();
    }
}

async fn cluster(State(s): State<Arc<Shared>>) -> Json<serde_json::Value> {
    let nodes: Vec<serde_json::Value> = s
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| serde_json::json!({"id": n.id.unwrap_or(i as u32 + 1), "addr": n.addr}))
        .collect();
    Json(serde_json::json!({
        "title": s.title,
        "nodes": nodes,
        "processes": s.control.is_some(),
    }))
}

/// The events so far, then each as it comes, one SSE event each.
async fn events(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    // Subscribed before the history is read: nothing falls in between
    // (an event in both is shown twice at worst, and the page drops it).
    let live = s.live.subscribe();
    let past: Vec<String> = s.history.lock().expect("history lock").iter().cloned().collect();
    let past =
        past.into_iter().map(|j| Ok::<_, std::convert::Infallible>(Event::default().data(j)));
    let past = futures_util::stream::iter(past);
    let next = futures_util::stream::unfold(live, |mut live| async move {
        loop {
            match live.recv().await {
                Ok(json) => return Some((Ok(Event::default().data(json)), live)),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    use futures_util::StreamExt;
    Sse::new(past.chain(next)).keep_alive(KeepAlive::default())
}

fn bad(why: impl std::fmt::Display) -> Response {
    (StatusCode::BAD_REQUEST, Json(serde_json::json!({"error": why.to_string()}))).into_response()
}

/// Carries out a step the page sent: through `coterie up` when it owns
/// the processes (it then also resolves roles such as "coordinator"),
/// otherwise a fault through the node's client port.
async fn step(State(s): State<Arc<Shared>>, Json(text): Json<StepText>) -> Response {
    let step = match text.step() {
        Ok(step) => step,
        Err(e) => return bad(e),
    };
    let done = match &s.control {
        Some(control) => {
            let (reply, answer) = oneshot::channel();
            if control.send(Order { step, reply }).is_err() {
                return bad("coterie up has stopped");
            }
            answer.await.unwrap_or_else(|_| Err("coterie up has stopped".into()))
        }
        None if step.action.on_process() => Err(format!(
            "this dashboard does not own the processes, so it cannot {}: \
             run it with coterie up --dashboard",
            text.action
        )),
        None => match step.node {
            None => harness::fault(&s.nodes, &step.action, None).await,
            Some(StepTarget::Node(id)) => harness::fault(&s.nodes, &step.action, Some(id)).await,
            Some(other) => Err(anyhow::anyhow!("name a node by its id, not {other}")),
        }
        .map_err(|e| format!("{e:#}")),
    };
    match done {
        Ok(done) => Json(serde_json::json!({"done": done})).into_response(),
        Err(e) => bad(e),
    }
}

#[derive(Deserialize)]
struct WorkRequest {
    /// start | stop
    action: String,
}

/// A workload of two clients per node over three locks (`r0` the
/// hottest), each asking every 100 ms and holding 50 ms: slow enough to
/// follow on the page, busy enough that locks have waiters.
async fn work(State(s): State<Arc<Shared>>, Json(r): Json<WorkRequest>) -> Response {
    let mut running = s.workload.lock().expect("workload lock");
    if let Some(task) = running.take() {
        task.abort();
    }
    if r.action == "start" {
        let spec = workload::Spec {
            http: None,
            no_chain: false,
            nodes: s.nodes.clone(),
            clients: 2,
            choice: workload::Choice {
                names: 3,
                skew: workload::Skew::Zipf(1.0),
                ..Default::default()
            },
            requests: u64::MAX,
            hold: Duration::from_millis(50),
            think: Duration::from_millis(100),
            witness: None,
            deadline: None,
            progress: false,
            answer_within: Duration::from_secs(3600),
            events: None,
        };
        *running = Some(tokio::spawn(async move {
            let _ = workload::drive(spec).await;
        }));
    }
    Json(serde_json::json!({"workload": running.is_some()})).into_response()
}

/// Every live lock, and the nodes that did not answer.
type Listed = (Vec<LockInfo>, Vec<u32>);

/// Every live lock, from the first node that answers (it asks the
/// others), and the nodes that did not answer.
async fn list_locks(nodes: &[NodeAddr]) -> Result<Listed, String> {
    let asked = common::first_answer(nodes, Some(Duration::from_secs(2)), |mut c| async move {
        c.locks("").await
    });
    asked.await.map_err(|why| format!("no node answered ({why})"))
}

fn listing((locks, unreachable): &Listed) -> serde_json::Value {
    serde_json::json!({"locks": locks, "unreachable": unreachable})
}

async fn locks(State(s): State<Arc<Shared>>) -> Response {
    match list_locks(&s.nodes).await {
        Ok(listed) => Json(listing(&listed)).into_response(),
        Err(why) => bad(why),
    }
}

/// Keeps [`Shared::locks`] current; see the module documentation.
async fn follow_locks(s: Arc<Shared>) {
    let mut last: Option<Result<Listed, String>> = None;
    loop {
        // A listing costs every node two messages per peer: none while no
        // page watches. The first page to come gets a fresh one.
        if s.locks.receiver_count() == 0 {
            s.locks.send_replace(String::new());
            last = None;
            while s.locks.receiver_count() == 0 {
                tokio::time::sleep(LOCKS_AT_MOST).await;
            }
        }
        let now = list_locks(&s.nodes).await;
        // Times held and waited grow by themselves (the page counts them
        // on): a change is in who holds and who waits.
        let news = match (&last, &now) {
            (Some(Ok((was, was_out))), Ok((is, is_out))) => {
                was_out != is_out
                    || was.len() != is.len()
                    || was.iter().zip(is).any(|(a, b)| !a.same_as(b))
            }
            (Some(Err(was)), Err(is)) => was != is,
            _ => true,
        };
        if news {
            let json = match &now {
                Ok(listed) => listing(listed),
                Err(why) => serde_json::json!({"locks": [], "unreachable": [], "error": why}),
            };
            s.locks.send_replace(json.to_string());
        }
        last = Some(now);
        tokio::time::sleep(LOCKS_AT_MOST).await;
        let _ = tokio::time::timeout(LOCKS_AT_LEAST - LOCKS_AT_MOST, s.stirred.notified()).await;
    }
}

/// The lock table now, then at each change, one SSE event each.
async fn watch_locks(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    let mut changes = s.locks.subscribe();
    changes.mark_changed();
    let next = futures_util::stream::unfold(changes, |mut changes| async move {
        loop {
            changes.changed().await.ok()?;
            let listing = changes.borrow_and_update().clone();
            if !listing.is_empty() {
                return Some((
                    Ok::<_, std::convert::Infallible>(Event::default().data(listing)),
                    changes,
                ));
            }
        }
    });
    Sse::new(next).keep_alive(KeepAlive::default())
}

async fn diagram(State(s): State<Arc<Shared>>) -> Response {
    let run = {
        let recording = s.recording.lock().expect("recording lock");
        recording.snapshot()
    };
    let svg = coterie_diagram::svg::render(&run, &coterie_diagram::svg::Options::default());
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CONTENT_DISPOSITION, "attachment; filename=\"coterie-run.svg\""),
        ],
        svg,
    )
        .into_response()
}
