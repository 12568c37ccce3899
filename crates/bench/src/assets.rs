//! The files a scenario needs on disk: the docroot, certificates, JWT keys and tokens.
//!
//! Files are random bytes, as the seeds' `dd if=/dev/urandom bs=1024 count=N`. Certificates
//! and keys are made with the `openssl` command, as the seeds made theirs, and so are the
//! JWT signatures: the tokens are signed by the same library that nginx would verify them
//! with, independently of any code under test. The thousands of tokens of a scenario that
//! sends a different token with every request are the exception: one openssl process per
//! token would take minutes, so they are signed in process with aws-lc-rs, with the key
//! openssl made; HAProxy checks them with OpenSSL in the same scenario, and the tests with
//! the `openssl` command.

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{RsaKeyPair, RSA_PKCS1_SHA256};

use crate::scenario::{Cert, Jwt, Layout, FILES, PAGE, PHP_SCRIPT};

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
    #[error("signing RS256 tokens: {0}")]
    Sign(String),
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

/// An HTML page of `len` bytes: paragraphs of words from a small vocabulary in an order a
/// fixed generator picks, so it compresses about as a web page does (three to four times at
/// gzip's level 1) and is the same on every run.
fn html_page(len: usize) -> Vec<u8> {
    const WORDS: [&str; 24] = [
        "the",
        "server",
        "request",
        "answer",
        "proxy",
        "gateway",
        "cache",
        "client",
        "header",
        "body",
        "connection",
        "worker",
        "upstream",
        "location",
        "module",
        "phase",
        "status",
        "token",
        "file",
        "page",
        "time",
        "limit",
        "zone",
        "name",
    ];
    let mut out = b"<!DOCTYPE html>\n<html><head><title>A page</title></head><body>\n".to_vec();
    let mut state: u32 = 2463534242;
    while out.len() < len {
        out.extend_from_slice(b"<p>");
        for _ in 0..12 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            out.extend_from_slice(WORDS[state as usize % WORDS.len()].as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(b"</p>\n");
    }
    out.truncate(len);
    out
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
    write(&html.join(PAGE.0), &html_page(PAGE.1))?;
    write(&html.join(PHP_SCRIPT.0), PHP_SCRIPT.1.as_bytes())?;
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
    let signing_input = signing_input(jwt, "bench", None);
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
            let key = rs256_key(layout);
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

/// The JOSE header and claims of a token, base64url-encoded and joined by a dot: what its
/// signature covers. `jti`, when given, tells tokens with the same subject apart.
fn signing_input(jwt: Jwt, sub: &str, jti: Option<usize>) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let header = format!(r#"{{"alg":"{}","typ":"JWT"}}"#, jwt.alg());
    let jti = jti.map(|n| format!(r#","jti":"{n}""#)).unwrap_or_default();
    let payload = format!(
        r#"{{"iss":"portcullis-bench","sub":"{sub}"{jti},"iat":{now},"exp":{}}}"#,
        now + TOKEN_LIFETIME_S
    );
    format!(
        "{}.{}",
        base64url(header.as_bytes()),
        base64url(payload.as_bytes())
    )
}

/// The RS256 private key [`jwt`] makes.
fn rs256_key(layout: &Layout) -> std::path::PathBuf {
    layout.jwk().with_file_name("rs256.key")
}

/// `count` distinct RS256 tokens (subjects `bench-0`, `bench-1`, ... and as many `jti`s),
/// signed with the key [`jwt`] made for [`Jwt::Rs256`], on every CPU at once.
pub fn rs256_tokens(layout: &Layout, count: usize) -> Result<Vec<String>, AssetError> {
    let key = rs256_key(layout);
    let key_s = key.display().to_string();
    // OpenSSL 3.0 writes RSAPrivateKey (PKCS #1) as DER where other versions write PKCS #8.
    let der = openssl(&["pkey", "-in", &key_s, "-outform", "DER"], b"")?;
    let key_pair = RsaKeyPair::from_pkcs8(&der)
        .or_else(|_| RsaKeyPair::from_der(&der))
        .map_err(|e| AssetError::Sign(format!("{key_s}: {e}")))?;
    let threads = thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = count.div_ceil(threads).max(1);
    let indexes: Vec<usize> = (0..count).collect();
    thread::scope(|scope| {
        let workers: Vec<_> = indexes
            .chunks(chunk)
            .map(|part| {
                let key_pair = &key_pair;
                scope.spawn(move || {
                    let rng = SystemRandom::new();
                    let mut signature = vec![0; key_pair.public_modulus_len()];
                    part.iter()
                        .map(|&i| {
                            let input = signing_input(Jwt::Rs256, &format!("bench-{i}"), Some(i));
                            key_pair
                                .sign(&RSA_PKCS1_SHA256, &rng, input.as_bytes(), &mut signature)
                                .map_err(|e| AssetError::Sign(e.to_string()))?;
                            Ok(format!("{input}.{}", base64url(&signature)))
                        })
                        .collect::<Result<Vec<String>, AssetError>>()
                })
            })
            .collect();
        let mut tokens = Vec::with_capacity(count);
        for worker in workers {
            let part = worker
                .join()
                .map_err(|_| AssetError::Sign("a signing thread panicked".to_owned()))??;
            tokens.extend(part);
        }
        Ok(tokens)
    })
}

/// A wrk script that sends the token with every request.
pub fn wrk_script(path: &Path, token: &str) -> Result<(), AssetError> {
    let script = format!("wrk.headers[\"Authorization\"] = \"Bearer {token}\"\n");
    write(path, script.as_bytes())
}

/// A wrk script that sends a different token with every request. wrk's thread `k` of
/// `threads` takes tokens `k`, `k + threads`, ... so no two threads send the same one, and
/// cycles through them; a token comes back after every other one has been sent. The
/// requests are formatted once, when a thread starts, so the per-request Lua is an index
/// and a table lookup (wrk 4.1 calls `request()` for every request once the script
/// defines it).
pub fn wrk_token_cycle_script(
    path: &Path,
    tokens: &[String],
    threads: u32,
) -> Result<(), AssetError> {
    let mut script = format!(
        "-- {} tokens, a different one with every request.\nlocal threads = {}\nlocal tokens = {{\n",
        tokens.len(),
        threads.max(1)
    );
    for token in tokens {
        script.push_str(&format!("\"{token}\",\n"));
    }
    script.push_str(TOKEN_CYCLE_LUA);
    write(path, script.as_bytes())
}

/// The code of [`wrk_token_cycle_script`] after its token table. `setup` runs in wrk's main
/// Lua state once per thread, before that thread's `init`.
const TOKEN_CYCLE_LUA: &str = r#"}

local started = 0
function setup(thread)
   started = started + 1
   thread:set("thread_number", started)
end

local requests = {}
local count = 0
local last = 0

function init(args)
   local first = ((thread_number or 1) - 1) % threads + 1
   for i = first, #tokens, threads do
      local headers = {}
      for name, value in pairs(wrk.headers) do
         headers[name] = value
      end
      headers["Authorization"] = "Bearer " .. tokens[i]
      count = count + 1
      requests[count] = wrk.format(nil, nil, headers)
   end
   if count == 0 then
      error("fewer tokens than wrk threads")
   end
   tokens = nil
end

function request()
   last = last % count + 1
   return requests[last]
end
"#;

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

    fn base64url_decode(text: &str) -> Vec<u8> {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut bits = 0u32;
        let mut held = 0;
        let mut out = Vec::new();
        for c in text.bytes() {
            let v = ALPHABET.iter().position(|&a| a == c).expect("base64url") as u32;
            bits = bits << 6 | v;
            held += 6;
            if held >= 8 {
                held -= 8;
                out.push((bits >> held) as u8);
            }
        }
        out
    }

    #[test]
    fn base64url_round_trips() {
        let bytes: Vec<u8> = (0..=255).collect();
        for len in [0, 1, 2, 3, 4, 255, 256] {
            assert_eq!(base64url_decode(&base64url(&bytes[..len])), &bytes[..len]);
        }
    }

    #[test]
    fn token_cycle_script_holds_distinct_tokens_that_verify() {
        use aws_lc_rs::signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};

        let dir =
            std::env::temp_dir().join(format!("portcullis-bench-tokens-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let layout = Layout {
            dir: dir.clone(),
            port: 0,
            second_port: 0,
            upstream_ports: [0; 4],
        };
        jwt(&layout, Jwt::Rs256).unwrap();
        const COUNT: usize = 64;
        let tokens = rs256_tokens(&layout, COUNT).unwrap();
        let script = dir.join("token.lua");
        wrk_token_cycle_script(&script, &tokens, 2).unwrap();
        let text = fs::read_to_string(&script).unwrap();
        assert!(text.contains("local threads = 2\n"), "{text}");
        assert!(text.contains("function request()"), "{text}");
        let in_script: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix('"')?.strip_suffix("\","))
            .collect();
        assert_eq!(in_script, tokens);
        let distinct: std::collections::HashSet<&str> = in_script.iter().copied().collect();
        assert_eq!(distinct.len(), COUNT);

        // The public key as openssl wrote it for HAProxy, in the PKCS#1 form aws-lc-rs reads.
        let public = layout.jwt_public_pem().display().to_string();
        let der = openssl(
            &[
                "rsa",
                "-pubin",
                "-in",
                &public,
                "-RSAPublicKey_out",
                "-outform",
                "DER",
            ],
            b"",
        )
        .unwrap();
        let key = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &der);
        for (i, token) in tokens.iter().enumerate() {
            let (input, signature) = token.rsplit_once('.').unwrap();
            key.verify(input.as_bytes(), &base64url_decode(signature))
                .unwrap_or_else(|_| panic!("token {i} does not verify: {token}"));
            let (header, claims) = input.split_once('.').unwrap();
            assert_eq!(base64url_decode(header), br#"{"alg":"RS256","typ":"JWT"}"#);
            let claims = String::from_utf8(base64url_decode(claims)).unwrap();
            assert!(
                claims.contains(&format!(r#""sub":"bench-{i}","jti":"{i}","#)),
                "{claims}"
            );
        }
        // And by OpenSSL itself, as HAProxy checks them.
        for token in [&tokens[0], &tokens[COUNT - 1]] {
            let (input, signature) = token.rsplit_once('.').unwrap();
            let sig = dir.join("token.sig");
            write(&sig, &base64url_decode(signature)).unwrap();
            let sig_s = sig.display().to_string();
            openssl(
                &["dgst", "-sha256", "-verify", &public, "-signature", &sig_s],
                input.as_bytes(),
            )
            .unwrap();
        }
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn hex_decoding() {
        assert_eq!(from_hex("00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
    }
}
