//! `/9/http/upstreams/{name}/servers[/{id}]`: a group's servers as configured, and with
//! `api write=on`, NGINX Plus's changes to them without a reload: `POST` adds a server,
//! `PATCH` changes one (weight, `down`, `drain`, limits, address), `DELETE` removes one.
//! Only a group in a `zone` has servers to show or change here; for the others the answer is
//! Plus's `UpstreamStatic`. The JSON in and out, and every error's status and code, are
//! Plus's.

use std::sync::Arc;
use std::time::Duration;

use portcullis_http::Method;
use portcullis_proxy::upstream::{Change, ChangeError, Peer, ServerParams, Upstream};
use serde_json::{json, Map, Value};

use super::counters::Layout;
use super::json::{error, Answer};
use crate::upstream::group::{Changed, Live, LiveError};

/// What a request to a group's servers asks.
pub(super) enum Ask {
    List,
    One(String),
}

/// The group and server a path of the API names (`/9/http/upstreams/{name}/servers[/{id}]`),
/// if it names one.
pub(super) fn target(path: &str) -> Option<(String, Ask)> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let [version, "http", "upstreams", group, "servers", ref rest @ ..] = parts[..] else {
        return None;
    };
    let known = (version.parse::<u32>()).is_ok_and(|v| (1..=super::json::VERSION).contains(&v));
    let ask = match rest {
        _ if !known => return None,
        [] => Ask::List,
        [id] => Ask::One((*id).to_owned()),
        _ => return None,
    };
    Some((group.to_owned(), ask))
}

/// Answers a `GET` of the servers of `group`, or one of them.
pub(super) fn read(layout: &Layout, group: &str, ask: &Ask) -> Answer {
    let upstream = match live(layout, group) {
        Ok(l) => l.current(),
        Err(a) => return a,
    };
    match ask {
        Ask::List => ok(200, list(&upstream)),
        Ask::One(id) => match id_of(id).and_then(|id| found(&upstream, id)) {
            Ok(peer) => ok(200, server(peer)),
            Err(a) => a,
        },
    }
}

/// Makes a `POST`, `PATCH` or `DELETE` on the servers of `group`, with the request's `body`.
/// The change is made of the group as it is when its turn comes, so that two at once both
/// count.
pub(super) fn write(
    layout: &Layout,
    method: Method,
    group: &str,
    ask: &Ask,
    body: &[u8],
) -> Answer {
    let live = match live(layout, group) {
        Ok(l) => l,
        Err(a) => return a,
    };
    let made = live.change(|current| match (method, ask) {
        (Method::Post, Ask::List) => added(&fields(body)?),
        (Method::Patch, Ask::One(id)) => {
            let peer = found(current, id_of(id)?)?;
            modified(peer, &fields(body)?)
        }
        (Method::Delete, Ask::One(id)) => Ok(Change::Remove { id: id_of(id)? }),
        _ => Err(error(405, "method not supported", "MethodNotSupported")),
    });
    match made {
        Ok(Changed {
            upstream,
            ids,
            change,
        }) => match change {
            Change::Remove { .. } => ok(200, list(&upstream)),
            Change::Add { .. } => match ids.first().and_then(|id| upstream.by_id(*id).ok()) {
                Some(p) => ok(201, server(p)),
                None => ok(200, list(&upstream)),
            },
            Change::Modify { id, .. } => match upstream.by_id(id) {
                Ok(p) => ok(200, server(p)),
                Err(_) => ok(200, list(&upstream)),
            },
        },
        Err(LiveError::Make(a)) => a,
        Err(LiveError::Change(e)) => refused(&e),
        Err(LiveError::State(text)) => error(500, &text, "UpstreamStateWriteError"),
    }
}

fn ok(status: u16, value: Value) -> Answer {
    Answer {
        status,
        body: value.to_string(),
    }
}

/// The group `name`, when the API may change it.
fn live(layout: &Layout, name: &str) -> Result<Arc<Live>, Answer> {
    let g = layout
        .group(name)
        .ok_or_else(|| error(404, "upstream not found", "UpstreamNotFound"))?;
    g.live()
        .cloned()
        .ok_or_else(|| error(400, "upstream is static", "UpstreamStatic"))
}

fn id_of(text: &str) -> Result<u32, Answer> {
    text.parse::<u32>()
        .map_err(|_| error(400, "invalid server id", "UpstreamBadServerId"))
}

fn found(upstream: &Upstream, id: u32) -> Result<&Peer, Answer> {
    upstream.by_id(id).map_err(|e| refused(&e))
}

fn refused(e: &ChangeError) -> Answer {
    let text = e.to_string();
    match e {
        ChangeError::NotFound(_) => error(404, &text, "UpstreamServerNotFound"),
        ChangeError::BadAddress(_) => error(400, &text, "UpstreamBadAddress"),
        ChangeError::Weights(_) => error(400, &text, "UpstreamBadWeight"),
        ChangeError::Static => error(400, &text, "UpstreamStatic"),
        ChangeError::Unsupported(_) | ChangeError::BackupImmutable => {
            error(400, &text, "UpstreamConfFormatError")
        }
    }
}

/// The group's servers in the order of their IDs.
fn list(upstream: &Upstream) -> Value {
    let mut peers: Vec<&Peer> = upstream.peers().iter().collect();
    peers.sort_by_key(|p| p.id());
    Value::Array(peers.into_iter().map(server).collect())
}

/// Plus's server object.
pub(super) fn server(p: &Peer) -> Value {
    let q = p.params();
    let mut v = json!({
        "id": p.id(),
        "server": p.server(),
        "weight": q.weight,
        "max_conns": q.max_conns,
        "max_fails": q.max_fails,
        "fail_timeout": format!("{}s", q.fail_timeout.as_secs()),
        "slow_start": format!("{}s", q.slow_start.as_secs()),
        "route": "",
        "backup": q.backup,
        "down": q.down,
    });
    if q.drain {
        v["drain"] = json!(true);
    }
    v
}

/// The request's JSON object, with no nested object or list.
fn fields(body: &[u8]) -> Result<Map<String, Value>, Answer> {
    let value: Value =
        serde_json::from_slice(body).map_err(|_| error(415, "json error", "JsonError"))?;
    let Value::Object(map) = value else {
        return Err(error(415, "json error", "JsonError"));
    };
    if map.values().any(|v| v.is_object() || v.is_array()) {
        return Err(format_error("nested object or list"));
    }
    Ok(map)
}

fn format_error(text: &str) -> Answer {
    error(400, text, "UpstreamConfFormatError")
}

/// `POST`: a new server, its address required.
fn added(f: &Map<String, Value>) -> Result<Change, Answer> {
    let server = match f.get("server") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(_) => return Err(format_error("invalid \"server\" value")),
        None => return Err(format_error("missing \"server\" argument")),
    };
    if f.contains_key("id") {
        return Err(format_error("unknown parameter \"id\""));
    }
    let params = settings(ServerParams::default(), f, true)?;
    Ok(Change::Add { server, params })
}

/// `PATCH`: server `peer` with what the request changes.
fn modified(peer: &Peer, f: &Map<String, Value>) -> Result<Change, Answer> {
    let server = match f.get("server") {
        None => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return Err(format_error("invalid \"server\" value")),
    };
    match f.get("id") {
        None => {}
        Some(v) if v.as_u64() == Some(u64::from(peer.id())) => {}
        Some(_) => return Err(format_error("invalid \"id\" value")),
    }
    let params = settings(peer.params().clone(), f, false)?;
    Ok(Change::Modify {
        id: peer.id(),
        server,
        params,
    })
}

/// `params` with the object's settings over them. `backup` only where a server is added.
fn settings(
    mut params: ServerParams,
    f: &Map<String, Value>,
    adding: bool,
) -> Result<ServerParams, Answer> {
    for (name, value) in f {
        match name.as_str() {
            "server" | "id" => {}
            "weight" => {
                params.weight = number(value)
                    .filter(|w| *w >= 1)
                    .ok_or_else(|| error(400, "invalid \"weight\"", "UpstreamBadWeight"))?
            }
            "max_conns" => {
                params.max_conns = number(value)
                    .ok_or_else(|| error(400, "invalid \"max_conns\"", "UpstreamBadMaxConns"))?
            }
            "max_fails" => {
                params.max_fails = number(value)
                    .ok_or_else(|| error(400, "invalid \"max_fails\"", "UpstreamBadMaxFails"))?
            }
            "fail_timeout" => {
                params.fail_timeout = time(value).ok_or_else(|| {
                    error(400, "invalid \"fail_timeout\"", "UpstreamBadFailTimeout")
                })?
            }
            "slow_start" => {
                params.slow_start = time(value)
                    .ok_or_else(|| error(400, "invalid \"slow_start\"", "UpstreamBadSlowStart"))?
            }
            // Sticky routes are not kept: only the empty one.
            "route" => {
                if value.as_str() != Some("") {
                    return Err(error(400, "route is not supported", "UpstreamBadRoute"));
                }
            }
            "backup" | "down" | "drain" => {
                let on = value
                    .as_bool()
                    .ok_or_else(|| format_error(&format!("invalid \"{name}\" value")))?;
                match name.as_str() {
                    "backup" if adding => params.backup = on,
                    // Cannot change on a server: refused below if it would.
                    "backup" if on != params.backup => {
                        return Err(refused(&ChangeError::BackupImmutable))
                    }
                    "backup" => {}
                    "down" => params.down = on,
                    _ => params.drain = on,
                }
            }
            other => return Err(format_error(&format!("unknown parameter \"{other}\""))),
        }
    }
    Ok(params)
}

/// A count: a JSON number, or its text as Plus takes it.
fn number(v: &Value) -> Option<u32> {
    let n = match v {
        Value::Number(n) => n.as_u64()?,
        Value::String(s) => portcullis_config::value::parse_number(s)?,
        _ => return None,
    };
    u32::try_from(n).ok()
}

/// A time in nginx's syntax (`10s`, `1m`), or a number of seconds.
fn time(v: &Value) -> Option<Duration> {
    match v {
        Value::Number(n) => n.as_u64().map(Duration::from_secs),
        Value::String(s) => portcullis_config::value::parse_time_secs(s).map(Duration::from_secs),
        _ => None,
    }
}
