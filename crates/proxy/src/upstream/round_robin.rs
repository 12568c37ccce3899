//! Smooth weighted round robin, nginx's default balancer and the fallback of the others.
//!
//! Each pass over the usable peers adds every peer's effective weight to its current
//! weight, picks the peer with the highest current weight (the first one on a tie) and
//! subtracts the pass's total from it; weights 5, 1, 1 give `a a b a c a a`. Backup peers
//! take over, for the rest of the request, when no primary peer is usable.

use super::{LocalState, PeerId, Tried, Upstream};
use std::ops::Range;

/// Round robin over the primary peers, then over the backup peers.
pub(super) fn select(
    up: &Upstream,
    local: &mut LocalState,
    tried: &mut Tried,
    now_ms: u64,
) -> Option<usize> {
    if !tried.on_backup {
        let found = if up.single {
            single(up, tried)
        } else {
            smooth(up, up.primaries(), local, tried, now_ms)
        };
        if found.is_some() {
            return found;
        }
        if up.backups().is_empty() {
            return None;
        }
        tried.on_backup = true;
    }
    smooth(up, up.backups(), local, tried, now_ms)
}

/// A group of one peer: nginx ignores its failures and never retries it.
fn single(up: &Upstream, tried: &Tried) -> Option<usize> {
    let peer = up.peers.first()?;
    let usable = !tried.contains(PeerId(0)) && peer.admits() && peer.is_healthy() && !peer.full();
    usable.then_some(0)
}

/// nginx's `ngx_http_upstream_get_peer` over `range`.
pub(super) fn smooth(
    up: &Upstream,
    range: Range<usize>,
    local: &mut LocalState,
    tried: &Tried,
    now_ms: u64,
) -> Option<usize> {
    let mut best: Option<usize> = None;
    let mut total: i64 = 0;
    for i in range {
        let peer = &up.peers[i];
        if tried.contains(PeerId(i)) || !peer.usable(now_ms) {
            continue;
        }
        let effective = peer.ramped(peer.effective_weight(), now_ms);
        local.current[i] += effective;
        total += effective;
        peer.recover_weight();
        if !matches!(best, Some(b) if local.current[b] >= local.current[i]) {
            best = Some(i);
        }
    }
    let best = best?;
    local.current[best] -= total;
    Some(best)
}
