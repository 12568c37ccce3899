//! Cipher strings, protocol lists and group lists read as OpenSSL reads them.
//!
//! The differential test runs `openssl ciphers -s -v` (OpenSSL 3.0, as Debian's nginx 1.22
//! links) on each string and holds `tls12_suites` to its answer: the same suites of the
//! provider, in the same order, or a failure where OpenSSL fails. Without the openssl tool,
//! or with another major version whose rules differ, that test says so and skips, unless `CI`
//! is set.

use std::io::Write;
use std::process::Command;

use portcullis_tls::{kx_groups, openssl_name, protocol_versions, tls12_suites};
use rustls::crypto::aws_lc_rs;

/// Strings nginx users write: nginx's default, the seeds', Mozilla's and odd ones.
const SPECS: &[&str] = &[
    "HIGH:!aNULL:!MD5",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:\
     ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:\
     DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305",
    "EECDH+AESGCM:EDH+AESGCM",
    "ECDHE+AESGCM:ECDHE+CHACHA20",
    "ALL",
    "DEFAULT",
    "DEFAULT:!aRSA",
    "DEFAULT:+AES128",
    "COMPLEMENTOFALL",
    "COMPLEMENTOFDEFAULT",
    "ALL:@STRENGTH",
    "AES128:AES256:@STRENGTH",
    "CHACHA20:AES128",
    "CHACHA20:AESGCM:+aRSA:-AES256",
    "-ALL:ECDHE-RSA-AES128-GCM-SHA256:ALL",
    "!ALL:ECDHE",
    "+ECDHE:ECDHE-RSA-AES128-GCM-SHA256:+aECDSA",
    "ECDHE:-ALL",
    "ECDHE:-ECDSA:+ECDSA",
    "ECDHE:-ECDSA:ECDSA+AES128",
    "HIGH:-AES256:AES256:@STRENGTH",
    "ALL:-ECDSA:ECDSA",
    "ALL:!ECDSA:ECDSA",
    "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256",
    "HIGH:MEDIUM:LOW",
    "MEDIUM",
    "LOW",
    "FIPS",
    "HIGH+FIPS",
    "COMPLEMENTOFDEFAULT+HIGH",
    "HIGH+COMPLEMENTOFDEFAULT",
    "COMPLEMENTOFDEFAULT+ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-ECDSA-CHACHA20-POLY1305+COMPLEMENTOFDEFAULT",
    "aNULL",
    "eNULL:NULL",
    "MD5:SHA1:SHA",
    "SHA256:SHA384",
    "ECDHE:kECDHE:kEECDH:EECDH",
    "aECDSA",
    "aRSA",
    "RSA",
    "kRSA",
    "DHE:EDH",
    "AES",
    "AESGCM",
    "3DES:RC4:CAMELLIA:PSK:SRP",
    "ECDHE+aRSA+AES256",
    "ECDHE+aRSA+aECDSA",
    "ECDHE-ECDSA-AES256-GCM-SHA384+AES128",
    "TLSv1.2",
    "TLSv1.2+ECDSA",
    "TLSv1+ECDSA",
    "SSLv3",
    "ECDHE-ECDSA-AES256-GCM-SHA384+TLSv1",
    "FOO:ECDHE-RSA-AES128-GCM-SHA256",
    "FOO",
    "FOO+ECDHE",
    "ecdhe",
    "ECDHE:DEFAULT",
    "DEFAULTX:ECDHE",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "DHE-RSA-AES128-GCM-SHA256",
    "ECDHE,AES128 AES256;CHACHA20",
    "  ECDHE  ",
    "ECDHE+",
    "ECDHE:!",
    "ECDHE:@FOO",
    "ECDHE:@STRENGTH+X",
    "ECDHE#",
    "@SECLEVEL=4:ALL",
    "ALL:@SECLEVEL=5",
    "ALL:@SECLEVEL=6",
    "SUITEB128",
    "SUITEB128ONLY",
    "SUITEB192:ALL",
    "",
];

/// The OpenSSL names of the provider's TLS 1.2 suites.
fn provider_names() -> Vec<&'static str> {
    aws_lc_rs::ALL_CIPHER_SUITES
        .iter()
        .filter(|suite| suite.tls13().is_none())
        .map(|suite| openssl_name(suite.suite()))
        .collect()
}

fn ours(spec: &str) -> Option<Vec<&'static str>> {
    let suites = tls12_suites(spec).ok()?;
    Some(suites.iter().map(|s| openssl_name(s.suite())).collect())
}

/// What OpenSSL lists for `spec`, restricted to the provider's TLS 1.2 suites; `None` when
/// it rejects the string or selects none of them.
fn openssls(spec: &str, provider: &[&str]) -> Option<Vec<String>> {
    let out = Command::new("openssl")
        .args(["ciphers", "-s", "-v", "--", spec])
        .output()
        .expect("openssl runs");
    if !out.status.success() {
        return None;
    }
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| provider.contains(name))
        .map(String::from)
        .collect();
    (!listed.is_empty()).then_some(listed)
}

/// The installed OpenSSL's version line, when it is the 3.0 series these rules are.
fn openssl_30() -> Option<String> {
    let out = Command::new("openssl").arg("version").output().ok()?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    version.starts_with("OpenSSL 3.0.").then_some(version)
}

fn skip(message: &str) {
    assert!(std::env::var_os("CI").is_none(), "{message}");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {message}");
}

#[test]
fn same_suites_in_same_order_as_openssl() {
    if openssl_30().is_none() {
        skip("differential cipher test: the openssl 3.0 tool is not installed");
        return;
    }
    let provider = provider_names();
    assert_eq!(provider.len(), 6);
    let mut differences = Vec::new();
    for spec in SPECS {
        let theirs = openssls(spec, &provider);
        let mine = ours(spec).map(|names| names.iter().map(|n| n.to_string()).collect());
        if theirs != mine {
            differences.push(format!("{spec:?}: openssl {theirs:?}, ours {mine:?}"));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

#[test]
fn seeds_and_nginx_default() {
    assert_eq!(
        ours("ECDHE-ECDSA-AES256-GCM-SHA384").as_deref(),
        Some(&["ECDHE-ECDSA-AES256-GCM-SHA384"][..])
    );
    assert_eq!(
        ours("ECDHE-RSA-AES256-GCM-SHA384").as_deref(),
        Some(&["ECDHE-RSA-AES256-GCM-SHA384"][..])
    );
    assert_eq!(
        ours("HIGH:!aNULL:!MD5").as_deref(),
        Some(
            &[
                "ECDHE-ECDSA-AES256-GCM-SHA384",
                "ECDHE-RSA-AES256-GCM-SHA384",
                "ECDHE-ECDSA-CHACHA20-POLY1305",
                "ECDHE-RSA-CHACHA20-POLY1305",
                "ECDHE-ECDSA-AES128-GCM-SHA256",
                "ECDHE-RSA-AES128-GCM-SHA256",
            ][..]
        )
    );
}

#[test]
fn errors_name_the_string() {
    let err = tls12_suites("FOO").expect_err("nothing matches");
    assert!(err.to_string().contains("\"FOO\""), "{err}");
    let err = tls12_suites("ECDHE:@FOO").expect_err("bad command");
    assert!(err.to_string().contains("@FOO"), "{err}");
    let err = tls12_suites("DHE-RSA-AES128-GCM-SHA256").expect_err("not implemented");
    assert!(
        err.to_string().contains("DHE-RSA-AES128-GCM-SHA256"),
        "{err}"
    );
}

#[test]
fn openssl_names_of_tls13_suites() {
    let names: Vec<_> = aws_lc_rs::ALL_CIPHER_SUITES
        .iter()
        .filter(|suite| suite.tls13().is_some())
        .map(|suite| openssl_name(suite.suite()))
        .collect();
    assert_eq!(
        names,
        [
            "TLS_AES_256_GCM_SHA384",
            "TLS_AES_128_GCM_SHA256",
            "TLS_CHACHA20_POLY1305_SHA256"
        ]
    );
}

#[test]
fn protocols_offered_and_not() {
    let choice = protocol_versions(&["TLSv1.2"]).expect("TLS 1.2 is offered");
    assert_eq!(choice.versions, [&rustls::version::TLS12]);
    assert!(choice.not_offered.is_empty());
    let choice = protocol_versions(&["SSLv2", "SSLv3", "TLSv1.3"]).expect("TLS 1.3 is offered");
    assert_eq!(choice.versions, [&rustls::version::TLS13]);
    assert_eq!(choice.not_offered, ["SSLv2", "SSLv3"]);
    let err = protocol_versions(&["TLSv1.1"]).expect_err("nothing offered");
    assert!(err.to_string().contains("TLSv1.1"), "{err}");
    let err = protocol_versions(&["tlsv1.2"]).expect_err("names are case-sensitive");
    assert_eq!(err.to_string(), "invalid value \"tlsv1.2\"");
}

#[test]
fn groups_by_openssl_names() {
    let auto: Vec<_> = kx_groups("auto")
        .expect("auto")
        .iter()
        .map(|g| g.name())
        .collect();
    assert_eq!(
        auto,
        [
            rustls::NamedGroup::X25519,
            rustls::NamedGroup::secp256r1,
            rustls::NamedGroup::secp384r1
        ]
    );
    for name in [
        "x25519",
        "X25519",
        "prime256v1",
        "secp256r1",
        "P-256",
        "secp384r1",
        "P-384",
    ] {
        assert_eq!(kx_groups(name).map(|g| g.len()), Ok(1), "{name}");
    }
    for name in ["p-256", "SECP384R1", "auto:X25519", "", "X25519:"] {
        assert!(kx_groups(name).is_err(), "{name}");
    }
    let err = kx_groups("X25519:zorglub").expect_err("unknown group");
    assert!(
        err.to_string().contains("unknown group \"zorglub\""),
        "{err}"
    );
}

/// Words the generated strings are made of.
const WORDS: &[&str] = &[
    "ALL",
    "DEFAULT",
    "HIGH",
    "MEDIUM",
    "FIPS",
    "aNULL",
    "eNULL",
    "ECDHE",
    "EECDH",
    "kECDHE",
    "aECDSA",
    "ECDSA",
    "aRSA",
    "RSA",
    "DHE",
    "AES",
    "AES128",
    "AES256",
    "AESGCM",
    "CHACHA20",
    "SHA256",
    "SHA384",
    "SHA1",
    "TLSv1.2",
    "CBC",
    "COMPLEMENTOFDEFAULT",
    "PSK",
    "FOO",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "DHE-RSA-AES256-GCM-SHA384",
    "@STRENGTH",
];

/// A small deterministic generator, so that a failing string can be reproduced.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[test]
fn generated_strings_match_openssl() {
    const STRINGS: usize = 300;
    if openssl_30().is_none() {
        skip("generated cipher strings: the openssl 3.0 tool is not installed");
        return;
    }
    let provider = provider_names();
    let mut rng = XorShift(0x5eed_cafe_f00d_d00d);
    let mut differences = Vec::new();
    for _ in 0..STRINGS {
        let mut spec = String::new();
        for i in 0..1 + rng.below(5) {
            if i > 0 {
                spec.push(":, ".as_bytes()[rng.below(3)] as char);
            }
            let word = WORDS[rng.below(WORDS.len())];
            if !word.starts_with('@') {
                spec.push_str(["", "", "!", "-", "+"][rng.below(5)]);
            }
            spec.push_str(word);
            if rng.below(4) == 0 && !word.starts_with('@') {
                spec.push('+');
                spec.push_str(WORDS[rng.below(WORDS.len() - 1)]);
            }
        }
        let theirs = openssls(&spec, &provider);
        let mine = ours(&spec).map(|names| names.iter().map(|n| n.to_string()).collect());
        if theirs != mine {
            differences.push(format!("{spec:?}: openssl {theirs:?}, ours {mine:?}"));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
