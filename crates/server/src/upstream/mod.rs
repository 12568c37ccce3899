//! The upstream machinery, which nginx keeps in its http core (`ngx_http_upstream.c`) and
//! the modules that pass requests to servers share: the proxy (`proxy.rs`), the
//! application servers' (`gateway.rs`: FastCGI, uwsgi, SCGI) and gRPC's (`grpc.rs`, whose
//! HTTP/2 exchange is `grpc`).
//!
//! At load, `upstream` blocks become [`Upstream`]s kept by name (read by the core before
//! any directive that names them), each `proxy_pass` (`fastcgi_pass`) a [`ProxyPass`] (the
//! group, or a URL template resolved per request), and the settings those modules
//! share a [`ProxySettings`]. In the content phase a module builds a [`Plan`]: the upstream,
//! the request head to send with every variable evaluated. The connection then runs the
//! exchange (`exchange`): a peer from the balancer, an idle connection from the worker's
//! pool or a new one, the request, the response head forwarded by nginx's rules, and the
//! body streamed to the downstream (`downstream`: an HTTP/1.1 connection, an HTTP/2
//! stream, a subrequest). The cache (`cache`) and the resolver (`resolve`) are here too.

pub(crate) mod cache;
mod downstream;
mod encoded;
mod exchange;
pub(crate) mod fastcgi;
mod filtered;
pub(crate) mod group;
mod grpc;
mod params;
pub(crate) mod resolve;
mod serve;
mod settings;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use portcullis_proxy::upstream::{LocalState, PeerId, Upstream};
use portcullis_proxy::{Pool, PoolLimits, Stream};

pub(crate) use downstream::{Client, Collect, Connection, Downstream, Fields, NoConnection};
pub(crate) use exchange::{cache_job, collect_body};
pub(crate) use exchange::{preread_whole, Finish, ReqBody, Streamed, CLIENT_CLOSED};
pub(crate) use group::{Group, Groups};
pub(crate) use grpc::GrpcRequest;
pub(crate) use serve::serve;
pub(crate) use settings::{
    directive, directive_as_proxy, finish_tls, proxy_pass, split_host_port, unix_target, unix_url,
    CookieName, CookieRule, ProxyPass, ProxySettings, Redirect, RedirectRule, Target,
};

/// Everything the exchange needs, evaluated by the request in the content phase.
pub(crate) struct Plan {
    pub upstream: Arc<Upstream>,
    pub settings: Arc<ProxySettings>,
    /// `http` or `https`.
    pub https: bool,
    /// The request head to send, up to and without the final empty line: the framing
    /// header of the body is added once the body is read.
    pub head: BytesMut,
    /// Where in `head` the URI sent is, for the error log's `upstream: "http://peer/uri"`.
    pub uri: std::ops::Range<usize>,
    /// Whether the client's body goes to the upstream.
    pub pass_body: bool,
    /// A body that replaces the client's (`proxy_set_body`).
    pub set_body: Option<Vec<u8>>,
    /// The value of the group's `hash` key.
    pub hash_key: Vec<u8>,
    /// The method sent may be retried on another peer after it was sent (nginx's
    /// idempotent methods, unless `non_idempotent`).
    pub idempotent: bool,
    /// The method sent is HEAD: the response has no body whatever it says.
    pub head_request: bool,
    /// The client sent `Upgrade`: a 101 turns the connection into a tunnel.
    pub upgrade: bool,
    /// The upstream connection may be kept: HTTP/1.1 without `Connection: close` sent.
    pub keepalive: bool,
    /// The location's proxy_pass, for proxy_redirect's rules.
    pub pass: Arc<ProxyPass>,
    /// What the location's cache does for the request (`proxy_cache`).
    pub cache: Option<Box<cache::Job>>,
    /// The upstream is an application server (`fastcgi_pass`, `uwsgi_pass`, `scgi_pass`):
    /// its protocol, and the params made into the request once its body is read.
    pub gateway: Option<Gateway>,
    /// The upstream is a gRPC server (`grpc_pass`): the HTTP/2 request to send.
    pub grpc: Option<Box<GrpcRequest>>,
    /// `proxy_ssl_name` with variables, evaluated for this request.
    pub ssl_name: Option<String>,
    /// `proxy_ssl_certificate` and `_key` with variables: the files for this request.
    pub client_cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// What a request to an application server is sent in.
#[derive(Clone)]
pub(crate) struct Gateway {
    pub protocol: Protocol,
    pub params: Arc<fastcgi::Params>,
    /// The response may be cached: the client's conditions and range are not passed (the
    /// cache's own conditions are, when it revalidates), as nginx's cache params say.
    pub cacheable: bool,
}

/// The protocols of application servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// Records, the body as `STDIN` records, a CGI head (`upstream/fastcgi.rs`).
    FastCgi,
    /// A packet of the params (`uwsgi_modifier1` and `2` in its header), the body as it is;
    /// an HTTP or CGI head back.
    Uwsgi { modifier1: u8, modifier2: u8 },
    /// A netstring of the params, the body as it is; an HTTP or CGI head back.
    Scgi,
}

impl Protocol {
    /// As nginx names the upstream in its error log.
    pub fn scheme(self) -> &'static str {
        match self {
            Protocol::FastCgi => "fastcgi",
            Protocol::Uwsgi { .. } => "uwsgi",
            Protocol::Scgi => "scgi",
        }
    }
}

/// Whether nginx may send a request of `method` again to another peer after it went out:
/// every method but its non-idempotent ones.
pub(crate) fn idempotent(method: &[u8]) -> bool {
    !matches!(method, b"POST" | b"LOCK" | b"PATCH")
}

impl Plan {
    /// Whether the upstream speaks FastCGI.
    pub fn is_fastcgi(&self) -> bool {
        matches!(&self.gateway, Some(g) if g.protocol == Protocol::FastCgi)
    }

    /// Whether the upstream is an application server rather than an HTTP one.
    pub fn is_gateway(&self) -> bool {
        self.gateway.is_some()
    }
}

impl Plan {
    /// Whether a client body of `kind` is sent as it arrives rather than read whole first:
    /// `proxy_request_buffering off`, except for a chunked body to an HTTP/1.0 upstream,
    /// which needs its length first, as in nginx.
    pub fn streams_body(&self, kind: portcullis_http::BodyKind) -> bool {
        !self.is_gateway()
            && self.grpc.is_none()
            && !self.settings.request_buffering
            && self.set_body.is_none()
            && (self.settings.http11 || !matches!(kind, portcullis_http::BodyKind::Chunked))
    }
}

/// One attempt as `$upstream_*` variables report it.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    pub addr: Arc<str>,
    pub status: Option<u16>,
    pub connect: Option<std::time::Duration>,
    pub header: Option<std::time::Duration>,
    pub response: std::time::Duration,
    /// Body bytes received from the upstream (`$upstream_response_length`).
    pub length: u64,
    /// Bytes sent to the upstream, request head and body (`$upstream_bytes_sent`).
    pub bytes_sent: u64,
    /// Bytes read from it, heads of interim responses included (`$upstream_bytes_received`).
    pub bytes_received: u64,
    /// The peer, for the metrics kept per peer: its group's number ([`Upstream::group`])
    /// and its ID in the group. `None` when no peer was chosen.
    pub peer: Option<(u64, u32)>,
    /// The first attempt of an exchange after the request's first (an error_page's or
    /// X-Accel-Redirect's): `$upstream_*` part it from the ones before with " : ".
    pub next_exchange: bool,
}

impl Attempt {
    /// An attempt on `addr` (peer `peer` of `upstream`), before it ends.
    pub fn new(addr: Arc<str>, peer: Option<(&Upstream, PeerId)>) -> Attempt {
        Attempt {
            addr,
            status: None,
            connect: None,
            header: None,
            response: std::time::Duration::ZERO,
            length: 0,
            bytes_sent: 0,
            bytes_received: 0,
            peer: peer.map(|(u, i)| (u.group(), u.peer(i).id())),
            next_exchange: false,
        }
    }
}

/// A worker's state for one upstream group: the balancer's and the idle connections.
pub(crate) struct Local {
    /// Held so the group outlives the map entry keyed by its address.
    _upstream: Arc<Upstream>,
    pub state: LocalState,
    pub pool: Option<Pool<Stream>>,
    /// The idle HTTP/2 connections of gRPC's exchange, with the same limits.
    pub h2: Option<Pool<::h2::client::SendRequest<bytes::Bytes>>>,
}

/// Per-worker state of every upstream group met, keyed by the group's address.
#[derive(Default)]
pub(crate) struct WorkerUpstreams {
    groups: HashMap<usize, Rc<std::cell::RefCell<Local>>, BuildAddrHasher>,
    /// Buffers upstream responses are read into, each lent to one exchange at a time: a
    /// worker has as many exchanges in flight as it has busy connections.
    buffers: Vec<BytesMut>,
    /// The cache entries the worker read last.
    pub(crate) hot: std::cell::RefCell<cache::store::Hot>,
}

/// Hashes the address that keys a group, looked up on every proxied request: an address
/// needs no defence against chosen keys, so one multiplication (Fibonacci hashing) replaces
/// SipHash.
#[derive(Default)]
struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type BuildAddrHasher = std::hash::BuildHasherDefault<AddrHasher>;

/// Most response buffers a worker keeps for reuse; more are freed when returned.
const SPARE_BUFFERS: usize = 256;
/// A buffer that grew past this (a huge head) is freed rather than kept: the spare buffers
/// stay within a few MiB per worker.
const SPARE_CAPACITY: usize = 64 * 1024;

impl WorkerUpstreams {
    /// An empty buffer for an upstream response, one used before if there is one.
    pub fn take_buffer(&mut self) -> BytesMut {
        self.buffers.pop().unwrap_or_default()
    }

    /// Keeps `buf` for the next exchange.
    pub fn return_buffer(&mut self, mut buf: BytesMut) {
        buf.clear();
        if self.buffers.len() < SPARE_BUFFERS && (1..=SPARE_CAPACITY).contains(&buf.capacity()) {
            self.buffers.push(buf);
        }
    }

    /// The worker's state for `upstream`, made on first use.
    pub fn local(&mut self, upstream: &Arc<Upstream>) -> Rc<std::cell::RefCell<Local>> {
        let key = Arc::as_ptr(upstream) as usize;
        self.groups
            .entry(key)
            .or_insert_with(|| {
                let limits = upstream.keepalive().map(|k| PoolLimits {
                    max_idle: k.max_idle,
                    requests: k.requests,
                    timeout: k.timeout,
                    time: k.time,
                });
                let peers = upstream.peers().len();
                Rc::new(std::cell::RefCell::new(Local {
                    _upstream: upstream.clone(),
                    state: upstream.local_state(),
                    pool: limits.map(|l| Pool::new(l, peers)),
                    h2: limits.map(|l| Pool::new(l, peers)),
                }))
            })
            .clone()
    }

    /// Forgets groups of an older configuration; their idle connections close.
    pub fn clear(&mut self) {
        self.groups.clear();
    }

    /// Closes idle connections past their timeout, and lets go of cache entries kept too
    /// long.
    pub fn sweep(&mut self, now: Instant) {
        self.hot.borrow_mut().sweep(now);
        // The groups a request made of variables (`proxy_pass http://$addr`): once no
        // request holds one, nobody can name it again, and it goes.
        self.groups.retain(|_, local| {
            Rc::strong_count(local) > 1
                || local
                    .try_borrow()
                    .map_or(true, |l| Arc::strong_count(&l._upstream) > 1)
        });
        for local in self.groups.values() {
            if let Ok(mut l) = local.try_borrow_mut() {
                if let Some(p) = l.pool.as_mut() {
                    p.sweep(now);
                }
                if let Some(p) = l.h2.as_mut() {
                    p.sweep(now);
                }
            }
        }
    }
}

/// Resolves `host:port` of a `proxy_pass` URL at load, as nginx does for a name that is no
/// upstream group.
pub(crate) fn resolve(host: &str, port: u16) -> Option<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = (host, port).to_socket_addrs().ok()?.collect();
    (!addrs.is_empty()).then_some(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_config::ConfigError;

    /// Compiles the one `upstream` block of `upstream`, put in an http block from line 3.
    fn group(upstream: &str) -> Result<Group, ConfigError> {
        let dir = std::env::temp_dir();
        let text = format!("events {{}}\nhttp {{\n{upstream}\n}}\n");
        let loaded = portcullis_config::load_str(&text, &dir.join("t.conf"), &Default::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let http = loaded.directives.iter().find(|d| d.name == "http");
        let up = http.and_then(|h| h.children().iter().find(|d| d.name == "upstream"));
        Group::compile(
            up.unwrap_or_else(|| panic!("no upstream in {text}")),
            &crate::vars::Names::default(),
            &dir,
        )
    }

    #[test]
    fn hash_keys_compile_with_the_place_of_an_error() {
        let g = group("upstream u {\n server 127.0.0.1:1;\n hash $arg_k$uri consistent;\n}\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(g.key.is_some());
        assert!(group("upstream u { ip_hash; server 127.0.0.1:1; }").is_ok_and(|g| g.key.is_none()));
        let e = group("upstream u {\n server 127.0.0.1:1;\n hash $nosuch;\n}\n")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("unknown \"nosuch\" variable in"), "{e}");
        assert!(e.ends_with("t.conf:5"), "{e}");
    }

    #[test]
    fn escapes_like_nginx() {
        let mut out = BytesMut::new();
        crate::vars::escape(b"/a b#c%d?e\xc3\xa9/f", &mut out, crate::vars::Escape::Uri);
        assert_eq!(&out[..], b"/a%20b%23c%25d%3Fe%C3%A9/f");
    }

    /// A group made for one request (`proxy_pass http://$addr`) is let go once nothing holds
    /// it but the worker; one the configuration holds stays.
    #[test]
    fn groups_nobody_holds_are_let_go() {
        let mut w = WorkerUpstreams::default();
        let addr = || {
            vec![portcullis_proxy::PeerAddr::Inet(
                "127.0.0.1:1".parse().unwrap(),
            )]
        };
        let configured = Arc::new(Upstream::implicit("a:1", addr()));
        let made = Arc::new(Upstream::implicit("b:1", addr()));
        w.local(&configured);
        let held = w.local(&made);
        drop(made);
        w.sweep(Instant::now());
        // A request still holds the second's state.
        assert_eq!(w.groups.len(), 2);
        drop(held);
        w.sweep(Instant::now());
        assert_eq!(w.groups.len(), 1);
        assert!(w.groups.contains_key(&(Arc::as_ptr(&configured) as usize)));
    }
}
