//! `charset`, compared with nginx: naming the charset in `Content-Type` on the server's own
//! responses and on proxied ones, only for `charset_types` (and all with `*`), never over a
//! charset the response names already, and not with `charset off`; recoding bodies through
//! `charset_map`s (single-byte charsets and UTF-8, files, ranges, proxied responses with
//! `override_charset` and `X-Accel-Charset`); the maps nginx ships; the refusals.

#[path = "support/h2c.rs"]
#[allow(dead_code)]
mod h2c;
mod support;

use support::{head_upstream, kinds, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        charset utf-8;
        location = /own { return 200 "own\n"; }
        location = /own-json { default_type application/json; return 200 "{}\n"; }
        location = /own-302 { return 302 /elsewhere; }
        location /up/ { proxy_pass http://127.0.0.1:{UPSTREAM}; }
        location /all/ { charset_types *; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
        location /off/ { charset off; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
        location /two/ {
            charset_types application/json;
            charset_types application/xml;
            proxy_pass http://127.0.0.1:{UPSTREAM}/up/;
        }
        location = /plain-listed { charset_types application/json; return 200 "x\n"; }
        location /headers/ {
            add_header X-Seen yes;
            proxy_pass http://127.0.0.1:{UPSTREAM}/up/;
        }
    }
"#;

#[test]
fn charset_names_the_charset_as_nginx_does() {
    let upstream = head_upstream(|_, head| {
        let line = String::from_utf8_lossy(head);
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let ty = match path.as_str() {
            "/up/html" => "Content-Type: text/html\r\n",
            "/up/named" => "Content-Type: text/html; charset=koi8-r\r\n",
            "/up/json" => "Content-Type: application/json\r\n",
            "/up/upper" => "Content-Type: TEXT/HTML\r\n",
            "/up/params" => "Content-Type: text/html; foo=bar\r\n",
            "/up/moved" => "Content-Type: text/html\r\nLocation: /elsewhere\r\n",
            _ => "",
        };
        let status = if path == "/up/moved" {
            "302 Found"
        } else {
            "200 OK"
        };
        format!("HTTP/1.1 {status}\r\n{ty}Content-Length: 3\r\n\r\nok\n").into_bytes()
    });
    let http = CONFIG.replace("{UPSTREAM}", &upstream.to_string());
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let mut got = Vec::new();
        for path in [
            "/own",
            "/own-json",
            "/up/html",
            "/up/named",
            "/up/json",
            "/up/upper",
            "/up/none",
            "/all/json",
            "/off/html",
            "/headers/html",
        ] {
            let r = support::get(server.port(0), path).expect("request");
            got.push(format!(
                "{path} -> {} {}",
                r.status,
                r.header("content-type").unwrap_or("-")
            ));
        }
        if kind == support::Kind::Portcullis {
            assert!(
                got.contains(&"/up/html -> 200 text/html; charset=utf-8".to_string()),
                "{got:#?}"
            );
        }
        seen.push((kind, got));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}

/// Maps between KOI8-R, UTF-8 and windows-1251 for the letters the tests send (nginx's
/// own maps, `/etc/nginx/koi-utf` and the others, are tried by the next test).
const MAPS: &str = r#"
    charset_map koi8-r utf-8 {
        C1 D0B0; C2 D0B1; D7 D0B2; D1 D18F; E1 D090; D6 D0B6; 80 E282AC;
    }
    charset_map koi8-r windows-1251 { C1 E0; C2 E1; D7 E2; D1 FF; E1 C0; D6 E6; }
"#;

const RECODING: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        listen 127.0.0.1:{PORT1} http2;
        root {PREFIX}/html;
        location /koi2utf/ { alias {PREFIX}/html/; source_charset koi8-r; charset utf-8; }
        location /utf2koi/ { alias {PREFIX}/html/; source_charset utf-8; charset koi8-r; }
        location /koi2win/ { alias {PREFIX}/html/; source_charset koi8-r; charset windows-1251; }
        location /win2koi/ { alias {PREFIX}/html/; source_charset windows-1251; charset KOI8-R; }
        location /same/ { alias {PREFIX}/html/; source_charset utf-8; charset UTF-8; }
        location /var/ { alias {PREFIX}/html/; source_charset koi8-r; charset $arg_cs; }
        location /nomap/ { alias {PREFIX}/html/; source_charset $arg_src; charset $arg_cs; }
        location /json/ { alias {PREFIX}/html/; default_type application/json; source_charset koi8-r; charset utf-8; }
        location /gzip/ {
            alias {PREFIX}/html/;
            gzip on;
            gzip_min_length 1;
            source_charset koi8-r;
            charset utf-8;
        }
        location = /moved { source_charset koi8-r; charset utf-8; return 302 /elsewhere; }
        location /up/ { charset windows-1251; proxy_pass http://127.0.0.1:{UPSTREAM}; }
        location /over/ {
            charset windows-1251;
            override_charset on;
            proxy_pass http://127.0.0.1:{UPSTREAM}/up/;
        }
        location /over-utf/ {
            charset utf-8;
            override_charset on;
            proxy_pass http://127.0.0.1:{UPSTREAM}/up/;
        }
        location /accel/ { proxy_pass http://127.0.0.1:{UPSTREAM}/accel/; }
        # A charset only another location names is known here too.
        location /names-x-sibling/ { charset x-sibling; alias {PREFIX}/html/; }
        # Replaced, then recoded.
        location /sub/ {
            alias {PREFIX}/html/;
            sub_filter "<p>" "<P>";
            sub_filter_once off;
            source_charset koi8-r;
            charset utf-8;
        }
        location /accel-ignored/ {
            proxy_ignore_headers X-Accel-Charset;
            proxy_pass http://127.0.0.1:{UPSTREAM}/accel/;
        }
    }
"#;

/// "Привет"-like text: the mapped letters, ASCII, and in UTF-8 also a letter no map has
/// (ы), one outside the 16-bit plane, and bytes that are not UTF-8.
fn koi8() -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..300 {
        out.extend(format!("<p>{i} ").into_bytes());
        out.extend([0xc1, 0xc2, 0xd7, 0xd1, 0xe1, 0xd6, 0x80, 0xfe]);
        out.extend(b"</p>\n");
    }
    out
}

fn utf8() -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..300 {
        out.extend(format!("<p>{i} абвяАж€ы😀").into_bytes());
        out.extend(b"\xe2\x82A\x80</p>\n");
    }
    // The body ends in the middle of a character.
    out.extend(b"end\xd0");
    out
}

#[test]
fn charset_recodes_as_nginx_recodes() {
    let upstream = head_upstream(|_, head| {
        let line = String::from_utf8_lossy(head);
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let body = koi8();
        let fields = match path.as_str() {
            "/up/koi" => "Content-Type: text/html; charset=koi8-r\r\nAccept-Ranges: bytes\r\n",
            "/up/quoted" => "Content-Type: text/html;charset=\"KOI8-R\"\r\n",
            "/up/gz" => "Content-Type: text/html; charset=koi8-r\r\nContent-Encoding: gzip\r\n",
            "/up/plain" => "Content-Type: text/html\r\n",
            "/accel/koi" => "Content-Type: text/html; charset=koi8-r\r\nX-Accel-Charset: utf-8\r\n",
            "/accel/unknown" => "Content-Type: text/html\r\nX-Accel-Charset: x-unknown\r\n",
            "/accel/sibling" => "Content-Type: text/html\r\nX-Accel-Charset: X-SIBLING\r\n",
            _ => "Content-Type: text/plain\r\n",
        };
        let mut out = format!(
            "HTTP/1.1 200 OK\r\n{fields}Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend(body);
        out
    });
    let http = format!("{MAPS}{RECODING}").replace("{UPSTREAM}", &upstream.to_string());
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &support::main_config(&http)) else {
            continue;
        };
        let html = server.path("html");
        std::fs::create_dir_all(&html).unwrap();
        std::fs::write(html.join("koi.html"), koi8()).unwrap();
        std::fs::write(html.join("utf.html"), utf8()).unwrap();
        std::fs::write(html.join("koi.css"), koi8()).unwrap();
        let port = server.port(0);
        let mut lines = Vec::new();
        for (method, path, extra) in [
            ("GET", "/koi2utf/koi.html", ""),
            ("HEAD", "/koi2utf/koi.html", ""),
            ("GET", "/koi2utf/koi.html", "Range: bytes=0-20\r\n"),
            ("GET", "/koi2utf/koi.css", ""),
            ("GET", "/utf2koi/utf.html", ""),
            ("GET", "/koi2win/koi.html", ""),
            ("HEAD", "/koi2win/koi.html", ""),
            ("GET", "/koi2win/koi.html", "Range: bytes=3-20\r\n"),
            ("GET", "/koi2win/koi.html", "Range: bytes=0-5,10-20\r\n"),
            ("GET", "/koi2win/koi.html", "If-None-Match: *\r\n"),
            ("GET", "/win2koi/koi.html", ""),
            ("GET", "/same/utf.html", ""),
            ("GET", "/var/koi.html?cs=windows-1251", ""),
            ("GET", "/var/koi.html?cs=WINDOWS-1251", ""),
            ("GET", "/var/koi.html?cs=koi8-r", ""),
            ("GET", "/nomap/koi.html?cs=x-one&src=x-one", ""),
            ("GET", "/nomap/koi.html?cs=x-one&src=x-two", ""),
            ("GET", "/nomap/koi.html?cs=utf-8&src=windows-1251", ""),
            ("GET", "/json/koi.html", ""),
            ("GET", "/gzip/koi.html", "Accept-Encoding: gzip\r\n"),
            ("GET", "/moved", ""),
            ("GET", "/up/koi", ""),
            ("GET", "/up/plain", ""),
            ("GET", "/over/koi", ""),
            ("GET", "/over/quoted", ""),
            ("GET", "/over/plain", ""),
            ("GET", "/over/gz", ""),
            ("GET", "/over-utf/koi", ""),
            ("HEAD", "/over-utf/koi", ""),
            ("GET", "/accel/koi", ""),
            ("GET", "/accel/unknown", ""),
            ("GET", "/accel-ignored/koi", ""),
            ("GET", "/accel/sibling", ""),
            ("GET", "/sub/koi.html", ""),
            ("GET", "/up/quoted", ""),
        ] {
            let raw = format!(
                "{method} {path} HTTP/1.1\r\nHost: example.org\r\n{extra}Connection: close\r\n\r\n"
            );
            let r = support::request(port, &raw).unwrap();
            // The upstream's "gzip" is not gzip: only the server's own is opened.
            let body = if path.starts_with("/gzip/") {
                let mut out = Vec::new();
                std::io::Read::read_to_end(
                    &mut flate2::read::GzDecoder::new(&r.body[..]),
                    &mut out,
                )
                .unwrap();
                out
            } else {
                r.body.clone()
            };
            lines.push(format!(
                "{method} {path} {extra:?} -> {} type={} cl={} ar={} etag={} lm={} te={} ce={}",
                r.status,
                r.header("content-type").unwrap_or("-"),
                r.header("content-length").unwrap_or("-"),
                r.header("accept-ranges").unwrap_or("-"),
                r.header("etag").is_some(),
                r.header("last-modified").is_some(),
                r.header("transfer-encoding").unwrap_or("-"),
                r.header("content-encoding").unwrap_or("-"),
            ));
            // nginx's own pages name it.
            if r.status == 302 {
                continue;
            }
            lines.push(format!(
                "  {} bytes: {}",
                body.len(),
                String::from_utf8_lossy(&body[..body.len().min(120)]).escape_debug()
            ));
            lines.push(format!(
                "  ends: {:?}",
                &body[body.len().saturating_sub(12)..]
            ));
            let sum = body
                .iter()
                .fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
            lines.push(format!("  sum {sum:x}"));
        }
        // HTTP/2: the same bodies, framed by DATA frames.
        for (path, range) in [
            ("/koi2utf/koi.html", None),
            ("/koi2win/koi.html", Some("3-20")),
            ("/over-utf/koi", None),
        ] {
            let url = format!("http://127.0.0.1:{}{path}", server.port(1));
            let mut args = vec!["--http2-prior-knowledge"];
            args.extend(range.iter().flat_map(|r| ["-r", r]));
            if let Some(r) = h2c::curl(&args, &url) {
                lines.push(format!(
                    "h2 {path} {range:?} -> {} {} cl={} {:?}",
                    r.status,
                    r.header("content-type").unwrap_or("-"),
                    r.header("content-length").unwrap_or("-"),
                    &r.body[..r.body.len().min(40)]
                ));
            }
        }
        let log = server.error_log();
        for complaint in [
            "no \"charset_map\" between the charsets \"x-two\" and \"x-one\"",
            "no \"charset_map\" between the charsets \"windows-1251\" and \"utf-8\"",
            "unknown charset \"x-unknown\" to override",
        ] {
            lines.push(format!("log has {complaint}: {}", log.contains(complaint)));
        }
        if kind == support::Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "GET /koi2utf/koi.html \"\" -> 200 type=text/html; charset=utf-8 cl=- ar=- etag=true lm=true te=chunked",
                    "<p>0 абвяАж€?</p>",
                    "GET /koi2win/koi.html \"Range: bytes=3-20\\r\\n\" -> 206 type=text/html; charset=windows-1251 cl=18",
                    "&#1099;&#128512;??</p>",
                    "GET /over/koi \"\" -> 200 type=text/html; charset=windows-1251 cl=",
                    "log has unknown charset \"x-unknown\" to override: true",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// The refusals nginx makes of a configuration's charsets, with its words.
#[test]
fn charset_maps_refused_as_nginx_refuses_them() {
    for (http, message) in [
        (
            "server { listen 127.0.0.1:{PORT0}; charset utf-8; source_charset koi8-r; }",
            "no \"charset_map\" between the charsets \"koi8-r\" and \"utf-8\"",
        ),
        (
            "charset_map koi8-r KOI8-R { C1 C1; }",
            "\"charset_map\" between the same charsets \"koi8-r\" and \"KOI8-R\"",
        ),
        (
            "charset_map a b { C1 C1; } charset_map b a { C1 C1; }",
            "duplicate \"charset_map\" between \"b\" and \"a\"",
        ),
        ("charset_map a b { C1; }", "invalid parameters number"),
        ("charset_map a b { C1 C1 C1; }", "invalid parameters number"),
        ("charset_map a b { C1 100; }", "invalid value \"100\""),
        ("charset_map a utf-8 { C1 \"\"; }", "invalid value \"\""),
        (
            "server { listen 127.0.0.1:{PORT0}; location / { charset_map a b { } } }",
            "\"charset_map\" directive is not allowed here",
        ),
        // nginx 1.22 takes a UTF-8 sequence of four bytes and writes it over the next
        // byte's; later versions refuse it, as portcullis does.
        (
            "charset_map a utf-8 { C1 D0B0D0B0; }",
            "invalid value \"D0B0D0B0\"",
        ),
    ] {
        let only_ours = http.contains("D0B0D0B0");
        for kind in kinds() {
            if only_ours && kind == support::Kind::Nginx {
                continue;
            }
            let config = support::main_config(http);
            let mut server = match Server::spawn_unready(kind, 1, &config) {
                Some(s) => s,
                None => continue,
            };
            let status = server.wait_exit(std::time::Duration::from_secs(10));
            assert!(
                status.is_some_and(|s| !s.success()),
                "{kind} started with {http}"
            );
            let log = server.logs();
            assert!(log.contains(message), "{kind}: no {message:?} in {log}");
        }
    }
}

/// nginx's own maps as Debian installs them (`/etc/nginx/koi-utf`, `koi-win`, `win-utf`),
/// included unchanged: text recoded through each, compared with nginx.
#[test]
fn the_maps_nginx_ships_recode_as_in_nginx() {
    let dir = std::path::Path::new("/etc/nginx");
    if !dir.join("koi-utf").is_file() {
        assert!(
            std::env::var_os("CI").is_none(),
            "/etc/nginx/koi-utf not found: apt-get install nginx"
        );
        support::skip("/etc/nginx/koi-utf not found: apt-get install nginx");
        return;
    }
    let http = r#"
        include /etc/nginx/koi-utf;
        include /etc/nginx/koi-win;
        include /etc/nginx/win-utf;
        server {
            listen 127.0.0.1:{PORT0};
            location /koi2utf/ { alias {PREFIX}/html/; source_charset koi8-r; charset utf-8; }
            location /utf2koi/ { alias {PREFIX}/html/; source_charset utf-8; charset koi8-r; }
            location /win2utf/ { alias {PREFIX}/html/; source_charset windows-1251; charset utf-8; }
            location /utf2win/ { alias {PREFIX}/html/; source_charset utf-8; charset windows-1251; }
            location /koi2win/ { alias {PREFIX}/html/; source_charset koi8-r; charset windows-1251; }
            location /win2koi/ { alias {PREFIX}/html/; source_charset windows-1251; charset koi8-r; }
        }
    "#;
    let every_byte: Vec<u8> = (0..=255u8).collect();
    let text = "Съешь же ещё этих мягких французских булок, да выпей чаю. «Ґ» € № ™ ½ \u{2116}";
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        let html = server.path("html");
        std::fs::create_dir_all(&html).unwrap();
        std::fs::write(html.join("bytes.txt"), &every_byte).unwrap();
        std::fs::write(html.join("text.txt"), text).unwrap();
        let mut lines = Vec::new();
        for dir in [
            "koi2utf", "utf2koi", "win2utf", "utf2win", "koi2win", "win2koi",
        ] {
            for file in ["bytes.txt", "text.txt"] {
                let r = support::get(server.port(0), &format!("/{dir}/{file}")).unwrap();
                lines.push(format!(
                    "/{dir}/{file} -> {} {} {:02x?}",
                    r.status,
                    r.header("content-type").unwrap_or("-"),
                    r.body
                ));
            }
        }
        if kind == support::Kind::Portcullis {
            support::expect_lines(
                &lines,
                &["/koi2utf/text.txt -> 200 text/plain; charset=utf-8"],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
