//! `ngx_http_mirror_module`: `mirror uri` sends a copy of each request that reaches the
//! location's content to `uri` as well, a background subrequest whose answer nobody sees;
//! `mirror_request_body` (on by default) sends the request's body with it.
//!
//! As in nginx the copies are made in the phase before the content, so a request that the
//! access phase refused or a `return` answered is not copied. nginx runs them beside the
//! request and finishes the request with them; here they run once the response went out,
//! before the connection reads its next request: the client waits for neither. With
//! `mirror_request_body` the body is read whole before the response, as nginx's mirror reads
//! it before the content, also where the request's own handler reads none (a static file)
//! or streams it (`proxy_request_buffering off`); a body that cannot be read
//! (`client_max_body_size`) is answered with its error, and then no copy is made.

use std::sync::Arc;

use portcullis_config::{value, ConfigError, Directive};

use crate::module::{self, Load, Module, Slot};
use crate::request::{Handlers, Request, Step};

pub(crate) struct MirrorModule;

pub(crate) static MODULE: MirrorModule = MirrorModule;

#[derive(Clone)]
struct Conf {
    /// The URIs each request is copied to, in order; none with `mirror off`.
    uris: Vec<Arc<str>>,
    body: bool,
}

impl Module for MirrorModule {
    fn name(&self) -> &'static str {
        "http_mirror_module"
    }

    fn defaults(&self) -> Slot {
        Arc::new(Conf {
            uris: Vec::new(),
            body: true,
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
            "mirror" => {
                // A level's own list replaces the inherited one.
                if cx.first {
                    c.uris.clear();
                }
                if d.arg(0) != "off" {
                    c.uris.push(Arc::from(d.arg(0)));
                }
            }
            _ => c.body = value::flag(d, 0)?,
        }
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        !module::get::<Conf>(conf).uris.is_empty()
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            content: Some(content),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// Before the content: the copies to send once the response is out. Answers nothing.
fn content(req: &mut Request<'_>, conf: &Slot) -> Option<Step> {
    let c = module::get::<Conf>(conf);
    if req.is_subrequest() {
        return None;
    }
    // As nginx's, each copy has the request's arguments.
    let args = req.args().map(<[u8]>::to_vec);
    for uri in &c.uris {
        let mut target = uri.as_bytes().to_vec();
        if let Some(a) = &args {
            target.push(b'?');
            target.extend_from_slice(a);
        }
        req.add_background(&target, c.body);
    }
    None
}
