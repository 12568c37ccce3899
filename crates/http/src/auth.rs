//! The credentials of `Authorization: Basic` (RFC 7617), read as nginx reads them for
//! `$remote_user` and `auth_basic`.

/// The user and password of a `Basic` authorization field's `value`: `None` when the field
/// is of another scheme, its base64 does not decode, or it names no user, as nginx declines
/// it then. The scheme's name is matched without regard to case, spaces after it are
/// skipped, and the base64 ends at its first `=`, as nginx decodes it.
pub fn basic_credentials(value: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let scheme = value.get(..6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let start = value[6..]
        .iter()
        .position(|&b| b != b' ')
        .map_or(value.len(), |i| 6 + i);
    let mut decoded = decode_base64(&value[start..])?;
    let colon = decoded.iter().position(|&b| b == b':').filter(|&i| i > 0)?;
    let password = decoded[colon + 1..].to_vec();
    decoded.truncate(colon);
    Some((decoded, password))
}

/// Standard base64 decoded as nginx's `ngx_decode_base64` does: the text ends at its first
/// `=`, any other character outside the alphabet makes it invalid, and so does a length that
/// leaves a single character over. `None` when it is invalid or empty.
pub fn decode_base64(encoded: &[u8]) -> Option<Vec<u8>> {
    decode(encoded, sextet)
}

/// [`decode_base64`] with the URL-safe alphabet (`-` and `_`), as nginx's
/// `ngx_decode_base64url`.
pub fn decode_base64url(encoded: &[u8]) -> Option<Vec<u8>> {
    decode(encoded, |c| match c {
        b'-' => Some(62),
        b'_' => Some(63),
        b'+' | b'/' => None,
        c => sextet(c),
    })
}

fn decode(encoded: &[u8], sextet: impl Fn(u8) -> Option<u8>) -> Option<Vec<u8>> {
    let encoded = encoded
        .iter()
        .position(|&b| b == b'=')
        .map_or(encoded, |end| &encoded[..end]);
    if encoded.is_empty() || encoded.len() % 4 == 1 {
        return None;
    }
    let mut decoded = Vec::with_capacity(encoded.len() / 4 * 3 + 2);
    let mut bits = 0u32;
    let mut count = 0;
    for &c in encoded {
        bits = bits << 6 | u32::from(sextet(c)?);
        count += 1;
        if count == 4 {
            decoded.extend_from_slice(&[(bits >> 16) as u8, (bits >> 8) as u8, bits as u8]);
            bits = 0;
            count = 0;
        }
    }
    match count {
        2 => decoded.push((bits >> 4) as u8),
        3 => decoded.extend_from_slice(&[(bits >> 10) as u8, (bits >> 2) as u8]),
        _ => {}
    }
    Some(decoded)
}

/// The value of one character of the standard base64 alphabet.
fn sextet(c: u8) -> Option<u8> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::basic_credentials;

    fn user(value: &str) -> Option<String> {
        basic_credentials(value.as_bytes()).map(|(u, _)| String::from_utf8_lossy(&u).into_owned())
    }

    #[test]
    fn users_as_nginx_reads_them() {
        // "alice:secret", "bob:" and "a:b:c".
        assert_eq!(user("Basic YWxpY2U6c2VjcmV0"), Some("alice".into()));
        assert_eq!(
            basic_credentials(b"basic    YWxpY2U6c2VjcmV0"),
            Some((b"alice".to_vec(), b"secret".to_vec()))
        );
        assert_eq!(user("BASIC Ym9iOg=="), Some("bob".into()));
        assert_eq!(user("Basic Ym9iOg"), Some("bob".into()));
        assert_eq!(
            basic_credentials(b"Basic YTpiOmM="),
            Some((b"a".to_vec(), b"b:c".to_vec()))
        );
        // Decoding ends at the first `=`.
        assert_eq!(user("Basic Ym9iOg==!!"), Some("bob".into()));
    }

    #[test]
    fn what_names_no_user_is_declined() {
        for value in [
            "",
            "Basic",
            "Basic ",
            "Bearer YWxpY2U6c2VjcmV0",
            "Basic !!!!",
            "Basic YWxpY2U",            // "alice": no colon
            "Basic OnNlY3JldA==",       // ":secret": no user
            "Basic YWxpY2U6c2VjcmV0a",  // one character too many
            "Basic \tYWxpY2U6c2VjcmV0", // only spaces are skipped
        ] {
            assert_eq!(user(value), None, "{value}");
        }
    }
}
