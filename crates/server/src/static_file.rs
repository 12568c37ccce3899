//! `ngx_http_static_module`: a URI that does not end in `/` is served from the file it maps to
//! (`root`, `alias`) for GET and HEAD (405 for other methods, and for POST to a file), with
//! its type from `types`, `Last-Modified` and `ETag`, the conditional requests and ranges of
//! nginx's not_modified and range filters (`If-*`, `Range`: one range or a multipart answer,
//! none when a body filter or a recoding would change the length), a 301 to the URI with a
//! slash for a directory, and nginx's 404, 403 and 500 with their error log lines for a
//! file that is missing, forbidden or cannot be opened. The files come from the worker's
//! open-file cache (`files`).

use std::any::Any;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use portcullis_http::Method;

use crate::conf::LocConf;
use crate::encode::Outgoing;
use crate::files::{CachedFile, Lookup, Plan};
use crate::module::{Module, Slot};
use crate::request::{Body, Filtered, Handlers, Part, Request, Response, Step};
use crate::Level;

pub(crate) struct StaticModule;

pub(crate) static MODULE: StaticModule = StaticModule;

impl Module for StaticModule {
    fn name(&self) -> &'static str {
        "http_static_module"
    }

    fn handlers(&self) -> &'static (dyn Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            static_content: Some(serve),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

fn serve(req: &mut Request<'_>, _conf: &Slot) -> Option<Step> {
    if !matches!(req.method(), Method::Get | Method::Head | Method::Post) {
        return Some(Step::Status(405));
    }
    if req.uri().ends_with(b"/") {
        return None;
    }
    let loc = req.loc().clone();
    Some(serve_file(req, &loc))
}

/// Logs why `path` could not be opened as nginx does: a forbidden file at `error`, another
/// failure at `crit` (a file that is not there is the caller's to log).
pub(crate) fn log_open_failure(req: &Request<'_>, path: &std::path::Path, lookup: &Lookup) {
    match lookup {
        Lookup::Forbidden => req.log(
            Level::Error,
            &format!(
                "open() \"{}\" failed (13: Permission denied)",
                path.display()
            ),
        ),
        Lookup::Error(e) => req.log(
            Level::Crit,
            &format!(
                "open() \"{}\" failed {}",
                path.display(),
                crate::log::os_error(e)
            ),
        ),
        _ => {}
    }
}

fn serve_file(req: &mut Request<'_>, loc: &LocConf) -> Step {
    let path = req.file_path();
    let lookup = req.lookup_file(&path);
    match lookup {
        Lookup::NotFound => {
            if loc.log_not_found {
                req.log(
                    Level::Error,
                    &format!(
                        "open() \"{}\" failed (2: No such file or directory)",
                        path.display()
                    ),
                );
            }
            Step::Status(404)
        }
        Lookup::Forbidden => {
            log_open_failure(req, &path, &lookup);
            Step::Status(403)
        }
        Lookup::Error(_) => {
            log_open_failure(req, &path, &lookup);
            Step::Status(500)
        }
        Lookup::Directory => {
            // nginx opens what the URI names before it redirects to the directory's slash:
            // a directory the worker may not read is a 403, not a redirect.
            if std::fs::File::open(&path).is_err_and(|e| e.raw_os_error() == Some(libc::EACCES)) {
                log_open_failure(req, &path, &Lookup::Forbidden);
                return Step::Status(403);
            }
            let location = req.with_slash();
            req.redirect_response(301, &location)
        }
        Lookup::File(file) => {
            if *req.method() == Method::Post {
                return Step::Status(405);
            }
            file_response(req, loc, file, true)
        }
    }
}

/// Serves `file`, whose body is in `encoding` (`gzip_static`'s `file.gz`), as the file
/// the URI names: its type, with `file`'s validators and conditions; nginx serves no
/// ranges of it.
pub(crate) fn file_response_encoded(
    req: &mut Request<'_>,
    file: Rc<CachedFile>,
    encoding: &[u8],
) -> Step {
    let loc = req.loc().clone();
    match file_response(req, &loc, file, false) {
        Step::Done(mut r) if matches!(r.status, 200 | 206) => {
            r.header("Content-Encoding", encoding);
            Step::Done(r)
        }
        other => other,
    }
}

/// Serves `file`; `ranges`: whether `Range` is served and `Accept-Ranges` sent.
fn file_response(req: &mut Request<'_>, loc: &LocConf, file: Rc<CachedFile>, ranges: bool) -> Step {
    let mut conditions = req.conditions();
    // A byte that is not UTF-8 elsewhere in the path leaves the extension as it is.
    let ext_type = loc.types.lookup(&String::from_utf8_lossy(req.uri()));
    let content_type = ext_type
        .cloned()
        .unwrap_or_else(|| loc.default_type.clone());
    // A body compressed on its way out has no ranges: nginx's range filter comes after
    // the gzip filter, which takes the length away.
    if !ranges {
        conditions.range = None;
    }
    if conditions.range.is_some() && req.recodes() {
        let mut whole = Response::new(200);
        whole.content_type = Some(content_type.clone());
        whole.content_length = Some(file.size);
        let coder = req.encoding(&Outgoing::Own(&whole)).coder;
        if coder.is_some_and(|c| !c.head().keep_length)
            || req.body_filter_edit(&Outgoing::Own(&whole)).is_some()
        {
            conditions.range = None;
        }
    }
    let plan = crate::files::plan(&file, loc.etag, true, &conditions);
    let mut r = Response::new(200);
    match plan {
        Plan::NotModified => {
            r.status = 304;
            validators(&mut r, &file, loc.etag);
            return Step::Done(r);
        }
        Plan::PreconditionFailed => return Step::Status(412),
        Plan::Unsatisfiable => {
            let mut resp = req.error_response(416);
            resp.header("Content-Range", format!("bytes */{}", file.size).as_bytes());
            resp.filtered = Some(Box::new(Filtered {
                status: 200,
                content_type: None,
            }));
            return Step::Done(resp);
        }
        Plan::Full => {
            r.content_type = Some(content_type);
            r.content_length = Some(file.size);
            validators(&mut r, &file, loc.etag);
            if ranges {
                r.header("Accept-Ranges", b"bytes");
            }
            let len = file.size;
            r.body = Body::File {
                file,
                offset: 0,
                len,
            };
        }
        Plan::Partial {
            start,
            end_inclusive,
        } => {
            r.status = 206;
            r.content_type = Some(content_type);
            let len = end_inclusive - start + 1;
            r.content_length = Some(len);
            validators(&mut r, &file, loc.etag);
            r.header(
                "Content-Range",
                format!("bytes {start}-{end_inclusive}/{}", file.size).as_bytes(),
            );
            r.body = Body::File {
                file,
                offset: start,
                len,
            };
        }
        Plan::Multipart { ranges, boundary } => {
            r.status = 206;
            let m = crate::files::multipart_parts(
                &ranges,
                &boundary,
                &whole_file_type(req, &content_type),
                file.size,
            );
            r.content_type = Some(Arc::from(m.content_type.as_str()));
            r.filtered = Some(Box::new(Filtered {
                status: 200,
                content_type: Some(content_type),
            }));
            r.content_length = Some(m.content_length);
            validators(&mut r, &file, loc.etag);
            let mut body = Vec::with_capacity(m.parts.len() * 2 + 1);
            for p in m.parts {
                body.push(Part::Bytes(Bytes::from(p.head)));
                body.push(Part::File {
                    file: file.clone(),
                    offset: p.start,
                    len: p.len,
                });
            }
            body.push(Part::Bytes(Bytes::from(m.trailer)));
            r.body = Body::Parts(body);
        }
    }
    Step::Done(r)
}

/// A file's `Last-Modified`, and its `ETag` unless `etag off`.
fn validators(r: &mut Response, file: &CachedFile, etag: bool) {
    r.header("Last-Modified", file.last_modified.as_bytes());
    if etag {
        r.header("ETag", file.etag.as_bytes());
    }
}

/// The type `t` as the header filters make it for a whole file (`charset` names its
/// charset): the type of a multipart range's parts.
fn whole_file_type(req: &Request<'_>, t: &Arc<str>) -> Arc<str> {
    if !req.has_header_filters() {
        return t.clone();
    }
    let mut whole = Response::new(200);
    whole.content_type = Some(t.clone());
    req.add_headers(&mut whole);
    whole.content_type.unwrap_or_else(|| t.clone())
}
