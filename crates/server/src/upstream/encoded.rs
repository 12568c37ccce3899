//! A proxied response's downstream with its body recoded (`encode.rs`): the exchange writes
//! the head and the body to it as to any downstream, and it hands them on, changed, to the
//! real one (an HTTP/1 connection or an HTTP/2 stream).

use std::io;

use bytes::BytesMut;
use portcullis_http::Framing;

use super::downstream::{Connection, Downstream, Fields};
use crate::encode::{weak_etag, Coder, Encode, Etag, HeadEdit};

/// A proxied response's downstream with its body recoded: the head's fields are kept until
/// the first body bytes, then given to the real downstream with the recoding's changes.
pub(crate) struct Encoded<'d, D: Downstream> {
    inner: &'d mut D,
    vary: bool,
    coder: Option<Box<dyn Coder>>,
    /// The response has no body at all (HEAD, 204, 304), not merely an empty one.
    no_body: bool,
    /// What comes in goes out at once (`proxy_buffering off`).
    flush: bool,
    /// Logs a recoding failure at `error`, with the request's context.
    log: &'d dyn Fn(&str),
    framing: Framing,
    head: Recorded,
    /// The head went to `inner`.
    begun: bool,
    /// Recoding failed: the response is broken and nothing more goes out.
    failed: bool,
    /// Body bytes pushed and not yet recoded: recoded when sent, so that what a decompressor
    /// makes of them goes out a bounded piece at a time.
    input: BytesMut,
    out: BytesMut,
}

/// The head's fields as the exchange wrote them.
#[derive(Default)]
pub(crate) struct Recorded {
    status: u16,
    reason: Vec<u8>,
    items: Vec<Item>,
}

enum Item {
    Field(Vec<u8>, Vec<u8>),
    Lines(Vec<u8>),
    Connection(bool),
}

impl Fields for Recorded {
    fn status(&mut self, code: u16, reason: &[u8]) {
        self.status = code;
        self.reason = reason.to_vec();
    }
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.items.push(Item::Field(name.to_vec(), value.to_vec()));
    }
    fn lines(&mut self, block: &[u8]) {
        self.items.push(Item::Lines(block.to_vec()));
    }
    fn connection(&mut self, upgrade: bool) {
        self.items.push(Item::Connection(upgrade));
    }
}

impl Recorded {
    /// The status the exchange wrote.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The value of the first field called `name`.
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.items.iter().find_map(|i| match i {
            Item::Field(n, v) if n.eq_ignore_ascii_case(name.as_bytes()) => Some(&v[..]),
            _ => None,
        })
    }

    /// Writes the head into `h`, changed as `edit` says; `vary` adds `Vary:
    /// Accept-Encoding` after the fields about the connection.
    pub fn replay(self, h: &mut impl Fields, edit: Option<&HeadEdit>, vary: bool) {
        h.status(self.status, &self.reason);
        for item in self.items {
            match item {
                Item::Field(name, value) => match edit {
                    Some(e) if e.changes(&name) => {
                        if e.etag == Etag::Weak && name.eq_ignore_ascii_case(b"etag") {
                            if let Some(w) = weak_etag(&value) {
                                h.field(&name, &w);
                            }
                        }
                    }
                    _ => h.field(&name, &value),
                },
                Item::Lines(block) => h.lines(&block),
                Item::Connection(upgrade) => {
                    h.connection(upgrade);
                    if vary {
                        h.field(b"Vary", b"Accept-Encoding");
                    }
                }
            }
        }
        if let Some(Some(ce)) = edit.and_then(|e| e.content_encoding) {
            h.field(b"Content-Encoding", ce);
        }
        h.end();
    }
}

impl<'d, D: Downstream> Encoded<'d, D> {
    pub fn new(
        inner: &'d mut D,
        enc: Encode,
        no_body: bool,
        flush: bool,
        log: &'d dyn Fn(&str),
    ) -> Self {
        Encoded {
            inner,
            vary: enc.vary,
            coder: enc.coder,
            no_body,
            flush,
            log,
            framing: Framing::Length(0),
            head: Recorded::default(),
            begun: false,
            failed: false,
            input: BytesMut::new(),
            out: BytesMut::new(),
        }
    }

    /// A recoding failure: logged, and the response broken off.
    fn fail(&mut self, e: io::Error) -> io::Error {
        if !self.failed {
            (self.log)(&format!("{e} while sending to client"));
        }
        self.failed = true;
        self.out.clear();
        self.inner.broken();
        e
    }

    /// Sends what was recoded, then what the coder still holds, a piece at a time.
    async fn drain(&mut self) -> io::Result<()> {
        loop {
            let out = self.out.split();
            self.inner.send(&out).await?;
            let Some(c) = self.coder.as_mut() else {
                return Ok(());
            };
            match c.more(&mut self.out) {
                Ok(true) => {}
                Ok(false) => {
                    let out = self.out.split();
                    return self.inner.send(&out).await;
                }
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// Gives the head to the real downstream, changed as the recoding changes it.
    fn begin_inner(&mut self) {
        if self.begun {
            return;
        }
        self.begun = true;
        // The head changes as the body would, even with no body (HEAD); an empty body
        // recoded is a body (an empty gzip stream) of a length not known before.
        let edit = self.coder.as_ref().map(|c| c.head());
        let framing = match self.framing {
            _ if self.no_body => Framing::Length(0),
            _ if edit.is_some_and(|e| !e.keep_length) => Framing::Chunked,
            other => other,
        };
        let head = std::mem::take(&mut self.head);
        head.replay(self.inner.begin(framing), edit.as_ref(), self.vary);
        if self.no_body {
            self.coder = None;
        }
    }

    fn recode(&mut self, data: &[u8]) -> io::Result<()> {
        match self.coder.as_mut() {
            Some(c) => c.code(data, &mut self.out),
            None => {
                self.out.extend_from_slice(data);
                Ok(())
            }
        }
    }
}

impl<D: Downstream> Downstream for Encoded<'_, D> {
    type Io = D::Io;
    type Head = Recorded;

    fn connection(&mut self) -> Option<Connection<'_, D::Io>> {
        self.inner.connection()
    }

    fn gone(&mut self) -> impl std::future::Future<Output = ()> {
        self.inner.gone()
    }

    fn begin(&mut self, framing: Framing) -> &mut Recorded {
        self.framing = framing;
        self.begun = false;
        self.head = Recorded::default();
        &mut self.head
    }

    fn push(&mut self, data: &[u8]) {
        self.begin_inner();
        if !self.failed {
            self.input.extend_from_slice(data);
        }
    }

    async fn send(&mut self, data: &[u8]) -> io::Result<()> {
        self.begin_inner();
        if self.failed {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        }
        self.input.extend_from_slice(data);
        let input = self.input.split();
        if let Err(e) = self.recode(&input) {
            return Err(self.fail(e));
        }
        if self.flush {
            if let Some(Err(e)) = self.coder.as_mut().map(|c| c.flush(&mut self.out)) {
                return Err(self.fail(e));
            }
        }
        self.drain().await
    }

    async fn finish(&mut self) -> io::Result<()> {
        self.begin_inner();
        if self.failed {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        }
        if !self.input.is_empty() {
            self.send(&[]).await?;
        }
        if self.coder.is_some() {
            self.drain().await?;
            let Some(c) = self.coder.as_mut() else {
                return Ok(());
            };
            if let Err(e) = c.finish(&mut self.out) {
                return Err(self.fail(e));
            }
            let out = self.out.split();
            self.inner.send(&out).await?;
        }
        self.inner.finish().await
    }

    fn broken(&mut self) {
        self.begin_inner();
        self.inner.broken();
    }

    fn sent(&self) -> (u64, u64) {
        self.inner.sent()
    }

    fn keep_alive(&self) -> bool {
        self.inner.keep_alive()
    }

    fn limit_rate(&mut self, rate: u64, after: u64, start: tokio::time::Instant) {
        self.inner.limit_rate(rate, after, start);
    }

    fn end_with(&mut self, trailers: Vec<(String, Vec<u8>)>) {
        self.inner.end_with(trailers);
    }
}
