//! Reading and writing frames on tokio streams. The format itself (length
//! prefix, bincode, size limit) lives in `coterie_core::wire`.

use coterie_core::wire::{self, WireError, HEADER_LEN};
use serde::{de::DeserializeOwned, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The connection failed, or closed in the middle of a frame.
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes are not a frame of the expected type.
    #[error(transparent)]
    Wire(#[from] WireError),
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

/// Writes one frame.
pub async fn write_frame<T, W>(writer: &mut W, value: &T) -> std::io::Result<()>
where
    T: Serialize,
    W: AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(64);
    wire::write_frame(value, &mut buf);
    writer.write_all(&buf).await
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
}
