//! nginx's `ngx_http_proxy_module`: `proxy_pass` and the `proxy_*` directives.
//!
//! `proxy_pass` makes a location's (or its `if` block's) content an upstream's: a group of
//! `upstream` servers, an address, `unix:/path`, or a URL of variables resolved per request
//! (by `resolver` for a name). It is not inherited by the locations inside, and a location
//! whose name ends with `/` redirects its name without the slash to it (nginx's
//! `auto_redirect`). The `proxy_*` settings (headers set and hidden, timeouts,
//! `proxy_next_upstream`, buffering, `proxy_redirect`, cookies, TLS to the upstream, the
//! cache) are inherited http → server → location as nginx merges them; `proxy_cache_path`
//! zones are read before the http level's directives, so a `proxy_cache` may name one
//! defined below it. In the content phase the module builds the [`Plan`] (the group, the
//! request head with every variable evaluated); the exchange that runs it, and the head
//! rules every upstream protocol shares, are the upstream machinery's (`upstream/`).
//! Its variables: `$proxy_host`, `$proxy_port`, `$proxy_add_x_forwarded_for`.

use std::any::Any;
use std::sync::Arc;

use bytes::BufMut;
use portcullis_config::{ConfigError, Directive};

use crate::module::{self, Finish, Load, Module, Slot};
use crate::request::{Body, Handlers, Request, Response, Step};
use crate::upstream::cache::Caches;
use crate::upstream::{Plan, ProxyPass, ProxySettings};
use crate::vars::Names;

pub(crate) struct Proxy;

pub(crate) static MODULE: Proxy = Proxy;

/// The module's variables, by their place.
const VARIABLES: &[&str] = &["proxy_host", "proxy_port", "proxy_add_x_forwarded_for"];

#[derive(Clone, Default)]
struct Conf {
    /// The location's `proxy_pass` (not inherited by the locations inside).
    pass: Option<Arc<ProxyPass>>,
    settings: Arc<ProxySettings>,
}

/// What one load of a configuration keeps: the `proxy_cache_path` zones by name.
#[derive(Default)]
struct State {
    caches: Caches,
}

impl Module for Proxy {
    fn name(&self) -> &'static str {
        "http_proxy_module"
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

    fn load(&self) -> Box<dyn Any + Send + Sync> {
        Box::new(State::default())
    }

    fn defaults(&self) -> Slot {
        Arc::new(Conf::default())
    }

    /// `proxy_cache_path`: a zone of cached responses, which `proxy_cache` names.
    fn begin_http(&self, http: &[Directive], cx: &mut Load<'_>) -> Result<(), ConfigError> {
        let at = (cx.prefix, cx.user);
        let caches = crate::upstream::cache::paths(http, "proxy_cache_path", at, cx.declared)?;
        cx.state
            .downcast_mut::<State>()
            .expect("the proxy's state")
            .caches = caches;
        Ok(())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::edit::<Conf>(conf);
        match d.name.as_str() {
            // Read before the level's directives.
            "proxy_cache_path" => {}
            "proxy_pass" => {
                let (location, uri_part_forbidden) = cx
                    .location
                    .map_or(("", true), |p| (p.name.as_str(), p.uri_part_forbidden));
                let pass = crate::upstream::proxy_pass(
                    d,
                    location,
                    uri_part_forbidden,
                    cx.upstreams,
                    cx.names,
                )?;
                c.pass = Some(Arc::new(pass));
            }
            _ => {
                let state = cx.state.downcast_ref::<State>().expect("the proxy's state");
                let settings = Arc::make_mut(&mut c.settings);
                let read = crate::upstream::directive(
                    settings,
                    d,
                    cx.first,
                    cx.warnings,
                    cx.names,
                    &state.caches,
                )?;
                // A directive the table says is implemented is never left unread.
                if !read {
                    return Err(ConfigError::at(
                        d,
                        format!("\"{}\" directive is not implemented", d.name),
                    ));
                }
            }
        }
        Ok(())
    }

    fn enter_location(&self, conf: &mut Slot) {
        if module::get::<Conf>(conf).pass.is_some() {
            module::edit::<Conf>(conf).pass = None;
        }
    }

    /// TLS to an `https://` upstream (or one named by variables), from the level's
    /// `proxy_ssl_*`.
    fn finish(
        &self,
        conf: &mut Slot,
        _block: &[Directive],
        cx: &mut Finish<'_>,
    ) -> Result<(), ConfigError> {
        let Some(pass) = module::get::<Conf>(conf).pass.clone() else {
            return Ok(());
        };
        let c = module::edit::<Conf>(conf);
        crate::upstream::finish_tls(&mut c.settings, &pass, cx.level, &|p| {
            cx.conf_prefix.join(p)
        })
    }

    fn auto_redirect(&self, conf: &Slot) -> bool {
        module::get::<Conf>(conf).pass.is_some()
    }

    fn is_active(&self, conf: &Slot) -> bool {
        module::get::<Conf>(conf).pass.is_some()
    }

    fn handlers(&self) -> &'static (dyn Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            content: Some(content),
            variable: Some(variable),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// `$proxy_host` and `$proxy_port` of the upstream the request goes to, and
/// `$proxy_add_x_forwarded_for`: the client's `X-Forwarded-For` with its address added.
fn variable(
    req: &Request<'_>,
    conf: &Slot,
    var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&Response, u64)>,
) {
    // The upstream's host and port are the proxy's: none where the location passes to an
    // application server (`fastcgi_pass`), as in nginx.
    let proxied = module::get::<Conf>(conf).pass.is_some();
    match *module::get::<usize>(var) {
        0 if proxied => out.extend_from_slice(req.proxy_host()),
        0 => {}
        1 => {
            if proxied && req.proxy_port() != 0 {
                out.extend_from_slice(req.proxy_port().to_string().as_bytes());
            }
        }
        _ => {
            // Every X-Forwarded-For the client sent, joined, as nginx joins them.
            if req.head().joined_header("x-forwarded-for", b", ", out) {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(req.client_ip().to_string().as_bytes());
        }
    }
}

/// Request headers nginx's proxy sets itself (or clears) unless proxy_set_header names them:
/// `Host $proxy_host`, `Connection close`, and empty TE, Keep-Alive, Expect, Upgrade. The
/// body's framing header is written from the body the upstream gets.
const DEFAULT_SET: &[(&str, &[u8])] = &[
    ("Host", b""),
    ("Connection", b"close"),
    ("TE", b""),
    ("Keep-Alive", b""),
    ("Expect", b""),
    ("Upgrade", b""),
];

/// The content phase of a `proxy_pass` location: a response whose body is the plan.
fn content(req: &mut Request<'_>, conf: &Slot) -> Option<Step> {
    let c = module::get::<Conf>(conf);
    let pass = c.pass.as_ref()?;
    Some(plan(req, pass, &c.settings))
}

/// The plan of a request to `pass`: the group, the request head to send with every
/// variable evaluated, the settings.
fn plan(req: &mut Request<'_>, pass: &Arc<ProxyPass>, settings: &Arc<ProxySettings>) -> Step {
    let settings = settings.clone();
    let (group, dynamic_uri, https) = match req.proxy_target(pass) {
        Ok(t) => t,
        Err(step) => return step,
    };
    let (upstream, key) = group.into_parts();
    let hash_key = key.map_or_else(Vec::new, |k| req.eval(&k));
    let method = req.head().method_str();
    // A HEAD is sent as a GET, whose response the cache keeps whole.
    let converted =
        settings.cache.caches(method) && settings.cache.convert_head && method == "HEAD";
    // A response the cache may keep is asked for whole and unconditional.
    let cacheable = settings.cache.cacheable(method, req.head().header("range"));
    let method_token: std::borrow::Cow<'_, [u8]> = match &settings.method {
        Some(t) => req.eval(t).into(),
        None if converted => b"GET"[..].into(),
        None if *req.method() == req.head().method() => req.head().method_str().as_bytes().into(),
        None => b"GET"[..].into(),
    };
    // A buffer a finished exchange gave back, which the exchange returns in its turn.
    let mut head = req.worker().upstreams.borrow_mut().take_buffer();
    head.reserve(512 + req.head().raw().len());
    head.put_slice(&method_token);
    head.put_u8(b' ');
    let uri_start = head.len();
    match (&dynamic_uri, &pass.uri) {
        (Some(Some(uri)), _) => head.put_slice(uri),
        (Some(None), None) | (None, None) if req.target_as_sent() => {
            let target = req.head().target();
            if target.starts_with(b"/") {
                head.put_slice(target);
            } else {
                head.put_slice(req.head().path());
                if let Some(q) = req.head().query() {
                    head.put_u8(b'?');
                    head.put_slice(q);
                }
            }
        }
        (_, fixed) => {
            let mut rest: &[u8] = req.uri();
            if let Some(part) = fixed.as_ref().filter(|_| req.location_uri()) {
                head.put_slice(part);
                if let Some(r) = req.uri().strip_prefix(pass.location.as_bytes()) {
                    rest = r;
                }
            }
            if req.uri_needs_escape() {
                crate::vars::escape(rest, &mut head, crate::vars::Escape::Uri);
            } else {
                head.put_slice(rest);
            }
            // As nginx, no `?` for empty arguments (`set $args ""`).
            if let Some(a) = req.args().filter(|a| !a.is_empty()) {
                head.put_u8(b'?');
                head.put_slice(a);
            }
        }
    }
    let uri = uri_start..head.len();
    // nginx's default key: the URL the request is proxied to.
    let cache = crate::upstream::cache_job(req, &settings, || {
        let scheme: &[u8] = if https { b"https://" } else { b"http://" };
        [scheme, req.proxy_host(), &head[uri.clone()]].concat()
    });
    head.put_slice(if settings.http11 {
        b" HTTP/1.1\r\n"
    } else {
        b" HTTP/1.0\r\n"
    });
    let mut connection_close = true;
    let mut value = Vec::new();
    for h in &settings.set_headers {
        value.clear();
        h.value
            .eval_into(&mut value, &mut |v, out| req.var(v, out, None));
        if h.lower == "connection" {
            connection_close = value.eq_ignore_ascii_case(b"close");
        }
        if !value.is_empty() {
            portcullis_http::write_header(&mut head, &h.name, &value);
        }
    }
    for (name, default) in DEFAULT_SET {
        if settings
            .set_headers
            .iter()
            .any(|h| h.lower.eq_ignore_ascii_case(name))
        {
            continue;
        }
        if *name == "Host" {
            portcullis_http::write_header(&mut head, name, req.proxy_host());
        } else if !default.is_empty() {
            portcullis_http::write_header(&mut head, name, default);
        }
    }
    if settings.pass_request_headers {
        for (name, value) in req.head().headers() {
            // A name that is not UTF-8 (kept with ignore_invalid_headers off) is not
            // passed: it would go out empty.
            if name.is_empty() {
                continue;
            }
            let lower_is = |n: &str| name.eq_ignore_ascii_case(n);
            let own = settings.set_headers.iter().any(|h| lower_is(&h.lower))
                || DEFAULT_SET.iter().any(|(n, _)| lower_is(n))
                || (cacheable && crate::upstream::cache::DROPPED.iter().any(|n| lower_is(n)))
                || lower_is("content-length")
                || lower_is("transfer-encoding");
            if !own {
                portcullis_http::write_header(&mut head, name, value);
            }
        }
    }
    let idempotent = crate::upstream::idempotent(&method_token);
    let (ssl_name, client_cert) = req.upstream_tls(&settings, https);
    let set_body = settings.set_body.as_ref().map(|t| req.eval(t));
    let keepalive = settings.http11 && !connection_close;
    // As nginx, a 101 becomes a tunnel when the client asked for an upgrade.
    let upgrade = req.head().header("upgrade").is_some();
    let mut r = Response::new(200);
    r.body = Body::Proxy(Box::new(Plan {
        upstream,
        pass_body: settings.pass_request_body
            && !matches!(req.head().body(), portcullis_http::BodyKind::None),
        https,
        head,
        uri,
        set_body,
        hash_key,
        idempotent,
        head_request: *method_token == *b"HEAD",
        upgrade,
        keepalive,
        pass: pass.clone(),
        cache,
        ssl_name,
        client_cert,
        settings,
        gateway: None,
        grpc: None,
    }));
    Step::Done(r)
}
