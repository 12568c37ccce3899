//! Request heads: the request line, the header fields, and nginx's limits on their size.
//!
//! [`parse_request_head`] is stateless: it looks at the whole buffer each time it is called,
//! which stays cheap because a head is bounded by [`HeadLimits`] (about 33 KB by default).
//! A complete head is split off the buffer and frozen; [`RequestHead`] keeps offsets into it,
//! so the only allocations per request are that `Bytes` handle and one `Vec` of header spans
//! sized from a count of the head's lines (plus a lowercased copy of the host, only when the
//! client sent uppercase).
//!
//! Where nginx 1.22 and RFC 9112 agree, both are followed. Where nginx is lenient in ways that
//! invite request smuggling, this parser refuses instead (and says so on the item concerned).

use bytes::{Buf, Bytes, BytesMut};
use memchr::{memchr, memchr_iter};

use crate::error::RequestError;

/// The default of [`HeadLimits::max_headers`]: nginx's `max_headers` default (Debian's
/// nginx 1.22.1 has the directive backported). Measured: 1000 header lines pass, 1001 get
/// 400 with the "Request Header Or Cookie Too Large" page.
pub const MAX_HEADERS: usize = 1000;

/// nginx's `client_header_buffer_size` default.
const DEFAULT_HEADER_BUFFER_SIZE: usize = 1024;
/// nginx's `large_client_header_buffers` default count.
const DEFAULT_LARGE_BUFFERS: usize = 4;
/// nginx's `large_client_header_buffers` default size.
const DEFAULT_LARGE_BUFFER_SIZE: usize = 8192;
/// Offsets into a head are stored as `u32`; a head this long is refused whatever the limits.
const MAX_HEAD_LEN: usize = u32::MAX as usize;
/// Minor version numbers longer than this are refused, as nginx refuses minor > 999.
const MAX_MINOR_DIGITS: usize = 3;
/// The largest Content-Length nginx accepts: it keeps lengths in a signed `off_t`.
const MAX_CONTENT_LENGTH: u64 = i64::MAX as u64;

/// How much head a client may send, in nginx's terms.
///
/// The head is read into one buffer of `header_buffer_size`; when it does not fit, the line
/// being read moves to a fresh buffer of `large_buffer_size`, at most `large_buffers` times.
/// A request line longer than a large buffer gives 414, a header line longer than one gives
/// 400 ("Request Header Or Cookie Too Large"), and so does running out of large buffers.
/// [`parse_request_head`] replays that packing, so the same heads pass or fail as in nginx.
/// Within those bytes, at most `max_headers` header lines are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadLimits {
    /// `client_header_buffer_size`.
    pub header_buffer_size: usize,
    /// The count of `large_client_header_buffers`.
    pub large_buffers: usize,
    /// The size of `large_client_header_buffers`.
    pub large_buffer_size: usize,
    /// `max_headers`: the most header lines a request may carry; more get 400 with the
    /// "Request Header Or Cookie Too Large" page. Lines ignored for an invalid name do not
    /// count, as in nginx.
    pub max_headers: usize,
    /// `underscores_in_headers`: an `_` in a name is a name's byte, not an invalid one.
    pub underscores: bool,
    /// `ignore_invalid_headers`: a line whose name holds an invalid byte is dropped; off, it
    /// is kept as any other.
    pub ignore_invalid: bool,
}

impl Default for HeadLimits {
    fn default() -> Self {
        HeadLimits {
            header_buffer_size: DEFAULT_HEADER_BUFFER_SIZE,
            large_buffers: DEFAULT_LARGE_BUFFERS,
            large_buffer_size: DEFAULT_LARGE_BUFFER_SIZE,
            max_headers: MAX_HEADERS,
            underscores: false,
            ignore_invalid: true,
        }
    }
}

/// The protocol version of a request.
///
/// `HTTP/1.x` with a minor version above 1 is read as 1.1, as nginx does. A request line
/// without a version is HTTP/0.9: nginx serves it (GET only) with a bare body, no status line
/// and no headers, and so must the caller. Major versions above 1 are refused with 505.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    Http09,
    Http10,
    Http11,
}

impl Version {
    /// The version as nginx's `$server_protocol` shows it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Version::Http09 => "HTTP/0.9",
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }
}

/// The request method; [`RequestHead::method_str`] has the exact token for `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Patch,
    Trace,
    Connect,
    Other,
}

impl Method {
    fn from_token(token: &[u8]) -> Method {
        match token {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"PATCH" => Method::Patch,
            b"TRACE" => Method::Trace,
            b"CONNECT" => Method::Connect,
            _ => Method::Other,
        }
    }

    /// The token of a known method (`None` for [`Method::Other`]).
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Trace => "TRACE",
            Method::Connect => "CONNECT",
            Method::Other => return None,
        })
    }
}

/// How the request body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body.
    None,
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// `Transfer-Encoding: chunked`; decode with [`crate::ChunkedDecoder`].
    Chunked,
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

    fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HeaderSpan {
    name: Span,
    value: Span,
}

/// A parsed request head. It owns the head's bytes; every accessor borrows from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    bytes: Bytes,
    method: Method,
    method_end: u32,
    version: Version,
    request_line: Span,
    target: Span,
    /// Empty for an absolute-form target without a path, which means "/".
    path: Span,
    query: Option<Span>,
    host: Option<Span>,
    /// The host lowercased, kept only when the client sent uppercase letters.
    host_lower: Option<Box<[u8]>>,
    headers: Vec<HeaderSpan>,
    body: BodyKind,
    keep_alive: bool,
    expect_continue: bool,
}

impl RequestHead {
    pub fn method(&self) -> Method {
        self.method
    }

    /// The method token exactly as sent.
    pub fn method_str(&self) -> &str {
        // A known method's token is its name exactly (`Method::from_token`); another token
        // was checked to be `A-Z`, `_` and `-` only.
        match self.method.name() {
            Some(name) => name,
            None => {
                std::str::from_utf8(&self.bytes[..self.method_end as usize]).unwrap_or_default()
            }
        }
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// The request target as sent: origin-form (`/p?q`) or absolute-form (`http://h/p?q`).
    pub fn target(&self) -> &[u8] {
        self.target.of(&self.bytes)
    }

    /// The raw path, still percent-encoded, without query or fragment; "/" when an
    /// absolute-form target has none. [`crate::normalize_path`] turns it into `$uri`.
    pub fn path(&self) -> &[u8] {
        if self.path.is_empty() {
            b"/"
        } else {
            self.path.of(&self.bytes)
        }
    }

    /// The raw query after '?', without a fragment: nginx's `$args`.
    pub fn query(&self) -> Option<&[u8]> {
        self.query.map(|span| span.of(&self.bytes))
    }

    /// The host the request is for, nginx's `$host` when there is one: the absolute-form
    /// authority if there is one, else the Host header; validated as nginx does, without
    /// port or trailing dot, ASCII letters lowercased. Bytes above 0x7f are kept as sent,
    /// UTF-8 or not: nginx accepts them, matches server names against them bytewise and
    /// writes them back in `$host` and redirects.
    pub fn host_bytes(&self) -> Option<&[u8]> {
        match &self.host_lower {
            Some(lower) => Some(lower),
            None => Some(self.host?.of(&self.bytes)),
        }
    }

    /// [`Self::host_bytes`] when it is UTF-8. A host that is not (`Host: \xe9`) gives `None`
    /// although the request has one, so use [`Self::host_bytes`] wherever that matters.
    pub fn host(&self) -> Option<&str> {
        std::str::from_utf8(self.host_bytes()?).ok()
    }

    /// The value of the first header with this name (ASCII case-insensitive). Lines the
    /// parser ignored (see [`parse_request_head`]) are not found: by default, any name with
    /// '_'.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        // Bytes compared as they are: a name that is not UTF-8 never equals `name`, as it
        // never does in `headers()`, and no name is checked for UTF-8 on the way.
        self.headers
            .iter()
            .find(|h| h.name.of(&self.bytes).eq_ignore_ascii_case(name.as_bytes()))
            .map(|h| h.value.of(&self.bytes))
    }

    /// Appends the values of every header called `name`, joined by `sep`: nginx's
    /// `$http_cookie` (`"; "`) and `$http_x_forwarded_for` (`", "`) read a repeated header so.
    /// Whether there was one.
    pub fn joined_header(&self, name: &str, sep: &[u8], out: &mut Vec<u8>) -> bool {
        let mut found = false;
        for value in self.header_values(name) {
            if found {
                out.extend_from_slice(sep);
            }
            out.extend_from_slice(value);
            found = true;
        }
        found
    }

    /// The values of every header called `name`, in order.
    pub fn header_values<'h>(&'h self, name: &'h str) -> impl Iterator<Item = &'h [u8]> + 'h {
        self.headers
            .iter()
            .filter(move |h| h.name.of(&self.bytes).eq_ignore_ascii_case(name.as_bytes()))
            .map(|h| h.value.of(&self.bytes))
    }

    /// The first header `$http_<name>` reads, `name` written with `-` for `_`: as nginx
    /// compares, ASCII case-insensitively and with `_` and `-` alike (a name may hold `_` with
    /// `underscores_in_headers on`).
    pub fn header_for_variable(&self, name: &str) -> Option<&[u8]> {
        let fold = |b: u8| match b {
            b'_' => b'-',
            b => b.to_ascii_lowercase(),
        };
        self.headers()
            .find(|(n, _)| {
                n.len() == name.len()
                    && n.bytes().zip(name.bytes()).all(|(a, b)| fold(a) == fold(b))
            })
            .map(|(_, v)| v)
    }

    /// Every header kept, in order, names as sent, values without surrounding spaces (tabs
    /// stay, as in nginx). A line without a colon is a header with an empty value.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        self.headers.iter().map(|h| {
            // Kept names are ASCII letters, digits and '-' ('_' too, and other bytes, when the
            // server keeps them): a name that is not UTF-8 reads as empty.
            let name = std::str::from_utf8(h.name.of(&self.bytes)).unwrap_or_default();
            (name, h.value.of(&self.bytes))
        })
    }

    /// The number of header lines.
    pub fn header_count(&self) -> usize {
        self.headers.len()
    }

    pub fn body(&self) -> BodyKind {
        self.body
    }

    /// Whether the connection may carry another request: HTTP/1.1 unless `Connection: close`,
    /// HTTP/1.0 only with `Connection: keep-alive`, HTTP/0.9 never.
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    /// `Expect: 100-continue` on an HTTP/1.1 request (nginx ignores it on 1.0).
    pub fn expect_continue(&self) -> bool {
        self.expect_continue
    }

    /// The whole head, request line to the empty line included.
    pub fn raw(&self) -> &[u8] {
        &self.bytes
    }

    /// The whole head as a shared `Bytes`, for forwarding without a copy.
    pub fn raw_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The request line without its line ending, as it came: nginx's `$request`.
    pub fn request_line_bytes(&self) -> &[u8] {
        self.request_line.of(&self.bytes)
    }

    /// The request line without its line ending. Bytes that are not UTF-8 make it fall back
    /// to the longest valid prefix.
    pub fn request_line(&self) -> &str {
        let line = self.request_line.of(&self.bytes);
        match std::str::from_utf8(line) {
            Ok(s) => s,
            Err(e) => std::str::from_utf8(&line[..e.valid_up_to()]).unwrap_or_default(),
        }
    }
}

/// Parses one request head from the front of `buf`.
///
/// `Ok(Some(head))` removes the head from `buf`, leaving the body and any pipelined requests.
/// `Ok(None)` means the head is incomplete and what arrived so far is within `limits`: read
/// more and call again. Empty lines before the request line are discarded (RFC 9112 2.2).
///
/// Header lines are read as nginx 1.22 reads them (here with its defaults
/// `ignore_invalid_headers on` and `underscores_in_headers off`, which `limits` may change): a
/// line whose name holds a byte other than a letter, digit or '-' (an '_', '.', a byte above
/// 0x7f, ...) is ignored; a line without a colon is a
/// header with an empty value; a name that is empty or holds a space, a control byte or DEL,
/// a NUL anywhere, or a CR not followed by the line's end is refused with 400.
///
/// An error means the connection must be answered with [`RequestError::status`] and closed.
pub fn parse_request_head(
    buf: &mut BytesMut,
    limits: &HeadLimits,
) -> Result<Option<RequestHead>, RequestError> {
    skip_empty_lines(buf);
    let Some(line_lf) = memchr(b'\n', buf) else {
        check_limits(buf, false, limits)?;
        return Ok(None);
    };
    let line = parse_request_line(&buf[..=line_lf])?;
    let head_end = if line.version == Version::Http09 {
        line_lf + 1
    } else {
        match find_head_end(buf, line_lf)? {
            Some(end) => end,
            None => {
                check_limits(buf, false, limits)?;
                return Ok(None);
            }
        }
    };
    check_limits(&buf[..head_end], true, limits)?;
    let fields = parse_fields(&buf[..head_end], &line, limits)?;
    let bytes = buf.split_to(head_end).freeze();
    Ok(Some(RequestHead {
        bytes,
        method: line.method,
        method_end: line.method_end as u32,
        version: line.version,
        request_line: line.line,
        target: line.target,
        path: line.path,
        query: line.query,
        host: fields.host,
        host_lower: fields.host_lower,
        headers: fields.headers,
        body: fields.body,
        keep_alive: fields.keep_alive,
        expect_continue: fields.expect_continue,
    }))
}

/// Drops CRLF or LF lines in front of a request; a lone CR waits for the next byte.
fn skip_empty_lines(buf: &mut BytesMut) {
    let mut n = 0;
    loop {
        match &buf[n..] {
            [b'\n', ..] => n += 1,
            [b'\r', b'\n', ..] => n += 2,
            _ => break,
        }
    }
    buf.advance(n);
}

/// Finds the end of the head (just past the empty line), starting at the request line's LF.
/// Refuses obs-fold here, where line starts are already being looked at.
fn find_head_end(buf: &[u8], first_lf: usize) -> Result<Option<usize>, RequestError> {
    for lf in memchr_iter(b'\n', &buf[first_lf..]).map(|i| i + first_lf) {
        match buf.get(lf + 1..) {
            Some([b'\n', ..]) => return Ok(Some(lf + 2)),
            Some([b'\r', b'\n', ..]) => return Ok(Some(lf + 3)),
            Some([b' ' | b'\t', ..]) => return Err(RequestError::ObsFold),
            _ => {}
        }
    }
    Ok(None)
}

/// Replays nginx's header buffer packing over `head` (see [`HeadLimits`]). When the head is
/// incomplete, its last partial line counts as at least one byte longer than received.
fn check_limits(head: &[u8], complete: bool, limits: &HeadLimits) -> Result<(), RequestError> {
    if head.len() <= limits.header_buffer_size {
        return Ok(());
    }
    if head.len() >= MAX_HEAD_LEN {
        return Err(RequestError::HeadTooLarge);
    }
    let mut packer = BufferPacker {
        limits,
        buffer_start: 0,
        capacity: limits.header_buffer_size,
        large_used: 0,
    };
    let mut line_start = 0;
    let mut index = 0;
    for lf in memchr_iter(b'\n', head) {
        packer.place(line_start, lf + 1, index == 0)?;
        line_start = lf + 1;
        index += 1;
    }
    if !complete && line_start < head.len() {
        packer.place(line_start, head.len() + 1, index == 0)?;
    }
    Ok(())
}

/// The state of nginx's header buffers while lines are placed in them, one after the other.
struct BufferPacker<'a> {
    limits: &'a HeadLimits,
    /// Offset in the head where the current buffer begins.
    buffer_start: usize,
    capacity: usize,
    large_used: usize,
}

impl BufferPacker<'_> {
    /// Places the line `[start, end)`; a line that overflows the current buffer moves whole
    /// into a new large buffer.
    fn place(&mut self, start: usize, end: usize, request_line: bool) -> Result<(), RequestError> {
        if end - self.buffer_start <= self.capacity {
            return Ok(());
        }
        self.large_used += 1;
        let too_long = end - start > self.limits.large_buffer_size;
        if too_long || self.large_used > self.limits.large_buffers {
            return Err(if request_line {
                RequestError::UriTooLong
            } else if too_long {
                RequestError::HeaderLineTooLong
            } else {
                RequestError::HeadTooLarge
            });
        }
        self.buffer_start = start;
        self.capacity = self.limits.large_buffer_size;
        Ok(())
    }
}

/// What the request line says, as offsets into the head.
#[derive(Debug)]
struct RequestLine {
    method: Method,
    method_end: usize,
    version: Version,
    /// The line without trailing spaces and line ending.
    line: Span,
    target: Span,
    path: Span,
    query: Option<Span>,
    /// The host of an absolute-form target, without port.
    authority_host: Option<Span>,
}

/// nginx takes methods made of `A-Z`, `_` and `-` only (so "get" is refused).
fn is_method_byte(b: u8) -> bool {
    b.is_ascii_uppercase() || b == b'_' || b == b'-'
}

/// Bytes allowed in a request target: anything visible, including bytes above 0x7f as
/// nginx allows; controls, space and DEL are not.
fn is_target_byte(b: u8) -> bool {
    b > b' ' && b != 0x7f
}

/// Parses `line`, which ends with its LF. Spaces between the parts may be repeated and may
/// trail the version, and a bare LF ends the line, as nginx (and RFC 9112 3) tolerate.
fn parse_request_line(line: &[u8]) -> Result<RequestLine, RequestError> {
    let n = line.len();
    let method_end = line.iter().position(|&b| !is_method_byte(b)).unwrap_or(n);
    if method_end == 0 || line[method_end] != b' ' {
        return Err(if line[method_end].is_ascii_graphic() {
            RequestError::BadMethod
        } else {
            RequestError::BadRequestLine
        });
    }
    let target_start = skip_spaces(line, method_end);
    let target_end = line[target_start..]
        .iter()
        .position(|&b| !is_target_byte(b))
        .map_or(n, |i| i + target_start);
    if target_end == target_start {
        return Err(RequestError::BadRequestLine);
    }
    let after_target = skip_spaces(line, target_end);
    let method = Method::from_token(&line[..method_end]);
    let (version, version_end) = if is_line_end(line, after_target) {
        if method != Method::Get {
            return Err(RequestError::BadHttp09);
        }
        (Version::Http09, target_end)
    } else if after_target == target_end {
        return Err(RequestError::BadRequestLine);
    } else {
        parse_version(line, after_target)?
    };
    if !is_line_end(line, skip_spaces(line, version_end)) {
        return Err(RequestError::BadRequestLine);
    }
    let target = split_target(&line[target_start..target_end], target_start)?;
    Ok(RequestLine {
        method,
        method_end,
        version,
        line: Span::new(0, version_end),
        target: Span::new(target_start, target_end),
        path: target.path,
        query: target.query,
        authority_host: target.host,
    })
}

fn skip_spaces(line: &[u8], mut i: usize) -> usize {
    while line.get(i) == Some(&b' ') {
        i += 1;
    }
    i
}

/// Whether `line[i..]` is exactly the line ending, CRLF or LF.
fn is_line_end(line: &[u8], i: usize) -> bool {
    matches!(line.get(i..), Some(b"\n" | b"\r\n"))
}

/// Parses `HTTP/<major>.<minor>` at `start`; returns the version and where it ends.
fn parse_version(line: &[u8], start: usize) -> Result<(Version, usize), RequestError> {
    let rest = line
        .get(start..)
        .and_then(|r| r.strip_prefix(b"HTTP/"))
        .ok_or(RequestError::BadRequestLine)?;
    let major_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if major_len == 0 || rest[0] == b'0' || rest.get(major_len) != Some(&b'.') {
        return Err(RequestError::BadRequestLine);
    }
    let minor = &rest[major_len + 1..];
    let minor_len = minor.iter().take_while(|b| b.is_ascii_digit()).count();
    if minor_len == 0 || minor_len > MAX_MINOR_DIGITS {
        return Err(RequestError::BadRequestLine);
    }
    let end = start + "HTTP/".len() + major_len + 1 + minor_len;
    if &rest[..major_len] != b"1" {
        // A malformed line stays a 400 even with a major version nginx would refuse.
        if !is_line_end(line, skip_spaces(line, end)) {
            return Err(RequestError::BadRequestLine);
        }
        return Err(RequestError::VersionNotSupported);
    }
    let version = if minor.iter().take(minor_len).all(|&b| b == b'0') {
        Version::Http10
    } else {
        Version::Http11
    };
    Ok((version, end))
}

/// The parts of a request target, as offsets into the head.
struct TargetParts {
    path: Span,
    query: Option<Span>,
    host: Option<Span>,
}

/// Splits a target that starts at `base` in the head. Origin-form starts with '/';
/// absolute-form is `scheme://host[:port]` followed by an optional path and query. nginx
/// refuses every other form (asterisk and authority-form included) with 400.
fn split_target(target: &[u8], base: usize) -> Result<TargetParts, RequestError> {
    let (host, rest_start) = if target.first() == Some(&b'/') {
        (None, 0)
    } else {
        let (host, end) = split_authority(target)?;
        (Some(Span::new(base + host.0, base + host.1)), end)
    };
    let rest = &target[rest_start..];
    let path_len = rest
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(rest.len());
    let path_start = base + rest_start;
    let path = Span::new(path_start, path_start + path_len);
    let query = if rest.get(path_len) == Some(&b'?') {
        let q = &rest[path_len + 1..];
        let q_len = memchr(b'#', q).unwrap_or(q.len());
        let q_start = path_start + path_len + 1;
        Some(Span::new(q_start, q_start + q_len))
    } else {
        None
    };
    Ok(TargetParts { path, query, host })
}

/// Bytes nginx accepts inside an IP literal (`[...]`) of an absolute-form target.
fn is_ip_literal_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:%".contains(&b)
}

/// Reads `scheme://host[:port]` at the start of an absolute-form target. Returns the host's
/// range (IP literals keep their brackets) and where the path or query starts. As in nginx,
/// the scheme is letters only and a host holds letters, digits, '.' and '-'; userinfo and
/// other bytes are refused.
fn split_authority(target: &[u8]) -> Result<((usize, usize), usize), RequestError> {
    let scheme_len = target
        .iter()
        .take_while(|b| b.is_ascii_alphabetic())
        .count();
    if scheme_len == 0 || !target[scheme_len..].starts_with(b"://") {
        return Err(RequestError::BadRequestLine);
    }
    let host_start = scheme_len + "://".len();
    let mut i = host_start;
    if target.get(i) == Some(&b'[') {
        i += 1;
        while target.get(i).is_some_and(|&b| is_ip_literal_byte(b)) {
            i += 1;
        }
        if target.get(i) != Some(&b']') {
            return Err(RequestError::BadRequestLine);
        }
        i += 1;
    } else {
        while target
            .get(i)
            .is_some_and(|&b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        {
            i += 1;
        }
    }
    let host_end = i;
    if target.get(i) == Some(&b':') {
        i += 1;
        while target.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    match target.get(i) {
        None | Some(b'/' | b'?' | b'#') => Ok(((host_start, host_end), i)),
        Some(_) => Err(RequestError::BadRequestLine),
    }
}

/// Checks a host as nginx's `ngx_http_validate_host` does and returns the length of its
/// name part: without a port, and without one trailing dot. Refused: an empty name, "..",
/// '/', controls, space and DEL. Bytes above 0x7f pass, UTF-8 or not, as in nginx.
fn validate_host(host: &[u8]) -> Result<usize, RequestError> {
    #[derive(PartialEq)]
    enum State {
        Usual,
        Literal,
        Rest,
    }
    let mut state = State::Usual;
    let mut dot_pos: Option<usize> = None;
    let mut host_len = host.len();
    for (i, &ch) in host.iter().enumerate() {
        match ch {
            b'.' => {
                if i > 0 && dot_pos == Some(i - 1) {
                    return Err(RequestError::BadHost);
                }
                dot_pos = Some(i);
            }
            b':' if state == State::Usual => {
                host_len = i;
                state = State::Rest;
            }
            b'[' if i == 0 => state = State::Literal,
            b']' if state == State::Literal => {
                host_len = i + 1;
                state = State::Rest;
            }
            b'/' => return Err(RequestError::BadHost),
            _ if ch <= b' ' || ch == 0x7f => return Err(RequestError::BadHost),
            _ => {}
        }
    }
    if host_len > 0 && dot_pos == Some(host_len - 1) {
        host_len -= 1;
    }
    if host_len == 0 {
        return Err(RequestError::BadHost);
    }
    Ok(host_len)
}

/// What the header fields say.
struct Fields {
    host: Option<Span>,
    host_lower: Option<Box<[u8]>>,
    headers: Vec<HeaderSpan>,
    body: BodyKind,
    keep_alive: bool,
    expect_continue: bool,
}

/// Headers nginx refuses to see twice, each with its bit in a "seen" mask.
const UNIQUE_HEADERS: [&str; 11] = [
    "host",
    "content-length",
    "transfer-encoding",
    "if-modified-since",
    "if-unmodified-since",
    "if-match",
    "if-none-match",
    "if-range",
    "authorization",
    "expect",
    "content-range",
];

/// Parses the header fields of the complete head `head` and applies nginx's rules on Host,
/// body framing, Connection and Expect.
fn parse_fields(
    head: &[u8],
    line: &RequestLine,
    limits: &HeadLimits,
) -> Result<Fields, RequestError> {
    let mut host = match line.authority_host {
        Some(span) => {
            let len = validate_host(span.of(head))?;
            Some(Span::new(span.start as usize, span.start as usize + len))
        }
        None => None,
    };
    let mut fields = Fields {
        host: None,
        host_lower: None,
        headers: Vec::new(),
        body: BodyKind::None,
        keep_alive: false,
        expect_continue: false,
    };
    if line.version == Version::Http09 {
        fields.host = host;
        fields.host_lower = lowercase_copy(host, head);
        return Ok(fields);
    }
    let headers = scan_header_lines(head, line_after(head, line.line.end as usize), limits)?;

    let mut seen = 0u16;
    let mut has_host_header = false;
    let mut content_length = None;
    let mut transfer_encoding = None;
    let (mut close, mut keep_alive) = (false, false);
    for h in &headers {
        let name = h.name.of(head);
        let value = h.value.of(head);
        if let Some(bit) = UNIQUE_HEADERS
            .iter()
            .position(|u| u.as_bytes().eq_ignore_ascii_case(name))
        {
            if seen & (1 << bit) != 0 {
                return Err(RequestError::DuplicateHeader);
            }
            seen |= 1 << bit;
        }
        if name.eq_ignore_ascii_case(b"host") {
            has_host_header = true;
            let len = validate_host(value)?;
            if host.is_none() {
                let start = h.value.start as usize;
                host = Some(Span::new(start, start + len));
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            content_length = Some(parse_content_length(value)?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer_encoding = Some(value);
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(trim_ows) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"expect") {
            fields.expect_continue =
                line.version == Version::Http11 && value.eq_ignore_ascii_case(b"100-continue");
        }
    }

    if line.version == Version::Http11 && !has_host_header {
        return Err(RequestError::MissingHost);
    }
    fields.body = match (transfer_encoding, content_length) {
        (Some(_), _) if line.version == Version::Http10 => {
            return Err(RequestError::TransferEncodingInHttp10)
        }
        (Some(te), cl) if te.eq_ignore_ascii_case(b"chunked") => {
            if cl.is_some() {
                return Err(RequestError::LengthAndTransferEncoding);
            }
            BodyKind::Chunked
        }
        (Some(_), _) => return Err(RequestError::UnknownTransferEncoding),
        (None, Some(len)) => BodyKind::Length(len),
        (None, None) => BodyKind::None,
    };
    fields.headers = headers;
    fields.keep_alive = !close && (line.version == Version::Http11 || keep_alive);
    fields.host = host;
    fields.host_lower = lowercase_copy(host, head);
    Ok(fields)
}

/// Reads the header lines of `head` from `start` up to the empty line and returns those
/// kept, at most `max` of them. The head is complete, so every line ends with LF.
fn scan_header_lines(
    head: &[u8],
    mut start: usize,
    limits: &HeadLimits,
) -> Result<Vec<HeaderSpan>, RequestError> {
    let max = limits.max_headers;
    // Counting line ends first (one vectorised pass over a head the buffer limits keep
    // small) sizes the Vec once, whatever the number of lines; the empty line is not one.
    let lines = memchr_iter(b'\n', &head[start..]).count().saturating_sub(1);
    let mut headers = Vec::with_capacity(lines.min(max));
    while let Some(lf) = memchr(b'\n', &head[start..]).map(|i| start + i) {
        if matches!(&head[start..lf], b"" | b"\r") {
            break;
        }
        if let Some(field) = parse_header_line(head, start, lf, limits)? {
            // Checked as each line is taken, so a bad line before the limit wins, as in nginx.
            if headers.len() == max {
                return Err(RequestError::TooManyHeaders);
            }
            headers.push(field);
        }
        start = lf + 1;
    }
    Ok(headers)
}

/// Parses the header line `head[start..end]` (without its LF) following nginx's
/// `ngx_http_parse_header_line`; `None` is a line nginx ignores for an invalid name.
fn parse_header_line(
    head: &[u8],
    start: usize,
    end: usize,
    limits: &HeadLimits,
) -> Result<Option<HeaderSpan>, RequestError> {
    let line = &head[start..end];
    // nginx takes a CR as the end of the line: more CRs may follow it, but nothing else.
    let content_len = memchr(b'\r', line).unwrap_or(line.len());
    if line[content_len..].iter().any(|&b| b != b'\r') {
        return Err(RequestError::BadHeader);
    }
    let content = &line[..content_len];
    let mut valid = true;
    let mut name_len = content.len();
    for (i, &b) in content.iter().enumerate() {
        match b {
            b':' if i > 0 => {
                name_len = i;
                break;
            }
            _ if b.is_ascii_alphanumeric() || b == b'-' => {}
            b'_' if limits.underscores => {}
            // A leading colon, spaces, controls and DEL are refused; other bytes (and '_',
            // with `underscores_in_headers off`) only make the line ignored.
            _ if b <= b' ' || b == 0x7f || b == b':' => return Err(RequestError::BadHeader),
            _ => valid = false,
        }
    }
    if name_len == 0 {
        return Err(RequestError::BadHeader);
    }
    let value_start = (name_len + 1).min(content.len());
    let value = &content[value_start..];
    if memchr(0, value).is_some() {
        return Err(RequestError::BadHeader);
    }
    if !valid && limits.ignore_invalid {
        return Ok(None);
    }
    // Only spaces surround a value: nginx keeps tabs as part of it.
    let lead = value.iter().take_while(|&&b| b == b' ').count();
    let trail = value[lead..]
        .iter()
        .rev()
        .take_while(|&&b| b == b' ')
        .count();
    let value_start = start + value_start + lead;
    Ok(Some(HeaderSpan {
        name: Span::new(start, start + name_len),
        value: Span::new(value_start, start + content.len() - trail),
    }))
}

/// The offset just past the LF that ends the line containing `i`.
fn line_after(head: &[u8], i: usize) -> usize {
    memchr(b'\n', &head[i..]).map_or(head.len(), |lf| i + lf + 1)
}

/// A copy of the host with ASCII letters lowercased (nginx leaves other bytes alone), only
/// when it has uppercase letters to lower.
fn lowercase_copy(host: Option<Span>, head: &[u8]) -> Option<Box<[u8]>> {
    let bytes = host?.of(head);
    if !bytes.iter().any(u8::is_ascii_uppercase) {
        return None;
    }
    Some(bytes.to_ascii_lowercase().into_boxed_slice())
}

/// Strips optional whitespace (SP, HTAB) from both ends.
pub(crate) fn trim_ows(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |i| i + 1);
    &v[start..end]
}

/// A Content-Length value: decimal digits only (leading zeros allowed, signs, commas and
/// lists refused), at most [`MAX_CONTENT_LENGTH`].
fn parse_content_length(v: &[u8]) -> Result<u64, RequestError> {
    if v.is_empty() {
        return Err(RequestError::BadContentLength);
    }
    let mut n: u64 = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return Err(RequestError::BadContentLength);
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(b - b'0')))
            .filter(|&n| n <= MAX_CONTENT_LENGTH)
            .ok_or(RequestError::BadContentLength)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &[u8]) -> Result<Option<RequestHead>, RequestError> {
        let mut buf = BytesMut::from(input);
        parse_request_head(&mut buf, &HeadLimits::default())
    }

    fn parse_ok(input: &[u8]) -> RequestHead {
        match parse(input) {
            Ok(Some(head)) => head,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
        }
    }

    #[test]
    fn a_known_methods_token_is_its_name() {
        let tokens = [
            "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT",
        ];
        for token in tokens {
            let h = parse_ok(format!("{token} / HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
            assert_ne!(h.method(), Method::Other, "{token}");
            assert_eq!(h.method().name(), Some(token));
            assert_eq!(h.method_str(), token);
        }
        let h = parse_ok(b"GETS / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!((h.method().name(), h.method_str()), (None, "GETS"));
    }

    fn parse_err(input: &[u8]) -> RequestError {
        match parse(input) {
            Err(e) => e,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
        }
    }

    /// Everything observable about a head, for comparing two parses.
    fn summary(h: &RequestHead) -> String {
        format!(
            "{:?} {} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {} {} {:?} {:?}",
            h.method(),
            h.method_str(),
            h.version(),
            h.target(),
            h.path(),
            h.query(),
            h.host(),
            h.host_bytes(),
            h.headers().collect::<Vec<_>>(),
            h.body(),
            h.keep_alive(),
            h.expect_continue(),
            h.raw(),
            h.request_line(),
        )
    }

    #[test]
    fn simple_get() {
        let h = parse_ok(b"GET /a/b?x=1&y HTTP/1.1\r\nHost: Example.COM:8080\r\nX-A:  v  \r\n\r\n");
        assert_eq!(h.method(), Method::Get);
        assert_eq!(h.method_str(), "GET");
        assert_eq!(h.version(), Version::Http11);
        assert_eq!(h.target(), b"/a/b?x=1&y");
        assert_eq!(h.path(), b"/a/b");
        assert_eq!(h.query(), Some(&b"x=1&y"[..]));
        assert_eq!(h.host(), Some("example.com"));
        assert_eq!(h.header("x-a"), Some(&b"v"[..]));
        assert_eq!(h.header("HOST"), Some(&b"Example.COM:8080"[..]));
        assert_eq!(h.header("missing"), None);
        assert_eq!(h.header_count(), 2);
        assert_eq!(h.body(), BodyKind::None);
        assert!(h.keep_alive());
        assert!(!h.expect_continue());
        assert_eq!(h.request_line(), "GET /a/b?x=1&y HTTP/1.1");
    }

    #[test]
    fn fragment_ends_path_and_query() {
        let h = parse_ok(b"GET /x?a#f HTTP/1.0\r\n\r\n");
        assert_eq!((h.path(), h.query()), (&b"/x"[..], Some(&b"a"[..])));
        let h = parse_ok(b"GET /x#f?a HTTP/1.0\r\n\r\n");
        assert_eq!((h.path(), h.query()), (&b"/x"[..], None));
    }

    #[test]
    fn other_methods() {
        let h = parse_ok(b"F-O_O / HTTP/1.0\r\n\r\n");
        assert_eq!((h.method(), h.method_str()), (Method::Other, "F-O_O"));
        assert_eq!(
            parse_ok(b"DELETE / HTTP/1.0\r\n\r\n").method(),
            Method::Delete
        );
        assert_eq!(
            parse_err(b"get / HTTP/1.0\r\n\r\n"),
            RequestError::BadMethod
        );
        assert_eq!(
            parse_err(b"F.O / HTTP/1.0\r\n\r\n"),
            RequestError::BadMethod
        );
        assert_eq!(parse_err(b"F1 / HTTP/1.0\r\n\r\n"), RequestError::BadMethod);
    }

    #[test]
    fn pipelined_requests_leave_the_rest_in_the_buffer() {
        let mut buf = BytesMut::from(
            &b"POST /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET /2 HTTP/1.1\r\nHost: b\r\n\r\nGET /3 HT"[..],
        );
        let limits = HeadLimits::default();
        let first = parse_request_head(&mut buf, &limits).unwrap().unwrap();
        assert_eq!(first.path(), b"/1");
        assert_eq!(first.body(), BodyKind::Length(3));
        assert!(buf.starts_with(b"abcGET /2"));
        buf.advance(3);
        let second = parse_request_head(&mut buf, &limits).unwrap().unwrap();
        assert_eq!((second.path(), second.host()), (&b"/2"[..], Some("b")));
        assert_eq!(parse_request_head(&mut buf, &limits), Ok(None));
        assert_eq!(&buf[..], b"GET /3 HT");
    }

    #[test]
    fn split_at_every_offset_gives_the_same_head() {
        let inputs: [&[u8]; 4] = [
            b"\r\n\r\nGET http://H.example:81/p?q HTTP/1.1\r\nHost: x\r\nConnection: close\r\nA: b\r\n\r\nnext",
            b"POST /u HTTP/1.1\nHost: h\nTransfer-Encoding: chunked\nExpect: 100-continue\n\nbody",
            b"GET /zero\r\n",
            b"PUT /x HTTP/1.0\r\nConnection: Keep-Alive\r\nContent-Length: 0010\r\n\r\n",
        ];
        for input in inputs {
            let whole = parse_ok(input);
            let mut buf = BytesMut::new();
            let mut parsed = None;
            for (i, &b) in input.iter().enumerate() {
                buf.extend_from_slice(&[b]);
                match parse_request_head(&mut buf, &HeadLimits::default()) {
                    Ok(None) => {}
                    Ok(Some(h)) => {
                        parsed = Some((h, i));
                        break;
                    }
                    Err(e) => panic!("{e:?} at {i}"),
                }
            }
            let (head, at) = parsed.expect("complete");
            assert_eq!(summary(&head), summary(&whole));
            assert_eq!(at + 1, leading_empty(input) + whole.raw().len());
        }
    }

    fn leading_empty(input: &[u8]) -> usize {
        input
            .iter()
            .take_while(|&&b| b == b'\r' || b == b'\n')
            .count()
    }

    #[test]
    fn keep_alive_by_version_and_connection() {
        assert!(!parse_ok(b"GET / HTTP/1.0\r\n\r\n").keep_alive());
        assert!(parse_ok(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive());
        assert!(parse_ok(b"GET / HTTP/1.0\r\nConnection: foo, Keep-Alive\r\n\r\n").keep_alive());
        assert!(parse_ok(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").keep_alive());
        assert!(
            !parse_ok(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n")
                .keep_alive()
        );
        assert!(!parse_ok(
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: a\r\nConnection: Close\r\n\r\n"
        )
        .keep_alive());
        assert!(!parse_ok(b"GET /\r\n").keep_alive());
    }

    #[test]
    fn expect_continue_only_on_http11() {
        assert!(parse_ok(
            b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n"
        )
        .expect_continue());
        assert!(!parse_ok(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").expect_continue());
        assert!(
            !parse_ok(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n").expect_continue()
        );
    }

    #[test]
    fn versions_as_nginx_reads_them() {
        assert_eq!(
            parse_ok(b"GET / HTTP/1.2\r\nHost: x\r\n\r\n").version(),
            Version::Http11
        );
        assert_eq!(
            parse_ok(b"GET / HTTP/1.999\r\nHost: x\r\n\r\n").version(),
            Version::Http11
        );
        assert_eq!(
            parse_ok(b"GET / HTTP/1.00\r\n\r\n").version(),
            Version::Http10
        );
        for v in ["2.0", "3.0", "10.0", "1000.0"] {
            let req = format!("GET / HTTP/{v}\r\n\r\n");
            assert_eq!(
                parse_err(req.as_bytes()),
                RequestError::VersionNotSupported,
                "{v}"
            );
        }
        for v in ["0.9", "0.1", "01.1", "1.1000", "1.", ".1", "1.a", "1.1 x"] {
            let req = format!("GET / HTTP/{v}\r\nHost: x\r\n\r\n");
            assert_eq!(
                parse_err(req.as_bytes()),
                RequestError::BadRequestLine,
                "{v}"
            );
        }
        assert_eq!(
            parse_err(b"GET / http/1.1\r\nHost: x\r\n\r\n"),
            RequestError::BadRequestLine
        );
    }

    #[test]
    fn http09() {
        let mut buf = BytesMut::from(&b"GET /a?b \r\nrest"[..]);
        let h = parse_request_head(&mut buf, &HeadLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!(h.version(), Version::Http09);
        assert_eq!((h.path(), h.query()), (&b"/a"[..], Some(&b"b"[..])));
        assert_eq!(h.request_line(), "GET /a?b");
        assert_eq!(&buf[..], b"rest");
        assert_eq!(parse_err(b"POST /a\r\n"), RequestError::BadHttp09);
    }

    #[test]
    fn lenient_request_line_spacing() {
        let h = parse_ok(b"GET   /a   HTTP/1.0   \r\n\r\n");
        assert_eq!((h.path(), h.version()), (&b"/a"[..], Version::Http10));
        assert_eq!(h.request_line(), "GET   /a   HTTP/1.0");
        assert_eq!(parse_ok(b"GET /a HTTP/1.0\n\n").path(), b"/a");
    }

    #[test]
    fn bad_request_lines() {
        let cases: [&[u8]; 12] = [
            b"GET a HTTP/1.0\r\n\r\n",
            b"GET * HTTP/1.0\r\n\r\n",
            b"OPTIONS * HTTP/1.0\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /a b HTTP/1.0\r\n\r\n",
            b"GET /a\tb HTTP/1.0\r\n\r\n",
            b"GET /a\x7fb HTTP/1.0\r\n\r\n",
            b"GET /a\x01b HTTP/1.0\r\n\r\n",
            b"GET / HTTP/1.1\rHost: x\r\n\r\n",
            b"GET / HTTP/1.0\r\r\n\r\n",
            b" GET / HTTP/1.0\r\n\r\n",
            b"\rGET / HTTP/1.0\r\n\r\n",
        ];
        for c in cases {
            assert_eq!(
                parse_err(c),
                RequestError::BadRequestLine,
                "{:?}",
                String::from_utf8_lossy(c)
            );
        }
        assert_eq!(parse_ok(b"GET /a\xffb HTTP/1.0\r\n\r\n").path(), b"/a\xffb");
    }

    #[test]
    fn absolute_form() {
        let h = parse_ok(b"GET http://Abs.Example:81/p/q?x=1 HTTP/1.1\r\nHost: other\r\n\r\n");
        assert_eq!(h.target(), b"http://Abs.Example:81/p/q?x=1");
        assert_eq!((h.path(), h.query()), (&b"/p/q"[..], Some(&b"x=1"[..])));
        assert_eq!(h.host(), Some("abs.example"));
        let h = parse_ok(b"GET HTTPS://abs.example?x HTTP/1.0\r\n\r\n");
        assert_eq!(
            (h.path(), h.query(), h.host()),
            (&b"/"[..], Some(&b"x"[..]), Some("abs.example"))
        );
        let h = parse_ok(b"GET http://[::1]:8/x HTTP/1.0\r\n\r\n");
        assert_eq!(h.host(), Some("[::1]"));
        assert_eq!(
            parse_ok(b"GET http://abs.example./x HTTP/1.0\r\n\r\n").host(),
            Some("abs.example")
        );
        for bad in [
            "http://u@abs/x",
            "http://ab_c/x",
            "http:/x",
            "1http://a/x",
            "http://[::1/x",
        ] {
            let req = format!("GET {bad} HTTP/1.0\r\n\r\n");
            assert_eq!(
                parse_err(req.as_bytes()),
                RequestError::BadRequestLine,
                "{bad}"
            );
        }
        assert_eq!(
            parse_err(b"GET http://a..b/x HTTP/1.0\r\n\r\n"),
            RequestError::BadHost
        );
        assert_eq!(
            parse_err(b"GET http:///x HTTP/1.0\r\n\r\n"),
            RequestError::BadHost
        );
        // The Host header is still required on HTTP/1.1, and still validated.
        assert_eq!(
            parse_err(b"GET http://abs/x HTTP/1.1\r\n\r\n"),
            RequestError::MissingHost
        );
        assert_eq!(
            parse_err(b"GET http://abs/x HTTP/1.1\r\nHost: a..b\r\n\r\n"),
            RequestError::BadHost
        );
    }

    /// Host header values and what nginx 1.22 made of them (`$host`), or a 400.
    #[test]
    fn host_validation_as_nginx() {
        let cases: [(&str, Option<&str>); 28] = [
            ("Example.COM", Some("example.com")),
            ("example.com.", Some("example.com")),
            ("example.com:8080", Some("example.com")),
            ("example.com:", Some("example.com")),
            ("example.com:abc", Some("example.com")),
            ("[::1]", Some("[::1]")),
            ("[::1]:80", Some("[::1]")),
            ("[::1", Some("[::1")),
            ("::1", None),
            ("a..b", None),
            (".a", Some(".a")),
            ("..", None),
            (".", None),
            ("a/b", None),
            ("a\\b", Some("a\\b")),
            ("a b", None),
            ("a\tb", None),
            ("a_b", Some("a_b")),
            ("a%20b", Some("a%20b")),
            ("a@b", Some("a@b")),
            ("-a", Some("-a")),
            ("", None),
            ("a,b", Some("a,b")),
            ("é.com", Some("é.com")),
            ("a:1:2", Some("a")),
            ("a.:80", Some("a")),
            ("a:1..2", None),
            ("...", None),
        ];
        for (value, want) in cases {
            let req = format!("GET / HTTP/1.0\r\nHost: {value}\r\n\r\n");
            match want {
                Some(host) => assert_eq!(parse_ok(req.as_bytes()).host(), Some(host), "{value}"),
                None => assert_eq!(parse_err(req.as_bytes()), RequestError::BadHost, "{value}"),
            }
        }
        assert_eq!(parse_ok(b"GET / HTTP/1.0\r\n\r\n").host(), None);
    }

    /// nginx 1.22 answers `Host: \xe9\xe9` with 200 from the default server and `$host`
    /// "\xe9\xe9"; `\xe9.example.com` selects a `*.example.com` server, with only the ASCII
    /// letters lowercased in `$host`.
    #[test]
    fn hosts_that_are_not_utf8_are_kept_as_bytes() {
        let cases: [(&[u8], &[u8]); 5] = [
            (b"\xe9\xe9", b"\xe9\xe9"),
            (b"\xe9.EXAMPLE.com:80", b"\xe9.example.com"),
            (b"\xff.", b"\xff"),
            (b"[\xe9]:1", b"[\xe9]"),
            (b"\xC3\xA9.COM", "\u{e9}.com".as_bytes()),
        ];
        for (value, want) in cases {
            let mut req = b"GET / HTTP/1.1\r\nHost: ".to_vec();
            req.extend_from_slice(value);
            req.extend_from_slice(b"\r\n\r\n");
            let head = parse_ok(&req);
            assert_eq!(head.host_bytes(), Some(want), "{value:?}");
            assert_eq!(head.host(), std::str::from_utf8(want).ok(), "{value:?}");
        }
        // Validation still applies around such bytes.
        assert_eq!(
            parse_err(b"GET / HTTP/1.1\r\nHost: \xe9..x\r\n\r\n"),
            RequestError::BadHost
        );
        assert_eq!(
            parse_err(b"GET / HTTP/1.1\r\nHost: \xe9/x\r\n\r\n"),
            RequestError::BadHost
        );
        // In an absolute-form target nginx takes letters, digits, '.' and '-' only.
        assert_eq!(
            parse_err(b"GET http://\xe9\xe9/ HTTP/1.1\r\nHost: x\r\n\r\n"),
            RequestError::BadRequestLine
        );
        let h = parse_ok(b"GET http://a/ HTTP/1.1\r\nHost: \xe9\r\n\r\n");
        assert_eq!(h.host_bytes(), Some(&b"a"[..]));
    }

    /// Header lines nginx refuses. These and the cases of `header_lines_ignored_or_kept` were
    /// checked against nginx 1.22.1 (defaults: `ignore_invalid_headers on`,
    /// `underscores_in_headers off`).
    #[test]
    fn header_errors() {
        let cases: [(&[u8], RequestError); 33] = [
            (b"GET / HTTP/1.1\r\n\r\n", RequestError::MissingHost),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nX Y: 1\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nX\x01Y: 1\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nX\x7fY: 1\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nX\x00Y: 1\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nX\rY: 1\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nXY : 1\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nXY\t: 1\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nX.Y Z: 1\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nXY: a\x00b\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nXY:\x00\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nX_Y: a\x00\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nXY: a\rb\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nXY: a \rb\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nXY:\rb\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nnocolon\rb\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\n: a\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\n:a\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\n:\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\n\r\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\n\rX: 1\r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nHost \r\n\r\n",
                RequestError::BadHeader,
            ),
            (
                b"GET / HTTP/1.0\r\nHost : x\r\n\r\n",
                RequestError::BadHeader,
            ),
            // nginx logs these as invalid header lines; the status is the same 400.
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nXY: a\r\n b\r\n\r\n",
                RequestError::ObsFold,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nXY: a\r\n\tb\r\n\r\n",
                RequestError::ObsFold,
            ),
            (b"GET / HTTP/1.1\r\n Host: x\r\n\r\n", RequestError::ObsFold),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n",
                RequestError::DuplicateHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nhost: y\r\n\r\n",
                RequestError::DuplicateHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: a\r\nAuthorization: a\r\n\r\n",
                RequestError::DuplicateHeader,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nIf-None-Match: a\r\nIf-None-Match: b\r\n\r\n",
                RequestError::DuplicateHeader,
            ),
            (b"GET / HTTP/1.0\r\nHost: \r\n\r\n", RequestError::BadHost),
            (
                b"GET / HTTP/1.0\r\nHost: \tx\r\n\r\n",
                RequestError::BadHost,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
                RequestError::DuplicateHeader,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse_err(input),
                want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
        let more: [(&[u8], RequestError); 6] = [
            (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", RequestError::DuplicateHeader),
            (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", RequestError::DuplicateHeader),
            (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: \t5\r\n\r\n", RequestError::BadContentLength),
            (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\t\r\n\r\n", RequestError::UnknownTransferEncoding),
            // An ignored Host line does not count, so HTTP/1.1 lacks one.
            (b"GET / HTTP/1.1\r\nHost_: x\r\n\r\n", RequestError::MissingHost),
            (b"GET / HTTP/1.1\r\nHo.st: x\r\n\r\n", RequestError::MissingHost),
        ];
        for (input, want) in more {
            assert_eq!(
                parse_err(input),
                want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
        // Repeating a header nginx keeps as a list is fine.
        let h = parse_ok(b"GET / HTTP/1.1\r\nHost: x\r\nCookie: a\r\nCookie: b\r\n\r\n");
        assert_eq!(h.headers().filter(|(n, _)| *n == "Cookie").count(), 2);
    }

    /// Header names and values, in order.
    type Kept<'a> = &'a [(&'a str, &'a [u8])];

    /// Header lines nginx accepts, each after `Host: x`: the headers it kept from them (what
    /// its proxy module forwarded), an empty list when it ignored the line.
    #[test]
    fn header_lines_ignored_or_kept() {
        let cases: [(&[u8], Kept); 24] = [
            (b"X_Y: 1", &[]),
            (b"_: 1", &[]),
            (b"X_Y", &[]),
            (b"X\xc3\xa9Y: 1", &[]),
            (b"X\x80: 1", &[]),
            (b"X.Y: 1", &[]),
            (b"X!Y: 1", &[]),
            (b"nocolon", &[("nocolon", b"")]),
            (b"A", &[("A", b"")]),
            (b"nocolon\r\nnocolon", &[("nocolon", b""), ("nocolon", b"")]),
            (b"XY: a\x7fb", &[("XY", b"a\x7fb")]),
            (b"XY: a\x01b", &[("XY", b"a\x01b")]),
            (b"XY: a\x1fb", &[("XY", b"a\x1fb")]),
            (b"XY: a\x0bb", &[("XY", b"a\x0bb")]),
            (b"XY: \xffb", &[("XY", b"\xffb")]),
            (b"XY: a\r\r", &[("XY", b"a")]),
            (b"XY:\ta\t", &[("XY", b"\ta\t")]),
            (b"XY: \t", &[("XY", b"\t")]),
            (b"XY:a", &[("XY", b"a")]),
            (b"XY:", &[("XY", b"")]),
            (b"XY:  a  b  ", &[("XY", b"a  b")]),
            (b"-: 1", &[("-", b"1")]),
            (b"x:y:z", &[("x", b"y:z")]),
            // An ignored Host line is no duplicate either.
            (b"Host\xc3\xa9: y\r\nHost.: z", &[]),
        ];
        for (line, want) in cases {
            let mut req = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
            req.extend_from_slice(line);
            req.extend_from_slice(b"\r\n\r\n");
            let head = parse_ok(&req);
            let got: Vec<_> = head.headers().skip(1).collect();
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(line));
            assert_eq!(head.header_count(), want.len() + 1);
            assert_eq!(head.host(), Some("x"));
        }
        let h = parse_ok(b"GET / HTTP/1.0\r\nX_Y: 1\r\nX-Y: 2\nZ: 3\r\n\r\n");
        assert_eq!(h.header("x_y"), None);
        assert_eq!(h.header("x-y"), Some(&b"2"[..]));
        assert_eq!(h.header("z"), Some(&b"3"[..]));
    }

    /// As in nginx, where 1100 ignored lines after `Host: x` pass, ignored lines do not count.
    #[test]
    fn ignored_lines_do_not_count_towards_the_limit() {
        let mut req = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 1..MAX_HEADERS {
            req.extend_from_slice(format!("h{i}:\r\nh_{i}:\r\n").as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        assert_eq!(parse_ok(&req).header_count(), MAX_HEADERS);
    }

    #[test]
    fn body_framing() {
        let post = |headers: &str| format!("POST / HTTP/1.1\r\nHost: x\r\n{headers}\r\n");
        let ok = |headers: &str| parse_ok(post(headers).as_bytes()).body();
        let err = |headers: &str| parse_err(post(headers).as_bytes());
        assert_eq!(ok("Content-Length: 5\r\n"), BodyKind::Length(5));
        assert_eq!(ok("Content-Length: 01\r\n"), BodyKind::Length(1));
        assert_eq!(
            ok("Content-Length: 9223372036854775807\r\n"),
            BodyKind::Length(i64::MAX as u64)
        );
        assert_eq!(ok("Transfer-Encoding: Chunked\r\n"), BodyKind::Chunked);
        for bad in [
            "-1",
            "1a",
            "+1",
            "1,1",
            "",
            "9223372036854775808",
            "99999999999999999999",
            "1 1",
        ] {
            assert_eq!(
                err(&format!("Content-Length: {bad}\r\n")),
                RequestError::BadContentLength,
                "{bad}"
            );
        }
        assert_eq!(
            err("Transfer-Encoding: chunked\r\nContent-Length: 3\r\n"),
            RequestError::LengthAndTransferEncoding
        );
        assert_eq!(
            err("Transfer-Encoding: gzip\r\n"),
            RequestError::UnknownTransferEncoding
        );
        assert_eq!(
            err("Transfer-Encoding: gzip\r\nContent-Length: 3\r\n"),
            RequestError::UnknownTransferEncoding
        );
        assert_eq!(
            err("Transfer-Encoding: gzip, chunked\r\n"),
            RequestError::UnknownTransferEncoding
        );
        assert_eq!(
            err("Transfer-Encoding: identity\r\n"),
            RequestError::UnknownTransferEncoding
        );
        assert_eq!(
            parse_err(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
            RequestError::TransferEncodingInHttp10
        );
    }

    /// `lines` header lines, `Host: x` first, then short ones that pack into the buffers.
    fn head_with_lines(lines: usize) -> Vec<u8> {
        let mut req = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 1..lines {
            req.extend_from_slice(format!("h{i}:\r\n").as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        req
    }

    /// Measured against nginx: 1000 header lines (about 8 KB here, within the buffers) pass,
    /// 1001 get 400 with the "Request Header Or Cookie Too Large" page.
    #[test]
    fn header_count_limit_is_nginx_max_headers() {
        for lines in [1, 2, 101, 150, MAX_HEADERS] {
            assert_eq!(parse_ok(&head_with_lines(lines)).header_count(), lines);
        }
        let over = parse_err(&head_with_lines(MAX_HEADERS + 1));
        assert_eq!(over, RequestError::TooManyHeaders);
        assert_eq!((over.status(), over.page_code()), (400, 494));
        let three = HeadLimits {
            max_headers: 3,
            ..HeadLimits::default()
        };
        let mut buf = BytesMut::from(&head_with_lines(3)[..]);
        assert!(parse_request_head(&mut buf, &three).unwrap().is_some());
        let mut buf = BytesMut::from(&head_with_lines(4)[..]);
        assert_eq!(
            parse_request_head(&mut buf, &three),
            Err(RequestError::TooManyHeaders)
        );
        // Lines are taken in order: a bad line before the limit is what gets reported.
        let mut req = head_with_lines(MAX_HEADERS + 1);
        let after_host = b"GET / HTTP/1.1\r\nHost: x\r\n".len();
        req.splice(after_host..after_host, b"A B: 1\r\n".iter().copied());
        assert_eq!(parse_err(&req), RequestError::BadHeader);
    }

    fn request_line_of(total: usize) -> Vec<u8> {
        let mut line = b"GET /".to_vec();
        line.resize(total - " HTTP/1.1\r\n".len(), b'a');
        line.extend_from_slice(b" HTTP/1.1\r\n");
        line
    }

    fn header_line_of(total: usize) -> Vec<u8> {
        let mut line = b"X-A: ".to_vec();
        line.resize(total - 2, b'b');
        line.extend_from_slice(b"\r\n");
        line
    }

    /// Boundaries measured against nginx with the default 1k / 4 8k buffers: a line of
    /// 8192 bytes (line ending included) passes, 8193 does not.
    #[test]
    fn limits_at_their_boundaries() {
        for (len, ok) in [(8192, true), (8193, false)] {
            let mut req = request_line_of(len);
            req.extend_from_slice(b"Host: x\r\n\r\n");
            match ok {
                true => assert!(parse(&req).unwrap().is_some()),
                false => assert_eq!(parse_err(&req), RequestError::UriTooLong),
            }
            let mut req = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
            req.extend_from_slice(&header_line_of(len));
            req.extend_from_slice(b"\r\n");
            match ok {
                true => assert!(parse(&req).unwrap().is_some()),
                false => assert_eq!(parse_err(&req), RequestError::HeaderLineTooLong),
            }
        }
    }

    #[test]
    fn limits_on_incomplete_heads() {
        // A partial request line of 8191 bytes may still end within 8192; of 8192 it cannot.
        assert_eq!(parse(&request_line_of(8193)[..8191]), Ok(None));
        assert_eq!(
            parse(&request_line_of(8193)[..8192]),
            Err(RequestError::UriTooLong)
        );
        let mut req = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
        req.extend_from_slice(&header_line_of(9000)[..8191]);
        assert_eq!(parse(&req), Ok(None));
        req.push(b'b');
        assert_eq!(parse_err(&req), RequestError::HeaderLineTooLong);
    }

    /// Each 5000-byte line needs a large buffer of its own: four fit, five do not (nginx
    /// answers 400 "Request Header Or Cookie Too Large"), while many small lines pack.
    #[test]
    fn limits_count_large_buffers() {
        let head = |lines: usize, len: usize| {
            let mut req = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
            for _ in 0..lines {
                req.extend_from_slice(&header_line_of(len));
            }
            req.extend_from_slice(b"\r\n");
            req
        };
        assert!(parse(&head(4, 5000)).unwrap().is_some());
        assert_eq!(parse_err(&head(5, 5000)), RequestError::HeadTooLarge);
        assert_eq!(parse_err(&head(5, 5000)).page_code(), 494);
        // 1 KB lines: 1 in the first buffer, then 8 per large buffer.
        assert!(parse(&head(32, 1000)).unwrap().is_some());
        assert_eq!(parse_err(&head(34, 1000)), RequestError::HeadTooLarge);
        let small = HeadLimits {
            header_buffer_size: 64,
            large_buffers: 1,
            large_buffer_size: 64,
            ..HeadLimits::default()
        };
        let mut buf = BytesMut::from(&b"GET / HTTP/1.0\r\nA: 1\r\n\r\n"[..]);
        assert!(parse_request_head(&mut buf, &small).unwrap().is_some());
        let mut buf = BytesMut::from(&head(2, 40)[..]);
        assert_eq!(
            parse_request_head(&mut buf, &small),
            Err(RequestError::HeadTooLarge)
        );
    }

    /// A small deterministic generator, so the mutation test needs no dependency.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    #[test]
    fn never_panics_on_mutated_input() {
        let seeds: [&[u8]; 5] = [
            b"GET /a/b?c HTTP/1.1\r\nHost: x.example:80\r\nConnection: keep-alive\r\n\r\n",
            b"POST http://h/p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            b"PUT / HTTP/1.0\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n",
            b"GET /\r\n",
            b"\r\nGET http://[::1]:8/?q HTTP/1.1\nHost: [::1]\n\n",
        ];
        let interesting = b"\r\n :/?#%[]\t\x00\x7f\xffH.";
        let small = HeadLimits {
            header_buffer_size: 16,
            large_buffers: 2,
            large_buffer_size: 24,
            max_headers: 2,
            ..HeadLimits::default()
        };
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for round in 0..20_000 {
            let mut input = seeds[round % seeds.len()].to_vec();
            for _ in 0..=rng.below(4) {
                let at = rng.below(input.len() + 1);
                match rng.below(4) {
                    0 if at < input.len() => input[at] = interesting[rng.below(interesting.len())],
                    1 if at < input.len() => input[at] = rng.next() as u8,
                    2 => input.insert(at, interesting[rng.below(interesting.len())]),
                    _ => input.truncate(at),
                }
            }
            for limits in [HeadLimits::default(), small] {
                let mut buf = BytesMut::from(&input[..]);
                while let Ok(Some(head)) = parse_request_head(&mut buf, &limits) {
                    let _ = summary(&head);
                }
            }
        }
    }
}
