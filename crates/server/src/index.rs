//! `ngx_http_index_module`: `index` (`index.html` by default), for a URI that ends in `/`:
//! each name is tried in order in the directory the URI maps to, and the first that exists
//! is where the request goes, by an internal redirect that keeps its arguments; a name may
//! hold variables, and the last may be a URI of its own (`/index.php`), taken without a
//! test. A directory with none of them is left to the next handler (`autoindex`, else the
//! core's 403); a directory that does not exist is a 404, as nginx answers it.
//!
//! A level's first `index` replaces the names it inherits.

use std::any::Any;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};
use portcullis_http::Method;

use crate::module::{self, Load, Module, Slot};
use crate::request::{Handlers, Request, Step};
use crate::vars::Template;
use crate::Level;

pub(crate) struct IndexModule;

pub(crate) static MODULE: IndexModule = IndexModule;

/// A level's index names.
type Conf = Vec<Template>;

impl Module for IndexModule {
    fn name(&self) -> &'static str {
        "http_index_module"
    }

    fn defaults(&self) -> Slot {
        Arc::new(vec![Template::literal("index.html")])
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::edit::<Conf>(conf);
        if cx.first {
            c.clear();
        }
        for a in &d.args {
            c.push(Template::compile(&a.value, d, cx.names)?);
        }
        Ok(())
    }

    fn handlers(&self) -> &'static (dyn Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            static_content: Some(index),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

fn index(req: &mut Request<'_>, conf: &Slot) -> Option<Step> {
    if !req.uri().ends_with(b"/") {
        return None;
    }
    // Another method is the static module's to refuse, as in nginx.
    if !matches!(req.method(), Method::Get | Method::Head | Method::Post) {
        return None;
    }
    let names = module::get::<Conf>(conf);
    let dir = req.file_path();
    let n = names.len();
    for (i, t) in names.iter().enumerate() {
        let name = req.eval(t);
        if name.starts_with(b"/") {
            if i + 1 == n {
                req.redirect_to(name, true);
                return Some(Step::Again);
            }
            continue;
        }
        let mut uri = req.uri().to_vec();
        uri.extend_from_slice(&name);
        let path = dir.join(std::ffi::OsStr::from_bytes(&name));
        if std::fs::metadata(&path).is_ok() {
            req.redirect_to(uri, true);
            return Some(Step::Again);
        }
    }
    if std::fs::metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return None;
    }
    if req.loc().log_not_found {
        req.log(
            Level::Error,
            &format!(
                "\"{}\" is not found (2: No such file or directory)",
                dir.join("index.html").display()
            ),
        );
    }
    Some(Step::Status(404))
}
