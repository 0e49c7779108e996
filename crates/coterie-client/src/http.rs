//! The HTTP/JSON API from Rust: sessions with a TTL, and named locks taken
//! and released through them, over one keep-alive HTTP/1.1 connection
//! (hyper's client). The same calls as `curl` or the Python client make;
//! docs/src/http.md in the repository has the API itself.
//!
//! A session outlives the connection: a client that reconnects (to the
//! same node: sessions are per node) within the TTL keeps its locks. Keep
//! it alive more often than its TTL (a third of it is usual), or lose them.
//!
//! ```no_run
//! # async fn run() -> Result<(), coterie_client::HttpError> {
//! use coterie_client::{HttpClient, Wait};
//! use std::time::Duration;
//! let mut api = HttpClient::connect("127.0.0.1:7401", None).await?;
//! let session = api.create_session(Duration::from_secs(10)).await?;
//! let grant = api.acquire("jobs/nightly", &session, Wait::Block(Some(Duration::from_secs(5)))).await?;
//! println!("held with fence {}", grant.fence);
//! api.release("jobs/nightly", &session, grant.fence).await?;
//! api.close_session(&session).await?;
//! # Ok(()) }
//! ```

use crate::stream::Stream;
use crate::tls::TlsClient;
use coterie_core::Mode;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{header, Method, Request};
use hyper_util::rt::TokioIo;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::net::TcpStream;

/// What went wrong calling the API.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The node could not be reached.
    #[error("cannot reach {addr}: {source}")]
    Connect {
        /// The address dialled.
        addr: String,
        /// Why not.
        source: std::io::Error,
    },
    /// The connection failed, or the node closed it.
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    /// The API answered with an error: its status and JSON.
    #[error("{status} {error}: {detail}")]
    Api {
        /// The HTTP status: 404 an unknown session, 409 busy or not held,
        /// 408 not granted in time, and so on.
        status: u16,
        /// What kind, as the API names it (`"busy"`, `"unknown session"` …).
        error: String,
        /// One line on what to do.
        detail: String,
    },
    /// An answer that is not the API's JSON.
    #[error("an answer that is not the API's JSON ({status}): {text}")]
    Answer {
        /// Its status.
        status: u16,
        /// Its start.
        text: String,
    },
}

/// How long an acquire waits.
#[derive(Clone, Copy, Debug)]
pub enum Wait {
    /// Until granted, or for at most this long (`408` after it).
    Block(Option<Duration>),
    /// Not at all: granted now or `409 busy`.
    Try,
}

/// A lock granted through the API.
#[derive(Clone, Debug, Deserialize)]
pub struct HttpGrant {
    /// The lock.
    pub name: String,
    /// Its fence, higher than every earlier grant of the name.
    pub fence: u64,
    /// The node that granted it.
    pub node: u32,
    /// How often the session now holds it: 1, or more when taken again
    /// with [`acquire_reentrant`](HttpClient::acquire_reentrant).
    #[serde(default = "one")]
    pub count: u32,
    /// Whether the session reads or writes.
    #[serde(default)]
    pub mode: Mode,
}

fn one() -> u32 {
    1
}

/// What a name's path segment escapes: everything but letters, digits and
/// `-._~` (a `/` in a name becomes `%2F`).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// One keep-alive connection to a node's HTTP API; see the module
/// documentation.
pub struct HttpClient {
    sender: SendRequest<Full<Bytes>>,
    /// `host:port`, for the Host header.
    authority: String,
    /// `Bearer TOKEN`, when the node asks for one.
    authorization: Option<String>,
}

impl HttpClient {
    /// Connects to the API at `addr` (`host:port`), presenting `token`
    /// with every request if given (a node with a secret asks for one).
    pub async fn connect(addr: &str, token: Option<&str>) -> Result<HttpClient, HttpError> {
        HttpClient::connect_with(addr, token, None).await
    }

    /// Connects as [`connect`](Self::connect) does, over TLS (HTTPS) when
    /// `tls` is given: the node's certificate checked against its CA and
    /// `addr`'s host, and the client's shown if the node asks for one.
    pub async fn connect_with(
        addr: &str,
        token: Option<&str>,
        tls: Option<&TlsClient>,
    ) -> Result<HttpClient, HttpError> {
        let error = |source| HttpError::Connect { addr: addr.to_string(), source };
        let stream = TcpStream::connect(addr).await.map_err(error)?;
        stream.set_nodelay(true).map_err(error)?;
        let stream = match tls {
            None => Stream::Plain(stream),
            Some(tls) => {
                let refused = |why: String| HttpError::Connect {
                    addr: addr.to_string(),
                    source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, why),
                };
                let name = crate::tls::server_name(addr).map_err(refused)?;
                match tls.connect(name, stream).await {
                    Ok(s) => Stream::Tls(Box::new(s.into())),
                    Err(e) => return Err(refused(format!("TLS: {}", crate::tls::explain(&e)))),
                }
            }
        };
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        // The connection's own task; it ends when the client is dropped.
        tokio::spawn(connection);
        Ok(HttpClient {
            sender,
            authority: addr.to_string(),
            authorization: token.map(|t| format!("Bearer {t}")),
        })
    }

    /// Creates a session with `ttl`: its id.
    pub async fn create_session(&mut self, ttl: Duration) -> Result<String, HttpError> {
        let body = json!({ "ttl": humantime::format_duration(ttl).to_string() });
        let answer = self.call(Method::POST, "/v1/sessions", Some(body)).await?;
        Ok(answer["id"].as_str().unwrap_or_default().to_string())
    }

    /// Keeps session `id` alive for another TTL.
    pub async fn keepalive(&mut self, id: &str) -> Result<(), HttpError> {
        self.call(Method::POST, &format!("/v1/sessions/{}/keepalive", segment(id)), None).await?;
        Ok(())
    }

    /// Closes session `id`: what it held is released, what it waited for
    /// withdrawn.
    pub async fn close_session(&mut self, id: &str) -> Result<(), HttpError> {
        self.call(Method::DELETE, &format!("/v1/sessions/{}", segment(id)), None).await?;
        Ok(())
    }

    /// Takes lock `name` for `session`, waiting as `wait` says. A session
    /// that holds it already is refused (`409`).
    pub async fn acquire(
        &mut self,
        name: &str,
        session: &str,
        wait: Wait,
    ) -> Result<HttpGrant, HttpError> {
        self.take(name, session, wait, false, Mode::Write).await
    }

    /// Takes lock `name` for `session` to read, waiting as `wait` says:
    /// shared with other readers, never with a writer (which
    /// [`acquire`](Self::acquire) takes).
    pub async fn acquire_read(
        &mut self,
        name: &str,
        session: &str,
        wait: Wait,
    ) -> Result<HttpGrant, HttpError> {
        self.take(name, session, wait, false, Mode::Read).await
    }

    /// Takes lock `name` for `session` as [`acquire`](Self::acquire) does,
    /// or, if `session` holds it already, again at once with the same
    /// fence: the grant's `count` says how often it now holds it, and as
    /// many [`release`](Self::release)s let it go.
    pub async fn acquire_reentrant(
        &mut self,
        name: &str,
        session: &str,
        wait: Wait,
    ) -> Result<HttpGrant, HttpError> {
        self.take(name, session, wait, true, Mode::Write).await
    }

    async fn take(
        &mut self,
        name: &str,
        session: &str,
        wait: Wait,
        reentrant: bool,
        mode: Mode,
    ) -> Result<HttpGrant, HttpError> {
        let mut body = json!({ "session": session });
        if reentrant {
            body["reentrant"] = json!(true);
        }
        if mode == Mode::Read {
            body["mode"] = json!(mode);
        }
        match wait {
            Wait::Try => body["try"] = json!(true),
            Wait::Block(Some(limit)) => {
                body["timeout"] = json!(humantime::format_duration(limit).to_string())
            }
            Wait::Block(None) => {}
        }
        let path = format!("/v1/locks/{}/acquire", segment(name));
        let answer = self.call(Method::POST, &path, Some(body)).await?;
        serde_json::from_value(answer.clone())
            .map_err(|_| HttpError::Answer { status: 200, text: answer.to_string() })
    }

    /// Releases lock `name`, held by `session` with `fence`, once: how
    /// often the session still holds it (0: let go; more only after
    /// [`acquire_reentrant`](Self::acquire_reentrant)).
    pub async fn release(
        &mut self,
        name: &str,
        session: &str,
        fence: u64,
    ) -> Result<u32, HttpError> {
        let path = format!("/v1/locks/{}/release", segment(name));
        let body = json!({ "session": session, "fence": fence });
        let answer = self.call(Method::POST, &path, Some(body)).await?;
        Ok(answer["count"].as_u64().and_then(|c| u32::try_from(c).ok()).unwrap_or(0))
    }

    /// Asks every holder of lock `name`, cluster wide, to let go, saying
    /// `reason`: how many were asked. Each hears it as a `revoke` event on
    /// its session's stream (`GET /v1/sessions/{id}/watch`), or as its
    /// CLI's chosen signal, and decides; `409` if nobody holds the lock.
    pub async fn revoke(&mut self, name: &str, reason: Option<&str>) -> Result<u32, HttpError> {
        let path = format!("/v1/locks/{}/revoke", segment(name));
        let answer = self.call(Method::POST, &path, Some(json!({ "reason": reason }))).await?;
        Ok(answer["holders"].as_u64().and_then(|c| u32::try_from(c).ok()).unwrap_or(0))
    }

    /// Any call: `method` on `path` with a JSON `body`, the JSON answer, or
    /// the API's error.
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, HttpError> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, &self.authority)
            .header(header::ACCEPT, "application/json");
        if let Some(authorization) = &self.authorization {
            request = request.header(header::AUTHORIZATION, authorization);
        }
        let bytes = match body {
            Some(body) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(body.to_string())
            }
            None => Bytes::new(),
        };
        let request = request.body(Full::new(bytes)).map_err(|e| HttpError::Answer {
            status: 0,
            text: format!("a request that cannot be made: {e}"),
        })?;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await?.to_bytes();
        let answer = |text: &[u8]| HttpError::Answer {
            status,
            text: String::from_utf8_lossy(&text[..text.len().min(200)]).into_owned(),
        };
        let value: Value = serde_json::from_slice(&bytes).map_err(|_| answer(&bytes))?;
        if status / 100 == 2 {
            return Ok(value);
        }
        match (value["error"].as_str(), value["detail"].as_str()) {
            (Some(error), Some(detail)) => {
                Err(HttpError::Api { status, error: error.into(), detail: detail.into() })
            }
            _ => Err(answer(&bytes)),
        }
    }
}

/// `text` as one path segment.
fn segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_counts_one_unless_the_node_says_more() {
        let older: HttpGrant =
            serde_json::from_value(json!({ "name": "a", "fence": 7, "node": 1 })).unwrap();
        assert_eq!(older.count, 1, "a node from before reentrancy");
        let again: HttpGrant =
            serde_json::from_value(json!({ "name": "a", "fence": 7, "node": 1, "count": 3 }))
                .unwrap();
        assert_eq!(again.count, 3);
    }

    #[test]
    fn a_name_is_one_path_segment() {
        assert_eq!(segment("jobs/nightly"), "jobs%2Fnightly");
        assert_eq!(segment("a b~c.d-e_f"), "a%20b~c.d-e_f");
        assert_eq!(segment("é"), "%C3%A9");
    }
}
