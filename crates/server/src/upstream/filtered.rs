//! A proxied response's downstream whose body a body filter (`ssi`) takes whole: the head
//! is kept as the exchange wrote it and the body gathered; once the body is whole, the
//! filter makes the new one, and the head (changed as the filter says) and the new body go
//! to the real downstream (which may recode it further, `gzip`). A body too long to hold
//! goes on as it came, unfiltered, with an error logged.

use std::io;

use bytes::BytesMut;
use portcullis_http::Framing;

use super::downstream::{Connection, Downstream};
use super::encoded::Recorded;
use crate::encode::HeadEdit;
use crate::request::{Body, Request, Response};
use crate::Level;

/// The most body bytes held.
const MAX: usize = 64 * 1024 * 1024;

pub(crate) struct Filtered<'d, 'r, D: Downstream> {
    inner: &'d mut D,
    req: &'d Request<'r>,
    edit: HeadEdit,
    /// The response has no body at all (HEAD, 204, 304): only its head changes.
    no_body: bool,
    framing: Framing,
    head: Recorded,
    body: BytesMut,
    /// The body was too long to hold: it goes on unfiltered.
    passing: bool,
    /// The head went to `inner`.
    begun: bool,
}

impl<'d, 'r, D: Downstream> Filtered<'d, 'r, D> {
    pub fn new(inner: &'d mut D, req: &'d Request<'r>, edit: HeadEdit, no_body: bool) -> Self {
        Filtered {
            inner,
            req,
            edit,
            no_body,
            framing: Framing::Length(0),
            head: Recorded::default(),
            body: BytesMut::new(),
            passing: false,
            begun: false,
        }
    }

    /// Gives the head to the real downstream: changed by the filter, or as it came.
    fn begin_inner(&mut self, changed: bool) {
        if self.begun {
            return;
        }
        self.begun = true;
        let framing = match self.framing {
            _ if self.no_body => Framing::Length(0),
            _ if changed => Framing::Chunked,
            other => other,
        };
        let head = std::mem::take(&mut self.head);
        head.replay(
            self.inner.begin(framing),
            changed.then_some(&self.edit),
            false,
        );
    }
}

impl<D: Downstream> Downstream for Filtered<'_, '_, D> {
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
        self.passing = false;
        self.body.clear();
        self.head = Recorded::default();
        &mut self.head
    }

    fn push(&mut self, data: &[u8]) {
        if self.passing {
            self.inner.push(data);
        } else if self.body.len() + data.len() > MAX {
            self.req.log(
                Level::Error,
                &format!("a response body of over {MAX} bytes is sent without its SSI run"),
            );
            self.passing = true;
            self.begin_inner(false);
            let held = self.body.split();
            self.inner.push(&held);
            self.inner.push(data);
        } else if !self.no_body {
            self.body.extend_from_slice(data);
        }
    }

    async fn send(&mut self, data: &[u8]) -> io::Result<()> {
        self.push(data);
        if self.passing {
            return self.inner.send(&[]).await;
        }
        Ok(())
    }

    async fn finish(&mut self) -> io::Result<()> {
        if self.passing || self.no_body {
            self.begin_inner(!self.passing);
            return self.inner.finish().await;
        }
        let mut resp = Response::new(self.head.status());
        resp.content_type = self
            .head
            .field("content-type")
            .map(|t| std::sync::Arc::from(String::from_utf8_lossy(t).as_ref()));
        resp.body = Body::Bytes(self.body.split().freeze());
        self.req.body_filters(&mut resp).await;
        if crate::request::no_response(&resp) {
            // The filter failed the response: nothing of it goes out, as in nginx.
            return Err(io::Error::other("the response's body filter failed"));
        }
        let mut out = BytesMut::new();
        match resp.body {
            Body::Bytes(b) => out.extend_from_slice(&b),
            Body::Stream(mut source) => while source.next(&mut out)? {},
            _ => {}
        }
        self.begin_inner(true);
        self.inner.send(&out).await?;
        self.inner.finish().await
    }

    fn broken(&mut self) {
        self.begin_inner(!self.passing);
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
