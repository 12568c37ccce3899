//! `$uri` from arbitrary raw paths: `portcullis_http::fuzz::normalize_path`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| portcullis_http::fuzz::normalize_path(data));
