//! Compiling a loaded configuration into its runtime form: typed settings, server-name tables,
//! location trees. Every directive is read here once; the request path never parses strings.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use portcullis_config::{value, ConfigError, Directive, Loaded};

use crate::files::MimeTypes;
use crate::location::{LocationTree, Match};
use crate::log::{ErrorLog, ErrorLogSpec, LogTarget};
use crate::module::{Confs, Finish, Load, Place, Registry, Slot};
use crate::user::Credentials;
use crate::vars::Template;
use crate::Level;

/// Everything the runtime needs, compiled once. Held in an `Arc`, swapped on reload.
pub struct Compiled {
    pub(crate) main: MainConf,
    pub(crate) http: Arc<HttpConf>,
}

impl Compiled {
    pub fn daemon(&self) -> bool {
        self.main.daemon
    }
    pub fn pid_path(&self) -> Option<&Path> {
        self.main.pid.as_deref()
    }
    pub fn worker_rlimit_nofile(&self) -> Option<u64> {
        self.main.worker_rlimit_nofile
    }
    /// Warnings found while compiling (nginx's `[warn]` lines), beyond the loader's own.
    pub fn warnings(&self) -> &[String] {
        &self.main.warnings
    }
}

pub(crate) struct MainConf {
    /// Whom the workers serve as, from `user`: `None` when not started as root.
    pub credentials: Option<Arc<Credentials>>,
    pub daemon: bool,
    pub pid: Option<PathBuf>,
    pub workers: usize,
    pub worker_rlimit_nofile: Option<u64>,
    pub worker_connections: usize,
    /// The main `error_log`s (each with its level), else `-e` or `logs/error.log`.
    pub error_log: Vec<ErrorLogSpec>,
    pub warnings: Vec<String>,
}

/// The `http {}` block: listeners and their servers.
pub(crate) struct HttpConf {
    pub listens: Vec<Listen>,
    /// Every error log of the http block's levels, to open anew on USR1.
    pub error_logs: Vec<Arc<ErrorLog>>,
    pub hostname: String,
    /// `-p`: relative paths in variables resolve against it at request time.
    pub prefix: PathBuf,
    /// The modules, and what loading this configuration kept for each (in the same order).
    pub modules: Registry,
    pub loaded: Vec<Arc<dyn Any + Send + Sync>>,
    /// The `upstream` blocks, by name.
    pub upstreams: Arc<crate::upstream::Groups>,
}

/// One listening address and the servers reachable through it.
pub(crate) struct Listen {
    pub addr: SocketAddr,
    pub reuseport: bool,
    pub backlog: i32,
    pub ssl: bool,
    /// `listen ... http2`: HTTP/2 with prior knowledge is served here besides HTTP/1.1.
    pub http2: bool,
    /// `listen ... proxy_protocol`: every connection starts with a PROXY protocol header.
    pub proxy_protocol: bool,
    /// `listen ... deferred`: TCP_DEFER_ACCEPT, a connection is accepted once its first bytes
    /// came.
    pub deferred: bool,
    pub servers: ServerNames,
}

/// nginx's server selection: exact names (the empty name for a request without a host), then the longest leading wildcard, then the longest
/// trailing wildcard, then regexes in order, else the default server.
pub(crate) struct ServerNames {
    default: Arc<ServerConf>,
    exact: HashMap<String, Arc<ServerConf>>,
    /// `*.example.com` as ".example.com", longest first.
    leading: Vec<(String, Arc<ServerConf>)>,
    /// `www.example.*` as "www.example.", longest first.
    trailing: Vec<(String, Arc<ServerConf>)>,
    /// Each server name regex as its place among its server's `name_regexes`.
    regex: Vec<(usize, Arc<ServerConf>)>,
}

impl ServerNames {
    /// The address's default server: its TLS settings serve a handshake whose SNI names no
    /// server with its own.
    pub fn default_server(&self) -> &Arc<ServerConf> {
        &self.default
    }

    pub fn find(&self, host: Option<&str>) -> &Arc<ServerConf> {
        // A request without a host is matched against the empty name (nginx's default
        // `server_name ""`), else it goes to the default server.
        let host = host.unwrap_or("");
        if let Some(s) = self.exact.get(host) {
            return s;
        }
        for (suffix, s) in &self.leading {
            if host.ends_with(suffix.as_str()) && host.len() > suffix.len() {
                return s;
            }
        }
        for (prefix, s) in &self.trailing {
            if host.starts_with(prefix.as_str()) && host.len() > prefix.len() {
                return s;
            }
        }
        for (i, s) in &self.regex {
            if s.name_regexes[*i].0.is_match(host.as_bytes()) {
                return s;
            }
        }
        &self.default
    }
}

pub(crate) struct ServerConf {
    /// The first name, for `$server_name` and the error log.
    pub name: String,
    /// Server-level settings: used when no location matches, and inherited by locations.
    pub conf: Arc<LocConf>,
    /// The variables the configuration declares, for what a request reads of them.
    pub names: Arc<crate::vars::Names>,
    /// The `server_name` regexes, in order, each with the slots its named groups set: the
    /// first that matches chose the server, and sets `$1`.. and those variables.
    pub name_regexes: Vec<(regex::bytes::Regex, Vec<(usize, usize)>)>,
    /// Whether one of them has groups: else a request chosen by one has nothing to set.
    pub name_groups: bool,
    /// The names that are not regexes, as matched: lowercase, `$hostname` replaced.
    pub plain_names: Vec<String>,
    /// Every `server_name` as written (`example.com`, `*.example.com`, `~^www\d+$`).
    pub host_names: Vec<String>,
    pub locations: LocationTree<Arc<LocConf>>,
    pub merge_slashes: bool,
    pub head_limits: portcullis_http::HeadLimits,
    pub client_header_timeout: Duration,
    /// Certificates and the rest of `ssl_*`, when the server has them.
    pub tls: Option<Arc<crate::tls::server::ServerTlsConf>>,
    /// The modules' handlers by phase, as the phases read them (made once per configuration).
    pub phases: Arc<dyn Any + Send + Sync>,
}

impl ServerConf {
    pub fn find_location(
        &self,
        uri: &[u8],
    ) -> Result<Option<Match<'_, Arc<LocConf>>>, crate::location::RegexFailed> {
        self.locations.find(uri)
    }
    pub fn named_location(&self, name: &str) -> Option<&Arc<LocConf>> {
        self.locations.named(name)
    }
}

/// The bit of `method` in a `limit_except` mask: its place among the methods nginx lets
/// `limit_except` name, compared as the request spells it; 0 for another method.
pub(crate) fn method_bit(method: &str) -> u16 {
    portcullis_config::LIMIT_EXCEPT_METHODS
        .iter()
        .position(|m| *m == method)
        .map_or(0, |i| 1 << i)
}

#[derive(Clone)]
pub(crate) struct LimitExcept {
    /// The allowed methods, a bit each (see [`method_bit`]); GET implies HEAD.
    pub methods: u16,
    /// The modules' settings of the block, when it has any of their directives: the
    /// location's, with the block's on top.
    pub modules: Option<Confs>,
}

#[derive(Clone)]
pub(crate) enum ErrorTarget {
    Uri(Template),
    Named(String),
    /// An absolute URL: a redirect (302 unless `=code` names a redirect code).
    Redirect(Template),
}

#[derive(Clone)]
pub(crate) struct ErrorPage {
    pub codes: Vec<u16>,
    /// `None`: keep the code; `Some(None)`: `=` (use the new response's code); `Some(Some(c))`: `=c`.
    pub overwrite: Option<Option<u16>>,
    pub target: ErrorTarget,
}

#[derive(Clone)]
pub(crate) enum TryLast {
    Code(u16),
    Named(String),
    Uri(Template),
}

#[derive(Clone)]
pub(crate) struct TryFiles {
    /// Each item, and whether it tests for a directory: written with a final `/` (which
    /// nginx then leaves out of the URI it sets).
    pub files: Vec<(Template, bool)>,
    pub last: TryLast,
}

/// `alias`: the path that replaces the part of the URI its location matched. Inherited by
/// nested locations as nginx inherits it, with the length of the location that set it.
#[derive(Clone)]
pub(crate) struct Alias {
    pub path: Template,
    /// The bytes of the URI the path replaces: the prefix location's name, or the whole
    /// URI (`None`) in a regex location, whose alias is the whole path.
    pub replaces: Option<usize>,
}

/// The `error_log`s of an http, server or location level: the targets as configured, and
/// the log writing to them.
pub(crate) struct LevelLog {
    pub specs: Vec<ErrorLogSpec>,
    pub log: Arc<ErrorLog>,
}

/// Settings that nginx merges http → server → location. A list (error_page) defined at a
/// level replaces the inherited one, as in nginx.
#[derive(Clone)]
pub(crate) struct LocConf {
    /// The location's name as written, for alias and the error log.
    pub name: String,
    pub is_regex: bool,
    pub root: Template,
    pub alias: Option<Alias>,
    pub try_files: Option<TryFiles>,
    pub types: Arc<MimeTypes>,
    pub default_type: Arc<str>,
    pub error_pages: Vec<ErrorPage>,
    /// `uninitialized_variable_warn`: reading a `set` variable no `set` gave a value is
    /// logged.
    pub uninitialized_warn: bool,
    pub limit_except: Option<Arc<LimitExcept>>,
    /// `satisfy any`: one access handler admitting the request is enough.
    pub satisfy_any: bool,
    /// Each module's settings of this level, in the registry's order.
    pub modules: Confs,
    pub internal: bool,
    pub keepalive_timeout: Duration,
    /// `keepalive_timeout`'s second argument: `Keep-Alive: timeout=N` on kept-alive answers.
    pub keepalive_header: Option<u64>,
    /// `chunked_transfer_encoding`: off, a body of unknown length ends with the connection.
    pub chunked: bool,
    pub keepalive_requests: u64,
    /// How long a connection may carry requests, from its start: the request that ends
    /// past it is the last.
    pub keepalive_time: Duration,
    pub send_timeout: Duration,
    pub client_body_timeout: Duration,
    pub client_max_body_size: u64,
    /// `client_body_buffer_size`: a body read whole that is longer would be in a temporary
    /// file in nginx, which `$request_body` does not show.
    pub client_body_buffer_size: u64,
    /// `subrequest_output_buffer_size`: the most of a subrequest's body kept in memory.
    pub subrequest_output_buffer_size: usize,
    /// `limit_rate` and `limit_rate_after` (sizes, variables allowed); `None`: 0.
    pub limit_rate: Option<Template>,
    pub limit_rate_after: Option<Template>,
    pub server_tokens: bool,
    pub absolute_redirect: bool,
    pub port_in_redirect: bool,
    pub server_name_in_redirect: bool,
    pub log_not_found: bool,
    /// `if_modified_since`.
    pub if_modified_since: crate::files::IfModifiedSince,
    /// `resolver`: how names in `proxy_pass` URLs made of variables are resolved.
    pub resolver: Option<Arc<crate::upstream::resolve::ResolverConf>>,
    /// `resolver_timeout`.
    pub resolver_timeout: Duration,
    /// The level's `error_log`s; `None`: the main ones.
    pub error_log: Option<Arc<LevelLog>>,
    pub recursive_error_pages: bool,
    /// `etag`: whether a file's response has an `ETag` (and its conditions one to compare).
    pub etag: bool,
    /// A regex location's named groups and the slots of the variables they set.
    pub named_slots: Vec<(usize, usize)>,
    /// Server-level settings, also allowed at http level: carried here so they inherit.
    pub merge_slashes: bool,
    pub head_limits: portcullis_http::HeadLimits,
    pub client_header_timeout: Duration,
}

/// Compiles a loaded configuration. `prefix` resolves relative paths; `error_log` is `-e`.
/// `modules` are the modules the server runs, `phases` their handlers by phase.
pub(crate) fn compile(
    loaded: &Loaded,
    prefix: &Path,
    error_log: Option<&Path>,
    modules: Registry,
    phases: Arc<dyn Any + Send + Sync>,
) -> Result<Compiled, ConfigError> {
    let mut names = crate::vars::Names::default();
    collect_regex_groups(&loaded.directives, &mut names);
    let http = loaded.directives.iter().find(|d| d.name == "http");
    let http = http.map_or(&[][..], |h| h.children());
    for (i, m) in modules.iter().enumerate() {
        m.declare(http, &mut names, i)?;
    }
    let mut seen = HashSet::new();
    names.set.retain(|n| seen.insert(n.to_ascii_lowercase()));
    compile_declared(loaded, prefix, error_log, names, modules, phases)
}

/// The named groups of the `server_name` and `location` regexes: variables, as in nginx.
fn collect_regex_groups(directives: &[Directive], names: &mut crate::vars::Names) {
    for d in directives {
        match d.name.as_str() {
            "server_name" => {
                for a in &d.args {
                    if let Some(pattern) = a.value.strip_prefix('~') {
                        names.add_named_groups(pattern);
                    }
                }
            }
            "location" => names.add_named_groups(d.args.last().map_or("", |a| &a.value)),
            _ => {}
        }
        collect_regex_groups(d.children(), names);
    }
}

/// Each named group of `re` with the slot of the variable it sets.
fn named_slots<'n>(
    names: impl Iterator<Item = Option<&'n str>>,
    declared: &crate::vars::Names,
) -> Vec<(usize, usize)> {
    names
        .enumerate()
        .filter_map(|(i, n)| Some((i, declared.set_slot(n?)?)))
        .collect()
}

fn compile_declared(
    loaded: &Loaded,
    prefix: &Path,
    error_log: Option<&Path>,
    names: crate::vars::Names,
    modules: Registry,
    phases: Arc<dyn Any + Send + Sync>,
) -> Result<Compiled, ConfigError> {
    let mut b = Builder {
        names: Arc::new(names),
        prefix: prefix.to_path_buf(),
        conf_prefix: loaded
            .files
            .first()
            .and_then(|f| f.path.parent())
            .unwrap_or(prefix)
            .to_path_buf(),
        warnings: Vec::new(),
        error_logs: Vec::new(),
        hostname: hostname(),
        groups: Arc::default(),
        user: None,
        place: None,
        declared: Default::default(),
        modules,
        phases,
        loads: modules.iter().map(|m| m.load()).collect(),
    };
    let mut main = MainConf {
        credentials: None,
        daemon: true,
        pid: Some(prefix.join("logs/portcullis.pid")),
        workers: 1,
        worker_rlimit_nofile: None,
        worker_connections: 512,
        error_log: Vec::new(),
        warnings: Vec::new(),
    };
    let mut http_block = None;
    let mut user = None;
    for d in &loaded.directives {
        match d.name.as_str() {
            "user" => user = Some(d),
            "daemon" => main.daemon = value::flag(d, 0)?,
            "master_process" => {}
            "pid" => main.pid = Some(b.path(d.arg(0))),
            "worker_processes" => {
                main.workers = if d.arg(0) == "auto" {
                    std::thread::available_parallelism().map_or(1, |n| n.get())
                } else {
                    match d.arg(0).parse::<usize>() {
                        Ok(n) if n > 0 => n,
                        _ => return Err(invalid_value(d, 0)),
                    }
                }
            }
            "worker_rlimit_nofile" => main.worker_rlimit_nofile = Some(value::number(d, 0)?),
            "error_log" => main.error_log.push(b.error_log(d)?),
            "events" => {
                for e in d.children() {
                    if e.name == "worker_connections" {
                        let n = value::number(e, 0)?;
                        main.worker_connections = usize::try_from(n).unwrap_or(usize::MAX).max(1);
                    }
                }
            }
            "http" => http_block = Some(d),
            _ => b.check_meaning(d),
        }
    }
    // Without a main error_log, nginx's default: `-e`, relative to the prefix (`stderr`
    // names the stream), else logs/error.log.
    if main.error_log.is_empty() {
        main.error_log.push(ErrorLogSpec {
            to: match error_log {
                None => LogTarget::File(prefix.join("logs/error.log")),
                Some(p) if p == Path::new("stderr") => LogTarget::Stderr,
                Some(p) => LogTarget::File(prefix.join(p)),
            },
            level: Level::Error,
        });
    }
    main.credentials = Credentials::for_directive(user, &mut |w| b.warnings.push(w))?.map(Arc::new);
    b.user = main.credentials.as_ref().map(|c| c.uid);
    let http = match http_block {
        Some(h) => b.http(h)?,
        None => HttpConf {
            listens: Vec::new(),
            error_logs: Vec::new(),
            hostname: b.hostname.clone(),
            prefix: prefix.to_path_buf(),
            modules,
            loaded: std::mem::take(&mut b.loads)
                .into_iter()
                .map(Arc::from)
                .collect(),
            upstreams: Arc::default(),
        },
    };
    main.warnings = b.warnings;
    Ok(Compiled {
        main,
        http: Arc::new(http),
    })
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it or
    // truncates, and we stop at the first NUL.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).to_lowercase()
}

/// A size that may hold variables (`limit_rate`): checked at load when it has none; `None`
/// for a constant 0.
fn size_template(
    d: &Directive,
    names: &crate::vars::Names,
) -> Result<Option<Template>, ConfigError> {
    let t = Template::compile(d.arg(0), d, names)?;
    if t.as_literal().is_some() && value::size(d, 0)? == 0 {
        return Ok(None);
    }
    Ok(Some(t))
}

fn invalid_value(d: &Directive, i: usize) -> ConfigError {
    ConfigError::at(
        d,
        format!("invalid value \"{}\" in \"{}\" directive", d.arg(i), d.name),
    )
}

struct Builder {
    /// The variables the configuration declares.
    names: Arc<crate::vars::Names>,
    prefix: PathBuf,
    /// The main configuration file's directory (the prefix for a built-in configuration):
    /// nginx's `conf_prefix`, against which the files the configuration reads (certificates,
    /// keys, password files) resolve, where logs and the pid file resolve against `prefix`.
    conf_prefix: PathBuf,
    warnings: Vec<String>,
    /// The error logs of http, server and location levels, one per set of targets.
    error_logs: Vec<(Vec<ErrorLogSpec>, Arc<ErrorLog>)>,
    hostname: String,
    /// `upstream` blocks by name.
    groups: Arc<crate::upstream::Groups>,
    /// The user the workers serve as, when it is not the one loading.
    user: Option<libc::uid_t>,
    /// The location whose directives are being read.
    place: Option<Place>,
    /// The shared memory zones and directories declared so far.
    declared: crate::zone::Declared,
    modules: Registry,
    phases: Arc<dyn Any + Send + Sync>,
    /// What each module keeps while the configuration loads.
    loads: Vec<Box<dyn Any + Send + Sync>>,
}

/// Per-server settings collected while walking a server block.
struct ServerBits {
    listens: Vec<ListenSpec>,
    names: Vec<String>,
}

/// A server listening on an address, with the `listen` that says so.
struct AddrEntry<'a> {
    server: usize,
    spec: &'a ListenSpec,
}

struct ListenSpec {
    addrs: Vec<SocketAddr>,
    default_server: bool,
    reuseport: bool,
    backlog: i32,
    ssl: bool,
    http2: bool,
    proxy_protocol: bool,
    deferred: bool,
}

impl Builder {
    /// `p` against the prefix, unless it is absolute.
    fn path(&self, p: &str) -> PathBuf {
        self.prefix.join(p)
    }

    /// A directive no module here reads: silent, or nginx's warning when the registry says
    /// it is ignored (one it refuses never loads).
    fn check_meaning(&mut self, d: &Directive) {
        if let Some(warning) = portcullis_config::ignored_warning(d) {
            self.warnings.push(format!("{warning} in {}", d.span));
        }
    }

    /// The error log of a level whose `error_log` directives are `specs`: one per set of
    /// targets, its files opened now (as nginx opens them at load: a file that cannot be
    /// opened is a configuration error).
    fn level_error_log(
        &mut self,
        specs: Vec<ErrorLogSpec>,
        d: &Directive,
    ) -> Result<Arc<ErrorLog>, ConfigError> {
        if let Some((_, log)) = self.error_logs.iter().find(|(s, _)| *s == specs) {
            return Ok(log.clone());
        }
        let log = Arc::new(ErrorLog::open(&specs).map_err(|e| ConfigError::at(d, e.to_string()))?);
        self.error_logs.push((specs, log.clone()));
        Ok(log)
    }

    fn error_log(&self, d: &Directive) -> Result<ErrorLogSpec, ConfigError> {
        let level = match d.args.get(1).map(|a| a.value.as_str()) {
            None => Level::Error,
            Some(l) => Level::parse(l)
                .ok_or_else(|| ConfigError::at(d, format!("invalid log level \"{l}\"")))?,
        };
        Ok(ErrorLogSpec {
            to: self.log_target(d.arg(0), d)?,
            level,
        })
    }

    /// An error or access log's file, `stderr` or `syslog:` target.
    fn log_target(&self, name: &str, d: &Directive) -> Result<LogTarget, ConfigError> {
        Ok(match name {
            "stderr" => LogTarget::Stderr,
            _ => match name.strip_prefix("syslog:") {
                Some(params) => LogTarget::Syslog(
                    crate::log::syslog::Syslog::parse(params, &self.hostname)
                        .map_err(|m| ConfigError::at(d, m))?,
                ),
                None => LogTarget::File(self.path(name)),
            },
        })
    }

    fn http(&mut self, h: &Directive) -> Result<HttpConf, ConfigError> {
        let mut base = LocConf::defaults(self.modules);
        let mut types = None;
        // upstream blocks first: a proxy_pass may name a group defined after it.
        let mut groups = crate::upstream::Groups::new();
        for d in h.children() {
            if d.name == "upstream" {
                let g = crate::upstream::Group::compile(d, &self.names, &self.prefix)?;
                let upstream = g.upstream();
                let name = upstream.name();
                if groups.contains_key(name) {
                    return Err(ConfigError::at(d, format!("duplicate upstream \"{name}\"")));
                }
                groups.insert(name.to_string(), g);
            }
        }
        self.groups = Arc::new(groups);
        for (i, m) in self.modules.iter().enumerate() {
            let mut cx = self.load_cx(i, false, false);
            m.begin_http(h.children(), &mut cx)?;
        }
        let mut servers = Vec::new();
        let mut touched = HashSet::new();
        for d in h.children() {
            match d.name.as_str() {
                "server" => servers.push(d),
                "upstream" => {}
                "types" => add_types(&mut types, d, &mut self.warnings),
                _ => self.loc_directive(&mut base, d, &mut touched)?,
            }
        }
        if let Some(types) = types {
            base.types = Arc::new(types);
        }
        for (i, m) in self.modules.iter().enumerate() {
            let mut cx = self.load_cx(i, false, false);
            m.finish_http(base.modules.slot_mut(i), h.children(), &mut cx)?;
        }
        let mut compiled = Vec::with_capacity(servers.len());
        for s in servers {
            let (conf, bits) = self.server(&base, s)?;
            compiled.push((Arc::new(conf), bits, s));
        }
        // Each address with the servers that listen on it, in the order written.
        let mut by_addr: Vec<(SocketAddr, Vec<AddrEntry>)> = Vec::new();
        for (i, (_, bits, _)) in compiled.iter().enumerate() {
            for spec in &bits.listens {
                for addr in &spec.addrs {
                    let entry = AddrEntry { server: i, spec };
                    match by_addr.iter_mut().find(|(a, _)| a == addr) {
                        Some((_, list)) => list.push(entry),
                        None => by_addr.push((*addr, vec![entry])),
                    }
                }
            }
        }
        let mut listens = Vec::with_capacity(by_addr.len());
        for (addr, list) in by_addr {
            let mut defaults = list.iter().filter(|e| e.spec.default_server);
            let first_default = defaults.next();
            if let Some(second) = defaults.next() {
                return Err(ConfigError {
                    message: format!("a duplicate default server for {addr}"),
                    span: Some(compiled[second.server].2.span.clone()),
                });
            }
            let main = first_default.unwrap_or(&list[0]);
            let mut names = ServerNames {
                default: compiled[main.server].0.clone(),
                exact: HashMap::new(),
                leading: Vec::new(),
                trailing: Vec::new(),
                regex: Vec::new(),
            };
            for e in &list {
                let (conf, bits, _) = &compiled[e.server];
                let mut regexes = 0;
                for n in &bits.names {
                    if n.starts_with('~') {
                        names.regex.push((regexes, conf.clone()));
                        regexes += 1;
                    } else {
                        add_server_name(&mut names, n, conf, &self.hostname);
                    }
                }
            }
            names
                .leading
                .sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
            names
                .trailing
                .sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
            let ssl = list.iter().any(|e| e.spec.ssl);
            // As nginx, the default server must be able to answer a handshake; another server
            // without certificates is served with the default server's.
            if ssl && compiled[main.server].0.tls.is_none() {
                return Err(ConfigError {
                    message:
                        "no \"ssl_certificate\" is defined for the \"listen ... ssl\" directive"
                            .into(),
                    span: Some(compiled[main.server].2.span.clone()),
                });
            }
            listens.push(Listen {
                addr,
                reuseport: list.iter().any(|e| e.spec.reuseport),
                backlog: main.spec.backlog,
                ssl,
                http2: list.iter().any(|e| e.spec.http2),
                // As `ssl` and `http2`, one server's listen sets it for the address.
                proxy_protocol: list.iter().any(|e| e.spec.proxy_protocol),
                deferred: list.iter().any(|e| e.spec.deferred),
                servers: names,
            });
        }
        Ok(HttpConf {
            listens,
            error_logs: self.error_logs.iter().map(|(_, l)| l.clone()).collect(),
            hostname: self.hostname.clone(),
            prefix: self.prefix.clone(),
            modules: self.modules,
            loaded: std::mem::take(&mut self.loads)
                .into_iter()
                .map(Arc::from)
                .collect(),
            upstreams: self.groups.clone(),
        })
    }

    fn server(
        &mut self,
        http: &LocConf,
        s: &Directive,
    ) -> Result<(ServerConf, ServerBits), ConfigError> {
        let mut conf = http.clone();
        conf.name = String::new();
        let mut bits = ServerBits {
            listens: Vec::new(),
            names: Vec::new(),
        };
        let mut touched = HashSet::new();
        let mut locations = Vec::new();
        let mut types = None;
        let mut name_regexes = Vec::new();
        for d in s.children() {
            match d.name.as_str() {
                "listen" => bits.listens.push(listen(d)?),
                "server_name" => {
                    for re in d.args.iter().filter_map(|a| a.value.strip_prefix('~')) {
                        // As nginx, a regex with a capital letter matches in any case.
                        let caseless = re.bytes().any(|b| b.is_ascii_uppercase());
                        let re = crate::location::bytes_regex(re, caseless).map_err(|e| {
                            ConfigError::at(d, crate::location::regex_error(re, &e))
                        })?;
                        let slots = named_slots(re.capture_names(), &self.names);
                        name_regexes.push((re, slots));
                    }
                    bits.names.extend(d.args.iter().map(|a| a.value.clone()));
                }
                "location" => locations.push(d),
                "types" => add_types(&mut types, d, &mut self.warnings),
                _ => self.loc_directive(&mut conf, d, &mut touched)?,
            }
        }
        if let Some(types) = types {
            conf.types = Arc::new(types);
        }
        self.finish_level(&mut conf, s, false)?;
        let (merge_slashes, head_limits, client_header_timeout) = (
            conf.merge_slashes,
            conf.head_limits,
            conf.client_header_timeout,
        );
        if bits.listens.is_empty() {
            bits.listens.push(ListenSpec {
                addrs: vec![SocketAddr::from(([0, 0, 0, 0], 80))],
                default_server: false,
                reuseport: false,
                backlog: 511,
                ssl: false,
                http2: false,
                proxy_protocol: false,
                deferred: false,
            });
        }
        if bits.names.is_empty() {
            bits.names.push(String::new());
        }
        // ALPN offers HTTP/2 with `listen ... http2`, or where a module serves it.
        let h2 = bits.listens.iter().any(|l| l.http2)
            || (self.modules.iter().enumerate())
                .any(|(i, m)| m.alpn(conf.modules.get(i).expect("a slot")) == Some(b"h2"));
        let mut tls = crate::tls::server::ServerTlsBits {
            conf: None,
            ssl_on: false,
        };
        for (i, m) in self.modules.iter().enumerate() {
            let mut cx = self.load_cx(i, false, false);
            if let Some(bits) =
                m.server_tls(conf.modules.get(i).expect("a slot"), s, h2, &mut cx)?
            {
                tls = bits;
            }
        }
        if tls.ssl_on {
            for l in &mut bits.listens {
                l.ssl = true;
            }
        }
        let name = bits.names[0].replace("$hostname", &self.hostname);
        let conf = Arc::new(conf);
        let mut tree = LocationTree::new();
        for l in locations {
            self.location(&conf, l, &mut tree)?;
        }
        let name_groups = name_regexes.iter().any(|(re, _)| re.captures_len() > 1);
        let plain_names = bits
            .names
            .iter()
            .filter(|n| !n.starts_with('~'))
            .map(|n| n.replace("$hostname", &self.hostname).to_ascii_lowercase())
            .collect();
        Ok((
            ServerConf {
                name,
                conf,
                names: self.names.clone(),
                name_regexes,
                name_groups,
                plain_names,
                host_names: bits.names.clone(),
                locations: tree,
                merge_slashes,
                head_limits,
                client_header_timeout,
                tls: tls.conf,
                phases: self.phases.clone(),
            },
            bits,
        ))
    }

    fn location(
        &mut self,
        parent: &LocConf,
        l: &Directive,
        tree: &mut LocationTree<Arc<LocConf>>,
    ) -> Result<(), ConfigError> {
        let (modifier, name) = match l.args.len() {
            1 => {
                let a = l.arg(0);
                if let Some(rest) = a.strip_prefix('=').filter(|r| !r.is_empty()) {
                    ("=", rest)
                } else if let Some(rest) = a.strip_prefix("^~").filter(|r| !r.is_empty()) {
                    ("^~", rest)
                } else if let Some(rest) = a.strip_prefix("~*").filter(|r| !r.is_empty()) {
                    ("~*", rest)
                } else if let Some(rest) = a.strip_prefix('~').filter(|r| !r.is_empty()) {
                    ("~", rest)
                } else {
                    ("", a)
                }
            }
            _ => (l.arg(0), l.arg(1)),
        };
        let mut conf = parent.clone();
        conf.name = name.to_string();
        conf.is_regex = modifier.starts_with('~');
        conf.named_slots = match crate::location::LocationRegex::new(name, false) {
            Ok(re) if conf.is_regex => named_slots(re.capture_names(), &self.names),
            _ => Vec::new(),
        };
        conf.internal = false;
        conf.try_files = None;
        conf.limit_except = None;
        for (i, m) in self.modules.iter().enumerate() {
            // Only a module that drops something counts as changed at the level.
            let mut slot = conf.modules.get(i).expect("a slot").clone();
            m.enter_location(&mut slot);
            if !Arc::ptr_eq(&slot, conf.modules.get(i).expect("a slot")) {
                *conf.modules.slot_mut(i) = slot;
            }
        }
        let place = Place {
            name: name.to_string(),
            uri_part_forbidden: conf.is_regex || name.starts_with('@'),
        };
        let outer = self.place.replace(place);
        let mut touched = HashSet::new();
        let mut nested = Vec::new();
        let mut limit_except = None;
        let mut types = None;
        for d in l.children() {
            match d.name.as_str() {
                "location" => nested.push(d),
                "internal" => conf.internal = true,
                "limit_except" => {
                    if conf.limit_except.is_some() {
                        return Err(ConfigError::at(
                            d,
                            "\"limit_except\" directive is duplicate",
                        ));
                    }
                    for a in d.children() {
                        // The modules' directives after the loop: the block inherits the
                        // whole location's settings.
                        if self.owner(&a.name).is_none() {
                            self.check_meaning(a);
                        }
                    }
                    limit_except = Some(d);
                    conf.limit_except = Some(Arc::new(LimitExcept {
                        methods: d
                            .args
                            .iter()
                            .map(|a| method_bit(&a.value.to_ascii_uppercase()))
                            .fold(0, |mask, bit| mask | bit),
                        modules: None,
                    }));
                }
                "types" => add_types(&mut types, d, &mut self.warnings),
                _ => self.loc_directive(&mut conf, d, &mut touched)?,
            }
        }
        if let Some(types) = types {
            conf.types = Arc::new(types);
        }
        if let Some(d) = limit_except {
            let modules = self.limit_except_modules(&conf, d)?;
            if let Some(le) = conf.limit_except.as_mut() {
                Arc::make_mut(le).modules = modules;
            }
        }
        // Last: an `if` block's configuration inherits every other setting of the location,
        // wherever it is written.
        self.finish_level(&mut conf, l, true)?;
        self.place = outer;
        let proxies = (self.modules.iter().enumerate())
            .any(|(i, m)| m.auto_redirect(conf.modules.get(i).expect("a slot")));
        let conf_arc = Arc::new(conf);
        let mut children = LocationTree::new();
        for n in nested {
            self.location(&conf_arc, n, &mut children)?;
        }
        tree.add(modifier, name, conf_arc, children, proxies)
            .map_err(|m| ConfigError::at(l, m))
    }

    /// The modules' settings of a `limit_except` block over its location's, if it has any
    /// of their directives: a level of its own, completed by the modules as any other (a
    /// `proxy_pass` there answers the methods the block restricts, as in nginx).
    fn limit_except_modules(
        &mut self,
        location: &LocConf,
        d: &Directive,
    ) -> Result<Option<Confs>, ConfigError> {
        let mut confs = None;
        let mut touched = HashSet::new();
        let place = self.place.as_ref().map(|p| Place {
            name: p.name.clone(),
            uri_part_forbidden: true,
        });
        let outer = std::mem::replace(&mut self.place, place);
        for a in d.children() {
            if let Some(i) = self.owner(&a.name) {
                let confs = confs.get_or_insert_with(|| location.modules.clone());
                self.module_directive(confs.slot_mut(i), i, a, &mut touched)?;
            }
        }
        let Some(modules) = confs else {
            self.place = outer;
            return Ok(None);
        };
        let mut block = location.clone();
        block.modules = modules;
        self.finish_level(&mut block, d, false)?;
        // (An error ends the load: the place matters no more.)
        self.place = outer;
        Ok(Some(block.modules))
    }

    /// The module whose directive `name` is, by its place in the registry.
    fn owner(&self, name: &str) -> Option<usize> {
        self.modules.iter().position(|m| m.owns(name))
    }

    /// Hands module `i` its directive `d` for the level whose settings `conf` are.
    fn module_directive(
        &mut self,
        conf: &mut Slot,
        i: usize,
        d: &Directive,
        touched: &mut HashSet<String>,
    ) -> Result<(), ConfigError> {
        let first = touched.insert(d.name.clone());
        let first_of_module = touched.insert(format!("module {i}"));
        let module = self.modules[i];
        module.directive(conf, d, &mut self.load_cx(i, first, first_of_module))
    }

    /// What module `i`'s hooks may use while the configuration loads.
    fn load_cx(&mut self, i: usize, first: bool, first_of_module: bool) -> Load<'_> {
        Load {
            names: &self.names,
            conf_prefix: &self.conf_prefix,
            state: &mut *self.loads[i],
            first,
            first_of_module,
            upstreams: &self.groups,
            location: self.place.as_ref(),
            user: self.user,
            declared: &mut self.declared,
            prefix: &self.prefix,
            hostname: &self.hostname,
            warnings: &mut self.warnings,
        }
    }

    /// The configuration of an `if` block in a location: the location's, with the block's own
    /// settings on top (nginx makes a nameless nested location of it).
    fn if_conf(&mut self, parent: &LocConf, d: &Directive) -> Result<Arc<LocConf>, ConfigError> {
        let mut conf = parent.clone();
        // nginx does not merge `try_files` into the nested location: a request whose `if`
        // held is served by the block without it.
        conf.try_files = None;
        let mut touched = HashSet::new();
        let place = Place {
            name: parent.name.clone(),
            uri_part_forbidden: true,
        };
        let outer = self.place.replace(place);
        for c in d.children() {
            self.loc_directive(&mut conf, c, &mut touched)?;
        }
        self.finish_level(&mut conf, d, false)?;
        self.place = outer;
        Ok(Arc::new(conf))
    }

    /// The end of a server, location or `if` level: each module completes its settings of
    /// it. `nested` lets them build the configuration of the level's `if` blocks.
    fn finish_level(
        &mut self,
        conf: &mut LocConf,
        level: &Directive,
        nested: bool,
    ) -> Result<(), ConfigError> {
        let block = level.children();
        let modules = self.modules;
        // The level as its `if` blocks start from: every directive of it read.
        let parent = nested.then(|| conf.clone());
        let names = self.names.clone();
        let prefix = self.prefix.clone();
        let conf_prefix = self.conf_prefix.clone();
        let upstreams = self.groups.clone();
        let mut warnings = Vec::new();
        for (i, m) in modules.iter().enumerate() {
            // The module's load state, lent to its `finish` (the `if` blocks it may build
            // meanwhile are the rewrite module's, whose directives keep no load state).
            let mut state = std::mem::replace(&mut self.loads[i], Box::new(()));
            let mut if_conf = |d: &Directive| -> Result<Slot, ConfigError> {
                let parent = parent
                    .as_ref()
                    .expect("only a level with if blocks builds them");
                Ok(self.if_conf(parent, d)?)
            };
            let mut cx = Finish {
                names: &names,
                nested: nested.then_some(&mut if_conf as _),
                state: &mut *state,
                prefix: &prefix,
                conf_prefix: &conf_prefix,
                level,
                warnings: &mut warnings,
                upstreams: &upstreams,
            };
            let finished = m.finish(conf.modules.slot_mut(i), block, &mut cx);
            self.loads[i] = state;
            finished?;
        }
        self.warnings.append(&mut warnings);
        conf.modules.settle(modules);
        Ok(())
    }

    /// A directive that may appear at http, server or location level.
    fn loc_directive(
        &mut self,
        c: &mut LocConf,
        d: &Directive,
        touched: &mut HashSet<String>,
    ) -> Result<(), ConfigError> {
        // The first occurrence of a list directive at a level replaces the inherited list.
        let mut first = |key: &str| touched.insert(key.to_string());
        match d.name.as_str() {
            "root" => {
                c.root = Template::compile(d.arg(0), d, &self.names)?;
                c.alias = None;
            }
            "alias" => {
                c.alias = Some(Alias {
                    path: Template::compile(d.arg(0), d, &self.names)?,
                    replaces: (!c.is_regex).then_some(c.name.len()),
                })
            }
            "try_files" => {
                let n = d.args.len();
                let files = d.args[..n - 1]
                    .iter()
                    .map(|a| {
                        let dir = a.value.len() > 1 && a.value.ends_with('/');
                        Ok((Template::compile(&a.value, d, &self.names)?, dir))
                    })
                    .collect::<Result<_, ConfigError>>()?;
                let last = d.arg(n - 1);
                let last = if let Some(code) = last.strip_prefix('=') {
                    TryLast::Code(
                        code.parse()
                            .map_err(|_| ConfigError::at(d, format!("invalid code \"{last}\"")))?,
                    )
                } else if last.starts_with('@') {
                    TryLast::Named(last.to_string())
                } else {
                    TryLast::Uri(Template::compile(last, d, &self.names)?)
                };
                c.try_files = Some(TryFiles { files, last });
            }
            "default_type" => c.default_type = Arc::from(d.arg(0)),
            "error_page" => {
                if first("error_page") {
                    c.error_pages.clear();
                }
                c.error_pages.push(error_page(d, &self.names)?);
            }
            "satisfy" => {
                c.satisfy_any = match d.arg(0) {
                    "all" => false,
                    "any" => true,
                    _ => return Err(invalid_value(d, 0)),
                }
            }
            "merge_slashes" => c.merge_slashes = value::flag(d, 0)?,
            "client_header_buffer_size" => c.head_limits.header_buffer_size = size_usize(d, 0)?,
            "underscores_in_headers" => c.head_limits.underscores = value::flag(d, 0)?,
            "max_headers" => {
                c.head_limits.max_headers =
                    usize::try_from(value::number(d, 0)?).map_err(|_| invalid_value(d, 0))?
            }
            "ignore_invalid_headers" => c.head_limits.ignore_invalid = value::flag(d, 0)?,
            "large_client_header_buffers" => {
                c.head_limits.large_buffers =
                    usize::try_from(value::number(d, 0)?).map_err(|_| invalid_value(d, 0))?;
                c.head_limits.large_buffer_size = size_usize(d, 1)?;
            }
            "client_header_timeout" => c.client_header_timeout = time(d, 0)?,
            "keepalive_timeout" => {
                c.keepalive_timeout = time(d, 0)?;
                // Without a second argument the level keeps the one it inherits, as nginx's.
                if d.args.len() > 1 {
                    // Whole seconds, as nginx reads it; 0 says nothing.
                    let secs =
                        value::parse_time_secs(d.arg(1)).ok_or_else(|| invalid_value(d, 1))?;
                    c.keepalive_header = (secs > 0).then_some(secs);
                }
            }
            "keepalive_requests" => c.keepalive_requests = value::number(d, 0)?,
            "keepalive_time" => c.keepalive_time = time(d, 0)?,
            "send_timeout" => c.send_timeout = time(d, 0)?,
            "client_body_timeout" => c.client_body_timeout = time(d, 0)?,
            "client_max_body_size" => c.client_max_body_size = value::offset(d, 0)?,
            "client_body_buffer_size" => c.client_body_buffer_size = value::size(d, 0)?,
            "chunked_transfer_encoding" => c.chunked = value::flag(d, 0)?,
            "limit_rate" => c.limit_rate = size_template(d, &self.names)?,
            "limit_rate_after" => c.limit_rate_after = size_template(d, &self.names)?,
            "subrequest_output_buffer_size" => {
                c.subrequest_output_buffer_size =
                    usize::try_from(value::size(d, 0)?).unwrap_or(usize::MAX)
            }
            "server_tokens" => {
                c.server_tokens = match d.arg(0) {
                    "on" | "build" => true,
                    "off" => false,
                    _ => return Err(invalid_value(d, 0)),
                }
            }
            "absolute_redirect" => c.absolute_redirect = value::flag(d, 0)?,
            "port_in_redirect" => c.port_in_redirect = value::flag(d, 0)?,
            "server_name_in_redirect" => c.server_name_in_redirect = value::flag(d, 0)?,
            "log_not_found" => c.log_not_found = value::flag(d, 0)?,
            "recursive_error_pages" => c.recursive_error_pages = value::flag(d, 0)?,
            "etag" => c.etag = value::flag(d, 0)?,
            "uninitialized_variable_warn" => c.uninitialized_warn = value::flag(d, 0)?,
            "resolver" => {
                c.resolver = Some(Arc::new(crate::upstream::resolve::ResolverConf::parse(d)?));
            }
            "if_modified_since" => {
                use crate::files::IfModifiedSince as Ims;
                c.if_modified_since = match d.arg(0) {
                    "off" => Ims::Off,
                    "exact" => Ims::Exact,
                    "before" => Ims::Before,
                    v => {
                        return Err(ConfigError::at(
                            d,
                            format!("invalid value \"{v}\" in \"{}\" directive, it must be \"off\", \"exact\" or \"before\"", d.name),
                        ))
                    }
                };
            }
            "resolver_timeout" => {
                c.resolver_timeout = Duration::from_millis(value::time_ms(d, 0)?);
            }
            "error_log" => {
                let mut specs = match (&c.error_log, first("error_log")) {
                    (Some(inherited), false) => inherited.specs.clone(),
                    _ => Vec::new(),
                };
                specs.push(self.error_log(d)?);
                let log = self.level_error_log(specs.clone(), d)?;
                c.error_log = Some(Arc::new(LevelLog { specs, log }));
            }
            name => match self.owner(name) {
                Some(i) => self.module_directive(c.modules.slot_mut(i), i, d, touched)?,
                None => self.check_meaning(d),
            },
        }
        Ok(())
    }
}

impl LocConf {
    /// Where the level's messages go: its `error_log`s, else the main ones (`main`).
    pub fn error_log<'l>(&'l self, main: &'l ErrorLog) -> &'l ErrorLog {
        self.error_log.as_ref().map_or(main, |l| &l.log)
    }

    fn defaults(modules: Registry) -> LocConf {
        LocConf {
            name: String::new(),
            is_regex: false,
            root: Template::literal("html"),
            alias: None,
            try_files: None,
            types: Arc::new(default_types()),
            default_type: Arc::from("text/plain"),
            error_pages: Vec::new(),
            uninitialized_warn: true,
            limit_except: None,
            satisfy_any: false,
            modules: Confs::defaults(modules),
            internal: false,
            keepalive_timeout: Duration::from_secs(75),
            keepalive_header: None,
            chunked: true,
            keepalive_requests: 1000,
            keepalive_time: Duration::from_secs(3600),
            send_timeout: Duration::from_secs(60),
            client_body_timeout: Duration::from_secs(60),
            client_max_body_size: 1024 * 1024,
            // nginx's defaults: two memory pages, and one.
            client_body_buffer_size: 2 * 4096,
            subrequest_output_buffer_size: 4096,
            limit_rate: None,
            limit_rate_after: None,
            server_tokens: true,
            absolute_redirect: true,
            port_in_redirect: true,
            server_name_in_redirect: false,
            log_not_found: true,
            resolver: None,
            resolver_timeout: Duration::from_secs(30),
            if_modified_since: crate::files::IfModifiedSince::Exact,
            error_log: None,
            recursive_error_pages: false,
            etag: true,
            named_slots: Vec::new(),
            merge_slashes: true,
            head_limits: portcullis_http::HeadLimits::default(),
            client_header_timeout: Duration::from_secs(60),
        }
    }
}

/// nginx's built-in types when no `types` block is given: html, gif, jpg.
fn default_types() -> MimeTypes {
    let mut t = MimeTypes::new();
    t.insert("text/html", "html");
    t.insert("image/gif", "gif");
    t.insert("image/jpeg", "jpg");
    t
}

/// Adds a `types` block to the level's map: several blocks at one level add up (the first
/// starts the level's own map, which then replaces the inherited one), and an extension
/// given twice keeps the later type, with nginx's warning.
fn add_types(level: &mut Option<MimeTypes>, d: &Directive, warnings: &mut Vec<String>) {
    let t = level.get_or_insert_with(MimeTypes::new);
    for entry in d.children() {
        for ext in &entry.args {
            if let Some(previous) = t.insert(&entry.name, &ext.value) {
                warnings.push(format!(
                    "duplicate extension \"{}\", content type: \"{}\", previous content type: \"{previous}\" in {}",
                    ext.value, entry.name, entry.span
                ));
            }
        }
    }
}

fn time(d: &Directive, i: usize) -> Result<Duration, ConfigError> {
    Ok(Duration::from_millis(value::time_ms(d, i)?))
}

fn size_usize(d: &Directive, i: usize) -> Result<usize, ConfigError> {
    usize::try_from(value::size(d, i)?).map_err(|_| invalid_value(d, i))
}

fn listen(d: &Directive) -> Result<ListenSpec, ConfigError> {
    let spec = d.arg(0);
    let (host, port) = if let Some(rest) = spec.strip_prefix('[') {
        let end = rest.find(']').ok_or_else(|| {
            ConfigError::at(
                d,
                format!("invalid IPv6 address in \"{spec}\" of the \"listen\" directive"),
            )
        })?;
        let port = rest[end + 1..].strip_prefix(':').unwrap_or("80");
        (Some(&rest[..end]), port)
    } else if let Some((h, p)) = spec.rsplit_once(':') {
        (Some(h), p)
    } else if spec.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
        (None, spec)
    } else {
        (Some(spec), "80")
    };
    if host.is_some_and(|h| h.starts_with("unix")) {
        return Err(ConfigError::at(d, "unix domain sockets are not supported"));
    }
    let port_err = || {
        ConfigError::at(
            d,
            format!("invalid port in \"{spec}\" of the \"listen\" directive"),
        )
    };
    let (lo, hi) = match port.split_once('-') {
        Some((a, b)) => (
            a.parse::<u16>().map_err(|_| port_err())?,
            b.parse::<u16>().map_err(|_| port_err())?,
        ),
        None => {
            let p = port.parse::<u16>().map_err(|_| port_err())?;
            (p, p)
        }
    };
    if lo == 0 || hi < lo {
        return Err(port_err());
    }
    let ips: Vec<IpAddr> = match host {
        None | Some("*") => vec![IpAddr::from([0, 0, 0, 0])],
        Some(h) => match h.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => (h, 0)
                .to_socket_addrs()
                .map_err(|_| {
                    ConfigError::at(
                        d,
                        format!("host not found in \"{spec}\" of the \"listen\" directive"),
                    )
                })?
                .map(|a| a.ip())
                .collect(),
        },
    };
    let mut out = ListenSpec {
        addrs: Vec::new(),
        default_server: false,
        reuseport: false,
        backlog: 511,
        ssl: false,
        http2: false,
        proxy_protocol: false,
        deferred: false,
    };
    for ip in &ips {
        for p in lo..=hi {
            out.addrs.push(SocketAddr::new(*ip, p));
        }
    }
    for a in &d.args[1..] {
        let v = a.value.as_str();
        match v {
            "default_server" | "default" => out.default_server = true,
            "reuseport" => out.reuseport = true,
            "ssl" => out.ssl = true,
            "http2" => out.http2 = true,
            "proxy_protocol" => out.proxy_protocol = true,
            "deferred" => out.deferred = true,
            "bind" | "quic" => {}
            _ => {
                if let Some(b) = v.strip_prefix("backlog=") {
                    out.backlog = b
                        .parse()
                        .map_err(|_| ConfigError::at(d, format!("invalid backlog \"{b}\"")))?;
                } else if [
                    "rcvbuf=",
                    "sndbuf=",
                    "ipv6only=",
                    "so_keepalive=",
                    "fastopen=",
                    "accept_filter=",
                    "setfib=",
                ]
                .iter()
                .any(|p| v.starts_with(p))
                {
                } else {
                    return Err(ConfigError::at(d, format!("invalid parameter \"{v}\"")));
                }
            }
        }
    }
    Ok(out)
}

/// Adds `name`, a server name that is not a regex, of the server `conf`.
fn add_server_name(names: &mut ServerNames, name: &str, conf: &Arc<ServerConf>, hostname: &str) {
    let name = name.replace("$hostname", hostname).to_ascii_lowercase();
    if let Some(rest) = name.strip_prefix("*.") {
        names.leading.push((format!(".{rest}"), conf.clone()));
    } else if let Some(rest) = name.strip_prefix('.') {
        names
            .exact
            .entry(rest.to_string())
            .or_insert_with(|| conf.clone());
        names.leading.push((format!(".{rest}"), conf.clone()));
    } else if let Some(rest) = name.strip_suffix(".*") {
        names.trailing.push((format!("{rest}."), conf.clone()));
    } else {
        // The first server to claim a name keeps it, as in nginx (which warns on the second).
        names.exact.entry(name).or_insert_with(|| conf.clone());
    }
}

/// Whether `host` is `name`, a server name that is not a regex: `example.com`, `*.example.com`,
/// `.example.com` (the domain and its subdomains) or `www.example.*`.
pub(crate) fn plain_name_matches(name: &str, host: &[u8]) -> bool {
    let subdomain = |domain: &str| {
        host.strip_suffix(domain.as_bytes())
            .and_then(|h| h.strip_suffix(b"."))
            .is_some_and(|h| !h.is_empty())
    };
    if let Some(domain) = name.strip_prefix("*.") {
        subdomain(domain)
    } else if let Some(domain) = name.strip_prefix('.') {
        host == domain.as_bytes() || subdomain(domain)
    } else if let Some(start) = name.strip_suffix(".*") {
        host.strip_prefix(start.as_bytes())
            .and_then(|h| h.strip_prefix(b"."))
            .is_some_and(|h| !h.is_empty())
    } else {
        host == name.as_bytes()
    }
}

fn error_page(d: &Directive, names: &crate::vars::Names) -> Result<ErrorPage, ConfigError> {
    let n = d.args.len();
    let target = d.arg(n - 1);
    let mut codes = Vec::new();
    let mut overwrite = None;
    for a in &d.args[..n - 1] {
        let v = a.value.as_str();
        if let Some(c) = v.strip_prefix('=') {
            overwrite = Some(if c.is_empty() {
                None
            } else {
                Some(
                    c.parse::<u16>()
                        .map_err(|_| ConfigError::at(d, format!("invalid value \"{v}\"")))?,
                )
            });
        } else {
            let code: u16 = v
                .parse()
                .map_err(|_| ConfigError::at(d, format!("invalid value \"{v}\"")))?;
            if !(300..=599).contains(&code) {
                return Err(ConfigError::at(
                    d,
                    format!("value \"{v}\" must be between 300 and 599"),
                ));
            }
            codes.push(code);
        }
    }
    if codes.is_empty() {
        return Err(ConfigError::at(
            d,
            "invalid number of arguments in \"error_page\" directive",
        ));
    }
    let target = if target.starts_with('@') {
        ErrorTarget::Named(target.to_string())
    } else if target.starts_with('/') || target.starts_with('$') {
        ErrorTarget::Uri(Template::compile(target, d, names)?)
    } else {
        ErrorTarget::Redirect(Template::compile(target, d, names)?)
    };
    Ok(ErrorPage {
        codes,
        overwrite,
        target,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(http: &str) -> Compiled {
        let text = format!("events {{}}\nhttp {{\naccess_log off;\n{http}\n}}\n");
        let dir = std::env::temp_dir();
        let loaded = portcullis_config::load_str(&text, &dir.join("t.conf"), &Default::default())
            .unwrap_or_else(|e| panic!("{e}"));
        crate::compile(&loaded, &dir, None).unwrap_or_else(|e| panic!("{e}"))
    }

    fn pick<'a>(c: &'a Compiled, port: u16, host: Option<&str>) -> &'a str {
        let l = c
            .http
            .listens
            .iter()
            .find(|l| l.addr.port() == port)
            .unwrap();
        &l.servers.find(host).conf.root.as_literal().unwrap()[1..]
    }

    #[test]
    fn plain_names_match_as_nginx_matches_them() {
        for (name, host, matches) in [
            ("example.com", "example.com", true),
            ("example.com", "www.example.com", false),
            ("*.example.com", "www.example.com", true),
            ("*.example.com", "example.com", false),
            ("*.example.com", ".example.com", false),
            ("*.example.com", "wwwexample.com", false),
            (".example.com", "example.com", true),
            (".example.com", "a.b.example.com", true),
            (".example.com", "badexample.com", false),
            ("www.example.*", "www.example.org", true),
            ("www.example.*", "www.example.", false),
            ("www.example.*", "www.examples.org", false),
            ("", "", true),
        ] {
            assert_eq!(
                plain_name_matches(name, host.as_bytes()),
                matches,
                "{name} {host}"
            );
        }
    }

    #[test]
    fn server_names_in_nginx_order() {
        let c = compiled(
            "server { listen 127.0.0.1:1; root /first; server_name first; }
             server { listen 127.0.0.1:1; root /exact; server_name www.example.com; }
             server { listen 127.0.0.1:1; root /lead; server_name *.example.com; }
             server { listen 127.0.0.1:1; root /longlead; server_name *.a.example.com; }
             server { listen 127.0.0.1:1; root /trail; server_name www.example.*; }
             server { listen 127.0.0.1:1; root /re; server_name ~^api\\d+\\.; }
             server { listen 127.0.0.1:1 default_server; root /default; }",
        );
        assert_eq!(pick(&c, 1, Some("www.example.com")), "exact");
        assert_eq!(pick(&c, 1, Some("x.example.com")), "lead");
        assert_eq!(pick(&c, 1, Some("x.a.example.com")), "longlead");
        assert_eq!(pick(&c, 1, Some("www.example.org")), "trail");
        assert_eq!(pick(&c, 1, Some("api7.host")), "re");
        assert_eq!(pick(&c, 1, Some("first")), "first");
        assert_eq!(pick(&c, 1, Some("nobody")), "default");
        assert_eq!(pick(&c, 1, None), "default");
    }

    #[test]
    fn no_host_takes_the_empty_name_before_the_default() {
        // Checked against nginx 1.22: an HTTP/1.0 request without Host goes to a server whose
        // names include "" (the default server_name) even when another is default_server.
        let c = compiled(
            "server { listen 127.0.0.1:1 default_server; root /a; server_name a; }
             server { listen 127.0.0.1:1; root /b; }
             server { listen 127.0.0.1:2; root /x; server_name x; }
             server { listen 127.0.0.1:2 default_server; root /y; server_name y; }",
        );
        assert_eq!(pick(&c, 1, None), "b");
        assert_eq!(pick(&c, 1, Some("zzz")), "a");
        assert_eq!(pick(&c, 2, None), "y");
    }

    #[test]
    fn first_server_is_the_default_and_ranges_expand() {
        let c = compiled(
            "server { listen 127.0.0.1:5-7; root /a; }
             server { listen 127.0.0.1:7; root /b; server_name b; }",
        );
        assert_eq!(c.http.listens.len(), 3);
        assert_eq!(pick(&c, 7, Some("b")), "b");
        assert_eq!(pick(&c, 7, Some("zzz")), "a");
        assert_eq!(pick(&c, 5, Some("b")), "a");
    }

    #[test]
    fn load_time_errors_name_the_place() {
        let dir = std::env::temp_dir();
        for (http, want) in [
            (
                "server { listen 127.0.0.1:1 default_server; }\nserver { listen 127.0.0.1:1 default_server; }",
                "a duplicate default server for 127.0.0.1:1 in",
            ),
            ("server { listen 127.0.0.1:1; return 200 $nosuch; }", "unknown \"nosuch\" variable in"),
            ("server { listen 127.0.0.1:1; location ~ ( { } }", "pcre2_compile() failed"),
            ("server { listen 127.0.0.1:1; location /a { } location /a { } }", "duplicate location \"/a\" in"),
            ("server { listen 127.0.0.1:99999; }", "invalid port in \"127.0.0.1:99999\""),
            ("server { listen 1; error_page 200 /x; }", "value \"200\" must be between 300 and 599 in"),
        ] {
            let text = format!("events {{}}\nhttp {{\naccess_log off;\n{http}\n}}\n");
            let loaded = portcullis_config::load_str(&text, &dir.join("t.conf"), &Default::default()).unwrap();
            let e = crate::compile(&loaded, &dir, None).err().unwrap_or_else(|| panic!("{http}: compiled"));
            assert!(e.to_string().contains(want), "{http}: {e}");
        }
    }

    #[test]
    fn lists_replace_what_they_inherit() {
        let c = compiled(
            "index a.html; error_page 404 /x;
             server { listen 127.0.0.1:1; index b.html c.html; }",
        );
        let s = c.http.listens[0].servers.find(None);
        let index: Vec<_> = s
            .conf
            .modules
            .find::<Vec<Template>>()
            .expect("the index module's names")
            .iter()
            .map(|t| t.as_literal().unwrap().to_string())
            .collect();
        assert_eq!(index, ["b.html", "c.html"]);
        assert_eq!(
            s.conf.error_pages.len(),
            1,
            "error_page is inherited when not set"
        );
    }
}
