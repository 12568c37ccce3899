//! `resolver` and `resolver_timeout`: host names in a `proxy_pass` URL made of variables are
//! resolved when a request needs them, asynchronously, through the configured DNS servers, as
//! nginx's resolver does. Names in the configuration itself are resolved at load.
//!
//! `resolver address ... [valid=time] [ipv4=on|off] [ipv6=on|off]`: the servers (port 53 by
//! default), how long an answer is kept (its TTL without `valid=`), and which address families
//! are asked for (both by default). A name already resolved costs a lookup in the worker's
//! cache; one that is not suspends the request until its answer comes (or `resolver_timeout`,
//! 30 s by default, passes), and the phases then run again and find it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_resolver::config::{
    ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;
use portcullis_config::{value, ConfigError, Directive};

use crate::request::{Request, Suspension};

/// `resolver` as configured.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ResolverConf {
    servers: Vec<SocketAddr>,
    /// `valid=`: how long an answer is kept, whatever its TTL.
    valid: Option<Duration>,
    ipv4: bool,
    ipv6: bool,
}

impl ResolverConf {
    /// Reads a `resolver` directive; the errors are nginx's.
    pub fn parse(d: &Directive) -> Result<ResolverConf, ConfigError> {
        let mut conf = ResolverConf {
            servers: Vec::new(),
            valid: None,
            ipv4: true,
            ipv6: true,
        };
        let flag = |v: &str, name: &str| match v {
            "on" => Ok(true),
            "off" => Ok(false),
            _ => Err(ConfigError::at(d, format!("invalid parameter: {name}={v}"))),
        };
        for a in &d.args {
            let v = a.value.as_str();
            if let Some(t) = v.strip_prefix("valid=") {
                let secs = value::parse_time(t)
                    .ok_or_else(|| ConfigError::at(d, format!("invalid parameter: {v}")))?;
                conf.valid = Some(secs);
            } else if let Some(f) = v.strip_prefix("ipv4=") {
                conf.ipv4 = flag(f, "ipv4")?;
            } else if let Some(f) = v.strip_prefix("ipv6=") {
                conf.ipv6 = flag(f, "ipv6")?;
            } else if v.starts_with("status_zone=") {
                // A zone of NGINX Plus's API: nothing to count into here.
            } else {
                conf.servers.extend(server_addresses(v).ok_or_else(|| {
                    ConfigError::at(d, format!("host not found in resolver \"{v}\""))
                })?);
            }
        }
        if !conf.ipv4 && !conf.ipv6 {
            return Err(ConfigError::at(
                d,
                "\"ipv4\" and \"ipv6\" cannot both be \"off\"",
            ));
        }
        if conf.servers.is_empty() {
            return Err(ConfigError::at(
                d,
                format!("invalid number of arguments in \"{}\" directive", d.name),
            ));
        }
        Ok(conf)
    }

    fn resolver(&self, timeout: Duration) -> Option<TokioResolver> {
        let servers = self.servers.iter().map(|a| {
            let mut udp = ConnectionConfig::udp();
            udp.port = a.port();
            let mut tcp = ConnectionConfig::tcp();
            tcp.port = a.port();
            NameServerConfig::new(a.ip(), true, vec![udp, tcp])
        });
        let config = ResolverConfig::from_parts(None, Vec::new(), servers.collect());
        let mut opts = ResolverOpts::default();
        opts.timeout = timeout;
        opts.attempts = 1;
        opts.ndots = 0;
        opts.ip_strategy = match (self.ipv4, self.ipv6) {
            (true, true) => LookupIpStrategy::Ipv4AndIpv6,
            (true, false) => LookupIpStrategy::Ipv4Only,
            _ => LookupIpStrategy::Ipv6Only,
        };
        if let Some(valid) = self.valid {
            opts.positive_min_ttl = Some(valid);
            opts.positive_max_ttl = Some(valid);
        }
        let builder = TokioResolver::builder_with_config(config, TokioRuntimeProvider::default());
        builder.with_options(opts).build().ok()
    }
}

/// `address[:port]`, `[v6]:port` or a name, each of whose addresses is a server.
fn server_addresses(v: &str) -> Option<Vec<SocketAddr>> {
    if let Ok(a) = v.parse::<SocketAddr>() {
        return Some(vec![a]);
    }
    let bare = v.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Some(vec![SocketAddr::new(ip, 53)]);
    }
    let with_port = if v.contains(':') {
        v.to_string()
    } else {
        format!("{v}:53")
    };
    let addrs: Vec<SocketAddr> = with_port.to_socket_addrs().ok()?.collect();
    (!addrs.is_empty()).then_some(addrs)
}

/// What a worker knows of the names it resolved.
#[derive(Default)]
pub(crate) struct WorkerResolvers {
    /// One resolver per `resolver` directive, made on first use.
    resolvers: HashMap<usize, (Arc<ResolverConf>, TokioResolver)>,
    /// Answers by directive and name, until they expire; a failure is kept only for the
    /// request that asked.
    answers: HashMap<(usize, String), Answer>,
}

#[derive(Clone)]
enum Answer {
    Found(Vec<IpAddr>, Instant),
    Failed(String),
}

/// What a request finds for a name.
pub(crate) enum Found {
    Addrs(Vec<IpAddr>),
    /// The lookup failed: nginx's words for why.
    Failed(String),
    /// Not known yet: the request waits for this lookup.
    Ask(Box<dyn Suspension>),
}

fn key(conf: &Arc<ResolverConf>) -> usize {
    Arc::as_ptr(conf) as usize
}

impl WorkerResolvers {
    /// The addresses of `name`, if known and fresh, or what to wait for.
    pub fn find(&mut self, conf: &Arc<ResolverConf>, name: &str, timeout: Duration) -> Found {
        let k = (key(conf), name.to_ascii_lowercase());
        match self.answers.get(&k) {
            Some(Answer::Found(addrs, until)) if Instant::now() < *until => {
                return Found::Addrs(addrs.clone())
            }
            Some(Answer::Failed(_)) => {
                if let Some(Answer::Failed(why)) = self.answers.remove(&k) {
                    return Found::Failed(why);
                }
            }
            _ => {}
        }
        Found::Ask(Box::new(Lookup {
            conf: conf.clone(),
            name: k.1,
            timeout,
        }))
    }
}

/// One lookup a request waits for.
struct Lookup {
    conf: Arc<ResolverConf>,
    name: String,
    timeout: Duration,
}

impl Suspension for Lookup {
    fn resume<'r>(
        self: Box<Self>,
        req: &'r mut Request<'_>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'r>> {
        Box::pin(async move {
            let worker = req.worker();
            let resolver = {
                let mut w = worker.resolvers.borrow_mut();
                let k = key(&self.conf);
                if let std::collections::hash_map::Entry::Vacant(e) = w.resolvers.entry(k) {
                    if let Some(r) = self.conf.resolver(self.timeout) {
                        e.insert((self.conf.clone(), r));
                    }
                }
                w.resolvers.get(&k).map(|(_, r)| r.clone())
            };
            let answer = match resolver {
                None => Answer::Failed("(1: Format error)".into()),
                Some(r) => {
                    let name = format!("{}.", self.name.trim_end_matches('.'));
                    match tokio::time::timeout(self.timeout, r.lookup_ip(name)).await {
                        Err(_) => Answer::Failed("(110: Operation timed out)".into()),
                        Ok(Err(e)) => Answer::Failed(failure(&e.to_string())),
                        Ok(Ok(found)) => {
                            let addrs: Vec<IpAddr> = found.iter().collect();
                            if addrs.is_empty() {
                                Answer::Failed("(3: Host not found)".into())
                            } else {
                                let until = found.valid_until();
                                Answer::Found(addrs, until)
                            }
                        }
                    }
                }
            };
            let k = (key(&self.conf), self.name);
            worker.resolvers.borrow_mut().answers.insert(k, answer);
        })
    }
}

/// nginx's words for a failed lookup, from the resolver's error.
fn failure(error: &str) -> String {
    let e = error.to_ascii_lowercase();
    if e.contains("timed out") || e.contains("timeout") {
        "(110: Operation timed out)".into()
    } else if e.contains("refused") {
        "(5: Operation refused)".into()
    } else if e.contains("servfail") || e.contains("server failure") {
        "(2: Server failure)".into()
    } else {
        "(3: Host not found)".into()
    }
}
