//! What a request's conditional and range headers make of a file: nginx's `not_modified`
//! and `range` filters, in their order and with their choices where RFC 9110 leaves room.
//!
//! Where nginx and the RFC differ, this follows nginx, because a configuration moved from
//! nginx must keep answering the same way:
//! - `If-Unmodified-Since` and `If-Match` are both evaluated (the RFC skips the former when
//!   the latter is present); either failing gives 412.
//! - `If-Modified-Since` matches only the exact `Last-Modified` second (nginx's default
//!   `if_modified_since exact`; `before` also takes a later date, `off` none), and when it
//!   is sent with `If-None-Match` both must match for a 304.
//! - A `Range` that starts with `bytes=` but does not parse is 416, not ignored; one that
//!   does not start with `bytes=` is ignored.
//! - Several ranges whose lengths add up to more than the file are ignored (200), nginx's
//!   defence against overlapping-range amplification; a range list with nothing inside the
//!   file is 416.
//!
//! The date fields of `Conditions` are already parsed; a date that did not parse is passed
//! as `None` and so ignored, as the RFC asks. (nginx answers 412 to an unparsable
//! `If-Unmodified-Since`.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use super::cache::CachedFile;
use super::date::{parse_http_date, unix_secs, Cursor};

/// The request headers that decide the answer, raw except for the two dates.
#[derive(Debug, Clone, Copy, Default)]
pub struct Conditions<'a> {
    pub if_match: Option<&'a [u8]>,
    pub if_none_match: Option<&'a [u8]>,
    pub if_modified_since: Option<SystemTime>,
    pub if_unmodified_since: Option<SystemTime>,
    pub range: Option<&'a [u8]>,
    pub if_range: Option<&'a [u8]>,
    /// `if_modified_since`.
    pub ims: IfModifiedSince,
}

/// `if_modified_since`: how `If-Modified-Since` is compared with the file's time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IfModifiedSince {
    /// Never: the file is always sent.
    Off,
    /// Only the exact second.
    #[default]
    Exact,
    /// That second or later.
    Before,
}

/// The response to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// 200 with the whole file.
    Full,
    /// 304.
    NotModified,
    /// 412.
    PreconditionFailed,
    /// 206 with `Content-Range: bytes start-end_inclusive/size`.
    Partial { start: u64, end_inclusive: u64 },
    /// 206 `multipart/byteranges`: see `multipart_parts`. Ranges are (start, end inclusive),
    /// in request order.
    Multipart {
        ranges: Vec<(u64, u64)>,
        boundary: String,
    },
    /// 416 with `Content-Range: bytes */size` (see `unsatisfied_range`).
    Unsatisfiable,
}

/// Decides the response for `file`. `is_get_or_head` is false for other methods, for which
/// a matching `If-None-Match` is 412 rather than 304, `If-Modified-Since` does not apply
/// and `Range` is ignored (RFC 9110 sections 13.1.2, 13.1.3, 14.2). Under `etag off` the
/// file has no entity tag to compare: only `*` matches one, as in nginx.
pub fn plan(file: &CachedFile, etag: bool, is_get_or_head: bool, c: &Conditions) -> Plan {
    let etag = Some(file.etag.as_str()).filter(|_| etag);
    if let Some(answer) = preconditions(Some(file.mtime_secs), etag, is_get_or_head, c) {
        return answer;
    }
    if !is_get_or_head {
        return Plan::Full;
    }
    ranges(file.size, Some(file.mtime_secs), etag, c)
}

/// nginx's range filter on a response of `size` bytes modified at `mtime` with `etag`:
/// the whole of it, one range, several, or none that can be satisfied.
pub fn ranges(size: u64, mtime: Option<i64>, etag: Option<&str>, c: &Conditions) -> Plan {
    let Some(range) = c.range else {
        return Plan::Full;
    };
    if !if_range_holds(mtime, etag, c.if_range) {
        return Plan::Full;
    }
    match parse_ranges(range, size) {
        Ranges::Ignored => Plan::Full,
        Ranges::Unsatisfiable => Plan::Unsatisfiable,
        Ranges::Satisfiable(ranges) => match ranges.as_slice() {
            [(start, end)] => Plan::Partial {
                start: *start,
                end_inclusive: *end,
            },
            _ => Plan::Multipart {
                ranges,
                boundary: next_boundary(),
            },
        },
    }
}

/// The answer the conditions give a response modified at `mtime` (seconds) with `etag`
/// (none for a response nginx gives no ETag, which only `*` matches): 412 or 304, or
/// `None` when the response goes out (nginx's not-modified filter).
pub fn preconditions(
    mtime: Option<i64>,
    etag: Option<&str>,
    is_get_or_head: bool,
    c: &Conditions,
) -> Option<Plan> {
    // Without a time, nothing is unmodified since any time, and everything is modified.
    if c.if_unmodified_since
        .is_some_and(|t| mtime.is_none_or(|m| unix_secs(t) < m))
    {
        return Some(Plan::PreconditionFailed);
    }
    if c.if_match
        .is_some_and(|list| !etag_listed(list, etag, false))
    {
        return Some(Plan::PreconditionFailed);
    }
    if !is_get_or_head {
        if c.if_none_match
            .is_some_and(|list| etag_listed(list, etag, true))
        {
            return Some(Plan::PreconditionFailed);
        }
        return None;
    }
    if c.if_modified_since.is_some() || c.if_none_match.is_some() {
        let modified = c.if_modified_since.is_some_and(|t| {
            let since = unix_secs(t);
            match (c.ims, mtime) {
                (IfModifiedSince::Off, _) | (_, None) => true,
                (IfModifiedSince::Exact, Some(m)) => since != m,
                (IfModifiedSince::Before, Some(m)) => since < m,
            }
        });
        let changed = c
            .if_none_match
            .is_some_and(|list| !etag_listed(list, etag, true));
        if !modified && !changed {
            return Some(Plan::NotModified);
        }
    }
    None
}

/// Whether `etag` is in the `If-Match` / `If-None-Match` value `list`, or `list` is `*`.
/// `weak` (for If-None-Match) ignores `W/` prefixes; without it `W/"x"` never matches, as
/// the strong comparison requires. Mirrors nginx's `ngx_http_test_if_match`.
fn etag_listed(list: &[u8], etag: Option<&str>, weak: bool) -> bool {
    if list == b"*" {
        return true;
    }
    let Some(etag) = etag else {
        return false;
    };
    let etag = etag.as_bytes();
    let etag = match etag.strip_prefix(b"W/") {
        Some(strong) if weak => strong,
        _ => etag,
    };
    list.split(|&b| b == b',').any(|item| {
        let item = item.trim_ascii();
        let item = match item.strip_prefix(b"W/") {
            Some(strong) if weak => strong,
            _ => item,
        };
        item == etag
    })
}

/// Whether `If-Range` lets the ranges apply: absent, or the exact ETag (a value ending in
/// `"`), or exactly the `Last-Modified` date. nginx compares the ETag bytewise, so a weak
/// `W/"..."` never matches a file's strong ETag.
fn if_range_holds(mtime: Option<i64>, etag: Option<&str>, if_range: Option<&[u8]>) -> bool {
    let Some(value) = if_range else {
        return true;
    };
    if value.len() >= 2 && value.ends_with(b"\"") {
        return etag.is_some_and(|e| value == e.as_bytes());
    }
    parse_http_date(value).is_some_and(|t| Some(unix_secs(t)) == mtime)
}

/// Bounds a range position as nginx's `off_t` does; larger numbers make the header 416.
const MAX_OFFSET: u64 = i64::MAX as u64;

#[derive(Debug, PartialEq, Eq)]
enum Ranges {
    /// Not a byte-range request, or one nginx declines: send the whole file.
    Ignored,
    Unsatisfiable,
    /// (start, end inclusive), in request order, each within the file.
    Satisfiable(Vec<(u64, u64)>),
}

/// Parses `Range` as nginx's `ngx_http_range_parse` does: spaces allowed around numbers and
/// commas, `a-b` clipped to the file, `a-` to its end, `-n` the last n bytes; ranges starting
/// past the end are dropped.
fn parse_ranges(header: &[u8], size: u64) -> Ranges {
    const PREFIX: &[u8] = b"bytes=";
    match header.get(..PREFIX.len()) {
        Some(p) if p.eq_ignore_ascii_case(PREFIX) && header.len() > PREFIX.len() => {}
        _ => return Ranges::Ignored,
    }
    let mut p = Cursor {
        rest: &header[PREFIX.len()..],
    };
    let mut ranges = Vec::new();
    let mut total: u64 = 0;

    loop {
        p.skip_spaces();
        // [start, end) of this range, clipped to the file.
        let (start, end) = if p.eat(b'-') {
            let Some(suffix) = p.number() else {
                return Ranges::Unsatisfiable;
            };
            (size.saturating_sub(suffix), size)
        } else {
            let Some(start) = p.number() else {
                return Ranges::Unsatisfiable;
            };
            p.skip_spaces();
            if !p.eat(b'-') {
                return Ranges::Unsatisfiable;
            }
            p.skip_spaces();
            if p.at_end_of_range() {
                (start, size)
            } else {
                let Some(last) = p.number() else {
                    return Ranges::Unsatisfiable;
                };
                (start, last.saturating_add(1).min(size))
            }
        };
        p.skip_spaces();
        if !p.at_end_of_range() {
            return Ranges::Unsatisfiable;
        }

        if start < end {
            total += end - start;
            ranges.push((start, end - 1));
        } else if start == 0 {
            // Only an empty file gets here with a well-formed range; nginx sends it whole.
            return Ranges::Ignored;
        }

        if !p.eat(b',') {
            break;
        }
    }

    if ranges.is_empty() {
        Ranges::Unsatisfiable
    } else if total > size {
        Ranges::Ignored
    } else {
        Ranges::Satisfiable(ranges)
    }
}

/// Range parsing steps on the date parser's cursor.
impl Cursor<'_> {
    fn at_end_of_range(&self) -> bool {
        matches!(self.rest.first(), None | Some(b','))
    }

    /// A decimal number of at least one digit, at most `MAX_OFFSET`.
    fn number(&mut self) -> Option<u64> {
        let digits = self.rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let mut n: u64 = 0;
        for &d in &self.rest[..digits] {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            if n > MAX_OFFSET {
                return None;
            }
        }
        self.rest = &self.rest[digits..];
        Some(n)
    }
}

/// Successive boundaries, as nginx numbers them: a process-wide counter printed as 20
/// zero-padded digits. It is touched only by multi-range responses, so sharing it across
/// workers costs nothing measurable.
fn next_boundary() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{:020}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The `Content-Range` value of a single-range 206.
pub fn content_range(start: u64, end_inclusive: u64, size: u64) -> String {
    format!("bytes {start}-{end_inclusive}/{size}")
}

/// The `Content-Range` value of a 416.
pub fn unsatisfied_range(size: u64) -> String {
    format!("bytes */{size}")
}

/// The body of a `multipart/byteranges` response, as nginx lays it out: each part is its
/// `head` followed by `len` bytes of the file from `start`; `trailer` closes the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Multipart {
    /// The response's `Content-Type` value.
    pub content_type: String,
    pub parts: Vec<Part>,
    pub trailer: String,
    /// The body length, for `Content-Length`.
    pub content_length: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub head: String,
    pub start: u64,
    pub len: u64,
}

/// Lays out `Plan::Multipart`. `content_type` is the file's full type as the whole-file
/// response would send it (with `; charset=...` when `charset` applies); empty omits the
/// parts' `Content-Type` line, as nginx does. Ranges are (start, end inclusive) within a
/// file of `size` bytes, as `plan` makes them.
pub fn multipart_parts(
    ranges: &[(u64, u64)],
    boundary: &str,
    content_type: &str,
    size: u64,
) -> Multipart {
    let parts: Vec<Part> = ranges
        .iter()
        .map(|&(start, end)| {
            let type_line = if content_type.is_empty() {
                String::new()
            } else {
                format!("Content-Type: {content_type}\r\n")
            };
            Part {
                head: format!(
                    "\r\n--{boundary}\r\n{type_line}Content-Range: bytes {start}-{end}/{size}\r\n\r\n"
                ),
                start,
                len: end.saturating_sub(start).saturating_add(1),
            }
        })
        .collect();
    let trailer = format!("\r\n--{boundary}--\r\n");
    let content_length = parts
        .iter()
        .map(|part| part.head.len() as u64 + part.len)
        .sum::<u64>()
        + trailer.len() as u64;
    Multipart {
        content_type: format!("multipart/byteranges; boundary={boundary}"),
        parts,
        trailer,
        content_length,
    }
}

impl Multipart {
    /// The whole body of a file held in memory (`CachedFile::contents`); `None` if a part
    /// lies outside `contents`.
    pub fn body(&self, contents: &[u8]) -> Option<Vec<u8>> {
        let pieces = self
            .parts
            .iter()
            .map(|part| {
                let start = usize::try_from(part.start).ok()?;
                let end = start.checked_add(usize::try_from(part.len).ok()?)?;
                Some((part.head.as_bytes(), contents.get(start..end)?))
            })
            .collect::<Option<Vec<_>>>()?;
        // Every piece is within `contents`, so this size is bounded by what is in memory.
        let mut body = Vec::with_capacity(usize::try_from(self.content_length).ok()?);
        for (head, bytes) in pieces {
            body.extend_from_slice(head);
            body.extend_from_slice(bytes);
        }
        body.extend_from_slice(self.trailer.as_bytes());
        Some(body)
    }
}

#[cfg(test)]
mod tests {
    use super::super::cache::tests::TempDir;
    use super::super::cache::{FileCache, Lookup};
    use super::super::date::from_unix_secs;
    use super::*;
    use std::rc::Rc;

    /// The file nginx was asked about: 100 bytes "0123456789..." with this mtime, which
    /// nginx sent as `Last-Modified: Thu, 02 Jan 2020 03:04:05 GMT`, `ETag: "5e0d5da5-64"`.
    const MTIME: i64 = 0x5e0d_5da5;
    const LAST_MODIFIED: &[u8] = b"Thu, 02 Jan 2020 03:04:05 GMT";
    const ETAG: &[u8] = b"\"5e0d5da5-64\"";

    fn sample(dir: &TempDir) -> Rc<CachedFile> {
        let body: Vec<u8> = (0..100u8).map(|i| b'0' + i % 10).collect();
        let path = dir.file("a.txt", &body, MTIME as u64);
        match FileCache::new(1).lookup(&path) {
            Lookup::File(f) => f,
            other => panic!("{other:?}"),
        }
    }

    fn get(file: &CachedFile, c: Conditions) -> Plan {
        plan(file, true, true, &c)
    }

    fn range(file: &CachedFile, r: &str) -> Plan {
        get(
            file,
            Conditions {
                range: Some(r.as_bytes()),
                ..Default::default()
            },
        )
    }

    fn partial(start: u64, end_inclusive: u64) -> Plan {
        Plan::Partial {
            start,
            end_inclusive,
        }
    }

    fn ranges(plan: Plan) -> Vec<(u64, u64)> {
        match plan {
            Plan::Multipart { ranges, boundary } => {
                assert_eq!(boundary.len(), 20);
                assert!(boundary.bytes().all(|b| b.is_ascii_digit()));
                ranges
            }
            other => panic!("expected multipart, got {other:?}"),
        }
    }

    #[test]
    fn no_conditions_is_full() {
        let dir = TempDir::new();
        assert_eq!(get(&sample(&dir), Conditions::default()), Plan::Full);
    }

    #[test]
    fn if_modified_since_is_exact() {
        let dir = TempDir::new();
        let f = sample(&dir);
        let ims = |secs| Conditions {
            if_modified_since: Some(from_unix_secs(secs)),
            ..Default::default()
        };
        // nginx: 304 for the same second, 200 for one second later or earlier.
        assert_eq!(get(&f, ims(MTIME)), Plan::NotModified);
        assert_eq!(get(&f, ims(MTIME + 1)), Plan::Full);
        assert_eq!(get(&f, ims(MTIME - 1)), Plan::Full);
    }

    #[test]
    fn if_none_match_is_weak() {
        let dir = TempDir::new();
        let f = sample(&dir);
        let inm = |v: &'static [u8]| Conditions {
            if_none_match: Some(v),
            ..Default::default()
        };
        // Each of these was 304 from nginx.
        for v in [
            ETAG,
            b"W/\"5e0d5da5-64\"",
            b"\"x\", \"5e0d5da5-64\"",
            b"\"x\",\"5e0d5da5-64\" ",
            b"*",
        ] {
            assert_eq!(get(&f, inm(v)), Plan::NotModified, "{v:?}");
        }
        for v in [&b"\"x\""[..], b"\"5e0d5da5-6\"", b"\"5e0d5da5-645\"", b""] {
            assert_eq!(get(&f, inm(v)), Plan::Full, "{v:?}");
        }
    }

    #[test]
    fn both_validators_must_match_for_304() {
        let dir = TempDir::new();
        let f = sample(&dir);
        // nginx: matching ETag with an older date was 200, and so was a date match with a
        // different ETag.
        let c = Conditions {
            if_none_match: Some(ETAG),
            if_modified_since: Some(from_unix_secs(MTIME - 86_400)),
            ..Default::default()
        };
        assert_eq!(get(&f, c), Plan::Full);
        let c = Conditions {
            if_none_match: Some(b"\"nomatch\""),
            if_modified_since: Some(from_unix_secs(MTIME)),
            ..Default::default()
        };
        assert_eq!(get(&f, c), Plan::Full);
    }

    #[test]
    fn if_match_is_strong() {
        let dir = TempDir::new();
        let f = sample(&dir);
        let im = |v: &'static [u8]| Conditions {
            if_match: Some(v),
            ..Default::default()
        };
        assert_eq!(get(&f, im(ETAG)), Plan::Full);
        assert_eq!(get(&f, im(b"*")), Plan::Full);
        // nginx: 412 for a weak tag and for a different tag.
        assert_eq!(get(&f, im(b"W/\"5e0d5da5-64\"")), Plan::PreconditionFailed);
        assert_eq!(get(&f, im(b"\"nomatch\"")), Plan::PreconditionFailed);
    }

    #[test]
    fn if_unmodified_since() {
        let dir = TempDir::new();
        let f = sample(&dir);
        let ius = |secs| Conditions {
            if_unmodified_since: Some(from_unix_secs(secs)),
            ..Default::default()
        };
        assert_eq!(get(&f, ius(MTIME)), Plan::Full);
        assert_eq!(get(&f, ius(MTIME + 1)), Plan::Full);
        assert_eq!(get(&f, ius(MTIME - 1)), Plan::PreconditionFailed);
    }

    #[test]
    fn preconditions_come_before_304_and_ranges() {
        let dir = TempDir::new();
        let f = sample(&dir);
        let c = Conditions {
            if_match: Some(b"\"no\""),
            if_none_match: Some(ETAG),
            range: Some(b"bytes=0-1"),
            ..Default::default()
        };
        assert_eq!(get(&f, c), Plan::PreconditionFailed);
        // nginx: If-None-Match matching with a Range was 304.
        let c = Conditions {
            if_none_match: Some(ETAG),
            range: Some(b"bytes=0-1"),
            ..Default::default()
        };
        assert_eq!(get(&f, c), Plan::NotModified);
    }

    #[test]
    fn other_methods() {
        let dir = TempDir::new();
        let f = sample(&dir);
        let c = Conditions {
            if_none_match: Some(ETAG),
            ..Default::default()
        };
        assert_eq!(plan(&f, true, false, &c), Plan::PreconditionFailed);
        let c = Conditions {
            if_modified_since: Some(from_unix_secs(MTIME)),
            range: Some(b"bytes=0-1"),
            ..Default::default()
        };
        assert_eq!(plan(&f, true, false, &c), Plan::Full);
    }

    #[test]
    fn single_ranges_as_nginx() {
        let dir = TempDir::new();
        let f = sample(&dir);
        // Each pair is what nginx answered for the 100-byte file.
        assert_eq!(range(&f, "bytes=0-9"), partial(0, 9));
        assert_eq!(range(&f, "bytes=-5"), partial(95, 99));
        assert_eq!(range(&f, "bytes=95-"), partial(95, 99));
        assert_eq!(range(&f, "bytes=95-200"), partial(95, 99));
        assert_eq!(range(&f, "BYTES=1-2"), partial(1, 2));
        assert_eq!(range(&f, "bytes=-100"), partial(0, 99));
        assert_eq!(range(&f, "bytes=-1000"), partial(0, 99));
        assert_eq!(range(&f, "bytes=99-99"), partial(99, 99));
    }

    #[test]
    fn unsatisfiable_and_malformed_ranges_as_nginx() {
        let dir = TempDir::new();
        let f = sample(&dir);
        // nginx answered 416 to each of these.
        for r in [
            "bytes=100-",
            "bytes=abc",
            "bytes=5-3",
            "bytes=-0",
            "bytes=0-1,",
            "bytes=1-2x",
            "bytes=--1",
            "bytes=100-200,300-",
            "bytes=99999999999999999999-",
        ] {
            assert_eq!(range(&f, r), Plan::Unsatisfiable, "{r}");
        }
        // Not a byte range at all: ignored.
        for r in ["items=0-1", "bytes=", "bytes", ""] {
            assert_eq!(range(&f, r), Plan::Full, "{r}");
        }
        // Past-the-end ranges are dropped from a list when another one is satisfiable.
        assert_eq!(range(&f, "bytes=200-300,0-0"), partial(0, 0));
    }

    #[test]
    fn empty_file_ignores_ranges() {
        // nginx sent the empty file whole for `bytes=0-` and `bytes=0-5`.
        assert_eq!(parse_ranges(b"bytes=0-", 0), Ranges::Ignored);
        assert_eq!(parse_ranges(b"bytes=0-5", 0), Ranges::Ignored);
        assert_eq!(parse_ranges(b"bytes=-5", 0), Ranges::Ignored);
        assert_eq!(parse_ranges(b"bytes=1-5", 0), Ranges::Unsatisfiable);
    }

    #[test]
    fn multiple_ranges() {
        let dir = TempDir::new();
        let f = sample(&dir);
        assert_eq!(
            ranges(range(&f, "bytes= 1 - 2 , 4-5")),
            vec![(1, 2), (4, 5)]
        );
        let three = ranges(range(&f, "bytes=50-,-10,0-0"));
        assert_eq!(three, vec![(50, 99), (90, 99), (0, 0)]);
        // nginx's body for these three ranges of a text/html file was 342 bytes long.
        let m = multipart_parts(&three, "00000000000000000003", "text/html", 100);
        assert_eq!(m.content_length, 342);
        // nginx sent the whole file when the ranges add up to more than it.
        assert_eq!(range(&f, "bytes=0-60,50-99"), Plan::Full);
    }

    #[test]
    fn boundaries_count_up() {
        let a = next_boundary();
        let b = next_boundary();
        assert_eq!(a.len(), 20);
        assert!(b > a);
    }

    #[test]
    fn if_range() {
        let dir = TempDir::new();
        let f = sample(&dir);
        let with = |v: &'static [u8]| Conditions {
            range: Some(b"bytes=0-1"),
            if_range: Some(v),
            ..Default::default()
        };
        // nginx: 206 for the ETag and for the exact date; 200 for anything else.
        assert_eq!(get(&f, with(ETAG)), partial(0, 1));
        assert_eq!(get(&f, with(LAST_MODIFIED)), partial(0, 1));
        for v in [
            &b"\"other\""[..],
            b"W/\"5e0d5da5-64\"",
            b"Thu, 02 Jan 2020 03:04:06 GMT",
            b"garbage",
            b"\"",
        ] {
            assert_eq!(get(&f, with(v)), Plan::Full, "{v:?}");
        }
    }

    #[test]
    fn header_values() {
        assert_eq!(content_range(0, 9, 100), "bytes 0-9/100");
        assert_eq!(unsatisfied_range(100), "bytes */100");
    }

    #[test]
    fn multipart_body_as_nginx() {
        // nginx's answer to `Range: bytes= 1 - 2 , 4-5` for the sample file, as text/html.
        const NGINX: &[u8] = b"\r\n--00000000000000000001\r\n\
            Content-Type: text/html\r\n\
            Content-Range: bytes 1-2/100\r\n\r\n12\
            \r\n--00000000000000000001\r\n\
            Content-Type: text/html\r\n\
            Content-Range: bytes 4-5/100\r\n\r\n45\
            \r\n--00000000000000000001--\r\n";
        let contents: Vec<u8> = (0..100u8).map(|i| b'0' + i % 10).collect();
        let m = multipart_parts(&[(1, 2), (4, 5)], "00000000000000000001", "text/html", 100);
        assert_eq!(
            m.content_type,
            "multipart/byteranges; boundary=00000000000000000001"
        );
        assert_eq!(m.content_length, 198);
        assert_eq!(m.body(&contents).as_deref(), Some(NGINX));
        assert_eq!(m.parts[1].start, 4);
        assert_eq!(m.parts[1].len, 2);
    }

    #[test]
    fn multipart_charset_and_no_type() {
        let m = multipart_parts(&[(0, 0), (2, 3)], "7", "text/html; charset=utf-8", 4);
        assert_eq!(
            m.parts[0].head,
            "\r\n--7\r\nContent-Type: text/html; charset=utf-8\r\nContent-Range: bytes 0-0/4\r\n\r\n"
        );
        let bare = multipart_parts(&[(0, 0), (2, 3)], "7", "", 4);
        assert_eq!(
            bare.parts[1].head,
            "\r\n--7\r\nContent-Range: bytes 2-3/4\r\n\r\n"
        );
        assert_eq!(
            bare.body(b"abcd").map(|b| b.len() as u64),
            Some(bare.content_length)
        );
        assert_eq!(bare.body(b"ab"), None);
    }
}
