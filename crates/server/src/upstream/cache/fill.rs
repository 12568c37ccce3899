//! Writing an entry while its response is sent: [`Fill`] is the downstream that keeps a copy
//! of the upstream's body in the entry's temporary file (a [`Store`]), which takes its place
//! once the body is whole. As nginx, the upstream is read to the end even when the
//! client goes away meanwhile, so the entry is complete.

use std::future::Future;
use std::io;

use portcullis_http::Framing;

use super::store::Store;
use crate::upstream::{Connection, Downstream};

/// A downstream that stores the body it passes on (`store`), and passes only the head when
/// the client asked for it alone (`head_only`: a HEAD sent upstream as a GET).
pub(crate) struct Fill<'d, D> {
    inner: &'d mut D,
    store: Option<Store>,
    head_only: bool,
    /// The client went away; the body is still read for the entry.
    gone: bool,
}

impl<'d, D: Downstream> Fill<'d, D> {
    pub(crate) fn new(inner: &'d mut D, store: Option<Store>, head_only: bool) -> Self {
        Fill {
            inner,
            store,
            head_only,
            gone: false,
        }
    }

    fn keep(&mut self, data: &[u8]) {
        if let Some(s) = self.store.as_mut() {
            s.write(data);
        }
    }

    /// Whether the client still takes the body.
    fn passes(&self) -> bool {
        !self.head_only && !self.gone
    }
}

impl<D: Downstream> Downstream for Fill<'_, D> {
    type Io = D::Io;
    type Head = D::Head;

    fn connection(&mut self) -> Option<Connection<'_, D::Io>> {
        self.inner.connection()
    }

    fn gone(&mut self) -> impl Future<Output = ()> {
        self.inner.gone()
    }

    fn begin(&mut self, framing: Framing) -> &mut D::Head {
        self.inner.begin(if self.head_only {
            Framing::Length(0)
        } else {
            framing
        })
    }

    fn push(&mut self, data: &[u8]) {
        self.keep(data);
        if self.passes() {
            self.inner.push(data);
        }
    }

    async fn send(&mut self, data: &[u8]) -> io::Result<()> {
        self.keep(data);
        if !self.passes() {
            return Ok(());
        }
        match self.inner.send(data).await {
            // The entry is still wanted: the upstream is read on.
            Err(_) if self.store.is_some() => {
                self.gone = true;
                Ok(())
            }
            other => other,
        }
    }

    async fn finish(&mut self) -> io::Result<()> {
        if let Some(s) = self.store.take() {
            s.commit();
        }
        if self.gone {
            return Ok(());
        }
        self.inner.finish().await
    }

    fn broken(&mut self) {
        self.store = None;
        self.inner.broken();
    }

    fn sent(&self) -> (u64, u64) {
        self.inner.sent()
    }

    fn keep_alive(&self) -> bool {
        !self.gone && self.inner.keep_alive()
    }
}

/// A downstream that passes on the bytes of one range of the body it is given: a range of
/// a response the cache stores whole.
pub(crate) struct Slice<'d, D> {
    inner: &'d mut D,
    start: u64,
    end: u64,
    /// Body bytes given so far.
    at: u64,
}

impl<'d, D: Downstream> Slice<'d, D> {
    /// The bytes from `start` to `start + len`.
    pub(crate) fn new(inner: &'d mut D, start: u64, len: u64) -> Self {
        Slice {
            inner,
            start,
            end: start + len,
            at: 0,
        }
    }

    /// The part of `data` (the body's next bytes) inside the range.
    fn cut<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        let from = self.at;
        self.at += data.len() as u64;
        let s = self.start.clamp(from, self.at) - from;
        let e = self.end.clamp(from, self.at) - from;
        &data[s as usize..e as usize]
    }
}

impl<D: Downstream> Downstream for Slice<'_, D> {
    type Io = D::Io;
    type Head = D::Head;

    fn connection(&mut self) -> Option<Connection<'_, D::Io>> {
        self.inner.connection()
    }

    fn gone(&mut self) -> impl Future<Output = ()> {
        self.inner.gone()
    }

    fn begin(&mut self, _: Framing) -> &mut D::Head {
        self.inner.begin(Framing::Length(self.end - self.start))
    }

    fn push(&mut self, data: &[u8]) {
        let part = self.cut(data);
        if !part.is_empty() {
            self.inner.push(part);
        }
    }

    async fn send(&mut self, data: &[u8]) -> io::Result<()> {
        let part = self.cut(data);
        self.inner.send(part).await
    }

    async fn finish(&mut self) -> io::Result<()> {
        self.inner.finish().await
    }

    fn broken(&mut self) {
        self.inner.broken();
    }

    fn sent(&self) -> (u64, u64) {
        self.inner.sent()
    }

    fn keep_alive(&self) -> bool {
        self.inner.keep_alive()
    }
}
