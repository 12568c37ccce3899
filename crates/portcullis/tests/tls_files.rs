//! Black-box tests of the TLS files nginx reads beside certificates and keys: revocation
//! lists (`ssl_crl` for client certificates, `proxy_ssl_crl` for upstreams), encrypted keys
//! with `ssl_password_file` and `proxy_ssl_password_file`, and OpenSSL's `TRUSTED
//! CERTIFICATE` blocks. Each case runs under nginx and portcullis and compares what a client
//! sees.

mod support;
#[path = "support/tls.rs"]
#[allow(dead_code)]
mod tls_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{kinds, main_config, skip, Kind, Server, TempDir};
use tls_support::{openssl, openssl_available, request, s_client, KeyKind, Pair, Pki};

fn need_openssl() -> bool {
    if openssl_available() {
        return true;
    }
    skip("the openssl command is not installed");
    false
}

/// A TLS server on `{PORTi}` with the key pair and `extra` directives, answering
/// `$ssl_client_verify` at every path.
fn server(i: usize, pair: &Pair, extra: &str) -> String {
    format!(
        "    server {{\n\
         \x20       listen 127.0.0.1:{{PORT{i}}} ssl;\n\
         \x20       server_name localhost;\n\
         \x20       ssl_certificate {};\n\
         \x20       ssl_certificate_key {};\n\
         {extra}\n\
         \x20       location / {{ return 200 \"verify $ssl_client_verify\\n\"; }}\n\
         \x20   }}\n",
        pair.cert.display(),
        pair.key.display()
    )
}

/// A TLS server on `{PORTport}` with the key pair, answering with its port and the name the
/// client asked for.
fn tls_upstream(port: usize, pair: &Pair) -> String {
    format!(
        "    server {{\n        listen 127.0.0.1:{{PORT{port}}} ssl;\n        ssl_certificate {};\n        ssl_certificate_key {};\n        location / {{ return 200 \"upstream {port} $ssl_server_name\\n\"; }}\n    }}\n",
        pair.cert.display(),
        pair.key.display()
    )
}

/// The status line and the body's `verify` line of what `s_client` printed.
fn answer(out: &str) -> String {
    let status = out
        .lines()
        .find_map(|l| l.find("HTTP/1.1 ").map(|i| l[i..].trim_end()))
        .unwrap_or("no answer");
    let verify = out
        .lines()
        .find(|l| {
            l.starts_with("verify ")
                && !l.starts_with("verify error:")
                && !l.starts_with("verify return:")
        })
        .unwrap_or("-");
    format!("{status} {verify}")
}

/// Concatenates files into `name`.
fn cat(pki: &Pki, name: &str, parts: &[&Path]) -> PathBuf {
    let text: String = parts
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    pki.write(name, &text)
}

/// The first line of `-t`'s complaint, with the binary's own name and the prefix made
/// neutral so nginx's and portcullis's can be compared.
fn config_error(kind: Kind, http: &str) -> Option<String> {
    let binary = kind.binary()?;
    let dir = TempDir::new("tls-files-t");
    let conf = dir.write(
        "nginx.conf",
        // `-t` binds nothing: any port does.
        support::render(&main_config(http), dir.path(), &[1]),
    );
    let out = support::test_config(Command::new(binary), dir.path(), &conf);
    assert!(!out.status.success(), "{kind}: loads:\n{http}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("[emerg]"))
        .unwrap_or_else(|| panic!("{kind}: no [emerg] line:\n{stderr}"));
    let line = line.split_once("[emerg] ").map_or(line, |(_, l)| l);
    // nginx's "pid#tid: ".
    let line = match line.split_once(": ") {
        Some((pid, rest)) if pid.chars().all(|c| c.is_ascii_digit() || c == '#') => rest,
        _ => line,
    };
    Some(line.replace(&dir.path().display().to_string(), "{PREFIX}"))
}

/// `path -> status body` of a GET to `port`: the body only of a 200, the upstream's answer
/// (an error page names the server).
fn upstream_answer(port: u16, path: &str) -> String {
    let r = support::get(port, path).expect("answer");
    let body = if r.status == 200 {
        r.body_text()
    } else {
        String::new()
    };
    format!("{path} -> {} {}", r.status, body.trim())
}

/// A certificate revocation list signed by `ca` naming `revoked`, written as `name`.
/// `expired`: its next update is in the past (as a list nobody renewed).
fn crl(pki: &Pki, name: &str, ca: &Pair, revoked: &[&Pair], expired: bool) -> PathBuf {
    let index = pki.write(&format!("{name}.index"), "");
    let number = pki.write(&format!("{name}.crlnumber"), "01\n");
    let cnf = pki.write(
        &format!("{name}.ca.cnf"),
        &format!(
            "[ca]\ndefault_ca=d\n[d]\ndatabase={}\ncrlnumber={}\ndefault_md=sha256\ndefault_crl_days=30\n",
            index.display(),
            number.display()
        ),
    );
    let (cnf, ca_cert, ca_key) = (
        cnf.display().to_string(),
        ca.cert.display().to_string(),
        ca.key.display().to_string(),
    );
    let signer = ["-config", &cnf, "-cert", &ca_cert, "-keyfile", &ca_key];
    for r in revoked {
        let mut args = vec!["ca", "-revoke", r.cert.to_str().unwrap()];
        args.extend(signer);
        openssl(&args);
    }
    let out = pki.path(name);
    let out_s = out.display().to_string();
    let mut args = vec!["ca", "-gencrl", "-out", &out_s];
    args.extend(signer);
    if expired {
        args.extend([
            "-crl_lastupdate",
            "20200101000000Z",
            "-crl_nextupdate",
            "20200102000000Z",
        ]);
    }
    openssl(&args);
    out
}

/// `key` encrypted with `password` by `openssl` with `args` (`pkey -aes256`, `rsa
/// -traditional -aes128`, `pkcs8 -topk8 -v2 des3` ...), written as `name`.
fn encrypt_key(
    pki: &Pki,
    name: &str,
    key: &std::path::Path,
    password: &str,
    args: &[&str],
) -> PathBuf {
    let out = pki.path(name);
    let pass = format!("pass:{password}");
    let mut all = args.to_vec();
    all.extend(["-in", key.to_str().unwrap(), "-out", out.to_str().unwrap()]);
    all.extend(["-passout", &pass]);
    openssl(&all);
    out
}

#[test]
fn revoked_client_certificates_are_refused_as_nginx_refuses_them() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let root = pki.self_signed("root", KeyKind::P256, "Root CA");
    let inter = pki.intermediate("inter", KeyKind::P256, "/CN=Intermediate CA", &root);
    let server_pair = pki.signed("server", KeyKind::P256, "/CN=localhost", &root);
    let good = pki.signed("good", KeyKind::P256, "/CN=good", &root);
    let bad = pki.signed("bad", KeyKind::P256, "/CN=bad", &root);
    let igood = pki.signed("igood", KeyKind::P256, "/CN=igood", &inter);
    let ibad = pki.signed("ibad", KeyKind::P256, "/CN=ibad", &inter);
    // Version 1 certificates (no extensions), which OpenSSL verifies too.
    let v1good = pki.issue("v1good", KeyKind::P256, "/CN=v1good", &root, "");
    let v1bad = pki.issue("v1bad", KeyKind::P256, "/CN=v1bad", &root, "");
    let root_crl = crl(&pki, "root.crl", &root, &[&bad, &v1bad], false);
    let inter_crl = crl(&pki, "inter.crl", &inter, &[&ibad], false);
    let both_crls = cat(&pki, "both.crl", &[&root_crl, &inter_crl]);
    let old_crl = crl(&pki, "old.crl", &root, &[], true);
    let cas = cat(&pki, "cas.crt", &[&root.cert, &inter.cert]);
    // (CA file, CRL file, mode) by port.
    let servers: [(&Path, &Path, &str); 6] = [
        (&root.cert, &root_crl, "on"),
        (&cas, &both_crls, "on"),
        (&cas, &root_crl, "on"),
        (&cas, &inter_crl, "on"),
        (&root.cert, &old_crl, "on"),
        (&root.cert, &root_crl, "optional"),
    ];
    let http: String = servers
        .iter()
        .enumerate()
        .map(|(i, (ca, crl, mode))| {
            let extra = format!(
                "        ssl_verify_client {mode};\n        ssl_verify_depth 2;\n        ssl_client_certificate {};\n        ssl_crl {};",
                ca.display(),
                crl.display()
            );
            server(i, &server_pair, &extra)
        })
        .collect();
    let clients = [
        ("good", &good),
        ("bad", &bad),
        ("igood", &igood),
        ("ibad", &ibad),
        ("v1good", &v1good),
        ("v1bad", &v1bad),
    ];
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, servers.len(), &main_config(&http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for (i, (ca, crl, mode)) in servers.iter().enumerate() {
            for (name, pair) in clients {
                let mut args = vec![
                    "-cert",
                    pair.cert.to_str().unwrap(),
                    "-key",
                    pair.key.to_str().unwrap(),
                ];
                if name.starts_with('i') {
                    args.extend(["-cert_chain", inter.cert.to_str().unwrap()]);
                }
                let out = s_client(server.port(i), &args, &request("localhost", "/"));
                let file = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
                lines.push(format!(
                    "{} {} {mode}, {name} -> {}",
                    file(ca),
                    file(crl),
                    answer(&out)
                ));
            }
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "root.crt root.crl on, good -> HTTP/1.1 200 OK verify SUCCESS",
                    "root.crt root.crl on, bad -> HTTP/1.1 400 Bad Request -",
                    "cas.crt both.crl on, igood -> HTTP/1.1 200 OK verify SUCCESS",
                    "cas.crt both.crl on, ibad -> HTTP/1.1 400 Bad Request -",
                    "root.crt root.crl optional, bad -> HTTP/1.1 400 Bad Request -",
                    "root.crt root.crl on, v1good -> HTTP/1.1 200 OK verify SUCCESS",
                    "root.crt root.crl on, v1bad -> HTTP/1.1 400 Bad Request -",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

#[test]
fn optional_verification_shows_why_a_revoked_certificate_failed() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let root = pki.self_signed("root", KeyKind::P256, "Root CA");
    let inter = pki.intermediate("inter", KeyKind::P256, "/CN=Intermediate CA", &root);
    let server_pair = pki.signed("server", KeyKind::P256, "/CN=localhost", &root);
    let bad = pki.signed("bad", KeyKind::P256, "/CN=bad", &root);
    let igood = pki.signed("igood", KeyKind::P256, "/CN=igood", &inter);
    let root_crl = crl(&pki, "root.crl", &root, &[&bad], false);
    let old_crl = crl(&pki, "old.crl", &root, &[], true);
    let cas = cat(&pki, "cas.crt", &[&root.cert, &inter.cert]);
    // `optional_no_ca`... no: `optional` answers 400 too. The reason shows in a variable
    // only where the request is served, so the answer is `$ssl_client_verify` under an
    // error_page for 495.
    let page = "        error_page 495 = /why;\n        location = /why { return 200 \"why $ssl_client_verify\\n\"; }";
    let servers: [(&Path, &Path); 3] = [
        (&root.cert, &root_crl),
        (&cas, &root_crl),
        (&root.cert, &old_crl),
    ];
    let http: String = servers
        .iter()
        .enumerate()
        .map(|(i, (ca, crl))| {
            let extra = format!(
                "        ssl_verify_client on;\n        ssl_verify_depth 2;\n        ssl_client_certificate {};\n        ssl_crl {};\n{page}",
                ca.display(),
                crl.display()
            );
            server(i, &server_pair, &extra)
        })
        .collect();
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, servers.len(), &main_config(&http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for (i, client) in [(0, &bad), (1, &igood), (2, &bad)] {
            let mut args = vec![
                "-cert",
                client.cert.to_str().unwrap(),
                "-key",
                client.key.to_str().unwrap(),
            ];
            if i == 1 {
                args.extend(["-cert_chain", inter.cert.to_str().unwrap()]);
            }
            let out = s_client(server.port(i), &args, &request("localhost", "/"));
            let why = out
                .lines()
                .find(|l| l.starts_with("why "))
                .unwrap_or("no reason");
            lines.push(format!("server {i}: {why}"));
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "server 0: why FAILED:certificate revoked",
                    "server 1: why FAILED:unable to get certificate CRL",
                    "server 2: why FAILED:CRL has expired",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

#[test]
fn encrypted_keys_load_with_the_password_file() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let rsa = pki.self_signed("rsa", KeyKind::Rsa2048, "localhost");
    let ec = pki.self_signed("ec", KeyKind::P256, "localhost");
    let passwords = pki.write("passwords", "wrong\r\n\nsecret\n");
    // The forms `openssl` writes: PKCS#8 with PBES2 (AES, 3DES), and the traditional
    // encryption of PKCS#1 and SEC1 keys (AES-128, AES-256, 3DES).
    let keys: Vec<(&str, &Pair, PathBuf)> = vec![
        (
            "pkcs8 aes-256",
            &rsa,
            encrypt_key(&pki, "k1.pem", &rsa.key, "secret", &["pkey", "-aes256"]),
        ),
        (
            "pkcs8 des3",
            &ec,
            encrypt_key(
                &pki,
                "k2.pem",
                &ec.key,
                "secret",
                &["pkcs8", "-topk8", "-v2", "des3"],
            ),
        ),
        (
            "rsa traditional aes-128",
            &rsa,
            encrypt_key(
                &pki,
                "k3.pem",
                &rsa.key,
                "secret",
                &["rsa", "-traditional", "-aes128"],
            ),
        ),
        (
            "ec traditional aes-256",
            &ec,
            encrypt_key(&pki, "k4.pem", &ec.key, "secret", &["ec", "-aes256"]),
        ),
        (
            "rsa traditional des3",
            &rsa,
            encrypt_key(
                &pki,
                "k5.pem",
                &rsa.key,
                "secret",
                &["rsa", "-traditional", "-des3"],
            ),
        ),
        (
            "pkcs8 scrypt",
            &ec,
            encrypt_key(
                &pki,
                "k6.pem",
                &ec.key,
                "secret",
                &["pkcs8", "-topk8", "-scrypt"],
            ),
        ),
    ];
    let mut http: String = keys
        .iter()
        .enumerate()
        .map(|(i, (_, pair, key))| {
            let p = Pair {
                cert: pair.cert.clone(),
                key: key.clone(),
            };
            server(
                i,
                &p,
                &format!("        ssl_password_file {};", passwords.display()),
            )
        })
        .collect();
    // A client certificate to an upstream, its key encrypted: the upstream (the last port
    // but one) names the certificate it was shown; the front (the last port) proxies to it.
    let n = keys.len();
    http.push_str(&format!(
        "    server {{\n        listen 127.0.0.1:{{PORT{n}}} ssl;\n        ssl_certificate {cert};\n        ssl_certificate_key {key};\n        ssl_verify_client optional_no_ca;\n        location / {{ return 200 \"shown $ssl_client_s_dn\\n\"; }}\n    }}\n    server {{\n        listen 127.0.0.1:{{PORT{front}}};\n        location / {{\n            proxy_pass https://127.0.0.1:{{PORT{n}}};\n            proxy_ssl_certificate {cert};\n            proxy_ssl_certificate_key {locked};\n            proxy_ssl_password_file {passwords};\n        }}\n    }}\n",
        front = n + 1,
        cert = ec.cert.display(),
        key = ec.key.display(),
        locked = keys[1].2.display(),
        passwords = passwords.display(),
    ));
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, n + 2, &main_config(&http)) else {
            continue;
        };
        let mut lines: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(i, (name, ..))| {
                let out = s_client(server.port(i), &[], &request("localhost", "/"));
                format!("{name}: {}", answer(&out))
            })
            .collect();
        let r = support::get(server.port(n + 1), "/").expect("answer");
        let upstream = format!("proxied: {} {}", r.status, r.body_text().trim());
        if kind == Kind::Portcullis {
            assert_eq!(upstream, "proxied: 200 shown CN=localhost");
        }
        if kind == Kind::Portcullis {
            for line in &lines {
                assert!(line.ends_with("HTTP/1.1 200 OK verify NONE"), "{line}");
            }
        }
        lines.push(upstream);
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

#[test]
fn key_and_crl_file_errors_are_nginxs() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let root = pki.self_signed("root", KeyKind::P256, "localhost");
    let locked = encrypt_key(
        &pki,
        "locked.pem",
        &root.key,
        "secret",
        &["pkey", "-aes256"],
    );
    let wrong = pki.write("wrong", "nope\nnot this\n");
    let garbage = pki.write(
        "garbage.crl",
        "-----BEGIN X509 CRL-----\n!!!!\n-----END X509 CRL-----\n",
    );
    let empty = pki.write("empty.crl", "nothing here\n");
    let with = |key: &Path, extra: &str| {
        server(
            0,
            &Pair {
                cert: root.cert.clone(),
                key: key.to_path_buf(),
            },
            extra,
        )
    };
    let cases = [
        with(
            &locked,
            &format!("        ssl_password_file {};", wrong.display()),
        ),
        with(&locked, ""),
        with(&locked, "        ssl_password_file /nonexistent/passwords;"),
        with(&root.key, "        ssl_crl /nonexistent/crl.pem;"),
        with(&root.key, &format!("        ssl_crl {};", empty.display())),
        with(
            &root.key,
            &format!("        ssl_crl {};", garbage.display()),
        ),
    ];
    let mut seen: Vec<(Kind, Vec<String>)> = Vec::new();
    for kind in kinds() {
        let mut lines = Vec::new();
        for http in &cases {
            let Some(line) = config_error(kind, http) else {
                break;
            };
            lines.push(line);
        }
        if !lines.is_empty() {
            seen.push((kind, lines));
        }
    }
    // The same call and file, and OpenSSL's reason among nginx's chain of error codes;
    // portcullis adds the file and line, which nginx cannot name for these.
    // With wrong passwords (the first case), what OpenSSL finds wrong depends on the
    // bytes a wrong key makes (its padding mostly, a decoding now and then): the call only.
    if let [(_, nginx), (_, ours)] = seen.as_slice() {
        for (i, (n, o)) in nginx.iter().zip(ours).enumerate() {
            let o = o.split(" in {PREFIX}/").next().unwrap();
            let (head, reason) = o.split_once(" (").unwrap();
            let reason = reason.trim_end_matches(')');
            assert!(
                n.starts_with(head) && (i == 0 || n.contains(reason)),
                "nginx:      {n}\nportcullis: {o}"
            );
        }
    }
}

#[test]
fn trusted_certificate_blocks_are_certificates() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let ca = pki.self_signed("ca", KeyKind::P256, "Client CA");
    let other_ca = pki.self_signed("other-ca", KeyKind::P256, "Other CA");
    let server_pair = pki.self_signed("server", KeyKind::P256, "localhost");
    let client = pki.signed("client", KeyKind::P256, "/CN=client", &ca);
    let trusted = |name: &str, cert: &Path, args: &[&str]| {
        let out = pki.path(name);
        let status = Command::new("openssl")
            .args(["x509", "-in", cert.to_str().unwrap(), "-trustout"])
            .args(["-out", out.to_str().unwrap()])
            .args(args)
            .status()
            .unwrap();
        assert!(status.success());
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains("BEGIN TRUSTED CERTIFICATE"), "{text}");
        out
    };
    let ca_trusted = trusted("ca-trusted.pem", &ca.cert, &["-addtrust", "clientAuth"]);
    let served = Pair {
        cert: trusted(
            "server-trusted.pem",
            &server_pair.cert,
            &["-addtrust", "serverAuth"],
        ),
        key: server_pair.key.clone(),
    };
    // Trust settings that leave out client certificates.
    let ca_for_servers = trusted("ca-servers.pem", &ca.cert, &["-addtrust", "serverAuth"]);
    let ca_rejected = trusted("ca-rejected.pem", &ca.cert, &["-addreject", "clientAuth"]);
    // Served as the certificate; trusted for client certificates (the CAs named to clients
    // are another's).
    let http: String = [&ca_trusted, &ca_for_servers, &ca_rejected]
        .iter()
        .enumerate()
        .map(|(i, file)| {
            server(
                i,
                &served,
                &format!(
                    "        ssl_verify_client on;\n        ssl_client_certificate {};\n        ssl_trusted_certificate {};",
                    other_ca.cert.display(),
                    file.display()
                ),
            )
        })
        .collect();
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 3, &main_config(&http)) else {
            continue;
        };
        let args = [
            "-cert",
            client.cert.to_str().unwrap(),
            "-key",
            client.key.to_str().unwrap(),
        ];
        let out = s_client(server.port(0), &args, &request("localhost", "/"));
        let subject = out
            .lines()
            .find(|l| l.starts_with("subject="))
            .unwrap_or("no subject")
            .to_string();
        let mut lines = vec![subject, answer(&out)];
        for i in [1, 2] {
            let out = s_client(server.port(i), &args, &request("localhost", "/"));
            lines.push(format!("server {i}: {}", answer(&out)));
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "subject=CN = localhost",
                    "HTTP/1.1 200 OK verify SUCCESS",
                    "server 1: HTTP/1.1 400 Bad Request -",
                    "server 2: HTTP/1.1 400 Bad Request -",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
    // As the CAs named to clients, nginx (OpenSSL's `SSL_load_client_CA_file`) takes only
    // plain certificates.
    let http = server(
        0,
        &server_pair,
        &format!(
            "        ssl_verify_client on;\n        ssl_client_certificate {};",
            ca_trusted.display()
        ),
    );
    for kind in kinds() {
        if let Some(line) = config_error(kind, &http) {
            assert!(
                line.starts_with(&format!(
                    "SSL_load_client_CA_file(\"{}\") failed",
                    ca_trusted.display()
                )) && line.contains("no start line"),
                "{kind}: {line}"
            );
        }
    }
}

#[test]
fn proxy_ssl_crl_refuses_a_revoked_upstream() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let root = pki.self_signed("root", KeyKind::P256, "Root CA");
    let ext = "basicConstraints=CA:FALSE\nsubjectAltName=DNS:upstream\n";
    let good = pki.issue("good", KeyKind::P256, "/CN=upstream", &root, ext);
    let bad = pki.issue("bad", KeyKind::P256, "/CN=upstream", &root, ext);
    let list = crl(&pki, "root.crl", &root, &[&bad], false);
    let old = crl(&pki, "old.crl", &root, &[], true);
    // Upstreams on PORT1 and PORT3 (good) and PORT2 (revoked); the front's paths choose one
    // and a list. /old has its own upstream: nginx offers a session made by one location to
    // another location's connections to the same address, with no check of its own list.
    let front = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        proxy_ssl_verify on;\n        proxy_ssl_name upstream;\n        proxy_ssl_trusted_certificate {root};\n        proxy_ssl_crl {crl};\n        location /good {{ proxy_pass https://127.0.0.1:{{PORT1}}; }}\n        location /bad {{ proxy_pass https://127.0.0.1:{{PORT2}}; }}\n        location /old {{ proxy_ssl_crl {old}; proxy_pass https://127.0.0.1:{{PORT3}}; }}\n    }}\n",
        root = root.cert.display(),
        crl = list.display(),
        old = old.display()
    );
    let http = format!(
        "{front}{}{}{}",
        tls_upstream(1, &good),
        tls_upstream(2, &bad),
        tls_upstream(3, &good)
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 4, &main_config(&http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for path in ["/good", "/bad", "/old"] {
            lines.push(upstream_answer(server.port(0), path));
        }
        for want in ["(23:certificate revoked)", "(12:CRL has expired)"] {
            let found = support::wait_until(std::time::Duration::from_secs(5), || {
                server.error_log().contains(want)
            });
            lines.push(format!("error log has {want}: {found}"));
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "/good -> 200 upstream 1",
                    "/bad -> 502",
                    "/old -> 502",
                    "error log has (23:certificate revoked): true",
                    "error log has (12:CRL has expired): true",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

#[test]
fn proxy_ssl_verify_takes_the_common_name_of_a_certificate_without_dns_names() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let root = pki.self_signed("root", KeyKind::P256, "Root CA");
    let leaf = "basicConstraints=CA:FALSE\n";
    let cn_only = pki.issue("cn", KeyKind::P256, "/CN=upstream", &root, leaf);
    let with_san = pki.issue(
        "san",
        KeyKind::P256,
        "/CN=upstream",
        &root,
        "basicConstraints=CA:FALSE\nsubjectAltName=DNS:other\n",
    );
    let wildcard = pki.issue("wild", KeyKind::P256, "/CN=*.example.com", &root, leaf);
    let front = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        proxy_ssl_verify on;\n        proxy_ssl_trusted_certificate {};\n        proxy_ssl_name upstream;\n        location /cn {{ proxy_pass https://127.0.0.1:{{PORT1}}; }}\n        location /san {{ proxy_pass https://127.0.0.1:{{PORT2}}; }}\n        location /wild {{ proxy_ssl_name api.example.com; proxy_pass https://127.0.0.1:{{PORT3}}; }}\n        location /wild-deep {{ proxy_ssl_name a.api.example.com; proxy_pass https://127.0.0.1:{{PORT3}}; }}\n        location /var {{ proxy_ssl_name $arg_n; proxy_pass https://127.0.0.1:{{PORT3}}; }}\n        location /sni {{ proxy_ssl_verify off; proxy_ssl_server_name on; proxy_ssl_name $arg_n:8443; proxy_pass https://127.0.0.1:{{PORT4}}; }}\n    }}\n",
        root.cert.display()
    );
    // /sni has an upstream of its own: nginx resumes a session another location made with
    // the same address, and the name that session was made for is the one the upstream sees.
    let http = format!(
        "{front}{}{}{}{}",
        tls_upstream(1, &cn_only),
        tls_upstream(2, &with_san),
        tls_upstream(3, &wildcard),
        tls_upstream(4, &cn_only)
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 5, &main_config(&http)) else {
            continue;
        };
        let lines: Vec<String> = [
            "/cn",
            "/san",
            "/wild",
            "/wild-deep",
            "/var?n=api.example.com",
            "/var?n=api.example.org",
            "/sni?n=named.test",
        ]
        .iter()
        .map(|path| upstream_answer(server.port(0), path))
        .collect();
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "/cn -> 200 upstream 1",
                    "/san -> 502",
                    "/wild -> 200 upstream 3",
                    "/wild-deep -> 502",
                    "/var?n=api.example.com -> 200 upstream 3",
                    "/var?n=api.example.org -> 502",
                    "/sni?n=named.test -> 200 upstream 4 named.test",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

#[test]
fn certificates_named_by_variables_follow_the_name_the_client_asks_for() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    pki.self_signed("a.test", KeyKind::P256, "a.test");
    pki.self_signed("b.test", KeyKind::Rsa2048, "b.test");
    // Read at the handshake, by the worker: as nginx's, it runs as `nobody` when started as
    // root, and a key only root may read is refused to it.
    let readable = |name: &str| {
        use std::os::unix::fs::PermissionsExt;
        let path = pki.path(name);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    };
    readable("a.test.key");
    readable("b.test.key");
    let dir = pki.path("");
    let dir = dir.display().to_string();
    let dir = dir.trim_end_matches('/');
    let http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}} ssl;\n        ssl_certificate {dir}/$ssl_server_name.crt;\n        ssl_certificate_key {dir}/${{ssl_server_name}}.key;\n        location / {{ return 200 \"name $ssl_server_name\\n\"; }}\n    }}\n"
    );
    let subject = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("subject="))
            .unwrap_or("no subject")
            .to_string()
    };
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for name in ["a.test", "b.test", "c.test"] {
            let out = s_client(server.port(0), &["-servername", name], &request(name, "/"));
            lines.push(format!("{name}: {} {}", subject(&out), answer(&out)));
        }
        // A certificate replaced on disk is the one the next handshake gets.
        let a = pki.self_signed("a2", KeyKind::P256, "a.test renewed");
        std::fs::copy(&a.cert, pki.path("a.test.crt")).unwrap();
        std::fs::copy(&a.key, pki.path("a.test.key")).unwrap();
        readable("a.test.key");
        let out = s_client(
            server.port(0),
            &["-servername", "a.test"],
            &request("a.test", "/"),
        );
        lines.push(format!("a.test again: {}", subject(&out)));
        let logged = support::wait_until(std::time::Duration::from_secs(5), || {
            server
                .error_log()
                .contains(&format!("cannot load certificate \"{dir}/c.test.crt\""))
        });
        lines.push(format!("c.test logged: {logged}"));
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "a.test: subject=CN = a.test HTTP/1.1 200 OK -",
                    "b.test: subject=CN = b.test HTTP/1.1 200 OK -",
                    "c.test: no subject no answer -",
                    "a.test again: subject=CN = a.test renewed",
                    "c.test logged: true",
                ],
            );
        }
        seen.push((kind, lines));
        // The first pair back, for the next server.
        let a = pki.self_signed("a3", KeyKind::P256, "a.test");
        std::fs::copy(&a.cert, pki.path("a.test.crt")).unwrap();
        std::fs::copy(&a.key, pki.path("a.test.key")).unwrap();
        readable("a.test.key");
    }
    support::compare(&seen);
    // Other variables than the name are not known at the handshake here: refused at load.
    let http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}} ssl;\n        ssl_certificate {dir}/$remote_addr.crt;\n        ssl_certificate_key {dir}/a.test.key;\n    }}\n"
    );
    if let Some(line) = config_error(Kind::Portcullis, &http) {
        assert!(
            line.starts_with(
                "variables other than \"$ssl_server_name\" in \"ssl_certificate\" are not supported yet"
            ),
            "{line}"
        );
    }
}

#[test]
fn client_certificates_to_upstreams_named_by_variables() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let server_pair = pki.self_signed("server", KeyKind::P256, "localhost");
    for name in ["one", "two"] {
        let pair = pki.self_signed(name, KeyKind::P256, name);
        // Read for each request, by the worker (`nobody` when started as root).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pair.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let dir = pki.path("");
    let dir = dir.display().to_string();
    let dir = dir.trim_end_matches('/');
    // Sessions are not reused: nginx resumes a session made with another certificate.
    let http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        location / {{\n            proxy_ssl_session_reuse off;\n            proxy_ssl_certificate {dir}/$arg_c.crt;\n            proxy_ssl_certificate_key {dir}/$arg_c.key;\n            proxy_pass https://127.0.0.1:{{PORT1}};\n        }}\n    }}\n    server {{\n        listen 127.0.0.1:{{PORT1}} ssl;\n        ssl_certificate {};\n        ssl_certificate_key {};\n        ssl_verify_client optional_no_ca;\n        location / {{ return 200 \"shown $ssl_client_s_dn\\n\"; }}\n    }}\n",
        server_pair.cert.display(),
        server_pair.key.display()
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &main_config(&http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for c in ["one", "two", "one", "none"] {
            let r = support::get(server.port(0), &format!("/?c={c}")).expect("answer");
            let body = if r.status == 200 {
                r.body_text()
            } else {
                String::new()
            };
            lines.push(format!("{c}: {} {}", r.status, body.trim()));
        }
        let want = format!("cannot load certificate \"{dir}/none.crt\"");
        let logged = support::wait_until(std::time::Duration::from_secs(5), || {
            server.error_log().contains(&want)
        });
        lines.push(format!("logged: {logged}"));
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "one: 200 shown CN=one",
                    "two: 200 shown CN=two",
                    "none: 500",
                    "logged: true",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

#[test]
fn an_intermediate_the_trust_settings_refuse_is_refused_when_sent() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let server_pair = pki.self_signed("server", KeyKind::P256, "localhost");
    let root = pki.self_signed("root", KeyKind::P256, "Root CA");
    let inter = pki.intermediate("inter", KeyKind::P256, "/CN=Inter CA", &root);
    let leaf = pki.signed("leaf", KeyKind::P256, "/CN=leaf", &inter);
    let refused = pki.path("inter-refused.pem");
    openssl(&[
        "x509",
        "-in",
        inter.cert.to_str().unwrap(),
        "-trustout",
        "-addreject",
        "clientAuth",
        "-out",
        refused.to_str().unwrap(),
    ]);
    let bundle = cat(&pki, "bundle.pem", &[&root.cert, &refused]);
    // The same certificate signed again (another signature, other bytes) is the same one.
    let again = pki.path("inter-again.pem");
    let csr = pki.path("inter-again.csr");
    let ext = pki.write(
        "inter-again.ext",
        "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\n",
    );
    openssl(&[
        "req",
        "-new",
        "-key",
        inter.key.to_str().unwrap(),
        "-subj",
        "/CN=Inter CA",
        "-out",
        csr.to_str().unwrap(),
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        csr.to_str().unwrap(),
        "-CA",
        root.cert.to_str().unwrap(),
        "-CAkey",
        root.key.to_str().unwrap(),
        "-CAcreateserial",
        "-days",
        "30",
        "-extfile",
        ext.to_str().unwrap(),
        "-out",
        again.to_str().unwrap(),
    ]);
    assert_ne!(
        std::fs::read(&again).unwrap(),
        std::fs::read(&inter.cert).unwrap()
    );
    let http = server(
        0,
        &server_pair,
        &format!(
            "        ssl_verify_client optional;\n        ssl_verify_depth 2;\n        ssl_client_certificate {};\n        error_page 495 = /why;\n        location = /why {{ return 200 \"verify $ssl_client_verify\\n\"; }}",
            bundle.display()
        ),
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for chain in [&inter.cert, &again] {
            let args = [
                "-cert",
                leaf.cert.to_str().unwrap(),
                "-key",
                leaf.key.to_str().unwrap(),
                "-cert_chain",
                chain.to_str().unwrap(),
            ];
            let out = s_client(server.port(0), &args, &request("localhost", "/"));
            lines.push(answer(&out));
        }
        if kind == Kind::Portcullis {
            for line in &lines {
                assert_eq!(
                    line,
                    "HTTP/1.1 200 OK verify FAILED:unsuitable certificate purpose"
                );
            }
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

#[test]
fn version_1_upstream_certificates_as_nginx() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let root = pki.self_signed("root", KeyKind::P256, "Root CA");
    let self_v1 = pki.self_signed_v1("selfv1", KeyKind::P256, "upstream");
    let signed_v1 = pki.issue("signedv1", KeyKind::P256, "/CN=upstream", &root, "");
    let front = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        location /off {{ proxy_pass https://127.0.0.1:{{PORT1}}; }}\n        location /on {{ proxy_ssl_verify on; proxy_ssl_name upstream; proxy_ssl_trusted_certificate {root}; proxy_pass https://127.0.0.1:{{PORT2}}; }}\n        location /wrong-name {{ proxy_ssl_verify on; proxy_ssl_name other; proxy_ssl_trusted_certificate {root}; proxy_pass https://127.0.0.1:{{PORT3}}; }}\n    }}\n",
        root = root.cert.display()
    );
    let http = format!(
        "{front}{}{}{}",
        tls_upstream(1, &self_v1),
        tls_upstream(2, &signed_v1),
        tls_upstream(3, &signed_v1)
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 4, &main_config(&http)) else {
            continue;
        };
        let lines: Vec<String> = ["/off", "/on", "/wrong-name"]
            .iter()
            .map(|path| upstream_answer(server.port(0), path))
            .collect();
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "/off -> 200 upstream 1",
                    "/on -> 200 upstream 2",
                    "/wrong-name -> 502",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}

/// `ssl_session_ticket_key` rotation as nginx's documentation describes it: the first file's
/// key makes tickets, every listed key opens them; after a reload that puts a new key first
/// and keeps the old one second, tickets made with the old key still resume (and the client
/// gets one made with the new key), and once the old key is gone they no longer do. Over
/// TLS 1.2 and 1.3, under nginx and portcullis.
#[test]
fn session_ticket_keys_rotate_as_nginx() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let pair = pki.self_signed("ec", KeyKind::P256, "localhost");
    let dir = TempDir::new("ticket-keys");
    let key_file = |name: &str| {
        let mut material = [0u8; 80];
        let mut f = std::fs::File::open("/dev/urandom").expect("open /dev/urandom");
        std::io::Read::read_exact(&mut f, &mut material).expect("read /dev/urandom");
        dir.write(name, material)
    };
    let old = key_file("old.key");
    let new = key_file("new.key");
    let conf = |generation: u32, keys: &[&Path]| {
        let lines: String = keys
            .iter()
            .map(|k| format!("        ssl_session_ticket_key {};\n", k.display()))
            .collect();
        main_config(&format!(
            "{}    server {{\n        listen 127.0.0.1:{{PORT1}};\n        location / {{ return 200 \"generation {generation}\"; }}\n    }}\n",
            server(
                0,
                &pair,
                &format!("        ssl_protocols TLSv1.2 TLSv1.3;\n{lines}")
            )
            .replace("verify $ssl_client_verify", "reused $ssl_session_reused")
        ))
    };
    let want = [
        "-tls1_2: old key: made . | old then new: old ticket r, new ticket ., renewed unsaved | new only: old ticket ., new ticket r, renewed unsaved",
        "-tls1_3: old key: made . | old then new: old ticket r, new ticket ., renewed r | new only: old ticket ., new ticket r, renewed r",
    ];
    for kind in kinds() {
        let Some(server) = Server::start(kind, 2, &conf(1, &[&old])) else {
            continue;
        };
        let mut seen = Vec::new();
        let reloads = std::cell::Cell::new(0);
        for proto in ["-tls1_2", "-tls1_3"] {
            let session = |name: &str| server.path(&format!("{name}{proto}"));
            let reused = |args: &[&str]| {
                // s_client saves no session from a TLS 1.2 resumption.
                if let ["-sess_in", file, ..] = args {
                    if !Path::new(file).exists() {
                        return "unsaved".to_owned();
                    }
                }
                let mut all = vec![proto];
                all.extend_from_slice(args);
                let out = s_client(server.port(0), &all, &request("localhost", "/"));
                out.split_once("reused ")
                    .map(|(_, r)| r.chars().take(1).collect::<String>())
                    .unwrap_or_else(|| format!("no answer: {out}"))
            };
            let path = |p: &PathBuf| p.to_str().unwrap().to_owned();
            let (a, b, renewed) = (
                path(&session("a")),
                path(&session("b")),
                path(&session("renewed")),
            );
            let reload = |generation: u32, keys: &[&Path]| {
                server.write_config(&conf(generation, keys));
                server.signal(libc::SIGHUP);
                reloads.set(reloads.get() + 1);
                let want = format!("generation {generation}");
                // Served by the new configuration, and (nginx) the old worker gone: until
                // then it may take new connections too.
                assert!(
                    support::wait_until(std::time::Duration::from_secs(10), || {
                        support::get(server.port(1), "/").is_ok_and(|r| r.body_text() == want)
                            && (kind != Kind::Nginx
                                || server.error_log().matches("exited with code").count()
                                    >= reloads.get())
                    }),
                    "{kind}: the reload to {want} did not happen"
                );
            };
            let base = if proto == "-tls1_2" { 0 } else { 10 };
            reload(base + 1, &[&old]);
            let made = reused(&["-sess_out", &a]);
            reload(base + 2, &[&new, &old]);
            let old_then_new = [
                reused(&["-sess_in", &a, "-sess_out", &renewed]),
                reused(&["-sess_out", &b]),
            ];
            let renewed_after = reused(&["-sess_in", &renewed]);
            reload(base + 3, &[&new]);
            let new_only = [
                reused(&["-sess_in", &a]),
                reused(&["-sess_in", &b]),
                reused(&["-sess_in", &renewed]),
            ];
            seen.push(format!(
                "{proto}: old key: made {made} | old then new: old ticket {}, new ticket {}, renewed {renewed_after} | new only: old ticket {}, new ticket {}, renewed {}",
                old_then_new[0], old_then_new[1], new_only[0], new_only[1], new_only[2]
            ));
        }
        assert_eq!(seen, want, "{kind}");
    }
}

/// `proxy_ssl_verify_depth` (default 1) against upstreams whose certificates are signed by
/// the trusted root directly, through one intermediate and through two (each sent by the
/// upstream): which depths let each through, under nginx and portcullis. OpenSSL counts the
/// certificates between the leaf and the root: depth 0 takes a leaf the root signed.
#[test]
fn proxy_ssl_verify_depth_counts_as_nginx_counts() {
    if !need_openssl() {
        return;
    }
    let pki = Pki::new();
    let root = pki.self_signed("root", KeyKind::P256, "Root CA");
    let inter1 = pki.intermediate("inter1", KeyKind::P256, "/CN=Intermediate 1", &root);
    let inter2 = pki.intermediate("inter2", KeyKind::P256, "/CN=Intermediate 2", &inter1);
    let direct = pki.signed("direct", KeyKind::P256, "/CN=upstream", &root);
    let one = pki.signed("one", KeyKind::P256, "/CN=upstream", &inter1);
    let two = pki.signed("two", KeyKind::P256, "/CN=upstream", &inter2);
    let with_chain = |name: &str, leaf: &Pair, cas: &[&Pair]| {
        let mut parts = vec![leaf.cert.as_path()];
        parts.extend(cas.iter().map(|c| c.cert.as_path()));
        Pair {
            cert: cat(&pki, name, &parts),
            key: leaf.key.clone(),
        }
    };
    let upstreams = [
        with_chain("direct-chain.pem", &direct, &[]),
        with_chain("one-chain.pem", &one, &[&inter1]),
        with_chain("two-chain.pem", &two, &[&inter2, &inter1]),
    ];
    let mut locations = String::new();
    for depth in ["", "0", "1", "2", "3"] {
        for (i, name) in ["direct", "one", "two"].iter().enumerate() {
            let setting = if depth.is_empty() {
                String::new()
            } else {
                format!("proxy_ssl_verify_depth {depth}; ")
            };
            locations += &format!(
                "        location /{name}/{depth} {{ {setting}proxy_pass https://127.0.0.1:{{PORT{}}}/; }}\n",
                i + 1
            );
        }
    }
    let mut http = format!(
        "    server {{\n        listen 127.0.0.1:{{PORT0}};\n        proxy_ssl_verify on;\n        proxy_ssl_trusted_certificate {};\n        proxy_ssl_name upstream;\n        proxy_ssl_session_reuse off;\n{locations}    }}\n",
        root.cert.display()
    );
    for (i, pair) in upstreams.iter().enumerate() {
        http += &tls_upstream(i + 1, pair);
    }
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 4, &main_config(&http)) else {
            continue;
        };
        let mut lines = Vec::new();
        for depth in ["", "0", "1", "2", "3"] {
            let statuses: Vec<String> = ["direct", "one", "two"]
                .iter()
                .map(|name| {
                    let r =
                        support::get(server.port(0), &format!("/{name}/{depth}")).expect("answer");
                    format!("{name} {}", r.status)
                })
                .collect();
            let depth = if depth.is_empty() { "default" } else { depth };
            lines.push(format!("depth {depth}: {}", statuses.join(", ")));
        }
        if kind == Kind::Portcullis {
            support::expect_lines(
                &lines,
                &[
                    "depth default: direct 200, one 200, two 502",
                    "depth 0: direct 200, one 502, two 502",
                    "depth 1: direct 200, one 200, two 502",
                    "depth 2: direct 200, one 200, two 200",
                    "depth 3: direct 200, one 200, two 200",
                ],
            );
        }
        seen.push((kind, lines));
    }
    support::compare(&seen);
}
