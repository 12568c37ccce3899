//! nginx's proxy cache: `proxy_cache_path` and the `proxy_cache_*` directives.
//!
//! A cache is a directory in nginx's layout (`levels=1:2` puts the entry of key md5 `...c29b`
//! in `b/2c/`), each entry one file in nginx's format: a fixed header (validity, dates, the
//! ETag, the Vary names), the key line, the upstream's response head and its body. An entry
//! is written to a temporary file beside its place and renamed there only once its body is
//! whole, so a crash never leaves a truncated entry to be served. The keys zone (what nginx
//! keeps in shared memory: uses, size, last access) is shared by every worker and kept
//! across reloads; a manager thread removes entries unused for `inactive` and trims the
//! cache to `max_size` ([`store`]).
//!
//! A request looks its key up before the exchange ([`Job::lookup`]); a fresh entry is sent
//! from the file, as an upstream response ([`Hit`]). An expired one may be revalidated with
//! the upstream or served stale when the upstream fails (`proxy_cache_use_stale`). A
//! response the rules let cache ([`rules`]) is written while it is sent ([`fill::Fill`]).

pub(crate) mod fill;
mod rules;
pub(crate) mod store;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use md5::{Digest, Md5};
use portcullis_config::{value, ConfigError, Directive};
use portcullis_http::ResponseHead;

use crate::files::Conditions;
use crate::vars::{Names, Template};
pub(crate) use store::{CachePath, Entry};

/// The caches of a configuration (`proxy_cache_path`), by zone name.
pub(crate) type Caches = HashMap<String, Arc<CachePath>>;

/// `$upstream_cache_status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Miss,
    Bypass,
    Expired,
    Stale,
    Updating,
    Revalidated,
    Hit,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Miss => "MISS",
            Status::Bypass => "BYPASS",
            Status::Expired => "EXPIRED",
            Status::Stale => "STALE",
            Status::Updating => "UPDATING",
            Status::Revalidated => "REVALIDATED",
            Status::Hit => "HIT",
        }
    }
}

/// Conditions of `proxy_cache_use_stale`, as bits (those of `proxy_next_upstream`, and
/// `updating`).
pub(crate) mod stale {
    pub use super::super::settings::next::*;
    pub const UPDATING: u16 = 1 << 12;
}

/// `proxy_ignore_headers`, as bits.
pub(crate) mod ignore {
    pub const X_ACCEL_EXPIRES: u8 = 1;
    pub const EXPIRES: u8 = 1 << 1;
    pub const CACHE_CONTROL: u8 = 1 << 2;
    pub const SET_COOKIE: u8 = 1 << 3;
    pub const VARY: u8 = 1 << 4;
    pub const X_ACCEL_CHARSET: u8 = 1 << 5;
    pub const X_ACCEL_REDIRECT: u8 = 1 << 6;
    pub const X_ACCEL_LIMIT_RATE: u8 = 1 << 7;
}

/// Methods `proxy_cache_methods` can name, as bits.
mod method {
    pub const GET: u8 = 1;
    pub const HEAD: u8 = 1 << 1;
    pub const POST: u8 = 1 << 2;

    /// The bit of a method, 0 for one the cache never keeps.
    pub fn bit(method: &str) -> u8 {
        match method {
            "GET" => GET,
            "HEAD" => HEAD,
            "POST" => POST,
            _ => 0,
        }
    }
}

/// One `proxy_cache_valid`: the statuses (none: any) and how long they stay fresh.
#[derive(Clone)]
pub(crate) struct Valid {
    /// Empty: `any`.
    codes: Vec<u16>,
    time: Duration,
}

/// The `proxy_cache_*` settings of a level, inherited as nginx merges them.
#[derive(Clone)]
pub(crate) struct CacheSettings {
    /// `proxy_cache zone`; `None`: off.
    pub zone: Option<Arc<CachePath>>,
    /// `proxy_cache_key`; `None`: `$scheme$proxy_host$request_uri`.
    pub key: Option<Template>,
    pub valid: Vec<Valid>,
    methods: u8,
    pub min_uses: u32,
    pub bypass: Vec<Template>,
    pub no_cache: Vec<Template>,
    pub use_stale: u16,
    pub revalidate: bool,
    pub convert_head: bool,
    pub ignore: u8,
    /// `proxy_cache_lock`, `_timeout`, `_age`.
    pub lock: bool,
    pub lock_timeout: Duration,
    pub lock_age: Duration,
    pub background_update: bool,
    /// `proxy_cache_max_range_offset`; `None`: no limit.
    pub max_range_offset: Option<u64>,
}

impl CacheSettings {
    /// Whether the cache may keep the response to a request with `method`: the location
    /// caches, and the method is one of `proxy_cache_methods`.
    pub(crate) fn caches(&self, method: &str) -> bool {
        self.zone.is_some() && self.methods & method::bit(method) != 0
    }

    /// nginx's `u->cacheable` as known before the cache is looked at: the response to the
    /// request may be stored, so the upstream is asked without the client's `Range` and
    /// conditions (`DROPPED`); otherwise it gets them, as without a cache.
    pub(crate) fn cacheable(&self, method: &str, range: Option<&[u8]>) -> bool {
        self.caches(method) && !range_too_far(range, self.max_range_offset)
    }
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            zone: None,
            key: None,
            valid: Vec::new(),
            methods: method::GET | method::HEAD,
            min_uses: 1,
            bypass: Vec::new(),
            no_cache: Vec::new(),
            use_stale: 0,
            revalidate: false,
            convert_head: true,
            ignore: 0,
            lock: false,
            lock_timeout: Duration::from_secs(5),
            lock_age: Duration::from_secs(5),
            background_update: false,
            max_range_offset: None,
        }
    }
}

/// Request headers the proxy does not pass when a location caches, as nginx's cache headers
/// set: a response is stored whole and for every client, and the conditions of a
/// revalidation are the cache's own.
pub(crate) const DROPPED: &[&str] = &[
    "If-Modified-Since",
    "If-Unmodified-Since",
    "If-None-Match",
    "If-Match",
    "Range",
    "If-Range",
];

fn invalid(d: &Directive, i: usize) -> ConfigError {
    ConfigError::at(
        d,
        format!("invalid value \"{}\" in \"{}\" directive", d.arg(i), d.name),
    )
}

/// Applies one `proxy_cache*`, `proxy_no_cache` or `proxy_ignore_headers` directive; false
/// for another directive. `first`: the first of its name at this level (a list replaces
/// the inherited one).
pub(crate) fn directive(
    s: &mut CacheSettings,
    d: &Directive,
    first: bool,
    caches: &Caches,
    vars: &Names,
) -> Result<bool, ConfigError> {
    let templates = |d: &Directive| -> Result<Vec<Template>, ConfigError> {
        d.args
            .iter()
            .map(|a| Template::compile(&a.value, d, vars))
            .collect()
    };
    match d.name.as_str() {
        "proxy_cache" => {
            s.zone = match d.arg(0) {
                "off" => None,
                name if name.contains('$') => {
                    return Err(ConfigError::at(
                        d,
                        "variables in \"proxy_cache\" are not supported",
                    ))
                }
                name => Some(caches.get(name).cloned().ok_or_else(|| {
                    ConfigError::at(d, format!("\"proxy_cache\" zone \"{name}\" is unknown"))
                })?),
            }
        }
        "proxy_cache_key" => s.key = Some(Template::compile(d.arg(0), d, vars)?),
        "proxy_cache_valid" => {
            if first {
                s.valid.clear();
            }
            let last = d.args.len() - 1;
            let time = value::parse_time(d.arg(last)).ok_or_else(|| {
                ConfigError::at(d, format!("invalid time value \"{}\"", d.arg(last)))
            })?;
            let mut codes = Vec::new();
            let mut any = false;
            if last == 0 {
                codes = vec![200, 301, 302];
            }
            for (i, a) in d.args[..last].iter().enumerate() {
                if a.value == "any" {
                    any = true;
                    continue;
                }
                match a.value.parse::<u16>() {
                    Ok(c) if (100..=599).contains(&c) => codes.push(c),
                    _ => {
                        return Err(ConfigError::at(
                            d,
                            format!("invalid status \"{}\"", d.arg(i)),
                        ))
                    }
                }
            }
            if any {
                codes.clear();
            }
            s.valid.push(Valid { codes, time });
        }
        "proxy_cache_methods" => {
            let mut bits = if first {
                method::GET | method::HEAD
            } else {
                s.methods
            };
            for (i, a) in d.args.iter().enumerate() {
                bits |= match a.value.to_ascii_uppercase().as_str() {
                    "GET" => method::GET,
                    "HEAD" => method::HEAD,
                    "POST" => method::POST,
                    _ => return Err(invalid(d, i)),
                };
            }
            s.methods = bits;
        }
        "proxy_cache_min_uses" => {
            s.min_uses = u32::try_from(value::number(d, 0)?).map_err(|_| invalid(d, 0))?
        }
        "proxy_cache_bypass" => {
            if first {
                s.bypass.clear();
            }
            s.bypass.extend(templates(d)?);
        }
        "proxy_no_cache" => {
            if first {
                s.no_cache.clear();
            }
            s.no_cache.extend(templates(d)?);
        }
        "proxy_cache_use_stale" => {
            // Lines at one level add up, as nginx's bitmask.
            let mut bits = if first { 0 } else { s.use_stale };
            for (i, a) in d.args.iter().enumerate() {
                bits |= match a.value.as_str() {
                    "off" if d.args.len() == 1 => 0,
                    "error" => stale::ERROR,
                    "timeout" => stale::TIMEOUT,
                    "invalid_header" => stale::INVALID_HEADER,
                    "updating" => stale::UPDATING,
                    "http_500" => stale::HTTP_500,
                    "http_502" => stale::HTTP_502,
                    "http_503" => stale::HTTP_503,
                    "http_504" => stale::HTTP_504,
                    "http_403" => stale::HTTP_403,
                    "http_404" => stale::HTTP_404,
                    "http_429" => stale::HTTP_429,
                    _ => return Err(invalid(d, i)),
                };
            }
            s.use_stale = bits;
        }
        "proxy_cache_revalidate" => s.revalidate = value::flag(d, 0)?,
        "proxy_cache_lock" => s.lock = value::flag(d, 0)?,
        "proxy_cache_lock_timeout" | "proxy_cache_lock_age" => {
            let t = value::parse_time(d.arg(0)).ok_or_else(|| {
                ConfigError::at(d, format!("invalid time value \"{}\"", d.arg(0)))
            })?;
            if d.name == "proxy_cache_lock_timeout" {
                s.lock_timeout = t;
            } else {
                s.lock_age = t;
            }
        }
        "proxy_cache_background_update" => s.background_update = value::flag(d, 0)?,
        "proxy_cache_max_range_offset" => s.max_range_offset = Some(value::offset(d, 0)?),
        "proxy_cache_convert_head" => s.convert_head = value::flag(d, 0)?,
        "proxy_ignore_headers" => {
            let mut bits = if first { 0 } else { s.ignore };
            for (i, a) in d.args.iter().enumerate() {
                let v = a.value.as_str();
                bits |= match v {
                    _ if v.eq_ignore_ascii_case("X-Accel-Expires") => ignore::X_ACCEL_EXPIRES,
                    _ if v.eq_ignore_ascii_case("Expires") => ignore::EXPIRES,
                    _ if v.eq_ignore_ascii_case("Cache-Control") => ignore::CACHE_CONTROL,
                    _ if v.eq_ignore_ascii_case("Set-Cookie") => ignore::SET_COOKIE,
                    _ if v.eq_ignore_ascii_case("Vary") => ignore::VARY,
                    _ if v.eq_ignore_ascii_case("X-Accel-Charset") => ignore::X_ACCEL_CHARSET,
                    _ if v.eq_ignore_ascii_case("X-Accel-Redirect") => ignore::X_ACCEL_REDIRECT,
                    _ if v.eq_ignore_ascii_case("X-Accel-Limit-Rate") => ignore::X_ACCEL_LIMIT_RATE,
                    // Acted on by no part of this server: nothing to ignore.
                    _ if v.eq_ignore_ascii_case("X-Accel-Buffering") => 0,
                    _ => return Err(invalid(d, i)),
                };
            }
            s.ignore = bits;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The http level's `proxy_cache_path`s (`directive`: or `fastcgi_cache_path`, ...), by
/// zone name: each a directory and a keys zone, kept across a reload when the zone keeps its
/// name, size and path. Read before the level's other directives, since a `proxy_cache`
/// may name a zone defined below it; the directories become `user`'s, the workers', as
/// nginx makes the paths it creates.
/// `declared` holds the configuration's zones and directories of every module.
pub(crate) fn paths(
    http: &[Directive],
    directive: &'static str,
    (prefix, user): (&std::path::Path, Option<libc::uid_t>),
    declared: &mut crate::zone::Declared,
) -> Result<Caches, ConfigError> {
    let mut caches = Caches::new();
    for d in http.iter().filter(|d| d.name == directive) {
        declared.path(d, &prefix.join(d.arg(0)))?;
        let zone = d.args.iter().find_map(|a| {
            let (name, _) = a.value.strip_prefix("keys_zone=")?.split_once(':')?;
            Some(name)
        });
        if let Some(name) = zone {
            declared.zone(d, name, directive)?;
            if caches.contains_key(name) {
                return Err(ConfigError::at(d, format!("duplicate zone \"{name}\"")));
            }
        }
        let cache = store::CachePath::configure(d, prefix)?;
        if let Some(uid) = user {
            cache.give_to(uid);
        }
        caches.insert(cache.name.clone(), cache);
    }
    Ok(caches)
}

/// What the location's cache does for one request: its key, and what the lookup found.
pub(crate) struct Job {
    pub zone: Arc<CachePath>,
    /// The location's proxy settings, whose `cache` steers the job (shared, not copied).
    proxy: Arc<super::ProxySettings>,
    /// The key as evaluated, and its md5 (the entry's name).
    pub key: Vec<u8>,
    pub md5: [u8; 16],
    /// The client's method was HEAD: the upstream gets a GET whose body is stored, and the
    /// client gets the head alone.
    pub client_head: bool,
    /// An expired entry, for a revalidation or to be served stale.
    pub stale: Option<Entry>,
    /// The lookup went to the entry of the request's variant (the entry of the key varies
    /// by other request headers).
    pub variant: Option<[u8; 16]>,
    pub status: Status,
    /// The entry this request updates (nginx's `updating`: the others serve it stale, or
    /// wait with `proxy_cache_lock`), released when the job ends.
    holds: Option<[u8; 16]>,
    /// The response is fetched after the stale entry was sent (`proxy_cache_background_update`):
    /// it is stored, and no client sees it.
    pub background: bool,
    /// The lock was waited for in vain: the response is not stored.
    pub no_store: bool,
}

/// What the cache asks of the request it works for.
pub(crate) struct Ask<'r> {
    pub head: &'r portcullis_http::RequestHead,
    /// A template's value for the request.
    pub eval: &'r dyn Fn(&Template) -> Vec<u8>,
    /// Writes a line at `crit` to the request's error log.
    pub log: &'r dyn Fn(&str),
    /// The worker's copies of entries.
    pub hot: &'r std::cell::RefCell<store::Hot>,
}

/// What a lookup found.
pub(crate) enum Found {
    /// An entry to send: fresh, or stale while another request updates it.
    Send(Entry),
    /// An expired entry to send, then update (`proxy_cache_background_update`).
    SendThenUpdate(Entry),
    /// Another request is filling the entry (`proxy_cache_lock`): look again later.
    Wait,
    /// Ask the upstream.
    Upstream,
}

impl Job {
    /// The `proxy_cache_*` settings of the request's location.
    pub(crate) fn settings(&self) -> &CacheSettings {
        &self.proxy.cache
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Some(name) = self.holds.take() {
            self.zone.updated(&name);
        }
    }
}

impl Job {
    /// The cache's job for `req`, or `None` when the location does not cache or the
    /// method is not one it caches.
    pub(crate) fn new(
        ask: &Ask<'_>,
        settings: &Arc<super::ProxySettings>,
        key: Vec<u8>,
    ) -> Option<Job> {
        let c = &settings.cache;
        let zone = c.zone.clone()?;
        let m = method::bit(ask.head.method_str());
        if c.methods & m == 0 {
            return None;
        }
        let md5: [u8; 16] = Md5::digest(&key).into();
        let bypass = c.bypass.iter().any(|t| truthy(&(ask.eval)(t)));
        Some(Job {
            zone,
            proxy: settings.clone(),
            key,
            md5,
            client_head: m == method::HEAD && c.convert_head,
            stale: None,
            variant: None,
            holds: None,
            background: false,
            no_store: false,
            status: if bypass { Status::Bypass } else { Status::Miss },
        })
    }

    /// Looks the key up, as nginx's cache does: a fresh entry is sent; an expired one is
    /// updated by one request at a time, the others sending it stale when allowed
    /// (`proxy_cache_use_stale updating`, a response's `stale-while-revalidate`); with
    /// `proxy_cache_lock` a missing one is filled by one request while the others wait.
    pub(crate) fn lookup(&mut self, ask: &Ask<'_>) -> Found {
        // A background update was looked up already: it asks the upstream.
        if self.status == Status::Bypass || self.background {
            return Found::Upstream;
        }
        let found = self.zone.open(&self.md5, &self.key, ask).and_then(|entry| {
            match entry.other_variant(ask.head) {
                Some(variant) => {
                    self.variant = Some(variant);
                    self.zone.open(&variant, &self.key, ask)
                }
                None => Some(entry),
            }
        });
        let name = self.variant.unwrap_or(self.md5);
        let proxy = self.proxy.clone();
        let s = &proxy.cache;
        let Some(entry) = found else {
            self.status = Status::Miss;
            if !s.lock || self.holds.is_some() {
                return Found::Upstream;
            }
            if self.zone.update(&name, Some(s.lock_age)) {
                self.holds = Some(name);
                return Found::Upstream;
            }
            return Found::Wait;
        };
        if entry.is_fresh() {
            self.status = Status::Hit;
            return Found::Send(entry);
        }
        let may_be_stale = s.use_stale & stale::UPDATING != 0 || entry.updating_grace();
        if self.holds.is_none() && self.zone.update(&name, None) {
            self.holds = Some(name);
            if may_be_stale && s.background_update && !self.background {
                self.status = Status::Stale;
                return Found::SendThenUpdate(entry);
            }
        } else if may_be_stale {
            self.status = Status::Updating;
            return Found::Send(entry);
        }
        self.status = Status::Expired;
        self.stale = Some(entry);
        Found::Upstream
    }

    /// Whether the stale entry may answer for a failure of kind `bit` (`proxy_cache_use_stale`
    /// or the entry's `stale-if-error`).
    pub(crate) fn stale_for(&self, bit: u16) -> bool {
        self.stale.as_ref().is_some_and(|e| {
            self.settings().use_stale & bit != 0 || (bit != stale::UPDATING && e.error_grace())
        })
    }

    /// The conditional fields a revalidation adds to the upstream request.
    pub(crate) fn revalidation(&self) -> Option<Vec<u8>> {
        if !self.settings().revalidate {
            return None;
        }
        self.stale.as_ref()?.conditions()
    }

    /// The entry to write for `head`, if the rules and the settings let it be stored;
    /// `no_body`: the response to a HEAD, stored with none.
    pub(crate) fn store(
        &mut self,
        ask: &Ask<'_>,
        head: &ResponseHead,
        no_body: bool,
    ) -> Option<store::Store> {
        if self.no_store
            || self
                .settings()
                .no_cache
                .iter()
                .any(|t| truthy(&(ask.eval)(t)))
            || range_too_far(ask.head.header("range"), self.settings().max_range_offset)
        {
            return None;
        }
        let fresh = rules::freshness(head, self.settings())?;
        if !self.zone.used_enough(&self.md5, self.settings().min_uses) {
            return None;
        }
        let vary = rules::vary(head, self.settings().ignore)?;
        let variant = store::variant(&self.md5, &vary, ask.head);
        // A first variant takes the key's own entry; another one its own.
        let name = match self.variant {
            Some(v) => v,
            None => self.md5,
        };
        self.zone.create(
            (name, &self.key),
            head,
            &fresh,
            (&vary, variant),
            no_body,
            ask.log,
        )
    }

    /// Makes the stale entry fresh again after the upstream's 304 (`proxy_cache_revalidate`).
    pub(crate) fn revalidated(&mut self, head: &ResponseHead) -> Option<Entry> {
        let mut entry = self.stale.take()?;
        // The 304's own time, else the stored response's, else proxy_cache_valid's; a 304
        // that says not to store is not listened to, as in nginx.
        let s = self.settings();
        let valid = rules::named(head, s)
            .ok()
            .flatten()
            .or_else(|| rules::named(entry.head(), s).ok().flatten())
            .or_else(|| rules::valid_for(entry.status(), s));
        // Without a time the entry stays expired, and is sent all the same, as nginx's.
        if let Some(valid) = valid {
            let name = self.variant.unwrap_or(self.md5);
            if entry.refresh(&valid) {
                self.zone.changed(&name);
            }
        }
        self.status = Status::Revalidated;
        Some(entry)
    }
}

/// nginx's `ngx_http_upstream_cache_check_range`: whether the client's `Range` starts at or
/// past `proxy_cache_max_range_offset` (a suffix range counts as past it), so that the
/// response it fetches is not stored.
fn range_too_far(range: Option<&[u8]>, max: Option<u64>) -> bool {
    let (Some(range), Some(max)) = (range, max) else {
        return false;
    };
    if max == 0 {
        return true;
    }
    if range.len() < 7 || !range[..6].eq_ignore_ascii_case(b"bytes=") {
        return false;
    }
    let rest = &range[6..];
    let rest = &rest[rest.iter().take_while(|&&b| b == b' ').count()..];
    if rest.first() == Some(&b'-') {
        return true;
    }
    let digits = &rest[..rest.iter().take_while(|b| b.is_ascii_digit()).count()];
    std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse::<u64>().ok())
        .is_some_and(|offset| offset >= max)
}

/// nginx's not-modified filter on a response the cache answers or stores: the head to show
/// the client instead of `head` (a 304 without the body's fields), or `Err(412)`; `Ok(None)`
/// when the response goes out as it is.
pub(crate) fn not_modified(
    c: &Conditions<'_>,
    head: &ResponseHead,
) -> Result<Option<ResponseHead>, u16> {
    use crate::files::Plan;
    if head.status() != 200
        || (c.if_match.is_none()
            && c.if_none_match.is_none()
            && c.if_modified_since.is_none()
            && c.if_unmodified_since.is_none())
    {
        return Ok(None);
    }
    let (mtime, etag) = validators(head);
    match crate::files::preconditions(mtime, etag.as_deref(), true, c) {
        Some(Plan::NotModified) => {
            let mut raw = b"HTTP/1.1 304 Not Modified\r\n".to_vec();
            for f in head.fields() {
                let body_field = [
                    "content-type",
                    "content-length",
                    "accept-ranges",
                    "content-encoding",
                ]
                .iter()
                .any(|n| f.name.eq_ignore_ascii_case(n.as_bytes()))
                    || f.known == portcullis_http::KnownName::TransferEncoding;
                if !body_field {
                    raw.extend_from_slice(f.line);
                }
            }
            raw.extend_from_slice(b"\r\n");
            let limit = raw.len();
            let mut raw = bytes::BytesMut::from(&raw[..]);
            Ok(portcullis_http::parse_response_head(&mut raw, limit)
                .ok()
                .flatten())
        }
        Some(_) => Err(412),
        None => Ok(None),
    }
}

/// What nginx's range filter makes of a response the cache answers or stores.
pub(crate) enum Cut {
    Whole,
    /// One range: the head to show (a 206), where the range starts and its length, and its
    /// `Content-Range`.
    Part {
        head: ResponseHead,
        start: u64,
        len: u64,
        range: Vec<u8>,
    },
    /// Several (a cached response only): the head of a `multipart/byteranges` 206.
    Parts {
        head: ResponseHead,
        multipart: crate::files::Multipart,
    },
    /// 416.
    Unsatisfiable,
}

/// The request's `Range` (in `c`; `method` its method) on a response of `size` bytes, as
/// nginx cuts a proxied response whose upstream sent `Accept-Ranges` (or any, `force`:
/// `proxy_force_ranges`) and that goes out as it is (`plain`, not recoded): one range, or
/// several of a cached one (`multipart`).
pub(crate) fn cut(
    c: &Conditions<'_>,
    (method, force): (&str, bool),
    plain: bool,
    head: &ResponseHead,
    (size, multipart): (u64, bool),
) -> Cut {
    use crate::files::Plan;
    if c.range.is_none()
        || head.status() != 200
        || (!force && head.header("accept-ranges").is_none())
        || !matches!(method, "GET" | "HEAD")
        || !plain
    {
        return Cut::Whole;
    }
    let (mtime, etag) = validators(head);
    match crate::files::ranges(size, mtime, etag.as_deref(), c) {
        Plan::Partial {
            start,
            end_inclusive,
        } => {
            let len = end_inclusive - start + 1;
            match with_fields(head, &[("Content-Length", len.to_string())]) {
                Some(head) => Cut::Part {
                    head,
                    start,
                    len,
                    range: crate::files::content_range(start, end_inclusive, size).into_bytes(),
                },
                None => Cut::Whole,
            }
        }
        Plan::Multipart { ranges, boundary } if multipart => {
            let ty = head
                .header("content-type")
                .map(|t| String::from_utf8_lossy(t).into_owned())
                .unwrap_or_default();
            let m = crate::files::multipart_parts(&ranges, &boundary, &ty, size);
            let fields = [
                ("Content-Type", m.content_type.clone()),
                ("Content-Length", m.content_length.to_string()),
            ];
            match with_fields(head, &fields) {
                Some(head) => Cut::Parts { head, multipart: m },
                None => Cut::Whole,
            }
        }
        Plan::Unsatisfiable => Cut::Unsatisfiable,
        _ => Cut::Whole,
    }
}

/// `head` as a 206 with `fields` in place of its own of those names (added when it has
/// none), without `Accept-Ranges`.
fn with_fields(head: &ResponseHead, fields: &[(&str, String)]) -> Option<ResponseHead> {
    let mut raw = b"HTTP/1.1 206 Partial Content\r\n".to_vec();
    for (name, value) in fields {
        raw.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    for f in head.fields() {
        let replaced = fields
            .iter()
            .any(|(n, _)| f.name.eq_ignore_ascii_case(n.as_bytes()));
        if !replaced
            && !f.name.eq_ignore_ascii_case(b"accept-ranges")
            && f.known != portcullis_http::KnownName::TransferEncoding
        {
            raw.extend_from_slice(f.line);
        }
    }
    raw.extend_from_slice(b"\r\n");
    let limit = raw.len();
    let mut raw = bytes::BytesMut::from(&raw[..]);
    portcullis_http::parse_response_head(&mut raw, limit)
        .ok()
        .flatten()
}

/// The `Last-Modified` time and `ETag` of `head`, which conditions and `If-Range` compare.
fn validators(head: &ResponseHead) -> (Option<i64>, Option<String>) {
    let mtime = head
        .header("last-modified")
        .and_then(crate::files::parse_http_date)
        .map(crate::files::unix_secs);
    let etag = head
        .header("etag")
        .map(|e| String::from_utf8_lossy(e).into_owned());
    (mtime, etag)
}

/// A value that turns `proxy_cache_bypass` or `proxy_no_cache` on: not empty, not "0".
fn truthy(v: &[u8]) -> bool {
    !v.is_empty() && v != b"0"
}
