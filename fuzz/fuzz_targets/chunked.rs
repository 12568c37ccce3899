//! Chunked bodies from arbitrary bytes, delivered in two reads split where the first input
//! byte says. The decoder claims any split gives the same result: check it against feeding
//! everything at once.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use portcullis_http::{Chunk, ChunkedDecoder, RequestError};

/// What a decode run produced: the body bytes, how it ended, and what input was left.
#[derive(Debug, PartialEq)]
struct Outcome {
    body: Vec<u8>,
    end: Result<bool, RequestError>,
    rest: Vec<u8>,
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let split = usize::from(split).min(input.len());
    let whole = decode(&[input]);
    let parts = decode(&[&input[..split], &input[split..]]);
    assert_eq!(whole, parts);
});

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
