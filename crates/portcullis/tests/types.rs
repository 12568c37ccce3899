//! `types`: several blocks at one level add up (an `include mime.types;` followed by a block
//! of one's own keeps every type of the first), a level with its own blocks replaces what it
//! would inherit, and an extension given twice takes the later type with nginx's warning.
//! Run under nginx and portcullis on the same configuration and compared.

mod support;

use support::{get, kinds, Server, TempDir};

const CONFIG: &str = r#"
    types { text/html html; application/javascript js; }
    types { application/x-bar bar; }
    server {
        listen 127.0.0.1:{PORT0};
        root {DOCROOT};
    }
    server {
        listen 127.0.0.1:{PORT1};
        root {DOCROOT};
        types { application/x-foo foo; }
    }
    server {
        listen 127.0.0.1:{PORT2};
        root {DOCROOT};
        types { text/html html; application/javascript js; }
        types { application/x-foo foo; text/x-js js; }
    }
    server {
        listen 127.0.0.1:{PORT3};
        root {DOCROOT};
        location / {
            types { text/html html; application/javascript js; }
            types { application/x-foo foo; }
        }
    }
"#;

/// Port, file, and the type nginx gives it.
const CASES: &[(usize, &str, &str)] = &[
    (0, "a.html", "text/html"),
    (0, "a.bar", "application/x-bar"),
    (0, "a.foo", "text/plain"),
    (1, "a.html", "text/plain"),
    (1, "a.foo", "application/x-foo"),
    (2, "a.html", "text/html"),
    (2, "a.foo", "application/x-foo"),
    (2, "a.js", "text/x-js"),
    (3, "a.html", "text/html"),
    (3, "a.foo", "application/x-foo"),
    (3, "a.js", "application/javascript"),
];

#[test]
fn types_blocks_at_one_level_add_up() {
    let docroot = TempDir::new("types");
    for name in ["a.html", "a.bar", "a.foo", "a.js"] {
        docroot.write(name, "x\n");
    }
    let http = CONFIG.replace("{DOCROOT}", &docroot.path().display().to_string());
    for kind in kinds() {
        let Some(server) = Server::start(kind, 4, &support::main_config(&http)) else {
            continue;
        };
        for &(port, file, expected) in CASES {
            let r = get(server.port(port), &format!("/{file}")).expect("GET");
            assert_eq!(r.status, 200, "{kind} {port} {file}");
            assert_eq!(
                r.header("content-type"),
                Some(expected),
                "{kind}: server {port}, {file}"
            );
        }
        let log = server.error_log() + &support::read_lossy(&server.path("stderr.log"));
        assert!(
            log.contains(
                "duplicate extension \"js\", content type: \"text/x-js\", previous content type: \"application/javascript\""
            ),
            "{kind}: the duplicate is warned about\n{log}"
        );
    }
}
