//! The NGINX Plus REST API, version 9, as read: the paths and JSON shapes NGINX Plus
//! answers with for what portcullis counts, so the tools that read it (the exporter, the
//! dashboard) work unchanged.
//!
//! `/`: the versions; `/9/`: the endpoints; `/9/nginx`, `/9/connections`, `/9/ssl`,
//! `/9/workers`, `/9/processes`, `/9/http/` (`requests`, `server_zones`, `location_zones`,
//! `upstreams`), one zone or group by name (`/9/http/upstreams/{name}/servers` is
//! `servers.rs`'s). `/9/slabs`, `/9/resolvers` and `/9/http/` `caches`,
//! `limit_reqs`, `limit_conns`, `keyvals` answer empty: they are not counted yet. Errors are
//! Plus's: `{"error": {"status", "text", "code"}, "href"}`.

use serde_json::{json, Map, Value};

use super::counters::{state, PeerTotals, Snapshot, ZoneTotals, CLASSES};
use crate::stats::Totals;

/// The API's version, the newest NGINX Plus answers.
pub(super) const VERSION: u32 = 9;

const HREF: &str = "https://nginx.org/en/docs/http/ngx_http_api_module.html";

/// What answers a request: the status and its JSON.
pub(super) struct Answer {
    pub status: u16,
    pub body: String,
}

/// What the API shows of the server itself.
pub(super) struct Server<'a> {
    pub totals: Totals,
    /// Each worker's counters.
    pub workers: Vec<Totals>,
    pub snapshot: Option<&'a Snapshot>,
    /// The address the request came to.
    pub address: String,
}

pub(super) fn error(status: u16, text: &str, code: &str) -> Answer {
    let body = json!({
        "error": {"status": status, "text": text, "code": code},
        "href": HREF,
    });
    Answer {
        status,
        body: body.to_string(),
    }
}

fn ok(value: Value) -> Answer {
    Answer {
        status: 200,
        body: value.to_string(),
    }
}

/// Answers `path` (the URI after the API's location), for a `GET` (or `HEAD`).
pub(super) fn answer(path: &str, server: &Server<'_>) -> Answer {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let Some((version, rest)) = parts.split_first() else {
        return ok(json!((1..=VERSION).collect::<Vec<_>>()));
    };
    match version.parse::<u32>() {
        Ok(v) if (1..=VERSION).contains(&v) => {}
        _ => return error(404, "unknown version", "UnknownVersion"),
    }
    let t = &server.totals;
    let found = match rest {
        [] => Some(json!([
            "nginx",
            "processes",
            "connections",
            "slabs",
            "http",
            "resolvers",
            "ssl",
            "workers"
        ])),
        // No worker is respawned by a crash (a worker is a thread of the one process), and
        // there are no shared memory slabs or resolver zones to show.
        ["processes"] => Some(json!({"respawned": 0})),
        ["slabs"] | ["resolvers"] => Some(json!({})),
        ["workers"] => Some(Value::Array(
            server
                .workers
                .iter()
                .enumerate()
                .map(|(id, w)| {
                    json!({
                        "id": id,
                        "pid": std::process::id(),
                        "connections": connections(w),
                        "http": {"requests": requests(w)},
                    })
                })
                .collect(),
        )),
        ["nginx"] => Some(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "build": "portcullis",
            "address": server.address,
            "timestamp": now(),
            "pid": std::process::id(),
        })),
        ["connections"] => Some(connections(t)),
        ["ssl"] => Some(json!({
            "handshakes": t.ssl_handshakes,
            "handshakes_failed": t.ssl_failed,
            "session_reuses": t.ssl_reuses,
        })),
        ["http"] => Some(json!([
            "requests",
            "server_zones",
            "location_zones",
            "upstreams",
            "caches",
            "limit_reqs",
            "limit_conns",
            "keyvals"
        ])),
        ["http", "requests"] => Some(requests(t)),
        // Not counted yet: empty, so that clients that read every endpoint (the exporter's
        // Plus mode) go on.
        ["http", "caches" | "limit_reqs" | "limit_conns" | "keyvals"] => Some(json!({})),
        ["http", kind @ ("server_zones" | "location_zones"), name @ ..] => {
            let location = *kind == "location_zones";
            let zones = server.snapshot.map(|s| zones(s, location));
            pick(zones.unwrap_or_default(), name)
        }
        ["http", "upstreams", name @ ..] => {
            let groups = server.snapshot.map(upstreams);
            pick(groups.unwrap_or_default(), name)
        }
        _ => None,
    };
    match found {
        Some(v) => ok(v),
        None => error(404, "path not found", "PathNotFound"),
    }
}

fn connections(t: &Totals) -> Value {
    json!({
        "accepted": t.accepted,
        "dropped": t.accepted.saturating_sub(t.handled),
        "active": t.active.saturating_sub(t.waiting),
        "idle": t.waiting,
    })
}

fn requests(t: &Totals) -> Value {
    json!({"total": t.requests, "current": t.reading + t.writing})
}

/// The whole map, or one of its entries by name.
fn pick(all: Map<String, Value>, name: &[&str]) -> Option<Value> {
    match name {
        [] => Some(Value::Object(all)),
        [one] => all.get(*one).cloned(),
        _ => None,
    }
}

/// Seconds since 1970 in Plus's form, `2024-01-01T00:00:00.000Z`.
fn now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        now.subsec_millis()
    )
}

/// The date of a day counted from 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn responses(counts: &[u64; 5]) -> Value {
    let mut r = Map::new();
    for (class, n) in CLASSES.iter().zip(counts) {
        r.insert((*class).to_owned(), json!(n));
    }
    r.insert("total".to_owned(), json!(counts.iter().sum::<u64>()));
    Value::Object(r)
}

fn zone(t: &ZoneTotals) -> Value {
    json!({
        "requests": t.requests,
        "responses": responses(&t.responses),
        "received": t.received,
        "sent": t.sent,
    })
}

fn zones(s: &Snapshot, location: bool) -> Map<String, Value> {
    s.zones
        .iter()
        .filter(|(z, _)| z.location == location)
        .map(|(z, t)| (z.name.clone(), zone(t)))
        .collect()
}

fn peer(p: &portcullis_proxy::upstream::Peer, t: &PeerTotals, state: &str) -> Value {
    let (header_time, response_time) = t.average_ms();
    let mut v = json!({
        "id": p.id(),
        "server": p.name.as_ref(),
        "name": p.server(),
        "backup": p.is_backup(),
        "weight": p.weight(),
        "state": state,
        "active": p.active(),
        "max_conns": p.max_conns(),
        "requests": t.requests,
        "responses": responses(&t.responses),
        "sent": t.sent,
        "received": t.received,
        "fails": t.fails,
        "header_time": header_time,
        "response_time": response_time,
    });
    // As Plus: only for a peer that is checked.
    let h = p.health_checks();
    if h.checks > 0 || h.unhealthy > 0 {
        let mut checks = json!({"checks": h.checks, "fails": h.fails, "unhealthy": h.unhealthy});
        if let Some(passed) = h.last_passed {
            checks["last_passed"] = json!(passed);
        }
        v["health_checks"] = checks;
    }
    v
}

fn upstreams(s: &Snapshot) -> Map<String, Value> {
    s.groups
        .iter()
        .map(|g| {
            let peers: Vec<Value> = g
                .upstream
                .peers()
                .iter()
                .zip(&g.peers)
                .enumerate()
                .map(|(i, (p, t))| peer(p, t, state(&g.upstream, i)))
                .collect();
            (g.name.clone(), json!({"peers": peers, "zone": g.name}))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Server<'static> {
        Server {
            totals: Totals {
                accepted: 5,
                handled: 4,
                requests: 9,
                active: 3,
                reading: 1,
                writing: 1,
                waiting: 1,
                ..Totals::default()
            },
            workers: Vec::new(),
            snapshot: None,
            address: "127.0.0.1".into(),
        }
    }

    #[test]
    fn paths_and_errors_are_plus_s() {
        let s = server();
        assert_eq!(answer("/", &s).body, "[1,2,3,4,5,6,7,8,9]");
        let c: Value = serde_json::from_str(&answer("/9/connections", &s).body).unwrap();
        assert_eq!(
            c,
            json!({"accepted": 5, "dropped": 1, "active": 2, "idle": 1})
        );
        let r: Value = serde_json::from_str(&answer("/9/http/requests", &s).body).unwrap();
        assert_eq!(r, json!({"total": 9, "current": 2}));
        let e = answer("/10/nginx", &s);
        assert_eq!(e.status, 404);
        assert!(e.body.contains("\"code\":\"UnknownVersion\""), "{}", e.body);
        assert_eq!(answer("/9/nope", &s).status, 404);
        assert_eq!(answer("/9/http/server_zones", &s).body, "{}");
    }

    #[test]
    fn timestamps_are_utc_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(19_723), (2024, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        let t = now();
        assert_eq!(t.len(), 24, "{t}");
        assert!(t.ends_with('Z'));
    }
}
