//! `empty_gif`, compared with nginx on the same configuration: the same 43 bytes with the
//! same type, length and `Last-Modified`, HEAD, 405 for other methods, 304 for its
//! `If-Modified-Since`, and a nested location that does not inherit it.

mod support;

use support::{kinds, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        location /pixel {
            empty_gif;
            location /pixel/inner { return 200 "inner\n"; }
        }
        location /before { if_modified_since before; empty_gif; }
    }
"#;

#[test]
fn empty_gif_answers_as_nginx_does() {
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(CONFIG)) else {
            continue;
        };
        let port = server.port(0);
        let mut lines = Vec::new();
        let mut gif = Vec::new();
        for (method, path, extra) in [
            ("GET", "/pixel", ""),
            ("HEAD", "/pixel", ""),
            ("POST", "/pixel", "Content-Length: 0\r\n"),
            ("GET", "/pixel/inner", ""),
            (
                "GET",
                "/pixel",
                "If-Modified-Since: Mon, 28 Sep 1970 06:00:00 GMT\r\n",
            ),
            (
                "GET",
                "/pixel",
                "If-Modified-Since: Tue, 29 Sep 1970 06:00:00 GMT\r\n",
            ),
            (
                "GET",
                "/before",
                "If-Modified-Since: Tue, 29 Sep 1970 06:00:00 GMT\r\n",
            ),
        ] {
            let raw = format!(
                "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{extra}Connection: close\r\n\r\n"
            );
            let r = support::request(port, &raw).unwrap();
            if method == "GET" && path == "/pixel" && extra.is_empty() {
                gif = r.body.clone();
            }
            // A built-in error page's length differs by the server's name in it.
            let length = match r.status {
                400.. => "an error page".to_string(),
                _ => format!(
                    "{} {} bytes",
                    r.header("content-length").unwrap_or("-"),
                    r.body.len()
                ),
            };
            lines.push(format!(
                "{method} {path} {} -> {} {} {} {length}",
                extra.trim(),
                r.status,
                r.header("content-type").unwrap_or("-"),
                r.header("last-modified").unwrap_or("-"),
            ));
        }
        assert!(
            gif.starts_with(b"GIF89a") && gif.len() == 43,
            "{kind}: {gif:?}"
        );
        seen.push((kind, lines, gif));
    }
    if let [(_, nginx, ngif), (_, ours, ogif)] = seen.as_slice() {
        assert_eq!(ours, nginx, "portcullis against nginx");
        assert_eq!(ogif, ngif, "the same GIF");
    }
}
