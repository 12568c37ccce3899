//! `ngx_http_charset_module`, as far as naming a charset goes: `charset name` adds
//! `; charset=name` to the `Content-Type` of a response (a file, a `return`, an error page,
//! a proxied one; not a 301 or 302) whose type, with no parameters, is one of
//! `charset_types` (by default `text/html`,
//! `text/xml`, `text/plain`, `text/vnd.wap.wml`, `application/javascript` and
//! `application/rss+xml`; `*` for all) and that names none yet; `charset off` stops it.
//! Recoding from `source_charset` to another charset is not implemented: a level that would
//! need it is refused, since the bytes sent would not be in the charset named.

use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};

use crate::module::{self, Load, Module, Slot, TypeList};
use crate::request::{Handlers, Request, Response};

pub(crate) struct CharsetModule;

pub(crate) static MODULE: CharsetModule = CharsetModule;

/// nginx's `charset_types` when none is given.
const DEFAULT_TYPES: [&str; 6] = [
    "text/html",
    "text/xml",
    "text/plain",
    "text/vnd.wap.wml",
    "application/javascript",
    "application/rss+xml",
];

#[derive(Clone)]
struct CharsetConf {
    /// `charset`; `None` for `off`, the default.
    charset: Option<Arc<str>>,
    /// `source_charset`, only checked.
    source: Option<String>,
    types: TypeList,
}

impl Default for CharsetConf {
    fn default() -> Self {
        CharsetConf {
            charset: None,
            source: None,
            types: TypeList::new(&DEFAULT_TYPES),
        }
    }
}

impl Module for CharsetModule {
    fn name(&self) -> &'static str {
        "http_charset_module"
    }

    fn defaults(&self) -> Slot {
        Arc::new(CharsetConf::default())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::edit::<CharsetConf>(conf);
        match d.name.as_str() {
            "charset" => {
                c.charset = match d.arg(0) {
                    "off" => None,
                    name => Some(Arc::from(name)),
                }
            }
            "source_charset" => c.source = Some(d.arg(0).to_string()),
            "charset_types" => c.types.add(d, cx.first),
            _ => {}
        }
        // A charset and a different source charset would need the body recoded: checked
        // where the second of them is written (a level starts with its parent's settings).
        if let (Some(charset), Some(source)) = (&c.charset, &c.source) {
            if !charset.eq_ignore_ascii_case(source) {
                return Err(ConfigError::at(
                    d,
                    format!(
                        "recoding from \"{source}\" to \"{charset}\" is not supported yet and cannot be ignored safely"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        module::get::<CharsetConf>(conf).charset.is_some()
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            header_filter: Some(header_filter),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

fn header_filter(_req: &Request<'_>, conf: &Slot, resp: &mut Response, _lm: Option<&[u8]>) {
    let c = module::get::<CharsetConf>(conf);
    let Some(charset) = &c.charset else {
        return;
    };
    // nginx names no charset on a redirect (old browsers took it for the next page's).
    if matches!(resp.status, 301 | 302) {
        return;
    }
    let Some(ty) = &resp.content_type else {
        return;
    };
    // A type with parameters is not one of `charset_types`, which nginx compares whole.
    if ty.contains(';') {
        return;
    }
    let bare = ty
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let listed = c.types.matches(bare.as_bytes());
    if listed {
        resp.content_type = Some(Arc::from(format!("{ty}; charset={charset}")));
    }
}
