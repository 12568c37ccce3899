//! A connection that is plain TCP or TLS over it: one type for both sides. The server's client
//! connections and the pool's upstream connections differ only in which rustls side `T` is.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::sock::Sock;

/// A connection, plain or TLS; `T` is tokio-rustls's client or server stream.
#[derive(Debug)]
pub enum MaybeTls<T> {
    Plain(Sock),
    /// Boxed: the TLS state is large and most connections of a pool are of one kind.
    Tls(Box<T>),
}

/// An upstream connection: TCP, plain or TLS, or a unix-domain socket.
#[derive(Debug)]
pub enum Stream {
    Tcp(MaybeTls<tokio_rustls::client::TlsStream<Tcp>>),
    Unix(tokio::net::UnixStream),
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

impl Stream {
    /// Ready once a read may find something: the socket's readiness for plain TCP and unix
    /// sockets, at once over TLS (rustls may hold what an earlier read took in). Lets a
    /// caller take a buffer for an answer only when the answer starts to come.
    pub fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(MaybeTls::Plain(s)) => s.poll_read_ready(cx),
            Stream::Tcp(MaybeTls::Tls(_)) => Poll::Ready(Ok(())),
            Stream::Unix(s) => s.poll_read_ready(cx),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The TCP socket under TLS, read and written as the plain connections are (through [`recv`]
/// and [`writev`]).
#[derive(Debug)]
pub struct Tcp(pub TcpStream);

impl AsyncRead for Tcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_recv(&self.0, cx, buf)
    }
}

impl AsyncWrite for Tcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        poll_writev(&self.0, cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        poll_writev(&self.0, cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// A TLS stream whose transport is a TCP socket.
pub trait OverTcp {
    fn tcp(&self) -> &TcpStream;
}

impl OverTcp for tokio_rustls::client::TlsStream<Tcp> {
    fn tcp(&self) -> &TcpStream {
        &self.get_ref().0 .0
    }
}

impl OverTcp for tokio_rustls::server::TlsStream<Tcp> {
    fn tcp(&self) -> &TcpStream {
        &self.get_ref().0 .0
    }
}

impl<T: OverTcp> MaybeTls<T> {
    /// TCP_NODELAY on, under TLS too.
    pub fn set_nodelay(&self) -> io::Result<()> {
        match self {
            MaybeTls::Plain(s) => s.set_nodelay(),
            MaybeTls::Tls(s) => s.tcp().set_nodelay(true),
        }
    }
}

/// The TCP socket, under TLS too: for socket options and the connection's state, never for
/// I/O.
impl<T: OverTcp> AsFd for MaybeTls<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            MaybeTls::Plain(s) => s.as_fd(),
            MaybeTls::Tls(s) => s.tcp().as_fd(),
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for MaybeTls<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => s.poll_recv(cx, buf),
            MaybeTls::Tls(s) => {
                let read = Pin::new(s.as_mut()).poll_read(cx, buf);
                // What reading made TLS answer (an alert refusing a renegotiation, a key
                // update) goes out now, not with the next response: the peer may be waiting
                // for it.
                if read.is_pending() {
                    if let Poll::Ready(Err(e)) = Pin::new(s.as_mut()).poll_flush(cx) {
                        return Poll::Ready(Err(e));
                    }
                }
                read
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for MaybeTls<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => s.poll_writev(cx, &[io::IoSlice::new(buf)]),
            MaybeTls::Tls(s) => {
                let whole = [io::IoSlice::new(buf)];
                let mut pieces = [io::IoSlice::new(&[]); TLS_PIECES];
                let n = tls_pieces(&whole, &mut pieces);
                Pin::new(s.as_mut()).poll_write_vectored(cx, &pieces[..n])
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => s.poll_writev(cx, bufs),
            MaybeTls::Tls(s) => {
                let mut pieces = [io::IoSlice::new(&[]); TLS_PIECES];
                let n = tls_pieces(bufs, &mut pieces);
                Pin::new(s.as_mut()).poll_write_vectored(cx, &pieces[..n])
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(s) => s.is_write_vectored(),
            MaybeTls::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The largest piece of plaintext handed to rustls at once. rustls copies what it is given
/// into its records with memcpy, and glibc (2.36, Debian 12's) copies more than 2 KB with `rep
/// movsb`, which an AMD EPYC runs about 30 times slower than a vector copy when source and
/// destination differ modulo 16, as a record's payload (past its 5- or 13-byte header) and
/// the caller's buffer mostly do: 16 KB took 5.5 µs instead of 0.2. Pieces of at most 2 KB
/// are copied by vector instructions, at full speed whatever their alignment.
const TLS_PIECE: usize = 2048;
/// Pieces handed to rustls per write: 64 KB (four full records, sent in one writev) and a few
/// short buffers before it, a response's head.
pub const TLS_PIECES: usize = 40;

/// Cuts `bufs` into pieces of at most [`TLS_PIECE`] bytes, as many as `pieces` holds;
/// returns how many it filled. Empty buffers are left out.
pub fn tls_pieces<'a>(bufs: &'a [io::IoSlice<'_>], pieces: &mut [io::IoSlice<'a>]) -> usize {
    let mut n = 0;
    for piece in bufs.iter().flat_map(|b| b.chunks(TLS_PIECE)) {
        if n == pieces.len() {
            break;
        }
        pieces[n] = io::IoSlice::new(piece);
        n += 1;
    }
    n
}

/// Writes `a` then `b`, vectored, in as few writes as `w` takes them.
pub async fn write_two<W: AsyncWrite + Unpin>(w: &mut W, a: &[u8], b: &[u8]) -> io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let total = a.len() + b.len();
    let mut written = 0;
    while written < total {
        let h = &a[written.min(a.len())..];
        let t = &b[written.saturating_sub(a.len())..];
        let n = w
            .write_vectored(&[io::IoSlice::new(h), io::IoSlice::new(t)])
            .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        written += n;
    }
    Ok(())
}

/// Reads from a plain socket once it is readable, as tokio's own `poll_read` does, but through
/// [`recv`].
pub(crate) fn poll_recv(
    s: &TcpStream,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    loop {
        ready!(s.poll_read_ready(cx))?;
        let room = buf.remaining();
        match drain(s, Interest::READABLE, room, || {
            recv_into(s.as_raw_fd(), buf)
        }) {
            Ok(_) => return Poll::Ready(Ok(())),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

/// Writes to a plain socket once it is writable, through [`writev`].
pub(crate) fn poll_writev(
    s: &TcpStream,
    cx: &mut Context<'_>,
    bufs: &[io::IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    loop {
        // Readiness first, as tokio's own writes: polling it also spends the task's budget, so
        // a connection whose socket never fills still yields to the others now and then.
        ready!(s.poll_write_ready(cx))?;
        match try_writev(s, bufs) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            done => return Poll::Ready(done),
        }
    }
}

/// Runs a socket call of `want` bytes when the socket is ready for `interest`. A call that
/// moved fewer bytes than asked drained the socket (or filled its buffer): as tokio does, its
/// readiness is cleared then, so the next call waits for the next event instead of costing a
/// syscall that fails with EAGAIN.
fn drain(
    s: &TcpStream,
    interest: Interest,
    want: usize,
    call: impl FnOnce() -> io::Result<usize>,
) -> io::Result<usize> {
    let mut short = None;
    let result = s.try_io(interest, || match call()? {
        // tokio clears readiness only when the call says WouldBlock; the count is kept aside.
        n if n > 0 && n < want => {
            short = Some(n);
            Err(io::ErrorKind::WouldBlock.into())
        }
        n => Ok(n),
    });
    match short {
        Some(n) => Ok(n),
        None => result,
    }
}

/// Writes to a plain socket if it takes the bytes now, without waiting: a response that fits
/// the socket buffer goes out with no task wake-up and no timer.
pub(crate) fn try_writev(s: &TcpStream, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    let want = bufs.iter().map(|b| b.len()).sum();
    drain(s, Interest::WRITABLE, want, || writev(s.as_raw_fd(), bufs))
}

// The socket calls of the request path, made with syscall(2) rather than glibc's wrappers. In
// a process with more than one thread (every portcullis process: the master and its workers),
// glibc brackets each recv and writev with the atomic operations of a pthread cancellation
// point, which cost more than the call's own user-space work; nothing here is ever cancelled.

/// recv(2) on a non-blocking socket.
fn recv(fd: RawFd, buf: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
    // SAFETY: the buffer is valid for writes of its length; the address arguments are null.
    let n = unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd,
            buf.as_mut_ptr(),
            buf.len(),
            0,
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// [`recv`] into the unfilled part of `buf`, which it then counts as filled.
pub(crate) fn recv_into(fd: RawFd, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
    // SAFETY: recv only writes into the unfilled part, and what it wrote is marked
    // initialized below.
    let n = recv(fd, unsafe { buf.unfilled_mut() })?;
    // SAFETY: the kernel wrote n bytes into the unfilled part.
    unsafe { buf.assume_init(n) };
    buf.advance(n);
    Ok(n)
}

/// writev(2) on a non-blocking socket; at most IOV_MAX buffers are passed.
pub(crate) fn writev(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    /// Linux's IOV_MAX: writev refuses more buffers than this.
    const IOV_MAX: usize = 1024;
    let count = bufs.len().min(IOV_MAX);
    // SAFETY: IoSlice has iovec's layout on Unix, and each points to readable memory.
    let n = unsafe { libc::syscall(libc::SYS_writev, fd, bufs.as_ptr(), count) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_pieces_keep_the_bytes_in_order_and_stop_when_full() {
        let a: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let b = vec![7u8; 100];
        let bufs = [
            io::IoSlice::new(&a),
            io::IoSlice::new(&[]),
            io::IoSlice::new(&b),
        ];
        let mut pieces = [io::IoSlice::new(&[]); TLS_PIECES];
        let n = tls_pieces(&bufs, &mut pieces);
        let sizes: Vec<usize> = pieces[..n].iter().map(|p| p.len()).collect();
        assert_eq!(sizes, [2048, 2048, 904, 100]);
        let joined: Vec<u8> = pieces[..n].iter().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(joined, [a.as_slice(), b.as_slice()].concat());

        let big = vec![1u8; TLS_PIECE * TLS_PIECES + 1];
        let whole = [io::IoSlice::new(&big)];
        let n = tls_pieces(&whole, &mut pieces);
        assert_eq!(n, TLS_PIECES);
        assert!(pieces.iter().all(|p| p.len() == TLS_PIECE));
    }
}
