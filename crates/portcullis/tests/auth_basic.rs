//! `auth_basic` and `auth_basic_user_file`, compared with nginx on the same configuration and
//! the same user file: every password format nginx reads, users missing or mistyped, the
//! realm, `auth_basic off` and a variable realm, `limit_except`, `satisfy`, a user file that
//! is missing or cannot be read, relative to the configuration's directory, and edited while
//! the server runs.

mod support;

use base64::Engine as _;
use support::{kinds, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        root {PREFIX}/www;
        add_header X-User "[$remote_user]" always;
        auth_basic "Staff only";
        auth_basic_user_file {PREFIX}/htpasswd;
        location /open/ { auth_basic off; }
        location /relative/ { auth_basic "relative"; auth_basic_user_file htpasswd; }
        location /missing/ { auth_basic_user_file {PREFIX}/nothing; }
        location /directory/ { auth_basic_user_file {PREFIX}/www; }
        location /variable/ { auth_basic $arg_realm; }
        location /limited/ {
            auth_basic off;
            limit_except GET { auth_basic "writers"; }
        }
        location /any-allowed/ { satisfy any; allow 127.0.0.1; deny all; }
        location /any-denied/ { satisfy any; deny all; }
        location /all-denied/ { deny all; }
    }
"#;

/// One user per format nginx reads, every one with the password "secret", made by other
/// tools: `openssl passwd` (-apr1, -1, -5, -6), Python's crypt over libxcrypt (bcrypt,
/// yescrypt, DES) and hashlib ({SHA}, {SSHA}); comments, a CRLF line and a second line for a
/// user, which nginx never reads.
const USERS: &str = "# comment:{PLAIN}secret\n\
    apr1:$apr1$rSiP3vYa$nm/ZreXK/j2l5TkCLqoTA.\n\
    md5:$1$saltsalt$9xy1btjgzLYfb7hivXtC//\n\
    sha256:$5$saltsalt$0IyaXrmV7.sGNS6tirgqHLqX/G.FBvgkYA.lpPdS5sA\n\
    sha512:$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1\n\
    bcrypt:$2b$05$abcdefghijklmnopqrstuuOQiyCxlgf/oeuTqixKmWdcYUh4Hjl0a\n\
    bcrypt2y:$2y$05$abcdefghijklmnopqrstuuOQiyCxlgf/oeuTqixKmWdcYUh4Hjl0a\n\
    yescrypt:$y$j9T$abcdefgh$IUWJt2doU4Kf6E/JP1UkAT3S5O3Q7SSA8SJirXIlEu9\n\
    des:abNANd1rDfiNc\n\
    sha:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n\
    ssha:{SSHA}HQu8h+jQEwa23buLLSFNKP47iyhzYWx0Ynl0ZQ==\n\
    plain:{PLAIN}secret:a comment\r\n\
    plain:{PLAIN}other\n\
    \n\
    broken:$9$nothing\n";

fn basic(user_password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_password)
    )
}

/// Each request's answer: method, path, credentials, then status, realm asked for and
/// `$remote_user`.
fn answers(port: u16, requests: &[(&str, &str, Option<String>)]) -> Vec<String> {
    requests
        .iter()
        .map(|(method, path, authorization)| {
            let field = authorization
                .as_ref()
                .map(|a| format!("Authorization: {a}\r\n"))
                .unwrap_or_default();
            let r = support::request(
                port,
                &format!(
                    "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{field}Content-Length: 0\r\n\r\n"
                ),
            )
            .expect("request");
            format!(
                "{method} {path} {authorization:?} -> {} {:?} {:?}",
                r.status,
                r.header("www-authenticate"),
                r.header("x-user"),
            )
        })
        .collect()
}

#[test]
fn auth_basic_answers_as_nginx_does() {
    let users = [
        "apr1", "md5", "sha256", "sha512", "bcrypt", "bcrypt2y", "yescrypt", "des", "sha", "ssha",
        "plain",
    ];
    let mut requests: Vec<(&str, &str, Option<String>)> = Vec::new();
    for user in users {
        requests.push(("GET", "/f", Some(basic(&format!("{user}:secret")))));
        requests.push(("GET", "/f", Some(basic(&format!("{user}:Secret")))));
    }
    let some = || Some(basic("plain:secret"));
    requests.extend([
        ("GET", "/f", Some(basic("plain:other"))),
        ("GET", "/f", Some(basic("nobody:secret"))),
        ("GET", "/f", Some(basic("broken:secret"))),
        ("GET", "/f", Some(basic("# comment:secret"))),
        ("GET", "/f", None),
        ("GET", "/f", Some("Bearer abc".to_string())),
        ("GET", "/f", Some("Basic !!!!".to_string())),
        ("GET", "/open/f", None),
        ("GET", "/relative/f", None),
        ("GET", "/relative/f", some()),
        ("GET", "/missing/f", None),
        ("GET", "/missing/f", some()),
        ("GET", "/directory/f", some()),
        ("GET", "/variable/f?realm=off", None),
        ("GET", "/variable/f?realm=Elsewhere", None),
        ("GET", "/variable/f", None),
        ("GET", "/limited/f", None),
        ("POST", "/limited/f", None),
        ("POST", "/limited/f", some()),
        ("GET", "/any-allowed/f", None),
        ("GET", "/any-denied/f", None),
        ("GET", "/any-denied/f", some()),
        ("GET", "/all-denied/f", some()),
    ]);
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(CONFIG)) else {
            continue;
        };
        for dir in [
            "www",
            "www/open",
            "www/relative",
            "www/missing",
            "www/directory",
            "www/variable",
            "www/limited",
            "www/any-allowed",
            "www/any-denied",
            "www/all-denied",
        ] {
            std::fs::create_dir_all(server.path(dir)).expect("mkdir");
            std::fs::write(server.path(&format!("{dir}/f")), "file\n").expect("write");
        }
        std::fs::write(server.path("htpasswd"), USERS).expect("write htpasswd");
        let port = server.port(0);
        let mut got = answers(port, &requests);

        // Every format lets its user in with the right password only.
        for (i, user) in users.iter().enumerate() {
            assert!(
                got[2 * i].contains(&format!("-> 200 None Some(\"[{user}]\")")),
                "{kind}: {}",
                got[2 * i]
            );
            assert!(
                got[2 * i + 1].contains("-> 401 Some(\"Basic realm=\\\"Staff only\\\"\")"),
                "{kind}: {}",
                got[2 * i + 1]
            );
        }
        let at = |path_and_auth: &str| {
            got.iter()
                .find(|a| a.starts_with(path_and_auth))
                .unwrap_or_else(|| panic!("{path_and_auth}"))
                .clone()
        };
        assert!(at("GET /open/f None").contains("-> 200"), "{kind}");
        assert!(at("GET /missing/f Some").contains("-> 403"), "{kind}");
        assert!(at("GET /directory/f Some").contains("-> 500"), "{kind}");
        assert!(at("GET /variable/f?realm=off").contains("-> 200"), "{kind}");
        assert!(
            at("GET /variable/f?realm=Elsewhere").contains("realm=\\\"Elsewhere\\\""),
            "{kind}"
        );
        assert!(at("GET /limited/f None").contains("-> 200"), "{kind}");
        assert!(at("POST /limited/f None").contains("-> 401"), "{kind}");
        assert!(at("GET /any-allowed/f None").contains("-> 200"), "{kind}");
        assert!(at("GET /any-denied/f None").contains("-> 401"), "{kind}");
        assert!(at("GET /all-denied/f Some").contains("-> 403"), "{kind}");

        // The file is read on every request: an edit counts at once.
        std::fs::write(server.path("htpasswd"), "plain:{PLAIN}changed\n").expect("rewrite");
        got.extend(answers(
            port,
            &[
                ("GET", "/f", Some(basic("plain:secret"))),
                ("GET", "/f", Some(basic("plain:changed"))),
            ],
        ));
        assert!(got[got.len() - 2].contains("-> 401"), "{kind}");
        assert!(got[got.len() - 1].contains("-> 200"), "{kind}");

        let log = server.error_log();
        for line in [
            "user \"plain\": password mismatch",
            "user \"nobody\" was not found in \"",
            "no user/password was provided for basic authentication",
            "nothing\" failed (2: No such file or directory)",
            "[crit]",
        ] {
            assert!(log.contains(line), "{kind}: no {line:?} in\n{log}");
        }
        seen.push((kind, got));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}

/// Stops the spawned server when the test ends, however it ends: TERM, as a user stops it
/// (a KILLed nginx master leaves its workers serving), then KILL if it lingers.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child, not
        // yet reaped.
        unsafe {
            libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM);
        }
        let exited = support::wait_until(support::STOP_DEADLINE, || {
            self.0.try_wait().ok().flatten().is_some()
        });
        if !exited {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A relative `auth_basic_user_file` is found beside the main configuration file (nginx's
/// `conf_prefix`), not in the `-p` prefix.
#[test]
fn a_relative_user_file_is_beside_the_configuration() {
    for kind in kinds() {
        let Some(binary) = kind.binary() else {
            continue;
        };
        let prefix = support::TempDir::new("auth-prefix");
        let conf_dir = support::TempDir::new("auth-conf");
        std::fs::create_dir_all(prefix.path().join("logs")).expect("logs");
        prefix.write("users", "a:{PLAIN}in-prefix\n");
        conf_dir.write("users", "a:{PLAIN}beside-conf\n");
        // A port another test took meanwhile makes the server exit: it tries another.
        let mut started = None;
        for _ in 0..3 {
            let port = support::free_ports(1)[0];
            let http = format!(
                "server {{ listen 127.0.0.1:{port}; auth_basic on; auth_basic_user_file users; \
                 location / {{ root {}; }} }}",
                conf_dir.path().display()
            );
            let conf = conf_dir.write(
                "nginx.conf",
                support::render(&support::main_config(&http), prefix.path(), &[]),
            );
            let child = std::process::Command::new(&binary)
                .arg("-p")
                .arg(prefix.path())
                .arg("-c")
                .arg(&conf)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn");
            let pid = child.id().to_string();
            let mut server = Stopped(child);
            // Listening when its pid file names it (written once it listens): another
            // test's server that holds the port is not taken for it.
            let pid_file = prefix.path().join("server.pid");
            support::wait_until(support::STARTUP_DEADLINE, || {
                server.0.try_wait().ok().flatten().is_some()
                    || support::read_lossy(&pid_file).trim() == pid
            });
            if support::read_lossy(&pid_file).trim() == pid {
                started = Some((server, port));
                break;
            }
        }
        let Some((_server, port)) = started else {
            panic!("{kind} did not start");
        };
        let got = answers(
            port,
            &[
                ("GET", "/users", Some(basic("a:beside-conf"))),
                ("GET", "/users", Some(basic("a:in-prefix"))),
            ],
        );
        assert!(got[0].contains("-> 200"), "{kind}: {}", got[0]);
        assert!(got[1].contains("-> 401"), "{kind}: {}", got[1]);
    }
}
