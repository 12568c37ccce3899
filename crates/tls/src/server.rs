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
use rustls_pki_types::{CertificateDer, UnixTime};

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
}

/// Everything a server block's TLS needs, already read from its directives.
pub struct ServerSettings {
    /// `ssl_certificate` / `ssl_certificate_key` pairs, in the order written.
    pub certs: Vec<CertifiedKey>,
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
    roots: Vec<CertificateDer<'static>>,
    /// Indices into `roots` of the self-issued ones.
    anchors: Vec<usize>,
    /// The files' other certificates.
    intermediates: Vec<CertificateDer<'static>>,
    algs: WebPkiSupportedAlgorithms,
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
        let end = webpki::EndEntityCert::try_from(leaf).map_err(|_| "certificate verify error")?;
        let anchors: Vec<_> = self
            .anchors
            .iter()
            .filter_map(|&i| webpki::anchor_from_trusted_cert(&self.roots[i]).ok())
            .collect();
        let mut pool: Vec<CertificateDer<'_>> = sent.to_vec();
        pool.extend(self.intermediates.iter().cloned());
        let short = |path: &webpki::VerifiedPath<'_>| {
            if path.intermediate_certificates().count() > depth {
                Err(webpki::Error::MaximumPathDepthExceeded)
            } else {
                Ok(())
            }
        };
        let now = UnixTime::now();
        let build = |limit: Option<&PathCheck<'_>>| {
            end.verify_for_usage(
                self.algs.all,
                &anchors,
                &pool,
                now,
                webpki::KeyUsage::client_auth(),
                None,
                limit,
            )
            .map(|_| ())
        };
        match build(Some(&short)) {
            Ok(()) => Ok(()),
            // A chain there is, only longer than the depth allows.
            Err(_) if build(None).is_ok() => Err("certificate chain too long"),
            Err(e) => Err(openssl_reason(&rustls::Error::InvalidCertificate(
                webpki_error(e),
            ))),
        }
    }
}

/// A check of a chain built, which refuses it (the builder then tries another).
type PathCheck<'a> = dyn Fn(&webpki::VerifiedPath<'_>) -> Result<(), webpki::Error> + 'a;

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
                "unsupported certificate purpose"
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
        let choice = CertChoice::new(s.certs, &s.tls12_suites, tls13);
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
    let (anchors, intermediates): (Vec<usize>, Vec<usize>) =
        (0..a.roots.len()).partition(|&i| crate::dn::self_issued(&a.roots[i]));
    let chain = Chain {
        roots: a.roots.clone(),
        anchors,
        intermediates: intermediates.iter().map(|&i| a.roots[i].clone()).collect(),
        algs: provider.signature_verification_algorithms,
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
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}
