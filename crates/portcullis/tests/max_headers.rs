//! `max_headers` (Debian's nginx 1.22.1 has it backported): a request with more header lines
//! gets 400 and the line nginx logs; at the http level and a server's own. Compared with
//! nginx.

mod support;

use std::time::Duration;

use support::{kinds, main_config, Server};

#[test]
fn too_many_header_lines_are_refused_as_nginx_refuses_them() {
    let http = "
    max_headers 3;
    server {
        listen 127.0.0.1:{PORT0};
        location / { return 200 \"ok\"; }
    }
    server {
        listen 127.0.0.1:{PORT1};
        max_headers 5;
        location / { return 200 \"ok\"; }
    }
";
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &main_config(http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for port in [0, 1] {
            // Host and Connection, and `extra` more.
            for extra in [1, 2, 3, 4] {
                let fields: String = (0..extra).map(|i| format!("X-{i}: a\r\n")).collect();
                let raw = format!("GET / HTTP/1.1\r\nHost: x\r\n{fields}Connection: close\r\n\r\n");
                let r = support::request(server.port(port), &raw).expect("answer");
                lines.push(format!(
                    "server {port}, {} lines -> {}",
                    extra + 2,
                    r.status
                ));
            }
        }
        let logged = support::wait_until(Duration::from_secs(5), || {
            server
                .error_log()
                .contains("client sent too many header lines")
        });
        lines.push(format!("logged: {logged}"));
        if kind == support::Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "server 0, 3 lines -> 200",
                    "server 0, 4 lines -> 400",
                    "server 1, 5 lines -> 200",
                    "server 1, 6 lines -> 400",
                    "logged: true",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
