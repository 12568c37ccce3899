//! `charset` naming the charset in `Content-Type`, compared with nginx: on the server's own
//! responses and on proxied ones, only for `charset_types` (and all with `*`), never over a
//! charset the response names already, and not with `charset off`.

mod support;

use support::{head_upstream, kinds, Server};

const CONFIG: &str = r#"
    server {
        listen 127.0.0.1:{PORT0};
        charset utf-8;
        location = /own { return 200 "own\n"; }
        location = /own-json { default_type application/json; return 200 "{}\n"; }
        location = /own-302 { return 302 /elsewhere; }
        location /up/ { proxy_pass http://127.0.0.1:{UPSTREAM}; }
        location /all/ { charset_types *; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
        location /off/ { charset off; proxy_pass http://127.0.0.1:{UPSTREAM}/up/; }
        location /two/ {
            charset_types application/json;
            charset_types application/xml;
            proxy_pass http://127.0.0.1:{UPSTREAM}/up/;
        }
        location = /plain-listed { charset_types application/json; return 200 "x\n"; }
        location /headers/ {
            add_header X-Seen yes;
            proxy_pass http://127.0.0.1:{UPSTREAM}/up/;
        }
    }
"#;

#[test]
fn charset_names_the_charset_as_nginx_does() {
    let upstream = head_upstream(|_, head| {
        let line = String::from_utf8_lossy(head);
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let ty = match path.as_str() {
            "/up/html" => "Content-Type: text/html\r\n",
            "/up/named" => "Content-Type: text/html; charset=koi8-r\r\n",
            "/up/json" => "Content-Type: application/json\r\n",
            "/up/upper" => "Content-Type: TEXT/HTML\r\n",
            "/up/params" => "Content-Type: text/html; foo=bar\r\n",
            "/up/moved" => "Content-Type: text/html\r\nLocation: /elsewhere\r\n",
            _ => "",
        };
        let status = if path == "/up/moved" {
            "302 Found"
        } else {
            "200 OK"
        };
        format!("HTTP/1.1 {status}\r\n{ty}Content-Length: 3\r\n\r\nok\n").into_bytes()
    });
    let http = CONFIG.replace("{UPSTREAM}", &upstream.to_string());
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        let mut got = Vec::new();
        for path in [
            "/own",
            "/own-json",
            "/up/html",
            "/up/named",
            "/up/json",
            "/up/upper",
            "/up/none",
            "/all/json",
            "/off/html",
            "/headers/html",
        ] {
            let r = support::get(server.port(0), path).expect("request");
            got.push(format!(
                "{path} -> {} {}",
                r.status,
                r.header("content-type").unwrap_or("-")
            ));
        }
        if kind == support::Kind::Portcullis {
            assert!(
                got.contains(&"/up/html -> 200 text/html; charset=utf-8".to_string()),
                "{got:#?}"
            );
        }
        seen.push((kind, got));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}
