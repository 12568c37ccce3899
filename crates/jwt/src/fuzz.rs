//! The check the `jwt` fuzz target (`fuzz/`) runs on arbitrary bytes, here so that the
//! inputs kept in `fuzz/corpus/jwt/` and `fuzz/regressions/jwt/` are replayed by the tests
//! too.

use std::time::{Duration, SystemTime};

use crate::{verify, Json, KeySet};

/// Tokens, key files and JSON from arbitrary bytes. A token is verified against `keys` at
/// `now`; the same bytes are read as a key file and as a JSON document. Accepted JSON must
/// print and re-read to the same value, and an accepted token's claims must render.
pub fn jwt(data: &[u8], keys: &KeySet, now: SystemTime) {
    if let Ok(verified) = verify(data, keys, now, Duration::from_secs(60)) {
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
