//! The PROXY protocol on a `listen ... proxy_protocol` address, as nginx reads it: each
//! connection starts with the header a load balancer puts before the client's bytes, in
//! version 1 (a line of text) or 2 (binary), naming the client's address and port and the
//! ones it reached (`$proxy_protocol_addr`, `$proxy_protocol_port`,
//! `$proxy_protocol_server_addr`, `$proxy_protocol_server_port`; `real_ip_header
//! proxy_protocol` takes the client's). The header must come whole in the connection's
//! first bytes, as nginx requires; a broken one is logged at `error` and the connection
//! closed with no answer. `UNKNOWN` (version 1), the `LOCAL` command and other families or
//! transports (version 2) are headers that name nothing. Version 2's TLVs are passed over.

use std::net::Ipv4Addr;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// What a header names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProxyProtocol {
    /// The client's address, as version 1 wrote it or as nginx writes version 2's.
    pub src_addr: String,
    pub src_port: u16,
    pub dst_addr: String,
    pub dst_port: u16,
}

/// How much of a connection's first bytes is looked at for the header before a TLS
/// handshake: nginx's longest version 1 header (on a plain address it is the default
/// server's `client_header_buffer_size`, nginx's first read of a request head).
pub(crate) const TLS_FIRST_READ: usize = 107;

const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";
/// Version 2's fixed part: the signature, version and command, family and transport, length.
const V2_FIXED: usize = 16;

/// Why a connection closes before its header is read, with what nginx logs and at which
/// level (`error` for a broken header, `info` for a client that went away or timed out).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Failed {
    pub info: bool,
    pub message: String,
}

impl Failed {
    fn error(message: impl Into<String>) -> Failed {
        Failed {
            info: false,
            message: message.into(),
        }
    }

    /// A client that went away or said nothing, logged at `info`.
    fn info(message: impl Into<String>) -> Failed {
        Failed {
            info: true,
            message: format!("{} while reading PROXY protocol", message.into()),
        }
    }
}

/// Reads the header at the start of `stream`, in one read of at most `first_read` bytes as
/// nginx reads it: what it names, and the bytes read after it (the start of the request).
/// Before a TLS handshake (`tls`) the bytes are looked at in place and only the header is
/// taken, so that nothing of the handshake is read.
pub(crate) async fn read(
    stream: &mut TcpStream,
    tls: bool,
    first_read: usize,
    timeout: Duration,
) -> Result<(Option<ProxyProtocol>, BytesMut), Failed> {
    let mut buf = BytesMut::zeroed(first_read);
    let first = async {
        match tls {
            true => stream.peek(&mut buf).await,
            false => stream.read(&mut buf).await,
        }
    };
    let n = match tokio::time::timeout(timeout, first).await {
        Ok(Ok(n)) if n > 0 => n,
        Ok(Ok(_)) => return Err(Failed::info("client closed connection")),
        Ok(Err(e)) => {
            return Err(Failed::info(format!(
                "recv() failed {}",
                crate::log::os_error(&e)
            )))
        }
        Err(_) => return Err(Failed::info("client timed out (110: Connection timed out)")),
    };
    buf.truncate(n);
    let (len, named) = parse(&buf).map_err(|f| match f.message.is_empty() {
        true => f,
        false => Failed::error(format!("{} while reading PROXY protocol", f.message)),
    })?;
    if tls {
        stream
            .read_exact(&mut buf[..len])
            .await
            .map_err(|e| Failed::info(format!("recv() failed {}", crate::log::os_error(&e))))?;
        buf.clear();
    } else {
        let _ = buf.split_to(len);
    }
    Ok((named, buf))
}

/// nginx's `ngx_proxy_protocol_read` of a connection's first bytes: the header's length and
/// what it names.
pub(crate) fn parse(buf: &[u8]) -> Result<(usize, Option<ProxyProtocol>), Failed> {
    if buf.len() >= V2_FIXED && buf.starts_with(V2_SIGNATURE) {
        return v2(buf);
    }
    // nginx 1.22 logs all it read.
    v1(buf).ok_or_else(|| {
        Failed::error(format!(
            "broken header: \"{}\"",
            String::from_utf8_lossy(buf)
        ))
    })
}

fn v1(buf: &[u8]) -> Option<(usize, Option<ProxyProtocol>)> {
    if buf.len() < 8 || !buf.starts_with(b"PROXY ") {
        return None;
    }
    let mut p = 6;
    if buf[p..].starts_with(b"UNKNOWN") {
        p += 7;
        let end = buf[p..].windows(2).position(|w| w == b"\r\n")?;
        return Some((p + end + 2, None));
    }
    let family = buf.get(p..p + 5)?;
    if !family.starts_with(b"TCP") || !matches!(family[3], b'4' | b'6') || family[4] != b' ' {
        return None;
    }
    p += 5;
    let (src_addr, p) = v1_addr(buf, p)?;
    let (dst_addr, p) = v1_addr(buf, p)?;
    let (src_port, p) = v1_port(buf, p, b' ')?;
    let (dst_port, p) = v1_port(buf, p, b'\r')?;
    if buf.get(p) != Some(&b'\n') {
        return None;
    }
    Some((
        p + 1,
        Some(ProxyProtocol {
            src_addr,
            src_port,
            dst_addr,
            dst_port,
        }),
    ))
}

/// An address ended by a space: hexadecimal digits, dots and colons, as written.
fn v1_addr(buf: &[u8], start: usize) -> Option<(String, usize)> {
    let len = buf
        .get(start..)?
        .iter()
        .position(|&c| c == b' ' || !(c == b':' || c == b'.' || c.is_ascii_hexdigit()))?;
    if buf[start + len] != b' ' {
        return None;
    }
    let addr = String::from_utf8_lossy(&buf[start..start + len]).into_owned();
    Some((addr, start + len + 1))
}

/// A port ended by `end`: decimal digits, at most 65535.
fn v1_port(buf: &[u8], start: usize, end: u8) -> Option<(u16, usize)> {
    let len = buf.get(start..)?.iter().position(|&c| c == end)?;
    let digits = &buf[start..start + len];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let port = std::str::from_utf8(digits).ok()?.parse::<u32>().ok()?;
    Some((u16::try_from(port).ok()?, start + len + 1))
}

fn v2(buf: &[u8]) -> Result<(usize, Option<ProxyProtocol>), Failed> {
    let version = buf[12] >> 4;
    if version != 2 {
        return Err(Failed::error(format!(
            "unknown PROXY protocol version: {version}"
        )));
    }
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let Some(body) = buf.get(V2_FIXED..V2_FIXED + len) else {
        return Err(Failed::error("header is too large"));
    };
    let end = V2_FIXED + len;
    // Only the PROXY command over a stream names addresses.
    let (command, family, transport) = (buf[12] & 0x0f, buf[13] >> 4, buf[13] & 0x0f);
    if command != 1 || transport != 1 {
        return Ok((end, None));
    }
    let port = |at: usize| u16::from_be_bytes([body[at], body[at + 1]]);
    let named = match family {
        1 => {
            // nginx closes the connection without a word when the addresses do not fit.
            if len < 12 {
                return Err(Failed::error(String::new()));
            }
            let addr =
                |at: usize| Ipv4Addr::new(body[at], body[at + 1], body[at + 2], body[at + 3]);
            ProxyProtocol {
                src_addr: addr(0).to_string(),
                dst_addr: addr(4).to_string(),
                src_port: port(8),
                dst_port: port(10),
            }
        }
        2 => {
            if len < 36 {
                return Err(Failed::error(String::new()));
            }
            let addr = |at: usize| {
                let octets: [u8; 16] = body[at..at + 16].try_into().expect("16 bytes");
                crate::net::inet6_ntop(&octets)
            };
            ProxyProtocol {
                src_addr: addr(0),
                dst_addr: addr(16),
                src_port: port(32),
                dst_port: port(34),
            }
        }
        _ => return Ok((end, None)),
    };
    Ok((end, Some(named)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(src: &str, sp: u16, dst: &str, dp: u16) -> Option<ProxyProtocol> {
        Some(ProxyProtocol {
            src_addr: src.into(),
            src_port: sp,
            dst_addr: dst.into(),
            dst_port: dp,
        })
    }

    #[test]
    fn version_1_as_nginx_reads_it() {
        let h = b"PROXY TCP4 1.2.3.4 5.6.7.8 1111 2222\r\nGET /";
        assert_eq!(
            parse(h).unwrap(),
            (h.len() - 5, named("1.2.3.4", 1111, "5.6.7.8", 2222))
        );
        // Addresses are taken as written; a port may be 0.
        let h = b"PROXY TCP6 ::1 1.2.3 0 2\r\n";
        assert_eq!(parse(h).unwrap(), (h.len(), named("::1", 0, "1.2.3", 2)));
        assert_eq!(parse(b"PROXY UNKNOWN x y\r\nGET").unwrap(), (19, None));
        for bad in [
            &b"GET / HTTP/1.0\r\n\r\n"[..],
            b"PROXY TCP4 1.2.3.x 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 70000\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 \r\n",
            b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rx",
            b"PROXY UNKNOWN",
            b"PROXY",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.message.starts_with("broken header: \""), "{e:?}");
            assert!(!e.info);
        }
    }

    fn v2_header(version_command: u8, family_transport: u8, body: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.extend([version_command, family_transport]);
        h.extend((body.len() as u16).to_be_bytes());
        h.extend(body);
        h
    }

    #[test]
    fn version_2_as_nginx_reads_it() {
        let inet = [9, 8, 7, 6, 1, 2, 3, 4, 0x11, 0x5c, 0, 80];
        let mut h = v2_header(0x21, 0x11, &inet);
        let len = h.len();
        h.extend(b"GET /");
        assert_eq!(
            parse(&h).unwrap(),
            (len, named("9.8.7.6", 4444, "1.2.3.4", 80))
        );
        // IPv6, with a TLV after the addresses.
        let mut inet6 = vec![0; 15];
        inet6.push(1);
        inet6.extend([0x20, 1]);
        inet6.extend([0; 13]);
        inet6.push(2);
        inet6.extend([0, 5, 0, 6, 4, 0, 2, 0, 0]);
        let h = v2_header(0x21, 0x21, &inet6);
        assert_eq!(parse(&h).unwrap(), (h.len(), named("::1", 5, "2001::2", 6)));
        // LOCAL, UDP and UNIX name nothing.
        for (vc, ft) in [(0x20, 0x11), (0x21, 0x12), (0x21, 0x31)] {
            let h = v2_header(vc, ft, &inet);
            assert_eq!(parse(&h).unwrap(), (h.len(), None));
        }
        let e = parse(&v2_header(0x31, 0x11, &inet)).unwrap_err();
        assert_eq!(e.message, "unknown PROXY protocol version: 3");
        let mut long = v2_header(0x21, 0x11, &inet);
        long[15] = 200;
        assert_eq!(parse(&long).unwrap_err().message, "header is too large");
        assert!(parse(&v2_header(0x21, 0x11, &inet[..4])).is_err());
    }
}
