//! The Ingress v1 specification as nginx.conf text.
//!
//! - **Class**: an Ingress is this controller's when its `spec.ingressClassName` names an
//!   IngressClass whose `spec.controller` is this controller's, when its legacy
//!   `kubernetes.io/ingress.class` annotation names the controller's class, or, with
//!   neither, when one of the controller's IngressClasses is marked the default
//!   (`ingressclass.kubernetes.io/is-default-class: "true"`).
//! - **Hosts**: each host is a `server` block; `*.example.com` matches exactly one label
//!   before `example.com`, as the API says (a regular expression server name, since nginx's
//!   own wildcard matches any number). A rule without a host, and `defaultBackend`, go to the
//!   default server, which answers 404 for what nothing routes.
//! - **Paths**: `Exact` is `location = /p`; `Prefix` matches element by element (`/foo`
//!   matches `/foo` and `/foo/bar`, not `/foobar`; a trailing `/` is ignored), as
//!   `location = /foo` and `location /foo/`; `ImplementationSpecific` is a regular expression
//!   anchored at the path's start (`location ~ "^/p"`). Where an `Exact` and a `Prefix` path
//!   are the same, the exact one answers the path itself, as the API prefers it.
//! - **Conflicts**: two Ingresses claiming the same host, path and path type: the oldest
//!   (by creation time, then namespace and name) keeps it; the other is reported.
//! - **Backends**: a Service's port by number or name, its ready endpoints from its
//!   EndpointSlices (the slice port of the service port's name); each is an `upstream` in a
//!   `zone`, so its servers can change with no reload. No endpoint: a group whose one
//!   server is down, which answers 502 as nginx's "no live upstreams".
//! - **TLS**: each `tls` entry's hosts get HTTPS with its Secret's certificate (SNI), and
//!   HTTP to those hosts is redirected to HTTPS (301); the default server has the default
//!   certificate. A Secret that is missing or not a certificate and key is reported, and its
//!   hosts served with the default certificate.
//!
//! Nothing from an object reaches the text unchecked: a host, path or name that could be
//! read as more than one word of nginx.conf refuses its Ingress, which is reported; the
//! others are applied.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use k8s_openapi::api::networking::v1::{Ingress, IngressBackend, IngressClass};

use crate::annotations::Rewrite;
use crate::cluster::{
    age, certificate, names, plain_path, plain_regex, prefix_rewrites, quote, service_servers,
    upstream_block, valid_host, PROXY_HEADERS,
};
pub use crate::cluster::{Cluster, Settings};

/// The annotation that marks an IngressClass the cluster's default.
const DEFAULT_CLASS: &str = "ingressclass.kubernetes.io/is-default-class";
/// The annotation that named an Ingress's class before `ingressClassName`.
const LEGACY_CLASS: &str = "kubernetes.io/ingress.class";

/// An Ingress not applied, or applied only in part, and why: what the controller reports as
/// a Kubernetes Event on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

/// What a set of objects comes to.
#[derive(Debug, Default, Clone)]
pub struct Generated {
    /// The `http` block's contents.
    pub http: String,
    /// Files the configuration names (certificates and keys), by path.
    pub files: BTreeMap<PathBuf, Vec<u8>>,
    pub problems: Vec<Problem>,
    /// The Ingresses applied, as `namespace/name`: their status gets the address.
    pub applied: BTreeSet<String>,
    /// Each `upstream` group's servers (`address:port`), by the group's name.
    pub upstreams: BTreeMap<String, Vec<String>>,
    /// The status each Gateway API object of this controller's should have.
    pub statuses: Vec<crate::gateway::Status>,
}

/// How a path matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Match {
    Exact,
    Prefix,
    Regex,
}

/// One path of one host, and where it goes.
#[derive(Debug, Clone)]
struct Route {
    path: String,
    how: Match,
    /// The location's directives: the annotations', the rewrite, the proxying.
    body: String,
}

/// One `server` block.
#[derive(Debug, Default)]
struct Host {
    routes: Vec<Route>,
    /// Certificate and key files, when the host has TLS.
    tls: Option<(PathBuf, PathBuf)>,
    /// HTTP to the TLS host is redirected.
    redirect: bool,
    /// Raw directives for the server (the Ingresses' server snippets).
    extra: String,
}

/// The configuration of `cluster`'s Ingresses that are this controller's.
pub fn translate(cluster: &Cluster, settings: &Settings) -> Generated {
    let mut out = Generated::default();
    let mut ours: Vec<&Ingress> = (cluster.ingresses.iter())
        .filter(|i| is_ours(i, cluster, settings))
        .collect();
    // The oldest first: it keeps what two claim.
    ours.sort_by_key(|i| age(&i.metadata));

    let mut hosts: BTreeMap<String, Host> = BTreeMap::new();
    let mut owners: BTreeMap<(String, Match, String), String> = BTreeMap::new();
    let mut upstreams: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut upstream_conf: BTreeMap<String, String> = BTreeMap::new();
    let mut default_backend: Option<String> = None;
    let mut zones = String::new();
    for ingress in ours {
        let (namespace, name) = names(&ingress.metadata);
        let who = format!("{namespace}/{name}");
        let problem = |reason: String| Problem {
            namespace: namespace.clone(),
            name: name.clone(),
            reason,
        };
        let planned = match plan(ingress, &namespace, cluster, settings) {
            Ok(p) => p,
            Err(reason) => {
                out.problems.push(problem(reason));
                continue;
            }
        };
        // The hosts the Ingress serves something of: its server snippet goes to them.
        let mut served = BTreeSet::new();
        for (host, route) in planned.routes {
            let key = (host.clone(), route.how, route.path.clone());
            if let Some(first) = owners.get(&key) {
                out.problems.push(problem(format!(
                    "path \"{}\" of host \"{}\" is already routed by {first}",
                    route.path,
                    if host.is_empty() { "*" } else { &host }
                )));
                continue;
            }
            owners.insert(key, who.clone());
            served.insert(host.clone());
            hosts.entry(host).or_default().routes.push(route);
        }
        if let Some(backend) = planned.default_backend {
            match &default_backend {
                Some(_) => out.problems.push(problem(
                    "the default backend is already set by an older Ingress".into(),
                )),
                None => {
                    default_backend = Some(backend);
                    served.insert(String::new());
                }
            }
        }
        for (host, files) in planned.tls {
            let entry = hosts.entry(host).or_default();
            if entry.tls.is_none() {
                entry.tls = Some(files);
                entry.redirect = planned.ssl_redirect;
            }
        }
        for host in served.into_iter().filter(|_| !planned.server.is_empty()) {
            // Once per server: the ConfigMap's snippet is every Ingress's.
            let extra = &mut hosts.entry(host).or_default().extra;
            if !extra.contains(&planned.server) {
                extra.push_str(&planned.server);
            }
        }
        zones.push_str(&planned.http);
        out.problems
            .extend(planned.problems.into_iter().map(problem));
        out.files.extend(planned.files);
        upstreams.extend(planned.upstreams);
        upstream_conf.extend(planned.upstream_conf);
        out.applied.insert(who);
    }

    // The Gateway API's servers, beside the hosts and default servers the Ingresses hold.
    let hostless = hosts.remove("");
    let taken = crate::gateway::Taken {
        hosts: (hosts.iter())
            .flat_map(|(name, h)| {
                let https = h
                    .tls
                    .is_some()
                    .then_some((settings.https_port, name.clone()));
                std::iter::once((settings.http_port, name.clone())).chain(https)
            })
            .collect(),
        default_routes: hostless.is_some() || default_backend.is_some(),
    };
    let gateway = crate::gateway::plan(cluster, settings, &taken);

    let mut http = zones;
    for (name, servers) in &upstreams {
        let conf = upstream_conf.get(name).map_or("", String::as_str);
        upstream_block(&mut http, name, conf, servers);
    }
    let (routes, hostless_extra) = hostless.map(|h| (h.routes, h.extra)).unwrap_or_default();
    let hostless_extra = hostless_extra.as_str();
    for (port, ssl) in [(settings.http_port, false), (settings.https_port, true)] {
        let extra = gateway.catch_all.get(&port);
        default_server(
            &mut http,
            settings,
            (port, ssl),
            &routes,
            default_backend.as_ref(),
            extra,
            hostless_extra,
        );
    }
    for (host, h) in &hosts {
        server_block(&mut http, host, h, settings);
    }
    http.push_str(&gateway.http);
    out.http = http;
    upstreams.extend(gateway.upstreams);
    out.upstreams = upstreams;
    out.files.extend(gateway.files);
    out.statuses = gateway.statuses;
    out
}

/// When the whole configuration does not load (`loads` says why): the one without the
/// HTTPRoutes and Ingresses that make it fail, each an HTTPRoute status or a problem saying
/// why. Each is tried, routes then Ingresses, oldest first, with those before it that loaded.
/// None when the cause is not theirs: without any it does not load, or every one fails (a
/// setting they all share), and the running configuration should stay.
pub fn loadable(
    cluster: &Cluster,
    settings: &Settings,
    loads: impl Fn(&Generated) -> Result<(), String>,
) -> Option<Generated> {
    let try_with = |kept: &Cluster| {
        let generated = translate(kept, settings);
        loads(&generated).map(|()| generated)
    };
    let mut kept = Cluster {
        ingresses: Vec::new(),
        routes: Vec::new(),
        ..cluster.clone()
    };
    try_with(&kept).ok()?;
    let mut routes: Vec<&crate::gateway::HttpRoute> = cluster.routes.iter().collect();
    routes.sort_by_key(|r| age(&r.metadata));
    let mut refused_routes = Vec::new();
    for route in routes {
        kept.routes.push(route.clone());
        if let Err(e) = try_with(&kept) {
            kept.routes.pop();
            refused_routes.push((route, e));
        }
    }
    let mut ordered: Vec<&Ingress> = cluster.ingresses.iter().collect();
    ordered.sort_by_key(|i| age(&i.metadata));
    let mut refused = Vec::new();
    for ingress in ordered {
        kept.ingresses.push(ingress.clone());
        if let Err(e) = try_with(&kept) {
            kept.ingresses.pop();
            let (namespace, name) = names(&ingress.metadata);
            refused.push(Problem {
                namespace,
                name,
                reason: format!("the configuration it makes does not load: {e}"),
            });
        }
    }
    if kept.ingresses.is_empty() && kept.routes.is_empty() {
        return None;
    }
    let mut generated = try_with(&kept).ok()?;
    generated.problems.extend(refused);
    for (route, e) in refused_routes {
        let why = format!("the configuration it makes does not load: {e}");
        generated.statuses.extend(crate::gateway::refused_route(
            cluster, settings, route, &why,
        ));
    }
    Some(generated)
}

/// An Ingress's routes, TLS and backends, before they meet the others'.
#[derive(Default)]
struct Planned {
    /// By host (`""`: every host).
    routes: Vec<(String, Route)>,
    /// The default backend's group, and its location's directives.
    /// The default backend's location body.
    default_backend: Option<String>,
    /// What it asks of the servers of its hosts.
    server: String,
    /// Its rate limits' zones.
    http: String,
    tls: Vec<(String, (PathBuf, PathBuf))>,
    ssl_redirect: bool,
    files: BTreeMap<PathBuf, Vec<u8>>,
    upstreams: BTreeMap<String, Vec<String>>,
    /// Each group's balancer and keepalive.
    upstream_conf: BTreeMap<String, String>,
    /// What was left out with the rest applied.
    problems: Vec<String>,
}

/// What `ingress` asks, checked whole: an error refuses all of it.
fn plan(
    ingress: &Ingress,
    namespace: &str,
    cluster: &Cluster,
    settings: &Settings,
) -> Result<Planned, String> {
    let mut p = Planned::default();
    let Some(spec) = &ingress.spec else {
        return Ok(p);
    };
    // The ConfigMap's defaults, less what the Ingress sets under any of its names.
    let own = ingress.metadata.annotations.clone().unwrap_or_default();
    let mut merged: BTreeMap<String, String> = (settings.defaults.iter())
        .filter(|(k, _)| !own.keys().any(|o| crate::annotations::same(o, k)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    merged.extend(own);
    let ingress_name = ingress.metadata.name.as_deref().unwrap_or_default();
    let reading = crate::annotations::Reading {
        zone: &format!("{namespace}_{ingress_name}"),
        snippets: settings.snippets,
    };
    let mut annotated = crate::annotations::read(Some(&merged), reading)?;
    p.server = annotated.server.clone();
    p.http = annotated.http.clone();
    p.ssl_redirect = annotated.ssl_redirect;
    if let Some(jwt) = &annotated.jwt {
        let (file, bytes) = key_set(cluster, namespace, &jwt.key, settings)?;
        let _ = write!(annotated.location, " auth_jwt \"{}\"", jwt.realm);
        if let Some(token) = &jwt.token {
            let _ = write!(annotated.location, " token={token}");
        }
        let _ = write!(
            annotated.location,
            "; auth_jwt_key_file {};",
            file.display()
        );
        if let Some(url) = &jwt.login_url {
            let _ = write!(annotated.location, " error_page 401 {url};");
        }
        p.files.insert(file, bytes);
    }
    // A location's body: the annotations', the path rewritten, the backend by its scheme.
    let backend = |b: &IngressBackend,
                   path: Option<(&str, Match)>,
                   p: &mut Planned|
     -> Result<String, String> {
        let (name, servers) = upstream(b, namespace, ingress_name, cluster)?;
        p.upstreams.insert(name.clone(), servers);
        p.upstream_conf
            .insert(name.clone(), annotated.upstream.clone());
        let service = b.service.as_ref().map_or("", |s| s.name.as_str());
        let rewrite = match path {
            Some((path, how)) => rewrite(&annotated.rewrite, service, path, how)?,
            None => String::new(),
        };
        let https = annotated.https_all || annotated.https_services.contains(service);
        let scheme = if https { "https" } else { "http" };
        let mut body = String::from("proxy_http_version 1.1;");
        for (header, value) in PROXY_HEADERS {
            let _ = write!(body, " proxy_set_header {header} {value};");
        }
        Ok(format!(
            "{body}{}{rewrite} proxy_pass {scheme}://{name};",
            annotated.location
        ))
    };
    if let Some(b) = &spec.default_backend {
        p.default_backend = Some(backend(b, None, &mut p)?);
    }
    for rule in spec.rules.iter().flatten() {
        let host = rule.host.clone().unwrap_or_default();
        if !host.is_empty() && !valid_host(&host) {
            return Err(format!("invalid host \"{host}\""));
        }
        for entry in rule.http.iter().flat_map(|h| &h.paths) {
            let written = entry.path.clone().unwrap_or_else(|| "/".into());
            let how = match entry.path_type.as_str() {
                "Exact" => Match::Exact,
                "Prefix" => Match::Prefix,
                "ImplementationSpecific" => Match::Regex,
                other => return Err(format!("unknown pathType \"{other}\"")),
            };
            if !valid_path(&written, how) {
                return Err(format!("invalid path \"{written}\""));
            }
            let path = match how {
                // A trailing `/` is ignored.
                Match::Prefix if written.len() > 1 => written.trim_end_matches('/').to_owned(),
                _ => written,
            };
            let body = backend(&entry.backend, Some((&path, how)), &mut p)?;
            p.routes.push((host.clone(), Route { path, how, body }));
        }
    }
    for tls in spec.tls.iter().flatten() {
        let files = match &tls.secret_name {
            Some(secret) => match certificate(cluster, namespace, secret, settings) {
                Ok((files, written)) => {
                    p.files.extend(written);
                    files
                }
                Err(reason) => {
                    p.problems.push(reason);
                    settings.default_certificate.clone()
                }
            },
            None => settings.default_certificate.clone(),
        };
        for host in tls.hosts.iter().flatten() {
            if !valid_host(host) {
                return Err(format!("invalid TLS host \"{host}\""));
            }
            p.tls.push((host.clone(), files.clone()));
        }
    }
    Ok(p)
}

/// The group of a backend: its name, and its servers (`address:port`) from the Service's
/// ready endpoints.
fn upstream(
    backend: &IngressBackend,
    namespace: &str,
    ingress: &str,
    cluster: &Cluster,
) -> Result<(String, Vec<String>), String> {
    let Some(service) = &backend.service else {
        return Err("a backend that is not a Service is not supported".into());
    };
    let wanted = service.port.as_ref();
    let (port, servers) = service_servers(
        cluster,
        namespace,
        &service.name,
        wanted.and_then(|p| p.name.as_deref()),
        wanted.and_then(|p| p.number),
    )?;
    // Each Ingress has groups of its own (its annotations set their balancer); `_` is in
    // no Kubernetes name, so two never share one.
    Ok((
        format!("{namespace}_{ingress}_{}_{port}", service.name),
        servers,
    ))
}

/// The key set of a `nginx.org/jwk` Secret, as a file: its path and bytes. Missing or not
/// a key set, the Ingress is refused.
fn key_set(
    cluster: &Cluster,
    namespace: &str,
    secret: &str,
    settings: &Settings,
) -> Result<(PathBuf, Vec<u8>), String> {
    let found = (cluster.secrets.iter()).find(|s| {
        s.metadata.name.as_deref() == Some(secret)
            && s.metadata.namespace.as_deref() == Some(namespace)
            && s.type_.as_deref() == Some("nginx.org/jwk")
    });
    let jwk = found
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get("jwk"))
        .map(|b| b.0.clone())
        .ok_or_else(|| {
            format!("secret \"{namespace}/{secret}\" of type nginx.org/jwk with a jwk not found")
        })?;
    // Read as the server reads `auth_jwt_key_file`: one it refuses would refuse the whole
    // configuration, where only this Ingress should be.
    if let Err(e) = portcullis_jwt::KeySet::parse(&jwk) {
        return Err(format!(
            "secret \"{namespace}/{secret}\" has no JSON Web Key set: {e}"
        ));
    }
    Ok((
        settings.files.join(format!("{namespace}_{secret}.jwk")),
        jwk,
    ))
}

/// Whether the Ingress is this controller's (see the module's text).
fn is_ours(ingress: &Ingress, cluster: &Cluster, settings: &Settings) -> bool {
    let mine = |c: &&IngressClass| {
        c.spec.as_ref().and_then(|s| s.controller.as_deref()) == Some(&settings.controller)
    };
    let named = ingress
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.as_deref());
    if let Some(name) = named {
        return (cluster.classes.iter().filter(mine))
            .any(|c| c.metadata.name.as_deref() == Some(name));
    }
    let legacy = (ingress.metadata.annotations.as_ref()).and_then(|a| a.get(LEGACY_CLASS));
    if let Some(class) = legacy {
        return *class == settings.class;
    }
    cluster.classes.iter().filter(mine).any(|c| {
        (c.metadata.annotations.as_ref())
            .and_then(|a| a.get(DEFAULT_CLASS))
            .is_some_and(|v| v == "true")
    })
}

/// A path that is one word of nginx.conf: it begins with `/` and has no space, quote,
/// `;`, brace or `$` (a variable in nginx's text); a regular expression may have the rest of
/// its syntax.
fn valid_path(path: &str, how: Match) -> bool {
    match how {
        // Quoted in the configuration: no quote, no backslash before a quote or one
        // (the configuration's own escapes), and a pattern the server compiles.
        Match::Regex => {
            path.starts_with('/')
                && path
                    .chars()
                    .all(|c| c.is_ascii_graphic() && c != '"' && c != '\'')
                && !path.ends_with('\\')
                && !path.contains("\\\\")
                && plain_regex(&format!("^{path}"))
        }
        _ => plain_path(path),
    }
}

/// The default server of one of the Ingresses' ports: their rules without a host, their
/// default backend, or (with neither) the Gateway API's routes for every host of the port.
fn default_server(
    out: &mut String,
    settings: &Settings,
    (port, ssl): (u16, bool),
    routes: &[Route],
    backend: Option<&String>,
    gateway: Option<&crate::gateway::CatchAll>,
    extra: &str,
) {
    let _ = writeln!(
        out,
        "server {{\n    listen {port}{} default_server;\n    server_name _;",
        if ssl { " ssl" } else { "" }
    );
    if ssl {
        // The certificate of a Gateway's listener for every host of the port, if it has one.
        let listener = gateway.and_then(|(_, cert)| cert.as_ref());
        let (crt, key) = listener.unwrap_or(&settings.default_certificate);
        let _ = writeln!(
            out,
            "    ssl_certificate {};\n    ssl_certificate_key {};",
            crt.display(),
            key.display()
        );
    }
    out.push_str(extra);
    if let Some((locations, _)) = gateway {
        out.push_str(locations);
        out.push_str("}\n");
        return;
    }
    locations(out, routes);
    if !routes
        .iter()
        .any(|r| r.how == Match::Prefix && r.path == "/")
    {
        match backend {
            Some(body) => {
                let _ = writeln!(out, "    location / {{ {body} }}");
            }
            None => out.push_str("    location / { return 404; }\n"),
        }
    }
    out.push_str("}\n");
}

fn server_block(out: &mut String, host: &str, h: &Host, settings: &Settings) {
    let _ = writeln!(out, "server {{\n    listen {};", settings.http_port);
    match host.strip_prefix("*.") {
        // One label, no more.
        Some(rest) => {
            let _ = writeln!(
                out,
                "    server_name \"~^[^.]+\\.{}$\";",
                rest.replace('.', "\\.")
            );
        }
        None => {
            let _ = writeln!(out, "    server_name {host};");
        }
    }
    if let Some((crt, key)) = &h.tls {
        let _ = writeln!(
            out,
            "    listen {} ssl;\n    ssl_certificate {};\n    ssl_certificate_key {};",
            settings.https_port,
            crt.display(),
            key.display()
        );
        if h.redirect {
            out.push_str("    if ($scheme = http) { return 301 https://$host$request_uri; }\n");
        }
    }
    out.push_str(&h.extra);
    locations(out, &h.routes);
    if !h
        .routes
        .iter()
        .any(|r| r.how == Match::Prefix && r.path == "/")
    {
        out.push_str("    location / { return 404; }\n");
    }
    out.push_str("}\n");
}

fn locations(out: &mut String, routes: &[Route]) {
    let exact: BTreeSet<&str> = (routes.iter())
        .filter(|r| r.how == Match::Exact)
        .map(|r| r.path.as_str())
        .collect();
    for r in routes {
        let (path, body) = (&r.path, &r.body);
        match r.how {
            Match::Exact => {
                let _ = writeln!(out, "    location = {path} {{ {body} }}");
            }
            Match::Prefix if r.path == "/" => {
                let _ = writeln!(out, "    location / {{ {body} }}");
            }
            Match::Prefix => {
                if !exact.contains(path.as_str()) {
                    let _ = writeln!(out, "    location = {path} {{ {body} }}");
                }
                let _ = writeln!(out, "    location {path}/ {{ {body} }}");
            }
            Match::Regex => {
                let _ = writeln!(out, "    location ~ \"^{path}\" {{ {body} }}");
            }
        }
    }
}

/// The rewrite of a route's path that the Ingress's annotations ask for its Service.
fn rewrite(rewrite: &Rewrite, service: &str, path: &str, how: Match) -> Result<String, String> {
    let pattern = match how {
        Match::Regex => format!("^{path}"),
        Match::Exact => format!("^{}$", regex::escape(path)),
        Match::Prefix => format!("^{}", regex::escape(path)),
    };
    Ok(match rewrite {
        Rewrite::None => String::new(),
        Rewrite::Target(to) => format!(" rewrite {} {} break;", quote(&pattern), quote(to)),
        Rewrite::Services(by_service) => match (by_service.get(service), how) {
            (None, _) => String::new(),
            (Some(to), Match::Exact) => format!(" rewrite ^ {} break;", quote(to)),
            (Some(to), Match::Prefix) => (prefix_rewrites("", path, to).iter())
                .map(|(p, r)| format!(" rewrite {} {} break;", quote(p), quote(r)))
                .collect(),
            (Some(_), Match::Regex) => {
                return Err(format!(
                    "annotation \"nginx.org/rewrites\" of a regular-expression path \"{path}\" is not supported"
                ))
            }
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::SERVICE_NAME;
    use k8s_openapi::api::core::v1::{Secret, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use serde_json::{from_value, json};

    const CONTROLLER: &str = "portcullis.dev/ingress-controller";

    fn settings(dir: &std::path::Path) -> Settings {
        Settings {
            controller: CONTROLLER.into(),
            class: "portcullis".into(),
            http_port: 8080,
            https_port: 8443,
            files: dir.to_path_buf(),
            default_certificate: (dir.join("default.crt"), dir.join("default.key")),
            defaults: BTreeMap::new(),
            gateway_controller: "portcullis.dev/gateway-controller".into(),
            status_address: None,
            snippets: false,
            health_port: 8081,
        }
    }

    fn class(name: &str, default: bool) -> IngressClass {
        let mut c = json!({"metadata": {"name": name}, "spec": {"controller": CONTROLLER}});
        if default {
            c["metadata"]["annotations"] = json!({DEFAULT_CLASS: "true"});
        }
        from_value(c).expect("an IngressClass")
    }

    fn service(name: &str, ports: serde_json::Value) -> Service {
        from_value(json!({
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"ports": ports},
        }))
        .expect("a Service")
    }

    fn slice(
        service: &str,
        port: Option<&str>,
        target: i32,
        ready: &[(&str, bool)],
    ) -> EndpointSlice {
        let endpoints: Vec<_> = (ready.iter())
            .map(|(ip, ok)| json!({"addresses": [ip], "conditions": {"ready": ok}}))
            .collect();
        from_value(json!({
            "metadata": {"name": format!("{service}-x"), "namespace": "shop",
                         "labels": {SERVICE_NAME: service}},
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": port, "port": target}],
        }))
        .expect("an EndpointSlice")
    }

    fn ingress(name: &str, created: &str, spec: serde_json::Value) -> Ingress {
        from_value(json!({
            "metadata": {"name": name, "namespace": "shop", "creationTimestamp": created},
            "spec": spec,
        }))
        .expect("an Ingress")
    }

    fn tls_secret(name: &str) -> Secret {
        let key = rcgen::KeyPair::generate().expect("a key");
        let params = rcgen::CertificateParams::new(vec!["shop.example".into()]).expect("params");
        let cert = params.self_signed(&key).expect("a certificate");
        let b64 = |s: String| {
            use std::io::Write;
            let mut out = Vec::new();
            out.write_all(s.as_bytes()).expect("write");
            serde_json::to_value(k8s_openapi::ByteString(out)).expect("bytes")
        };
        from_value(json!({
            "metadata": {"name": name, "namespace": "shop"},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": b64(cert.pem()), "tls.key": b64(key.serialize_pem())},
        }))
        .expect("a Secret")
    }

    fn cluster() -> Cluster {
        Cluster {
            classes: vec![class("portcullis", true), {
                let mut other = class("other", false);
                other.spec.as_mut().expect("spec").controller = Some("example.com/other".into());
                other
            }],
            services: vec![
                service(
                    "web",
                    json!([{"name": "http", "port": 80, "targetPort": 8080}]),
                ),
                service("api", json!([{"port": 9000}])),
            ],
            slices: vec![
                slice(
                    "web",
                    Some("http"),
                    8080,
                    &[
                        ("10.244.1.1", true),
                        ("10.244.1.2", true),
                        ("10.244.1.3", false),
                    ],
                ),
                slice("api", None, 9001, &[("10.244.2.1", true)]),
            ],
            secrets: vec![tls_secret("shop-tls")],
            ..Cluster::default()
        }
    }

    /// The generated `http` block in a whole configuration, compiled as the server would.
    fn compiles(g: &Generated, dir: &std::path::Path) {
        loads(g, dir).unwrap_or_else(|e| panic!("{e}\n{}", g.http));
    }

    /// Whether the server loads the generated `http` block in a whole configuration.
    fn loads(g: &Generated, dir: &std::path::Path) -> Result<(), String> {
        for (path, bytes) in &g.files {
            std::fs::write(path, bytes).expect("write a file");
        }
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = rcgen::CertificateParams::new(vec!["default".into()])
            .expect("params")
            .self_signed(&key)
            .expect("a certificate");
        std::fs::write(dir.join("default.crt"), cert.pem()).expect("write");
        std::fs::write(dir.join("default.key"), key.serialize_pem()).expect("write");
        let text = format!("events {{}}\nhttp {{\n{}}}\n", g.http);
        let conf = dir.join("nginx.conf");
        let loaded = portcullis_config::load_str(&text, &conf, &Default::default())
            .map_err(|e| e.to_string())?;
        portcullis_server::compile(&loaded, dir, None)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_route_whose_configuration_does_not_load_is_left_out() {
        let dir = temp("loadable-routes");
        let settings = settings(&dir);
        let mut c = cluster();
        c.ingresses.push(ingress(
            "shop",
            "2026-01-01T00:00:00Z",
            json!({"rules": [{"host": "a.example", "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "api", "port": {"number": 9000}}}}]}}]}),
        ));
        c.gateway_classes.push(
            from_value(json!({"metadata": {"name": "gw"},
                              "spec": {"controllerName": "portcullis.dev/gateway-controller"}}))
            .expect("a GatewayClass"),
        );
        c.gateways.push(
            from_value(
                json!({"metadata": {"name": "gw", "namespace": "shop"}, "spec": {
                "gatewayClassName": "gw",
                "listeners": [{"name": "web", "port": 9080, "protocol": "HTTP"}]}}),
            )
            .expect("a Gateway"),
        );
        for (name, host) in [("good", "good.example"), ("bad", "bad.example")] {
            c.routes.push(
                from_value(
                    json!({"metadata": {"name": name, "namespace": "shop"}, "spec": {
                    "parentRefs": [{"name": "gw"}], "hostnames": [host],
                    "rules": [{"backendRefs": [{"name": "api", "port": 9000}]}]}}),
                )
                .expect("an HTTPRoute"),
            );
        }
        // What the server would not load, as a stand-in: the bad route's host.
        let loads = |g: &Generated| match g.http.contains("bad.example") {
            true => Err("refused".to_owned()),
            false => Ok(()),
        };
        let g = loadable(&c, &settings, loads).expect("the rest loads");
        assert!(g.http.contains("server_name good.example;"), "{}", g.http);
        assert!(!g.http.contains("bad.example"), "{}", g.http);
        assert!(g.applied.contains("shop/shop"));
        let bad = (g.statuses.iter())
            .find(|s| s.kind == "HTTPRoute" && s.name == "bad")
            .expect("a status for the route left out");
        let accepted = &bad.status["parents"][0]["conditions"][0];
        assert_eq!(accepted["status"], "False", "{accepted}");
        assert_eq!(
            accepted["message"],
            "the configuration it makes does not load: refused"
        );
    }

    #[test]
    fn an_ingress_whose_configuration_does_not_load_is_left_out() {
        let dir = temp("loadable");
        let spec = |host: &str| {
            json!({"rules": [{"host": host, "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "api", "port": {"number": 9000}}}}]}}]})
        };
        let mut settings = settings(&dir);
        settings.snippets = true;
        let mut c = cluster();
        let mut broken = ingress("broken", "2026-01-02T00:00:00Z", spec("b.example"));
        broken.metadata.annotations = Some(BTreeMap::from([(
            "nginx.org/server-snippets".to_owned(),
            "no_such_directive on;".to_owned(),
        )]));
        c.ingresses = vec![
            ingress("first", "2026-01-01T00:00:00Z", spec("a.example")),
            broken,
            ingress("last", "2026-01-03T00:00:00Z", spec("c.example")),
        ];
        // The whole does not load: the snippet names what the server does not know.
        assert!(loads(&translate(&c, &settings), &dir).is_err());
        let g = loadable(&c, &settings, |g| loads(g, &dir)).expect("the others load");
        assert!(g.applied.contains("shop/first") && g.applied.contains("shop/last"));
        assert!(!g.applied.contains("shop/broken"), "{:?}", g.applied);
        assert!(!g.http.contains("no_such_directive"));
        assert_eq!(g.problems.len(), 1, "{:?}", g.problems);
        assert!(
            (g.problems[0].reason).starts_with("the configuration it makes does not load: ")
                && g.problems[0].reason.contains("no_such_directive"),
            "{:?}",
            g.problems
        );
        compiles(&g, &dir);
        // Every one failing is a cause they share: nothing is left out.
        let mut all = c.clone();
        all.ingresses
            .retain(|i| i.metadata.name.as_deref() == Some("broken"));
        assert!(loadable(&all, &settings, |g| loads(g, &dir)).is_none());
    }

    /// A test's directory, removed when the test ends (a failed one's too: it is the
    /// assertion's message that tells why, not the files).
    struct Temp(PathBuf);

    impl std::ops::Deref for Temp {
        type Target = std::path::Path;

        fn deref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn temp(label: &str) -> Temp {
        let dir = std::env::temp_dir().join(format!("ingress-{label}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("logs")).expect("mkdir");
        Temp(dir)
    }

    #[test]
    fn hosts_paths_backends_and_tls() {
        let dir = temp("whole");
        let mut c = cluster();
        c.ingresses.push(ingress(
            "shop",
            "2026-01-01T00:00:00Z",
            json!({
                "ingressClassName": "portcullis",
                "tls": [{"hosts": ["shop.example"], "secretName": "shop-tls"}],
                "rules": [{"host": "shop.example", "http": {"paths": [
                    {"path": "/app/", "pathType": "Prefix",
                     "backend": {"service": {"name": "web", "port": {"name": "http"}}}},
                    {"path": "/app", "pathType": "Exact",
                     "backend": {"service": {"name": "api", "port": {"number": 9000}}}},
                    {"path": "/v[0-9]+/", "pathType": "ImplementationSpecific",
                     "backend": {"service": {"name": "api", "port": {"number": 9000}}}},
                ]}}, {"host": "*.shop.example", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "web", "port": {"number": 80}}}},
                ]}}],
            }),
        ));
        let g = translate(&c, &settings(&dir));
        assert!(g.problems.is_empty(), "{:?}", g.problems);
        assert!(g.applied.contains("shop/shop"));
        let h = &g.http;
        // Ready endpoints only, on the slice's port of the service port's name.
        assert!(h.contains("upstream shop_shop_web_80 {\n    zone shop_shop_web_80 256k;\n    random two least_conn;\n    server 10.244.1.1:8080;\n    server 10.244.1.2:8080;\n}"), "{h}");
        assert!(!h.contains("10.244.1.3"), "{h}");
        assert!(h.contains("server 10.244.2.1:9001;"), "{h}");
        // Element-wise prefix; the exact path the Exact route's.
        assert!(h.contains("location /app/ {"), "{h}");
        assert!(
            h.contains("location = /app { ")
                && h.contains("proxy_pass http://shop_shop_api_9000; }"),
            "{h}"
        );
        assert_eq!(h.matches("location = /app ").count(), 1, "{h}");
        assert!(h.contains("location ~ \"^/v[0-9]+/\" {"), "{h}");
        // TLS by SNI, HTTP redirected; one label for the wildcard.
        assert!(h.contains("listen 8443 ssl;"), "{h}");
        assert!(h.contains("shop_shop-tls.crt"), "{h}");
        assert!(h.contains("return 301 https://$host$request_uri;"), "{h}");
        assert!(
            h.contains("server_name \"~^[^.]+\\.shop\\.example$\";"),
            "{h}"
        );
        compiles(&g, &dir);
    }

    #[test]
    fn annotations_reach_the_configuration() {
        let dir = temp("annotations");
        let spec = json!({
            "tls": [{"hosts": ["shop.example"], "secretName": "shop-tls"}],
            "rules": [{"host": "shop.example", "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "api", "port": {"number": 9000}}}}]}}],
        });
        let mut c = cluster();
        let mut tuned = ingress("tuned", "2026-01-01T00:00:00Z", spec.clone());
        tuned.metadata.annotations = Some(
            [
                ("nginx.org/proxy-read-timeout", "90"),
                ("nginx.org/lb-method", "least_conn"),
                ("nginx.org/keepalive", "8"),
                ("nginx.ingress.kubernetes.io/ssl-redirect", "false"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
        );
        let mut guarded = ingress("guarded", "2026-01-01T00:00:00Z", spec);
        guarded.metadata.annotations = Some(
            [(
                "nginx.ingress.kubernetes.io/whitelist-source-range",
                "10.0.0.0/8",
            )]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
        );
        c.ingresses = vec![tuned, guarded];
        let g = translate(&c, &settings(&dir));
        let h = &g.http;
        assert!(h.contains("upstream shop_tuned_api_9000 {\n    zone shop_tuned_api_9000 256k;\n    least_conn;\n    keepalive 8;\n"), "{h}");
        assert!(h.contains("proxy_read_timeout 90s;"), "{h}");
        assert!(h.contains("proxy_set_header Connection \"\";"), "{h}");
        assert!(!h.contains("return 301"), "{h}");
        // What it cannot honour refuses the Ingress: nothing of it is served.
        assert!(!h.contains("shop_guarded"), "{h}");
        assert_eq!(
            g.problems,
            vec![Problem {
                namespace: "shop".into(),
                name: "guarded".into(),
                reason: "annotation \"nginx.ingress.kubernetes.io/whitelist-source-range\" is not supported".into(),
            }]
        );
        compiles(&g, &dir);
    }

    #[test]
    fn jwt_annotations_guard_every_location() {
        let dir = temp("jwt");
        let route = json!({"rules": [{"host": "api.example", "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "api", "port": {"number": 9000}}}}]}}]});
        let jwks = br#"{"keys": [{"kty": "oct", "kid": "0001", "k": "c2VjcmV0"}]}"#.to_vec();
        // JSON with `keys`, but not a key the server would load (an RSA key without its
        // modulus): refused here, not by the server for every Ingress.
        let broken = br#"{"keys": [{"kty": "RSA", "e": "AQAB"}]}"#.to_vec();
        let mut c = cluster();
        for (name, bytes) in [("jwk", jwks), ("broken", broken)] {
            c.secrets.push(
                from_value(json!({
                    "metadata": {"name": name, "namespace": "shop"},
                    "type": "nginx.org/jwk",
                    "data": {"jwk": serde_json::to_value(k8s_openapi::ByteString(bytes)).expect("bytes")},
                }))
                .expect("a Secret"),
            );
        }
        let annotate = |name: &str, key: &str| {
            let mut i = ingress(name, "2026-01-01T00:00:00Z", route.clone());
            i.metadata.annotations = Some(
                [
                    ("nginx.com/jwt-key", key),
                    ("nginx.com/jwt-realm", "Camera bits"),
                    ("nginx.com/jwt-token", "$cookie_auth_token"),
                    ("nginx.com/jwt-login-url", "https://login.example.com"),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into(),
            );
            i
        };
        c.ingresses = vec![
            annotate("guarded", "jwk"),
            annotate("keyless", "missing"),
            annotate("unloadable", "broken"),
        ];
        let g = translate(&c, &settings(&dir));
        let h = &g.http;
        assert!(
            h.contains("auth_jwt \"Camera bits\" token=$cookie_auth_token; auth_jwt_key_file "),
            "{h}"
        );
        assert!(
            h.contains("shop_jwk.jwk; error_page 401 https://login.example.com;"),
            "{h}"
        );
        // No key set, no Ingress: never served without its check.
        assert!(!h.contains("shop_keyless"), "{h}");
        assert!(!h.contains("shop_unloadable"), "{h}");
        assert_eq!(g.problems.len(), 2, "{:?}", g.problems);
        assert!(
            g.problems[0].reason.contains("nginx.org/jwk"),
            "{:?}",
            g.problems
        );
        assert!(
            g.problems[1]
                .reason
                .contains("\"shop/broken\" has no JSON Web Key set: "),
            "{:?}",
            g.problems
        );
        compiles(&g, &dir);
    }

    #[test]
    fn classes_select_ingresses() {
        let dir = temp("classes");
        let route = json!({"rules": [{"host": "a.example", "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "api", "port": {"number": 9000}}}}]}}]});
        let with = |mut spec: serde_json::Value, extra: serde_json::Value| {
            if let Some(class) = extra.get("class") {
                spec["ingressClassName"] = class.clone();
            }
            let mut i = ingress("i", "2026-01-01T00:00:00Z", spec);
            if let Some(a) = extra.get("legacy") {
                i.metadata.annotations = Some(
                    [(
                        LEGACY_CLASS.to_owned(),
                        a.as_str().unwrap_or_default().to_owned(),
                    )]
                    .into(),
                );
            }
            i
        };
        let cases = [
            (json!({"class": "portcullis"}), true),
            (json!({"class": "other"}), false),
            (json!({"class": "missing"}), false),
            (json!({"legacy": "portcullis"}), true),
            (json!({"legacy": "nginx"}), false),
            (json!({}), true),
        ];
        for (extra, expected) in cases {
            let mut c = cluster();
            c.ingresses.push(with(route.clone(), extra.clone()));
            let g = translate(&c, &settings(&dir));
            assert_eq!(g.applied.contains("shop/i"), expected, "{extra}");
        }
        // No default class: an Ingress naming none is nobody's here.
        let mut c = cluster();
        c.classes = vec![class("portcullis", false)];
        c.ingresses.push(with(route, json!({})));
        assert!(translate(&c, &settings(&dir)).applied.is_empty());
    }

    #[test]
    fn the_oldest_keeps_a_path_and_bad_ingresses_are_reported() {
        let dir = temp("conflicts");
        let spec = |service: &str, path: &str| {
            json!({"rules": [{"host": "a.example", "http": {"paths": [
            {"path": path, "pathType": "Prefix",
             "backend": {"service": {"name": service, "port": {"number": 9000}}}}]}}]})
        };
        let mut c = cluster();
        c.ingresses = vec![
            ingress("newer", "2026-02-01T00:00:00Z", spec("api", "/x")),
            ingress("older", "2026-01-01T00:00:00Z", spec("api", "/x")),
            ingress(
                "injected",
                "2026-01-01T00:00:00Z",
                spec("api", "/y; return 200"),
            ),
            ingress("nosvc", "2026-01-01T00:00:00Z", spec("gone", "/z")),
        ];
        let g = translate(&c, &settings(&dir));
        let reasons: Vec<(&str, &str)> = (g.problems.iter())
            .map(|p| (p.name.as_str(), p.reason.as_str()))
            .collect();
        assert!(
            reasons.contains(&(
                "newer",
                "path \"/x\" of host \"a.example\" is already routed by shop/older"
            )),
            "{reasons:?}"
        );
        assert!(
            reasons.contains(&("injected", "invalid path \"/y; return 200\"")),
            "{reasons:?}"
        );
        assert!(
            reasons.contains(&("nosvc", "service \"shop/gone\" not found")),
            "{reasons:?}"
        );
        assert!(!g.http.contains("return 200"), "{}", g.http);
        assert!(g.applied.contains("shop/older"));
        compiles(&g, &dir);
    }
}
