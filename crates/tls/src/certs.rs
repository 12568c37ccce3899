//! Certificates and keys from PEM files, and the choice among several pairs of one server by
//! what the client supports, as nginx does with an ECDSA and an RSA certificate side by side.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::crypto::aws_lc_rs::sign::any_supported_type;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{CipherSuite, SignatureAlgorithm, SupportedCipherSuite};
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer};

use crate::pem::Purpose;
use crate::TlsError;

/// Reads a certificate chain (leaf first) and its private key, and checks that they belong
/// together. An encrypted key is decrypted with the first of `passwords` that works
/// (`ssl_password_file`).
pub fn load_certified_key(
    cert: &Path,
    key: &Path,
    passwords: &[Vec<u8>],
) -> Result<CertifiedKey, TlsError> {
    let chain = load_chain(cert)?;
    let key_error = |cause: String| TlsError::Key {
        path: key.display().to_string(),
        cause,
    };
    let text = std::fs::read(key)
        .map_err(|e| key_error(format!("BIO_new_file() failed ({})", os_error(&e))))?;
    let key_der = crate::pem::blocks(&text)
        .and_then(|blocks| crate::pem::private_key(&blocks, passwords))
        .map_err(|why| key_error(format!("PEM_read_bio_PrivateKey() failed ({why})")))?;
    let signing =
        any_supported_type(&key_der).map_err(|e| key_error(format!("unsupported key ({e})")))?;
    // The key's public half against the certificate's, read here so that a version 1
    // certificate (which rustls's reader refuses) is served as OpenSSL serves it.
    let matches = match (signing.public_key(), crate::dn::spki(&chain[0])) {
        (Some(key), Some(cert)) => key.as_ref() == cert,
        _ => false,
    };
    let certified = CertifiedKey::new(chain, signing);
    if !matches {
        return Err(TlsError::KeyMismatch {
            path: key.display().to_string(),
        });
    }
    Ok(certified)
}

/// Reads a certificate chain, leaf first (`ssl_certificate`, `proxy_ssl_certificate`). As
/// OpenSSL reads it, the leaf may be a `TRUSTED CERTIFICATE` block; such blocks after it are
/// passed over.
pub fn load_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    read_certs(path, "certificate", |i, b| {
        i == 0 || b.label != "TRUSTED CERTIFICATE"
    })
}

/// Reads the CA certificates of a PEM file that check `purpose`: a certificate whose
/// `TRUSTED CERTIFICATE` settings reject it (or trust it for other purposes only) is left
/// out, as OpenSSL refuses a chain through it. `what` names the file in errors as nginx does
/// ("client certificate", "trusted certificate", "certificate").
pub fn load_certs(
    path: &Path,
    what: &'static str,
    purpose: Purpose,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    load_trust(path, what, purpose).map(|(kept, _)| kept)
}

/// [`load_certs`], with the certificates left out: a chain through one of them is refused
/// even when the peer sends it.
pub fn load_trust(
    path: &Path,
    what: &'static str,
    purpose: Purpose,
) -> Result<(Vec<CertificateDer<'static>>, Vec<CertificateDer<'static>>), TlsError> {
    let all = read_certs(path, what, |_, _| true)?;
    let rejected_at: Vec<bool> = {
        let text = std::fs::read(path).unwrap_or_default();
        let blocks = crate::pem::blocks(&text).unwrap_or_default();
        blocks
            .iter()
            .filter(|b| crate::pem::certificate(b).is_some())
            .map(|b| crate::pem::trust(b, purpose) == Some(false))
            .collect()
    };
    // The names of the CAs sent to clients are read by OpenSSL's `SSL_load_client_CA_file`,
    // which takes only plain certificates.
    if what == "client certificate" && !has_plain_certificate(path) {
        return Err(TlsError::Config(format!(
            "SSL_load_client_CA_file(\"{}\") failed (no start line: expecting: CERTIFICATE)",
            path.display()
        )));
    }
    let (rejected, kept): (Vec<_>, Vec<_>) = all
        .into_iter()
        .enumerate()
        .partition(|(i, _)| rejected_at.get(*i).copied().unwrap_or(false));
    Ok((
        kept.into_iter().map(|(_, c)| c).collect(),
        rejected.into_iter().map(|(_, c)| c).collect(),
    ))
}

fn has_plain_certificate(path: &Path) -> bool {
    let blocks = std::fs::read(path)
        .ok()
        .and_then(|t| crate::pem::blocks(&t).ok())
        .unwrap_or_default();
    blocks
        .iter()
        .any(|b| b.label != "TRUSTED CERTIFICATE" && crate::pem::certificate(b).is_some())
}

/// The certificates of a PEM file that `keep` (given each one's place among them) keeps.
fn read_certs(
    path: &Path,
    what: &'static str,
    keep: impl Fn(usize, &crate::pem::Block) -> bool,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let failed = |cause: String| TlsError::Certificate {
        what,
        path: path.display().to_string(),
        cause,
    };
    let text = std::fs::read(path)
        .map_err(|e| failed(format!("BIO_new_file() failed ({})", os_error(&e))))?;
    let blocks = crate::pem::blocks(&text)
        .map_err(|why| failed(format!("PEM_read_bio_X509_AUX() failed ({why})")))?;
    let found: Vec<(&crate::pem::Block, Vec<u8>)> = blocks
        .iter()
        .filter_map(|b| crate::pem::certificate(b).map(|der| (b, der)))
        .collect();
    if found.is_empty() {
        return Err(failed(
            "PEM_read_bio_X509_AUX() failed (no start line: expecting: TRUSTED CERTIFICATE)".into(),
        ));
    }
    Ok(found
        .into_iter()
        .enumerate()
        .filter(|(i, (b, _))| keep(*i, b))
        .map(|(_, (_, der))| CertificateDer::from(der))
        .collect())
}

/// The passwords of an `ssl_password_file`, one per line, as nginx reads them: a CR before
/// the LF is dropped, an empty line is an empty password, an empty file is one empty
/// password; a file of 4096 bytes or more is refused, and a password is cut to 1024 bytes.
pub fn read_password_file(path: &Path) -> Result<Vec<Vec<u8>>, TlsError> {
    const BUFFER: usize = 4096;
    const PASSWORD_MAX: usize = 1024;
    let text = std::fs::read(path).map_err(|e| {
        TlsError::Config(format!(
            "open() \"{}\" failed ({})",
            path.display(),
            os_error(&e)
        ))
    })?;
    if text.len() >= BUFFER {
        return Err(TlsError::Config(format!(
            "too long line in \"{}\"",
            path.display()
        )));
    }
    let mut passwords: Vec<Vec<u8>> = Vec::new();
    let mut rest = text.as_slice();
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        let line = &rest[..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // OpenSSL's password buffer (PEM_BUFSIZE) holds what is tried.
        passwords.push(line[..line.len().min(PASSWORD_MAX)].to_vec());
        rest = rest.get(end + 1..).unwrap_or_default();
    }
    if passwords.is_empty() {
        passwords.push(Vec::new());
    }
    Ok(passwords)
}

/// Reads the certificate revocation lists of a PEM file (`ssl_crl`, `proxy_ssl_crl`). As
/// OpenSSL's `X509_LOOKUP_load_file`, the file may hold certificates too (they are skipped);
/// a file holding neither is an error.
pub fn load_crls(path: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>, TlsError> {
    let failed = |cause: &str| TlsError::Crl {
        path: path.display().to_string(),
        cause: cause.to_string(),
    };
    let text = std::fs::read(path).map_err(|e| {
        let os = os_error(&e);
        // "No such file or directory", as OpenSSL's system error names it.
        failed(os.split_once(": ").map_or(os.as_str(), |(_, text)| text))
    })?;
    let blocks = crate::pem::blocks(&text).map_err(failed)?;
    let crls: Vec<CertificateRevocationListDer<'static>> = blocks
        .iter()
        .filter(|b| b.label == "X509 CRL")
        .map(|b| CertificateRevocationListDer::from(b.der.clone()))
        .collect();
    if crls.is_empty() && !blocks.iter().any(|b| crate::pem::certificate(b).is_some()) {
        return Err(failed("no certificate or crl found"));
    }
    Ok(crls)
}

/// "(2: No such file or directory)" as nginx writes an errno, without Rust's "(os error 2)".
fn os_error(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            let text = e.to_string();
            let text = text.split(" (os error").next().unwrap_or(&text);
            format!("{code}: {text}")
        }
        None => e.to_string(),
    }
}

/// A server's certificates, in the order written. The first whose key can sign with a scheme
/// the client offers, for a cipher suite the client offers, is used; else the first, so the
/// handshake fails the way a single certificate would.
pub struct CertChoice {
    keys: Vec<Candidate>,
    /// Whether TLS 1.3 is on: its suites work with any key.
    tls13: bool,
    /// Certificates named by variables: read on each handshake instead of `keys`.
    loader: Option<Arc<CertLoader>>,
    /// The enabled TLS 1.2 suites, for the loader's certificates.
    tls12: Vec<SupportedCipherSuite>,
}

/// Certificates named by variables (`ssl_certificate $ssl_server_name.crt`): the pairs for
/// the name the client asked for (by SNI), or why they could not be read, in nginx's words.
pub type CertLoader = dyn Fn(Option<&str>) -> Result<Vec<Arc<CertifiedKey>>, String> + Send + Sync;

thread_local! {
    /// Why the last certificate lookup of this thread's handshake failed.
    static LOAD_ERROR: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Why the certificates named by variables could not be read for the handshake that just
/// failed on this thread, for the error log.
pub fn take_load_error() -> Option<String> {
    LOAD_ERROR.with(|e| e.borrow_mut().take())
}

struct Candidate {
    key: Arc<CertifiedKey>,
    /// The TLS 1.2 suites the server has enabled that can use this key.
    tls12: Vec<CipherSuite>,
}

impl CertChoice {
    /// `tls12` are the enabled TLS 1.2 suites; `tls13` whether TLS 1.3 is on (its suites work
    /// with any key).
    pub(crate) fn new(
        keys: Vec<CertifiedKey>,
        tls12: &[SupportedCipherSuite],
        tls13: bool,
    ) -> CertChoice {
        let keys = keys
            .into_iter()
            .map(|k| candidate(Arc::new(k), tls12))
            .collect();
        CertChoice {
            keys,
            tls13,
            loader: None,
            tls12: tls12.to_vec(),
        }
    }

    /// Certificates read by `loader` on each handshake.
    pub(crate) fn with_loader(mut self, loader: Option<Arc<CertLoader>>) -> CertChoice {
        self.loader = loader;
        self
    }

    /// The first of `keys` that fits what the client offers, else the first.
    fn choose(&self, keys: &[Candidate], hello: &ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if keys.len() == 1 {
            return Some(keys[0].key.clone());
        }
        keys.iter()
            .find(|c| self.fits(c, hello))
            .or(keys.first())
            .map(|c| c.key.clone())
    }

    fn fits(&self, c: &Candidate, hello: &ClientHello<'_>) -> bool {
        if c.key.key.choose_scheme(hello.signature_schemes()).is_none() {
            return false;
        }
        hello
            .cipher_suites()
            .iter()
            .any(|s| (self.tls13 && is_tls13_suite(*s)) || c.tls12.contains(s))
    }
}

fn is_tls13_suite(s: CipherSuite) -> bool {
    matches!(
        s,
        CipherSuite::TLS13_AES_128_GCM_SHA256
            | CipherSuite::TLS13_AES_256_GCM_SHA384
            | CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
    )
}

fn scheme_alg(s: rustls::SignatureScheme) -> SignatureAlgorithm {
    use rustls::SignatureScheme as S;
    match s {
        S::ECDSA_NISTP256_SHA256 | S::ECDSA_NISTP384_SHA384 | S::ECDSA_NISTP521_SHA512 => {
            SignatureAlgorithm::ECDSA
        }
        S::ED25519 => SignatureAlgorithm::ED25519,
        S::ED448 => SignatureAlgorithm::ED448,
        _ => SignatureAlgorithm::RSA,
    }
}

impl fmt::Debug for CertChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CertChoice({} keys)", self.keys.len())
    }
}

/// A key with the enabled TLS 1.2 suites that can use it.
fn candidate(key: Arc<CertifiedKey>, tls12: &[SupportedCipherSuite]) -> Candidate {
    let alg = key.key.algorithm();
    let tls12 = tls12
        .iter()
        .filter_map(|s| match s {
            SupportedCipherSuite::Tls12(t) if t.sign.iter().any(|sc| scheme_alg(*sc) == alg) => {
                Some(s.suite())
            }
            _ => None,
        })
        .collect();
    Candidate { key, tls12 }
}

impl ResolvesServerCert for CertChoice {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let Some(loader) = &self.loader else {
            return self.choose(&self.keys, &hello);
        };
        match loader(hello.server_name()) {
            Ok(keys) => {
                let keys: Vec<Candidate> = keys
                    .into_iter()
                    .map(|k| candidate(k, &self.tls12))
                    .collect();
                self.choose(&keys, &hello)
            }
            Err(why) => {
                LOAD_ERROR.with(|e| *e.borrow_mut() = Some(why));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own for one test, removed at the end.
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new(label: &str) -> Dir {
            let p = std::env::temp_dir().join(format!(
                "portcullis-tls-certs-{label}-{}",
                std::process::id()
            ));
            std::fs::create_dir_all(&p).expect("mkdir");
            Dir(p)
        }
        fn write(&self, name: &str, text: &str) -> std::path::PathBuf {
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

    fn pair(alg: &'static rcgen::SignatureAlgorithm) -> (String, String) {
        let key = rcgen::KeyPair::generate_for(alg).expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn loads_ecdsa_pairs() {
        let dir = Dir::new("ok");
        for (i, alg) in [
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_ECDSA_P384_SHA384,
        ]
        .into_iter()
        .enumerate()
        {
            let (c, k) = pair(alg);
            let cert = dir.write(&format!("{i}.crt"), &c);
            let key = dir.write(&format!("{i}.key"), &k);
            let ck = load_certified_key(&cert, &key, &[]).expect("loads");
            assert_eq!(ck.key.algorithm(), SignatureAlgorithm::ECDSA);
        }
    }

    #[test]
    fn missing_file_names_the_os_error() {
        let err = load_certified_key(Path::new("/nonexistent/x.crt"), Path::new("/x.key"), &[])
            .expect_err("missing");
        assert_eq!(
            err.to_string(),
            "cannot load certificate \"/nonexistent/x.crt\": BIO_new_file() failed (2: No such file or directory)"
        );
    }

    #[test]
    fn junk_is_refused_with_the_pem_reason() {
        let dir = Dir::new("junk");
        let (c, _) = pair(&rcgen::PKCS_ECDSA_P256_SHA256);
        let cert = dir.write("c.crt", &c);
        let junk = dir.write("junk", "not pem\n");
        let err = load_certified_key(&junk, &junk, &[]).expect_err("junk cert");
        assert!(
            err.to_string().contains("PEM_read_bio_X509_AUX() failed"),
            "{err}"
        );
        let err = load_certified_key(&cert, &junk, &[]).expect_err("junk key");
        assert!(
            err.to_string().starts_with(&format!(
                "cannot load certificate key \"{}\": PEM_read_bio_PrivateKey() failed",
                junk.display()
            )),
            "{err}"
        );
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let dir = Dir::new("mismatch");
        let (c, _) = pair(&rcgen::PKCS_ECDSA_P256_SHA256);
        let (_, k) = pair(&rcgen::PKCS_ECDSA_P256_SHA256);
        let cert = dir.write("c.crt", &c);
        let key = dir.write("k.key", &k);
        let err = load_certified_key(&cert, &key, &[]).expect_err("mismatch");
        assert!(err.to_string().contains("key values mismatch"), "{err}");
    }
}
