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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::auth::jwt::{testkit, Algorithm};

    const ISS: &str = "https://issuer.example/";
    const NOW: u64 = 1_700_000_000;
    const SECRET: &[u8] = b"a shared secret of at least 32 bytes, for HMAC";

    fn validation() -> Validation {
        Validation {
            issuer: ISS.into(),
            audiences: vec![],
            algorithms: vec![Algorithm::HS256],
            leeway: Duration::from_secs(30),
        }
    }

    fn token(sub: &str, exp: u64) -> String {
        let claims = json!({"iss": ISS, "sub": sub, "exp": exp});
        testkit::hmac_token(SECRET, Algorithm::HS256, &claims)
    }

    #[test]
    fn a_hit_until_exp_never_after() {
        let (cache, keys, v) = (
            TokenCache::new(100),
            KeySet::from_secret(SECRET),
            validation(),
        );
        let t = token("alice", NOW + 60);
        let first = cache.verify(&t, &keys, &v, NOW).unwrap();
        assert_eq!(cache.len(), 1);
        let again = cache.verify(&t, &keys, &v, NOW + 59).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        // At exp the entry no longer answers; the token still verifies
        // within the leeway, but is not cached again.
        assert!(cache.get(ISS, &t, &keys, NOW + 60).is_none());
        let late = cache.verify(&t, &keys, &v, NOW + 60).unwrap();
        assert!(!Arc::ptr_eq(&first, &late));
        assert_eq!(
            cache.verify(&t, &keys, &v, NOW + 90),
            Err(JwtError::Expired)
        );
    }

    #[test]
    fn a_hit_needs_the_same_issuer_and_key_set() {
        let (cache, keys, v) = (
            TokenCache::new(100),
            KeySet::from_secret(SECRET),
            validation(),
        );
        let t = token("alice", NOW + 60);
        cache.verify(&t, &keys, &v, NOW).unwrap();
        assert!(cache.get(ISS, &t, &keys, NOW).is_some());
        assert!(cache.get("https://other/", &t, &keys, NOW).is_none());
        // The same secret, but another set (a refresh, a reload): a miss.
        let refreshed = KeySet::from_secret(SECRET);
        assert!(cache.get(ISS, &t, &refreshed, NOW).is_none());
    }

    #[test]
    fn invalid_tokens_never_enter() {
        let (cache, keys, v) = (
            TokenCache::new(100),
            KeySet::from_secret(SECRET),
            validation(),
        );
        for i in 0..1000 {
            let claims = json!({"iss": ISS, "sub": i, "exp": NOW + 60});
            let forged = testkit::hmac_token(
                b"guessed, and wrong, 32 bytes long",
                Algorithm::HS256,
                &claims,
            );
            assert_eq!(
                cache.verify(&forged, &keys, &v, NOW),
                Err(JwtError::Signature)
            );
        }
        assert_eq!(
            cache.verify("garbage", &keys, &v, NOW).err(),
            Some(JwtError::Malformed("not three dot-separated parts"))
        );
        assert!(cache.is_empty());
    }

    #[test]
    fn the_size_is_bounded_and_the_oldest_go_first() {
        let (cache, keys) = (TokenCache::new(64), KeySet::from_secret(SECRET));
        let verified = Arc::new(Verified {
            claims: Default::default(),
            exp: NOW + 60,
        });
        let tokens: Vec<String> = (0..2000).map(|i| format!("token-{i}")).collect();
        for t in &tokens {
            cache.insert(ISS, t, &keys, verified.clone(), NOW);
        }
        assert_eq!(cache.len(), 64);
        // The newest of all is kept; the oldest is gone.
        assert!(cache.get(ISS, &tokens[1999], &keys, NOW).is_some());
        assert!(cache.get(ISS, &tokens[0], &keys, NOW).is_none());
        // Inserting one again does not count it twice.
        cache.insert(ISS, &tokens[1999], &keys, verified.clone(), NOW);
        assert_eq!(cache.len(), 64);
    }
}
