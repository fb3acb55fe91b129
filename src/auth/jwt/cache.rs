//! Verified tokens, so a token presented again costs a SHA-256 and a map
//! lookup instead of a signature check.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ring::digest;

use super::{verify, JwtError, KeySet, Validation, Verified};

/// Shards, each its own lock: concurrent requests rarely wait for one.
const SHARDS: usize = 16;

/// A bounded cache of verified tokens, shared by every request.
///
/// An entry is keyed by the SHA-256 of the issuer and the token (the token
/// itself is not kept) and holds the [`Verified`] claims and the key set
/// they were verified with: a hit needs the same issuer, the issuer's
/// current key set (a JWKS refresh or reload that changes it makes its old
/// entries miss) and `now < exp` (never past `exp`, leeway or not). Only
/// verified tokens are inserted, so a flood of forged tokens adds nothing.
/// Each shard holds at most `capacity / 16` entries and, when full, drops
/// its oldest entry. Build one per config generation: [`Validation`] is not
/// part of the key.
pub struct TokenCache {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
}

#[derive(Default)]
struct Shard {
    map: HashMap<[u8; 32], Entry>,
    /// Keys in insertion order, the oldest first (each key once).
    order: VecDeque<[u8; 32]>,
}

struct Entry {
    /// The [`KeySet`] it was verified with.
    key_set: u64,
    verified: Arc<Verified>,
}

impl TokenCache {
    /// A cache of at most `capacity` tokens (rounded up to a multiple of
    /// 16; 10,000 is plenty for a busy gateway: about 10 MB with typical
    /// claims).
    pub fn new(capacity: usize) -> TokenCache {
        TokenCache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
        }
    }

    /// The cached verification of `token` for `issuer`, if it was verified
    /// with `keys` and `now_unix < exp`.
    pub fn get(
        &self,
        issuer: &str,
        token: &str,
        keys: &KeySet,
        now_unix: u64,
    ) -> Option<Arc<Verified>> {
        let key = cache_key(issuer, token);
        let shard = self.shard(&key);
        let entry = shard.map.get(&key)?;
        (entry.key_set == keys.id() && now_unix < entry.verified.exp)
            .then(|| entry.verified.clone())
    }

    /// Remember that `token` verified for `issuer` with `keys` (not kept
    /// when already expired at `now_unix`).
    pub fn insert(
        &self,
        issuer: &str,
        token: &str,
        keys: &KeySet,
        verified: Arc<Verified>,
        now_unix: u64,
    ) {
        if now_unix >= verified.exp {
            return;
        }
        let key = cache_key(issuer, token);
        let entry = Entry {
            key_set: keys.id(),
            verified,
        };
        let mut shard = self.shard(&key);
        if shard.map.insert(key, entry).is_some() {
            return;
        }
        shard.order.push_back(key);
        while shard.order.len() > self.per_shard {
            if let Some(oldest) = shard.order.pop_front() {
                shard.map.remove(&oldest);
            }
        }
    }

    /// `token` verified as [`verify`] does, through the cache: a hit costs
    /// no signature check; a token that verifies is inserted, one that does
    /// not never is.
    pub fn verify(
        &self,
        token: &str,
        keys: &KeySet,
        v: &Validation,
        now_unix: u64,
    ) -> Result<Arc<Verified>, JwtError> {
        if let Some(hit) = self.get(&v.issuer, token, keys, now_unix) {
            return Ok(hit);
        }
        let verified = Arc::new(verify(token, keys, v, now_unix)?);
        self.insert(&v.issuer, token, keys, verified.clone(), now_unix);
        Ok(verified)
    }

    /// How many tokens it holds (expired ones until they are pushed out).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).map.len())
            .sum()
    }

    /// Whether it holds no token.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, key: &[u8; 32]) -> MutexGuard<'_, Shard> {
        self.shards[usize::from(key[0]) % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// SHA-256 of the issuer, a NUL and the token.
fn cache_key(issuer: &str, token: &str) -> [u8; 32] {
    let mut context = digest::Context::new(&digest::SHA256);
    context.update(issuer.as_bytes());
    context.update(&[0]);
    context.update(token.as_bytes());
    let mut key = [0; 32];
    key.copy_from_slice(context.finish().as_ref());
    key
}
