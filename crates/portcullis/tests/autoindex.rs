//! `autoindex`, compared with nginx on the same configuration and the same directory: the
//! HTML listing to the byte (long names cut, names escaped, directories first, exact and
//! rounded sizes, local time), JSON, JSONP (and a bad callback), XML, hidden files left
//! out, symbolic links as nginx reads them, HEAD, a missing directory, a directory with an
//! index file, `autoindex off`, and a listing compressed by `gzip`.

mod support;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use support::{kinds, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        root {PREFIX}/html;
        autoindex on;
        location /rounded/ { autoindex_exact_size off; alias {PREFIX}/html/; }
        location /local/ { autoindex_localtime on; alias {PREFIX}/html/; }
        location /json/ { autoindex_format json; alias {PREFIX}/html/; }
        location /jsonp/ { autoindex_format jsonp; alias {PREFIX}/html/; }
        location /xml/ { autoindex_format xml; alias {PREFIX}/html/; }
        location /off/ { autoindex off; alias {PREFIX}/html/; }
        location /gz/ { gzip on; gzip_min_length 1; alias {PREFIX}/html/; }
    }
"#;

/// Sets the times of `path` itself (not what a link points to).
fn set_mtime(path: &Path, secs: i64) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let t = libc::timespec {
        tv_sec: secs,
        tv_nsec: 0,
    };
    // SAFETY: `c` is a NUL-terminated path and `times` two valid timespecs for the call.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            [t, t].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(rc, 0, "utimensat {}", path.display());
}

/// The same tree in every server's prefix, with the same times.
fn make_tree(html: &Path) {
    let _ = std::fs::create_dir_all(html.join("sub dir"));
    std::fs::create_dir_all(html.join("with-index")).unwrap();
    std::fs::write(html.join("with-index/index.html"), "index\n").unwrap();
    std::fs::create_dir_all(html.join("empty")).unwrap();
    let files: &[(&str, usize)] = &[
        ("small.txt", 5),
        ("ten-thousand.bin", 10_000),
        ("eleven-k.bin", 11 * 1024 + 600),
        ("two-megs.bin", 2 * 1024 * 1024 + 700_000),
        ("a&b<c>\"d\".txt", 7),
        ("with space %and% percent.txt", 3),
        ("a-name-that-is-exactly-fifty-characters-long-x.txt", 1),
        (
            "a-name-that-is-much-longer-than-the-fifty-columns-nginx-shows.txt",
            2,
        ),
        (
            "<escaped> and also a name that is longer than fifty columns.txt",
            2,
        ),
        ("café.txt", 4),
        (".hidden", 1),
        ("B-upper.txt", 1),
    ];
    for (name, len) in files {
        std::fs::write(html.join(name), vec![b'x'; *len]).unwrap();
    }
    let _ = std::os::unix::fs::symlink("sub dir", html.join("link-to-dir"));
    let _ = std::os::unix::fs::symlink("nowhere", html.join("broken-link"));
    let mut t = 1_700_000_000;
    let mut names: Vec<_> = std::fs::read_dir(html)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for p in names {
        set_mtime(&p, t);
        t += 3_600 * 25 + 61;
    }
    set_mtime(&html.join("sub dir"), 1_600_000_000);
    set_mtime(&html.join("empty"), 1_600_000_000);
}

#[test]
fn autoindex_lists_as_nginx_lists() {
    let mut seen = Vec::new();
    for kind in kinds() {
        // A zone east of UTC, so that local times show (nginx keeps TZ from its environment).
        let config = support::main_config(CONFIG);
        let Some(server) = Server::start_with_env(kind, 1, &config, &[("TZ", "XYZ-5:30")]) else {
            continue;
        };
        make_tree(&server.path("html"));
        let port = server.port(0);
        let mut answers = Vec::new();
        let long_callback = format!("/jsonp/?callback={}", "a".repeat(129));
        for (method, path, extra) in [
            ("GET", "/", ""),
            ("GET", "/sub%20dir/", ""),
            ("GET", "/empty/", ""),
            ("GET", "/with-index/", ""),
            ("GET", "/missing/", ""),
            ("HEAD", "/", ""),
            ("POST", "/", "Content-Length: 0\r\n"),
            ("GET", "/rounded/", ""),
            ("GET", "/local/", ""),
            ("GET", "/json/", ""),
            ("GET", "/jsonp/?callback=show.list_1", ""),
            ("GET", "/jsonp/", ""),
            ("GET", "/jsonp/?callback=alert(1)", ""),
            ("GET", &long_callback, ""),
            ("GET", "/xml/", ""),
            ("GET", "/off/", ""),
            ("GET", "/gz/", "Accept-Encoding: gzip\r\n"),
        ] {
            let raw = format!(
                "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{extra}Connection: close\r\n\r\n"
            );
            let r = support::request(port, &raw).unwrap();
            let body = match r.status {
                // A built-in error page differs in the server's name.
                400.. => "an error page".to_string(),
                _ if r.header("content-encoding") == Some("gzip") => {
                    let mut out = Vec::new();
                    std::io::Read::read_to_end(
                        &mut flate2::read::GzDecoder::new(&r.body[..]),
                        &mut out,
                    )
                    .unwrap();
                    format!("gzip of {}", String::from_utf8_lossy(&out))
                }
                _ => r.body_text(),
            };
            let length = match r.status {
                400.. => "-",
                _ => r.header("content-length").unwrap_or("-"),
            };
            answers.push(format!(
                "{method} {path} -> {} type={} length={length} te={} ce={}\n{body}",
                r.status,
                r.header("content-type").unwrap_or("-"),
                r.header("transfer-encoding").unwrap_or("-"),
                r.header("content-encoding").unwrap_or("-"),
            ));
        }
        assert!(
            answers[0].contains("<a href=\"sub%20dir/\">sub dir/</a>"),
            "{kind}: {}",
            answers[0]
        );
        // The local listing is the UTC one moved by the zone's offset.
        let local = answers
            .iter()
            .find(|a| a.starts_with("GET /local/ "))
            .unwrap();
        let utc = answers[0].split_once('\n').unwrap().1;
        assert_ne!(
            local.split_once('\n').unwrap().1,
            utc,
            "{kind}: no local time"
        );
        seen.push((kind, answers));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}
