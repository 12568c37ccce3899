//! `resolver` and `resolver_timeout`: host names in a `proxy_pass` URL made of variables are
//! resolved when a request needs them, asynchronously, through the configured DNS servers, as
//! nginx's resolver does. Names in the configuration itself are resolved at load.
//!
//! `resolver address ... [valid=time] [ipv4=on|off] [ipv6=on|off]`: the servers (port 53 by
//! default), how long an answer is kept (its TTL without `valid=`), and which address families
//! are asked for (both by default). A name already resolved costs a lookup in the worker's
//! cache; one that is not suspends the request until its answer comes (or `resolver_timeout`,
//! 30 s by default, passes), and the phases then run again and find it.
//!
//! The lookups are a stub resolver's, as nginx's own is: A and AAAA questions over UDP to
//! each server in turn (5 s each), TCP when an answer is truncated, no search domains. A
//! resolver crate that needs tokio's multi-thread scheduler compiled in would make every
//! proxied request of the single-threaded workers about 1.7 % dearer (BENCHMARKS.md).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis_config::{value, ConfigError, Directive};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    /// Answers by directive and name, until they expire; a failure is kept only for the
    /// request that asked. The directive's settings are held with them, so that its address
    /// (the key) is not reused while they are kept.
    answers: HashMap<(usize, String), (Arc<ResolverConf>, Answer)>,
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
    /// Not known yet: the request waits for this lookup, then hands its answer to
    /// [`WorkerResolvers::put`].
    Ask(Lookup),
}

fn key(conf: &Arc<ResolverConf>) -> usize {
    Arc::as_ptr(conf) as usize
}

impl WorkerResolvers {
    /// The addresses of `name`, if known and fresh, or what to wait for.
    pub fn find(&mut self, conf: &Arc<ResolverConf>, name: &str, timeout: Duration) -> Found {
        let k = (key(conf), name.to_ascii_lowercase());
        match self.answers.get(&k) {
            Some((_, Answer::Found(addrs, until))) if Instant::now() < *until => {
                return Found::Addrs(rotated(addrs))
            }
            Some((_, Answer::Failed(_))) => {
                if let Some((_, Answer::Failed(why))) = self.answers.remove(&k) {
                    return Found::Failed(why);
                }
            }
            _ => {}
        }
        Found::Ask(Lookup {
            conf: conf.clone(),
            name: k.1,
            timeout,
        })
    }

    /// Keeps the answer of a lookup; expired answers of other names go then.
    pub fn put(&mut self, answered: Answered) {
        let now = Instant::now();
        self.answers
            .retain(|_, (_, a)| !matches!(a, Answer::Found(_, until) if *until <= now));
        // Names come from requests (`proxy_pass http://$host`): the map stays bounded.
        while self.answers.len() >= MAX_ANSWERS {
            let Some(k) = self.answers.keys().next().cloned() else {
                break;
            };
            self.answers.remove(&k);
        }
        let Answered(conf, name, answer) = answered;
        self.answers.insert((key(&conf), name), (conf, answer));
    }
}

/// One lookup a request waits for.
pub(crate) struct Lookup {
    conf: Arc<ResolverConf>,
    name: String,
    timeout: Duration,
}

/// A lookup's answer, for [`WorkerResolvers::put`].
pub(crate) struct Answered(Arc<ResolverConf>, String, Answer);

impl Lookup {
    /// Asks the servers.
    pub async fn run(self) -> Answered {
        let answer = lookup(&self.conf, &self.name, self.timeout).await;
        Answered(self.conf, self.name, answer)
    }
}

/// DNS record types and response codes this resolver reads.
const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
const RCODE_SERVFAIL: u8 = 2;
const RCODE_NXDOMAIN: u8 = 3;
const RCODE_REFUSED: u8 = 5;
/// Shortest time an answer is kept, so that a TTL of 0 does not ask for every request.
const MIN_VALID: Duration = Duration::from_secs(1);
/// Longest time an answer is kept without `valid=`, whatever its TTL says.
const MAX_VALID: Duration = Duration::from_secs(24 * 3600);
/// Most answers a worker keeps.
const MAX_ANSWERS: usize = 4096;
/// Longest wait for one server before the next is asked (nginx resends every 5 s).
const ATTEMPT: Duration = Duration::from_secs(5);

/// Resolves `name` for `conf` within `timeout`: its addresses, or nginx's words for why not.
async fn lookup(conf: &ResolverConf, name: &str, timeout: Duration) -> Answer {
    let deadline = tokio::time::Instant::now() + timeout;
    let ask = |qtype| async move {
        match tokio::time::timeout_at(deadline, query(&conf.servers, name, qtype)).await {
            Ok(r) => r,
            Err(_) => Err("(110: Operation timed out)".to_string()),
        }
    };
    let (v4, v6) = tokio::join!(
        async {
            if conf.ipv4 {
                Some(ask(TYPE_A).await)
            } else {
                None
            }
        },
        async {
            if conf.ipv6 {
                Some(ask(TYPE_AAAA).await)
            } else {
                None
            }
        },
    );
    let mut addrs = Vec::new();
    let mut ttl: Option<u32> = None;
    let mut why = None;
    for r in [v4, v6].into_iter().flatten() {
        match r {
            Ok((found, t)) => {
                addrs.extend(found);
                ttl = Some(ttl.map_or(t, |m| m.min(t)));
            }
            Err(e) => why = why.or(Some(e)),
        }
    }
    if addrs.is_empty() {
        return Answer::Failed(why.unwrap_or_else(|| "(3: Host not found)".into()));
    }
    // A TTL with its top bit set is 0 (RFC 2181, 8).
    let ttl = ttl.filter(|t| t & 0x8000_0000 == 0).unwrap_or(0);
    let valid = conf
        .valid
        .unwrap_or_else(|| Duration::from_secs(u64::from(ttl)).min(MAX_VALID))
        .max(MIN_VALID);
    Answer::Found(addrs, Instant::now() + valid)
}

/// One question to the servers in turn: the addresses of the answer and their smallest TTL.
async fn query(
    servers: &[SocketAddr],
    name: &str,
    qtype: u16,
) -> Result<(Vec<IpAddr>, u32), String> {
    let mut last = "(110: Operation timed out)".to_string();
    // Each server in turn, again and again until the caller's deadline: a lost datagram or
    // a server that does not answer costs one attempt, not the whole timeout.
    for server in servers.iter().cycle() {
        let id = query_id();
        let question = message(id, name, qtype).ok_or("(1: Format error)")?;
        let attempt = async {
            match ask_udp(*server, &question).await {
                Ok(r) if r.get(2).is_some_and(|f| f & 0x02 != 0) => {
                    ask_tcp(*server, &question).await
                }
                other => other,
            }
        };
        let reply = match tokio::time::timeout(ATTEMPT, attempt).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(last.clone()),
        };
        match reply.and_then(|r| answers(&r, id, qtype)) {
            Ok(found) => return Ok(found),
            // A name the server does not know is known to be unknown.
            Err(e) if e == "(3: Host not found)" => return Err(e),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The addresses from a random one on, as nginx's resolver hands out a name it knows: the
/// requests for a name of several addresses spread over them (each request tries the
/// others after a failed one).
fn rotated(addrs: &[IpAddr]) -> Vec<IpAddr> {
    let mut out = addrs.to_vec();
    if out.len() > 1 {
        let first = usize::from(random_u16()) % out.len();
        out.rotate_left(first);
    }
    out
}

/// A random query id, so that a reply cannot be guessed.
fn query_id() -> u16 {
    random_u16()
}

/// Two random bytes (the clock's nanoseconds if the kernel gives none).
fn random_u16() -> u16 {
    let mut id = [0u8; 2];
    // SAFETY: getrandom writes at most the two bytes of `id`.
    let n = unsafe { libc::getrandom(id.as_mut_ptr().cast(), 2, 0) };
    if n == 2 {
        return u16::from_be_bytes(id);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (nanos ^ (nanos >> 16)) as u16
}

/// A query for `name` of type `qtype`, recursion desired; `None` for a name DNS cannot
/// carry (an empty label, one longer than 63 bytes, more than 253 in all).
fn message(id: u16, name: &str, qtype: u16) -> Option<Vec<u8>> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.len() > 253 {
        return None;
    }
    let mut m = Vec::with_capacity(name.len() + 18);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return None;
        }
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&CLASS_IN.to_be_bytes());
    Some(m)
}

async fn ask_udp(server: SocketAddr, question: &[u8]) -> std::io::Result<Vec<u8>> {
    let any: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let socket = tokio::net::UdpSocket::bind(any).await?;
    socket.connect(server).await?;
    socket.send(question).await?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = socket.recv(&mut buf).await?;
        // A datagram of another question (a late answer) is not this one's.
        if n >= 2 && buf[..2] == question[..2] {
            buf.truncate(n);
            return Ok(buf);
        }
    }
}

async fn ask_tcp(server: SocketAddr, question: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = tokio::net::TcpStream::connect(server).await?;
    let mut out = (question.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(question);
    s.write_all(&out).await?;
    let len = usize::from(s.read_u16().await?);
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf).await?;
    Ok(buf)
}

/// The addresses of type `qtype` in the reply to query `id`, with their smallest TTL; the
/// error is nginx's words for the response code.
fn answers(r: &[u8], id: u16, qtype: u16) -> Result<(Vec<IpAddr>, u32), String> {
    let bad = || "(1: Format error)".to_string();
    if r.len() < 12 || r[..2] != id.to_be_bytes() || r[2] & 0x80 == 0 {
        return Err(bad());
    }
    match r[3] & 0x0f {
        0 => {}
        RCODE_NXDOMAIN => return Err("(3: Host not found)".into()),
        RCODE_SERVFAIL => return Err("(2: Server failure)".into()),
        RCODE_REFUSED => return Err("(5: Operation refused)".into()),
        _ => return Err(bad()),
    }
    let count = |i: usize| u16::from_be_bytes([r[i], r[i + 1]]);
    let (questions, records) = (count(4), count(6));
    let mut at = 12;
    for _ in 0..questions {
        at = skip_name(r, at).ok_or_else(bad)? + 4;
    }
    let mut addrs = Vec::new();
    let mut ttl = u32::MAX;
    for _ in 0..records {
        at = skip_name(r, at).ok_or_else(bad)?;
        let field = r.get(at..at + 10).ok_or_else(bad)?;
        let rtype = u16::from_be_bytes([field[0], field[1]]);
        let class = u16::from_be_bytes([field[2], field[3]]);
        let rttl = u32::from_be_bytes([field[4], field[5], field[6], field[7]]);
        let len = usize::from(u16::from_be_bytes([field[8], field[9]]));
        let data = r.get(at + 10..at + 10 + len).ok_or_else(bad)?;
        at += 10 + len;
        if class != CLASS_IN || rtype != qtype {
            continue;
        }
        let ip = match (rtype, data.len()) {
            (TYPE_A, 4) => IpAddr::from(<[u8; 4]>::try_from(data).map_err(|_| bad())?),
            (TYPE_AAAA, 16) => IpAddr::from(<[u8; 16]>::try_from(data).map_err(|_| bad())?),
            _ => continue,
        };
        addrs.push(ip);
        ttl = ttl.min(rttl);
    }
    if addrs.is_empty() {
        return Err("(3: Host not found)".into());
    }
    Ok((addrs, ttl))
}

/// The place after the name at `at`: its labels, up to the end or a compression pointer.
fn skip_name(r: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *r.get(at)?;
        match len {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => return Some(at + 2),
            l => at += 1 + usize::from(l),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply to `q` with `records` (type, data) for its name, by a compression pointer.
    fn reply(q: &[u8], rcode: u8, records: &[(u16, &[u8])]) -> Vec<u8> {
        let mut r = q.to_vec();
        r[2] = 0x81;
        r[3] = 0x80 | rcode;
        r[6..8].copy_from_slice(&(records.len() as u16).to_be_bytes());
        for (rtype, data) in records {
            r.extend_from_slice(&[0xc0, 0x0c]);
            r.extend_from_slice(&rtype.to_be_bytes());
            r.extend_from_slice(&CLASS_IN.to_be_bytes());
            r.extend_from_slice(&300u32.to_be_bytes());
            r.extend_from_slice(&(data.len() as u16).to_be_bytes());
            r.extend_from_slice(data);
        }
        r
    }

    #[test]
    fn questions_and_answers() {
        assert!(message(1, "a..b", TYPE_A).is_none());
        assert!(message(1, &"x".repeat(64), TYPE_A).is_none());
        let q = message(0x1234, "backend.example.", TYPE_A).unwrap();
        assert_eq!(&q[12..], b"\x07backend\x07example\x00\x00\x01\x00\x01");
        let r = reply(
            &q,
            0,
            &[
                (TYPE_A, &[10, 0, 0, 1]),
                (5, b"\x00"),
                (TYPE_A, &[10, 0, 0, 2]),
            ],
        );
        let (addrs, ttl) = answers(&r, 0x1234, TYPE_A).unwrap();
        assert_eq!(
            addrs,
            [IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2])]
        );
        assert_eq!(ttl, 300);
        // Another question's reply, an unknown name, a reply cut short.
        assert!(answers(&r, 0x4321, TYPE_A).is_err());
        let nx = reply(&q, RCODE_NXDOMAIN, &[]);
        assert_eq!(
            answers(&nx, 0x1234, TYPE_A).unwrap_err(),
            "(3: Host not found)"
        );
        assert_eq!(
            answers(&r[..r.len() - 2], 0x1234, TYPE_A).unwrap_err(),
            "(1: Format error)"
        );
        // AAAA records are not A records.
        assert!(answers(&r, 0x1234, TYPE_AAAA).is_err());
    }
}
