//! One proxied request: choose a peer, get a connection, send the request, forward the
//! response. Failures before anything reached the client become a status (502, 504) that the
//! caller sends through error_page; after that, the client connection is closed. A client
//! that goes away before the response is noticed at once and ends the exchange (499).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use portcullis_http::{
    chunk_header, parse_response_head, BodyKind, Chunk, ChunkedDecoder, Framing, ResponseHead,
    UpstreamHeadError, LAST_CHUNK,
};
use portcullis_proxy::upstream::{Key, KeyKind, Outcome, PeerId};
use portcullis_proxy::{Conn, MaybeTls, PeerAddr, Stream, Timer};

use super::Protocol;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::cache::fill::Fill;
use super::cache::fill::Slice;
use super::cache::store::Store;
use super::cache::{Ask, Cut, Entry, Found, Job, Status as CacheStatus};
use super::downstream::{send_two, timeout_io, Downstream};
use super::encoded::Encoded;
use super::filtered::Filtered;
use super::settings::next;
use super::{Attempt, Plan};
use crate::encode::{Encode, Outgoing};
use crate::request::Request;
use crate::Level;

/// Bytes read from the upstream at least per call once the head is in.
pub(super) const READ_CHUNK: usize = 16 * 1024;

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
        /// The upstream's `WWW-Authenticate` of an intercepted 401, which nginx keeps on
        /// the error page that answers it.
        challenge: Option<Vec<u8>>,
    },
    /// The client closed its connection before the response began: nothing can be sent,
    /// and the request is logged with nginx's 499.
    ClientClosed { attempts: Vec<Attempt> },
    /// The upstream's `X-Accel-Redirect`: the request goes on at this URI (or `@named`
    /// location), with the fields of the upstream's response nginx keeps for it.
    Redirect {
        uri: Vec<u8>,
        fields: Vec<(Vec<u8>, Vec<u8>)>,
        attempts: Vec<Attempt>,
    },
}

/// The fields of an upstream's response that nginx keeps on the one an `X-Accel-Redirect`
/// leads to.
const KEPT_ON_REDIRECT: &[&str] = &[
    "content-type",
    "set-cookie",
    "content-disposition",
    "cache-control",
    "expires",
];

/// nginx's status for a request whose client went away before the response.
pub(crate) const CLIENT_CLOSED: u16 = 499;

/// The request body the upstream gets.
pub(crate) enum ReqBody {
    None,
    /// Read whole before the exchange, so a retry can send it again.
    Whole(Bytes),
    /// Read from the client while it is sent (`proxy_request_buffering off`): sent once, so
    /// no other peer is tried after the request went out.
    Streamed(Streamed),
    /// An HTTP/2 client's DATA frames, relayed as they come while the response comes back
    /// (gRPC's streaming calls): sent once, as a streamed body.
    Http2(::h2::RecvStream),
}

/// How a streamed body is read from the client.
pub(crate) struct Streamed {
    pub kind: BodyKind,
    /// client_body_timeout, between two reads.
    pub timeout: Duration,
    /// client_max_body_size, for a chunked body (a length is checked before); 0: no limit.
    pub max: u64,
}

/// Whether a body of `kind` is all in `buf` already. nginx then handles it as buffered,
/// whatever `proxy_request_buffering` says: nothing is left to stream.
pub(crate) fn preread_whole(kind: BodyKind, buf: &BytesMut) -> bool {
    match kind {
        BodyKind::None => true,
        BodyKind::Length(n) => buf.len() as u64 >= n,
        BodyKind::Chunked => {
            let mut copy = buf.clone();
            let mut decoder = ChunkedDecoder::new();
            loop {
                match decoder.decode(&mut copy) {
                    Ok(Chunk::Data(_)) => {}
                    Ok(Chunk::Done) => return true,
                    Ok(Chunk::NeedMore) | Err(_) => return false,
                }
            }
        }
    }
}

/// Why an attempt failed, as `proxy_next_upstream` names it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    Error,
    Timeout,
    InvalidHeader,
    /// The client's body could not be read while it was sent: answered with this status,
    /// never retried.
    Client(u16),
}

/// A failed attempt: why, and whether the request was sent (after which nginx retries a
/// non-idempotent method only with `non_idempotent`).
struct Failed {
    why: Failure,
    request_sent: bool,
}

impl Failed {
    fn unsent(why: Failure) -> Failed {
        Failed {
            why,
            request_sent: false,
        }
    }
    fn sent(why: Failure) -> Failed {
        Failed {
            why,
            request_sent: true,
        }
    }
}

impl Failure {
    pub(super) fn bit(self) -> u16 {
        match self {
            Failure::Error => next::ERROR,
            Failure::Timeout => next::TIMEOUT,
            Failure::InvalidHeader => next::INVALID_HEADER,
            Failure::Client(_) => 0,
        }
    }
    pub(super) fn status(self) -> u16 {
        match self {
            Failure::Timeout => 504,
            Failure::Client(code) => code,
            _ => 502,
        }
    }
}

/// Runs the exchange for `plan` on behalf of `req`, its response sent to `down`.
pub(crate) async fn serve<D: Downstream>(
    down: &mut D,
    req: &Request<'_>,
    mut plan: Box<Plan>,
    body: ReqBody,
) -> Finish {
    let mut attempts = Vec::new();
    // The cache's conditions of a revalidation, for an application server's params.
    let mut conditions = None;
    req.set_upstream_ignores(plan.settings.cache.ignore);
    // The cache first: a fresh entry is the response.
    let mut cache = plan.cache.take();
    if let Some(job) = cache.as_mut() {
        let waited = Instant::now();
        let found = loop {
            match asking(req, |ask| job.lookup(ask)) {
                // nginx looks again every half second while another request fills it.
                Found::Wait if waited.elapsed() < job.settings().lock_timeout => {
                    let left = job.settings().lock_timeout.saturating_sub(waited.elapsed());
                    tokio::time::sleep(left.min(Duration::from_millis(500))).await;
                }
                Found::Wait => {
                    // Past proxy_cache_lock_timeout: asked, and not stored.
                    job.no_store = true;
                    break Found::Upstream;
                }
                found => break found,
            }
        };
        req.set_cache_status(job.status);
        match found {
            Found::Send(entry) => {
                return Box::pin(send_entry(down, req, &plan, &entry, job.client_head)).await;
            }
            Found::SendThenUpdate(entry) => {
                let sent = Box::pin(send_entry(down, req, &plan, &entry, job.client_head)).await;
                // The update runs once the stale answer went out, as nginx's background
                // subrequest, before the connection reads its next request.
                job.background = true;
                job.status = CacheStatus::Expired;
                job.stale = Some(entry);
                plan.cache = cache;
                let mut nowhere = super::Collect::head_only();
                let _ = Box::pin(serve(&mut nowhere, req, plan, ReqBody::None)).await;
                req.set_cache_status(CacheStatus::Stale);
                return sent;
            }
            Found::Wait | Found::Upstream => {}
        }
        if let Some(lines) = job.revalidation() {
            match plan.gateway {
                Some(_) => conditions = Some(lines),
                None => plan.head.extend_from_slice(&lines),
            }
        }
    }
    // `$request_body`: the client's body, when it was read whole.
    if let ReqBody::Whole(b) = &body {
        req.keep_request_body(b);
    }
    let body = match &plan.set_body {
        Some(b) => ReqBody::Whole(Bytes::copy_from_slice(b)),
        None => body,
    };
    // An application server's request, with params that may read the body just read.
    if let Some(g) = &plan.gateway {
        let fields = super::params::Fields {
            pass: plan.settings.pass_request_headers,
            cacheable: g.cacheable,
            conditions: conditions.as_deref(),
        };
        let length = match &body {
            ReqBody::Whole(b) => b.len(),
            _ => 0,
        };
        plan.head = match g.protocol {
            Protocol::FastCgi => g.params.fastcgi(req, fields, plan.keepalive),
            Protocol::Uwsgi {
                modifier1,
                modifier2,
            } => match g.params.uwsgi(req, fields, (modifier1, modifier2)) {
                Ok(head) => head,
                Err(why) => {
                    req.log(Level::Alert, &why);
                    return Finish::Status {
                        code: 500,
                        body_read: true,
                        attempts: Vec::new(),
                        challenge: None,
                    };
                }
            },
            Protocol::Scgi => g.params.scgi(req, fields, length),
        };
    }
    let mut head = Lent {
        buf: std::mem::take(&mut plan.head),
        req,
    };
    let fastcgi = plan.is_fastcgi();
    let gateway = plan.is_gateway();
    let length = match &body {
        // An application server's request carries its own lengths.
        _ if gateway => None,
        ReqBody::None | ReqBody::Http2(_) => None,
        ReqBody::Whole(b) => Some(b.len() as u64),
        ReqBody::Streamed(s) => match s.kind {
            BodyKind::Length(n) => Some(n),
            BodyKind::Chunked => {
                head.put_slice(b"Transfer-Encoding: chunked\r\n");
                None
            }
            BodyKind::None => Some(0),
        },
    };
    if let Some(n) = length {
        use std::io::Write as _;
        head.put_slice(b"Content-Length: ");
        let _ = write!((&mut *head).writer(), "{n}");
        head.put_slice(b"\r\n");
    }
    if !gateway {
        head.put_slice(b"\r\n");
    }
    let (whole, mut streamed) = match body {
        ReqBody::Whole(b) => (b, None),
        ReqBody::Streamed(s) => (Bytes::new(), Some(s)),
        // Only gRPC's exchange takes an HTTP/2 stream.
        ReqBody::None | ReqBody::Http2(_) => (Bytes::new(), None),
    };
    // The body as `STDIN` records, ended by an empty one even without a body.
    let whole = if fastcgi {
        super::fastcgi::stdin(&whole).freeze()
    } else {
        whole
    };
    let streams = streamed.is_some();
    let upstream = plan.upstream.clone();
    let worker = req.worker();
    let local = worker.upstreams.borrow_mut().local(&upstream);
    let mut tried = upstream.tried();
    let settings = plan.settings.clone();
    let start = req.start();
    // As nginx, a request tries each peer of the group at most once.
    let peers = u32::try_from(upstream.peers().len()).unwrap_or(u32::MAX);
    let max_tries = match settings.next_upstream_tries {
        0 => peers,
        n => n.min(peers),
    };
    let mut tries = 0u32;
    loop {
        tries += 1;
        let key = match upstream.key_kind() {
            KeyKind::None => Key::None,
            KeyKind::Hash(_) => Key::Bytes(&plan.hash_key),
            KeyKind::ClientAddr => Key::ClientAddr(req.client_ip()),
        };
        // The first attempt of a request without a body starts with it: one clock read less.
        // A body read whole first took its own time, which is not the upstream's.
        let bodiless = whole.is_empty() && !streams;
        let now = if tries == 1 && bodiless {
            start
        } else {
            Instant::now()
        };
        let selected = {
            let mut l = local.borrow_mut();
            upstream.select(&mut l.state, key, &mut tried, now)
        };
        let Ok(peer) = selected else {
            if let Some(finish) =
                Box::pin(serve_stale(down, req, &plan, &mut cache, next::ERROR)).await
            {
                return finish.with_attempts(attempts);
            }
            req.log_upstream(
                Level::Error,
                "no live upstreams while connecting to upstream",
                &Url::new(&plan, &head, upstream.name()),
            );
            attempts.push(Attempt {
                status: Some(502),
                ..Attempt::new(Arc::from(upstream.name()), None)
            });
            return Finish::Status {
                code: 502,
                body_read: true,
                attempts,
                challenge: None,
            };
        };
        let peer_ref = upstream.peer(peer);
        let url = Url::new(&plan, &head, &peer_ref.name);
        let attempt_start = now;
        let mut attempt = Attempt::new(peer_ref.name.clone(), Some((&upstream, peer)));
        let result = if let Some(s) = streamed.as_mut() {
            // A streamed body is read from the client during the attempt, which sees it close.
            // Only an HTTP/1 connection streams one.
            let Some(c) = down.connection() else {
                return Finish::Status {
                    code: 500,
                    body_read: false,
                    attempts,
                    challenge: None,
                };
            };
            let source = Some((c.stream, c.read, s, c.send_timeout));
            attempt_once(
                &plan,
                &local,
                peer,
                &peer_ref.addr,
                &head,
                &whole,
                source,
                req,
                url,
                now,
                &mut attempt,
            )
            .await
        } else {
            let attempted = attempt_once::<D::Io>(
                &plan,
                &local,
                peer,
                &peer_ref.addr,
                &head,
                &whole,
                None,
                req,
                url,
                now,
                &mut attempt,
            );
            if settings.ignore_client_abort {
                attempted.await
            } else {
                // The client is watched while the upstream is reached and answers, as nginx
                // watches it: one that goes away ends the attempt.
                tokio::select! {
                    biased;
                    r = attempted => r,
                    () = down.gone() => {
                        let end = Instant::now();
                        upstream.release(peer, Outcome::Ok, end);
                        req.log_upstream(
                            Level::Info,
                            "epoll_wait() reported that client prematurely closed connection, so upstream connection is closed too",
                            &url,
                        );
                        // `$upstream_status` shows no status for it, as in nginx.
                        attempt.status = None;
                        attempt.response = end - attempt_start;
                        attempts.push(attempt);
                        return Finish::ClientClosed { attempts };
                    }
                }
            }
        };
        let answered = match result {
            Ok(r) => r,
            Err(Failed { why, request_sent }) => {
                let end = Instant::now();
                attempt.response = end - attempt_start;
                upstream.release(peer, Outcome::Failed, end);
                attempt.status = Some(why.status());
                attempts.push(attempt);
                let once = request_sent && streams;
                if !once && may_retry(&plan, why.bit(), request_sent, tries, max_tries, start) {
                    continue;
                }
                if let Some(finish) =
                    Box::pin(serve_stale(down, req, &plan, &mut cache, why.bit())).await
                {
                    return finish.with_attempts(attempts);
                }
                return Finish::Status {
                    code: why.status(),
                    body_read: true,
                    attempts,
                    challenge: None,
                };
            }
        };
        let (answered, status) = kept_head(answered, req);
        attempt.status = Some(status);
        let bit = next::status_bit(status);
        if bit & settings.next_upstream != 0
            && !streams
            && may_retry(&plan, bit, true, tries, max_tries, start)
        {
            let failed = bit & next::FAILURE_STATUSES != 0;
            let end = Instant::now();
            attempt.response = end - attempt_start;
            upstream.release(
                peer,
                if failed { Outcome::Failed } else { Outcome::Ok },
                end,
            );
            attempts.push(attempt);
            put_back(&local, peer, None::<Conn<Stream>>, end);
            continue;
        }
        // Boxed: a request's future then holds none of the answer's locals while it waits
        // for the upstream.
        let peer = (&local, peer, url);
        let timing = (attempt, attempt_start, attempts);
        let answering = || answer(down, req, &plan, &mut cache, peer, timing, answered);
        return crate::boxed::boxed(answering).await;
    }
}

/// Keeps the answer's head for `$upstream_http_*` and gives the answer back with its status.
/// Taken and given back by value: a borrow of it in the caller's future would keep room for
/// it there across the awaits that follow.
fn kept_head(answered: Attempted, req: &Request<'_>) -> (Attempted, u16) {
    req.keep_upstream_head(&answered.1);
    let status = answered.1.status();
    (answered, status)
}

/// The answer of the attempt that got one, past the retries: a tunnel, a cache entry, an
/// error page's or another location's status, or the response forwarded.
async fn answer<D: Downstream>(
    down: &mut D,
    req: &Request<'_>,
    plan: &Plan,
    cache: &mut Option<Box<Job>>,
    (local, peer, url): (
        &std::rc::Rc<std::cell::RefCell<super::Local>>,
        PeerId,
        Url<'_>,
    ),
    (mut attempt, attempt_start, mut attempts): (Attempt, Instant, Vec<Attempt>),
    (mut conn, resp_head, ubuf, decoder): Attempted,
) -> Finish {
    let settings = &plan.settings;
    let upstream = &plan.upstream;
    let status = resp_head.status();
    let bit = next::status_bit(status);
    if status == 101 && plan.upgrade {
        req.write_proxied_head(down.begin(Framing::Length(0)), plan, &resp_head);
        if let Some(c) = down.connection() {
            let head_len = c.out.len() as u64;
            // Boxed, as the connect: an upgrade is rare and its future large.
            let sent = Box::pin(tunnel(
                c.stream,
                &mut conn.stream,
                c.out,
                c.read,
                ubuf,
                settings.read_timeout,
                c.send_timeout,
            ))
            .await;
            let end = Instant::now();
            attempt.response = end - attempt_start;
            attempts.push(attempt);
            upstream.release(peer, Outcome::Ok, end);
            // `$body_bytes_sent`: what the tunnel carried to the client after the head.
            return Finish::Sent {
                status,
                sent,
                body: sent.saturating_sub(head_len),
                keep_alive: false,
                attempts,
            };
        }
    }
    let failed = bit & next::FAILURE_STATUSES & settings.next_upstream != 0;
    let outcome = if failed { Outcome::Failed } else { Outcome::Ok };
    let mut store = None;
    if let Some(job) = cache.as_mut() {
        let stale = bit != 0 && job.stale_for(bit);
        let revalidated = (status == 304 && job.revalidation().is_some())
            .then(|| job.revalidated(&resp_head))
            .flatten();
        if stale || revalidated.is_some() {
            let end = Instant::now();
            attempt.response = end - attempt_start;
            attempts.push(attempt);
            upstream.release(peer, outcome, end);
            // The upstream's body, if any, is not read: its connection is not kept.
            let entry = match revalidated {
                Some(e) => e,
                None => {
                    job.status = super::cache::Status::Stale;
                    match job.stale.take() {
                        Some(e) => e,
                        None => unreachable!("stale_for found a stale entry"),
                    }
                }
            };
            req.set_cache_status(job.status);
            return Box::pin(send_entry(down, req, plan, &entry, job.client_head))
                .await
                .with_attempts(attempts);
        }
    }
    // A stale entry answers before an error page would (nginx tests the cache first).
    if settings.intercept_errors && status >= 300 && req.has_error_page(status) {
        let end = Instant::now();
        attempt.response = end - attempt_start;
        upstream.release(peer, Outcome::Ok, end);
        attempts.push(attempt);
        return Finish::Status {
            code: status,
            body_read: true,
            attempts,
            challenge: (status == 401)
                .then(|| resp_head.header("www-authenticate").map(<[u8]>::to_vec))
                .flatten(),
        };
    }
    // `X-Accel-Redirect`: the response is another location's; this one's body is not
    // read, and its connection not kept.
    if let Some(uri) = resp_head
        .header("x-accel-redirect")
        .filter(|_| settings.cache.ignore & super::cache::ignore::X_ACCEL_REDIRECT == 0)
    {
        let end = Instant::now();
        attempt.response = end - attempt_start;
        upstream.release(peer, outcome, end);
        attempts.push(attempt);
        let fields = resp_head
            .fields()
            .filter(|f| {
                KEPT_ON_REDIRECT
                    .iter()
                    .any(|k| f.name.eq_ignore_ascii_case(k.as_bytes()))
            })
            .map(|f| (f.name.to_vec(), f.value.to_vec()))
            .collect();
        return Finish::Redirect {
            uri: uri.to_vec(),
            fields,
            attempts,
        };
    }
    if let Some(job) = cache.as_mut() {
        store = asking(req, |ask| job.store(ask, &resp_head, plan.head_request));
        if store.is_some() {
            req.set_cache_ranges();
        }
    }
    // A response the cache keeps is one the client's conditions apply to.
    let shown = match store
        .as_ref()
        .map(|_| super::cache::not_modified(&req.conditions(), &resp_head))
    {
        Some(Err(code)) => {
            attempts.push(attempt);
            return Finish::Status {
                code,
                body_read: true,
                attempts,
                challenge: None,
            };
        }
        Some(Ok(shown)) => shown,
        None => None,
    };
    let head_only = cache
        .as_ref()
        .is_some_and(|j| j.client_head || j.background)
        || shown.is_some();
    let no_body = plan.head_request || status == 204 || status == 304 || status < 200;
    let framing = if no_body {
        Framing::Length(0)
    } else {
        resp_head.framing()
    };
    // A response the cache stores whole may be sent as one range of it, and so may any
    // with proxy_force_ranges.
    // A HEAD's answer has no body but the length it would have.
    let whole = if plan.head_request {
        resp_head.framing()
    } else {
        framing
    };
    let cut = match whole {
        Framing::Length(n) if (store.is_some() || settings.force_ranges) && shown.is_none() => {
            cut(req, plan, &resp_head, n, false)
        }
        _ => Cut::Whole,
    };
    let (shown, slice) = match cut {
        Cut::Part {
            head,
            start,
            len,
            range,
        } => {
            req.set_range_field(range);
            (Some(head), Some((start, len)))
        }
        Cut::Unsatisfiable => {
            if let Framing::Length(n) = framing {
                req.set_range_field(crate::files::unsatisfied_range(n).into_bytes());
            }
            attempts.push(attempt);
            return Finish::Status {
                code: 416,
                body_read: true,
                attempts,
                challenge: None,
            };
        }
        Cut::Whole | Cut::Parts { .. } => (shown, None),
    };
    let fill = (store.is_some() || head_only || slice.is_some()).then_some(Cached {
        store,
        head_only,
        slice,
    });
    let shown = shown.as_ref().unwrap_or(&resp_head);
    let framed = (framing, no_body || head_only);
    let (forwarded, reusable) = match decoder {
        Some(decoder) => {
            let mut source = Records {
                conn: &mut conn,
                decoder,
                req,
                url,
            };
            let f = forward(down, req, plan, shown, framed, ubuf, &mut source, url, fill);
            let forwarded = f.await;
            // The response's end was read, and nothing after it.
            let whole = source.decoder.is_whole();
            (forwarded, whole && plan.keepalive)
        }
        None => {
            let f = forward(down, req, plan, shown, framed, ubuf, &mut conn, url, fill);
            let forwarded = f.await;
            let reusable = forwarded.upstream_done && plan.keepalive;
            (forwarded, reusable && !resp_head.connection_close())
        }
    };
    let end = Instant::now();
    attempt.response = end - attempt_start;
    attempt.length = forwarded.length;
    attempt.bytes_received += forwarded.received;
    attempts.push(attempt);
    upstream.release(peer, outcome, end);
    put_back(local, peer, reusable.then_some(conn), end);
    Finish::Sent {
        status,
        sent: forwarded.sent,
        body: forwarded.body,
        keep_alive: forwarded.keep_alive,
        attempts,
    }
}

/// Whether another peer may be tried after a failure of kind `bit`; `sent` says whether the
/// request reached the failed peer.
pub(super) fn may_retry(
    plan: &Plan,
    bit: u16,
    sent: bool,
    tries: u32,
    max_tries: u32,
    start: Instant,
) -> bool {
    let s = &plan.settings;
    s.next_upstream & bit != 0
        && (plan.idempotent || !sent || s.next_upstream & next::NON_IDEMPOTENT != 0)
        && tries < max_tries
        && (s.next_upstream_timeout.is_zero() || start.elapsed() < s.next_upstream_timeout)
}

fn put_back(
    local: &std::rc::Rc<std::cell::RefCell<super::Local>>,
    peer: PeerId,
    conn: Option<Conn<Stream>>,
    now: Instant,
) {
    let Some(conn) = conn else { return };
    let mut l = local.borrow_mut();
    if let Some(pool) = l.pool.as_mut() {
        pool.put(peer.0, conn, now);
    }
}

/// `http://peer/uri` for the error log, formatted only when a line is written.
#[derive(Clone, Copy)]
pub(super) struct Url<'a> {
    https: bool,
    /// An application server's protocol (or gRPC's): its name, and no URI, in the log.
    gateway: Option<&'static str>,
    peer: &'a str,
    uri: &'a [u8],
}

impl<'a> Url<'a> {
    /// The URL of `plan` on `peer`; `head` is the request head sent, which holds the URI.
    pub(super) fn new(plan: &Plan, head: &'a [u8], peer: &'a str) -> Url<'a> {
        Url {
            https: plan.https,
            gateway: match (&plan.gateway, &plan.grpc) {
                (Some(g), _) => Some(g.protocol.scheme()),
                (None, Some(_)) if plan.https => Some("grpcs"),
                (None, Some(_)) => Some("grpc"),
                (None, None) => None,
            },
            peer,
            uri: head.get(plan.uri.clone()).unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for Url<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = match (self.gateway, self.https) {
            (Some(p), _) => p,
            (None, true) => "https",
            (None, false) => "http",
        };
        // A unix-domain socket's path ends with a `:` before the URI, as nginx writes it.
        let colon = if self.peer.starts_with("unix:") {
            ":"
        } else {
            ""
        };
        write!(
            f,
            "{scheme}://{}{colon}{}",
            self.peer,
            String::from_utf8_lossy(self.uri)
        )
    }
}

/// Reads the request body whole (bounded by `max`, client_max_body_size), before the
/// exchange, so a retry on another peer can send it again, with the number of bytes it took
/// on the connection (a chunked body's framing too). `Err` is the status to answer.
pub(crate) async fn collect_body<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    kind: BodyKind,
    timeout: Duration,
    max: u64,
) -> Result<(Bytes, u64), u16> {
    let mut body = BytesMut::new();
    let mut framed = 0;
    match kind {
        BodyKind::None => {}
        BodyKind::Length(n) => {
            while (body.len() as u64) < n {
                if buf.is_empty() {
                    read_more(stream, buf, timeout).await?;
                }
                let take = (n - body.len() as u64).min(buf.len() as u64) as usize;
                body.put_slice(&buf.split_to(take));
            }
        }
        BodyKind::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            loop {
                let before = buf.len();
                let chunk = decoder.decode(buf);
                framed += (before - buf.len()) as u64;
                match chunk {
                    Ok(Chunk::Data(d)) => {
                        if max != 0 && (body.len() + d.len()) as u64 > max {
                            return Err(413);
                        }
                        body.put_slice(&d);
                    }
                    Ok(Chunk::Done) => break,
                    Ok(Chunk::NeedMore) => read_more(stream, buf, timeout).await?,
                    Err(_) => return Err(400),
                }
            }
        }
    }
    if let BodyKind::Length(n) = kind {
        framed = n;
    }
    Ok((body.freeze(), framed))
}

/// Why a streamed body stopped.
enum BodyError {
    /// The client's side: the status to answer.
    Client(u16),
    Upstream(std::io::Error),
}

/// Sends the client's body to the upstream as it arrives: a length as is, a chunked body
/// re-chunked (chunk extensions and trailers dropped, as nginx does).
async fn send_body<C: AsyncRead + Unpin, U: AsyncWrite + Unpin>(
    client: &mut C,
    buf: &mut BytesMut,
    upstream: &mut U,
    body: &Streamed,
    send_timeout: Duration,
    sent: &mut u64,
) -> Result<(), BodyError> {
    match body.kind {
        BodyKind::None => Ok(()),
        BodyKind::Length(n) => {
            let mut left = n;
            while left > 0 {
                if buf.is_empty() {
                    read_body(client, buf, body.timeout).await?;
                }
                let take = left.min(buf.len() as u64) as usize;
                send_up(upstream, &buf[..take], send_timeout).await?;
                *sent += take as u64;
                let _ = buf.split_to(take);
                left -= take as u64;
            }
            Ok(())
        }
        BodyKind::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            let mut total = 0u64;
            let mut pending = BytesMut::new();
            loop {
                match decoder.decode(buf) {
                    Ok(Chunk::Data(d)) => {
                        total += d.len() as u64;
                        if body.max != 0 && total > body.max {
                            return Err(BodyError::Client(413));
                        }
                        let (h, len) = chunk_header(d.len());
                        pending.put_slice(&h[..len]);
                        pending.put_slice(&d);
                        pending.put_slice(b"\r\n");
                    }
                    Ok(Chunk::Done) => {
                        pending.put_slice(LAST_CHUNK);
                        send_up(upstream, &pending, send_timeout).await?;
                        *sent += pending.len() as u64;
                        return Ok(());
                    }
                    Ok(Chunk::NeedMore) => {
                        // What was decoded goes out before waiting for the client again.
                        if !pending.is_empty() {
                            send_up(upstream, &pending, send_timeout).await?;
                            *sent += pending.len() as u64;
                            pending.clear();
                        }
                        read_body(client, buf, body.timeout).await?;
                    }
                    Err(_) => return Err(BodyError::Client(400)),
                }
            }
        }
    }
}

async fn send_up<U: AsyncWrite + Unpin>(
    upstream: &mut U,
    bytes: &[u8],
    timeout: Duration,
) -> Result<(), BodyError> {
    timeout_io(timeout, upstream.write_all(bytes))
        .await
        .map_err(BodyError::Upstream)
}

/// Reads more of a streamed body: a close is nginx's 400, a timeout its 408.
async fn read_body<C: AsyncRead + Unpin>(
    client: &mut C,
    buf: &mut BytesMut,
    timeout: Duration,
) -> Result<(), BodyError> {
    read_more(client, buf, timeout)
        .await
        .map_err(BodyError::Client)
}

/// Reads more of a body read whole: `Err` is the status nginx ends the request with, 408
/// when the client sends nothing for `t` (closed without a response), 400 when it closes.
async fn read_more<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    t: Duration,
) -> Result<(), u16> {
    buf.reserve(READ_CHUNK);
    match tokio::time::timeout(t, stream.read_buf(buf)).await {
        Ok(Ok(n)) if n > 0 => Ok(()),
        Err(_) => Err(408),
        Ok(_) => Err(400),
    }
}

/// A connection, the response head, the body bytes read with it, and for FastCGI what was
/// read of its records.
type Attempted = (
    Conn<Stream>,
    ResponseHead,
    BytesMut,
    Option<super::fastcgi::Decoder>,
);

/// The client's connection, its read buffer, and how to read the body from them.
type BodySource<'a, S> = (&'a mut S, &'a mut BytesMut, &'a mut Streamed, Duration);

/// One attempt on `peer`: a pooled connection (retried once on a fresh one if it turns out
/// closed before any response byte) or a new one, the request, the response head. With a
/// streamed body, the body follows the head as the client sends it.
#[allow(clippy::too_many_arguments)]
async fn attempt_once<S: AsyncRead + Unpin>(
    plan: &Plan,
    local: &std::rc::Rc<std::cell::RefCell<super::Local>>,
    peer: PeerId,
    addr: &PeerAddr,
    head: &[u8],
    body: &Bytes,
    mut source: Option<BodySource<'_, S>>,
    req: &Request<'_>,
    url: Url<'_>,
    start: Instant,
    attempt: &mut Attempt,
) -> Result<Attempted, Failed> {
    let settings = &plan.settings;
    // A pooled connection is checked before use only when a failure could not be retried:
    // a streamed body is read once, so neither can its request be sent again.
    let once = source.is_some();
    let mut pooled = {
        let mut l = local.borrow_mut();
        l.pool
            .as_mut()
            // A kept FastCGI connection is checked too: what a server sent after its last
            // response must not be taken for the next one.
            .and_then(|p| p.take(peer.0, !plan.idempotent || once || plan.is_fastcgi(), start))
    };
    // At most twice: a pooled connection found closed is replaced by a fresh one, whose
    // failure is final.
    // When the request went out, for proxy_read_timeout: the attempt's start, the moment a
    // new connection was made, or the end of a body; a head alone goes out at once.
    let mut sent_at = start;
    loop {
        let reused = pooled.is_some();
        let mut conn = match pooled.take() {
            Some(c) => {
                attempt.connect = Some(Duration::ZERO);
                c
            }
            None => {
                // Boxed: the connect and TLS handshake future is the largest of the exchange,
                // and a request on a pooled connection should not carry its space.
                let stream = Box::pin(connect(plan, addr, settings.connect_timeout, req, url))
                    .await
                    .map_err(Failed::unsent)?;
                let connected = Instant::now();
                attempt.connect = Some(connected - start);
                sent_at = connected;
                Conn::new(stream, connected)
            }
        };
        conn.requests += 1;
        // A pooled connection found closed is not the attempt's: only the last try counts.
        attempt.bytes_sent = 0;
        attempt.bytes_received = 0;
        let sent = send_two(&mut conn.stream, head, body, settings.send_timeout).await;
        if sent.is_ok() {
            attempt.bytes_sent = (head.len() + body.len()) as u64;
        }
        let sent = match (sent, source.as_mut()) {
            (Ok(()), Some((client, read, streamed, send_timeout))) => {
                let up = &mut attempt.bytes_sent;
                let body = send_body(*client, read, &mut conn.stream, streamed, *send_timeout, up);
                match Box::pin(body).await {
                    Ok(()) => Ok(()),
                    Err(BodyError::Client(code)) => {
                        return Err(Failed::sent(Failure::Client(code)));
                    }
                    Err(BodyError::Upstream(e)) => Err(e),
                }
            }
            (Ok(()), None) => Ok(()),
            (Err(_), _) if reused => continue,
            (Err(e), _) => Err(e),
        };
        if let Err(e) = sent {
            req.log_upstream(
                Level::Error,
                &format!(
                    "{} while sending request to upstream",
                    describe(&e, "writev()")
                ),
                &url,
            );
            return Err(Failed::sent(io_failure(&e)));
        }
        // A body may take long to send; proxy_read_timeout counts from its end.
        if !body.is_empty() || source.is_some() {
            sent_at = Instant::now();
        }
        // A spare buffer of the worker's, taken once the answer starts to come (see
        // `read_head`); FastCGI, uwsgi and SCGI take it at once.
        let spare = || {
            let mut buf = req.worker().upstreams.borrow_mut().take_buffer();
            buf.clear();
            buf
        };
        let mut ubuf = BytesMut::new();
        let deadline = tokio::time::Instant::from_std(sent_at) + settings.read_timeout;
        let mut decoder = plan.is_fastcgi().then(super::fastcgi::Decoder::default);
        let read = match decoder.as_mut() {
            Some(d) => {
                ubuf = spare();
                let records = Records {
                    conn: &mut conn,
                    decoder: std::mem::take(d),
                    req,
                    url,
                };
                // Boxed: an HTTP upstream's attempt then makes no room for it while it waits.
                let (read, records) = Box::pin(read_cgi_head(
                    records,
                    &mut ubuf,
                    settings.buffer_size,
                    deadline,
                    &mut attempt.bytes_received,
                ))
                .await;
                *d = records;
                read
            }
            // uwsgi and SCGI: an HTTP or CGI head on the stream itself.
            None if plan.is_gateway() => {
                ubuf = spare();
                read_stream_head(
                    &mut conn,
                    &mut ubuf,
                    settings.buffer_size,
                    deadline,
                    &mut attempt.bytes_received,
                )
                .await
            }
            None => {
                read_head(
                    &mut conn.stream,
                    &mut conn.timer,
                    &mut ubuf,
                    spare,
                    settings.buffer_size,
                    deadline,
                    &mut attempt.bytes_received,
                )
                .await
            }
        };
        match read {
            Ok(h) => {
                // As nginx's $upstream_header_time, from the start of the attempt.
                attempt.header = Some(start.elapsed());
                return Ok((conn, h, ubuf, decoder));
            }
            Err(HeadFailure::Closed) if reused && !once => continue,
            Err(HeadFailure::Closed) => {
                req.log_upstream(
                    Level::Error,
                    "upstream prematurely closed connection while reading response header from upstream",
                    &url,
                );
                return Err(Failed::sent(Failure::Error));
            }
            Err(HeadFailure::Io(e))
                if reused && !once && e.kind() != std::io::ErrorKind::TimedOut =>
            {
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
                    &url,
                );
                return Err(Failed::sent(f));
            }
            Err(HeadFailure::Invalid(e)) => {
                req.log_upstream(
                    Level::Error,
                    &format!("{e} while reading response header from upstream"),
                    &url,
                );
                return Err(Failed::sent(Failure::InvalidHeader));
            }
            Err(HeadFailure::Cgi(e)) => {
                req.log_upstream(
                    Level::Error,
                    &format!("{e} while reading response header from upstream"),
                    &url,
                );
                return Err(Failed::sent(Failure::InvalidHeader));
            }
        }
    }
}

pub(super) async fn connect(
    plan: &Plan,
    addr: &PeerAddr,
    timeout: Duration,
    req: &Request<'_>,
    url: Url<'_>,
) -> Result<Stream, Failure> {
    let deadline = tokio::time::Instant::now() + timeout;
    let peer = addr;
    let addr = match addr {
        PeerAddr::Inet(a) => *a,
        PeerAddr::Unix(path) => {
            if plan.https {
                req.log_upstream(
                    Level::Error,
                    "SSL to a unix-domain socket is not supported while connecting to upstream",
                    &url,
                );
                return Err(Failure::Error);
            }
            let connected = tokio::time::timeout_at(deadline, UnixStream::connect(path)).await;
            return match connected {
                Ok(Ok(s)) => Ok(Stream::Unix(s)),
                // nginx names the socket: its connect() fails at once, not later.
                Ok(Err(e)) => Err(connect_failed(
                    &e,
                    &format!("connect() to {peer}"),
                    req,
                    url,
                )),
                Err(_) => Err(connect_timed_out(req, url)),
            };
        }
    };
    match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            match plan.settings.tls.as_deref().filter(|_| plan.https) {
                Some(tls) => handshake(plan, tls, s, addr, deadline, req, url).await,
                None => Ok(Stream::Tcp(MaybeTls::Plain(s.into()))),
            }
        }
        Ok(Err(e)) => Err(connect_failed(&e, "connect()", req, url)),
        Err(_) => Err(connect_timed_out(req, url)),
    }
}

/// A refused or failed connect(), logged as nginx logs it (`call`: how it names the call):
/// at `crit` unless the peer or the network said no.
fn connect_failed(e: &std::io::Error, call: &str, req: &Request<'_>, url: Url<'_>) -> Failure {
    let level = match e.raw_os_error() {
        Some(
            libc::ECONNREFUSED
            | libc::EAGAIN
            | libc::ECONNRESET
            | libc::ENETDOWN
            | libc::ENETUNREACH
            | libc::EHOSTDOWN
            | libc::EHOSTUNREACH,
        ) => Level::Error,
        _ => Level::Crit,
    };
    req.log_upstream(
        level,
        &format!(
            "{call} failed {} while connecting to upstream",
            crate::log::os_error(e)
        ),
        &url,
    );
    Failure::Error
}

/// A connect() that did not finish within proxy_connect_timeout, logged as nginx logs it.
fn connect_timed_out(req: &Request<'_>, url: Url<'_>) -> Failure {
    req.log_upstream(
        Level::Error,
        "upstream timed out (110: Connection timed out) while connecting to upstream",
        &url,
    );
    Failure::Timeout
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
    url: Url<'_>,
) -> Result<Stream, Failure> {
    let host = plan.ssl_name.as_deref().unwrap_or(plan.upstream.name());
    let cert = match &plan.client_cert {
        Some((cert, key)) => match tls.certificate(cert.clone(), key.clone()) {
            Ok(c) => Some(c),
            Err(e) => {
                req.log_upstream(
                    Level::Error,
                    &format!("{e} while connecting to upstream"),
                    &url,
                );
                return Err(Failure::Client(500));
            }
        },
        None => None,
    };
    match tls.connect(tcp, host, addr, cert.as_ref(), deadline).await {
        Ok(stream) => Ok(stream),
        Err(e) => {
            req.log_upstream(
                Level::Error,
                &format!("{e} while SSL handshaking to upstream"),
                &url,
            );
            Err(match e {
                portcullis_proxy::HandshakeError::TimedOut => Failure::Timeout,
                portcullis_proxy::HandshakeError::Failed(_) => Failure::Error,
            })
        }
    }
}

pub(super) fn io_failure(e: &std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::TimedOut {
        Failure::Timeout
    } else {
        Failure::Error
    }
}

pub(super) fn describe(e: &std::io::Error, call: &str) -> String {
    if e.kind() == std::io::ErrorKind::TimedOut {
        "upstream timed out (110: Connection timed out)".to_string()
    } else {
        format!("{call} failed {}", crate::log::os_error(e))
    }
}

enum HeadFailure {
    /// EOF before any byte of a response.
    Closed,
    Io(std::io::Error),
    Invalid(UpstreamHeadError),
    /// A FastCGI response nginx does not take: its words.
    Cgi(String),
}

/// Reads the response head, skipping interim 1xx responses other than 101, into `buf`:
/// `spare()` once the upstream starts to answer, grown to `limit` as needed. A request waiting
/// for a slow upstream holds no room for its answer, as nginx's does not.
async fn read_head(
    r: &mut Stream,
    timer: &mut Timer,
    buf: &mut BytesMut,
    spare: impl FnOnce() -> BytesMut,
    limit: usize,
    deadline: tokio::time::Instant,
    received: &mut u64,
) -> Result<ResponseHead, HeadFailure> {
    let mut got_any = false;
    let readable = std::future::poll_fn(|cx| r.poll_readable(cx));
    match timer.run_until(deadline, readable).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(HeadFailure::Io(e)),
        Err(_) => return Err(HeadFailure::Io(std::io::ErrorKind::TimedOut.into())),
    }
    *buf = spare();
    loop {
        match parse_response_head(buf, limit) {
            Ok(Some(h)) if (100..200).contains(&h.status()) && h.status() != 101 => continue,
            Ok(Some(h)) => return Ok(h),
            Ok(None) => {}
            Err(e) => return Err(HeadFailure::Invalid(e)),
        }
        buf.reserve(limit.saturating_sub(buf.len()).max(1024));
        match timer.run_until(deadline, r.read_buf(buf)).await {
            Ok(Ok(0)) if !got_any => return Err(HeadFailure::Closed),
            Ok(Ok(0)) => {
                return Err(HeadFailure::Invalid(UpstreamHeadError::NoValidHeader));
            }
            Ok(Ok(k)) => {
                got_any = true;
                *received += k as u64;
            }
            Ok(Err(e)) => return Err(HeadFailure::Io(e)),
            Err(_) => return Err(HeadFailure::Io(std::io::ErrorKind::TimedOut.into())),
        }
    }
}

/// The `STDOUT` of a FastCGI response read from its connection: the records' content, what
/// they say on `STDERR` logged, the end at `END_REQUEST`.
struct Records<'c, 'r> {
    conn: &'c mut Conn<Stream>,
    decoder: super::fastcgi::Decoder,
    req: &'c Request<'r>,
    url: Url<'c>,
}

impl Records<'_, '_> {
    /// Reads once from the connection and decodes what came into `out`: `Ok(n)` bytes read
    /// (0 at the connection's close), `Err` a record nginx does not take. `in_head`: `out`
    /// holds the start of the CGI head, which says when what the script wrote to stderr came.
    async fn read(
        &mut self,
        out: &mut BytesMut,
        timeout: Duration,
        in_head: bool,
    ) -> Option<std::io::Result<usize>> {
        let raw = self.decoder.input();
        raw.reserve(READ_CHUNK);
        let read = self
            .conn
            .timer
            .run(timeout, self.conn.stream.read_buf(raw))
            .await
            .ok()?;
        let n = match read {
            Ok(n) => n,
            Err(e) => return Some(Err(e)),
        };
        for event in self.decoder.decode(out) {
            match event {
                super::fastcgi::Event::Stderr { text, after } => {
                    let when = if in_head && super::fastcgi::head_end(&out[..after]).is_none() {
                        "reading response header from upstream"
                    } else {
                        "reading upstream"
                    };
                    self.req.log_upstream(
                        Level::Error,
                        &format!(
                            "FastCGI sent in stderr: \"{}\" while {when}",
                            String::from_utf8_lossy(text.trim_ascii_end())
                        ),
                        &self.url,
                    )
                }
                super::fastcgi::Event::Invalid(why) => {
                    return Some(Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        why,
                    )))
                }
            }
        }
        Some(Ok(n))
    }
}

impl Source for Records<'_, '_> {
    fn ended(&self) -> bool {
        self.decoder.ended
    }

    /// Body bytes: the `STDOUT` content of one read (none at all when it held other
    /// records), 0 once the response ended; what is returned is the bytes read, records
    /// and all, as nginx counts what the upstream sent.
    async fn read_more(
        &mut self,
        buf: &mut BytesMut,
        timeout: Duration,
    ) -> Option<std::io::Result<usize>> {
        if self.decoder.ended {
            return Some(Ok(0));
        }
        self.read(buf, timeout, false).await
    }
}

/// Reads a FastCGI response's head: `STDOUT` content up to the CGI head's empty line, made
/// an HTTP head; the body bytes after it stay in `buf`. The records go back with the answer.
async fn read_cgi_head(
    mut records: Records<'_, '_>,
    buf: &mut BytesMut,
    limit: usize,
    deadline: tokio::time::Instant,
    received: &mut u64,
) -> (Result<ResponseHead, HeadFailure>, super::fastcgi::Decoder) {
    let mut got_any = false;
    let result = loop {
        match taken_head(buf, limit, false) {
            // An interim response (`Status: 100`) is passed by, as the proxy's are.
            Some(Ok(h)) if (100..200).contains(&h.status()) && h.status() != 101 => continue,
            Some(head) => break head,
            None => {}
        }
        if records.decoder.ended {
            break Err(HeadFailure::Cgi(
                "upstream prematurely closed FastCGI stdout".to_owned(),
            ));
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match records.read(buf, left, true).await {
            None => break Err(HeadFailure::Io(std::io::ErrorKind::TimedOut.into())),
            Some(Ok(0)) if !got_any => break Err(HeadFailure::Closed),
            Some(Ok(0)) => {
                break Err(HeadFailure::Cgi(
                    "upstream prematurely closed FastCGI stdout".to_owned(),
                ))
            }
            Some(Ok(k)) => {
                got_any = true;
                *received += k as u64;
            }
            Some(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                break Err(HeadFailure::Cgi(e.to_string()))
            }
            Some(Err(e)) => break Err(HeadFailure::Io(e)),
        }
    };
    (result, records.decoder)
}

/// An application server's head, once `buf` holds it whole, taken out of `buf`: CGI fields
/// made an HTTP head, or (`http` allowed: uwsgi, SCGI) a status line and fields as they are;
/// an error once `buf` holds more than `limit` bytes without a whole head, or more with it.
fn taken_head(
    buf: &mut BytesMut,
    limit: usize,
    http: bool,
) -> Option<Result<ResponseHead, HeadFailure>> {
    let Some(end) = super::fastcgi::head_end(buf) else {
        return (buf.len() > limit).then_some(Err(HeadFailure::Invalid(UpstreamHeadError::TooBig)));
    };
    // The buffer size holds the head, whole.
    if end > limit {
        return Some(Err(HeadFailure::Invalid(UpstreamHeadError::TooBig)));
    }
    let raw = buf.split_to(end);
    let mut head = if http && raw.starts_with(b"HTTP/") {
        raw
    } else {
        match super::fastcgi::http_head(&raw) {
            Ok(h) => h,
            Err(e) => return Some(Err(HeadFailure::Cgi(e))),
        }
    };
    let size = head.len();
    Some(match parse_response_head(&mut head, size) {
        Ok(Some(h)) => Ok(h),
        Ok(None) => Err(HeadFailure::Cgi("upstream sent invalid header".to_owned())),
        Err(e) => Err(HeadFailure::Invalid(e)),
    })
}

/// Reads an application server's head from its stream (uwsgi, SCGI): a status line and
/// fields, or CGI fields with a `Status:`, made an HTTP head; the body bytes after it stay
/// in `buf`, and the body runs to the connection's close unless the head gives its length.
async fn read_stream_head(
    conn: &mut Conn<Stream>,
    buf: &mut BytesMut,
    limit: usize,
    deadline: tokio::time::Instant,
    received: &mut u64,
) -> Result<ResponseHead, HeadFailure> {
    let mut got_any = false;
    loop {
        match taken_head(buf, limit, true) {
            // An interim response is passed by, as the proxy's are.
            Some(Ok(h)) if (100..200).contains(&h.status()) && h.status() != 101 => continue,
            Some(head) => return head,
            None => {}
        }
        buf.reserve(READ_CHUNK);
        match conn
            .timer
            .run_until(deadline, conn.stream.read_buf(buf))
            .await
        {
            Ok(Ok(0)) if !got_any => return Err(HeadFailure::Closed),
            Ok(Ok(0)) => {
                return Err(HeadFailure::Cgi(
                    "upstream prematurely closed connection".to_owned(),
                ))
            }
            Ok(Ok(k)) => {
                got_any = true;
                *received += k as u64;
            }
            Ok(Err(e)) => return Err(HeadFailure::Io(e)),
            Err(_) => return Err(HeadFailure::Io(std::io::ErrorKind::TimedOut.into())),
        }
    }
}

struct Forwarded {
    sent: u64,
    body: u64,
    /// The upstream's body bytes read (`$upstream_response_length`).
    length: u64,
    /// Bytes read from the upstream after its head.
    received: u64,
    keep_alive: bool,
    /// The upstream response was read to its end: the connection may be reused.
    upstream_done: bool,
}

/// Sends the response head to `down`, streams the body framed as `framing` says, and ends
/// the response (`no_body`: the client gets none, whatever the upstream sends): recoded on
/// the way as the modules decide (`encode.rs`), through what the cache does with it, which
/// sees the upstream's own bytes.
#[allow(clippy::too_many_arguments)]
async fn forward<D: Downstream, S: Source>(
    down: &mut D,
    req: &Request<'_>,
    plan: &Plan,
    head: &ResponseHead,
    (framing, no_body): (Framing, bool),
    ubuf: BytesMut,
    source: &mut S,
    url: Url<'_>,
    cached: Option<Cached>,
) -> Forwarded {
    let proxied = Outgoing::Proxied(head);
    // A body filter (`ssi`) takes the body whole: after the recodings nginx runs before it
    // (gunzip, sub_filter, charset), before the compression, which then sees no length.
    let filter = match head.status() {
        101 => None,
        _ => req.body_filter_edit(&proxied),
    };
    let body = (framing, ubuf, source, url);
    let log = |message: &str| req.log_upstream(Level::Error, message, &url);
    let flush = !plan.settings.buffering;
    if let Some(edit) = filter {
        let before = req.encoding_around(&proxied, false);
        let after = req.encoding_around(&Outgoing::Recoded(&proxied), true);
        let mut after = Encoded::new(down, after, no_body, flush, &log);
        let mut filtered = Filtered::new(&mut after, req, edit, no_body);
        let mut before = Encoded::new(&mut filtered, before, no_body, flush, &log);
        // Boxed: the rare filtered response's wait is the largest of the three.
        return Box::pin(keep(&mut before, req, plan, head, body, cached)).await;
    }
    // A HEAD response gets the head a GET's would have.
    let enc = match head.status() {
        101 => Encode::default(),
        _ => req.encoding(&proxied),
    };
    if enc.is_nothing() {
        keep(down, req, plan, head, body, cached).await
    } else {
        let mut down = Encoded::new(down, enc, no_body, flush, &log);
        keep(&mut down, req, plan, head, body, cached).await
    }
}

/// [`forward`] past the recoding: the cache keeps the upstream's body (`Fill`), or one range
/// of it goes out (`Slice`).
async fn keep<D: Downstream, S: Source>(
    down: &mut D,
    req: &Request<'_>,
    plan: &Plan,
    head: &ResponseHead,
    (framing, ubuf, source, url): (Framing, BytesMut, &mut S, Url<'_>),
    cached: Option<Cached>,
) -> Forwarded {
    let Some(Cached {
        store,
        head_only,
        slice,
    }) = cached
    else {
        return relay(down, req, plan, head, framing, ubuf, source, url).await;
    };
    match slice {
        None => {
            let mut down = Fill::new(down, store, head_only);
            relay(&mut down, req, plan, head, framing, ubuf, source, url).await
        }
        Some((start, len)) => {
            let mut cut = Slice::new(down, start, len);
            let mut down = Fill::new(&mut cut, store, head_only);
            relay(&mut down, req, plan, head, framing, ubuf, source, url).await
        }
    }
}

/// What the cache does with a response on its way: keeps a copy of it (`store`), passes
/// the head alone, or one range of the body (start, length).
struct Cached {
    store: Option<Store>,
    head_only: bool,
    slice: Option<(u64, u64)>,
}

/// Where a response body is read from: the upstream's connection, or a cache entry.
pub(super) trait Source {
    /// Reads more into `buf`: `None` when `timeout` passed first.
    fn read_more(
        &mut self,
        buf: &mut BytesMut,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Option<std::io::Result<usize>>>;

    /// The file the rest of the body is in, and where the rest starts.
    fn file(&self) -> Option<(&std::fs::File, u64)> {
        None
    }

    /// Whether the body is known to have ended, with no more to read.
    fn ended(&self) -> bool {
        false
    }
}

impl Source for Conn<Stream> {
    async fn read_more(
        &mut self,
        buf: &mut BytesMut,
        timeout: Duration,
    ) -> Option<std::io::Result<usize>> {
        self.timer
            .run(timeout, self.stream.read_buf(buf))
            .await
            .ok()
    }
}

/// The body of a cache entry, read from its file as it is sent.
struct EntryBody {
    file: Arc<std::fs::File>,
    at: u64,
    /// Several ranges of it (`multipart/byteranges`), made a piece at a time.
    parts: Option<Parts>,
}

/// The parts of a multipart answer still to send: each part's head, then its bytes of the
/// entry, then the closing line.
struct Parts {
    entry: Entry,
    /// (head, start, length) of the parts not sent whole yet, the first one `done` bytes in.
    left: std::collections::VecDeque<(String, u64, u64)>,
    done: u64,
    trailer: Option<String>,
}

/// What one read of a multipart body makes at most.
const PART_PIECE: u64 = 64 * 1024;

impl Source for EntryBody {
    async fn read_more(
        &mut self,
        buf: &mut BytesMut,
        _: Duration,
    ) -> Option<std::io::Result<usize>> {
        use std::os::unix::fs::FileExt;
        if let Some(p) = self.parts.as_mut() {
            return Some(p.next_piece(buf));
        }
        let start = buf.len();
        buf.resize(start + READ_CHUNK * 4, 0);
        let read = self.file.read_at(&mut buf[start..], self.at);
        let n = *read.as_ref().unwrap_or(&0);
        buf.truncate(start + n);
        self.at += n as u64;
        Some(read)
    }

    fn file(&self) -> Option<(&std::fs::File, u64)> {
        match self.parts {
            Some(_) => None,
            None => Some((&self.file, self.at)),
        }
    }
}

impl Parts {
    /// The next piece of the multipart body into `buf`: a part's head, at most
    /// [`PART_PIECE`] of its bytes, or the closing line; 0 at the end.
    fn next_piece(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        let before = buf.len();
        match self.left.front_mut() {
            Some((head, start, len)) => {
                if self.done == 0 && !head.is_empty() {
                    buf.extend_from_slice(head.as_bytes());
                    head.clear();
                }
                let n = (*len - self.done).min(PART_PIECE);
                buf.extend_from_slice(&self.entry.read_body(*start + self.done, n)?);
                self.done += n;
                if self.done == *len {
                    self.left.pop_front();
                    self.done = 0;
                }
            }
            None => {
                if let Some(t) = self.trailer.take() {
                    buf.extend_from_slice(t.as_bytes());
                }
            }
        }
        Ok(buf.len() - before)
    }
}

/// Sends a cache entry as the response, as nginx sends one: its stored head through the
/// proxy's rules, its body from the file. `head_only`: the client asked with HEAD.
async fn send_entry<D: Downstream>(
    down: &mut D,
    req: &Request<'_>,
    plan: &Plan,
    entry: &Entry,
    head_only: bool,
) -> Finish {
    let shown = match super::cache::not_modified(&req.conditions(), entry.head()) {
        Ok(shown) => shown,
        Err(code) => {
            return Finish::Status {
                code,
                body_read: true,
                attempts: Vec::new(),
                challenge: None,
            }
        }
    };
    req.set_cache_ranges();
    let (len, first) = entry.body();
    let whole = matches!(entry.head().framing(), Framing::Length(_));
    // A range of it, as nginx's range filter cuts a cached response.
    let cut = match &shown {
        None if whole => cut(req, plan, entry.head(), len, true),
        _ => Cut::Whole,
    };
    let mut ubuf = req.worker().upstreams.borrow_mut().take_buffer();
    let (file, at) = entry.rest();
    let mut body = EntryBody {
        file,
        at,
        parts: None,
    };
    let head = match &cut {
        Cut::Whole => shown.as_ref().unwrap_or(entry.head()),
        Cut::Part { head, .. } | Cut::Parts { head, .. } => head,
        Cut::Unsatisfiable => {
            return_buffer(req, ubuf);
            req.set_range_field(crate::files::unsatisfied_range(len).into_bytes());
            return Finish::Status {
                code: 416,
                body_read: true,
                attempts: Vec::new(),
                challenge: None,
            };
        }
    };
    let status = head.status();
    let no_body = plan.head_request || head_only || status == 204 || status == 304;
    if let Cut::Part { range, .. } = &cut {
        req.set_range_field(range.clone());
    }
    let framing = match &cut {
        _ if no_body => Framing::Length(0),
        Cut::Part { start, len, .. } => {
            // What was read with the head, then the file from where that ends or the
            // range starts.
            let mem = first.len() as u64;
            let from = (*start).min(mem) as usize;
            let to = (start + len).min(mem) as usize;
            ubuf.extend_from_slice(&first[from..to]);
            body.at = entry.body_start() + (*start).max(mem);
            Framing::Length(*len)
        }
        Cut::Parts { multipart, .. } => {
            // Made as it is sent, a bounded piece at a time.
            body.parts = Some(Parts {
                entry: entry.clone(),
                left: multipart
                    .parts
                    .iter()
                    .map(|p| (p.head.clone(), p.start, p.len))
                    .collect(),
                done: 0,
                trailer: Some(multipart.trailer.clone()),
            });
            Framing::Length(multipart.content_length)
        }
        _ => {
            let n = first.len().min(usize::try_from(len).unwrap_or(usize::MAX));
            ubuf.extend_from_slice(&first[..n]);
            if whole {
                Framing::Length(len)
            } else {
                // A body that came chunked or up to the close goes out so again, as in
                // nginx.
                Framing::UntilClose
            }
        }
    };
    let url = Url {
        https: plan.https,
        gateway: None,
        peer: "cache",
        uri: b"",
    };
    let forwarded = forward(
        down,
        req,
        plan,
        head,
        (framing, no_body),
        ubuf,
        &mut body,
        url,
        None,
    )
    .await;
    Finish::Sent {
        status,
        sent: forwarded.sent,
        body: forwarded.body,
        keep_alive: forwarded.keep_alive,
        attempts: Vec::new(),
    }
}

/// Runs `f` with what the cache asks of `req`.
/// The cache's work for `req` when `settings` cache its method: its key
/// (`proxy_cache_key`, else `default_key`), to look up in the request's worker.
pub(crate) fn cache_job(
    req: &Request<'_>,
    settings: &Arc<super::ProxySettings>,
    default_key: impl FnOnce() -> Vec<u8>,
) -> Option<Box<super::cache::Job>> {
    if !settings.cache.caches(req.head().method_str()) {
        return None;
    }
    let key = match &settings.cache.key {
        Some(k) => req.eval(k),
        None => default_key(),
    };
    asking(req, |ask| super::cache::Job::new(ask, settings, key)).map(Box::new)
}

fn asking<T>(req: &Request<'_>, f: impl FnOnce(&Ask<'_>) -> T) -> T {
    let eval = |t: &crate::vars::Template| req.eval(t);
    let log = |m: &str| req.log(Level::Crit, m);
    let upstreams = req.worker().upstreams.borrow();
    f(&Ask {
        head: req.head(),
        eval: &eval,
        log: &log,
        hot: &upstreams.hot,
    })
}

/// The range of `head` (a response of `size` bytes) the request asks for, as the cache cuts
/// it (several ranges of a cached one: `multipart`).
fn cut(req: &Request<'_>, plan: &Plan, head: &ResponseHead, size: u64, multipart: bool) -> Cut {
    if req.head().header("range").is_none() {
        return Cut::Whole;
    }
    // A recoding that keeps every byte's place (between single-byte charsets) recodes the
    // range as it would the whole; a body filter (`ssi`) leaves no range to cut.
    let enc = req.encoding(&Outgoing::Proxied(head));
    let plain = !enc.vary
        && enc.coder.is_none_or(|c| c.head().keep_length)
        && req.body_filter_edit(&Outgoing::Proxied(head)).is_none();
    super::cache::cut(
        &req.conditions(),
        (req.head().method_str(), plan.settings.force_ranges),
        plain,
        head,
        (size, multipart),
    )
}

/// Answers with the stale entry of `cache` when `proxy_cache_use_stale` covers a failure of
/// kind `bit`.
async fn serve_stale<D: Downstream>(
    down: &mut D,
    req: &Request<'_>,
    plan: &Plan,
    cache: &mut Option<Box<Job>>,
    bit: u16,
) -> Option<Finish> {
    let job = cache.as_mut().filter(|j| j.stale_for(bit))?;
    let entry = job.stale.take()?;
    job.status = CacheStatus::Stale;
    req.set_cache_status(job.status);
    Some(send_entry(down, req, plan, &entry, job.client_head).await)
}

impl Finish {
    /// The same end, with the upstream attempts made before it.
    fn with_attempts(self, made: Vec<Attempt>) -> Finish {
        match self {
            Finish::Sent {
                status,
                sent,
                body,
                keep_alive,
                ..
            } => Finish::Sent {
                status,
                sent,
                body,
                keep_alive,
                attempts: made,
            },
            other => other,
        }
    }
}

/// Ends the response: with its trailers (`add_trailer`), read now that the body is whole.
async fn finish<D: Downstream>(down: &mut D, req: &Request<'_>) -> std::io::Result<()> {
    if req.expects_trailers() {
        down.end_with(req.trailer_fields());
    }
    down.finish().await
}

/// [`forward`] once the downstream is chosen.
#[allow(clippy::too_many_arguments)]
async fn relay<D: Downstream, S: Source>(
    down: &mut D,
    req: &Request<'_>,
    plan: &Plan,
    head: &ResponseHead,
    framing: Framing,
    mut ubuf: BytesMut,
    source: &mut S,
    url: Url<'_>,
) -> Forwarded {
    // `X-Accel-Limit-Rate`: the rate of this response, as `$limit_rate` shows.
    if let Some(rate) = head
        .header("x-accel-limit-rate")
        .filter(|_| plan.settings.cache.ignore & super::cache::ignore::X_ACCEL_LIMIT_RATE == 0)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(portcullis_config::value::parse_number)
    {
        req.limit_rate_from_upstream(rate);
        down.limit_rate(rate, req.rate_after(), req.pace_start());
    }
    req.write_proxied_head(down.begin(framing), plan, head);
    let read_timeout = plan.settings.read_timeout;
    let mut received = 0;
    // The upstream's body bytes, whatever the client took of them.
    let mut length = 0u64;
    // Reads more of the upstream's body into `ubuf`: false at its close when that ends the
    // body; when the body broke off, the failure is logged and `$done` leaves with false.
    macro_rules! read_more {
        ($done:lifetime, $eof_ends:expr) => {{
            ubuf.reserve(READ_CHUNK);
            match source.read_more(&mut ubuf, read_timeout).await {
                Some(Ok(0)) if $eof_ends => false,
                Some(Ok(k)) if k > 0 => {
                    received += k as u64;
                    true
                }
                other => {
                    log_body_failure(req, url, other);
                    down.broken();
                    break $done false;
                }
            }
        }};
    }
    // Whether the upstream's response was read to its end and no further.
    let upstream_done = 'done: {
        match framing {
            Framing::Length(n) => {
                let mut left = n;
                let first = left.min(ubuf.len() as u64) as usize;
                left -= first as u64;
                length += first as u64;
                if down.send(&ubuf[..first]).await.is_err() {
                    break 'done false;
                }
                ubuf.advance(first);
                // A body in a file goes from there.
                if let Some((file, at)) = source.file().filter(|_| left > 0) {
                    if down.send_file(file, at, left).await.is_err() {
                        break 'done false;
                    }
                    length += left;
                    left = 0;
                }
                while left > 0 {
                    ubuf.clear();
                    read_more!('done, false);
                    let take = left.min(ubuf.len() as u64) as usize;
                    length += take as u64;
                    if down.send(&ubuf[..take]).await.is_err() {
                        break 'done false;
                    }
                    ubuf.advance(take);
                    left -= take as u64;
                }
                // Bytes past the announced length mean the upstream cannot be trusted again.
                finish(down, req).await.is_ok() && ubuf.is_empty()
            }
            Framing::Chunked => {
                let mut decoder = ChunkedDecoder::new();
                loop {
                    loop {
                        match decoder.decode(&mut ubuf) {
                            Ok(Chunk::Data(d)) => {
                                length += d.len() as u64;
                                down.push(&d);
                            }
                            Ok(Chunk::Done) => {
                                break 'done finish(down, req).await.is_ok() && ubuf.is_empty()
                            }
                            Ok(Chunk::NeedMore) => break,
                            Err(_) => {
                                req.log_upstream(
                                    Level::Error,
                                    "upstream sent invalid chunked response while reading upstream",
                                    &url,
                                );
                                let _ = down.send(&[]).await;
                                down.broken();
                                break 'done false;
                            }
                        }
                    }
                    if down.send(&[]).await.is_err() {
                        break 'done false;
                    }
                    read_more!('done, false);
                }
            }
            Framing::UntilClose => loop {
                if !ubuf.is_empty() {
                    length += ubuf.len() as u64;
                    down.push(&ubuf);
                    ubuf.clear();
                }
                // A source that knows its end (a FastCGI response's record) ends the body
                // with what is pushed, in one write.
                if source.ended() {
                    break 'done finish(down, req).await.is_ok();
                }
                if down.send(&[]).await.is_err() {
                    break 'done false;
                }
                if !read_more!('done, true) {
                    // The upstream's close ends the body, and its connection.
                    let _ = finish(down, req).await;
                    break 'done false;
                }
            },
        }
    };
    return_buffer(req, ubuf);
    let (sent, body) = down.sent();
    Forwarded {
        sent,
        body,
        length,
        received,
        keep_alive: down.keep_alive(),
        upstream_done,
    }
}

/// Which side a tunnel read came from.
enum Side {
    Client,
    Upstream,
}

/// After a 101: sends the client `head` and whatever either side sent early, then relays
/// bytes both ways until one side closes or nothing moves for `idle` (proxy_read_timeout).
/// Returns the bytes sent to the client.
async fn tunnel<C, U>(
    client: &mut C,
    upstream: &mut U,
    head: &mut BytesMut,
    client_early: &mut BytesMut,
    mut upstream_early: BytesMut,
    idle: Duration,
    send_timeout: Duration,
) -> u64
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut sent = (head.len() + upstream_early.len()) as u64;
    if send_two(client, head, &upstream_early, send_timeout)
        .await
        .is_err()
    {
        head.clear();
        return 0;
    }
    head.clear();
    if !client_early.is_empty() {
        if timeout_io(send_timeout, upstream.write_all(client_early))
            .await
            .is_err()
        {
            return sent;
        }
        client_early.clear();
    }
    // Both directions share one buffer each way, kept from the early bytes' allocations.
    let mut up = std::mem::take(client_early);
    up.resize(READ_CHUNK, 0);
    upstream_early.clear();
    upstream_early.resize(READ_CHUNK, 0);
    let mut down = upstream_early;
    loop {
        let read = tokio::time::timeout(idle, async {
            tokio::select! {
                r = client.read(&mut up) => (Side::Client, r),
                r = upstream.read(&mut down) => (Side::Upstream, r),
            }
        })
        .await;
        let written = match read {
            Ok((_, Ok(0) | Err(_))) | Err(_) => break,
            Ok((Side::Client, Ok(n))) => {
                timeout_io(send_timeout, upstream.write_all(&up[..n])).await
            }
            Ok((Side::Upstream, Ok(n))) => {
                sent += n as u64;
                timeout_io(send_timeout, client.write_all(&down[..n])).await
            }
        };
        if written.is_err() {
            break;
        }
    }
    sent
}

/// Logs why reading the body stopped early; `Some(Ok(0))` is a close, `None` a timeout.
fn log_body_failure(req: &Request<'_>, url: Url<'_>, read: Option<std::io::Result<usize>>) {
    let what = match read {
        None => "upstream timed out (110: Connection timed out) while reading upstream".to_string(),
        Some(Ok(_)) => "upstream prematurely closed connection while reading upstream".to_string(),
        Some(Err(e)) => format!(
            "recv() failed {} while reading upstream",
            crate::log::os_error(&e)
        ),
    };
    req.log_upstream(Level::Error, &what, &url);
}

/// Gives the upstream read buffer back to the worker for the next exchange.
/// A worker's buffer lent to an exchange, given back when the exchange ends however it ends.
struct Lent<'r, 'a> {
    buf: BytesMut,
    req: &'r Request<'a>,
}

impl std::ops::Deref for Lent<'_, '_> {
    type Target = BytesMut;
    fn deref(&self) -> &BytesMut {
        &self.buf
    }
}

impl std::ops::DerefMut for Lent<'_, '_> {
    fn deref_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }
}

impl Drop for Lent<'_, '_> {
    fn drop(&mut self) {
        return_buffer(self.req, std::mem::take(&mut self.buf));
    }
}

fn return_buffer(req: &Request<'_>, buf: BytesMut) {
    // Also called while a dropped exchange unwinds: never a second borrow.
    if let Ok(mut w) = req.worker().upstreams.try_borrow_mut() {
        w.return_buffer(buf);
    }
}
