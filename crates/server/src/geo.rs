//! `ngx_http_geo_module`: `geo [$address] $variable { ... }` makes a variable whose value
//! depends on the client's address (the connection's, or one `set_real_ip_from` took) or on
//! `$address` (an address in a variable; one that is not an address reads as
//! 255.255.255.255, as in nginx). As nginx's:
//!
//! - entries are networks or addresses with a value; the most specific network that holds
//!   the address gives the value, whatever the order written; a network written twice
//!   takes its last value;
//! - `default` gives the value when none holds it (empty without one); `delete` takes a
//!   network out again; `include` reads entries from a file;
//! - with `ranges`, entries are IPv4 ranges (`10.0.0.1-10.0.0.9`), kept as nginx keeps them,
//!   in pieces of 65,536 addresses: a range inside one already there splits it, the same
//!   range again replaces its value, one that crosses another's edge is an error; an
//!   address that is not IPv4 reads as 255.255.255.255;
//! - `proxy` names the addresses (networks) of trusted proxies: a request from one of them
//!   counts as coming from the last address of its `X-Forwarded-For`, or with
//!   `proxy_recursive` the last one that is not a trusted proxy itself.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};

use crate::module::{self, Load, Module, Slot};
use crate::net::{forwarded_addr, parse_addr, Cidr};
use crate::request::{Handlers, Request, Response};
use crate::vars::{variable_name, Names, Template};

pub(crate) struct GeoModule;

pub(crate) static MODULE: GeoModule = GeoModule;

/// Every `geo` of the `http` block, in order: a variable holds its block's place.
#[derive(Clone, Default)]
struct Geos(Vec<Arc<Geo>>);

struct Geo {
    /// `$address`, or the client's address when `None`.
    address: Option<Template>,
    networks: Vec<(Cidr, String)>,
    /// With `ranges`: the ranges by the address's upper 16 bits, each sorted.
    ranges: Option<BTreeMap<u16, Vec<Range>>>,
    default: String,
    /// `proxy`: trusted proxies, whose `X-Forwarded-For` gives the address.
    proxies: Vec<Cidr>,
    proxy_recursive: bool,
}

/// A range's piece within one block of 65,536 addresses: the lower 16 bits of its ends.
#[derive(Clone)]
struct Range {
    start: u16,
    end: u16,
    value: Arc<str>,
}

/// The variable a `geo` block makes: its last argument.
fn target(d: &Directive) -> Option<&str> {
    variable_name(d.args.last().map_or("", |a| a.value.as_str()))
}

impl Module for GeoModule {
    fn name(&self) -> &'static str {
        "http_geo_module"
    }

    fn declare(&self, http: &[Directive], names: &mut Names, me: usize) -> Result<(), ConfigError> {
        names.add_block_targets(me, http, "geo", |d| target(d).unwrap_or(""))
    }

    fn defaults(&self) -> Slot {
        Arc::new(Geos::default())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        if target(d).is_none() {
            let name = d.args.last().map_or("", |a| a.value.as_str());
            return Err(ConfigError::at(
                d,
                format!("invalid variable name \"{name}\""),
            ));
        }
        let address = match d.args.len() {
            2 => Some(Template::compile(d.arg(0), d, cx.names)?),
            _ => None,
        };
        let mut geo = Geo {
            address,
            networks: Vec::new(),
            ranges: None,
            default: String::new(),
            proxies: Vec::new(),
            proxy_recursive: false,
        };
        // A `default` before `ranges` is an entry (0.0.0.0/0) as nginx reads it.
        let mut cidr_default = false;
        for e in d.children() {
            let key = e.name.as_str();
            match (key, e.args.as_slice()) {
                ("ranges", []) => {
                    if !geo.networks.is_empty() || cidr_default {
                        return Err(ConfigError::at(
                            e,
                            "the \"ranges\" directive must be the first directive",
                        ));
                    }
                    geo.ranges.get_or_insert_with(BTreeMap::new);
                }
                ("proxy_recursive", []) => geo.proxy_recursive = true,
                ("proxy", [net]) => geo.proxies.push(network(e, &net.value)?),
                ("default", [value]) => {
                    cidr_default |= geo.ranges.is_none();
                    geo.default = value.value.clone();
                }
                ("delete", [what]) => match geo.ranges.as_mut() {
                    Some(ranges) => {
                        let (start, end) = range(e, &what.value)?;
                        delete_range(ranges, start, end);
                    }
                    None => {
                        let net = network(e, &what.value)?;
                        geo.networks.retain(|(n, _)| !n.same_network(&net));
                    }
                },
                (_, [value]) => match geo.ranges.as_mut() {
                    Some(ranges) => {
                        let (start, end) = range(e, key)?;
                        add_range(ranges, start, end, Arc::from(value.value.as_str()))
                            .map_err(|m| ConfigError::at(e, m))?;
                    }
                    None => {
                        let net = network(e, key)?;
                        geo.networks.retain(|(n, _)| !n.same_network(&net));
                        geo.networks.push((net, value.value.clone()));
                    }
                },
                _ => return Err(ConfigError::at(e, "invalid number of the geo parameters")),
            }
        }
        module::edit::<Geos>(conf).0.push(Arc::new(geo));
        Ok(())
    }

    /// Variables only: no phase handler.
    fn is_active(&self, _conf: &Slot) -> bool {
        false
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

/// A range's ends (`10.0.0.1-10.0.0.9`), or nginx's error for it.
fn range(e: &Directive, text: &str) -> Result<(u32, u32), ConfigError> {
    let invalid = || ConfigError::at(e, format!("invalid range \"{text}\""));
    let (a, b) = text.split_once('-').ok_or_else(invalid)?;
    let start = crate::net::inet_addr(a.as_bytes()).ok_or_else(invalid)?;
    let end = crate::net::inet_addr(b.as_bytes()).ok_or_else(invalid)?;
    let (start, end) = (u32::from(start), u32::from(end));
    if start > end {
        return Err(invalid());
    }
    Ok((start, end))
}

/// The blocks of 65,536 addresses a range covers, with its piece in each.
fn pieces(start: u32, end: u32) -> impl Iterator<Item = (u16, u16, u16)> {
    let (first, last) = ((start >> 16) as u16, (end >> 16) as u16);
    (first..=last).map(move |h| {
        let s = if h == first { start as u16 } else { 0 };
        let e = if h == last { end as u16 } else { u16::MAX };
        (h, s, e)
    })
}

/// nginx's `ngx_http_geo_add_range`, block by block.
fn add_range(
    ranges: &mut BTreeMap<u16, Vec<Range>>,
    start: u32,
    end: u32,
    value: Arc<str>,
) -> Result<(), String> {
    for (h, s, e) in pieces(start, end) {
        let list = ranges.entry(h).or_default();
        let new = Range {
            start: s,
            end: e,
            value: value.clone(),
        };
        // The ranges this piece touches.
        let over: Vec<usize> = (0..list.len())
            .filter(|&i| !(e < list[i].start || s > list[i].end))
            .collect();
        match over.as_slice() {
            [] => {
                let at = list.partition_point(|r| r.end < s);
                list.insert(at, new);
            }
            [i] if list[*i].start == s && list[*i].end == e => list[*i].value = value.clone(),
            [i] if list[*i].start <= s && e <= list[*i].end => {
                let old = list[*i].clone();
                let mut parts = Vec::new();
                if old.start < s {
                    parts.push(Range {
                        end: s - 1,
                        ..old.clone()
                    });
                }
                parts.push(new);
                if e < old.end {
                    parts.push(Range {
                        start: e + 1,
                        ..old
                    });
                }
                list.splice(*i..=*i, parts);
            }
            [.., i] => {
                let r = &list[*i];
                let full = |low: u16| std::net::Ipv4Addr::from(u32::from(h) << 16 | u32::from(low));
                return Err(format!(
                    "range \"{}-{}\" overlaps \"{}-{}\"",
                    std::net::Ipv4Addr::from(start),
                    std::net::Ipv4Addr::from(end),
                    full(r.start),
                    full(r.end)
                ));
            }
        }
    }
    Ok(())
}

/// nginx's `ngx_http_geo_delete_range`: the pieces that are exactly the range's go.
fn delete_range(ranges: &mut BTreeMap<u16, Vec<Range>>, start: u32, end: u32) {
    for (h, s, e) in pieces(start, end) {
        if let Some(list) = ranges.get_mut(&h) {
            list.retain(|r| !(r.start == s && r.end == e));
        }
    }
}

/// An entry's network, or nginx's error for it.
fn network(e: &Directive, text: &str) -> Result<Cidr, ConfigError> {
    Cidr::parse(text).ok_or_else(|| ConfigError::at(e, format!("invalid network \"{text}\"")))
}

fn variable(
    req: &Request<'_>,
    conf: &Slot,
    var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&Response, u64)>,
) {
    let Some(geo) = module::get::<Geos>(conf).0.get(*module::get::<usize>(var)) else {
        return;
    };
    let addr = match &geo.address {
        None => req.peer().ip(),
        Some(t) => parse_addr(&req.eval(t)).unwrap_or(IpAddr::V4(Ipv4Addr::BROADCAST)),
    };
    let addr = if geo.proxies.is_empty() {
        addr
    } else {
        let values: Vec<&[u8]> = req
            .head()
            .headers()
            .filter(|(n, _)| n.eq_ignore_ascii_case("x-forwarded-for"))
            .map(|(_, v)| v)
            .collect();
        let trusted = |ip: IpAddr| geo.proxies.iter().any(|p| p.contains(ip));
        forwarded_addr(
            SocketAddr::new(addr, 0),
            &values,
            &trusted,
            geo.proxy_recursive,
        )
        .map_or(addr, |a| a.ip())
    };
    let value = match &geo.ranges {
        Some(ranges) => {
            let v4 = match addr {
                IpAddr::V4(a) => a,
                IpAddr::V6(a) => a.to_ipv4_mapped().unwrap_or(Ipv4Addr::BROADCAST),
            };
            let n = u32::from(v4);
            let (h, low) = ((n >> 16) as u16, n as u16);
            ranges
                .get(&h)
                .and_then(|list| list.iter().find(|r| r.start <= low && low <= r.end))
                .map_or(geo.default.as_str(), |r| &*r.value)
        }
        None => geo
            .networks
            .iter()
            .filter(|(net, _)| net.contains(addr))
            .max_by_key(|(net, _)| net.bits())
            .map_or(geo.default.as_str(), |(_, value)| value.as_str()),
    };
    out.extend_from_slice(value.as_bytes());
}
