//! Gateways' listeners: their ports, protocols and certificates, and the hosts a listener
//! and a route meet on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::objects::{granted, Gateway, Listener, GROUP};
use crate::cluster::{certificate, names, valid_host, Cluster, Settings};

/// Why a listener cannot be programmed: the condition it goes under, the reason, the
/// message.
pub(super) type Refusal = (&'static str, &'static str, String);

/// A listener as planned: where it serves, and what it says in its status.
pub(super) struct ListenerPlan {
    pub gateway: usize,
    pub listener: Listener,
    pub port: u16,
    /// Certificate and key, for HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Why it cannot be programmed.
    pub refused: Option<Refusal>,
    pub attached: usize,
}

/// Each listener of `gateways` (oldest first) as planned, and each port's protocol (true:
/// HTTPS); the certificates they use are added to `secrets`.
pub(super) fn plan(
    gateways: &[&Gateway],
    cluster: &Cluster,
    settings: &Settings,
    secrets: &mut BTreeMap<PathBuf, Vec<u8>>,
) -> (Vec<ListenerPlan>, BTreeMap<u16, bool>) {
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
            p.refused = refusal(l, p.port, settings)
                .or_else(|| {
                    let other = protocols.get(&p.port).is_some_and(|was| *was != https);
                    other.then(|| {
                        let why = format!("port {} serves another protocol", p.port);
                        ("Conflicted", "ProtocolConflict", why)
                    })
                })
                .or_else(|| {
                    claimed.contains(&(p.port, host.clone())).then(|| {
                        let why =
                            format!("port {} already has a listener for this hostname", p.port);
                        ("Conflicted", "HostnameConflict", why)
                    })
                });
            if https && p.refused.is_none() {
                match listener_certificate(l, &namespace, cluster, settings) {
                    Ok((files, written)) => {
                        secrets.extend(written);
                        p.tls = Some(files);
                    }
                    Err(refused) => p.refused = Some(refused),
                }
            }
            // Only a listener that serves holds its port's protocol and its hostname.
            if p.refused.is_none() {
                protocols.insert(p.port, https);
                claimed.insert((p.port, host));
            }
            listeners.push(p);
        }
    }

    (listeners, protocols)
}

/// Why a listener is refused whatever the others: its protocol, its port (none, or the
/// probes'), its hostname.
fn refusal(l: &Listener, port: u16, settings: &Settings) -> Option<Refusal> {
    let host = l.hostname.as_deref().unwrap_or("");
    if l.protocol != "HTTP" && l.protocol != "HTTPS" {
        let why = format!("protocol {} is not supported", l.protocol);
        return Some(("Accepted", "UnsupportedProtocol", why));
    }
    if port == 0 || port == settings.health_port {
        let why = format!("port {} is not available to listeners", l.port);
        return Some(("Accepted", "PortUnavailable", why));
    }
    if !host.is_empty() && !valid_host(host) {
        let why = format!("invalid hostname \"{host}\"");
        return Some(("Accepted", "UnsupportedValue", why));
    }
    None
}

/// An HTTPS listener's certificate and key files, and the files to write; or why not.
#[allow(clippy::type_complexity)]
fn listener_certificate(
    l: &Listener,
    namespace: &str,
    cluster: &Cluster,
    settings: &Settings,
) -> Result<((PathBuf, PathBuf), Vec<(PathBuf, Vec<u8>)>), Refusal> {
    let refused = |reason, why: String| ("ResolvedRefs", reason, why);
    let reference = l.tls.as_ref().and_then(|t| {
        (t.mode.as_deref().unwrap_or("Terminate") == "Terminate")
            .then(|| t.certificate_refs.first())
            .flatten()
    });
    let Some(r) = reference else {
        let why = "an HTTPS listener terminates TLS with a certificateRef".into();
        return Err(refused("InvalidCertificateRef", why));
    };
    if r.kind.as_deref().unwrap_or("Secret") != "Secret"
        || !r.group.as_deref().unwrap_or("").is_empty()
    {
        return Err(refused(
            "InvalidCertificateRef",
            "a certificateRef is a Secret".into(),
        ));
    }
    // Another namespace's Secret only where a ReferenceGrant of it lets Gateways of this one.
    let target = r.namespace.as_deref().unwrap_or(namespace);
    if target != namespace
        && !granted(
            &cluster.grants,
            ("Gateway", namespace),
            ("Secret", target, &r.name),
        )
    {
        let why = format!(
            "no ReferenceGrant of namespace \"{target}\" lets Gateways of \"{namespace}\" name Secret \"{}\"",
            r.name
        );
        return Err(refused("RefNotPermitted", why));
    }
    certificate(cluster, target, &r.name, settings)
        .map_err(|why| refused("InvalidCertificateRef", why))
}

/// Whether `listener` takes HTTPRoutes from `route_ns` (its Gateway in `gateway_ns`).
pub(super) fn allows(
    listener: &Listener,
    gateway_ns: &str,
    route_ns: &str,
    namespaces: &[Namespace],
) -> bool {
    let allowed = listener.allowed_routes.as_ref();
    let kinds = allowed.map(|a| a.kinds.as_slice()).unwrap_or_default();
    if !kinds.is_empty()
        && !kinds.iter().any(|k| {
            k.kind.as_deref() == Some("HTTPRoute") && k.group.as_deref().unwrap_or(GROUP) == GROUP
        })
    {
        return false;
    }
    let namespaces_rule = allowed.and_then(|a| a.namespaces.as_ref());
    match namespaces_rule
        .and_then(|n| n.from.as_deref())
        .unwrap_or("Same")
    {
        "All" => true,
        "Same" => gateway_ns == route_ns,
        "Selector" => {
            let labels = (namespaces.iter())
                .find(|n| n.metadata.name.as_deref() == Some(route_ns))
                .and_then(|n| n.metadata.labels.as_ref());
            let selector = namespaces_rule.and_then(|n| n.selector.as_ref());
            selector.is_some_and(|s| selects(s, labels))
        }
        _ => false,
    }
}

/// Whether a label selector selects an object of `labels`: every `matchLabels` pair and every
/// `matchExpressions` term (`In`, `NotIn`, `Exists`, `DoesNotExist`). One naming nothing
/// selects everything, as Kubernetes reads it.
fn selects(selector: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let value = |key: &str| labels.and_then(|l| l.get(key));
    let pairs = (selector.match_labels.iter().flatten()).all(|(k, v)| value(k) == Some(v));
    let terms = (selector.match_expressions.iter().flatten()).all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        match (e.operator.as_str(), value(&e.key)) {
            ("In", Some(v)) => values.contains(v),
            ("NotIn", v) => v.is_none_or(|v| !values.contains(v)),
            ("Exists", v) => v.is_some(),
            ("DoesNotExist", v) => v.is_none(),
            _ => false,
        }
    });
    pairs && terms
}

/// The hosts a listener's hostname and a route's meet on (`""`: every host).
pub(super) fn meet(listener: Option<&str>, route: &[String]) -> Vec<String> {
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
