//! Subrequests, as nginx's `ngx_http_subrequest` makes them for the modules that ask another
//! location before answering (`auth_request`, `auth_jwt_key_request`).
//!
//! A subrequest is a GET of a URI with the main request's header fields and variables, as
//! nginx's subrequests share them, less the fields about the main request's body,
//! conditions and ranges: nginx's filters apply neither conditions nor ranges to a
//! subrequest's own responses (it does pass the fields on to a proxied upstream, which this
//! does not). It goes through the server's locations as an
//! internal request without the access phase. A `proxy_pass` location's exchange sends its
//! response to a [`Collect`] that keeps it in memory, so every proxy rule applies unchanged;
//! a file or `return` text is taken as is. An upstream that gives nothing goes through the
//! subrequest's `error_page`s, as for any request.

use std::os::unix::fs::FileExt;

use bytes::{Bytes, BytesMut};
use portcullis_http::{parse_request_head, RequestHead, Version};

use crate::files::CachedFile;
use crate::request::{Body, Request};
use crate::upstream::{Collect, Finish, Plan, ReqBody};

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
/// The fields of the main request a copy of it (`mirror`) does without: those about its
/// connection and its body's framing, which the copy has its own of. nginx's copy shares the
/// others, conditions and ranges too.
const LEFT_OUT_OF_COPIES: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "expect",
    "connection",
    "upgrade",
];
/// error_page redirects of the subrequest followed after a proxied failure, at most.
const MAX_ANSWERS: usize = 4;

/// What a subrequest answered.
pub(crate) struct Answer {
    pub status: u16,
    /// The `WWW-Authenticate` field of the response, if it has one.
    pub challenge: Option<Vec<u8>>,
    /// The body, when it was asked for: whole and within the bound, or why not.
    pub body: Result<Bytes, String>,
    /// The response came from an upstream (not a file, `return` or an error page of the
    /// server's own).
    pub proxied: bool,
}

/// What to keep of a subrequest's body.
#[derive(Clone, Copy)]
pub(crate) enum Keep {
    /// Nothing: only the head counts (nginx's `header_only` subrequests).
    Head,
    /// The body, up to this many bytes.
    Body(usize),
}

/// Runs a subrequest of `req` for `uri` to its end. Returns the subrequest, whose variables
/// (`$upstream_http_*`, `$upstream_status`, ...) then read what it did, and its answer; `Err`
/// when the subrequest cannot be made.
pub(crate) async fn run<'a>(
    req: &Request<'a>,
    uri: &[u8],
    keep: Keep,
) -> Result<(Request<'a>, Answer), String> {
    run_as(req, uri, keep, "GET", None, false).await
}

/// Runs the background subrequests of `req` (`mirror`'s copies) to their end, once its
/// response is out; their answers are for nobody.
pub(crate) async fn run_background(req: &mut Request<'_>) {
    let background = req.take_background();
    if background.is_empty() {
        return;
    }
    let method = req.head().method_str().to_owned();
    for (uri, body) in background {
        // Boxed: most requests have none, and every request's future would otherwise make
        // room for a whole subrequest.
        if let Err(e) = Box::pin(run_as(req, &uri, Keep::Head, &method, body, true)).await {
            req.log(crate::Level::Error, &e);
        }
    }
}

/// [`run`] with the method `method` and the body `body`; a `copy` of the request (`mirror`)
/// keeps its conditions and ranges, which other subrequests leave out.
pub(crate) async fn run_as<'a>(
    req: &Request<'a>,
    uri: &[u8],
    keep: Keep,
    method: &str,
    body: Option<Bytes>,
    copy: bool,
) -> Result<(Request<'a>, Answer), String> {
    // A copy of the request keeps its conditions.
    let left_out = if copy { LEFT_OUT_OF_COPIES } else { LEFT_OUT };
    let head = sub_head(req, uri, (method, left_out), body.as_ref().map(Bytes::len))?;
    let mut sub = req.subrequest(head);
    // Run, not processed once: the subrequest's own phases may wait (a delay of its limits).
    let mut resp = sub.run().await;
    if !matches!(keep, Keep::Head) {
        sub.body_filters(&mut resp).await;
    }
    let mut answers = 0;
    let answer = loop {
        answers += 1;
        let status = resp.status;
        let challenge = resp.header_value("www-authenticate");
        let body = match std::mem::replace(&mut resp.body, Body::Empty) {
            Body::Empty => Ok(Bytes::new()),
            Body::Bytes(b) => Ok(b),
            Body::File { file, offset, len } => match keep {
                Keep::Head => Ok(Bytes::new()),
                Keep::Body(max) => file_body(&file, offset, len, max),
            },
            Body::Parts(_) => Err("a multipart response".to_owned()),
            // Made as it goes out (a listing): made whole here.
            Body::Stream(mut source) => match keep {
                Keep::Head => Ok(Bytes::new()),
                Keep::Body(max) => {
                    let mut out = BytesMut::new();
                    loop {
                        match source.next(&mut out) {
                            Ok(_) if out.len() > max => break Err(too_long(max)),
                            Ok(true) => {}
                            Ok(false) => break Ok(out.freeze()),
                            Err(e) => break Err(e.to_string()),
                        }
                    }
                }
            },
            // An API write asked of a subrequest: made of the body it was given.
            Body::MadeOfRequest(make) => {
                resp = make(body.clone().unwrap_or_default());
                continue;
            }
            Body::Proxy(plan) => match proxied(&mut sub, plan, keep, body.clone()).await {
                Ok(answer) => break answer,
                // Nothing came from the upstream: its status goes through error_page, or its
                // X-Accel-Redirect to another location.
                Err(Then::Status(code)) if answers < MAX_ANSWERS => {
                    resp = sub.finalize_error(code);
                    continue;
                }
                Err(Then::Redirect(uri, fields)) if answers < MAX_ANSWERS => {
                    resp = sub.accel_redirect(uri, fields);
                    continue;
                }
                Err(Then::Status(code)) => break no_body(code),
                Err(Then::Redirect(..)) => break no_body(500),
            },
        };
        break Answer {
            status,
            challenge,
            body,
            proxied: false,
        };
    };
    req.keep_subrequest_attempts(&sub);
    Ok((sub, answer))
}

fn no_body(status: u16) -> Answer {
    Answer {
        status,
        challenge: None,
        body: Ok(Bytes::new()),
        proxied: true,
    }
}

/// The subrequest's head: `method uri` with the main request's version and header fields,
/// and the length of a body of `body` bytes.
fn sub_head(
    req: &Request<'_>,
    uri: &[u8],
    (method, left_out): (&str, &[&str]),
    body: Option<usize>,
) -> Result<RequestHead, String> {
    let mut raw = BytesMut::with_capacity(uri.len() + req.head().raw().len() + 32);
    raw.extend_from_slice(method.as_bytes());
    raw.extend_from_slice(b" ");
    raw.extend_from_slice(uri);
    raw.extend_from_slice(if req.head().version() == Version::Http11 {
        b" HTTP/1.1\r\n"
    } else {
        b" HTTP/1.0\r\n"
    });
    for (name, value) in req.head().headers() {
        if name.is_empty() || left_out.iter().any(|l| name.eq_ignore_ascii_case(l)) {
            continue;
        }
        portcullis_http::write_header(&mut raw, name, value);
    }
    if let Some(n) = body {
        portcullis_http::write_header(&mut raw, "Content-Length", n.to_string().as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    match parse_request_head(&mut raw, &req.server().head_limits) {
        Ok(Some(head)) => Ok(head),
        Ok(None) => Err("incomplete subrequest".to_owned()),
        Err(e) => Err(format!("invalid subrequest: {}", e.reason())),
    }
}

fn too_long(max: usize) -> String {
    format!("the response body is longer than {max} bytes")
}

/// The bytes of a file response, read whole.
pub(crate) fn file_body(
    file: &CachedFile,
    offset: u64,
    len: u64,
    max: usize,
) -> Result<Bytes, String> {
    let size = usize::try_from(len)
        .ok()
        .filter(|&n| n <= max)
        .ok_or_else(|| too_long(max))?;
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

/// What a proxied subrequest goes on with when its upstream gave no response of its own.
enum Then {
    /// Answer with this status.
    Status(u16),
    /// The upstream's `X-Accel-Redirect`: this URI, with these of its fields.
    Redirect(Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>),
}

/// Runs the exchange of a proxied subrequest and keeps its response, or says what comes
/// next when the upstream gave none.
async fn proxied(
    sub: &mut Request<'_>,
    plan: Box<Plan>,
    keep: Keep,
    body: Option<Bytes>,
) -> Result<Answer, Then> {
    let mut down = match keep {
        Keep::Head => Collect::head_only(),
        Keep::Body(max) => Collect::new(max),
    };
    let body = match body {
        Some(b) if plan.pass_body => ReqBody::Whole(b),
        _ => ReqBody::None,
    };
    match crate::upstream::serve(&mut down, sub, plan, body).await {
        Finish::Status { code, attempts, .. } => {
            sub.set_upstream_attempts(attempts);
            Err(Then::Status(code))
        }
        Finish::Redirect {
            uri,
            fields,
            attempts,
        } => {
            sub.set_upstream_attempts(attempts);
            Err(Then::Redirect(uri, fields))
        }
        Finish::Sent { attempts, .. } => {
            sub.set_upstream_attempts(attempts);
            let status = down.status();
            let challenge = down.challenge().map(<[u8]>::to_vec);
            let body = match (down.into_body(), keep) {
                (Ok(body), _) => Ok(body),
                (Err(true), Keep::Body(max)) => Err(too_long(max)),
                _ => Err("the response body was cut short".to_owned()),
            };
            Ok(Answer {
                status,
                challenge,
                body,
                proxied: true,
            })
        }
        // A subrequest has no client of its own to lose.
        Finish::ClientClosed { attempts } => {
            sub.set_upstream_attempts(attempts);
            Err(Then::Status(crate::upstream::CLIENT_CLOSED))
        }
    }
}
