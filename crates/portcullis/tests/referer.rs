//! `valid_referers` and `$invalid_referer`, compared with nginx on the same configuration
//! and the same `Referer` fields: `none`, `blocked`, exact and wildcard host names, a path
//! the URI must start with, `server_names`, regexes, and a level without the directive.

mod support;

use support::{kinds, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        server_name localhost *.pics.test ~^img\d+\.test$;
        root {PREFIX}/www;
        location /strict/ {
            valid_referers example.com *.example.org .example.net www.example.*
                           good.test/galleries/ ~\.trusted\.test/;
            if ($invalid_referer) { return 403; }
        }
        location /lenient/ {
            valid_referers none blocked server_names;
            if ($invalid_referer) { return 403; }
        }
        location /open/ {
            if ($invalid_referer) { return 403; }
        }
        location /order/ {
            valid_referers *.com/a/ www.example.*/b/ ~^x.y/;
            if ($invalid_referer) { return 403; }
        }
    }
"#;

#[test]
fn referers_are_judged_as_nginx_judges_them() {
    let referers = [
        None,
        Some("http://example.com/page"),
        Some("https://EXAMPLE.com"),
        Some("http://www.example.com/"),
        Some("http://a.example.org/x"),
        Some("http://example.org/x"),
        Some("http://example.net/"),
        Some("http://sub.example.net:8080/"),
        Some("http://www.example.co.uk/"),
        Some("http://good.test/galleries/one"),
        Some("http://good.test/other/"),
        Some("http://good.test"),
        Some("http://x.trusted.test/path"),
        Some("example.com"),
        Some("ftp://example.com/"),
        Some("http://localhost/"),
        Some("http://a.pics.test/"),
        Some("http://img42.test/"),
        Some("http://img.test/"),
        Some("http://i.ru"),
        Some("http://www.example.com/a/x"),
        Some("http://www.example.com/b/x"),
        Some("http://www.example.com:80/b/"),
        Some("http://x\u{e9}y/"),
        Some("http://xzy/"),
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(CONFIG)) else {
            continue;
        };
        for dir in ["strict", "lenient", "open", "order"] {
            std::fs::create_dir_all(server.path(&format!("www/{dir}"))).expect("mkdir");
            std::fs::write(server.path(&format!("www/{dir}/f")), "f\n").expect("write");
        }
        let mut got = Vec::new();
        for path in ["/strict/f", "/lenient/f", "/open/f", "/order/f"] {
            for referer in referers {
                let field = referer
                    .map(|r| format!("Referer: {r}\r\n"))
                    .unwrap_or_default();
                let r = support::request(
                    server.port(0),
                    &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{field}Connection: close\r\n\r\n"),
                )
                .expect("request");
                got.push(format!("{path} {referer:?} -> {}", r.status));
            }
        }
        let status = |path: &str, referer: Option<&str>| {
            let line = format!("{path} {referer:?} -> ");
            got.iter()
                .find_map(|l| l.strip_prefix(&line))
                .unwrap_or_else(|| panic!("{line}"))
                .to_string()
        };
        assert_eq!(status("/strict/f", None), "403", "{kind}");
        assert_eq!(
            status("/strict/f", Some("http://example.com/page")),
            "200",
            "{kind}"
        );
        assert_eq!(
            status("/strict/f", Some("http://good.test/other/")),
            "403",
            "{kind}"
        );
        assert_eq!(status("/lenient/f", None), "200", "{kind}");
        assert_eq!(status("/lenient/f", Some("example.com")), "200", "{kind}");
        assert_eq!(
            status("/lenient/f", Some("http://example.com/page")),
            "403",
            "{kind}"
        );
        assert_eq!(
            status("/open/f", Some("http://example.com/page")),
            "200",
            "{kind}"
        );
        seen.push((kind, got));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}

/// What nginx refuses in `valid_referers`, refused with its message.
#[test]
fn bad_valid_referers_are_refused_as_nginx_refuses_them() {
    let cases = [
        ("~", "empty regex in \"~\""),
        (
            "example.com example.com",
            "conflicting parameter \"example.com\"",
        ),
        (
            ".example.com example.com",
            "conflicting parameter \"example.com\"",
        ),
        (
            "*.example.com .example.com",
            "conflicting parameter \".example.com\"",
        ),
        ("none", "without any valid referer"),
    ];
    for kind in kinds() {
        let Some(binary) = kind.binary() else {
            continue;
        };
        for (args, message) in cases {
            let dir = support::TempDir::new("referer-t");
            let http = format!(
                "server {{ listen 127.0.0.1:{{PORT0}}; location / {{ valid_referers {args}; }} }}"
            );
            let conf = dir.write(
                "nginx.conf",
                support::render(
                    &support::main_config(&http),
                    dir.path(),
                    &support::free_ports(1),
                ),
            );
            let out = support::test_config(std::process::Command::new(&binary), dir.path(), &conf);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{kind}: {args} loads");
            assert!(stderr.contains(message), "{kind}: {args}:\n{stderr}");
        }
    }
}
