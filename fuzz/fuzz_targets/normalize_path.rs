//! `$uri` from arbitrary raw paths, with merge_slashes on and off. Whatever is accepted must
//! be resolved: rooted, with no "." or ".." segment left anywhere (nginx removes every one,
//! a trailing one leaving a trailing '/', and refuses ".." above the root).
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis_http::normalize_path;

fuzz_target!(|data: &[u8]| {
    for merge_slashes in [true, false] {
        let Ok(uri) = normalize_path(data, merge_slashes) else {
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
            assert_eq!(normalize_path(&uri, merge_slashes).as_ref(), Ok(&uri));
        }
    }
});

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
