//! OpenSSL's verification of the certificates webpki has no place for: version 1 certificates
//! (no extensions), and CA certificates presented as a client's own (the trusted root
//! itself, or an intermediate). The chain is built by names and signatures, as OpenSSL
//! builds it, within `ssl_verify_depth` and a budget of signature checks; then OpenSSL's
//! checks of each certificate's extensions for the purpose (every issuer a CA that may sign
//! certificates, path lengths, extended key usage; no critical extension OpenSSL does not
//! handle, none twice), validity periods, certificates the trust settings reject, and with
//! `ssl_crl` a list in force from each issuer that does not name the certificate. Name
//! constraints are not checked here: a chain through a CA that has them is refused.

use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::dn::{self, Constraints};

/// Signature checks one verification may make, so that a chain of many certificates of one
/// name costs no more than a few handshakes.
const SIGNATURE_BUDGET: usize = 32;

/// What a chain is checked against, as read from the configuration's files: their
/// self-issued certificates (version 1 ones too) and their others, those the trust settings
/// refuse, and the revocation lists (`ssl_crl`, `proxy_ssl_crl`) when they are set.
pub(crate) struct Anchors {
    pub roots: Vec<CertificateDer<'static>>,
    pub others: Vec<CertificateDer<'static>>,
    pub rejected: Vec<CertificateDer<'static>>,
    pub crls: Option<Vec<webpki::CertRevocationList<'static>>>,
    /// The lists' DER, in the order of `crls`.
    pub crl_ders: Vec<Vec<u8>>,
    pub algs: WebPkiSupportedAlgorithms,
}

impl Anchors {
    /// `certs` as the files hold them; `crls` as read, if set.
    pub(crate) fn new(
        certs: &[CertificateDer<'static>],
        rejected: Vec<CertificateDer<'static>>,
        crls: Option<&[rustls_pki_types::CertificateRevocationListDer<'static>]>,
        algs: WebPkiSupportedAlgorithms,
    ) -> Result<Anchors, crate::TlsError> {
        let (roots, others) = certs.iter().cloned().partition(|c| dn::self_issued(c));
        let lists = match crls {
            Some(list) => Some(
                list.iter()
                    .map(|der| {
                        webpki::OwnedCertRevocationList::from_der(der)
                            .map(webpki::CertRevocationList::from)
                            .map_err(|e| crate::TlsError::Config(format!("bad CRL: {e}")))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        Ok(Anchors {
            roots,
            others,
            rejected,
            crls: lists,
            crl_ders: crls
                .into_iter()
                .flatten()
                .map(|d| d.as_ref().to_vec())
                .collect(),
            algs,
        })
    }

    /// [`verify`] of `leaf` for `purpose`, with what the peer `sent` beside the files'.
    pub(crate) fn verify(
        &self,
        leaf: &[u8],
        sent: &[CertificateDer<'_>],
        depth: usize,
        purpose: u8,
        now: UnixTime,
    ) -> Result<(), &'static str> {
        let intermediates: Vec<CertificateDer<'_>> = sent
            .iter()
            .chain(&self.others)
            .map(|c| CertificateDer::from(c.as_ref()))
            .collect();
        let trust = Trust {
            roots: &self.roots,
            intermediates: &intermediates,
            rejected: &self.rejected,
            crls: self.crls.as_deref(),
            crl_ders: &self.crl_ders,
            algs: self.algs,
            purpose,
        };
        verify(leaf, &trust, depth, now)
    }
}

/// What a chain is checked against.
pub(crate) struct Trust<'a> {
    /// Self-issued certificates of the CA files.
    pub roots: &'a [CertificateDer<'static>],
    /// Other certificates: the files' and those the peer sent.
    pub intermediates: &'a [CertificateDer<'a>],
    /// Certificates whose trust settings refuse the purpose (`TRUSTED CERTIFICATE`).
    pub rejected: &'a [CertificateDer<'static>],
    pub crls: Option<&'a [webpki::CertRevocationList<'static>]>,
    /// The lists' DER, in the same order.
    pub crl_ders: &'a [Vec<u8>],
    pub algs: WebPkiSupportedAlgorithms,
    /// The extended key usage the chain is for (`dn::EKU_CLIENT_AUTH` ...).
    pub purpose: u8,
}

/// Whether `signed` (a certificate or a list) is signed by `issuer`'s key.
pub(crate) fn signed_by(signed: &[u8], issuer: &[u8], algs: &WebPkiSupportedAlgorithms) -> bool {
    let (Some((tbs, alg, signature)), Some((key_alg, key))) =
        (dn::signed_parts(signed), dn::public_key(issuer))
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
    let mut budget = SIGNATURE_BUDGET;
    let mut signed = |cert: &[u8], issuer: &[u8]| {
        if budget == 0 {
            return false;
        }
        budget -= 1;
        signed_by(cert, issuer, &trust.algs)
    };
    let mut path: Vec<&[u8]> = vec![leaf];
    let mut current = leaf;
    loop {
        current_valid(current, now)?;
        // A trusted certificate ends the chain: the client's own, or its issuer's.
        if trust.roots.iter().any(|r| r.as_ref() == current) {
            break;
        }
        // OpenSSL stops building past the depth.
        if path.len() > depth + 1 {
            return Err("unable to get local issuer certificate");
        }
        let (issuer, _, _) = dn::names_and_serial(current).ok_or("certificate verify error")?;
        let named =
            |c: &&[u8]| dn::names_and_serial(c).is_some_and(|(_, subject, _)| subject == issuer);
        let roots: Vec<&[u8]> = trust
            .roots
            .iter()
            .map(|r| r.as_ref())
            .filter(named)
            .collect();
        if let Some(root) = roots.iter().find(|r| signed(current, r)) {
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
            .find(|c| signed(current, c));
        match next {
            Some(next) => {
                path.push(next);
                current = next;
            }
            None if !roots.is_empty() => return Err("certificate signature failure"),
            None if path.len() == 1 => return Err("unable to verify the first certificate"),
            None => return Err("unable to get local issuer certificate"),
        }
    }
    extensions(&path, trust.purpose)?;
    if path.iter().any(|c| is_one_of(c, trust.rejected)) {
        return Err("unsuitable certificate purpose");
    }
    if let Some(crls) = trust.crls {
        revocation(&path, crls, trust, now)?;
    }
    Ok(())
}

/// Whether `cert` is one of `certs`: the same subject and key (a copy encoded otherwise, or
/// signed anew, is the same certificate to a trust decision).
pub(crate) fn is_one_of(cert: &[u8], certs: &[CertificateDer<'_>]) -> bool {
    let id = |c: &[u8]| Some((dn::names_and_serial(c)?.1.to_vec(), dn::spki(c)?.to_vec()));
    let Some(me) = id(cert) else {
        return false;
    };
    certs.iter().any(|c| id(c).as_ref() == Some(&me))
}

fn current_valid(cert: &[u8], now: i64) -> Result<(), &'static str> {
    match dn::validity(cert) {
        Some((from, _)) if from.unix() > now => Err("certificate is not yet valid"),
        Some((_, until)) if until.unix() < now => Err("certificate has expired"),
        Some(_) => Ok(()),
        None => Err("certificate verify error"),
    }
}

/// OpenSSL's `check_chain_extensions` and purpose check: the first certificate for the
/// purpose (its key usage and extended key usage), every other a CA (basicConstraints, or a
/// self-signed version 1 root, or keyCertSign) whose key may sign certificates, within its
/// path length, and whose extended key usage allows the purpose.
fn extensions(path: &[&[u8]], purpose: u8) -> Result<(), &'static str> {
    let read = |c: &[u8]| dn::constraints(c).ok_or("certificate verify error");
    let allows = |c: &Constraints| c.eku.is_none_or(|e| e & (purpose | dn::EKU_ANY) != 0);
    for (i, cert) in path.iter().enumerate() {
        let c = read(cert)?;
        if c.duplicate {
            return Err("invalid or inconsistent certificate extension");
        }
        if c.critical_unknown {
            return Err("unhandled critical extension");
        }
        // Name constraints are not checked on this path: a chain under them is refused.
        if i > 0 && c.name_constraints {
            return Err("permitted subtree violation");
        }
    }
    let leaf = read(path[0])?;
    let leaf_usage = if purpose == dn::EKU_CLIENT_AUTH {
        dn::KU_DIGITAL_SIGNATURE | dn::KU_KEY_AGREEMENT
    } else {
        // A TLS server's: OpenSSL's ssl_server purpose.
        dn::KU_DIGITAL_SIGNATURE | dn::KU_KEY_AGREEMENT | (1 << 2)
    };
    if !allows(&leaf) || leaf.key_usage.is_some_and(|ku| ku & leaf_usage == 0) {
        return Err("unsuitable certificate purpose");
    }
    for (i, cert) in path.iter().enumerate().skip(1) {
        let c = read(cert)?;
        let is_ca = match c.basic {
            Some((ca, _)) => ca,
            None if c.version == 0 => dn::self_issued(cert),
            None => c.key_usage.is_some_and(|ku| ku & dn::KU_KEY_CERT_SIGN != 0),
        };
        // The key usage first, as OpenSSL's chain building checks it.
        if c.key_usage.is_some_and(|ku| ku & dn::KU_KEY_CERT_SIGN == 0) {
            return Err("key usage does not include certificate signing");
        }
        // OpenSSL finds it no CA, then unfit for the purpose, and nginx's callback keeps
        // the last of its errors.
        if !is_ca {
            return Err("unsuitable certificate purpose");
        }
        // Intermediates below this one, self-issued ones aside.
        let below = path[1..i].iter().filter(|c| !dn::self_issued(c)).count() as u64;
        if let Some((_, Some(len))) = c.basic {
            if below > len {
                return Err("path length constraint exceeded");
            }
        }
        if !allows(&c) {
            return Err("unsuitable certificate purpose");
        }
    }
    Ok(())
}

/// `ssl_crl` over the whole chain (OpenSSL's `CRL_CHECK_ALL`): each certificate needs a
/// list of its issuer's, signed by it and in force, and must not be on one.
fn revocation(
    path: &[&[u8]],
    crls: &[webpki::CertRevocationList<'static>],
    trust: &Trust<'_>,
    now: i64,
) -> Result<(), &'static str> {
    for (i, cert) in path.iter().enumerate() {
        let (issuer, _, serial) = dn::names_and_serial(cert).ok_or("certificate verify error")?;
        // The issuer is the next certificate up, a root its own.
        let issuer_cert = path.get(i + 1).unwrap_or(cert);
        if dn::constraints(issuer_cert)
            .and_then(|c| c.key_usage)
            .is_some_and(|ku| ku & dn::KU_CRL_SIGN == 0)
        {
            return Err("key usage does not include CRL signing");
        }
        let named: Vec<usize> = (0..crls.len())
            .filter(|&at| crls[at].issuer() == issuer)
            .collect();
        if named.is_empty() {
            return Err("unable to get certificate CRL");
        }
        let signed: Vec<usize> = named
            .into_iter()
            .filter(|&at| {
                trust
                    .crl_ders
                    .get(at)
                    .is_some_and(|der| signed_by(der, issuer_cert, &trust.algs))
            })
            .collect();
        if signed.is_empty() {
            return Err("CRL signature failure");
        }
        let mut in_force = Vec::new();
        let mut why = "unable to get certificate CRL";
        for at in signed {
            match trust.crl_ders.get(at).and_then(|d| dn::crl_updates(d)) {
                Some((this, _)) if this.unix() > now => why = "CRL is not yet valid",
                Some((_, Some(next))) if next.unix() < now => why = "CRL has expired",
                Some(_) => in_force.push(at),
                None => {}
            }
        }
        if in_force.is_empty() {
            return Err(why);
        }
        if in_force
            .iter()
            .any(|&at| matches!(crls[at].find_serial(serial), Ok(Some(_))))
        {
            return Err("certificate revoked");
        }
    }
    Ok(())
}

/// OpenSSL's verify code of a refusal's text, as nginx logs it for upstreams.
pub(crate) fn code(text: &str) -> u32 {
    match text {
        "unable to get certificate CRL" => 3,
        "certificate signature failure" => 7,
        "CRL signature failure" => 8,
        "certificate is not yet valid" => 9,
        "certificate has expired" => 10,
        "CRL is not yet valid" => 11,
        "CRL has expired" => 12,
        "unable to get local issuer certificate" => 20,
        "unable to verify the first certificate" => 21,
        "certificate revoked" => 23,
        "invalid CA certificate" => 24,
        "path length constraint exceeded" => 25,
        "unsuitable certificate purpose" => 26,
        "key usage does not include certificate signing" => 32,
        "key usage does not include CRL signing" => 35,
        "unhandled critical extension" => 34,
        "invalid or inconsistent certificate extension" => 41,
        "permitted subtree violation" => 47,
        _ => 1,
    }
}
