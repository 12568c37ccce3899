//! FastCGI against Debian's php-fpm, compared with nginx on the same configuration: the PHP
//! configuration of nginx's documentation with Debian's `fastcgi_params` and `fastcgi.conf`
//! included unchanged, a WordPress-style front controller (`try_files $uri $uri/
//! /index.php?$args`), `PATH_INFO` scripts, the client's header fields, POST bodies of 0
//! bytes to 20 MB, a file upload, `Status:` and `Location:` from scripts, cookies, what a
//! script writes to stderr, a script slower than `fastcgi_read_timeout`, a socket nobody
//! listens on, and a kept-alive `upstream` group with `fastcgi_keep_conn`.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use support::{compare, kinds, main_config, wait_until, Server, TempDir};

/// php-fpm with one pool on a unix socket in its own directory; stopped when dropped.
struct Fpm {
    child: Child,
    dir: TempDir,
}

impl Fpm {
    /// Starts Debian's php-fpm, or `None` (a visible skip, a failure under CI) without it.
    fn start() -> Option<Fpm> {
        let binary = std::fs::read_dir("/usr/sbin")
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("php-fpm"))
            });
        let Some(binary) = binary else {
            if std::env::var_os("CI").is_some() {
                panic!("php-fpm not found: apt-get install php-fpm");
            }
            support::skip("php-fpm not found: apt-get install php-fpm");
            return None;
        };
        let dir = TempDir::new("fpm");
        let root = unsafe { libc::geteuid() } == 0;
        let user = if root {
            "user = nobody\ngroup = nogroup\n"
        } else {
            ""
        };
        let conf = dir.write(
            "fpm.conf",
            format!(
                "[global]\npid = {d}/fpm.pid\nerror_log = {d}/fpm.log\ndaemonize = no\n\
                 [www]\n{user}listen = {d}/fpm.sock\nlisten.mode = 0666\npm = static\n\
                 pm.max_children = 4\ncatch_workers_output = yes\npm.status_path = /fpm-status\n",
                d = dir.path().display()
            ),
        );
        let child = Command::new(binary)
            .args(["-n", "-F", "-R", "-y"])
            .arg(&conf)
            .args(["-d", "post_max_size=32M", "-d", "upload_max_filesize=32M"])
            .args(["-d", "display_errors=0", "-d", "log_errors=1"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start php-fpm");
        let fpm = Fpm { child, dir };
        assert!(
            wait_until(Duration::from_secs(10), || fpm.socket().exists()),
            "php-fpm did not listen: {}",
            support::read_lossy(&fpm.dir.path().join("fpm.log"))
        );
        Some(fpm)
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("fpm.sock")
    }

    /// Kills php-fpm's workers (its master starts new ones), as a crash would end them.
    fn kill_workers(&self) {
        let master = self.child.id().to_string();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // pid (comm) state ppid ...: the comm has no spaces here.
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().nth(1));
            if ppid == Some(master.as_str()) {
                if let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) {
                    // SAFETY: kill(2) on a process of our own php-fpm.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
    }
}

impl Drop for Fpm {
    /// SIGTERM: php-fpm's master stops its workers, which a SIGKILL would leave behind.
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) on the php-fpm this test started.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let _ = self.child.wait();
    }
}

/// The scripts: what PHP sees of the request, and what a script can send back.
const SCRIPTS: &[(&str, &str)] = &[
    (
        "index.php",
        r#"<?php
header("X-Test: yes");
$s = $_SERVER;
foreach (["SCRIPT_NAME", "SCRIPT_FILENAME", "PATH_INFO", "REQUEST_URI", "DOCUMENT_URI",
          "DOCUMENT_ROOT", "QUERY_STRING", "REQUEST_METHOD", "CONTENT_TYPE", "CONTENT_LENGTH",
          "HTTP_HOST", "HTTP_X_CUSTOM", "HTTP_COOKIE", "HTTP_PROXY", "HTTP_X_LATE", "HTTP_x_late",
          "REQUEST_BODY", "GATEWAY_INTERFACE", "REDIRECT_STATUS",
          "REMOTE_ADDR", "SERVER_PROTOCOL", "REQUEST_SCHEME", "HTTPS"] as $k) {
    echo $k, "=", $s[$k] ?? "(unset)", "\n";
}
$in = file_get_contents("php://input");
echo "body=", strlen($in), " ", md5($in), "\n";
"#,
    ),
    (
        "status.php",
        "<?php http_response_code(404); error_log(\"a note to stderr\"); echo \"not here\\n\";",
    ),
    (
        "redirect.php",
        "<?php header(\"Location: /elsewhere?x=1\"); echo \"moved\\n\";",
    ),
    (
        "cookies.php",
        "<?php setcookie(\"a\", \"1\"); setcookie(\"b\", \"2\"); header(\"Cache-Control: no-store\"); echo \"ok\\n\";",
    ),
    (
        "upload.php",
        "<?php foreach ($_FILES as $k => $f) { echo $k, \" \", $f[\"name\"], \" \", $f[\"size\"], \" \", md5_file($f[\"tmp_name\"]), \"\\n\"; } echo \"post=\", json_encode($_POST), \"\\n\";",
    ),
    ("slow.php", "<?php sleep(2); echo \"late\\n\";"),
    (
        "own_server.php",
        "<?php header(\"Server: php-app\"); header(\"X-Pad: pad\"); echo \"mine\\n\";",
    ),
    (
        "big_head.php",
        "<?php header(\"X-Big: \" . str_repeat(\"b\", 20000)); echo \"big\\n\";",
    ),
    (
        "late_stderr.php",
        "<?php echo \"first\\n\"; flush(); error_log(\"a later note\"); echo \"second\\n\";",
    ),
    (
        "partial.php",
        "<?php echo str_repeat(\"p\", 100), \"\\n\"; flush(); sleep(3); echo \"rest\\n\";",
    ),
    ("dir/index.php", "<?php echo \"dir index \", $_SERVER[\"SCRIPT_NAME\"], \"\\n\";"),
    ("static.txt", "a static file\n"),
    ("secret/file.txt", "a protected file\n"),
    (
        "download.php",
        "<?php header(\"X-Accel-Redirect: /protected/file.txt\"); header(\"Content-Disposition: attachment\"); echo \"not this\";",
    ),
];

fn config(www: &Path, socket: &Path) -> String {
    let php = format!(
        "fastcgi_pass unix:{};
            fastcgi_index index.php;
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;",
        socket.display()
    );
    format!(
        r#"
    client_max_body_size 32m;
    upstream php {{
        server unix:{socket};
        keepalive 4;
    }}
    server {{
        listen 127.0.0.1:{{PORT0}};
        server_name example.org;
        root {www};
        index index.php index.html;
        location / {{ try_files $uri $uri/ /index.php?$args; }}
        location ~ [^/]\.php(/|$) {{
            fastcgi_split_path_info ^(.+?\.php)(/.*)$;
            fastcgi_param REQUEST_BODY $request_body;
            # The httpoxy fix: no client's Proxy field reaches the script.
            fastcgi_param HTTP_PROXY "";
            fastcgi_param HTTP_x_late late-param;
            # try_files moves the URI to the script: the path info is taken before.
            set $path_info $fastcgi_path_info;
            try_files $fastcgi_script_name =404;
            {php}
            fastcgi_param PATH_INFO $path_info;
        }}
        location /slow/ {{
            fastcgi_read_timeout 1s;
            # (Its redirect compared without the servers' ports.)
            absolute_redirect off;
            {php}
            fastcgi_param SCRIPT_FILENAME {www}/slow.php;
        }}
        location /conf/ {{
            fastcgi_pass unix:{socket};
            include /etc/nginx/fastcgi.conf;
            fastcgi_param SCRIPT_FILENAME {www}/index.php;
        }}
        location /kept/ {{
            fastcgi_pass php;
            fastcgi_keep_conn on;
            include /etc/nginx/fastcgi.conf;
            fastcgi_param SCRIPT_FILENAME {www}/index.php;
            # A location inside is not passed, nor is its `if` block.
            location /kept/static/ {{ if ($arg_x) {{ set $a 1; }} }}
        }}
        location /intercept/ {{
            fastcgi_intercept_errors on;
            error_page 404 /static.txt;
            {php}
            fastcgi_param SCRIPT_FILENAME {www}/status.php;
        }}
        location /hide/ {{
            fastcgi_hide_header X-Test;
            {php}
            fastcgi_param SCRIPT_FILENAME {www}/index.php;
        }}
        location = /fpm-status {{
            fastcgi_pass unix:{socket};
            include /etc/nginx/fastcgi.conf;
            fastcgi_param SCRIPT_NAME /fpm-status;
        }}
        location /protected/ {{ internal; alias {www}/secret/; }}
        location /nobody/ {{
            fastcgi_pass unix:{www}/no.sock;
            include /etc/nginx/fastcgi.conf;
        }}
    }}
"#,
        socket = socket.display(),
        www = www.display(),
    )
}

/// A multipart body with one file and one field.
fn upload() -> (String, Vec<u8>) {
    let boundary = "XyZzY";
    let mut body = Vec::new();
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.bin\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend((0..100_000u32).map(|i| (i % 251) as u8));
    body.extend_from_slice(
        format!(
            "\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"k\"\r\n\r\nv\r\n--{boundary}--\r\n"
        )
        .as_bytes(),
    );
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[test]
fn php_sites_answer_as_under_nginx() {
    let Some(fpm) = Fpm::start() else {
        return;
    };
    let www = TempDir::new("www");
    for (name, text) in SCRIPTS {
        www.write(name, text);
    }
    let http = config(www.path(), &fpm.socket());
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        let port = server.port(0);
        let mut lines = Vec::new();
        let send = |label: &str, raw: Vec<u8>| -> String {
            let mut c = support::Client::connect(port);
            c.send(&raw).expect("send");
            let r = c
                .read_response(raw.starts_with(b"HEAD "))
                .expect("response");
            let mut text = format!("{label} -> {}", r.status);
            for h in [
                "content-type",
                "location",
                "x-test",
                "cache-control",
                "server",
                "x-pad",
            ] {
                // The servers' own names differ: only a script's is compared.
                let own = |v: &str| v.starts_with("nginx") || v.starts_with("portcullis");
                if let Some(v) = r.header(h).filter(|v| h != "server" || !own(v)) {
                    text.push_str(&format!(" {h}={v}"));
                }
            }
            text.push_str(&format!(" set-cookie={}", r.header_count("set-cookie")));
            if r.status == 200 || r.status == 302 || r.status == 404 && label.contains("status") {
                text.push('\n');
                text.push_str(&r.body_text());
            }
            text
        };
        let get = |path: &str, extra: &str| {
            format!("GET {path} HTTP/1.1\r\nHost: example.org\r\n{extra}Connection: close\r\n\r\n")
                .into_bytes()
        };
        for (label, path, extra) in [
            ("root", "/", ""),
            ("front controller", "/2024/11/a-post/?p=1&q=two", ""),
            (
                "script",
                "/index.php?a=1",
                "X-Custom: hi\r\nCookie: c=3\r\nProxy: http://evil\r\nX-Late: client\r\n",
            ),
            ("own server", "/own_server.php", ""),
            ("big head", "/big_head.php", ""),
            ("accel redirect", "/download.php", ""),
            ("path info", "/index.php/extra/path?x", ""),
            ("dir index", "/dir/", ""),
            // fastcgi_pass makes `/slow` a redirect to `/slow/` (nginx's auto_redirect).
            ("auto redirect", "/slow?a=1", ""),
            (
                "nested in a passed location",
                "/kept/static/none.txt?x=1",
                "",
            ),
            ("missing script", "/nope.php", ""),
            ("static", "/static.txt", ""),
            ("status", "/status.php", ""),
            ("redirect", "/redirect.php", ""),
            ("cookies", "/cookies.php", ""),
            ("slow", "/slow/x", ""),
            ("fastcgi.conf", "/conf/x?y=z", ""),
            ("no socket", "/nobody/x", ""),
        ] {
            lines.push(send(label, get(path, extra)));
        }
        for i in 0..3 {
            lines.push(send(&format!("kept {i}"), get(&format!("/kept/{i}"), "")));
        }
        // The kept connection stays open to php-fpm, idle: one, whatever the requests.
        let socket = fpm.socket().display().to_string();
        let open = || {
            let out = Command::new("ss")
                .args(["-x", "-H", "state", "established"])
                .output()
                .expect("run ss (iproute2)");
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.contains(&socket))
                .count()
        };
        wait_until(Duration::from_secs(5), || open() == 1);
        lines.push(format!("connections kept open to php-fpm: {}", open()));
        for (label, path) in [
            ("intercepted", "/intercept/x"),
            ("hidden header", "/hide/x"),
            ("late stderr", "/late_stderr.php"),
        ] {
            lines.push(send(label, get(path, "")));
        }
        // php-fpm's worker killed in the middle of a response: the client sees it cut.
        let partial = std::thread::spawn(move || {
            let mut c = support::Client::connect(port);
            c.send(b"GET /partial.php HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n")
                .expect("send");
            c.read_response(false)
                .map(|r| r.status)
                .map_err(|e| e.to_string())
        });
        std::thread::sleep(Duration::from_millis(1000));
        fpm.kill_workers();
        let cut = partial.join().expect("the partial request");
        lines.push(format!("killed worker: {cut:?}"));
        // php-fpm's master starts new workers: the requests after wait for them.
        let serves = || {
            support::get(port, "/static.txt").is_ok()
                && support::get(port, "/index.php").is_ok_and(|r| r.status == 200)
        };
        assert!(
            wait_until(Duration::from_secs(10), serves),
            "php-fpm did not start new workers"
        );
        lines.push(send(
            "head",
            b"HEAD /index.php HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n".to_vec(),
        ));
        for size in [0usize, 1000, 1 << 20, 20 << 20] {
            let mut raw = format!(
                "POST /index.php HTTP/1.1\r\nHost: example.org\r\nContent-Type: application/octet-stream\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"
            )
            .into_bytes();
            raw.extend((0..size).map(|i| (i % 253) as u8));
            lines.push(send(&format!("post {size}"), raw));
        }
        // A chunked body: the script is told its length once it is read.
        lines.push(send(
            "chunked post",
            b"POST /index.php HTTP/1.1\r\nHost: example.org\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\na=1&\r\n3\r\nb=2\r\n0\r\n\r\n".to_vec(),
        ));
        let (content_type, body) = upload();
        let mut raw = format!(
            "POST /upload.php HTTP/1.1\r\nHost: example.org\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        raw.extend(body);
        lines.push(send("upload", raw));
        // What the scripts wrote to stderr, and the failures, in nginx's words.
        let log = server.error_log();
        if std::env::var_os("SHOW").is_some() {
            eprintln!("{kind} error log:\n{log}");
        }
        for line in [
            "FastCGI sent in stderr: \"PHP message: a note to stderr\" while reading response header from upstream",
            "upstream timed out (110: Connection timed out) while reading response header from upstream",
            "failed (2: No such file or directory) while connecting to upstream",
            "FastCGI sent in stderr: \"PHP message: a later note\" while reading upstream",
            "failed (104: Connection reset by peer) while reading upstream",
            &format!("upstream: \"fastcgi://unix:{}:\"", fpm.socket().display()),
        ] {
            lines.push(format!("log has {line}: {}", log.contains(line)));
        }
        support::expect_lines(
            &lines,
            &[
                "front controller -> 200",
                "QUERY_STRING=p=1&q=two",
                "PATH_INFO=/extra/path",
                "SCRIPT_NAME=/index.php",
                "HTTP_X_CUSTOM=hi",
                "post 20971520 -> 200",
                "HTTP_PROXY=(unset)",
                "HTTP_X_LATE=(unset)\nHTTP_x_late=late-param",
                "own server -> 200 content-type=text/html; charset=UTF-8 server=php-app x-pad=pad",
                "big head -> 502",
                "accel redirect -> 200 content-type=text/html; charset=UTF-8 set-cookie=0\na protected file",
                "CONTENT_LENGTH=7\nHTTP_HOST",
                "REQUEST_BODY=a=1&b=2",
                "body=20971520 ",
                "f a.bin 100000 ",
                "slow -> 504",
                "no socket -> 502",
                "missing script -> 404",
                "log has FastCGI sent in stderr",
                "connections kept open to php-fpm: 1",
                "intercepted -> 404 content-type=text/plain",
                "late stderr -> 200",
                "killed worker: Err(",
                "log has failed (104: Connection reset by peer) while reading upstream: true",
            ],
        );
        seen.push((kind, lines));
    }
    compare(&seen);
}

/// The module's directives are checked at load as nginx checks them, with its messages.
#[test]
fn fastcgi_directives_are_refused_as_nginx_refuses_them() {
    for (location, error) in [
        (
            "fastcgi_pass 127.0.0.1:9000/x;",
            "invalid host in upstream \"127.0.0.1:9000/x\"",
        ),
        ("fastcgi_pass unix:;", "no path in the unix domain socket"),
        (
            "fastcgi_pass 127.0.0.1:9000; fastcgi_param A b maybe;",
            "invalid parameter \"maybe\"",
        ),
        (
            "fastcgi_pass 127.0.0.1:9000; fastcgi_split_path_info ^(.+)$;",
            "pattern \"^(.+)$\" must have 2 captures",
        ),
        (
            "fastcgi_pass 127.0.0.1:9000; fastcgi_connect_timeout soon;",
            "\"fastcgi_connect_timeout\" directive invalid value",
        ),
    ] {
        let http = format!("server {{ location / {{ {location} }} }}");
        for kind in kinds() {
            let dir = TempDir::new("fastcgi-t");
            let conf = dir.write(
                "nginx.conf",
                support::render(&main_config(&http), dir.path(), &[]),
            );
            let Some(binary) = kind.binary() else {
                continue;
            };
            let out = support::test_config(Command::new(binary), dir.path(), &conf);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{kind}: {location} loads");
            assert!(stderr.contains(error), "{kind}: {stderr}");
        }
    }
}

/// `fastcgi_cache` against nginx: a response kept and served again (the script sees the
/// first request only), the client's conditions and range kept from the script while a
/// response may be cached (a range is cut from the whole stored response), a HEAD sent as
/// a HEAD, a POST never cached, a cache without `fastcgi_cache_key` (every request has
/// the empty key, and nginx warns), and an expired entry revalidated with the entry's
/// conditions as params.
#[test]
fn the_fastcgi_cache_answers_as_nginx_does() {
    let Some(fpm) = Fpm::start() else {
        return;
    };
    let www = TempDir::new("www");
    www.write(
        "cached.php",
        r#"<?php
$s = $_SERVER;
header("Last-Modified: Tue, 01 Jan 2030 00:00:00 GMT");
if (($s["HTTP_IF_MODIFIED_SINCE"] ?? "") == "Tue, 01 Jan 2030 00:00:00 GMT") {
    http_response_code(304);
    exit;
}
echo "v=", $_GET["v"] ?? "", " method=", $s["REQUEST_METHOD"],
    " ims=", $s["HTTP_IF_MODIFIED_SINCE"] ?? "-", " range=", $s["HTTP_RANGE"] ?? "-", "\n";
"#,
    );
    let http = format!(
        r#"
    fastcgi_cache_path {{PREFIX}}/cache keys_zone=php:1m;
    server {{
        listen 127.0.0.1:{{PORT0}};
        include /etc/nginx/fastcgi.conf;
        fastcgi_param SCRIPT_FILENAME {www}/cached.php;
        add_header X-Cache $upstream_cache_status always;
        location / {{
            fastcgi_pass unix:{socket};
            fastcgi_cache php;
            fastcgi_cache_key $uri;
            fastcgi_cache_valid 200 1m;
        }}
        location /nokey/ {{
            fastcgi_pass unix:{socket};
            fastcgi_cache php;
            fastcgi_cache_valid 200 1m;
        }}
        location /short/ {{
            fastcgi_pass unix:{socket};
            fastcgi_cache php;
            fastcgi_cache_key $uri;
            fastcgi_cache_valid 200 1s;
            fastcgi_cache_revalidate on;
        }}
    }}
"#,
        socket = fpm.socket().display(),
        www = www.path().display(),
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        let port = server.port(0);
        let send = |method: &str, path: &str, extra: &str| -> String {
            let mut c = support::Client::connect(port);
            let raw = format!(
                "{method} {path} HTTP/1.1\r\nHost: example.org\r\n{extra}Connection: close\r\n\r\n"
            );
            c.send(raw.as_bytes()).expect("send");
            let r = c.read_response(method == "HEAD").expect("response");
            // The server closes once the request is finished, its cache entry written too
            // (for a HEAD, after the head was sent): the next request finds the entry.
            assert!(
                c.is_closed(support::IO_TIMEOUT),
                "{kind}: {method} {path}: still open after Connection: close"
            );
            let mut text = format!("{method} {path} -> {}", r.status);
            for h in ["x-cache", "content-range", "content-length"] {
                if let Some(v) = r.header(h) {
                    text.push_str(&format!(" {h}={v}"));
                }
            }
            text.push_str(&format!(" | {}", r.body_text().trim_end()));
            text
        };
        let mut lines = vec![
            send("GET", "/a?v=1", ""),
            send("GET", "/a?v=2", ""),
            send(
                "GET",
                "/b?v=3",
                "If-Modified-Since: Mon, 01 Jan 2001 00:00:00 GMT\r\nRange: bytes=0-3\r\n",
            ),
            send("GET", "/b?v=4", ""),
            send("HEAD", "/c?v=5", ""),
            send("GET", "/c?v=6", ""),
            send("POST", "/a?v=7", "Content-Length: 0\r\n"),
            send("GET", "/nokey/x?v=8", ""),
            send("GET", "/nokey/y?v=9", ""),
            send("GET", "/short/d?v=10", ""),
        ];
        // The entry expires (1 s), then is revalidated: the script answers 304 to the
        // entry's Last-Modified, and the entry is sent again.
        std::thread::sleep(Duration::from_millis(2100));
        lines.push(send("GET", "/short/d?v=11", ""));
        lines.push(send("GET", "/short/d?v=12", ""));
        let warned = server
            .logs()
            .contains("no \"fastcgi_cache_key\" for \"fastcgi_cache\"");
        lines.push(format!("warned: {warned}"));
        if std::env::var_os("SHOW").is_some() {
            eprintln!("{kind}:\n{}", lines.join("\n"));
        }
        support::expect_lines(
            &lines,
            &[
                "GET /a?v=1 -> 200 x-cache=MISS",
                "GET /a?v=2 -> 200 x-cache=HIT",
                "v=1 method=GET ims=- range=-",
                "GET /b?v=3 -> 200 x-cache=MISS | v=3 method=GET ims=- range=-",
                "GET /nokey/y?v=9 -> 200 x-cache=HIT",
                "GET /short/d?v=11 -> 200 x-cache=REVALIDATED | v=10",
                "warned: true",
            ],
        );
        seen.push((kind, lines));
    }
    compare(&seen);
}
