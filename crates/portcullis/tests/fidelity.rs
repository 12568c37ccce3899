//! Details of nginx's answers that real configurations rely on, each compared with nginx on
//! the same configuration: a `return 204` has neither type nor length, and keeps the status
//! of the error_page it answers; an upstream's 401 intercepted by an error_page keeps its
//! `WWW-Authenticate`.

mod support;

use support::{get, head_upstream, kinds, Server};

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
