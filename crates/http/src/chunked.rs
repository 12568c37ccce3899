//! Chunked transfer coding (RFC 9112 7.1): an incremental request body decoder, and the
//! framing bytes for writing chunked responses.
//!
//! The decoder keeps only a small state between calls and never buffers: chunk data is split
//! off the input as zero-copy `Bytes`, and extensions and trailer fields are skipped byte by
//! byte as they arrive, so any split of the input gives the same result and no input makes
//! it hold more memory. As nginx does, a bare LF is accepted where CRLF is expected.

use bytes::{Buf, Bytes, BytesMut};

use crate::error::RequestError;

/// The terminating zero-size chunk with an empty trailer section.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The largest chunk size accepted: nginx keeps sizes in a signed `off_t`.
const MAX_CHUNK_SIZE: u64 = i64::MAX as u64;

/// The longest chunk header [`chunk_header`] writes: 16 hex digits and CRLF.
const CHUNK_HEADER_MAX: usize = 18;

/// What [`ChunkedDecoder::decode`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// Body bytes, never empty.
    Data(Bytes),
    /// The input is used up before the body ends.
    NeedMore,
    /// The body ended; bytes after it stay in the input.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading the hex size; `digits` says whether any was seen.
    Size {
        size: u64,
        digits: bool,
    },
    /// Skipping a chunk extension up to the line end.
    Extension {
        size: u64,
    },
    /// Expecting the LF after the size line's CR.
    SizeLf {
        size: u64,
    },
    /// Inside chunk data.
    Data {
        remaining: u64,
    },
    /// Expecting the CR (or bare LF) after chunk data.
    DataEnd,
    /// Expecting the LF after chunk data's CR.
    DataLf,
    /// At the start of a trailer line, or of the final empty line.
    TrailerStart,
    /// Skipping a trailer field line.
    Trailer,
    /// Expecting the LF of the final empty line.
    FinalLf,
    Done,
}

/// Decodes a chunked body incrementally; see [`ChunkedDecoder::decode`].
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::Size {
                size: 0,
                digits: false,
            },
        }
    }

    /// Whether the last chunk and trailers have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes framing from `src` and returns the next piece of body data, or says that
    /// more input is needed or that the body is complete. Chunk extensions are ignored and
    /// trailer fields skipped. A malformed frame or a size over 2^63-1 is an error.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Chunk, RequestError> {
        loop {
            if let State::Data { remaining } = self.state {
                if src.is_empty() {
                    return Ok(Chunk::NeedMore);
                }
                let take = usize::try_from(remaining).map_or(src.len(), |r| r.min(src.len()));
                let left = remaining - take as u64;
                self.state = if left == 0 {
                    State::DataEnd
                } else {
                    State::Data { remaining: left }
                };
                return Ok(Chunk::Data(src.split_to(take).freeze()));
            }
            if self.state == State::Done {
                return Ok(Chunk::Done);
            }
            let Some(&byte) = src.first() else {
                return Ok(Chunk::NeedMore);
            };
            src.advance(1);
            self.state = self.step(byte)?;
        }
    }

    /// The framing state after `byte`.
    fn step(&self, byte: u8) -> Result<State, RequestError> {
        let bad = Err(RequestError::BadChunkedBody);
        Ok(match self.state {
            State::Size { size, digits } => match (byte, hex_digit(byte)) {
                (_, Some(d)) => State::Size {
                    size: size
                        .checked_mul(16)
                        .map(|s| s | u64::from(d))
                        .filter(|&s| s <= MAX_CHUNK_SIZE)
                        .ok_or(RequestError::BadChunkedBody)?,
                    digits: true,
                },
                _ if !digits => return bad,
                (b';' | b' ' | b'\t', _) => State::Extension { size },
                (b'\r', _) => State::SizeLf { size },
                (b'\n', _) => after_size_line(size),
                _ => return bad,
            },
            State::Extension { size } => match byte {
                b'\r' => State::SizeLf { size },
                b'\n' => after_size_line(size),
                _ => State::Extension { size },
            },
            State::SizeLf { size } => match byte {
                b'\n' => after_size_line(size),
                _ => return bad,
            },
            State::DataEnd => match byte {
                b'\r' => State::DataLf,
                b'\n' => State::Size {
                    size: 0,
                    digits: false,
                },
                _ => return bad,
            },
            State::DataLf => match byte {
                b'\n' => State::Size {
                    size: 0,
                    digits: false,
                },
                _ => return bad,
            },
            State::TrailerStart => match byte {
                b'\r' => State::FinalLf,
                b'\n' => State::Done,
                _ => State::Trailer,
            },
            State::Trailer => match byte {
                b'\n' => State::TrailerStart,
                _ => State::Trailer,
            },
            State::FinalLf => match byte {
                b'\n' => State::Done,
                _ => return bad,
            },
            State::Data { .. } | State::Done => self.state,
        })
    }
}

fn after_size_line(size: u64) -> State {
    if size == 0 {
        State::TrailerStart
    } else {
        State::Data { remaining: size }
    }
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The chunk size line for `len` bytes of data ("<hex>\r\n"), in a stack array; the second
/// value is how many of its bytes are used.
pub fn chunk_header(len: usize) -> ([u8; CHUNK_HEADER_MAX], usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; CHUNK_HEADER_MAX];
    let digits = if len == 0 {
        1
    } else {
        (usize::BITS - len.leading_zeros()).div_ceil(4) as usize
    };
    for (i, slot) in out[..digits].iter_mut().enumerate() {
        let shift = 4 * (digits - 1 - i);
        *slot = HEX[(len >> shift) & 0xf];
    }
    out[digits] = b'\r';
    out[digits + 1] = b'\n';
    (out, digits + 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of the given sizes (cycled); returns the body, what
    /// stayed in the buffer after the end, or the error.
    fn decode_in_pieces(input: &[u8], split: usize) -> Result<(Vec<u8>, Vec<u8>), RequestError> {
        let mut decoder = ChunkedDecoder::new();
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match decoder.decode(&mut buf)? {
                Chunk::Data(d) => {
                    assert!(!d.is_empty());
                    body.extend_from_slice(&d);
                }
                Chunk::Done => {
                    let mut rest = buf.to_vec();
                    rest.extend_from_slice(&input[fed..]);
                    return Ok((body, rest));
                }
                Chunk::NeedMore if fed == input.len() => {
                    return Ok((body, b"<incomplete>".to_vec()))
                }
                Chunk::NeedMore => {
                    let end = if fed < split {
                        split.min(input.len())
                    } else {
                        input.len()
                    };
                    let end = end.max(fed + 1).min(input.len());
                    buf.extend_from_slice(&input[fed..end]);
                    fed = end;
                }
            }
        }
    }

    const BODY: &[u8] =
        b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nTrailer: x\r\nT2: y\r\n\r\nNEXT";

    #[test]
    fn decodes_at_every_split() {
        for split in 0..=BODY.len() {
            let (body, rest) = decode_in_pieces(BODY, split).unwrap();
            assert_eq!(body, b"helloabcdefghijklmnopqrstuvwxyz", "split {split}");
            assert_eq!(rest, b"NEXT", "split {split}");
        }
    }

    #[test]
    fn accepts_bare_lf_and_extension_spacing() {
        let (body, rest) = decode_in_pieces(b"3 ; a=b\nabc\n0\n\n", 0).unwrap();
        assert_eq!((body.as_slice(), rest.as_slice()), (&b"abc"[..], &b""[..]));
    }

    #[test]
    fn incomplete_input_needs_more() {
        let (body, rest) = decode_in_pieces(b"5\r\nhel", 0).unwrap();
        assert_eq!(
            (body.as_slice(), rest.as_slice()),
            (&b"hel"[..], &b"<incomplete>"[..])
        );
    }

    #[test]
    fn bad_framing_is_refused() {
        let cases: [&[u8]; 9] = [
            b"x\r\n",
            b"\r\n",
            b";\r\n",
            b"-1\r\n",
            b"3\rX",
            b"3\r\nabcX",
            b"3\r\nabc\rX",
            b"0\r\n\rX",
            b"8000000000000000\r\n",
        ];
        for c in cases {
            assert_eq!(
                decode_in_pieces(c, 0),
                Err(RequestError::BadChunkedBody),
                "{:?}",
                String::from_utf8_lossy(c)
            );
        }
        assert_eq!(
            decode_in_pieces(b"10000000000000000\r\n", 0),
            Err(RequestError::BadChunkedBody)
        );
        // The largest size accepted is 2^63 - 1, written with leading zeros or not.
        let mut decoder = ChunkedDecoder::new();
        let mut buf = BytesMut::from(&b"007fffffffffffffff\r\nab"[..]);
        assert_eq!(
            decoder.decode(&mut buf),
            Ok(Chunk::Data(Bytes::from_static(b"ab")))
        );
    }

    #[test]
    fn done_is_sticky() {
        let mut decoder = ChunkedDecoder::new();
        let mut buf = BytesMut::from(LAST_CHUNK);
        assert_eq!(decoder.decode(&mut buf), Ok(Chunk::Done));
        assert!(decoder.is_done());
        buf.extend_from_slice(b"GET");
        assert_eq!(decoder.decode(&mut buf), Ok(Chunk::Done));
        assert_eq!(&buf[..], b"GET");
    }

    #[test]
    fn chunk_headers() {
        for (len, want) in [
            (0usize, &b"0\r\n"[..]),
            (1, b"1\r\n"),
            (15, b"f\r\n"),
            (16, b"10\r\n"),
            (1024, b"400\r\n"),
            (0xdead_beef, b"deadbeef\r\n"),
            (0xffff_ffff, b"ffffffff\r\n"),
        ] {
            let (buf, n) = chunk_header(len);
            assert_eq!(&buf[..n], want);
        }
    }
}
