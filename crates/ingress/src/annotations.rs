//! The annotations users set on an Ingress for what their controller does, under the names
//! of NGINX Ingress Controller (`nginx.org/*`) and ingress-nginx
//! (`nginx.ingress.kubernetes.io/*`), so that manifests move over unchanged:
//!
//! | what | nginx.org/ | nginx.ingress.kubernetes.io/ | becomes |
//! |---|---|---|---|
//! | connect timeout | `proxy-connect-timeout` | `proxy-connect-timeout` | `proxy_connect_timeout` |
//! | read timeout | `proxy-read-timeout` | `proxy-read-timeout` | `proxy_read_timeout` |
//! | send timeout | `proxy-send-timeout` | `proxy-send-timeout` | `proxy_send_timeout` |
//! | body size | `client-max-body-size` | `proxy-body-size` | `client_max_body_size` |
//! | HTTP to HTTPS | `ssl-redirect` | `ssl-redirect` | the 301 of a TLS host (`"false"`: none) |
//! | balancer | `lb-method` | `load-balance` | `round_robin`, `least_conn`, `ip_hash`, `random`, `random two`, `random two least_conn` |
//! | upstream keepalive | `keepalive` | `upstream-keepalive-connections` | `keepalive N` |
//!
//! and NGINX Plus Ingress Controller's JWT authentication (`nginx.com/`): `jwt-key` (the
//! Secret, of type `nginx.org/jwk`, whose `jwk` is the key set), `jwt-realm`, `jwt-token`
//! (the variable the token is in, `$http_authorization`'s bearer token by default) and
//! `jwt-login-url` (where a request without a valid token is sent instead of a 401). A
//! key set that is missing or not one refuses the Ingress: it is never served without
//! the check it asks for.
//!
//! A time is nginx's (`10s`, `1m`; a bare number is seconds, as both controllers read it);
//! a size nginx's (`8m`). Any other annotation under these prefixes (an allow list, an
//! authentication, a rewrite, a snippet of raw configuration) is refused with its Ingress:
//! left out, it could open what the user meant to guard or send a request elsewhere.

use std::collections::BTreeMap;
use std::fmt::Write as _;

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
) -> Result<BTreeMap<String, String>, String> {
    let as_annotations: BTreeMap<String, String> = (data.iter())
        .map(|(k, v)| (format!("nginx.org/{k}"), v.clone()))
        .collect();
    if let Some(k) = data.keys().find(|k| !CONFIG_KEYS.contains(&k.as_str())) {
        return Err(format!("key \"{k}\" is not supported"));
    }
    read(Some(&as_annotations)).map_err(|e| e.replace("annotation \"nginx.org/", "key \""))?;
    Ok(as_annotations)
}

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
        other => other,
    })
}

/// Whether two annotations set one thing.
pub(crate) fn same(a: &str, b: &str) -> bool {
    setting(a).is_some_and(|s| Some(s) == setting(b))
}

/// Reads an Ingress's annotations; an error names the one refused.
pub(crate) fn read(annotations: Option<&BTreeMap<String, String>>) -> Result<Annotated, String> {
    let mut a = Annotated {
        location: String::new(),
        upstream: String::new(),
        ssl_redirect: true,
        jwt: None,
    };
    let mut jwt = Jwt::default();
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
            _ => return Err(format!("annotation \"{key}\" is not supported")),
        }
    }
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
        read(Some(&map))
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
        let d = defaults(&data(&[
            ("proxy-read-timeout", "30"),
            ("lb-method", "least_conn"),
        ]))
        .expect("accepted");
        assert_eq!(
            d.get("nginx.org/proxy-read-timeout").map(String::as_str),
            Some("30")
        );
        assert_eq!(
            defaults(&data(&[("location-snippets", "deny all;")])).err(),
            Some("key \"location-snippets\" is not supported".into())
        );
        assert_eq!(
            defaults(&data(&[("proxy-read-timeout", "soon")])).err(),
            Some("invalid value \"soon\" of key \"proxy-read-timeout\"".into())
        );
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
            ("nginx.org/server-snippets", "return 200;"),
            ("nginx.ingress.kubernetes.io/rewrite-target", "/"),
        ] {
            assert_eq!(
                of(&[(key, value)]).err(),
                Some(format!("annotation \"{key}\" is not supported"))
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
        ] {
            assert!(of(&[(key, value)]).is_err(), "{key}: {value}");
        }
    }
}
