//! `mirror` against nginx on the same configuration: which requests are copied (those that
//! reach the content phase, not those refused or answered by `return`), to which URIs (with
//! the request's arguments), with which method and body (`mirror_request_body`), and that
//! the client's answer is the request's own.

#[path = "support/h2c.rs"]
#[allow(dead_code)]
mod h2c;
mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{kinds, Kind, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        listen 127.0.0.1:{PORT1} http2;
        location / {
            mirror /m;
            mirror /m2;
            proxy_pass http://127.0.0.1:{UPSTREAM}/main;
        }
        location /nobody/ {
            mirror /nobody-copy;
            mirror_request_body off;
            proxy_pass http://127.0.0.1:{UPSTREAM}/main/;
        }
        location /returned {
            mirror /m;
            return 200 "returned\n";
        }
        location /denied {
            mirror /m;
            deny all;
        }
        location /off/ {
            mirror off;
            proxy_pass http://127.0.0.1:{UPSTREAM}/main;
        }
        # The body is read for the copies where the request's own handler reads none, or
        # streams it.
        location /static/ {
            mirror /m;
            client_max_body_size 1k;
            alias {PREFIX}/;
        }
        location /streamed/ {
            mirror /m;
            proxy_request_buffering off;
            proxy_pass http://127.0.0.1:{UPSTREAM}/main/;
        }
        location /unpassed/ {
            mirror /m;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_pass http://127.0.0.1:{UPSTREAM}/main/;
        }
        location = /m {
            internal;
            proxy_pass http://127.0.0.1:{UPSTREAM}/mirror$request_uri;
        }
        # As nginx's documentation has it for copies without the body.
        location = /nobody-copy {
            internal;
            proxy_pass http://127.0.0.1:{UPSTREAM}/mirror$request_uri;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
        }
        location = /m2 {
            internal;
            proxy_pass http://127.0.0.1:{UPSTREAM}/mirror2$request_uri;
        }
    }
"#;

/// What the upstream got: one line per request, `METHOD target body`.
type Seen = Arc<Mutex<Vec<String>>>;

/// An upstream that reads each request with its body (by Content-Length) and answers with
/// the path it was asked for.
fn upstream(seen: Seen) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match s.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            let (n, v) = l.split_once(':')?;
                            n.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    while buf.len() < end + 4 + len {
                        match s.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).to_string();
                    buf.drain(..end + 4 + len);
                    let mut words = head.split_whitespace();
                    let method = words.next().unwrap_or("").to_string();
                    let target = words.next().unwrap_or("").to_string();
                    let body = match body.len() {
                        n if n > 40 => format!("{n} bytes"),
                        _ => format!("{body:?}"),
                    };
                    seen.lock()
                        .unwrap()
                        .push(format!("{method} {target} {body}"));
                    let answer = format!("{target}\n");
                    let _ = s.write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                            answer.len()
                        )
                        .as_bytes(),
                    );
                    return;
                }
            });
        }
    });
    port
}

#[test]
fn requests_are_copied_as_nginx_copies_them() {
    let mut seen_by = Vec::new();
    let big = "b".repeat(300_000);
    let big_post = |path: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{big}",
            big.len()
        )
    };
    let streamed = big_post("/streamed/x");
    let unpassed = big_post("/unpassed/x");
    let too_big = big_post("/static/f");
    for kind in kinds() {
        let seen: Seen = Arc::default();
        let up = upstream(seen.clone());
        let conf = support::main_config(&CONFIG.replace("{UPSTREAM}", &up.to_string()));
        let Some(server) = Server::start(kind, 2, &conf) else {
            continue;
        };
        std::fs::write(server.path("f"), "file\n").unwrap();
        let port = server.port(0);
        let mut lines = Vec::new();
        for (request, copies) in [
            ("GET /page?a=1 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 3),
            (
                "POST /api/x?y=2 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                3,
            ),
            (
                "POST /nobody/x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                2,
            ),
            ("GET /returned HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 0),
            ("GET /denied HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 0),
            ("GET /off/x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 1),
            // On a kept-alive connection too.
            ("GET /kept HTTP/1.1\r\nHost: h\r\n\r\n", 3),
            (
                "POST /static/f HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                1,
            ),
            (
                "GET /static/f HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                1,
            ),
            (
                "POST /static/f HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
                1,
            ),
            (too_big.as_str(), 0),
            (streamed.as_str(), 2),
            (unpassed.as_str(), 2),
        ] {
            seen.lock().unwrap().clear();
            let r = support::request(port, request).unwrap();
            // The copies may still be on their way when the answer is in.
            assert!(
                support::wait_until(Duration::from_secs(10), || seen.lock().unwrap().len()
                    >= copies),
                "{kind:?}: {request:?} reached the upstream {:?}",
                seen.lock().unwrap()
            );
            // Nothing more comes (a copy too many would show in the next request's list).
            let mut got = seen.lock().unwrap().clone();
            got.sort();
            let body = match r.body_text().trim_end() {
                b if b.starts_with("<html>") => "an error page".to_string(),
                b => format!("{b:?}"),
            };
            lines.push(format!(
                "{} -> {} {body}; upstream got {got:?}",
                request.lines().next().unwrap_or(""),
                r.status,
            ));
        }
        // HTTP/2: the body read for the copies too.
        for path in ["/static/f", "/unpassed/x"] {
            seen.lock().unwrap().clear();
            let url = format!("http://127.0.0.1:{}{path}", server.port(1));
            let Some(r) = h2c::curl(&["--http2-prior-knowledge", "-d", "h2body"], &url) else {
                continue;
            };
            let copies = if path == "/static/f" { 1 } else { 2 };
            assert!(
                support::wait_until(Duration::from_secs(10), || seen.lock().unwrap().len()
                    >= copies),
                "{kind:?}: h2 {path} reached the upstream {:?}",
                seen.lock().unwrap()
            );
            let mut got = seen.lock().unwrap().clone();
            got.sort();
            lines.push(format!(
                "h2 POST {path} -> {}; upstream got {got:?}",
                r.status
            ));
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                "POST /api/x?y=2 HTTP/1.1 -> 200 \"/mainapi/x?y=2\"; upstream got [\"POST /mainapi/x?y=2 \\\"hello\\\"\", \"POST /mirror/api/x?y=2 \\\"hello\\\"\", \"POST /mirror2/api/x?y=2 \\\"hello\\\"\"]",
                    "POST /nobody/x HTTP/1.1 -> 200 \"/main/x\"; upstream got [\"POST /main/x \\\"hello\\\"\", \"POST /mirror/nobody/x \\\"\\\"\"]",
                    "GET /returned HTTP/1.1 -> 200 \"returned\"; upstream got []",
                    "GET /denied HTTP/1.1 -> 403 an error page; upstream got []",
                    "POST /static/f HTTP/1.1 -> 405 an error page; upstream got [\"POST /mirror/static/f \\\"hello\\\"\"]",
                    "POST /streamed/x HTTP/1.1 -> 200 \"/main/x\"; upstream got [\"POST /main/x 300000 bytes\", \"POST /mirror/streamed/x 300000 bytes\"]",
                    "h2 POST /static/f -> 405; upstream got [\"POST /mirror/static/f \\\"h2body\\\"\"]",
                ],
            );
        }
        seen_by.push((kind, lines));
    }
    support::compare(&seen_by);
}
