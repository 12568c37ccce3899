//! The configuration of the Gateway API's servers: `map`s of matches, `split_clients` of
//! weights, locations tried in the API's order, and each rule's filters and backends.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::listeners::{meet, ListenerPlan};
use super::routes::{Candidate, Groups, PathKind, Target};
use crate::cluster::{prefix_rewrites, quote, upstream_block, Settings};

/// A location of a server: `= /p`, `/p/` (or `/`), `~ re`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Place {
    Exact(String),
    Prefix(String),
    Regex(String),
}

/// The configuration of the routes' servers.
#[derive(Default)]
pub(super) struct Emitted {
    /// `upstream`, `map`, `split_clients` and `server` blocks.
    pub http: String,
    /// The locations of the every-host server of an Ingress port, by port.
    pub catch_all: BTreeMap<u16, String>,
    pub upstreams: BTreeMap<String, Vec<String>>,
}

/// The groups, maps and servers of `servers` into `out`: the servers of a port of the
/// Gateways' own with a default one, the every-host server of an Ingress port as that
/// port's default server's locations.
pub(super) fn configuration(
    out: &mut Emitted,
    servers: &BTreeMap<(u16, String), Vec<Candidate>>,
    groups: Groups,
    listeners: &[ListenerPlan],
    protocols: &BTreeMap<u16, bool>,
    settings: &Settings,
) {
    let mut http = String::new();
    for (name, servers) in &groups.servers {
        upstream_block(&mut http, name, "", servers);
    }
    out.upstreams = groups.servers;
    let mut maps = Maps::default();
    let mut blocks = String::new();
    let ingress_port = |p: u16| p == settings.http_port || p == settings.https_port;
    let ports: BTreeSet<u16> = servers.keys().map(|(p, _)| *p).collect();
    for port in ports {
        let https = protocols.get(&port).copied().unwrap_or(false);
        let tls_of = |host: &str| {
            (listeners.iter())
                .filter(|l| l.port == port && l.refused.is_none())
                .find(|l| l.listener.hostname.as_deref().unwrap_or("") == host)
                .or_else(|| {
                    (listeners.iter()).find(|l| {
                        l.port == port
                            && l.refused.is_none()
                            && meet(l.listener.hostname.as_deref(), &[host.to_owned()])
                                .contains(&host.to_owned())
                    })
                })
                .and_then(|l| l.tls.clone())
                .unwrap_or_else(|| settings.default_certificate.clone())
        };
        let has_catch_all = servers.contains_key(&(port, String::new()));
        for ((p, host), candidates) in servers.iter().filter(|((p, _), _)| *p == port) {
            let body = server_locations(candidates, &mut maps);
            if host.is_empty() && ingress_port(*p) {
                out.catch_all.insert(*p, body);
                continue;
            }
            let ssl = if https { " ssl" } else { "" };
            let default = if host.is_empty() {
                " default_server"
            } else {
                ""
            };
            let _ = writeln!(blocks, "server {{\n    listen {p}{ssl}{default};");
            let _ = writeln!(
                blocks,
                "    server_name {};",
                if host.is_empty() { "_" } else { host }
            );
            if https {
                let (crt, key) = tls_of(host);
                let _ = writeln!(
                    blocks,
                    "    ssl_certificate {};\n    ssl_certificate_key {};",
                    crt.display(),
                    key.display()
                );
            }
            blocks.push_str(&body);
            blocks.push_str("}\n");
        }
        // A port of the Gateways' own: what no host routes is 404.
        if !has_catch_all && !ingress_port(port) {
            let ssl = if https { " ssl" } else { "" };
            let _ = writeln!(
                blocks,
                "server {{\n    listen {port}{ssl} default_server;\n    server_name _;"
            );
            if https {
                let (crt, key) = &settings.default_certificate;
                let _ = writeln!(
                    blocks,
                    "    ssl_certificate {};\n    ssl_certificate_key {};",
                    crt.display(),
                    key.display()
                );
            }
            blocks.push_str("    location / { return 404; }\n}\n");
        }
    }
    http.push_str(&maps.text);
    http.push_str(&blocks);
    out.http = http;
}

/// The `map`s and `split_clients` of the routes' matches and weights, each made once.
#[derive(Default)]
struct Maps {
    text: String,
    /// A condition (or a set of them) to its variable.
    made: BTreeMap<String, String>,
}

impl Maps {
    /// A variable that is `1` when every condition holds, else `0`.
    fn all(&mut self, conditions: &[String]) -> String {
        let vars: Vec<String> = conditions.iter().map(|c| self.one(c)).collect();
        if vars.len() == 1 {
            return vars[0].clone();
        }
        let key = vars.join("");
        if let Some(v) = self.made.get(&key) {
            return v.clone();
        }
        let var = format!("$gateway_match_{}", self.made.len());
        let _ = writeln!(
            self.text,
            "map \"{key}\" {var} {{\n    {} 1;\n    default 0;\n}}",
            "1".repeat(vars.len())
        );
        self.made.insert(key, var.clone());
        var
    }

    fn one(&mut self, condition: &str) -> String {
        if let Some(v) = self.made.get(condition) {
            return v.clone();
        }
        let var = format!("$gateway_match_{}", self.made.len());
        let (source, pattern) = condition.split_once(' ').unwrap_or((condition, ""));
        let _ = writeln!(
            self.text,
            "map {source} {var} {{\n    {pattern} 1;\n    default 0;\n}}"
        );
        self.made.insert(condition.to_owned(), var.clone());
        var
    }

    /// A variable holding the request's header `name` with `value` added after a comma,
    /// or `value` alone when it has none.
    fn appended(&mut self, name: &str, value: &str) -> String {
        let source = format!("$http_{}", name.to_ascii_lowercase().replace('-', "_"));
        let key = format!("{source} + {value}");
        if let Some(v) = self.made.get(&key) {
            return v.clone();
        }
        let var = format!("$gateway_header_{}", self.made.len());
        let _ = writeln!(
            self.text,
            "map {source} {var} {{\n    \"\" {};\n    default {};\n}}",
            quote(value),
            quote(&format!("{source},{value}"))
        );
        self.made.insert(key, var.clone());
        var
    }

    /// A variable naming one of `backends`' groups by weight (empty for an unresolved one).
    fn split(&mut self, backends: &[(Option<String>, u32)]) -> String {
        let key = format!("{backends:?}");
        if let Some(v) = self.made.get(&key) {
            return v.clone();
        }
        let var = format!("$gateway_split_{}", self.made.len());
        self.made.insert(key, var.clone());
        let total: u64 = backends.iter().map(|(_, w)| u64::from(*w)).sum();
        let _ = writeln!(self.text, "split_clients $request_id {var} {{");
        let (mut sum, mut given) = (0u64, 0u64);
        let last = backends.iter().rposition(|(_, w)| *w > 0).unwrap_or(0);
        for (i, (group, weight)) in backends.iter().enumerate().filter(|(_, (_, w))| *w > 0) {
            let value = group.as_deref().unwrap_or("\"\"");
            if i == last {
                let _ = writeln!(self.text, "    * {value};");
                break;
            }
            sum += u64::from(*weight);
            // Hundredths of a percent, rounded where the sum so far falls.
            let upto = (sum * 10_000 + total / 2) / total;
            let share = upto - given;
            given = upto;
            if share > 0 {
                let _ = writeln!(
                    self.text,
                    "    {}.{:02}% {value};",
                    share / 100,
                    share % 100
                );
            }
        }
        self.text.push_str("}\n");
        var
    }
}

/// A server's locations: each place's candidates, tried in order.
fn server_locations(candidates: &[Candidate], maps: &mut Maps) -> String {
    let mut places: BTreeMap<Place, Vec<&Candidate>> = BTreeMap::new();
    for c in candidates {
        match &c.target.path {
            PathKind::Exact(p) => places.entry(Place::Exact(p.clone())).or_default().push(c),
            PathKind::Prefix(p) if p == "/" => {
                places.entry(Place::Prefix("/".into())).or_default().push(c)
            }
            PathKind::Prefix(p) => {
                places.entry(Place::Exact(p.clone())).or_default().push(c);
                places
                    .entry(Place::Prefix(format!("{p}/")))
                    .or_default()
                    .push(c);
            }
            PathKind::Regex(p) => places.entry(Place::Regex(p.clone())).or_default().push(c),
        }
    }
    // Where a location's own matches all fail, the less specific paths that cover its own
    // are tried next, as the API orders them: shorter prefixes, and under a regular
    // expression, the prefix `/`.
    let covering = |place: &Place| -> Vec<&Candidate> {
        let within = |path: &str, prefix: &str| {
            prefix == "/" || path == prefix || path.starts_with(&format!("{prefix}/"))
        };
        (candidates.iter())
            .filter(|c| match (&c.target.path, place) {
                (PathKind::Prefix(q), Place::Exact(p)) => within(p.as_str(), q.as_str()),
                (PathKind::Prefix(q), Place::Prefix(p)) => {
                    q.len() < p.len() - 1 && within(p.trim_end_matches('/'), q.as_str())
                }
                (PathKind::Prefix(q), Place::Regex(_)) => q == "/",
                _ => false,
            })
            .collect()
    };
    let mut out = String::new();
    let mut internal = 0usize;
    for (place, mut tried) in places {
        tried.sort_by_key(|c| c.rank);
        if tried.iter().all(|c| !c.conditions.is_empty()) {
            let mut next = covering(&place);
            next.retain(|c| !tried.iter().any(|t| std::ptr::eq(*t, *c)));
            next.sort_by_key(|c| c.rank);
            tried.extend(next);
        }
        let head = match &place {
            Place::Exact(p) => format!("location = {p}"),
            Place::Prefix(p) => format!("location {p}"),
            Place::Regex(p) => format!("location ~ {}", quote(&format!("^(?:{p})$"))),
        };
        if tried[0].conditions.is_empty() {
            // What matches every request here answers it: the rest are never tried.
            let _ = writeln!(out, "    {head} {{ {} }}", body(&tried[0].target, "", maps));
            continue;
        }
        let mut inner = String::new();
        let mut tries = String::new();
        for c in &tried {
            let prefix = format!("/_portcullis-gateway-{internal}");
            internal += 1;
            let jump = format!("rewrite ^(.*)$ {prefix}$1 last;");
            let _ = writeln!(
                inner,
                "    location ^~ {prefix}/ {{ internal; {} }}",
                body(&c.target, &prefix, maps)
            );
            if c.conditions.is_empty() {
                tries.push_str(&jump);
                break;
            }
            let var = maps.all(&c.conditions);
            let _ = write!(tries, " if ({var}) {{ {jump} }}");
        }
        let _ = writeln!(out, "    {head} {{{tries} return 404; }}");
        out.push_str(&inner);
    }
    if !out.contains("    location / ") {
        out.push_str("    location / { return 404; }\n");
    }
    out
}

/// What answers a target's requests; `strip`: what an internal redirect put before the path.
fn body(t: &Target, strip: &str, maps: &mut Maps) -> String {
    let mut out = String::new();
    let find = |kind: &str| t.filters.iter().find(|f| f.kind == kind);
    let prefix = match &t.path {
        PathKind::Prefix(p) => Some(p.as_str()),
        _ => None,
    };
    if let Some(r) = find("RequestRedirect").and_then(|f| f.request_redirect.as_ref()) {
        let scheme = r
            .scheme
            .clone()
            .unwrap_or_else(|| if t.https { "https" } else { "http" }.into());
        let host = r.hostname.clone().unwrap_or_else(|| "$host".into());
        let port = match (r.port, &r.scheme) {
            (Some(p), _) => Some(p),
            (None, Some(_)) => None,
            (None, None) => Some(i32::from(t.port)),
        };
        let port = match port {
            Some(80) if scheme == "http" => String::new(),
            Some(443) if scheme == "https" => String::new(),
            Some(p) => format!(":{p}"),
            None => String::new(),
        };
        let code = r.status_code.unwrap_or(302);
        let origin = format!("{scheme}://{host}{port}");
        match &r.path {
            Some(p) if p.kind == "ReplacePrefixMatch" => {
                let flag = if code == 301 { "permanent" } else { "redirect" };
                let to = p.replace_prefix_match.as_deref().unwrap_or("/");
                for (pattern, replacement) in prefix_rewrites(strip, prefix.unwrap_or("/"), to) {
                    let _ = write!(
                        out,
                        "rewrite {} {} {flag}; ",
                        quote(&pattern),
                        quote(&format!("{origin}{replacement}"))
                    );
                }
                out.push_str("return 404;");
            }
            Some(p) => {
                let to = p.replace_full_path.as_deref().unwrap_or("/");
                let _ = write!(
                    out,
                    "return {code} {};",
                    quote(&format!("{origin}{to}$is_args$args"))
                );
            }
            None => {
                let _ = write!(
                    out,
                    "return {code} {};",
                    quote(&format!("{origin}$request_uri"))
                );
            }
        }
        return out;
    }
    // The URI: rewritten, or back to what the client sent after an internal redirect.
    let rewrite = find("URLRewrite").and_then(|f| f.url_rewrite.as_ref());
    match rewrite.and_then(|r| r.path.as_ref()) {
        Some(p) if p.kind == "ReplaceFullPath" => {
            let to = p.replace_full_path.as_deref().unwrap_or("/");
            let _ = write!(out, "rewrite ^ {} break; ", quote(to));
        }
        Some(p) => {
            let to = p.replace_prefix_match.as_deref().unwrap_or("/");
            for (pattern, replacement) in prefix_rewrites(strip, prefix.unwrap_or("/"), to) {
                let _ = write!(
                    out,
                    "rewrite {} {} break; ",
                    quote(&pattern),
                    quote(&replacement)
                );
            }
        }
        None if !strip.is_empty() => {
            let _ = write!(
                out,
                "rewrite {} $1 break; ",
                quote(&format!("^{}(/.*)$", regex::escape(strip)))
            );
        }
        None => {}
    }
    // The request's headers: the controller's, then the filter's.
    let mut headers: Vec<(String, String)> = [
        ("Host", "$host"),
        ("X-Real-IP", "$remote_addr"),
        ("X-Forwarded-For", "$proxy_add_x_forwarded_for"),
        ("X-Forwarded-Host", "$host"),
        ("X-Forwarded-Port", "$server_port"),
        ("X-Forwarded-Proto", "$scheme"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .into();
    if let Some(host) = rewrite.and_then(|r| r.hostname.as_ref()) {
        set_header(&mut headers, "Host", host.clone());
    }
    if let Some(m) = find("RequestHeaderModifier").and_then(|f| f.request_header_modifier.as_ref())
    {
        for h in &m.set {
            set_header(&mut headers, &h.name, quote(&h.value));
        }
        for h in &m.add {
            // Added to what the client sent, if it sent one.
            let var = maps.appended(&h.name, &h.value);
            set_header(&mut headers, &h.name, var);
        }
        for name in &m.remove {
            set_header(&mut headers, name, "\"\"".into());
        }
    }
    out.push_str("proxy_http_version 1.1;");
    for (name, value) in &headers {
        let _ = write!(out, " proxy_set_header {name} {value};");
    }
    if let Some(m) =
        find("ResponseHeaderModifier").and_then(|f| f.response_header_modifier.as_ref())
    {
        for h in &m.set {
            let _ = write!(
                out,
                " proxy_hide_header {}; add_header {} {} always;",
                h.name,
                h.name,
                quote(&h.value)
            );
        }
        for h in &m.add {
            let _ = write!(out, " add_header {} {} always;", h.name, quote(&h.value));
        }
        for name in &m.remove {
            let _ = write!(out, " proxy_hide_header {name};");
        }
    }
    let live: Vec<&(Option<String>, u32)> = t.backends.iter().filter(|(_, w)| *w > 0).collect();
    match live.as_slice() {
        [] => out.push_str(" return 500;"),
        [(None, _)] => out.push_str(" return 500;"),
        [(Some(group), _)] => {
            let _ = write!(out, " proxy_pass http://{group};");
        }
        _ => {
            let var = maps.split(&t.backends);
            let _ = write!(
                out,
                " if ({var} = \"\") {{ return 500; }} proxy_pass http://{var};"
            );
        }
    }
    out
}

fn set_header(headers: &mut Vec<(String, String)>, name: &str, value: String) {
    match headers
        .iter_mut()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
    {
        Some(h) => h.1 = value,
        None => headers.push((name.to_owned(), value)),
    }
}
