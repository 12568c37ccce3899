//! gRPC's exchange (`grpc_pass`): one request to a gRPC server over its own HTTP/2
//! connection.
//!
//! A peer from the balancer, a connection (an idle one of the group's with `keepalive`, as
//! nginx keeps them, else a new one: TCP, TLS offering `h2` for `grpcs://`, or a socket, and
//! HTTP/2's handshake), then the request the module built. The client's body goes
//! beside the response rather than before it: the DATA frames of an HTTP/2 client are relayed
//! as they come while the server's come back, so calls that stream both ways work as they do
//! through nginx. The response's head is passed by the proxy's rules (`write_proxied_head`),
//! its DATA frames as they come, and its trailers end the response (`grpc-status`). A failure
//! before the head is a status (502, 504) that error_page may answer, and another peer is
//! tried as `grpc_next_upstream` says while the body can still be sent again.

use std::future::Future;
use std::pin::{pin, Pin};
use std::time::{Duration, Instant};

use ::h2::client::SendRequest;
use ::h2::{Reason, RecvStream, SendStream};
use bytes::{Bytes, BytesMut};
use portcullis_http::{parse_response_head, Framing, ResponseHead};
use portcullis_proxy::upstream::{Key, KeyKind, Outcome};
use portcullis_proxy::Conn;

use super::downstream::Downstream;
use super::exchange::{connect, describe, may_retry, Failure, Finish, ReqBody, Url, CLIENT_CLOSED};
use super::settings::next;
use super::{Attempt, Plan};
use crate::request::Request;
use crate::Level;

/// The HTTP/2 request of a `grpc_pass` location, made in the content phase and sent by
/// each attempt.
pub(crate) struct GrpcRequest {
    pub method: http::Method,
    pub uri: http::Uri,
    pub fields: http::HeaderMap,
}

impl GrpcRequest {
    /// The request for one attempt.
    fn request(&self) -> http::Request<()> {
        let mut r = http::Request::new(());
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.headers_mut() = self.fields.clone();
        r
    }
}

/// The stream and connection windows the exchange opens to the server: a stream's worth of
/// response is read ahead of a slow client, as nginx reads a buffer ahead.
const WINDOW: u32 = 1024 * 1024;

/// The client's body, as the attempts take it.
enum Up {
    None,
    /// Read whole: every attempt sends it.
    Whole(Bytes),
    /// An HTTP/2 client's frames: the first attempt that sends the request takes them.
    Stream(RecvStream),
    /// Taken by an attempt: no other peer can be tried once that request went out.
    Taken,
}

/// How relaying the client's body ended.
enum Pumped {
    Done,
    /// The client's body failed: its status (400, 408, 413, or 499 when the client reset
    /// its stream).
    Client(u16),
    /// The server's stream or connection failed, or its window stayed shut past
    /// grpc_send_timeout, while the body went to it.
    Upstream(std::io::Error),
}

pub(super) async fn serve<D: Downstream>(
    down: &mut D,
    req: &Request<'_>,
    plan: Box<Plan>,
    body: ReqBody,
) -> Finish {
    let Some(grpc) = plan.grpc.as_deref() else {
        unreachable!("gRPC's exchange runs a gRPC plan");
    };
    let mut body = match body {
        ReqBody::Whole(b) => {
            // `$request_body`.
            req.keep_request_body(&b);
            Up::Whole(b)
        }
        ReqBody::Http2(s) if !s.is_end_stream() => Up::Stream(s),
        _ => Up::None,
    };
    let upstream = plan.upstream.clone();
    let local = req.worker().upstreams.borrow_mut().local(&upstream);
    let mut tried = upstream.tried();
    let settings = plan.settings.clone();
    let start = req.start();
    let peers = u32::try_from(upstream.peers().len()).unwrap_or(u32::MAX);
    let max_tries = match settings.next_upstream_tries {
        0 => peers,
        n => n.min(peers),
    };
    let watch = !settings.ignore_client_abort;
    let mut attempts = Vec::new();
    let mut tries = 0u32;
    loop {
        tries += 1;
        let key = match upstream.key_kind() {
            KeyKind::None => Key::None,
            KeyKind::Hash(_) => Key::Bytes(&plan.hash_key),
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
                &Url::new(&plan, &[], upstream.name()),
            );
            attempts.push(Attempt {
                status: Some(502),
                ..Attempt::new(upstream.name().into(), None)
            });
            return status(502, attempts);
        };
        let peer_ref = upstream.peer(peer);
        let url = Url::new(&plan, &[], &peer_ref.name);
        let mut made = Attempt::new(peer_ref.name.clone(), Some((&upstream, peer)));
        // Ends the attempt: the peer released, the attempt kept for `$upstream_*`.
        let mut end = |made: &mut Attempt, outcome: Outcome, status: Option<u16>| {
            let at = Instant::now();
            made.status = status;
            made.response = at - now;
            upstream.release(peer, outcome, at);
            attempts.push(made.clone());
        };
        let retry = |bit: u16, sent: bool| may_retry(&plan, bit, sent, tries, max_tries, start);
        // An idle connection of the group's (`keepalive`), else a new one; a kept one that
        // cannot take a request now (the server closed it, or sent GOAWAY) is dropped before
        // the request goes, and a new one is made.
        let mut pooled = local
            .borrow_mut()
            .h2
            .as_mut()
            .and_then(|p| p.take_unchecked(peer.0, now));
        let sent = loop {
            let reused = pooled.is_some();
            let mut conn = match pooled.take() {
                Some(c) => c,
                None => {
                    let opened = tokio::select! {
                        biased;
                        r = Box::pin(open(&plan, &peer_ref.addr, req, url)) => r,
                        () = down.gone(), if watch => {
                            client_closed(req, url);
                            end(&mut made, Outcome::Ok, None);
                            return Finish::ClientClosed { attempts };
                        }
                    };
                    match opened {
                        Ok(sender) => Conn::new(sender, Instant::now()),
                        Err(why) => break Err(why),
                    }
                }
            };
            made.connect = Some(if reused {
                Duration::ZERO
            } else {
                now.elapsed()
            });
            if reused && !ready_now(&mut conn.stream).await {
                continue;
            }
            conn.requests += 1;
            match conn
                .stream
                .send_request(grpc.request(), matches!(body, Up::None))
            {
                Ok(r) => break Ok((conn, r)),
                Err(_) if reused => continue,
                Err(e) => {
                    req.log_upstream(
                        Level::Error,
                        &format!("{e} while sending request to upstream"),
                        &url,
                    );
                    break Err(Failure::Error);
                }
            }
        };
        let (conn, (response, up)) = match sent {
            Ok(s) => s,
            Err(why) => {
                end(&mut made, Outcome::Failed, Some(why.status()));
                if retry(why.bit(), false) {
                    continue;
                }
                return status(why.status(), attempts);
            }
        };
        let source = match std::mem::replace(&mut body, Up::Taken) {
            Up::Whole(b) => {
                body = Up::Whole(b.clone());
                Up::Whole(b)
            }
            Up::None => {
                body = Up::None;
                Up::None
            }
            taken => taken,
        };
        // A body streamed to this peer cannot go to another.
        let once = matches!(body, Up::Taken);
        let mut pump = pin!(pump(req, up, source, settings.send_timeout));
        let mut pumped = None;
        let mut response = pin!(response);
        // grpc_read_timeout runs once the request went out whole, as nginx sets its timer.
        let head = tokio::select! {
            biased;
            r = after_body(response.as_mut(), pump.as_mut(), &mut pumped, settings.read_timeout) => r,
            () = down.gone(), if watch => {
                client_closed(req, url);
                end(&mut made, Outcome::Ok, None);
                return Finish::ClientClosed { attempts };
            }
        };
        let head = match (head, pumped.take()) {
            (_, Some(Pumped::Client(code))) => {
                end(&mut made, Outcome::Ok, None);
                return match code {
                    CLIENT_CLOSED => Finish::ClientClosed { attempts },
                    _ => status(code, attempts),
                };
            }
            (_, Some(Pumped::Upstream(e))) => {
                let timed_out = e.kind() == std::io::ErrorKind::TimedOut;
                let what = if timed_out {
                    "upstream timed out (110: Connection timed out)".to_owned()
                } else {
                    describe(&e, "send()")
                };
                req.log_upstream(
                    Level::Error,
                    &format!("{what} while sending request to upstream"),
                    &url,
                );
                let why = if timed_out {
                    Failure::Timeout
                } else {
                    Failure::Error
                };
                end(&mut made, Outcome::Failed, Some(why.status()));
                if !once && retry(why.bit(), true) {
                    continue;
                }
                return status(why.status(), attempts);
            }
            (head, done) => {
                pumped = done;
                head
            }
        };
        let why = match head {
            Some(Ok(r)) => Ok(r),
            None => {
                req.log_upstream(
                    Level::Error,
                    "upstream timed out (110: Connection timed out) while reading response header from upstream",
                    &url,
                );
                Err(Failure::Timeout)
            }
            Some(Err(e)) => {
                let what = match e.reason() {
                    Some(r) if e.is_remote() && e.is_reset() => {
                        format!("upstream rejected request with error {}", u32::from(r))
                    }
                    Some(r) if e.is_go_away() => {
                        format!("upstream sent goaway with error {}", u32::from(r))
                    }
                    _ if e.is_io() => "upstream prematurely closed connection".to_string(),
                    _ => format!("upstream sent invalid http2 response: {e}"),
                };
                req.log_upstream(
                    Level::Error,
                    &format!("{what} while reading response header from upstream"),
                    &url,
                );
                Err(if e.is_io() {
                    Failure::Error
                } else {
                    Failure::InvalidHeader
                })
            }
        };
        let response = match why {
            Ok(r) => r,
            Err(why) => {
                end(&mut made, Outcome::Failed, Some(why.status()));
                if !once && retry(why.bit(), true) {
                    continue;
                }
                return status(why.status(), attempts);
            }
        };
        made.header = Some(now.elapsed());
        let (parts, recv) = response.into_parts();
        let head = match response_head(&parts) {
            Ok(h) => h,
            Err(e) => {
                req.log_upstream(
                    Level::Error,
                    &format!("upstream sent invalid header: {e} while reading response header from upstream"),
                    &url,
                );
                end(&mut made, Outcome::Failed, Some(502));
                return status(502, attempts);
            }
        };
        let code = head.status();
        req.keep_upstream_head(&head);
        let bit = next::status_bit(code);
        if bit & settings.next_upstream != 0 && !once && retry(bit, true) {
            let outcome = if bit & next::FAILURE_STATUSES != 0 {
                Outcome::Failed
            } else {
                Outcome::Ok
            };
            end(&mut made, outcome, Some(code));
            continue;
        }
        let outcome = if bit & next::FAILURE_STATUSES & settings.next_upstream != 0 {
            Outcome::Failed
        } else {
            Outcome::Ok
        };
        if settings.intercept_errors && code >= 300 && req.has_error_page(code) {
            end(&mut made, Outcome::Ok, Some(code));
            return status(code, attempts);
        }
        let (length, whole) = forward(down, req, &plan, &head, recv, pump, &mut pumped, url).await;
        made.length = length;
        made.bytes_received = length;
        end(&mut made, outcome, Some(code));
        // The connection carries the next request when this one's answer ended whole.
        if whole {
            if let Some(p) = local.borrow_mut().h2.as_mut() {
                p.put(peer.0, conn, Instant::now());
            }
        }
        let (sent, body) = down.sent();
        return Finish::Sent {
            status: code,
            sent,
            body,
            keep_alive: down.keep_alive(),
            attempts,
        };
    }
}

fn status(code: u16, attempts: Vec<Attempt>) -> Finish {
    Finish::Status {
        code,
        body_read: true,
        attempts,
        challenge: None,
    }
}

fn client_closed(req: &Request<'_>, url: Url<'_>) {
    req.log_upstream(
        Level::Info,
        "epoll_wait() reported that client prematurely closed connection, so upstream connection is closed too",
        &url,
    );
}

/// A new connection to `addr` ready for a request: connected (TLS for `grpcs://`), with
/// HTTP/2's handshake made. Failures are logged as nginx logs them.
async fn open(
    plan: &Plan,
    addr: &portcullis_proxy::PeerAddr,
    req: &Request<'_>,
    url: Url<'_>,
) -> Result<SendRequest<Bytes>, Failure> {
    let timeout = plan.settings.connect_timeout;
    let stream = connect(plan, addr, timeout, req, url).await?;
    handshake(stream, timeout, plan.settings.buffer_size)
        .await
        .map_err(|e| {
            let what = describe(&e, "send()");
            req.log_upstream(
                Level::Error,
                &format!("{what} while sending request to upstream"),
                &url,
            );
            Failure::Error
        })
}

/// Whether a kept connection takes a request now: one the server closed (or sent GOAWAY
/// on) does not.
async fn ready_now(sender: &mut SendRequest<Bytes>) -> bool {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(matches!(
            sender.poll_ready(cx),
            std::task::Poll::Ready(Ok(()))
        ))
    })
    .await
}

/// HTTP/2's handshake on a new connection (the server's heads limited to `head_max`), whose
/// frames a task of the worker then reads and writes until the exchange and the group's
/// idle connections let go of it.
async fn handshake(
    stream: portcullis_proxy::Stream,
    timeout: Duration,
    head_max: usize,
) -> std::io::Result<SendRequest<Bytes>> {
    let shake = ::h2::client::Builder::new()
        // grpc_buffer_size bounds the server's head, as nginx's buffer does.
        .max_header_list_size(u32::try_from(head_max).unwrap_or(u32::MAX))
        .initial_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .enable_push(false)
        .handshake::<_, Bytes>(stream);
    let (sender, connection) = match tokio::time::timeout(timeout, shake).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Err(std::io::Error::other(e)),
        Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
    };
    tokio::task::spawn_local(async move {
        let _ = connection.await;
    });
    let ready = tokio::time::timeout(timeout, sender.ready()).await;
    match ready {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(std::io::Error::other(e)),
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

/// The server's head as the proxy's rules read one: its fields as an HTTP/1.1 head.
fn response_head(parts: &http::response::Parts) -> Result<ResponseHead, String> {
    let code = parts.status.as_u16();
    let mut raw = BytesMut::with_capacity(256);
    raw.extend_from_slice(b"HTTP/1.1 ");
    raw.extend_from_slice(code.to_string().as_bytes());
    raw.extend_from_slice(b" ");
    raw.extend_from_slice(portcullis_http::reason(code).as_bytes());
    raw.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        raw.extend_from_slice(name.as_str().as_bytes());
        raw.extend_from_slice(b": ");
        raw.extend_from_slice(value.as_bytes());
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"\r\n");
    match parse_response_head(&mut raw, usize::MAX) {
        Ok(Some(h)) => Ok(h),
        Ok(None) => Err("incomplete head".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `f`, relaying the client's body meanwhile (until that ends: `done` says how).
async fn beside<F: Future, P: Future<Output = Pumped>>(
    f: F,
    mut pump: Pin<&mut P>,
    done: &mut Option<Pumped>,
) -> F::Output {
    let mut f = pin!(f);
    loop {
        tokio::select! {
            biased;
            r = f.as_mut() => return r,
            p = pump.as_mut(), if done.is_none() => *done = Some(p),
        }
    }
}

/// Runs `f` while the client's body is relayed, then within `timeout` once the body went
/// out whole; `None` when the time ran out or relaying the body failed (`done` says how).
async fn after_body<F: Future, P: Future<Output = Pumped>>(
    f: F,
    mut pump: Pin<&mut P>,
    done: &mut Option<Pumped>,
    timeout: Duration,
) -> Option<F::Output> {
    let mut f = pin!(f);
    while done.is_none() {
        tokio::select! {
            biased;
            r = f.as_mut() => return Some(r),
            p = pump.as_mut() => *done = Some(p),
        }
    }
    match done {
        Some(Pumped::Done) => tokio::time::timeout(timeout, f).await.ok(),
        _ => None,
    }
}

/// Relays the client's body to the server's stream: whole, or frame by frame as the client
/// sends it, read as a body read whole is (client_body_timeout between two frames,
/// client_max_body_size over all, logged alike); the server's window paces it, at most
/// `send_timeout` per wait. A failure resets the server's stream.
async fn pump(
    req: &Request<'_>,
    mut up: SendStream<Bytes>,
    source: Up,
    send_timeout: Duration,
) -> Pumped {
    let mut client = match source {
        Up::None | Up::Taken => return Pumped::Done,
        Up::Whole(b) => {
            return match send_all(&mut up, b, true, send_timeout).await {
                Ok(()) => Pumped::Done,
                Err(e) => {
                    up.send_reset(Reason::CANCEL);
                    Pumped::Upstream(e)
                }
            };
        }
        Up::Stream(s) => s,
    };
    let mut total = 0u64;
    loop {
        let data = match crate::h2::body::next_frame(req, &mut client, &mut total).await {
            Ok(Some(d)) => d,
            Ok(None) => break,
            Err(code) => {
                up.send_reset(Reason::CANCEL);
                return Pumped::Client(code);
            }
        };
        let n = data.len();
        if let Err(e) = send_all(&mut up, data, false, send_timeout).await {
            up.send_reset(Reason::CANCEL);
            return Pumped::Upstream(e);
        }
        let _ = client.flow_control().release_capacity(n);
    }
    let ended = match client.trailers().await {
        Ok(Some(t)) => up.send_trailers(t),
        _ => up.send_data(Bytes::new(), true),
    };
    match ended {
        Ok(()) => Pumped::Done,
        Err(e) => Pumped::Upstream(std::io::Error::other(e)),
    }
}

/// Sends `data` as the stream's window opens; `last` ends the stream with it.
async fn send_all(
    up: &mut SendStream<Bytes>,
    mut data: Bytes,
    last: bool,
    timeout: Duration,
) -> std::io::Result<()> {
    if data.is_empty() {
        return match last {
            true => up.send_data(data, true).map_err(std::io::Error::other),
            false => Ok(()),
        };
    }
    while !data.is_empty() {
        up.reserve_capacity(data.len());
        let capacity = std::future::poll_fn(|cx| up.poll_capacity(cx));
        let n = match tokio::time::timeout(timeout, capacity).await {
            Ok(Some(Ok(n))) => n,
            Ok(Some(Err(e))) => return Err(std::io::Error::other(e)),
            Ok(None) => return Err(std::io::ErrorKind::BrokenPipe.into()),
            Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
        };
        if n == 0 {
            continue;
        }
        let piece = data.split_to(n.min(data.len()));
        up.send_data(piece, last && data.is_empty())
            .map_err(std::io::Error::other)?;
    }
    Ok(())
}

/// Sends the server's response on: the head by the proxy's rules, the DATA frames as they
/// come, the trailers at the end. Returns the body bytes read, and whether the answer
/// ended whole.
#[allow(clippy::too_many_arguments)]
async fn forward<D: Downstream, P: Future<Output = Pumped>>(
    down: &mut D,
    req: &Request<'_>,
    plan: &Plan,
    head: &ResponseHead,
    mut recv: RecvStream,
    mut pump: Pin<&mut P>,
    pumped: &mut Option<Pumped>,
    url: Url<'_>,
) -> (u64, bool) {
    let code = head.status();
    let no_body = plan.head_request || code == 204 || code == 304 || recv.is_end_stream();
    let framing = match head.framing() {
        _ if no_body => Framing::Length(0),
        Framing::Length(n) => Framing::Length(n),
        // Trailers follow: an HTTP/1.1 client gets the body chunked.
        _ => Framing::Chunked,
    };
    req.write_proxied_head(down.begin(framing), plan, head);
    if no_body {
        // Nothing follows the head: what the server sends after it is not read, and its
        // stream, unless it ended, is reset when dropped.
        let finished = down.finish().await.is_ok();
        return (0, finished && recv.is_end_stream());
    }
    let read_timeout = plan.settings.read_timeout;
    let mut length = 0u64;
    let failure = |what: &str| {
        req.log_upstream(
            Level::Error,
            &format!("{what} while reading upstream"),
            &url,
        );
    };
    // The client's body failed after the head went out: the response cannot end well.
    let body_failed = |pumped: &Option<Pumped>| match pumped {
        Some(Pumped::Upstream(e)) => {
            let what = match e.kind() {
                std::io::ErrorKind::TimedOut => {
                    "upstream timed out (110: Connection timed out)".to_owned()
                }
                _ => describe(e, "send()"),
            };
            req.log_upstream(
                Level::Error,
                &format!("{what} while sending request to upstream"),
                &url,
            );
            true
        }
        Some(Pumped::Client(_)) => true,
        _ => false,
    };
    loop {
        let read = tokio::time::timeout(read_timeout, recv.data());
        let got = beside(read, pump.as_mut(), pumped).await;
        if body_failed(pumped) {
            down.broken();
            return (length, false);
        }
        match got {
            Err(_) => {
                failure("upstream timed out (110: Connection timed out)");
                down.broken();
                return (length, false);
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                if let Some(what) = body_error(&e) {
                    failure(&what);
                }
                down.broken();
                return (length, false);
            }
            Ok(Some(Ok(data))) => {
                let _ = recv.flow_control().release_capacity(data.len());
                length += data.len() as u64;
                if beside(down.send(&data), pump.as_mut(), pumped)
                    .await
                    .is_err()
                {
                    return (length, false);
                }
            }
        }
    }
    let read = tokio::time::timeout(read_timeout, recv.trailers());
    let trailers = match beside(read, pump.as_mut(), pumped).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            if let Some(what) = body_error(&e) {
                failure(&what);
            }
            down.broken();
            return (length, false);
        }
        Err(_) => {
            failure("upstream timed out (110: Connection timed out)");
            down.broken();
            return (length, false);
        }
    };
    let mut fields: Vec<(String, Vec<u8>)> = trailers
        .iter()
        .flatten()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect();
    if req.expects_trailers() {
        fields.extend(req.trailer_fields());
    }
    if !fields.is_empty() {
        down.end_with(fields);
    }
    let finished = down.finish().await.is_ok();
    (length, finished)
}

/// How a failure of the server's stream is logged: `None` for one of this side's own (a
/// reset sent because the client's body failed), which the client's side logged.
fn body_error(e: &::h2::Error) -> Option<String> {
    if !e.is_remote() && !e.is_io() {
        return None;
    }
    Some(match e.reason() {
        Some(r) if e.is_reset() => format!("upstream sent RST_STREAM with error {}", u32::from(r)),
        Some(r) if e.is_go_away() => format!("upstream sent goaway with error {}", u32::from(r)),
        _ => "upstream prematurely closed stream".to_string(),
    })
}
