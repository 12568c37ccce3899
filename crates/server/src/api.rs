//! Live operations, built in: NGINX Plus's API module, read only, and what people wire up
//! beside nginx to watch it: Prometheus metrics and a live dashboard.
//!
//! - `status_zone name` (Plus's) counts a server's requests (in a server block) or a
//!   location's (in a location) under `name`; every peer of every `upstream` block is
//!   counted too.
//! - `api [write=on]` (Plus's) makes a location answer the NGINX Plus REST API, version 9,
//!   with these counts and the `stub_status` ones (`api/json.rs`), and the servers of the
//!   groups in a `zone`, which `write=on` lets it change without a reload
//!   (`api/servers.rs`: a `POST` or `PATCH` is answered once its body is read).
//! - `prometheus_metrics` makes a location answer a scrape, under the names and labels of
//!   the nginx Prometheus exporter, with latency histograms of our own (`api/prometheus.rs`).
//! - `dashboard [api-uri]` makes a location answer with one self-contained HTML page that
//!   reads the API (at `/api` unless named) and shows it live (`api/dashboard.html`).
//!
//! Counting starts when the configuration names any of these; otherwise the module does
//! nothing on the request path. Each worker counts in counters of its own, and a read adds
//! up every worker's (`api/counters.rs`). The counts belong to one load of the
//! configuration: a reload starts them again from zero, which Prometheus reads as a counter
//! reset.

mod counters;
mod json;
mod prometheus;
mod servers;

use std::any::Any;
use std::cell::RefCell;
use std::sync::{Arc, Weak};

use crate::upstream::Group;
use bytes::Bytes;
use portcullis_config::{ConfigError, Directive};
use portcullis_http::Method;

use crate::module::{self, Load, Module, Opened, Slot};
use crate::request::{Body, Handlers, Logged, Request, Response, Step};
use crate::vars::Var;
use counters::{Layout, Slab};

pub(crate) struct Api;

pub(crate) static MODULE: Api = Api;

/// The page `dashboard` answers with.
const DASHBOARD: &str = include_str!("api/dashboard.html");

/// What a location answers with.
#[derive(Clone)]
enum Serve {
    /// `api`: the API, at the URI past the location's name; `write=on` lets it change
    /// upstream groups.
    Api {
        prefix: String,
        write: bool,
    },
    Prometheus,
    /// `dashboard`: the page, reading the API at this URI.
    Dashboard {
        api: String,
    },
}

/// What a level's settings say.
#[derive(Clone, Default)]
struct Conf {
    /// The configuration's counters, when it counts at all.
    layout: Option<Arc<Layout>>,
    server_zone: Option<usize>,
    location_zone: Option<usize>,
    /// The location answers itself (not inherited by the locations inside).
    serve: Option<Serve>,
}

/// What one load of the configuration keeps.
struct State {
    layout: Arc<Layout>,
    /// The configuration names one of the module's directives.
    enabled: bool,
}

/// A worker's counters, for each configuration its requests run with (a reload's requests
/// in flight finish with the old one).
type WorkerSlabs = RefCell<Vec<(Weak<Layout>, Arc<Slab>)>>;

const DIRECTIVES: [&str; 4] = ["status_zone", "api", "prometheus_metrics", "dashboard"];

/// Whether `directives` (and the blocks in them) name one of the module's directives.
fn names_any(directives: &[Directive]) -> bool {
    directives
        .iter()
        .any(|d| DIRECTIVES.contains(&d.name.as_str()) || names_any(d.children()))
}

impl Module for Api {
    fn name(&self) -> &'static str {
        "http_api_module"
    }

    fn load(&self) -> Box<dyn Any + Send + Sync> {
        Box::new(State {
            layout: Arc::default(),
            enabled: false,
        })
    }

    fn defaults(&self) -> Slot {
        Arc::new(Conf::default())
    }

    /// Whether the configuration counts, and the groups it counts the peers of.
    fn begin_http(&self, http: &[Directive], cx: &mut Load<'_>) -> Result<(), ConfigError> {
        let state = cx
            .state
            .downcast_mut::<State>()
            .expect("the module's state");
        state.enabled = names_any(http);
        if state.enabled {
            let mut groups: Vec<(String, Group)> = cx
                .upstreams
                .iter()
                .map(|(name, g)| (name.clone(), g.clone()))
                .collect();
            groups.sort_by(|a, b| a.0.cmp(&b.0));
            state.layout.set_groups(groups);
        }
        Ok(())
    }

    fn finish_http(
        &self,
        conf: &mut Slot,
        _http: &[Directive],
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let state = cx
            .state
            .downcast_ref::<State>()
            .expect("the module's state");
        if state.enabled {
            module::edit::<Conf>(conf).layout = Some(state.layout.clone());
        }
        Ok(())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let state = cx
            .state
            .downcast_ref::<State>()
            .expect("the module's state");
        let c = module::edit::<Conf>(conf);
        let location = cx.location.map(|p| p.name.clone());
        match d.name.as_str() {
            "status_zone" => {
                // `off`: the locations inside count in no zone of their own.
                let zone = Some(d.arg(0))
                    .filter(|name| *name != "off")
                    .map(|name| state.layout.zone(name, location.is_some()));
                if location.is_some() {
                    c.location_zone = zone;
                } else {
                    c.server_zone = zone;
                }
            }
            "api" => {
                let write = match d.args.first().map(|a| a.value.as_str()) {
                    None | Some("write=off") => false,
                    Some("write=on") => true,
                    Some(other) => {
                        return Err(ConfigError::at(d, format!("invalid parameter \"{other}\"")))
                    }
                };
                c.serve = Some(Serve::Api {
                    prefix: location.unwrap_or_default(),
                    write,
                });
            }
            "dashboard" => {
                let api = d.args.first().map_or("/api", |a| a.value.as_str());
                c.serve = Some(Serve::Dashboard {
                    api: api.trim_end_matches('/').to_owned(),
                });
            }
            _ => c.serve = Some(Serve::Prometheus),
        }
        Ok(())
    }

    /// `api`, `prometheus_metrics` and `dashboard` belong to the location that names them.
    fn enter_location(&self, conf: &mut Slot) {
        if module::get::<Conf>(conf).serve.is_some() {
            module::edit::<Conf>(conf).serve = None;
        }
    }

    fn is_active(&self, conf: &Slot) -> bool {
        module::get::<Conf>(conf).layout.is_some()
    }

    fn worker(&self, _loaded: &(dyn Any + Send + Sync), _opened: &Opened) -> Box<dyn Any> {
        Box::new(WorkerSlabs::default())
    }

    fn handlers(&self) -> &'static (dyn Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            content: Some(content),
            log: Some(log),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// Runs `f` on the worker's counters for `layout`, made on its first request, with room
/// for the peers `l`'s attempts name.
fn with_slab(state: &dyn Any, layout: &Arc<Layout>, l: &Logged<'_, '_>, f: impl FnOnce(&Slab)) {
    let slabs: &WorkerSlabs = state.downcast_ref().expect("the module's worker state");
    let mut slabs = slabs.borrow_mut();
    let me = Arc::as_ptr(layout);
    if let Some((_, s)) = slabs.iter_mut().find(|(l, _)| l.as_ptr() == me) {
        // A peer the API added since: a larger copy takes the place of the slab.
        if let Some(grown) = layout.room_for(s, l) {
            *s = grown;
        }
        return f(s);
    }
    // Configurations no request runs with any more are let go.
    slabs.retain(|(l, _)| l.strong_count() > 0);
    let s = layout.new_slab();
    let s = layout.room_for(&s, l).unwrap_or(s);
    f(&s);
    slabs.push((Arc::downgrade(layout), s));
}

/// The log phase: the request in its zones, and its attempts in their peers.
fn log(
    conf: &Slot,
    state: &dyn Any,
    logged: Option<&Logged<'_, '_>>,
    _lookup: &mut dyn FnMut(&Var, &mut Vec<u8>),
    _has: &dyn Fn(&Var) -> bool,
) {
    let c = module::get::<Conf>(conf);
    let (Some(l), Some(layout)) = (logged, &c.layout) else {
        return;
    };
    let zones = [c.server_zone, c.location_zone];
    with_slab(state, layout, l, |slab| counters::record(slab, zones, l));
}

/// The content phase of an `api`, `prometheus_metrics` or `dashboard` location.
fn content(req: &mut Request<'_>, conf: &Slot) -> Option<Step> {
    let c = module::get::<Conf>(conf);
    let serve = c.serve.as_ref()?;
    // As the request runs now: an error page or an `X-Accel-Redirect` to the API is a GET.
    let method = *req.method();
    let uri = String::from_utf8_lossy(req.uri()).into_owned();
    if let (Serve::Api { prefix, write }, false) =
        (serve, matches!(method, Method::Get | Method::Head))
    {
        let path = uri.strip_prefix(prefix.as_str()).unwrap_or(&uri);
        return Some(Step::Done(change(method, c.layout.as_ref(), *write, path)));
    }
    if let (Serve::Api { prefix, .. }, Some(layout)) = (serve, &c.layout) {
        let path = uri.strip_prefix(prefix.as_str()).unwrap_or(&uri);
        if let Some((group, ask)) = servers::target(path) {
            return Some(Step::Done(json_response(servers::read(
                layout, &group, &ask,
            ))));
        }
    }
    let snapshot = c.layout.as_ref().map(|l| l.snapshot());
    let (status, content_type, body) = match serve {
        Serve::Api { prefix, .. } => {
            let path = uri.strip_prefix(prefix.as_str()).unwrap_or(&uri);
            let server = json::Server {
                totals: req.stats(),
                workers: req.worker_stats(),
                snapshot: snapshot.as_ref(),
                address: req.local_addr().ip().to_string(),
            };
            let a = json::answer(path, &server);
            (a.status, "application/json", a.body)
        }
        _ if !matches!(method, Method::Get | Method::Head) => return Some(Step::Status(405)),
        Serve::Prometheus => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            prometheus::render(&req.stats(), snapshot.as_ref()),
        ),
        Serve::Dashboard { api } => {
            // The URI as a JavaScript string that cannot end the script.
            let literal = serde_json::to_string(api)
                .unwrap_or_else(|_| "\"\"".to_owned())
                .replace("</", "<\\/");
            (
                200,
                "text/html; charset=utf-8",
                DASHBOARD.replace("\"{{API}}\"", &literal),
            )
        }
    };
    Some(Step::Done(response(status, content_type, body)))
}

fn response(status: u16, content_type: &str, body: String) -> Response {
    let mut resp = Response::new(status);
    resp.content_type = Some(Arc::from(content_type));
    resp.content_length = Some(body.len() as u64);
    resp.body = Body::Bytes(Bytes::from(body));
    resp
}

fn json_response(a: json::Answer) -> Response {
    response(a.status, "application/json", a.body)
}

/// A `POST`, `PATCH` or `DELETE` of the API: refused unless `write=on`; one that sends
/// JSON is answered once the request's body is read.
fn change(method: Method, layout: Option<&Arc<Layout>>, write: bool, path: &str) -> Response {
    let (Some(layout), true) = (layout, write) else {
        return json_response(json::error(405, "write is disabled", "MethodDisabled"));
    };
    let Some((group, ask)) = servers::target(path) else {
        return json_response(json::error(
            405,
            "method not supported",
            "MethodNotSupported",
        ));
    };
    if method == Method::Delete {
        return json_response(servers::write(layout, method, &group, &ask, b""));
    }
    let layout = layout.clone();
    let mut resp = Response::new(200);
    resp.body = Body::MadeOfRequest(Box::new(move |body: Bytes| {
        json_response(servers::write(&layout, method, &group, &ask, &body))
    }));
    resp
}
