//! One proxied request: choose a peer, get a connection, send the request, forward the
//! response. Failures before anything reached the client become a status (502, 504) that the
//! caller sends through error_page; after that, the client connection is closed.

use std::io::IoSlice;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use portcullis_http::{
    chunk_header, parse_response_head, BodyKind, Chunk, ChunkedDecoder, Framing, ResponseHead,
    UpstreamHeadError, LAST_CHUNK,
};
use portcullis_proxy::upstream::{Key, KeyKind, Outcome, PeerId};
use portcullis_proxy::{Conn, Stream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::settings::next;
use super::{Attempt, Plan};
use crate::request::Request;
use crate::Level;

/// Bytes read from the upstream at least per call once the head is in.
const READ_CHUNK: usize = 16 * 1024;

/// The client side of the exchange: reached only through AsyncRead/AsyncWrite, so plain and
/// TLS client connections work alike.
pub(crate) struct Client<'c, S> {
    pub stream: &'c mut S,
    /// The connection's response-head buffer.
    pub out: &'c mut BytesMut,
    /// Whether the client connection may carry another request after this one.
    pub keep_alive: bool,
    pub send_timeout: Duration,
}

/// How the exchange ended.
pub(crate) enum Finish {
    /// A response was sent, whole or in part.
    Sent {
        status: u16,
        sent: u64,
        body: u64,
        keep_alive: bool,
        attempts: Vec<Attempt>,
    },
    /// Nothing was sent: answer with this status (through error_page). `body_read` says
    /// whether the request body was read whole, so the connection can go on.
    Status {
        code: u16,
        body_read: bool,
        attempts: Vec<Attempt>,
    },
}

/// Why an attempt failed, as `proxy_next_upstream` names it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Failure {
    Error,
    Timeout,
    InvalidHeader,
}

impl Failure {
    fn bit(self) -> u16 {
        match self {
            Failure::Error => next::ERROR,
            Failure::Timeout => next::TIMEOUT,
            Failure::InvalidHeader => next::INVALID_HEADER,
        }
    }
    fn status(self) -> u16 {
        match self {
            Failure::Timeout => 504,
            _ => 502,
        }
    }
}

/// Runs the exchange for `plan` on behalf of `req`.
pub(crate) async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    client: Client<'_, S>,
    req: &Request<'_>,
    plan: Plan,
    body: Option<Bytes>,
) -> Finish {
    let mut attempts = Vec::new();
    let body = plan
        .set_body
        .as_deref()
        .map(Bytes::copy_from_slice)
        .or(body);
    let Client {
        stream,
        out,
        keep_alive,
        send_timeout,
    } = client;
    let mut head = plan.head.clone();
    match &body {
        Some(b) => {
            head.put_slice(b"Content-Length: ");
            head.put_slice(b.len().to_string().as_bytes());
            head.put_slice(b"\r\n\r\n");
        }
        None => head.put_slice(b"\r\n"),
    }
    let head = head.freeze();
    let body = body.unwrap_or_default();
    let upstream = plan.upstream.clone();
    let worker = req.worker();
    let local = worker.upstreams.borrow_mut().local(&upstream);
    let mut tried = upstream.tried();
    let settings = plan.settings.clone();
    let start = Instant::now();
    // As nginx, a request tries each peer of the group at most once.
    let peers = u32::try_from(upstream.peers().len()).unwrap_or(u32::MAX);
    let max_tries = match settings.next_upstream_tries {
        0 => peers,
        n => n.min(peers),
    };
    let mut tries = 0u32;
    let hash_key = match upstream.key_kind() {
        KeyKind::Hash(_) => req.hash_key(&upstream),
        _ => Vec::new(),
    };
    loop {
        tries += 1;
        let key = match upstream.key_kind() {
            KeyKind::None => Key::None,
            KeyKind::Hash(_) => Key::Bytes(&hash_key),
            KeyKind::ClientAddr => Key::ClientAddr(req.client_ip()),
        };
        let now = Instant::now();
        let selected = {
            let mut l = local.borrow_mut();
            upstream.select(&mut l.state, key, &mut tried, now)
        };
        let Ok(peer) = selected else {
            req.log_upstream(
                Level::Error,
                "no live upstreams while connecting to upstream",
                &upstream_url(&plan, upstream.name()),
            );
            attempts.push(Attempt {
                addr: Arc::from(upstream.name()),
                status: Some(502),
                connect: None,
                header: None,
                response: Duration::ZERO,
            });
            return Finish::Status {
                code: 502,
                body_read: true,
                attempts,
            };
        };
        let peer_ref = upstream.peer(peer);
        let url = upstream_url(&plan, &peer_ref.name);
        let attempt_start = Instant::now();
        let mut attempt = Attempt {
            addr: peer_ref.name.clone(),
            status: None,
            connect: None,
            header: None,
            response: Duration::ZERO,
        };
        let result = attempt_once(
            &plan,
            &local,
            peer,
            peer_ref.addr,
            &head,
            &body,
            req,
            &url,
            &mut attempt,
        )
        .await;
        attempt.response = attempt_start.elapsed();
        let (mut conn, resp_head, ubuf) = match result {
            Ok(r) => r,
            Err(f) => {
                upstream.release(peer, Outcome::Failed, Instant::now());
                attempt.status = Some(f.status());
                attempts.push(attempt);
                if may_retry(&plan, f.bit(), tries, max_tries, start) {
                    continue;
                }
                return Finish::Status {
                    code: f.status(),
                    body_read: true,
                    attempts,
                };
            }
        };
        let status = resp_head.status();
        attempt.status = Some(status);
        let bit = next::status_bit(status);
        if bit & settings.next_upstream != 0 && may_retry(&plan, bit, tries, max_tries, start) {
            let failed = bit & next::FAILURE_STATUSES != 0;
            upstream.release(
                peer,
                if failed { Outcome::Failed } else { Outcome::Ok },
                Instant::now(),
            );
            attempts.push(attempt);
            put_back(&local, peer, None::<Conn<Stream>>);
            continue;
        }
        if settings.intercept_errors && status >= 300 && req.has_error_page(status) {
            upstream.release(peer, Outcome::Ok, Instant::now());
            attempts.push(attempt);
            return Finish::Status {
                code: status,
                body_read: true,
                attempts,
            };
        }
        let failed = bit & next::FAILURE_STATUSES & settings.next_upstream != 0;
        let outcome = if failed { Outcome::Failed } else { Outcome::Ok };
        let forwarded = forward(
            stream,
            out,
            req,
            &plan,
            &resp_head,
            ubuf,
            &mut conn,
            keep_alive,
            send_timeout,
            &url,
        )
        .await;
        attempt.response = attempt_start.elapsed();
        attempts.push(attempt);
        upstream.release(peer, outcome, Instant::now());
        let reusable = forwarded.upstream_done && plan.keepalive && !resp_head.connection_close();
        put_back(&local, peer, reusable.then_some(conn));
        return Finish::Sent {
            status,
            sent: forwarded.sent,
            body: forwarded.body,
            keep_alive: forwarded.keep_alive,
            attempts,
        };
    }
}

/// Whether another peer may be tried after a failure of kind `bit`.
fn may_retry(plan: &Plan, bit: u16, tries: u32, max_tries: u32, start: Instant) -> bool {
    let s = &plan.settings;
    s.next_upstream & bit != 0
        && (plan.idempotent || s.next_upstream & next::NON_IDEMPOTENT != 0)
        && tries < max_tries
        && (s.next_upstream_timeout.is_zero() || start.elapsed() < s.next_upstream_timeout)
}

fn put_back(
    local: &std::rc::Rc<std::cell::RefCell<super::Local>>,
    peer: PeerId,
    conn: Option<Conn<Stream>>,
) {
    let Some(conn) = conn else { return };
    let mut l = local.borrow_mut();
    if let Some(pool) = l.pool.as_mut() {
        pool.put(peer.0, conn, Instant::now());
    }
}

/// `http://peer/uri` for the error log.
fn upstream_url(plan: &Plan, peer: &str) -> String {
    format!(
        "{}://{}{}",
        if plan.https { "https" } else { "http" },
        peer,
        String::from_utf8_lossy(&plan.uri)
    )
}

/// Reads the request body whole (bounded by `max`, client_max_body_size), before the
/// exchange, so a retry on another peer can send it again. `Err` is the status to answer.
pub(crate) async fn collect_body<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    kind: BodyKind,
    timeout: Duration,
    max: u64,
) -> Result<Bytes, u16> {
    let mut body = BytesMut::new();
    match kind {
        BodyKind::None => {}
        BodyKind::Length(n) => {
            while (body.len() as u64) < n {
                if buf.is_empty() && !read_some(stream, buf, timeout).await {
                    return Err(400);
                }
                let take = (n - body.len() as u64).min(buf.len() as u64) as usize;
                body.put_slice(&buf.split_to(take));
            }
        }
        BodyKind::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            loop {
                match decoder.decode(buf) {
                    Ok(Chunk::Data(d)) => {
                        if max != 0 && (body.len() + d.len()) as u64 > max {
                            return Err(413);
                        }
                        body.put_slice(&d);
                    }
                    Ok(Chunk::Done) => break,
                    Ok(Chunk::NeedMore) => {
                        if !read_some(stream, buf, timeout).await {
                            return Err(400);
                        }
                    }
                    Err(_) => return Err(400),
                }
            }
        }
    }
    Ok(body.freeze())
}

async fn read_some<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut BytesMut, t: Duration) -> bool {
    buf.reserve(READ_CHUNK);
    matches!(tokio::time::timeout(t, stream.read_buf(buf)).await, Ok(Ok(n)) if n > 0)
}

type Attempted = (Conn<Stream>, ResponseHead, BytesMut);

/// One attempt on `peer`: a pooled connection (retried once on a fresh one if it turns out
/// closed before any response byte) or a new one, the request, the response head.
#[allow(clippy::too_many_arguments)]
async fn attempt_once(
    plan: &Plan,
    local: &std::rc::Rc<std::cell::RefCell<super::Local>>,
    peer: PeerId,
    addr: std::net::SocketAddr,
    head: &Bytes,
    body: &Bytes,
    req: &Request<'_>,
    url: &str,
    attempt: &mut Attempt,
) -> Result<Attempted, Failure> {
    let settings = &plan.settings;
    // A pooled connection is checked before use only when a failure could not be retried.
    let pooled = {
        let mut l = local.borrow_mut();
        l.pool
            .as_mut()
            .and_then(|p| p.take(peer.0, !plan.idempotent, Instant::now()))
    };
    let mut candidates = [pooled, None];
    for (i, slot) in candidates.iter_mut().enumerate() {
        let reused = slot.is_some();
        if i == 1 && slot.is_none() && attempt.connect.is_some() {
            // The fresh connection already failed.
            break;
        }
        let mut conn = match slot.take() {
            Some(c) => c,
            None => {
                let t = Instant::now();
                let stream = connect(plan, addr, settings.connect_timeout, req, url).await?;
                attempt.connect = Some(t.elapsed());
                Conn::new(stream, Instant::now())
            }
        };
        if attempt.connect.is_none() {
            attempt.connect = Some(Duration::ZERO);
        }
        conn.requests += 1;
        let t = Instant::now();
        let sent = timeout_io(
            settings.send_timeout,
            write_two(&mut conn.stream, head, body),
        )
        .await;
        match sent {
            Ok(()) => {}
            Err(_) if reused => continue,
            Err(e) => {
                let f = io_failure(&e);
                req.log_upstream(
                    Level::Error,
                    &format!(
                        "{} while sending request to upstream",
                        describe(&e, "writev()")
                    ),
                    url,
                );
                return Err(f);
            }
        }
        let mut ubuf = {
            let mut w = req.worker().upstreams.borrow_mut();
            std::mem::take(&mut w.buffer)
        };
        ubuf.clear();
        match read_head(
            &mut conn.stream,
            &mut ubuf,
            settings.buffer_size,
            settings.read_timeout,
            plan.head_request,
        )
        .await
        {
            Ok(h) => {
                attempt.header = Some(t.elapsed());
                return Ok((conn, h, ubuf));
            }
            Err(HeadFailure::Closed) if reused => continue,
            Err(HeadFailure::Closed) => {
                req.log_upstream(
                    Level::Error,
                    "upstream prematurely closed connection while reading response header from upstream",
                    url,
                );
                return Err(Failure::Error);
            }
            Err(HeadFailure::Io(e)) if reused && e.kind() != std::io::ErrorKind::TimedOut => {
                continue
            }
            Err(HeadFailure::Io(e)) => {
                let f = io_failure(&e);
                let what = if f == Failure::Timeout {
                    "upstream timed out (110: Connection timed out)".to_string()
                } else {
                    describe(&e, "recv()")
                };
                req.log_upstream(
                    Level::Error,
                    &format!("{what} while reading response header from upstream"),
                    url,
                );
                return Err(f);
            }
            Err(HeadFailure::Invalid(e)) => {
                req.log_upstream(
                    Level::Error,
                    &format!("{e} while reading response header from upstream"),
                    url,
                );
                return Err(Failure::InvalidHeader);
            }
        }
    }
    Err(Failure::Error)
}

async fn connect(
    plan: &Plan,
    addr: std::net::SocketAddr,
    timeout: Duration,
    req: &Request<'_>,
    url: &str,
) -> Result<Stream, Failure> {
    let deadline = tokio::time::Instant::now() + timeout;
    match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            match plan.settings.tls.as_deref().filter(|_| plan.https) {
                Some(tls) => handshake(plan, tls, s, addr, deadline, req, url).await,
                None => Ok(Stream::Plain(s)),
            }
        }
        Ok(Err(e)) => {
            req.log_upstream(
                Level::Error,
                &format!(
                    "connect() failed {} while connecting to upstream",
                    crate::log::os_error(&e)
                ),
                url,
            );
            Err(Failure::Error)
        }
        Err(_) => {
            req.log_upstream(
                Level::Error,
                "upstream timed out (110: Connection timed out) while connecting to upstream",
                url,
            );
            Err(Failure::Timeout)
        }
    }
}

/// The TLS handshake of `proxy_pass https://` on a new connection, within what is left of
/// proxy_connect_timeout; a failure counts as `error` (or `timeout`) for proxy_next_upstream.
async fn handshake(
    plan: &Plan,
    tls: &portcullis_proxy::UpstreamTls,
    tcp: TcpStream,
    addr: std::net::SocketAddr,
    deadline: tokio::time::Instant,
    req: &Request<'_>,
    url: &str,
) -> Result<Stream, Failure> {
    match tls
        .connect(tcp, plan.upstream.name(), addr.ip(), deadline)
        .await
    {
        Ok(stream) => Ok(stream),
        Err(e) => {
            req.log_upstream(
                Level::Error,
                &format!("{e} while SSL handshaking to upstream"),
                url,
            );
            Err(match e {
                portcullis_proxy::HandshakeError::TimedOut => Failure::Timeout,
                portcullis_proxy::HandshakeError::Failed(_) => Failure::Error,
            })
        }
    }
}

fn io_failure(e: &std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::TimedOut {
        Failure::Timeout
    } else {
        Failure::Error
    }
}

fn describe(e: &std::io::Error, call: &str) -> String {
    if e.kind() == std::io::ErrorKind::TimedOut {
        "upstream timed out (110: Connection timed out)".to_string()
    } else {
        format!("{call} failed {}", crate::log::os_error(e))
    }
}

async fn timeout_io<T>(
    t: Duration,
    f: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    tokio::time::timeout(t, f)
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
}

/// Writes `a` then `b`, vectored.
async fn write_two<W: AsyncWrite + Unpin>(w: &mut W, a: &[u8], b: &[u8]) -> std::io::Result<()> {
    let total = a.len() + b.len();
    let mut written = 0;
    while written < total {
        let h = &a[written.min(a.len())..];
        let t = &b[written.saturating_sub(a.len())..];
        let n = w
            .write_vectored(&[IoSlice::new(h), IoSlice::new(t)])
            .await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        written += n;
    }
    Ok(())
}

enum HeadFailure {
    /// EOF before any byte of a response.
    Closed,
    Io(std::io::Error),
    Invalid(UpstreamHeadError),
}

/// Reads the response head, skipping interim 1xx responses other than 101.
async fn read_head<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
    limit: usize,
    timeout: Duration,
    _head_request: bool,
) -> Result<ResponseHead, HeadFailure> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut got_any = false;
    loop {
        match parse_response_head(buf, limit) {
            Ok(Some(h)) if (100..200).contains(&h.status()) && h.status() != 101 => continue,
            Ok(Some(h)) => return Ok(h),
            Ok(None) => {}
            Err(e) => return Err(HeadFailure::Invalid(e)),
        }
        buf.reserve(limit.saturating_sub(buf.len()).max(1024));
        match tokio::time::timeout_at(deadline, r.read_buf(buf)).await {
            Ok(Ok(0)) if !got_any => return Err(HeadFailure::Closed),
            Ok(Ok(0)) => {
                return Err(HeadFailure::Invalid(UpstreamHeadError::NoValidHeader));
            }
            Ok(Ok(_)) => got_any = true,
            Ok(Err(e)) => return Err(HeadFailure::Io(e)),
            Err(_) => return Err(HeadFailure::Io(std::io::ErrorKind::TimedOut.into())),
        }
    }
}

struct Forwarded {
    sent: u64,
    body: u64,
    keep_alive: bool,
    /// The upstream response was read to its end: the connection may be reused.
    upstream_done: bool,
}

/// Writes the response head for the client and streams the body.
#[allow(clippy::too_many_arguments)]
async fn forward<S: AsyncWrite + Unpin>(
    client: &mut S,
    out: &mut BytesMut,
    req: &Request<'_>,
    plan: &Plan,
    head: &ResponseHead,
    mut ubuf: BytesMut,
    conn: &mut Conn<Stream>,
    mut keep_alive: bool,
    send_timeout: Duration,
    url: &str,
) -> Forwarded {
    let status = head.status();
    let no_body = plan.head_request || status == 204 || status == 304 || status < 200;
    let framing = if no_body {
        Framing::Length(0)
    } else {
        head.framing()
    };
    let http11_client = req.is_http11();
    let rechunk = matches!(framing, Framing::Chunked | Framing::UntilClose) && http11_client;
    if matches!(framing, Framing::UntilClose | Framing::Chunked) && !http11_client {
        keep_alive = false;
    }
    out.clear();
    req.write_proxied_head(out, plan, head, rechunk, keep_alive);
    let head_len = out.len() as u64;
    let mut fw = Forwarded {
        sent: 0,
        body: 0,
        keep_alive,
        upstream_done: false,
    };
    let read_timeout = plan.settings.read_timeout;
    match framing {
        Framing::Length(n) => {
            let mut left = n;
            let first = ubuf.split_to(left.min(ubuf.len() as u64) as usize).freeze();
            left -= first.len() as u64;
            let first_len = first.len() as u64;
            if timeout_io(send_timeout, write_two(client, out, &first))
                .await
                .is_err()
            {
                fw.keep_alive = false;
                out.clear();
                return_buffer(req, ubuf);
                return fw;
            }
            out.clear();
            fw.sent = head_len + first_len;
            fw.body = first_len;
            while left > 0 {
                ubuf.clear();
                ubuf.reserve(READ_CHUNK);
                match tokio::time::timeout(read_timeout, conn.stream.read_buf(&mut ubuf)).await {
                    Ok(Ok(k)) if k > 0 => {}
                    other => {
                        log_body_failure(req, url, other.map_err(|_| ()).ok());
                        fw.keep_alive = false;
                        return_buffer(req, ubuf);
                        return fw;
                    }
                }
                let take = left.min(ubuf.len() as u64) as usize;
                if timeout_io(send_timeout, client.write_all(&ubuf[..take]))
                    .await
                    .is_err()
                {
                    fw.keep_alive = false;
                    return_buffer(req, ubuf);
                    return fw;
                }
                let _ = ubuf.split_to(take);
                left -= take as u64;
                fw.sent += take as u64;
                fw.body += take as u64;
            }
            // Bytes past the announced length mean the upstream cannot be trusted again.
            fw.upstream_done = ubuf.is_empty();
        }
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            let mut pending = BytesMut::new();
            pending.put_slice(out);
            out.clear();
            fw.sent = head_len;
            loop {
                loop {
                    match decoder.decode(&mut ubuf) {
                        Ok(Chunk::Data(d)) => {
                            if rechunk {
                                let (h, len) = chunk_header(d.len());
                                pending.put_slice(&h[..len]);
                                pending.put_slice(&d);
                                pending.put_slice(b"\r\n");
                            } else {
                                pending.put_slice(&d);
                            }
                            fw.body += d.len() as u64;
                        }
                        Ok(Chunk::Done) => {
                            if rechunk {
                                pending.put_slice(LAST_CHUNK);
                            }
                            fw.upstream_done = ubuf.is_empty();
                            break;
                        }
                        Ok(Chunk::NeedMore) => break,
                        Err(_) => {
                            req.log_upstream(
                                Level::Error,
                                "upstream sent invalid chunked response while reading upstream",
                                url,
                            );
                            let _ = timeout_io(send_timeout, client.write_all(&pending)).await;
                            fw.keep_alive = false;
                            return_buffer(req, ubuf);
                            return fw;
                        }
                    }
                }
                if !pending.is_empty() {
                    if timeout_io(send_timeout, client.write_all(&pending))
                        .await
                        .is_err()
                    {
                        fw.keep_alive = false;
                        return_buffer(req, ubuf);
                        return fw;
                    }
                    fw.sent += pending.len() as u64;
                    pending.clear();
                }
                if decoder.is_done() {
                    break;
                }
                ubuf.reserve(READ_CHUNK);
                match tokio::time::timeout(read_timeout, conn.stream.read_buf(&mut ubuf)).await {
                    Ok(Ok(k)) if k > 0 => {}
                    other => {
                        log_body_failure(req, url, other.map_err(|_| ()).ok());
                        fw.keep_alive = false;
                        return_buffer(req, ubuf);
                        return fw;
                    }
                }
            }
        }
        Framing::UntilClose => {
            let mut pending = BytesMut::new();
            pending.put_slice(out);
            out.clear();
            fw.sent = head_len;
            let mut eof = false;
            loop {
                if !ubuf.is_empty() {
                    if rechunk {
                        let (h, len) = chunk_header(ubuf.len());
                        pending.put_slice(&h[..len]);
                        pending.put_slice(&ubuf);
                        pending.put_slice(b"\r\n");
                    } else {
                        pending.put_slice(&ubuf);
                    }
                    fw.body += ubuf.len() as u64;
                    ubuf.clear();
                }
                if eof && rechunk {
                    pending.put_slice(LAST_CHUNK);
                }
                if !pending.is_empty() {
                    if timeout_io(send_timeout, client.write_all(&pending))
                        .await
                        .is_err()
                    {
                        fw.keep_alive = false;
                        return_buffer(req, ubuf);
                        return fw;
                    }
                    fw.sent += pending.len() as u64;
                    pending.clear();
                }
                if eof {
                    break;
                }
                ubuf.reserve(READ_CHUNK);
                match tokio::time::timeout(read_timeout, conn.stream.read_buf(&mut ubuf)).await {
                    Ok(Ok(0)) => eof = true,
                    Ok(Ok(_)) => {}
                    other => {
                        log_body_failure(req, url, other.map_err(|_| ()).ok());
                        fw.keep_alive = false;
                        return_buffer(req, ubuf);
                        return fw;
                    }
                }
            }
        }
    }
    return_buffer(req, ubuf);
    fw
}

/// Logs why reading the body stopped early; `Some(Ok(0))` is a close, `None` a timeout.
fn log_body_failure(req: &Request<'_>, url: &str, read: Option<std::io::Result<usize>>) {
    let what = match read {
        None => "upstream timed out (110: Connection timed out) while reading upstream".to_string(),
        Some(Ok(_)) => "upstream prematurely closed connection while reading upstream".to_string(),
        Some(Err(e)) => format!(
            "recv() failed {} while reading upstream",
            crate::log::os_error(&e)
        ),
    };
    req.log_upstream(Level::Error, &what, url);
}

/// Gives the upstream read buffer back to the worker for the next exchange.
fn return_buffer(req: &Request<'_>, mut buf: BytesMut) {
    buf.clear();
    let mut w = req.worker().upstreams.borrow_mut();
    if buf.capacity() > w.buffer.capacity() {
        w.buffer = buf;
    }
}
