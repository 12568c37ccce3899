//! HTTP/2 requests to `proxy_pass` locations against the real binary, over h2c and over TLS
//! with ALPN h2: files from an HTTP/1.1 upstream (a plain server block of the same
//! configuration) byte for byte, request bodies echoed by a tiny upstream started by the test,
//! chunked and close-delimited upstream bodies, a dead upstream, and many concurrent streams.

mod support;

#[path = "support/h2c.rs"]
mod h2c;
// Only the certificate helpers are used here.
#[allow(dead_code)]
#[path = "support/tls.rs"]
mod tls_support;

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use h2c::curl;
use support::{main_config, wait_until, Kind, Server};
use tls_support::{openssl_available, KeyKind, Pki};

const H2: &str = "--http2-prior-knowledge";
const SMALL_LEN: usize = 1024;
const LARGE_LEN: usize = 1024 * 1024;
/// A request body larger than a stream's initial window, so its window must be given back.
const POST_LEN: usize = 200 * 1024;
/// How long an access log line may take to be written.
const LOG_DEADLINE: Duration = Duration::from_secs(5);

/// `{PORT0}`: h2c proxy; `{PORT1}`: the HTTP/1.1 file server upstream; `{PORT2}`: TLS proxy.
/// ECHO and DEAD are replaced by the echo upstream's port and a port nobody listens on.
const CONFIG: &str = r#"
    log_format up '$request $status $body_bytes_sent $upstream_addr $upstream_status';
    client_max_body_size 1m;
    server {
        listen 127.0.0.1:{PORT1};
        root {PREFIX}/html;
    }
    server {
        listen 127.0.0.1:{PORT0} http2;
        access_log {PREFIX}/up.log up;
        location / { proxy_pass http://127.0.0.1:{PORT1}; }
        location /echo/ { proxy_pass http://127.0.0.1:ECHO; }
        location /chunked/ { proxy_pass http://127.0.0.1:ECHO; proxy_http_version 1.1; }
        location /close/ { proxy_pass http://127.0.0.1:ECHO; }
        location /cut/ { proxy_pass http://127.0.0.1:ECHO; }
        location /stall/ { proxy_pass http://127.0.0.1:ECHO; proxy_http_version 1.1; }
        location /dead/ { proxy_pass http://127.0.0.1:DEAD; }
        location /small/ { proxy_pass http://127.0.0.1:ECHO; client_max_body_size 1k; }
    }
    server {
        listen 127.0.0.1:{PORT2} ssl http2;
        ssl_certificate CERT;
        ssl_certificate_key KEY;
        location / { proxy_pass http://127.0.0.1:{PORT1}; }
        location /echo/ { proxy_pass http://127.0.0.1:ECHO; }
    }
"#;

/// Bytes that show any reordering or loss.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Reads one request from `conn`: its path and its body (Content-Length framed).
fn read_request(conn: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut data = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let path = head.split_whitespace().nth(1)?.to_string();
    let length: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = data[head_end..].to_vec();
    while body.len() < length {
        let n = conn.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Some((path, body))
}

/// Answers `/echo/` with the request body, `/chunked/` with it between two more chunks,
/// `/close/` with it and no length, closing the connection to end it; `/cut/` promises 100
/// bytes and closes after 10; `/stall/` sends one chunk and then waits for the proxy to close.
fn answer(mut conn: TcpStream) {
    let Some((path, body)) = read_request(&mut conn) else {
        return;
    };
    let mut out = Vec::new();
    if path.starts_with("/cut/") {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
    } else if path.starts_with("/stall/") {
        let _ =
            conn.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst|\r\n");
        let _ = conn.read(&mut [0; 1]);
        return;
    } else if path.starts_with("/chunked/") {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        for part in [&b"first|"[..], &body, b"|last"] {
            if !part.is_empty() {
                out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                out.extend_from_slice(part);
                out.extend_from_slice(b"\r\n");
            }
        }
        out.extend_from_slice(b"0\r\n\r\n");
    } else if path.starts_with("/close/") {
        out.extend_from_slice(b"HTTP/1.0 200 OK\r\nX-Upstream: close\r\n\r\n");
        out.extend_from_slice(&body);
    } else {
        out.extend_from_slice(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        out.extend_from_slice(&body);
    }
    let _ = conn.write_all(&out);
}

/// Starts the echo upstream on a free port; its threads end with the test process.
fn echo_upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind echo");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || answer(conn));
        }
    });
    port
}

/// A port that refuses connections.
fn dead_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// The proxy with its upstreams and files, and the directory of its certificate (kept for
/// as long as the server runs), or `None` when openssl is missing.
fn start() -> Option<(Server, Pki)> {
    if !openssl_available() {
        support::skip("the openssl command is not installed");
        return None;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("proxy", KeyKind::P256, "localhost");
    let config = CONFIG
        .replace("ECHO", &echo_upstream().to_string())
        .replace("DEAD", &dead_port().to_string())
        .replace("CERT", &pair.cert.display().to_string())
        .replace("KEY", &pair.key.display().to_string());
    let server = Server::start(Kind::Portcullis, 3, &main_config(&config))?;
    let html = server.path("html");
    fs::create_dir_all(&html).expect("mkdir");
    fs::write(html.join("small.bin"), pattern(SMALL_LEN)).expect("write");
    fs::write(html.join("large.bin"), pattern(LARGE_LEN)).expect("write");
    Some((server, pki))
}

fn h2c_url(server: &Server, path: &str) -> String {
    format!("http://127.0.0.1:{}{path}", server.port(0))
}

fn tls_url(server: &Server, path: &str) -> String {
    format!("https://127.0.0.1:{}{path}", server.port(2))
}

/// Waits for an access log line of `up.log` containing `needle`.
fn logged(server: &Server, needle: &str) -> bool {
    wait_until(LOG_DEADLINE, || {
        support::read_lossy(&server.path("up.log")).contains(needle)
    })
}

#[test]
fn files_come_through_byte_for_byte() {
    let Some((server, _pki)) = start() else {
        return;
    };
    for (path, len) in [("/small.bin", SMALL_LEN), ("/large.bin", LARGE_LEN)] {
        let r = curl(&[H2], &h2c_url(&server, path)).expect("response");
        assert_eq!((r.version.as_str(), r.status), ("2", 200), "{path}");
        assert_eq!(r.body.len(), len, "{path}");
        assert!(r.body == pattern(len), "{path}: body differs");
        assert_eq!(r.header("content-length"), Some(len.to_string().as_str()));
        assert!(r.header("connection").is_none(), "{r:?}");
        assert!(r.header("last-modified").is_some(), "{r:?}");
    }
    let up = format!("127.0.0.1:{}", server.port(1));
    assert!(
        logged(
            &server,
            &format!("GET /large.bin HTTP/2.0 200 {LARGE_LEN} {up} 200")
        ),
        "{}",
        server.logs()
    );
    // HEAD: the upstream's length, no body.
    let r = curl(&[H2, "-I"], &h2c_url(&server, "/large.bin")).expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-length"),
        Some(LARGE_LEN.to_string().as_str())
    );
    // The upstream's own 404 passes through.
    let r = curl(&[H2], &h2c_url(&server, "/missing")).expect("response");
    assert_eq!(r.status, 404);
    assert!(String::from_utf8_lossy(&r.body).contains("404 Not Found"));
}

#[test]
fn request_bodies_reach_the_upstream() {
    let Some((server, _pki)) = start() else {
        return;
    };
    let body = pattern(POST_LEN);
    let file = server.path("post.bin");
    fs::write(&file, &body).expect("write");
    let data = format!("@{}", file.display());
    for path in ["/echo/x", "/close/x"] {
        let r = curl(&[H2, "--data-binary", &data], &h2c_url(&server, path)).expect("response");
        assert_eq!((r.version.as_str(), r.status), ("2", 200), "{path}");
        assert!(r.body == body, "{path}: {} bytes back", r.body.len());
    }
    let r = curl(
        &[H2, "--data-binary", "middle"],
        &h2c_url(&server, "/chunked/x"),
    )
    .expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"first|middle|last");
    assert!(r.header("transfer-encoding").is_none(), "{r:?}");
    // A GET without a body reaches the upstream without one.
    let r = curl(&[H2], &h2c_url(&server, "/echo/empty")).expect("response");
    assert_eq!((r.status, r.body.len()), (200, 0));
}

/// Sends `file` as a body of unknown length (curl reading standard input), returning the
/// status and the body.
fn post_unknown_length(url: &str, file: &std::path::Path) -> Option<(u16, Vec<u8>)> {
    let curl = h2c::tool("curl")?;
    let out = Command::new(curl)
        .args(["-s", "--max-time", "10", H2, "-X", "POST", "-T", "-"])
        .args(["-w", "\n%{http_code}"])
        .arg(url)
        .stdin(Stdio::from(fs::File::open(file).expect("open")))
        .output()
        .expect("run curl");
    let text = out.stdout;
    let split = text.iter().rposition(|&b| b == b'\n')?;
    let status = String::from_utf8_lossy(&text[split + 1..]).parse().ok()?;
    Some((status, text[..split].to_vec()))
}

#[test]
fn bodies_of_unknown_length() {
    let Some((server, _pki)) = start() else {
        return;
    };
    let body = pattern(POST_LEN);
    let file = server.path("post.bin");
    fs::write(&file, &body).expect("write");
    let (status, back) =
        post_unknown_length(&h2c_url(&server, "/echo/x"), &file).expect("response");
    assert_eq!(status, 200);
    assert!(back == body, "{} bytes back", back.len());
    // Past client_max_body_size as it arrives.
    let small = server.path("small.bin");
    fs::write(&small, pattern(4096)).expect("write");
    let (status, _) = post_unknown_length(&h2c_url(&server, "/small/x"), &small).expect("response");
    assert_eq!(status, 413);
    assert!(
        server
            .error_log()
            .contains("client intended to send too large chunked body: "),
        "{}",
        server.error_log()
    );
}

#[test]
fn too_large_body_is_refused() {
    let Some((server, _pki)) = start() else {
        return;
    };
    // Small enough to fit in the stream's window: the client has sent it all when refused.
    let file = server.path("big.bin");
    fs::write(&file, pattern(4096)).expect("write");
    let data = format!("@{}", file.display());
    let r = curl(&[H2, "--data-binary", &data], &h2c_url(&server, "/small/x")).expect("response");
    assert_eq!(r.status, 413);
    assert!(server
        .error_log()
        .contains("client intended to send too large body: 4096 bytes"));
}

#[test]
fn dead_upstream_is_502() {
    let Some((server, _pki)) = start() else {
        return;
    };
    let r = curl(&[H2], &h2c_url(&server, "/dead/x")).expect("response");
    assert_eq!((r.version.as_str(), r.status), ("2", 502));
    assert!(String::from_utf8_lossy(&r.body).contains("502 Bad Gateway"));
    assert!(
        server.error_log().contains("connect() failed"),
        "{}",
        server.error_log()
    );
    assert!(
        logged(&server, "GET /dead/x HTTP/2.0 502"),
        "{}",
        server.logs()
    );
}

/// Runs curl over h2c on `url` within `max_time` seconds: its exit code, the head and the
/// body it got.
fn curl_exit(url: &str, max_time: &str) -> Option<(i32, String, Vec<u8>)> {
    let curl = h2c::tool("curl")?;
    let dir = support::TempDir::new("curl");
    let (head, body) = (dir.path().join("head"), dir.path().join("body"));
    let status = Command::new(curl)
        .args(["-s", "--max-time", max_time, H2, "-D"])
        .arg(&head)
        .arg("-o")
        .arg(&body)
        .arg(url)
        .status()
        .expect("run curl");
    Some((
        status.code()?,
        support::read_lossy(&head),
        fs::read(&body).unwrap_or_default(),
    ))
}

#[test]
fn an_upstream_body_cut_short_resets_the_stream() {
    let Some((server, _pki)) = start() else {
        return;
    };
    let (code, head, body) = curl_exit(&h2c_url(&server, "/cut/x"), "10").expect("response");
    // 92: the stream was reset, not ended; a complete stream would exit 0. The frames still
    // queued for a reset stream are dropped, so the client may see nothing of it.
    assert_eq!(code, 92, "{head}");
    assert!(body.len() < 100, "{} bytes", body.len());
    assert!(
        server
            .error_log()
            .contains("upstream prematurely closed connection while reading upstream"),
        "{}",
        server.error_log()
    );
}

#[test]
fn a_streamed_body_goes_out_as_it_comes() {
    let Some((server, _pki)) = start() else {
        return;
    };
    // The upstream holds the rest back until the proxy gives up on it: what came first
    // reached the client before the end.
    let (code, head, body) = curl_exit(&h2c_url(&server, "/stall/x"), "2").expect("response");
    assert_eq!(code, 28, "curl timed out: {head}");
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert_eq!(body, b"first|");
}

#[test]
fn over_tls_with_alpn_h2() {
    let Some((server, _pki)) = start() else {
        return;
    };
    let r = curl(&["-k", "--http2"], &tls_url(&server, "/large.bin")).expect("response");
    assert_eq!((r.version.as_str(), r.status), ("2", 200));
    assert!(r.body == pattern(LARGE_LEN), "body differs");
    let r = curl(
        &["-k", "--http2", "--data-binary", "over tls"],
        &tls_url(&server, "/echo/x"),
    )
    .expect("response");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"over tls"[..]));
    let Some(load) = h2c::h2load(500, 2, 10, &tls_url(&server, "/small.bin")) else {
        return;
    };
    assert_eq!(
        (load.succeeded, load.failed, load.errored),
        (500, 0, 0),
        "{load:?}"
    );
}

#[test]
fn many_concurrent_streams_without_errors() {
    let Some((server, _pki)) = start() else {
        return;
    };
    let Some(load) = h2c::h2load(2000, 4, 10, &h2c_url(&server, "/small.bin")) else {
        return;
    };
    assert_eq!(
        (load.succeeded, load.failed, load.errored),
        (2000, 0, 0),
        "{load:?}"
    );
    assert!(load.statuses.starts_with("2000 2xx"), "{load:?}");
}
