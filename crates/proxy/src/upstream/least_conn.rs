//! `least_conn`: the peer with the fewest active attempts for its weight; among peers tied
//! on that, smooth weighted round robin.

use super::{round_robin, LocalState, PeerId, Tried, Upstream};
use std::ops::Range;

pub(super) fn select(
    up: &Upstream,
    local: &mut LocalState,
    tried: &mut Tried,
    now_ms: u64,
) -> Option<usize> {
    if up.single {
        return round_robin::select(up, local, tried, now_ms);
    }
    if !tried.on_backup {
        if let Some(i) = least(up, up.primaries(), local, tried, now_ms) {
            return Some(i);
        }
        if up.backups().is_empty() {
            return None;
        }
        tried.on_backup = true;
    }
    least(up, up.backups(), local, tried, now_ms)
}

/// nginx's `ngx_http_upstream_get_least_conn_peer` over `range`: `conns / weight` compared
/// as `conns_a * weight_b < conns_b * weight_a`.
fn least(
    up: &Upstream,
    range: Range<usize>,
    local: &mut LocalState,
    tried: &Tried,
    now_ms: u64,
) -> Option<usize> {
    let load = |i: usize| {
        let peer = &up.peers[i];
        let weight = peer.ramped(i64::from(peer.weight()), now_ms);
        (
            u128::from(peer.conns()),
            u128::try_from(weight).unwrap_or(1),
        )
    };
    let mut best: Option<usize> = None;
    let mut many = false;
    for i in range.clone() {
        if tried.contains(PeerId(i)) || !up.peers[i].usable(now_ms) {
            continue;
        }
        let Some(b) = best else {
            best = Some(i);
            continue;
        };
        let ((conns, weight), (best_conns, best_weight)) = (load(i), load(b));
        if conns * best_weight < best_conns * weight {
            best = Some(i);
            many = false;
        } else if conns * best_weight == best_conns * weight {
            many = true;
        }
    }
    let mut best = best?;
    if many {
        // Round robin among the peers tied with the first best one, from it on.
        let mut total: i64 = 0;
        let first = best;
        for i in first..range.end {
            let peer = &up.peers[i];
            if tried.contains(PeerId(i)) || peer.is_down() {
                continue;
            }
            let ((conns, weight), (best_conns, best_weight)) = (load(i), load(best));
            if conns * best_weight != best_conns * weight || !peer.usable(now_ms) {
                continue;
            }
            let effective = peer.ramped(peer.effective_weight(), now_ms);
            local.current[i] += effective;
            total += effective;
            peer.recover_weight();
            if local.current[i] > local.current[best] {
                best = i;
            }
        }
        local.current[best] -= total;
    }
    Some(best)
}
