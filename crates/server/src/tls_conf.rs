//! `ngx_http_ssl_module`: the `ssl_*` directives of the http and server levels, read into
//! each server block's TLS configuration when the configuration loads (the handshake itself,
//! and the stream, are the connection's: `tls.rs`). A server-level directive replaces the
//! http-level one of the same name, as nginx merges them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use portcullis_config::{value, ConfigError, Directive};
use portcullis_tls::{
    ClientAuth, ServerSettings, ServerTls, VerifyClient, DEFAULT_SESSION_TIMEOUT,
};
use rustls::server::{NoServerSessionStorage, ProducesTickets, StoresServerSessions};
use rustls::sign::CertifiedKey;

use crate::module::{self, Load, Module, Slot};
use crate::request::Handlers;
use crate::tls::server::{ServerTlsBits, ServerTlsConf};
use crate::vars::{Template, Var};

/// nginx's default `ssl_ciphers`.
const DEFAULT_CIPHERS: &str = "HIGH:!aNULL:!MD5";
/// nginx's default `ssl_verify_depth`.
const DEFAULT_VERIFY_DEPTH: usize = 1;
/// Largest `ssl_buffer_size` that means anything: a TLS record holds at most 16 KiB.
const MAX_RECORD: usize = 16 * 1024;
/// Smallest record rustls can write with its framing.
const MIN_RECORD: usize = 32;
/// The `builtin` cache's size without `:size`, in sessions, as nginx's default.
const BUILTIN_SESSIONS: usize = 20480;

pub(crate) struct SslModule;

pub(crate) static MODULE: SslModule = SslModule;

/// A level's `ssl*` directives: the http level's, and the server's own, which the server's
/// TLS settings are made of.
#[derive(Clone, Default)]
struct Conf {
    http: Vec<Directive>,
    own: Vec<Directive>,
}

impl Module for SslModule {
    fn name(&self) -> &'static str {
        "http_ssl_module"
    }

    /// Every `ssl` and `ssl_*` directive: those it does not implement to warn of.
    fn owns(&self, directive: &str) -> bool {
        directive == "ssl" || directive.starts_with("ssl_")
    }

    fn load(&self) -> Box<dyn std::any::Any + Send + Sync> {
        Box::<TlsBuilder>::default()
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
        if let Some(warning) = portcullis_config::ignored_warning(d) {
            cx.warnings.push(format!("{warning} in {}", d.span));
        }
        module::edit::<Conf>(conf).own.push(d.clone());
        Ok(())
    }

    /// What the http level said is what each server's own directives go over.
    fn finish_http(
        &self,
        conf: &mut Slot,
        _http: &[Directive],
        _cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::edit::<Conf>(conf);
        c.http = std::mem::take(&mut c.own);
        Ok(())
    }

    fn is_active(&self, _conf: &Slot) -> bool {
        false
    }

    /// None: its settings are read at load, by the connection's TLS.
    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers::NONE;
        &HANDLERS
    }

    fn server_tls(
        &self,
        conf: &Slot,
        block: &Directive,
        h2: bool,
        cx: &mut Load<'_>,
    ) -> Result<Option<ServerTlsBits>, ConfigError> {
        let c = module::get::<Conf>(conf);
        let own: Vec<&Directive> = c.own.iter().collect();
        let builder = cx
            .state
            .downcast_mut::<TlsBuilder>()
            .expect("the module's own load state");
        let conf_prefix = cx.conf_prefix;
        let resolve = |p: &str| conf_prefix.join(p);
        let bits =
            builder.server_with(&own, &c.http, block, h2, &resolve, cx.names, cx.warnings)?;
        Ok(Some(bits))
    }
}

/// State of one configuration load: the ticket keys, and the certificates already read (a certificate set at http level is read once, not once per
/// server).
#[derive(Default)]
struct TlsBuilder {
    ticketers: HashMap<Vec<PathBuf>, Arc<dyn ProducesTickets>>,
    /// By certificate, key and the file of the passwords tried on it: the passwords
    /// themselves are not kept past the server that read them (this state lives as long as
    /// the configuration), as nginx wipes them once its keys are loaded.
    keys: HashMap<(PathBuf, PathBuf, Option<PathBuf>), CertifiedKey>,
}

impl TlsBuilder {
    /// Reads a server block's `ssl_*` directives (`own`, with the http level's beneath
    /// them). `resolve` turns a relative path into the one nginx would open; `h2`: whether
    /// ALPN offers HTTP/2 (`listen ... http2` or `http2 on`).
    #[allow(clippy::too_many_arguments)]
    fn server_with(
        &mut self,
        own: &[&Directive],
        http_level: &[Directive],
        block: &Directive,
        h2: bool,
        resolve: &dyn Fn(&str) -> PathBuf,
        names: &crate::vars::Names,
        warnings: &mut Vec<String>,
    ) -> Result<ServerTlsBits, ConfigError> {
        let http: Vec<&Directive> = http_level.iter().collect();
        let merged = Merged { own, http: &http };
        let mut ssl_on = false;
        if let Some(d) = merged.last("ssl") {
            // The loader has already warned that it is deprecated.
            ssl_on = value::flag(d, 0)?;
        }
        let reject_handshake = match merged.last("ssl_reject_handshake") {
            Some(d) => value::flag(d, 0)?,
            None => false,
        };
        let certs = merged.all("ssl_certificate");
        if certs.is_empty() {
            let conf = reject_handshake.then(|| {
                Arc::new(ServerTlsConf {
                    tls: None,
                    reject_handshake,
                })
            });
            return Ok(ServerTlsBits { conf, ssl_on });
        }
        let keys = merged.all("ssl_certificate_key");
        let password_file = merged.last("ssl_password_file");
        let passwords = match password_file {
            Some(d) => portcullis_tls::read_password_file(&resolve(d.arg(0)))
                .map_err(|e| ConfigError::at(d, e.to_string()))?,
            None => Vec::new(),
        };
        let password_file = password_file.map(|d| resolve(d.arg(0)));
        let mut pairs = Vec::with_capacity(certs.len());
        for (i, c) in certs.iter().enumerate() {
            let Some(k) = keys.get(i) else {
                return Err(ConfigError::at(
                    c,
                    format!(
                        "no \"ssl_certificate_key\" is defined for certificate \"{}\"",
                        c.arg(0)
                    ),
                ));
            };
            pairs.push((handshake_path(c, names)?, handshake_path(k, names)?, *c));
        }
        // As nginx: when a pair names variables, every pair is read on each handshake.
        let dynamic = pairs
            .iter()
            .any(|(c, k, _)| c.as_literal().is_none() || k.as_literal().is_none());
        let mut loaded = Vec::with_capacity(pairs.len());
        let mut loader = None;
        if dynamic {
            loader = Some(certificate_loader(
                pairs.into_iter().map(|(c, k, _)| (c, k)).collect(),
                resolve(""),
                passwords,
            ));
        } else {
            for (c, k, d) in &pairs {
                let (cert, key) = (c.as_literal(), k.as_literal());
                let (cert, key) = (resolve(cert.unwrap_or("")), resolve(key.unwrap_or("")));
                let id = (cert, key, password_file.clone());
                loaded.push(self.certified_key(d, id, &passwords)?);
            }
        }
        let mut settings = self.settings(&merged, loaded, block, h2, resolve, warnings)?;
        settings.loader = loader;
        let tls = ServerTls::build(settings).map_err(|e| ConfigError::at(block, e.to_string()))?;
        Ok(ServerTlsBits {
            conf: Some(Arc::new(ServerTlsConf {
                tls: Some(tls),
                reject_handshake,
            })),
            ssl_on,
        })
    }

    fn certified_key(
        &mut self,
        d: &Directive,
        id: (PathBuf, PathBuf, Option<PathBuf>),
        passwords: &[Vec<u8>],
    ) -> Result<CertifiedKey, ConfigError> {
        if let Some(k) = self.keys.get(&id) {
            return Ok(k.clone());
        }
        let k = portcullis_tls::load_certified_key(&id.0, &id.1, passwords)
            .map_err(|e| ConfigError::at(d, e.to_string()))?;
        self.keys.insert(id, k.clone());
        Ok(k)
    }

    fn settings(
        &mut self,
        m: &Merged<'_>,
        certs: Vec<CertifiedKey>,
        block: &Directive,
        h2: bool,
        resolve: &dyn Fn(&str) -> PathBuf,
        warnings: &mut Vec<String>,
    ) -> Result<ServerSettings, ConfigError> {
        let versions = match m.last("ssl_protocols") {
            Some(d) => {
                let names: Vec<&str> = d.args.iter().map(|a| a.value.as_str()).collect();
                let choice = portcullis_tls::protocol_versions(&names)
                    .map_err(|e| ConfigError::at(d, e.to_string()))?;
                for name in &choice.not_offered {
                    warnings.push(format!(
                        "the \"{name}\" protocol of \"ssl_protocols\" is not offered: only TLSv1.2 and TLSv1.3 are, in {}",
                        d.span
                    ));
                }
                if choice.versions.is_empty() {
                    return Err(ConfigError::at(d, "no protocol left in \"ssl_protocols\""));
                }
                choice.versions
            }
            None => rustls::ALL_VERSIONS.to_vec(),
        };
        let tls12 = versions
            .iter()
            .any(|v| v.version == rustls::ProtocolVersion::TLSv1_2);
        let (spec, cipher_d) = match m.last("ssl_ciphers") {
            Some(d) => (d.arg(0), d),
            None => (DEFAULT_CIPHERS, block),
        };
        let tls12_suites = match portcullis_tls::tls12_suites(spec) {
            Ok(s) if !s.is_empty() || !tls12 => s,
            Ok(_) => {
                return Err(ConfigError::at(
                    cipher_d,
                    format!("SSL_CTX_set_cipher_list(\"{spec}\") failed (no cipher match)"),
                ))
            }
            Err(e) if tls12 => return Err(ConfigError::at(cipher_d, e.to_string())),
            Err(_) => Vec::new(),
        };
        let kx_groups = match m.last("ssl_ecdh_curve") {
            Some(d) => Some(
                portcullis_tls::kx_groups(d.arg(0))
                    .map_err(|e| ConfigError::at(d, e.to_string()))?,
            ),
            None => None,
        };
        let prefer_server_ciphers = match m.last("ssl_prefer_server_ciphers") {
            Some(d) => value::flag(d, 0)?,
            None => false,
        };
        if let Some(d) = m.last("ssl_dhparam") {
            warnings.push(format!(
                "\"ssl_dhparam\" is accepted, but DHE cipher suites are not offered in {}",
                d.span
            ));
        }
        let max_fragment_size = match m.last("ssl_buffer_size") {
            Some(d) => {
                let n = usize::try_from(value::size(d, 0)?).unwrap_or(usize::MAX);
                // rustls counts the record header in the fragment size.
                Some(n.clamp(MIN_RECORD, MAX_RECORD) + 5)
            }
            None => None,
        };
        let timeout = match m.last("ssl_session_timeout") {
            Some(d) => Duration::from_secs(value::time_s(d, 0)?),
            None => DEFAULT_SESSION_TIMEOUT,
        };
        let (session_storage, session_cache) = self.session_cache(m, timeout)?;
        let tickets_on = match m.last("ssl_session_tickets") {
            Some(d) => value::flag(d, 0)?,
            None => true,
        };
        let ticketer = if tickets_on {
            let files: Vec<PathBuf> = m
                .all("ssl_session_ticket_key")
                .iter()
                .map(|d| resolve(d.arg(0)))
                .collect();
            Some(self.ticketer(files, timeout, m)?)
        } else {
            None
        };
        let client_auth = self.client_auth(m, resolve)?;
        Ok(ServerSettings {
            certs,
            loader: None,
            versions,
            tls12_suites,
            kx_groups,
            prefer_server_ciphers,
            session_storage,
            session_cache,
            ticketer,
            client_auth,
            alpn: if h2 {
                vec![b"h2".to_vec(), b"http/1.1".to_vec()]
            } else {
                vec![b"http/1.1".to_vec()]
            },
            max_fragment_size,
        })
    }

    /// `ssl_session_cache off | none | [builtin[:size]] [shared:name:size]`.
    fn session_cache(
        &mut self,
        m: &Merged<'_>,
        timeout: Duration,
    ) -> Result<(Arc<dyn StoresServerSessions>, bool), ConfigError> {
        let none = || -> Arc<dyn StoresServerSessions> { Arc::new(NoServerSessionStorage {}) };
        let Some(d) = m.last("ssl_session_cache") else {
            return Ok((none(), false));
        };
        let mut storage = None;
        for a in &d.args {
            let v = a.value.as_str();
            match v {
                "off" | "none" if d.args.len() == 1 => return Ok((none(), false)),
                "builtin" => {
                    storage.get_or_insert_with(|| {
                        portcullis_tls::session_cache_of(BUILTIN_SESSIONS, timeout)
                    });
                }
                _ => {
                    if let Some(size) = v.strip_prefix("builtin:") {
                        let n = value::parse_number(size)
                            .and_then(|n| usize::try_from(n).ok())
                            .filter(|n| *n > 0)
                            .ok_or_else(|| invalid_cache(d, v))?;
                        storage.get_or_insert_with(|| portcullis_tls::session_cache_of(n, timeout));
                    } else if let Some(rest) = v.strip_prefix("shared:") {
                        let (name, size) =
                            rest.split_once(':').ok_or_else(|| invalid_cache(d, v))?;
                        let bytes = value::parse_size(size)
                            .filter(|b| *b > 0 && !name.is_empty())
                            .ok_or_else(|| invalid_cache(d, v))?;
                        // Every server naming the zone shares it, as nginx's shared memory.
                        storage = Some(portcullis_tls::shared_session_cache(name, bytes, timeout));
                    } else {
                        return Err(invalid_cache(d, v));
                    }
                }
            }
        }
        Ok(match storage {
            Some(s) => (s, true),
            None => (none(), false),
        })
    }

    fn ticketer(
        &mut self,
        files: Vec<PathBuf>,
        lifetime: Duration,
        m: &Merged<'_>,
    ) -> Result<Arc<dyn ProducesTickets>, ConfigError> {
        if let Some(t) = self.ticketers.get(&files) {
            return Ok(t.clone());
        }
        let made = if files.is_empty() {
            portcullis_tls::new_ticketer(lifetime)
        } else {
            portcullis_tls::load_ticket_keys(&files, lifetime)
        };
        let t = made.map_err(|e| {
            let d = m
                .last("ssl_session_ticket_key")
                .or(m.last("ssl_session_tickets"));
            ConfigError {
                message: e.to_string(),
                span: d.map(|d| d.span.clone()),
            }
        })?;
        self.ticketers.insert(files, t.clone());
        Ok(t)
    }

    fn client_auth(
        &self,
        m: &Merged<'_>,
        resolve: &dyn Fn(&str) -> PathBuf,
    ) -> Result<Option<ClientAuth>, ConfigError> {
        // Read whether or not certificates are verified, as nginx does.
        let crls = match m.last("ssl_crl") {
            Some(c) => Some(
                portcullis_tls::load_crls(&resolve(c.arg(0)))
                    .map_err(|e| ConfigError::at(c, e.to_string()))?,
            ),
            None => None,
        };
        let Some(d) = m.last("ssl_verify_client") else {
            return Ok(None);
        };
        let mode = match d.arg(0) {
            "off" => return Ok(None),
            "on" => VerifyClient::On,
            "optional" => VerifyClient::Optional,
            "optional_no_ca" => VerifyClient::OptionalNoCa,
            other => {
                return Err(ConfigError::at(
                    d,
                    format!("invalid value \"{other}\" in \"ssl_verify_client\" directive, it must be \"on\", \"off\", \"optional\" or \"optional_no_ca\""),
                ))
            }
        };
        let mut roots = Vec::new();
        let mut rejected = Vec::new();
        for name in ["ssl_client_certificate", "ssl_trusted_certificate"] {
            if let Some(c) = m.last(name) {
                let what = if name == "ssl_client_certificate" {
                    "client certificate"
                } else {
                    "trusted certificate"
                };
                let (kept, refused) = portcullis_tls::load_trust(
                    &resolve(c.arg(0)),
                    what,
                    portcullis_tls::Purpose::ClientAuth,
                )
                .map_err(|e| ConfigError::at(c, e.to_string()))?;
                roots.extend(kept);
                rejected.extend(refused);
            }
        }
        let depth = match m.last("ssl_verify_depth") {
            Some(v) => usize::try_from(value::number(v, 0)?).unwrap_or(usize::MAX),
            None => DEFAULT_VERIFY_DEPTH,
        };
        if roots.is_empty() && mode != VerifyClient::OptionalNoCa {
            return Err(ConfigError::at(
                d,
                "no ssl_client_certificate for ssl_verify_client",
            ));
        }
        Ok(Some(ClientAuth {
            mode,
            roots,
            depth,
            crls,
            rejected,
        }))
    }
}

/// `ssl_certificate`'s or `ssl_certificate_key`'s path: variables are read at the
/// handshake, where only `$ssl_server_name` (the name the client asked for) is known here.
fn handshake_path(d: &Directive, names: &crate::vars::Names) -> Result<Template, ConfigError> {
    let t = Template::compile(d.arg(0), d, names)?;
    if t.variables()
        .any(|v| !matches!(v, Var::Ssl(crate::vars::SslVar::ServerName)))
    {
        return Err(ConfigError::at(
            d,
            format!(
                "variables other than \"$ssl_server_name\" in \"{}\" are not supported yet",
                d.name
            ),
        ));
    }
    Ok(t)
}

/// Reads the pairs named by variables for the name a client asks for, on each handshake as
/// nginx does; a pair whose files have not changed since it was last read is taken from
/// memory.
fn certificate_loader(
    pairs: Vec<(Template, Template)>,
    prefix: PathBuf,
    passwords: Vec<Vec<u8>>,
) -> Arc<portcullis_tls::CertLoader> {
    /// When the certificate and key files were last changed.
    type Read = (Option<std::time::SystemTime>, Option<std::time::SystemTime>);
    /// Pairs read, by their files.
    type Cache = HashMap<(PathBuf, PathBuf), (Read, Arc<CertifiedKey>)>;
    let cache: std::sync::Mutex<Cache> = std::sync::Mutex::new(HashMap::new());
    Arc::new(move |sni: Option<&str>| {
        let path = |t: &Template| {
            let mut out = Vec::new();
            t.eval_into(&mut out, &mut |_, o| {
                o.extend_from_slice(sni.unwrap_or_default().as_bytes())
            });
            prefix.join(String::from_utf8_lossy(&out).as_ref())
        };
        let mut keys = Vec::with_capacity(pairs.len());
        for (c, k) in &pairs {
            let (cert, key) = (path(c), path(k));
            let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            let read = (modified(&cert), modified(&key));
            let id = (cert, key);
            if let Some((when, ck)) = cache.lock().ok().and_then(|c| c.get(&id).cloned()) {
                if when == read && read.0.is_some() {
                    keys.push(ck);
                    continue;
                }
            }
            let ck = portcullis_tls::load_certified_key(&id.0, &id.1, &passwords)
                .map(Arc::new)
                .map_err(|e| e.to_string())?;
            if let Ok(mut c) = cache.lock() {
                // Names come from clients: the memory stays bounded.
                if c.len() >= 1024 {
                    c.clear();
                }
                c.insert(id, (read, ck.clone()));
            }
            keys.push(ck);
        }
        Ok(keys)
    })
}

fn invalid_cache(d: &Directive, v: &str) -> ConfigError {
    ConfigError::at(d, format!("invalid session cache \"{v}\""))
}

/// A server's directives over the http level's.
struct Merged<'a> {
    own: &'a [&'a Directive],
    http: &'a [&'a Directive],
}

impl<'a> Merged<'a> {
    /// The level that sets `name`: the server's if it does, else the http level's.
    fn level(&self, name: &str) -> &'a [&'a Directive] {
        if self.own.iter().any(|d| d.name == name) {
            self.own
        } else {
            self.http
        }
    }

    fn last(&self, name: &str) -> Option<&'a Directive> {
        self.level(name)
            .iter()
            .rev()
            .find(|d| d.name == name)
            .copied()
    }

    fn all(&self, name: &str) -> Vec<&'a Directive> {
        self.level(name)
            .iter()
            .filter(|d| d.name == name)
            .copied()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile_http(http: &str) -> Result<crate::Compiled, ConfigError> {
        let text = format!("events {{}}\nhttp {{\naccess_log off;\n{http}\n}}\n");
        let dir = std::env::temp_dir();
        let loaded = portcullis_config::load_str(&text, &dir.join("t.conf"), &Default::default())
            .unwrap_or_else(|e| panic!("{e}"));
        crate::compile(&loaded, &dir, None)
    }

    fn message(http: &str) -> String {
        match compile_http(http) {
            Ok(_) => panic!("compiled: {http}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn ssl_listen_without_certificate_names_the_server() {
        let m = message("server {\nlisten 127.0.0.1:1 ssl;\n}");
        assert!(
            m.starts_with(
                "no \"ssl_certificate\" is defined for the \"listen ... ssl\" directive in "
            ) && m.ends_with("t.conf:4"),
            "{m}"
        );
    }

    #[test]
    fn reject_handshake_needs_no_certificate() {
        let c = compile_http("server {\nlisten 127.0.0.1:1 ssl;\nssl_reject_handshake on;\n}")
            .unwrap_or_else(|e| panic!("{e}"));
        let server = c.http.listens[0].servers.default_server();
        let tls = server.tls.as_ref().expect("tls settings");
        assert!(tls.reject_handshake && tls.tls.is_none());
    }

    #[test]
    fn missing_certificate_file_is_an_error_at_its_line() {
        let m = message(
            "server {\nlisten 127.0.0.1:1 ssl;\nssl_certificate /nonexistent.crt;\nssl_certificate_key /nonexistent.key;\n}",
        );
        assert_eq!(
            m,
            format!(
                "cannot load certificate \"/nonexistent.crt\": BIO_new_file() failed (2: No such file or directory) in {}:6",
                std::env::temp_dir().join("t.conf").display()
            )
        );
    }

    #[test]
    fn certificate_without_key_is_an_error() {
        let m = message("server {\nssl_certificate /x.crt;\n}");
        assert!(
            m.starts_with("no \"ssl_certificate_key\" is defined for certificate \"/x.crt\""),
            "{m}"
        );
    }

    /// A certificate and key written for one test, removed when dropped.
    struct Certificate {
        dir: PathBuf,
        /// The directives naming them.
        directives: String,
    }

    impl Drop for Certificate {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn certificate(label: &str) -> Certificate {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let dir = std::env::temp_dir().join(format!(
            "portcullis-tls-conf-{label}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("c.crt"), cert.pem()).expect("write cert");
        std::fs::write(dir.join("c.key"), key.serialize_pem()).expect("write key");
        let directives = format!(
            "ssl_certificate {0}/c.crt;\nssl_certificate_key {0}/c.key;",
            dir.display()
        );
        Certificate { dir, directives }
    }

    #[test]
    fn session_cache_values_are_checked() {
        let certificate = certificate("cache");
        let cert = &certificate.directives;
        for bad in [
            "shared:SSL",
            "shared::1m",
            "builtin:x",
            "bogus",
            "shared:SSL:0",
        ] {
            let m = message(&format!("server {{\n{cert}\nssl_session_cache {bad};\n}}"));
            assert!(
                m.starts_with(&format!("invalid session cache \"{bad}\"")),
                "{bad}: {m}"
            );
        }
        for good in [
            "off",
            "none",
            "builtin",
            "builtin:1000 shared:SSL:10m",
            "shared:SSL:512k",
        ] {
            let http = format!("server {{\n{cert}\nssl_session_cache {good};\n}}");
            if let Err(e) = compile_http(&http) {
                panic!("{good}: {e}");
            }
        }
    }

    #[test]
    fn ciphers_that_select_nothing_are_an_error() {
        let certificate = certificate("ciphers");
        let cert = &certificate.directives;
        let m = message(&format!(
            "server {{\n{cert}\nssl_protocols TLSv1.2;\nssl_ciphers NOTHING-AT-ALL;\n}}"
        ));
        assert!(m.contains("NOTHING-AT-ALL"), "{m}");
    }

    #[test]
    fn protocols_and_dhparam_not_offered_are_warned_about() {
        let certificate = certificate("warn");
        let http = format!(
            "server {{\n{}\nssl_protocols TLSv1 TLSv1.1 TLSv1.2;\nssl_dhparam /x.pem;\nssl_stapling off;\n}}",
            certificate.directives
        );
        let c = compile_http(&http).unwrap_or_else(|e| panic!("{e}"));
        let w = c.warnings().join("\n");
        assert!(
            w.contains("the \"TLSv1\" protocol of \"ssl_protocols\" is not offered"),
            "{w}"
        );
        assert!(w.contains("the \"TLSv1.1\" protocol"), "{w}");
        assert!(
            w.contains("\"ssl_dhparam\" is accepted, but DHE cipher suites are not offered"),
            "{w}"
        );
        assert!(!w.contains("ssl_stapling"), "{w}");
    }
}
