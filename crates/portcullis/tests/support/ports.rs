//! Free ports for servers under test, shared by the test harnesses of every crate (each
//! includes this file with `#[path]`).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Mutex;

use socket2::{Domain, Socket, Type};

/// Picks `n` distinct free ports on 127.0.0.1: bind to port 0, read the port, close.
/// Another process may still take one before the server binds it.
///
/// The probe sockets are bound but never listen: a listening probe would accept another
/// test's readiness check for a server that has not bound that port yet, and the test would
/// then find nothing listening. A port is handed out once per test process, so two tests
/// running side by side never wait on the same port.
pub fn free_ports(n: usize) -> Vec<u16> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut probes = Vec::new();
    let mut ports = Vec::new();
    while ports.len() < n {
        let probe = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        let any_port = SocketAddr::from(([127, 0, 0, 1], 0));
        probe.bind(&any_port.into()).expect("bind 127.0.0.1:0");
        let port = probe
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("local addr")
            .port();
        if handed_out.insert(port) {
            ports.push(port);
        }
        // Held until all are picked, so that the kernel picks `n` different ports.
        probes.push(probe);
    }
    ports
}
