//! Session tickets: `ssl_session_ticket_key` files, and the random key used without them.
//!
//! A ticket is built as nginx's key callback builds it for OpenSSL (RFC 5077's recommended
//! construction): the 16-byte name of the key that made it, a random 16-byte IV, the session
//! state encrypted with AES-CBC (AES-128 for a 48-byte key file, AES-256 for an 80-byte one),
//! and an HMAC-SHA256 of all that. The keys are the files' own material, used the way nginx
//! uses it, so that a key file means the same here as there. The encrypted state starts with
//! the time the ticket was made, which is how a ticket older than `ssl_session_timeout` is
//! refused, as OpenSSL refuses a session past its timeout.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::cipher::{
    DecryptionContext, PaddedBlockDecryptingKey, PaddedBlockEncryptingKey, UnboundCipherKey,
    AES_128, AES_256, AES_CBC_IV_LEN,
};
use aws_lc_rs::{hmac, iv};
use rustls::server::ProducesTickets;

/// A ticket key file that cannot be used, or a key that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TicketKeyError {
    message: String,
}

impl TicketKeyError {
    fn new(message: String) -> Self {
        Self { message }
    }
}

/// Length of a key's name, the first bytes of every ticket.
const NAME_LEN: usize = 16;
/// Length of the HMAC-SHA256 tag that ends every ticket.
const MAC_LEN: usize = 32;
/// Length of the issue time at the start of the encrypted state.
const ISSUED_LEN: usize = 8;
/// A 48-byte key file: name, AES-128 key, HMAC key (16 bytes each).
const SHORT_KEY_FILE: usize = 48;
/// An 80-byte key file: name, HMAC key (32 bytes), AES-256 key (32 bytes).
const LONG_KEY_FILE: usize = 80;
/// The protocol's limit on a ticket (opaque ticket<1..2^16-1>); longer input is not ours.
const MAX_TICKET_LEN: usize = u16::MAX as usize;
/// The longest lifetime a ticket may announce: RFC 8446 4.6.1 forbids more than seven days,
/// whatever `ssl_session_timeout` says (a longer timeout still lets older tickets in).
const MAX_LIFETIME_HINT: u32 = 7 * 24 * 60 * 60;
/// The shortest ticket this module makes: name, IV, one AES block, tag.
const MIN_TICKET_LEN: usize = NAME_LEN + AES_CBC_IV_LEN + 16 + MAC_LEN;

/// One key: the name tickets carry, and the keys derived from its file.
struct TicketKey {
    name: [u8; NAME_LEN],
    aes_bits: u16,
    encrypt: PaddedBlockEncryptingKey,
    decrypt: PaddedBlockDecryptingKey,
    hmac: hmac::Key,
}

impl TicketKey {
    /// Splits key material as nginx's `ngx_ssl_session_ticket_keys` does.
    fn from_material(material: &[u8]) -> Option<Self> {
        let (name, aes, mac) = match material.len() {
            SHORT_KEY_FILE => (&material[..16], &material[16..32], &material[32..48]),
            LONG_KEY_FILE => (&material[..16], &material[48..80], &material[16..48]),
            _ => return None,
        };
        let algorithm = if aes.len() == 16 { &AES_128 } else { &AES_256 };
        let cipher = |key| UnboundCipherKey::new(algorithm, key).ok();
        Some(Self {
            name: name.try_into().ok()?,
            aes_bits: if aes.len() == 16 { 128 } else { 256 },
            encrypt: PaddedBlockEncryptingKey::cbc_pkcs7(cipher(aes)?).ok()?,
            decrypt: PaddedBlockDecryptingKey::cbc_pkcs7(cipher(aes)?).ok()?,
            hmac: hmac::Key::new(hmac::HMAC_SHA256, mac),
        })
    }
}

/// The keys of one `ssl_session_ticket_key` set: the first makes tickets, any opens them.
struct TicketKeys {
    keys: Vec<TicketKey>,
    lifetime: Duration,
}

impl TicketKeys {
    fn encrypt_at(&self, plain: &[u8], now: u64) -> Option<Vec<u8>> {
        let key = self.keys.first()?;
        let mut state = Vec::with_capacity(ISSUED_LEN + plain.len() + 16);
        state.extend_from_slice(&now.to_be_bytes());
        state.extend_from_slice(plain);
        let context = key.encrypt.encrypt(&mut state).ok()?;
        let iv: &[u8] = (&context).try_into().ok()?;

        let mut ticket = Vec::with_capacity(NAME_LEN + iv.len() + state.len() + MAC_LEN);
        ticket.extend_from_slice(&key.name);
        ticket.extend_from_slice(iv);
        ticket.extend_from_slice(&state);
        let tag = hmac::sign(&key.hmac, &ticket);
        ticket.extend_from_slice(tag.as_ref());
        (ticket.len() <= MAX_TICKET_LEN).then_some(ticket)
    }

    fn decrypt_at(&self, ticket: &[u8], now: u64) -> Option<Vec<u8>> {
        if !(MIN_TICKET_LEN..=MAX_TICKET_LEN).contains(&ticket.len()) {
            return None;
        }
        let key = self.keys.iter().find(|k| k.name == ticket[..NAME_LEN])?;
        let (signed, tag) = ticket.split_at(ticket.len() - MAC_LEN);
        hmac::verify(&key.hmac, signed, tag).ok()?;

        let iv = &signed[NAME_LEN..NAME_LEN + AES_CBC_IV_LEN];
        let context = DecryptionContext::Iv128(iv::FixedLength::try_from(iv).ok()?);
        let mut state = signed[NAME_LEN + AES_CBC_IV_LEN..].to_vec();
        let state = key.decrypt.decrypt(&mut state, context).ok()?;
        if state.len() < ISSUED_LEN {
            return None;
        }
        let (issued, plain) = state.split_at(ISSUED_LEN);
        let issued = u64::from_be_bytes(issued.try_into().ok()?);
        if now.saturating_sub(issued) > self.lifetime.as_secs() {
            return None;
        }
        Some(plain.to_vec())
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

impl ProducesTickets for TicketKeys {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.lifetime.as_secs())
            .map_or(MAX_LIFETIME_HINT, |secs| secs.min(MAX_LIFETIME_HINT))
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.encrypt_at(plain, unix_now())
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        self.decrypt_at(ticket, unix_now())
    }
}

impl fmt::Debug for TicketKeys {
    // Names and sizes only: the key material stays out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<String> = self
            .keys
            .iter()
            .map(|key| {
                let name: String = key.name.iter().map(|b| format!("{b:02x}")).collect();
                format!("{name} (AES-{})", key.aes_bits)
            })
            .collect();
        f.debug_struct("TicketKeys")
            .field("keys", &keys)
            .field("lifetime", &self.lifetime)
            .finish()
    }
}

/// `ssl_session_ticket_key file; ...`: nginx's formats, 48 bytes (name 16, AES-128 key 16,
/// HMAC key 16) and 80 bytes (name 16, HMAC key 32, AES-256 key 32). The first file's key
/// encrypts new tickets; all decrypt. A ticket names its key by the 16-byte name, as nginx's
/// do. `lifetime` is `ssl_session_timeout`: older tickets are refused.
pub fn load_ticket_keys(
    files: &[PathBuf],
    lifetime: Duration,
) -> Result<Arc<dyn ProducesTickets>, TicketKeyError> {
    if files.is_empty() {
        return Err(TicketKeyError::new(
            "no ssl_session_ticket_key file given".to_string(),
        ));
    }
    let keys = files
        .iter()
        .map(|path| {
            let material = read_key_file(path)?;
            TicketKey::from_material(&material).ok_or_else(|| {
                TicketKeyError::new(format!(
                    "cannot make session ticket keys from \"{}\"",
                    path.display()
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(TicketKeys { keys, lifetime }))
}

/// Without key files: one random key made now (share the returned value between all workers
/// so that a ticket from one resumes on another); `lifetime` is `ssl_session_timeout`.
pub fn new_ticketer(lifetime: Duration) -> Result<Arc<dyn ProducesTickets>, TicketKeyError> {
    let mut material = [0u8; LONG_KEY_FILE];
    aws_lc_rs::rand::fill(&mut material).map_err(|_| {
        TicketKeyError::new("cannot make a session ticket key: no random bytes".to_string())
    })?;
    let key = TicketKey::from_material(&material).ok_or_else(|| {
        TicketKeyError::new("cannot make a session ticket key from random bytes".to_string())
    })?;
    Ok(Arc::new(TicketKeys {
        keys: vec![key],
        lifetime,
    }))
}

/// Reads a key file, with nginx's messages for each way it can fail.
fn read_key_file(path: &Path) -> Result<Vec<u8>, TicketKeyError> {
    let shown = path.display();
    let file = File::open(path).map_err(|e| {
        TicketKeyError::new(format!("open() \"{shown}\" failed ({})", os_error(&e)))
    })?;
    let size = file
        .metadata()
        .map_err(|e| TicketKeyError::new(format!("fstat() \"{shown}\" failed ({})", os_error(&e))))?
        .len();
    let expected = match usize::try_from(size) {
        Ok(size @ (SHORT_KEY_FILE | LONG_KEY_FILE)) => size,
        _ => {
            return Err(TicketKeyError::new(format!(
                "\"{shown}\" must be 48 or 80 bytes"
            )))
        }
    };
    let mut material = Vec::with_capacity(expected);
    file.take(size).read_to_end(&mut material).map_err(|e| {
        TicketKeyError::new(format!("read() \"{shown}\" failed ({})", os_error(&e)))
    })?;
    if material.len() != expected {
        return Err(TicketKeyError::new(format!(
            "read() \"{shown}\" returned only {} bytes instead of {expected}",
            material.len()
        )));
    }
    Ok(material)
}

/// An OS error as nginx prints one: "2: No such file or directory".
fn os_error(error: &io::Error) -> String {
    let text = error.to_string();
    match error.raw_os_error() {
        Some(code) => {
            let suffix = format!(" (os error {code})");
            format!("{code}: {}", text.strip_suffix(&suffix).unwrap_or(&text))
        }
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn keys(lifetime: u64) -> TicketKeys {
        let material: Vec<u8> = (0..LONG_KEY_FILE as u8).collect();
        let key = TicketKey::from_material(&material).expect("80 bytes make a key");
        TicketKeys {
            keys: vec![key],
            lifetime: Duration::from_secs(lifetime),
        }
    }

    #[test]
    fn ticket_expires_after_lifetime() {
        let keys = keys(300);
        let ticket = keys.encrypt_at(b"session", NOW).expect("encrypts");
        assert_eq!(
            keys.decrypt_at(&ticket, NOW + 300).as_deref(),
            Some(&b"session"[..])
        );
        assert_eq!(keys.decrypt_at(&ticket, NOW + 301), None);
    }

    #[test]
    fn ticket_layout_is_name_iv_state_mac() {
        let keys = keys(300);
        let ticket = keys.encrypt_at(b"", NOW).expect("encrypts");
        assert_eq!(ticket[..NAME_LEN], keys.keys[0].name);
        // The issue time alone pads to one AES block.
        assert_eq!(ticket.len(), MIN_TICKET_LEN);
    }

    #[test]
    fn short_and_odd_input_is_refused() {
        let keys = keys(300);
        let ticket = keys.encrypt_at(b"session", NOW).expect("encrypts");
        for len in 0..ticket.len() {
            assert_eq!(keys.decrypt_at(&ticket[..len], NOW), None, "{len} bytes");
        }
        assert_eq!(keys.decrypt_at(&vec![0; MAX_TICKET_LEN + 1], NOW), None);
    }

    #[test]
    fn lifetime_hint_is_at_most_a_week() {
        assert_eq!(keys(300).lifetime(), 300);
        assert_eq!(keys(30 * 24 * 60 * 60).lifetime(), MAX_LIFETIME_HINT);
    }

    #[test]
    fn debug_shows_names_not_material() {
        let shown = format!("{:?}", keys(300));
        assert!(
            shown.contains("000102030405060708090a0b0c0d0e0f (AES-256)"),
            "{shown}"
        );
        assert!(!shown.contains("101112"), "{shown}");
    }

    #[test]
    fn os_errors_read_like_nginx() {
        let error = io::Error::from_raw_os_error(2);
        assert_eq!(os_error(&error), "2: No such file or directory");
    }
}
