//! PROXY protocol headers from arbitrary bytes: `portcullis_server::fuzz::proxy_protocol`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| portcullis_server::fuzz::proxy_protocol(data));
