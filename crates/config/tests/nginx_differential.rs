//! Differential test: mutated configurations are checked by `nginx -t` and by `load`, and
//! every syntax or directive-table error nginx reports must come out of `load` word for word,
//! at the same line. Skipped when no nginx binary is installed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use portcullis_config::{load, LoadOptions};

const NGINX: &str = "/usr/sbin/nginx";

/// How many mutated configurations to compare; each costs one `nginx -t`.
const CASES: usize = 150;

/// nginx messages that come from the parts nginx shares with this crate: tokenizer, the
/// directive table, and the structural checks. Other errors (unknown variables, bad
/// regexes, listen parameters) belong to later stages and are not compared.
const COMPARED: &[&str] = &[
    "unexpected",
    "unknown directive",
    "is not allowed here",
    "invalid number of arguments",
    "is not terminated by",
    "has no opening",
    "is duplicate",
    "it must be \"on\" or \"off\"",
    "no \"events\" section",
    "too long parameter",
    "invalid location modifier",
    "cannot be inside",
    "is outside location",
    "can be on the server level only",
    "duplicate upstream",
    "invalid method",
    "invalid number of the map parameters",
    "invalid condition",
];

fn base(dir: &Path) -> String {
    format!(
        r#"pid {dir}/nginx.pid;
worker_processes 1;
events {{
    worker_connections 64;
    multi_accept off;
}}
http {{
    types {{
        text/html html htm;
        image/png png;
    }}
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    keepalive_timeout 65;
    map $uri $mapped {{
        default 0;
        ~^/a 1;
        "/b c" 2;
    }}
    upstream backend {{
        least_conn;
        server 127.0.0.1:9001 weight=2;
        server 127.0.0.1:9002;
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:8089;
        server_name example.com 'www.example.com';
        root /tmp;
        if ($request_method = POST) {{
            return 405;
        }}
        location ~ "^/api/(v{{1,2}})/(.*)$" {{
            limit_except GET {{
                deny all;
            }}
            set $up backend;
            rewrite ^/api/(.*)$ /new/$1 last;
        }}
        location /new {{
            internal;
            proxy_pass http://$up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-A "a\"b";
        }}
        location / {{
            index index.html;
            add_header X-B '1 2' always;
            if ($http_x = "y") {{
                return 302 /x;
            }}
            try_files $uri $uri/ =404;
        }}
        location @named {{
            return 200 "ok\n";
        }}
    }}
}}
"#,
        dir = dir.display()
    )
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// nginx's first `[emerg]` message, without its log prefix, or `None` if the test passed.
fn nginx_check(dir: &Path, conf: &Path) -> Option<String> {
    let out = Command::new(NGINX)
        .arg("-p")
        .arg(dir)
        .arg("-e")
        .arg(dir.join("error.log"))
        .arg("-c")
        .arg(conf)
        .arg("-t")
        .output()
        .expect("run nginx");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return None;
    }
    // With `-e`, the console gets `nginx: [emerg] <message>` without the log's prefix.
    let message = stderr.split("nginx: [emerg] ").nth(1).unwrap_or(&stderr);
    let message = message
        .split("\nnginx: configuration file")
        .next()
        .unwrap_or(message);
    Some(message.trim_end().to_string())
}

#[test]
fn errors_match_nginx() {
    if !Path::new(NGINX).exists() {
        // CI installs nginx: there, its absence is a failure, not a skip.
        assert!(
            std::env::var_os("CI").is_none(),
            "{NGINX} not installed: apt-get install nginx"
        );
        eprintln!("SKIPPED: {NGINX} not installed");
        return;
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("portcullis-config-diff-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("temp dir");
    let conf = dir.join("nginx.conf");
    let base = base(&dir);
    assert_eq!(
        nginx_check(&dir, &conf_with(&conf, &base)),
        None,
        "base config"
    );

    const INSERTS: &[u8] = b"{};\"'\\#$ \nx()";
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut compared = 0;
    for case in 0..CASES {
        let mut text: Vec<u8> = base.as_bytes().to_vec();
        for _ in 0..=rng.below(3) {
            let i = rng.below(text.len());
            match rng.below(3) {
                0 => {
                    text.remove(i);
                }
                1 => text.insert(i, INSERTS[rng.below(INSERTS.len())]),
                _ => {
                    let end = (i + 1 + rng.below(30)).min(text.len());
                    text.drain(i..end);
                }
            }
        }
        let text = String::from_utf8_lossy(&text).into_owned();
        conf_with(&conf, &text);
        let ours = load(&conf, &LoadOptions::default());
        match nginx_check(&dir, &conf) {
            None => assert!(
                ours.is_ok(),
                "case {case}: nginx accepts, we say {ours:?}\n{text}"
            ),
            Some(theirs) if COMPARED.iter().any(|c| theirs.contains(c)) => {
                compared += 1;
                let ours = ours.map_err(|e| e.to_string());
                assert_eq!(ours.err(), Some(theirs), "case {case}\n{text}");
            }
            Some(_) => {}
        }
    }
    let _ = fs::remove_dir_all(&dir);
    assert!(compared > CASES / 3, "only {compared} cases compared");
}

fn conf_with(path: &Path, text: &str) -> PathBuf {
    fs::write(path, text).expect("write config");
    path.to_path_buf()
}
