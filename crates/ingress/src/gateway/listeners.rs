//! Gateways' listeners: their ports, protocols and certificates, and the hosts a listener
//! and a route meet on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::objects::{Gateway, Listener, GROUP};
use crate::cluster::{certificate, names, valid_host, Cluster, Settings};

/// A listener as planned: where it serves, and what it says in its status.
pub(super) struct ListenerPlan {
    pub gateway: usize,
    pub listener: Listener,
    pub port: u16,
    /// Certificate and key, for HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Why it cannot be programmed: reason, message, and the condition it goes under.
    pub refused: Option<(&'static str, &'static str, String)>,
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
            if l.protocol != "HTTP" && !https {
                p.refused = Some((
                    "Accepted",
                    "UnsupportedProtocol",
                    format!("protocol {} is not supported", l.protocol),
                ));
            } else if p.port == 0 {
                p.refused = Some(("Accepted", "PortUnavailable", "no port".into()));
            } else if !host.is_empty() && !valid_host(&host) {
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
                            secrets.extend(written);
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

    (listeners, protocols)
}

/// Whether `listener` takes HTTPRoutes from `route_ns` (its Gateway in `gateway_ns`).
pub(super) fn allows(listener: &Listener, gateway_ns: &str, route_ns: &str) -> bool {
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
