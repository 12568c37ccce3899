//! The password hashes of a user file, checked as nginx's `ngx_crypt` checks them: Apache's
//! `$apr1$`, `{PLAIN}`, `{SSHA}` and `{SHA}` here, every other through the system's crypt(3)
//! (libxcrypt: traditional DES, `$1$`, `$5$`, `$6$`, bcrypt's `$2b$`/`$2y$`, yescrypt's
//! `$y$`, ...), which nginx calls for them too. A hash is recomputed with the settings (salt,
//! rounds) of the stored one and must equal it byte for byte.

use std::ffi::{c_char, CStr, CString};

use base64::Engine as _;
use md5::{Digest, Md5};

/// Whether `password` is the one `stored` was made from. nginx holds both as C strings, so
/// each ends at its first NUL here too.
pub(crate) fn verify(password: &[u8], stored: &[u8]) -> bool {
    let password = until_nul(password);
    let stored = until_nul(stored);
    let hashed = if let Some(salt) = stored.strip_prefix(b"$apr1$") {
        apr1(password, salt)
    } else if let Some(plain) = stored.strip_prefix(b"{PLAIN}") {
        return same(password, plain);
    } else if let Some(encoded) = stored.strip_prefix(b"{SSHA}") {
        match ssha(password, encoded) {
            Some(h) => h,
            None => return false,
        }
    } else if stored.starts_with(b"{SHA}") {
        let mut h = b"{SHA}".to_vec();
        h.extend_from_slice(base64(&sha1(&[password]), true).as_bytes());
        h
    } else {
        match libc_crypt(password, stored) {
            Some(h) => h,
            None => return false,
        }
    };
    same(&hashed, stored)
}

fn until_nul(s: &[u8]) -> &[u8] {
    s.iter().position(|&b| b == 0).map_or(s, |end| &s[..end])
}

/// Compares in time that depends on the lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    aws_lc_rs::constant_time::verify_slices_are_equal(a, b).is_ok()
}

fn sha1(parts: &[&[u8]]) -> Vec<u8> {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY);
    for p in parts {
        ctx.update(p);
    }
    ctx.finish().as_ref().to_vec()
}

fn base64(bytes: &[u8], padded: bool) -> String {
    if padded {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    } else {
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes)
    }
}

/// `{SSHA}`: base64 of SHA-1(password, salt) followed by the salt, which is what the stored
/// value decodes to after its first 20 bytes. `None` when it decodes to no digest at all.
fn ssha(password: &[u8], encoded: &[u8]) -> Option<Vec<u8>> {
    let decoded = portcullis_http::decode_base64(encoded)?;
    let salt = decoded.get(20..)?;
    let mut raw = sha1(&[password, salt]);
    raw.extend_from_slice(salt);
    let mut h = b"{SSHA}".to_vec();
    h.extend_from_slice(base64(&raw, true).as_bytes());
    Some(h)
}

/// The alphabet of crypt's base64, least significant sextet first.
const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Apache's `$apr1$`: Poul-Henning Kamp's MD5 crypt with its own magic, as nginx computes it
/// (`ngx_crypt_apr1`) and Apache's `htpasswd -m` makes it. `setting` is what follows the
/// magic: the salt (up to 8 characters, to the first `$`) and the stored hash.
fn apr1(password: &[u8], setting: &[u8]) -> Vec<u8> {
    md5_crypt(b"$apr1$", password, setting)
}

fn md5_crypt(magic: &[u8], key: &[u8], setting: &[u8]) -> Vec<u8> {
    let salt_len = setting
        .iter()
        .take(8)
        .position(|&b| b == b'$')
        .unwrap_or(setting.len().min(8));
    let salt = &setting[..salt_len];

    let alternate = Md5::new()
        .chain_update(key)
        .chain_update(salt)
        .chain_update(key)
        .finalize();
    let mut md5 = Md5::new()
        .chain_update(key)
        .chain_update(magic)
        .chain_update(salt);
    for chunk in key.chunks(16) {
        md5.update(&alternate[..chunk.len()]);
    }
    let mut i = key.len();
    while i != 0 {
        if i & 1 == 1 {
            md5.update([0u8]);
        } else {
            md5.update(&key[..1]);
        }
        i >>= 1;
    }
    let mut last = md5.finalize();
    for round in 0..1000 {
        let mut ctx = Md5::new();
        if round & 1 == 1 {
            ctx.update(key);
        } else {
            ctx.update(last);
        }
        if round % 3 != 0 {
            ctx.update(salt);
        }
        if round % 7 != 0 {
            ctx.update(key);
        }
        if round & 1 == 1 {
            ctx.update(last);
        } else {
            ctx.update(key);
        }
        last = ctx.finalize();
    }

    let mut out = magic.to_vec();
    out.extend_from_slice(salt);
    out.push(b'$');
    let f = |i: usize| u32::from(last[i]);
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        to64(&mut out, f(a) << 16 | f(b) << 8 | f(c), 4);
    }
    to64(&mut out, f(11), 2);
    out
}

fn to64(out: &mut Vec<u8>, mut v: u32, n: usize) {
    for _ in 0..n {
        out.push(ITOA64[(v & 0x3f) as usize]);
        v >>= 6;
    }
}

#[link(name = "crypt")]
extern "C" {
    /// libxcrypt's reentrant crypt(3) that is told the size of its work area and checks
    /// it: NULL on an unknown or malformed setting.
    fn crypt_rn(
        phrase: *const c_char,
        setting: *const c_char,
        data: *mut u8,
        size: std::ffi::c_int,
    ) -> *mut c_char;
}

/// `sizeof(struct crypt_data)` in libxcrypt's `<crypt.h>`, a structure of `char` arrays;
/// `crypt_rn` refuses a smaller area.
const CRYPT_DATA_SIZE: usize = 32768;

/// The system's crypt(3) of `phrase` with the salt and settings of `setting`.
fn libc_crypt(phrase: &[u8], setting: &[u8]) -> Option<Vec<u8>> {
    let phrase = CString::new(phrase).ok()?;
    let setting = CString::new(setting).ok()?;
    // The work area must be zeroed before its first use.
    let mut data = vec![0u8; CRYPT_DATA_SIZE];
    // SAFETY: both strings are NUL-terminated and outlive the call; `data` is a zeroed area
    // of the size passed, which crypt_rn checks against its own structure's. The result
    // points into `data` (or is NULL) and is copied out before `data` goes.
    unsafe {
        let out = crypt_rn(
            phrase.as_ptr(),
            setting.as_ptr(),
            data.as_mut_ptr(),
            CRYPT_DATA_SIZE as std::ffi::c_int,
        );
        if out.is_null() {
            return None;
        }
        Some(CStr::from_ptr(out).to_bytes().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Hashes of "secret" made by other tools: `openssl passwd` (-apr1, -1, -5, -6), Python's
    // crypt over libxcrypt (bcrypt, yescrypt, DES) and hashlib ({SHA}, {SSHA}).
    const SECRET: &[&str] = &[
        "$apr1$rSiP3vYa$nm/ZreXK/j2l5TkCLqoTA.",
        "$1$saltsalt$9xy1btjgzLYfb7hivXtC//",
        "$5$saltsalt$0IyaXrmV7.sGNS6tirgqHLqX/G.FBvgkYA.lpPdS5sA",
        "$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1",
        "$2b$05$abcdefghijklmnopqrstuuOQiyCxlgf/oeuTqixKmWdcYUh4Hjl0a",
        "$2y$05$abcdefghijklmnopqrstuuOQiyCxlgf/oeuTqixKmWdcYUh4Hjl0a",
        "$y$j9T$abcdefgh$IUWJt2doU4Kf6E/JP1UkAT3S5O3Q7SSA8SJirXIlEu9",
        "abNANd1rDfiNc",
        "{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=",
        "{SSHA}HQu8h+jQEwa23buLLSFNKP47iyhzYWx0Ynl0ZQ==",
        "{PLAIN}secret",
    ];

    #[test]
    fn every_format_checks_the_password() {
        for stored in SECRET {
            assert!(verify(b"secret", stored.as_bytes()), "{stored}");
            assert!(!verify(b"secreT", stored.as_bytes()), "{stored}");
            assert!(!verify(b"", stored.as_bytes()), "{stored}");
            // A C string: what follows a NUL is not part of the password.
            assert!(verify(b"secret\0tail", stored.as_bytes()), "{stored}");
        }
        // A stored value whose hash is cut or bent matches nothing.
        for stored in SECRET {
            let cut = &stored[..stored.len() - 1];
            assert!(!verify(b"secret", cut.as_bytes()), "{cut}");
        }
        assert!(!verify(b"secret", b"{SSHA}c2hvcnQ="));
        assert!(!verify(b"secret", b"{SSHA}!!!!"));
        assert!(!verify(b"secret", b"$9$unknown"));
        assert!(!verify(b"*0", b"*0"));
        assert!(!verify(b"", b""));
    }

    #[test]
    fn apr1_is_md5_crypt_with_its_own_magic() {
        // Apache's documented example: "password" with salt "lZL6V/ci".
        assert!(verify(
            b"password",
            b"$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00"
        ));
        assert!(!verify(
            b"passwore",
            b"$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00"
        ));
        // The same construction with the magic `$1$` is the system's MD5 crypt: both
        // implementations agree on every length around the 16-byte blocks.
        for len in [0, 1, 2, 15, 16, 17, 31, 33, 64] {
            let key: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            for salt in [&b"saltsalt"[..], b"ab", b"toolongsalt", b"s$x"] {
                let mut setting = b"$1$".to_vec();
                setting.extend_from_slice(salt);
                let ours = md5_crypt(b"$1$", &key, salt);
                let system = libc_crypt(&key, &setting).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&ours),
                    String::from_utf8_lossy(&system),
                    "key {len}, salt {salt:?}"
                );
            }
        }
    }
}
