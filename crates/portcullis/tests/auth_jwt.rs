//! `auth_jwt`, black box: the real binary in front of an echo upstream started by the test,
//! with keys and tokens made by PyJWT. Open-source nginx has no `auth_jwt`, so only
//! portcullis runs; the expected texts are NGINX Plus's documented ones.

#[path = "support/auth_jwt.rs"]
mod jwt_support;
// Only curl is used here.
#[allow(dead_code)]
#[path = "support/h2c.rs"]
mod h2c;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jwt_support::{echo_upstream, Material};
use support::{Kind, Response, Server};

/// How long a log line or a reload may take to show.
const WAIT: Duration = Duration::from_secs(5);

const REALM: &str = "Bearer realm=\"Test API\"";
const INVALID: &str = "Bearer realm=\"Test API\",error=\"invalid_token\"";

fn gateway(keys: &Material, upstream: u16) -> String {
    support::main_config(&format!(
        r#"
    log_format jwt '$request_uri $status sub=$jwt_claim_sub city=$jwt_city kid=$jwt_header_kid';
    auth_jwt_claim_set $jwt_city info city;
    auth_jwt_claim_set $jwt_groups groups;
    # Room for the oversized token, so that auth_jwt and not the head parser refuses it.
    large_client_header_buffers 4 32k;
    server {{
        listen 127.0.0.1:{{PORT0}};
        access_log {{PREFIX}}/jwt.log jwt;
        auth_jwt "Test API";
        auth_jwt_key_file {hs};
        auth_jwt_key_file {rsa};
        location / {{
            proxy_pass http://127.0.0.1:{upstream};
            proxy_set_header X-User $jwt_claim_sub;
            proxy_set_header X-Groups $jwt_groups;
            add_header X-Sub $jwt_claim_sub;
        }}
        location /open {{
            auth_jwt off;
            proxy_pass http://127.0.0.1:{upstream};
            proxy_set_header X-User $jwt_claim_sub;
        }}
        location /arg {{
            auth_jwt "Test API" token=$arg_jwt;
            proxy_pass http://127.0.0.1:{upstream};
            proxy_set_header X-User $jwt_claim_sub;
        }}
        location /cookie {{
            auth_jwt "Test API" token=$cookie_auth;
            proxy_pass http://127.0.0.1:{upstream};
            proxy_set_header X-User $jwt_claim_sub;
        }}
        location /admin {{
            auth_jwt_require $jwt_claim_admin error=403;
            proxy_pass http://127.0.0.1:{upstream};
        }}
        location /member {{
            auth_jwt_require $jwt_claim_sub $jwt_groups;
            error_page 401 /denied;
            proxy_pass http://127.0.0.1:{upstream};
        }}
        location = /denied {{
            auth_jwt off;
            return 401 "denied page\n";
        }}
        location /limited {{
            auth_jwt off;
            limit_except GET {{
                auth_jwt "Writers";
            }}
            proxy_pass http://127.0.0.1:{upstream};
        }}
    }}
"#,
        hs = keys.key("hs.jwk"),
        rsa = keys.key("rsa.jwk"),
    ))
}

fn send(server: &Server, method: &str, path: &str, headers: &str) -> Response {
    support::request(
        server.port(0),
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n"
        ),
    )
    .expect("response")
}

fn with_token(server: &Server, path: &str, token: &str) -> Response {
    send(
        server,
        "GET",
        path,
        &format!("Authorization: Bearer {token}\r\n"),
    )
}

#[test]
fn valid_tokens_pass_and_their_claims_reach_upstream_and_log() {
    let Some(keys) = Material::generate() else {
        return;
    };
    let server = Server::start(Kind::Portcullis, 1, &gateway(&keys, echo_upstream())).unwrap();

    let r = with_token(&server, "/hs", keys.token("hs_valid"));
    assert_eq!(r.status, 200, "{}", r.body_text());
    let body = r.body_text();
    assert!(body.contains("X-User: alice\r\n"), "{body}");
    assert!(body.contains("X-Groups: admin,dev\r\n"), "{body}");
    assert_eq!(r.header("x-sub"), Some("alice"));

    let r = with_token(&server, "/rs", keys.token("rs_valid"));
    assert_eq!(r.status, 200);
    assert!(
        r.body_text().contains("X-User: bob\r\n"),
        "{}",
        r.body_text()
    );

    // Without a kid, every key that fits the alg is tried.
    let r = with_token(&server, "/nokid", keys.token("hs_no_kid"));
    assert_eq!(r.status, 200);

    // The second request with the same token is a cache hit; it must answer the same.
    let r = with_token(&server, "/hs2", keys.token("hs_valid"));
    assert!(r.body_text().contains("X-User: alice\r\n"));

    let log = server.path("jwt.log");
    assert!(
        support::wait_until(WAIT, || {
            let text = support::read_lossy(&log);
            text.contains("/hs 200 sub=alice city=Paris kid=0001")
                && text.contains("/rs 200 sub=bob city=Paris kid=rsa1")
        }),
        "{}",
        support::read_lossy(&log)
    );
}

#[test]
fn missing_and_invalid_tokens_get_401_with_the_bearer_challenge() {
    let Some(keys) = Material::generate() else {
        return;
    };
    let server = Server::start(Kind::Portcullis, 1, &gateway(&keys, echo_upstream())).unwrap();

    let r = send(&server, "GET", "/x", "");
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some(REALM));
    let r = send(
        &server,
        "GET",
        "/x",
        "Authorization: Basic dXNlcjpwYXNz\r\n",
    );
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some(REALM));

    for (name, reason) in [
        ("alg_none", "unsigned token"),
        ("hs_with_rsa_public", "no key for alg HS256"),
        ("tampered", "signature verification failed"),
        ("expired", "token expired"),
        ("nbf_future", "token not yet valid"),
        ("unknown_kid", "no key with kid \"nope\""),
        ("oversized", "is longer than"),
        ("malformed", "token has 2 parts"),
    ] {
        let r = with_token(&server, "/x", keys.token(name));
        assert_eq!(r.status, 401, "{name}");
        assert_eq!(r.header("www-authenticate"), Some(INVALID), "{name}");
        assert!(
            support::wait_until(WAIT, || server
                .error_log()
                .lines()
                .any(|l| l.contains("[info]")
                    && l.contains("JWT validation failed: ")
                    && l.contains(reason))),
            "{name}: no log line with {reason:?}:\n{}",
            server.error_log()
        );
    }
}

#[test]
fn token_sources_off_require_and_limit_except() {
    let Some(keys) = Material::generate() else {
        return;
    };
    let server = Server::start(Kind::Portcullis, 1, &gateway(&keys, echo_upstream())).unwrap();
    let hs = keys.token("hs_valid");

    let r = send(&server, "GET", "/open", "");
    assert_eq!(r.status, 200);
    // Without a token the claim is empty, and proxy_set_header drops an empty header.
    assert!(!r.body_text().contains("X-User"), "{}", r.body_text());

    let user = |r: &Response| {
        let body = r.body_text();
        body.lines()
            .find_map(|l| l.strip_prefix("X-User: ").map(str::to_owned))
            .unwrap_or_default()
    };
    let r = send(&server, "GET", &format!("/arg?a=1&jwt={hs}"), "");
    assert_eq!((r.status, user(&r).as_str()), (200, "alice"));
    // The header is not looked at when token= names another source.
    let r = with_token(&server, "/arg", hs);
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some(REALM));

    let r = send(
        &server,
        "GET",
        "/cookie",
        &format!("Cookie: a=b; auth={hs}\r\n"),
    );
    assert_eq!((r.status, user(&r).as_str()), (200, "alice"));

    assert_eq!(
        with_token(&server, "/admin", keys.token("admin")).status,
        200
    );
    let r = with_token(&server, "/admin", keys.token("not_admin"));
    assert_eq!(r.status, 403);
    assert_eq!(r.header("www-authenticate"), None);
    assert_eq!(with_token(&server, "/admin", hs).status, 403);

    assert_eq!(with_token(&server, "/member", hs).status, 200);
    // error_page applies to the 401, and the challenge survives the redirect.
    let r = send(&server, "GET", "/member", "");
    assert_eq!((r.status, r.body_text().as_str()), (401, "denied page\n"));
    assert_eq!(r.header("www-authenticate"), Some(REALM));

    assert_eq!(send(&server, "GET", "/limited", "").status, 200);
    let r = send(&server, "POST", "/limited", "Content-Length: 0\r\n");
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"Writers\"")
    );
}

#[test]
fn a_bad_key_file_is_a_config_error_and_a_reload_with_it_keeps_the_old_keys() {
    let Some(keys) = Material::generate() else {
        return;
    };
    let bad = keys.path().join("bad.jwk");
    std::fs::write(&bad, r#"{"keys":[{"kty":"oct"}]}"#).expect("write");
    let upstream = echo_upstream();
    let template = |file: &str| {
        support::main_config(&format!(
            "server {{\n listen 127.0.0.1:{{PORT0}};\n auth_jwt \"Test API\";\n auth_jwt_key_file {file};\n location / {{ proxy_pass http://127.0.0.1:{upstream}; }}\n}}\n"
        ))
    };
    let bad_conf = template(&bad.display().to_string());

    let dir = support::TempDir::new("jwt-t");
    let conf = dir.write("bad.conf", support::render(&bad_conf, dir.path(), &[1]));
    let out = support::test_config(
        std::process::Command::new(env!("CARGO_BIN_EXE_portcullis")),
        dir.path(),
        &conf,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    let line = support::read_lossy(&conf)
        .lines()
        .position(|l| l.contains("auth_jwt_key_file"))
        .expect("key file line")
        + 1;
    assert!(
        stderr.contains(&format!(
            "invalid JWK set in \"{}\": key 0: missing member \"k\" in {}:{line}",
            bad.display(),
            conf.display()
        )),
        "{stderr}"
    );

    let server = Server::start(Kind::Portcullis, 1, &template(&keys.key("hs.jwk"))).unwrap();
    let hs = keys.token("hs_valid");
    assert_eq!(with_token(&server, "/", hs).status, 200);
    server.write_config(&bad_conf);
    server.signal(libc::SIGHUP);
    assert!(
        support::wait_until(WAIT, || server.error_log().contains("invalid JWK set in")),
        "{}",
        server.error_log()
    );
    assert_eq!(with_token(&server, "/", hs).status, 200);
    assert_eq!(send(&server, "GET", "/", "").status, 401);
}

#[test]
fn seed001_gateway_shape_with_its_jwk_file() {
    let Some(keys) = Material::generate() else {
        return;
    };
    let upstream = echo_upstream();
    // Seed 001's default.conf, with plain HTTP in and out for the test.
    let template = support::main_config(&format!(
        r#"
upstream ssl_file_server_com {{
server 127.0.0.1:{upstream};
keepalive 1024;
}}

auth_jwt "Performance Test API";
auth_jwt_key_file {hs};

server {{
listen 127.0.0.1:{{PORT0}} reuseport backlog=65535;
root /usr/share/nginx/html;
index index.html index.htm;
server_name $hostname;

location ~ ^/api_old/.*$ {{
limit_except GET {{
deny all;
}}
rewrite ^/api_old/(.*)$ /api_new/$1 last;
}}
location /api_new {{
internal;
proxy_pass http://ssl_file_server_com;
proxy_http_version 1.1;
proxy_set_header Connection "";
}}
location / {{
limit_except GET {{
deny all;
}}
proxy_pass http://ssl_file_server_com;
proxy_http_version 1.1;
proxy_set_header Connection "";
}}
}}
"#,
        hs = keys.key("hs.jwk"),
    ));
    let server = Server::start(Kind::Portcullis, 1, &template).unwrap();
    let hs = keys.token("hs_valid");

    let r = with_token(&server, "/api_old/1kb", hs);
    assert_eq!(r.status, 200, "{}", r.body_text());
    assert!(
        r.body_text().starts_with("GET /api_new/1kb HTTP/1.1\r\n"),
        "{}",
        r.body_text()
    );
    let r = send(&server, "GET", "/api_old/1kb", "");
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"Performance Test API\"")
    );
    // deny all in limit_except comes before auth_jwt.
    let r = send(&server, "POST", "/api_old/1kb", "Content-Length: 0\r\n");
    assert_eq!(r.status, 403);
    assert_eq!(with_token(&server, "/1kb", hs).status, 200);
    assert_eq!(send(&server, "GET", "/api_new/1kb", "").status, 404);
}

/// An identity provider's key endpoint: `/keys` answers `jwks` (counting the requests),
/// `/chunked` the same in chunks, `/missing` 404 and `/garbage` text that is no JSON. Returns
/// its port and the count of `/keys` and `/chunked` requests.
fn jwks_upstream(jwks: String) -> (u16, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let port = support::head_upstream(move |_, head| {
        let head = String::from_utf8_lossy(head);
        let path = head.split(' ').nth(1).unwrap_or("");
        let resp = match path {
            "/keys" => {
                counted.fetch_add(1, Ordering::SeqCst);
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{jwks}",
                    jwks.len()
                )
            }
            "/chunked" => {
                counted.fetch_add(1, Ordering::SeqCst);
                let (a, b) = jwks.split_at(jwks.len() / 2);
                format!(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
                    a.len(),
                    b.len()
                )
            }
            "/garbage" => {
                "HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\nthis is not JSON".to_owned()
            }
            _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_owned(),
        };
        resp.into_bytes()
    });
    (port, hits)
}

/// A gateway whose locations get their keys by `auth_jwt_key_request`, from the key endpoint
/// at `idp`, from a port nothing listens on (`down`), and from a file.
fn key_request_gateway(keys: &Material, upstream: u16, idp: u16, down: u16) -> String {
    support::main_config(&format!(
        r#"
    server {{
        listen 127.0.0.1:{{PORT0}};
        listen 127.0.0.1:{{PORT1}} http2;
        auth_jwt "Test API";
        location /cached/ {{
            auth_jwt_key_request /_jwks;
            auth_jwt_key_cache 10s;
            proxy_pass http://127.0.0.1:{upstream};
            proxy_set_header X-User $jwt_claim_sub;
        }}
        location /uncached/ {{
            auth_jwt_key_request /_jwks;
            proxy_pass http://127.0.0.1:{upstream};
            proxy_set_header X-User $jwt_claim_sub;
        }}
        location /chunked/ {{
            auth_jwt_key_request /_jwks_chunked;
            proxy_pass http://127.0.0.1:{upstream};
        }}
        location /combined/ {{
            auth_jwt_key_file {rsa};
            auth_jwt_key_request /_jwks;
            auth_jwt_key_cache 10s;
            proxy_pass http://127.0.0.1:{upstream};
            proxy_set_header X-User $jwt_claim_sub;
        }}
        location /down/ {{
            auth_jwt_key_request /_jwks_down;
            proxy_pass http://127.0.0.1:{upstream};
        }}
        location /missing/ {{
            auth_jwt_key_request /_jwks_missing;
            proxy_pass http://127.0.0.1:{upstream};
        }}
        location /garbage/ {{
            auth_jwt_key_request /_jwks_garbage;
            proxy_pass http://127.0.0.1:{upstream};
        }}
        location /file/ {{
            auth_jwt_key_request /_jwks_file;
            proxy_pass http://127.0.0.1:{upstream};
        }}
        location /failing/ {{
            auth_jwt_key_request /_jwks_down;
            error_page 500 = /error500;
            proxy_pass http://127.0.0.1:{upstream};
        }}
        location = /error500 {{
            auth_jwt off;
            return 200 "keys unavailable\n";
        }}
        # auth_jwt is inherited here too: the subrequests skip the access phase, as in nginx.
        location = /_jwks {{
            internal;
            proxy_pass http://127.0.0.1:{idp}/keys;
        }}
        location = /_jwks_chunked {{
            internal;
            proxy_pass http://127.0.0.1:{idp}/chunked;
        }}
        location = /_jwks_down {{
            internal;
            proxy_pass http://127.0.0.1:{down}/keys;
        }}
        location = /_jwks_missing {{
            internal;
            proxy_pass http://127.0.0.1:{idp}/missing;
        }}
        location = /_jwks_garbage {{
            internal;
            proxy_pass http://127.0.0.1:{idp}/garbage;
        }}
        location = /_jwks_file {{
            internal;
            alias {hs};
        }}
    }}
"#,
        hs = keys.key("hs.jwk"),
        rsa = keys.key("rsa.jwk"),
    ))
}

fn start_key_request_gateway(keys: &Material) -> (Server, Arc<AtomicUsize>) {
    let jwks = std::fs::read_to_string(keys.key("hs.jwk")).expect("hs.jwk");
    let (idp, hits) = jwks_upstream(jwks);
    let down = support::free_ports(1)[0];
    let template = key_request_gateway(keys, echo_upstream(), idp, down);
    let server = Server::start(Kind::Portcullis, 2, &template).unwrap();
    (server, hits)
}

fn user(r: &Response) -> String {
    r.body_text()
        .lines()
        .find_map(|l| l.strip_prefix("X-User: ").map(str::to_owned))
        .unwrap_or_default()
}

#[test]
fn key_request_fetches_keys_every_time_or_once_per_key_cache() {
    let Some(keys) = Material::generate() else {
        return;
    };
    let (server, hits) = start_key_request_gateway(&keys);
    let hs = keys.token("hs_valid");

    // Without a token nothing is fetched.
    let r = send(&server, "GET", "/uncached/a", "");
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some(REALM));
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    // Without auth_jwt_key_cache, every request fetches the keys.
    for i in 1..=3 {
        let r = with_token(&server, "/uncached/a", hs);
        assert_eq!(
            (r.status, user(&r).as_str()),
            (200, "alice"),
            "{}",
            r.body_text()
        );
        assert_eq!(hits.load(Ordering::SeqCst), i);
    }

    // With it, the first request fetches them and the next ones use them.
    for _ in 0..4 {
        let r = with_token(&server, "/cached/a", hs);
        assert_eq!(
            (r.status, user(&r).as_str()),
            (200, "alice"),
            "{}",
            r.body_text()
        );
        assert_eq!(hits.load(Ordering::SeqCst), 4);
    }

    // A token signed with a key the fetched set lacks is refused as invalid.
    for path in ["/cached/a", "/uncached/a"] {
        let r = with_token(&server, path, keys.token("rs_valid"));
        assert_eq!(r.status, 401, "{path}");
        assert_eq!(r.header("www-authenticate"), Some(INVALID), "{path}");
    }
    assert!(
        support::wait_until(WAIT, || server
            .error_log()
            .contains("JWT validation failed: no key with kid \"rsa1\"")),
        "{}",
        server.error_log()
    );

    // A key file and a key request of a level combine.
    let r = with_token(&server, "/combined/a", keys.token("rs_valid"));
    assert_eq!(
        (r.status, user(&r).as_str()),
        (200, "bob"),
        "{}",
        r.body_text()
    );
    let r = with_token(&server, "/combined/a", hs);
    assert_eq!(
        (r.status, user(&r).as_str()),
        (200, "alice"),
        "{}",
        r.body_text()
    );

    // A chunked key set response is read whole.
    let before = hits.load(Ordering::SeqCst);
    assert_eq!(with_token(&server, "/chunked/a", hs).status, 200);
    assert_eq!(hits.load(Ordering::SeqCst), before + 1);

    // The key request location is internal: a client cannot reach it.
    assert_eq!(with_token(&server, "/_jwks", hs).status, 404);

    // Over HTTP/1.1 keepalive too: the second request on the connection fetches again.
    let mut client = server.client(0);
    let before = hits.load(Ordering::SeqCst);
    for n in 1..=2 {
        client
            .send(
                format!("GET /uncached/k HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {hs}\r\n\r\n")
                    .as_bytes(),
            )
            .expect("send");
        let r = client.read_response(false).expect("response");
        assert_eq!((r.status, user(&r).as_str()), (200, "alice"));
        assert_eq!(hits.load(Ordering::SeqCst), before + n);
    }

    // And over HTTP/2.
    let url = format!("http://127.0.0.1:{}/uncached/h2", server.port(1));
    let auth = format!("Authorization: Bearer {hs}");
    let before = hits.load(Ordering::SeqCst);
    if let Some(r) = h2c::curl(&["--http2-prior-knowledge", "-H", &auth], &url) {
        assert_eq!((r.version.as_str(), r.status), ("2", 200));
        assert!(String::from_utf8_lossy(&r.body).contains("X-User: alice\r\n"));
        assert_eq!(hits.load(Ordering::SeqCst), before + 1);
        let r = h2c::curl(
            &["--http2-prior-knowledge", "-H", &auth],
            &url.replace("/uncached/", "/down/"),
        );
        assert_eq!(r.map(|r| r.status), Some(500));
    }
}

#[test]
fn a_key_request_that_fails_is_a_500_with_the_reason_logged() {
    let Some(keys) = Material::generate() else {
        return;
    };
    let (server, _hits) = start_key_request_gateway(&keys);
    let hs = keys.token("hs_valid");

    for (path, reason) in [
        (
            "/down/a",
            "JWT key request \"/_jwks_down\" failed: the response status is 502",
        ),
        (
            "/missing/a",
            "JWT key request \"/_jwks_missing\" failed: the response status is 404",
        ),
        (
            "/garbage/a",
            "JWT key request \"/_jwks_garbage\" failed: invalid JWK set in the response",
        ),
    ] {
        let r = with_token(&server, path, hs);
        assert_eq!(r.status, 500, "{path}: {}", r.body_text());
        assert_eq!(r.header("www-authenticate"), None, "{path}");
        assert!(
            support::wait_until(WAIT, || server
                .error_log()
                .lines()
                .any(|l| l.contains("[error]") && l.contains(reason))),
            "{path}: no log line with {reason:?}:\n{}",
            server.error_log()
        );
    }
    // The connection refused is logged as for any proxied request.
    assert!(
        server.error_log().contains("connect() failed"),
        "{}",
        server.error_log()
    );
    // Without a token, the 401 comes first: no key request is made.
    assert_eq!(send(&server, "GET", "/down/a", "").status, 401);

    // The 500 goes through error_page.
    let r = with_token(&server, "/failing/a", hs);
    assert_eq!(
        (r.status, r.body_text().as_str()),
        (200, "keys unavailable\n")
    );
}

#[test]
fn key_request_to_a_static_file() {
    let Some(keys) = Material::generate() else {
        return;
    };
    let (server, _hits) = start_key_request_gateway(&keys);
    let r = with_token(&server, "/file/a", keys.token("hs_valid"));
    assert_eq!(r.status, 200, "{}", r.body_text());
    let r = with_token(&server, "/file/a", keys.token("rs_valid"));
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some(INVALID));
    // Conditions of the main request do not apply to the subrequest.
    let r = send(
        &server,
        "GET",
        "/file/a",
        &format!(
            "Authorization: Bearer {}\r\nIf-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\nRange: bytes=0-3\r\n",
            keys.token("hs_valid")
        ),
    );
    assert_eq!(r.status, 200, "{}", r.body_text());
}

/// `satisfy` combines allow/deny with `auth_jwt` as nginx's access phase combines its
/// handlers: an allow/deny list that matches no rule decides nothing, so with `satisfy any`
/// the token is still required; a matching `allow` admits without one; with `satisfy all`
/// both must admit; a 401 outranks a 403.
#[test]
fn satisfy_combines_allow_deny_and_auth_jwt() {
    let Some(keys) = Material::generate() else {
        return;
    };
    let upstream = echo_upstream();
    let config = support::main_config(&format!(
        r#"
    server {{
        listen 127.0.0.1:{{PORT0}};
        auth_jwt "Test API";
        auth_jwt_key_file {hs};
        location /any-elsewhere {{ satisfy any; allow 10.0.0.0/8; proxy_pass {up}; }}
        location /any-here {{ satisfy any; allow 127.0.0.1; deny all; proxy_pass {up}; }}
        location /any-denied {{ satisfy any; deny all; proxy_pass {up}; }}
        location /all-here {{ satisfy all; allow 127.0.0.1; deny all; proxy_pass {up}; }}
        location /all-denied {{ satisfy all; deny all; proxy_pass {up}; }}
        location /any-limit {{
            satisfy any;
            auth_jwt off;
            limit_except GET {{ allow 10.0.0.0/8; deny all; auth_jwt "Writers"; }}
            proxy_pass {up};
        }}
    }}
"#,
        hs = keys.key("hs.jwk"),
        up = format_args!("http://127.0.0.1:{upstream}"),
    ));
    let server = Server::start(Kind::Portcullis, 1, &config).unwrap();
    let hs = keys.token("hs_valid");
    for (path, without, with) in [
        ("/any-elsewhere", 401, 200),
        ("/any-here", 200, 200),
        ("/any-denied", 401, 200),
        ("/all-here", 401, 200),
        ("/all-denied", 403, 403),
    ] {
        let r = send(&server, "GET", path, "");
        assert_eq!(r.status, without, "{path} without a token");
        if without == 401 {
            assert_eq!(r.header("www-authenticate"), Some(REALM), "{path}");
        }
        assert_eq!(
            with_token(&server, path, hs).status,
            with,
            "{path} with one"
        );
    }
    assert_eq!(send(&server, "GET", "/any-limit", "").status, 200);
    let r = send(&server, "POST", "/any-limit", "Content-Length: 0\r\n");
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"Writers\"")
    );
    let r = send(
        &server,
        "POST",
        "/any-limit",
        &format!("Authorization: Bearer {hs}\r\nContent-Length: 0\r\n"),
    );
    assert_eq!(r.status, 200);
}
