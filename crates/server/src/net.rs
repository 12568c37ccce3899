//! Addresses and networks as nginx reads them in its configuration and its headers:
//! `ngx_ptocidr` (`10.0.0.0/8`, `::1`), `ngx_cidr_match`, and `ngx_parse_addr` with its own
//! IPv4 reader, `ngx_inet_addr`.

use std::net::{IpAddr, SocketAddr};

use portcullis_config::value;

/// A network: an address and the bits of its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl Cidr {
    /// An address or a network (`10.0.0.0/8`), as nginx's `ngx_ptocidr` reads it: the
    /// address as [`parse_addr`] reads it.
    pub fn parse(v: &str) -> Option<Cidr> {
        let (ip, bits) = match v.split_once('/') {
            Some((ip, bits)) => (
                parse_addr(ip.as_bytes())?,
                portcullis_config::value::parse_number(bits)?.min(255) as u8,
            ),
            None => return Some(Cidr::host(parse_addr(v.as_bytes())?)),
        };
        (bits <= max_bits(ip)).then_some(Cidr { addr: ip, bits })
    }

    /// The network of one address.
    pub fn host(ip: IpAddr) -> Cidr {
        Cidr {
            addr: ip,
            bits: max_bits(ip),
        }
    }

    /// The length of the prefix: the more, the more specific.
    pub fn bits(&self) -> u8 {
        self.bits
    }

    /// nginx's `ngx_cidr_match`: the same family (an IPv4-mapped IPv6 address counts as
    /// IPv4), the same network.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, addr) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }

    /// Whether two networks are the same once their host bits are masked off.
    pub fn same_network(&self, other: &Cidr) -> bool {
        self.bits == other.bits && self.contains(other.addr)
    }
}

fn max_bits(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

/// nginx's `ngx_parse_addr`: IPv4 as `ngx_inet_addr` reads it, else IPv6.
pub(crate) fn parse_addr(text: &[u8]) -> Option<IpAddr> {
    inet_addr(text).map(IpAddr::V4).or_else(|| {
        std::str::from_utf8(text)
            .ok()?
            .parse::<std::net::Ipv6Addr>()
            .ok()
            .map(IpAddr::V6)
    })
}

/// nginx's `ngx_inet_addr`: four decimal octets of at most 255 between three dots, leading
/// zeros and empty octets (0) allowed; 255.255.255.255 is its failure value, refused too.
pub(crate) fn inet_addr(text: &[u8]) -> Option<std::net::Ipv4Addr> {
    let (mut addr, mut octet, mut dots) = (0u32, 0u32, 0);
    for &c in text {
        match c {
            b'0'..=b'9' => {
                octet = octet * 10 + u32::from(c - b'0');
                if octet > 255 {
                    return None;
                }
            }
            b'.' => {
                addr = addr << 8 | octet;
                octet = 0;
                dots += 1;
            }
            _ => return None,
        }
    }
    if dots != 3 {
        return None;
    }
    let addr = addr << 8 | octet;
    (addr != u32::MAX).then_some(std::net::Ipv4Addr::from(addr))
}

/// nginx's `ngx_http_get_forwarded_addr`: the client's address that `values` (the
/// `X-Forwarded-For` fields, or another header's) give when `addr` is `trusted`: the last
/// address of the last field, or with `recursive` the last one not trusted itself, going
/// back through the fields. `None` when the header gives nothing (the address stays).
pub(crate) fn forwarded_addr(
    addr: SocketAddr,
    values: &[&[u8]],
    trusted: &dyn Fn(IpAddr) -> bool,
    recursive: bool,
) -> Option<SocketAddr> {
    let mut addr = addr;
    let mut found = Forwarded::Declined;
    for value in values.iter().rev() {
        let rc = forwarded(&mut addr, value, trusted, recursive);
        if !recursive {
            found = rc;
            break;
        }
        found = match (rc, found) {
            (Forwarded::Declined, Forwarded::Ok) => Forwarded::Done,
            (rc, _) => rc,
        };
        if found != Forwarded::Ok {
            break;
        }
    }
    (found != Forwarded::Declined).then_some(addr)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Forwarded {
    /// The connection is not trusted, or no address could be read.
    Declined,
    /// An address was taken, and recursion stopped at an address not trusted or unreadable.
    Done,
    /// An address was taken, and every one before it (with `real_ip_recursive`) too.
    Ok,
}

/// nginx's `ngx_http_get_forwarded_addr_internal`: from the end of `value`, the last
/// address, while `addr` (the connection's, then each address taken) is trusted.
fn forwarded(
    addr: &mut SocketAddr,
    value: &[u8],
    trusted: &dyn Fn(IpAddr) -> bool,
    recursive: bool,
) -> Forwarded {
    let mut found = false;
    let mut rest = value;
    loop {
        let stop = if found {
            Forwarded::Done
        } else {
            Forwarded::Declined
        };
        if !trusted(addr.ip()) {
            return stop;
        }
        // Trailing separators go, but never the first byte.
        let mut end = rest.len();
        while end > 1 && matches!(rest[end - 1], b' ' | b',') {
            end -= 1;
        }
        let list = &rest[..end];
        let start = list
            .iter()
            .skip(1)
            .rposition(|&b| b == b' ' || b == b',')
            .map_or(0, |i| i + 2);
        let Some(taken) = addr_port(&list[start..]) else {
            return stop;
        };
        *addr = taken;
        found = true;
        if !recursive || start == 0 {
            return Forwarded::Ok;
        }
        rest = &list[..start - 1];
    }
}

/// nginx's `ngx_parse_addr_port`: an address, with a port or not (`1.2.3.4`,
/// `1.2.3.4:80`, `::1`, `[::1]:80`, `[1.2.3.4]:80`); the port is 0 without one.
fn addr_port(text: &[u8]) -> Option<SocketAddr> {
    if let Some(ip) = parse_addr(text) {
        return Some(SocketAddr::new(ip, 0));
    }
    let (ip, port) = match text.strip_prefix(b"[") {
        Some(rest) => {
            let close = rest.iter().position(|&b| b == b']')?;
            let port = rest[close + 1..].strip_prefix(b":")?;
            (&rest[..close], port)
        }
        None => {
            let colon = text.iter().position(|&b| b == b':')?;
            (&text[..colon], &text[colon + 1..])
        }
    };
    let port = std::str::from_utf8(port).ok().and_then(value::parse_number);
    let port = port.filter(|p| (1..=65535).contains(p))?;
    Some(SocketAddr::new(parse_addr(ip)?, port as u16))
}

/// nginx's `ngx_inet6_ntop`: an IPv6 address as nginx writes it (the longest run of two or
/// more zero groups as `::`, and a last 32 bits in dotted form where the address starts with
/// enough zeros: `::ffff:1.2.3.4`, `::1.2.3.4`).
pub(crate) fn inet6_ntop(p: &[u8; 16]) -> String {
    use std::fmt::Write;
    let (mut zero, mut last, mut max, mut n) = (usize::MAX, usize::MAX, 1, 0);
    for i in (0..16).step_by(2) {
        if p[i] != 0 || p[i + 1] != 0 {
            if max < n {
                zero = last;
                max = n;
            }
            n = 0;
        } else {
            if n == 0 {
                last = i;
            }
            n += 1;
        }
    }
    if max < n {
        zero = last;
        max = n;
    }
    let mut out = String::with_capacity(40);
    let mut end = 16;
    if zero == 0 {
        if (max == 5 && p[10] == 0xff && p[11] == 0xff)
            || max == 6
            || (max == 7 && p[14] != 0 && p[15] != 1)
        {
            end = 12;
        }
        out.push(':');
    }
    let mut i = 0;
    while i < end {
        if i == zero {
            out.push(':');
            i += max * 2;
            continue;
        }
        let _ = write!(out, "{:x}", u16::from_be_bytes([p[i], p[i + 1]]));
        if i < 14 {
            out.push(':');
        }
        i += 2;
    }
    if end == 12 {
        let _ = write!(out, "{}.{}.{}.{}", p[12], p[13], p[14], p[15]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_written_as_nginx_writes_it() {
        let a = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
        for (addr, nginx) in [
            ("::1", "::1"),
            ("::", "::"),
            ("2001::2", "2001::2"),
            ("2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
            ("1::", "1::"),
            ("1:0:2:0:3:0:4:0", "1:0:2:0:3:0:4:0"),
            ("::ffff:1.2.3.4", "::ffff:1.2.3.4"),
            ("::1.2.3.4", "::1.2.3.4"),
            ("::abcd", "::0.0.171.205"),
        ] {
            assert_eq!(inet6_ntop(&a(addr)), nginx, "{addr}");
        }
    }

    fn take(value: &str, trusted: &[&str], recursive: bool) -> (Forwarded, String) {
        let mut addr: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let nets: Vec<Cidr> = trusted.iter().map(|n| Cidr::parse(n).unwrap()).collect();
        let trusted = |ip: IpAddr| nets.iter().any(|n| n.contains(ip));
        let rc = forwarded(&mut addr, value.as_bytes(), &trusted, recursive);
        (rc, addr.to_string())
    }

    #[test]
    fn forwarded_addresses_are_read_as_nginx_reads_them() {
        let ok = |a: &str| (Forwarded::Ok, a.to_string());
        let done = |a: &str| (Forwarded::Done, a.to_string());
        assert_eq!(take("1.2.3.4", &["10.0.0.0/8"], false), ok("1.2.3.4:0"));
        assert_eq!(take("1.2.3.4:80", &["10.0.0.0/8"], false), ok("1.2.3.4:80"));
        assert_eq!(take("[::1]:80", &["10.0.0.0/8"], false), ok("[::1]:80"));
        assert_eq!(
            take("5.5.5.5, 10.0.0.9, ", &["10.0.0.0/8"], false),
            ok("10.0.0.9:0")
        );
        assert_eq!(
            take("5.5.5.5, 10.0.0.9", &["10.0.0.0/8"], true),
            ok("5.5.5.5:0")
        );
        assert_eq!(
            take("5.5.5.5, 6.6.6.6, 10.0.0.9", &["10.0.0.0/8"], true),
            done("6.6.6.6:0")
        );
        assert_eq!(
            take("bogus, 10.0.0.9", &["10.0.0.0/8"], true),
            done("10.0.0.9:0")
        );
        assert_eq!(
            take("10.0.0.8,10.0.0.9", &["10.0.0.0/8"], true),
            ok("10.0.0.8:0")
        );
        assert_eq!(
            take("1.2.3.4", &["192.168.0.0/16"], false),
            (Forwarded::Declined, "10.0.0.1:5000".into())
        );
        assert_eq!(take("x", &["10.0.0.0/8"], false).0, Forwarded::Declined);
        // As nginx's own parser reads IPv4.
        assert_eq!(take("01.2.3.4", &["10.0.0.0/8"], false), ok("1.2.3.4:0"));
        assert_eq!(take("1..2.3", &["10.0.0.0/8"], false), ok("1.0.2.3:0"));
        assert_eq!(
            take("[1.2.3.4]:80", &["10.0.0.0/8"], false),
            ok("1.2.3.4:80")
        );
        assert_eq!(
            take("255.255.255.255", &["10.0.0.0/8"], false).0,
            Forwarded::Declined
        );
        assert_eq!(
            take("1.1.1.1, ::ffff:10.0.0.2", &["10.0.0.0/8"], true),
            ok("1.1.1.1:0")
        );
        assert_eq!(
            take("1.2.3.4:0", &["10.0.0.0/8"], false).0,
            Forwarded::Declined
        );
    }
}
