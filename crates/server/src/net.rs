//! Addresses and networks as nginx reads them in its configuration and its headers:
//! `ngx_ptocidr` (`10.0.0.0/8`, `::1`), `ngx_cidr_match`, and `ngx_parse_addr` with its own
//! IPv4 reader, `ngx_inet_addr`.

use std::net::IpAddr;

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
fn inet_addr(text: &[u8]) -> Option<std::net::Ipv4Addr> {
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
