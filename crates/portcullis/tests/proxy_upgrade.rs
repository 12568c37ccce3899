//! Reverse proxy, black box: a 101 answer to an upgrade request turns the connection into a
//! byte tunnel both ways, closed when a side closes or nothing moves for proxy_read_timeout.

mod support;
#[path = "support/proxy.rs"]
mod upstreams;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::Server;
use upstreams::{Reply, Upstream};

/// How long a close may take to show.
const WAIT: Duration = Duration::from_secs(5);
/// proxy_read_timeout of the tunnel in the configuration below.
const IDLE: Duration = Duration::from_secs(1);

const UPGRADE: &str =
    "GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";

fn config(up: &Upstream) -> String {
    support::main_config(&format!(
        "    upstream b {{ server {}; keepalive 4; }}\n\
         server {{\n    listen 127.0.0.1:{{PORT0}};\n    server_name localhost;\n\
         location / {{ proxy_pass http://b; proxy_http_version 1.1;\n\
         proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection \"upgrade\";\n\
         proxy_read_timeout 1s; }}\n}}\n",
        up.addr()
    ))
}

/// An upstream that switches protocols when asked and then echoes.
fn echo_upstream() -> Upstream {
    Upstream::start(|x| {
        if x.header("upgrade") == Some("websocket") && x.header("connection") == Some("upgrade") {
            Reply::Tunnel(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
                    .to_vec(),
            )
        } else {
            Reply::Send(upstreams::ok("no upgrade", ""))
        }
    })
}

/// Connects, upgrades, and returns the socket with the 101 head read.
fn upgraded(port: u16) -> (TcpStream, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    // The first tunnel bytes ride with the request: they must not be lost.
    s.write_all(format!("{UPGRADE}early").as_bytes())
        .expect("send");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            other => panic!(
                "no 101 head: {other:?} after {:?}",
                String::from_utf8_lossy(&head)
            ),
        }
    }
    (s, String::from_utf8_lossy(&head).into_owned())
}

fn read_exact(s: &mut TcpStream, n: usize) -> String {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf).expect("echo");
    String::from_utf8_lossy(&buf).into_owned()
}

/// True when the peer closes within `wait`.
fn closes(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).expect("timeout");
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(0) | Err(_)) && s.read(&mut buf).map_or(true, |n| n == 0)
}

#[test]
fn websocket_upgrade_tunnels_both_ways() {
    let up = echo_upstream();
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &config(&up)) else {
            continue;
        };
        let (mut s, head) = upgraded(server.port(0));
        assert!(head.starts_with("HTTP/1.1 101 "), "{kind}: {head}");
        assert!(
            head.contains("\r\nUpgrade: websocket\r\n"),
            "{kind}: {head}"
        );
        assert!(
            head.contains("\r\nConnection: upgrade\r\n"),
            "{kind}: {head}"
        );
        assert_eq!(read_exact(&mut s, 5), "early", "{kind}");
        for msg in ["ping", "a longer message"] {
            s.write_all(msg.as_bytes()).expect("send");
            assert_eq!(read_exact(&mut s, msg.len()), msg, "{kind}");
        }
        // The client closing ends the tunnel on the upstream side too.
        let closed = up.closed();
        s.shutdown(std::net::Shutdown::Write).expect("shutdown");
        assert!(closes(&mut s, WAIT), "{kind}");
        assert!(support::wait_until(WAIT, || up.closed() > closed), "{kind}");
        // $body_bytes_sent counts what the tunnel carried to the client: 5 + 4 + 16.
        let access = server.access_log_path();
        assert!(
            support::wait_until(WAIT, || support::read_lossy(&access)
                .contains("\"GET /ws HTTP/1.1\" 101 25 ")),
            "{kind}: {}",
            support::read_lossy(&access)
        );
        // An idle tunnel is closed after proxy_read_timeout.
        let (mut s, _) = upgraded(server.port(0));
        assert_eq!(read_exact(&mut s, 5), "early", "{kind}");
        let start = Instant::now();
        assert!(closes(&mut s, IDLE + WAIT), "{kind}");
        assert!(
            start.elapsed() >= IDLE - Duration::from_millis(100),
            "{kind}"
        );
        // Without an upgrade request the same location answers as usual.
        let r = support::get(server.port(0), "/plain").expect("response");
        assert_eq!(r.body_text(), "no upgrade", "{kind}");
    }
}
