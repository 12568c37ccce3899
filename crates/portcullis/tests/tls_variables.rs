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
