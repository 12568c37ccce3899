//! nginx's `$uri`: the request path percent-decoded and resolved.
//!
//! The rules below were checked against nginx 1.22 (`return 200 "$uri"`), with
//! `merge_slashes` on and off; the unit tests hold that table. In short: `%XX` escapes are
//! decoded first (an invalid escape or `%00` is refused), and decoded bytes count as what
//! they are, so `%2F` separates segments and `%2e%2e` is "..". Then "." segments vanish,
//! ".." removes the segment before it (a trailing "." or ".." leaves a trailing '/'), and
//! ".." above the root is refused. With `merge_slashes`, runs of '/' become one; without it,
//! an empty segment between two slashes is a segment like any other, which ".." can remove.
//!
//! The result is bytes, not a `String`: a decoded `%FF` is a legitimate byte of a file name,
//! and nginx hands it through unchanged. Matching against locations and regexes works on
//! bytes; callers that need text can convert lossily where it is shown.

use crate::error::RequestError;

/// Decodes and resolves `raw` (a path from [`crate::RequestHead::path`], starting with '/')
/// into a new buffer. A raw '?' or '#' ends the path.
pub fn normalize_path(raw: &[u8], merge_slashes: bool) -> Result<Vec<u8>, RequestError> {
    let mut out = Vec::with_capacity(raw.len());
    normalize_path_into(raw, merge_slashes, &mut out)?;
    Ok(out)
}

/// As [`normalize_path`], writing into `out` (cleared first) so a worker can reuse one buffer
/// for every request.
pub fn normalize_path_into(
    raw: &[u8],
    merge_slashes: bool,
    out: &mut Vec<u8>,
) -> Result<(), RequestError> {
    out.clear();
    if raw.first() != Some(&b'/') {
        return Err(RequestError::BadUri);
    }
    out.push(b'/');
    // Where the segment being written starts in `out`; `out` always ends with '/' there.
    let mut segment_start = 1;
    let mut i = 1;
    while i < raw.len() {
        let byte = match raw[i] {
            b'?' | b'#' => break,
            b'%' => {
                let decoded = raw
                    .get(i + 1..i + 3)
                    .and_then(|hex| Some(hex_value(hex[0])? << 4 | hex_value(hex[1])?))
                    .ok_or(RequestError::BadUri)?;
                if decoded == 0 {
                    return Err(RequestError::BadUri);
                }
                i += 3;
                decoded
            }
            other => {
                i += 1;
                other
            }
        };
        if byte != b'/' {
            out.push(byte);
            continue;
        }
        if end_segment(out, segment_start)? {
            segment_start = out.len();
            continue;
        }
        if out.len() == segment_start && merge_slashes {
            continue;
        }
        out.push(b'/');
        segment_start = out.len();
    }
    end_segment(out, segment_start)?;
    Ok(())
}

/// Resolves the segment `out[start..]` if it is "." or "..", leaving `out` ending with '/'.
/// Returns whether it was one of them (so no separator should follow).
fn end_segment(out: &mut Vec<u8>, start: usize) -> Result<bool, RequestError> {
    match &out[start..] {
        b"." => {
            out.truncate(start);
            Ok(true)
        }
        b".." => {
            // `out[..start]` ends with the '/' before "..": drop the segment before that one.
            if start <= 1 {
                return Err(RequestError::BadUri);
            }
            let previous = out[..start - 1]
                .iter()
                .rposition(|&b| b == b'/')
                .ok_or(RequestError::BadUri)?;
            out.truncate(previous + 1);
            Ok(true)
        }
        _ => Ok(false),
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A raw path, then `$uri` with merge_slashes on and off (`None` for a 400).
    type Case = (&'static [u8], Option<&'static [u8]>, Option<&'static [u8]>);

    /// Raw paths and nginx 1.22's `$uri` for them, with merge_slashes on and off
    /// (`None`: nginx answered 400). Each row was checked against a running nginx.
    const NGINX_CASES: [Case; 46] = [
        (b"/", Some(b"/"), Some(b"/")),
        (b"/a/b", Some(b"/a/b"), Some(b"/a/b")),
        (b"/a//b", Some(b"/a/b"), Some(b"/a//b")),
        (b"//a", Some(b"/a"), Some(b"//a")),
        (b"/a/./b", Some(b"/a/b"), Some(b"/a/b")),
        (b"/a/../b", Some(b"/b"), Some(b"/b")),
        (b"/..", None, None),
        (b"/../a", None, None),
        (b"/a/..", Some(b"/"), Some(b"/")),
        (b"/a/../..", None, None),
        (b"/a/.", Some(b"/a/"), Some(b"/a/")),
        (b"/a/./", Some(b"/a/"), Some(b"/a/")),
        (b"/.", Some(b"/"), Some(b"/")),
        (b"/./", Some(b"/"), Some(b"/")),
        (b"/%2e%2e/a", None, None),
        (b"/a/%2e%2e", Some(b"/"), Some(b"/")),
        (b"/a/%2E%2e/b", Some(b"/b"), Some(b"/b")),
        (b"/a%2fb", Some(b"/a/b"), Some(b"/a/b")),
        (b"/a%2F..%2Fb", Some(b"/b"), Some(b"/b")),
        (b"/%00", None, None),
        (b"/a%00b", None, None),
        (b"/%zz", None, None),
        (b"/%4", None, None),
        (b"/%", None, None),
        (b"/a%20b", Some(b"/a b"), Some(b"/a b")),
        (b"/a+b", Some(b"/a+b"), Some(b"/a+b")),
        (b"/%C3%A9", Some(b"/\xc3\xa9"), Some(b"/\xc3\xa9")),
        (b"/%ff", Some(b"/\xff"), Some(b"/\xff")),
        (b"/a/...", Some(b"/a/..."), Some(b"/a/...")),
        (b"/a/..b", Some(b"/a/..b"), Some(b"/a/..b")),
        (b"/a/.b", Some(b"/a/.b"), Some(b"/a/.b")),
        (b"/a//../b", Some(b"/b"), Some(b"/a/b")),
        (b"/a/b//..", Some(b"/a/"), Some(b"/a/b/")),
        (b"/a?b/../c", Some(b"/a"), Some(b"/a")),
        (b"/a%3fb", Some(b"/a?b"), Some(b"/a?b")),
        (b"/a%23b", Some(b"/a#b"), Some(b"/a#b")),
        (b"/a#b", Some(b"/a"), Some(b"/a")),
        (b"/a\\b", Some(b"/a\\b"), Some(b"/a\\b")),
        (b"/a/.%2e/b", Some(b"/b"), Some(b"/b")),
        (b"///", Some(b"/"), Some(b"///")),
        (b"/a/b/../../..", None, None),
        (b"/%2f%2f", Some(b"/"), Some(b"///")),
        (b"/..a", Some(b"/..a"), Some(b"/..a")),
        (b"/a/..%2f", Some(b"/"), Some(b"/")),
        (b"/a/.//b", Some(b"/a/b"), Some(b"/a//b")),
        (b"/a/%2E%2E%2E", Some(b"/a/..."), Some(b"/a/...")),
    ];

    #[test]
    fn matches_nginx() {
        for (raw, merged, unmerged) in NGINX_CASES {
            for (merge, want) in [(true, merged), (false, unmerged)] {
                let got = normalize_path(raw, merge);
                match want {
                    Some(w) => assert_eq!(
                        got.as_deref(),
                        Ok(w),
                        "{:?} merge={merge}",
                        String::from_utf8_lossy(raw)
                    ),
                    None => assert_eq!(
                        got,
                        Err(RequestError::BadUri),
                        "{:?} merge={merge}",
                        String::from_utf8_lossy(raw)
                    ),
                }
            }
        }
    }

    #[test]
    fn refuses_relative_paths() {
        assert_eq!(normalize_path(b"", true), Err(RequestError::BadUri));
        assert_eq!(normalize_path(b"a/b", true), Err(RequestError::BadUri));
    }

    #[test]
    fn reuses_the_output_buffer() {
        let mut out = b"left over".to_vec();
        normalize_path_into(b"/x/../y", true, &mut out).unwrap();
        assert_eq!(out, b"/y");
    }
}
