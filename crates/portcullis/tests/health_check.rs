//! Active health checks (`health_check`, `match`), as NGINX Plus has them: an upstream server
//! whose checks fail takes no request until they pass again, in every worker; `mandatory`
//! keeps a server out until its first check passes; a location without an upstream group
//! to check is refused. (nginx's open-source build has no health checks to compare with.)

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::{main_config, Kind, Server};

/// An upstream that answers `/health` with 200 `healthy` while `up`, else 503, `/b-fails`
/// with 500 if its `name` is `b`, and any other request with its `name`; it counts those.
fn upstream(name: &'static str, up: Arc<AtomicBool>, served: Arc<AtomicUsize>) -> u16 {
    support::head_upstream(move |_, head| {
        let health = head.starts_with(b"GET /health ");
        if head.starts_with(b"GET /b-fails ") {
            let status = if name == "b" { "500 Error" } else { "200 OK" };
            return format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").into_bytes();
        }
        let (status, body) = match (health, up.load(Ordering::SeqCst)) {
            (true, true) => ("200 OK", "healthy"),
            (true, false) => ("503 Unavailable", "sick"),
            (false, _) => {
                served.fetch_add(1, Ordering::SeqCst);
                ("200 OK", name)
            }
        };
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    })
}

/// Who answers `n` requests in a row, as a string of names.
fn answers(port: u16, n: usize) -> String {
    (0..n)
        .map(|_| support::get(port, "/").expect("GET /").body_text())
        .collect()
}

#[test]
fn an_unhealthy_server_takes_no_requests_until_its_checks_pass() {
    let (a_up, b_up) = (
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(true)),
    );
    let (a_served, b_served) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let a = upstream("a", a_up, a_served.clone());
    let b = upstream("b", b_up.clone(), b_served.clone());
    let http = format!(
        r#"
    upstream pair {{ server 127.0.0.1:{a}; server 127.0.0.1:{b}; }}
    match healthy {{ status 200; body ~ "healthy"; }}
    server {{
        listen 127.0.0.1:{{PORT0}};
        location / {{
            proxy_pass http://pair;
            health_check interval=100ms fails=2 passes=2 uri=/health match=healthy;
        }}
    }}
"#
    );
    // Two workers: the checks' conclusion holds in both.
    let conf = main_config(&http).replace("worker_processes 1;", "worker_processes 2;");
    let Some(server) = Server::start(Kind::Portcullis, 1, &conf) else {
        return;
    };
    let port = server.port(0);
    // Both serve.
    let both = answers(port, 8);
    assert!(both.contains('a') && both.contains('b'), "{both}");
    // b fails its checks: once two have failed, it gets nothing.
    b_up.store(false, Ordering::SeqCst);
    assert!(
        support::wait_until(Duration::from_secs(5), || answers(port, 4) == "aaaa"),
        "b was never taken out"
    );
    let before = b_served.load(Ordering::SeqCst);
    assert_eq!(answers(port, 20), "a".repeat(20));
    assert_eq!(b_served.load(Ordering::SeqCst), before);
    let said = format!("health check \"\" of peer 127.0.0.1:{b} in upstream \"pair\"");
    let logged = |level: &str, what: &str| {
        let line = format!("{what}, {said}");
        server
            .error_log()
            .lines()
            .any(|l| l.contains(level) && l.contains(&line))
    };
    let unhealthy = "peer is unhealthy while checking status code of upstream";
    assert!(logged("[warn]", unhealthy), "{}", server.error_log());
    // b recovers: after two passing checks it serves again.
    b_up.store(true, Ordering::SeqCst);
    assert!(
        support::wait_until(Duration::from_secs(5), || answers(port, 4).contains('b')),
        "b never came back"
    );
    assert!(a_served.load(Ordering::SeqCst) > 0);
    let healthy = "peer is healthy while checking status code";
    assert!(logged("[notice]", healthy), "{}", server.error_log());
}

#[test]
fn any_failing_check_keeps_a_server_out() {
    let served = Arc::new(AtomicUsize::new(0));
    let a = upstream(
        "a",
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicUsize::new(0)),
    );
    let b = upstream("b", Arc::new(AtomicBool::new(true)), served.clone());
    // Two locations check the same group: b passes one check and fails the other.
    let http = format!(
        r#"
    upstream pair {{ server 127.0.0.1:{a}; server 127.0.0.1:{b}; }}
    server {{
        listen 127.0.0.1:{{PORT0}};
        location / {{ proxy_pass http://pair; health_check interval=50ms uri=/health; }}
        location /x/ {{ proxy_pass http://pair; health_check interval=50ms uri=/b-fails; }}
    }}
"#
    );
    let Some(server) = Server::start(Kind::Portcullis, 1, &main_config(&http)) else {
        return;
    };
    let port = server.port(0);
    assert!(
        support::wait_until(Duration::from_secs(5), || answers(port, 4) == "aaaa"),
        "b was never taken out"
    );
    // Over many rounds of both checks, b stays out.
    let before = served.load(Ordering::SeqCst);
    for _ in 0..10 {
        assert_eq!(answers(port, 10), "a".repeat(10));
        std::thread::sleep(Duration::from_millis(30));
    }
    assert_eq!(served.load(Ordering::SeqCst), before);
}

#[test]
fn a_mandatory_check_keeps_a_server_out_until_it_passes() {
    let served = Arc::new(AtomicUsize::new(0));
    let server_port = upstream("s", Arc::new(AtomicBool::new(true)), served.clone());
    // The checks go to a port nobody listens on, and need a thousand failures to take a
    // server out: only `mandatory` keeps it out from the start.
    let closed = support::free_ports(1)[0];
    let http = format!(
        r#"
    upstream m {{ server 127.0.0.1:{server_port}; }}
    upstream n {{ server 127.0.0.1:{server_port}; }}
    server {{
        listen 127.0.0.1:{{PORT0}};
        location /m/ {{
            proxy_pass http://m;
            health_check interval=100ms fails=1000 port={closed} mandatory;
        }}
        location /n/ {{
            proxy_pass http://n;
            health_check interval=100ms fails=1000 port={closed};
        }}
    }}
"#
    );
    let Some(server) = Server::start(Kind::Portcullis, 1, &main_config(&http)) else {
        return;
    };
    for _ in 0..5 {
        // Never checked healthy: no live upstream, nginx's 502, and the server never asked.
        assert_eq!(
            support::get(server.port(0), "/m/").expect("GET").status,
            502
        );
        assert_eq!(
            support::get(server.port(0), "/n/").expect("GET").status,
            200
        );
    }
    assert_eq!(served.load(Ordering::SeqCst), 5);
}

#[test]
fn a_health_check_needs_an_upstream_group_and_its_match() {
    for (location, error) in [
        (
            "proxy_pass http://127.0.0.1:1; health_check;",
            "health check requires an upstream group",
        ),
        (
            "proxy_pass http://g; health_check match=none;",
            "match \"none\" not found",
        ),
        (
            "proxy_pass http://g; health_check fails=0;",
            "invalid parameter \"fails=0\"",
        ),
        (
            "proxy_pass http://u; health_check port=8080;",
            "health check \"port\" cannot be used with a unix-domain socket server",
        ),
        (
            "proxy_pass https://g; health_check;",
            "health checks over TLS (\"proxy_pass https://\") are not supported",
        ),
    ] {
        let http = format!(
            "upstream g {{ server 127.0.0.1:1; }} upstream u {{ server unix:/tmp/u.sock; }} \
             server {{ location / {{ {location} }} }}"
        );
        let dir = support::TempDir::new("hc-t");
        let conf = dir.write(
            "nginx.conf",
            support::render(&main_config(&http), dir.path(), &[]),
        );
        let binary = Kind::Portcullis.binary().expect("portcullis");
        let out = support::test_config(std::process::Command::new(binary), dir.path(), &conf);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{location} loads");
        assert!(stderr.contains(error), "{stderr}");
    }
}

/// `persistent` with `mandatory`: after a reload a server starts as the checks last found
/// it, so a healthy one serves at once, before the new configuration's first check (slow
/// here) has answered.
#[test]
fn a_persistent_check_keeps_a_healthy_server_serving_across_a_reload() {
    // The check's answer takes 500 ms: long enough to see a new configuration serve before it.
    let port = support::head_upstream(|_, head| {
        if head.starts_with(b"GET /health ") {
            std::thread::sleep(Duration::from_millis(500));
        }
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
    });
    let config = |generation: &str| {
        main_config(&format!(
            r#"
    upstream g {{ server 127.0.0.1:{port}; }}
    server {{
        listen 127.0.0.1:{{PORT0}};
        location / {{
            proxy_pass http://g;
            health_check interval=100ms uri=/health mandatory persistent;
            add_header X-Generation {generation} always;
        }}
    }}
"#
        ))
    };
    let Some(server) = Server::start(Kind::Portcullis, 1, &config("one")) else {
        return;
    };
    let get = || support::get(server.port(0), "/").expect("GET /");
    // Mandatory: served once the first check passed.
    assert!(
        support::wait_until(Duration::from_secs(5), || get().status == 200),
        "never healthy"
    );
    server.write_config(&config("two"));
    server.signal(libc::SIGHUP);
    // Every answer of the new configuration, from its first, is the server's.
    let mut seen = 0;
    assert!(support::wait_until(Duration::from_secs(5), || {
        let r = get();
        if r.header("x-generation") == Some("two") {
            assert_eq!(r.status, 200, "a new configuration's answer");
            seen += 1;
        }
        seen >= 20
    }));
}

/// `slow_start`: a server its checks find healthy again gets a small share of the requests
/// at first, growing to its weight's over the time given.
#[test]
fn a_server_back_from_unhealthy_starts_slowly() {
    let b_up = Arc::new(AtomicBool::new(false));
    let a = upstream(
        "a",
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicUsize::new(0)),
    );
    let b = upstream("b", b_up.clone(), Arc::new(AtomicUsize::new(0)));
    let http = format!(
        r#"
    upstream pair {{ server 127.0.0.1:{a}; server 127.0.0.1:{b} slow_start=60s; }}
    server {{
        listen 127.0.0.1:{{PORT0}};
        location / {{ proxy_pass http://pair; health_check interval=50ms uri=/health; }}
    }}
"#
    );
    let Some(server) = Server::start(Kind::Portcullis, 1, &main_config(&http)) else {
        return;
    };
    let port = server.port(0);
    assert!(
        support::wait_until(Duration::from_secs(5), || answers(port, 4) == "aaaa"),
        "b was never taken out"
    );
    b_up.store(true, Ordering::SeqCst);
    assert!(
        support::wait_until(Duration::from_secs(5), || {
            server
                .error_log()
                .contains("peer is healthy while checking status code")
        }),
        "b never came back"
    );
    // Its first seconds back: a few hundredths of its weight, where it would have half.
    let first = answers(port, 40);
    let b_share = first.matches('b').count();
    assert!(b_share <= 6, "{first}");
}
