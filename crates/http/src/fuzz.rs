//! The checks the fuzz targets (`fuzz/`) run on arbitrary bytes, here so that the
//! inputs kept in `fuzz/corpus/` and `fuzz/regressions/` are replayed by the tests too.
//! Each panics when the parser breaks a promise.

use bytes::{Bytes, BytesMut};

use crate::{
    normalize_path as normalize, parse_request_head, Chunk, ChunkedDecoder, HeadLimits,
    RequestError, RequestHead,
};

/// Limits a few bytes wide, so lines overflow the first buffer and the large ones, and
/// few header lines.
fn tiny() -> HeadLimits {
    HeadLimits {
        header_buffer_size: 8,
        large_buffers: 2,
        large_buffer_size: 16,
        max_headers: 4,
        ..HeadLimits::default()
    }
}

/// Request heads from arbitrary bytes, with the default limits and with limits small enough
/// that the buffer packing rules decide most outcomes. Every accessor of a parsed head must
/// work on whatever the parser accepted.
pub fn request_head(data: &[u8]) {
    for limits in [HeadLimits::default(), tiny()] {
        let mut buf = BytesMut::from(data);
        let before = buf.len();
        if let Ok(Some(head)) = parse_request_head(&mut buf, &limits) {
            assert!(buf.len() + head.raw().len() <= before);
            touch(&head);
        }
    }
}

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

/// What a decode run produced: the body bytes, how it ended, and what input was left.
#[derive(Debug, PartialEq)]
struct Outcome {
    body: Vec<u8>,
    end: Result<bool, RequestError>,
    rest: Vec<u8>,
}

/// Chunked bodies from arbitrary bytes, delivered in two reads split where the first input
/// byte says. The decoder claims any split gives the same result: checked against feeding
/// everything at once.
pub fn chunked(data: &[u8]) {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let split = usize::from(split).min(input.len());
    let whole = decode(&[input]);
    let parts = decode(&[&input[..split], &input[split..]]);
    assert_eq!(whole, parts);
}
/// Feeds `reads` one after the other, the way a connection hands over what arrived;
/// `end` is Ok(true) once the body is done, Ok(false) when it still needs more.
fn decode(reads: &[&[u8]]) -> Outcome {
    let mut decoder = ChunkedDecoder::new();
    let mut body = Vec::new();
    let mut src = BytesMut::new();
    for (i, read) in reads.iter().enumerate() {
        src.extend_from_slice(read);
        loop {
            match decoder.decode(&mut src) {
                Ok(Chunk::Data(data)) => {
                    assert!(!data.is_empty());
                    body.extend_from_slice(&data);
                }
                Ok(Chunk::NeedMore) => {
                    assert!(src.is_empty());
                    break;
                }
                Ok(Chunk::Done) => {
                    assert!(decoder.is_done());
                    // Reads not yet handed over are part of what follows the body.
                    let mut rest = Bytes::from(src).to_vec();
                    rest.extend(reads[i + 1..].concat());
                    return Outcome {
                        body,
                        end: Ok(true),
                        rest,
                    };
                }
                Err(e) => {
                    return Outcome {
                        body,
                        end: Err(e),
                        rest: Vec::new(),
                    }
                }
            }
        }
    }
    Outcome {
        body,
        end: Ok(false),
        rest: Vec::new(),
    }
}

/// `$uri` from arbitrary raw paths, with merge_slashes on and off. Whatever is accepted must
/// be resolved: rooted, with no "." or ".." segment left anywhere (nginx removes every one,
/// a trailing one leaving a trailing '/', and refuses ".." above the root).
pub fn normalize_path(data: &[u8]) {
    for merge_slashes in [true, false] {
        let Ok(uri) = normalize(data, merge_slashes) else {
            continue;
        };
        assert!(uri.starts_with(b"/"), "{uri:?}");
        assert!(
            !contains(&uri, b"/../") && !contains(&uri, b"/./"),
            "{uri:?}"
        );
        assert!(!uri.ends_with(b"/..") && !uri.ends_with(b"/."), "{uri:?}");
        // "%00" is refused; a raw NUL is passed through, as the head parser never lets one in.
        if !data.contains(&0) {
            assert!(!uri.contains(&0), "{uri:?}");
        }
        if merge_slashes {
            assert!(!contains(&uri, b"//"), "{uri:?}");
        }
        // A result with nothing left to decode or cut off resolves to itself.
        if !uri.iter().any(|b| matches!(b, b'%' | b'?' | b'#')) {
            assert_eq!(normalize(&uri, merge_slashes).as_ref(), Ok(&uri));
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
