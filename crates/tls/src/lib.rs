//! TLS for portcullis: rustls server configurations built from nginx's `ssl_*` directives,
//! and client configurations for upstreams built from its `proxy_ssl_*` directives.
//!
//! A server block's settings become a [`ServerTls`] once, when the configuration loads
//! ([`server`]): its certificates ([`certs`], several pairs chosen per client by the
//! signature schemes it offers), protocols, cipher suites and groups, session resumption and
//! client-certificate checking. A connection then reads the ClientHello, picks the server
//! block by SNI and runs the handshake with that block's configuration. [`dn`] writes a
//! certificate's subject as nginx's `$ssl_client_s_dn`. [`client`] builds the configuration a
//! `proxy_pass https://` location connects with, shared by the locations that set alike.

mod certs;
mod chain;
mod ciphers;
pub mod client;
pub mod dn;
pub mod names;
mod pem;
mod server;
pub mod session_id;
mod tickets;

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rustls::server::{ServerSessionMemoryCache, StoresServerSessions};

pub use certs::{
    load_certified_key, load_certs, load_chain, load_crls, load_trust, read_password_file,
    take_load_error, CertChoice, CertLoader,
};
pub use ciphers::{
    kx_groups, openssl_name, protocol_versions, tls12_suites, CipherError, ProtocolChoice,
};
pub use client::{client_config, handshake_failure, ClientCert, ClientSpec, UpstreamClient};
pub use pem::Purpose;
pub use server::{ClientAuth, ClientCheck, ClientVerify, ServerSettings, ServerTls, VerifyClient};
pub use tickets::{load_ticket_keys, new_ticketer, TicketKeyError};

/// Sessions a shared cache holds per megabyte of its size: nginx stores about 4000.
pub const SESSIONS_PER_MB: usize = 4000;

/// nginx's default `ssl_session_timeout`.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(300);

/// Why a TLS configuration could not be built, in nginx's words.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    #[error("cannot load {what} \"{path}\": {cause}")]
    Certificate {
        what: &'static str,
        path: String,
        cause: String,
    },
    #[error("cannot load certificate key \"{path}\": {cause}")]
    Key { path: String, cause: String },
    /// `ssl_crl`, `proxy_ssl_crl`: the call OpenSSL's error would name, and why.
    #[error("X509_LOOKUP_load_file(\"{path}\") failed ({cause})")]
    Crl { path: String, cause: String },
    #[error("SSL_CTX_use_PrivateKey(\"{path}\") failed (key values mismatch)")]
    KeyMismatch { path: String },
    #[error("no ssl_client_certificate for ssl_verify_client")]
    NoClientCa,
    #[error("{0}")]
    Config(String),
}

/// A session cache of `bytes` (`ssl_session_cache shared:name:size`), shared by every
/// worker and every server block that names it; sessions live for `timeout`
/// (`ssl_session_timeout`).
pub fn session_cache(bytes: u64, timeout: Duration) -> Arc<dyn StoresServerSessions> {
    let sessions = (bytes.saturating_mul(SESSIONS_PER_MB as u64) / (1024 * 1024)).max(1);
    session_cache_of(usize::try_from(sessions).unwrap_or(usize::MAX), timeout)
}

/// The session cache named `name` (`ssl_session_cache shared:name:size`): the one already
/// serving under that name and size if there is one, so that a reload keeps the sessions, as
/// nginx keeps a shared zone; else a new one.
pub fn shared_session_cache(
    name: &str,
    bytes: u64,
    timeout: Duration,
) -> Arc<dyn StoresServerSessions> {
    /// Caches by name and size. Weak: a cache lives as long as a configuration uses it.
    static SHARED: Mutex<Vec<NamedCache>> = Mutex::new(Vec::new());
    let Ok(mut shared) = SHARED.lock() else {
        return session_cache(bytes, timeout);
    };
    shared.retain(|(_, _, cache)| cache.strong_count() > 0);
    if let Some(cache) = shared
        .iter()
        .find(|(n, b, _)| n == name && *b == bytes)
        .and_then(|(_, _, cache)| cache.upgrade())
    {
        return cache;
    }
    let cache = session_cache(bytes, timeout);
    shared.push((name.to_string(), bytes, Arc::downgrade(&cache)));
    cache
}

/// A cache of [`shared_session_cache`]: its name, its size in bytes, and the cache.
type NamedCache = (String, u64, Weak<dyn StoresServerSessions>);

/// A session cache holding `sessions` (`ssl_session_cache builtin:size`) for `timeout`.
pub fn session_cache_of(sessions: usize, timeout: Duration) -> Arc<dyn StoresServerSessions> {
    Arc::new(SessionCache {
        cache: ServerSessionMemoryCache::new(sessions.max(1)),
        timeout,
    })
}

/// Bytes of the creation time (seconds since the epoch) stored before each session.
const STAMP: usize = 8;

/// rustls's memory cache with nginx's session lifetime, and whose TLS 1.3 sessions may be
/// resumed more than once, as OpenSSL's cache allows when early data is off (rustls takes
/// them out on first use, which only matters against 0-RTT replay, and early data is never
/// accepted here).
#[derive(Debug)]
struct SessionCache {
    cache: Arc<ServerSessionMemoryCache>,
    timeout: Duration,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        session_id::note_stored(&key, &value);
        let mut stamped = Vec::with_capacity(STAMP + value.len());
        stamped.extend_from_slice(&now_secs().to_be_bytes());
        stamped.extend_from_slice(&value);
        self.cache.put(key, stamped)
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let stamped = self.cache.get(key)?;
        let (stamp, value) = stamped.split_at_checked(STAMP)?;
        let created = u64::from_be_bytes(stamp.try_into().ok()?);
        (now_secs().saturating_sub(created) <= self.timeout.as_secs()).then(|| value.to_vec())
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.get(key)
    }
    fn can_cache(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_resume_more_than_once_within_their_timeout() {
        let cache = session_cache(1024 * 1024, Duration::from_secs(300));
        assert!(cache.put(b"id".to_vec(), b"session".to_vec()));
        assert_eq!(cache.take(b"id").as_deref(), Some(&b"session"[..]));
        assert_eq!(cache.take(b"id").as_deref(), Some(&b"session"[..]));
        assert_eq!(cache.get(b"other"), None);
    }

    #[test]
    fn a_named_cache_is_found_again_while_in_use() {
        let a = shared_session_cache("unit-test-zone", 1 << 20, Duration::from_secs(60));
        assert!(a.put(b"k".to_vec(), b"v".to_vec()));
        let b = shared_session_cache("unit-test-zone", 1 << 20, Duration::from_secs(60));
        assert_eq!(b.get(b"k").as_deref(), Some(&b"v"[..]));
        let other = shared_session_cache("unit-test-zone", 2 << 20, Duration::from_secs(60));
        assert_eq!(other.get(b"k"), None);
    }

    #[test]
    fn expired_sessions_are_not_resumed() {
        let cache = session_cache_of(10, Duration::ZERO);
        let old = (now_secs() - 5).to_be_bytes();
        let mut stamped = old.to_vec();
        stamped.extend_from_slice(b"session");
        // Stored as `put` would have five seconds ago.
        let inner = SessionCache {
            cache: ServerSessionMemoryCache::new(10),
            timeout: Duration::from_secs(1),
        };
        assert!(inner.cache.put(b"id".to_vec(), stamped));
        assert_eq!(inner.get(b"id"), None);
        assert!(cache.put(b"id".to_vec(), b"fresh".to_vec()));
        assert_eq!(cache.get(b"id").as_deref(), Some(&b"fresh"[..]));
    }
}
