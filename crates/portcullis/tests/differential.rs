//! Differential tests: one configuration served by nginx and by portcullis, the same raw
//! requests sent to both, and the responses compared.
//!
//! Every case also states the status nginx gives, so the table is checked against nginx
//! itself (`PORTCULLIS_DIFF_ONLY_NGINX=1` runs only that side) before portcullis is held to it.
//! Responses are compared on status, body (with the server signature of error pages and the
//! multipart boundary replaced) and the headers that carry meaning for a client.

mod support;

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use support::{Client, Kind, Response, Server, TempDir};

/// How long a server gets to close a connection it should close.
const CLOSE_WAIT: Duration = Duration::from_secs(3);
/// Modification time of every docroot file, so that ETag and Last-Modified are known here.
const MTIME_SECS: u64 = 1_577_836_800;
/// `MTIME_SECS` as an HTTP date.
const MTIME_HTTP: &str = "Wed, 01 Jan 2020 00:00:00 GMT";
/// Headers whose values must agree between the two servers.
const COMPARED_HEADERS: &[&str] = &[
    "content-type",
    "etag",
    "last-modified",
    "location",
    "allow",
    "content-range",
    "accept-ranges",
    "connection",
    "transfer-encoding",
];

const INDEX_HTML: &str = "<html><body>index</body></html>\n";

const HTTP_BLOCK: &str = r#"
    types {
        text/html html;
        text/css css;
        application/json json;
        text/plain txt;
    }
    default_type application/octet-stream;
    client_max_body_size 1k;
    client_header_buffer_size 1k;
    large_client_header_buffers 2 1k;

    server {
        listen 127.0.0.1:{PORT0} default_server;
        server_name localhost;
        root {DOCROOT};
        index index.html;

        location / {
        }
        location = /exact {
            return 200 "exact\n";
        }
        location ^~ /static/ {
        }
        location /prefix/ {
            return 200 "prefix\n";
        }
        location /prefix/longer/ {
            return 200 "longer prefix\n";
        }
        location ~ \.cgi$ {
            return 200 "cgi regex\n";
        }
        location ~* ^/CaSe/ {
            return 200 "caseless regex\n";
        }
        location ~ ^/re/(\w+)$ {
            return 200 "capture $1\n";
        }
        location ~ ^/kept/(\w+)$ {
            rewrite ^/kept/ /changed/;
            return 200 "capture $1 of $uri\n";
        }
        location ~ ^/ifkept/(\w+)$ {
            if ($uri ~ ^/ifkept/) {
                return 200 "capture $1\n";
            }
        }
        location /nested/ {
            location ~ \.txt$ {
                return 200 "nested txt\n";
            }
        }
        location @fallback {
            return 200 "fallback\n";
        }
        location /alias/ {
            alias {DOCROOT}/sub/;
        }
        location /try/ {
            try_files $uri $uri/ =404;
        }
        location /tryn/ {
            try_files $uri @fallback;
        }
        location /ep200/ {
            error_page 404 =200 /index.html;
        }
        location /epint/ {
            error_page 404 /errors/404.html;
        }
        location /epnamed/ {
            error_page 404 @fallback;
        }
        location = /old {
            return 301 /x;
        }
        location = /text {
            return 200 "text";
        }
        location = /gone {
            return 404;
        }
        location /ro/ {
            limit_except GET {
                deny all;
            }
        }
        location /local/ {
            allow 127.0.0.1;
            deny all;
        }
        location /denied/ {
            allow 10.0.0.1;
            deny all;
        }
        location = /a/b {
            return 200 "merged\n";
        }
        location /lex/ {
            limit_except GET {
                deny all;
            }
            return 200 "lex\n";
        }
        location /dav/ {
            limit_except get mkcol {
                deny all;
            }
            return 200 "dav\n";
        }
        location /trydir/ {
            try_files $uri /sub/ =404;
        }
        location /epargs/ {
            error_page 404 /vars;
        }
        location /epnamedstatus/ {
            error_page 404 @status;
        }
        location @status {
            return 418 "$uri $status\n";
        }
        location = /vars {
            return 200 "args=$args status=$status\n";
        }
        location = /nocontent {
            return 204;
        }
        location /setv/ {
            set $greeting hello;
            return 200 "$greeting $uri\n";
        }
    }

    server {
        listen 127.0.0.1:{PORT0};
        server_name example.com;
        return 200 "exact name\n";
    }

    server {
        listen 127.0.0.1:{PORT0};
        server_name *.example.org;
        return 200 "wildcard name\n";
    }

    server {
        listen 127.0.0.1:{PORT0};
        server_name ~^api\d+\.test$;
        return 200 "regex name\n";
    }

    server {
        listen 127.0.0.1:{PORT1};
        server_name second.test;
        return 200 "second\n";
    }

    server {
        listen 127.0.0.1:{PORT1} default_server;
        server_name other;
        merge_slashes off;
        root {DOCROOT};

        location = /a/b {
            return 200 "unmerged\n";
        }
    }
"#;

/// One action of a case, run in order on one connection.
enum Step {
    /// Send these bytes.
    Send(Vec<u8>),
    /// Read one response and expect this status; `head` when it answers a HEAD.
    Read { status: u16, head: bool },
    /// Expect the server to close the connection.
    Closed,
}

/// A named case: steps on one connection to the `port`th port.
struct Case {
    name: &'static str,
    port: usize,
    steps: Vec<Step>,
}

impl Case {
    fn new(name: &'static str) -> Case {
        Case {
            name,
            port: 0,
            steps: Vec::new(),
        }
    }

    fn on_port(mut self, port: usize) -> Case {
        self.port = port;
        self
    }

    fn send(mut self, raw: impl AsRef<[u8]>) -> Case {
        self.steps.push(Step::Send(raw.as_ref().to_vec()));
        self
    }

    fn read(mut self, status: u16) -> Case {
        self.steps.push(Step::Read {
            status,
            head: false,
        });
        self
    }

    fn read_head(mut self, status: u16) -> Case {
        self.steps.push(Step::Read { status, head: true });
        self
    }

    fn closed(mut self) -> Case {
        self.steps.push(Step::Closed);
        self
    }

    /// Shorthand: send `raw`, expect `status`.
    fn one(name: &'static str, raw: impl AsRef<[u8]>, status: u16) -> Case {
        Case::new(name).send(raw).read(status)
    }
}

/// A GET of `path` with `Host: localhost`, keep-alive, and `extra` header lines (each ending
/// in CRLF).
fn get(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n")
}

fn cases() -> Vec<Case> {
    let etag = format!("\"{MTIME_SECS:x}-{:x}\"", INDEX_HTML.len());
    let bin_etag = format!("\"{MTIME_SECS:x}-400\"");
    let long_header = format!("X-Long: {}\r\n", "a".repeat(1500));
    let long_uri = format!("/{}", "a".repeat(1500));
    vec![
        // Static files, types and methods.
        Case::one("get index", get("/", ""), 200),
        Case::one("get index.html", get("/index.html", ""), 200),
        Case::one("get 1kb binary, default_type", get("/1kb.bin", ""), 200),
        Case::one("css type", get("/style.css", ""), 200),
        Case::one("json type", get("/data.json", ""), 200),
        Case::one("missing file", get("/nope.html", ""), 404),
        Case::new("head index")
            .send("HEAD /index.html HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .read_head(200),
        Case::one(
            "post on a file",
            "POST /index.html HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
            405,
        ),
        Case::one("unknown method", "FOO /index.html HTTP/1.1\r\nHost: localhost\r\n\r\n", 405),
        Case::new("lowercase method")
            .send("get / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .read(400)
            .closed(),
        // Directories.
        Case::one("directory without slash", get("/sub", ""), 301),
        Case::one("directory with index", get("/sub/", ""), 200),
        Case::one("directory without index", get("/noindex/", ""), 403),
        Case::one("file in directory without index", get("/noindex/a.txt", ""), 200),
        // Path normalisation and encoding.
        Case::new("dot-dot above root")
            .send(get("/../etc/passwd", ""))
            .read(400)
            .closed(),
        Case::one("dot-dot inside root", get("/sub/../index.html", ""), 200),
        Case::one("encoded dot-dot above root", get("/%2e%2e/etc/passwd", ""), 400),
        Case::one("encoded space and percent", get("/a%20b%25c.txt", ""), 200),
        Case::one("encoded dot", get("/index%2Ehtml", ""), 200),
        Case::one("encoded nul", get("/index.html%00", ""), 400),
        Case::one("bad percent escape", get("/index%zz.html", ""), 400),
        Case::one("merge_slashes on", get("/a//b", ""), 200),
        Case::one("merge_slashes off keeps //", get("/a//b", ""), 404).on_port(1),
        Case::one("query string ignored for files", get("/index.html?x=1&y", ""), 200),
        // Locations.
        Case::one("exact location", get("/exact", ""), 200),
        Case::one("exact location does not match longer", get("/exactly", ""), 404),
        Case::one("^~ stops regex", get("/static/x.cgi", ""), 200),
        Case::one("regex location", get("/other.cgi", ""), 200),
        Case::one("longest prefix", get("/prefix/longer/x", ""), 200),
        Case::one("shorter prefix", get("/prefix/x", ""), 200),
        Case::one("caseless regex", get("/case/x", ""), 200),
        Case::one("regex capture", get("/re/word", ""), 200),
        // A rewrite regex without groups that matches leaves no `$1` of the location's.
        Case::one("location capture after a rewrite", get("/kept/word", ""), 200),
        Case::one("location capture after an if regex", get("/ifkept/word", ""), 200),
        Case::one("nested regex location", get("/nested/n.txt", ""), 200),
        Case::one("nested parent location", get("/nested/n.html", ""), 200),
        Case::one("alias file", get("/alias/index.html", ""), 200),
        Case::one("alias index", get("/alias/", ""), 200),
        Case::one("try_files hit", get("/try/a.txt", ""), 200),
        Case::one("try_files =404", get("/try/missing", ""), 404),
        Case::one("try_files @named", get("/tryn/missing", ""), 200),
        Case::one("error_page =200 uri", get("/ep200/missing", ""), 200),
        Case::one("error_page internal uri", get("/epint/missing", ""), 404),
        // The named location answers with its body but the original status.
        Case::one("error_page named location", get("/epnamed/missing", ""), 404),
        Case::one("return 301", get("/old", ""), 301),
        Case::one("return 200 text", get("/text", ""), 200),
        Case::one("return 404", get("/gone", ""), 404),
        Case::one("limit_except allows GET", get("/ro/file.txt", ""), 200),
        Case::one(
            "limit_except refuses PUT before return",
            "PUT /lex/ HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
            403,
        ),
        Case::one("limit_except lets GET reach return", get("/lex/", ""), 200),
        Case::one(
            "limit_except names methods in any case",
            "MKCOL /dav/ HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
            200,
        ),
        Case::one(
            "limit_except refuses a method it does not name",
            "DELETE /dav/ HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
            403,
        ),
        Case::one("try_files directory item redirects", get("/trydir/zz", ""), 301),
        Case::one("error_page redirect drops args", get("/epargs/zz?a=1", ""), 404),
        Case::one("named error_page return status", get("/epnamedstatus/zz", ""), 404),
        Case::one("return 204 has no length", get("/nocontent", ""), 204),
        Case::one("set variable", get("/setv/x", ""), 200),
        Case::new("limit_except allows HEAD")
            .send("HEAD /ro/file.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .read_head(200),
        Case::one(
            "limit_except denies POST",
            "POST /ro/file.txt HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
            403,
        ),
        Case::one("allow 127.0.0.1", get("/local/file.txt", ""), 200),
        Case::one("deny all", get("/denied/file.txt", ""), 403),
        // Server selection.
        Case::one("exact server_name", "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", 200),
        Case::one(
            "server_name with port in Host",
            "GET / HTTP/1.1\r\nHost: example.com:80\r\n\r\n",
            200,
        ),
        Case::one(
            "server_name is case-insensitive",
            "GET / HTTP/1.1\r\nHost: EXAMPLE.com\r\n\r\n",
            200,
        ),
        Case::one("wildcard server_name", "GET / HTTP/1.1\r\nHost: www.example.org\r\n\r\n", 200),
        Case::one("regex server_name", "GET / HTTP/1.1\r\nHost: api12.test\r\n\r\n", 200),
        Case::one("unknown host, default server", "GET /index.html HTTP/1.1\r\nHost: nowhere\r\n\r\n", 200),
        Case::one("default_server flag", "GET /a/b HTTP/1.1\r\nHost: nowhere\r\n\r\n", 200)
            .on_port(1),
        Case::one("named server on second port", "GET / HTTP/1.1\r\nHost: second.test\r\n\r\n", 200)
            .on_port(1),
        Case::one("absolute-form target", "GET http://example.com/ HTTP/1.1\r\nHost: localhost\r\n\r\n", 200),
        // Conditional requests.
        Case::one("If-None-Match match", get("/index.html", &format!("If-None-Match: {etag}\r\n")), 304),
        Case::one("If-None-Match star", get("/index.html", "If-None-Match: *\r\n"), 304),
        Case::one("If-None-Match other", get("/index.html", "If-None-Match: \"other\"\r\n"), 200),
        Case::one(
            "If-Modified-Since same date",
            get("/index.html", &format!("If-Modified-Since: {MTIME_HTTP}\r\n")),
            304,
        ),
        Case::one(
            "If-Modified-Since older date",
            get("/index.html", "If-Modified-Since: Tue, 01 Jan 2019 00:00:00 GMT\r\n"),
            200,
        ),
        Case::one("If-Match mismatch", get("/index.html", "If-Match: \"other\"\r\n"), 412),
        Case::one(
            "If-Unmodified-Since older date",
            get("/index.html", "If-Unmodified-Since: Tue, 01 Jan 2019 00:00:00 GMT\r\n"),
            412,
        ),
        // Ranges.
        Case::one("range", get("/1kb.bin", "Range: bytes=0-99\r\n"), 206),
        Case::one("suffix range", get("/1kb.bin", "Range: bytes=-100\r\n"), 206),
        Case::one("open range", get("/1kb.bin", "Range: bytes=1000-\r\n"), 206),
        Case::one("range past end clipped", get("/1kb.bin", "Range: bytes=1000-5000\r\n"), 206),
        Case::one("multi-range", get("/1kb.bin", "Range: bytes=0-9,20-29\r\n"), 206),
        Case::one("unsatisfiable range", get("/1kb.bin", "Range: bytes=2000-3000\r\n"), 416),
        Case::one("malformed range", get("/1kb.bin", "Range: bytes=abc\r\n"), 416),
        Case::one("non-bytes range unit", get("/1kb.bin", "Range: items=0-1\r\n"), 200),
        Case::one(
            "If-Range matching etag",
            get("/1kb.bin", &format!("Range: bytes=0-9\r\nIf-Range: {bin_etag}\r\n")),
            206,
        ),
        Case::one(
            "If-Range other etag",
            get("/1kb.bin", "Range: bytes=0-9\r\nIf-Range: \"other\"\r\n"),
            200,
        ),
        Case::one(
            "If-Range matching date",
            get("/1kb.bin", &format!("Range: bytes=0-9\r\nIf-Range: {MTIME_HTTP}\r\n")),
            206,
        ),
        // Connection management.
        Case::new("pipelined requests")
            .send(format!("{}{}", get("/index.html", ""), get("/style.css", "")))
            .read(200)
            .read(200),
        Case::new("keep-alive reuse")
            .send(get("/index.html", ""))
            .read(200)
            .send(get("/1kb.bin", ""))
            .read(200),
        Case::new("HTTP/1.0 closes")
            .send("GET /index.html HTTP/1.0\r\n\r\n")
            .read(200)
            .closed(),
        Case::new("HTTP/1.0 keep-alive")
            .send("GET /index.html HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .read(200)
            .send("GET /style.css HTTP/1.0\r\n\r\n")
            .read(200)
            .closed(),
        Case::new("Connection: close")
            .send(get("/index.html", "Connection: close\r\n"))
            .read(200)
            .closed(),
        // Malformed requests.
        Case::new("missing Host on HTTP/1.1")
            .send("GET / HTTP/1.1\r\n\r\n")
            .read(400)
            .closed(),
        Case::new("two Host headers")
            .send("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
            .read(400)
            .closed(),
        Case::new("two Content-Length")
            .send("POST /text HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx")
            .read(400)
            .closed(),
        Case::new("Transfer-Encoding and Content-Length")
            .send("POST /text HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n")
            .read(400)
            .closed(),
        Case::new("unknown Transfer-Encoding")
            .send("POST /text HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip\r\n\r\n")
            .read(501)
            .closed(),
        Case::new("chunked body")
            .send("POST /text HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
            .read(200)
            .send(get("/index.html", ""))
            .read(200),
        Case::new("bad chunk size")
            .send("POST /text HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
            .read(400)
            .closed(),
        Case::new("invalid Content-Length")
            .send("POST /text HTTP/1.1\r\nHost: localhost\r\nContent-Length: abc\r\n\r\n")
            .read(400)
            .closed(),
        Case::new("huge header")
            .send(get("/index.html", &long_header))
            .read(400)
            .closed(),
        Case::new("huge request line")
            .send(get(&long_uri, ""))
            .read(414)
            .closed(),
        // nginx answers before the body arrives and then lingers to drain it, so only the
        // response (with `Connection: close`) is compared, not the moment of closing.
        Case::new("body over client_max_body_size")
            .send("POST /text HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5000\r\n\r\n")
            .read(413),
        // A body that the handler discards is not held to client_max_body_size.
        Case::new("discarded chunked body over client_max_body_size")
            .send(format!(
                "POST /text HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n{}\r\n0\r\n\r\n",
                "b".repeat(0x800)
            ))
            .read(200)
            .send(get("/index.html", ""))
            .read(200),
        Case::new("Expect: 100-continue")
            .send("POST /text HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
            .read(100)
            .read(200)
            .send("body")
            .send(get("/index.html", ""))
            .read(200),
        Case::new("control byte in header name")
            .send(get("/index.html", "X-Bad\x01Name: 1\r\n"))
            .read(400)
            .closed(),
        Case::one(
            "underscore header name ignored",
            get("/index.html", "X_Under: 1\r\n"),
            200,
        ),
        Case::one(
            "header line without colon ignored",
            get("/index.html", "NoColonHere\r\n"),
            200,
        ),
        Case::new("HTTP/2.0 request line on HTTP/1 port")
            .send("GET / HTTP/2.0\r\nHost: localhost\r\n\r\n")
            .read(505)
            .closed(),
        Case::new("HTTP/1.1 with bad version digits")
            .send("GET / HTTP/1.x\r\nHost: localhost\r\n\r\n")
            .read(400)
            .closed(),
        Case::new("space in target")
            .send("GET /a b HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .read(400)
            .closed(),
    ]
}

/// Creates the document root that `HTTP_BLOCK` serves.
fn make_docroot(dir: &TempDir) {
    let kb: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
    let files: &[(&str, &[u8])] = &[
        ("index.html", INDEX_HTML.as_bytes()),
        ("1kb.bin", &kb),
        ("style.css", b"body { color: red }\n"),
        ("data.json", b"{\"ok\":true}\n"),
        ("a b%c.txt", b"spaces and percent\n"),
        ("sub/index.html", b"sub index\n"),
        ("noindex/a.txt", b"a\n"),
        ("static/x.cgi", b"static cgi file\n"),
        ("nested/n.txt", b"nested file\n"),
        ("nested/n.html", b"<p>nested</p>\n"),
        ("try/a.txt", b"try a\n"),
        ("errors/404.html", b"custom not found\n"),
        ("ro/file.txt", b"read only\n"),
        ("local/file.txt", b"local only\n"),
        ("denied/file.txt", b"denied\n"),
    ];
    dir.write_files(
        files,
        SystemTime::UNIX_EPOCH + Duration::from_secs(MTIME_SECS),
    );
}

/// What one step observed on one server.
#[derive(Debug)]
enum Observed {
    Response(Response),
    Closed(bool),
    Failed(String),
}

/// Runs a case's steps on a fresh connection; one observation per Read or Closed step.
fn run_case(server: &Server, case: &Case) -> Vec<Observed> {
    let mut client = Client::connect(server.port(case.port));
    let mut observed = Vec::new();
    let mut broken = None;
    for step in &case.steps {
        match step {
            Step::Send(bytes) => {
                if broken.is_none() {
                    if let Err(e) = client.send(bytes) {
                        broken = Some(format!("send failed: {e}"));
                    }
                }
            }
            Step::Read { head, .. } => match &broken {
                Some(why) => observed.push(Observed::Failed(why.clone())),
                None => match client.read_response(*head) {
                    Ok(r) => observed.push(Observed::Response(r)),
                    Err(e) => {
                        let why = format!("read failed: {e}");
                        broken = Some(why.clone());
                        observed.push(Observed::Failed(why));
                    }
                },
            },
            Step::Closed => observed.push(Observed::Closed(client.is_closed(CLOSE_WAIT))),
        }
    }
    observed
}

/// Checks one server's observations against the case's own expectations.
fn check_expectations(kind: Kind, case: &Case, observed: &[Observed]) -> Vec<String> {
    let expected = case.steps.iter().filter_map(|s| match s {
        Step::Read { status, .. } => Some(Some(*status)),
        Step::Closed => Some(None),
        Step::Send(_) => None,
    });
    let mut failures = Vec::new();
    for (i, (want, got)) in expected.zip(observed).enumerate() {
        match (want, got) {
            (Some(status), Observed::Response(r)) if r.status == status => {}
            (Some(status), Observed::Response(r)) => failures.push(format!(
                "{kind}: step {i}: status {} (want {status}); body {:?}",
                r.status,
                r.body_text()
            )),
            (None, Observed::Closed(true)) => {}
            (None, Observed::Closed(false)) => failures.push(format!(
                "{kind}: step {i}: connection left open (want closed)"
            )),
            (_, Observed::Failed(why)) => failures.push(format!("{kind}: step {i}: {why}")),
            (_, other) => failures.push(format!("{kind}: step {i}: unexpected {other:?}")),
        }
    }
    failures
}

/// Replaces what legitimately differs between two servers: the signature line of built-in
/// error pages, the port in absolute redirects, the multipart boundary.
fn normalise(response: &Response, port: u16) -> Response {
    let mut r = response.clone();
    if let Some(start) = find(&r.body, b"<hr><center>") {
        if let Some(len) = find(&r.body[start..], b"</center>") {
            r.body
                .splice(start..start + len, b"<hr><center>SERVER".iter().copied());
        }
    }
    let boundary = r
        .header("content-type")
        .and_then(|ct| ct.split_once("boundary="))
        .map(|(_, b)| b.trim_matches('"').to_owned());
    if let Some(boundary) = &boundary {
        r.body = replace_all(&r.body, boundary.as_bytes(), b"BOUNDARY");
    }
    for (name, value) in &mut r.headers {
        if name.eq_ignore_ascii_case("location") {
            *value = value.replace(&format!(":{port}"), ":PORT");
        }
        if let Some(boundary) = &boundary {
            *value = value.replace(boundary.as_str(), "BOUNDARY");
        }
    }
    r
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Replaces every occurrence of `needle` in binary `haystack`.
fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut rest = haystack;
    while let Some(pos) = find(rest, needle).filter(|_| !needle.is_empty()) {
        out.extend_from_slice(&rest[..pos]);
        out.extend_from_slice(with);
        rest = &rest[pos + needle.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// Compares two responses to the same request; `head` when it answered a HEAD.
fn compare(nginx: &Response, ours: &Response, ports: (u16, u16), head: bool) -> Vec<String> {
    let n = normalise(nginx, ports.0);
    let p = normalise(ours, ports.1);
    let mut diffs = Vec::new();
    if (n.status, &n.version) != (p.status, &p.version) {
        diffs.push(format!(
            "status line: nginx {} {} portcullis {} {}",
            n.version, n.status, p.version, p.status
        ));
    }
    if n.body != p.body {
        diffs.push(format!(
            "body: nginx {:?} portcullis {:?}",
            n.body_text(),
            p.body_text()
        ));
    }
    for name in COMPARED_HEADERS {
        let (a, b) = (n.header(name), p.header(name));
        let same = match (a, b) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            (a, b) => a == b,
        };
        if !same {
            diffs.push(format!("{name}: nginx {a:?} portcullis {b:?}"));
        }
    }
    // Error pages and multipart bodies embed text that differs in length (server name,
    // boundary), so there Content-Length must describe the body rather than equal nginx's.
    let length_varies =
        nginx.body != n.body || nginx.header("content-type") != n.header("content-type");
    if length_varies && !head {
        let declared = ours
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok());
        if ours.header("content-length").is_some() && declared != Some(ours.body.len()) {
            diffs.push(format!(
                "content-length: portcullis {declared:?} for a {}-byte body",
                ours.body.len()
            ));
        }
        if nginx.header("content-length").is_some() != ours.header("content-length").is_some() {
            diffs.push("content-length: present on one side only".to_owned());
        }
    } else if n.header("content-length") != p.header("content-length") {
        diffs.push(format!(
            "content-length: nginx {:?} portcullis {:?}",
            n.header("content-length"),
            p.header("content-length")
        ));
    }
    diffs
}

#[test]
fn differential_static_and_routing() {
    let docroot = TempDir::new("docroot");
    make_docroot(&docroot);
    let template = support::main_config(
        &HTTP_BLOCK.replace("{DOCROOT}", &docroot.path().display().to_string()),
    );
    let cases = cases();
    assert!(cases.len() >= 40, "the table must stay broad");
    let mut failures: Vec<String> = Vec::new();

    // nginx first: its answers validate the table and are the reference for portcullis.
    let nginx = support::nginx_binary().and_then(|_| Server::start(Kind::Nginx, 2, &template));
    let reference: Option<Vec<Vec<Observed>>> = nginx.as_ref().map(|server| {
        cases
            .iter()
            .map(|case| {
                let observed = run_case(server, case);
                for f in check_expectations(Kind::Nginx, case, &observed) {
                    failures.push(format!("[{}] {f}", case.name));
                }
                observed
            })
            .collect()
    });
    if let Some(server) = &nginx {
        if std::env::var_os("PORTCULLIS_DIFF_SHOW").is_some() {
            show(server, &cases, reference.as_deref().unwrap_or(&[]));
        }
    }
    assert!(
        failures.is_empty(),
        "the table disagrees with nginx itself:\n{}",
        failures.join("\n")
    );

    if support::only_nginx() {
        support::skip(&format!(
            "portcullis side ({} is set); {} cases checked against nginx",
            support::ONLY_NGINX_ENV,
            cases.len()
        ));
        return;
    }
    let ours = Server::start(Kind::Portcullis, 2, &template).expect("portcullis binary");
    for (i, case) in cases.iter().enumerate() {
        let observed = run_case(&ours, case);
        for f in check_expectations(Kind::Portcullis, case, &observed) {
            failures.push(format!("[{}] {f}", case.name));
        }
        let Some(reference) = &reference else {
            continue;
        };
        let reads = case.steps.iter().filter_map(|s| match s {
            Step::Read { head, .. } => Some(*head),
            Step::Closed => Some(false),
            Step::Send(_) => None,
        });
        for (step, (head, (n, p))) in reads.zip(reference[i].iter().zip(&observed)).enumerate() {
            if let (Observed::Response(n), Observed::Response(p)) = (n, p) {
                let ports = (
                    nginx.as_ref().map_or(0, |s| s.port(case.port)),
                    ours.port(case.port),
                );
                for d in compare(n, p, ports, head) {
                    failures.push(format!("[{}] step {step}: {d}", case.name));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} differences from nginx in {} cases:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Prints every nginx response, to review the table by eye (`PORTCULLIS_DIFF_SHOW=1`).
fn show(server: &Server, cases: &[Case], observed: &[Vec<Observed>]) {
    for (case, observed) in cases.iter().zip(observed) {
        eprintln!("== {} (port {})", case.name, server.port(case.port));
        for o in observed {
            match o {
                Observed::Response(r) => {
                    eprintln!("   {} {} {:?}", r.version, r.status, r.reason);
                    for (n, v) in &r.headers {
                        eprintln!("   {n}: {v}");
                    }
                    eprintln!("   body: {:?}", r.body_text());
                }
                other => eprintln!("   {other:?}"),
            }
        }
    }
}

#[test]
fn normalise_replaces_signature_port_and_boundary() {
    let response = Response {
        version: "HTTP/1.1".into(),
        status: 206,
        reason: "Partial Content".into(),
        headers: vec![
            (
                "Content-Type".into(),
                "multipart/byteranges; boundary=00000000042".into(),
            ),
            ("Location".into(), "http://localhost:8123/x".into()),
        ],
        body: b"--00000000042\r\n<hr><center>nginx/1.22.1</center>".to_vec(),
    };
    let n = normalise(&response, 8123);
    assert_eq!(n.header("location"), Some("http://localhost:PORT/x"));
    assert_eq!(
        n.header("content-type"),
        Some("multipart/byteranges; boundary=BOUNDARY")
    );
    assert_eq!(n.body_text(), "--BOUNDARY\r\n<hr><center>SERVER</center>");
}

#[test]
fn normalise_keeps_binary_bodies_byte_exact() {
    let body: Vec<u8> = vec![0xff, 0xfe, 0x00, b'a'];
    let response = Response {
        version: "HTTP/1.1".into(),
        status: 200,
        reason: "OK".into(),
        headers: Vec::new(),
        body: body.clone(),
    };
    assert_eq!(normalise(&response, 1).body, body);
    assert_eq!(replace_all(b"xabxab", b"ab", b"-"), b"x-x-".to_vec());
}

#[test]
fn docroot_files_carry_the_fixed_mtime() {
    let dir = TempDir::new("mtime");
    make_docroot(&dir);
    let modified = fs::metadata(dir.path().join("index.html"))
        .and_then(|m| m.modified())
        .expect("mtime");
    assert_eq!(
        modified,
        SystemTime::UNIX_EPOCH + Duration::from_secs(MTIME_SECS)
    );
    assert!(Path::new(&dir.path().join("a b%c.txt")).is_file());
}
