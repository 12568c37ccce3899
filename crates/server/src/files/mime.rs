//! Content types by file extension, from a `types {}` block.
//!
//! The extension is what follows the last `.` of the path's last segment, as nginx's
//! `ngx_http_set_exten` finds it: a dot that starts a segment (`/.htaccess`) names no
//! extension. Extensions are stored and looked up in ASCII lowercase, so `x.JPG` finds the
//! `jpg` entry, which is what nginx does.

use std::collections::HashMap;
use std::sync::Arc;

/// The extension-to-type table. Built once at configuration load, then shared read-only by
/// every worker, hence the `Arc<str>` values that responses can hold cheaply.
#[derive(Debug, Default, Clone)]
pub struct MimeTypes {
    by_extension: HashMap<Box<str>, Arc<str>>,
    /// The type of the previous `insert`, reused because a `types` entry names one type
    /// followed by all of its extensions.
    last: Option<Arc<str>>,
}

impl MimeTypes {
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps `ext` (without the dot) to `mime`. A later entry for the same extension replaces
    /// the earlier one, as nginx does; the earlier one is returned, for nginx's warning.
    pub fn insert(&mut self, mime: &str, ext: &str) -> Option<Arc<str>> {
        let mime = match &self.last {
            Some(last) if **last == *mime => Arc::clone(last),
            _ => Arc::from(mime),
        };
        self.last = Some(Arc::clone(&mime));
        self.by_extension
            .insert(ext.to_ascii_lowercase().into_boxed_str(), mime)
    }

    /// The type for `path` (a URI or file path), or `None` when it has no extension or the
    /// extension is unknown; the caller then uses `default_type`.
    pub fn lookup(&self, path: &str) -> Option<&Arc<str>> {
        let ext = extension(path)?;
        if ext.bytes().any(|b| b.is_ascii_uppercase()) {
            self.by_extension.get(ext.to_ascii_lowercase().as_str())
        } else {
            self.by_extension.get(ext)
        }
    }

    pub fn len(&self) -> usize {
        self.by_extension.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_extension.is_empty()
    }
}

/// The text after the last `.` of the last path segment, unless that dot begins the segment.
fn extension(path: &str) -> Option<&str> {
    let segment = path.rsplit('/').next().unwrap_or(path);
    match segment.rfind('.') {
        Some(0) | None => None,
        Some(dot) => Some(&segment[dot + 1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> MimeTypes {
        let mut t = MimeTypes::new();
        t.insert("text/plain", "txt");
        t.insert("image/jpeg", "jpeg");
        t.insert("image/jpeg", "jpg");
        t.insert("text/html", "TXT");
        t
    }

    #[test]
    fn later_entry_wins() {
        // nginx served a.txt as text/html with `types { text/plain txt; ... text/html txt; }`.
        assert_eq!(table().lookup("/a.txt").map(|m| &**m), Some("text/html"));
        assert_eq!(table().len(), 3);
    }

    #[test]
    fn extension_is_case_insensitive() {
        // nginx served /x.JpG as image/jpeg and /UP.TXT as the txt type.
        let t = table();
        assert_eq!(t.lookup("/x.JpG").map(|m| &**m), Some("image/jpeg"));
        assert_eq!(t.lookup("/UP.TXT").map(|m| &**m), Some("text/html"));
    }

    #[test]
    fn types_of_one_entry_share_storage() {
        let t = table();
        let (jpeg, jpg) = (t.lookup("/a.jpeg"), t.lookup("/a.jpg"));
        assert!(matches!((jpeg, jpg), (Some(a), Some(b)) if Arc::ptr_eq(a, b)));
    }

    #[test]
    fn paths_without_an_extension() {
        // nginx answered default_type for /.hid and /noext.
        let t = table();
        for path in [
            "/.hid",
            "/noext",
            "/dir.txt/noext",
            "/a.",
            "/",
            "",
            "/d/.txt",
        ] {
            assert_eq!(t.lookup(path), None, "{path}");
        }
        assert_eq!(extension("/a."), Some(""));
        assert_eq!(extension("/d.x/a.b.txt"), Some("txt"));
        assert_eq!(extension("a.txt"), Some("txt"));
    }
}
