//! Talking to a node's client port, and to the witness.

use crate::codec::{read_frame, write_frame, FrameError};
use crate::protocol::{
    ClientRequest, ClientResponse, FaultCommand, FaultState, WatchEvent, WitnessReport,
    WitnessRequest, WitnessResponse,
};
use coterie_core::Status;
use serde::{de::DeserializeOwned, Serialize};
use std::time::Duration;
use tokio::net::TcpStream;

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
}

/// A framed request/response connection.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(addr: &str) -> Result<Conn, ClientError> {
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
        Ok(Conn { stream, buf: Vec::with_capacity(256) })
    }

    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &mut self,
        req: &Req,
    ) -> Result<Resp, ClientError> {
        write_frame(&mut self.stream, req).await.map_err(FrameError::Io)?;
        read_frame(&mut self.stream, &mut self.buf).await?.ok_or(ClientError::Closed)
    }
}

/// The outcome of an acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// Granted with this fence.
    Granted(u64),
    /// Not granted within the timeout.
    TimedOut,
    /// A try that did not succeed.
    Busy,
}

/// A client session with one node. The session is the connection: dropping
/// it releases whatever it held.
pub struct Client {
    conn: Conn,
}

impl Client {
    /// Connects to a node's client port.
    pub async fn connect(addr: &str) -> Result<Client, ClientError> {
        Ok(Client { conn: Conn::open(addr).await? })
    }

    /// Asks for the critical section.
    pub async fn acquire(
        &mut self,
        timeout: Option<Duration>,
        try_lock: bool,
    ) -> Result<Acquired, ClientError> {
        let timeout_ms = timeout.map(|d| d.as_millis() as u64);
        match self.conn.call(&ClientRequest::Acquire { timeout_ms, try_lock }).await? {
            ClientResponse::Granted { fence, .. } => Ok(Acquired::Granted(fence)),
            ClientResponse::TimedOut => Ok(Acquired::TimedOut),
            ClientResponse::Busy => Ok(Acquired::Busy),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Resolves when the node closes the session: it died or shut down,
    /// and whatever this session held is no longer this client's. Call it
    /// while holding (the node sends nothing unasked); cancelling it loses
    /// nothing.
    pub async fn session_lost(&mut self) {
        use tokio::io::AsyncReadExt;
        let mut probe = [0u8; 1];
        let _ = self.conn.stream.read(&mut probe).await;
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
            ClientResponse::Error(e) => Err(ClientError::Unexpected(e)),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Turns this session into a stream of the node's events. Returns
    /// once the node has subscribed it, with the first event: a
    /// [`NodeEvent::Snapshot`] of where the node stands.
    pub async fn watch(mut self) -> Result<(WatchEvent, Watch), ClientError> {
        let conn = &mut self.conn;
        write_frame(&mut conn.stream, &ClientRequest::Watch).await.map_err(FrameError::Io)?;
        let mut watch = Watch { conn: self.conn };
        let first = watch.next().await?.ok_or(ClientError::Closed)?;
        Ok((first, watch))
    }

    /// The node's status.
    pub async fn status(&mut self) -> Result<Status, ClientError> {
        match self.conn.call(&ClientRequest::Status).await? {
            ClientResponse::Status(s) => Ok(*s),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
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
        match read_frame(&mut self.conn.stream, &mut self.conn.buf).await? {
            None => Ok(None),
            Some(ClientResponse::Event(e)) => Ok(Some(e)),
            Some(other) => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }
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
        Ok(WitnessClient { conn: Conn::open(addr).await? })
    }

    /// Enters the resource with `fence`, granted by `node`.
    pub async fn enter(&mut self, fence: u64, node: u32) -> Result<Entry, ClientError> {
        match self.conn.call(&WitnessRequest::Enter { fence, node }).await? {
            WitnessResponse::Accepted { holders, violation } => {
                Ok(Entry::Accepted { holders, violation })
            }
            WitnessResponse::Stale { last } => Ok(Entry::Stale { last }),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Leaves the resource.
    pub async fn leave(&mut self, fence: u64) -> Result<(), ClientError> {
        match self.conn.call(&WitnessRequest::Leave { fence }).await? {
            WitnessResponse::Left => Ok(()),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// The witness's counters.
    pub async fn report(&mut self) -> Result<WitnessReport, ClientError> {
        match self.conn.call(&WitnessRequest::Report).await? {
            WitnessResponse::Report(r) => Ok(r),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }
}
