//! In the access log, a variable nginx has with an empty value is written as nothing, and
//! one it does not have as `-`: `$is_args`, `$server_name`, `$https`, an argument or a header
//! sent empty, the arguments a try_files redirect dropped, against arguments (a bare `?` too,
//! and after an error_page redirect) and headers absent. Compared with nginx.

mod support;

use std::time::Duration;

use support::{kinds, main_config, Kind, Server};

#[test]
fn empty_values_and_absent_ones_as_nginx_logs_them() {
    let http = "
    log_format empty '$request_uri is_args=[$is_args] name=[$server_name] https=[$https] args=[$args] qs=[$query_string] arg=[$arg_a] ref=[$http_referer]';
    server {
        listen 127.0.0.1:{PORT0};
        access_log {PREFIX}/empty.log empty;
        location / { return 200 \"ok\"; }
        location /tf { try_files /nothere /ok; }
        location /ep { error_page 404 /ok; return 404; }
        location = /ok { return 200 \"ok\"; }
    }
";
    // A try_files redirect leaves the arguments empty, an error_page one absent.
    let targets = ["/", "/?", "/?a=", "/?a=1", "/tf?a=1", "/ep?a=1"];
    let mut seen = Vec::new();
    for kind in kinds() {
        // A header sent empty: nginx has it.
        let raw = "GET /referer HTTP/1.1\r\nHost: x\r\nReferer: \r\nConnection: close\r\n\r\n";
        let Some(lines) = logged(kind, http, "empty.log", &targets, raw) else {
            continue;
        };
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "/ is_args=[] name=[] https=[] args=[-] qs=[-] arg=[-] ref=[-]",
                    "/?a= is_args=[?] name=[] https=[] args=[a=] qs=[a=] arg=[] ref=[-]",
                    "/referer is_args=[] name=[] https=[] args=[-] qs=[-] arg=[-] ref=[]",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// The variables of `map`, `geo`, `split_clients` and `valid_referers` have a value when it
/// is empty (no match, no default, a valid `Referer`): written as nothing; `$gzip_ratio` of
/// a response not compressed and `$secure_link` without a link have none: `-`.
#[test]
fn empty_module_variables_as_nginx_logs_them() {
    let http = "
    map $arg_m $mapped { a A; }
    map $arg_m $with_default { default \"\"; b B; }
    split_clients \"$arg_s\" $split { 10% one; }
    geo $geo { 10.0.0.0/8 ten; }
    log_format modules '$request_uri ref=[$invalid_referer] map=[$mapped] default=[$with_default] split=[$split] geo=[$geo] gzip=[$gzip_ratio] link=[$secure_link]';
    server {
        listen 127.0.0.1:{PORT0};
        access_log {PREFIX}/modules.log modules;
        valid_referers none server_names;
        location / { return 200 \"ok\"; }
    }
";
    let targets = ["/?s=a", "/?m=a&s=b"];
    let mut seen = Vec::new();
    for kind in kinds() {
        let raw = "GET /evil HTTP/1.1\r\nHost: x\r\nReferer: http://evil.example/\r\nConnection: close\r\n\r\n";
        let Some(lines) = logged(kind, http, "modules.log", &targets, raw) else {
            continue;
        };
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "/?s=a ref=[] map=[] default=[] split=[] geo=[] gzip=[-] link=[-]",
                    "/?m=a&s=b ref=[] map=[A] default=[] split=[] geo=[] gzip=[-] link=[-]",
                    "/evil ref=[1] map=[] default=[] split=[one] geo=[] gzip=[-] link=[-]",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// The lines `kind` logs to `log` (under the prefix) for a GET of each of `targets` and then
/// the request `raw`; `None` when `kind` is not installed.
fn logged(kind: Kind, http: &str, log: &str, targets: &[&str], raw: &str) -> Option<Vec<String>> {
    let server = Server::start(kind, 1, &main_config(http))?;
    for t in targets {
        support::get(server.port(0), t).expect("answer");
    }
    support::request(server.port(0), raw).expect("answer");
    let log = server.path(log);
    assert!(
        support::wait_until(Duration::from_secs(5), || {
            support::read_lossy(&log).lines().count() == targets.len() + 1
        }),
        "{kind}: access log"
    );
    Some(
        support::read_lossy(&log)
            .lines()
            .map(String::from)
            .collect(),
    )
}

/// `log_format`'s `escape=json` writes values as JSON string content (and nothing for one
/// nginx has not), `escape=none` as they came, `escape=default` as the default does; `$request`
/// is the whole request line, a byte that is not UTF-8 included.
#[test]
fn log_format_escapes_and_the_whole_request_line() {
    let http = r#"
    log_format j escape=json '{"r":"$request","ua":"$http_user_agent","ref":"$http_referer"}';
    log_format n escape=none '$request|$http_user_agent|$http_referer|';
    log_format d escape=default '$request|$http_user_agent|$http_referer|';
    server {
        listen 127.0.0.1:{PORT0};
        access_log {PREFIX}/j.log j;
        access_log {PREFIX}/n.log n;
        access_log {PREFIX}/d.log d;
        location / { return 200 "ok"; }
    }
"#;
    let requests: [&[u8]; 2] = [
        b"GET /q\"uo\\te?x=\"y\" HTTP/1.0\r\nUser-Agent: ua \"q\" \\b\x01\tz\r\n\r\n",
        b"GET /a\xffb?c HTTP/1.0\r\n\r\n",
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(http)) else {
            continue;
        };
        for raw in requests {
            let answer = support::send_and_read_all(server.port(0), raw, false);
            assert!(
                answer.starts_with(b"HTTP/1.1 200"),
                "{kind}: {}",
                String::from_utf8_lossy(&answer)
            );
        }
        let mut lines = Vec::new();
        for log in ["j.log", "n.log", "d.log"] {
            let path = server.path(log);
            assert!(
                support::wait_until(Duration::from_secs(5), || {
                    support::read_lossy(&path).lines().count() == requests.len()
                }),
                "{kind}: {log}"
            );
            lines.extend(support::read_lossy(&path).lines().map(String::from));
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    r#"{"r":"GET /q\"uo\\te?x=\"y\" HTTP/1.0","ua":"ua \"q\" \\b\u0001\tz","ref":""}"#,
                    "GET /a\u{fffd}b?c HTTP/1.0||",
                    r"GET /a\xFFb?c HTTP/1.0|-|-|",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
