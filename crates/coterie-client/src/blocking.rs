//! A blocking client: a lock session on a standard-library `TcpStream`,
//! for programs that run no async runtime, and for a client that takes one
//! lock again and again as fast as its node answers.
//!
//! It speaks the binary protocol of [`crate::Client`], one call at a time,
//! and each message costs it two system calls: a write, and a read that
//! blocks until the answer is there. The async client's runtime adds a
//! readiness wait (`epoll_wait`) to each, which on loopback is a third of
//! a round trip's work. So on a path that is one round trip to the
//! client's own node (the coordinator's own clients, and every locality
//! mode once the lock lives at the node) this client runs at the speed of
//! a blocking C client; the guide's measurements chapter has the numbers.
//!
//! **The lease.** A session that waits for a lock or holds one must be
//! heard from within the node's failure timeout, or the node takes its
//! client for gone and lets go for it (see [`crate::Client::lost`]). While
//! a call waits for its answer, the call itself pings, once per heartbeat.
//! Between calls, while the program works under the lock, a keeper thread
//! does: once per heartbeat in which the session sent nothing, it takes
//! the connection, pings, and reads the PONG. When the node leaves a ping
//! unanswered for its failure timeout, or the connection closes or
//! breaks, the session is lost: [`Client::lost`] says how, and every later
//! call fails with [`ClientError::Lost`]. Check `lost` where the work can
//! stop, and hand the fence to the resource with every write: a lease,
//! like etcd's and Consul's, cannot promise that the lock is still held
//! the moment after it was checked.
//!
//! **TLS.** Given [`Credentials`] with TLS, the session is made as the
//! async client makes it (the handshake, and the node's first answer),
//! and then carried on over the same TLS session with rustls's blocking
//! stream.
//!
//! Dropping the client closes the session, which releases what it held.
//! Every call blocks its thread: in async code, use [`crate::Client`].
//!
//! ```no_run
//! # fn run() -> Result<(), coterie_client::ClientError> {
//! use coterie_client::{blocking, LockRequest, Outcome};
//! let mut client = blocking::Client::connect("127.0.0.1:7101")?;
//! let jobs = LockRequest::new(["jobs/nightly"]);
//! if let Outcome::Granted(grant) = client.request(&jobs)? {
//!     println!("held with fence {}", grant.fence());
//!     // ... the work, passing the fence along; `client.lost()` says
//!     // whether the lease still holds ...
//!     client.release()?;
//! }
//! # Ok(()) }
//! ```

use crate::client::{keepalive, Client as AsyncClient, FIRST_KEEPALIVE};
use crate::codec::take_frame;
use crate::protocol::{ClientRequest, ClientResponse, RevokeAsked};
use crate::{ClientError, Credentials, LockRequest, Loss, Outcome};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A blocking session with one node: one call at a time, its lease kept
/// by a thread of its own between calls.
pub struct Client {
    shared: Arc<Shared>,
    keeper: Option<JoinHandle<()>>,
}

/// What the caller and the keeper thread share.
struct Shared {
    session: Mutex<Session>,
    /// Set when the client is dropped; the keeper then stops.
    stopping: Mutex<bool>,
    wake: Condvar,
}

/// A blocking connection: plain TCP, or a TLS session over it.
enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => s.get_ref(),
        }
    }

    /// The async client's connection, handed over: its TLS session goes
    /// on where the async client left it (nothing buffered is lost).
    fn of(stream: crate::stream::Stream) -> std::io::Result<Conn> {
        Ok(match stream {
            crate::stream::Stream::Plain(s) => Conn::Plain(s.into_std()?),
            crate::stream::Stream::Tls(s) => match *s {
                tokio_rustls::TlsStream::Client(s) => {
                    let (tcp, session) = s.into_inner();
                    Conn::Tls(Box::new(rustls::StreamOwned::new(session, tcp.into_std()?)))
                }
                tokio_rustls::TlsStream::Server(_) => {
                    return Err(std::io::Error::other("a server's TLS session for a client"))
                }
            },
        })
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            // A TLS close without `close_notify` is the end of the
            // stream, as for the async client (`crate::stream`).
            Conn::Tls(s) => match s.read(buf) {
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => Ok(0),
                read => read,
            },
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// The connection and what the lease needs to know about it.
struct Session {
    stream: Conn,
    /// Bytes read that are not a whole frame yet.
    pending: Vec<u8>,
    /// The frames of the write being made.
    out: Vec<u8>,
    /// The node's heartbeat and failure timeout, once a PONG has said;
    /// the socket's read timeout is the heartbeat.
    keepalive: (Duration, Duration),
    /// Pings written whose PONG has not been read yet.
    pings_due: u32,
    /// When the oldest of them went out.
    ping_sent: Instant,
    /// When the session last wrote: the node heard from it then.
    last_sent: Instant,
    /// How the session was lost, once it was.
    lost: Option<Loss>,
    /// Pleas to let go that came, not yet taken ([`Client::revoke_asked`]).
    pleas: Vec<RevokeAsked>,
}

/// Locks `mutex` whether or not a panic poisoned it: the session's state
/// is whole between statements.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Client {
    /// Connects to a node's client port, on a cluster that runs open.
    pub fn connect(addr: &str) -> Result<Client, ClientError> {
        Client::connect_with(addr, None)
    }

    /// Connects to a node's client port, proving the client knows the
    /// cluster's secret first when `credentials` are given (and checking
    /// that the node does too), as [`crate::Client::connect_with`] does.
    pub fn connect_with(
        addr: &str,
        credentials: Option<&Credentials>,
    ) -> Result<Client, ClientError> {
        let io = |e: std::io::Error| ClientError::Connect { addr: addr.to_string(), source: e };
        // The handshake is the async client's, on a runtime of its own in
        // a thread of its own: a runtime cannot be started on a thread that
        // already runs one, and a caller's thread may.
        let handshake = || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(io)?;
            runtime.block_on(async {
                let client = AsyncClient::connect_with(addr, credentials).await?;
                Conn::of(client.into_stream()).map_err(io)
            })
        };
        let stream = std::thread::scope(|scope| scope.spawn(handshake).join())
            .map_err(|_| io(std::io::Error::other("the handshake's thread panicked")))??;
        stream.tcp().set_nonblocking(false).map_err(io)?;
        stream.tcp().set_read_timeout(Some(FIRST_KEEPALIVE.0)).map_err(io)?;
        let now = Instant::now();
        let session = Session {
            stream,
            pending: Vec::with_capacity(256),
            out: Vec::with_capacity(128),
            keepalive: FIRST_KEEPALIVE,
            pings_due: 0,
            ping_sent: now,
            last_sent: now,
            lost: None,
            pleas: Vec::new(),
        };
        let shared = Arc::new(Shared {
            session: Mutex::new(session),
            stopping: Mutex::new(false),
            wake: Condvar::new(),
        });
        let keeper = std::thread::Builder::new()
            .name("coterie-lease".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || keep(&shared)
            })
            .map_err(io)?;
        Ok(Client { shared, keeper: Some(keeper) })
    }

    /// Asks for the locks `req` names, all or none, and waits for the
    /// answer (within `req`'s timeout, if it has one).
    pub fn request(&mut self, req: &LockRequest) -> Result<Outcome, ClientError> {
        let mut session = lock(&self.shared.session);
        Outcome::of(session.call(&[ClientRequest::Acquire(req.labelled())])?)
    }

    /// Lets go of what the session holds.
    pub fn release(&mut self) -> Result<(), ClientError> {
        match lock(&self.shared.session).call(&[ClientRequest::Release])? {
            ClientResponse::Released => Ok(()),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Lets go of what the session holds and asks for the locks `req`
    /// names, in one write: a client that goes straight from one critical
    /// section to its next request saves a round trip with it.
    pub fn release_and_request(&mut self, req: &LockRequest) -> Result<Outcome, ClientError> {
        let mut session = lock(&self.shared.session);
        let acquire = ClientRequest::Acquire(req.labelled());
        match session.call(&[ClientRequest::Release, acquire])? {
            ClientResponse::Released => Outcome::of(session.answer()?),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// How the session was lost, if it was: the node closed it, left a
    /// ping unanswered for its failure timeout, or the connection broke.
    /// Whatever the session held is then no longer held.
    pub fn lost(&self) -> Option<Loss> {
        lock(&self.shared.session).lost.clone()
    }

    /// The pleas to let go of a lock this session holds that came since
    /// the last call (someone ran `coterie revoke`), oldest first. Look
    /// now and then while holding: revocation is cooperative, the node
    /// takes nothing, the holder decides whether and when to let go.
    pub fn revoke_asked(&self) -> Vec<RevokeAsked> {
        std::mem::take(&mut lock(&self.shared.session).pleas)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        *lock(&self.shared.stopping) = true;
        self.shared.wake.notify_all();
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
        // Closing the connection ends the session, at once.
        let _ = lock(&self.shared.session).stream.tcp().shutdown(Shutdown::Both);
    }
}

/// The keeper thread: once per heartbeat, pings for a session that has
/// been quiet that long, unless a call is under way (it pings itself).
fn keep(shared: &Shared) {
    let mut heartbeat = FIRST_KEEPALIVE.0;
    loop {
        {
            let stopping = lock(&shared.stopping);
            let (stopping, _) = shared
                .wake
                .wait_timeout_while(stopping, heartbeat, |stopping| !*stopping)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if *stopping {
                return;
            }
        }
        let mut session = match shared.session.try_lock() {
            Ok(session) => session,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => continue,
        };
        session.keep();
        heartbeat = session.keepalive.0;
    }
}

impl Session {
    /// Sends `reqs` in one write and reads the first answer; a loss is
    /// kept, and every later call fails with it.
    fn call(&mut self, reqs: &[ClientRequest]) -> Result<ClientResponse, ClientError> {
        if let Some(loss) = &self.lost {
            return Err(ClientError::Lost(loss.clone()));
        }
        self.send(reqs).map_err(|loss| self.lose(loss))?;
        self.answer()
    }

    /// The next answer that is not a keepalive's.
    fn answer(&mut self) -> Result<ClientResponse, ClientError> {
        match self.next(false) {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err(ClientError::Unexpected("no answer".into())),
            Err(loss) => Err(self.lose(loss)),
        }
    }

    /// Pings, if the session has been quiet for a heartbeat, and reads the
    /// PONG.
    fn keep(&mut self) {
        if self.lost.is_some() || self.last_sent.elapsed() < self.keepalive.0 {
            return;
        }
        let loss = match self.send(&[ClientRequest::Ping]).and_then(|()| self.next(true)) {
            Ok(None) => return,
            Ok(Some(ClientResponse::Error(why))) => Loss::TakenBack(why),
            Ok(Some(other)) => Loss::Broken(format!("unexpected {other:?}")),
            Err(loss) => loss,
        };
        self.lose(loss);
    }

    /// Keeps `loss` as the session's end, and says it as an error.
    fn lose(&mut self, loss: Loss) -> ClientError {
        self.lost.get_or_insert(loss.clone());
        ClientError::Lost(loss)
    }

    /// Writes `reqs` as frames, in one write.
    fn send(&mut self, reqs: &[ClientRequest]) -> Result<(), Loss> {
        self.out.clear();
        for req in reqs {
            coterie_core::wire::write_frame(req, &mut self.out);
            if matches!(req, ClientRequest::Ping) {
                if self.pings_due == 0 {
                    self.ping_sent = Instant::now();
                }
                self.pings_due += 1;
            }
        }
        let written = self.stream.write_all(&self.out).and_then(|()| self.stream.flush());
        written.map_err(|e| Loss::Broken(e.to_string()))?;
        self.last_sent = Instant::now();
        Ok(())
    }

    /// Reads until a frame that is not a PONG comes (`Some`), or, with
    /// `pinged`, until every ping is answered (`None`). Pings once per
    /// heartbeat meanwhile; a ping unanswered for the failure timeout is
    /// a loss.
    fn next(&mut self, pinged: bool) -> Result<Option<ClientResponse>, Loss> {
        loop {
            match take_frame::<ClientResponse>(&mut self.pending) {
                Err(e) => return Err(Loss::Broken(e.to_string())),
                Ok(Some(ClientResponse::Pong { heartbeat_ms, failure_timeout_ms })) => {
                    self.pings_due = self.pings_due.saturating_sub(1);
                    // The node was heard from: a ping still due counts from now.
                    self.ping_sent = Instant::now();
                    self.heed(keepalive(heartbeat_ms, failure_timeout_ms))?;
                    if pinged && self.pings_due == 0 {
                        return Ok(None);
                    }
                    continue;
                }
                Ok(Some(ClientResponse::RevokeAsked(plea))) => self.pleas.push(plea),
                Ok(Some(answer)) => return Ok(Some(answer)),
                Ok(None) => {}
            }
            if self.pings_due == 0 && self.last_sent.elapsed() >= self.keepalive.0 {
                self.send(&[ClientRequest::Ping])?;
            }
            // A read that waited a whole heartbeat found nothing: only
            // then is an overdue ping believed (this process may have
            // been stopped, with the answer waiting in the socket).
            if !self.fill()? && self.pings_due > 0 {
                let waited = self.ping_sent.elapsed();
                if waited >= self.keepalive.1 {
                    return Err(Loss::Silent(waited));
                }
            }
        }
    }

    /// Reads what the socket has, waiting at most a heartbeat: `false` if
    /// nothing came in that time.
    fn fill(&mut self) -> Result<bool, Loss> {
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk) {
            Ok(0) if self.pending.is_empty() => Err(Loss::Closed),
            Ok(0) => Err(Loss::Broken("connection closed in the middle of a frame".into())),
            Ok(n) => {
                self.pending.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(false),
            Err(e) => Err(Loss::Broken(crate::tls::describe(&e))),
        }
    }

    /// Takes the node's timing from a PONG: the heartbeat becomes the
    /// socket's read timeout.
    fn heed(&mut self, timing: (Duration, Duration)) -> Result<(), Loss> {
        if timing.0 != self.keepalive.0 {
            self.stream
                .tcp()
                .set_read_timeout(Some(timing.0))
                .map_err(|e| Loss::Broken(e.to_string()))?;
        }
        self.keepalive = timing;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Grant;
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// A node that answers each request its way (`None`: silence) and
    /// reports every request it read.
    fn fake_node(
        answer: impl Fn(&ClientRequest, usize) -> Option<ClientResponse> + Send + 'static,
    ) -> (String, mpsc::Receiver<ClientRequest>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut pending = Vec::new();
            let mut chunk = [0u8; 1024];
            let mut pings = 0;
            loop {
                while let Some(req) = take_frame::<ClientRequest>(&mut pending).unwrap() {
                    if matches!(req, ClientRequest::Ping) {
                        pings += 1;
                    }
                    if let Some(resp) = answer(&req, pings) {
                        let mut out = Vec::new();
                        coterie_core::wire::write_frame(&resp, &mut out);
                        if stream.write_all(&out).is_err() {
                            return;
                        }
                    }
                    if tx.send(req).is_err() {
                        return;
                    }
                }
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => pending.extend_from_slice(&chunk[..n]),
                }
            }
        });
        (addr, rx)
    }

    fn pong() -> ClientResponse {
        ClientResponse::Pong { heartbeat_ms: 10, failure_timeout_ms: 200 }
    }

    fn granted(fence: u64) -> ClientResponse {
        ClientResponse::Granted { fences: vec![("jobs".into(), fence)], node: 1 }
    }

    /// Waits (a minute at most) for the session to be found lost.
    fn until_lost(client: &Client) -> Loss {
        let start = Instant::now();
        loop {
            if let Some(loss) = client.lost() {
                return loss;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "the session was never found lost");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_held_lock_is_kept_by_pings_while_the_program_works() {
        let (addr, seen) = fake_node(|req, _| match req {
            ClientRequest::Acquire(_) => Some(granted(7)),
            ClientRequest::Release => Some(ClientResponse::Released),
            ClientRequest::Ping => Some(pong()),
            _ => None,
        });
        let mut client = Client::connect(&addr).unwrap();
        let jobs = LockRequest::new(["jobs"]);
        assert_eq!(
            client.request(&jobs).unwrap(),
            Outcome::Granted(Grant { node: 1, fences: vec![("jobs".into(), 7)] })
        );
        // The program works, and calls nothing; the keeper pings.
        let mut pings = 0;
        while pings < 5 {
            match seen.recv_timeout(Duration::from_secs(60)).expect("the keeper stopped pinging") {
                ClientRequest::Ping => pings += 1,
                ClientRequest::Acquire(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(client.lost(), None);
        // A chained release and acquire: both requests, both answers.
        assert_eq!(
            client.release_and_request(&jobs).unwrap(),
            Outcome::Granted(Grant { node: 1, fences: vec![("jobs".into(), 7)] })
        );
        client.release().unwrap();
        drop(client);
        // Dropped: the connection closes and the fake node's thread ends.
        let rest: Vec<ClientRequest> =
            std::iter::from_fn(|| seen.recv_timeout(Duration::from_secs(60)).ok())
                .filter(|r| !matches!(r, ClientRequest::Ping))
                .collect();
        assert!(
            matches!(
                &rest[..],
                [ClientRequest::Release, ClientRequest::Acquire(a), ClientRequest::Release]
                    if a.names == ["jobs"]
            ),
            "{rest:?}"
        );
    }

    #[tokio::test]
    async fn a_client_made_on_a_runtime_s_thread_connects_all_the_same() {
        // As a program that mixes both might; it blocks this thread meanwhile.
        let (addr, _seen) = fake_node(|req, _| match req {
            ClientRequest::Acquire(_) => Some(granted(2)),
            _ => None,
        });
        let mut client = Client::connect(&addr).unwrap();
        assert!(matches!(
            client.request(&LockRequest::new(["jobs"])).unwrap(),
            Outcome::Granted(_)
        ));
    }

    #[test]
    fn a_node_that_stops_answering_pings_loses_the_session() {
        // The node answers the acquire and two pings, then hangs.
        let (addr, _seen) = fake_node(|req, pings| match req {
            ClientRequest::Acquire(_) => Some(granted(3)),
            ClientRequest::Ping if pings <= 2 => Some(pong()),
            _ => None,
        });
        let mut client = Client::connect(&addr).unwrap();
        let jobs = LockRequest::new(["jobs"]);
        assert!(matches!(client.request(&jobs).unwrap(), Outcome::Granted(_)));
        let Loss::Silent(waited) = until_lost(&client) else { panic!("not a silence") };
        assert!(waited >= Duration::from_millis(200), "lost after {waited:?}, before the timeout");
        // Every call after it fails with the loss, and sends nothing.
        assert!(matches!(client.release(), Err(ClientError::Lost(Loss::Silent(_)))));
        assert!(matches!(client.request(&jobs), Err(ClientError::Lost(Loss::Silent(_)))));
    }

    #[test]
    fn a_closed_connection_or_garbage_is_a_loss() {
        // A node that answers the first request with garbage, and then one
        // that closes without a word.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let mut chunk = [0u8; 256];
            let (mut garbling, _) = listener.accept().unwrap();
            let _ = garbling.read(&mut chunk);
            garbling.write_all(&[0, 0, 0, 2, 0xff, 0xff]).unwrap();
            let (mut closing, _) = listener.accept().unwrap();
            let _ = closing.read(&mut chunk);
        });
        let jobs = LockRequest::new(["jobs"]);
        let mut garbled = Client::connect(&addr).unwrap();
        let err = garbled.request(&jobs).unwrap_err();
        assert!(matches!(err, ClientError::Lost(Loss::Broken(_))), "{err}");
        assert!(matches!(garbled.lost(), Some(Loss::Broken(_))));
        let mut closed = Client::connect(&addr).unwrap();
        let err = closed.request(&jobs).unwrap_err();
        assert!(matches!(err, ClientError::Lost(Loss::Closed)), "{err}");
        server.join().unwrap();
    }
}
