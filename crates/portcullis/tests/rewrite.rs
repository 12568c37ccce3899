//! The rewrite module and `map`, differentially: one configuration served by nginx and by
//! portcullis, the same requests sent to both, and status, Location, body and the headers an
//! `if` block sets compared. Each case also states nginx's status, so the table is checked
//! against nginx itself before portcullis is held to it.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use support::{Response, Server, TempDir};

/// Headers compared besides the status and body.
const COMPARED_HEADERS: &[&str] = &["location", "x-if", "x-loc", "content-type"];

const HTTP_BLOCK: &str = r#"
    default_type text/plain;
    rewrite_log on;

    map $http_x_key $mapped {
        default dflt;
        Exact e;
        ~^re-(\d+)$ r$1;
        ~*^CI- ci;
        uri $uri;
    }
    map $http_host $hostmap {
        hostnames;
        default none;
        .example.com dot;
        *.wild.org star;
        www.tail.* tail;
    }

    server {
        listen 127.0.0.1:{PORT0};
        server_name localhost;
        root {DOCROOT};

        rewrite ^/srv/(.*)$ /show/$1 last;
        if ($http_x_srv = stop) {
            return 403;
        }

        location /show/ {
            return 200 "show $uri $args\n";
        }
        location /last/ {
            rewrite ^/last/(.*)$ /show/$1 last;
            return 200 "not reached\n";
        }
        location /brk/ {
            rewrite ^/brk/(.*)$ /show/$1 break;
            return 200 "not reached\n";
        }
        location /chain/ {
            rewrite ^/chain/(.*)$ /tmp/$1;
            rewrite ^/tmp/(.*)$ /show/chained-$1;
        }
        location /reqfile/ {
            if (!-f $request_filename) {
                return 200 "no file $request_filename\n";
            }
            return 200 "file\n";
        }
        location /isargs/ {
            return 200 "[$is_args] [$args]\n";
        }
        location /redir/ {
            rewrite ^/redir/(.*)$ /show/$1 redirect;
        }
        location /perm/ {
            rewrite ^/perm/(.*)$ /show/$1 permanent;
        }
        location /abs/ {
            rewrite ^/abs/(.*)$ http://example.com/$1;
        }
        location /absargs/ {
            rewrite ^/absargs/(.*)$ https://example.com/x?q=$1;
        }
        location /dropargs/ {
            rewrite ^ /show/dropped? last;
        }
        location /ownargs/ {
            rewrite ^/ownargs/(.*)$ /show/own?a=$1 last;
        }
        location /owndrop/ {
            rewrite ^/owndrop/(.*)$ /show/own?a=$1? last;
        }
        location /loop/ {
            rewrite ^/loop/(.*)$ /loop/x$1 last;
        }
        location /break/ {
            set $a 1;
            break;
            return 200 "not reached\n";
        }
        location /named/ {
            rewrite ^/named/(?<id>\d+)$ /show/id-$id last;
        }

        location ~ ^/api_old/(.*)*$ {
            limit_except GET {
                deny all;
            }
            set $upstream backend;
            rewrite ^/api_old/(.*)$ /api_new/$1 last;
        }
        location /api_new {
            internal;
            return 200 "api $uri $args $upstream\n";
        }

        location /if/ {
            if ($arg_a) {
                return 200 "truth\n";
            }
            if ($arg_b = x) {
                return 200 "eq\n";
            }
            if ($arg_c != y) {
                return 200 "ne [$arg_c]\n";
            }
            return 200 "none\n";
        }
        location /re/ {
            if ($uri ~ ^/re/(\d+)$) {
                return 200 "digits $1\n";
            }
            if ($uri ~* ^/re/ABC$) {
                return 200 "caseless\n";
            }
            if ($uri !~* ^/re/[a-z]) {
                return 200 "not letter\n";
            }
            if ($uri !~ ^/re/z) {
                return 200 "not z\n";
            }
            return 200 "z\n";
        }
        location /ftest/ {
            set $p $document_root/$arg_p;
            set $r "";
            if (-f $p) { set $r "${r}f"; }
            if (!-f $p) { set $r "${r}F"; }
            if (-d $p) { set $r "${r}d"; }
            if (!-d $p) { set $r "${r}D"; }
            if (-e $p) { set $r "${r}e"; }
            if (!-e $p) { set $r "${r}E"; }
            if (-x $p) { set $r "${r}x"; }
            if (!-x $p) { set $r "${r}X"; }
            return 200 "$r\n";
        }
        location /ifconf/ {
            if ($arg_h) {
                add_header X-If yes;
            }
            add_header X-Loc loc;
            return 200 "ifconf\n";
        }
        location /ifroot/ {
            if ($arg_alt) {
                root {DOCROOT}/alt;
            }
        }
        location /setif/ {
            set $level low;
            if ($http_x_level = high) {
                set $level high;
            }
            if ($level = high) {
                rewrite ^ /show/high last;
            }
            return 200 "level $level\n";
        }
        location /uninit/ {
            return 200 "u[$unset]\n";
        }
        location /empty/ {
            if ($arg_x = "") { return 200 "no x\n"; }
            if ( $arg_x != "" ) { return 200 "x[$arg_x]\n"; }
        }
        location /never/ {
            set $unset x;
            return 404;
        }
        location /map/ {
            set $seen "[$mapped]";
            if ($mapped = e) {
                return 200 "exact hit $seen\n";
            }
            return 200 "map $mapped $hostmap $seen\n";
        }
    }
"#;

struct Case {
    name: &'static str,
    path: &'static str,
    /// Extra header lines, each ending in "\r\n".
    headers: &'static str,
    method: &'static str,
    status: u16,
}

const fn case(name: &'static str, path: &'static str, status: u16) -> Case {
    Case {
        name,
        path,
        headers: "",
        method: "GET",
        status,
    }
}

const fn with(name: &'static str, path: &'static str, headers: &'static str, status: u16) -> Case {
    Case {
        name,
        path,
        headers,
        method: "GET",
        status,
    }
}

fn cases() -> Vec<Case> {
    vec![
        case("server-level rewrite", "/srv/a?x=1", 200),
        case("an empty quoted operand", "/empty/", 200),
        case(
            "an empty quoted operand, spaced parentheses",
            "/empty/?x=1",
            200,
        ),
        case("request_filename of a missing file", "/reqfile/none", 200),
        case("request_filename of a file", "/reqfile/here", 200),
        case("is_args with args", "/isargs/?a=1", 200),
        case("is_args with a bare ?", "/isargs/?", 200),
        case("is_args without args", "/isargs/", 200),
        with("server-level if", "/show/a", "X-Srv: stop\r\n", 403),
        case("last keeps args", "/last/a/b?x=1&y=2", 200),
        case("break stays in the location", "/brk/a", 200),
        case("break with a missing file", "/brk/none", 404),
        case("rewrites chain without a flag", "/chain/q?z=9", 200),
        case("redirect flag", "/redir/a?x=1", 302),
        case("permanent flag", "/perm/a", 301),
        case("redirect decodes what it may", "/redir/a%41b%20c", 302),
        case("absolute replacement", "/abs/p/q?k=v", 302),
        case("absolute with own args", "/absargs/v?k=v", 302),
        case(
            "escaped capture in redirect args",
            "/absargs/a%20b%26c",
            302,
        ),
        case("trailing ? drops args", "/dropargs/a?x=1", 200),
        case("own args then the request's", "/ownargs/v?x=1", 200),
        case("own args without the request's", "/owndrop/v?x=1", 200),
        case("escaped capture in args", "/ownargs/a%20b?x=1", 200),
        case("plus in the URI", "/ownargs/a+b", 200),
        case("ten rewrites then 500", "/loop/a", 500),
        case("break stops the phase", "/break/file.txt", 200),
        case("named capture", "/named/42", 200),
        case("gateway rewrite to internal", "/api_old/users/7?x=1", 200),
        case("internal location from outside", "/api_new/users/7", 404),
        Case {
            name: "gateway limit_except",
            path: "/api_old/users/7",
            headers: "",
            method: "POST",
            status: 403,
        },
        case("if truth", "/if/?a=1", 200),
        case("if zero is false", "/if/?a=0&b=x", 200),
        case("if not equal", "/if/?c=q", 200),
        case("if nothing holds", "/if/?c=y", 200),
        case("regex with capture", "/re/123", 200),
        case("caseless regex", "/re/abc", 200),
        case("negated caseless", "/re/-", 200),
        case("negated regex", "/re/q", 200),
        case("no condition holds", "/re/z", 200),
        case("file test plain", "/ftest/?p=plain.txt", 200),
        case("file test dir", "/ftest/?p=dir", 200),
        case("file test exec", "/ftest/?p=run.sh", 200),
        case("file test missing", "/ftest/?p=missing", 200),
        case("if block add_header", "/ifconf/?h=1", 200),
        case("location add_header", "/ifconf/", 200),
        case("if block root", "/ifroot/page.txt?alt=1", 200),
        case("location root", "/ifroot/page.txt", 200),
        with("set then if", "/setif/", "X-Level: high\r\n", 200),
        case("set without if", "/setif/", 200),
        case("uninitialized variable", "/uninit/", 200),
        with("map exact", "/map/", "X-Key: exact\r\n", 200),
        with("map regex capture", "/map/", "X-Key: re-42\r\n", 200),
        with("map caseless regex", "/map/", "X-Key: ci-x\r\n", 200),
        with("map value variable", "/map/", "X-Key: uri\r\n", 200),
        case("map default", "/map/", 200),
        with("map hostnames dot", "/map/", "X-Host: example.com\r\n", 200),
        with(
            "map hostnames sub",
            "/map/",
            "X-Host: a.example.com\r\n",
            200,
        ),
        with("map hostnames star", "/map/", "X-Host: b.wild.org\r\n", 200),
        with("map star not bare", "/map/", "X-Host: wild.org\r\n", 200),
        with(
            "map hostnames tail",
            "/map/",
            "X-Host: www.tail.net\r\n",
            200,
        ),
    ]
}

fn make_docroot(dir: &TempDir) {
    dir.write("reqfile/here", "here\n");
    dir.write("brk/file.txt", "brk file\n");
    dir.write("show/a", "show file\n");
    dir.write("break/file.txt", "break file\n");
    dir.write("plain.txt", "plain\n");
    dir.write("dir/keep", "");
    let run = dir.write("run.sh", "#!/bin/sh\n");
    fs::set_permissions(&run, fs::Permissions::from_mode(0o755)).expect("chmod");
    dir.write("ifroot/page.txt", "main root\n");
    dir.write("alt/ifroot/page.txt", "alt root\n");
}

fn send(port: u16, c: &Case) -> Response {
    // X-Host stands for the Host header, so one case can name any host.
    let (host, headers) = match c.headers.strip_prefix("X-Host: ") {
        Some(rest) => (rest.trim_end(), ""),
        None => ("localhost", c.headers),
    };
    let raw = format!(
        "{} {} HTTP/1.1\r\nHost: {host}\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n",
        c.method, c.path
    );
    support::request(port, &raw).unwrap_or_else(|e| panic!("{}: {e}", c.name))
}

/// What is compared: status, the compared headers (the port replaced), and the body unless it
/// is a built-in error page (whose signature differs).
fn summary(r: &Response, port: u16) -> String {
    let mut s = format!("{}\n", r.status);
    for h in COMPARED_HEADERS {
        if let Some(v) = r.header(h) {
            s.push_str(&format!(
                "{h}: {}\n",
                v.replace(&format!(":{port}"), ":PORT")
            ));
        }
    }
    if r.status < 300 {
        s.push_str(&r.body_text());
    }
    s
}

#[test]
fn differential_rewrite_if_and_map() {
    let docroot = TempDir::new("rewrite-docroot");
    make_docroot(&docroot);
    let template = support::main_config(
        &HTTP_BLOCK.replace("{DOCROOT}", &docroot.path().display().to_string()),
    )
    .replace(
        "error_log {PREFIX}/error.log info;",
        "error_log {PREFIX}/error.log notice;",
    );
    let cases = cases();
    let mut failures = Vec::new();
    let mut reference: Vec<Option<String>> = vec![None; cases.len()];
    for kind in support::kinds() {
        let Some(mut server) = Server::start(kind, 1, &template) else {
            continue;
        };
        let port = server.port(0);
        for (i, c) in cases.iter().enumerate() {
            let r = send(port, c);
            let got = summary(&r, port);
            if r.status != c.status {
                failures.push(format!(
                    "{kind} {}: status {} want {}\n{got}",
                    c.name, r.status, c.status
                ));
            }
            match &reference[i] {
                Some(want) if *want != got => failures.push(format!(
                    "{kind} {}: differs from nginx\n--- nginx\n{want}--- {kind}\n{got}",
                    c.name
                )),
                Some(_) => {}
                None => reference[i] = Some(got),
            }
        }
        let log = server.error_log();
        for line in [
            "rewrite or internal redirection cycle while processing \"/loop/xxxxxxxxxxxa\"",
            "using uninitialized \"unset\" variable",
            "\"^/last/(.*)$\" matches \"/last/a/b\"",
        ] {
            if !log.contains(line) {
                failures.push(format!("{kind}: error log lacks {line}\n{log}"));
            }
        }
        server.stop();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn bad_regex_is_refused_with_its_place() {
    for kind in support::kinds() {
        let Some(binary) = kind.binary() else {
            continue;
        };
        let dir = TempDir::new("rewrite-bad");
        let conf = dir.write(
            "nginx.conf",
            "events {}\nhttp {\naccess_log off;\nserver {\nrewrite ( /x;\n}\n}\n",
        );
        let out = std::process::Command::new(binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-t")
            .arg("-c")
            .arg(&conf)
            .output()
            .expect("run -t");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{kind}: {text}");
        assert!(text.contains("pcre2_compile() failed: "), "{kind}: {text}");
        assert!(
            text.contains(&format!("in \"(\" in {}:5", conf.display())),
            "{kind}: {text}"
        );
    }
}

/// A map whose source is the response's `$status`, read by the access log once the response
/// is sent (nginx's usual way to mark lines): the log lines are nginx's.
#[test]
fn map_read_by_the_access_log() {
    let template = support::main_config(
        r#"
    map $status $class {
        ~^2 ok;
        404 missing;
        default other;
    }
    log_format classes '$uri $status $class';
    server {
        listen 127.0.0.1:{PORT0};
        access_log {PREFIX}/classes.log classes;
        location /ok { return 200 "ok\n"; }
        location /gone { return 410; }
        location /map { return 200 "class=$class\n"; }
    }
"#,
    );
    let mut reference: Option<(Vec<String>, String)> = None;
    for kind in support::kinds() {
        let Some(mut server) = Server::start(kind, 1, &template) else {
            continue;
        };
        let port = server.port(0);
        let mut bodies = Vec::new();
        for path in ["/ok", "/nosuch", "/gone", "/map"] {
            let r = support::get(port, path).expect("request");
            // Error pages name the server: only the status is compared.
            let body = if r.status == 200 {
                r.body_text()
            } else {
                String::new()
            };
            bodies.push(format!("{path} {} {body}", r.status));
        }
        let log_path = server.path("classes.log");
        assert!(
            support::wait_until(std::time::Duration::from_secs(5), || {
                support::read_lossy(&log_path).lines().count() == 4
            }),
            "{kind}: {}",
            support::read_lossy(&log_path)
        );
        let log = support::read_lossy(&log_path);
        assert!(log.contains("/nosuch 404 missing\n"), "{kind}: {log}");
        assert!(log.contains("/gone 410 other\n"), "{kind}: {log}");
        server.stop();
        let got = (bodies, log);
        match &reference {
            Some(want) => assert_eq!(*want, got, "{kind} differs from nginx"),
            None => reference = Some(got),
        }
    }
}

/// `set` on a map's target gives the variable its value from then on (nginx's `set` writes
/// the variable the map made): `if (...) { set $loggable 0; }` over `map ... $loggable`.
#[test]
fn set_overrides_a_map_target() {
    let template = support::main_config(
        r#"
    map $uri $loggable {
        default 1;
        /static 2;
    }
    server {
        listen 127.0.0.1:{PORT0};
        location / {
            if ($arg_quiet) {
                set $loggable 0;
            }
            return 200 "[$loggable]\n";
        }
    }
"#,
    );
    let mut reference: Option<Vec<String>> = None;
    for kind in support::kinds() {
        let Some(server) = Server::start(kind, 1, &template) else {
            continue;
        };
        let bodies: Vec<String> = ["/a", "/a?quiet=1", "/static"]
            .iter()
            .map(|p| support::get(server.port(0), p).expect("GET").body_text())
            .collect();
        assert_eq!(bodies, ["[1]\n", "[0]\n", "[2]\n"], "{kind}");
        match &reference {
            Some(want) => assert_eq!(*want, bodies, "{kind} differs from nginx"),
            None => reference = Some(bodies),
        }
    }
}
