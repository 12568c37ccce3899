//! `$sent_http_*` of proxied responses as of the server's own, compared with nginx: the
//! upstream's fields that went out (not those `proxy_hide_header` or the proxy itself keeps
//! back), the type as sent, `add_header`'s fields, in the access log and in `add_header`.

mod support;

use std::time::Duration;

use support::{head_upstream, kinds, Server};

#[test]
fn sent_fields_are_what_went_out_as_in_nginx() {
    let upstream = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-R: 1\r\nX-H: hidden\r\nCache-Control: max-age=5\r\nX-Accel-Expires: 9\r\nX-Pad: pad\r\nX-Both: up\r\nContent-Length: 3\r\n\r\n{}\n"
            .to_vec()
    });
    let config = format!(
        r#"
    log_format sent '$uri ct=$sent_http_content_type r=$sent_http_x_r h=$sent_http_x_h cc=$sent_http_cache_control a=$sent_http_x_a xe=$sent_http_x_accel_expires pad=$sent_http_x_pad both=$sent_http_x_both';
    proxy_cache_path {{PREFIX}}/cache keys_zone=sent:1m;
    proxy_temp_path {{PREFIX}}/proxy_temp;
    server {{
        listen 127.0.0.1:{{PORT0}};
        access_log {{PREFIX}}/sent.log sent;
        location /up {{
            proxy_hide_header X-H;
            add_header X-A "xr=$sent_http_x_r";
            add_header X-Both added;
            proxy_pass http://127.0.0.1:{upstream};
        }}
        location /cached {{
            proxy_cache sent;
            proxy_cache_valid 200 1m;
            proxy_pass http://127.0.0.1:{upstream};
        }}
        location /own {{ add_header X-A own; default_type text/html; return 200 "own\n"; }}
    }}
"#
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&config)) else {
            continue;
        };
        let mut lines = Vec::new();
        for path in ["/up", "/own", "/cached", "/cached"] {
            let r = support::get(server.port(0), path).expect("GET");
            lines.push(format!("{path}: X-A {:?}", r.header("x-a")));
        }
        let log = server.path("sent.log");
        assert!(support::wait_until(Duration::from_secs(5), || {
            support::read_lossy(&log).lines().count() >= 4
        }));
        lines.extend(support::read_lossy(&log).lines().map(str::to_owned));
        if kind == support::Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "/up: X-A Some(\"xr=1\")",
                    "/up ct=application/json r=1 h=- cc=max-age=5 a=xr=1 xe=-",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// `Cache-Control` and `Link`, which nginx keeps as lists: every one sent, joined; another
/// field repeated reads as its first.
#[test]
fn repeated_fields_read_as_nginx_reads_them() {
    let upstream = head_upstream(|_, _| {
        b"HTTP/1.1 200 OK\r\nCache-Control: a\r\nCache-Control: b\r\nLink: <x>\r\nLink: <y>\r\nX-Two: 1\r\nX-Two: 2\r\nContent-Length: 2\r\n\r\nok"
            .to_vec()
    });
    let config = format!(
        r#"
    log_format joined '$uri cc=[$sent_http_cache_control] link=[$sent_http_link] two=[$sent_http_x_two]';
    server {{
        listen 127.0.0.1:{{PORT0}};
        access_log {{PREFIX}}/joined.log joined;
        location /up {{
            add_header Cache-Control c;
            proxy_pass http://127.0.0.1:{upstream};
        }}
        location /own {{
            add_header Cache-Control d;
            add_header Cache-Control e;
            add_header X-Two 3;
            add_header X-Two 4;
            return 200 "own";
        }}
    }}
"#
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&config)) else {
            continue;
        };
        for path in ["/up", "/own"] {
            support::get(server.port(0), path).expect("answer");
        }
        let log = server.path("joined.log");
        assert!(
            support::wait_until(Duration::from_secs(5), || {
                support::read_lossy(&log).lines().count() == 2
            }),
            "{kind}: access log"
        );
        let lines: Vec<String> = support::read_lossy(&log)
            .lines()
            .map(String::from)
            .collect();
        if kind == support::Kind::Portcullis {
            support::expect_lines(
                &lines,
                &["/up cc=[a, b, c] link=[<x>, <y>] two=[1]", "/own cc=[d, e]"],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
