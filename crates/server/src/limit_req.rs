//! `ngx_http_limit_req_module`: `limit_req_zone`, `limit_req` (`burst=`, `nodelay`,
//! `delay=`), `limit_req_status`, `limit_req_log_level`, `limit_req_dry_run` and
//! `$limit_req_status`, in the preaccess phase, with nginx's leaky bucket:
//!
//! - each key (the zone's key evaluated for the request; an empty one is not limited) has an
//!   excess, in thousandths of a request, that drains at the zone's rate and grows by one
//!   request with each request;
//! - a request whose excess would pass `burst` is refused (503 unless `limit_req_status`
//!   says otherwise), logged at `limit_req_log_level`; one whose excess passes `delay` (0
//!   by default, everything with `nodelay`) waits until the excess over it has drained,
//!   logged a level lower;
//! - with several `limit_req`s the request counts in every zone, the longest delay wins, and
//!   the first refusal ends it;
//! - a request is limited once, whatever internal redirects it goes through.
//!
//! A zone is shared by every worker and kept across reloads when its name and size stay (its
//! key must stay too, as nginx requires). It holds as many keys as nginx's shared memory of
//! that size does; a full zone makes room by dropping its least recently used key.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use portcullis_config::{value, ConfigError, Directive};

use crate::module::{self, Finish, Load, Module, Slot};
use crate::request::{Access, Handlers, Request, Response, Suspension};
use crate::vars::{Names, Template};
use crate::zone::{self, ByName, Limits, Named, Room, Zone};
use crate::Level;

pub(crate) struct LimitReqModule;

pub(crate) static MODULE: LimitReqModule = LimitReqModule;

/// A level's settings: its limits and how a refusal is answered, inherited by the levels
/// inside it unless they set their own.
type Conf = Limits<Limit>;

#[derive(Clone)]
struct Limit {
    zone: Arc<ZoneName>,
    /// In thousandths of a request, as nginx counts.
    burst: i64,
    delay: i64,
}

/// What `limit_req_zone` says: the key, the rate, and the zone's state.
struct ZoneDef {
    key: Template,
    /// Thousandths of a request per second.
    rate: i64,
    zone: Arc<Zone<Table>>,
}

/// A zone as this configuration names it.
type ZoneName = Named<ZoneDef>;

/// What one load of a configuration keeps: its zones by name.
type Loader = ByName<ZoneDef>;

impl Module for LimitReqModule {
    fn name(&self) -> &'static str {
        "http_limit_req_module"
    }

    fn declare(
        &self,
        _http: &[Directive],
        names: &mut Names,
        me: usize,
    ) -> Result<(), ConfigError> {
        names.add_fixed(me, &["limit_req_status"]);
        Ok(())
    }

    fn load(&self) -> Box<dyn std::any::Any + Send + Sync> {
        Box::<Loader>::default()
    }

    fn worker(
        &self,
        _loaded: &(dyn std::any::Any + Send + Sync),
        _opened: &crate::module::Opened,
    ) -> Box<dyn std::any::Any> {
        Box::<KeyBuffer>::default()
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
        let loader = cx
            .state
            .downcast_mut::<Loader>()
            .expect("the module's own load state");
        match d.name.as_str() {
            "limit_req_zone" => define_zone(d, loader, cx.names, cx.declared),
            "limit_req" => {
                let limit = limit(d, loader)?;
                let c = module::edit::<Conf>(conf);
                c.push(d, limit, cx.first, |a, b| Arc::ptr_eq(&a.zone, &b.zone))
            }
            _ => module::edit::<Conf>(conf).setting(d).map(|_| ()),
        }
    }

    /// A zone named by `limit_req` must be defined somewhere in `http`: known once the http
    /// level is read, which is before any server's end.
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

/// `limit_req_zone key zone=name:size rate=Nr/s|Nr/m`.
fn define_zone(
    d: &Directive,
    loader: &mut Loader,
    names: &Names,
    declared: &mut zone::Declared,
) -> Result<(), ConfigError> {
    let key = Template::compile(d.arg(0), d, names)?;
    let mut zone: Option<(&str, usize)> = None;
    let mut rate = 1000;
    for a in &d.args[1..] {
        let v = a.value.as_str();
        if v.starts_with("zone=") {
            zone = Some(zone::parse_zone(d, v)?);
        } else if let Some(r) = v.strip_prefix("rate=") {
            let (n, per) = match (r.strip_suffix("r/s"), r.strip_suffix("r/m")) {
                (Some(n), _) => (n, 1),
                (_, Some(n)) => (n, 60),
                _ => (r, 1),
            };
            let n = value::parse_number(n)
                .filter(|&n| n > 0)
                .ok_or_else(|| ConfigError::at(d, format!("invalid rate \"{v}\"")))?;
            rate = (n as i64).saturating_mul(1000) / per;
        } else {
            return Err(ConfigError::at(d, format!("invalid parameter \"{v}\"")));
        }
    }
    let Some((name, size)) = zone else {
        return Err(ConfigError::at(
            d,
            "\"limit_req_zone\" must have \"zone\" parameter",
        ));
    };
    declared.zone(d, name, "limit_req_zone")?;
    let slot = loader.get(name);
    if let Some(def) = slot.defined.get() {
        return Err(zone::redefined(d, name, size, &def.zone));
    }
    let zone = Zone::shared("limit_req", name, size, d.arg(0), || Table::new(name, size))?;
    let _ = slot.defined.set(ZoneDef { key, rate, zone });
    Ok(())
}

/// `limit_req zone=name [burst=N] [nodelay | delay=N]`.
fn limit(d: &Directive, loader: &mut Loader) -> Result<Limit, ConfigError> {
    let mut zone = None;
    let mut burst = 0;
    let mut delay = 0;
    for a in &d.args {
        let v = a.value.as_str();
        let positive = |n: &str, what: &str| {
            value::parse_number(n)
                .filter(|&n| n > 0 && n <= i64::MAX as u64 / 1000)
                .map(|n| n as i64)
                .ok_or_else(|| ConfigError::at(d, format!("invalid {what} value \"{v}\"")))
        };
        if let Some(name) = v.strip_prefix("zone=") {
            zone = Some(loader.get(name));
        } else if let Some(n) = v.strip_prefix("burst=") {
            burst = positive(n, "burst")?;
        } else if let Some(n) = v.strip_prefix("delay=") {
            delay = positive(n, "delay")?;
        } else if v == "nodelay" {
            delay = NO_DELAY;
        } else {
            return Err(ConfigError::at(d, format!("invalid parameter \"{v}\"")));
        }
    }
    let zone =
        zone.ok_or_else(|| ConfigError::at(d, "\"limit_req\" must have \"zone\" parameter"))?;
    Ok(Limit {
        zone,
        burst: burst * 1000,
        delay: delay.saturating_mul(1000),
    })
}

/// A worker's buffer for the keys of its requests.
#[derive(Default)]
struct KeyBuffer(std::cell::RefCell<Vec<u8>>);

/// `nodelay`: nginx's largest delay threshold.
const NO_DELAY: i64 = i64::MAX / 1000;

/// `$limit_req_status`'s values.
#[derive(Clone, Copy)]
enum Outcome {
    Passed,
    Delayed,
    Rejected,
    DelayedDryRun,
    RejectedDryRun,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "PASSED",
            Outcome::Delayed => "DELAYED",
            Outcome::Rejected => "REJECTED",
            Outcome::DelayedDryRun => "DELAYED_DRY_RUN",
            Outcome::RejectedDryRun => "REJECTED_DRY_RUN",
        }
    }
}

/// What a request keeps of the module: how it was limited, once decided.
#[derive(Default)]
struct LimitCtx {
    outcome: Option<Outcome>,
    /// The pass (internal redirects) that refused the request, and the status it sent.
    refused: Option<(u32, u16)>,
}

fn variable(
    req: &Request<'_>,
    _conf: &Slot,
    _var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&Response, u64)>,
) {
    if let Some(outcome) = req.ctx::<LimitCtx>().and_then(|c| c.outcome) {
        out.extend_from_slice(outcome.as_str().as_bytes());
    }
}

fn preaccess(req: &mut Request<'_>, conf: &Slot) -> Access {
    if let Some(c) = req.ctx::<LimitCtx>().filter(|c| c.outcome.is_some()) {
        return again(c.refused, req.redirects());
    }
    let c = module::get::<Conf>(conf);
    let now = now_ms();
    let last = c.list.len() - 1;
    // The zones that counted the request without deciding (nginx's `count`), held until
    // the one that decides has.
    let mut held: Vec<(&Limit, &ZoneDef, Vec<u8>)> = Vec::new();
    let mut decided: Option<(Found, &Limit, &ZoneDef)> = None;
    // The worker's buffer for keys, so that a request allocates none for its key.
    let buffer = req.worker_state::<KeyBuffer>();
    let mut key = buffer.map(|b| b.0.take()).unwrap_or_default();
    for (n, limit) in c.list.iter().enumerate() {
        let Some(def) = limit.zone.defined.get() else {
            continue;
        };
        key.clear();
        req.eval_into(&def.key, &mut key);
        if key.is_empty() {
            continue;
        }
        if zone::too_long(|m| req.log(Level::Error, m), &key, &def.zone.key, 65535) {
            continue;
        }
        let found = def
            .zone
            .lock()
            .lookup(&key, def.rate, limit.burst, n == last, now);
        decided = Some((found, limit, def));
        if found != Found::Again {
            break;
        }
        held.push((limit, def, key.clone()));
    }
    if let Some(b) = buffer {
        b.0.replace(key);
    }
    let Some((found, mut limit, def)) = decided else {
        return Access::Declined;
    };
    let dry_run = if c.dry_run { ", dry run" } else { "" };
    let mut excess = match found {
        Found::Passed(excess) => excess,
        Found::Again => 0,
        Found::Busy(_) | Found::Full => {
            if let Found::Busy(excess) = found {
                req.log(
                    c.log_level,
                    &format!(
                        "limiting requests{dry_run}, excess: {}.{:03} by zone \"{}\"",
                        excess / 1000,
                        excess % 1000,
                        limit.zone.name
                    ),
                );
            } else {
                req.log(
                    Level::Alert,
                    &format!(
                        "could not allocate node in limit_req zone \"{}\"",
                        limit.zone.name
                    ),
                );
            }
            for (_, def, key) in &held {
                def.zone.lock().release(key);
            }
            return match record(req, c, Outcome::Rejected) {
                Outcome::Rejected => {
                    let pass = req.redirects();
                    req.ctx_mut::<LimitCtx>().refused = Some((pass, c.status));
                    Access::Denied {
                        status: c.status,
                        challenge: None,
                    }
                }
                _ => Access::Declined,
            };
        }
    };
    // Each zone that held the request counts it now; the longest delay wins.
    let mut max_delay = delay_ms(excess, limit, def);
    for (l, d, key) in held.iter().rev() {
        let counted = d.zone.lock().account(key, d.rate, now_ms());
        let delay = delay_ms(counted, l, d);
        if delay > max_delay {
            (max_delay, excess, limit) = (delay, counted, l);
        }
    }
    if max_delay == 0 {
        record(req, c, Outcome::Passed);
        return Access::Declined;
    }
    req.log(
        lower(c.log_level),
        &format!(
            "delaying request{dry_run}, excess: {}.{:03}, by zone \"{}\"",
            excess / 1000,
            excess % 1000,
            limit.zone.name
        ),
    );
    match record(req, c, Outcome::Delayed) {
        Outcome::Delayed => Access::Wait(Box::new(Delay(Duration::from_millis(max_delay)))),
        _ => Access::Declined,
    }
}

/// The preaccess phase of a request whose limits were already decided: nginx decides once
/// per request, so a later pass (an internal redirect, error_page's among them) goes on. But
/// the phases also run again from the start after a wait (an `auth_request` on the way to the
/// error page), and then the pass that refused must refuse again, or the request would reach
/// the content the limit kept it from.
pub(crate) fn again(refused: Option<(u32, u16)>, pass: u32) -> Access {
    match refused {
        Some((at, status)) if at == pass => Access::Denied {
            status,
            challenge: None,
        },
        _ => Access::Declined,
    }
}

/// Records the request's outcome for `$limit_req_status` and for the phases' next run: its
/// dry-run form under `limit_req_dry_run`, which lets every request through at once.
fn record(req: &mut Request<'_>, c: &Conf, outcome: Outcome) -> Outcome {
    let outcome = match (outcome, c.dry_run) {
        (Outcome::Rejected, true) => Outcome::RejectedDryRun,
        (Outcome::Delayed, true) => Outcome::DelayedDryRun,
        (o, _) => o,
    };
    req.ctx_mut::<LimitCtx>().outcome = Some(outcome);
    outcome
}

/// The log level of a delay: one below that of a refusal, as nginx's.
fn lower(level: Level) -> Level {
    match level {
        Level::Error => Level::Warn,
        Level::Warn => Level::Notice,
        _ => Level::Info,
    }
}

/// How long a request with `excess` waits in `limit`'s zone: until the excess over the
/// limit's `delay` has drained.
fn delay_ms(excess: i64, limit: &Limit, def: &ZoneDef) -> u64 {
    if excess <= limit.delay {
        return 0;
    }
    ((excess - limit.delay).saturating_mul(1000) / def.rate) as u64
}

/// A delayed request's wait, before the phases run again.
struct Delay(Duration);

impl Suspension for Delay {
    fn resume<'r>(
        self: Box<Self>,
        _req: &'r mut Request<'_>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'r>> {
        Box::pin(tokio::time::sleep(self.0))
    }
}

/// A clock in milliseconds that only goes forward, as nginx's limits count time
/// (`ngx_current_msec`, the monotonic clock): setting the system's clock neither lifts nor
/// jams a limit. It starts far from zero, as nginx's does, since a key held by a zone that
/// did not decide counts as last seen at zero (see [`Table::lookup`]).
fn now_ms() -> i64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    const FAR_FROM_ZERO: i64 = 1 << 40;
    let start = START.get_or_init(std::time::Instant::now);
    FAR_FROM_ZERO + start.elapsed().as_millis() as i64
}

/// What a zone said of a request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Found {
    /// Counted, with this excess.
    Passed(i64),
    /// Held: counted once the zone that decides has (only for a zone that is not the last).
    Again,
    /// Over the burst, with this excess.
    Busy(i64),
    /// No room for a new key.
    Full,
}

/// The keys of a zone and their buckets, in nginx's order of last use: an index by key (a
/// tree, as nginx's, which no choice of keys can make slow), and the nodes in a list from
/// the most recently used to the least.
struct Table {
    index: BTreeMap<Box<[u8]>, usize>,
    /// The nodes by place; a place whose key was dropped waits in `vacant`.
    nodes: Vec<Node>,
    vacant: Vec<usize>,
    /// The most and the least recently used node.
    newest: usize,
    oldest: usize,
    room: Room,
}

/// No node: the end of the list.
const NONE: usize = usize::MAX;

struct Node {
    key: Box<[u8]>,
    /// Thousandths of a request over the rate.
    excess: i64,
    /// When it was last counted, in milliseconds.
    last: i64,
    /// Requests holding it (see [`Found::Again`]): not to be dropped meanwhile.
    count: u32,
    /// The neighbours in the list: more and less recently used.
    newer: usize,
    older: usize,
}

/// How the excess of a key looks after `ms` milliseconds of draining at `rate`, and one
/// more request: clocks that went back count as no time, or one millisecond past a minute.
fn drained(excess: i64, rate: i64, ms: i64) -> (i64, i64) {
    let ms = match ms {
        ms if ms < -60000 => 1,
        ms if ms < 0 => 0,
        ms => ms,
    };
    ((excess - rate.saturating_mul(ms) / 1000 + 1000).max(0), ms)
}

impl Table {
    fn new(name: &str, size: usize) -> Table {
        let mut room = Room::new(size);
        // What nginx takes from the zone first: its tree and queue, and its log context.
        room.take(80);
        room.take(r#" in limit_req zone """#.len() + 1 + name.len());
        Table {
            index: BTreeMap::new(),
            nodes: Vec::new(),
            vacant: Vec::new(),
            newest: NONE,
            oldest: NONE,
            room,
        }
    }

    /// Takes node `i` out of the list.
    fn unlink(&mut self, i: usize) {
        let (newer, older) = (self.nodes[i].newer, self.nodes[i].older);
        match newer {
            NONE => self.newest = older,
            n => self.nodes[n].older = older,
        }
        match older {
            NONE => self.oldest = newer,
            o => self.nodes[o].newer = newer,
        }
    }

    /// Puts node `i` at the head of the list, as the most recently used.
    fn push_newest(&mut self, i: usize) {
        self.nodes[i].newer = NONE;
        self.nodes[i].older = self.newest;
        match self.newest {
            NONE => self.oldest = i,
            n => self.nodes[n].newer = i,
        }
        self.newest = i;
    }

    /// nginx's `ngx_http_limit_req_lookup`: the key's bucket with this request, counted
    /// when `account` (the last zone of the request), else held.
    fn lookup(&mut self, key: &[u8], rate: i64, burst: i64, account: bool, now: i64) -> Found {
        if let Some(&i) = self.index.get(key) {
            if self.newest != i {
                self.unlink(i);
                self.push_newest(i);
            }
            let node = &mut self.nodes[i];
            let (excess, ms) = drained(node.excess, rate, now - node.last);
            if excess > burst {
                return Found::Busy(excess);
            }
            if account {
                node.excess = excess;
                if ms != 0 {
                    node.last = now;
                }
                return Found::Passed(excess);
            }
            node.count += 1;
            return Found::Again;
        }
        self.expire(false, rate, now);
        if !self.room.take(node_size(key)) {
            self.expire(true, rate, now);
            if !self.room.take(node_size(key)) {
                return Found::Full;
            }
        }
        let node = Node {
            key: key.into(),
            excess: 0,
            last: if account { now } else { 0 },
            count: u32::from(!account),
            newer: NONE,
            older: NONE,
        };
        let i = match self.vacant.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.index.insert(key.into(), i);
        self.push_newest(i);
        if account {
            Found::Passed(0)
        } else {
            Found::Again
        }
    }

    /// nginx's `ngx_http_limit_req_account` for one held key: counts the request now.
    fn account(&mut self, key: &[u8], rate: i64, now: i64) -> i64 {
        let Some(&i) = self.index.get(key) else {
            return 0;
        };
        let node = &mut self.nodes[i];
        let (excess, ms) = drained(node.excess, rate, now - node.last);
        if ms != 0 {
            node.last = now;
        }
        node.excess = excess;
        node.count = node.count.saturating_sub(1);
        excess
    }

    /// Lets go of a held key without counting the request.
    fn release(&mut self, key: &[u8]) {
        if let Some(&i) = self.index.get(key) {
            let node = &mut self.nodes[i];
            node.count = node.count.saturating_sub(1);
        }
    }

    /// nginx's `ngx_http_limit_req_expire`: drops up to two of the least recently used
    /// keys that are idle (a minute unseen, their excess drained), and with `force` the
    /// least recently used one first, whatever its state. A held key stops it.
    fn expire(&mut self, force: bool, rate: i64, now: i64) {
        let mut n = u32::from(!force);
        while n < 3 && self.oldest != NONE {
            let i = self.oldest;
            let node = &self.nodes[i];
            if node.count != 0 {
                return;
            }
            if n != 0 {
                let ms = (now - node.last).abs();
                if ms < 60000 || node.excess - rate.saturating_mul(ms) / 1000 > 0 {
                    return;
                }
            }
            n += 1;
            self.unlink(i);
            let key = std::mem::take(&mut self.nodes[i].key);
            self.index.remove(&key);
            self.room.free(node_size(&key));
            self.vacant.push(i);
        }
    }
}

/// The bytes a key's node takes in nginx's zone: its tree node and bucket, then the key.
fn node_size(key: &[u8]) -> usize {
    80 + key.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1000;

    #[test]
    fn a_bucket_drains_at_the_rate_and_refuses_past_the_burst() {
        let mut t = Table::new("t", zone::MIN_ZONE);
        // 1 r/s, burst 2.
        let (rate, burst) = (1000, 2000);
        let t0 = 1_000_000;
        assert_eq!(t.lookup(b"k", rate, burst, true, t0), Found::Passed(0));
        assert_eq!(t.lookup(b"k", rate, burst, true, t0), Found::Passed(1000));
        assert_eq!(t.lookup(b"k", rate, burst, true, t0), Found::Passed(2000));
        assert_eq!(t.lookup(b"k", rate, burst, true, t0), Found::Busy(3000));
        // Half a second drains half a request: not enough room yet. A second is.
        assert_eq!(
            t.lookup(b"k", rate, burst, true, t0 + SECOND / 2),
            Found::Busy(2500)
        );
        assert_eq!(
            t.lookup(b"k", rate, burst, true, t0 + SECOND),
            Found::Passed(2000)
        );
        assert_eq!(
            t.lookup(b"k", rate, burst, true, t0 + 10 * SECOND),
            Found::Passed(0)
        );
        // Another key has its own bucket.
        assert_eq!(t.lookup(b"j", rate, burst, true, t0), Found::Passed(0));
    }

    #[test]
    fn a_full_zone_drops_its_least_recently_used_key() {
        // Eight pages: the 128-byte chunks of six, less the tree's own.
        let fits = 6 * 32 - 1;
        let mut t = Table::new("t", zone::MIN_ZONE);
        for i in 0..=fits {
            let key = format!("{}", i % 10 + 100 * (i / 10));
            assert!(matches!(
                t.lookup(key.as_bytes(), 1, 0, true, 0),
                Found::Passed(_)
            ));
        }
        assert_eq!(t.index.len(), fits);
        assert!(!t.index.contains_key(&b"0"[..]));
    }
}
