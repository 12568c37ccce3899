//! `X-Accel-Redirect` from a proxied upstream, compared with nginx: the answer is the named
//! URI's (an `internal` location's file), requested as a GET with the
//! URI's own arguments; the upstream's `Content-Type`, `Content-Disposition`, `Set-Cookie`,
//! `Cache-Control` and `Expires` stay on it, its other fields and body go; an unsafe URI is
//! a 404; `proxy_ignore_headers X-Accel-Redirect` passes the upstream's answer as it is.

mod support;

use support::{compare, head_upstream, kinds, main_config, Server};

#[test]
fn upstreams_hand_requests_to_internal_locations() {
    let up = head_upstream(|_, head| {
        let line = String::from_utf8_lossy(head);
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let target = match path.as_str() {
            p if p.contains("/file") => "/protected/file.txt?from=up",
            p if p.contains("/named") => "@fallback",
            p if p.contains("/unsafe") => "/protected/../secret.txt",
            _ => "/protected/file.txt",
        };
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/x-thing\r\nX-Accel-Redirect: {target}\r\n\
             Content-Disposition: attachment; filename=\"f.txt\"\r\nSet-Cookie: d=1\r\n\
             Cache-Control: private\r\nX-Other: dropped\r\nContent-Length: 13\r\n\r\nignored body!"
        )
        .into_bytes()
    });
    let http = format!(
        "
    server {{
        listen 127.0.0.1:{{PORT0}};
        root {{PREFIX}}/html;
        location /app/ {{ proxy_pass http://127.0.0.1:{up}; }}
        location /raw/ {{
            proxy_ignore_headers X-Accel-Redirect;
            proxy_pass http://127.0.0.1:{up};
        }}
        location /protected/ {{ internal; alias {{PREFIX}}/html/secret/; }}
        location @fallback {{ return 200 \"fallback $request_method $args\\n\"; }}
    }}
"
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        std::fs::create_dir_all(server.path("html/secret")).unwrap();
        std::fs::write(server.path("html/secret/file.txt"), "the protected file\n").unwrap();
        let mut lines = Vec::new();
        for (method, path) in [
            ("GET", "/app/file?a=1"),
            ("POST", "/app/plain"),
            ("HEAD", "/app/file"),
            ("GET", "/app/unsafe"),
            ("GET", "/raw/file"),
            ("GET", "/protected/file.txt"),
        ] {
            let body = if method == "POST" { "x=1" } else { "" };
            let raw = format!(
                "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let r = support::request(server.port(0), &raw).expect("response");
            let mut line = format!("{method} {path} -> {}", r.status);
            for h in [
                "content-type",
                "content-disposition",
                "set-cookie",
                "cache-control",
                "x-other",
                "content-length",
                "x-accel-redirect",
            ] {
                // An error page's length is of the server's own name.
                if let Some(v) = r
                    .header(h)
                    .filter(|_| h != "content-length" || r.status == 200)
                {
                    line.push_str(&format!(" {h}={v}"));
                }
            }
            if r.status == 200 {
                line.push_str(&format!(" {:?}", r.body_text()));
            }
            lines.push(line);
        }
        if std::env::var_os("SHOW").is_some() {
            eprintln!("{kind}: {}", server.error_log());
        }
        support::expect_lines(
            &lines,
            &[
                "GET /app/file?a=1 -> 200 content-type=application/x-thing content-disposition=attachment; filename=\"f.txt\" set-cookie=d=1 cache-control=private content-length=19 \"the protected file\\n\"",
                "GET /app/unsafe -> 404",
                "GET /raw/file -> 200",
                "\"ignored body!\"",
                "GET /protected/file.txt -> 404",
            ],
        );
        seen.push((kind, lines));
    }
    compare(&seen);
}

/// `X-Accel-Redirect: @name` goes on in the named location. (nginx 1.22 answers these 500
/// when the named location `return`s: that is not followed.)
#[test]
fn a_named_location_takes_the_request() {
    let up = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nX-Accel-Redirect: @fallback\r\nContent-Length: 0\r\n\r\n".to_vec()
    });
    let http = format!(
        "
    server {{
        listen 127.0.0.1:{{PORT0}};
        location /app/ {{ proxy_pass http://127.0.0.1:{up}; }}
        location @fallback {{ return 200 \"fallback $request_method $args\\n\"; }}
    }}
"
    );
    let Some(server) = Server::start(support::Kind::Portcullis, 1, &main_config(&http)) else {
        return;
    };
    let r = support::get(server.port(0), "/app/x?b=2").expect("GET");
    assert_eq!(
        (r.status, r.body_text().as_str()),
        (200, "fallback GET b=2\n")
    );
}
