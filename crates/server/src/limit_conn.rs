//! `ngx_http_limit_conn_module`: `limit_conn_zone`, `limit_conn`, `limit_conn_status`,
//! `limit_conn_log_level`, `limit_conn_dry_run` and `$limit_conn_status`, in the preaccess
//! phase, as nginx's:
//!
//! - each key (the zone's key evaluated for the request; an empty one is not limited)
//!   counts the requests in progress with it, and a request that would take the count past
//!   the limit is refused (503 unless `limit_conn_status` says otherwise), logged at
//!   `limit_conn_log_level`;
//! - a request counts from its preaccess phase to its end (its response sent and logged);
//!   an HTTP/2 stream is a request of its own;
//! - with several `limit_conn`s a refusal by one lets go of the counts the others took;
//! - a request is limited once, whatever internal redirects it goes through.
//!
//! Zones are shared by every worker and kept across reloads as `limit_req`'s are
//! ([`crate::zone`]).

use std::collections::HashMap;
use std::sync::Arc;

use portcullis_config::{value, ConfigError, Directive};

use crate::module::{self, Finish, Load, Module, Slot};
use crate::request::{Access, Handlers, Request, Response};
use crate::vars::{Names, Template};
use crate::zone::{self, ByName, Limits, Named, Room, Zone};
use crate::Level;

pub(crate) struct LimitConnModule;

pub(crate) static MODULE: LimitConnModule = LimitConnModule;

/// A level's settings: its limits and how a refusal is answered, inherited by the levels
/// inside it unless they set their own.
type Conf = Limits<Limit>;

#[derive(Clone)]
struct Limit {
    zone: Arc<Named<ZoneDef>>,
    conn: u32,
}

/// What `limit_conn_zone` says: the key and the zone's state.
struct ZoneDef {
    key: Template,
    zone: Arc<Zone<Counts>>,
}

impl Module for LimitConnModule {
    fn name(&self) -> &'static str {
        "http_limit_conn_module"
    }

    fn declare(
        &self,
        _http: &[Directive],
        names: &mut Names,
        me: usize,
    ) -> Result<(), ConfigError> {
        names.add_fixed(me, &["limit_conn_status"]);
        Ok(())
    }

    fn load(&self) -> Box<dyn std::any::Any + Send + Sync> {
        Box::<ByName<ZoneDef>>::default()
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
        let zones = cx
            .state
            .downcast_mut::<ByName<ZoneDef>>()
            .expect("the module's own load state");
        match d.name.as_str() {
            "limit_conn_zone" => define_zone(d, zones, cx.names, cx.declared),
            "limit_conn" => {
                let zone = zones.get(d.arg(0));
                let c = module::edit::<Conf>(conf);
                if c.list.iter().any(|l| Arc::ptr_eq(&l.zone, &zone)) && !cx.first {
                    return Err(ConfigError::at(d, "\"limit_conn\" directive is duplicate"));
                }
                let conn = value::parse_number(d.arg(1))
                    .filter(|&n| n > 0)
                    .ok_or_else(|| {
                        ConfigError::at(
                            d,
                            format!("invalid number of connections \"{}\"", d.arg(1)),
                        )
                    })?;
                if conn > 65535 {
                    return Err(ConfigError::at(d, "connection limit must be less 65536"));
                }
                let limit = Limit {
                    zone,
                    conn: conn as u32,
                };
                c.push(d, limit, cx.first, |a, b| Arc::ptr_eq(&a.zone, &b.zone))
            }
            _ => module::edit::<Conf>(conf).setting(d).map(|_| ()),
        }
    }

    /// A zone named by `limit_conn` must be defined somewhere in `http`.
    fn finish(
        &self,
        conf: &mut Slot,
        _block: &[Directive],
        _cx: &mut Finish<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::get::<Conf>(conf);
        c.list.iter().try_for_each(|l| l.zone.check_defined())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        !module::get::<Conf>(conf).list.is_empty()
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            preaccess: Some(preaccess),
            variable: Some(variable),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// `limit_conn_zone key zone=name:size`.
fn define_zone(
    d: &Directive,
    zones: &mut ByName<ZoneDef>,
    names: &Names,
    declared: &mut zone::Declared,
) -> Result<(), ConfigError> {
    let key = Template::compile(d.arg(0), d, names)?;
    let mut zone = None;
    for a in &d.args[1..] {
        let v = a.value.as_str();
        if !v.starts_with("zone=") {
            return Err(ConfigError::at(d, format!("invalid parameter \"{v}\"")));
        }
        zone = Some(zone::parse_zone(d, v)?);
    }
    let Some((name, size)) = zone else {
        return Err(ConfigError::at(
            d,
            "\"limit_conn_zone\" must have \"zone\" parameter",
        ));
    };
    declared.zone(d, name, "limit_conn_zone")?;
    let named = zones.get(name);
    if let Some(def) = named.defined.get() {
        return Err(zone::redefined(d, name, size, &def.zone));
    }
    let zone = Zone::shared("limit_conn_zone", name, size, d.arg(0), || {
        Counts::new(name, size)
    })?;
    let _ = named.defined.set(ZoneDef { key, zone });
    Ok(())
}

/// `$limit_conn_status`'s values.
#[derive(Clone, Copy)]
enum Outcome {
    Passed,
    Rejected,
    RejectedDryRun,
}

/// What a request keeps of the module: how it was limited, and the counts it holds until
/// it ends.
#[derive(Default)]
struct ConnCtx {
    outcome: Option<Outcome>,
    /// The pass (internal redirects) that refused the request, and the status it sent.
    refused: Option<(u32, u16)>,
    held: Vec<Held>,
}

/// One count of a request in progress, given back when the request ends.
struct Held {
    zone: Arc<Zone<Counts>>,
    key: Box<[u8]>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.zone.lock().leave(&self.key);
    }
}

fn variable(
    req: &Request<'_>,
    _conf: &Slot,
    _var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&Response, u64)>,
) {
    let outcome = req.ctx::<ConnCtx>().and_then(|c| c.outcome);
    out.extend_from_slice(match outcome {
        None => return,
        Some(Outcome::Passed) => b"PASSED",
        Some(Outcome::Rejected) => b"REJECTED",
        Some(Outcome::RejectedDryRun) => b"REJECTED_DRY_RUN",
    });
}

fn preaccess(req: &mut Request<'_>, conf: &Slot) -> Access {
    if let Some(c) = req.ctx::<ConnCtx>().filter(|c| c.outcome.is_some()) {
        return crate::limit_req::again(c.refused, req.redirects());
    }
    let c = module::get::<Conf>(conf);
    for limit in c.list.iter() {
        let Some(def) = limit.zone.defined.get() else {
            continue;
        };
        let key = req.eval(&def.key);
        if key.is_empty() {
            continue;
        }
        if zone::too_long(|m| req.log(Level::Error, m), &key, &def.zone.key, 255) {
            continue;
        }
        req.ctx_mut::<ConnCtx>().outcome = Some(Outcome::Passed);
        let entered = def.zone.lock().enter(&key, limit.conn);
        match entered {
            Entered::Yes => req.ctx_mut::<ConnCtx>().held.push(Held {
                zone: def.zone.clone(),
                key: key.into(),
            }),
            refused => {
                let message = match refused {
                    Entered::Full => format!(
                        "ngx_slab_alloc() failed: no memory in limit_conn_zone \"{}\"",
                        def.zone.name
                    ),
                    _ => format!(
                        "limiting connections{} by zone \"{}\"",
                        if c.dry_run { ", dry run," } else { "" },
                        def.zone.name
                    ),
                };
                let level = match refused {
                    Entered::Full => Level::Crit,
                    _ => c.log_level,
                };
                req.log(level, &message);
                let pass = req.redirects();
                let ctx = req.ctx_mut::<ConnCtx>();
                ctx.held.clear();
                if c.dry_run {
                    ctx.outcome = Some(Outcome::RejectedDryRun);
                    return Access::Declined;
                }
                ctx.outcome = Some(Outcome::Rejected);
                ctx.refused = Some((pass, c.status));
                return Access::Denied {
                    status: c.status,
                    challenge: None,
                };
            }
        }
    }
    Access::Declined
}

/// Whether a request got in.
#[derive(PartialEq, Eq)]
enum Entered {
    Yes,
    /// The key is at its limit.
    AtLimit,
    /// No room for a new key.
    Full,
}

/// The requests in progress by key.
struct Counts {
    conns: HashMap<Box<[u8]>, u32>,
    room: Room,
}

/// The bytes a key's node takes in nginx's zone: its tree node and count, then the key.
fn node_size(key: &[u8]) -> usize {
    36 + key.len()
}

impl Counts {
    fn new(name: &str, size: usize) -> Counts {
        let mut room = Room::new(size);
        // What nginx takes from the zone first: its tree, and its log context.
        room.take(64);
        room.take(r#" in limit_conn_zone """#.len() + 1 + name.len());
        Counts {
            conns: HashMap::new(),
            room,
        }
    }

    fn enter(&mut self, key: &[u8], limit: u32) -> Entered {
        match self.conns.get_mut(key) {
            Some(n) if *n >= limit => Entered::AtLimit,
            Some(n) => {
                *n += 1;
                Entered::Yes
            }
            None if !self.room.take(node_size(key)) => Entered::Full,
            None => {
                self.conns.insert(key.into(), 1);
                Entered::Yes
            }
        }
    }

    fn leave(&mut self, key: &[u8]) {
        if let Some(n) = self.conns.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.conns.remove(key);
                self.room.free(node_size(key));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_counts_its_requests_in_progress() {
        let mut c = Counts::new("t", zone::MIN_ZONE);
        assert!(c.enter(b"a", 2) == Entered::Yes);
        assert!(c.enter(b"a", 2) == Entered::Yes);
        assert!(c.enter(b"a", 2) == Entered::AtLimit);
        assert!(c.enter(b"b", 2) == Entered::Yes);
        c.leave(b"a");
        assert!(c.enter(b"a", 2) == Entered::Yes);
        c.leave(b"a");
        c.leave(b"a");
        c.leave(b"b");
        assert!(c.conns.is_empty());
        // 64-byte nodes: seven pages, one for the tree's 64-byte chunk class and the log
        // context's 32; 64 chunks a page.
        let fits = (0..u32::MAX)
            .take_while(|i| c.enter(format!("{i:08}").as_bytes(), 1) == Entered::Yes)
            .count();
        assert_eq!(fits, 6 * 64 - 1);
    }
}
