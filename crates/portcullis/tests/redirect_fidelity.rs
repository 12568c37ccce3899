//! The redirects nginx makes and the fields around them, compared with nginx on the same
//! configuration: how a relative Location is made absolute (`absolute_redirect`,
//! `port_in_redirect`, `server_name_in_redirect`) for a directory's redirect, a location
//! that proxies asked for without its slash, `rewrite ... redirect`, `return` and
//! `error_page`; `expires @time`; `proxy_redirect off` and `default` on an upstream's
//! Location and Refresh; `proxy_next_upstream http_404`; and the Host fields nginx refuses
//! or normalises.
//!
//! Each test writes what it sees as lines (ports written as `{PORTn}`) and compares them with
//! nginx's; a few of portcullis's lines are also checked against the answers nginx gave.

mod support;
#[path = "support/proxy.rs"]
mod upstreams;

use support::{kinds, main_config, Kind, Response, Server};
use upstreams::{ok, Reply, Upstream};

/// The programs to compare. These tests are comparisons: without nginx they fail.
fn both() -> Vec<Kind> {
    let kinds = kinds();
    assert!(
        kinds.contains(&Kind::Nginx),
        "nginx not found (apt-get install nginx): these tests compare portcullis with it"
    );
    kinds
}

/// `text` with each of the server's ports written `{PORTn}`, so that both programs' lines
/// compare although they listen on different ports. Only whole numbers are replaced.
fn unport(text: &str, ports: &[u16]) -> String {
    let mut out = String::new();
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String| {
        match ports.iter().position(|p| p.to_string() == *digits) {
            Some(i) => out.push_str(&format!("{{PORT{i}}}")),
            None => out.push_str(digits),
        }
        digits.clear();
    };
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            flush(&mut digits, &mut out);
            out.push(c);
        }
    }
    flush(&mut digits, &mut out);
    out
}

/// The ports a server listens on.
fn ports(server: &Server, n: usize) -> Vec<u16> {
    (0..n).map(|i| server.port(i)).collect()
}

/// Sends `raw` to `port` and reads the answer: `None` when the connection ends without one,
/// as nginx ends some after a malformed request.
fn exchange(port: u16, raw: &str) -> Option<Response> {
    support::request(port, raw).ok()
}

/// The locations every server of the redirect test has.
const REDIRECT_LOCATIONS: &str = "
        root {PREFIX}/html;
        location /auto/ { proxy_pass http://127.0.0.1:9; }
        location /rw { rewrite ^ /target redirect; }
        location /rwp { rewrite ^/rwp(.*)$ /target$1 permanent; }
        location /rwrel { rewrite ^ target redirect; }
        location /ret { return 301 /x; }
        location /ret302 { return 302 /x?a=b; }
        location /retabs { return 301 http://elsewhere.test/x; }
        location /ep/ { error_page 404 =301 /x; }
        location /epurl/ { error_page 404 =301 http://elsewhere.test/x; }
        location /epnamed/ { error_page 404 =302 @named; }
        location @named { return 200 \"named\\n\"; }
        location = /x { return 200 \"x\\n\"; }
        location /locoff { absolute_redirect off; return 301 /x; }
";

#[test]
fn redirects_are_made_absolute_as_nginx_makes_them() {
    let servers = [
        ("default", "server_name main.test alias.test;"),
        (
            "absolute_off",
            "server_name main.test alias.test; absolute_redirect off;",
        ),
        (
            "port_off",
            "server_name main.test alias.test; port_in_redirect off;",
        ),
        (
            "name_on",
            "server_name main.test alias.test; server_name_in_redirect on;",
        ),
        (
            "name_on_port_off",
            "server_name main.test alias.test; server_name_in_redirect on; \
             port_in_redirect off;",
        ),
        ("unnamed_name_on", "server_name_in_redirect on;"),
        (
            "wildcard_name_on",
            "server_name *.wild.test main.test; server_name_in_redirect on;",
        ),
        (
            "regex_name_on",
            "server_name ~^(?<sub>.+)\\.re\\.test$ main.test; server_name_in_redirect on;",
        ),
    ];
    let mut http = String::new();
    for (i, (_, settings)) in servers.iter().enumerate() {
        http.push_str(&format!(
            "    server {{\n        listen 127.0.0.1:{{PORT{i}}};\n        {settings}\n\
             {REDIRECT_LOCATIONS}    }}\n"
        ));
    }
    let paths = [
        "/dir",
        "/dir?a=1",
        "/auto",
        "/auto?q=2",
        "/rw",
        "/rwp/y",
        "/rwrel",
        "/ret",
        "/ret302",
        "/retabs",
        "/ep/missing",
        "/epurl/missing",
        "/epnamed/missing",
        "/locoff",
    ];
    let hosts = [
        (
            "host",
            "GET {PATH} HTTP/1.1\r\nHost: main.test\r\nConnection: close\r\n\r\n",
        ),
        (
            "host:port",
            "GET {PATH} HTTP/1.1\r\nHost: main.test:8080\r\nConnection: close\r\n\r\n",
        ),
        (
            "alias",
            "GET {PATH} HTTP/1.1\r\nHost: alias.test\r\nConnection: close\r\n\r\n",
        ),
        (
            "ipv6",
            "GET {PATH} HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: close\r\n\r\n",
        ),
        (
            "other",
            "GET {PATH} HTTP/1.1\r\nHost: Other.TEST.\r\nConnection: close\r\n\r\n",
        ),
        ("no host 1.0", "GET {PATH} HTTP/1.0\r\n\r\n"),
        (
            "absolute-form",
            "GET http://abs.test:81{PATH} HTTP/1.1\r\nHost: main.test\r\nConnection: close\r\n\r\n",
        ),
    ];
    let mut seen = Vec::new();
    for kind in both() {
        let Some(server) = Server::start(kind, servers.len(), &main_config(&http)) else {
            continue;
        };
        std::fs::create_dir_all(server.path("html/dir")).expect("mkdir");
        let ports = ports(&server, servers.len());
        let mut lines = Vec::new();
        for (i, (label, _)) in servers.iter().enumerate() {
            for (host, raw) in hosts {
                for path in paths {
                    let raw = raw.replace("{PATH}", path);
                    let line = match exchange(server.port(i), &raw) {
                        Some(r) => format!(
                            "{} {:?} {}",
                            r.status,
                            r.header("location").unwrap_or("-"),
                            // Bodies but nginx's own pages, whose text is compared elsewhere.
                            if r.body_text().contains("<html>") {
                                String::new()
                            } else {
                                r.body_text()
                            }
                            .trim()
                        ),
                        None => "closed".to_string(),
                    };
                    lines.push(unport(&format!("{label} [{host}] {path}: {line}"), &ports));
                }
            }
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "default [host] /dir: 301 \"http://main.test:{PORT0}/dir/\"",
                    "default [host:port] /auto?q=2: 301 \"http://main.test:{PORT0}/auto/?q=2\"",
                    "default [no host 1.0] /rw: 302 \"http://127.0.0.1:{PORT0}/target\"",
                    "absolute_off [host] /dir: 301 \"/dir/\"",
                    "port_off [alias] /ret: 301 \"http://alias.test/x\"",
                    "name_on [alias] /rwp/y: 301 \"http://main.test:{PORT3}/target/y\"",
                    "name_on_port_off [no host 1.0] /auto: 301 \"http://main.test/auto/\"",
                    "unnamed_name_on [host] /ret: 301 \"http://:{PORT5}/x\"",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// Seconds since the epoch of an HTTP date (`Thu, 01 Jan 1970 00:00:01 GMT`).
fn http_date_secs(date: &str) -> i64 {
    let parts: Vec<&str> = date.split_whitespace().collect();
    assert!(
        parts.len() == 6 && parts[5] == "GMT",
        "not an HTTP date: {date:?}"
    );
    let day: i64 = parts[1].parse().expect("day");
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == parts[2])
    .expect("month") as i64
        + 1;
    let year: i64 = parts[3].parse().expect("year");
    let hms: Vec<i64> = parts[4]
        .split(':')
        .map(|p| p.parse().expect("time"))
        .collect();
    // Days from 1970-01-01 to the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + hms[0] * 3600 + hms[1] * 60 + hms[2]
}

/// The time zone both servers run in for the daily `expires`, in POSIX form (no time zone
/// files needed): India's, half an hour off whole hours and without summer time, so that a
/// time of day taken in UTC shows.
const EXPIRES_TZ: &str = "IST-5:30";
const EXPIRES_TZ_OFFSET: i64 = 5 * 3600 + 1800;

#[test]
fn daily_expires_as_nginx_sets_it() {
    let docroot = support::TempDir::new("expires-daily");
    let file = docroot.write("f.txt", "hi\n");
    let f = file.display();
    // Two times of day a little after and a little before now in the servers' zone, so that
    // one expires today and the other tomorrow whatever the hour the test runs.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let local_minute = (now + EXPIRES_TZ_OFFSET).rem_euclid(86_400) / 60;
    let later = (local_minute + 90) % 1440;
    let earlier = (local_minute + 1440 - 90) % 1440;
    let (later, earlier) = (
        format!("@{}h{}m", later / 60, later % 60),
        format!("@{}h{}m", earlier / 60, earlier % 60),
    );
    let http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        \
         location /daily {{ alias {f}; expires @15h30m; }}\n        \
         location /midnight {{ alias {f}; expires @0h; }}\n        \
         location /seconds {{ alias {f}; expires @3661; }}\n        \
         location /later {{ alias {f}; expires {later}; }}\n        \
         location /earlier {{ alias {f}; expires {earlier}; }}\n        \
         location /var {{ set $e @6h15m; alias {f}; expires $e; }}\n        \
         location /notfound {{ expires @15h30m; return 404; }}\n    }}\n"
    );
    let paths = [
        "/daily",
        "/midnight",
        "/seconds",
        "/later",
        "/earlier",
        "/var",
        "/notfound",
    ];
    let mut seen = Vec::new();
    for kind in both() {
        let Some(server) =
            Server::start_with_env(kind, 1, &main_config(&http), &[("TZ", EXPIRES_TZ)])
        else {
            continue;
        };
        let mut lines = Vec::new();
        for path in paths {
            let r = support::get(server.port(0), path).expect("GET");
            lines.push(format!("{path}: {}", r.status));
            let (Some(expires), Some(cc)) = (r.header("expires"), r.header("cache-control")) else {
                lines.push(format!(
                    "  expires {:?} cache-control {:?}",
                    r.header("expires"),
                    r.header("cache-control")
                ));
                continue;
            };
            // The date varies with the time the request came; its time of day does not, and
            // the age is what is left until then from the response's own Date.
            let date = http_date_secs(r.header("date").expect("Date"));
            let at = http_date_secs(expires);
            let age: i64 = cc
                .strip_prefix("max-age=")
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("{kind} {path}: Cache-Control {cc:?}"));
            lines.push(format!("  expires at {} GMT", &expires[17..25]));
            lines.push(format!("  max-age is Expires - Date: {}", date + age == at));
            lines.push(format!("  within a day: {}", age > 0 && age <= 86_400));
            // Whether a fixed time of day is still to come today depends on when the test
            // runs; for the two times around now it does not.
            if ["/later", "/earlier"].contains(&path) {
                lines.push(format!(
                    "  today in the zone: {}",
                    (at + EXPIRES_TZ_OFFSET).div_euclid(86_400)
                        == (date + EXPIRES_TZ_OFFSET).div_euclid(86_400)
                ));
            }
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "/daily: 200\n  expires at 10:00:00 GMT\n  max-age is Expires - Date: true",
                    "/midnight: 200\n  expires at 18:30:00 GMT",
                    "/seconds: 200\n  expires at 19:31:01 GMT",
                    "/var: 200\n  expires at 00:45:00 GMT",
                    &format!(
                        "within a day: true\n  today in the zone: {}\n/earlier",
                        local_minute + 90 < 1440
                    ),
                    &format!(
                        "within a day: true\n  today in the zone: {}\n/var",
                        local_minute < 90
                    ),
                    "/notfound: 404\n  expires None cache-control None",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

#[test]
fn proxy_redirect_off_and_default_as_nginx() {
    // The upstream redirects to itself under the path it was asked for (`/rel...` with a
    // relative Location, `/other...` to another host), in Location and in Refresh.
    let upstream = support::head_upstream(|_, head| {
        let head = String::from_utf8_lossy(head);
        let target = head.split(' ').nth(1).unwrap_or("/").to_owned();
        let host = head
            .lines()
            .find_map(|l| l.strip_prefix("Host: "))
            .unwrap_or("")
            .to_owned();
        let location = if target.contains("/rel") {
            target
        } else if target.contains("/other") {
            format!("http://other.test{target}")
        } else {
            format!("http://{host}{target}")
        };
        format!(
            "HTTP/1.1 302 Found\r\nLocation: {location}\r\nRefresh: 3; url={location}\r\n\
             Content-Length: 0\r\n\r\n"
        )
        .into_bytes()
    });
    let up = format!("127.0.0.1:{upstream}");
    let locations = format!(
        "        location /one/ {{ proxy_pass http://{up}/two/; }}\n        \
         location /def/ {{ proxy_pass http://{up}/two/; proxy_redirect default; }}\n        \
         location /off/ {{ proxy_pass http://{up}/two/; proxy_redirect off; }}\n        \
         location /more/ {{ proxy_pass http://{up}/two/; proxy_redirect default; \
         proxy_redirect http://other.test/ /o/; }}\n        \
         location /bare/ {{ proxy_pass http://{up}; }}\n        \
         location /named/ {{ proxy_pass http://{up}/two/; proxy_set_header Host back.test; }}\n"
    );
    let http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        server_name front.test;\n\
         {locations}    }}\n    \
         server {{\n        listen 127.0.0.1:{{PORT1}};\n        absolute_redirect off;\n\
         {locations}    }}\n    \
         server {{\n        listen 127.0.0.1:{{PORT2}};\n        server_name front.test;\n        \
         server_name_in_redirect on;\n        port_in_redirect off;\n{locations}    }}\n"
    );
    let paths = [
        "/one/x?a=1",
        "/one/rel",
        "/one/other",
        "/def/x",
        "/def/rel",
        "/off/x",
        "/off/rel",
        "/more/x",
        "/more/other/y",
        "/more/rel",
        "/bare/x",
        "/bare/rel",
        "/named/x",
    ];
    let mut seen = Vec::new();
    for kind in both() {
        let Some(server) = Server::start(kind, 3, &main_config(&http)) else {
            continue;
        };
        let ports = ports(&server, 3);
        let mut lines = Vec::new();
        for i in 0..3 {
            for path in paths {
                let raw = format!(
                    "GET {path} HTTP/1.1\r\nHost: Front.test:8080\r\nConnection: close\r\n\r\n"
                );
                let r = support::request(server.port(i), &raw).expect("answer");
                // The fields' order too: nginx writes a Location it made absolute in its own
                // place, any other in the upstream's.
                let names: Vec<&str> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
                let line = format!(
                    "[{i}] {path}: {} Location {:?} Refresh {:?} ({})",
                    r.status,
                    r.header("location").unwrap_or("-"),
                    r.header("refresh").unwrap_or("-"),
                    names.join(" ")
                );
                lines.push(unport(&line, &ports).replace(&upstream.to_string(), "UP"));
            }
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "[0] /def/x: 302 Location \"http://front.test:{PORT0}/def/x\" \
                     Refresh \"3; url=/def/x\"",
                    "[0] /off/x: 302 Location \"http://127.0.0.1:UP/two/x\"",
                    "[1] /def/x: 302 Location \"/def/x\"",
                    "[0] /one/rel: 302 Location \"/two/rel\"",
                    "[0] /more/x: 302 Location \"http://front.test:{PORT0}/more/x\"",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

#[test]
fn next_upstream_on_404_as_nginx() {
    // Each location's group is two upstreams of its own: the first answers 404, the second
    // 200, or (`/both`) both 404.
    let locations = [
        ("/plain", "", false),
        ("/retry", "proxy_next_upstream http_404;", false),
        (
            "/retry-error",
            "proxy_next_upstream error timeout http_404;",
            false,
        ),
        ("/both", "proxy_next_upstream http_404;", true),
        ("/off", "proxy_next_upstream off;", false),
        // A POST is not sent twice (nginx's non_idempotent is not set).
        ("/post", "proxy_next_upstream http_404;", false),
        (
            "/post-retried",
            "proxy_next_upstream http_404 non_idempotent;",
            false,
        ),
    ];
    let mut seen = Vec::new();
    for kind in both() {
        let mut groups = Vec::new();
        let mut http = String::new();
        for (i, (path, directive, both_404)) in locations.iter().enumerate() {
            let not_found = |name: &'static str| {
                move |_: &upstreams::Exchange| {
                    Reply::Send(
                        format!(
                            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n\
                             Content-Length: {}\r\n\r\n{name}\n",
                            name.len() + 1
                        )
                        .into_bytes(),
                    )
                }
            };
            let first = Upstream::start(not_found("first 404"));
            let second = if *both_404 {
                Upstream::start(not_found("second 404"))
            } else {
                Upstream::start(|_| Reply::Send(ok("second 200\n", "")))
            };
            http.push_str(&format!(
                "    upstream g{i} {{ server {}; server {}; }}\n",
                first.addr(),
                second.addr()
            ));
            http.push_str(&format!(
                "    server {{\n        listen 127.0.0.1:{{PORT{i}}};\n        \
                 location {path} {{ proxy_pass http://g{i}; {directive} }}\n    }}\n"
            ));
            groups.push((first, second));
        }
        let Some(server) = Server::start(kind, locations.len(), &main_config(&http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for (i, (path, _, _)) in locations.iter().enumerate() {
            // Three requests: round robin starts with the first peer, then alternates.
            for n in 1..=3 {
                let r = if path.starts_with("/post") {
                    support::request(
                        server.port(i),
                        &format!(
                            "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
                             Content-Length: 2\r\n\r\nhi"
                        ),
                    )
                } else {
                    support::get(server.port(i), path)
                }
                .expect("answer");
                lines.push(format!(
                    "{path} #{n}: {} {}",
                    r.status,
                    r.body_text().trim()
                ));
            }
            let (first, second) = &groups[i];
            lines.push(format!(
                "{path}: first saw {}, second saw {}",
                first.requests(),
                second.requests()
            ));
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "/plain #1: 404 first 404",
                    "/retry #1: 200 second 200",
                    "/both #1: 404 second 404",
                    "/post #1: 404 first 404",
                    "/post-retried #1: 200 second 200",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

#[test]
fn host_fields_nginx_refuses_or_normalises() {
    let http = "
    server {
        listen 127.0.0.1:{PORT0} default_server;
        server_name default.test;
        location / { return 200 \"default host=$host server=$server_name\\n\"; }
    }
    server {
        listen 127.0.0.1:{PORT0};
        server_name example.com [::1] 127.0.0.1;
        location / { return 200 \"example host=$host server=$server_name\\n\"; }
    }
";
    let cases: &[(&str, &str)] = &[
        ("port", "GET / HTTP/1.1\r\nHost: example.com:8080\r\n"),
        (
            "letters port",
            "GET / HTTP/1.1\r\nHost: example.com:abc\r\n",
        ),
        ("big port", "GET / HTTP/1.1\r\nHost: example.com:99999\r\n"),
        ("empty port", "GET / HTTP/1.1\r\nHost: example.com:\r\n"),
        ("ipv6", "GET / HTTP/1.1\r\nHost: [::1]\r\n"),
        ("ipv6 port", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n"),
        ("ipv6 open", "GET / HTTP/1.1\r\nHost: [::1\r\n"),
        ("ipv6 letters", "GET / HTTP/1.1\r\nHost: [zz]\r\n"),
        ("ipv6 trailing", "GET / HTTP/1.1\r\nHost: [::1]x\r\n"),
        ("ipv4", "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"),
        ("empty 1.1", "GET / HTTP/1.1\r\nHost: \r\n"),
        ("empty 1.0", "GET / HTTP/1.0\r\nHost: \r\n"),
        ("none 1.1", "GET / HTTP/1.1\r\n"),
        ("none 1.0", "GET / HTTP/1.0\r\n"),
        (
            "two",
            "GET / HTTP/1.1\r\nHost: example.com\r\nHost: other.test\r\n",
        ),
        (
            "two same",
            "GET / HTTP/1.1\r\nHost: example.com\r\nHost: example.com\r\n",
        ),
        ("trailing dot", "GET / HTTP/1.1\r\nHost: example.com.\r\n"),
        ("two dots", "GET / HTTP/1.1\r\nHost: example..com\r\n"),
        ("trailing dots", "GET / HTTP/1.1\r\nHost: example.com..\r\n"),
        ("leading dot", "GET / HTTP/1.1\r\nHost: .example.com\r\n"),
        ("dot", "GET / HTTP/1.1\r\nHost: .\r\n"),
        ("uppercase", "GET / HTTP/1.1\r\nHost: EXAMPLE.Com\r\n"),
        ("slash", "GET / HTTP/1.1\r\nHost: a/b\r\n"),
        ("backslash", "GET / HTTP/1.1\r\nHost: a\\b\r\n"),
        ("space inside", "GET / HTTP/1.1\r\nHost: exa mple.com\r\n"),
        ("underscore", "GET / HTTP/1.1\r\nHost: ex_ample.com\r\n"),
        ("two colons", "GET / HTTP/1.1\r\nHost: example.com:1:2\r\n"),
        ("percent", "GET / HTTP/1.1\r\nHost: ex%41mple.com\r\n"),
        ("past ascii", "GET / HTTP/1.1\r\nHost: ex\u{e4}mple.com\r\n"),
        ("tab after", "GET / HTTP/1.1\r\nHost: example.com\t\r\n"),
        (
            "absolute-form wins",
            "GET http://example.com/ HTTP/1.1\r\nHost: other.test\r\n",
        ),
        (
            "absolute-form bad port",
            "GET http://example.com:abc/ HTTP/1.1\r\nHost: example.com\r\n",
        ),
    ];
    let mut seen = Vec::new();
    for kind in both() {
        let Some(server) = Server::start(kind, 1, &main_config(http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for (label, head) in cases {
            let raw = format!("{head}Connection: close\r\n\r\n");
            let line = match exchange(server.port(0), &raw) {
                Some(r) if r.status == 200 => format!("200 {}", r.body_text().trim()),
                Some(r) => format!("{} {}", r.status, r.reason),
                None => "closed without an answer".to_string(),
            };
            lines.push(format!("{label}: {line}"));
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "uppercase: 200 example host=example.com",
                    "trailing dot: 200 example host=example.com",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
