//! The L4 floor of the proxy scenarios: a proxy that parses nothing.
//!
//! Each client connection gets one upstream connection of its own (round robin over the
//! upstream addresses), and every byte read from one side is written to the other, decrypted
//! and encrypted again where a side speaks TLS (with portcullis's own TLS configuration, so
//! the crypto is the same). It makes the socket calls an HTTP proxy cannot avoid, one read and
//! one write per side and request, and none of the parsing, routing or header work: what it
//! costs per request estimates the least an HTTP proxy pays for the same traffic on this
//! kernel.
//!
//! One thread per worker, each with a level-triggered epoll loop, sharing one listener as
//! nginx's workers do (`EPOLLEXCLUSIVE`). A side whose peer cannot take more is not read until the peer has taken what
//! is pending, so nothing buffers without bound.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;

use anyhow::Context;
use portcullis_proxy::{tls_pieces, TLS_PIECES};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, Connection, ServerConfig, ServerConnection};
use socket2::{Domain, Socket, Type};

/// The most read from a socket at once.
const READ_SIZE: usize = 16 * 1024;
/// The epoll token of the listener; a side's token is its pair's slot times two plus the side.
const LISTENER: u64 = u64::MAX;
/// Events taken from one `epoll_wait`.
const EVENTS: usize = 256;
/// The listener's backlog, as nginx's default on Linux.
const BACKLOG: i32 = 511;

/// What the floor listens on and where it sends the bytes.
#[derive(Debug, Clone)]
pub struct Floor {
    pub listen: SocketAddr,
    pub upstreams: Vec<SocketAddr>,
    /// TLS towards clients: the certificate, key and TLS 1.2 cipher (an OpenSSL name).
    pub server_tls: Option<(PathBuf, PathBuf, String)>,
    /// TLS towards the upstreams, with nginx's defaults as portcullis applies them.
    pub upstream_tls: bool,
    pub workers: usize,
}

/// The TLS configurations both sides are built with, shared by the workers.
#[derive(Clone)]
struct Tls {
    server: Option<Arc<ServerConfig>>,
    client: Option<Arc<ClientConfig>>,
}

/// Checks the floor's settings (certificates, cipher, upstreams) without serving.
pub fn check(floor: &Floor) -> anyhow::Result<()> {
    tls(floor).map(|_| ())
}

/// Serves until the process is stopped. The first worker runs on the calling thread, so a
/// single worker is a single-threaded process, as a one-worker nginx is.
pub fn run(floor: &Floor) -> anyhow::Result<()> {
    let tls = tls(floor)?;
    let listener = listen(floor.listen).with_context(|| format!("listen on {}", floor.listen))?;
    let mut workers = Vec::new();
    for _ in 0..floor.workers {
        let listener = listener.try_clone()?;
        workers.push(Worker::new(listener, floor.upstreams.clone(), tls.clone())?);
    }
    let first = workers.remove(0);
    let threads: Vec<_> = workers
        .into_iter()
        .map(|w| thread::spawn(move || w.run()))
        .collect();
    first.run()?;
    for t in threads {
        t.join()
            .map_err(|_| anyhow::anyhow!("a worker panicked"))??;
    }
    Ok(())
}

fn tls(floor: &Floor) -> anyhow::Result<Tls> {
    anyhow::ensure!(!floor.upstreams.is_empty(), "no upstream");
    anyhow::ensure!(floor.workers > 0, "no worker");
    let server = match &floor.server_tls {
        Some((cert, key, cipher)) => {
            let certified = portcullis_tls::load_certified_key(cert, key, &[])?;
            let settings = portcullis_tls::ServerSettings {
                certs: vec![certified],
                loader: None,
                versions: vec![&rustls::version::TLS12],
                tls12_suites: portcullis_tls::tls12_suites(cipher)?,
                kx_groups: None,
                prefer_server_ciphers: false,
                session_storage: Arc::new(rustls::server::NoServerSessionStorage {}),
                session_cache: false,
                ticketer: None,
                client_auth: None,
                alpn: Vec::new(),
                max_fragment_size: None,
            };
            Some(portcullis_tls::ServerTls::build(settings)?.config)
        }
        None => None,
    };
    let client = if floor.upstream_tls {
        Some(portcullis_tls::client::build(
            &portcullis_tls::ClientSpec::default(),
        )?)
    } else {
        None
    };
    Ok(Tls { server, client })
}

fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// One end of a proxied connection: a socket, its TLS if it has any, and what it could not
/// take yet.
struct Side {
    socket: TcpStream,
    tls: Option<Connection>,
    /// Bytes waiting: plain bytes the socket did not take, or over TLS plaintext rustls does
    /// not take yet (its handshake is not done). Encrypted records wait in rustls itself.
    pending: Vec<u8>,
    /// The interest registered with epoll, once registered.
    interest: Option<u32>,
    /// The peer ended its stream: nothing more is read from this side.
    ended: bool,
    /// This side was told the stream ended (TCP shutdown, or TLS close_notify).
    closed: bool,
}

/// What one read of a side gave.
enum Received {
    Data(usize),
    Nothing,
    End,
}

impl Side {
    fn new(socket: TcpStream, tls: Option<Connection>) -> io::Result<Side> {
        socket.set_nonblocking(true)?;
        socket.set_nodelay(true)?;
        Ok(Side {
            socket,
            tls,
            pending: Vec::new(),
            interest: None,
            ended: false,
            closed: false,
        })
    }

    /// Over TLS, reads what the socket has, once, and decrypts it; false at the end of the
    /// stream. Plain sides read in [`Side::take`].
    fn fill(&mut self) -> io::Result<bool> {
        let Some(tls) = &mut self.tls else {
            return Ok(true);
        };
        match tls.read_tls(&mut self.socket) {
            Ok(0) => return Ok(false),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(e),
        }
        tls.process_new_packets().map_err(io::Error::other)?;
        Ok(true)
    }

    /// Plaintext into `buf`: from the socket (one read), or what TLS decrypted.
    fn take(&mut self, buf: &mut [u8]) -> io::Result<Received> {
        let read = match &mut self.tls {
            Some(tls) => tls.reader().read(buf),
            None => self.socket.read(buf),
        };
        match read {
            Ok(0) => Ok(Received::End),
            Ok(n) => Ok(Received::Data(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Received::Nothing),
            Err(e) => Err(e),
        }
    }

    /// Sends `data` as far as the socket takes it; the rest waits.
    fn send(&mut self, data: &[u8]) -> io::Result<()> {
        let taken = if self.pending.is_empty() {
            match &mut self.tls {
                Some(tls) if tls.is_handshaking() => 0,
                Some(tls) => encrypt(tls, data)?,
                None => match self.socket.write(data) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                    Err(e) => return Err(e),
                },
            }
        } else {
            0
        };
        self.pending.extend_from_slice(&data[taken..]);
        self.flush()
    }

    /// Writes what waits, until done or the socket is full.
    fn flush(&mut self) -> io::Result<()> {
        let Some(tls) = &mut self.tls else {
            while !self.pending.is_empty() {
                match self.socket.write(&self.pending) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => drop(self.pending.drain(..n)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
            return Ok(());
        };
        if !self.pending.is_empty() && !tls.is_handshaking() {
            let n = encrypt(tls, &self.pending)?;
            self.pending.drain(..n);
        }
        while tls.wants_write() {
            match tls.write_tls(&mut self.socket) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Tells the side that the stream ended, once all that waits has gone out.
    fn close(&mut self) -> io::Result<()> {
        if self.closed || self.full() {
            return Ok(());
        }
        self.closed = true;
        match &mut self.tls {
            Some(tls) => {
                tls.send_close_notify();
                self.flush()
            }
            // A peer that went away already has nothing to be told.
            None => match self.socket.shutdown(Shutdown::Write) {
                Err(e) if e.kind() != io::ErrorKind::NotConnected => Err(e),
                _ => Ok(()),
            },
        }
    }

    /// Whether bytes wait for the socket, or for the handshake.
    fn full(&self) -> bool {
        !self.pending.is_empty() || self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Whether bytes wait for the socket to become writable.
    fn wants_out(&self) -> bool {
        match &self.tls {
            Some(tls) => tls.wants_write(),
            None => !self.pending.is_empty(),
        }
    }
}

/// Hands `data` to rustls in the pieces portcullis hands it (see
/// [`portcullis_proxy::tls_pieces`]); returns how much it took (all but what its buffer limit
/// refuses).
fn encrypt(tls: &mut Connection, data: &[u8]) -> io::Result<usize> {
    let mut taken = 0;
    while taken < data.len() {
        let rest = [IoSlice::new(&data[taken..])];
        let mut pieces = [IoSlice::new(&[]); TLS_PIECES];
        let n = tls_pieces(&rest, &mut pieces);
        match tls.writer().write_vectored(&pieces[..n])? {
            0 => break,
            n => taken += n,
        }
    }
    Ok(taken)
}

/// A client connection and its upstream connection: side 0 and side 1.
struct Pair {
    sides: [Side; 2],
}

struct Worker {
    epoll: OwnedFd,
    listener: TcpListener,
    /// Whether the listener is in the epoll set: it leaves it while no descriptor is left to
    /// accept with, and comes back when a pair closes.
    listening: bool,
    upstreams: Vec<SocketAddr>,
    next_upstream: usize,
    tls: Tls,
    pairs: Vec<Option<Pair>>,
    free: Vec<usize>,
    buf: Vec<u8>,
}

impl Worker {
    fn new(listener: TcpListener, upstreams: Vec<SocketAddr>, tls: Tls) -> io::Result<Worker> {
        // SAFETY: epoll_create1 takes no pointers; a valid descriptor is owned from here on.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and nothing else owns it.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut worker = Worker {
            epoll,
            listener,
            listening: false,
            upstreams,
            next_upstream: 0,
            tls,
            pairs: Vec::new(),
            free: Vec::new(),
            buf: vec![0; READ_SIZE],
        };
        worker.listen(true)?;
        Ok(worker)
    }

    /// Puts the listener into the epoll set or takes it out.
    fn listen(&mut self, on: bool) -> io::Result<()> {
        if on == self.listening {
            return Ok(());
        }
        let (op, events) = if on {
            (
                libc::EPOLL_CTL_ADD,
                (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
            )
        } else {
            (libc::EPOLL_CTL_DEL, 0)
        };
        control(
            self.epoll.as_raw_fd(),
            op,
            self.listener.as_raw_fd(),
            events,
            LISTENER,
        )?;
        self.listening = on;
        Ok(())
    }

    fn run(mut self) -> anyhow::Result<()> {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS];
        loop {
            // SAFETY: `events` has room for EVENTS entries and outlives the call.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    EVENTS as i32,
                    -1,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e).context("epoll_wait");
            }
            // Slots freed in this batch are handed out only after it, so that an event of a
            // closed pair never reaches a new one.
            let mut freed = Vec::new();
            for event in &events[..n as usize] {
                let (token, ready) = (event.u64, event.events);
                if token == LISTENER {
                    self.accept()?;
                    continue;
                }
                let slot = (token >> 1) as usize;
                if self.pairs[slot].is_none() {
                    continue;
                }
                // Closing both sockets takes them out of the epoll set.
                if !matches!(self.serve(slot, (token & 1) as usize, ready), Ok(true)) {
                    self.pairs[slot] = None;
                    freed.push(slot);
                }
            }
            if !freed.is_empty() {
                self.free.append(&mut freed);
                self.listen(true)?;
            }
        }
    }

    /// Accepts every waiting client and connects each to the next upstream. A client whose
    /// upstream cannot be reached is closed. Out of descriptors, the worker stops accepting
    /// until a pair closes.
    fn accept(&mut self) -> io::Result<()> {
        loop {
            let client = match self.listener.accept() {
                Ok((client, _)) => client,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    return self.listen(false);
                }
                Err(e) => return Err(e),
            };
            let upstream = self.upstreams[self.next_upstream % self.upstreams.len()];
            self.next_upstream = self.next_upstream.wrapping_add(1);
            let Ok(pair) = self.pair(client, upstream) else {
                continue;
            };
            let slot = self.free.pop().unwrap_or(self.pairs.len());
            if slot == self.pairs.len() {
                self.pairs.push(None);
            }
            self.pairs[slot] = Some(pair);
            if self.sync(slot).is_err() {
                self.pairs[slot] = None;
                self.free.push(slot);
            }
        }
    }

    fn pair(&self, client: TcpStream, upstream: SocketAddr) -> io::Result<Pair> {
        let client_tls = match &self.tls.server {
            Some(config) => Some(Connection::Server(
                ServerConnection::new(config.clone()).map_err(io::Error::other)?,
            )),
            None => None,
        };
        let upstream_tls = match &self.tls.client {
            Some(config) => {
                let name = ServerName::IpAddress(upstream.ip().into());
                Some(Connection::Client(
                    ClientConnection::new(config.clone(), name).map_err(io::Error::other)?,
                ))
            }
            None => None,
        };
        // Loopback connects at once (a blocking connect: an upstream whose backlog is full
        // stalls the worker, which a benchmark's upstreams never have); the socket turns
        // non-blocking after.
        let socket = TcpStream::connect(upstream)?;
        let mut upstream_side = Side::new(socket, upstream_tls)?;
        // A client handshake starts with the client's hello.
        upstream_side.flush()?;
        Ok(Pair {
            sides: [Side::new(client, client_tls)?, upstream_side],
        })
    }

    /// Moves what side `from` has to the other side, writes what waits on the side that
    /// became writable, passes on the end of a stream once what came before it is out, and
    /// registers the interest that follows. False once both streams ended: the pair is done.
    fn serve(&mut self, slot: usize, from: usize, ready: u32) -> io::Result<bool> {
        let pair = self.pairs[slot].as_mut().ok_or(io::ErrorKind::NotFound)?;
        let [a, b] = &mut pair.sides;
        let (side, other) = if from == 0 { (a, b) } else { (b, a) };
        if ready & libc::EPOLLOUT as u32 != 0 {
            side.flush()?;
        }
        // A socket gone both ways takes nothing more: epoll reports it whatever the interest,
        // so it ends the pair rather than wake the worker again and again.
        if ready & libc::EPOLLERR as u32 != 0 || (side.ended && ready & libc::EPOLLHUP as u32 != 0)
        {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        let readable = (libc::EPOLLIN | libc::EPOLLHUP) as u32;
        if ready & readable != 0 && !side.ended {
            side.ended = !side.fill()?;
            loop {
                match side.take(&mut self.buf)? {
                    Received::Data(n) => other.send(&self.buf[..n])?,
                    Received::Nothing => break,
                    Received::End => {
                        side.ended = true;
                        break;
                    }
                }
                // A plain socket is read once per event: a short read left nothing, and a
                // full one is reported again.
                if side.tls.is_none() {
                    break;
                }
            }
            // A handshake's answer, or an alert.
            side.flush()?;
        }
        if side.ended {
            other.close()?;
        }
        if other.ended {
            side.close()?;
        }
        if side.ended && other.ended && side.closed && other.closed && !side.full() && !other.full()
        {
            return Ok(false);
        }
        self.sync(slot)?;
        Ok(true)
    }

    /// Registers each side for what it waits for: reading while its stream goes on and its
    /// peer has nothing pending, writing while it has.
    fn sync(&mut self, slot: usize) -> io::Result<()> {
        let epoll = self.epoll.as_raw_fd();
        let pair = self.pairs[slot].as_mut().ok_or(io::ErrorKind::NotFound)?;
        let full = [pair.sides[0].full(), pair.sides[1].full()];
        for (i, side) in pair.sides.iter_mut().enumerate() {
            let mut want = 0;
            if !side.ended && !full[1 - i] {
                want |= libc::EPOLLIN as u32;
            }
            if side.wants_out() {
                want |= libc::EPOLLOUT as u32;
            }
            if side.interest != Some(want) {
                let op = match side.interest {
                    None => libc::EPOLL_CTL_ADD,
                    Some(_) => libc::EPOLL_CTL_MOD,
                };
                let token = (slot as u64) << 1 | i as u64;
                control(epoll, op, side.socket.as_raw_fd(), want, token)?;
                side.interest = Some(want);
            }
        }
        Ok(())
    }
}

fn control(epoll: RawFd, op: i32, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
    let mut event = libc::epoll_event { events, u64: token };
    // SAFETY: both descriptors are open and `event` outlives the call.
    if unsafe { libc::epoll_ctl(epoll, op, fd, &mut event) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
