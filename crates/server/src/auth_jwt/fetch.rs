//! `auth_jwt_key_request`: a key set fetched by a subrequest.
//!
//! The subrequest is a GET of the URI with the main request's header fields, as nginx's
//! subrequests share them, less those about the main request's body, conditions and ranges
//! (nginx applies neither to a subrequest). It goes through the server's locations as an
//! internal request without the access phase. A `proxy_pass` location's exchange sends its
//! response to a [`Collect`] that keeps it in memory, so every proxy rule applies unchanged;
//! a file or `return` text is taken as is. A status other than 2xx, a body over
//! [`MAX_BODY`] or one that is no JWK set is a failure, described for the error log.

use std::os::unix::fs::FileExt;

use bytes::{Bytes, BytesMut};
use portcullis_http::{parse_request_head, RequestHead, Version};
use portcullis_jwt::KeySet;

use crate::proxy::{Collect, Finish, Plan, ReqBody};
use crate::request::{Body, Request};
use crate::static_files::CachedFile;

/// The largest key set response read; a provider's JWKS is a few kilobytes.
const MAX_BODY: usize = 1 << 20;
/// Header fields of the main request the subrequest does without.
const LEFT_OUT: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "expect",
    "connection",
    "upgrade",
    "range",
    "if-range",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
];
/// error_page redirects of the subrequest followed after a proxied failure, at most.
const MAX_ANSWERS: usize = 4;

/// Runs the key request for `uri` on behalf of `req`: the response body and the keys in it.
pub(super) async fn fetch(req: &Request<'_>, uri: &[u8]) -> Result<(Bytes, KeySet), String> {
    let head = sub_head(req, uri)?;
    let mut sub = req.subrequest(head);
    let mut resp = sub.process();
    let mut answers = 0;
    let (status, body) = loop {
        answers += 1;
        match std::mem::replace(&mut resp.body, Body::Empty) {
            Body::Empty => break (resp.status, Bytes::new()),
            Body::Bytes(b) => break (resp.status, b),
            Body::File { file, offset, len } => {
                break (resp.status, file_body(&file, offset, len)?)
            }
            Body::Parts(_) => return Err("a multipart response".to_owned()),
            Body::Proxy(plan) => match proxied(&sub, *plan).await? {
                Ok(answer) => break answer,
                // Nothing came from the upstream: its status goes through error_page, as
                // for any request.
                Err(code) if answers < MAX_ANSWERS => resp = sub.finalize_error(code),
                Err(code) => break (code, Bytes::new()),
            },
        }
    };
    if !(200..300).contains(&status) {
        return Err(format!("the response status is {status}"));
    }
    let keys = KeySet::parse(&body).map_err(|e| format!("invalid JWK set in the response: {e}"))?;
    Ok((body, keys))
}

/// The subrequest's head: `GET uri` with the main request's version and header fields.
fn sub_head(req: &Request<'_>, uri: &[u8]) -> Result<RequestHead, String> {
    let mut raw = BytesMut::with_capacity(uri.len() + req.head().raw().len() + 32);
    raw.extend_from_slice(b"GET ");
    raw.extend_from_slice(uri);
    raw.extend_from_slice(if req.head().version() == Version::Http11 {
        b" HTTP/1.1\r\n"
    } else {
        b" HTTP/1.0\r\n"
    });
    for (name, value) in req.head().headers() {
        if name.is_empty() || LEFT_OUT.iter().any(|l| name.eq_ignore_ascii_case(l)) {
            continue;
        }
        portcullis_http::write_header(&mut raw, name, value);
    }
    raw.extend_from_slice(b"\r\n");
    match parse_request_head(&mut raw, &req.server().head_limits) {
        Ok(Some(head)) => Ok(head),
        Ok(None) => Err("incomplete subrequest".to_owned()),
        Err(e) => Err(format!("invalid subrequest: {}", e.reason())),
    }
}

/// The bytes of a file response, read whole.
fn file_body(file: &CachedFile, offset: u64, len: u64) -> Result<Bytes, String> {
    let size = usize::try_from(len)
        .ok()
        .filter(|&n| n <= MAX_BODY)
        .ok_or_else(|| format!("the response body is longer than {MAX_BODY} bytes"))?;
    if let Some(contents) = &file.contents {
        let start = offset as usize;
        return Ok(contents.slice(start..start + size));
    }
    let mut buf = vec![0; size];
    file.file
        .read_exact_at(&mut buf, offset)
        .map_err(|e| format!("read() failed {}", crate::log::os_error(&e)))?;
    Ok(Bytes::from(buf))
}

/// Runs the exchange of a proxied subrequest and keeps its response: `Ok(Err(code))` when
/// nothing came from the upstream and `code` is the status to answer.
async fn proxied(sub: &Request<'_>, plan: Plan) -> Result<Result<(u16, Bytes), u16>, String> {
    let mut down = Collect::new(MAX_BODY);
    match crate::proxy::serve(&mut down, sub, plan, ReqBody::None).await {
        Finish::Status { code, .. } => Ok(Err(code)),
        Finish::Sent { .. } => {
            let status = down.status();
            if !(200..300).contains(&status) {
                return Ok(Ok((status, Bytes::new())));
            }
            match down.into_body() {
                Ok(body) => Ok(Ok((status, body))),
                Err(true) => Err(format!("the response body is longer than {MAX_BODY} bytes")),
                Err(false) => Err("the response body was cut short".to_owned()),
            }
        }
        // A subrequest has no client of its own to lose.
        Finish::ClientClosed { .. } => Ok(Err(crate::proxy::CLIENT_CLOSED)),
    }
}
