//! `ip_hash`: the client's /24 (IPv4) or whole address (IPv6) picks the peer, with nginx's
//! hash, so a client keeps its peer across requests and across nginx and portcullis.

use super::{round_robin, Key, LocalState, PeerId, Tried, Upstream, MAX_HASH_TRIES};

/// nginx's starting value of the hash.
pub(super) const INITIAL_HASH: u64 = 89;
const MULTIPLIER: u32 = 113;
const MODULUS: u32 = 6271;
/// The bytes nginx hashes for a client that has no IP address (a unix socket).
const PSEUDO_ADDR: [u8; 3] = [0, 0, 0];

pub(super) fn select(
    up: &Upstream,
    local: &mut LocalState,
    key: Key<'_>,
    tried: &mut Tried,
    now_ms: u64,
) -> Option<usize> {
    if tried.tries > MAX_HASH_TRIES || up.single || up.total_weight == 0 {
        return round_robin::select(up, local, tried, now_ms);
    }
    let v4;
    let v6;
    let addr: &[u8] = match key {
        Key::ClientAddr(std::net::IpAddr::V4(ip)) => {
            v4 = ip.octets();
            &v4[..3]
        }
        Key::ClientAddr(std::net::IpAddr::V6(ip)) => {
            v6 = ip.octets();
            &v6
        }
        _ => &PSEUDO_ADDR,
    };
    // The state is below MODULUS, so it fits a u32.
    let mut hash = u32::try_from(tried.hash).unwrap_or(0);
    loop {
        for &b in addr {
            hash = (hash * MULTIPLIER + u32::from(b)) % MODULUS;
        }
        let p = up.weighted_index(u64::from(hash));
        if !tried.contains(PeerId(p)) && up.peers[p].usable(now_ms) {
            tried.hash = u64::from(hash);
            return Some(p);
        }
        tried.tries += 1;
        if tried.tries > MAX_HASH_TRIES {
            return round_robin::select(up, local, tried, now_ms);
        }
    }
}
