//! Configuration text from arbitrary bytes: `portcullis_config::fuzz::config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| portcullis_config::fuzz::config(data));
