//! Tokens made by PyJWT and Python's hmac (fixtures/make_tokens.py), verified with the keys
//! the same script wrote: every algorithm, and the attacks a verifier must refuse.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use portcullis_jwt::{verify, Algorithm, Json, JwtError, KeySet, Part, VerifiedCache};

const KEYS: &str = include_str!("fixtures/keys.jwk");
const TOKENS: &str = include_str!("fixtures/tokens.json");

struct Fixtures {
    keys: KeySet,
    now: SystemTime,
    tokens: Json,
}

fn fixtures() -> Fixtures {
    let doc = Json::parse(TOKENS.as_bytes()).expect("tokens.json parses");
    let now = match doc.get("now") {
        Some(Json::Number(n)) => n.parse::<u64>().expect("now is an integer"),
        _ => panic!("tokens.json has no \"now\""),
    };
    Fixtures {
        keys: KeySet::parse(KEYS.as_bytes()).expect("keys.jwk loads"),
        now: UNIX_EPOCH + Duration::from_secs(now),
        tokens: doc.get("tokens").cloned().expect("tokens.json has tokens"),
    }
}

impl Fixtures {
    fn token(&self, name: &str) -> &[u8] {
        self.tokens
            .get(name)
            .and_then(Json::as_str)
            .unwrap_or_else(|| panic!("no fixture token {name:?}"))
            .as_bytes()
    }

    fn check(&self, name: &str) -> Result<portcullis_jwt::Verified, JwtError> {
        verify(self.token(name), &self.keys, self.now, Duration::ZERO)
    }
}

#[test]
fn every_algorithm_verifies() {
    let f = fixtures();
    for (name, alg) in [
        ("HS256", Algorithm::HS256),
        ("HS384", Algorithm::HS384),
        ("HS512", Algorithm::HS512),
        ("RS256", Algorithm::RS256),
        ("RS384", Algorithm::RS384),
        ("RS512", Algorithm::RS512),
        ("PS256", Algorithm::PS256),
        ("PS384", Algorithm::PS384),
        ("PS512", Algorithm::PS512),
        ("ES256", Algorithm::ES256),
        ("ES384", Algorithm::ES384),
        ("ES512", Algorithm::ES512),
        ("EdDSA", Algorithm::EdDSA),
    ] {
        let verified = f.check(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(verified.algorithm(), alg);
        assert_eq!(verified.claim(&["sub"]).unwrap().as_str(), "alice");
    }
}

#[test]
fn token_without_kid_tries_every_fitting_key() {
    let f = fixtures();
    assert!(f.check("HS256 without kid").is_ok());
    assert!(f.check("RS256 without kid").is_ok());
}

#[test]
fn claims_render_as_nginx_plus_variables() {
    let f = fixtures();
    let v = f.check("HS256").unwrap();
    assert_eq!(
        v.claim(&["info", "e-mail"]).unwrap().as_str(),
        "alice@example.com"
    );
    assert_eq!(v.claim(&["info", "job title"]).unwrap().as_str(), "tester");
    assert_eq!(v.claim(&["groups"]).unwrap().as_str(), "admin,dev");
    assert_eq!(v.claim(&["ratio"]).unwrap().as_str(), "1.5");
    assert_eq!(
        v.claim(&["info"]).unwrap().as_str(),
        r#"{"e-mail":"alice@example.com","job title":"tester"}"#
    );
    assert_eq!(v.claim(&["missing"]), None);
    assert_eq!(v.header_claim(&["kid"]).unwrap().as_str(), "hs");
    assert_eq!(v.header_claim(&["alg"]).unwrap().as_str(), "HS256");
    assert!(v.payload_json().starts_with(r#"{"sub":"alice","#));
    let exp = v.exp().unwrap();
    let nbf = v.nbf().unwrap();
    assert_eq!(exp - nbf, 3660.0);
}

#[test]
fn time_claims_with_and_without_leeway() {
    let f = fixtures();
    assert_eq!(f.check("expired").unwrap_err(), JwtError::Expired);
    let leeway = Duration::from_secs(60);
    assert!(verify(f.token("expired"), &f.keys, f.now, leeway).is_ok());
    assert_eq!(f.check("not yet valid").unwrap_err(), JwtError::NotYetValid);
    assert!(verify(f.token("not yet valid"), &f.keys, f.now, leeway).is_ok());
    assert_eq!(
        verify(
            f.token("not yet valid"),
            &f.keys,
            f.now,
            Duration::from_secs(29)
        )
        .unwrap_err(),
        JwtError::NotYetValid
    );
    assert!(f.check("fractional exp").is_ok());
    let later = f.now + Duration::from_millis(600);
    assert_eq!(
        verify(f.token("fractional exp"), &f.keys, later, Duration::ZERO).unwrap_err(),
        JwtError::Expired
    );
    assert_eq!(
        f.check("exp not a number").unwrap_err(),
        JwtError::ClaimType("exp")
    );
}

#[test]
fn unsigned_tokens_are_refused() {
    let f = fixtures();
    assert_eq!(f.check("alg none").unwrap_err(), JwtError::AlgNone);
    assert_eq!(
        f.check("alg none with a signature").unwrap_err(),
        JwtError::AlgNone
    );
}

#[test]
fn key_confusion_is_refused() {
    let f = fixtures();
    assert_eq!(
        f.check("HS256 keyed with the RSA public key PEM")
            .unwrap_err(),
        JwtError::NoKey(Algorithm::HS256)
    );
    assert_eq!(
        f.check("HS256 keyed with the RSA modulus, no kid")
            .unwrap_err(),
        JwtError::Signature
    );
    assert_eq!(
        f.check("ES256 with the RSA key's kid").unwrap_err(),
        JwtError::NoKey(Algorithm::ES256)
    );
    assert_eq!(
        f.check("RS384 for an RS256-only key").unwrap_err(),
        JwtError::NoKey(Algorithm::RS384)
    );
}

#[test]
fn tampering_and_wrong_keys_fail_the_signature() {
    let f = fixtures();
    for name in [
        "tampered payload",
        "tampered header",
        "signed by another RSA key",
    ] {
        assert_eq!(f.check(name).unwrap_err(), JwtError::Signature, "{name}");
    }
    assert_eq!(
        f.check("unknown kid").unwrap_err(),
        JwtError::UnknownKid("nope".into())
    );
}

#[test]
fn malformed_json_is_refused_even_when_signed() {
    let f = fixtures();
    for (name, part) in [
        ("duplicate payload member", Part::Payload),
        ("duplicate header member", Part::Header),
    ] {
        match f.check(name) {
            Err(JwtError::Json(p, e)) => {
                assert_eq!(p, part, "{name}");
                assert_eq!(e.reason, "duplicate member name", "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    assert_eq!(
        f.check("payload not an object").unwrap_err(),
        JwtError::NotObject(Part::Payload)
    );
    assert_eq!(
        f.check("crit with an unknown name").unwrap_err(),
        JwtError::UnsupportedCrit("urn:x".into())
    );
}

#[test]
fn oversized_token_is_refused_before_any_work() {
    let f = fixtures();
    let token = f.token("oversized");
    assert!(token.len() > portcullis_jwt::MAX_TOKEN_LEN);
    assert_eq!(
        f.check("oversized").unwrap_err(),
        JwtError::TooLong(token.len())
    );
}

#[test]
fn malformed_base64url_and_dots_are_refused() {
    let f = fixtures();
    let good = std::str::from_utf8(f.token("HS256")).unwrap();
    let parts: Vec<&str> = good.split('.').collect();
    let cases = [
        (
            format!("{}=.{}.{}", parts[0], parts[1], parts[2]),
            JwtError::Base64(Part::Header),
        ),
        (
            format!("{}.{}.{}=", parts[0], parts[1], parts[2]),
            JwtError::Base64(Part::Signature),
        ),
        (
            format!("{}.{}.+{}", parts[0], parts[1], &parts[2][1..]),
            JwtError::Base64(Part::Signature),
        ),
        (format!("{}.{}", parts[0], parts[1]), JwtError::Parts(2)),
        (format!("{good}.{}", parts[2]), JwtError::Parts(4)),
        (format!("{good}.."), JwtError::Parts(5)),
        (String::new(), JwtError::Parts(1)),
        (format!("{}.{}.", parts[0], parts[1]), JwtError::Signature),
    ];
    for (token, expected) in cases {
        let got = verify(token.as_bytes(), &f.keys, f.now, Duration::ZERO);
        assert_eq!(got.unwrap_err(), expected, "{token}");
    }
}

#[test]
fn errors_read_well_in_an_error_log() {
    let f = fixtures();
    let messages = [
        ("alg none", "unsigned token (alg \"none\")"),
        ("unknown kid", "no key with kid \"nope\""),
        ("expired", "token expired"),
        ("tampered payload", "signature verification failed"),
        (
            "duplicate payload member",
            "invalid JSON in the payload: duplicate member name at offset 15",
        ),
    ];
    for (name, text) in messages {
        assert_eq!(f.check(name).unwrap_err().to_string(), text, "{name}");
    }
}

#[test]
fn cache_serves_hits_and_still_expires_them() {
    let f = fixtures();
    let mut cache = VerifiedCache::new(16);
    let token = f.token("HS256");
    let first = cache.verify(token, &f.keys, f.now, Duration::ZERO).unwrap();
    let second = cache.verify(token, &f.keys, f.now, Duration::ZERO).unwrap();
    assert!(std::sync::Arc::ptr_eq(&first, &second));
    let after_exp = f.now + Duration::from_secs(3600);
    assert_eq!(
        cache
            .verify(token, &f.keys, after_exp, Duration::ZERO)
            .unwrap_err(),
        JwtError::Expired
    );
    assert!(cache.is_empty());
    let other_keys = KeySet::parse(KEYS.as_bytes()).unwrap();
    cache.verify(token, &f.keys, f.now, Duration::ZERO).unwrap();
    let under_other = cache
        .verify(token, &other_keys, f.now, Duration::ZERO)
        .unwrap();
    assert!(!std::sync::Arc::ptr_eq(&first, &under_other));
    assert_eq!(cache.len(), 2);
    assert_eq!(
        cache
            .verify(f.token("tampered payload"), &f.keys, f.now, Duration::ZERO)
            .unwrap_err(),
        JwtError::Signature
    );
}

#[test]
fn every_single_byte_change_is_refused() {
    let f = fixtures();
    for name in ["HS256", "ES256"] {
        let good = f.token(name);
        let mut token = good.to_vec();
        for i in 0..token.len() {
            for replacement in [b'A', b'.', b'=', 0xff] {
                if good[i] == replacement {
                    continue;
                }
                token[i] = replacement;
                let result = verify(&token, &f.keys, f.now, Duration::ZERO);
                assert!(
                    result.is_err(),
                    "{name}: byte {i} set to {replacement:#x} was accepted"
                );
                token[i] = good[i];
            }
        }
    }
}
