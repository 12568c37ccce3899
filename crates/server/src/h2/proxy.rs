//! HTTP/2 requests to a `proxy_pass` location, proxied to HTTP/1.x upstreams.
//!
//! The exchange with the upstream ([`crate::upstream::serve`]) sends its response to the stream
//! through [`ToStream`]: the head becomes a HEADERS frame (without the fields about one
//! HTTP/1.1 connection), and the body DATA frames sent as the stream's window opens, so a
//! slow client holds the upstream back as it does over HTTP/1.1. Every rule of the exchange
//! (retries, proxy_redirect, hidden fields, add_header, intercepted errors) applies unchanged.
//!
//! The request body is read whole before the exchange, up to client_max_body_size, its
//! window given back as it is read. nginx 1.22 has no extended CONNECT: a request asking for
//! an upgrade is proxied as a plain one (`h2` refuses the `Upgrade` field itself).

use std::io;
use std::time::Duration;

use ::h2::server::SendResponse;
use ::h2::{Reason, RecvStream, SendStream};
use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue};
use portcullis_http::Framing;

use super::{Out, CONNECTION_FIELDS, FRAME_HEADER_LEN};
use crate::request::{Request, Response};
use crate::upstream::{Connection, Downstream, Fields, Finish, NoConnection, Plan, ReqBody};

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
    plan: Box<Plan>,
    body: Option<RecvStream>,
    respond: SendResponse<Bytes>,
) -> Proxied {
    let body = match body {
        // gRPC's calls stream both ways: the frames go as they come.
        Some(body) if plan.pass_body && plan.grpc.is_some() && !req.copies_body() => {
            ReqBody::Http2(body)
        }
        Some(body) if plan.pass_body => match read_body(req, body).await {
            Ok(ReqBody::Whole(b)) => {
                req.keep_body_for_later(&b);
                ReqBody::Whole(b)
            }
            Ok(b) => b,
            Err(code) => return Proxied::Answer(req.finalize_error(code), respond),
        },
        // A later round (an error_page's upstream) sends again the body the first read.
        None if plan.pass_body => req
            .read_request_body()
            .map_or(ReqBody::None, ReqBody::Whole),
        // A copy of the request takes the body the upstream does not (`mirror`).
        Some(body) if req.copies_body() => match read_body(req, body).await {
            Ok(ReqBody::Whole(b)) => {
                req.keep_request_body(&b);
                ReqBody::None
            }
            Ok(_) => ReqBody::None,
            Err(code) => {
                req.take_background();
                return Proxied::Answer(req.finalize_error(code), respond);
            }
        },
        // Dropped, its DATA frames are discarded and their window given back.
        _ => ReqBody::None,
    };
    let pace = Pace {
        head_only: req.is_head(),
        chunk: super::settings(req).chunk_size,
        timeout: req.loc().send_timeout,
    };
    let rate = if req.is_head() { None } else { req.pace() };
    let mut down = ToStream::new(respond, pace, rate);
    let finish = crate::upstream::serve(&mut down, req, plan, body).await;
    let status = match finish {
        Finish::Status {
            code,
            attempts,
            challenge,
            ..
        } => {
            req.set_upstream_attempts(attempts);
            match down.respond.take() {
                Some(respond) => {
                    return Proxied::Answer(req.finalize_upstream_error(code, challenge), respond)
                }
                // The exchange sends nothing before it chooses a status.
                None => down.head.status,
            }
        }
        Finish::Sent { attempts, .. } => {
            req.set_upstream_attempts(attempts);
            // A head that never went out: the stream cannot be answered now.
            if let Some(mut respond) = down.respond.take() {
                respond.send_reset(Reason::INTERNAL_ERROR);
            }
            down.head.status
        }
        Finish::ClientClosed { attempts } => {
            req.set_upstream_attempts(attempts);
            if let Some(mut respond) = down.respond.take() {
                respond.send_reset(Reason::CANCEL);
            }
            crate::upstream::CLIENT_CLOSED
        }
        Finish::Redirect {
            uri,
            fields,
            attempts,
        } => {
            req.set_upstream_attempts(attempts);
            match down.respond.take() {
                Some(respond) => return Proxied::Answer(req.accel_redirect(uri, fields), respond),
                None => down.head.status,
            }
        }
    };
    let (sent, body) = down.sent();
    let mut logged = Response::new(req.status_sent(status));
    logged.content_length = Some(body);
    req.log_access(&logged, sent);
    Proxied::Done
}

/// Reads a request body whole, bounded by client_max_body_size. `Err` is the status to
/// answer.
pub(crate) async fn read_body(req: &Request<'_>, mut body: RecvStream) -> Result<ReqBody, u16> {
    if body.is_end_stream() {
        return Ok(ReqBody::None);
    }
    let mut whole = BytesMut::new();
    let mut total = 0;
    loop {
        match super::body::next_frame(req, &mut body, &mut total).await {
            Ok(Some(data)) => {
                let _ = body.flow_control().release_capacity(data.len());
                whole.extend_from_slice(&data);
            }
            Ok(None) => return Ok(ReqBody::Whole(whole.freeze())),
            Err(413) => {
                super::discard(body).await;
                return Err(413);
            }
            Err(code) => return Err(code),
        }
    }
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

/// The response head for the HEADERS frame.
struct Head {
    status: u16,
    fields: http::HeaderMap,
    /// The frame's size as `$bytes_sent` counts it: names and values as literals.
    len: u64,
}

impl Fields for Head {
    fn status(&mut self, code: u16, _: &[u8]) {
        self.status = code;
    }

    /// Leaves out the fields HTTP/2 has no place for.
    fn field(&mut self, name: &[u8], value: &[u8]) {
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        else {
            return;
        };
        if CONNECTION_FIELDS.contains(&name.as_str()) {
            return;
        }
        self.len += (name.as_str().len() + value.len() + 2) as u64;
        self.fields.append(name, value);
    }
}

/// The exchange's downstream on an HTTP/2 stream.
struct ToStream {
    /// The stream until its head is sent.
    respond: Option<SendResponse<Bytes>>,
    stream: Option<SendStream<Bytes>>,
    head: Head,
    /// No body follows the head.
    empty: bool,
    /// Body bytes not sent yet.
    pending: BytesMut,
    pace: Pace,
    /// `limit_rate`.
    rate: Option<crate::pace::Pace>,
    /// `add_trailer`: the HEADERS frame that ends the stream.
    trailers: Vec<(String, Vec<u8>)>,
    sent: u64,
    body: u64,
}

impl ToStream {
    fn new(respond: SendResponse<Bytes>, pace: Pace, rate: Option<crate::pace::Pace>) -> ToStream {
        ToStream {
            respond: Some(respond),
            stream: None,
            head: Head {
                status: 502,
                fields: http::HeaderMap::new(),
                len: 0,
            },
            empty: true,
            pending: BytesMut::new(),
            pace,
            rate,
            trailers: Vec::new(),
            sent: 0,
            body: 0,
        }
    }

    /// Sends the HEADERS frame, if it has not gone yet; `last` ends the stream with it.
    fn send_head(&mut self, last: bool) -> io::Result<()> {
        let Some(mut respond) = self.respond.take() else {
            return Ok(());
        };
        let status = self.head.status;
        // HTTP/2 has no 101, and an interim status is not an answer.
        let code = http::StatusCode::from_u16(status)
            .ok()
            .filter(|_| status >= 200);
        let Some(code) = code else {
            respond.send_reset(Reason::INTERNAL_ERROR);
            return Err(io::Error::other("no HTTP/2 status"));
        };
        let mut h2_head = http::Response::new(());
        *h2_head.status_mut() = code;
        *h2_head.headers_mut() = std::mem::take(&mut self.head.fields);
        self.sent += FRAME_HEADER_LEN + 1 + self.head.len;
        let stream = respond
            .send_response(h2_head, last)
            .map_err(io::Error::other)?;
        self.stream = Some(stream);
        Ok(())
    }

    /// Sends `data` no faster than the window opens.
    async fn paced(&mut self, data: Bytes) -> io::Result<()> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        };
        let mut out = Out {
            stream,
            chunk: self.pace.chunk,
            timeout: self.pace.timeout,
            sent: 0,
            rate: self.rate.take(),
        };
        let result = out.paced(data).await;
        self.sent += out.sent;
        self.body += out.sent;
        self.rate = out.rate.take();
        result
    }
}

impl Downstream for ToStream {
    type Io = NoConnection;
    type Head = Head;

    fn connection(&mut self) -> Option<Connection<'_, NoConnection>> {
        None
    }

    /// A client that resets the stream (or closes the connection) before the head.
    async fn gone(&mut self) {
        match self.respond.as_mut() {
            Some(respond) => {
                let _ = std::future::poll_fn(|cx| respond.poll_reset(cx)).await;
            }
            None => std::future::pending().await,
        }
    }

    fn begin(&mut self, framing: Framing) -> &mut Head {
        // HEAD: the head carries the upstream's length, and no body follows.
        self.empty = self.pace.head_only || matches!(framing, Framing::Length(0));
        self.head.fields.clear();
        self.head.len = 0;
        &mut self.head
    }

    fn push(&mut self, data: &[u8]) {
        if !self.empty {
            self.pending.extend_from_slice(data);
        }
    }

    async fn send(&mut self, data: &[u8]) -> io::Result<()> {
        if self.empty {
            // The head alone ends the stream, whatever the upstream's body does after it.
            return self.send_head(true);
        }
        self.send_head(false)?;
        self.pending.extend_from_slice(data);
        if self.pending.is_empty() {
            return Ok(());
        }
        let data = self.pending.split().freeze();
        self.paced(data).await
    }

    async fn finish(&mut self) -> io::Result<()> {
        if self.empty {
            return self.send_head(true);
        }
        self.send(&[]).await?;
        let mut trailers = http::HeaderMap::new();
        for (name, value) in std::mem::take(&mut self.trailers) {
            if let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_bytes(&value),
            ) {
                trailers.append(n, v);
            }
        }
        match self.stream.as_mut() {
            Some(stream) if !trailers.is_empty() => {
                stream.send_trailers(trailers).map_err(io::Error::other)
            }
            Some(stream) => stream
                .send_data(Bytes::new(), true)
                .map_err(io::Error::other),
            None => Err(io::Error::from(io::ErrorKind::BrokenPipe)),
        }
    }

    /// The upstream's body broke off: the stream must not look complete.
    fn broken(&mut self) {
        if let Some(stream) = self.stream.as_mut() {
            stream.send_reset(Reason::INTERNAL_ERROR);
        } else if let Some(mut respond) = self.respond.take() {
            respond.send_reset(Reason::INTERNAL_ERROR);
        }
    }

    fn sent(&self) -> (u64, u64) {
        (self.sent, self.body)
    }

    fn keep_alive(&self) -> bool {
        true
    }

    fn limit_rate(&mut self, rate: u64, after: u64, start: tokio::time::Instant) {
        crate::pace::Pace::set_rate(&mut self.rate, rate, after, start);
    }

    fn end_with(&mut self, trailers: Vec<(String, Vec<u8>)>) {
        self.trailers = trailers;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_fields_are_left_out() {
        let mut head = Head {
            status: 0,
            fields: http::HeaderMap::new(),
            len: 0,
        };
        head.status(200, b"OK");
        for (name, value) in [
            ("Server", "x"),
            ("Connection", "keep-alive"),
            ("Keep-Alive", "timeout=5"),
            ("Transfer-Encoding", "chunked"),
            ("Set-Cookie", "a=1"),
            ("Set-Cookie", "b=2"),
        ] {
            head.field(name.as_bytes(), value.as_bytes());
        }
        head.lines(b"X-Added: 1\r\nUpgrade: h2c\r\n");
        assert_eq!(head.fields.len(), 4);
        assert_eq!(head.fields.get_all("set-cookie").iter().count(), 2);
        assert!(head.fields.get("connection").is_none());
        assert!(
            head.fields.get("transfer-encoding").is_none() && head.fields.get("upgrade").is_none()
        );
        assert_eq!(
            head.fields.get("x-added").map(|v| v.as_bytes()),
            Some(&b"1"[..])
        );
        // "server: x", two cookies of "set-cookie: a=1", "x-added: 1".
        assert_eq!(head.len, 9 + 2 * 15 + 10);
    }
}
