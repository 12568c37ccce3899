//! HTTP/2 frames from arbitrary bytes after the connection preface, through the server's
//! HTTP/2 path: `portcullis_server::fuzz::h2_frames`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| portcullis_server::fuzz::h2_frames(data));
