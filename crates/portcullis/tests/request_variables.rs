//! `$http2`, `$request_completion` and `$request_body_file` in the access log, compared with
//! nginx: configurations that log them load, and each request logs what nginx logs.

#[path = "support/h2c.rs"]
#[allow(dead_code)]
mod h2c;
mod support;

use std::time::Duration;

use support::{kinds, Server};

const CONFIG: &str = r#"
    log_format vars '$request_uri [$http2] [$request_completion] [$request_body_file]';
    server {
        listen 127.0.0.1:{PORT0};
        listen 127.0.0.1:{PORT1} http2;
        access_log {PREFIX}/vars.log vars;
        location / { return 200 "ok\n"; }
    }
"#;

#[test]
fn request_variables_log_as_in_nginx() {
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &support::main_config(CONFIG)) else {
            continue;
        };
        support::get(server.port(0), "/one").expect("GET");
        let mut expected = 1;
        let url = format!("http://127.0.0.1:{}/two", server.port(1));
        if h2c::curl(&["--http2-prior-knowledge"], &url).is_some() {
            expected += 1;
        }
        let log = server.path("vars.log");
        assert!(support::wait_until(Duration::from_secs(5), || {
            support::read_lossy(&log).lines().count() >= expected
        }));
        let lines: Vec<String> = support::read_lossy(&log)
            .lines()
            .map(str::to_owned)
            .collect();
        if kind == support::Kind::Portcullis {
            support::expect_lines(&lines, &["/one [] [OK] [-]", "/two [h2c] [OK] [-]"]);
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
