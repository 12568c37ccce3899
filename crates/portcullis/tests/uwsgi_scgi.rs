//! uwsgi and SCGI against Debian's uwsgi and its python3 plugin (a WSGI application on a
//! unix socket of each protocol), compared with nginx on the same configuration with
//! Debian's `uwsgi_params` and `scgi_params` included unchanged: what the application sees
//! of requests (params, fields, bodies plain and chunked), its statuses and fields, a large
//! response, HEAD, and a socket nobody listens on.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::{compare, kinds, main_config, wait_until, Server, TempDir};

/// The WSGI application: what it was asked, or a large page, or a status of its own.
const APP: &str = r#"
def application(env, start_response):
    body = env["wsgi.input"].read()
    path = env.get("PATH_INFO") or env.get("DOCUMENT_URI", "")
    if path.endswith("/large"):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"x" * 100000]
    keys = ["REQUEST_METHOD", "REQUEST_URI", "PATH_INFO", "DOCUMENT_URI", "QUERY_STRING",
            "CONTENT_TYPE", "CONTENT_LENGTH", "HTTP_HOST", "HTTP_X_CUSTOM", "SERVER_PROTOCOL",
            "REQUEST_SCHEME", "SCGI", "REMOTE_ADDR", "DOCUMENT_ROOT"]
    text = "".join("%s=%s\n" % (k, env.get(k, "(unset)")) for k in keys)
    text += "body=%d %r\n" % (len(body), body[:20])
    status = "404 Not Here" if path.endswith("/missing") else "200 OK"
    start_response(status, [("Content-Type", "text/plain"), ("X-App", "wsgi"),
                            ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")])
    return [text.encode()]
"#;

/// Debian's uwsgi serving [`APP`] on a socket of `protocol` (`--uwsgi-socket`,
/// `--scgi-socket`); stopped when dropped.
struct App {
    child: Child,
    socket: PathBuf,
}

impl App {
    fn start(dir: &Path, protocol: &str, name: &str) -> Option<App> {
        let binary = Path::new("/usr/bin/uwsgi_python3");
        if !binary.is_file() {
            let missing =
                "uwsgi_python3 not found: apt-get install uwsgi-core uwsgi-plugin-python3";
            if std::env::var_os("CI").is_some() {
                panic!("{missing}");
            }
            support::skip(missing);
            return None;
        }
        let socket = dir.join(format!("{name}.sock"));
        let child = Command::new(binary)
            .args([
                "--master",
                "--processes",
                "2",
                "--chmod-socket=666",
                "--need-app",
            ])
            .arg(protocol)
            .arg(&socket)
            .arg("--wsgi-file")
            .arg(dir.join("app.py"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start uwsgi");
        let app = App { child, socket };
        assert!(
            wait_until(Duration::from_secs(10), || app.socket.exists()),
            "uwsgi did not listen on {}",
            app.socket.display()
        );
        Some(app)
    }
}

impl Drop for App {
    /// SIGINT: uwsgi's master stops its workers.
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) on the uwsgi this test started.
            unsafe { libc::kill(pid, libc::SIGINT) };
        }
        let _ = self.child.wait();
    }
}

#[test]
fn python_sites_answer_as_under_nginx() {
    let dir = TempDir::new("wsgi");
    dir.write("app.py", APP);
    let Some(uwsgi) = App::start(dir.path(), "--uwsgi-socket", "uwsgi") else {
        return;
    };
    let Some(scgi) = App::start(dir.path(), "--scgi-socket", "scgi") else {
        return;
    };
    let http = format!(
        r#"
    uwsgi_cache_path {{PREFIX}}/ucache keys_zone=u:1m;
    scgi_cache_path {{PREFIX}}/scache keys_zone=s:1m;
    server {{
        listen 127.0.0.1:{{PORT0}};
        add_header X-Cache $upstream_cache_status;
        location /uc/ {{
            include /etc/nginx/uwsgi_params; uwsgi_pass unix:{uwsgi};
            uwsgi_cache u; uwsgi_cache_key $uri; uwsgi_cache_valid 1m;
            uwsgi_ignore_headers Set-Cookie;
        }}
        location /sc/ {{
            include /etc/nginx/scgi_params; scgi_pass unix:{scgi};
            scgi_cache s; scgi_cache_key $uri; scgi_cache_valid 1m;
        }}
        location /u/ {{ include /etc/nginx/uwsgi_params; uwsgi_pass unix:{uwsgi}; }}
        location /s/ {{ include /etc/nginx/scgi_params; scgi_pass unix:{scgi}; }}
        location /uu/ {{ include /etc/nginx/uwsgi_params; uwsgi_pass uwsgi://unix:{uwsgi}; }}
        location /gone/ {{ include /etc/nginx/uwsgi_params; uwsgi_pass unix:{gone}; }}
    }}
"#,
        uwsgi = uwsgi.socket.display(),
        scgi = scgi.socket.display(),
        gone = dir.path().join("gone.sock").display(),
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        let port = server.port(0);
        let mut lines = Vec::new();
        for prefix in ["/u", "/s", "/uu"] {
            for (label, raw) in [
                ("get", format!("GET {prefix}/a?x=1 HTTP/1.1\r\nHost: example.org\r\nX-Custom: hi\r\nConnection: close\r\n\r\n")),
                ("post", format!("POST {prefix}/b HTTP/1.1\r\nHost: example.org\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world")),
                ("chunked", format!("POST {prefix}/c HTTP/1.1\r\nHost: example.org\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n")),
                ("status", format!("GET {prefix}/missing HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n")),
                ("large", format!("GET {prefix}/large HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n")),
                ("head", format!("HEAD {prefix}/d HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n")),
            ] {
                let mut c = support::Client::connect(port);
                c.send(raw.as_bytes()).expect("send");
                let r = c.read_response(raw.starts_with("HEAD ")).expect("response");
                // The default root is under each server's own prefix.
                let body = r
                    .body_text()
                    .replace(&server.prefix().display().to_string(), "{PREFIX}");
                let body = if body.len() > 1000 {
                    format!("{} bytes", body.len())
                } else {
                    body
                };
                lines.push(format!(
                    "{prefix} {label} -> {} type={} x-app={} cookies={}\n{body}",
                    r.status,
                    r.header("content-type").unwrap_or("-"),
                    r.header("x-app").unwrap_or("-"),
                    r.header_count("set-cookie"),
                ));
            }
        }
        // A cached response is sent again; one with `Set-Cookie` is not kept.
        for path in ["/uc/a?x=1", "/uc/a?x=2", "/sc/a?x=1", "/sc/a?x=2"] {
            let r = support::get(port, path).expect("GET");
            let query = r
                .body_text()
                .lines()
                .find(|l| l.starts_with("QUERY_STRING"))
                .map(str::to_owned);
            lines.push(format!(
                "cache {path} -> {} x-cache={} {}",
                r.status,
                r.header("x-cache").unwrap_or("-"),
                query.unwrap_or_default()
            ));
        }
        let r = support::get(port, "/gone/x").expect("GET /gone/x");
        lines.push(format!("gone -> {}", r.status));
        let log = server.error_log();
        lines.push(format!(
            "gone logged: {}",
            log.contains("failed (2: No such file or directory) while connecting to upstream")
                && log.contains("upstream: \"uwsgi://unix:")
        ));
        support::expect_lines(
            &lines,
            &[
                "/u get -> 200 type=text/plain x-app=wsgi cookies=2",
                "QUERY_STRING=x=1",
                "HTTP_X_CUSTOM=hi",
                "body=11 b'hello world'",
                "/s chunked -> 200",
                "CONTENT_LENGTH=5",
                "SCGI=1",
                "/u status -> 404",
                "DOCUMENT_ROOT={PREFIX}/html",
                "/uu get -> 200",
                "100000 bytes",
                "cache /uc/a?x=2 -> 200 x-cache=HIT QUERY_STRING=x=1",
                "cache /sc/a?x=2 -> 200 x-cache=MISS QUERY_STRING=x=2",
                "gone -> 502",
                "gone logged: true",
            ],
        );
        seen.push((kind, lines));
    }
    compare(&seen);
}

/// The modules' directives are checked at load as nginx checks them, with its messages.
#[test]
fn uwsgi_and_scgi_directives_are_refused_as_nginx_refuses_them() {
    for (location, error) in [
        (
            "uwsgi_pass 127.0.0.1:9000; uwsgi_modifier1 256;",
            "value must be between 0 and 255",
        ),
        ("scgi_pass unix:;", "no path in the unix domain socket"),
        (
            "uwsgi_pass 127.0.0.1:9000; uwsgi_param A b maybe;",
            "invalid parameter \"maybe\"",
        ),
    ] {
        let http = format!("server {{ location / {{ {location} }} }}");
        for kind in kinds() {
            let dir = TempDir::new("uwsgi-t");
            let conf = dir.write(
                "nginx.conf",
                support::render(&main_config(&http), dir.path(), &[]),
            );
            let Some(binary) = kind.binary() else {
                continue;
            };
            let out = support::test_config(Command::new(binary), dir.path(), &conf);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{kind}: {location} loads");
            assert!(stderr.contains(error), "{kind}: {stderr}");
        }
    }
}
