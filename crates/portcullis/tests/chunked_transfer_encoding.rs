//! `chunked_transfer_encoding off`: a body of unknown length (a proxied chunked one, an SSI
//! page, a listing) goes out unchunked to an HTTP/1.1 client and the connection closes after
//! it, where `on` (the default) chunks it and keeps the connection. Compared with nginx.

mod support;

use support::{compare, head_upstream, kinds, main_config, Server};

#[test]
fn bodies_of_unknown_length_end_with_the_connection() {
    let up = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
            .to_vec()
    });
    let http = format!(
        "
    server {{
        listen 127.0.0.1:{{PORT0}};
        root {{PREFIX}}/html;
        location /off/ {{
            chunked_transfer_encoding off;
            proxy_pass http://127.0.0.1:{up}/;
        }}
        location /on/ {{ proxy_pass http://127.0.0.1:{up}/; }}
        location /ssi-off/ {{
            chunked_transfer_encoding off;
            ssi on;
            alias {{PREFIX}}/html/;
        }}
        location /list-off/ {{
            chunked_transfer_encoding off;
            autoindex on;
            alias {{PREFIX}}/html/;
        }}
    }}
"
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        std::fs::create_dir_all(server.path("html")).unwrap();
        std::fs::write(
            server.path("html/page.html"),
            "a<!--# echo var=\"uri\" -->b",
        )
        .unwrap();
        let mut lines = Vec::new();
        for path in ["/off/x", "/on/x", "/ssi-off/page.html", "/list-off/"] {
            // Two requests on one connection: the second is answered only if the first
            // left the connection open.
            let mut c = support::Client::connect(server.port(0));
            let raw = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
            c.send(format!("{raw}{raw}").as_bytes()).expect("send");
            let r = c.read_response(false).expect("response");
            let body = r.body_text();
            let body = if path.starts_with("/list") {
                body.contains("page.html").to_string()
            } else {
                body
            };
            lines.push(format!(
                "{path} -> {} te={} cl={} conn={} body={body:?} then closed={}",
                r.status,
                r.header("transfer-encoding").unwrap_or("-"),
                r.header("content-length").unwrap_or("-"),
                r.header("connection").unwrap_or("-"),
                c.is_closed(std::time::Duration::from_secs(2)),
            ));
        }
        support::expect_lines(
            &lines,
            &[
                "/off/x -> 200 te=- cl=- conn=close body=\"hello world\" then closed=true",
                "/on/x -> 200 te=chunked cl=- conn=keep-alive body=\"hello world\" then closed=false",
                "/ssi-off/page.html -> 200 te=- cl=- conn=close body=\"a/ssi-off/page.htmlb\"",
            ],
        );
        seen.push((kind, lines));
    }
    compare(&seen);
}
