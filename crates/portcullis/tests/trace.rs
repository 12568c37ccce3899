//! TRACE and CONNECT: nginx answers 405 to every TRACE (and CONNECT with a path; one with an
//! authority is a 400 of its request line) before it looks for a location, whatever the
//! location would do (serve a file, proxy, return), over HTTP/1.1 and HTTP/2; the server's
//! `error_page 405` may answer it, with the status kept, and an HTTP/1.1 connection closes.
//! Each case runs under nginx and portcullis on the same configuration.

mod support;

#[allow(dead_code)]
#[path = "support/h2c.rs"]
mod h2c;

use std::time::Duration;

use support::{kinds, Kind, Server, TempDir};

/// `{PORT0}`: files and a proxy; `{PORT1}`: a server with its own 405 page; `{PORT2}`: an
/// upstream that counts nothing but would answer 200; `{PORT3}`: HTTP/2 with prior knowledge.
const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT2};
        location / { return 200 "upstream\n"; }
    }
    server {
        listen 127.0.0.1:{PORT0};
        listen 127.0.0.1:{PORT3} http2;
        root {DOCROOT};
        location /proxy/ { proxy_pass http://127.0.0.1:{PORT2}/; }
        location = /return { return 200 "returned\n"; }
    }
    server {
        listen 127.0.0.1:{PORT1};
        error_page 405 /page;
        location = /page { return 200 "our 405 page\n"; }
        location / { return 200 "not this\n"; }
    }
"#;

fn start(kind: Kind, docroot: &TempDir) -> Option<Server> {
    let http = CONFIG.replace("{DOCROOT}", &docroot.path().display().to_string());
    Server::start(kind, 4, &support::main_config(&http))
}

#[test]
fn trace_is_answered_405_on_every_path() {
    let docroot = TempDir::new("trace");
    docroot.write("index.html", "a file\n");
    docroot.write("file.txt", "a file\n");
    for kind in kinds() {
        let Some(server) = start(kind, &docroot) else {
            continue;
        };
        for (port, path, body) in [
            (0, "/file.txt", "405 Not Allowed"),
            (0, "/", "405 Not Allowed"),
            (0, "/proxy/x", "405 Not Allowed"),
            (0, "/return", "405 Not Allowed"),
            (1, "/anything", "our 405 page\n"),
        ] {
            let what = format!("{kind} TRACE {path}");
            // A GET after it on the same connection: nginx closes instead of answering it.
            let mut client = server.client(port);
            client
                .send(
                    format!(
                        "TRACE {path} HTTP/1.1\r\nHost: localhost\r\n\r\n\
                         GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .expect("send");
            let response = client.read_response(false).expect(&what);
            assert_eq!(response.status, 405, "{what}: {response:?}");
            assert!(response.body_text().contains(body), "{what}: {response:?}");
            assert_eq!(response.header("connection"), Some("close"), "{what}");
            assert!(client.is_closed(Duration::from_secs(3)), "{what}: closed");
        }
        let mut client = server.client(0);
        client
            .send(b"CONNECT / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("send");
        let response = client.read_response(false).expect("CONNECT");
        assert_eq!(response.status, 405, "{kind} CONNECT /: {response:?}");
        assert_eq!(
            response.header("connection"),
            Some("close"),
            "{kind} CONNECT"
        );
        let mut client = server.client(0);
        client
            .send(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
            .expect("send");
        let response = client.read_response(false).expect("CONNECT authority");
        assert_eq!(response.status, 400, "{kind} CONNECT example.com:443");
        let logged = server.error_log();
        assert!(
            logged.contains("[info]")
                && logged.contains("client sent TRACE method while reading client request headers")
                && logged.contains("client sent CONNECT method"),
            "{kind}: the error log says why\n{logged}"
        );

        let url = format!("http://127.0.0.1:{}/proxy/x", server.port(3));
        if h2c::tool("curl").is_none() {
            continue;
        }
        let h2 = h2c::curl(&["--http2-prior-knowledge", "-X", "TRACE"], &url)
            .unwrap_or_else(|| panic!("{kind}: no HTTP/2 answer to TRACE"));
        assert_eq!(h2.status, 405, "{kind} HTTP/2 TRACE: {h2:?}");
    }
}
