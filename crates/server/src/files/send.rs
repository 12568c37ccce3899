//! Sending a byte range of an open file: `sendfile(2)` to a plain TCP socket, so the bytes
//! go from the page cache to the socket without a copy, or positioned reads into a reused
//! buffer for any other writer (TLS).
//!
//! Neither moves the file's own offset, so one cached `File` serves any number of
//! responses. Both fail with `UnexpectedEof` when the file turns out shorter than promised:
//! the response head has gone out with its length, so the caller must close the connection.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use tokio::io::{AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// The most one `sendfile` call is asked to move: nginx's `sendfile_max_chunk` default,
/// for the same reason. A fast client could otherwise keep one call, and so the worker,
/// busy with a single large file while other connections wait.
pub const SENDFILE_MAX_CHUNK: u64 = 2 * 1024 * 1024;

/// The piece size of `copy_file`: large enough that per-call costs vanish, small enough
/// for a per-connection buffer.
pub const SEND_CHUNK: usize = 64 * 1024;

fn truncated() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "file is shorter than expected",
    )
}

/// Sends `len` bytes of `file` from `offset` to `stream` with `sendfile(2)`.
pub async fn send_file(stream: &TcpStream, file: &File, offset: u64, len: u64) -> io::Result<()> {
    let mut position = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset out of range"))?;
    let mut remaining = len;
    while remaining > 0 {
        // Waiting here also spends the task's cooperative budget, so a long transfer yields
        // to the worker's other connections even while the socket never fills.
        stream.writable().await?;
        let chunk = remaining.min(SENDFILE_MAX_CHUNK) as usize;
        let result = stream.try_io(Interest::WRITABLE, || {
            // SAFETY: both descriptors are open for the duration of the call (`stream` and
            // `file` are borrowed), and `position` is a valid, exclusively borrowed off_t.
            let sent = unsafe {
                libc::sendfile(stream.as_raw_fd(), file.as_raw_fd(), &mut position, chunk)
            };
            if sent < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(sent as u64)
            }
        });
        match result {
            Ok(0) => return Err(truncated()),
            Ok(sent) => remaining -= sent,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes `len` bytes of `file` from `offset` to `w`, `SEND_CHUNK` bytes at a time through
/// `buf`, which the caller keeps between responses. Does not flush `w`.
pub async fn copy_file<W: AsyncWrite + Unpin>(
    w: &mut W,
    file: &File,
    offset: u64,
    len: u64,
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    if buf.len() < SEND_CHUNK {
        buf.resize(SEND_CHUNK, 0);
    }
    let end = offset
        .checked_add(len)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "range out of bounds"))?;
    let mut position = offset;
    while position < end {
        let want = (end - position).min(SEND_CHUNK as u64) as usize;
        let read = match file.read_at(&mut buf[..want], position) {
            Ok(0) => return Err(truncated()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        w.write_all(&buf[..read]).await?;
        position += read as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::cache::tests::TempDir;
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// Bigger than any socket buffer, so `send_file` must wait for writability.
    const BIG: usize = 8 * 1024 * 1024 + 12_345;

    /// Bytes that differ from their neighbours, so a skipped or repeated piece shows.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u64).wrapping_mul(2_654_435_761) as u8 ^ (i >> 16) as u8)
            .collect()
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (client.expect("connect"), accepted.expect("accept").0)
    }

    /// Sends a range over a real socket and returns what the peer received.
    async fn through_socket(file: &File, offset: u64, len: u64) -> (io::Result<()>, Vec<u8>) {
        let (mut client, server) = pair().await;
        let reader = async move {
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.expect("read");
            got
        };
        let writer = async move {
            let result = send_file(&server, file, offset, len).await;
            drop(server);
            result
        };
        tokio::join!(writer, reader)
    }

    #[tokio::test]
    async fn send_file_sends_a_big_file_exactly() {
        let dir = TempDir::new();
        let data = pattern(BIG);
        let file = File::open(dir.file("big", &data, 1)).expect("open");
        let (result, got) = through_socket(&file, 0, BIG as u64).await;
        result.expect("send_file");
        assert_eq!(got.len(), data.len());
        assert!(got == data, "received bytes differ");
    }

    #[tokio::test]
    async fn send_file_sends_a_middle_range() {
        let dir = TempDir::new();
        let data = pattern(BIG);
        let file = File::open(dir.file("big", &data, 1)).expect("open");
        let (offset, len) = (3_000_001, 4_500_000);
        let (result, got) = through_socket(&file, offset as u64, len as u64).await;
        result.expect("send_file");
        assert!(got == data[offset..offset + len], "received bytes differ");
    }

    #[tokio::test]
    async fn send_file_reports_a_short_file() {
        let dir = TempDir::new();
        let file = File::open(dir.file("short", b"0123456789", 1)).expect("open");
        let (result, got) = through_socket(&file, 4, 100).await;
        assert_eq!(
            result.map_err(|e| e.kind()),
            Err(io::ErrorKind::UnexpectedEof)
        );
        assert_eq!(got, b"456789");
    }

    #[tokio::test]
    async fn copy_file_copies_ranges() {
        let dir = TempDir::new();
        let data = pattern(3 * SEND_CHUNK + 17);
        let file = File::open(dir.file("f", &data, 1)).expect("open");
        let mut buf = Vec::new();
        let mut out = Vec::new();
        copy_file(&mut out, &file, 0, data.len() as u64, &mut buf)
            .await
            .expect("copy");
        assert!(out == data);
        assert_eq!(buf.len(), SEND_CHUNK);

        out.clear();
        copy_file(&mut out, &file, 5, 70_000, &mut buf)
            .await
            .expect("copy range");
        assert!(out == data[5..70_005]);

        let err = copy_file(&mut out, &file, data.len() as u64 - 1, 2, &mut buf).await;
        assert_eq!(err.map_err(|e| e.kind()), Err(io::ErrorKind::UnexpectedEof));
        let err = copy_file(&mut out, &file, u64::MAX, 2, &mut buf).await;
        assert_eq!(err.map_err(|e| e.kind()), Err(io::ErrorKind::InvalidInput));
    }
}
