//! `ngx_http_stub_status_module`: `stub_status` makes a location (or a server's requests
//! that match no location) answer with the server's connection and request counts, in
//! nginx's text, to the byte, that exporters parse:
//!
//! ```text
//! Active connections: 2 \n
//! server accepts handled requests\n
//!  10 10 25 \n
//! Reading: 0 Writing: 1 Waiting: 1 \n
//! ```
//!
//! and the variables `$connections_active`, `$connections_reading`, `$connections_writing`
//! and `$connections_waiting`. The counts are the whole server's, every worker's, kept
//! across reloads (`stats.rs`). As nginx's, the handler belongs to the location that names
//! it, not to the locations inside it; an `if` block in it keeps it. Methods other than GET
//! and HEAD are answered 405.

use std::sync::Arc;

use bytes::Bytes;
use portcullis_http::Method;

use crate::module::{self, LocationHandler, Slot};
use crate::request::{Body, Handlers, Request, Response, Step};
use crate::stats::Totals;

pub(crate) static MODULE: LocationHandler = LocationHandler {
    name: "http_stub_status_module",
    variables: &VARIABLES,
    handlers: &HANDLERS,
};

static HANDLERS: Handlers = Handlers {
    content: Some(content),
    variable: Some(variable),
    ..Handlers::NONE
};

const VARIABLES: [&str; 4] = [
    "connections_active",
    "connections_reading",
    "connections_writing",
    "connections_waiting",
];

fn content(req: &mut Request<'_>, conf: &Slot) -> Option<Step> {
    if !*module::get::<bool>(conf) {
        return None;
    }
    if !matches!(req.head().method(), Method::Get | Method::Head) {
        return Some(Step::Status(405));
    }
    let text = render(&req.stats());
    let mut resp = Response::new(200);
    resp.content_type = Some(Arc::from("text/plain"));
    resp.content_length = Some(text.len() as u64);
    resp.body = Body::Bytes(Bytes::from(text));
    Some(Step::Done(resp))
}

/// nginx's text, with its spaces before each line's end.
fn render(t: &Totals) -> String {
    format!(
        "Active connections: {} \nserver accepts handled requests\n {} {} {} \n\
         Reading: {} Writing: {} Waiting: {} \n",
        t.active, t.accepted, t.handled, t.requests, t.reading, t.writing, t.waiting
    )
}

/// The counts a request's `$connections_*` read.
#[derive(Default)]
struct Snapshot(std::cell::Cell<Option<Totals>>);

fn variable(
    req: &Request<'_>,
    _conf: &Slot,
    var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&Response, u64)>,
) {
    // The counts once per request, however many of the variables a log line has.
    let snapshot = req.var_ctx::<Snapshot>();
    let t = snapshot.0.get().unwrap_or_else(|| {
        let t = req.stats();
        snapshot.0.set(Some(t));
        t
    });
    let n = match *module::get::<usize>(var) {
        0 => t.active,
        1 => t.reading,
        2 => t.writing,
        _ => t.waiting,
    };
    out.extend_from_slice(n.to_string().as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_nginx_s() {
        let t = Totals {
            accepted: 16630948,
            handled: 16630947,
            requests: 31070465,
            active: 291,
            reading: 6,
            writing: 179,
            waiting: 106,
            ..Totals::default()
        };
        assert_eq!(
            render(&t),
            "Active connections: 291 \nserver accepts handled requests\n \
             16630948 16630947 31070465 \nReading: 6 Writing: 179 Waiting: 106 \n"
        );
    }
}
