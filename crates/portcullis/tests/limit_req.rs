//! `limit_req_zone` and `limit_req`, compared with nginx on the same configuration and the
//! same requests: the burst, `nodelay`, `delay=`, `limit_req_status`, `limit_req_dry_run`,
//! `limit_req_log_level`, `$limit_req_status`, several limits on one request, a full zone
//! making room for a new key, and a zone's state kept across a reload (and a reload that
//! changes a zone's key refused).

mod support;

use std::time::{Duration, Instant};

use support::{kinds, Server};

const ZONES: &str = r#"
    limit_req_zone $arg_k zone=one:32k rate=1r/m;
    limit_req_zone $arg_k zone=small:32k rate=1r/m;
    limit_req_zone $arg_j zone=other:1m rate=30r/m;
    limit_req_zone $binary_remote_addr zone=fast:1m rate=10r/s;
    limit_req_zone $binary_remote_addr zone=guard:32k rate=1r/m;
"#;

const SERVER: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        root {PREFIX}/www;
        add_header X-Limit "[$limit_req_status]" always;
        location = /version { return 200 "{VERSION}"; }
        location /strict/ { limit_req zone=one; }
        location /burst/ { limit_req zone=one burst=2 nodelay; limit_req_status 429; }
        location /dry/ { limit_req zone=one; limit_req_dry_run on; }
        location /quiet/ { limit_req zone=one; limit_req_log_level info; }
        location /two/ { limit_req zone=one burst=1 nodelay; limit_req zone=other; }
        location /small/ { limit_req zone=small; }
        location /delay/ { limit_req zone=fast burst=5 delay=2; }
        location /open/ { }
        location /guarded/ { auth_request /guard; }
        location = /guard { internal; limit_req zone=guard; try_files /nothing =204; }
    }
"#;

fn config(version: &str, zones: &str) -> String {
    support::main_config(&format!("{zones}{}", SERVER.replace("{VERSION}", version)))
}

/// Status and `$limit_req_status` of `GET path`.
fn ask(port: u16, path: &str) -> String {
    let r = support::get(port, path).expect("GET");
    format!(
        "{path} -> {} {}",
        r.status,
        r.header("x-limit").unwrap_or("-")
    )
}

fn make_files(server: &Server) {
    for dir in [
        "strict", "burst", "dry", "quiet", "two", "small", "delay", "open", "guarded",
    ] {
        std::fs::create_dir_all(server.path(&format!("www/{dir}"))).expect("mkdir");
        std::fs::write(server.path(&format!("www/{dir}/f")), "file\n").expect("write");
    }
}

#[test]
fn limit_req_answers_as_nginx_does() {
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &config("v1", ZONES)) else {
            continue;
        };
        make_files(&server);
        let port = server.port(0);
        let mut got = Vec::new();
        let ask_all = |got: &mut Vec<String>, paths: &[&str]| {
            for p in paths {
                got.push(ask(port, p));
            }
        };
        ask_all(
            &mut got,
            &["/strict/f?k=a", "/strict/f?k=a", "/strict/f", "/strict/f"],
        );
        ask_all(
            &mut got,
            &[
                "/burst/f?k=b",
                "/burst/f?k=b",
                "/burst/f?k=b",
                "/burst/f?k=b",
            ],
        );
        ask_all(
            &mut got,
            &["/dry/f?k=c", "/dry/f?k=c", "/quiet/f?k=d", "/quiet/f?k=d"],
        );
        // Two zones: the first holds the request, the second decides; a refusal by the
        // second leaves the first's count as it was.
        ask_all(
            &mut got,
            &["/two/f?k=e&j=1", "/two/f?k=e&j=1", "/two/f?k=e&j=2"],
        );
        ask_all(&mut got, &["/two/f?k=e&j=3", "/open/f"]);
        // A limit in a subrequest's location counts too (its status only: nginx's
        // `$limit_req_status` of the main request also says what the subrequest's limit did).
        for _ in 0..2 {
            let status = support::get(port, "/guarded/f").expect("GET").status;
            got.push(format!("/guarded/f -> {status}"));
        }
        // A full zone: 191 keys fit in 32k; a 192nd drops the least recently used one.
        let keys: Vec<String> = (0..191).map(|i| format!("/small/f?k={i}")).collect();
        for k in &keys {
            let answer = ask(port, k);
            assert!(answer.ends_with("200 [PASSED]"), "{kind}: {answer}");
        }
        ask_all(
            &mut got,
            &[
                "/small/f?k=0",
                "/small/f?k=191",
                "/small/f?k=1",
                "/small/f?k=2",
            ],
        );

        let r = &got;
        assert_eq!(r[0], "/strict/f?k=a -> 200 [PASSED]", "{kind}");
        assert_eq!(r[1], "/strict/f?k=a -> 503 [REJECTED]", "{kind}");
        assert_eq!(
            r[2], "/strict/f -> 200 []",
            "{kind}: an empty key is not limited"
        );
        assert_eq!(r[7], "/burst/f?k=b -> 429 [REJECTED]", "{kind}");
        assert_eq!(r[9], "/dry/f?k=c -> 200 [REJECTED_DRY_RUN]", "{kind}");
        assert_eq!(r[11], "/quiet/f?k=d -> 503 [REJECTED]", "{kind}");
        assert_eq!(r[17], "/guarded/f -> 200", "{kind}");
        assert_eq!(
            r[18], "/guarded/f -> 500",
            "{kind}: the subrequest is refused"
        );
        assert_eq!(r[19], "/small/f?k=0 -> 503 [REJECTED]", "{kind}");
        assert_eq!(r[21], "/small/f?k=1 -> 200 [PASSED]", "{kind}: dropped");

        // A delay: at 10 r/s, requests over `delay=2` wait for the excess over it to drain.
        let started = Instant::now();
        let mut delayed = None;
        for _ in 0..6 {
            let t = Instant::now();
            let answer = ask(port, "/delay/f");
            if answer.contains("[DELAYED]") && delayed.is_none() {
                delayed = Some(t.elapsed());
            }
            got.push(answer);
        }
        let waited = delayed.unwrap_or_else(|| panic!("{kind}: no delay in {got:?}"));
        assert!(waited >= Duration::from_millis(30), "{kind}: {waited:?}");
        assert!(started.elapsed() < Duration::from_secs(3), "{kind}");

        let log = server.error_log();
        for line in [
            "[error]",
            "limiting requests, excess: 1.000 by zone \"one\"",
            "limiting requests, dry run, excess: 1.000 by zone \"one\"",
            "[info]",
            "delaying request, excess: ",
            "by zone \"fast\"",
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

#[test]
fn a_zone_keeps_its_state_across_a_reload() {
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &config("v1", ZONES)) else {
            continue;
        };
        make_files(&server);
        let port = server.port(0);
        assert_eq!(ask(port, "/strict/f?k=r"), "/strict/f?k=r -> 200 [PASSED]");
        assert_eq!(
            ask(port, "/strict/f?k=r"),
            "/strict/f?k=r -> 503 [REJECTED]"
        );

        server.write_config(&config("v2", ZONES));
        server.signal(libc::SIGHUP);
        let reloaded = support::wait_until(Duration::from_secs(10), || {
            support::get(port, "/version").is_ok_and(|r| r.body_text() == "v2")
        });
        assert!(reloaded, "{kind}: no reload\n{}", server.error_log());
        assert_eq!(
            ask(port, "/strict/f?k=r"),
            "/strict/f?k=r -> 503 [REJECTED]",
            "{kind}: the zone's state is kept"
        );

        // A new key for a zone of the same name and size is refused; the old configuration
        // goes on.
        let changed = ZONES.replace("$arg_k zone=one", "$arg_x zone=one");
        server.write_config(&config("v3", &changed));
        server.signal(libc::SIGHUP);
        let expected =
            "limit_req \"one\" uses the \"$arg_x\" key while previously it used the \"$arg_k\" key";
        let refused = support::wait_until(Duration::from_secs(10), || {
            server.error_log().contains(expected)
        });
        assert!(refused, "{kind}: {}", server.error_log());
        assert_eq!(
            support::get(port, "/version").expect("GET").body_text(),
            "v2"
        );
        assert_eq!(
            ask(port, "/strict/f?k=r"),
            "/strict/f?k=r -> 503 [REJECTED]"
        );
    }
}

/// One zone for every worker: a key's one request a minute is one whichever worker the
/// connection reaches.
#[test]
fn every_worker_counts_in_the_same_zone() {
    let mut seen = Vec::new();
    for kind in kinds() {
        let conf = config("v1", ZONES).replace("worker_processes 1;", "worker_processes 2;");
        let Some(server) = Server::start(kind, 1, &conf) else {
            continue;
        };
        make_files(&server);
        // New connections, which the kernel spreads over both workers.
        let answers: Vec<String> = (0..16)
            .map(|_| ask(server.port(0), "/strict/f?k=shared"))
            .collect();
        let passed = answers.iter().filter(|a| a.contains(" 200 ")).count();
        let lines = vec![format!("passed {passed} of 16")];
        if kind == support::Kind::Portcullis {
            support::expect_lines(&lines, &["passed 1 of 16"]);
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
