//! A certificate's subject as nginx's `$ssl_client_s_dn` writes it: RFC 2253, most specific
//! attribute first (`CN=client,O=Example,C=US`), as nginx does since 1.11.6.

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

/// The subject of a DER certificate in RFC 2253 form, or `None` if the DER is malformed.
pub fn subject_rfc2253(cert: &[u8]) -> Option<String> {
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
    // serialNumber, signature, issuer, validity, then the subject.
    for _ in 0..4 {
        tbs = tlv(tbs)?.2;
    }
    let (tag, mut rdns, _) = tlv(tbs)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut parts = Vec::new();
    while !rdns.is_empty() {
        let (tag, set, rest) = tlv(rdns)?;
        rdns = rest;
        if tag != SET {
            return None;
        }
        let mut attrs = Vec::new();
        let mut set = set;
        while !set.is_empty() {
            let (_, attr, rest) = tlv(set)?;
            set = rest;
            let (tag, oid, value) = tlv(attr)?;
            if tag != OID {
                return None;
            }
            let (_, value, _) = tlv(value)?;
            attrs.push(format!("{}={}", attr_name(oid), escape(value)));
        }
        parts.push(attrs.join("+"));
    }
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
