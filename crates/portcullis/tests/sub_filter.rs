//! `sub_filter`, compared with nginx on the same configuration and files: matches in any
//! case, once or everywhere, several matches, variables, types, `return` and proxied
//! bodies (a match split between chunks), the head's changes (no length, `Last-Modified`
//! and `ETag` gone or kept weak, ranges not served), and the chains with `gzip` (replaced,
//! then compressed) and `gunzip` (decompressed, then replaced).

mod support;

use std::io::{Read, Write};

use support::{head_upstream, kinds, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        root {PREFIX}/html;
        location /static/ { sub_filter Hello Bye; alias {PREFIX}/html/; }
        location /all/ { sub_filter hello bye; sub_filter_once off; alias {PREFIX}/html/; }
        location /multi/ {
            sub_filter ab "[1]";
            sub_filter abc "[2]";
            sub_filter_once off;
            alias {PREFIX}/html/;
        }
        location /multi2/ {
            sub_filter abc "[2]";
            sub_filter ab "[1]";
            alias {PREFIX}/html/;
        }
        location /types/ { sub_filter line LINE; sub_filter_types text/plain; alias {PREFIX}/html/; }
        location /types2/ {
            sub_filter line LINE;
            sub_filter_types text/plain;
            sub_filter_types text/css;
            alias {PREFIX}/html/;
        }
        location /lm/ { sub_filter Hello Bye; sub_filter_last_modified on; alias {PREFIX}/html/; }
        location /var/ { sub_filter $arg_from "<$arg_to>"; sub_filter_once off; alias {PREFIX}/html/; }
        location = /ret {
            default_type text/html;
            sub_filter world $host;
            return 200 "hello world, world\n";
        }
        location /up/ {
            sub_filter internal EXTERNAL;
            sub_filter_once off;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /gz/ { gzip on; gzip_min_length 1; sub_filter Hello Bye; alias {PREFIX}/html/; }
        location /unzip-file/ {
            gzip_static always;
            gunzip on;
            sub_filter line LINE;
            sub_filter_once off;
            alias {PREFIX}/html/;
        }
        location /minlen/ {
            gzip on;
            gzip_min_length 1000;
            sub_filter Hello Bye;
            alias {PREFIX}/html/;
        }
        location /nothing/ { sub_filter $arg_none x; alias {PREFIX}/html/; }
        location /gunzip/ {
            gunzip on;
            sub_filter internal EXTERNAL;
            sub_filter_once off;
            proxy_pass http://127.0.0.1:{UPSTREAM}/up/;
        }
    }
"#;

fn page() -> String {
    (0..200)
        .map(|i| format!("<p>Hello hello HELLO line {i} abcab ab abc</p>\n"))
        .collect()
}

/// Text the upstream sends, with "internal" split between chunks.
fn upstream_text() -> Vec<u8> {
    (0..50)
        .map(|i| format!("<a href=\"http://internal/{i}\">INTERNAL {i}</a>\n"))
        .collect::<String>()
        .into_bytes()
}

fn upstream() -> u16 {
    head_upstream(|_, head| {
        let line = String::from_utf8_lossy(head);
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let body = upstream_text();
        if path == "/up/gz" {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
            e.write_all(&body).unwrap();
            let gz = e.finish().unwrap();
            let mut out = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
                gz.len()
            )
            .into_bytes();
            out.extend(gz);
            return out;
        }
        let mut out = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"u\"\r\nAccept-Ranges: bytes\r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        // Pieces of 13 bytes cut every match somewhere.
        for piece in body.chunks(13) {
            out.extend(format!("{:x}\r\n", piece.len()).into_bytes());
            out.extend(piece);
            out.extend(b"\r\n");
        }
        out.extend(b"0\r\n\r\n");
        out
    })
}

#[test]
fn sub_filter_replaces_as_nginx_replaces() {
    let up = upstream();
    let mut seen = Vec::new();
    for kind in kinds() {
        let http = CONFIG.replace("{UPSTREAM}", &up.to_string());
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let html = server.path("html");
        std::fs::create_dir_all(&html).unwrap();
        std::fs::write(html.join("page.html"), page()).unwrap();
        std::fs::write(html.join("page.txt"), page()).unwrap();
        std::fs::write(html.join("tiny.html"), "Hello there\n").unwrap();
        // A file that decompresses to many times the most gunzip makes at once.
        let big: String = (0..12_000)
            .map(|i| format!("<p>line {i} of a big page</p>\n"))
            .collect();
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        e.write_all(big.as_bytes()).unwrap();
        std::fs::write(html.join("big.html.gz"), e.finish().unwrap()).unwrap();
        let port = server.port(0);
        let mut lines = Vec::new();
        for (method, path, extra) in [
            ("GET", "/static/page.html", ""),
            ("HEAD", "/static/page.html", ""),
            ("GET", "/static/page.html", "Range: bytes=0-9\r\n"),
            ("GET", "/static/page.txt", ""),
            ("GET", "/all/page.html", ""),
            ("GET", "/multi/page.html", ""),
            ("GET", "/multi2/page.html", ""),
            ("GET", "/types/page.txt", ""),
            ("GET", "/types/page.html", ""),
            ("GET", "/types2/page.txt", ""),
            ("GET", "/lm/page.html", ""),
            ("GET", "/var/page.html?from=LINE&to=row", ""),
            ("GET", "/ret", ""),
            ("GET", "/up/plain", ""),
            ("GET", "/gz/page.html", "Accept-Encoding: gzip\r\n"),
            ("GET", "/gunzip/gz", ""),
            ("GET", "/unzip-file/big.html", ""),
            ("GET", "/minlen/tiny.html", "Accept-Encoding: gzip\r\n"),
            ("GET", "/nothing/page.html", ""),
        ] {
            let raw = format!(
                "{method} {path} HTTP/1.1\r\nHost: example.org\r\n{extra}Connection: close\r\n\r\n"
            );
            let r = support::request(port, &raw).unwrap();
            let body = if r.header("content-encoding") == Some("gzip") {
                let mut out = Vec::new();
                flate2::read::GzDecoder::new(&r.body[..])
                    .read_to_end(&mut out)
                    .unwrap();
                out
            } else {
                r.body.clone()
            };
            let etag = r.header("etag").map_or("-", |e| {
                if e.starts_with("W/") {
                    "weak"
                } else {
                    "strong"
                }
            });
            lines.push(format!(
                "{method} {path} -> {} cl={} lm={} etag={etag} ar={} ce={} te={}\n{}",
                r.status,
                r.header("content-length").is_some(),
                r.header("last-modified").is_some(),
                r.header("accept-ranges").unwrap_or("-"),
                r.header("content-encoding").unwrap_or("-"),
                r.header("transfer-encoding").unwrap_or("-"),
                String::from_utf8_lossy(&body[..body.len().min(400)]),
            ));
            // The whole body, not only its start: its length and a checksum.
            let sum = body
                .iter()
                .fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
            lines.push(format!(
                "{method} {path} body: {} bytes, sum {sum:x}",
                body.len()
            ));
        }
        seen.push((kind, lines));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}
