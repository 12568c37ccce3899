//! `ngx_http_empty_gif_module`: `empty_gif` makes a location answer with nginx's 1x1
//! transparent GIF (43 bytes, `image/gif`, with the `Last-Modified` nginx gives it), to GET
//! and HEAD, with nginx's answers to conditions (304, 412); other methods are answered
//! 405. As every location handler, it belongs to the
//! location that names it, not to the locations inside it.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use portcullis_http::Method;

use crate::files::{preconditions, Plan};
use crate::module::{self, LocationHandler, Slot};
use crate::request::{Body, Handlers, Request, Response, Step};

pub(crate) static MODULE: LocationHandler = LocationHandler {
    name: "http_empty_gif_module",
    variables: &[],
    handlers: &HANDLERS,
};

static HANDLERS: Handlers = Handlers {
    content: Some(content),
    ..Handlers::NONE
};

/// nginx's GIF, byte for byte.
const GIF: [u8; 43] = [
    b'G', b'I', b'F', b'8', b'9', b'a', // header
    0x01, 0x00, 0x01, 0x00, // 1x1
    0x80, 0x01, 0x00, // a 1-bit global color table, background #1, no aspect ratio
    0x00, 0x00, 0x00, 0xff, 0xff, 0xff, // black, white
    0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x01, 0x00, // graphic control: #1 is transparent
    0x2c, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, // image descriptor
    0x02, 0x02, 0x4c, 0x01, 0x00, // LZW data
    0x3b, // trailer
];

/// nginx's modification time of the GIF.
const MTIME: u64 = 23_349_600;

fn content(req: &mut Request<'_>, conf: &Slot) -> Option<Step> {
    if !*module::get::<bool>(conf) {
        return None;
    }
    if !matches!(req.head().method(), Method::Get | Method::Head) {
        return Some(Step::Status(405));
    }
    let mtime = UNIX_EPOCH + Duration::from_secs(MTIME);
    // nginx's not-modified filter, for a response with this modification time and no ETag.
    let answer = preconditions(Some(MTIME as i64), None, true, &req.conditions());
    let not_modified = match answer {
        Some(Plan::NotModified) => true,
        Some(_) => return Some(Step::Status(412)),
        None => false,
    };
    let mut resp = Response::new(if not_modified { 304 } else { 200 });
    resp.header(
        "Last-Modified",
        crate::files::fmt_http_date(mtime).as_bytes(),
    );
    if !not_modified {
        resp.content_type = Some(Arc::from("image/gif"));
        resp.content_length = Some(GIF.len() as u64);
        resp.body = Body::Bytes(Bytes::from_static(&GIF));
    }
    Some(Step::Done(resp))
}
