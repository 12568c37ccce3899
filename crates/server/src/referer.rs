//! `ngx_http_referer_module`: `valid_referers` and `$invalid_referer`, which is empty when
//! the request's `Referer` is one the level accepts and `1` when not, as nginx's:
//!
//! - `none`: no `Referer`; `blocked`: one without `http://` or `https://` (a firewall or
//!   proxy took it out);
//! - host names, exact or with a wildcard (`*.example.com`, `.example.com` for the domain and
//!   its subdomains, `www.example.*`), with a path its URI must start with
//!   (`example.com/galleries/`); `server_names`: the server's own names;
//! - `~regex`, matched without regard to case against the `Referer` past its scheme.
//!
//! Without `valid_referers` every request is valid. A level's `valid_referers` replace the
//! inherited ones. The variable is read where the configuration uses it (`if
//! ($invalid_referer) { return 403; }`).

use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};

use crate::module::{self, Finish, Load, Module, Slot};
use crate::request::{Handlers, Request, Response};
use crate::vars::Names;

pub(crate) struct RefererModule;

pub(crate) static MODULE: RefererModule = RefererModule;

/// A level's `valid_referers`.
#[derive(Clone, Default)]
struct Conf {
    /// Whether the level has any: without, every request is valid.
    set: bool,
    none: bool,
    blocked: bool,
    server_names: bool,
    hosts: Vec<Host>,
    /// Matched against bytes, as PCRE matches them, without regard to case.
    regexes: Vec<regex::bytes::Regex>,
}

/// A host name (lower case) and the path its URI must start with (`None`: any).
#[derive(Clone)]
struct Host {
    name: Pattern,
    path: Option<String>,
}

#[derive(Clone, PartialEq, Eq)]
enum Pattern {
    Exact(String),
    /// `*.example.com`: the name ends with `.example.com`.
    Suffix(String),
    /// `.example.com`: the name is `example.com` or ends with `.example.com`.
    Domain(String),
    /// `www.example.*`: the name starts with `www.example.`.
    Prefix(String),
}

impl Module for RefererModule {
    fn name(&self) -> &'static str {
        "http_referer_module"
    }

    fn declare(
        &self,
        _http: &[Directive],
        names: &mut Names,
        me: usize,
    ) -> Result<(), ConfigError> {
        names.add_fixed(me, &["invalid_referer"]);
        Ok(())
    }

    fn defaults(&self) -> Slot {
        Arc::new(Conf::default())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::edit::<Conf>(conf);
        if cx.first {
            *c = Conf::default();
        }
        c.set = true;
        for a in &d.args {
            let v = a.value.as_str();
            match v {
                "" => return Err(ConfigError::at(d, format!("invalid referer \"{v}\""))),
                "none" => c.none = true,
                "blocked" => c.blocked = true,
                "server_names" => c.server_names = true,
                "~" => return Err(ConfigError::at(d, format!("empty regex in \"{v}\""))),
                _ if v.starts_with('~') => {
                    let re = crate::location::bytes_regex(&v[1..], true)
                        .map_err(|e| ConfigError::at(d, format!("{e} in \"{v}\"")))?;
                    c.regexes.push(re);
                }
                _ => {
                    let (name, path) = match v.find('/') {
                        Some(i) => (&v[..i], Some(v[i..].to_owned())),
                        None => (v, None),
                    };
                    let name = pattern(name).ok_or_else(|| {
                        ConfigError::at(d, format!("invalid hostname or wildcard \"{name}\""))
                    })?;
                    // Two names for the same hosts are refused, as nginx's hash of them does.
                    if c.hosts.iter().any(|h| h.name.conflicts(&name)) {
                        return Err(ConfigError::at(d, format!("conflicting parameter \"{v}\"")));
                    }
                    c.hosts.push(Host { name, path });
                }
            }
        }
        Ok(())
    }

    /// `none` or `blocked` alone is refused, as nginx refuses it.
    fn finish(
        &self,
        conf: &mut Slot,
        block: &[Directive],
        _cx: &mut Finish<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::get::<Conf>(conf);
        let Some(d) = block.iter().find(|d| d.name == "valid_referers") else {
            return Ok(());
        };
        if (c.none || c.blocked) && c.hosts.is_empty() && c.regexes.is_empty() && !c.server_names {
            return Err(ConfigError::at(
                d,
                "the \"none\" or \"blocked\" referers are specified in the \"valid_referers\" directive without any valid referer",
            ));
        }
        Ok(())
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            variable: Some(variable),
            empty_is_a_value: true,
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// A host name of `valid_referers` or `server_name`, as nginx's hash of wildcard names
/// takes it; `None` for a wildcard it refuses.
fn pattern(name: &str) -> Option<Pattern> {
    let name = name.to_ascii_lowercase();
    let p = if let Some(rest) = name.strip_prefix("*.") {
        Pattern::Suffix(format!(".{rest}"))
    } else if let Some(rest) = name.strip_prefix('.') {
        Pattern::Domain(rest.to_owned())
    } else if let Some(rest) = name.strip_suffix(".*") {
        Pattern::Prefix(format!("{rest}."))
    } else {
        Pattern::Exact(name)
    };
    let text = match &p {
        Pattern::Exact(t) | Pattern::Suffix(t) | Pattern::Domain(t) | Pattern::Prefix(t) => t,
    };
    (!text.is_empty() && !text.contains('*')).then_some(p)
}

impl Pattern {
    /// How well `host` matches: `None` not at all, else higher as nginx's hash of names
    /// prefers: an exact name, then any leading wildcard (the longest first), then a
    /// trailing one (the longest first).
    fn rank(&self, host: &str) -> Option<usize> {
        const LEADING: usize = 1 << 20;
        match self {
            Pattern::Exact(n) => (host == n).then_some(usize::MAX),
            Pattern::Suffix(s) => (host.ends_with(s.as_str()) && host.len() > s.len())
                .then_some(LEADING + 2 * s.len() + 1),
            Pattern::Domain(d) => (host == d
                || host
                    .strip_suffix(d.as_str())
                    .is_some_and(|h| h.ends_with('.')))
            .then_some(LEADING + 2 * d.len()),
            Pattern::Prefix(p) => {
                (host.starts_with(p.as_str()) && host.len() > p.len()).then_some(p.len())
            }
        }
    }

    /// Whether two names would take the same key in nginx's hash of them.
    fn conflicts(&self, other: &Pattern) -> bool {
        use Pattern::*;
        match (self, other) {
            (Exact(a), Exact(b)) | (Suffix(a), Suffix(b)) | (Prefix(a), Prefix(b)) => a == b,
            (Domain(a), Domain(b)) | (Exact(a), Domain(b)) | (Domain(b), Exact(a)) => a == b,
            (Suffix(s), Domain(d)) | (Domain(d), Suffix(s)) => s.strip_prefix('.') == Some(d),
            _ => false,
        }
    }
}

/// `$invalid_referer`: empty when the request's `Referer` is valid at its level, else `1`.
fn variable(
    req: &Request<'_>,
    conf: &Slot,
    _var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&Response, u64)>,
) {
    if !valid(req, module::get::<Conf>(conf)) {
        out.push(b'1');
    }
}

fn valid(req: &Request<'_>, c: &Conf) -> bool {
    if !c.set {
        return true;
    }
    let Some(referer) = req.head().header("referer") else {
        return c.none;
    };
    let rest = if referer.len() < "http://i.ru".len() {
        None
    } else if referer[..7].eq_ignore_ascii_case(b"http://") {
        Some(&referer[7..])
    } else if referer[..8].eq_ignore_ascii_case(b"https://") {
        Some(&referer[8..])
    } else {
        None
    };
    let Some(rest) = rest else {
        return c.blocked;
    };
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b':')
        .unwrap_or(rest.len());
    if end > 256 {
        return false;
    }
    let host = String::from_utf8_lossy(&rest[..end]).to_ascii_lowercase();
    let server_hosts: Vec<Host> = if c.server_names {
        req.server()
            .host_names
            .iter()
            .filter(|n| !n.starts_with('~'))
            .filter_map(|n| pattern(n))
            .map(|name| Host { name, path: None })
            .collect()
    } else {
        Vec::new()
    };
    let best = c
        .hosts
        .iter()
        .chain(&server_hosts)
        .filter_map(|h| Some((h.name.rank(&host)?, h)))
        .max_by_key(|(rank, _)| *rank);
    if let Some((_, h)) = best {
        let Some(path) = &h.path else {
            return true;
        };
        // The URI is what follows the host (and port) from its first `/`.
        let after = &rest[end..];
        let uri = after
            .iter()
            .position(|&b| b == b'/')
            .map_or(&b""[..], |i| &after[i..]);
        return uri.starts_with(path.as_bytes());
    }
    if c.server_names {
        let host = host.as_bytes();
        if (req.server().name_regexes.iter()).any(|(re, _)| re.is_match(host)) {
            return true;
        }
    }
    c.regexes.iter().any(|re| re.is_match(rest))
}

#[cfg(test)]
mod tests {
    use super::pattern;

    #[test]
    fn wildcards_match_as_nginx_s_hash() {
        let rank = |p: &str, h: &str| pattern(p).unwrap().rank(h);
        assert!(rank("example.com", "example.com").is_some());
        assert!(rank("example.com", "www.example.com").is_none());
        assert!(rank("*.example.com", "www.example.com").is_some());
        assert!(rank("*.example.com", "a.b.example.com").is_some());
        assert!(rank("*.example.com", "example.com").is_none());
        assert!(rank(".example.com", "example.com").is_some());
        assert!(rank(".example.com", "www.example.com").is_some());
        assert!(rank(".example.com", "wwwexample.com").is_none());
        assert!(rank("www.example.*", "www.example.org").is_some());
        assert!(rank("www.example.*", "www.example").is_none());
        assert!(pattern("www.*.com").is_none());
        assert!(pattern("*").is_none());
        assert!(rank("*.example.com", "a.example.com") > rank("*.com", "a.example.com"));
    }
}
