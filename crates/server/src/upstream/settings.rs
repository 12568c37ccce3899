//! The `proxy_*` directives, typed once at load with nginx's defaults, and `proxy_pass`.
//! The `proxy_ssl_*` ones are collected as written and become the location's TLS client
//! configuration once its `proxy_pass` is known ([`finish_tls`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use portcullis_config::{value, ConfigError, Directive};
use portcullis_proxy::upstream::Upstream;
use portcullis_proxy::{PeerAddr, UpstreamTls};
use portcullis_tls::ClientSpec;

use super::{Group, Groups};
use crate::vars::{Names, Template};

/// nginx's `proxy_buffer_size` default: one memory page.
const DEFAULT_BUFFER_SIZE: usize = 4096;
/// nginx's default for proxy_connect_timeout, proxy_read_timeout and proxy_send_timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Conditions of `proxy_next_upstream`, as bits.
pub(crate) mod next {
    pub const ERROR: u16 = 1;
    pub const TIMEOUT: u16 = 1 << 1;
    pub const INVALID_HEADER: u16 = 1 << 2;
    pub const HTTP_500: u16 = 1 << 3;
    pub const HTTP_502: u16 = 1 << 4;
    pub const HTTP_503: u16 = 1 << 5;
    pub const HTTP_504: u16 = 1 << 6;
    pub const HTTP_403: u16 = 1 << 7;
    pub const HTTP_404: u16 = 1 << 8;
    pub const HTTP_429: u16 = 1 << 9;
    pub const NON_IDEMPOTENT: u16 = 1 << 10;

    /// The bit for a response status, if `proxy_next_upstream` can name it.
    pub fn status_bit(status: u16) -> u16 {
        match status {
            500 => HTTP_500,
            502 => HTTP_502,
            503 => HTTP_503,
            504 => HTTP_504,
            403 => HTTP_403,
            404 => HTTP_404,
            429 => HTTP_429,
            _ => 0,
        }
    }

    /// Statuses that count as a peer failure (403 and 404 do not, as in nginx).
    pub const FAILURE_STATUSES: u16 = HTTP_500 | HTTP_502 | HTTP_503 | HTTP_504 | HTTP_429;
}

/// `proxy_redirect`.
#[derive(Clone)]
pub(crate) enum Redirect {
    /// No `proxy_redirect`: as `default`, the proxied URL's prefix becomes the location's.
    Default,
    Off,
    /// `proxy_redirect from to` (or `default`), in order; the first that matches applies.
    List(Vec<RedirectRule>),
}

/// One `proxy_redirect from to`.
#[derive(Clone)]
pub(crate) enum RedirectRule {
    /// `proxy_redirect default`: the default rule, in its place among any others.
    Default,
    /// A value starting with `from` has it replaced by `to`.
    Prefix(Template, Template),
    /// `~regex` (`~*` without case): a value it matches is replaced whole by `to`, whose
    /// `$1`... are the regex's captures.
    Regex(regex::bytes::Regex, Template),
}

/// One `proxy_cookie_domain` or `proxy_cookie_path` rule; the first that matches a
/// `Set-Cookie` field's attribute rewrites it.
#[derive(Clone)]
pub(crate) enum CookieRule {
    /// A plain value (variables allowed) and its replacement: for a domain, the whole value
    /// without a leading dot, ASCII case-insensitively; for a path, its beginning.
    Plain(Template, Template),
    /// `~regex` (`~*` without case; a domain's always without case): a value it matches is
    /// replaced whole, `$1`... being its captures.
    Regex(regex::bytes::Regex, Template),
}

/// One `proxy_cookie_flags` rule: the cookies it is for, and its flags (variables allowed,
/// read when a response comes).
#[derive(Clone)]
pub(crate) struct CookieFlags {
    /// A name (compared without case) or `~regex` (without case).
    pub name: CookieName,
    pub flags: Vec<Template>,
}

#[derive(Clone)]
pub(crate) enum CookieName {
    Plain(Template),
    Regex(regex::bytes::Regex),
}

/// `proxy_set_header name value`.
#[derive(Clone)]
pub(crate) struct SetHeader {
    pub name: String,
    pub lower: String,
    pub value: Template,
}

/// Settings inherited http → server → location.
#[derive(Clone)]
pub(crate) struct ProxySettings {
    pub http11: bool,
    /// proxy_set_header lines of the innermost level that has any.
    pub set_headers: Vec<SetHeader>,
    pub method: Option<Template>,
    pub pass_request_headers: bool,
    pub pass_request_body: bool,
    /// Lowercased names.
    pub hide_headers: Vec<String>,
    pub pass_headers: Vec<String>,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub send_timeout: Duration,
    pub next_upstream: u16,
    /// 0: no limit.
    pub next_upstream_tries: u32,
    /// Zero: no limit.
    pub next_upstream_timeout: Duration,
    pub buffering: bool,
    pub buffer_size: usize,
    pub request_buffering: bool,
    pub redirect: Redirect,
    /// `proxy_cookie_domain`; empty: `off`.
    pub cookie_domain: Vec<CookieRule>,
    /// `proxy_cookie_path`; empty: `off`.
    pub cookie_path: Vec<CookieRule>,
    /// `proxy_cookie_flags`; empty: `off`. The first rule whose name matches a cookie's is
    /// its.
    pub cookie_flags: Vec<CookieFlags>,
    pub intercept_errors: bool,
    pub ignore_client_abort: bool,
    pub set_body: Option<Template>,
    /// The `proxy_ssl_*` directives.
    pub ssl: SslSettings,
    /// How `proxy_pass https://` connects; set at load for a location that proxies over TLS.
    pub tls: Option<Arc<UpstreamTls>>,
    /// The client certificate's files named by variables (`proxy_ssl_certificate`), made
    /// absolute with this prefix.
    pub client_cert: Option<(Template, Template, PathBuf)>,
    /// `proxy_cache` and the directives that steer it.
    pub cache: super::cache::CacheSettings,
    /// `proxy_force_ranges`: ranges of a response whatever its `Accept-Ranges`.
    pub force_ranges: bool,
}

/// The `proxy_ssl_*` directives as written, inherited like the others.
#[derive(Clone, Default)]
pub(crate) struct SslSettings {
    /// Paths as written: made absolute when the location is finished.
    pub spec: ClientSpec,
    pub certificate: Option<PathBuf>,
    pub certificate_key: Option<PathBuf>,
    /// `proxy_ssl_name` without variables; `None` is nginx's default, `$proxy_host` (or
    /// the name's variables, evaluated for each request: `name_template`).
    pub name: Option<String>,
    /// `proxy_ssl_name` with variables.
    pub name_template: Option<Template>,
    /// `proxy_ssl_certificate` and `proxy_ssl_certificate_key` as written, for when either
    /// has variables: read for each request then.
    pub certificate_templates: (Option<Template>, Option<Template>),
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings {
            http11: false,
            set_headers: Vec::new(),
            method: None,
            pass_request_headers: true,
            pass_request_body: true,
            hide_headers: Vec::new(),
            pass_headers: Vec::new(),
            connect_timeout: DEFAULT_TIMEOUT,
            read_timeout: DEFAULT_TIMEOUT,
            send_timeout: DEFAULT_TIMEOUT,
            next_upstream: next::ERROR | next::TIMEOUT,
            next_upstream_tries: 0,
            next_upstream_timeout: Duration::ZERO,
            buffering: true,
            buffer_size: DEFAULT_BUFFER_SIZE,
            request_buffering: true,
            redirect: Redirect::Default,
            cookie_domain: Vec::new(),
            cookie_path: Vec::new(),
            cookie_flags: Vec::new(),
            intercept_errors: false,
            ignore_client_abort: false,
            set_body: None,
            ssl: SslSettings::default(),
            tls: None,
            client_cert: None,
            cache: Default::default(),
            force_ranges: false,
        }
    }
}

/// Where a `proxy_pass` sends requests.
pub(crate) enum Target {
    /// A group known at load: an `upstream` block, or the implicit group of `host:port`.
    Group {
        group: Group,
        /// `$proxy_host`: the group's name, or `host[:port]` without a default port; shared,
        /// so a request takes it without a copy.
        host: bytes::Bytes,
        port: u16,
    },
    /// A URL with variables, evaluated per request; its host names a group or is an address.
    Dynamic { url: Template, groups: Arc<Groups> },
}

/// A location's `proxy_pass`.
pub(crate) struct ProxyPass {
    pub https: bool,
    pub target: Target,
    /// The URI part of a URL without variables (`proxy_pass http://b/api/;` → "/api/").
    pub uri: Option<Vec<u8>>,
    /// The location's prefix, which the URI part replaces.
    pub location: String,
    /// The URL as written up to the URI part, for `proxy_redirect default`.
    pub url: String,
    /// A URL of variables may name gRPC's schemes, `grpc://` and `grpcs://` (`grpc_pass`).
    pub grpc: bool,
}

/// The regex of a `~regex` argument (`pattern` after the `~`): `*` first makes it
/// case-insensitive, as `caseless` does by default.
fn tilde_regex(
    d: &Directive,
    pattern: &str,
    domain: bool,
) -> Result<regex::bytes::Regex, ConfigError> {
    // `~*` is case-insensitive; a domain's regex always is, and takes no `*` (nginx
    // compiles one into the pattern, where it cannot stand).
    let (caseless, pattern) = match pattern.strip_prefix('*') {
        Some(p) if !domain => (true, p),
        _ => (domain, pattern),
    };
    crate::location::bytes_regex(pattern, caseless)
        .map_err(|e| ConfigError::at(d, crate::location::regex_error(pattern, &e)))
}

/// Applies one `proxy_*` directive to `s`; `first` says whether this is the directive's
/// first occurrence at this level (lists then replace the inherited ones). Returns false for
/// a directive this module does not own.
/// A directive of a module that shares the proxy's settings under its own `prefix`
/// (`fastcgi_read_timeout`, `grpc_hide_header`), read as the proxy's directive of the same
/// name, with errors that name it as written. One the directive table says is implemented
/// is never left unread.
pub(crate) fn directive_as_proxy(
    s: &mut ProxySettings,
    d: &Directive,
    prefix: &str,
    (first, warnings, vars): (bool, &mut Vec<String>, &Names),
    caches: &super::cache::Caches,
) -> Result<(), ConfigError> {
    let mut as_proxy = d.clone();
    as_proxy.name = format!("proxy_{}", d.name.strip_prefix(prefix).unwrap_or(&d.name));
    let read = directive(s, &as_proxy, first, warnings, vars, caches).map_err(|e| ConfigError {
        message: e.message.replace("\"proxy_", &format!("\"{prefix}")),
        span: e.span,
    })?;
    if !read {
        return Err(ConfigError::at(
            d,
            format!("\"{}\" directive is not implemented", d.name),
        ));
    }
    Ok(())
}

pub(crate) fn directive(
    s: &mut ProxySettings,
    d: &Directive,
    first: bool,
    warnings: &mut Vec<String>,
    vars: &Names,
    caches: &super::cache::Caches,
) -> Result<bool, ConfigError> {
    match d.name.as_str() {
        "proxy_http_version" => {
            s.http11 = match d.arg(0) {
                "1.0" => false,
                "1.1" => true,
                _ => return Err(invalid(d, 0)),
            }
        }
        "proxy_set_header" => {
            if first {
                s.set_headers.clear();
            }
            s.set_headers.push(SetHeader {
                name: d.arg(0).to_string(),
                lower: d.arg(0).to_ascii_lowercase(),
                value: Template::compile(d.arg(1), d, vars)?,
            });
        }
        "proxy_method" => s.method = Some(Template::compile(d.arg(0), d, vars)?),
        "proxy_pass_request_headers" => s.pass_request_headers = value::flag(d, 0)?,
        "proxy_pass_request_body" => s.pass_request_body = value::flag(d, 0)?,
        "proxy_hide_header" => {
            if first {
                s.hide_headers.clear();
            }
            s.hide_headers.push(d.arg(0).to_ascii_lowercase());
        }
        "proxy_pass_header" => {
            if first {
                s.pass_headers.clear();
            }
            s.pass_headers.push(d.arg(0).to_ascii_lowercase());
        }
        "proxy_connect_timeout" => s.connect_timeout = time(d)?,
        "proxy_read_timeout" => s.read_timeout = time(d)?,
        "proxy_send_timeout" => s.send_timeout = time(d)?,
        "proxy_next_upstream" => s.next_upstream = next_upstream(d)?,
        "proxy_next_upstream_tries" => {
            s.next_upstream_tries =
                u32::try_from(value::number(d, 0)?).map_err(|_| invalid(d, 0))?
        }
        "proxy_next_upstream_timeout" => s.next_upstream_timeout = time(d)?,
        "proxy_buffering" => s.buffering = value::flag(d, 0)?,
        "proxy_buffer_size" => {
            s.buffer_size = usize::try_from(value::size(d, 0)?).map_err(|_| invalid(d, 0))?
        }
        "proxy_buffers" | "proxy_busy_buffers_size" => {
            // Responses stream through one buffer of proxy_buffer_size, never to disk: the
            // sizes of nginx's further buffers have nothing to tune here.
        }
        "proxy_request_buffering" => s.request_buffering = value::flag(d, 0)?,
        "proxy_redirect" => {
            s.redirect = match (d.arg(0), d.args.len()) {
                ("off", 1) => Redirect::Off,
                (from, n @ (1 | 2)) => {
                    // `default` is a rule of the list, in its place among the others.
                    let pair = match (n, from.strip_prefix('~')) {
                        (1, _) if from == "default" => RedirectRule::Default,
                        (1, _) => return Err(invalid(d, 0)),
                        (_, Some(pattern)) => RedirectRule::Regex(
                            tilde_regex(d, pattern, false)?,
                            Template::compile(d.arg(1), d, vars)?,
                        ),
                        (_, None) => RedirectRule::Prefix(
                            Template::compile(from, d, vars)?,
                            Template::compile(d.arg(1), d, vars)?,
                        ),
                    };
                    match &mut s.redirect {
                        Redirect::List(list) if !first => {
                            list.push(pair);
                            return Ok(true);
                        }
                        _ => Redirect::List(vec![pair]),
                    }
                }
                _ => return Err(invalid(d, 0)),
            }
        }
        "proxy_cookie_domain" | "proxy_cookie_path" => {
            let domain = d.name == "proxy_cookie_domain";
            let rules = if domain {
                &mut s.cookie_domain
            } else {
                &mut s.cookie_path
            };
            if first {
                rules.clear();
            }
            match (d.arg(0), d.args.len()) {
                ("off", 1) => rules.clear(),
                (from, 2) => {
                    // A plain domain rule's leading dots, of the domain and of its
                    // replacement, are not compared; a regex sees the value whole.
                    let undot = |v: &str| -> String {
                        if domain {
                            v.strip_prefix('.').unwrap_or(v).to_string()
                        } else {
                            v.to_string()
                        }
                    };
                    let rule = match from.strip_prefix('~') {
                        Some(pattern) => CookieRule::Regex(
                            tilde_regex(d, pattern, domain)?,
                            Template::compile(d.arg(1), d, vars)?,
                        ),
                        None => CookieRule::Plain(
                            Template::compile(&undot(from), d, vars)?,
                            Template::compile(&undot(d.arg(1)), d, vars)?,
                        ),
                    };
                    rules.push(rule);
                }
                _ => return Err(invalid(d, 0)),
            }
        }
        "proxy_cookie_flags" => {
            // `off` stands alone at its level, as nginx's "is duplicate" says.
            let off = d.arg(0) == "off";
            if !first && (off || s.cookie_flags.is_empty()) {
                return Err(ConfigError::at(
                    d,
                    format!("\"{}\" directive is duplicate", d.name),
                ));
            }
            if first {
                s.cookie_flags.clear();
            }
            if !off {
                if d.args.len() < 2 {
                    return Err(ConfigError::at(
                        d,
                        format!("invalid parameter \"{}\"", d.arg(0)),
                    ));
                }
                let name = match d.arg(0).strip_prefix('~') {
                    Some(pattern) => CookieName::Regex(tilde_regex(d, pattern, true)?),
                    None => CookieName::Plain(Template::compile(d.arg(0), d, vars)?),
                };
                let flags = d.args[1..]
                    .iter()
                    .map(|a| Template::compile(&a.value, d, vars))
                    .collect::<Result<_, _>>()?;
                s.cookie_flags.push(CookieFlags { name, flags });
            }
        }
        "proxy_intercept_errors" => s.intercept_errors = value::flag(d, 0)?,
        "proxy_force_ranges" => s.force_ranges = value::flag(d, 0)?,
        "proxy_ignore_client_abort" => s.ignore_client_abort = value::flag(d, 0)?,
        "proxy_set_body" => s.set_body = Some(Template::compile(d.arg(0), d, vars)?),
        name if name.starts_with("proxy_ssl") => {
            return ssl_directive(&mut s.ssl, d, warnings, vars)
        }
        name if name.starts_with("proxy_cache")
            || name == "proxy_no_cache"
            || name == "proxy_ignore_headers" =>
        {
            return super::cache::directive(&mut s.cache, d, first, caches, vars)
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Applies one `proxy_ssl_*` directive.
fn ssl_directive(
    s: &mut SslSettings,
    d: &Directive,
    warnings: &mut Vec<String>,
    vars: &Names,
) -> Result<bool, ConfigError> {
    match d.name.as_str() {
        "proxy_ssl_session_reuse" => s.spec.session_reuse = value::flag(d, 0)?,
        "proxy_ssl_protocols" => {
            let names: Vec<&str> = d.args.iter().map(|a| a.value.as_str()).collect();
            let choice = portcullis_tls::protocol_versions(&names)
                .map_err(|e| ConfigError::at(d, format!("{e} in \"{}\" directive", d.name)))?;
            if !choice.not_offered.is_empty() {
                warnings.push(format!(
                    "protocols {} are not offered to upstreams in {}",
                    choice.not_offered.join(" "),
                    d.span
                ));
            }
            s.spec.protocols = names.iter().map(|n| n.to_string()).collect();
        }
        "proxy_ssl_ciphers" => {
            portcullis_tls::tls12_suites(d.arg(0)).map_err(|e| {
                ConfigError::at(
                    d,
                    format!("SSL_CTX_set_cipher_list(\"{}\") failed ({e})", d.arg(0)),
                )
            })?;
            s.spec.ciphers = d.arg(0).to_string();
        }
        "proxy_ssl_name" => {
            let name = Template::compile(d.arg(0), d, vars)?;
            (s.name, s.name_template) = match name.as_literal() {
                Some(literal) => (Some(literal.to_string()), None),
                None if d.arg(0) == "$proxy_host" => (None, None),
                None => (None, Some(name)),
            };
        }
        "proxy_ssl_server_name" => s.spec.server_name = value::flag(d, 0)?,
        "proxy_ssl_verify" => s.spec.verify = value::flag(d, 0)?,
        "proxy_ssl_verify_depth" => {
            s.spec.depth = usize::try_from(value::number(d, 0)?).map_err(|_| invalid(d, 0))?
        }
        "proxy_ssl_trusted_certificate" => s.spec.trusted = Some(PathBuf::from(d.arg(0))),
        "proxy_ssl_certificate" => {
            s.certificate = Some(PathBuf::from(d.arg(0)));
            s.certificate_templates.0 = Some(Template::compile(d.arg(0), d, vars)?);
        }
        "proxy_ssl_certificate_key" => {
            s.certificate_key = Some(PathBuf::from(d.arg(0)));
            s.certificate_templates.1 = Some(Template::compile(d.arg(0), d, vars)?);
        }
        "proxy_ssl_crl" => s.spec.crl = Some(PathBuf::from(d.arg(0))),
        "proxy_ssl_password_file" => s.spec.password_file = Some(PathBuf::from(d.arg(0))),
        "proxy_ssl_conf_command" => {
            warnings.extend(
                portcullis_config::ignored_warning(d).map(|w| format!("{w} in {}", d.span)),
            );
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Builds the TLS client configuration of location `l` once its directives are all read,
/// if its `proxy_pass` may go over TLS (`https://`, or a URL with variables, as nginx
/// prepares one for it too). `resolve` makes a relative path the one nginx would open.
pub(crate) fn finish_tls(
    settings: &mut Arc<ProxySettings>,
    pass: &ProxyPass,
    l: &Directive,
    resolve: &dyn Fn(&Path) -> PathBuf,
) -> Result<(), ConfigError> {
    let dynamic = matches!(pass.target, Target::Dynamic { .. });
    if !pass.https && !dynamic {
        return Ok(());
    }
    let d = l
        .children()
        .iter()
        .find(|d| d.name == "proxy_pass")
        .unwrap_or(l);
    let ssl = &settings.ssl;
    let mut spec = ssl.spec.clone();
    // A certificate named by variables is read for each request.
    let dynamic = match &ssl.certificate_templates {
        (Some(c), Some(k)) if c.as_literal().is_none() || k.as_literal().is_none() => {
            Some((c.clone(), k.clone(), resolve(Path::new(""))))
        }
        _ => None,
    };
    spec.trusted = spec.trusted.as_deref().map(resolve);
    spec.crl = spec.crl.as_deref().map(resolve);
    spec.password_file = spec.password_file.as_deref().map(resolve);
    spec.certificate = match (&ssl.certificate, &ssl.certificate_key) {
        _ if dynamic.is_some() => None,
        (None, _) => None,
        (Some(cert), Some(key)) => Some((resolve(cert), resolve(key))),
        (Some(cert), None) => {
            return Err(ConfigError::at(
                d,
                format!(
                    "no \"proxy_ssl_certificate_key\" is defined for certificate \"{}\"",
                    cert.display()
                ),
            ))
        }
    };
    let config =
        portcullis_tls::client_config(&spec).map_err(|e| ConfigError::at(d, e.to_string()))?;
    let name = ssl.name.clone();
    let s = Arc::make_mut(settings);
    s.tls = Some(Arc::new(UpstreamTls::new(config, name)));
    s.client_cert = dynamic;
    Ok(())
}

fn invalid(d: &Directive, i: usize) -> ConfigError {
    ConfigError::at(
        d,
        format!("invalid value \"{}\" in \"{}\" directive", d.arg(i), d.name),
    )
}

fn time(d: &Directive) -> Result<Duration, ConfigError> {
    Ok(Duration::from_millis(value::time_ms(d, 0)?))
}

fn next_upstream(d: &Directive) -> Result<u16, ConfigError> {
    let mut bits = 0;
    for a in &d.args {
        bits |= match a.value.as_str() {
            "error" => next::ERROR,
            "timeout" => next::TIMEOUT,
            "invalid_header" => next::INVALID_HEADER,
            "http_500" => next::HTTP_500,
            "http_502" => next::HTTP_502,
            "http_503" => next::HTTP_503,
            "http_504" => next::HTTP_504,
            "http_403" => next::HTTP_403,
            "http_404" => next::HTTP_404,
            "http_429" => next::HTTP_429,
            "non_idempotent" => next::NON_IDEMPOTENT,
            "off" => {
                if d.args.len() > 1 {
                    return Err(ConfigError::at(
                        d,
                        "invalid value \"off\" in \"proxy_next_upstream\" directive",
                    ));
                }
                0
            }
            "updating" => 0,
            other => {
                return Err(ConfigError::at(
                    d,
                    format!("invalid value \"{other}\" in \"proxy_next_upstream\" directive"),
                ))
            }
        };
    }
    Ok(bits)
}

/// Compiles `proxy_pass URL` of a location. `location` is its name, `fixed_uri_forbidden`
/// whether it is a regex or named location, where a URI part cannot be placed.
pub(crate) fn proxy_pass(
    d: &Directive,
    location: &str,
    fixed_uri_forbidden: bool,
    groups: &Arc<Groups>,
    vars: &Names,
) -> Result<ProxyPass, ConfigError> {
    let url = d.arg(0);
    // With variables, nginx checks the URL when a request makes it (`set $u http://b;
    // proxy_pass $u;`), its scheme too.
    if url.contains('$') {
        return Ok(ProxyPass {
            https: url.starts_with("https://"),
            target: Target::Dynamic {
                url: Template::compile(url, d, vars)?,
                groups: groups.clone(),
            },
            uri: None,
            location: location.to_string(),
            url: String::new(),
            grpc: false,
        });
    }
    let (https, rest) = if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else {
        return Err(ConfigError::at(
            d,
            format!("invalid URL prefix in \"{url}\""),
        ));
    };
    let default_port = if https { 443 } else { 80 };
    if let Some((path, uri)) = unix_url(rest.as_bytes()) {
        if uri.is_some() && fixed_uri_forbidden {
            return Err(ConfigError::at(d, URI_FORBIDDEN));
        }
        if https {
            return Err(ConfigError::at(
                d,
                format!("SSL to a unix-domain socket is not supported in \"{url}\""),
            ));
        }
        let addr = PeerAddr::unix(&String::from_utf8_lossy(path))
            .map_err(|e| ConfigError::at(d, format!("{e} in upstream \"{rest}\"")))?;
        return Ok(ProxyPass {
            https,
            url: format!("http://{addr}:"),
            grpc: false,
            target: unix_target(addr, default_port),
            uri,
            location: location.to_string(),
        });
    }
    let (authority, uri) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(rest.as_bytes()[i..].to_vec())),
        None => (rest, None),
    };
    if uri.is_some() && fixed_uri_forbidden {
        return Err(ConfigError::at(d, URI_FORBIDDEN));
    }
    if authority.is_empty() {
        return Err(ConfigError::at(
            d,
            format!("no host in upstream \"{rest}\""),
        ));
    }
    let target = match groups.get(authority) {
        Some(g) => Target::Group {
            group: g.clone(),
            host: bytes::Bytes::copy_from_slice(authority.as_bytes()),
            port: default_port,
        },
        None => {
            let (host, port) = split_host_port(authority, default_port).ok_or_else(|| {
                ConfigError::at(d, format!("invalid port in upstream \"{authority}\""))
            })?;
            let addrs = super::resolve(host, port).ok_or_else(|| {
                ConfigError::at(d, format!("host not found in upstream \"{authority}\""))
            })?;
            let name = format!("{host}:{port}");
            let proxy_host = if port == default_port {
                host.to_string()
            } else {
                name.clone()
            };
            Target::Group {
                group: Group::fixed(Upstream::implicit(
                    &name,
                    addrs.into_iter().map(PeerAddr::Inet).collect(),
                )),
                host: bytes::Bytes::from(proxy_host),
                port,
            }
        }
    };
    Ok(ProxyPass {
        https,
        target,
        uri,
        location: location.to_string(),
        url: format!("{}://{authority}", if https { "https" } else { "http" }),
        grpc: false,
    })
}

/// nginx's refusal of a URI part where the request's URI cannot be replaced.
const URI_FORBIDDEN: &str = "\"proxy_pass\" cannot have URI part in location given by regular expression, or inside named location, or inside \"if\" statement, or inside \"limit_except\" block";

/// A `unix:/path[:uri]` URL after its scheme: the socket's path, and the URI after the `:`
/// that ends the path, if any (nginx's `ngx_parse_unix_domain_url`).
pub(crate) fn unix_url(rest: &[u8]) -> Option<(&[u8], Option<Vec<u8>>)> {
    let after = rest.get(..5).filter(|p| p.eq_ignore_ascii_case(b"unix:"))?;
    let after = &rest[after.len()..];
    Some(match after.iter().position(|&b| b == b':') {
        Some(i) => (
            &after[..i],
            Some(after[i + 1..].to_vec()).filter(|u| !u.is_empty()),
        ),
        None => (after, None),
    })
}

/// The group of one unix-domain socket: requests name it `localhost` (`$proxy_host`), as
/// nginx's do.
pub(crate) fn unix_target(addr: PeerAddr, port: u16) -> Target {
    let name = addr.to_string();
    Target::Group {
        group: Group::fixed(Upstream::implicit(&name, vec![addr])),
        host: bytes::Bytes::from_static(b"localhost"),
        port,
    }
}

/// Splits `host[:port]` (`[v6]:port` too).
pub(crate) fn split_host_port(authority: &str, default_port: u16) -> Option<(&str, u16)> {
    if authority.starts_with('[') {
        let end = authority.find(']')?;
        let port = match &authority[end + 1..] {
            "" => default_port,
            p => p.strip_prefix(':')?.parse().ok()?,
        };
        return Some((&authority[..=end], port));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) => Some((h, p.parse().ok().filter(|&p| p != 0)?)),
        None => Some((authority, default_port)),
    }
}
