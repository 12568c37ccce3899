//! TLS to upstreams (`proxy_pass https://`): the handshake on a new TCP connection, with the
//! configuration a location's `proxy_ssl_*` directives built at load
//! ([`portcullis_tls::client_config`]) and the name nginx would use.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use portcullis_tls::client::UpstreamClient;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use crate::{MaybeTls, Stream};

/// How a location connects to its upstreams over TLS.
pub struct UpstreamTls {
    client: Arc<UpstreamClient>,
    /// `proxy_ssl_name` when one is set; else the host of `proxy_pass` is used.
    name: Option<String>,
}

impl fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Why the handshake with an upstream failed.
#[derive(Debug)]
pub enum HandshakeError {
    /// The connect timeout passed during the handshake.
    TimedOut,
    /// The handshake failed; the text is nginx's, without " while SSL handshaking to
    /// upstream".
    Failed(String),
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::TimedOut => {
                f.write_str("upstream timed out (110: Connection timed out)")
            }
            HandshakeError::Failed(why) => f.write_str(why),
        }
    }
}

impl UpstreamTls {
    /// `name` is `proxy_ssl_name`, if set.
    pub fn new(client: Arc<UpstreamClient>, name: Option<String>) -> UpstreamTls {
        UpstreamTls { client, name }
    }

    /// The configuration, shared by every location with the same settings.
    pub fn config(&self) -> &Arc<ClientConfig> {
        self.client.base()
    }

    /// A client certificate named by variables (`proxy_ssl_certificate`), read for a
    /// request; errors are in nginx's words.
    pub fn certificate(
        &self,
        cert: PathBuf,
        key: PathBuf,
    ) -> Result<portcullis_tls::ClientCert, portcullis_tls::TlsError> {
        self.client.certificate((cert, key))
    }

    /// The name sent as SNI (with `proxy_ssl_server_name on`) and checked in the certificate
    /// (with `proxy_ssl_verify on`): `proxy_ssl_name`, else `host` (`$proxy_host`), without
    /// a port, as nginx strips it.
    pub fn name<'a>(&'a self, host: &'a str) -> &'a str {
        strip_port(self.name.as_deref().unwrap_or(host))
    }

    /// Runs the handshake on `tcp` until `deadline` (what is left of proxy_connect_timeout).
    /// `host` is `$proxy_host`; `peer` stands in for a name rustls cannot take, which then is
    /// neither sent nor matched.
    pub async fn connect(
        &self,
        tcp: TcpStream,
        host: &str,
        peer: SocketAddr,
        cert: Option<&portcullis_tls::ClientCert>,
        deadline: Instant,
    ) -> Result<Stream, HandshakeError> {
        let name = self.name(host);
        let server_name =
            match ServerName::try_from(name.trim_start_matches('[').trim_end_matches(']')) {
                Ok(n) => n.to_owned(),
                // A name no certificate can be for: checked, it matches none, as OpenSSL's check
                // of the name as written would find.
                Err(_) if self.client.verifies() => {
                    return Err(HandshakeError::Failed(format!(
                        "upstream SSL certificate does not match \"{name}\""
                    )))
                }
                Err(_) => ServerName::IpAddress(peer.ip().into()),
            };
        let connector = TlsConnector::from(self.client.for_peer(peer, cert));
        match tokio::time::timeout_at(deadline, connector.connect(server_name, crate::Tcp(tcp)))
            .await
        {
            Ok(Ok(tls)) => Ok(Stream::Tcp(MaybeTls::Tls(Box::new(tls)))),
            Ok(Err(e)) => Err(HandshakeError::Failed(io_failure(&e, name))),
            Err(_) => Err(HandshakeError::TimedOut),
        }
    }
}

/// `host` without `:port` (`[v6]:port` keeps its brackets), as nginx's
/// `ngx_http_upstream_ssl_name`.
fn strip_port(host: &str) -> &str {
    let from = if host.starts_with('[') {
        host.find(']').unwrap_or(0)
    } else {
        0
    };
    match host[from..].find(':') {
        Some(i) => &host[..from + i],
        None => host,
    }
}

/// nginx's words for a handshake that failed with `e`.
fn io_failure(e: &io::Error, name: &str) -> String {
    if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return portcullis_tls::handshake_failure(tls, name);
    }
    match e.kind() {
        io::ErrorKind::UnexpectedEof => "peer closed connection in SSL handshake".into(),
        io::ErrorKind::ConnectionReset => format!(
            "peer closed connection in SSL handshake ({})",
            os_error_text(e)
        ),
        _ => format!("SSL_do_handshake() failed ({})", os_error_text(e)),
    }
}

/// "104: Connection reset by peer", as nginx writes an errno.
fn os_error_text(e: &io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(n) => {
            let text = text
                .strip_suffix(&format!(" (os error {n})"))
                .unwrap_or(&text);
            format!("{n}: {text}")
        }
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_the_port_as_nginx() {
        assert_eq!(strip_port("backend:8443"), "backend");
        assert_eq!(strip_port("backend"), "backend");
        assert_eq!(strip_port("[::1]:8443"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("127.0.0.1:443"), "127.0.0.1");
    }

    #[test]
    fn proxy_ssl_name_wins_over_the_host() {
        let config = portcullis_tls::client::build(&portcullis_tls::ClientSpec::default())
            .expect("default settings build");
        let config = Arc::new(portcullis_tls::client::UpstreamClient::new(config, true));
        let named = UpstreamTls::new(config.clone(), Some("api.test:443".into()));
        assert_eq!(named.name("group:8443"), "api.test");
        let unnamed = UpstreamTls::new(config, None);
        assert_eq!(unnamed.name("group:8443"), "group");
    }

    #[test]
    fn errno_text_as_nginx_writes_it() {
        let e = io::Error::from_raw_os_error(104);
        assert_eq!(
            io_failure(&e, "x"),
            "peer closed connection in SSL handshake (104: Connection reset by peer)"
        );
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert_eq!(
            io_failure(&eof, "x"),
            "peer closed connection in SSL handshake"
        );
    }
}
