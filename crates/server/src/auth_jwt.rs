//! `auth_jwt`: NGINX Plus's JWT authentication, in the access phase.
//!
//! At load, the `auth_jwt*` directives of each level become a [`JwtConf`] that inherits
//! http → server → location → limit_except as nginx merges it; every `auth_jwt_key_file` is
//! read and parsed into a [`KeySet`] there and then, so a bad file is a configuration error
//! with its file:line and a request never parses a key. A location's `$jwt_*` variables and
//! the `auth_jwt_claim_set` / `auth_jwt_header_set` ones are resolved to [`JwtVar`]s.
//!
//! On a request, [`authenticate`] takes the token from `Authorization: Bearer` (or the
//! `token=` variable), asks the worker's [`VerifiedCache`] (a hit costs no signature work),
//! then checks `auth_jwt_require`. A missing token is 401 with
//! `WWW-Authenticate: Bearer realm="..."`, a bad one 401 with `,error="invalid_token"` added
//! (RFC 6750 §3), logged at info with the reason.
//!
//! `auth_jwt_key_request uri` fetches a key set by a subrequest ([`fetch`]). The access phase
//! cannot wait, so [`authenticate`] asks for the keys it lacks ([`Refusal::Fetch`]): the
//! request stops there, [`process`] runs the subrequest, keeps the keys with the request (and
//! in the worker's key cache when `auth_jwt_key_cache` allows) and runs the request's phases
//! again from the start, now finding them. A key request that fails makes the request 500.
//! The keys of a level's files and key requests combine into one [`KeySet`]; a set fetched
//! again is a new set, so no token verified with the old one is taken from the cache of
//! verified tokens for it.
//!
//! `auth_jwt_verified_cache off | size [time]` is portcullis's own: each worker keeps up to
//! `size` verified tokens (the largest size configured anywhere), and a level with a `time`
//! trusts a cached verification for that long at most; `off` verifies every request.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use portcullis_config::{value, ConfigError, Directive};
use portcullis_jwt::{JwtError, KeySet, Verified, VerifiedCache};

use crate::conf::ServerConf;
use crate::module::{self, Load, Module, Slot};
use crate::request::{Access, Handlers, Request, Response};
use crate::vars::{Names, Template};
use crate::Level;

mod fetch;

/// Verified tokens each worker keeps when `auth_jwt_verified_cache` does not say: a gateway's
/// clients are usually far fewer, and an entry is a few kilobytes at most.
pub(crate) const DEFAULT_VERIFIED_CACHE_ENTRIES: usize = 1024;

/// The most entries `auth_jwt_verified_cache` may ask for per worker.
const MAX_VERIFIED_CACHE_ENTRIES: usize = 1 << 20;

/// Names a nested claim path may hold in `auth_jwt_claim_set`; deeper than the JSON parser's
/// own limit could never match.
const MAX_CLAIM_PATH: usize = portcullis_jwt::MAX_DEPTH;

/// Key requests one request may run: more than any level has, unless a URI's variables
/// change on every pass.
const MAX_KEY_FETCHES: usize = 8;

/// Fetched key sets a worker keeps, and combined sets: past this the cache starts empty
/// again (only key request URIs with variables could reach it).
const MAX_CACHED_KEY_SETS: usize = 1024;

/// The module: its directives, settings per level, access handler, variables and worker state.
pub(crate) struct AuthJwt;

pub(crate) static MODULE: AuthJwt = AuthJwt;

impl Module for AuthJwt {
    fn name(&self) -> &'static str {
        "http_auth_jwt_module"
    }

    fn declare(&self, http: &[Directive], names: &mut Names, me: usize) -> Result<(), ConfigError> {
        let declared = declared_variables(http)?;
        names.add_module_variables(
            me,
            Box::new(move |name| jwt_variable(name, &declared).map(|v| Arc::new(v) as Slot)),
        );
        Ok(())
    }

    fn load(&self) -> Box<dyn std::any::Any + Send + Sync> {
        Box::<Loader>::default()
    }

    fn defaults(&self) -> Slot {
        Arc::new(JwtConf::default())
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
        let conf_prefix = cx.conf_prefix;
        let path = |p: &str| conf_prefix.join(p);
        loader.directive(module::edit::<JwtConf>(conf), d, cx.first, &path, cx.names)
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            access: Some(access),
            variable: Some(variable),
            ..Handlers::NONE
        };
        &HANDLERS
    }

    fn is_active(&self, conf: &Slot) -> bool {
        module::get::<JwtConf>(conf).auth.is_some()
    }

    fn worker(
        &self,
        loaded: &(dyn std::any::Any + Send + Sync),
        _opened: &crate::module::Opened,
    ) -> Box<dyn std::any::Any> {
        let entries = loaded
            .downcast_ref::<Loader>()
            .map_or(DEFAULT_VERIFIED_CACHE_ENTRIES, Loader::cache_entries);
        Box::new(RefCell::new(WorkerJwt::new(entries)))
    }

    fn reload(
        &self,
        state: &dyn std::any::Any,
        loaded: &(dyn std::any::Any + Send + Sync),
        _opened: &crate::module::Opened,
    ) {
        let entries = loaded
            .downcast_ref::<Loader>()
            .map_or(DEFAULT_VERIFIED_CACHE_ENTRIES, Loader::cache_entries);
        if let Some(w) = state.downcast_ref::<RefCell<WorkerJwt>>() {
            w.borrow_mut().reset(entries);
        }
    }
}

/// The access phase: the token checked against the level's keys and requirements.
fn access(req: &mut Request<'_>, conf: &Slot) -> Access {
    let conf = module::get::<JwtConf>(conf);
    let Some(auth) = &conf.auth else {
        return Access::Declined;
    };
    let Some(worker) = req.worker_state::<RefCell<WorkerJwt>>() else {
        return Access::Declined;
    };
    match authenticate(req, worker, conf, auth) {
        Ok(()) => Access::Allowed,
        Err(Refusal::Denied(d)) => Access::Denied {
            status: d.status,
            challenge: d.challenge,
        },
        Err(Refusal::Fetch(fetch)) => Access::Wait(Box::new(fetch)),
    }
}

/// `$jwt_*` and the declared variables: empty without a verified token.
fn variable(
    req: &Request<'_>,
    _conf: &Slot,
    var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&Response, u64)>,
) {
    let verified = req.ctx::<JwtCtx>().and_then(|c| c.verified.as_deref());
    eval_var(verified, module::get::<JwtVar>(var), out);
}

/// What a request keeps of the module: the token it accepted, for the `$jwt_*` variables, and
/// the key requests run for it so far (kept when the phases run again).
#[derive(Default)]
struct JwtCtx {
    verified: Option<Arc<Verified>>,
    fetches: Fetches,
}

/// A JWT variable (`auth_jwt`), resolved at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JwtVar {
    /// `$jwt_claim_NAME` or an `auth_jwt_claim_set` path.
    Claim(Box<[Box<str>]>),
    /// `$jwt_header_NAME` or an `auth_jwt_header_set` path.
    Header(Box<[Box<str>]>),
    /// `$jwt_payload`.
    Payload,
}

/// The JWT variable called `name`, if it is one.
fn jwt_variable(name: &str, declared: &[(String, JwtVar)]) -> Option<JwtVar> {
    let declared = declared
        .iter()
        .rev()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, var)| var.clone());
    if declared.is_some() {
        return declared;
    }
    if name == "jwt_payload" {
        return Some(JwtVar::Payload);
    }
    if let Some(claim) = name.strip_prefix("jwt_claim_").filter(|c| !c.is_empty()) {
        return Some(JwtVar::Claim(Box::new([claim.into()])));
    }
    if let Some(member) = name.strip_prefix("jwt_header_").filter(|h| !h.is_empty()) {
        return Some(JwtVar::Header(Box::new([member.into()])));
    }
    None
}

/// The `auth_jwt*` settings of one level, merged with what it inherits.
#[derive(Clone, Default)]
pub(crate) struct JwtConf {
    /// `auth_jwt`: `None` when off, the default.
    pub auth: Option<Arc<Auth>>,
    /// The keys of this level's `auth_jwt_key_file`s, combined.
    keys: Option<Arc<FileKeys>>,
    /// The files behind `keys`, so a further `auth_jwt_key_file` at the same level adds to them.
    key_files: Vec<PathBuf>,
    /// `auth_jwt_key_request` URIs.
    key_requests: Vec<Arc<Template>>,
    /// `auth_jwt_key_cache`: how long fetched keys are used; zero fetches for every request.
    key_cache: Duration,
    leeway: Duration,
    require: Vec<Arc<Require>>,
    cache: CachePolicy,
}

/// The keys of a level's key files, and the files' contents, to combine them with fetched
/// keys.
struct FileKeys {
    set: Arc<KeySet>,
    contents: Vec<Vec<u8>>,
}

/// `auth_jwt "realm" [token=$variable]`.
pub(crate) struct Auth {
    realm: Template,
    /// `None`: the `Authorization: Bearer` header.
    token: Option<Template>,
}

/// `auth_jwt_require $value ... [error=401 | 403]`.
struct Require {
    values: Vec<Template>,
    status: u16,
}

/// `auth_jwt_verified_cache` at one level.
#[derive(Clone, Copy)]
enum CachePolicy {
    Off,
    On {
        entries: usize,
        max_age: Option<Duration>,
    },
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy::On {
            entries: DEFAULT_VERIFIED_CACHE_ENTRIES,
            max_age: None,
        }
    }
}

/// The variables the `http` block's `auth_jwt_claim_set` and `auth_jwt_header_set` declare.
fn declared_variables(http: &[Directive]) -> Result<Vec<(String, JwtVar)>, ConfigError> {
    let mut declared = Vec::new();
    for d in http {
        let header = match d.name.as_str() {
            "auth_jwt_claim_set" => false,
            "auth_jwt_header_set" => true,
            _ => continue,
        };
        let name = d
            .arg(0)
            .strip_prefix('$')
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ConfigError::at(d, format!("invalid variable name \"{}\"", d.arg(0))))?;
        if d.args.len() - 1 > MAX_CLAIM_PATH {
            return Err(ConfigError::at(
                d,
                format!("more than {MAX_CLAIM_PATH} names in \"{}\"", d.name),
            ));
        }
        let path: Box<[Box<str>]> = d.args[1..]
            .iter()
            .map(|a| a.value.as_str().into())
            .collect();
        let var = if header {
            JwtVar::Header(path)
        } else {
            JwtVar::Claim(path)
        };
        declared.push((name.to_string(), var));
    }
    Ok(declared)
}

/// Appends the value of `var` for the request's verified token; nothing without one.
fn eval_var(verified: Option<&Verified>, var: &JwtVar, out: &mut Vec<u8>) {
    let Some(verified) = verified else {
        return;
    };
    fn path(names: &[Box<str>]) -> Vec<&str> {
        names.iter().map(AsRef::as_ref).collect()
    }
    let value = match var {
        JwtVar::Payload => {
            out.extend_from_slice(verified.payload_json().as_bytes());
            return;
        }
        JwtVar::Claim(names) if names.len() == 1 => verified.claim(&[&names[0]]),
        JwtVar::Header(names) if names.len() == 1 => verified.header_claim(&[&names[0]]),
        JwtVar::Claim(names) => verified.claim(&path(names)),
        JwtVar::Header(names) => verified.header_claim(&path(names)),
    };
    if let Some(v) = value {
        out.extend_from_slice(v.as_str().as_bytes());
    }
}

/// Reads and parses key files while a configuration compiles; a file list used at several
/// levels becomes one shared [`KeySet`], so its tokens share cache entries.
#[derive(Default)]
struct Loader {
    sets: HashMap<Vec<PathBuf>, Arc<FileKeys>>,
    /// The largest `auth_jwt_verified_cache` size, for the workers' caches.
    cache_entries: usize,
}

impl Loader {
    /// The size each worker's verified-token cache needs.
    pub fn cache_entries(&self) -> usize {
        self.cache_entries.max(DEFAULT_VERIFIED_CACHE_ENTRIES)
    }

    /// Applies an `auth_jwt*` directive to `c`. `first` says whether it is the first
    /// `auth_jwt_key_file` / `auth_jwt_key_request` / `auth_jwt_require` of its level (it
    /// then replaces the inherited list); `path` resolves a relative file name against the
    /// prefix.
    pub fn directive(
        &mut self,
        c: &mut JwtConf,
        d: &Directive,
        first: bool,
        path: &dyn Fn(&str) -> PathBuf,
        names: &Names,
    ) -> Result<(), ConfigError> {
        match d.name.as_str() {
            "auth_jwt" => c.auth = auth(d, names)?,
            "auth_jwt_key_file" => {
                if d.arg(0).contains('$') {
                    return Err(ConfigError::at(
                        d,
                        "variables in \"auth_jwt_key_file\" are not supported",
                    ));
                }
                if first {
                    c.key_files.clear();
                }
                c.key_files.push(path(d.arg(0)));
                c.keys = Some(self.key_set(&c.key_files, d)?);
            }
            "auth_jwt_key_request" => {
                if first {
                    c.key_requests.clear();
                }
                c.key_requests
                    .push(Arc::new(Template::compile(d.arg(0), d, names)?));
            }
            "auth_jwt_key_cache" => c.key_cache = Duration::from_millis(value::time_ms(d, 0)?),
            "auth_jwt_leeway" => c.leeway = Duration::from_millis(value::time_ms(d, 0)?),
            "auth_jwt_type" => match d.arg(0) {
                "signed" => {}
                "encrypted" | "nested" => {
                    return Err(ConfigError::at(
                        d,
                        format!("\"auth_jwt_type {}\" is not supported", d.arg(0)),
                    ))
                }
                _ => {
                    return Err(ConfigError::at(
                        d,
                        format!("invalid value \"{}\" in \"{}\" directive", d.arg(0), d.name),
                    ))
                }
            },
            "auth_jwt_require" => {
                if first {
                    c.require.clear();
                }
                c.require.push(Arc::new(require(d, names)?));
            }
            // Read before compiling, by `declare`.
            "auth_jwt_claim_set" | "auth_jwt_header_set" => {}
            "auth_jwt_verified_cache" => {
                c.cache = cache_policy(d)?;
                if let CachePolicy::On { entries, .. } = c.cache {
                    self.cache_entries = self.cache_entries.max(entries);
                }
            }
            // `owns` hands over no other.
            _ => {}
        }
        Ok(())
    }

    /// The combined keys of `files`, each read and parsed once per compile.
    fn key_set(&mut self, files: &[PathBuf], d: &Directive) -> Result<Arc<FileKeys>, ConfigError> {
        if let Some(set) = self.sets.get(files) {
            return Ok(set.clone());
        }
        let mut set = KeySet::default();
        let mut contents = Vec::with_capacity(files.len());
        for file in files {
            let content = std::fs::read(file).map_err(|e| {
                ConfigError::at(
                    d,
                    format!(
                        "open() \"{}\" failed {}",
                        file.display(),
                        crate::log::os_error(&e)
                    ),
                )
            })?;
            let parsed = KeySet::parse(&content).map_err(|e| {
                ConfigError::at(d, format!("invalid JWK set in \"{}\": {e}", file.display()))
            })?;
            set.extend(parsed);
            contents.push(content);
        }
        let set = Arc::new(FileKeys {
            set: Arc::new(set),
            contents,
        });
        self.sets.insert(files.to_vec(), set.clone());
        Ok(set)
    }
}

fn auth(d: &Directive, names: &Names) -> Result<Option<Arc<Auth>>, ConfigError> {
    if d.arg(0) == "off" && d.args.len() == 1 {
        return Ok(None);
    }
    let token = match d.args.get(1) {
        None => None,
        Some(a) => {
            let var = a
                .value
                .strip_prefix("token=")
                .filter(|v| v.starts_with('$'))
                .ok_or_else(|| ConfigError::at(d, format!("invalid parameter \"{}\"", a.value)))?;
            Some(Template::compile(var, d, names)?)
        }
    };
    Ok(Some(Arc::new(Auth {
        realm: Template::compile(d.arg(0), d, names)?,
        token,
    })))
}

fn require(d: &Directive, names: &Names) -> Result<Require, ConfigError> {
    let mut values = Vec::new();
    let mut status = 401;
    for a in &d.args {
        if let Some(code) = a.value.strip_prefix("error=") {
            status = match code {
                "401" => 401,
                "403" => 403,
                _ => return Err(ConfigError::at(d, format!("invalid value \"{}\"", a.value))),
            };
        } else {
            values.push(Template::compile(&a.value, d, names)?);
        }
    }
    if values.is_empty() {
        return Err(ConfigError::at(
            d,
            "invalid number of arguments in \"auth_jwt_require\" directive",
        ));
    }
    Ok(Require { values, status })
}

fn cache_policy(d: &Directive) -> Result<CachePolicy, ConfigError> {
    if d.arg(0) == "off" {
        if d.args.len() > 1 {
            return Err(ConfigError::at(
                d,
                format!("invalid parameter \"{}\"", d.arg(1)),
            ));
        }
        return Ok(CachePolicy::Off);
    }
    let entries = value::number(d, 0)?;
    let entries = usize::try_from(entries)
        .ok()
        .filter(|n| (1..=MAX_VERIFIED_CACHE_ENTRIES).contains(n))
        .ok_or_else(|| {
            ConfigError::at(
                d,
                format!(
                    "\"auth_jwt_verified_cache\" size must be between 1 and {MAX_VERIFIED_CACHE_ENTRIES}"
                ),
            )
        })?;
    let max_age = match d.args.get(1) {
        None => None,
        Some(_) => Some(Duration::from_millis(value::time_ms(d, 1)?)),
    };
    Ok(CachePolicy::On { entries, max_age })
}

/// A worker's JWT state: its cache of verified tokens and of fetched keys.
pub(crate) struct WorkerJwt {
    cache: VerifiedCache,
    keys: KeyCache,
}

impl WorkerJwt {
    pub fn new(entries: usize) -> WorkerJwt {
        WorkerJwt {
            cache: VerifiedCache::new(entries),
            keys: KeyCache::default(),
        }
    }

    /// A new configuration generation: its key sets are new, so no entry could hit again, and
    /// its key requests may go elsewhere.
    pub fn reset(&mut self, entries: usize) {
        if self.cache.capacity() == entries {
            self.cache.clear();
        } else {
            self.cache = VerifiedCache::new(entries);
        }
        self.keys = KeyCache::default();
    }
}

/// A key set fetched by `auth_jwt_key_request`.
#[derive(Clone)]
pub(crate) struct Fetched {
    keys: Arc<KeySet>,
    /// The response body it was parsed from, to combine it with other keys.
    body: Bytes,
    at: Instant,
}

/// The key sets a worker fetched, for `auth_jwt_key_cache`, and the sets combining them with
/// a level's other keys.
#[derive(Default)]
struct KeyCache {
    /// By server (the same URI may be another location in another server), then URI.
    fetched: HashMap<usize, ServerKeys>,
    /// By the ids of the sets combined.
    combined: HashMap<Vec<u64>, Arc<KeySet>>,
    len: usize,
}

struct ServerKeys {
    /// Held so that the address the entry is keyed by is not reused by another server.
    _server: Arc<ServerConf>,
    by_uri: HashMap<Vec<u8>, Fetched>,
}

impl KeyCache {
    /// The keys `uri` fetched in `server` less than `max_age` ago.
    fn get(
        &self,
        server: &Arc<ServerConf>,
        uri: &[u8],
        now: Instant,
        max_age: Duration,
    ) -> Option<&Fetched> {
        let keys = self.fetched.get(&(Arc::as_ptr(server) as usize))?;
        keys.by_uri
            .get(uri)
            .filter(|f| now.saturating_duration_since(f.at) < max_age)
    }

    fn put(&mut self, server: &Arc<ServerConf>, uri: Vec<u8>, fetched: Fetched) {
        if self.len >= MAX_CACHED_KEY_SETS {
            *self = KeyCache::default();
        }
        // A set fetched again is a new set: combinations with the old one are of no use.
        self.combined.clear();
        let keys = self
            .fetched
            .entry(Arc::as_ptr(server) as usize)
            .or_insert_with(|| ServerKeys {
                _server: server.clone(),
                by_uri: HashMap::new(),
            });
        if keys.by_uri.insert(uri, fetched).is_none() {
            self.len += 1;
        }
    }
}

/// A key request the access phase waits for.
pub(crate) struct KeyFetch {
    uri: Vec<u8>,
    /// The level's `auth_jwt_key_cache`.
    cache: Duration,
}

/// The key requests a request ran: the keys, or `None` for a request that failed.
pub(crate) type Fetches = Vec<(Vec<u8>, Option<Fetched>)>;

/// Why the access phase refused a request.
pub(crate) struct Denied {
    pub status: u16,
    /// The `WWW-Authenticate` value of a 401.
    pub challenge: Option<Vec<u8>>,
}

/// Why [`authenticate`] did not admit a request.
pub(crate) enum Refusal {
    Denied(Denied),
    /// Keys must be fetched first: the request stops here, to be run again with them.
    Fetch(KeyFetch),
}

impl From<Denied> for Refusal {
    fn from(d: Denied) -> Refusal {
        Refusal::Denied(d)
    }
}

/// The keys a level verifies with.
enum Keys {
    Ready {
        keys: Arc<KeySet>,
        /// Whether the set stays the same for other requests, so verified tokens may be
        /// cached for it; a set fetched for this request only would fill the cache with
        /// entries no other request hits.
        lasting: bool,
    },
    Fetch(KeyFetch),
    /// A key request failed (logged when it ran).
    Failed,
    None,
}

/// The keys of `conf` for `req`: the files' and every key request's, combined.
fn keys(req: &Request<'_>, worker: &RefCell<WorkerJwt>, conf: &JwtConf) -> Keys {
    if conf.key_requests.is_empty() {
        return match &conf.keys {
            Some(k) => Keys::Ready {
                keys: k.set.clone(),
                lasting: true,
            },
            None => Keys::None,
        };
    }
    let lasting = !conf.key_cache.is_zero();
    let now = Instant::now();
    let mut parts: Vec<Fetched> = Vec::with_capacity(conf.key_requests.len());
    for t in &conf.key_requests {
        let uri = req.eval(t);
        let fetches = req.ctx::<JwtCtx>().map_or(&[][..], |c| &c.fetches[..]);
        if let Some((_, got)) = fetches.iter().find(|(u, _)| *u == uri) {
            match got {
                Some(f) => parts.push(f.clone()),
                None => return Keys::Failed,
            }
            continue;
        }
        let cached = lasting
            .then(|| {
                let w = worker.borrow();
                w.keys.get(req.server(), &uri, now, conf.key_cache).cloned()
            })
            .flatten();
        match cached {
            Some(f) => parts.push(f),
            None => {
                return Keys::Fetch(KeyFetch {
                    uri,
                    cache: conf.key_cache,
                })
            }
        }
    }
    if conf.keys.is_none() && parts.len() == 1 {
        return Keys::Ready {
            keys: parts[0].keys.clone(),
            lasting,
        };
    }
    let ids: Vec<u64> = conf
        .keys
        .iter()
        .map(|k| k.set.id())
        .chain(parts.iter().map(|p| p.keys.id()))
        .collect();
    if lasting {
        if let Some(k) = worker.borrow().keys.combined.get(&ids) {
            return Keys::Ready {
                keys: k.clone(),
                lasting,
            };
        }
    }
    // Every part parsed before, so none fails now.
    let mut set = KeySet::default();
    let files = conf.keys.iter().flat_map(|k| k.contents.iter());
    for content in files
        .map(Vec::as_slice)
        .chain(parts.iter().map(|p| &p.body[..]))
    {
        if let Ok(parsed) = KeySet::parse(content) {
            set.extend(parsed);
        }
    }
    let set = Arc::new(set);
    if lasting {
        let mut w = worker.borrow_mut();
        if w.keys.combined.len() >= MAX_CACHED_KEY_SETS {
            w.keys.combined.clear();
        }
        w.keys.combined.insert(ids, set.clone());
    }
    Keys::Ready { keys: set, lasting }
}

impl crate::request::Suspension for KeyFetch {
    /// Runs the key request (unless this request has run too many), caches its keys as
    /// `auth_jwt_key_cache` says, and records the outcome for the phases' next run.
    fn resume<'r>(
        self: Box<Self>,
        req: &'r mut Request<'_>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'r>> {
        Box::pin(async move {
            let fetch = *self;
            let ran = req.ctx::<JwtCtx>().map_or(0, |c| c.fetches.len());
            let got = if ran >= MAX_KEY_FETCHES {
                req.log(
                    Level::Error,
                    &format!("more than {MAX_KEY_FETCHES} JWT key requests for one request"),
                );
                None
            } else {
                match fetch::fetch(req, &fetch.uri).await {
                    Ok((body, keys)) => {
                        let fetched = Fetched {
                            keys: Arc::new(keys),
                            body,
                            at: Instant::now(),
                        };
                        let worker = req.worker_state::<RefCell<WorkerJwt>>();
                        if let Some(worker) = worker.filter(|_| !fetch.cache.is_zero()) {
                            let mut w = worker.borrow_mut();
                            w.keys.put(req.server(), fetch.uri.clone(), fetched.clone());
                        }
                        Some(fetched)
                    }
                    Err(why) => {
                        req.log(
                            Level::Error,
                            &format!(
                                "JWT key request \"{}\" failed: {why}",
                                String::from_utf8_lossy(&fetch.uri)
                            ),
                        );
                        None
                    }
                }
            };
            req.ctx_mut::<JwtCtx>().fetches.push((fetch.uri, got));
        })
    }
}

/// The access phase's JWT check for a level with `auth_jwt` on. On success the verified
/// token is the request's, for the `$jwt_*` variables.
fn authenticate(
    req: &mut Request<'_>,
    worker: &RefCell<WorkerJwt>,
    conf: &JwtConf,
    auth: &Auth,
) -> Result<(), Refusal> {
    let from_variable;
    let token: Option<&[u8]> = match &auth.token {
        Some(t) => {
            from_variable = req.eval(t);
            Some(&from_variable[..]).filter(|t| !t.is_empty())
        }
        None => req.head().header("authorization").and_then(bearer),
    };
    // A request without a token is refused before any key is fetched.
    let Some(token) = token else {
        return Err(challenge(req, auth, 401, false).into());
    };
    let (keys, lasting) = match keys(req, worker, conf) {
        Keys::Ready { keys, lasting } => (keys, lasting),
        Keys::Fetch(f) => return Err(Refusal::Fetch(f)),
        Keys::Failed => {
            return Err(Denied {
                status: 500,
                challenge: None,
            }
            .into())
        }
        Keys::None => {
            req.log(Level::Error, "no JWT keys configured for \"auth_jwt\"");
            return Err(Denied {
                status: 500,
                challenge: None,
            }
            .into());
        }
    };
    let now = SystemTime::now();
    let result = match conf.cache {
        CachePolicy::On { max_age, .. } if lasting => {
            worker
                .borrow_mut()
                .cache
                .verify_within(token, &keys, now, conf.leeway, max_age)
        }
        _ => portcullis_jwt::verify(token, &keys, now, conf.leeway).map(Arc::new),
    };
    let verified = match result {
        Ok(v) => v,
        Err(e) => {
            log_failure(req, &e);
            return Err(challenge(req, auth, 401, true).into());
        }
    };
    req.ctx_mut::<JwtCtx>().verified = Some(verified);
    for r in &conf.require {
        let held = r.values.iter().all(|v| {
            let value = req.eval(v);
            !value.is_empty() && value != b"0"
        });
        if !held {
            req.log(Level::Info, "JWT requirement not satisfied");
            return Err(if r.status == 401 {
                challenge(req, auth, 401, true)
            } else {
                Denied {
                    status: r.status,
                    challenge: None,
                }
            }
            .into());
        }
    }
    Ok(())
}

/// The token of an `Authorization: Bearer <token>` value (the scheme is case-insensitive,
/// RFC 9110 §11.1).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer ";
    let scheme = value.get(..SCHEME.len())?;
    if !scheme.eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    Some(value[SCHEME.len()..].trim_ascii()).filter(|t| !t.is_empty())
}

fn log_failure(req: &Request<'_>, e: &JwtError) {
    req.log(Level::Info, &format!("JWT validation failed: {e}"));
}

/// A refusal with its `WWW-Authenticate: Bearer realm="..."[,error="invalid_token"]`.
fn challenge(req: &Request<'_>, auth: &Auth, status: u16, invalid: bool) -> Denied {
    let realm = req.eval(&auth.realm);
    let mut value = Vec::with_capacity(realm.len() + 40);
    value.extend_from_slice(b"Bearer realm=\"");
    for &b in &realm {
        // A quote or backslash in the realm would end the quoted-string early.
        if b == b'"' || b == b'\\' {
            value.push(b'\\');
        }
        value.push(b);
    }
    value.push(b'"');
    if invalid {
        value.extend_from_slice(b",error=\"invalid_token\"");
    }
    Denied {
        status,
        challenge: Some(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive_and_needs_a_token() {
        assert_eq!(bearer(b"Bearer a.b.c"), Some(&b"a.b.c"[..]));
        assert_eq!(bearer(b"bearer   a.b.c "), Some(&b"a.b.c"[..]));
        assert_eq!(bearer(b"Basic dXNlcg=="), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bearer"), None);
    }

    #[test]
    fn jwt_variables_by_name() {
        assert_eq!(jwt_variable("jwt_payload", &[]), Some(JwtVar::Payload));
        assert_eq!(
            jwt_variable("jwt_claim_sub", &[]),
            Some(JwtVar::Claim(Box::new(["sub".into()])))
        );
        assert_eq!(
            jwt_variable("jwt_header_kid", &[]),
            Some(JwtVar::Header(Box::new(["kid".into()])))
        );
        assert_eq!(jwt_variable("jwt_claim_", &[]), None);
        assert_eq!(jwt_variable("uri", &[]), None);
        // A declared name is found in any case, as nginx's variable names are.
        let declared = [("jwtUser".to_string(), JwtVar::Payload)];
        assert_eq!(jwt_variable("jwtuser", &declared), Some(JwtVar::Payload));
    }

    #[test]
    fn directive_errors_name_the_place() {
        let dir = std::env::temp_dir();
        for (http, want) in [
            (
                "auth_jwt_type encrypted;",
                "\"auth_jwt_type encrypted\" is not supported in",
            ),
            (
                "auth_jwt_type x;",
                "invalid value \"x\" in \"auth_jwt_type\" directive in",
            ),
            (
                "auth_jwt_require $uri error=500;",
                "invalid value \"error=500\" in",
            ),
            (
                "auth_jwt_require error=403;",
                "invalid number of arguments in \"auth_jwt_require\"",
            ),
            (
                "auth_jwt x token=uri;",
                "invalid parameter \"token=uri\" in",
            ),
            ("auth_jwt_verified_cache 0;", "size must be between 1 and"),
            (
                "auth_jwt_verified_cache off 1m;",
                "invalid parameter \"1m\" in",
            ),
            (
                "auth_jwt_key_file /nonexistent/k.jwk;",
                "open() \"/nonexistent/k.jwk\" failed (2: No such file or directory) in",
            ),
            (
                "auth_jwt_claim_set jwt_x sub;",
                "invalid variable name \"jwt_x\" in",
            ),
        ] {
            let text = format!("events {{}}\nhttp {{\naccess_log off;\n{http}\n}}\n");
            let loaded =
                portcullis_config::load_str(&text, &dir.join("t.conf"), &Default::default())
                    .unwrap_or_else(|e| panic!("{http}: {e}"));
            let e = crate::compile(&loaded, &dir, None)
                .err()
                .unwrap_or_else(|| panic!("{http}: compiled"));
            assert!(e.to_string().contains(want), "{http}: {e}");
            assert!(e.to_string().ends_with("t.conf:4"), "{http}: {e}");
        }
    }

    fn jwt_conf(c: &crate::conf::LocConf) -> &JwtConf {
        c.modules.find().unwrap()
    }

    /// The one server of `http`, compiled.
    fn server(http: &str) -> Arc<ServerConf> {
        let dir = std::env::temp_dir();
        let text = format!("events {{}}\nhttp {{\naccess_log off;\n{http}\n}}\n");
        let loaded = portcullis_config::load_str(&text, &dir.join("t.conf"), &Default::default())
            .unwrap_or_else(|e| panic!("{http}: {e}"));
        let compiled = crate::compile(&loaded, &dir, None).unwrap_or_else(|e| panic!("{e}"));
        compiled.http.listens[0].servers.find(None).clone()
    }

    #[test]
    fn key_requests_inherit_as_a_list_and_key_cache_is_a_time() {
        let s = server(
            "auth_jwt_key_request /a;\nauth_jwt_key_cache 1m;\n\
             server { listen 127.0.0.1:1; auth_jwt_key_request /b$arg_t; auth_jwt_key_request /c; }",
        );
        let jwt = jwt_conf(&s.conf);
        assert_eq!(jwt.key_requests.len(), 2);
        assert_eq!(jwt.key_requests[1].as_literal(), Some("/c"));
        assert_eq!(jwt.key_cache, Duration::from_secs(60));
        let s = server("auth_jwt_key_request /a;\nserver { listen 127.0.0.1:1; }");
        assert_eq!(jwt_conf(&s.conf).key_requests.len(), 1);
        assert!(jwt_conf(&s.conf).key_cache.is_zero());
    }

    #[test]
    fn fetched_keys_serve_a_level_for_its_key_cache_at_most() {
        let one = server("server { listen 127.0.0.1:1; }");
        let two = server("server { listen 127.0.0.1:1; }");
        let mut cache = KeyCache::default();
        let at = Instant::now();
        let fetched = Fetched {
            keys: Arc::new(KeySet::default()),
            body: Bytes::new(),
            at,
        };
        let id = fetched.keys.id();
        cache.put(&one, b"/jwks".to_vec(), fetched);
        cache.combined.insert(vec![id], Arc::new(KeySet::default()));
        let ten = Duration::from_secs(10);
        let hit = cache.get(&one, b"/jwks", at + Duration::from_secs(9), ten);
        assert_eq!(hit.map(|f| f.keys.id()), Some(id));
        assert!(cache.get(&one, b"/jwks", at + ten, ten).is_none());
        // A level with a shorter key cache does not take keys older than it allows.
        assert!(cache
            .get(
                &one,
                b"/jwks",
                at + Duration::from_secs(2),
                Duration::from_secs(1)
            )
            .is_none());
        // The same URI in another server is another location.
        assert!(cache.get(&two, b"/jwks", at, ten).is_none());
        assert!(cache.get(&one, b"/other", at, ten).is_none());
        // Keys fetched again are a new set, and combinations with the old one go.
        let again = Fetched {
            keys: Arc::new(KeySet::default()),
            body: Bytes::new(),
            at,
        };
        cache.put(&one, b"/jwks".to_vec(), again);
        assert!(cache.combined.is_empty());
        let hit = cache.get(&one, b"/jwks", at, ten).map(|f| f.keys.id());
        assert!(hit.is_some_and(|new| new != id));
        assert_eq!(cache.len, 1);
    }
}
