//! What a connection knows of itself, for variables and the error log: shared by the HTTP/1.1
//! loop, HTTP/2 streams and the requests they carry.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use crate::tls::TlsInfo;

/// What the connection knows of itself, for variables and the error log.
#[derive(Clone)]
pub(crate) struct ConnInfo {
    pub id: u64,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub requests: u64,
    /// When it was accepted: a request that starts more than `keepalive_time` later is its
    /// last, as in nginx.
    pub started: Instant,
    /// The handshake's outcome, on a TLS connection.
    pub tls: Option<Rc<TlsInfo>>,
}
