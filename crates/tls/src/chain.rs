//! OpenSSL's verification of the client certificates webpki has no place for: version 1
//! certificates (no extensions), and CA certificates presented as the client's own (the
//! trusted root itself, or an intermediate). The chain is built by names and signatures, as
//! OpenSSL builds it, within `ssl_verify_depth`; each certificate must be in its validity
//! period and, with `ssl_crl`, covered by a list that does not name it.

use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::dn;

/// What a chain is checked against.
pub(crate) struct Trust<'a> {
    /// Self-issued certificates of the CA files.
    pub roots: &'a [CertificateDer<'static>],
    /// Other certificates: the files' and those the client sent.
    pub intermediates: &'a [CertificateDer<'a>],
    pub crls: Option<&'a [webpki::CertRevocationList<'static>]>,
    /// The lists' DER, in the same order.
    pub crl_ders: &'a [Vec<u8>],
    pub algs: WebPkiSupportedAlgorithms,
}

/// Whether `cert` is signed by `issuer`'s key.
pub(crate) fn signed_by(cert: &[u8], issuer: &[u8], algs: &WebPkiSupportedAlgorithms) -> bool {
    let (Some((tbs, alg, signature)), Some((key_alg, key))) =
        (dn::signed_parts(cert), dn::public_key(issuer))
    else {
        return false;
    };
    algs.all.iter().any(|a| {
        a.signature_alg_id().as_ref() == alg
            && a.public_key_alg_id().as_ref() == key_alg
            && a.verify_signature(key, tbs, signature).is_ok()
    })
}

/// Verifies `leaf` as OpenSSL does, allowing `depth` intermediates; the refusal in
/// OpenSSL's words.
pub(crate) fn verify(
    leaf: &[u8],
    trust: &Trust<'_>,
    depth: usize,
    now: UnixTime,
) -> Result<(), &'static str> {
    let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let mut path: Vec<&[u8]> = vec![leaf];
    let mut current = leaf;
    loop {
        current_valid(current, now)?;
        // A trusted certificate ends the chain: the client's own, or its issuer's.
        if trust.roots.iter().any(|r| r.as_ref() == current) {
            break;
        }
        let (issuer, _, _) = dn::names_and_serial(current).ok_or("certificate verify error")?;
        let named =
            |c: &&[u8]| dn::names_and_serial(c).is_some_and(|(_, subject, _)| subject == issuer);
        let roots = trust.roots.iter().map(|r| r.as_ref());
        if let Some(root) = roots
            .clone()
            .filter(named)
            .find(|r| signed_by(current, r, &trust.algs))
        {
            current_valid(root, now)?;
            path.push(root);
            break;
        }
        let next = trust
            .intermediates
            .iter()
            .map(|c| c.as_ref())
            .filter(|c| !path.contains(c))
            .filter(named)
            .find(|c| signed_by(current, c, &trust.algs));
        match next {
            Some(next) => {
                path.push(next);
                current = next;
            }
            None if roots.clone().any(|r| named(&r)) => {
                return Err("certificate signature failure")
            }
            None if path.len() == 1 => return Err("unable to verify the first certificate"),
            None => return Err("unable to get local issuer certificate"),
        }
    }
    // Intermediates between the client's certificate and the trusted one.
    if path.len().saturating_sub(2) > depth {
        return Err("unable to get local issuer certificate");
    }
    if let Some(crls) = trust.crls {
        revocation(&path, crls, trust, now)?;
    }
    Ok(())
}

fn current_valid(cert: &[u8], now: i64) -> Result<(), &'static str> {
    match dn::validity(cert) {
        Some((from, _)) if from.unix() > now => Err("certificate is not yet valid"),
        Some((_, until)) if until.unix() < now => Err("certificate has expired"),
        Some(_) => Ok(()),
        None => Err("certificate verify error"),
    }
}

/// `ssl_crl` over the whole chain (OpenSSL's `CRL_CHECK_ALL`): each certificate needs a
/// list of its issuer's, signed by it and in force, and must not be on it.
fn revocation(
    path: &[&[u8]],
    crls: &[webpki::CertRevocationList<'static>],
    trust: &Trust<'_>,
    now: i64,
) -> Result<(), &'static str> {
    for (i, cert) in path.iter().enumerate() {
        let (issuer, _, serial) = dn::names_and_serial(cert).ok_or("certificate verify error")?;
        let at = crls
            .iter()
            .position(|l| l.issuer() == issuer)
            .ok_or("unable to get certificate CRL")?;
        let der = trust
            .crl_ders
            .get(at)
            .ok_or("unable to get certificate CRL")?;
        // The issuer is the next certificate up, a root its own.
        let issuer_cert = path.get(i + 1).unwrap_or(cert);
        if !signed_by(der, issuer_cert, &trust.algs) {
            return Err("CRL signature failure");
        }
        match dn::crl_updates(der) {
            Some((this, _)) if this.unix() > now => return Err("CRL is not yet valid"),
            Some((_, Some(next))) if next.unix() < now => return Err("CRL has expired"),
            Some(_) => {}
            None => return Err("unable to get certificate CRL"),
        }
        if matches!(crls[at].find_serial(serial), Ok(Some(_))) {
            return Err("certificate revoked");
        }
    }
    Ok(())
}
