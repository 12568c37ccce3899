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

/// `syslog:` targets of `error_log` and `access_log`: one datagram per line, with nginx's
/// header (priority from the facility and the line's severity, the time, the host name unless
/// `nohostname`, the tag). What a local syslog server receives is compared with nginx's.
#[test]
fn syslog_targets_as_nginx_sends_them() {
    let mut seen = Vec::new();
    for kind in kinds() {
        // A syslog server of each run's own: nothing another run sent reaches it.
        let collector = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind the syslog server");
        let port = collector.local_addr().expect("addr").port();
        let config = format!(
            "daemon off;
    worker_processes 1;
    pid {{PREFIX}}/server.pid;
    error_log syslog:server=127.0.0.1:{port},tag=errors warn;
    events {{ worker_connections 256; }}
    http {{
        access_log syslog:server=127.0.0.1:{port} combined;
        server {{
            listen 127.0.0.1:{{PORT0}};
            root {{PREFIX}}/none;
            location /quiet/ {{
                access_log syslog:server=127.0.0.1:{port},facility=local3,severity=notice,tag=acc,nohostname combined;
                error_log syslog:server=127.0.0.1:{port},nohostname error;
            }}
        }}
    }}
    "
        );
        collector
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = [0u8; 4096];
        let Some(mut server) = Server::start(kind, 1, &config) else {
            continue;
        };
        let prefix = server.prefix().display().to_string();
        let mut messages = Vec::new();
        for path in ["/loud", "/quiet/x"] {
            let r = support::request(
                server.port(0),
                &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: ua\r\nConnection: close\r\n\r\n"),
            )
            .expect("GET");
            assert_eq!(r.status, 404, "{kind} {path}");
            // An error line and an access line per request.
            for _ in 0..2 {
                let n = collector.recv(&mut buf).expect("a syslog message");
                messages.push(normalize(&String::from_utf8_lossy(&buf[..n]), &prefix));
            }
        }
        server.stop();
        messages.sort();
        seen.push((kind, messages));
    }
    for (kind, messages) in &seen {
        assert_eq!(messages.len(), 4, "{kind}: {messages:?}");
        assert!(
            messages
                .iter()
                .any(|m| m.starts_with("<187>TIME HOST errors: ")),
            "{kind}: {messages:?}"
        );
        assert!(
            messages
                .iter()
                .any(|m| m.starts_with("<157>TIME acc: 127.0.0.1 - - [")),
            "{kind}: {messages:?}"
        );
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        assert_eq!(ours, nginx, "portcullis against nginx");
    }
}

/// A syslog message with its time, host name, dates, process numbers and prefix made
/// constant.
fn normalize(message: &str, prefix: &str) -> String {
    let (pri, rest) = message.split_at(message.find('>').map_or(0, |i| i + 1));
    // "Nov 25 13:29:14 " is 16 bytes.
    let rest = rest.get(16..).unwrap_or_default();
    let rest = match rest.split_once(' ') {
        Some((host, tail)) if !host.ends_with(':') => format!("HOST {tail}"),
        _ => rest.to_string(),
    };
    let mut out = format!("{pri}TIME {rest}").replace(prefix, "PREFIX");
    // The error line's own date and pid#tid, and the access line's time.
    if let Some(i) = out.find(": 20") {
        if let Some(j) = out[i..].find("] ") {
            let k = out[i + j + 2..].find(": ").map_or(0, |k| k + 2);
            out.replace_range(i + 2..i + j + 2 + k, "DATE [level] PID: ");
        }
    }
    if let (Some(i), Some(j)) = (out.find(" - - ["), out.find("] \"")) {
        out.replace_range(i + 6..j, "TIME");
    }
    // The error page's size: it names the server.
    if let Some(i) = out.find(" 404 ") {
        if let Some(j) = out[i + 5..].find(' ') {
            out.replace_range(i + 5..i + 5 + j, "SIZE");
        }
    }
    out
}
