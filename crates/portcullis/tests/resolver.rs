//! `resolver`: a host name in a `proxy_pass` URL made of variables is resolved when a request
//! needs it, through the configured DNS server (a small one of the test's, on 127.0.0.1), and
//! again once its answer expires (`valid=`); an unknown name and a location without a
//! resolver are answered 502 with nginx's error lines. Compared with nginx.

#[path = "support/dns.rs"]
mod dns;
mod support;

use std::net::Ipv4Addr;
use std::time::Duration;

use support::{get, kinds, main_config, wait_until, Server};

/// An HTTP server on `ip:port` that answers every request with `body`.
fn upstream(ip: Ipv4Addr, port: u16, body: &'static str) -> u16 {
    support::head_upstream_at(ip, port, move |_, _| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    })
}

#[test]
fn names_are_resolved_when_requests_need_them() {
    let dns = dns::Dns::start();
    let port = upstream(Ipv4Addr::LOCALHOST, 0, "one\n");
    upstream(Ipv4Addr::new(127, 0, 0, 2), port, "two\n");
    let http = format!(
        "    server {{
        listen 127.0.0.1:{{PORT0}};
        resolver 127.0.0.1:{dns} valid=1s ipv6=off;
        resolver_timeout 5s;
        location /dyn/ {{ set $b backend.test:{port}; proxy_pass http://$b; }}
        location /gone/ {{ set $b nosuch.test:{port}; proxy_pass http://$b; }}
    }}
    server {{
        listen 127.0.0.1:{{PORT1}};
        location /nores/ {{ set $b backend.test:{port}; proxy_pass http://$b; }}
    }}
",
        dns = dns.port()
    );
    for kind in kinds() {
        dns.set("backend.test", &[Ipv4Addr::LOCALHOST]);
        let Some(server) = Server::start(kind, 2, &main_config(&http)) else {
            continue;
        };
        let r = get(server.port(0), "/dyn/a").expect("GET /dyn/a");
        assert_eq!((r.status, r.body_text().as_str()), (200, "one\n"), "{kind}");
        let r = get(server.port(0), "/gone/a").expect("GET /gone/a");
        assert_eq!(r.status, 502, "{kind}");
        let r = get(server.port(1), "/nores/a").expect("GET /nores/a");
        assert_eq!(r.status, 502, "{kind}");
        let log = server.error_log();
        for line in [
            "nosuch.test could not be resolved (3: Host not found)".to_string(),
            "no resolver defined to resolve backend.test, client".to_string(),
        ] {
            assert!(log.contains(&line), "{kind}: no {line:?} in\n{log}");
        }
        // A new answer is used once the old one expires.
        dns.set("backend.test", &[Ipv4Addr::new(127, 0, 0, 2)]);
        assert!(
            wait_until(Duration::from_secs(10), || {
                get(server.port(0), "/dyn/b").is_ok_and(|r| r.body_text() == "two\n")
            }),
            "{kind}: the new address was not used"
        );
    }
}

/// A name of several addresses: the requests spread over them, as nginx's resolver rotates
/// the addresses it hands out, and one that refuses connections is passed over.
#[test]
fn the_addresses_of_a_name_share_its_requests() {
    let dns = dns::Dns::start();
    let port = upstream(Ipv4Addr::LOCALHOST, 0, "one\n");
    upstream(Ipv4Addr::new(127, 0, 0, 2), port, "two\n");
    let http = format!(
        "    server {{
        listen 127.0.0.1:{{PORT0}};
        resolver 127.0.0.1:{dns} valid=60s ipv6=off;
        location /both/ {{ set $b both.test:{port}; proxy_pass http://$b; }}
        location /half/ {{ set $b half.test:{port}; proxy_pass http://$b; }}
    }}
",
        dns = dns.port()
    );
    dns.set(
        "both.test",
        &[Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 2)],
    );
    // Nothing listens on 127.0.0.3.
    dns.set(
        "half.test",
        &[Ipv4Addr::new(127, 0, 0, 3), Ipv4Addr::LOCALHOST],
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..40 {
            let r = get(server.port(0), &format!("/both/{i}")).expect("GET /both/");
            assert_eq!(r.status, 200, "{kind}");
            seen.insert(r.body_text());
        }
        // Both, but for a chance of one in 2^39.
        assert_eq!(seen.len(), 2, "{kind}: only {seen:?} answered");
        for i in 0..10 {
            let r = get(server.port(0), &format!("/half/{i}")).expect("GET /half/");
            assert_eq!((r.status, r.body_text().as_str()), (200, "one\n"), "{kind}");
        }
    }
}

/// A first resolver that never answers costs one attempt, not the request: the name is
/// asked of the next server, within `resolver_timeout`, as nginx resends to the next one.
#[test]
fn a_silent_server_is_passed_over() {
    let dns = dns::Dns::start();
    dns.set("backend.test", &[Ipv4Addr::LOCALHOST]);
    // Bound, so nothing refuses the datagrams, and never read.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind a silent server");
    let port = upstream(Ipv4Addr::LOCALHOST, 0, "one\n");
    let http = format!(
        "    server {{
        listen 127.0.0.1:{{PORT0}};
        resolver 127.0.0.1:{silent} 127.0.0.1:{dns} ipv6=off;
        resolver_timeout 20s;
        location / {{ set $b backend.test:{port}; proxy_pass http://$b; }}
    }}
",
        silent = silent.local_addr().expect("addr").port(),
        dns = dns.port()
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        // Two requests: whichever server each starts with, both are answered, the first
        // after the silent server's attempt (longer than the usual client wait).
        for path in ["/a", "/b"] {
            let answer = slow_get(server.port(0), path);
            assert!(
                answer.starts_with("HTTP/1.1 200"),
                "{kind} {path}: {answer}"
            );
            assert!(answer.ends_with("\r\n\r\none\n"), "{kind} {path}: {answer}");
        }
    }
}

/// A GET that waits up to 30 s for its whole answer (the connection closes after it).
fn slow_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).expect("send");
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).expect("answer");
    String::from_utf8_lossy(&answer).into_owned()
}
