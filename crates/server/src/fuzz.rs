//! The checks the fuzz targets (`fuzz/`) run on arbitrary bytes for the server's own
//! parsers, here so that the inputs kept in `fuzz/corpus/` and `fuzz/regressions/` are
//! replayed by the tests too. Each panics when a parser breaks a promise.

use bytes::{Bytes, BytesMut};
use portcullis_http::{parse_request_head, HeadLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::conn::proxy_protocol;

/// A connection's first bytes read as a PROXY protocol header (version 1 or 2): a header
/// taken is within the bytes and not empty, reads the same from its own bytes alone (what
/// follows it is the request's), and names addresses written with an address's bytes only
/// (nginx 1.22 checks no more than that: `19101.5.80.2` passes, as in nginx).
pub fn proxy_protocol(data: &[u8]) {
    let Ok((len, named)) = proxy_protocol::parse(data) else {
        return;
    };
    assert!(len > 0 && len <= data.len(), "{len} of {}", data.len());
    assert_eq!(
        proxy_protocol::parse(&data[..len]).ok(),
        Some((len, named.clone()))
    );
    if let Some(p) = named {
        for addr in [&p.src_addr, &p.dst_addr] {
            let address_byte = |b: u8| b.is_ascii_hexdigit() || b == b':' || b == b'.';
            assert!(addr.bytes().all(address_byte), "{addr:?}");
        }
    }
}

/// The HTTP/2 frames a client sends after the connection preface, through the server's
/// HTTP/2 path: the `h2` crate's frame and HPACK decoding, set up as a connection with the
/// default `http2_*` settings is, then
/// each request the connection accepts rebuilt as the head the phases read and parsed with
/// the server's limits. The connection must end (the client's bytes run out) without a
/// panic, and every rebuilt head must be whole: parsed, or refused with a status.
pub fn h2_frames(data: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let limits = HeadLimits::default();
    runtime.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut input = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        input.extend_from_slice(data);
        // The client writes its bytes, then reads whatever the server answers until the
        // server closes.
        let client = async move {
            let _ = client.write_all(&input).await;
            let _ = client.shutdown().await;
            let mut sink = [0u8; 4096];
            while let Ok(n) = client.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        };
        let server = async move {
            let settings = crate::h2::conf::Http2Conf::default();
            let handshake = crate::h2::builder(&settings, crate::h2::header_list_max(&limits))
                .handshake::<_, Bytes>(server)
                .await;
            let Ok(mut conn) = handshake else {
                return;
            };
            let limits = HeadLimits {
                header_buffer_size: usize::MAX,
                ..limits
            };
            let mut head = BytesMut::new();
            while let Some(Ok((request, _respond))) = conn.accept().await {
                let (parts, body) = request.into_parts();
                let line = crate::h2::rebuild_head(&mut head, &parts, !body.is_end_stream());
                assert!(line <= head.len());
                // Whole: never "read more", which over HTTP/2 would wait forever.
                assert!(!matches!(parse_request_head(&mut head, &limits), Ok(None)));
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            tokio::join!(client, server);
        })
        .await
        .expect("the connection ends when the client's bytes run out");
    });
}
