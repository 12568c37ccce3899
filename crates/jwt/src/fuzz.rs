//! The check the `jwt` fuzz target (`fuzz/`) runs on arbitrary bytes, here so that the
//! inputs kept in `fuzz/corpus/jwt/` and `fuzz/regressions/jwt/` are replayed by the tests
//! too.

use std::sync::LazyLock;
use std::time::{Duration, UNIX_EPOCH};

use crate::{verify, Json, KeySet};

/// The test fixtures' keys (`tests/fixtures/keys.jwk`), which sign their tokens.
static KEYS: LazyLock<KeySet> = LazyLock::new(|| {
    KeySet::parse(include_bytes!("../tests/fixtures/keys.jwk")).expect("fixture keys must load")
});

/// The fixtures' time (`tests/fixtures/make_tokens.py`'s NOW), when their tokens are valid.
const NOW: u64 = 1_700_000_000;

/// Tokens, key files and JSON from arbitrary bytes. A token is verified against the test
/// fixtures' keys at a time when their tokens are valid; the same bytes are read as a key
/// file and as a JSON document. Accepted JSON must print and re-read to the same value,
/// and an accepted token's claims must render.
pub fn jwt(data: &[u8]) {
    let now = UNIX_EPOCH + Duration::from_secs(NOW);
    if let Ok(verified) = verify(data, &KEYS, now, Duration::from_secs(60)) {
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
}
