//! `secure_link`, `secure_link_md5` and `secure_link_secret`, compared with nginx on the same
//! configuration and links: a valid link, one expired, one not yet, a wrong or malformed
//! hash, and the old way's `/prefix/<md5>/<link>`.

mod support;

use base64::Engine as _;
use md5::{Digest, Md5};
use support::{kinds, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        root {PREFIX}/www;
        location /plain/ {
            secure_link $arg_md5;
            secure_link_md5 "$uri$remote_addr secret";
            if ($secure_link = "") { return 403; }
        }
        location /timed/ {
            secure_link $arg_md5,$arg_expires;
            secure_link_md5 "$secure_link_expires$uri$remote_addr secret";
            add_header X-Expires "[$secure_link_expires]" always;
            if ($secure_link = "") { return 403; }
            if ($secure_link = "0") { return 410; }
        }
        location /p/ {
            secure_link_secret word;
            if ($secure_link = "") { return 403; }
            rewrite ^ /files/$secure_link break;
        }
    }
"#;

fn hash(text: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Md5::digest(text.as_bytes()))
}

#[test]
fn secure_links_are_checked_as_nginx_checks_them() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (future, past) = (now + 3600, now - 3600);
    let old = format!("{:x}", Md5::digest(b"doc.txtword"));
    let paths = [
        format!("/plain/f?md5={}", hash("/plain/f127.0.0.1 secret")),
        format!("/plain/f?md5={}", hash("/plain/g127.0.0.1 secret")),
        "/plain/f?md5=not-base64!".to_string(),
        "/plain/f".to_string(),
        format!(
            "/timed/f?md5={}&expires={future}",
            hash(&format!("{future}/timed/f127.0.0.1 secret"))
        ),
        format!(
            "/timed/f?md5={}&expires={past}",
            hash(&format!("{past}/timed/f127.0.0.1 secret"))
        ),
        format!(
            "/timed/f?md5={}&expires=soon",
            hash("soon/timed/f127.0.0.1 secret")
        ),
        format!("/p/{old}/doc.txt"),
        format!("/p/{}/doc.txt", "0".repeat(32)),
        "/p/short/doc.txt".to_string(),
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(CONFIG)) else {
            continue;
        };
        for file in ["www/plain/f", "www/timed/f", "www/files/doc.txt"] {
            let path = server.path(file);
            std::fs::create_dir_all(path.parent().unwrap()).expect("mkdir");
            std::fs::write(path, "content\n").expect("write");
        }
        let mut got = Vec::new();
        for path in &paths {
            let r = support::get(server.port(0), path).expect("GET");
            got.push(format!(
                "{path} -> {} {}",
                r.status,
                r.header("x-expires").unwrap_or("-")
            ));
        }
        let status = |i: usize| got[i].split(" -> ").nth(1).unwrap().to_string();
        assert!(status(0).starts_with("200"), "{kind}: {}", got[0]);
        assert!(status(1).starts_with("403"), "{kind}: {}", got[1]);
        assert!(
            status(4).starts_with(&format!("200 [{future}]")),
            "{kind}: {}",
            got[4]
        );
        assert!(status(5).starts_with("410"), "{kind}: {}", got[5]);
        assert!(status(7).starts_with("200"), "{kind}: {}", got[7]);
        assert!(status(8).starts_with("403"), "{kind}: {}", got[8]);
        seen.push((kind, got));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}
