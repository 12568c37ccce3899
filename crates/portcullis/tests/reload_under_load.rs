//! Reload under load: wrk keeps 20 connections busy on a static 1 KB file while the test
//! changes the configuration and sends SIGHUP five times. A reload must not cost a single
//! request: no socket error of any kind, no non-2xx response.
//!
//! Two runs per server: one request per connection, and keep-alive connections. The same runs
//! against nginx check the test itself. nginx closes idle keep-alive connections when an old
//! worker retires, which races with a request already on its way (wrk counts a read error);
//! portcullis keeps a connection on the generation it started with, so it is held to zero in
//! both runs while nginx's keep-alive run may show read errors and nothing else.

mod support;

use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use support::{Kind, Server, TempDir};

/// Length of the wrk run.
const RUN_SECS: u64 = 4;
/// Reloads sent during the run.
const RELOADS: u32 = 5;
/// wrk's own per-request timeout, well above any healthy response time here.
const WRK_TIMEOUT: &str = "3s";
/// A run that served fewer requests than this did not load the server.
const MIN_REQUESTS: u64 = 1000;
/// How long the last reload may take to be in force after wrk stops.
const RELOAD_DEADLINE: Duration = Duration::from_secs(10);

/// Configuration generation `generation`: the response header and the document root both
/// change, so every reload really swaps the configuration.
fn config(docroot: &TempDir, generation: u32) -> String {
    support::main_config(&format!(
        "    access_log off;\n\
         \x20   server {{\n\
         \x20       listen 127.0.0.1:{{PORT0}};\n\
         \x20       root {}/root{};\n\
         \x20       location / {{\n\
         \x20           add_header X-Generation {generation};\n\
         \x20       }}\n\
         \x20   }}\n",
        docroot.path().display(),
        generation % 2
    ))
}

/// What wrk reported.
#[derive(Debug, Default, PartialEq, Eq)]
struct WrkReport {
    requests: u64,
    /// All socket errors: connect, read, write, timeout.
    socket_errors: u64,
    read_errors: u64,
    non_2xx_3xx: u64,
}

/// Parses wrk's text summary. wrk prints the socket error and non-2xx lines only when the
/// counts are not zero, so their absence means zero.
fn parse_wrk(output: &str) -> Option<WrkReport> {
    let mut report = WrkReport::default();
    let mut saw_requests = false;
    for line in output.lines().map(str::trim) {
        if let Some((count, _)) = line.split_once(" requests in ") {
            report.requests = count.trim().parse().ok()?;
            saw_requests = true;
        } else if let Some(errors) = line.strip_prefix("Socket errors:") {
            // "connect 0, read 1, write 0, timeout 0"
            for part in errors.split(',') {
                let mut words = part.split_whitespace();
                let kind = words.next()?;
                let n: u64 = words.next()?.parse().ok()?;
                report.socket_errors += n;
                if kind == "read" {
                    report.read_errors = n;
                }
            }
        } else if let Some(count) = line.strip_prefix("Non-2xx or 3xx responses:") {
            report.non_2xx_3xx = count.trim().parse().ok()?;
        }
    }
    saw_requests.then_some(report)
}

/// How wrk uses its connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `Connection: close`: every request opens a connection.
    NewConnections,
    /// wrk's default, every connection reused.
    KeepAlive,
}

fn run_under_load(kind: Kind, mode: Mode) {
    let Some(wrk) = support::wrk_binary() else {
        return;
    };
    let docroot = TempDir::new("load-docroot");
    let kb: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
    docroot.write("root0/1kb.bin", &kb);
    docroot.write("root1/1kb.bin", &kb);
    let Some(server) = Server::start(kind, 1, &config(&docroot, 0)) else {
        return;
    };
    let url = format!("http://127.0.0.1:{}/1kb.bin", server.port(0));
    let child = Command::new(wrk)
        .args([
            "-t2",
            "-c20",
            &format!("-d{RUN_SECS}s"),
            "--timeout",
            WRK_TIMEOUT,
        ])
        .args(match mode {
            Mode::NewConnections => &["-H", "Connection: close"][..],
            Mode::KeepAlive => &[][..],
        })
        .arg(&url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wrk");
    // Paced, not synchronising: the reloads are spread over the run.
    let spacing = Duration::from_millis(RUN_SECS * 1000 / u64::from(RELOADS + 1));
    for generation in 1..=RELOADS {
        thread::sleep(spacing);
        server.write_config(&config(&docroot, generation));
        server.signal(libc::SIGHUP);
    }
    let output = child.wait_with_output().expect("wait for wrk");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{kind}: wrk failed: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report =
        parse_wrk(&text).unwrap_or_else(|| panic!("{kind}: unreadable wrk output:\n{text}"));
    if kind == Kind::Nginx && mode == Mode::KeepAlive {
        assert_eq!(
            report.socket_errors, report.read_errors,
            "{kind} {mode:?}: errors other than read: {report:?}\n{text}"
        );
        eprintln!(
            "{kind} {mode:?}: {} read errors (keep-alive close race)",
            report.read_errors
        );
    } else {
        assert_eq!(
            report.socket_errors, 0,
            "{kind} {mode:?}: {report:?}\n{text}"
        );
    }
    assert_eq!(report.non_2xx_3xx, 0, "{kind}: {report:?}\n{text}");
    assert!(report.requests > MIN_REQUESTS, "{kind}: {report:?}\n{text}");
    // A reload is applied asynchronously after its signal: wait for the last one, boundedly.
    let want = RELOADS.to_string();
    let generation = || {
        support::get(server.port(0), "/1kb.bin")
            .ok()
            .and_then(|r| r.header("x-generation").map(str::to_string))
    };
    assert!(
        support::wait_until(RELOAD_DEADLINE, || generation().as_deref()
            == Some(want.as_str())),
        "{kind}: last configuration not in force: {:?}",
        generation()
    );
    if kind == Kind::Nginx {
        let reloads = server
            .error_log()
            .lines()
            .filter(|l| l.contains("SIGHUP"))
            .count();
        assert!(
            reloads >= RELOADS as usize,
            "{kind}: only {reloads} reloads logged"
        );
    }
}

#[test]
fn nginx_reloads_under_load() {
    if support::nginx_binary().is_some() {
        run_under_load(Kind::Nginx, Mode::NewConnections);
        run_under_load(Kind::Nginx, Mode::KeepAlive);
    }
}

#[test]
fn portcullis_reloads_under_load_without_errors() {
    if support::only_nginx() {
        support::skip(&format!(
            "portcullis side ({} is set)",
            support::ONLY_NGINX_ENV
        ));
        return;
    }
    run_under_load(Kind::Portcullis, Mode::NewConnections);
    run_under_load(Kind::Portcullis, Mode::KeepAlive);
}

#[test]
fn wrk_summary_parsing() {
    let clean = "Running 4s test @ http://127.0.0.1:1/1kb.bin\n  2 threads and 20 connections\n\
                 \x20 54321 requests in 4.00s, 60.00MB read\nRequests/sec:  13580.25\n";
    assert_eq!(
        parse_wrk(clean),
        Some(WrkReport {
            requests: 54321,
            socket_errors: 0,
            read_errors: 0,
            non_2xx_3xx: 0
        })
    );
    let dirty = "  100 requests in 4.00s, 1.00MB read\n  Socket errors: connect 1, read 2, write 3, timeout 4\n\
                 \x20 Non-2xx or 3xx responses: 7\n";
    assert_eq!(
        parse_wrk(dirty),
        Some(WrkReport {
            requests: 100,
            socket_errors: 10,
            read_errors: 2,
            non_2xx_3xx: 7
        })
    );
    assert_eq!(parse_wrk("garbage"), None);
}
