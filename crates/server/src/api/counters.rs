//! The counters behind the API, the metrics and the dashboard: per zone and per upstream
//! peer, kept by each worker in counters of its own (a load and a store, no locked
//! instruction, no cache line shared between cores), added up when read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use portcullis_proxy::upstream::Upstream;

use crate::request::Logged;
use crate::upstream::Group;

/// The histograms' bucket bounds, in microseconds, and as Prometheus's `le` labels.
pub(super) const BOUNDS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];
pub(super) const BOUNDS: [&str; 14] = [
    "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
    "2.5", "5", "10",
];

/// The status classes, as the `responses` counters are kept.
pub(super) const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Adds `by` to a counter only this worker's thread writes.
#[inline]
fn bump(c: &AtomicU64, by: u64) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Counters copied, by the one worker that writes them (a slab grown larger).
trait Copied {
    fn copied(&self) -> Self;
}

impl Copied for AtomicU64 {
    fn copied(&self) -> AtomicU64 {
        AtomicU64::new(get(self))
    }
}

impl<T: Copied, const N: usize> Copied for [T; N] {
    fn copied(&self) -> [T; N] {
        std::array::from_fn(|i| self[i].copied())
    }
}

impl Copied for Histogram {
    fn copied(&self) -> Histogram {
        Histogram {
            buckets: self.buckets.copied(),
            sum_us: self.sum_us.copied(),
        }
    }
}

impl Copied for ZoneCounters {
    fn copied(&self) -> ZoneCounters {
        ZoneCounters {
            requests: self.requests.copied(),
            responses: self.responses.copied(),
            received: self.received.copied(),
            sent: self.sent.copied(),
            time: self.time.copied(),
        }
    }
}

impl Copied for PeerCounters {
    fn copied(&self) -> PeerCounters {
        PeerCounters {
            requests: self.requests.copied(),
            responses: self.responses.copied(),
            fails: self.fails.copied(),
            sent: self.sent.copied(),
            received: self.received.copied(),
            header_us: self.header_us.copied(),
            time: self.time.copied(),
        }
    }
}

/// Durations in buckets (the last one past every bound), and their sum.
#[derive(Default)]
pub(super) struct Histogram {
    buckets: [AtomicU64; 15],
    sum_us: AtomicU64,
}

impl Histogram {
    pub(super) fn observe(&self, us: u64) {
        let i = BOUNDS_US.partition_point(|&b| b < us);
        bump(&self.buckets[i], 1);
        bump(&self.sum_us, us);
    }
}

/// One zone's counters in one worker.
#[derive(Default)]
struct ZoneCounters {
    requests: AtomicU64,
    /// By status class, 1xx to 5xx.
    responses: [AtomicU64; 5],
    received: AtomicU64,
    sent: AtomicU64,
    time: Histogram,
}

/// One peer's counters in one worker.
#[derive(Default)]
struct PeerCounters {
    requests: AtomicU64,
    responses: [AtomicU64; 5],
    /// Attempts that got no response (an error or a timeout), not those the client ended.
    fails: AtomicU64,
    /// Bytes sent to the peer and received from it.
    sent: AtomicU64,
    received: AtomicU64,
    /// The time to the response's head, summed over the responses.
    header_us: AtomicU64,
    /// The time of the responses, from the attempt's start to the end of the response.
    time: Histogram,
}

/// The class of a status, as an index of the `responses` counters.
pub(super) fn class(status: u16) -> usize {
    usize::from(status / 100).clamp(1, 5) - 1
}

/// One worker's counters for one load of the configuration.
pub(super) struct Slab {
    zones: Box<[ZoneCounters]>,
    /// Each group's peers by ID, with the group's number, which attempts name it by. The API
    /// adds peers: a worker whose slab has no room for one makes a larger copy.
    groups: Box<[(u64, Box<[PeerCounters]>)]>,
}

impl Slab {
    /// The counters of peer `id` of group `group`.
    fn peer(&self, group: u64, id: u32) -> Option<&PeerCounters> {
        let (_, peers) = self.groups.iter().find(|(g, _)| *g == group)?;
        peers.get(usize::try_from(id).ok()?)
    }

    /// Whether there are counters for every peer `l`'s attempts name in a group counted.
    fn has_room(&self, l: &Logged<'_, '_>) -> bool {
        let mut room = true;
        l.req.each_attempt(&mut |a| {
            if let Some((group, id)) = a.peer {
                let counted = self.groups.iter().any(|(g, _)| *g == group);
                room &= !counted || self.peer(group, id).is_some();
            }
        });
        room
    }

    /// A copy with room for every peer `l`'s attempts name: made by the worker that writes
    /// this slab, so the copy misses nothing.
    fn grown(&self, l: &Logged<'_, '_>) -> Slab {
        let mut groups: Vec<(u64, Vec<PeerCounters>)> = (self.groups.iter())
            .map(|(g, peers)| (*g, peers.iter().map(Copied::copied).collect()))
            .collect();
        l.req.each_attempt(&mut |a| {
            let Some((group, id)) = a.peer else { return };
            if let Some((_, peers)) = groups.iter_mut().find(|(g, _)| *g == group) {
                let need = usize::try_from(id).map_or(0, |i| i + 1);
                if peers.len() < need {
                    peers.resize_with(need, PeerCounters::default);
                }
            }
        });
        Slab {
            zones: self.zones.iter().map(Copied::copied).collect(),
            groups: (groups.into_iter())
                .map(|(g, p)| (g, p.into_boxed_slice()))
                .collect(),
        }
    }
}

/// A `status_zone`: its name, and whether it is a location's.
pub(super) struct Zone {
    pub name: String,
    pub location: bool,
}

/// What one load of the configuration counts: its zones and groups, and every worker's
/// counters.
#[derive(Default)]
pub(super) struct Layout {
    zones: Mutex<Vec<Zone>>,
    groups: Mutex<Vec<(String, Group)>>,
    workers: Mutex<Vec<Arc<Slab>>>,
}

/// Locks a list that is only pushed to: a panic elsewhere cannot leave it half made.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Layout {
    /// The place of the zone `name` of its kind, added if it is new.
    pub(super) fn zone(&self, name: &str, location: bool) -> usize {
        let mut zones = lock(&self.zones);
        if let Some(i) = zones
            .iter()
            .position(|z| z.name == name && z.location == location)
        {
            return i;
        }
        zones.push(Zone {
            name: name.to_owned(),
            location,
        });
        zones.len() - 1
    }

    /// The upstream groups whose peers are counted, by name.
    pub(super) fn set_groups(&self, groups: Vec<(String, Group)>) {
        *lock(&self.groups) = groups;
    }

    /// The group `name`, as the configuration has it.
    pub(super) fn group(&self, name: &str) -> Option<Group> {
        (lock(&self.groups).iter())
            .find(|(n, _)| n == name)
            .map(|(_, g)| g.clone())
    }

    /// The worker's counters `slab` with room for every peer of `l`'s attempts: `None` when it
    /// has it, else a larger copy, which replaces it for the readers.
    pub(super) fn room_for(&self, slab: &Arc<Slab>, l: &Logged<'_, '_>) -> Option<Arc<Slab>> {
        if slab.has_room(l) {
            return None;
        }
        let grown = Arc::new(slab.grown(l));
        let mut workers = lock(&self.workers);
        if let Some(w) = workers.iter_mut().find(|w| Arc::ptr_eq(w, slab)) {
            *w = grown.clone();
        }
        Some(grown)
    }

    /// A worker's counters, made once the configuration is whole.
    pub(super) fn new_slab(&self) -> Arc<Slab> {
        let zones = lock(&self.zones).len();
        let groups = lock(&self.groups)
            .iter()
            .map(|(_, g)| {
                let u = g.upstream();
                let ids = u.peers().iter().map(|p| p.id() as usize + 1).max();
                let peers = (0..ids.unwrap_or(0)).map(|_| PeerCounters::default());
                (u.group(), peers.collect())
            })
            .collect();
        let slab = Arc::new(Slab {
            zones: (0..zones).map(|_| ZoneCounters::default()).collect(),
            groups,
        });
        lock(&self.workers).push(slab.clone());
        slab
    }
}

/// Counts a finished request in `slab`: in the zones `zones`, and each attempt it and its
/// subrequests made in its peer.
pub(super) fn record(slab: &Slab, zones: [Option<usize>; 2], l: &Logged<'_, '_>) {
    let us = u64::try_from(l.req.started().elapsed().as_micros()).unwrap_or(u64::MAX);
    for zone in zones.into_iter().flatten() {
        let Some(z) = slab.zones.get(zone) else {
            continue;
        };
        bump(&z.requests, 1);
        bump(&z.responses[class(l.resp.status)], 1);
        bump(&z.received, l.req.head().raw().len() as u64);
        bump(&z.sent, l.sent);
        z.time.observe(us);
    }
    l.req.each_attempt(&mut |a| {
        let Some(p) = a.peer.and_then(|(group, id)| slab.peer(group, id)) else {
            return;
        };
        bump(&p.requests, 1);
        bump(&p.sent, a.bytes_sent);
        bump(&p.received, a.bytes_received);
        match (a.header, a.status) {
            // A client that went away first: nothing the peer did (nginx does not count it).
            (None, None) => {}
            (Some(header), Some(status)) => {
                bump(&p.responses[class(status)], 1);
                bump(
                    &p.header_us,
                    u64::try_from(header.as_micros()).unwrap_or(u64::MAX),
                );
                p.time
                    .observe(u64::try_from(a.response.as_micros()).unwrap_or(u64::MAX));
            }
            _ => bump(&p.fails, 1),
        }
    });
}

/// A histogram's counts, every worker's added up.
#[derive(Default)]
pub(super) struct Durations {
    pub buckets: [u64; 15],
    pub sum_us: u64,
}

impl Durations {
    fn add(&mut self, h: &Histogram) {
        for (sum, c) in self.buckets.iter_mut().zip(&h.buckets) {
            *sum += get(c);
        }
        self.sum_us += get(&h.sum_us);
    }
}

/// A zone's counts, every worker's added up.
#[derive(Default)]
pub(super) struct ZoneTotals {
    pub requests: u64,
    pub responses: [u64; 5],
    pub received: u64,
    pub sent: u64,
    pub time: Durations,
}

/// A peer's counts, every worker's added up.
#[derive(Default)]
pub(super) struct PeerTotals {
    pub requests: u64,
    pub responses: [u64; 5],
    pub fails: u64,
    pub sent: u64,
    pub received: u64,
    pub header_us: u64,
    pub time: Durations,
}

impl PeerTotals {
    /// The responses' average time to the head and to the end, in milliseconds.
    pub(super) fn average_ms(&self) -> (u64, u64) {
        let answered: u64 = self.responses.iter().sum();
        let ms = |us: u64| us.checked_div(answered).unwrap_or(0) / 1000;
        (ms(self.header_us), ms(self.time.sum_us))
    }
}

/// An upstream group's peers with their counts.
pub(super) struct GroupTotals {
    pub name: String,
    pub upstream: Arc<Upstream>,
    pub peers: Vec<PeerTotals>,
}

/// The counts of one load of the configuration, read now.
pub(super) struct Snapshot {
    pub zones: Vec<(Zone, ZoneTotals)>,
    pub groups: Vec<GroupTotals>,
}

impl Layout {
    /// Every worker's counts, added up.
    pub(super) fn snapshot(&self) -> Snapshot {
        let workers = lock(&self.workers);
        let zones = lock(&self.zones)
            .iter()
            .enumerate()
            .map(|(i, z)| {
                let mut t = ZoneTotals::default();
                for c in workers.iter().filter_map(|w| w.zones.get(i)) {
                    t.requests += get(&c.requests);
                    for (sum, n) in t.responses.iter_mut().zip(&c.responses) {
                        *sum += get(n);
                    }
                    t.received += get(&c.received);
                    t.sent += get(&c.sent);
                    t.time.add(&c.time);
                }
                let zone = Zone {
                    name: z.name.clone(),
                    location: z.location,
                };
                (zone, t)
            })
            .collect();
        let groups = lock(&self.groups)
            .iter()
            .map(|(name, group)| {
                let upstream = group.upstream();
                let peers = (upstream.peers().iter())
                    .map(|peer| {
                        let mut t = PeerTotals::default();
                        let counters =
                            (workers.iter()).filter_map(|w| w.peer(upstream.group(), peer.id()));
                        for c in counters {
                            t.requests += get(&c.requests);
                            for (sum, n) in t.responses.iter_mut().zip(&c.responses) {
                                *sum += get(n);
                            }
                            t.fails += get(&c.fails);
                            t.sent += get(&c.sent);
                            t.received += get(&c.received);
                            t.header_us += get(&c.header_us);
                            t.time.add(&c.time);
                        }
                        t
                    })
                    .collect();
                GroupTotals {
                    name: name.clone(),
                    upstream,
                    peers,
                }
            })
            .collect();
        Snapshot { zones, groups }
    }
}

/// NGINX Plus's state of peer `i` of `upstream`: `up`, `down` (the configuration's or the
/// API's), `draining` (the API's `drain`), `unavail` (its failures within `fail_timeout`
/// reached `max_fails`) or `unhealthy` (its health check).
pub(super) fn state(upstream: &Upstream, i: usize) -> &'static str {
    let peer = &upstream.peers()[i];
    let id = portcullis_proxy::upstream::PeerId(i);
    if peer.is_down() {
        "down"
    } else if peer.is_draining() {
        "draining"
    } else if !peer.is_healthy() {
        "unhealthy"
    } else if upstream.is_failed(id, std::time::Instant::now()) {
        "unavail"
    } else {
        "up"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_fall_in_their_buckets() {
        let h = Histogram::default();
        for us in [0, 500, 501, 10_000_000, 10_000_001] {
            h.observe(us);
        }
        let mut d = Durations::default();
        d.add(&h);
        assert_eq!(d.buckets[0], 2);
        assert_eq!(d.buckets[1], 1);
        assert_eq!(d.buckets[13], 1);
        assert_eq!(d.buckets[14], 1);
        assert_eq!(d.buckets.iter().sum::<u64>(), 5);
        assert_eq!(d.sum_us, 20_001_002);
    }

    #[test]
    fn classes() {
        assert_eq!(class(101), 0);
        assert_eq!(class(200), 1);
        assert_eq!(class(499), 3);
        assert_eq!(class(504), 4);
        assert_eq!(class(999), 4);
    }
}
