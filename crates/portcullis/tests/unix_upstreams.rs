//! Upstreams on unix-domain sockets, compared with nginx: `proxy_pass http://unix:/path:/uri`
//! (the URI replaced, the `Host` nginx sends), without a URI, `server unix:/path` in an
//! `upstream` block with a socket that is not there passed over, `$upstream_addr`, and the
//! error log's line for the missing socket.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use std::time::Duration;

use support::{compare, get, kinds, main_config, wait_until, Server};

const CONFIG: &str = r#"
    log_format up "$request_uri $status $upstream_addr";
    upstream k {
        server unix:{PREFIX}/up.sock;
        keepalive 2;
    }
    upstream g {
        server unix:{PREFIX}/missing.sock;
        server unix:{PREFIX}/up.sock;
    }
    server {
        listen 127.0.0.1:{PORT0};
        access_log {PREFIX}/up.log up;
        location /a/ { proxy_pass http://unix:{PREFIX}/up.sock:/base/; }
        location /b/ { proxy_pass http://unix:{PREFIX}/up.sock; }
        location /g/ { proxy_pass http://g; }
        location /k/ {
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://k;
        }
        location /v/ { set $s unix:{PREFIX}/up.sock; proxy_pass http://$s:/dyn/; }
        location /gone/ { proxy_pass http://unix:{PREFIX}/missing.sock:/; }
    }
"#;

/// An HTTP server on the socket at `path` that answers each request with its request line
/// and `Host`, and keeps each connection for the next request; returns how many connections
/// it accepted so far.
fn unix_upstream(path: &Path) -> Arc<AtomicUsize> {
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let listener = UnixListener::bind(path).expect("bind the upstream's socket");
    // nginx's workers connect as its `user` when the test runs as root.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .expect("open the socket to all");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(&conn);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut host = String::new();
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                        if let Some(v) = h.to_ascii_lowercase().strip_prefix("host:") {
                            host = v.trim().to_string();
                        }
                    }
                    let body = format!("{} host={host}", line.trim_end());
                    let _ = (&conn).write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    );
                }
            });
        }
    });
    accepted
}

#[test]
fn unix_domain_sockets_are_upstreams_as_in_nginx() {
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(CONFIG)) else {
            continue;
        };
        let accepted = unix_upstream(&server.path("up.sock"));
        let mut lines = Vec::new();
        for path in ["/a/x?q=1", "/b/y", "/g/z", "/g/w", "/gone/v", "/v/u"] {
            let r = get(server.port(0), path).expect("GET");
            let body = if r.status == 200 {
                r.body_text()
            } else {
                String::new()
            };
            lines.push(format!("{path} -> {} {body}", r.status));
        }
        let prefix = server.prefix().display().to_string();
        // The last line is written once its response is out.
        let read_log = || std::fs::read_to_string(server.path("up.log")).unwrap_or_default();
        wait_until(Duration::from_secs(5), || read_log().lines().count() == 6);
        let log = read_log();
        lines.extend(log.lines().map(|l| l.replace(&prefix, "{PREFIX}")));
        // Kept-alive connections: three requests, one connection.
        let before = accepted.load(Ordering::SeqCst);
        for i in 0..3 {
            let r = get(server.port(0), &format!("/k/{i}")).expect("GET /k/");
            lines.push(format!("/k/{i} -> {} {}", r.status, r.body_text()));
        }
        lines.push(format!(
            "keepalive connections: {}",
            accepted.load(Ordering::SeqCst) - before
        ));
        let errors = server.error_log().replace(&prefix, "{PREFIX}");
        lines.push(format!(
            "missing socket logged: {}",
            errors.contains(
                "connect() to unix:{PREFIX}/missing.sock failed (2: No such file or directory) \
                 while connecting to upstream"
            ) && errors.contains("upstream: \"http://unix:{PREFIX}/missing.sock:/v\"")
        ));
        support::expect_lines(
            &lines,
            &[
                "/a/x?q=1 -> 200 GET /base/x?q=1 HTTP/1.0 host=localhost",
                "/g/z 200 unix:{PREFIX}/missing.sock, unix:{PREFIX}/up.sock",
                "missing socket logged: true",
                "/v/u -> 200 GET /dyn/ HTTP/1.0 host=localhost",
                "keepalive connections: 1",
            ],
        );
        seen.push((kind, lines));
    }
    compare(&seen);
}

/// A `unix:` address nginx refuses is refused at load with nginx's words.
#[test]
fn bad_unix_addresses_are_refused() {
    for (http, error) in [
        (
            "upstream g { server unix:; } server { location / { proxy_pass http://g; } }",
            "no path in the unix domain socket in upstream \"unix:\"",
        ),
        (
            "server { location / { proxy_pass http://unix:; } }",
            "no path in the unix domain socket in upstream \"unix:\"",
        ),
    ] {
        for kind in kinds() {
            let dir = support::TempDir::new("unix-t");
            let conf = dir.write(
                "nginx.conf",
                support::render(&main_config(http), dir.path(), &[]),
            );
            let Some(binary) = kind.binary() else {
                continue;
            };
            let out = support::test_config(std::process::Command::new(binary), dir.path(), &conf);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{kind}: {http} loads");
            assert!(stderr.contains(error), "{kind}: {stderr}");
        }
    }
}
