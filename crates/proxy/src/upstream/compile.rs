//! An `upstream` block to an [`Upstream`], with nginx's checks and error texts.
//!
//! Directives are read in order, because nginx's are: a balancer directive decides which
//! `server` parameters the lines after it may use (`backup` only with round robin and
//! `least_conn`), and a balancer directive after `keepalive` replaces the keepalive module
//! (nginx warns "load balancing method redefined" and keeps no idle connections).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use portcullis_config::{value, Arg, ConfigError, Directive};

use super::hash::{Ring, POINTS_PER_WEIGHT};
use super::peers::{PeerAddr, PeerConf, ServerParams};
use super::{Balancer, Keepalive, Upstream};

/// The port of a `server` written without one.
const DEFAULT_PORT: u16 = 80;
/// `keepalive_requests` default.
const DEFAULT_KEEPALIVE_REQUESTS: u64 = 1000;
/// `keepalive_timeout` default.
const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(60);
/// `keepalive_time` default.
const DEFAULT_KEEPALIVE_TIME: Duration = Duration::from_secs(3600);
/// The smallest `zone` nginx accepts: eight pages of 4 KiB.
const MIN_ZONE_SIZE: u64 = 8 * 4096;
/// Largest ring of `hash ... consistent` built (160 points per unit of weight, 8 bytes
/// each): weights in the millions would otherwise take gigabytes at startup.
const MAX_RING_POINTS: u64 = 1 << 24;
/// nginx's `ngx_int_t` bound on numeric parameters.
const MAX_NUMBER: u64 = i64::MAX as u64;

/// The balancer as the directives set it, before the peers are known.
#[derive(Debug, Clone)]
pub(super) enum Method {
    RoundRobin,
    LeastConn,
    Hash { key: String, consistent: bool },
    IpHash,
    Random { two: bool },
}

/// Compiles `block`; `kept`: the `server` lines of its `state` file, read by the caller.
pub(super) fn compile(block: &Directive, kept: &[Directive]) -> Result<Upstream, ConfigError> {
    let name = block.args.first().map(|a| a.value.clone()).ok_or_else(|| {
        ConfigError::at(
            block,
            "invalid number of arguments in \"upstream\" directive",
        )
    })?;
    let mut method = Method::RoundRobin;
    let mut backup_allowed = true;
    let mut keepalive: Option<usize> = None;
    let mut requests: Option<u64> = None;
    let mut timeout: Option<Duration> = None;
    let mut time: Option<Duration> = None;
    let mut servers = 0usize;
    let mut peers: Vec<PeerConf> = Vec::new();
    let mut zone_name: Option<String> = None;
    let mut state: Option<&Directive> = None;

    for d in block.children() {
        match d.name.as_str() {
            "server" => {
                if state.is_some() {
                    return Err(ConfigError::at(
                        d,
                        "\"server\" directive cannot be used with \"state\"",
                    ));
                }
                servers += 1;
                peers.extend(server(d, backup_allowed)?);
            }
            "state" => {
                if servers != 0 {
                    return Err(ConfigError::at(
                        d,
                        "\"state\" directive cannot be used with \"server\"",
                    ));
                }
                not_duplicate(d, state.is_some())?;
                state = Some(d);
                for s in kept {
                    peers.extend(server(s, backup_allowed)?);
                }
            }
            "least_conn" | "hash" | "ip_hash" | "random" => {
                method = balancer(d)?;
                backup_allowed = matches!(method, Method::LeastConn);
                keepalive = None;
            }
            "keepalive" => {
                let v = d
                    .args
                    .first()
                    .map(|a| a.value.as_str())
                    .ok_or_else(|| arguments(d))?;
                let n = atoi(v).filter(|&n| n != 0).ok_or_else(|| {
                    ConfigError::at(
                        d,
                        format!("invalid value \"{v}\" in \"keepalive\" directive"),
                    )
                })?;
                keepalive = Some(usize::try_from(n).unwrap_or(usize::MAX));
            }
            "keepalive_requests" => {
                not_duplicate(d, requests.is_some())?;
                requests = Some(value::number(d, 0)?);
            }
            "keepalive_timeout" => {
                not_duplicate(d, timeout.is_some())?;
                timeout = Some(Duration::from_millis(value::time_ms(d, 0)?));
            }
            "keepalive_time" => {
                not_duplicate(d, time.is_some())?;
                time = Some(Duration::from_millis(value::time_ms(d, 0)?));
            }
            "zone" => zone_name = Some(zone(d)?),
            other => {
                return Err(ConfigError::at(
                    d,
                    format!("\"{other}\" directive is not allowed here"),
                ))
            }
        }
    }

    if let Some(d) = state {
        if zone_name.is_none() {
            return Err(ConfigError::at(d, "\"state\" directive requires \"zone\""));
        }
    } else if servers == 0 {
        return Err(ConfigError::at(block, "no servers are inside upstream"));
    }
    // `slow_start` above a `hash`, `ip_hash` or `random` that comes after it would do
    // nothing: refused as where the method comes first.
    if !matches!(method, Method::RoundRobin | Method::LeastConn)
        && peers.iter().any(|p| !p.params.slow_start.is_zero())
    {
        return Err(ConfigError::at(
            block,
            "balancing method does not support parameter \"slow_start\"",
        ));
    }
    // A group kept in a state file may be empty until the API adds to it.
    if state.is_none() && !peers.iter().any(|p| !p.params.backup) {
        return Err(ConfigError::at(
            block,
            format!("no servers in upstream \"{name}\""),
        ));
    }
    let keepalive = keepalive.map(|max_idle| Keepalive {
        max_idle,
        requests: requests.unwrap_or(DEFAULT_KEEPALIVE_REQUESTS),
        timeout: timeout.unwrap_or(DEFAULT_KEEPALIVE_TIMEOUT),
        time: time.unwrap_or(DEFAULT_KEEPALIVE_TIME),
    });
    Upstream::build(name, method, peers, keepalive)
        .map(|u| u.in_zone(zone_name))
        .map_err(|e| ConfigError::at(block, e))
}

/// The balancer of `method` over `peers` (primary ones first): the random ranges and the
/// consistent hash ring are made of their weights.
pub(super) fn balancer_of(method: &Method, peers: &[super::Peer]) -> Result<Balancer, String> {
    let primary = || peers.iter().filter(|p| !p.is_backup());
    Ok(match method {
        Method::RoundRobin => Balancer::RoundRobin,
        Method::LeastConn => Balancer::LeastConn,
        Method::IpHash => Balancer::IpHash,
        Method::Random { two } => Balancer::Random {
            two: *two,
            ranges: super::random::ranges(primary().map(|p| p.weight())),
        },
        Method::Hash { key, consistent } => {
            let ring = if *consistent {
                let points: u64 = primary()
                    .map(|p| u64::from(p.weight()) * POINTS_PER_WEIGHT)
                    .sum();
                if points > MAX_RING_POINTS {
                    return Err("weights too large for consistent hash".to_owned());
                }
                Some(Ring::new(primary().map(|p| (p.server(), p.weight()))))
            } else {
                None
            };
            Balancer::Hash {
                key: key.clone(),
                ring,
            }
        }
    })
}

/// `least_conn`, `hash key [consistent]`, `ip_hash`, `random [two [least_conn]]`.
fn balancer(d: &Directive) -> Result<Method, ConfigError> {
    let invalid =
        |i: usize| ConfigError::at(d, format!("invalid parameter \"{}\"", d.args[i].value));
    Ok(match d.name.as_str() {
        "least_conn" => Method::LeastConn,
        "ip_hash" => Method::IpHash,
        "hash" => {
            let key = d
                .args
                .first()
                .map(|a| a.value.clone())
                .ok_or_else(|| arguments(d))?;
            let consistent = match d.args.get(1) {
                None => false,
                Some(a) if a.value == "consistent" => true,
                Some(_) => return Err(invalid(1)),
            };
            Method::Hash { key, consistent }
        }
        _ => {
            if let Some(a) = d.args.first() {
                if a.value != "two" {
                    return Err(invalid(0));
                }
            }
            if let Some(a) = d.args.get(1) {
                if a.value != "least_conn" {
                    return Err(invalid(1));
                }
            }
            Method::Random {
                two: !d.args.is_empty(),
            }
        }
    })
}

/// `server address [weight=N] [max_fails=N] [fail_timeout=T] [max_conns=N] [backup]
/// [down]`: one peer per address the name resolves to.
fn server(d: &Directive, backup_allowed: bool) -> Result<Vec<PeerConf>, ConfigError> {
    let url = d
        .args
        .first()
        .map(|a| a.value.as_str())
        .ok_or_else(|| arguments(d))?;
    let mut p = ServerParams::default();
    for arg in &d.args[1..] {
        let v = arg.value.as_str();
        let invalid = || ConfigError::at(d, format!("invalid parameter \"{v}\""));
        if let Some(n) = v.strip_prefix("weight=") {
            p.weight = atoi(n)
                .filter(|&w| w != 0)
                .and_then(|w| u32::try_from(w).ok())
                .ok_or_else(invalid)?;
        } else if let Some(n) = v.strip_prefix("max_fails=") {
            p.max_fails = saturate(atoi(n).ok_or_else(invalid)?);
        } else if let Some(t) = v.strip_prefix("fail_timeout=") {
            p.fail_timeout = Duration::from_secs(seconds(d, t).ok_or_else(invalid)?);
        } else if let Some(n) = v.strip_prefix("max_conns=") {
            p.max_conns = saturate(atoi(n).ok_or_else(invalid)?);
        } else if v == "backup" {
            if !backup_allowed {
                return Err(ConfigError::at(
                    d,
                    "balancing method does not support parameter \"backup\"",
                ));
            }
            p.backup = true;
        } else if let Some(t) = v.strip_prefix("slow_start=") {
            // NGINX Plus's: not with the hash, ip_hash and random methods, whose choice
            // weights do not steer.
            if !backup_allowed {
                return Err(ConfigError::at(
                    d,
                    "balancing method does not support parameter \"slow_start\"",
                ));
            }
            p.slow_start = Duration::from_secs(seconds(d, t).ok_or_else(invalid)?);
        } else if v == "down" {
            p.down = true;
        } else if v == "drain" {
            p.drain = true;
        } else {
            return Err(invalid());
        }
    }

    peer_confs(url, &p).map_err(|err| ConfigError::at(d, format!("{err} in upstream \"{url}\"")))
}

/// The peers of `server url` with `params`: one per address the URL resolves to.
pub(super) fn peer_confs(url: &str, params: &ServerParams) -> Result<Vec<PeerConf>, &'static str> {
    let written: Arc<str> = Arc::from(url);
    Ok(resolve(url)?
        .into_iter()
        .map(|addr| PeerConf {
            name: Arc::from(addr.to_string()),
            addr,
            server: written.clone(),
            params: params.clone(),
        })
        .collect())
}

/// nginx's `ngx_parse_url` for an upstream server, then its resolution: IPv4 addresses
/// before IPv6 ones, as nginx orders them; `unix:/path`, a unix-domain socket. The error is
/// nginx's `u->err` text.
fn resolve(url: &str) -> Result<Vec<PeerAddr>, &'static str> {
    if url
        .get(..5)
        .is_some_and(|p| p.eq_ignore_ascii_case("unix:"))
    {
        return PeerAddr::unix(&url[5..]).map(|p| vec![p]);
    }
    Ok(resolve_inet(url)?.into_iter().map(PeerAddr::Inet).collect())
}

/// [`resolve`] for a host and port.
fn resolve_inet(url: &str) -> Result<Vec<SocketAddr>, &'static str> {
    if let Some(rest) = url.strip_prefix('[') {
        return resolve_ipv6(rest);
    }
    if url.contains(['/', '?']) {
        return Err("invalid host");
    }
    let (host, port) = match url.split_once(':') {
        Some((host, port)) => (host, port_number(port)?),
        None => (url, DEFAULT_PORT),
    };
    if host.is_empty() {
        return Err("no host");
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(vec![SocketAddr::from((ip, port))]);
    }
    let mut addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|_| "host not found")?
        .collect();
    if addrs.is_empty() {
        return Err("host not found");
    }
    addrs.sort_by_key(SocketAddr::is_ipv6);
    Ok(addrs)
}

/// `[addr]` or `[addr]:port`, after the `[`.
fn resolve_ipv6(rest: &str) -> Result<Vec<SocketAddr>, &'static str> {
    let (host, after) = rest.split_once(']').ok_or("invalid host")?;
    if after.contains(['/', '?']) {
        return Err("invalid host");
    }
    let port = match after.strip_prefix(':') {
        Some(port) => port_number(port)?,
        None if after.is_empty() => DEFAULT_PORT,
        None => return Err("invalid host"),
    };
    if host.is_empty() {
        return Err("no host");
    }
    let ip: Ipv6Addr = host.parse().map_err(|_| "invalid IPv6 address")?;
    Ok(vec![SocketAddr::from((ip, port))])
}

fn port_number(s: &str) -> Result<u16, &'static str> {
    atoi(s)
        .and_then(|n| u16::try_from(n).ok())
        .filter(|&n| n != 0)
        .ok_or("invalid port")
}

/// `zone name [size]`, with nginx's checks of the size: its name (peer state is shared
/// without it too; with it, the API may change the group's servers).
fn zone(d: &Directive) -> Result<String, ConfigError> {
    let zone_name = d.arg(0);
    let Some(size) = d.args.get(1) else {
        return Ok(zone_name.to_owned());
    };
    let bytes = value::size(d, 1)
        .map_err(|_| ConfigError::at(d, format!("invalid zone size \"{}\"", size.value)))?;
    if bytes < MIN_ZONE_SIZE {
        return Err(ConfigError::at(
            d,
            format!("zone \"{zone_name}\" is too small"),
        ));
    }
    Ok(zone_name.to_owned())
}

/// A `fail_timeout=` value in seconds, read by the configuration's own time parser.
fn seconds(d: &Directive, text: &str) -> Option<u64> {
    let probe = Directive {
        name: d.name.clone(),
        args: vec![Arg {
            value: text.to_string(),
            quoted: false,
        }],
        span: d.span.clone(),
        block: None,
    };
    value::time_s(&probe, 0).ok()
}

fn not_duplicate(d: &Directive, seen: bool) -> Result<(), ConfigError> {
    if seen {
        return Err(ConfigError::at(
            d,
            format!("\"{}\" directive is duplicate", d.name),
        ));
    }
    Ok(())
}

fn arguments(d: &Directive) -> ConfigError {
    ConfigError::at(
        d,
        format!("invalid number of arguments in \"{}\" directive", d.name),
    )
}

/// nginx's `ngx_atoi`: ASCII digits only, at least one, at most `ngx_int_t`'s maximum.
fn atoi(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.bytes().try_fold(0u64, |acc, b| {
        if !b.is_ascii_digit() {
            return None;
        }
        let v = acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        (v <= MAX_NUMBER).then_some(v)
    })
}

/// A count nginx accepts up to `ngx_int_t`'s maximum; beyond `u32` it means "never".
fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
