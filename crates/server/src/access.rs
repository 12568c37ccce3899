//! `ngx_http_access_module`: `allow` and `deny`, by address and network (IPv4, IPv6, an
//! IPv4-mapped IPv6 client matched as IPv4) or `all`, in the access phase. The first rule that
//! matches the client decides; when none matches the module declines, leaving the decision to
//! the other access handlers, as nginx's does. A level's first rule replaces the inherited
//! list; a `limit_except` block without rules keeps its location's.

use std::net::IpAddr;
use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};

use crate::module::{self, Load, Module, Slot};
use crate::net::Cidr;
use crate::request::{Access, Handlers, Request};
use crate::Level;

/// The module.
pub(crate) struct AccessModule;

pub(crate) static MODULE: AccessModule = AccessModule;

/// A level's rules, in the order written.
type Rules = Vec<AccessRule>;

impl Module for AccessModule {
    fn name(&self) -> &'static str {
        "http_access_module"
    }

    fn defaults(&self) -> Slot {
        Arc::new(Rules::new())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let rules = module::edit::<Rules>(conf);
        if cx.first_of_module {
            rules.clear();
        }
        rules.push(access_rule(d)?);
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        !module::get::<Rules>(conf).is_empty()
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
    let rules = module::get::<Rules>(conf);
    match verdict(rules, req.client_ip()) {
        None => Access::Declined,
        Some(true) => Access::Allowed,
        Some(false) => {
            req.log(Level::Error, "access forbidden by rule");
            Access::Denied {
                status: 403,
                challenge: None,
            }
        }
    }
}

#[derive(Clone)]
struct AccessRule {
    allow: bool,
    /// `None` for `all`.
    net: Option<Cidr>,
    /// `unix:`: clients of UNIX-domain sockets, which no listener here accepts, so the
    /// rule matches no client (nginx keeps such rules apart from the IP ones).
    unix: bool,
}

fn access_rule(d: &Directive) -> Result<AccessRule, ConfigError> {
    let allow = d.name == "allow";
    let v = d.arg(0);
    if v == "all" || v == "unix:" {
        return Ok(AccessRule {
            allow,
            net: None,
            unix: v == "unix:",
        });
    }
    let net =
        Cidr::parse(v).ok_or_else(|| ConfigError::at(d, format!("invalid parameter \"{v}\"")))?;
    Ok(AccessRule {
        allow,
        net: Some(net),
        unix: false,
    })
}

impl AccessRule {
    /// Whether the rule is about `addr` (an IPv4-mapped IPv6 client is matched as IPv4).
    fn matches(&self, addr: IpAddr) -> bool {
        !self.unix && self.net.is_none_or(|net| net.contains(addr))
    }
}

/// The result of a list of allow/deny rules: the first that matches decides whether the
/// address is allowed; `None` when no rule matches, which leaves the decision to the other
/// access handlers, as nginx's access module declines then.
fn verdict(rules: &[AccessRule], addr: IpAddr) -> Option<bool> {
    rules.iter().find(|r| r.matches(addr)).map(|r| r.allow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn rule(s: &str) -> AccessRule {
        let d = Directive {
            name: "allow".into(),
            args: vec![portcullis_config::Arg {
                value: s.into(),
                quoted: false,
            }],
            span: portcullis_config::Span {
                file: Arc::from(Path::new("/t")),
                line: 1,
            },
            block: None,
        };
        access_rule(&d).unwrap()
    }

    #[test]
    fn access_rules_match_networks() {
        assert!(rule("127.0.0.0/8").matches("127.1.2.3".parse().unwrap()));
        assert!(!rule("127.0.0.0/8").matches("10.0.0.1".parse().unwrap()));
        assert!(rule("127.0.0.1").matches("::ffff:127.0.0.1".parse().unwrap()));
        assert!(rule("all").matches("::1".parse().unwrap()));
        assert!(!rule("unix:").matches("127.0.0.1".parse().unwrap()));
        assert!(!rule("unix:").matches("::1".parse().unwrap()));
        assert!(rule("0.0.0.0/0").matches("1.2.3.4".parse().unwrap()));
        assert!(rule("::1").matches("::1".parse().unwrap()));
    }
}
