//! HTTP/2 requests to a `proxy_pass` location, proxied to HTTP/1.x upstreams.
//!
//! The exchange with the upstream ([`crate::proxy::serve`]) writes an HTTP/1.1 response to its
//! client. For an HTTP/2 stream that client is one end of a small in-memory pipe whose other
//! end is read on the same task: the response head becomes a HEADERS frame (without the fields
//! about one HTTP/1.1 connection), and the body, de-chunked, DATA frames sent as the stream's
//! window opens. The pipe holds little, so a slow client holds the upstream back as it does
//! over HTTP/1.1, and every rule of the exchange (retries, proxy_redirect, hidden fields,
//! add_header, intercepted errors) applies unchanged.
//!
//! The request body is read whole before the exchange, up to client_max_body_size, its
//! window given back as it is read. nginx 1.22 has no extended CONNECT: a request asking for
//! an upgrade is proxied as a plain one (`h2` refuses the `Upgrade` field itself).

use std::io;
use std::time::Duration;

use ::h2::server::SendResponse;
use ::h2::{Reason, RecvStream};
use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue};
use portcullis_http::{parse_response_head, Chunk, ChunkedDecoder, Framing, ResponseHead};
use tokio::io::{AsyncReadExt, DuplexStream};

use super::{Out, CONNECTION_FIELDS, FRAME_HEADER_LEN};
use crate::proxy::{Finish, Plan, ReqBody, PIPE_SIZE};
use crate::request::{Request, Response};
use crate::Level;

/// How a proxied HTTP/2 request ended.
pub(crate) enum Proxied {
    /// A response went out, whole or in part, and the access log line is written.
    Done,
    /// Nothing went out: send this response (an error page) on the stream.
    Answer(Response, SendResponse<Bytes>),
}

/// Proxies one HTTP/2 request by `plan`, answering on `respond`. `body` is `None` when an
/// earlier round (an error_page target proxied after a failure) has taken it.
pub(crate) async fn serve(
    req: &mut Request<'_>,
    plan: Plan,
    body: Option<RecvStream>,
    respond: SendResponse<Bytes>,
) -> Proxied {
    let body = match body {
        Some(body) if plan.pass_body => match read_body(req, body).await {
            Ok(b) => b,
            Err(code) => return Proxied::Answer(req.finalize_error(code), respond),
        },
        // Dropped, its DATA frames are discarded and their window given back.
        _ => ReqBody::None,
    };
    let pace = Pace {
        head_only: req.is_head(),
        chunk: req.loc().http2.chunk_size,
        timeout: req.loc().send_timeout,
    };
    let (near, far) = tokio::io::duplex(PIPE_SIZE);
    let shared: &Request<'_> = req;
    let exchange = crate::proxy::serve_piped(near, shared, plan, body, pace.timeout);
    let (finish, relayed) = tokio::join!(exchange, relay(far, respond, pace));
    let status = match finish {
        Finish::Status {
            code,
            attempts,
            challenge,
            ..
        } => {
            req.set_upstream_attempts(attempts);
            match relayed.unsent {
                Some(respond) => {
                    return Proxied::Answer(req.finalize_upstream_error(code, challenge), respond)
                }
                // The exchange writes nothing before it chooses a status; logged as relayed.
                None => relayed.status,
            }
        }
        Finish::Sent {
            status, attempts, ..
        } => {
            req.set_upstream_attempts(attempts);
            // A head that never reached the pipe's end: the stream cannot be answered now.
            if let Some(mut respond) = relayed.unsent {
                respond.send_reset(Reason::INTERNAL_ERROR);
            }
            status
        }
        // The relay ended first: the client reset the stream.
        Finish::ClientClosed { attempts } => {
            req.set_upstream_attempts(attempts);
            if let Some(mut respond) = relayed.unsent {
                respond.send_reset(Reason::CANCEL);
            }
            crate::proxy::CLIENT_CLOSED
        }
    };
    let mut logged = Response::new(status);
    logged.content_length = Some(relayed.body);
    req.log_access(&logged, relayed.sent);
    Proxied::Done
}

/// Reads a request body whole, bounded by client_max_body_size. `Err` is the status to
/// answer.
async fn read_body(req: &Request<'_>, mut body: RecvStream) -> Result<ReqBody, u16> {
    if body.is_end_stream() {
        return Ok(ReqBody::None);
    }
    let max = req.loc().client_max_body_size;
    let timeout = req.loc().client_body_timeout;
    let mut whole = BytesMut::new();
    loop {
        match tokio::time::timeout(timeout, body.data()).await {
            Err(_) => {
                req.log(
                    Level::Info,
                    "client timed out (110: Connection timed out) while reading client request body",
                );
                return Err(408);
            }
            Ok(None) => break,
            Ok(Some(Err(_))) => return Err(400),
            Ok(Some(Ok(data))) => {
                let _ = body.flow_control().release_capacity(data.len());
                let total = (whole.len() + data.len()) as u64;
                if max != 0 && total > max {
                    // A declared length was checked before; nginx names a body without one
                    // as HTTP/1.1 names its chunked kind.
                    req.log(
                        Level::Error,
                        &format!("client intended to send too large chunked body: {total} bytes"),
                    );
                    super::discard(body).await;
                    return Err(413);
                }
                whole.extend_from_slice(&data);
            }
        }
    }
    Ok(ReqBody::Whole(whole.freeze()))
}

/// What the stream's response depends on, taken from the request before the exchange.
#[derive(Clone, Copy)]
struct Pace {
    /// HEAD: the head carries the upstream's length, and no body follows.
    head_only: bool,
    /// `http2_chunk_size`.
    chunk: usize,
    /// `send_timeout`, for the window to open.
    timeout: Duration,
}

/// What [`relay`] did.
struct Relayed {
    status: u16,
    /// `$bytes_sent`, counted as the rest of HTTP/2 counts it.
    sent: u64,
    /// `$body_bytes_sent`.
    body: u64,
    /// The stream, when the exchange wrote nothing: it is answered with a status instead.
    unsent: Option<SendResponse<Bytes>>,
}

/// Reads the exchange's HTTP/1.1 response from `pipe` and sends it on the stream.
async fn relay(mut pipe: DuplexStream, mut respond: SendResponse<Bytes>, pace: Pace) -> Relayed {
    let mut relayed = Relayed {
        status: 502,
        sent: 0,
        body: 0,
        unsent: None,
    };
    let mut buf = BytesMut::with_capacity(PIPE_SIZE);
    let head = loop {
        match parse_response_head(&mut buf, usize::MAX) {
            Ok(Some(head)) => break head,
            Ok(None) => {}
            Err(_) => {
                respond.send_reset(Reason::INTERNAL_ERROR);
                return relayed;
            }
        }
        // A client that resets the stream (or closes the connection) before the head ends
        // the relay; the exchange then sees the pipe close and gives the attempt up.
        let read = tokio::select! {
            biased;
            read = pipe.read_buf(&mut buf) => read,
            _ = std::future::poll_fn(|cx| respond.poll_reset(cx)) => {
                relayed.status = crate::proxy::CLIENT_CLOSED;
                return relayed;
            }
        };
        match read {
            Ok(n) if n > 0 => {}
            _ if buf.is_empty() => {
                relayed.unsent = Some(respond);
                return relayed;
            }
            _ => {
                respond.send_reset(Reason::INTERNAL_ERROR);
                return relayed;
            }
        }
    };
    let status = head.status();
    relayed.status = status;
    let Ok(code) = http::StatusCode::from_u16(status) else {
        respond.send_reset(Reason::INTERNAL_ERROR);
        return relayed;
    };
    // HTTP/2 has no 101, and an interim status is not an answer.
    if status < 200 {
        respond.send_reset(Reason::INTERNAL_ERROR);
        return relayed;
    }
    let mut h2_head = http::Response::new(());
    *h2_head.status_mut() = code;
    relayed.sent = fields(&head, h2_head.headers_mut());
    let framing = if pace.head_only || status == 204 || status == 304 {
        Framing::Length(0)
    } else {
        head.framing()
    };
    let empty = matches!(framing, Framing::Length(0));
    let Ok(mut stream) = respond.send_response(h2_head, empty) else {
        return relayed;
    };
    if empty {
        return relayed;
    }
    let mut out = Out {
        stream: &mut stream,
        chunk: pace.chunk,
        timeout: pace.timeout,
        sent: 0,
    };
    let result = body(&mut pipe, &mut buf, framing, &mut out).await;
    relayed.body = out.sent;
    relayed.sent += out.sent;
    if result.is_err() {
        // The upstream's body broke off: the stream must not look complete.
        stream.send_reset(Reason::INTERNAL_ERROR);
    }
    relayed
}

/// Copies the response body framed by `framing` from `buf` and `pipe` to the stream, and
/// ends the stream.
async fn body(
    pipe: &mut DuplexStream,
    buf: &mut BytesMut,
    framing: Framing,
    out: &mut Out<'_>,
) -> io::Result<()> {
    let mut decoder = ChunkedDecoder::new();
    let mut left = match framing {
        Framing::Length(n) => n,
        Framing::Chunked | Framing::UntilClose => u64::MAX,
    };
    loop {
        let piece = match framing {
            Framing::Length(_) if left == 0 => break,
            Framing::Length(_) | Framing::UntilClose if !buf.is_empty() => {
                let take = left.min(buf.len() as u64) as usize;
                left -= take as u64;
                Some(buf.split_to(take).freeze())
            }
            Framing::Chunked => match decoder.decode(buf) {
                Ok(Chunk::Data(d)) => Some(d),
                Ok(Chunk::Done) => break,
                Ok(Chunk::NeedMore) => None,
                Err(_) => return Err(io::Error::from(io::ErrorKind::InvalidData)),
            },
            _ => None,
        };
        match piece {
            Some(p) => out.paced(p).await?,
            None => {
                buf.reserve(PIPE_SIZE);
                if pipe.read_buf(buf).await? == 0 {
                    if matches!(framing, Framing::UntilClose) {
                        break;
                    }
                    return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
                }
            }
        }
    }
    out.end()
}

/// Copies the response fields into `fields`, leaving out those HTTP/2 has no place for.
/// Returns the HEADERS frame's size as `$bytes_sent` counts it.
fn fields(head: &ResponseHead, fields: &mut http::HeaderMap) -> u64 {
    let mut len = FRAME_HEADER_LEN + 1;
    for f in head.fields() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(f.name),
            HeaderValue::from_bytes(f.value),
        ) else {
            continue;
        };
        if CONNECTION_FIELDS.contains(&name.as_str()) {
            continue;
        }
        len += (f.name.len() + f.value.len() + 2) as u64;
        fields.append(name, value);
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_fields_are_left_out() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nServer: x\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\
               Transfer-Encoding: chunked\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n"[..],
        );
        let head = parse_response_head(&mut buf, usize::MAX)
            .unwrap_or_else(|e| panic!("{e:?}"))
            .unwrap_or_else(|| panic!("incomplete"));
        let mut map = http::HeaderMap::new();
        let len = fields(&head, &mut map);
        assert_eq!(map.len(), 3);
        assert_eq!(map.get_all("set-cookie").iter().count(), 2);
        assert!(map.get("connection").is_none() && map.get("transfer-encoding").is_none());
        // "server: x", two cookies of "set-cookie: a=1", and the frame.
        assert_eq!(len, FRAME_HEADER_LEN + 1 + 9 + 2 * 15);
    }
}
