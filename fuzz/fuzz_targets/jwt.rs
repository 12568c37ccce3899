//! Tokens, key files and JSON from arbitrary bytes, tokens verified against the test
//! fixtures' keys: `portcullis_jwt::fuzz::jwt`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| portcullis_jwt::fuzz::jwt(data));
