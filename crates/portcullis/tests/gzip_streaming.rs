//! Compression of bodies that come over time or grow large: with `proxy_buffering off` what
//! the upstream sent reaches the client compressed before the upstream sends more (nginx
//! flushes its compressor for each piece), and `gunzip` of a body that decompresses a
//! thousandfold streams it in bounded pieces instead of holding it whole.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use support::{kinds, Kind, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        location /events {
            gzip on;
            gzip_min_length 1;
            proxy_buffering off;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /bomb {
            gunzip on;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
    }
"#;

/// An upstream for one request: the first event, then the second once `go` says so.
fn events_upstream(go: mpsc::Receiver<()>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
        let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
        let _ = s.write_all(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n{}",
                chunk("event 1\n")
            )
            .as_bytes(),
        );
        let _ = go.recv_timeout(Duration::from_secs(10));
        let _ = s.write_all(format!("{}0\r\n\r\n", chunk("event 2\n")).as_bytes());
    });
    port
}

/// Reads a chunked, gzip-compressed body from `r` until `want` is in what it decompresses
/// to, or the body ends; returns what it decompressed.
fn read_until(
    r: &mut BufReader<TcpStream>,
    inflate: &mut flate2::write::GzDecoder<Vec<u8>>,
    want: &str,
) -> String {
    loop {
        let text = String::from_utf8_lossy(inflate.get_ref()).to_string();
        if text.contains(want) {
            return text;
        }
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return text;
        }
        let n = usize::from_str_radix(line.trim(), 16).unwrap_or(0);
        if n == 0 {
            return text;
        }
        let mut data = vec![0; n + 2];
        if r.read_exact(&mut data).is_err() {
            return text;
        }
        inflate.write_all(&data[..n]).unwrap();
        let _ = inflate.flush();
    }
}

#[test]
fn unbuffered_proxy_compresses_each_piece_as_it_comes() {
    for kind in kinds() {
        let (go, wait) = mpsc::channel();
        let upstream = events_upstream(wait);
        let http = CONFIG.replace("{UPSTREAM}", &upstream.to_string());
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let mut s = TcpStream::connect(("127.0.0.1", server.port(0))).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /events HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut r = BufReader::new(s);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        assert!(head.contains("Content-Encoding: gzip"), "{kind}: {head}");
        let mut inflate = flate2::write::GzDecoder::new(Vec::new());
        // The second event is sent only once the first has arrived: a server that holds
        // the first in its compressor never shows it.
        let first = read_until(&mut r, &mut inflate, "event 1");
        assert!(
            first.contains("event 1"),
            "{kind}: the first event did not come before the second was sent"
        );
        go.send(()).unwrap();
        let all = read_until(&mut r, &mut inflate, "event 2");
        assert_eq!(all, "event 1\nevent 2\n", "{kind}");
    }
}

/// The peak of the process's resident memory, in kB.
fn peak_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn gunzip_streams_a_body_that_grows_a_thousandfold() {
    gunzip_bomb(false);
}

/// The same body in chunks of 64 bytes: many chunks decoded before one send.
#[test]
fn gunzip_streams_a_chunked_body_that_grows_a_thousandfold() {
    gunzip_bomb(true);
}

fn gunzip_bomb(chunked: bool) {
    const PLAIN: usize = 32 * 1024 * 1024;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    let zeros = vec![0u8; 1024 * 1024];
    for _ in 0..PLAIN / zeros.len() {
        e.write_all(&zeros).unwrap();
    }
    let bomb = e.finish().unwrap();
    assert!(bomb.len() < PLAIN / 500, "{}", bomb.len());
    let upstream = support::head_upstream(move |_, _| {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\n";
        if chunked {
            let mut out = format!("{head}Transfer-Encoding: chunked\r\n\r\n").into_bytes();
            for piece in bomb.chunks(64) {
                out.extend(format!("{:x}\r\n", piece.len()).into_bytes());
                out.extend_from_slice(piece);
                out.extend(b"\r\n");
            }
            out.extend(b"0\r\n\r\n");
            return out;
        }
        let mut out = format!("{head}Content-Length: {}\r\n\r\n", bomb.len()).into_bytes();
        out.extend_from_slice(&bomb);
        out
    });
    let http = CONFIG.replace("{UPSTREAM}", &upstream.to_string());
    let server = Server::start(Kind::Portcullis, 1, &support::main_config(&http)).unwrap();
    let before = peak_kb(server.pid());
    let mut s = TcpStream::connect(("127.0.0.1", server.port(0))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(b"GET /bomb HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut total = 0usize;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n,
            Err(e) => panic!("read: {e}"),
        }
    }
    // The head and the chunk framing come on top of the body.
    assert!(total > PLAIN, "{total} bytes for {PLAIN}");
    let grown = peak_kb(server.pid()).saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "the server grew by {grown} kB to send a {PLAIN}-byte body"
    );
}
