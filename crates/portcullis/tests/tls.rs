//! Black-box tests of TLS termination: handshakes with the seeds' keys and cipher strings,
//! certificate choice by signature scheme and by SNI, refused handshakes, resumption, client
//! certificates, plain HTTP on a TLS port, configuration errors and the `$ssl_*` variables.
//!
//! Where nginx's behaviour is the expectation, the test runs against nginx first and then
//! against portcullis (see `support::kinds`).

mod support;
#[path = "support/tls.rs"]
mod tls_support;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::{kinds, main_config, read_lossy, skip, wait_until, Kind, Server};
use tls_support::{openssl_available, request, s_client, KeyKind, Pair, Pki};

/// The seeds' cipher strings, by key type.
const ECDSA_CIPHER: &str = "ECDHE-ECDSA-AES256-GCM-SHA384";
const RSA_CIPHER: &str = "ECDHE-RSA-AES256-GCM-SHA384";
/// How long an access log line may take to be written.
const LOG_DEADLINE: Duration = Duration::from_secs(5);

/// A TLS server block on `{PORT0}` serving `{PREFIX}/html`, with `extra` directives.
fn server_block(pair: &Pair, extra: &str) -> String {
    format!(
        "    server {{\n\
         \x20       listen 127.0.0.1:{{PORT0}} ssl;\n\
         \x20       server_name localhost;\n\
         \x20       ssl_certificate {};\n\
         \x20       ssl_certificate_key {};\n\
         \x20       ssl_protocols TLSv1.2 TLSv1.3;\n\
         {extra}\n\
         \x20       location / {{ return 200 \"secure\\n\"; }}\n\
         \x20   }}\n",
        pair.cert.display(),
        pair.key.display()
    )
}

fn start(kind: Kind, http_body: &str) -> Option<Server> {
    Server::start(kind, 1, &main_config(http_body))
}

/// The status line of the answer in what `s_client` printed.
fn status_line(out: &str) -> &str {
    out.lines()
        .find_map(|l| l.find("HTTP/1.1 ").map(|i| l[i..].trim_end()))
        .unwrap_or("no answer")
}

fn need_openssl() -> bool {
    if openssl_available() {
        return true;
    }
    skip("the openssl command is not installed");
    false
}

#[test]
fn seed_keys_and_ciphers_over_tls12_and_tls13() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let cases = [
        (KeyKind::P256, ECDSA_CIPHER),
        (KeyKind::P384, ECDSA_CIPHER),
        (KeyKind::Rsa2048, RSA_CIPHER),
    ];
    for (i, (kind_of_key, cipher)) in cases.into_iter().enumerate() {
        let pair = pki.self_signed(&format!("k{i}"), kind_of_key, "localhost");
        let body = server_block(&pair, &format!("        ssl_ciphers {cipher};"));
        for kind in kinds() {
            let Some(server) = start(kind, &body) else {
                continue;
            };
            let port = server.port(0);
            let out = s_client(port, &["-tls1_2"], &request("localhost", "/"));
            assert!(
                out.contains(&format!("Cipher is {cipher}")),
                "{kind} {kind_of_key:?} TLS 1.2:\n{out}"
            );
            assert!(
                out.contains("secure"),
                "{kind} {kind_of_key:?}: no body\n{out}"
            );
            let out = s_client(port, &["-tls1_3"], &request("localhost", "/"));
            assert!(
                out.contains("TLSv1.3") && out.contains("TLS_AES_256_GCM_SHA384"),
                "{kind} {kind_of_key:?} TLS 1.3:\n{out}"
            );
            assert!(
                out.contains("secure"),
                "{kind} {kind_of_key:?}: no body\n{out}"
            );
        }
    }
}

#[test]
fn ecdsa_and_rsa_pair_chosen_by_client_signature_schemes() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let ec = pki.self_signed("ec", KeyKind::P256, "localhost");
    let rsa = pki.self_signed("rsa", KeyKind::Rsa2048, "localhost");
    let extra = format!(
        "        ssl_certificate {};\n        ssl_certificate_key {};",
        rsa.cert.display(),
        rsa.key.display()
    );
    let body = server_block(&ec, &extra);
    for kind in kinds() {
        let Some(server) = start(kind, &body) else {
            continue;
        };
        let port = server.port(0);
        let out = s_client(port, &["-tls1_3", "-sigalgs", "RSA-PSS+SHA256"], "");
        assert!(
            out.contains("Peer signature type: RSA-PSS"),
            "{kind} RSA:\n{out}"
        );
        let out = s_client(port, &["-tls1_3", "-sigalgs", "ECDSA+SHA256"], "");
        assert!(
            out.contains("Peer signature type: ECDSA"),
            "{kind} ECDSA:\n{out}"
        );
        let out = s_client(port, &["-tls1_2", "-cipher", RSA_CIPHER], "");
        assert!(
            out.contains(&format!("Cipher is {RSA_CIPHER}")),
            "{kind} RSA suite:\n{out}"
        );
    }
}

#[test]
fn sni_selects_server_block_and_certificate() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let a = pki.self_signed("a", KeyKind::P256, "a.test");
    let b = pki.self_signed("b", KeyKind::P256, "b.test");
    let block = |pair: &Pair, name: &str| {
        format!(
            "    server {{\n\
             \x20       listen 127.0.0.1:{{PORT0}} ssl;\n\
             \x20       server_name {name};\n\
             \x20       ssl_certificate {};\n\
             \x20       ssl_certificate_key {};\n\
             \x20       location / {{ return 200 \"server $server_name sni $ssl_server_name\\n\"; }}\n\
             \x20   }}\n",
            pair.cert.display(),
            pair.key.display()
        )
    };
    let body = format!("{}{}", block(&a, "a.test"), block(&b, "b.test"));
    for kind in kinds() {
        let Some(server) = start(kind, &body) else {
            continue;
        };
        let port = server.port(0);
        let out = s_client(port, &["-servername", "b.test"], &request("b.test", "/"));
        assert!(out.contains("CN = b.test"), "{kind}: certificate\n{out}");
        assert!(
            out.contains("server b.test sni b.test"),
            "{kind}: server\n{out}"
        );
        let out = s_client(port, &["-noservername"], &request("a.test", "/"));
        assert!(
            out.contains("CN = a.test"),
            "{kind}: default certificate\n{out}"
        );
    }
}

#[test]
fn reject_handshake_sends_unrecognized_name() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let good = pki.self_signed("good", KeyKind::P256, "good.test");
    let body = format!(
        "    server {{\n\
         \x20       listen 127.0.0.1:{{PORT0}} ssl default_server;\n\
         \x20       ssl_reject_handshake on;\n\
         \x20   }}\n\
         \x20   server {{\n\
         \x20       listen 127.0.0.1:{{PORT0}} ssl;\n\
         \x20       server_name good.test;\n\
         \x20       ssl_certificate {};\n\
         \x20       ssl_certificate_key {};\n\
         \x20       location / {{ return 200 \"good\\n\"; }}\n\
         \x20   }}\n",
        good.cert.display(),
        good.key.display()
    );
    for kind in kinds() {
        let Some(server) = start(kind, &body) else {
            continue;
        };
        let port = server.port(0);
        let out = s_client(port, &["-servername", "other.test"], "");
        assert!(out.contains("unrecognized name"), "{kind}: refused\n{out}");
        let out = s_client(
            port,
            &["-servername", "good.test"],
            &request("good.test", "/"),
        );
        assert!(out.contains("good"), "{kind}: named server\n{out}");
    }
}

/// Connects once saving the session, then again with it; returns the second run's output.
fn resume(port: u16, pki: &Pki, version: &str) -> String {
    let sess = pki.path(&format!("session-{port}-{version}"));
    let sess = sess.display().to_string();
    let first = s_client(
        port,
        &[version, "-sess_out", &sess],
        &request("localhost", "/"),
    );
    assert!(first.contains("secure"), "first connection:\n{first}");
    s_client(
        port,
        &[version, "-sess_in", &sess],
        &request("localhost", "/"),
    )
}

#[test]
fn sessions_resume_with_tickets_and_with_the_cache() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let configs = [
        ("tickets", ""),
        (
            "cache",
            "        ssl_session_tickets off;\n        ssl_session_cache shared:SSL:1m;",
        ),
    ];
    for (what, extra) in configs {
        let body = server_block(&pair, extra);
        for kind in kinds() {
            let Some(server) = start(kind, &body) else {
                continue;
            };
            for version in ["-tls1_2", "-tls1_3"] {
                let out = resume(server.port(0), &pki, version);
                assert!(out.contains("Reused,"), "{kind} {what} {version}:\n{out}");
            }
        }
    }
}

#[test]
fn sessions_resume_across_workers() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    for tickets in ["on", "off"] {
        let extra = format!(
            "        ssl_session_cache shared:SSL:1m;\n        ssl_session_tickets {tickets};"
        );
        let body = server_block(&pair, &extra).replace("ssl;\n", "ssl reuseport;\n");
        let config = main_config(&body).replace("worker_processes 1;", "worker_processes 2;");
        let Some(server) = Server::start(Kind::Portcullis, 1, &config) else {
            return;
        };
        let port = server.port(0);
        for version in ["-tls1_3", "-tls1_2"] {
            let sess = pki
                .path(&format!("s-{tickets}{version}"))
                .display()
                .to_string();
            let first = s_client(
                port,
                &[version, "-sess_out", &sess],
                &request("localhost", "/"),
            );
            assert!(first.contains("secure"), "{first}");
            // With reuseport, the kernel spreads connections over both workers: every one of
            // several resumptions must succeed, whichever worker takes it.
            for _ in 0..6 {
                let out = s_client(
                    port,
                    &[version, "-sess_in", &sess],
                    &request("localhost", "/"),
                );
                assert!(
                    out.contains("Reused,"),
                    "tickets {tickets} {version}:\n{out}"
                );
            }
        }
    }
}

#[test]
fn client_certificates_accepted_and_refused() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let server_pair = pki.self_signed("server", KeyKind::P256, "localhost");
    let ca = pki.self_signed("ca", KeyKind::P256, "Test CA");
    let client = pki.signed(
        "client",
        KeyKind::P256,
        "/C=US/O=Example/CN=client one",
        &ca,
    );
    let stranger_ca = pki.self_signed("stranger-ca", KeyKind::P256, "Other CA");
    let stranger = pki.signed("stranger", KeyKind::P256, "/CN=stranger", &stranger_ca);
    let body = |mode: &str| {
        let extra = format!(
            "        ssl_verify_client {mode};\n        ssl_client_certificate {};\n        location /who {{ return 200 \"verify $ssl_client_verify dn $ssl_client_s_dn\\n\"; }}",
            ca.cert.display()
        );
        server_block(&server_pair, &extra)
    };
    let with = |p: &Pair| {
        vec![
            "-cert".to_string(),
            p.cert.display().to_string(),
            "-key".to_string(),
            p.key.display().to_string(),
        ]
    };
    for kind in kinds() {
        let Some(server) = start(kind, &body("on")) else {
            continue;
        };
        let port = server.port(0);
        let args = with(&client);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = s_client(port, &args, &request("localhost", "/who"));
        assert!(
            out.contains("verify SUCCESS dn CN=client one,O=Example,C=US"),
            "{kind}: good certificate\n{out}"
        );
        let out = s_client(port, &[], &request("localhost", "/who"));
        assert!(
            out.contains("HTTP/1.1 400 Bad Request")
                && out.contains("No required SSL certificate was sent"),
            "{kind}: no certificate\n{out}"
        );
        let args = with(&stranger);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = s_client(port, &args, &request("localhost", "/who"));
        assert!(
            out.contains("HTTP/1.1 400 Bad Request") && out.contains("The SSL certificate error"),
            "{kind}: unknown issuer\n{out}"
        );
        drop(server);
        let Some(server) = start(kind, &body("optional")) else {
            continue;
        };
        let out = s_client(server.port(0), &[], &request("localhost", "/who"));
        assert!(
            out.contains("verify NONE dn"),
            "{kind}: optional, none sent\n{out}"
        );
    }
}

/// `ssl_verify_depth` counts the intermediates of the chain built from the client's
/// certificates and the CA file up to a root (a self-issued certificate), as OpenSSL counts
/// them for nginx: a chain one longer is refused whether its intermediate came from the
/// client or from the file.
#[test]
fn ssl_verify_depth_counts_as_nginx_counts() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let server_pair = pki.self_signed("server", KeyKind::P256, "localhost");
    let root = pki.self_signed("root", KeyKind::P256, "Depth Root");
    let inter = pki.intermediate("inter", KeyKind::P256, "/CN=Depth Intermediate", &root);
    let leaf = pki.signed("leaf", KeyKind::P256, "/CN=depth client", &inter);
    let both = pki.write(
        "both.crt",
        &format!(
            "{}{}",
            std::fs::read_to_string(&inter.cert).unwrap(),
            std::fs::read_to_string(&root.cert).unwrap()
        ),
    );
    // (CA file, depth) by port.
    let servers = [(&root.cert, 1), (&root.cert, 0), (&both, 0), (&both, 1)];
    let mut http = String::new();
    for (i, (ca, depth)) in servers.iter().enumerate() {
        http.push_str(&server_block(&server_pair, &format!(
            "        ssl_verify_client on;\n        ssl_client_certificate {};\n        ssl_verify_depth {depth};\n        location /who {{ return 200 \"verify $ssl_client_verify\\n\"; }}",
            ca.display()
        )).replace("{PORT0}", &format!("{{PORT{i}}}")));
    }
    let leaf_args = [
        "-cert",
        leaf.cert.to_str().unwrap(),
        "-key",
        leaf.key.to_str().unwrap(),
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, servers.len(), &main_config(&http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for (i, (ca, depth)) in servers.iter().enumerate() {
            let file = ca.file_name().unwrap().to_string_lossy().into_owned();
            for with_inter in [false, true] {
                let mut args = leaf_args.to_vec();
                if with_inter {
                    args.extend(["-cert_chain", inter.cert.to_str().unwrap()]);
                }
                let out = s_client(server.port(i), &args, &request("localhost", "/who"));
                let status = status_line(&out);
                // The body (s_client's own lines about the server's certificate aside).
                let verify = out
                    .lines()
                    .find(|l| l.starts_with("verify ") && !l.starts_with("verify error:"))
                    .unwrap_or("-");
                lines.push(format!(
                    "CA file {file}, depth {depth}, intermediate sent: {with_inter} -> {status} {verify}"
                ));
            }
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "CA file root.crt, depth 1, intermediate sent: true -> HTTP/1.1 200 OK verify SUCCESS",
                    "CA file root.crt, depth 0, intermediate sent: true -> HTTP/1.1 400 Bad Request",
                    "CA file both.crt, depth 0, intermediate sent: false -> HTTP/1.1 400 Bad Request",
                    "CA file both.crt, depth 1, intermediate sent: false -> HTTP/1.1 200 OK verify SUCCESS",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// Client chains OpenSSL refuses for nginx, refused alike: a certificate trusted for itself
/// (not a CA) that signs another, an intermediate without the right to sign certificates,
/// a root's path length exceeded, a client certificate whose key usage is not for a TLS
/// client; and the pinned certificate itself, accepted.
#[test]
fn client_chains_openssl_refuses_are_refused() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let server_pair = pki.self_signed("server", KeyKind::P256, "localhost");
    let client =
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n";
    // A pinned client certificate, and one it signs.
    let pin = pki.self_signed_with(
        "pin",
        KeyKind::P256,
        "pinned",
        &[
            "basicConstraints=CA:FALSE",
            "keyUsage=digitalSignature",
            "extendedKeyUsage=clientAuth",
        ],
    );
    let minted = pki.issue("minted", KeyKind::P256, "/CN=admin", &pin, client);
    // A root whose path length allows no intermediate, and one under it.
    let tight = pki.self_signed_with(
        "tight",
        KeyKind::P256,
        "Tight Root",
        &[
            "basicConstraints=critical,CA:TRUE,pathlen:0",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    let under = pki.intermediate("under", KeyKind::P256, "/CN=Under Tight", &tight);
    let deep = pki.signed("deep", KeyKind::P256, "/CN=deep client", &under);
    // An intermediate that may not sign certificates.
    let root = pki.self_signed("root", KeyKind::P256, "Good Root");
    let nosign = pki.issue(
        "nosign",
        KeyKind::P256,
        "/CN=No Sign",
        &root,
        "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,digitalSignature\n",
    );
    let below = pki.signed("below", KeyKind::P256, "/CN=below client", &nosign);
    // A client certificate for key encipherment only.
    let encipher = pki.issue(
        "encipher",
        KeyKind::P256,
        "/CN=encipher",
        &root,
        "basicConstraints=CA:FALSE\nkeyUsage=keyEncipherment\nextendedKeyUsage=clientAuth\n",
    );
    let cases: [(&str, &Pair, &Pair, Option<&Pair>); 5] = [
        ("pinned itself", &pin, &pin, None),
        ("signed by the pinned one", &pin, &minted, None),
        ("under a pathlen:0 root", &tight, &deep, Some(&under)),
        (
            "under an intermediate without keyCertSign",
            &root,
            &below,
            Some(&nosign),
        ),
        ("for key encipherment only", &root, &encipher, None),
    ];
    let mut http = String::new();
    for (i, (_, ca, ..)) in cases.iter().enumerate() {
        http.push_str(
            &server_block(
                &server_pair,
                &format!(
                    "        ssl_verify_client on;\n        ssl_client_certificate {};\n        location /who {{ return 200 \"verify $ssl_client_verify\\n\"; }}",
                    ca.cert.display()
                ),
            )
            .replace("{PORT0}", &format!("{{PORT{i}}}")),
        );
    }
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, cases.len(), &main_config(&http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for (i, (name, _, leaf, chain)) in cases.iter().enumerate() {
            let mut args = vec![
                "-cert",
                leaf.cert.to_str().unwrap(),
                "-key",
                leaf.key.to_str().unwrap(),
            ];
            if let Some(c) = chain {
                args.extend(["-cert_chain", c.cert.to_str().unwrap()]);
            }
            let out = s_client(server.port(i), &args, &request("localhost", "/who"));
            lines.push(format!("{name} -> {}", status_line(&out)));
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "pinned itself -> HTTP/1.1 200 OK",
                    "signed by the pinned one -> HTTP/1.1 400 Bad Request",
                    "under a pathlen:0 root -> HTTP/1.1 400 Bad Request",
                    "under an intermediate without keyCertSign -> HTTP/1.1 400 Bad Request",
                    "for key encipherment only -> HTTP/1.1 400 Bad Request",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// X.509 version 1 certificates (no extensions), RSA and ECDSA, are served as nginx serves
/// them.
#[test]
fn version_1_certificates_are_served() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    for kind_of_key in [KeyKind::Rsa2048, KeyKind::P256] {
        let pair = pki.self_signed_v1("v1", kind_of_key, "localhost");
        let mut seen = Vec::new();
        for kind in kinds() {
            let Some(server) = start(kind, &server_block(&pair, "")) else {
                continue;
            };
            let out = s_client(server.port(0), &[], &request("localhost", "/"));
            let lines = vec![format!(
                "{kind_of_key:?}: answered {}, subject {}",
                out.contains("secure"),
                out.lines()
                    .find(|l| l.starts_with("subject="))
                    .unwrap_or("-")
            )];
            if kind == Kind::Portcullis {
                support::expect_lines(&lines, &["answered true, subject subject=CN = localhost"]);
            }
            seen.push((kind, lines));
        }
        support::compare(&seen);
    }
}

#[test]
fn plain_http_on_a_tls_port_gets_nginx_page() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let body = server_block(&pair, "");
    for kind in kinds() {
        let Some(server) = start(kind, &body) else {
            continue;
        };
        let mut client = server.client(0);
        client
            .send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("send");
        let resp = client.read_response(false).expect("response");
        assert_eq!(resp.status, 400, "{kind}");
        assert_eq!(resp.header("Connection"), Some("close"), "{kind}");
        let text = resp.body_text();
        assert!(
            text.contains(
                "<head><title>400 The plain HTTP request was sent to HTTPS port</title></head>"
            ),
            "{kind}: {text}"
        );
    }
}

#[test]
fn bad_key_file_is_a_config_error_with_its_line() {
    let pki = Pki::new();
    let junk = pki.write("junk.pem", "not a key\n");
    let body = format!(
        "    server {{\n\
         \x20       listen 127.0.0.1:{{PORT0}} ssl;\n\
         \x20       ssl_certificate {junk};\n\
         \x20       ssl_certificate_key {junk};\n\
         \x20   }}\n",
        junk = junk.display()
    );
    let config = pki.write(
        "bad.conf",
        &main_config(&body)
            .replace("{PORT0}", "1")
            .replace("{PREFIX}", &pki.path("").display().to_string()),
    );
    let binary = Kind::Portcullis.binary().expect("portcullis binary");
    let out = Command::new(binary)
        .arg("-t")
        .arg("-p")
        .arg(pki.path(""))
        .arg("-c")
        .arg(&config)
        .output()
        .expect("run portcullis -t");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    let want = format!(
        "cannot load certificate \"{}\": PEM_read_bio_X509_AUX() failed",
        junk.display()
    );
    assert!(text.contains(&want), "{text}");
    assert!(
        text.contains(&format!("in {}:", config.display())),
        "{text}"
    );

    let missing = "    server {\n        listen 127.0.0.1:{PORT0} ssl;\n    }\n";
    let config = pki.write(
        "nocert.conf",
        &main_config(missing)
            .replace("{PORT0}", "1")
            .replace("{PREFIX}", &pki.path("").display().to_string()),
    );
    let out = Command::new(Kind::Portcullis.binary().expect("portcullis binary"))
        .arg("-t")
        .arg("-p")
        .arg(pki.path(""))
        .arg("-c")
        .arg(&config)
        .output()
        .expect("run portcullis -t");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("no \"ssl_certificate\" is defined for the \"listen ... ssl\" directive in"),
        "{text}"
    );
}

#[test]
fn ssl_variables_in_the_access_log() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let body = format!(
        "    log_format tls '$ssl_protocol|$ssl_cipher|$ssl_server_name|$ssl_session_reused|$https|$scheme';\n\
         \x20   access_log {{PREFIX}}/tls.log tls;\n{}",
        server_block(&pair, &format!("        ssl_ciphers {ECDSA_CIPHER};"))
    );
    let Some(server) = start(Kind::Portcullis, &body) else {
        return;
    };
    let port = server.port(0);
    let out = s_client(
        port,
        &["-tls1_2", "-servername", "localhost"],
        &request("localhost", "/"),
    );
    assert!(out.contains("secure"), "{out}");
    let log = server.path("tls.log");
    let want = format!("TLSv1.2|{ECDSA_CIPHER}|localhost|.|on|https");
    assert!(
        wait_until(LOG_DEADLINE, || read_lossy(&log).contains(&want)),
        "{}",
        read_lossy(&log)
    );
}

#[test]
fn reload_with_a_missing_certificate_keeps_the_old_configuration() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let Some(server) = start(Kind::Portcullis, &server_block(&pair, "")) else {
        return;
    };
    let gone = Pair {
        cert: pki.path("gone.crt"),
        key: pair.key.clone(),
    };
    server.write_config(&main_config(&server_block(&gone, "")));
    server.signal(libc::SIGHUP);
    let want = format!("cannot load certificate \"{}\"", gone.cert.display());
    assert!(
        wait_until(LOG_DEADLINE, || server.error_log().contains(&want)),
        "{}",
        server.error_log()
    );
    let out = s_client(server.port(0), &[], &request("localhost", "/"));
    assert!(
        out.contains("secure"),
        "the old configuration should still serve:\n{out}"
    );
}

#[test]
fn files_and_ranges_over_tls_arrive_whole() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let html = pki.path("html");
    std::fs::create_dir_all(&html).expect("mkdir html");
    std::fs::write(html.join("big"), &big).expect("write big");
    let body = format!(
        "    server {{\n\
         \x20       listen 127.0.0.1:{{PORT0}} ssl;\n\
         \x20       ssl_certificate {};\n\
         \x20       ssl_certificate_key {};\n\
         \x20       root {};\n\
         \x20   }}\n",
        pair.cert.display(),
        pair.key.display(),
        html.display()
    );
    let Some(server) = start(Kind::Portcullis, &body) else {
        return;
    };
    let url = format!("https://127.0.0.1:{}/big", server.port(0));
    let out = Command::new("curl")
        .args(["-sk", "--http1.1", &url])
        .output()
        .expect("run curl");
    assert!(
        out.stdout == big,
        "got {} bytes of {}",
        out.stdout.len(),
        big.len()
    );
    let out = Command::new("curl")
        .args([
            "-sk",
            "--http1.1",
            "-H",
            "Range: bytes=0-9,299990-299999",
            &url,
        ])
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Content-Range: bytes 299990-299999/300000"),
        "{text}"
    );
    assert!(
        text.trim_end().ends_with("--"),
        "multipart body cut short: {text}"
    );
}

#[test]
fn failed_handshake_is_logged_at_info() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let body = server_block(&pair, &format!("        ssl_ciphers {ECDSA_CIPHER};"));
    for kind in kinds() {
        let Some(server) = start(kind, &body) else {
            continue;
        };
        let out = s_client(server.port(0), &["-tls1_2", "-cipher", RSA_CIPHER], "");
        assert!(
            out.contains("Cipher is (NONE)"),
            "{kind}: should fail\n{out}"
        );
        assert!(
            wait_until(LOG_DEADLINE, || {
                let log = server.error_log();
                log.contains("[info]")
                    && log.contains("SSL_do_handshake() failed (")
                    && log.contains("while SSL handshaking, client: 127.0.0.1")
            }),
            "{kind}:\n{}",
            server.error_log()
        );
    }
}

#[test]
fn redirects_over_tls_name_https() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let body = server_block(&pair, "        location = /r { return 301 /target; }");
    for kind in kinds() {
        let Some(server) = start(kind, &body) else {
            continue;
        };
        let port = server.port(0);
        let out = s_client(port, &[], &request("localhost", "/r"));
        assert!(
            out.contains(&format!("Location: https://localhost:{port}/target\r\n")),
            "{kind}:\n{out}"
        );
    }
}

#[test]
fn shared_session_cache_survives_a_reload() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let config = |answer: &str| {
        let extra = format!(
            "        ssl_session_tickets off;\n        ssl_session_cache shared:SSL:1m;\n        location = /a {{ return 200 \"{answer}\\n\"; }}"
        );
        main_config(&server_block(&pair, &extra))
    };
    let Some(server) = Server::start(Kind::Portcullis, 1, &config("before")) else {
        return;
    };
    let port = server.port(0);
    let sess = pki.path("reload-session").display().to_string();
    let first = s_client(
        port,
        &["-tls1_2", "-sess_out", &sess],
        &request("localhost", "/a"),
    );
    assert!(first.contains("before"), "{first}");
    server.write_config(&config("after"));
    server.signal(libc::SIGHUP);
    assert!(
        wait_until(LOG_DEADLINE, || {
            s_client(port, &[], &request("localhost", "/a")).contains("after")
        }),
        "the reload did not take effect:\n{}",
        server.error_log()
    );
    let out = s_client(
        port,
        &["-tls1_2", "-sess_in", &sess],
        &request("localhost", "/a"),
    );
    assert!(out.contains("Reused,") && out.contains("after"), "{out}");
}

#[test]
fn curl_over_http2_and_http11_for_each_key_type() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let cases = [
        (KeyKind::P256, ECDSA_CIPHER),
        (KeyKind::P384, ECDSA_CIPHER),
        (KeyKind::Rsa2048, RSA_CIPHER),
    ];
    for (i, (kind_of_key, cipher)) in cases.into_iter().enumerate() {
        let pair = pki.self_signed(&format!("h{i}"), kind_of_key, "localhost");
        let body = server_block(&pair, &format!("        ssl_ciphers {cipher};"))
            .replace(" ssl;", " ssl http2;");
        for kind in kinds() {
            let Some(server) = start(kind, &body) else {
                continue;
            };
            let url = format!("https://127.0.0.1:{}/", server.port(0));
            for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
                let out = std::process::Command::new("curl")
                    .args(["-sk", flag, "-w", "\n%{http_version} %{http_code}", &url])
                    .output()
                    .expect("run curl");
                let out = String::from_utf8_lossy(&out.stdout);
                assert_eq!(
                    out,
                    format!("secure\n\n{version} 200"),
                    "{kind} {kind_of_key:?} {flag}"
                );
            }
        }
    }
}

#[test]
fn client_certificate_variables_match_nginx() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let server_pair = pki.self_signed("server", KeyKind::P256, "localhost");
    let ca = pki.self_signed("ca", KeyKind::P256, "Test CA");
    let client = pki.signed("client", KeyKind::P256, "/O=Example/CN=client one", &ca);
    let extra = format!(
        "        ssl_verify_client on;\n        ssl_client_certificate {};\n        \
         location /vars {{ return 200 \"BEGIN<i=$ssl_client_i_dn|s=$ssl_client_serial|\
         f=$ssl_client_fingerprint|vs=$ssl_client_v_start|ve=$ssl_client_v_end|\
         vr=$ssl_client_v_remain|e=$ssl_client_escaped_cert|r=$ssl_client_raw_cert|\
         c=$ssl_client_cert|sl=$ssl_client_s_dn_legacy|il=$ssl_client_i_dn_legacy>END\"; }}",
        ca.cert.display()
    );
    let body = server_block(&server_pair, &extra);
    let args = [
        "-cert".to_string(),
        client.cert.display().to_string(),
        "-key".to_string(),
        client.key.display().to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut seen: Vec<(Kind, String)> = Vec::new();
    for kind in kinds() {
        let Some(server) = start(kind, &body) else {
            continue;
        };
        let before = unix_now();
        let out = s_client(server.port(0), &args, &request("localhost", "/vars"));
        let after = unix_now();
        let values = out
            .split_once("BEGIN<")
            .and_then(|(_, rest)| rest.split_once(">END"))
            .map(|(v, _)| v.to_owned())
            .unwrap_or_else(|| panic!("{kind}: no variables in\n{out}"));
        assert!(
            values.contains("i=CN=Test CA|")
                && values.contains("-----BEGIN CERTIFICATE-----")
                && values.contains("|sl=/O=Example/CN=client one|il=/CN=Test CA"),
            "{kind}: {values}"
        );
        assert!(
            !values.contains("s=|") && !values.contains("f=|"),
            "{kind}: {values}"
        );
        // $ssl_client_v_remain is whole days from the time of the request to notAfter. The
        // certificate ends exactly 30 days after the second it was made in, so the value is 30
        // within that second and 29 after it: it depends on when each server is asked, and is
        // checked against the time of the request rather than compared between the servers.
        let field = |name: &str| {
            values
                .split('|')
                .find_map(|f| f.strip_prefix(name))
                .unwrap_or_else(|| panic!("{kind}: no {name} in {values}"))
        };
        let end = parse_openssl_time(field("ve="));
        let remain: i64 = field("vr=")
            .parse()
            .unwrap_or_else(|e| panic!("{kind}: vr: {e} in {values}"));
        let days = (end - after) / 86_400..=(end - before) / 86_400;
        assert!(
            days.contains(&remain),
            "{kind}: {remain} days remain, expected {days:?}: {values}"
        );
        let values = values
            .split('|')
            .map(|f| if f.starts_with("vr=") { "vr=" } else { f })
            .collect::<Vec<_>>()
            .join("|");
        seen.push((kind, values));
    }
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        assert_eq!(ours, nginx, "portcullis against nginx");
    }
}

/// The time in whole seconds since the Unix epoch, as the servers read it.
fn unix_now() -> i64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    i64::try_from(secs).expect("time fits i64")
}

/// Seconds since the Unix epoch of a time as OpenSSL prints it: `Nov  5 10:00:00 2026 GMT`.
fn parse_openssl_time(text: &str) -> i64 {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let bad = || -> ! { panic!("not an OpenSSL time: {text:?}") };
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [month, day, time, year, "GMT"] = parts.as_slice() else {
        bad()
    };
    let month = MONTHS
        .iter()
        .position(|m| m == month)
        .unwrap_or_else(|| bad()) as i64
        + 1;
    let num = |s: &str| s.parse::<i64>().unwrap_or_else(|_| bad());
    let (day, year) = (num(day), num(year));
    let hms: Vec<i64> = time.split(':').map(num).collect();
    let [hour, minute, second] = hms.as_slice() else {
        bad()
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + hour * 3600 + minute * 60 + second
}

/// Relative certificate and key names are found beside the main configuration file (nginx's
/// `conf_prefix`), not in the `-p` prefix: `-t` loads them from there, and a configuration
/// whose files are only in the prefix does not load.
#[test]
fn relative_certificates_are_beside_the_configuration() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("site", KeyKind::P256, "localhost");
    for kind in kinds() {
        let Some(binary) = kind.binary() else {
            continue;
        };
        for beside in [true, false] {
            let prefix = support::TempDir::new("tls-prefix");
            let conf_dir = support::TempDir::new("tls-conf");
            let files = if beside { &conf_dir } else { &prefix };
            files.write("certs/site.crt", read_lossy(&pair.cert));
            files.write("certs/site.key", read_lossy(&pair.key));
            let http = "server { listen 127.0.0.1:{PORT0} ssl; \
                        ssl_certificate certs/site.crt; ssl_certificate_key certs/site.key; }";
            let conf = conf_dir.write(
                "nginx.conf",
                support::render(&main_config(http), prefix.path(), &support::free_ports(1)),
            );
            let out = support::test_config(Command::new(&binary), prefix.path(), &conf);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.success(),
                beside,
                "{kind}, beside {beside}:\n{stderr}"
            );
            if !beside {
                let expected = conf_dir.path().join("certs/site.crt");
                assert!(
                    stderr.contains(&expected.display().to_string()),
                    "{kind}:\n{stderr}"
                );
            }
        }
    }
}

/// A client that asks to renegotiate a TLS 1.2 session hears at once that the server will
/// not (nginx's OpenSSL refuses renegotiation), rather than waiting for an answer that
/// never comes.
#[test]
fn renegotiation_is_refused_at_once() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("server", KeyKind::P256, "localhost");
    for kind in kinds() {
        let Some(server) = start(kind, &server_block(&pair, "")) else {
            continue;
        };
        let connect = format!("127.0.0.1:{}", server.port(0));
        let mut child = Command::new("timeout")
            .args(["10", "openssl", "s_client", "-connect", &connect, "-tls1_2"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn openssl s_client");
        // `R` asks for a renegotiation; stdin stays open, so only the server's answer ends
        // the client.
        let mut stdin = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut stdin, b"R\n").unwrap();
        let started = std::time::Instant::now();
        let out = child.wait_with_output().expect("wait for s_client");
        let took = started.elapsed();
        drop(stdin);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("RENEGOTIATING"), "{kind}: {text}");
        assert!(text.contains("no renegotiation"), "{kind}: {text}");
        assert!(took < Duration::from_secs(5), "{kind}: took {took:?}");
    }
}

/// Client certificates webpki has no place for that OpenSSL verifies: version 1 ones (no
/// extensions) and CA certificates presented as the client's own (the trusted root itself,
/// or an intermediate).
#[test]
fn version_1_and_ca_client_certificates_verify_as_nginx() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let server_pair = pki.self_signed("server", KeyKind::P256, "localhost");
    let root = pki.self_signed("root", KeyKind::P256, "Client Root");
    let inter = pki.intermediate("inter", KeyKind::P256, "/CN=Client Inter", &root);
    // A version 1 certificate: `openssl x509 -req` with no extensions.
    let v1 = |name: &str, subject: &str, ca: &Pair, kind: KeyKind| {
        let pair = pki.issue(name, kind, subject, ca, "");
        let text = Command::new("openssl")
            .args([
                "x509",
                "-noout",
                "-text",
                "-in",
                pair.cert.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout).into_owned();
        assert!(text.contains("Version: 1 (0x0)"), "{text}");
        pair
    };
    let v1_leaf = v1("v1leaf", "/CN=v1 client", &root, KeyKind::P256);
    let v1_rsa = v1("v1rsa", "/CN=v1 rsa client", &root, KeyKind::Rsa2048);
    let v1_deep = v1("v1deep", "/CN=v1 deep client", &inter, KeyKind::P256);
    let v1_root = pki.self_signed_v1("v1root", KeyKind::P256, "v1 root");
    let v1_under = v1("v1under", "/CN=under v1 root", &v1_root, KeyKind::P256);
    let other = pki.self_signed("other", KeyKind::P256, "Other Root");
    let stranger = v1("stranger", "/CN=stranger", &other, KeyKind::P256);
    let stranger_v3 = pki.signed("stranger3", KeyKind::P256, "/CN=stranger", &other);
    // A client's own certificate (no CA) used to sign others: refused however they are made.
    let alice = pki.signed("alice", KeyKind::P256, "/CN=alice", &root);
    let minted_v1 = v1("mintedv1", "/CN=admin", &alice, KeyKind::P256);
    let minted_ca = pki.issue(
        "mintedca",
        KeyKind::P256,
        "/CN=admin",
        &alice,
        "basicConstraints=critical,CA:TRUE\n",
    );
    // One without a key usage: its being no CA is what refuses it.
    let bob = pki.issue(
        "bob",
        KeyKind::P256,
        "/CN=bob",
        &root,
        "basicConstraints=CA:FALSE\n",
    );
    let minted_by_bob = v1("mintedbob", "/CN=admin", &bob, KeyKind::P256);
    // What OpenSSL refuses and a chain built without webpki must refuse too.
    let odd = pki.issue(
        "odd",
        KeyKind::P256,
        "/CN=odd",
        &root,
        "basicConstraints=CA:FALSE\n1.2.3.4=critical,ASN1:NULL\n",
    );
    let fenced = pki.issue(
        "fenced",
        KeyKind::P256,
        "/O=Example/CN=Fenced CA",
        &root,
        "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\nnameConstraints=critical,permitted;DNS:example.com,permitted;dirName:fence\n[fence]\nO=Example\n",
    );
    let outside_v1 = v1(
        "outside",
        "/O=Other/CN=evil.other.net",
        &fenced,
        KeyKind::P256,
    );
    let outside_ca = pki.issue(
        "outsideca",
        KeyKind::P256,
        "/O=Example/CN=evil",
        &fenced,
        "basicConstraints=CA:TRUE\nsubjectAltName=DNS:evil.other.net\n",
    );
    let cases: [(&str, &Pair, &Pair, Option<&Pair>); 15] = [
        ("v1 client of the root", &root, &v1_leaf, None),
        ("v1 RSA client of the root", &root, &v1_rsa, None),
        (
            "v1 client of an intermediate",
            &root,
            &v1_deep,
            Some(&inter),
        ),
        ("the root itself", &root, &root, None),
        ("an intermediate CA", &root, &inter, None),
        ("a v1 root itself", &v1_root, &v1_root, None),
        ("a client of a v1 root", &v1_root, &v1_under, None),
        ("a v1 client of another root", &root, &stranger, None),
        ("a client of another root", &root, &stranger_v3, None),
        (
            "a v1 certificate a client signed",
            &root,
            &minted_v1,
            Some(&alice),
        ),
        (
            "a CA certificate a client signed",
            &root,
            &minted_ca,
            Some(&alice),
        ),
        (
            "a v1 certificate a non-CA signed",
            &root,
            &minted_by_bob,
            Some(&bob),
        ),
        (
            "a critical extension OpenSSL does not know",
            &root,
            &odd,
            None,
        ),
        (
            "a v1 certificate outside its CA's names",
            &root,
            &outside_v1,
            Some(&fenced),
        ),
        (
            "a CA certificate outside its CA's names",
            &root,
            &outside_ca,
            Some(&fenced),
        ),
    ];
    let mut http = String::new();
    for (i, (_, ca, ..)) in cases.iter().enumerate() {
        http.push_str(
            &server_block(
                &server_pair,
                &format!(
                    "        ssl_verify_client optional;\n        ssl_verify_depth 2;\n        ssl_client_certificate {};\n        error_page 495 = /who;\n        location /who {{ return 200 \"verify $ssl_client_verify\\n\"; }}",
                    ca.cert.display()
                ),
            )
            .replace("{PORT0}", &format!("{{PORT{i}}}")),
        );
    }
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, cases.len(), &main_config(&http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for (i, (name, _, leaf, chain)) in cases.iter().enumerate() {
            let mut args = vec![
                "-cert",
                leaf.cert.to_str().unwrap(),
                "-key",
                leaf.key.to_str().unwrap(),
            ];
            if let Some(c) = chain {
                args.extend(["-cert_chain", c.cert.to_str().unwrap()]);
            }
            let out = s_client(server.port(i), &args, &request("localhost", "/who"));
            let verify = out
                .lines()
                .find(|l| {
                    l.starts_with("verify ")
                        && !l.starts_with("verify error:")
                        && !l.starts_with("verify return:")
                })
                .unwrap_or("-");
            lines.push(format!("{name} -> {} {verify}", status_line(&out)));
        }
        seen.push((kind, lines));
    }
    if let Some((_, lines)) = seen.iter().find(|(k, _)| *k == Kind::Portcullis) {
        support::expect_lines(
            lines,
            &[
                "v1 client of the root -> HTTP/1.1 200 OK verify SUCCESS",
                "the root itself -> HTTP/1.1 200 OK verify SUCCESS",
                "a v1 client of another root -> HTTP/1.1 200 OK verify FAILED:unable to verify the first certificate",
                "a client of another root -> HTTP/1.1 200 OK verify FAILED:unable to verify the first certificate",
                "a v1 certificate a client signed -> HTTP/1.1 200 OK verify FAILED:key usage does not include certificate signing",
                "a CA certificate a client signed -> HTTP/1.1 200 OK verify FAILED:key usage does not include certificate signing",
                "a v1 certificate a non-CA signed -> HTTP/1.1 200 OK verify FAILED:unsuitable certificate purpose",
            ],
        );
    }
    support::compare(&seen);
}

/// The server a TLS name chooses gives its `merge_slashes` to the connection's requests
/// until their Host is read, as the default server does without a name: with the name,
/// `//private/x` is merged and refused whatever the default's setting; without it, the
/// default's `off` keeps the slashes.
#[test]
fn merge_slashes_is_the_server_the_tls_name_chose() {
    if !openssl_available() {
        skip("the openssl command is not installed");
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let (cert, key) = (pair.cert.display(), pair.key.display());
    let http = format!(
        r#"
    server {{
        listen 127.0.0.1:{{PORT0}} ssl default_server;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        merge_slashes off;
        location / {{ return 200 "default uri=$uri\n"; }}
    }}
    server {{
        listen 127.0.0.1:{{PORT0}} ssl;
        server_name app.test;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location /private/ {{ deny all; }}
        location / {{ return 200 "app uri=$uri\n"; }}
    }}
"#
    );
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        let named = s_client(
            server.port(0),
            &["-servername", "app.test"],
            &request("app.test", "//private/x"),
        );
        assert!(named.contains("HTTP/1.1 403"), "{kind}: {named}");
        let unnamed = s_client(
            server.port(0),
            &["-noservername"],
            &request("app.test", "//private/x"),
        );
        assert!(unnamed.contains("app uri=//private/x"), "{kind}: {unnamed}");
    }
}
