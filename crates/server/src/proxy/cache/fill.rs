//! Writing an entry while its response is sent: [`Fill`] is the downstream that keeps a copy
//! of the upstream's body in the entry's temporary file ([`Store`]) and renames the file into
//! its place once the body is whole. As nginx, the upstream is read to the end even when the
//! client goes away meanwhile, so the entry is complete.

use std::fs::File;
use std::future::Future;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;

use portcullis_http::Framing;

use super::store::CachePath;
use crate::proxy::{Connection, Downstream};

/// An entry being written.
pub(crate) struct Store {
    file: File,
    temp: PathBuf,
    path: PathBuf,
    zone: Arc<CachePath>,
    name: [u8; 16],
    /// The body's length when the upstream said it.
    expect: Option<u64>,
    written: u64,
    failed: bool,
    /// The file's bytes before the body.
    head_len: u64,
}

impl Store {
    pub(super) fn new(
        file: File,
        temp: PathBuf,
        path: PathBuf,
        zone: Arc<CachePath>,
        name: [u8; 16],
        expect: Option<u64>,
    ) -> Store {
        let head_len = file.metadata().map_or(0, |m| m.len());
        Store {
            file,
            temp,
            path,
            zone,
            name,
            expect,
            written: 0,
            failed: false,
            head_len,
        }
    }

    fn write(&mut self, data: &[u8]) {
        if !self.failed && !data.is_empty() {
            self.failed = self.file.write_all(data).is_err();
            self.written += data.len() as u64;
        }
    }

    /// The body is whole: the entry takes its place, unless it is not what the upstream
    /// announced.
    fn commit(mut self) {
        let whole = !self.failed && self.expect.is_none_or(|n| n == self.written);
        if whole && std::fs::rename(&self.temp, &self.path).is_ok() {
            self.zone.stored(&self.name, self.head_len + self.written);
            // Nothing left to remove.
            self.failed = true;
            self.temp = PathBuf::new();
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

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
