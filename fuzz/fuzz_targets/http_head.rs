//! Request heads from arbitrary bytes: `portcullis_http::fuzz::request_head`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| portcullis_http::fuzz::request_head(data));
