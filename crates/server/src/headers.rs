//! `ngx_http_headers_module`: `add_header` and `expires`, as the header filter of the response
//! a location finishes with (a file, a `return`, a proxied response, an error page).
//!
//! `add_header name value [always]` adds a field to responses of 200, 201, 204, 206, 301, 302,
//! 303, 304, 307 and 308 (every status with `always`); an empty value adds nothing; `ETag` and
//! `Last-Modified` replace the response's own (an empty value removes it), as nginx's filter
//! sets them rather than adding a line. A level's first `add_header` replaces the inherited
//! list. `expires` (`expires.rs`) sets `Expires` and `Cache-Control` on the same statuses.
//!
//! `add_trailer name value [always]` ends responses of 200, 201, 206, 301, 302, 303, 307 and
//! 308 (every status with `always`) with a trailer, its value read once the body is whole
//! (an empty one is not sent): an HTTP/1.1 response then goes chunked, an HTTP/2 one ends
//! with a HEADERS frame.

use std::sync::Arc;
use std::time::SystemTime;

use portcullis_config::{ConfigError, Directive};

use crate::module::{self, Load, Module, Slot};
use crate::request::{Handlers, Request, Response, Trailer};
use crate::vars::Template;

mod expires;

/// The module.
pub(crate) struct HeadersModule;

pub(crate) static MODULE: HeadersModule = HeadersModule;

/// A level's settings.
#[derive(Clone, Default)]
struct HeadersConf {
    add_headers: Vec<AddHeader>,
    /// `expires`: `None` for `off`, the default.
    expires: Option<expires::Expires>,
    /// `add_trailer`, as written.
    add_trailers: Vec<AddHeader>,
    /// The trailers of a response of a status `add_trailer` applies to, and of another
    /// (those with `always`); those written with an empty value are left out.
    trailers_ok: Option<Arc<[Trailer]>>,
    trailers_always: Option<Arc<[Trailer]>>,
}

#[derive(Clone)]
struct AddHeader {
    name: String,
    value: Template,
    /// Also for error statuses, not only 200, 201, 204, 206, 301, 302, 303, 304, 307, 308.
    always: bool,
}

impl Module for HeadersModule {
    fn name(&self) -> &'static str {
        "http_headers_module"
    }

    fn defaults(&self) -> Slot {
        Arc::new(HeadersConf::default())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::edit::<HeadersConf>(conf);
        match d.name.as_str() {
            "add_header" => {
                if cx.first {
                    c.add_headers.clear();
                }
                let always = match d.args.get(2).map(|a| a.value.as_str()) {
                    None => false,
                    Some("always") => true,
                    Some(other) => {
                        return Err(ConfigError::at(d, format!("invalid parameter \"{other}\"")))
                    }
                };
                c.add_headers.push(AddHeader {
                    name: d.arg(0).to_string(),
                    value: Template::compile(d.arg(1), d, cx.names)?,
                    always,
                });
            }
            "expires" => c.expires = expires::compile(d, cx.names)?,
            "add_trailer" => {
                if cx.first {
                    c.add_trailers.clear();
                }
                let always = match d.args.get(2).map(|a| a.value.as_str()) {
                    None => false,
                    Some("always") => true,
                    Some(other) => {
                        return Err(ConfigError::at(d, format!("invalid parameter \"{other}\"")))
                    }
                };
                c.add_trailers.push(AddHeader {
                    name: d.arg(0).to_string(),
                    value: Template::compile(d.arg(1), d, cx.names)?,
                    always,
                });
                let list = |all: bool| -> Option<Arc<[Trailer]>> {
                    let t: Vec<Trailer> = c
                        .add_trailers
                        .iter()
                        .filter(|t| all || t.always)
                        .filter(|t| t.value.as_literal() != Some(""))
                        .map(|t| Trailer {
                            name: t.name.clone(),
                            value: t.value.clone(),
                        })
                        .collect();
                    (!t.is_empty()).then(|| t.into())
                };
                c.trailers_ok = list(true);
                c.trailers_always = list(false);
            }
            // `owns` hands over no other.
            _ => {}
        }
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        let c = module::get::<HeadersConf>(conf);
        c.expires.is_some() || !c.add_headers.is_empty() || !c.add_trailers.is_empty()
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            header_filter: Some(header_filter),
            replaced_fields: Some(replaced_fields),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// The statuses add_header (without `always`) and expires apply to.
fn ok_status(status: u16) -> bool {
    matches!(
        status,
        200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
    )
}

/// The statuses add_trailer (without `always`) applies to.
fn trailer_status(status: u16) -> bool {
    matches!(status, 200 | 201 | 206 | 301 | 302 | 303 | 307 | 308)
}

/// The fields add_header sets in place of the response's own instead of adding a line.
fn replaces(name: &str) -> bool {
    name.eq_ignore_ascii_case("ETag") || name.eq_ignore_ascii_case("Last-Modified")
}

/// The level's add_header directives that apply to a response of `status`.
fn applied(c: &HeadersConf, status: u16) -> impl Iterator<Item = &AddHeader> + '_ {
    let ok = ok_status(status);
    c.add_headers.iter().filter(move |h| ok || h.always)
}

fn header_filter(
    req: &Request<'_>,
    conf: &Slot,
    resp: &mut Response,
    upstream: Option<&portcullis_http::ResponseHead>,
) {
    let last_modified = upstream.and_then(|h| h.header("last-modified"));
    let c = module::get::<HeadersConf>(conf);
    let status = resp.filtered_status();
    if let Some(expires) = c.expires.as_ref().filter(|_| ok_status(status)) {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let own;
        let last_modified = match last_modified {
            Some(l) => Some(l),
            // Only `expires modified` reads it.
            None => {
                own = resp.header_value("Last-Modified");
                own.as_deref()
            }
        };
        let last_modified = last_modified
            .and_then(crate::files::parse_http_date)
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_secs()).ok());
        // The response so far is there for `$sent_http_*` (a map on the content type).
        let sent: &Response = resp;
        let eval = |t: &Template| req.eval_for(t, sent);
        if let Some((date, cache_control)) = expires::fields(expires, now, last_modified, &eval) {
            resp.remove_header("Expires");
            resp.remove_header("Cache-Control");
            resp.header("Expires", date.as_bytes());
            resp.header("Cache-Control", cache_control.as_bytes());
        }
    }
    let trailers = if trailer_status(status) {
        &c.trailers_ok
    } else {
        &c.trailers_always
    };
    if let Some(t) = trailers {
        req.expect_trailers(t.clone(), resp.status);
    }
    for h in applied(c, status) {
        let value = req.eval_for(&h.value, resp);
        if replaces(&h.name) {
            resp.remove_header(&h.name);
        }
        if !value.is_empty() {
            resp.header(&h.name, &value);
        }
    }
}

fn replaced_fields<'s>(conf: &'s Slot, status: u16, fields: &mut Vec<&'s str>) {
    let c = module::get::<HeadersConf>(conf);
    if c.expires.is_some() && ok_status(status) {
        fields.extend(["Expires", "Cache-Control"]);
    }
    fields.extend(
        applied(c, status)
            .filter(|h| replaces(&h.name))
            .map(|h| h.name.as_str()),
    );
}
