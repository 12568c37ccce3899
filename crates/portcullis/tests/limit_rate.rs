//! `limit_rate`, `limit_rate_after`, `$limit_rate` and `X-Accel-Limit-Rate`: how long a
//! response takes at a rate, for a file, a proxied body and over HTTP/2, against nginx on
//! the same configuration. The rate is the feature, so the time is what is compared: each
//! case lands in the same whole second under both servers (nginx's pace is counted in whole
//! seconds of the request's life), with slack for a loaded machine.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{kinds, main_config, skip, Kind, Server};

/// The file every case sends: 100 KB.
const SIZE: usize = 100 * 1024;

/// How far apart the two servers' times may be.
const SLACK: Duration = Duration::from_millis(600);

fn curl_available() -> bool {
    Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `curl` on `url` with `extra` arguments, printing its status, size and total time.
fn spawn_fetch(url: &str, extra: &[&str]) -> std::process::Child {
    Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{size_download} %{time_total}",
        ])
        .args(extra)
        .arg(url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run curl")
}

/// What [`spawn_fetch`]'s curl printed: its status and size, and the time taken.
fn fetched(child: std::process::Child) -> (String, Duration) {
    let out = child.wait_with_output().expect("wait for curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut parts = text.split_whitespace();
    let status = format!(
        "{} {}",
        parts.next().unwrap_or("-"),
        parts.next().unwrap_or("-")
    );
    let secs: f64 = parts.next().and_then(|t| t.parse().ok()).unwrap_or(-1.0);
    (status, Duration::from_secs_f64(secs.max(0.0)))
}

/// What one server did: each case's status and time, its access log and its errors.
type Seen = (Kind, Vec<(String, Duration)>, String, String);

#[test]
fn responses_go_at_the_rate_as_nginxs() {
    if !curl_available() {
        skip("curl is not installed");
        return;
    }
    let http = "
    log_format rate '$uri $limit_rate';
    server {
        listen 127.0.0.1:{PORT0};
        listen 127.0.0.1:{PORT1} http2;
        root {PREFIX}/html;
        access_log {PREFIX}/rate.log rate;
        location /plain/ { alias {PREFIX}/html/; }
        location /limited/ { limit_rate 40k; alias {PREFIX}/html/; }
        location /after/ { limit_rate 40k; limit_rate_after 60k; alias {PREFIX}/html/; }
        location /by-arg/ { limit_rate $arg_rate; alias {PREFIX}/html/; }
        location /by-set/ {
            if ($arg_slow) { set $limit_rate 40k; }
            alias {PREFIX}/html/;
        }
        location /bad-set/ { set $limit_rate fast; alias {PREFIX}/html/; }
        location /proxied/ { limit_rate 40k; proxy_pass http://127.0.0.1:{PORT2}/; }
        location /accel/ { proxy_pass http://127.0.0.1:{PORT2}/accel/; }
        location /accel-ignored/ {
            proxy_ignore_headers X-Accel-Limit-Rate;
            proxy_pass http://127.0.0.1:{PORT2}/accel/;
        }
    }
    server {
        listen 127.0.0.1:{PORT2};
        root {PREFIX}/html;
        access_log off;
        location /accel/ { add_header X-Accel-Limit-Rate 40960; alias {PREFIX}/html/; }
    }
";
    let cases: &[(&str, &[&str])] = &[
        ("/plain/f", &[]),
        ("/limited/f", &[]),
        ("/after/f", &[]),
        ("/by-arg/f?rate=40k", &[]),
        ("/by-arg/f?rate=fast", &[]),
        ("/by-set/f?slow=1", &[]),
        ("/by-set/f", &[]),
        ("/bad-set/f", &[]),
        ("/proxied/f", &[]),
        ("/accel/f", &[]),
        ("/accel-ignored/f", &[]),
        ("h2 /limited/f", &["--http2-prior-knowledge"]),
    ];
    let mut seen: Vec<Seen> = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 3, &main_config(http)) else {
            continue;
        };
        std::fs::create_dir_all(server.path("html")).unwrap();
        std::fs::write(server.path("html/f"), vec![b'x'; SIZE]).unwrap();
        // All at once: each request has a pace of its own.
        let running: Vec<_> = cases
            .iter()
            .map(|(case, extra)| {
                let (port, path) = match case.strip_prefix("h2 ") {
                    Some(path) => (server.port(1), path),
                    None => (server.port(0), *case),
                };
                spawn_fetch(&format!("http://127.0.0.1:{port}{path}"), extra)
            })
            .collect();
        let results: Vec<(String, Duration)> = cases
            .iter()
            .zip(running)
            .map(|((case, _), child)| {
                let (status, took) = fetched(child);
                (format!("{case}: {status}"), took)
            })
            .collect();
        // A request is logged just after its response went out: every one, before reading.
        let log_has = support::wait_until(Duration::from_secs(5), || {
            support::read_lossy(&server.path("rate.log"))
                .lines()
                .count()
                >= cases.len()
        });
        assert!(log_has, "{kind}: access log");
        let log = support::read_lossy(&server.path("rate.log"));
        let errors = server.error_log();
        let invalid: Vec<&str> = errors
            .lines()
            .filter(|l| l.contains("invalid"))
            .map(|l| l.split_once("[error] ").map_or(l, |(_, r)| r))
            .map(|l| l.split_once(": ").map_or(l, |(_, r)| r))
            .map(|l| l.split(',').next().unwrap_or(l))
            // The connection's number, which the order of the requests decides.
            .map(|l| l.split_once(' ').map_or(l, |(_, r)| r))
            .collect();
        // Lines in the order the responses ended: sorted, to compare.
        let mut log: Vec<&str> = log.lines().collect();
        log.sort_unstable();
        let mut invalid = invalid;
        invalid.sort_unstable();
        seen.push((kind, results, log.join("\n"), invalid.join("\n")));
    }
    if std::env::var_os("SHOW").is_some() {
        for (kind, results, log, invalid) in &seen {
            eprintln!("{kind}:");
            for (line, took) in results {
                eprintln!("  {line} in {took:?}");
            }
            eprintln!("{log}{invalid}");
        }
    }
    let Some((_, ours, log, invalid)) = seen.iter().find(|s| s.0 == Kind::Portcullis) else {
        return;
    };
    // What the rate makes of 100 KB at 40 KB/s: the bytes of the third second go at 2 s.
    let slow = |line: &str| {
        let (_, took) = ours
            .iter()
            .find(|(l, _)| l.starts_with(&format!("{line}: ")))
            .unwrap();
        *took
    };
    for case in [
        "/limited/f",
        "/by-arg/f?rate=40k",
        "/by-set/f?slow=1",
        "/proxied/f",
        "/accel/f",
        "h2 /limited/f",
    ] {
        let took = slow(case);
        assert!(
            took >= Duration::from_millis(1900) && took < Duration::from_millis(3000),
            "{case}: {took:?}"
        );
    }
    // 60 KB free, then 40 KB in the first second, and the head in the next.
    let after = slow("/after/f");
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_millis(2000),
        "/after/f: {after:?}"
    );
    for case in [
        "/plain/f",
        "/by-arg/f?rate=fast",
        "/by-set/f",
        "/bad-set/f",
        "/accel-ignored/f",
    ] {
        assert!(
            slow(case) < Duration::from_millis(900),
            "{case}: {:?}",
            slow(case)
        );
    }
    for (line, _) in ours {
        assert!(line.ends_with(&format!("200 {SIZE}")), "{line}");
    }
    support::expect_lines(
        &log.lines().map(String::from).collect::<Vec<_>>(),
        &[
            "/limited/f 40960",
            "/by-set/f 40960",
            "/by-set/f 0",
            "/plain/f 0",
            "/proxied/f 40960",
            "/accel/f 40960",
        ],
    );
    assert!(invalid.contains("invalid size \"fast\""), "{invalid}");
    assert!(
        invalid.contains("invalid $limit_rate \"fast\""),
        "{invalid}"
    );
    if let [(_, nginx, nginx_log, nginx_invalid), _] = seen.as_slice() {
        for ((n, nt), (o, ot)) in nginx.iter().zip(ours) {
            assert_eq!(n, o);
            // nginx counts the rate in whole seconds from the second its request began in
            // (`ngx_time() - r->start_sec + 1`): begun late in a second, it sends the next
            // second's share early, so it may finish up to a second before the rate says.
            // portcullis keeps the rate to the millisecond, never ahead of nginx.
            let (early, late) = match nt > ot {
                true => (*nt - *ot, Duration::ZERO),
                false => (Duration::ZERO, *ot - *nt),
            };
            assert!(
                early <= SLACK && late <= SLACK + Duration::from_secs(1),
                "{n}: nginx {nt:?}, portcullis {ot:?}"
            );
        }
        assert_eq!(nginx_log, log);
        assert_eq!(nginx_invalid, invalid);
    }
}
