//! `gzip`, `gzip_static`, `gunzip` and the core's `gzip_*` settings, compared with nginx on
//! the same configuration and files: which responses are compressed (by status, type,
//! length, `Accept-Encoding` and its `q`, HTTP version, `Via` and `gzip_proxied`,
//! `User-Agent` and `gzip_disable`), what their heads become (`Content-Encoding`, `Vary`,
//! no length, chunked, a weak `ETag`, no ranges), that the body decompresses to the file,
//! for files, `return`, error pages and proxied responses, over HTTP/1.0, 1.1 and 2.

mod support;
// Only its curl is used here.
#[allow(dead_code)]
#[path = "support/h2c.rs"]
mod h2c;

use std::io::{Read, Write};

use support::{head_upstream, kinds, Server};

const CONFIG: &str = r#"
    log_format gz "$uri $status $body_bytes_sent [$gzip_ratio]";
    gzip on;
    gzip_vary on;
    gzip_types text/plain application/javascript;
    gzip_min_length 100;
    server {
        listen 127.0.0.1:{PORT0};
        listen 127.0.0.1:{PORT1} http2;
        root {PREFIX}/html;
        location / { }
        location /l6/ { gzip_comp_level 6; alias {PREFIX}/html/; }
        location /off/ { gzip off; alias {PREFIX}/html/; }
        location /pre/ { gzip_static on; alias {PREFIX}/html/; }
        location /always/ { gzip_static always; alias {PREFIX}/html/; }
        location /unzipped/ { gzip_static always; gunzip on; alias {PREFIX}/html/; }
        location /h10/ { gzip_http_version 1.0; alias {PREFIX}/html/; }
        location /ua/ { gzip_disable "^curl/" msie6; alias {PREFIX}/html/; }
        location = /ret { return 200 "{LONG}"; }
        location = /empty { gzip_min_length 0; return 200; }
        location /empty-up/ { gzip_min_length 0; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
        location /logged/ {
            access_log {PREFIX}/gzip.log gz;
            alias {PREFIX}/html/;
        }
        location /up/ { proxy_pass http://127.0.0.1:{UPSTREAM}; }
        location /l6up/ { gzip_comp_level 6; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
        location /any/ { gzip_proxied any; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
        location /expired/ { gzip_proxied expired; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
        location /private/ {
            gzip_proxied private no_etag;
            proxy_pass http://127.0.0.1:{UPSTREAM}/up/;
        }
        location /gunzip/ { gunzip on; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
    }
"#;

fn page() -> Vec<u8> {
    (0..400)
        .flat_map(|i| format!("<p>line {i} of the page, {}</p>\n", i * 37 % 101).into_bytes())
        .collect()
}

fn gzipped(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn gunzipped(data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

/// The upstream: `/up/<what>` answers as `what` says.
fn upstream() -> u16 {
    head_upstream(|_, head| {
        let line = String::from_utf8_lossy(head);
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let head_only = line.starts_with("HEAD ");
        let body = page();
        let (fields, body): (&str, Vec<u8>) = match path.as_str() {
            "/up/plain" => (
                "Content-Type: text/html\r\nETag: \"up-1\"\r\nAccept-Ranges: bytes\r\n",
                body,
            ),
            "/up/json" => ("Content-Type: application/json\r\n", body),
            "/up/small" => ("Content-Type: text/html\r\n", b"short".to_vec()),
            "/up/gz" => (
                "Content-Type: text/html\r\nContent-Encoding: gzip\r\nETag: \"gz-1\"\r\n",
                gzipped(&body),
            ),
            "/up/private" => (
                "Content-Type: text/html\r\nCache-Control: max-age=5, private\r\n",
                body,
            ),
            "/up/expired" => (
                "Content-Type: text/html\r\nExpires: Thu, 01 Jan 1970 00:00:01 GMT\r\n",
                body,
            ),
            "/up/etag" => ("Content-Type: text/html\r\nETag: \"e\"\r\n", body),
            "/up/missing" => ("Content-Type: text/html\r\n", body),
            "/up/nothing" => ("Content-Type: text/html\r\n", Vec::new()),
            "/up/nothing-gz" => (
                "Content-Type: text/html\r\nContent-Encoding: gzip\r\n",
                Vec::new(),
            ),
            _ => ("Content-Type: text/plain\r\n", body),
        };
        let status = if path == "/up/missing" {
            "404 Not Found"
        } else {
            "200 OK"
        };
        if path == "/up/chunked" {
            let mut out = b"HTTP/1.1 200 OK
Content-Type: text/html
Transfer-Encoding: chunked

"
            .to_vec();
            if !head_only {
                for piece in body.chunks(3000) {
                    out.extend(format!("{:x}\r\n", piece.len()).into_bytes());
                    out.extend(piece);
                    out.extend(b"\r\n");
                }
                out.extend(b"0\r\n\r\n");
            }
            return out;
        }
        let mut out = format!(
            "HTTP/1.1 {status}\r\n{fields}Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        if !head_only {
            out.extend(body);
        }
        out
    })
}

/// What a response shows of its compression.
fn observe(r: &support::Response, expected: Option<&[u8]>) -> String {
    let h = |n: &str| r.header(n).unwrap_or("-").to_string();
    let etag = r.header("etag").map_or("-", |e| {
        if e.starts_with("W/") {
            "weak"
        } else {
            "strong"
        }
    });
    let body = if r.header("content-encoding") == Some("gzip") {
        match gunzipped(&r.body) {
            Some(b) => b,
            None => b"(not gzip)".to_vec(),
        }
    } else {
        r.body.clone()
    };
    let body = match expected {
        _ if body.is_empty() => "empty".to_string(),
        Some(e) if body == e => "the file".to_string(),
        Some(e) if e.starts_with(&body) => format!("{} bytes of the file", body.len()),
        _ if body.starts_with(b"<html>") => "an error page".to_string(),
        _ => format!("{:?}", String::from_utf8_lossy(&body[..body.len().min(40)])),
    };
    format!(
        "{} ce={} vary={} te={} cl={} etag={etag} ar={} cr={} {body}",
        r.status,
        h("content-encoding"),
        h("vary"),
        h("transfer-encoding"),
        r.header("content-length").is_some(),
        h("accept-ranges"),
        r.header("content-range").is_some(),
    )
}

#[test]
fn gzip_compresses_what_nginx_compresses() {
    let long = "compress me ".repeat(30);
    let up = upstream();
    let mut seen = Vec::new();
    for kind in kinds() {
        let http = CONFIG
            .replace("{UPSTREAM}", &up.to_string())
            .replace("{LONG}", &long);
        let Some(server) = Server::start(kind, 2, &support::main_config(&http)) else {
            continue;
        };
        let page = page();
        let js: Vec<u8> = b"var x = 1;\n".repeat(300);
        let html = server.path("html");
        std::fs::create_dir_all(&html).unwrap();
        for (name, data) in [
            ("index.html", page.clone()),
            ("small.html", b"tiny".to_vec()),
            ("app.js", js.clone()),
            ("data.json", page.clone()),
            ("pre.js", js.clone()),
            ("pre.js.gz", gzipped(&js)),
        ] {
            std::fs::write(html.join(name), data).unwrap();
        }
        let port = server.port(0);
        let gz = "Accept-Encoding: gzip\r\n";
        let cases: Vec<(&str, &str, String, Option<&[u8]>)> = vec![
            ("GET", "/index.html", gz.into(), Some(&page)),
            ("GET", "/index.html", String::new(), Some(&page)),
            (
                "GET",
                "/index.html",
                "Accept-Encoding: deflate, br\r\n".into(),
                Some(&page),
            ),
            (
                "GET",
                "/index.html",
                "Accept-Encoding: gzip;q=0\r\n".into(),
                Some(&page),
            ),
            (
                "GET",
                "/index.html",
                "Accept-Encoding: br, gzip;q=0.5\r\n".into(),
                Some(&page),
            ),
            (
                "GET",
                "/index.html",
                "Accept-Encoding: x-gzip\r\n".into(),
                Some(&page),
            ),
            ("HEAD", "/index.html", gz.into(), None),
            (
                "GET",
                "/index.html",
                format!("{gz}Range: bytes=0-9\r\n"),
                Some(&page),
            ),
            (
                "GET",
                "/index.html",
                "Range: bytes=0-9\r\n".into(),
                Some(&page),
            ),
            (
                "GET",
                "/index.html",
                format!("{gz}If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n"),
                Some(&page),
            ),
            (
                "GET",
                "/index.html",
                format!("{gz}Via: 1.1 proxy\r\n"),
                Some(&page),
            ),
            ("GET", "/small.html", gz.into(), Some(b"tiny")),
            ("GET", "/app.js", gz.into(), Some(&js)),
            ("GET", "/data.json", gz.into(), Some(&page)),
            ("GET", "/l6/index.html", gz.into(), Some(&page)),
            ("GET", "/off/index.html", gz.into(), Some(&page)),
            ("GET", "/nothing-here.html", gz.into(), None),
            ("GET", "/ret", gz.into(), Some(long.as_bytes())),
            (
                "POST",
                "/index.html",
                format!("{gz}Content-Length: 0\r\n"),
                None,
            ),
            ("GET", "/pre/pre.js", gz.into(), Some(&js)),
            ("GET", "/pre/pre.js", String::new(), Some(&js)),
            (
                "GET",
                "/pre/pre.js",
                format!("{gz}Range: bytes=0-9\r\n"),
                Some(&js),
            ),
            ("HEAD", "/pre/pre.js", gz.into(), None),
            ("GET", "/pre/app.js", gz.into(), Some(&js)),
            ("GET", "/always/pre.js", String::new(), Some(&js)),
            ("GET", "/unzipped/pre.js", String::new(), Some(&js)),
            ("GET", "/unzipped/pre.js", gz.into(), Some(&js)),
            (
                "GET",
                "/ua/index.html",
                format!("{gz}User-Agent: curl/8.0\r\n"),
                Some(&page),
            ),
            (
                "GET",
                "/ua/index.html",
                format!("{gz}User-Agent: Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)\r\n"),
                Some(&page),
            ),
            (
                "GET",
                "/ua/index.html",
                format!("{gz}User-Agent: Mozilla/5.0\r\n"),
                Some(&page),
            ),
            ("GET", "/up/plain", gz.into(), Some(&page)),
            ("GET", "/up/plain", String::new(), Some(&page)),
            ("HEAD", "/up/plain", gz.into(), None),
            ("GET", "/up/chunked", gz.into(), Some(&page)),
            ("GET", "/l6up/chunked", gz.into(), Some(&page)),
            ("GET", "/l6up/plain", gz.into(), Some(&page)),
            ("GET", "/up/json", gz.into(), Some(&page)),
            ("GET", "/up/small", gz.into(), Some(b"short")),
            ("GET", "/up/missing", gz.into(), Some(&page)),
            (
                "GET",
                "/up/plain",
                format!("{gz}Via: 1.1 proxy\r\n"),
                Some(&page),
            ),
            (
                "GET",
                "/any/plain",
                format!("{gz}Via: 1.1 proxy\r\n"),
                Some(&page),
            ),
            (
                "GET",
                "/expired/expired",
                format!("{gz}Via: 1.1 proxy\r\n"),
                Some(&page),
            ),
            (
                "GET",
                "/expired/plain",
                format!("{gz}Via: 1.1 proxy\r\n"),
                Some(&page),
            ),
            (
                "GET",
                "/private/private",
                format!("{gz}Via: 1.1 proxy\r\n"),
                Some(&page),
            ),
            (
                "GET",
                "/private/etag",
                format!("{gz}Via: 1.1 proxy\r\n"),
                Some(&page),
            ),
            (
                "GET",
                "/private/other",
                format!("{gz}Via: 1.1 proxy\r\n"),
                Some(&page),
            ),
            ("GET", "/gunzip/gz", String::new(), Some(&page)),
            ("GET", "/gunzip/gz", gz.into(), Some(&page)),
            ("GET", "/up/gz", String::new(), None),
            ("GET", "/empty", gz.into(), None),
            ("GET", "/empty-up/nothing", gz.into(), None),
            ("GET", "/gunzip/nothing-gz", String::new(), None),
            ("GET", "/logged/index.html", gz.into(), Some(&page)),
            ("GET", "/logged/index.html", String::new(), Some(&page)),
        ];
        let mut lines = Vec::new();
        for (method, path, fields, expected) in &cases {
            let raw = format!(
                "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{fields}Connection: close\r\n\r\n"
            );
            let Ok(r) = support::request(port, &raw) else {
                lines.push(format!("{method} {path} -> closed without an answer"));
                continue;
            };
            lines.push(format!(
                "{method} {path} [{}] -> {}",
                fields.trim().replace("\r\n", "; "),
                observe(&r, *expected)
            ));
        }
        // nginx's reading of Accept-Encoding, its quirks too.
        for ae in [
            "gzip;q=1.5",
            "gzip;q=0.001",
            "gzip; q=0.000",
            "gzip;q=1.0",
            "gzip;q=0.55",
            "gzip;q=2",
            "xgzipgzip",
            "GZIP",
            "gzipx",
            "deflate,gzip",
            "gzip ;q=0.5",
            "gzip;Q=0",
            "gzip;q=",
        ] {
            let raw = format!("GET /index.html HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: {ae}\r\nConnection: close\r\n\r\n");
            let r = support::request(port, &raw).unwrap();
            lines.push(format!(
                "{ae:?} -> {}",
                r.header("content-encoding").unwrap_or("-")
            ));
        }
        // HTTP/1.0: not compressed unless gzip_http_version 1.0, then sent to the close.
        for path in ["/index.html", "/h10/index.html"] {
            let raw = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n{gz}\r\n");
            let r = support::request(port, &raw).unwrap();
            lines.push(format!(
                "1.0 {path} -> {} conn={}",
                observe(&r, Some(&page)),
                r.header("connection").unwrap_or("-")
            ));
        }
        // Two compressed responses on one connection: the chunked framing ends each.
        let mut c = support::Client::connect(port);
        for path in ["/index.html", "/up/chunked"] {
            c.send(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{gz}\r\n").as_bytes())
                .unwrap();
            let r = c.read_response(false).unwrap();
            lines.push(format!("keepalive {path} -> {}", observe(&r, Some(&page))));
        }
        // HTTP/2.
        for path in ["/index.html", "/up/plain", "/gunzip/gz"] {
            let url = format!("http://127.0.0.1:{}{path}", server.port(1));
            if let Some(r) = h2c::curl(
                &["--http2-prior-knowledge", "-H", "Accept-Encoding: gzip"],
                &url,
            ) {
                let body = match r.header("content-encoding") {
                    Some("gzip") => gunzipped(&r.body),
                    _ => Some(r.body.clone()),
                };
                lines.push(format!(
                    "h2 {path} -> {} ce={} vary={} cl={} whole={}",
                    r.status,
                    r.header("content-encoding").unwrap_or("-"),
                    r.header("vary").unwrap_or("-"),
                    r.header("content-length").is_some(),
                    body.as_deref() == Some(&page[..]),
                ));
            }
        }
        if std::env::var_os("SHOW").is_some() {
            eprintln!("{kind}:\n{}", lines.join("\n"));
        }
        // The log: a compressed body's bytes as sent, and its ratio.
        let log_path = server.path("gzip.log");
        assert!(
            support::wait_until(std::time::Duration::from_secs(5), || {
                support::read_lossy(&log_path).lines().count() >= 2
            }),
            "{kind}: no log lines"
        );
        let log = support::read_lossy(&log_path);
        let mut logged = log.lines();
        let zipped: Vec<&str> = logged.next().unwrap().split(' ').collect();
        let plain: Vec<&str> = logged.next().unwrap().split(' ').collect();
        let bytes: u64 = zipped[2].parse().unwrap();
        assert!(
            bytes > 100 && bytes < page.len() as u64 / 2,
            "{kind}: body bytes of a compressed page: {log}"
        );
        let ratio: f64 = zipped[3].trim_matches(['[', ']']).parse().unwrap();
        assert!(ratio > 2.0, "{kind}: gzip ratio {log}");
        lines.push(format!("log plain: {} {} {}", plain[1], plain[2], plain[3]));
        if kind == support::Kind::Portcullis {
            // Checked here too, so the test needs no nginx to fail without the feature.
            assert!(
                lines[0].contains("ce=gzip") && lines[0].contains("the file"),
                "{}",
                lines[0]
            );
            assert!(lines
                .iter()
                .any(|l| l.starts_with("GET /up/plain [Accept-Encoding: gzip] -> 200 ce=gzip")));
            assert!(
                lines
                    .iter()
                    .any(|l| l.starts_with("GET /gunzip/gz [] -> 200 ce=-")
                        && l.ends_with("the file"))
            );
        }
        seen.push((kind, lines));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        let mut diffs = Vec::new();
        for (n, o) in nginx.iter().zip(ours) {
            if n != o {
                diffs.push(format!("nginx:      {n}\nportcullis: {o}"));
            }
        }
        assert!(diffs.is_empty(), "{}", diffs.join("\n\n"));
        assert_eq!(nginx.len(), ours.len());
    }
}
