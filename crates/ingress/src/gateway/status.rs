//! The status conditions of Gateways, and how a status is written over the one an object has.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::listeners::ListenerPlan;
use super::objects::{Gateway, Reference, Status, GROUP};
use crate::cluster::{names, Settings};

/// Each Gateway's status: each listener's conditions and routes, and the Gateway's own.
pub(super) fn gateways(
    gateways: &[&Gateway],
    listeners: &[ListenerPlan],
    settings: &Settings,
) -> Vec<Status> {
    let mut out = Vec::new();
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
            // Route kinds the listener names that are not HTTPRoute: not resolved, the rest
            // served.
            let kinds = (l.listener.allowed_routes.as_ref()).map_or(&[][..], |a| &a.kinds[..]);
            let http_route = |k: &&Reference| {
                k.kind.as_deref() == Some("HTTPRoute")
                    && k.group.as_deref().unwrap_or(GROUP) == GROUP
            };
            let unsupported: Vec<&str> = (kinds.iter())
                .filter(|k| !http_route(k))
                .map(|k| k.kind.as_deref().unwrap_or(""))
                .collect();
            let supported = kinds.is_empty() || kinds.iter().any(|k| http_route(&k));
            conditions.push(match kind {
                "ResolvedRefs" => condition("ResolvedRefs", false, reason, &message, generation),
                _ if !unsupported.is_empty() => {
                    let why = format!("route kinds not supported: {}", unsupported.join(", "));
                    condition("ResolvedRefs", false, "InvalidRouteKinds", &why, generation)
                }
                _ => condition("ResolvedRefs", true, "ResolvedRefs", "", generation),
            });
            conditions.push(if ok {
                condition("Programmed", true, "Programmed", "", generation)
            } else {
                condition("Programmed", false, "Invalid", &message, generation)
            });
            statuses.push(json!({
                "name": l.listener.name,
                "supportedKinds": if supported {
                    json!([{"group": GROUP, "kind": "HTTPRoute"}])
                } else {
                    json!([])
                },
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
        out.push(Status {
            kind: "Gateway",
            namespace,
            name,
            status,
        });
    }

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
pub(super) fn condition(
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
