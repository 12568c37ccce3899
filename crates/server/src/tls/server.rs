//! A server block's TLS settings, as the ssl module makes them at load and the connection
//! reads them at the handshake.

use std::sync::Arc;

/// A server block's TLS, as the connection needs it.
pub(crate) struct ServerTlsConf {
    /// `None` when the server has no certificate and refuses handshakes.
    pub tls: Option<portcullis_tls::ServerTls>,
    /// `ssl_reject_handshake on`: a handshake naming this server is refused.
    pub reject_handshake: bool,
}

/// What the server-level pass learns of a server block's TLS.
pub(crate) struct ServerTlsBits {
    pub conf: Option<Arc<ServerTlsConf>>,
    /// `ssl on` (deprecated): every listen of the server speaks TLS.
    pub ssl_on: bool,
}
