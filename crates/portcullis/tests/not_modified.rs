//! nginx's not-modified filter on the 200s of the server's own that no handler checked the
//! conditions of (`return`, `stub_status`, an `autoindex` listing): they have no
//! `Last-Modified` or `ETag`, so `If-Match` other than `*` and any `If-Unmodified-Since`
//! are 412, `If-None-Match: *` is 304, the rest leave the 200. `add_header ETag` comes after
//! the filter and counts for nothing. Compared with nginx.

mod support;

use support::{kinds, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        location /r { return 200 "hello\n"; }
        location /s { stub_status; }
        location /e { add_header ETag '"abc"'; return 200 "hello\n"; }
        location /dir/ { autoindex on; alias {PREFIX}/; }
        location /missing { return 404; }
    }
"#;

#[test]
fn conditions_on_the_server_s_own_answers_are_nginx_s() {
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(CONFIG)) else {
            continue;
        };
        let mut got = Vec::new();
        for field in [
            "If-Match: \"x\"",
            "If-Match: *",
            "If-None-Match: *",
            "If-None-Match: \"x\"",
            "If-None-Match: \"abc\"",
            "If-Unmodified-Since: Fri, 01 Jan 2100 00:00:00 GMT",
            "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT",
        ] {
            for path in ["/r", "/s", "/e", "/dir/", "/missing"] {
                for method in ["GET", "HEAD"] {
                    let r = support::request(
                        server.port(0),
                        &format!("{method} {path} HTTP/1.1\r\nHost: x\r\n{field}\r\nConnection: close\r\n\r\n"),
                    )
                    .expect("request");
                    got.push(format!(
                        "{method} {path} [{field}] -> {} type={}",
                        r.status,
                        r.header("content-type").unwrap_or("-")
                    ));
                }
            }
        }
        // The method does not matter to nginx's filter; an unreadable date still counts.
        for (method, path, field) in [
            ("POST", "/r", "If-None-Match: *"),
            ("DELETE", "/r", "If-None-Match: *"),
            ("GET", "/r", "If-Unmodified-Since: garbage"),
            (
                "GET",
                "/r",
                "If-None-Match: *\r\nIf-Modified-Since: garbage",
            ),
            ("GET", "/r", "If-Modified-Since: garbage"),
        ] {
            let r = support::request(
                server.port(0),
                &format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n{field}\r\nConnection: close\r\n\r\n"),
            )
            .expect("request");
            got.push(format!("{method} {path} [{field}] -> {}", r.status));
        }
        // A 412 of the filter closes the connection: a request behind it is not answered.
        let mut c = support::Client::connect(server.port(0));
        c.send(b"GET /r HTTP/1.1\r\nHost: x\r\nIf-Match: \"x\"\r\n\r\nGET /r HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let first = c.read_response(false).unwrap();
        let second = match c.read_response(false) {
            Ok(r) => r.status.to_string(),
            Err(_) => "closed".to_string(),
        };
        got.push(format!(
            "pipelined after 412: {} then {second}",
            first.status
        ));
        if kind == support::Kind::Portcullis {
            assert!(
                got.contains(&"GET /r [If-Match: \"x\"] -> 412 type=text/html".to_string()),
                "{got:#?}"
            );
            assert!(
                got.contains(&"GET /r [If-None-Match: *] -> 304 type=-".to_string()),
                "{got:#?}"
            );
        }
        // Two listings on one connection: a listing is chunked, the connection stays.
        let mut c = support::Client::connect(server.port(0));
        for _ in 0..2 {
            c.send(b"GET /dir/ HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let r = c.read_response(false).unwrap();
            got.push(format!(
                "keepalive listing -> {} te={} conn={}",
                r.status,
                r.header("transfer-encoding").unwrap_or("-"),
                r.header("connection").unwrap_or("-")
            ));
        }
        seen.push((kind, got));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}
