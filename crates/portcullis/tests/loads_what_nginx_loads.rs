//! Shapes of configuration seen in real nginx.conf files that nginx loads and serves, each
//! run under nginx and portcullis on the same requests: a regex location nested in an `alias`
//! location (forbidding scripts in an upload folder, or serving some files of it with their
//! own headers), `proxy_pass $u` with the whole URL in a variable, and the redirect nginx
//! sends for a proxied location's name without its final slash.

mod support;

use support::{get, kinds, Server, TempDir};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT1};
        location / { return 200 "upstream $request_uri\n"; }
    }
    server {
        listen 127.0.0.1:{PORT0};
        location /media/ {
            alias {DOCROOT}/uploads/;
            location ~* \.php$ { deny all; }
            location ~* \.txt$ { add_header X-Nested yes; }
        }
        location ~ ^/whole/ { alias {DOCROOT}/uploads/page.txt; }
        location /u/ {
            set $u http://127.0.0.1:{PORT1};
            proxy_pass $u;
        }
        location /bad/ {
            set $u ftp://127.0.0.1:{PORT1};
            proxy_pass $u;
        }
    }
"#;

/// Path, nginx's status, a part of its body, and the X-Nested header it sends.
const CASES: &[(&str, u16, &str, Option<&str>)] = &[
    ("/media/image.png", 200, "png bytes", None),
    ("/media/script.php", 403, "403 Forbidden", None),
    ("/media/page.txt", 200, "a page", Some("yes")),
    ("/media/missing.txt", 404, "404 Not Found", None),
    ("/whole/anything", 200, "a page", None),
    ("/u/abc?q=1", 200, "upstream /u/abc?q=1", None),
    ("/bad/abc", 500, "500 Internal Server Error", None),
];

#[test]
fn nested_regex_in_alias_and_a_url_in_a_variable() {
    let docroot = TempDir::new("nginx-shapes");
    docroot.write("uploads/image.png", "png bytes\n");
    docroot.write("uploads/script.php", "<?php echo 1;\n");
    docroot.write("uploads/page.txt", "a page\n");
    let http = CONFIG.replace("{DOCROOT}", &docroot.path().display().to_string());
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &support::main_config(&http)) else {
            continue;
        };
        for &(path, status, body, nested) in CASES {
            let r = get(server.port(0), path).expect("GET");
            assert_eq!(r.status, status, "{kind} {path}: {r:?}");
            assert!(r.body_text().contains(body), "{kind} {path}: {r:?}");
            assert_eq!(r.header("x-nested"), nested, "{kind} {path}");
        }
        let log = server.error_log();
        assert!(
            log.contains("invalid URL prefix in \"ftp://127.0.0.1:"),
            "{kind}: the bad URL is logged\n{log}"
        );
    }
}

const AUTO_REDIRECT: &str = r#"
    server {
        listen 127.0.0.1:{PORT1};
        location / { return 200 "upstream $request_uri\n"; }
    }
    server {
        listen 127.0.0.1:{PORT0};
        location /auto/ { proxy_pass http://127.0.0.1:{PORT1}/; }
        location ~ auto$ { return 418; }
        location = /exact { return 200 "exact\n"; }
        location /exact/ { proxy_pass http://127.0.0.1:{PORT1}/; }
        location /plain/ { return 200 "plain\n"; }
        location /int/ { internal; proxy_pass http://127.0.0.1:{PORT1}/; }
    }
"#;

#[test]
fn a_proxied_location_name_without_its_slash_redirects() {
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &support::main_config(AUTO_REDIRECT)) else {
            continue;
        };
        let port = server.port(0);
        let base = format!("http://localhost:{port}");
        for (path, status, location, body) in [
            ("/auto", 301, Some(format!("{base}/auto/")), ""),
            ("/auto?a=1&b", 301, Some(format!("{base}/auto/?a=1&b")), ""),
            ("/auto/x", 200, None, "upstream /x"),
            ("/exact", 200, None, "exact"),
            ("/plain", 404, None, ""),
            // An internal location is not revealed by its redirect.
            ("/int", 404, None, ""),
        ] {
            let r = get(port, path).expect("GET");
            assert_eq!(r.status, status, "{kind} {path}: {r:?}");
            assert_eq!(r.header("location"), location.as_deref(), "{kind} {path}");
            assert!(r.body_text().contains(body), "{kind} {path}: {r:?}");
        }
    }
}
