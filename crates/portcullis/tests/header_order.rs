//! The order of the fields of the server's own responses, against nginx's: Server, Date,
//! Content-Type, Content-Length, Last-Modified and Location in their places, then the
//! connection's fields, then every other field in the order it was set (ETag,
//! Accept-Ranges, `add_header`'s, ...). Clients that compare heads byte for byte, and
//! caches in front of the server, see the same.

mod support;

use support::{kinds, Kind, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        root {PREFIX}/html;
        location / {
            add_header X-Mine yes;
            add_header Cache-Control "max-age=60";
        }
        location /plain/ {
        }
        location = /moved {
            add_header X-Mine yes always;
            return 301 /elsewhere;
        }
        location = /text {
            add_header X-Mine yes;
            return 200 "text\n";
        }
        location = /missing {
            add_header X-Mine yes always;
            return 404;
        }
        location /zipped/ {
            gzip on;
            gzip_vary on;
            gzip_min_length 1;
            add_header X-Mine yes;
        }
    }
"#;

#[test]
fn own_responses_have_nginxs_field_order() {
    let mut seen_by = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(CONFIG)) else {
            continue;
        };
        let page = "<html>".to_string() + &"words ".repeat(200);
        for dir in ["", "plain/", "zipped/"] {
            let path = server.path(&format!("html/{dir}index.html"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &page).unwrap();
        }
        let mut lines = Vec::new();
        for (path, extra) in [
            ("/index.html", ""),
            ("/plain/index.html", ""),
            ("/moved", ""),
            ("/text", ""),
            ("/missing", ""),
            ("/zipped/index.html", "Accept-Encoding: gzip\r\n"),
            ("/plain/", ""),
            ("/plain", ""),
        ] {
            let r = support::request(
                server.port(0),
                &format!("GET {path} HTTP/1.1\r\nHost: h\r\n{extra}Connection: close\r\n\r\n"),
            )
            .unwrap();
            let names: Vec<&str> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
            lines.push(format!("{path} -> {} {names:?}", r.status));
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                "/index.html -> 200 [\"Server\", \"Date\", \"Content-Type\", \"Content-Length\", \"Last-Modified\", \"Connection\", \"ETag\", \"X-Mine\", \"Cache-Control\", \"Accept-Ranges\"]",
                    "/moved -> 301 [\"Server\", \"Date\", \"Content-Type\", \"Content-Length\", \"Location\", \"Connection\", \"X-Mine\"]",
                ],
            );
        }
        seen_by.push((kind, lines));
    }
    support::compare(&seen_by);
}

/// `keepalive_timeout 65 60`: `Keep-Alive: timeout=60` after `Connection: keep-alive`, on the
/// server's own answers and on proxied ones, for HTTP/1.1 and HTTP/1.0 keep-alive; none on
/// a closing answer.
#[test]
fn keep_alive_timeout_is_said_as_nginx_says_it() {
    let upstream = support::head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nup\n".to_vec()
    });
    let config = format!(
        r#"
    server {{
        listen 127.0.0.1:{{PORT0}};
        keepalive_timeout 65 60;
        location = /own {{ return 200 "own\n"; }}
        location = /up {{ proxy_pass http://127.0.0.1:{upstream}; }}
        location = /inner {{ keepalive_timeout 30; return 200 "inner\n"; }}
        location = /zero {{ keepalive_timeout 30 0; return 200 "zero\n"; }}
    }}
"#
    );
    let mut seen_by = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&config)) else {
            continue;
        };
        let mut lines = Vec::new();
        for (path, version, connection) in [
            ("/own", "1.1", ""),
            ("/up", "1.1", ""),
            ("/inner", "1.1", ""),
            ("/zero", "1.1", ""),
            ("/own", "1.0", "Connection: keep-alive\r\n"),
            ("/own", "1.1", "Connection: close\r\n"),
        ] {
            let mut c = server.client(0);
            c.send(format!("GET {path} HTTP/{version}\r\nHost: h\r\n{connection}\r\n").as_bytes())
                .unwrap();
            let r = c.read_response(false).unwrap();
            let fields: Vec<String> = r
                .headers
                .iter()
                .filter(|(n, _)| n != "Date" && n != "Server")
                .map(|(n, v)| format!("{n}: {v}"))
                .collect();
            lines.push(format!(
                "{path} HTTP/{version} {connection:?} -> {fields:?}"
            ));
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &["/own HTTP/1.1 \"\" -> [\"Content-Type: text/plain\", \"Content-Length: 4\", \"Connection: keep-alive\", \"Keep-Alive: timeout=60\"]"],
            );
        }
        seen_by.push((kind, lines));
    }
    support::compare(&seen_by);
}
