//! What a connection knows of itself, for variables and the error log: shared by the HTTP/1.1
//! loop, HTTP/2 streams and the requests they carry.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use crate::tls::TlsInfo;
use crate::vars::TcpInfo;

/// What the connection knows of itself, for variables and the error log.
#[derive(Clone)]
pub(crate) struct ConnInfo {
    pub id: u64,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub requests: u64,
    /// Whether the current request was already read, whole or in part, when the one before
    /// it ended (`$pipe`).
    pub pipelined: bool,
    /// When it was accepted: a request that starts more than `keepalive_time` later is its
    /// last, as in nginx.
    pub started: Instant,
    /// The handshake's outcome, on a TLS connection.
    pub tls: Option<Rc<TlsInfo>>,
    /// The client socket, for `$tcpinfo_*`.
    pub fd: std::os::fd::RawFd,
    /// What the PROXY protocol header named, on a `listen ... proxy_protocol` address.
    pub proxy_protocol: Option<Rc<super::proxy_protocol::ProxyProtocol>>,
    /// `merge_slashes` of the server the connection is in before a request names its host:
    /// the address's default server, or the one the TLS handshake's SNI chose. nginx parses
    /// the request line, and merges its slashes, before it reads the `Host` header.
    pub merge_slashes: bool,
}

impl ConnInfo {
    /// The address the client reached: the listener's, or on a wildcard listener (`listen
    /// 80`) the socket's own, asked of the kernel only then, as nginx asks it.
    pub fn local_addr(&self) -> SocketAddr {
        if !self.local.ip().is_unspecified() {
            return self.local;
        }
        let fd = self.fd;
        // SAFETY: `storage` and `len` are valid for writes of the sizes given; a descriptor
        // that is closed or reused makes the call fail or answer for another socket, never
        // write past them.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let rc = unsafe {
            libc::getsockname(
                fd,
                (&mut storage as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return self.local;
        }
        match i32::from(storage.ss_family) {
            libc::AF_INET => {
                // SAFETY: the kernel wrote a sockaddr_in for this family.
                let a: libc::sockaddr_in =
                    unsafe { std::ptr::read((&storage as *const libc::sockaddr_storage).cast()) };
                SocketAddr::from((
                    u32::from_be(a.sin_addr.s_addr).to_be_bytes(),
                    u16::from_be(a.sin_port),
                ))
            }
            libc::AF_INET6 => {
                // SAFETY: the kernel wrote a sockaddr_in6 for this family.
                let a: libc::sockaddr_in6 =
                    unsafe { std::ptr::read((&storage as *const libc::sockaddr_storage).cast()) };
                SocketAddr::from((a.sin6_addr.s6_addr, u16::from_be(a.sin6_port)))
            }
            _ => self.local,
        }
    }

    /// The figure `which` of the socket's `TCP_INFO`, as nginx reads it; `None` when the
    /// kernel does not answer.
    pub fn tcp_info(&self, which: TcpInfo) -> Option<u32> {
        // SAFETY: `tcp_info` is plain data for which all zeroes is a valid value.
        let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: `ti` and `len` are valid for writes of the sizes given; a closed or reused
        // descriptor makes the call fail or answer for another socket, never write past them.
        let rc = unsafe {
            libc::getsockopt(
                self.fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut ti as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return None;
        }
        Some(match which {
            TcpInfo::Rtt => ti.tcpi_rtt,
            TcpInfo::RttVar => ti.tcpi_rttvar,
            TcpInfo::SndCwnd => ti.tcpi_snd_cwnd,
            TcpInfo::RcvSpace => ti.tcpi_rcv_space,
        })
    }
}
