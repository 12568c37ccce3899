//! Response heads from an upstream server: the status line, the header fields as raw bytes,
//! and how the body that follows is framed.
//!
//! [`parse_response_head`] is stateless like [`crate::parse_request_head`]: it looks at the
//! whole buffer each time, which stays cheap because a head is bounded by the caller's limit
//! (nginx's `proxy_buffer_size`, 4k or 8k by default). A complete head is copied out of the
//! buffer once; [`ResponseHead`] keeps offsets into it, so a proxy forwards header lines as the
//! upstream wrote them, with no copy per header.
//!
//! Where nginx lets a doubtful upstream head through and RFC 9112 says to refuse it (obs-fold,
//! a space before the colon, a CR alone), this parser refuses it as an invalid header: the
//! response is a 502 instead of a chance for response splitting.

use bytes::{Buf, Bytes, BytesMut};
use memchr::memchr;

/// Offsets into a head are stored as `u32`; no configurable buffer comes near it.
const MAX_HEAD_LEN: usize = u32::MAX as usize;
/// The largest Content-Length accepted: nginx keeps lengths in a signed `off_t`.
const MAX_CONTENT_LENGTH: u64 = i64::MAX as u64;
/// How much of a refused header line the error message quotes.
const QUOTE_MAX: usize = 64;
/// Header lines room is made for at once: what a typical upstream sends.
const FIELDS_CAPACITY: usize = 16;

/// Why an upstream head is refused. The `Display` text is nginx's error-log message (the
/// proxy appends " while reading response header from upstream, client: ...").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamHeadError {
    /// The response does not start with an HTTP/1.x status line.
    #[error("upstream sent no valid HTTP/1.0 header")]
    NoValidHeader,
    /// A header line that cannot be parsed; the line (cut) is quoted.
    #[error("upstream sent invalid header: \"{0}\"")]
    InvalidHeader(String),
    /// The head does not fit in the limit (proxy_buffer_size).
    #[error("upstream sent too big header")]
    TooBig,
    /// A Content-Length that is not a plain decimal number.
    #[error("upstream sent invalid \"Content-Length\" header: \"Content-Length: {0}\"")]
    BadContentLength(String),
    /// A second Content-Length or Transfer-Encoding line.
    #[error("upstream sent duplicate header line: \"{0}\"")]
    Duplicate(String),
    /// Content-Length and Transfer-Encoding together.
    #[error("upstream sent \"Content-Length\" and \"Transfer-Encoding\" headers at the same time")]
    LengthAndTransferEncoding,
    /// A Transfer-Encoding other than `chunked`.
    #[error("upstream sent unknown \"Transfer-Encoding\": \"{0}\"")]
    UnknownTransferEncoding(String),
}

/// How the body of an upstream response is framed, from its headers alone: a response to
/// HEAD, a 1xx, 204 or 304 has no body whatever they say, and the caller knows which it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Exactly this many bytes follow.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// The body ends when the upstream closes the connection.
    UntilClose,
}

/// A byte range inside the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    /// Callers only build spans inside a head no longer than [`MAX_HEAD_LEN`].
    fn new(start: usize, end: usize) -> Span {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    fn of<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        bytes
            .get(self.start as usize..self.end as usize)
            .unwrap_or_default()
    }
}

/// Header names a proxy treats specially, recognised once while the head is parsed so that
/// forwarding compares a byte instead of names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KnownName {
    ContentLength,
    TransferEncoding,
    Connection,
    KeepAlive,
    ContentType,
    Location,
    Date,
    Server,
    /// `X-Pad` or a name starting with `X-Accel-`.
    XAccel,
    /// Any other name.
    Other,
}

impl KnownName {
    /// The kind of a header name, ASCII case-insensitively.
    pub fn of(name: &[u8]) -> KnownName {
        let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
        match name.len() {
            4 if is(b"date") => KnownName::Date,
            5 if is(b"x-pad") => KnownName::XAccel,
            6 if is(b"server") => KnownName::Server,
            8 if is(b"location") => KnownName::Location,
            10 if is(b"connection") => KnownName::Connection,
            10 if is(b"keep-alive") => KnownName::KeepAlive,
            12 if is(b"content-type") => KnownName::ContentType,
            14 if is(b"content-length") => KnownName::ContentLength,
            17 if is(b"transfer-encoding") => KnownName::TransferEncoding,
            n if n > 8 && name[..8].eq_ignore_ascii_case(b"x-accel-") => KnownName::XAccel,
            _ => KnownName::Other,
        }
    }
}

/// One header field: the name, the trimmed value, and the whole line with its line ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    name: Span,
    value: Span,
    line: Span,
    known: KnownName,
}

/// A parsed upstream response head. It owns the head's bytes; every accessor borrows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    bytes: Bytes,
    status: u16,
    /// HTTP/1.1 or later, as opposed to HTTP/1.0.
    http11: bool,
    /// The reason phrase, possibly empty.
    reason: Span,
    fields: Vec<Field>,
    framing: Framing,
    connection_close: bool,
    connection_upgrade: bool,
    /// `Keep-Alive: timeout=N`, in seconds.
    keep_alive_timeout: Option<u64>,
}

/// A header line as [`ResponseHead::fields`] gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderLine<'a> {
    /// The name as sent.
    pub name: &'a [u8],
    /// The value without surrounding spaces and tabs.
    pub value: &'a [u8],
    /// The whole line as sent, with its line ending.
    pub line: &'a [u8],
    /// What the name is, if it is one the proxy looks at.
    pub known: KnownName,
}

impl ResponseHead {
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The reason phrase as sent; nginx forwards it unchanged.
    pub fn reason(&self) -> &[u8] {
        self.reason.of(&self.bytes)
    }

    /// Whether the status line said HTTP/1.1 (or a later 1.x).
    pub fn is_http11(&self) -> bool {
        self.http11
    }

    /// Body framing by the headers; see [`Framing`].
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Whether the upstream connection must close after this response: `Connection: close`,
    /// or an HTTP/1.0 status line (nginx keeps no HTTP/1.0 upstream connection alive).
    pub fn connection_close(&self) -> bool {
        self.connection_close || !self.http11
    }

    /// `Connection: upgrade` was sent.
    pub fn connection_upgrade(&self) -> bool {
        self.connection_upgrade
    }

    /// The `timeout=` of a `Keep-Alive` header, in seconds.
    pub fn keep_alive_timeout(&self) -> Option<u64> {
        self.keep_alive_timeout
    }

    /// Every header line in order.
    pub fn fields(&self) -> impl Iterator<Item = HeaderLine<'_>> + '_ {
        self.fields.iter().map(|f| HeaderLine {
            name: f.name.of(&self.bytes),
            value: f.value.of(&self.bytes),
            line: f.line.of(&self.bytes),
            known: f.known,
        })
    }

    /// The value of the first header of a known name.
    pub fn known(&self, name: KnownName) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|f| f.known == name)
            .map(|f| f.value.of(&self.bytes))
    }

    /// The value of the first header with this name (ASCII case-insensitive). Only the lines
    /// of the name's kind are compared: a head without `X-Accel-*` lines answers a question
    /// for one without looking at a name.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        let name = name.as_bytes();
        let kind = KnownName::of(name);
        self.fields
            .iter()
            .filter(|f| f.known == kind)
            .find(|f| f.name.of(&self.bytes).eq_ignore_ascii_case(name))
            .map(|f| f.value.of(&self.bytes))
    }

    /// The whole head, status line to the empty line included.
    pub fn raw(&self) -> &[u8] {
        &self.bytes
    }
}

/// Parses one response head from the front of `buf`, which must fit in `limit` bytes.
///
/// `Ok(Some(head))` removes the head from `buf`, leaving body bytes. `Ok(None)` means the head
/// is incomplete and shorter than `limit`: read more and call again. Interim 1xx responses
/// other than 101 are returned like any other; the caller skips them.
pub fn parse_response_head(
    buf: &mut BytesMut,
    limit: usize,
) -> Result<Option<ResponseHead>, UpstreamHeadError> {
    let limit = limit.min(MAX_HEAD_LEN);
    let Some(line_lf) = memchr(b'\n', buf) else {
        return incomplete(buf, limit);
    };
    let line = parse_status_line(&buf[..line_lf])?;
    let mut head = ResponseHead {
        bytes: Bytes::new(),
        status: line.status,
        http11: line.http11,
        reason: line.reason,
        fields: Vec::with_capacity(FIELDS_CAPACITY),
        framing: Framing::UntilClose,
        connection_close: false,
        connection_upgrade: false,
        keep_alive_timeout: None,
    };
    let Some(head_end) = parse_fields(buf, line_lf + 1, limit, &mut head)? else {
        return incomplete(buf, limit);
    };
    // A copy rather than `split_to`: splitting would turn the caller's read buffer into a
    // shared one, and the next reserve on it would allocate again.
    head.bytes = Bytes::copy_from_slice(&buf[..head_end]);
    buf.advance(head_end);
    Ok(Some(head))
}

fn incomplete(buf: &[u8], limit: usize) -> Result<Option<ResponseHead>, UpstreamHeadError> {
    // Before the first line ends, a buffer that cannot be a status line is refused at once,
    // so a non-HTTP upstream is not waited on until the limit fills.
    let first = buf.len().min(b"HTTP/".len());
    if !b"HTTP/".starts_with(&buf[..first]) {
        return Err(UpstreamHeadError::NoValidHeader);
    }
    if buf.len() >= limit {
        return Err(UpstreamHeadError::TooBig);
    }
    Ok(None)
}

struct StatusLine {
    status: u16,
    http11: bool,
    reason: Span,
}

/// Parses `HTTP/1.x NNN[ reason]` (`line` without its LF; a CR before it is allowed).
fn parse_status_line(line: &[u8]) -> Result<StatusLine, UpstreamHeadError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let bad = || UpstreamHeadError::NoValidHeader;
    let rest = line.strip_prefix(b"HTTP/").ok_or_else(bad)?;
    let major_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if major_len == 0 || rest.get(major_len) != Some(&b'.') {
        return Err(bad());
    }
    let minor = &rest[major_len + 1..];
    let minor_len = minor.iter().take_while(|b| b.is_ascii_digit()).count();
    if minor_len == 0 || &rest[..major_len] != b"1" {
        return Err(bad());
    }
    let http11 = minor[..minor_len].iter().any(|&b| b != b'0');
    let after = &minor[minor_len..];
    let after = after.strip_prefix(b" ").ok_or_else(bad)?;
    let after_start = line.len() - after.len();
    let digits = after.get(..3).ok_or_else(bad)?;
    if !digits.iter().all(u8::is_ascii_digit) || digits[0] == b'0' {
        return Err(bad());
    }
    let status = digits
        .iter()
        .fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
    let reason_start = match after.get(3) {
        None => after_start + 3,
        Some(b' ') => after_start + 4,
        Some(_) => return Err(bad()),
    };
    if line[reason_start..]
        .iter()
        .any(|&b| (b < b' ' && b != b'\t') || b == 0x7f)
    {
        return Err(bad());
    }
    Ok(StatusLine {
        status,
        http11,
        reason: Span::new(reason_start, line.len()),
    })
}

/// Bytes of a header name: RFC 9110's token characters.
static TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        b += 1;
    }
    t
};

fn quote(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    String::from_utf8_lossy(&line[..line.len().min(QUOTE_MAX)]).into_owned()
}

/// The index of the first byte at or after `at` below 0x0E (NUL to CR, LF and tab among them),
/// or `buf.len()`: eight bytes a step, as header values rarely hold any.
fn find_control(buf: &[u8], mut at: usize) -> usize {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    while let Some(chunk) = buf.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        // The classic "has a byte less than n" test: the lowest flagged byte is exact.
        let below = word.wrapping_sub(ONES * 0x0E) & !word & HIGH;
        if below != 0 {
            return at + (below.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while buf.get(at).is_some_and(|&b| b >= 0x0E) {
        at += 1;
    }
    at
}

/// Parses the header lines of `buf` from `start` up to the empty line that ends the head, in
/// one pass, and returns the head's length; `None` when the head is not complete yet. A line
/// that ends past `limit` makes the head too big.
fn parse_fields(
    buf: &[u8],
    start: usize,
    limit: usize,
    out: &mut ResponseHead,
) -> Result<Option<usize>, UpstreamHeadError> {
    let mut line_start = start;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    loop {
        // One look at each byte: the name's token bytes up to the first other one (the colon
        // of a valid line), then the rest of the line for its LF, noting any CR that does not
        // end the line and any NUL.
        let mut at = line_start;
        while at < buf.len() && TOKEN[usize::from(buf[at])] {
            at += 1;
        }
        let colon = at;
        let mut stray = false;
        let lf = loop {
            at = find_control(buf, at);
            let Some(&b) = buf.get(at) else {
                return Ok(None);
            };
            if b == b'\n' {
                break at;
            }
            stray |= b == 0 || (b == b'\r' && buf.get(at + 1) != Some(&b'\n'));
            at += 1;
        };
        if lf >= limit {
            return Err(UpstreamHeadError::TooBig);
        }
        let line = &buf[line_start..=lf];
        let content_end = if lf > line_start && buf[lf - 1] == b'\r' {
            lf - 1
        } else {
            lf
        };
        if content_end == line_start && !stray {
            line_start = lf + 1;
            break;
        }
        let invalid = || UpstreamHeadError::InvalidHeader(quote(line));
        if stray || colon == line_start || colon >= content_end || buf[colon] != b':' {
            return Err(invalid());
        }
        let content = &buf[line_start..content_end];
        let colon = colon - line_start;
        let rest = &content[colon + 1..];
        let name = &content[..colon];
        let value = rest.trim_ascii();
        let value_start = if value.is_empty() {
            line_start + content.len()
        } else {
            line_start + colon + 1 + (rest.len() - rest.trim_ascii_start().len())
        };
        let known = KnownName::of(name);
        out.fields.push(Field {
            name: Span::new(line_start, line_start + colon),
            value: Span::new(value_start, value_start + value.len()),
            line: Span::new(line_start, lf + 1),
            known,
        });
        match known {
            KnownName::ContentLength => {
                if length.is_some() {
                    return Err(UpstreamHeadError::Duplicate(quote(line)));
                }
                length = Some(parse_length(value).ok_or_else(|| {
                    UpstreamHeadError::BadContentLength(String::from_utf8_lossy(value).into_owned())
                })?);
            }
            KnownName::TransferEncoding => {
                if transfer_encoding {
                    return Err(UpstreamHeadError::Duplicate(quote(line)));
                }
                transfer_encoding = true;
                if !value.eq_ignore_ascii_case(b"chunked") {
                    return Err(UpstreamHeadError::UnknownTransferEncoding(
                        String::from_utf8_lossy(value).into_owned(),
                    ));
                }
                chunked = true;
            }
            KnownName::Connection => {
                for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                    if token.eq_ignore_ascii_case(b"close") {
                        out.connection_close = true;
                    } else if token.eq_ignore_ascii_case(b"upgrade") {
                        out.connection_upgrade = true;
                    }
                }
            }
            KnownName::KeepAlive => out.keep_alive_timeout = keep_alive_timeout(value),
            _ => {}
        }
        line_start = lf + 1;
    }
    out.framing = match (length, chunked) {
        (Some(_), true) => return Err(UpstreamHeadError::LengthAndTransferEncoding),
        (Some(n), false) => Framing::Length(n),
        (None, true) => Framing::Chunked,
        (None, false) => Framing::UntilClose,
    };
    Ok(Some(line_start))
}

fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = value.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    (n <= MAX_CONTENT_LENGTH).then_some(n)
}

/// The `timeout=N` parameter of a Keep-Alive header.
fn keep_alive_timeout(value: &[u8]) -> Option<u64> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .find_map(|p| {
            let (k, v) = p.split_at(p.iter().position(|&b| b == b'=')?);
            k.trim_ascii()
                .eq_ignore_ascii_case(b"timeout")
                .then(|| parse_length(v[1..].trim_ascii()))?
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &[u8]) -> Result<Option<ResponseHead>, UpstreamHeadError> {
        parse_response_head(&mut BytesMut::from(input), 4096)
    }

    fn complete(input: &[u8]) -> ResponseHead {
        match parse(input) {
            Ok(Some(h)) => h,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn simple_head_with_length_leaves_body() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 5\r\nX-A:  b c \r\n\r\nhello"[..],
        );
        let h = parse_response_head(&mut buf, 4096).unwrap().unwrap();
        assert_eq!(h.status(), 200);
        assert_eq!(h.reason(), b"OK");
        assert!(h.is_http11());
        assert_eq!(h.framing(), Framing::Length(5));
        assert_eq!(h.header("x-a"), Some(&b"b c"[..]));
        assert_eq!(&buf[..], b"hello");
        let lines: Vec<_> = h.fields().map(|f| f.line.to_vec()).collect();
        assert_eq!(lines[0], b"Server: x\r\n");
        assert_eq!(lines.len(), 3);
        assert!(!h.connection_close());
    }

    #[test]
    fn incomplete_heads_wait() {
        assert_eq!(parse(b""), Ok(None));
        assert_eq!(parse(b"HTT"), Ok(None));
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\nA: b\r\n"), Ok(None));
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\nA: b\r\n\r"), Ok(None));
    }

    #[test]
    fn framing_and_connection() {
        let h = complete(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(h.framing(), Framing::Chunked);
        let h = complete(b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\n\r\n");
        assert_eq!(h.framing(), Framing::UntilClose);
        assert!(h.connection_close());
        let h = complete(b"HTTP/1.0 200 OK\r\n\r\n");
        assert!(h.connection_close());
        let h = complete(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
        assert!(h.connection_upgrade());
        let h = complete(b"HTTP/1.1 200 OK\r\nKeep-Alive: max=5, timeout=7\r\n\r\n");
        assert_eq!(h.keep_alive_timeout(), Some(7));
    }

    #[test]
    fn bare_lf_and_no_reason() {
        let h = complete(b"HTTP/1.1 204\nA: b\n\n");
        assert_eq!(h.status(), 204);
        assert_eq!(h.reason(), b"");
        assert_eq!(h.header("a"), Some(&b"b"[..]));
        let h = complete(b"HTTP/1.1 200 \r\nEmpty:\r\n\r\n");
        assert_eq!(h.header("empty"), Some(&b""[..]));
    }

    #[test]
    fn refusals() {
        use UpstreamHeadError::*;
        assert_eq!(parse(b"hello\r\n\r\n"), Err(NoValidHeader));
        assert_eq!(parse(b"<html>"), Err(NoValidHeader));
        assert_eq!(parse(b"HTTP/2.0 200 OK\r\n\r\n"), Err(NoValidHeader));
        assert_eq!(parse(b"HTTP/1.1 20 OK\r\n\r\n"), Err(NoValidHeader));
        assert_eq!(parse(b"HTTP/1.1 2000 OK\r\n\r\n"), Err(NoValidHeader));
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n"),
            Err(InvalidHeader("Bad Name: x".into()))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n"),
            Err(InvalidHeader(" folded".into()))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n"),
            Err(InvalidHeader("A: b\rc".into()))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nA: b\r\r\n\r\n"),
            Err(InvalidHeader("A: b\r".into()))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nA: b\0\r\n\r\n"),
            Err(InvalidHeader("A: b\0".into()))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\n\r\r\n\r\n"),
            Err(InvalidHeader("\r".into()))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nNoColon\r\n\r\n"),
            Err(InvalidHeader("NoColon".into()))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n"),
            Err(Duplicate("Content-Length: 1".into()))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"),
            Err(BadContentLength("-1".into()))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(LengthAndTransferEncoding)
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
            Err(UnknownTransferEncoding("gzip".into()))
        );
    }

    #[test]
    fn limit_is_enforced() {
        let mut long = b"HTTP/1.1 200 OK\r\nA: ".to_vec();
        long.resize(100, b'x');
        assert_eq!(
            parse_response_head(&mut BytesMut::from(&long[..]), 100),
            Err(UpstreamHeadError::TooBig)
        );
        long.extend_from_slice(b"\r\n\r\n");
        assert_eq!(
            parse_response_head(&mut BytesMut::from(&long[..]), 100),
            Err(UpstreamHeadError::TooBig)
        );
        assert!(parse_response_head(&mut BytesMut::from(&long[..]), 104)
            .unwrap()
            .is_some());
    }

    #[test]
    fn names_are_recognised_in_any_case() {
        let h = complete(
            b"HTTP/1.1 200 OK\r\nDATE: d\r\ncontent-TYPE: t\r\nX-Accel-Redirect: /r\r\n\
              X-Pad: p\r\nX-Accelerated: no\r\nLocation: /l\r\nServer: s\r\n\r\n",
        );
        let kinds: Vec<_> = h.fields().map(|f| f.known).collect();
        use KnownName::*;
        assert_eq!(
            kinds,
            [Date, ContentType, XAccel, XAccel, Other, Location, Server]
        );
        assert_eq!(h.known(ContentType), Some(&b"t"[..]));
        assert_eq!(h.known(Location), Some(&b"/l"[..]));
        assert_eq!(h.known(ContentLength), None);
        assert_eq!(KnownName::of(b"Keep-Alive"), KeepAlive);
        assert_eq!(KnownName::of(b"x-accel-"), Other);
    }

    #[test]
    fn an_invalid_line_past_the_limit_is_too_big() {
        let mut head = b"HTTP/1.1 200 OK\r\nA: b\r\n".to_vec();
        let limit = head.len() + 4;
        head.extend_from_slice(b"Bad Name: x\r\n\r\n");
        assert_eq!(
            parse_response_head(&mut BytesMut::from(&head[..]), limit),
            Err(UpstreamHeadError::TooBig)
        );
        assert_eq!(
            parse_response_head(&mut BytesMut::from(&head[..]), 4096),
            Err(UpstreamHeadError::InvalidHeader("Bad Name: x".into()))
        );
    }

    #[test]
    fn control_bytes_are_found_at_any_offset() {
        for len in 0..40 {
            for pos in 0..=len {
                let mut buf = vec![b'a'; len];
                if pos < len {
                    buf[pos] = b'\r';
                }
                for start in 0..=pos.min(len) {
                    assert_eq!(find_control(&buf, start), pos, "len {len} start {start}");
                }
            }
        }
        assert_eq!(find_control(b"abcdefgh\tij\n", 0), 8);
        assert_eq!(find_control(b"\x0e\x0f\x7f\xff abcdefg", 0), 12);
    }

    #[test]
    fn any_split_gives_the_same_head() {
        let input =
            b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabc";
        let whole = complete(input);
        for split in 0..input.len() - 3 {
            assert_eq!(parse(&input[..split]), Ok(None), "split at {split}");
        }
        assert_eq!(whole.status(), 404);
    }
}
