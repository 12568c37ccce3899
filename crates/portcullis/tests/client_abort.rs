//! A client that goes away while its request waits for the upstream: nginx notices at once,
//! closes the upstream connection and logs the request with 499; with
//! `proxy_ignore_client_abort on` it lets the upstream answer and logs that answer. Run
//! under nginx and portcullis alike.

mod support;
#[path = "support/proxy.rs"]
mod upstreams;

#[allow(dead_code)]
#[path = "support/h2c.rs"]
mod h2c;

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use support::{kinds, read_lossy, wait_until, Server};
use upstreams::{ok, Reply, Upstream};

/// How long curl waits for an answer before it gives up and closes the connection.
const CURL_PATIENCE: &str = "1";

/// How long the test waits for what it watches.
const DEADLINE: Duration = Duration::from_secs(10);

/// An upstream that answers only once the test lets it: a request waits for it meanwhile.
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    fn new() -> Gate {
        Gate(Arc::new((Mutex::new(false), Condvar::new())))
    }

    fn upstream(&self) -> Upstream {
        let gate = self.0.clone();
        Upstream::start(move |_| {
            let (open, cv) = &*gate;
            let guard = open.lock().expect("gate");
            let _ = cv.wait_timeout_while(guard, DEADLINE, |open| !*open);
            Reply::Send(ok("late\n", ""))
        })
    }

    fn open(&self) {
        *self.0 .0.lock().expect("gate") = true;
        self.0 .1.notify_all();
    }
}

#[test]
fn a_client_gone_before_the_response_is_logged_499() {
    for kind in kinds() {
        for (path, ignore, logged) in [
            ("/x", "off", "\"GET /x HTTP/1.1\" 499 0 "),
            ("/x", "on", "\"GET /x HTTP/1.1\" 200 "),
        ] {
            let gate = Gate::new();
            let upstream = gate.upstream();
            let config = support::main_config(&format!(
                "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        \
                 proxy_ignore_client_abort {ignore};\n        \
                 location / {{ proxy_pass http://127.0.0.1:{}; }}\n    }}\n",
                upstream.port
            ));
            let Some(server) = Server::start(kind, 1, &config) else {
                continue;
            };
            let what = format!("{kind}, proxy_ignore_client_abort {ignore}");
            let mut client = server.client(0);
            client
                .send(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
                .expect("send");
            assert!(
                wait_until(DEADLINE, || upstream.requests() == 1),
                "{what}: the upstream has the request"
            );
            drop(client);
            if ignore == "on" {
                // Nothing signals that a server has seen the close and chosen to ignore it:
                // it gets this long to do otherwise (a server that noticed would log 499
                // within it), then the upstream answers.
                std::thread::sleep(Duration::from_millis(300));
                gate.open();
            }
            let access = server.access_log_path();
            let seen = wait_until(DEADLINE, || read_lossy(&access).contains(logged));
            gate.open();
            assert!(seen, "{what}: {logged:?} in\n{}", read_lossy(&access));
            if ignore == "off" {
                let errors = server.error_log();
                assert!(
                    errors.contains(
                        "epoll_wait() reported that client prematurely closed connection, \
                         so upstream connection is closed too"
                    ),
                    "{what}: the error log says so\n{errors}"
                );
            }
        }
    }
}

#[test]
fn an_http2_client_gone_before_the_response_is_logged_499() {
    let Some(curl) = h2c::tool("curl") else {
        return;
    };
    for kind in kinds() {
        let gate = Gate::new();
        let upstream = gate.upstream();
        let config = support::main_config(&format!(
            "    server {{\n        listen 127.0.0.1:{{PORT0}} http2;\n        \
             location / {{ proxy_pass http://127.0.0.1:{}; }}\n    }}\n",
            upstream.port
        ));
        let Some(server) = Server::start(kind, 1, &config) else {
            continue;
        };
        // curl gives up after CURL_PATIENCE and closes its connection, the stream unanswered.
        let status = std::process::Command::new(&curl)
            .args([
                "-s",
                "-o",
                "/dev/null",
                "--http2-prior-knowledge",
                "--max-time",
            ])
            .arg(CURL_PATIENCE)
            .arg(format!("http://127.0.0.1:{}/h2", server.port(0)))
            .status()
            .expect("run curl");
        assert!(!status.success(), "{kind}: curl got no answer in time");
        let access = server.access_log_path();
        let logged = "\"GET /h2 HTTP/2.0\" 499 0 ";
        let seen = wait_until(DEADLINE, || read_lossy(&access).contains(logged));
        gate.open();
        assert!(seen, "{kind}: {logged:?} in\n{}", read_lossy(&access));
        assert_eq!(upstream.requests(), 1, "{kind}");
    }
}
