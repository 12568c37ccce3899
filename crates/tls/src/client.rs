//! rustls client configurations for connections to upstreams, built from nginx's
//! `proxy_ssl_*` directives once when the configuration loads.
//!
//! As nginx, the upstream's certificate is accepted whatever it is unless `proxy_ssl_verify`
//! is on; then it must chain to `proxy_ssl_trusted_certificate` within `proxy_ssl_verify_depth`
//! and name the host. Failures carry OpenSSL's verify code and text, so the error log reads as
//! nginx's (`upstream SSL certificate verify error: (21:unable to verify the first
//! certificate)`).
//!
//! Locations with the same settings share one configuration, and with it one session store:
//! every worker's connections to an upstream resume the sessions any of them made. The
//! configuration is found again by a reload that keeps the settings and files, so sessions
//! outlive it.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{Resumption, WebPkiServerVerifier};
use rustls::crypto::{aws_lc_rs, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, OtherError, RootCertStore,
    SignatureScheme, SupportedCipherSuite,
};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use crate::{load_certified_key, protocol_versions, tls12_suites, TlsError};

/// nginx's default `proxy_ssl_verify_depth`.
pub const DEFAULT_VERIFY_DEPTH: usize = 1;

/// Sessions a client configuration remembers: rustls keeps them per server name, and a
/// name holds a few TLS 1.3 tickets, so this covers hundreds of upstream names.
const CLIENT_SESSIONS: usize = 1024;

/// Sessions kept for one upstream address: the names it is reached by (`proxy_ssl_name`).
const PEER_SESSIONS: usize = 16;

/// The `proxy_ssl_*` settings of a location, as written (paths already made absolute).
/// Two locations with equal specs share a configuration.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientSpec {
    /// `proxy_ssl_protocols`.
    pub protocols: Vec<String>,
    /// `proxy_ssl_ciphers`, an OpenSSL cipher string.
    pub ciphers: String,
    /// `proxy_ssl_verify`.
    pub verify: bool,
    /// `proxy_ssl_trusted_certificate`.
    pub trusted: Option<PathBuf>,
    /// `proxy_ssl_verify_depth`.
    pub depth: usize,
    /// `proxy_ssl_certificate` and `proxy_ssl_certificate_key`.
    pub certificate: Option<(PathBuf, PathBuf)>,
    /// `proxy_ssl_session_reuse`.
    pub session_reuse: bool,
    /// `proxy_ssl_server_name`: whether SNI is sent.
    pub server_name: bool,
    /// `proxy_ssl_crl`: every certificate of the upstream's chain must be covered by a list
    /// of this file and not on it.
    pub crl: Option<PathBuf>,
    /// `proxy_ssl_password_file`, for an encrypted `proxy_ssl_certificate_key`.
    pub password_file: Option<PathBuf>,
    /// The protocols offered by ALPN: none for the proxy's HTTP/1.x, `h2` for gRPC.
    pub alpn: Vec<Vec<u8>>,
}

impl Default for ClientSpec {
    /// nginx's defaults.
    fn default() -> Self {
        ClientSpec {
            protocols: vec!["TLSv1.2".into(), "TLSv1.3".into()],
            ciphers: "DEFAULT".into(),
            verify: false,
            trusted: None,
            depth: DEFAULT_VERIFY_DEPTH,
            certificate: None,
            session_reuse: true,
            server_name: false,
            crl: None,
            password_file: None,
            alpn: Vec::new(),
        }
    }
}

/// The configuration for `spec`: the one already built for an equal spec over the same file
/// contents if one is in use, else a new one. Errors are in nginx's words.
pub fn client_config(spec: &ClientSpec) -> Result<Arc<UpstreamClient>, TlsError> {
    /// Configurations in use, by spec and the bytes of the files it names. Weak: a
    /// configuration lives as long as a loaded configuration uses it.
    static SHARED: Mutex<Vec<SharedClient>> = Mutex::new(Vec::new());
    let files = file_contents(spec);
    let Ok(mut shared) = SHARED.lock() else {
        return Ok(Arc::new(UpstreamClient::new(
            build(spec)?,
            spec.session_reuse,
        )));
    };
    shared.retain(|s| s.config.strong_count() > 0);
    if let Some(config) = shared
        .iter()
        .find(|s| s.spec == *spec && s.files == files)
        .and_then(|s| s.config.upgrade())
    {
        return Ok(config);
    }
    let config = Arc::new(upstream_client(spec)?);
    shared.push(SharedClient {
        spec: spec.clone(),
        files,
        config: Arc::downgrade(&config),
    });
    Ok(config)
}

/// A configuration of [`client_config`], with what it was built from.
struct SharedClient {
    spec: ClientSpec,
    files: Vec<Option<Vec<u8>>>,
    config: Weak<UpstreamClient>,
}

/// Upstream addresses a configuration keeps sessions for; past it they start again.
const PEERS: usize = 4096;

/// A client configuration and, per upstream address, a copy of it with a session store of
/// its own: as nginx keeps a session per upstream server, a session one server gave is never
/// offered to another (which, sharing its ticket keys, could resume it and so skip the
/// certificate check that `proxy_ssl_verify` makes of each server).
pub struct UpstreamClient {
    base: Arc<ClientConfig>,
    /// `proxy_ssl_session_reuse`.
    reuse: bool,
    /// `proxy_ssl_verify`.
    verify: bool,
    /// Configurations made from `base`: by upstream address (with session reuse) and by
    /// client certificate (named by variables).
    made: Mutex<HashMap<MadeFor, Arc<ClientConfig>>>,
    /// `proxy_ssl_password_file`'s passwords, for certificates named by variables.
    passwords: Vec<Vec<u8>>,
    /// Client certificates named by variables, as last read, with when their files changed.
    certs: Mutex<HashMap<CertFiles, (FileTimes, Arc<CertifiedKey>)>>,
}

/// A certificate file and its key's.
pub type CertFiles = (PathBuf, PathBuf);

/// What a configuration of [`UpstreamClient::for_peer`] was made for.
type MadeFor = (Option<SocketAddr>, Option<CertFiles>);

/// When two files last changed.
type FileTimes = (Option<std::time::SystemTime>, Option<std::time::SystemTime>);

/// A client certificate named by variables, read for a request.
#[derive(Clone)]
pub struct ClientCert {
    files: CertFiles,
    key: Arc<CertifiedKey>,
}

impl fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamClient").finish_non_exhaustive()
    }
}

impl UpstreamClient {
    /// `reuse`: `proxy_ssl_session_reuse`.
    pub fn new(base: Arc<ClientConfig>, reuse: bool) -> UpstreamClient {
        UpstreamClient {
            base,
            reuse,
            verify: false,
            made: Mutex::new(HashMap::new()),
            passwords: Vec::new(),
            certs: Mutex::new(HashMap::new()),
        }
    }

    /// The configuration as built, which connections to no one peer use.
    pub fn base(&self) -> &Arc<ClientConfig> {
        &self.base
    }

    /// Whether the upstream's certificate is checked (`proxy_ssl_verify`).
    pub fn verifies(&self) -> bool {
        self.verify
    }

    /// The client certificate in `files` (`proxy_ssl_certificate` with variables), read
    /// again when its files changed. Errors are in nginx's words.
    pub fn certificate(&self, files: CertFiles) -> Result<ClientCert, TlsError> {
        let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let times = (modified(&files.0), modified(&files.1));
        if let Some((when, key)) = self.certs.lock().ok().and_then(|c| c.get(&files).cloned()) {
            if when == times && times.0.is_some() {
                return Ok(ClientCert { files, key });
            }
        }
        let key = Arc::new(load_certified_key(&files.0, &files.1, &self.passwords)?);
        if let Ok(mut certs) = self.certs.lock() {
            if certs.len() >= PEERS {
                certs.clear();
            }
            certs.insert(files.clone(), (times, key.clone()));
        }
        Ok(ClientCert { files, key })
    }

    /// The configuration for connections to `peer`, showing `cert` if one is named by
    /// variables.
    pub fn for_peer(&self, peer: SocketAddr, cert: Option<&ClientCert>) -> Arc<ClientConfig> {
        if !self.reuse && cert.is_none() {
            return self.base.clone();
        }
        let id = (self.reuse.then_some(peer), cert.map(|c| c.files.clone()));
        let Ok(mut made) = self.made.lock() else {
            return self.base.clone();
        };
        if let Some(c) = made.get(&id) {
            // A certificate read again since: the configuration is made again too.
            let current = cert.is_none_or(|cert| made_with(c) == Some(Arc::as_ptr(&cert.key)));
            if current {
                return c.clone();
            }
        }
        if made.len() >= PEERS {
            made.clear();
        }
        let mut config = (*self.base).clone();
        if self.reuse {
            config.resumption = Resumption::in_memory_sessions(PEER_SESSIONS);
        }
        if let Some(cert) = cert {
            config.client_auth_cert_resolver = Arc::new(ShownCert(cert.key.clone()));
        }
        let config = Arc::new(config);
        made.insert(id, config.clone());
        config
    }
}

/// A client certificate named by variables, shown to an upstream that asks for one.
#[derive(Debug)]
struct ShownCert(Arc<CertifiedKey>);

impl rustls::client::ResolvesClientCert for ShownCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The certificate a configuration of [`UpstreamClient::for_peer`] shows, if it was made
/// with one.
fn made_with(c: &ClientConfig) -> Option<*const CertifiedKey> {
    c.client_auth_cert_resolver
        .resolve(&[], &[])
        .map(|k| Arc::as_ptr(&k))
}

/// The contents of the files `spec` names, so that a reload after a file changed builds anew.
fn file_contents(spec: &ClientSpec) -> Vec<Option<Vec<u8>>> {
    let (cert, key) = match &spec.certificate {
        Some((c, k)) => (Some(c), Some(k)),
        None => (None, None),
    };
    [
        spec.trusted.as_ref(),
        cert,
        key,
        spec.crl.as_ref(),
        spec.password_file.as_ref(),
    ]
    .into_iter()
    .map(|p| p.and_then(|p| std::fs::read(p).ok()))
    .collect()
}

/// The configurations for `spec`.
fn upstream_client(spec: &ClientSpec) -> Result<UpstreamClient, TlsError> {
    let mut client = UpstreamClient::new(build(spec)?, spec.session_reuse);
    client.verify = spec.verify;
    if let Some(p) = &spec.password_file {
        client.passwords = crate::read_password_file(p)?;
    }
    Ok(client)
}

/// Builds the configuration for `spec`.
pub fn build(spec: &ClientSpec) -> Result<Arc<ClientConfig>, TlsError> {
    let names: Vec<&str> = spec.protocols.iter().map(String::as_str).collect();
    let versions = protocol_versions(&names).map_err(|e| TlsError::Config(e.to_string()))?;
    let tls12 = tls12_suites(&spec.ciphers).map_err(|e| TlsError::Config(e.to_string()))?;
    let base = aws_lc_rs::default_provider();
    let mut suites: Vec<SupportedCipherSuite> = base
        .cipher_suites
        .iter()
        .filter(|c| matches!(c, SupportedCipherSuite::Tls13(_)))
        .copied()
        .collect();
    suites.extend(tls12);
    let provider = Arc::new(CryptoProvider {
        cipher_suites: suites,
        ..base
    });
    let algs = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ServerCertVerifier> = if spec.verify {
        let Some(trusted) = &spec.trusted else {
            return Err(TlsError::Config(
                "no proxy_ssl_trusted_certificate for proxy_ssl_verify".into(),
            ));
        };
        let mut roots = RootCertStore::empty();
        let (trusted_certs, rejected) =
            crate::load_trust(trusted, "certificate", crate::Purpose::ServerAuth)?;
        for c in &trusted_certs {
            // Version 1 ones webpki does not take are for [`crate::chain`] only.
            if webpki::anchor_from_trusted_cert(c).is_err() {
                continue;
            }
            roots.add(c.clone()).map_err(|e| TlsError::Certificate {
                what: "certificate",
                path: trusted.display().to_string(),
                cause: e.to_string(),
            })?;
        }
        let mut chain =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone());
        // OpenSSL's CRL_CHECK_ALL: every certificate of the chain must be covered by a list
        // in force. A file without lists (certificates only) leaves every one unknown.
        let mut no_lists = false;
        let mut lists = None;
        if let Some(crl) = &spec.crl {
            let crls = crate::load_crls(crl)?;
            no_lists = crls.is_empty();
            lists = Some(crls.clone());
            chain = chain.with_crls(crls).enforce_revocation_expiration();
        }
        let chain = chain.build().map_err(|e| TlsError::Config(e.to_string()))?;
        Arc::new(Verified {
            chain,
            depth: spec.depth,
            no_lists,
            files: crate::chain::Anchors::new(&trusted_certs, rejected, lists.as_deref(), algs)?,
        })
    } else {
        Arc::new(AnyServerCert { algs })
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions.versions)
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match &spec.certificate {
        Some((cert, key)) => {
            let passwords = match &spec.password_file {
                Some(p) => crate::read_password_file(p)?,
                None => Vec::new(),
            };
            let certified = load_certified_key(cert, key, &passwords)?;
            builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(certified)))
        }
        None => builder.with_no_client_auth(),
    };
    config.enable_sni = spec.server_name;
    config.alpn_protocols.clone_from(&spec.alpn);
    config.resumption = if spec.session_reuse {
        Resumption::in_memory_sessions(CLIENT_SESSIONS)
    } else {
        Resumption::disabled()
    };
    Ok(Arc::new(config))
}

/// A certificate refused by `proxy_ssl_verify`, with OpenSSL's verify code and text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyError {
    pub code: u32,
    pub text: &'static str,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.code, self.text)
    }
}

impl std::error::Error for VerifyError {}

/// Why a handshake with an upstream failed, in nginx's words, without the
/// " while SSL handshaking to upstream" that the caller adds.
pub fn handshake_failure(e: &rustls::Error, name: &str) -> String {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(other))) => {
            match other.downcast_ref::<VerifyError>() {
                Some(v) => format!("upstream SSL certificate verify error: ({v})"),
                None => format!("SSL_do_handshake() failed (SSL: {e})"),
            }
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!("upstream SSL certificate does not match \"{name}\""),
        rustls::Error::InvalidMessage(_) => {
            // What OpenSSL says of bytes that are no TLS record, such as a plain HTTP reply.
            "SSL_do_handshake() failed (SSL: error:0A00010B:SSL routines::wrong version number)"
                .into()
        }
        rustls::Error::AlertReceived(alert) => format!(
            "SSL_do_handshake() failed (SSL: error:0A000410:SSL routines::ssl/tls alert {}:SSL alert number {})",
            alert_text(*alert),
            u8::from(*alert)
        ),
        other => format!("SSL_do_handshake() failed (SSL: {other})"),
    }
}

/// OpenSSL's words for an alert the upstream sent.
fn alert_text(alert: rustls::AlertDescription) -> String {
    use rustls::AlertDescription as A;
    match alert {
        A::HandshakeFailure => "handshake failure".into(),
        A::ProtocolVersion => "protocol version".into(),
        A::BadCertificate => "bad certificate".into(),
        A::CertificateRequired => "certificate required".into(),
        A::UnknownCA => "unknown ca".into(),
        A::InternalError => "internal error".into(),
        A::UnrecognisedName => "unrecognized name".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// `proxy_ssl_verify on`: the chain must reach a trusted certificate with at most `depth`
/// intermediates, and name the host.
struct Verified {
    chain: Arc<WebPkiServerVerifier>,
    depth: usize,
    /// `proxy_ssl_crl` names a file without lists: no certificate's status can be known.
    no_lists: bool,
    /// The trusted file's certificates (those its trust settings refuse for servers too)
    /// and `proxy_ssl_crl`'s lists, for what webpki does not read ([`crate::chain`]).
    files: crate::chain::Anchors,
}

impl fmt::Debug for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verified")
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl ServerCertVerifier for Verified {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // A version 1 certificate: webpki takes none.
        if matches!(
            webpki::EndEntityCert::try_from(end_entity),
            Err(webpki::Error::UnsupportedCertVersion)
        ) {
            return self.verify_as_openssl(end_entity, intermediates, server_name, now);
        }
        // An intermediate the trust settings refuse for servers, sent by the upstream.
        if intermediates
            .iter()
            .any(|c| crate::chain::is_one_of(c, &self.files.rejected))
        {
            return Err(refused(VerifyError {
                code: 26,
                text: "unsuitable certificate purpose",
            }));
        }
        // A chain is sent leaf first, issuers after: the first `depth` intermediates are the
        // ones a path within the depth can use; a longer path fails as OpenSSL's does.
        let allowed = &intermediates[..intermediates.len().min(self.depth)];
        match self
            .chain
            .verify_server_cert(end_entity, allowed, server_name, ocsp, now)
        {
            Ok(_) if self.no_lists => Err(refused(VerifyError {
                code: 3,
                text: "unable to get certificate CRL",
            })),
            Ok(v) => Ok(v),
            // The chain is good (the name is checked last): OpenSSL takes the subject's
            // common name as the name of a certificate that has no DNS name.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if crate::dn::common_name_matches(end_entity, &name_text(server_name)) => {
                if self.no_lists {
                    return Err(refused(VerifyError {
                        code: 3,
                        text: "unable to get certificate CRL",
                    }));
                }
                Ok(ServerCertVerified::assertion())
            }
            Err(e) if allowed.len() < intermediates.len() => {
                match self.chain.verify_server_cert(
                    end_entity,
                    intermediates,
                    server_name,
                    ocsp,
                    now,
                ) {
                    Ok(_) => Err(refused(VerifyError {
                        code: 22,
                        text: "certificate chain too long",
                    })),
                    Err(_) => Err(openssl_verify_error(e, intermediates.is_empty())),
                }
            }
            Err(e) => Err(openssl_verify_error(e, intermediates.is_empty())),
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain
            .verify_tls12_signature(message, cert, dss)
            .or_else(|e| {
                crate::server::signed_with_key(message, cert, dss, &self.files.algs, false).ok_or(e)
            })
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain
            .verify_tls13_signature(message, cert, dss)
            .or_else(|e| {
                crate::server::signed_with_key(message, cert, dss, &self.files.algs, true).ok_or(e)
            })
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

impl Verified {
    /// A certificate webpki does not read (version 1), verified as OpenSSL does
    /// ([`crate::chain`]), then its name: a version 1 certificate's is its common name.
    fn verify_as_openssl(
        &self,
        leaf: &CertificateDer<'_>,
        sent: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Err(text) =
            self.files
                .verify(leaf, sent, self.depth, crate::dn::EKU_SERVER_AUTH, now)
        {
            return Err(refused(VerifyError {
                code: crate::chain::code(text),
                text,
            }));
        }
        if self.no_lists {
            return Err(refused(VerifyError {
                code: 3,
                text: "unable to get certificate CRL",
            }));
        }
        if !crate::dn::common_name_matches(leaf, &name_text(name)) {
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
            ));
        }
        Ok(ServerCertVerified::assertion())
    }
}

/// A server name as text: a DNS name as written, an address in its usual form.
fn name_text(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(d) => d.as_ref().to_string(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        _ => String::new(),
    }
}

fn refused(v: VerifyError) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(v))))
}

/// A webpki refusal as OpenSSL's verify code. A name mismatch stays as it is: nginx reports
/// it apart, naming the host.
fn openssl_verify_error(e: rustls::Error, leaf_only: bool) -> rustls::Error {
    let c = match &e {
        rustls::Error::InvalidCertificate(c) => c,
        rustls::Error::InvalidCertRevocationList(_) => {
            return refused(VerifyError {
                code: 8,
                text: "CRL signature failure",
            })
        }
        _ => return e,
    };
    let (code, text) = match c {
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            return e
        }
        CertificateError::UnknownIssuer if leaf_only => {
            (21, "unable to verify the first certificate")
        }
        CertificateError::UnknownIssuer => (20, "unable to get local issuer certificate"),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            (10, "certificate has expired")
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            (9, "certificate is not yet valid")
        }
        CertificateError::BadSignature => (7, "certificate signature failure"),
        CertificateError::Revoked => (23, "certificate revoked"),
        CertificateError::UnknownRevocationStatus => (3, "unable to get certificate CRL"),
        CertificateError::ExpiredRevocationList
        | CertificateError::ExpiredRevocationListContext { .. } => (12, "CRL has expired"),
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            (26, "unsuitable certificate purpose")
        }
        _ => (1, "unspecified certificate verification error"),
    };
    refused(VerifyError { code, text })
}

/// `proxy_ssl_verify off`: any certificate is accepted, as nginx does, while the handshake's
/// signatures are still checked against it.
struct AnyServerCert {
    algs: WebPkiSupportedAlgorithms,
}

impl fmt::Debug for AnyServerCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AnyServerCert")
    }
}

impl ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs).or_else(|e| {
            crate::server::signed_with_key(message, cert, dss, &self.algs, false).ok_or(e)
        })
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs).or_else(|e| {
            crate::server::signed_with_key(message, cert, dss, &self.algs, true).ok_or(e)
        })
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    use rustls::{ClientConnection, ServerConfig, ServerConnection};
    use rustls_pki_types::PrivateKeyDer;

    /// A directory for one test's PEM files, removed at the end.
    struct Dir(PathBuf);

    impl Dir {
        fn new(label: &str) -> Dir {
            let p = std::env::temp_dir().join(format!(
                "portcullis-tls-client-{label}-{}",
                std::process::id()
            ));
            std::fs::create_dir_all(&p).expect("temp dir");
            Dir(p)
        }
        fn write(&self, name: &str, text: &str) -> PathBuf {
            let p = self.0.join(name);
            std::fs::write(&p, text).expect("write");
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A CA, and what it signed.
    struct Issued {
        cert: rcgen::Certificate,
        key: KeyPair,
    }

    fn ca(name: &str) -> Issued {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("ca");
        Issued { cert, key }
    }

    fn issue(names: &[&str], is_ca: bool, issuer: &Issued) -> Issued {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        if is_ca {
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        }
        let cert = params
            .signed_by(&key, &issuer.cert, &issuer.key)
            .expect("signed");
        Issued { cert, key }
    }

    /// Runs a handshake in memory between `client` and a server sending `chain`.
    fn handshake(
        client: Arc<ClientConfig>,
        name: &str,
        chain: &[&Issued],
        key: &KeyPair,
    ) -> Result<(), rustls::Error> {
        let certs = chain.iter().map(|c| c.cert.der().clone()).collect();
        let key = PrivateKeyDer::try_from(key.serialize_der()).expect("key der");
        let server = ServerConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server config");
        let mut s = ServerConnection::new(Arc::new(server)).expect("server");
        let server_name = ServerName::try_from(name.to_string()).expect("name");
        let mut c = ClientConnection::new(client, server_name).expect("client");
        let mut buf = Vec::new();
        while c.is_handshaking() || s.is_handshaking() {
            buf.clear();
            c.write_tls(&mut buf).expect("client writes");
            let mut rd = &buf[..];
            while !rd.is_empty() {
                s.read_tls(&mut rd).expect("server reads");
            }
            s.process_new_packets()?;
            buf.clear();
            s.write_tls(&mut buf).expect("server writes");
            let mut rd = &buf[..];
            while !rd.is_empty() {
                c.read_tls(&mut rd).expect("client reads");
            }
            c.process_new_packets()?;
        }
        Ok(())
    }

    fn verifying(dir: &Dir, ca: &Issued, depth: usize) -> Arc<ClientConfig> {
        let trusted = dir.write("ca.crt", &ca.cert.pem());
        build(&ClientSpec {
            verify: true,
            trusted: Some(trusted),
            depth,
            ..ClientSpec::default()
        })
        .expect("builds")
    }

    #[test]
    fn verify_off_accepts_any_certificate() {
        let root = ca("any");
        let leaf = issue(&["elsewhere.test"], false, &root);
        let config = build(&ClientSpec::default()).expect("builds");
        assert!(!config.enable_sni);
        handshake(config, "upstream.test", &[&leaf], &leaf.key).expect("accepted");
    }

    #[test]
    fn verify_on_checks_the_ca_and_the_name() {
        let dir = Dir::new("verify");
        let root = ca("root");
        let leaf = issue(&["upstream.test"], false, &root);
        let config = verifying(&dir, &root, DEFAULT_VERIFY_DEPTH);
        handshake(config.clone(), "upstream.test", &[&leaf], &leaf.key).expect("verified");
        let e = handshake(config, "other.test", &[&leaf], &leaf.key).expect_err("name");
        assert_eq!(
            handshake_failure(&e, "other.test"),
            "upstream SSL certificate does not match \"other.test\""
        );
        let stranger = ca("stranger");
        let config = verifying(&dir, &stranger, DEFAULT_VERIFY_DEPTH);
        let e = handshake(config, "upstream.test", &[&leaf], &leaf.key).expect_err("ca");
        assert_eq!(
            handshake_failure(&e, "upstream.test"),
            "upstream SSL certificate verify error: (21:unable to verify the first certificate)"
        );
    }

    #[test]
    fn verify_depth_limits_intermediates() {
        let dir = Dir::new("depth");
        let root = ca("root");
        let intermediate = issue(&[], true, &root);
        let leaf = issue(&["upstream.test"], false, &intermediate);
        let chain = [&leaf, &intermediate];
        handshake(
            verifying(&dir, &root, 1),
            "upstream.test",
            &chain,
            &leaf.key,
        )
        .expect("one intermediate within depth 1");
        let e = handshake(
            verifying(&dir, &root, 0),
            "upstream.test",
            &chain,
            &leaf.key,
        )
        .expect_err("too deep");
        assert_eq!(
            handshake_failure(&e, "upstream.test"),
            "upstream SSL certificate verify error: (22:certificate chain too long)"
        );
    }

    #[test]
    fn verify_needs_a_trusted_certificate() {
        let spec = ClientSpec {
            verify: true,
            ..ClientSpec::default()
        };
        let e = build(&spec).expect_err("no CA");
        assert_eq!(
            e.to_string(),
            "no proxy_ssl_trusted_certificate for proxy_ssl_verify"
        );
    }

    #[test]
    fn equal_settings_share_one_configuration() {
        let a = client_config(&ClientSpec::default()).expect("builds");
        let b = client_config(&ClientSpec::default()).expect("builds");
        assert!(Arc::ptr_eq(&a, &b));
        let no_reuse = ClientSpec {
            session_reuse: false,
            server_name: true,
            ..ClientSpec::default()
        };
        let c = client_config(&no_reuse).expect("builds");
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(c.base().enable_sni);
    }

    #[test]
    fn plain_http_reply_reads_as_openssl_wrong_version() {
        let e = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        assert_eq!(
            handshake_failure(&e, "x"),
            "SSL_do_handshake() failed (SSL: error:0A00010B:SSL routines::wrong version number)"
        );
    }
}
