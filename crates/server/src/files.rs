//! Files from disk and the HTTP semantics of serving them: the machinery the static module
//! (`static_file.rs`), `try_files`, `gzip_static`, `empty_gif`, `autoindex` and the proxy
//! cache share, as nginx's core keeps its open-file cache and time parsing for its modules.
//!
//! A request for a file meets it in three steps. The worker's [`FileCache`] turns the mapped
//! path into an open [`CachedFile`] (or the 404/403/500 it deserves), revalidated with one
//! `stat`. [`plan`] weighs the request's conditional and `Range` headers against the file's
//! ETag and mtime, as nginx's not_modified and range filters do, and says what to send.
//! Then the body goes out from memory for small files, or with [`send_file`] (plain TCP,
//! `sendfile(2)`) or [`copy_file`] (any writer) for large ones; a multi-range answer is laid
//! out by [`multipart_parts`]. [`MimeTypes`] gives the `Content-Type` from the `types` block.

mod cache;
mod conditions;
pub(crate) mod date;
mod mime;
mod send;

pub use cache::{CachedFile, FileCache, Lookup, CACHE_ENTRIES, SMALL_FILE_MAX};
pub use conditions::{
    content_range, multipart_parts, plan, preconditions, ranges, unsatisfied_range, Conditions,
    IfModifiedSince, Multipart, Part, Plan,
};
pub(crate) use date::{
    civil, fmt_openssl_time, from_unix_secs, month_name, secs_from_civil, unix_secs,
};
pub use date::{fmt_http_date, parse_http_date};
pub use mime::MimeTypes;
pub use send::{copy_file, send_file, SENDFILE_MAX_CHUNK, SEND_CHUNK};
