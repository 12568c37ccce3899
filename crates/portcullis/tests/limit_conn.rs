//! `limit_conn_zone` and `limit_conn`, compared with nginx on the same configuration: a
//! request in progress (held by its upstream) counts against its key until it ends, a
//! request past the limit is refused with `limit_conn_status` and logged, a dry run lets it
//! through, another key or location is not limited, and `$limit_conn_status` says which.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use support::{head_upstream, kinds, Client, Server};

const CONFIG: &str = r#"
    limit_conn_zone $binary_remote_addr zone=addr:1m;
    limit_conn_zone $arg_k zone=bykey:1m;
    server {
        listen 127.0.0.1:{PORT0};
        add_header X-Limit "[$limit_conn_status]" always;
        location /held/ {
            limit_conn addr 1;
            limit_conn_status 429;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /keyed/ {
            limit_conn bykey 1;
            limit_conn_log_level warn;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /dry/ {
            limit_conn addr 1;
            limit_conn_dry_run on;
            try_files $uri =204;
        }
        location /open/ { return 200 "open\n"; }
    }
"#;

/// An upstream that holds each request for `/held/` and `/keyed/` until the test opens the
/// gate, and counts the requests that reached it.
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    arrived: AtomicUsize,
}

fn gated_upstream(gate: Arc<Gate>) -> u16 {
    head_upstream(move |_, _| {
        gate.arrived.fetch_add(1, Ordering::SeqCst);
        let mut open = gate.open.lock().unwrap();
        while !*open {
            open = gate.opened.wait(open).unwrap();
        }
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nheld\n".to_vec()
    })
}

fn ask(port: u16, path: &str) -> String {
    let r = support::get(port, path).expect("GET");
    format!(
        "{path} -> {} {}",
        r.status,
        r.header("x-limit").unwrap_or("-")
    )
}

#[test]
fn limit_conn_answers_as_nginx_does() {
    let mut seen = Vec::new();
    for kind in kinds() {
        let gate = Arc::new(Gate {
            open: Mutex::new(false),
            opened: Condvar::new(),
            arrived: AtomicUsize::new(0),
        });
        let upstream = gated_upstream(gate.clone());
        let http = CONFIG.replace("{UPSTREAM}", &upstream.to_string());
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let port = server.port(0);
        let mut got = Vec::new();

        // Two requests in progress: one for this address, one for key "a".
        let mut held = Client::connect(port);
        held.send(b"GET /held/1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("send");
        let mut keyed = Client::connect(port);
        keyed
            .send(b"GET /keyed/1?k=a HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("send");
        let arrived = support::wait_until(Duration::from_secs(10), || {
            gate.arrived.load(Ordering::SeqCst) == 2
        });
        assert!(
            arrived,
            "{kind}: the held requests did not reach the upstream"
        );

        for path in ["/held/2", "/keyed/2?k=a", "/dry/1", "/open/1"] {
            got.push(ask(port, path));
        }
        assert_eq!(got[0], "/held/2 -> 429 [REJECTED]", "{kind}");
        assert_eq!(got[1], "/keyed/2?k=a -> 503 [REJECTED]", "{kind}");
        assert_eq!(got[2], "/dry/1 -> 204 [REJECTED_DRY_RUN]", "{kind}");
        assert_eq!(got[3], "/open/1 -> 200 []", "{kind}");

        // Another key is not limited by the first one's request (it waits at the gate).
        let mut other = Client::connect(port);
        other
            .send(b"GET /keyed/3?k=b HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("send");
        let arrived = support::wait_until(Duration::from_secs(10), || {
            gate.arrived.load(Ordering::SeqCst) == 3
        });
        assert!(arrived, "{kind}: another key was limited");

        *gate.open.lock().unwrap() = true;
        gate.opened.notify_all();
        for (client, name) in [
            (&mut held, "held"),
            (&mut keyed, "keyed"),
            (&mut other, "other"),
        ] {
            let r = client.read_response(false).expect("response");
            got.push(format!(
                "{name} -> {} {}",
                r.status,
                r.header("x-limit").unwrap_or("-")
            ));
        }
        // Once the request ends, its count is given back.
        let mut after = String::new();
        let freed = support::wait_until(Duration::from_secs(10), || {
            after = ask(port, "/held/4");
            after.contains(" 200 ")
        });
        assert!(freed, "{kind}: {after}");
        got.push(after);

        let log = server.error_log();
        for line in [
            "[error]",
            "limiting connections by zone \"addr\"",
            "[warn]",
            "limiting connections by zone \"bykey\"",
            "limiting connections, dry run, by zone \"addr\"",
        ] {
            assert!(log.contains(line), "{kind}: no {line:?} in\n{log}");
        }
        seen.push((kind, got));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}
