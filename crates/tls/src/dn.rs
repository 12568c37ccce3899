//! A client certificate's fields as nginx's `$ssl_client_*` variables write them: subject
//! and issuer in RFC 2253, most specific attribute first (`CN=client,O=Example,C=US`, as
//! nginx does since 1.11.6), the serial number in hex, the validity (as the certificate
//! writes it: dates are formatted by the server), the SHA-1 fingerprint and the PEM form.

/// DER tags this reader meets.
const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// `[0]` explicit: the version field of a TBSCertificate.
const VERSION_TAG: u8 = 0xa0;

/// Short names of the attributes OpenSSL prints by name; others are written as dotted OIDs.
const NAMES: &[(&[u8], &str)] = &[
    (&[0x55, 0x04, 0x03], "CN"),
    (&[0x55, 0x04, 0x06], "C"),
    (&[0x55, 0x04, 0x07], "L"),
    (&[0x55, 0x04, 0x08], "ST"),
    (&[0x55, 0x04, 0x09], "street"),
    (&[0x55, 0x04, 0x0a], "O"),
    (&[0x55, 0x04, 0x0b], "OU"),
    (&[0x55, 0x04, 0x05], "serialNumber"),
    (&[0x55, 0x04, 0x2a], "GN"),
    (&[0x55, 0x04, 0x04], "SN"),
    (&[0x55, 0x04, 0x0c], "title"),
    (
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19],
        "DC",
    ),
    (
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01],
        "UID",
    ),
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01],
        "emailAddress",
    ),
];

/// The contents of a DER certificate's TBSCertificate after its version (a version 1
/// certificate has none).
fn tbs(cert: &[u8]) -> Option<&[u8]> {
    let (tag, certificate, _) = tlv(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, mut tbs, _) = tlv(certificate)?;
    if tag != SEQUENCE {
        return None;
    }
    if tbs.first() == Some(&VERSION_TAG) {
        tbs = tlv(tbs)?.2;
    }
    Some(tbs)
}

/// The fields of a DER certificate's TBSCertificate, from the serial number on:
/// serialNumber, signature, issuer, validity, subject.
fn tbs_fields(cert: &[u8]) -> Option<[&[u8]; 5]> {
    let mut tbs = tbs(cert)?;
    let mut fields = [&[][..]; 5];
    for field in &mut fields {
        let (_, contents, rest) = tlv(tbs)?;
        *field = contents;
        tbs = rest;
    }
    Some(fields)
}

/// The subjectPublicKeyInfo of a DER certificate, whole (its tag and length with it), of a
/// version 1 certificate as of a version 3 one.
pub fn spki(cert: &[u8]) -> Option<&[u8]> {
    let mut tbs = tbs(cert)?;
    // serialNumber, signature, issuer, validity, subject.
    for _ in 0..5 {
        tbs = tlv(tbs)?.2;
    }
    let (_, _, rest) = tlv(tbs)?;
    Some(&tbs[..tbs.len() - rest.len()])
}

/// The parts a certificate's signature covers and is: the TBSCertificate whole (tag and
/// length with it), the signature algorithm's contents and the signature's bytes.
pub fn signed_parts(cert: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let (_, certificate, _) = tlv(cert)?;
    let (_, _, after_tbs) = tlv(certificate)?;
    let tbs = &certificate[..certificate.len() - after_tbs.len()];
    let (_, alg, rest) = tlv(after_tbs)?;
    let (tag, bits, _) = tlv(rest)?;
    if tag != 0x03 {
        return None;
    }
    Some((tbs, alg, bits.get(1..)?))
}

/// A certificate's public key: its algorithm identifier's contents and the key's bytes.
pub fn public_key(cert: &[u8]) -> Option<(&[u8], &[u8])> {
    let (_, info, _) = tlv(spki(cert)?)?;
    let (_, alg, rest) = tlv(info)?;
    let (tag, bits, _) = tlv(rest)?;
    if tag != 0x03 {
        return None;
    }
    Some((alg, bits.get(1..)?))
}

/// The issuer's and the subject's names (their DER contents) and the serial number's.
pub fn names_and_serial(cert: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let f = tbs_fields(cert)?;
    Some((f[2], f[4], f[0]))
}

/// A certificate revocation list's thisUpdate and nextUpdate (none for a list that names no
/// next update).
pub fn crl_updates(crl: &[u8]) -> Option<(CertTime, Option<CertTime>)> {
    let (_, list, _) = tlv(crl)?;
    let (_, mut tbs, _) = tlv(list)?;
    // version (optional), signature, issuer.
    if tbs.first() == Some(&0x02) {
        tbs = tlv(tbs)?.2;
    }
    for _ in 0..2 {
        tbs = tlv(tbs)?.2;
    }
    let (tag, this, rest) = tlv(tbs)?;
    let this = asn1_time(tag, this)?;
    let next = match tlv(rest) {
        Some((tag @ (0x17 | 0x18), next, _)) => Some(asn1_time(tag, next)?),
        _ => None,
    };
    Some((this, next))
}

/// Whether a DER certificate names itself as its issuer (a root, to OpenSSL's chain
/// building: the only kind a chain may end at).
pub fn self_issued(cert: &[u8]) -> bool {
    tbs_fields(cert).is_some_and(|f| f[2] == f[4])
}

/// The subject of a DER certificate in RFC 2253 form, or `None` if the DER is malformed.
pub fn subject_rfc2253(cert: &[u8]) -> Option<String> {
    rfc2253(tbs_fields(cert)?[4])
}

/// The subject as OpenSSL's `X509_NAME_oneline` writes it (`$ssl_client_s_dn_legacy`):
/// `/C=US/O=Example/CN=client`.
pub fn subject_oneline(cert: &[u8]) -> Option<String> {
    oneline(tbs_fields(cert)?[4])
}

/// The issuer, as [`subject_oneline`] writes the subject (`$ssl_client_i_dn_legacy`).
pub fn issuer_oneline(cert: &[u8]) -> Option<String> {
    oneline(tbs_fields(cert)?[2])
}

/// The issuer, as [`subject_rfc2253`] writes the subject (`$ssl_client_i_dn`).
pub fn issuer_rfc2253(cert: &[u8]) -> Option<String> {
    rfc2253(tbs_fields(cert)?[2])
}

/// The serial number in uppercase hex, as OpenSSL prints it (`$ssl_client_serial`).
pub fn serial_hex(cert: &[u8]) -> Option<String> {
    let serial = tbs_fields(cert)?[0];
    // The INTEGER's sign byte is not part of the number.
    let start = serial
        .iter()
        .position(|&b| b != 0)
        .unwrap_or(serial.len().saturating_sub(1));
    Some(serial[start..].iter().map(|b| format!("{b:02X}")).collect())
}

/// A certificate time, UTC, as the certificate writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CertTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

/// notBefore and notAfter.
pub fn validity(cert: &[u8]) -> Option<(CertTime, CertTime)> {
    let validity = tbs_fields(cert)?[3];
    let (tag, before, rest) = tlv(validity)?;
    let not_before = asn1_time(tag, before)?;
    let (tag, after, _) = tlv(rest)?;
    Some((not_before, asn1_time(tag, after)?))
}

impl CertTime {
    /// Seconds since the Unix epoch.
    pub fn unix(&self) -> i64 {
        // Days from the civil date (Howard Hinnant's algorithm).
        let (y, m) = if self.month <= 2 {
            (self.year - 1, i64::from(self.month) + 9)
        } else {
            (self.year, i64::from(self.month) - 3)
        };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * m + 2) / 5 + i64::from(self.day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        days * 86_400
            + i64::from(self.hour) * 3600
            + i64::from(self.minute) * 60
            + i64::from(self.second)
    }
}

/// keyUsage bits, as numbered in the extension: digitalSignature is bit 0.
pub const KU_DIGITAL_SIGNATURE: u16 = 1;
pub const KU_KEY_AGREEMENT: u16 = 1 << 4;
pub const KU_KEY_CERT_SIGN: u16 = 1 << 5;
pub const KU_CRL_SIGN: u16 = 1 << 6;

/// extendedKeyUsage purposes, as bits.
pub const EKU_SERVER_AUTH: u8 = 1;
pub const EKU_CLIENT_AUTH: u8 = 1 << 1;
pub const EKU_ANY: u8 = 1 << 2;

/// What OpenSSL's chain checks read of a certificate's extensions.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Constraints {
    /// basicConstraints: whether a CA, and its path length limit.
    pub basic: Option<(bool, Option<u64>)>,
    /// keyUsage, when the certificate has one.
    pub key_usage: Option<u16>,
    /// Whether subjectAltName holds a dNSName.
    pub dns_name: bool,
    /// extendedKeyUsage, when the certificate has one: the purposes OpenSSL's checks read
    /// (`EKU_*`).
    pub eku: Option<u8>,
    /// The certificate's version field: 0 for version 1.
    pub version: u8,
    /// A critical extension OpenSSL does not handle.
    pub critical_unknown: bool,
    /// An extension twice.
    pub duplicate: bool,
    /// nameConstraints.
    pub name_constraints: bool,
}

/// The extensions OpenSSL handles (`X509_supported_extension`), which may be critical:
/// keyUsage, subjectAltName, basicConstraints, certificatePolicies, cRLDistributionPoints,
/// extendedKeyUsage, policyConstraints, nameConstraints, policyMappings, inhibitAnyPolicy
/// and Netscape's certificate type.
const HANDLED: &[&[u8]] = &[
    &[0x55, 0x1d, 0x0f],
    &[0x55, 0x1d, 0x11],
    &[0x55, 0x1d, 0x13],
    &[0x55, 0x1d, 0x20],
    &[0x55, 0x1d, 0x1f],
    &[0x55, 0x1d, 0x25],
    &[0x55, 0x1d, 0x24],
    &[0x55, 0x1d, 0x1e],
    &[0x55, 0x1d, 0x21],
    &[0x55, 0x1d, 0x36],
    &[0x60, 0x86, 0x48, 0x01, 0x86, 0xf8, 0x42, 0x01, 0x01],
];

/// The basicConstraints and keyUsage of a DER certificate (none for a version 1 one).
pub fn constraints(cert: &[u8]) -> Option<Constraints> {
    let version = {
        let (_, certificate, _) = tlv(cert)?;
        let (_, t, _) = tlv(certificate)?;
        match t.first() {
            Some(&VERSION_TAG) => {
                let (_, v, _) = tlv(tlv(t)?.1)?;
                v.last().copied().unwrap_or(0)
            }
            _ => 0,
        }
    };
    let mut tbs = tbs(cert)?;
    // serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo.
    for _ in 0..6 {
        tbs = tlv(tbs)?.2;
    }
    let mut c = Constraints {
        version,
        ..Constraints::default()
    };
    let mut seen: Vec<&[u8]> = Vec::new();
    while !tbs.is_empty() {
        let (tag, contents, rest) = tlv(tbs)?;
        tbs = rest;
        // [3] extensions (the unique identifiers [1] and [2] are passed over).
        if tag != 0xa3 {
            continue;
        }
        let (_, mut exts, _) = tlv(contents)?;
        while !exts.is_empty() {
            let (_, ext, rest) = tlv(exts)?;
            exts = rest;
            let (_, oid, mut value) = tlv(ext)?;
            let mut critical = false;
            if value.first() == Some(&0x01) {
                let (_, flag, rest) = tlv(value)?;
                critical = flag.first().is_some_and(|&b| b != 0);
                value = rest;
            }
            let (_, value, _) = tlv(value)?;
            if seen.contains(&oid) {
                c.duplicate = true;
            }
            seen.push(oid);
            if critical && !HANDLED.contains(&oid) {
                c.critical_unknown = true;
            }
            if oid == [0x55, 0x1d, 0x1e] {
                c.name_constraints = true;
            }
            match oid {
                [0x55, 0x1d, 0x13] => {
                    let (_, mut seq, _) = tlv(value)?;
                    let mut ca = false;
                    if seq.first() == Some(&0x01) {
                        let (_, b, rest) = tlv(seq)?;
                        ca = b.first().is_some_and(|&x| x != 0);
                        seq = rest;
                    }
                    let len = match seq.first() {
                        Some(&0x02) => Some(
                            tlv(seq)?
                                .1
                                .iter()
                                .fold(0u64, |a, &b| (a << 8) | u64::from(b)),
                        ),
                        _ => None,
                    };
                    c.basic = Some((ca, len));
                }
                [0x55, 0x1d, 0x0f] => {
                    let (_, bits, _) = tlv(value)?;
                    let (first, second) = (
                        bits.get(1).copied().unwrap_or(0),
                        bits.get(2).copied().unwrap_or(0),
                    );
                    let mut ku = 0u16;
                    for i in 0..8 {
                        if first & (0x80 >> i) != 0 {
                            ku |= 1 << i;
                        }
                    }
                    if second & 0x80 != 0 {
                        ku |= 1 << 8;
                    }
                    c.key_usage = Some(ku);
                }
                [0x55, 0x1d, 0x25] => {
                    let (_, mut oids, _) = tlv(value)?;
                    let mut bits = 0u8;
                    while !oids.is_empty() {
                        let (_, oid, rest) = tlv(oids)?;
                        bits |= match oid {
                            [0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01] => EKU_SERVER_AUTH,
                            [0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02] => EKU_CLIENT_AUTH,
                            [0x55, 0x1d, 0x25, 0x00] => EKU_ANY,
                            _ => 0,
                        };
                        oids = rest;
                    }
                    c.eku = Some(bits);
                }
                [0x55, 0x1d, 0x11] => {
                    // GeneralNames: a dNSName is [2] IMPLICIT IA5String.
                    let (_, mut names, _) = tlv(value)?;
                    while !names.is_empty() {
                        let (tag, _, rest) = tlv(names)?;
                        c.dns_name |= tag == 0x82;
                        names = rest;
                    }
                }
                _ => {}
            }
        }
    }
    Some(c)
}

/// Whether a server certificate is for `host` by OpenSSL's `X509_check_host` as nginx calls
/// it: when the certificate names no DNS name, a common name of its subject is the name
/// (with a wildcard in its first label, as in a dNSName).
pub fn common_name_matches(cert: &[u8], host: &str) -> bool {
    // Extensions that cannot be read may hold a DNS name: no fallback then.
    if constraints(cert).is_none_or(|c| c.dns_name) {
        return false;
    }
    let Some(subject) = tbs_fields(cert).and_then(|f| attributes(f[4])) else {
        return false;
    };
    subject
        .into_iter()
        .flatten()
        .filter(|(oid, _)| *oid == [0x55, 0x04, 0x03])
        .any(|(_, cn)| host_matches(cn, host.as_bytes()))
}

/// OpenSSL's host name comparison: case-insensitive; a `*` in the first label of a pattern
/// of three labels or more stands for one label's characters (with a prefix and suffix
/// around it, `f*.example.com`).
fn host_matches(pattern: &[u8], host: &[u8]) -> bool {
    let host = host.strip_suffix(b".").unwrap_or(host);
    if pattern.eq_ignore_ascii_case(host) {
        return true;
    }
    let Some(dot) = pattern.iter().position(|&b| b == b'.') else {
        return false;
    };
    let (first, rest) = pattern.split_at(dot);
    let wild = first.iter().filter(|&&b| b == b'*').count() == 1
        && rest.iter().filter(|&&b| b == b'.').count() >= 2
        && !rest.contains(&b'*')
        && !first.starts_with(b"xn--");
    if !wild {
        return false;
    }
    let Some(hdot) = host.iter().position(|&b| b == b'.') else {
        return false;
    };
    let (hfirst, hrest) = host.split_at(hdot);
    if !hrest.eq_ignore_ascii_case(rest) {
        return false;
    }
    let star = first.iter().position(|&b| b == b'*').unwrap_or(0);
    let (prefix, suffix) = (&first[..star], &first[star + 1..]);
    // What the star stands for is a label's letters, digits and hyphens; a partial wildcard
    // never matches an IDNA label.
    let partial = !prefix.is_empty() || !suffix.is_empty();
    if partial && hfirst.len() >= 4 && hfirst[..4].eq_ignore_ascii_case(b"xn--") {
        return false;
    }
    let middle = hfirst
        .get(prefix.len()..hfirst.len().saturating_sub(suffix.len()))
        .unwrap_or_default();
    if !middle
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
    {
        return false;
    }
    hfirst.len() >= prefix.len() + suffix.len()
        && hfirst[..prefix.len()].eq_ignore_ascii_case(prefix)
        && hfirst[hfirst.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
        && (hfirst.len() > prefix.len() + suffix.len() || !prefix.is_empty() || !suffix.is_empty())
}

/// A UTCTime (`YYMMDDHHMMSSZ`, years 1950-2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn asn1_time(tag: u8, text: &[u8]) -> Option<CertTime> {
    let digits = |s: &[u8]| -> Option<u32> {
        s.iter().try_fold(0u32, |acc, &b| {
            b.is_ascii_digit().then(|| acc * 10 + u32::from(b - b'0'))
        })
    };
    let (year, rest) = match tag {
        0x17 if text.len() >= 13 => {
            let yy = i64::from(digits(&text[..2])?);
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &text[2..])
        }
        0x18 if text.len() >= 15 => (i64::from(digits(&text[..4])?), &text[4..]),
        _ => return None,
    };
    let time = CertTime {
        year,
        month: digits(&rest[0..2])?,
        day: digits(&rest[2..4])?,
        hour: digits(&rest[4..6])?,
        minute: digits(&rest[6..8])?,
        second: digits(&rest[8..10])?,
    };
    let valid = (1..=12).contains(&time.month)
        && (1..=31).contains(&time.day)
        && time.hour < 24
        && time.minute < 60
        && time.second < 61
        && rest.get(10) == Some(&b'Z');
    valid.then_some(time)
}

/// The SHA-1 of the DER in lowercase hex (`$ssl_client_fingerprint`).
pub fn fingerprint_sha1(cert: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, cert);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The certificate in PEM, as OpenSSL writes it (`$ssl_client_raw_cert`): 64 base64 digits
/// a line, the last line ended too.
pub fn pem(cert: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = Vec::with_capacity(cert.len().div_ceil(3) * 4);
    for chunk in cert.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            b64.push(if i <= chunk.len() {
                ALPHABET[(n >> (18 - 6 * i) & 63) as usize]
            } else {
                b'='
            });
        }
    }
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// One attribute of a name: its OID and its value's bytes.
type Attribute<'a> = (&'a [u8], &'a [u8]);

/// Each RDN of an RDNSequence in the certificate's order, with its attributes.
fn attributes(mut rdns: &[u8]) -> Option<Vec<Vec<Attribute<'_>>>> {
    let mut out = Vec::new();
    while !rdns.is_empty() {
        let (tag, mut set, rest) = tlv(rdns)?;
        rdns = rest;
        if tag != SET {
            return None;
        }
        let mut rdn = Vec::new();
        while !set.is_empty() {
            let (_, attr, rest) = tlv(set)?;
            set = rest;
            let (tag, oid, value) = tlv(attr)?;
            if tag != OID {
                return None;
            }
            rdn.push((oid, tlv(value)?.1));
        }
        out.push(rdn);
    }
    Some(out)
}

/// An RDNSequence as OpenSSL's `X509_NAME_oneline` writes it: in the certificate's order,
/// `/name=value` for every attribute (those of one RDN too), and a byte outside `' '..='~'`
/// as `\xHH`.
fn oneline(rdns: &[u8]) -> Option<String> {
    let mut out = String::new();
    for (oid, value) in attributes(rdns)?.into_iter().flatten() {
        out.push('/');
        out.push_str(&attr_name(oid));
        out.push('=');
        for &b in value {
            if (b' '..=b'~').contains(&b) {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("\\x{b:02X}"));
            }
        }
    }
    Some(out)
}

/// An RDNSequence in RFC 2253 form, most specific attribute first.
fn rfc2253(rdns: &[u8]) -> Option<String> {
    let mut parts: Vec<String> = attributes(rdns)?
        .iter()
        .map(|rdn| {
            let attrs = rdn
                .iter()
                .map(|(oid, value)| format!("{}={}", attr_name(oid), escape(value)));
            attrs.collect::<Vec<_>>().join("+")
        })
        .collect();
    parts.reverse();
    Some(parts.join(","))
}

/// One DER element: its tag, its contents and what follows it.
fn tlv(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

fn attr_name(oid: &[u8]) -> String {
    if let Some((_, name)) = NAMES.iter().find(|(o, _)| *o == oid) {
        return (*name).to_string();
    }
    dotted(oid)
}

fn dotted(oid: &[u8]) -> String {
    let mut out = String::new();
    let mut value: u64 = 0;
    let mut first = true;
    for &b in oid {
        value = (value << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if first {
                let (a, b) = if value < 80 {
                    (value / 40, value % 40)
                } else {
                    (2, value - 80)
                };
                out.push_str(&format!("{a}.{b}"));
                first = false;
            } else {
                out.push_str(&format!(".{value}"));
            }
            value = 0;
        }
    }
    out
}

/// RFC 2253 escaping of an attribute value: `,+"\<>;` always, `#` and space at the start,
/// space at the end; bytes that are not printable UTF-8 as `\XX`.
fn escape(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    let mut out = String::with_capacity(text.len());
    let last = text.chars().count().saturating_sub(1);
    for (i, c) in text.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
            out.push(c);
        } else if c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_as_openssl_compares_them() {
        for (pattern, host, matches) in [
            ("upstream", "UPSTREAM", true),
            ("api.example.com", "api.example.com.", true),
            ("*.example.com", "api.example.com", true),
            ("*.example.com", "a.b.example.com", false),
            ("*.example.com", "example.com", false),
            ("*.com", "example.com", false),
            ("f*.example.com", "foo.example.com", true),
            ("f*.example.com", "f.example.com", true),
            ("f*.example.com", "bar.example.com", false),
            ("*o.example.com", "foo.example.com", true),
            ("a.*.example.com", "a.b.example.com", false),
            ("xn--*.example.com", "xn--a.example.com", false),
        ] {
            assert_eq!(
                host_matches(pattern.as_bytes(), host.as_bytes()),
                matches,
                "{pattern} {host}"
            );
        }
    }

    #[test]
    fn common_name_counts_only_without_a_dns_name() {
        let cert = |sans: Vec<String>| {
            let mut params = rcgen::CertificateParams::new(sans).unwrap();
            let mut dn = rcgen::DistinguishedName::new();
            dn.push(rcgen::DnType::CommonName, "upstream");
            params.distinguished_name = dn;
            let key = rcgen::KeyPair::generate().unwrap();
            params.self_signed(&key).unwrap().der().to_vec()
        };
        assert!(common_name_matches(&cert(vec![]), "upstream"));
        assert!(!common_name_matches(&cert(vec![]), "other"));
        assert!(!common_name_matches(
            &cert(vec!["other".into()]),
            "upstream"
        ));
    }

    #[test]
    fn subject_most_specific_first() {
        let mut params = rcgen::CertificateParams::new(vec!["client".into()]).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "US");
        dn.push(rcgen::DnType::OrganizationName, "Example, Inc");
        dn.push(rcgen::DnType::CommonName, "client one");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            subject_rfc2253(cert.der()).as_deref(),
            Some("CN=client one,O=Example\\, Inc,C=US")
        );
    }

    #[test]
    fn oneline_in_the_certificates_order_with_bytes_escaped() {
        let mut params = rcgen::CertificateParams::new(vec!["client".into()]).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "US");
        dn.push(rcgen::DnType::OrganizationName, "Example, Inc/\u{e9}");
        dn.push(rcgen::DnType::CommonName, "client one");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            subject_oneline(cert.der()).as_deref(),
            Some("/C=US/O=Example, Inc/\\xC3\\xA9/CN=client one")
        );
        assert_eq!(issuer_oneline(cert.der()), subject_oneline(cert.der()));
    }

    #[test]
    fn issuer_serial_validity_fingerprint_and_pem() {
        let mut params = rcgen::CertificateParams::new(vec!["client".into()]).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, "self");
        params.distinguished_name = dn;
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x00, 0x8f, 0x01]));
        params.not_before = rcgen::date_time_ymd(2024, 2, 29);
        params.not_after = rcgen::date_time_ymd(2051, 1, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let der = cert.der();
        assert_eq!(issuer_rfc2253(der).as_deref(), Some("CN=self"));
        assert_eq!(serial_hex(der).as_deref(), Some("8F01"));
        let (before, after) = validity(der).expect("validity");
        assert_eq!((before.year, before.month, before.day), (2024, 2, 29));
        assert_eq!(
            (after.year, after.month, after.day, after.hour),
            (2051, 1, 1, 0)
        );
        assert_eq!(fingerprint_sha1(der).len(), 40);
        assert_eq!(pem(der), cert.pem().replace("\r\n", "\n"));
    }

    #[test]
    fn malformed_der_is_none() {
        assert_eq!(subject_rfc2253(&[0x30, 0x05, 0x30]), None);
        assert_eq!(subject_rfc2253(&[]), None);
    }

    #[test]
    fn unknown_attributes_are_dotted() {
        assert_eq!(
            dotted(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d]),
            "1.2.840.113549"
        );
    }
}
