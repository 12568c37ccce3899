//! The built-in configuration, run when no `-c` is given and the default configuration file
//! does not exist, so that a first `portcullis` shows a page saying what to do next instead
//! of an error about a missing file.
//!
//! It is ordinary nginx configuration (nginx accepts it too): it runs in the foreground,
//! logs to the terminal, writes no pid file and listens on loopback only, so trying it out
//! exposes nothing and leaves nothing behind.

use std::path::Path;

/// The name the built-in configuration goes by in messages and in `-T`'s dump.
pub const NAME: &str = "(built-in default)";

/// The address the built-in configuration listens on, for the startup message.
pub const URL: &str = "http://127.0.0.1:8080/";

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
