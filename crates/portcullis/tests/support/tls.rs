//! TLS helpers for the black-box tests: certificates made with the `openssl` command for each
//! test (never stored), and `openssl s_client` runs whose output the tests read.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::TempDir;

/// How long one `openssl s_client` run may take before the test fails.
const S_CLIENT_DEADLINE: Duration = Duration::from_secs(10);

/// The key types the seeds use.
#[derive(Clone, Copy, Debug)]
pub enum KeyKind {
    P256,
    P384,
    Rsa2048,
}

impl KeyKind {
    fn genpkey_args(self) -> &'static [&'static str] {
        match self {
            KeyKind::P256 => &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
            KeyKind::P384 => &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"],
            KeyKind::Rsa2048 => &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
        }
    }
}

/// A certificate and its key on disk.
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A directory of certificates made for one test, removed with it.
pub struct Pki {
    dir: TempDir,
}

/// Whether the `openssl` command is installed; tests skip visibly without it.
pub fn openssl_available() -> bool {
    Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs the `openssl` command, which must succeed.
pub fn openssl(args: &[&str]) {
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

impl Pki {
    pub fn new() -> Pki {
        Pki {
            dir: TempDir::new("pki"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `contents` as `name` in the directory.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        self.dir.write(name, contents)
    }

    fn key(&self, name: &str, kind: KeyKind) -> PathBuf {
        let key = self.path(&format!("{name}.key"));
        let key_s = key.display().to_string();
        let mut args = vec!["genpkey"];
        args.extend_from_slice(kind.genpkey_args());
        args.extend_from_slice(&["-out", &key_s]);
        openssl(&args);
        key
    }

    /// A self-signed X.509 version 1 certificate for `cn`: what `openssl req -x509` makes
    /// from a configuration that names no extensions.
    pub fn self_signed_v1(&self, name: &str, kind: KeyKind, cn: &str) -> Pair {
        let key = self.key(name, kind);
        let cert = self.path(&format!("{name}.crt"));
        let cnf = self.write(
            &format!("{name}.cnf"),
            &format!("[req]\ndistinguished_name=dn\nprompt=no\n[dn]\nCN={cn}\n"),
        );
        openssl(&[
            "req",
            "-x509",
            "-new",
            "-key",
            &key.display().to_string(),
            "-out",
            &cert.display().to_string(),
            "-days",
            "30",
            "-config",
            &cnf.display().to_string(),
        ]);
        Pair { cert, key }
    }

    /// A self-signed certificate for `cn` with the extensions `ext` (`-addext` values).
    pub fn self_signed_with(&self, name: &str, kind: KeyKind, cn: &str, ext: &[&str]) -> Pair {
        let key = self.key(name, kind);
        let cert = self.path(&format!("{name}.crt"));
        let (key_s, cert_s, subj) = (
            key.display().to_string(),
            cert.display().to_string(),
            format!("/CN={cn}"),
        );
        let mut args = vec![
            "req", "-x509", "-new", "-key", &key_s, "-out", &cert_s, "-days", "30", "-subj", &subj,
        ];
        for e in ext {
            args.extend(["-addext", e]);
        }
        openssl(&args);
        Pair { cert, key }
    }

    /// A self-signed certificate for `cn` (also its DNS name).
    pub fn self_signed(&self, name: &str, kind: KeyKind, cn: &str) -> Pair {
        let key = self.key(name, kind);
        let cert = self.path(&format!("{name}.crt"));
        openssl(&[
            "req",
            "-x509",
            "-new",
            "-key",
            &key.display().to_string(),
            "-out",
            &cert.display().to_string(),
            "-days",
            "30",
            "-subj",
            &format!("/CN={cn}"),
            "-addext",
            &format!("subjectAltName=DNS:{cn}"),
        ]);
        Pair { cert, key }
    }

    /// A certificate for `subject` signed by `ca` (a pair made by [`Pki::self_signed`] with
    /// CA rights, as `openssl req -x509` gives).
    pub fn signed(&self, name: &str, kind: KeyKind, subject: &str, ca: &Pair) -> Pair {
        self.issue(
            name,
            kind,
            subject,
            ca,
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth,serverAuth\n",
        )
    }

    /// An intermediate CA for `subject`, signed by `ca`.
    pub fn intermediate(&self, name: &str, kind: KeyKind, subject: &str, ca: &Pair) -> Pair {
        self.issue(
            name,
            kind,
            subject,
            ca,
            "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\n",
        )
    }

    /// A certificate for `subject` signed by `ca`, with the extensions `ext`.
    pub fn issue(&self, name: &str, kind: KeyKind, subject: &str, ca: &Pair, ext: &str) -> Pair {
        let key = self.key(name, kind);
        let csr = self.path(&format!("{name}.csr"));
        let cert = self.path(&format!("{name}.crt"));
        openssl(&[
            "req",
            "-new",
            "-key",
            &key.display().to_string(),
            "-out",
            &csr.display().to_string(),
            "-subj",
            subject,
        ]);
        let ext = self.write(&format!("{name}.ext"), ext);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr.display().to_string(),
            "-CA",
            &ca.cert.display().to_string(),
            "-CAkey",
            &ca.key.display().to_string(),
            "-CAcreateserial",
            "-out",
            &cert.display().to_string(),
            "-days",
            "30",
            "-extfile",
            &ext.display().to_string(),
        ]);
        Pair { cert, key }
    }
}

/// Runs `openssl s_client` against 127.0.0.1:`port` with `args`, sends `input` (an HTTP
/// request that closes the connection, or nothing to only shake hands) and returns everything
/// it printed.
pub fn s_client(port: u16, args: &[&str], input: &str) -> String {
    let connect = format!("127.0.0.1:{port}");
    let mut child = Command::new("timeout")
        .arg(S_CLIENT_DEADLINE.as_secs().to_string())
        .args(["openssl", "s_client", "-connect", &connect])
        // With a request to send, wait for the server to close; without one, end at once.
        .args(if input.is_empty() {
            None
        } else {
            Some("-ign_eof")
        })
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn openssl s_client");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    let out = child.wait_with_output().expect("wait for openssl s_client");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A request that makes the server close after answering, so `s_client -ign_eof` ends.
pub fn request(host: &str, path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}
