//! The FastCGI protocol on the upstream side of the exchange, as nginx's
//! `ngx_http_fastcgi_module` speaks it: the request as a `BEGIN_REQUEST` record (the
//! responder role, `FCGI_KEEP_CONN` with `fastcgi_keep_conn`), `PARAMS` records and `STDIN`
//! records; the response as `STDOUT` records (a CGI head, then the body), `STDERR` records
//! (logged as nginx logs them) and an `END_REQUEST` record that ends the body. The CGI head
//! is made an HTTP one (`Status:` its status line, a `Location:` without one a 302), so
//! that everything after it goes as for a proxied response.

use bytes::{BufMut, BytesMut};

use crate::vars::Template;

const VERSION: u8 = 1;
const BEGIN_REQUEST: u8 = 1;
const END_REQUEST: u8 = 3;
const PARAMS: u8 = 4;
const STDIN: u8 = 5;
const STDOUT: u8 = 6;
const STDERR: u8 = 7;
const RESPONDER: u16 = 1;
const KEEP_CONN: u8 = 1;
/// The one request of a connection.
const REQUEST_ID: u16 = 1;
/// The most content of a record.
const MAX_CONTENT: usize = 65535;
/// What follows a record's header: its content, then padding.
const HEADER_LEN: usize = 8;

/// Appends a record of `kind` holding `content` (at most [`MAX_CONTENT`] bytes), padded to
/// a multiple of 8 bytes as nginx pads them.
fn record(out: &mut BytesMut, kind: u8, content: &[u8]) {
    let padding = (8 - content.len() % 8) % 8;
    out.put_u8(VERSION);
    out.put_u8(kind);
    out.put_u16(REQUEST_ID);
    out.put_u16(u16::try_from(content.len()).expect("a record's content fits"));
    out.put_u8(padding as u8);
    out.put_u8(0);
    out.put_slice(content);
    out.put_bytes(0, padding);
}

/// Appends `content` as records of `kind`, then the empty one that ends the stream.
fn stream(out: &mut BytesMut, kind: u8, content: &[u8]) {
    for piece in content.chunks(MAX_CONTENT) {
        record(out, kind, piece);
    }
    record(out, kind, &[]);
}

/// One `fastcgi_param`.
pub(crate) struct Param {
    pub name: Vec<u8>,
    pub value: Template,
    pub if_not_empty: bool,
    /// An `HTTP_*` param written as `""`: it only hides the client's field of its name.
    pub hide_only: bool,
}

/// A level's `fastcgi_param`s, and the `HTTP_*` names among them (upper case), whose client
/// fields are not sent: nginx's hidden headers, a param of such a name written as `""` only
/// hiding the field (`fastcgi_param HTTP_PROXY "";`).
#[derive(Default)]
pub(crate) struct Params {
    pub(super) list: Vec<Param>,
    pub(super) hidden: Vec<Vec<u8>>,
}

impl Params {
    /// These params and `more` after them.
    pub fn with(&self, more: Param) -> Params {
        let mut list: Vec<Param> = self
            .list
            .iter()
            .map(|p| Param {
                name: p.name.clone(),
                value: p.value.clone(),
                if_not_empty: p.if_not_empty,
                hide_only: p.hide_only,
            })
            .collect();
        list.push(more);
        let hidden = list
            .iter()
            .filter(|p| p.name.len() > 5 && p.name.starts_with(b"HTTP_"))
            .map(|p| p.name.to_ascii_uppercase())
            .collect();
        Params { list, hidden }
    }
}

/// Appends a `PARAMS` name-value pair.
pub(crate) fn pair(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    pair_length(out, name.len());
    pair_length(out, value.len());
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// A length in a name-value pair: one byte below 128, else four with the top bit set.
fn pair_length(out: &mut Vec<u8>, n: usize) {
    if n < 128 {
        out.push(n as u8);
    } else {
        out.extend_from_slice(&(u32::try_from(n).unwrap_or(u32::MAX) | 0x8000_0000).to_be_bytes());
    }
}

/// The request's records before its body: `BEGIN_REQUEST`, then the name-value `pairs`
/// (see [`pair`]) as `PARAMS`.
pub(crate) fn begin(out: &mut BytesMut, keep_conn: bool, pairs: &[u8]) {
    let mut begin = [0u8; 8];
    begin[..2].copy_from_slice(&RESPONDER.to_be_bytes());
    begin[2] = if keep_conn { KEEP_CONN } else { 0 };
    out.reserve(pairs.len() + 48);
    record(out, BEGIN_REQUEST, &begin);
    stream(out, PARAMS, pairs);
}

/// The request's body as `STDIN` records, ended by an empty one.
pub(crate) fn stdin(body: &[u8]) -> BytesMut {
    let records = body.len().div_ceil(MAX_CONTENT) + 1;
    let mut out = BytesMut::with_capacity(body.len() + records * (HEADER_LEN + 8));
    stream(&mut out, STDIN, body);
    out
}

/// What came of the records read so far.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    /// Bytes of a record not read whole yet.
    pending: BytesMut,
    /// The `END_REQUEST` record came (or one nginx does not take): nothing more is read.
    pub ended: bool,
    /// A record nginx does not take came.
    broken: bool,
}

/// What [`Decoder::decode`] found besides output.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A `STDERR` record's text, to log, and how much of the output came before it.
    Stderr { text: Vec<u8>, after: usize },
    /// A record nginx does not take (another version, request id or type).
    Invalid(String),
}

impl Decoder {
    /// Whether the response ended as it should, with nothing after it: its connection may
    /// carry another.
    pub fn is_whole(&self) -> bool {
        self.ended && !self.broken && self.pending.is_empty()
    }

    /// Where bytes read from the upstream go before [`decode`](Self::decode) takes them.
    pub fn input(&mut self) -> &mut BytesMut {
        &mut self.pending
    }

    /// Takes the whole records of what was read, appending the content of every `STDOUT`
    /// record to `out`; what else the records said is in the events.
    pub fn decode(&mut self, out: &mut BytesMut) -> Vec<Event> {
        let mut events = Vec::new();
        while !self.ended && self.pending.len() >= HEADER_LEN {
            let h = &self.pending[..HEADER_LEN];
            let (version, kind) = (h[0], h[1]);
            let id = u16::from_be_bytes([h[2], h[3]]);
            let len = usize::from(u16::from_be_bytes([h[4], h[5]]));
            let padding = usize::from(h[6]);
            let invalid = if version != VERSION {
                Some(format!(
                    "upstream sent unsupported FastCGI protocol version: {version}"
                ))
            } else if id >> 8 != REQUEST_ID >> 8 {
                Some(format!(
                    "upstream sent unexpected FastCGI request id high byte: {}",
                    id >> 8
                ))
            } else if id != REQUEST_ID {
                Some(format!(
                    "upstream sent unexpected FastCGI request id low byte: {}",
                    id & 0xff
                ))
            } else {
                None
            };
            if let Some(why) = invalid {
                events.push(Event::Invalid(why));
                self.ended = true;
                self.broken = true;
                break;
            }
            if self.pending.len() < HEADER_LEN + len + padding {
                break;
            }
            let record = self.pending.split_to(HEADER_LEN + len + padding);
            let content = &record[HEADER_LEN..HEADER_LEN + len];
            match kind {
                STDOUT => out.extend_from_slice(content),
                STDERR => events.push(Event::Stderr {
                    text: content.to_vec(),
                    after: out.len(),
                }),
                END_REQUEST => self.ended = true,
                other => {
                    events.push(Event::Invalid(format!(
                        "upstream sent invalid FastCGI record type: {other}"
                    )));
                    self.ended = true;
                    self.broken = true;
                }
            }
        }
        events
    }
}

/// Where a CGI head ends in `out` (the index after its empty line), if it does.
pub(crate) fn head_end(out: &[u8]) -> Option<usize> {
    let mut line_start = 0;
    for (i, &b) in out.iter().enumerate() {
        if b == b'\n' {
            let line = &out[line_start..i];
            if line.is_empty() || line == b"\r" {
                return Some(i + 1);
            }
            line_start = i + 1;
        }
    }
    None
}

/// The HTTP/1.1 head standing for the CGI head `cgi` (its empty line included): the status
/// of its first `Status:` field (a 302 when it has none and a `Location:`, else 200), and
/// its fields, `Status:` among them (nginx's uwsgi module passes it on, the FastCGI and SCGI
/// ones hide it); `Err` names what nginx would not take.
pub(crate) fn http_head(cgi: &[u8]) -> Result<BytesMut, String> {
    let mut status: Option<(u16, Vec<u8>)> = None;
    let mut location = false;
    let mut fields = BytesMut::new();
    for line in cgi.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err("upstream sent invalid header".to_owned());
        };
        let name = &line[..colon];
        let value = line[colon + 1..].trim_ascii();
        if name.is_empty() || name.iter().any(|&b| b <= b' ' || b == 0x7f) {
            return Err("upstream sent invalid header".to_owned());
        }
        if name.eq_ignore_ascii_case(b"status") {
            let code = value
                .get(..3)
                .and_then(|d| std::str::from_utf8(d).ok())
                .and_then(|d| d.parse::<u16>().ok())
                .filter(|c| (100..1000).contains(c))
                .ok_or_else(|| {
                    format!(
                        "upstream sent invalid status \"{}\"",
                        String::from_utf8_lossy(value)
                    )
                })?;
            // The first one counts, as in nginx.
            if status.is_none() {
                status = Some((code, value[3..].trim_ascii().to_vec()));
            }
        }
        location |= name.eq_ignore_ascii_case(b"location");
        fields.put_slice(name);
        fields.put_slice(b": ");
        fields.put_slice(value);
        fields.put_slice(b"\r\n");
    }
    let (code, reason) = match status {
        Some(s) => s,
        None if location => (302, b"Moved Temporarily".to_vec()),
        None => (200, b"OK".to_vec()),
    };
    let mut head = BytesMut::with_capacity(fields.len() + 32);
    head.put_slice(format!("HTTP/1.1 {code} ").as_bytes());
    head.put_slice(&reason);
    head.put_slice(b"\r\n");
    head.put_slice(&fields);
    head.put_slice(b"\r\n");
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_go_round() {
        let mut out = BytesMut::new();
        let mut pairs = Vec::new();
        pair(&mut pairs, b"A", &[b'x'; 200]);
        begin(&mut out, true, &pairs);
        assert_eq!(&out[..8], &[1, BEGIN_REQUEST, 0, 1, 0, 8, 0, 0]);
        assert_eq!(out[8 + 2], KEEP_CONN);
        // The pair: one byte for the name's length, four for the value's.
        assert_eq!(&out[16 + 8..16 + 8 + 5], &[1, 0x80, 0, 0, 200]);
        assert_eq!(out.len() % 8, 0);
        let body = stdin(&[7u8; 70000]);
        assert_eq!(body.len(), 8 + 65535 + 1 + 8 + 4465 + 7 + 8);
    }

    #[test]
    fn stdout_stderr_and_the_end() {
        let mut input = BytesMut::new();
        record(&mut input, STDERR, b"oops");
        record(&mut input, STDOUT, b"Status: 404 Nope\r\nX: y\r\n\r\nbody");
        record(&mut input, END_REQUEST, &[0; 8]);
        let mut d = Decoder::default();
        let mut out = BytesMut::new();
        // A byte at a time: records split anywhere are put together.
        let mut events = Vec::new();
        for b in input.iter() {
            d.input().extend_from_slice(&[*b]);
            events.extend(d.decode(&mut out));
        }
        assert!(d.ended);
        assert_eq!(
            events,
            vec![Event::Stderr {
                text: b"oops".to_vec(),
                after: 0
            }]
        );
        let end = head_end(&out).unwrap();
        assert_eq!(&out[end..], b"body");
        let head = http_head(&out[..end]).unwrap();
        assert_eq!(
            &head[..],
            b"HTTP/1.1 404 Nope\r\nStatus: 404 Nope\r\nX: y\r\n\r\n"
        );
        assert_eq!(
            &http_head(b"Location: /x\n\n").unwrap()[..],
            b"HTTP/1.1 302 Moved Temporarily\r\nLocation: /x\r\n\r\n"
        );
        assert!(http_head(b"no colon\r\n\r\n").is_err());
    }
}
