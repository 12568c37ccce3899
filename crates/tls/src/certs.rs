//! Certificates and keys from PEM files, and the choice among several pairs of one server by
//! what the client supports, as nginx does with an ECDSA and an RSA certificate side by side.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::crypto::aws_lc_rs::sign::any_supported_type;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{CipherSuite, SignatureAlgorithm, SupportedCipherSuite};
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::TlsError;

/// Reads a certificate chain (leaf first) and its private key, and checks that they belong
/// together.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = load_certs(cert, "certificate")?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Key {
        path: key.display().to_string(),
        cause: pem_cause(
            &e,
            "PEM_read_bio_PrivateKey() failed",
            "no supported data to decode",
        ),
    })?;
    let signing = any_supported_type(&key_der).map_err(|e| TlsError::Key {
        path: key.display().to_string(),
        cause: format!("unsupported key ({e})"),
    })?;
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

/// Reads every certificate of a PEM file: a chain, or a CA list for client verification.
/// `what` names the file in errors as nginx does ("certificate", "client certificate").
pub fn load_certs(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Certificate {
            what,
            path: path.display().to_string(),
            cause: pem_cause(
                &e,
                "PEM_read_bio_X509_AUX() failed",
                "no start line: expecting: TRUSTED CERTIFICATE",
            ),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Certificate {
            what,
            path: path.display().to_string(),
            cause: "PEM_read_bio_X509_AUX() failed (no start line: expecting: TRUSTED CERTIFICATE)"
                .into(),
        });
    }
    Ok(certs)
}

/// The cause of a PEM read failure in nginx's words: the OpenSSL call that failed, then why.
fn pem_cause(e: &pem::Error, call: &str, no_items: &str) -> String {
    match e {
        pem::Error::Io(io) => format!("BIO_new_file() failed ({})", os_error(io)),
        pem::Error::NoItemsFound => format!("{call} ({no_items})"),
        other => format!("{call} ({other:?})"),
    }
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
            .map(|k| {
                let alg = k.key.algorithm();
                let tls12 = tls12
                    .iter()
                    .filter_map(|s| match s {
                        SupportedCipherSuite::Tls12(t)
                            if t.sign.iter().any(|sc| scheme_alg(*sc) == alg) =>
                        {
                            Some(s.suite())
                        }
                        _ => None,
                    })
                    .collect();
                Candidate {
                    key: Arc::new(k),
                    tls12,
                }
            })
            .collect();
        CertChoice { keys, tls13 }
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

impl ResolvesServerCert for CertChoice {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if self.keys.len() == 1 {
            return Some(self.keys[0].key.clone());
        }
        self.keys
            .iter()
            .find(|c| self.fits(c, &hello))
            .or(self.keys.first())
            .map(|c| c.key.clone())
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
            let ck = load_certified_key(&cert, &key).expect("loads");
            assert_eq!(ck.key.algorithm(), SignatureAlgorithm::ECDSA);
        }
    }

    #[test]
    fn missing_file_names_the_os_error() {
        let err = load_certified_key(Path::new("/nonexistent/x.crt"), Path::new("/x.key"))
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
        let err = load_certified_key(&junk, &junk).expect_err("junk cert");
        assert!(
            err.to_string().contains("PEM_read_bio_X509_AUX() failed"),
            "{err}"
        );
        let err = load_certified_key(&cert, &junk).expect_err("junk key");
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
        let err = load_certified_key(&cert, &key).expect_err("mismatch");
        assert!(err.to_string().contains("key values mismatch"), "{err}");
    }
}
