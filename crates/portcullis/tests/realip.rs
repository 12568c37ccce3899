//! `set_real_ip_from`, `real_ip_header` and `real_ip_recursive`, compared with nginx on the
//! same configuration and requests: the client's address from `X-Real-IP`, `X-Forwarded-For`
//! (one field or several, recursive or not) or another header, with or without a port, from
//! a trusted connection only; the address then seen by `$remote_addr`, `$remote_port`,
//! `$realip_remote_addr`, `allow`/`deny`, `limit_req`, `$proxy_add_x_forwarded_for` and the
//! access log.

mod support;

use support::{head_upstream, kinds, Server};

const CONFIG: &str = r#"
    limit_req_zone $binary_remote_addr zone=per_client:1m rate=1r/m;
    server {
        listen 127.0.0.1:{PORT0};
        root {PREFIX}/www;
        set_real_ip_from 127.0.0.1;
        add_header X-Addr "$remote_addr|$remote_port|$realip_remote_addr|$realip_remote_port" always;
        location /xri/ { }
        location /xff/ { real_ip_header X-Forwarded-For; }
        location /xffr/ {
            set_real_ip_from 10.0.0.0/8;
            set_real_ip_from 127.0.0.1;
            real_ip_header X-Forwarded-For;
            real_ip_recursive on;
        }
        location /xff6/ {
            set_real_ip_from 127.0.0.1;
            set_real_ip_from 2001:db8::/32;
            real_ip_header X-Forwarded-For;
            real_ip_recursive on;
        }
        location /custom/ { real_ip_header X-Client; }
        location /untrusted/ { set_real_ip_from 192.168.0.0/16; real_ip_header X-Forwarded-For; }
        location /deny/ { real_ip_header X-Forwarded-For; deny 5.5.5.5; }
        location /limited/ { real_ip_header X-Forwarded-For; limit_req zone=per_client; }
        location /proxied/ {
            real_ip_header X-Forwarded-For;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_pass http://127.0.0.1:{UPSTREAM};
        }
    }
"#;

#[test]
fn real_client_addresses_as_nginx_takes_them() {
    let upstream = head_upstream(|_, head| {
        let head = String::from_utf8_lossy(head);
        let xff = head
            .lines()
            .find_map(|l| l.strip_prefix("X-Forwarded-For: "))
            .unwrap_or("-")
            .to_string();
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{xff}",
            xff.len()
        )
        .into_bytes()
    });
    let http = CONFIG.replace("{UPSTREAM}", &upstream.to_string());
    let requests: &[(&str, &str)] = &[
        ("/xri/f", "X-Real-IP: 1.2.3.4\r\n"),
        ("/xri/f", "X-Real-IP: 1.2.3.4:8080\r\n"),
        ("/xri/f", "X-Real-IP: [2001:db8::1]:443\r\n"),
        ("/xri/f", "X-Real-IP: 2001:db8::2\r\n"),
        ("/xri/f", "X-Real-IP: bogus\r\n"),
        ("/xri/f", "X-Real-IP: 1.2.3.4, 5.6.7.8\r\n"),
        ("/xri/f", "X-Real-IP: 1.2.3.4\r\nX-Real-IP: 9.9.9.9\r\n"),
        ("/xri/f", ""),
        ("/xri/f", "X-Real-IP: 01.2.3.4\r\n"),
        ("/xri/f", "X-Real-IP: [1.2.3.4]:80\r\n"),
        ("/xri/f", "X-Real-IP: 255.255.255.255\r\n"),
        ("/xff/f", "X-Forwarded-For: 1.1.1.1, 2.2.2.2\r\n"),
        (
            "/xff/f",
            "X-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2, \r\n",
        ),
        (
            "/xffr/f",
            "X-Forwarded-For: 1.1.1.1, 10.0.0.5, 10.0.0.6\r\n",
        ),
        ("/xffr/f", "X-Forwarded-For: 1.1.1.1, 3.3.3.3, 10.0.0.5\r\n"),
        (
            "/xffr/f",
            "X-Forwarded-For: 4.4.4.4\r\nX-Forwarded-For: 10.0.0.7\r\n",
        ),
        ("/xffr/f", "X-Forwarded-For: nonsense, 10.0.0.7\r\n"),
        ("/xffr/f", "X-Forwarded-For: 1.1.1.1, ::ffff:10.0.0.2\r\n"),
        ("/custom/f", "X-Client: 6.6.6.6\r\n"),
        ("/untrusted/f", "X-Forwarded-For: 7.7.7.7\r\n"),
        ("/deny/f", "X-Forwarded-For: 5.5.5.5\r\n"),
        ("/deny/f", "X-Forwarded-For: 5.5.5.6\r\n"),
        ("/limited/f", "X-Forwarded-For: 8.8.8.8\r\n"),
        ("/limited/f", "X-Forwarded-For: 8.8.8.8\r\n"),
        ("/limited/f", "X-Forwarded-For: 8.8.4.4\r\n"),
        ("/proxied/f", "X-Forwarded-For: 1.1.1.1\r\n"),
        // Trusted IPv6 networks.
        ("/xff6/f", "X-Forwarded-For: 1.1.1.1, 2001:db8::5\r\n"),
        (
            "/xff6/f",
            "X-Forwarded-For: 2001:db9::1, 2001:db8:ffff::1\r\n",
        ),
        ("/xff6/f", "X-Forwarded-For: 1.1.1.1, 2001:db9::5\r\n"),
        ("/xri/last", "X-Real-IP: 9.8.7.6\r\n"),
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(&http)) else {
            continue;
        };
        for dir in [
            "xri",
            "xff",
            "xffr",
            "xff6",
            "custom",
            "untrusted",
            "deny",
            "limited",
        ] {
            std::fs::create_dir_all(server.path(&format!("www/{dir}"))).expect("mkdir");
            std::fs::write(server.path(&format!("www/{dir}/f")), "f\n").expect("write");
        }
        std::fs::write(server.path("www/xri/last"), "last\n").expect("write");
        let mut got = Vec::new();
        for (path, fields) in requests {
            let r = support::request(
                server.port(0),
                &format!(
                    "GET {path} HTTP/1.1\r\nHost: localhost\r\n{fields}Connection: close\r\n\r\n"
                ),
            )
            .expect("request");
            let addr = r.header("x-addr").unwrap_or("-").to_string();
            // The connection's own port changes with every request.
            let own = addr.starts_with("127.0.0.1|");
            let addr = addr
                .split('|')
                .enumerate()
                .map(|(i, p)| match i {
                    1 if own => "port",
                    3 if !p.is_empty() => "port",
                    _ => p,
                })
                .collect::<Vec<_>>()
                .join("|");
            let body = if path.starts_with("/proxied/") {
                r.body_text()
            } else {
                String::new()
            };
            got.push(format!("{path} {fields:?} -> {} {addr} {body}", r.status));
        }
        let at = |i: usize| got[i].as_str();
        assert!(
            at(0).contains("-> 200 1.2.3.4||127.0.0.1|port"),
            "{kind}: {}",
            at(0)
        );
        assert!(at(1).contains("-> 200 1.2.3.4|8080|"), "{kind}: {}", at(1));
        assert!(at(11).contains("-> 200 2.2.2.2|"), "{kind}: {}", at(11));
        assert!(at(13).contains("-> 200 1.1.1.1|"), "{kind}: {}", at(13));
        assert!(at(14).contains("-> 200 3.3.3.3|"), "{kind}: {}", at(14));
        assert!(at(19).contains("-> 200 127.0.0.1|"), "{kind}: {}", at(19));
        assert!(at(20).contains("-> 403"), "{kind}: {}", at(20));
        assert!(at(21).contains("-> 200"), "{kind}: {}", at(21));
        assert!(at(23).contains("-> 503"), "{kind}: {}", at(23));
        assert!(at(24).contains("-> 200"), "{kind}: {}", at(24));
        assert!(at(25).contains("1.1.1.1, 1.1.1.1"), "{kind}: {}", at(25));
        assert!(at(8).contains("-> 200 1.2.3.4|"), "{kind}: {}", at(8));
        assert!(at(9).contains("-> 200 1.2.3.4|80|"), "{kind}: {}", at(9));
        assert!(at(17).contains("-> 200 1.1.1.1|"), "{kind}: {}", at(17));
        let wrote_last = support::wait_until(support::IO_TIMEOUT, || {
            support::read_lossy(&server.access_log_path())
                .lines()
                .any(|l| l.starts_with("9.8.7.6 ") && l.contains("/xri/last"))
        });
        assert!(
            wrote_last,
            "{kind}: the access log has not the real address"
        );
        seen.push((kind, got));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (n, o) in nginx.iter().zip(ours) {
            assert_eq!(o, n, "portcullis against nginx");
        }
    }
}
