//! NGINX Plus's API writes (`api write=on`) on a group in a `zone`, as an operator uses
//! them: a server added, marked down, drained, reweighted and removed with no reload, each
//! seen in where requests go and in the API's own view (states, IDs, counters of the new
//! peer); Plus's refusals with their codes (a static group, a bad address or weight, an
//! unknown field, JSON that is not, an ID that is not there, `write=off`, the location's
//! access rules); what the API did kept by a reload of the same block and dropped when the
//! block's servers are edited; a `state` file that a restarted server starts from; a peer
//! added to a checked group found unhealthy by the health check and kept from requests; and
//! servers added and removed while requests keep coming, none of which fails.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use support::{get, main_config, Kind, Server};

/// A backend of the test's own, answering `name` to every request until the test ends: it
/// outlives the proxies a test restarts.
fn backend(name: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{name}",
                    name.len()
                );
                let _ = c.write_all(answer.as_bytes());
            });
        }
    });
    port
}

const CONFIG: &str = r#"
    upstream dyn {
        zone dyn 64k;
        server 127.0.0.1:ONE;
    }
    upstream fixed {
        server 127.0.0.1:ONE;
    }
    upstream kept {
        zone kept 64k;
        state STATE;
    }
    upstream checked {
        zone checked 64k;
        server 127.0.0.1:ONE;
    }
    upstream mandatory {
        zone mandatory 64k;
        server 127.0.0.1:ONE;
    }
    server {
        listen 127.0.0.1:{PORT0};
        location /dyn/ { proxy_pass http://dyn/; }
        location /kept/ { proxy_pass http://kept/; }
        location /checked/ {
            proxy_pass http://checked/;
            health_check interval=1s;
        }
        location /mandatory/ {
            proxy_pass http://mandatory/;
            health_check interval=1s mandatory;
        }
        location /api { api write=on; }
        # An error page that lands on the API reads it (as a GET), whatever the method.
        location = /err {
            error_page 404 /api/9/http/upstreams/dyn/servers/0;
            return 404;
        }
        location /ro { api; }
        location /guarded {
            api write=on;
            limit_except GET { deny all; }
        }
    }
"#;

struct Setup {
    server: Server,
    one: u16,
    two: u16,
    state: std::path::PathBuf,
    _dir: support::TempDir,
}

fn config(one: u16, state: &std::path::Path) -> String {
    main_config(
        &CONFIG
            .replace("ONE", &one.to_string())
            .replace("STATE", &state.display().to_string()),
    )
}

fn start() -> Option<Setup> {
    let (one, two) = (backend("one"), backend("two"));
    let dir = support::TempDir::new("upstream-api");
    // The workers write the state file: as `nobody` when the test runs as root.
    let open = std::os::unix::fs::PermissionsExt::from_mode(0o777);
    std::fs::set_permissions(dir.path(), open).expect("chmod");
    let state = dir.path().join("kept.state");
    let server = Server::start(Kind::Portcullis, 1, &config(one, &state))?;
    Some(Setup {
        server,
        one,
        two,
        state,
        _dir: dir,
    })
}

/// `method path` with a JSON `body`: the status and the JSON answer.
fn call(port: u16, method: &str, path: &str, body: &str) -> (u16, Value) {
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let r = support::request(port, &raw).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let v = serde_json::from_str(&r.body_text()).unwrap_or(Value::Null);
    (r.status, v)
}

/// The answers of `n` requests to `path`, as a string of their first letters.
fn answers(port: u16, path: &str, n: usize) -> String {
    (0..n)
        .map(|_| {
            let r = get(port, path).expect("GET");
            assert_eq!(r.status, 200, "{path}: {}", r.body_text());
            r.body_text().chars().next().unwrap_or('?')
        })
        .collect()
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[test]
fn servers_change_without_a_reload() {
    let Some(s) = start() else { return };
    let port = s.server.port(0);
    assert_eq!(answers(port, "/dyn/", 3), "ooo");

    let added = format!(r#"{{"server": "127.0.0.1:{}"}}"#, s.two);
    let (status, server) = call(port, "POST", "/api/9/http/upstreams/dyn/servers", &added);
    assert_eq!(status, 201, "{server}");
    assert_eq!(server["id"], 1, "{server}");
    assert_eq!(server["weight"], 1, "{server}");
    assert_eq!(server["fail_timeout"], "10s", "{server}");
    assert_eq!(answers(port, "/dyn/", 4), "otot");

    let (status, server) = call(
        port,
        "PATCH",
        "/api/9/http/upstreams/dyn/servers/0",
        r#"{"down": true}"#,
    );
    assert_eq!((status, &server["down"]), (200, &json!(true)), "{server}");
    assert_eq!(answers(port, "/dyn/", 4), "tttt");
    let (_, group) = call(port, "GET", "/api/9/http/upstreams/dyn", "");
    assert_eq!(group["peers"][0]["state"], "down", "{group}");
    // The peer the API added is counted like the others.
    assert_eq!(group["peers"][1]["id"], 1, "{group}");
    assert_eq!(group["peers"][1]["requests"], 6, "{group}");
    assert_eq!(group["peers"][1]["responses"]["2xx"], 6, "{group}");

    let drain = r#"{"down": false, "drain": true}"#;
    let (status, server) = call(port, "PATCH", "/api/9/http/upstreams/dyn/servers/0", drain);
    assert_eq!((status, &server["drain"]), (200, &json!(true)), "{server}");
    assert_eq!(answers(port, "/dyn/", 2), "tt");
    let (_, group) = call(port, "GET", "/api/9/http/upstreams/dyn", "");
    assert_eq!(group["peers"][0]["state"], "draining", "{group}");

    let weigh = r#"{"drain": false, "weight": 3}"#;
    let (status, server) = call(port, "PATCH", "/api/9/http/upstreams/dyn/servers/0", weigh);
    assert_eq!((status, &server["weight"]), (200, &json!(3)), "{server}");
    let spread = answers(port, "/dyn/", 8);
    assert_eq!(spread.matches('o').count(), 6, "{spread}");

    let (status, list) = call(port, "DELETE", "/api/9/http/upstreams/dyn/servers/1", "");
    assert_eq!(status, 200, "{list}");
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(answers(port, "/dyn/", 3), "ooo");
    // IDs are not given again.
    let (_, server) = call(port, "POST", "/api/9/http/upstreams/dyn/servers", &added);
    assert_eq!(server["id"], 2, "{server}");
    let (status, one) = call(port, "GET", "/api/9/http/upstreams/dyn/servers/2", "");
    assert_eq!(
        (status, &one["server"]),
        (200, &json!(format!("127.0.0.1:{}", s.two)))
    );
}

#[test]
fn refusals_are_plus_s() {
    let Some(s) = start() else { return };
    let port = s.server.port(0);
    let servers = "/api/9/http/upstreams/dyn/servers";
    let good = format!(r#"{{"server": "127.0.0.1:{}"}}"#, s.two);
    for (method, path, body, status, expected) in [
        (
            "POST",
            "/api/9/http/upstreams/fixed/servers",
            good.as_str(),
            400,
            "UpstreamStatic",
        ),
        (
            "GET",
            "/api/9/http/upstreams/fixed/servers",
            "",
            400,
            "UpstreamStatic",
        ),
        (
            "POST",
            "/api/9/http/upstreams/nope/servers",
            good.as_str(),
            404,
            "UpstreamNotFound",
        ),
        (
            "PATCH",
            "/api/9/http/upstreams/dyn/servers/9",
            "{}",
            404,
            "UpstreamServerNotFound",
        ),
        (
            "DELETE",
            "/api/9/http/upstreams/dyn/servers/x",
            "",
            400,
            "UpstreamBadServerId",
        ),
        (
            "POST",
            servers,
            r#"{"server": "127.0.0.1:0"}"#,
            400,
            "UpstreamBadAddress",
        ),
        (
            "POST",
            servers,
            r#"{"server": "127.0.0.1:1", "weight": 0}"#,
            400,
            "UpstreamBadWeight",
        ),
        (
            "POST",
            servers,
            r#"{"server": "127.0.0.1:1", "max_fails": -1}"#,
            400,
            "UpstreamBadMaxFails",
        ),
        (
            "POST",
            servers,
            r#"{"server": "127.0.0.1:1", "fail_timeout": "x"}"#,
            400,
            "UpstreamBadFailTimeout",
        ),
        (
            "POST",
            servers,
            r#"{"server": "127.0.0.1:1", "bogus": 1}"#,
            400,
            "UpstreamConfFormatError",
        ),
        (
            "POST",
            servers,
            r#"{"server": "127.0.0.1:1", "down": [true]}"#,
            400,
            "UpstreamConfFormatError",
        ),
        (
            "POST",
            servers,
            r#"{"weight": 2}"#,
            400,
            "UpstreamConfFormatError",
        ),
        (
            "PATCH",
            "/api/9/http/upstreams/dyn/servers/0",
            r#"{"backup": true}"#,
            400,
            "UpstreamConfFormatError",
        ),
        ("POST", servers, "not json", 415, "JsonError"),
        (
            "POST",
            servers,
            r#"{"server": "abcd\u00e9"}"#,
            400,
            "UpstreamBadAddress",
        ),
        (
            "POST",
            servers,
            r#"{"server": "unix:/tmp/a b;"}"#,
            400,
            "UpstreamBadAddress",
        ),
        (
            "POST",
            "/ro/9/http/upstreams/dyn/servers",
            good.as_str(),
            405,
            "MethodDisabled",
        ),
        (
            "DELETE",
            "/api/9/http/upstreams/dyn",
            "",
            405,
            "MethodNotSupported",
        ),
    ] {
        let (got, answer) = call(port, method, path, body);
        assert_eq!(
            (got, code(&answer)),
            (status, expected),
            "{method} {path} {body}: {answer}"
        );
    }
    // A write that reaches the API by an error page is a read.
    let (status, server) = call(port, "DELETE", "/err", "");
    assert_eq!((status, &server["id"]), (404, &json!(0)), "{server}");
    // The location's own access rules guard the writes.
    let (status, _) = call(port, "POST", "/guarded/9/http/upstreams/dyn/servers", &good);
    assert_eq!(status, 403);
    // Nothing refused changed the group.
    let (_, list) = call(port, "GET", "/api/9/http/upstreams/dyn/servers", "");
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(answers(port, "/dyn/", 2), "oo");
}

#[test]
fn a_reload_keeps_what_the_api_did_until_the_block_changes() {
    let Some(mut s) = start() else { return };
    let port = s.server.port(0);
    let added = format!(r#"{{"server": "127.0.0.1:{}", "weight": 2}}"#, s.two);
    let (status, _) = call(port, "POST", "/api/9/http/upstreams/dyn/servers", &added);
    assert_eq!(status, 201);
    let reload = |s: &mut Setup, template: String, generation: u16, want: usize| {
        s.server.write_config(&template);
        s.server.signal(libc::SIGHUP);
        // The new configuration runs once `/gen` answers; its group is the one the API shows.
        assert!(
            support::wait_until(Duration::from_secs(5), || {
                get(port, "/gen").is_ok_and(|r| r.status == generation)
            }),
            "{}",
            s.server.logs()
        );
        let (_, list) = call(port, "GET", "/api/9/http/upstreams/dyn/servers", "");
        assert_eq!(list.as_array().map(Vec::len), Some(want), "{list}");
        list
    };
    // A location that says which configuration answers.
    let generation = |text: String, status: u16| {
        text.replace(
            "location /ro { api; }",
            &format!("location /ro {{ api; }}\n        location = /gen {{ return {status}; }}"),
        )
    };
    // The same block: the server the API added stays, weight and all.
    let same = generation(config(s.one, &s.state), 204);
    let list = reload(&mut s, same, 204, 2);
    assert_eq!(list[1]["weight"], 2, "{list}");
    assert!(answers(port, "/dyn/", 6).contains('t'));
    // The block's servers edited: the configuration's list, as written.
    let edited = config(s.one, &s.state).replace(
        &format!("server 127.0.0.1:{};\n    }}\n    upstream fixed", s.one),
        &format!(
            "server 127.0.0.1:{} weight=5;\n    }}\n    upstream fixed",
            s.one
        ),
    );
    assert_ne!(edited, config(s.one, &s.state));
    let edited = generation(edited, 205);
    reload(&mut s, edited, 205, 1);
    assert_eq!(answers(port, "/dyn/", 4), "oooo");
}

#[test]
fn a_state_file_outlives_the_server() {
    let Some(mut s) = start() else { return };
    let port = s.server.port(0);
    // An empty group until the API fills it.
    assert_eq!(get(port, "/kept/").expect("GET").status, 502);
    for backend in [s.one, s.two] {
        let added = format!(r#"{{"server": "127.0.0.1:{backend}", "max_fails": 3}}"#);
        let (status, _) = call(port, "POST", "/api/9/http/upstreams/kept/servers", &added);
        assert_eq!(status, 201);
    }
    let (status, _) = call(
        port,
        "PATCH",
        "/api/9/http/upstreams/kept/servers/0",
        r#"{"down": true}"#,
    );
    assert_eq!(status, 200);
    let written = support::read_lossy(&s.state);
    assert_eq!(
        written,
        format!(
            "server 127.0.0.1:{} max_fails=3 down;\nserver 127.0.0.1:{} max_fails=3;\n",
            s.one, s.two
        )
    );
    s.server.stop();
    // A new server on the same file starts with the servers the API left.
    let again = Server::start(Kind::Portcullis, 1, &config(s.one, &s.state)).expect("restart");
    let port = again.port(0);
    assert_eq!(answers(port, "/kept/", 3), "ttt");
    let (_, list) = call(port, "GET", "/api/9/http/upstreams/kept/servers", "");
    assert_eq!(list[0]["down"], true, "{list}");
    assert_eq!(list[1]["max_fails"], 3, "{list}");
    // A state file the server cannot read as one is refused with its place.
    std::fs::write(&s.state, "server 127.0.0.1:1;\nkeepalive 2;\n").expect("write");
    let dir = support::TempDir::new("state-t");
    let conf = dir.write(
        "nginx.conf",
        support::render(&config(s.one, &s.state), dir.path(), &[1]),
    );
    let out = support::test_config(
        std::process::Command::new(Kind::Portcullis.binary().expect("binary")),
        dir.path(),
        &conf,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!(
            "\"keepalive\" directive is not allowed in a state file in {}:2",
            s.state.display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_server_added_to_a_checked_group_is_checked() {
    let Some(s) = start() else { return };
    let port = s.server.port(0);
    let dead = support::free_ports(1)[0];
    let added = format!(r#"{{"server": "127.0.0.1:{dead}"}}"#);
    let (status, _) = call(
        port,
        "POST",
        "/api/9/http/upstreams/checked/servers",
        &added,
    );
    assert_eq!(status, 201);
    assert!(
        support::wait_until(Duration::from_secs(10), || {
            let (_, group) = call(port, "GET", "/api/9/http/upstreams/checked", "");
            group["peers"][1]["state"] == "unhealthy"
        }),
        "{}",
        s.server.logs()
    );
    // Out of the rotation: every request goes to the healthy one, none fails over.
    assert_eq!(answers(port, "/checked/", 6), "oooooo");
    let (_, group) = call(port, "GET", "/api/9/http/upstreams/checked", "");
    let health = &group["peers"][1]["health_checks"];
    assert_eq!(health["last_passed"], false, "{group}");
    assert_eq!(health["unhealthy"], 1, "{group}");
    assert!(health["fails"].as_u64() >= Some(1), "{group}");
    assert_eq!(
        group["peers"][0]["health_checks"]["last_passed"], true,
        "{group}"
    );
    let log = support::read_lossy(&s.server.error_log_path());
    assert!(
        log.contains(&format!("of peer 127.0.0.1:{dead} in upstream \"checked\"")),
        "{log}"
    );
    // With `mandatory`, a server added is out from the start, until a check passes.
    let (status, _) = call(
        port,
        "POST",
        "/api/9/http/upstreams/mandatory/servers",
        &added,
    );
    assert_eq!(status, 201);
    let (_, group) = call(port, "GET", "/api/9/http/upstreams/mandatory", "");
    assert_eq!(group["peers"][1]["state"], "unhealthy", "{group}");
    assert_eq!(answers(port, "/mandatory/", 4), "oooo");
    let (_, group) = call(port, "GET", "/api/9/http/upstreams/mandatory", "");
    assert_eq!(group["peers"][1]["requests"], 0, "{group}");
    let alive = format!(r#"{{"server": "127.0.0.1:{}"}}"#, s.two);
    let (status, _) = call(
        port,
        "POST",
        "/api/9/http/upstreams/mandatory/servers",
        &alive,
    );
    assert_eq!(status, 201);
    assert!(
        support::wait_until(Duration::from_secs(10), || answers(port, "/mandatory/", 2)
            .contains('t')),
        "a mandatory check's pass lets the server in"
    );
}

#[test]
fn changes_under_load_fail_no_request() {
    let Some(s) = start() else { return };
    let port = s.server.port(0);
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, done, failed) = (stop.clone(), done.clone(), failed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match get(port, "/dyn/") {
                        Ok(r) if r.status == 200 => done.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    let added = format!(r#"{{"server": "127.0.0.1:{}"}}"#, s.two);
    for round in 0..20u32 {
        let (status, server) = call(port, "POST", "/api/9/http/upstreams/dyn/servers", &added);
        assert_eq!(status, 201, "{server}");
        let id = server["id"].as_u64().expect("an id");
        std::thread::sleep(Duration::from_millis(20));
        // Drained, then removed: the requests it has finish on it.
        let path = format!("/api/9/http/upstreams/dyn/servers/{id}");
        let (status, _) = call(port, "PATCH", &path, r#"{"drain": true}"#);
        assert_eq!(status, 200, "round {round}");
        let (status, _) = call(port, "DELETE", &path, "");
        assert_eq!(status, 200, "round {round}");
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client");
    }
    assert!(
        done.load(Ordering::Relaxed) > 100,
        "too few requests to say"
    );
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    let (_, group) = call(port, "GET", "/api/9/http/upstreams/dyn", "");
    assert_eq!(group["peers"].as_array().map(Vec::len), Some(1), "{group}");
}
