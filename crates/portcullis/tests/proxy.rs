//! Reverse proxy, black box: nginx and portcullis on the same configuration in front of a
//! tiny upstream started by the test, which echoes the request head it got as the body and
//! numbers its connections.

mod support;

use std::net::TcpListener;
use std::time::Duration;

use support::Server;

/// How long a log line may take to appear.
const LOG_WAIT: Duration = Duration::from_secs(5);

/// An upstream that answers every request with `conn=N` and the request head it received.
/// Returns its port.
fn echo_upstream() -> u16 {
    support::head_upstream(|n, head| {
        let mut body = format!("conn={n}\n").into_bytes();
        body.extend_from_slice(head);
        let mut resp = format!(
            "HTTP/1.1 200 OK\r\nServer: upstream\r\nX-Pad: x\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        resp.extend_from_slice(&body);
        resp
    })
}

/// An upstream that accepts and never answers.
fn stalled_upstream() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
    let port = listener.local_addr().expect("addr").port();
    (listener, port)
}

fn config(up: u16, dead: u16, stalled: u16) -> String {
    support::main_config(&format!(
        "    upstream b {{ server 127.0.0.1:{up}; keepalive 4; }}\n\
         server {{\n    listen 127.0.0.1:{{PORT0}};\n    server_name localhost;\n\
         location / {{ proxy_pass http://b; proxy_http_version 1.1; proxy_set_header Connection \"\"; }}\n\
         location /old/ {{ proxy_pass http://b/new/; }}\n\
         location /dead/ {{ proxy_pass http://127.0.0.1:{dead}; }}\n\
         location /stall/ {{ proxy_pass http://127.0.0.1:{stalled}; proxy_read_timeout 1s; }}\n\
         }}\n"
    ))
}

#[test]
fn forwards_head_and_reuses_upstream_connections() {
    let up = echo_upstream();
    let dead = support::free_ports(1)[0];
    let (_keep, stalled) = stalled_upstream();
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &config(up, dead, stalled)) else {
            continue;
        };
        let port = server.port(0);
        let r = support::request(
            port,
            "GET /a%20b?x=1 HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.2.3.4\r\nTE: trailers\r\nConnection: close\r\n\r\n",
        )
        .expect("request");
        assert_eq!(r.status, 200, "{kind}");
        let body = r.body_text();
        assert!(
            body.contains("GET /a%20b?x=1 HTTP/1.1\r\nHost: b\r\n"),
            "{kind}: {body}"
        );
        assert!(
            body.contains("X-Forwarded-For: 1.2.3.4\r\n"),
            "{kind}: {body}"
        );
        assert!(!body.contains("TE:"), "{kind}: {body}");
        assert_eq!(r.header("x-pad"), None, "{kind}");
        assert_ne!(r.header("server"), Some("upstream"), "{kind}");
        // Keepalive to the upstream: a second request rides the first one's connection.
        let again = support::get(port, "/b").expect("request");
        let first_conn = body.lines().next().unwrap_or_default().to_string();
        assert_eq!(
            again.body_text().lines().next(),
            Some(first_conn.as_str()),
            "{kind}"
        );
        // A URI part replaces the location prefix; HTTP/1.0 and Connection: close by default.
        let r = support::get(port, "/old/x").expect("request");
        let body = r.body_text();
        assert!(
            body.contains("GET /new/x HTTP/1.0\r\nHost: b\r\nConnection: close\r\n"),
            "{kind}: {body}"
        );
    }
}

#[test]
fn refused_and_stalled_upstreams() {
    let up = echo_upstream();
    let dead = support::free_ports(1)[0];
    let (_keep, stalled) = stalled_upstream();
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &config(up, dead, stalled)) else {
            continue;
        };
        let port = server.port(0);
        let r = support::get(port, "/dead/x").expect("request");
        assert_eq!(r.status, 502, "{kind}");
        let line = format!(
            "connect() failed (111: Connection refused) while connecting to upstream, client: 127.0.0.1, server: localhost, request: \"GET /dead/x HTTP/1.1\", upstream: \"http://127.0.0.1:{dead}/dead/x\""
        );
        assert!(
            support::wait_until(LOG_WAIT, || server.error_log().contains(&line)),
            "{kind}: {}",
            server.error_log()
        );
        let r = support::get(port, "/stall/x").expect("request");
        assert_eq!(r.status, 504, "{kind}");
        assert!(
            support::wait_until(LOG_WAIT, || {
                server
                .error_log()
                .contains("upstream timed out (110: Connection timed out) while reading response header from upstream")
            }),
            "{kind}: {}",
            server.error_log()
        );
    }
}

/// A `proxy_pass` URI part, which replaces the prefix a location matched, is refused where
/// there is no prefix (a regex or named location, an `if` or `limit_except` block) and
/// accepted in a prefix location, as nginx checks it.
#[test]
fn a_uri_part_is_refused_where_nginx_refuses_it() {
    let pass = "proxy_pass http://127.0.0.1:1/x;";
    for (location, refused) in [
        (format!("location /a/ {{ {pass} }}"), false),
        (format!("location ~ ^/a {{ {pass} }}"), true),
        (format!("location @named {{ {pass} }}"), true),
        (format!("location /a/ {{ if ($arg_x) {{ {pass} }} }}"), true),
        (
            format!("location /a/ {{ limit_except GET {{ {pass} }} }}"),
            true,
        ),
        (
            "location /a/ { if ($arg_x) { proxy_pass http://127.0.0.1:1; } }".to_string(),
            false,
        ),
    ] {
        let http = format!("server {{ listen 127.0.0.1:1; {location} }}");
        for kind in support::kinds() {
            let Some(binary) = kind.binary() else {
                continue;
            };
            let dir = support::TempDir::new("proxy-t");
            let conf = dir.write(
                "nginx.conf",
                support::render(&support::main_config(&http), dir.path(), &[]),
            );
            let out = support::test_config(std::process::Command::new(binary), dir.path(), &conf);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                !out.status.success(),
                refused,
                "{kind}: {location}: {stderr}"
            );
            if refused {
                assert!(stderr.contains("cannot have URI part"), "{kind}: {stderr}");
            }
        }
    }
}

/// A `proxy_pass` in a `limit_except` block answers the methods the block restricts (nginx
/// runs them in the block's location); the others are the location's own; a location's
/// `proxy_pass` reaches into its `limit_except` block. The block has no `try_files`, and
/// its settings are the ones variables see (`$proxy_host` there). `$proxy_host` and
/// `$proxy_port` are the proxy's, empty where a location passes to a FastCGI server.
#[test]
fn a_limit_except_block_proxies_the_methods_it_restricts() {
    let dead = support::free_ports(1)[0];
    let upstream = support::head_upstream(|_, head| {
        let line = String::from_utf8_lossy(head).into_owned();
        let mut words = line.split(' ');
        let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let body = format!("upstream {method} {target}");
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let http = format!(
        r#"
    server {{
        listen 127.0.0.1:{{PORT0}};
        root {{PREFIX}}/html;
        location / {{
            try_files $uri /index.html;
            limit_except GET {{ proxy_pass http://127.0.0.1:{upstream}; }}
            add_header X-Proxy-Host "[$proxy_host][$proxy_port]" always;
        }}
        location /p/ {{
            proxy_pass http://127.0.0.1:{upstream}/;
            limit_except GET {{ allow all; }}
            add_header X-Proxy-Host "[$proxy_host][$proxy_port]" always;
        }}
        location /f/ {{
            fastcgi_pass 127.0.0.1:{dead};
            add_header X-Proxy-Host "[$proxy_host][$proxy_port]" always;
        }}
    }}
"#
    );
    let mut seen = Vec::new();
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        std::fs::create_dir_all(server.prefix().join("html")).expect("html");
        std::fs::write(server.prefix().join("html/index.html"), "static").expect("index");
        let mut lines = Vec::new();
        for (method, path) in [
            ("GET", "/"),
            ("POST", "/"),
            ("POST", "/p/x"),
            ("GET", "/p/x"),
            ("GET", "/f/x"),
        ] {
            let raw = format!(
                "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let r = support::request(server.port(0), &raw).expect("request");
            let host = r.header("x-proxy-host").unwrap_or("-");
            let body = if r.status == 200 {
                r.body_text()
            } else {
                String::new()
            };
            lines.push(format!("{method} {path} -> {} {host} {body}", r.status));
        }
        support::expect_lines(
            &lines,
            &[
                "GET / -> 200 [][] static",
                &format!("POST / -> 200 [127.0.0.1:{upstream}][{upstream}] upstream POST /"),
                &format!("GET /p/x -> 200 [127.0.0.1:{upstream}][{upstream}] upstream GET /x"),
                "GET /f/x -> 502 [][] ",
            ],
        );
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
