//! A request's trip through nginx's phases: the server rewrite phase, find the location
//! (again after each internal redirect or `rewrite ... last`, at most [`MAX_REDIRECTS`] times),
//! the location's rewrite phase, access (`limit_except`, `allow`/`deny`, then the modules'
//! access handlers, combined as `satisfy` says; a subrequest skips it, as in nginx),
//! `try_files`, then content (index, static files, the proxy), and `error_page` for an error
//! status.
//!
//! The rewrite and access phases run the [`Handlers`] the modules register, in the registry's
//! order, each with the module's settings of the level; the modules' variables are evaluated
//! by their handler too, and a module keeps its state of a request with it ([`Request::ctx`]).
//! A handler that waits for something outside the phases (a subrequest) stops them
//! ([`Step::Suspend`]) with a [`Suspension`]; [`Request::run`] awaits it and runs the phases
//! again from the start, as nginx re-enters its phase handlers once a subrequest is done.

use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::{BufMut, Bytes, BytesMut};
use portcullis_http::{Method, RequestHead};

use crate::conf::{ErrorTarget, LocConf, ServerConf, TryLast};
use crate::conn::info::ConnInfo;
use crate::encode::{Encode, Outgoing};
use crate::files::{CachedFile, Conditions, Lookup, Plan};
use crate::location::{Captured, Captures, LazyCaptures};
use crate::module::{Confs, Registry, Slot};
use crate::vars::{Template, Var};
use crate::worker::state::Worker;
use crate::Level;

mod upstream;

/// nginx's limit on internal redirects and location restarts (`rewrite ... last`, index,
/// try_files, error_page) before it answers 500.
const MAX_REDIRECTS: u32 = 10;

pub(crate) const VERSION: &str = concat!("portcullis/", env!("CARGO_PKG_VERSION"));

pub(crate) enum Part {
    Bytes(Bytes),
    File {
        file: Rc<CachedFile>,
        offset: u64,
        len: u64,
    },
}

pub(crate) enum Body {
    Empty,
    Bytes(Bytes),
    File {
        file: Rc<CachedFile>,
        offset: u64,
        len: u64,
    },
    Parts(Vec<Part>),
    /// To be fetched from an upstream: the connection runs the exchange.
    Proxy(Box<crate::upstream::Plan>),
    /// Made as it is sent, of a length not known before (a recoded body, `encode.rs`).
    Stream(Box<dyn crate::encode::Source>),
    /// The response is made once the request's body is read whole (an API write): the
    /// connection reads it, then answers with what this makes of it.
    MadeOfRequest(Box<dyn FnOnce(Bytes) -> Response>),
}

/// The status of a response that goes out as none: the connection (or HTTP/2 stream)
/// closes instead, as nginx's 444 (`return 444`, a body filter that failed).
const NO_RESPONSE: u16 = 444;

/// Whether `resp` goes out as none: a request ended with 444, or with one of the two nginx
/// ends a request with at once, 408 (the client was too slow) and 499 (it went away),
/// whatever ended it (`return 408;` too). A response of such a status with a body of its own
/// (`return 444 "text"`, an upstream's) goes out as it is, as in nginx.
pub(crate) fn no_response(resp: &Response) -> bool {
    resp.is_error && matches!(resp.status, NO_RESPONSE | 408 | 499)
}

pub(crate) struct Response {
    pub status: u16,
    pub content_type: Option<Arc<str>>,
    pub content_length: Option<u64>,
    /// Further headers, already formatted as `Name: value\r\n`.
    pub headers: BytesMut,
    pub body: Body,
    /// Whether the connection must close after this response.
    pub close: bool,
    pub keep_alive: bool,
    /// Set for error statuses that error_page may replace.
    pub is_error: bool,
    /// What the header filters take the response for, when not what it is.
    pub filtered: Option<Box<Filtered>>,
    /// The body goes out chunked (HTTP/1.1, a body of no known length).
    pub chunked: bool,
    /// `Location` is an error_page's URL: written with the other fields, after the
    /// connection's, where nginx's error_page adds it.
    pub location_as_field: bool,
}

/// What the header filters take a response for, when not what it is: nginx's range filter
/// comes after them, so a range that cannot be satisfied is a 416 they saw as a 200 (after
/// `add_header` and `expires`), and a multipart range is a 206 they saw as the whole file, a
/// 200 of the file's type (the type its parts name).
pub(crate) struct Filtered {
    pub status: u16,
    /// `None`: the response's own.
    pub content_type: Option<Arc<str>>,
}

/// Response fields nginx 1.22 keeps as lists, so that `$sent_http_*` reads them all,
/// joined by ", ".
const JOINED_FIELDS: [&str; 2] = ["cache-control", "link"];

/// `values` joined by ", ".
fn join_into<'v>(out: &mut Vec<u8>, values: impl Iterator<Item = &'v [u8]>) {
    for (i, v) in values.enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(v);
    }
}

/// The values of the fields called `name` (any case) in a block of `Name: value\r\n` lines.
fn fields_named<'b>(block: &'b [u8], name: &str) -> impl Iterator<Item = &'b [u8]> + 'b {
    let name = name.as_bytes().to_vec();
    block.split(|&b| b == b'\n').filter_map(move |line| {
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(&name)
            .then(|| line[colon + 1..].trim_ascii())
    })
}

/// What a proxied response's head said beside its upstream's fields (`$sent_http_*`).
pub(crate) struct SentFields {
    /// The type it was sent with.
    pub content_type: Option<Arc<str>>,
    /// The header filters' fields (`add_header`), formatted.
    pub added: BytesMut,
    /// The proxy's settings (`proxy_hide_header`).
    pub settings: Arc<crate::upstream::ProxySettings>,
}

/// `Keep-Alive: timeout=N`, which nginx writes after `Connection: keep-alive` when
/// `keepalive_timeout` has a second argument.
pub(crate) fn keep_alive_field(out: &mut BytesMut, secs: u64) {
    out.put_slice(b"Keep-Alive: timeout=");
    out.put_slice(secs.to_string().as_bytes());
    out.put_slice(b"\r\n");
}

impl Response {
    /// The status the header filters see.
    pub(crate) fn filtered_status(&self) -> u16 {
        self.filtered.as_ref().map_or(self.status, |f| f.status)
    }

    /// The type the header filters see.
    pub(crate) fn filtered_type(&self) -> Option<&str> {
        match self
            .filtered
            .as_ref()
            .and_then(|f| f.content_type.as_deref())
        {
            Some(t) => Some(t),
            None => self.content_type.as_deref(),
        }
    }

    pub(crate) fn new(status: u16) -> Response {
        Response {
            status,
            content_type: None,
            content_length: None,
            headers: BytesMut::new(),
            body: Body::Empty,
            close: false,
            keep_alive: true,
            is_error: false,
            filtered: None,
            chunked: false,
            location_as_field: false,
        }
    }

    /// A request ended without a response (see [`no_response`]).
    pub(crate) fn none() -> Response {
        let mut r = Response::new(NO_RESPONSE);
        r.is_error = true;
        r
    }

    pub(crate) fn header(&mut self, name: &str, value: &[u8]) {
        portcullis_http::write_header(&mut self.headers, name, value);
    }

    /// nginx's built-in page: `page` selects the text (494 for "Request Header Or Cookie Too
    /// Large"), `status` is what the status line says.
    pub fn error_page(page: u16, status: u16, tokens: bool) -> Response {
        let body = portcullis_http::error_page_body(
            page,
            Some(if tokens { VERSION } else { "portcullis" }),
        );
        let mut r = Response::new(status);
        r.is_error = true;
        if !body.is_empty() {
            r.content_type = Some(Arc::from("text/html"));
        }
        // 204 and 304 carry no body and so no Content-Length (RFC 9110 8.6).
        if status != 204 && status != 304 {
            r.content_length = Some(body.len() as u64);
        }
        r.body = Body::Bytes(body);
        r
    }

    /// Whether a client can tell where this response ends while the connection stays
    /// open: it has a length, or no body because of the request's method or its status.
    pub(crate) fn is_delimited(&self, head_request: bool) -> bool {
        head_request
            || self.content_length.is_some()
            || matches!(self.status, 100..=199 | 204 | 304)
    }

    /// The value of the first field called `name` (any case) among the added fields.
    pub(crate) fn header_value(&self, name: &str) -> Option<Vec<u8>> {
        fields_named(&self.headers, name).next().map(<[u8]>::to_vec)
    }

    /// The values of every field called `name` (any case) among the added fields.
    pub(crate) fn header_values(&self, name: &str) -> Vec<Vec<u8>> {
        fields_named(&self.headers, name)
            .map(<[u8]>::to_vec)
            .collect()
    }

    /// Removes every field called `name` (any case).
    pub(crate) fn remove_header(&mut self, name: &str) {
        let mut kept = BytesMut::with_capacity(self.headers.len());
        for line in self.headers.split_inclusive(|&b| b == b'\n') {
            let field = line.split(|&b| b == b':').next().unwrap_or(line);
            if !field.eq_ignore_ascii_case(name.as_bytes()) {
                kept.extend_from_slice(line);
            }
        }
        self.headers = kept;
    }

    /// Replaces the value of the field `name` where it stands (nginx edits a field in place);
    /// `None` removes it. Nothing changes when there is no such field.
    pub(crate) fn replace_header(&mut self, name: &str, value: Option<&[u8]>) {
        let mut out = BytesMut::with_capacity(self.headers.len() + 4);
        for line in self.headers.split_inclusive(|&b| b == b'\n') {
            let field = line.split(|&b| b == b':').next().unwrap_or(line);
            if !field.eq_ignore_ascii_case(name.as_bytes()) {
                out.extend_from_slice(line);
            } else if let Some(v) = value {
                portcullis_http::write_header(&mut out, name, v);
            }
        }
        self.headers = out;
    }

    /// nginx sends Last-Modified only with 200, 206 and 304, and Accept-Ranges only with 200:
    /// a file served as an error page loses them.
    fn strip_validators(&mut self) {
        let keep_last_modified = matches!(self.status, 206 | 304);
        let mut kept = BytesMut::with_capacity(self.headers.len());
        for line in self.headers.split_inclusive(|&b| b == b'\n') {
            let drop = line.starts_with(b"Accept-Ranges:")
                || (!keep_last_modified && line.starts_with(b"Last-Modified:"));
            if !drop {
                kept.extend_from_slice(line);
            }
        }
        self.headers = kept;
    }

    pub fn body_bytes(&self) -> Bytes {
        match &self.body {
            Body::Bytes(b) => b.clone(),
            _ => Bytes::new(),
        }
    }

    /// Writes the status line and headers in nginx's order.
    /// The status line and header fields. A 204 has neither type nor length, as nginx's
    /// header filter removes them.
    pub fn write_head(
        &self,
        out: &mut BytesMut,
        date: &[u8],
        tokens: bool,
        keepalive_header: Option<u64>,
    ) {
        portcullis_http::write_status_line(out, self.status);
        out.put_slice(b"Server: ");
        out.put_slice(if tokens {
            VERSION.as_bytes()
        } else {
            b"portcullis"
        });
        out.put_slice(b"\r\nDate: ");
        out.put_slice(date);
        out.put_slice(b"\r\n");
        if let Some(t) = self
            .content_type
            .as_ref()
            .filter(|t| self.status != 204 && !t.is_empty())
        {
            out.put_slice(b"Content-Type: ");
            out.put_slice(t.as_bytes());
            out.put_slice(b"\r\n");
        }
        if let Some(n) = self.content_length.filter(|_| self.status != 204) {
            out.put_slice(b"Content-Length: ");
            put_decimal(out, n);
            out.put_slice(b"\r\n");
        }
        // nginx writes Last-Modified and Location in their places before the connection's
        // fields, every other field after them in the order it was set, and Accept-Ranges
        // last (its range filter comes after the others).
        let first = |l: &[u8]| {
            starts_with_field(l, b"last-modified")
                || (starts_with_field(l, b"location") && !self.location_as_field)
        };
        let last = |l: &[u8]| starts_with_field(l, b"accept-ranges");
        let mut rest = 0;
        for line in lines(&self.headers) {
            if first(line) {
                out.put_slice(line);
            } else {
                rest += 1;
            }
        }
        if self.chunked {
            out.put_slice(b"Transfer-Encoding: chunked\r\n");
        }
        out.put_slice(if self.keep_alive {
            b"Connection: keep-alive\r\n" as &[u8]
        } else {
            b"Connection: close\r\n"
        });
        if let Some(secs) = keepalive_header.filter(|_| self.keep_alive) {
            keep_alive_field(out, secs);
        }
        if rest > 0 {
            // gzip's Vary comes first of them, where nginx's header filter writes it.
            let vary = |l: &[u8]| l == b"Vary: Accept-Encoding\r\n";
            for line in lines(&self.headers).filter(|l| vary(l)) {
                out.put_slice(line);
            }
            for line in lines(&self.headers).filter(|l| !first(l) && !last(l) && !vary(l)) {
                out.put_slice(line);
            }
            for line in lines(&self.headers).filter(|l| last(l)) {
                out.put_slice(line);
            }
        }
        out.put_slice(b"\r\n");
    }
}

/// The lines of a block of formatted fields, each with its line end.
fn lines(block: &[u8]) -> impl Iterator<Item = &[u8]> {
    block.split_inclusive(|&b| b == b'\n')
}

/// Whether a field's line is of the field `name` (lowercase).
fn starts_with_field(line: &[u8], name: &[u8]) -> bool {
    line.len() > name.len()
        && line[name.len()] == b':'
        && line[..name.len()].eq_ignore_ascii_case(name)
}

/// Writes `n` in decimal without going through `fmt`, which would cost an allocation here.
fn put_decimal(out: &mut BytesMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.put_slice(&digits[i..]);
}

/// Something a phase handler waits for outside the phases, such as a subrequest: awaited by
/// [`Request::run`] before the phases run again from the start, where the handler finds
/// what it waited for.
pub(crate) trait Suspension {
    fn resume<'r>(
        self: Box<Self>,
        req: &'r mut Request<'_>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'r>>;
}

/// A module's phase handlers, which its `Module::handlers` returns; `None` for a phase it
/// takes no part in.
pub(crate) struct Handlers {
    /// The rewrite phases: the server's rewrite phase, with the module's settings of the
    /// server, and the location's, with those of the location.
    pub rewrite: Option<RewriteHandler>,
    /// The post-read phase, with the module's settings of the server, before anything else
    /// (the server's rewrite directives): what it returns is not asked for.
    pub postread: Option<AccessHandler>,
    /// The preaccess phase (limits), with the same settings as the access phase: a
    /// handler's `Denied` ends the request whatever `satisfy` says, and its `Allowed` is
    /// taken as `Declined`.
    pub preaccess: Option<AccessHandler>,
    /// The access phase, with the module's settings of the location (or of its
    /// `limit_except` block).
    pub access: Option<AccessHandler>,
    /// Appends the value of one of the variables the module declared, with the module's
    /// settings of the request's location and what it compiled of the name; the response
    /// is there once one was sent (for the access log).
    pub variable: Option<VariableHandler>,
    /// The header filter: adds or replaces fields of the response the location finished
    /// with. The `Last-Modified` given is a proxied response's, which is not among the
    /// response's own fields; with `None` the filter reads the response's.
    pub header_filter: Option<HeaderFilter>,
    /// The fields the header filter sets in place of a response's own, for a response of
    /// the given status: a proxied response's are left out as it is relayed.
    pub replaced_fields: Option<ReplacedFields>,
    /// The content phase, with the module's settings of the location: a module that
    /// answers the location's requests itself (nginx's location content handler, as
    /// `stub_status` sets) returns the answer; `None` leaves the request to the next
    /// module, then to `proxy_pass`, the index and the static files.
    pub content: Option<ContentHandler>,
    /// The content phase of a location without a handler of its own (no `proxy_pass`, no
    /// module's `content`): before the index and the static files (`gzip_static`).
    pub static_content: Option<ContentHandler>,
    /// Decides whether the body of a response about to go out is recoded (compressed), and
    /// whether it varies by `Accept-Encoding`, with the module's settings of the location
    /// that finished the request.
    pub encode: Option<EncodeHandler>,
    /// A body filter that takes the body of a response of the server's own whole and may
    /// wait while it makes the new one (`ssi`'s includes): after the header filters and
    /// before the encode phase, and on subrequests' responses too.
    pub body: Option<BodyFilter>,
    /// Takes a new connection before the HTTP/1.1 loop reads it (HTTP/2: chosen by ALPN, or
    /// by the client's preface on a plain address), with the module's settings of the
    /// address's default server (see [`Take`]).
    pub connection: Option<ConnectionHandler>,
    /// The log phase: a finished request (or one refused before its head was read), with
    /// the module's settings of the location that finished it, its state in the worker, the
    /// variables' values and whether an empty one is a value.
    pub log: Option<LogHandler>,
    /// Whether the module's variables have a value when it is empty, as nginx's `map`,
    /// `geo`, `split_clients` and `valid_referers` give one: the access log writes it as
    /// nothing, where a variable without a value is `-`.
    pub empty_is_a_value: bool,
}

/// A module's body filter (see [`Handlers::body`]).
#[derive(Clone, Copy)]
pub(crate) struct BodyFilter {
    /// Whether the filter takes part for a response about to go out: a static file's
    /// ranges are not served then, as nginx's range filter comes after the body filters.
    pub applies: fn(&Request<'_>, &Slot, &Outgoing<'_>) -> bool,
    /// How the filter changes the head of a response it applies to (of the main request).
    pub edit: fn(&Slot) -> crate::encode::HeadEdit,
    /// Filters the response, with the module's settings of the location: a main request's
    /// is sent as a [`Body::Stream`], a subrequest's kept as [`Body::Bytes`].
    pub filter: FilterBody,
}

/// What [`BodyFilter::filter`] is: an `async fn` as a pointer.
pub(crate) type FilterBody =
    for<'x, 'r> fn(
        &'x Request<'r>,
        Slot,
        &'x mut Response,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'x>>;

type RewriteHandler = fn(&mut Request<'_>, &Slot) -> Rewritten;
type AccessHandler = fn(&mut Request<'_>, &Slot) -> Access;
type VariableHandler = fn(&Request<'_>, &Slot, &Slot, &mut Vec<u8>, Option<(&Response, u64)>);
type ReplacedFields = for<'s> fn(&'s Slot, u16, &mut Vec<&'s str>);
type ContentHandler = fn(&mut Request<'_>, &Slot) -> Option<Step>;
type EncodeHandler = fn(&Request<'_>, &Slot, &Outgoing<'_>) -> Encode;
/// What [`Handlers::connection`] is.
pub(crate) type ConnectionHandler = for<'a> fn(
    &'a Rc<Worker>,
    &'a crate::conf::Listen,
    &'a Slot,
    NewConnection,
    &'a crate::stats::Connection,
) -> Take<'a>;

/// What a [`Handlers::connection`] handler does with a new connection.
pub(crate) enum Take<'a> {
    /// Not the module's: given back as it came.
    Declined(NewConnection),
    /// Served by the module: the future ends with the connection (and what it read) to leave
    /// to HTTP/1.1, or `None` once the module served it.
    Taken(std::pin::Pin<Box<dyn std::future::Future<Output = Option<NewConnection>> + 'a>>),
}

/// A connection before its first request, as a [`Handlers::connection`] handler gets it.
pub(crate) struct NewConnection {
    pub stream: crate::tls::Stream,
    /// What was read of it already.
    pub read: BytesMut,
    pub info: ConnInfo,
    /// Plain HTTP on a TLS address, which the HTTP/1.1 loop answers with a refusal.
    pub refused: bool,
}
type LogHandler = fn(
    &Slot,
    &dyn std::any::Any,
    Option<&Logged<'_, '_>>,
    &mut dyn FnMut(&Var, &mut Vec<u8>),
    &dyn Fn(&Var) -> bool,
);

/// A finished request as the log phase sees it: the request, the response it got, and the
/// bytes sent in all (none for one refused before its head was read).
pub(crate) struct Logged<'r, 'a> {
    pub req: &'r Request<'a>,
    pub resp: &'r Response,
    pub sent: u64,
}

impl Handlers {
    /// No handler: what a module starts from.
    pub const NONE: Handlers = Handlers {
        rewrite: None,
        postread: None,
        preaccess: None,
        access: None,
        variable: None,
        header_filter: None,
        replaced_fields: None,
        content: None,
        static_content: None,
        encode: None,
        body: None,
        connection: None,
        log: None,
        empty_is_a_value: false,
    };
}

/// The modules' handlers by phase, made once per configuration (as nginx's phase engine is):
/// a phase calls only the modules that take part in it, each with its place in the registry,
/// which is also the place of its settings in a level's.
#[derive(Default)]
pub(crate) struct Phases {
    rewrite: Phase<RewriteHandler>,
    postread: Phase<AccessHandler>,
    preaccess: Phase<AccessHandler>,
    access: Phase<AccessHandler>,
    header_filter: Phase<HeaderFilter>,
    replaced_fields: Phase<ReplacedFields>,
    content: Phase<ContentHandler>,
    static_content: Phase<ContentHandler>,
    encode: Phase<EncodeHandler>,
    body: Phase<BodyFilter>,
    log: Phase<LogHandler>,
    connection: Phase<ConnectionHandler>,
    /// By the module's place.
    variable: Vec<Option<VariableHandler>>,
    /// The modules whose empty variables are values ([`Handlers::empty_is_a_value`]).
    empty_values: u128,
}

/// One phase's handlers with their modules' places, and those places as a mask: a level
/// where none of them is active skips the phase at once.
struct Phase<H> {
    handlers: Vec<(usize, H)>,
    modules: u128,
}

impl<H> Phase<H> {
    const EMPTY: Phase<H> = Phase {
        handlers: Vec::new(),
        modules: 0,
    };
}

impl<H> Default for Phase<H> {
    fn default() -> Self {
        Phase::EMPTY
    }
}

impl<H: Copy> Phase<H> {
    fn add(&mut self, module: usize, handler: Option<H>) {
        if let Some(h) = handler {
            self.handlers.push((module, h));
            self.modules |= 1 << module;
        }
    }

    /// The handlers to run at a level, each with its module's settings there.
    #[inline]
    fn at<'c>(&'c self, confs: &'c Confs) -> impl Iterator<Item = (usize, H, &'c Slot)> + 'c {
        let none = !confs.any_active(self.modules);
        let handlers = if none { &[][..] } else { &self.handlers[..] };
        handlers
            .iter()
            .filter_map(|&(i, h)| Some((i, h, confs.active(i)?)))
    }
}

impl Phases {
    /// The handlers `modules` register, by phase.
    pub(crate) fn of(modules: Registry) -> Phases {
        let mut p = Phases::default();
        for (i, m) in modules.iter().enumerate() {
            let h = m
                .handlers()
                .downcast_ref::<Handlers>()
                .expect("a module's handlers are the phases' Handlers");
            p.rewrite.add(i, h.rewrite);
            p.postread.add(i, h.postread);
            p.preaccess.add(i, h.preaccess);
            p.access.add(i, h.access);
            p.header_filter.add(i, h.header_filter);
            p.replaced_fields.add(i, h.replaced_fields);
            p.content.add(i, h.content);
            p.static_content.add(i, h.static_content);
            p.encode.add(i, h.encode);
            p.body.add(i, h.body);
            p.log.add(i, h.log);
            p.connection.add(i, h.connection);
            p.variable.push(h.variable);
            if h.empty_is_a_value {
                p.empty_values |= 1 << i;
            }
        }
        p
    }
}

impl Phases {
    /// A server's phases. Made by `crate::compile` for every configuration: without them
    /// no access handler would run, so a configuration that lacked them must not serve.
    pub(crate) fn of_server(server: &ServerConf) -> &Phases {
        server
            .phases
            .downcast_ref::<Phases>()
            .expect("the configuration's phases")
    }

    /// The connection handlers of the modules active in `confs` (the default server's
    /// settings), each with those settings.
    pub(crate) fn connection<'c>(
        &'c self,
        confs: &'c Confs,
    ) -> impl Iterator<Item = (ConnectionHandler, &'c Slot)> + 'c {
        self.connection.at(confs).map(|(_, h, conf)| (h, conf))
    }

    /// Whether a module logs requests finished with the settings `confs`.
    #[inline]
    pub(crate) fn logs(&self, confs: &Confs) -> bool {
        confs.any_active(self.log.modules)
    }

    /// The log phase, for the settings `confs`: `lookup` gives the variables' values, `has`
    /// whether an empty one is a value.
    pub(crate) fn log(
        &self,
        worker: &Worker,
        confs: &Confs,
        logged: Option<&Logged<'_, '_>>,
        lookup: &mut dyn FnMut(&Var, &mut Vec<u8>),
        has: &dyn Fn(&Var) -> bool,
    ) {
        for (i, log, conf) in self.log.at(confs) {
            log(conf, &*worker.modules[i], logged, lookup, has);
        }
    }
}

/// A module's header filter (see [`Handlers::header_filter`]): the request, the module's settings, the response, and the upstream's
/// head when the response is a proxied one (whose fields are not among the response's).
pub(crate) type HeaderFilter =
    fn(&Request<'_>, &Slot, &mut Response, Option<&portcullis_http::ResponseHead>);

/// What a rewrite phase handler decided.
pub(crate) enum Rewritten {
    /// On to the next handler, in the current location.
    Next,
    /// The URI changed: once the phase is over, the location is searched again.
    Reroute,
    /// The request is answered (or redirected internally).
    Stop(Step),
}

/// An access handler's decision as the phase keeps it (see [`Request::access`]).
#[derive(Clone)]
enum Verdict {
    Declined,
    Allowed,
    Denied(u16, Option<Vec<u8>>),
}

/// What an access phase handler decided.
pub(crate) enum Access {
    /// Nothing to check at this level (nginx's `NGX_DECLINED`).
    Declined,
    Allowed,
    /// Refused with `status`: 401 or 403 (which `satisfy any` lets another handler
    /// overrule), or another status that ends the request at once; a 401 carries its
    /// `WWW-Authenticate` value.
    Denied {
        status: u16,
        challenge: Option<Vec<u8>>,
    },
    /// Something must be waited for first (a subrequest): the phases stop, and run again from
    /// the start once it is done.
    Wait(Box<dyn Suspension>),
}

pub(crate) enum Step {
    /// Run the location search again (internal redirect or named location).
    Again,
    Done(Response),
    /// An error status: error_page or the built-in page.
    Status(u16),
    /// A phase handler waits for something (a subrequest): the request stops, to be run
    /// again from the start once it is done.
    Suspend,
}

/// A date of a condition field; one that does not parse is a second before the epoch, as
/// nginx's -1: a field there but unreadable still counts (`If-Unmodified-Since: garbage`
/// fails, as with nginx).
fn unreadable_as_before_epoch(value: &[u8]) -> SystemTime {
    crate::files::parse_http_date(value)
        .unwrap_or(SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(1))
}

/// The value of cookie `name` in a Cookie header, as nginx's parser finds it: pairs part at `;`
/// or `,`, spaces around `=` are skipped, and a value runs to the next `;`.
fn cookie_in<'v>(mut rest: &'v [u8], name: &[u8]) -> Option<&'v [u8]> {
    let spaces = |s: &'v [u8]| &s[s.iter().take_while(|&&b| b == b' ').count()..];
    loop {
        let value = (rest.split_at_checked(name.len()))
            .filter(|(key, _)| key.eq_ignore_ascii_case(name))
            .and_then(|(_, after)| spaces(after).strip_prefix(b"="));
        if let Some(value) = value.map(spaces) {
            let end = value.iter().position(|&b| b == b';').unwrap_or(value.len());
            return Some(&value[..end]);
        }
        let next = rest.iter().position(|&b| b == b';' || b == b',')?;
        rest = spaces(&rest[next + 1..]);
    }
}

/// Gives variable `slot` its value in `vars`, the request's values by slot.
fn set_slot(vars: &mut Vec<Option<Vec<u8>>>, slot: usize, value: Vec<u8>) {
    if vars.len() <= slot {
        vars.resize(slot + 1, None);
    }
    vars[slot] = Some(value);
}

/// `$request_id`: 16 random bytes in hex, as nginx makes it.
fn random_id() -> [u8; 32] {
    let mut bytes = [0u8; 16];
    // SAFETY: getrandom writes at most `len` bytes into the buffer it is given.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if usize::try_from(n).ok() != Some(bytes.len()) {
        // Not expected from the kernel's pool for 16 bytes; a time-based id rather than none.
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes = nanos.to_le_bytes();
    }
    let mut out = [0u8; 32];
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = b"0123456789abcdef"[usize::from(b >> 4)];
        out[2 * i + 1] = b"0123456789abcdef"[usize::from(b & 15)];
    }
    out
}

/// Appends `t` in seconds with milliseconds (`1.001`), as nginx writes `$request_time`,
/// `$msec` and the like.
pub(crate) fn write_seconds(out: &mut Vec<u8>, t: std::time::Duration) {
    let _ = write!(out, "{}.{:03}", t.as_secs(), t.subsec_millis());
}

/// The variables that need only the connection: also used to log a request refused before
/// its head could be parsed.
pub(crate) fn connection_var(v: &Var, conn: &ConnInfo, out: &mut Vec<u8>) {
    match v {
        Var::RemoteAddr => out.extend_from_slice(conn.peer.ip().to_string().as_bytes()),
        Var::BinaryRemoteAddr => match conn.peer.ip() {
            std::net::IpAddr::V4(ip) => out.extend_from_slice(&ip.octets()),
            std::net::IpAddr::V6(ip) => out.extend_from_slice(&ip.octets()),
        },
        Var::ConnectionTime => write_seconds(out, conn.started.elapsed()),
        Var::RemotePort => out.extend_from_slice(conn.peer.port().to_string().as_bytes()),
        Var::ServerAddr => out.extend_from_slice(conn.local_addr().ip().to_string().as_bytes()),
        Var::ServerPort => out.extend_from_slice(conn.local.port().to_string().as_bytes()),
        Var::Connection => out.extend_from_slice(conn.id.to_string().as_bytes()),
        Var::ConnectionRequests => out.extend_from_slice(conn.requests.to_string().as_bytes()),
        Var::Pid => out.extend_from_slice(std::process::id().to_string().as_bytes()),
        Var::NginxVersion => out.extend_from_slice(env!("CARGO_PKG_VERSION").as_bytes()),
        Var::Msec => {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            write_seconds(out, now);
        }
        Var::TimeLocal => crate::log::fmt_time_local(SystemTime::now(), out),
        Var::TimeIso8601 => crate::log::fmt_time_iso8601(SystemTime::now(), out),
        Var::Ssl(s) => crate::tls::ssl_var(*s, conn.tls.as_deref(), out),
        Var::Pipe => out.push(if conn.pipelined { b'p' } else { b'.' }),
        Var::TcpInfo(which) => {
            if let Some(n) = conn.tcp_info(*which) {
                let _ = write!(out, "{n}");
            }
        }
        Var::ProxyProtocol(which) => {
            use crate::vars::ProxyProtocolVar as P;
            let Some(pp) = conn.proxy_protocol.as_deref() else {
                return;
            };
            // A port of 0 shows as nothing, as in nginx.
            let port = |p: u16, out: &mut Vec<u8>| {
                if p != 0 {
                    let _ = write!(out, "{p}");
                }
            };
            match which {
                P::Addr => out.extend_from_slice(pp.src_addr.as_bytes()),
                P::Port => port(pp.src_port, out),
                P::ServerAddr => out.extend_from_slice(pp.dst_addr.as_bytes()),
                P::ServerPort => port(pp.dst_port, out),
            }
        }
        _ => {}
    }
}

/// The value of cookie `name` if a `Set-Cookie` field's `value` sets it, read as nginx's
/// `ngx_http_parse_set_cookie_lines` does: the name first (ASCII case-insensitive), spaces,
/// `=`, spaces, and the value up to the first `;`.
fn set_cookie_value<'v>(value: &'v [u8], name: &[u8]) -> Option<&'v [u8]> {
    if value.len() <= name.len() || !value[..name.len()].eq_ignore_ascii_case(name) {
        return None;
    }
    let spaces = |s: &'v [u8]| &s[s.iter().take_while(|&&b| b == b' ').count()..];
    let rest = spaces(&value[name.len()..]);
    let rest = spaces(rest.strip_prefix(b"=")?);
    let end = rest.iter().position(|&b| b == b';').unwrap_or(rest.len());
    Some(&rest[..end])
}

pub(crate) struct Request<'a> {
    worker: &'a Rc<Worker>,
    server: &'a Arc<ServerConf>,
    /// The modules' handlers by phase, of the server's configuration.
    phases: &'a Phases,
    conn: &'a ConnInfo,
    /// The client's address as the request's modules made it (`set_real_ip_from`); the
    /// connection's otherwise.
    peer: std::net::SocketAddr,
    head: RequestHead,
    /// A subrequest's main request's head: `$request` and `$request_uri` are the main
    /// request's, as nginx's subrequests share its request line.
    main_head: Option<Box<RequestHead>>,
    method: Method,
    /// `$uri`: normalised, decoded; changes on internal redirects.
    uri: Vec<u8>,
    /// `$args`.
    args: Option<Vec<u8>>,
    loc: Arc<LocConf>,
    /// `$1`.., of `capture_uri`.
    captures: LazyCaptures<'a>,
    /// The value the captures refer to: the URI, or the subject of the last regex test.
    capture_uri: Vec<u8>,
    named: Option<String>,
    internal: bool,
    /// A `set $args` gave the request new arguments: as after an internal redirect, a
    /// proxied request's URI is made from `$uri` and `$args`, not taken from the request line.
    args_set: bool,
    /// Whether no `rewrite ... break` (at server or location level) changed the URI in place
    /// since the request began or was last redirected (nginx's `valid_location`).
    location_uri: bool,
    /// The server's rewrite directives are due: at the start and after an internal redirect.
    server_rewrite: bool,
    redirects: u32,
    error_page_used: bool,
    /// The location's `limit_except` restricts the request's method: the block's settings
    /// stand for the location's from the access phase on (its access log too).
    restricted: bool,
    start: Instant,
    /// Values of `set` variables, by slot; `None` until set.
    vars: std::cell::RefCell<Vec<Option<Vec<u8>>>>,
    /// The modules' state of this request that their variables keep (see [`Self::var_ctx`]).
    var_ctx: std::cell::RefCell<Vec<Rc<dyn std::any::Any>>>,
    /// The bytes of a body made as it was sent ([`Body::Stream`]), once sent, for
    /// `$body_bytes_sent`.
    streamed: std::cell::Cell<Option<u64>>,
    /// `$request_id`, made when first used.
    request_id: std::cell::OnceCell<[u8; 32]>,
    /// The last upstream response's head, for `$upstream_http_*` (kept only when the
    /// configuration reads one).
    upstream_head: std::cell::RefCell<Option<portcullis_http::ResponseHead>>,
    /// What a proxied response's head said beside its upstream's, for `$sent_http_*`.
    sent_fields: std::cell::RefCell<Option<SentFields>>,
    /// The response could not be sent whole (`$request_completion`).
    incomplete: std::cell::Cell<bool>,
    /// `$request_body`: the body as read whole for the upstream.
    request_body: std::cell::RefCell<Option<Bytes>>,
    /// The length of the body once read whole: `$content_length` of a chunked one.
    body_length: std::cell::Cell<Option<u64>>,
    /// The bytes the body read whole took on the connection (a chunked one's framing too),
    /// which `$request_length` counts after the head's.
    body_taken: std::cell::Cell<u64>,
    /// The status decided so far, for `$status` before the response exists.
    status: u16,
    /// The status an error_page redirect keeps (nginx's err_status): `$status` shows it.
    err_status: Option<u16>,
    /// Whether the request came over HTTP/2. Its head is the HTTP/1.1 one it stands for, so
    /// `$server_protocol` and `$request` say "HTTP/2.0" from this.
    http2: bool,
    /// `$proxy_host` and `$proxy_port` of the proxy_pass being prepared.
    proxy_host: bytes::Bytes,
    proxy_port: u16,
    /// The upstream response headers the running exchange ignores (`proxy_ignore_headers`,
    /// `fastcgi_ignore_headers`), as `upstream::cache::ignore` bits.
    upstream_ignores: std::cell::Cell<u8>,
    /// The upstream attempts, for `$upstream_*`: those of each exchange of the request (one
    /// an error_page or X-Accel-Redirect followed, then the next).
    upstream_attempts: Vec<crate::upstream::Attempt>,
    /// The attempts of the request's subrequests, which `$upstream_*` do not show but the
    /// peers' counters count.
    other_attempts: std::cell::RefCell<Vec<crate::upstream::Attempt>>,
    /// `$upstream_cache_status`.
    cache_status: std::cell::Cell<Option<&'static str>>,
    /// The `Content-Range` of a proxied response the cache cuts to a range.
    range_field: std::cell::RefCell<Option<Vec<u8>>>,
    /// The proxied response is the cache's (answered or stored): nginx's range filter
    /// takes part, and writes `Accept-Ranges` last.
    cache_ranges: std::cell::Cell<bool>,
    /// Subrequests to run once the response went out (`mirror`): a URI, and whether the
    /// request's body goes with it.
    background: Vec<(Vec<u8>, bool)>,
    /// The modules' state of this request, one value of each module's own type.
    ctx: Vec<Box<dyn std::any::Any>>,
    /// The modules' state a request shares with its subrequests (nginx's contexts of
    /// `r->main`), one value of each module's own type.
    main_ctx: Rc<std::cell::RefCell<Vec<Rc<dyn std::any::Any>>>>,
    /// How many subrequests deep the request is: 0 for the main one.
    depth: usize,
    /// `WWW-Authenticate` values of the access phase's refusals; they survive an error_page
    /// redirect.
    www_authenticate: Vec<Vec<u8>>,
    /// The access handlers' verdicts before one that waited, by pass (internal redirects)
    /// and module: when the phases run again after the wait, those handlers are not asked
    /// again (nginx resumes the phase where it stopped).
    verdicts: Vec<(u32, usize, Verdict)>,
    /// A subrequest (a JWT key request): as in nginx, it skips the access phase.
    subrequest: bool,
    /// What the phases stopped for, awaited by [`Request::run`].
    suspended: Option<Box<dyn Suspension>>,
    /// `$limit_rate`: set by `set` (or `X-Accel-Limit-Rate`), or fixed from `limit_rate`
    /// when the response begins; `None` before either.
    limit_rate: std::cell::Cell<Option<u64>>,
    /// `add_trailer`: the trailers the response ends with, as the header filter chose them
    /// for its status; then, once sent, their values (`$sent_trailer_*`).
    trailers: std::cell::RefCell<Option<Arc<[Trailer]>>>,
    /// The status of the response the trailers end (`$status` in their values).
    trailer_status: std::cell::Cell<u16>,
    /// The trailers' values were read.
    trailers_read: std::cell::Cell<bool>,
    sent_trailers: std::cell::RefCell<Vec<(String, Vec<u8>)>>,
}

/// One trailer a response ends with (`add_trailer`), its value read when the body is whole.
pub(crate) struct Trailer {
    pub name: String,
    pub value: Template,
}

impl<'a> Request<'a> {
    pub fn new(
        worker: &'a Rc<Worker>,
        server: &'a Arc<ServerConf>,
        conn: &'a ConnInfo,
        head: RequestHead,
        start: Instant,
    ) -> Request<'a> {
        let method = head.method();
        let args = head.query().filter(|q| !q.is_empty()).map(<[u8]>::to_vec);
        Request {
            worker,
            server,
            // Made by `crate::compile` for every configuration: without them no access
            // handler would run, so a configuration that lacked them must not serve.
            phases: Phases::of_server(server),
            conn,
            peer: conn.peer,
            method,
            uri: Vec::new(),
            args,
            loc: server.conf.clone(),
            captures: LazyCaptures::default(),
            capture_uri: Vec::new(),
            named: None,
            internal: false,
            args_set: false,
            location_uri: true,
            server_rewrite: true,
            redirects: 0,
            error_page_used: false,
            restricted: false,
            limit_rate: std::cell::Cell::new(None),
            trailers: std::cell::RefCell::new(None),
            trailer_status: std::cell::Cell::new(0),
            trailers_read: std::cell::Cell::new(false),
            sent_trailers: std::cell::RefCell::new(Vec::new()),
            start,
            vars: std::cell::RefCell::default(),
            var_ctx: Default::default(),
            main_ctx: Default::default(),
            depth: 0,
            streamed: Default::default(),
            request_id: std::cell::OnceCell::new(),
            upstream_head: std::cell::RefCell::default(),
            sent_fields: std::cell::RefCell::default(),
            incomplete: std::cell::Cell::new(false),
            request_body: std::cell::RefCell::default(),
            body_length: std::cell::Cell::default(),
            body_taken: std::cell::Cell::default(),
            status: 0,
            err_status: None,
            http2: false,
            proxy_host: bytes::Bytes::new(),
            proxy_port: 0,
            upstream_ignores: std::cell::Cell::new(0),
            upstream_attempts: Vec::new(),
            other_attempts: std::cell::RefCell::default(),
            cache_status: Default::default(),
            range_field: Default::default(),
            cache_ranges: Default::default(),
            background: Vec::new(),
            ctx: Vec::new(),
            www_authenticate: Vec::new(),
            verdicts: Vec::new(),
            subrequest: false,
            suspended: None,
            head,
            main_head: None,
        }
    }

    /// A subrequest of this request with `head`, internal and without the access phase.
    pub(crate) fn subrequest(&self, head: RequestHead) -> Request<'a> {
        let mut sub = Request::new(self.worker, self.server, self.conn, head, Instant::now());
        sub.http2 = self.http2;
        sub.internal = true;
        sub.subrequest = true;
        sub.main_head = Some(Box::new(self.main_head().clone()));
        sub.peer = self.peer;
        // nginx's subrequests share the main request's variables: the subrequest starts
        // with their values (`set` ones and `$request_id`).
        sub.vars = self.vars.clone();
        sub.main_ctx = self.main_ctx.clone();
        sub.depth = self.depth + 1;
        let _ = sub.request_id.set(*self.request_id.get_or_init(random_id));
        sub
    }

    /// A subrequest of `uri` to run once the response went out, with the request's body
    /// when `body` says so (and the body was read whole).
    pub(crate) fn add_background(&mut self, uri: &[u8], body: bool) {
        self.background.push((uri.to_vec(), body));
    }

    /// Whether a copy of the request (`mirror_request_body`) takes its body and the body
    /// was not read yet: it is then read whole before the response, as nginx's mirror
    /// reads it before the content.
    pub(crate) fn copies_body(&self) -> bool {
        self.background.iter().any(|(_, with_body)| *with_body)
            && self.request_body.borrow().is_none()
            && !matches!(self.head.body(), portcullis_http::BodyKind::None)
    }

    /// The body read whole before (for an upstream or a copy of the request), if it was.
    pub(crate) fn read_request_body(&self) -> Option<Bytes> {
        self.request_body.borrow().clone()
    }

    /// The subrequests [`add_background`](Self::add_background) asked for, each with the
    /// request's body when it is to go with it, to run now.
    pub(crate) fn take_background(&mut self) -> Vec<(Vec<u8>, Option<Bytes>)> {
        let body = self.request_body.borrow().clone();
        std::mem::take(&mut self.background)
            .into_iter()
            .map(|(uri, with_body)| (uri, body.clone().filter(|_| with_body)))
            .collect()
    }

    /// The head of the main request: this one's, or, for a subrequest, its main request's.
    fn main_head(&self) -> &RequestHead {
        self.main_head.as_deref().unwrap_or(&self.head)
    }

    /// Makes the request as it was before [`process`](Self::process), keeping the modules'
    /// state (what a subrequest fetched), for the phases to run again.
    pub(crate) fn restart(&mut self) {
        let head = self.head.clone();
        let mut fresh = Request::new(self.worker, self.server, self.conn, head, self.start);
        fresh.http2 = self.http2;
        fresh.main_head = self.main_head.take();
        fresh.peer = self.peer;
        fresh.ctx = std::mem::take(&mut self.ctx);
        fresh.verdicts = std::mem::take(&mut self.verdicts);
        fresh.request_id = std::mem::take(&mut self.request_id);
        fresh.other_attempts = std::mem::take(&mut self.other_attempts);
        *self = fresh;
    }

    /// `$server_protocol`.
    fn protocol(&self) -> &'static str {
        if self.http2 {
            "HTTP/2.0"
        } else {
            self.head.version().as_str()
        }
    }

    /// `$request`: the request line as it came (every byte, UTF-8 or not), with the version
    /// the request came with.
    fn request_line(&self) -> std::borrow::Cow<'_, [u8]> {
        let line = self.main_head().request_line_bytes();
        match line.strip_suffix(b"HTTP/1.1").filter(|_| self.http2) {
            Some(rest) => std::borrow::Cow::Owned([rest, b"HTTP/2.0"].concat()),
            None => std::borrow::Cow::Borrowed(line),
        }
    }

    /// A module's state of this request, if it has made one.
    pub(crate) fn ctx<T: 'static>(&self) -> Option<&T> {
        self.ctx.iter().find_map(|c| c.downcast_ref())
    }

    /// A module's state of this request, made on first use.
    pub(crate) fn ctx_mut<T: Default + 'static>(&mut self) -> &mut T {
        let i = match self.ctx.iter().position(|c| c.is::<T>()) {
            Some(i) => i,
            None => {
                self.ctx.push(Box::new(T::default()));
                self.ctx.len() - 1
            }
        };
        self.ctx[i].downcast_mut().expect("the type just found")
    }

    /// A module's state of this request for its variable handlers, which see the request
    /// shared: made on first use, and held by the handler by reference so that computing a
    /// variable may read another of the same module.
    pub(crate) fn var_ctx<T: Default + 'static>(&self) -> Rc<T> {
        let mut ctx = self.var_ctx.borrow_mut();
        if let Some(c) = ctx.iter().find(|c| c.is::<T>()) {
            return c.clone().downcast().expect("the type just found");
        }
        let c = Rc::new(T::default());
        ctx.push(c.clone());
        c
    }

    /// How many subrequests deep the request is: 0 for the main one.
    pub(crate) fn depth(&self) -> usize {
        self.depth
    }

    /// A module's state that the request shares with its subrequests and theirs (made on
    /// first use by any of them).
    pub(crate) fn main_ctx<T: Default + 'static>(&self) -> Rc<T> {
        let mut ctx = self.main_ctx.borrow_mut();
        if let Some(c) = ctx.iter().find(|c| c.is::<T>()) {
            return c.clone().downcast().expect("the type just found");
        }
        let c = Rc::new(T::default());
        ctx.push(c.clone());
        c
    }

    /// A module's state in this worker (what its `Module::worker` made).
    pub(crate) fn worker_state<T: 'static>(&self) -> Option<&'a T> {
        let worker: &'a Rc<Worker> = self.worker;
        worker.modules.iter().find_map(|m| m.downcast_ref())
    }

    /// Whether this is a subrequest (`auth_request`, a JWT key request).
    pub(crate) fn is_subrequest(&self) -> bool {
        self.subrequest
    }

    /// How many internal redirects and location restarts the request has gone through.
    pub(crate) fn redirects(&self) -> u32 {
        self.redirects
    }

    /// The client's address: the connection's, or the one a module set in its place.
    pub(crate) fn peer(&self) -> std::net::SocketAddr {
        self.peer
    }

    /// The address of the connection's other end, whatever the request took in its place.
    pub(crate) fn connection_peer(&self) -> std::net::SocketAddr {
        self.conn.peer
    }

    /// What the connection's PROXY protocol header named (`listen ... proxy_protocol`).
    pub(crate) fn proxy_protocol(&self) -> Option<&crate::conn::proxy_protocol::ProxyProtocol> {
        self.conn.proxy_protocol.as_deref()
    }

    /// Takes `addr` as the client's address for the rest of the request (nginx's realip).
    pub(crate) fn set_peer(&mut self, addr: std::net::SocketAddr) {
        self.peer = addr;
    }

    /// When the request's head was read.
    /// Records the body bytes of a [`Body::Stream`] sent.
    pub(crate) fn set_streamed(&self, bytes: u64) {
        self.streamed.set(Some(bytes));
    }

    /// The connection and request counts of the whole server, as `stub_status` shows them.
    pub(crate) fn stats(&self) -> crate::stats::Totals {
        self.worker.shared.stats.totals()
    }

    /// Each worker's `stub_status` counters.
    pub(crate) fn worker_stats(&self) -> Vec<crate::stats::Totals> {
        self.worker.shared.stats.per_worker()
    }

    pub(crate) fn started(&self) -> Instant {
        self.start
    }

    /// The server block that took the request.
    pub(crate) fn server(&self) -> &'a Arc<ServerConf> {
        self.server
    }

    /// The request's head as it came (an HTTP/2 request's, as the HTTP/1.1 one it stands
    /// for).
    pub(crate) fn head(&self) -> &RequestHead {
        &self.head
    }

    /// The settings of the location the request is in (or of its `if` block).
    pub(crate) fn loc(&self) -> &Arc<LocConf> {
        &self.loc
    }

    /// Marks the request as one that came over HTTP/2 (for `$server_protocol`, `$request`
    /// and the error log).
    pub(crate) fn set_http2(&mut self) {
        self.http2 = true;
    }

    /// The address the request came to (`$server_addr`).
    pub(crate) fn local_addr(&self) -> std::net::SocketAddr {
        self.conn.local
    }

    /// Every attempt the request made of upstreams: its exchanges' (which `$upstream_*` show)
    /// and its subrequests'.
    pub(crate) fn each_attempt(&self, f: &mut dyn FnMut(&crate::upstream::Attempt)) {
        self.upstream_attempts.iter().for_each(&mut *f);
        self.other_attempts.borrow().iter().for_each(f);
    }

    /// What an upstream exchange tried, for `$upstream_*` and the access log, after what
    /// the request's earlier exchanges tried.
    pub(crate) fn set_upstream_attempts(&mut self, mut attempts: Vec<crate::upstream::Attempt>) {
        if self.upstream_attempts.is_empty() {
            // The first exchange's list becomes the request's: no copy.
            self.upstream_attempts = attempts;
            return;
        }
        if let Some(first) = attempts.first_mut() {
            first.next_exchange = true;
        }
        self.upstream_attempts.extend(attempts);
    }

    /// A finished subrequest's attempts, counted with the request's.
    pub(crate) fn keep_subrequest_attempts(&self, sub: &Request<'_>) {
        if sub.upstream_attempts.is_empty() && sub.other_attempts.borrow().is_empty() {
            return;
        }
        let mut mine = self.other_attempts.borrow_mut();
        mine.extend(sub.upstream_attempts.iter().cloned());
        mine.extend(sub.other_attempts.borrow().iter().cloned());
    }

    /// The method the request runs with: its own, or GET after an upstream's
    /// `X-Accel-Redirect`.
    pub(crate) fn method(&self) -> &Method {
        &self.method
    }

    /// Whether `$uri` and `$args` are still what the request line says, so that a proxied
    /// request may send that line's URI as it came (nginx's `valid_unparsed_uri`).
    pub(crate) fn target_as_sent(&self) -> bool {
        !self.internal && !self.args_set
    }

    /// The body was read whole, taking `bytes` on the connection (for `$request_length`).
    pub(crate) fn body_taken(&self, bytes: u64) {
        self.body_taken.set(bytes);
    }

    /// `set $args`: the request's arguments from now on.
    pub(crate) fn set_args_variable(&mut self, args: Vec<u8>) {
        self.args = Some(args);
        self.args_set = true;
    }

    /// The host and port of the upstream the request goes to (`$proxy_host`, `$proxy_port`),
    /// once [`proxy_target`](Self::proxy_target) chose it; 0 for a port not shown.
    pub(crate) fn proxy_host(&self) -> &[u8] {
        &self.proxy_host
    }

    pub(crate) fn proxy_port(&self) -> u16 {
        self.proxy_port
    }

    /// The upstream response headers the running exchange ignores, as
    /// `upstream::cache::ignore` bits (`X-Accel-Charset` for the charset module).
    pub(crate) fn upstream_ignores(&self) -> u8 {
        self.upstream_ignores.get()
    }

    pub(crate) fn set_upstream_ignores(&self, bits: u8) {
        self.upstream_ignores.set(bits);
    }

    /// `$uri`: normalised, decoded.
    pub(crate) fn uri(&self) -> &[u8] {
        &self.uri
    }

    /// `$args`.
    pub(crate) fn args(&self) -> Option<&[u8]> {
        self.args.as_deref()
    }

    /// Takes `$args` away, for a rewrite to make new ones ([`set_args`](Self::set_args)).
    /// `$arg_name`: the value of the first argument called `name` (any case).
    pub(crate) fn arg(&self, name: &[u8]) -> Option<&[u8]> {
        self.args
            .as_deref()?
            .split(|&b| b == b'&')
            .find_map(|pair| {
                let (k, val) = match pair.iter().position(|&b| b == b'=') {
                    Some(i) => (&pair[..i], &pair[i + 1..]),
                    None => (pair, &b""[..]),
                };
                k.eq_ignore_ascii_case(name).then_some(val)
            })
    }

    /// `$cookie_name`: the value of the first cookie called `name` (any case), in any of the
    /// request's Cookie headers, as nginx looks for it.
    pub(crate) fn cookie(&self, name: &str) -> Option<&[u8]> {
        let name = name.as_bytes();
        (self.head.header_values("cookie")).find_map(|c| cookie_in(c, name))
    }

    pub(crate) fn take_args(&mut self) -> Option<Vec<u8>> {
        self.args.take()
    }

    pub(crate) fn set_args(&mut self, args: Option<Vec<u8>>) {
        self.args = args;
    }

    /// An internal rewrite of the URI: the request is internal from now on.
    pub(crate) fn rewrite_uri(&mut self, uri: Vec<u8>) {
        self.uri = uri;
        self.internal = true;
        self.location_uri = false;
    }

    /// Whether a proxy_pass URI part replaces the location's prefix in the URI: not after a
    /// `rewrite ... break`, where the URI goes upstream whole, as nginx sends it.
    pub(crate) fn location_uri(&self) -> bool {
        self.location_uri
    }

    /// Whether the URI is sent escaped when a proxied request's is built from it: when the
    /// client's had an escape, or it was changed here (nginx's `quoted_uri || internal`).
    pub(crate) fn uri_needs_escape(&self) -> bool {
        self.internal || self.head.path().contains(&b'%')
    }

    /// The captures of a regex matched against `subject`, for `$1` to `$9`; `None` clears
    /// them (a failed match).
    pub(crate) fn set_captures(&mut self, captures: Option<(Captures, Vec<u8>)>) {
        match captures {
            Some((captures, subject)) => {
                self.captures.set(Captured::Groups(captures));
                self.capture_uri = subject;
            }
            None => self.captures.set(Captured::None),
        }
    }

    /// `$n` of the last regex that matched with captures.
    pub(crate) fn capture(&self, n: usize) -> &[u8] {
        let uri = &self.capture_uri;
        self.captures.get(uri).get(uri, n)
    }

    /// The request goes on in the configuration of an `if` block whose condition held (a
    /// location of its own in nginx).
    pub(crate) fn enter_if(&mut self, conf: &Arc<LocConf>) {
        self.loc = conf.clone();
    }

    pub fn is_head(&self) -> bool {
        self.head.method() == Method::Head
    }

    /// Runs the phases, awaiting what they stop for, and returns the response to send.
    pub(crate) async fn run(&mut self) -> Response {
        loop {
            let resp = self.process();
            let Some(wait) = self.suspended.take() else {
                return resp;
            };
            wait.resume(self).await;
            self.restart();
        }
    }

    /// The groups of the `server_name` regex that chose this server, as nginx sets them when
    /// it chooses a server by regex: `$1`.. of the host (taken when first read), and its
    /// named groups as variables. A server chosen by one of its other names ran no regex.
    fn set_server_name_captures(&mut self) {
        let server: &'a Arc<ServerConf> = self.server;
        let host = self.head.host_bytes().unwrap_or_default();
        if (server.plain_names.iter()).any(|n| crate::conf::plain_name_matches(n, host)) {
            return;
        }
        let Some((re, slots)) = server.name_regexes.iter().find(|(re, _)| re.is_match(host)) else {
            return;
        };
        if re.captures_len() == 1 {
            return;
        }
        let host = host.to_vec();
        if slots.is_empty() {
            self.capture_uri = host;
            self.captures.set(Captured::Later(re));
            return;
        }
        let Some(c) = re.captures(&host) else {
            return;
        };
        for &(group, slot) in slots {
            let value = c.get(group).map_or(&[][..], |m| m.as_bytes());
            self.set_var(slot, value.to_vec());
        }
        let captures = Captures::from_match(&c);
        self.set_captures(Some((captures, host)));
    }

    /// Runs the phases once and returns the response to send, or a placeholder when they
    /// stopped for a [`Suspension`].
    pub fn process(&mut self) -> Response {
        match portcullis_http::normalize_path(self.head.path(), self.conn.merge_slashes) {
            Ok(uri) => self.uri = uri,
            Err(e) => {
                self.log(Level::Info, e.reason());
                let mut r = Response::error_page(400, 400, self.server.conf.server_tokens);
                r.close = true;
                return r;
            }
        }
        // A subrequest chooses no server, and starts without captures.
        if self.server.name_groups && !self.subrequest {
            self.set_server_name_captures();
        }
        let refused = match self.head.method() {
            Method::Trace => Some("TRACE"),
            Method::Connect => Some("CONNECT"),
            _ => None,
        };
        if let Some(method) = refused {
            // nginx answers every TRACE and CONNECT before it looks for a location: the
            // server's error_page may answer it, and the connection closes.
            self.log(
                Level::Info,
                &format!("client sent {method} method while reading client request headers"),
            );
            let mut r = self.finalize_error(405);
            r.close = true;
            return r;
        }
        if !self.subrequest {
            let phases = self.phases;
            let server: &Arc<ServerConf> = self.server;
            for (_, postread, conf) in phases.postread.at(&server.conf.modules) {
                postread(self, conf);
            }
        }
        let mut step = Step::Again;
        let mut resp = loop {
            step = match step {
                Step::Again => self.run_location(),
                Step::Done(r) => break r,
                Step::Status(code) => break self.finalize_error(code),
                // What is answered is decided once the keys are fetched.
                Step::Suspend => return Response::new(500),
            };
        };
        // An access handler's challenge stays on the response through error_page redirects,
        // whatever their status, as nginx keeps it among the response's fields.
        for challenge in std::mem::take(&mut self.www_authenticate) {
            resp.header("WWW-Authenticate", &challenge);
        }
        resp
    }

    /// One pass: find the location, then rewrite, access, try_files and content.
    fn run_location(&mut self) -> Step {
        // Until the location is found, and its limit_except asked.
        self.restricted = false;
        if self.redirects > MAX_REDIRECTS {
            let uri = String::from_utf8_lossy(&self.uri).into_owned();
            self.log(Level::Error, &format!("rewrite or internal redirection cycle while internally redirecting to \"{uri}\""));
            return Step::Status(500);
        }
        self.redirects += 1;
        if self.named.is_none() && std::mem::take(&mut self.server_rewrite) {
            let server: &Arc<ServerConf> = self.server;
            self.loc = server.conf.clone();
            if let Rewritten::Stop(step) = self.rewrite_phase(&server.conf) {
                return step;
            }
        }
        let mut slash_redirect = false;
        if let Some(name) = self.named.take() {
            match self.server.named_location(&name) {
                Some(l) => self.loc = l.clone(),
                None => {
                    self.log(
                        Level::Error,
                        &format!("could not find named location \"{name}\""),
                    );
                    return Step::Status(500);
                }
            }
        } else {
            // The server's own reference: a match borrows the configuration, not the request.
            let server = self.server;
            let found = match server.find_location(&self.uri) {
                Ok(found) => found,
                Err(_) => {
                    let uri = String::from_utf8_lossy(&self.uri).into_owned();
                    self.log(
                        Level::Error,
                        &format!("location regex could not be matched on \"{uri}\""),
                    );
                    return Step::Status(500);
                }
            };
            match found {
                Some(m) if m.redirect => {
                    self.loc = m.conf.clone();
                    slash_redirect = true;
                }
                Some(m) => {
                    self.loc = m.conf.clone();
                    // A regex location's groups replace the captures, as ranges of this URI,
                    // which a rewrite may change. A prefix location ran no regex, and keeps
                    // what the server name, a rewrite or an earlier location captured.
                    if !matches!(m.captures, Captured::None) {
                        self.capture_uri.clone_from(&self.uri);
                        self.captures.set(m.captures);
                    }
                    // A regex location's named groups are variables, as in nginx.
                    if !self.loc.named_slots.is_empty() {
                        let loc = self.loc.clone();
                        for &(group, slot) in &loc.named_slots {
                            let value = self.capture(group).to_vec();
                            self.set_var(slot, value);
                        }
                    }
                }
                None => self.loc = self.server.conf.clone(),
            }
        }
        let loc = self.loc.clone();
        if loc.internal && !self.internal {
            return Step::Status(404);
        }
        // As nginx, a method limit_except restricts switches the request to the limit_except
        // block, which has its own access rules (and access log) and none of the location's
        // rewrite directives: at once, so that what the request meets from here on (a body
        // too large, the redirect to the slashed URI) is logged by the block.
        let restricted = loc.limit_except.as_ref().filter(|le| {
            let mut bit = crate::conf::method_bit(self.head.method_str());
            if bit == crate::conf::method_bit("HEAD") {
                bit |= crate::conf::method_bit("GET");
            }
            le.methods & bit == 0
        });
        self.restricted = restricted.is_some();
        if let portcullis_http::BodyKind::Length(n) = self.head.body() {
            if loc.client_max_body_size != 0 && n > loc.client_max_body_size {
                self.log(
                    Level::Error,
                    &format!("client intended to send too large body: {n} bytes"),
                );
                return Step::Status(413);
            }
        }
        if slash_redirect {
            // `location /x/ { proxy_pass ...; }` and a request for /x: after those checks,
            // as nginx's find-config phase, the client is sent to /x/ with its arguments,
            // before the rewrite and access phases.
            let location = self.with_slash();
            return self.redirect_response(301, &location);
        }
        // No location matched: the server's settings stand in for one, and its rewrite
        // directives ran already (nginx skips the phase for this "null location").
        let null_location = Arc::ptr_eq(&loc, &self.server.conf);
        if restricted.is_none() && !null_location {
            match self.rewrite_phase(&loc) {
                Rewritten::Next => {}
                Rewritten::Reroute if self.redirects > MAX_REDIRECTS => {
                    let uri = String::from_utf8_lossy(&self.uri).into_owned();
                    self.log(
                        Level::Error,
                        &format!(
                            "rewrite or internal redirection cycle while processing \"{uri}\""
                        ),
                    );
                    return Step::Status(500);
                }
                Rewritten::Reroute => return Step::Again,
                Rewritten::Stop(step) => return step,
            }
        }
        // An `if` that held may have switched the request to its block's configuration.
        let loc = self.loc.clone();
        // A subrequest runs the limits (as nginx's do, its main request's limits counted
        // once) but not the access phase.
        if let Some(step) = self.preaccess(&loc, restricted) {
            return step;
        }
        if !self.subrequest {
            if let Some(step) = self.access(&loc, restricted) {
                return step;
            }
        }
        // A method `limit_except` restricts runs in the block, which has no `try_files`.
        if let Some(tf) = loc.try_files.as_ref().filter(|_| restricted.is_none()) {
            for (t, test_dir) in &tf.files {
                let value = self.eval(t);
                let path = self.map_path(&value);
                let is_dir = std::fs::metadata(&path).map(|m| m.is_dir());
                if let Ok(is_dir) = is_dir {
                    // An item tests for a directory when it is written with a final `/`, not
                    // when its value ends with one (`$uri` of `/dir/` is no directory test).
                    if is_dir == *test_dir {
                        // nginx leaves a `dir/` item's final slash out, so a directory found
                        // this way gets the 301 to its slashed form.
                        let mut value = value;
                        if *test_dir {
                            value.pop();
                        }
                        self.uri = value;
                        return self.content();
                    }
                }
            }
            return match &tf.last {
                TryLast::Code(c) => Step::Status(*c),
                TryLast::Named(n) => {
                    self.named = Some(n.clone());
                    self.internal = true;
                    Step::Again
                }
                TryLast::Uri(t) => {
                    let target = self.eval(t);
                    self.redirect_to(target, false);
                    // nginx's try_files leaves the arguments it drops empty, where its
                    // error_page leaves none: `$args` logs as nothing, not `-`.
                    self.args.get_or_insert_with(Vec::new);
                    Step::Again
                }
            };
        }
        self.content()
    }

    /// The settings the access phases run with: the location's, or those of the
    /// `limit_except` block that restricts the method.
    fn access_confs<'c>(
        loc: &'c LocConf,
        restricted: Option<&'c Arc<crate::conf::LimitExcept>>,
    ) -> &'c Confs {
        restricted
            .and_then(|le| le.modules.as_ref())
            .unwrap_or(&loc.modules)
    }

    /// The preaccess phase, as nginx's: the limits (`limit_req`), before the access phase
    /// and outside `satisfy`: a refusal ends the request. `None` lets it go on.
    fn preaccess(
        &mut self,
        loc: &LocConf,
        restricted: Option<&Arc<crate::conf::LimitExcept>>,
    ) -> Option<Step> {
        let phases = self.phases;
        let confs = Self::access_confs(loc, restricted);
        if !confs.any_active(phases.preaccess.modules) {
            return None;
        }
        for (_, preaccess, conf) in phases.preaccess.at(confs) {
            match preaccess(self, conf) {
                Access::Declined | Access::Allowed => {}
                Access::Denied { status, .. } => return Some(Step::Status(status)),
                Access::Wait(wait) => {
                    self.suspended = Some(wait);
                    return Some(Step::Suspend);
                }
            }
        }
        None
    }

    /// The access phase, as nginx's: each module's handler with the location's settings
    /// (or those of the `limit_except` block that restricts the method). With `satisfy all`
    /// every handler must admit the request or have nothing to check; with `satisfy any` the
    /// first to admit it ends the phase, and if none does a refusal stands, a 401 before a
    /// 403, with the challenges of every 401. `None` admits the request.
    fn access(
        &mut self,
        loc: &LocConf,
        restricted: Option<&Arc<crate::conf::LimitExcept>>,
    ) -> Option<Step> {
        let confs = Self::access_confs(loc, restricted);
        let phases = self.phases;
        if !confs.any_active(phases.access.modules) {
            return None;
        }
        let any = loc.satisfy_any;
        let mut refused: Option<u16> = None;
        let mut challenges = Vec::new();
        let pass = self.redirects;
        // This pass's verdicts, kept with the request only if a handler makes it wait.
        let mut decided: [Option<(usize, Verdict)>; 8] = Default::default();
        for (n, (i, access, conf)) in phases.access.at(confs).enumerate() {
            let replayed = self
                .verdicts
                .iter()
                .find(|(p, m, _)| (*p, *m) == (pass, i))
                .map(|(_, _, v)| v.clone());
            let verdict = match replayed {
                Some(v) => v,
                None => {
                    let v = match access(self, conf) {
                        Access::Wait(wait) => {
                            let before = decided.into_iter().flatten();
                            self.verdicts.extend(before.map(|(m, v)| (pass, m, v)));
                            self.suspended = Some(wait);
                            return Some(Step::Suspend);
                        }
                        Access::Declined => Verdict::Declined,
                        Access::Allowed => Verdict::Allowed,
                        Access::Denied { status, challenge } => Verdict::Denied(status, challenge),
                    };
                    if let Some(slot) = decided.get_mut(n) {
                        *slot = Some((i, v.clone()));
                    }
                    v
                }
            };
            match verdict {
                Verdict::Declined => {}
                Verdict::Allowed if any => return None,
                Verdict::Allowed => {}
                Verdict::Denied(status, challenge) => {
                    if !any || !matches!(status, 401 | 403) {
                        self.www_authenticate.extend(challenge);
                        return Some(Step::Status(status));
                    }
                    challenges.extend(challenge);
                    if refused != Some(401) {
                        refused = Some(status);
                    }
                }
            }
        }
        let status = refused?;
        self.www_authenticate.extend(challenges);
        Some(Step::Status(status))
    }

    /// An internal redirect to `target`, which may carry `?args`. Without them, the request's
    /// arguments stay only for index redirects (`keep_args`); try_files and error_page
    /// redirects drop them, as in nginx.
    pub(crate) fn redirect_to(&mut self, target: Vec<u8>, keep_args: bool) {
        match target.iter().position(|&b| b == b'?') {
            Some(q) => {
                self.args = Some(target[q + 1..].to_vec());
                self.uri = target[..q].to_vec();
            }
            None => {
                if !keep_args {
                    self.args = None;
                }
                self.uri = target;
            }
        }
        self.internal = true;
        self.server_rewrite = true;
        self.location_uri = true;
    }

    /// A rewrite phase: each module's handler with its settings of `level` (the server's, or
    /// the location's).
    #[inline]
    fn rewrite_phase(&mut self, level: &LocConf) -> Rewritten {
        // Most levels have nothing to rewrite: not even a call then.
        if !level.modules.any_active(self.phases.rewrite.modules) {
            return Rewritten::Next;
        }
        self.run_rewrite_phase(level)
    }

    #[inline(never)]
    fn run_rewrite_phase(&mut self, level: &LocConf) -> Rewritten {
        let mut rerouted = false;
        let phases = self.phases;
        for (_, rewrite, conf) in phases.rewrite.at(&level.modules) {
            match rewrite(self, conf) {
                Rewritten::Next => {}
                Rewritten::Reroute => rerouted = true,
                stop @ Rewritten::Stop(_) => return stop,
            }
        }
        if rerouted {
            Rewritten::Reroute
        } else {
            Rewritten::Next
        }
    }

    fn content(&mut self) -> Step {
        let loc = self.loc.clone();
        let phases = self.phases;
        // A method the location's `limit_except` restricts is answered with the block's
        // settings (its `proxy_pass`), as nginx runs it in the block's location.
        let restricted = loc.limit_except.as_ref().filter(|_| self.restricted);
        let confs = Self::access_confs(&loc, restricted);
        for (_, content, conf) in phases.content.at(confs) {
            if let Some(step) = content(self, conf) {
                return step;
            }
        }
        for (_, content, conf) in phases.static_content.at(confs) {
            if let Some(step) = content(self, conf) {
                return step;
            }
        }
        // Every handler declined: a directory without an index, as nginx's core content
        // phase answers it.
        if self.uri.ends_with(b"/") {
            self.log(
                Level::Error,
                &format!(
                    "directory index of \"{}\" is forbidden",
                    self.file_path().display()
                ),
            );
            return Step::Status(403);
        }
        Step::Status(404)
    }

    /// The request's conditions (`If-*`, `Range`) and the location's `if_modified_since`.
    /// An error page goes out whole with the error's status: nginx's not_modified and range
    /// filters look only at a response sent as 200 (`error_page 404 =200` makes one).
    pub(crate) fn conditions(&self) -> Conditions<'_> {
        let h = &self.head;
        if self.err_status.is_some_and(|s| s != 200) {
            return Conditions {
                ims: self.loc.if_modified_since,
                ..Conditions::default()
            };
        }
        Conditions {
            if_match: h.header("if-match"),
            if_none_match: h.header("if-none-match"),
            if_modified_since: h
                .header("if-modified-since")
                .map(unreadable_as_before_epoch),
            if_unmodified_since: h
                .header("if-unmodified-since")
                .map(unreadable_as_before_epoch),
            range: h.header("range"),
            if_range: h.header("if-range"),
            ims: self.loc.if_modified_since,
        }
    }

    /// The file the URI names, as the static files map it (`root`, `alias`).
    pub(crate) fn file_path(&self) -> PathBuf {
        self.map_path(&self.uri)
    }

    /// Looks a file up in the worker's open-file cache.
    pub(crate) fn lookup_file(&self, path: &std::path::Path) -> Lookup {
        self.worker.files.borrow_mut().lookup(path)
    }

    /// Whether a module may recode a response's body or filter it whole (which takes its
    /// ranges away).
    pub(crate) fn recodes(&self) -> bool {
        !(self.phases.encode.handlers.is_empty() && self.phases.body.handlers.is_empty())
    }

    /// The type by the URI's extension, else default_type: nginx's ngx_http_set_content_type,
    /// used for files and for `return` text alike.
    pub(crate) fn content_type(&self) -> Arc<str> {
        // A byte that is not UTF-8 elsewhere in the path leaves the extension as it is.
        self.loc
            .types
            .lookup(&String::from_utf8_lossy(&self.uri))
            .cloned()
            .unwrap_or_else(|| self.loc.default_type.clone())
    }

    /// Sets the status decided so far, which `$status` shows before the response exists.
    pub(crate) fn set_status(&mut self, status: u16) {
        self.status = status;
    }

    /// Appends the value a `set` (or a named capture) gave variable `slot` in this request,
    /// if one did; whether one did.
    pub(crate) fn set_value_into(&self, slot: usize, out: &mut Vec<u8>) -> bool {
        match self.vars.borrow().get(slot) {
            Some(Some(v)) => {
                out.extend_from_slice(v);
                true
            }
            _ => false,
        }
    }

    /// The value a `set` or a named capture gave variable `slot`.
    pub(crate) fn set_var(&mut self, slot: usize, value: Vec<u8>) {
        set_slot(self.vars.get_mut(), slot, value);
    }

    /// As [`set_var`](Self::set_var), for what sets a variable while a value is being read:
    /// the named groups of a `map` regex, set when the map is evaluated.
    pub(crate) fn set_var_while_reading(&self, slot: usize, value: Vec<u8>) {
        set_slot(&mut self.vars.borrow_mut(), slot, value);
    }

    /// The URI with a slash added, escaped as nginx escapes it (a space, `%`, `?`, `#`,
    /// controls and bytes past ASCII), and the arguments: where a directory, or a location
    /// that proxies, sends a request for its name without the slash.
    pub(crate) fn with_slash(&self) -> Vec<u8> {
        let mut location = BytesMut::with_capacity(self.uri.len() + 16);
        crate::vars::escape(&self.uri, &mut location, crate::vars::Escape::Uri);
        location.put_u8(b'/');
        if let Some(args) = self.args.as_ref().filter(|a| !a.is_empty()) {
            location.put_u8(b'?');
            location.put_slice(args);
        }
        location.to_vec()
    }

    /// A redirect with nginx's Location rules: a relative URI becomes absolute with the
    /// request's host and port when absolute_redirect is on.
    pub(crate) fn redirect_response(&mut self, code: u16, location: &[u8]) -> Step {
        let value = self.absolute_location(location);
        // nginx finishes a redirect as it finishes an error: the location's error_page for
        // the status answers it. A URL there is the new Location; a page of the server's
        // own (a URI, a named location) goes out with the redirect's.
        if let Some(mut r) = self.error_page_for(code) {
            if r.header_value("Location").is_none() && !matches!(r.body, Body::Proxy(_)) {
                r.header("Location", &value);
            }
            return Step::Done(r);
        }
        let mut r = self.error_response(code);
        r.header("Location", &value);
        Step::Done(r)
    }

    /// `location` made absolute with the request's host and port when it is relative and
    /// absolute_redirect is on.
    fn absolute_location(&self, location: &[u8]) -> Vec<u8> {
        if location.starts_with(b"/") && self.loc.absolute_redirect {
            let mut v = Vec::with_capacity(location.len() + 32);
            let tls = self.conn.tls.is_some();
            v.extend_from_slice(if tls { b"https://" } else { b"http://" });
            // nginx's: the server's name with server_name_in_redirect, else the request's
            // host, else the address the client reached.
            // (An empty server name is written as it is, as nginx writes it.)
            let host = if self.loc.server_name_in_redirect {
                Some(self.server.name.as_bytes())
            } else {
                self.head.host_bytes().filter(|h| !h.is_empty())
            };
            match host {
                Some(host) => v.extend_from_slice(host),
                None => v.extend_from_slice(self.conn.local_addr().ip().to_string().as_bytes()),
            }
            let port = self.conn.local.port();
            // The scheme's own port is left out, as nginx does.
            if self.loc.port_in_redirect && port != if tls { 443 } else { 80 } {
                let _ = write!(v, ":{port}");
            }
            v.extend_from_slice(location);
            v
        } else {
            location.to_vec()
        }
    }

    pub(crate) fn error_response(&self, status: u16) -> Response {
        Response::error_page(status, status, self.loc.server_tokens)
    }

    /// An error status: the location's error_page for it, else the built-in page. As nginx,
    /// the connection closes after these statuses whatever page answers them.
    pub(crate) fn finalize_error(&mut self, status: u16) -> Response {
        // A request ended with 408, 444 or 499 closes without an answer: nginx ends it before
        // any error_page is looked at.
        let page = match status {
            408 | NO_RESPONSE | 499 => None,
            _ => self.error_page_for(status),
        };
        let mut resp = page.unwrap_or_else(|| self.error_response(status));
        resp.close |= matches!(status, 400 | 413 | 414 | 500 | 501);
        resp
    }

    /// A request on a connection whose client certificate was refused (495) or not sent
    /// (496): the server's error_page for the status if it has one (where
    /// `$ssl_client_verify` tells why), else nginx's 400 page saying which. The connection
    /// closes after it.
    pub(crate) fn refuse_client_certificate(&mut self, status: u16) -> Response {
        let mut resp = if self
            .loc
            .error_pages
            .iter()
            .any(|p| p.codes.contains(&status))
        {
            self.finalize_error(status)
        } else {
            Response::error_page(status, 400, self.loc.server_tokens)
        };
        resp.close = true;
        resp
    }

    /// [`finalize_error`](Self::finalize_error) for a status from the upstream exchange:
    /// nginx keeps an intercepted 401's `WWW-Authenticate` on the page that answers it.
    pub(crate) fn finalize_upstream_error(
        &mut self,
        status: u16,
        challenge: Option<Vec<u8>>,
    ) -> Response {
        let mut resp = self.finalize_error(status);
        if let Some(challenge) = challenge.filter(|_| resp.status == 401) {
            resp.header("WWW-Authenticate", &challenge);
        }
        // A range of a cached response that cannot be satisfied says the length.
        if let Some(range) = self.range_field.take().filter(|_| resp.status == 416) {
            resp.header("Content-Range", &range);
        }
        resp
    }

    /// nginx's `X-Accel-Redirect` of an upstream's response: the request goes on at `target`
    /// (`?args` in it, or none), or the named location `@name`, as a GET (a HEAD stays one);
    /// `fields`, those nginx keeps of the upstream's response, go on the new one (its type
    /// over a file's).
    pub(crate) fn accel_redirect(
        &mut self,
        target: Vec<u8>,
        fields: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Response {
        let path = target.split(|&b| b == b'?').next().unwrap_or_default();
        let mut resp = if target.starts_with(b"@") {
            self.named = Some(String::from_utf8_lossy(&target).into_owned());
            self.internal = true;
            self.run_again()
        } else if path.is_empty()
            || path.contains(&0)
            || path.split(|&b| b == b'/').any(|s| s == b"..")
        {
            self.log(
                Level::Error,
                &format!(
                    "unsafe URI \"{}\" was detected",
                    String::from_utf8_lossy(&target)
                ),
            );
            self.finalize_error(404)
        } else {
            if self.method != Method::Head {
                self.method = Method::Get;
            }
            self.redirect_to(target, false);
            self.run_again()
        };
        for (name, value) in fields {
            if name.eq_ignore_ascii_case(b"content-type") {
                // An error's page keeps its own.
                if !resp.is_error {
                    resp.content_type = Some(Arc::from(String::from_utf8_lossy(&value).as_ref()));
                }
            } else {
                resp.header(&String::from_utf8_lossy(&name), &value);
            }
        }
        resp
    }

    /// The answer of the location's error_page for `status`, if one answers it. As in nginx,
    /// none does once the internal redirects are spent, nor after the error pages of a
    /// location without recursive_error_pages were looked at, whether one matched or not:
    /// that location's setting decides, not the setting where the page's target fails.
    fn error_page_for(&mut self, status: u16) -> Option<Response> {
        if self.error_page_used || self.redirects > MAX_REDIRECTS || self.loc.error_pages.is_empty()
        {
            return None;
        }
        let loc = self.loc.clone();
        self.error_page_used = !loc.recursive_error_pages;
        let page = loc.error_pages.iter().find(|p| p.codes.contains(&status))?;
        let overwrite = page.overwrite;
        self.err_status = match overwrite {
            None => Some(status),
            Some(code) => code,
        };
        let mut resp = match &page.target {
            ErrorTarget::Redirect(url) => {
                let url = self.eval(url);
                let code = match overwrite {
                    Some(Some(c @ (301 | 302 | 303 | 307 | 308))) => c,
                    _ => 302,
                };
                let mut r = self.error_response(code);
                r.header("Location", &url);
                r.location_as_field = true;
                return Some(r);
            }
            ErrorTarget::Named(n) => {
                self.named = Some(n.clone());
                self.internal = true;
                self.run_again()
            }
            ErrorTarget::Uri(t) => {
                let target = self.eval(t);
                if self.method != Method::Head {
                    self.method = Method::Get;
                }
                self.redirect_to(target, false);
                self.run_again()
            }
        };
        // The page goes out with the status error_page gives it, unless its target failed
        // in turn: then that error's status is sent, as nginx sends it.
        match overwrite {
            Some(None) => {}
            _ if resp.is_error => {}
            // `=200` lets the range and not_modified filters answer after it, as nginx's
            // run after its status is set.
            Some(Some(200)) if matches!(resp.status, 206 | 304) => {}
            Some(Some(code)) => resp.status = code,
            None => resp.status = status,
        }
        if resp.status != 200 {
            resp.strip_validators();
        }
        Some(resp)
    }

    fn run_again(&mut self) -> Response {
        let mut step = Step::Again;
        loop {
            step = match step {
                Step::Again => self.run_location(),
                Step::Done(r) => return r,
                Step::Status(code) => return self.finalize_error(code),
                Step::Suspend => return Response::new(500),
            };
        }
    }

    /// The file system path for `uri` in the current location: root + uri, or alias in place of
    /// the prefix of the location that set it (a regex location's alias is the whole path).
    fn map_path(&self, uri: &[u8]) -> PathBuf {
        let loc = self.loc.clone();
        let mut out = Vec::with_capacity(64 + uri.len());
        match &loc.alias {
            Some(alias) => {
                let base = self.eval(&alias.path);
                out.extend_from_slice(&base);
                if let Some(replaced) = alias.replaces {
                    out.extend_from_slice(uri.get(replaced..).unwrap_or(b""));
                }
            }
            None => {
                let root = self.eval(&loc.root);
                out.extend_from_slice(&root);
                out.extend_from_slice(uri);
            }
        }
        let p = PathBuf::from(std::ffi::OsStr::from_bytes(&out));
        if p.is_absolute() {
            p
        } else {
            Path::new(&self.worker.generation.borrow().http.prefix).join(p)
        }
    }

    /// The header filter's choice of trailers for the response (`add_trailer`).
    pub(crate) fn expect_trailers(&self, trailers: Arc<[Trailer]>, status: u16) {
        *self.trailers.borrow_mut() = Some(trailers);
        self.trailer_status.set(status);
    }

    /// Whether the response ends with trailers: an HTTP/1.1 one then goes chunked.
    pub(crate) fn expects_trailers(&self) -> bool {
        self.trailers.borrow().is_some()
    }

    /// The trailers' values, read now that the body is whole (those that are empty are not
    /// sent), and kept for `$sent_trailer_*`.
    pub(crate) fn trailer_fields(&self) -> Vec<(String, Vec<u8>)> {
        let Some(trailers) = self.trailers.borrow().clone() else {
            return Vec::new();
        };
        let resp = Response::new(self.trailer_status.get());
        let fields: Vec<(String, Vec<u8>)> = trailers
            .iter()
            .map(|t| (t.name.clone(), self.eval_for(&t.value, &resp)))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        self.sent_trailers.borrow_mut().clone_from(&fields);
        self.trailers_read.set(true);
        fields
    }

    /// Reads the trailers' values if the body's end did not (`$sent_trailer_*`).
    pub(crate) fn read_trailers(&self) {
        if self.expects_trailers() && !self.trailers_read.get() {
            self.trailer_fields();
        }
    }

    /// HTTP/1.1's end of a chunked body: the last chunk and the trailers.
    pub(crate) fn last_chunk(&self, out: &mut BytesMut) {
        if !self.expects_trailers() {
            out.extend_from_slice(portcullis_http::LAST_CHUNK);
            return;
        }
        out.extend_from_slice(b"0\r\n");
        for (name, value) in self.trailer_fields() {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(&value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }

    /// `set $limit_rate`: a size, or an error logged as nginx logs it and no change.
    pub(crate) fn set_limit_rate(&self, value: &[u8]) {
        match std::str::from_utf8(value)
            .ok()
            .and_then(portcullis_config::value::parse_size)
        {
            Some(rate) => self.limit_rate.set(Some(rate)),
            None => self.log(
                Level::Error,
                &format!("invalid $limit_rate \"{}\"", String::from_utf8_lossy(value)),
            ),
        }
    }

    /// The response's pace, fixed when it begins as nginx's write filter fixes it:
    /// `$limit_rate` if set, else `limit_rate`; `None` for no limit.
    pub(crate) fn pace(&self) -> Option<crate::pace::Pace> {
        let rate = match self.limit_rate.get() {
            Some(rate) => rate,
            None => {
                let rate = self.size_of(self.loc.limit_rate.as_ref());
                self.limit_rate.set(Some(rate));
                rate
            }
        };
        if rate == 0 {
            return None;
        }
        let after = self.size_of(self.loc.limit_rate_after.as_ref());
        crate::pace::Pace::new(rate, after, self.pace_start())
    }

    /// `X-Accel-Limit-Rate` of an upstream's response: `$limit_rate` from now on.
    pub(crate) fn limit_rate_from_upstream(&self, rate: u64) {
        self.limit_rate.set(Some(rate));
    }

    /// Where a response's pace counts from.
    pub(crate) fn pace_start(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.start)
    }

    /// `limit_rate_after`, for a rate an upstream sets (`X-Accel-Limit-Rate`).
    pub(crate) fn rate_after(&self) -> u64 {
        self.size_of(self.loc.limit_rate_after.as_ref())
    }

    /// A size directive's value (nginx's `ngx_http_complex_value_size`): 0 when unset or
    /// not a size, which is logged.
    fn size_of(&self, t: Option<&Template>) -> u64 {
        let Some(t) = t else {
            return 0;
        };
        let value = self.eval(t);
        match std::str::from_utf8(&value)
            .ok()
            .and_then(portcullis_config::value::parse_size)
        {
            Some(n) => n,
            None => {
                // Read as the response goes out, as nginx's write filter reads it.
                self.log(
                    Level::Error,
                    &format!(
                        "invalid size \"{}\" while sending response to client",
                        String::from_utf8_lossy(&value)
                    ),
                );
                0
            }
        }
    }

    pub(crate) fn eval(&self, t: &Template) -> Vec<u8> {
        let mut out = Vec::new();
        self.eval_into(t, &mut out);
        out
    }

    /// [`eval`](Self::eval), appending to `out`.
    pub(crate) fn eval_into(&self, t: &Template, out: &mut Vec<u8>) {
        t.eval_into(out, &mut |v, out| self.var(v, out, None));
    }

    /// [`eval`](Self::eval) while `resp` is being made (a header filter): `$sent_http_*`
    /// read its fields so far.
    pub(crate) fn eval_for(&self, t: &Template, resp: &Response) -> Vec<u8> {
        let mut out = Vec::new();
        t.eval_into(&mut out, &mut |v, out| self.var(v, out, Some((resp, 0))));
        out
    }

    /// Whether nginx has a value of `v` when [`var`](Self::var) gives nothing: a header,
    /// argument or cookie there with an empty value, a `set` variable set to "".
    pub(crate) fn has_var(&self, v: &Var) -> bool {
        match v {
            Var::HttpHeader(name) => self.head.header_for_variable(name).is_some(),
            Var::NamedHeader(name) | Var::JoinedHeader(name, _) => self.head.header(name).is_some(),
            Var::Arg(name) => self.arg(name.as_bytes()).is_some(),
            Var::Cookie(name) => self.cookie(name).is_some(),
            Var::Args => self.args.is_some(),
            Var::Set(slot) => self.vars.borrow().get(*slot).is_some_and(Option::is_some),
            Var::SetOr(slot, unset) => {
                self.vars.borrow().get(*slot).is_some_and(Option::is_some) || self.has_var(unset)
            }
            Var::Module(m) => self.phases.empty_values & (1 << m.module) != 0,
            other => other.empty_is_a_value(),
        }
    }

    /// Appends the value of `v`; `resp` gives the response-side values for the access log.
    pub(crate) fn var(&self, v: &Var, out: &mut Vec<u8>, resp: Option<(&Response, u64)>) {
        let h = &self.head;
        match v {
            Var::Args => out.extend_from_slice(self.args.as_deref().unwrap_or(b"")),
            // nginx looks at the length: a bare "?" has no args.
            Var::IsArgs => {
                if self.args.as_ref().is_some_and(|a| !a.is_empty()) {
                    out.push(b'?')
                }
            }
            Var::Arg(name) => out.extend_from_slice(self.arg(name.as_bytes()).unwrap_or(b"")),
            Var::Capture(n) => out.extend_from_slice(self.capture(*n)),
            Var::Uri => out.extend_from_slice(&self.uri),
            Var::RequestUri => {
                out.extend_from_slice(self.main_head().target());
            }
            Var::Host => match h.host_bytes() {
                Some(host) => out.extend_from_slice(host),
                None => out.extend_from_slice(self.server.name.as_bytes()),
            },
            Var::HttpHeader(name) => {
                if let Some(val) = h.header_for_variable(name) {
                    out.extend_from_slice(val)
                }
            }
            Var::NamedHeader(name) => {
                if let Some(val) = h.header(name) {
                    out.extend_from_slice(val)
                }
            }
            Var::JoinedHeader(name, sep) => {
                h.joined_header(name, sep, out);
            }
            Var::Cookie(name) => {
                if let Some(val) = self.cookie(name) {
                    out.extend_from_slice(val);
                }
            }
            Var::ServerName => out.extend_from_slice(self.server.name.as_bytes()),
            Var::ServerProtocol => out.extend_from_slice(self.protocol().as_bytes()),
            Var::Scheme => out.extend_from_slice(if self.conn.tls.is_some() {
                b"https"
            } else {
                b"http"
            }),
            Var::Request => out.extend_from_slice(&self.request_line()),
            // nginx's is the main request's: a subrequest's is its client's method, and an
            // error_page or X-Accel-Redirect to a URI made the request a GET.
            Var::RequestMethod if self.subrequest => {
                out.extend_from_slice(self.main_head().method_str().as_bytes())
            }
            Var::RequestMethod if self.method == Method::Get => out.extend_from_slice(b"GET"),
            Var::RequestMethod => out.extend_from_slice(h.method_str().as_bytes()),
            Var::RequestLength => {
                let length = h.raw().len() as u64 + self.body_taken.get();
                out.extend_from_slice(length.to_string().as_bytes());
            }
            // Mapped from the current URI whenever it is read, as nginx does, so that
            // `if (-f $request_filename)` works in the rewrite phase.
            Var::RequestFilename => {
                out.extend_from_slice(self.map_path(&self.uri).as_os_str().as_bytes())
            }
            Var::DocumentRoot => {
                // A relative root is the prefix's, as nginx makes it at load.
                let root = self.eval(&self.loc.root);
                if root.starts_with(b"/") {
                    out.extend_from_slice(&root);
                } else {
                    let prefix = Path::new(&self.worker.generation.borrow().http.prefix)
                        .join(Path::new(std::ffi::OsStr::from_bytes(&root)));
                    out.extend_from_slice(prefix.as_os_str().as_bytes());
                }
            }
            Var::RealpathRoot => {
                let root = self.eval(&self.loc.root);
                let path = Path::new(std::ffi::OsStr::from_bytes(&root));
                let path = if path.is_absolute() {
                    path.to_path_buf()
                } else {
                    Path::new(&self.worker.generation.borrow().http.prefix).join(path)
                };
                match std::fs::canonicalize(&path) {
                    Ok(real) => out.extend_from_slice(real.as_os_str().as_bytes()),
                    Err(e) => self.log(
                        Level::Crit,
                        &format!(
                            "realpath() \"{}\" failed {}",
                            path.display(),
                            crate::log::os_error(&e)
                        ),
                    ),
                }
            }
            Var::RequestId => out.extend_from_slice(self.request_id.get_or_init(random_id)),
            Var::ContentLength => {
                if let Some(v) = h.header("content-length") {
                    out.extend_from_slice(v)
                } else if let Some(n) = self.body_length.get() {
                    // As nginx once it read a chunked body.
                    let _ = write!(out, "{n}");
                }
            }
            Var::ContentType => {
                if let Some(v) = h.header("content-type") {
                    out.extend_from_slice(v)
                }
            }
            // The user of `Authorization: Basic`, whatever checks it, as nginx reads it.
            Var::RemoteUser => {
                if let Some((user, _)) = h
                    .header("authorization")
                    .and_then(portcullis_http::basic_credentials)
                {
                    out.extend_from_slice(&user);
                }
            }
            Var::Hostname => {
                out.extend_from_slice(self.worker.generation.borrow().http.hostname.as_bytes())
            }
            Var::RequestTime => write_seconds(out, self.start.elapsed()),
            Var::Status => match resp {
                Some((r, _)) => {
                    let _ = write!(out, "{:03}", r.status);
                }
                None if self.err_status.is_some() || self.status != 0 => {
                    let _ = write!(out, "{:03}", self.err_status.unwrap_or(self.status));
                }
                None => {}
            },
            Var::RemoteAddr => out.extend_from_slice(self.peer.ip().to_string().as_bytes()),
            Var::BinaryRemoteAddr => match self.peer.ip() {
                std::net::IpAddr::V4(ip) => out.extend_from_slice(&ip.octets()),
                std::net::IpAddr::V6(ip) => out.extend_from_slice(&ip.octets()),
            },
            // An address from a header without a port has none, as in nginx.
            Var::RemotePort if self.peer.port() != 0 => {
                let _ = write!(out, "{}", self.peer.port());
            }
            Var::RemotePort => {}
            Var::ConnectionTime
            | Var::ServerAddr
            | Var::ServerPort
            | Var::Connection
            | Var::ConnectionRequests
            | Var::Pid
            | Var::NginxVersion
            | Var::Msec
            | Var::TimeLocal
            | Var::TimeIso8601
            | Var::TcpInfo(_)
            | Var::ProxyProtocol(_)
            | Var::Pipe
            | Var::Ssl(_) => connection_var(v, self.conn, out),
            Var::UpstreamAddr
            | Var::UpstreamStatus
            | Var::UpstreamResponseTime
            | Var::UpstreamConnectTime
            | Var::UpstreamHeaderTime
            | Var::UpstreamResponseLength
            | Var::UpstreamBytesSent
            | Var::UpstreamBytesReceived => self.upstream_var(v, out),
            Var::UpstreamHttp(name) => {
                if let Some(value) = self
                    .upstream_head
                    .borrow()
                    .as_ref()
                    .and_then(|h| h.header(name))
                {
                    out.extend_from_slice(value);
                }
            }
            Var::UpstreamCookie(name) => {
                if let Some(head) = self.upstream_head.borrow().as_ref() {
                    let mut lines = head
                        .fields()
                        .filter(|h| h.name.eq_ignore_ascii_case(b"set-cookie"));
                    if let Some(v) = lines.find_map(|h| set_cookie_value(h.value, name.as_bytes()))
                    {
                        out.extend_from_slice(v);
                    }
                }
            }
            Var::LimitRate => {
                let _ = write!(out, "{}", self.limit_rate.get().unwrap_or(0));
            }
            Var::UpstreamCacheStatus => {
                if let Some(c) = self.cache_status.get() {
                    out.extend_from_slice(c.as_bytes());
                }
            }
            Var::Empty => {}
            Var::SentTrailer(name) => {
                if let Some((_, v)) = self
                    .sent_trailers
                    .borrow()
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                {
                    out.extend_from_slice(v);
                }
            }
            Var::Http2 => {
                if self.http2 {
                    out.extend_from_slice(if self.conn.tls.is_some() {
                        b"h2"
                    } else {
                        b"h2c"
                    });
                }
            }
            Var::RequestCompletion => {
                if resp.is_some_and(|(r, _)| r.status != crate::upstream::CLIENT_CLOSED)
                    && !self.incomplete.get()
                {
                    out.extend_from_slice(b"OK");
                }
            }
            Var::RequestBody => {
                // A body longer than client_body_buffer_size is in a file in nginx, and the
                // variable has no value.
                let limit = self.loc.client_body_buffer_size;
                if let Some(body) = self
                    .request_body
                    .borrow()
                    .as_ref()
                    .filter(|b| b.len() as u64 <= limit)
                {
                    out.extend_from_slice(body);
                }
            }
            Var::Module(v) => {
                let variable = self.phases.variable.get(v.module);
                // A method `limit_except` restricts sees the block's settings, as in nginx.
                let restricted = self.loc.limit_except.as_ref().filter(|_| self.restricted);
                let confs = Self::access_confs(&self.loc, restricted);
                if let (Some(Some(variable)), Some(conf)) = (variable, confs.get(v.module)) {
                    variable(self, conf, &v.var, out, resp);
                }
            }
            Var::SetOr(slot, unset) => {
                if !self.set_value_into(*slot, out) {
                    self.var(unset, out, resp);
                }
            }
            Var::Set(slot) => match self.set_value_into(*slot, out) {
                true => {}
                false if self.loc.uninitialized_warn => {
                    let names = &self.server.names;
                    let name = names.set.get(*slot).map_or("", String::as_str);
                    if !names.quiet.iter().any(|q| q.eq_ignore_ascii_case(name)) {
                        self.log(
                            Level::Warn,
                            &format!("using uninitialized \"{name}\" variable"),
                        );
                    }
                }
                _ => {}
            },
            Var::BytesSent => {
                if let Some((_, sent)) = resp {
                    let _ = write!(out, "{sent}");
                }
            }
            Var::BodyBytesSent => {
                if let Some((r, sent)) = resp {
                    let head = r.headers.len() as u64;
                    let body = match r.content_length {
                        _ if self.streamed.get().is_some() => self.streamed.get().unwrap_or(0),
                        Some(n) if !self.is_head() && r.status != 304 => {
                            n.min(sent.saturating_sub(head))
                        }
                        _ => 0,
                    };
                    let _ = write!(out, "{body}");
                }
            }
            Var::SentHttp(name) => {
                let before = out.len();
                self.sent_by_proxy(name, out);
                if out.len() > before {
                    return;
                }
                if let Some((r, _)) = resp {
                    match name.as_str() {
                        "content-type" => {
                            if let Some(t) = &r.content_type {
                                out.extend_from_slice(t.as_bytes())
                            }
                        }
                        "content-length" => {
                            if let Some(n) = r.content_length {
                                let _ = write!(out, "{n}");
                            }
                        }
                        // nginx keeps these as lists, and reads them joined.
                        _ if JOINED_FIELDS.contains(&name.as_str()) => {
                            join_into(out, fields_named(&r.headers, name));
                        }
                        _ => {
                            if let Some(v) = fields_named(&r.headers, name).next() {
                                out.extend_from_slice(v);
                            }
                        }
                    }
                }
            }
        }
    }

    /// `$sent_http_<name>` of a proxied response that went out: its type, an `add_header`
    /// field, else the upstream's field (none of those the proxy never passes).
    fn sent_by_proxy(&self, name: &str, out: &mut Vec<u8>) {
        let fields = self.sent_fields.borrow();
        let Some(f) = fields.as_ref() else {
            return;
        };
        if name == "content-type" {
            if let Some(t) = &f.content_type {
                out.extend_from_slice(t.as_bytes());
            }
            return;
        }
        if name == "content-length" {
            return;
        }
        // The upstream's fields come first, as in nginx's list of the fields sent.
        const HOP: [&str; 3] = ["connection", "keep-alive", "transfer-encoding"];
        let named = |h: &String| h.eq_ignore_ascii_case(name);
        let passed = !HOP.contains(&name)
            && (!upstream::HIDDEN.contains(&name) || f.settings.pass_headers.iter().any(named))
            && !f.settings.hide_headers.iter().any(named);
        if JOINED_FIELDS.contains(&name) {
            let head = self.upstream_head.borrow();
            let upstream = head
                .as_ref()
                .filter(|_| passed)
                .into_iter()
                .flat_map(|h| h.fields())
                .filter(|f| f.name.eq_ignore_ascii_case(name.as_bytes()))
                .map(|f| f.value);
            join_into(out, upstream.chain(fields_named(&f.added, name)));
            return;
        }
        if passed {
            if let Some(v) = self
                .upstream_head
                .borrow()
                .as_ref()
                .and_then(|h| h.header(name))
            {
                out.extend_from_slice(v);
                return;
            }
        }
        let added = fields_named(&f.added, name).next();
        if let Some(v) = added {
            out.extend_from_slice(v);
        }
    }

    /// nginx's not-modified filter, on a 200 of the server's own that no handler has
    /// checked the conditions of (a file has, `empty_gif` has): `If-Match`,
    /// `If-Unmodified-Since`, `If-None-Match` and `If-Modified-Since` against the response's
    /// `ETag` and `Last-Modified`, which most such responses do not have (then only
    /// `If-Match: *` and a `If-None-Match: *` hold). It comes before the header filters.
    pub fn not_modified(&mut self, resp: &mut Response) {
        if resp.status != 200
            || self.subrequest
            || !matches!(resp.body, Body::Empty | Body::Bytes(_) | Body::Stream(_))
        {
            return;
        }
        let h = &self.head;
        if h.header("if-match").is_none()
            && h.header("if-none-match").is_none()
            && h.header("if-modified-since").is_none()
            && h.header("if-unmodified-since").is_none()
        {
            return;
        }
        let mtime = resp
            .header_value("last-modified")
            .and_then(|v| crate::files::parse_http_date(&v))
            .map(crate::files::unix_secs);
        let etag = resp
            .header_value("etag")
            .map(|e| String::from_utf8_lossy(&e).into_owned());
        // nginx's filter looks at no method.
        let answer = crate::files::preconditions(mtime, etag.as_deref(), true, &self.conditions());
        match answer {
            Some(Plan::NotModified) => {
                resp.status = 304;
                resp.content_type = None;
                resp.content_length = None;
                resp.body = Body::Empty;
            }
            Some(_) => {
                *resp = self.finalize_error(412);
                // nginx finalizes the request in its filter: the connection closes.
                resp.close = true;
            }
            None => {}
        }
    }

    /// The header filters of the modules, with their settings of the location that finished
    /// the request (`add_header`, `expires`).
    pub fn add_headers(&self, resp: &mut Response) {
        self.add_headers_with(resp, None);
    }

    /// Whether any module's header filter takes part at the location.
    pub(crate) fn has_header_filters(&self) -> bool {
        self.loc
            .modules
            .any_active(self.phases.header_filter.modules)
    }

    /// [`add_headers`](Self::add_headers) for a proxied response, whose fields are
    /// `upstream`'s, not `resp`'s.
    pub(crate) fn add_headers_with(
        &self,
        resp: &mut Response,
        upstream: Option<&portcullis_http::ResponseHead>,
    ) {
        for (_, filter, conf) in self.phases.header_filter.at(&self.loc.modules) {
            filter(self, conf, resp, upstream);
        }
    }

    /// What the modules decide about recoding a response's body (see `encode.rs`).
    pub(crate) fn encoding(&self, out: &Outgoing<'_>) -> Encode {
        let (vary, coders) = self.coders(out);
        Encode {
            vary,
            coder: crate::encode::Chain::of(coders),
        }
    }

    /// The recodings of [`encoding`](Self::encoding) on one side of the body filters,
    /// which come between `charset` and `gzip` in nginx: those before them (gunzip,
    /// sub_filter, charset), or (`compress`) the compression after them, with its `Vary`.
    pub(crate) fn encoding_around(&self, out: &Outgoing<'_>, compress: bool) -> Encode {
        let (vary, mut coders) = self.coders(out);
        coders.retain(|c| (c.stage() == crate::encode::Stage::Compress) == compress);
        Encode {
            vary: vary && compress,
            coder: crate::encode::Chain::of(coders),
        }
    }

    /// Whether the response varies by `Accept-Encoding`, and the recodings of its body, as
    /// the modules decide.
    fn coders(&self, out: &Outgoing<'_>) -> (bool, Vec<Box<dyn crate::encode::Coder>>) {
        let mut vary = false;
        let mut coders = Vec::new();
        // A subrequest's response is the server's to read, not a client's.
        if self.is_subrequest() {
            return (vary, coders);
        }
        let recoded = Outgoing::Recoded(out);
        let mut view = out;
        for (_, encode, conf) in self.phases.encode.at(&self.loc.modules) {
            let e = encode(self, conf, view);
            vary |= e.vary;
            // The modules after one that takes the length away see none, as nginx's later
            // filters do.
            if e.coder.as_ref().is_some_and(|c| !c.head().keep_length) {
                view = &recoded;
            }
            coders.extend(e.coder);
        }
        (vary, coders)
    }

    /// How the body filters that take `out` whole change its head, if any does.
    pub(crate) fn body_filter_edit(&self, out: &Outgoing<'_>) -> Option<crate::encode::HeadEdit> {
        self.phases
            .body
            .at(&self.loc.modules)
            .find(|(_, f, conf)| (f.applies)(self, conf, out))
            .map(|(_, f, conf)| (f.edit)(conf))
    }

    /// nginx's body filters and recodings of a response of the server's own, in its order:
    /// gunzip, sub_filter and charset, then a body filter that takes the body whole (`ssi`),
    /// then gzip.
    pub(crate) async fn recode(&self, resp: &mut Response) {
        let filtered = !self.phases.body.handlers.is_empty()
            && !matches!(resp.body, Body::Proxy(_))
            && self.body_filter_edit(&Outgoing::Own(resp)).is_some();
        if !filtered {
            self.encode(resp);
            return;
        }
        let before = self.encoding_around(&Outgoing::Own(resp), false);
        crate::encode::own(resp, before, self.is_head());
        self.body_filters(resp).await;
        let after = self.encoding_around(&Outgoing::Recoded(&Outgoing::Own(resp)), true);
        crate::encode::own(resp, after, self.is_head());
    }

    /// Runs the body filters (see [`Handlers::body`]) on a response: one of the server's
    /// own, or a proxied one held whole.
    pub(crate) async fn body_filters(&self, resp: &mut Response) {
        if self.phases.body.handlers.is_empty() || matches!(resp.body, Body::Proxy(_)) {
            return;
        }
        let filters: Vec<(FilterBody, Slot)> = self
            .phases
            .body
            .at(&self.loc.modules)
            .map(|(_, f, conf)| (f.filter, conf.clone()))
            .collect();
        for (filter, conf) in filters {
            filter(self, conf, resp).await;
        }
    }

    /// Recodes a response of the server's own as the modules decide: a HEAD response gets
    /// the head a GET's would have.
    pub fn encode(&self, resp: &mut Response) {
        if matches!(resp.body, Body::Proxy(_)) || self.phases.encode.handlers.is_empty() {
            return;
        }
        let enc = self.encoding(&Outgoing::Own(resp));
        crate::encode::own(resp, enc, self.is_head());
    }

    /// The fields of a response of `status` that the header filters set in place of the
    /// response's own: computed once per response, empty for most locations.
    pub(crate) fn replaced_fields(&self, status: u16) -> Vec<&str> {
        let mut fields = Vec::new();
        for (_, replaced, conf) in self.phases.replaced_fields.at(&self.loc.modules) {
            replaced(conf, status, &mut fields);
        }
        fields
    }

    /// The response could not be sent whole: `$request_completion` is empty.
    pub(crate) fn set_incomplete(&self) {
        self.incomplete.set(true);
    }

    /// The log phase of the location that finished the request.
    pub fn log_access(&self, resp: &Response, sent: u64) {
        let restricted = self.loc.limit_except.as_ref().filter(|_| self.restricted);
        let confs = Self::access_confs(&self.loc, restricted);
        if !self.phases.logs(confs) {
            return;
        }
        let mut lookup = |v: &Var, out: &mut Vec<u8>| self.var(v, out, Some((resp, sent)));
        let logged = Logged {
            req: self,
            resp,
            sent,
        };
        self.phases
            .log(self.worker, confs, Some(&logged), &mut lookup, &|v| {
                self.has_var(v)
            });
    }

    /// A client's mistake found by the connection loop, logged at info as nginx does.
    pub fn log_client_error(&self, message: &str) {
        self.log(Level::Info, message);
    }

    pub(crate) fn log(&self, level: Level, message: &str) {
        self.log_line(level, message, None);
    }

    /// An error-log line in nginx's form: the message, then the client, server, request,
    /// `upstream` when there is one, and host.
    fn log_line(&self, level: Level, message: &str, upstream: Option<&dyn std::fmt::Display>) {
        let log = self.loc.error_log(&self.worker.shared.error_log);
        if !log.enabled(level) {
            return;
        }
        let mut m = format!(
            "{message}, client: {}, server: {}, request: \"{}\"",
            self.peer.ip(),
            self.server.name,
            String::from_utf8_lossy(&self.request_line())
        );
        if let Some(upstream) = upstream {
            m.push_str(&format!(", upstream: \"{upstream}\""));
        }
        if let Some(h) = self.head.header("host") {
            m.push_str(&format!(", host: \"{}\"", String::from_utf8_lossy(h)));
        }
        log.write(level, Some(self.conn.id), &m);
    }
}
