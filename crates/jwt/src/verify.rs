//! JWS compact serialization verification (RFC 7515 §5.2) with JWT time claims (RFC 7519).
//!
//! The order of work keeps unauthenticated input cheap: the length is checked before
//! anything else, the header and signature are decoded into stack buffers, the signature is
//! verified, and only then is the payload decoded and parsed.

use std::borrow::Cow;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::base64url::{self, Base64Error};
use crate::json::{Json, JsonError};
use crate::key::{Algorithm, KeyMiss, KeySet};

/// Tokens longer than this are refused before any work: it bounds the stack buffers below
/// and the cost of a request that carries garbage.
pub const MAX_TOKEN_LEN: usize = 8192;

/// The largest signature: an RSA-8192 one (ES512's is 132 bytes, HS512's 64).
const MAX_SIGNATURE_LEN: usize = 1024;

/// The largest decoded header a token within [`MAX_TOKEN_LEN`] can carry.
const MAX_HEADER_LEN: usize = MAX_TOKEN_LEN / 4 * 3;

/// Which part of a token an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Header,
    Payload,
    Signature,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Header => "header",
            Part::Payload => "payload",
            Part::Signature => "signature",
        })
    }
}

/// Why a token was refused; the text is meant for the error log.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum JwtError {
    #[error("token of {0} bytes is longer than {MAX_TOKEN_LEN}")]
    TooLong(usize),
    #[error("token has {0} parts, a signed JWT has 3")]
    Parts(usize),
    #[error("invalid base64url in the {0}")]
    Base64(Part),
    #[error("invalid JSON in the {0}: {1}")]
    Json(Part, JsonError),
    #[error("the {0} is not a JSON object")]
    NotObject(Part),
    #[error("header has no \"alg\"")]
    MissingAlg,
    #[error("header member \"{0}\" has the wrong type")]
    HeaderMember(&'static str),
    #[error("unsigned token (alg \"none\")")]
    AlgNone,
    #[error("unsupported alg \"{0}\"")]
    UnsupportedAlg(String),
    #[error("empty \"crit\" header member")]
    EmptyCrit,
    #[error("unsupported critical header member \"{0}\"")]
    UnsupportedCrit(String),
    #[error("no key with kid \"{0}\"")]
    UnknownKid(String),
    #[error("no key for alg {0}")]
    NoKey(Algorithm),
    #[error("signature of the wrong length for {0}")]
    SignatureLength(Algorithm),
    #[error("signature verification failed")]
    Signature,
    #[error("claim \"{0}\" is not a number")]
    ClaimType(&'static str),
    #[error("token expired")]
    Expired,
    #[error("token not yet valid")]
    NotYetValid,
}

/// A token whose signature and time claims were accepted.
#[derive(Debug)]
pub struct Verified {
    alg: Algorithm,
    header: Json,
    payload: Json,
    payload_text: Box<str>,
    exp: Option<f64>,
    nbf: Option<f64>,
}

/// A claim rendered as NGINX Plus renders `$jwt_claim_*`: a string as its text, a number as
/// written, `true`/`false`, an array as its elements joined with `,`, an object as compact
/// JSON, and `null` as the empty string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimValue<'a>(Cow<'a, str>);

impl<'a> ClaimValue<'a> {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0.into_owned()
    }

    fn render(value: &'a Json) -> ClaimValue<'a> {
        ClaimValue(match value {
            Json::String(s) | Json::Number(s) => Cow::Borrowed(s),
            Json::Bool(true) => Cow::Borrowed("true"),
            Json::Bool(false) => Cow::Borrowed("false"),
            Json::Null => Cow::Borrowed(""),
            Json::Array(items) => {
                let mut out = String::new();
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    match item {
                        Json::Array(_) | Json::Object(_) => item.write_compact(&mut out),
                        scalar => out.push_str(ClaimValue::render(scalar).as_str()),
                    }
                }
                Cow::Owned(out)
            }
            Json::Object(_) => {
                let mut out = String::new();
                value.write_compact(&mut out);
                Cow::Owned(out)
            }
        })
    }
}

impl fmt::Display for ClaimValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Verified {
    /// The algorithm the signature was verified with.
    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// The JOSE header, parsed.
    pub fn header(&self) -> &Json {
        &self.header
    }

    /// The claims set, parsed.
    pub fn payload(&self) -> &Json {
        &self.payload
    }

    /// The claims set as the token carried it (`$jwt_payload`).
    pub fn payload_json(&self) -> &str {
        &self.payload_text
    }

    /// The claim at `path` in the payload, nested names in order (`auth_jwt_claim_set`).
    pub fn claim(&self, path: &[&str]) -> Option<ClaimValue<'_>> {
        lookup(&self.payload, path)
    }

    /// The header member at `path` (`$jwt_header_*`, `auth_jwt_header_set`).
    pub fn header_claim(&self, path: &[&str]) -> Option<ClaimValue<'_>> {
        lookup(&self.header, path)
    }

    /// `exp` in seconds since the epoch.
    pub fn exp(&self) -> Option<f64> {
        self.exp
    }

    /// `nbf` in seconds since the epoch.
    pub fn nbf(&self) -> Option<f64> {
        self.nbf
    }

    /// Checks `exp` and `nbf` against `now`, each side widened by `leeway` (RFC 7519 §4.1.4,
    /// §4.1.5: valid from `nbf` inclusive until `exp` exclusive).
    pub fn check_time(&self, now: SystemTime, leeway: Duration) -> Result<(), JwtError> {
        check_time(self.exp, self.nbf, now, leeway)
    }
}

#[cfg(test)]
impl Verified {
    /// A verification result made without a token, for the cache's tests.
    pub(crate) fn for_tests(payload: Json, exp: Option<f64>) -> Verified {
        Verified {
            alg: Algorithm::HS256,
            header: Json::Object(Vec::new()),
            payload,
            payload_text: "{}".into(),
            exp,
            nbf: None,
        }
    }
}

fn lookup<'a>(root: &'a Json, path: &[&str]) -> Option<ClaimValue<'a>> {
    if path.is_empty() {
        return None;
    }
    let mut value = root;
    for name in path {
        value = value.get(name)?;
    }
    Some(ClaimValue::render(value))
}

fn check_time(
    exp: Option<f64>,
    nbf: Option<f64>,
    now: SystemTime,
    leeway: Duration,
) -> Result<(), JwtError> {
    let now = match now.duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    };
    let leeway = leeway.as_secs_f64();
    if let Some(exp) = exp {
        if now >= exp + leeway {
            return Err(JwtError::Expired);
        }
    }
    if let Some(nbf) = nbf {
        if now + leeway < nbf {
            return Err(JwtError::NotYetValid);
        }
    }
    Ok(())
}

/// Verifies a compact JWS `token` with `keys` and checks its `exp` and `nbf` at `now`.
///
/// The key is chosen by the header's `kid` when it has one (only keys with that `kid` are
/// tried); a token without `kid` is tried against every key that may verify its `alg`, in
/// key file order. Only keys of the `alg`'s type are ever used, and a JWK with an `alg` of
/// its own only for that one.
pub fn verify(
    token: &[u8],
    keys: &KeySet,
    now: SystemTime,
    leeway: Duration,
) -> Result<Verified, JwtError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(JwtError::TooLong(token.len()));
    }
    let Segments {
        header: header_b64,
        payload: payload_b64,
        signature: signature_b64,
    } = split(token)?;

    let mut header_buf = [0u8; MAX_HEADER_LEN];
    let header_len = decode(header_b64, &mut header_buf, Part::Header)?;
    let header = parse_object(&header_buf[..header_len], Part::Header)?;
    let alg = header_alg(&header)?;
    let kid = match header.get("kid") {
        None => None,
        Some(Json::String(kid)) => Some(kid.as_ref()),
        Some(_) => return Err(JwtError::HeaderMember("kid")),
    };
    if let Some(typ) = header.get("typ") {
        if typ.as_str().is_none() {
            return Err(JwtError::HeaderMember("typ"));
        }
    }
    check_crit(&header)?;

    if base64url::decoded_len(signature_b64.len()) > MAX_SIGNATURE_LEN {
        return Err(JwtError::SignatureLength(alg));
    }
    let mut signature_buf = [0u8; MAX_SIGNATURE_LEN];
    let signature_len = decode(signature_b64, &mut signature_buf, Part::Signature)?;
    let signature = &signature_buf[..signature_len];
    if let Some(expected) = fixed_signature_len(alg) {
        if signature.len() != expected {
            return Err(JwtError::SignatureLength(alg));
        }
    }
    let signing_input = &token[..header_b64.len() + 1 + payload_b64.len()];
    keys.verify(alg, kid, signing_input, signature)
        .map_err(|miss| match miss {
            KeyMiss::Kid => JwtError::UnknownKid(kid.unwrap_or_default().to_owned()),
            KeyMiss::Alg => JwtError::NoKey(alg),
            KeyMiss::Signature => JwtError::Signature,
        })?;

    let payload_bytes =
        base64url::decode(payload_b64).map_err(|_: Base64Error| JwtError::Base64(Part::Payload))?;
    let payload = parse_object(&payload_bytes, Part::Payload)?;
    let exp = numeric_date(&payload, "exp")?;
    let nbf = numeric_date(&payload, "nbf")?;
    check_time(exp, nbf, now, leeway)?;
    let payload_text = String::from_utf8(payload_bytes)
        .map_err(|_| JwtError::Json(Part::Payload, invalid_utf8()))?
        .into_boxed_str();
    Ok(Verified {
        alg,
        header,
        payload,
        payload_text,
        exp,
        nbf,
    })
}

/// The payload parsed as JSON, so it is UTF-8; this error cannot be reached but is not a
/// reason to panic.
fn invalid_utf8() -> JsonError {
    JsonError {
        reason: "invalid UTF-8",
        offset: 0,
    }
}

/// The three base64url parts of a compact JWS.
#[derive(Debug)]
struct Segments<'a> {
    header: &'a [u8],
    payload: &'a [u8],
    signature: &'a [u8],
}

fn split(token: &[u8]) -> Result<Segments<'_>, JwtError> {
    let mut parts = token.split(|&b| b == b'.');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(header), Some(payload), Some(signature), None) => Ok(Segments {
            header,
            payload,
            signature,
        }),
        _ => Err(JwtError::Parts(token.split(|&b| b == b'.').count())),
    }
}

fn decode(input: &[u8], out: &mut [u8], part: Part) -> Result<usize, JwtError> {
    base64url::decode_into(input, out).map_err(|_| JwtError::Base64(part))
}

fn parse_object(bytes: &[u8], part: Part) -> Result<Json, JwtError> {
    let value = Json::parse(bytes).map_err(|e| JwtError::Json(part, e))?;
    match value {
        Json::Object(_) => Ok(value),
        _ => Err(JwtError::NotObject(part)),
    }
}

fn header_alg(header: &Json) -> Result<Algorithm, JwtError> {
    let name = match header.get("alg") {
        None => return Err(JwtError::MissingAlg),
        Some(Json::String(name)) => name.as_ref(),
        Some(_) => return Err(JwtError::HeaderMember("alg")),
    };
    if name == "none" {
        return Err(JwtError::AlgNone);
    }
    Algorithm::from_name(name).ok_or_else(|| JwtError::UnsupportedAlg(name.to_owned()))
}

/// RFC 7515 §4.1.11: every name in `crit` must be understood. No JWS extension is, so any
/// name refuses the token; an empty list or one that is not of strings is malformed.
fn check_crit(header: &Json) -> Result<(), JwtError> {
    let names = match header.get("crit") {
        None => return Ok(()),
        Some(Json::Array(names)) => names,
        Some(_) => return Err(JwtError::HeaderMember("crit")),
    };
    match names.first() {
        None => Err(JwtError::EmptyCrit),
        Some(Json::String(name)) => Err(JwtError::UnsupportedCrit(name.to_string())),
        Some(_) => Err(JwtError::HeaderMember("crit")),
    }
}

/// The exact signature length of algorithms whose signatures have one (RFC 7518 §3.4 for
/// ECDSA's `r || s`, RFC 8037 §3.1 for Ed25519).
fn fixed_signature_len(alg: Algorithm) -> Option<usize> {
    match alg {
        Algorithm::ES256 => Some(64),
        Algorithm::ES384 => Some(96),
        Algorithm::ES512 => Some(132),
        Algorithm::EdDSA => Some(64),
        _ => None,
    }
}

/// A NumericDate claim (RFC 7519 §2): a JSON number, integer or not.
fn numeric_date(payload: &Json, name: &'static str) -> Result<Option<f64>, JwtError> {
    match payload.get(name) {
        None => Ok(None),
        Some(Json::Number(text)) => text
            .parse::<f64>()
            .map(Some)
            .map_err(|_| JwtError::ClaimType(name)),
        Some(_) => Err(JwtError::ClaimType(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: f64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs_f64(secs)
    }

    #[test]
    fn time_window_is_nbf_inclusive_exp_exclusive_widened_by_leeway() {
        let none = Duration::ZERO;
        let ten = Duration::from_secs(10);
        assert_eq!(check_time(Some(100.0), None, at(99.5), none), Ok(()));
        assert_eq!(
            check_time(Some(100.0), None, at(100.0), none),
            Err(JwtError::Expired)
        );
        assert_eq!(check_time(Some(100.0), None, at(109.0), ten), Ok(()));
        assert_eq!(check_time(None, Some(100.0), at(100.0), none), Ok(()));
        assert_eq!(
            check_time(None, Some(100.5), at(100.0), none),
            Err(JwtError::NotYetValid)
        );
        assert_eq!(check_time(None, Some(105.0), at(100.0), ten), Ok(()));
    }

    #[test]
    fn claims_render_as_nginx_plus_variables() {
        let payload = Json::parse(
            br#"{"s":"x y","n":1.50e1,"b":true,"z":null,"a":["r","w",3],"o":{"k":["v"]},"aa":[[1],{"p":"q"}]}"#,
        )
        .unwrap();
        let render = |path: &[&str]| lookup(&payload, path).map(ClaimValue::into_string);
        assert_eq!(render(&["s"]).as_deref(), Some("x y"));
        assert_eq!(render(&["n"]).as_deref(), Some("1.50e1"));
        assert_eq!(render(&["b"]).as_deref(), Some("true"));
        assert_eq!(render(&["z"]).as_deref(), Some(""));
        assert_eq!(render(&["a"]).as_deref(), Some("r,w,3"));
        assert_eq!(render(&["o"]).as_deref(), Some(r#"{"k":["v"]}"#));
        assert_eq!(render(&["o", "k"]).as_deref(), Some("v"));
        assert_eq!(render(&["aa"]).as_deref(), Some(r#"[1],{"p":"q"}"#));
        assert_eq!(render(&["s", "t"]), None);
        assert_eq!(render(&["missing"]), None);
        assert_eq!(render(&[]), None);
    }

    #[test]
    fn split_counts_parts() {
        assert!(split(b"a.b.c").is_ok());
        assert_eq!(split(b"a.b").unwrap_err(), JwtError::Parts(2));
        assert_eq!(split(b"a.b.c.d.e").unwrap_err(), JwtError::Parts(5));
        assert_eq!(split(b"").unwrap_err(), JwtError::Parts(1));
    }
}
