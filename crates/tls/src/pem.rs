//! PEM files as OpenSSL reads them: each block with its label, its headers (the `Proc-Type`
//! and `DEK-Info` of a key encrypted the traditional way) and its bytes; text between blocks
//! is skipped. And the private keys OpenSSL decrypts with a password: PKCS#8 (PBES2) and the
//! traditional `Proc-Type: 4,ENCRYPTED` form of PKCS#1 and SEC1 keys.

use base64::Engine as _;
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};

/// One `-----BEGIN label-----` ... `-----END label-----` block.
#[derive(Debug)]
pub(crate) struct Block {
    pub label: String,
    /// `Name: value` lines before the base64 text.
    pub headers: Vec<(String, String)>,
    pub der: Vec<u8>,
}

/// Every block of `text`, in order. A block that does not end or whose base64 is broken is
/// an error, in OpenSSL's words.
pub(crate) fn blocks(text: &[u8]) -> Result<Vec<Block>, &'static str> {
    let text = String::from_utf8_lossy(text);
    let mut lines = text.lines();
    let mut out = Vec::new();
    while let Some(line) = lines.next() {
        let Some(label) = line
            .trim_end()
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut headers = Vec::new();
        let mut body = String::new();
        let mut ended = false;
        let mut in_headers = true;
        for line in lines.by_ref() {
            let line = line.trim_end();
            if line == end {
                ended = true;
                break;
            }
            if in_headers {
                if let Some((name, value)) = line.split_once(':') {
                    headers.push((name.trim().to_string(), value.trim().to_string()));
                    continue;
                }
                in_headers = false;
                if line.is_empty() {
                    continue;
                }
            }
            body.extend(line.chars().filter(|c| !c.is_ascii_whitespace()));
        }
        if !ended {
            return Err("bad end line");
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(body.as_bytes())
            .map_err(|_| "bad base64 decode")?;
        out.push(Block {
            label: label.to_string(),
            headers,
            der,
        });
    }
    Ok(out)
}

/// The certificate of a `CERTIFICATE`, `X509 CERTIFICATE` or `TRUSTED CERTIFICATE` block: a
/// trusted one is the certificate followed by OpenSSL's trust settings, which are dropped.
pub(crate) fn certificate(b: &Block) -> Option<Vec<u8>> {
    match b.label.as_str() {
        "CERTIFICATE" | "X509 CERTIFICATE" => Some(b.der.clone()),
        "TRUSTED CERTIFICATE" => Some(b.der[..der_len(&b.der)?].to_vec()),
        _ => None,
    }
}

/// What a certificate is used to check: a TLS client's (`ssl_client_certificate`,
/// `ssl_trusted_certificate`) or a TLS server's (`proxy_ssl_trusted_certificate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    ClientAuth,
    ServerAuth,
}

impl Purpose {
    /// The extended key usage's OID, DER contents.
    fn oid(self) -> &'static [u8] {
        match self {
            Purpose::ClientAuth => &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02],
            Purpose::ServerAuth => &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01],
        }
    }
}

/// anyExtendedKeyUsage.
const ANY_PURPOSE: &[u8] = &[0x55, 0x1d, 0x25, 0x00];

/// OpenSSL's judgement of a `TRUSTED CERTIFICATE`'s trust settings (`openssl x509
/// -addtrust`/`-addreject`) for `purpose`: `Some(false)` when it is rejected for it,
/// `Some(true)` when it is trusted for it, `None` when the settings do not say (no lists, or
/// a plain certificate).
pub(crate) fn trust(b: &Block, purpose: Purpose) -> Option<bool> {
    if b.label != "TRUSTED CERTIFICATE" {
        return None;
    }
    // X509_CERT_AUX ::= SEQUENCE { trust SEQUENCE OF OID OPTIONAL,
    //                              reject [0] IMPLICIT SEQUENCE OF OID OPTIONAL, ... }
    let aux = b.der.get(der_len(&b.der)?..)?;
    let inner = aux.get(aux_header(aux)?..der_len(aux)?)?;
    let mut trusted: Option<bool> = None;
    let mut rest = inner;
    while let (Some(&tag), Some(len)) = (rest.first(), der_len(rest)) {
        let list = rest.get(aux_header(rest)?..len)?;
        let names = |oid: &[u8]| oids(list).any(|o| o == oid || o == ANY_PURPOSE);
        match tag {
            0x30 => trusted = Some(names(purpose.oid())),
            0xa0 if names(purpose.oid()) => return Some(false),
            _ => {}
        }
        rest = &rest[len..];
    }
    trusted
}

/// The length of a DER element's tag and length octets.
fn aux_header(der: &[u8]) -> Option<usize> {
    let first = *der.get(1)?;
    Some(if first < 0x80 {
        2
    } else {
        2 + usize::from(first & 0x7f)
    })
}

/// The contents of the OIDs in a SEQUENCE OF OBJECT IDENTIFIER's contents.
fn oids(mut list: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let len = der_len(list)?;
        let oid = list.get(aux_header(list)?..len)?;
        list = &list[len..];
        Some(oid)
    })
}

/// The length of the DER element at the start of `der`, header included.
fn der_len(der: &[u8]) -> Option<usize> {
    let first = *der.get(1)?;
    let (len, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let bytes = der.get(2..2 + n)?;
        let len = bytes.iter().fold(0usize, |a, b| (a << 8) | usize::from(*b));
        (len, 2 + n)
    };
    let total = header.checked_add(len)?;
    (total <= der.len()).then_some(total)
}

/// Why a key could not be read, in OpenSSL's words (after "PEM_read_bio_PrivateKey() failed").
pub(crate) type KeyError = &'static str;

/// The first private key of `blocks`, decrypted with the first of `passwords` that works,
/// as nginx tries each line of `ssl_password_file` in turn.
pub(crate) fn private_key(
    blocks: &[Block],
    passwords: &[Vec<u8>],
) -> Result<PrivateKeyDer<'static>, KeyError> {
    let Some(b) = blocks.iter().find(|b| {
        matches!(
            b.label.as_str(),
            "PRIVATE KEY" | "RSA PRIVATE KEY" | "EC PRIVATE KEY" | "ENCRYPTED PRIVATE KEY"
        )
    }) else {
        return Err("no start line: expecting: ANY PRIVATE KEY");
    };
    let encrypted = b.label == "ENCRYPTED PRIVATE KEY"
        || b.headers
            .iter()
            .any(|(n, v)| n == "Proc-Type" && v.ends_with("ENCRYPTED"));
    if !encrypted {
        return Ok(plain_key(&b.label, b.der.clone()));
    }
    if passwords.is_empty() {
        return Err("bad password read");
    }
    let mut last = "bad decrypt";
    for password in passwords {
        match decrypt(b, password) {
            Ok(key) => return Ok(key),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn plain_key(label: &str, der: Vec<u8>) -> PrivateKeyDer<'static> {
    match label {
        "RSA PRIVATE KEY" => PrivatePkcs1KeyDer::from(der).into(),
        "EC PRIVATE KEY" => PrivateSec1KeyDer::from(der).into(),
        _ => PrivatePkcs8KeyDer::from(der).into(),
    }
}

fn decrypt(b: &Block, password: &[u8]) -> Result<PrivateKeyDer<'static>, KeyError> {
    if b.label == "ENCRYPTED PRIVATE KEY" {
        let info = pkcs8::EncryptedPrivateKeyInfo::try_from(b.der.as_slice())
            .map_err(|_| "unsupported encryption")?;
        let doc = info.decrypt(password).map_err(|e| match e {
            pkcs8::Error::EncryptedPrivateKey(pkcs8::pkcs5::Error::UnsupportedAlgorithm {
                ..
            }) => "unsupported encryption",
            _ => "bad decrypt",
        })?;
        // A wrong password can decrypt to padding that happens to be right: the result must
        // be a private key.
        pkcs8::PrivateKeyInfo::try_from(doc.as_bytes()).map_err(|_| "bad decrypt")?;
        return Ok(PrivatePkcs8KeyDer::from(doc.as_bytes().to_vec()).into());
    }
    let dek = b
        .headers
        .iter()
        .find(|(n, _)| n == "DEK-Info")
        .map(|(_, v)| v.as_str())
        .ok_or("not encrypted")?;
    let (cipher, iv) = dek.split_once(',').ok_or("bad iv chars")?;
    let iv = hex(iv.trim()).ok_or("bad iv chars")?;
    let der = traditional(cipher.trim(), &iv, password, &b.der)?;
    // The first element must be a whole SEQUENCE: what a right password gives.
    if der.first() != Some(&0x30) || der_len(&der) != Some(der.len()) {
        return Err("bad decrypt");
    }
    Ok(plain_key(&b.label, der))
}

/// Decrypts a traditional (`DEK-Info`) key body: the key is OpenSSL's `EVP_BytesToKey` with
/// MD5, one round, salted with the IV's first 8 bytes.
fn traditional(cipher: &str, iv: &[u8], password: &[u8], data: &[u8]) -> Result<Vec<u8>, KeyError> {
    use aes::cipher::{block_padding::Pkcs7, BlockDecryptMut, KeyIvInit};
    fn run<C: BlockDecryptMut + KeyIvInit>(
        key: &[u8],
        iv: &[u8],
        data: &[u8],
    ) -> Result<Vec<u8>, KeyError> {
        let c = C::new_from_slices(key, iv).map_err(|_| "bad iv chars")?;
        c.decrypt_padded_vec_mut::<Pkcs7>(data)
            .map_err(|_| "bad decrypt")
    }
    let key_len = match cipher {
        "AES-128-CBC" => 16,
        "AES-192-CBC" => 24,
        "AES-256-CBC" => 32,
        "DES-EDE3-CBC" => 24,
        "DES-CBC" => 8,
        _ => return Err("unsupported encryption"),
    };
    let salt = iv.get(..8).ok_or("bad iv chars")?;
    let key = bytes_to_key(password, salt, key_len);
    match cipher {
        "AES-128-CBC" => run::<cbc::Decryptor<aes::Aes128>>(&key, iv, data),
        "AES-192-CBC" => run::<cbc::Decryptor<aes::Aes192>>(&key, iv, data),
        "AES-256-CBC" => run::<cbc::Decryptor<aes::Aes256>>(&key, iv, data),
        "DES-EDE3-CBC" => run::<cbc::Decryptor<des::TdesEde3>>(&key, iv, data),
        _ => run::<cbc::Decryptor<des::Des>>(&key, iv, data),
    }
}

/// OpenSSL's `EVP_BytesToKey(cipher, EVP_md5(), salt, password, 1, ...)`.
fn bytes_to_key(password: &[u8], salt: &[u8], len: usize) -> Vec<u8> {
    use md5::{Digest, Md5};
    let mut key = Vec::with_capacity(len + 16);
    let mut prev: Vec<u8> = Vec::new();
    while key.len() < len {
        let mut h = Md5::new();
        h.update(&prev);
        h.update(password);
        h.update(salt);
        prev = h.finalize().to_vec();
        key.extend_from_slice(&prev);
    }
    key.truncate(len);
    key
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_to_key_is_openssls() {
        // `openssl enc -aes-256-cbc -k secret -S 0001020304050607 -P -md md5`: the key, then
        // the IV, which are the next bytes of the same derivation.
        let key = bytes_to_key(b"secret", &[0, 1, 2, 3, 4, 5, 6, 7], 48);
        assert_eq!(
            key,
            hex(
                "035FB8145B73CF111570DC936112BE9C375A5D3D8B915BC213BDBEF9DBFB7851\
                 1D112C3C48B1D30DBCEEAFF080816BE4"
            )
            .unwrap()
        );
    }

    #[test]
    fn blocks_keep_headers_and_skip_text() {
        let text = b"junk\n-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nAAEC\n-----END RSA PRIVATE KEY-----\ntrailer\n";
        let b = blocks(text).unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].headers.len(), 2);
        assert_eq!(b[0].der, vec![0, 1, 2]);
        assert!(blocks(b"-----BEGIN X-----\nAAEC\n").is_err());
    }

    #[test]
    fn trust_settings_as_openssl_reads_them() {
        let cert = [0x30, 0x00];
        let with = |aux: &[u8]| Block {
            label: "TRUSTED CERTIFICATE".into(),
            headers: Vec::new(),
            der: [&cert[..], aux].concat(),
        };
        let client = [0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];
        // SEQUENCE { SEQUENCE { clientAuth } }: trusted for clients only.
        let trust_client = with(&[&[0x30, 12, 0x30, 10][..], &client].concat());
        assert_eq!(trust(&trust_client, Purpose::ClientAuth), Some(true));
        assert_eq!(trust(&trust_client, Purpose::ServerAuth), Some(false));
        // SEQUENCE { [0] { clientAuth } }: rejected for clients, silent for servers.
        let reject_client = with(&[&[0x30, 12, 0xa0, 10][..], &client].concat());
        assert_eq!(trust(&reject_client, Purpose::ClientAuth), Some(false));
        assert_eq!(trust(&reject_client, Purpose::ServerAuth), None);
        // An empty aux says nothing.
        assert_eq!(trust(&with(&[0x30, 0x00]), Purpose::ClientAuth), None);
    }

    #[test]
    fn trusted_certificate_drops_the_trust_settings() {
        let b = Block {
            label: "TRUSTED CERTIFICATE".into(),
            headers: Vec::new(),
            der: vec![0x30, 0x02, 0x05, 0x00, 0x30, 0x00],
        };
        assert_eq!(certificate(&b).unwrap(), vec![0x30, 0x02, 0x05, 0x00]);
    }
}
