//! A server on a wildcard address (`listen PORT;`): `$server_addr` and the host of a
//! redirect made for a request without a `Host` are the address the client reached, as
//! nginx asks the kernel for it, not `0.0.0.0`; compared with nginx, in a network namespace
//! of the test's own.

mod support;

use support::{kinds, Server};

const CONFIG: &str = r#"
    server {
        listen {PORT0};
        server_name named.test;
        root {PREFIX}/html;
        location = /addr { return 200 "$server_addr:$server_port\n"; }
        location = /named { server_name_in_redirect on; return 302 /elsewhere; }
    }
"#;

/// Set in the copy of this test that runs in its own network namespace.
const INSIDE: &str = "PORTCULLIS_TEST_NETNS";

#[test]
fn the_address_reached_is_the_servers() {
    // A wildcard address is bound only in a network namespace of the test's own, which the
    // test re-runs itself in, loopback up.
    if std::env::var_os(INSIDE).is_none() {
        let exe = std::env::current_exe().expect("the test binary");
        let status = std::process::Command::new("unshare")
            .args(["-n", "--", "sh", "-c"])
            .arg("ip link set lo up && exec \"$0\" --exact the_address_reached_is_the_servers --nocapture")
            .arg(&exe)
            .env(INSIDE, "1")
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("the test in its network namespace failed: {s}"),
            Err(e) => panic!("unshare -n (root is needed for a network namespace): {e}"),
        }
        return;
    }
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(CONFIG)) else {
            continue;
        };
        std::fs::create_dir_all(server.path("html/dir")).unwrap();
        let port = server.port(0);
        let mut lines = Vec::new();
        for raw in [
            "GET /addr HTTP/1.0\r\n\r\n",
            "GET /dir HTTP/1.0\r\n\r\n",
            "GET /dir HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n",
            "GET /named HTTP/1.0\r\n\r\n",
        ] {
            let r = support::request(port, raw).unwrap();
            let location = r
                .header("location")
                .unwrap_or("-")
                .replace(&port.to_string(), "PORT");
            let body = match r.status {
                200 => r.body_text().replace(&port.to_string(), "PORT"),
                _ => String::new(),
            };
            lines.push(format!(
                "{} -> {} {location} {}",
                raw.lines().next().unwrap_or(""),
                r.status,
                body.trim()
            ));
        }
        if kind == support::Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "GET /addr HTTP/1.0 -> 200 - 127.0.0.1:PORT",
                    "GET /dir HTTP/1.0 -> 301 http://127.0.0.1:PORT/dir/",
                    "GET /named HTTP/1.0 -> 302 http://named.test:PORT/elsewhere",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
