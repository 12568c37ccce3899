//! Memory per idle keepalive connection, against nginx on the same configuration: thousands of
//! connections that each made one request and then wait. nginx frees a waiting connection's
//! buffers and keeps about 0.55 KB of it; portcullis, once a connection has waited through two
//! ticks, keeps it outside any task (it parks) and must hold less than nginx per connection.
//! `bench/idle-memory.sh` is the same measurement with 10,000 connections.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use support::{Kind, Server};

/// Connections held. Each side holds one descriptor per connection, within the usual hard
/// limit of open files.
const CONNECTIONS: usize = 4000;
/// How long portcullis may take to park them all and give their memory back: two ticks to
/// park, one more to release.
const SETTLE: Duration = Duration::from_secs(8);

fn config() -> String {
    format!(
        "daemon off;\nworker_processes 1;\npid {{PREFIX}}/server.pid;\n\
         error_log {{PREFIX}}/error.log warn;\nworker_rlimit_nofile {files};\n\
         events {{ worker_connections {files}; }}\n\
         http {{ access_log off; keepalive_timeout 300s;\n\
         server {{ listen 127.0.0.1:{{PORT0}}; location / {{ return 200 \"hello\"; }} }} }}\n",
        files = CONNECTIONS + 500
    )
}

/// Resident memory of the server and its child processes (nginx's worker), in KB.
fn resident(server: &Server) -> u64 {
    let pid = server.pid();
    let mut pids = vec![pid];
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = support::read_lossy(&entry.path().join("stat"));
        // The parent is the second field after the command's closing parenthesis.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|f| f.parse::<u32>().ok());
        if ppid == Some(pid) {
            pids.push(p);
        }
    }
    pids.iter()
        .map(|p| {
            let status = support::read_lossy(std::path::Path::new(&format!("/proc/{p}/status")));
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// Opens `n` connections, each with one request answered, and returns them held.
fn hold(server: &Server, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", server.port(0))).expect("connect");
            s.set_read_timeout(Some(support::IO_TIMEOUT))
                .expect("read timeout");
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .expect("write request");
            let mut got = Vec::new();
            let mut buf = [0u8; 512];
            while !got.ends_with(b"hello") {
                let n = s.read(&mut buf).expect("read response");
                assert!(n > 0, "{}: closed before the answer", server.kind);
                got.extend_from_slice(&buf[..n]);
            }
            s
        })
        .collect()
}

/// Raises this process's limit of open files to its hard limit, which the servers inherit;
/// false if that is too low for the test.
fn raise_file_limit() -> bool {
    // SAFETY: getrlimit and setrlimit read and write the one struct given.
    let limit = unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return false;
        }
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        limit.rlim_max
    };
    limit >= (CONNECTIONS + 500) as libc::rlim_t
}

/// Resident memory per connection held: the server answers one request first, so that what
/// its first request sets up is not counted.
fn per_connection(server: &Server) -> (Vec<TcpStream>, u64) {
    drop(hold(server, 1));
    let before = resident(server);
    (hold(server, CONNECTIONS), before)
}

#[test]
fn an_idle_keepalive_connection_holds_less_than_in_nginx() {
    if !raise_file_limit() {
        support::skip("idle memory: the hard limit of open files is below 4,500");
        return;
    }
    let Some(nginx) = Server::start(Kind::Nginx, 1, &config()) else {
        return;
    };
    let (held, before) = per_connection(&nginx);
    let nginx_each = (resident(&nginx) - before) as f64 / CONNECTIONS as f64;
    drop(held);
    drop(nginx);

    let portcullis = Server::start(Kind::Portcullis, 1, &config()).expect("portcullis starts");
    let (held, before) = per_connection(&portcullis);
    let each = || resident(&portcullis).saturating_sub(before) as f64 / CONNECTIONS as f64;
    let waiting = each();
    let less = support::wait_until(SETTLE, || each() < nginx_each);
    assert!(
        less,
        "{CONNECTIONS} idle connections: portcullis holds {:.2} KB each ({waiting:.2} KB once \
         answered), nginx {nginx_each:.2} KB",
        each()
    );
    // Still carried: each answers its next request.
    for mut s in held.into_iter().take(10) {
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .expect("write request");
        let mut got = String::new();
        s.read_to_string(&mut got).expect("read response");
        assert!(got.ends_with("hello"), "{got:?}");
    }
}
