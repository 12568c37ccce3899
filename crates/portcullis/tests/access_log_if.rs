//! `access_log ... if=`: a request's line goes to the log only when the condition is
//! neither empty nor `0`, compared with nginx on the same configuration and requests; a
//! log without the condition keeps every line.

mod support;

use std::time::Duration;

use support::{kinds, Server};

const CONFIG: &str = r#"
    map $uri $loggable {
        /skip 0;
        /empty "";
        default 1;
    }
    log_format short '$request_uri $status';
    server {
        listen 127.0.0.1:{PORT0};
        access_log {PREFIX}/cond.log short if=$loggable;
        access_log {PREFIX}/all.log short;
        location / { return 200 "ok\n"; }
        location /inner/ { access_log {PREFIX}/inner.log short if=$arg_log; return 204; }
    }
"#;

#[test]
fn access_log_if_keeps_the_lines_nginx_keeps() {
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(CONFIG)) else {
            continue;
        };
        let port = server.port(0);
        for path in [
            "/a",
            "/skip",
            "/empty",
            "/b?x=1",
            "/inner/?log=1",
            "/inner/?log=0",
            "/inner/",
        ] {
            support::get(port, path).expect("GET");
        }
        let all = server.path("all.log");
        let complete = support::wait_until(Duration::from_secs(5), || {
            support::read_lossy(&all).lines().count() >= 4
        });
        assert!(complete, "{kind:?}: {}", support::read_lossy(&all));
        let inner = server.path("inner.log");
        assert!(support::wait_until(Duration::from_secs(5), || {
            !support::read_lossy(&inner).is_empty()
        }));
        let mut lines = Vec::new();
        for log in ["cond.log", "all.log", "inner.log"] {
            lines.push(format!(
                "{log}: {:?}",
                support::read_lossy(&server.path(log))
            ));
        }
        if kind == support::Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "cond.log: \"/a 200\\n/b?x=1 200\\n\"",
                    "inner.log: \"/inner/?log=1 204\\n\"",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// A request whose method a `limit_except` restricts is logged by the block's `access_log`,
/// a permitted one by the location's, as nginx switches such a request to the block's
/// settings as soon as its location is found: a body too large for it is logged by the block
/// too. A request that moves on to another location (an index) is logged by what that
/// location says of its method.
#[test]
fn a_limit_except_block_logs_the_methods_it_restricts() {
    const CONFIG: &str = r#"
        log_format method '$request_method $uri $status';
        server {
            listen 127.0.0.1:{PORT0};
            root {PREFIX}/html;
            access_log {PREFIX}/server.log method;
            location / {
                client_max_body_size 10;
                limit_except GET { access_log {PREFIX}/restricted.log method; deny all; }
                return 200 "ok\n";
            }
            location /a/ {
                limit_except GET { access_log {PREFIX}/restricted.log method; }
            }
            location = /a/index.html {
                client_max_body_size 10;
                limit_except GET POST { access_log {PREFIX}/other.log method; }
            }
        }
    "#;
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(CONFIG)) else {
            continue;
        };
        let index = server.path("html/a/index.html");
        std::fs::create_dir_all(index.parent().expect("a directory")).expect("mkdir");
        std::fs::write(&index, "index\n").expect("write the index");
        let port = server.port(0);
        support::get(port, "/").expect("GET");
        let post = |path: &str, body: &str| {
            let raw = format!(
                "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            support::request(port, &raw).expect("POST").status
        };
        assert_eq!(post("/", ""), 403);
        let large = "x".repeat(40);
        assert_eq!(post("/", &large), 413);
        assert_eq!(post("/a/", &large), 413);
        let logs = ["server.log", "restricted.log", "other.log"].map(|l| server.path(l));
        assert!(support::wait_until(Duration::from_secs(5), || {
            let lines: usize = logs
                .iter()
                .map(|l| support::read_lossy(l).lines().count())
                .sum();
            lines >= 4
        }));
        let lines: Vec<String> = ["server.log", "restricted.log", "other.log"]
            .iter()
            .zip(&logs)
            .map(|(name, l)| format!("{name}: {:?}", support::read_lossy(l)))
            .collect();
        if kind == support::Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "server.log: \"GET / 200\\nPOST /a/index.html 413\\n\"",
                    "restricted.log: \"POST / 403\\nPOST / 413\\n\"",
                    "other.log: \"\"",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// nginx makes its default access log only for a server that inherits no `access_log`: a
/// configuration whose servers all name their own never opens it, so it starts where the
/// default's directory does not exist (here the prefix has no `logs/`).
#[test]
fn servers_with_their_own_logs_open_no_default_log() {
    const CONFIG: &str = r#"
daemon off;
worker_processes 1;
pid {PREFIX}/server.pid;
error_log {PREFIX}/error.log info;
events { worker_connections 256; }
http {
    log_format short '$request_uri $status';
    server {
        listen 127.0.0.1:{PORT0};
        access_log {PREFIX}/own.log short;
        location / { return 200 "ok\n"; }
    }
}
"#;
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, CONFIG) else {
            continue;
        };
        support::get(server.port(0), "/a").expect("GET");
        let own = server.path("own.log");
        assert!(support::wait_until(Duration::from_secs(5), || {
            !support::read_lossy(&own).is_empty()
        }));
        let lines = vec![format!("own.log: {:?}", support::read_lossy(&own))];
        if kind == support::Kind::Portcullis {
            support::expect_lines(&lines, &["own.log: \"/a 200\\n\""]);
            assert!(!server.path("logs").exists(), "a default log was made");
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
