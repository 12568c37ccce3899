//! `random [two [least_conn]]`: a peer drawn with probability proportional to its weight;
//! with `two`, two distinct usable peers are drawn and the one with fewer active attempts
//! for its weight wins.

use super::{round_robin, LocalState, PeerId, Tried, Upstream, MAX_HASH_TRIES};
use std::hash::{BuildHasher, Hasher};

/// Cumulative weights of the primary peers, nginx's `ranges`.
pub(super) fn ranges(up_weights: impl Iterator<Item = u32>) -> Vec<u64> {
    up_weights
        .scan(0u64, |total, w| {
            *total += u64::from(w);
            Some(*total)
        })
        .collect()
}

pub(super) fn select(
    up: &Upstream,
    two: bool,
    ranges: &[u64],
    local: &mut LocalState,
    tried: &mut Tried,
    now_ms: u64,
) -> Option<usize> {
    let fallback = if two { up.primary < 2 } else { up.single };
    if tried.tries > MAX_HASH_TRIES || fallback || up.total_weight == 0 {
        return round_robin::select(up, local, tried, now_ms);
    }
    let mut first: Option<usize> = None;
    loop {
        let i = peek(ranges, up.total_weight, &mut local.rng);
        let usable = Some(i) != first && !tried.contains(PeerId(i)) && up.peers[i].usable(now_ms);
        if usable {
            match first {
                None if two => first = Some(i),
                None => return Some(i),
                Some(prev) => return Some(less_loaded(up, prev, i)),
            }
        }
        tried.tries += 1;
        if tried.tries > MAX_HASH_TRIES {
            return round_robin::select(up, local, tried, now_ms);
        }
    }
}

/// Of the two draws, the second unless the first has fewer active attempts for its weight
/// (nginx's `peer->conns * prev->weight > prev->conns * peer->weight`).
fn less_loaded(up: &Upstream, prev: usize, peer: usize) -> usize {
    let (p, q) = (&up.peers[prev], &up.peers[peer]);
    if q.conns() * u64::from(p.weight()) > p.conns() * u64::from(q.weight()) {
        prev
    } else {
        peer
    }
}

/// nginx's `ngx_http_upstream_peek_random_peer`: a point in `0..total` and the range it
/// falls in, by binary search.
fn peek(ranges: &[u64], total: u64, rng: &mut Rng) -> usize {
    let x = rng.next() % total;
    let (mut i, mut j) = (0, ranges.len());
    while j - i > 1 {
        let k = (i + j) / 2;
        if x < ranges[k - 1] {
            j = k;
        } else {
            i = k;
        }
    }
    i
}

/// A worker's generator: xorshift64*, seeded from the standard library's per-process
/// random keys, as nginx seeds `random()` per worker.
#[derive(Debug, Clone)]
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new() -> Rng {
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        // xorshift never leaves zero.
        Rng(seed | 1)
    }

    #[cfg(test)]
    pub(super) fn seeded(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peek_follows_weights() {
        let r = ranges([1, 3].into_iter());
        assert_eq!(r, vec![1, 4]);
        let mut rng = Rng::seeded(7);
        let mut counts = [0u32; 2];
        for _ in 0..40_000 {
            counts[peek(&r, 4, &mut rng)] += 1;
        }
        // Expected 10000 and 30000.
        assert!((9_000..11_000).contains(&counts[0]), "{counts:?}");
        assert!((29_000..31_000).contains(&counts[1]), "{counts:?}");
    }

    #[test]
    fn peek_single_range() {
        let mut rng = Rng::seeded(1);
        assert_eq!(peek(&[5], 5, &mut rng), 0);
    }
}
