//! `proxy_cache` against nginx on the same configuration: what is stored and for how long
//! (`proxy_cache_valid`, `Cache-Control`, `Expires`, `X-Accel-Expires`, `Set-Cookie`, `Vary`),
//! what the upstream is asked (a HEAD as a GET, no client conditions or ranges), the
//! `proxy_cache_*` directives, `$upstream_cache_status`, and the cache on disk: nginx's
//! layout, found again after a restart, never a truncated entry after a kill in mid-write.

#[path = "support/h2c.rs"]
#[allow(dead_code)]
mod h2c;
mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{head_upstream, kinds, Kind, Server, TempDir};

const CONFIG: &str = r#"
    log_format cache '$request_uri $upstream_cache_status';
    access_log {PREFIX}/cache.log cache;
    proxy_temp_path {PREFIX}/proxy_temp;
    proxy_cache_path {CACHE} levels=1:2 keys_zone=z:1m inactive=10m;
    proxy_cache_path {CACHE}-short keys_zone=short:1m inactive=1s;
    server {
        listen 127.0.0.1:{PORT0};
        listen 127.0.0.1:{PORT1} http2;
        add_header X-Cache $upstream_cache_status always;
        proxy_cache z;
        proxy_cache_valid 200 1m;
        location / {
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /nodefault/ {
            proxy_cache_valid 0s;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /any/ {
            proxy_cache_valid any 1m;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /post/ {
            proxy_cache_methods POST;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /twice/ {
            proxy_cache_min_uses 2;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /flags/ {
            proxy_cache_bypass $arg_bypass;
            proxy_no_cache $arg_nostore;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /headonly/ {
            proxy_cache_convert_head off;
            proxy_cache_key $request_method$uri;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /ignore/ {
            proxy_ignore_headers Set-Cookie Cache-Control;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /short/ {
            proxy_cache_valid 200 1s;
            proxy_cache_key $uri;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /revalidate/ {
            proxy_cache_valid 200 1s;
            proxy_cache_revalidate on;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /gone/ {
            proxy_cache_valid 200 1s;
            proxy_cache_key /short/$arg_k;
            proxy_cache_use_stale error timeout http_500;
            proxy_pass http://127.0.0.1:{DEAD};
        }
        location /gone-strict/ {
            proxy_cache_key /short/$arg_k;
            proxy_pass http://127.0.0.1:{DEAD};
        }
        location /inactive/ {
            proxy_cache short;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /off/ {
            proxy_cache off;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /gz/ {
            gzip on;
            gzip_min_length 1;
            gzip_types text/plain;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /force/ {
            proxy_cache off;
            proxy_force_ranges on;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /stale500/ {
            proxy_cache_valid 200 1s;
            proxy_cache_key /short/$arg_k;
            proxy_cache_use_stale http_500;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /reval2/ {
            proxy_cache_valid 404 1m;
            proxy_cache_revalidate on;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /maxoff/ {
            proxy_cache_max_range_offset 10;
            proxy_pass http://127.0.0.1:{UPSTREAM}/ar/;
        }
    }
"#;

/// What the upstream was asked, by path: the request heads in order.
type Seen = Arc<Mutex<HashMap<String, Vec<String>>>>;

/// An upstream whose answer depends on the path, numbered by how often the path was asked.
fn upstream(seen: Seen) -> u16 {
    head_upstream(move |_, head| {
        let text = String::from_utf8_lossy(head).to_string();
        let target = text.split_whitespace().nth(1).unwrap_or("").to_string();
        let path = target.split('?').next().unwrap_or("").to_string();
        let n = {
            let mut s = seen.lock().unwrap();
            let list = s.entry(path.clone()).or_default();
            list.push(text.clone());
            list.len()
        };
        let name = path.rsplit('/').next().unwrap_or("");
        let ranges = path.starts_with("/ar/");
        let body = if ranges {
            "0123456789abcdefghij".to_string()
        } else {
            format!("{path} #{n}\n")
        };
        let (status, fields) = match name {
            "no-cache" => ("200 OK", "Cache-Control: no-cache\r\n".to_string()),
            "no-store" => ("200 OK", "Cache-Control: no-store\r\n".into()),
            "private" => ("200 OK", "Cache-Control: private, max-age=60\r\n".into()),
            "max-age-0" => ("200 OK", "Cache-Control: max-age=0\r\n".into()),
            "max-age" => ("200 OK", "Cache-Control: public, max-age=60\r\n".into()),
            "s-maxage" => ("200 OK", "Cache-Control: s-maxage=60, max-age=0\r\n".into()),
            "expires-past" => (
                "200 OK",
                "Expires: Thu, 01 Jan 1970 00:00:01 GMT\r\n".into(),
            ),
            "expires-future" => (
                "200 OK",
                "Expires: Fri, 01 Jan 2100 00:00:00 GMT\r\n".into(),
            ),
            "x-accel-0" => ("200 OK", "X-Accel-Expires: 0\r\n".into()),
            "x-accel-first" => (
                "200 OK",
                "X-Accel-Expires: 60\r\nCache-Control: no-cache\r\n".into(),
            ),
            "x-accel-abs" => ("200 OK", "X-Accel-Expires: @4102444800\r\n".into()),
            "cookie" => ("200 OK", "Set-Cookie: a=b\r\n".into()),
            "vary-star" => ("200 OK", "Vary: *\r\n".into()),
            "vary-two" => ("200 OK", "Vary: *\r\nVary: Accept\r\n".into()),
            // Fresh to the end of the next second, by its Expires alone.
            "expiring" => ("200 OK", format!("Expires: {}\r\n", http_date(1))),
            "vary" => ("200 OK", "Vary: Accept-Encoding\r\n".into()),
            "missing" => ("404 Not Found", String::new()),
            "broken" => (
                "500 Internal Server Error",
                "Cache-Control: max-age=60\r\n".into(),
            ),
            _ => ("200 OK", String::new()),
        };
        let not_modified =
            matches!(name, "validated" | "expiring") && text.contains("If-Modified-Since:");
        if not_modified {
            return b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n".to_vec();
        }
        let head_only = text.starts_with("HEAD ");
        let fields = if ranges {
            format!("Accept-Ranges: bytes\r\nX-Count: {n}\r\n{fields}")
        } else {
            fields
        };
        let mut out = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\n{fields}Last-Modified: Mon, 02 Jan 2023 00:00:00 GMT\r\nETag: \"v1\"\r\n"
        )
        .into_bytes();
        if name == "chunked" {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            if !head_only {
                let (a, b) = body.split_at(3);
                for piece in [a, b] {
                    out.extend(format!("{:x}\r\n{piece}\r\n", piece.len()).into_bytes());
                }
                out.extend_from_slice(b"0\r\n\r\n");
            }
            return out;
        }
        out.extend(format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes());
        if !head_only {
            out.extend(body.into_bytes());
        }
        out
    })
}

/// Waits until the server renamed every entry it wrote into place: nginx does it after the
/// response went out, so a next request could otherwise come before it. No temporary file
/// is left in nginx's `proxy_temp_path` or beside the entries under `cache`.
fn settle(server: &Server, cache: &std::path::Path) {
    let temp = server.path("proxy_temp");
    let done = support::wait_until(Duration::from_secs(10), || {
        walk(&temp).is_empty()
            && walk(cache)
                .iter()
                .all(|p| p.file_name().is_some_and(|n| n.len() == 32))
    });
    assert!(done, "{:?}: entries still being written", server.kind);
}

/// The HTTP date `ahead` seconds from now.
fn http_date(ahead: u64) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + ahead;
    let days = secs / 86_400;
    let (h, m, s) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{weekday}, {d:02} {} {year} {h:02}:{m:02}:{s:02} GMT",
        months[(month - 1) as usize]
    )
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// What a response shows: status, cache status, body, and the fields that matter.
fn observe(r: &support::Response) -> String {
    let page = r.body.starts_with(b"<html>");
    format!(
        "{} {} cl={} etag={} cr={} {:?}",
        r.status,
        r.header("x-cache").unwrap_or("-"),
        match r.header("content-length") {
            Some(_) if page => "(page)",
            Some(n) => n,
            None => "-",
        },
        r.header("etag").unwrap_or("-"),
        r.header("content-range").unwrap_or("-"),
        match String::from_utf8_lossy(&r.body).trim_end() {
            b if b.starts_with("<html>") => "an error page".to_string(),
            b => b.to_string(),
        },
    )
}

/// `kind` on [`CONFIG`] with a cache of its own and an [`upstream`]: the server, the
/// directory the cache is in (as `c`), and what the upstream was asked.
fn start(kind: Kind) -> Option<(Server, TempDir, Seen)> {
    let seen: Seen = Arc::default();
    let up = upstream(seen.clone());
    let cache = TempDir::new("cache");
    let server = Server::start(kind, 2, &config(&cache.path().join("c"), up, dead_port()))?;
    Some((server, cache, seen))
}

fn config(cache: &std::path::Path, up: u16, dead: u16) -> String {
    support::main_config(
        &CONFIG
            .replace("{CACHE}", &cache.display().to_string())
            .replace("{UPSTREAM}", &up.to_string())
            .replace("{DEAD}", &dead.to_string()),
    )
}

fn send(port: u16, method: &str, target: &str, extra: &str) -> support::Response {
    support::request(
        port,
        &format!(
            "{method} {target} HTTP/1.1\r\nHost: localhost\r\n{extra}Connection: close\r\n\r\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{method} {target}: {e}"))
}

#[test]
fn what_is_stored_and_served_is_nginxs() {
    let mut seen_by = Vec::new();
    for kind in kinds() {
        let Some((server, cache, seen)) = start(kind) else {
            continue;
        };
        let port = server.port(0);
        let mut lines = Vec::new();
        let mut step = |method: &str, target: &str, extra: &str| {
            let r = send(port, method, target, extra);
            settle(&server, cache.path());
            lines.push(format!("{method} {target} {extra:?} -> {}", observe(&r)));
            r
        };
        // Stored, then served from the cache.
        for path in ["/a", "/chunked", "/max-age", "/s-maxage", "/expires-future"] {
            step("GET", &format!("/nodefault{path}"), "");
            step("GET", &format!("/nodefault{path}"), "");
        }
        for path in [
            "/chunked",
            "/no-cache",
            "/no-store",
            "/private",
            "/max-age-0",
            "/expires-past",
            "/x-accel-0",
            "/x-accel-first",
            "/x-accel-abs",
            "/cookie",
            "/vary-star",
            "/vary-two",
            "/missing",
            "/broken",
        ] {
            step("GET", path, "");
            step("GET", path, "");
        }
        step("GET", "/any/missing", "");
        step("GET", "/any/missing", "");
        // Variants.
        step("GET", "/vary", "Accept-Encoding: gzip\r\n");
        step("GET", "/vary", "Accept-Encoding: br\r\n");
        step("GET", "/vary", "Accept-Encoding: gzip\r\n");
        step("GET", "/vary", "Accept-Encoding: br\r\n");
        // A HEAD is asked as a GET and fills the entry a GET then finds.
        step("HEAD", "/head", "");
        step("GET", "/head", "");
        step("HEAD", "/headonly/x", "");
        step("HEAD", "/headonly/x", "");
        // Methods, uses, bypass and no_cache.
        step("POST", "/post/p", "Content-Length: 0\r\n");
        step("POST", "/post/p", "Content-Length: 0\r\n");
        step("POST", "/p", "Content-Length: 0\r\n");
        step("POST", "/p", "Content-Length: 0\r\n");
        for _ in 0..3 {
            step("GET", "/twice/t", "");
        }
        step("GET", "/flags/f", "");
        step("GET", "/flags/f?bypass=1", "");
        step("GET", "/flags/f", "");
        step("GET", "/flags/g?nostore=1", "");
        step("GET", "/flags/g", "");
        step("GET", "/flags/g", "");
        step("GET", "/ignore/cookie", "");
        step("GET", "/ignore/cookie", "");
        step("GET", "/off/o", "");
        step("GET", "/off/o", "");
        // A hit answers ranges and conditions itself; the upstream never sees them.
        step(
            "GET",
            "/cond",
            "Range: bytes=0-3\r\nIf-None-Match: \"x\"\r\n",
        );
        step("GET", "/cond", "Range: bytes=0-3\r\n");
        step("GET", "/cond", "If-None-Match: \"v1\"\r\n");
        step(
            "GET",
            "/cond",
            "If-Modified-Since: Mon, 02 Jan 2023 00:00:00 GMT\r\n",
        );
        // Ranges of a response whose upstream takes them: cut by the cache, a HIT's into
        // several parts too.
        let mut ranged = |extra: &str, path: &str| {
            let r = send(port, "GET", path, extra);
            settle(&server, cache.path());
            let names: Vec<&str> = r
                .headers
                .iter()
                .map(|(n, _)| n.as_str())
                .filter(|n| !n.eq_ignore_ascii_case("date"))
                .collect();
            let multipart = r
                .header("content-type")
                .is_some_and(|t| t.starts_with("multipart/byteranges; boundary="));
            // nginx's 416 of a cached response carries the stored fields and its
            // add_header twice; the status, the cache status and the range are compared.
            if r.status == 416 {
                lines.push(format!(
                    "GET {path} {extra:?} -> 416 {:?} {:?}",
                    r.header("x-cache"),
                    r.header("content-range")
                ));
                return;
            }
            let body = if multipart {
                format!(
                    "{} parts, {} bytes",
                    String::from_utf8_lossy(&r.body)
                        .matches("Content-Range: ")
                        .count(),
                    r.body.len()
                )
            } else {
                observe(&r)
            };
            lines.push(format!(
                "GET {path} {extra:?} -> {} {body} {names:?}",
                r.status
            ));
        };
        ranged("Range: bytes=0-9\r\n", "/ar/one");
        ranged("Range: bytes=0-9\r\n", "/ar/one");
        ranged("", "/ar/one");
        ranged("Range: bytes=0-1,5-6\r\n", "/ar/one");
        ranged("Range: bytes=50-60\r\n", "/ar/one");
        ranged("Range: bytes=0-9\r\nIf-Range: \"zzz\"\r\n", "/ar/one");
        ranged("Range: bytes=0-9\r\nIf-Range: \"v1\"\r\n", "/ar/one");
        ranged("Range: bytes=0-1,5-6\r\n", "/ar/two");
        ranged("Range: bytes=15-\r\n", "/ar/two");
        ranged("Range: bytes=-3\r\n", "/ar/two");
        ranged("", "/a?order");
        // proxy_cache_max_range_offset: a range from past it is fetched whole and not
        // stored; one before it, or none, is.
        ranged("Range: bytes=12-14\r\n", "/maxoff/m1");
        ranged("", "/maxoff/m1");
        ranged("Range: bytes=-3\r\n", "/maxoff/m2");
        ranged("Range: bytes=2-4\r\n", "/maxoff/m2");
        ranged("Range: bytes=2-4\r\n", "/maxoff/m2");
        ranged("Range: bytes=15-\r\nIf-None-Match: \"x\"\r\n", "/maxoff/m3");
        ranged("Range: bytes=1-2\r\nIf-None-Match: \"x\"\r\n", "/maxoff/m4");
        // proxy_force_ranges: an upstream's answer without Accept-Ranges, cached or not.
        ranged("", "/force/f");
        ranged("Range: bytes=2-5\r\n", "/force/f");
        ranged("Range: bytes=0-1,5-6\r\n", "/force/f");
        // What the upstream was asked: the client's range and conditions where the response
        // is not to be stored (nginx's `u->cacheable`), none where it is.
        for path in ["/ar/m1", "/ar/m2", "/ar/m3", "/ar/m4"] {
            let heads = seen.lock().unwrap().get(path).cloned().unwrap_or_default();
            for h in heads {
                let asked: Vec<&str> = h
                    .lines()
                    .filter(|l| l.starts_with("Range:") || l.starts_with("If-None-Match:"))
                    .collect();
                lines.push(format!("upstream asked for {path}: {asked:?}"));
            }
        }
        let r = support::request(
            port,
            "HEAD /force/h HTTP/1.1\r\nHost: h\r\nRange: bytes=0-0\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        lines.push(format!(
            "HEAD /force/h Range: bytes=0-0 -> {} {:?} {:?}",
            r.status,
            r.header("content-length"),
            r.header("content-range")
        ));
        // Over HTTP/2 alike.
        for args in [&[][..], &[][..], &["-r", "2-4"][..]] {
            let url = format!("http://127.0.0.1:{}/ar/h2", server.port(1));
            let mut all = vec!["--http2-prior-knowledge"];
            all.extend_from_slice(args);
            if let Some(r) = h2c::curl(&all, &url) {
                settle(&server, cache.path());
                lines.push(format!(
                    "h2 {args:?} -> {} {} {} {:?} {:?}",
                    r.version,
                    r.status,
                    r.header("x-cache").unwrap_or("-"),
                    r.header("content-range"),
                    String::from_utf8_lossy(&r.body)
                ));
            }
        }
        // A compressed answer is the upstream's body, stored as it came: the next client,
        // which takes no gzip, gets it plain.
        for extra in ["Accept-Encoding: gzip\r\n", "", "Accept-Encoding: gzip\r\n"] {
            let r = send(port, "GET", "/gz/chunked", extra);
            settle(&server, cache.path());
            let body = match r.header("content-encoding") {
                Some("gzip") => {
                    let mut plain = String::new();
                    let _ = flate2::read::GzDecoder::new(&r.body[..]).read_to_string(&mut plain);
                    format!("gzip of {plain:?}")
                }
                _ => format!("{:?}", String::from_utf8_lossy(&r.body)),
            };
            lines.push(format!(
                "GET /gz/chunked {extra:?} -> {} {} {body}",
                r.status,
                r.header("x-cache").unwrap_or("-")
            ));
        }
        let asked = seen
            .lock()
            .unwrap()
            .get("/cond")
            .cloned()
            .unwrap_or_default();
        let passed: Vec<String> = asked
            .iter()
            .flat_map(|h| h.lines().map(str::to_string).collect::<Vec<_>>())
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                l.starts_with("range") || l.starts_with("if-")
            })
            .collect();
        lines.push(format!(
            "/cond asked {} times, with {passed:?}",
            asked.len()
        ));
        for path in ["/head", "/headonly/x"] {
            let methods: Vec<String> = seen
                .lock()
                .unwrap()
                .get(path)
                .map(|l| {
                    l.iter()
                        .map(|h| h.split(' ').next().unwrap_or("").to_string())
                        .collect()
                })
                .unwrap_or_default();
            lines.push(format!("{path} asked with {methods:?}"));
        }
        let logged = support::read_lossy(&server.path("cache.log"));
        lines.push(format!(
            "log: {}",
            logged.lines().take(6).collect::<Vec<_>>().join(" | ")
        ));
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                "GET /nodefault/a \"\" -> 200 MISS cl=16 etag=\"v1\" cr=- \"/nodefault/a #2\"",
                    "GET /nodefault/max-age \"\" -> 200 HIT cl=22 etag=\"v1\" cr=- \"/nodefault/max-age #1\"",
                    "GET /chunked \"\" -> 200 HIT cl=- etag=\"v1\" cr=- \"/chunked #1\"",
                    "GET /cond \"If-None-Match: \\\"v1\\\"\\r\\n\" -> 304 HIT cl=- etag=\"v1\" cr=- \"\"",
                    "GET /cookie \"\" -> 200 MISS cl=11 etag=\"v1\" cr=- \"/cookie #2\"",
                    "GET /vary \"Accept-Encoding: br\\r\\n\" -> 200 HIT cl=9 etag=\"v1\" cr=- \"/vary #2\"",
                    "GET /twice/t \"\" -> 200 HIT cl=12 etag=\"v1\" cr=- \"/twice/t #2\"",
                    "/head asked with [\"GET\"]",
                    "GET /vary-two \"\" -> 200 MISS cl=13 etag=\"v1\" cr=- \"/vary-two #2\"",
                    "GET /gz/chunked \"\" -> 200 HIT \"/gz/chunked #1\\n\"",
                    "GET /ar/one \"Range: bytes=0-9\\r\\n\" -> 206 206 MISS cl=10 etag=\"v1\" cr=bytes 0-9/20 \"0123456789\"",
                    "GET /ar/one \"Range: bytes=0-9\\r\\n\" -> 206 206 HIT cl=10",
                    "GET /ar/one \"Range: bytes=0-1,5-6\\r\\n\" -> 206 2 parts",
                    "GET /ar/one \"Range: bytes=50-60\\r\\n\" -> 416 Some(\"HIT\") Some(\"bytes */20\")",
                    "GET /ar/two \"Range: bytes=0-1,5-6\\r\\n\" -> 200 200 MISS cl=20",
                    "h2 [\"-r\", \"2-4\"] -> 2 206 HIT Some(\"bytes 2-4/20\") \"234\"",
                "GET /force/f \"Range: bytes=2-5\\r\\n\" -> 206 206 - cl=4",
                ],
            );
        }
        seen_by.push((kind, lines));
    }
    support::compare(&seen_by);
}

#[test]
fn an_expired_entry_is_revalidated_or_served_stale() {
    let mut seen_by = Vec::new();
    for kind in kinds() {
        let Some((server, cache, seen)) = start(kind) else {
            continue;
        };
        let port = server.port(0);
        let mut lines = Vec::new();
        let mut step = |target: &str| {
            let r = send(port, "GET", target, "");
            settle(&server, cache.path());
            lines.push(format!("{target} -> {}", observe(&r)));
        };
        step("/short/k");
        step("/revalidate/validated");
        step("/reval2/expiring");
        step("/gone/x?k=k");
        step("/short/k");
        step("/revalidate/validated");
        // Past the second they are valid for (a time, so a wait).
        std::thread::sleep(Duration::from_millis(2100));
        step("/gone/x?k=k");
        step("/gone-strict/x?k=k");
        // An upstream's 500 with `proxy_cache_use_stale http_500`.
        step("/stale500/broken?k=k");
        step("/revalidate/validated");
        step("/revalidate/validated");
        // Revalidated without a time to be fresh for: sent all the same, still expired.
        step("/reval2/expiring");
        step("/short/k");
        let asked: Vec<String> = seen
            .lock()
            .unwrap()
            .get("/revalidate/validated")
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|h| {
                h.lines()
                    .filter(|l| l.starts_with("If-"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .collect();
        lines.push(format!("revalidations asked: {asked:?}"));
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "/gone/x?k=k -> 200 STALE",
                    "/gone-strict/x?k=k -> 502",
                    "/stale500/broken?k=k -> 200 STALE",
                    "/revalidate/validated -> 200 REVALIDATED",
                    "/reval2/expiring -> 200 REVALIDATED",
                    "/short/k -> 200 EXPIRED",
                ],
            );
        }
        seen_by.push((kind, lines));
    }
    support::compare(&seen_by);
}

/// The entry of `key` in a `levels=1:2` cache under `dir`, as nginx names it.
fn entry_path(dir: &std::path::Path, key: &str) -> std::path::PathBuf {
    use md5::{Digest, Md5};
    let name: String = Md5::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join(&name[31..]).join(&name[29..31]).join(&name)
}

#[test]
fn the_cache_is_nginxs_on_disk_and_outlives_a_restart() {
    for kind in kinds() {
        let seen: Seen = Arc::default();
        let up = upstream(seen.clone());
        let cache = TempDir::new("cache");
        let cache_dir = cache.path().join("c");
        let conf = config(&cache_dir, up, dead_port());
        let Some(mut server) = Server::start(kind, 2, &conf) else {
            continue;
        };
        let r = send(server.port(0), "GET", "/kept?x=1", "");
        assert_eq!(r.header("x-cache"), Some("MISS"), "{kind:?}");
        // nginx's default key: the URL the request went to.
        let file = entry_path(&cache_dir, &format!("http://127.0.0.1:{up}/kept?x=1"));
        // nginx renames the entry into its place after the response went out.
        assert!(
            support::wait_until(Duration::from_secs(5), || file.exists()),
            "{kind:?}: no entry at {}: {:?}",
            file.display(),
            walk(&cache_dir)
                .iter()
                .map(
                    |p| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()[336..400])
                        .to_string()
                )
                .collect::<Vec<_>>()
        );
        let stored = std::fs::read(&file).unwrap();
        let text = String::from_utf8_lossy(&stored);
        assert!(
            text.contains(&format!("\nKEY: http://127.0.0.1:{up}/kept?x=1\n")),
            "{kind:?}: {text:?}"
        );
        assert!(text.ends_with("/kept #1\n"), "{kind:?}: {text:?}");
        server.stop();
        // A new server on the same directory finds the entry.
        let Some(again) = Server::start(kind, 2, &conf) else {
            continue;
        };
        let r = send(again.port(0), "GET", "/kept?x=1", "");
        assert_eq!(
            (r.header("x-cache"), r.body_text().as_str()),
            (Some("HIT"), "/kept #1\n"),
            "{kind:?}"
        );
        assert_eq!(seen.lock().unwrap().get("/kept").map(Vec::len), Some(1));
        // `inactive=1s`: the manager removes what was not used for a second.
        let r = send(again.port(0), "GET", "/inactive/i", "");
        assert_eq!(r.header("x-cache"), Some("MISS"), "{kind:?}");
        let short = cache.path().join("c-short");
        let count = || {
            walk(&short)
                .iter()
                .filter(|p| p.file_name().is_some_and(|n| n.len() == 32))
                .count()
        };
        assert!(
            support::wait_until(Duration::from_secs(5), || count() == 1),
            "{kind:?}: no entry for /inactive/i"
        );
        assert!(
            support::wait_until(Duration::from_secs(15), || count() == 0),
            "{kind:?}: the inactive entry stays"
        );
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(list) = std::fs::read_dir(dir) {
        for e in list.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn a_kill_in_mid_write_never_leaves_a_truncated_entry() {
    // An upstream that sends half of a body it announced whole, then waits.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap().port();
    let (half_sent, wait_half) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut s) = stream else { continue };
            let half_sent = half_sent.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let body = "x".repeat(100_000);
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                let _ = s.write_all(head.as_bytes());
                if n == 0 {
                    let _ = s.write_all(&body.as_bytes()[..50_000]);
                    let _ = half_sent.send(());
                    std::thread::sleep(Duration::from_secs(30));
                } else {
                    let _ = s.write_all(body.as_bytes());
                }
            });
        }
    });
    let cache = TempDir::new("cache");
    let cache_dir = cache.path().join("c");
    let conf = config(&cache_dir, up, dead_port());
    let Some(mut server) = Server::start(Kind::Portcullis, 2, &conf) else {
        return;
    };
    let port = server.port(0);
    let client = std::thread::spawn(move || support::get(port, "/big"));
    wait_half.recv_timeout(Duration::from_secs(10)).unwrap();
    // The temporary file holds part of the body when the server dies.
    assert!(support::wait_until(Duration::from_secs(10), || {
        walk(&cache_dir)
            .iter()
            .any(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 40_000))
    }));
    server.signal(libc::SIGKILL);
    let _ = server.wait_exit(Duration::from_secs(10));
    let _ = client.join();
    let Some(again) = Server::start(Kind::Portcullis, 2, &conf) else {
        return;
    };
    let r = support::get(again.port(0), "/big").unwrap();
    assert_eq!(r.header("x-cache"), Some("MISS"));
    assert_eq!(r.body.len(), 100_000);
    let r = support::get(again.port(0), "/big").unwrap();
    assert_eq!((r.header("x-cache"), r.body.len()), (Some("HIT"), 100_000));
    // What the kill left is removed; only whole entries remain.
    assert!(support::wait_until(Duration::from_secs(10), || {
        walk(&cache_dir)
            .iter()
            .all(|p| p.file_name().is_some_and(|n| n.len() == 32))
    }));
}

#[test]
fn bad_cache_directives_are_refused_with_their_line() {
    let dir = TempDir::new("cache-conf");
    let c = dir.path().display().to_string();
    let zone = format!("proxy_cache_path {c}/c keys_zone=z:1m;");
    for (http, line, want, at) in [
        (
            zone.as_str(),
            "proxy_cache nosuch;",
            "\"proxy_cache\" zone \"nosuch\" is unknown",
            6,
        ),
        (
            &zone,
            "proxy_cache_valid abc;",
            "invalid time value \"abc\"",
            6,
        ),
        (
            &zone,
            "proxy_cache_valid 99 1m;",
            "invalid status \"99\"",
            6,
        ),
        (
            &zone,
            "proxy_cache_use_stale error foo;",
            "invalid value \"foo\"",
            6,
        ),
        (
            &zone,
            "proxy_cache_methods PUT;",
            "invalid value \"PUT\"",
            6,
        ),
        (
            &format!("proxy_cache_path {c}/c levels=1:3 keys_zone=z:1m;"),
            "",
            "invalid \"levels\" \"levels=1:3\"",
            3,
        ),
        (
            &format!("proxy_cache_path {c}/c levels=1:2;"),
            "",
            "\"proxy_cache_path\" must have \"keys_zone\" parameter",
            3,
        ),
        (
            &format!("proxy_cache_path {c}/c keys_zone=z:1m inactive=xyz;"),
            "",
            "invalid inactive value \"inactive=xyz\"",
            3,
        ),
        (
            &format!("{zone} proxy_cache_path {c}/c keys_zone=y:1m;"),
            "",
            &format!("the same path name \"{c}/c\" used in {c}/bad.conf:3 and in {c}/bad.conf:3"),
            3,
        ),
        (
            &format!("{zone} proxy_cache_path {c}/d keys_zone=z:1m;"),
            "",
            "duplicate zone \"z\"",
            3,
        ),
        // One list of directories and of zone names for every module.
        (
            &format!("{zone} fastcgi_cache_path {c}/c keys_zone=f:1m;"),
            "",
            &format!("the same path name \"{c}/c\" used in {c}/bad.conf:3 and in {c}/bad.conf:3"),
            3,
        ),
        (
            &format!("{zone} fastcgi_cache_path {c}/f keys_zone=z:1m;"),
            "",
            "the shared memory zone \"z\" is already declared for a different use",
            3,
        ),
        (
            &format!("limit_req_zone $binary_remote_addr zone=z:1m rate=1r/s; {zone}"),
            "",
            "the shared memory zone \"z\" is already declared for a different use",
            3,
        ),
    ] {
        let conf = dir.write(
            "bad.conf",
            format!(
                "events {{}}\nhttp {{ access_log off;\n {http}\n server {{\n  location / {{\n   {line}\n  }}\n }}\n}}\n"
            ),
        );
        for kind in kinds() {
            let Some(bin) = kind.binary() else { continue };
            let out = support::test_config(std::process::Command::new(bin), dir.path(), &conf);
            let text = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{kind:?} {line}: {text}");
            assert!(text.contains(want), "{kind:?} {http} {line}: {text}");
            // nginx names the end of the http block for an unknown zone; portcullis names
            // the line.
            let at = if kind == Kind::Portcullis || !line.contains("nosuch") {
                format!("bad.conf:{at}")
            } else {
                "bad.conf:".to_string()
            };
            assert!(text.contains(&at), "{kind:?} {line}: {text}");
        }
    }
}

#[test]
fn a_cache_nginx_wrote_is_read_and_the_other_way_round() {
    if kinds().len() < 2 {
        support::skip("needs nginx to write a cache");
        return;
    }
    let seen: Seen = Arc::default();
    let up = upstream(seen.clone());
    let cache = TempDir::new("cache");
    let conf = config(&cache.path().join("c"), up, dead_port());
    let mut writer = Kind::Nginx;
    for (path, reader) in [("/by-nginx", Kind::Portcullis), ("/by-us", Kind::Nginx)] {
        let mut w = Server::start(writer, 2, &conf).expect("writer");
        let r = send(w.port(0), "GET", path, "Accept-Encoding: gzip\r\n");
        assert_eq!(r.header("x-cache"), Some("MISS"), "{writer:?} {path}");
        let vary = format!("{path}/vary");
        send(w.port(0), "GET", &vary, "Accept-Encoding: gzip\r\n");
        send(w.port(0), "GET", &vary, "Accept-Encoding: br\r\n");
        // The writer renames an entry into place once the response went out.
        assert!(support::wait_until(Duration::from_secs(5), || {
            walk(&cache.path().join("c"))
                .iter()
                .filter(|p| p.file_name().is_some_and(|n| n.len() == 32))
                .count()
                >= 3
        }));
        w.stop();
        let r2 = Server::start(reader, 2, &conf).expect("reader");
        for (target, extra, body) in [
            (path.to_string(), "", format!("{path} #1")),
            (
                vary.clone(),
                "Accept-Encoding: gzip\r\n",
                format!("{vary} #1"),
            ),
            (
                vary.clone(),
                "Accept-Encoding: br\r\n",
                format!("{vary} #2"),
            ),
        ] {
            let r = send(r2.port(0), "GET", &target, extra);
            assert_eq!(
                (r.header("x-cache"), r.body_text().trim_end()),
                (Some("HIT"), body.as_str()),
                "{reader:?} reading {writer:?}'s {target} {extra:?}"
            );
        }
        writer = reader;
    }
}

const WAITING: &str = r#"
    log_format cache '$request_uri $upstream_cache_status';
    access_log {PREFIX}/cache.log cache;
    proxy_temp_path {PREFIX}/proxy_temp;
    proxy_cache_path {CACHE} levels=1:2 keys_zone=z:1m;
    server {
        listen 127.0.0.1:{PORT0};
        add_header X-Cache $upstream_cache_status always;
        proxy_cache z;
        proxy_cache_valid 200 1m;
        location /upd/ {
            proxy_cache_valid 200 1s;
            proxy_cache_use_stale updating;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /bg/ {
            proxy_cache_valid 200 1s;
            proxy_cache_use_stale updating;
            proxy_cache_background_update on;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /lock/ {
            proxy_cache_lock on;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
        location /lockt/ {
            proxy_cache_lock on;
            proxy_cache_lock_timeout 1s;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
    }
"#;

/// An upstream that holds the answers to some requests until `gate` opens, and reports
/// every request it gets on `arrived` as "path #n".
fn held_upstream(
    gate: Arc<(Mutex<bool>, std::sync::Condvar)>,
    arrived: std::sync::mpsc::Sender<String>,
) -> u16 {
    let arrived = Mutex::new(arrived);
    let counts: Mutex<HashMap<String, usize>> = Mutex::default();
    head_upstream(move |_, head| {
        let text = String::from_utf8_lossy(head).to_string();
        let path = text.split_whitespace().nth(1).unwrap_or("").to_string();
        let n = {
            let mut c = counts.lock().unwrap();
            let n = c.entry(path.clone()).or_default();
            *n += 1;
            *n
        };
        let _ = arrived.lock().unwrap().send(format!("{path} #{n}"));
        // The first fill of /upd/ and /bg/ is at once, their update held; the first
        // request of /lock/ and /lockt/ is held.
        let held = match path.split('/').nth(1).unwrap_or("") {
            "upd" => n >= 2,
            "lock" | "lockt" => n == 1,
            _ => false,
        };
        if held {
            let (open, cv) = &*gate;
            let mut o = open.lock().unwrap();
            while !*o {
                o = cv.wait(o).unwrap();
            }
        }
        let body = format!("{path} #{n}\n");
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    })
}

#[test]
fn one_request_updates_an_entry_while_the_others_wait_or_serve_it_stale() {
    let mut seen_by = Vec::new();
    for kind in kinds() {
        let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let (tx, arrived) = std::sync::mpsc::channel();
        let up = held_upstream(gate.clone(), tx);
        let cache = TempDir::new("cache");
        let conf = support::main_config(
            &WAITING
                .replace("{CACHE}", &cache.path().join("c").display().to_string())
                .replace("{UPSTREAM}", &up.to_string()),
        );
        let Some(server) = Server::start(kind, 1, &conf) else {
            continue;
        };
        let port = server.port(0);
        let open = |open: bool| {
            let (o, cv) = &*gate;
            *o.lock().unwrap() = open;
            cv.notify_all();
        };
        let next = || arrived.recv_timeout(Duration::from_secs(10)).unwrap();
        let mut lines = Vec::new();
        let get = |path: &str| {
            let r = observe(&send(port, "GET", path, ""));
            settle(&server, cache.path());
            r
        };
        // Fill, then let the entries expire (a time, so a wait).
        lines.push(format!("fill: {}", get("/upd/held")));
        lines.push(format!("fill: {}", get("/bg/x")));
        next();
        next();
        std::thread::sleep(Duration::from_millis(2100));
        // `updating`: while one request updates the entry, another gets it stale.
        let updating = std::thread::spawn(move || observe(&send(port, "GET", "/upd/held", "")));
        lines.push(format!("upstream got {}", next()));
        lines.push(format!("meanwhile: {}", get("/upd/held")));
        open(true);
        lines.push(format!("the update: {}", updating.join().unwrap()));
        settle(&server, cache.path());
        lines.push(format!("after: {}", get("/upd/held")));
        open(false);
        // The background update: the stale entry at once, the update before the next
        // request of the connection.
        let mut c = support::Client::connect(port);
        for _ in 0..2 {
            c.send(b"GET /bg/x HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .unwrap();
            lines.push(format!(
                "keepalive: {}",
                observe(&c.read_response(false).unwrap())
            ));
        }
        lines.push(format!("upstream got {}", next()));
        // `proxy_cache_lock`: the second request waits for the first to fill the entry.
        let first = std::thread::spawn(move || observe(&send(port, "GET", "/lock/held", "")));
        lines.push(format!("upstream got {}", next()));
        let second = std::thread::spawn(move || observe(&send(port, "GET", "/lock/held", "")));
        // The second request is at the server, waiting (no signal shows that).
        std::thread::sleep(Duration::from_millis(300));
        open(true);
        lines.push(format!("first: {}", first.join().unwrap()));
        lines.push(format!("second: {}", second.join().unwrap()));
        open(false);
        // Past proxy_cache_lock_timeout the waiting request asks the upstream itself, and
        // its answer is not stored.
        let first = std::thread::spawn(move || observe(&send(port, "GET", "/lockt/held", "")));
        lines.push(format!("upstream got {}", next()));
        lines.push(format!("second: {}", get("/lockt/held")));
        lines.push(format!("upstream got {}", next()));
        open(true);
        lines.push(format!("first: {}", first.join().unwrap()));
        settle(&server, cache.path());
        lines.push(format!("third: {}", get("/lockt/held")));
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "meanwhile: 200 UPDATING cl=13 etag=- cr=- \"/upd/held #1\"",
                    "after: 200 HIT cl=13 etag=- cr=- \"/upd/held #2\"",
                    "keepalive: 200 STALE cl=9 etag=- cr=- \"/bg/x #1\"",
                    "keepalive: 200 HIT cl=9 etag=- cr=- \"/bg/x #2\"",
                    "second: 200 HIT cl=14 etag=- cr=- \"/lock/held #1\"",
                    "second: 200 MISS cl=15 etag=- cr=- \"/lockt/held #2\"",
                    "third: 200 HIT cl=15 etag=- cr=- \"/lockt/held #1\"",
                ],
            );
        }
        seen_by.push((kind, lines));
    }
    support::compare(&seen_by);
}

/// The cache is one for every worker, and a reload keeps it: what one worker stored, the
/// others serve, before and after the configuration is read again.
#[test]
fn every_worker_serves_the_cache_and_a_reload_keeps_it() {
    let mut seen_by = Vec::new();
    for kind in kinds() {
        let seen: Seen = Arc::default();
        let up = upstream(seen.clone());
        let cache = TempDir::new("cache");
        let conf = |version: &str| {
            config(&cache.path().join("c"), up, dead_port())
                .replace("worker_processes 1;", "worker_processes 2;")
                .replace(
                    "location /nodefault/ {",
                    &format!("location = /version {{ return 200 {version}; }}\n        location /nodefault/ {{"),
                )
        };
        let Some(server) = Server::start(kind, 2, &conf("v1")) else {
            continue;
        };
        let port = server.port(0);
        let mut lines = Vec::new();
        let first = send(port, "GET", "/shared", "");
        settle(&server, cache.path());
        lines.push(format!("first -> {}", observe(&first)));
        // New connections, which the kernel spreads over both workers.
        let hits = (0..16)
            .filter(|_| send(port, "GET", "/shared", "").header("x-cache") == Some("HIT"))
            .count();
        lines.push(format!("hits of 16: {hits}"));
        server.write_config(&conf("v2"));
        server.signal(libc::SIGHUP);
        let reloaded = support::wait_until(Duration::from_secs(10), || {
            support::get(port, "/version").is_ok_and(|r| r.body_text() == "v2")
        });
        assert!(reloaded, "{kind:?}: no reload\n{}", server.error_log());
        let after = (0..8)
            .filter(|_| send(port, "GET", "/shared", "").header("x-cache") == Some("HIT"))
            .count();
        lines.push(format!("hits of 8 after a reload: {after}"));
        let asked = seen.lock().unwrap().get("/shared").map_or(0, Vec::len);
        lines.push(format!("the upstream was asked {asked} time(s)"));
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "hits of 16: 16",
                    "hits of 8 after a reload: 8",
                    "the upstream was asked 1 time(s)",
                ],
            );
        }
        seen_by.push((kind, lines));
    }
    support::compare(&seen_by);
}

/// `max_size`: the cache is trimmed to it in the background, least recently used first,
/// each entry counting as the file system blocks it takes.
#[test]
fn the_cache_is_trimmed_to_max_size() {
    let mut seen_by = Vec::new();
    for kind in kinds() {
        let seen: Seen = Arc::default();
        let up = upstream(seen.clone());
        let cache = TempDir::new("cache");
        let dir = cache.path().join("small");
        let http = format!(
            "proxy_temp_path {{PREFIX}}/proxy_temp;\n\
             proxy_cache_path {} levels=1:2 keys_zone=small:1m max_size=40k;\n\
             server {{\n\
                 listen 127.0.0.1:{{PORT0}};\n\
                 add_header X-Cache $upstream_cache_status;\n\
                 location / {{ proxy_cache small; proxy_cache_valid 200 1h; proxy_pass http://127.0.0.1:{up}; }}\n\
             }}\n",
            dir.display()
        );
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let port = server.port(0);
        for i in 0..30 {
            send(port, "GET", &format!("/e{i}"), "");
            settle(&server, &dir);
        }
        // Each entry is one 4 KB block: at most ten stay.
        let trimmed = support::wait_until(Duration::from_secs(20), || walk(&dir).len() <= 10);
        let left = walk(&dir).len();
        // The newest entries are the ones kept.
        let newest_kept = send(port, "GET", "/e29", "").header("x-cache") == Some("HIT");
        let oldest_gone = send(port, "GET", "/e0", "").header("x-cache") == Some("MISS");
        let lines = vec![format!(
            "trimmed: {trimmed}, at least 8 left: {}, newest kept: {newest_kept}, oldest gone: {oldest_gone}",
            left >= 8
        )];
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &["trimmed: true, at least 8 left: true, newest kept: true, oldest gone: true"],
            );
        }
        seen_by.push((kind, lines));
    }
    support::compare(&seen_by);
}
