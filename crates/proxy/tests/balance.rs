//! The balancers against nginx itself: the same `upstream` block is run by nginx (one
//! process, proxying to servers of its own that answer with their port) and compiled here,
//! and both must choose the same peers in the same order. Skipped when nginx is not
//! installed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use portcullis_proxy::{Key, Outcome, Upstream};

#[path = "../../portcullis/tests/support/ports.rs"]
mod ports;
use ports::free_ports;

const NGINX: &str = "/usr/sbin/nginx";
/// How long nginx may take to start listening.
const STARTUP: Duration = Duration::from_secs(10);

/// An nginx in front of `n` echo servers, with `upstream u { <body> }` where the body's
/// `{0}`, `{1}`, ... are the echo servers' ports; the servers in `dead` do not listen.
struct Nginx {
    /// Held while this nginx runs: the tests of this file run in parallel, and ports picked
    /// free by one could otherwise be taken by another's nginx before its own binds them.
    _serial: MutexGuard<'static, ()>,
    child: Child,
    dir: PathBuf,
    front: u16,
    backends: Vec<u16>,
    conf: String,
}

impl Nginx {
    fn start(label: &str, n: usize, body: &str) -> Option<Nginx> {
        Nginx::start_with_dead(label, n, &[], body)
    }

    fn start_with_dead(label: &str, n: usize, dead: &[usize], body: &str) -> Option<Nginx> {
        if !nginx_installed() {
            return None;
        }
        static SERIAL: Mutex<()> = Mutex::new(());
        let serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let ports = free_ports(n + 1);
        let (front, backends) = (ports[0], ports[1..].to_vec());
        let mut body = body.to_string();
        for (i, port) in backends.iter().enumerate() {
            body = body.replace(&format!("{{{i}}}"), &port.to_string());
        }
        let dir =
            std::env::temp_dir().join(format!("portcullis-balance-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let listens: String = backends
            .iter()
            .enumerate()
            .filter(|(i, _)| !dead.contains(i))
            .map(|(_, p)| format!("listen 127.0.0.1:{p}; "))
            .collect();
        let d = dir.display();
        let conf = format!(
            "pid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n\
             access_log off;\n\
             upstream u {{\n{body}\n}}\n\
             server {{ listen 127.0.0.1:{front}; location / {{ proxy_pass http://u; }} }}\n\
             server {{ {listens} return 200 $server_port; }}\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), &conf).expect("write config");
        let child = Command::new(NGINX)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .args(["-g", "daemon off; master_process off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nginx");
        let nginx = Nginx {
            _serial: serial,
            child,
            dir,
            front,
            backends,
            conf,
        };
        let deadline = Instant::now() + STARTUP;
        while TcpStream::connect(("127.0.0.1", front)).is_err() {
            assert!(Instant::now() < deadline, "nginx did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(nginx)
    }

    /// The index of the echo server that answered `GET <path>`.
    fn backend_for(&self, path: &str) -> usize {
        let mut s = TcpStream::connect(("127.0.0.1", self.front)).expect("connect");
        write!(s, "GET {path} HTTP/1.0\r\nHost: t\r\n\r\n").expect("write");
        let mut reply = String::new();
        s.read_to_string(&mut reply).expect("read");
        let body = reply.split("\r\n\r\n").nth(1).expect("a body");
        let port: u16 = body.trim().parse().expect("a port");
        self.backends
            .iter()
            .position(|&p| p == port)
            .expect("a backend")
    }

    /// The same block, compiled here from nginx's own configuration file.
    fn upstream(&self) -> Upstream {
        let loaded = portcullis_config::load_str(
            &self.conf,
            &self.dir.join("nginx.conf"),
            &Default::default(),
        )
        .expect("configuration loads");
        let http = loaded
            .directives
            .iter()
            .find(|d| d.name == "http")
            .expect("http");
        Upstream::compile(http.child("upstream").expect("upstream")).expect("compiles")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether nginx is here to compare with. CI installs it, so there its absence is a failure;
/// elsewhere the comparison is skipped, and says so.
fn nginx_installed() -> bool {
    if Path::new(NGINX).exists() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{NGINX} not installed: apt-get install nginx"
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: {NGINX} not installed");
    false
}

/// The peers this crate chooses for `keys`, one successful request each.
fn ours(up: &Upstream, keys: &[Key<'_>]) -> Vec<usize> {
    ours_with_dead(up, keys, &[])
}

/// The peers that answer `keys` when the peers in `dead` fail every attempt and each
/// failure is retried on the next peer chosen, as `proxy_next_upstream error` does.
fn ours_with_dead(up: &Upstream, keys: &[Key<'_>], dead: &[usize]) -> Vec<usize> {
    let mut local = up.local_state();
    let now = Instant::now();
    keys.iter()
        .map(|&key| {
            let mut tried = up.tried();
            loop {
                let id = up.select(&mut local, key, &mut tried, now).expect("a peer");
                if dead.contains(&id.0) {
                    up.release(id, Outcome::Failed, now);
                    continue;
                }
                up.release(id, Outcome::Ok, now);
                return id.0;
            }
        })
        .collect()
}

fn compare_sequence(label: &str, n: usize, body: &str, requests: usize) {
    let Some(nginx) = Nginx::start(label, n, body) else {
        return;
    };
    let theirs: Vec<usize> = (0..requests).map(|_| nginx.backend_for("/")).collect();
    let keys = vec![Key::None; requests];
    assert_eq!(ours(&nginx.upstream(), &keys), theirs, "{body}");
}

#[test]
fn weighted_round_robin_matches_nginx() {
    compare_sequence(
        "rr1",
        3,
        "server 127.0.0.1:{0} weight=5; server 127.0.0.1:{1}; server 127.0.0.1:{2};",
        14,
    );
    compare_sequence(
        "rr2",
        4,
        "server 127.0.0.1:{0} weight=3; server 127.0.0.1:{1} weight=2; \
         server 127.0.0.1:{2} down; server 127.0.0.1:{3} weight=4;",
        18,
    );
}

#[test]
fn least_conn_matches_nginx() {
    compare_sequence(
        "lc",
        3,
        "least_conn; server 127.0.0.1:{0} weight=2; server 127.0.0.1:{1}; \
         server 127.0.0.1:{2} weight=3;",
        12,
    );
}

fn compare_keys(label: &str, n: usize, body: &str, count: usize) {
    let Some(nginx) = Nginx::start(label, n, body) else {
        return;
    };
    let names: Vec<String> = (0..count).map(|i| format!("user{i}")).collect();
    let theirs: Vec<usize> = names
        .iter()
        .map(|k| nginx.backend_for(&format!("/?k={k}")))
        .collect();
    let keys: Vec<Key<'_>> = names.iter().map(|k| Key::Bytes(k.as_bytes())).collect();
    assert_eq!(ours(&nginx.upstream(), &keys), theirs, "{body}");
    assert!(
        (0..n).all(|i| theirs.contains(&i)),
        "the keys reach every peer"
    );
}

#[test]
fn hash_matches_nginx() {
    compare_keys(
        "hash",
        3,
        "hash $arg_k; server 127.0.0.1:{0}; server 127.0.0.1:{1} weight=2; \
         server 127.0.0.1:{2};",
        120,
    );
}

#[test]
fn consistent_hash_matches_nginx() {
    compare_keys(
        "chash",
        4,
        "hash $arg_k consistent; server 127.0.0.1:{0}; server 127.0.0.1:{1}; \
         server 127.0.0.1:{2} weight=2; server 127.0.0.1:{3};",
        200,
    );
}

#[test]
fn ip_hash_matches_nginx() {
    let Some(nginx) = Nginx::start(
        "iphash",
        3,
        "ip_hash; server 127.0.0.1:{0}; server 127.0.0.1:{1}; server 127.0.0.1:{2};",
    ) else {
        return;
    };
    let client = Key::ClientAddr("127.0.0.1".parse().expect("ip"));
    let theirs: Vec<usize> = (0..5).map(|_| nginx.backend_for("/")).collect();
    assert_eq!(ours(&nginx.upstream(), &[client; 5]), theirs);
}

/// A refused peer is retried elsewhere, loses effective weight one failure at a time, and
/// is out after max_fails: the answering peers must come in nginx's order.
#[test]
fn failures_and_retries_match_nginx() {
    for (label, body) in [
        (
            "fail-rr",
            "server 127.0.0.1:{0} weight=3 max_fails=3; server 127.0.0.1:{1}; \
             server 127.0.0.1:{2} weight=2;",
        ),
        (
            "fail-lc",
            "least_conn; server 127.0.0.1:{0} weight=3 max_fails=3; \
             server 127.0.0.1:{1}; server 127.0.0.1:{2} weight=2;",
        ),
        (
            "fail-backup",
            "server 127.0.0.1:{0}; server 127.0.0.1:{1} backup; server 127.0.0.1:{2} backup;",
        ),
    ] {
        let Some(nginx) = Nginx::start_with_dead(label, 3, &[0], body) else {
            return;
        };
        let theirs: Vec<usize> = (0..15).map(|_| nginx.backend_for("/")).collect();
        let keys = vec![Key::None; 15];
        assert_eq!(
            ours_with_dead(&nginx.upstream(), &keys, &[0]),
            theirs,
            "{body}"
        );
    }
}

/// What `nginx -t` says about a configuration, after `[emerg] pid#tid: `; `None` if it is
/// accepted.
fn nginx_verdict(dir: &Path, conf: &str) -> Option<String> {
    std::fs::write(dir.join("nginx.conf"), conf).expect("write config");
    let out = Command::new(NGINX)
        .arg("-t")
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .output()
        .expect("run nginx -t");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().find(|l| l.contains("[emerg]"))?;
    let (_, text) = line.split_once(": ")?;
    Some(text.to_string())
}

/// The same, from the configuration loader and the upstream compiler.
fn our_verdict(dir: &Path, conf: &str) -> Option<String> {
    let loaded =
        match portcullis_config::load_str(conf, &dir.join("nginx.conf"), &Default::default()) {
            Ok(loaded) => loaded,
            Err(e) => return Some(e.to_string()),
        };
    let http = loaded.directives.iter().find(|d| d.name == "http")?;
    Upstream::compile(http.child("upstream")?)
        .err()
        .map(|e| e.to_string())
}

/// Bad `upstream` blocks get nginx's words and line, and good ones pass, as `nginx -t`.
#[test]
fn config_verdicts_match_nginx_t() {
    if !nginx_installed() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("portcullis-balance-t-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let blocks = [
        "",
        "keepalive 4;",
        "server 127.0.0.1:81 backup;",
        "server 127.0.0.1:81; server 127.0.0.1:82 backup; hash $uri;",
        "hash $uri;\nserver 127.0.0.1:81;\nserver 127.0.0.1:82 backup;",
        "ip_hash; server 127.0.0.1:81 backup;",
        "random two; server 127.0.0.1:81 backup;",
        "least_conn; server 127.0.0.1:81 backup; server 127.0.0.1:82;",
        "server 127.0.0.1:81 weight=0;",
        "server 127.0.0.1:81 weight=2 max_fails=0 fail_timeout=30s max_conns=10 down;",
        "server 127.0.0.1:81 fail_timeout=500ms;",
        "server 127.0.0.1:81 max_fails=-1;",
        "server 127.0.0.1:81 resolve;",
        "server nohost.invalid:80;",
        "server 127.0.0.1:65536;",
        "server 127.0.0.1:;",
        "server ::1:80;",
        "server [::1]:8080; server [::1;",
        "server 127.0.0.1/x;",
        "server :80;",
        "server localhost:8080;",
        "hash $uri consistent; server 127.0.0.1;",
        "hash $uri inconsistent; server 127.0.0.1;",
        "random two least_conn; server 127.0.0.1;",
        "random two most_conn; server 127.0.0.1;",
        "keepalive 0; server 127.0.0.1;",
        "keepalive 8; keepalive_requests 100; keepalive_time 1h; keepalive_timeout 75s; \
         server 127.0.0.1;",
        "keepalive_requests 5; keepalive_requests 6; server 127.0.0.1;",
        "keepalive_time 1h; keepalive_time 2h; server 127.0.0.1;",
        "keepalive_timeout x; server 127.0.0.1;",
        "zone z 1k; server 127.0.0.1;",
        "zone z 64k; server 127.0.0.1;",
        "zone z 1q; server 127.0.0.1;",
    ];
    for body in blocks {
        let d = dir.display();
        // The block on the lines nginx and the loader both report.
        let conf = format!(
            "pid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n\
             upstream u {{ {body} }}\n\
             server {{ listen 127.0.0.1:1; location / {{ proxy_pass http://u; }} }}\n}}\n"
        );
        assert_eq!(
            our_verdict(&dir, &conf),
            nginx_verdict(&dir, &conf),
            "upstream u {{ {body} }}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
