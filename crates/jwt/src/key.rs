//! Keys: the content of an `auth_jwt_key_file` (a JWK set or a single JWK, RFC 7517) parsed
//! once into keys that verify without further parsing.
//!
//! Each JWK becomes one verifier per algorithm it may be used with: the JWK's `alg` alone when
//! it has one, else every algorithm of its key type. An algorithm therefore only ever meets a
//! key of its own type: an RSA modulus is never used as an HMAC secret.
//!
//! Policy, where RFC 7517 and NGINX Plus leave room:
//! - a JWK whose `use` is not `sig` (an encryption key published beside signing keys) is left
//!   out of the set rather than refused, so a provider's whole JWKS can be used as is;
//! - an unknown `kty`, `crv` or `alg` is an error naming it, so a typo does not silently
//!   leave a location without keys;
//! - RSA keys must have 2048 to 8192 bits: RFC 7518 §3.3 requires 2048 for RS* and PS*, and
//!   NGINX Plus documents no smaller limit of its own to stay compatible with;
//! - private members (`d`, `p`, ...) are ignored: only the public half is needed.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_lc_rs::hmac;
use aws_lc_rs::signature::{self, ParsedPublicKey, RsaPublicKeyComponents};

use crate::base64url;
use crate::json::{Json, JsonError};

/// Smallest RSA modulus accepted, in bits (RFC 7518 §3.3).
pub const MIN_RSA_BITS: usize = 2048;
/// Largest RSA modulus accepted, in bits: aws-lc-rs verifies up to 8192.
pub const MAX_RSA_BITS: usize = 8192;

/// A JWS algorithm (RFC 7518 §3.1, RFC 8037 §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    HS256,
    HS384,
    HS512,
    RS256,
    RS384,
    RS512,
    PS256,
    PS384,
    PS512,
    ES256,
    ES384,
    ES512,
    EdDSA,
}

impl Algorithm {
    const ALL: [Algorithm; 13] = [
        Algorithm::HS256,
        Algorithm::HS384,
        Algorithm::HS512,
        Algorithm::RS256,
        Algorithm::RS384,
        Algorithm::RS512,
        Algorithm::PS256,
        Algorithm::PS384,
        Algorithm::PS512,
        Algorithm::ES256,
        Algorithm::ES384,
        Algorithm::ES512,
        Algorithm::EdDSA,
    ];

    /// The algorithm named `name` in a JOSE header or a JWK (case-sensitive, as in JOSE).
    pub fn from_name(name: &str) -> Option<Algorithm> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The algorithm's JOSE name.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::HS256 => "HS256",
            Algorithm::HS384 => "HS384",
            Algorithm::HS512 => "HS512",
            Algorithm::RS256 => "RS256",
            Algorithm::RS384 => "RS384",
            Algorithm::RS512 => "RS512",
            Algorithm::PS256 => "PS256",
            Algorithm::PS384 => "PS384",
            Algorithm::PS512 => "PS512",
            Algorithm::ES256 => "ES256",
            Algorithm::ES384 => "ES384",
            Algorithm::ES512 => "ES512",
            Algorithm::EdDSA => "EdDSA",
        }
    }

    fn key_type(self) -> KeyType {
        match self {
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => KeyType::Oct,
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512 => KeyType::Rsa,
            Algorithm::ES256 | Algorithm::ES384 | Algorithm::ES512 => KeyType::Ec,
            Algorithm::EdDSA => KeyType::Okp,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyType {
    Oct,
    Rsa,
    Ec,
    Okp,
}

impl KeyType {
    fn name(self) -> &'static str {
        match self {
            KeyType::Oct => "oct",
            KeyType::Rsa => "RSA",
            KeyType::Ec => "EC",
            KeyType::Okp => "OKP",
        }
    }
}

/// Why a key file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    #[error("invalid JSON in JWK: {0}")]
    Json(JsonError),
    #[error("JWK is not a JSON object")]
    NotObject,
    #[error("JWK set member \"keys\" is not an array")]
    KeysNotArray,
    #[error("key {index}: {problem}")]
    Key { index: usize, problem: KeyProblem },
}

/// What is wrong with one JWK of a set.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyProblem {
    #[error("JWK is not a JSON object")]
    NotObject,
    #[error("missing member \"{0}\"")]
    Missing(&'static str),
    #[error("member \"{0}\" is not a string")]
    NotString(&'static str),
    #[error("invalid base64url in member \"{0}\"")]
    Base64(&'static str),
    #[error("unsupported kty \"{0}\"")]
    UnsupportedKty(String),
    #[error("unsupported crv \"{0}\"")]
    UnsupportedCrv(String),
    #[error("unsupported alg \"{0}\"")]
    UnsupportedAlg(String),
    #[error("alg \"{alg}\" does not fit kty \"{kty}\"")]
    AlgMismatch { alg: Algorithm, kty: &'static str },
    #[error("empty secret in member \"k\"")]
    EmptySecret,
    #[error("RSA key of {0} bits, outside {MIN_RSA_BITS}..{MAX_RSA_BITS}")]
    RsaSize(usize),
    #[error("member \"{member}\" must be {expected} bytes for crv \"{crv}\"")]
    CoordinateLength {
        member: &'static str,
        expected: usize,
        crv: &'static str,
    },
    #[error("invalid public key: {0}")]
    Rejected(&'static str),
}

/// The ready form of a key for one algorithm.
enum Verifier {
    /// Boxed: an HMAC key holds its precomputed state, twenty times a public key's handle.
    Hmac(Box<hmac::Key>),
    Public(ParsedPublicKey),
}

/// One JWK, ready to verify.
struct Jwk {
    kid: Option<Box<str>>,
    verifiers: Vec<(Algorithm, Verifier)>,
}

/// Source of [`KeySet::id`]: every set built gets a new one.
static NEXT_KEY_SET_ID: AtomicU64 = AtomicU64::new(1);

/// The keys one location verifies with: all its `auth_jwt_key_file`s, combined.
pub struct KeySet {
    keys: Vec<Jwk>,
    id: u64,
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeySet")
            .field("id", &self.id)
            .field(
                "kids",
                &self.keys.iter().map(|k| &k.kid).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for KeySet {
    fn default() -> Self {
        KeySet {
            keys: Vec::new(),
            id: NEXT_KEY_SET_ID.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl KeySet {
    /// Parses a key file's content: `{"keys":[...]}` or a single JWK.
    pub fn parse(content: &[u8]) -> Result<KeySet, KeyError> {
        let doc = Json::parse(content).map_err(KeyError::Json)?;
        if !matches!(doc, Json::Object(_)) {
            return Err(KeyError::NotObject);
        }
        let single;
        let jwks: &[Json] = match doc.get("keys") {
            Some(Json::Array(keys)) => keys,
            Some(_) => return Err(KeyError::KeysNotArray),
            None => {
                single = [doc];
                &single
            }
        };
        let mut set = KeySet::default();
        for (index, jwk) in jwks.iter().enumerate() {
            if let Some(key) = parse_jwk(jwk).map_err(|problem| KeyError::Key { index, problem })? {
                set.keys.push(key);
            }
        }
        Ok(set)
    }

    /// Adds the keys of `other` after this set's own (a further `auth_jwt_key_file`).
    pub fn extend(&mut self, other: KeySet) {
        self.keys.extend(other.keys);
        self.id = NEXT_KEY_SET_ID.fetch_add(1, Ordering::Relaxed);
    }

    /// How many keys the set holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// A number that no other set built in this process shares; caches use it to keep tokens
    /// verified with one set from being accepted for another.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Checks `signature` over `signing_input` with the keys that may verify `alg`: those with
    /// the token's `kid` when it has one, else every key. Reports the most telling failure.
    pub(crate) fn verify(
        &self,
        alg: Algorithm,
        kid: Option<&str>,
        signing_input: &[u8],
        signature: &[u8],
    ) -> Result<(), KeyMiss> {
        let mut kid_seen = false;
        let mut alg_seen = false;
        for key in &self.keys {
            if kid.is_some() && key.kid.as_deref() != kid {
                continue;
            }
            kid_seen = true;
            for (_, verifier) in key.verifiers.iter().filter(|(a, _)| *a == alg) {
                alg_seen = true;
                let ok = match verifier {
                    Verifier::Hmac(k) => hmac::verify(k, signing_input, signature).is_ok(),
                    Verifier::Public(k) => k.verify_sig(signing_input, signature).is_ok(),
                };
                if ok {
                    return Ok(());
                }
            }
        }
        Err(match (kid_seen, alg_seen) {
            (false, _) => KeyMiss::Kid,
            (true, false) => KeyMiss::Alg,
            (true, true) => KeyMiss::Signature,
        })
    }
}

/// Why no key verified a signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyMiss {
    /// No key has the token's `kid`.
    Kid,
    /// No key (with that `kid`) may be used with the token's `alg`.
    Alg,
    /// Keys fit, and the signature matched none.
    Signature,
}

/// Parses one JWK; `None` for a key not meant for signatures.
fn parse_jwk(jwk: &Json) -> Result<Option<Jwk>, KeyProblem> {
    if !matches!(jwk, Json::Object(_)) {
        return Err(KeyProblem::NotObject);
    }
    if let Some(key_use) = optional_str(jwk, "use")? {
        if key_use != "sig" {
            return Ok(None);
        }
    }
    let kid = optional_str(jwk, "kid")?.map(Box::from);
    let kty = match required_str(jwk, "kty")? {
        "oct" => KeyType::Oct,
        "RSA" => KeyType::Rsa,
        "EC" => KeyType::Ec,
        "OKP" => KeyType::Okp,
        other => return Err(KeyProblem::UnsupportedKty(other.to_owned())),
    };
    let declared = match optional_str(jwk, "alg")? {
        Some(name) => {
            let alg = Algorithm::from_name(name)
                .ok_or_else(|| KeyProblem::UnsupportedAlg(name.to_owned()))?;
            if alg.key_type() != kty {
                return Err(KeyProblem::AlgMismatch {
                    alg,
                    kty: kty.name(),
                });
            }
            Some(alg)
        }
        None => None,
    };
    let verifiers = match kty {
        KeyType::Oct => oct_verifiers(jwk, declared)?,
        KeyType::Rsa => rsa_verifiers(jwk, declared)?,
        KeyType::Ec => ec_verifiers(jwk, declared)?,
        KeyType::Okp => okp_verifiers(jwk, declared)?,
    };
    Ok(Some(Jwk { kid, verifiers }))
}

/// The algorithms a key serves: its declared one, else all of its family.
fn algorithms(declared: Option<Algorithm>, family: &[Algorithm]) -> Vec<Algorithm> {
    match declared {
        Some(alg) => vec![alg],
        None => family.to_vec(),
    }
}

fn oct_verifiers(
    jwk: &Json,
    declared: Option<Algorithm>,
) -> Result<Vec<(Algorithm, Verifier)>, KeyProblem> {
    let secret = required_base64(jwk, "k")?;
    if secret.is_empty() {
        return Err(KeyProblem::EmptySecret);
    }
    let family = [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512];
    Ok(algorithms(declared, &family)
        .into_iter()
        .map(|alg| {
            let hmac_alg = match alg {
                Algorithm::HS384 => hmac::HMAC_SHA384,
                Algorithm::HS512 => hmac::HMAC_SHA512,
                _ => hmac::HMAC_SHA256,
            };
            (
                alg,
                Verifier::Hmac(Box::new(hmac::Key::new(hmac_alg, &secret))),
            )
        })
        .collect())
}

fn rsa_verifiers(
    jwk: &Json,
    declared: Option<Algorithm>,
) -> Result<Vec<(Algorithm, Verifier)>, KeyProblem> {
    let n = required_base64(jwk, "n")?;
    let e = required_base64(jwk, "e")?;
    let n = strip_leading_zeros(&n);
    let e = strip_leading_zeros(&e);
    let bits = match n.first() {
        Some(&top) => n.len() * 8 - top.leading_zeros() as usize,
        None => 0,
    };
    if !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&bits) {
        return Err(KeyProblem::RsaSize(bits));
    }
    let components = RsaPublicKeyComponents { n, e };
    let family = [
        Algorithm::RS256,
        Algorithm::RS384,
        Algorithm::RS512,
        Algorithm::PS256,
        Algorithm::PS384,
        Algorithm::PS512,
    ];
    algorithms(declared, &family)
        .into_iter()
        .map(|alg| {
            let params = match alg {
                Algorithm::RS384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                Algorithm::RS512 => &signature::RSA_PKCS1_2048_8192_SHA512,
                Algorithm::PS256 => &signature::RSA_PSS_2048_8192_SHA256,
                Algorithm::PS384 => &signature::RSA_PSS_2048_8192_SHA384,
                Algorithm::PS512 => &signature::RSA_PSS_2048_8192_SHA512,
                _ => &signature::RSA_PKCS1_2048_8192_SHA256,
            };
            let key = components
                .to_parsed_public_key(params)
                .map_err(|e| KeyProblem::Rejected(e.description_()))?;
            Ok((alg, Verifier::Public(key)))
        })
        .collect()
}

fn ec_verifiers(
    jwk: &Json,
    declared: Option<Algorithm>,
) -> Result<Vec<(Algorithm, Verifier)>, KeyProblem> {
    let (crv, alg, size, verification): (_, _, _, &'static signature::EcdsaVerificationAlgorithm) =
        match required_str(jwk, "crv")? {
            "P-256" => (
                "P-256",
                Algorithm::ES256,
                32,
                &signature::ECDSA_P256_SHA256_FIXED,
            ),
            "P-384" => (
                "P-384",
                Algorithm::ES384,
                48,
                &signature::ECDSA_P384_SHA384_FIXED,
            ),
            "P-521" => (
                "P-521",
                Algorithm::ES512,
                66,
                &signature::ECDSA_P521_SHA512_FIXED,
            ),
            other => return Err(KeyProblem::UnsupportedCrv(other.to_owned())),
        };
    if let Some(declared) = declared {
        if declared != alg {
            return Err(KeyProblem::AlgMismatch {
                alg: declared,
                kty: "EC",
            });
        }
    }
    let mut point = Vec::with_capacity(1 + 2 * size);
    point.push(0x04);
    for member in ["x", "y"] {
        let coordinate = required_base64(jwk, member)?;
        if coordinate.len() != size {
            return Err(KeyProblem::CoordinateLength {
                member,
                expected: size,
                crv,
            });
        }
        point.extend_from_slice(&coordinate);
    }
    let key = ParsedPublicKey::new(verification, &point)
        .map_err(|e| KeyProblem::Rejected(e.description_()))?;
    Ok(vec![(alg, Verifier::Public(key))])
}

fn okp_verifiers(
    jwk: &Json,
    declared: Option<Algorithm>,
) -> Result<Vec<(Algorithm, Verifier)>, KeyProblem> {
    match required_str(jwk, "crv")? {
        "Ed25519" => {}
        other => return Err(KeyProblem::UnsupportedCrv(other.to_owned())),
    }
    if let Some(declared) = declared {
        if declared != Algorithm::EdDSA {
            return Err(KeyProblem::AlgMismatch {
                alg: declared,
                kty: "OKP",
            });
        }
    }
    let x = required_base64(jwk, "x")?;
    if x.len() != ED25519_KEY_LEN {
        return Err(KeyProblem::CoordinateLength {
            member: "x",
            expected: ED25519_KEY_LEN,
            crv: "Ed25519",
        });
    }
    let key = ParsedPublicKey::new(&signature::ED25519, &x)
        .map_err(|e| KeyProblem::Rejected(e.description_()))?;
    Ok(vec![(Algorithm::EdDSA, Verifier::Public(key))])
}

/// An Ed25519 public key's length (RFC 8032 §5.1.5).
const ED25519_KEY_LEN: usize = 32;

fn strip_leading_zeros(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    &bytes[start..]
}

fn optional_str<'a>(jwk: &'a Json, name: &'static str) -> Result<Option<&'a str>, KeyProblem> {
    match jwk.get(name) {
        None => Ok(None),
        Some(Json::String(s)) => Ok(Some(s)),
        Some(_) => Err(KeyProblem::NotString(name)),
    }
}

fn required_str<'a>(jwk: &'a Json, name: &'static str) -> Result<&'a str, KeyProblem> {
    optional_str(jwk, name)?.ok_or(KeyProblem::Missing(name))
}

fn required_base64(jwk: &Json, name: &'static str) -> Result<Vec<u8>, KeyProblem> {
    base64url::decode(required_str(jwk, name)?.as_bytes()).map_err(|_| KeyProblem::Base64(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7515 A.1's HMAC key.
    const OCT: &str = r#"{"kty":"oct","k":"AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow"}"#;

    #[test]
    fn single_jwk_and_set_both_load() {
        let single = KeySet::parse(OCT.as_bytes()).unwrap();
        assert_eq!(single.len(), 1);
        let set = KeySet::parse(format!(r#"{{"keys":[{OCT},{OCT}]}}"#).as_bytes()).unwrap();
        assert_eq!(set.len(), 2);
        assert_ne!(single.id(), set.id());
    }

    #[test]
    fn encryption_keys_are_left_out() {
        let set = KeySet::parse(
            br#"{"keys":[{"kty":"oct","k":"AQ","use":"enc"},{"kty":"oct","k":"AQ","use":"sig"}]}"#,
        )
        .unwrap();
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn errors_name_the_problem() {
        let cases: [(&[u8], &str); 9] = [
            (br#"{"keys":[{"k":"AQ"}]}"#, "key 0: missing member \"kty\""),
            (
                br#"{"kty":"oct","k":"A+"}"#,
                "key 0: invalid base64url in member \"k\"",
            ),
            (
                br#"{"kty":"oct","k":""}"#,
                "key 0: empty secret in member \"k\"",
            ),
            (br#"{"kty":"XYZ"}"#, "key 0: unsupported kty \"XYZ\""),
            (
                br#"{"kty":"EC","crv":"P-192","x":"AQ","y":"AQ"}"#,
                "key 0: unsupported crv \"P-192\"",
            ),
            (
                br#"{"kty":"oct","k":"AQ","alg":"RS256"}"#,
                "key 0: alg \"RS256\" does not fit kty \"oct\"",
            ),
            (
                br#"{"kty":"RSA","n":"AQAB","e":"AQAB"}"#,
                "key 0: RSA key of 17 bits, outside 2048..8192",
            ),
            (br#"{"keys":{}}"#, "JWK set member \"keys\" is not an array"),
            (b"[]", "JWK is not a JSON object"),
        ];
        for (input, expected) in cases {
            let error = KeySet::parse(input).unwrap_err();
            assert_eq!(error.to_string(), expected);
        }
    }

    #[test]
    fn ec_coordinates_must_be_full_length_and_on_the_curve() {
        let short = br#"{"kty":"EC","crv":"P-256","x":"AQ","y":"AQ"}"#;
        assert!(KeySet::parse(short)
            .unwrap_err()
            .to_string()
            .contains("must be 32 bytes"));
        let zero = "A".repeat(43);
        let off_curve = format!(r#"{{"kty":"EC","crv":"P-256","x":"{zero}","y":"{zero}"}}"#);
        assert!(KeySet::parse(off_curve.as_bytes())
            .unwrap_err()
            .to_string()
            .contains("invalid public key"));
    }

    #[test]
    fn extend_combines_and_renumbers() {
        let mut set = KeySet::parse(OCT.as_bytes()).unwrap();
        let id = set.id();
        set.extend(KeySet::parse(OCT.as_bytes()).unwrap());
        assert_eq!(set.len(), 2);
        assert_ne!(set.id(), id);
    }
}
