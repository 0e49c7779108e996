//! The HTTP/JSON API (`[[node]] http = "HOST:PORT"`): named locks for any
//! language, through sessions with a TTL ([`sessions`](crate::sessions)),
//! as Consul's `PUT /v1/kv/k?acquire=session` and etcd's JSON gateway
//! serve theirs. The answers are the binary protocol's, from the same
//! code: a lock is taken by the rules every session follows
//! ([`session`](crate::session)), listed by the same cluster-wide view
//! ([`cluster`](crate::cluster)) `coterie locks` prints.
//!
//! | method and path | body | answer |
//! |---|---|---|
//! | `POST /v1/sessions` | `{"ttl": "10s", "client": "job-7"}` (both optional) | `{"id", "ttl"}` |
//! | `POST /v1/sessions/{id}/keepalive` | | `{"id", "ttl"}` |
//! | `DELETE /v1/sessions/{id}` | | `{"id"}`; what it held is released |
//! | `POST /v1/locks/{name}/acquire` | `{"session", "permits", "timeout": "5s" \| "try": true, "value"}` | `{"name", "fence", "node"}`; 409 busy, 408 timed out |
//! | `POST /v1/locks/{name}/release` | `{"session", "fence"}` | `{"name", "fence"}`; 409 not held |
//! | `POST /v1/locks/{name}/revoke` | `{"reason"}` (optional) | `{"name", "holders", "unreachable"}`: the holders asked to let go; 409 nobody holds it |
//! | `GET /v1/locks[?prefix=P]` | | every live lock, as `coterie locks --json` |
//! | `GET /v1/locks/{name}` | | one lock: `{"name", "permits", "holders", "waiters", "order"}` |
//! | `POST /v1/elections/{name}/campaign` | `{"session", "value", "timeout" \| "try"}` | `{"name", "fence", "value", "node"}` once leader |
//! | `POST /v1/elections/{name}/proclaim` | `{"session", "value"}` | the same, with the new value; 409 not leader |
//! | `POST /v1/elections/{name}/resign` | `{"session"}` | `{"name", "fence"}`; 409 not leader |
//! | `GET /v1/elections/{name}` | | `{"name", "leader": {"node", "value", "fence"} \| null}` |
//! | `GET /v1/status` | | the node's status, as `coterie status --json` |
//! | `GET /metrics` | | the node's metrics, for Prometheus ([`exporter`](crate::exporter)) |
//! | `GET /v1/openapi.json` | | this API's OpenAPI document ([`OPENAPI`]) |
//! | `GET /healthz` | | `{"ok": true, "joined", "sessions"}` |
//!
//! And streams of Server-Sent Events ([`sse`](crate::sse)): `GET
//! /v1/watch`, `GET /v1/locks/{name}/watch`, `GET
//! /v1/elections/{name}/observe`, `GET /v1/sessions/{id}/watch`.
//!
//! Errors are JSON, `{"error", "detail"}`, with the status a user expects:
//! 400 a bad name or body, 401 no or a wrong token, 404 an unknown session,
//! 408 and 409 as above, 413 a body over [`MAX_BODY`], 429 a limit,
//! 503 a node not in the cluster yet. A name with `/` is percent-encoded
//! in the path (`jobs%2Fnightly`); durations are humantime strings.
//!
//! **Who may call it**: with a cluster secret, every request carries
//! `Authorization: Bearer TOKEN`, one of the tokens in `[security]
//! api_token_file` (compared in constant time). Without a secret the node
//! serves the API on a loopback address only, unless `[security]
//! api_open` says otherwise; a node that would serve it open refuses to
//! start, saying why.

use crate::exporter::{self, Exporter};
use crate::protocol::{Acquire, LockInfo, Revoked};
use crate::session::{clip, Refusal, Shared, Taken};
use crate::sessions::{Released, SessionError, Sessions};
use crate::shutdown::Shutdown;
use crate::sse::{self, Events};
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use coterie_core::{Fence, Mode, Name};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// The largest request body, in bytes.
pub const MAX_BODY: usize = 64 * 1024;

/// A session's TTL when it names none.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// What every request shares.
pub(crate) struct Api {
    pub(crate) shared: Arc<Shared>,
    pub(crate) sessions: Arc<Sessions>,
    /// The bearer tokens accepted; `None`: no token is asked for.
    pub(crate) tokens: Option<Vec<Vec<u8>>>,
    /// `/metrics`.
    pub(crate) exporter: Exporter,
    /// The node's stop signal, which ends the streams.
    pub(crate) stop: Shutdown,
}

/// The API's routes, over `api`.
pub(crate) fn router(api: Arc<Api>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/status", get(status))
        .route("/metrics", get(metrics))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/sessions", post(create_session))
        .route("/v1/sessions/{id}", axum::routing::delete(close_session))
        .route("/v1/sessions/{id}/keepalive", post(keepalive))
        .route("/v1/sessions/{id}/watch", get(watch_session))
        .route("/v1/watch", get(watch_node))
        .route("/v1/locks", get(list_locks))
        .route("/v1/locks/{name}", get(get_lock))
        .route("/v1/locks/{name}/acquire", post(acquire))
        .route("/v1/locks/{name}/release", post(release))
        .route("/v1/locks/{name}/watch", get(watch_lock))
        .route("/v1/locks/{name}/revoke", post(revoke))
        .route("/v1/elections/{name}", get(leader))
        .route("/v1/elections/{name}/campaign", post(campaign))
        .route("/v1/elections/{name}/proclaim", post(proclaim))
        .route("/v1/elections/{name}/resign", post(resign))
        .route("/v1/elections/{name}/observe", get(observe))
        .fallback(not_found)
        .method_not_allowed_fallback(wrong_method)
        // `Body` reads and limits bodies itself, draining what is over.
        .layer(DefaultBodyLimit::disable())
        .with_state(api)
}

/// An error answer: a status and `{"error", "detail"}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    error: &'static str,
    detail: String,
}

impl ApiError {
    fn new(status: StatusCode, error: &'static str, detail: impl Into<String>) -> ApiError {
        ApiError { status, error, detail: detail.into() }
    }

    fn bad(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad request", detail)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": self.error, "detail": self.detail }));
        let mut response = (self.status, body).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            let challenge = header::HeaderValue::from_static("Bearer");
            response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
        }
        response
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> ApiError {
        match e {
            SessionError::Unknown(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "unknown session", e.to_string())
            }
            SessionError::TooMany(_) => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "limit", e.to_string())
            }
            SessionError::Ttl(_) => ApiError::bad(e.to_string()),
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        match r {
            Refusal::Invalid(why) => ApiError::bad(why),
            Refusal::Conflict(why) => ApiError::new(StatusCode::CONFLICT, "conflict", why),
            Refusal::Limit(why) => ApiError::new(StatusCode::TOO_MANY_REQUESTS, "limit", why),
            Refusal::NoQuorum(why) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no_quorum", why)
            }
        }
    }
}

/// A request whose caller showed an accepted token (or that needs none).
struct Authorized;

impl FromRequestParts<Arc<Api>> for Authorized {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<Api>) -> Result<Self, ApiError> {
        let Some(tokens) = &api.tokens else { return Ok(Authorized) };
        let unauthorized =
            |detail: &str| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", detail);
        let value = parts
            .headers
            .get(header::AUTHORIZATION)
            .ok_or_else(|| unauthorized("this node asks for `Authorization: Bearer TOKEN`"))?;
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| unauthorized("the Authorization header is not `Bearer TOKEN`"))?;
        let known = tokens.iter().fold(subtle::Choice::from(0), |found, t| {
            found | t.as_slice().ct_eq(token.trim().as_bytes())
        });
        if bool::from(known) {
            Ok(Authorized)
        } else {
            Err(unauthorized("the token is not one of this node's ([security] api_token_file)"))
        }
    }
}

/// A JSON object, or the API's own error for a body that will not do.
/// Read whatever the content type says (`curl -d` says a form), and an
/// empty body is `{}`.
struct Body<T>(T);

impl<T, S> FromRequest<S> for Body<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, _: &S) -> Result<Self, ApiError> {
        let bytes = read_body(req.into_body()).await?;
        let text: &[u8] = if bytes.trim_ascii().is_empty() { b"{}" } else { &bytes };
        // serde would take a struct from an array of its fields too.
        if text.trim_ascii_start().first() != Some(&b'{') {
            return Err(ApiError::bad("the body must be a JSON object"));
        }
        serde_json::from_slice(text)
            .map(Body)
            .map_err(|e| ApiError::bad(format!("the body is not what this call takes: {e}")))
    }
}

/// How much of a body over [`MAX_BODY`] is read and thrown away before the
/// 413 is sent, and for how long at most.
const DRAIN: (usize, Duration) = (64 * 1024 * 1024, Duration::from_secs(5));

/// A request body, at most [`MAX_BODY`] bytes. One over it is refused
/// only once it has been read to its end (up to [`DRAIN`]): a client that
/// sends its whole body before reading the answer, as most do without
/// `Expect: 100-continue`, then reads the 413 instead of a reset, as from
/// nginx's lingering close.
async fn read_body(body: axum::body::Body) -> Result<Vec<u8>, ApiError> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    let mut seen = 0usize;
    let drain_until = tokio::time::Instant::now() + DRAIN.1;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad(format!("the body could not be read: {e}")))?;
        seen = seen.saturating_add(chunk.len());
        if seen <= MAX_BODY {
            bytes.extend_from_slice(&chunk);
        } else if seen > DRAIN.0 || tokio::time::Instant::now() > drain_until {
            break;
        }
    }
    if seen > MAX_BODY {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body too large",
            format!("the body is {seen} bytes or more; the limit is {MAX_BODY}"),
        ));
    }
    Ok(bytes)
}

/// One segment of the path (a lock's or an election's name, a session's
/// id), percent-decoded, or the API's own error.
struct Segment(String);

impl<S: Send + Sync> FromRequestParts<S> for Segment {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(text)) => Ok(Segment(text)),
            Err(_) => Err(ApiError::bad(format!(
                "the path {} is not percent-encoded UTF-8 (a name is UTF-8, percent-encoded \
                 where it must be: jobs%2Fnightly)",
                clip(parts.uri.path())
            ))),
        }
    }
}

fn parse_duration(what: &str, text: &str) -> Result<Duration, ApiError> {
    humantime::parse_duration(text)
        .map_err(|e| ApiError::bad(format!("{what} {text:?} is not a duration like \"10s\": {e}")))
}

fn name(text: &str) -> Result<Name, ApiError> {
    Name::new(text).map_err(|e| ApiError::bad(format!("{e}: {}", clip(text))))
}

/// The paths whose second part is a name.
const NAMED: [&str; 2] = ["/v1/locks/", "/v1/elections/"];

async fn not_found(uri: Uri) -> ApiError {
    let path = uri.path();
    let mut detail =
        format!("no such path in coterie's API: {} (see /v1/openapi.json)", clip(path));
    if let Some(rest) = NAMED.iter().find_map(|p| path.strip_prefix(p)) {
        if rest.matches('/').count() > 1 || (rest.contains('/') && !rest.ends_with('/')) {
            detail.push_str(
                "; a name with `/` in it is percent-encoded in the path, as \
                 /v1/locks/jobs%2Fnightly/acquire",
            );
        }
    }
    ApiError::new(StatusCode::NOT_FOUND, "not found", detail)
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    let detail = format!(
        "{} does not take {method} (see /v1/openapi.json for what it takes)",
        clip(uri.path())
    );
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed", detail)
}

/// The API's OpenAPI document, checked against the running server by
/// schemathesis in the tests.
pub const OPENAPI: &str = include_str!("openapi.json");

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn healthz(State(api): State<Arc<Api>>) -> Json<Value> {
    let joined = api.shared.joined();
    Json(json!({ "ok": true, "joined": joined, "sessions": api.sessions.len() }))
}

async fn metrics(_: Authorized, State(api): State<Arc<Api>>) -> Response {
    let content_type = [(header::CONTENT_TYPE, exporter::CONTENT_TYPE)];
    (content_type, api.exporter.render()).into_response()
}

async fn status(_: Authorized, State(api): State<Arc<Api>>) -> Json<Value> {
    let status = api.shared.status();
    let epoch = coterie_core::Epoch(status.epoch).to_string();
    let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
    value["epoch_name"] = json!(epoch);
    Json(value)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewSession {
    ttl: Option<String>,
    client: Option<String>,
}

#[derive(Serialize)]
struct SessionView {
    id: String,
    ttl: String,
}

fn session_view(id: String, ttl: Duration) -> Json<SessionView> {
    Json(SessionView { id, ttl: humantime::format_duration(ttl).to_string() })
}

async fn create_session(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Body(body): Body<NewSession>,
) -> Result<Json<SessionView>, ApiError> {
    let ttl = match &body.ttl {
        Some(text) => parse_duration("ttl", text)?,
        None => DEFAULT_TTL,
    };
    if body.client.as_ref().is_some_and(|c| c.len() > crate::session::MAX_LABEL_LEN) {
        return Err(ApiError::bad("the client label is too long"));
    }
    let id = api.sessions.create(ttl, body.client)?;
    Ok(session_view(id, ttl))
}

async fn keepalive(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(id): Segment,
) -> Result<Json<SessionView>, ApiError> {
    let ttl = api.sessions.keepalive(&id)?;
    Ok(session_view(id, ttl))
}

async fn close_session(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(id): Segment,
) -> Result<Json<Value>, ApiError> {
    api.sessions.close(&id)?;
    Ok(Json(json!({ "id": id })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AcquireBody {
    session: String,
    #[serde(default)]
    permits: u32,
    timeout: Option<String>,
    #[serde(default, rename = "try")]
    try_lock: bool,
    value: Option<String>,
    /// A session that holds the lock already takes it again: a count.
    #[serde(default)]
    reentrant: bool,
    /// Read (sharing the lock with other readers) or write (alone).
    #[serde(default)]
    mode: Mode,
}

#[derive(Serialize)]
struct Granted {
    name: String,
    fence: u64,
    node: u32,
    /// How often the session now holds it (more than 1 only when taken
    /// again with `"reentrant": true`).
    count: u32,
    /// Whether it reads or writes.
    mode: Mode,
}

async fn acquire(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(text): Segment,
    Body(body): Body<AcquireBody>,
) -> Result<Json<Granted>, ApiError> {
    if body.reentrant && body.value.is_some() {
        return Err(ApiError::bad(
            "\"reentrant\" is for locks, and \"value\" makes the holder an election's leader, \
             which it is once: give one or the other",
        ));
    }
    let (timeout, try_lock, reentrant, mode) =
        (body.timeout, body.try_lock, body.reentrant, body.mode);
    let wait = Wait { timeout, try_lock, reentrant, mode };
    let (name, fence, count) =
        take(&api, &text, &body.session, body.permits, wait, body.value).await?;
    let node = api.shared.node().0;
    Ok(Json(Granted { name: name.to_string(), fence: fence.0, node, count, mode }))
}

/// How long an acquire or a campaign waits, and whether a session that
/// holds the name already takes it again.
struct Wait {
    timeout: Option<String>,
    try_lock: bool,
    reentrant: bool,
    /// And whether it reads or writes.
    mode: Mode,
}

/// Takes lock `text` for session `id`: what acquire and campaign share.
/// With the fence, how often the session now holds it.
async fn take(
    api: &Api,
    text: &str,
    id: &str,
    permits: u32,
    wait: Wait,
    value: Option<String>,
) -> Result<(Name, Fence, u32), ApiError> {
    let name = name(text)?;
    if wait.try_lock && wait.timeout.is_some() {
        return Err(ApiError::bad(
            "\"try\": true answers at once and \"timeout\" waits: give one or the other",
        ));
    }
    let timeout = wait.timeout.as_deref().map(|t| parse_duration("timeout", t)).transpose()?;
    if !api.shared.joined() {
        let detail = "this node has not joined the cluster yet: try again, or another node";
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not joined", detail));
    }
    let req = Acquire {
        names: vec![name.to_string()],
        permits,
        timeout_ms: timeout.map(|d| d.as_millis().try_into().unwrap_or(u64::MAX)),
        try_lock: wait.try_lock,
        value,
        client: String::new(),
        mode: wait.mode,
    };
    let (taken, count) = api.sessions.acquire(id, &req, wait.reentrant).await?;
    match taken {
        Taken::Granted(held) => {
            let (name, fence) = held.into_iter().next().expect("one name asked, one granted");
            Ok((name, fence, count))
        }
        Taken::Busy => {
            Err(ApiError::new(StatusCode::CONFLICT, "busy", format!("{} is held", clip(text))))
        }
        Taken::TimedOut => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timed out",
            format!("{} was not granted within the timeout", clip(text)),
        )),
        Taken::Lost(_) => Err(SessionError::Unknown(id.to_string()).into()),
        Taken::Refused(why) => Err(why.into()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseBody {
    session: String,
    fence: u64,
}

async fn release(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(text): Segment,
    Body(body): Body<ReleaseBody>,
) -> Result<Json<Value>, ApiError> {
    let name = name(&text)?;
    match api.sessions.release(&body.session, &name, Fence(body.fence))? {
        Released::Done(count) => {
            Ok(Json(json!({ "name": text, "fence": body.fence, "count": count })))
        }
        Released::NotHeld => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not held",
            format!(
                "session {} does not hold {} with fence {}",
                clip(&body.session),
                clip(&text),
                body.fence
            ),
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Prefix {
    #[serde(default)]
    prefix: String,
}

async fn list_locks(
    _: Authorized,
    State(api): State<Arc<Api>>,
    query: Result<Query<Prefix>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<LockInfo>>, ApiError> {
    let Query(Prefix { prefix }) = query.map_err(|e| ApiError::bad(e.body_text()))?;
    let patience = api.shared.timing().1;
    let (locks, _unreachable) = api.shared.cluster.locks(&prefix, patience).await;
    Ok(Json(locks))
}

async fn get_lock(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(text): Segment,
) -> Result<Json<LockInfo>, ApiError> {
    let (shared, name) = (&api.shared, name(&text)?);
    let patience = shared.timing().1;
    Ok(Json(shared.cluster.lock(&name, patience, shared.default_permits).await))
}

async fn watch_lock(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(text): Segment,
) -> Result<Events, ApiError> {
    Ok(sse::lock(&api.shared, api.stop.clone(), name(&text)?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RevokeBody {
    reason: Option<String>,
}

/// Asks every holder of a lock to let go: each hears it on its session's
/// stream (`revoke`), or as its CLI's chosen signal, and decides.
async fn revoke(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(text): Segment,
    Body(body): Body<RevokeBody>,
) -> Result<Json<Revoked>, ApiError> {
    let patience = api.shared.timing().1;
    let (holders, unreachable) = api.shared.revoke(&text, body.reason, patience).await?;
    Ok(Json(Revoked { name: text, holders, unreachable }))
}

async fn watch_node(_: Authorized, State(api): State<Arc<Api>>) -> Events {
    sse::node_events(&api.shared, api.stop.clone())
}

async fn watch_session(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(id): Segment,
) -> Result<Events, ApiError> {
    Ok(sse::session(&api.sessions, api.stop.clone(), id)?)
}

async fn leader(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(text): Segment,
) -> Result<Json<crate::protocol::LeaderReport>, ApiError> {
    let name = name(&text)?;
    let patience = api.shared.timing().1;
    Ok(Json(api.shared.cluster.leader(&name, patience).await))
}

async fn observe(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(text): Segment,
) -> Result<Events, ApiError> {
    Ok(sse::observe(&api.shared, api.stop.clone(), name(&text)?).await)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CampaignBody {
    session: String,
    value: String,
    timeout: Option<String>,
    #[serde(default, rename = "try")]
    try_lock: bool,
}

#[derive(Serialize)]
struct Leading {
    name: String,
    fence: u64,
    value: String,
    node: u32,
}

async fn campaign(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(text): Segment,
    Body(body): Body<CampaignBody>,
) -> Result<Json<Leading>, ApiError> {
    let (timeout, try_lock) = (body.timeout, body.try_lock);
    let wait = Wait { timeout, try_lock, reentrant: false, mode: Mode::Write };
    let value = Some(body.value.clone());
    let (name, fence, _) = take(&api, &text, &body.session, 0, wait, value).await?;
    let node = api.shared.node().0;
    Ok(Json(Leading { name: name.to_string(), fence: fence.0, value: body.value, node }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProclaimBody {
    session: String,
    value: String,
}

fn not_leader(id: &str, text: &str) -> ApiError {
    let detail = format!("session {} does not lead election {}", clip(id), clip(text));
    ApiError::new(StatusCode::CONFLICT, "not leader", detail)
}

async fn proclaim(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(text): Segment,
    Body(body): Body<ProclaimBody>,
) -> Result<Json<Leading>, ApiError> {
    let name = name(&text)?;
    if body.value.len() > crate::session::MAX_LABEL_LEN {
        return Err(ApiError::bad("the value is too long"));
    }
    let fence = api.sessions.proclaim(&body.session, &name, body.value.clone())?;
    let fence = fence.ok_or_else(|| not_leader(&body.session, &text))?;
    let node = api.shared.node().0;
    Ok(Json(Leading { name: name.to_string(), fence: fence.0, value: body.value, node }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResignBody {
    session: String,
}

async fn resign(
    _: Authorized,
    State(api): State<Arc<Api>>,
    Segment(text): Segment,
    Body(body): Body<ResignBody>,
) -> Result<Json<Value>, ApiError> {
    let name = name(&text)?;
    let fence = api.sessions.resign(&body.session, &name)?;
    let fence = fence.ok_or_else(|| not_leader(&body.session, &text))?;
    Ok(Json(json!({ "name": text, "fence": fence.0 })))
}
