//! `ngx_http_charset_module`: naming a response's charset and recoding its body from one
//! charset to another, as nginx's charset filter does.
//!
//! - `charset name` adds `; charset=name` to the `Content-Type` of a response whose type,
//!   with no parameters, is one of `charset_types` (by default `text/html`, `text/xml`,
//!   `text/plain`, `text/vnd.wap.wml`, `application/javascript` and `application/rss+xml`;
//!   `*` for all); `charset off` (the default) stops it. No charset is named on a 301 or
//!   302 (old browsers took it for the next page's).
//! - `source_charset name` says which charset the server's own responses are in: when it
//!   differs from `charset`, the body is recoded through the `charset_map` between the two
//!   (one is needed for every such pair a level names, or the configuration is refused). A
//!   proxied response's own charset (`; charset=` of its type) is its source; it is recoded
//!   only with `override_charset on`, otherwise left as it is. An upstream's
//!   `X-Accel-Charset` names the charset to recode to, whatever `charset` says (unless
//!   `proxy_ignore_headers X-Accel-Charset`). `charset` and `source_charset` may be a
//!   variable.
//! - `charset_map a b { XX YY; ... }` (the http level) maps bytes of charset `a` to bytes
//!   of `b`, both ways: bytes below 0x80 map to themselves, others not listed become `?`.
//!   When `b` is `utf-8`, `YY` is a character's UTF-8 bytes; a character of a UTF-8 body
//!   that the map lacks becomes `&#N;`, invalid UTF-8 becomes `?`. Debian's
//!   `/etc/nginx/koi-utf`, `koi-win` and `win-utf` are such maps.
//!
//! A recoding between two single-byte charsets keeps the length (and ranges, and
//! `sendfile`'s place is taken by reading the file); one to or from UTF-8 takes the length
//! away. Neither touches `ETag` or `Last-Modified`, as nginx's filter does not. A body with
//! a `Content-Encoding` is not recoded, and then no charset is named.
//!
//! As nginx, the charsets the whole configuration names make one list: a name any level
//! gives is known to every other (an upstream's `X-Accel-Charset` or `; charset=`), spelt
//! as first given. One difference: a level with `charset off` and no `charset_map` at the
//! http level does not look at `X-Accel-Charset` (nginx does, when another level names the
//! charset).

use std::borrow::Cow;
use std::cell::RefCell;
use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use portcullis_config::{ConfigError, Directive};
use portcullis_http::ResponseHead;

use crate::encode::{Coder, Encode, HeadEdit, Outgoing, Stage};
use crate::module::{self, Finish, Load, Module, Slot, TypeList};
use crate::request::{Handlers, Request, Response};
use crate::vars::Template;
use crate::Level;

pub(crate) struct CharsetModule;

pub(crate) static MODULE: CharsetModule = CharsetModule;

/// nginx's `charset_types` when none is given.
const DEFAULT_TYPES: [&str; 6] = [
    "text/html",
    "text/xml",
    "text/plain",
    "text/vnd.wap.wml",
    "application/javascript",
    "application/rss+xml",
];

/// A charset as `charset` or `source_charset` gives it.
#[derive(Clone)]
enum Named {
    Off,
    /// As the configuration first spelled it.
    Name(Arc<str>),
    /// `$name`: the variable's value.
    Var(Template),
}

#[derive(Clone)]
struct CharsetConf {
    charset: Named,
    source: Named,
    override_charset: bool,
    types: TypeList,
    known: Arc<Charsets>,
}

impl Default for CharsetConf {
    fn default() -> Self {
        CharsetConf {
            charset: Named::Off,
            source: Named::Off,
            override_charset: false,
            types: TypeList::new(&DEFAULT_TYPES),
            known: Arc::default(),
        }
    }
}

/// The charsets a configuration names, and the `charset_map`s between them.
#[derive(Clone, Default)]
struct Charsets {
    names: Vec<Arc<str>>,
    maps: Vec<Arc<Map>>,
}

/// One `charset_map`: from charset `from` to charset `to` (places in [`Charsets::names`]).
struct Map {
    from: usize,
    to: usize,
    table: Table,
}

enum Table {
    /// Between two single-byte charsets: each byte's counterpart, there and back.
    Bytes {
        there: Box<[u8; 256]>,
        back: Box<[u8; 256]>,
    },
    /// From a single-byte charset to UTF-8: each byte's UTF-8 (its length, then up to
    /// three bytes), and back: the byte of each character below U+10000 the map names (0
    /// for none), by pages of 256 characters.
    Utf8 {
        there: Box<[[u8; 4]; 256]>,
        back: Vec<Option<Box<[u8; 256]>>>,
    },
}

/// Every charset the configuration names, in the order first named, as the configuration
/// spells it first: what a load of the configuration keeps, and each worker's copy.
#[derive(Clone, Default)]
struct AllNames(Vec<Arc<str>>);

impl AllNames {
    /// The name `name` is known by, whatever its case.
    fn find(&self, name: &[u8]) -> Option<&Arc<str>> {
        self.0
            .iter()
            .find(|n| n.as_bytes().eq_ignore_ascii_case(name))
    }

    /// The name `name` is known by, added when new.
    fn add(&mut self, name: &str) -> Arc<str> {
        if let Some(n) = self.find(name.as_bytes()) {
            return n.clone();
        }
        let n: Arc<str> = Arc::from(name);
        self.0.push(n.clone());
        n
    }
}

/// A worker's copy of the configuration's [`AllNames`].
struct WorkerNames(RefCell<Arc<AllNames>>);

impl Charsets {
    /// The place of the charset called `name`, whatever its case.
    fn find(&self, name: &[u8]) -> Option<usize> {
        self.names
            .iter()
            .position(|n| n.as_bytes().eq_ignore_ascii_case(name))
    }

    /// The place of `name`, added when new.
    fn add(&mut self, name: &str) -> usize {
        self.find(name.as_bytes()).unwrap_or_else(|| {
            self.names.push(Arc::from(name));
            self.names.len() - 1
        })
    }

    /// How a body goes from charset `src` to `dst`, if a map says.
    fn recode(&self, src: usize, dst: usize) -> Option<Recode> {
        self.maps.iter().find_map(|m| {
            let there = m.from == src && m.to == dst;
            if !(there || (m.from == dst && m.to == src)) {
                return None;
            }
            Some(match (&m.table, there) {
                (Table::Bytes { .. }, _) => Recode::Bytes(m.clone(), there),
                (Table::Utf8 { .. }, true) => Recode::ToUtf8(m.clone()),
                (Table::Utf8 { .. }, false) => Recode::FromUtf8(m.clone()),
            })
        })
    }
}

fn is_utf8(name: &str) -> bool {
    name.eq_ignore_ascii_case("utf-8")
}

impl Module for CharsetModule {
    fn name(&self) -> &'static str {
        "http_charset_module"
    }

    fn defaults(&self) -> Slot {
        Arc::new(CharsetConf::default())
    }

    fn load(&self) -> Box<dyn std::any::Any + Send + Sync> {
        Box::<AllNames>::default()
    }

    fn worker(
        &self,
        loaded: &(dyn std::any::Any + Send + Sync),
        _opened: &crate::module::Opened,
    ) -> Box<dyn std::any::Any> {
        let names = loaded
            .downcast_ref::<AllNames>()
            .cloned()
            .unwrap_or_default();
        Box::new(WorkerNames(RefCell::new(Arc::new(names))))
    }

    fn reload(
        &self,
        state: &dyn std::any::Any,
        loaded: &(dyn std::any::Any + Send + Sync),
        _opened: &crate::module::Opened,
    ) {
        if let (Some(w), Some(names)) = (
            state.downcast_ref::<WorkerNames>(),
            loaded.downcast_ref::<AllNames>(),
        ) {
            *w.0.borrow_mut() = Arc::new(names.clone());
        }
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let all = cx
            .state
            .downcast_mut::<AllNames>()
            .expect("the module's own load state");
        let c = module::edit::<CharsetConf>(conf);
        match d.name.as_str() {
            "charset" if d.arg(0) == "off" => c.charset = Named::Off,
            "charset" => c.charset = charset_of(c, d, cx.names, all)?,
            // `off` is no keyword here: it names a charset.
            "source_charset" => c.source = charset_of(c, d, cx.names, all)?,
            "override_charset" => c.override_charset = portcullis_config::value::flag(d, 0)?,
            "charset_map" => {
                all.add(d.arg(0));
                all.add(d.arg(1));
                charset_map(Arc::make_mut(&mut c.known), d)?
            }
            _ => c.types.add(d, cx.first),
        }
        Ok(())
    }

    /// Every pair of charsets a level recodes between needs a `charset_map`: known once the
    /// http level (where they all are) is read.
    fn finish(
        &self,
        conf: &mut Slot,
        _block: &[Directive],
        _cx: &mut Finish<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::get::<CharsetConf>(conf);
        let (Named::Name(dst), Named::Name(src)) = (&c.charset, &c.source) else {
            return Ok(());
        };
        let known = &c.known;
        let (Some(s), Some(t)) = (known.find(src.as_bytes()), known.find(dst.as_bytes())) else {
            return Ok(());
        };
        if s == t || known.recode(s, t).is_some() {
            return Ok(());
        }
        Err(ConfigError {
            message: format!("no \"charset_map\" between the charsets \"{src}\" and \"{dst}\""),
            span: None,
        })
    }

    /// An upstream's `X-Accel-Charset` may name any charset the configuration knows, even
    /// where `charset` is off.
    fn is_active(&self, conf: &Slot) -> bool {
        let c = module::get::<CharsetConf>(conf);
        !matches!(c.charset, Named::Off) || !c.known.names.is_empty()
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            header_filter: Some(header_filter),
            encode: Some(encode),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// The charset of `charset` or `source_charset` (not `off`), by the name the configuration
/// first gave it.
fn charset_of(
    c: &mut CharsetConf,
    d: &Directive,
    names: &crate::vars::Names,
    all: &mut AllNames,
) -> Result<Named, ConfigError> {
    let v = d.arg(0);
    if v.starts_with('$') {
        return Ok(Named::Var(Template::compile(v, d, names)?));
    }
    let name = all.add(v);
    Arc::make_mut(&mut c.known).add(&name);
    Ok(Named::Name(name))
}

/// `charset_map from to { byte byte; ... }`.
fn charset_map(known: &mut Charsets, d: &Directive) -> Result<(), ConfigError> {
    let (a, b) = (d.arg(0), d.arg(1));
    let from = known.add(a);
    let to = known.add(b);
    if from == to {
        return Err(ConfigError::at(
            d,
            format!("\"charset_map\" between the same charsets \"{a}\" and \"{b}\""),
        ));
    }
    let same = |m: &&Arc<Map>| (m.from, m.to) == (from, to) || (m.from, m.to) == (to, from);
    if known.maps.iter().any(|m| same(&m)) {
        return Err(ConfigError::at(
            d,
            format!("duplicate \"charset_map\" between \"{a}\" and \"{b}\""),
        ));
    }
    // nginx reads such a map's bytes as single bytes and then takes them for UTF-8.
    if is_utf8(a) {
        return Err(ConfigError::at(
            d,
            format!(
                "a \"charset_map\" from \"{a}\" is not supported: write it from \"{b}\" to \"{a}\""
            ),
        ));
    }
    let table = if is_utf8(b) {
        utf8_table(d)?
    } else {
        bytes_table(d)?
    };
    known.maps.push(Arc::new(Map { from, to, table }));
    Ok(())
}

/// nginx's `ngx_hextoi` of a whole value: hexadecimal digits, at least one.
fn hex(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 8 {
        return None;
    }
    u32::from_str_radix(s, 16)
        .ok()
        .filter(|_| s.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn invalid(e: &Directive, v: &str) -> ConfigError {
    ConfigError::at(e, format!("invalid value \"{v}\""))
}

/// A map entry's byte: `XX` (hexadecimal, at most `FF`).
fn byte(e: &Directive, v: &str) -> Result<u8, ConfigError> {
    hex(v)
        .and_then(|n| u8::try_from(n).ok())
        .ok_or_else(|| invalid(e, v))
}

fn bytes_table(d: &Directive) -> Result<Table, ConfigError> {
    let mut there = Box::new([b'?'; 256]);
    let mut back = Box::new([b'?'; 256]);
    for i in 0..128u8 {
        there[i as usize] = i;
        back[i as usize] = i;
    }
    for e in d.children() {
        let (src, dst) = (byte(e, &e.name)?, byte(e, e.arg(0))?);
        there[src as usize] = dst;
        back[dst as usize] = src;
    }
    Ok(Table::Bytes { there, back })
}

fn utf8_table(d: &Directive) -> Result<Table, ConfigError> {
    let mut there = Box::new([[1, b'?', 0, 0]; 256]);
    let mut back: Vec<Option<Box<[u8; 256]>>> = vec![None; 256];
    let mut ascii = Box::new([0u8; 256]);
    for i in 0..128u8 {
        there[i as usize] = [1, i, 0, 0];
        ascii[i as usize] = i;
    }
    back[0] = Some(ascii);
    for e in d.children() {
        let src = byte(e, &e.name)?;
        let v = e.arg(0);
        if v.is_empty() || v.len() / 2 > 3 || v.len() % 2 != 0 {
            return Err(invalid(e, v));
        }
        let mut entry = [0u8; 4];
        entry[0] = (v.len() / 2) as u8;
        for (k, pair) in v.as_bytes().chunks(2).enumerate() {
            let pair = std::str::from_utf8(pair).map_err(|_| invalid(e, v))?;
            entry[k + 1] = byte(e, pair).map_err(|_| invalid(e, v))?;
        }
        let (n, _) = utf8_decode(&entry[1..1 + entry[0] as usize]);
        if n > 0xffff {
            return Err(invalid(e, v));
        }
        there[src as usize] = entry;
        let page = back[(n >> 8) as usize].get_or_insert_with(|| Box::new([0; 256]));
        page[(n & 0xff) as usize] = src;
    }
    Ok(Table::Utf8 { there, back })
}

/// [`utf8_decode`]: the bytes are not UTF-8.
const INVALID: u32 = 0xffff_ffff;
/// [`utf8_decode`]: the bytes end in the middle of a character.
const INCOMPLETE: u32 = 0xffff_fffe;

/// nginx's `ngx_utf8_decode`: the character `s` starts with (`s` is not empty) and how many
/// bytes it takes; a byte that cannot start one takes one byte, a sequence broken by a byte
/// below 0x80 takes that byte too, an overlong one is invalid.
fn utf8_decode(s: &[u8]) -> (u32, usize) {
    let Some(&lead) = s.first() else {
        return (INCOMPLETE, 0);
    };
    let lead = u32::from(lead);
    let (mut u, valid, len) = match lead {
        0xf0.. => (lead & 0x07, 0xffff, 3),
        0xe0.. => (lead & 0x0f, 0x7ff, 2),
        0xc2.. => (lead & 0x1f, 0x7f, 1),
        _ => return (INVALID, 1),
    };
    if s.len() - 1 < len {
        return (INCOMPLETE, 0);
    }
    for (k, &b) in s[1..=len].iter().enumerate() {
        if b < 0x80 {
            return (INVALID, k + 2);
        }
        u = (u << 6) | u32::from(b & 0x3f);
    }
    (if u > valid { u } else { INVALID }, len + 1)
}

/// How a response's body is recoded.
#[derive(Clone)]
enum Recode {
    /// Byte for byte, through the map there (`true`) or back.
    Bytes(Arc<Map>, bool),
    ToUtf8(Arc<Map>),
    FromUtf8(Arc<Map>),
}

impl Recode {
    fn coder(self) -> Box<dyn Coder> {
        match self {
            Recode::Bytes(map, there) => Box::new(ByteMap { map, there }),
            Recode::ToUtf8(map) => Box::new(ToUtf8(map)),
            Recode::FromUtf8(map) => Box::new(FromUtf8 {
                map,
                carry: Vec::new(),
            }),
        }
    }
}

/// What the charset filter sees of a response.
struct Seen<'a> {
    /// Its `Content-Type`, whole.
    content_type: &'a str,
    /// A proxied response's `; charset=` (nginx's upstream module takes it out of the type):
    /// the type before it, and the charset.
    charset: Option<(&'a str, &'a str)>,
    /// An upstream's `X-Accel-Charset`.
    accel: Option<&'a [u8]>,
    /// It has a `Content-Encoding`.
    encoded: bool,
    status: u16,
}

impl<'a> Seen<'a> {
    fn own(resp: &'a Response) -> Option<Seen<'a>> {
        Some(Seen {
            content_type: resp.filtered_type()?,
            charset: None,
            accel: None,
            encoded: resp
                .header_value("Content-Encoding")
                .is_some_and(|e| !e.is_empty()),
            status: resp.filtered_status(),
        })
    }

    fn proxied(req: &Request<'_>, content_type: &'a str, head: &'a ResponseHead) -> Seen<'a> {
        let ignored = req.upstream_ignores() & crate::upstream::cache::ignore::X_ACCEL_CHARSET;
        Seen {
            content_type,
            charset: charset_param(content_type),
            accel: head
                .header("x-accel-charset")
                .filter(|v| ignored == 0 && !v.is_empty()),
            encoded: head
                .header("content-encoding")
                .is_some_and(|e| !e.is_empty()),
            status: head.status(),
        }
    }
}

/// nginx's `ngx_http_upstream_copy_content_type`: the first `charset=` parameter of a type,
/// found after a `;` and spaces, with the type before that `;`; one pair of quotes around
/// the value is dropped.
fn charset_param(t: &str) -> Option<(&str, &str)> {
    let b = t.as_bytes();
    let mut i = 0;
    while let Some(k) = b[i..].iter().position(|&c| c == b';') {
        let semicolon = i + k;
        let mut p = semicolon + 1;
        while b.get(p) == Some(&b' ') {
            p += 1;
        }
        i = p;
        if p == b.len() {
            return None;
        }
        if b.len() - p >= 8 && b[p..p + 8].eq_ignore_ascii_case(b"charset=") {
            let mut v = &t[p + 8..];
            v = v.strip_prefix('"').unwrap_or(v);
            v = v.strip_suffix('"').unwrap_or(v);
            return Some((&t[..semicolon], v));
        }
    }
    None
}

/// What the filter decides for a response.
#[derive(Default)]
struct Decision {
    /// The new `Content-Type`; `None` leaves it.
    content_type: Option<String>,
    recode: Option<Recode>,
    /// What nginx logs at `error` about it.
    complaint: Option<String>,
}

/// nginx's `ngx_http_charset_header_filter`.
fn decide(req: &Request<'_>, c: &CharsetConf, seen: &Seen<'_>) -> Decision {
    fn value<'c>(req: &Request<'_>, n: &'c Named) -> Option<Cow<'c, [u8]>> {
        match n {
            Named::Off => None,
            Named::Name(s) => Some(Cow::Borrowed(s.as_bytes())),
            Named::Var(t) => Some(Cow::Owned(req.eval(t))),
        }
    }
    // The charset to send; the list of every name only when a name must be looked up.
    let all = || {
        req.worker_state::<WorkerNames>()
            .map(|w| w.0.borrow().clone())
            .unwrap_or_default()
    };
    let mut names: Option<Arc<AllNames>> = None;
    let dst_name: Cow<'_, [u8]> = match seen.accel {
        Some(a) => {
            if names.get_or_insert_with(all).find(a).is_none() {
                return Decision {
                    complaint: Some(format!(
                        "unknown charset \"{}\" to override",
                        String::from_utf8_lossy(a)
                    )),
                    ..Decision::default()
                };
            }
            Cow::Borrowed(a)
        }
        None => {
            let Some(name) = value(req, &c.charset) else {
                return Decision::default();
            };
            let listed = match seen.charset {
                Some(_) => c.override_charset,
                // A type with parameters is none of `charset_types`, compared whole.
                None => {
                    !seen.content_type.contains(';')
                        && c.types
                            .matches(seen.content_type.trim().to_ascii_lowercase().as_bytes())
                }
            };
            if !listed {
                return Decision::default();
            }
            name
        }
    };
    // The charset the body is in.
    let src_name: Cow<'_, [u8]> = match seen.charset {
        Some((_, cs)) => Cow::Borrowed(cs.as_bytes()),
        None => match value(req, &c.source) {
            Some(s) => s,
            None => return named(seen, seen.content_type, &dst_name, None),
        },
    };
    let names = names.get_or_insert_with(all);
    let (src, dst) = (names.find(&src_name), names.find(&dst_name));
    let no_map = || Decision {
        complaint: Some(format!(
            "no \"charset_map\" between the charsets \"{}\" and \"{}\"",
            String::from_utf8_lossy(&src_name),
            String::from_utf8_lossy(&dst_name)
        )),
        ..Decision::default()
    };
    let (Some(src), Some(dst)) = (src, dst) else {
        // nginx compares the destination's length of both names.
        let same = src.is_none()
            && dst.is_none()
            && src_name.len() >= dst_name.len()
            && src_name[..dst_name.len()].eq_ignore_ascii_case(&dst_name);
        return match (same, seen.charset) {
            (false, _) => no_map(),
            // The type keeps its own charset parameter, and nothing is added.
            (true, Some(_)) => Decision::default(),
            (true, None) => named(seen, seen.content_type, &dst_name, None),
        };
    };
    let base = seen.charset.map_or(seen.content_type, |(t, _)| t);
    if Arc::ptr_eq(src, dst) {
        return named(seen, base, &dst_name, None);
    }
    if seen.encoded {
        return Decision::default();
    }
    // Every map is at the http level, which each level starts from.
    let known = &c.known;
    let recode = known
        .find(src.as_bytes())
        .zip(known.find(dst.as_bytes()))
        .and_then(|(s, t)| known.recode(s, t));
    match recode {
        Some(r) => named(seen, base, &dst_name, Some(r)),
        None => no_map(),
    }
}

/// The type `base` with `; charset=name` (but not on a 301 or 302), and the recoding.
fn named(seen: &Seen<'_>, base: &str, name: &[u8], recode: Option<Recode>) -> Decision {
    let content_type = if matches!(seen.status, 301 | 302) {
        base.to_owned()
    } else {
        format!("{base}; charset={}", String::from_utf8_lossy(name))
    };
    Decision {
        content_type: Some(content_type),
        recode,
        complaint: None,
    }
}

/// The decision the header filter made about a response of the server's own, for its body.
#[derive(Default)]
struct Decided(RefCell<Option<Option<Recode>>>);

/// The decision about a proxied response, made for its body (which is decided on first)
/// and taken by the header filter.
#[derive(Default)]
struct DecidedProxied(RefCell<Option<Decision>>);

fn header_filter(
    req: &Request<'_>,
    conf: &Slot,
    resp: &mut Response,
    upstream: Option<&ResponseHead>,
) {
    // A subrequest's response is the server's to read: its charset is left as it is.
    if req.is_subrequest() {
        return;
    }
    let c = module::get::<CharsetConf>(conf);
    let d = match upstream {
        Some(head) => {
            let Some(t) = resp.content_type.clone() else {
                return;
            };
            let decided = req.var_ctx::<DecidedProxied>().0.borrow_mut().take();
            decided.unwrap_or_else(|| decide(req, c, &Seen::proxied(req, &t, head)))
        }
        None => {
            let Some(seen) = Seen::own(resp) else {
                return;
            };
            let d = decide(req, c, &seen);
            // Only a source charset recodes a response of the server's own.
            if !matches!(c.source, Named::Off) {
                *req.var_ctx::<Decided>().0.borrow_mut() = Some(d.recode.clone());
            }
            d
        }
    };
    if let Some(complaint) = &d.complaint {
        req.log(Level::Error, complaint);
    }
    // A multipart range's parts were named as the whole file (`Request::whole_file_type`).
    let own_type = resp
        .filtered
        .as_ref()
        .is_none_or(|f| f.content_type.is_none());
    if let Some(t) = d.content_type.filter(|_| own_type) {
        resp.content_type = Some(Arc::from(t));
    }
}

/// The body's recoding: a proxied response's decided from its head; one of the server's
/// own as the header filter decided (its type now names the charset), or, asked before
/// the header filter (whether ranges can be served), decided the same way.
fn encode(req: &Request<'_>, conf: &Slot, out: &Outgoing<'_>) -> Encode {
    let c = module::get::<CharsetConf>(conf);
    // A body another module recodes first (`sub_filter`) is recoded from the same charset.
    let mut out = out;
    while let Outgoing::Recoded(inner) = out {
        out = inner;
    }
    let recode = match out {
        Outgoing::Proxied(head) => {
            let Some(t) = head.header("content-type") else {
                return Encode::default();
            };
            let t = String::from_utf8_lossy(t);
            let d = decide(req, c, &Seen::proxied(req, &t, head));
            let recode = d.recode.clone();
            *req.var_ctx::<DecidedProxied>().0.borrow_mut() = Some(d);
            recode
        }
        Outgoing::Own(resp) if !matches!(c.source, Named::Off) => {
            match req.var_ctx::<Decided>().0.borrow().as_ref() {
                Some(decided) => decided.clone(),
                None => Seen::own(resp).and_then(|seen| decide(req, c, &seen).recode),
            }
        }
        _ => None,
    };
    Encode {
        vary: false,
        coder: recode.map(Recode::coder),
    }
}

/// Recoding between two single-byte charsets.
struct ByteMap {
    map: Arc<Map>,
    there: bool,
}

impl Coder for ByteMap {
    fn code(&mut self, input: &[u8], out: &mut BytesMut) -> io::Result<()> {
        let Table::Bytes { there, back } = &self.map.table else {
            unreachable!("a map between single-byte charsets");
        };
        let table = if self.there { there } else { back };
        out.extend(input.iter().map(|&b| table[b as usize]));
        Ok(())
    }

    fn finish(&mut self, _out: &mut BytesMut) -> io::Result<()> {
        Ok(())
    }

    fn head(&self) -> HeadEdit {
        HeadEdit {
            keep_length: true,
            ..HeadEdit::default()
        }
    }

    fn stage(&self) -> Stage {
        Stage::Charset
    }
}

/// Recoding from a single-byte charset to UTF-8.
struct ToUtf8(Arc<Map>);

impl Coder for ToUtf8 {
    fn code(&mut self, input: &[u8], out: &mut BytesMut) -> io::Result<()> {
        let Table::Utf8 { there, .. } = &self.0.table else {
            unreachable!("a map to UTF-8");
        };
        out.reserve(input.len());
        for &b in input {
            let e = &there[b as usize];
            out.extend_from_slice(&e[1..1 + e[0] as usize]);
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut BytesMut) -> io::Result<()> {
        Ok(())
    }

    fn head(&self) -> HeadEdit {
        HeadEdit::default()
    }

    fn stage(&self) -> Stage {
        Stage::Charset
    }
}

/// Recoding from UTF-8 to a single-byte charset.
struct FromUtf8 {
    map: Arc<Map>,
    /// The start of a character the last piece ended in.
    carry: Vec<u8>,
}

impl Coder for FromUtf8 {
    fn code(&mut self, input: &[u8], out: &mut BytesMut) -> io::Result<()> {
        let Table::Utf8 { back, .. } = &self.map.table else {
            unreachable!("a map to UTF-8");
        };
        let joined;
        let data = if self.carry.is_empty() {
            input
        } else {
            self.carry.extend_from_slice(input);
            joined = std::mem::take(&mut self.carry);
            &joined[..]
        };
        out.reserve(data.len());
        let mut i = 0;
        while i < data.len() {
            let b = data[i];
            if b < 0x80 {
                out.extend_from_slice(&[b]);
                i += 1;
                continue;
            }
            let (n, used) = utf8_decode(&data[i..]);
            if n == INCOMPLETE {
                self.carry = data[i..].to_vec();
                break;
            }
            i += used;
            if n < 0x10000 {
                let c = back[(n >> 8) as usize]
                    .as_ref()
                    .map_or(0, |p| p[(n & 0xff) as usize]);
                if c != 0 {
                    out.extend_from_slice(&[c]);
                    continue;
                }
            }
            if n > 0x10ffff {
                out.extend_from_slice(b"?");
            } else {
                out.extend_from_slice(format!("&#{n};").as_bytes());
            }
        }
        Ok(())
    }

    /// A character the body ends in the middle of is dropped, as nginx drops it.
    fn finish(&mut self, _out: &mut BytesMut) -> io::Result<()> {
        self.carry.clear();
        Ok(())
    }

    fn head(&self) -> HeadEdit {
        HeadEdit::default()
    }

    fn stage(&self) -> Stage {
        Stage::Charset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_decoded_as_nginx_decodes_it() {
        assert_eq!(utf8_decode("я".as_bytes()), (0x44f, 2));
        assert_eq!(utf8_decode("€x".as_bytes()), (0x20ac, 3));
        assert_eq!(utf8_decode("😀".as_bytes()), (0x1f600, 4));
        // A continuation byte, or an overlong lead, is one invalid byte.
        assert_eq!(utf8_decode(b"\x80a"), (INVALID, 1));
        assert_eq!(utf8_decode(b"\xc1\x81"), (INVALID, 1));
        // A sequence broken by ASCII takes the ASCII byte with it.
        assert_eq!(utf8_decode(b"\xe2\x82A"), (INVALID, 3));
        // Overlong: invalid, all its bytes taken.
        assert_eq!(utf8_decode(b"\xe0\x80\xaf"), (INVALID, 3));
        assert_eq!(utf8_decode(b"\xe2\x82"), (INCOMPLETE, 0));
    }

    #[test]
    fn charset_parameters_found_as_nginx_finds_them() {
        assert_eq!(
            charset_param("text/html; charset=koi8-r"),
            Some(("text/html", "koi8-r"))
        );
        assert_eq!(
            charset_param("text/html;q=1;  CHARSET=\"utf-8\""),
            Some(("text/html;q=1", "utf-8"))
        );
        assert_eq!(charset_param("text/html; q=1"), None);
        assert_eq!(charset_param("text/html;"), None);
        assert_eq!(charset_param("text/html"), None);
    }

    fn map(body: &str) -> Charsets {
        let mut known = Charsets::default();
        charset_map(&mut known, &parsed(body)).expect("a valid map");
        known
    }

    /// `charset_map koi8-r utf-8 { body }`, as the parser gives it.
    fn parsed(body: &str) -> Directive {
        let text = format!("events {{}}\nhttp {{\ncharset_map koi8-r utf-8 {{ {body} }}\n}}\n");
        let path = std::env::temp_dir().join("t.conf");
        let loaded = portcullis_config::load_str(&text, &path, &Default::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let http = loaded.directives.iter().find(|d| d.name == "http").unwrap();
        http.children()[0].clone()
    }

    fn through(coder: &mut dyn Coder, pieces: &[&[u8]]) -> Vec<u8> {
        let mut out = BytesMut::new();
        for p in pieces {
            coder.code(p, &mut out).unwrap();
        }
        coder.finish(&mut out).unwrap();
        out.to_vec()
    }

    #[test]
    fn utf8_recoded_both_ways_whatever_the_pieces() {
        let known = map("C1 D0B0; D1 D18F; 80 E282AC;");
        let to = known.recode(0, 1).unwrap();
        let from = known.recode(1, 0).unwrap();
        assert_eq!(
            through(&mut *to.coder(), &[b"a\xc1\xd1\x80\xff"]),
            "aая€?".as_bytes()
        );
        let text = "aя€ж😀\u{ffff}".as_bytes();
        for cut in 0..text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(
                through(&mut *from.clone().coder(), &[a, b]),
                b"a\xd1\x80&#1078;&#128512;&#65535;",
                "cut at {cut}"
            );
        }
        // Invalid bytes are `?`; a character the body ends in is dropped.
        assert_eq!(
            through(&mut *from.coder(), &[b"\x80x\xe2\x82Ay\xe2\x82"]),
            b"?x?y"
        );
    }

    #[test]
    fn bad_maps_are_refused_at_their_line() {
        for (body, message) in [
            ("C1 D0B0D0B0;", "invalid value \"D0B0D0B0\""),
            ("C1 41;", "invalid value \"41\""),
            ("C1 D0B;", "invalid value \"D0B\""),
            ("1C1 D0B0;", "invalid value \"1C1\""),
            ("G1 D0B0;", "invalid value \"G1\""),
        ] {
            let e = charset_map(&mut Charsets::default(), &parsed(body))
                .err()
                .unwrap_or_else(|| panic!("{body} accepted"));
            assert_eq!(e.message, message);
            assert!(e.span.is_some(), "{body}: no place");
        }
    }
}
