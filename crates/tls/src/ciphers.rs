//! OpenSSL's names for TLS settings, mapped onto the rustls aws-lc-rs provider.
//!
//! nginx hands `ssl_ciphers` to `SSL_CTX_set_cipher_list`, `ssl_protocols` to the context's
//! version range and `ssl_ecdh_curve` to `SSL_CTX_set1_curves_list`. This module reads the
//! same strings the way OpenSSL 3.0 does and answers with what the provider implements.
//!
//! Cipher strings are evaluated by OpenSSL's own algorithm (`ssl_create_cipher_list`): a
//! linked list of ciphers, each active or not, is first put in OpenSSL's default preference
//! order, then each rule of the string adds, moves, deletes or kills the ciphers whose
//! algorithm masks it matches. Every rule decides a cipher's fate from that cipher's own
//! attributes and only moves matched ciphers as a block that keeps their relative order, so
//! running the algorithm on the provider's six TLS 1.2 suites alone gives them in exactly the
//! relative order OpenSSL gives them among its hundred-odd.

use rustls::crypto::{aws_lc_rs, SupportedKxGroup};
use rustls::{CipherSuite, SupportedCipherSuite, SupportedProtocolVersion};

/// A cipher string, protocol list or group list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CipherError {
    message: String,
}

impl CipherError {
    fn new(message: String) -> Self {
        Self { message }
    }
}

// Algorithm masks, one bit per algorithm, in the four families OpenSSL matches on. Only the
// intersections matter, so the bit values are ours; the families and aliases are OpenSSL's.

const K_RSA: u32 = 1 << 0;
const K_DHE: u32 = 1 << 1;
const K_ECDHE: u32 = 1 << 2;
const K_PSK: u32 = 1 << 3;
const K_RSAPSK: u32 = 1 << 4;
const K_ECDHEPSK: u32 = 1 << 5;
const K_DHEPSK: u32 = 1 << 6;
const K_SRP: u32 = 1 << 7;
const K_GOST: u32 = 1 << 8;
const K_GOST18: u32 = 1 << 9;
const K_ANY_PSK: u32 = K_PSK | K_RSAPSK | K_ECDHEPSK | K_DHEPSK;

const A_RSA: u32 = 1 << 0;
const A_DSS: u32 = 1 << 1;
const A_NULL: u32 = 1 << 2;
const A_ECDSA: u32 = 1 << 3;
const A_PSK: u32 = 1 << 4;
const A_GOST01: u32 = 1 << 5;
const A_GOST12: u32 = 1 << 6;
const A_SRP: u32 = 1 << 7;

const E_DES: u32 = 1 << 0;
const E_3DES: u32 = 1 << 1;
const E_RC4: u32 = 1 << 2;
const E_RC2: u32 = 1 << 3;
const E_IDEA: u32 = 1 << 4;
const E_NULL: u32 = 1 << 5;
const E_AES128: u32 = 1 << 6;
const E_AES256: u32 = 1 << 7;
const E_CAMELLIA128: u32 = 1 << 8;
const E_CAMELLIA256: u32 = 1 << 9;
const E_GOST89: u32 = 1 << 10;
const E_SEED: u32 = 1 << 11;
const E_AES128GCM: u32 = 1 << 12;
const E_AES256GCM: u32 = 1 << 13;
const E_AES128CCM: u32 = 1 << 14;
const E_AES256CCM: u32 = 1 << 15;
const E_AES128CCM8: u32 = 1 << 16;
const E_AES256CCM8: u32 = 1 << 17;
const E_GOST89_12: u32 = 1 << 18;
const E_CHACHA20POLY1305: u32 = 1 << 19;
const E_ARIA128GCM: u32 = 1 << 20;
const E_ARIA256GCM: u32 = 1 << 21;
const E_MAGMA: u32 = 1 << 22;
const E_KUZNYECHIK: u32 = 1 << 23;
const E_AESGCM: u32 = E_AES128GCM | E_AES256GCM;
const E_AESCCM: u32 = E_AES128CCM | E_AES256CCM | E_AES128CCM8 | E_AES256CCM8;
const E_AES: u32 = E_AES128 | E_AES256 | E_AESGCM | E_AESCCM;
const E_CAMELLIA: u32 = E_CAMELLIA128 | E_CAMELLIA256;
const E_ARIA: u32 = E_ARIA128GCM | E_ARIA256GCM;
const E_CBC: u32 = E_DES
    | E_3DES
    | E_RC2
    | E_IDEA
    | E_AES128
    | E_AES256
    | E_CAMELLIA128
    | E_CAMELLIA256
    | E_GOST89
    | E_SEED
    | E_MAGMA
    | E_KUZNYECHIK;

const M_MD5: u32 = 1 << 0;
const M_SHA1: u32 = 1 << 1;
const M_GOST94: u32 = 1 << 2;
const M_GOST89MAC: u32 = 1 << 3;
const M_SHA256: u32 = 1 << 4;
const M_SHA384: u32 = 1 << 5;
const M_AEAD: u32 = 1 << 6;
const M_GOST12_256: u32 = 1 << 7;
const M_GOST89MAC12: u32 = 1 << 8;

// Strength classes: the low five bits are the "strong" family, matched as one; NOT_DEFAULT
// is matched on its own.
const S_LOW: u32 = 1 << 1;
const S_MEDIUM: u32 = 1 << 2;
const S_HIGH: u32 = 1 << 3;
const S_FIPS: u32 = 1 << 4;
const S_NOT_DEFAULT: u32 = 1 << 5;
const S_STRONG_MASK: u32 = 0x1f;

// Protocol versions as OpenSSL numbers them; an alias naming one matches ciphers whose
// minimum version is exactly that one.
const SSL3_VERSION: u16 = 0x0300;
const TLS1_VERSION: u16 = 0x0301;
const TLS1_2_VERSION: u16 = 0x0303;

/// What a rule word stands for: a cipher's attributes, or an alias's selection masks.
#[derive(Clone, Copy)]
struct Masks {
    mkey: u32,
    auth: u32,
    enc: u32,
    mac: u32,
    min_tls: u16,
    strength: u32,
}

const fn alias(mkey: u32, auth: u32, enc: u32, mac: u32, min_tls: u16, strength: u32) -> Masks {
    Masks {
        mkey,
        auth,
        enc,
        mac,
        min_tls,
        strength,
    }
}

/// A TLS 1.2 suite of the provider as OpenSSL describes it.
struct Cipher {
    suite: &'static SupportedCipherSuite,
    name: &'static str,
    masks: Masks,
    /// Symmetric strength in bits, for `@STRENGTH` and `@SECLEVEL`.
    bits: u32,
}

const fn ecdhe(auth: u32, enc: u32, strength: u32) -> Masks {
    alias(K_ECDHE, auth, enc, M_AEAD, TLS1_2_VERSION, strength)
}

/// The provider's TLS 1.2 suites, with OpenSSL's attributes for each.
static CIPHERS: [Cipher; 6] = [
    Cipher {
        suite: &aws_lc_rs::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        name: "ECDHE-ECDSA-AES256-GCM-SHA384",
        masks: ecdhe(A_ECDSA, E_AES256GCM, S_HIGH | S_FIPS),
        bits: 256,
    },
    Cipher {
        suite: &aws_lc_rs::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        name: "ECDHE-ECDSA-AES128-GCM-SHA256",
        masks: ecdhe(A_ECDSA, E_AES128GCM, S_HIGH | S_FIPS),
        bits: 128,
    },
    Cipher {
        suite: &aws_lc_rs::cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        name: "ECDHE-ECDSA-CHACHA20-POLY1305",
        masks: ecdhe(A_ECDSA, E_CHACHA20POLY1305, S_HIGH),
        bits: 256,
    },
    Cipher {
        suite: &aws_lc_rs::cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        name: "ECDHE-RSA-AES256-GCM-SHA384",
        masks: ecdhe(A_RSA, E_AES256GCM, S_HIGH | S_FIPS),
        bits: 256,
    },
    Cipher {
        suite: &aws_lc_rs::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        name: "ECDHE-RSA-AES128-GCM-SHA256",
        masks: ecdhe(A_RSA, E_AES128GCM, S_HIGH | S_FIPS),
        bits: 128,
    },
    Cipher {
        suite: &aws_lc_rs::cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        name: "ECDHE-RSA-CHACHA20-POLY1305",
        masks: ecdhe(A_RSA, E_CHACHA20POLY1305, S_HIGH),
        bits: 256,
    },
];

/// OpenSSL 3.0's cipher aliases (`cipher_aliases` in ssl_ciph.c). Names are case-sensitive.
static ALIASES: &[(&str, Masks)] = &[
    ("ALL", alias(0, 0, !E_NULL, 0, 0, 0)),
    ("COMPLEMENTOFALL", alias(0, 0, E_NULL, 0, 0, 0)),
    ("COMPLEMENTOFDEFAULT", alias(0, 0, 0, 0, 0, S_NOT_DEFAULT)),
    ("kRSA", alias(K_RSA, 0, 0, 0, 0, 0)),
    ("kEDH", alias(K_DHE, 0, 0, 0, 0, 0)),
    ("kDHE", alias(K_DHE, 0, 0, 0, 0, 0)),
    ("DH", alias(K_DHE, 0, 0, 0, 0, 0)),
    ("kEECDH", alias(K_ECDHE, 0, 0, 0, 0, 0)),
    ("kECDHE", alias(K_ECDHE, 0, 0, 0, 0, 0)),
    ("ECDH", alias(K_ECDHE, 0, 0, 0, 0, 0)),
    ("kPSK", alias(K_PSK, 0, 0, 0, 0, 0)),
    ("kRSAPSK", alias(K_RSAPSK, 0, 0, 0, 0, 0)),
    ("kECDHEPSK", alias(K_ECDHEPSK, 0, 0, 0, 0, 0)),
    ("kDHEPSK", alias(K_DHEPSK, 0, 0, 0, 0, 0)),
    ("kSRP", alias(K_SRP, 0, 0, 0, 0, 0)),
    ("kGOST", alias(K_GOST, 0, 0, 0, 0, 0)),
    ("kGOST18", alias(K_GOST18, 0, 0, 0, 0, 0)),
    ("aRSA", alias(0, A_RSA, 0, 0, 0, 0)),
    ("aDSS", alias(0, A_DSS, 0, 0, 0, 0)),
    ("DSS", alias(0, A_DSS, 0, 0, 0, 0)),
    ("aNULL", alias(0, A_NULL, 0, 0, 0, 0)),
    ("aECDSA", alias(0, A_ECDSA, 0, 0, 0, 0)),
    ("ECDSA", alias(0, A_ECDSA, 0, 0, 0, 0)),
    ("aPSK", alias(0, A_PSK, 0, 0, 0, 0)),
    ("aGOST01", alias(0, A_GOST01, 0, 0, 0, 0)),
    ("aGOST12", alias(0, A_GOST12, 0, 0, 0, 0)),
    ("aGOST", alias(0, A_GOST01 | A_GOST12, 0, 0, 0, 0)),
    ("aSRP", alias(0, A_SRP, 0, 0, 0, 0)),
    ("EDH", alias(K_DHE, !A_NULL, 0, 0, 0, 0)),
    ("DHE", alias(K_DHE, !A_NULL, 0, 0, 0, 0)),
    ("EECDH", alias(K_ECDHE, !A_NULL, 0, 0, 0, 0)),
    ("ECDHE", alias(K_ECDHE, !A_NULL, 0, 0, 0, 0)),
    ("NULL", alias(0, 0, E_NULL, 0, 0, 0)),
    ("RSA", alias(K_RSA, A_RSA, 0, 0, 0, 0)),
    ("ADH", alias(K_DHE, A_NULL, 0, 0, 0, 0)),
    ("AECDH", alias(K_ECDHE, A_NULL, 0, 0, 0, 0)),
    ("PSK", alias(K_ANY_PSK, 0, 0, 0, 0, 0)),
    ("SRP", alias(K_SRP, 0, 0, 0, 0, 0)),
    ("3DES", alias(0, 0, E_3DES, 0, 0, 0)),
    ("RC4", alias(0, 0, E_RC4, 0, 0, 0)),
    ("RC2", alias(0, 0, E_RC2, 0, 0, 0)),
    ("IDEA", alias(0, 0, E_IDEA, 0, 0, 0)),
    ("SEED", alias(0, 0, E_SEED, 0, 0, 0)),
    ("eNULL", alias(0, 0, E_NULL, 0, 0, 0)),
    (
        "GOST2014",
        alias(
            0,
            0,
            E_GOST89 | E_GOST89_12 | E_MAGMA | E_KUZNYECHIK,
            0,
            0,
            0,
        ),
    ),
    (
        "AES128",
        alias(
            0,
            0,
            E_AES128 | E_AES128GCM | E_AES128CCM | E_AES128CCM8,
            0,
            0,
            0,
        ),
    ),
    (
        "AES256",
        alias(
            0,
            0,
            E_AES256 | E_AES256GCM | E_AES256CCM | E_AES256CCM8,
            0,
            0,
            0,
        ),
    ),
    ("AES", alias(0, 0, E_AES, 0, 0, 0)),
    ("AESGCM", alias(0, 0, E_AESGCM, 0, 0, 0)),
    ("AESCCM", alias(0, 0, E_AESCCM, 0, 0, 0)),
    ("AESCCM8", alias(0, 0, E_AES128CCM8 | E_AES256CCM8, 0, 0, 0)),
    ("CAMELLIA128", alias(0, 0, E_CAMELLIA128, 0, 0, 0)),
    ("CAMELLIA256", alias(0, 0, E_CAMELLIA256, 0, 0, 0)),
    ("CAMELLIA", alias(0, 0, E_CAMELLIA, 0, 0, 0)),
    ("CHACHA20", alias(0, 0, E_CHACHA20POLY1305, 0, 0, 0)),
    (
        "GOST2012-GOST8912-GOST8912",
        alias(0, 0, E_GOST89_12, 0, 0, 0),
    ),
    ("ARIA", alias(0, 0, E_ARIA, 0, 0, 0)),
    ("ARIAGCM", alias(0, 0, E_ARIA, 0, 0, 0)),
    ("ARIA128", alias(0, 0, E_ARIA128GCM, 0, 0, 0)),
    ("ARIA256", alias(0, 0, E_ARIA256GCM, 0, 0, 0)),
    ("CBC", alias(0, 0, E_CBC, 0, 0, 0)),
    ("MD5", alias(0, 0, 0, M_MD5, 0, 0)),
    ("SHA1", alias(0, 0, 0, M_SHA1, 0, 0)),
    ("SHA", alias(0, 0, 0, M_SHA1, 0, 0)),
    ("GOST94", alias(0, 0, 0, M_GOST94, 0, 0)),
    (
        "GOST89MAC",
        alias(0, 0, 0, M_GOST89MAC | M_GOST89MAC12, 0, 0),
    ),
    ("SHA256", alias(0, 0, 0, M_SHA256, 0, 0)),
    ("SHA384", alias(0, 0, 0, M_SHA384, 0, 0)),
    ("GOST12", alias(0, 0, 0, M_GOST12_256, 0, 0)),
    ("SSLv3", alias(0, 0, 0, 0, SSL3_VERSION, 0)),
    ("TLSv1", alias(0, 0, 0, 0, TLS1_VERSION, 0)),
    ("TLSv1.0", alias(0, 0, 0, 0, TLS1_VERSION, 0)),
    ("TLSv1.2", alias(0, 0, 0, 0, TLS1_2_VERSION, 0)),
    ("LOW", alias(0, 0, 0, 0, 0, S_LOW)),
    ("MEDIUM", alias(0, 0, 0, 0, 0, S_MEDIUM)),
    ("HIGH", alias(0, 0, 0, 0, 0, S_HIGH)),
    ("FIPS", alias(0, 0, !E_NULL, 0, 0, S_FIPS)),
];

/// OpenSSL's built-in list that a cipher string starting with `DEFAULT` begins with.
const DEFAULT_RULES: &str = "ALL:!COMPLEMENTOFDEFAULT:!eNULL";

/// Highest `@SECLEVEL` OpenSSL knows.
const MAX_SECURITY_LEVEL: u8 = 5;

/// `ssl_ciphers` / `proxy_ssl_ciphers`: an OpenSSL cipher string → the TLS 1.2 suites of the
/// aws-lc-rs provider it selects, in the order OpenSSL would list them. TLS 1.3 suites are not
/// affected by this string (as in OpenSSL) and are not returned.
///
/// Words OpenSSL does not know select nothing, as in OpenSSL; a string that leaves no suite
/// selected is an error, as `SSL_CTX_set_cipher_list` fails on it (a string selecting only
/// ciphers the provider lacks, such as `DHE-RSA-AES128-GCM-SHA256`, fails here too).
pub fn tls12_suites(spec: &str) -> Result<Vec<SupportedCipherSuite>, CipherError> {
    let mut list = CipherList::new();
    let mut rules = suite_b_rules(spec).unwrap_or(spec);
    if let Some(rest) = rules.strip_prefix("DEFAULT") {
        list.apply_rules(DEFAULT_RULES)
            .map_err(|e| e.for_spec(spec))?;
        rules = rest.strip_prefix(':').unwrap_or(rest);
    }
    list.apply_rules(rules).map_err(|e| e.for_spec(spec))?;

    // OpenSSL refuses, at handshake time, suites weaker than `@SECLEVEL` allows: 192 bits at
    // level 4, 256 at level 5. Every provider suite passes levels 0 to 3 (all have forward
    // secrecy, an AEAD and at least 128 bits).
    let min_bits = match list.security_level {
        4 => 192,
        5 => 256,
        _ => 0,
    };
    let suites: Vec<SupportedCipherSuite> = list
        .entries
        .iter()
        .filter(|entry| entry.active && CIPHERS[entry.cipher].bits >= min_bits)
        .map(|entry| *CIPHERS[entry.cipher].suite)
        .collect();
    if suites.is_empty() {
        return Err(RuleError::NoMatch.for_spec(spec));
    }
    Ok(suites)
}

/// The Suite B profiles, which replace the whole string when it starts with their name.
fn suite_b_rules(spec: &str) -> Option<&'static str> {
    const PROFILES: [(&str, &str); 4] = [
        ("SUITEB128ONLY", "ECDHE-ECDSA-AES128-GCM-SHA256"),
        ("SUITEB128C2", "ECDHE-ECDSA-AES256-GCM-SHA384"),
        (
            "SUITEB128",
            "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384",
        ),
        ("SUITEB192", "ECDHE-ECDSA-AES256-GCM-SHA384"),
    ];
    PROFILES
        .iter()
        .find(|(prefix, _)| spec.starts_with(prefix))
        .map(|(_, rules)| *rules)
}

/// Why OpenSSL's `SSL_CTX_set_cipher_list` would fail.
enum RuleError {
    NoMatch,
    /// OpenSSL's "invalid command": a character or `@` command it cannot read, described.
    Invalid(String),
}

impl RuleError {
    fn for_spec(self, spec: &str) -> CipherError {
        CipherError::new(match self {
            RuleError::NoMatch => format!(
                "cipher string \"{spec}\" selects no cipher suite this server implements \
                 (no cipher match)"
            ),
            RuleError::Invalid(what) => {
                format!("cipher string \"{spec}\" is invalid: {what} (invalid command)")
            }
        })
    }
}

/// What a rule does to the ciphers it matches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    /// No prefix: append the matched inactive ciphers, in list order, and activate them.
    Add,
    /// `+`: move the matched active ciphers to the end, in list order.
    Order,
    /// `-`: deactivate the matched ciphers and move them to the front, where a later add
    /// finds them first.
    Delete,
    /// `!`: remove the matched ciphers for good.
    Kill,
    /// Used by the default ordering only: move the matched active ciphers to the front.
    Bump,
}

/// One position of OpenSSL's cipher list.
#[derive(Clone, Copy)]
struct Entry {
    cipher: usize,
    active: bool,
}

/// What a rule selects: a cipher's exact identity, or masks every matched cipher meets.
struct Selector {
    cipher: Option<usize>,
    masks: Masks,
}

impl Selector {
    fn any() -> Self {
        Self {
            cipher: None,
            masks: alias(0, 0, 0, 0, 0, 0),
        }
    }

    fn masks(masks: Masks) -> Self {
        Self {
            cipher: None,
            masks,
        }
    }

    fn matches(&self, index: usize) -> bool {
        if self.cipher.is_some_and(|c| c != index) {
            return false;
        }
        let want = &self.masks;
        let have = &CIPHERS[index].masks;
        let family = |want: u32, have: u32| want == 0 || want & have != 0;
        family(want.mkey, have.mkey)
            && family(want.auth, have.auth)
            && family(want.enc, have.enc)
            && family(want.mac, have.mac)
            && (want.min_tls == 0 || want.min_tls == have.min_tls)
            && family(want.strength & S_STRONG_MASK, have.strength & S_STRONG_MASK)
            && family(want.strength & S_NOT_DEFAULT, have.strength & S_NOT_DEFAULT)
    }
}

/// OpenSSL's cipher list during `ssl_create_cipher_list`, restricted to the provider's suites.
struct CipherList {
    entries: Vec<Entry>,
    security_level: u8,
}

impl CipherList {
    /// The list in OpenSSL's default preference order, every cipher inactive.
    fn new() -> Self {
        let mut list = Self {
            entries: (0..CIPHERS.len())
                .map(|cipher| Entry {
                    cipher,
                    active: false,
                })
                .collect(),
            security_level: 0,
        };
        let mkey = |mkey| alias(mkey, 0, 0, 0, 0, 0);
        let enc = |enc| alias(0, 0, enc, 0, 0, 0);
        let mac = |mac| alias(0, 0, 0, mac, 0, 0);
        let rules = [
            // Ephemeral ECDH first, ECDSA before RSA.
            (alias(K_ECDHE, A_ECDSA, 0, 0, 0, 0), Op::Add),
            (mkey(K_ECDHE), Op::Add),
            (mkey(K_ECDHE), Op::Delete),
            // GCM before CHACHA20 before the rest of AES.
            (enc(E_AESGCM), Op::Add),
            (enc(E_CHACHA20POLY1305), Op::Add),
            (enc(E_AES & !E_AESGCM), Op::Add),
            (alias(0, 0, 0, 0, 0, 0), Op::Add),
            (mac(M_MD5), Op::Order),
            (alias(0, A_NULL, 0, 0, 0, 0), Op::Order),
            (mkey(K_RSA), Op::Order),
            (mkey(K_PSK), Op::Order),
            (enc(E_RC4), Op::Order),
        ];
        for (masks, op) in rules {
            list.apply(&Selector::masks(masks), op);
        }
        list.sort_by_strength();
        let rules = [
            (alias(0, 0, 0, 0, TLS1_2_VERSION, 0), Op::Bump),
            (mac(M_AEAD), Op::Bump),
            (mkey(K_DHE | K_ECDHE), Op::Bump),
            (alias(K_DHE | K_ECDHE, 0, 0, M_AEAD, 0, 0), Op::Bump),
            (alias(0, 0, 0, 0, 0, 0), Op::Delete),
        ];
        for (masks, op) in rules {
            list.apply(&Selector::masks(masks), op);
        }
        list
    }

    /// `ssl_cipher_apply_rule`: the matched ciphers move as a block keeping their order.
    fn apply(&mut self, selector: &Selector, op: Op) {
        let wanted = |entry: &Entry| {
            selector.matches(entry.cipher)
                && match op {
                    Op::Add => !entry.active,
                    Op::Order | Op::Delete | Op::Bump => entry.active,
                    Op::Kill => true,
                }
        };
        let (mut matched, rest): (Vec<Entry>, Vec<Entry>) =
            self.entries.iter().partition(|entry| wanted(entry));
        for entry in &mut matched {
            entry.active = matches!(op, Op::Add | Op::Order | Op::Bump);
        }
        self.entries = match op {
            Op::Add | Op::Order => rest.into_iter().chain(matched).collect(),
            Op::Delete | Op::Bump => matched.into_iter().chain(rest).collect(),
            Op::Kill => rest,
        };
    }

    /// `@STRENGTH`: active ciphers ordered by symmetric strength, strongest first, keeping
    /// the order of equals; inactive ones stay where they are.
    fn sort_by_strength(&mut self) {
        let mut strengths: Vec<u32> = self
            .entries
            .iter()
            .filter(|entry| entry.active)
            .map(|entry| CIPHERS[entry.cipher].bits)
            .collect();
        strengths.sort_unstable_by(|a, b| b.cmp(a));
        strengths.dedup();
        for bits in strengths {
            let (matched, rest): (Vec<Entry>, Vec<Entry>) = self
                .entries
                .iter()
                .partition(|entry| entry.active && CIPHERS[entry.cipher].bits == bits);
            self.entries = rest.into_iter().chain(matched).collect();
        }
    }

    /// `ssl_cipher_process_rulestr`: one cipher string applied rule by rule.
    fn apply_rules(&mut self, rules: &str) -> Result<(), RuleError> {
        let bytes = rules.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            let (op, prefix) = match bytes[at] {
                b'-' => (Some(Op::Delete), 1),
                b'+' => (Some(Op::Order), 1),
                b'!' => (Some(Op::Kill), 1),
                b'@' => (None, 1),
                byte if is_separator(byte) => {
                    at += 1;
                    continue;
                }
                _ => (Some(Op::Add), 0),
            };
            at += prefix;
            let Some(op) = op else {
                let word = word_at(bytes, at);
                self.command(&rules[at..at + word])?;
                at = skip_to_separator(bytes, at);
                continue;
            };
            let mut selector = Selector::any();
            let mut found = true;
            loop {
                let len = word_at(bytes, at);
                if len == 0 {
                    return Err(RuleError::Invalid(match rules[at..].chars().next() {
                        Some(c) => format!("unexpected \"{c}\""),
                        None => "unexpected end".to_string(),
                    }));
                }
                let word = &rules[at..at + len];
                at += len;
                let multi = bytes.get(at) == Some(&b'+');
                if multi {
                    at += 1;
                }
                if !selector.narrow(word) {
                    found = false;
                    break;
                }
                if !multi {
                    break;
                }
            }
            if found {
                self.apply(&selector, op);
            } else {
                at = skip_to_separator(bytes, at);
            }
        }
        Ok(())
    }

    /// A `@` command: `@STRENGTH` or `@SECLEVEL=n`; anything else fails the whole string.
    fn command(&mut self, word: &str) -> Result<(), RuleError> {
        if word == "STRENGTH" {
            self.sort_by_strength();
            return Ok(());
        }
        let level = word
            .strip_prefix("SECLEVEL=")
            .filter(|digit| digit.len() == 1)
            .and_then(|digit| digit.parse::<u8>().ok())
            .filter(|level| *level <= MAX_SECURITY_LEVEL);
        match level {
            Some(level) => {
                self.security_level = level;
                Ok(())
            }
            None => Err(RuleError::Invalid(format!("unknown command \"@{word}\""))),
        }
    }
}

impl Selector {
    /// Adds one `+`-joined word to the selection, as OpenSSL intersects masks family by
    /// family; false when the word is unknown or the intersection is empty, and the rule is
    /// then ignored.
    fn narrow(&mut self, word: &str) -> bool {
        let (masks, cipher) = match CIPHERS.iter().position(|c| c.name == word) {
            Some(index) => (CIPHERS[index].masks, Some(index)),
            None => match ALIASES.iter().find(|(name, _)| *name == word) {
                Some((_, masks)) => (*masks, None),
                None => return false,
            },
        };
        let own = &mut self.masks;
        let families = [
            (&mut own.mkey, masks.mkey),
            (&mut own.auth, masks.auth),
            (&mut own.enc, masks.enc),
            (&mut own.mac, masks.mac),
        ];
        for (own, theirs) in families {
            if theirs == 0 {
                continue;
            }
            *own = if *own == 0 { theirs } else { *own & theirs };
            if *own == 0 {
                return false;
            }
        }
        for family in [S_STRONG_MASK, S_NOT_DEFAULT] {
            let theirs = masks.strength & family;
            if theirs == 0 {
                continue;
            }
            if own.strength & family == 0 {
                // OpenSSL assigns here rather than merging, so the first word of one strength
                // family drops what a word of the other family had set.
                own.strength = theirs;
            } else {
                own.strength &= theirs | !family;
                if own.strength & family == 0 {
                    return false;
                }
            }
        }
        match cipher {
            // An explicit cipher is matched by identity; its version is no part of the pattern.
            Some(index) => self.cipher = Some(index),
            None if masks.min_tls != 0 => {
                if own.min_tls != 0 && own.min_tls != masks.min_tls {
                    return false;
                }
                own.min_tls = masks.min_tls;
            }
            None => {}
        }
        true
    }
}

fn is_separator(byte: u8) -> bool {
    matches!(byte, b':' | b' ' | b';' | b',')
}

/// The length of the rule word starting at `at`: the characters OpenSSL allows in names.
fn word_at(bytes: &[u8], at: usize) -> usize {
    bytes[at..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'='))
        .count()
}

fn skip_to_separator(bytes: &[u8], at: usize) -> usize {
    at + bytes[at..]
        .iter()
        .take_while(|b| !is_separator(**b))
        .count()
}

/// The OpenSSL name of a suite, for `$ssl_cipher`: "ECDHE-ECDSA-AES256-GCM-SHA384",
/// "TLS_AES_256_GCM_SHA384", ... A suite the provider does not implement has its IANA name.
pub fn openssl_name(suite: CipherSuite) -> &'static str {
    if let Some(cipher) = CIPHERS.iter().find(|c| c.suite.suite() == suite) {
        return cipher.name;
    }
    // OpenSSL calls TLS 1.3 suites by their IANA names, which rustls prefixes with TLS13_.
    match suite {
        CipherSuite::TLS13_AES_128_GCM_SHA256 => "TLS_AES_128_GCM_SHA256",
        CipherSuite::TLS13_AES_256_GCM_SHA384 => "TLS_AES_256_GCM_SHA384",
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => "TLS_CHACHA20_POLY1305_SHA256",
        CipherSuite::TLS13_AES_128_CCM_SHA256 => "TLS_AES_128_CCM_SHA256",
        CipherSuite::TLS13_AES_128_CCM_8_SHA256 => "TLS_AES_128_CCM_8_SHA256",
        other => other.as_str().unwrap_or(""),
    }
}

/// The protocol versions `ssl_protocols` selects.
#[derive(Debug, Clone)]
pub struct ProtocolChoice {
    /// The versions rustls offers, newest first.
    pub versions: Vec<&'static SupportedProtocolVersion>,
    /// The named versions rustls does not implement, in the order named, for a warning.
    pub not_offered: Vec<String>,
}

/// The values nginx's `ssl_protocols` accepts that rustls does not implement.
const LEGACY_PROTOCOLS: [&str; 4] = ["SSLv2", "SSLv3", "TLSv1", "TLSv1.1"];

/// `ssl_protocols TLSv1 TLSv1.1 TLSv1.2 TLSv1.3` (SSLv2/SSLv3 too): the versions rustls
/// offers, and the named ones it does not (for a warning). None offered → error.
pub fn protocol_versions(names: &[&str]) -> Result<ProtocolChoice, CipherError> {
    let mut tls12 = false;
    let mut tls13 = false;
    let mut not_offered = Vec::new();
    for name in names {
        match *name {
            "TLSv1.2" => tls12 = true,
            "TLSv1.3" => tls13 = true,
            legacy if LEGACY_PROTOCOLS.contains(&legacy) => {
                if !not_offered.iter().any(|n| n == legacy) {
                    not_offered.push(legacy.to_string());
                }
            }
            other => return Err(CipherError::new(format!("invalid value \"{other}\""))),
        }
    }
    let mut versions = Vec::new();
    if tls13 {
        versions.push(&rustls::version::TLS13);
    }
    if tls12 {
        versions.push(&rustls::version::TLS12);
    }
    if versions.is_empty() {
        return Err(CipherError::new(format!(
            "ssl_protocols \"{}\" names no protocol this server implements (TLSv1.2, TLSv1.3)",
            names.join(" ")
        )));
    }
    Ok(ProtocolChoice {
        versions,
        not_offered,
    })
}

/// Group names OpenSSL 3.0 accepts, spelled exactly as it does (it compares case-sensitively),
/// with the provider's group for each.
fn group_named(name: &str) -> Option<&'static dyn SupportedKxGroup> {
    use aws_lc_rs::kx_group;
    Some(match name {
        "x25519" | "X25519" => kx_group::X25519,
        "secp256r1" | "prime256v1" | "P-256" => kx_group::SECP256R1,
        "secp384r1" | "P-384" => kx_group::SECP384R1,
        // Post-quantum groups as OpenSSL 3.5 names them.
        "X25519MLKEM768" => kx_group::X25519MLKEM768,
        "SecP256r1MLKEM768" => kx_group::SECP256R1MLKEM768,
        "MLKEM768" => kx_group::MLKEM768,
        "MLKEM1024" => kx_group::MLKEM1024,
        _ => return None,
    })
}

/// Groups OpenSSL 3.0 knows that the provider does not implement, for a precise error.
const UNSUPPORTED_GROUPS: [&str; 12] = [
    "secp521r1",
    "P-521",
    "x448",
    "X448",
    "brainpoolP256r1",
    "brainpoolP384r1",
    "brainpoolP512r1",
    "ffdhe2048",
    "ffdhe3072",
    "ffdhe4096",
    "ffdhe6144",
    "ffdhe8192",
];

/// `ssl_ecdh_curve auto | name[:name...]` (prime256v1, secp384r1, X25519, ...; OpenSSL's
/// names and aliases such as P-256) → key-exchange groups of the provider; unknown or
/// unsupported names are an error naming them.
///
/// `auto` is OpenSSL 3.0's default list restricted to the provider: X25519, P-256, P-384.
pub fn kx_groups(spec: &str) -> Result<Vec<&'static dyn SupportedKxGroup>, CipherError> {
    use aws_lc_rs::kx_group;
    if spec == "auto" {
        return Ok(vec![
            kx_group::X25519,
            kx_group::SECP256R1,
            kx_group::SECP384R1,
        ]);
    }
    let fail = |why: String| CipherError::new(format!("ecdh curve list \"{spec}\": {why}"));
    let mut groups: Vec<&'static dyn SupportedKxGroup> = Vec::new();
    for name in spec.split(':').map(str::trim) {
        if name.is_empty() {
            return Err(fail("empty group name".to_string()));
        }
        let Some(group) = group_named(name) else {
            if UNSUPPORTED_GROUPS.contains(&name) {
                return Err(fail(format!("group \"{name}\" is not supported")));
            }
            return Err(fail(format!("unknown group \"{name}\"")));
        };
        if groups.iter().any(|g| g.name() == group.name()) {
            return Err(fail(format!("group \"{name}\" is listed twice")));
        }
        groups.push(group);
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(spec: &str) -> Vec<&'static str> {
        tls12_suites(spec)
            .map(|suites| suites.iter().map(|s| openssl_name(s.suite())).collect())
            .unwrap_or_default()
    }

    #[test]
    fn default_order_is_openssls() {
        assert_eq!(
            names("ALL"),
            [
                "ECDHE-ECDSA-AES256-GCM-SHA384",
                "ECDHE-RSA-AES256-GCM-SHA384",
                "ECDHE-ECDSA-CHACHA20-POLY1305",
                "ECDHE-RSA-CHACHA20-POLY1305",
                "ECDHE-ECDSA-AES128-GCM-SHA256",
                "ECDHE-RSA-AES128-GCM-SHA256",
            ]
        );
    }

    #[test]
    fn rules_move_and_remove() {
        assert_eq!(
            names("ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384"),
            [
                "ECDHE-RSA-AES128-GCM-SHA256",
                "ECDHE-ECDSA-AES256-GCM-SHA384"
            ]
        );
        assert_eq!(names("ECDHE+AESGCM:!aRSA:!AES256").len(), 1);
        assert_eq!(
            names("CHACHA20:AESGCM:+aRSA:-AES256")[..2],
            [
                "ECDHE-ECDSA-CHACHA20-POLY1305",
                "ECDHE-ECDSA-AES128-GCM-SHA256"
            ]
        );
    }

    #[test]
    fn bad_strings_fail_like_openssl() {
        assert!(tls12_suites("FOO").is_err());
        assert!(tls12_suites("HIGH+FIPS").is_err());
        assert!(tls12_suites("ECDHE:@FOO").is_err());
        assert!(tls12_suites("ECDHE#").is_err());
        assert!(tls12_suites("ECDHE:@SECLEVEL=6").is_err());
        assert_eq!(names("FOO:ECDHE-RSA-AES128-GCM-SHA256").len(), 1);
    }

    #[test]
    fn any_input_is_an_answer_not_a_panic() {
        const PIECES: [&str; 14] = [
            "ECDHE",
            "+",
            "-",
            "!",
            "@",
            ":",
            ",",
            " ",
            "“",
            "é",
            "STRENGTH",
            "SECLEVEL=",
            "5",
            "#",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..2000 {
            let mut spec = String::new();
            for _ in 0..8 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                spec.push_str(PIECES[(state % PIECES.len() as u64) as usize]);
            }
            let _ = tls12_suites(&spec);
            let _ = kx_groups(&spec);
        }
    }

    #[test]
    fn protocols() {
        let choice = protocol_versions(&["TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"]);
        let choice = choice.expect("modern versions named");
        assert_eq!(choice.versions.len(), 2);
        assert_eq!(choice.not_offered, ["TLSv1", "TLSv1.1"]);
        assert!(protocol_versions(&["TLSv1", "SSLv3"]).is_err());
        assert!(protocol_versions(&["TLSv1.4"]).is_err());
    }

    #[test]
    fn groups() {
        let groups = kx_groups("prime256v1:X25519: P-384").expect("known groups");
        let names: Vec<_> = groups.iter().map(|g| g.name()).collect();
        assert_eq!(
            names,
            [
                rustls::NamedGroup::secp256r1,
                rustls::NamedGroup::X25519,
                rustls::NamedGroup::secp384r1
            ]
        );
        assert!(kx_groups("p-256").is_err());
        assert!(kx_groups("X25519:X25519").is_err());
        assert!(kx_groups("X25519::P-256").is_err());
        assert!(kx_groups("X448")
            .unwrap_err()
            .to_string()
            .contains("\"X448\" is not supported"));
    }
}
