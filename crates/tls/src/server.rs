//! A server block's rustls configuration, built once when the configuration loads and shared
//! by every worker, with the client-certificate check nginx makes after the handshake.

use std::fmt;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{aws_lc_rs, CryptoProvider, SupportedKxGroup, WebPkiSupportedAlgorithms};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ProducesTickets, StoresServerSessions};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme, SupportedCipherSuite, SupportedProtocolVersion,
};
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};

use crate::certs::CertChoice;
use crate::TlsError;

/// `ssl_verify_client`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyClient {
    Off,
    /// A valid certificate is required.
    On,
    /// A certificate is asked for; one sent must be valid.
    Optional,
    /// A certificate is asked for and not verified against a CA.
    OptionalNoCa,
}

/// Client certificates: the mode, the CAs they must chain to, and how long a chain may be.
pub struct ClientAuth {
    pub mode: VerifyClient,
    /// `ssl_client_certificate` (also sent to clients as acceptable CAs) and
    /// `ssl_trusted_certificate`.
    pub roots: Vec<CertificateDer<'static>>,
    /// `ssl_verify_depth`: intermediate certificates allowed between the client's and a CA.
    pub depth: usize,
    /// `ssl_crl`: every certificate of the chain must be covered by one of these lists and
    /// not be on it (OpenSSL's `CRL_CHECK_ALL`, as nginx sets it).
    pub crls: Option<Vec<CertificateRevocationListDer<'static>>>,
    /// Certificates of the CA files whose trust settings refuse client certificates
    /// (`TRUSTED CERTIFICATE`): a chain through one is refused, as OpenSSL refuses it.
    pub rejected: Vec<CertificateDer<'static>>,
}

/// Everything a server block's TLS needs, already read from its directives.
pub struct ServerSettings {
    /// `ssl_certificate` / `ssl_certificate_key` pairs, in the order written.
    pub certs: Vec<CertifiedKey>,
    /// Pairs named by variables, read on each handshake instead.
    pub loader: Option<Arc<crate::certs::CertLoader>>,
    pub versions: Vec<&'static SupportedProtocolVersion>,
    /// TLS 1.2 suites from `ssl_ciphers`, in its order; TLS 1.3 suites are always all on.
    pub tls12_suites: Vec<SupportedCipherSuite>,
    /// `ssl_ecdh_curve`; `None` keeps the provider's groups.
    pub kx_groups: Option<Vec<&'static dyn SupportedKxGroup>>,
    pub prefer_server_ciphers: bool,
    pub session_storage: Arc<dyn StoresServerSessions>,
    /// Whether resumption through the session cache is on (else no TLS 1.3 stateful tickets).
    pub session_cache: bool,
    pub ticketer: Option<Arc<dyn ProducesTickets>>,
    pub client_auth: Option<ClientAuth>,
    pub alpn: Vec<Vec<u8>>,
    /// `ssl_buffer_size`: the largest TLS record written.
    pub max_fragment_size: Option<usize>,
}

/// A server block's TLS: its rustls configuration and its client-certificate check.
pub struct ServerTls {
    pub config: Arc<ServerConfig>,
    pub client: Option<ClientCheck>,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

/// What `$ssl_client_verify` says of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientVerify {
    /// No certificate was sent (or none asked for).
    None,
    Success,
    /// Why the certificate was refused, in OpenSSL's words.
    Failed(&'static str),
}

impl ClientVerify {
    /// The value of `$ssl_client_verify`.
    pub fn as_text(&self) -> String {
        match self {
            ClientVerify::None => "NONE".into(),
            ClientVerify::Success => "SUCCESS".into(),
            ClientVerify::Failed(why) => format!("FAILED:{why}"),
        }
    }
}

/// The client-certificate check run after the handshake, as nginx does: the handshake accepts
/// any certificate whose signature is right, and the request then learns whether it chains to
/// a trusted CA.
pub struct ClientCheck {
    pub mode: VerifyClient,
    chain: Option<Chain>,
    depth: usize,
}

/// What a client's chain is built with, as OpenSSL builds it from nginx's CA files: it ends
/// at a certificate that names itself as its issuer; the others of the files are
/// intermediates, as those the client sends.
struct Chain {
    /// The files' self-issued certificates, as trust anchors, each with its certificate.
    anchors: Vec<rustls_pki_types::TrustAnchor<'static>>,
    anchor_certs: Vec<CertificateDer<'static>>,
    /// The files' certificates and lists, for webpki's checks and for what it does not
    /// verify ([`crate::chain`]).
    files: crate::chain::Anchors,
}

impl ClientCheck {
    pub fn verify(&self, certs: Option<&[CertificateDer<'static>]>) -> ClientVerify {
        let Some((leaf, sent)) = certs.and_then(|c| c.split_first()) else {
            return ClientVerify::None;
        };
        let Some(chain) = &self.chain else {
            return ClientVerify::Success;
        };
        match chain.verify(leaf, sent, self.depth) {
            Ok(()) => ClientVerify::Success,
            Err(why) => ClientVerify::Failed(why),
        }
    }
}

impl Chain {
    /// OpenSSL's verification with `ssl_verify_depth` `depth`: at most that many
    /// intermediates between the client's certificate and a root, counted on the chain
    /// built (not on what the client sent).
    fn verify(
        &self,
        leaf: &CertificateDer<'_>,
        sent: &[CertificateDer<'static>],
        depth: usize,
    ) -> Result<(), &'static str> {
        // A version 1 certificate: webpki takes none.
        let end = match webpki::EndEntityCert::try_from(leaf) {
            Ok(end) => end,
            Err(webpki::Error::UnsupportedCertVersion) => {
                return self.verify_as_openssl(leaf, sent, depth)
            }
            Err(webpki::Error::UnsupportedCriticalExtension) => {
                return Err("unhandled critical extension")
            }
            Err(_) => return Err("certificate verify error"),
        };
        let pool: Vec<CertificateDer<'_>> = sent
            .iter()
            .chain(&self.files.others)
            .map(|c| CertificateDer::from(c.as_ref()))
            .collect();
        let now = UnixTime::now();
        // What OpenSSL checks beyond webpki, on each chain built; the first refusal's words.
        let refused: std::cell::Cell<Option<&'static str>> = std::cell::Cell::new(None);
        let short = |path: &webpki::VerifiedPath<'_>| {
            let why = self.openssl_checks(leaf, path, depth, now.as_secs());
            if why.is_some() && refused.get().is_none() {
                refused.set(why);
            }
            why.map_or(Ok(()), |_| Err(webpki::Error::MaximumPathDepthExceeded))
        };
        let crls: Vec<&webpki::CertRevocationList<'_>> = self.files.crls.iter().flatten().collect();
        let revocation = webpki::RevocationOptionsBuilder::new(&crls).ok().map(|b| {
            b.with_depth(webpki::RevocationCheckDepth::Chain)
                .with_status_policy(webpki::UnknownStatusPolicy::Deny)
                .with_expiration_policy(webpki::ExpirationPolicy::Enforce)
                .build()
        });
        let build = |limit: Option<&PathCheck<'_>>| {
            end.verify_for_usage(
                self.files.algs.all,
                &self.anchors,
                &pool,
                now,
                webpki::KeyUsage::client_auth(),
                revocation,
                limit,
            )
            .map(|_| ())
        };
        match build(Some(&short)) {
            // A CA certificate as the client's own.
            Err(webpki::Error::CaUsedAsEndEntity) => self.verify_as_openssl(leaf, sent, depth),
            // `ssl_crl` names a file without lists: no certificate's status can be known.
            Ok(()) if self.files.crls.is_some() && revocation.is_none() => {
                Err("unable to get certificate CRL")
            }
            Ok(()) => Ok(()),
            // A chain there is, only one OpenSSL refuses.
            Err(_) if build(None).is_ok() => {
                Err(refused.get().unwrap_or("certificate verify error"))
            }
            // No certificate at all names the client's issuer: OpenSSL's chain is the
            // client's alone.
            // An issuer the trust settings refuse (`TRUSTED CERTIFICATE`).
            Err(webpki::Error::UnknownIssuer) if self.issuer_rejected(leaf, sent) => {
                Err("unsuitable certificate purpose")
            }
            Err(webpki::Error::UnknownIssuer) if !self.issuer_known(leaf, sent) => {
                Err("unable to verify the first certificate")
            }
            Err(e) => Err(revocation_reason(&e).unwrap_or_else(|| {
                openssl_reason(&rustls::Error::InvalidCertificate(webpki_error(e)))
            })),
        }
    }
}

impl Chain {
    /// Whether a certificate the trust settings refuse is named as the issuer of `leaf` or
    /// of one sent.
    fn issuer_rejected(&self, leaf: &CertificateDer<'_>, sent: &[CertificateDer<'static>]) -> bool {
        let issuers: Vec<&[u8]> = std::iter::once(leaf.as_ref())
            .chain(sent.iter().map(|c| c.as_ref()))
            .filter_map(|c| crate::dn::names_and_serial(c).map(|(issuer, _, _)| issuer))
            .collect();
        self.files.rejected.iter().any(|r| {
            crate::dn::names_and_serial(r).is_some_and(|(_, subject, _)| issuers.contains(&subject))
        })
    }

    /// Whether a certificate of the files or of those sent is named as `leaf`'s issuer.
    fn issuer_known(&self, leaf: &CertificateDer<'_>, sent: &[CertificateDer<'static>]) -> bool {
        let Some((issuer, _, _)) = crate::dn::names_and_serial(leaf) else {
            return true;
        };
        self.files
            .roots
            .iter()
            .chain(&self.files.others)
            .chain(sent)
            .any(|c| {
                crate::dn::names_and_serial(c).is_some_and(|(_, subject, _)| subject == issuer)
            })
    }

    /// What webpki does not verify, verified as OpenSSL does ([`crate::chain`]).
    fn verify_as_openssl(
        &self,
        leaf: &CertificateDer<'_>,
        sent: &[CertificateDer<'static>],
        depth: usize,
    ) -> Result<(), &'static str> {
        self.files.verify(
            leaf,
            sent,
            depth,
            crate::dn::EKU_CLIENT_AUTH,
            UnixTime::now(),
        )
    }

    /// OpenSSL's checks of a chain webpki built and does not make: `ssl_verify_depth`; the
    /// root a CA (a certificate that is not one is trusted only as the client's own), in
    /// its validity period, its path length limit; each intermediate's key usage and path
    /// length; the client's key usage for a TLS client. `None`: the chain passes.
    fn openssl_checks(
        &self,
        leaf: &CertificateDer<'_>,
        path: &webpki::VerifiedPath<'_>,
        depth: usize,
        now: u64,
    ) -> Option<&'static str> {
        use crate::dn::{
            constraints, validity, KU_DIGITAL_SIGNATURE, KU_KEY_AGREEMENT, KU_KEY_CERT_SIGN,
        };
        let inters: Vec<CertificateDer<'_>> =
            path.intermediate_certificates().map(|c| c.der()).collect();
        if inters.len() > depth {
            return Some("unable to get local issuer certificate");
        }
        // An intermediate the trust settings refuse, sent by the client.
        if inters
            .iter()
            .any(|c| crate::chain::is_one_of(c, &self.files.rejected))
        {
            return Some("unsuitable certificate purpose");
        }
        let i = self
            .anchors
            .iter()
            .position(|a| std::ptr::eq(a, path.anchor()))?;
        let root = &self.anchor_certs[i];
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        match validity(root) {
            Some((from, _)) if from.unix() > now => return Some("certificate is not yet valid"),
            Some((_, until)) if until.unix() < now => return Some("certificate has expired"),
            _ => {}
        }
        let signs =
            |c: &crate::dn::Constraints| c.key_usage.is_none_or(|ku| ku & KU_KEY_CERT_SIGN != 0);
        let rc = constraints(root).unwrap_or_default();
        let root_is_ca =
            matches!(rc.basic, Some((true, _))) || (rc.basic.is_none() && rc.key_usage.is_none());
        if !(root_is_ca && signs(&rc)) {
            // Trusted as the client's own certificate only.
            if !(inters.is_empty() && root.as_ref() == leaf.as_ref()) {
                return Some(if signs(&rc) {
                    "invalid CA certificate"
                } else {
                    "key usage does not include certificate signing"
                });
            }
            return None;
        }
        if let Some((_, Some(len))) = rc.basic {
            if inters.len() as u64 > len {
                return Some("path length constraint exceeded");
            }
        }
        for (below, inter) in inters.iter().enumerate() {
            let c = constraints(inter).unwrap_or_default();
            if !signs(&c) {
                return Some("key usage does not include certificate signing");
            }
            if let Some((_, Some(len))) = c.basic {
                if below as u64 > len {
                    return Some("path length constraint exceeded");
                }
            }
        }
        let lc = constraints(leaf).unwrap_or_default();
        if lc
            .key_usage
            .is_some_and(|ku| ku & (KU_DIGITAL_SIGNATURE | KU_KEY_AGREEMENT) == 0)
        {
            return Some("unsuitable certificate purpose");
        }
        None
    }
}

/// A check of a chain built, which refuses it (the builder then tries another).
type PathCheck<'a> = dyn Fn(&webpki::VerifiedPath<'_>) -> Result<(), webpki::Error> + 'a;

/// OpenSSL's text for a refusal by `ssl_crl`.
fn revocation_reason(e: &webpki::Error) -> Option<&'static str> {
    use webpki::Error as E;
    Some(match e {
        E::CertRevoked => "certificate revoked",
        E::UnknownRevocationStatus => "unable to get certificate CRL",
        E::CrlExpired { .. } => "CRL has expired",
        E::InvalidCrlSignatureForPublicKey
        | E::UnsupportedCrlSignatureAlgorithmContext(_)
        | E::UnsupportedCrlSignatureAlgorithmForPublicKeyContext(_) => "CRL signature failure",
        _ => return None,
    })
}

/// rustls's words for a webpki verification error, as its own verifier maps them.
fn webpki_error(e: webpki::Error) -> CertificateError {
    use webpki::Error as E;
    match e {
        E::CertExpired { .. } => CertificateError::Expired,
        E::CertNotValidYet { .. } => CertificateError::NotValidYet,
        E::UnknownIssuer => CertificateError::UnknownIssuer,
        E::InvalidSignatureForPublicKey
        | E::UnsupportedSignatureAlgorithmForPublicKeyContext(_) => CertificateError::BadSignature,
        E::RequiredEkuNotFoundContext(_) => CertificateError::InvalidPurpose,
        _ => CertificateError::BadEncoding,
    }
}

/// OpenSSL's text for a verification failure, as `$ssl_client_verify` shows it.
fn openssl_reason(e: &rustls::Error) -> &'static str {
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "certificate has expired"
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "certificate is not yet valid"
            }
            CertificateError::UnknownIssuer => "unable to get local issuer certificate",
            CertificateError::BadSignature => "certificate signature failure",
            CertificateError::Revoked => "certificate revoked",
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                "unsuitable certificate purpose"
            }
            _ => "certificate verify error",
        },
        _ => "certificate verify error",
    }
}

impl ServerTls {
    /// Builds the configuration. Errors are in nginx's words.
    pub fn build(s: ServerSettings) -> Result<ServerTls, TlsError> {
        let base = aws_lc_rs::default_provider();
        let tls13 = s
            .versions
            .iter()
            .any(|v| v.version == rustls::ProtocolVersion::TLSv1_3);
        let mut suites: Vec<SupportedCipherSuite> = base
            .cipher_suites
            .iter()
            .filter(|c| matches!(c, SupportedCipherSuite::Tls13(_)))
            .copied()
            .collect();
        suites.extend(s.tls12_suites.iter().copied());
        let provider = Arc::new(CryptoProvider {
            cipher_suites: suites,
            kx_groups: s.kx_groups.clone().unwrap_or(base.kx_groups.clone()),
            ..base
        });
        let algs = provider.signature_verification_algorithms;
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&s.versions)
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let client = match &s.client_auth {
            Some(a) if a.mode != VerifyClient::Off => Some(client_check(a, &provider)?),
            _ => None,
        };
        let builder = match &client {
            Some(c) => builder.with_client_cert_verifier(Arc::new(AnyClientCert {
                hints: c.hints.clone(),
                algs,
            })),
            None => builder.with_no_client_auth(),
        };
        let choice = CertChoice::new(s.certs, &s.tls12_suites, tls13).with_loader(s.loader);
        let mut config = builder.with_cert_resolver(Arc::new(choice));
        config.ignore_client_order = s.prefer_server_ciphers;
        config.session_storage = s.session_storage;
        let tickets = s.ticketer.is_some();
        if let Some(t) = s.ticketer {
            config.ticketer = t;
        }
        if !tickets && !s.session_cache {
            config.send_tls13_tickets = 0;
        }
        config.alpn_protocols = s.alpn;
        config.max_fragment_size = s.max_fragment_size;
        Ok(ServerTls {
            config: Arc::new(config),
            client: client.map(|c| c.check),
        })
    }
}

struct Client {
    check: ClientCheck,
    hints: Vec<DistinguishedName>,
}

fn client_check(a: &ClientAuth, provider: &Arc<CryptoProvider>) -> Result<Client, TlsError> {
    if a.roots.is_empty() {
        if a.mode != VerifyClient::OptionalNoCa {
            return Err(TlsError::NoClientCa);
        }
        return Ok(Client {
            check: ClientCheck {
                mode: a.mode,
                chain: None,
                depth: a.depth,
            },
            hints: Vec::new(),
        });
    }
    let mut store = RootCertStore::empty();
    for c in &a.roots {
        store
            .add(c.clone())
            .map_err(|e| TlsError::Config(format!("bad client CA certificate: {e}")))?;
    }
    let hints = store.subjects();
    let files = crate::chain::Anchors::new(
        &a.roots,
        a.rejected.clone(),
        a.crls.as_deref(),
        provider.signature_verification_algorithms,
    )?;
    let mut anchors = Vec::new();
    let mut anchor_certs = Vec::new();
    for c in &files.roots {
        if let Ok(anchor) = webpki::anchor_from_trusted_cert(c) {
            anchors.push(anchor.to_owned());
            anchor_certs.push(c.clone());
        }
    }
    let chain = Chain {
        anchors,
        anchor_certs,
        files,
    };
    // optional_no_ca asks for a certificate and takes any.
    let chain = (a.mode != VerifyClient::OptionalNoCa).then_some(chain);
    Ok(Client {
        check: ClientCheck {
            mode: a.mode,
            chain,
            depth: a.depth,
        },
        hints,
    })
}

/// A handshake signature checked with the key of a certificate webpki does not read (version
/// 1): the scheme's algorithms for the key's type.
pub(crate) fn signed_with_key(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
    tls13: bool,
) -> Option<HandshakeSignatureValid> {
    // Only for a certificate webpki does not read (version 1, a critical extension it does
    // not know): anything else it has judged already. This proves only that the peer holds
    // the key; the chain is judged after the handshake, where such certificates are refused
    // but for version 1 ones.
    if webpki::EndEntityCert::try_from(cert).is_ok() {
        return None;
    }
    // TLS 1.3's schemes: no PKCS#1, and ECDSA on its own curve (the mapping's first).
    use SignatureScheme as S;
    let in_tls13 = matches!(
        dss.scheme,
        S::ECDSA_NISTP256_SHA256
            | S::ECDSA_NISTP384_SHA384
            | S::ECDSA_NISTP521_SHA512
            | S::RSA_PSS_SHA256
            | S::RSA_PSS_SHA384
            | S::RSA_PSS_SHA512
            | S::ED25519
            | S::ED448
    );
    if tls13 && !in_tls13 {
        return None;
    }
    let (key_alg, key) = crate::dn::public_key(cert)?;
    let (_, candidates) = algs.mapping.iter().find(|(s, _)| *s == dss.scheme)?;
    let candidates = if tls13 {
        &candidates[..candidates.len().min(1)]
    } else {
        candidates
    };
    candidates
        .iter()
        .any(|a| {
            a.public_key_alg_id().as_ref() == key_alg
                && a.verify_signature(key, message, dss.signature()).is_ok()
        })
        .then(HandshakeSignatureValid::assertion)
}

/// Asks for a client certificate and accepts any whose holder proves it has the key: the
/// chain is judged after the handshake ([`ClientCheck`]), so a refused certificate gets
/// nginx's 400 page rather than a handshake alert.
struct AnyClientCert {
    hints: Vec<DistinguishedName>,
    algs: WebPkiSupportedAlgorithms,
}

impl fmt::Debug for AnyClientCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AnyClientCert")
    }
}

impl ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
            .or_else(|e| signed_with_key(message, cert, dss, &self.algs, false).ok_or(e))
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
            .or_else(|e| signed_with_key(message, cert, dss, &self.algs, true).ok_or(e))
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}
