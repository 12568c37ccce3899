//! `error_log syslog:...` and `access_log syslog:...`: each line one datagram to a syslog
//! server, as nginx sends it (RFC 3164): `<PRI>Nov 25 13:29:14 host tag: line`, where PRI is
//! the facility times eight plus the severity (an error log line's own level, an access log's
//! `severity=`), the time local, the host name left out with `nohostname`, and the line
//! without its newline.
//!
//! Parameters as nginx reads them: `server=` (an address with an optional port, 514 by
//! default, or `unix:` and a datagram socket's path; required), `facility=` (`local7`),
//! `severity=` (`info`; access logs only), `tag=` (`nginx`, so that a syslog server's rules
//! written for nginx keep matching; letters, digits and `_`, at most 32) and `nohostname`.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;

/// nginx's facility names, by number.
const FACILITIES: [&str; 24] = [
    "kern", "user", "mail", "daemon", "auth", "intern", "lpr", "news", "uucp", "clock", "authpriv",
    "ftp", "ntp", "audit", "alert", "cron", "local0", "local1", "local2", "local3", "local4",
    "local5", "local6", "local7",
];

/// nginx's severity names, by number (the error log's levels).
const SEVERITIES: [&str; 8] = [
    "emerg", "alert", "crit", "error", "warn", "notice", "info", "debug",
];

/// Where a syslog server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Server {
    Udp(SocketAddr),
    Unix(PathBuf),
}

/// A `syslog:` target as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Syslog {
    pub server: Server,
    pub facility: u8,
    /// `severity=`: an access log line's.
    pub severity: u8,
    pub tag: String,
    /// The host name written in each message; `None` with `nohostname`.
    pub hostname: Option<String>,
}

impl Syslog {
    /// Reads the parameters after `syslog:`; `hostname` is the machine's. The error is
    /// nginx's message.
    pub fn parse(params: &str, hostname: &str) -> Result<Syslog, String> {
        let mut server = None;
        let mut syslog = Syslog {
            server: Server::Udp(SocketAddr::from(([127, 0, 0, 1], 514))),
            facility: 23,
            severity: 6,
            tag: "nginx".into(),
            hostname: Some(hostname.to_string()),
        };
        for p in params.split(',') {
            if let Some(v) = p.strip_prefix("server=") {
                if server.is_some() {
                    return Err("duplicate syslog \"server\"".into());
                }
                server = Some(parse_server(v)?);
            } else if let Some(v) = p.strip_prefix("facility=") {
                let n = FACILITIES.iter().position(|f| *f == v);
                let n = n.ok_or_else(|| format!("unknown syslog facility \"{v}\""))?;
                syslog.facility = n as u8;
            } else if let Some(v) = p.strip_prefix("severity=") {
                let n = SEVERITIES.iter().position(|s| *s == v);
                let n = n.ok_or_else(|| format!("unknown syslog severity \"{v}\""))?;
                syslog.severity = n as u8;
            } else if let Some(v) = p.strip_prefix("tag=") {
                if v.len() > 32 {
                    return Err("syslog tag length exceeds 32".into());
                }
                if !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    return Err(
                        "syslog \"tag\" only allows alphanumeric characters and underscore".into(),
                    );
                }
                syslog.tag = v.to_string();
            } else if p == "nohostname" {
                syslog.hostname = None;
            } else {
                return Err(format!("unknown syslog parameter \"{p}\""));
            }
        }
        syslog.server = server.ok_or("no syslog server specified")?;
        Ok(syslog)
    }

    /// Opens a socket to the server. A datagram socket needs no one listening yet.
    pub fn connect(&self) -> io::Result<Sender> {
        Ok(match &self.server {
            Server::Udp(addr) => {
                let any: SocketAddr = if addr.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    ([0u16; 8], 0).into()
                };
                let s = UdpSocket::bind(any)?;
                s.connect(addr)?;
                // A syslog server that falls behind loses messages, never stalls a worker.
                s.set_nonblocking(true)?;
                Sender::Udp(s)
            }
            Server::Unix(path) => {
                let s = UnixDatagram::unbound()?;
                s.set_nonblocking(true)?;
                // A socket nobody listens on yet is tried again with each message.
                let _ = s.connect(path);
                Sender::Unix(s, path.clone())
            }
        })
    }

    /// One message: the header for `severity`, then `line` without its newline.
    pub fn message(&self, severity: u8, line: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let t = super::local_time(std::time::SystemTime::now());
        let mut m = Vec::with_capacity(line.len() + 64);
        let month = MONTHS[(t.month as usize).saturating_sub(1) % 12];
        let _ = write!(
            m,
            "<{}>{month} {:2} {:02}:{:02}:{:02} ",
            u32::from(self.facility) * 8 + u32::from(severity),
            t.day,
            t.hour,
            t.min,
            t.sec
        );
        if let Some(h) = &self.hostname {
            m.extend_from_slice(h.as_bytes());
            m.push(b' ');
        }
        m.extend_from_slice(self.tag.as_bytes());
        m.extend_from_slice(b": ");
        m.extend_from_slice(line.strip_suffix(b"\n").unwrap_or(line));
        m
    }
}

/// `server=`: `unix:/path`, or an address (a name is resolved now, as nginx resolves it at
/// load) with an optional port.
fn parse_server(v: &str) -> Result<Server, String> {
    if let Some(path) = v.strip_prefix("unix:") {
        return Ok(Server::Unix(PathBuf::from(path)));
    }
    let with_port = if v.starts_with('[') {
        if v.contains("]:") {
            v.to_string()
        } else {
            format!("{v}:514")
        }
    } else if v.contains(':') {
        v.to_string()
    } else {
        format!("{v}:514")
    };
    with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(Server::Udp)
        .ok_or_else(|| format!("host not found in \"{v}\""))
}

/// A socket to a syslog server.
#[derive(Debug)]
pub enum Sender {
    Udp(UdpSocket),
    Unix(UnixDatagram, PathBuf),
}

impl Sender {
    /// Sends one message; a message that cannot be sent is lost, as nginx loses it.
    pub fn send(&self, message: &[u8]) {
        match self {
            Sender::Udp(s) => {
                let _ = s.send(message);
            }
            Sender::Unix(s, path) => {
                if s.send(message).is_err() {
                    let _ = s.send_to(message, path);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_as_nginx_reads_them() {
        let s = Syslog::parse(
            "server=127.0.0.1:1514,facility=local3,severity=notice,tag=acc,nohostname",
            "host",
        )
        .unwrap();
        assert_eq!(s.server, Server::Udp("127.0.0.1:1514".parse().unwrap()));
        assert_eq!((s.facility, s.severity), (19, 5));
        assert_eq!((s.tag.as_str(), s.hostname), ("acc", None));
        let s = Syslog::parse("server=127.0.0.1", "host").unwrap();
        assert_eq!(s.server, Server::Udp("127.0.0.1:514".parse().unwrap()));
        assert_eq!((s.facility, s.severity, s.tag.as_str()), (23, 6, "nginx"));
        let s = Syslog::parse("server=unix:/dev/log", "host").unwrap();
        assert_eq!(s.server, Server::Unix("/dev/log".into()));
        for (bad, why) in [
            ("facility=local7", "no syslog server specified"),
            (
                "server=127.0.0.1,facility=x",
                "unknown syslog facility \"x\"",
            ),
            ("server=127.0.0.1,tag=a-b", "syslog \"tag\" only allows"),
            (
                "server=127.0.0.1,bogus",
                "unknown syslog parameter \"bogus\"",
            ),
        ] {
            let e = Syslog::parse(bad, "h").unwrap_err();
            assert!(e.starts_with(why), "{bad}: {e}");
        }
    }

    #[test]
    fn message_header() {
        let s = Syslog::parse("server=127.0.0.1,tag=t", "vm").unwrap();
        let m = String::from_utf8(s.message(3, b"line\n")).unwrap();
        let re = regex::Regex::new(r"^<187>[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} vm t: line$")
            .unwrap();
        assert!(re.is_match(&m), "{m}");
    }
}
