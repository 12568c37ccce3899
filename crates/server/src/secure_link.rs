//! `ngx_http_secure_link_module`: `secure_link`, `secure_link_md5` and `secure_link_secret`,
//! and the variables `$secure_link` and `$secure_link_expires`, as nginx's:
//!
//! - `secure_link hash,expires` with `secure_link_md5 text`: `$secure_link` is `1` when the
//!   hash (base64url of an MD5, 22 characters) is the MD5 of the text and the link has not
//!   expired, `0` when it matches but has expired, and empty when it does not match;
//! - `secure_link_secret word`: for a URI `/prefix/<md5 in hex>/<link>`, `$secure_link` is
//!   the link when the hex is the MD5 of the link followed by the word, else empty.
//!
//! The configuration decides what an empty or `0` value does (`if ($secure_link = "") {
//! return 403; }`).

use std::sync::Arc;

use md5::{Digest, Md5};
use portcullis_config::{ConfigError, Directive};

use crate::module::{self, Finish, Load, Module, Slot};
use crate::request::{Handlers, Request, Response};
use crate::vars::{Names, Template};

pub(crate) struct SecureLinkModule;

/// The variables' places in the module's list of them.
const LINK: usize = 0;
const EXPIRES: usize = 1;

pub(crate) static MODULE: SecureLinkModule = SecureLinkModule;

/// A level's settings, inherited by the levels inside it unless they set their own.
#[derive(Clone, Default)]
struct Conf {
    /// `secure_link`.
    link: Option<Arc<Template>>,
    /// `secure_link_md5`.
    md5: Option<Arc<Template>>,
    /// `secure_link_secret`.
    secret: Option<Arc<str>>,
    /// Whether this level set `secure_link`/`secure_link_md5` itself, for nginx's rule
    /// against mixing them with `secure_link_secret`.
    own_link: bool,
    /// Whether this level set `secure_link_secret` itself.
    own_secret: bool,
}

impl Module for SecureLinkModule {
    fn name(&self) -> &'static str {
        "http_secure_link_module"
    }

    fn declare(
        &self,
        _http: &[Directive],
        names: &mut Names,
        me: usize,
    ) -> Result<(), ConfigError> {
        names.add_fixed(me, &["secure_link", "secure_link_expires"]);
        Ok(())
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
        let c = module::edit::<Conf>(conf);
        if cx.first_of_module {
            c.own_link = false;
            c.own_secret = false;
        }
        match d.name.as_str() {
            "secure_link_secret" => {
                c.secret = Some(Arc::from(d.arg(0)));
                c.own_secret = true;
            }
            name => {
                let t = Some(Arc::new(Template::compile(d.arg(0), d, cx.names)?));
                if name == "secure_link" {
                    c.link = t;
                } else {
                    c.md5 = t;
                }
                c.own_link = true;
                // A level of its own with the new way leaves the inherited secret.
                if !c.own_secret {
                    c.secret = None;
                }
            }
        }
        Ok(())
    }

    fn finish(
        &self,
        conf: &mut Slot,
        block: &[Directive],
        _cx: &mut Finish<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::get::<Conf>(conf);
        if c.own_link && c.own_secret {
            let d = block.iter().find(|d| d.name == "secure_link_secret");
            let message = "\"secure_link_secret\" cannot be mixed with \"secure_link\" and \"secure_link_md5\"";
            return Err(match d {
                Some(d) => ConfigError::at(d, message),
                None => ConfigError {
                    message: message.to_owned(),
                    span: None,
                },
            });
        }
        Ok(())
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            variable: Some(variable),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

fn variable(
    req: &Request<'_>,
    conf: &Slot,
    var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&Response, u64)>,
) {
    let c = module::get::<Conf>(conf);
    if let Some(secret) = &c.secret {
        if *module::get::<usize>(var) == LINK {
            let uri = unparsed_uri(req.head().target());
            out.extend_from_slice(old_link(uri, secret.as_bytes()).unwrap_or(b""));
        }
        return;
    }
    let (Some(link), Some(md5)) = (&c.link, &c.md5) else {
        return;
    };
    let value = req.eval(link);
    let (hash, expires) = match value.iter().position(|&b| b == b',') {
        Some(i) => (&value[..i], Some(&value[i + 1..])),
        None => (&value[..], None),
    };
    let expires_at = match expires {
        Some(text) => match value_of_time(text) {
            Some(t) => Some(t),
            None => return,
        },
        None => None,
    };
    if *module::get::<usize>(var) == EXPIRES {
        // nginx keeps the expiry once it is read, whether the hash matches or not.
        out.extend_from_slice(expires.unwrap_or(b""));
        return;
    }
    if hash.len() > 24 {
        return;
    }
    let Some(hash) = portcullis_http::decode_base64url(hash).filter(|h| h.len() == 16) else {
        return;
    };
    let text = req.eval(md5);
    if Md5::digest(&text)[..] != hash[..] {
        return;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    out.push(if expires_at.is_some_and(|t| t < now) {
        b'0'
    } else {
        b'1'
    });
}

/// nginx's `ngx_atotm`: a positive count of seconds, in decimal digits only.
fn value_of_time(text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?;
    portcullis_config::value::parse_number(text)
        .filter(|&t| t > 0)
        .map(|t| t as i64)
}

/// `secure_link_secret`'s link: in `/prefix/<hex>/<link>` (the request's target as sent),
/// the link when the hex is the MD5 of the link and `secret`.
fn old_link<'t>(target: &'t [u8], secret: &[u8]) -> Option<&'t [u8]> {
    let rest = target.get(1..)?;
    let start = rest.iter().position(|&b| b == b'/')? + 1;
    let rest = &rest[start..];
    let end = rest.iter().position(|&b| b == b'/')?;
    let (hex, link) = (&rest[..end], &rest[end + 1..]);
    if hex.len() != 32 || link.is_empty() {
        return None;
    }
    let hash = Md5::new()
        .chain_update(link)
        .chain_update(secret)
        .finalize();
    let digit = |c: u8| (c as char).to_digit(16);
    let matches = hex.chunks(2).zip(hash.iter()).all(|(pair, &byte)| {
        match (digit(pair[0]), digit(pair[1])) {
            (Some(hi), Some(lo)) => hi * 16 + lo == u32::from(byte),
            _ => false,
        }
    });
    matches.then_some(link)
}

/// nginx's `unparsed_uri`: the target from its path on (an absolute-form target without its
/// scheme and host).
fn unparsed_uri(target: &[u8]) -> &[u8] {
    if target.first() == Some(&b'/') {
        return target;
    }
    let Some(scheme_end) = target.windows(3).position(|w| w == b"://") else {
        return target;
    };
    let rest = &target[scheme_end + 3..];
    rest.iter()
        .position(|&b| b == b'/')
        .map_or(&b"/"[..], |i| &rest[i..])
}

#[cfg(test)]
mod tests {
    use super::old_link;

    #[test]
    fn old_links_are_checked_as_nginx_checks_them() {
        use md5::Digest;
        let hash = format!("{:x}", md5::Md5::digest(b"path/file.txtsecret"));
        let target = format!("/p/{hash}/path/file.txt");
        assert_eq!(
            old_link(target.as_bytes(), b"secret"),
            Some(&b"path/file.txt"[..])
        );
        assert_eq!(old_link(target.as_bytes(), b"other"), None);
        assert_eq!(old_link(b"/p/short/file", b"secret"), None);
        assert_eq!(old_link(format!("/p/{hash}/").as_bytes(), b"secret"), None);
        // Only hex digits: no sign.
        let signed = format!("/p/+{}/path/file.txt", &hash[1..]);
        assert_eq!(old_link(signed.as_bytes(), b"secret"), None);
        assert_eq!(super::unparsed_uri(b"http://h/p/x?a"), b"/p/x?a");
    }
}
