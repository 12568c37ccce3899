//! `stub_status` and `$connections_*`, compared with nginx on the same configuration: the
//! page's text to the byte once the counts are known (one connection open, writing), an idle
//! connection counted as waiting and a half-sent head as reading, requests counted per
//! request and connections per connection, 405 for other methods, the handler not inherited
//! by a nested location but kept in an `if` block, a server-level `stub_status`, and the
//! page over HTTP/2.

mod support;
// Only its curl is used here.
#[allow(dead_code)]
#[path = "support/h2c.rs"]
mod h2c;

use std::time::Duration;

use support::{kinds, Client, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        location = /status { stub_status; }
        location /old { stub_status on; }
        location /nested {
            stub_status;
            location /nested/inner { return 200 "inner\n"; }
            if ($arg_tag) { add_header X-Tag $arg_tag; }
        }
        location = /vars {
            return 200 "$connections_active $connections_reading $connections_writing $connections_waiting\n";
        }
        location / { return 200 "static\n"; }
    }
    server {
        listen 127.0.0.1:{PORT1} http2;
        stub_status;
    }
"#;

/// The page's counts, in its order: active; accepts, handled, requests; reading, writing,
/// waiting. Panics unless the text is nginx's layout.
fn counts(body: &str) -> [u64; 7] {
    let numbers: Vec<u64> = body
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect();
    let shape: String = body
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect::<String>()
        .split('9')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("N");
    assert_eq!(
        shape,
        "Active connections: N \nserver accepts handled requests\n N N N \nReading: N Writing: N Waiting: N \n",
        "{body:?}"
    );
    numbers.try_into().unwrap()
}

fn status(port: u16, path: &str) -> [u64; 7] {
    let r = support::get(port, path).expect("GET status");
    assert_eq!(r.status, 200);
    counts(&r.body_text())
}

/// Waits until the page, fetched over a new connection, shows the gauges (active,
/// reading, writing, waiting) the test expects, then returns its counts.
fn settled(port: u16, gauges: [u64; 4]) -> [u64; 7] {
    let mut last = [0; 7];
    let ok = support::wait_until(Duration::from_secs(5), || {
        last = status(port, "/status");
        [last[0], last[4], last[5], last[6]] == gauges
    });
    assert!(ok, "gauges {gauges:?} never seen, last {last:?}");
    last
}

#[test]
fn stub_status_counts_as_nginx_does() {
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &support::main_config(CONFIG)) else {
            continue;
        };
        let port = server.port(0);
        let mut lines = Vec::new();
        // Once the readiness probes are gone (accepted and closed), each page fetched over
        // a new connection counts one connection and one request more than the one before.
        let mut page = String::new();
        let steady = support::wait_until(Duration::from_secs(5), || {
            let before = status(port, "/status");
            page = support::get(port, "/status").unwrap().body_text();
            let now = counts(&page);
            now[1] == before[1] + 1 && now[3] == before[3] + 1
        });
        assert!(steady, "{kind}: counts never steady: {page}");
        let [_, accepts, handled, requests, ..] = counts(&page);
        assert_eq!(accepts, handled, "{kind}: every connection was handled");
        lines.push(format!(
            "page {:?}",
            page.replace(&format!(" {accepts} {handled} {requests} "), " A A R ")
        ));

        // Two requests on one connection: one more connection, two more requests.
        let before = status(port, "/status");
        let mut c = Client::connect(port);
        let get = "GET /status HTTP/1.1\r\nHost: localhost\r\n\r\n";
        c.send(get.as_bytes()).unwrap();
        let a = counts(&c.read_response(false).unwrap().body_text());
        c.send(get.as_bytes()).unwrap();
        let b = counts(&c.read_response(false).unwrap().body_text());
        lines.push(format!(
            "keepalive: accepts +{} +{}, requests +{} +{}",
            a[1] - before[1],
            b[1] - a[1],
            a[3] - before[3],
            b[3] - a[3]
        ));
        drop(c);

        // An idle connection waits; one that sent part of a head is reading.
        let mut idle = Client::connect(port);
        let waiting = settled(port, [2, 0, 1, 1]);
        lines.push(format!("idle: {:?}", &waiting[4..]));
        idle.send(b"GET / HTTP/1.1\r\n").unwrap();
        let reading = settled(port, [2, 1, 1, 0]);
        lines.push(format!("half a head: {:?}", &reading[4..]));
        idle.send(b"Host: x\r\n\r\n").unwrap();
        lines.push(format!(
            "then {}",
            idle.read_response(false).unwrap().body_text().trim()
        ));
        drop(idle);
        settled(port, [1, 0, 1, 0]);

        let vars = support::get(port, "/vars").unwrap();
        lines.push(format!("vars {}", vars.body_text().trim()));

        for (method, path) in [
            ("POST", "/status"),
            ("DELETE", "/status"),
            ("HEAD", "/status"),
            ("GET", "/old"),
            ("GET", "/nested/inner"),
            ("GET", "/nested?tag=t"),
        ] {
            let r = support::request(
                port,
                &format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
            )
            .unwrap();
            let body = r.body_text();
            let what = if body.starts_with("Active connections:") {
                counts(&body);
                "the page".to_string()
            } else if method == "HEAD" {
                format!("length {}", r.header("content-length").is_some())
            } else {
                format!("{:?}", body.lines().next().unwrap_or(""))
            };
            lines.push(format!(
                "{method} {path} -> {} {} tag={} {what}",
                r.status,
                r.header("content-type").unwrap_or("-"),
                r.header("x-tag").unwrap_or("-"),
            ));
        }

        // A server-level stub_status answers every path; over HTTP/2 the connection counts
        // as writing for its stream, not as waiting.
        let url = format!("http://127.0.0.1:{}/anything", server.port(1));
        if let Some(h2) = h2c::curl(&["--http2-prior-knowledge"], &url) {
            let text = String::from_utf8_lossy(&h2.body).to_string();
            let c = counts(&text);
            lines.push(format!(
                "h2 {} {} active {} rd {} wr {} wa {}",
                h2.version, h2.status, c[0], c[4], c[5], c[6]
            ));
        }
        // A reload keeps the counts: the server's, not a configuration's.
        let before = status(port, "/status");
        let reloaded = support::main_config(&CONFIG.replace(
            "location / {",
            "location = /reloaded { return 200 \"yes\\n\"; }\n        location / {",
        ))
        .replace("worker_processes 1;", "worker_processes 2;");
        server.write_config(&reloaded);
        server.signal(libc::SIGHUP);
        let done = support::wait_until(Duration::from_secs(10), || {
            support::get(port, "/reloaded").is_ok_and(|r| r.status == 200)
        });
        assert!(done, "{kind}: never reloaded\n{}", server.error_log());
        let after = status(port, "/status");
        assert!(
            after[1] > before[1] && after[3] > before[3],
            "{kind}: counts lost in a reload: {before:?} then {after:?}"
        );
        seen.push((kind, lines));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
        assert_eq!(nginx.len(), ours.len());
    }
}

const DEFERRED: &str = r#"
    server {
        listen 127.0.0.1:{PORT0} deferred;
        listen 127.0.0.1:{PORT1};
        location = /status { stub_status; }
        location / { return 200 "served\n"; }
    }
"#;

/// `listen ... deferred` (TCP_DEFER_ACCEPT): a connection that has sent nothing is not yet
/// accepted, where one to a plain address is, and it is served once its request comes.
#[test]
fn a_deferred_listen_accepts_a_connection_once_it_sends() {
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &support::main_config(DEFERRED)) else {
            continue;
        };
        let (deferred, plain) = (server.port(0), server.port(1));
        // The readiness probes are gone: only the page's own connection is counted.
        settled(plain, [1, 0, 1, 0]);
        let mut silent = Client::connect(deferred);
        let _control = Client::connect(plain);
        // The control connection, made after the silent one, is accepted and waits; the
        // silent one is not there (it would make three active, two waiting).
        settled(plain, [2, 0, 1, 1]);
        silent
            .send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let r = silent.read_response(false).unwrap();
        assert_eq!(
            (r.status, r.body_text().as_str()),
            (200, "served\n"),
            "{kind}"
        );
        // Served, it waits for its next request beside the control connection.
        settled(plain, [3, 0, 1, 2]);
    }
}
