//! Timeouts, black box, against nginx and portcullis alike: an idle keepalive connection
//! closes after keepalive_timeout, one that keeps sending requests does not, a head that stops
//! half way closes after client_header_timeout, and a pooled upstream connection used by a
//! location with a shorter proxy_read_timeout than the last one times out by the shorter, while
//! the time a client takes to send its body is not counted against proxy_read_timeout.
//! portcullis keeps one timer entry per connection and moves its deadline lazily; these are
//! what that must not change.
//!
//! A connection that waits for its next request through two of portcullis's ticks (one to two
//! seconds) leaves its task and parks; it must still carry its next request, close at its
//! keepalive_timeout, when its client closes, and when the server stops, as nginx's does.

mod support;
#[path = "support/proxy.rs"]
mod upstreams;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::{Kind, Server};

/// keepalive_timeout (but in [`long_keepalive`]) and client_header_timeout below.
const TIMEOUT: Duration = Duration::from_secs(1);
/// The most a close may come after its timeout: both servers' timers have some slack, and a
/// loaded machine adds its own.
const SLACK: Duration = Duration::from_millis(1500);

/// The server, with `keepalive_timeout` as given.
fn config(keepalive: &str) -> String {
    support::main_config(&format!(
        "    keepalive_timeout {keepalive};\n    client_header_timeout 1s;\n\
         server {{\n        listen 127.0.0.1:{{PORT0}};\n\
         location / {{ return 200 \"ok\\n\"; }}\n\
         location = /status {{ stub_status; }}\n    }}\n"
    ))
}

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";

fn start(kind: Kind) -> Option<Server> {
    Server::start(kind, 1, &config("1s"))
}

/// keepalive_timeout 30s: an idle wait arms a deadline far later than client_header_timeout's.
fn long_keepalive(kind: Kind) -> Option<Server> {
    Server::start(kind, 1, &config("30s"))
}

fn connect(server: &Server) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", server.port(0))).expect("connect");
    s.set_read_timeout(Some(TIMEOUT + SLACK + SLACK))
        .expect("read timeout");
    s
}

/// Longer than two of portcullis's ticks, a second apart: a connection idle this long has
/// parked.
const PARKED: Duration = Duration::from_millis(2500);

/// A connection that made one request and then waited until it parked.
fn parked(server: &Server, kind: Kind) -> TcpStream {
    let mut s = connect(server);
    exchange(&mut s, kind);
    std::thread::sleep(PARKED);
    s
}

/// Sends one request and reads its whole response (the body is "ok\n").
fn exchange(s: &mut TcpStream, kind: Kind) {
    s.write_all(REQUEST).expect("write request");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"\r\n\r\nok\n") {
        let n = s.read(&mut buf).expect("read response");
        assert!(n > 0, "{kind}: closed before the response ended");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200 "), "{kind}: {got:?}");
}

/// Waits for the server to close `s` and returns how long that took; fails on any byte.
fn time_to_close(s: &mut TcpStream, kind: Kind) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Ok(n) => panic!("{kind}: unexpected bytes {:?}", &buf[..n]),
        Err(e) => panic!("{kind}: not closed within the read timeout: {e}"),
    }
    start.elapsed()
}

#[test]
fn idle_keepalive_connection_closes_after_keepalive_timeout() {
    for kind in support::kinds() {
        let Some(server) = start(kind) else { continue };
        let mut s = connect(&server);
        exchange(&mut s, kind);
        let took = time_to_close(&mut s, kind);
        assert!(
            took >= TIMEOUT - Duration::from_millis(100) && took <= TIMEOUT + SLACK,
            "{kind}: closed after {took:?}, keepalive_timeout is {TIMEOUT:?}"
        );
    }
}

#[test]
fn busy_keepalive_connection_outlives_keepalive_timeout() {
    for kind in support::kinds() {
        let Some(server) = start(kind) else { continue };
        let mut s = connect(&server);
        let start = Instant::now();
        // A request every 300 ms for three timeouts: each idle gap is shorter than
        // keepalive_timeout, though the connection's first deadline passed long ago.
        while start.elapsed() < TIMEOUT * 3 {
            exchange(&mut s, kind);
            std::thread::sleep(Duration::from_millis(300));
        }
        exchange(&mut s, kind);
        let took = time_to_close(&mut s, kind);
        assert!(
            took >= TIMEOUT - Duration::from_millis(100),
            "{kind}: closed {took:?} after the last request"
        );
    }
}

#[test]
fn half_sent_head_closes_after_client_header_timeout() {
    for kind in support::kinds() {
        let Some(server) = long_keepalive(kind) else {
            continue;
        };
        let mut s = connect(&server);
        // Whole requests first, with an idle gap longer than client_header_timeout between
        // them: by the end, the connection's timer is armed for an idle wait (30 s), not for
        // the first head (1 s), before the head that stops half way needs 1 s again.
        exchange(&mut s, kind);
        std::thread::sleep(TIMEOUT + Duration::from_millis(500));
        exchange(&mut s, kind);
        s.write_all(b"GET / HTTP/1.1\r\nHost: loc")
            .expect("write part of a head");
        let took = time_to_close(&mut s, kind);
        assert!(
            took >= TIMEOUT - Duration::from_millis(100) && took <= TIMEOUT + SLACK,
            "{kind}: closed after {took:?}, client_header_timeout is {TIMEOUT:?}"
        );
        let log = server.error_log();
        assert!(
            log.contains(
                "client timed out (110: Connection timed out) while reading client request headers"
            ),
            "{kind}: {log}"
        );
    }
}

#[test]
fn pooled_upstream_connection_times_out_by_its_new_locations_read_timeout() {
    let up = upstreams::Upstream::start(|x| {
        if x.path() == "/stall" {
            std::thread::sleep(TIMEOUT * 3);
        }
        upstreams::Reply::Send(upstreams::ok("up\n", ""))
    });
    let conf = support::main_config(&format!(
        "    upstream b {{ server {}; keepalive 4; }}\n\
         server {{\n        listen 127.0.0.1:{{PORT0}};\n\
         proxy_http_version 1.1; proxy_set_header Connection \"\";\n\
         location /fast {{ proxy_pass http://b; proxy_read_timeout 30s; }}\n\
         location /stall {{ proxy_pass http://b; proxy_read_timeout 1s; }}\n    }}\n",
        up.addr()
    ));
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &conf) else {
            continue;
        };
        let before = up.conns();
        let (status, _) = get(&server, "/fast");
        assert_eq!(status, 200, "{kind}");
        // The connection /fast used waits in the pool with a 30 s read deadline behind it.
        let start = Instant::now();
        let (status, _) = get(&server, "/stall");
        let took = start.elapsed();
        assert_eq!(status, 504, "{kind}");
        assert_eq!(
            up.conns() - before,
            1,
            "{kind}: /stall did not reuse /fast's connection"
        );
        assert!(
            took >= TIMEOUT - Duration::from_millis(100) && took <= TIMEOUT + SLACK,
            "{kind}: 504 after {took:?}, proxy_read_timeout is {TIMEOUT:?}"
        );
    }
}

/// `GET path` on a connection of its own: the status and the whole response.
fn get(server: &Server, path: &str) -> (u16, String) {
    let mut s = connect(server);
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .expect("write request");
    let mut reply = String::new();
    s.read_to_string(&mut reply).expect("read response");
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {reply:?}"));
    (status, reply)
}

#[test]
fn a_slowly_sent_body_does_not_count_against_proxy_read_timeout() {
    let up = upstreams::Upstream::start(|x| {
        upstreams::Reply::Send(upstreams::ok(&format!("{}\n", x.body.len()), ""))
    });
    let conf = support::main_config(&format!(
        "    upstream b {{ server {}; keepalive 4; }}\n\
         server {{\n        listen 127.0.0.1:{{PORT0}};\n\
         proxy_http_version 1.1; proxy_set_header Connection \"\";\n\
         proxy_read_timeout 1s; client_body_timeout 10s;\n\
         location /buffered {{ proxy_pass http://b; }}\n\
         location /streamed {{ proxy_pass http://b; proxy_request_buffering off; }}\n    }}\n",
        up.addr()
    ));
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &conf) else {
            continue;
        };
        for path in ["/buffered", "/streamed"] {
            let mut s = connect(&server);
            write!(
                s,
                "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 30\r\n\
                 Connection: close\r\n\r\n"
            )
            .expect("write head");
            // Three parts over 1.5 s: longer than proxy_read_timeout in all.
            for _ in 0..3 {
                s.write_all(&[b'x'; 10]).expect("write part of the body");
                std::thread::sleep(TIMEOUT / 2);
            }
            let mut reply = String::new();
            s.read_to_string(&mut reply).expect("read response");
            assert!(
                reply.starts_with("HTTP/1.1 200 ") && reply.ends_with("\r\n\r\n30\n"),
                "{kind} {path}: {reply}"
            );
        }
    }
}

/// keepalive_time 1s: the first request that starts past it on a connection is its last,
/// answered with `Connection: close`; the ones before it keep the connection.
#[test]
fn a_request_past_keepalive_time_is_the_last_on_its_connection() {
    let template = support::main_config(
        "    keepalive_time 1s;\n\
         server {\n        listen 127.0.0.1:{PORT0};\n\
         location / { return 200 \"ok\\n\"; }\n    }\n",
    );
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &template) else {
            continue;
        };
        let mut client = server.client(0);
        let opened = Instant::now();
        client.send(REQUEST).expect("send");
        let first = client.read_response(false).expect("first response");
        assert_eq!(first.header("connection"), Some("keep-alive"), "{kind}");
        // The feature is a time: the connection has to grow older than it.
        std::thread::sleep(TIMEOUT + Duration::from_millis(200) - opened.elapsed().min(TIMEOUT));
        client.send(REQUEST).expect("send");
        let last = client.read_response(false).expect("last response");
        assert_eq!(last.status, 200, "{kind}");
        assert_eq!(last.header("connection"), Some("close"), "{kind}: {last:?}");
        assert!(client.is_closed(SLACK), "{kind}: closed after the last");
    }
}

#[test]
fn parked_connection_carries_its_next_requests() {
    for kind in support::kinds() {
        let Some(server) = long_keepalive(kind) else {
            continue;
        };
        let mut s = parked(&server, kind);
        exchange(&mut s, kind);
        exchange(&mut s, kind);
        // Parked again, then a request with the client's side closed behind it: answered.
        std::thread::sleep(PARKED);
        s.write_all(REQUEST).expect("write request");
        s.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let mut got = String::new();
        s.read_to_string(&mut got).expect("read to the close");
        assert!(
            got.starts_with("HTTP/1.1 200 ") && got.ends_with("\r\n\r\nok\n"),
            "{kind}: {got:?}"
        );
    }
}

#[test]
fn parked_connection_closes_at_keepalive_timeout() {
    let keepalive = Duration::from_secs(4);
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &config("4s")) else {
            continue;
        };
        let mut s = connect(&server);
        s.set_read_timeout(Some(keepalive + SLACK + SLACK))
            .expect("read timeout");
        exchange(&mut s, kind);
        let took = time_to_close(&mut s, kind);
        assert!(
            took >= keepalive - Duration::from_millis(100) && took <= keepalive + SLACK,
            "{kind}: closed after {took:?}, keepalive_timeout is {keepalive:?}"
        );
    }
}

/// stub_status's active connections, asked on a connection of its own (counted).
fn active(server: &Server) -> u32 {
    let (status, reply) = get(server, "/status");
    assert_eq!(status, 200, "{reply}");
    let line = reply
        .lines()
        .find_map(|l| l.strip_prefix("Active connections: "))
        .unwrap_or_else(|| panic!("no active connections in {reply:?}"));
    line.trim().parse().expect("a count")
}

#[test]
fn parked_connection_closed_by_its_client_is_no_longer_counted() {
    for kind in support::kinds() {
        let Some(server) = long_keepalive(kind) else {
            continue;
        };
        let s = parked(&server, kind);
        assert_eq!(
            active(&server),
            2,
            "{kind}: the parked connection and the asking one"
        );
        drop(s);
        let gone = support::wait_until(Duration::from_secs(5), || active(&server) == 1);
        assert!(gone, "{kind}: the closed connection is still counted");
    }
}

#[test]
fn graceful_stop_closes_parked_connections() {
    for kind in support::kinds() {
        let Some(mut server) = long_keepalive(kind) else {
            continue;
        };
        let mut s = parked(&server, kind);
        server.signal(libc::SIGQUIT);
        let took = time_to_close(&mut s, kind);
        assert!(took < SLACK, "{kind}: closed {took:?} after SIGQUIT");
        assert!(
            server.wait_exit(Duration::from_secs(5)).is_some(),
            "{kind}: still running after a graceful stop with only idle connections"
        );
    }
}

/// portcullis keeps a connection on the configuration it started with, so that a reload costs
/// no request that races with the close of an idle connection (tests/reload_under_load.rs);
/// a parked connection is no exception. (nginx closes its idle connections on reload.)
#[test]
fn parked_connection_outlives_a_reload() {
    let Some(server) = long_keepalive(Kind::Portcullis) else {
        return;
    };
    let mut s = parked(&server, Kind::Portcullis);
    // The new configuration answers /new, which shows when it is in force.
    let new = config("30s").replace(
        "location = /status",
        "location = /new { return 200 \"new\\n\"; }\n         location = /status",
    );
    server.write_config(&new);
    server.signal(libc::SIGHUP);
    let reloaded = support::wait_until(Duration::from_secs(10), || get(&server, "/new").0 == 200);
    assert!(reloaded, "the new configuration is not in force");
    exchange(&mut s, Kind::Portcullis);
}
