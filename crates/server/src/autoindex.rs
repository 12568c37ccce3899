//! `ngx_http_autoindex_module`: `autoindex on` lists a directory whose URI ends in `/` and
//! that has no index file, in nginx's words to the byte: `autoindex_format html` (names cut
//! at 50 columns, sizes rounded to K, M and G unless `autoindex_exact_size on`), `xml`,
//! `json`, and `jsonp` (the `callback` argument names the function; none gives JSON).
//! Dates are UTC, or the server's local time with `autoindex_localtime on` (HTML only, as
//! nginx). Names that begin with a dot are left out; directories come first, then the
//! rest, each by its bytes. A symbolic link is what it points to; one that points nowhere
//! is neither a directory nor a file (JSON's `other`). Not implemented: the UTF-8 column counting nginx does with `charset utf-8`;
//! names are counted in bytes.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use portcullis_config::{ConfigError, Directive};
use portcullis_http::Method;

use crate::files::{civil, fmt_http_date, from_unix_secs, month_name, unix_secs};
use crate::module::{self, Load, Module, Slot};
use crate::request::{Body, Handlers, Request, Response, Step};
use crate::Level;

pub(crate) struct AutoindexModule;

pub(crate) static MODULE: AutoindexModule = AutoindexModule;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Html,
    Json,
    Jsonp,
    Xml,
}

#[derive(Clone, Copy)]
struct Conf {
    on: bool,
    format: Format,
    exact_size: bool,
    localtime: bool,
}

/// Columns of a name in the HTML listing.
const NAME_LEN: usize = 50;

impl Module for AutoindexModule {
    fn name(&self) -> &'static str {
        "http_autoindex_module"
    }

    fn defaults(&self) -> Slot {
        Arc::new(Conf {
            on: false,
            format: Format::Html,
            exact_size: true,
            localtime: false,
        })
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        _cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::edit::<Conf>(conf);
        match d.name.as_str() {
            "autoindex" => c.on = d.arg(0) == "on",
            "autoindex_exact_size" => c.exact_size = d.arg(0) == "on",
            "autoindex_localtime" => c.localtime = d.arg(0) == "on",
            _ => {
                c.format = match d.arg(0) {
                    "html" => Format::Html,
                    "json" => Format::Json,
                    "jsonp" => Format::Jsonp,
                    "xml" => Format::Xml,
                    other => {
                        return Err(ConfigError::at(
                            d,
                            format!(
                                "invalid value \"{other}\" in \"autoindex_format\" directive, \
                                 it must be \"html\", \"xml\", \"json\" or \"jsonp\""
                            ),
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        module::get::<Conf>(conf).on
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            static_content: Some(list),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// One entry of the directory.
struct Entry {
    name: Vec<u8>,
    dir: bool,
    file: bool,
    mtime: i64,
    size: u64,
}

fn list(req: &mut Request<'_>, conf: &Slot) -> Option<Step> {
    let c = *module::get::<Conf>(conf);
    if !c.on
        || !req.uri().ends_with(b"/")
        || !matches!(req.head().method(), Method::Get | Method::Head)
    {
        return None;
    }
    let path = req.file_path();
    let entries = match read(req, &path) {
        Ok(entries) => entries,
        Err(status) => return Some(Step::Status(status)),
    };
    let mut format = c.format;
    let mut callback = Vec::new();
    if format == Format::Jsonp {
        callback = req.arg(b"callback").unwrap_or_default().to_vec();
        if callback.len() > 128
            || !callback
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        {
            req.log(
                Level::Info,
                &format!(
                    "client sent invalid callback name \"{}\"",
                    String::from_utf8_lossy(&callback)
                ),
            );
            return Some(Step::Status(400));
        }
        if callback.is_empty() {
            format = Format::Json;
        }
    }
    let (body, content_type) = match format {
        Format::Html => (html(req.uri(), &entries, &c), "text/html"),
        Format::Json => (json(&entries), "application/json"),
        Format::Jsonp => {
            let mut out = b"/* callback */\r\n".to_vec();
            out.extend_from_slice(&callback);
            out.push(b'(');
            out.extend(json(&entries));
            out.extend_from_slice(b");");
            (out, "application/javascript")
        }
        Format::Xml => (xml(&entries), "text/xml; charset=utf-8"),
    };
    let mut resp = Response::new(200);
    resp.content_type = Some(Arc::from(content_type));
    // nginx sends the listing as it makes it, of no length known in advance.
    resp.body = Body::Stream(Box::new(crate::encode::Once(Some(Bytes::from(body)))));
    Some(Step::Done(resp))
}

/// The directory's entries, sorted as nginx sorts them, or the status of the failure.
fn read(req: &Request<'_>, path: &Path) -> Result<Vec<Entry>, u16> {
    let fail = |e: std::io::Error, what: &str, p: &Path| {
        let (level, status) = match e.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG) => (Level::Error, 404),
            Some(libc::EACCES) => (Level::Error, 403),
            _ => (Level::Crit, 500),
        };
        req.log(
            level,
            &format!(
                "{what} \"{}\" failed {}",
                p.display(),
                crate::log::os_error(&e)
            ),
        );
        status
    };
    let dir = std::fs::read_dir(path).map_err(|e| fail(e, "opendir()", path))?;
    let mut entries = Vec::new();
    for de in dir {
        let de = de.map_err(|e| fail(e, "readdir()", path))?;
        let name = std::os::unix::ffi::OsStrExt::as_bytes(de.file_name().as_os_str()).to_vec();
        if name.starts_with(b".") {
            continue;
        }
        let full = de.path();
        let info = match std::fs::metadata(&full) {
            Ok(m) => m,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ELOOP)) => {
                std::fs::symlink_metadata(&full).map_err(|e| fail(e, "lstat()", &full))?
            }
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                fail(e, "stat()", &full);
                continue;
            }
            Err(e) => return Err(fail(e, "stat()", &full)),
        };
        entries.push(Entry {
            name,
            dir: info.is_dir(),
            file: info.is_file(),
            mtime: info.modified().map(unix_secs).unwrap_or(0),
            size: info.len(),
        });
    }
    entries.sort_by(|a, b| b.dir.cmp(&a.dir).then_with(|| a.name.cmp(&b.name)));
    Ok(entries)
}

/// nginx's `ngx_escape_html`.
fn escape_html(s: &[u8], out: &mut Vec<u8>) {
    for &b in s {
        match b {
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'&' => out.extend_from_slice(b"&amp;"),
            b'"' => out.extend_from_slice(b"&quot;"),
            _ => out.push(b),
        }
    }
}

/// nginx's `ngx_escape_uri` with `NGX_ESCAPE_URI_COMPONENT`: all but letters, digits and
/// `-._~`.
fn escape_uri_component(s: &[u8], out: &mut Vec<u8>) {
    for &b in s {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
}

/// The server's offset from UTC in seconds now, for `autoindex_localtime`.
fn local_offset() -> i64 {
    let now = unix_secs(std::time::SystemTime::now()) as libc::time_t;
    // SAFETY: localtime_r writes the broken-down time into the `tm` it is given and reads
    // only `now`; a zeroed `tm` is a valid value to overwrite.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return 0;
        }
        tm.tm_gmtoff
    }
}

fn html(uri: &[u8], entries: &[Entry], c: &Conf) -> Vec<u8> {
    let mut out = Vec::with_capacity(512 + entries.len() * 120);
    out.extend_from_slice(b"<html>\r\n<head><title>Index of ");
    escape_html(uri, &mut out);
    out.extend_from_slice(b"</title></head>\r\n<body>\r\n<h1>Index of ");
    escape_html(uri, &mut out);
    out.extend_from_slice(b"</h1><hr><pre><a href=\"../\">../</a>\r\n");
    let offset = if c.localtime { local_offset() } else { 0 };
    for e in entries {
        out.extend_from_slice(b"<a href=\"");
        escape_uri_component(&e.name, &mut out);
        if e.dir {
            out.push(b'/');
        }
        out.extend_from_slice(b"\">");
        let mut len = e.name.len();
        let needs_escape = e
            .name
            .iter()
            .any(|b| matches!(b, b'<' | b'>' | b'&' | b'"'));
        if len > NAME_LEN {
            // The first 47 bytes, then "..>".
            if needs_escape {
                escape_html(&e.name[..NAME_LEN - 3], &mut out);
            } else {
                out.extend_from_slice(&e.name[..NAME_LEN - 3]);
            }
            out.extend_from_slice(b"..&gt;</a>");
        } else {
            escape_html(&e.name, &mut out);
            if e.dir && NAME_LEN > len {
                out.push(b'/');
                len += 1;
            }
            out.extend_from_slice(b"</a>");
            out.resize(out.len() + NAME_LEN.saturating_sub(len), b' ');
        }
        out.push(b' ');
        let (y, mo, d, h, mi, _) = civil(e.mtime + offset);
        out.extend_from_slice(format!("{d:02}-{}-{y} {h:02}:{mi:02} ", month_name(mo)).as_bytes());
        let size = if e.dir {
            if c.exact_size {
                format!("{:>19}", "-")
            } else {
                format!("{:>7}", "-")
            }
        } else if c.exact_size {
            format!("{:>19}", e.size)
        } else {
            rounded_size(e.size)
        };
        out.extend_from_slice(size.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"</pre><hr></body>\r\n</html>\r\n");
    out
}

/// nginx's size with `autoindex_exact_size off`: bytes up to 9999, then K, M and G,
/// rounded half up.
fn rounded_size(n: u64) -> String {
    const K: u64 = 1024;
    let scaled = |unit: u64| n / unit + u64::from(n % unit > unit / 2 - 1);
    if n > K * K * K - 1 {
        format!("{:>6}G", scaled(K * K * K))
    } else if n > K * K - 1 {
        format!("{:>6}M", scaled(K * K))
    } else if n > 9999 {
        format!("{:>6}K", n / K + u64::from(n % K > 511))
    } else {
        format!(" {n:>6}")
    }
}

fn json(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + entries.len() * 100);
    out.push(b'[');
    for (i, e) in entries.iter().enumerate() {
        out.extend_from_slice(b"\r\n{ \"name\":\"");
        crate::vars::escape_json(&e.name, &mut out);
        out.extend_from_slice(b"\", \"type\":\"");
        out.extend_from_slice(match (e.dir, e.file) {
            (true, _) => b"directory" as &[u8],
            (_, true) => b"file",
            _ => b"other",
        });
        out.extend_from_slice(b"\", \"mtime\":\"");
        out.extend_from_slice(fmt_http_date(from_unix_secs(e.mtime)).as_bytes());
        if e.file {
            out.extend_from_slice(format!("\", \"size\":{}", e.size).as_bytes());
        } else {
            out.push(b'"');
        }
        out.extend_from_slice(b" }");
        if i + 1 != entries.len() {
            out.push(b',');
        }
    }
    out.extend_from_slice(b"\r\n]");
    out
}

fn xml(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + entries.len() * 100);
    out.extend_from_slice(b"<?xml version=\"1.0\"?>\r\n<list>\r\n");
    for e in entries {
        let tag: &[u8] = match (e.dir, e.file) {
            (true, _) => b"directory",
            (_, true) => b"file",
            _ => b"other",
        };
        out.push(b'<');
        out.extend_from_slice(tag);
        let (y, mo, d, h, mi, s) = civil(e.mtime);
        out.extend_from_slice(
            format!(" mtime=\"{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z\"").as_bytes(),
        );
        if e.file {
            out.extend_from_slice(format!(" size=\"{}\"", e.size).as_bytes());
        }
        out.push(b'>');
        escape_html(&e.name, &mut out);
        out.extend_from_slice(b"</");
        out.extend_from_slice(tag);
        out.extend_from_slice(b">\r\n");
    }
    out.extend_from_slice(b"</list>\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_rounded_as_nginx_rounds_them() {
        assert_eq!(rounded_size(0), "      0");
        assert_eq!(rounded_size(9999), "   9999");
        assert_eq!(rounded_size(10000), "    10K");
        assert_eq!(rounded_size(10 * 1024 + 512), "    11K");
        assert_eq!(rounded_size(1024 * 1024), "     1M");
        assert_eq!(rounded_size(3 * 1024 * 1024 * 1024 / 2), "     2G");
    }
}
