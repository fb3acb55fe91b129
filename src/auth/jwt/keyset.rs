//! An issuer's verification keys, and which of them may check a token.

use std::sync::atomic::{AtomicU64, Ordering};

use super::key::Key;
use super::Algorithm;
use super::{jwk, pem, JwtError};

/// The verification keys of one issuer: from a JWKS, PEM public keys or
/// certificates, or a shared secret. Built once (key material parsed and
/// checked then); a verification only looks keys up.
///
/// Keys are kept in a list: an issuer has a handful, and comparing a few
/// `kid`s is cheaper than hashing one.
#[derive(Debug)]
pub struct KeySet {
    keys: Vec<Key>,
    /// JWKs that were not signature keys we verify, and why.
    skipped: Vec<String>,
    /// Unique to this set: a cached verification is good only while its
    /// issuer's set is the one it was verified with.
    id: u64,
}

fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl KeySet {
    fn new(keys: Vec<Key>, skipped: Vec<String>) -> KeySet {
        KeySet {
            keys,
            skipped,
            id: next_id(),
        }
    }

    /// The signature keys of a JWKS document (RFC 7517): `kty` RSA (`n`,
    /// `e`), EC (`crv` P-256 or P-384, `x`, `y`) and OKP (`crv` Ed25519,
    /// `x`). Keys for another `use` or `key_ops`, of another type or curve,
    /// or whose `alg` is not one we verify are skipped ([`KeySet::skipped`]
    /// says why); an error if none is left. A symmetric (`oct`) key is an
    /// error: HMAC keys come only from [`KeySet::from_secret`].
    pub fn from_jwks(json: &[u8]) -> Result<KeySet, String> {
        let mut keys = Vec::new();
        let mut skipped = Vec::new();
        for outcome in jwk::parse(json)? {
            match outcome {
                jwk::Outcome::Key(key) => keys.push(key),
                jwk::Outcome::Skipped(why) => skipped.push(why),
            }
        }
        if keys.is_empty() {
            let why = if skipped.is_empty() {
                String::new()
            } else {
                format!(" ({})", skipped.join("; "))
            };
            return Err(format!("JWKS has no usable signature key{why}"));
        }
        Ok(KeySet::new(keys, skipped))
    }

    /// The keys of one or more PEM blocks: `PUBLIC KEY` (SubjectPublicKeyInfo)
    /// or `CERTIFICATE` (its public key is taken; the certificate is not
    /// otherwise checked), each RSA, EC P-256, EC P-384 or Ed25519.
    pub fn from_pem(pem: &[u8]) -> Result<KeySet, String> {
        let keys = pem::parse(pem)?;
        if keys.is_empty() {
            return Err("no PUBLIC KEY or CERTIFICATE block".into());
        }
        Ok(KeySet::new(keys, Vec::new()))
    }

    /// A shared secret for HS256, HS384 and HS512. RFC 7518 §3.2 asks for a
    /// secret at least as long as the hash (32 bytes for HS256): the config
    /// should refuse a shorter one.
    pub fn from_secret(secret: &[u8]) -> KeySet {
        KeySet::new(vec![Key::hmac(secret)], Vec::new())
    }

    /// One set holding the keys of all of `sets` (an issuer configured with
    /// several PEM files).
    pub fn merge(sets: impl IntoIterator<Item = KeySet>) -> KeySet {
        let (mut keys, mut skipped) = (Vec::new(), Vec::new());
        for set in sets {
            keys.extend(set.keys);
            skipped.extend(set.skipped);
        }
        KeySet::new(keys, skipped)
    }

    /// Its keys, in the order they were given.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// The JWKs [`KeySet::from_jwks`] skipped, each with why (for a log line).
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// Unique to this set (a reload or JWKS refresh makes a new one).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Check the `alg` signature `sig` of `message` with the set's keys.
    ///
    /// With a `kid`, the keys of that `kid`, else the set's kid-less keys (a
    /// PEM key or a secret stands for any `kid`), else [`JwtError::UnknownKid`]
    /// (the caller may refetch a JWKS). Without one, every key. Only keys
    /// that [`Key::accepts`] `alg` are tried; none: [`JwtError::Algorithm`].
    pub(crate) fn verify(
        &self,
        alg: Algorithm,
        kid: Option<&str>,
        message: &[u8],
        sig: &[u8],
    ) -> Result<(), JwtError> {
        let mut candidates: Vec<&Key> = match kid {
            Some(kid) => self.keys.iter().filter(|k| k.kid() == Some(kid)).collect(),
            None => self.keys.iter().collect(),
        };
        if candidates.is_empty() {
            candidates = self.keys.iter().filter(|k| k.kid().is_none()).collect();
            if candidates.is_empty() {
                return Err(JwtError::UnknownKid);
            }
        }
        let mut fitting = candidates.into_iter().filter(|k| k.accepts(alg)).peekable();
        if fitting.peek().is_none() {
            return Err(JwtError::Algorithm(
                "no key of the issuer fits the token's algorithm",
            ));
        }
        if fitting.any(|k| k.verify(alg, message, sig)) {
            Ok(())
        } else {
            Err(JwtError::Signature)
        }
    }
}
