//! The `$ssl_*` variables of the handshake that nginx's configurations log most after the
//! protocol and cipher: the protocol ALPN chose, the key exchange group, and the cipher
//! suites and groups the client offered, compared with nginx's for the same handshakes
//! (TLS 1.3 and 1.2, several groups, with and without ALPN).

mod support;
#[path = "support/tls.rs"]
#[allow(dead_code)]
mod tls_support;

use support::{kinds, main_config, skip, Server};
use tls_support::{openssl_available, request, s_client, KeyKind, Pki};

#[test]
fn handshake_variables_match_nginx() {
    if !openssl_available() {
        skip("the openssl command is not installed");
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let body = format!(
        "    server {{\n\
         \x20       listen 127.0.0.1:{{PORT0}} ssl;\n\
         \x20       server_name localhost;\n\
         \x20       ssl_certificate {};\n\
         \x20       ssl_certificate_key {};\n\
         \x20       ssl_protocols TLSv1.2 TLSv1.3;\n\
         \x20       ssl_ecdh_curve X25519:prime256v1:secp384r1;\n\
         \x20       location / {{ return 200 \"BEGIN<$ssl_protocol|$ssl_alpn_protocol|\
         $ssl_curve|$ssl_early_data|$ssl_ciphers|$ssl_curves>END\"; }}\n\
         \x20   }}\n",
        pair.cert.display(),
        pair.key.display()
    );
    let handshakes: [&[&str]; 5] = [
        &["-tls1_3", "-groups", "X25519", "-alpn", "http/1.1"],
        &["-tls1_3", "-groups", "P-256"],
        &["-tls1_3", "-groups", "P-384", "-alpn", "h2,http/1.1"],
        &["-tls1_2", "-groups", "P-256", "-alpn", "http/1.1"],
        &["-tls1_2", "-groups", "X25519:P-256"],
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&body)) else {
            continue;
        };
        let mut values = Vec::new();
        for args in handshakes {
            let out = s_client(server.port(0), args, &request("localhost", "/"));
            let v = out
                .split_once("BEGIN<")
                .and_then(|(_, rest)| rest.split_once(">END"))
                .map(|(v, _)| v.to_owned())
                .unwrap_or_else(|| panic!("{kind} {args:?}: no variables in\n{out}"));
            values.push(v);
        }
        assert!(
            values[0].starts_with("TLSv1.3|http/1.1|X25519||TLS_AES_256_GCM_SHA384:"),
            "{kind}: {}",
            values[0]
        );
        assert!(
            values[0].ends_with(":TLS_EMPTY_RENEGOTIATION_INFO_SCSV|X25519"),
            "{kind}: {}",
            values[0]
        );
        assert!(
            values[1].starts_with("TLSv1.3||prime256v1||"),
            "{kind}: {}",
            values[1]
        );
        assert!(values[1].ends_with("|prime256v1"), "{kind}: {}", values[1]);
        seen.push((kind, values));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        assert_eq!(ours, nginx, "portcullis against nginx");
    }
}

/// `$ssl_session_id` and `$ssl_session_reused` of a full handshake and of its resumption, with
/// session tickets (nginx's default) and with a session cache instead, over TLS 1.2 and 1.3,
/// described by what the id is in terms of the session ids on the wire, which `s_client
/// -trace` shows (the values are random: the descriptions are compared).
#[test]
fn session_id_is_the_one_on_the_wire_as_nginx_gives_it() {
    if !openssl_available() {
        skip("the openssl command is not installed");
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let server = |port: &str, extra: &str| {
        format!(
            "    server {{\n\
             \x20       listen 127.0.0.1:{{{port}}} ssl;\n\
             \x20       ssl_certificate {};\n\
             \x20       ssl_certificate_key {};\n\
             \x20       ssl_protocols TLSv1.2 TLSv1.3;\n{extra}\
             \x20       location / {{ return 200 \"BEGIN<$ssl_session_id|$ssl_session_reused>END\"; }}\n\
             \x20   }}\n",
            pair.cert.display(),
            pair.key.display()
        )
    };
    let body = server("PORT0", "")
        + &server(
            "PORT1",
            "        ssl_session_cache shared:ids:1m;\n        ssl_session_tickets off;\n",
        );
    let want = [
        "tickets -tls1_2: full [] . | resumed [the client's hello's, new] r",
        "tickets -tls1_3: full [64 hex, not on the wire] . | resumed [64 hex, not on the wire, new] r",
        "cache -tls1_2: full [the server's hello's] . | resumed [the client's hello's, the same] r",
        "cache -tls1_3: full [64 hex, not on the wire] . | resumed [64 hex, not on the wire, new] r",
    ];
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &main_config(&body)) else {
            continue;
        };
        let mut seen = Vec::new();
        for (port, mode) in [(0, "tickets"), (1, "cache")] {
            for proto in ["-tls1_2", "-tls1_3"] {
                let session = server.path(&format!("session-{mode}{proto}"));
                let session = session.to_str().unwrap();
                let full = handshake(server.port(port), &[proto, "-sess_out", session]);
                let resumed = handshake(server.port(port), &[proto, "-sess_in", session]);
                seen.push(format!(
                    "{mode} {proto}: full [{}] {} | resumed [{}] {}",
                    describe(&full, None),
                    full.reused,
                    describe(&resumed, Some(&full.id)),
                    resumed.reused
                ));
            }
        }
        assert_eq!(seen, want, "{kind}");
    }
}

/// One handshake's `$ssl_session_id` and `$ssl_session_reused`, and the session ids its
/// ClientHello and ServerHello carried (lowercase hex).
struct Handshake {
    id: String,
    reused: String,
    client_hello: String,
    server_hello: String,
}

fn handshake(port: u16, args: &[&str]) -> Handshake {
    let mut all = vec!["-trace"];
    all.extend_from_slice(args);
    let out = s_client(port, &all, &request("localhost", "/"));
    let (id, reused) = out
        .split_once("BEGIN<")
        .and_then(|(_, rest)| rest.split_once(">END"))
        .and_then(|(v, _)| v.split_once('|'))
        .unwrap_or_else(|| panic!("{args:?}: no variables in\n{out}"));
    let mut wire = out.lines().filter_map(|l| {
        let l = l.trim();
        l.strip_prefix("session_id (len=")
            .map(|rest| rest.split_once("): ").map_or("", |(_, hex)| hex))
            .map(str::to_ascii_lowercase)
    });
    Handshake {
        id: id.to_owned(),
        reused: reused.to_owned(),
        client_hello: wire.next().expect("a ClientHello in the trace"),
        server_hello: wire.next().expect("a ServerHello in the trace"),
    }
}

/// What `h.id` is, in words: empty, one of the hellos' ids, or an id of its own.
fn describe(h: &Handshake, before: Option<&str>) -> String {
    let same = match before {
        Some(b) if b == h.id => ", the same",
        Some(_) => ", new",
        None => "",
    };
    if h.id.is_empty() {
        String::new()
    } else if h.id == h.client_hello {
        format!("the client's hello's{same}")
    } else if h.id == h.server_hello {
        format!("the server's hello's{same}")
    } else if h.id.len() == 64 && h.id.bytes().all(|b| b.is_ascii_hexdigit()) {
        format!("64 hex, not on the wire{same}")
    } else {
        format!("unexpected {}", h.id)
    }
}
