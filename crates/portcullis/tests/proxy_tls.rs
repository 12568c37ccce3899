//! `proxy_pass https://`, black box: an nginx upstream on `listen ... ssl` with certificates
//! made by the test, and nginx and portcullis proxying to it on the same configuration.
//! The upstream's access log numbers the TLS connections and says which resumed a session.

mod support;
// Shared with the TLS termination tests, which use the rest of it.
#[allow(dead_code)]
#[path = "support/tls.rs"]
mod tls_support;
#[path = "support/proxy_tls.rs"]
mod upstream_tls;

use std::time::Duration;

use support::{get, kinds, main_config, wait_until, Client, Kind, Server};
use tls_support::{openssl_available, s_client, KeyKind, Pki};
use upstream_tls::{file_body, logged, start_upstream, Certs, UPSTREAM_NAME};

/// How long an error-log line may take to be written.
const LOG_DEADLINE: Duration = Duration::from_secs(5);
/// Requests sent over one client connection through a keepalive pool.
const POOLED_REQUESTS: usize = 50;
/// Requests each made on a new upstream connection, to see sessions resume.
const FRESH_CONNECTIONS: usize = 5;

fn need_openssl() -> bool {
    if openssl_available() {
        return true;
    }
    support::skip("the openssl command is not installed");
    false
}

/// A plain HTTP proxy on `{PORT0}` whose `locations` reach the upstream's ports (`{UP0}`,
/// `{UP1}`: TLS, `{UP2}`: plain) and group `tls_group` (both TLS ports, keepalive).
fn start_proxy(kind: Kind, upstream: &Server, locations: &str) -> Option<Server> {
    let http = format!(
        "    upstream tls_group {{\n\
         \x20       server 127.0.0.1:{{UP0}};\n\
         \x20       server 127.0.0.1:{{UP1}};\n\
         \x20       keepalive 8;\n\
         \x20   }}\n\
         \x20   server {{\n\
         \x20       listen 127.0.0.1:{{PORT0}};\n\
         \x20       proxy_http_version 1.1;\n\
         \x20       proxy_set_header Connection \"\";\n\
         {locations}\n\
         \x20   }}\n"
    );
    let template = main_config(&http)
        .replace("{UP0}", &upstream.port(0).to_string())
        .replace("{UP1}", &upstream.port(1).to_string())
        .replace("{UP2}", &upstream.port(2).to_string());
    Server::start(kind, 1, &template)
}

/// Sends `n` GETs for `path` on one connection and checks each body is the upstream's file.
fn get_file_keepalive(port: u16, path: &str, n: usize) {
    let mut client = Client::connect(port);
    let expected = file_body();
    for i in 0..n {
        client
            .send(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
            .expect("send request");
        let r = client.read_response(false).expect("read response");
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.body, expected, "body of request {i}");
    }
}

#[test]
fn keepalive_pool_carries_many_requests_over_few_connections() {
    if !need_openssl() {
        return;
    }
    let certs = Certs::new();
    let Some(upstream) = start_upstream(&certs) else {
        return;
    };
    for kind in kinds() {
        let Some(proxy) = start_proxy(
            kind,
            &upstream,
            &format!("location /{kind}/ {{ proxy_pass https://tls_group/; }}"),
        ) else {
            continue;
        };
        get_file_keepalive(proxy.port(0), &format!("/{kind}/1kb.bin"), POOLED_REQUESTS);
        let lines = logged(&upstream, "/1kb.bin", POOLED_REQUESTS);
        assert_eq!(lines.len(), POOLED_REQUESTS, "{kind}");
        let mut connections: Vec<&str> = lines.iter().map(|l| l.connection.as_str()).collect();
        connections.sort_unstable();
        connections.dedup();
        // One connection per peer of the group, kept in the pool between requests.
        assert!(
            connections.len() <= 2,
            "{kind}: {} upstream connections for {POOLED_REQUESTS} requests",
            connections.len()
        );
        std::fs::write(upstream.path("tls.log"), "").expect("truncate upstream log");
    }
}

#[test]
fn new_connections_resume_the_session_unless_reuse_is_off() {
    if !need_openssl() {
        return;
    }
    let certs = Certs::new();
    let Some(upstream) = start_upstream(&certs) else {
        return;
    };
    for kind in kinds() {
        // No keepalive: every request opens a connection and shakes hands.
        let locations = "location /reuse { proxy_pass https://127.0.0.1:{UP0}; }\n\
                         location /noreuse { proxy_pass https://127.0.0.1:{UP0}; proxy_ssl_session_reuse off; }";
        let Some(proxy) = start_proxy(kind, &upstream, locations) else {
            continue;
        };
        for path in ["/reuse", "/noreuse"] {
            for _ in 0..FRESH_CONNECTIONS {
                let r = get(proxy.port(0), path).expect("request");
                assert_eq!(r.status, 200, "{kind} {path}");
            }
        }
        let reuse = logged(&upstream, "/reuse", FRESH_CONNECTIONS);
        let resumed = reuse.iter().filter(|l| l.reused).count();
        assert!(
            resumed >= FRESH_CONNECTIONS - 1,
            "{kind}: {resumed} of {} connections resumed: {reuse:?}",
            reuse.len()
        );
        let noreuse = logged(&upstream, "/noreuse", FRESH_CONNECTIONS);
        assert_eq!(noreuse.len(), FRESH_CONNECTIONS, "{kind}");
        assert!(
            noreuse.iter().all(|l| !l.reused),
            "{kind}: sessions resumed with proxy_ssl_session_reuse off: {noreuse:?}"
        );
        std::fs::write(upstream.path("tls.log"), "").expect("truncate upstream log");
    }
}

#[test]
fn verify_with_the_right_ca_wrong_ca_and_wrong_name() {
    if !need_openssl() {
        return;
    }
    let certs = Certs::new();
    let Some(upstream) = start_upstream(&certs) else {
        return;
    };
    let ca = certs.ca.cert.display().to_string();
    let other = certs.other_ca.cert.display().to_string();
    // No resumption: nginx keeps one session per peer for every location, and a session a
    // verified location made would let another location skip its own check.
    let locations = format!(
        "proxy_ssl_verify on;\n\
         proxy_ssl_session_reuse off;\n\
         location /good {{ proxy_pass https://127.0.0.1:{{UP0}}; proxy_ssl_trusted_certificate {ca}; proxy_ssl_name {UPSTREAM_NAME}; }}\n\
         location /wrongca {{ proxy_pass https://127.0.0.1:{{UP0}}; proxy_ssl_trusted_certificate {other}; proxy_ssl_name {UPSTREAM_NAME}; }}\n\
         location /wrongname {{ proxy_pass https://127.0.0.1:{{UP0}}; proxy_ssl_trusted_certificate {ca}; }}"
    );
    for kind in kinds() {
        let Some(proxy) = start_proxy(kind, &upstream, &locations) else {
            continue;
        };
        let good = get(proxy.port(0), "/good").expect("request");
        assert_eq!(
            (good.status, good.body_text()),
            (200, "ok\n".into()),
            "{kind}"
        );
        let wrong_ca = get(proxy.port(0), "/wrongca").expect("request");
        assert_eq!(wrong_ca.status, 502, "{kind}");
        let wrong_name = get(proxy.port(0), "/wrongname").expect("request");
        assert_eq!(wrong_name.status, 502, "{kind}");
        let up = upstream.port(0);
        for expected in [
            format!("upstream SSL certificate verify error: (21:unable to verify the first certificate) while SSL handshaking to upstream, client: 127.0.0.1, server: , request: \"GET /wrongca HTTP/1.1\", upstream: \"https://127.0.0.1:{up}/wrongca\""),
            format!("upstream SSL certificate does not match \"127.0.0.1\" while SSL handshaking to upstream, client: 127.0.0.1, server: , request: \"GET /wrongname HTTP/1.1\", upstream: \"https://127.0.0.1:{up}/wrongname\""),
        ] {
            assert!(
                wait_until(LOG_DEADLINE, || proxy.error_log().contains(&expected)),
                "{kind}: no line {expected:?} in\n{}",
                proxy.error_log()
            );
        }
    }
}

#[test]
fn server_name_is_sent_only_when_asked() {
    if !need_openssl() {
        return;
    }
    let certs = Certs::new();
    let Some(upstream) = start_upstream(&certs) else {
        return;
    };
    let locations = format!(
        "proxy_ssl_session_reuse off;\n\
         location /sni {{ proxy_pass https://127.0.0.1:{{UP0}}; proxy_ssl_server_name on; proxy_ssl_name {UPSTREAM_NAME}; }}\n\
         location /nosni {{ proxy_pass https://127.0.0.1:{{UP0}}; proxy_ssl_name {UPSTREAM_NAME}; }}"
    );
    for kind in kinds() {
        let Some(proxy) = start_proxy(kind, &upstream, &locations) else {
            continue;
        };
        for path in ["/sni", "/nosni"] {
            assert_eq!(get(proxy.port(0), path).expect("request").status, 200);
        }
        let sni = logged(&upstream, "/sni", 1);
        assert_eq!(
            sni.last().map(|l| l.server_name.as_str()),
            Some(UPSTREAM_NAME),
            "{kind}"
        );
        let nosni = logged(&upstream, "/nosni", 1);
        assert_eq!(
            nosni.last().map(|l| l.server_name.as_str()),
            Some("-"),
            "{kind}"
        );
        std::fs::write(upstream.path("tls.log"), "").expect("truncate upstream log");
    }
}

#[test]
fn plain_http_upstream_behind_https_is_a_502() {
    if !need_openssl() {
        return;
    }
    let certs = Certs::new();
    let Some(upstream) = start_upstream(&certs) else {
        return;
    };
    for kind in kinds() {
        let Some(proxy) = start_proxy(
            kind,
            &upstream,
            "location /plain { proxy_pass https://127.0.0.1:{UP2}; }",
        ) else {
            continue;
        };
        assert_eq!(
            get(proxy.port(0), "/plain").expect("request").status,
            502,
            "{kind}"
        );
        let expected = format!(
            "SSL_do_handshake() failed (SSL: error:0A00010B:SSL routines::wrong version number) while SSL handshaking to upstream, client: 127.0.0.1, server: , request: \"GET /plain HTTP/1.1\", upstream: \"https://127.0.0.1:{}/plain\"",
            upstream.port(2)
        );
        assert!(
            wait_until(LOG_DEADLINE, || proxy.error_log().contains(&expected)),
            "{kind}: no line {expected:?} in\n{}",
            proxy.error_log()
        );
    }
}

#[test]
fn verify_without_trusted_certificate_is_a_config_error() {
    let dir = support::TempDir::new("proxy-tls-conf");
    let conf = dir.write(
        "nginx.conf",
        "events {}\nhttp {\n    access_log off;\n    server {\n        listen 127.0.0.1:1;\n        proxy_ssl_verify on;\n        location / {\n            proxy_pass https://127.0.0.1:2;\n        }\n    }\n}\n",
    );
    for kind in kinds() {
        let Some(binary) = kind.binary() else {
            continue;
        };
        let out = std::process::Command::new(binary)
            .arg("-t")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .arg("-g")
            .arg(format!(
                "pid {}/t.pid; error_log stderr;",
                dir.path().display()
            ))
            .output()
            .expect("run -t");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{kind}: {stderr}");
        assert!(
            stderr.contains("no proxy_ssl_trusted_certificate for proxy_ssl_verify"),
            "{kind}: {stderr}"
        );
    }
}

/// The seeds' reverse proxy (seed 000, Appendix D): HTTPS in, a least_conn group of two
/// HTTPS upstream ports with a keepalive pool of 512, HTTP/1.1 with `Connection ""`.
#[test]
fn seed_gateway_shape_serves_the_file_over_https_both_ways() {
    if !need_openssl() {
        return;
    }
    let certs = Certs::new();
    let Some(upstream) = start_upstream(&certs) else {
        return;
    };
    let pki = Pki::new();
    let front = pki.self_signed("front", KeyKind::P256, "localhost");
    let http = format!(
        "    upstream ssl_file_server_com {{\n\
         \x20       server 127.0.0.1:{up0};\n\
         \x20       server 127.0.0.1:{up1};\n\
         \x20       least_conn;\n\
         \x20       keepalive 512;\n\
         \x20       keepalive_requests 1000000;\n\
         \x20   }}\n\
         \x20   server {{\n\
         \x20       listen 127.0.0.1:{{PORT0}} ssl;\n\
         \x20       ssl_certificate {cert};\n\
         \x20       ssl_certificate_key {key};\n\
         \x20       ssl_protocols TLSv1.2 TLSv1.3;\n\
         \x20       location / {{\n\
         \x20           proxy_pass https://ssl_file_server_com;\n\
         \x20           proxy_http_version 1.1;\n\
         \x20           proxy_set_header Connection \"\";\n\
         \x20       }}\n\
         \x20   }}\n",
        up0 = upstream.port(0),
        up1 = upstream.port(1),
        cert = front.cert.display(),
        key = front.key.display(),
    );
    let expected = file_body();
    for kind in kinds() {
        let Some(proxy) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        for _ in 0..3 {
            let out = s_client(
                proxy.port(0),
                &["-quiet"],
                "GET /1kb.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            );
            assert!(out.contains("HTTP/1.1 200 OK"), "{kind}: {out}");
            assert!(
                out.contains(std::str::from_utf8(&expected).expect("ascii body")),
                "{kind}: body not intact: {out}"
            );
        }
    }
}
