//! The `upstream` blocks of a configuration, as the modules that pass requests to them
//! (`proxy_pass`, `fastcgi_pass`) and the health checks name them: the balancer and peer
//! state of `crates/proxy`, with the server's compiled `hash` key.

use std::collections::HashMap;
use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};
use portcullis_proxy::upstream::{KeyKind, Upstream};

use crate::vars::Template;

/// The upstream groups of a configuration, by name.
pub(crate) type Groups = HashMap<String, Group>;

/// An upstream group with what the server adds to it: its `hash` key compiled.
#[derive(Clone)]
pub(crate) struct Group {
    pub upstream: Arc<Upstream>,
    /// The key of `hash $key`, evaluated per request.
    pub key: Option<Arc<Template>>,
}

impl Group {
    /// Compiles an `upstream` block.
    pub(crate) fn compile(d: &Directive, names: &crate::vars::Names) -> Result<Group, ConfigError> {
        let upstream = Upstream::compile(d)?;
        let key = match upstream.key_kind() {
            KeyKind::Hash(text) => {
                // The error names the `hash` line when the key's variables are wrong.
                let at = d.children().iter().find(|c| c.name == "hash").unwrap_or(d);
                Some(Arc::new(Template::compile(text, at, names)?))
            }
            _ => None,
        };
        Ok(Group {
            upstream: Arc::new(upstream),
            key,
        })
    }
}
