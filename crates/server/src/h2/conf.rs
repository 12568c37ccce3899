//! `ngx_http_v2_module`'s settings: `http2` and the `http2_*` directives, read at every level
//! and taken by a connection from its server.

use portcullis_config::{value, ConfigError, Directive};

/// nginx's default `http2_max_concurrent_streams`.
const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 128;
/// nginx's default `http2_chunk_size`: the most body bytes sent in one DATA frame.
pub(crate) const DEFAULT_CHUNK_SIZE: usize = 8 * 1024;
/// nginx's default `http2_body_preread_size`, which is also the window it gives each stream.
pub(crate) const DEFAULT_BODY_PREREAD_SIZE: u32 = 64 * 1024;
/// nginx's default `http2_recv_buffer_size`.
const DEFAULT_RECV_BUFFER_SIZE: usize = 256 * 1024;
/// The largest flow-control window HTTP/2 allows (RFC 9113 6.9.1).
const MAX_WINDOW: u64 = (1 << 31) - 1;
/// The largest DATA frame payload a peer must accept without asking for more.
pub(crate) const MAX_FRAME_SIZE: usize = 16 * 1024;
/// nginx refuses an `http2_recv_buffer_size` not above twice its state buffer (16 bytes).
const MIN_RECV_BUFFER_SIZE: u64 = 2 * 16;

/// A server's HTTP/2 settings: `http2` and the `http2_*` directives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Http2Conf {
    /// `http2 on`: offered on this server's addresses, as `listen ... http2` does.
    pub enabled: bool,
    pub max_concurrent_streams: u32,
    /// `http2_chunk_size`: the most body bytes per DATA frame.
    pub chunk_size: usize,
    /// `http2_body_preread_size`: the window each stream starts with.
    pub body_preread_size: u32,
    /// `http2_recv_buffer_size`: checked as nginx does; `h2` sizes its own read buffer.
    pub recv_buffer_size: usize,
}

impl Default for Http2Conf {
    fn default() -> Self {
        Http2Conf {
            enabled: false,
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            chunk_size: DEFAULT_CHUNK_SIZE,
            body_preread_size: DEFAULT_BODY_PREREAD_SIZE,
            recv_buffer_size: DEFAULT_RECV_BUFFER_SIZE,
        }
    }
}

/// Reads an `http2*` directive into `c`. Returns false for one this build does not implement
/// (server push), which the caller reports as such.
pub(crate) fn directive(c: &mut Http2Conf, d: &Directive) -> Result<bool, ConfigError> {
    let invalid = || ConfigError {
        message: format!("invalid value \"{}\" in \"{}\" directive", d.arg(0), d.name),
        span: Some(d.span.clone()),
    };
    match d.name.as_str() {
        "http2" => c.enabled = value::flag(d, 0)?,
        "http2_max_concurrent_streams" => {
            c.max_concurrent_streams = u32::try_from(value::number(d, 0)?).map_err(|_| invalid())?
        }
        "http2_chunk_size" => {
            let size = value::size(d, 0)?;
            if size == 0 {
                return Err(ConfigError {
                    message: "the http2 chunk size cannot be zero".into(),
                    span: Some(d.span.clone()),
                });
            }
            // nginx sends no frame larger than the peer's default maximum either.
            c.chunk_size = size.min(MAX_FRAME_SIZE as u64) as usize;
        }
        "http2_body_preread_size" => {
            let size = value::size(d, 0)?;
            if size > MAX_WINDOW {
                return Err(ConfigError {
                    message: format!("the maximum body preread buffer size is {MAX_WINDOW}"),
                    span: Some(d.span.clone()),
                });
            }
            c.body_preread_size = size as u32;
        }
        "http2_recv_buffer_size" => {
            let size = value::size(d, 0)?;
            if size <= MIN_RECV_BUFFER_SIZE {
                return Err(ConfigError {
                    message: "value is too small".into(),
                    span: Some(d.span.clone()),
                });
            }
            c.recv_buffer_size = usize::try_from(size).map_err(|_| invalid())?;
        }
        // Obsolete since nginx 1.19.7 (the loader warns, naming the replacement), or about
        // nginx's own memory pools: nothing to do.
        "http2_max_requests"
        | "http2_max_field_size"
        | "http2_max_header_size"
        | "http2_recv_timeout"
        | "http2_idle_timeout"
        | "http2_pool_size"
        | "http2_streams_index_size" => {}
        // Server push is off by default; turning it on is not implemented.
        "http2_push" | "http2_push_preload" => return Ok(d.arg(0) == "off"),
        _ => return Ok(false),
    }
    Ok(true)
}
