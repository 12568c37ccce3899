//! `$ssl_session_id`, as OpenSSL gives it to nginx.
//!
//! - A TLS 1.3 connection's session has 32 random bytes of its own, new on a resumption too:
//!   they never go on the wire ([`random_id`]).
//! - A TLS 1.2 resumption is known by the id the client sent in its hello: the one the server
//!   gave it, or with a ticket one the client made ([`Hello`]).
//! - A TLS 1.2 full handshake has the id the server sent: none when it issues a ticket
//!   instead, else the id it stores the session under. rustls makes that id and stores the
//!   session without telling the connection, so the connection puts a [`Mark`] in its
//!   session's application data and the session cache notes the id it stored a marked session
//!   under ([`note_stored`]).

use std::collections::HashMap;
use std::sync::Mutex;

/// What begins a mark in a session's application data.
const MARK_PREFIX: &[u8; 8] = b"\0pcsid\0\0";
/// Random bytes that tell one connection's mark from another's.
const TOKEN: usize = 16;
/// Marked sessions whose connection never came for their id (a handshake that failed after
/// the session was stored): past this many the notes start again.
const MAX_NOTES: usize = 4096;

/// The ids the cache stored marked sessions under, by the mark's token.
static STORED: Mutex<Option<HashMap<[u8; TOKEN], Vec<u8>>>> = Mutex::new(None);

/// 32 random bytes: the id of a TLS 1.3 session, or of a TLS 1.2 one the server neither
/// stores nor sends a ticket for (OpenSSL makes one and sends it, though it cannot be
/// resumed).
pub fn random_id() -> [u8; 32] {
    let mut id = [0u8; 32];
    // A failure leaves zeros: an id that says nothing, never a reused secret.
    let _ = aws_lc_rs::rand::fill(&mut id);
    id
}

/// A connection's mark on its session, to learn the id the session was stored under.
pub struct Mark([u8; TOKEN]);

impl Mark {
    pub fn new() -> Mark {
        let mut token = [0u8; TOKEN];
        let _ = aws_lc_rs::rand::fill(&mut token);
        Mark(token)
    }

    /// The session's application data that carries the mark
    /// (`ServerConnection::set_resumption_data`).
    pub fn data(&self) -> Vec<u8> {
        let mut d = Vec::with_capacity(MARK_PREFIX.len() + TOKEN);
        d.extend_from_slice(MARK_PREFIX);
        d.extend_from_slice(&self.0);
        d
    }

    /// The id the session cache stored the marked session under, once: none when it stored
    /// nothing.
    pub fn take_stored(&self) -> Option<Vec<u8>> {
        STORED.lock().ok()?.as_mut()?.remove(&self.0)
    }
}

impl Default for Mark {
    fn default() -> Mark {
        Mark::new()
    }
}

/// Called by the session cache for every session it stores: `value` is rustls's encoding of
/// the session, which holds the application data verbatim.
pub(crate) fn note_stored(key: &[u8], value: &[u8]) {
    // The application data comes after the client's certificates, which a client chooses:
    // the last mark is the connection's.
    let Some(at) = value
        .windows(MARK_PREFIX.len())
        .rposition(|w| w == MARK_PREFIX)
    else {
        return;
    };
    let Some(token) = value
        .get(at + MARK_PREFIX.len()..at + MARK_PREFIX.len() + TOKEN)
        .and_then(|t| <[u8; TOKEN]>::try_from(t).ok())
    else {
        return;
    };
    let Ok(mut stored) = STORED.lock() else {
        return;
    };
    let stored = stored.get_or_insert_with(HashMap::new);
    if stored.len() >= MAX_NOTES {
        stored.clear();
    }
    stored.insert(token, key.to_vec());
}

/// What `$ssl_session_id` needs of a ClientHello, read from the first bytes of the
/// connection (a TLS record holding the hello, perhaps cut short).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Hello {
    /// The legacy session id the client sent.
    pub session_id: Vec<u8>,
    /// Whether it offered the session ticket extension (RFC 5077), with a ticket or empty:
    /// a TLS 1.2 server that issues tickets then sends no session id.
    pub offers_tickets: bool,
}

/// The handshake type of a ClientHello.
const CLIENT_HELLO: u8 = 1;
/// The session ticket extension's number.
const SESSION_TICKET: u16 = 35;

impl Hello {
    /// Reads `bytes`, the start of a connection: a handshake record with a ClientHello. What
    /// is cut short or malformed is left out (an empty id, no tickets): the handshake itself
    /// will refuse a malformed hello.
    pub fn read(bytes: &[u8]) -> Hello {
        let mut hello = Hello::default();
        // Record header (5), handshake header (4), version (2), random (32).
        let Some(rest) = bytes.get(5..) else {
            return hello;
        };
        if rest.first() != Some(&CLIENT_HELLO) {
            return hello;
        }
        let mut r = Reader(rest.get(4 + 2 + 32..).unwrap_or_default());
        let Some(id) = r.vec8() else {
            return hello;
        };
        hello.session_id = id.to_vec();
        // Cipher suites, compression methods, then the extensions.
        let (Some(_), Some(_), Some(exts)) = (r.vec16(), r.vec8(), r.vec16()) else {
            return hello;
        };
        let mut exts = Reader(exts);
        while let (Some(kind), Some(_)) = (exts.u16(), exts.vec16()) {
            if kind == SESSION_TICKET {
                hello.offers_tickets = true;
            }
        }
        hello
    }
}

/// Reads TLS's length-prefixed fields.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.0.split_at_checked(n)?;
        self.0 = tail;
        Some(head)
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = *self.take(1)?.first()?;
        self.take(usize::from(n))
    }

    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello record with `id` and the given extensions.
    fn hello(id: &[u8], exts: &[(u16, &[u8])]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(id.len() as u8);
        body.extend_from_slice(id);
        body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
        let mut e = Vec::new();
        for (kind, data) in exts {
            e.extend_from_slice(&kind.to_be_bytes());
            e.extend_from_slice(&(data.len() as u16).to_be_bytes());
            e.extend_from_slice(data);
        }
        body.extend_from_slice(&(e.len() as u16).to_be_bytes());
        body.extend_from_slice(&e);
        let mut hs = vec![CLIENT_HELLO, 0];
        hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
        hs.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn reads_the_id_and_the_ticket_offer() {
        let h = Hello::read(&hello(&[9; 32], &[(0, b"\0\0"), (SESSION_TICKET, b"")]));
        assert_eq!(h.session_id, vec![9; 32]);
        assert!(h.offers_tickets);
        let h = Hello::read(&hello(&[], &[(10, b"\0\x02\0\x1d")]));
        assert!(h.session_id.is_empty());
        assert!(!h.offers_tickets);
    }

    #[test]
    fn a_hello_cut_short_gives_what_it_holds() {
        let full = hello(&[5; 32], &[(SESSION_TICKET, b"t")]);
        for n in 0..full.len() {
            let h = Hello::read(&full[..n]);
            assert!(!h.offers_tickets, "{n}");
            assert!(
                h.session_id.is_empty() || h.session_id == vec![5; 32],
                "{n}"
            );
        }
        assert_eq!(
            Hello::read(&full[..5 + 4 + 2 + 32 + 1 + 32]).session_id,
            vec![5; 32]
        );
    }

    #[test]
    fn a_marked_session_gives_its_stored_id_once() {
        let mark = Mark::new();
        let mut value = b"rustls session: ".to_vec();
        value.extend_from_slice(&[0, 24]);
        value.extend_from_slice(&mark.data());
        value.extend_from_slice(b" more");
        note_stored(b"the id", &value);
        note_stored(b"unmarked", b"no mark here");
        assert_eq!(mark.take_stored().as_deref(), Some(&b"the id"[..]));
        assert_eq!(mark.take_stored(), None);
        assert_eq!(Mark::new().take_stored(), None);
    }

    #[test]
    fn a_mark_in_a_client_certificate_before_the_data_is_not_taken() {
        let (fake, real) = (Mark::new(), Mark::new());
        let mut value = b"certificate: ".to_vec();
        value.extend_from_slice(&fake.data());
        value.extend_from_slice(b" application data: ");
        value.extend_from_slice(&real.data());
        note_stored(b"stored id", &value);
        assert_eq!(real.take_stored().as_deref(), Some(&b"stored id"[..]));
        assert_eq!(fake.take_stored(), None);
    }
}
