//! `error_page` for the redirects a location makes (`return 301`, `rewrite ... redirect`, a
//! directory's redirect): nginx finishes them as errors, so the error_page for the status
//! answers. A URL is the new `Location` (a 302 unless `=code` says which redirect), written
//! with the other fields; a page of the server's own or a named location goes out with the
//! redirect's `Location`. Compared with nginx.

mod support;

use support::{kinds, main_config, Kind, Server};

#[test]
fn redirects_answered_by_error_page_as_nginx() {
    let http = "
    server {
        listen 127.0.0.1:{PORT0};
        root {PREFIX}/html;
        location /url {
            error_page 301 302 http://example.com/moved;
            location /url/ret { return 301 /elsewhere; }
            location /url/rw { rewrite ^ /x redirect; }
        }
        location /uri { error_page 301 /page.html; return 301 /elsewhere; }
        location /uri2 { error_page 301 = /page.html; return 301 /elsewhere; }
        location /named { error_page 302 @n; return 302 /elsewhere; }
        location @n { return 200 \"named\\n\"; }
        location /code { error_page 301 =302 http://example.com/c; return 301 /elsewhere; }
        location /code307 { error_page 301 =307 http://example.com/c; return 301 /elsewhere; }
        location /d { error_page 301 http://example.com/dir; }
        location /plain { return 301 /elsewhere; }
    }
";
    let paths = [
        "/url/ret", "/url/rw", "/uri", "/uri2", "/named", "/code", "/code307", "/d", "/plain",
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(http)) else {
            continue;
        };
        std::fs::create_dir_all(server.path("html/d")).unwrap();
        std::fs::write(server.path("html/page.html"), "page\n").unwrap();
        let mut lines = Vec::new();
        for path in paths {
            let r = support::get(server.port(0), path).expect("answer");
            lines.push(format!("== {path}: {} {}", r.status, r.reason));
            // The fields in their order; what names the server or the file's time aside.
            for (name, value) in &r.headers {
                let n = name.to_ascii_lowercase();
                if ["date", "server", "etag", "last-modified"].contains(&n.as_str()) {
                    continue;
                }
                let html = r.header("content-type") == Some("text/html")
                    && r.body_text().contains("<html>");
                if n == "content-length" && html {
                    continue;
                }
                let value = value.replace(&server.port(0).to_string(), "PORT");
                lines.push(format!("{name}: {value}"));
            }
            if !r.body_text().contains("<html>") {
                lines.push(format!("body: {}", r.body_text().trim()));
            }
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "== /url/ret: 302 Moved Temporarily",
                    "Location: http://example.com/moved",
                    "== /uri: 301 Moved Permanently",
                    "body: page",
                    "== /d: 302 Moved Temporarily",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
