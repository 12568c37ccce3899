//! `geo`, compared with nginx on the same configuration: the most specific network wins
//! whatever the order, `default`, `delete`, a network written twice, IPv6, an address from
//! a variable (and one that is not an address), `include`, the address `set_real_ip_from`
//! took; `ranges` and `proxy`.

mod support;

use support::{kinds, Server};

const CONFIG: &str = r#"
    geo $zone {
        default       none;
        10.0.0.0/8    ten;
        10.1.0.0/16   ten-one;
        10.1.2.3      host;
        10.2.0.0/16   dropped;
        delete        10.2.0.0/16;
        192.168.0.0/16 first;
        192.168.0.0/16 second;
        2001:db8::/32 doc6;
        include       {INCLUDE};
    }
    geo $arg_ip $by_arg {
        127.0.0.0/8   loopback;
        0.0.0.0/0     anywhere;
        1.2.3.4       exact;
    }
    server {
        listen 127.0.0.1:{PORT0};
        set_real_ip_from 127.0.0.1;
        location / { return 200 "[$zone][$by_arg]"; }
    }
"#;

#[test]
fn geo_values_are_nginx_s() {
    let addresses = [
        "10.9.9.9",
        "10.1.9.9",
        "10.1.2.3",
        "10.2.0.1",
        "192.168.1.1",
        "2001:db8::1",
        "172.16.0.1",
        "8.8.8.8",
    ];
    let args = ["127.0.0.2", "1.2.3.4", "bogus", ""];
    // The included entries, read at load.
    let include = support::TempDir::new("geo-include");
    let file = include.write("geo.conf", "172.16.0.0/12 included;\n");
    let http = CONFIG.replace("{INCLUDE}", &file.display().to_string());
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let mut got = Vec::new();
        for addr in addresses {
            for arg in args {
                let r = support::request(
                    server.port(0),
                    &format!("GET /?ip={arg} HTTP/1.1\r\nHost: localhost\r\nX-Real-IP: {addr}\r\nConnection: close\r\n\r\n"),
                )
                .expect("request");
                got.push(format!("{addr} {arg} -> {}", r.body_text()));
            }
        }
        let at = |addr: &str, arg: &str| {
            let line = format!("{addr} {arg} -> ");
            got.iter()
                .find_map(|l| l.strip_prefix(&line))
                .unwrap_or_else(|| panic!("{line}"))
                .to_string()
        };
        assert_eq!(at("10.9.9.9", "1.2.3.4"), "[ten][exact]", "{kind}");
        assert_eq!(at("10.1.9.9", "127.0.0.2"), "[ten-one][loopback]", "{kind}");
        // Not an address: 255.255.255.255.
        assert_eq!(at("10.1.2.3", "bogus"), "[host][anywhere]", "{kind}");
        assert_eq!(at("10.2.0.1", "1.2.3.4"), "[ten][exact]", "{kind}");
        assert_eq!(at("192.168.1.1", ""), "[second][anywhere]", "{kind}");
        assert_eq!(at("2001:db8::1", ""), "[doc6][anywhere]", "{kind}");
        assert_eq!(at("172.16.0.1", ""), "[included][anywhere]", "{kind}");
        assert_eq!(at("8.8.8.8", ""), "[none][anywhere]", "{kind}");
        seen.push((kind, got));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}

const RANGES: &str = r#"
    geo $range {
        ranges;
        default                  none;
        10.0.0.0-10.255.255.255  ten;
        ranges;
        10.1.2.0-10.1.2.255      inner;
        10.1.2.0-10.1.2.255      inner-again;
        10.3.0.0-10.3.0.10       low;
        10.3.0.11-10.3.0.20      high;
        10.4.0.0-10.4.0.255      gone;
        delete                   10.4.0.0-10.4.0.255;
        192.168.255.0-192.169.0.255 across;
        127.0.0.1-127.0.0.1      loopback;
    }
    geo $via {
        proxy                    127.0.0.0/8;
        proxy                    10.9.0.0/16;
        default                  other;
        10.0.0.0/8               ten;
        5.5.5.0/24               five;
    }
    geo $via_all {
        proxy                    127.0.0.0/8;
        proxy                    10.9.0.0/16;
        proxy_recursive;
        default                  other;
        10.0.0.0/8               ten;
        5.5.5.0/24               five;
    }
    server {
        listen 127.0.0.1:{PORT0};
        location / { return 200 "[$range][$via][$via_all]"; }
    }
    server {
        listen 127.0.0.1:{PORT1};
        set_real_ip_from 127.0.0.1;
        location / { return 200 "[$range]"; }
    }
"#;

/// `ranges` (nested ranges splitting outer ones, a range again, `delete`, a range across
/// a block of 65,536 addresses, IPv6), and `proxy` with and without `proxy_recursive`.
#[test]
fn geo_ranges_and_proxies_are_nginx_s() {
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &support::main_config(RANGES)) else {
            continue;
        };
        let mut got = Vec::new();
        for real in [
            "10.0.0.1",
            "10.1.2.5",
            "10.1.3.0",
            "10.3.0.10",
            "10.3.0.11",
            "10.3.0.21",
            "10.4.0.1",
            "192.168.255.7",
            "192.169.0.7",
            "192.169.1.0",
            "::1",
            "::ffff:10.1.2.9",
            "8.8.8.8",
        ] {
            let r = support::request(
                server.port(1),
                &format!(
                    "GET / HTTP/1.1\r\nHost: x\r\nX-Real-IP: {real}\r\nConnection: close\r\n\r\n"
                ),
            )
            .expect("request");
            got.push(format!("{real} -> {}", r.body_text()));
        }
        for xff in [
            "",
            "5.5.5.5",
            "5.5.5.5, 10.9.1.1",
            "10.1.1.1, 5.5.5.5, 10.9.1.1",
            "bogus",
            "5.5.5.5, bogus",
        ] {
            let field = if xff.is_empty() {
                String::new()
            } else {
                format!("X-Forwarded-For: {xff}\r\n")
            };
            let r = support::request(
                server.port(0),
                &format!("GET / HTTP/1.1\r\nHost: x\r\n{field}Connection: close\r\n\r\n"),
            )
            .expect("request");
            got.push(format!("xff {xff:?} -> {}", r.body_text()));
        }
        let at = |line: &str| {
            got.iter()
                .find_map(|l| l.strip_prefix(line))
                .unwrap_or_else(|| panic!("{line}"))
                .to_string()
        };
        assert_eq!(at("10.1.2.5 -> "), "[inner-again]", "{kind}");
        assert_eq!(at("10.1.3.0 -> "), "[ten]", "{kind}");
        assert_eq!(
            at("xff \"5.5.5.5, 10.9.1.1\" -> "),
            "[loopback][ten][five]",
            "{kind}"
        );
        seen.push((kind, got));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}

/// A range that crosses the edge of one already there is nginx's error (named by the last
/// it crosses), and so is `ranges` after an entry.
#[test]
fn overlapping_ranges_are_refused_as_nginx_refuses_them() {
    for (http, error) in [
        (
            "geo $g { ranges; 10.0.0.0-10.0.0.20 a; 10.0.0.30-10.0.0.35 c; 10.0.0.10-10.0.0.40 b; }",
            "range \"10.0.0.10-10.0.0.40\" overlaps \"10.0.0.30-10.0.0.35\"",
        ),
        (
            "geo $g { default x; ranges; 10.0.0.0-10.0.0.20 a; }",
            "the \"ranges\" directive must be the first directive",
        ),
    ] {
        overlapping(http, error);
    }
}

fn overlapping(http: &str, error: &str) {
    for kind in kinds() {
        let dir = support::TempDir::new("geo-t");
        let conf = dir.write(
            "nginx.conf",
            support::render(&support::main_config(http), dir.path(), &[]),
        );
        let Some(binary) = kind.binary() else {
            continue;
        };
        let out = support::test_config(std::process::Command::new(binary), dir.path(), &conf);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{kind}: overlapping ranges load");
        assert!(stderr.contains(error), "{kind}: {stderr}");
    }
}
