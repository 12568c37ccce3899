//! `auth_jwt`, black box: the real binary in front of an echo upstream started by the test,
//! with keys and tokens made by PyJWT. Open-source nginx has no `auth_jwt`, so only
//! portcullis runs; the expected texts are NGINX Plus's documented ones.

#[path = "support/auth_jwt.rs"]
mod jwt_support;
mod support;

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
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .arg("-t")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("run -t");
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
