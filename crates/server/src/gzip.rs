//! Compression, as nginx's three modules and the core's settings that they share:
//!
//! - `ngx_http_gzip_module`: `gzip`, `gzip_types`, `gzip_comp_level`, `gzip_min_length`,
//!   `gzip_buffers`, `gzip_window`, `gzip_hash`, `postpone_gzipping`, `gzip_no_buffer`. A
//!   response is compressed on its way out, whoever made it (a file, `return`, an error page,
//!   an upstream), when its status is 200, 403 or 404, it has no `Content-Encoding`, its
//!   length is unknown or at least `gzip_min_length`, its type is one of `gzip_types`
//!   (`text/html` always), and the client takes gzip (below). It loses its `Content-Length`
//!   and `Accept-Ranges` (a `Range` is not served), its `ETag` becomes weak, and it gains
//!   `Content-Encoding: gzip`;
//! - `ngx_http_gzip_static_module`: `gzip_static on|always` serves `file.gz` in place of
//!   `file` (with `file`'s type, and `.gz`'s validators, ranges and conditions);
//! - `ngx_http_gunzip_module`: `gunzip on` decompresses a gzip response for a client that
//!   does not take gzip;
//! - the core's `gzip_vary` (`Vary: Accept-Encoding` on every response these modules
//!   looked at), `gzip_http_version`, `gzip_proxied` (which responses to requests with
//!   `Via` are compressed) and `gzip_disable` (by `User-Agent`, `msie6`).
//!
//! Whether a client takes gzip is nginx's `ngx_http_gzip_ok`, quirks included: the first
//! `Accept-Encoding` names `gzip` as a token, with a `q` that is not zero (nginx adds the
//! digits of a `q` rather than reading them as a fraction), the request is the main one, of
//! at least `gzip_http_version`, and not refused by `gzip_proxied` or `gzip_disable`.
//!
//! A body known whole and at most a megabyte (a file, a `return`, an error page) is
//! compressed at once by libdeflate, which at the same level compresses as zlib does, or a
//! little better, in about two thirds of zlib's time; a body that comes in pieces (an
//! upstream's, a larger file) is compressed as it comes by zlib-rs (through flate2). Each
//! worker keeps and reuses its compressors, whose state is a few hundred kilobytes.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::sync::Arc;

use bytes::BytesMut;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use portcullis_config::{value, ConfigError, Directive};
use portcullis_http::Method;

use crate::encode::{Coder, Encode, Etag, HeadEdit, Outgoing, Stage};
use crate::files::Lookup;
use crate::module::{self, Load, Module, Slot, TypeList};
use crate::request::{Handlers, Request, Step};

pub(crate) struct GzipModule;

pub(crate) static MODULE: GzipModule = GzipModule;

/// The core's directives these modules read.
const CORE: [&str; 4] = [
    "gzip_vary",
    "gzip_http_version",
    "gzip_proxied",
    "gzip_disable",
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Static {
    Off,
    On,
    Always,
}

// `gzip_proxied`'s flags, as nginx's.
const PROXIED_OFF: u16 = 1 << 0;
const PROXIED_EXPIRED: u16 = 1 << 1;
const PROXIED_NO_CACHE: u16 = 1 << 2;
const PROXIED_NO_STORE: u16 = 1 << 3;
const PROXIED_PRIVATE: u16 = 1 << 4;
const PROXIED_NO_LM: u16 = 1 << 5;
const PROXIED_NO_ETAG: u16 = 1 << 6;
const PROXIED_AUTH: u16 = 1 << 7;
const PROXIED_ANY: u16 = 1 << 8;

#[derive(Clone)]
struct Conf {
    gzip: bool,
    types: TypeList,
    level: u32,
    min_length: u64,
    /// `gzip_window` as zlib's window bits.
    window_bits: u8,
    static_: Static,
    gunzip: bool,
    vary: bool,
    /// `gzip_http_version 1.0`.
    http10: bool,
    proxied: u16,
    disable: Arc<Vec<regex::bytes::Regex>>,
    disable_msie6: bool,
}

impl Default for Conf {
    fn default() -> Self {
        Conf {
            gzip: false,
            types: TypeList::new(&["text/html"]),
            level: 1,
            min_length: 20,
            window_bits: 15,
            static_: Static::Off,
            gunzip: false,
            vary: false,
            http10: false,
            proxied: PROXIED_OFF,
            disable: Arc::default(),
            disable_msie6: false,
        }
    }
}

/// What the modules know of a request: `gzip_static` found a `.gz` file, so the response
/// varies by `Accept-Encoding` whatever is sent.
#[derive(Default)]
struct Ctx {
    vary: bool,
}

impl Module for GzipModule {
    fn name(&self) -> &'static str {
        "http_gzip_module"
    }

    fn owns(&self, directive: &str) -> bool {
        [
            "http_gzip_module",
            "http_gzip_static_module",
            "http_gunzip_module",
        ]
        .iter()
        .any(|m| module::in_table(m, directive))
            || CORE.contains(&directive)
    }

    fn declare(
        &self,
        _http: &[Directive],
        names: &mut crate::vars::Names,
        me: usize,
    ) -> Result<(), ConfigError> {
        names.add_fixed(me, &["gzip_ratio"]);
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
        let invalid = |what: &str| {
            ConfigError::at(
                d,
                format!(
                    "invalid value \"{}\" in \"{}\" directive{what}",
                    d.arg(0),
                    d.name
                ),
            )
        };
        match d.name.as_str() {
            "gzip" => c.gzip = d.arg(0) == "on",
            "gunzip" => c.gunzip = d.arg(0) == "on",
            "gzip_vary" => c.vary = d.arg(0) == "on",
            "gzip_static" => {
                c.static_ = match d.arg(0) {
                    "off" => Static::Off,
                    "on" => Static::On,
                    "always" => Static::Always,
                    _ => return Err(invalid(", it must be \"off\", \"on\" or \"always\"")),
                }
            }
            "gzip_comp_level" => {
                c.level = match d.arg(0).parse::<u32>() {
                    Ok(n @ 1..=9) => n,
                    Ok(_) => {
                        return Err(ConfigError::at(
                            d,
                            "\"gzip_comp_level\" must be between 1 and 9".to_string(),
                        ))
                    }
                    Err(_) => return Err(invalid("")),
                }
            }
            "gzip_min_length" => c.min_length = value::size(d, 0)?,
            "gzip_window" => c.window_bits = power_of_two(d, 512, 32 * 1024)?,
            "gzip_hash" => {
                power_of_two(d, 512, 128 * 1024)?;
            }
            // The buffers nginx compresses into: here the pieces are as large as the input
            // gives, so the sizes are only checked.
            "gzip_buffers" | "gunzip_buffers" => {
                value::number(d, 0)?;
                value::size(d, 1)?;
            }
            "postpone_gzipping" => {
                value::size(d, 0)?;
            }
            "gzip_types" => c.types.add(d, cx.first),
            "gzip_http_version" => {
                c.http10 = match d.arg(0) {
                    "1.0" => true,
                    "1.1" => false,
                    _ => return Err(invalid("")),
                }
            }
            "gzip_proxied" => {
                let mut flags = if cx.first { 0 } else { c.proxied };
                for a in &d.args {
                    flags |= match a.value.as_str() {
                        "off" => PROXIED_OFF,
                        "expired" => PROXIED_EXPIRED,
                        "no-cache" => PROXIED_NO_CACHE,
                        "no-store" => PROXIED_NO_STORE,
                        "private" => PROXIED_PRIVATE,
                        "no_last_modified" => PROXIED_NO_LM,
                        "no_etag" => PROXIED_NO_ETAG,
                        "auth" => PROXIED_AUTH,
                        "any" => PROXIED_ANY,
                        v => {
                            return Err(ConfigError::at(
                                d,
                                format!("invalid value \"{v}\" in \"gzip_proxied\" directive"),
                            ))
                        }
                    };
                }
                c.proxied = flags;
            }
            "gzip_disable" => {
                let mut list = if cx.first {
                    Vec::new()
                } else {
                    c.disable.as_ref().clone()
                };
                if cx.first {
                    c.disable_msie6 = false;
                }
                for a in &d.args {
                    match a.value.as_str() {
                        "msie6" => c.disable_msie6 = true,
                        // nginx's degradation is not built into Debian's nginx either.
                        "degradation" => {
                            return Err(ConfigError::at(
                                d,
                                "\"gzip_disable degradation\" is not supported".to_string(),
                            ))
                        }
                        re => list.push(crate::location::bytes_regex(re, true).map_err(|e| {
                            ConfigError::at(d, format!("invalid regex \"{re}\": {e}"))
                        })?),
                    }
                }
                c.disable = Arc::new(list);
            }
            // `gzip_no_buffer` is a no-op in nginx too.
            _ => {}
        }
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        let c = module::get::<Conf>(conf);
        c.gzip || c.gunzip || c.static_ != Static::Off
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            static_content: Some(gzip_static),
            encode: Some(encode),
            variable: Some(variable),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// `$gzip_ratio`: the response's bytes before compression over those after.
fn variable(
    req: &Request<'_>,
    _conf: &Slot,
    _var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&crate::request::Response, u64)>,
) {
    if let Some(text) = req.var_ctx::<Ratio>().text() {
        out.extend_from_slice(text.as_bytes());
    }
}

/// `gzip_window` and `gzip_hash`: a power of two between `min` and `max`, as its log2.
fn power_of_two(d: &Directive, min: u64, max: u64) -> Result<u8, ConfigError> {
    let v = portcullis_config::value::parse_size(d.arg(0))
        .filter(|v| v.is_power_of_two() && (min..=max).contains(v))
        .ok_or_else(|| {
            ConfigError::at(
                d,
                format!(
                    "must be power of 2 between {min} and {max} in \"{}\"",
                    d.name
                ),
            )
        })?;
    Ok(v.trailing_zeros() as u8)
}

/// The body filters' decision: `gunzip` for a gzip response the client cannot take, `gzip`
/// for one it can, `Vary` where either looked at the response (and `gzip_vary` is on).
fn encode(req: &Request<'_>, conf: &Slot, out: &Outgoing<'_>) -> Encode {
    let c = module::get::<Conf>(conf);
    let mut vary = req.ctx::<Ctx>().is_some_and(|x| x.vary);
    let mut coder: Option<Box<dyn Coder>> = None;
    let encoding = out.field("content-encoding");
    let status = out.status();
    if c.gunzip
        && encoding
            .as_deref()
            .is_some_and(|e| e.eq_ignore_ascii_case(b"gzip"))
    {
        vary = true;
        if !gzip_ok(req, c, out) {
            coder = Some(Box::new(Gunzip::new()));
        }
    } else if c.gzip
        && matches!(status, 200 | 403 | 404)
        && encoding.as_deref().is_none_or(<[u8]>::is_empty)
        && out.content_length().is_none_or(|n| n >= c.min_length)
        && type_matches(c, out)
    {
        vary = true;
        if gzip_ok(req, c, out) {
            let ratio = req.var_ctx::<Ratio>();
            coder = Some(Box::new(Gzip::new(c.level, window_bits(c, out), ratio)));
        }
    }
    Encode {
        vary: vary && c.vary,
        coder,
    }
}

fn type_matches(c: &Conf, out: &Outgoing<'_>) -> bool {
    out.media_type().is_some_and(|t| c.types.matches(&t))
}

/// nginx's window for a body of known length: smaller for a small one.
fn window_bits(c: &Conf, out: &Outgoing<'_>) -> u8 {
    let mut bits = c.window_bits;
    if let Some(n) = out.content_length().filter(|n| *n > 0) {
        while bits > 9 && n < (1u64 << (bits - 1)) - 262 {
            bits -= 1;
        }
    }
    bits
}

/// nginx's `ngx_http_gzip_ok`.
fn gzip_ok(req: &Request<'_>, c: &Conf, out: &Outgoing<'_>) -> bool {
    if req.is_subrequest() {
        return false;
    }
    let head = req.head();
    let Some(ae) = head.header("accept-encoding") else {
        return false;
    };
    if ae.len() < 4 || (!ae.starts_with(b"gzip,") && !accepts_gzip(ae)) {
        return false;
    }
    let ua = head.header("user-agent");
    if c.disable_msie6 && ua.is_some_and(is_msie6) {
        return false;
    }
    if !c.http10 && head.version() < portcullis_http::Version::Http11 {
        return false;
    }
    if head.header("via").is_some() && !proxied_ok(req, c, out) {
        return false;
    }
    if let Some(ua) = ua {
        if c.disable.iter().any(|re| re.is_match(ua)) {
            return false;
        }
    }
    true
}

/// `gzip_proxied` for a request that came through a proxy (it has `Via`).
fn proxied_ok(req: &Request<'_>, c: &Conf, out: &Outgoing<'_>) -> bool {
    let p = c.proxied;
    if p & PROXIED_OFF != 0 {
        return false;
    }
    if p & PROXIED_ANY != 0 {
        return true;
    }
    if p & PROXIED_AUTH != 0 && req.head().header("authorization").is_some() {
        return true;
    }
    if let Some(expires) = out.field("expires") {
        if p & PROXIED_EXPIRED == 0 {
            return false;
        }
        let Some(expires) = crate::files::parse_http_date(&expires) else {
            return false;
        };
        let date = match out.field("date") {
            Some(d) => match crate::files::parse_http_date(&d) {
                Some(d) => d,
                None => return false,
            },
            None => std::time::SystemTime::now(),
        };
        return expires < date;
    }
    let cc = out.fields("cache-control");
    if !cc.is_empty() {
        let has = |token: &[u8]| cc.iter().any(|v| has_token(v, token));
        return (p & PROXIED_NO_CACHE != 0 && has(b"no-cache"))
            || (p & PROXIED_NO_STORE != 0 && has(b"no-store"))
            || (p & PROXIED_PRIVATE != 0 && has(b"private"));
    }
    if p & PROXIED_NO_LM != 0 && out.field("last-modified").is_some() {
        return false;
    }
    if p & PROXIED_NO_ETAG != 0 && out.field("etag").is_some() {
        return false;
    }
    true
}

/// nginx's `ngx_http_parse_multi_header_lines`: `token` as a whole item of the list, any
/// case.
fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',' || b == b';')
        .any(|item| item.trim_ascii().eq_ignore_ascii_case(token))
}

/// nginx's reading of `User-Agent` for `gzip_disable msie6`: MSIE 4 and 5, and 6 without
/// "SV1", and not Opera.
fn is_msie6(ua: &[u8]) -> bool {
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    if find(ua, b"Opera").is_some() {
        return false;
    }
    let Some(at) = find(ua, b"MSIE ") else {
        return false;
    };
    if at + 7 >= ua.len() || ua[at + 6] != b'.' {
        return false;
    }
    match ua[at + 5] {
        b'4' | b'5' => true,
        b'6' => find(&ua[at + 8..], b"SV1").is_none(),
        _ => false,
    }
}

/// nginx's `ngx_http_gzip_accept_encoding`: `gzip` as a token, with a `q` other than zero.
fn accepts_gzip(ae: &[u8]) -> bool {
    let lower = ae.to_ascii_lowercase();
    let mut from = 0;
    let at = loop {
        let Some(i) = lower[from..].windows(4).position(|w| w == b"gzip") else {
            return false;
        };
        let p = from + i;
        if p == from || matches!(ae[p - 1], b',' | b' ') {
            break p;
        }
        from = p + 4;
    };
    let mut rest = ae[at + 4..].iter();
    loop {
        match rest.next() {
            None | Some(b',') => return true,
            Some(b';') => break,
            Some(b' ') => continue,
            Some(_) => return false,
        }
    }
    loop {
        match rest.next() {
            None => return true,
            Some(b'q' | b'Q') => break,
            Some(b' ') => continue,
            Some(_) => return false,
        }
    }
    let rest = rest.as_slice();
    if rest.len() < 2 || rest[0] != b'=' {
        return false;
    }
    quantity(&rest[1..]) != 0
}

/// nginx's `ngx_http_gzip_quantity`, as it is: the digits after the point are added up.
fn quantity(p: &[u8]) -> u32 {
    let mut it = p.iter();
    let mut q = match it.next() {
        Some(&c @ (b'0' | b'1')) => u32::from(c - b'0') * 100,
        _ => return 0,
    };
    match it.next() {
        None | Some(b',' | b' ') => return q,
        Some(b'.') => {}
        Some(_) => return 0,
    }
    let mut n = 0;
    for &c in it {
        if c == b',' || c == b' ' {
            break;
        }
        if !c.is_ascii_digit() {
            return 0;
        }
        q += u32::from(c - b'0');
        n += 1;
    }
    if q > 100 || n > 3 {
        return 0;
    }
    q
}

/// `gzip_static`: `file.gz` in place of `file`, for a client that takes gzip (`on`) or any
/// (`always`).
fn gzip_static(req: &mut Request<'_>, conf: &Slot) -> Option<Step> {
    let c = module::get::<Conf>(conf).clone();
    if c.static_ == Static::Off
        || !matches!(req.head().method(), Method::Get | Method::Head)
        || req.uri().ends_with(b"/")
    {
        return None;
    }
    let ok = match c.static_ {
        Static::Always => true,
        _ => gzip_ok_for_request(req, &c),
    };
    if !c.vary && !ok {
        return None;
    }
    let mut path = req.file_path().into_os_string();
    path.push(".gz");
    let path = std::path::PathBuf::from(path);
    let lookup = req.lookup_file(&path);
    match lookup {
        Lookup::NotFound => None,
        Lookup::Forbidden | Lookup::Error(_) => {
            crate::static_file::log_open_failure(req, &path, &lookup);
            None
        }
        // nginx's `always` makes no `Vary`: the answer does not depend on the client.
        Lookup::Directory => {
            req.ctx_mut::<Ctx>().vary = c.static_ == Static::On;
            None
        }
        Lookup::File(file) => {
            req.ctx_mut::<Ctx>().vary = c.static_ == Static::On;
            if !ok {
                return None;
            }
            Some(crate::static_file::file_response_encoded(
                req, file, b"gzip",
            ))
        }
    }
}

/// [`gzip_ok`] before any response exists: `gzip_proxied` then sees no response fields.
fn gzip_ok_for_request(req: &Request<'_>, c: &Conf) -> bool {
    let none = crate::request::Response::new(200);
    gzip_ok(req, c, &Outgoing::Own(&none))
}

thread_local! {
    /// Compressors kept for reuse by this worker, by level and window.
    static POOL: RefCell<Vec<(u32, u8, Compress)>> = const { RefCell::new(Vec::new()) };
    /// libdeflate's compressors of this worker, by level.
    static WHOLE: RefCell<Vec<(u32, libdeflater::Compressor)>> = const { RefCell::new(Vec::new()) };
}

/// Most compressors a worker keeps.
const POOL_MAX: usize = 16;

/// gzip, as a body filter.
struct Gzip {
    level: u32,
    bits: u8,
    c: Option<Compress>,
    /// The bytes in and out, for `$gzip_ratio`.
    ratio: Rc<Ratio>,
}

/// A response's bytes before and after compression, for `$gzip_ratio`.
#[derive(Default)]
struct Ratio {
    input: Cell<u64>,
    output: Cell<u64>,
}

impl Ratio {
    /// nginx's `$gzip_ratio`: two decimals, rounded half up; empty before any output.
    fn text(&self) -> Option<String> {
        let (zin, zout) = (self.input.get(), self.output.get());
        if zout == 0 {
            return None;
        }
        let (mut int, mut frac) = (zin / zout, zin * 100 / zout % 100);
        if zin * 1000 / zout % 10 > 4 {
            frac += 1;
            if frac > 99 {
                int += 1;
                frac = 0;
            }
        }
        Some(format!("{int}.{frac:02}"))
    }
}

impl Gzip {
    fn count(&self, out: usize) {
        self.ratio.output.set(self.ratio.output.get() + out as u64);
    }

    fn new(level: u32, bits: u8, ratio: Rc<Ratio>) -> Gzip {
        let reused = POOL.with(|p| {
            let mut p = p.borrow_mut();
            let i = p.iter().position(|(l, b, _)| (*l, *b) == (level, bits))?;
            Some(p.swap_remove(i).2)
        });
        // zlib-rs's level 1 is another algorithm than zlib's (zlib-ng's deflate_quick): it
        // sends a third more bytes than nginx's level 1. Its level 2 compresses as zlib's 1.
        let c = reused.unwrap_or_else(|| Compress::new_gzip(Compression::new(level.max(2)), bits));
        Gzip {
            level,
            bits,
            c: Some(c),
            ratio,
        }
    }

    fn run(&mut self, input: &[u8], out: &mut BytesMut, flush: FlushCompress) -> io::Result<()> {
        let c = self
            .c
            .as_mut()
            .ok_or_else(|| io::Error::other("gzip ended"))?;
        let mut input = input;
        loop {
            let room = input.len() / 2 + 1024;
            let start = out.len();
            out.resize(start + room, 0);
            let (in0, out0) = (c.total_in(), c.total_out());
            let status = c
                .compress(input, &mut out[start..], flush)
                .map_err(io::Error::other)?;
            let produced = (c.total_out() - out0) as usize;
            out.truncate(start + produced);
            input = &input[(c.total_in() - in0) as usize..];
            let full = produced == room;
            match status {
                Status::StreamEnd => return Ok(()),
                _ if input.is_empty() && !full && flush == FlushCompress::None => return Ok(()),
                Status::BufError if !full => return Ok(()),
                _ => {}
            }
        }
    }
}

impl Coder for Gzip {
    fn code(&mut self, input: &[u8], out: &mut BytesMut) -> io::Result<()> {
        self.ratio
            .input
            .set(self.ratio.input.get() + input.len() as u64);
        let before = out.len();
        let done = self.run(input, out, FlushCompress::None);
        self.count(out.len() - before);
        done
    }

    fn flush(&mut self, out: &mut BytesMut) -> io::Result<()> {
        let before = out.len();
        let done = self.run(&[], out, FlushCompress::Sync);
        self.count(out.len() - before);
        done
    }

    /// libdeflate, for a body known whole (a file, a `return`): at the same level it
    /// compresses as zlib does, or a little better, in two thirds of the time.
    fn whole(&mut self, input: &[u8], out: &mut BytesMut) -> Option<io::Result<()>> {
        let level = self.level;
        let mut c = WHOLE
            .with(|p| {
                let mut p = p.borrow_mut();
                let i = p.iter().position(|(l, _)| *l == level)?;
                Some(p.swap_remove(i).1)
            })
            .unwrap_or_else(|| {
                let lvl = libdeflater::CompressionLvl::new(level as i32)
                    .unwrap_or_else(|_| libdeflater::CompressionLvl::default());
                libdeflater::Compressor::new(lvl)
            });
        let start = out.len();
        out.resize(start + c.gzip_compress_bound(input.len()), 0);
        let result = c.gzip_compress(input, &mut out[start..]);
        WHOLE.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < POOL_MAX {
                p.push((level, c));
            }
        });
        Some(match result {
            Ok(n) => {
                out.truncate(start + n);
                self.ratio
                    .input
                    .set(self.ratio.input.get() + input.len() as u64);
                self.count(n);
                Ok(())
            }
            Err(e) => {
                out.truncate(start);
                Err(io::Error::other(format!("libdeflate: {e:?}")))
            }
        })
    }

    fn finish(&mut self, out: &mut BytesMut) -> io::Result<()> {
        let before = out.len();
        let done = self.run(&[], out, FlushCompress::Finish);
        self.count(out.len() - before);
        done
    }

    fn head(&self) -> HeadEdit {
        HeadEdit {
            keep_length: false,
            content_encoding: Some(Some(b"gzip")),
            accept_ranges: true,
            etag: Etag::Weak,
            last_modified: false,
        }
    }

    fn stage(&self) -> Stage {
        Stage::Compress
    }
}

impl Drop for Gzip {
    fn drop(&mut self) {
        if let Some(mut c) = self.c.take() {
            c.reset();
            let (level, bits) = (self.level, self.bits);
            POOL.with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < POOL_MAX {
                    p.push((level, bits, c));
                }
            });
        }
    }
}

/// The most a decompressor gives at a time: a gzip body can grow a thousandfold, so it is
/// decompressed as it is sent, never whole.
const INFLATE_BUDGET: usize = 64 * 1024;

/// gunzip, as a body filter: what follows the first gzip member is dropped, as nginx does.
struct Gunzip {
    d: Decompress,
    /// Input given and not yet decompressed.
    pending: Vec<u8>,
    /// The last step filled its budget: more may be held.
    full: bool,
    done: bool,
}

impl Gunzip {
    fn new() -> Gunzip {
        Gunzip {
            d: Decompress::new_gzip(15),
            pending: Vec::new(),
            full: false,
            done: false,
        }
    }

    /// Decompresses at most [`INFLATE_BUDGET`] bytes of what is pending.
    fn step(&mut self, out: &mut BytesMut) -> io::Result<()> {
        if self.done {
            self.pending.clear();
            return Ok(());
        }
        let start = out.len();
        out.resize(start + INFLATE_BUDGET, 0);
        let (in0, out0) = (self.d.total_in(), self.d.total_out());
        let status = self
            .d
            .decompress(&self.pending, &mut out[start..], FlushDecompress::None)
            .map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidData, format!("inflate() failed: {e}"))
            });
        let produced = (self.d.total_out() - out0) as usize;
        out.truncate(start + produced);
        let status = status?;
        self.pending.drain(..(self.d.total_in() - in0) as usize);
        self.full = produced == INFLATE_BUDGET;
        if status == Status::StreamEnd {
            self.done = true;
            self.pending.clear();
        }
        Ok(())
    }
}

impl Coder for Gunzip {
    fn code(&mut self, input: &[u8], out: &mut BytesMut) -> io::Result<()> {
        if !self.done {
            self.pending.extend_from_slice(input);
        }
        if self.pending.is_empty() && !self.full {
            return Ok(());
        }
        self.step(out)
    }

    fn bounded(&self) -> bool {
        true
    }

    fn more(&mut self, out: &mut BytesMut) -> io::Result<bool> {
        if self.done || (self.pending.is_empty() && !self.full) {
            return Ok(false);
        }
        self.step(out)?;
        Ok(!self.done && (self.full || !self.pending.is_empty()))
    }

    fn finish(&mut self, _out: &mut BytesMut) -> io::Result<()> {
        // An empty body is no gzip stream either: nginx breaks the response off.
        if self.done {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "inflate() returned an incomplete gzip stream on response end",
            ))
        }
    }

    fn head(&self) -> HeadEdit {
        HeadEdit {
            keep_length: false,
            content_encoding: Some(None),
            accept_ranges: true,
            etag: Etag::Weak,
            last_modified: false,
        }
    }

    fn stage(&self) -> Stage {
        Stage::Decompress
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn accept_encoding_read_as_nginx_reads_it() {
        for (ae, ok) in [
            (&b"gzip"[..], true),
            (b"gzip, deflate", true),
            (b"deflate, gzip", true),
            (b"deflate,gzip;q=0.5", true),
            (b"gzip;q=0", false),
            (b"gzip; q=0.000", false),
            (b"gzip;q=1.0", true),
            (b"gzip;q=0.001", true),
            (b"gzip;q=1.5", false),
            (b"gzip;q=0.9", true),
            (b"gzip;q=0.55", true),
            (b"gzip;q=1.99", false),
            (b"gzip;q=2", false),
            (b"xgzip", false),
            (b"xgzipgzip", true),
            (b"x-gzip", false),
            (b"GZIP", true),
            (b"gzipx", false),
            (b"identity", false),
        ] {
            assert_eq!(accepts_gzip(ae), ok, "{}", String::from_utf8_lossy(ae));
        }
    }

    #[test]
    fn msie6_as_nginx_finds_it() {
        assert!(is_msie6(
            b"Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)"
        ));
        assert!(!is_msie6(
            b"Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1)"
        ));
        assert!(is_msie6(b"Mozilla/4.0 (compatible; MSIE 5.5; Windows 98)"));
        assert!(!is_msie6(
            b"Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 6.0)"
        ));
        assert!(!is_msie6(b"Opera/9 (compatible; MSIE 6.0)"));
    }

    #[test]
    fn gzip_then_gunzip_gives_the_bytes_back_in_any_pieces() {
        let text: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("line {} {}\n", i, i * 7919 % 1000).into_bytes())
            .collect();
        for level in [1, 6, 9] {
            let mut gz = BytesMut::new();
            let mut g = Gzip::new(level, 15, Rc::default());
            for piece in text.chunks(7777) {
                g.code(piece, &mut gz).unwrap();
            }
            g.finish(&mut gz).unwrap();
            drop(g);
            assert!(gz.len() < text.len() / 3, "level {level}: {}", gz.len());
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&gz[..])
                .read_to_end(&mut plain)
                .unwrap();
            assert_eq!(plain, text);
            let mut back = BytesMut::new();
            let mut u = Gunzip::new();
            for piece in gz.chunks(1000) {
                u.code(piece, &mut back).unwrap();
            }
            u.finish(&mut back).unwrap();
            assert_eq!(&back[..], &text[..]);
        }
        // At once, by libdeflate: as small as piece by piece, and the same bytes back.
        for level in [1, 6] {
            let mut streamed = BytesMut::new();
            let mut g = Gzip::new(level, 15, Rc::default());
            g.code(&text, &mut streamed).unwrap();
            g.finish(&mut streamed).unwrap();
            let mut whole = BytesMut::new();
            Gzip::new(level, 15, Rc::default())
                .whole(&text, &mut whole)
                .unwrap()
                .unwrap();
            assert!(whole.len() <= streamed.len() * 102 / 100, "level {level}");
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&whole[..])
                .read_to_end(&mut plain)
                .unwrap();
            assert_eq!(plain, text);
        }
        // A reused compressor starts a new stream.
        let mut a = BytesMut::new();
        let mut g = Gzip::new(1, 15, Rc::default());
        g.code(b"hello", &mut a).unwrap();
        g.finish(&mut a).unwrap();
        drop(g);
        let mut b = BytesMut::new();
        let mut g = Gzip::new(1, 15, Rc::default());
        g.code(b"hello", &mut b).unwrap();
        g.finish(&mut b).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn a_truncated_gzip_body_is_an_error() {
        let mut gz = BytesMut::new();
        let mut g = Gzip::new(1, 15, Rc::default());
        g.code(&[b'a'; 5000], &mut gz).unwrap();
        g.finish(&mut gz).unwrap();
        let mut u = Gunzip::new();
        let mut out = BytesMut::new();
        u.code(&gz[..gz.len() - 4], &mut out).unwrap();
        assert!(u.finish(&mut out).is_err());
    }
}
