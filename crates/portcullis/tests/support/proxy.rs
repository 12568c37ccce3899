//! Upstream servers for the reverse-proxy tests: a thread per connection, a handler that
//! sees each request (its connection number, head and body) and says what to answer, and
//! counters of connections and requests, so a test can tell which peer got what.

// Each test file uses a part of this module.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// Largest request head an upstream accepts.
const MAX_HEAD: usize = 64 * 1024;

/// One request as an upstream received it.
pub struct Exchange {
    /// The connection it came on, numbered from 1 per upstream.
    pub conn: usize,
    /// The request line and headers, up to and with the empty line.
    pub head: String,
    /// The body, de-chunked when it came chunked.
    pub body: Vec<u8>,
    /// Whether the body came chunked.
    pub chunked: bool,
}

impl Exchange {
    /// The request target.
    pub fn path(&self) -> &str {
        self.head.split(' ').nth(1).unwrap_or("")
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// What an upstream does with a request.
pub enum Reply {
    /// Writes these bytes and waits for the next request on the connection.
    Send(Vec<u8>),
    /// Writes these bytes and closes the connection.
    SendClose(Vec<u8>),
    /// Writes these bytes (a 101) and then echoes every byte it gets until the peer closes.
    Tunnel(Vec<u8>),
}

type Handler = dyn Fn(&Exchange) -> Reply + Send + Sync;

/// An upstream server on 127.0.0.1, stopped when dropped.
pub struct Upstream {
    pub port: u16,
    conns: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    stopped: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Upstream {
    /// Starts an upstream answering by `handler`.
    pub fn start(handler: impl Fn(&Exchange) -> Reply + Send + Sync + 'static) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
        let port = listener.local_addr().expect("addr").port();
        let up = Upstream {
            port,
            conns: Arc::default(),
            requests: Arc::default(),
            closed: Arc::default(),
            stopped: Arc::default(),
            open: Arc::default(),
        };
        let handler: Arc<Handler> = Arc::new(handler);
        let (conns, requests, closed, stopped, open) = (
            up.conns.clone(),
            up.requests.clone(),
            up.closed.clone(),
            up.stopped.clone(),
            up.open.clone(),
        );
        thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let n = conns.fetch_add(1, Ordering::SeqCst) + 1;
                if let Ok(clone) = stream.try_clone() {
                    open.lock().expect("lock").push(clone);
                }
                let handler = handler.clone();
                let requests = requests.clone();
                let closed = closed.clone();
                thread::spawn(move || {
                    serve(&stream, n, &*handler, &requests);
                    // The clone kept for stop() would hold the connection open.
                    let _ = stream.shutdown(Shutdown::Both);
                    closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        up
    }

    /// Connections accepted so far.
    pub fn conns(&self) -> usize {
        self.conns.load(Ordering::SeqCst)
    }

    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Connections this side has closed so far: once counted, the close is in the proxy's
    /// receive queue.
    pub fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops listening and resets every open connection, as a killed server.
    pub fn stop(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        // Wakes the accept loop so it sees the flag and drops the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for s in self.open.lock().expect("lock").drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `HTTP/1.1 200 OK` with `body`, its length and the given extra header lines.
pub fn ok(body: &str, extra: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Reads requests off one connection and answers each by `handler`.
fn serve(mut s: &TcpStream, conn: usize, handler: &Handler, requests: &AtomicUsize) {
    let mut buf = Vec::new();
    loop {
        let Ok(Some((head, body, chunked))) = read_request(&mut s, &mut buf) else {
            return;
        };
        requests.fetch_add(1, Ordering::SeqCst);
        let exchange = Exchange {
            conn,
            head,
            body,
            chunked,
        };
        match handler(&exchange) {
            Reply::Send(bytes) => {
                if s.write_all(&bytes).is_err() {
                    return;
                }
            }
            Reply::SendClose(bytes) => {
                let _ = s.write_all(&bytes);
                return;
            }
            Reply::Tunnel(bytes) => {
                if s.write_all(&bytes).is_err() {
                    return;
                }
                if !buf.is_empty() && s.write_all(&buf).is_err() {
                    return;
                }
                let mut chunk = [0u8; 4096];
                loop {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => {
                            if s.write_all(&chunk[..k]).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Reads one request: `None` on a clean close between requests.
fn read_request(
    s: &mut &TcpStream,
    buf: &mut Vec<u8>,
) -> io::Result<Option<(String, Vec<u8>, bool)>> {
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        if buf.len() > MAX_HEAD || fill(s, buf)? == 0 {
            return Ok(None);
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.drain(..end);
    let lower = head.to_ascii_lowercase();
    let chunked = lower.contains("\r\ntransfer-encoding: chunked");
    let body = if chunked {
        read_chunked(s, buf)?
    } else {
        let len = lower
            .split("\r\n")
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < len {
            if fill(s, buf)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        buf.drain(..len).collect()
    };
    Ok(Some((head, body, chunked)))
}

fn read_chunked(s: &mut &TcpStream, buf: &mut Vec<u8>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(s, buf)?;
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
        if size == 0 {
            while !read_line(s, buf)?.is_empty() {}
            return Ok(body);
        }
        while buf.len() < size + 2 {
            if fill(s, buf)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        body.extend(buf.drain(..size));
        buf.drain(..2);
    }
}

fn read_line(s: &mut &TcpStream, buf: &mut Vec<u8>) -> io::Result<String> {
    loop {
        if let Some(p) = buf.windows(2).position(|w| w == b"\r\n") {
            let line = String::from_utf8_lossy(&buf[..p]).into_owned();
            buf.drain(..p + 2);
            return Ok(line);
        }
        if fill(s, buf)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

fn fill(s: &mut &TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut chunk = [0u8; 16 * 1024];
    let n = s.read(&mut chunk)?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}
