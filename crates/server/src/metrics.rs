//! Prometheus metrics, built in: `prometheus_metrics` makes a location answer with the
//! server's counters in Prometheus's text format, under the names and labels of the nginx
//! Prometheus exporter (`nginx_connections_*` and `nginx_http_requests_total` from the
//! `stub_status` counters, `nginxplus_server_zone_*`, `nginxplus_location_zone_*` and
//! `nginxplus_upstream_server_*` as it makes them of the NGINX Plus API), so dashboards and
//! alerts made for nginx read them unchanged; and latency histograms it does not have:
//! `portcullis_server_zone_request_duration_seconds`, the same per location zone, and
//! `portcullis_upstream_server_response_duration_seconds` per peer.
//!
//! `status_zone name` (NGINX Plus's) counts a server's requests (in a server block) or a
//! location's (in a location) under `name`; every peer of every `upstream` block is counted.
//! Counting starts when the configuration has `status_zone` or `prometheus_metrics`;
//! otherwise the module does nothing on the request path.
//!
//! Each worker counts in counters of its own (a load and a store, no locked instruction, no
//! cache line shared between cores), and a scrape adds up every worker's. The counters
//! belong to one load of the configuration: a reload starts them again from zero, which
//! Prometheus reads as a counter reset.

use std::any::Any;
use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use portcullis_config::{ConfigError, Directive};
use portcullis_http::Method;
use portcullis_proxy::upstream::Upstream;

use crate::module::{self, Load, Module, Opened, Slot};
use crate::request::{Body, Handlers, Logged, Request, Response, Step};
use crate::vars::Var;

pub(crate) struct Metrics;

pub(crate) static MODULE: Metrics = Metrics;

/// The histograms' bucket bounds, in microseconds, and as Prometheus's `le` labels.
const BOUNDS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];
const BOUNDS: [&str; 14] = [
    "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
    "2.5", "5", "10",
];

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

/// Durations in buckets (the last one past every bound), and their sum.
#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; 15],
    sum_us: AtomicU64,
}

impl Histogram {
    fn observe(&self, us: u64) {
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
    /// Attempts that got no response (an error or a timeout).
    fails: AtomicU64,
    /// The time of the responses, from the attempt's start to the end of the response.
    time: Histogram,
}

/// The class of a status, as an index of the `responses` counters.
fn class(status: u16) -> usize {
    usize::from(status / 100).clamp(1, 5) - 1
}

/// One worker's counters for one load of the configuration.
struct Slab {
    zones: Box<[ZoneCounters]>,
    /// Each group's peers, with the group's address, which attempts name it by.
    groups: Box<[(usize, Box<[PeerCounters]>)]>,
}

/// A `status_zone`: its name, and whether it is a location's.
struct Zone {
    name: String,
    location: bool,
}

/// What one load of the configuration counts: its zones and groups, and every worker's
/// counters.
#[derive(Default)]
struct Layout {
    zones: Mutex<Vec<Zone>>,
    groups: Mutex<Vec<(String, Arc<Upstream>)>>,
    workers: Mutex<Vec<Arc<Slab>>>,
}

/// Locks a list that is only pushed to: a panic elsewhere cannot leave it half made.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Layout {
    /// The place of the zone `name` of its kind, added if it is new.
    fn zone(&self, name: &str, location: bool) -> usize {
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

    /// A worker's counters, made once the configuration is whole.
    fn new_slab(&self) -> Arc<Slab> {
        let zones = lock(&self.zones).len();
        let groups = lock(&self.groups)
            .iter()
            .map(|(_, u)| {
                let peers = (0..u.peers().len()).map(|_| PeerCounters::default());
                (Arc::as_ptr(u) as usize, peers.collect())
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

/// What a level's settings say.
#[derive(Clone, Default)]
struct Conf {
    /// The configuration's counters, when it counts at all.
    layout: Option<Arc<Layout>>,
    server_zone: Option<usize>,
    location_zone: Option<usize>,
    /// `prometheus_metrics`: the location answers with the metrics.
    serve: bool,
}

/// What one load of the configuration keeps.
struct State {
    layout: Arc<Layout>,
    /// The configuration names `status_zone` or `prometheus_metrics`.
    enabled: bool,
}

/// A worker's counters, for each configuration its requests run with (a reload's requests
/// in flight finish with the old one).
type WorkerSlabs = RefCell<Vec<(Weak<Layout>, Arc<Slab>)>>;

/// Whether `directives` (and the blocks in them) name one of the module's directives.
fn names_any(directives: &[Directive]) -> bool {
    directives.iter().any(|d| {
        matches!(d.name.as_str(), "status_zone" | "prometheus_metrics") || names_any(d.children())
    })
}

impl Module for Metrics {
    fn name(&self) -> &'static str {
        "http_prometheus_module"
    }

    fn load(&self) -> Box<dyn Any + Send + Sync> {
        Box::new(State {
            layout: Arc::default(),
            enabled: false,
        })
    }

    fn defaults(&self) -> Slot {
        Arc::new(Conf::default())
    }

    /// Whether the configuration counts, and the groups it counts the peers of.
    fn begin_http(&self, http: &[Directive], cx: &mut Load<'_>) -> Result<(), ConfigError> {
        let state = cx
            .state
            .downcast_mut::<State>()
            .expect("the module's state");
        state.enabled = names_any(http);
        if state.enabled {
            let mut groups: Vec<(String, Arc<Upstream>)> = cx
                .upstreams
                .iter()
                .map(|(name, g)| (name.clone(), g.upstream.clone()))
                .collect();
            groups.sort_by(|a, b| a.0.cmp(&b.0));
            *lock(&state.layout.groups) = groups;
        }
        Ok(())
    }

    fn finish_http(
        &self,
        conf: &mut Slot,
        _http: &[Directive],
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let state = cx
            .state
            .downcast_ref::<State>()
            .expect("the module's state");
        if state.enabled {
            module::edit::<Conf>(conf).layout = Some(state.layout.clone());
        }
        Ok(())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let state = cx
            .state
            .downcast_ref::<State>()
            .expect("the module's state");
        let c = module::edit::<Conf>(conf);
        match d.name.as_str() {
            "status_zone" => {
                let location = cx.location.is_some();
                let zone = Some(state.layout.zone(d.arg(0), location));
                if location {
                    c.location_zone = zone;
                } else {
                    c.server_zone = zone;
                }
            }
            _ => c.serve = true,
        }
        Ok(())
    }

    /// `prometheus_metrics` belongs to the location that names it.
    fn enter_location(&self, conf: &mut Slot) {
        if module::get::<Conf>(conf).serve {
            module::edit::<Conf>(conf).serve = false;
        }
    }

    fn is_active(&self, conf: &Slot) -> bool {
        module::get::<Conf>(conf).layout.is_some()
    }

    fn worker(&self, _loaded: &(dyn Any + Send + Sync), _opened: &Opened) -> Box<dyn Any> {
        Box::new(WorkerSlabs::default())
    }

    fn handlers(&self) -> &'static (dyn Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            content: Some(content),
            log: Some(log),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// Runs `f` on the worker's counters for `layout`, made on its first request.
fn with_slab(state: &dyn Any, layout: &Arc<Layout>, f: impl FnOnce(&Slab)) {
    let slabs: &WorkerSlabs = state.downcast_ref().expect("the module's worker state");
    let mut slabs = slabs.borrow_mut();
    let me = Arc::as_ptr(layout);
    if let Some((_, s)) = slabs.iter().find(|(l, _)| l.as_ptr() == me) {
        return f(s);
    }
    // Configurations no request runs with any more are let go.
    slabs.retain(|(l, _)| l.strong_count() > 0);
    let s = layout.new_slab();
    f(&s);
    slabs.push((Arc::downgrade(layout), s));
}

/// The log phase: the request in its zones, and its attempts in their peers.
fn log(
    conf: &Slot,
    state: &dyn Any,
    logged: Option<&Logged<'_, '_>>,
    _lookup: &mut dyn FnMut(&Var, &mut Vec<u8>),
    _has: &dyn Fn(&Var) -> bool,
) {
    let (Some(l), Some(layout)) = (logged, &module::get::<Conf>(conf).layout) else {
        return;
    };
    let c = module::get::<Conf>(conf);
    with_slab(state, layout, |slab| record(slab, c, l));
}

/// Counts a finished request in `slab`.
fn record(slab: &Slab, c: &Conf, l: &Logged<'_, '_>) {
    let us = u64::try_from(l.req.started().elapsed().as_micros()).unwrap_or(u64::MAX);
    for zone in [c.server_zone, c.location_zone].into_iter().flatten() {
        let Some(z) = slab.zones.get(zone) else {
            continue;
        };
        bump(&z.requests, 1);
        bump(&z.responses[class(l.resp.status)], 1);
        bump(&z.received, l.req.head().raw().len() as u64);
        bump(&z.sent, l.sent);
        z.time.observe(us);
    }
    for a in l.req.upstream_attempts() {
        let Some((group, peer)) = a.peer else {
            continue;
        };
        let Some(p) = slab
            .groups
            .iter()
            .find(|(g, _)| *g == group)
            .and_then(|(_, peers)| peers.get(peer))
        else {
            continue;
        };
        bump(&p.requests, 1);
        match (a.header, a.status) {
            (Some(_), Some(status)) => {
                bump(&p.responses[class(status)], 1);
                p.time
                    .observe(u64::try_from(a.response.as_micros()).unwrap_or(u64::MAX));
            }
            _ => bump(&p.fails, 1),
        }
    }
}

/// The content phase of a `prometheus_metrics` location.
fn content(req: &mut Request<'_>, conf: &Slot) -> Option<Step> {
    let c = module::get::<Conf>(conf);
    if !c.serve {
        return None;
    }
    if !matches!(req.head().method(), Method::Get | Method::Head) {
        return Some(Step::Status(405));
    }
    let mut text = String::with_capacity(4096);
    render_connections(&mut text, &req.stats());
    if let Some(layout) = &c.layout {
        render_zones(&mut text, layout);
        render_upstreams(&mut text, layout);
    }
    let mut resp = Response::new(200);
    resp.content_type = Some(Arc::from("text/plain; version=0.0.4; charset=utf-8"));
    resp.content_length = Some(text.len() as u64);
    resp.body = Body::Bytes(Bytes::from(text));
    Some(Step::Done(resp))
}

/// A metric's `# HELP` and `# TYPE` lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label's value as Prometheus's text format writes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The `stub_status` counters, as the exporter names them.
fn render_connections(out: &mut String, t: &crate::stats::Totals) {
    let metrics: [(&str, &str, &str, u64); 8] = [
        ("nginx_up", "gauge", "Status of the last metric scrape", 1),
        (
            "nginx_connections_accepted",
            "counter",
            "Accepted client connections",
            t.accepted,
        ),
        (
            "nginx_connections_active",
            "gauge",
            "Active client connections",
            t.active,
        ),
        (
            "nginx_connections_handled",
            "counter",
            "Handled client connections",
            t.handled,
        ),
        (
            "nginx_connections_reading",
            "gauge",
            "Connections where NGINX is reading the request header",
            t.reading,
        ),
        (
            "nginx_connections_waiting",
            "gauge",
            "Idle client connections",
            t.waiting,
        ),
        (
            "nginx_connections_writing",
            "gauge",
            "Connections where NGINX is writing the response back to the client",
            t.writing,
        ),
        (
            "nginx_http_requests_total",
            "counter",
            "Total http requests",
            t.requests,
        ),
    ];
    for (name, kind, help, value) in metrics {
        family(out, name, kind, help);
        let _ = writeln!(out, "{name} {value}");
    }
}

/// Every worker's counters of one zone added up.
#[derive(Default)]
struct ZoneTotals {
    requests: u64,
    responses: [u64; 5],
    received: u64,
    sent: u64,
    buckets: [u64; 15],
    sum_us: u64,
}

/// The histogram lines of `name` with `labels` (written as `a="b",`).
fn histogram(out: &mut String, name: &str, labels: &str, buckets: &[u64; 15], sum_us: u64) {
    let mut count = 0;
    for (bound, n) in BOUNDS.iter().zip(buckets) {
        count += n;
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{bound}\"}} {count}");
    }
    count += buckets[14];
    let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {count}");
    let labels = labels.trim_end_matches(',');
    let sum = sum_us as f64 / 1e6;
    let _ = writeln!(
        out,
        "{name}_sum{{{labels}}} {sum}\n{name}_count{{{labels}}} {count}"
    );
}

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

fn render_zones(out: &mut String, layout: &Layout) {
    let workers = lock(&layout.workers);
    let zones = lock(&layout.zones);
    let totals: Vec<ZoneTotals> = (0..zones.len())
        .map(|i| {
            let mut t = ZoneTotals::default();
            for z in workers.iter().filter_map(|w| w.zones.get(i)) {
                t.requests += get(&z.requests);
                for (sum, c) in t.responses.iter_mut().zip(&z.responses) {
                    *sum += get(c);
                }
                t.received += get(&z.received);
                t.sent += get(&z.sent);
                for (sum, c) in t.buckets.iter_mut().zip(&z.time.buckets) {
                    *sum += get(c);
                }
                t.sum_us += get(&z.time.sum_us);
            }
            t
        })
        .collect();
    for (location, kind) in [(false, "server_zone"), (true, "location_zone")] {
        let of_kind: Vec<(&Zone, &ZoneTotals)> = zones
            .iter()
            .zip(&totals)
            .filter(|(z, _)| z.location == location)
            .collect();
        if of_kind.is_empty() {
            continue;
        }
        let what = if location { "location" } else { "server" };
        family(
            out,
            &format!("nginxplus_{kind}_requests"),
            "counter",
            "Total client requests",
        );
        for (z, t) in &of_kind {
            let _ = writeln!(
                out,
                "nginxplus_{kind}_requests{{{kind}=\"{}\"}} {}",
                escape(&z.name),
                t.requests
            );
        }
        family(
            out,
            &format!("nginxplus_{kind}_responses"),
            "counter",
            "Total responses sent to clients",
        );
        for (z, t) in &of_kind {
            for (class, n) in CLASSES.iter().zip(t.responses) {
                let _ = writeln!(
                    out,
                    "nginxplus_{kind}_responses{{code=\"{class}\",{kind}=\"{}\"}} {n}",
                    escape(&z.name)
                );
            }
        }
        family(
            out,
            &format!("nginxplus_{kind}_received"),
            "counter",
            "Bytes received from clients",
        );
        for (z, t) in &of_kind {
            let _ = writeln!(
                out,
                "nginxplus_{kind}_received{{{kind}=\"{}\"}} {}",
                escape(&z.name),
                t.received
            );
        }
        family(
            out,
            &format!("nginxplus_{kind}_sent"),
            "counter",
            "Bytes sent to clients",
        );
        for (z, t) in &of_kind {
            let _ = writeln!(
                out,
                "nginxplus_{kind}_sent{{{kind}=\"{}\"}} {}",
                escape(&z.name),
                t.sent
            );
        }
        let name = format!("portcullis_{kind}_request_duration_seconds");
        family(
            out,
            &name,
            "histogram",
            &format!("Time from the first byte of a request to its log, per {what} zone"),
        );
        for (z, t) in &of_kind {
            let labels = format!("{kind}=\"{}\",", escape(&z.name));
            histogram(out, &name, &labels, &t.buckets, t.sum_us);
        }
    }
}

/// Every worker's counters of one peer added up.
#[derive(Default)]
struct PeerTotals {
    requests: u64,
    responses: [u64; 5],
    fails: u64,
    buckets: [u64; 15],
    sum_us: u64,
}

/// Plus's peer states as the exporter numbers them: up, down, unavail, unhealthy.
fn state(peer: &portcullis_proxy::upstream::Peer) -> u8 {
    if peer.is_down() {
        3
    } else if !peer.is_healthy() {
        6
    } else if peer.max_fails() > 0 && peer.fails() >= peer.max_fails() {
        4
    } else {
        1
    }
}

fn render_upstreams(out: &mut String, layout: &Layout) {
    let workers = lock(&layout.workers);
    let groups = lock(&layout.groups);
    let mut rows = Vec::new();
    for (gi, (name, upstream)) in groups.iter().enumerate() {
        for (pi, peer) in upstream.peers().iter().enumerate() {
            let mut t = PeerTotals::default();
            for p in workers
                .iter()
                .filter_map(|w| w.groups.get(gi).and_then(|(_, peers)| peers.get(pi)))
            {
                t.requests += get(&p.requests);
                for (sum, c) in t.responses.iter_mut().zip(&p.responses) {
                    *sum += get(c);
                }
                t.fails += get(&p.fails);
                for (sum, c) in t.buckets.iter_mut().zip(&p.time.buckets) {
                    *sum += get(c);
                }
                t.sum_us += get(&p.time.sum_us);
            }
            let labels = format!(
                "server=\"{}\",upstream=\"{}\"",
                escape(&peer.name),
                escape(name)
            );
            rows.push((labels, peer, t));
        }
    }
    if rows.is_empty() {
        return;
    }
    family(
        out,
        "nginxplus_upstream_server_requests",
        "counter",
        "Total client requests",
    );
    for (labels, _, t) in &rows {
        let _ = writeln!(
            out,
            "nginxplus_upstream_server_requests{{{labels}}} {}",
            t.requests
        );
    }
    family(
        out,
        "nginxplus_upstream_server_responses",
        "counter",
        "Total responses sent to clients",
    );
    for (labels, _, t) in &rows {
        for (class, n) in CLASSES.iter().zip(t.responses) {
            let _ = writeln!(
                out,
                "nginxplus_upstream_server_responses{{code=\"{class}\",{labels}}} {n}"
            );
        }
    }
    family(
        out,
        "nginxplus_upstream_server_fails",
        "counter",
        "Number of unsuccessful attempts to communicate with the server",
    );
    for (labels, _, t) in &rows {
        let _ = writeln!(
            out,
            "nginxplus_upstream_server_fails{{{labels}}} {}",
            t.fails
        );
    }
    family(
        out,
        "nginxplus_upstream_server_state",
        "gauge",
        "Current state",
    );
    for (labels, peer, _) in &rows {
        let _ = writeln!(
            out,
            "nginxplus_upstream_server_state{{{labels}}} {}",
            state(peer)
        );
    }
    family(
        out,
        "nginxplus_upstream_server_active",
        "gauge",
        "Active connections",
    );
    for (labels, peer, _) in &rows {
        let _ = writeln!(
            out,
            "nginxplus_upstream_server_active{{{labels}}} {}",
            peer.active()
        );
    }
    family(
        out,
        "nginxplus_upstream_server_response_time",
        "gauge",
        "Average time to get the full response from the server",
    );
    for (labels, _, t) in &rows {
        let answered: u64 = t.responses.iter().sum();
        let ms = t.sum_us.checked_div(answered).unwrap_or(0) / 1000;
        let _ = writeln!(
            out,
            "nginxplus_upstream_server_response_time{{{labels}}} {ms}"
        );
    }
    let name = "portcullis_upstream_server_response_duration_seconds";
    family(
        out,
        name,
        "histogram",
        "Time from the start of an attempt to the end of the server's response, per peer",
    );
    for (labels, _, t) in &rows {
        histogram(out, name, &format!("{labels},"), &t.buckets, t.sum_us);
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
        let counts: Vec<u64> = h.buckets.iter().map(get).collect();
        assert_eq!(counts[0], 2);
        assert_eq!(counts[1], 1);
        assert_eq!(counts[13], 1);
        assert_eq!(counts[14], 1);
        assert_eq!(get(&h.sum_us), 20_001_002);
        let mut out = String::new();
        let buckets: [u64; 15] = std::array::from_fn(|i| counts[i]);
        histogram(&mut out, "x", "a=\"b\",", &buckets, 1_500_000);
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.0005\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.001\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"10\"} 4\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 5\n"), "{out}");
        assert!(
            out.contains("x_sum{a=\"b\"} 1.5\nx_count{a=\"b\"} 5\n"),
            "{out}"
        );
    }

    #[test]
    fn classes_and_escapes() {
        assert_eq!(class(101), 0);
        assert_eq!(class(200), 1);
        assert_eq!(class(499), 3);
        assert_eq!(class(504), 4);
        assert_eq!(class(999), 4);
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
