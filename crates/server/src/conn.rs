//! One client connection: read a request head, run the request through nginx's phases, write
//! the response, and loop while the connection stays alive.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use portcullis_http::{
    chunk_header, parse_request_head, BodyKind, Chunk, ChunkedDecoder, RequestError, RequestHead,
    Version,
};
use portcullis_proxy::Sock;
use portcullis_proxy::Timer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::conf::{Listen, ServerConf};
use crate::request::{Body, NewConnection, Phases, Request, Response, Take};
use crate::stats::State;
use crate::tls::{Start, Stream};
use crate::vars::Var;
use crate::worker::state::{ActiveGuard, Generation, Worker};
use crate::Level;

pub(crate) mod info;
pub(crate) mod park;
pub(crate) mod proxy_protocol;
use info::ConnInfo;

/// Bytes read per `read` call at least; a head usually arrives whole in one.
const READ_CHUNK: usize = 4096;
/// First size of a connection's read buffer, as nginx's client_header_buffer_size: most
/// heads fit, and a connection that carries one request allocates no more.
const FIRST_READ: usize = 1024;
/// First size of the response-head buffer: a static file's head is about 250 bytes.
const FIRST_OUT: usize = 512;
/// Longest time spent discarding an unread request body before closing, as nginx's
/// lingering_time.
const LINGERING_TIME: Duration = Duration::from_secs(30);
/// Largest request body read and dropped to keep a connection alive; past it we close.
const DISCARD_MAX: u64 = 1 << 30;
/// nginx's code for a plain HTTP request sent to a TLS port, answered as 400.
const TO_HTTPS: u16 = 497;
/// The least a parked connection taken up waits for its bytes. Its socket was readable, but
/// the reactor learns so only at its next turn: a connection taken up at its keepalive
/// deadline is served, as nginx handles a read event before the timers of the same turn.
const TAKEN_UP_WAIT: Duration = Duration::from_secs(1);

/// Serves a connection just accepted, its non-blocking socket not yet in the reactor. A
/// function returning an async block rather than an async fn: an async fn keeps its arguments
/// and the locals they are moved into side by side, and the guard and the generation are
/// moved at the end, when the connection parks.
#[allow(clippy::manual_async_fn)]
pub(crate) fn serve(
    guard: ActiveGuard,
    generation: Arc<Generation>,
    listen: usize,
    stream: std::net::TcpStream,
    peer: SocketAddr,
) -> impl Future<Output = ()> {
    async move {
        // Not `if let`: its scrutinee would live, a second copy of the connection, for as long
        // as the connection runs.
        let Some(mut conn) = start(&guard, &generation, listen, stream, peer).await else {
            return;
        };
        let wait = conn.listen.servers.find(None).conf.keepalive_timeout;
        let parks = conn.run(wait).await;
        if let Some(held) = conn.into_held(parks) {
            park(held, guard, generation);
        }
    }
}

/// Takes up a parked connection whose socket became readable: a task again, with what is
/// left of its keepalive_timeout. What it held is boxed until the connection is made of it,
/// so that the task's future, which keeps its captures whole, is no larger than a new
/// connection's.
#[allow(clippy::manual_async_fn)]
fn resume(parked: park::Parked) -> impl Future<Output = ()> {
    let park::Parked {
        guard,
        generation,
        held,
    } = parked;
    let held = Box::new(held);
    async move {
        let Some((mut conn, wait)) = Connection::taken_up(&guard, &generation, *held) else {
            return;
        };
        let parks = conn.run(wait).await;
        if let Some(held) = conn.into_held(parks) {
            park(held, guard, generation);
        }
    }
}

/// Puts a connection that has waited long enough for its next request into the worker's table
/// of parked connections (see `park`).
fn park(held: park::Held, guard: ActiveGuard, generation: Arc<Generation>) {
    let worker = guard.0.clone();
    worker.parking.park(park::Parked {
        guard,
        generation,
        held,
    });
}

/// A connection's start, up to its first request: the PROXY protocol header, the TLS
/// handshake, and the modules that may take the connection over (HTTP/2). A future of its own,
/// so that what only the start needs is not kept while the connection waits for requests.
async fn start<'g>(
    guard: &'g ActiveGuard,
    generation: &'g Generation,
    listen: usize,
    stream: std::net::TcpStream,
    peer: SocketAddr,
) -> Option<Connection<'g>> {
    let worker = guard.0.clone();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let listen = generation.http.listens.get(listen)?;
    let default = listen.servers.default_server();
    let timeout = default.client_header_timeout;
    let mut proxied = None;
    let mut first = BytesMut::new();
    // Read and written directly until a call would block (see `Sock`); the PROXY protocol
    // header and the TLS handshake are read through tokio's socket.
    let mut stream = Sock::direct(stream);
    if listen.proxy_protocol {
        let first_read = match listen.ssl {
            true => proxy_protocol::TLS_FIRST_READ,
            false => default.head_limits.header_buffer_size,
        };
        let tcp = match stream.registered() {
            Ok(tcp) => tcp,
            Err(e) => return unregistered(&worker, listen, peer, &e),
        };
        match Box::pin(proxy_protocol::read(tcp, listen.ssl, first_read, timeout)).await {
            Ok((named, rest)) => {
                proxied = named.map(Rc::new);
                first = rest;
            }
            Err(failed) => {
                let level = if failed.info {
                    Level::Info
                } else {
                    Level::Error
                };
                if !failed.message.is_empty() {
                    log_unserved(&worker, listen, peer, level, &failed.message);
                }
                return None;
            }
        }
    }
    let (stream, tls, refuse) = if listen.ssl {
        let tcp = match stream.into_registered() {
            Ok(tcp) => tcp,
            Err(e) => return unregistered(&worker, listen, peer, &e),
        };
        // As nginx counts a handshake: neither reading, writing nor waiting.
        guard.1.set(State::Busy);
        match Box::pin(crate::tls::accept(tcp, listen, timeout)).await {
            Start::Tls(s, info) => {
                guard.1.handshake(Some(info.reused));
                let refuse = info.refuse;
                (s, Some(info), refuse)
            }
            Start::PlainHttp(s) => (Stream::Plain(s.into()), None, Some(TO_HTTPS)),
            Start::Closed(why) => {
                if let Some(why) = why {
                    guard.1.handshake(None);
                    log_unserved(&worker, listen, peer, Level::Info, &why);
                }
                return None;
            }
            Start::Failed(why) => {
                guard.1.handshake(None);
                log_unserved(&worker, listen, peer, Level::Error, &why);
                return None;
            }
        }
    } else {
        (Stream::Plain(stream), None, None)
    };
    let info = ConnInfo {
        merge_slashes: tls
            .as_ref()
            .map_or(default.merge_slashes, |t| t.merge_slashes),
        id: worker.shared.next_connection(),
        peer,
        local: listen.addr,
        requests: 0,
        pipelined: false,
        started: Instant::now(),
        tls,
        fd,
        proxy_protocol: proxied,
    };
    // The bytes read with a PROXY protocol header are the request's first.
    let buf = match first.is_empty() {
        true => BytesMut::with_capacity(FIRST_READ),
        false => first,
    };
    // A module may take the connection over: HTTP/2, chosen by ALPN over TLS, and by the
    // client's preface on a plain address.
    let mut new = NewConnection {
        stream,
        read: buf,
        info,
        refused: refuse.is_some(),
    };
    let phases = Phases::of_server(default);
    for (take, conf) in phases.connection(&default.conf.modules) {
        new = match take(&worker, listen, conf, new, &guard.1) {
            Take::Declined(new) => new,
            Take::Taken(serve) => match serve.await {
                Some(left) => left,
                None => return None,
            },
        };
    }
    let NewConnection {
        stream,
        read: buf,
        info,
        ..
    } = new;
    Some(Connection {
        worker,
        listen,
        stream,
        refuse,
        buf,
        out: BytesMut::with_capacity(FIRST_OUT),
        nodelay: false,
        watched: false,
        timer: Timer::new(),
        info,
        stat: &guard.1,
    })
}

/// Closes a connection whose socket the reactor refused.
fn unregistered<T>(
    worker: &Worker,
    listen: &Listen,
    peer: SocketAddr,
    e: &std::io::Error,
) -> Option<T> {
    let why = format!("epoll_ctl() failed {}", crate::log::os_error(e));
    log_unserved(worker, listen, peer, Level::Alert, &why);
    None
}

/// Logs why a connection closed before its first request, in the default server's log.
fn log_unserved(worker: &Worker, listen: &Listen, peer: SocketAddr, level: Level, why: &str) {
    let default = &listen.servers.default_server().conf;
    let log = default.error_log(&worker.shared.error_log);
    if log.enabled(level) {
        let id = worker.shared.next_connection();
        log.write(
            level,
            Some(id),
            &format!("{why}, client: {}, server: {}", peer.ip(), listen.addr),
        );
    }
}

struct Connection<'g> {
    worker: Rc<Worker>,
    listen: &'g Listen,
    stream: Stream,
    /// nginx's code for refusing every request of the connection: 497 for plain HTTP on a
    /// TLS port, 495 or 496 for a client certificate that is bad or missing.
    refuse: Option<u16>,
    /// Bytes read and not yet parsed: a head in progress, a body, or pipelined requests.
    buf: BytesMut,
    /// The response head being written; reused for every response.
    out: BytesMut,
    /// Whether TCP_NODELAY is on. As nginx does, it is set only when needed: a response
    /// written whole in one writev is not delayed by Nagle, so a connection that carries one
    /// small response never pays the syscall.
    nodelay: bool,
    /// Whether the socket is in the worker's set of parked sockets already (see `park`).
    watched: bool,
    /// The timeout of waiting for a request head.
    timer: Timer,
    info: ConnInfo,
    /// What the connection is doing, for `stub_status`.
    stat: &'g crate::stats::Connection,
}

/// A request body being read and dropped.
enum Discard {
    /// Bytes still to come.
    Length(u64),
    Chunked(ChunkedDecoder),
}

/// How a proxied request ended, for the connection loop.
enum Proxied {
    /// The response was sent and logged; the connection carries the next request.
    Done,
    /// The connection must close: the response was sent in part or without keepalive, or
    /// the client went away.
    Close,
    /// Nothing was sent: this response goes out the usual way (through error_page).
    Answer(Response),
}

/// What the access log line of a request refused before its head was parsed says.
struct Refused {
    status: u16,
    /// Bytes sent, and of them the body's.
    sent: u64,
    body: u64,
    /// For a head that stopped coming: when its first byte came.
    waited: Option<Instant>,
}

/// One proxy round of a request: the first, or an error_page target proxied after an
/// earlier round was answered with an error.
#[derive(Clone, Copy)]
struct Round {
    /// Only the first round reads the client's body. A later one sends again the body the
    /// first read whole, as nginx sends its kept body to an error_page's upstream (a GET's
    /// too); a body streamed to the first upstream is not kept.
    first: bool,
    /// An earlier answer, or the error the page answers, closes the connection (nginx
    /// closes after 400, 413, 414, 500 and 501 whatever page answers them).
    close: bool,
}

/// Reads the first bytes of the next request on an idle keepalive connection. Over plain TCP
/// the connection's buffers are given back while it waits, as nginx frees a keepalive
/// connection's buffers, and taken again when bytes come: ten thousand idle connections
/// then hold no buffers. (A TLS connection keeps them: rustls holds its own.)
async fn read_idle(
    stream: &mut Stream,
    buf: &mut BytesMut,
    out: &mut BytesMut,
) -> std::io::Result<usize> {
    if let Stream::Plain(tcp) = stream {
        if buf.is_empty() {
            *buf = BytesMut::new();
            *out = BytesMut::new();
            // Polled for readiness, not awaited with `readable()`, whose future holds a waiter
            // of its own (152 bytes) in every idle connection.
            std::future::poll_fn(|cx| tcp.poll_read_ready(cx)).await?;
            buf.reserve(FIRST_READ);
            out.reserve(FIRST_OUT);
        }
    }
    stream.read_buf(buf).await
}

/// Resolves when the worker's graceful stop begins, or at its next tick. Boxed, and made only
/// by a connection that waits between requests: its size in every connection's future took
/// the task into tokio's next size of allocation.
type IdleWake = Pin<Box<dyn Future<Output = Woken>>>;

/// Why an idle keepalive connection's wait ended without bytes.
enum Woken {
    /// The worker's graceful stop began.
    Stop,
    /// The worker's clock ticked: a connection that waited through two ticks parks.
    Tick,
}

/// A connection over TLS does not park, and so does not count ticks.
fn idle_wake(worker: &Rc<Worker>, ticks: bool) -> IdleWake {
    let mut stopping = worker.stopping.clone();
    let worker = worker.clone();
    Box::pin(async move {
        tokio::select! {
            biased;
            _ = stopping.wait_for(|s| *s) => Woken::Stop,
            _ = worker.parking.ticked(), if ticks => Woken::Tick,
        }
    })
}

/// How a wait for bytes of a request head ended, short of its deadline.
enum Waited {
    Read(std::io::Result<usize>),
    Woken(Woken),
}

/// What follows a request on its connection.
enum Next {
    /// Another request, waited for this long.
    Keep(Duration),
    Close,
}

enum HeadRead {
    Head(RequestHead),
    /// Closed, timed out, or told to stop while idle: close quietly.
    Close,
    Bad(RequestError),
    /// Idle for a second or more over plain TCP: park until this deadline.
    Park(Instant),
}

impl<'c> Connection<'c> {
    /// A parked connection made again, with how long its wait for the next request may still
    /// last; None if its address is no longer listened on.
    fn taken_up(
        guard: &'c ActiveGuard,
        generation: &'c Generation,
        held: park::Held,
    ) -> Option<(Connection<'c>, Duration)> {
        let listens = &generation.http.listens;
        let listen = listens.iter().find(|l| l.addr == held.info.local)?;
        let conn = Connection {
            worker: guard.0.clone(),
            listen,
            // Registered with the reactor again as its wait for the next request begins.
            stream: Stream::Plain(Sock::direct(held.stream)),
            refuse: held.refuse,
            buf: BytesMut::new(),
            out: BytesMut::new(),
            nodelay: held.nodelay,
            watched: held.watched,
            timer: Timer::new(),
            info: held.info,
            stat: &guard.1,
        };
        let left = held.until.saturating_duration_since(Instant::now());
        Some((conn, left.max(TAKEN_UP_WAIT)))
    }

    /// What a connection that parks (with its wait's deadline, from `run`) keeps, its socket
    /// taken out of the reactor. None for a connection that closes, or if the reactor fails to
    /// let go of the socket.
    fn into_held(self, parks: Option<Instant>) -> Option<park::Held> {
        let (Some(until), Stream::Plain(tcp)) = (parks, self.stream) else {
            return None;
        };
        Some(park::Held {
            stream: tcp.into_std().ok()?,
            info: self.info,
            refuse: self.refuse,
            nodelay: self.nodelay,
            watched: self.watched,
            until,
        })
    }

    /// Carries requests until the connection closes, or parks: then the deadline of its wait.
    /// `wait` is how long the wait for a next request may last, if one comes first.
    async fn run(&mut self, wait: Duration) -> Option<Instant> {
        let default = self.listen.servers.find(None).clone();
        let mut keepalive_timeout = wait;
        // The wait for the worker's graceful stop and its tick, made when the connection
        // first waits between requests and again after each tick it saw.
        let mut wake = None;
        loop {
            // nginx's r->pipeline: the request's first bytes came with the one before.
            self.info.pipelined = self.info.requests > 0 && !self.buf.is_empty();
            if self.buf.is_empty() {
                self.stat.set(State::Waiting);
            } else {
                self.stat.request();
            }
            let head = match self.read_head(&default, keepalive_timeout, &mut wake).await {
                HeadRead::Head(h) => {
                    self.stat.set(State::Writing);
                    h
                }
                HeadRead::Close => return None,
                HeadRead::Park(until) => return Some(until),
                HeadRead::Bad(e) => {
                    // Boxed: a rare path, and the largest wait of the loop, which every
                    // idle connection's future would otherwise make room for.
                    Box::pin(self.bad_request(&default, e)).await;
                    return None;
                }
            };
            self.info.requests += 1;
            // A request's part of the connection's work is a future of its own, allocated
            // while the request runs: an idle keepalive connection holds only what waiting
            // for the next head needs, as nginx frees a request's memory between requests.
            match crate::boxed::boxed(|| self.request(head)).await {
                Next::Keep(timeout) => keepalive_timeout = timeout,
                Next::Close => return None,
            }
        }
    }

    /// Serves one request whose head was read, to its access log line and background
    /// subrequests: whether the connection goes on to another, and its keepalive_timeout.
    ///
    /// A function returning an async block rather than an async fn: an async fn keeps its
    /// arguments and the locals they are moved into side by side, the head twice over.
    #[allow(clippy::manual_async_fn)]
    fn request(&mut self, head: RequestHead) -> impl Future<Output = Next> + use<'_, 'c> {
        async move {
            let start = Instant::now();
            // Lossy, so a host that is not UTF-8 still matches wildcard and regex names by
            // its other bytes, as nginx matches bytewise; the copy is made only for such hosts.
            let server = self
                .listen
                .servers
                .find(head.host_bytes().map(String::from_utf8_lossy).as_deref())
                .clone();
            let worker = self.worker.clone();
            let info = self.info.clone();
            let mut req = Request::new(&worker, &server, &info, head, start);
            let mut resp = match self.refuse {
                Some(code) => req.refuse_client_certificate(code),
                None => req.run().await,
            };
            // An upstream that fails is answered through error_page, whose target may be
            // proxied too and fail again: each round's answer is proxied in its turn until
            // one is a response of our own. error_page allows one redirect (or at most
            // nginx's limit with recursive_error_pages), so the rounds are few.
            let mut round = Round {
                first: true,
                close: false,
            };
            while let Body::Proxy(_) = resp.body {
                round.close |= resp.close;
                let Body::Proxy(plan) = std::mem::replace(&mut resp.body, Body::Empty) else {
                    break;
                };
                match self.proxy(&mut req, plan, round).await {
                    Proxied::Answer(r) => {
                        resp = r;
                        resp.close |= round.close;
                        round.first = false;
                    }
                    Proxied::Close => {
                        crate::subrequest::run_background(&mut req).await;
                        return Next::Close;
                    }
                    Proxied::Done => {
                        // Copies of the request (`mirror`), before the next request.
                        crate::subrequest::run_background(&mut req).await;
                        self.set_nodelay();
                        return Next::Keep(req.loc().keepalive_timeout);
                    }
                }
            }
            let loc = req.loc().clone();
            let mut keep_alive = req.head().keep_alive()
                && !resp.close
                && !loc.keepalive_timeout.is_zero()
                && self.info.requests < loc.keepalive_requests
                && req.started().duration_since(self.info.started) <= loc.keepalive_time
                && !*self.worker.stopping.borrow();
            // A proxy round has taken the body, or left the connection to close.
            let mut proxied = !round.first;
            // A copy of the request that takes the body (`mirror`) has it read whole, as
            // nginx's mirror reads it before the content.
            if !proxied && req.copies_body() {
                if !self.ask_for_body(&req).await {
                    return Next::Close;
                }
                match self.read_body_whole(&mut req).await {
                    Ok(b) => req.keep_request_body(&b),
                    // As nginx's mirror, which makes its copies once the body is read.
                    Err(r) => {
                        req.take_background();
                        resp = r;
                    }
                }
                proxied = true;
            }
            // A response made of the request's body (an API write), once it is read.
            // (What makes it stays in the response while the body is read, so that the request's
            // future holds nothing more across the read.)
            if let Body::MadeOfRequest(_) = resp.body {
                let body = if proxied {
                    Ok(req.read_request_body().unwrap_or_default())
                } else if !self.ask_for_body(&req).await {
                    return Next::Close;
                } else {
                    proxied = true;
                    self.read_body_whole(&mut req).await
                };
                if let Body::MadeOfRequest(make) = std::mem::replace(&mut resp.body, Body::Empty) {
                    resp = match body {
                        Ok(b) => make(b),
                        Err(r) => r,
                    };
                }
            }
            let mut discard = match req.head().body() {
                _ if proxied => None,
                BodyKind::Length(n) if n > 0 => Some(Discard::Length(n)),
                BodyKind::Chunked => Some(Discard::Chunked(ChunkedDecoder::new())),
                _ => None,
            };
            // Like nginx, look at the body bytes that came with the head before answering: a
            // broken chunked body is answered with 400 even where the body is not used.
            if let Some(d) = discard.as_mut() {
                match self.discard_buffered(d) {
                    Ok(true) => discard = None,
                    Ok(false) => {}
                    Err(e) => {
                        req.log_client_error(e.reason());
                        resp = Response::error_page(400, 400, loc.server_tokens);
                        discard = None;
                        keep_alive = false;
                    }
                }
            }
            if matches!(resp.status, 400 | 413 | 414 | 500 | 501)
                || req.head().version() == Version::Http09
            {
                keep_alive = false;
            }
            req.not_modified(&mut resp);
            keep_alive &= !resp.close;
            req.add_headers(&mut resp);
            req.recode(&mut resp).await;
            // nginx closes without a response (`return 444`, a body filter that failed, 408 and
            // 499), and logs the request with the status.
            if crate::request::no_response(&resp) {
                req.log_access(&resp, 0);
                return Next::Close;
            }
            if matches!(resp.body, Body::Stream(_))
                && resp.content_length.is_none()
                && !req.is_head()
            {
                // A body of no known length: chunked over HTTP/1.1, to the close before.
                resp.chunked = req.head().version() == Version::Http11 && loc.chunked;
            }
            // A response with neither a length nor a status that forbids a body ends where
            // the connection does: a client must never wait for bytes nobody will send.
            if !resp.chunked && !resp.is_delimited(req.is_head()) {
                keep_alive = false;
            }
            resp.keep_alive = keep_alive;
            // An error answered before the body is read needs no body: no 100 Continue then.
            let send_continue =
                req.head().expect_continue() && discard.is_some() && resp.status < 400;
            let sent = self.send(&req, &mut resp, send_continue, &loc).await;
            // Trailers a response did not end with (HTTP/1.0) are read all the same, for
            // `$sent_trailer_*`, as nginx's trailers filter reads them.
            if !(req.is_head() || matches!(resp.status, 204 | 304)) {
                req.read_trailers();
            }
            if sent.is_err() {
                req.set_incomplete();
            }
            req.log_access(&resp, *sent.as_ref().unwrap_or(&0));
            crate::subrequest::run_background(&mut req).await;
            if sent.is_err() || !keep_alive {
                if discard.is_some() || (proxied && !matches!(req.head().body(), BodyKind::None)) {
                    self.linger().await;
                }
                return Next::Close;
            }
            if let Some(d) = discard {
                if !self.discard_rest(d, loc.client_body_timeout).await {
                    return Next::Close;
                }
            }
            // The next response may follow an unacknowledged one: Nagle would hold it back.
            self.set_nodelay();
            Next::Keep(loc.keepalive_timeout)
        }
    }

    /// Logs a head that stopped coming, as nginx logs it: 408 when it timed out, 400 when the
    /// client closed, each with what came of it. A connection that sent nothing is not a
    /// request.
    fn log_unfinished_head(&self, server: &ServerConf, status: u16, first_byte: Option<Instant>) {
        if let Some(since) = first_byte {
            let refused = Refused {
                status,
                sent: 0,
                body: 0,
                waited: Some(since),
            };
            self.log_refused(server, refused);
        }
    }

    /// Reads until a whole head is parsed. The first bytes of a request may take
    /// `keepalive_timeout` to come (after the first request) or `client_header_timeout`; the
    /// rest of the head must come within `client_header_timeout` of the first byte.
    async fn read_head(
        &mut self,
        server: &ServerConf,
        idle_timeout: Duration,
        wake: &mut Option<IdleWake>,
    ) -> HeadRead {
        // The head's deadline, and when it began, once its first bytes came.
        let mut deadline = None;
        let mut first_byte = None;
        // Between requests: the wait's deadline, and the worker's ticks when it began.
        let mut waiting = None;
        let plain = matches!(self.stream, Stream::Plain(_));
        loop {
            match parse_request_head(&mut self.buf, &server.head_limits) {
                Ok(Some(h)) => return HeadRead::Head(h),
                Ok(None) => {}
                Err(e) => return HeadRead::Bad(e),
            }
            let idle = self.buf.is_empty();
            let keepalive = idle && self.info.requests > 0;
            let until = match (keepalive, deadline) {
                (true, _) => {
                    let start = || (Instant::now() + idle_timeout, self.worker.parking.ticks());
                    waiting.get_or_insert_with(start).0
                }
                (false, Some(d)) => d,
                (false, None) => {
                    let now = Instant::now();
                    let d = now + server.client_header_timeout;
                    if !idle {
                        deadline = Some(d);
                        first_byte = Some(now);
                    }
                    d
                }
            };
            // Between requests, reads go to the start of the buffer again once the last
            // request's head is gone, as nginx reuses its header buffer: the same few cache
            // lines every time, and no allocation.
            if idle {
                let _ = self.buf.try_reclaim(FIRST_READ);
            }
            // Room for a head; a longer one grows the buffer within the head limits. A wait
            // between requests over plain TCP takes its buffer once bytes come.
            if self.buf.capacity() == self.buf.len() && !(keepalive && plain) {
                self.buf.reserve(READ_CHUNK);
            }
            let (stream, buf, out) = (&mut self.stream, &mut self.buf, &mut self.out);
            // An idle keepalive connection closes when a graceful stop begins, and parks
            // once it has waited through two of the worker's ticks.
            let woken = match keepalive {
                true => Some(
                    wake.get_or_insert_with(|| idle_wake(&self.worker, plain))
                        .as_mut(),
                ),
                false => None,
            };
            let read = async {
                match woken {
                    Some(woken) => tokio::select! {
                        biased;
                        r = read_idle(stream, buf, out) => Waited::Read(r),
                        w = woken => Waited::Woken(w),
                    },
                    None => Waited::Read(stream.read_buf(buf).await),
                }
            };
            match self.timer.run_until(until.into(), read).await {
                // The head's deadline is set at the top of the loop, if the bytes read are
                // not a whole head.
                Ok(Waited::Read(Ok(n))) if n > 0 => {
                    if idle {
                        self.stat.request();
                    }
                }
                Ok(Waited::Read(Ok(_))) => {
                    if !idle {
                        self.log(Level::Info, "client prematurely closed connection while reading client request line");
                        self.log_unfinished_head(server, 400, first_byte);
                    }
                    return HeadRead::Close;
                }
                Ok(Waited::Read(Err(_))) => {
                    if !idle {
                        self.log_unfinished_head(server, 400, first_byte);
                    }
                    return HeadRead::Close;
                }
                Ok(Waited::Woken(Woken::Stop)) => return HeadRead::Close,
                Ok(Waited::Woken(Woken::Tick)) => {
                    // The wait is made again for the next tick; the tick may have come while
                    // the connection was busy, before this wait began.
                    *wake = None;
                    if let Some((until, since)) = waiting {
                        if self.worker.parking.ticks() >= since + 2 {
                            self.stat.set(State::Waiting);
                            return HeadRead::Park(until);
                        }
                    }
                }
                Err(_) => {
                    if !idle || self.info.requests == 0 {
                        self.log(Level::Info, "client timed out (110: Connection timed out) while reading client request headers");
                    }
                    if !idle {
                        self.log_unfinished_head(server, 408, first_byte);
                    }
                    return HeadRead::Close;
                }
            }
        }
    }

    async fn bad_request(&mut self, server: &Arc<ServerConf>, e: RequestError) {
        self.log(Level::Info, e.reason());
        let status = e.status();
        let page = e.page_code();
        let tokens = server.conf.server_tokens;
        let mut resp = Response::error_page(page, status, tokens);
        resp.keep_alive = false;
        resp.write_head(
            &mut self.out,
            self.worker.dates.borrow_mut().get(),
            tokens,
            None,
        );
        let head_len = self.out.len() as u64;
        let body = resp.body_bytes();
        let body_len = body.len() as u64;
        let sent = self.write_out(Some(body), server.conf.send_timeout).await;
        if sent.is_ok() {
            self.info.requests += 1;
            let refused = Refused {
                status,
                sent: head_len + body_len,
                body: body_len,
                waited: None,
            };
            self.log_refused(server, refused);
        }
        self.linger().await;
    }

    /// The access log line of a request refused before its head was parsed, as nginx writes
    /// one: `$request` is what came of the request line.
    fn log_refused(&self, server: &ServerConf, refused: Refused) {
        let Refused {
            status,
            sent,
            body,
            waited,
        } = refused;
        let phases = Phases::of_server(server);
        if !phases.logs(&server.conf.modules) {
            return;
        }
        /// Longest request line logged for a refused request.
        const LINE_MAX: usize = 8192;
        let line_end = self
            .buf
            .iter()
            .take(LINE_MAX)
            .position(|&b| b == b'\r' || b == b'\n');
        let request = &self.buf[..line_end.unwrap_or(self.buf.len().min(LINE_MAX))];
        let mut lookup = |v: &Var, out: &mut Vec<u8>| match v {
            Var::Request => out.extend_from_slice(request),
            // The error page went out: nginx's request completed.
            Var::RequestCompletion => out.extend_from_slice(b"OK"),
            Var::Status => out.extend_from_slice(status.to_string().as_bytes()),
            Var::BytesSent => out.extend_from_slice(sent.to_string().as_bytes()),
            Var::BodyBytesSent => out.extend_from_slice(body.to_string().as_bytes()),
            Var::ServerName => out.extend_from_slice(server.name.as_bytes()),
            // A head that stopped coming counts the lines that came whole, and its time.
            Var::RequestLength if waited.is_some() => {
                let whole = self
                    .buf
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |lf| lf + 1);
                out.extend_from_slice(whole.to_string().as_bytes());
            }
            Var::RequestTime => crate::request::write_seconds(
                out,
                waited.map_or(Duration::ZERO, |since| since.elapsed()),
            ),
            other => crate::request::connection_var(other, &self.info, out),
        };
        phases.log(
            &self.worker,
            &server.conf.modules,
            None,
            &mut lookup,
            &|v: &Var| v.empty_is_a_value(),
        );
    }

    /// A message of the connection, outside any request: to the default server's error log,
    /// as nginx's connection log is.
    fn log(&self, level: Level, message: &str) {
        let server = self.listen.servers.find(None);
        let log = server.conf.error_log(&self.worker.shared.error_log);
        if log.enabled(level) {
            log.write(
                level,
                Some(self.info.id),
                &format!(
                    "{message}, client: {}, server: {}",
                    self.info.peer.ip(),
                    server.name
                ),
            );
        }
    }

    /// Writes the response: the head and a small body in one writev, a file body after the head
    /// with sendfile. Returns the bytes sent.
    async fn send(
        &mut self,
        req: &Request<'_>,
        resp: &mut Response,
        send_continue: bool,
        loc: &crate::conf::LocConf,
    ) -> std::io::Result<u64> {
        self.out.clear();
        if send_continue {
            self.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        let head_only = req.is_head() || resp.status == 304 || resp.status == 204;
        // Trailers (`add_trailer`) end a chunked body: the length goes.
        if !head_only && req.expects_trailers() && req.is_http11() && loc.chunked {
            resp.content_length = None;
            resp.chunked = true;
            let body = std::mem::replace(&mut resp.body, Body::Empty);
            resp.body = crate::encode::pieces(body);
        }
        // HTTP/0.9 has no status line and no headers: the body alone.
        if req.head().version() != Version::Http09 {
            let mut dates = self.worker.dates.borrow_mut();
            resp.write_head(
                &mut self.out,
                dates.get(),
                loc.server_tokens,
                loc.keepalive_header,
            );
        }
        let head_len = self.out.len() as u64;
        let timeout = loc.send_timeout;
        if let Some(pace) = req.pace() {
            let body = std::mem::replace(&mut resp.body, Body::Empty);
            let body = if head_only { Body::Empty } else { body };
            return self
                .send_paced(req, resp.chunked, body, pace, timeout)
                .await;
        }
        match std::mem::replace(&mut resp.body, Body::Empty) {
            Body::Empty | Body::Proxy(_) | Body::MadeOfRequest(_) => {
                self.write_out(None, timeout).await?;
                Ok(head_len)
            }
            Body::Bytes(b) => {
                let n = b.len() as u64;
                self.write_out(if head_only { None } else { Some(b) }, timeout)
                    .await?;
                Ok(head_len + if head_only { 0 } else { n })
            }
            Body::File { file, offset, len } => {
                if file.contents.is_none() {
                    self.set_nodelay();
                }
                if head_only {
                    self.write_out(None, timeout).await?;
                    return Ok(head_len);
                }
                if let Some(contents) = &file.contents {
                    let start = offset as usize;
                    let body = contents.slice(start..start + len as usize);
                    self.write_out(Some(body), timeout).await?;
                    return Ok(head_len + len);
                }
                // Over TLS the head goes in the file's first records (so a file that cannot
                // be read sends nothing, and the head shares the file's deadline); over plain
                // TCP it is written before sendfile.
                if matches!(self.stream, Stream::Plain(_)) {
                    self.write_out(None, timeout).await?;
                }
                let sent = tokio::time::timeout(
                    send_deadline(timeout, len),
                    crate::tls::send_file(&mut self.stream, &self.out, &file.file, offset, len),
                )
                .await;
                self.out.clear();
                sent.map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
                Ok(head_len + len)
            }
            Body::Stream(mut source) => {
                self.set_nodelay();
                if head_only {
                    self.write_out(None, timeout).await?;
                    return Ok(head_len);
                }
                let mut sent = 0;
                let mut piece = BytesMut::new();
                loop {
                    piece.clear();
                    let more = match source.next(&mut piece) {
                        Ok(more) => more,
                        Err(e) => {
                            req.log(
                                Level::Error,
                                &format!("{e} while sending response to client"),
                            );
                            return Err(e);
                        }
                    };
                    if resp.chunked && !piece.is_empty() {
                        let (h, n) = chunk_header(piece.len());
                        self.out.extend_from_slice(&h[..n]);
                        self.out.extend_from_slice(&piece);
                        self.out.extend_from_slice(b"\r\n");
                    } else {
                        self.out.extend_from_slice(&piece);
                    }
                    if !more && resp.chunked {
                        req.last_chunk(&mut self.out);
                    }
                    sent += self.out.len() as u64;
                    self.write_out(None, timeout).await?;
                    req.set_streamed(sent - head_len);
                    if !more {
                        return Ok(sent);
                    }
                }
            }
            Body::Parts(parts) => {
                self.set_nodelay();
                let mut sent = head_len;
                self.write_out(None, timeout).await?;
                if head_only {
                    return Ok(sent);
                }
                for p in parts {
                    match p {
                        crate::request::Part::Bytes(b) => {
                            sent += b.len() as u64;
                            tokio::time::timeout(timeout, self.stream.write_all(&b))
                                .await
                                .map_err(|_| {
                                    std::io::Error::from(std::io::ErrorKind::TimedOut)
                                })??;
                        }
                        crate::request::Part::File { file, offset, len } => {
                            sent += len;
                            tokio::time::timeout(
                                send_deadline(timeout, len),
                                crate::tls::send_file(
                                    &mut self.stream,
                                    &[],
                                    &file.file,
                                    offset,
                                    len,
                                ),
                            )
                            .await
                            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
                        }
                    }
                }
                // Over TLS, the last records may still wait in rustls.
                tokio::time::timeout(timeout, self.stream.flush())
                    .await
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
                Ok(sent)
            }
        }
    }

    /// [`send`](Self::send) at the pace of `limit_rate`: the head in `self.out`, then the
    /// body, every byte through the pace (no sendfile).
    async fn send_paced(
        &mut self,
        req: &Request<'_>,
        chunked: bool,
        body: Body,
        mut pace: crate::pace::Pace,
        timeout: Duration,
    ) -> std::io::Result<u64> {
        self.set_nodelay();
        let head = std::mem::take(&mut self.out);
        let head_len = head.len() as u64;
        let mut sent = head_len;
        let result = pace.write_all(&mut self.stream, &[&head], timeout).await;
        self.out = head;
        self.out.clear();
        result?;
        match body {
            Body::Empty | Body::Proxy(_) | Body::MadeOfRequest(_) => {}
            Body::Bytes(b) => {
                pace.write_all(&mut self.stream, &[&b], timeout).await?;
                sent += b.len() as u64;
            }
            Body::File { file, offset, len } => {
                match &file.contents {
                    Some(contents) => {
                        let start = offset as usize;
                        let b = &contents[start..start + len as usize];
                        pace.write_all(&mut self.stream, &[b], timeout).await?;
                    }
                    None => {
                        pace.write_file(&mut self.stream, &file.file, offset, len, timeout)
                            .await?;
                    }
                }
                sent += len;
            }
            Body::Stream(mut source) => {
                let mut piece = BytesMut::new();
                loop {
                    piece.clear();
                    let more = source.next(&mut piece).inspect_err(|e| {
                        req.log(
                            Level::Error,
                            &format!("{e} while sending response to client"),
                        );
                    })?;
                    let mut out = BytesMut::new();
                    if chunked && !piece.is_empty() {
                        let (h, n) = chunk_header(piece.len());
                        out.extend_from_slice(&h[..n]);
                        out.extend_from_slice(&piece);
                        out.extend_from_slice(b"\r\n");
                    } else {
                        out.extend_from_slice(&piece);
                    }
                    if !more && chunked {
                        req.last_chunk(&mut out);
                    }
                    pace.write_all(&mut self.stream, &[&out], timeout).await?;
                    sent += out.len() as u64;
                    req.set_streamed(sent - head_len);
                    if !more {
                        break;
                    }
                }
            }
            Body::Parts(parts) => {
                for p in parts {
                    match p {
                        crate::request::Part::Bytes(b) => {
                            pace.write_all(&mut self.stream, &[&b], timeout).await?;
                            sent += b.len() as u64;
                        }
                        crate::request::Part::File { file, offset, len } => {
                            pace.write_file(&mut self.stream, &file.file, offset, len, timeout)
                                .await?;
                            sent += len;
                        }
                    }
                }
            }
        }
        Ok(sent)
    }

    /// Runs a proxied request. A [`Proxied::Answer`] is an error whose request body, if
    /// any, is already read.
    async fn proxy(
        &mut self,
        req: &mut Request<'_>,
        mut plan: Box<crate::upstream::Plan>,
        round: Round,
    ) -> Proxied {
        let loc = req.loc().clone();
        let kind = req.head().body();
        let kept = match round.first {
            true => None,
            false => req.read_request_body(),
        };
        plan.pass_body &= round.first || kept.is_some();
        // A copy of the request that takes the body has it read whole first (`mirror`).
        let copies = round.first && req.copies_body();
        // A later round sends the body the first read: nothing more is asked of the client.
        if round.first && (plan.pass_body || copies) && !self.ask_for_body(req).await {
            return Proxied::Close;
        }
        let mut body = crate::upstream::ReqBody::None;
        let mut read_whole = false;
        if let Some(kept) = kept {
            if plan.pass_body {
                body = crate::upstream::ReqBody::Whole(kept);
            }
        } else if plan.pass_body
            && plan.streams_body(kind)
            && !crate::upstream::preread_whole(kind, &self.buf)
            && !copies
        {
            body = crate::upstream::ReqBody::Streamed(crate::upstream::Streamed {
                kind,
                timeout: loc.client_body_timeout,
                max: loc.client_max_body_size,
            });
        } else if plan.pass_body || copies {
            match self.read_body_whole(req).await {
                Ok(b) if plan.pass_body => {
                    req.keep_body_for_later(&b);
                    body = crate::upstream::ReqBody::Whole(b);
                }
                Ok(b) => req.keep_request_body(&b),
                Err(r) => {
                    if copies {
                        req.take_background();
                    }
                    return Proxied::Answer(r);
                }
            }
            read_whole = true;
        }
        // Whether the connection's next bytes are the next request: the body was read whole
        // here, by an earlier round, or there is none. A streamed body may be cut anywhere.
        let body_done = !round.first || matches!(kind, BodyKind::None) || read_whole;
        let keep_alive = req.head().keep_alive()
            && !loc.keepalive_timeout.is_zero()
            && self.info.requests < loc.keepalive_requests
            && req.started().duration_since(self.info.started) <= loc.keepalive_time
            && !*self.worker.stopping.borrow()
            && (plan.pass_body || body_done)
            && !round.close;
        let mut client = crate::upstream::Client::new(
            &mut self.stream,
            &mut self.out,
            &mut self.buf,
            keep_alive,
            loc.send_timeout,
            req.is_http11() && loc.chunked,
            loc.keepalive_header,
        )
        .paced(req.pace());
        match crate::upstream::serve(&mut client, req, plan, body).await {
            crate::upstream::Finish::Sent {
                status,
                sent,
                body,
                keep_alive,
                attempts,
            } => {
                req.set_upstream_attempts(attempts);
                let mut r = Response::new(req.status_sent(status));
                r.content_length = Some(body);
                req.log_access(&r, sent);
                if keep_alive {
                    Proxied::Done
                } else {
                    Proxied::Close
                }
            }
            crate::upstream::Finish::Redirect {
                uri,
                fields,
                attempts,
            } => {
                req.set_upstream_attempts(attempts);
                let mut r = req.accel_redirect(uri, fields);
                // The request's body, unread, must not be read as the next request.
                r.close |= !body_done;
                Proxied::Answer(r)
            }
            crate::upstream::Finish::ClientClosed { attempts } => {
                req.set_upstream_attempts(attempts);
                req.log_access(&Response::new(crate::upstream::CLIENT_CLOSED), 0);
                Proxied::Close
            }
            crate::upstream::Finish::Status {
                code,
                body_read,
                attempts,
                challenge,
            } => {
                req.set_upstream_attempts(attempts);
                let mut r = req.finalize_upstream_error(code, challenge);
                // A body left unread must not be read as the next request.
                if !body_read || !body_done {
                    r.close = true;
                }
                Proxied::Answer(r)
            }
        }
    }

    /// As nginx, a client waiting to be asked for its body (`Expect: 100-continue`) is asked
    /// once the body is to be read. `false`: the connection failed.
    async fn ask_for_body(&mut self, req: &Request<'_>) -> bool {
        if !req.head().expect_continue() || req.head().version() != Version::Http11 {
            return true;
        }
        let ask = self.stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
        matches!(
            tokio::time::timeout(req.loc().send_timeout, ask).await,
            Ok(Ok(()))
        )
    }

    /// Reads the request's body whole, bounded by `client_max_body_size`; `Err` is the error
    /// to answer, after which the connection closes.
    async fn read_body_whole(&mut self, req: &mut Request<'_>) -> Result<Bytes, Response> {
        let (timeout, max) = (
            req.loc().client_body_timeout,
            req.loc().client_max_body_size,
        );
        let read = crate::upstream::collect_body(
            &mut self.stream,
            &mut self.buf,
            req.head().body(),
            timeout,
            max,
        )
        .await;
        match read {
            Ok((body, taken)) => {
                req.body_taken(taken);
                Ok(body)
            }
            Err(code) => {
                let mut r = req.finalize_error(code);
                r.close = true;
                Err(r)
            }
        }
    }

    fn set_nodelay(&mut self) {
        if !self.nodelay {
            self.nodelay = true;
            let _ = self.stream.set_nodelay();
        }
    }

    /// Writes `self.out` and then `body`, in one writev when the socket takes them at once;
    /// over TLS, in as few records as rustls makes of them.
    async fn write_out(&mut self, body: Option<Bytes>, timeout: Duration) -> std::io::Result<()> {
        // Over TLS rustls makes records across the buffers it is given: a head and a small body
        // go out in one record, as nginx's SSL buffer sends them.
        let body = body.unwrap_or_default();
        // Most responses fit in the socket buffer: try once without arming a timer.
        let first = match &self.stream {
            Stream::Plain(s) => s.try_writev(&[
                std::io::IoSlice::new(&self.out),
                std::io::IoSlice::new(&body),
            ]),
            Stream::Tls(_) => Ok(0),
        };
        let mut written = match first {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => {
                self.out.clear();
                return Err(e);
            }
        };
        let total = self.out.len() + body.len();
        let result = if written == total {
            Ok(())
        } else {
            let write = async {
                while written < total {
                    let h = &self.out[written.min(self.out.len())..];
                    let b = &body[written.saturating_sub(self.out.len())..];
                    let bufs = [std::io::IoSlice::new(h), std::io::IoSlice::new(b)];
                    let n = self.stream.write_vectored(&bufs).await?;
                    if n == 0 {
                        return Err(std::io::Error::from(std::io::ErrorKind::WriteZero));
                    }
                    written += n;
                }
                // rustls may hold records that the socket did not take yet.
                self.stream.flush().await
            };
            tokio::time::timeout(timeout, write)
                .await
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
        };
        // Cleared, not split off: the buffer keeps its capacity for the next response.
        self.out.clear();
        result
    }

    /// Drops the body bytes already read. Returns whether the body is complete.
    fn discard_buffered(&mut self, d: &mut Discard) -> Result<bool, RequestError> {
        match d {
            Discard::Length(n) => {
                let take = (*n).min(self.buf.len() as u64);
                let _ = self.buf.split_to(take as usize);
                *n -= take;
                Ok(*n == 0)
            }
            Discard::Chunked(decoder) => loop {
                match decoder.decode(&mut self.buf)? {
                    Chunk::Done => return Ok(true),
                    Chunk::Data(_) => {}
                    Chunk::NeedMore => return Ok(false),
                }
            },
        }
    }

    /// Reads and drops the rest of the request body so the next request on the connection can
    /// be read. Returns false when the connection must close.
    async fn discard_rest(&mut self, mut d: Discard, timeout: Duration) -> bool {
        if matches!(d, Discard::Length(n) if n > DISCARD_MAX) {
            return false;
        }
        let mut read = 0u64;
        loop {
            match self.discard_buffered(&mut d) {
                Ok(true) => return true,
                Ok(false) => {}
                Err(_) => return false,
            }
            if read > DISCARD_MAX {
                return false;
            }
            let before = self.buf.len();
            if !self.read_more(timeout).await {
                return false;
            }
            read += (self.buf.len() - before) as u64;
        }
    }

    async fn read_more(&mut self, timeout: Duration) -> bool {
        self.buf.reserve(READ_CHUNK);
        matches!(tokio::time::timeout(timeout, self.stream.read_buf(&mut self.buf)).await, Ok(Ok(n)) if n > 0)
    }

    /// nginx's lingering close: stop writing, then read and drop what the client still sends
    /// for a while, so that closing with unread data does not reset the connection before the
    /// client has read the response.
    async fn linger(&mut self) {
        let _ = self.stream.shutdown().await;
        let deadline = Instant::now() + LINGERING_TIME;
        loop {
            // What comes now is dropped; the read buffer serves as scratch space.
            self.buf.clear();
            self.buf.reserve(READ_CHUNK);
            let left = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_secs(5));
            if left.is_zero() {
                return;
            }
            match tokio::time::timeout(left, self.stream.read_buf(&mut self.buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
        }
    }
}

/// send_timeout bounds the time between two successful writes; a big file may take longer in
/// total, so the whole transfer is given one timeout per 64 KiB at least.
fn send_deadline(timeout: Duration, len: u64) -> Duration {
    timeout.saturating_mul(u32::try_from(len / (64 * 1024) + 1).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns, without calling it.
    fn returned_size<A, B, R>(_: &impl FnOnce(A, B) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// A request's future is held, boxed, from its head to its log line: in mimalloc's 4 KB
    /// size class, a request waiting for its upstream holds 1 KB less than in the next one
    /// (BENCHMARKS.md, "Requests in flight through the proxy"). What grows it past that is a
    /// state that should be boxed where it is awaited, or a local kept across many awaits.
    #[test]
    fn a_requests_future_fits_in_4_kb() {
        let size = returned_size::<&mut Connection<'static>, RequestHead, _>(&Connection::request);
        assert!(size <= 4096, "the request's future is {size} bytes");
    }

    /// Every connection holds its future while it waits for a request and while its requests
    /// run (BENCHMARKS.md, "Idle connections that are no task"). The future is boxed on its
    /// own as its task is spawned, in mimalloc's 1,024-byte class. The bound of 904 bytes
    /// leaves room for tokio's 120 bytes of header and trailer, rounded up to 128, were it the
    /// task's body; a future that grows past it holds a state that should be boxed where it
    /// is awaited.
    #[test]
    fn a_connections_task_fits_in_1_kb() {
        fn size<R>(
            _: &impl FnOnce(ActiveGuard, Arc<Generation>, usize, std::net::TcpStream, SocketAddr) -> R,
        ) -> usize {
            std::mem::size_of::<R>()
        }
        fn resumed<R>(_: &impl FnOnce(park::Parked) -> R) -> usize {
            std::mem::size_of::<R>()
        }
        let (new, taken_up) = (size(&serve), resumed(&resume));
        assert!(new <= 904, "a new connection's future is {new} bytes");
        assert!(
            taken_up <= 904,
            "a parked connection's future, taken up, is {taken_up} bytes"
        );
    }
}
