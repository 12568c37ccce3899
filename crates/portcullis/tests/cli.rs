//! Black-box tests of the command line, the process model and the logs.
//!
//! Each test runs against nginx first (so the expectation is nginx's own behaviour, with the
//! program name in its messages) and then against portcullis, unless
//! `PORTCULLIS_DIFF_ONLY_NGINX=1` restricts it to nginx.

mod support;

use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::time::Duration;

use regex::Regex;
use support::{Client, Kind, Server, TempDir};

/// Bound on waiting for a signal's effect (reload, reopen, shutdown) to show.
const SIGNAL_DEADLINE: Duration = Duration::from_secs(10);
/// The address the embedded default configuration serves.
const DEFAULT_ADDR: &str = "127.0.0.1:8080";
/// Where portcullis looks for its configuration when given no `-c`.
const DEFAULT_CONF: &str = "/etc/portcullis/portcullis.conf";

/// An `http` block body: two access logs (default `combined` and a custom format), a root
/// that does not exist (so that a miss logs an `open()` error), and a `return` whose text
/// tells configurations apart across reloads.
fn http_body(answer: &str) -> String {
    format!(
        "    log_format custom '$remote_addr|$request|$status|$body_bytes_sent|$http_user_agent';\n\
         \x20   access_log {{PREFIX}}/custom.log custom;\n\
         \x20   server {{\n\
         \x20       listen 127.0.0.1:{{PORT0}};\n\
         \x20       server_name localhost;\n\
         \x20       root {{PREFIX}}/html;\n\
         \x20       location = /text {{\n\
         \x20           return 200 \"{answer}\\n\";\n\
         \x20       }}\n\
         \x20   }}\n"
    )
}

fn config(answer: &str) -> String {
    support::main_config(&http_body(answer))
}

/// Runs the program with `args` and returns its output.
fn run(kind: Kind, args: &[&str]) -> Option<Output> {
    let binary = kind.binary()?;
    Some(
        Command::new(binary)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {kind}: {e}")),
    )
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Matches one message line the way nginx prints it before its error log is open:
/// `name: [level] message`, or, when the build's default error log is stderr (Debian's),
/// the error-log form `2024/01/02 03:04:05 [level] 12#12: message`.
fn message_line(name: &str, level: &str, message: &str) -> Regex {
    Regex::new(&format!(
        r"(?m)^(?:{name}: |\d{{4}}/\d{{2}}/\d{{2}} \d{{2}}:\d{{2}}:\d{{2}} )\[{level}\] (?:\d+#\d+: )?{}$",
        regex::escape(message)
    ))
    .expect("regex")
}

/// The body of `GET /text`, or the error text.
fn answer(server: &Server) -> String {
    match support::get(server.port(0), "/text") {
        Ok(r) => r.body_text(),
        Err(e) => format!("error: {e}"),
    }
}

/// A prefix holding `server.conf` rendered from `template` on fresh ports.
fn conf_dir(template: &str) -> (TempDir, String) {
    let dir = TempDir::new("conf");
    let text = support::render(template, dir.path(), &support::free_ports(1));
    let conf = dir.write("server.conf", text).display().to_string();
    (dir, conf)
}

#[test]
fn test_flag_accepts_a_good_config() {
    for kind in support::kinds() {
        let (dir, conf) = conf_dir(&config("one"));
        let prefix = dir.path().display().to_string();
        let Some(out) = run(kind, &["-t", "-p", &prefix, "-c", &conf]) else {
            continue;
        };
        let name = kind.name();
        assert_eq!(
            stderr(&out),
            format!(
                "{name}: the configuration file {conf} syntax is ok\n\
                 {name}: configuration file {conf} test is successful\n"
            ),
            "{kind}"
        );
        assert_eq!(out.status.code(), Some(0), "{kind}");
    }
}

#[test]
fn test_flag_rejects_a_bad_config_with_file_and_line() {
    for kind in support::kinds() {
        let template = config("one").replace(
            "worker_processes 1;\n",
            "worker_processes 1;\nbogus_directive on;\n",
        );
        let (dir, conf) = conf_dir(&template);
        let prefix = dir.path().display().to_string();
        let Some(out) = run(kind, &["-t", "-p", &prefix, "-c", &conf]) else {
            continue;
        };
        let name = kind.name();
        let text = stderr(&out);
        let emerg = message_line(
            name,
            "emerg",
            &format!("unknown directive \"bogus_directive\" in {conf}:3"),
        );
        assert!(emerg.is_match(&text), "{kind}: {text}");
        assert!(
            text.ends_with(&format!(
                "\n{name}: configuration file {conf} test failed\n"
            )),
            "{kind}: {text}"
        );
        assert_eq!(text.lines().count(), 2, "{kind}: {text}");
        assert_eq!(out.status.code(), Some(1), "{kind}");
    }
}

#[test]
fn test_flag_reports_an_unclosed_block() {
    for kind in support::kinds() {
        let (dir, conf) = conf_dir("events {\n");
        let prefix = dir.path().display().to_string();
        let Some(out) = run(kind, &["-t", "-p", &prefix, "-c", &conf]) else {
            continue;
        };
        let emerg = message_line(
            kind.name(),
            "emerg",
            &format!("unexpected end of file, expecting \"}}\" in {conf}:2"),
        );
        assert!(emerg.is_match(&stderr(&out)), "{kind}: {}", stderr(&out));
        assert_eq!(out.status.code(), Some(1), "{kind}");
    }
}

#[test]
fn dump_flag_includes_included_files() {
    for kind in support::kinds() {
        let template =
            config("one").replace("http {\n", "http {\n    include {PREFIX}/extra.conf;\n");
        let (dir, conf) = conf_dir(&template);
        let extra = dir.write("extra.conf", "    keepalive_timeout 33s;\n");
        let prefix = dir.path().display().to_string();
        let Some(out) = run(kind, &["-T", "-p", &prefix, "-c", &conf]) else {
            continue;
        };
        let dump = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{kind}: {}", stderr(&out));
        assert!(
            dump.contains(&format!("# configuration file {conf}:\n")),
            "{kind}: {dump}"
        );
        assert!(
            dump.contains(&format!(
                "# configuration file {}:\n    keepalive_timeout 33s;\n",
                extra.display()
            )),
            "{kind}: {dump}"
        );
        assert!(
            stderr(&out).contains("test is successful"),
            "{kind}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn message_line_accepts_both_forms() {
    let re = message_line("nginx", "emerg", "bad \"x\" in /a.conf:3");
    assert!(re.is_match("nginx: [emerg] bad \"x\" in /a.conf:3"));
    assert!(re.is_match("2024/01/02 03:04:05 [emerg] 12#12: bad \"x\" in /a.conf:3"));
    assert!(!re.is_match("nginx: [emerg] bad \"x\" in /a.conf:4"));
    assert!(!re.is_match("nginx: [error] bad \"x\" in /a.conf:3"));
}

#[test]
fn version_flags() {
    for kind in support::kinds() {
        let name = kind.name();
        let Some(out) = run(kind, &["-v"]) else {
            continue;
        };
        let version =
            Regex::new(&format!(r"^{name} version: {name}/\d+\.\d+\.\d+\S*\n$")).expect("regex");
        assert!(version.is_match(&stderr(&out)), "{kind}: {}", stderr(&out));
        assert_eq!(out.status.code(), Some(0), "{kind}");

        let Some(out) = run(kind, &["-V"]) else {
            continue;
        };
        let text = stderr(&out);
        assert!(
            text.starts_with(&format!("{name} version: {name}/")),
            "{kind}: {text}"
        );
        assert!(
            text.lines().any(|l| l.starts_with("configure arguments:")),
            "{kind}: {text}"
        );
        assert_eq!(out.status.code(), Some(0), "{kind}");
    }
}

#[test]
fn invalid_option_is_rejected() {
    for kind in support::kinds() {
        let Some(out) = run(kind, &["-x"]) else {
            continue;
        };
        assert_eq!(
            stderr(&out),
            format!("{}: invalid option: \"x\"\n", kind.name()),
            "{kind}"
        );
        assert_eq!(out.status.code(), Some(1), "{kind}");
    }
}

/// portcullis only: nginx has no embedded configuration.
#[test]
fn embedded_default_serves_a_welcome_page() {
    if support::only_nginx() {
        support::skip("embedded default is portcullis-only");
        return;
    }
    if std::path::Path::new(DEFAULT_CONF).exists() {
        support::skip(&format!(
            "{DEFAULT_CONF} exists, so the embedded default is not used"
        ));
        return;
    }
    // Holding the port shows it is free; it is released just before the server binds it.
    if TcpListener::bind(DEFAULT_ADDR).is_err() {
        support::skip(&format!(
            "{DEFAULT_ADDR} is in use, cannot test the embedded default"
        ));
        return;
    }
    let dir = TempDir::new("default");
    let log = std::fs::File::create(dir.path().join("stderr.log")).expect("log file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .arg("-p")
        .arg(dir.path())
        .current_dir(dir.path())
        .stderr(log)
        .spawn()
        .expect("spawn portcullis");
    let ready = support::wait_until(support::STARTUP_DEADLINE, || {
        TcpStream::connect(DEFAULT_ADDR).is_ok()
    });
    let response = ready.then(|| support::get(8080, "/"));
    // The seeds' topology behind 8443: reverse proxy, API gateway rewrite, JWT. The token is
    // the one the startup message prints.
    let topology = ready.then(|| {
        // The port accepts a moment before the startup message is written: wait for its line.
        let printed_token = || {
            support::read_lossy(&dir.path().join("stderr.log"))
                .lines()
                .find(|l| l.ends_with("/api_jwt/1kb"))
                .and_then(|l| l.split("Bearer ").nth(1))
                .and_then(|rest| rest.split('\'').next())
                .map(str::to_string)
        };
        support::wait_until(support::STARTUP_DEADLINE, || printed_token().is_some());
        let token = printed_token().unwrap_or_default();
        // Over HTTP/1.1 and over HTTP/2 (ALPN h2): the proxy serves both.
        let fetch = |version: &str, path: &str, auth: Option<&str>| {
            let mut curl = Command::new("curl");
            curl.args([
                "-sk",
                version,
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{size_download}",
            ]);
            if let Some(token) = auth {
                curl.arg("-H").arg(format!("Authorization: Bearer {token}"));
            }
            let out = curl
                .arg(format!("https://127.0.0.1:8443{path}"))
                .output()
                .expect("run curl");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        ["--http1.1", "--http2"].map(|v| {
            [
                fetch(v, "/1kb", None),
                fetch(v, "/api_old/10kb", None),
                fetch(v, "/api_jwt/1kb", None),
                fetch(v, "/api_jwt/1kb", Some(&token)),
                fetch(v, "/api_jwt/1kb", Some("x.y.z")),
            ]
        })
    });
    // SAFETY: kill(2) on our own unreaped child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let status = child.wait().expect("wait");
    let log = support::read_lossy(&dir.path().join("stderr.log"));
    assert!(ready, "nothing listening on {DEFAULT_ADDR}; stderr:\n{log}");
    let response = response
        .and_then(Result::ok)
        .expect("welcome page response");
    assert_eq!(response.status, 200);
    assert!(
        response
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/html")),
        "{response:?}"
    );
    assert!(response.body_text().contains("portcullis"), "{response:?}");
    assert!(
        log.contains("http://127.0.0.1:8080/"),
        "startup message missing: {log}"
    );
    assert!(status.success(), "exit after TERM: {status}");
    for answers in topology.expect("topology answers") {
        let [proxied, gateway, no_token, token, bad_token] = &answers;
        assert_eq!(proxied, "200 1024", "reverse proxy; stderr:\n{log}");
        assert_eq!(gateway, "200 10240", "API gateway; stderr:\n{log}");
        assert!(
            no_token.starts_with("401 "),
            "JWT without a token: {no_token}"
        );
        assert_eq!(
            token, "200 1024",
            "JWT with the printed token; stderr:\n{log}"
        );
        assert!(
            bad_token.starts_with("401 "),
            "JWT with a bad token: {bad_token}"
        );
    }
}

#[test]
fn pid_file_written_after_bind_and_removed_on_exit() {
    for kind in support::kinds() {
        let Some(mut server) = Server::spawn_unready(kind, 1, &config("one")) else {
            continue;
        };
        let pid_path = server.pid_path();
        // nginx creates the file, then writes it: a whole line is the signal.
        assert!(
            support::wait_until(support::STARTUP_DEADLINE, || {
                support::read_lossy(&pid_path).ends_with('\n')
            }),
            "{kind}: no pid file"
        );
        // The pid file is the readiness signal: the port must already be bound.
        assert!(
            TcpStream::connect(("127.0.0.1", server.port(0))).is_ok(),
            "{kind}: pid file written before the listener was bound"
        );
        let pid = support::read_lossy(&pid_path);
        assert_eq!(pid, format!("{}\n", server.pid()), "{kind}");
        server.signal(libc::SIGTERM);
        let status = server.wait_exit(support::STOP_DEADLINE);
        assert!(status.is_some_and(|s| s.success()), "{kind}: {status:?}");
        assert!(!pid_path.exists(), "{kind}: pid file left behind");
    }
}

#[test]
fn signal_flag_reload_and_quit_use_the_pid_file() {
    for kind in support::kinds() {
        let Some(mut server) = Server::start(kind, 1, &config("one")) else {
            continue;
        };
        assert_eq!(answer(&server), "one\n", "{kind}");
        // `-s` reads the pid file, written once the workers run, just after the port accepts.
        let pid_path = server.pid_path();
        assert!(
            support::wait_until(SIGNAL_DEADLINE, || pid_path.exists()),
            "{kind}: no pid file"
        );
        server.write_config(&config("two"));
        let prefix = server.prefix().display().to_string();
        let conf = server.conf_path().display().to_string();
        let out = run(kind, &["-p", &prefix, "-c", &conf, "-s", "reload"]).expect("binary");
        assert_eq!(out.status.code(), Some(0), "{kind}: {}", stderr(&out));
        assert!(
            support::wait_until(SIGNAL_DEADLINE, || answer(&server) == "two\n"),
            "{kind}: reload not applied: {}",
            answer(&server)
        );
        let out = run(kind, &["-p", &prefix, "-c", &conf, "-s", "quit"]).expect("binary");
        assert_eq!(out.status.code(), Some(0), "{kind}: {}", stderr(&out));
        let status = server.wait_exit(SIGNAL_DEADLINE);
        assert!(status.is_some_and(|s| s.success()), "{kind}: {status:?}");
        assert!(!server.pid_path().exists(), "{kind}: pid file left behind");
    }
}

#[test]
fn signal_flag_without_pid_file_fails_like_nginx() {
    for kind in support::kinds() {
        let (dir, conf) = conf_dir(&config("one"));
        let prefix = dir.path().display().to_string();
        let Some(out) = run(kind, &["-p", &prefix, "-c", &conf, "-s", "reload"]) else {
            continue;
        };
        let pid_path = dir.path().join("server.pid");
        let error = message_line(
            kind.name(),
            "error",
            &format!(
                "open() \"{}\" failed (2: No such file or directory)",
                pid_path.display()
            ),
        );
        assert!(error.is_match(&stderr(&out)), "{kind}: {}", stderr(&out));
        assert_eq!(out.status.code(), Some(1), "{kind}");
    }
}

#[test]
fn sighup_with_a_broken_config_keeps_serving_the_old_one() {
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &config("one")) else {
            continue;
        };
        assert_eq!(answer(&server), "one\n", "{kind}");
        server.write_config(&format!("{}\nbogus_directive;\n", config("two")));
        server.signal(libc::SIGHUP);
        assert!(
            support::wait_until(SIGNAL_DEADLINE, || {
                server.error_log().lines().any(|l| {
                    l.contains("[emerg]") && l.contains("unknown directive \"bogus_directive\"")
                })
            }),
            "{kind}: no [emerg] line for the broken config:\n{}",
            server.error_log()
        );
        assert_eq!(answer(&server), "one\n", "{kind}");
    }
}

#[test]
fn sighup_with_a_changed_config_serves_the_new_one() {
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &config("one")) else {
            continue;
        };
        assert_eq!(answer(&server), "one\n", "{kind}");
        server.write_config(&config("two"));
        server.signal(libc::SIGHUP);
        assert!(
            support::wait_until(SIGNAL_DEADLINE, || answer(&server) == "two\n"),
            "{kind}: still {:?}",
            answer(&server)
        );
    }
}

#[test]
fn sigquit_finishes_an_in_flight_request() {
    for kind in support::kinds() {
        let Some(mut server) = Server::start(kind, 1, &config("one")) else {
            continue;
        };
        let port = server.port(0);
        let mut client = Client::connect(port);
        client
            .send(b"GET /text HTTP/1.1\r\nHost: localhost\r\n")
            .expect("send half");
        // The server has the half request once its side of the socket holds no unread bytes.
        let local = client.local_port();
        assert!(
            support::wait_until(SIGNAL_DEADLINE, || {
                support::server_recv_queue(port, local) == Some(0)
            }),
            "{kind}: half request never read"
        );
        server.signal(libc::SIGQUIT);
        // Shutdown has begun once the listener refuses new connections.
        assert!(
            support::wait_until(SIGNAL_DEADLINE, || {
                TcpStream::connect(("127.0.0.1", port)).is_err()
            }),
            "{kind}: listener still open after QUIT"
        );
        client.send(b"\r\n").expect("send rest");
        let response = client.read_response(false);
        let status = server.wait_exit(SIGNAL_DEADLINE);
        let response = response.unwrap_or_else(|e| panic!("{kind}: {e}\n{}", server.logs()));
        assert_eq!(response.status, 200, "{kind}");
        assert_eq!(response.body_text(), "one\n", "{kind}");
        assert!(status.is_some_and(|s| s.success()), "{kind}: {status:?}");
    }
}

/// A graceful stop closes a keepalive connection that waits for its next request at once,
/// as nginx closes its idle connections, and the server exits.
#[test]
fn sigquit_closes_an_idle_keepalive_connection() {
    for kind in support::kinds() {
        let Some(mut server) = Server::start(kind, 1, &config("one")) else {
            continue;
        };
        let mut client = Client::connect(server.port(0));
        client
            .send(b"GET /text HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("send");
        let response = client.read_response(false).expect("response");
        assert_eq!(response.status, 200, "{kind}");
        // Kept open: nothing comes while the connection waits for a request.
        assert!(
            !client.is_closed(Duration::from_millis(200)),
            "{kind}: closed before QUIT"
        );
        server.signal(libc::SIGQUIT);
        assert!(
            client.is_closed(SIGNAL_DEADLINE),
            "{kind}: idle connection still open after QUIT\n{}",
            server.logs()
        );
        let status = server.wait_exit(SIGNAL_DEADLINE);
        assert!(status.is_some_and(|s| s.success()), "{kind}: {status:?}");
    }
}

/// USR1 reopens the access log; so does a reload (HUP), which opens every file anew.
#[test]
fn sigusr1_and_reload_reopen_the_access_log() {
    for (signal, name) in [(libc::SIGUSR1, "USR1"), (libc::SIGHUP, "HUP")] {
        for kind in support::kinds() {
            let Some(server) = Server::start(kind, 1, &config("one")) else {
                continue;
            };
            let log = server.access_log_path();
            let rotated = server.path("access.log.1");
            support::get(server.port(0), "/text?before").expect("request");
            assert!(
                support::wait_until(SIGNAL_DEADLINE, || support::read_lossy(&log)
                    .contains("/text?before")),
                "{kind}: first request not logged"
            );
            std::fs::rename(&log, &rotated).expect("rotate");
            server.signal(signal);
            // Requests logged before the reopen land in the rotated file; keep asking until
            // one lands in the new file.
            let mut n = 0;
            let reopened = support::wait_until(SIGNAL_DEADLINE, || {
                n += 1;
                let _ = support::get(server.port(0), &format!("/text?after{n}"));
                support::read_lossy(&log).contains("/text?after")
            });
            assert!(reopened, "{kind}: access log not reopened by {name}");
            assert!(
                support::read_lossy(&rotated).contains("/text?before"),
                "{kind}"
            );
        }
    }
}

#[test]
fn access_log_formats() {
    let combined = Regex::new(
        r#"^127\.0\.0\.1 - - \[\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4}\] "GET /text\?q=1 HTTP/1\.1" 200 4 "http://ref\.example/" "probe/1\.0"$"#,
    )
    .expect("regex");
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &config("one")) else {
            continue;
        };
        let raw = "GET /text?q=1 HTTP/1.1\r\nHost: localhost\r\nUser-Agent: probe/1.0\r\n\
                   Referer: http://ref.example/\r\nConnection: close\r\n\r\n";
        let response = support::request(server.port(0), raw).expect("request");
        assert_eq!(response.status, 200, "{kind}");
        let custom = "127.0.0.1|GET /text?q=1 HTTP/1.1|200|4|probe/1.0";
        let access = server.access_log_path();
        let custom_log = server.path("custom.log");
        let logged = support::wait_until(SIGNAL_DEADLINE, || {
            support::read_lossy(&access)
                .lines()
                .any(|l| combined.is_match(l))
                && support::read_lossy(&custom_log)
                    .lines()
                    .any(|l| l == custom)
        });
        assert!(
            logged,
            "{kind}: access.log:\n{}\ncustom.log:\n{}",
            support::read_lossy(&access),
            support::read_lossy(&custom_log)
        );
    }
}

#[test]
fn error_log_line_for_a_missing_file() {
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &config("one")) else {
            continue;
        };
        let response = support::get(server.port(0), "/x").expect("request");
        assert_eq!(response.status, 404, "{kind}");
        let path = regex::escape(&server.path("html/x").display().to_string());
        let line = Regex::new(&format!(
            r#"^\d{{4}}/\d{{2}}/\d{{2}} \d{{2}}:\d{{2}}:\d{{2}} \[error\] \d+#\d+: \*\d+ open\(\) "{path}" failed \(2: No such file or directory\), client: 127\.0\.0\.1, server: localhost, request: "GET /x HTTP/1\.1", host: "localhost"$"#
        ))
        .expect("regex");
        assert!(
            support::wait_until(SIGNAL_DEADLINE, || server
                .error_log()
                .lines()
                .any(|l| line.is_match(l))),
            "{kind}: no matching line in:\n{}",
            server.error_log()
        );
    }
}

/// The worker threads of a portcullis process, by their names.
fn worker_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(Result::ok)
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.starts_with("worker-"))
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn sighup_changes_the_number_of_workers() {
    let Some(server) = Server::start(Kind::Portcullis, 1, &config("one")) else {
        return;
    };
    let pid = server.pid();
    // The port accepts from bind, before the worker threads start: wait for them.
    assert!(
        support::wait_until(SIGNAL_DEADLINE, || worker_threads(pid) == 1),
        "want 1 worker at start: {}",
        worker_threads(pid)
    );
    for (workers, text) in [(3, "two"), (1, "three")] {
        let template = config(text).replace(
            "worker_processes 1;",
            &format!("worker_processes {workers};"),
        );
        server.write_config(&template);
        server.signal(libc::SIGHUP);
        let want = format!("{text}\n");
        assert!(
            support::wait_until(SIGNAL_DEADLINE, || {
                worker_threads(pid) == workers && answer(&server) == want
            }),
            "want {workers} workers answering {text:?}: {} workers, {:?}",
            worker_threads(pid),
            answer(&server)
        );
        for _ in 0..20 {
            assert_eq!(answer(&server), want);
        }
    }
}

#[test]
fn minus_e_names_a_file_under_the_prefix() {
    for kind in support::kinds() {
        let Some(binary) = kind.binary() else {
            continue;
        };
        let prefix = TempDir::new("minus-e");
        let elsewhere = TempDir::new("minus-e-cwd");
        let port = support::free_ports(1)[0];
        let conf = prefix.write(
            "nginx.conf",
            format!(
                "daemon off;\npid {p}/server.pid;\nevents {{}}\nhttp {{\n    access_log off;\n    \
                 server {{ listen 127.0.0.1:{port}; root {p}/html; }}\n}}\n",
                p = prefix.path().display()
            ),
        );
        let mut child = Command::new(binary)
            .arg("-p")
            .arg(prefix.path())
            .arg("-e")
            .arg("relative.log")
            .arg("-c")
            .arg(&conf)
            .current_dir(elsewhere.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let up = support::wait_until(SIGNAL_DEADLINE, || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        let log = prefix.path().join("relative.log");
        let logged = up
            && support::get(port, "/missing").is_ok_and(|r| r.status == 404)
            && support::wait_until(SIGNAL_DEADLINE, || {
                support::read_lossy(&log).contains("open()")
            });
        // TERM, as nginx's master then stops its workers too.
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = child.wait();
        assert!(up, "{kind} did not start");
        assert!(logged, "{kind}: no error line in {}", log.display());
        assert!(
            !elsewhere.path().join("relative.log").exists(),
            "{kind}: -e resolved against the working directory"
        );
    }
}

/// `-g` directives are read before the file, as nginx reads them: a directive the file sets
/// again is a duplicate found in the file, lists (`error_log`) take both, a duplicate within
/// `-g` or an unknown directive is found "in command line", blocks are refused there, and a
/// missing `;` is a syntax error. Each `-t` run's verdict and message, compared with nginx's.
#[test]
fn global_directives_merge_as_nginx_merges_them() {
    let (dir, conf) = conf_dir(&config("one"));
    let prefix = dir.path().display().to_string();
    let cases = [
        "daemon off;".to_owned(),
        "worker_processes 2;".to_owned(),
        format!("pid {prefix}/other.pid;"),
        format!("error_log {prefix}/second.log;"),
        format!("error_log stderr; error_log {prefix}/third.log debug;"),
        "worker_rlimit_nofile 100;".to_owned(),
        "daemon off; daemon off;".to_owned(),
        "bogus;".to_owned(),
        "daemon off".to_owned(),
        "events {}".to_owned(),
        "http {}".to_owned(),
        format!("include {prefix}/missing.conf;"),
    ];
    // `[level] message` of each message line, without the time, pid and program name.
    let line =
        Regex::new(r"^(?:\S+: |\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} )(\[\w+\] )(?:\d+#\d+: )?(.*)$")
            .expect("regex");
    let mut seen = Vec::new();
    for kind in support::kinds() {
        let mut verdicts = Vec::new();
        for g in &cases {
            let Some(out) = run(kind, &["-t", "-p", &prefix, "-c", &conf, "-g", g]) else {
                continue;
            };
            let messages: Vec<String> = stderr(&out)
                .lines()
                .filter_map(|l| line.captures(l))
                .map(|c| format!("{}{}", &c[1], &c[2]))
                .collect();
            verdicts.push(format!(
                "-g {g:?}: {} {messages:?}",
                if out.status.success() {
                    "ok"
                } else {
                    "refused"
                }
            ));
        }
        if kind == Kind::Portcullis {
            let conf_line = |n: usize| format!("{conf}:{n}");
            support::expect_lines(
                &verdicts,
                &[
                    &format!(
                        "-g \"daemon off;\": refused [\"[emerg] \\\"daemon\\\" directive is duplicate in {}\"]",
                        conf_line(1)
                    ),
                    "-g \"daemon off; daemon off;\": refused [\"[emerg] \\\"daemon\\\" directive is duplicate in command line\"]",
                    "-g \"events {}\": refused [\"[emerg] block directives are not supported in -g option in command line\"]",
                    "-g \"worker_rlimit_nofile 100;\": ok []",
                ],
            );
        }
        seen.push((kind, verdicts));
    }
    support::compare(&seen);
}
