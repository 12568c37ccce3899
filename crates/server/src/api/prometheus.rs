//! The counters in Prometheus's text format, under the names and labels of the nginx
//! Prometheus exporter, with latency histograms of our own.

use std::fmt::Write as _;

use super::counters::{state, Durations, Snapshot, BOUNDS, CLASSES};
use crate::stats::Totals;

/// The whole scrape.
pub(super) fn render(t: &Totals, snapshot: Option<&Snapshot>) -> String {
    let mut out = String::with_capacity(4096);
    connections(&mut out, t);
    if let Some(s) = snapshot {
        zones(&mut out, s);
        upstreams(&mut out, s);
    }
    out
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
fn connections(out: &mut String, t: &Totals) {
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

/// The histogram lines of `name` with `labels` (written as `a="b",`).
fn histogram(out: &mut String, name: &str, labels: &str, d: &Durations) {
    let mut count = 0;
    for (bound, n) in BOUNDS.iter().zip(&d.buckets) {
        count += n;
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{bound}\"}} {count}");
    }
    count += d.buckets[14];
    let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {count}");
    let labels = labels.trim_end_matches(',');
    let sum = d.sum_us as f64 / 1e6;
    let _ = writeln!(
        out,
        "{name}_sum{{{labels}}} {sum}\n{name}_count{{{labels}}} {count}"
    );
}

/// One family of a value per labelled row.
fn rows<'a>(
    out: &mut String,
    (name, kind, help): (&str, &str, &str),
    rows: impl Iterator<Item = (&'a str, u64)>,
) {
    family(out, name, kind, help);
    for (labels, value) in rows {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

fn zones(out: &mut String, s: &Snapshot) {
    for (location, kind) in [(false, "server_zone"), (true, "location_zone")] {
        let of_kind: Vec<(String, &super::counters::ZoneTotals)> = s
            .zones
            .iter()
            .filter(|(z, _)| z.location == location)
            .map(|(z, t)| (format!("{kind}=\"{}\"", escape(&z.name)), t))
            .collect();
        if of_kind.is_empty() {
            continue;
        }
        let metric = |what: &str| format!("nginxplus_{kind}_{what}");
        let requests = metric("requests");
        let each = of_kind.iter().map(|(l, t)| (l.as_str(), t.requests));
        rows(out, (&requests, "counter", "Total client requests"), each);
        let responses = metric("responses");
        family(
            out,
            &responses,
            "counter",
            "Total responses sent to clients",
        );
        for (labels, t) in &of_kind {
            for (class, n) in CLASSES.iter().zip(t.responses) {
                let _ = writeln!(out, "{responses}{{code=\"{class}\",{labels}}} {n}");
            }
        }
        let received = metric("received");
        let each = of_kind.iter().map(|(l, t)| (l.as_str(), t.received));
        rows(
            out,
            (&received, "counter", "Bytes received from clients"),
            each,
        );
        let sent = metric("sent");
        let each = of_kind.iter().map(|(l, t)| (l.as_str(), t.sent));
        rows(out, (&sent, "counter", "Bytes sent to clients"), each);
        let name = format!("portcullis_{kind}_request_duration_seconds");
        let what = if location { "location" } else { "server" };
        let help = format!("Time from the first byte of a request to its log, per {what} zone");
        family(out, &name, "histogram", &help);
        for (labels, t) in &of_kind {
            histogram(out, &name, &format!("{labels},"), &t.time);
        }
    }
}

/// Plus's peer states as the exporter numbers them.
fn state_number(state: &str) -> u8 {
    match state {
        "up" => 1,
        "draining" => 2,
        "down" => 3,
        "unavail" => 4,
        "checking" => 5,
        _ => 6,
    }
}

fn upstreams(out: &mut String, s: &Snapshot) {
    let mut all = Vec::new();
    for g in &s.groups {
        for (i, (peer, t)) in g.upstream.peers().iter().zip(&g.peers).enumerate() {
            let labels = format!(
                "server=\"{}\",upstream=\"{}\"",
                escape(&peer.name),
                escape(&g.name)
            );
            all.push((labels, (peer, state(&g.upstream, i)), t));
        }
    }
    if all.is_empty() {
        return;
    }
    let each = || all.iter().map(|(l, p, t)| (l.as_str(), *p, *t));
    rows(
        out,
        (
            "nginxplus_upstream_server_requests",
            "counter",
            "Total client requests",
        ),
        each().map(|(l, _, t)| (l, t.requests)),
    );
    let responses = "nginxplus_upstream_server_responses";
    family(out, responses, "counter", "Total responses sent to clients");
    for (labels, _, t) in each() {
        for (class, n) in CLASSES.iter().zip(t.responses) {
            let _ = writeln!(out, "{responses}{{code=\"{class}\",{labels}}} {n}");
        }
    }
    rows(
        out,
        (
            "nginxplus_upstream_server_fails",
            "counter",
            "Number of unsuccessful attempts to communicate with the server",
        ),
        each().map(|(l, _, t)| (l, t.fails)),
    );
    rows(
        out,
        ("nginxplus_upstream_server_state", "gauge", "Current state"),
        each().map(|(l, (_, state), _)| (l, u64::from(state_number(state)))),
    );
    rows(
        out,
        (
            "nginxplus_upstream_server_active",
            "gauge",
            "Active connections",
        ),
        each().map(|(l, (p, _), _)| (l, u64::from(p.active()))),
    );
    rows(
        out,
        (
            "nginxplus_upstream_server_sent",
            "counter",
            "Bytes sent to this server",
        ),
        each().map(|(l, _, t)| (l, t.sent)),
    );
    rows(
        out,
        (
            "nginxplus_upstream_server_received",
            "counter",
            "Bytes received to this server",
        ),
        each().map(|(l, _, t)| (l, t.received)),
    );
    rows(
        out,
        (
            "nginxplus_upstream_server_header_time",
            "gauge",
            "Average time to get the response header from the server",
        ),
        each().map(|(l, _, t)| (l, t.average_ms().0)),
    );
    rows(
        out,
        (
            "nginxplus_upstream_server_response_time",
            "gauge",
            "Average time to get the full response from the server",
        ),
        each().map(|(l, _, t)| (l, t.average_ms().1)),
    );
    let name = "portcullis_upstream_server_response_duration_seconds";
    family(
        out,
        name,
        "histogram",
        "Time from the start of an attempt to the end of the server's response, per peer",
    );
    for (labels, _, t) in each() {
        histogram(out, name, &format!("{labels},"), &t.time);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_lines_are_cumulative() {
        let mut d = Durations::default();
        d.buckets[0] = 2;
        d.buckets[1] = 1;
        d.buckets[13] = 1;
        d.buckets[14] = 1;
        d.sum_us = 1_500_000;
        let mut out = String::new();
        histogram(&mut out, "x", "a=\"b\",", &d);
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
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
