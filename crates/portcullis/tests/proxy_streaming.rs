//! Reverse proxy, black box: `proxy_request_buffering off` sends the request body to the
//! upstream as it arrives (a chunked one re-chunked to an HTTP/1.1 upstream), and never
//! sends such a request to a second peer.

mod support;
#[path = "support/proxy.rs"]
mod upstreams;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use support::{Client, Server};
use upstreams::{ok, Reply, Upstream};

/// How long a byte may take to cross the proxy.
const WAIT: Duration = Duration::from_secs(5);

fn config(upstream: &str, location: &str) -> String {
    support::main_config(&format!(
        "    {upstream}\n\
         server {{\n    listen 127.0.0.1:{{PORT0}};\n    server_name localhost;\n\
         location / {{ {location} }}\n}}\n"
    ))
}

/// Reads from `s` until `buf` contains `needle`; false if the peer stops first.
fn read_until(s: &mut TcpStream, buf: &mut Vec<u8>, needle: &[u8]) -> bool {
    let mut chunk = [0u8; 4096];
    while !buf.windows(needle.len()).any(|w| w == needle) {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    true
}

#[test]
fn bodies_stream_to_the_upstream_as_they_arrive() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let up = listener.local_addr().expect("addr");
    let conf = config(
        &format!("upstream b {{ server {up}; }}"),
        "proxy_pass http://b; proxy_http_version 1.1; proxy_request_buffering off;",
    );
    let cases = [
        (
            "Content-Length: 10\r\n",
            ["first", "-last"],
            "Content-Length: 10\r\n",
            ["\r\n\r\nfirst", "first-last"],
        ),
        (
            "Transfer-Encoding: chunked\r\n",
            ["5\r\nfirst\r\n", "5\r\n-last\r\n0\r\n\r\n"],
            "Transfer-Encoding: chunked\r\n",
            ["5\r\nfirst\r\n", "5\r\n-last\r\n0\r\n\r\n"],
        ),
    ];
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &conf) else {
            continue;
        };
        for (framing, parts, sent_framing, seen) in &cases {
            let mut c = Client::connect(server.port(0));
            c.send(
                format!(
                    "PUT / HTTP/1.1\r\nHost: localhost\r\n{framing}\r\n{}",
                    parts[0]
                )
                .as_bytes(),
            )
            .expect("send");
            let (mut s, _) = listener.accept().expect("accept");
            s.set_read_timeout(Some(WAIT)).expect("timeout");
            let mut got = Vec::new();
            // The first part arrives while the client still holds the rest back.
            assert!(
                read_until(&mut s, &mut got, seen[0].as_bytes()),
                "{kind} {framing}: {}",
                String::from_utf8_lossy(&got)
            );
            let text = String::from_utf8_lossy(&got).into_owned();
            assert!(text.contains(sent_framing), "{kind}: {text}");
            c.send(parts[1].as_bytes()).expect("send");
            assert!(
                read_until(&mut s, &mut got, seen[1].as_bytes()),
                "{kind} {framing}: {}",
                String::from_utf8_lossy(&got)
            );
            s.write_all(&ok("done", "Connection: close\r\n"))
                .expect("answer");
            let r = c.read_response(false).expect("response");
            assert_eq!(r.body_text(), "done", "{kind}");
        }
    }
}

#[test]
fn a_streamed_request_is_not_retried() {
    let live = Upstream::start(|_| Reply::Send(ok("live", "")));
    let dying = Upstream::start(|_| Reply::SendClose(Vec::new()));
    let group = format!(
        "upstream b {{ server {} max_fails=0; server {} max_fails=0; }}",
        live.addr(),
        dying.addr()
    );
    let conf = config(
        &group,
        "proxy_pass http://b; proxy_request_buffering off; } location /buffered/ { proxy_pass http://b;",
    );
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &conf) else {
            continue;
        };
        // The body's last bytes wait until the proxy has connected: nginx reads a body
        // that came whole with the head before sending, as if buffered.
        let put = |path: &str| {
            let mut c = Client::connect(server.port(0));
            let before = live.conns() + dying.conns();
            c.send(format!("PUT {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\nConnection: close\r\n\r\na").as_bytes())
                .expect("send");
            if path == "/s" {
                assert!(support::wait_until(WAIT, || live.conns() + dying.conns() > before));
            }
            c.send(b"bc").expect("send");
            c.read_response(false).expect("response").status
        };
        let streamed: Vec<u16> = (0..4).map(|_| put("/s")).collect();
        assert!(streamed.contains(&502), "{kind}: {streamed:?}");
        assert!(streamed.contains(&200), "{kind}: {streamed:?}");
        let buffered: Vec<u16> = (0..4).map(|_| put("/buffered/")).collect();
        assert_eq!(
            buffered, [200; 4],
            "{kind}: a buffered PUT moves to the live peer"
        );
    }
}

#[test]
fn expect_continue_is_answered_before_the_body() {
    let up = Upstream::start(|x| Reply::Send(ok(&String::from_utf8_lossy(&x.body), "")));
    for buffering in ["on", "off"] {
        let conf = config(
            &format!("upstream b {{ server {}; }}", up.addr()),
            &format!(
                "proxy_pass http://b; proxy_http_version 1.1; proxy_request_buffering {buffering};"
            ),
        );
        for kind in support::kinds() {
            let Some(server) = Server::start(kind, 1, &conf) else {
                continue;
            };
            let mut s = TcpStream::connect(("127.0.0.1", server.port(0))).expect("connect");
            s.set_read_timeout(Some(WAIT)).expect("timeout");
            s.write_all(b"PUT / HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
                .expect("send");
            let mut got = Vec::new();
            assert!(
                read_until(&mut s, &mut got, b"HTTP/1.1 100 Continue\r\n\r\n"),
                "{kind} {buffering}: {}",
                String::from_utf8_lossy(&got)
            );
            s.write_all(b"hello").expect("body");
            assert!(read_until(&mut s, &mut got, b"hello"), "{kind} {buffering}");
        }
    }
}
