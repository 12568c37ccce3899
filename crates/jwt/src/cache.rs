//! A worker's cache of verified tokens, so a client that sends the same token on every
//! request pays for its signature once.
//!
//! Entries are keyed by the key set's id and the whole token: the lookup hashes the token's
//! tail (signature bytes, which an attacker cannot choose for a token that verifies) and
//! then compares the whole token, so a hit is never a different token. Eviction is CLOCK:
//! a hit sets the entry's reference bit, and the hand, looking for room, clears bits until it
//! finds an entry without one. A hit re-checks `exp` and `nbf`, so a cached token expires on
//! time, and [`VerifiedCache::verify_within`] can also bound how long a verification is
//! trusted. There are no locks: each worker thread owns its cache.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::key::KeySet;
use crate::verify::{verify, JwtError, Verified, MAX_TOKEN_LEN};

/// How many bytes from the end of a token feed its hash.
const HASHED_TAIL: usize = 32;

struct Entry {
    key_set: u64,
    hash: u64,
    token: Box<[u8]>,
    verified: Arc<Verified>,
    /// When the signature was checked, for a maximum age.
    verified_at: SystemTime,
    referenced: bool,
}

/// A bounded cache of verified tokens for one worker thread.
pub struct VerifiedCache {
    capacity: usize,
    slots: Vec<Option<Entry>>,
    /// Hash to slot. The hash is already mixed, so the map does not hash it again.
    index: HashMap<u64, usize, BuildHasherDefault<PassThrough>>,
    hand: usize,
}

impl VerifiedCache {
    /// A cache of at most `capacity` tokens; 0 caches nothing.
    pub fn new(capacity: usize) -> VerifiedCache {
        VerifiedCache {
            capacity,
            slots: Vec::with_capacity(capacity),
            index: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            hand: 0,
        }
    }

    /// How many tokens the cache holds.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Forgets every token (the keys changed).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.index.clear();
        self.hand = 0;
    }

    /// The cached verification of `token` under `keys`, if it is cached and still valid at
    /// `now`; an entry that has expired is dropped.
    pub fn get(
        &mut self,
        token: &[u8],
        keys: &KeySet,
        now: SystemTime,
        leeway: Duration,
    ) -> Option<Arc<Verified>> {
        self.get_within(token, keys, now, leeway, None)
    }

    /// As [`get`](Self::get), and only if the entry was verified less than `max_age` ago.
    pub fn get_within(
        &mut self,
        token: &[u8],
        keys: &KeySet,
        now: SystemTime,
        leeway: Duration,
        max_age: Option<Duration>,
    ) -> Option<Arc<Verified>> {
        let hash = token_hash(token, keys.id());
        let slot = *self.index.get(&hash)?;
        let entry = self.slots.get_mut(slot)?.as_mut()?;
        if entry.key_set != keys.id() || *entry.token != *token {
            return None;
        }
        let too_old = max_age.is_some_and(|max| {
            now.duration_since(entry.verified_at)
                .is_ok_and(|age| age >= max)
        });
        if too_old || entry.verified.check_time(now, leeway).is_err() {
            self.index.remove(&hash);
            self.slots[slot] = None;
            return None;
        }
        entry.referenced = true;
        Some(Arc::clone(&entry.verified))
    }

    /// Remembers that `token` verified under `keys`.
    pub fn insert(&mut self, token: &[u8], keys: &KeySet, verified: Arc<Verified>) {
        self.insert_at(token, keys, verified, SystemTime::now());
    }

    fn insert_at(
        &mut self,
        token: &[u8],
        keys: &KeySet,
        verified: Arc<Verified>,
        verified_at: SystemTime,
    ) {
        if self.capacity == 0 || token.len() > MAX_TOKEN_LEN {
            return;
        }
        let hash = token_hash(token, keys.id());
        let entry = Entry {
            key_set: keys.id(),
            hash,
            token: token.into(),
            verified,
            verified_at,
            referenced: false,
        };
        if let Some(&slot) = self.index.get(&hash) {
            self.slots[slot] = Some(entry);
            return;
        }
        let slot = self.free_slot();
        self.slots[slot] = Some(entry);
        self.index.insert(hash, slot);
    }

    /// Verifies `token`, from the cache when it holds it, and caches a fresh verification.
    pub fn verify(
        &mut self,
        token: &[u8],
        keys: &KeySet,
        now: SystemTime,
        leeway: Duration,
    ) -> Result<Arc<Verified>, JwtError> {
        self.verify_within(token, keys, now, leeway, None)
    }

    /// As [`verify`](Self::verify), trusting a cached verification only for `max_age`.
    pub fn verify_within(
        &mut self,
        token: &[u8],
        keys: &KeySet,
        now: SystemTime,
        leeway: Duration,
        max_age: Option<Duration>,
    ) -> Result<Arc<Verified>, JwtError> {
        if let Some(hit) = self.get_within(token, keys, now, leeway, max_age) {
            return Ok(hit);
        }
        let verified = Arc::new(verify(token, keys, now, leeway)?);
        self.insert_at(token, keys, Arc::clone(&verified), now);
        Ok(verified)
    }

    /// How many tokens the cache may hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// A slot to write into: a new one while under capacity, else the CLOCK victim's.
    fn free_slot(&mut self) -> usize {
        if self.slots.len() < self.capacity {
            self.slots.push(None);
            return self.slots.len() - 1;
        }
        loop {
            let slot = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            match &mut self.slots[slot] {
                None => return slot,
                Some(entry) if entry.referenced => entry.referenced = false,
                Some(entry) => {
                    self.index.remove(&entry.hash);
                    return slot;
                }
            }
        }
    }
}

/// Hashes the token's tail, length and key set: cheap for long tokens, and enough to spread
/// tokens whose tails are signatures.
fn token_hash(token: &[u8], key_set: u64) -> u64 {
    let tail = &token[token.len().saturating_sub(HASHED_TAIL)..];
    let mut h = mix(key_set ^ (token.len() as u64).rotate_left(32));
    for chunk in tail.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = mix(h ^ u64::from_le_bytes(word));
    }
    h
}

/// SplitMix64's finalizer: every input bit affects every output bit.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A `Hasher` for keys that are already hashes.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0 ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::Json;
    use std::time::UNIX_EPOCH;

    fn verified(exp: Option<f64>) -> Arc<Verified> {
        Arc::new(Verified::for_tests(Json::Object(Vec::new()), exp))
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn hit_needs_same_token_and_key_set() {
        let keys = KeySet::default();
        let other = KeySet::default();
        let mut cache = VerifiedCache::new(4);
        cache.insert(b"a.b.c", &keys, verified(None));
        assert!(cache.get(b"a.b.c", &keys, at(0), Duration::ZERO).is_some());
        assert!(cache.get(b"a.b.d", &keys, at(0), Duration::ZERO).is_none());
        assert!(cache.get(b"a.b.c", &other, at(0), Duration::ZERO).is_none());
        cache.clear();
        assert!(cache.get(b"a.b.c", &keys, at(0), Duration::ZERO).is_none());
    }

    #[test]
    fn hit_rechecks_expiry_and_drops_expired() {
        let keys = KeySet::default();
        let mut cache = VerifiedCache::new(4);
        cache.insert(b"t", &keys, verified(Some(100.0)));
        assert!(cache.get(b"t", &keys, at(99), Duration::ZERO).is_some());
        assert!(cache
            .get(b"t", &keys, at(105), Duration::from_secs(10))
            .is_some());
        assert!(cache.get(b"t", &keys, at(100), Duration::ZERO).is_none());
        assert!(cache.is_empty());
    }

    #[test]
    fn clock_keeps_referenced_entries() {
        let keys = KeySet::default();
        let mut cache = VerifiedCache::new(2);
        cache.insert(b"one", &keys, verified(None));
        cache.insert(b"two", &keys, verified(None));
        assert!(cache.get(b"one", &keys, at(0), Duration::ZERO).is_some());
        cache.insert(b"three", &keys, verified(None));
        assert_eq!(cache.len(), 2);
        assert!(cache.get(b"one", &keys, at(0), Duration::ZERO).is_some());
        assert!(cache.get(b"two", &keys, at(0), Duration::ZERO).is_none());
        assert!(cache.get(b"three", &keys, at(0), Duration::ZERO).is_some());
    }

    #[test]
    fn max_age_forces_a_fresh_verification() {
        let keys = KeySet::default();
        let mut cache = VerifiedCache::new(4);
        cache.insert_at(b"t", &keys, verified(None), at(100));
        let ten = Some(Duration::from_secs(10));
        assert!(cache
            .get_within(b"t", &keys, at(109), Duration::ZERO, ten)
            .is_some());
        assert!(cache
            .get_within(b"t", &keys, at(110), Duration::ZERO, ten)
            .is_none());
        assert!(cache.is_empty());
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let keys = KeySet::default();
        let mut cache = VerifiedCache::new(0);
        cache.insert(b"t", &keys, verified(None));
        assert!(cache.get(b"t", &keys, at(0), Duration::ZERO).is_none());
    }
}
