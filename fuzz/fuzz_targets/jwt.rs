//! Tokens, key files and JSON from arbitrary bytes (`portcullis_jwt::fuzz::jwt`), tokens
//! verified against the test fixtures' keys at a time when their tokens are valid.
#![no_main]

use std::sync::LazyLock;
use std::time::{Duration, UNIX_EPOCH};

use portcullis_jwt::KeySet;

static KEYS: LazyLock<KeySet> = LazyLock::new(|| {
    KeySet::parse(include_bytes!("../../crates/jwt/tests/fixtures/keys.jwk"))
        .expect("fixture keys must load")
});

/// The fixtures' time (crates/jwt/tests/fixtures/make_tokens.py's NOW).
const NOW: u64 = 1_700_000_000;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    portcullis_jwt::fuzz::jwt(data, &KEYS, UNIX_EPOCH + Duration::from_secs(NOW));
});
