//! Recoding a response's body on its way out, as nginx's body filters do (`gzip`
//! compresses, `gunzip` decompresses): the core asks the modules' `encode` handlers once the
//! response's head is known, and applies what they decide to the head (the fields a recoded
//! body changes) and to the body, for a response of the server's own and for a proxied one
//! alike, over HTTP/1.1 and HTTP/2.
//!
//! A recoded body has no length known in advance: HTTP/1.1 sends it chunked, HTTP/1.0 to the
//! connection's close, HTTP/2 in DATA frames. It is recoded as it goes, a piece at a time:
//! a large file or a long upstream response is never held whole.

use std::io;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use portcullis_http::{Framing, ResponseHead};

use crate::files::CachedFile;
use crate::request::{Body, Part, Response};

/// How much of a file is read and recoded at a time.
const FILE_PIECE: usize = 32 * 1024;
/// The largest body offered to [`Coder::whole`]: read whole into memory first.
const WHOLE_MAX: u64 = 1024 * 1024;

/// A recoder of body bytes.
pub(crate) trait Coder {
    /// Recodes `input`, appending what comes of it to `out` (perhaps nothing yet).
    fn code(&mut self, input: &[u8], out: &mut BytesMut) -> io::Result<()>;
    /// The input is whole: appends the rest.
    fn finish(&mut self, out: &mut BytesMut) -> io::Result<()>;
    /// How the head changes with the body.
    fn head(&self) -> HeadEdit;
    /// Where the coder goes in a chain of several (nginx's body filters' order).
    fn stage(&self) -> Stage;
    /// Recodes a whole body at once, when that is faster than piece by piece: `None` when
    /// the coder does not, and then [`code`](Coder::code) and [`finish`](Coder::finish) do.
    fn whole(&mut self, input: &[u8], out: &mut BytesMut) -> Option<io::Result<()>> {
        let _ = (input, out);
        None
    }
    /// For a coder whose output is bounded per call (a decompressor, whose output may be a
    /// thousand times its input): appends more of what the input given so far makes, and
    /// says whether more still remains. Callers send what came before asking again, and ask
    /// until it says no before [`finish`](Coder::finish).
    fn more(&mut self, out: &mut BytesMut) -> io::Result<bool> {
        let _ = out;
        Ok(false)
    }
    /// Whether the coder bounds its output per call (see [`more`](Coder::more)).
    fn bounded(&self) -> bool {
        false
    }
    /// Appends all the input so far makes, without ending (`proxy_buffering off`: what the
    /// upstream sent goes out now).
    fn flush(&mut self, out: &mut BytesMut) -> io::Result<()> {
        let _ = out;
        Ok(())
    }
}

/// The order of coders in a chain: decompression (`gunzip`), then rewriting
/// (`sub_filter`), then recoding to another charset (`charset`), then compression (`gzip`),
/// as nginx's body filters run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stage {
    Decompress,
    Rewrite,
    Charset,
    Compress,
}

/// What becomes of a response's `ETag` when its body is recoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Etag {
    #[default]
    Keep,
    /// Weak, as nginx's `ngx_http_weak_etag` makes it.
    Weak,
    Remove,
}

/// How a recoding changes the head, beyond the length, which it takes away unless
/// `keep_length`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HeadEdit {
    /// The body keeps its length, byte for byte (a recoding between two single-byte
    /// charsets): the length, `Accept-Ranges` and ranges stay as they were.
    pub keep_length: bool,
    /// `Content-Encoding`: `Some(Some(v))` sets it, `Some(None)` removes it.
    pub content_encoding: Option<Option<&'static [u8]>>,
    /// Removes a proxied response's `Accept-Ranges` (one of the server's own always goes
    /// with the length: nginx's range filter adds it only to a response of known length).
    pub accept_ranges: bool,
    pub etag: Etag,
    pub last_modified: bool,
}

impl HeadEdit {
    /// This edit, then `next`'s.
    fn then(self, next: HeadEdit) -> HeadEdit {
        HeadEdit {
            keep_length: self.keep_length && next.keep_length,
            content_encoding: next.content_encoding.or(self.content_encoding),
            accept_ranges: self.accept_ranges || next.accept_ranges,
            etag: self.etag.max(next.etag),
            last_modified: self.last_modified || next.last_modified,
        }
    }

    /// Whether a field called `name` is one this edit takes away or changes.
    pub fn changes(&self, name: &[u8]) -> bool {
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        (!self.keep_length && is("content-length"))
            || (self.accept_ranges && is("accept-ranges"))
            || (self.etag != Etag::Keep && is("etag"))
            || (self.last_modified && is("last-modified"))
            || (self.content_encoding.is_some() && is("content-encoding"))
    }
}

/// Coders applied one after the other, in the order of their [`Stage`]s.
pub(crate) struct Chain(Vec<Box<dyn Coder>>);

impl Chain {
    /// One coder of `coders`, chained when there are several.
    pub fn of(mut coders: Vec<Box<dyn Coder>>) -> Option<Box<dyn Coder>> {
        coders.sort_by_key(|c| c.stage());
        match coders.len() {
            0 => None,
            1 => coders.pop(),
            _ => Some(Box::new(Chain(coders))),
        }
    }
}

impl Coder for Chain {
    fn code(&mut self, input: &[u8], out: &mut BytesMut) -> io::Result<()> {
        let (last, rest) = self.0.split_last_mut().expect("a chain of two or more");
        let mut piece = BytesMut::from(input);
        for c in rest {
            let mut next = BytesMut::new();
            c.code(&piece, &mut next)?;
            piece = next;
        }
        last.code(&piece, out)
    }

    fn finish(&mut self, out: &mut BytesMut) -> io::Result<()> {
        // Each coder takes what the ones before it gave as they ended, then ends.
        let mut carry = BytesMut::new();
        for c in &mut self.0 {
            let mut next = BytesMut::new();
            c.code(&carry, &mut next)?;
            c.finish(&mut next)?;
            carry = next;
        }
        out.extend_from_slice(&carry);
        Ok(())
    }

    fn head(&self) -> HeadEdit {
        let (first, rest) = self.0.split_first().expect("a chain of two or more");
        rest.iter()
            .fold(first.head(), |edit, c| edit.then(c.head()))
    }

    /// Only the first coder of a chain bounds its output (a decompressor comes first).
    fn more(&mut self, out: &mut BytesMut) -> io::Result<bool> {
        let (first, rest) = self.0.split_first_mut().expect("a chain of two or more");
        let mut piece = BytesMut::new();
        let more = first.more(&mut piece)?;
        if piece.is_empty() {
            // Nothing for the others: a compressor asked to code nothing may still start
            // its stream.
            return Ok(more);
        }
        let n = rest.len();
        for (i, c) in rest.iter_mut().enumerate() {
            let mut next = BytesMut::new();
            c.code(&piece, if i + 1 == n { &mut *out } else { &mut next })?;
            piece = next;
        }
        Ok(more)
    }

    fn bounded(&self) -> bool {
        self.0.first().is_some_and(|c| c.bounded())
    }

    fn flush(&mut self, out: &mut BytesMut) -> io::Result<()> {
        let mut carry = BytesMut::new();
        for c in &mut self.0 {
            let mut next = BytesMut::new();
            c.code(&carry, &mut next)?;
            c.flush(&mut next)?;
            carry = next;
        }
        out.extend_from_slice(&carry);
        Ok(())
    }

    fn stage(&self) -> Stage {
        self.0.last().map_or(Stage::Rewrite, |c| c.stage())
    }

    fn whole(&mut self, input: &[u8], out: &mut BytesMut) -> Option<io::Result<()>> {
        // A first coder that bounds its output goes piece by piece, asked for more.
        if self.0.first().is_some_and(|c| c.bounded()) {
            return None;
        }
        let (last, rest) = self.0.split_last_mut()?;
        let mut body = BytesMut::from(input);
        for c in rest {
            let mut next = BytesMut::new();
            if let Err(e) = c.code(&body, &mut next).and_then(|()| c.finish(&mut next)) {
                return Some(Err(e));
            }
            body = next;
        }
        Some(match last.whole(&body, out) {
            Some(done) => done,
            None => last.code(&body, out).and_then(|()| last.finish(out)),
        })
    }
}

/// What the modules decided for a response.
#[derive(Default)]
pub(crate) struct Encode {
    /// Add `Vary: Accept-Encoding`.
    pub vary: bool,
    /// Recode the body.
    pub coder: Option<Box<dyn Coder>>,
}

impl Encode {
    pub fn is_nothing(&self) -> bool {
        !self.vary && self.coder.is_none()
    }
}

/// The head of a response about to go out, as the `encode` handlers see it: one of the
/// server's own or a proxied one.
pub(crate) enum Outgoing<'a> {
    Own(&'a Response),
    Proxied(&'a ResponseHead),
    /// As the one inside, whose length a module's recoding already takes away (the later
    /// ones see no length, as nginx's later filters do).
    Recoded(&'a Outgoing<'a>),
}

impl Outgoing<'_> {
    /// The status nginx's filters see: a range of a file is a 200 to them, as the range
    /// filter comes after (a range is compressed never, as where gzip applies ranges are
    /// not served: `Request::file_response`).
    pub fn status(&self) -> u16 {
        match self {
            Outgoing::Own(r) if r.status == 206 && is_file(&r.body) => 200,
            Outgoing::Own(r) => r.filtered_status(),
            Outgoing::Proxied(h) => h.status(),
            Outgoing::Recoded(o) => o.status(),
        }
    }

    /// The media type, without parameters.
    pub fn media_type(&self) -> Option<Vec<u8>> {
        let full: Vec<u8> = match self {
            Outgoing::Own(r) => r.content_type.as_ref()?.as_bytes().to_vec(),
            Outgoing::Proxied(h) => h.header("content-type")?.to_vec(),
            Outgoing::Recoded(o) => return o.media_type(),
        };
        let end = full.iter().position(|&b| b == b';').unwrap_or(full.len());
        Some(full[..end].trim_ascii().to_ascii_lowercase())
    }

    /// The body's length, when known.
    pub fn content_length(&self) -> Option<u64> {
        match self {
            Outgoing::Own(r) if r.status == 206 => file_size(&r.body).or(r.content_length),
            Outgoing::Own(r) => r.content_length,
            Outgoing::Recoded(_) => None,
            Outgoing::Proxied(h) => match h.framing() {
                Framing::Length(n) => Some(n),
                _ => None,
            },
        }
    }

    /// The value of the first field called `name`.
    pub fn field(&self, name: &str) -> Option<Vec<u8>> {
        match self {
            Outgoing::Own(r) => r.header_value(name),
            Outgoing::Proxied(h) => h.header(name).map(<[u8]>::to_vec),
            Outgoing::Recoded(o) => o.field(name),
        }
    }

    /// The values of every field called `name`.
    pub fn fields(&self, name: &str) -> Vec<Vec<u8>> {
        match self {
            Outgoing::Own(r) => r.header_values(name),
            Outgoing::Recoded(o) => o.fields(name),
            Outgoing::Proxied(h) => h
                .fields()
                .filter(|f| f.name.eq_ignore_ascii_case(name.as_bytes()))
                .map(|f| f.value.to_vec())
                .collect(),
        }
    }
}

fn is_file(body: &Body) -> bool {
    matches!(body, Body::File { .. } | Body::Parts(_))
}

/// The size of the file a range of it comes from.
fn file_size(body: &Body) -> Option<u64> {
    match body {
        Body::File { file, .. } => Some(file.size),
        Body::Parts(parts) => parts.iter().find_map(|p| match p {
            crate::request::Part::File { file, .. } => Some(file.size),
            crate::request::Part::Bytes(_) => None,
        }),
        _ => None,
    }
}

/// Applies `enc` to a response of the server's own: its head, and its body, which becomes
/// a [`Body::Stream`] (the body of a HEAD response is not sent, and not made).
pub(crate) fn own(resp: &mut Response, enc: Encode, head_only: bool) {
    if enc.vary {
        resp.header("Vary", b"Accept-Encoding");
    }
    let recodable = matches!(
        resp.body,
        Body::Empty | Body::Bytes(_) | Body::File { .. } | Body::Stream(_)
    );
    let keep_length = enc.coder.as_ref().is_some_and(|c| c.head().keep_length);
    // A range is cut from the body as it is, then recoded when that keeps every byte's
    // place (nginx's range filter comes before the body filters; one that takes the length
    // away leaves no range to cut).
    let recodable = recodable || (keep_length && matches!(resp.body, Body::Parts(_)));
    let Some(coder) = enc
        .coder
        .filter(|_| (keep_length || !matches!(resp.status, 206)) && resp.status != 416)
        .filter(|_| recodable)
    else {
        return;
    };
    edit_head(resp, &coder.head());
    if head_only || matches!(resp.status, 204 | 304) {
        return;
    }
    let input = match std::mem::replace(&mut resp.body, Body::Empty) {
        // An empty body compressed is a gzip stream of nothing, sent as any other.
        Body::Empty => Input::Bytes(Some(Bytes::new())),
        Body::Bytes(b) => Input::Bytes(Some(b)),
        Body::File { file, offset, len } => Input::File { file, offset, len },
        Body::Stream(source) => Input::Stream(source),
        Body::Parts(parts) => Input::Parts(parts.into()),
        other => {
            resp.body = other;
            return;
        }
    };
    resp.body = Body::Stream(Box::new(Recoded {
        input,
        coder,
        done: false,
    }));
}

/// A body of the server's own made into pieces sent one after the other, as they are
/// unchanged: for a response that goes chunked to end with trailers (`add_trailer`).
pub(crate) fn pieces(body: Body) -> Body {
    /// Passes the body as it is.
    struct Same;
    impl Coder for Same {
        fn code(&mut self, input: &[u8], out: &mut BytesMut) -> io::Result<()> {
            out.extend_from_slice(input);
            Ok(())
        }
        fn finish(&mut self, _: &mut BytesMut) -> io::Result<()> {
            Ok(())
        }
        fn head(&self) -> HeadEdit {
            HeadEdit::default()
        }
        fn stage(&self) -> Stage {
            Stage::Rewrite
        }
    }
    let input = match body {
        Body::Empty => Input::Bytes(None),
        Body::Bytes(b) => Input::Bytes(Some(b)),
        Body::File { file, offset, len } => Input::File { file, offset, len },
        Body::Stream(source) => return Body::Stream(source),
        Body::Parts(parts) => Input::Parts(parts.into()),
        other => return other,
    };
    Body::Stream(Box::new(Recoded {
        input,
        coder: Box::new(Same),
        done: false,
    }))
}

/// Changes the head of a response of the server's own as `edit` says.
pub(crate) fn edit_head(resp: &mut Response, edit: &HeadEdit) {
    if !edit.keep_length {
        resp.content_length = None;
        resp.remove_header("Accept-Ranges");
    }
    match edit.etag {
        Etag::Keep => {}
        Etag::Weak => weaken_etag(resp),
        Etag::Remove => resp.remove_header("ETag"),
    }
    if edit.last_modified {
        resp.remove_header("Last-Modified");
    }
    if let Some(ce) = edit.content_encoding {
        resp.remove_header("Content-Encoding");
        if let Some(ce) = ce {
            resp.header("Content-Encoding", ce);
        }
    }
}

/// A recoded body is not the same bytes: its tag becomes weak, as nginx's filters make it.
fn weaken_etag(resp: &mut Response) {
    let Some(etag) = resp.header_value("ETag") else {
        return;
    };
    resp.replace_header("ETag", weak_etag(&etag).as_deref());
}

/// nginx's `ngx_http_weak_etag`: a weak tag stays, a strong one becomes weak, anything else
/// is dropped.
pub(crate) fn weak_etag(etag: &[u8]) -> Option<Vec<u8>> {
    if etag.starts_with(b"W/") {
        return Some(etag.to_vec());
    }
    if etag.starts_with(b"\"") {
        return Some([b"W/", etag].concat());
    }
    None
}

/// A body recoded as it is sent.
pub(crate) trait Source {
    /// Appends the next piece of the body to `out`; `false` once the body is whole.
    fn next(&mut self, out: &mut BytesMut) -> io::Result<bool>;
}

/// A body made whole before it is sent, of a length the head does not say (as nginx sends
/// an autoindex listing).
pub(crate) struct Once(pub Option<Bytes>);

impl Source for Once {
    fn next(&mut self, out: &mut BytesMut) -> io::Result<bool> {
        if let Some(b) = self.0.take() {
            out.extend_from_slice(&b);
        }
        Ok(false)
    }
}

enum Input {
    Bytes(Option<Bytes>),
    Stream(Box<dyn Source>),
    File {
        file: Rc<CachedFile>,
        offset: u64,
        len: u64,
    },
    /// The parts of several ranges, one after the other.
    Parts(std::collections::VecDeque<Part>),
}

struct Recoded {
    input: Input,
    coder: Box<dyn Coder>,
    done: bool,
}

impl Source for Recoded {
    fn next(&mut self, out: &mut BytesMut) -> io::Result<bool> {
        if self.done {
            return Ok(false);
        }
        // What the coder still holds of the input given goes first.
        if self.coder.more(out)? {
            return Ok(true);
        }
        if let Some(whole) = self.whole(out) {
            self.done = true;
            return whole.map(|()| false);
        }
        // Reads until something comes out or the input ends.
        loop {
            let start = out.len();
            let more = match &mut self.input {
                Input::Bytes(b) => {
                    if let Some(b) = b.take() {
                        self.coder.code(&b, out)?;
                    }
                    false
                }
                Input::Stream(source) => {
                    let mut piece = BytesMut::new();
                    let more = source.next(&mut piece)?;
                    self.coder.code(&piece, out)?;
                    more
                }
                Input::File { file, offset, len } => {
                    let n = (*len).min(FILE_PIECE as u64) as usize;
                    if n > 0 {
                        let piece = read_piece(file, *offset, n)?;
                        self.coder.code(&piece, out)?;
                        *offset += n as u64;
                        *len -= n as u64;
                    }
                    *len > 0
                }
                Input::Parts(parts) => {
                    match parts.front_mut() {
                        Some(Part::Bytes(b)) => {
                            self.coder.code(b, out)?;
                            parts.pop_front();
                        }
                        Some(Part::File { file, offset, len }) => {
                            let n = (*len).min(FILE_PIECE as u64) as usize;
                            let piece = read_piece(file, *offset, n)?;
                            self.coder.code(&piece, out)?;
                            *offset += n as u64;
                            *len -= n as u64;
                            if *len == 0 {
                                parts.pop_front();
                            }
                        }
                        None => {}
                    }
                    !parts.is_empty()
                }
            };
            if !more {
                // The coder may hold more than one piece of output: one at a time.
                if self.coder.more(out)? {
                    return Ok(true);
                }
                self.coder.finish(out)?;
                self.done = true;
                return Ok(false);
            }
            if out.len() > start {
                return Ok(true);
            }
        }
    }
}

impl Recoded {
    /// The whole body at once, if it is small enough and the coder does that; otherwise
    /// the body is left to go piece by piece.
    fn whole(&mut self, out: &mut BytesMut) -> Option<io::Result<()>> {
        let input = match &mut self.input {
            Input::Bytes(Some(b)) => b.clone(),
            Input::File { file, offset, len } if *len <= WHOLE_MAX => {
                match read_piece(file, *offset, *len as usize) {
                    Ok(b) => b,
                    Err(e) => return Some(Err(e)),
                }
            }
            _ => return None,
        };
        match self.coder.whole(&input, out) {
            Some(done) => {
                self.input = Input::Bytes(None);
                Some(done)
            }
            None => {
                // Piece by piece after all, from what was read.
                self.input = Input::Bytes(Some(input));
                None
            }
        }
    }
}

fn read_piece(file: &CachedFile, offset: u64, n: usize) -> io::Result<Bytes> {
    if let Some(contents) = &file.contents {
        let start = offset as usize;
        return Ok(contents.slice(start..start + n));
    }
    let mut buf = vec![0; n];
    std::os::unix::fs::FileExt::read_exact_at(&file.file, &mut buf, offset)?;
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weak_etags_as_nginx_makes_them() {
        assert_eq!(weak_etag(b"\"5f-1a\"").unwrap(), b"W/\"5f-1a\"");
        assert_eq!(weak_etag(b"W/\"x\"").unwrap(), b"W/\"x\"");
        assert_eq!(weak_etag(b"bare"), None);
    }
}
