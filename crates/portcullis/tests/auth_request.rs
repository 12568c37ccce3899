//! `auth_request` and `auth_request_set`, compared with nginx on the same configuration and
//! the same authentication service: allowed, refused with 401 (and the service's
//! `WWW-Authenticate`) or 403, an unexpected status or a service that is down (500), a
//! subrequest answered by `return` or a missing file, `satisfy any` and `all` with
//! `allow`/`deny` and `auth_basic`,
//! `auth_request off` under an inherited one, the main request's fields reaching the service,
//! variables set from the service's answer, and an error page that is itself protected.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use support::{head_upstream, kinds, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        root {PREFIX}/www;
        add_header X-User "[$user]" always;
        auth_request /auth/deny;
        location /auth/ {
            internal;
            proxy_read_timeout 10s;
            proxy_pass http://127.0.0.1:{SERVICE};
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI $request_uri;
        }
        location /ok/ {
            auth_request /auth/ok;
            auth_request_set $user $upstream_http_x_user;
        }
        location /challenge/ { auth_request /auth/challenge; }
        location /teapot/ { auth_request /auth/teapot; }
        location /stalled/ { auth_request /auth/stalled; }
        location /token/ {
            auth_request /auth/token;
            auth_request_set $user "$upstream_status:$upstream_http_x_user";
        }
        # A variable set twice must not shift the auth_request_set ones, which read as
        # empty without a warning while unset.
        location /deny/ { set $twice 1; }
        location /off/ { auth_request off; set $twice 2; }
        location /return/ { auth_request /local204; }
        location = /local204 { return 204; }
        location /return401/ { auth_request /local401; }
        location = /local401 { return 401; }
        location /missing/ { auth_request /nothing-here; }
        location /down/ { auth_request /down-service; }
        location = /down-service { proxy_pass http://127.0.0.1:{DEAD}; }
        location /any-allowed/ { satisfy any; allow 127.0.0.1; deny all; }
        location /any-challenge/ { satisfy any; deny all; auth_request /auth/challenge; }
        location /basic-or-service/ {
            satisfy any;
            auth_basic "b";
            auth_basic_user_file {PREFIX}/htpasswd;
            auth_request /auth/deny;
        }
        location /basic-and-service/ {
            auth_basic "b";
            auth_basic_user_file {PREFIX}/htpasswd;
            auth_request /auth/ok;
            auth_request_set $user $upstream_http_x_user;
        }
        location /any-both/ {
            satisfy any;
            auth_basic "R";
            auth_basic_user_file {PREFIX}/htpasswd;
            auth_request /auth/challenge;
        }
        location /scoped/ {
            set $scope admin;
            auth_request /scope/check;
        }
        location /scope/ {
            internal;
            proxy_pass http://127.0.0.1:{SERVICE};
            proxy_set_header X-Scope "[$scope]";
        }
        location /error-page/ {
            auth_request /auth/challenge;
            error_page 401 /off/login.html;
        }
        location /protected-error-page/ {
            auth_request /auth/challenge;
            error_page 401 /deny/login.html;
        }
    }
"#;

/// The authentication service: its answer by the path asked, and how many it answered.
fn service(asked: Arc<AtomicUsize>) -> u16 {
    head_upstream(move |_, head| {
        asked.fetch_add(1, Ordering::SeqCst);
        let head = String::from_utf8_lossy(head).to_string();
        let path = head.split(' ').nth(1).unwrap_or_default().to_string();
        let (status, fields) = match path.as_str() {
            "/auth/ok" => ("200 OK", "X-User: alice\r\n"),
            "/auth/deny" => ("403 Forbidden", ""),
            "/auth/challenge" => (
                "401 Unauthorized",
                "WWW-Authenticate: Bearer realm=\"api\"\r\nX-User: nobody\r\n",
            ),
            "/auth/teapot" => ("418 I'm a teapot", ""),
            "/auth/token"
                if head.contains("\r\nAuthorization: Bearer good\r\n")
                    && head.contains("\r\nX-Original-URI: /token/f?x=1\r\n") =>
            {
                ("200 OK", "X-User: token-holder\r\n")
            }
            "/auth/token" => ("401 Unauthorized", "WWW-Authenticate: Bearer\r\n"),
            "/scope/check" if head.contains("\r\nX-Scope: [admin]\r\n") => ("200 OK", ""),
            "/scope/check" => ("403 Forbidden", ""),
            // A head whose body never comes: only the head counts.
            "/auth/stalled" => {
                return b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n".to_vec();
            }
            _ => ("404 Not Found", ""),
        };
        format!("HTTP/1.1 {status}\r\n{fields}Content-Length: 10\r\n\r\nignored!!\n").into_bytes()
    })
}

#[test]
fn auth_request_answers_as_nginx_does() {
    // Port 1: nothing listens there (a port picked free could be taken by another test).
    let dead = 1;
    let requests: &[(&str, &str)] = &[
        ("/ok/f", ""),
        ("/challenge/f", ""),
        ("/teapot/f", ""),
        ("/token/f?x=1", "Authorization: Bearer good\r\n"),
        ("/token/f?x=1", "Authorization: Bearer bad\r\n"),
        ("/deny/f", ""),
        ("/off/f", ""),
        ("/return/f", ""),
        ("/return401/f", ""),
        ("/missing/f", ""),
        ("/down/f", ""),
        ("/any-allowed/f", ""),
        ("/any-challenge/f", ""),
        ("/error-page/f", ""),
        ("/basic-or-service/f", ""),
        ("/basic-or-service/f", "Authorization: Basic dTpw\r\n"),
        ("/basic-and-service/f", ""),
        ("/basic-and-service/f", "Authorization: Basic dTpw\r\n"),
        ("/any-both/f", ""),
        ("/scoped/f", ""),
        ("/stalled/f", ""),
        ("/protected-error-page/f", ""),
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let asked = Arc::new(AtomicUsize::new(0));
        let port = service(asked.clone());
        let http = CONFIG
            .replace("{SERVICE}", &port.to_string())
            .replace("{DEAD}", &dead.to_string());
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        for dir in [
            "ok",
            "challenge",
            "teapot",
            "token",
            "deny",
            "off",
            "return",
            "return401",
            "missing",
            "down",
            "any-allowed",
            "any-challenge",
            "error-page",
            "protected-error-page",
            "basic-or-service",
            "basic-and-service",
            "any-both",
            "scoped",
            "stalled",
        ] {
            std::fs::create_dir_all(server.path(&format!("www/{dir}"))).expect("mkdir");
            std::fs::write(server.path(&format!("www/{dir}/f")), "file\n").expect("write");
        }
        std::fs::write(server.path("www/off/login.html"), "log in\n").expect("write");
        // "u" with the password "p".
        std::fs::write(server.path("htpasswd"), "u:{PLAIN}p\n").expect("write");
        std::fs::write(server.path("www/deny/login.html"), "log in\n").expect("write");
        let mut got = Vec::new();
        for (path, fields) in requests {
            let asked = std::time::Instant::now();
            let r = support::request(
                server.port(0),
                &format!(
                    "GET {path} HTTP/1.1\r\nHost: localhost\r\n{fields}Connection: close\r\n\r\n"
                ),
            )
            .expect("request");
            let challenges: Vec<&str> = r
                .headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("www-authenticate"))
                .map(|(_, v)| v.as_str())
                .collect();
            if path.starts_with("/stalled/") {
                let waited = asked.elapsed();
                assert!(
                    waited < std::time::Duration::from_secs(5),
                    "{kind}: {waited:?}"
                );
            }
            got.push(format!(
                "{path} {fields:?} -> {} {:?} {:?} {:?}",
                r.status,
                (!challenges.is_empty()).then(|| challenges.join(" | ")),
                r.header("x-user"),
                r.body_text().lines().next().unwrap_or_default(),
            ));
        }
        let at = |i: usize| got[i].as_str();
        assert!(
            at(0).contains("-> 200 None Some(\"[alice]\") \"file\""),
            "{kind}: {}",
            at(0)
        );
        assert!(
            at(1).contains("-> 401 Some(\"Bearer realm=\\\"api\\\"\")"),
            "{kind}: {}",
            at(1)
        );
        assert!(at(2).contains("-> 500"), "{kind}: {}", at(2));
        assert!(
            at(3).contains("-> 200 None Some(\"[200:token-holder]\")"),
            "{kind}: {}",
            at(3)
        );
        assert!(
            at(4).contains("-> 401 Some(\"Bearer\") Some(\"[401:]\")"),
            "{kind}: {}",
            at(4)
        );
        assert!(at(5).contains("-> 403"), "{kind}: {}", at(5));
        assert!(at(6).contains("-> 200"), "{kind}: {}", at(6));
        assert!(at(7).contains("-> 200"), "{kind}: {}", at(7));
        assert!(at(8).contains("-> 401 None"), "{kind}: {}", at(8));
        assert!(at(9).contains("-> 500"), "{kind}: {}", at(9));
        assert!(at(10).contains("-> 500"), "{kind}: {}", at(10));
        assert!(at(11).contains("-> 200"), "{kind}: {}", at(11));
        assert!(
            at(12).contains("-> 401 Some(\"Bearer realm="),
            "{kind}: {}",
            at(12)
        );
        assert!(at(13).contains("\"log in\""), "{kind}: {}", at(13));
        assert!(
            at(14).contains("-> 401 Some(\"Basic realm=\\\"b\\\"\")"),
            "{kind}: {}",
            at(14)
        );
        assert!(at(15).contains("-> 200"), "{kind}: {}", at(15));
        assert!(
            at(16).contains("-> 401 Some(\"Basic realm="),
            "{kind}: {}",
            at(16)
        );
        assert!(
            at(17).contains("-> 200 None Some(\"[alice]\")"),
            "{kind}: {}",
            at(17)
        );
        // Every request asked the service once, the protected error page once more.
        got.push(format!(
            "service asked {} times",
            asked.load(Ordering::SeqCst)
        ));
        let log = server.error_log();
        // Each refusal is logged once, though the phases wait for a subrequest between.
        let no_user = log.matches("no user/password was provided").count();
        got.push(format!("{no_user} requests without credentials logged"));
        for line in [
            "auth request unexpected status: 418",
            "auth request unexpected status: 404",
            "auth request unexpected status: 502",
        ] {
            assert!(log.contains(line), "{kind}: no {line:?} in\n{log}");
        }
        assert!(!log.contains("using uninitialized"), "{kind}:\n{log}");
        seen.push((kind, got));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}

/// A request a limit refused goes to its error page, which an `auth_request` guards: the
/// page answers with the limit's status, and the content the limit kept the request from is
/// never served (the phases run again after the subrequest; the refusal must hold then).
#[test]
fn a_refusal_by_a_limit_holds_through_a_guarded_error_page() {
    let http = r#"
        limit_req_zone $binary_remote_addr zone=one:1m rate=1r/m;
        server {
            listen 127.0.0.1:{PORT0};
            root {PREFIX}/www;
            location /limited/ {
                limit_req zone=one;
                add_header X-Limit $limit_req_status always;
                error_page 503 /guarded/page.txt;
            }
            location /guarded/ { auth_request /local204; }
            location = /local204 { return 204; }
        }
    "#;
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        server.write("www/limited/f", "kept back\n");
        server.write("www/guarded/page.txt", "slow down\n");
        let mut got = Vec::new();
        for _ in 0..2 {
            let r = support::request(
                server.port(0),
                "GET /limited/f HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            )
            .expect("request");
            got.push(format!("{} {}", r.status, r.body_text().trim_end()));
        }
        assert_eq!(got, ["200 kept back", "503 slow down"], "{kind}");
        seen.push((kind, got));
    }
    support::compare(&seen);
}

/// An authentication subrequest that closes (`return 444`, or 499) ends the main request
/// with it: the connection closes with no answer, and the location's error_page for 500 is
/// not asked, as nginx terminates the request.
#[test]
fn a_subrequest_that_closes_closes_the_request() {
    let http = r#"
        server {
            listen 127.0.0.1:{PORT0};
            root {PREFIX}/www;
            error_page 500 = /fallback;
            location /closing/ { auth_request /close444; }
            location /gone/ { auth_request /close499; }
            location = /close444 { return 444; }
            location = /close499 { return 499; }
            location = /fallback { return 200 "fallback\n"; }
        }
    "#;
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        let mut got = Vec::new();
        for path in ["/closing/f", "/gone/f"] {
            let raw = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
            let answer = support::send_and_read_all(server.port(0), raw.as_bytes(), false);
            got.push(format!("{path} -> {:?}", String::from_utf8_lossy(&answer)));
        }
        assert_eq!(got, ["/closing/f -> \"\"", "/gone/f -> \"\""], "{kind}");
        seen.push((kind, got));
    }
    support::compare(&seen);
}
