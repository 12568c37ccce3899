//! Every way a request can end in an error, answered whole: each response has a length (or
//! chunks, or ends with the connection), so a client never waits for bytes that will not
//! come, and a connection kept alive carries the next request.
//!
//! The paths are the ones nginx's error handling takes: an upstream that fails, an error_page
//! whose target fails again (proxied, static, named, with `recursive_error_pages`), errors
//! of static files, `return`, rewrite cycles, request bodies and HEAD. Each case runs under
//! nginx and portcullis on the same configuration, states the status nginx gives, and
//! compares the two.

mod support;

// Only its curl is used here.
#[allow(dead_code)]
#[path = "support/h2c.rs"]
mod h2c;

use std::time::Duration;

use support::{Client, Kind, Response, Server, TempDir};

/// A port on which nothing listens: connecting is refused at once.
const DEAD: &str = "127.0.0.1:1";

/// How long a server gets to close a connection it has said it will close.
const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// `{PORT0}` takes the cases; `{PORT1}` is an upstream that answers, `{PORT2}` an HTTP/2
/// port with prior knowledge.
const CONFIG: &str = r#"
    upstream dead { server {DEAD}; }
    upstream live { server 127.0.0.1:{PORT1}; }
    proxy_next_upstream off;

    server {
        listen 127.0.0.1:{PORT1};
        location / { return 200 "upstream page\n"; }
        location /fail { return 503; }
    }

    server {
        listen 127.0.0.1:{PORT0};
        listen 127.0.0.1:{PORT2} http2;
        root {DOCROOT};

        location = /ok { return 200 "ok\n"; }

        location /dead-then-dead { error_page 502 /page-dead; proxy_pass http://dead; }
        location /dead-then-live { error_page 502 /page-live; proxy_pass http://dead; }
        location /dead-then-static { error_page 502 /50x.html; proxy_pass http://dead; }
        location /dead-then-missing { error_page 502 /missing.html; proxy_pass http://dead; }
        location /dead-then-named { error_page 502 @dead; proxy_pass http://dead; }
        location /dead-then-redirect {
            error_page 502 http://example.com/down;
            proxy_pass http://dead;
        }
        location /dead-then-overwrite { error_page 502 =200 /page-dead; proxy_pass http://dead; }
        location /dead-recursive {
            recursive_error_pages on;
            error_page 502 /dead-recursive-page;
            proxy_pass http://dead;
        }
        location /dead-recursive-page {
            recursive_error_pages on;
            error_page 502 /dead-recursive-page2;
            proxy_pass http://dead;
        }
        location /dead-recursive-page2 { proxy_pass http://dead; }
        location /dead-plain { proxy_pass http://dead; }

        location /intercepted {
            proxy_intercept_errors on;
            error_page 503 /page-dead;
            proxy_pass http://live/fail;
        }

        location /static-missing { error_page 404 /page-dead; }
        location /return-500 { error_page 500 /page-dead; return 500; }
        location /return-404-live { error_page 404 /page-live; return 404; }
        location /cycle { error_page 500 /page-dead; rewrite ^ /cycle last; }
        location /cycle-plain { rewrite ^ /cycle-plain last; }

        location /page-dead { internal; proxy_pass http://dead; }
        location /page-live { internal; proxy_pass http://live/; }
        location @dead { proxy_pass http://dead; }
    }
"#;

/// What one case sends and what nginx answers.
struct Case {
    method: &'static str,
    path: &'static str,
    /// A request body, sent with its Content-Length.
    body: &'static str,
    status: u16,
}

const fn get(path: &'static str, status: u16) -> Case {
    Case {
        method: "GET",
        path,
        body: "",
        status,
    }
}

const CASES: &[Case] = &[
    get("/dead-plain", 502),
    get("/dead-then-dead", 502),
    get("/dead-then-live", 502),
    get("/dead-then-static", 502),
    get("/dead-then-missing", 404),
    get("/dead-then-named", 502),
    get("/dead-then-redirect", 302),
    get("/dead-then-overwrite", 502),
    get("/dead-recursive", 502),
    get("/intercepted", 502),
    get("/static-missing", 502),
    get("/return-500", 502),
    get("/return-404-live", 404),
    get("/cycle", 500),
    get("/cycle-plain", 500),
    Case {
        method: "HEAD",
        path: "/dead-then-dead",
        body: "",
        status: 502,
    },
    Case {
        method: "POST",
        path: "/dead-then-dead",
        body: "a body the upstream never gets",
        status: 502,
    },
    Case {
        method: "POST",
        path: "/dead-then-live",
        body: "a body the upstream never gets",
        status: 502,
    },
];

fn start(kind: Kind, docroot: &TempDir) -> Option<Server> {
    let http = CONFIG
        .replace("{DEAD}", DEAD)
        .replace("{DOCROOT}", &docroot.path().display().to_string());
    Server::start(kind, 3, &support::main_config(&http))
}

fn docroot() -> TempDir {
    let dir = TempDir::new("error-paths");
    dir.write("50x.html", "<p>our own 50x page</p>\n");
    dir
}

fn request(case: &Case) -> Vec<u8> {
    let mut out = format!(
        "{} {} HTTP/1.1\r\nHost: localhost\r\n",
        case.method, case.path
    );
    if !case.body.is_empty() {
        out.push_str(&format!("Content-Length: {}\r\n", case.body.len()));
    }
    out.push_str("\r\n");
    out.push_str(case.body);
    out.into_bytes()
}

/// Sends `case` on a new connection and reads its answer, then proves the connection's
/// state: closed when the response said `close` (or had no length), else able to carry
/// another request.
fn exchange(server: &Server, case: &Case) -> Response {
    let what = format!("{} {} {}", server.kind, case.method, case.path);
    let mut client: Client = server.client(0);
    client.send(&request(case)).expect("send");
    let response = client
        .read_response(case.method == "HEAD")
        .unwrap_or_else(|e| panic!("{what}: no complete response: {e}"));
    let delimited = case.method == "HEAD"
        || response.header("content-length").is_some()
        || response.header("transfer-encoding").is_some()
        || matches!(response.status, 204 | 304);
    let keep_alive = response
        .header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("keep-alive"));
    assert!(
        delimited || !keep_alive,
        "{what}: a response without a length on a connection kept alive: {response:?}"
    );
    if keep_alive {
        client
            .send(b"GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("send");
        let next = client
            .read_response(false)
            .unwrap_or_else(|e| panic!("{what}: the next request on the connection: {e}"));
        assert_eq!(next.status, 200, "{what}: the next request: {next:?}");
        assert_eq!(next.body_text(), "ok\n", "{what}: the next request");
    } else {
        assert!(
            client.is_closed(CLOSE_WAIT),
            "{what}: said close, stayed open"
        );
    }
    response
}

/// The body with the server's signature taken out, which differs by name.
fn comparable_body(response: &Response) -> String {
    response
        .body_text()
        .replace("portcullis/0.1.0", "SERVER")
        .replace("portcullis", "SERVER")
        .replace("nginx/1.22.1", "SERVER")
        .replace("nginx", "SERVER")
}

#[test]
fn every_error_path_answers_whole() {
    let docroot = docroot();
    let mut answers: Vec<(Kind, Vec<Response>)> = Vec::new();
    for kind in support::kinds() {
        let Some(server) = start(kind, &docroot) else {
            continue;
        };
        let responses = CASES
            .iter()
            .map(|case| {
                let r = exchange(&server, case);
                assert_eq!(
                    r.status, case.status,
                    "{kind} {} {}: {r:?}",
                    case.method, case.path
                );
                r
            })
            .collect();
        answers.push((kind, responses));
    }
    let [(_, nginx), (_, ours)] = answers.as_slice() else {
        return;
    };
    for ((case, n), p) in CASES.iter().zip(nginx).zip(ours) {
        let what = format!("{} {}", case.method, case.path);
        assert_eq!(comparable_body(p), comparable_body(n), "{what}: body");
        for name in ["content-type", "location", "connection"] {
            assert_eq!(p.header(name), n.header(name), "{what}: {name}");
        }
    }
}

/// Over HTTP/2 the stream ends with the response: the same failing error_page target gets
/// nginx's page, not an empty stream.
#[test]
fn http2_error_page_target_failing_again_gets_the_page() {
    let docroot = docroot();
    for kind in support::kinds() {
        let Some(server) = start(kind, &docroot) else {
            continue;
        };
        for (path, status, body) in [
            (
                "/dead-then-dead",
                502,
                "<center><h1>502 Bad Gateway</h1></center>",
            ),
            ("/dead-then-live", 502, "upstream page\n"),
        ] {
            let url = format!("http://127.0.0.1:{}{path}", server.port(2));
            let Some(r) = h2c::curl(&["--http2-prior-knowledge"], &url) else {
                panic!("{kind} {path}: curl got no HTTP/2 response");
            };
            assert_eq!(r.version, "2", "{kind} {path}");
            assert_eq!(r.status, status, "{kind} {path}");
            let text = String::from_utf8_lossy(&r.body);
            assert!(text.contains(body), "{kind} {path}: body {text:?}");
        }
    }
}

/// A JWT key subrequest whose location fails, and whose error_page fails again: the request
/// is answered 500 at once, whole, and the connection goes on. (nginx has no `auth_jwt`:
/// portcullis alone.)
#[test]
fn key_subrequest_failing_twice_answers_500_whole() {
    let http = r#"
        upstream dead { server {DEAD}; }
        server {
            listen 127.0.0.1:{PORT0};
            location = /ok { return 200 "ok\n"; }
            location /api {
                auth_jwt "api";
                auth_jwt_key_request /_jwks;
                root /nonexistent;
            }
            location = /_jwks { internal; error_page 502 /page-dead; proxy_pass http://dead; }
            location /page-dead { internal; proxy_pass http://dead; }
        }
    "#
    .replace("{DEAD}", DEAD);
    let Some(server) = Server::start(Kind::Portcullis, 1, &support::main_config(&http)) else {
        return;
    };
    // A well-formed HS256 token: its keys are asked for before its signature is checked.
    let token = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl";
    let mut client = server.client(0);
    client
        .send(
            format!(
                "GET /api HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\r\n"
            )
            .as_bytes(),
        )
        .expect("send");
    let r = client.read_response(false).expect("a complete response");
    assert_eq!(r.status, 500, "{r:?}");
    assert!(r.header("content-length").is_some(), "{r:?}");
    assert!(
        server
            .error_log()
            .contains("JWT key request \"/_jwks\" failed"),
        "{}",
        server.error_log()
    );
    if r.header("connection") == Some("keep-alive") {
        client
            .send(b"GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("send");
        assert_eq!(client.read_response(false).expect("next").status, 200);
    } else {
        assert!(client.is_closed(CLOSE_WAIT));
    }
}
