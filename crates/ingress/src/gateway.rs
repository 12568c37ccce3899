//! Gateway API v1 (`gateway.networking.k8s.io/v1`) as nginx.conf text: GatewayClass, Gateway
//! and HTTPRoute, and the status conditions each gets.
//!
//! - **Classes**: a GatewayClass is this controller's when its `spec.controllerName` is the
//!   controller's gateway name; each gets `Accepted`. A Gateway is this controller's when its
//!   `gatewayClassName` names one.
//! - **Listeners**: `HTTP` and `HTTPS` (TLS terminated with the certificate of a
//!   `kubernetes.io/tls` Secret of the Gateway's namespace), on their own port, for their
//!   `hostname` or every host. A port has one protocol: the oldest Gateway's listener keeps
//!   it, a later one of another protocol (or the same port and hostname) is `Conflicted`.
//!   On the Ingresses' ports a listener's hosts are served beside the Ingresses'; a host both
//!   claim, or every host where an Ingress has a rule without a host, stays the Ingress's.
//! - **Routes** attach to listeners by `parentRefs` (`sectionName`, `port`), where the
//!   listener's `allowedRoutes` let them (`Same` namespace by default, `All`); their hostnames
//!   meet the listener's as the API says (`*.example.com` matches any name under
//!   `example.com`). Each rule's matches are nginx locations: `Exact`, `PathPrefix` (element
//!   by element, a trailing `/` ignored) and `RegularExpression` (a whole-path match); at one
//!   path, the matches with a method, then more headers, then more query parameters, then
//!   the oldest route's, then the first rule's, are tried first, by maps of the method,
//!   headers (`$http_*`) and query parameters (`$arg_*`). Header and parameter values match
//!   whole (`Exact`) or by a regular expression matching the whole value.
//! - **Filters**: `RequestHeaderModifier`, `ResponseHeaderModifier`, `RequestRedirect`
//!   (scheme, hostname, port, path, 301 or 302) and `URLRewrite` (hostname, path by
//!   `ReplaceFullPath` or `ReplacePrefixMatch`). Any other filter refuses the route for its
//!   parent (`Accepted: False, UnsupportedValue`): left out, it could send a request where it
//!   was not meant to go.
//! - **Backends**: Services of the route's namespace, by port; several are chosen by weight
//!   (`split_clients` on `$request_id`). A backend that cannot be resolved keeps its share,
//!   answered 500, as the API says; `ResolvedRefs` says why.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::translate::{
    age, certificate, names, service_servers, upstream_block, Cluster, Settings,
};

/// The API group of every Gateway API kind.
pub const GROUP: &str = "gateway.networking.k8s.io";

/// An object of a Gateway API kind: what the controller reads of it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, bound(deserialize = "S: Deserialize<'de> + Default"))]
pub struct Object<S> {
    pub metadata: ObjectMeta,
    pub spec: S,
    /// As it is now: the controller writes it again only when it should say something else.
    pub status: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GatewayClassSpec {
    pub controller_name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GatewaySpec {
    pub gateway_class_name: String,
    pub listeners: Vec<Listener>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Listener {
    pub name: String,
    pub hostname: Option<String>,
    pub port: i32,
    pub protocol: String,
    pub tls: Option<ListenerTls>,
    pub allowed_routes: Option<AllowedRoutes>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListenerTls {
    pub mode: Option<String>,
    pub certificate_refs: Vec<Reference>,
}

/// A reference to another object (`certificateRefs`, `backendRefs`, `parentRefs`).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Reference {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    #[serde(skip_serializing)]
    pub weight: Option<i32>,
    #[serde(skip_serializing)]
    pub filters: Vec<Filter>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AllowedRoutes {
    pub namespaces: Option<RouteNamespaces>,
    pub kinds: Vec<Reference>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RouteNamespaces {
    pub from: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpRouteSpec {
    pub parent_refs: Vec<Reference>,
    pub hostnames: Vec<String>,
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Rule {
    pub matches: Vec<RouteMatch>,
    pub filters: Vec<Filter>,
    pub backend_refs: Vec<Reference>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct RouteMatch {
    pub path: Option<PathMatch>,
    pub headers: Vec<ValueMatch>,
    pub query_params: Vec<ValueMatch>,
    pub method: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct PathMatch {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ValueMatch {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Filter {
    #[serde(rename = "type")]
    pub kind: String,
    pub request_header_modifier: Option<HeaderModifier>,
    pub response_header_modifier: Option<HeaderModifier>,
    pub request_redirect: Option<Redirect>,
    #[serde(rename = "urlRewrite")]
    pub url_rewrite: Option<Redirect>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct HeaderModifier {
    pub set: Vec<Header>,
    pub add: Vec<Header>,
    pub remove: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Header {
    pub name: String,
    pub value: String,
}

/// `requestRedirect` and `urlRewrite` (which has only `hostname` and `path`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Redirect {
    pub scheme: Option<String>,
    pub hostname: Option<String>,
    pub path: Option<PathModifier>,
    pub port: Option<i32>,
    pub status_code: Option<i32>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct PathModifier {
    #[serde(rename = "type")]
    pub kind: String,
    pub replace_full_path: Option<String>,
    pub replace_prefix_match: Option<String>,
}

pub type GatewayClass = Object<GatewayClassSpec>;
pub type Gateway = Object<GatewaySpec>;
pub type HttpRoute = Object<HttpRouteSpec>;

/// The status an object should have: written when it differs from the one it has.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// `GatewayClass`, `Gateway` or `HTTPRoute`.
    pub kind: &'static str,
    /// Empty for a GatewayClass (cluster-wide).
    pub namespace: String,
    pub name: String,
    pub status: Value,
}

/// What the Gateway API objects come to, beside the Ingresses'.
#[derive(Debug, Default)]
pub(crate) struct Planned {
    /// `map`, `split_clients` and `server` blocks of the `http` block.
    pub http: String,
    /// Locations of the default servers of the Ingresses' ports, by port.
    pub catch_all: BTreeMap<u16, String>,
    pub upstreams: BTreeMap<String, Vec<String>>,
    pub files: BTreeMap<PathBuf, Vec<u8>>,
    pub statuses: Vec<Status>,
}

/// What the Ingresses hold on their ports: the hosts of `http_port` and `https_port`, and
/// whether their default server has routes (then it keeps every host of its ports).
pub(crate) struct Taken {
    pub hosts: BTreeSet<(u16, String)>,
    pub default_routes: bool,
}

/// A listener as planned: where it serves, and what it says in its status.
struct ListenerPlan {
    gateway: usize,
    listener: Listener,
    port: u16,
    /// Certificate and key, for HTTPS.
    tls: Option<(PathBuf, PathBuf)>,
    /// Why it cannot be programmed: reason, message, and the condition it goes under.
    refused: Option<(&'static str, &'static str, String)>,
    attached: usize,
}

/// One match of one rule of one route, where it is tried.
#[derive(Clone)]
struct Candidate {
    /// Order among the others tried at a location (smaller first): exact paths, longer
    /// prefixes, then regular expressions; a method; more headers; more query parameters;
    /// the older route; the rule and match written first.
    rank: (u8, usize, u8, usize, usize, usize, usize, usize),
    conditions: Vec<String>,
    /// The location's body that answers it, given the part of the URI an internal
    /// redirect put before the path.
    target: Target,
}

#[derive(Clone)]
struct Target {
    path: PathKind,
    filters: Vec<Filter>,
    /// Group names and weights; `None`: a backend that could not be resolved (500).
    backends: Vec<(Option<String>, u32)>,
    /// The listener's protocol and port, for redirects.
    https: bool,
    port: u16,
}

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum PathKind {
    Exact(String),
    /// Without its trailing `/` (`/` itself kept).
    Prefix(String),
    Regex(String),
}

/// A location of a server: `= /p`, `/p/` (or `/`), `~ re`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Place {
    Exact(String),
    Prefix(String),
    Regex(String),
}

/// The Gateway API objects of `cluster` that are this controller's, as configuration.
pub(crate) fn plan(cluster: &Cluster, settings: &Settings, taken: &Taken) -> Planned {
    let mut out = Planned::default();
    let ours_class = |name: &str| {
        cluster.gateway_classes.iter().any(|c| {
            c.metadata.name.as_deref() == Some(name)
                && c.spec.controller_name == settings.gateway_controller
        })
    };
    for class in &cluster.gateway_classes {
        if class.spec.controller_name != settings.gateway_controller {
            continue;
        }
        let generation = class.metadata.generation;
        out.statuses.push(Status {
            kind: "GatewayClass",
            namespace: String::new(),
            name: class.metadata.name.clone().unwrap_or_default(),
            status: json!({"conditions": [
                condition("Accepted", true, "Accepted", "", generation),
            ]}),
        });
    }
    let mut gateways: Vec<&Gateway> = (cluster.gateways.iter())
        .filter(|g| ours_class(&g.spec.gateway_class_name))
        .collect();
    gateways.sort_by_key(|g| age(&g.metadata));

    // Listeners: ports, protocols and certificates.
    let mut protocols: BTreeMap<u16, bool> = BTreeMap::new();
    protocols.insert(settings.http_port, false);
    protocols.insert(settings.https_port, true);
    let mut claimed: BTreeSet<(u16, String)> = BTreeSet::new();
    let mut listeners: Vec<ListenerPlan> = Vec::new();
    for (g, gateway) in gateways.iter().enumerate() {
        let (namespace, _) = names(&gateway.metadata);
        for l in &gateway.spec.listeners {
            let mut p = ListenerPlan {
                gateway: g,
                listener: l.clone(),
                port: u16::try_from(l.port).unwrap_or(0),
                tls: None,
                refused: None,
                attached: 0,
            };
            let https = l.protocol == "HTTPS";
            let host = l.hostname.clone().unwrap_or_default();
            if l.protocol != "HTTP" && !https {
                p.refused = Some((
                    "Accepted",
                    "UnsupportedProtocol",
                    format!("protocol {} is not supported", l.protocol),
                ));
            } else if p.port == 0 {
                p.refused = Some(("Accepted", "PortUnavailable", "no port".into()));
            } else if !host.is_empty() && !valid_hostname(&host) {
                p.refused = Some((
                    "Accepted",
                    "UnsupportedValue",
                    format!("invalid hostname \"{host}\""),
                ));
            } else if protocols.get(&p.port).is_some_and(|was| *was != https) {
                p.refused = Some((
                    "Conflicted",
                    "ProtocolConflict",
                    format!("port {} serves another protocol", p.port),
                ));
            } else if !claimed.insert((p.port, host.clone())) {
                p.refused = Some((
                    "Conflicted",
                    "HostnameConflict",
                    format!("port {} already has a listener for this hostname", p.port),
                ));
            } else if https {
                let reference = l.tls.as_ref().and_then(|t| {
                    (t.mode.as_deref().unwrap_or("Terminate") == "Terminate")
                        .then(|| t.certificate_refs.first())
                        .flatten()
                });
                match reference {
                    None => {
                        p.refused = Some((
                            "ResolvedRefs",
                            "InvalidCertificateRef",
                            "an HTTPS listener terminates TLS with a certificateRef".into(),
                        ))
                    }
                    Some(r)
                        if r.kind.as_deref().unwrap_or("Secret") != "Secret"
                            || !r.group.as_deref().unwrap_or("").is_empty() =>
                    {
                        p.refused = Some((
                            "ResolvedRefs",
                            "InvalidCertificateRef",
                            "a certificateRef is a Secret".into(),
                        ))
                    }
                    Some(r) if r.namespace.as_ref().is_some_and(|n| *n != namespace) => {
                        p.refused = Some((
                            "ResolvedRefs",
                            "RefNotPermitted",
                            "a certificateRef to another namespace is not supported".into(),
                        ))
                    }
                    Some(r) => match certificate(cluster, &namespace, &r.name, settings) {
                        Ok((files, written)) => {
                            out.files.extend(written);
                            p.tls = Some(files);
                        }
                        Err(why) => {
                            p.refused = Some(("ResolvedRefs", "InvalidCertificateRef", why))
                        }
                    },
                }
            }
            if p.refused.is_none() {
                protocols.insert(p.port, https);
            }
            listeners.push(p);
        }
    }

    // Routes: each parent's listeners, the hosts they meet on, and the rules' targets.
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
                if !allows(&l.listener, &parent_ns, &namespace) {
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
            out.statuses.push(Status {
                kind: "HTTPRoute",
                namespace,
                name,
                status: json!({"parents": parents}),
            });
        }
    }

    // Gateways' status: each listener's, and the Gateway's as a whole.
    for (g, gateway) in gateways.iter().enumerate() {
        let (namespace, name) = names(&gateway.metadata);
        let generation = gateway.metadata.generation;
        let mut statuses = Vec::new();
        for l in listeners.iter().filter(|l| l.gateway == g) {
            let mut conditions = vec![];
            let ok = l.refused.is_none();
            let (kind, reason, message) = l.refused.clone().unwrap_or(("", "", String::new()));
            conditions.push(match kind {
                "Accepted" => condition("Accepted", false, reason, &message, generation),
                _ => condition("Accepted", true, "Accepted", "", generation),
            });
            conditions.push(match kind {
                "Conflicted" => condition("Conflicted", true, reason, &message, generation),
                _ => condition("Conflicted", false, "NoConflicts", "", generation),
            });
            conditions.push(match kind {
                "ResolvedRefs" => condition("ResolvedRefs", false, reason, &message, generation),
                _ => condition("ResolvedRefs", true, "ResolvedRefs", "", generation),
            });
            conditions.push(if ok {
                condition("Programmed", true, "Programmed", "", generation)
            } else {
                condition("Programmed", false, "Invalid", &message, generation)
            });
            statuses.push(json!({
                "name": l.listener.name,
                "supportedKinds": [{"group": GROUP, "kind": "HTTPRoute"}],
                "attachedRoutes": l.attached,
                "conditions": conditions,
            }));
        }
        let any = listeners
            .iter()
            .any(|l| l.gateway == g && l.refused.is_none());
        let mut status = json!({
            "conditions": [
                condition("Accepted", true, "Accepted", "", generation),
                if any {
                    condition("Programmed", true, "Programmed", "", generation)
                } else {
                    condition("Programmed", false, "Invalid", "no listener is valid", generation)
                },
            ],
            "listeners": statuses,
        });
        if let Some(address) = &settings.status_address {
            let kind = match address.parse::<std::net::IpAddr>() {
                Ok(_) => "IPAddress",
                Err(_) => "Hostname",
            };
            status["addresses"] = json!([{"type": kind, "value": address}]);
        }
        out.statuses.push(Status {
            kind: "Gateway",
            namespace,
            name,
            status,
        });
    }

    // The configuration: groups, then each port's servers.
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
    out
}

/// `wanted` as written: each condition keeps the `lastTransitionTime` of the current one of
/// its type while its status is the same, and gets `now` when it changes; the route
/// parents other controllers wrote stay.
pub fn with_times(wanted: &Value, current: &Value, now: &str) -> Value {
    let mut out = wanted.clone();
    times(&mut out, current, now);
    out
}

fn times(wanted: &mut Value, current: &Value, now: &str) {
    let Some(fields) = wanted.as_object_mut() else {
        return;
    };
    for (key, value) in fields.iter_mut() {
        let was = &current[key.as_str()];
        let Some(items) = value.as_array_mut() else {
            times(value, was, now);
            continue;
        };
        let old = was.as_array().map(Vec::as_slice).unwrap_or_default();
        if key == "conditions" {
            for c in items.iter_mut() {
                let same = old
                    .iter()
                    .find(|o| o["type"] == c["type"] && o["status"] == c["status"]);
                c["lastTransitionTime"] = match same {
                    Some(o) => o["lastTransitionTime"].clone(),
                    None => json!(now),
                };
            }
            continue;
        }
        // Listeners by name, parents by reference.
        let ours: BTreeSet<String> = items
            .iter()
            .filter_map(|i| i["controllerName"].as_str().map(str::to_owned))
            .collect();
        for item in items.iter_mut() {
            let twin = old.iter().find(|o| {
                (item.get("name").is_some() && o["name"] == item["name"])
                    || (item.get("parentRef").is_some()
                        && o["parentRef"] == item["parentRef"]
                        && o["controllerName"] == item["controllerName"])
            });
            times(item, twin.unwrap_or(&Value::Null), now);
        }
        if key == "parents" {
            items.extend(
                (old.iter())
                    .filter(|o| {
                        o["controllerName"]
                            .as_str()
                            .is_some_and(|c| !ours.contains(c))
                    })
                    .cloned(),
            );
        }
    }
}

/// A condition of a status.
fn condition(
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Value {
    let mut c = json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "lastTransitionTime": "1970-01-01T00:00:00Z",
    });
    if let Some(g) = generation {
        c["observedGeneration"] = json!(g);
    }
    c
}

/// Whether `listener` takes HTTPRoutes from `route_ns` (its Gateway in `gateway_ns`).
fn allows(listener: &Listener, gateway_ns: &str, route_ns: &str) -> bool {
    let allowed = listener.allowed_routes.as_ref();
    let kinds = allowed.map(|a| a.kinds.as_slice()).unwrap_or_default();
    if !kinds.is_empty()
        && !kinds.iter().any(|k| {
            k.kind.as_deref() == Some("HTTPRoute") && k.group.as_deref().unwrap_or(GROUP) == GROUP
        })
    {
        return false;
    }
    let from = allowed
        .and_then(|a| a.namespaces.as_ref())
        .and_then(|n| n.from.as_deref())
        .unwrap_or("Same");
    match from {
        "All" => true,
        "Same" => gateway_ns == route_ns,
        // A label selector needs the namespaces' labels, which are not watched: none.
        _ => false,
    }
}

/// The hosts a listener's hostname and a route's meet on (`""`: every host).
fn meet(listener: Option<&str>, route: &[String]) -> Vec<String> {
    let covers = |wild: &str, name: &str| {
        wild.strip_prefix('*')
            .is_some_and(|suffix| name.ends_with(suffix) && name.len() > suffix.len())
    };
    let mut out = BTreeSet::new();
    match (listener, route.is_empty()) {
        (None, true) => {
            out.insert(String::new());
        }
        (None, false) => out.extend(route.iter().cloned()),
        (Some(l), true) => {
            out.insert(l.to_owned());
        }
        (Some(l), false) => {
            for r in route {
                if r == l || covers(l, r) {
                    out.insert(r.clone());
                } else if covers(r, l) {
                    out.insert(l.to_owned());
                }
            }
        }
    }
    out.into_iter().collect()
}

/// What refuses a route: a value that cannot be written into the configuration as the
/// API means it, or a filter not implemented.
fn check_route(route: &HttpRoute, _namespace: &str) -> Result<(), String> {
    for host in &route.spec.hostnames {
        if !valid_hostname(host) {
            return Err(format!("invalid hostname \"{host}\""));
        }
    }
    for rule in &route.spec.rules {
        for m in &rule.matches {
            let path = path_of(m)?;
            match &path {
                PathKind::Exact(p) | PathKind::Prefix(p) if !plain_path(p) => {
                    return Err(format!("path \"{p}\" is not supported"));
                }
                PathKind::Regex(p) if regex::Regex::new(&format!("^(?:{p})$")).is_err() => {
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
                        "RegularExpression" if regex::Regex::new(&v.value).is_ok() => {}
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
            if !valid_hostname(h) || h.starts_with('*') {
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
    if b.namespace.as_ref().is_some_and(|n| n != namespace) {
        return Err((
            "RefNotPermitted",
            format!(
                "backend \"{}\": another namespace's Service is not supported",
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
    service_servers(cluster, namespace, &b.name, None, Some(port))
        .map_err(|e| ("BackendNotFound", e))
}

/// The upstream groups of routes' backends, by name.
#[derive(Default)]
struct Groups {
    servers: BTreeMap<String, Vec<String>>,
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
                    // Five parts: never an Ingress's group (four), `_` being in no name.
                    let name = format!("route_{namespace}_{route}_{}_{port}", b.name);
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
            let var = format!("$http_{}", h.name.to_ascii_lowercase().replace('-', "_"));
            conditions.push(format!("{var} {}", quote(&value_pattern(h))));
        }
        for q in &m.query_params {
            conditions.push(format!("$arg_{} {}", q.name, quote(&value_pattern(q))));
        }
        let (kind, length) = match &path {
            PathKind::Exact(_) => (0, 0),
            PathKind::Prefix(p) => (1, usize::MAX - p.len()),
            PathKind::Regex(_) => (2, 0),
        };
        at.push(Candidate {
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

/// A value match as a regular expression of the whole value.
fn value_pattern(v: &ValueMatch) -> String {
    match v.kind.as_deref().unwrap_or("Exact") {
        "RegularExpression" => format!("~^(?:{})$", v.value),
        _ => format!("~^{}$", regex::escape(&v.value)),
    }
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
                (PathKind::Prefix(q), Place::Exact(p)) => within(p, q),
                (PathKind::Prefix(q), Place::Prefix(p)) => {
                    q.len() < p.len() - 1 && within(p.trim_end_matches('/'), q)
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

/// The rewrites that replace `prefix` (after `strip`) with `to`, element-wise: `/foo` to
/// `/bar` makes `/foo` `/bar` and `/foo/x` `/bar/x`.
fn prefix_rewrites(strip: &str, prefix: &str, to: &str) -> Vec<(String, String)> {
    let strip = regex::escape(strip);
    let to_trimmed = to.trim_end_matches('/');
    if prefix == "/" {
        return vec![(format!("^{strip}(/.*)$"), format!("{to_trimmed}$1"))];
    }
    let p = regex::escape(prefix);
    vec![
        (
            format!("^{strip}{p}$"),
            if to.is_empty() {
                "/".into()
            } else {
                to.to_owned()
            },
        ),
        (format!("^{strip}{p}(/.*)$"), format!("{to_trimmed}$1")),
    ]
}

/// A word of nginx.conf in double quotes, its quotes and backslashes escaped.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Printable ASCII and spaces: what a value may hold to be written as it is.
fn printable(s: &str) -> bool {
    s.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
}

/// A path of plain characters: one word of nginx.conf, no variable, no regex meaning where
/// it is a location's literal.
fn plain_path(p: &str) -> bool {
    p.starts_with('/')
        && p.chars().all(|c| {
            c.is_ascii_graphic() && !matches!(c, '"' | '\'' | ';' | '{' | '}' | '$' | '#' | '\\')
        })
}

/// A DNS name, or one with a leading `*.` label.
fn valid_hostname(host: &str) -> bool {
    let rest = host.strip_prefix("*.").unwrap_or(host);
    !rest.is_empty()
        && host.len() <= 253
        && rest.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}
