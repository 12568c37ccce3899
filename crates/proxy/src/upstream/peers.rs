//! One upstream server address and the state all workers share about it.
//!
//! nginx keeps `fails`, `checked`, `accessed` and `conns` in each peer; with a `zone` they
//! live in shared memory. Here they are atomics in the peer, so every worker sees the same
//! failures and active counts without a lock. Times are milliseconds since the group was
//! compiled (its epoch), which fits an `AtomicU64` and never goes backwards.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The index of a peer in one version of its group: primary peers first, then the backup
/// peers, each in the order of their IDs (configuration order, then the API's additions).
/// Not the peer's ID ([`Peer::id`]), which stays when the API changes the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerId(pub usize);

/// Where a peer listens: a TCP address, or the path of a unix-domain socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerAddr {
    Inet(SocketAddr),
    Unix(PathBuf),
}

/// The longest path of a unix-domain socket (`sun_path`, less its NUL).
const MAX_UNIX_PATH: usize = 107;

impl PeerAddr {
    /// The socket at `path` (what follows `unix:`), as nginx's `ngx_parse_unix_domain_url`
    /// checks it; the error is nginx's text.
    pub fn unix(path: &str) -> Result<PeerAddr, &'static str> {
        if path.is_empty() {
            return Err("no path in the unix domain socket");
        }
        if path.len() > MAX_UNIX_PATH {
            return Err("too long path in the unix domain socket");
        }
        Ok(PeerAddr::Unix(path.into()))
    }
}

impl std::fmt::Display for PeerAddr {
    /// As nginx prints it: `127.0.0.1:8080`, `[::1]:80`, `unix:/run/app.sock`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerAddr::Inet(a) => write!(f, "{a}"),
            PeerAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl From<SocketAddr> for PeerAddr {
    fn from(a: SocketAddr) -> PeerAddr {
        PeerAddr::Inet(a)
    }
}

/// What a `server` line (or the API's server object) sets for each of its addresses, with
/// nginx's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerParams {
    pub weight: u32,
    /// 0: failures never take the peer out.
    pub max_fails: u32,
    pub fail_timeout: Duration,
    /// 0: no limit.
    pub max_conns: u32,
    pub down: bool,
    /// NGINX Plus's `drain`: the peer takes no new request, and says it is draining.
    pub drain: bool,
    pub backup: bool,
    /// NGINX Plus's `slow_start`: how long a peer that comes back takes to reach its
    /// weight; zero: at once.
    pub slow_start: Duration,
}

impl Default for ServerParams {
    fn default() -> ServerParams {
        ServerParams {
            weight: 1,
            max_fails: super::DEFAULT_MAX_FAILS,
            fail_timeout: super::DEFAULT_FAIL_TIMEOUT,
            max_conns: 0,
            down: false,
            drain: false,
            backup: false,
            slow_start: Duration::ZERO,
        }
    }
}

/// What a `server` line says about one of its addresses.
#[derive(Debug, Clone)]
pub(crate) struct PeerConf {
    pub addr: PeerAddr,
    /// The address as nginx prints it: `127.0.0.1:8080`, `[::1]:80`.
    pub name: Arc<str>,
    /// The `server` argument as written (`backend:8080`, `127.0.0.1`): the consistent hash
    /// ring is built from it, so peers of one host name share their points.
    pub server: Arc<str>,
    pub params: ServerParams,
}

/// The state of a peer every worker shares, kept when the group is changed by the API (the
/// peer's settings may change; its failures, active attempts and health stay).
#[derive(Debug)]
struct PeerState {
    /// Failures since the peer was last seen working.
    fails: AtomicU32,
    /// When the last failure happened (ms since the epoch).
    accessed: AtomicU64,
    /// When the peer was last failed or chosen after its fail_timeout had run out (ms since
    /// the epoch); a success after a failure resets `fails` only if `accessed < checked`.
    checked: AtomicU64,
    /// Attempts using the peer now, for max_conns, least_conn and random two.
    conns: AtomicU32,
    /// The weight round robin uses: lowered by failures, back up by one per selection pass.
    effective_weight: AtomicI64,
    /// How many of the active health checks (`health_check`) on the peer find it
    /// unhealthy now: any one keeps it out.
    failing_checks: AtomicU32,
    /// The active health checks made of the peer, and how many failed.
    checks: AtomicU64,
    check_fails: AtomicU64,
    /// How many times a check found it unhealthy.
    unhealthy: AtomicU64,
    /// The last check: 0 none yet, 1 passed, 2 failed.
    last_check: AtomicU8,
    /// When the peer last came back (healthy again, or out for failures no more), in ms
    /// since the epoch plus one; 0: never.
    recovered_at: AtomicU64,
}

/// One upstream address: its configuration and the state shared by all workers.
#[derive(Debug)]
pub struct Peer {
    pub addr: PeerAddr,
    /// As nginx prints it in `$upstream_addr` and error logs: `127.0.0.1:8080`.
    pub name: Arc<str>,
    server: Arc<str>,
    /// NGINX Plus's server ID: the peer's number in its group, kept while the group is
    /// changed, never given to another peer.
    id: u32,
    params: ServerParams,
    fail_timeout_ms: u64,
    slow_start_ms: u64,
    state: Arc<PeerState>,
}

impl Peer {
    pub(crate) fn new(conf: PeerConf, id: u32) -> Peer {
        let state = Arc::new(PeerState {
            fails: AtomicU32::new(0),
            accessed: AtomicU64::new(0),
            checked: AtomicU64::new(0),
            conns: AtomicU32::new(0),
            effective_weight: AtomicI64::new(i64::from(conf.params.weight)),
            failing_checks: AtomicU32::new(0),
            checks: AtomicU64::new(0),
            check_fails: AtomicU64::new(0),
            unhealthy: AtomicU64::new(0),
            last_check: AtomicU8::new(0),
            recovered_at: AtomicU64::new(0),
        });
        Peer::with_state(conf, id, state)
    }

    fn with_state(conf: PeerConf, id: u32, state: Arc<PeerState>) -> Peer {
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Peer {
            addr: conf.addr,
            name: conf.name,
            server: conf.server,
            id,
            fail_timeout_ms: millis(conf.params.fail_timeout),
            slow_start_ms: millis(conf.params.slow_start),
            params: conf.params,
            state,
        }
    }

    /// The same server with a state of its own, as a new configuration starts it: what the
    /// checks and failures of the one before found is not carried over.
    pub(crate) fn renewed(&self) -> Peer {
        Peer::new(self.conf(self.params.clone()), self.id)
    }

    /// The peer's address and names, with `params`.
    fn conf(&self, params: ServerParams) -> PeerConf {
        PeerConf {
            addr: self.addr.clone(),
            name: self.name.clone(),
            server: self.server.clone(),
            params,
        }
    }

    /// Whether `other` is this peer with the same shared state (a version of it the API
    /// made), rather than another one at the same address.
    pub fn is_same(&self, other: &Peer) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }

    /// The same peer, for another version of its group: its ID and shared state.
    pub(crate) fn kept(&self) -> Peer {
        self.changed(self.params.clone())
    }

    /// The same peer (its ID and shared state) with new settings: a weight changed resets
    /// the weight round robin lowered after failures.
    pub(crate) fn changed(&self, params: ServerParams) -> Peer {
        if params.weight != self.params.weight {
            let weight = i64::from(params.weight);
            self.state.effective_weight.store(weight, Ordering::Relaxed);
        }
        Peer::with_state(self.conf(params), self.id, self.state.clone())
    }

    /// The peer came back at `now_ms`: its `slow_start` begins.
    pub(crate) fn recovered(&self, now_ms: u64) {
        if self.slow_start_ms != 0 {
            self.state.recovered_at.store(now_ms + 1, Ordering::Relaxed);
        }
    }

    /// `weight` as the balancers weigh it now, in thousandths: less during the peer's
    /// `slow_start`, growing from nothing to all of it (at least a thousandth, so that the
    /// peer is still chosen now and then).
    pub(crate) fn ramped(&self, weight: i64, now_ms: u64) -> i64 {
        let full = weight * RAMP_SCALE;
        let from = self.state.recovered_at.load(Ordering::Relaxed);
        if from == 0 {
            return full;
        }
        let elapsed = now_ms.saturating_sub(from - 1);
        if elapsed >= self.slow_start_ms {
            return full;
        }
        let part = i128::from(full) * i128::from(elapsed) / i128::from(self.slow_start_ms);
        i64::try_from(part).unwrap_or(full).max(1)
    }

    /// Whether every active health check lets the peer take requests (true without them).
    pub fn is_healthy(&self) -> bool {
        self.state.failing_checks.load(Ordering::Relaxed) == 0
    }

    /// One health check's conclusion changed: it finds the peer unhealthy (`false`), or no
    /// longer (`true`). The peer takes requests when no check finds it unhealthy, so each
    /// check must report each change once.
    pub fn check_changed(&self, healthy: bool) {
        if healthy {
            let _ =
                self.state
                    .failing_checks
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        } else {
            self.state.unhealthy.fetch_add(1, Ordering::Relaxed);
            self.state.failing_checks.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One active health check of the peer is done: it passed or not.
    pub fn check_done(&self, passed: bool) {
        self.state.checks.fetch_add(1, Ordering::Relaxed);
        if !passed {
            self.state.check_fails.fetch_add(1, Ordering::Relaxed);
        }
        let last = if passed { 1 } else { 2 };
        self.state.last_check.store(last, Ordering::Relaxed);
    }

    /// What the active health checks found of the peer, as NGINX Plus's API shows it.
    pub fn health_checks(&self) -> HealthChecks {
        HealthChecks {
            checks: self.state.checks.load(Ordering::Relaxed),
            fails: self.state.check_fails.load(Ordering::Relaxed),
            unhealthy: self.state.unhealthy.load(Ordering::Relaxed),
            last_passed: match self.state.last_check.load(Ordering::Relaxed) {
                0 => None,
                n => Some(n == 1),
            },
        }
    }

    /// The `server` argument this address came from, as written.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// NGINX Plus's server ID.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The settings of its `server` line, or the API's.
    pub fn params(&self) -> &ServerParams {
        &self.params
    }

    pub fn weight(&self) -> u32 {
        self.params.weight
    }

    pub fn max_fails(&self) -> u32 {
        self.params.max_fails
    }

    pub fn fail_timeout(&self) -> Duration {
        Duration::from_millis(self.fail_timeout_ms)
    }

    /// 0 means no limit.
    pub fn max_conns(&self) -> u32 {
        self.params.max_conns
    }

    /// Marked `down` in the configuration (or by the API).
    pub fn is_down(&self) -> bool {
        self.params.down
    }

    /// Draining (NGINX Plus's `drain`): no new request.
    pub fn is_draining(&self) -> bool {
        self.params.drain
    }

    pub fn is_backup(&self) -> bool {
        self.params.backup
    }

    /// Neither down nor draining: the peer may be chosen when it is usable otherwise.
    pub(crate) fn admits(&self) -> bool {
        !self.params.down && !self.params.drain
    }

    /// Attempts using this peer now, over all workers.
    pub fn active(&self) -> u32 {
        self.state.conns.load(Ordering::Relaxed)
    }

    /// Failures counted since the peer last worked.
    pub fn fails(&self) -> u32 {
        self.state.fails.load(Ordering::Relaxed)
    }

    pub(crate) fn conns(&self) -> u64 {
        u64::from(self.state.conns.load(Ordering::Relaxed))
    }

    pub(crate) fn effective_weight(&self) -> i64 {
        self.state.effective_weight.load(Ordering::Relaxed)
    }

    /// Whether the peer may take an attempt now, before `tried` is considered: not down,
    /// healthy to the active checks, not failed `max_fails` times within `fail_timeout`,
    /// below `max_conns`.
    pub(crate) fn usable(&self, now_ms: u64) -> bool {
        self.admits() && self.is_healthy() && !self.failed(now_ms) && !self.full()
    }

    /// Out for failures: nginx's `fails >= max_fails && now - checked <= fail_timeout`.
    pub(crate) fn failed(&self, now_ms: u64) -> bool {
        self.params.max_fails != 0
            && self.state.fails.load(Ordering::Relaxed) >= self.params.max_fails
            && now_ms.saturating_sub(self.state.checked.load(Ordering::Relaxed))
                <= self.fail_timeout_ms
    }

    /// At its `max_conns`.
    pub(crate) fn full(&self) -> bool {
        self.params.max_conns != 0
            && self.state.conns.load(Ordering::Relaxed) >= self.params.max_conns
    }

    /// nginx's `if (effective_weight < weight) effective_weight++`, done for every peer a
    /// round-robin pass considers.
    pub(crate) fn recover_weight(&self) {
        let weight = i64::from(self.params.weight);
        // Capped at the weight even when workers race.
        let _ =
            self.state
                .effective_weight
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                    (w < weight).then_some(w + 1)
                });
    }

    /// The peer has been chosen: one more active attempt; if its fail_timeout has run out
    /// since it was last checked, this choice is the new check, so that a success ends the
    /// failures.
    pub(crate) fn take(&self, now_ms: u64) {
        self.state.conns.fetch_add(1, Ordering::Relaxed);
        if now_ms.saturating_sub(self.state.checked.load(Ordering::Relaxed)) > self.fail_timeout_ms
        {
            self.state.checked.store(now_ms, Ordering::Relaxed);
            // Out for its failures until now: it comes back, slowly with `slow_start`.
            if self.params.max_fails != 0
                && self.state.fails.load(Ordering::Relaxed) >= self.params.max_fails
            {
                self.recovered(now_ms);
            }
        }
    }

    /// The attempt is over; `accounting` is false for a group of one peer, which nginx
    /// never marks failed.
    pub(crate) fn put(&self, failed: bool, accounting: bool, now_ms: u64) {
        if accounting {
            if failed {
                self.fail(now_ms);
            } else if self.state.accessed.load(Ordering::Relaxed)
                < self.state.checked.load(Ordering::Relaxed)
            {
                self.state.fails.store(0, Ordering::Relaxed);
            }
        }
        // Never below zero, even if an attempt is released twice.
        let _ = self
            .state
            .conns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_sub(1));
    }

    /// nginx's failure accounting: one more fail, both times now, and the effective weight
    /// lowered by `weight / max_fails` (not below zero).
    fn fail(&self, now_ms: u64) {
        self.state.fails.fetch_add(1, Ordering::Relaxed);
        self.state.accessed.store(now_ms, Ordering::Relaxed);
        self.state.checked.store(now_ms, Ordering::Relaxed);
        // max_fails=0 never lowers the weight.
        if let Some(step) = self.params.weight.checked_div(self.params.max_fails) {
            let drop = i64::from(step);
            let _ = self.state.effective_weight.fetch_update(
                Ordering::Relaxed,
                Ordering::Relaxed,
                |w| Some((w - drop).max(0)),
            );
        }
    }
}

/// A peer's active health checks: how many were made and failed, how many times it became
/// unhealthy, and whether the last one passed (none yet: `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthChecks {
    pub checks: u64,
    pub fails: u64,
    pub unhealthy: u64,
    pub last_passed: Option<bool>,
}

/// The scale of [`Peer::ramped`]'s weights: thousandths.
const RAMP_SCALE: i64 = 1000;

/// Milliseconds from `epoch` to `now`, 0 if `now` is earlier.
pub(crate) fn millis_since(epoch: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX)
}

/// Bits per word of the [`Tried`] set.
const WORD_BITS: usize = 64;

/// One request's record of its attempts: which peers it has tried (a bitset over
/// [`PeerId`]s) and the balancer's progress, which nginx keeps per request so that a retry
/// continues where the previous choice stopped.
#[derive(Debug, Clone, Default)]
pub struct Tried {
    /// Peers 0..64, without allocating for the common group.
    low: u64,
    /// Peers from 64 on, grown when needed.
    high: Vec<u64>,
    /// The request has moved on to the backup peers; it never goes back.
    pub(crate) on_backup: bool,
    /// Choices the hash, ip_hash or random balancer has rejected; past 20 it falls back to
    /// round robin, as nginx does.
    pub(crate) tries: u32,
    /// hash: the running hash; consistent hash: the ring position; ip_hash: the hash state.
    pub(crate) hash: u64,
    /// hash: how many times the key has been hashed.
    pub(crate) rehash: u32,
    /// consistent hash: the ring position has been found from the key.
    pub(crate) positioned: bool,
}

impl Tried {
    /// Whether `id` has been tried by this request.
    pub fn contains(&self, id: PeerId) -> bool {
        let i = id.0;
        if i < WORD_BITS {
            return self.low & (1 << i) != 0;
        }
        let (word, bit) = (i / WORD_BITS - 1, i % WORD_BITS);
        self.high.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }

    /// Records that `id` has been tried.
    pub fn insert(&mut self, id: PeerId) {
        let i = id.0;
        if i < WORD_BITS {
            self.low |= 1 << i;
            return;
        }
        let (word, bit) = (i / WORD_BITS - 1, i % WORD_BITS);
        if self.high.len() <= word {
            self.high.resize(word + 1, 0);
        }
        self.high[word] |= 1 << bit;
    }

    /// How many peers have been tried.
    pub fn count(&self) -> usize {
        self.low.count_ones() as usize
            + self
                .high
                .iter()
                .map(|w| w.count_ones() as usize)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(weight: u32, max_fails: u32, fail_timeout_s: u64, max_conns: u32) -> Peer {
        Peer::new(
            PeerConf {
                addr: PeerAddr::Inet("127.0.0.1:80".parse().unwrap()),
                name: Arc::from("127.0.0.1:80"),
                server: Arc::from("127.0.0.1"),
                params: ServerParams {
                    weight,
                    max_fails,
                    fail_timeout: Duration::from_secs(fail_timeout_s),
                    max_conns,
                    ..ServerParams::default()
                },
            },
            0,
        )
    }

    #[test]
    fn tried_bitset_spans_words() {
        let mut t = Tried::default();
        for i in [0, 5, 63, 64, 130, 200] {
            assert!(!t.contains(PeerId(i)));
            t.insert(PeerId(i));
            assert!(t.contains(PeerId(i)));
        }
        assert!(!t.contains(PeerId(1)) && !t.contains(PeerId(65)) && !t.contains(PeerId(999)));
        assert_eq!(t.count(), 6);
    }

    #[test]
    fn failures_take_the_peer_out_for_fail_timeout() {
        let p = peer(1, 2, 10, 0);
        p.take(1_000);
        p.put(true, true, 1_000);
        assert!(!p.failed(1_500), "one failure of two allowed");
        p.take(2_000);
        p.put(true, true, 2_000);
        assert!(p.failed(2_000) && p.failed(12_000));
        assert!(!p.failed(12_001), "back after fail_timeout");
        // Chosen after the timeout: the choice is the new check, so a success resets.
        p.take(12_001);
        p.put(false, true, 12_100);
        assert_eq!(p.fails(), 0);
    }

    #[test]
    fn success_within_fail_timeout_keeps_failures() {
        let p = peer(1, 3, 10, 0);
        p.take(0);
        p.put(true, true, 100);
        p.take(200);
        p.put(false, true, 300);
        assert_eq!(
            p.fails(),
            1,
            "nginx forgets failures only after fail_timeout"
        );
    }

    #[test]
    fn effective_weight_drops_and_recovers() {
        let p = peer(6, 3, 10, 0);
        p.put(true, true, 0);
        assert_eq!(p.effective_weight(), 4);
        p.put(true, true, 0);
        p.put(true, true, 0);
        p.put(true, true, 0);
        assert_eq!(p.effective_weight(), 0);
        for _ in 0..10 {
            p.recover_weight();
        }
        assert_eq!(p.effective_weight(), 6);
    }

    #[test]
    fn max_conns_and_release() {
        let p = peer(1, 1, 10, 2);
        p.take(0);
        assert!(!p.full());
        p.take(0);
        assert!(p.full());
        p.put(false, false, 0);
        assert!(!p.full());
        p.put(false, false, 0);
        p.put(false, false, 0);
        assert_eq!(p.active(), 0, "never below zero");
    }
}
