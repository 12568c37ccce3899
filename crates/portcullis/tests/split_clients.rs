//! `split_clients`, compared with nginx on the same configuration: four hundred client
//! strings land in the same parts with both, with `*` and without, with fractional
//! percents, and past the parts listed.

mod support;

use support::{kinds, Server};

const CONFIG: &str = r#"
    split_clients "${arg_c}salt" $variant {
        0.5%    .one;
        2.0%    .two;
        25%     .three;
        *       "";
    }
    split_clients "$arg_c" $half {
        50%     a;
        50%     b;
    }
    split_clients "$arg_c" $part {
        10.25%  low;
    }
    server {
        listen 127.0.0.1:{PORT0};
        location / { return 200 "[$variant][$half][$part]"; }
    }
"#;

#[test]
fn clients_are_split_as_nginx_splits_them() {
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &support::main_config(CONFIG)) else {
            continue;
        };
        let mut client = support::Client::connect(server.port(0));
        let mut got = Vec::new();
        for c in 0..400 {
            client
                .send(
                    format!(
                        "GET /?c=10.0.{}.{} HTTP/1.1\r\nHost: localhost\r\n\r\n",
                        c / 256,
                        c % 256
                    )
                    .as_bytes(),
                )
                .expect("send");
            let r = client.read_response(false).expect("response");
            got.push(r.body_text());
        }
        // Every part is used, in about its share.
        for (part, low, high) in [
            ("[.three]", 60, 140),
            ("][a][", 150, 250),
            ("[low]", 20, 80),
        ] {
            let n = got.iter().filter(|g| g.contains(part)).count();
            assert!((low..=high).contains(&n), "{kind}: {part} {n} times");
        }
        seen.push((kind, got));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        assert_eq!(ours, nginx, "portcullis against nginx");
    }
}
