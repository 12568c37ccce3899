//! `add_trailer`: trailers after the body of files, `return` texts, error pages and proxied
//! responses, by status (`always`), empty values left out, HTTP/1.1 chunked (the length
//! taken away), HTTP/1.0 without them, HEAD without them, HTTP/2 in a HEADERS frame, and
//! `$sent_trailer_*`. Compared with nginx, byte for byte on the wire (dates and the server's
//! name aside).

#[path = "support/h2c.rs"]
#[allow(dead_code)]
mod h2c;
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use support::{head_upstream, kinds, main_config, Kind, Server};

/// Everything the server sends for `raw` before it closes, with the date and the server's
/// name made neutral.
fn exchange(port: u16, raw: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out)
        .lines()
        .filter(|l| !l.starts_with("Date: ") && !l.starts_with("Server: "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn trailers_end_responses_as_nginxs() {
    let up = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n\r\nupstream".to_vec()
    });
    let http = format!(
        "
    log_format trailer '$uri $status [$sent_trailer_x_t] [$sent_trailer_x_empty]';
    server {{
        listen 127.0.0.1:{{PORT0}};
        root {{PREFIX}}/html;
        access_log {{PREFIX}}/trailer.log trailer;
        add_trailer X-T \"$uri $status\";
        add_trailer X-Empty $arg_nothing;
        add_trailer X-None \"\";
        location /always/ {{
            add_trailer X-Always \"sent\" always;
            alias {{PREFIX}}/html/;
        }}
        location = /return {{ return 200 \"hello\"; }}
        location = /created {{ return 201 \"made\"; }}
        location = /empty {{ return 200; }}
        location = /missing {{ return 404 \"none\"; }}
        location = /always/missing {{ add_trailer X-Always \"sent\" always; return 404 \"none\"; }}
        location /proxied/ {{ proxy_pass http://127.0.0.1:{up}/; }}
    }}
"
    );
    let requests = [
        "GET /f.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /return HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /created HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /empty HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /always/missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /always/f.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /proxied/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /return HTTP/1.0\r\nHost: x\r\n\r\n",
        "HEAD /return HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        write_file(&server);
        let mut lines = Vec::new();
        for raw in requests {
            let first = raw.lines().next().unwrap_or_default();
            lines.push(format!("== {first}"));
            lines.extend(exchange(server.port(0), raw).lines().map(String::from));
        }
        let logged = support::wait_until(Duration::from_secs(5), || {
            support::read_lossy(&server.path("trailer.log"))
                .lines()
                .count()
                >= requests.len()
        });
        assert!(logged, "{kind}: access log");
        lines.extend(
            support::read_lossy(&server.path("trailer.log"))
                .lines()
                .map(|l| format!("log: {l}")),
        );
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "Transfer-Encoding: chunked",
                    "X-T: /return 200",
                    "log: /return 200 [/return 200] [-]",
                    "X-T: /f.txt 200",
                    "X-Always: sent",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

#[test]
fn trailers_over_http2_as_nginxs() {
    let Some(nghttp) = h2c::tool("nghttp") else {
        support::skip("nghttp (nghttp2-client) is not installed");
        return;
    };
    let up = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n\r\nupstream".to_vec()
    });
    let http = format!(
        "
    server {{
        listen 127.0.0.1:{{PORT0}} http2;
        root {{PREFIX}}/html;
        add_trailer X-T \"$uri $status\";
        location = /return {{ return 200 \"hello\"; }}
        location /proxied/ {{ proxy_pass http://127.0.0.1:{up}/; }}
    }}
"
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        write_file(&server);
        let mut lines = Vec::new();
        for path in ["/return", "/f.txt", "/proxied/x"] {
            let out = std::process::Command::new(&nghttp)
                .arg("-v")
                .arg(format!("http://127.0.0.1:{}{path}", server.port(0)))
                .output()
                .expect("run nghttp");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            lines.push(format!("== {path}"));
            // The frames received and the trailer fields, without times and stream ids.
            for l in text.lines() {
                let l = l.split_once("] ").map_or(l, |(_, r)| r);
                if l.starts_with("recv DATA") || l.starts_with("recv HEADERS") {
                    let kind = l.split(" <").next().unwrap_or(l);
                    let flags = l.split("flags=").nth(1).and_then(|f| f.get(..4));
                    lines.push(format!("{kind} {}", flags.unwrap_or("")));
                } else if let Some((_, field)) = l.split_once(") x-t: ") {
                    lines.push(format!("trailer x-t: {field}"));
                }
            }
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &["trailer x-t: /return 200", "trailer x-t: /proxied/x 200"],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// The static file both servers send, with the same time under each (its ETag and
/// Last-Modified are compared).
fn write_file(server: &Server) {
    std::fs::create_dir_all(server.path("html")).unwrap();
    let path = server.path("html/f.txt");
    std::fs::write(&path, "file body\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| {
            f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000))
        })
        .expect("set mtime");
}
