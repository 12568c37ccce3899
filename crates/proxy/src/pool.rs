//! Idle upstream connections kept for reuse: nginx's `keepalive` in an `upstream` block.
//!
//! A worker holds one [`Pool`] per upstream group, with one list of idle connections per
//! peer. The most recently used connection is taken first (LIFO), so a light load runs on a
//! few warm connections and the others time out. The pool is generic over the stream, so
//! plain TCP and TLS connections are kept the same way. Nothing here locks: a pool belongs to
//! one worker.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// How long and how much a connection may be reused; nginx's `keepalive`,
/// `keepalive_requests`, `keepalive_timeout` and `keepalive_time` of an upstream block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLimits {
    /// At most this many idle connections per peer.
    pub max_idle: usize,
    /// A connection that carried this many requests is closed.
    pub requests: u64,
    /// An idle connection is closed after this long.
    pub timeout: Duration,
    /// A connection older than this is closed after its current request.
    pub time: Duration,
}

/// An upstream connection with what the limits need to know of its past.
#[derive(Debug)]
pub struct Conn<S> {
    pub stream: S,
    /// When it was established: `keepalive_time` counts from here.
    pub created: Instant,
    /// Requests sent on it so far.
    pub requests: u64,
    /// The timeouts of its reads and writes.
    pub timer: crate::Timer,
}

impl<S> Conn<S> {
    pub fn new(stream: S, now: Instant) -> Conn<S> {
        Conn {
            stream,
            created: now,
            requests: 0,
            timer: crate::Timer::new(),
        }
    }
}

struct Idle<S> {
    conn: Conn<S>,
    since: Instant,
}

/// The idle connections of one upstream group in one worker, per peer.
pub struct Pool<S> {
    limits: PoolLimits,
    /// Indexed by the peer's position in the group. Each list is in the order connections
    /// went idle: the front is the oldest (the first to time out or be evicted), the back the
    /// most recent (the first taken).
    peers: Vec<VecDeque<Idle<S>>>,
}

impl<S> Pool<S> {
    pub fn new(limits: PoolLimits, peers: usize) -> Pool<S> {
        Pool {
            limits,
            peers: (0..peers).map(|_| VecDeque::new()).collect(),
        }
    }

    pub fn limits(&self) -> &PoolLimits {
        &self.limits
    }

    /// The most recently used idle connection to `peer` that has not timed out, unchecked:
    /// the caller finds out whether the upstream closed it meanwhile (an HTTP/2 connection
    /// says so itself).
    pub fn take_unchecked(&mut self, peer: usize, now: Instant) -> Option<Conn<S>> {
        let list = self.peers.get_mut(peer)?;
        expire(list, self.limits.timeout, now);
        list.pop_back().map(|idle| idle.conn)
    }

    /// Whether a connection that just finished a request may be kept, by its request count
    /// and age.
    pub fn reusable(&self, conn: &Conn<S>, now: Instant) -> bool {
        self.limits.max_idle > 0
            && conn.requests < self.limits.requests
            && now.saturating_duration_since(conn.created) < self.limits.time
    }

    /// Keeps `conn` idle for `peer`, when the limits allow; otherwise it is dropped (closed).
    /// A full list loses its oldest connection, as nginx's cache does.
    pub fn put(&mut self, peer: usize, conn: Conn<S>, now: Instant) {
        if !self.reusable(&conn, now) {
            return;
        }
        let max = self.limits.max_idle;
        let Some(list) = self.peers.get_mut(peer) else {
            return;
        };
        if list.len() >= max {
            list.pop_front();
        }
        list.push_back(Idle { conn, since: now });
    }

    /// Closes every idle connection past the idle timeout.
    pub fn sweep(&mut self, now: Instant) {
        let timeout = self.limits.timeout;
        for list in &mut self.peers {
            expire(list, timeout, now);
        }
    }

    /// Idle connections to `peer`.
    pub fn idle(&self, peer: usize) -> usize {
        self.peers.get(peer).map_or(0, VecDeque::len)
    }
}

impl<S: AsFd> Pool<S> {
    /// The most recently used idle connection to `peer` that has not timed out. With
    /// `check`, a connection the upstream has closed meanwhile (EOF or unexpected bytes
    /// waiting) is dropped and the next one tried; without it, the caller must be ready to
    /// retry a request whose connection turns out closed.
    pub fn take(&mut self, peer: usize, check: bool, now: Instant) -> Option<Conn<S>> {
        let list = self.peers.get_mut(peer)?;
        expire(list, self.limits.timeout, now);
        while let Some(idle) = list.pop_back() {
            if !check || is_open(&idle.conn.stream) {
                return Some(idle.conn);
            }
        }
        None
    }
}

/// Drops the connections idle for `timeout` or longer: a prefix of the list, which is in
/// the order they went idle, so only the expired ones are looked at.
fn expire<S>(list: &mut VecDeque<Idle<S>>, timeout: Duration, now: Instant) {
    while list
        .front()
        .is_some_and(|i| now.saturating_duration_since(i.since) >= timeout)
    {
        list.pop_front();
    }
}

/// Whether an idle connection is still usable: a peek at its socket would block. EOF, an
/// error or bytes the upstream sent unasked all mean it must not carry a request. The kernel
/// is asked directly: the runtime's cached readiness may not have seen a close yet.
fn is_open<S: AsFd>(stream: &S) -> bool {
    let mut byte = [MaybeUninit::<u8>::uninit()];
    match socket2::SockRef::from(stream).peek(&mut byte) {
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    fn limits() -> PoolLimits {
        PoolLimits {
            max_idle: 2,
            requests: 3,
            timeout: Duration::from_secs(60),
            time: Duration::from_secs(3600),
        }
    }

    async fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let addr = listener.local_addr().unwrap();
        let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (client.unwrap(), server.unwrap().0)
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn lifo_limits_and_timeouts() {
        rt().block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let now = Instant::now();
            let mut pool = Pool::new(limits(), 2);
            let mut servers = Vec::new();
            let mut ports = Vec::new();
            for _ in 0..3 {
                let (c, s) = pair(&listener).await;
                ports.push(c.local_addr().unwrap().port());
                servers.push(s);
                pool.put(0, Conn::new(c, now), now);
            }
            // Two kept, the oldest dropped; the newest comes out first.
            assert_eq!(pool.idle(0), 2);
            let first = pool.take(0, true, now).unwrap();
            assert_eq!(first.stream.local_addr().unwrap().port(), ports[2]);
            assert_eq!(pool.idle(1), 0);
            assert!(pool.take(1, true, now).is_none());
            // Past the idle timeout, nothing is taken.
            let later = now + Duration::from_secs(61);
            assert!(pool.take(0, true, later).is_none());
            // A connection that carried `requests` requests is not kept.
            let mut used = first;
            used.requests = 3;
            pool.put(0, used, now);
            assert_eq!(pool.idle(0), 0);
        });
    }

    #[test]
    fn closed_idle_connection_is_dropped() {
        rt().block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let now = Instant::now();
            let mut pool = Pool::new(limits(), 1);
            let (c1, mut s1) = pair(&listener).await;
            let (c2, _s2) = pair(&listener).await;
            let c2_port = c2.local_addr().unwrap().port();
            s1.shutdown().await.unwrap();
            drop(s1);
            c1.readable().await.unwrap();
            pool.put(0, Conn::new(c2, now), now);
            pool.put(0, Conn::new(c1, now), now);
            // The newest is closed: it is dropped and the older, live one comes out.
            let live = pool.take(0, true, now).unwrap();
            assert_eq!(live.stream.local_addr().unwrap().port(), c2_port);
            assert_eq!(pool.idle(0), 0);
        });
    }
}
