//! The configuration of the Gateway API's servers: `map`s of matches, `split_clients` of
//! weights, locations tried in the API's order, and each rule's filters and backends.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::listeners::{meet, ListenerPlan};
use super::routes::{header_variable, Candidate, Groups, PathKind, Target, INTERNAL};
use crate::cluster::{prefix_rewrites, quote, upstream_block, Settings, PROXY_HEADERS};

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
    /// The locations of the every-host server of an Ingress port, and its listener's
    /// certificate, by port.
    pub catch_all: BTreeMap<u16, super::objects::CatchAll>,
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
    // Every programmed listener's port listens, routes or not.
    let ports: BTreeSet<u16> = (servers.keys().map(|(p, _)| *p))
        .chain(
            listeners
                .iter()
                .filter(|l| l.refused.is_none())
                .map(|l| l.port),
        )
        .collect();
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
        };
        let has_catch_all = servers.contains_key(&(port, String::new()));
        for (p, host) in servers.keys().filter(|(p, _)| *p == port) {
            let body = server_locations(&with_covering(servers, *p, host), &mut maps);
            if host.is_empty() && ingress_port(*p) {
                out.catch_all.insert(*p, (body, tls_of(host)));
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
                let (crt, key) =
                    tls_of(host).unwrap_or_else(|| settings.default_certificate.clone());
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
    /// The variable made for `key`, or a new `$gateway_{kind}_N` whose block `block` writes.
    fn variable(&mut self, key: String, kind: &str, block: impl FnOnce(&str) -> String) -> String {
        if let Some(v) = self.made.get(&key) {
            return v.clone();
        }
        let var = format!("$gateway_{kind}_{}", self.made.len());
        self.text.push_str(&block(&var));
        self.made.insert(key, var.clone());
        var
    }

    /// A variable that is `1` when every condition holds, else `0`.
    fn all(&mut self, conditions: &[String]) -> String {
        let vars: Vec<String> = conditions.iter().map(|c| self.one(c)).collect();
        if let [one] = vars.as_slice() {
            return one.clone();
        }
        let key = vars.join("");
        let all = "1".repeat(vars.len());
        self.variable(key.clone(), "match", |var| {
            format!("map \"{key}\" {var} {{\n    {all} 1;\n    default 0;\n}}\n")
        })
    }

    /// A variable that is `1` when `condition` (a variable and a pattern) holds, else `0`.
    fn one(&mut self, condition: &str) -> String {
        let (source, pattern) = condition.split_once(' ').unwrap_or((condition, ""));
        self.variable(condition.to_owned(), "match", |var| {
            format!("map {source} {var} {{\n    {pattern} 1;\n    default 0;\n}}\n")
        })
    }

    /// A variable holding the request's header `name` with `value` added after a comma,
    /// or `value` alone when it has none.
    fn appended(&mut self, name: &str, value: &str) -> String {
        let source = header_variable(name);
        self.variable(format!("{source} + {value}"), "header", |var| {
            format!(
                "map {source} {var} {{\n    \"\" {};\n    default {};\n}}\n",
                quote(value),
                quote(&format!("{source},{value}"))
            )
        })
    }

    /// A variable naming one of `backends`' groups by weight (empty for an unresolved one).
    fn split(&mut self, backends: &[(Option<String>, u32)]) -> String {
        self.variable(format!("{backends:?}"), "split", |var| {
            let mut text = format!("split_clients $request_id {var} {{\n");
            let total: u64 = backends.iter().map(|(_, w)| u64::from(*w)).sum();
            let (mut sum, mut given) = (0u64, 0u64);
            let last = backends.iter().rposition(|(_, w)| *w > 0).unwrap_or(0);
            for (i, (group, weight)) in backends.iter().enumerate().filter(|(_, (_, w))| *w > 0) {
                let value = group.as_deref().unwrap_or("\"\"");
                if i == last {
                    let _ = writeln!(text, "    * {value};");
                    break;
                }
                sum += u64::from(*weight);
                // Hundredths of a percent, rounded where the sum so far falls.
                let upto = (sum * 10_000 + total / 2) / total;
                let share = upto - given;
                given = upto;
                if share > 0 {
                    let _ = writeln!(text, "    {}.{:02}% {value};", share / 100, share % 100);
                }
            }
            text.push_str("}\n");
            text
        })
    }
}

/// A server's candidates, and those of the less specific hosts of its port that cover its
/// host after them: the rules of the routes naming the host exactly come first, then a
/// wildcard's (the longest first), then those of every host, as the API gives precedence.
fn with_covering(
    servers: &BTreeMap<(u16, String), Vec<Candidate>>,
    port: u16,
    host: &str,
) -> Vec<Candidate> {
    let mut out = Vec::new();
    for ((p, h), candidates) in servers.iter().filter(|((p, _), _)| *p == port) {
        let _ = p;
        let covers = h
            .strip_prefix('*')
            .is_some_and(|suffix| host.ends_with(suffix) && host.len() > suffix.len());
        let rank = if h == host {
            (0, 0)
        } else if covers {
            (1, usize::MAX - h.len())
        } else if h.is_empty() {
            (2, 0)
        } else {
            continue;
        };
        out.extend(candidates.iter().cloned().map(|mut c| {
            c.host = rank;
            c
        }));
    }
    out
}

/// A server's locations. nginx picks an exact location, else the first regular expression
/// that matches, else the longest prefix; each location tries, in the API's order, every
/// candidate a request reaching it may match: its own, then the less specific ones (a
/// prefix covering it; at a regular expression, the later ones and the prefixes, each
/// checked against the path).
fn server_locations(candidates: &[Candidate], maps: &mut Maps) -> String {
    let within = |path: &str, prefix: &str| {
        prefix == "/" || path == prefix || path.starts_with(&format!("{prefix}/"))
    };
    let mut places: BTreeSet<Place> = BTreeSet::new();
    for c in candidates {
        match &c.target.path {
            PathKind::Exact(p) => places.insert(Place::Exact(p.clone())),
            PathKind::Prefix(p) if p == "/" => places.insert(Place::Prefix("/".into())),
            PathKind::Prefix(p) => {
                places.insert(Place::Exact(p.clone()));
                places.insert(Place::Prefix(format!("{p}/")))
            }
            PathKind::Regex(p) => places.insert(Place::Regex(p.clone())),
        };
    }
    let best = |regex: &str| {
        (candidates.iter())
            .filter(|c| c.target.path == PathKind::Regex(regex.to_owned()))
            .map(|c| (c.host, c.rank))
            .min()
    };
    // Regular expressions in the order their best candidates come: nginx takes the first.
    let mut regexes: Vec<String> = (places.iter())
        .filter_map(|p| match p {
            Place::Regex(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    regexes.sort_by_key(|r| best(r));
    let regex_order = |r: &str| regexes.iter().position(|x| x == r).unwrap_or(usize::MAX);
    let whole = |r: &str| regex::Regex::new(&format!("^(?:{r})$")).ok();
    // Who is tried at a place, with the path condition a regex location adds.
    let tried_at = |place: &Place| -> Vec<(&Candidate, Option<String>)> {
        let mut tried: Vec<(&Candidate, Option<String>)> = (candidates.iter())
            .filter_map(|c| {
                let path = &c.target.path;
                let on_uri = |pattern: String| Some(Some(format!("$uri {}", quote(&pattern))));
                let condition = match (path, place) {
                    (PathKind::Exact(x), Place::Exact(p)) if x == p => Some(None),
                    (PathKind::Prefix(q), Place::Exact(p)) if within(p, q) => Some(None),
                    (PathKind::Regex(r), Place::Exact(p)) => {
                        whole(r).filter(|re| re.is_match(p)).map(|_| None)
                    }
                    (PathKind::Prefix(q), Place::Prefix(p)) => {
                        let p = if p == "/" {
                            p.as_str()
                        } else {
                            p.trim_end_matches('/')
                        };
                        within(p, q).then_some(None)
                    }
                    (PathKind::Regex(r), Place::Regex(here)) if r == here => Some(None),
                    (PathKind::Regex(r), Place::Regex(here))
                        if regex_order(r) > regex_order(here) =>
                    {
                        on_uri(format!("~^(?:{r})$"))
                    }
                    (PathKind::Prefix(q), Place::Regex(_)) if q == "/" => Some(None),
                    (PathKind::Prefix(q), Place::Regex(_)) => {
                        on_uri(format!("~^{}(/|$)", regex::escape(q)))
                    }
                    _ => None,
                };
                condition.map(|on_path| (c, on_path))
            })
            .collect();
        tried.sort_by_key(|(c, _)| (c.host, c.rank));
        tried
    };
    let mut ordered: Vec<Place> = places
        .into_iter()
        .filter(|p| !matches!(p, Place::Regex(_)))
        .collect();
    ordered.extend(regexes.iter().map(|r| Place::Regex(r.clone())));
    let mut out = String::new();
    let mut internal = 0usize;
    for place in ordered {
        let tried = tried_at(&place);
        let head = match &place {
            Place::Exact(p) => format!("location = {p}"),
            Place::Prefix(p) => format!("location {p}"),
            Place::Regex(p) => format!("location ~ {}", quote(&format!("^(?:{p})$"))),
        };
        let Some((first, first_path)) = tried.first() else {
            continue;
        };
        if first.conditions.is_empty() && first_path.is_none() {
            // What matches every request here answers it: the rest are never tried.
            let _ = writeln!(out, "    {head} {{ {} }}", body(&first.target, "", maps));
            continue;
        }
        let mut inner = String::new();
        let mut tries = String::new();
        for (c, path) in &tried {
            let prefix = format!("{INTERNAL}{internal}");
            internal += 1;
            let jump = format!("rewrite ^ {prefix}$uri last;");
            let _ = writeln!(
                inner,
                "    location ^~ {prefix}/ {{ internal; {} }}",
                body(&c.target, &prefix, maps)
            );
            let conditions: Vec<String> =
                c.conditions.iter().cloned().chain(path.clone()).collect();
            if conditions.is_empty() {
                let _ = write!(tries, " {jump}");
                break;
            }
            let var = maps.all(&conditions);
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
        None => {}
    }
    // After an internal redirect, the URI the client sent goes on as it was sent.
    let uri = if !strip.is_empty() && rewrite.and_then(|r| r.path.as_ref()).is_none() {
        "$request_uri"
    } else {
        ""
    };
    // The request's headers: the controller's, then the filter's.
    let mut headers: Vec<(String, String)> = (PROXY_HEADERS.iter())
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
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
            let _ = write!(out, " proxy_pass http://{group}{uri};");
        }
        _ => {
            let var = maps.split(&t.backends);
            let _ = write!(
                out,
                " if ({var} = \"\") {{ return 500; }} proxy_pass http://{var}{uri};"
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
