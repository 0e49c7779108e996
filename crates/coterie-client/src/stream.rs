//! A connection as both ends use it: plain TCP, or TLS over TCP.
//!
//! Frames are read and written the same on either ([`codec`](crate::codec)
//! takes any tokio stream). Split into a reader and a writer, a plain
//! connection keeps tokio's own halves, which share nothing; a TLS one
//! shares its session between the halves behind tokio's lock.
//!
//! **A close without `close_notify`.** rustls reports a TLS peer that
//! closes its connection without the closing alert (a process that dies,
//! or simply drops the connection) as an error, against an attacker who
//! would cut a stream short where a message ends. coterie's frames carry
//! their own length, so a frame cut short is caught anyway ("closed in the
//! middle of a frame"); such a close is read here as the end of the
//! stream, as it is on plain TCP, and a session lost so is `Closed`, not
//! `Broken`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// A TLS session over TCP, client's or server's.
pub type TlsStream = tokio_rustls::TlsStream<TcpStream>;

/// A connection; see the module documentation.
pub enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<TlsStream>),
}

impl Stream {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref().0,
        }
    }

    /// The certificate the other end showed, over TLS: the first of its
    /// chain.
    pub fn peer_certificate(&self) -> Option<&rustls::pki_types::CertificateDer<'static>> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(s) => s.get_ref().1.peer_certificates()?.first(),
        }
    }

    /// A reader and a writer that can be used at once, from two tasks.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Plain(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Plain(r), WriteHalf::Plain(w))
            }
            Stream::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (ReadHalf::Tls(r), WriteHalf::Tls(w))
            }
        }
    }
}

impl From<TcpStream> for Stream {
    fn from(s: TcpStream) -> Stream {
        Stream::Plain(s)
    }
}

/// Forwards each poll to the variant's stream (every one is `Unpin`).
macro_rules! forward {
    ($self:ident, $s:ident => $call:expr) => {
        match $self.get_mut() {
            Self::Plain($s) => $call,
            Self::Tls($s) => $call,
        }
    };
}

/// A read's outcome, with a TLS close without `close_notify` taken for
/// the end of the stream (see the module documentation).
fn ended(read: Poll<io::Result<()>>) -> Poll<io::Result<()>> {
    match read {
        Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(())),
        other => other,
    }
}

/// `AsyncWrite` for an enum of writers, each poll forwarded to the
/// variant's.
macro_rules! write_through {
    ($type:ty) => {
        impl AsyncWrite for $type {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                b: &[u8],
            ) -> Poll<io::Result<usize>> {
                forward!(self, s => Pin::new(s).poll_write(cx, b))
            }
            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                forward!(self, s => Pin::new(s).poll_flush(cx))
            }
            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                forward!(self, s => Pin::new(s).poll_shutdown(cx))
            }
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => ended(Pin::new(s).poll_read(cx, buf)),
        }
    }
}

write_through!(Stream);

/// The reading half of a [`Stream`].
pub enum ReadHalf {
    /// Of plain TCP.
    Plain(OwnedReadHalf),
    /// Of TLS.
    Tls(tokio::io::ReadHalf<TlsStream>),
}

/// The writing half of a [`Stream`].
pub enum WriteHalf {
    /// Of plain TCP.
    Plain(OwnedWriteHalf),
    /// Of TLS.
    Tls(tokio::io::WriteHalf<TlsStream>),
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ReadHalf::Tls(s) => ended(Pin::new(s).poll_read(cx, buf)),
        }
    }
}

write_through!(WriteHalf);
