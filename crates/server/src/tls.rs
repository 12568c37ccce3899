//! TLS on a connection: telling a handshake from plain HTTP sent to a TLS port, choosing the
//! server block by SNI, the handshake, and the stream the connection loop then reads and
//! writes, plain TCP or TLS.

pub(crate) mod server;

use server::ServerTlsConf;
use std::io;
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::time::Duration;

use portcullis_proxy::Tcp;
use portcullis_tls::{ClientVerify, VerifyClient};
use rustls::HandshakeKind;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::LazyConfigAcceptor;

use crate::conf::{Listen, ServerConf};
use crate::vars::SslVar;

/// Bytes of a file read per TLS write: four full records, which go out in one writev.
const FILE_CHUNK: usize = 64 * 1024;
/// The first byte of a TLS handshake record.
const HANDSHAKE_RECORD: u8 = 0x16;
/// A fatal `unrecognized_name` alert in a TLS 1.2-framed record: what OpenSSL sends when
/// nginx's `ssl_reject_handshake` refuses a ClientHello.
const UNRECOGNIZED_NAME_ALERT: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70];

/// A connection's byte stream.
pub(crate) type Stream = portcullis_proxy::MaybeTls<TlsStream<Tcp>>;

/// What a TLS connection reports through `$ssl_*`, found once after its handshake.
pub(crate) struct TlsInfo {
    /// `$ssl_protocol`: "TLSv1.3" or "TLSv1.2".
    pub protocol: &'static str,
    /// `$ssl_cipher`, OpenSSL's name.
    pub cipher: &'static str,
    /// `$ssl_server_name`.
    pub server_name: Option<Box<str>>,
    /// `$ssl_alpn_protocol`.
    pub alpn: Option<Box<[u8]>>,
    /// `$ssl_curve`.
    pub curve: Option<rustls::NamedGroup>,
    /// What the client offered, kept only when the configuration reads it.
    pub hello: Offered,
    /// `$ssl_session_reused`.
    pub reused: bool,
    /// `$ssl_session_id`'s bytes, found only when the configuration reads it.
    pub session_id: Option<Box<[u8]>>,
    /// `$ssl_client_verify`.
    pub verify: ClientVerify,
    /// `$ssl_client_s_dn`.
    pub client_s_dn: Option<Box<str>>,
    /// The client's certificate (DER), for the other `$ssl_client_*` variables.
    pub client_cert: Option<Box<[u8]>>,
    /// Whether a request on this connection is refused for its client certificate, and with
    /// which of nginx's codes (495 bad certificate, 496 none sent).
    pub refuse: Option<u16>,
    /// Whether ALPN chose HTTP/2.
    pub h2: bool,
    /// `merge_slashes` of the server the name chose, which nginx's requests keep until
    /// their Host names a server.
    pub merge_slashes: bool,
}

/// The cipher suites and groups of a client's hello, by number, for `$ssl_ciphers` and
/// `$ssl_curves`.
#[derive(Default)]
pub(crate) struct Offered {
    pub ciphers: Option<Box<[u16]>>,
    pub groups: Option<Box<[u16]>>,
}

/// How a connection to a TLS address starts.
pub(crate) enum Start {
    Tls(Stream, Rc<TlsInfo>),
    /// The first byte is not a TLS record: plain HTTP sent to the TLS port, answered with
    /// nginx's 400 page.
    PlainHttp(TcpStream),
    /// Closed, timed out, refused or failed: nothing more to do but log what nginx logs (at
    /// info level), if anything.
    Closed(Option<String>),
    /// Failed for want of the server's own files (a certificate named by variables that
    /// cannot be read): logged at error level.
    Failed(String),
}

/// Runs the server side of a handshake on a connection to `listen`, within `timeout` (nginx's
/// client_header_timeout, which starts at accept).
pub(crate) async fn accept(stream: TcpStream, listen: &Listen, timeout: Duration) -> Start {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut first = [0u8; 1];
    match tokio::time::timeout_at(deadline, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == HANDSHAKE_RECORD => {}
        Ok(Ok(1)) => return Start::PlainHttp(stream),
        Err(_) => return Start::Closed(Some(TIMED_OUT.into())),
        _ => return Start::Closed(None),
    }
    let names = &listen.servers.default_server().names;
    let hello_id = if names.session_id.load(std::sync::atomic::Ordering::Relaxed) {
        Some(peek_hello(&stream, deadline).await)
    } else {
        None
    };
    let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), Tcp(stream));
    let mut start = match tokio::time::timeout_at(deadline, acceptor).await {
        Ok(Ok(start)) => start,
        Ok(Err(e)) => return Start::Closed(Some(handshake_failed(&e))),
        Err(_) => return Start::Closed(Some(TIMED_OUT.into())),
    };
    let hello = start.client_hello();
    let sni: Option<Box<str>> = hello.server_name().map(Box::from);
    let offered = if names
        .client_hello
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        Offered {
            ciphers: Some(
                hello
                    .cipher_suites()
                    .iter()
                    .map(|&c| u16::from(c))
                    .collect(),
            ),
            groups: Some(
                hello
                    .named_groups()
                    .unwrap_or_default()
                    .iter()
                    .map(|&g| u16::from(g))
                    .collect(),
            ),
        }
    } else {
        Offered::default()
    };
    let server = match sni.as_deref() {
        Some(name) => listen.servers.find(Some(name)),
        None => listen.servers.default_server(),
    };
    let Some((conf, tls)) = server_tls(server, listen) else {
        return Start::Closed(None);
    };
    if conf.reject_handshake {
        let _ =
            tokio::time::timeout_at(deadline, start.io.write_all(&UNRECOGNIZED_NAME_ALERT)).await;
        return Start::Closed(None);
    }
    let Some(tls) = tls else {
        return Start::Closed(None);
    };
    let mark = hello_id
        .as_ref()
        .map(|_| portcullis_tls::session_id::Mark::new());
    let handshake = start.into_stream_with(tls.config.clone(), |c| {
        if let Some(mark) = &mark {
            c.set_resumption_data(&mark.data());
        }
    });
    let stream = match tokio::time::timeout_at(deadline, handshake).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return match portcullis_tls::take_load_error() {
                Some(why) => Start::Failed(format!("{why} while SSL handshaking")),
                None => Start::Closed(Some(handshake_failed(&e))),
            }
        }
        Err(_) => return Start::Closed(Some(TIMED_OUT.into())),
    };
    let (_, session) = stream.get_ref();
    let protocol = match session.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
        _ => "TLSv1.2",
    };
    let cipher = session
        .negotiated_cipher_suite()
        .map_or("", |s| portcullis_tls::openssl_name(s.suite()));
    let reused = session.handshake_kind() == Some(HandshakeKind::Resumed);
    let session_id = match (hello_id, mark) {
        (Some(hello), Some(mark)) => {
            let tickets = tls.config.ticketer.enabled();
            Some(session_id(protocol, reused, hello, &mark, tickets))
        }
        _ => None,
    };
    let certs = session.peer_certificates();
    let (verify, refuse) = match &tls.client {
        None => (ClientVerify::None, None),
        Some(check) => {
            let verify = check.verify(certs);
            let refuse = match (&verify, check.mode) {
                (ClientVerify::None, VerifyClient::On) => Some(496),
                (ClientVerify::Failed(_), VerifyClient::On | VerifyClient::Optional) => Some(495),
                _ => None,
            };
            (verify, refuse)
        }
    };
    let client_cert = certs.and_then(|c| c.first()).map(|c| Box::from(c.as_ref()));
    let client_s_dn = client_cert
        .as_deref()
        .and_then(portcullis_tls::dn::subject_rfc2253)
        .map(Box::from);
    let info = TlsInfo {
        protocol,
        cipher,
        server_name: sni,
        alpn: session.alpn_protocol().map(Box::from),
        curve: session.negotiated_key_exchange_group().map(|g| g.name()),
        hello: offered,
        reused,
        session_id,
        verify,
        client_s_dn,
        client_cert,
        refuse,
        h2: session.alpn_protocol() == Some(b"h2"),
        merge_slashes: server.merge_slashes,
    };
    Start::Tls(Stream::Tls(Box::new(stream)), Rc::new(info))
}

/// The connection's first TLS record, the ClientHello, read without taking it (the
/// handshake reads it again). A hello larger than a segment (a browser's, with post-quantum
/// key shares) may come in parts: the rest is looked for every millisecond until `deadline`,
/// and what came by then is read.
async fn peek_hello(
    stream: &TcpStream,
    deadline: tokio::time::Instant,
) -> portcullis_tls::session_id::Hello {
    let mut header = [0u8; 5];
    let len = match stream.peek(&mut header).await {
        Ok(5) => usize::from(u16::from_be_bytes([header[3], header[4]])),
        _ => 0,
    };
    let mut record = vec![0u8; 5 + len];
    let mut n = stream.peek(&mut record).await.unwrap_or(0);
    while n > 0 && n < record.len() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
        n = stream.peek(&mut record).await.unwrap_or(0);
    }
    portcullis_tls::session_id::Hello::read(&record[..n])
}

/// `$ssl_session_id` of a connection, as OpenSSL gives it (see `portcullis_tls::session_id`):
/// `tickets` says whether the server issues session tickets.
fn session_id(
    protocol: &str,
    reused: bool,
    hello: portcullis_tls::session_id::Hello,
    mark: &portcullis_tls::session_id::Mark,
    tickets: bool,
) -> Box<[u8]> {
    let stored = mark.take_stored();
    if protocol == "TLSv1.3" {
        return Box::new(portcullis_tls::session_id::random_id());
    }
    if reused {
        return hello.session_id.into();
    }
    if hello.offers_tickets && tickets {
        return Box::default();
    }
    match stored {
        Some(id) => id.into(),
        None => Box::new(portcullis_tls::session_id::random_id()),
    }
}

/// nginx's line for a handshake that took too long.
const TIMED_OUT: &str = "client timed out (110: Connection timed out) while SSL handshaking";

/// nginx's line for a failed handshake, with rustls's reason where OpenSSL's would be.
fn handshake_failed(e: &io::Error) -> String {
    format!("SSL_do_handshake() failed ({e}) while SSL handshaking")
}

/// The TLS settings a handshake for `server` uses: its own, else the default server's.
fn server_tls<'a>(
    server: &'a ServerConf,
    listen: &'a Listen,
) -> Option<(&'a ServerTlsConf, Option<&'a portcullis_tls::ServerTls>)> {
    let conf = server
        .tls
        .as_deref()
        .or(listen.servers.default_server().tls.as_deref())?;
    Some((conf, conf.tls.as_ref()))
}

/// Sends `head`, then `len` bytes of `file` from `offset`: with sendfile on plain TCP, else
/// read into a buffer and written through TLS, the head in the same records as the file's
/// first bytes.
pub(crate) async fn send_file(
    stream: &mut Stream,
    head: &[u8],
    file: &std::fs::File,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    if let Stream::Plain(s) = stream {
        s.write_all(head).await?;
        return crate::files::send_file(s.registered()?, file, offset, len).await;
    }
    let mut buf = vec![0u8; FILE_CHUNK.min(usize::try_from(len).unwrap_or(FILE_CHUNK))];
    let mut head = head;
    let mut done = 0u64;
    while done < len {
        // The first read leaves room for the head: four full records again.
        let room = FILE_CHUNK.saturating_sub(head.len()).max(1).min(buf.len());
        let want = room.min(usize::try_from(len - done).unwrap_or(room));
        let n = file.read_at(&mut buf[..want], offset + done)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "file was truncated while being sent",
            ));
        }
        portcullis_proxy::write_two(stream, head, &buf[..n]).await?;
        head = &[];
        done += n as u64;
    }
    portcullis_proxy::write_two(stream, head, &[]).await?;
    stream.flush().await
}

/// Writes a TLS variable's value; nothing on a plain connection.
pub(crate) fn ssl_var(v: SslVar, tls: Option<&TlsInfo>, out: &mut Vec<u8>) {
    let Some(t) = tls else {
        return;
    };
    match v {
        SslVar::Https => out.extend_from_slice(b"on"),
        SslVar::Protocol => out.extend_from_slice(t.protocol.as_bytes()),
        SslVar::Cipher => out.extend_from_slice(t.cipher.as_bytes()),
        SslVar::AlpnProtocol => out.extend_from_slice(t.alpn.as_deref().unwrap_or_default()),
        SslVar::Curve => {
            if let Some(group) = t.curve {
                portcullis_tls::names::group_name(u16::from(group), out);
            }
        }
        SslVar::Ciphers => {
            if let Some(ids) = &t.hello.ciphers {
                portcullis_tls::names::cipher_list(ids.iter().copied(), out);
            }
        }
        SslVar::Curves => {
            if let Some(ids) = &t.hello.groups {
                portcullis_tls::names::group_list(ids.iter().copied(), out);
            }
        }
        SslVar::ServerName => {
            if let Some(n) = &t.server_name {
                out.extend_from_slice(n.as_bytes());
            }
        }
        SslVar::ClientVerify => out.extend_from_slice(t.verify.as_text().as_bytes()),
        SslVar::ClientSDn => {
            if let Some(dn) = &t.client_s_dn {
                out.extend_from_slice(dn.as_bytes());
            }
        }
        SslVar::SessionReused => out.push(if t.reused { b'r' } else { b'.' }),
        SslVar::SessionId => {
            for b in t.session_id.iter().flat_map(|id| id.iter()) {
                out.extend_from_slice(format!("{b:02x}").as_bytes());
            }
        }
        cert_var => {
            if let Some(cert) = &t.client_cert {
                client_cert_var(cert_var, cert, out);
            }
        }
    }
}

/// The `$ssl_client_*` variables read from the client's certificate, as nginx writes them.
fn client_cert_var(v: SslVar, cert: &[u8], out: &mut Vec<u8>) {
    use portcullis_tls::dn;
    match v {
        SslVar::ClientIDn => {
            out.extend_from_slice(dn::issuer_rfc2253(cert).unwrap_or_default().as_bytes())
        }
        SslVar::ClientSDnLegacy => {
            out.extend_from_slice(dn::subject_oneline(cert).unwrap_or_default().as_bytes())
        }
        SslVar::ClientIDnLegacy => {
            out.extend_from_slice(dn::issuer_oneline(cert).unwrap_or_default().as_bytes())
        }
        SslVar::ClientSerial => {
            out.extend_from_slice(dn::serial_hex(cert).unwrap_or_default().as_bytes())
        }
        SslVar::ClientFingerprint => out.extend_from_slice(dn::fingerprint_sha1(cert).as_bytes()),
        SslVar::ClientVStart | SslVar::ClientVEnd | SslVar::ClientVRemain => {
            let Some((start, end)) = dn::validity(cert) else {
                return;
            };
            let secs = |t: dn::CertTime| {
                crate::files::secs_from_civil(t.year, t.month, t.day, t.hour, t.minute, t.second)
            };
            let (start, end) = (secs(start), secs(end));
            match v {
                SslVar::ClientVStart => {
                    out.extend_from_slice(crate::files::fmt_openssl_time(start).as_bytes())
                }
                SslVar::ClientVEnd => {
                    out.extend_from_slice(crate::files::fmt_openssl_time(end).as_bytes())
                }
                _ => {
                    // nginx: whole days left, 0 within the last one.
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
                    let days = if end < now + 86_400 {
                        0
                    } else {
                        (end - now) / 86_400
                    };
                    out.extend_from_slice(days.to_string().as_bytes());
                }
            }
        }
        SslVar::ClientRawCert => out.extend_from_slice(dn::pem(cert).as_bytes()),
        SslVar::ClientCert => {
            // The PEM without its last newline, each further line led by a tab.
            let pem = dn::pem(cert);
            let pem = pem.strip_suffix('\n').unwrap_or(&pem);
            out.extend_from_slice(pem.replace('\n', "\n\t").as_bytes());
        }
        SslVar::ClientEscapedCert => {
            crate::vars::escape(
                dn::pem(cert).as_bytes(),
                out,
                crate::vars::Escape::Component,
            );
        }
        _ => {}
    }
}
