//! `ngx_http_realip_module`: `set_real_ip_from`, `real_ip_header` and `real_ip_recursive`,
//! and `$realip_remote_addr` and `$realip_remote_port`. When the connection comes from a
//! trusted address (`set_real_ip_from`: addresses, networks, host names resolved at load,
//! `unix:`), the client's address is taken from a header of the request: `X-Real-IP` (the
//! default), the last address of `X-Forwarded-For` (or, with `real_ip_recursive`, the last
//! one that is not trusted itself), or any other header. From then on the request's
//! `$remote_addr`, `$binary_remote_addr`, `$remote_port` (empty without a port), its access
//! rules, limits, logs and `X-Forwarded-For` to upstreams use that address, as nginx's do.
//!
//! As in nginx it runs with the server's settings before the server's rewrite directives
//! (post-read), and with the location's before the limits (preaccess) if it has not yet
//! taken an address. `real_ip_header proxy_protocol` takes the address and port of the
//! connection's PROXY protocol header (`listen ... proxy_protocol`).

use std::net::{IpAddr, ToSocketAddrs};
use std::sync::Arc;

use portcullis_config::{value, ConfigError, Directive};

use crate::module::{self, Load, Module, Slot};
use crate::net::{forwarded_addr, Cidr};
use crate::request::{Access, Handlers, Request, Response};
use crate::vars::Names;

pub(crate) struct RealIpModule;

pub(crate) static MODULE: RealIpModule = RealIpModule;

/// A level's settings, inherited by the levels inside it unless they set their own.
#[derive(Clone, Default)]
struct Conf {
    /// `set_real_ip_from`: a level's first replaces the inherited list.
    from: Arc<Vec<Trusted>>,
    header: Header,
    recursive: bool,
}

#[derive(Clone, Copy)]
enum Trusted {
    Net(Cidr),
    /// `unix:`: connections over a unix socket.
    Unix,
}

#[derive(Clone, Default)]
enum Header {
    #[default]
    XRealIp,
    XForwardedFor,
    ProxyProtocol,
    /// Another header, by its name in lower case.
    Other(String),
}

impl Module for RealIpModule {
    fn name(&self) -> &'static str {
        "http_realip_module"
    }

    fn declare(
        &self,
        _http: &[Directive],
        names: &mut Names,
        me: usize,
    ) -> Result<(), ConfigError> {
        names.add_fixed(me, &["realip_remote_addr", "realip_remote_port"]);
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
        match d.name.as_str() {
            "set_real_ip_from" => {
                if cx.first {
                    c.from = Arc::default();
                }
                Arc::make_mut(&mut c.from).extend(trusted(d)?);
            }
            "real_ip_header" => {
                c.header = match d.arg(0) {
                    "X-Real-IP" => Header::XRealIp,
                    "X-Forwarded-For" => Header::XForwardedFor,
                    "proxy_protocol" => Header::ProxyProtocol,
                    other => Header::Other(other.to_ascii_lowercase()),
                };
            }
            "real_ip_recursive" => c.recursive = value::flag(d, 0)?,
            _ => {}
        }
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        !module::get::<Conf>(conf).from.is_empty()
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            postread: Some(realip),
            preaccess: Some(realip),
            variable: Some(variable),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// `set_real_ip_from`'s argument: `unix:`, an address or network, or a host name and its
/// addresses.
fn trusted(d: &Directive) -> Result<Vec<Trusted>, ConfigError> {
    let v = d.arg(0);
    if v == "unix:" {
        return Ok(vec![Trusted::Unix]);
    }
    if let Some(net) = Cidr::parse(v) {
        return Ok(vec![Trusted::Net(net)]);
    }
    let addrs: Vec<Trusted> = (v, 0)
        .to_socket_addrs()
        .map(|a| a.map(|a| Trusted::Net(Cidr::host(a.ip()))).collect())
        .unwrap_or_default();
    if addrs.is_empty() {
        return Err(ConfigError::at(
            d,
            format!("host not found in set_real_ip_from \"{v}\""),
        ));
    }
    Ok(addrs)
}

impl Trusted {
    fn contains(&self, addr: IpAddr) -> bool {
        match self {
            Trusted::Net(net) => net.contains(addr),
            Trusted::Unix => false,
        }
    }
}

/// What a request keeps of the module once it took an address: that it did.
#[derive(Default)]
struct RealIpCtx;

fn realip(req: &mut Request<'_>, conf: &Slot) -> Access {
    // A subrequest has its main request's address already, taken once.
    if req.is_subrequest() || req.ctx::<RealIpCtx>().is_some() {
        return Access::Declined;
    }
    let c = module::get::<Conf>(conf);
    let head = req.head();
    let values: Vec<&[u8]> = match &c.header {
        Header::XRealIp => head.header("x-real-ip").into_iter().collect(),
        Header::XForwardedFor => head
            .headers()
            .filter(|(n, _)| n.eq_ignore_ascii_case("x-forwarded-for"))
            .map(|(_, v)| v)
            .collect(),
        Header::ProxyProtocol => req
            .proxy_protocol()
            .map(|pp| pp.src_addr.as_bytes())
            .into_iter()
            .collect(),
        Header::Other(name) => head.header(name).into_iter().collect(),
    };
    if values.is_empty() {
        return Access::Declined;
    }
    let trusted = |ip: IpAddr| c.from.iter().any(|t| t.contains(ip));
    let Some(mut addr) = forwarded_addr(req.peer(), &values, &trusted, c.recursive) else {
        return Access::Declined;
    };
    if let (Header::ProxyProtocol, Some(pp)) = (&c.header, req.proxy_protocol()) {
        addr.set_port(pp.src_port);
    }
    req.ctx_mut::<RealIpCtx>();
    req.set_peer(addr);
    Access::Declined
}

/// `$realip_remote_addr` and `$realip_remote_port`: the connection's, whatever
/// the request (or its main request, for a subrequest) took.
fn variable(
    req: &Request<'_>,
    _conf: &Slot,
    var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&Response, u64)>,
) {
    let addr = req.connection_peer();
    // `$realip_remote_port` is the second.
    if *module::get::<usize>(var) == 1 {
        if addr.port() != 0 {
            out.extend_from_slice(addr.port().to_string().as_bytes());
        }
    } else {
        out.extend_from_slice(addr.ip().to_string().as_bytes());
    }
}
