//! nginx's modules for application servers: `ngx_http_fastcgi_module` (php-fpm),
//! `ngx_http_uwsgi_module` and `ngx_http_scgi_module` (Python's uwsgi and the like), one
//! module each in the registry with the same directives under its prefix.
//!
//! `fastcgi_pass` (`uwsgi_pass`, `scgi_pass`) sends a location's requests to the server: an
//! address, `unix:/path`, an `upstream` group (every balancer, with `keepalive` and
//! `fastcgi_keep_conn on` reusing FastCGI connections), or variables naming one. The request
//! goes as the `fastcgi_param`s (`if_not_empty` ones only with a value; a level with its
//! own replaces those it inherits, as Debian's `fastcgi_params`, `fastcgi.conf`,
//! `uwsgi_params` and `scgi_params` are meant to be included), the client's header fields
//! as `HTTP_*` params (`fastcgi_pass_request_headers`) unless a param of that name hides
//! them, and its body (`fastcgi_pass_request_body`) read whole. `fastcgi_index` and
//! `fastcgi_split_path_info` make `$fastcgi_script_name` and `$fastcgi_path_info`;
//! `uwsgi_modifier1` and `uwsgi_modifier2` go in uwsgi's packet header.
//!
//! The response goes as a proxied one (`upstream/fastcgi.rs` makes a CGI head an HTTP head),
//! with the settings these modules share with the proxy's, read as the proxy's:
//! `*_hide_header`, `_pass_header`, `_ignore_headers`, `_intercept_errors`,
//! `_ignore_client_abort`, the three timeouts, `_next_upstream` (`_tries`, `_timeout`),
//! `_buffering`, `_buffer_size` (the most of a response head), `_buffers`, `_force_ranges`.
//! FastCGI's `STDERR` output is logged at `error` as nginx logs it. `*_request_buffering off`
//! reads the body whole all the same.
//!
//! The caches are the proxy's (`upstream/cache/`): `fastcgi_cache_path` (zones of the
//! module's own), `fastcgi_cache`, `_key` (no default: without one every request has the
//! empty key, as nginx warns), `_valid`, `_bypass`, `fastcgi_no_cache`, `_use_stale`,
//! `_methods`, `_min_uses`, `_lock*`, `_revalidate` (the entry's conditions sent as
//! `HTTP_IF_MODIFIED_SINCE` and `HTTP_IF_NONE_MATCH`), `_background_update`,
//! `_max_range_offset`. A HEAD goes to the server as a HEAD (there is no
//! `fastcgi_cache_convert_head`), and while a response may be cached the client's
//! conditions and range are not passed, as nginx's cache params say.

use std::any::Any;
use std::sync::Arc;

use bytes::BytesMut;
use portcullis_config::{ConfigError, Directive};

use crate::location::LocationRegex;
use crate::module::{self, Finish, Load, Module, Slot};
use crate::request::{Body, Handlers, Request, Response, Step};
use crate::upstream::fastcgi::{Param, Params};
use crate::upstream::{Gateway, Plan, Protocol, ProxyPass, ProxySettings};
use crate::vars::{Names, Template};

/// One of the modules: nginx's name for it, the prefix of its directives, its protocol.
pub(crate) struct GatewayModule {
    name: &'static str,
    prefix: &'static str,
    protocol: Protocol,
}

pub(crate) static FASTCGI: GatewayModule = GatewayModule {
    name: "http_fastcgi_module",
    prefix: "fastcgi_",
    protocol: Protocol::FastCgi,
};

pub(crate) static UWSGI: GatewayModule = GatewayModule {
    name: "http_uwsgi_module",
    prefix: "uwsgi_",
    protocol: Protocol::Uwsgi {
        modifier1: 0,
        modifier2: 0,
    },
};

pub(crate) static SCGI: GatewayModule = GatewayModule {
    name: "http_scgi_module",
    prefix: "scgi_",
    protocol: Protocol::Scgi,
};

/// What one load of a configuration keeps: the module's cache zones, by name.
#[derive(Default)]
struct State {
    caches: crate::upstream::cache::Caches,
}

/// The module's variables, by their place.
const VARIABLES: &[&str] = &["fastcgi_script_name", "fastcgi_path_info"];
const SCRIPT_NAME: usize = 0;

#[derive(Clone)]
struct Conf {
    /// The protocol, with uwsgi's modifiers as the level sets them.
    protocol: Protocol,
    /// The location's `fastcgi_pass` (not inherited by the locations inside).
    pass: Option<Arc<ProxyPass>>,
    params: Arc<Params>,
    /// `fastcgi_index`, as written (nginx expands no variable in it).
    index: Option<Vec<u8>>,
    /// `fastcgi_split_path_info`: a regex with two groups, the script name and the path info.
    split: Option<Arc<LocationRegex>>,
    keep_conn: bool,
    /// What the module shares with the proxy's.
    settings: Arc<ProxySettings>,
}

impl Module for GatewayModule {
    fn name(&self) -> &'static str {
        self.name
    }

    fn declare(
        &self,
        _http: &[Directive],
        names: &mut Names,
        me: usize,
    ) -> Result<(), ConfigError> {
        if self.protocol == Protocol::FastCgi {
            names.add_fixed(me, VARIABLES);
        }
        Ok(())
    }

    fn load(&self) -> Box<dyn Any + Send + Sync> {
        Box::new(State::default())
    }

    /// `fastcgi_cache_path`: the module's zones, which `fastcgi_cache` names.
    fn begin_http(&self, http: &[Directive], cx: &mut Load<'_>) -> Result<(), ConfigError> {
        let directive = match self.protocol {
            Protocol::FastCgi => "fastcgi_cache_path",
            Protocol::Uwsgi { .. } => "uwsgi_cache_path",
            Protocol::Scgi => "scgi_cache_path",
        };
        let at = (cx.prefix, cx.user);
        let caches = crate::upstream::cache::paths(http, directive, at, cx.declared)?;
        cx.state
            .downcast_mut::<State>()
            .expect("the module's state")
            .caches = caches;
        Ok(())
    }

    fn defaults(&self) -> Slot {
        let mut settings = ProxySettings {
            // nginx rewrites no `Location` of an application server's response.
            redirect: crate::upstream::Redirect::Off,
            ..ProxySettings::default()
        };
        // A HEAD is cached as the server answers it.
        settings.cache.convert_head = false;
        Arc::new(Conf {
            protocol: self.protocol,
            pass: None,
            params: Arc::default(),
            index: None,
            split: None,
            keep_conn: false,
            settings: Arc::new(settings),
        })
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::edit::<Conf>(conf);
        let what = d.name.strip_prefix(self.prefix).unwrap_or_default();
        match what {
            "pass" => {
                // uwsgi's own scheme (`uwsgi://host:port`) names the same address.
                let addr = match self.protocol {
                    Protocol::Uwsgi { .. } => strip_scheme(d.arg(0), "uwsgi://"),
                    _ => d.arg(0),
                };
                if matches!(self.protocol, Protocol::Uwsgi { .. })
                    && d.arg(0)
                        .get(..9)
                        .is_some_and(|s| s.eq_ignore_ascii_case("suwsgi://"))
                {
                    return Err(ConfigError::at(
                        d,
                        "\"suwsgi://\" (uwsgi over SSL) is not supported",
                    ));
                }
                let fixed = !addr.contains('$');
                // A socket's path is all that follows `unix:` (a proxy_pass URL's ends at a
                // `:` before its URI).
                if fixed && addr.len() >= 5 && addr[..5].eq_ignore_ascii_case("unix:") {
                    let peer = portcullis_proxy::PeerAddr::unix(&addr[5..])
                        .map_err(|e| ConfigError::at(d, format!("{e} in upstream \"{addr}\"")))?;
                    c.pass = Some(Arc::new(ProxyPass {
                        https: false,
                        target: crate::upstream::unix_target(peer, 80),
                        uri: None,
                        location: String::new(),
                        url: String::new(),
                        grpc: false,
                    }));
                    return Ok(());
                }
                // An address has no URI part.
                if fixed && addr.contains(['/', '?']) {
                    return Err(ConfigError::at(
                        d,
                        format!("invalid host in upstream \"{addr}\""),
                    ));
                }
                // The address as a proxy_pass URL without a URI: the same groups, addresses
                // and variables.
                let mut url = d.clone();
                url.args[0].value = format!("http://{addr}");
                let pass = crate::upstream::proxy_pass(&url, "", false, cx.upstreams, cx.names)
                    .map_err(|e| ConfigError {
                        message: e.message.replace("http://", ""),
                        span: e.span,
                    })?;
                c.pass = Some(Arc::new(pass));
            }
            "param" => {
                let if_not_empty = match d.args.get(2).map(|a| a.value.as_str()) {
                    None => false,
                    Some("if_not_empty") => true,
                    Some(other) => {
                        return Err(ConfigError::at(d, format!("invalid parameter \"{other}\"")))
                    }
                };
                let name = d.arg(0).as_bytes().to_vec();
                let param = Param {
                    hide_only: name.len() > 5 && name.starts_with(b"HTTP_") && d.arg(1).is_empty(),
                    name,
                    value: Template::compile(d.arg(1), d, cx.names)?,
                    if_not_empty,
                };
                // A level's first replaces the params it inherits, as in nginx.
                let base = if cx.first {
                    &Params::default()
                } else {
                    &*c.params
                };
                c.params = Arc::new(base.with(param));
            }
            "index" => c.index = Some(d.arg(0).as_bytes().to_vec()),
            "split_path_info" => {
                let re = LocationRegex::new(d.arg(0), false).map_err(|e| ConfigError::at(d, e))?;
                // The whole match and the two groups.
                if re.capture_names().count() != 3 {
                    return Err(ConfigError::at(
                        d,
                        format!("pattern \"{}\" must have 2 captures", d.arg(0)),
                    ));
                }
                c.split = Some(Arc::new(re));
            }
            "keep_conn" => c.keep_conn = portcullis_config::value::flag(d, 0)?,
            // Read before the level's directives.
            "cache_path" => {}
            "modifier1" | "modifier2" => {
                let n = u8::try_from(portcullis_config::value::number(d, 0)?)
                    .map_err(|_| ConfigError::at(d, "value must be between 0 and 255"))?;
                if let Protocol::Uwsgi {
                    modifier1,
                    modifier2,
                } = &mut c.protocol
                {
                    *if what == "modifier1" {
                        modifier1
                    } else {
                        modifier2
                    } = n;
                }
            }
            _ => {
                // The settings the proxy's share, read as its directive of the same name.
                let state = cx
                    .state
                    .downcast_ref::<State>()
                    .expect("the module's state");
                crate::upstream::directive_as_proxy(
                    Arc::make_mut(&mut c.settings),
                    d,
                    self.prefix,
                    (cx.first, cx.warnings, cx.names),
                    &state.caches,
                )?;
            }
        }
        Ok(())
    }

    /// nginx's warning for a cache without a key, at the level that names the cache.
    fn finish(
        &self,
        conf: &mut Slot,
        block: &[Directive],
        cx: &mut Finish<'_>,
    ) -> Result<(), ConfigError> {
        let cache = format!("{}cache", self.prefix);
        let Some(d) = block.iter().find(|d| d.name == cache) else {
            return Ok(());
        };
        let s = &module::get::<Conf>(conf).settings.cache;
        if s.zone.is_some() && s.key.is_none() {
            cx.warnings.push(format!(
                "no \"{p}cache_key\" for \"{p}cache\" in {}",
                d.span,
                p = self.prefix
            ));
        }
        Ok(())
    }

    fn enter_location(&self, conf: &mut Slot) {
        if module::get::<Conf>(conf).pass.is_some() {
            module::edit::<Conf>(conf).pass = None;
        }
    }

    /// nginx's `fastcgi_pass` sets the location's `auto_redirect`.
    fn auto_redirect(&self, conf: &Slot) -> bool {
        module::get::<Conf>(conf).pass.is_some()
    }

    fn is_active(&self, conf: &Slot) -> bool {
        module::get::<Conf>(conf).pass.is_some()
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            content: Some(content),
            variable: Some(variable),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// `addr` without `scheme` (any case) before it.
fn strip_scheme<'a>(addr: &'a str, scheme: &str) -> &'a str {
    match addr.get(..scheme.len()) {
        Some(s) if s.eq_ignore_ascii_case(scheme) => &addr[scheme.len()..],
        _ => addr,
    }
}

/// The content phase of a `fastcgi_pass` (`uwsgi_pass`, `scgi_pass`) location: a response
/// whose body is the plan.
fn content(req: &mut Request<'_>, conf: &Slot) -> Option<Step> {
    let c = module::get::<Conf>(conf);
    let pass = c.pass.clone()?;
    let (group, _, _) = match req.proxy_target(&pass) {
        Ok(target) => target,
        Err(step) => return Some(step),
    };
    let (upstream, key) = group.into_parts();
    let method = req.head().method_str();
    let s = &c.settings;
    // No default key: without `fastcgi_cache_key` every request's is empty, as in nginx
    // (which warns at load).
    let cache = crate::upstream::cache_job(req, s, Vec::new);
    let cacheable = cache.is_some() && s.cache.cacheable(method, req.head().header("range"));
    let plan = Plan {
        upstream,
        https: false,
        head: BytesMut::new(),
        uri: 0..0,
        pass_body: c.settings.pass_request_body
            && !matches!(req.head().body(), portcullis_http::BodyKind::None),
        set_body: None,
        hash_key: key.map_or_else(Vec::new, |k| req.eval(&k)),
        idempotent: crate::upstream::idempotent(method.as_bytes()),
        head_request: method == "HEAD",
        // uwsgi and SCGI servers may switch protocols (WebSocket), FastCGI ones not.
        upgrade: c.protocol != Protocol::FastCgi && req.head().header("upgrade").is_some(),
        // Only a FastCGI connection carries more than one request.
        keepalive: c.keep_conn && c.protocol == Protocol::FastCgi,
        pass,
        cache,
        ssl_name: None,
        client_cert: None,
        grpc: None,
        gateway: Some(Gateway {
            protocol: c.protocol,
            params: c.params.clone(),
            cacheable,
        }),
        settings: c.settings.clone(),
    };
    let mut r = Response::new(200);
    r.body = Body::Proxy(Box::new(plan));
    Some(Step::Done(r))
}

/// `$fastcgi_script_name` (the URI, or the split's first group, with `fastcgi_index` after
/// a final `/`) and `$fastcgi_path_info` (the split's second group).
fn variable(
    req: &Request<'_>,
    conf: &Slot,
    var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&Response, u64)>,
) {
    let c = module::get::<Conf>(conf);
    let uri = req.uri();
    let (script, info): (&[u8], &[u8]) = match c.split.as_ref().map(|re| re.captures(uri)) {
        Some(Ok(Some(caps))) => (caps.get(uri, 1), caps.get(uri, 2)),
        _ => (uri, b""),
    };
    if *module::get::<usize>(var) == SCRIPT_NAME {
        out.extend_from_slice(script);
        if script.ends_with(b"/") {
            if let Some(index) = &c.index {
                out.extend_from_slice(index);
            }
        }
    } else {
        out.extend_from_slice(info);
    }
}
