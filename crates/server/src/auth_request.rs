//! `ngx_http_auth_request_module`: `auth_request` and `auth_request_set`, in the access
//! phase. A level with `auth_request uri` asks the server's own location for `uri` (a
//! subrequest, usually proxied to an authentication service; see [`crate::subrequest`])
//! whether the request may go on, as nginx does:
//!
//! - a 2xx answer lets it through;
//! - a 401 refuses it with 401 and the answer's `WWW-Authenticate`, a 403 with 403 (both of
//!   which `satisfy any` lets another access handler overrule);
//! - any other answer, or a subrequest that cannot run, is a 500, logged as
//!   `auth request unexpected status`.
//!
//! Only the subrequest's head counts: its body is read and dropped. `auth_request_set $name
//! value` sets a variable of the request once the subrequest is done, with `value` read in
//! the subrequest (its `$upstream_http_*`, `$upstream_status`, ...). A level's first
//! `auth_request_set` replaces the list it inherits.

use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};

use crate::module::{self, Load, Module, Slot};
use crate::request::{Access, Handlers, Request, Suspension};
use crate::subrequest::{self, Keep};
use crate::vars::{compile_set, variable_name, Names, SetVar};
use crate::Level;

pub(crate) struct AuthRequestModule;

pub(crate) static MODULE: AuthRequestModule = AuthRequestModule;

/// A level's settings, inherited by the levels inside it unless they set their own.
#[derive(Clone, Default)]
struct Conf {
    /// `auth_request`: the URI to ask, `None` for none or `off`.
    uri: Option<Arc<[u8]>>,
    /// `auth_request_set`, in the order written.
    sets: Arc<Vec<SetVar>>,
}

impl Module for AuthRequestModule {
    fn name(&self) -> &'static str {
        "http_auth_request_module"
    }

    /// `auth_request_set` targets are variables of the request, as `set`'s are; one that no
    /// `set` names reads as empty without a warning while unset, as in nginx.
    fn declare(
        &self,
        http: &[Directive],
        names: &mut Names,
        _me: usize,
    ) -> Result<(), ConfigError> {
        fn collect(directives: &[Directive], names: &mut Names) {
            for d in directives {
                if d.name == "auth_request_set" {
                    let name = variable_name(d.arg(0));
                    if let Some(name) = name.filter(|n| names.set_slot(n).is_none()) {
                        names.quiet.push(name.to_owned());
                        names.set.push(name.to_owned());
                    }
                }
                collect(d.children(), names);
            }
        }
        collect(http, names);
        Ok(())
    }

    fn defaults(&self) -> Slot {
        Arc::new(Conf::default())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::edit::<Conf>(conf);
        if d.name == "auth_request" {
            c.uri = Some(d.arg(0))
                .filter(|&uri| uri != "off")
                .map(|uri| Arc::from(uri.as_bytes()));
            return Ok(());
        }
        let set = compile_set(d, cx.names)?;
        if cx.first {
            c.sets = Arc::new(Vec::new());
        }
        Arc::make_mut(&mut c.sets).push(set);
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        module::get::<Conf>(conf).uri.is_some()
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            access: Some(access),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// What a request keeps of the module: the subrequests' outcomes, each for the URI it asked
/// and the internal redirect the request was at (the phases run again from the start after
/// every wait, and a location reached by another redirect asks again, as in nginx).
#[derive(Default)]
struct AuthCtx {
    done: Vec<Done>,
}

struct Done {
    redirects: u32,
    uri: Arc<[u8]>,
    /// The subrequest's status; `None` when it could not run (a 500, logged already).
    status: Option<u16>,
    challenge: Option<Vec<u8>>,
    /// The values of the level's `auth_request_set`s: slot and value.
    values: Vec<(usize, Vec<u8>)>,
}

fn access(req: &mut Request<'_>, conf: &Slot) -> Access {
    let c = module::get::<Conf>(conf);
    let Some(uri) = &c.uri else {
        return Access::Declined;
    };
    let redirects = req.redirects();
    let done = req
        .ctx::<AuthCtx>()
        .and_then(|ctx| {
            ctx.done
                .iter()
                .find(|d| d.redirects == redirects && d.uri == *uri)
        })
        .map(|d| (d.status, d.challenge.clone(), d.values.clone()));
    let Some((status, challenge, values)) = done else {
        return Access::Wait(Box::new(Ask {
            redirects,
            uri: uri.clone(),
            sets: c.sets.clone(),
        }));
    };
    for (slot, value) in values {
        req.set_var(slot, value);
    }
    match status {
        Some(200..=299) => Access::Allowed,
        Some(status @ (401 | 403)) => Access::Denied { status, challenge },
        // A subrequest that closes (`return 444`, a client gone) ends the main request
        // with it, as nginx terminates it: no answer, and no error page.
        Some(status @ (444 | 499)) => Access::Denied {
            status,
            challenge: None,
        },
        None => Access::Denied {
            status: 500,
            challenge: None,
        },
        Some(status) => {
            req.log(
                Level::Error,
                &format!("auth request unexpected status: {status}"),
            );
            Access::Denied {
                status: 500,
                challenge: None,
            }
        }
    }
}

/// A subrequest to run before the phases run again.
struct Ask {
    redirects: u32,
    uri: Arc<[u8]>,
    sets: Arc<Vec<SetVar>>,
}

impl Suspension for Ask {
    fn resume<'r>(
        self: Box<Self>,
        req: &'r mut Request<'_>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'r>> {
        Box::pin(async move {
            let done = match subrequest::run(req, &self.uri, Keep::Head).await {
                Ok((sub, answer)) => Done {
                    redirects: self.redirects,
                    status: Some(answer.status),
                    challenge: (answer.status == 401).then_some(answer.challenge).flatten(),
                    values: self
                        .sets
                        .iter()
                        .map(|s| (s.slot, sub.eval(&s.value)))
                        .collect(),
                    uri: self.uri,
                },
                Err(why) => {
                    req.log(
                        Level::Error,
                        &format!(
                            "auth request \"{}\" failed: {why}",
                            String::from_utf8_lossy(&self.uri)
                        ),
                    );
                    Done {
                        redirects: self.redirects,
                        uri: self.uri,
                        status: None,
                        challenge: None,
                        values: Vec::new(),
                    }
                }
            };
            req.ctx_mut::<AuthCtx>().done.push(done);
        })
    }
}
