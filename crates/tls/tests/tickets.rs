//! Session ticket keys: nginx's key files, rotation between them, refusal of bad tickets, and
//! resumption through real rustls handshakes with the ticketer installed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use portcullis_tls::{load_ticket_keys, new_ticketer};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::ProducesTickets;
use rustls::{ClientConfig, ClientConnection, HandshakeKind, RootCertStore, ServerConfig};
use rustls::{ServerConnection, SupportedProtocolVersion};

const LIFETIME: Duration = Duration::from_secs(300);

/// A directory of key files, removed when dropped.
struct KeyDir(PathBuf);

impl KeyDir {
    fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("portcullis-tickets-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temporary directory");
        Self(dir)
    }

    /// Writes `len` bytes, all derived from `seed`, to a file named `name`.
    fn key(&self, name: &str, len: usize, seed: u8) -> PathBuf {
        let path = self.0.join(name);
        let bytes: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect();
        std::fs::write(&path, bytes).expect("key file written");
        path
    }
}

impl Drop for KeyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn load(files: &[&Path]) -> Arc<dyn ProducesTickets> {
    let files: Vec<PathBuf> = files.iter().map(|p| p.to_path_buf()).collect();
    load_ticket_keys(&files, LIFETIME).expect("key files load")
}

#[test]
fn both_file_sizes_round_trip() {
    let dir = KeyDir::new("sizes");
    for len in [48, 80] {
        let keys = load(&[&dir.key(&format!("k{len}"), len, 7)]);
        assert!(keys.enabled());
        assert_eq!(keys.lifetime(), 300);
        let ticket = keys.encrypt(b"session state").expect("encrypts");
        assert_eq!(
            ticket[..16],
            std::fs::read(dir.0.join(format!("k{len}"))).expect("read")[..16]
        );
        assert_eq!(
            keys.decrypt(&ticket).as_deref(),
            Some(&b"session state"[..])
        );
    }
}

#[test]
fn every_key_of_the_set_decrypts() {
    let dir = KeyDir::new("rotation");
    let (old, new) = (dir.key("old", 80, 1), dir.key("new", 48, 2));
    let before = load(&[&old]);
    let after = load(&[&new, &old]);
    let ticket = before.encrypt(b"made before rotation").expect("encrypts");
    assert_eq!(
        after.decrypt(&ticket).as_deref(),
        Some(&b"made before rotation"[..])
    );
    // New tickets are made with the first key, which the old set does not have.
    let ticket = after.encrypt(b"made after").expect("encrypts");
    assert_eq!(before.decrypt(&ticket), None);
    assert_eq!(
        load(&[&new]).decrypt(&ticket).as_deref(),
        Some(&b"made after"[..])
    );
}

#[test]
fn changed_tickets_are_refused() {
    let dir = KeyDir::new("tamper");
    let keys = load(&[&dir.key("k", 80, 3)]);
    let ticket = keys.encrypt(b"session").expect("encrypts");
    for at in 0..ticket.len() {
        let mut changed = ticket.clone();
        changed[at] ^= 0x01;
        assert_eq!(keys.decrypt(&changed), None, "byte {at} changed");
    }
    let mut longer = ticket.clone();
    longer.push(0);
    assert_eq!(keys.decrypt(&longer), None);
    // Same name, other material: the name alone does not open a ticket.
    let same_name = dir.key("same-name", 80, 3);
    let mut material = std::fs::read(&same_name).expect("read");
    material[40] ^= 0xff;
    std::fs::write(&same_name, material).expect("write");
    assert_eq!(load(&[&same_name]).decrypt(&ticket), None);
}

#[test]
fn bad_files_are_named_as_nginx_names_them() {
    let dir = KeyDir::new("errors");
    let odd = dir.key("odd", 50, 0);
    let err = load_ticket_keys(std::slice::from_ref(&odd), LIFETIME).expect_err("50 bytes");
    assert_eq!(
        err.to_string(),
        format!("\"{}\" must be 48 or 80 bytes", odd.display())
    );
    let missing = dir.0.join("missing");
    let err = load_ticket_keys(std::slice::from_ref(&missing), LIFETIME).expect_err("no file");
    assert_eq!(
        err.to_string(),
        format!(
            "open() \"{}\" failed (2: No such file or directory)",
            missing.display()
        )
    );
    let good = dir.key("good", 80, 0);
    assert!(load_ticket_keys(&[good, odd], LIFETIME).is_err());
    assert!(load_ticket_keys(&[], LIFETIME).is_err());
}

#[test]
fn random_keys_are_shared_not_repeated() {
    let shared = new_ticketer(Duration::from_secs(600)).expect("random key");
    assert_eq!(shared.lifetime(), 600);
    let other = new_ticketer(Duration::from_secs(600)).expect("random key");
    let ticket = std::thread::spawn({
        let shared = Arc::clone(&shared);
        move || shared.encrypt(b"from another worker")
    })
    .join()
    .expect("worker thread")
    .expect("encrypts");
    assert_eq!(
        shared.decrypt(&ticket).as_deref(),
        Some(&b"from another worker"[..])
    );
    assert_eq!(other.decrypt(&ticket), None);
}

/// Runs a handshake in memory; true when the server resumed a session.
fn handshake(client: &Arc<ClientConfig>, server: &Arc<ServerConfig>) -> HandshakeKind {
    let name = "localhost".try_into().expect("server name");
    let mut client = ClientConnection::new(Arc::clone(client), name).expect("client");
    let mut server = ServerConnection::new(Arc::clone(server)).expect("server");
    let mut wire = Vec::new();
    // A handshake takes a few flights; the bound stops a stalled exchange from looping.
    for _ in 0..10 {
        while client.wants_write() {
            client.write_tls(&mut wire).expect("client writes");
        }
        let mut flight = &wire[..];
        while !flight.is_empty() {
            server.read_tls(&mut flight).expect("server reads");
        }
        wire.clear();
        server.process_new_packets().expect("server accepts");
        while server.wants_write() {
            server.write_tls(&mut wire).expect("server writes");
        }
        let mut flight = &wire[..];
        while !flight.is_empty() {
            client.read_tls(&mut flight).expect("client reads");
        }
        wire.clear();
        client.process_new_packets().expect("client accepts");
        if !client.is_handshaking() && !server.is_handshaking() && !server.wants_write() {
            break;
        }
    }
    assert!(!server.is_handshaking(), "handshake completed");
    server.handshake_kind().expect("handshake kind")
}

fn configs(
    version: &'static SupportedProtocolVersion,
    ticketer: Arc<dyn ProducesTickets>,
) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
        .expect("test certificate");
    let cert: CertificateDer<'static> = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
    let mut server = ServerConfig::builder_with_protocol_versions(&[version])
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .expect("server config");
    server.ticketer = ticketer;
    server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    let mut roots = RootCertStore::empty();
    roots.add(cert).expect("root");
    let client = ClientConfig::builder_with_protocol_versions(&[version])
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(client), Arc::new(server))
}

#[test]
fn handshakes_resume_with_file_keys() {
    let dir = KeyDir::new("handshake");
    let key = dir.key("k", 80, 9);
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let (client, server) = configs(version, load(&[&key]));
        assert_eq!(
            handshake(&client, &server),
            HandshakeKind::Full,
            "{version:?}"
        );
        assert_eq!(
            handshake(&client, &server),
            HandshakeKind::Resumed,
            "{version:?}"
        );
        // Another server process with the same key file resumes it too.
        let mut other = (*server).clone();
        other.ticketer = load(&[&dir.key("new", 48, 4), &key]);
        assert_eq!(
            handshake(&client, &Arc::new(other)),
            HandshakeKind::Resumed,
            "{version:?}"
        );
    }
}

#[test]
fn handshakes_do_not_resume_under_another_key() {
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let (client, server) = configs(version, new_ticketer(LIFETIME).expect("random key"));
        assert_eq!(
            handshake(&client, &server),
            HandshakeKind::Full,
            "{version:?}"
        );
        let mut other = (*server).clone();
        other.ticketer = new_ticketer(LIFETIME).expect("random key");
        assert_eq!(
            handshake(&client, &Arc::new(other)),
            HandshakeKind::Full,
            "{version:?}"
        );
    }
}
