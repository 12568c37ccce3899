//! `listen ... proxy_protocol`, compared with nginx: PROXY protocol headers of version 1
//! and 2 (IPv4, IPv6, `UNKNOWN`, `LOCAL`, TLVs) read before the request, the
//! `$proxy_protocol_*` variables, `real_ip_header proxy_protocol`, broken headers closing
//! the connection with nginx's log lines, a keepalive connection reading its header once,
//! and the header before a TLS handshake and before HTTP/2 (curl's `--haproxy-protocol`).

#[path = "support/h2c.rs"]
#[allow(dead_code)]
mod h2c;
mod support;
#[path = "support/tls.rs"]
#[allow(dead_code)]
mod tls_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use support::{kinds, Server};
use tls_support::{openssl_available, KeyKind, Pki};

const SHOW: &str = "pa=$proxy_protocol_addr pp=$proxy_protocol_port \
                    sa=$proxy_protocol_server_addr sp=$proxy_protocol_server_port \
                    ra=$remote_addr rr=$realip_remote_addr";

fn config(tls: &str) -> String {
    format!(
        r#"
    server {{
        listen 127.0.0.1:{{PORT0}} proxy_protocol;
        location / {{ return 200 "{SHOW}\n"; }}
    }}
    server {{
        listen 127.0.0.1:{{PORT1}} proxy_protocol;
        set_real_ip_from 127.0.0.1;
        real_ip_header proxy_protocol;
        location / {{ return 200 "{SHOW} rp=$remote_port\n"; }}
    }}
    # One server of two names the parameter: the address reads the header for both.
    server {{
        listen 127.0.0.1:{{PORT2}};
        server_name other;
        location / {{ return 200 "other {SHOW}\n"; }}
    }}
    server {{
        listen 127.0.0.1:{{PORT2}} proxy_protocol;
        server_name third;
        location / {{ return 200 "third {SHOW}\n"; }}
    }}
    # A larger first read takes a larger header.
    server {{
        listen 127.0.0.1:{{PORT4}} proxy_protocol;
        client_header_buffer_size 4k;
        location / {{ return 200 "{SHOW}\n"; }}
    }}
    server {{
        listen 127.0.0.1:{{PORT3}} http2 proxy_protocol;
        location / {{ return 200 "h2 {SHOW}\n"; }}
    }}
    {tls}
"#
    )
}

/// `text` with the ports called `keys`, which differ from run to run, masked.
fn masked(text: &str, keys: &[&str]) -> String {
    text.split(' ')
        .map(|w| match w.split_once('=') {
            Some((k, v)) if keys.contains(&k) && !v.is_empty() => format!("{k}=N"),
            _ => w.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn v2(version_command: u8, family_transport: u8, body: &[u8]) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend([version_command, family_transport]);
    h.extend((body.len() as u16).to_be_bytes());
    h.extend(body);
    h
}

/// What a connection that sends `bytes` gets back before the server closes it.
fn exchange(port: u16, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    // The status lines and bodies, without dates and server names.
    text.lines()
        .filter(|l| l.starts_with("HTTP/") || l.contains("pa="))
        .collect::<Vec<_>>()
        .join(" | ")
}

#[test]
fn proxy_protocol_read_as_nginx_reads_it() {
    let inet = [9, 8, 7, 6, 1, 2, 3, 4, 0x11, 0x5c, 0, 80];
    let mut inet6 = vec![0; 15];
    inet6.push(1);
    inet6.extend([0x20, 1]);
    inet6.extend([0; 13]);
    inet6.push(2);
    // Ports 5 and 6, then a NOOP TLV.
    inet6.extend([0, 5, 0, 6, 4, 0, 2, 0, 0]);
    let get = b"GET / HTTP/1.0\r\nHost: x\r\n\r\n".to_vec();
    let with = |header: &[u8]| [header, &get].concat();
    let cases: Vec<(&str, usize, Vec<u8>)> = vec![
        ("v1", 0, with(b"PROXY TCP4 1.2.3.4 5.6.7.8 1111 2222\r\n")),
        ("v1 v6 port 0", 0, with(b"PROXY TCP6 ::1 ::2 0 2222\r\n")),
        ("v1 unknown", 0, with(b"PROXY UNKNOWN whatever\r\n")),
        ("v2", 0, with(&v2(0x21, 0x11, &inet))),
        ("v2 v6 tlv", 0, with(&v2(0x21, 0x21, &inet6))),
        ("v2 local", 0, with(&v2(0x20, 0x00, &[]))),
        ("v2 udp", 0, with(&v2(0x21, 0x12, &inet))),
        ("no header", 0, get.clone()),
        (
            "bad address",
            0,
            with(b"PROXY TCP4 1.2.3.x 5.6.7.8 1 2\r\n"),
        ),
        (
            "bad port",
            0,
            with(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 70000\r\n"),
        ),
        ("v3", 0, with(&v2(0x31, 0x11, &inet))),
        ("too large", 0, {
            let mut h = v2(0x21, 0x11, &inet);
            h[15] = 200;
            with(&h)
        }),
        ("short v2", 0, with(&v2(0x21, 0x11, &inet[..4]))),
        (
            "realip",
            1,
            with(b"PROXY TCP4 1.2.3.4 5.6.7.8 1111 2222\r\n"),
        ),
        ("realip v2", 1, with(&v2(0x21, 0x11, &inet))),
        ("realip v6", 1, with(&v2(0x21, 0x21, &inet6))),
        (
            "realip unreadable",
            1,
            with(b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n"),
        ),
        ("realip unknown", 1, with(b"PROXY UNKNOWN\r\n")),
        (
            "shared address",
            2,
            with(b"PROXY TCP4 1.2.3.4 5.6.7.8 1111 2222\r\n"),
        ),
        ("shared address without", 2, get.clone()),
    ];
    // IPv4 in the last 32 bits, as nginx writes it.
    let mut compat = vec![0; 12];
    compat.extend([1, 2, 3, 4]);
    compat.extend([0; 15]);
    compat.extend([1, 0, 7, 0, 8]);
    // A TLV longer than a 1 KB first read.
    let mut long_tlv = inet.to_vec();
    long_tlv.extend([4, 0x05, 0xdc]);
    long_tlv.extend([0; 1500]);
    let cases: Vec<(&str, usize, Vec<u8>)> = cases
        .into_iter()
        .chain([
            ("v2 v4 in v6", 0, with(&v2(0x21, 0x21, &compat))),
            ("long tlv", 0, with(&v2(0x21, 0x11, &long_tlv))),
            (
                "long tlv, 4k first read",
                4,
                with(&v2(0x21, 0x11, &long_tlv)),
            ),
        ])
        .collect();
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 5, &support::main_config(&config(""))) else {
            continue;
        };
        // A client that leaves before its header.
        drop(TcpStream::connect(("127.0.0.1", server.port(0))).unwrap());
        let mut lines = Vec::new();
        for (name, port, bytes) in &cases {
            // The connection's own port, where realip left it.
            let got = exchange(server.port(*port), bytes);
            let got = match got.contains("ra=127.0.0.1") {
                true => masked(&got, &["rp"]),
                false => got,
            };
            lines.push(format!("{name}: {got}"));
        }
        // Keepalive: the header comes once, before the first request.
        let mut c = support::Client::connect(server.port(0));
        c.send(b"PROXY TCP4 10.0.0.1 10.0.0.2 40000 80\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let first = c.read_response(false).unwrap();
        c.send(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let second = c.read_response(false).unwrap();
        lines.push(format!(
            "keepalive: {} {} | {} {}",
            first.status,
            first.body_text().trim(),
            second.status,
            second.body_text().trim()
        ));
        // HTTP/2 with prior knowledge after the header.
        let url = format!("http://127.0.0.1:{}/", server.port(3));
        if let Some(r) = h2c::curl(&["--haproxy-protocol", "--http2-prior-knowledge"], &url) {
            lines.push(format!(
                "h2: {} {} {}",
                r.version,
                r.status,
                masked(String::from_utf8_lossy(&r.body).trim(), &["pp", "sp"])
            ));
        }
        // What each broken header logged.
        let log = server.error_log();
        let mut logged: Vec<String> = log
            .lines()
            .filter(|l| l.contains("[error]") || l.contains("while reading PROXY protocol"))
            .filter_map(|l| l.split_once(": *").map(|(_, rest)| rest))
            .map(|rest| rest.split_once(' ').map_or(rest, |(_, m)| m))
            .map(|m| m.split(", server: ").next().unwrap_or(m).to_owned())
            .collect();
        logged.sort();
        logged.dedup();
        lines.extend(logged.into_iter().map(|l| format!("log: {l}")));
        if kind == support::Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "v1: HTTP/1.1 200 OK | pa=1.2.3.4 pp=1111 sa=5.6.7.8 sp=2222 ra=127.0.0.1 rr=127.0.0.1",
                    "realip: HTTP/1.1 200 OK | pa=1.2.3.4 pp=1111 sa=5.6.7.8 sp=2222 ra=1.2.3.4 rr=127.0.0.1 rp=1111",
                    "no header: \nbad address",
                    "log: broken header: \"GET / HTTP/1.0",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// The header before a TLS handshake: curl sends it, then the handshake and the request.
#[test]
fn proxy_protocol_comes_before_tls_as_in_nginx() {
    if !openssl_available() {
        support::skip("the openssl command is not installed");
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let tls = format!(
        r#"server {{
        listen 127.0.0.1:{{PORT5}} ssl proxy_protocol;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_certificate {};
        ssl_certificate_key {};
        location / {{ return 200 "tls $ssl_protocol {SHOW}\n"; }}
    }}"#,
        pair.cert.display(),
        pair.key.display()
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 6, &support::main_config(&config(&tls))) else {
            continue;
        };
        let mut lines = Vec::new();
        let url = format!("https://127.0.0.1:{}/", server.port(5));
        for args in [
            &["-k", "--haproxy-protocol"][..],
            &["-k", "--haproxy-protocol", "--http2"],
        ] {
            if let Some(r) = h2c::curl(args, &url) {
                lines.push(format!(
                    "{args:?}: {} {} {}",
                    r.version,
                    r.status,
                    masked(String::from_utf8_lossy(&r.body).trim(), &["pp", "sp"])
                ));
            }
        }
        // A handshake with no header first is a broken header.
        let mut s = TcpStream::connect(("127.0.0.1", server.port(5))).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"\x16\x03\x01\x00\x05hello").unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        lines.push(format!("no header: {} bytes back", out.len()));
        if kind == support::Kind::Portcullis {
            support::expect_lines(
                &lines,
                &["\"--haproxy-protocol\"]: 1.1 200 tls TLSv1.3 pa=127.0.0.1 pp=N sa=127.0.0.1 sp=N"],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
