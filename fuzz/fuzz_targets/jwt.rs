//! Tokens, key files and JSON from arbitrary bytes. A token is verified against the test
//! fixtures' keys at a time when their tokens are valid; the same bytes are read as a key
//! file and as a JSON document. Accepted JSON must print and re-read to the same value, and
//! an accepted token's claims must render.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use portcullis_jwt::{verify, Json, KeySet};

const KEYS: &str = include_str!("../../crates/jwt/tests/fixtures/keys.jwk");

/// The fixtures' time (tests/fixtures/make_tokens.py's NOW).
const NOW: u64 = 1_700_000_000;

fuzz_target!(|data: &[u8]| {
    let Ok(keys) = KeySet::parse(KEYS.as_bytes()) else {
        panic!("fixture keys must load");
    };
    let now = UNIX_EPOCH + Duration::from_secs(NOW);
    if let Ok(verified) = verify(data, &keys, now, Duration::from_secs(60)) {
        assert_eq!(
            Json::parse(verified.payload_json().as_bytes())
                .ok()
                .as_ref(),
            Some(verified.payload())
        );
        if let Json::Object(members) = verified.payload() {
            for (name, _) in members {
                assert!(verified.claim(&[name]).is_some());
            }
        }
    }
    let _ = KeySet::parse(data);
    if let Ok(value) = Json::parse(data) {
        let mut printed = String::new();
        value.write_compact(&mut printed);
        assert_eq!(Json::parse(printed.as_bytes()).ok(), Some(value));
    }
});
