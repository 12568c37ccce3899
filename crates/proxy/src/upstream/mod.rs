//! Upstream groups and the choice of a peer for each attempt, as nginx's upstream module and
//! its balancers make it.
//!
//! An [`Upstream`] is one compiled `upstream name { ... }` block (or the group nginx makes
//! for `proxy_pass http://host:port`), or a version of it the API made (`change`: a group in
//! a `zone` gets servers added, changed and removed). A version is immutable except for the
//! per-peer state every worker shares (failures, active attempts, health), which is atomics
//! that the next versions keep; it is held in an `Arc` by all workers. Each worker keeps a [`LocalState`] per group (the smooth
//! round-robin weights and the random generator, which nginx keeps per worker without a
//! `zone`), and each request a [`Tried`] record.
//!
//! An attempt is `select` (a peer, counted active) then `release` (with its [`Outcome`]);
//! a retry calls `select` again with the same [`Tried`], which skips the peers already tried
//! and continues the balancer where it stopped, as nginx's per-request peer data does.
//!
//! - `peers`: [`Peer`], its shared state and failure rules, [`Tried`];
//! - `change`: the API's changes, each a new version of the group;
//! - `compile`: the block's directives, in nginx's words when they are wrong;
//! - `round_robin`, `least_conn`, `hash`, `ip_hash`, `random`: the balancers.

mod change;
mod compile;
mod hash;
mod ip_hash;
mod least_conn;
mod peers;
mod random;
mod round_robin;

pub use change::{Change, ChangeError};

pub use peers::{HealthChecks, Peer, PeerAddr, PeerId, ServerParams, Tried};

use std::net::IpAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use compile::Method;
use peers::{millis_since, PeerConf};

/// nginx's defaults for a `server` line and for the implicit group of `proxy_pass host`.
const DEFAULT_MAX_FAILS: u32 = 1;
const DEFAULT_FAIL_TIMEOUT: Duration = Duration::from_secs(10);
/// Choices hash, ip_hash and random may reject in one request before falling back to round
/// robin, as nginx bounds them.
const MAX_HASH_TRIES: u32 = 20;

/// A peer an active health check watches (see [`Upstream::checked`]).
#[derive(Debug)]
pub struct CheckedPeer {
    peer: Peer,
    epoch: Instant,
}

impl Clone for CheckedPeer {
    fn clone(&self) -> CheckedPeer {
        CheckedPeer {
            peer: self.peer.kept(),
            epoch: self.epoch,
        }
    }
}

impl CheckedPeer {
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// The check's conclusion changed (see [`Peer::check_changed`]); a peer no check finds
    /// unhealthy any more starts its `slow_start`.
    pub fn check_changed(&self, healthy: bool) {
        self.peer.check_changed(healthy);
        if healthy && self.peer.is_healthy() {
            self.peer
                .recovered(millis_since(self.epoch, Instant::now()));
        }
    }
}

/// The `keepalive` directives of a group; present only with `keepalive N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keepalive {
    /// `keepalive N`: idle connections each worker keeps to the group.
    pub max_idle: usize,
    /// `keepalive_requests` (1000): requests over one connection before it is closed.
    pub requests: u64,
    /// `keepalive_timeout` (60s): how long an idle connection is kept.
    pub timeout: Duration,
    /// `keepalive_time` (1h): how long a connection may be used for requests.
    pub time: Duration,
}

/// What a request must provide as [`Key`] for this group's balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind<'a> {
    None,
    /// `hash key`: the key's text as written (e.g. `$request_uri`), for the server to
    /// compile into its variable template.
    Hash(&'a str),
    /// `ip_hash`: the client's address.
    ClientAddr,
}

/// The request's key for the balancer, as [`Upstream::key_kind`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key<'a> {
    None,
    /// The evaluated `hash` key; empty means round robin, as in nginx.
    Bytes(&'a [u8]),
    /// The client address for `ip_hash`, as accepted (an IPv4-mapped IPv6 address hashes as
    /// IPv6, as nginx does on a dual-stack socket).
    ClientAddr(IpAddr),
}

/// No peer may take the attempt: all are tried, down, failed or at `max_conns` (nginx's
/// "no live upstreams").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoLive;

impl std::fmt::Display for NoLive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no live upstreams")
    }
}

impl std::error::Error for NoLive {}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// An error, a timeout, an invalid header, or a status `proxy_next_upstream` treats as
    /// a failure (nginx's `NGX_PEER_FAILED`; 403 and 404 are not failures there).
    Failed,
}

/// A worker's own balancing state for one group: the smooth weighted round-robin current
/// weights (nginx keeps them per worker unless the group has a `zone`) and the generator
/// for `random`.
#[derive(Debug, Clone)]
pub struct LocalState {
    current: Vec<i64>,
    rng: random::Rng,
}

impl LocalState {
    /// Matches the state to a group of `n` peers, so a state used with the wrong group is
    /// only a poorer choice, never a panic.
    fn fit(&mut self, n: usize) {
        if self.current.len() != n {
            self.current.resize(n, 0);
        }
    }
}

/// The balancer of a group.
#[derive(Debug)]
enum Balancer {
    RoundRobin,
    LeastConn,
    Hash {
        key: String,
        /// `Some` with `consistent`.
        ring: Option<hash::Ring>,
    },
    IpHash,
    Random {
        two: bool,
        /// Cumulative weights of the primary peers.
        ranges: Vec<u64>,
    },
}

/// One compiled upstream group: as the configuration made it, or as the API last changed it
/// (a new `Upstream` of the same group, whose peers keep their IDs and shared state).
#[derive(Debug)]
pub struct Upstream {
    name: String,
    /// The group's number in this process, kept by the versions the API makes of it.
    group: u64,
    /// `zone name`: the group's servers may be changed by the API.
    zone: Option<String>,
    /// The ID the next peer added gets.
    next_id: u32,
    method: Method,
    /// Primary peers first, then backup peers.
    peers: Vec<Peer>,
    /// `peers[..primary]` are the primary peers.
    primary: usize,
    /// Sum of the primary peers' weights.
    total_weight: u64,
    /// One primary peer and no backup: nginx's `peers->single`, which never counts
    /// failures and never retries.
    single: bool,
    balancer: Balancer,
    keepalive: Option<Keepalive>,
    /// Time zero of the peers' shared clocks.
    epoch: Instant,
}

impl Upstream {
    /// Compiles an `upstream name { ... }` block. Host names in `server` lines are resolved
    /// now, to all their addresses, as nginx does. Errors are nginx's texts at the place of
    /// the directive at fault.
    pub fn compile(
        block: &portcullis_config::Directive,
    ) -> Result<Upstream, portcullis_config::ConfigError> {
        compile::compile(block, &[])
    }

    /// Compiles a block with a `state` file, whose `server` lines (read by the caller, with
    /// their own places) are the group's servers.
    pub fn compile_with_state(
        block: &portcullis_config::Directive,
        kept: &[portcullis_config::Directive],
    ) -> Result<Upstream, portcullis_config::ConfigError> {
        compile::compile(block, kept)
    }

    /// The group nginx makes for `proxy_pass http://host:port` when no `upstream` block has
    /// that name: the addresses, weight 1, round robin, no keepalive. `name` is "host:port"
    /// (or "unix:/path").
    pub fn implicit(name: &str, addrs: Vec<PeerAddr>) -> Upstream {
        let server: Arc<str> = Arc::from(name);
        let peers = addrs
            .into_iter()
            .map(|addr| PeerConf {
                name: Arc::from(addr.to_string()),
                addr,
                server: server.clone(),
                params: ServerParams::default(),
            })
            .collect();
        Upstream::build(name.to_string(), Method::RoundRobin, peers, None)
            .expect("round robin takes any peers")
    }

    /// Assembles a new group of `peers` (in configuration order), numbered from 0.
    fn build(
        name: String,
        method: Method,
        peers: Vec<PeerConf>,
        keepalive: Option<Keepalive>,
    ) -> Result<Upstream, String> {
        static GROUPS: AtomicU64 = AtomicU64::new(1);
        let peers: Vec<Peer> = (0u32..)
            .zip(peers)
            .map(|(id, p)| Peer::new(p, id))
            .collect();
        let next_id = u32::try_from(peers.len()).unwrap_or(u32::MAX);
        let group = GROUPS.fetch_add(1, Ordering::Relaxed);
        Upstream::assemble(
            name,
            group,
            method,
            peers,
            next_id,
            keepalive,
            Instant::now(),
        )
    }

    /// A group of `peers`: primary ones first, then backup ones, each in the order given.
    fn assemble(
        name: String,
        group: u64,
        method: Method,
        mut peers: Vec<Peer>,
        next_id: u32,
        keepalive: Option<Keepalive>,
        epoch: Instant,
    ) -> Result<Upstream, String> {
        peers.sort_by_key(Peer::is_backup);
        let balancer = compile::balancer_of(&method, &peers)
            .map_err(|e| format!("{e} in upstream \"{name}\""))?;
        let primary = peers.iter().take_while(|p| !p.is_backup()).count();
        let total_weight = peers[..primary].iter().map(|p| u64::from(p.weight())).sum();
        Ok(Upstream {
            name,
            group,
            zone: None,
            next_id,
            method,
            single: primary == 1 && peers.len() == 1,
            primary,
            total_weight,
            peers,
            balancer,
            keepalive,
            epoch,
        })
    }

    /// The group with `zone`: one the API may change.
    fn in_zone(mut self, zone: Option<String>) -> Upstream {
        self.zone = zone;
        self
    }

    /// The group's number in this process: the same for every version the API makes of it,
    /// different for every other group.
    pub fn group(&self) -> u64 {
        self.group
    }

    /// The `zone` the group is in: with one, the API may change its servers.
    pub fn zone(&self) -> Option<&str> {
        self.zone.as_deref()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn keepalive(&self) -> Option<&Keepalive> {
        self.keepalive.as_ref()
    }

    pub fn key_kind(&self) -> KeyKind<'_> {
        match &self.balancer {
            Balancer::Hash { key, .. } => KeyKind::Hash(key),
            Balancer::IpHash => KeyKind::ClientAddr,
            _ => KeyKind::None,
        }
    }

    /// All peers: primary ones in configuration order, then backup ones.
    pub fn peers(&self) -> &[Peer] {
        &self.peers
    }

    /// The peer `id`; ids come from [`Upstream::select`] on this group.
    pub fn peer(&self, id: PeerId) -> &Peer {
        &self.peers[id.0]
    }

    /// Whether peer `id` is out for its failures now (`max_fails` within `fail_timeout`):
    /// NGINX Plus's `unavail`.
    pub fn is_failed(&self, id: PeerId, now: Instant) -> bool {
        self.peers
            .get(id.0)
            .is_some_and(|p| p.failed(millis_since(self.epoch, now)))
    }

    /// A worker's fresh balancing state for this group.
    pub fn local_state(&self) -> LocalState {
        LocalState {
            current: vec![0; self.peers.len()],
            rng: random::Rng::new(),
        }
    }

    /// A request's fresh record of attempts.
    pub fn tried(&self) -> Tried {
        let mut tried = Tried::default();
        if let Balancer::IpHash = self.balancer {
            tried.hash = ip_hash::INITIAL_HASH;
        }
        tried
    }

    /// Chooses the peer for the next attempt of a request, skipping those in `tried`, down,
    /// failed (max_fails within fail_timeout) or at max_conns; backup peers only when no
    /// primary is usable. Counts the peer's attempt as active until [`Upstream::release`]
    /// and marks it in `tried`.
    pub fn select(
        &self,
        local: &mut LocalState,
        key: Key<'_>,
        tried: &mut Tried,
        now: Instant,
    ) -> Result<PeerId, NoLive> {
        if self.peers.is_empty() {
            return Err(NoLive);
        }
        local.fit(self.peers.len());
        let now_ms = millis_since(self.epoch, now);
        let chosen = match &self.balancer {
            Balancer::RoundRobin => round_robin::select(self, local, tried, now_ms),
            Balancer::LeastConn => least_conn::select(self, local, tried, now_ms),
            Balancer::Hash { ring: None, .. } => hash::select(self, local, key, tried, now_ms),
            Balancer::Hash {
                ring: Some(ring), ..
            } => hash::select_consistent(self, ring, local, key, tried, now_ms),
            Balancer::IpHash => ip_hash::select(self, local, key, tried, now_ms),
            Balancer::Random { two, ranges } => {
                random::select(self, *two, ranges, local, tried, now_ms)
            }
        };
        let i = chosen.ok_or(NoLive)?;
        self.peers[i].take(now_ms);
        tried.insert(PeerId(i));
        Ok(PeerId(i))
    }

    /// An active health check's conclusion of peer `id` changed (see
    /// [`Peer::check_changed`]); a peer no check finds unhealthy any more starts its
    /// `slow_start`.
    pub fn check_changed(&self, id: PeerId, healthy: bool) {
        if let Some(peer) = self.checked(id) {
            peer.check_changed(healthy);
        }
    }

    /// Peer `id` as an active health check holds it: its shared state and the group's
    /// clock, not the version of the group it was found in.
    pub fn checked(&self, id: PeerId) -> Option<CheckedPeer> {
        let peer = self.peers.get(id.0)?;
        Some(CheckedPeer {
            peer: peer.kept(),
            epoch: self.epoch,
        })
    }

    /// Ends an attempt: the active count goes down; a failure counts toward max_fails and
    /// lowers the peer's round-robin weight; a success after the fail_timeout has run out
    /// forgets earlier failures. A group of one peer counts nothing, as nginx.
    pub fn release(&self, id: PeerId, outcome: Outcome, now: Instant) {
        let Some(peer) = self.peers.get(id.0) else {
            return;
        };
        let now_ms = millis_since(self.epoch, now);
        peer.put(outcome == Outcome::Failed, !self.single, now_ms);
    }

    /// nginx's walk of a hash value over the primary peers by weight: `hash % total_weight`
    /// falls in the weight span of exactly one peer.
    fn weighted_index(&self, hash: u64) -> usize {
        let mut w = hash % self.total_weight.max(1);
        for (i, peer) in self.peers[..self.primary].iter().enumerate() {
            let weight = u64::from(peer.weight());
            if w < weight {
                return i;
            }
            w -= weight;
        }
        0
    }

    /// The primary peers' indices.
    fn primaries(&self) -> Range<usize> {
        0..self.primary
    }

    /// The backup peers' indices.
    fn backups(&self) -> Range<usize> {
        self.primary..self.peers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_config::{Arg, Directive, Span};
    use std::path::Path;

    /// `upstream u { <body> }` as the loader would give it: statements split at `;`,
    /// arguments at spaces, each statement on its own line.
    fn block(body: &str) -> Directive {
        let file: Arc<Path> = Arc::from(Path::new("/etc/nginx/nginx.conf"));
        let children = body
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .enumerate()
            .map(|(i, stmt)| {
                let mut words = stmt.split_whitespace();
                let name = words.next().unwrap_or_default().to_string();
                Directive {
                    name,
                    args: words
                        .map(|w| Arg {
                            value: w.to_string(),
                            quoted: false,
                        })
                        .collect(),
                    span: Span {
                        file: file.clone(),
                        line: 2 + i as u32,
                    },
                    block: None,
                }
            })
            .collect();
        Directive {
            name: "upstream".into(),
            args: vec![Arg {
                value: "u".into(),
                quoted: false,
            }],
            span: Span { file, line: 1 },
            block: Some(children),
        }
    }

    fn compile(body: &str) -> Upstream {
        Upstream::compile(&block(body)).expect("compiles")
    }

    fn error(body: &str) -> String {
        Upstream::compile(&block(body))
            .expect_err("fails")
            .to_string()
    }

    /// Peers chosen by `n` requests that each succeed at once, as letters `a`, `b`, ...
    fn sequence(up: &Upstream, key: Key<'_>, n: usize) -> String {
        let mut local = up.local_state();
        let now = Instant::now();
        (0..n)
            .map(|_| {
                let mut tried = up.tried();
                let id = up.select(&mut local, key, &mut tried, now).expect("a peer");
                up.release(id, Outcome::Ok, now);
                char::from(b'a' + id.0 as u8)
            })
            .collect()
    }

    #[test]
    fn smooth_round_robin_matches_nginx() {
        let up = compile("server 127.0.0.1:1 weight=5; server 127.0.0.1:2; server 127.0.0.1:3;");
        assert_eq!(sequence(&up, Key::None, 14), "aabacaaaabacaa");
        let up = compile("server 127.0.0.1:1 weight=2; server 127.0.0.1:2;");
        assert_eq!(sequence(&up, Key::None, 6), "abaaba");
        let up = compile("server 127.0.0.1:1; server 127.0.0.1:2; server 127.0.0.1:3;");
        assert_eq!(sequence(&up, Key::None, 6), "abcabc");
    }

    #[test]
    fn defaults_and_names() {
        let up = compile("server 127.0.0.1; server [::1]:8080 weight=3 max_fails=0;");
        assert_eq!(up.name(), "u");
        assert_eq!(&*up.peers()[0].name, "127.0.0.1:80");
        assert_eq!(up.peers()[0].server(), "127.0.0.1");
        assert_eq!(up.peers()[0].max_fails(), 1);
        assert_eq!(up.peers()[0].fail_timeout(), Duration::from_secs(10));
        assert_eq!(&*up.peers()[1].name, "[::1]:8080");
        assert_eq!((up.peers()[1].weight(), up.peers()[1].max_fails()), (3, 0));
        assert!(up.keepalive().is_none());
        assert_eq!(up.key_kind(), KeyKind::None);
    }

    #[test]
    fn keepalive_settings() {
        let up = compile("server 127.0.0.1; keepalive 16; keepalive_timeout 5s;");
        let ka = up.keepalive().expect("keepalive");
        assert_eq!(ka.max_idle, 16);
        assert_eq!(ka.requests, 1000);
        assert_eq!(ka.timeout, Duration::from_secs(5));
        assert_eq!(ka.time, Duration::from_secs(3600));
        let up = compile("least_conn; keepalive 4; keepalive_requests 10; server 127.0.0.1;");
        assert_eq!(
            up.keepalive().map(|k| (k.max_idle, k.requests)),
            Some((4, 10))
        );
        // nginx: a balancer after keepalive replaces it.
        let up = compile("keepalive 4; least_conn; server 127.0.0.1;");
        assert!(up.keepalive().is_none());
    }

    #[test]
    fn single_peer_ignores_failures_and_is_tried_once() {
        let up = compile("server 127.0.0.1:1 max_fails=1;");
        let mut local = up.local_state();
        let now = Instant::now();
        for _ in 0..3 {
            let mut tried = up.tried();
            let id = up
                .select(&mut local, Key::None, &mut tried, now)
                .expect("peer");
            up.release(id, Outcome::Failed, now);
            assert_eq!(
                up.select(&mut local, Key::None, &mut tried, now),
                Err(NoLive)
            );
        }
        assert_eq!(up.peers()[0].fails(), 0);
    }

    #[test]
    fn every_peer_tried_gives_no_live() {
        let up = compile("server 127.0.0.1:1; server 127.0.0.1:2; server 127.0.0.1:3 backup;");
        let mut local = up.local_state();
        let mut tried = up.tried();
        let now = Instant::now();
        let mut seen = Vec::new();
        while let Ok(id) = up.select(&mut local, Key::None, &mut tried, now) {
            seen.push(id.0);
            up.release(id, Outcome::Failed, now);
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2]);
        assert_eq!(tried.count(), 3);
    }

    #[test]
    fn failed_peer_out_for_fail_timeout_then_back() {
        let up = compile("server 127.0.0.1:1 fail_timeout=10; server 127.0.0.1:2;");
        let mut local = up.local_state();
        let t0 = Instant::now();
        let mut tried = up.tried();
        let a = up
            .select(&mut local, Key::None, &mut tried, t0)
            .expect("peer");
        assert_eq!(a, PeerId(0));
        up.release(a, Outcome::Failed, t0);
        // Out: every request goes to b while a's fail_timeout runs.
        assert_eq!(
            sequence_at(&up, &mut local, t0 + Duration::from_secs(9), 4),
            "bbbb"
        );
        // Back after it, and a success forgets the failure.
        let later = t0 + Duration::from_secs(11);
        assert!(sequence_at(&up, &mut local, later, 4).contains('a'));
        assert_eq!(up.peers()[0].fails(), 0);
    }

    fn sequence_at(up: &Upstream, local: &mut LocalState, now: Instant, n: usize) -> String {
        (0..n)
            .map(|_| {
                let mut tried = up.tried();
                let id = up
                    .select(local, Key::None, &mut tried, now)
                    .expect("a peer");
                up.release(id, Outcome::Ok, now);
                char::from(b'a' + id.0 as u8)
            })
            .collect()
    }

    /// `slow_start`: a peer back from being unhealthy gets a growing share of the choices,
    /// from almost none to its weight's over the time given, with round robin and
    /// least_conn; hash, ip_hash and random refuse it.
    #[test]
    fn a_peer_back_from_unhealthy_starts_slowly() {
        for method in ["", "least_conn;"] {
            let up = compile(&format!(
                "{method} server 127.0.0.1:1; server 127.0.0.1:2 slow_start=10s;"
            ));
            up.check_changed(PeerId(1), false);
            let back = Instant::now();
            up.check_changed(PeerId(1), true);
            let share = |after: u64| {
                let mut local = up.local_state();
                let at = back + Duration::from_secs(after);
                sequence_at(&up, &mut local, at, 200).matches('b').count()
            };
            // A tenth of its weight after a second, half after five, all after ten.
            let (one, five, eleven) = (share(1), share(5), share(11));
            assert!((10..=30).contains(&one), "{method} {one}");
            assert!((55..=80).contains(&five), "{method} {five}");
            assert_eq!(eleven, 100, "{method}");
        }
        for method in ["hash $x;", "ip_hash;", "random;"] {
            // Before the servers or after them.
            for body in [
                format!("{method} server 127.0.0.1:1 slow_start=5s;"),
                format!("server 127.0.0.1:1 slow_start=5s; {method}"),
            ] {
                assert!(
                    error(&body)
                        .contains("balancing method does not support parameter \"slow_start\""),
                    "{body}"
                );
            }
        }
    }

    #[test]
    fn all_primaries_failed_without_backup_is_no_live() {
        let up = compile("server 127.0.0.1:1; server 127.0.0.1:2;");
        let mut local = up.local_state();
        let now = Instant::now();
        for _ in 0..2 {
            let mut tried = up.tried();
            let id = up
                .select(&mut local, Key::None, &mut tried, now)
                .expect("peer");
            up.release(id, Outcome::Failed, now);
        }
        let mut tried = up.tried();
        assert_eq!(
            up.select(&mut local, Key::None, &mut tried, now),
            Err(NoLive)
        );
    }

    #[test]
    fn backup_only_when_primaries_are_out() {
        let up = compile("server 127.0.0.1:9 backup; server 127.0.0.1:1; server 127.0.0.1:2 down;");
        // Primary peers first: the backup is id 2.
        assert!(up.peer(PeerId(2)).is_backup());
        let mut local = up.local_state();
        let now = Instant::now();
        assert_eq!(sequence_at(&up, &mut local, now, 3), "aaa");
        let mut tried = up.tried();
        let a = up
            .select(&mut local, Key::None, &mut tried, now)
            .expect("peer");
        up.release(a, Outcome::Failed, now);
        assert_eq!(
            up.select(&mut local, Key::None, &mut tried, now),
            Ok(PeerId(2)),
            "the retry goes to the backup"
        );
        up.release(PeerId(2), Outcome::Ok, now);
        assert_eq!(sequence_at(&up, &mut local, now, 2), "cc");
    }

    #[test]
    fn max_conns_is_honoured() {
        let up = compile("server 127.0.0.1:1 max_conns=1; server 127.0.0.1:2 max_conns=1;");
        let mut local = up.local_state();
        let now = Instant::now();
        let (mut t1, mut t2, mut t3) = (up.tried(), up.tried(), up.tried());
        let a = up
            .select(&mut local, Key::None, &mut t1, now)
            .expect("peer");
        let b = up
            .select(&mut local, Key::None, &mut t2, now)
            .expect("peer");
        assert_ne!(a, b);
        assert_eq!(up.select(&mut local, Key::None, &mut t3, now), Err(NoLive));
        up.release(a, Outcome::Ok, now);
        assert_eq!(up.select(&mut local, Key::None, &mut t3, now), Ok(a));
    }

    #[test]
    fn least_conn_picks_least_busy_by_weight() {
        let up = compile("least_conn; server 127.0.0.1:1 weight=2; server 127.0.0.1:2;");
        let mut local = up.local_state();
        let now = Instant::now();
        let mut held = Vec::new();
        for _ in 0..6 {
            let mut tried = up.tried();
            held.push(
                up.select(&mut local, Key::None, &mut tried, now)
                    .expect("peer"),
            );
        }
        // With weight 2, a carries twice b's attempts.
        assert_eq!(up.peers()[0].active(), 4);
        assert_eq!(up.peers()[1].active(), 2);
        // Free two on a: it is now the least busy for its weight.
        up.release(PeerId(0), Outcome::Ok, now);
        up.release(PeerId(0), Outcome::Ok, now);
        let mut tried = up.tried();
        assert_eq!(
            up.select(&mut local, Key::None, &mut tried, now),
            Ok(PeerId(0))
        );
    }

    #[test]
    fn least_conn_ties_go_round_robin() {
        let up = compile("least_conn; server 127.0.0.1:1; server 127.0.0.1:2; server 127.0.0.1:3;");
        assert_eq!(sequence(&up, Key::None, 6), "abcabc");
    }

    #[test]
    fn hash_is_stable_and_spreads() {
        let up =
            compile("hash $arg_k; server 127.0.0.1:1; server 127.0.0.1:2; server 127.0.0.1:3;");
        assert_eq!(up.key_kind(), KeyKind::Hash("$arg_k"));
        let mut hits = [0; 3];
        for k in 0..300 {
            let key = format!("key{k}");
            let first = sequence(&up, Key::Bytes(key.as_bytes()), 1);
            assert_eq!(
                sequence(&up, Key::Bytes(key.as_bytes()), 3),
                first.repeat(3)
            );
            hits[usize::from(first.as_bytes()[0] - b'a')] += 1;
        }
        assert!(hits.iter().all(|&h| h > 50), "{hits:?}");
    }

    #[test]
    fn hash_empty_key_is_round_robin() {
        let up = compile("hash $arg_k; server 127.0.0.1:1; server 127.0.0.1:2;");
        assert_eq!(sequence(&up, Key::Bytes(b""), 4), "abab");
    }

    #[test]
    fn hash_retry_moves_to_another_peer() {
        let up =
            compile("hash $arg_k; server 127.0.0.1:1; server 127.0.0.1:2; server 127.0.0.1:3;");
        let mut local = up.local_state();
        let now = Instant::now();
        let mut tried = up.tried();
        let key = Key::Bytes(b"abc");
        let mut seen = Vec::new();
        while let Ok(id) = up.select(&mut local, key, &mut tried, now) {
            up.release(id, Outcome::Failed, now);
            seen.push(id.0);
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2]);
    }

    #[test]
    fn consistent_hash_moves_few_keys() {
        let three =
            "hash $arg_k consistent; server 10.0.0.1:80; server 10.0.0.2:80; server 10.0.0.3:80;";
        let four = format!("{three} server 10.0.0.4:80;");
        let (a, b) = (compile(three), compile(&four));
        let keys = 4000;
        let moved = (0..keys)
            .filter(|k| {
                let key = format!("/item/{k}");
                let before = sequence(&a, Key::Bytes(key.as_bytes()), 1);
                let after = sequence(&b, Key::Bytes(key.as_bytes()), 1);
                if before != after {
                    assert_eq!(after, "d", "a key only moves to the new peer");
                }
                before != after
            })
            .count();
        // About a quarter of the keys move to the new peer.
        assert!((keys / 8..keys * 3 / 8).contains(&moved), "{moved} moved");
    }

    #[test]
    fn ip_hash_groups_a_slash_24() {
        let up = compile("ip_hash; server 127.0.0.1:1; server 127.0.0.1:2; server 127.0.0.1:3;");
        assert_eq!(up.key_kind(), KeyKind::ClientAddr);
        let of = |ip: &str| sequence(&up, Key::ClientAddr(ip.parse().expect("ip")), 1);
        for net in ["10.1.2", "192.168.7", "172.16.99"] {
            let first = of(&format!("{net}.1"));
            for host in [2, 100, 254] {
                assert_eq!(of(&format!("{net}.{host}")), first);
            }
        }
        let peers: std::collections::HashSet<String> =
            (0..50).map(|n| of(&format!("10.{n}.0.1"))).collect();
        assert_eq!(peers.len(), 3, "different networks spread");
    }

    #[test]
    fn ip_hash_known_value() {
        // nginx: from 89, (hash * 113 + octet) % 6271 over 127, 0, 0: 3913, 3199, 4040;
        // 4040 % 3 = 2.
        let up = compile("ip_hash; server 127.0.0.1:1; server 127.0.0.1:2; server 127.0.0.1:3;");
        assert_eq!(
            sequence(&up, Key::ClientAddr("127.0.0.1".parse().expect("ip")), 1),
            "c"
        );
    }

    #[test]
    fn random_two_prefers_idle_peer() {
        let up = compile("random two; server 127.0.0.1:1; server 127.0.0.1:2;");
        let mut local = up.local_state();
        let now = Instant::now();
        let mut tried = up.tried();
        let busy = up
            .select(&mut local, Key::None, &mut tried, now)
            .expect("peer");
        // Two distinct peers are drawn each time, so the idle one always wins.
        for _ in 0..20 {
            let mut tried = up.tried();
            let id = up
                .select(&mut local, Key::None, &mut tried, now)
                .expect("peer");
            assert_ne!(id, busy);
            up.release(id, Outcome::Ok, now);
        }
    }

    #[test]
    fn random_follows_weights() {
        let up = compile("random; server 127.0.0.1:1 weight=3; server 127.0.0.1:2;");
        let picks = sequence(&up, Key::None, 4000);
        let a = picks.bytes().filter(|&c| c == b'a').count();
        assert!((2700..3300).contains(&a), "{a} of 4000");
    }

    #[test]
    fn compile_errors_in_nginx_words() {
        let at = " in /etc/nginx/nginx.conf:";
        assert_eq!(error(""), format!("no servers are inside upstream{at}1"));
        assert_eq!(
            error("keepalive 2;"),
            format!("no servers are inside upstream{at}1")
        );
        assert_eq!(
            error("server 127.0.0.1 backup;"),
            format!("no servers in upstream \"u\"{at}1")
        );
        assert_eq!(
            error("hash $uri; server 127.0.0.1 backup;"),
            format!("balancing method does not support parameter \"backup\"{at}3")
        );
        assert_eq!(
            error("ip_hash; server 127.0.0.1 backup;"),
            format!("balancing method does not support parameter \"backup\"{at}3")
        );
        for param in [
            "weight=0",
            "weight=x",
            "max_fails=-1",
            "fail_timeout=500ms",
            "max_conns=x",
            "slow_start=x",
            "foo",
            "weight=",
        ] {
            assert_eq!(
                error(&format!("server 127.0.0.1 {param};")),
                format!("invalid parameter \"{param}\"{at}2")
            );
        }
        for (url, err) in [
            ("nohost.invalid:80", "host not found"),
            ("127.0.0.1:99999", "invalid port"),
            ("127.0.0.1:0", "invalid port"),
            ("127.0.0.1:", "invalid port"),
            ("::1:80", "invalid port"),
            ("http://127.0.0.1", "invalid host"),
            ("127.0.0.1/x", "invalid host"),
            ("127.0.0.1?x", "invalid host"),
            ("[::1", "invalid host"),
            (":80", "no host"),
        ] {
            assert_eq!(
                error(&format!("server {url};")),
                format!("{err} in upstream \"{url}\"{at}2")
            );
        }
        assert!(error("server unix:;").contains("no path in the unix domain socket"));
        let up = Upstream::compile(&block("server unix:/tmp/s; server 127.0.0.1:81;")).unwrap();
        assert_eq!(up.peer(PeerId(0)).name.as_ref(), "unix:/tmp/s");
        assert_eq!(
            error("hash $uri foo; server 127.0.0.1;"),
            format!("invalid parameter \"foo\"{at}2")
        );
        assert_eq!(
            error("random one; server 127.0.0.1;"),
            format!("invalid parameter \"one\"{at}2")
        );
        assert_eq!(
            error("random two foo; server 127.0.0.1;"),
            format!("invalid parameter \"foo\"{at}2")
        );
        assert_eq!(
            error("keepalive 0; server 127.0.0.1;"),
            format!("invalid value \"0\" in \"keepalive\" directive{at}2")
        );
        assert_eq!(
            error("keepalive_requests x; server 127.0.0.1;"),
            format!("\"keepalive_requests\" directive invalid number{at}2")
        );
        assert_eq!(
            error("keepalive_timeout x; server 127.0.0.1;"),
            format!("\"keepalive_timeout\" directive invalid value{at}2")
        );
        assert_eq!(
            error("zone z 1k; server 127.0.0.1;"),
            format!("zone \"z\" is too small{at}2")
        );
        assert_eq!(
            error("zone z x; server 127.0.0.1;"),
            format!("invalid zone size \"x\"{at}2")
        );
    }

    #[test]
    fn a_state_file_takes_the_place_of_server_lines() {
        let at = " in /etc/nginx/nginx.conf:";
        assert_eq!(
            error("state /var/lib/u.state;"),
            format!("\"state\" directive requires \"zone\"{at}2")
        );
        assert_eq!(
            error("zone z; server 127.0.0.1; state /s;"),
            format!("\"state\" directive cannot be used with \"server\"{at}4")
        );
        assert_eq!(
            error("zone z; state /s; server 127.0.0.1;"),
            format!("\"server\" directive cannot be used with \"state\"{at}4")
        );
        assert_eq!(
            error("zone z; state /s; state /t;"),
            format!("\"state\" directive is duplicate{at}4")
        );
        // Empty until the API adds to it.
        let up = compile("zone z; state /s;");
        assert!(up.peers().is_empty());
        assert_eq!(up.zone(), Some("z"));
    }

    #[test]
    fn accepted_as_nginx_accepts() {
        for body in [
            "server 127.0.0.1:82; server 127.0.0.1:81 backup; hash $uri;",
            "least_conn; server 127.0.0.1:81 backup; server 127.0.0.1:82;",
            "server 127.0.0.1:81 max_fails=0 fail_timeout=0 max_conns=0;",
            "server 127.0.0.1:081 weight=1 weight=2;",
            "random two least_conn; server 127.0.0.1;",
            "zone z; zone z 64k; server localhost:82;",
            "server [::1]; server 127.0.0.1 down;",
        ] {
            compile(body);
        }
    }

    #[test]
    fn implicit_group() {
        let up = Upstream::implicit(
            "localhost:8080",
            vec![
                PeerAddr::Inet("127.0.0.1:8080".parse().unwrap()),
                PeerAddr::Inet("[::1]:8080".parse().unwrap()),
            ],
        );
        assert_eq!(up.name(), "localhost:8080");
        assert_eq!(&*up.peers()[1].name, "[::1]:8080");
        assert_eq!(sequence(&up, Key::None, 4), "abab");
        let empty = Upstream::implicit("x:80", Vec::new());
        let mut tried = empty.tried();
        assert_eq!(
            empty.select(
                &mut empty.local_state(),
                Key::None,
                &mut tried,
                Instant::now()
            ),
            Err(NoLive)
        );
    }
}
