//! Request heads from arbitrary bytes, with the default limits and with limits small enough
//! that the buffer packing rules decide most outcomes. Every accessor of a parsed head must
//! work on whatever the parser accepted.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use portcullis_http::{parse_request_head, HeadLimits, RequestHead};

/// Limits a few bytes wide, so lines overflow the first buffer and the large ones.
const TINY: HeadLimits = HeadLimits {
    header_buffer_size: 8,
    large_buffers: 2,
    large_buffer_size: 16,
};

fuzz_target!(|data: &[u8]| {
    for limits in [HeadLimits::default(), TINY] {
        let mut buf = BytesMut::from(data);
        let before = buf.len();
        if let Ok(Some(head)) = parse_request_head(&mut buf, &limits) {
            assert!(buf.len() + head.raw().len() <= before);
            touch(&head);
        }
    }
});

fn touch(head: &RequestHead) {
    let _ = head.method();
    assert!(!head.method_str().is_empty());
    let _ = head.version();
    // Control bytes, spaces and NUL never reach the target (normalize_path relies on it).
    assert!(head.target().iter().all(|&b| b > b' ' && b != 0x7f));
    assert!(!head.path().is_empty());
    let _ = head.query();
    if let Some(host) = head.host() {
        assert!(!host.bytes().any(|b| b.is_ascii_uppercase()), "{host:?}");
    }
    for (name, _value) in head.headers() {
        assert!(!name.is_empty());
        assert!(head.header(name).is_some());
    }
    assert_eq!(head.headers().count(), head.header_count());
    let _ = head.body();
    let _ = head.keep_alive();
    let _ = head.expect_continue();
    let _ = head.raw_bytes();
    assert!(head.request_line().starts_with(head.method_str()));
    assert!(head.raw().starts_with(head.request_line().as_bytes()));
}
