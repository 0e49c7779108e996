//! Reading and writing frames on tokio streams. The format itself (length
//! prefix, bincode, size limit) lives in `coterie_core::wire`.

use coterie_core::wire::{self, WireError, HEADER_LEN};
use serde::{de::DeserializeOwned, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The connection failed, or closed in the middle of a frame (a TLS
    /// refusal said with what to do about it).
    #[error("connection error: {}", crate::tls::describe(.0))]
    Io(#[from] std::io::Error),
    /// The bytes are not a frame of the expected type.
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// Whether `e` means the other side went away: the connection was closed
/// (in the middle of a frame), reset or aborted, as by a process that died
/// or dropped the connection, not a fault in what it sent.
pub fn hung_up(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof)
}

/// Reads one frame. `Ok(None)` is a clean end of stream between frames; an
/// end in the middle of a frame is an error. `buf` is reused across calls.
pub async fn read_frame<T, R>(reader: &mut R, buf: &mut Vec<u8>) -> Result<Option<T>, FrameError>
where
    T: DeserializeOwned,
    R: AsyncRead + Unpin,
{
    let mut header = [0u8; HEADER_LEN];
    // Read the first byte separately to tell a clean close from a torn frame.
    if reader.read(&mut header[..1]).await? == 0 {
        return Ok(None);
    }
    reader.read_exact(&mut header[1..]).await?;
    let len = wire::frame_len(header)?;
    buf.resize(len, 0);
    reader.read_exact(buf).await?;
    Ok(Some(wire::decode(buf)?))
}

/// Reads frames from a stream, cancel-safely: bytes read before a read is
/// dropped (a `select!` branch that lost) stay for the next one, so a
/// frame is never torn. For connections read in a `select!` with other
/// work, as a client session is while it waits for a grant.
pub struct FrameReader<R> {
    stream: R,
    pending: Vec<u8>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Reads `stream`.
    pub fn new(stream: R) -> FrameReader<R> {
        FrameReader { stream, pending: Vec::with_capacity(256) }
    }

    /// The stream, to write to it (a read is not under way).
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.stream
    }

    /// The stream back, once nothing is left unread in the reader's buffer
    /// (the one case it is called in: right after a handshake).
    pub(crate) fn into_inner(self) -> R {
        debug_assert!(self.pending.is_empty(), "bytes read past the handshake");
        self.stream
    }

    /// Whether a whole frame has been read already: the peer sent another
    /// request behind the one being answered (pipelined), so an answer
    /// can wait to go out with the next one's, in one write.
    pub fn has_frame(&self) -> bool {
        self.pending.first_chunk::<HEADER_LEN>().is_some_and(|header| {
            wire::frame_len(*header).is_ok_and(|len| self.pending.len() >= HEADER_LEN + len)
        })
    }

    /// The next frame; `Ok(None)` at a clean end of stream between frames,
    /// an error at an end in the middle of one.
    pub async fn next<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        loop {
            if let Some(value) = take_frame(&mut self.pending)? {
                return Ok(Some(value));
            }
            if self.stream.read_buf(&mut self.pending).await? == 0 {
                if self.pending.is_empty() {
                    return Ok(None);
                }
                let torn = std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed in the middle of a frame",
                );
                return Err(FrameError::Io(torn));
            }
        }
    }
}

/// Takes the first frame off the front of `pending`, bytes read from a
/// stream, once it is whole; `Ok(None)` while it is not.
pub(crate) fn take_frame<T: DeserializeOwned>(
    pending: &mut Vec<u8>,
) -> Result<Option<T>, WireError> {
    let Some(header) = pending.first_chunk::<HEADER_LEN>() else { return Ok(None) };
    let len = wire::frame_len(*header)?;
    if pending.len() < HEADER_LEN + len {
        return Ok(None);
    }
    let value = wire::decode(&pending[HEADER_LEN..HEADER_LEN + len]);
    pending.drain(..HEADER_LEN + len);
    value.map(Some)
}

/// Writes one frame.
pub async fn write_frame<T, W>(writer: &mut W, value: &T) -> std::io::Result<()>
where
    T: Serialize,
    W: AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(64);
    wire::write_frame(value, &mut buf);
    write_out(writer, &buf).await
}

/// Writes `bytes` and flushes them out: a TLS stream may keep the last
/// record it wrote until it is flushed (a TCP stream's flush does
/// nothing).
pub async fn write_out<W: AsyncWrite + Unpin>(writer: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    writer.write_all(bytes).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn clean_close_torn_frame_and_oversize_are_told_apart() {
        let mut buf = Vec::new();
        let empty: &[u8] = &[];
        assert!(read_frame::<u32, _>(&mut &*empty, &mut buf).await.unwrap().is_none());

        let torn: &[u8] = &[0, 0, 0, 9, 1];
        assert!(matches!(
            read_frame::<u32, _>(&mut &*torn, &mut buf).await,
            Err(FrameError::Io(_))
        ));

        let huge: &[u8] = &[0x7f, 0xff, 0xff, 0xff];
        assert!(matches!(
            read_frame::<u32, _>(&mut &*huge, &mut buf).await,
            Err(FrameError::Wire(WireError::Oversized(_)))
        ));

        let mut good = Vec::new();
        write_frame(&mut good, &42u32).await.unwrap();
        assert_eq!(read_frame::<u32, _>(&mut &good[..], &mut buf).await.unwrap(), Some(42));
    }

    #[tokio::test]
    async fn a_frame_reader_dropped_mid_frame_loses_nothing() {
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut reader = FrameReader::new(rx);
        let mut frame = Vec::new();
        write_frame(&mut frame, &7u64).await.unwrap();
        tx.write_all(&frame[..3]).await.unwrap();
        // The read gives up half-way, as a select! branch that lost does.
        let half = tokio::time::timeout(std::time::Duration::from_millis(20), reader.next::<u64>());
        assert!(half.await.is_err());
        tx.write_all(&frame[3..]).await.unwrap();
        assert_eq!(reader.next::<u64>().await.unwrap(), Some(7));
        drop(tx);
        assert_eq!(reader.next::<u64>().await.unwrap(), None);
    }
}
