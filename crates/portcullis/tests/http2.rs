//! HTTP/2 with prior knowledge (h2c) against the real binary: the same requests over HTTP/2
//! and HTTP/1.1, against nginx 1.22 on its `listen ... http2` form where it can serve them,
//! many concurrent streams with h2load, the refusals, and a graceful stop with streams in
//! flight.

mod support;

#[path = "support/h2c.rs"]
mod h2c;

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, UNIX_EPOCH};

use h2c::{curl, H2Response};
use support::{main_config, wait_until, Kind, Server};

const H2: &str = "--http2-prior-knowledge";
/// How long a stopping server may take to finish its streams and exit.
const EXIT_WAIT: Duration = Duration::from_secs(15);
/// A file larger than the in-memory cache holds, so it is read in window-sized pieces.
const LARGE_LEN: usize = 3 * 1024 * 1024;
/// Modification time of the docroot's files.
const MTIME_SECS: u64 = 1_577_836_800;
/// Header values that agree between two servers serving the same file.
const COMPARED: &[&str] = &[
    "content-type",
    "content-length",
    "etag",
    "last-modified",
    "content-range",
    "accept-ranges",
];

/// The 1.22 form, which nginx also serves (HTTP/2 only there).
const LISTEN_HTTP2: &str = r#"
    client_max_body_size 1k;
    server {
        listen 127.0.0.1:{PORT0} http2;
        root {PREFIX}/html;
        location = /moved { return 301 /index.html; }
        location = /proto { return 200 "$server_protocol|$request|$http_cookie|$host\n"; }
        location = /drop { return 444; }
    }
"#;

/// The 1.25 form, which nginx 1.22 does not know.
const HTTP2_ON: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        http2 on;
        http2_max_concurrent_streams 32;
        http2_chunk_size 16k;
        root {PREFIX}/html;
    }
"#;

fn docroot(server: &Server) {
    let html = server.path("html");
    fs::create_dir_all(html.join("dir")).expect("mkdir");
    fs::write(html.join("index.html"), "<html>index</html>\n").expect("write");
    let large: Vec<u8> = (0..LARGE_LEN).map(|i| (i % 251) as u8).collect();
    fs::write(html.join("large.bin"), large).expect("write");
    // One modification time everywhere, so both servers give the same ETag and Last-Modified.
    for name in ["index.html", "large.bin"] {
        let file = fs::File::options()
            .write(true)
            .open(html.join(name))
            .expect("open");
        file.set_modified(UNIX_EPOCH + Duration::from_secs(MTIME_SECS))
            .expect("set mtime");
    }
}

fn url(server: &Server, path: &str) -> String {
    format!("http://127.0.0.1:{}{path}", server.port(0))
}

/// The response with what differs between two servers by design replaced: the server's own
/// signature (its Server value) in error pages, and the multipart boundary, a counter.
fn neutral(r: &H2Response) -> H2Response {
    let mut body = String::from_utf8_lossy(&r.body).into_owned();
    let mut r = r.clone();
    if let Some(s) = r.header("server") {
        body = body.replace(s, "SERVER");
    }
    let boundary = r
        .header("content-type")
        .and_then(|t| t.split_once("boundary="))
        .map(|(_, b)| b.to_string());
    if let Some(b) = boundary {
        body = body.replace(&b, "BOUNDARY");
        for (n, v) in &mut r.headers {
            if n == "content-type" {
                *v = v.replace(&b, "BOUNDARY");
            }
        }
    }
    r.body = body.into_bytes();
    r
}

fn assert_same(what: &str, a: &H2Response, b: &H2Response) {
    let (a, b) = (neutral(a), neutral(b));
    assert_eq!(a.status, b.status, "{what}: status\n{a:?}\n{b:?}");
    assert_eq!(a.body, b.body, "{what}: body");
    for name in COMPARED {
        // A built-in page's length depends on the signature in it, compared above.
        if *name == "content-length" && a.status >= 300 && a.status != 304 {
            continue;
        }
        assert_eq!(a.header(name), b.header(name), "{what}: {name}");
    }
}

/// The requests every server answers alike, with the status nginx gives each.
fn cases() -> Vec<(&'static str, Vec<&'static str>, &'static str, u16)> {
    vec![
        ("static file", vec![], "/index.html", 200),
        ("HEAD", vec!["-I"], "/index.html", 200),
        ("404 error page", vec![], "/missing", 404),
        ("return 301", vec![], "/moved", 301),
        ("directory 301", vec![], "/dir", 301),
        ("range", vec!["-r", "100-199"], "/large.bin", 206),
        ("multi-range", vec!["-r", "0-1,5-6"], "/index.html", 206),
        ("large file", vec![], "/large.bin", 200),
        ("variables", vec!["-b", "a=1"], "/proto?x=1", 200),
        ("bad :path", vec!["--path-as-is"], "/../x", 400),
    ]
}

#[test]
fn http2_answers_as_nginx_and_as_http1() {
    let mut answers: Vec<Vec<H2Response>> = Vec::new();
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(LISTEN_HTTP2)) else {
            continue;
        };
        docroot(&server);
        let mut these = Vec::new();
        for (what, args, path, status) in cases() {
            let mut with_h2 = vec![H2];
            with_h2.extend(&args);
            let Some(r) = curl(&with_h2, &url(&server, path)) else {
                return;
            };
            assert_eq!(r.version, "2", "{kind} {what}");
            assert_eq!(r.status, status, "{kind} {what}: {r:?}");
            if kind == Kind::Portcullis && what != "bad :path" {
                // The same port serves HTTP/1.1 too, with the same answer.
                let h1 = curl(&args, &url(&server, path)).expect("curl ran before");
                assert_eq!(h1.version, "1.1", "{what}");
                let h1_body = String::from_utf8_lossy(&h1.body).replace("HTTP/1.1", "HTTP/2.0");
                let h1 = H2Response {
                    body: h1_body.into_bytes(),
                    ..h1
                };
                assert_same(&format!("{what} over HTTP/1.1"), &r, &h1);
            }
            these.push(r);
        }
        if kind == Kind::Portcullis {
            let large = &these[7];
            assert_eq!(large.body.len(), LARGE_LEN);
            assert!(large
                .body
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (i % 251) as u8));
            let proto = String::from_utf8_lossy(&these[8].body).into_owned();
            assert_eq!(proto, "HTTP/2.0|GET /proto?x=1 HTTP/2.0|a=1|127.0.0.1\n");
            assert!(these.iter().all(|r| r.header("connection").is_none()));
            let log = support::read_lossy(&server.access_log_path());
            assert!(
                log.contains("\"GET /index.html HTTP/2.0\" 200 19 "),
                "{log}"
            );
            assert!(
                log.contains("\"HEAD /index.html HTTP/2.0\" 200 0 "),
                "{log}"
            );
        }
        answers.push(these);
    }
    if let [nginx, portcullis] = &answers[..] {
        for ((what, ..), (a, b)) in cases().iter().zip(nginx.iter().zip(portcullis)) {
            let mut b = b.clone();
            if let (Some(x), Some(y)) = (a.header("location"), b.header("location")) {
                assert_eq!(
                    x.rsplit('/').next(),
                    y.rsplit('/').next(),
                    "{what}: location"
                );
            }
            b.headers.retain(|(n, _)| n != "location");
            assert_same(what, a, &b);
        }
    }
}

#[test]
fn body_limit_and_dropped_stream() {
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(LISTEN_HTTP2)) else {
            continue;
        };
        docroot(&server);
        let body = "x".repeat(4096);
        let Some(r) = curl(&[H2, "-d", &body], &url(&server, "/index.html")) else {
            return;
        };
        assert_eq!(r.status, 413, "{kind}");
        // 444 closes the stream without an answer: curl sees no response head.
        assert_eq!(curl(&[H2], &url(&server, "/drop")), None, "{kind}");
        let log = support::read_lossy(&server.access_log_path());
        assert!(
            log.contains("\"GET /drop HTTP/2.0\" 444 0"),
            "{kind}: {log}"
        );
    }
}

#[test]
fn http2_on_serves_both_protocols_on_one_port() {
    let server = Server::start(Kind::Portcullis, 1, &main_config(HTTP2_ON)).expect("portcullis");
    docroot(&server);
    let Some(h2) = curl(&[H2], &url(&server, "/index.html")) else {
        return;
    };
    assert_eq!((h2.version.as_str(), h2.status), ("2", 200));
    let h1 = curl(&[], &url(&server, "/index.html")).expect("curl");
    assert_eq!((h1.version.as_str(), h1.status), ("1.1", 200));
    assert_eq!(h1.body, h2.body);
    // A raw HTTP/1.1 request whose first bytes look like the preface but are not.
    let r = support::request(server.port(0), "PRI / HTTP/1.1\r\nHost: x\r\n\r\n").expect("read");
    assert_eq!(r.status, 405);
}

#[test]
fn too_large_header_list_is_refused() {
    let server = Server::start(Kind::Portcullis, 1, &main_config(LISTEN_HTTP2)).expect("start");
    docroot(&server);
    // Four 9000-byte fields: past the 4 x 8k of large_client_header_buffers.
    let value = "v".repeat(9000);
    let fields: Vec<String> = (0..4).map(|i| format!("X-F{i}: {value}")).collect();
    let mut args = vec![H2];
    for f in &fields {
        args.extend(["-H", f.as_str()]);
    }
    let Some(r) = curl(&args, &url(&server, "/index.html")) else {
        return;
    };
    assert_eq!(r.status, 431);
    // One such field fits, as in nginx, which bounds the fields only as a whole.
    let one = curl(
        &[H2, "-H", fields[0].as_str()],
        &url(&server, "/index.html"),
    );
    assert_eq!(one.map(|r| r.status), Some(200));
}

#[test]
fn many_concurrent_streams_without_errors() {
    let server = Server::start(Kind::Portcullis, 1, &main_config(HTTP2_ON)).expect("start");
    docroot(&server);
    let Some(load) = h2c::h2load(1000, 4, 10, &url(&server, "/index.html")) else {
        return;
    };
    assert_eq!(
        (load.succeeded, load.failed, load.errored),
        (1000, 0, 0),
        "{load:?}"
    );
    assert!(load.statuses.starts_with("1000 2xx"), "{load:?}");
    let Some(load) = h2c::h2load(40, 2, 20, &url(&server, "/large.bin")) else {
        return;
    };
    assert_eq!((load.succeeded, load.failed), (40, 0), "{load:?}");
}

#[test]
fn graceful_stop_lets_streams_finish() {
    let mut server = Server::start(Kind::Portcullis, 1, &main_config(HTTP2_ON)).expect("start");
    docroot(&server);
    let Some(curl_bin) = h2c::tool("curl") else {
        return;
    };
    let out = server.path("download");
    let mut download = Command::new(curl_bin)
        .args(["-s", H2, "--limit-rate", "1M", "-o"])
        .arg(&out)
        .arg(url(&server, "/large.bin"))
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn curl");
    // The stream is under way once its first bytes have arrived.
    let started = wait_until(Duration::from_secs(10), || {
        fs::metadata(&out).is_ok_and(|m| m.len() > 0)
    });
    assert!(started, "download did not start");
    server.signal(libc::SIGQUIT);
    let status = download.wait().expect("curl");
    assert!(status.success(), "curl: {status}");
    assert_eq!(
        fs::metadata(&out).map(|m| m.len()).ok(),
        Some(LARGE_LEN as u64)
    );
    assert!(server.wait_exit(EXIT_WAIT).is_some(), "server did not exit");
}

/// A plain HTTP/2 connection takes its settings from the address's default server, as
/// nginx's: here a named default server and a nameless one (which a request without a host
/// would reach) say different things, and the client's SETTINGS frame tells which was used.
#[test]
fn a_connection_has_the_default_servers_settings() {
    const CONFIG: &str = r#"
        server {
            listen 127.0.0.1:{PORT0} http2 default_server;
            server_name named;
            http2_max_concurrent_streams 7;
            return 200 "named\n";
        }
        server {
            listen 127.0.0.1:{PORT0} http2;
            http2_max_concurrent_streams 9;
            return 200 "nameless\n";
        }
    "#;
    let Some(nghttp) = h2c::tool("nghttp") else {
        support::skip("nghttp (nghttp2-client) is not installed");
        return;
    };
    let mut seen = Vec::new();
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(CONFIG)) else {
            continue;
        };
        let out = Command::new(&nghttp)
            .args(["-nv", &url(&server, "/")])
            .stderr(Stdio::null())
            .output()
            .expect("run nghttp");
        let text = String::from_utf8_lossy(&out.stdout);
        // The server's SETTINGS frames: the entries after a "recv SETTINGS frame" line.
        let mut received = false;
        let mut streams = Vec::new();
        for line in text.lines() {
            if line.contains(" SETTINGS frame") {
                received = line.contains("recv SETTINGS frame");
            }
            if let Some(v) = line.split("SETTINGS_MAX_CONCURRENT_STREAMS(0x03):").nth(1) {
                if received {
                    streams.push(v.trim().trim_end_matches(']').to_string());
                }
            }
        }
        let lines = vec![format!("max concurrent streams: {streams:?}")];
        if kind == Kind::Portcullis {
            support::expect_lines(&lines, &["max concurrent streams: [\"7\"]"]);
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
