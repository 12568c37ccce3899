//! HTTPRoutes: what refuses one, the listeners each attaches to, and its rules as the
//! candidates each server tries, with the groups of their backends.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::listeners::{allows, meet, ListenerPlan};
use super::objects::{
    granted, Filter, Gateway, HeaderModifier, HttpRoute, Redirect, Reference, RouteMatch, Rule,
    Status, ValueMatch, GROUP,
};
use super::status::condition;
use crate::cluster::{
    age, names, plain_path, plain_regex, printable, quote, service_servers, valid_host, Cluster,
    Settings,
};

/// The prefix of the internal locations a conditioned location jumps to; no route's path
/// may begin with it.
pub(super) const INTERNAL: &str = "/_portcullis-gateway-";

/// One match of one rule of one route, where it is tried.
#[derive(Clone)]
pub(super) struct Candidate {
    /// Order among the others tried at a location (smaller first): exact paths, regular
    /// expressions, longer prefixes; a method; more headers; more query parameters; the
    /// older route; the rule and match written first.
    pub rank: (u8, usize, u8, usize, usize, usize, usize, usize),
    /// Before the rank: the host's precedence where the candidate is tried (its own
    /// host's first, then a wildcard's, then every host's).
    pub host: (u8, usize),
    pub conditions: Vec<String>,
    /// The location's body that answers it, given the part of the URI an internal
    /// redirect put before the path.
    pub target: Target,
}

#[derive(Clone)]
pub(super) struct Target {
    pub path: PathKind,
    pub filters: Vec<Filter>,
    /// Group names and weights; `None`: a backend that could not be resolved (500).
    pub backends: Vec<(Option<String>, u32)>,
    /// The listener's protocol and port, for redirects.
    pub https: bool,
    pub port: u16,
}

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) enum PathKind {
    Exact(String),
    /// Without its trailing `/` (`/` itself kept).
    Prefix(String),
    Regex(String),
}

/// What the Ingresses hold on their ports: the hosts of `http_port` and `https_port`, and
/// whether their default server has routes (then it keeps every host of its ports).
pub struct Taken {
    pub hosts: BTreeSet<(u16, String)>,
    pub default_routes: bool,
}

/// What the routes come to: each server's candidates by port and host (`""`: every host),
/// the groups of their backends, and each route's status.
pub(super) struct Attached {
    pub servers: BTreeMap<(u16, String), Vec<Candidate>>,
    pub groups: Groups,
    pub statuses: Vec<Status>,
}

/// Attaches every route (oldest first) to the listeners its parents name and allow it.
pub(super) fn attach(
    gateways: &[&Gateway],
    listeners: &mut [ListenerPlan],
    cluster: &Cluster,
    settings: &Settings,
    taken: &Taken,
) -> Attached {
    let mut statuses = Vec::new();
    let mut routes: Vec<&HttpRoute> = cluster.routes.iter().collect();
    routes.sort_by_key(|r| age(&r.metadata));
    let mut servers: BTreeMap<(u16, String), Vec<Candidate>> = BTreeMap::new();
    let mut groups = Groups::default();
    for (order, route) in routes.iter().enumerate() {
        let (namespace, name) = names(&route.metadata);
        let mut parents = Vec::new();
        for parent in &route.spec.parent_refs {
            let is_gateway = parent.group.as_deref().unwrap_or(GROUP) == GROUP
                && parent.kind.as_deref().unwrap_or("Gateway") == "Gateway";
            let parent_ns = parent
                .namespace
                .clone()
                .unwrap_or_else(|| namespace.clone());
            let found = (gateways.iter().position(|g| {
                let (ns, n) = names(&g.metadata);
                ns == parent_ns && n == parent.name
            }))
            .filter(|_| is_gateway);
            // Another controller's Gateway: its status is not ours to write.
            let Some(g) = found else { continue };
            let mut accepted = Vec::new();
            let mut reason = (
                "NoMatchingParent",
                "no listener of the Gateway matches".to_owned(),
            );
            for (i, l) in listeners.iter().enumerate() {
                if l.gateway != g
                    || parent
                        .section_name
                        .as_ref()
                        .is_some_and(|s| *s != l.listener.name)
                    || parent.port.is_some_and(|p| p != l.listener.port)
                    || l.refused.is_some()
                {
                    continue;
                }
                if !allows(&l.listener, &parent_ns, &namespace, &cluster.namespaces) {
                    reason = (
                        "NotAllowedByListeners",
                        "the listener does not allow routes from this namespace".into(),
                    );
                    continue;
                }
                let hosts = meet(l.listener.hostname.as_deref(), &route.spec.hostnames);
                if hosts.is_empty() {
                    reason = (
                        "NoMatchingListenerHostname",
                        "no hostname of the route matches the listener's".into(),
                    );
                    continue;
                }
                accepted.push((i, hosts));
            }
            let checked = check_route(route, &namespace);
            let mut conditions = Vec::new();
            let generation = route.metadata.generation;
            match (&checked, accepted.is_empty()) {
                (Err(why), _) => conditions.push(condition(
                    "Accepted",
                    false,
                    "UnsupportedValue",
                    why,
                    generation,
                )),
                (Ok(()), true) => conditions.push(condition(
                    "Accepted", false, reason.0, &reason.1, generation,
                )),
                (Ok(()), false) => {
                    let mut skipped = Vec::new();
                    for (i, hosts) in &accepted {
                        let l = &mut listeners[*i];
                        l.attached += 1;
                        for host in hosts {
                            let key = (l.port, host.clone());
                            let ingress_holds = taken.hosts.contains(&key)
                                || (host.is_empty()
                                    && (l.port == settings.http_port
                                        || l.port == settings.https_port)
                                    && taken.default_routes);
                            if ingress_holds {
                                skipped.push(format!(
                                    "{}:{}",
                                    if host.is_empty() { "*" } else { host },
                                    l.port
                                ));
                                continue;
                            }
                            let https = l.tls.is_some();
                            let at = servers.entry(key).or_default();
                            for (r, rule) in route.spec.rules.iter().enumerate() {
                                let backends = groups.of(rule, &namespace, &name, cluster);
                                add_rule(at, rule, r, order, backends, https, l.port);
                            }
                        }
                    }
                    let message = if skipped.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "hosts an Ingress holds are left to it: {}",
                            skipped.join(", ")
                        )
                    };
                    conditions.push(condition(
                        "Accepted", true, "Accepted", &message, generation,
                    ));
                }
            }
            let unresolved = unresolved(route, &namespace, cluster);
            conditions.push(match &unresolved {
                Some((reason, why)) => condition("ResolvedRefs", false, reason, why, generation),
                None => condition("ResolvedRefs", true, "ResolvedRefs", "", generation),
            });
            parents.push(json!({
                "parentRef": parent,
                "controllerName": settings.gateway_controller,
                "conditions": conditions,
            }));
        }
        if !parents.is_empty() {
            statuses.push(Status {
                kind: "HTTPRoute",
                namespace,
                name,
                status: json!({"parents": parents}),
            });
        }
    }

    Attached {
        servers,
        groups,
        statuses,
    }
}

/// What refuses a route: a value that cannot be written into the configuration as the
/// API means it, or a filter not implemented.
fn check_route(route: &HttpRoute, _namespace: &str) -> Result<(), String> {
    for host in &route.spec.hostnames {
        if !valid_host(host) {
            return Err(format!("invalid hostname \"{host}\""));
        }
    }
    for rule in &route.spec.rules {
        for m in &rule.matches {
            let path = path_of(m)?;
            match &path {
                PathKind::Exact(p) | PathKind::Prefix(p)
                    if !plain_path(p) || p.starts_with(INTERNAL) =>
                {
                    return Err(format!("path \"{p}\" is not supported"));
                }
                PathKind::Regex(p) if !plain_regex(&format!("^(?:{p})$")) => {
                    return Err(format!("path \"{p}\" is not a regular expression"));
                }
                _ => {}
            }
            for (what, matches) in [("header", &m.headers), ("query parameter", &m.query_params)] {
                for v in matches {
                    if !v
                        .name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                        // `$http_x_a` is the header `X-A`: `X_A` would be read as it.
                        || (what == "header" && v.name.contains('_'))
                        || (what != "header" && v.name.contains('-'))
                        || v.name.is_empty()
                    {
                        return Err(format!("{what} name \"{}\" is not supported", v.name));
                    }
                    if !printable(&v.value) {
                        return Err(format!("{what} value \"{}\" is not supported", v.value));
                    }
                    match v.kind.as_deref().unwrap_or("Exact") {
                        "Exact" => {}
                        "RegularExpression" if plain_regex(&v.value) => {}
                        other => {
                            return Err(format!(
                                "{what} match \"{other}\" of \"{}\" is not supported",
                                v.value
                            ))
                        }
                    }
                }
            }
            if let Some(method) = &m.method {
                if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
                    return Err(format!("method \"{method}\" is not supported"));
                }
            }
        }
        let all_filters = rule
            .filters
            .iter()
            .chain(rule.backend_refs.iter().flat_map(|b| &b.filters));
        for f in all_filters {
            check_filter(f)?;
        }
        if rule.backend_refs.iter().any(|b| !b.filters.is_empty()) {
            return Err("filters of a backendRef are not supported".into());
        }
    }
    Ok(())
}

fn check_filter(f: &Filter) -> Result<(), String> {
    let header_name = |n: &str| {
        !n.is_empty()
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let modifier = |m: &Option<HeaderModifier>| -> Result<(), String> {
        let m = m
            .as_ref()
            .ok_or_else(|| format!("filter {} without its settings", f.kind))?;
        for h in m.set.iter().chain(&m.add) {
            if !header_name(&h.name) || !printable(&h.value) || h.value.contains('$') {
                return Err(format!(
                    "header \"{}: {}\" is not supported",
                    h.name, h.value
                ));
            }
        }
        match m.remove.iter().find(|n| !header_name(n)) {
            Some(n) => Err(format!("header \"{n}\" is not supported")),
            None => Ok(()),
        }
    };
    let redirect = |r: &Option<Redirect>| -> Result<(), String> {
        let r = r
            .as_ref()
            .ok_or_else(|| format!("filter {} without its settings", f.kind))?;
        if let Some(h) = &r.hostname {
            if !valid_host(h) || h.starts_with('*') {
                return Err(format!("hostname \"{h}\" is not supported"));
            }
        }
        if let Some(s) = &r.scheme {
            if s != "http" && s != "https" {
                return Err(format!("scheme \"{s}\" is not supported"));
            }
        }
        if let Some(code) = r.status_code {
            if code != 301 && code != 302 {
                return Err(format!("status code {code} is not supported"));
            }
        }
        if let Some(p) = &r.path {
            let value = match p.kind.as_str() {
                "ReplaceFullPath" => p.replace_full_path.as_deref(),
                "ReplacePrefixMatch" => p.replace_prefix_match.as_deref(),
                other => return Err(format!("path modifier \"{other}\" is not supported")),
            };
            match value {
                Some(v) if plain_path(v) => {}
                v => return Err(format!("path \"{}\" is not supported", v.unwrap_or(""))),
            }
        }
        Ok(())
    };
    match f.kind.as_str() {
        "RequestHeaderModifier" => modifier(&f.request_header_modifier),
        "ResponseHeaderModifier" => modifier(&f.response_header_modifier),
        "RequestRedirect" => redirect(&f.request_redirect),
        "URLRewrite" => redirect(&f.url_rewrite),
        other => Err(format!("filter \"{other}\" is not supported")),
    }
}

/// The first backend of a route that cannot be resolved: the reason and why.
fn unresolved(
    route: &HttpRoute,
    namespace: &str,
    cluster: &Cluster,
) -> Option<(&'static str, String)> {
    for b in route.spec.rules.iter().flat_map(|r| &r.backend_refs) {
        if let Err(e) = resolve(b, namespace, cluster) {
            return Some(e);
        }
    }
    None
}

/// A backend's Service servers, or why not.
fn resolve(
    b: &Reference,
    namespace: &str,
    cluster: &Cluster,
) -> Result<(i32, Vec<String>), (&'static str, String)> {
    if b.kind.as_deref().unwrap_or("Service") != "Service"
        || !b.group.as_deref().unwrap_or("").is_empty()
    {
        return Err((
            "InvalidKind",
            format!("backend \"{}\" is not a Service", b.name),
        ));
    }
    // Another namespace's Service only where a ReferenceGrant of it lets routes of this one.
    let target = b.namespace.as_deref().unwrap_or(namespace);
    if target != namespace
        && !granted(
            &cluster.grants,
            ("HTTPRoute", namespace),
            ("Service", target, &b.name),
        )
    {
        return Err((
            "RefNotPermitted",
            format!(
                "backend \"{target}/{}\": no ReferenceGrant of namespace \"{target}\" lets routes of \"{namespace}\" name it",
                b.name
            ),
        ));
    }
    let Some(port) = b.port else {
        return Err((
            "UnsupportedValue",
            format!("backend \"{}\" has no port", b.name),
        ));
    };
    service_servers(cluster, target, &b.name, None, Some(port)).map_err(|e| ("BackendNotFound", e))
}

/// The upstream groups of routes' backends, by name.
#[derive(Default)]
pub(super) struct Groups {
    pub servers: BTreeMap<String, Vec<String>>,
}

impl Groups {
    /// Each backend's group (None: unresolved) and weight.
    fn of(
        &mut self,
        rule: &Rule,
        namespace: &str,
        route: &str,
        cluster: &Cluster,
    ) -> Vec<(Option<String>, u32)> {
        (rule.backend_refs.iter())
            .map(|b| {
                let weight = u32::try_from(b.weight.unwrap_or(1)).unwrap_or(0);
                let group = resolve(b, namespace, cluster).ok().map(|(port, servers)| {
                    // Five parts: never an Ingress's group (four), `_` being in no name; a
                    // Service of another namespace as `service.namespace` (no `.` in a
                    // Service's name).
                    let service = match b.namespace.as_deref().filter(|n| *n != namespace) {
                        Some(other) => format!("{}.{other}", b.name),
                        None => b.name.clone(),
                    };
                    let name = format!("route_{namespace}_{route}_{service}_{port}");
                    self.servers.insert(name.clone(), servers);
                    name
                });
                (group, weight)
            })
            .collect()
    }
}

fn path_of(m: &RouteMatch) -> Result<PathKind, String> {
    let p = m.path.clone().unwrap_or_default();
    let value = p.value.unwrap_or_else(|| "/".into());
    Ok(match p.kind.as_deref().unwrap_or("PathPrefix") {
        "Exact" => PathKind::Exact(value),
        "PathPrefix" if value.len() > 1 => PathKind::Prefix(value.trim_end_matches('/').to_owned()),
        "PathPrefix" => PathKind::Prefix("/".into()),
        "RegularExpression" => PathKind::Regex(value),
        other => return Err(format!("path match \"{other}\" is not supported")),
    })
}

/// Adds a rule's matches (one match of every path when it has none) to a server's.
fn add_rule(
    at: &mut Vec<Candidate>,
    rule: &Rule,
    index: usize,
    order: usize,
    backends: Vec<(Option<String>, u32)>,
    https: bool,
    port: u16,
) {
    let every = [RouteMatch::default()];
    let matches = if rule.matches.is_empty() {
        &every[..]
    } else {
        &rule.matches[..]
    };
    for (m_index, m) in matches.iter().enumerate() {
        let Ok(path) = path_of(m) else { continue };
        let mut conditions = Vec::new();
        if let Some(method) = &m.method {
            conditions.push(format!(
                "$request_method {}",
                quote(&format!("~^{method}$"))
            ));
        }
        for h in &m.headers {
            let var = header_variable(&h.name);
            conditions.push(format!("{var} {}", quote(&value_pattern(h))));
        }
        for q in &m.query_params {
            conditions.push(format!("$arg_{} {}", q.name, quote(&value_pattern(q))));
        }
        let (kind, length) = match &path {
            PathKind::Exact(_) => (0, 0),
            PathKind::Regex(_) => (1, 0),
            PathKind::Prefix(p) => (2, usize::MAX - p.len()),
        };
        at.push(Candidate {
            host: (0, 0),
            rank: (
                kind,
                length,
                u8::from(m.method.is_none()),
                usize::MAX - m.headers.len(),
                usize::MAX - m.query_params.len(),
                order,
                index,
                m_index,
            ),
            conditions,
            target: Target {
                path,
                filters: rule.filters.clone(),
                backends: backends.clone(),
                https,
                port,
            },
        });
    }
}

/// The variable of a request header (`$http_x_version` for `X-Version`).
pub(super) fn header_variable(name: &str) -> String {
    format!("$http_{}", name.to_ascii_lowercase().replace('-', "_"))
}

/// A value match as a regular expression of the whole value.
fn value_pattern(v: &ValueMatch) -> String {
    match v.kind.as_deref().unwrap_or("Exact") {
        "RegularExpression" => format!("~^(?:{})$", v.value),
        _ => format!("~^{}$", regex::escape(&v.value)),
    }
}
