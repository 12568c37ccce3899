//! `hash key` and `hash key consistent`, with nginx's functions, so that a key maps to the
//! same peer under nginx and portcullis.
//!
//! Plain hash is Cache::Memcached's: `(crc32([rehash] key) >> 16) & 0x7fff` added to the
//! previous value, modulo the total weight, walked over the peers by weight; a rejected
//! peer rehashes with the attempt number prepended. Consistent hash is Cache::Memcached::
//! Fast's ketama ring: 160 points per unit of weight for each `server`, the first point at
//! `crc32(host "\0" port)` continued with the previous point's bytes, and a key goes to the
//! first point at or after `crc32(key)`; adding a peer moves only the keys that land on its
//! new points.

use super::{round_robin, Key, LocalState, PeerId, Tried, Upstream, MAX_HASH_TRIES};

/// Points on the ring per unit of a peer's weight.
pub(super) const POINTS_PER_WEIGHT: u64 = 160;

/// The consistent-hash ring: points sorted by hash, each naming a `server` (an index into
/// the distinct `server` texts of the primary peers).
#[derive(Debug)]
pub(super) struct Ring {
    points: Vec<(u32, u32)>,
    /// For each primary peer, the index of its `server` text.
    peer_server: Vec<u32>,
}

impl Ring {
    /// Builds nginx's ring for the primary peers of a group, given as (`server` text,
    /// weight) in configuration order.
    pub(super) fn new<'a>(peers: impl Iterator<Item = (&'a str, u32)>) -> Ring {
        let mut servers: Vec<&str> = Vec::new();
        let mut peer_server = Vec::new();
        let mut points = Vec::new();
        for (server, weight) in peers {
            let index = match servers.iter().position(|s| *s == server) {
                Some(i) => i,
                None => {
                    servers.push(server);
                    servers.len() - 1
                }
            };
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            peer_server.push(index);
            let (host, port) = split_server(server);
            let mut base = Crc32::new();
            base.update(host.as_bytes());
            base.update(b"\0");
            base.update(port.as_bytes());
            let mut prev: u32 = 0;
            for _ in 0..u64::from(weight) * POINTS_PER_WEIGHT {
                let mut crc = base.clone();
                // nginx appends the previous hash as it lies in memory (little-endian on
                // the machines it builds the documented ring on).
                crc.update(&prev.to_le_bytes());
                prev = crc.finish();
                points.push((prev, index));
            }
        }
        points.sort_by_key(|&(hash, _)| hash);
        points.dedup_by_key(|&mut (hash, _)| hash);
        Ring {
            points,
            peer_server,
        }
    }

    /// The first point at or after `hash` (may be one past the end; callers wrap).
    fn find(&self, hash: u32) -> usize {
        self.points.partition_point(|&(h, _)| h < hash)
    }

    /// The `server` index of the point at ring position `pos`, wrapping.
    fn server_at(&self, pos: u64) -> u32 {
        let len = self.points.len() as u64;
        // Non-empty: a group has a primary peer of weight at least 1.
        let i = usize::try_from(pos % len.max(1)).unwrap_or(0);
        self.points.get(i).map_or(u32::MAX, |&(_, s)| s)
    }
}

/// nginx's split of a `server` text for the ring: `unix:` paths whole, else the host and
/// the digits after the last `:` (none if there is no such port).
fn split_server(server: &str) -> (&str, &str) {
    if server.len() >= 5 && server[..5].eq_ignore_ascii_case("unix:") {
        return (&server[5..], "");
    }
    let digits = server.bytes().rev().take_while(u8::is_ascii_digit).count();
    let colon = server.len() - digits;
    if colon > 0 && server.as_bytes()[colon - 1] == b':' {
        return (&server[..colon - 1], &server[colon..]);
    }
    (server, "")
}

fn key_bytes<'a>(key: Key<'a>) -> &'a [u8] {
    match key {
        Key::Bytes(k) => k,
        _ => &[],
    }
}

/// `hash key`.
pub(super) fn select(
    up: &Upstream,
    local: &mut LocalState,
    key: Key<'_>,
    tried: &mut Tried,
    now_ms: u64,
) -> Option<usize> {
    let key = key_bytes(key);
    if tried.tries > MAX_HASH_TRIES || up.single || key.is_empty() || up.total_weight == 0 {
        return round_robin::select(up, local, tried, now_ms);
    }
    loop {
        let mut crc = Crc32::new();
        if tried.rehash > 0 {
            let mut digits = [0u8; 10];
            crc.update(decimal(tried.rehash, &mut digits));
        }
        crc.update(key);
        let hash = (crc.finish() >> 16) & 0x7fff;
        tried.hash = tried.hash.wrapping_add(u64::from(hash)) & u64::from(u32::MAX);
        tried.rehash += 1;
        let p = up.weighted_index(tried.hash);
        if !tried.contains(PeerId(p)) && up.peers[p].usable(now_ms) {
            return Some(p);
        }
        tried.tries += 1;
        if tried.tries > MAX_HASH_TRIES {
            return round_robin::select(up, local, tried, now_ms);
        }
    }
}

/// `hash key consistent`.
pub(super) fn select_consistent(
    up: &Upstream,
    ring: &Ring,
    local: &mut LocalState,
    key: Key<'_>,
    tried: &mut Tried,
    now_ms: u64,
) -> Option<usize> {
    let key = key_bytes(key);
    if tried.tries > MAX_HASH_TRIES || up.single || key.is_empty() || ring.points.is_empty() {
        return round_robin::select(up, local, tried, now_ms);
    }
    if !tried.positioned {
        let mut crc = Crc32::new();
        crc.update(key);
        tried.hash = ring.find(crc.finish()) as u64;
        tried.positioned = true;
    }
    loop {
        let server = ring.server_at(tried.hash);
        // Smooth round robin among the addresses of that `server`.
        let mut best: Option<usize> = None;
        let mut total: i64 = 0;
        for (i, &s) in ring.peer_server.iter().enumerate() {
            let peer = &up.peers[i];
            if s != server || tried.contains(PeerId(i)) || !peer.usable(now_ms) {
                continue;
            }
            // In the same thousandths as round robin's, whose counters these are too.
            let effective = peer.ramped(peer.effective_weight(), now_ms);
            local.current[i] += effective;
            total += effective;
            peer.recover_weight();
            if !matches!(best, Some(b) if local.current[b] >= local.current[i]) {
                best = Some(i);
            }
        }
        if let Some(best) = best {
            local.current[best] -= total;
            return Some(best);
        }
        tried.hash += 1;
        tried.tries += 1;
        if tried.tries > MAX_HASH_TRIES {
            return round_robin::select(up, local, tried, now_ms);
        }
    }
}

/// `n` in decimal, written into `buf`.
fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[start..];
        }
    }
}

/// CRC-32 (IEEE 802.3, reflected), nginx's `ngx_crc32_*`.
#[derive(Clone)]
pub(super) struct Crc32(u32);

/// The byte-at-a-time table for the reflected polynomial 0xEDB88320.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

impl Crc32 {
    pub(super) fn new() -> Crc32 {
        Crc32(0xFFFF_FFFF)
    }

    pub(super) fn update(&mut self, data: &[u8]) {
        let mut c = self.0;
        for &b in data {
            c = CRC_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
        }
        self.0 = c;
    }

    pub(super) fn finish(&self) -> u32 {
        self.0 ^ 0xFFFF_FFFF
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crc(data: &[u8]) -> u32 {
        let mut c = Crc32::new();
        c.update(data);
        c.finish()
    }

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc(b""), 0);
    }

    #[test]
    fn server_split_as_nginx() {
        assert_eq!(split_server("10.0.0.1:8080"), ("10.0.0.1", "8080"));
        assert_eq!(split_server("backend"), ("backend", ""));
        assert_eq!(split_server("[::1]:80"), ("[::1]", "80"));
        assert_eq!(split_server("[::1]"), ("[::1]", ""));
        assert_eq!(split_server("unix:/tmp/s"), ("/tmp/s", ""));
        assert_eq!(split_server("host:"), ("host", ""));
    }

    #[test]
    fn decimal_digits() {
        let mut buf = [0u8; 10];
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(decimal(17, &mut buf), b"17");
        assert_eq!(decimal(u32::MAX, &mut buf), b"4294967295");
    }

    #[test]
    fn ring_points_per_weight_and_sorted() {
        let ring = Ring::new([("a:1", 1), ("b:1", 2)].into_iter());
        assert_eq!(ring.points.len(), 3 * POINTS_PER_WEIGHT as usize);
        assert!(ring.points.windows(2).all(|w| w[0].0 < w[1].0));
        let b_points = ring.points.iter().filter(|p| p.1 == 1).count();
        assert_eq!(b_points, 2 * POINTS_PER_WEIGHT as usize);
    }

    #[test]
    fn addresses_of_one_server_share_points() {
        let ring = Ring::new([("h:80", 1), ("h:80", 1)].into_iter());
        assert_eq!(ring.points.len(), POINTS_PER_WEIGHT as usize);
        assert_eq!(ring.peer_server, vec![0, 0]);
    }
}
