//! Store keys: what a (limit, client) pair is counted under.
//!
//! A store never sees a client's values (an address, an API key, a
//! header): a [`StoreKey`] is the first 16 bytes of a SHA-256 over the
//! limit's namespace and each of the client's components, every one
//! prefixed by its length as a big-endian `u64`, so no two lists of
//! components give the same input. The namespace says whose state this is
//! (the gateway derives it from a limit's name, algorithm and key sources);
//! a caller that keys many requests under one limit keeps a [`KeyHasher`]
//! fed with the namespace and clones it for each request.
//!
//! ```
//! use tollgate_limit::key::{store_key, KeyHasher};
//!
//! let per_user = KeyHasher::new(b"per_user");
//! let a = per_user.clone().value(b"user-1").finish();
//! assert_eq!(a, store_key(b"per_user", &[b"user-1"]));
//! assert_ne!(a, per_user.value(b"user-2").finish());
//! ```

use sha2::{Digest, Sha256};

use crate::StoreKey;

/// A store key being built: the namespace and the components fed so far.
#[derive(Clone)]
pub struct KeyHasher(Sha256);

impl std::fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHasher(..)")
    }
}

impl KeyHasher {
    /// A key in `namespace`, with no component yet.
    pub fn new(namespace: &[u8]) -> Self {
        let mut h = KeyHasher(Sha256::new());
        h.component(&[namespace]);
        h
    }

    /// Add one length-prefixed component made of `parts` (so a value that
    /// arrives in pieces is hashed without being joined first).
    pub fn component(&mut self, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.0.update((len as u64).to_be_bytes());
        for p in parts {
            self.0.update(p);
        }
    }

    /// This key with one more component, `value`.
    pub fn value(mut self, value: &[u8]) -> Self {
        self.component(&[value]);
        self
    }

    /// The store key.
    pub fn finish(self) -> StoreKey {
        let digest = self.0.finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        key
    }
}

/// The store key of `components` under `namespace` (as [`KeyHasher`]).
pub fn store_key(namespace: &[u8], components: &[&[u8]]) -> StoreKey {
    let mut h = KeyHasher::new(namespace);
    for c in components {
        h.component(&[c]);
    }
    h.finish()
}

/// The store key as 32 lowercase hex digits (the Redis hash tag).
pub fn hex(key: &StoreKey) -> String {
    hex::encode(key)
}

/// A store key from its 32 hex digits (either case); `None` for anything
/// else.
pub fn parse_hex(text: &str) -> Option<StoreKey> {
    let mut key = [0u8; 16];
    (text.len() == 32 && hex::decode_to_slice(text, &mut key).is_ok()).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_and_reads_back() {
        let mut k = [0u8; 16];
        k[0] = 0xAB;
        k[15] = 0x01;
        assert_eq!(hex(&k), "ab000000000000000000000000000001");
        assert_eq!(parse_hex(&hex(&k)), Some(k));
        assert_eq!(parse_hex("AB000000000000000000000000000001"), Some(k));
        assert_eq!(parse_hex("ab00"), None);
        assert_eq!(parse_hex(&"g".repeat(32)), None);
    }

    #[test]
    fn components_are_length_prefixed() {
        // "ab" + "c" and "a" + "bc" are different keys.
        assert_ne!(
            store_key(b"n", &[b"ab", b"c"]),
            store_key(b"n", &[b"a", b"bc"])
        );
        // A component in pieces is the component whole.
        let mut h = KeyHasher::new(b"n");
        h.component(&[b"a", b"bc"]);
        assert_eq!(h.finish(), store_key(b"n", &[b"abc"]));
        assert_ne!(store_key(b"n", &[b"abc"]), store_key(b"m", &[b"abc"]));
    }
}
