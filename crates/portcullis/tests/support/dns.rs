//! A small DNS server for tests: answers A queries for the names it is given (from
//! 127.0.0.1, on a port of its own), NXDOMAIN for the others, and an empty answer for any
//! other type of a known name. Its answers can change while it runs.

use std::collections::HashMap;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::{Arc, Mutex};

pub struct Dns {
    port: u16,
    names: Arc<Mutex<HashMap<String, Vec<Ipv4Addr>>>>,
}

impl Dns {
    pub fn start() -> Dns {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind the DNS server");
        let port = socket.local_addr().expect("addr").port();
        let names: Arc<Mutex<HashMap<String, Vec<Ipv4Addr>>>> = Arc::default();
        let known = names.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                let answers = known.lock().map(|k| k.clone()).unwrap_or_default();
                if let Some(reply) = answer(&buf[..n], &answers) {
                    let _ = socket.send_to(&reply, from);
                }
            }
        });
        Dns { port, names }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on `name` resolves to `ips`.
    pub fn set(&self, name: &str, ips: &[Ipv4Addr]) {
        if let Ok(mut k) = self.names.lock() {
            k.insert(name.to_ascii_lowercase(), ips.to_vec());
        }
    }
}

/// The reply to one query, or `None` for a message that is not one.
fn answer(query: &[u8], names: &HashMap<String, Vec<Ipv4Addr>>) -> Option<Vec<u8>> {
    if query.len() < 12 || query[2] & 0x80 != 0 {
        return None;
    }
    // The question: labels, then type and class.
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*query.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(i..i + len)?).to_ascii_lowercase());
        i += len;
    }
    let qtype = u16::from_be_bytes([*query.get(i)?, *query.get(i + 1)?]);
    let question = &query[12..i + 4];
    let found = names.get(&labels.join("."));
    let ips: &[Ipv4Addr] = match (found, qtype) {
        (Some(ips), 1) => ips,
        _ => &[],
    };
    let mut r = Vec::with_capacity(64);
    r.extend_from_slice(&query[..2]);
    // A response, recursion desired and available; NXDOMAIN for an unknown name.
    r.extend_from_slice(&[0x81, if found.is_some() { 0x80 } else { 0x83 }]);
    r.extend_from_slice(&1u16.to_be_bytes());
    r.extend_from_slice(&(ips.len() as u16).to_be_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]);
    r.extend_from_slice(question);
    for ip in ips {
        // The question's name, type A, class IN, one second to live.
        r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4]);
        r.extend_from_slice(&ip.octets());
    }
    Some(r)
}
