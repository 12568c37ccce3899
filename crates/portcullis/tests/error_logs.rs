//! `error_log` at every level, as nginx writes them: several in the main context, each with
//! its own level; an http, server or location level's own replacing the inherited ones, several
//! at one level adding up; messages of a request going to its location's logs. Compared with
//! nginx on the same configuration and requests.

mod support;

use std::time::Duration;

use support::{get, kinds, read_lossy, wait_until, Server};

const CONFIG: &str = "daemon off;
worker_processes 1;
pid {PREFIX}/server.pid;
error_log {PREFIX}/main-warn.log warn;
error_log {PREFIX}/main-info.log info;
events { worker_connections 256; }
http {
    access_log off;
    error_log {PREFIX}/http.log error;
    server {
        listen 127.0.0.1:{PORT0};
        root {PREFIX}/none;
        error_log {PREFIX}/server-info.log info;
        error_log {PREFIX}/server-crit.log crit;
        location /own/ { error_log {PREFIX}/location.log error; }
    }
    server {
        listen 127.0.0.1:{PORT1};
        root {PREFIX}/none;
    }
}
";

/// The request lines of a log, without time, process and connection numbers.
fn requests_in(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("request: "))
        .map(|l| {
            let level = l.split_whitespace().nth(2).unwrap_or_default();
            let message = l.split_once(": *").map_or("", |(_, rest)| rest);
            let message = message.split_once(' ').map_or("", |(_, rest)| rest);
            format!("{level} {message}")
        })
        .collect()
}

#[test]
fn error_logs_at_every_level_as_nginx_writes_them() {
    let files = [
        "main-warn.log",
        "main-info.log",
        "http.log",
        "server-info.log",
        "server-crit.log",
        "location.log",
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(mut server) = Server::start(kind, 2, CONFIG) else {
            continue;
        };
        for (port, path) in [(0, "/missing"), (0, "/own/missing"), (1, "/other")] {
            let r = get(server.port(port), path).expect("GET");
            assert_eq!(r.status, 404, "{kind} {path}");
        }
        let prefix = server.prefix().to_path_buf();
        let log = |name: &str| read_lossy(&prefix.join(name));
        assert!(
            wait_until(Duration::from_secs(5), || {
                log("server-info.log").contains("/missing")
                    && log("location.log").contains("/own/missing")
                    && log("http.log").contains("/other")
            }),
            "{kind}: {:?}",
            files.map(log)
        );
        server.stop();
        let here = prefix.display().to_string();
        let requests: Vec<Vec<String>> = files
            .iter()
            .map(|f| requests_in(&log(f).replace(&here, "PREFIX")))
            .collect();
        assert!(
            requests[0].is_empty() && requests[1].is_empty(),
            "{kind}: {requests:?}"
        );
        assert_eq!(requests[4], Vec::<String>::new(), "{kind}: crit");
        assert!(
            requests[3].iter().all(|l| !l.contains("/own/")),
            "{kind}: the location's messages go to its own log: {requests:?}"
        );
        seen.push((kind, requests));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        assert_eq!(ours, nginx, "portcullis against nginx");
    }
}
