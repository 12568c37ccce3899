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
//! `auth_jwt_verified_cache off | size [time]` is portcullis's own: each worker keeps up to
//! `size` verified tokens (the largest size configured anywhere), and a level with a `time`
//! trusts a cached verification for that long at most; `off` verifies every request.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use portcullis_config::{value, ConfigError, Directive};
use portcullis_jwt::{JwtError, KeySet, Verified, VerifiedCache};

use crate::conf::err;
use crate::request::Request;
use crate::vars::Template;
use crate::Level;

/// Verified tokens each worker keeps when `auth_jwt_verified_cache` does not say: a gateway's
/// clients are usually far fewer, and an entry is a few kilobytes at most.
pub(crate) const DEFAULT_VERIFIED_CACHE_ENTRIES: usize = 1024;

/// The most entries `auth_jwt_verified_cache` may ask for per worker.
const MAX_VERIFIED_CACHE_ENTRIES: usize = 1 << 20;

/// Names a nested claim path may hold in `auth_jwt_claim_set`; deeper than the JSON parser's
/// own limit could never match.
const MAX_CLAIM_PATH: usize = portcullis_jwt::MAX_DEPTH;

/// The `auth_jwt*` settings of one level, merged with what it inherits.
#[derive(Clone, Default)]
pub(crate) struct JwtConf {
    /// `auth_jwt`: `None` when off, the default.
    pub auth: Option<Arc<Auth>>,
    /// The keys of this level's `auth_jwt_key_file`s, combined.
    keys: Option<Arc<KeySet>>,
    /// The files behind `keys`, so a further `auth_jwt_key_file` at the same level adds to them.
    key_files: Vec<PathBuf>,
    leeway: Duration,
    require: Vec<Arc<Require>>,
    cache: CachePolicy,
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

/// A JWT variable, resolved at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtVar {
    /// `$jwt_claim_NAME` or an `auth_jwt_claim_set` path.
    Claim(Box<[Box<str>]>),
    /// `$jwt_header_NAME` or an `auth_jwt_header_set` path.
    Header(Box<[Box<str>]>),
    /// `$jwt_payload`.
    Payload,
}

thread_local! {
    /// The `auth_jwt_claim_set` / `auth_jwt_header_set` variables of the configuration being
    /// compiled, known before any argument is compiled.
    static DECLARED: RefCell<Vec<(String, JwtVar)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` (a configuration compile) with the variables the `http` block's
/// `auth_jwt_claim_set` and `auth_jwt_header_set` declare.
pub(crate) fn with_variables<R>(
    http: &[Directive],
    f: impl FnOnce() -> Result<R, ConfigError>,
) -> Result<R, ConfigError> {
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
            .ok_or_else(|| err(d, format!("invalid variable name \"{}\"", d.arg(0))))?;
        if d.args.len() - 1 > MAX_CLAIM_PATH {
            return Err(err(
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
    DECLARED.with(|v| *v.borrow_mut() = declared);
    let result = f();
    DECLARED.with(|v| v.borrow_mut().clear());
    result
}

/// The JWT variable called `name`, if it is one.
pub(crate) fn variable(name: &str) -> Option<JwtVar> {
    let declared = DECLARED.with(|v| {
        v.borrow()
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, var)| var.clone())
    });
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

/// Appends the value of `var` for the request's verified token; nothing without one.
pub(crate) fn eval_var(verified: Option<&Verified>, var: &JwtVar, out: &mut Vec<u8>) {
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
pub(crate) struct Loader {
    sets: HashMap<Vec<PathBuf>, Arc<KeySet>>,
    /// The largest `auth_jwt_verified_cache` size, for the workers' caches.
    cache_entries: usize,
}

impl Loader {
    /// The size each worker's verified-token cache needs.
    pub fn cache_entries(&self) -> usize {
        self.cache_entries.max(DEFAULT_VERIFIED_CACHE_ENTRIES)
    }

    /// Applies an `auth_jwt*` directive to `c`. `first` says whether it is the first
    /// `auth_jwt_key_file` / `auth_jwt_require` of its level (it then replaces the inherited
    /// list); `path` resolves a relative file name against the prefix. Returns false for a
    /// directive that is not one of this module's.
    pub fn directive(
        &mut self,
        c: &mut JwtConf,
        d: &Directive,
        first: bool,
        path: &dyn Fn(&str) -> PathBuf,
    ) -> Result<bool, ConfigError> {
        match d.name.as_str() {
            "auth_jwt" => c.auth = auth(d)?,
            "auth_jwt_key_file" => {
                if d.arg(0).contains('$') {
                    return Err(err(
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
                return Err(err(d, "\"auth_jwt_key_request\" is not supported yet"))
            }
            "auth_jwt_key_cache" => {
                value::time_ms(d, 0)?;
            }
            "auth_jwt_leeway" => c.leeway = Duration::from_millis(value::time_ms(d, 0)?),
            "auth_jwt_type" => match d.arg(0) {
                "signed" => {}
                "encrypted" | "nested" => {
                    return Err(err(
                        d,
                        format!("\"auth_jwt_type {}\" is not supported", d.arg(0)),
                    ))
                }
                _ => {
                    return Err(err(
                        d,
                        format!("invalid value \"{}\" in \"{}\" directive", d.arg(0), d.name),
                    ))
                }
            },
            "auth_jwt_require" => {
                if first {
                    c.require.clear();
                }
                c.require.push(Arc::new(require(d)?));
            }
            // Read before compiling, by `with_variables`.
            "auth_jwt_claim_set" | "auth_jwt_header_set" => {}
            "auth_jwt_verified_cache" => {
                c.cache = cache_policy(d)?;
                if let CachePolicy::On { entries, .. } = c.cache {
                    self.cache_entries = self.cache_entries.max(entries);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The combined keys of `files`, each read and parsed once per compile.
    fn key_set(&mut self, files: &[PathBuf], d: &Directive) -> Result<Arc<KeySet>, ConfigError> {
        if let Some(set) = self.sets.get(files) {
            return Ok(set.clone());
        }
        let mut set = KeySet::default();
        for file in files {
            let content = std::fs::read(file).map_err(|e| {
                err(
                    d,
                    format!(
                        "open() \"{}\" failed {}",
                        file.display(),
                        crate::log::os_error(&e)
                    ),
                )
            })?;
            let parsed = KeySet::parse(&content)
                .map_err(|e| err(d, format!("invalid JWK set in \"{}\": {e}", file.display())))?;
            set.extend(parsed);
        }
        let set = Arc::new(set);
        self.sets.insert(files.to_vec(), set.clone());
        Ok(set)
    }
}

fn auth(d: &Directive) -> Result<Option<Arc<Auth>>, ConfigError> {
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
                .ok_or_else(|| err(d, format!("invalid parameter \"{}\"", a.value)))?;
            Some(Template::compile(var, d)?)
        }
    };
    Ok(Some(Arc::new(Auth {
        realm: Template::compile(d.arg(0), d)?,
        token,
    })))
}

fn require(d: &Directive) -> Result<Require, ConfigError> {
    let mut values = Vec::new();
    let mut status = 401;
    for a in &d.args {
        if let Some(code) = a.value.strip_prefix("error=") {
            status = match code {
                "401" => 401,
                "403" => 403,
                _ => return Err(err(d, format!("invalid value \"{}\"", a.value))),
            };
        } else {
            values.push(Template::compile(&a.value, d)?);
        }
    }
    if values.is_empty() {
        return Err(err(
            d,
            "invalid number of arguments in \"auth_jwt_require\" directive",
        ));
    }
    Ok(Require { values, status })
}

fn cache_policy(d: &Directive) -> Result<CachePolicy, ConfigError> {
    if d.arg(0) == "off" {
        if d.args.len() > 1 {
            return Err(err(d, format!("invalid parameter \"{}\"", d.arg(1))));
        }
        return Ok(CachePolicy::Off);
    }
    let entries = value::number(d, 0)?;
    let entries = usize::try_from(entries)
        .ok()
        .filter(|n| (1..=MAX_VERIFIED_CACHE_ENTRIES).contains(n))
        .ok_or_else(|| {
            err(
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

/// A worker's JWT state: its cache of verified tokens.
pub(crate) struct WorkerJwt {
    cache: VerifiedCache,
}

impl WorkerJwt {
    pub fn new(entries: usize) -> WorkerJwt {
        WorkerJwt {
            cache: VerifiedCache::new(entries),
        }
    }

    /// A new configuration generation: its key sets are new, so no entry could hit again.
    pub fn reset(&mut self, entries: usize) {
        if self.cache.capacity() == entries {
            self.cache.clear();
        } else {
            self.cache = VerifiedCache::new(entries);
        }
    }
}

/// Why the access phase refused a request.
pub(crate) struct Denied {
    pub status: u16,
    /// The `WWW-Authenticate` value of a 401.
    pub challenge: Option<Vec<u8>>,
}

/// The access phase's JWT check for a level with `auth_jwt` on. On success the verified
/// token is the request's, for the `$jwt_*` variables.
pub(crate) fn authenticate(
    req: &mut Request<'_>,
    worker: &RefCell<WorkerJwt>,
    conf: &JwtConf,
    auth: &Auth,
) -> Result<(), Denied> {
    let from_variable;
    let token: Option<&[u8]> = match &auth.token {
        Some(t) => {
            from_variable = req.eval(t);
            Some(&from_variable[..]).filter(|t| !t.is_empty())
        }
        None => req.head.header("authorization").and_then(bearer),
    };
    let Some(token) = token else {
        return Err(challenge(req, auth, 401, false));
    };
    let Some(keys) = &conf.keys else {
        req.log(Level::Error, "no JWT keys configured for \"auth_jwt\"");
        return Err(Denied {
            status: 500,
            challenge: None,
        });
    };
    let now = SystemTime::now();
    let result = match conf.cache {
        CachePolicy::On { max_age, .. } => {
            worker
                .borrow_mut()
                .cache
                .verify_within(token, keys, now, conf.leeway, max_age)
        }
        CachePolicy::Off => portcullis_jwt::verify(token, keys, now, conf.leeway).map(Arc::new),
    };
    let verified = match result {
        Ok(v) => v,
        Err(e) => {
            log_failure(req, &e);
            return Err(challenge(req, auth, 401, true));
        }
    };
    req.jwt = Some(verified);
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
            });
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

    #[test]
    fn variables_by_name() {
        assert_eq!(variable("jwt_payload"), Some(JwtVar::Payload));
        assert_eq!(
            variable("jwt_claim_sub"),
            Some(JwtVar::Claim(Box::new(["sub".into()])))
        );
        assert_eq!(
            variable("jwt_header_kid"),
            Some(JwtVar::Header(Box::new(["kid".into()])))
        );
        assert_eq!(variable("jwt_claim_"), None);
        assert_eq!(variable("uri"), None);
    }
}
