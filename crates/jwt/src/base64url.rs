//! Strict base64url without padding (RFC 7515 §2, RFC 4648 §5).
//!
//! JWS forbids padding, and a token that decodes to the same bytes from two spellings would
//! make two cache entries for one token, so the decoder also refuses non-canonical input: a
//! length of 1 modulo 4 and leftover bits that are not zero.

/// Why a base64url text did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base64Error {
    /// A byte outside `A-Z a-z 0-9 - _` (padding `=` included).
    BadCharacter,
    /// A length that no encoding produces, or unused bits that are not zero.
    NotCanonical,
}

/// 0xff marks a byte outside the alphabet.
const INVALID: u8 = 0xff;

const DECODE: [u8; 256] = {
    let mut table = [INVALID; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut i = 0;
    while i < alphabet.len() {
        table[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// The number of bytes `len` base64url characters decode to (an upper bound when the length
/// is not canonical).
pub fn decoded_len(len: usize) -> usize {
    len / 4 * 3 + (len % 4 * 3) / 4
}

/// Decodes `input` into the front of `out` and returns the number of bytes written.
///
/// `out` must hold at least [`decoded_len`]`(input.len())` bytes; a shorter `out` is a
/// caller's mistake and reported as `NotCanonical` rather than a panic.
pub fn decode_into(input: &[u8], out: &mut [u8]) -> Result<usize, Base64Error> {
    if input.len() % 4 == 1 {
        return Err(Base64Error::NotCanonical);
    }
    let len = decoded_len(input.len());
    if out.len() < len {
        return Err(Base64Error::NotCanonical);
    }
    let mut chunks = input.chunks_exact(4);
    let mut written = 0;
    for chunk in &mut chunks {
        let word = sextets(chunk)?;
        out[written] = (word >> 16) as u8;
        out[written + 1] = (word >> 8) as u8;
        out[written + 2] = word as u8;
        written += 3;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let word = sextets(rest)? << (6 * (4 - rest.len()));
        let tail = rest.len() - 1;
        let unused_mask = (1u32 << (8 * (3 - tail))) - 1;
        if word & unused_mask != 0 {
            return Err(Base64Error::NotCanonical);
        }
        for i in 0..tail {
            out[written + i] = (word >> (16 - 8 * i)) as u8;
        }
        written += tail;
    }
    Ok(written)
}

/// Decodes `input` into a new vector (load time only: keys).
pub fn decode(input: &[u8]) -> Result<Vec<u8>, Base64Error> {
    let mut out = vec![0; decoded_len(input.len())];
    let len = decode_into(input, &mut out)?;
    out.truncate(len);
    Ok(out)
}

/// Packs up to four characters into the low bits of a word, six bits each.
fn sextets(chars: &[u8]) -> Result<u32, Base64Error> {
    let mut word = 0u32;
    for &c in chars {
        let value = DECODE[c as usize];
        if value == INVALID {
            return Err(Base64Error::BadCharacter);
        }
        word = word << 6 | u32::from(value);
    }
    Ok(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_rfc4648_vectors_in_url_alphabet() {
        let cases: [(&[u8], &[u8]); 7] = [
            (b"", b""),
            (b"Zg", b"f"),
            (b"Zm8", b"fo"),
            (b"Zm9v", b"foo"),
            (b"Zm9vYg", b"foob"),
            (b"Zm9vYmE", b"fooba"),
            (b"Zm9vYmFy", b"foobar"),
        ];
        for (input, expected) in cases {
            assert_eq!(decode(input).as_deref(), Ok(expected), "{input:?}");
        }
        assert_eq!(decode(b"-_-_"), Ok(vec![0xfb, 0xff, 0xbf]));
    }

    #[test]
    fn refuses_padding_standard_alphabet_and_noncanonical_forms() {
        assert_eq!(decode(b"Zg=="), Err(Base64Error::BadCharacter));
        assert_eq!(decode(b"+/+/"), Err(Base64Error::BadCharacter));
        assert_eq!(decode(b"Zm9 v"), Err(Base64Error::NotCanonical));
        assert_eq!(decode(b"Zm9v Y"), Err(Base64Error::BadCharacter));
        assert_eq!(decode(b"Zh"), Err(Base64Error::NotCanonical));
        assert_eq!(decode(b"Zm8"), Ok(b"fo".to_vec()));
        assert_eq!(decode(b"Zm9"), Err(Base64Error::NotCanonical));
        assert_eq!(decode(b"Zm-"), Err(Base64Error::NotCanonical));
    }

    #[test]
    fn short_output_buffer_is_an_error() {
        let mut out = [0u8; 2];
        assert_eq!(
            decode_into(b"Zm9v", &mut out),
            Err(Base64Error::NotCanonical)
        );
    }
}
