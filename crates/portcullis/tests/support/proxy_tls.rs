//! Upstreams over TLS for the black-box tests of `proxy_pass https://`: an nginx serving a
//! 1 KB file on two TLS ports and one plain port, with a certificate signed by a CA made for
//! the test, and an access log that tells each TLS connection and whether it resumed.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::{main_config, read_lossy, wait_until, Kind, Server};
use crate::tls_support::{KeyKind, Pair, Pki};

/// The name in the upstream's certificate.
pub const UPSTREAM_NAME: &str = "upstream.test";
/// How long an access log line may take to be written.
const LOG_DEADLINE: Duration = Duration::from_secs(5);
/// The size of the file the upstream serves, as the seeds' reverse-proxy test.
pub const FILE_SIZE: usize = 1024;

/// Certificates of one test: the upstream's CA, a CA that signed nothing of it, and the
/// upstream's certificate (for [`UPSTREAM_NAME`], signed by the first CA).
pub struct Certs {
    /// Held: the files live as long as the certificates are used.
    _pki: Pki,
    pub ca: Pair,
    pub other_ca: Pair,
    pub upstream: Pair,
}

impl Certs {
    pub fn new() -> Certs {
        let pki = Pki::new();
        let ca = pki.self_signed("ca", KeyKind::P256, "Upstream Test CA");
        let other_ca = pki.self_signed("other-ca", KeyKind::P256, "Other Test CA");
        let upstream = leaf(&pki, "upstream", UPSTREAM_NAME, &ca);
        Certs {
            _pki: pki,
            ca,
            other_ca,
            upstream,
        }
    }
}

/// A server certificate for `dns` (in subjectAltName, which name checks read) signed by `ca`.
fn leaf(pki: &Pki, name: &str, dns: &str, ca: &Pair) -> Pair {
    let key = pki.path(&format!("{name}.key"));
    let csr = pki.path(&format!("{name}.csr"));
    let cert = pki.path(&format!("{name}.crt"));
    let ext = pki.write(
        &format!("{name}.ext"),
        &format!(
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:{dns}\n"
        ),
    );
    let p = |p: &PathBuf| p.display().to_string();
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &p(&key),
        "-out",
        &p(&csr),
        "-subj",
        &format!("/CN={dns}"),
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &p(&csr),
        "-CA",
        &p(&ca.cert),
        "-CAkey",
        &p(&ca.key),
        "-CAcreateserial",
        "-out",
        &p(&cert),
        "-days",
        "30",
        "-extfile",
        &p(&ext),
    ]);
    Pair { cert, key }
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The bytes of the served file: every byte says where it is, so a cut or shifted body shows.
pub fn file_body() -> Vec<u8> {
    (0..FILE_SIZE).map(|i| b'a' + (i % 26) as u8).collect()
}

/// An nginx upstream: `{PORT0}` and `{PORT1}` speak TLS with `certs.upstream`, `{PORT2}` is
/// plain HTTP. `/1kb.bin` is [`file_body`]; every other path answers "ok". Returns `None`
/// when nginx is not installed.
pub fn start_upstream(certs: &Certs) -> Option<Server> {
    let http = format!(
        "    log_format tls '$connection $ssl_session_reused $ssl_server_name $uri';\n\
         \x20   server {{\n\
         \x20       listen 127.0.0.1:{{PORT0}} ssl;\n\
         \x20       listen 127.0.0.1:{{PORT1}} ssl;\n\
         \x20       ssl_certificate {cert};\n\
         \x20       ssl_certificate_key {key};\n\
         \x20       ssl_session_cache shared:up:1m;\n\
         \x20       keepalive_requests 10000;\n\
         \x20       access_log {{PREFIX}}/tls.log tls;\n\
         \x20       root {{PREFIX}}/html;\n\
         \x20       location = /1kb.bin {{ }}\n\
         \x20       location / {{ return 200 \"ok\\n\"; }}\n\
         \x20   }}\n\
         \x20   server {{\n\
         \x20       listen 127.0.0.1:{{PORT2}};\n\
         \x20       location / {{ return 200 \"plain\\n\"; }}\n\
         \x20   }}\n",
        cert = certs.upstream.cert.display(),
        key = certs.upstream.key.display(),
    );
    let server = Server::start(Kind::Nginx, 3, &main_config(&http))?;
    std::fs::create_dir_all(server.path("html")).expect("create html dir");
    std::fs::write(server.path("html/1kb.bin"), file_body()).expect("write file");
    Some(server)
}

/// One request as the upstream logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    /// nginx's connection serial number.
    pub connection: String,
    /// Whether the TLS session was resumed.
    pub reused: bool,
    /// The SNI name received, "-" without one.
    pub server_name: String,
    pub uri: String,
}

/// The upstream's access log lines for `uri`, once `count` of them are written.
pub fn logged(upstream: &Server, uri: &str, count: usize) -> Vec<Logged> {
    let path = upstream.path("tls.log");
    let read = || -> Vec<Logged> {
        read_lossy(&path)
            .lines()
            .filter_map(|line| {
                let mut f = line.split(' ');
                Some(Logged {
                    connection: f.next()?.to_string(),
                    reused: f.next()? == "r",
                    server_name: f.next()?.to_string(),
                    uri: f.next()?.to_string(),
                })
            })
            .filter(|l| l.uri == uri)
            .collect()
    };
    wait_until(LOG_DEADLINE, || read().len() >= count);
    read()
}
