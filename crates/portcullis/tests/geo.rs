//! `geo`, compared with nginx on the same configuration: the most specific network wins
//! whatever the order, `default`, `delete`, a network written twice, IPv6, an address from
//! a variable (and one that is not an address), `include`, the address `set_real_ip_from`
//! took, and `ranges`/`proxy` refused.

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

/// `ranges`, `proxy` and `proxy_recursive` would change which value a client gets:
/// refused, where nginx reads them.
#[test]
fn geo_parameters_not_implemented_are_refused() {
    for (entry, name) in [("ranges;", "ranges"), ("proxy 10.0.0.0/8;", "proxy")] {
        let dir = support::TempDir::new("geo-t");
        let http = format!("geo $g {{ {entry} default x; }}");
        let conf = dir.write(
            "nginx.conf",
            support::render(&support::main_config(&http), dir.path(), &[]),
        );
        let out = support::test_config(
            std::process::Command::new(env!("CARGO_BIN_EXE_portcullis")),
            dir.path(),
            &conf,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{entry} loads");
        assert!(
            stderr.contains(&format!(
                "the \"{name}\" parameter of \"geo\" is not supported yet"
            )),
            "{stderr}"
        );
    }
}
