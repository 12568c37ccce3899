//! `ngx_http_geo_module`: `geo [$address] $variable { ... }` makes a variable whose value
//! depends on the client's address (the connection's, or one `set_real_ip_from` took) or on
//! `$address` (an address in a variable; one that is not an address reads as
//! 255.255.255.255, as in nginx). As nginx's:
//!
//! - entries are networks or addresses with a value; the most specific network that holds
//!   the address gives the value, whatever the order written; a network written twice
//!   takes its last value;
//! - `default` gives the value when none holds it (empty without one); `delete` takes a
//!   network out again; `include` reads entries from a file.
//!
//! `ranges`, `proxy` and `proxy_recursive` are refused: the first changes how every entry
//! reads and the others which address counts, so ignoring them could give a client the
//! value meant for another.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};

use crate::module::{self, Load, Module, Slot};
use crate::net::{parse_addr, Cidr};
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
    default: String,
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
        let targets: Vec<String> = http
            .iter()
            .filter(|d| d.name == "geo")
            .map(|d| target(d).unwrap_or("").to_owned())
            .collect();
        names.add_block_targets(me, targets);
        Ok(())
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
            default: String::new(),
        };
        for e in d.children() {
            let key = e.name.as_str();
            match (key, e.args.as_slice()) {
                ("ranges" | "proxy_recursive", []) | ("proxy", [_]) => {
                    return Err(ConfigError::at(
                        e,
                        format!(
                            "the \"{key}\" parameter of \"geo\" is not supported yet and cannot be ignored safely"
                        ),
                    ));
                }
                ("delete", [net]) => {
                    let net = network(e, &net.value)?;
                    geo.networks.retain(|(n, _)| !n.same_network(&net));
                }
                ("default", [value]) => geo.default = value.value.clone(),
                (_, [value]) => {
                    let net = network(e, key)?;
                    geo.networks.retain(|(n, _)| !n.same_network(&net));
                    geo.networks.push((net, value.value.clone()));
                }
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
            ..Handlers::NONE
        };
        &HANDLERS
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
    let value = geo
        .networks
        .iter()
        .filter(|(net, _)| net.contains(addr))
        .max_by_key(|(net, _)| net.bits())
        .map_or(&geo.default, |(_, value)| value);
    out.extend_from_slice(value.as_bytes());
}
