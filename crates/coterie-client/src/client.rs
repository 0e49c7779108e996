//! Talking to a node's client port, and to the witness.

use crate::auth::{self, AuthError, Role, Secret};
use crate::codec::{write_frame, FrameError, FrameReader};
use crate::protocol::{
    Acquire, ClientRequest, ClientResponse, FaultCommand, FaultState, LeaderReport, LockInfo,
    RevokeAsked, WatchEvent, WitnessReport, WitnessRequest, WitnessResponse,
};
use crate::stream::Stream;
use crate::tls::TlsClient;
use coterie_core::{Mode, Status};
use serde::{de::DeserializeOwned, Serialize};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// What went wrong talking to a node or the witness.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No connection could be made.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The connection broke or carried garbage.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The connection closed before an answer came.
    #[error("connection closed by the server")]
    Closed,
    /// The server answered something that does not fit the request.
    #[error("unexpected answer: {0}")]
    Unexpected(String),
    /// The node refused the request, saying why.
    #[error("{0}")]
    Refused(String),
    /// The session was lost while waiting for an answer (see
    /// [`Client::lost`]).
    #[error("the session was lost: {0}")]
    Lost(Loss),
    /// The TLS handshake failed: the node's certificate is not from the
    /// CA trusted, or does not name the address dialled, or the node
    /// refused the client's certificate, or the port does not speak TLS.
    #[error("TLS with {addr} failed: {why}")]
    Tls {
        /// The address.
        addr: String,
        /// Why, in a line.
        why: String,
    },
    /// The node refused our credentials, or could not show it knows the
    /// secret.
    #[error("authentication with {addr} failed: {source}")]
    Auth {
        /// The address.
        addr: String,
        /// Why.
        source: AuthError,
    },
}

/// What a client proves itself with, and checks the node by: TLS (the
/// CA to trust, and a certificate to show if the node asks for one), or
/// else the cluster's secret; and the cluster's name (empty: whichever
/// cluster the node belongs to).
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    /// The shared secret, for a cluster without TLS.
    pub secret: Option<Secret>,
    /// The cluster's name, or empty.
    pub cluster: String,
    /// TLS settings, for a cluster with certificates: the secret's
    /// handshake is then not made.
    pub tls: Option<TlsClient>,
}

impl Credentials {
    /// The credentials of a cluster with a secret.
    pub fn with_secret(secret: Secret, cluster: impl Into<String>) -> Credentials {
        Credentials { secret: Some(secret), cluster: cluster.into(), tls: None }
    }
}

/// A framed request/response connection. Reading is cancel-safe
/// ([`FrameReader`]).
struct Conn {
    reader: FrameReader<Stream>,
    /// Keepalive pings written whose PONG has not been read yet.
    pings_due: u32,
    /// Pleas to let go that came between answers, not yet taken
    /// ([`Client::hold_event`]).
    pleas: VecDeque<RevokeAsked>,
}

impl Conn {
    async fn open(addr: &str, tls: Option<&TlsClient>) -> Result<Conn, ClientError> {
        let connect = TcpStream::connect(addr);
        let stream = match tokio::time::timeout(Duration::from_secs(5), connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => return Err(ClientError::Connect { addr: addr.to_string(), source }),
            Err(_) => {
                let source = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out");
                return Err(ClientError::Connect { addr: addr.to_string(), source });
            }
        };
        stream.set_nodelay(true).map_err(FrameError::Io)?;
        let stream = match tls {
            None => Stream::Plain(stream),
            Some(tls) => {
                let refused = |why: String| ClientError::Tls { addr: addr.to_string(), why };
                let name = crate::tls::server_name(addr).map_err(refused)?;
                let handshake =
                    tokio::time::timeout(auth::HANDSHAKE_TIMEOUT, tls.connect(name, stream));
                match handshake.await {
                    Ok(Ok(s)) => Stream::Tls(Box::new(s.into())),
                    Ok(Err(e)) => return Err(refused(crate::tls::explain(&e))),
                    Err(_) => return Err(refused("no TLS handshake within 5s".into())),
                }
            }
        };
        // Under TLS 1.3 the node judges a client's certificate after the
        // client's side of the handshake is done: a refusal is the first
        // thing read, and says why (`FrameError`'s message explains it).
        Ok(Conn { reader: FrameReader::new(stream), pings_due: 0, pleas: VecDeque::new() })
    }

    fn stream(&mut self) -> &mut Stream {
        self.reader.get_mut()
    }

    /// The next frame; `None` at a clean end of stream.
    async fn read<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        self.reader.next().await
    }

    async fn send<Req: Serialize>(&mut self, req: &Req) -> Result<(), FrameError> {
        write_frame(self.stream(), req).await.map_err(FrameError::Io)
    }

    /// Sends every request of `reqs` in one write (the node answers them
    /// in order).
    async fn send_all<Req: Serialize>(&mut self, reqs: &[Req]) -> Result<(), FrameError> {
        let mut bytes = Vec::new();
        for req in reqs {
            coterie_core::wire::write_frame(req, &mut bytes);
        }
        crate::codec::write_out(self.stream(), &bytes).await.map_err(FrameError::Io)
    }

    async fn call<Req: Serialize>(&mut self, req: &Req) -> Result<ClientResponse, ClientError> {
        self.send(req).await?;
        self.answer().await
    }

    /// The next answer that is not a keepalive's (a plea to let go that
    /// comes first is kept aside).
    async fn answer(&mut self) -> Result<ClientResponse, ClientError> {
        loop {
            match self.read().await?.ok_or(ClientError::Closed)? {
                // The answer to a keepalive that went before.
                ClientResponse::Pong { .. } if self.pings_due > 0 => self.pings_due -= 1,
                ClientResponse::RevokeAsked(plea) => self.pleas.push_back(plea),
                answer => return Ok(answer),
            }
        }
    }

    async fn witness_call(&mut self, req: &WitnessRequest) -> Result<WitnessResponse, ClientError> {
        self.send(req).await?;
        self.read().await?.ok_or(ClientError::Closed)
    }
}

/// How a client session was lost; see [`Client::lost`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loss {
    /// The node closed the session: its process died or stopped.
    Closed,
    /// The node left a keepalive unanswered this long: it hangs, or the
    /// network between is cut.
    Silent(Duration),
    /// The connection broke or carried garbage.
    Broken(String),
    /// The node took back what the session held, saying why (it lost its
    /// quorum's lease: a majority of the cluster may grant the lock to
    /// someone else).
    TakenBack(String),
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loss::Closed => f.write_str("the node closed the session (it died or stopped)"),
            Loss::Silent(d) => write!(
                f,
                "the node did not answer for {} (it hangs, or is cut off)",
                humantime::format_duration(Duration::from_millis(d.as_millis() as u64))
            ),
            Loss::Broken(why) => write!(f, "the connection broke: {why}"),
            Loss::TakenBack(why) => write!(f, "the node took the lock back: {why}"),
        }
    }
}

/// What a holding session hears ([`Client::hold_event`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HoldEvent {
    /// Someone asks the holders of a lock this session holds to let go.
    RevokeAsked(RevokeAsked),
    /// The session is lost, and what it held with it.
    Lost(Loss),
}

/// How often a session pings, and how long a ping may go unanswered,
/// until the node has said (the first PONG carries its own timing).
pub(crate) const FIRST_KEEPALIVE: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_secs(1));

/// The keepalive a PONG announces: how often to ping, and how long a ping
/// may go unanswered.
pub(crate) fn keepalive(heartbeat_ms: u64, failure_timeout_ms: u64) -> (Duration, Duration) {
    (Duration::from_millis(heartbeat_ms.max(1)), Duration::from_millis(failure_timeout_ms.max(1)))
}

/// The outcome of an acquire of the default lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// Granted with this fence.
    Granted(u64),
    /// Not granted within the timeout.
    TimedOut,
    /// A try that did not succeed.
    Busy,
}

/// What a session asks for ([`Client::request`]): one lock or several,
/// by name, taken all or none in name order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRequest {
    req: Acquire,
}

impl LockRequest {
    /// The locks `names` (none: the `default` lock), one permit each as
    /// the cluster counts them, waiting for ever.
    pub fn new<S: Into<String>>(names: impl IntoIterator<Item = S>) -> LockRequest {
        let names = names.into_iter().map(Into::into).collect();
        LockRequest { req: Acquire { names, ..Acquire::default_lock() } }
    }

    /// One of `permits` permits of each lock (a counting semaphore).
    pub fn permits(mut self, permits: u32) -> LockRequest {
        self.req.permits = permits;
        self
    }

    /// Read (share the locks with other readers, on locks of one permit)
    /// or write (hold them alone, the default).
    pub fn mode(mut self, mode: Mode) -> LockRequest {
        self.req.mode = mode;
        self
    }

    /// Give up after `timeout` (`None`: wait for ever).
    pub fn timeout(mut self, timeout: Option<Duration>) -> LockRequest {
        self.req.timeout_ms = timeout.map(|d| d.as_millis() as u64);
        self
    }

    /// Give up unless granted promptly (within one failure timeout), and
    /// say [`Outcome::Busy`] then.
    pub fn try_lock(mut self, try_lock: bool) -> LockRequest {
        self.req.try_lock = try_lock;
        self
    }

    /// Hold the locks with `value`: a campaign, whose holder leads the
    /// election of each lock's name.
    pub fn value(mut self, value: Option<String>) -> LockRequest {
        self.req.value = value;
        self
    }

    /// What the client calls itself in listings (default: `pid@host`).
    pub fn client(mut self, label: impl Into<String>) -> LockRequest {
        self.req.client = label.into();
        self
    }

    /// The acquire to send, with this process's label unless it has one.
    pub(crate) fn labelled(&self) -> Acquire {
        let mut acquire = self.req.clone();
        if acquire.client.is_empty() {
            acquire.client = client_label();
        }
        acquire
    }
}

/// Locks held: each one's fencing token, in name order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The node that granted them.
    pub node: u32,
    /// Each lock's name and fence.
    pub fences: Vec<(String, u64)>,
}

impl Grant {
    /// The first lock's fence (the only one's, for a single lock).
    pub fn fence(&self) -> u64 {
        self.fences.first().map_or(0, |(_, f)| *f)
    }
}

/// The outcome of a [`LockRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every lock was granted.
    Granted(Grant),
    /// Not granted within the timeout; nothing is held.
    TimedOut,
    /// A try that did not succeed; nothing is held.
    Busy,
}

impl Outcome {
    /// The outcome an acquire's answer says.
    pub(crate) fn of(answer: ClientResponse) -> Result<Outcome, ClientError> {
        match answer {
            ClientResponse::Granted { fences, node } => {
                Ok(Outcome::Granted(Grant { node, fences }))
            }
            ClientResponse::TimedOut => Ok(Outcome::TimedOut),
            ClientResponse::Busy => Ok(Outcome::Busy),
            ClientResponse::Error(why) => Err(ClientError::Refused(why)),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }
}

/// What this process calls itself in listings: `pid@host`.
pub fn client_label() -> String {
    static LABEL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LABEL
        .get_or_init(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_default();
            format!("{}@{}", std::process::id(), if host.is_empty() { "localhost" } else { &host })
        })
        .clone()
}

/// A client session with one node. The session is the connection: dropping
/// it releases whatever it held.
pub struct Client {
    conn: Conn,
    /// The node's heartbeat and failure timeout, once a PONG has said.
    keepalive: (Duration, Duration),
    /// When the oldest ping still unanswered went out.
    ping_sent: Option<Instant>,
}

impl Client {
    /// Connects to a node's client port, on a cluster that runs open.
    pub async fn connect(addr: &str) -> Result<Client, ClientError> {
        Client::connect_with(addr, None).await
    }

    /// Connects to a node's client port, proving the client knows the
    /// cluster's secret first when `credentials` are given (and checking
    /// that the node does too).
    pub async fn connect_with(
        addr: &str,
        credentials: Option<&Credentials>,
    ) -> Result<Client, ClientError> {
        let tls = credentials.and_then(|c| c.tls.as_ref());
        let mut conn = Conn::open(addr, tls).await?;
        if let Some(Credentials { secret: Some(secret), cluster, tls: None }) = credentials {
            auth::dial(conn.stream(), secret, cluster, Role::Client, 0)
                .await
                .map_err(|source| ClientError::Auth { addr: addr.to_string(), source })?;
        }
        Ok(Client { conn, keepalive: FIRST_KEEPALIVE, ping_sent: None })
    }

    /// The session's connection, handed over to a blocking client once
    /// opened (and authenticated): nothing has been read from it past the
    /// handshake.
    pub(crate) fn into_stream(self) -> Stream {
        self.conn.reader.into_inner()
    }

    /// Keeps the session alive, and resolves when it is lost: the node
    /// closed it (its process died), left a keepalive unanswered for its
    /// failure timeout (it hangs, or is cut off), or the connection broke.
    /// Pings go out once per the node's heartbeat, the first after one
    /// heartbeat. They are a lease, as etcd's and Consul's sessions are:
    /// while a session waits for the lock or holds it, the node expects to
    /// hear from it within a failure timeout, and otherwise takes it for
    /// lost (its client hangs) and withdraws its request or releases what
    /// it held. So call this for as long as you hold, and stop only to
    /// release or ask something else; dropping the future loses nothing.
    /// ([`acquire`](Self::acquire) pings by itself while it waits.)
    ///
    /// Pleas to let go ([`hold_event`](Self::hold_event)) that come
    /// meanwhile are passed over.
    pub async fn lost(&mut self) -> Loss {
        loop {
            if let HoldEvent::Lost(loss) = self.hold_event().await {
                return loss;
            }
        }
    }

    /// What a holding session hears next: a plea to let go of a lock it
    /// holds (someone ran `coterie revoke`, or called `POST
    /// /v1/locks/{name}/revoke`), or its loss ([`lost`](Self::lost)).
    /// Keeps the session alive meanwhile, as `lost` does. Revocation is
    /// cooperative: the node takes nothing, the holder decides whether
    /// and when to let go.
    pub async fn hold_event(&mut self) -> HoldEvent {
        if let Some(plea) = self.conn.pleas.pop_front() {
            return HoldEvent::RevokeAsked(plea);
        }
        match self.next_answer(true).await {
            Ok(ClientResponse::RevokeAsked(plea)) => HoldEvent::RevokeAsked(plea),
            Ok(ClientResponse::Error(why)) => HoldEvent::Lost(Loss::TakenBack(why)),
            Ok(other) => HoldEvent::Lost(Loss::Broken(format!("unexpected {other:?}"))),
            Err(loss) => HoldEvent::Lost(loss),
        }
    }

    /// The node's next answer that is not a keepalive's, pinging as the
    /// lease requires meanwhile; `Err` once the session is lost (see
    /// [`lost`](Self::lost)). A plea to let go is an answer with `pleas`,
    /// and is kept aside without.
    async fn next_answer(&mut self, pleas: bool) -> Result<ClientResponse, Loss> {
        let mut next_ping = Instant::now() + self.keepalive.0;
        loop {
            let failure_timeout = self.keepalive.1;
            if self.conn.pings_due == 0 && Instant::now() >= next_ping {
                if let Err(e) = self.conn.send(&ClientRequest::Ping).await {
                    return Err(Loss::Broken(e.to_string()));
                }
                self.conn.pings_due += 1;
                self.ping_sent = Some(Instant::now());
            }
            let deadline = match self.ping_sent.filter(|_| self.conn.pings_due > 0) {
                Some(sent) => sent + failure_timeout,
                None => next_ping,
            };
            tokio::select! {
                // An answer that came is read before a deadline that passed
                // meanwhile is believed (this process may have been stopped).
                biased;
                frame = self.conn.read::<ClientResponse>() => match frame {
                    Ok(Some(ClientResponse::Pong { heartbeat_ms, failure_timeout_ms })) => {
                        self.conn.pings_due = self.conn.pings_due.saturating_sub(1);
                        self.keepalive = keepalive(heartbeat_ms, failure_timeout_ms);
                        next_ping = Instant::now() + self.keepalive.0;
                    }
                    Ok(Some(ClientResponse::RevokeAsked(plea))) if !pleas => {
                        self.conn.pleas.push_back(plea);
                    }
                    Ok(Some(other)) => return Ok(other),
                    Ok(None) => return Err(Loss::Closed),
                    Err(e) => return Err(Loss::Broken(e.to_string())),
                },
                _ = tokio::time::sleep_until(deadline) => {
                    if let Some(sent) = self.ping_sent.filter(|_| self.conn.pings_due > 0) {
                        return Err(Loss::Silent(sent.elapsed()));
                    }
                }
            }
        }
    }

    /// Asks for the critical section and returns a guard for it.
    /// `Err(outcome)` if it was not granted (timed out, or busy with
    /// `try_lock`).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use coterie_client::Client;
    /// let client = Client::connect("127.0.0.1:7201").await?;
    /// let Ok(mut lock) = client.lock(None, false).await? else { return Ok(()) };
    /// let fence = lock.fence(); // hand it to the resource with every write
    /// let work = async { /* the work, passing `fence` along */ };
    /// let finished = tokio::select! {
    ///     _ = work => true,
    ///     loss = lock.lost() => {
    ///         eprintln!("lock lost: {loss}; the work was stopped");
    ///         false
    ///     }
    /// };
    /// if finished {
    ///     lock.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lock(
        self,
        timeout: Option<Duration>,
        try_lock: bool,
    ) -> Result<Result<Lock, Acquired>, ClientError> {
        let req = LockRequest::new(Vec::<String>::new()).timeout(timeout).try_lock(try_lock);
        Ok(match self.lock_with(&req).await? {
            Ok(lock) => Ok(lock),
            Err(Outcome::TimedOut) => Err(Acquired::TimedOut),
            Err(_) => Err(Acquired::Busy),
        })
    }

    /// Asks for the locks `req` names and returns a guard for them;
    /// `Err(outcome)` if they were not granted.
    pub async fn lock_with(
        mut self,
        req: &LockRequest,
    ) -> Result<Result<Lock, Outcome>, ClientError> {
        Ok(match self.request(req).await? {
            Outcome::Granted(grant) => Ok(Lock { client: self, grant }),
            other => Err(other),
        })
    }

    /// Asks for the critical section, keeping the session alive while it
    /// waits: a client that stops (a stopped process, a cut network) loses
    /// its place within the node's failure timeout, and is never handed a
    /// grant it cannot take.
    pub async fn acquire(
        &mut self,
        timeout: Option<Duration>,
        try_lock: bool,
    ) -> Result<Acquired, ClientError> {
        let req = LockRequest::new(Vec::<String>::new()).timeout(timeout).try_lock(try_lock);
        Ok(match self.request(&req).await? {
            Outcome::Granted(grant) => Acquired::Granted(grant.fence()),
            Outcome::TimedOut => Acquired::TimedOut,
            Outcome::Busy => Acquired::Busy,
        })
    }

    /// Asks for the locks `req` names, all or none, keeping the session
    /// alive while it waits (see [`acquire`](Self::acquire)).
    pub async fn request(&mut self, req: &LockRequest) -> Result<Outcome, ClientError> {
        let acquire = ClientRequest::Acquire(req.labelled());
        self.conn.send(&acquire).await?;
        self.outcome().await
    }

    /// Lets go of what the session holds and asks for the locks `req`
    /// names, in one write: what a client that goes straight from one
    /// critical section to its next request saves a round trip with.
    pub async fn release_and_request(&mut self, req: &LockRequest) -> Result<Outcome, ClientError> {
        let acquire = ClientRequest::Acquire(req.labelled());
        self.conn.send_all(&[ClientRequest::Release, acquire]).await?;
        match self.conn.answer().await? {
            ClientResponse::Released => self.outcome().await,
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// The answer to the acquire just sent, keeping the session alive
    /// while it waits.
    async fn outcome(&mut self) -> Result<Outcome, ClientError> {
        // A waiting session is a lease too: the node hands a grant only to
        // a client that is there to take it.
        Outcome::of(self.next_answer(false).await.map_err(ClientError::Lost)?)
    }

    /// Every live lock whose name starts with `prefix`, cluster wide, and
    /// the nodes that did not answer (their part is missing).
    pub async fn locks(&mut self, prefix: &str) -> Result<(Vec<LockInfo>, Vec<u32>), ClientError> {
        match self.conn.call(&ClientRequest::Locks { prefix: prefix.to_string() }).await? {
            ClientResponse::Locks { locks, unreachable } => Ok((locks, unreachable)),
            ClientResponse::Error(why) => Err(ClientError::Refused(why)),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Asks every holder of lock `name`, cluster wide, to let go, saying
    /// `reason` (`coterie revoke`): how many holders were asked, and the
    /// nodes that did not answer in time. Each holder decides; nothing is
    /// taken from it. A lock nobody holds is refused
    /// ([`ClientError::Refused`]).
    pub async fn revoke(
        &mut self,
        name: &str,
        reason: Option<String>,
    ) -> Result<(u32, Vec<u32>), ClientError> {
        let req = ClientRequest::Revoke { name: name.to_string(), reason };
        match self.conn.call(&req).await? {
            ClientResponse::Revoked(r) => Ok((r.holders, r.unreachable)),
            ClientResponse::Error(why) => Err(ClientError::Refused(why)),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// The leader of election `name`, cluster wide.
    pub async fn leader(&mut self, name: &str) -> Result<LeaderReport, ClientError> {
        match self.conn.call(&ClientRequest::Leader { name: name.to_string() }).await? {
            ClientResponse::Leader(report) => Ok(report),
            ClientResponse::Error(why) => Err(ClientError::Refused(why)),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Turns this session into a stream of election `name`'s leaders:
    /// the leader now, then every change.
    pub async fn observe(mut self, name: &str) -> Result<(LeaderReport, Observer), ClientError> {
        self.conn.send(&ClientRequest::Observe { name: name.to_string() }).await?;
        let mut observer = Observer { client: self };
        let first = observer.next().await?.ok_or(ClientError::Closed)?;
        Ok((first, observer))
    }

    /// Leaves the critical section.
    pub async fn release(&mut self) -> Result<(), ClientError> {
        match self.conn.call(&ClientRequest::Release).await? {
            ClientResponse::Released => Ok(()),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Injects a fault into the node's agent (or clears or shows them);
    /// returns the faults now in force.
    pub async fn fault(&mut self, command: FaultCommand) -> Result<FaultState, ClientError> {
        match self.conn.call(&ClientRequest::Fault(command)).await? {
            ClientResponse::Faults(state) => Ok(state),
            ClientResponse::Error(e) => Err(ClientError::Refused(e)),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Turns this session into a stream of the node's events. Returns
    /// once the node has subscribed it, with the first event: a
    /// [`NodeEvent::Snapshot`] of where the node stands.
    pub async fn watch(self) -> Result<(WatchEvent, Watch), ClientError> {
        self.watch_with(&ClientRequest::Watch).await
    }

    /// [`watch`](Self::watch), with every message the node sends and takes
    /// in too ([`NodeEvent::Sent`](crate::protocol::NodeEvent::Sent),
    /// [`NodeEvent::Delivered`](crate::protocol::NodeEvent::Delivered)),
    /// heartbeats if asked: what a diagram of the run is drawn from.
    pub async fn watch_messages(
        self,
        heartbeats: bool,
    ) -> Result<(WatchEvent, Watch), ClientError> {
        self.watch_with(&ClientRequest::WatchMessages { heartbeats }).await
    }

    async fn watch_with(
        mut self,
        request: &ClientRequest,
    ) -> Result<(WatchEvent, Watch), ClientError> {
        self.conn.send(request).await?;
        let mut watch = Watch { conn: self.conn };
        for _ in 0..watch.conn.pings_due {
            watch.conn.read::<ClientResponse>().await?; // their PONGs
        }
        let first = watch.next().await?.ok_or(ClientError::Closed)?;
        Ok((first, watch))
    }

    /// The node's status.
    pub async fn status(&mut self) -> Result<Status, ClientError> {
        match self.conn.call(&ClientRequest::Status).await? {
            ClientResponse::Status(s) => Ok(*s),
            ClientResponse::Error(why) => Err(ClientError::Refused(why)),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }
}

/// An election's leaders as they change; see [`Client::observe`]. It
/// pings its node as a waiting session does, so that a node that hangs or
/// is cut off is told from an election that does not change.
pub struct Observer {
    client: Client,
}

impl Observer {
    /// The next change; `None` once the node has closed the stream (it
    /// stopped or died), [`ClientError::Lost`] if it left a ping
    /// unanswered for its failure timeout or the connection broke.
    pub async fn next(&mut self) -> Result<Option<LeaderReport>, ClientError> {
        match self.client.next_answer(false).await {
            Ok(ClientResponse::Leader(report)) => Ok(Some(report)),
            Ok(ClientResponse::Error(why)) => Err(ClientError::Refused(why)),
            Ok(other) => Err(ClientError::Unexpected(format!("{other:?}"))),
            Err(Loss::Closed) => Ok(None),
            Err(loss) => Err(ClientError::Lost(loss)),
        }
    }
}

/// A node's event stream; see [`Client::watch`].
pub struct Watch {
    conn: Conn,
}

impl Watch {
    /// The next event; `None` once the node has closed the stream (it
    /// stopped or died).
    pub async fn next(&mut self) -> Result<Option<WatchEvent>, ClientError> {
        match self.conn.read().await? {
            None => Ok(None),
            Some(ClientResponse::Event(e)) => Ok(Some(e)),
            Some(other) => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }
}

/// Locks, held; see [`Client::lock`]. Dropping it closes the session,
/// and the node releases on its behalf (after the lock delay, if one is
/// configured: prefer [`release`](Lock::release)).
pub struct Lock {
    client: Client,
    grant: Grant,
}

impl Lock {
    /// The grant's fencing token (the first lock's, of several): pass it
    /// to the resource with every write, so it can refuse a holder whose
    /// grant went stale.
    pub fn fence(&self) -> u64 {
        self.grant.fence()
    }

    /// Every lock held, with its fence.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// Resolves when the lock is lost with its session (see
    /// [`Client::lost`]): from then on another client may hold it.
    pub async fn lost(&mut self) -> Loss {
        self.client.lost().await
    }

    /// A plea to let go, or the loss, whichever comes first (see
    /// [`Client::hold_event`]).
    pub async fn hold_event(&mut self) -> HoldEvent {
        self.client.hold_event().await
    }

    /// Lets go; returns the session for more requests.
    pub async fn release(mut self) -> Result<Client, ClientError> {
        self.client.release().await?;
        Ok(self.client)
    }
}

/// What the witness made of a holder that left lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LostVerdict {
    /// Overlaps with newer holders that the loss explains: lease overlaps,
    /// no longer counted as violations.
    pub lease_overlaps: u32,
    /// The holder had been refused as stale: a late entry, no longer
    /// counted as a stale fence.
    pub late_entry: bool,
}

/// The witness's verdict on an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Let in; `holders` are inside now, this one included, and
    /// `violation` says whether that is more than the capacity.
    Accepted {
        /// Holders inside now.
        holders: u32,
        /// More holders than allowed.
        violation: bool,
    },
    /// Refused: the fence is not newer than `last`, already accepted.
    Stale {
        /// The newest fence accepted.
        last: u64,
    },
}

/// A connection to the witness.
pub struct WitnessClient {
    conn: Conn,
}

impl WitnessClient {
    /// Connects to the witness.
    pub async fn connect(addr: &str) -> Result<WitnessClient, ClientError> {
        Ok(WitnessClient { conn: Conn::open(addr, None).await? })
    }

    /// Enters lock `name`'s resource with `fence`, granted by `node`.
    pub async fn enter(&mut self, name: &str, fence: u64, node: u32) -> Result<Entry, ClientError> {
        let request = WitnessRequest::Enter { name: name.to_string(), fence, node };
        match self.conn.witness_call(&request).await? {
            WitnessResponse::Accepted { holders, violation } => {
                Ok(Entry::Accepted { holders, violation })
            }
            WitnessResponse::Stale { last } => Ok(Entry::Stale { last }),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Leaves lock `name`'s resource.
    pub async fn leave(&mut self, name: &str, fence: u64) -> Result<(), ClientError> {
        match self
            .conn
            .witness_call(&WitnessRequest::Leave { name: name.to_string(), fence })
            .await?
        {
            WitnessResponse::Left => Ok(()),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Leaves lock `name`'s resource because the session that held it is
    /// lost; returns what that explains.
    pub async fn lost(&mut self, name: &str, fence: u64) -> Result<LostVerdict, ClientError> {
        match self
            .conn
            .witness_call(&WitnessRequest::Lost { name: name.to_string(), fence })
            .await?
        {
            WitnessResponse::LeftLost { explained, late } => {
                Ok(LostVerdict { lease_overlaps: explained, late_entry: late })
            }
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Reads the register `name`: its plain copy (`fence` ignored), or its
    /// fenced copy with `fence`. `Ok(Err(highest))` when the fenced copy
    /// refused a fence below `highest`.
    pub async fn read(
        &mut self,
        name: &str,
        fenced: bool,
        fence: Option<u64>,
    ) -> Result<Result<i64, u64>, ClientError> {
        let request = WitnessRequest::Read { name: name.to_string(), fenced, fence };
        match self.conn.witness_call(&request).await? {
            WitnessResponse::Value(v) => Ok(Ok(v)),
            WitnessResponse::Fenced { highest } => Ok(Err(highest)),
            WitnessResponse::Refused(why) => Err(ClientError::Refused(why)),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Writes `value` to the register `name`: its plain copy, or its
    /// fenced copy with `fence`. `Ok(Err(highest))` when the fenced copy
    /// refused a fence below `highest`.
    pub async fn write(
        &mut self,
        name: &str,
        fenced: bool,
        fence: Option<u64>,
        value: i64,
    ) -> Result<Result<(), u64>, ClientError> {
        let request = WitnessRequest::Write { name: name.to_string(), fenced, fence, value };
        match self.conn.witness_call(&request).await? {
            WitnessResponse::Written => Ok(Ok(())),
            WitnessResponse::Fenced { highest } => Ok(Err(highest)),
            WitnessResponse::Refused(why) => Err(ClientError::Refused(why)),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// The witness's counters.
    pub async fn report(&mut self) -> Result<WitnessReport, ClientError> {
        match self.conn.witness_call(&WitnessRequest::Report).await? {
            WitnessResponse::Report(r) => Ok(r),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }
}
