//! The annotations users set on an Ingress for what their controller does, under the names
//! of NGINX Ingress Controller (`nginx.org/*`, `nginx.com/*`) and ingress-nginx
//! (`nginx.ingress.kubernetes.io/*`), so that manifests move over unchanged; their table is
//! docs/ingress.md. Timeouts, body size, the HTTP to HTTPS redirect, the balancer, upstream
//! keepalive, rewrites, HTTPS backends, rate and connection limits, snippets (with the
//! operator's `--enable-snippets`) and JWT authentication.
//!
//! Any other annotation under these prefixes (an allow list, an authentication) is refused
//! with its Ingress: left out, it could open what the user meant to guard or send a request
//! elsewhere. Every value is checked before it reaches the configuration's text.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::cluster::plain_path;

/// What an Ingress's annotations ask of its locations and groups.
#[derive(Debug, Clone)]
pub(crate) struct Annotated {
    /// Directives for every location of the Ingress.
    pub location: String,
    /// Directives for every group of the Ingress: the balancer first.
    pub upstream: String,
    /// HTTP to its TLS hosts is redirected to HTTPS.
    pub ssl_redirect: bool,
    pub jwt: Option<Jwt>,
    /// `http`-level directives: the zones of the Ingress's rate limits.
    pub http: String,
    /// Raw directives for the servers of the Ingress's hosts (a snippet, when turned on).
    pub server: String,
    pub rewrite: Rewrite,
    /// The Services reached over HTTPS (`nginx.org/ssl-services`).
    pub https_services: BTreeSet<String>,
    /// Every backend is reached over HTTPS (`backend-protocol: HTTPS`).
    pub https_all: bool,
}

/// How the path a backend gets is made from the request's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Rewrite {
    #[default]
    None,
    /// ingress-nginx's `rewrite-target`: what the path's match is replaced by (`$1`... its
    /// captures).
    Target(String),
    /// NGINX Ingress Controller's `rewrites`: by Service, what the location's path is
    /// replaced by.
    Services(BTreeMap<String, String>),
}

/// How the annotations are read: the name the Ingress's zones begin with, and whether
/// snippets of raw configuration are allowed (the operator's `--enable-snippets`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading<'a> {
    pub zone: &'a str,
    pub snippets: bool,
}

/// `nginx.com/jwt-*`: the check every location of the Ingress makes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Jwt {
    /// The Secret of the key set.
    pub key: String,
    pub realm: String,
    /// `token=`: the variable, when not the `Authorization` header's bearer token.
    pub token: Option<String>,
    pub login_url: Option<String>,
}

/// The keys of the controller's ConfigMap: defaults for the annotations of the same names
/// (NGINX Ingress Controller's ConfigMap keys).
const CONFIG_KEYS: [&str; 7] = [
    "proxy-connect-timeout",
    "proxy-read-timeout",
    "proxy-send-timeout",
    "client-max-body-size",
    "ssl-redirect",
    "lb-method",
    "keepalive",
];

/// The controller's ConfigMap as default annotations, checked as an Ingress's would be. Any
/// other key refuses it all: a setting left out (a snippet with an allow list) could open
/// what it guards.
pub(crate) fn defaults(
    data: &BTreeMap<String, String>,
    snippets: bool,
) -> Result<BTreeMap<String, String>, String> {
    let as_annotations: BTreeMap<String, String> = (data.iter())
        .map(|(k, v)| (format!("nginx.org/{k}"), v.clone()))
        .collect();
    let known = |k: &str| CONFIG_KEYS.contains(&k) || SNIPPETS.contains(&k);
    if let Some(k) = data.keys().find(|k| !known(k)) {
        return Err(format!("key \"{k}\" is not supported"));
    }
    let reading = Reading {
        zone: "configmap",
        snippets,
    };
    read(Some(&as_annotations), reading)
        .map_err(|e| e.replace("annotation \"nginx.org/", "key \""))?;
    Ok(as_annotations)
}

/// NGINX Ingress Controller's snippets' names, as annotations and ConfigMap keys.
const SNIPPETS: [&str; 2] = ["location-snippets", "server-snippets"];

const PREFIXES: [&str; 3] = ["nginx.org/", "nginx.ingress.kubernetes.io/", "nginx.com/"];

/// NGINX Ingress Controller's default balancer.
const DEFAULT_BALANCER: &str = "random two least_conn";

/// The setting an annotation's name is, under either controller's name: two annotations of
/// one setting (`nginx.org/client-max-body-size` and
/// `nginx.ingress.kubernetes.io/proxy-body-size`) are `same`.
fn setting(key: &str) -> Option<&str> {
    let name = PREFIXES.iter().find_map(|p| key.strip_prefix(p))?;
    Some(match name {
        "proxy-body-size" => "client-max-body-size",
        "load-balance" => "lb-method",
        "upstream-keepalive-connections" => "keepalive",
        "configuration-snippet" => "location-snippets",
        "server-snippet" => "server-snippets",
        other => other,
    })
}

/// Whether two annotations set one thing.
pub(crate) fn same(a: &str, b: &str) -> bool {
    setting(a).is_some_and(|s| Some(s) == setting(b))
}

/// Reads an Ingress's annotations; an error names the one refused.
pub(crate) fn read(
    annotations: Option<&BTreeMap<String, String>>,
    reading: Reading<'_>,
) -> Result<Annotated, String> {
    let mut a = Annotated {
        location: String::new(),
        upstream: String::new(),
        ssl_redirect: true,
        jwt: None,
        http: String::new(),
        server: String::new(),
        rewrite: Rewrite::None,
        https_services: BTreeSet::new(),
        https_all: false,
    };
    let mut jwt = Jwt::default();
    let mut limits = Limits::default();
    let mut balancer = DEFAULT_BALANCER.to_owned();
    // One setting given under both controllers' names: refused, as ambiguous (and a
    // directive given twice would not load).
    let all: Vec<&String> = annotations.into_iter().flatten().map(|(k, _)| k).collect();
    if let Some((a, b)) = (all.iter().enumerate())
        .find_map(|(i, a)| all[i + 1..].iter().find(|b| same(a, b)).map(|b| (a, b)))
    {
        return Err(format!(
            "annotations \"{a}\" and \"{b}\" set the same thing"
        ));
    }
    for (key, value) in annotations.into_iter().flatten() {
        let Some(name) = PREFIXES.iter().find_map(|p| key.strip_prefix(p)) else {
            continue;
        };
        let value = value.trim();
        let bad = || format!("invalid value \"{value}\" of annotation \"{key}\"");
        match name {
            "proxy-connect-timeout" | "proxy-read-timeout" | "proxy-send-timeout" => {
                let directive = name.replace('-', "_");
                let _ = write!(a.location, " {directive} {};", time(value).ok_or_else(bad)?);
            }
            "client-max-body-size" | "proxy-body-size" => {
                let _ = write!(
                    a.location,
                    " client_max_body_size {};",
                    size(value).ok_or_else(bad)?
                );
            }
            "ssl-redirect" => a.ssl_redirect = flag(value).ok_or_else(bad)?,
            "lb-method" | "load-balance" => {
                balancer = match value {
                    "round_robin" => String::new(),
                    "least_conn"
                    | "ip_hash"
                    | "random"
                    | "random two"
                    | "random two least_conn" => value.to_owned(),
                    _ => return Err(bad()),
                }
            }
            "keepalive" | "upstream-keepalive-connections" => {
                let n: u32 = value.parse().map_err(|_| bad())?;
                if n > 0 {
                    let _ = write!(a.upstream, "\n    keepalive {n};");
                    a.location.push_str(" proxy_set_header Connection \"\";");
                }
            }
            "jwt-key" if key.starts_with("nginx.com/") => jwt.key = value.to_owned(),
            "jwt-realm" if key.starts_with("nginx.com/") => {
                // Quoted in the configuration: nothing that could end the quotes, no variable,
                // and not `off`, which would turn the check off.
                let quoted = |c: char| c == '"' || c == '\\' || c == '$' || c.is_control();
                if value.chars().any(quoted) || value == "off" {
                    return Err(bad());
                }
                jwt.realm = value.to_owned();
            }
            "jwt-token" if key.starts_with("nginx.com/") => {
                // A header, cookie or argument: variables that always exist.
                let name = value.strip_prefix('$').ok_or_else(bad)?;
                let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
                let family = ["http_", "cookie_", "arg_"]
                    .iter()
                    .find_map(|f| name.strip_prefix(f));
                if family.is_none_or(str::is_empty) || !name.chars().all(word) {
                    return Err(bad());
                }
                jwt.token = Some(value.to_owned());
            }
            "jwt-login-url" if key.starts_with("nginx.com/") => {
                let plain = |c: char| {
                    c.is_ascii_graphic() && !matches!(c, '"' | '\'' | ';' | '{' | '}' | '$' | '\\')
                };
                let scheme = value.starts_with("https://") || value.starts_with("http://");
                if !scheme || !value.chars().all(plain) {
                    return Err(bad());
                }
                jwt.login_url = Some(value.to_owned());
            }
            "rewrite-target" if key.starts_with("nginx.ingress.") => {
                // A path, with the path's captures (`$1`) as its only variables.
                let plain = value
                    .replace(|c: char| c.is_ascii_digit(), "")
                    .replace('$', "");
                let captures_only = value
                    .match_indices('$')
                    .all(|(i, _)| value[i + 1..].starts_with(|c: char| c.is_ascii_digit()));
                if !plain_path(&plain) || !captures_only || !value.starts_with('/') {
                    return Err(bad());
                }
                if a.rewrite != Rewrite::None {
                    return Err(
                        "rewrite-target and nginx.org/rewrites on one Ingress are not supported"
                            .into(),
                    );
                }
                a.rewrite = Rewrite::Target(value.to_owned());
            }
            "rewrites" if key.starts_with("nginx.org/") => {
                // `serviceName=tea rewrite=/leaves/;serviceName=coffee rewrite=/beans/`
                let mut by_service = BTreeMap::new();
                for entry in value.split(';').map(str::trim).filter(|e| !e.is_empty()) {
                    let mut words = entry.split_whitespace();
                    let service = words.next().and_then(|w| w.strip_prefix("serviceName="));
                    let path = words.next().and_then(|w| w.strip_prefix("rewrite="));
                    match (service, path, words.next()) {
                        (Some(s), Some(p), None) if plain_path(p) && !s.is_empty() => {
                            by_service.insert(s.to_owned(), p.to_owned());
                        }
                        _ => return Err(bad()),
                    }
                }
                if a.rewrite != Rewrite::None {
                    return Err(
                        "rewrite-target and nginx.org/rewrites on one Ingress are not supported"
                            .into(),
                    );
                }
                a.rewrite = Rewrite::Services(by_service);
            }
            "ssl-services" if key.starts_with("nginx.org/") => {
                a.https_services = (value.split(','))
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
            }
            "backend-protocol" if key.starts_with("nginx.ingress.") => {
                a.https_all = match value.to_ascii_uppercase().as_str() {
                    "HTTP" => false,
                    "HTTPS" => true,
                    // gRPC, FastCGI and AUTO_HTTP are not HTTP/1.1 proxying.
                    _ => {
                        return Err(format!(
                            "annotation \"{key}\": \"{value}\" is not supported"
                        ))
                    }
                };
            }
            "location-snippets"
            | "configuration-snippet"
            | "server-snippets"
            | "server-snippet" => {
                if !reading.snippets {
                    return Err(format!(
                        "annotation \"{key}\": snippets are off (the controller's --enable-snippets)"
                    ));
                }
                let to = if setting(key) == Some("location-snippets") {
                    &mut a.location
                } else {
                    &mut a.server
                };
                let _ = write!(to, "\n{value}\n");
            }
            _ => {
                if !limits.read(key, name, value)? {
                    return Err(format!("annotation \"{key}\" is not supported"));
                }
            }
        }
    }
    limits.write(&mut a, reading.zone)?;
    if !balancer.is_empty() {
        a.upstream.insert_str(0, &format!("\n    {balancer};"));
    }
    if jwt != Jwt::default() {
        if jwt.key.is_empty() {
            return Err(
                "annotation \"nginx.com/jwt-key\" is required by the other jwt ones".into(),
            );
        }
        if jwt.realm.is_empty() {
            jwt.realm = "restricted".into();
        }
        a.jwt = Some(jwt);
    }
    Ok(a)
}

/// Rate and connection limits: ingress-nginx's `limit-rps`, `limit-rpm`,
/// `limit-connections`, `limit-burst-multiplier` and `limit-whitelist`, and NGINX Ingress
/// Controller's `limit-req-*`.
#[derive(Debug, Default)]
struct Limits {
    rps: Option<u32>,
    rpm: Option<u32>,
    connections: Option<u32>,
    multiplier: Option<u32>,
    /// Addresses no limit counts (CIDRs).
    exempt: Vec<String>,
    /// `limit-req-*`, by the name after it.
    req: BTreeMap<String, String>,
}

impl Limits {
    /// Takes the annotation if it is a limit's: false if it is not.
    fn read(&mut self, key: &str, name: &str, value: &str) -> Result<bool, String> {
        let bad = || format!("invalid value \"{value}\" of annotation \"{key}\"");
        let count = || value.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(bad);
        let ingress_nginx = key.starts_with("nginx.ingress.");
        match name {
            "limit-rps" if ingress_nginx => self.rps = Some(count()?),
            "limit-rpm" if ingress_nginx => self.rpm = Some(count()?),
            // nginx's most connections of one key.
            "limit-connections" if ingress_nginx => {
                let n = count()?;
                if n > 65535 {
                    return Err(bad());
                }
                self.connections = Some(n);
            }
            "limit-burst-multiplier" if ingress_nginx => self.multiplier = Some(count()?),
            "limit-whitelist" | "limit-allowlist" if ingress_nginx => {
                for cidr in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                    let (ip, bits) = cidr.split_once('/').unwrap_or((cidr, ""));
                    let most = match ip.parse::<std::net::IpAddr>() {
                        Ok(std::net::IpAddr::V4(_)) => 32,
                        Ok(std::net::IpAddr::V6(_)) => 128,
                        Err(_) => return Err(bad()),
                    };
                    let ok = bits.is_empty() || bits.parse::<u8>().is_ok_and(|b| b <= most);
                    if !ok {
                        return Err(bad());
                    }
                    self.exempt.push(cidr.to_owned());
                }
            }
            _ if key.starts_with("nginx.org/") && name.starts_with("limit-req-") => {
                self.req
                    .insert(name["limit-req-".len()..].to_owned(), value.to_owned());
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The zones into `a.http`, the limits into `a.location`; `zone`: the Ingress's name
    /// for them.
    fn write(&self, a: &mut Annotated, zone: &str) -> Result<(), String> {
        let ingress_nginx = self.rps.is_some() || self.rpm.is_some() || self.connections.is_some();
        if ingress_nginx && !self.req.is_empty() {
            // Their statuses and dry run are a location's: one would change the other's.
            return Err(
                "limits under both controllers' names on one Ingress are not supported".into(),
            );
        }
        let mut key = "$binary_remote_addr".to_owned();
        if !self.exempt.is_empty() {
            // ingress-nginx's: an exempt address's key is empty, which no limit counts. A
            // variable's name is letters, digits and `_`: an Ingress's `-` and `.` are
            // written `_2d` and `_2e` (no Kubernetes name has `_`, so no two names meet).
            let var = variable_name(zone);
            let _ = writeln!(a.http, "geo ${var}_limited {{\n    default 1;");
            for cidr in &self.exempt {
                let _ = writeln!(a.http, "    {cidr} 0;");
            }
            let _ = writeln!(
                a.http,
                "}}\nmap ${var}_limited ${var}_limit_key {{\n    0 \"\";\n    default $binary_remote_addr;\n}}"
            );
            key = format!("${var}_limit_key");
        }
        let burst = self.multiplier.unwrap_or(5);
        for (rate, unit, kind) in [(self.rps, "s", "rps"), (self.rpm, "m", "rpm")] {
            if let Some(n) = rate {
                let burst = u64::from(n) * u64::from(burst);
                if burst > 1_000_000_000 {
                    return Err(format!("a burst of {burst} requests is too large"));
                }
                // The zone's name has its key's mark: a zone keeps its key across reloads.
                let name = format!("{zone}_{kind}_{}", mark(&key));
                let _ = writeln!(
                    a.http,
                    "limit_req_zone {key} zone={name}:5m rate={n}r/{unit};"
                );
                let _ = write!(a.location, " limit_req zone={name} burst={burst} nodelay;");
            }
        }
        if let Some(n) = self.connections {
            let name = format!("{zone}_conn_{}", mark(&key));
            let _ = writeln!(a.http, "limit_conn_zone {key} zone={name}:5m;");
            let _ = write!(a.location, " limit_conn {name} {n};");
        }
        if self.req.is_empty() {
            return Ok(());
        }
        let get = |k: &str| self.req.get(k).map(String::as_str);
        let bad = |k: &str| {
            format!(
                "invalid value \"{}\" of annotation \"nginx.org/limit-req-{k}\"",
                get(k).unwrap_or("")
            )
        };
        if let Some(k) = self.req.keys().find(|k| {
            ![
                "rate",
                "key",
                "zone-size",
                "delay",
                "no-delay",
                "burst",
                "dry-run",
                "log-level",
                "reject-code",
                "scale",
            ]
            .contains(&k.as_str())
        }) {
            return Err(format!(
                "annotation \"nginx.org/limit-req-{k}\" is not supported"
            ));
        }
        let Some(rate) = get("rate") else {
            return Err(
                "annotation \"nginx.org/limit-req-rate\" is required by the other limit-req ones"
                    .into(),
            );
        };
        let digits = rate
            .strip_suffix("r/s")
            .or_else(|| rate.strip_suffix("r/m"));
        let rate_ok = digits.is_some_and(|d| {
            (1..=9).contains(&d.len())
                && d.bytes().all(|b| b.is_ascii_digit())
                && d.bytes().any(|b| b != b'0')
        });
        if !rate_ok {
            return Err(bad("rate"));
        }
        let key = get("key").unwrap_or("${binary_remote_addr}");
        if !limit_key(key) {
            return Err(bad("key"));
        }
        let zone_size = get("zone-size").unwrap_or("10m");
        // The server's smallest zone is 32k.
        if size(zone_size)
            .and_then(|s| bytes(&s))
            .is_none_or(|b| b < 32 * 1024)
        {
            return Err(bad("zone-size"));
        }
        // Each replica keeping the whole rate would let the replicas' sum through.
        if get("scale").is_some_and(|v| v != "false") {
            return Err("annotation \"nginx.org/limit-req-scale\": scaling by the replicas is not supported".into());
        }
        // The zone's name has its key's and size's mark: a zone keeps both across reloads.
        let name = format!("{zone}_req_{}", mark(&format!("{key} {zone_size}")));
        let _ = writeln!(
            a.http,
            "limit_req_zone {key} zone={name}:{zone_size} rate={rate};"
        );
        let _ = write!(a.location, " limit_req zone={name}");
        let number = |k: &str| -> Result<Option<u32>, String> {
            (get(k).map(|v| {
                v.parse::<u32>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad(k))
            }))
            .transpose()
        };
        if let Some(n) = number("burst")? {
            let _ = write!(a.location, " burst={n}");
        }
        match (get("no-delay").map(flag), number("delay")?) {
            (Some(Some(true)), _) => a.location.push_str(" nodelay"),
            (Some(None), _) => return Err(bad("no-delay")),
            (_, Some(n)) => {
                let _ = write!(a.location, " delay={n}");
            }
            _ => {}
        }
        a.location.push(';');
        match get("dry-run").map(flag) {
            Some(Some(true)) => a.location.push_str(" limit_req_dry_run on;"),
            Some(None) => return Err(bad("dry-run")),
            _ => {}
        }
        if let Some(level) = get("log-level") {
            if !["info", "notice", "warn", "error"].contains(&level) {
                return Err(bad("log-level"));
            }
            let _ = write!(a.location, " limit_req_log_level {level};");
        }
        // NGINX Ingress Controller's default is 429, not nginx's 503.
        let code = number("reject-code")?.unwrap_or(429);
        if !(400..=599).contains(&code) {
            return Err(bad("reject-code"));
        }
        let _ = write!(a.location, " limit_req_status {code};");
        Ok(())
    }
}

/// A short mark of `text` (FNV-1a, in hex): names made from it change when it does.
fn mark(text: &str) -> String {
    let hash = (text.bytes()).fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("{hash:08x}")
}

/// The bytes of a size in nginx's syntax (`10m`).
fn bytes(size: &str) -> Option<u64> {
    let (digits, unit) = match size.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&size[..i], c.to_ascii_lowercase()),
        _ => (size, ' '),
    };
    let n: u64 = digits.parse().ok()?;
    let times = match unit {
        ' ' => 1,
        'k' => 1 << 10,
        'm' => 1 << 20,
        'g' => 1 << 30,
        _ => return None,
    };
    n.checked_mul(times)
}

/// `name` as the name of a variable: each character but a letter, a digit or `_` as `_`
/// and its code in hex.
fn variable_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else {
            let _ = write!(out, "_{:02x}", u32::from(c));
        }
    }
    out
}

/// A limit's key: variables that always exist (`${binary_remote_addr}`, `$http_x_user`),
/// nothing else.
fn limit_key(key: &str) -> bool {
    let known = |name: &str| {
        [
            "binary_remote_addr",
            "remote_addr",
            "host",
            "server_name",
            "uri",
            "request_uri",
            "scheme",
        ]
        .contains(&name)
            || ["http_", "cookie_", "arg_"].iter().any(|f| {
                name.strip_prefix(f).is_some_and(|rest| {
                    !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                })
            })
    };
    let mut rest = key;
    let mut any = false;
    while !rest.is_empty() {
        let Some(after) = rest.strip_prefix('$') else {
            return false;
        };
        let (name, next) = match after.strip_prefix('{') {
            Some(braced) => match braced.split_once('}') {
                Some((name, next)) => (name, next),
                None => return false,
            },
            None => {
                let end = after.find('$').unwrap_or(after.len());
                after.split_at(end)
            }
        };
        if !known(name) {
            return false;
        }
        any = true;
        rest = next;
    }
    any
}

/// A time in nginx's syntax; a bare number is seconds.
fn time(value: &str) -> Option<String> {
    let digits = value.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &value[digits.len()..];
    let known = matches!(unit, "" | "ms" | "s" | "m" | "h" | "d");
    let short = (1..=9).contains(&digits.len());
    (known && short && digits.bytes().all(|b| b.is_ascii_digit())).then(|| {
        if unit.is_empty() {
            format!("{digits}s")
        } else {
            value.to_owned()
        }
    })
}

/// A size in nginx's syntax.
fn size(value: &str) -> Option<String> {
    let digits = value.trim_end_matches(['k', 'K', 'm', 'M', 'g', 'G']);
    let ok = (1..=9).contains(&digits.len())
        && value.len() - digits.len() <= 1
        && digits.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| value.to_owned())
}

fn flag(value: &str) -> Option<bool> {
    match value {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(pairs: &[(&str, &str)]) -> Result<Annotated, String> {
        let map: BTreeMap<String, String> = (pairs.iter())
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        read(
            Some(&map),
            Reading {
                zone: "shop_i",
                snippets: false,
            },
        )
    }

    #[test]
    fn both_controllers_names() {
        let a = of(&[
            ("nginx.org/proxy-read-timeout", "90"),
            ("nginx.ingress.kubernetes.io/proxy-connect-timeout", "5s"),
            ("nginx.ingress.kubernetes.io/proxy-body-size", "8m"),
            ("nginx.org/lb-method", "least_conn"),
            ("nginx.org/keepalive", "32"),
            ("nginx.org/ssl-redirect", "false"),
            ("example.com/other", "anything"),
        ])
        .expect("accepted");
        assert_eq!(
            a.location,
            " client_max_body_size 8m; proxy_connect_timeout 5s; \
             proxy_set_header Connection \"\"; proxy_read_timeout 90s;"
        );
        assert_eq!(a.upstream, "\n    least_conn;\n    keepalive 32;");
        assert!(!a.ssl_redirect);
        let default = of(&[]).expect("accepted");
        assert_eq!(default.upstream, "\n    random two least_conn;");
        assert!(default.ssl_redirect);
        assert_eq!(
            of(&[("nginx.org/lb-method", "round_robin")]).map(|a| a.upstream),
            Ok(String::new())
        );
    }

    #[test]
    fn a_config_map_gives_defaults() {
        let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            (pairs.iter())
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let d = defaults(
            &data(&[("proxy-read-timeout", "30"), ("lb-method", "least_conn")]),
            false,
        )
        .expect("accepted");
        assert_eq!(
            d.get("nginx.org/proxy-read-timeout").map(String::as_str),
            Some("30")
        );
        assert_eq!(
            defaults(&data(&[("location-snippets", "deny all;")]), false).err(),
            Some(
                "key \"location-snippets\": snippets are off (the controller's --enable-snippets)"
                    .into()
            )
        );
        assert_eq!(
            defaults(&data(&[("proxy-read-timeout", "soon")]), false).err(),
            Some("invalid value \"soon\" of key \"proxy-read-timeout\"".into())
        );
    }

    #[test]
    fn rewrites_backends_and_limits() {
        // An Ingress's name with `-` and `.`: variables of letters, digits and `_`.
        let map = BTreeMap::from([
            (
                "nginx.ingress.kubernetes.io/limit-whitelist".to_owned(),
                "10.0.0.1".to_owned(),
            ),
            (
                "nginx.ingress.kubernetes.io/limit-rps".to_owned(),
                "1".to_owned(),
            ),
        ]);
        let named = Reading {
            zone: "shop_my-app.v2",
            snippets: false,
        };
        let dashed = read(Some(&map), named).expect("accepted");
        assert!(
            dashed.http.contains("geo $shop_my_2dapp_2ev2_limited {"),
            "{}",
            dashed.http
        );
        let key = "$shop_my_2dapp_2ev2_limit_key";
        assert!(
            dashed.http.contains(&format!(
                "limit_req_zone {key} zone=shop_my-app.v2_rps_{}:5m",
                mark(key)
            )),
            "{}",
            dashed.http
        );
        let a = of(&[
            ("nginx.ingress.kubernetes.io/rewrite-target", "/$2"),
            ("nginx.ingress.kubernetes.io/backend-protocol", "HTTPS"),
            ("nginx.ingress.kubernetes.io/limit-rps", "10"),
            ("nginx.ingress.kubernetes.io/limit-connections", "3"),
            (
                "nginx.ingress.kubernetes.io/limit-whitelist",
                "10.0.0.0/8, 192.168.1.1",
            ),
        ])
        .expect("accepted");
        assert_eq!(a.rewrite, Rewrite::Target("/$2".into()));
        assert!(a.https_all);
        assert!(
            a.http.contains(
                "geo $shop_i_limited {\n    default 1;\n    10.0.0.0/8 0;\n    192.168.1.1 0;\n}"
            ),
            "{}",
            a.http
        );
        // Zones named with their key's mark: a new key is a new zone.
        let m = mark("$shop_i_limit_key");
        assert_ne!(m, mark("$binary_remote_addr"));
        assert!(
            a.http.contains(&format!(
                "limit_req_zone $shop_i_limit_key zone=shop_i_rps_{m}:5m rate=10r/s;"
            )),
            "{}",
            a.http
        );
        assert!(
            a.http.contains(&format!(
                "limit_conn_zone $shop_i_limit_key zone=shop_i_conn_{m}:5m;"
            )),
            "{}",
            a.http
        );
        assert_eq!(
            a.location,
            format!(
                " limit_req zone=shop_i_rps_{m} burst=50 nodelay; limit_conn shop_i_conn_{m} 3;"
            )
        );
        let b = of(&[
            (
                "nginx.org/rewrites",
                "serviceName=tea rewrite=/leaves/;serviceName=coffee rewrite=/beans",
            ),
            ("nginx.org/ssl-services", "tea, coffee"),
            ("nginx.org/limit-req-rate", "5r/s"),
            (
                "nginx.org/limit-req-key",
                "${binary_remote_addr}$http_x_user",
            ),
            ("nginx.org/limit-req-burst", "20"),
            ("nginx.org/limit-req-delay", "4"),
            ("nginx.org/limit-req-reject-code", "429"),
        ])
        .expect("accepted");
        assert_eq!(
            b.rewrite,
            Rewrite::Services(BTreeMap::from([
                ("coffee".into(), "/beans".into()),
                ("tea".into(), "/leaves/".into())
            ]))
        );
        assert_eq!(
            b.https_services,
            BTreeSet::from(["coffee".into(), "tea".into()])
        );
        let m = mark("${binary_remote_addr}$http_x_user 10m");
        assert_eq!(
            b.http,
            format!("limit_req_zone ${{binary_remote_addr}}$http_x_user zone=shop_i_req_{m}:10m rate=5r/s;\n")
        );
        assert_eq!(
            b.location,
            format!(" limit_req zone=shop_i_req_{m} burst=20 delay=4; limit_req_status 429;")
        );
        // A key that could name what does not exist, or scaling not done: refused.
        assert!(of(&[
            ("nginx.org/limit-req-rate", "5r/s"),
            ("nginx.org/limit-req-key", "$nosuch")
        ])
        .is_err());
        assert!(of(&[
            ("nginx.org/limit-req-rate", "5r/s"),
            ("nginx.org/limit-req-scale", "true")
        ])
        .is_err());
        // What the server would refuse is refused here, with the Ingress alone.
        for (key, value) in [
            ("nginx.org/limit-req-rate", "0r/s"),
            ("nginx.org/limit-req-rate", "10r/sr/s"),
            ("nginx.org/limit-req-burst", "0"),
            ("nginx.org/limit-req-delay", "0"),
            ("nginx.org/limit-req-zone-size", "1k"),
        ] {
            let with_rate = [("nginx.org/limit-req-rate", "5r/s"), (key, value)];
            let pairs = if key.ends_with("rate") {
                &with_rate[1..]
            } else {
                &with_rate[..]
            };
            assert!(of(pairs).is_err(), "{key}: {value}");
        }
        for (key, value) in [
            ("nginx.ingress.kubernetes.io/limit-connections", "65536"),
            ("nginx.ingress.kubernetes.io/limit-whitelist", "10.0.0.0/33"),
        ] {
            assert!(of(&[(key, value)]).is_err(), "{key}: {value}");
        }
        assert!(of(&[
            ("nginx.ingress.kubernetes.io/limit-rps", "1000000000"),
            ("nginx.ingress.kubernetes.io/limit-burst-multiplier", "1000")
        ])
        .is_err());
        // Two controllers' limits, or rewrites, on one Ingress: refused, not mixed.
        assert!(of(&[
            ("nginx.ingress.kubernetes.io/limit-rps", "5"),
            ("nginx.org/limit-req-rate", "5r/s")
        ])
        .is_err());
        assert!(of(&[
            ("nginx.ingress.kubernetes.io/rewrite-target", "/"),
            ("nginx.org/rewrites", "serviceName=a rewrite=/b")
        ])
        .is_err());
    }

    #[test]
    fn what_is_not_understood_refuses_the_ingress() {
        // One setting under both names.
        assert!(of(&[
            ("nginx.org/client-max-body-size", "1m"),
            ("nginx.ingress.kubernetes.io/proxy-body-size", "2m")
        ])
        .is_err());
        for (key, value) in [
            (
                "nginx.ingress.kubernetes.io/whitelist-source-range",
                "10.0.0.0/8",
            ),
            ("nginx.ingress.kubernetes.io/auth-url", "http://auth"),
            ("nginx.org/limit-req-burst", "5"),
        ] {
            let unsupported = of(&[(key, value)]).err();
            assert!(
                unsupported.as_ref().is_some_and(|e| e.contains("is not supported")
                    || e.contains("is required by")),
                "{key}: {unsupported:?}"
            );
        }
        // Snippets only where the operator turned them on.
        for key in [
            "nginx.org/server-snippets",
            "nginx.org/location-snippets",
            "nginx.ingress.kubernetes.io/configuration-snippet",
            "nginx.ingress.kubernetes.io/server-snippet",
        ] {
            let map = BTreeMap::from([(key.to_owned(), "deny all;".to_owned())]);
            let on = Reading {
                zone: "z",
                snippets: true,
            };
            let a = read(Some(&map), on).expect("snippets on");
            assert!(format!("{}{}", a.location, a.server).contains("\ndeny all;\n"));
            assert_eq!(
                of(&[(key, "deny all;")]).err(),
                Some(format!(
                    "annotation \"{key}\": snippets are off (the controller's --enable-snippets)"
                ))
            );
        }
        for (key, value) in [
            ("nginx.com/jwt-realm", "a\" b"),
            ("nginx.com/jwt-token", "cookie"),
            ("nginx.com/jwt-token", "$nosuch"),
            ("nginx.com/jwt-realm", "off"),
            ("nginx.com/jwt-realm", "$host"),
            ("nginx.org/proxy-read-timeout", "99999999999999999999"),
            ("nginx.com/jwt-token", "$a;b"),
            ("nginx.com/jwt-login-url", "/relative"),
            ("nginx.com/jwt-login-url", "https://x/ y"),
            ("nginx.org/proxy-read-timeout", "1x"),
            ("nginx.org/proxy-read-timeout", "5; return 200"),
            ("nginx.org/client-max-body-size", "8mb"),
            ("nginx.org/lb-method", "hash $uri"),
            ("nginx.org/ssl-redirect", "yes"),
            ("nginx.org/keepalive", "-1"),
            ("nginx.ingress.kubernetes.io/rewrite-target", "/$host"),
            ("nginx.ingress.kubernetes.io/rewrite-target", "/a b"),
            (
                "nginx.ingress.kubernetes.io/rewrite-target",
                "https://elsewhere/",
            ),
            ("nginx.org/rewrites", "serviceName=tea rewrite=/x;y"),
            ("nginx.org/rewrites", "tea=/x"),
            ("nginx.ingress.kubernetes.io/backend-protocol", "GRPC"),
            ("nginx.ingress.kubernetes.io/limit-rps", "0"),
            (
                "nginx.ingress.kubernetes.io/limit-whitelist",
                "10.0.0.0/8; allow all",
            ),
            ("nginx.org/limit-req-rate", "10r/h"),
        ] {
            assert!(of(&[(key, value)]).is_err(), "{key}: {value}");
        }
    }
}
