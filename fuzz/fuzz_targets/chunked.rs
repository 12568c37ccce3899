//! Chunked bodies from arbitrary bytes, in two reads: `portcullis_http::fuzz::chunked`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| portcullis_http::fuzz::chunked(data));
