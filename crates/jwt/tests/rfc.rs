//! The published JWS examples: RFC 7515 appendix A, RFC 7520 §4 and RFC 8037 appendix A.4,
//! tokens and keys copied from the RFC texts.
//!
//! Several of them sign a payload that is not JSON ("Payload", a quotation), which a JWT
//! verifier must refuse; since the signature is checked before the payload is parsed, the
//! refusal "invalid JSON in the payload" shows the signature verified, and the same token
//! with one signature byte changed fails on the signature instead.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use portcullis_jwt::{verify, Algorithm, JwtError, KeySet, Part};

/// Before the RFC 7515 examples' `exp` (1300819380).
fn rfc7515_now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_300_819_000)
}

const A1_TOKEN: &str = concat!(
    "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJ",
    "leHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp",
    "0cnVlfQ.dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
);
const A1_KEY: &str = concat!(
    r#"{"kty":"oct","k":"AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUu"#,
    r#"TwjAzZr1Z9CAow"}"#
);

const A2_TOKEN: &str = concat!(
    "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODA",
    "sDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ.cC4hiUPoj9Ee",
    "tdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Q",
    "c_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--",
    "f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN",
    "9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6I",
    "eYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypG",
    "lUPQGe77Rw"
);
const A2_KEY: &str = concat!(
    r#"{"kty":"RSA","e":"AQAB","n":""#,
    "ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp",
    "-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOW",
    "vG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUs",
    "LA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9k",
    "G4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2",
    r#"PAcDTW9gb54h4FRWyuXpoQ"}"#
);

const A3_TOKEN: &str = concat!(
    "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODA",
    "sDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ.DtEhU3ljbEg8",
    "L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqP",
    "P3-Kg6NU1Q"
);
const A3_KEY: &str = concat!(
    r#"{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","#,
    r#""y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}"#
);

const A4_TOKEN: &str = concat!(
    "eyJhbGciOiJFUzUxMiJ9.UGF5bG9hZA.AdwMgeerwtHoh-l192l60hp9wAHZFVJb",
    "LfD_UxMi70cwnZOYaRI1bKPWROc-mZZqwqT2SI-KGDKB34XO0aw_7XdtAG8GaSwF",
    "KdCAPZgoXD2YBJZCPEX3xKpRwcdOO8KpEHwJjyqOgzDO7iKvU8vcnwNrmxYbSW9E",
    "RBXukOXolLzeO_Jn"
);
const A4_KEY: &str = concat!(
    r#"{"kty":"EC","crv":"P-521","#,
    r#""x":"AekpBQ8ST8a8VcfVOTNl353vSrDCLLJXmPk06wTjxrrjcBpXp5EOnYG_NjFZ6OvLFV1jSfS9tsz4qUxcWceqwQGk","#,
    r#""y":"ADSmRA43Z1DSNx_RvcLI87cdL07l6jQyyBXMoxVg_l2Th-x3S1WDhjDly79ajL4Kkd0AZMaZmh9ubmf63e3kyMj2"}"#
);

/// RFC 7520 §4: the payload all its signature examples share (a quotation, not JSON).
const RFC7520_PAYLOAD: &str = concat!(
    "SXTigJlzIGEgZGFuZ2Vyb3VzIGJ1c2luZXNzLCBGcm9kbywgZ29pbmcgb3V0IH",
    "lvdXIgZG9vci4gWW91IHN0ZXAgb250byB0aGUgcm9hZCwgYW5kIGlmIHlvdSBk",
    "b24ndCBrZWVwIHlvdXIgZmVldCwgdGhlcmXigJlzIG5vIGtub3dpbmcgd2hlcm",
    "UgeW91IG1pZ2h0IGJlIHN3ZXB0IG9mZiB0by4"
);

/// RFC 7520 figures 1, 3 and 5 (public parts): the keys of §4.1 to §4.4.
const RFC7520_KEYS: &str = concat!(
    r#"{"keys":["#,
    r#"{"kty":"EC","kid":"bilbo.baggins@hobbiton.example","use":"sig","crv":"P-521","#,
    r#""x":"AHKZLLOsCOzz5cY97ewNUajB957y-C-U88c3v13nmGZx6sYl_oJXu9A5RkTKqjqvjyekWF-7ytDyRXYgCF5cj0Kt","#,
    r#""y":"AdymlHvOiLxXkEhayXQnNCvDX4h9htZaCJN34kfmC6pV5OhQHiraVySsUdaQkAgDPrwQrJmbnX9cwlGfP-HqHZR1"},"#,
    r#"{"kty":"RSA","kid":"bilbo.baggins@hobbiton.example","use":"sig","e":"AQAB","n":""#,
    "n4EPtAOCc9AlkeQHPzHStgAbgs7bTZLwUBZdR8_KuKPEHLd4rHVTeT-O-XV2jRoj",
    "dNhxJWTDvNd7nqQ0VEiZQHz_AJmSCpMaJMRBSFKrKb2wqVwGU_NsYOYL-QtiWN2l",
    "bzcEe6XC0dApr5ydQLrHqkHHig3RBordaZ6Aj-oBHqFEHYpPe7Tpe-OfVfHd1E6c",
    "S6M1FZcD1NNLYD5lFHpPI9bTwJlsde3uhGqC0ZCuEHg8lhzwOHrtIQbS0FVbb9k3",
    "-tVTU4fg_3L_vniUFAKwuCLqKnS2BYwdq_mzSnbLY7h_qixoR7jig3__kRhuaxwU",
    r#"kRz5iaiQkqgc5gHdrNP5zw"},"#,
    r#"{"kty":"oct","kid":"018c0ae5-4d9b-471b-bfd6-eef314bc7037","use":"sig","alg":"HS256","#,
    r#""k":"hJtXIZ2uSN5kbQfbtTNWbpdmhkV8FJG-Onbc6mxCcYg"},"#,
    r#"{"kty":"oct","kid":"1e571774-2e08-40da-8308-e8d68773842d","use":"enc","alg":"A256GCM","#,
    r#""k":"AAPapAv4LbFbiVawEjagUBluYqN5rhna-8nuldDvOx8"}]}"#
);

const RFC7520_4_1_HEADER: &str =
    "eyJhbGciOiJSUzI1NiIsImtpZCI6ImJpbGJvLmJhZ2dpbnNAaG9iYml0b24uZXhhbXBsZSJ9";
const RFC7520_4_1_SIGNATURE: &str = concat!(
    "MRjdkly7_-oTPTS3AXP41iQIGKa80A0ZmTuV5MEaHoxnW2e5CZ5NlKtainoFmK",
    "ZopdHM1O2U4mwzJdQx996ivp83xuglII7PNDi84wnB-BDkoBwA78185hX-Es4J",
    "IwmDLJK3lfWRa-XtL0RnltuYv746iYTh_qHRD68BNt1uSNCrUCTJDt5aAE6x8w",
    "W1Kt9eRo4QPocSadnHXFxnt8Is9UzpERV0ePPQdLuW3IS_de3xyIrDaLGdjluP",
    "xUAhb6L2aXic1U12podGU0KLUQSE_oI-ZnmKJ3F4uOZDnd6QZWJushZ41Axf_f",
    "cIe8u9ipH84ogoree7vjbU5y18kDquDg"
);
const RFC7520_4_2_HEADER: &str =
    "eyJhbGciOiJQUzM4NCIsImtpZCI6ImJpbGJvLmJhZ2dpbnNAaG9iYml0b24uZXhhbXBsZSJ9";
const RFC7520_4_2_SIGNATURE: &str = concat!(
    "cu22eBqkYDKgIlTpzDXGvaFfz6WGoz7fUDcfT0kkOy42miAh2qyBzk1xEsnk2I",
    "pN6-tPid6VrklHkqsGqDqHCdP6O8TTB5dDDItllVo6_1OLPpcbUrhiUSMxbbXU",
    "vdvWXzg-UD8biiReQFlfz28zGWVsdiNAUf8ZnyPEgVFn442ZdNqiVJRmBqrYRX",
    "e8P_ijQ7p8Vdz0TTrxUeT3lm8d9shnr2lfJT8ImUjvAA2Xez2Mlp8cBE5awDzT",
    "0qI0n6uiP1aCN_2_jLAeQTlqRHtfa64QQSUmFAAjVKPbByi7xho0uTOcbH510a",
    "6GYmJUAfmWjwZ6oD4ifKo8DYM-X72Eaw"
);
const RFC7520_4_3_HEADER: &str =
    "eyJhbGciOiJFUzUxMiIsImtpZCI6ImJpbGJvLmJhZ2dpbnNAaG9iYml0b24uZXhhbXBsZSJ9";
const RFC7520_4_3_SIGNATURE: &str = concat!(
    "AE_R_YZCChjn4791jSQCrdPZCNYqHXCTZH0-JZGYNlaAjP2kqaluUIIUnC9qvb",
    "u9Plon7KRTzoNEuT4Va2cmL1eJAQy3mtPBu_u_sDDyYjnAMDxXPn7XrT0lw-kv",
    "AD890jl8e2puQens_IEKBpHABlsbEPX6sFY8OcGDqoRuBomu9xQ2"
);
const RFC7520_4_4_HEADER: &str =
    "eyJhbGciOiJIUzI1NiIsImtpZCI6IjAxOGMwYWU1LTRkOWItNDcxYi1iZmQ2LWVlZjMxNGJjNzAzNyJ9";
const RFC7520_4_4_SIGNATURE: &str = "s0h6KThzkfBBBkLspW1h84VsJZFTsPPqMDA7g1Md7p0";

const RFC8037_TOKEN: &str = concat!(
    "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc.hgyY0il",
    "_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g",
    "7sVvpAr_MuM0KAg"
);
const RFC8037_KEY: &str =
    r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#;

fn keys(json: &str) -> KeySet {
    KeySet::parse(json.as_bytes()).expect("RFC key loads")
}

/// The token with the first character of its signature changed, still valid base64url.
fn tamper_signature(token: &str) -> String {
    let at = token.rfind('.').expect("three parts") + 1;
    let first = &token[at..at + 1];
    let swapped = if first == "A" { "B" } else { "A" };
    format!("{}{}{}", &token[..at], swapped, &token[at + 1..])
}

/// Asserts the signature of a token with a non-JSON payload verified, and that a tampered
/// signature does not.
fn assert_signature_verifies_then_payload_refused(token: &str, keys: &KeySet) {
    let now = rfc7515_now();
    match verify(token.as_bytes(), keys, now, Duration::ZERO) {
        Err(JwtError::Json(Part::Payload, _)) => {}
        other => panic!("expected the payload to be refused after the signature: {other:?}"),
    }
    let tampered = tamper_signature(token);
    assert_eq!(
        verify(tampered.as_bytes(), keys, now, Duration::ZERO).unwrap_err(),
        JwtError::Signature
    );
}

#[test]
fn rfc7515_a1_hs256() {
    let keys = keys(A1_KEY);
    let v = verify(A1_TOKEN.as_bytes(), &keys, rfc7515_now(), Duration::ZERO).unwrap();
    assert_eq!(v.algorithm(), Algorithm::HS256);
    assert_eq!(v.claim(&["iss"]).unwrap().as_str(), "joe");
    assert_eq!(
        v.claim(&["http://example.com/is_root"]).unwrap().as_str(),
        "true"
    );
    assert_eq!(v.exp(), Some(1_300_819_380.0));
    assert_eq!(v.header_claim(&["typ"]).unwrap().as_str(), "JWT");
    assert_eq!(
        v.payload_json(),
        "{\"iss\":\"joe\",\r\n \"exp\":1300819380,\r\n \"http://example.com/is_root\":true}"
    );
    let late = UNIX_EPOCH + Duration::from_secs(1_300_819_380);
    assert_eq!(
        verify(A1_TOKEN.as_bytes(), &keys, late, Duration::ZERO).unwrap_err(),
        JwtError::Expired
    );
    let tampered = tamper_signature(A1_TOKEN);
    assert_eq!(
        verify(tampered.as_bytes(), &keys, rfc7515_now(), Duration::ZERO).unwrap_err(),
        JwtError::Signature
    );
}

#[test]
fn rfc7515_a2_rs256() {
    let keys = keys(A2_KEY);
    let v = verify(A2_TOKEN.as_bytes(), &keys, rfc7515_now(), Duration::ZERO).unwrap();
    assert_eq!(v.algorithm(), Algorithm::RS256);
    assert_eq!(v.claim(&["iss"]).unwrap().as_str(), "joe");
    let tampered = tamper_signature(A2_TOKEN);
    assert_eq!(
        verify(tampered.as_bytes(), &keys, rfc7515_now(), Duration::ZERO).unwrap_err(),
        JwtError::Signature
    );
}

#[test]
fn rfc7515_a3_es256() {
    let keys = keys(A3_KEY);
    let v = verify(A3_TOKEN.as_bytes(), &keys, rfc7515_now(), Duration::ZERO).unwrap();
    assert_eq!(v.algorithm(), Algorithm::ES256);
    let tampered = tamper_signature(A3_TOKEN);
    assert_eq!(
        verify(tampered.as_bytes(), &keys, rfc7515_now(), Duration::ZERO).unwrap_err(),
        JwtError::Signature
    );
}

#[test]
fn rfc7515_a4_es512() {
    assert_signature_verifies_then_payload_refused(A4_TOKEN, &keys(A4_KEY));
}

#[test]
fn rfc7520_section_4_examples() {
    let keys = keys(RFC7520_KEYS);
    assert_eq!(keys.len(), 3, "the encryption key is left out");
    for (header, signature) in [
        (RFC7520_4_1_HEADER, RFC7520_4_1_SIGNATURE),
        (RFC7520_4_2_HEADER, RFC7520_4_2_SIGNATURE),
        (RFC7520_4_3_HEADER, RFC7520_4_3_SIGNATURE),
        (RFC7520_4_4_HEADER, RFC7520_4_4_SIGNATURE),
    ] {
        let token = format!("{header}.{RFC7520_PAYLOAD}.{signature}");
        assert_signature_verifies_then_payload_refused(&token, &keys);
    }
}

#[test]
fn rfc8037_a4_ed25519() {
    assert_signature_verifies_then_payload_refused(RFC8037_TOKEN, &keys(RFC8037_KEY));
}

#[test]
fn rfc_examples_refuse_each_others_keys() {
    let now = rfc7515_now();
    // A.1 is HS256: the RSA key of A.2 is no HMAC secret.
    assert_eq!(
        verify(A1_TOKEN.as_bytes(), &keys(A2_KEY), now, Duration::ZERO).unwrap_err(),
        JwtError::NoKey(Algorithm::HS256)
    );
    assert_eq!(
        verify(A3_TOKEN.as_bytes(), &keys(A4_KEY), now, Duration::ZERO).unwrap_err(),
        JwtError::NoKey(Algorithm::ES256)
    );
    assert_eq!(
        verify(RFC8037_TOKEN.as_bytes(), &keys(A1_KEY), now, Duration::ZERO).unwrap_err(),
        JwtError::NoKey(Algorithm::EdDSA)
    );
}
