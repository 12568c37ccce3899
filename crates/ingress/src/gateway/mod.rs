//! Gateway API v1 (`gateway.networking.k8s.io/v1`) as nginx.conf text: GatewayClass, Gateway
//! and HTTPRoute, and the status conditions each gets.
//!
//! - **Classes**: a GatewayClass is this controller's when its `spec.controllerName` is the
//!   controller's gateway name; each gets `Accepted`. A Gateway is this controller's when its
//!   `gatewayClassName` names one.
//! - **Listeners**: `HTTP` and `HTTPS` (TLS terminated with the certificate of a
//!   `kubernetes.io/tls` Secret, of the Gateway's namespace or granted), on their own port, for their
//!   `hostname` or every host. A port has one protocol: the oldest Gateway's listener keeps
//!   it, a later one of another protocol (or the same port and hostname) is `Conflicted`.
//!   On the Ingresses' ports a listener's hosts are served beside the Ingresses'; a host both
//!   claim, or every host where an Ingress has a rule without a host, stays the Ingress's.
//! - **Routes** attach to listeners by `parentRefs` (`sectionName`, `port`), where the
//!   listener's `allowedRoutes` let them (`Same` namespace by default, `All`, a label `Selector` of namespaces); their hostnames
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
//! - **References to other namespaces** (a route's Service, a listener's certificate) only
//!   where a ReferenceGrant (`v1beta1`) of that namespace allows them; else `RefNotPermitted`.
//! - **Backends**: Services, by port; several are chosen by weight
//!   (`split_clients` on `$request_id`). A backend that cannot be resolved keeps its share,
//!   answered 500, as the API says; `ResolvedRefs` says why.

mod emit;
mod listeners;
pub mod objects;
mod routes;
mod status;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::json;

use crate::cluster::{age, Cluster, Settings};

pub use objects::*;
pub use routes::Taken;
pub use status::with_times;

/// What the Gateway API objects come to, beside the Ingresses'.
#[derive(Debug, Default)]
pub(crate) struct Planned {
    /// `map`, `split_clients` and `server` blocks of the `http` block.
    pub http: String,
    /// Locations of the default servers of the Ingresses' ports, by port.
    pub catch_all: BTreeMap<u16, CatchAll>,
    pub upstreams: BTreeMap<String, Vec<String>>,
    pub files: BTreeMap<PathBuf, Vec<u8>>,
    pub statuses: Vec<Status>,
}

/// The Gateways of this controller's classes.
fn our_gateways<'a>(cluster: &'a Cluster, settings: &Settings) -> Vec<&'a Gateway> {
    let ours = |name: &str| {
        cluster.gateway_classes.iter().any(|c| {
            c.metadata.name.as_deref() == Some(name)
                && c.spec.controller_name == settings.gateway_controller
        })
    };
    (cluster.gateways.iter())
        .filter(|g| ours(&g.spec.gateway_class_name))
        .collect()
}

/// The status of a route left out because the configuration it makes does not load: not
/// accepted by any of its parents that are this controller's (None if it has none).
pub(crate) fn refused_route(
    cluster: &Cluster,
    settings: &Settings,
    route: &HttpRoute,
    why: &str,
) -> Option<Status> {
    let (namespace, name) = crate::cluster::names(&route.metadata);
    let gateways = our_gateways(cluster, settings);
    let parents: Vec<serde_json::Value> = (route.spec.parent_refs.iter())
        .filter(|p| {
            let ns = p.namespace.as_deref().unwrap_or(&namespace);
            p.group.as_deref().unwrap_or(GROUP) == GROUP
                && p.kind.as_deref().unwrap_or("Gateway") == "Gateway"
                && gateways.iter().any(|g| {
                    let (gns, gname) = crate::cluster::names(&g.metadata);
                    gns == ns && gname == p.name
                })
        })
        .map(|p| {
            let generation = route.metadata.generation;
            json!({
                "parentRef": p,
                "controllerName": settings.gateway_controller,
                "conditions": [status::condition("Accepted", false, "UnsupportedValue", why, generation)],
            })
        })
        .collect();
    (!parents.is_empty()).then(|| Status {
        kind: "HTTPRoute",
        namespace,
        name,
        status: json!({"parents": parents}),
    })
}

/// The Gateway API objects of `cluster` that are this controller's, as configuration.
pub(crate) fn plan(cluster: &Cluster, settings: &Settings, taken: &Taken) -> Planned {
    let mut out = Planned::default();
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
                status::condition("Accepted", true, "Accepted", "", generation),
            ]}),
        });
    }
    let mut gateways = our_gateways(cluster, settings);
    gateways.sort_by_key(|g| age(&g.metadata));

    let (mut listeners, protocols) = listeners::plan(&gateways, cluster, settings, &mut out.files);
    let attached = routes::attach(&gateways, &mut listeners, cluster, settings, taken);
    out.statuses.extend(attached.statuses);
    out.statuses
        .extend(status::gateways(&gateways, &listeners, settings));
    let mut emitted = emit::Emitted::default();
    emit::configuration(
        &mut emitted,
        &attached.servers,
        attached.groups,
        &listeners,
        &protocols,
        settings,
    );
    out.http = emitted.http;
    out.catch_all = emitted.catch_all;
    out.upstreams = emitted.upstreams;
    out
}
