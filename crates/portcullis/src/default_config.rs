//! The built-in configuration, run when no `-c` is given and the default configuration file
//! does not exist, so that a first `portcullis` shows a page saying what to do next instead
//! of an error about a missing file.
//!
//! It is ordinary nginx configuration (nginx accepts it too): it runs in the foreground,
//! logs to the terminal, writes no pid file and listens on loopback only, so trying it out
//! exposes nothing. It also serves HTTPS with a self-signed ECDSA P-256 certificate made at
//! start, written to a directory only its owner can list: the key, certificate and JWK file
//! are the owner's alone (they are read at load, before the workers give up root); the pages
//! are readable by all, since workers started as root serve them as `nobody`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The name the built-in configuration goes by in messages and in `-T`'s dump.
pub const NAME: &str = "(built-in default)";

/// The address the built-in configuration listens on, for the startup message.
pub const URL: &str = "http://127.0.0.1:8080/";

/// The HTTPS address of the built-in configuration, and how to reach it despite the
/// self-signed certificate, for the startup message.
pub const HTTPS_HINT: &str =
    "https://127.0.0.1:8443/ (self-signed certificate: curl -k https://127.0.0.1:8443/)";

/// The seeds' topology on loopback, added to [`TEXT`] once its files exist (`{DIR}` is where):
/// two HTTPS file servers, and in front of them an HTTPS reverse proxy and API gateway with a
/// least_conn keepalive pool, the `/api_old/` rewrite to an internal `/api_new` location that
/// proxies to a group named by a variable, and a JWT-protected path (HS256, a JWK file).
const TOPOLOGY: &str = r#"
    # The upstream file servers, as in the seeds: HTTPS, GET only.
    server {
        listen 127.0.0.1:8081 ssl;
        listen 127.0.0.1:8082 ssl;
        server_name localhost;
        ssl_certificate {DIR}/cert.pem;
        ssl_certificate_key {DIR}/key.pem;
        ssl_ciphers ECDHE-ECDSA-AES256-GCM-SHA384;
        root {DIR}/html;

        location / {
            limit_except GET {
                deny all;
            }
        }
    }

    upstream file_servers {
        least_conn;
        server 127.0.0.1:8081;
        server 127.0.0.1:8082;
        keepalive 64;
    }

    # The reverse proxy and API gateway.
    server {
        listen 127.0.0.1:8443 ssl http2;
        server_name localhost;
        ssl_certificate {DIR}/cert.pem;
        ssl_certificate_key {DIR}/key.pem;
        ssl_ciphers ECDHE-ECDSA-AES256-GCM-SHA384;

        location = / {
            return 200 '<!DOCTYPE html>
<html><head><title>Welcome to portcullis</title></head>
<body><h1>Welcome to portcullis</h1>
<p>This page came over HTTPS, with the certificate portcullis made for itself at start.
Try /1kb (reverse proxy), /api_old/1kb (API gateway) and /api_jwt/1kb (JWT); the
page on http://127.0.0.1:8080/ says more.</p></body></html>
';
        }

        location ~ ^/api_old/(.*)$ {
            limit_except GET {
                deny all;
            }
            set $upstream file_servers;
            rewrite ^/api_old/(.*)$ /api_new/$1 last;
        }

        location /api_new {
            internal;
            proxy_pass https://$upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }

        location /api_jwt/ {
            auth_jwt "portcullis demo";
            auth_jwt_key_file {DIR}/demo.jwk;
            proxy_pass https://file_servers/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }

        location / {
            limit_except GET {
                deny all;
            }
            proxy_pass https://file_servers;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
"#;

/// The files the seeds serve, made as their `dd if=/dev/urandom bs=1024 count=N` commands.
const FILES: &[(&str, usize)] = &[("0kb", 0), ("1kb", 1), ("10kb", 10), ("100kb", 100)];

/// The configuration text. The page is a `return` string, so it must contain no `$` (a
/// variable), no `'` (the closing quote) and no `\`.
pub const TEXT: &str = r#"# The built-in configuration of portcullis: used when no -c is given and the
# default configuration file does not exist.

daemon off;
worker_processes 1;
error_log stderr notice;

events {
    worker_connections 1024;
}

http {
    default_type text/html;
    access_log /dev/stderr;

    server {
        listen 127.0.0.1:8080;
        server_name localhost;

        location = / {
            return 200 '<!DOCTYPE html>
<html>
<head>
<title>Welcome to portcullis</title>
<style>
body { max-width: 42em; margin: 2em auto; font-family: sans-serif; line-height: 1.5; }
code, pre { background: #f4f4f4; }
</style>
</head>
<body>
<h1>Welcome to portcullis</h1>
<p>portcullis is a web server and reverse proxy that reads the nginx configuration
language: point it at the nginx.conf you already have and it serves the same traffic.</p>
<p>You are seeing this page because portcullis was started without <code>-c</code> and
found no configuration file at <code>/etc/portcullis/portcullis.conf</code>, so it runs
its built-in configuration, on this address only.</p>
<h2>What runs here</h2>
<p>The setup of the nginx sizing guides portcullis is measured by, on loopback: two HTTPS
file servers (127.0.0.1:8081 and :8082, files 0kb, 1kb, 10kb and 100kb) and, in front of
them on https://127.0.0.1:8443/, a reverse proxy with a least_conn keepalive pool
(<code>/1kb</code>), an API gateway that rewrites <code>/api_old/</code> to an internal
<code>/api_new</code> location (<code>/api_old/1kb</code>), and a path that needs a JWT
(<code>/api_jwt/1kb</code>; the startup message prints a token and the curl command). The
certificate is self-signed: use <code>curl -k</code>. HTTP/2 is offered there too.</p>
<h2>Next steps</h2>
<p>Check that portcullis accepts an existing configuration:</p>
<pre>portcullis -t -c /etc/nginx/nginx.conf</pre>
<p>Then run it:</p>
<pre>portcullis -c /etc/nginx/nginx.conf</pre>
<p>It takes the flags nginx takes (<code>portcullis -h</code> lists them), and
<code>portcullis -s reload</code>, <code>-s quit</code> and <code>-s stop</code>
signal a running instance as nginx does.</p>
<p>The README that comes with portcullis documents what it supports.</p>
</body>
</html>
';
        }

        location / {
            return 404;
        }
    }
}
"#;

/// The name as a path, which is what the configuration loader expects.
pub fn name() -> &'static Path {
    Path::new(NAME)
}

/// The configuration to run: [`TEXT`] with the seeds' topology, whose certificate, files and
/// JWT key are made the first time. If they cannot be made, HTTP alone is served and `problem`
/// says why.
pub fn text(mut problem: impl FnMut(&str)) -> String {
    match DEMO.get_or_init(make_demo) {
        Ok(demo) => {
            let server = TOPOLOGY.replace("{DIR}", &demo.dir.display().to_string());
            let end = TEXT.rfind('}').unwrap_or(TEXT.len());
            format!("{}{server}{}", &TEXT[..end], &TEXT[end..])
        }
        Err(e) => {
            problem(&format!("HTTPS on 127.0.0.1:8443 is off: {e}"));
            TEXT.to_string()
        }
    }
}

/// What the topology of this process needs, once made.
struct Demo {
    /// The private directory with the certificate, the files and the JWK file.
    dir: PathBuf,
    /// A token the JWK file's key signed, for the startup message.
    token: String,
}

static DEMO: OnceLock<Result<Demo, String>> = OnceLock::new();

/// The lines of the startup message that show the topology at work, if it runs.
pub fn demo_hints() -> Vec<String> {
    let Some(Ok(demo)) = DEMO.get() else {
        return Vec::new();
    };
    vec![
        "reverse proxy:  curl -k https://127.0.0.1:8443/1kb".to_string(),
        "API gateway:    curl -k https://127.0.0.1:8443/api_old/1kb".to_string(),
        format!(
            "JWT (HS256):    curl -k -H 'Authorization: Bearer {}' https://127.0.0.1:8443/api_jwt/1kb",
            demo.token
        ),
    ]
}

/// Removes the topology's directory when the process exits, so that trying the built-in
/// configuration leaves nothing behind.
extern "C" fn remove_demo() {
    if let Some(Ok(demo)) = DEMO.get() {
        let _ = std::fs::remove_dir_all(&demo.dir);
    }
}

/// Makes, in a new directory only this user can list: a self-signed ECDSA P-256 certificate
/// for localhost and 127.0.0.1, the seeds' files, an HS256 JWK file and a token it verifies.
fn make_demo() -> Result<Demo, String> {
    // The modes are set as well as asked for, whatever the umask.
    use std::fs::Permissions;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| format!("key generation failed: {e}"))?;
    let cert = rcgen::CertificateParams::new(names)
        .and_then(|p| p.self_signed(&key))
        .map_err(|e| format!("certificate generation failed: {e}"))?;
    let dir = std::env::temp_dir().join(format!("portcullis-default-tls-{}", std::process::id()));
    // A directory left by an earlier process with the same pid is not trusted: create fails.
    std::fs::DirBuilder::new()
        .mode(0o711)
        .create(&dir)
        .and_then(|()| std::fs::set_permissions(&dir, Permissions::from_mode(0o711)))
        .map_err(|e| format!("mkdir {} failed: {e}", dir.display()))?;
    // SAFETY: `remove_demo` is a plain function that only reads a static; atexit runs it
    // once, at normal process exit.
    unsafe {
        libc::atexit(remove_demo);
    }
    let write_mode = |path: &Path, contents: &[u8], mode: u32| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .and_then(|mut f| {
                f.set_permissions(Permissions::from_mode(mode))?;
                f.write_all(contents)
            })
            .map_err(|e| format!("writing {} failed: {e}", path.display()))
    };
    let write = |path: &Path, contents: &[u8]| write_mode(path, contents, 0o600);
    write(&dir.join("cert.pem"), cert.pem().as_bytes())?;
    write(&dir.join("key.pem"), key.serialize_pem().as_bytes())?;
    let rng = aws_lc_rs::rand::SystemRandom::new();
    let random = |len: usize| -> Result<Vec<u8>, String> {
        let mut b = vec![0u8; len];
        aws_lc_rs::rand::SecureRandom::fill(&rng, &mut b)
            .map_err(|_| "no random bytes".to_string())?;
        Ok(b)
    };
    // The gateway's /api_new/x reaches the file servers as /api_new/x, as in the seeds.
    for sub in ["html", "html/api_new"] {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(dir.join(sub))
            .and_then(|()| std::fs::set_permissions(dir.join(sub), Permissions::from_mode(0o755)))
            .map_err(|e| format!("mkdir {sub} failed: {e}"))?;
        for (name, kb) in FILES {
            write_mode(&dir.join(sub).join(name), &random(kb * 1024)?, 0o644)?;
        }
    }
    let secret = random(32)?;
    let jwk = format!(
        r#"{{"keys":[{{"kty":"oct","kid":"demo","alg":"HS256","k":"{}"}}]}}"#,
        base64url(&secret)
    );
    write(&dir.join("demo.jwk"), jwk.as_bytes())?;
    let token = hs256_token(&secret)?;
    Ok(Demo { dir, token })
}

/// A token for the demo key, valid for a day: `sub` "demo".
fn hs256_token(secret: &[u8]) -> Result<String, String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "the clock is before 1970".to_string())?
        .as_secs();
    let header = base64url(br#"{"alg":"HS256","typ":"JWT","kid":"demo"}"#);
    let payload = base64url(format!(r#"{{"sub":"demo","exp":{}}}"#, now + 86_400).as_bytes());
    let signing_input = format!("{header}.{payload}");
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret);
    let tag = aws_lc_rs::hmac::sign(&key, signing_input.as_bytes());
    Ok(format!("{signing_input}.{}", base64url(tag.as_ref())))
}

/// base64url without padding (RFC 7515's encoding for JWS).
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `return` string: everything between the first `'` and the last.
    fn page() -> &'static str {
        let start = TEXT.find('\'').expect("opening quote") + 1;
        let end = TEXT.rfind('\'').expect("closing quote");
        &TEXT[start..end]
    }

    #[test]
    fn page_holds_nothing_the_return_string_would_interpret() {
        let page = page();
        assert!(!page.contains('$'), "a $ would be read as a variable");
        assert!(
            !page.contains('\\'),
            "a backslash would be read as an escape"
        );
        assert_eq!(TEXT.matches('\'').count(), 2, "only the page's own quotes");
    }

    #[test]
    fn page_says_what_to_do_next() {
        let page = page();
        assert!(page.contains(crate::version::DEFAULT_CONF_PATH));
        assert!(page.contains("portcullis -c /etc/nginx/nginx.conf"));
        assert!(page.contains("portcullis -t -c /etc/nginx/nginx.conf"));
        assert!(page.contains("README"));
    }

    #[test]
    fn braces_balance_outside_the_page() {
        let outside = TEXT.replace(page(), "");
        let mut depth = 0i32;
        for c in outside.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            assert!(depth >= 0, "closing brace without an opening one");
        }
        assert_eq!(depth, 0);
    }

    #[test]
    fn serves_https_with_a_certificate_it_makes() {
        let text = text(|p| panic!("{p}"));
        let cert = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("ssl_certificate "))
            .and_then(|l| l.strip_suffix(';'))
            .expect("ssl_certificate line");
        let pem = std::fs::read_to_string(cert).expect("certificate written");
        if let Some(dir) = Path::new(cert).parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(text.contains("listen 127.0.0.1:8443 ssl http2;"));
        assert!(text.contains("auth_jwt_key_file "));
        assert!(HTTPS_HINT.contains("curl -k https://127.0.0.1:8443/"));
        let outside = text.replace(page(), "");
        assert_eq!(outside.matches('{').count(), outside.matches('}').count());
    }

    #[test]
    fn base64url_matches_rfc_4648() {
        // RFC 4648 section 10's vectors, in the URL alphabet without padding.
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64url(plain.as_bytes()), encoded);
        }
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn listens_where_the_startup_message_says() {
        let address = URL.trim_start_matches("http://").trim_end_matches('/');
        assert!(TEXT.contains(&format!("listen {address};")));
        assert!(TEXT.contains("daemon off;"));
        assert!(
            !TEXT.contains("\npid "),
            "the built-in configuration writes no pid file"
        );
    }
}
