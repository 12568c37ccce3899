//! `ngx_http_auth_basic_module`: `auth_basic` and `auth_basic_user_file`, in the access
//! phase. A level with both asks for `Authorization: Basic` credentials (RFC 7617) and checks
//! them against the user file; a realm that is `off` (`auth_basic off;` in an inner level, or
//! a variable that evaluates to it) lets the request through. As nginx does:
//!
//! - no usable credentials: 401 with `WWW-Authenticate: Basic realm="<realm>"`, logged at
//!   `info`;
//! - the user file is opened on every request (an edited file counts at once, with no
//!   reload); a file that does not exist is a 403, one that cannot be read a 500;
//! - the first line of the file for the user decides (lines starting with `#` are
//!   comments); a user not in the file, or a password that does not match, is a 401 and an
//!   `error` line in the log;
//! - relative file names resolve against the directory of the main configuration file.
//!
//! The password hashes are in `crypt`.

mod crypt;

use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};

use crate::module::{self, Load, Module, Slot};
use crate::request::{Access, Handlers, Request};
use crate::vars::Template;
use crate::Level;

pub(crate) struct AuthBasicModule;

pub(crate) static MODULE: AuthBasicModule = AuthBasicModule;

/// A level's settings, inherited by the levels inside it unless they set their own.
#[derive(Clone, Default)]
struct Conf {
    /// `auth_basic`: the realm, or `off`.
    realm: Option<Arc<Template>>,
    /// `auth_basic_user_file`, and the directory a relative name resolves against.
    user_file: Option<(Arc<Template>, Arc<Path>)>,
}

impl Module for AuthBasicModule {
    fn name(&self) -> &'static str {
        "http_auth_basic_module"
    }

    fn defaults(&self) -> Slot {
        Arc::new(Conf::default())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let value = Arc::new(Template::compile(d.arg(0), d, cx.names)?);
        let c = module::edit::<Conf>(conf);
        if d.name == "auth_basic" {
            c.realm = Some(value);
        } else {
            c.user_file = Some((value, Arc::from(cx.conf_prefix)));
        }
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        let c = module::get::<Conf>(conf);
        match &c.realm {
            Some(realm) => c.user_file.is_some() && realm.as_literal() != Some("off"),
            None => false,
        }
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            access: Some(access),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

fn access(req: &mut Request<'_>, conf: &Slot) -> Access {
    let c = module::get::<Conf>(conf);
    let (Some(realm), Some((user_file, dir))) = (&c.realm, &c.user_file) else {
        return Access::Declined;
    };
    let realm = req.eval(realm);
    if realm == b"off" {
        return Access::Declined;
    }
    let credentials = req
        .head()
        .header("authorization")
        .and_then(portcullis_http::basic_credentials);
    let Some((user, password)) = credentials else {
        req.log(
            Level::Info,
            "no user/password was provided for basic authentication",
        );
        return challenge(&realm);
    };
    let path = full_name(dir, req.eval(user_file));
    let stored = std::fs::File::open(&path)
        .map_err(|e| ("open()", e))
        .and_then(|file| password_in(file, &user).map_err(|e| ("pread()", e)));
    let stored = match stored {
        Ok(stored) => stored,
        Err((call, e)) => {
            let (level, status) = match (call, e.kind()) {
                ("open()", io::ErrorKind::NotFound) => (Level::Error, 403),
                _ => (Level::Crit, 500),
            };
            let message = format!(
                "{call} \"{}\" failed {}",
                path.display(),
                crate::log::os_error(&e)
            );
            req.log(level, &message);
            return Access::Denied {
                status,
                challenge: None,
            };
        }
    };
    let user_name = String::from_utf8_lossy(&user);
    match stored {
        None => {
            let message = format!(
                "user \"{user_name}\" was not found in \"{}\"",
                path.display()
            );
            req.log(Level::Error, &message);
            challenge(&realm)
        }
        Some(stored) if crypt::verify(&password, &stored) => Access::Allowed,
        Some(_) => {
            req.log(
                Level::Error,
                &format!("user \"{user_name}\": password mismatch"),
            );
            challenge(&realm)
        }
    }
}

/// A 401 that asks for credentials of `realm`, which goes into the field as it is.
fn challenge(realm: &[u8]) -> Access {
    let mut value = b"Basic realm=\"".to_vec();
    value.extend_from_slice(realm);
    value.push(b'"');
    Access::Denied {
        status: 401,
        challenge: Some(value),
    }
}

/// `name`, relative to `dir` unless it is absolute.
fn full_name(dir: &Path, name: Vec<u8>) -> PathBuf {
    let name = Path::new(std::ffi::OsStr::from_bytes(&name));
    dir.join(name)
}

/// The longest stored password read: nginx reads a user file through a buffer of this
/// size.
const MAX_STORED: usize = 2048;

/// The stored password of `user` in a user file, read as nginx reads it: the first line that
/// starts with `user:` gives what follows, up to a `:`, CR or LF. A line that starts with `#`
/// or CR is skipped, and so is an empty one. As in nginx, a line that ends while it still
/// matches the start of the name is taken to run on into the next. The file is read a
/// piece at a time, whatever its size.
fn password_in(mut file: impl Read, user: &[u8]) -> io::Result<Option<Vec<u8>>> {
    enum State {
        /// This many bytes of `user:` matched on the current line.
        Login(usize),
        /// On to the next line.
        Skip,
        /// The user's line: its password so far.
        Password(Vec<u8>),
    }
    let mut state = State::Login(0);
    let mut buf = [0u8; 4096];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for &c in &buf[..n] {
            state = match state {
                State::Password(p) if matches!(c, b'\n' | b'\r' | b':') => return Ok(Some(p)),
                State::Password(p) if p.len() == MAX_STORED => return Ok(Some(p)),
                State::Password(mut p) => {
                    p.push(c);
                    State::Password(p)
                }
                State::Login(0) if c == b'#' || c == b'\r' => State::Skip,
                State::Login(0) if c == b'\n' => State::Login(0),
                State::Login(n) => {
                    // The name never holds a `:`: the credentials end it at their first.
                    let expected = user.get(n).copied().unwrap_or(b':');
                    if c != expected {
                        State::Skip
                    } else if n == user.len() {
                        State::Password(Vec::new())
                    } else {
                        State::Login(n + 1)
                    }
                }
                State::Skip if c == b'\n' => State::Login(0),
                State::Skip => State::Skip,
            };
        }
    }
    Ok(match state {
        State::Password(p) => Some(p),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::{password_in, MAX_STORED};

    fn find(file: &str, user: &str) -> Option<String> {
        password_in(file.as_bytes(), user.as_bytes())
            .unwrap()
            .map(|p| String::from_utf8(p).unwrap())
    }

    #[test]
    fn a_user_file_is_read_as_nginx_reads_it() {
        let file = "# alice:commented\nalice:one:comment\r\n\nbob:two\nbob:second\ncarol:";
        assert_eq!(find(file, "alice"), Some("one".into()));
        assert_eq!(find(file, "bob"), Some("two".into()));
        assert_eq!(find(file, "carol"), Some(String::new()));
        assert_eq!(find(file, "ali"), None);
        assert_eq!(find(file, "alicex"), None);
        assert_eq!(find(file, "#"), None);
        assert_eq!(find("dave:three", "dave"), Some("three".into()));
        assert_eq!(find("\r\ndave:x", "dave"), Some("x".into()));
        assert_eq!(find(" dave:x", "dave"), None);
        assert_eq!(find("dave", "dave"), None);
        // A line that stops short of the name swallows the next one, as in nginx.
        assert_eq!(find("da\ndave:x\ndave:y", "dave"), Some("y".into()));
        // A line longer than the reader's piece, and a password longer than nginx's buffer.
        let long = format!("{}\nerin:{}", "x".repeat(10_000), "p".repeat(5_000));
        assert_eq!(find(&long, "erin").map(|p| p.len()), Some(MAX_STORED));
    }
}
