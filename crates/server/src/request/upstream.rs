//! The request's side of an upstream exchange: the group a `proxy_pass` (`fastcgi_pass`)
//! names for this request (`proxy_target`, with the resolver), the client's response head
//! written from the upstream's by nginx's rules (`write_proxied_head`: hidden fields,
//! `proxy_redirect`, cookies), and what the exchange leaves for the variables and the log.

use std::borrow::Cow;
use std::sync::Arc;

use portcullis_http::{KnownName, ResponseHead, Version};
use portcullis_proxy::upstream::Upstream;

use super::{Request, Response, Step};
use crate::upstream::resolve::Found;
use crate::upstream::{
    CookieRule, Fields, Group, Plan, ProxyPass, ProxySettings, Redirect, RedirectRule, Target,
};
use crate::Level;

/// A buffer for a number's digits.
fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

/// `n` in decimal, in `buf`.
fn format_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// Response headers `proxy_hide_header` hides by default (proxy_pass_header shows them).
pub(super) const HIDDEN: &[&str] = &[
    "date",
    "server",
    "x-pad",
    "x-accel-expires",
    "x-accel-redirect",
    "x-accel-limit-rate",
    "x-accel-buffering",
    "x-accel-charset",
];

impl Request<'_> {
    pub(crate) fn worker(&self) -> &crate::worker::state::Worker {
        self.worker
    }

    /// When the request's head was read.
    pub(crate) fn start(&self) -> std::time::Instant {
        self.start
    }

    pub(crate) fn client_ip(&self) -> std::net::IpAddr {
        self.peer.ip()
    }

    pub(crate) fn is_http11(&self) -> bool {
        self.head.version() == Version::Http11
    }

    /// Whether the location has an error_page for `status` (for proxy_intercept_errors).
    pub(crate) fn has_error_page(&self, status: u16) -> bool {
        self.loc
            .error_pages
            .iter()
            .any(|p| p.codes.contains(&status))
    }

    /// Keeps what a proxied response's head says beside its upstream's (the type the
    /// header filters gave it, their fields) and which of the upstream's fields it hides,
    /// for `$sent_http_*`, when the configuration reads one.
    fn keep_sent_fields(&self, extra: &Response, head: &ResponseHead, s: &Arc<ProxySettings>) {
        if !self
            .server
            .names
            .upstream_heads
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        // A response of the cache's has no upstream head kept yet: its stored one is it.
        if self.upstream_head.borrow().is_none() {
            *self.upstream_head.borrow_mut() = Some(head.clone());
        }
        let content_type = extra.content_type.clone().or_else(|| {
            head.known(KnownName::ContentType)
                .map(|t| Arc::from(String::from_utf8_lossy(t).as_ref()))
        });
        *self.sent_fields.borrow_mut() = Some(crate::request::SentFields {
            content_type,
            added: extra.headers.clone(),
            settings: s.clone(),
        });
    }

    /// Keeps the upstream response's head for `$upstream_http_*`, when the configuration
    /// reads one.
    pub(crate) fn keep_upstream_head(&self, head: &portcullis_http::ResponseHead) {
        // The request's own configuration's, also while a reload brings another.
        if self
            .server
            .names
            .upstream_heads
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            *self.upstream_head.borrow_mut() = Some(head.clone());
        }
    }

    /// Keeps the client's body, read whole for an upstream, for the request's later
    /// exchanges (an error_page's upstream sends it again) and `$request_body`: a reference,
    /// not a copy.
    pub(crate) fn keep_body_for_later(&self, body: &bytes::Bytes) {
        *self.request_body.borrow_mut() = Some(body.clone());
    }

    /// Keeps the client's body, read whole, for `$request_body` (a reference, not a copy),
    /// when the configuration reads it or a copy of the request takes it (`mirror`).
    pub(crate) fn keep_request_body(&self, body: &bytes::Bytes) {
        self.body_length.set(Some(body.len() as u64));
        let names = &self.server.names;
        let copied = self.background.iter().any(|(_, with_body)| *with_body);
        if copied
            || names
                .request_body
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            *self.request_body.borrow_mut() = Some(body.clone());
        }
    }

    /// An error-log line about the upstream, with nginx's `upstream: "..."` part.
    pub(crate) fn log_upstream(
        &self,
        level: Level,
        message: &str,
        upstream: &dyn std::fmt::Display,
    ) {
        self.log_line(level, message, Some(upstream));
    }

    /// `proxy_ssl_name` (`grpc_ssl_name`) and the client certificate's files when they are
    /// named by variables, evaluated for a request to an `https` upstream.
    pub(crate) fn upstream_tls(
        &self,
        settings: &crate::upstream::ProxySettings,
        https: bool,
    ) -> (
        Option<String>,
        Option<(std::path::PathBuf, std::path::PathBuf)>,
    ) {
        if !https {
            return (None, None);
        }
        let name = settings
            .ssl
            .name_template
            .as_ref()
            .map(|t| String::from_utf8_lossy(&self.eval(t)).into_owned());
        let cert = settings.client_cert.as_ref().map(|(c, k, prefix)| {
            let path = |t| prefix.join(String::from_utf8_lossy(&self.eval(t)).as_ref());
            (path(c), path(k))
        });
        (name, cert)
    }

    /// The group a `proxy_pass` (or `fastcgi_pass`) sends a request to, with `$proxy_host`
    /// and `$proxy_port` set: known at load, or made of variables (a group's name, an address,
    /// a unix-domain socket, a name the resolver looks up); for a URL of variables, its URI
    /// part, and whether it is `https`. `Err`: the request's answer instead.
    #[allow(clippy::type_complexity)]
    pub(crate) fn proxy_target(
        &mut self,
        pass: &ProxyPass,
    ) -> Result<(Group, Option<Option<Vec<u8>>>, bool), Step> {
        Ok(match &pass.target {
            Target::Group { group, host, port } => {
                self.proxy_host = host.clone();
                self.proxy_port = *port;
                (group.clone(), None, pass.https)
            }
            Target::Dynamic { url, groups } => {
                let value = self.eval(url);
                let (https, rest) = match value
                    .strip_prefix(b"http://")
                    .map(|r| (false, r))
                    .or_else(|| value.strip_prefix(b"https://").map(|r| (true, r)))
                {
                    Some(x) => x,
                    None => {
                        self.log(
                            Level::Error,
                            &format!(
                                "invalid URL prefix in \"{}\"",
                                String::from_utf8_lossy(&value)
                            ),
                        );
                        return Err(Step::Status(500));
                    }
                };
                // `grpc_pass $target`: the value may name gRPC's schemes itself.
                let (https, rest) = match grpc_scheme(rest).filter(|_| pass.grpc) {
                    Some((tls, after)) => (https || tls, after),
                    None => (https, rest),
                };
                let default_port = if https { 443 } else { 80 };
                if let Some((path, uri)) = crate::upstream::unix_url(rest) {
                    let path = String::from_utf8_lossy(path);
                    let addr = match portcullis_proxy::PeerAddr::unix(&path) {
                        Ok(a) if !https => a,
                        Ok(_) => {
                            self.log(Level::Error, "SSL to a unix-domain socket is not supported");
                            return Err(Step::Status(500));
                        }
                        Err(e) => {
                            self.log(Level::Error, &format!("{e} in upstream \"unix:{path}\""));
                            return Err(Step::Status(500));
                        }
                    };
                    let crate::upstream::Target::Group { group, host, port } =
                        crate::upstream::unix_target(addr, default_port)
                    else {
                        unreachable!("a unix target is a group");
                    };
                    self.proxy_host = host;
                    self.proxy_port = port;
                    (group, Some(uri), https)
                } else {
                    let slash = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
                    let authority = String::from_utf8_lossy(&rest[..slash]);
                    let uri = (slash < rest.len()).then(|| rest[slash..].to_vec());
                    self.proxy_host = bytes::Bytes::copy_from_slice(&rest[..slash]);
                    self.proxy_port = default_port;
                    let group = match groups.get(&*authority) {
                        Some(g) => g.clone(),
                        None => {
                            let addr = crate::upstream::split_host_port(&authority, default_port)
                                .and_then(|(h, p)| {
                                    h.trim_start_matches('[')
                                        .trim_end_matches(']')
                                        .parse::<std::net::IpAddr>()
                                        .ok()
                                        .map(|ip| std::net::SocketAddr::new(ip, p))
                                });
                            match addr {
                                Some(a) => {
                                    Group::fixed(Upstream::implicit(&a.to_string(), vec![a.into()]))
                                }
                                None => self.resolve(&authority, default_port)?,
                            }
                        }
                    };
                    (group, Some(uri), https)
                }
            }
        })
    }

    /// Sets `$upstream_cache_status`.
    pub(crate) fn set_cache_status(&self, status: crate::upstream::cache::Status) {
        self.cache_status.set(Some(status.as_str()));
    }

    /// The status the client is sent for an upstream's `status`: an error_page target keeps
    /// the status of the error it answers (nginx's err_status), unless its `=code` said
    /// otherwise; a 101 is a protocol switch.
    pub(crate) fn status_sent(&self, status: u16) -> u16 {
        match self.err_status {
            Some(code) if status != 101 => code,
            _ => status,
        }
    }

    /// Writes the client's response head for an upstream's `head`: the status line as the
    /// upstream sent it, our Server and Date, the upstream's headers in order without the
    /// hop-by-hop and hidden ones, Location rewritten by proxy_redirect, add_header.
    pub(crate) fn write_proxied_head<F: Fields>(
        &self,
        out: &mut F,
        plan: &Plan,
        head: &ResponseHead,
    ) {
        let s = &plan.settings;
        let status = self.status_sent(head.status());
        if head.reason().is_empty() || status != head.status() {
            out.status(status, portcullis_http::reason(status).as_bytes());
        } else {
            out.status(status, head.reason());
        }
        let passed = |name: &str| s.pass_headers.iter().any(|p| p == name);
        let ranges_last = self.cache_ranges.get();
        // A FastCGI script's own `Server` and `Date` take the place of ours, as nginx's
        // FastCGI module hides neither.
        let fastcgi = plan.is_gateway();
        let script = |name: &str| head.header(name).filter(|_| fastcgi);
        if !passed("server") {
            let ours: &[u8] = if self.loc.server_tokens {
                super::VERSION.as_bytes()
            } else {
                b"portcullis"
            };
            out.field(b"Server", script("server").unwrap_or(ours));
        }
        if !passed("date") {
            match script("date") {
                Some(d) => out.field(b"Date", d),
                None => out.field(b"Date", self.worker.dates.borrow_mut().get()),
            }
        }
        // The header filters see the response's type (the charset filter may name its
        // charset) and add their fields after the upstream's.
        let mut extra = Response::new(status);
        if self.has_header_filters() {
            extra.content_type = head
                .known(KnownName::ContentType)
                .map(|t| Arc::from(String::from_utf8_lossy(t).as_ref()));
        }
        let upstream_type = extra.content_type.clone();
        // The header filters' own variables see the upstream's fields (`add_header ...
        // $sent_http_x`), then the variables of the log see theirs too.
        self.keep_sent_fields(&extra, head, &plan.settings);
        self.add_headers_with(&mut extra, Some(head));
        self.keep_sent_fields(&extra, head, &plan.settings);
        let passed_any = |name: &[u8]| {
            s.pass_headers
                .iter()
                .any(|p| name.eq_ignore_ascii_case(p.as_bytes()))
        };
        // proxy_hide_header hides any field but one proxy_pass_header passes.
        let hidden = |name: &[u8]| {
            s.hide_headers
                .iter()
                .any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
                && !passed_any(name)
        };
        match (&extra.content_type, head.known(KnownName::ContentType)) {
            (Some(t), _) if upstream_type.as_ref() != Some(t) => {
                out.field(b"Content-Type", t.as_bytes())
            }
            (_, Some(raw)) if !hidden(b"content-type") => out.field(b"Content-Type", raw),
            _ => {}
        }
        // Trailers (`add_trailer`) end an HTTP/1.1 body chunked: the length goes.
        let chunked_for_trailers = self.expects_trailers() && !plan.head_request && out.trailers();
        // The length in nginx's place, after the type, whatever the upstream's order.
        if head.known(KnownName::ContentLength).is_some() && !chunked_for_trailers {
            if let portcullis_http::Framing::Length(n) = head.framing() {
                let mut digits = itoa_buf();
                out.field(b"Content-Length", format_u64(n, &mut digits));
            }
        }
        // A FastCGI response's `Location` goes as it came, in its place (nginx's FastCGI
        // module rewrites none, so its header filter never sees one to make absolute).
        // Only a value proxy_redirect rewrote is the response's Location to nginx's header
        // filter, which makes it absolute in its own place; any other goes as it is, in the
        // upstream's place (a relative one stays relative).
        let (location, rewritten) = match head
            .known(KnownName::Location)
            .filter(|_| !plan.is_gateway())
        {
            Some(l) => match self.rewrite_location(plan, l) {
                Some(v) => (Some(v), true),
                None => (Some(l.to_vec()), false),
            },
            None => (None, false),
        };
        let made_absolute = rewritten
            && self.loc.absolute_redirect
            && location.as_ref().is_some_and(|l| l.starts_with(b"/"));
        if let Some(l) = location.as_ref().filter(|_| made_absolute) {
            out.field(b"Location", &self.absolute_location(l));
        }
        out.connection(status == 101 && plan.upgrade);
        let replaced = self.replaced_fields(status);
        for f in head.fields() {
            let name = f.name;
            let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
            match f.known {
                KnownName::Connection
                | KnownName::KeepAlive
                | KnownName::TransferEncoding
                | KnownName::ContentLength
                | KnownName::ContentType => continue,
                KnownName::Date | KnownName::Server if fastcgi && !passed_any(name) => continue,
                // nginx's FastCGI and SCGI modules hide their `Status:` field.
                _ if is("status")
                    && plan.gateway.as_ref().is_some_and(|g| {
                        !matches!(g.protocol, crate::upstream::Protocol::Uwsgi { .. })
                    }) =>
                {
                    continue
                }
                // nginx's FastCGI module hides `X-Accel-*` only.
                KnownName::Date | KnownName::Server | KnownName::XAccel
                    if HIDDEN.iter().any(|n| is(n))
                        && !(fastcgi && is("x-pad"))
                        && !passed_any(name) =>
                {
                    continue
                }
                _ => {}
            }
            if hidden(name) || replaced.iter().any(|r| is(r)) {
                continue;
            }
            if (!s.cookie_domain.is_empty()
                || !s.cookie_path.is_empty()
                || !s.cookie_flags.is_empty())
                && name.eq_ignore_ascii_case(b"set-cookie")
            {
                if let Some(value) = self.rewrite_cookie(s, f.value) {
                    out.field(b"Set-Cookie", &value);
                    continue;
                }
            }
            // nginx's range filter writes it last, for a response of the cache's (or its
            // own with proxy_force_ranges).
            if (ranges_last || s.force_ranges) && name.eq_ignore_ascii_case(b"accept-ranges") {
                continue;
            }
            if name.eq_ignore_ascii_case(b"refresh") {
                out.field(b"Refresh", &self.rewrite_refresh(plan, f.value));
                continue;
            }
            if f.known == KnownName::Location && !plan.is_gateway() {
                if let Some(l) = location.as_ref().filter(|_| !made_absolute) {
                    out.field(b"Location", l);
                }
                continue;
            }
            out.line(f.name, f.value, f.line);
        }
        out.lines(&extra.headers);
        match self.range_field.take() {
            // A range of the response: its place, after every other field.
            Some(range) => out.field(b"Content-Range", &range),
            // A response of known length that could have been cut says so.
            None if s.force_ranges => {
                let known = matches!(head.framing(), portcullis_http::Framing::Length(_))
                    && head.known(KnownName::ContentLength).is_some();
                if status == 200 && known {
                    out.field(b"Accept-Ranges", b"bytes");
                }
            }
            None if ranges_last => {
                for f in head.fields() {
                    if f.name.eq_ignore_ascii_case(b"accept-ranges")
                        && !s.hide_headers.iter().any(|h| h == "accept-ranges")
                    {
                        out.line(f.name, f.value, f.line);
                    }
                }
            }
            None => {}
        }
        out.end();
    }

    /// The proxied response is the cache's: its `Accept-Ranges` goes last, as nginx's
    /// range filter writes it.
    pub(crate) fn set_cache_ranges(&self) {
        self.cache_ranges.set(true);
    }

    /// The `Content-Range` of the range the response is cut to, written last.
    pub(crate) fn set_range_field(&self, value: Vec<u8>) {
        *self.range_field.borrow_mut() = Some(value);
    }

    /// `proxy_cookie_domain`, `proxy_cookie_path` and `proxy_cookie_flags` applied to a
    /// `Set-Cookie` value, as nginx's proxy module rewrites it: `None` when no rule matched
    /// (the field is passed as it came), else the cookie written anew, its attributes joined
    /// by `; `.
    fn rewrite_cookie(&self, s: &ProxySettings, value: &[u8]) -> Option<Vec<u8>> {
        let mut attrs = cookie_attributes(value);
        // The cookie itself must have a value.
        attrs.first()?.1.as_ref()?;
        let mut changed = false;
        for (key, value) in attrs.iter_mut().skip(1) {
            let Some(v) = value.as_mut() else {
                continue;
            };
            let (rules, domain) = if key.eq_ignore_ascii_case(b"domain") {
                (&s.cookie_domain, true)
            } else if key.eq_ignore_ascii_case(b"path") {
                (&s.cookie_path, false)
            } else {
                continue;
            };
            if let Some(new) = self.rewrite_cookie_value(rules, v, domain) {
                *v = Cow::Owned(new);
                changed = true;
            }
        }
        changed |= self.edit_cookie_flags(s, &mut attrs);
        if !changed {
            return None;
        }
        let mut out = Vec::with_capacity(value.len() + 16);
        for (i, (key, value)) in attrs.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b"; ");
            }
            out.extend_from_slice(key);
            if let Some(v) = value {
                out.push(b'=');
                out.extend_from_slice(v);
            }
        }
        Some(out)
    }

    /// `proxy_cookie_flags`: the flags of the first rule for the cookie's name, applied to
    /// its attributes as nginx applies them. Returns whether a rule with flags matched.
    fn edit_cookie_flags(&self, s: &ProxySettings, attrs: &mut Vec<CookieAttribute<'_>>) -> bool {
        use crate::upstream::CookieName;
        const SECURE: u16 = 1;
        const SECURE_ON: u16 = 1 << 1;
        const HTTPONLY: u16 = 1 << 2;
        const HTTPONLY_ON: u16 = 1 << 3;
        const SAMESITE: u16 = 1 << 4;
        const STRICT: u16 = 1 << 5;
        const LAX: u16 = 1 << 6;
        const NONE: u16 = 1 << 7;
        const SAMESITE_OFF: u16 = 1 << 8;
        const MASKS: &[(&str, u16)] = &[
            ("secure", SECURE | SECURE_ON),
            ("nosecure", SECURE),
            ("httponly", HTTPONLY | HTTPONLY_ON),
            ("nohttponly", HTTPONLY),
            ("samesite=strict", SAMESITE | STRICT),
            ("samesite=lax", SAMESITE | LAX),
            ("samesite=none", SAMESITE | NONE),
            ("nosamesite", SAMESITE | SAMESITE_OFF),
        ];
        let Some(name) = attrs.first().map(|a| a.0) else {
            return false;
        };
        let rule = s.cookie_flags.iter().find(|r| match &r.name {
            CookieName::Plain(t) => self.eval(t).eq_ignore_ascii_case(name),
            CookieName::Regex(re) => re.is_match(name),
        });
        let Some(rule) = rule else {
            return false;
        };
        // A flag nginx does not know (from a variable too) is passed over.
        let flags = rule.flags.iter().fold(0, |bits, t| {
            let v = self.eval(t);
            bits | MASKS
                .iter()
                .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(&v))
                .map_or(0, |(_, b)| *b)
        });
        if flags == 0 {
            return false;
        }
        // The last of each, as nginx's walk over them finds.
        let find = |attrs: &[CookieAttribute<'_>], key: &[u8]| {
            attrs
                .iter()
                .skip(1)
                .rposition(|a| a.0.eq_ignore_ascii_case(key))
                .map(|i| i + 1)
        };
        let mut drop = Vec::new();
        for (bit, on, key, written) in [
            (SECURE, SECURE_ON, &b"secure"[..], &b"Secure"[..]),
            (HTTPONLY, HTTPONLY_ON, b"httponly", b"HttpOnly"),
        ] {
            if flags & bit == 0 {
                continue;
            }
            match (find(attrs, key), flags & on != 0) {
                (None, true) => attrs.push((written, None)),
                (Some(i), false) => drop.push(i),
                _ => {}
            }
        }
        if flags & SAMESITE != 0 {
            let at = find(attrs, b"samesite");
            if flags & SAMESITE_OFF != 0 {
                drop.extend(at);
            } else {
                let value: &'static [u8] = if flags & STRICT != 0 {
                    b"Strict"
                } else if flags & LAX != 0 {
                    b"Lax"
                } else {
                    b"None"
                };
                match at {
                    Some(i) => attrs[i].1 = Some(Cow::Borrowed(value)),
                    None => attrs.push((b"SameSite", Some(Cow::Borrowed(value)))),
                }
            }
        }
        drop.sort_unstable();
        for i in drop.into_iter().rev() {
            attrs.remove(i);
        }
        true
    }

    /// The first of `rules` that matches an attribute's `value`, applied.
    fn rewrite_cookie_value(
        &self,
        rules: &[CookieRule],
        value: &[u8],
        domain: bool,
    ) -> Option<Vec<u8>> {
        // A plain domain rule does not compare a leading dot, and keeps it.
        let (dot, rest) = match value.strip_prefix(b".") {
            Some(rest) if domain => (&value[..1], rest),
            _ => (&value[..0], value),
        };
        for rule in rules {
            let replaced = match rule {
                CookieRule::Plain(from, to) => {
                    let from = self.eval(from);
                    let new = if domain {
                        (from.eq_ignore_ascii_case(rest)).then(|| self.eval(to))
                    } else {
                        rest.strip_prefix(from.as_slice()).map(|tail| {
                            let mut v = self.eval(to);
                            v.extend_from_slice(tail);
                            v
                        })
                    };
                    new.map(|mut new| {
                        let mut v = dot.to_vec();
                        v.append(&mut new);
                        v
                    })
                }
                // A regex sees the value whole and replaces it whole.
                CookieRule::Regex(re, to) => re.captures(value).map(|caps| {
                    let caps = crate::location::Captures::from_match(&caps);
                    let mut v = Vec::new();
                    to.eval_into(&mut v, &mut |var, o| match var {
                        crate::vars::Var::Capture(n) => o.extend_from_slice(caps.get(value, *n)),
                        other => self.var(other, o, None),
                    });
                    v
                }),
            };
            if replaced.is_some() {
                return replaced;
            }
        }
        None
    }

    /// proxy_redirect applied to a Location value: the rewritten value, or `None` when no
    /// rule matches. The rules are evaluated here, for the few responses that have a
    /// Location.
    fn rewrite_location(&self, plan: &Plan, value: &[u8]) -> Option<Vec<u8>> {
        match &plan.settings.redirect {
            Redirect::Default => return default_redirect(&plan.pass, value),
            Redirect::List(rules) => {
                for rule in rules {
                    match rule {
                        RedirectRule::Default => {
                            if let Some(v) = default_redirect(&plan.pass, value) {
                                return Some(v);
                            }
                        }
                        RedirectRule::Prefix(from, to) => {
                            let from = self.eval(from);
                            if let Some(rest) = value.strip_prefix(from.as_slice()) {
                                let mut v = self.eval(to);
                                v.extend_from_slice(rest);
                                return Some(v);
                            }
                        }
                        RedirectRule::Regex(re, to) => {
                            let Some(caps) = re.captures(value) else {
                                continue;
                            };
                            let mut v = Vec::new();
                            to.eval_into(&mut v, &mut |var, out| match var {
                                crate::vars::Var::Capture(n) => {
                                    if let Some(m) = caps.get(*n) {
                                        out.extend_from_slice(m.as_bytes());
                                    }
                                }
                                other => self.var(other, out, None),
                            });
                            return Some(v);
                        }
                    }
                }
            }
            Redirect::Off => {}
        }
        None
    }

    /// proxy_redirect applied to the URL of a `Refresh` field (`5; url=http://...`), as nginx
    /// applies it there too.
    fn rewrite_refresh(&self, plan: &Plan, value: &[u8]) -> Vec<u8> {
        let at = value
            .windows(4)
            .position(|w| w.eq_ignore_ascii_case(b"url="))
            .map(|i| i + 4);
        match at {
            Some(at) => {
                let mut v = value[..at].to_vec();
                match self.rewrite_location(plan, &value[at..]) {
                    Some(url) => v.extend_from_slice(&url),
                    None => v.extend_from_slice(&value[at..]),
                }
                v
            }
            None => value.to_vec(),
        }
    }
}

/// `proxy_redirect default`: the proxied URL's prefix (`proxy_pass`'s URL with its URI, or
/// its URL and `/`) becomes the location's name (or `/`). Nothing for a URL with variables.
fn default_redirect(pass: &ProxyPass, value: &[u8]) -> Option<Vec<u8>> {
    if !matches!(pass.target, Target::Group { .. }) {
        return None;
    }
    let mut from = pass.url.as_bytes().to_vec();
    let to = match &pass.uri {
        Some(u) => {
            from.extend_from_slice(u);
            pass.location.as_bytes().to_vec()
        }
        None => {
            from.push(b'/');
            b"/".to_vec()
        }
    };
    let rest = value.strip_prefix(from.as_slice())?;
    let mut v = to;
    v.extend_from_slice(rest);
    Some(v)
}

impl Request<'_> {
    /// The upstream of a `proxy_pass` URL made of variables whose host is a name: its
    /// addresses from the location's `resolver` (the request waits for them when they are not
    /// known yet), or the status to answer.
    fn resolve(&mut self, authority: &str, default_port: u16) -> Result<Group, Step> {
        let Some((host, port)) = crate::upstream::split_host_port(authority, default_port) else {
            self.log(
                Level::Error,
                &format!("invalid port in upstream \"{authority}\""),
            );
            return Err(Step::Status(502));
        };
        let Some(resolver) = self.loc.resolver.clone() else {
            self.log(
                Level::Error,
                &format!("no resolver defined to resolve {host}"),
            );
            return Err(Step::Status(502));
        };
        let timeout = self.loc.resolver_timeout;
        let found = self
            .worker
            .resolvers
            .borrow_mut()
            .find(&resolver, host, timeout);
        match found {
            Found::Addrs(ips) => {
                let addrs = ips
                    .into_iter()
                    .map(|ip| std::net::SocketAddr::new(ip, port).into())
                    .collect();
                Ok(Group::fixed(Upstream::implicit(authority, addrs)))
            }
            Found::Failed(why) => {
                self.log(Level::Error, &format!("{host} could not be resolved {why}"));
                Err(Step::Status(502))
            }
            Found::Ask(lookup) => {
                self.suspended = Some(Box::new(Resolving(lookup)));
                Err(Step::Suspend)
            }
        }
    }

    /// `$upstream_*` in nginx's formats: one value per attempt joined with ", ", times in
    /// seconds with milliseconds, "-" for a time that was not reached.
    pub(super) fn upstream_var(&self, v: &crate::vars::Var, out: &mut Vec<u8>) {
        use crate::vars::Var;
        use std::io::Write as _;
        let secs = |out: &mut Vec<u8>, t: Option<std::time::Duration>| match t {
            Some(t) => super::write_seconds(out, t),
            None => out.push(b'-'),
        };
        for (i, a) in self.upstream_attempts.iter().enumerate() {
            if a.next_exchange {
                out.extend_from_slice(b" : ");
            } else if i > 0 {
                out.extend_from_slice(b", ");
            }
            match v {
                Var::UpstreamAddr => out.extend_from_slice(a.addr.as_bytes()),
                Var::UpstreamStatus => match a.status {
                    Some(s) => {
                        let _ = write!(out, "{s}");
                    }
                    None => out.push(b'-'),
                },
                Var::UpstreamResponseTime => secs(out, Some(a.response)),
                Var::UpstreamConnectTime => secs(out, a.connect),
                Var::UpstreamHeaderTime => secs(out, a.header),
                Var::UpstreamResponseLength => {
                    let _ = write!(out, "{}", a.length);
                }
                Var::UpstreamBytesSent => {
                    let _ = write!(out, "{}", a.bytes_sent);
                }
                Var::UpstreamBytesReceived => {
                    let _ = write!(out, "{}", a.bytes_received);
                }
                _ => {}
            }
        }
    }
}

/// A cookie attribute: its name and value (`None` without `=`).
type CookieAttribute<'a> = (&'a [u8], Option<Cow<'a, [u8]>>);

/// A `Set-Cookie` value's attributes as nginx's proxy module splits them: `;`-separated
/// `key[=value]` pairs, spaces around each part dropped.
fn cookie_attributes(value: &[u8]) -> Vec<CookieAttribute<'_>> {
    fn trim(p: &[u8]) -> &[u8] {
        let start = p.iter().take_while(|&&b| b == b' ').count();
        let end = p.len() - p[start..].iter().rev().take_while(|&&b| b == b' ').count();
        &p[start..end]
    }
    value
        .split(|&b| b == b';')
        .map(|part| match part.iter().position(|&b| b == b'=') {
            Some(eq) => (
                trim(&part[..eq]),
                Some(Cow::Borrowed(trim(&part[eq + 1..]))),
            ),
            None => (trim(part), None),
        })
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// A request waiting for a host name of its `proxy_pass` to be resolved.
struct Resolving(crate::upstream::resolve::Lookup);

impl super::Suspension for Resolving {
    fn resume<'r>(
        self: Box<Self>,
        req: &'r mut Request<'_>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'r>> {
        Box::pin(async move {
            let answered = self.0.run().await;
            req.worker().resolvers.borrow_mut().put(answered);
        })
    }
}

/// `grpc://` or `grpcs://` (any case) at the start of `url`: whether it is TLS, and the rest.
fn grpc_scheme(url: &[u8]) -> Option<(bool, &[u8])> {
    let has = |scheme: &[u8]| {
        url.get(..scheme.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(scheme))
    };
    if has(b"grpcs://") {
        Some((true, &url[8..]))
    } else if has(b"grpc://") {
        Some((false, &url[7..]))
    } else {
        None
    }
}
