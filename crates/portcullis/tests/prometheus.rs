//! `prometheus_metrics` and `status_zone`: a scrape in Prometheus's text format (every line a
//! comment or a sample, each family typed once) whose counts are the requests made, added up
//! over two workers: the `stub_status` counters under the exporter's names, a server zone and
//! a location zone by status class with their bytes and latency histograms, and each peer of
//! an upstream group (requests, responses, a failed attempt, its state, its histogram).
//! Without either directive the module counts nothing; its directives are checked at load.

mod support;

use std::collections::HashMap;

use support::{get, main_config, Kind, Server};

const CONFIG: &str = r#"
    upstream back {
        server 127.0.0.1:{PORT1};
        server 127.0.0.1:DEAD;
    }
    upstream solo {
        server 127.0.0.1:{PORT1};
    }
    server {
        # The servers the groups send to, and the metrics, scraped from a server of no
        # zone so that scraping does not change what it reads.
        listen 127.0.0.1:{PORT1};
        location = /metrics { prometheus_metrics; }
        location /missing { return 404; }
        location / { return 200 "back\n"; }
    }
    server {
        listen 127.0.0.1:{PORT0};
        status_zone front;
        location /p/ {
            status_zone proxied;
            proxy_pass http://back/;
        }
        location /auth/ {
            auth_request /check;
            proxy_pass http://solo/;
        }
        location = /check {
            internal;
            proxy_pass http://solo/;
        }
        location /twice/ {
            proxy_pass http://solo/missing;
            proxy_intercept_errors on;
            error_page 404 = /again;
        }
        location = /again {
            internal;
            proxy_pass http://solo/;
        }
        location / { return 200 "static\n"; }
    }
"#;

/// The samples of a scrape by their name and labels as written, after checking the text's
/// form: `# HELP` and `# TYPE` once per family, before its samples; every sample a name,
/// labels of `name="value"`, and a number.
fn samples(text: &str) -> HashMap<String, f64> {
    let sample = regex::Regex::new(
        r#"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*\})? (\S+)$"#,
    )
    .unwrap();
    let mut typed = HashMap::new();
    let mut out = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("a type");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(
                typed.insert(name.to_owned(), kind.to_owned()).is_none(),
                "typed twice: {line}"
            );
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let caps = sample
            .captures(line)
            .unwrap_or_else(|| panic!("not a sample: {line:?}"));
        let name = &caps[1];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| typed.get(*f).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(name);
        assert!(typed.contains_key(family), "sample before its type: {line}");
        let value: f64 = caps[3]
            .parse()
            .unwrap_or_else(|_| panic!("not a number: {line}"));
        let key = format!("{name}{}", caps.get(2).map_or("", |m| m.as_str()));
        assert!(out.insert(key, value).is_none(), "twice: {line}");
    }
    out
}

/// Scrapes `port`'s `/metrics` until the sample `key` reads `want` (within a few seconds),
/// and returns that scrape's samples.
fn scrape_until(port: u16, key: &str, want: f64) -> HashMap<String, f64> {
    let mut last = HashMap::new();
    let reached = support::wait_until(std::time::Duration::from_secs(5), || {
        let scrape = get(port, "/metrics").expect("GET /metrics");
        assert_eq!(scrape.status, 200);
        assert_eq!(
            scrape.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        last = samples(&scrape.body_text());
        last.get(key) == Some(&want)
    });
    assert!(reached, "{key} never read {want}: {:?}", last.get(key));
    last
}

#[test]
fn a_scrape_counts_what_was_served() {
    // A port nobody listens on.
    let dead_port = support::free_ports(1)[0];
    let config = main_config(&CONFIG.replace("DEAD", &dead_port.to_string()))
        .replace("worker_processes 1;", "worker_processes 2;");
    let Some(server) = Server::start(Kind::Portcullis, 2, &config) else {
        return;
    };
    let port = server.port(0);
    let metrics = server.port(1);
    for _ in 0..6 {
        assert_eq!(get(port, "/p/x").expect("GET /p/x").status, 200);
    }
    for path in ["/", "/a", "/b"] {
        assert_eq!(get(port, path).expect("GET").status, 200);
    }
    let closing = support::request(
        port,
        "GET /p/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(closing.expect("GET").status, 200);
    // A request is counted when it is logged, just after its response went out: the
    // scrape waits for the tenth.
    let zone = r#"nginxplus_server_zone_requests{server_zone="front"}"#;
    let s = scrape_until(metrics, zone, 10.0);
    let v = |key: &str| *s.get(key).unwrap_or_else(|| panic!("no {key} in {s:?}"));
    assert_eq!(v("nginx_up"), 1.0);
    assert!(v("nginx_http_requests_total") >= 11.0);
    // The scrape's own connection at least (another may still be closing).
    assert!(v("nginx_connections_writing") >= 1.0);
    assert_eq!(
        v(r#"nginxplus_server_zone_responses{code="2xx",server_zone="front"}"#),
        10.0
    );
    assert_eq!(
        v(r#"nginxplus_server_zone_responses{code="5xx",server_zone="front"}"#),
        0.0
    );
    assert!(v(r#"nginxplus_server_zone_sent{server_zone="front"}"#) > 10.0 * 100.0);
    assert!(v(r#"nginxplus_server_zone_received{server_zone="front"}"#) > 10.0 * 20.0);
    assert_eq!(
        v(r#"nginxplus_location_zone_requests{location_zone="proxied"}"#),
        7.0
    );
    let hist = "portcullis_server_zone_request_duration_seconds";
    assert_eq!(v(&format!(r#"{hist}_count{{server_zone="front"}}"#)), 10.0);
    assert_eq!(
        v(&format!(
            r#"{hist}_bucket{{server_zone="front",le="+Inf"}}"#
        )),
        10.0
    );
    // Buckets only grow.
    let mut last = 0.0;
    for le in [
        "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
        "2.5", "5", "10", "+Inf",
    ] {
        let n = v(&format!(
            r#"{hist}_bucket{{server_zone="front",le="{le}"}}"#
        ));
        assert!(n >= last, "le={le}: {n} < {last}");
        last = n;
    }
    // The group's live peer answered every proxied request; the other, nobody listening,
    // failed once and is unavailable since (max_fails 1, within fail_timeout).
    let live = format!(r#"server="127.0.0.1:{metrics}",upstream="back""#);
    let dead = format!(r#"server="127.0.0.1:{dead_port}",upstream="back""#);
    let at = |name: &str, labels: &str| v(&format!("{name}{{{labels}}}"));
    assert_eq!(
        v(&format!(
            "nginxplus_upstream_server_responses{{code=\"2xx\",{live}}}"
        )),
        7.0
    );
    assert_eq!(at("nginxplus_upstream_server_requests", &live), 7.0);
    assert_eq!(at("nginxplus_upstream_server_requests", &dead), 1.0);
    assert_eq!(at("nginxplus_upstream_server_fails", &dead), 1.0);
    assert_eq!(at("nginxplus_upstream_server_state", &live), 1.0);
    assert_eq!(at("nginxplus_upstream_server_state", &dead), 4.0);
    let peer_hist = "portcullis_upstream_server_response_duration_seconds";
    assert_eq!(at(&format!("{peer_hist}_count"), &live), 7.0);
    assert!(at(&format!("{peer_hist}_sum"), &live) > 0.0);

    // A subrequest's attempts (auth_request) and an earlier round's (the 404 an error_page
    // answered from another proxied location) count for their peer too: the subrequest's
    // and the request's own, then the 404 and the error page's.
    assert_eq!(get(port, "/auth/x").expect("GET /auth/x").status, 200);
    assert_eq!(get(port, "/twice/x").expect("GET /twice/x").status, 200);
    let solo = format!(r#"server="127.0.0.1:{metrics}",upstream="solo""#);
    let requests = format!("nginxplus_upstream_server_requests{{{solo}}}");
    let again = scrape_until(metrics, &requests, 4.0);
    let responses = |class: &str| {
        let key = format!("nginxplus_upstream_server_responses{{code=\"{class}\",{solo}}}");
        again.get(&key).copied()
    };
    assert_eq!(responses("2xx"), Some(3.0));
    assert_eq!(responses("4xx"), Some(1.0));
    // Other methods are refused, as stub_status refuses them.
    let post = support::request(
        metrics,
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(post.expect("POST").status, 405);
}

/// Without `status_zone`, only the connection counters are shown: nothing is counted per
/// zone or peer.
#[test]
fn without_zones_only_connections_are_shown() {
    let config = main_config(
        "server { listen 127.0.0.1:{PORT0}; location = /m { prometheus_metrics; } location / { return 204; } }",
    );
    let Some(server) = Server::start(Kind::Portcullis, 1, &config) else {
        return;
    };
    assert_eq!(get(server.port(0), "/x").expect("GET").status, 204);
    let body = get(server.port(0), "/m").expect("GET /m").body_text();
    let s = samples(&body);
    assert!(s.contains_key("nginx_connections_accepted"), "{body}");
    assert!(!body.contains("zone"), "{body}");
}

#[test]
fn directives_are_checked_at_load() {
    for (http, error) in [
        (
            "status_zone a; server { }",
            "\"status_zone\" directive is not allowed here",
        ),
        (
            "server { location / { prometheus_metrics on; } }",
            "invalid number of arguments in \"prometheus_metrics\" directive",
        ),
        (
            "server { status_zone a; status_zone b; }",
            "\"status_zone\" directive is duplicate",
        ),
    ] {
        let dir = support::TempDir::new("prom-t");
        let conf = dir.write(
            "nginx.conf",
            support::render(&main_config(http), dir.path(), &[]),
        );
        let Some(binary) = Kind::Portcullis.binary() else {
            return;
        };
        let out = support::test_config(std::process::Command::new(binary), dir.path(), &conf);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{http} loads");
        assert!(stderr.contains(error), "{http}: {stderr}");
    }
}
