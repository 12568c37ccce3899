//! The built-in configuration, run when no `-c` is given and the default configuration file
//! does not exist, so that a first `portcullis` shows a page saying what to do next instead
//! of an error about a missing file.
//!
//! It is ordinary nginx configuration (nginx accepts it too): it runs in the foreground,
//! logs to the terminal, writes no pid file and listens on loopback only, so trying it out
//! exposes nothing. It also serves HTTPS with a self-signed ECDSA P-256 certificate made at
//! start, written to a directory only the user can read.

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

/// The HTTPS server added to [`TEXT`] once its certificate exists; `{DIR}` is where it is.
const TLS_SERVER: &str = r#"
    server {
        listen 127.0.0.1:8443 ssl;
        server_name localhost;
        ssl_certificate {DIR}/cert.pem;
        ssl_certificate_key {DIR}/key.pem;

        location = / {
            return 200 '<!DOCTYPE html>
<html><head><title>Welcome to portcullis</title></head>
<body><h1>Welcome to portcullis</h1>
<p>This page came over HTTPS, with the certificate portcullis made for itself at start.
The page on http://127.0.0.1:8080/ says what to do next.</p></body></html>
';
        }

        location / {
            return 404;
        }
    }
"#;

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

/// The configuration to run: [`TEXT`] with the HTTPS server, whose certificate is made the
/// first time. If it cannot be made, HTTP alone is served and `problem` says why.
pub fn text(mut problem: impl FnMut(&str)) -> String {
    match CERT_DIR.get_or_init(make_certificate) {
        Ok(dir) => {
            let server = TLS_SERVER.replace("{DIR}", &dir.display().to_string());
            let end = TEXT.rfind('}').unwrap_or(TEXT.len());
            format!("{}{server}{}", &TEXT[..end], &TEXT[end..])
        }
        Err(e) => {
            problem(&format!("HTTPS on 127.0.0.1:8443 is off: {e}"));
            TEXT.to_string()
        }
    }
}

/// Where the certificate of this process is, once made.
static CERT_DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// Removes the certificate's directory when the process exits, so that trying the built-in
/// configuration leaves nothing behind.
extern "C" fn remove_certificate() {
    if let Some(Ok(dir)) = CERT_DIR.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Makes a self-signed ECDSA P-256 certificate for localhost and 127.0.0.1 in a new
/// directory that only this user can enter.
fn make_certificate() -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| format!("key generation failed: {e}"))?;
    let cert = rcgen::CertificateParams::new(names)
        .and_then(|p| p.self_signed(&key))
        .map_err(|e| format!("certificate generation failed: {e}"))?;
    let dir = std::env::temp_dir().join(format!("portcullis-default-tls-{}", std::process::id()));
    // A directory left by an earlier process with the same pid is not trusted: create fails.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("mkdir {} failed: {e}", dir.display()))?;
    // SAFETY: `remove_certificate` is a plain function that only reads a static; atexit
    // runs it once, at normal process exit.
    unsafe {
        libc::atexit(remove_certificate);
    }
    for (file, contents) in [("cert.pem", cert.pem()), ("key.pem", key.serialize_pem())] {
        let path = dir.join(file);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(contents.as_bytes()))
            .map_err(|e| format!("writing {} failed: {e}", path.display()))?;
    }
    Ok(dir)
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
        assert!(text.contains("listen 127.0.0.1:8443 ssl;"));
        assert!(HTTPS_HINT.contains("curl -k https://127.0.0.1:8443/"));
        let outside = text.replace(page(), "");
        assert_eq!(outside.matches('{').count(), outside.matches('}').count());
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
