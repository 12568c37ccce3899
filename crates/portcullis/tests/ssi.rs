//! The SSI module, compared with nginx on the same configuration and files: every command
//! (`include` with `virtual`, `file`, `set`, `stub` and `wait`; `echo` and its encodings;
//! `config`; `set`; `if`/`elif`/`else`/`endif` with texts and regexes; `block`), the errors
//! and their message, includes that nest (to nginx's depth) and include proxied locations,
//! and the head: no length, chunked, validators gone or weak, no ranges, types.

#[path = "support/h2c.rs"]
#[allow(dead_code)]
mod h2c;
mod support;

use support::{head_upstream, kinds, Server};

const CONFIG: &str = r#"
    server_tokens off;
    server {
        listen 127.0.0.1:{PORT0};
        listen 127.0.0.1:{PORT1} http2;
        root {PREFIX}/html;
        location / { ssi on; }
        location /silent/ { ssi on; ssi_silent_errors on; alias {PREFIX}/html/; }
        location /short/ { ssi on; ssi_value_length 8; alias {PREFIX}/html/; }
        location /lm/ { ssi on; ssi_last_modified on; alias {PREFIX}/html/; }
        location /text/ { ssi on; ssi_types text/plain; alias {PREFIX}/html/; }
        location /raw/ { alias {PREFIX}/html/; }
        location /up/ { ssi on; proxy_pass http://127.0.0.1:{UPSTREAM}; }
        location /up-raw/ { proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
        location = /ret { ssi on; default_type text/html; return 200 "[<!--# echo var='uri' -->]"; }
        location = /redirect { ssi on; return 302 /elsewhere; }
        location = /gone { ssi on; return 404; }
        location /gz/ { ssi on; gzip on; gzip_min_length 1; alias {PREFIX}/html/; }
        location /gz-up/ { ssi on; gzip on; gzip_min_length 1; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
        location /up-lm/ { ssi on; ssi_last_modified on; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
        location /up-ranges/ { ssi on; proxy_force_ranges on; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
        location /sub-ssi/ {
            ssi on;
            sub_filter ECHO '<!--# echo var="uri" -->';
            gzip on;
            gzip_min_length 1;
            alias {PREFIX}/html/;
        }
        location /gunzip-up/ { ssi on; gunzip on; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
    }
"#;

/// The document root: name and contents.
const FILES: &[(&str, &str)] = &[
    ("inc.html", "INC"),
    ("empty.html", ""),
    ("sub/x.html", "X"),
    ("sub/rel.html", "A<!--# include file=\"x.html\" -->B"),
    ("sub/unsafe.html", "A<!--# include file=\"../inc.html\" -->B"),
    (
        "include.html",
        "a<!--# include virtual=\"/inc.html\" -->b<!--#include file='inc.html'-->c\
         <!--# include virtual=\"/inc.html?x=1\" wait=\"yes\" -->d\
         <!--# include virtual=\"/missing.html\" -->e<!--# include virtual=\"/raw/nested.html\" -->\
         <!--# include virtual=\"/nested.html\" -->",
    ),
    ("nested.html", "(<!--# include virtual=\"/inc.html\" --><!--# echo var=\"uri\" -->)"),
    (
        "stub.html",
        "<!--# block name=\"s\" -->STUB <!--# echo var=\"uri\" --><!--# endblock -->\
         1<!--# include virtual=\"/missing.html\" stub=\"s\" -->\
         2<!--# include virtual=\"/empty.html\" stub=\"s\" -->\
         3<!--# include virtual=\"/inc.html\" stub=\"s\" -->\
         4<!--# include virtual=\"/inc.html\" stub=\"none\" -->\
         5<!--# include virtual=\"/inc.html\" stub=\"s\" set=\"v\" -->",
    ),
    (
        "set.html",
        "<!--# include virtual=\"/inc.html\" set=\"one\" -->\
         <!--# include virtual=\"/up/set\" set=\"two\" -->\
         <!--# include virtual=\"/missing.html\" set=\"three\" -->\
         [<!--# echo var=\"one\" -->][<!--# echo var=\"two\" -->][<!--# echo var=\"three\" -->]\
         <!--# set var=\"v\" value=\"$uri-${args}x\\$y\\\\z\\q\" -->[<!--# echo var=\"V\" -->]\
         <!--# set var=\"v\" value=\"again\" -->[<!--# echo var=\"v\" -->]",
    ),
    (
        "echo.html",
        "[<!--# echo var=\"http_nope\" -->][<!--# echo var=\"arg_a\" -->]\
         [<!--# echo var=\"nope\" default=\"a\\\"b<\" -->][<!--# echo var=\"nope\" default=\"\" -->]\
         [<!--# echo var=\"http_x\" -->][<!--# echo var=\"http_x\" encoding=\"url\" -->]\
         [<!--# echo var=\"http_x\" -->][<!--# echo var=\"http_x\" encoding=\"none\" -->]\
         [<!--# echo var=\"http_x\" encoding=\"bogus\" -->]\
         [<!--# config timefmt=\"%Y\" --><!--# echo var=\"date_gmt\" -->]\
         [<!--# echo var=\"HTTP_X\" encoding=\"entity\" -->]",
    ),
    (
        "cond.html",
        "<!--# if expr=\"$arg_a\" -->A<!--# elif expr=\"$arg_b = two\" -->B\
         <!--# elif expr=\"$arg_b != /^t(w)(?<rest>.*)/\" -->C<!--# else -->\
         D$1<!--# echo var=\"1\" -->/<!--# echo var=\"rest\" --><!--# endif -->\
         |<!--# if expr=\"$uri = \\/cond.html\" -->E<!--# endif -->\
         |<!--# if expr=\"$uri = /cond.html\" -->F<!--# endif -->\
         |<!--# if expr=\"$nope\" --><!--# if expr=\"$x\" -->G<!--# endif -->H<!--# endif -->I\
         |<!--# if expr=\"$arg_a\" --><!--# bogus --><!--# echo -->J<!--# endif -->\
         |<!--# if expr=\"1\" --><!--# if expr=\"1\" -->K<!--# endif -->",
    ),
    (
        "errors.html",
        "1<!--# bogus -->2<!--# echo -->3<!--# echo var=\"a\" var=\"b\" -->\
         4<!--# echo nope=\"a\" -->5<!--# echo var=a -->6<!--# echo var=\"a\"x -->\
         7<!--# echo var=\"a\" -- -->8<!--# endif -->9<!--# include -->\
         10<!--# include virtual=\"/a\" file=\"/b\" -->11<!--# include file=\"/a\" wait=\"yes\" -->\
         12<!--# include virtual=\"/a\" wait=\"maybe\" -->13<!--# set var=\"a\" value=\"$\" -->\
         14<!--# set var=\"a\" value=\"${a\" -->15<!--#-->16<!--# echo var=\"a\"\
         --->17<!--# config errmsg=\"[E]\" --><!--# bogus -->18<!-- plain comment --><!-",
    ),
    ("long.html", "<!--# echo var=\"uri\" -->|<!--# echo var=\"abcdefghi\" -->|"),
    (
        "stubloop.html",
        "<!--# block name=\"s\" -->S<!--# include virtual=\"/nope\" stub=\"s\" --><!--# endblock -->\
         <!--# include virtual=\"/nope\" stub=\"s\" -->",
    ),
    (
        "setbig.html",
        "A<!--# include virtual=\"/big.txt\" set=\"v\" -->[<!--# echo var=\"v\" -->]B",
    ),
    // Made longer than nginx keeps of a subrequest in memory (`include ... set`): made below.
    ("big.txt", ""),
    (
        "nested-abort.html",
        "X<!--# include virtual=\"/setbig.html\" -->Y",
    ),
    ("dir sp/page.html", "D<!--# include file=\"x.html\" -->E"),
    ("dir sp/x.html", "x"),
    ("echo-me.html", "[ECHO]"),
    (
        "more.html",
        "[<!--# echo var=\"http_x_empty\" -->][<!--# echo var=\"arg_e\" -->]\
         <!--# if expr=\"$arg_s = /(a)?(x)?t/\" -->[<!--# echo var=\"1\" -->][<!--# echo var=\"0\" -->]<!--# endif -->\
         <!--# if expr=\"$arg_s = /^(?=t)(t)\\1?$/\" -->[LOOK]<!--# endif -->\
         [<!--# config timefmt=\"\" --><!--# echo var=\"date_gmt\" -->]",
    ),
    ("rec.html", "R<!--# include virtual=\"/rec.html\" -->"),
    ("plain.txt", "T<!--# echo var=\"uri\" -->"),
    ("proxied.html", "<!--# include virtual=\"/up/page\" -->|<!--# include virtual=\"/up-raw/page\" -->"),
];

fn upstream() -> u16 {
    head_upstream(|_, head| {
        let line = String::from_utf8_lossy(head);
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let body = if path.ends_with("abort") {
            "UP <!--# include virtual=\"/setbig.html\" -->".to_string()
        } else {
            format!("UP {path} <!--# echo var=\"uri\" -->")
        };
        let kind = if path.ends_with(".txt") {
            "text/plain"
        } else {
            "text/html"
        };
        if path.ends_with(".gz") {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
            std::io::Write::write_all(&mut e, body.as_bytes()).unwrap();
            let gz = e.finish().unwrap();
            let mut out = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
                gz.len()
            )
            .into_bytes();
            out.extend(gz);
            return out;
        }
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nETag: \"u\"\r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\nAccept-Ranges: bytes\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    })
}

#[test]
fn ssi_runs_commands_as_nginx_runs_them() {
    let up = upstream();
    let mut seen = Vec::new();
    for kind in kinds() {
        let http = CONFIG.replace("{UPSTREAM}", &up.to_string());
        let Some(server) = Server::start(kind, 2, &support::main_config(&http)) else {
            continue;
        };
        let mtime = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_577_836_800);
        for (name, contents) in FILES {
            let path = server.path("html").join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let contents = match *name {
                "big.txt" => "b".repeat(6000),
                _ => contents.to_string(),
            };
            std::fs::write(&path, contents).unwrap();
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(mtime).unwrap();
        }
        let port = server.port(0);
        let mut lines = Vec::new();
        for (method, path, extra) in [
            ("GET", "/include.html", ""),
            ("GET", "/sub/rel.html", ""),
            ("GET", "/sub/unsafe.html", ""),
            ("GET", "/stub.html", ""),
            ("GET", "/set.html?k=v", ""),
            ("GET", "/echo.html", "X: <a b\"#%'&>\u{e9}{}|^`\\\r\n"),
            ("GET", "/cond.html", ""),
            ("GET", "/cond.html?a=1", ""),
            ("GET", "/cond.html?b=two", ""),
            ("GET", "/cond.html?b=three", ""),
            ("GET", "/cond.html?b=twelve", ""),
            ("GET", "/errors.html", ""),
            ("GET", "/silent/errors.html", ""),
            ("GET", "/short/long.html", ""),
            ("GET", "/rec.html", ""),
            ("GET", "/proxied.html", ""),
            ("GET", "/raw/include.html", ""),
            ("GET", "/plain.txt", ""),
            ("GET", "/text/plain.txt", ""),
            ("GET", "/ret", ""),
            ("GET", "/redirect", ""),
            ("GET", "/gone", ""),
            ("GET", "/empty.html", ""),
            ("HEAD", "/include.html", ""),
            ("GET", "/include.html", "Range: bytes=0-3\r\n"),
            ("GET", "/lm/include.html", ""),
            ("GET", "/lm/include.html", "Range: bytes=0-3\r\n"),
            (
                "GET",
                "/include.html",
                "If-Modified-Since: Wed, 01 Jan 2020 00:00:00 GMT\r\n",
            ),
            (
                "GET",
                "/lm/include.html",
                "If-Modified-Since: Wed, 01 Jan 2020 00:00:00 GMT\r\n",
            ),
            ("GET", "/up/page", ""),
            ("HEAD", "/up/page", ""),
            ("GET", "/up/page.txt", ""),
            ("GET", "/up-lm/page", ""),
            ("GET", "/gz/include.html", "Accept-Encoding: gzip\r\n"),
            ("GET", "/gz-up/page", "Accept-Encoding: gzip\r\n"),
            ("GET", "/up-ranges/page", "Range: bytes=0-5\r\n"),
            ("GET", "/gunzip-up/page.gz", ""),
            ("GET", "/stubloop.html", ""),
            ("GET", "/setbig.html", ""),
            ("GET", "/nested-abort.html", ""),
            ("GET", "/sub-ssi/echo-me.html", "Accept-Encoding: gzip\r\n"),
            ("GET", "/up/abort", ""),
            ("GET", "/dir%20sp/page.html", ""),
            ("GET", "/more.html?e=&s=t", "X-Empty:\r\n"),
        ] {
            let raw = format!(
                "{method} {path} HTTP/1.1\r\nHost: example.org\r\n{extra}Connection: close\r\n\r\n"
            );
            let Ok(mut r) = support::request(port, &raw) else {
                lines.push(format!("{method} {path} -> no response"));
                continue;
            };
            if r.header("content-encoding") == Some("gzip") {
                let mut plain = Vec::new();
                std::io::Read::read_to_end(
                    &mut flate2::read::GzDecoder::new(&r.body[..]),
                    &mut plain,
                )
                .unwrap();
                r.body = plain;
            }
            let etag = r.header("etag").map_or("-", |e| {
                if e.starts_with("W/") {
                    "weak"
                } else {
                    "strong"
                }
            });
            lines.push(format!(
                "{method} {path} -> {} type={} cl={} lm={} etag={etag} ar={} te={} ce={}\n{}",
                r.status,
                r.header("content-type").unwrap_or("-"),
                r.header("content-length").unwrap_or("-"),
                r.header("last-modified").is_some(),
                r.header("accept-ranges").unwrap_or("-"),
                r.header("transfer-encoding").unwrap_or("-"),
                r.header("content-encoding").unwrap_or("-"),
                String::from_utf8_lossy(&r.body)
                    .replace("<center>portcullis</center>", "<center>nginx</center>"),
            ));
        }
        // HTTP/2: the same bodies in DATA frames.
        for path in ["/include.html", "/up/page", "/gz-up/page"] {
            let url = format!("http://127.0.0.1:{}{path}", server.port(1));
            if let Some(r) = h2c::curl(&["--http2-prior-knowledge", "--compressed"], &url) {
                lines.push(format!(
                    "h2 {path} -> {} cl={} etag={}\n{}",
                    r.status,
                    r.header("content-length").unwrap_or("-"),
                    r.header("etag").unwrap_or("-"),
                    String::from_utf8_lossy(&r.body)
                        .replace("<center>portcullis</center>", "<center>nginx</center>"),
                ));
            }
        }
        // HTTP/1.0 has no chunks: the body ends with the connection.
        let r = support::request(port, "GET /include.html HTTP/1.0\r\n\r\n").unwrap();
        lines.push(format!(
            "HTTP/1.0 -> {} cl={} te={} conn={}\n{}",
            r.status,
            r.header("content-length").unwrap_or("-"),
            r.header("transfer-encoding").unwrap_or("-"),
            r.header("connection").unwrap_or("-"),
            String::from_utf8_lossy(&r.body)
                .replace("<center>portcullis</center>", "<center>nginx</center>"),
        ));
        seen.push((kind, lines));
    }
    support::compare(&seen);
    // What portcullis must answer, nginx or not.
    if let Some((_, lines)) = seen.iter().find(|(k, _)| *k == support::Kind::Portcullis) {
        support::expect_lines(
            lines,
            &[
                "aINCbINCcINCd<html>",
                "1STUB /missing.html2STUB <!--#echo var=\"uri\" -->3INC4[an error",
                "[INC][UP /up/set /up/set][][/set.html-k=vx$y\\z\\q][again]",
                "D$1w/elve|E|",
                "UP /up/page /up/page|UP /up/page <!--# echo",
                &format!("\n{}[an error occurred", "R".repeat(52)),
            ],
        );
    }
}

/// The module's directives are checked at load as nginx checks them, with its messages.
#[test]
fn ssi_directives_are_refused_as_nginx_refuses_them() {
    for (http, error) in [
        ("ssi maybe;", "invalid value \"maybe\" in \"ssi\" directive"),
        (
            "ssi_value_length lots;",
            "\"ssi_value_length\" directive invalid value",
        ),
        (
            "ssi_min_file_chunk -1;",
            "\"ssi_min_file_chunk\" directive invalid value",
        ),
        ("ssi on; ssi off;", "\"ssi\" directive is duplicate"),
        ("ssi_types;", "invalid number of arguments in \"ssi_types\""),
    ] {
        for kind in kinds() {
            let dir = support::TempDir::new("ssi-t");
            let conf = dir.write(
                "nginx.conf",
                support::render(&support::main_config(http), dir.path(), &[]),
            );
            let Some(binary) = kind.binary() else {
                continue;
            };
            let out = support::test_config(std::process::Command::new(binary), dir.path(), &conf);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{kind}: {http} loads");
            assert!(stderr.contains(error), "{kind}: {stderr}");
        }
    }
}
