//! A plain TCP connection's socket, which enters the reactor only when a call on it would
//! block.
//!
//! A connection that is served in one go, its request in the first bytes read and its
//! response taken whole by the socket buffer, needs no readiness events: registering its
//! socket with epoll, polling its task once more for the event that the registration reports
//! at once, and deregistering the socket before it closes are three system calls and a task
//! wake-up spent on nothing. An accepted socket is therefore read and written directly; the
//! first call that finds it not ready registers it, and from then on it is waited for as tokio
//! waits for any socket. Registering after `EAGAIN` loses no event: epoll reports, when a
//! socket is added, the readiness it already has.

use std::io;
use std::mem;
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::stream::{poll_recv, poll_writev, recv_into, try_writev, writev};

/// A plain TCP socket, in tokio's reactor or not yet; see the module's text.
#[derive(Debug)]
pub struct Sock(State);

#[derive(Debug)]
enum State {
    /// Not registered: read and written directly while the calls do not block.
    Direct(std::net::TcpStream),
    Registered(TcpStream),
    /// Registering failed, and the socket was closed with it.
    Closed,
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "socket closed")
}

impl From<TcpStream> for Sock {
    fn from(s: TcpStream) -> Sock {
        Sock(State::Registered(s))
    }
}

impl Sock {
    /// A socket outside the reactor, which must be non-blocking.
    pub fn direct(s: std::net::TcpStream) -> Sock {
        Sock(State::Direct(s))
    }

    /// The socket as tokio's, registered now if it was not yet.
    pub fn registered(&mut self) -> io::Result<&mut TcpStream> {
        if let State::Direct(_) = self.0 {
            let State::Direct(s) = mem::replace(&mut self.0, State::Closed) else {
                unreachable!("matched above");
            };
            self.0 = State::Registered(TcpStream::from_std(s)?);
        }
        match &mut self.0 {
            State::Registered(s) => Ok(s),
            _ => Err(closed()),
        }
    }

    /// The socket as tokio's, for what reads and writes only through tokio's types.
    pub fn into_registered(self) -> io::Result<TcpStream> {
        match self.0 {
            State::Direct(s) => TcpStream::from_std(s),
            State::Registered(s) => Ok(s),
            State::Closed => Err(closed()),
        }
    }

    /// The socket out of the reactor.
    pub fn into_std(self) -> io::Result<std::net::TcpStream> {
        match self.0 {
            State::Direct(s) => Ok(s),
            State::Registered(s) => s.into_std(),
            State::Closed => Err(closed()),
        }
    }

    /// Ready once a read may find something; registers the socket.
    pub fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.registered()?.poll_read_ready(cx)
    }

    /// Writes if the socket takes the bytes now, without waiting.
    pub fn try_writev(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match &self.0 {
            State::Direct(s) => writev(s.as_raw_fd(), bufs),
            State::Registered(s) => try_writev(s, bufs),
            State::Closed => Err(closed()),
        }
    }

    /// Reads directly while the socket is outside the reactor and has bytes; registers it
    /// at the first read that finds none.
    pub(crate) fn poll_recv(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let State::Direct(s) = &self.0 {
            // A direct call spends the task's budget as a wait in the reactor does, so that a
            // client whose bytes never run out still lets the worker's other connections run.
            let coop = ready!(tokio::task::coop::poll_proceed(cx));
            match recv_into(s.as_raw_fd(), buf) {
                Ok(_) => {
                    coop.made_progress();
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        poll_recv(self.registered()?, cx, buf)
    }

    /// Writes directly while the socket is outside the reactor and takes bytes; registers it
    /// at the first write that finds it full.
    pub(crate) fn poll_writev(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let State::Direct(s) = &self.0 {
            let coop = ready!(tokio::task::coop::poll_proceed(cx));
            match writev(s.as_raw_fd(), bufs) {
                Ok(n) => {
                    coop.made_progress();
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        poll_writev(self.registered()?, cx, bufs)
    }

    /// TCP_NODELAY on.
    pub fn set_nodelay(&self) -> io::Result<()> {
        match &self.0 {
            State::Direct(s) => s.set_nodelay(true),
            State::Registered(s) => s.set_nodelay(true),
            State::Closed => Err(closed()),
        }
    }

    fn shutdown_write(&self) -> io::Result<()> {
        match &self.0 {
            State::Direct(s) => s.shutdown(Shutdown::Write),
            State::Registered(s) => socket2::SockRef::from(s).shutdown(Shutdown::Write),
            State::Closed => Err(closed()),
        }
    }
}

impl AsFd for Sock {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.0 {
            State::Direct(s) => s.as_fd(),
            State::Registered(s) => s.as_fd(),
            // Only a client's socket registers lazily, and the client's connection takes its
            // descriptor through `set_nodelay`, which fails here instead; an upstream socket
            // is registered from the start.
            State::Closed => panic!("a closed socket has no descriptor"),
        }
    }
}

impl AsRawFd for Sock {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

impl AsyncRead for Sock {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().poll_recv(cx, buf)
    }
}

impl AsyncWrite for Sock {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_writev(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_writev(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.shutdown_write())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connected pair: the accepted side as a direct, non-blocking `Sock`, and the client.
    fn pair() -> (Sock, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
        let (accepted, _) = listener.accept().expect("accept");
        accepted.set_nonblocking(true).expect("non-blocking");
        (Sock::direct(accepted), client)
    }

    /// A wait that a lost wake-up would make endless fails instead.
    async fn in_time<F: std::future::Future>(f: F) -> F::Output {
        let limit = std::time::Duration::from_secs(10);
        tokio::time::timeout(limit, f).await.expect("never woken")
    }

    fn direct(s: &Sock) -> bool {
        matches!(s.0, State::Direct(_))
    }

    #[tokio::test]
    async fn bytes_already_there_are_read_and_answered_outside_the_reactor() {
        let (mut sock, mut client) = pair();
        std::io::Write::write_all(&mut client, b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let mut buf = [0u8; 64];
        let n = sock.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\n\r\n");
        sock.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(
            sock.try_writev(&[io::IoSlice::new(b"more")]).unwrap(),
            4,
            "a write that fits goes out at once"
        );
        assert!(
            direct(&sock),
            "nothing had to wait, so nothing was registered"
        );
        sock.shutdown().await.unwrap();
        let mut answer = Vec::new();
        std::io::Read::read_to_end(&mut client, &mut answer).unwrap();
        assert_eq!(answer, b"HTTP/1.1 204 No Content\r\n\r\nmore");
    }

    #[tokio::test]
    async fn a_read_that_must_wait_registers_and_is_woken_by_the_bytes() {
        let (mut sock, mut client) = pair();
        let mut buf = [0u8; 16];
        let read = sock.read(&mut buf);
        let write = async {
            // The read has found nothing and waits in the reactor before the bytes come.
            tokio::task::yield_now().await;
            std::io::Write::write_all(&mut client, b"late").unwrap();
        };
        let (n, ()) = in_time(async { tokio::join!(read, write) }).await;
        assert_eq!(&buf[..n.unwrap()], b"late");
        assert!(!direct(&sock));
        // Registered, the socket is read and written as tokio's.
        std::io::Write::write_all(&mut client, b"again").unwrap();
        let n = in_time(sock.read(&mut buf)).await.unwrap();
        assert_eq!(&buf[..n], b"again");
        let std = sock.into_std().expect("out of the reactor");
        assert!(std.peer_addr().is_ok());
    }

    #[tokio::test]
    async fn a_write_the_socket_cannot_take_waits_in_the_reactor() {
        let (mut sock, client) = pair();
        // More than the socket buffers of both sides hold: the write must wait for the reader.
        let big = vec![7u8; 16 << 20];
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut &client, &mut got).unwrap();
            got.len()
        });
        in_time(sock.write_all(&big)).await.unwrap();
        assert!(!direct(&sock));
        sock.shutdown().await.unwrap();
        drop(sock);
        assert_eq!(reader.join().unwrap(), big.len());
    }
}
