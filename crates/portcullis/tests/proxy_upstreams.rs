//! Reverse proxy against upstreams that misbehave, black box: body framings, closes, peers
//! that die, balancers and retries, the `$upstream_*` variables, request bodies. Each test
//! runs nginx and portcullis on the same configuration in front of upstreams it starts.

mod support;
#[path = "support/proxy.rs"]
mod upstreams;

use std::time::Duration;

use support::{Client, Kind, Server};
use upstreams::{ok, Reply, Upstream};

/// How long a log line may take to appear.
const LOG_WAIT: Duration = Duration::from_secs(5);

/// A server block on `{PORT0}` whose `location /` has `location`, after `upstream`.
fn config(upstream: &str, location: &str) -> String {
    support::main_config(&format!(
        "    log_format up '$status $upstream_addr|$upstream_status|$upstream_response_time';\n\
         access_log {{PREFIX}}/up.log up;\n\
         {upstream}\n\
         server {{\n    listen 127.0.0.1:{{PORT0}};\n    server_name localhost;\n\
         location / {{ {location} }}\n}}\n"
    ))
}

/// A keepalive group `b` of the given peers with keepalive to them.
fn keepalive_group(peers: &[String]) -> String {
    let servers: String = peers.iter().map(|p| format!("server {p}; ")).collect();
    format!("upstream b {{ {servers}keepalive 4; }}")
}

const KEEPALIVE: &str =
    "proxy_pass http://b; proxy_http_version 1.1; proxy_set_header Connection \"\";";

fn start(kind: Kind, conf: &str) -> Option<Server> {
    Server::start(kind, 1, conf)
}

fn get11(client: &mut Client, path: &str) -> std::io::Result<support::Response> {
    client.send(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())?;
    client.read_response(false)
}

#[test]
fn chunked_and_until_close_bodies_reach_the_client() {
    let up = Upstream::start(|x| {
        match x.path() {
        "/chunked" => Reply::Send(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
                .to_vec(),
        ),
        _ => Reply::SendClose(b"HTTP/1.0 200 OK\r\n\r\nuntil close".to_vec()),
    }
    });
    let conf = config(&keepalive_group(&[up.addr()]), KEEPALIVE);
    for kind in support::kinds() {
        let Some(server) = start(kind, &conf) else {
            continue;
        };
        let port = server.port(0);
        // HTTP/1.1 clients get both re-chunked on a connection that stays open.
        let mut c = Client::connect(port);
        for (path, body) in [("/chunked", "hello world"), ("/close", "until close")] {
            let r = get11(&mut c, path).expect("response");
            assert_eq!(r.status, 200, "{kind} {path}");
            assert_eq!(
                r.header("transfer-encoding"),
                Some("chunked"),
                "{kind} {path}"
            );
            assert_eq!(r.header("content-length"), None, "{kind} {path}");
            assert_eq!(r.body_text(), body, "{kind} {path}");
        }
        // HTTP/1.0 clients get the bytes and a close.
        for (path, body) in [("/chunked", "hello world"), ("/close", "until close")] {
            let r =
                support::request(port, &format!("GET {path} HTTP/1.0\r\n\r\n")).expect("response");
            assert_eq!(r.status, 200, "{kind} {path}");
            assert_eq!(r.header("transfer-encoding"), None, "{kind} {path}");
            assert_eq!(r.body_text(), body, "{kind} {path}");
        }
        // A connection that ended a chunked body is reused; an until-close one is not.
        support::get(port, "/chunked").expect("response");
        let conns = up.conns();
        let r = support::get(port, "/chunked").expect("response");
        assert_eq!(r.body_text(), "hello world", "{kind}");
        assert_eq!(
            up.conns(),
            conns,
            "{kind}: the chunked connection is reused"
        );
        support::get(port, "/close").expect("response");
        support::get(port, "/chunked").expect("response");
        assert_eq!(
            up.conns(),
            conns + 1,
            "{kind}: the closed connection is replaced"
        );
    }
}

#[test]
fn upstream_closing_mid_body_closes_the_client() {
    let up = Upstream::start(|_| {
        Reply::SendClose(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b".to_vec())
    });
    let conf = config(&keepalive_group(&[up.addr()]), KEEPALIVE);
    for kind in support::kinds() {
        let Some(server) = start(kind, &conf) else {
            continue;
        };
        let mut c = Client::connect(server.port(0));
        let err = get11(&mut c, "/").expect_err("a cut body is no response");
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::UnexpectedEof,
            "{kind}: {err}"
        );
        assert!(
            support::wait_until(LOG_WAIT, || server
                .error_log()
                .contains("upstream prematurely closed connection while reading upstream")),
            "{kind}: {}",
            server.error_log()
        );
    }
}

#[test]
fn connection_close_and_idle_closes_use_new_connections() {
    let up = Upstream::start(|x| match x.path() {
        "/close" => Reply::Send(ok(&format!("conn={}", x.conn), "Connection: close\r\n")),
        // Closed right after the response, unannounced: found closed when next taken.
        "/drop" => Reply::SendClose(ok(&format!("conn={}", x.conn), "")),
        _ => Reply::Send(ok(&format!("conn={}", x.conn), "")),
    });
    let conf = config(&keepalive_group(&[up.addr()]), KEEPALIVE);
    for kind in support::kinds() {
        let Some(server) = start(kind, &conf) else {
            continue;
        };
        let mut c = Client::connect(server.port(0));
        let mut conn = |path: &str| {
            let r = get11(&mut c, path).expect("response");
            assert_eq!(r.status, 200, "{kind} {path}: {}", server.error_log());
            r.body_text()
        };
        let first = conn("/close");
        let second = conn("/keep");
        assert_ne!(first, second, "{kind}: Connection: close is not reused");
        assert_eq!(conn("/keep"), second, "{kind}: kept");
        // The upstream closes its side after this one; the next GET and POST still pass.
        assert_eq!(conn("/drop"), second, "{kind}");
        let after = conn("/keep");
        assert_ne!(after, second, "{kind}");
        let closed = up.closed();
        conn("/drop");
        assert!(support::wait_until(LOG_WAIT, || up.closed() > closed));
        // nginx loses this POST when the close and the request come in one turn of its event
        // loop; portcullis looks at a pooled connection before sending a POST on it.
        if kind == Kind::Nginx {
            continue;
        }
        c.send(b"POST /keep HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\nhi")
            .expect("send");
        let r = c.read_response(false).expect("response");
        assert_eq!(r.status, 200, "{kind} POST: {}", server.error_log());
    }
}

#[test]
fn next_upstream_retries_gets_but_not_posts() {
    let live = Upstream::start(|x| Reply::Send(ok(&format!("live {}", x.body.len()), "")));
    // Takes the request and closes without an answer: a peer dying mid-request.
    let dying = Upstream::start(|_| Reply::SendClose(Vec::new()));
    let refused = support::free_ports(1)[0];
    let group = format!(
        "upstream b {{ server {} max_fails=0; server {} max_fails=0; }}\n\
         upstream r {{ server 127.0.0.1:{refused} max_fails=0; server {} max_fails=0; }}",
        live.addr(),
        dying.addr(),
        live.addr()
    );
    let conf = config(
        &group,
        "proxy_pass http://b; } location /r/ { proxy_pass http://r;",
    );
    for kind in support::kinds() {
        let Some(server) = start(kind, &conf) else {
            continue;
        };
        let port = server.port(0);
        for _ in 0..4 {
            let r = support::get(port, "/").expect("response");
            assert_eq!(r.status, 200, "{kind}: a GET moves to the live peer");
            let r = support::get(port, "/r/").expect("response");
            assert_eq!(
                r.status, 200,
                "{kind}: a refused GET moves to the live peer"
            );
        }
        // A POST that reached the dying peer is not sent again; one refused at connect is.
        let post = "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc";
        let statuses: Vec<u16> = (0..4)
            .map(|_| support::request(port, post).expect("response").status)
            .collect();
        assert!(statuses.contains(&502), "{kind}: {statuses:?}");
        assert!(statuses.contains(&200), "{kind}: {statuses:?}");
        let post_r = post.replace("POST /", "POST /r/");
        for _ in 0..4 {
            let r = support::request(port, &post_r).expect("response");
            assert_eq!(
                r.status, 200,
                "{kind}: a POST refused at connect is retried"
            );
            assert_eq!(r.body_text(), "live 3", "{kind}");
        }
    }
}

#[test]
fn max_fails_takes_a_peer_out() {
    let live = Upstream::start(|_| Reply::Send(ok("live", "")));
    let dying = Upstream::start(|_| Reply::SendClose(Vec::new()));
    let group = format!(
        "upstream b {{ server {}; server {} max_fails=1 fail_timeout=30s; }}",
        live.addr(),
        dying.addr()
    );
    let conf = config(&group, "proxy_pass http://b;");
    for kind in support::kinds() {
        let Some(server) = start(kind, &conf) else {
            continue;
        };
        let before = dying.conns();
        for _ in 0..8 {
            let r = support::get(server.port(0), "/").expect("response");
            assert_eq!(r.status, 200, "{kind}");
        }
        assert_eq!(dying.conns() - before, 1, "{kind}: one failure, then out");
        assert!(live.requests() >= 8, "{kind}");
    }
}

#[test]
fn least_conn_prefers_the_idle_peer() {
    let peer = |name: &'static str| {
        Upstream::start(move |x| {
            if x.path() == "/slow" {
                std::thread::sleep(Duration::from_millis(1500));
            }
            Reply::Send(ok(name, ""))
        })
    };
    let (a, b) = (peer("a"), peer("b"));
    let group = format!(
        "upstream b {{ least_conn; server {}; server {}; keepalive 4; }}",
        a.addr(),
        b.addr()
    );
    let conf = config(&group, KEEPALIVE);
    for kind in support::kinds() {
        let Some(server) = start(kind, &conf) else {
            continue;
        };
        let port = server.port(0);
        let (a0, b0) = (a.requests(), b.requests());
        let slow = std::thread::spawn(move || support::get(port, "/slow"));
        assert!(
            support::wait_until(LOG_WAIT, || a.requests() + b.requests() > a0 + b0),
            "{kind}: the slow request reaches a peer"
        );
        let slow_peer = if a.requests() > a0 { "a" } else { "b" };
        for _ in 0..4 {
            let r = support::get(port, "/fast").expect("response");
            assert_ne!(r.body_text(), slow_peer, "{kind}: sent to the busy peer");
        }
        let r = slow.join().expect("thread").expect("response");
        assert_eq!(r.body_text(), slow_peer, "{kind}");
    }
}

#[test]
fn upstream_variables_show_every_attempt() {
    let failing = Upstream::start(|_| {
        Reply::Send(b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n".to_vec())
    });
    let live = Upstream::start(|_| Reply::Send(ok("live", "")));
    let group = format!(
        "upstream b {{ server {} max_fails=0; server {} max_fails=0; }}",
        failing.addr(),
        live.addr()
    );
    let conf = config(
        &group,
        "proxy_pass http://b; proxy_next_upstream error http_503;",
    );
    for kind in support::kinds() {
        let Some(server) = start(kind, &conf) else {
            continue;
        };
        for _ in 0..2 {
            let r = support::get(server.port(0), "/").expect("response");
            assert_eq!(r.status, 200, "{kind}");
        }
        let two = format!("200 {}, {}|503, 200|", failing.addr(), live.addr());
        let one = format!("200 {}|200|", live.addr());
        let log = server.path("up.log");
        assert!(
            support::wait_until(LOG_WAIT, || {
                let text = support::read_lossy(&log);
                text.lines().count() == 2
                    && text.contains(&two)
                    && text.contains(&one)
                    && text.lines().all(|l| {
                        let times = l.rsplit('|').next().unwrap_or("");
                        times
                            .split(", ")
                            .all(|t| t.len() == 5 && t.starts_with("0."))
                    })
            }),
            "{kind}: {}",
            support::read_lossy(&log)
        );
    }
}

#[test]
fn request_bodies_arrive_intact() {
    let up = Upstream::start(|x| {
        let summary = format!(
            "len={} cl={} te={} sum={}",
            x.body.len(),
            x.header("content-length").unwrap_or("-"),
            x.header("transfer-encoding").unwrap_or("-"),
            x.body.iter().map(|&b| u64::from(b)).sum::<u64>()
        );
        Reply::Send(ok(&summary, ""))
    });
    let conf = config(&keepalive_group(&[up.addr()]), KEEPALIVE);
    let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let sum: u64 = body.iter().map(|&b| u64::from(b)).sum();
    for kind in support::kinds() {
        let Some(server) = start(kind, &conf) else {
            continue;
        };
        let mut c = Client::connect(server.port(0));
        let mut raw = format!(
            "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        raw.extend_from_slice(&body);
        c.send(&raw).expect("send");
        let r = c.read_response(false).expect("response");
        let expected = format!("len=100000 cl=100000 te=- sum={sum}");
        assert_eq!(r.body_text(), expected, "{kind}");
        let mut raw =
            b"POST / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for part in body.chunks(30_000) {
            raw.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
            raw.extend_from_slice(part);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\n");
        c.send(&raw).expect("send");
        let r = c.read_response(false).expect("response");
        assert_eq!(
            r.body_text(),
            expected,
            "{kind}: buffered, re-sent with a length"
        );
    }
}

#[test]
fn hash_keys_stick_to_a_peer_as_in_nginx() {
    let peers: Vec<Upstream> = (0..3)
        .map(|i| Upstream::start(move |_| Reply::Send(ok(&format!("peer{i}"), ""))))
        .collect();
    let servers: String = peers
        .iter()
        .map(|p| format!("server {}; ", p.addr()))
        .collect();
    let groups = format!(
        "upstream h {{ hash $arg_k; {servers}}}\n\
         upstream c {{ hash \"k-$arg_k\" consistent; {servers}}}\n\
         upstream ip {{ ip_hash; {servers}}}"
    );
    let conf = config(
        &groups,
        "proxy_pass http://h; } location /c { proxy_pass http://c; } location /ip { proxy_pass http://ip;",
    );
    let mut maps: Vec<(Kind, Vec<String>)> = Vec::new();
    for kind in support::kinds() {
        let Some(server) = start(kind, &conf) else {
            continue;
        };
        let port = server.port(0);
        let mut map = Vec::new();
        for path in ["/", "/c"] {
            for k in 0..12 {
                let first = support::get(port, &format!("{path}?k={k}")).expect("response");
                for _ in 0..2 {
                    let again = support::get(port, &format!("{path}?k={k}")).expect("response");
                    assert_eq!(again.body_text(), first.body_text(), "{kind} {path} k={k}");
                }
                map.push(first.body_text());
            }
        }
        let spread: std::collections::HashSet<&String> = map.iter().collect();
        assert!(spread.len() > 1, "{kind}: every key on one peer: {map:?}");
        let ip: Vec<String> = (0..4)
            .map(|_| support::get(port, "/ip").expect("response").body_text())
            .collect();
        assert!(ip.iter().all(|p| *p == ip[0]), "{kind}: {ip:?}");
        map.extend(ip);
        maps.push((kind, map));
    }
    if let [(_, nginx), (_, ours)] = maps.as_slice() {
        assert_eq!(
            ours, nginx,
            "the same keys go to the same peers as in nginx"
        );
    }
}

#[test]
fn proxy_redirect_default_rewrites_location_as_nginx() {
    let up = Upstream::start(|x| {
        let to = if x.path().starts_with("/new/") {
            "http://b/new/moved"
        } else {
            "http://b/moved"
        };
        Reply::Send(
            format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n")
                .into_bytes(),
        )
    });
    let conf = config(
        &keepalive_group(&[up.addr()]),
        "proxy_pass http://b; } location /old/ { proxy_pass http://b/new/;",
    );
    let mut seen = Vec::new();
    for kind in support::kinds() {
        let Some(server) = start(kind, &conf) else {
            continue;
        };
        let port = server.port(0);
        let mut locations = Vec::new();
        for path in ["/x", "/old/x"] {
            let r = support::get(port, path).expect("response");
            assert_eq!(r.status, 302, "{kind} {path}");
            let l = r.header("location").unwrap_or_default().to_string();
            locations.push(l.replace(&port.to_string(), "PORT"));
        }
        assert_eq!(
            locations,
            [
                "http://localhost:PORT/moved",
                "http://localhost:PORT/old/moved"
            ],
            "{kind}"
        );
        seen.push(locations);
    }
    assert!(seen.windows(2).all(|w| w[0] == w[1]));
}
