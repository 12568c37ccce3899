//! `proxy_cookie_flags`: `Secure`, `HttpOnly` and `SameSite` added to, changed in or taken
//! from an upstream's `Set-Cookie` fields, by cookie name, regex or variable, the first rule
//! for a name winning; with `proxy_cookie_path` beside it; `off`; and nginx's complaints.
//! Compared with nginx.

mod support;

use std::process::Command;

use support::{head_upstream, kinds, main_config, Server, TempDir};

const COOKIES: &[&str] = &[
    "one=1;Path=/x",
    "two=2;  secure ;HttpOnly=yes; SameSite=None",
    "tee=3; samesite=lax",
    "bad",
    "one=9; SECURE",
];

#[test]
fn flags_are_set_as_nginx_sets_them() {
    let up = head_upstream(|_, _| {
        let mut r = String::from("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n");
        for c in COOKIES {
            r.push_str(&format!("Set-Cookie: {c}\r\n"));
        }
        r.push_str("\r\nok");
        r.into_bytes()
    });
    let http = format!(
        "
    server {{
        listen 127.0.0.1:{{PORT0}};
        location /a {{
            proxy_pass http://127.0.0.1:{up};
            proxy_cookie_flags one secure httponly samesite=strict;
            proxy_cookie_flags ~^t secure;
            proxy_cookie_flags $arg_c nosecure nohttponly nosamesite;
        }}
        location /b {{
            proxy_pass http://127.0.0.1:{up};
            proxy_cookie_flags ~^ONE samesite=lax;
            proxy_cookie_path /x /y;
        }}
        location /v {{
            proxy_pass http://127.0.0.1:{up};
            proxy_cookie_flags $arg_n $arg_f bogus;
        }}
        location /off {{
            proxy_cookie_flags off;
            proxy_pass http://127.0.0.1:{up};
        }}
        proxy_cookie_flags two nosecure;
        location /inherited {{ proxy_pass http://127.0.0.1:{up}; }}
    }}
"
    );
    let paths = [
        "/a?c=two",
        "/b",
        "/v?n=one&f=secure",
        "/v?n=two&f=nosecure",
        "/v?n=two&f=nohttponly",
        "/v?n=two&f=samesite=lax",
        "/v?n=two&f=NOSAMESITE",
        "/v?n=one&f=",
        "/v?n=ONE&f=httponly",
        "/off",
        "/inherited",
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for path in paths {
            let r = support::get(server.port(0), path).expect("answer");
            for (name, value) in &r.headers {
                if name.eq_ignore_ascii_case("set-cookie") {
                    lines.push(format!("{path}: {value}"));
                }
            }
        }
        if kind == support::Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "/a?c=two: one=1; Path=/x; Secure; HttpOnly; SameSite=Strict",
                    "/a?c=two: tee=3; samesite=lax; Secure",
                    "/a?c=two: one=9; SECURE; HttpOnly; SameSite=Strict",
                    "/b: one=1; Path=/y; SameSite=Lax",
                    "/v?n=two&f=nosecure: two=2; HttpOnly=yes; SameSite=None",
                    "/v?n=one&f=: one=1;Path=/x",
                    "/v?n=ONE&f=httponly: one=1; Path=/x; HttpOnly",
                    "/off: two=2;  secure ;HttpOnly=yes; SameSite=None",
                    "/inherited: two=2; HttpOnly=yes; SameSite=None",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

#[test]
fn complaints_are_nginxs() {
    for (line, error) in [
        (
            "proxy_cookie_flags off; proxy_cookie_flags a secure;",
            "\"proxy_cookie_flags\" directive is duplicate",
        ),
        (
            "proxy_cookie_flags a secure; proxy_cookie_flags off;",
            "\"proxy_cookie_flags\" directive is duplicate",
        ),
        ("proxy_cookie_flags one;", "invalid parameter \"one\""),
        (
            "proxy_cookie_flags one a b c d;",
            "invalid number of arguments in \"proxy_cookie_flags\" directive",
        ),
    ] {
        let http = format!(
            "server {{ listen 127.0.0.1:1; location / {{ {line} proxy_pass http://127.0.0.1:2; }} }}"
        );
        for kind in kinds() {
            let Some(binary) = kind.binary() else {
                continue;
            };
            let dir = TempDir::new("cookie-flags-t");
            let conf = dir.write(
                "nginx.conf",
                support::render(&main_config(&http), dir.path(), &[]),
            );
            let out = support::test_config(Command::new(binary), dir.path(), &conf);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{kind}: {line} loads");
            assert!(stderr.contains(error), "{kind}: {line}: {stderr}");
        }
    }
}
