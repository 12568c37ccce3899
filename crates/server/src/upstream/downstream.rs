//! Where the exchange sends the upstream's response: an HTTP/1 connection ([`Client`]), an
//! HTTP/2 stream (in `h2`), or the server itself for a subrequest ([`Collect`]).
//!
//! The exchange decides what the response is: its head by the proxy's rules (written through
//! [`Fields`]), the body's bytes as they come, and whether it ended whole. Each downstream
//! decides how that goes out: HTTP/1.1 framing and `Connection`, DATA frames paced by a
//! stream's window, or bytes kept in memory. One response, never serialised and read again.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use portcullis_http::{chunk_header, Framing, LAST_CHUNK};
use portcullis_proxy::write_two;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The response head as the exchange writes it, field by field in nginx's order.
pub(crate) trait Fields {
    /// The status, and the reason phrase to show with it (HTTP/1 only).
    fn status(&mut self, code: u16, reason: &[u8]);
    fn field(&mut self, name: &[u8], value: &[u8]);
    /// A field passed from the upstream unchanged, `line` its whole line with its line end.
    fn line(&mut self, name: &[u8], value: &[u8], line: &[u8]) {
        let _ = line;
        self.field(name, value);
    }
    /// Fields the server wrote itself as HTTP/1.1 lines (`add_header` and the like).
    fn lines(&mut self, block: &[u8]) {
        for line in block.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(colon) = line.iter().position(|&b| b == b':') {
                self.field(&line[..colon], line[colon + 1..].trim_ascii());
            }
        }
    }
    /// Where the fields about the client connection go, after `Location`: HTTP/1 only.
    fn connection(&mut self, upgrade: bool) {
        let _ = upgrade;
    }
    /// The response ends with trailers (`add_trailer`). Returns whether the body then goes
    /// chunked (an HTTP/1.1 client), which takes its length away.
    fn trailers(&mut self) -> bool {
        false
    }
    /// The head is whole.
    fn end(&mut self) {}
}

/// The client's side of an upgraded (101) or streamed exchange: only an HTTP/1 connection
/// has one.
pub(crate) struct Connection<'a, S> {
    pub stream: &'a mut S,
    /// Bytes read from the client past the request head.
    pub read: &'a mut BytesMut,
    pub out: &'a mut BytesMut,
    pub send_timeout: Duration,
}

/// What the exchange sends its response to.
pub(crate) trait Downstream {
    type Io: AsyncRead + AsyncWrite + Unpin;
    type Head: Fields;

    /// The client connection itself, for a request body streamed from it and a tunnel.
    fn connection(&mut self) -> Option<Connection<'_, Self::Io>>;

    /// Resolves when the client goes away before the response begins, keeping what it
    /// sends meanwhile.
    fn gone(&mut self) -> impl Future<Output = ()>;

    /// Starts the response: its body comes as `framing` says (`Length(0)`: none). The head
    /// is written into what this returns, then goes out with the first body bytes.
    fn begin(&mut self, framing: Framing) -> &mut Self::Head;

    /// Adds body bytes to what goes out next.
    fn push(&mut self, data: &[u8]);

    /// Sends what was added, then `data`.
    fn send(&mut self, data: &[u8]) -> impl Future<Output = io::Result<()>>;

    /// Sends what was added, then `len` bytes of `file` from `offset` (a cached body): read
    /// in pieces and sent as any other bytes, unless the downstream can do better.
    fn send_file(
        &mut self,
        file: &std::fs::File,
        offset: u64,
        len: u64,
    ) -> impl Future<Output = io::Result<()>> {
        send_file_in_pieces(self, file, offset, len)
    }

    /// The body is whole: sends what is left and ends the response.
    fn finish(&mut self) -> impl Future<Output = io::Result<()>>;

    /// The body broke off: the client must not take the response for a whole one.
    fn broken(&mut self);

    /// Bytes sent in all (`$bytes_sent`) and of the body (`$body_bytes_sent`).
    fn sent(&self) -> (u64, u64);

    /// Whether the client connection may carry another request.
    fn keep_alive(&self) -> bool;

    /// The trailers the body ends with, read once it is whole (`add_trailer`).
    fn end_with(&mut self, trailers: Vec<(String, Vec<u8>)>) {
        let _ = trailers;
    }

    /// The body goes at most `rate` bytes a second from now on (`X-Accel-Limit-Rate`), past
    /// its first `after` bytes counted from `start`: where the downstream is a client.
    fn limit_rate(&mut self, rate: u64, after: u64, start: tokio::time::Instant) {
        let _ = (rate, after, start);
    }
}

/// [`Downstream::send_file`] by reading the file into a buffer and sending that.
async fn send_file_in_pieces<D: Downstream + ?Sized>(
    down: &mut D,
    file: &std::fs::File,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    const PIECE: u64 = 64 * 1024;
    let mut buf = vec![0u8; usize::try_from(len.min(PIECE)).unwrap_or(0)];
    let mut done = 0;
    while done < len {
        let want = usize::try_from((len - done).min(PIECE)).unwrap_or(0);
        let n = file.read_at(&mut buf[..want], offset + done)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "file was truncated while being sent",
            ));
        }
        down.send(&buf[..n]).await?;
        done += n as u64;
    }
    Ok(())
}

/// A client connection that sends a file's bytes itself: with sendfile on plain TCP.
pub(crate) trait FileSink {
    fn send_file(
        &mut self,
        file: &std::fs::File,
        offset: u64,
        len: u64,
    ) -> impl Future<Output = io::Result<()>>;
}

impl FileSink for crate::tls::Stream {
    async fn send_file(&mut self, file: &std::fs::File, offset: u64, len: u64) -> io::Result<()> {
        crate::tls::send_file(self, &[], file, offset, len).await
    }
}

/// An HTTP/1 client connection, reached through AsyncRead/AsyncWrite so plain and TLS
/// connections work alike.
pub(crate) struct Client<'c, S> {
    stream: &'c mut S,
    /// The connection's response buffer: the head, then body bytes not yet sent.
    out: &'c mut BytesMut,
    /// Bytes read from the client past the request (and its body).
    read: &'c mut BytesMut,
    keep_alive: bool,
    send_timeout: Duration,
    /// The client reads chunks: HTTP/1.1, `chunked_transfer_encoding` on.
    chunks: bool,
    /// `keepalive_timeout`'s second argument, for `Keep-Alive: timeout=N`.
    keepalive_header: Option<u64>,
    /// The body goes out chunked (the upstream's framing is not one the client can read).
    rechunk: bool,
    sent: u64,
    body: u64,
    /// `limit_rate`: every byte goes at its pace.
    pace: Option<crate::pace::Pace>,
    /// `add_trailer`: what follows the last chunk.
    trailers: Vec<(String, Vec<u8>)>,
}

impl<'c, S: AsyncRead + AsyncWrite + Unpin> Client<'c, S> {
    /// `keep_alive`: whether the connection may carry another request after this one.
    pub(crate) fn new(
        stream: &'c mut S,
        out: &'c mut BytesMut,
        read: &'c mut BytesMut,
        keep_alive: bool,
        send_timeout: Duration,
        chunks: bool,
        keepalive_header: Option<u64>,
    ) -> Self {
        Client {
            stream,
            out,
            read,
            keep_alive,
            send_timeout,
            chunks,
            keepalive_header,
            rechunk: false,
            sent: 0,
            body: 0,
            pace: None,
            trailers: Vec::new(),
        }
    }

    /// Sends the response at `pace` (`limit_rate`).
    pub(crate) fn paced(mut self, pace: Option<crate::pace::Pace>) -> Self {
        self.pace = pace;
        self
    }

    /// Sends the buffer, then `data`, in one write when the socket takes them.
    async fn write_out(&mut self, data: &[u8]) -> io::Result<()> {
        let len = self.out.len() + data.len();
        if len == 0 {
            return Ok(());
        }
        if let Some(pace) = &mut self.pace {
            let result = pace
                .write_all(self.stream, &[self.out, data], self.send_timeout)
                .await;
            self.out.clear();
            match result {
                Ok(()) => self.sent += len as u64,
                Err(_) => self.keep_alive = false,
            }
            return result;
        }
        // Most writes complete at once: no future of their own on that path.
        let result = match write_now(self.stream, self.out, data) {
            Ok(n) if n == len => Ok(()),
            Ok(n) => {
                let (a, b) = rest(self.out, data, n);
                timeout_io(self.send_timeout, write_two(self.stream, a, b)).await
            }
            Err(e) => Err(e),
        };
        self.out.clear();
        match result {
            Ok(()) => self.sent += len as u64,
            Err(_) => self.keep_alive = false,
        }
        result
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Fields for Client<'_, S> {
    fn status(&mut self, code: u16, reason: &[u8]) {
        self.out.put_slice(b"HTTP/1.1 ");
        self.out.put_slice(&[
            b'0' + (code / 100) as u8,
            b'0' + (code / 10 % 10) as u8,
            b'0' + (code % 10) as u8,
        ]);
        self.out.put_u8(b' ');
        self.out.put_slice(reason);
        self.out.put_slice(b"\r\n");
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.out.put_slice(name);
        self.out.put_slice(b": ");
        self.out.put_slice(value);
        self.out.put_slice(b"\r\n");
    }

    fn line(&mut self, name: &[u8], value: &[u8], line: &[u8]) {
        // A line as nginx writes one (`Name: value` and CRLF) goes as it came; another (a
        // bare LF, no space or more after the colon) is written that way, as nginx does.
        let written = name.len() + value.len() + 4;
        if line.len() == written
            && line.get(name.len() + 1) == Some(&b' ')
            && line.ends_with(b"\r\n")
        {
            self.out.put_slice(line);
        } else {
            self.field(name, value);
        }
    }

    fn lines(&mut self, block: &[u8]) {
        self.out.put_slice(block);
    }

    fn end(&mut self) {
        self.out.put_slice(b"\r\n");
    }

    fn trailers(&mut self) -> bool {
        self.rechunk |= self.chunks;
        self.chunks
    }

    fn connection(&mut self, upgrade: bool) {
        if self.rechunk {
            self.out.put_slice(b"Transfer-Encoding: chunked\r\n");
        }
        self.out.put_slice(if upgrade {
            b"Connection: upgrade\r\n"
        } else if self.keep_alive {
            b"Connection: keep-alive\r\n"
        } else {
            b"Connection: close\r\n"
        });
        if let Some(secs) = self
            .keepalive_header
            .filter(|_| self.keep_alive && !upgrade)
        {
            crate::request::keep_alive_field(self.out, secs);
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + FileSink> Downstream for Client<'_, S> {
    type Io = S;
    type Head = Self;

    fn connection(&mut self) -> Option<Connection<'_, S>> {
        Some(Connection {
            stream: self.stream,
            read: self.read,
            out: self.out,
            send_timeout: self.send_timeout,
        })
    }

    fn gone(&mut self) -> impl Future<Output = ()> {
        client_gone(self.stream, self.read)
    }

    fn begin(&mut self, framing: Framing) -> &mut Self {
        let open = matches!(framing, Framing::Chunked | Framing::UntilClose);
        // An HTTP/1.0 client (or chunked_transfer_encoding off) reads a body of unknown
        // length to the connection's close.
        self.rechunk = open && self.chunks;
        if open && !self.chunks {
            self.keep_alive = false;
        }
        self.out.clear();
        self
    }

    fn push(&mut self, data: &[u8]) {
        // An empty chunk would end the body.
        if self.rechunk && data.is_empty() {
            return;
        }
        if self.rechunk {
            let (h, len) = chunk_header(data.len());
            self.out.put_slice(&h[..len]);
            self.out.put_slice(data);
            self.out.put_slice(b"\r\n");
            // The body nginx counts is what goes out after the head: the chunks' lines too.
            self.body += (len + 2) as u64;
        } else {
            self.out.put_slice(data);
        }
        self.body += data.len() as u64;
    }

    async fn send(&mut self, data: &[u8]) -> io::Result<()> {
        if self.rechunk && !data.is_empty() {
            self.push(data);
            return self.write_out(&[]).await;
        }
        let result = self.write_out(data).await;
        if result.is_ok() {
            self.body += data.len() as u64;
        }
        result
    }

    async fn send_file(&mut self, file: &std::fs::File, offset: u64, len: u64) -> io::Result<()> {
        // A re-chunked body needs its chunk lines around the file's bytes; a paced one goes
        // through the pace.
        if self.rechunk || self.pace.is_some() {
            return send_file_in_pieces(self, file, offset, len).await;
        }
        self.write_out(&[]).await?;
        // As a static file's: the send timeout for each 64 KB.
        let timeout = self
            .send_timeout
            .saturating_mul(u32::try_from(len / (64 * 1024) + 1).unwrap_or(u32::MAX));
        match timeout_io(timeout, self.stream.send_file(file, offset, len)).await {
            Ok(()) => {
                self.sent += len;
                self.body += len;
                Ok(())
            }
            Err(e) => {
                self.keep_alive = false;
                Err(e)
            }
        }
    }

    async fn finish(&mut self) -> io::Result<()> {
        let before = self.out.len();
        if self.rechunk && self.trailers.is_empty() {
            self.out.put_slice(LAST_CHUNK);
        } else if self.rechunk {
            self.out.put_slice(b"0\r\n");
            for (name, value) in std::mem::take(&mut self.trailers) {
                self.out.put_slice(name.as_bytes());
                self.out.put_slice(b": ");
                self.out.put_slice(&value);
                self.out.put_slice(b"\r\n");
            }
            self.out.put_slice(b"\r\n");
        }
        self.body += (self.out.len() - before) as u64;
        if self.out.is_empty() {
            return Ok(());
        }
        self.write_out(&[]).await
    }

    fn broken(&mut self) {
        self.keep_alive = false;
        self.out.clear();
    }

    fn sent(&self) -> (u64, u64) {
        (self.sent, self.body)
    }

    fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    fn limit_rate(&mut self, rate: u64, after: u64, start: tokio::time::Instant) {
        crate::pace::Pace::set_rate(&mut self.pace, rate, after, start);
    }

    fn end_with(&mut self, trailers: Vec<(String, Vec<u8>)>) {
        self.trailers = trailers;
    }
}

/// Most bytes kept from a client that sends more while its request waits for the upstream
/// (pipelined requests); past them the client is no longer watched.
const WATCH_LIMIT: usize = 64 * 1024;

/// Returns when the client closes its side (or its connection fails), keeping what it sends
/// meanwhile in `read`; never returns once `read` holds [`WATCH_LIMIT`] bytes.
async fn client_gone<S: AsyncRead + Unpin>(stream: &mut S, read: &mut BytesMut) {
    while read.len() < WATCH_LIMIT {
        match stream.read_buf(read).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
    std::future::pending::<()>().await;
}

/// A response kept in memory, for a subrequest: its status and body, bounded.
pub(crate) struct Collect {
    status: u16,
    /// The response's first `WWW-Authenticate` field.
    challenge: Option<Vec<u8>>,
    body: BytesMut,
    /// The most body bytes kept; past them the exchange ends.
    max: usize,
    /// The body was whole.
    finished: bool,
    /// The body was longer than `max`.
    overflow: bool,
    /// Only the head counts: a body is not read.
    head_only: bool,
}

impl Collect {
    pub(crate) fn new(max: usize) -> Collect {
        Collect {
            status: 0,
            challenge: None,
            body: BytesMut::new(),
            max,
            finished: false,
            overflow: false,
            head_only: false,
        }
    }

    /// One that keeps the head only: the exchange ends when a body begins (its upstream
    /// connection is not kept then, as nginx's is not).
    pub(crate) fn head_only() -> Collect {
        Collect {
            head_only: true,
            ..Collect::new(0)
        }
    }

    /// The status the exchange wrote.
    pub(crate) fn status(&self) -> u16 {
        self.status
    }

    /// The value of the response's first `WWW-Authenticate` field.
    pub(crate) fn challenge(&self) -> Option<&[u8]> {
        self.challenge.as_deref()
    }

    /// The body, if it came whole and within the bound: `Err(true)` when it was too long.
    pub(crate) fn into_body(self) -> Result<bytes::Bytes, bool> {
        if self.overflow {
            return Err(true);
        }
        if !self.finished {
            return Err(false);
        }
        Ok(self.body.freeze())
    }
}

impl Fields for Collect {
    fn status(&mut self, code: u16, _: &[u8]) {
        self.status = code;
    }
    fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.challenge.is_none() && name.eq_ignore_ascii_case(b"www-authenticate") {
            self.challenge = Some(value.to_vec());
        }
    }
}

impl Downstream for Collect {
    type Io = NoConnection;
    type Head = Self;

    fn connection(&mut self) -> Option<Connection<'_, NoConnection>> {
        None
    }

    fn gone(&mut self) -> impl Future<Output = ()> {
        std::future::pending()
    }

    fn begin(&mut self, framing: Framing) -> &mut Self {
        // A body when only the head counts ends the exchange at once (see `head_only`).
        if self.head_only && framing != Framing::Length(0) {
            self.overflow = true;
        }
        self
    }

    fn push(&mut self, data: &[u8]) {
        if self.body.len() + data.len() > self.max {
            // Past the bound, or any body when only the head counts: the exchange stops
            // there, as nginx ends a header-only subrequest at its head.
            self.overflow = true;
        } else {
            self.body.extend_from_slice(data);
        }
    }

    async fn send(&mut self, data: &[u8]) -> io::Result<()> {
        if !data.is_empty() {
            self.push(data);
        }
        if self.overflow {
            return Err(io::Error::other(
                "the response body is not wanted or too long",
            ));
        }
        Ok(())
    }

    async fn finish(&mut self) -> io::Result<()> {
        self.finished = !self.overflow;
        Ok(())
    }

    fn broken(&mut self) {
        self.finished = false;
    }

    fn sent(&self) -> (u64, u64) {
        (self.body.len() as u64, self.body.len() as u64)
    }

    fn keep_alive(&self) -> bool {
        true
    }
}

/// The connection of a downstream that has none: never made.
pub(crate) enum NoConnection {}

impl AsyncRead for NoConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match *self {}
    }
}

impl AsyncWrite for NoConnection {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<usize>> {
        match *self {}
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        match *self {}
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        match *self {}
    }
}

pub(super) async fn timeout_io<T>(
    t: Duration,
    f: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    tokio::time::timeout(t, f)
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

/// Writes `a` then `b`, vectored, within `timeout`. Most writes complete at once, so the
/// first try arms no timer (and reads no clock); only a write that would block waits.
pub(super) async fn send_two<W: AsyncWrite + Unpin>(
    w: &mut W,
    a: &[u8],
    b: &[u8],
    timeout: Duration,
) -> io::Result<()> {
    let n = write_now(w, a, b)?;
    if n == a.len() + b.len() {
        return Ok(());
    }
    let (a, b) = rest(a, b, n);
    // Boxed: the wait, rare, then takes no room in the futures of the writes that need none.
    Box::pin(timeout_io(timeout, write_two(w, a, b))).await
}

/// Writes what the socket takes of `a` then `b` now, without waiting: the bytes written.
fn write_now<W: AsyncWrite + Unpin>(w: &mut W, a: &[u8], b: &[u8]) -> io::Result<usize> {
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(w).poll_write_vectored(&mut cx, &[IoSlice::new(a), IoSlice::new(b)]) {
        Poll::Ready(result) => result,
        Poll::Pending => Ok(0),
    }
}

/// What is left of `a` then `b` after `n` bytes of them.
fn rest<'a>(a: &'a [u8], b: &'a [u8], n: usize) -> (&'a [u8], &'a [u8]) {
    match a.get(n..) {
        Some(rest) => (rest, b),
        None => (&[][..], &b[n - a.len()..]),
    }
}
