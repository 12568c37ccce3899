//! `ngx_http_ssi_module`: with `ssi on`, the SSI commands in a response whose type is one of
//! `ssi_types` (`text/html` by default, `*` for all) are run on its way out: `include`
//! (`virtual` and `file`, with `set`, `stub` and `wait`), `echo` (`var`, `default`,
//! `encoding`), `config` (`errmsg`, `timefmt`), `set`, `if`/`elif`/`else`/`endif` (a
//! variable, `=`/`!=` a text or a `/regex/`) and `block`/`endblock`; `ssi_silent_errors`,
//! `ssi_value_length`, `ssi_last_modified`; the variables `$date_local` and `$date_gmt`.
//! `ssi_min_file_chunk` and `ssi_ignore_recycled_buffers` are about nginx's buffers and do
//! nothing here.
//!
//! As nginx's filter, it takes the length away (the response goes out chunked), with
//! `Accept-Ranges`, `Last-Modified` and `ETag` (kept, the tag weak, with
//! `ssi_last_modified on`); a range of such a file is not served. An included request is a
//! subrequest, whose own response goes through its location's SSI in turn, up to nginx's
//! depth of 51.
//!
//! It runs on files, `return` texts, error pages and proxied responses (held whole by the
//! proxy's downstream, `upstream/filtered.rs`) alike, after `gunzip`, `sub_filter` and
//! `charset` and before `gzip`, as in nginx. Unlike nginx, which streams, a body is run once
//! it is whole: one over 64 MB goes out as it came (with an error logged), and a response
//! whose includes bring in over 64 MB in all fails as nginx fails one whose `include ...
//! set` is over `subrequest_output_buffer_size`: no answer.

mod parse;
mod run;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};

use crate::encode::{Etag, HeadEdit, Outgoing};
use crate::module::{self, Load, Module, Slot, TypeList};
use crate::request::{Body, BodyFilter, Handlers, Request, Response};
use crate::vars::Names;
use crate::Level;

pub(crate) struct SsiModule;

pub(crate) static MODULE: SsiModule = SsiModule;

/// The most bytes of a body run: a larger one goes out as it is.
const MAX_BODY: usize = 64 * 1024 * 1024;

#[derive(Clone)]
pub(crate) struct Conf {
    enable: bool,
    silent_errors: bool,
    last_modified: bool,
    /// `ssi_value_length`: the longest parameter value.
    value_len: usize,
    types: TypeList,
}

/// The module's variables.
const VARIABLES: &[&str] = &["date_local", "date_gmt"];

impl Module for SsiModule {
    fn name(&self) -> &'static str {
        "http_ssi_module"
    }

    fn declare(
        &self,
        _http: &[Directive],
        names: &mut Names,
        me: usize,
    ) -> Result<(), ConfigError> {
        names.add_fixed(me, VARIABLES);
        Ok(())
    }

    fn defaults(&self) -> Slot {
        Arc::new(Conf {
            enable: false,
            silent_errors: false,
            last_modified: false,
            value_len: 255,
            types: TypeList::new(&["text/html"]),
        })
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::edit::<Conf>(conf);
        match d.name.as_str() {
            "ssi" => c.enable = d.arg(0) == "on",
            "ssi_silent_errors" => c.silent_errors = d.arg(0) == "on",
            "ssi_last_modified" => c.last_modified = d.arg(0) == "on",
            "ssi_value_length" => {
                let n = portcullis_config::value::size(d, 0)?;
                c.value_len = usize::try_from(n).unwrap_or(usize::MAX);
            }
            "ssi_min_file_chunk" => {
                portcullis_config::value::size(d, 0)?;
            }
            "ssi_types" => c.types.add(d, cx.first),
            // ssi_ignore_recycled_buffers
            _ => {}
        }
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        module::get::<Conf>(conf).enable
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            body: Some(BodyFilter {
                applies,
                edit,
                filter,
            }),
            variable: Some(variable),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

fn applies(_req: &Request<'_>, conf: &Slot, out: &Outgoing<'_>) -> bool {
    let c = module::get::<Conf>(conf);
    c.enable
        && out.content_length() != Some(0)
        && out.media_type().is_some_and(|t| c.types.matches(&t))
}

/// The length goes, with `Accept-Ranges`; `Last-Modified` and `ETag` go too, unless
/// `ssi_last_modified` keeps them (the tag weak).
fn edit(conf: &Slot) -> HeadEdit {
    let last_modified = module::get::<Conf>(conf).last_modified;
    HeadEdit {
        keep_length: false,
        content_encoding: None,
        accept_ranges: true,
        etag: if last_modified {
            Etag::Weak
        } else {
            Etag::Remove
        },
        last_modified: !last_modified,
    }
}

fn filter<'x>(
    req: &'x Request<'_>,
    conf: Slot,
    resp: &'x mut Response,
) -> Pin<Box<dyn Future<Output = ()> + 'x>> {
    Box::pin(async move {
        if !applies(req, &conf, &Outgoing::Own(resp)) {
            return;
        }
        let c = module::get::<Conf>(&conf);
        let main = !req.is_subrequest();
        let body = if req.is_head() || matches!(resp.status, 204 | 304) {
            None
        } else {
            match whole(std::mem::replace(&mut resp.body, Body::Empty)) {
                Ok(b) => Some(b),
                Err((body, why)) => {
                    // Not run: it goes out as it is, length and all.
                    req.log(Level::Error, &format!("SSI not run on a response: {why}"));
                    resp.body = body;
                    return;
                }
            }
        };
        if main {
            crate::encode::edit_head(resp, &edit(&conf));
        }
        let Some(body) = body else {
            return;
        };
        let Ok(out) = run::run(req, c, &body, resp.content_type.as_ref()).await else {
            // As nginx, which ends such a response without an answer.
            *resp = Response::none();
            return;
        };
        let out = bytes::Bytes::from(out);
        resp.body = if main {
            Body::Stream(Box::new(crate::encode::Once(Some(out))))
        } else {
            Body::Bytes(out)
        };
    })
}

/// A body in memory, up to [`MAX_BODY`] bytes; too long, or one not read here, is given
/// back with why.
fn whole(body: Body) -> Result<bytes::Bytes, (Body, String)> {
    match body {
        Body::Empty => Ok(bytes::Bytes::new()),
        Body::Bytes(b) if b.len() <= MAX_BODY => Ok(b),
        Body::File { file, offset, len } => {
            match crate::subrequest::file_body(&file, offset, len, MAX_BODY) {
                Ok(b) => Ok(b),
                Err(why) => Err((Body::File { file, offset, len }, why)),
            }
        }
        // Recoded before (gunzip, sub_filter, charset): made whole here.
        Body::Stream(mut source) => {
            let mut out = bytes::BytesMut::new();
            loop {
                match source.next(&mut out) {
                    Ok(_) if out.len() > MAX_BODY => {
                        return Err((Body::Empty, format!("longer than {MAX_BODY} bytes")));
                    }
                    Ok(true) => {}
                    Ok(false) => return Ok(out.freeze()),
                    Err(e) => return Err((Body::Empty, e.to_string())),
                }
            }
        }
        other => Err((other, format!("longer than {MAX_BODY} bytes, or in parts"))),
    }
}

/// `$date_local` and `$date_gmt` outside the SSI commands: the time by nginx's default
/// `timefmt`.
fn variable(
    _req: &Request<'_>,
    _conf: &Slot,
    var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&Response, u64)>,
) {
    let gmt = *module::get::<usize>(var) == 1;
    out.extend_from_slice(&date(run::TIMEFMT, gmt).unwrap_or_default());
}

/// The time now by a `strftime` format (`%s` alone: seconds since the epoch), local or
/// UTC; `None` when the format makes nothing, which nginx takes for an error.
fn date(format: &[u8], gmt: bool) -> Option<Vec<u8>> {
    // SAFETY: time(NULL) only reads the clock.
    let now = unsafe { libc::time(std::ptr::null_mut()) };
    if format == b"%s" {
        return Some(now.to_string().into_bytes());
    }
    let format = std::ffi::CString::new(format).ok()?;
    // SAFETY: `tm` is plain data that gmtime_r/localtime_r fill from a valid time_t;
    // strftime writes at most `buf.len()` bytes into `buf` and returns how many.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        let filled = if gmt {
            libc::gmtime_r(&now, &mut tm)
        } else {
            libc::localtime_r(&now, &mut tm)
        };
        if filled.is_null() {
            return None;
        }
        let mut buf = vec![0u8; 2048];
        let n = libc::strftime(buf.as_mut_ptr().cast(), buf.len(), format.as_ptr(), &tm);
        buf.truncate(n);
        (n > 0).then_some(buf)
    }
}
