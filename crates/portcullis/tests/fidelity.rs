//! Details of nginx's answers that real configurations rely on, each compared with nginx on
//! the same configuration: a `return 204` has neither type nor length, and keeps the status
//! of the error_page it answers; an upstream's 401 intercepted by an error_page keeps its
//! `WWW-Authenticate`.

mod support;
#[path = "support/proxy.rs"]
mod upstreams;

use support::{get, head_upstream, kinds, Server};
use upstreams::{Reply, Upstream};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        location = /r204 { return 204; }
        location /e405 { error_page 405 /r204; return 405; }
        location /auth {
            proxy_intercept_errors on;
            error_page 401 /page401;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location = /page401 { return 200 "our 401 page\n"; }
    }
"#;

/// `GET path` with `Host: host` and the header lines `fields` (each ending in CRLF), on a
/// connection of its own.
fn get_as(port: u16, host: &str, path: &str, fields: &str) -> support::Response {
    let head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{fields}Connection: close\r\n\r\n");
    support::request(port, &head).expect("GET")
}

/// `POST path` with `body`, on a connection of its own.
fn post(port: u16, path: &str, body: &str) -> support::Response {
    let len = body.len();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n{body}"
    );
    support::request(port, &head).expect("POST")
}

#[test]
fn no_content_and_intercepted_challenges_as_nginx_sends_them() {
    let upstream = head_upstream(|_, _| {
        b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"up\"\r\n\
          Content-Length: 4\r\n\r\nno!\n"
            .to_vec()
    });
    let http = CONFIG.replace("{UPSTREAM}", &upstream.to_string());
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let port = server.port(0);

        let r = get(port, "/r204").expect("GET /r204");
        assert_eq!(r.status, 204, "{kind}");
        assert_eq!(
            r.header("content-length"),
            None,
            "{kind}: 204 has no length"
        );
        assert_eq!(r.header("content-type"), None, "{kind}: 204 has no type");

        let r = get(port, "/e405").expect("GET /e405");
        assert_eq!(r.status, 405, "{kind}: the error_page's status is kept");
        assert_eq!(r.header("content-length"), Some("0"), "{kind}");
        assert!(r.header("content-type").is_some(), "{kind}: {r:?}");

        let r = get(port, "/auth").expect("GET /auth");
        assert_eq!(r.status, 401, "{kind}");
        assert_eq!(r.body_text(), "our 401 page\n", "{kind}");
        assert_eq!(
            r.header("www-authenticate"),
            Some("Basic realm=\"up\""),
            "{kind}: the upstream's challenge is kept"
        );
    }
}

#[test]
fn connection_and_request_variables_as_nginx_makes_them() {
    let docroot = support::TempDir::new("realpath");
    std::fs::create_dir_all(docroot.path().join("real")).expect("mkdir");
    let link = docroot.path().join("link");
    std::os::unix::fs::symlink(docroot.path().join("real"), &link).expect("symlink");
    let real = std::fs::canonicalize(docroot.path().join("real")).expect("canonicalize");
    let http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        root {};\n        \
         location /vars {{ return 200 \"ct=$connection_time id=$request_id id2=$request_id \
         rr=$realpath_root\\n\"; }}\n        \
         location /bin {{ return 200 \"$binary_remote_addr\"; }}\n    }}\n",
        link.display()
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let r = get(server.port(0), "/vars").expect("GET /vars");
        let body = r.body_text();
        let field = |name: &str| {
            body.split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .unwrap_or_else(|| panic!("{kind}: no {name} in {body:?}"))
                .to_owned()
        };
        let ct = field("ct=");
        let (secs, millis) = ct.split_once('.').expect("seconds.millis");
        assert!(
            secs.bytes().all(|b| b.is_ascii_digit())
                && millis.len() == 3
                && millis.bytes().all(|b| b.is_ascii_digit()),
            "{kind}: $connection_time {ct:?}"
        );
        let id = field("id=");
        assert_eq!(id.len(), 32, "{kind}: $request_id {id:?}");
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(id, field("id2="), "{kind}: one $request_id per request");
        assert_eq!(
            field("rr="),
            real.display().to_string(),
            "{kind}: $realpath_root"
        );
        let next = get(server.port(0), "/vars").expect("GET /vars").body_text();
        assert!(!next.contains(&id), "{kind}: a new $request_id per request");

        let r = get(server.port(0), "/bin").expect("GET /bin");
        assert_eq!(r.body, vec![127, 0, 0, 1], "{kind}: $binary_remote_addr");
    }
}

#[test]
fn upstream_header_length_and_request_body_variables() {
    let upstream = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nX-Cache: HIT\r\nX-Multi: a\r\nX-Multi: b\r\n\
          Content-Length: 6\r\n\r\nhello\n"
            .to_vec()
    });
    let http = format!(
        "    log_format vars '[$upstream_http_x_cache|$upstream_http_x_multi|\
         $upstream_http_missing|$upstream_response_length|$request_body]';\n    \
         server {{\n        listen 127.0.0.1:{{PORT0}};\n        \
         access_log {{PREFIX}}/vars.log vars;\n        \
         location / {{\n            proxy_pass http://127.0.0.1:{upstream};\n            \
         add_header X-Seen $upstream_http_x_cache;\n        }}\n    }}\n"
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let r = support::request(
            server.port(0),
            "POST /p HTTP/1.1\r\nHost: localhost\r\nContent-Length: 9\r\n\r\nthe body!",
        )
        .expect("POST");
        assert_eq!(r.status, 200, "{kind}: {r:?}");
        assert_eq!(
            r.header("x-seen"),
            Some("HIT"),
            "{kind}: add_header reads it"
        );
        let log = server.path("vars.log");
        let want = "[HIT|a|-|6|the body!]";
        assert!(
            support::wait_until(std::time::Duration::from_secs(5), || {
                support::read_lossy(&log).contains(want)
            }),
            "{kind}: {want} in {:?}",
            support::read_lossy(&log)
        );
    }
}

#[test]
fn directory_redirects_are_escaped_as_nginx_escapes_them() {
    let docroot = support::TempDir::new("dir-redirects");
    for dir in ["dir sp", "a%b", "\u{fc}", "q\"{x"] {
        std::fs::create_dir_all(docroot.path().join(dir)).expect("mkdir");
    }
    let http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        root {};\n    }}\n",
        docroot.path().display()
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        for (path, location) in [
            ("/dir%20sp", "/dir%20sp/"),
            ("/a%25b", "/a%25b/"),
            ("/%C3%BC", "/%C3%BC/"),
            ("/dir%20sp?x=1", "/dir%20sp/?x=1"),
            ("/dir%20sp?", "/dir%20sp/"),
            ("/q%22%7Bx", "/q%22%7Bx/"),
        ] {
            let r = get(server.port(0), path).expect("GET");
            assert_eq!(r.status, 301, "{kind} {path}");
            let got = r.header("location").unwrap_or_default();
            assert!(got.ends_with(location), "{kind} {path}: Location {got:?}");
        }
    }
}

#[test]
fn add_header_replaces_etag_and_an_empty_value_removes_it() {
    let docroot = support::TempDir::new("etag");
    docroot.write("f.txt", "hi\n");
    let upstream = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nETag: \"up\"\r\nContent-Length: 3\r\n\r\nup\n".to_vec()
    });
    let http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        root {root};\n        \
         location /e1 {{ alias {root}/f.txt; add_header ETag foo always; }}\n        \
         location /e2 {{ alias {root}/f.txt; add_header ETag '' always; }}\n        \
         location /e3 {{ alias {root}/f.txt; add_header ETag foo always; add_header ETag '' always; }}\n        \
         location /p1 {{ proxy_pass http://127.0.0.1:{upstream}; add_header ETag bar; }}\n        \
         location /p2 {{ proxy_pass http://127.0.0.1:{upstream}; add_header ETag ''; }}\n    }}\n",
        root = docroot.path().display()
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        for (path, etag) in [
            ("/e1", Some("foo")),
            ("/e2", None),
            ("/e3", None),
            ("/p1", Some("bar")),
            ("/p2", None),
        ] {
            let r = get(server.port(0), path).expect("GET");
            assert_eq!(r.status, 200, "{kind} {path}");
            assert_eq!(
                r.header_count("etag"),
                usize::from(etag.is_some()),
                "{kind} {path}"
            );
            assert_eq!(r.header("etag"), etag, "{kind} {path}");
        }
    }
}

#[test]
fn expires_sets_expires_and_cache_control_as_nginx() {
    let docroot = support::TempDir::new("expires");
    let file = docroot.write("f.txt", "hi\n");
    // Last-Modified 2020-01-01 00:00:00 UTC, for `expires modified`.
    std::fs::File::options()
        .write(true)
        .open(&file)
        .and_then(|f| {
            f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_577_836_800))
        })
        .expect("set mtime");
    let upstream = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nExpires: Thu, 01 Jan 2099 00:00:00 GMT\r\n\
          Cache-Control: public\r\nContent-Length: 3\r\n\r\nup\n"
            .to_vec()
    });
    let f = file.display();
    let http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        \
         location /a {{ alias {f}; expires 1h; }}\n        \
         location /b {{ alias {f}; expires -1; }}\n        \
         location /c {{ alias {f}; expires epoch; }}\n        \
         location /d {{ alias {f}; expires max; }}\n        \
         location /e {{ alias {f}; expires modified 1d; }}\n        \
         location /g {{ set $x 2h; alias {f}; expires $x; }}\n        \
         location /h {{ expires 1h; return 404; }}\n        \
         location /p {{ proxy_pass http://127.0.0.1:{upstream}; expires 30s; }}\n    }}\n"
    );
    let cases: &[(&str, Option<&str>, Option<&str>)] = &[
        ("/a", None, Some("max-age=3600")),
        ("/b", None, Some("no-cache")),
        (
            "/c",
            Some("Thu, 01 Jan 1970 00:00:01 GMT"),
            Some("no-cache"),
        ),
        (
            "/d",
            Some("Thu, 31 Dec 2037 23:55:55 GMT"),
            Some("max-age=315360000"),
        ),
        (
            "/e",
            Some("Thu, 02 Jan 2020 00:00:00 GMT"),
            Some("no-cache"),
        ),
        ("/g", None, Some("max-age=7200")),
        ("/p", None, Some("max-age=30")),
    ];
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        for &(path, expires, cache_control) in cases {
            let r = get(server.port(0), path).expect("GET");
            assert_eq!(r.header_count("cache-control"), 1, "{kind} {path}: {r:?}");
            assert_eq!(r.header("cache-control"), cache_control, "{kind} {path}");
            assert_eq!(r.header_count("expires"), 1, "{kind} {path}");
            if let Some(expires) = expires {
                assert_eq!(r.header("expires"), Some(expires), "{kind} {path}");
            }
        }
        let r = get(server.port(0), "/h").expect("GET /h");
        assert_eq!(r.status, 404, "{kind}");
        assert_eq!(r.header("expires"), None, "{kind}: not on a 404");
    }
}

#[test]
fn proxy_redirect_regexes_and_refresh_as_nginx() {
    let upstream = head_upstream(|_, head| {
        let head = String::from_utf8_lossy(head);
        let target = head.split(' ').nth(1).unwrap_or("/").to_owned();
        format!(
            "HTTP/1.1 302 Found\r\nLocation: http://Backend:8080/app{target}\r\n\
             Refresh: 5; URL=http://Backend:8080/app{target}\r\nContent-Length: 0\r\n\r\n"
        )
        .into_bytes()
    });
    let http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        \
         location /re/ {{ proxy_pass http://127.0.0.1:{upstream}; \
         proxy_redirect ~^http://([a-z]+):\\d+(/.*)$ https://$1$2; }}\n        \
         location /ci/ {{ proxy_pass http://127.0.0.1:{upstream}; \
         proxy_redirect ~*^http://([a-z]+):\\d+(/.*)$ https://$1$2; }}\n        \
         location /px/ {{ proxy_pass http://127.0.0.1:{upstream}; \
         proxy_redirect http://Backend:8080/app/ /; }}\n    }}\n"
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let base = format!("http://localhost:{}", server.port(0));
        for (path, location, refresh) in [
            // Case-sensitive: "Backend" does not match [a-z]+, the value is kept.
            (
                "/re/x",
                "http://Backend:8080/app/re/x".to_string(),
                "5; URL=http://Backend:8080/app/re/x".to_string(),
            ),
            (
                "/ci/x",
                "https://Backend/app/ci/x".to_string(),
                "5; URL=https://Backend/app/ci/x".to_string(),
            ),
            ("/px/x", format!("{base}/px/x"), "5; URL=/px/x".to_string()),
        ] {
            let r = get(server.port(0), path).expect("GET");
            assert_eq!(r.status, 302, "{kind} {path}");
            assert_eq!(
                r.header("location"),
                Some(location.as_str()),
                "{kind} {path}"
            );
            assert_eq!(r.header("refresh"), Some(refresh.as_str()), "{kind} {path}");
        }
    }
}

#[test]
fn named_captures_of_server_name_and_location_regexes_are_variables() {
    let http = "    server {\n        listen 127.0.0.1:{PORT0};\n        \
                server_name ~^(?<sub>[a-z]+)\\.example\\.com$;\n        \
                location ~ ^/u/(?<user>[a-z]+)$ { return 200 \"sub=$sub user=$user\\n\"; }\n        \
                location / { return 200 \"sub=$sub\\n\"; }\n    }\n    \
                server {\n        listen 127.0.0.1:{PORT0} default_server;\n        \
                location / { return 200 \"default\\n\"; }\n    }\n";
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for (host, path, body) in [
            ("abc.example.com", "/u/bob", "sub=abc user=bob\n"),
            ("abc.example.com", "/x", "sub=abc\n"),
            ("other", "/x", "default\n"),
        ] {
            let r = get_as(server.port(0), host, path, "");
            assert_eq!(r.body_text(), body, "{kind} {host}{path}");
        }
    }
}

/// `$1`.. as nginx keeps them: set by the `server_name` regex that chose the server (not when
/// a plain name did), replaced by each regex that matches (a location's, a rewrite's, an
/// `if`'s; one without groups leaves none), cleared by a failed `if`, and kept through prefix,
/// exact and named locations and the internal redirects of error_page, try_files and
/// `rewrite ... last`.
#[test]
fn numbered_captures_of_server_name_are_kept_until_another_regex_matches() {
    let http = r#"
    server {
        listen 127.0.0.1:{PORT0};
        server_name foo.test ~^(www\.)?([a-z]+)\.(test|example)$;
        root /nonexistent;
        location / { return 200 "1=$1 2=$2 3=$3\n"; }
        location = /exact { return 200 "exact 1=$1 2=$2\n"; }
        location ^~ /stop { set $x "$2-$3"; return 200 "set $x\n"; }
        location ~ ^/ep/(.*)$ { error_page 404 = /fallback; }
        location ~ ^/tf/(.*)$ { try_files /nothere @named; }
        location /rw { rewrite ^/rw/(.*)$ /fallback/$1 last; }
        location /fallback { return 200 "fallback 1=$1 2=$2\n"; }
        location @named { return 200 "named 1=$1 2=$2\n"; }
        location ~ ^/nogroups { return 200 "nogroups 1=$1\n"; }
        location /if { if ($uri ~ ^/if/(z+)$) { return 200 "if 1=$1\n"; } return 200 "no 1=$1 2=$2\n"; }
    }
    server {
        listen 127.0.0.1:{PORT0} default_server;
        server_name *.wild.test ~^(.+)\.wild\.test$;
        location / { return 200 "default 1=$1\n"; }
    }
"#;
    let cases = [
        ("www.abc.test", "/", "1=www. 2=abc 3=test\n"),
        ("ABC.EXAMPLE", "/", "1= 2=abc 3=example\n"),
        ("foo.test", "/", "1= 2= 3=\n"),
        ("www.abc.test", "/exact", "exact 1=www. 2=abc\n"),
        ("www.abc.test", "/stop", "set abc-test\n"),
        ("www.abc.test", "/ep/a", "fallback 1=a 2=\n"),
        ("www.abc.test", "/tf/b", "named 1=b 2=\n"),
        ("www.abc.test", "/rw/c", "fallback 1=c 2=\n"),
        ("www.abc.test", "/nogroups", "nogroups 1=\n"),
        ("www.abc.test", "/if/zz", "if 1=zz\n"),
        ("www.abc.test", "/if/q", "no 1= 2=\n"),
        ("a.wild.test", "/", "default 1=\n"),
        ("elsewhere", "/", "default 1=\n"),
    ];
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for (host, path, body) in cases {
            let r = get_as(server.port(0), host, path, "");
            assert_eq!(r.body_text(), body, "{kind} {host}{path}");
        }
    }
}

/// The named groups of a `map` regex are variables, as in nginx: set when the map is evaluated
/// and its regex matches, usable in the map's value and after it. Read while unset, a named
/// group (of a map, a location or a rewrite) is empty without the warning an unset `set`
/// variable logs.
#[test]
fn named_groups_of_map_regexes_are_variables() {
    let http = r#"
    map $uri $site {
        ~^/s/(?<tenant>[a-z]+)/ $tenant-home;
        default none;
    }
    server {
        listen 127.0.0.1:{PORT0};
        location ~ ^/u/(?<user>[a-z]+)$ { return 200 "user=$user\n"; }
        location /r { rewrite ^/r/(?<rw>.*)$ /x; }
        location /setx { set $plain 1; }
        location / { return 200 "site=$site tenant=$tenant user=$user rw=$rw plain=$plain\n"; }
    }
"#;
    for kind in kinds() {
        let Some(mut server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for (path, body) in [
            ("/s/abc/page", "site=abc-home tenant=abc user= rw= plain=\n"),
            ("/elsewhere", "site=none tenant= user= rw= plain=\n"),
        ] {
            let r = get(server.port(0), path).expect("GET");
            assert_eq!(r.body_text(), body, "{kind} {path}");
        }
        server.stop();
        let log = server.error_log();
        assert!(
            log.contains("using uninitialized \"plain\" variable"),
            "{kind}:\n{log}"
        );
        for group in ["tenant", "user", "rw"] {
            assert!(
                !log.contains(&format!("using uninitialized \"{group}\"")),
                "{kind}: {group}\n{log}"
            );
        }
    }
}

/// nginx merges a request's slashes before it reads the `Host` header, so the address's
/// default server's `merge_slashes` decides, not the named server's: a server that turns it
/// off still sees `//private/` merged into its guarded `/private/`.
#[test]
fn merge_slashes_is_the_default_servers() {
    let http = r#"
    server {
        listen 127.0.0.1:{PORT0} default_server;
        location / { return 200 "default uri=$uri\n"; }
    }
    server {
        listen 127.0.0.1:{PORT0};
        server_name app.test;
        merge_slashes off;
        location /private/ { deny all; }
        location / { return 200 "app uri=$uri\n"; }
    }
    server {
        listen 127.0.0.1:{PORT1} default_server;
        merge_slashes off;
        location / { return 200 "unmerged default uri=$uri\n"; }
    }
    server {
        listen 127.0.0.1:{PORT1};
        server_name merging.test;
        location / { return 200 "merging uri=$uri\n"; }
    }
"#;
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &support::main_config(http)) else {
            continue;
        };
        for (port, host, path, status, body) in [
            (0, "app.test", "//private/x", 403, None),
            (0, "app.test", "/a/..//private/x", 403, None),
            (0, "app.test", "//open//x", 200, Some("app uri=/open/x\n")),
            (
                1,
                "merging.test",
                "//e//a",
                200,
                Some("merging uri=//e//a\n"),
            ),
        ] {
            let r = get_as(server.port(port), host, path, "");
            assert_eq!(r.status, status, "{kind} {host}{path}");
            if let Some(body) = body {
                assert_eq!(r.body_text(), body, "{kind} {host}{path}");
            }
        }
    }
}

/// `set $args` changes the request's arguments, as nginx's: `$args`, `$query_string`,
/// `$arg_*`, what a rewrite appends them to, and the URI a proxied request is sent with; in
/// every other location `$args` is the request's own. A `set` of a prefixed name (`$arg_a`,
/// `$http_foo`) gives it a value where it runs, and leaves it the argument's or header's
/// elsewhere.
#[test]
fn set_args_changes_the_arguments_and_prefixed_names_stay_readable() {
    let http = r#"
    server {
        listen 127.0.0.1:{PORT0};
        location / { try_files /nothing /index.php?$args; }
        location = /index.php { return 200 "php args=$args arg_p=$arg_p qs=$query_string\n"; }
        location /strip { set $args ""; rewrite ^ /index.php last; }
        location /append { set $args "n=1"; rewrite ^ /index.php?o=2 last; }
        location /redirect { rewrite ^/redirect(.*)$ http://x.test$1?$args permanent; }
        location /if { if ($arg_t) { set $args "t=1"; } return 200 "args=$args\n"; }
        location /set-arg { set $arg_a forced; set $http_foo set; return 200 "a=$arg_a foo=$http_foo\n"; }
        location /read-arg { return 200 "a=$arg_a foo=$http_foo\n"; }
        location /proxied { set $args "x=1"; proxy_pass http://127.0.0.1:{PORT0}/echo; }
        location /echo { return 200 "echo args=$args request_uri=$request_uri\n"; }
    }
"#;
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for (path, body) in [
            ("/page?p=42", "php args=p=42 arg_p=42 qs=p=42\n"),
            ("/strip?p=42", "php args= arg_p= qs=\n"),
            ("/append?p=42", "php args=o=2&n=1 arg_p= qs=o=2&n=1\n"),
            ("/if?t=5&u=6", "args=t=1\n"),
            ("/if?u=6", "args=u=6\n"),
            ("/set-arg?a=1", "a=forced foo=set\n"),
            ("/read-arg?a=1", "a=1 foo=x\n"),
            ("/proxied?q=1", "echo args=x=1 request_uri=/echo?x=1\n"),
        ] {
            let r = get_as(server.port(0), "localhost", path, "Foo: x\r\n");
            assert_eq!(r.body_text(), body, "{kind} {path}");
        }
        let r = get(server.port(0), "/redirect/x?a=1").expect("GET");
        assert_eq!(r.status, 301, "{kind}");
        assert_eq!(
            r.header("location"),
            Some("http://x.test/x?a=1&a=1"),
            "{kind}"
        );
    }
}

/// An `if` that holds hands the request to the block, a nested location that nginx does not
/// give the location's `try_files`: the file is looked for as it is ("if is evil").
#[test]
fn try_files_does_not_apply_inside_an_if_that_holds() {
    let http = r#"
    server {
        listen 127.0.0.1:{PORT0};
        root /nonexistent;
        location / { try_files $uri @fallback; if ($arg_y) { add_header X-Y y; } }
        location @fallback { return 200 "fallback $uri\n"; }
    }
"#;
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        let r = get(server.port(0), "/missing").expect("GET");
        assert_eq!(
            (r.status, r.body_text().as_str()),
            (200, "fallback /missing\n"),
            "{kind}"
        );
        let r = get(server.port(0), "/missing?y=1").expect("GET");
        assert_eq!(r.status, 404, "{kind}: {}", r.body_text());
    }
}

/// An error_page to a URI makes the request a GET, and `$request_method` says so; one to a
/// named location keeps the method.
#[test]
fn an_error_page_to_a_uri_is_a_get() {
    let http = r#"
    server {
        listen 127.0.0.1:{PORT0};
        location /deny { deny all; error_page 403 /show; }
        location /uri { error_page 404 = /show; return 404; }
        location /named { error_page 404 = @show; return 404; }
        location /show { return 200 "method=$request_method\n"; }
        location @show { return 200 "named method=$request_method\n"; }
    }
"#;
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for (path, status, body) in [
            ("/deny", 403, "method=GET\n"),
            ("/uri", 200, "method=GET\n"),
            ("/named", 200, "named method=POST\n"),
        ] {
            let r = post(server.port(0), path, "abc");
            assert_eq!(
                (r.status, r.body_text().as_str()),
                (status, body),
                "{kind} {path}"
            );
        }
    }
}

/// A repeated Cookie or X-Forwarded-For header reads as its values joined (nginx 1.22 joins
/// these two), `$cookie_name` looks in every Cookie header and matches the name in any case,
/// and `$proxy_add_x_forwarded_for` adds the client to all of them.
#[test]
fn repeated_cookie_and_forwarded_headers_are_joined() {
    let http = r#"
    server {
        listen 127.0.0.1:{PORT0};
        location / {
            return 200 "s=$cookie_session ck=$http_cookie xff=$http_x_forwarded_for add=$proxy_add_x_forwarded_for\n";
        }
    }
"#;
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for (fields, body) in [
            (
                "Cookie: a=1\r\nCookie: session=2\r\n",
                "s=2 ck=a=1; session=2 xff= add=127.0.0.1\n",
            ),
            (
                "X-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\n",
                "s= ck= xff=1.1.1.1, 2.2.2.2 add=1.1.1.1, 2.2.2.2, 127.0.0.1\n",
            ),
            (
                "Cookie: SESSION=3; x=1\r\n",
                "s=3 ck=SESSION=3; x=1 xff= add=127.0.0.1\n",
            ),
            (
                "Cookie: xsession=4;session=5\r\n",
                "s=5 ck=xsession=4;session=5 xff= add=127.0.0.1\n",
            ),
        ] {
            let r = get_as(server.port(0), "localhost", "/", fields);
            assert_eq!(r.body_text(), body, "{kind} {fields:?}");
        }
    }
}

/// Variable names as nginx reads them: `$1` is one digit (`$1_thumb` is `$1` and text), and
/// names are case-insensitive (`$HOST`, a `set $Foo` read as `$foo`, a map's `$MyMap`).
#[test]
fn variable_names_are_read_as_nginx_reads_them() {
    let http = r#"
    map $uri $MyMap { default mapped; }
    server {
        listen 127.0.0.1:{PORT0};
        location /pic/ { rewrite ^/pic/(.*)$ /echo/$1_thumb.jpg last; }
        location /echo/ { return 200 "echo $uri\n"; }
        location ~ ^/c/(a)(b)$ { return 200 "$10x$1abc $2$12\n"; }
        location /case { set $Foo 1; return 200 "host=$HOST ax=$ARG_X foo=$foo map=$mymap\n"; }
    }
"#;
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for (path, body) in [
            ("/pic/p", "echo /echo/p_thumb.jpg\n"),
            ("/c/ab", "a0xaabc ba2\n"),
            ("/case?x=7", "host=localhost ax=7 foo=1 map=mapped\n"),
        ] {
            let r = get(server.port(0), path).expect("GET");
            assert_eq!(r.body_text(), body, "{kind} {path}");
        }
    }
}

/// `return 408` and `return 499`, like `return 444`, close the connection with nothing sent:
/// nginx ends a request of either status at once.
#[test]
fn return_408_and_499_close_without_a_response() {
    let http = r#"
    server {
        listen 127.0.0.1:{PORT0};
        location /408 { return 408; }
        location /499 { return 499; }
        location /444 { return 444; }
        location /200 { return 200 "ok\n"; }
    }
"#;
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for (path, answered) in [
            ("/408", false),
            ("/499", false),
            ("/444", false),
            ("/200", true),
        ] {
            let head =
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            let got = support::send_and_read_all(server.port(0), head.as_bytes(), false);
            assert_eq!(
                !got.is_empty(),
                answered,
                "{kind} {path}: {:?}",
                String::from_utf8_lossy(&got)
            );
        }
        // Each is logged with its status, as nginx logs a request it ended.
        let log_path = server.access_log_path();
        let logged = |status: &str| {
            std::fs::read_to_string(&log_path)
                .unwrap_or_default()
                .lines()
                .any(|l| l.contains(&format!("\" {status} ")))
        };
        let all = support::wait_until(std::time::Duration::from_secs(5), || {
            ["408", "499", "444", "200"].iter().all(|s| logged(s))
        });
        assert!(
            all,
            "{kind}: {}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
    }
}

/// More of nginx's variable rules: a `server_name` regex without groups that chose the server
/// leaves `$1` empty (a later regex of the server does not run); a subrequest starts without
/// captures; `set $args ""` sends no `?` upstream; an `auth_request_set` variable named like a
/// header reads empty until the subrequest sets it; `set $ARGS` is `set $args`; a Cookie
/// header's pairs part at `;` or `,`, with spaces around `=`.
#[test]
fn server_name_subrequest_args_and_cookie_rules() {
    let http = r#"
    server {
        listen 127.0.0.1:{PORT0};
        server_name ~^www\. ~^([^.]+)\.example\.test$;
        location / { return 200 "[$1]\n"; }
        location /sub/ { auth_request /auth; root /nonexistent; }
        location = /auth { proxy_pass http://127.0.0.1:{PORT1}/check/$1; }
    }
    server {
        listen 127.0.0.1:{PORT1};
        location /check/ { return 204; }
        location /check/foo { return 403; }
        location /echo { return 200 "request_uri=$request_uri\n"; }
        location /strip { set $args ""; proxy_pass http://127.0.0.1:{PORT1}/echo; }
        location /upper { set $ARGS "z=1"; return 200 "args=$args\n"; }
        location /plain { return 200 "args=$args user=$http_x_user\n"; }
        location = /ok { return 204; }
        location /set-user { auth_request /ok; auth_request_set $http_x_user $upstream_status; return 200 "x"; }
        location /cookie { return 200 "a=[$cookie_a] b=[$cookie_b]\n"; }
    }
"#;
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &support::main_config(http)) else {
            continue;
        };
        let ask = |port, host, path, fields| get_as(server.port(port), host, path, fields);
        let r = ask(0, "www.example.test", "/", "");
        assert_eq!(
            r.body_text(),
            "[]\n",
            "{kind}: the group-less regex chose the server"
        );
        let r = ask(0, "foo.example.test", "/", "");
        assert_eq!(r.body_text(), "[foo]\n", "{kind}");
        let r = ask(0, "foo.example.test", "/sub/x", "");
        assert_eq!(
            r.status, 404,
            "{kind}: the subrequest asked /check/, not /check/foo"
        );
        for (path, fields, body) in [
            ("/strip?x=1", "", "request_uri=/echo\n"),
            ("/upper?q=1", "", "args=z=1\n"),
            ("/plain?q=1", "X-User: admin\r\n", "args=q=1 user=\n"),
            ("/cookie", "Cookie: a = 1\r\n", "a=[1] b=[]\n"),
            ("/cookie", "Cookie: a=1,b=2\r\n", "a=[1,b=2] b=[2]\n"),
        ] {
            let r = ask(1, "localhost", path, fields);
            assert_eq!(r.body_text(), body, "{kind} {path} {fields:?}");
        }
    }
}

/// `allow`/`deny` as nginx's access module: one list per level made by both directives,
/// replacing what the level inherits; no matching rule decides nothing (so `satisfy any`
/// admits); a `limit_except` block applies its own rules, or its location's, to the methods
/// it restricts.
#[test]
fn allow_and_deny_lists_inherit_and_combine_as_nginx() {
    let upstream =
        head_upstream(|_, _| b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n".to_vec());
    let http = r#"
    server {
        listen 127.0.0.1:{PORT0};
        deny 10.0.0.0/8;
        allow 127.0.0.1;
        deny all;
        location /inherit { proxy_pass http://127.0.0.1:{UPSTREAM}; }
        location /own { deny 127.0.0.1; proxy_pass http://127.0.0.1:{UPSTREAM}; }
        location /both { allow 127.0.0.1; deny all; proxy_pass http://127.0.0.1:{UPSTREAM}; }
        location /any { satisfy any; deny 10.0.0.0/8; proxy_pass http://127.0.0.1:{UPSTREAM}; }
        location /le-own {
            deny all;
            limit_except GET { allow 127.0.0.1; }
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /le-inherits {
            deny all;
            limit_except GET { }
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
    }
"#
    .replace("{UPSTREAM}", &upstream.to_string());
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let port = server.port(0);
        let status = |method: &str, path: &str| {
            let raw = format!(
                "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            support::request(port, &raw).expect("response").status
        };
        for (method, path, want) in [
            ("GET", "/inherit", 200),
            ("GET", "/own", 403),
            ("GET", "/both", 200),
            ("GET", "/any", 200),
            ("GET", "/le-own", 403),
            ("POST", "/le-own", 200),
            ("POST", "/le-inherits", 403),
        ] {
            assert_eq!(status(method, path), want, "{kind}: {method} {path}");
        }
    }
}

/// Variables of modules portcullis has, read where nginx's configurations read them: the
/// upstream's cookies and trailers, the cache status of a location without a cache, the
/// trailers sent, the rate limit and the PROXY protocol addresses (none here), whether the
/// request came as TLS early data. The access log line is nginx's, byte for byte.
#[test]
fn upstream_cookie_trailer_and_absent_feature_variables() {
    let upstream = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nSet-Cookie: theme=dark; Path=/\r\n\
          Set-Cookie: sid=abc123; HttpOnly\r\nTrailer: X-T\r\n\
          Transfer-Encoding: chunked\r\n\r\n6\r\nhello\n\r\n0\r\nX-T: tv\r\n\r\n"
            .to_vec()
    });
    let http = format!(
        "    log_format vars '[$upstream_cookie_sid|$upstream_cookie_theme|\
         $upstream_cookie_missing|$upstream_trailer_x_t|$upstream_cache_status|\
         $sent_trailer_x_t|$limit_rate|$proxy_protocol_addr|$proxy_protocol_port|\
         $proxy_protocol_server_addr|$proxy_protocol_server_port|$ssl_early_data|\
         $ssl_alpn_protocol|$ssl_curve]';\n    \
         server {{\n        listen 127.0.0.1:{{PORT0}};\n        \
         access_log {{PREFIX}}/vars.log vars;\n        \
         location / {{\n            proxy_pass http://127.0.0.1:{upstream};\n            \
         add_header X-Sid $upstream_cookie_sid;\n        }}\n    }}\n"
    );
    let mut lines = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let r = get(server.port(0), "/p").expect("GET /p");
        assert_eq!(r.status, 200, "{kind}: {r:?}");
        assert_eq!(r.body_text(), "hello\n", "{kind}");
        assert_eq!(r.header("x-sid"), Some("abc123"), "{kind}: add_header");
        let log = server.path("vars.log");
        assert!(
            support::wait_until(std::time::Duration::from_secs(5), || {
                support::read_lossy(&log).contains(']')
            }),
            "{kind}: {:?}",
            support::read_lossy(&log)
        );
        let line = support::read_lossy(&log);
        assert!(line.starts_with("[abc123|dark|-|"), "{kind}: {line}");
        lines.push((kind, line));
    }
    if let [(_, nginx), (_, ours)] = lines.as_slice() {
        assert_eq!(ours, nginx, "portcullis against nginx");
    }
}

/// `$pipe` is "p" for a request whose bytes came with the one before it, "." otherwise, as
/// nginx logs it; `$tcpinfo_*` are the kernel's figures of the client's connection.
#[test]
fn pipe_and_tcpinfo_variables() {
    let http = "    log_format pipe '$request_uri $pipe $connection_requests';\n    \
                log_format tcp '$tcpinfo_rtt|$tcpinfo_rttvar|$tcpinfo_snd_cwnd|$tcpinfo_rcv_space';\n    \
                server {\n        listen 127.0.0.1:{PORT0};\n        \
                access_log {PREFIX}/pipe.log pipe;\n        \
                access_log {PREFIX}/tcp.log tcp;\n        \
                location / { return 200 \"ok\\n\"; }\n    }\n";
    let mut logs = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        let mut c = server.client(0);
        let req = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
        c.send(format!("{}{}", req("/a"), req("/b")).as_bytes())
            .expect("send two");
        for _ in 0..2 {
            assert_eq!(c.read_response(false).expect("response").status, 200);
        }
        c.send(req("/c").as_bytes()).expect("send third");
        assert_eq!(c.read_response(false).expect("response").status, 200);
        let log = server.path("pipe.log");
        assert!(
            support::wait_until(std::time::Duration::from_secs(5), || {
                support::read_lossy(&log).lines().count() == 3
            }),
            "{kind}: {:?}",
            support::read_lossy(&log)
        );
        let pipe = support::read_lossy(&log);
        assert_eq!(pipe, "/a . 1\n/b p 2\n/c . 3\n", "{kind}");
        let tcp = support::read_lossy(&server.path("tcp.log"));
        for line in tcp.lines() {
            let figures: Vec<&str> = line.split('|').collect();
            assert_eq!(figures.len(), 4, "{kind}: {line}");
            for f in &figures {
                assert!(f.parse::<u32>().is_ok(), "{kind}: {line}");
            }
            // A connection that carried data has a congestion window and receive space.
            assert_ne!(figures[2], "0", "{kind}: {line}");
            assert_ne!(figures[3], "0", "{kind}: {line}");
        }
        logs.push(pipe);
    }
    if let [nginx, ours] = logs.as_slice() {
        assert_eq!(ours, nginx, "portcullis against nginx");
    }
}

/// `$upstream_bytes_sent` and `$upstream_bytes_received`: the request's head and body as sent
/// to the upstream and everything read back, per request on a kept-alive upstream connection
/// as on a new one, as nginx counts them.
#[test]
fn upstream_bytes_sent_and_received() {
    let upstream =
        head_upstream(|_, _| b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhello\n".to_vec());
    let http = format!(
        "    log_format bytes '$request_uri $upstream_bytes_received $upstream_bytes_sent';\n    \
         upstream kept {{ server 127.0.0.1:{upstream}; keepalive 4; }}\n    \
         server {{\n        listen 127.0.0.1:{{PORT0}};\n        \
         access_log {{PREFIX}}/bytes.log bytes;\n        \
         location /ka/ {{ proxy_pass http://kept; proxy_http_version 1.1; \
         proxy_set_header Connection \"\"; }}\n        \
         location /new/ {{ proxy_pass http://127.0.0.1:{upstream}; }}\n    }}\n"
    );
    let mut logs = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let port = server.port(0);
        for path in ["/ka/1", "/ka/2", "/new/1"] {
            let r = get(port, path).expect("GET");
            assert_eq!(r.status, 200, "{kind} {path}");
        }
        let r = support::request(
            port,
            "POST /ka/post HTTP/1.1\r\nHost: localhost\r\nContent-Length: 8\r\n\r\nabcdefgh",
        )
        .expect("POST");
        assert_eq!(r.status, 200, "{kind} POST");
        let log = server.path("bytes.log");
        assert!(
            support::wait_until(std::time::Duration::from_secs(5), || {
                support::read_lossy(&log).lines().count() == 4
            }),
            "{kind}: {:?}",
            support::read_lossy(&log)
        );
        let text = support::read_lossy(&log);
        // The response is 44 bytes, head and body.
        for line in text.lines() {
            assert!(line.contains(" 44 "), "{kind}: {line}");
        }
        logs.push(text);
    }
    if let [nginx, ours] = logs.as_slice() {
        assert_eq!(ours, nginx, "portcullis against nginx");
    }
}

/// `if_modified_since`: `exact` (the default) answers 304 only to the file's own second,
/// `before` to it or any later date, `off` never; as nginx does.
#[test]
fn if_modified_since_exact_before_and_off() {
    let docroot = support::TempDir::new("ims");
    let file = docroot.write("f.txt", "hello\n");
    let mtime = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .expect("mtime");
    let date = portcullis_server::files::fmt_http_date;
    let later = mtime + std::time::Duration::from_secs(3600);
    let earlier = mtime - std::time::Duration::from_secs(3600);
    let http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        root {root};\n        \
         location /exact/ {{ alias {root}/; }}\n        \
         location /before/ {{ alias {root}/; if_modified_since before; }}\n        \
         location /off/ {{ alias {root}/; if_modified_since off; }}\n    }}\n",
        root = docroot.path().display()
    );
    let cases = [
        ("/exact/f.txt", date(mtime), 304),
        ("/exact/f.txt", date(later), 200),
        ("/before/f.txt", date(mtime), 304),
        ("/before/f.txt", date(later), 304),
        ("/before/f.txt", date(earlier), 200),
        ("/off/f.txt", date(mtime), 200),
    ];
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        for (path, since, want) in &cases {
            let r = support::request(
                server.port(0),
                &format!(
                    "GET {path} HTTP/1.1\r\nHost: localhost\r\nIf-Modified-Since: {since}\r\n\r\n"
                ),
            )
            .expect("GET");
            assert_eq!(r.status, *want, "{kind} {path} since {since}");
        }
    }
}

/// `underscores_in_headers on` keeps a header named with `_` (and `$http_x_api_key` reads
/// `X_Api_Key`); `ignore_invalid_headers off` keeps every header whatever its name; by
/// default both are dropped. What the upstream receives and what the variable reads are
/// nginx's.
#[test]
fn underscores_and_invalid_header_names() {
    // The upstream answers with the names of the header fields it received.
    let upstream = head_upstream(|_, head| {
        let text = String::from_utf8_lossy(head);
        let mut names: Vec<&str> = text
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':').map(|(n, _)| n))
            .filter(|n| n.starts_with('X'))
            .collect();
        names.sort_unstable();
        let body = names.join(",");
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let server = |port: u8, extra: &str| {
        format!(
            "    server {{\n        listen 127.0.0.1:{{PORT{port}}};\n        {extra}\n        \
             location / {{ proxy_pass http://127.0.0.1:{upstream}; \
             add_header X-Var \"[$http_x_api_key|$http_x_forwarded_for]\"; }}\n    }}\n"
        )
    };
    let http = [
        server(0, "underscores_in_headers on;"),
        server(1, ""),
        server(2, "ignore_invalid_headers off;"),
    ]
    .concat();
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 3, &support::main_config(&http)) else {
            continue;
        };
        let mut answers = Vec::new();
        for i in 0..3 {
            let r = support::request(
                server.port(i),
                "GET / HTTP/1.1\r\nHost: localhost\r\nX_Api_Key: k1\r\nX.Dot: d\r\nX-Plain: p\r\n\
                 X_Forwarded_For: 10.9.9.9\r\n\r\n",
            )
            .expect("GET");
            assert_eq!(r.status, 200, "{kind} server {i}");
            answers.push(format!(
                "{} {}",
                r.body_text(),
                r.header("x-var").unwrap_or_default()
            ));
        }
        assert_eq!(answers[1], "X-Plain [|]", "{kind}: the defaults drop both");
        // $http_x_forwarded_for reads only the header of that name, never X_Forwarded_For.
        assert_eq!(
            answers[0], "X-Plain,X_Api_Key,X_Forwarded_For [k1|]",
            "{kind}"
        );
        seen.push((kind, answers));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        assert_eq!(ours, nginx, "portcullis against nginx");
    }
}

/// `proxy_cookie_domain` and `proxy_cookie_path` rewrite the `Set-Cookie` fields of proxied
/// responses as nginx does: plain and regex rules, the first that matches, a domain's leading
/// dot kept, a rewritten cookie written anew, `off` leaving them alone.
#[test]
fn proxy_cookie_domain_and_path() {
    let upstream = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\n\
          Set-Cookie: a=1; Domain=backend.local; Path=/app/x\r\n\
          Set-Cookie: b=2;domain=.BACKEND.local;  path=/other ; HttpOnly\r\n\
          Set-Cookie: c=3; Path=/application\r\n\
          Set-Cookie: d=4\r\n\
          Set-Cookie: e; path=/app/\r\n\
          Set-Cookie: f=6; Domain=else.where; Path=/static\r\n\
          Content-Length: 3\r\n\r\nok\n"
            .to_vec()
    });
    let http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        \
         location /plain/ {{ proxy_pass http://127.0.0.1:{upstream}; \
         proxy_cookie_domain backend.local example.org; proxy_cookie_path /app/ /; \
         proxy_cookie_path ~^/oth(.*)$ /new$1; }}\n        \
         location /re/ {{ proxy_cookie_domain ~^(.+)\\.local$ $1.test; \
         proxy_cookie_path /app $host/app; proxy_pass http://127.0.0.1:{upstream}; }}\n        \
         location /off/ {{ proxy_cookie_domain off; proxy_pass http://127.0.0.1:{upstream}; }}\n    }}\n"
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let mut all = Vec::new();
        for path in ["/plain/", "/re/", "/off/"] {
            let r = get(server.port(0), path).expect("GET");
            assert_eq!(r.status, 200, "{kind} {path}");
            let cookies: Vec<String> = r
                .headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
                .map(|(_, v)| v.clone())
                .collect();
            assert_eq!(cookies.len(), 6, "{kind} {path}: {cookies:?}");
            all.push(cookies);
        }
        assert_eq!(all[0][0], "a=1; Domain=example.org; Path=/x", "{kind}");
        assert_eq!(
            all[2][0], "a=1; Domain=backend.local; Path=/app/x",
            "{kind}"
        );
        seen.push((kind, all));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        assert_eq!(ours, nginx, "portcullis against nginx");
    }
}

#[test]
fn remote_user_is_read_from_basic_credentials_as_nginx_reads_them() {
    let http = "    server {\n        listen 127.0.0.1:{PORT0};\n        \
                location / { return 200 \"[$remote_user]\"; }\n    }\n";
    // "alice:secret", "bob:", "a:b:c", ":secret", "alice" (no colon), bad base64.
    let values = [
        "Basic YWxpY2U6c2VjcmV0",
        "basic    YWxpY2U6c2VjcmV0",
        "BASIC Ym9iOg==",
        "Basic Ym9iOg",
        "Basic YTpiOmM=",
        "Basic Ym9iOg==!!",
        "Basic OnNlY3JldA==",
        "Basic YWxpY2U",
        "Basic !!!!",
        "Basic YWxpY2U6c2VjcmV0a",
        "Bearer YWxpY2U6c2VjcmV0",
        "Basic",
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        let mut answers = Vec::new();
        for value in values {
            let r = support::request(
                server.port(0),
                &format!("GET / HTTP/1.1\r\nHost: localhost\r\nAuthorization: {value}\r\n\r\n"),
            )
            .expect("GET");
            answers.push(format!("{value} -> {} {}", r.status, r.body_text()));
        }
        assert_eq!(
            answers[0], "Basic YWxpY2U6c2VjcmV0 -> 200 [alice]",
            "{kind}"
        );
        assert_eq!(answers[4], "Basic YTpiOmM= -> 200 [a]", "{kind}");
        assert_eq!(answers[10], "Bearer YWxpY2U6c2VjcmV0 -> 200 []", "{kind}");
        seen.push((kind, answers));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        assert_eq!(ours, nginx, "portcullis against nginx");
    }
}

/// `recursive_error_pages` is read where the first error happens: a target that fails again
/// is answered by its own error_page only if that first location allowed it. A page whose
/// target fails sends the target's error status, not the one `=code` asked for. Internal
/// redirects that run out end in a 500 even where error pages may recurse.
#[test]
fn recursive_error_pages_and_failing_targets_as_nginx() {
    let http = r#"
    server {
        listen 127.0.0.1:{PORT0};
        recursive_error_pages on;
        error_page 500 /loop;
        location /loop { rewrite ^ /loop2 last; }
        location /loop2 { rewrite ^ /loop last; }
        location /off { error_page 404 /on; recursive_error_pages off; return 404; }
        location /on { recursive_error_pages on; error_page 404 /page; return 404; }
        location /page { return 200 "page\n"; }
        location /on2 { error_page 404 /off2; recursive_error_pages on; return 404; }
        location /off2 { recursive_error_pages off; error_page 404 /page; return 404; }
        location /code { error_page 404 =410 /fails; return 404; }
        location /fails { return 503; }
        location /code_text { error_page 404 =410 /text; return 404; }
        location /text { return 503 "text\n"; }
    }
"#;
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for (path, status, body) in [
            ("/loop", 500, None),
            ("/off", 404, None),
            ("/on2", 404, Some("page\n")),
            ("/code", 503, None),
            ("/code_text", 410, Some("text\n")),
        ] {
            let r = get(server.port(0), path).expect("GET");
            assert_eq!(r.status, status, "{kind} {path}: {}", r.body_text());
            if let Some(body) = body {
                assert_eq!(r.body_text(), body, "{kind} {path}");
            }
        }
    }
}

/// nginx's own variables take no value from `set`, `auth_request_set` or a `map`, but for
/// `$args`, `$limit_rate`, the TLS module's and the prefixed families: the configuration is
/// refused, with the name as written. A `${name}` holds only a name's characters.
#[test]
fn variables_are_refused_where_nginx_refuses_them() {
    let cases = [
        (
            "location / { return 200 \"${http_x-y}\"; }",
            Some("the closing bracket in \"http_x\" variable is missing"),
        ),
        (
            "location / { set $URI x; }",
            Some("the duplicate \"URI\" variable"),
        ),
        (
            "location / { set $query_string x; }",
            Some("the duplicate \"query_string\" variable"),
        ),
        (
            "location / { auth_request_set $upstream_addr x; }",
            Some("the duplicate \"upstream_addr\" variable"),
        ),
        (
            "map $host $Host { default x; }",
            Some("the duplicate \"Host\" variable"),
        ),
        ("location / { set $args a; set $ssl_protocol x; }", None),
        (
            "location / { set $http_x a; set $cookie_c x; set $arg_a x; }",
            None,
        ),
    ];
    for (config, error) in cases {
        let http = if config.starts_with("map") {
            format!("{config} server {{ listen 127.0.0.1:{{PORT0}}; }}")
        } else {
            format!("server {{ listen 127.0.0.1:{{PORT0}}; {config} }}")
        };
        for kind in kinds() {
            let Some(binary) = kind.binary() else {
                continue;
            };
            let dir = support::TempDir::new("builtin-t");
            let text = support::render(&support::main_config(&http), dir.path(), &[1]);
            let conf = dir.write("nginx.conf", text);
            let out = support::test_config(std::process::Command::new(binary), dir.path(), &conf);
            let stderr = String::from_utf8_lossy(&out.stderr);
            match error {
                Some(error) => assert!(
                    !out.status.success() && stderr.contains(error),
                    "{kind} {config}: {stderr}"
                ),
                None => assert!(out.status.success(), "{kind} {config}: {stderr}"),
            }
        }
    }
}

/// `return` with a text sends it whatever the status, 444, 408 and 499 too; without one
/// those close the connection. An upstream's 499 goes out as it came. `return 304;` has a
/// type and a length of 0, as nginx's.
#[test]
fn return_texts_of_closing_statuses_and_304_as_nginx() {
    let upstream =
        head_upstream(|_, _| b"HTTP/1.1 499 Whatever\r\nContent-Length: 3\r\n\r\nup\n".to_vec());
    let http = format!(
        r#"
    server {{
        listen 127.0.0.1:{{PORT0}};
        location /444t {{ return 444 "t"; }}
        location /408t {{ return 408 "t"; }}
        location /499t {{ return 499 "t"; }}
        location /444 {{ return 444; }}
        location /304 {{ return 304; }}
        location /up {{ proxy_pass http://127.0.0.1:{upstream}; }}
    }}
"#
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let port = server.port(0);
        for (path, status, body) in [
            ("/444t", 444, "t"),
            ("/408t", 408, "t"),
            ("/499t", 499, "t"),
            ("/up", 499, "up\n"),
        ] {
            let r = get(port, path).expect("GET");
            assert_eq!(
                (r.status, r.body_text().as_str()),
                (status, body),
                "{kind} {path}"
            );
        }
        assert!(get(port, "/444").is_err(), "{kind}: /444 answered");
        let r = get(port, "/304").expect("GET /304");
        assert_eq!(r.status, 304, "{kind}");
        assert_eq!(r.header("content-length"), Some("0"), "{kind}");
        assert_eq!(r.header("content-type"), Some("text/plain"), "{kind}");
    }
}

/// The URI a proxied request is sent with, as nginx builds it: after a `rewrite ... break`
/// (the server's too) the whole new URI, without the proxy_pass URI part; escaped with nginx's table when the
/// client's had an escape or it was changed here, else as it came. A rewrite's captures in
/// the arguments are escaped with the same table.
#[test]
fn proxied_uris_after_rewrites_and_escapes_as_nginx() {
    let upstream = head_upstream(|_, head| {
        let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            line.len() + 1
        )
        .into_bytes();
        r.extend_from_slice(line);
        r.push(b'\n');
        r
    });
    let http = format!(
        r#"
    server {{
        listen 127.0.0.1:{{PORT0}};
        rewrite ^/srv/(.*)$ /b/$1 break;
        location /rw/ {{
            rewrite ^/rw/(.*)$ /new/$1 break;
            proxy_pass http://127.0.0.1:{upstream}/ignored/;
        }}
        location /api/ {{
            rewrite ^/api/(.*)$ /$1 break;
            proxy_pass http://127.0.0.1:{upstream}/;
        }}
        location /if/ {{
            if ($arg_a) {{ rewrite ^ /changed break; }}
            proxy_pass http://127.0.0.1:{upstream}/base/;
        }}
        location /b/ {{ proxy_pass http://127.0.0.1:{upstream}/x/; }}
        location /args/ {{ rewrite ^/args/(.*)$ /show?x=$1 last; }}
        location /show {{ return 200 "args=$args\n"; }}
    }}
"#
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        for (path, body) in [
            ("/rw/p?q=2", "GET /new/p?q=2 HTTP/1.0\n"),
            ("/srv/p", "GET /b/p HTTP/1.0\n"),
            ("/api/v1/users?id=3", "GET /v1/users?id=3 HTTP/1.0\n"),
            ("/if/x?a=1", "GET /changed?a=1 HTTP/1.0\n"),
            ("/if/x?b=1", "GET /base/x?b=1 HTTP/1.0\n"),
            (
                "/b/a%22%3C%3E%5C%5E%60%7B%7C%7Db",
                "GET /x/a%22%3C%3E%5C%5E%60%7B%7C%7Db HTTP/1.0\n",
            ),
            ("/b/a%20b", "GET /x/a%20b HTTP/1.0\n"),
            ("/b/a{b}", "GET /x/a{b} HTTP/1.0\n"),
            ("/args/a%22b%7Bc%26d", "args=x=a%22b%7Bc%26d\n"),
        ] {
            let r = get(server.port(0), path).expect("GET");
            assert_eq!(
                (r.status, r.body_text().as_str()),
                (200, body),
                "{kind} {path}"
            );
        }
    }
}

/// Regexes match the URI's bytes as nginx's PCRE does: `%FF` decodes to a byte that is not
/// UTF-8, and `.` or `[^/]` still match it, so a location, `if`, `map` or `rewrite` regex
/// is not stepped around by one.
#[test]
fn regexes_match_bytes_that_are_not_utf8() {
    let http = r#"
    map $uri $m { ~^/mp/.*$ matched; default unmatched; }
    server {
        listen 127.0.0.1:{PORT0};
        location / { return 200 "open\n"; }
        location ~ ^/priv/.*\.txt$ { return 403; }
        location ~ ^/cls/[^/]+$ { return 403; }
        location /if/ { if ($uri ~ "^/if/.*$") { return 403; } return 200 "open\n"; }
        location /mp/ { return 200 "$m\n"; }
        location /rw/ { rewrite ^/rw/(.*)$ /new/$1 last; }
        location /new/ { return 200 "new\n"; }
    }
"#;
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for (path, status, body) in [
            ("/priv/%FF.txt", 403, None),
            ("/priv/%C3%A9.txt", 403, None),
            ("/cls/a%80b", 403, None),
            ("/if/%FF", 403, None),
            ("/mp/%FF", 200, Some("matched\n")),
            ("/rw/a%E9b", 200, Some("new\n")),
        ] {
            let r = get(server.port(0), path).expect("GET");
            assert_eq!(r.status, status, "{kind} {path}: {}", r.body_text());
            if let Some(body) = body {
                assert_eq!(r.body_text(), body, "{kind} {path}");
            }
        }
    }
}

/// A body read whole goes again to the upstream of an error_page that answers an
/// intercepted error: to a named location as the POST it was, and to a URI (where the
/// request becomes a GET) too, with its length, as nginx sends it.
#[test]
fn the_body_goes_to_an_error_pages_upstream_too() {
    let failing = Upstream::start(|_| {
        Reply::SendClose(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec())
    });
    let echo = Upstream::start(|x| {
        let line = x.head.lines().next().unwrap_or_default();
        let length = x.header("content-length").unwrap_or("none");
        let body = String::from_utf8_lossy(&x.body);
        Reply::SendClose(upstreams::ok(
            &format!("{line} length={length} body={body}\n"),
            "",
        ))
    });
    let (failing, echo) = (failing.port, echo.port);
    let http = format!(
        r#"
    server {{
        listen 127.0.0.1:{{PORT0}};
        proxy_intercept_errors on;
        location /named/ {{ error_page 404 = @fallback; proxy_pass http://127.0.0.1:{failing}; }}
        location /uri/ {{ error_page 404 /fallback/x; proxy_pass http://127.0.0.1:{failing}; }}
        location /fallback/ {{ proxy_pass http://127.0.0.1:{echo}; }}
        location @fallback {{ proxy_pass http://127.0.0.1:{echo}; }}
    }}
"#
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        for (path, status, body) in [
            (
                "/named/a",
                200,
                "POST /named/a HTTP/1.0 length=5 body=hello\n",
            ),
            (
                "/uri/a",
                404,
                "GET /fallback/x HTTP/1.0 length=5 body=hello\n",
            ),
        ] {
            let r = post(server.port(0), path, "hello");
            assert_eq!(
                (r.status, r.body_text().as_str()),
                (status, body),
                "{kind} {path}"
            );
        }
    }
}

/// An upstream's header lines go out as nginx writes them, `Name: value` and CRLF: one that
/// ended in a bare LF, had no space or several after the colon, or spaces after the value.
#[test]
fn upstream_header_lines_are_written_as_nginx_writes_them() {
    let upstream = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nX-A: 1\nX-B:2\r\nX-C:   3  \r\nX-E:\r\nX-F: kept\r\nContent-Length: 3\r\n\r\nok\n"
            .to_vec()
    });
    let http = format!(
        r#"
    server {{
        listen 127.0.0.1:{{PORT0}};
        location / {{ proxy_pass http://127.0.0.1:{upstream}; }}
    }}
"#
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let raw = support::send_and_read_all(
            server.port(0),
            b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            false,
        );
        let text = String::from_utf8_lossy(&raw);
        for line in [
            "\r\nX-A: 1\r\n",
            "\r\nX-B: 2\r\n",
            "\r\nX-C: 3\r\n",
            "\r\nX-E: \r\n",
            "\r\nX-F: kept\r\n",
        ] {
            assert!(text.contains(line), "{kind}: {line:?} in {text:?}");
        }
    }
}

/// proxy_hide_header hides the upstream's Content-Type too, and a field both hidden and
/// passed by proxy_pass_header is passed, as in nginx.
#[test]
fn hidden_and_passed_upstream_fields_as_nginx() {
    let upstream = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nContent-Type: text/a\r\nX-Powered-By: p\r\nX-D: d\r\nContent-Length: 3\r\n\r\nok\n"
            .to_vec()
    });
    let http = format!(
        r#"
    server {{
        listen 127.0.0.1:{{PORT0}};
        location / {{
            proxy_hide_header X-D;
            proxy_hide_header Content-Type;
            proxy_pass_header X-Powered-By;
            proxy_hide_header X-Powered-By;
            proxy_pass http://127.0.0.1:{upstream};
        }}
    }}
"#
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let r = get(server.port(0), "/").expect("GET");
        assert_eq!(r.body_text(), "ok\n", "{kind}");
        assert_eq!(r.header("content-type"), None, "{kind}");
        assert_eq!(r.header("x-d"), None, "{kind}");
        assert_eq!(r.header("x-powered-by"), Some("p"), "{kind}");
    }
}

/// A request answered by an error_page whose target is proxied is logged with the status the
/// client got, the error's, not the status of the target's upstream; `$upstream_status`
/// shows both exchanges, parted by " : ".
#[test]
fn an_error_page_proxied_is_logged_with_the_errors_status() {
    let fallback = Upstream::start(|_| Reply::SendClose(upstreams::ok("tiny", "")));
    let failing = Upstream::start(|_| {
        Reply::SendClose(b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n".to_vec())
    });
    let dead = support::free_ports(1)[0];
    let (fallback, failing) = (fallback.port, failing.port);
    let http = format!(
        r#"
    log_format st '$request_uri $status $upstream_status';
    server {{
        listen 127.0.0.1:{{PORT0}};
        access_log {{PREFIX}}/st.log st;
        location /dead/ {{ error_page 502 /fb/; proxy_pass http://127.0.0.1:{dead}; }}
        location /int/ {{
            proxy_intercept_errors on;
            error_page 500 /fb/;
            proxy_pass http://127.0.0.1:{failing};
        }}
        location /fb/ {{ proxy_pass http://127.0.0.1:{fallback}; }}
    }}
"#
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        for (path, status) in [("/dead/x", 502), ("/int/x", 500)] {
            let r = get(server.port(0), path).expect("GET");
            assert_eq!(
                (r.status, r.body_text().as_str()),
                (status, "tiny"),
                "{kind} {path}"
            );
        }
        let log = server.path("st.log");
        let want = ["/dead/x 502 502 : 200", "/int/x 500 500 : 200"];
        let logged = support::wait_until(std::time::Duration::from_secs(5), || {
            let text = support::read_lossy(&log);
            want.iter().all(|w| text.lines().any(|l| l == *w))
        });
        assert!(logged, "{kind}: {}", support::read_lossy(&log));
    }
}

/// A body that stops coming for client_body_timeout ends the request with 408: the
/// connection closes with nothing sent (an error_page for 408 is not looked at), and the
/// request is logged with 408.
#[test]
fn a_body_that_stops_coming_is_a_silent_408() {
    let upstream = Upstream::start(|_| Reply::SendClose(upstreams::ok("up", "")));
    let port = upstream.port;
    let http = format!(
        r#"
    log_format st '$request_uri $status';
    server {{
        listen 127.0.0.1:{{PORT0}};
        client_body_timeout 1s;
        access_log {{PREFIX}}/st.log st;
        error_page 408 /page;
        location /up {{ proxy_pass http://127.0.0.1:{port}; }}
        location /page {{ return 200 "page"; }}
    }}
"#
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let got = support::send_and_read_all(
            server.port(0),
            b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nab",
            false,
        );
        assert!(got.is_empty(), "{kind}: {}", String::from_utf8_lossy(&got));
        let log = server.path("st.log");
        let logged = support::wait_until(std::time::Duration::from_secs(5), || {
            support::read_lossy(&log).lines().any(|l| l == "/up 408")
        });
        assert!(logged, "{kind}: {}", support::read_lossy(&log));
    }
}

/// A head that stops coming is logged as nginx logs it: 408 after client_header_timeout, 400
/// when the client closes, with what came of the request line, the length of the lines that
/// came whole and the time waited. A connection that sent nothing is not logged.
#[test]
fn heads_that_stop_coming_are_logged() {
    let http = r#"
    log_format t '$status $body_bytes_sent $request_length "$request" rt=$request_time';
    server {
        listen 127.0.0.1:{PORT0};
        client_header_timeout 1s;
        access_log {PREFIX}/t.log t;
        location / { return 200 "ok"; }
    }
"#;
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        let sends: [(&[u8], bool); 4] = [
            (b"GET /x HTTP/1.1\r\nHost: a\r\n", false),
            (b"GET", false),
            (b"GET /shut HTTP/1.1\r\nHost: a\r\n", true),
            (b"", false),
        ];
        for (bytes, shut) in sends {
            let got = support::send_and_read_all(server.port(0), bytes, shut);
            assert!(got.is_empty(), "{kind}: {}", String::from_utf8_lossy(&got));
        }
        let log = server.path("t.log");
        // Each line, and the time it waited: about client_header_timeout for a 408.
        let want = [
            (r#"408 0 26 "GET /x HTTP/1.1""#, 0.9..3.0),
            (r#"408 0 0 "GET""#, 0.9..3.0),
            (r#"400 0 29 "GET /shut HTTP/1.1""#, 0.0..0.5),
        ];
        let logged = support::wait_until(std::time::Duration::from_secs(5), || {
            support::read_lossy(&log).lines().count() >= want.len()
        });
        let text = support::read_lossy(&log);
        assert!(logged, "{kind}: {text}");
        for (line, waited) in &want {
            let found = text.lines().any(|l| {
                l.split_once(" rt=").is_some_and(|(head, rt)| {
                    head == *line && rt.parse::<f64>().is_ok_and(|t| waited.contains(&t))
                })
            });
            assert!(found, "{kind}: no {line:?} ({waited:?} s) in\n{text}");
        }
        assert_eq!(text.lines().count(), want.len(), "{kind}: {text}");
    }
}

/// `$request_length` of a proxied request counts its body as it came, a chunked body's
/// framing too.
#[test]
fn request_length_counts_the_body_read() {
    let upstream = Upstream::start(|_| Reply::SendClose(upstreams::ok("up", "")));
    let port = upstream.port;
    let http = format!(
        r#"
    log_format len '$request_uri $request_length';
    server {{
        listen 127.0.0.1:{{PORT0}};
        access_log {{PREFIX}}/len.log len;
        location /up {{ proxy_pass http://127.0.0.1:{port}; }}
    }}
"#
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let port = server.port(0);
        for raw in [
            "POST /up?l HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\nConnection: close\r\n\r\n0123456789",
            "POST /up?c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\na\r\n0123456789\r\n0\r\n\r\n",
        ] {
            let r = support::request(port, raw).expect("POST");
            assert_eq!(r.status, 200, "{kind}");
        }
        let log = server.path("len.log");
        assert!(
            support::wait_until(std::time::Duration::from_secs(5), || {
                support::read_lossy(&log).lines().count() == 2
            }),
            "{kind}"
        );
        let lines: Vec<String> = support::read_lossy(&log)
            .lines()
            .map(String::from)
            .collect();
        if kind == support::Kind::Portcullis {
            support::expect_lines(&lines, &["/up?l 81", "/up?c 99"]);
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// `$body_bytes_sent` of a proxied response sent chunked counts what went out after the
/// head, the chunks' lines too, as nginx counts it. The upstream sends one chunk, so that
/// both servers send the same framing.
#[test]
fn body_bytes_sent_counts_the_chunks_lines() {
    let upstream = Upstream::start(|_| {
        Reply::SendClose(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nb\r\nhello world\r\n0\r\n\r\n"
                .to_vec(),
        )
    });
    let port = upstream.port;
    let http = format!(
        r#"
    log_format sent '$request_uri $body_bytes_sent';
    server {{
        listen 127.0.0.1:{{PORT0}};
        access_log {{PREFIX}}/sent.log sent;
        location / {{ proxy_pass http://127.0.0.1:{port}; }}
    }}
"#
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let r = get(server.port(0), "/c").expect("GET");
        assert_eq!(r.body_text(), "hello world", "{kind}");
        let log = server.path("sent.log");
        assert!(
            support::wait_until(std::time::Duration::from_secs(5), || {
                support::read_lossy(&log).lines().count() == 1
            }),
            "{kind}"
        );
        seen.push((
            kind,
            support::read_lossy(&log)
                .lines()
                .map(String::from)
                .collect(),
        ));
    }
    support::compare(&seen);
}

/// A `server_name` regex with a capital letter matches a host in any case, as nginx compiles
/// it caseless; one without matches as written.
#[test]
fn server_name_regexes_with_capitals_are_caseless() {
    let http = r#"
    server {
        listen 127.0.0.1:{PORT0} default_server;
        location / { return 200 "default\n"; }
    }
    server {
        listen 127.0.0.1:{PORT0};
        server_name ~^WWW\.EXAMPLE;
        location / { return 200 "capitals\n"; }
    }
    server {
        listen 127.0.0.1:{PORT0};
        server_name ~^app\.example;
        location / { return 200 "app\n"; }
    }
"#;
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for (host, body) in [
            ("www.example.com", "capitals\n"),
            ("app.example.com", "app\n"),
            ("other.test", "default\n"),
        ] {
            let r = get_as(server.port(0), host, "/", "");
            assert_eq!(r.body_text(), body, "{kind} {host}");
        }
    }
}

/// An `Expect: 100-continue` request whose body goes to an error_page's upstream too gets one
/// 100 Continue, as from nginx.
#[test]
fn one_100_continue_for_a_body_sent_twice() {
    let failing = Upstream::start(|_| {
        Reply::SendClose(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec())
    });
    let echo =
        Upstream::start(|x| Reply::SendClose(upstreams::ok(&format!("{}\n", x.body.len()), "")));
    let (failing, echo) = (failing.port, echo.port);
    let http = format!(
        r#"
    server {{
        listen 127.0.0.1:{{PORT0}};
        proxy_intercept_errors on;
        location / {{ error_page 404 = @fallback; proxy_pass http://127.0.0.1:{failing}; }}
        location @fallback {{ proxy_pass http://127.0.0.1:{echo}; }}
    }}
"#
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port(0))).expect("connect");
        s.write_all(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n")
            .expect("send");
        let mut first = [0u8; 25];
        s.read_exact(&mut first).expect("100 Continue");
        assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n", "{kind}");
        s.write_all(b"hello").expect("body");
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        let text = String::from_utf8_lossy(&rest);
        assert!(text.starts_with("HTTP/1.1 200"), "{kind}: {text}");
        assert!(!text.contains("100 Continue"), "{kind}: {text}");
        assert!(text.ends_with("\r\n\r\n5\n"), "{kind}: {text}");
    }
}

/// An error page that is a file goes out whole with the error's status, whatever `Range`
/// and `If-*` the request had: nginx's range and not_modified filters look only at a 200.
/// `error_page ... =200` makes one, and then they answer as for any file.
#[test]
fn an_error_page_file_ignores_ranges_and_conditions_unless_sent_as_200() {
    let http = r#"
        server {
            listen 127.0.0.1:{PORT0};
            root {PREFIX}/www;
            location /keep/ { error_page 404 /page.txt; }
            location /ok/ { error_page 404 =200 /page.txt; }
        }
    "#;
    let asks = [
        "Range: bytes=0-3\r\n",
        "Range: bytes=500-\r\n",
        "If-Match: \"zz\"\r\n",
        "If-None-Match: *\r\n",
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        server.write("www/page.txt", "abcdefghij\n");
        let mut got = Vec::new();
        for dir in ["keep", "ok"] {
            for fields in asks {
                let r = get_as(server.port(0), "localhost", &format!("/{dir}/none"), fields);
                got.push(format!(
                    "/{dir}/ {fields:?} -> {} {:?} {:?}",
                    r.status,
                    r.header("content-range"),
                    r.body_text().lines().next().unwrap_or_default(),
                ));
            }
        }
        for line in &got[..4] {
            assert!(
                line.contains("-> 404 None \"abcdefghij\""),
                "{kind}: {line}"
            );
        }
        assert!(
            got[4].contains("-> 206 Some(\"bytes 0-3/11\") \"abcd\""),
            "{kind}: {}",
            got[4]
        );
        assert!(got[5].contains("-> 416"), "{kind}: {}", got[5]);
        assert!(got[6].contains("-> 412"), "{kind}: {}", got[6]);
        assert!(got[7].contains("-> 304"), "{kind}: {}", got[7]);
        seen.push((kind, got));
    }
    support::compare(&seen);
}

/// `etag off`: a file's response has no `ETag`, and the conditions that name one compare
/// against none (only `*` matches), as in nginx.
#[test]
fn etag_off_sends_none_and_matches_none() {
    let http = r#"
        server {
            listen 127.0.0.1:{PORT0};
            root {PREFIX}/www;
            location /off/ { etag off; }
        }
    "#;
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for dir in ["on", "off"] {
            server.write(&format!("www/{dir}/f"), "abcdefghij\n");
        }
        let mut got = Vec::new();
        for dir in ["on", "off"] {
            let path = format!("/{dir}/f");
            let etag = get_as(server.port(0), "localhost", &path, "")
                .header("etag")
                .map(str::to_string);
            let same = format!(
                "\"{}\"",
                etag.as_deref().unwrap_or("none").trim_matches('"')
            );
            let asks = [
                format!("If-None-Match: {same}\r\n"),
                "If-None-Match: *\r\n".to_string(),
                format!("If-Match: {same}\r\n"),
                "If-Match: *\r\n".to_string(),
                format!("Range: bytes=0-1\r\nIf-Range: {same}\r\n"),
            ];
            got.push(format!("{path} etag {:?}", etag.is_some()));
            for fields in &asks {
                let r = get_as(server.port(0), "localhost", &path, fields);
                got.push(format!("{path} {fields:?} -> {}", r.status));
            }
        }
        let statuses: Vec<&str> = got.iter().map(|l| l.rsplit(' ').next().unwrap()).collect();
        assert_eq!(
            statuses,
            [
                "true", "304", "304", "200", "200", "206", "false", "200", "304", "412", "200",
                "200"
            ],
            "{kind}: {got:#?}"
        );
        seen.push((kind, got));
    }
    support::compare(&seen);
}

/// A file's type comes from its extension even when the path has bytes that are not UTF-8,
/// and an empty `default_type` sends no `Content-Type` at all, as nginx does.
#[test]
fn content_types_of_odd_paths_and_an_empty_default_type() {
    use std::os::unix::ffi::OsStrExt;
    let http = r#"
        server {
            listen 127.0.0.1:{PORT0};
            root {PREFIX}/www;
            location /none/ { types { } default_type ""; }
        }
    "#;
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        let dir = server
            .path("www")
            .join(std::ffi::OsStr::from_bytes(b"d\xff"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("x.html"), "odd\n").expect("write");
        server.write("www/none/f.txt", "none\n");
        let mut got = Vec::new();
        for path in ["/d%FF/x.html", "/none/f.txt"] {
            let r = get_as(server.port(0), "localhost", path, "");
            got.push(format!(
                "{path} -> {} {:?}",
                r.status,
                r.header("content-type")
            ));
        }
        assert_eq!(
            got,
            [
                "/d%FF/x.html -> 200 Some(\"text/html\")",
                "/none/f.txt -> 200 None"
            ],
            "{kind}"
        );
        seen.push((kind, got));
    }
    support::compare(&seen);
}

/// A directory the worker may not read, asked for without its slash: nginx opens it before
/// it redirects, and answers 403.
#[test]
fn an_unreadable_directory_without_its_slash_is_forbidden() {
    use std::os::unix::fs::PermissionsExt;
    let http = r#"
        server {
            listen 127.0.0.1:{PORT0};
            root {PREFIX}/www;
        }
    "#;
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for dir in ["www/open", "www/shut"] {
            std::fs::create_dir_all(server.path(dir)).expect("mkdir");
        }
        let shut = std::fs::Permissions::from_mode(0o700);
        std::fs::set_permissions(server.path("www/shut"), shut).expect("chmod");
        let mut got = Vec::new();
        for path in ["/open", "/shut"] {
            let r = get_as(server.port(0), "localhost", path, "");
            got.push(format!("{path} -> {}", r.status));
        }
        seen.push((kind, got));
    }
    support::compare(&seen);
    // Started by root, both servers' workers run as an unprivileged user, whom the mode
    // shuts out; started by that user, the directory is theirs and both redirect.
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        for (kind, got) in &seen {
            assert_eq!(got, &["/open -> 301", "/shut -> 403"], "{kind}");
        }
    }
}

/// `allow unix:` and `deny unix:` are about clients of UNIX-domain sockets: they load, and
/// a TCP client passes them by, to the rules after them or to none.
#[test]
fn unix_access_rules_pass_tcp_clients_by() {
    let http = r#"
        server {
            listen 127.0.0.1:{PORT0};
            root {PREFIX}/www;
            location /only-unix/ { allow unix:; deny all; }
            location /deny-unix/ { deny unix:; }
        }
    "#;
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(http)) else {
            continue;
        };
        for dir in ["only-unix", "deny-unix"] {
            server.write(&format!("www/{dir}/f"), "f\n");
        }
        let mut got = Vec::new();
        for path in ["/only-unix/f", "/deny-unix/f"] {
            let r = get_as(server.port(0), "localhost", path, "");
            got.push(format!("{path} -> {}", r.status));
        }
        assert_eq!(
            got,
            ["/only-unix/f -> 403", "/deny-unix/f -> 200"],
            "{kind}"
        );
        seen.push((kind, got));
    }
    support::compare(&seen);
}
