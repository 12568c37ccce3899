//! HTTP/2, with the `h2` crate as the framing layer.
//!
//! A connection reaches [`serve`] either from TLS, when ALPN chose "h2", or from a plain
//! `listen ... http2` (or `http2 on`) address whose first bytes are the HTTP/2 preface
//! ([`sniff`], as nginx 1.25 does: anything else is served as HTTP/1.1 on the same port).
//!
//! Each request is turned into the HTTP/1.1 head it stands for (`METHOD path HTTP/1.1`, Host
//! from `:authority`, the other fields, cookies joined with "; " as nginx does) in a
//! per-connection buffer, and parsed by [`portcullis_http::parse_request_head`]: every limit
//! and check of the HTTP/1.1 path applies once, and the request goes through the same phases
//! ([`Request::process`]). Streams of a connection are served concurrently on the worker's
//! LocalSet, at most `http2_max_concurrent_streams` at a time; the response's status and
//! fields become a HEADERS frame, its body DATA frames sent as flow control allows.
//!
//! This is nginx's `ngx_http_v2_module`: its directives (`http2` and `http2_*`, in
//! [`conf`]) are its settings of each level, and it takes connections over through the
//! core's connection handler.
//!
//! What HTTP/2 itself forbids (connection-specific fields, pseudo-headers out of place or
//! missing, malformed `:authority` or `:path`) is refused by `h2` with a stream error before
//! a request exists.

use std::cell::Cell;
use std::io;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ::h2::server::SendResponse;
use ::h2::{Reason, RecvStream, SendStream};
use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use portcullis_http::{parse_request_head, HeadLimits, RequestError};
use portcullis_proxy::Sock;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use crate::conf::{Listen, ServerConf};
use crate::conn::info::ConnInfo;
use crate::files::CachedFile;
use crate::module::{self, Load, Module, Slot};
use crate::request::{Body, Part, Request, Response, VERSION};
use crate::request::{Handlers, NewConnection, Take};
use crate::stats::State;
use crate::tls::Stream;
use crate::vars::Var;
use crate::worker::state::Worker;
use crate::Level;
use conf::{Http2Conf, DEFAULT_CHUNK_SIZE};
use proxy::Proxied;

pub(crate) mod body;
pub(crate) mod conf;
mod proxy;

/// The client connection preface of RFC 9113 3.4.
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// First size of a connection's buffer for rebuilt request heads: most heads fit.
const FIRST_HEAD: usize = 1024;
/// How long a connection told to go away (idle, or a graceful stop) waits for the client's
/// acknowledgement before it is closed.
const GOAWAY_GRACE: Duration = Duration::from_secs(1);
/// How much of a body nobody reads is read and dropped before the response: the stream's
/// first window, what a client may send unasked.
const DISCARD_MAX: usize = 64 * 1024;
/// How long each DATA frame of such a body is waited for.
const DISCARD_WAIT: Duration = Duration::from_millis(200);
/// A DATA or HEADERS frame's header, counted in `$bytes_sent`.
pub(crate) const FRAME_HEADER_LEN: u64 = 9;
/// Response fields that are about one HTTP/1.1 connection and have no place in HTTP/2
/// (RFC 9113 8.2.2).
pub(crate) const CONNECTION_FIELDS: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

pub(crate) struct Http2Module;

pub(crate) static MODULE: Http2Module = Http2Module;

impl Module for Http2Module {
    fn name(&self) -> &'static str {
        "http_v2_module"
    }

    /// Every `http2*` directive: those of server push only to warn of.
    fn owns(&self, directive: &str) -> bool {
        directive == "http2" || directive.starts_with("http2_")
    }

    fn defaults(&self) -> Slot {
        Arc::new(Http2Conf::default())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &portcullis_config::Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), portcullis_config::ConfigError> {
        if !conf::directive(module::edit::<Http2Conf>(conf), d)? {
            if let Some(warning) = portcullis_config::ignored_warning(d) {
                cx.warnings.push(format!("{warning} in {}", d.span));
            }
        }
        Ok(())
    }

    fn alpn(&self, conf: &Slot) -> Option<&'static [u8]> {
        module::get::<Http2Conf>(conf).enabled.then_some(b"h2")
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            connection: Some(take),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// The module's settings of the location `req` runs in (`http2_chunk_size`): found by their
/// type, once per response.
fn settings(req: &Request<'_>) -> Http2Conf {
    req.loc()
        .modules
        .find::<Http2Conf>()
        .copied()
        .unwrap_or_default()
}

/// Takes a TLS connection whose ALPN chose HTTP/2, and a plain one to an address that offers
/// it (see [`offered`]) to look at its first bytes.
fn take<'a>(
    worker: &'a Rc<Worker>,
    listen: &'a Listen,
    conf: &'a Slot,
    new: NewConnection,
    stat: &'a crate::stats::Connection,
) -> Take<'a> {
    let alpn_h2 = new.info.tls.as_ref().is_some_and(|t| t.h2);
    let settings = *module::get::<Http2Conf>(conf);
    match new.stream {
        Stream::Tls(tls) if alpn_h2 => Take::Taken(Box::pin(async move {
            serve(worker, listen, settings, tls, new.info, stat).await;
            None
        })),
        Stream::Plain(tcp) if !new.refused && offered(listen, conf) => {
            Take::Taken(Box::pin(async move {
                let (tcp, read, info) =
                    sniff(worker, listen, settings, tcp, new.read, new.info, stat).await?;
                Some(NewConnection {
                    stream: Stream::Plain(tcp),
                    read,
                    info,
                    refused: false,
                })
            }))
        }
        stream => Take::Declined(NewConnection { stream, ..new }),
    }
}

/// Whether a plain connection to `listen` may carry HTTP/2: `listen ... http2`, or `http2 on`
/// in the address's default server (`conf`, its settings: nginx takes the connection's
/// settings from it).
fn offered(listen: &Listen, conf: &Slot) -> bool {
    listen.http2 || module::get::<Http2Conf>(conf).enabled
}

/// Looks at the first bytes of a plain connection to an HTTP/2 address: with the HTTP/2
/// preface, serves the connection as HTTP/2 and returns `None`; with anything else, returns
/// the stream and the bytes read for the HTTP/1.1 loop. A connection that closes or times out
/// before it can tell returns `None`.
async fn sniff(
    worker: &Rc<Worker>,
    listen: &Listen,
    settings: Http2Conf,
    mut stream: Sock,
    mut buf: BytesMut,
    info: ConnInfo,
    stat: &crate::stats::Connection,
) -> Option<(Sock, BytesMut, ConnInfo)> {
    let timeout = listen.servers.default_server().client_header_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = buf.len().min(PREFACE.len());
        if buf[..n] != PREFACE[..n] {
            return Some((stream, buf, info));
        }
        if n == PREFACE.len() {
            let io = Rewind::new(buf.freeze(), stream);
            serve(worker, listen, settings, io, info, stat).await;
            return None;
        }
        if buf.capacity() == buf.len() {
            buf.reserve(PREFACE.len());
        }
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            // A few bytes of the preface and no more: hand them to HTTP/1.1, which logs and
            // answers what it makes of them.
            Ok(Ok(_)) if !buf.is_empty() => return Some((stream, buf, info)),
            _ => return None,
        }
    }
}

/// The streams of one connection still being answered.
#[derive(Default)]
struct Streams {
    active: Cell<usize>,
    /// Woken each time a stream finishes.
    done: Notify,
}

/// Counts a stream as active for as long as its task lives.
struct StreamGuard(Rc<Streams>);

impl StreamGuard {
    fn new(streams: &Rc<Streams>) -> StreamGuard {
        streams.active.set(streams.active.get() + 1);
        StreamGuard(streams.clone())
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.active.set(self.0.active.get() - 1);
        self.0.done.notify_one();
    }
}

/// Serves one HTTP/2 connection, with the module's `settings` of the address's default server
/// (nginx takes a connection's from it), until the client closes it, it stays idle for
/// `keepalive_timeout`, it has carried `keepalive_requests` requests or lived
/// `keepalive_time`, or the worker stops: the last three send GOAWAY and let the streams in flight finish.
async fn serve<S>(
    worker: &Rc<Worker>,
    listen: &Listen,
    settings: Http2Conf,
    io: S,
    mut info: ConnInfo,
    stat: &crate::stats::Connection,
) where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let default = listen.servers.default_server().clone();
    // nginx (since 1.19.7) bounds an HTTP/2 request's fields as a whole, by all of
    // large_client_header_buffers, and not line by line: `h2` enforces that bound, and the
    // rebuilt head is parsed without the HTTP/1.1 buffer packing.
    let list_max = header_list_max(&default.head_limits);
    let limits = HeadLimits {
        header_buffer_size: usize::MAX,
        ..default.head_limits
    };
    let mut conn = match tokio::time::timeout(
        default.client_header_timeout,
        builder(&settings, list_max).handshake::<S, Bytes>(io),
    )
    .await
    {
        Ok(Ok(conn)) => conn,
        _ => return,
    };
    let streams = Rc::new(Streams::default());
    let mut heads = BytesMut::with_capacity(FIRST_HEAD);
    let mut stopping = worker.stopping.clone();
    let mut going_away = false;
    loop {
        let idle = streams.active.get() == 0;
        // As nginx counts it: waiting while no stream is open; each stream counts for itself.
        stat.set(if idle { State::Waiting } else { State::Busy });
        let idle_timeout = if going_away {
            GOAWAY_GRACE
        } else {
            default.conf.keepalive_timeout
        };
        let accepted = tokio::select! {
            a = conn.accept() => a,
            _ = stopping.wait_for(|s| *s), if !going_away => {
                conn.graceful_shutdown();
                going_away = true;
                continue;
            }
            _ = streams.done.notified() => continue,
            _ = tokio::time::sleep(idle_timeout), if idle => {
                if going_away {
                    break;
                }
                conn.graceful_shutdown();
                going_away = true;
                continue;
            }
        };
        let (request, respond) = match accepted {
            Some(Ok(r)) => r,
            Some(Err(_)) | None => break,
        };
        let start = Instant::now();
        info.requests += 1;
        stat.set(State::Busy);
        let counted = stat.stream();
        let spent = info.requests >= default.conf.keepalive_requests
            || info.started.elapsed() > default.conf.keepalive_time;
        if spent && !going_away {
            conn.graceful_shutdown();
            going_away = true;
        }
        let (parts, body) = request.into_parts();
        let line_len = rebuild_head(&mut heads, &parts, !body.is_end_stream());
        let head = match parse_request_head(&mut heads, &limits) {
            Ok(Some(head)) => head,
            other => {
                let e = other.err().unwrap_or(RequestError::BadRequestLine);
                let line = heads.split_to(line_len).freeze();
                heads.clear();
                let guard = StreamGuard::new(&streams);
                let worker = worker.clone();
                let server = default.clone();
                let info = info.clone();
                drop(body);
                tokio::task::spawn_local(async move {
                    refuse(&worker, &server, &info, &line, e, respond).await;
                    drop((guard, counted));
                });
                continue;
            }
        };
        let server = listen
            .servers
            .find(head.host_bytes().map(String::from_utf8_lossy).as_deref())
            .clone();
        let guard = StreamGuard::new(&streams);
        let worker = worker.clone();
        let info = info.clone();
        tokio::task::spawn_local(async move {
            answer(&worker, &server, &info, head, start, body, respond).await;
            drop((guard, counted));
        });
    }
    // The connection is gone: streams still writing fail at their next frame.
    drop(conn);
    while streams.active.get() > 0 {
        streams.done.notified().await;
    }
}

/// The `h2` server of a connection with `settings`, taking at most `list_max` header bytes
/// per request ([`header_list_max`]).
pub(crate) fn builder(settings: &Http2Conf, list_max: u32) -> ::h2::server::Builder {
    let mut b = ::h2::server::Builder::new();
    b.max_concurrent_streams(settings.max_concurrent_streams)
        .initial_window_size(settings.body_preread_size)
        .max_header_list_size(list_max);
    b
}

/// The most header bytes of one request, as `h2` counts them (name, value and 32 per field),
/// past which it answers 431: nginx's bound, all of large_client_header_buffers.
pub(crate) fn header_list_max(limits: &HeadLimits) -> u32 {
    let all = limits
        .large_buffers
        .saturating_mul(limits.large_buffer_size);
    u32::try_from(all).unwrap_or(u32::MAX)
}

/// Writes the HTTP/1.1 head a request stands for into `out`; `body_follows` says whether
/// DATA frames follow the HEADERS. Returns the request line's length, for logging a head that
/// is refused.
pub(crate) fn rebuild_head(
    out: &mut BytesMut,
    parts: &http::request::Parts,
    body_follows: bool,
) -> usize {
    out.clear();
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.extend_from_slice(b" ");
    if let Some(p) = parts.uri.path_and_query() {
        out.extend_from_slice(p.as_str().as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1");
    let line_len = out.len();
    out.extend_from_slice(b"\r\n");
    if let Some(authority) = parts.uri.authority() {
        out.extend_from_slice(b"Host: ");
        out.extend_from_slice(authority.as_str().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let mut cookies = 0;
    for (name, value) in &parts.headers {
        if name == http::header::COOKIE {
            cookies += 1;
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // HTTP/2 may split a Cookie into one field per pair (RFC 9113 8.2.3); nginx joins them.
    if cookies > 0 {
        out.extend_from_slice(b"Cookie: ");
        for (i, value) in parts
            .headers
            .get_all(http::header::COOKIE)
            .iter()
            .enumerate()
        {
            if i > 0 {
                out.extend_from_slice(b"; ");
            }
            out.extend_from_slice(value.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }
    // A body of unknown length is, to nginx, a chunked one: the phases see that a body comes,
    // and the proxy sends it with its length once it is read whole.
    if body_follows && !parts.headers.contains_key(http::header::CONTENT_LENGTH) {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
    line_len
}

/// Runs one request through the phases and sends its response.
async fn answer(
    worker: &Rc<Worker>,
    server: &Arc<ServerConf>,
    info: &ConnInfo,
    head: portcullis_http::RequestHead,
    start: Instant,
    body: RecvStream,
    respond: SendResponse<Bytes>,
) {
    let mut req = Request::new(worker, server, info, head, start);
    req.set_http2();
    respond_to(&mut req, worker, body, respond).await;
    // Copies of the request (`mirror`), once it is answered.
    crate::subrequest::run_background(&mut req).await;
}

/// [`answer`] once the request is made.
async fn respond_to(
    req: &mut Request<'_>,
    worker: &Rc<Worker>,
    body: RecvStream,
    mut respond: SendResponse<Bytes>,
) {
    let mut resp = req.run().await;
    // As over HTTP/1.1: an error_page target may be proxied and fail in its turn, and each
    // answer is proxied until one is ours. Only the first round reads the request body; a
    // later one sends again what it read whole.
    let mut body = Some(body);
    while let Body::Proxy(_) = resp.body {
        let Body::Proxy(plan) = std::mem::replace(&mut resp.body, Body::Empty) else {
            return;
        };
        match proxy::serve(req, plan, body.take(), respond).await {
            Proxied::Done => return,
            Proxied::Answer(r, back) => {
                resp = r;
                respond = back;
            }
        }
    }
    // A response made of the request's body (an API write), once it is read.
    if let Body::MadeOfRequest(_) = resp.body {
        let read = match body.take() {
            Some(b) => match proxy::read_body(req, b).await {
                Ok(crate::upstream::ReqBody::Whole(b)) => Ok(b),
                Ok(_) => Ok(bytes::Bytes::new()),
                Err(code) => Err(code),
            },
            None => Ok(req.read_request_body().unwrap_or_default()),
        };
        if let Body::MadeOfRequest(make) = std::mem::replace(&mut resp.body, Body::Empty) {
            resp = match read {
                Ok(b) => make(b),
                Err(code) => req.finalize_error(code),
            };
        }
    }
    // A copy of the request that takes the body (`mirror`) has it read whole.
    if let Some(b) = body.take_if(|b| !b.is_end_stream() && req.copies_body()) {
        match proxy::read_body(req, b).await {
            Ok(crate::upstream::ReqBody::Whole(b)) => req.keep_request_body(&b),
            Ok(_) => {}
            Err(code) => {
                req.take_background();
                resp = req.finalize_error(code);
            }
        }
    }
    if let Some(body) = body.filter(|b| !b.is_end_stream()) {
        // nginx skips the body of a request whose handler does not read it. What the client
        // has in flight is read and dropped first, within a bound: a client that sends its
        // whole body before reading (curl does) then gets the response instead of a reset
        // stream. `h2` gives the window back for the rest when the body is dropped.
        discard(body).await;
    }
    req.not_modified(&mut resp);
    req.add_headers(&mut resp);
    req.recode(&mut resp).await;
    if crate::request::no_response(&resp) {
        // nginx closes the stream without a response (`return 444`, or a body filter that
        // failed).
        respond.send_reset(Reason::INTERNAL_ERROR);
        req.log_access(&resp, 0);
        return;
    }
    let head_only = req.is_head() || resp.status == 304 || resp.status == 204;
    let chunk = settings(req).chunk_size;
    let timeout = req.loc().send_timeout;
    let tokens = req.loc().server_tokens;
    let log = |message: &str| req.log(Level::Error, message);
    let sent = send(
        worker,
        respond,
        &mut resp,
        head_only,
        tokens,
        chunk,
        timeout,
        &log,
        &|n| req.set_streamed(n),
        if head_only { None } else { req.pace() },
        &|| trailer_map(req),
    )
    .await;
    req.log_access(&resp, sent);
}

/// Reads and drops at most [`DISCARD_MAX`] bytes of an unread request body, waiting at most
/// [`DISCARD_WAIT`] for each DATA frame.
pub(crate) async fn discard(mut body: RecvStream) {
    let mut left = DISCARD_MAX;
    while left > 0 && !body.is_end_stream() {
        match tokio::time::timeout(DISCARD_WAIT, body.data()).await {
            Ok(Some(Ok(data))) => {
                let _ = body.flow_control().release_capacity(data.len());
                left = left.saturating_sub(data.len());
            }
            _ => return,
        }
    }
}

/// Answers a request whose head the HTTP/1.1 checks refused, with the status nginx gives it.
async fn refuse(
    worker: &Rc<Worker>,
    server: &ServerConf,
    info: &ConnInfo,
    line: &[u8],
    e: RequestError,
    respond: SendResponse<Bytes>,
) {
    let log = server.conf.error_log(&worker.shared.error_log);
    if log.enabled(Level::Info) {
        log.write(
            Level::Info,
            Some(info.id),
            &format!(
                "{}, client: {}, server: {}",
                e.reason(),
                info.peer.ip(),
                server.name
            ),
        );
    }
    let tokens = server.conf.server_tokens;
    let mut resp = Response::error_page(e.page_code(), e.status(), tokens);
    let timeout = server.conf.send_timeout;
    let sent = send(
        worker,
        respond,
        &mut resp,
        false,
        tokens,
        DEFAULT_CHUNK_SIZE,
        timeout,
        // An error page is no stream: nothing to fail or count.
        &|_| {},
        &|_| {},
        None,
        &|| None,
    )
    .await;
    let phases = crate::request::Phases::of_server(server);
    if !phases.logs(&server.conf.modules) {
        return;
    }
    // `$request` as nginx logs an HTTP/2 request: the version is the one that came.
    let mut request = line.strip_suffix(b"HTTP/1.1").unwrap_or(line).to_vec();
    request.extend_from_slice(b"HTTP/2.0");
    let body = resp.content_length.unwrap_or(0);
    let mut lookup = |v: &Var, out: &mut Vec<u8>| match v {
        Var::Request => out.extend_from_slice(&request),
        Var::ServerProtocol => out.extend_from_slice(b"HTTP/2.0"),
        Var::Status => out.extend_from_slice(resp.status.to_string().as_bytes()),
        Var::BytesSent => out.extend_from_slice(sent.to_string().as_bytes()),
        Var::BodyBytesSent => out.extend_from_slice(body.to_string().as_bytes()),
        Var::ServerName => out.extend_from_slice(server.name.as_bytes()),
        // Refused as it came, as nginx times it.
        Var::RequestTime => out.extend_from_slice(b"0.000"),
        other => crate::request::connection_var(other, info, out),
    };
    phases.log(
        worker,
        &server.conf.modules,
        None,
        &mut lookup,
        &|v: &Var| v.empty_is_a_value(),
    );
}

/// Sends `resp` on a stream: a HEADERS frame, then the body as flow control allows. Returns
/// the bytes sent, as `$bytes_sent` counts them. `log` reports a body that fails as it is
/// made (a recoding), `streamed` the bytes of such a body sent.
#[allow(clippy::too_many_arguments)]
async fn send(
    worker: &Rc<Worker>,
    mut respond: SendResponse<Bytes>,
    resp: &mut Response,
    head_only: bool,
    tokens: bool,
    chunk: usize,
    timeout: Duration,
    log: &dyn Fn(&str),
    streamed: &dyn Fn(u64),
    rate: Option<crate::pace::Pace>,
    trailers: &dyn Fn() -> Option<HeaderMap>,
) -> u64 {
    let mut fields = HeaderMap::new();
    let head_len = response_fields(worker, resp, tokens, &mut fields);
    let mut head = http::Response::new(());
    *head.status_mut() = match http::StatusCode::from_u16(resp.status) {
        Ok(s) => s,
        Err(_) => http::StatusCode::INTERNAL_SERVER_ERROR,
    };
    *head.headers_mut() = fields;
    let mut body = std::mem::replace(&mut resp.body, Body::Empty);
    // Trailers (`add_trailer`) end the body: it goes in pieces, then a HEADERS frame.
    let trailing = !head_only && trailers().is_some();
    if trailing {
        body = crate::encode::pieces(body);
    }
    let empty = head_only
        || match &body {
            Body::Empty => true,
            Body::Bytes(b) => b.is_empty(),
            Body::File { len, .. } => *len == 0,
            Body::Parts(parts) => parts.is_empty(),
            Body::Proxy(_) | Body::MadeOfRequest(_) => true,
            Body::Stream(_) => false,
        };
    let Ok(mut stream) = respond.send_response(head, empty) else {
        return 0;
    };
    if empty {
        return head_len;
    }
    let mut out = Out {
        stream: &mut stream,
        chunk,
        timeout,
        sent: 0,
        rate,
    };
    let result = match body {
        Body::Empty | Body::Proxy(_) | Body::MadeOfRequest(_) => Ok(()),
        Body::Bytes(b) => out.whole(b, true).await,
        Body::Stream(mut source) => {
            let result = loop {
                let mut piece = BytesMut::new();
                match source.next(&mut piece) {
                    Ok(more) => {
                        if let Err(e) = out.paced(piece.freeze()).await {
                            break Err(e);
                        }
                        if !more {
                            break match trailers().filter(|t| trailing && !t.is_empty()) {
                                Some(t) => out.stream.send_trailers(t).map_err(io::Error::other),
                                None => out.bytes(Bytes::new(), true),
                            };
                        }
                    }
                    Err(e) => {
                        log(&format!("{e} while sending response to client"));
                        break Err(e);
                    }
                }
            };
            streamed(out.sent);
            result
        }
        Body::File { file, offset, len } => out.file(&file, offset, len, true).await,
        Body::Parts(parts) => {
            let mut result = Ok(());
            let last = parts.len() - 1;
            for (i, p) in parts.into_iter().enumerate() {
                result = match p {
                    Part::Bytes(b) => out.whole(b, i == last).await,
                    Part::File { file, offset, len } => {
                        out.file(&file, offset, len, i == last).await
                    }
                };
                if result.is_err() {
                    break;
                }
            }
            result
        }
    };
    let sent = head_len + out.sent;
    if result.is_err() {
        // The head promised a length the body cannot keep: the stream must not look complete.
        stream.send_reset(Reason::INTERNAL_ERROR);
    }
    sent
}

/// The trailers a response ends with (`add_trailer`), read now: `None` when it ends with
/// none.
fn trailer_map(req: &Request<'_>) -> Option<HeaderMap> {
    if !req.expects_trailers() {
        return None;
    }
    let mut map = HeaderMap::new();
    for (name, value) in req.trailer_fields() {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&value),
        ) {
            map.append(n, v);
        }
    }
    Some(map)
}

/// Fills `fields` with the response's fields in nginx's order, leaving out those HTTP/2 has
/// no place for. Returns the HEADERS frame's size as `$bytes_sent` counts it: field names and
/// values as literals, without HPACK's savings.
fn response_fields(
    worker: &Rc<Worker>,
    resp: &Response,
    tokens: bool,
    fields: &mut HeaderMap,
) -> u64 {
    let mut len = FRAME_HEADER_LEN + 1;
    let mut add = |name: HeaderName, value: &[u8]| {
        if let Ok(v) = HeaderValue::from_bytes(value) {
            len += (name.as_str().len() + value.len() + 2) as u64;
            fields.append(name, v);
        }
    };
    let server: &[u8] = if tokens {
        VERSION.as_bytes()
    } else {
        b"portcullis"
    };
    add(http::header::SERVER, server);
    add(http::header::DATE, worker.dates.borrow_mut().get());
    // A 204 has neither type nor length, as nginx's header filter removes them.
    if let Some(t) = resp
        .content_type
        .as_ref()
        .filter(|t| resp.status != 204 && !t.is_empty())
    {
        add(http::header::CONTENT_TYPE, t.as_bytes());
    }
    if let Some(n) = resp.content_length.filter(|_| resp.status != 204) {
        add(http::header::CONTENT_LENGTH, n.to_string().as_bytes());
    }
    for line in resp.headers[..].split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let Ok(name) = HeaderName::from_bytes(&line[..colon]) else {
            continue;
        };
        if CONNECTION_FIELDS.contains(&name.as_str()) {
            continue;
        }
        add(name, line[colon + 1..].trim_ascii());
    }
    len
}

/// A response body on its way out through one stream's flow-control window.
pub(crate) struct Out<'s> {
    pub stream: &'s mut SendStream<Bytes>,
    /// The most bytes per DATA frame (`http2_chunk_size`).
    pub chunk: usize,
    /// `send_timeout`: the longest wait for the window to open.
    pub timeout: Duration,
    pub sent: u64,
    /// `limit_rate`: the body goes at its pace.
    pub rate: Option<crate::pace::Pace>,
}

impl Out<'_> {
    /// Bytes already in memory go to `h2` whole; it sends them as the window opens.
    fn bytes(&mut self, b: Bytes, last: bool) -> io::Result<()> {
        self.sent += b.len() as u64;
        self.stream.send_data(b, last).map_err(io::Error::other)
    }

    /// Bytes in memory: whole to `h2`, or at the pace of `limit_rate`.
    async fn whole(&mut self, b: Bytes, last: bool) -> io::Result<()> {
        if self.rate.is_none() {
            return self.bytes(b, last);
        }
        self.paced(b).await?;
        if last {
            self.bytes(Bytes::new(), true)?;
        }
        Ok(())
    }

    /// How much the pace of `limit_rate` lets go now (waiting until it lets some).
    async fn allowance(&mut self, want: usize) -> usize {
        match &mut self.rate {
            Some(p) => p.grant(want).await,
            None => want,
        }
    }

    fn wrote(&mut self, n: usize) {
        self.sent += n as u64;
        if let Some(p) = &mut self.rate {
            p.spent(n);
        }
    }

    /// Reads `len` bytes of `file` from `offset`, no more at a time than the window allows, so
    /// a slow client holds back the reads and not the worker's memory.
    async fn file(
        &mut self,
        file: &CachedFile,
        offset: u64,
        len: u64,
        last: bool,
    ) -> io::Result<()> {
        if let Some(contents) = &file.contents {
            let start = usize::try_from(offset).map_err(io::Error::other)?;
            let end = usize::try_from(offset + len).map_err(io::Error::other)?;
            let body = contents
                .get(start..end)
                .map(|_| contents.slice(start..end))
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            return self.whole(body, last).await;
        }
        let mut position = offset;
        let mut remaining = len;
        while remaining > 0 {
            let want = remaining.min(self.chunk as u64) as usize;
            let want = self.allowance(want).await;
            self.stream.reserve_capacity(want);
            let granted = tokio::time::timeout(self.timeout, self.capacity())
                .await
                .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
            let n = granted.min(want);
            let mut buf = BytesMut::zeroed(n);
            let mut filled = 0;
            while filled < n {
                match file
                    .file
                    .read_at(&mut buf[filled..], position + filled as u64)?
                {
                    0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                    r => filled += r,
                }
            }
            position += n as u64;
            remaining -= n as u64;
            self.wrote(n);
            let end = last && remaining == 0;
            self.stream
                .send_data(buf.freeze(), end)
                .map_err(io::Error::other)?;
        }
        Ok(())
    }

    /// Sends bytes that come from elsewhere (a proxied body) no faster than the window
    /// opens, so that their source is read only as fast as the client takes them.
    pub(crate) async fn paced(&mut self, mut b: Bytes) -> io::Result<()> {
        while !b.is_empty() {
            let want = b.len().min(self.chunk);
            let want = self.allowance(want).await;
            self.stream.reserve_capacity(want);
            let granted = tokio::time::timeout(self.timeout, self.capacity())
                .await
                .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
            let part = b.split_to(granted.min(want));
            self.wrote(part.len());
            self.stream
                .send_data(part, false)
                .map_err(io::Error::other)?;
        }
        Ok(())
    }

    /// Waits until the stream may send at least one byte.
    async fn capacity(&mut self) -> io::Result<usize> {
        loop {
            let polled = std::future::poll_fn(|cx| self.stream.poll_capacity(cx)).await;
            match polled {
                Some(Ok(0)) => {}
                Some(Ok(n)) => return Ok(n),
                Some(Err(e)) => return Err(io::Error::other(e)),
                None => return Err(io::Error::from(io::ErrorKind::BrokenPipe)),
            }
        }
    }
}

/// A stream whose first bytes were already read: they are read again first.
pub(crate) struct Rewind<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Rewind<S> {
    pub(crate) fn new(prefix: Bytes, inner: S) -> Rewind<S> {
        Rewind { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            let head = self.prefix.split_to(n);
            buf.put_slice(&head);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(http: &str) -> crate::Compiled {
        let text = format!("events {{}}\nhttp {{\naccess_log off;\n{http}\n}}\n");
        let dir = std::env::temp_dir();
        let loaded = portcullis_config::load_str(&text, &dir.join("t.conf"), &Default::default())
            .unwrap_or_else(|e| panic!("{e}"));
        crate::compile(&loaded, &dir, None).unwrap_or_else(|e| panic!("{e}"))
    }

    fn compile_err(http: &str) -> String {
        let text = format!("events {{}}\nhttp {{\naccess_log off;\n{http}\n}}\n");
        let dir = std::env::temp_dir();
        let loaded = portcullis_config::load_str(&text, &dir.join("t.conf"), &Default::default())
            .unwrap_or_else(|e| panic!("{e}"));
        match crate::compile(&loaded, &dir, None) {
            Ok(_) => panic!("compiled"),
            Err(e) => e.to_string(),
        }
    }

    fn request(build: http::request::Builder) -> http::request::Parts {
        build.body(()).unwrap().into_parts().0
    }

    #[test]
    fn rebuilt_head_carries_authority_and_joined_cookies() {
        let parts = request(
            http::Request::builder()
                .method("GET")
                .uri("http://example.com:8080/a/b?x=1")
                .header("cookie", "a=1")
                .header("accept", "*/*")
                .header("cookie", "b=2"),
        );
        let mut buf = BytesMut::new();
        let line_len = rebuild_head(&mut buf, &parts, false);
        assert_eq!(&buf[..line_len], b"GET /a/b?x=1 HTTP/1.1");
        assert_eq!(
            &buf[..],
            &b"GET /a/b?x=1 HTTP/1.1\r\nHost: example.com:8080\r\naccept: */*\r\n\
               Cookie: a=1; b=2\r\n\r\n"[..]
        );
        let head = parse_request_head(&mut buf, &HeadLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!(head.host(), Some("example.com"));
        assert_eq!(head.header("cookie"), Some(&b"a=1; b=2"[..]));
        assert_eq!(head.query(), Some(&b"x=1"[..]));
    }

    #[test]
    fn rebuilt_head_is_checked_like_http1() {
        // No :authority and no host: nginx 1.22 refuses it as an HTTP/1.1 request without Host.
        let parts = request(http::Request::builder().method("GET").uri("/"));
        let mut buf = BytesMut::new();
        rebuild_head(&mut buf, &parts, false);
        let e = parse_request_head(&mut buf, &HeadLimits::default()).unwrap_err();
        assert_eq!(e, RequestError::MissingHost);
        // A lowercase method is no method to nginx.
        let parts = request(http::Request::builder().method("get").uri("http://h/"));
        rebuild_head(&mut buf, &parts, false);
        assert!(parse_request_head(&mut buf, &HeadLimits::default()).is_err());
    }

    #[test]
    fn body_without_length_is_chunked_to_the_phases() {
        let parts = request(http::Request::builder().method("POST").uri("http://h/"));
        let mut buf = BytesMut::new();
        rebuild_head(&mut buf, &parts, true);
        let head = parse_request_head(&mut buf, &HeadLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!(head.body(), portcullis_http::BodyKind::Chunked);
        let parts = request(
            http::Request::builder()
                .method("POST")
                .uri("http://h/")
                .header("content-length", "5"),
        );
        rebuild_head(&mut buf, &parts, true);
        let head = parse_request_head(&mut buf, &HeadLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!(head.body(), portcullis_http::BodyKind::Length(5));
    }

    #[test]
    fn header_list_bound_is_all_large_buffers() {
        assert_eq!(header_list_max(&HeadLimits::default()), 4 * 8192);
        let huge = HeadLimits {
            large_buffers: usize::MAX,
            ..HeadLimits::default()
        };
        assert_eq!(header_list_max(&huge), u32::MAX);
    }

    #[test]
    fn directives_and_listen_flag() {
        let c = compiled(
            "http2_max_concurrent_streams 16; http2_chunk_size 4k;
             server { listen 127.0.0.1:1 http2; http2_body_preread_size 1m; }
             server { listen 127.0.0.1:2; http2 on; http2_max_field_size 1k; }
             server { listen 127.0.0.1:3; }",
        );
        let listen = |port: u16| {
            c.http
                .listens
                .iter()
                .find(|l| l.addr.port() == port)
                .unwrap()
        };
        let conf_of = |port: u16| {
            *listen(port)
                .servers
                .default_server()
                .conf
                .modules
                .find::<Http2Conf>()
                .expect("the module's settings")
        };
        let offered_at = |port: u16| {
            let slot: Slot = Arc::new(conf_of(port));
            offered(listen(port), &slot)
        };
        assert!(listen(1).http2 && offered_at(1));
        assert!(!listen(2).http2 && offered_at(2));
        assert!(!offered_at(3));
        let h2 = conf_of(1);
        assert_eq!(h2.max_concurrent_streams, 16);
        assert_eq!(h2.chunk_size, 4096);
        assert_eq!(h2.body_preread_size, 1 << 20);
        // Inherited from the http level; the rest stays at nginx's defaults.
        let plain = conf_of(3);
        assert_eq!((plain.enabled, plain.max_concurrent_streams), (false, 16));
        assert_eq!(plain.body_preread_size, conf::DEFAULT_BODY_PREREAD_SIZE);
        assert!(
            !c.warnings().iter().any(|w| w.contains("http2")),
            "{:?}",
            c.warnings()
        );
        assert!(compile_err("http2_chunk_size 0;").contains("cannot be zero"));
        assert!(compile_err("http2_recv_buffer_size 16;").contains("too small"));
        let pushed = compiled("server { listen 127.0.0.1:1; http2_push_preload on; }");
        assert!(pushed
            .warnings()
            .iter()
            .any(|w| w.contains("http2_push_preload")));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn rewind_replays_the_prefix_first() {
        let (mut a, b) = tokio::io::duplex(64);
        let mut r = Rewind::new(Bytes::from_static(b"PRI "), b);
        tokio::io::AsyncWriteExt::write_all(&mut a, b"rest")
            .await
            .unwrap();
        drop(a);
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"PRI rest");
    }
}
