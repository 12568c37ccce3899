//! portcullis's HTTP/1.1 codec (RFC 9112), pure: no I/O, no runtime.
//!
//! A connection reads bytes into a `BytesMut` and hands it to [`parse_request_head`], which
//! either asks for more bytes, rejects the head with the status nginx would answer, or splits
//! the head off the front of the buffer as a [`RequestHead`]: the head's bytes frozen once,
//! headers kept as ranges into them, so nothing is copied or allocated per header. Body bytes
//! and pipelined requests stay in the buffer; a chunked body goes through [`ChunkedDecoder`].
//! [`normalize_path`] turns the raw path into nginx's `$uri`.
//!
//! The response side writes status lines and headers into an output buffer, chunk framing
//! without allocating, HTTP dates (cached per second by [`DateCache`]) and nginx's built-in
//! HTML error pages.
//!
//! An upstream's response head goes through [`parse_response_head`]: headers kept as raw lines
//! for forwarding, and the body's framing.
//!
//! Modules: `request` (heads and their limits), `path` (`$uri`), `chunked` (body framing),
//! `response` (status lines, headers, error pages), `upstream_head` (upstream response heads),
//! `date` (HTTP dates), `error`.

mod auth;
mod chunked;
mod date;
mod error;
#[doc(hidden)]
pub mod fuzz;
mod path;
mod request;
mod response;
mod upstream_head;

pub use auth::{basic_credentials, decode_base64, decode_base64url};
pub use chunked::{chunk_header, Chunk, ChunkedDecoder, LAST_CHUNK};
pub use date::{
    civil_from_days, days_from_civil, write_http_date, write_http_date_secs, DateCache,
    HTTP_DATE_LEN, MONTH_NAMES,
};
pub use error::RequestError;
pub use path::{normalize_path, normalize_path_into};
pub use request::{
    parse_request_head, BodyKind, HeadLimits, Method, RequestHead, Version, MAX_HEADERS,
};
pub use response::{error_page_body, reason, write_header, write_status_line};
pub use upstream_head::{
    parse_response_head, Framing, HeaderLine, KnownName, ResponseHead, UpstreamHeadError,
};
