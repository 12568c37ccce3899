//! nginx's `ngx_http_grpc_module`: `grpc_pass` and the `grpc_*` directives.
//!
//! `grpc_pass` sends a location's requests to a gRPC server over HTTP/2: `grpc://host:port`
//! (cleartext, HTTP/2 with prior knowledge), `grpcs://host:port` (TLS, ALPN `h2`), a bare
//! `host:port`, `unix:/path`, an `upstream` group (every balancer), or variables naming one.
//! The request goes as nginx's module builds it: `:method`, `:scheme`, `:path` (the client's
//! target, or the URI after a rewrite), `:authority` (the address as `grpc_pass` names it,
//! `localhost` for a socket, or `grpc_set_header Host`), the `grpc_set_header` fields, then
//! the client's without the ones HTTP/2 has no place for;
//! `TE: trailers` when the client asked for trailers, and the client's `Content-Length`.
//! The body goes as it arrives: from an HTTP/2 client frame by frame in both directions at
//! once (streaming calls), from an HTTP/1.x one once read. The response streams back with
//! its trailers (`grpc-status`, `grpc-message`), which end an HTTP/2 stream or a chunked
//! HTTP/1.1 body.
//!
//! The settings the module shares with the proxy's are read as the proxy's:
//! `grpc_hide_header`, `_pass_header`, `_ignore_headers`, `_intercept_errors`, the three
//! timeouts, `_next_upstream` (`_tries`, `_timeout`), `_buffer_size`, and TLS to the server
//! (`grpc_ssl_*`). A failure before the response began is a status as for the proxy (502,
//! 504), which gRPC clients read as `UNAVAILABLE` and `DEADLINE_EXCEEDED` unless an
//! `error_page` answers with a `grpc-status` of its own. The exchange is in
//! `upstream/grpc.rs`.

use std::any::Any;
use std::sync::Arc;

use bytes::BytesMut;
use portcullis_config::{ConfigError, Directive};

use crate::module::{self, Finish, Load, Module, Slot};
use crate::request::{Body, Handlers, Request, Response, Step};
use crate::upstream::{GrpcRequest, Plan, ProxyPass, ProxySettings};

pub(crate) struct Grpc;

pub(crate) static MODULE: Grpc = Grpc;

#[derive(Clone, Default)]
struct Conf {
    /// The location's `grpc_pass` (not inherited by the locations inside).
    pass: Option<Arc<ProxyPass>>,
    settings: Arc<ProxySettings>,
}

/// Request fields nginx's module sets itself (or clears) unless `grpc_set_header` names
/// them: the body's length and `TE` are written from the client's, the others never go
/// ([`NEVER_SENT`]).
const DEFAULT_SET: &[&str] = &[
    "content-length",
    "te",
    "host",
    "connection",
    "proxy-connection",
    "transfer-encoding",
    "keep-alive",
    "expect",
    "upgrade",
];

/// The fields of [`DEFAULT_SET`] that never go as fields: HTTP/2 has no place for them
/// (`host` goes as `:authority`).
const NEVER_SENT: &[&str] = &[
    "host",
    "connection",
    "proxy-connection",
    "transfer-encoding",
    "keep-alive",
    "expect",
    "upgrade",
];

impl Module for Grpc {
    fn name(&self) -> &'static str {
        "http_grpc_module"
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
        if d.name == "grpc_pass" {
            c.pass = Some(Arc::new(pass(d, cx)?));
            return Ok(());
        }
        // The settings shared with the proxy, read as its directive of the same name.
        crate::upstream::directive_as_proxy(
            Arc::make_mut(&mut c.settings),
            d,
            "grpc_",
            (cx.first, cx.warnings, cx.names),
            &crate::upstream::cache::Caches::default(),
        )
    }

    fn enter_location(&self, conf: &mut Slot) {
        if module::get::<Conf>(conf).pass.is_some() {
            module::edit::<Conf>(conf).pass = None;
        }
    }

    /// TLS to a `grpcs://` server, from the level's `grpc_ssl_*`, offering HTTP/2 by ALPN.
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
        let settings = Arc::make_mut(&mut c.settings);
        settings.ssl.spec.alpn = vec![b"h2".to_vec()];
        crate::upstream::finish_tls(&mut c.settings, &pass, cx.level, &|p| {
            cx.conf_prefix.join(p)
        })
        .map_err(|e| ConfigError {
            message: e.message.replace("\"proxy_", "\"grpc_"),
            span: e.span,
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
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// `grpc_pass`'s address as a `proxy_pass` URL without a URI: the same groups, addresses,
/// sockets and variables, `grpcs://` as `https://`.
fn pass(d: &Directive, cx: &mut Load<'_>) -> Result<ProxyPass, ConfigError> {
    let arg = d.arg(0);
    let lower = arg.to_ascii_lowercase();
    let (https, addr) = if lower.starts_with("grpcs://") {
        (true, &arg[8..])
    } else if lower.starts_with("grpc://") {
        (false, &arg[7..])
    } else {
        (false, arg)
    };
    if addr.is_empty() {
        return Err(ConfigError::at(d, "no host in upstream \"\""));
    }
    // An address has no URI part; a socket's path is all that follows `unix:`.
    let unix = addr.len() >= 5 && addr[..5].eq_ignore_ascii_case("unix:");
    if !addr.contains('$') && !unix && addr.contains(['/', '?']) {
        return Err(ConfigError::at(
            d,
            format!("invalid host in upstream \"{addr}\""),
        ));
    }
    if unix && !addr.contains('$') {
        // `grpcs://unix:` loads, and each request fails to connect, as in nginx.
        let peer = portcullis_proxy::PeerAddr::unix(&addr[5..])
            .map_err(|e| ConfigError::at(d, format!("{e} in upstream \"{addr}\"")))?;
        return Ok(ProxyPass {
            https,
            // `localhost` is nginx's `:authority` for a socket.
            target: crate::upstream::unix_target(peer, 80),
            uri: None,
            location: String::new(),
            url: String::new(),
            grpc: true,
        });
    }
    let mut url = d.clone();
    url.args[0].value = format!("{}://{addr}", if https { "https" } else { "http" });
    let mut pass =
        crate::upstream::proxy_pass(&url, "", false, cx.upstreams, cx.names).map_err(|e| {
            ConfigError {
                message: e
                    .message
                    .replace("https://", "grpcs://")
                    .replace("http://", "grpc://"),
                span: e.span,
            }
        })?;
    pass.grpc = true;
    Ok(pass)
}

/// The content phase of a `grpc_pass` location: a response whose body is the plan.
fn content(req: &mut Request<'_>, conf: &Slot) -> Option<Step> {
    let c = module::get::<Conf>(conf);
    let pass = c.pass.clone()?;
    let (group, _, https) = match req.proxy_target(&pass) {
        Ok(target) => target,
        Err(step) => return Some(step),
    };
    let request = match request(req, &c.settings, https) {
        Ok(r) => r,
        Err(why) => {
            req.log(crate::Level::Error, &why);
            return Some(Step::Status(500));
        }
    };
    let (upstream, key) = group.into_parts();
    let method = req.head().method_str();
    let (ssl_name, client_cert) = req.upstream_tls(&c.settings, https);
    let plan = Plan {
        upstream,
        https,
        head: BytesMut::new(),
        uri: 0..0,
        // nginx's module always passes the body.
        pass_body: !matches!(req.head().body(), portcullis_http::BodyKind::None),
        set_body: None,
        hash_key: key.map_or_else(Vec::new, |k| req.eval(&k)),
        idempotent: crate::upstream::idempotent(method.as_bytes()),
        head_request: method == "HEAD",
        upgrade: false,
        keepalive: false,
        pass,
        cache: None,
        ssl_name,
        client_cert,
        gateway: None,
        grpc: Some(Box::new(request)),
        settings: c.settings.clone(),
    };
    let mut r = Response::new(200);
    r.body = Body::Proxy(Box::new(plan));
    Some(Step::Done(r))
}

/// The HTTP/2 request nginx's module sends for `req`. `Err` says why it cannot be made.
fn request(req: &mut Request<'_>, s: &ProxySettings, https: bool) -> Result<GrpcRequest, String> {
    // `:path`: the client's target as it came, unless a rewrite or an internal redirect
    // made another URI.
    let mut path = BytesMut::new();
    let target = req.head().target();
    if req.target_as_sent() && target.starts_with(b"/") {
        path.extend_from_slice(target);
    } else {
        crate::vars::escape(req.uri(), &mut path, crate::vars::Escape::Uri);
        if let Some(a) = req.args().filter(|a| !a.is_empty()) {
            path.extend_from_slice(b"?");
            path.extend_from_slice(a);
        }
    }
    let mut authority = req.proxy_host().to_vec();
    let mut fields = http::HeaderMap::new();
    let mut value = Vec::new();
    for h in &s.set_headers {
        value.clear();
        h.value
            .eval_into(&mut value, &mut |v, out| req.var(v, out, None));
        if value.is_empty() {
            continue;
        }
        if h.lower == "host" {
            authority.clone_from(&value);
            continue;
        }
        add_field(&mut fields, h.lower.as_bytes(), &value)?;
    }
    let set = |name: &str| s.set_headers.iter().any(|h| h.lower == name);
    let head = req.head();
    if !set("content-length") {
        if let Some(n) = head.header("content-length") {
            add_field(&mut fields, b"content-length", n)?;
        }
    }
    // nginx's `$grpc_internal_trailers`: a client that takes trailers gets them passed.
    if !set("te") && head.header("te").is_some_and(has_trailers) {
        add_field(&mut fields, b"te", b"trailers")?;
    }
    if s.pass_request_headers {
        for (name, value) in head.headers() {
            if name.is_empty()
                || DEFAULT_SET.iter().any(|n| name.eq_ignore_ascii_case(n))
                || s.set_headers
                    .iter()
                    .any(|h| name.eq_ignore_ascii_case(&h.lower))
            {
                continue;
            }
            add_field(&mut fields, name.as_bytes(), value)?;
        }
    }
    let uri = http::Uri::builder()
        .scheme(if https { "https" } else { "http" })
        .authority(authority.as_slice())
        .path_and_query(path.as_ref())
        .build()
        .map_err(|e| {
            format!(
                "invalid gRPC request to \"{}\": {e}",
                String::from_utf8_lossy(&authority)
            )
        })?;
    let method = http::Method::from_bytes(head.method_str().as_bytes())
        .map_err(|e| format!("invalid method: {e}"))?;
    Ok(GrpcRequest {
        method,
        uri,
        fields,
    })
}

/// Adds a field to an HTTP/2 request: one HTTP/2 refuses (about one connection) is left
/// out, as is one whose name or value cannot be sent.
fn add_field(fields: &mut http::HeaderMap, name: &[u8], value: &[u8]) -> Result<(), String> {
    let (Ok(n), Ok(v)) = (
        http::HeaderName::from_bytes(name),
        http::HeaderValue::from_bytes(value),
    ) else {
        return Err(format!(
            "invalid header \"{}: {}\" for gRPC",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(value)
        ));
    };
    if NEVER_SENT.contains(&n.as_str()) {
        return Ok(());
    }
    if n == http::header::TE && v.as_bytes() != b"trailers" {
        return Ok(());
    }
    fields.append(n, v);
    Ok(())
}

/// Whether a `TE` field's value names `trailers`, as nginx looks for it.
fn has_trailers(te: &[u8]) -> bool {
    te.windows(8).any(|w| w.eq_ignore_ascii_case(b"trailers"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn te_names_trailers_anywhere() {
        assert!(has_trailers(b"trailers"));
        assert!(has_trailers(b"gzip, Trailers"));
        assert!(!has_trailers(b"gzip"));
        assert!(!has_trailers(b""));
    }

    #[test]
    fn fields_http2_refuses_are_left_out() {
        let mut f = http::HeaderMap::new();
        add_field(&mut f, b"Connection", b"close").unwrap();
        add_field(&mut f, b"Upgrade", b"h2c").unwrap();
        add_field(&mut f, b"te", b"gzip").unwrap();
        add_field(&mut f, b"X-Id", b"1").unwrap();
        add_field(&mut f, b"te", b"trailers").unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f.get("x-id").map(|v| v.as_bytes()), Some(&b"1"[..]));
        assert_eq!(f.get("te").map(|v| v.as_bytes()), Some(&b"trailers"[..]));
        assert!(add_field(&mut f, b"bad name", b"1").is_err());
    }
}
