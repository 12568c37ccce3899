//! The files a scenario needs on disk: the docroot, certificates, JWT keys and tokens.
//!
//! Files are random bytes, as the seeds' `dd if=/dev/urandom bs=1024 count=N`. Certificates
//! and keys are made with the `openssl` command, as the seeds made theirs, and so are the
//! JWT signatures: the tokens are signed by the same library that nginx would verify them
//! with, independently of any code under test.

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::scenario::{Cert, Jwt, Layout, FILES};

/// Length of the HS256 secret: 102 characters of 62 symbols, 607 bits, printable so that
/// HAProxy's `jwt_verify` can take it as a string (seed 001 used 816 bits after base64url).
const HS256_SECRET_LEN: usize = 102;
/// How long the tokens stay valid: longer than any benchmark.
const TOKEN_LIFETIME_S: u64 = 365 * 24 * 3600;
const SECRET_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Why an asset could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("openssl {args}: {message}")]
    Openssl { args: String, message: String },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> AssetError + '_ {
    move |source| AssetError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn random_bytes(len: usize) -> Result<Vec<u8>, AssetError> {
    let path = Path::new("/dev/urandom");
    let mut buf = vec![0; len];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(io_error(path))?;
    Ok(buf)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), AssetError> {
    fs::write(path, bytes).map_err(io_error(path))
}

fn mkdir(path: &Path) -> Result<(), AssetError> {
    fs::create_dir_all(path).map_err(io_error(path))
}

/// Runs openssl with `args`, `input` on its stdin, and returns its stdout.
fn openssl(args: &[&str], input: &[u8]) -> Result<Vec<u8>, AssetError> {
    let failed = |message: String| AssetError::Openssl {
        args: args.join(" "),
        message,
    };
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input).map_err(|e| failed(e.to_string()))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| failed(e.to_string()))?;
    if !output.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        ));
    }
    Ok(output.stdout)
}

/// The docroot with every file of [`FILES`], also under `api_new/` where the API gateway's
/// rewritten requests look for them. Directories are world-readable: nginx's workers drop
/// to an unprivileged user when started as root.
pub fn docroot(layout: &Layout) -> Result<(), AssetError> {
    let html = layout.html();
    let api = html.join("api_new");
    mkdir(&api)?;
    for (name, len) in FILES {
        let bytes = random_bytes(*len)?;
        write(&html.join(name), &bytes)?;
        write(&api.join(name), &bytes)?;
    }
    for dir in [&layout.dir, &html, &api] {
        world_readable(dir, 0o755)?;
    }
    Ok(())
}

fn world_readable(path: &Path, mode: u32) -> Result<(), AssetError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_error(path))
}

/// A self-signed certificate and its key, and both in one PEM for HAProxy.
pub fn certificate(layout: &Layout, cert: Cert) -> Result<(), AssetError> {
    let (crt, key) = (layout.cert(cert), layout.key(cert));
    if let Some(dir) = crt.parent() {
        mkdir(dir)?;
        world_readable(dir, 0o755)?;
    }
    let newkey: &[&str] = match cert {
        Cert::Ecdsa => &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
        Cert::Rsa => &["-newkey", "rsa:2048"],
    };
    let (crt_s, key_s) = (crt.display().to_string(), key.display().to_string());
    let mut args = vec!["req", "-x509"];
    args.extend_from_slice(newkey);
    args.extend_from_slice(&[
        "-nodes",
        "-days",
        "30",
        "-subj",
        "/CN=localhost",
        "-keyout",
        &key_s,
        "-out",
        &crt_s,
    ]);
    openssl(&args, b"")?;
    let mut pem = fs::read(&crt).map_err(io_error(&crt))?;
    pem.extend(fs::read(&key).map_err(io_error(&key))?);
    write(&layout.pem(cert), &pem)?;
    for file in [&crt, &key, &layout.pem(cert)] {
        world_readable(file, 0o644)?;
    }
    Ok(())
}

/// What a JWT scenario hands the load generator and HAProxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtAssets {
    /// The signed token wrk sends as `Authorization: Bearer ...`.
    pub token: String,
    /// The HS256 secret as text (HAProxy takes it so); empty for RS256.
    pub secret: String,
}

/// Makes the key, writes the JWK file the nginx.conf names (and for RS256 the public key
/// as PEM, for HAProxy) and signs a token.
pub fn jwt(layout: &Layout, jwt: Jwt) -> Result<JwtAssets, AssetError> {
    let jwk_path = layout.jwk();
    if let Some(dir) = jwk_path.parent() {
        mkdir(dir)?;
        world_readable(dir, 0o755)?;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let header = format!(r#"{{"alg":"{}","typ":"JWT"}}"#, jwt.alg());
    let payload = format!(
        r#"{{"iss":"portcullis-bench","sub":"bench","iat":{now},"exp":{}}}"#,
        now + TOKEN_LIFETIME_S
    );
    let signing_input = format!(
        "{}.{}",
        base64url(header.as_bytes()),
        base64url(payload.as_bytes())
    );
    let (signature, secret, jwk) = match jwt {
        Jwt::Hs256 => {
            let secret: String = random_bytes(HS256_SECRET_LEN)?
                .iter()
                .map(|b| SECRET_ALPHABET[usize::from(*b) % SECRET_ALPHABET.len()] as char)
                .collect();
            let mac_key = format!("key:{secret}");
            let signature = openssl(
                &[
                    "dgst", "-sha256", "-mac", "HMAC", "-macopt", &mac_key, "-binary",
                ],
                signing_input.as_bytes(),
            )?;
            let jwk = format!(
                r#"{{"keys":[{{"kty":"oct","kid":"bench","alg":"HS256","k":"{}"}}]}}"#,
                base64url(secret.as_bytes())
            );
            (signature, secret, jwk)
        }
        Jwt::Rs256 => {
            let key = jwk_path.with_file_name("rs256.key");
            let key_s = key.display().to_string();
            openssl(
                &[
                    "genpkey",
                    "-algorithm",
                    "RSA",
                    "-pkeyopt",
                    "rsa_keygen_bits:2048",
                    "-out",
                    &key_s,
                ],
                b"",
            )?;
            let public = layout.jwt_public_pem();
            let public_s = public.display().to_string();
            openssl(&["pkey", "-in", &key_s, "-pubout", "-out", &public_s], b"")?;
            world_readable(&public, 0o644)?;
            let signature = openssl(
                &["dgst", "-sha256", "-sign", &key_s, "-binary"],
                signing_input.as_bytes(),
            )?;
            let modulus = openssl(&["rsa", "-in", &key_s, "-noout", "-modulus"], b"")?;
            let modulus = String::from_utf8_lossy(&modulus);
            let hex = modulus.trim().trim_start_matches("Modulus=");
            let n = from_hex(hex).ok_or_else(|| AssetError::Openssl {
                args: "rsa -modulus".to_owned(),
                message: format!("unexpected output {modulus:?}"),
            })?;
            let jwk = format!(
                r#"{{"keys":[{{"kty":"RSA","kid":"bench","alg":"RS256","use":"sig","n":"{}","e":"AQAB"}}]}}"#,
                base64url(&n)
            );
            (signature, String::new(), jwk)
        }
    };
    write(&jwk_path, jwk.as_bytes())?;
    world_readable(&jwk_path, 0o644)?;
    Ok(JwtAssets {
        token: format!("{signing_input}.{}", base64url(&signature)),
        secret,
    })
}

/// A wrk script that sends the token with every request.
pub fn wrk_script(path: &Path, token: &str) -> Result<(), AssetError> {
    let script = format!("wrk.headers[\"Authorization\"] = \"Bearer {token}\"\n");
    write(path, script.as_bytes())
}

/// Base64url without padding (RFC 7515).
pub fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn from_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.is_empty() || hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_matches_rfc_4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in cases {
            assert_eq!(base64url(input.as_bytes()), expected);
        }
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn hex_decoding() {
        assert_eq!(from_hex("00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
    }
}
