//! JSON Web Tokens: compact JWS tokens verified against an issuer's keys.
//!
//! A token is checked in this order: its size (over [`MAX_TOKEN_LEN`] it is
//! refused unparsed), its three parts (base64url without padding, in its
//! canonical form), its header (a JSON object that repeats no member, at
//! any depth; `alg` must be one the issuer allows, `none` never is; `crit`
//! is refused), its signature with a
//! key that fits `alg` (RSA keys only for RS*/PS*, P-256 for ES256, P-384
//! for ES384, Ed25519 for EdDSA, only a configured secret for HS*; a JWK's
//! own `alg` must be the token's), then its claims (a JSON object that
//! repeats no member either; `exp` required, `nbf` and `iat` with leeway,
//! `iss`, `aud`).
//!
//! [`Algorithm`] is the config's `JwtAlgorithm`. Its files: `key` and `keyset` ([`Key`],
//! [`KeySet`]: verification keys and an issuer's set of them, read from a
//! JWKS by `jwk`, from PEM by `pem` and `der`, or from a secret); `token`
//! and `claims` (the compact serialisation, the claims, [`claim`]); `cache`
//! ([`TokenCache`]: verified tokens, so a token seen again costs a hash);
//! `jwks` ([`Jwks`]: an issuer's key set fetched from a URL and kept
//! fresh).
//!
//! **Why ring.** Signatures are checked with ring, the crypto library rustls
//! already uses in the gateway: one crypto stack, no second C or cmake
//! build, a binary that grows by little more than this module, and ring's
//! assembly for RSA, ECDSA, Ed25519 and SHA-2 (see `benches/jwt.rs`). No
//! signature arithmetic is written here; this module only frames bytes
//! (base64url, JSON, DER) and picks ring's algorithm. ring has no prepared
//! public-key type (each verification reads the key's bytes again), so key
//! material is decoded and checked once, when a [`KeySet`] is built, into
//! the exact form ring takes.

use std::time::Duration;

use serde_json::{Map, Value};

mod cache;
mod claims;
mod der;
mod jwk;
mod jwks;
mod key;
mod keyset;
mod pem;
mod token;

/// The JWS algorithms: the config's type, one for the issuer's list and a
/// token's `alg`.
pub use crate::config::JwtAlgorithm as Algorithm;
pub use cache::TokenCache;
pub use claims::claim;
pub use jwks::Jwks;
pub use key::{Key, KeyKind};
pub use keyset::KeySet;
pub use token::MAX_TOKEN_LEN;

/// What an issuer's tokens must satisfy besides their signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validation {
    /// `iss` must equal this.
    pub issuer: String,
    /// `aud` (a string or an array) must hold one of these; empty: `aud` is
    /// not checked.
    pub audiences: Vec<String>,
    /// The algorithms the issuer's tokens may use.
    pub algorithms: Vec<Algorithm>,
    /// Tolerance for clock skew on `exp`, `nbf` and `iat` (whole seconds).
    pub leeway: Duration,
}

/// A token that verified: its claims, and when it expires.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// The payload's claims.
    pub claims: Map<String, Value>,
    /// `exp`, Unix seconds.
    pub exp: u64,
}

/// Why a token did not verify. Displayed as a short reason for logs; never
/// carries the token or any of its text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    /// Longer than [`MAX_TOKEN_LEN`]; not parsed.
    #[error("token longer than 16384 bytes")]
    TooLarge,
    /// Not a well-formed compact JWS, or a claim of the wrong type.
    #[error("malformed token: {0}")]
    Malformed(&'static str),
    /// `alg` is `none`, unknown, not allowed for the issuer, or fits none of
    /// its keys.
    #[error("algorithm refused: {0}")]
    Algorithm(&'static str),
    /// No key has the token's `kid` (the issuer's JWKS may have rotated).
    #[error("no key with the token's kid")]
    UnknownKid,
    /// The signature does not verify.
    #[error("bad signature")]
    Signature,
    /// Past `exp` (and the leeway).
    #[error("expired")]
    Expired,
    /// Before `nbf` (less the leeway).
    #[error("not yet valid (nbf)")]
    NotYetValid,
    /// `iat` is in the future, beyond the leeway.
    #[error("issued in the future (iat)")]
    IssuedInFuture,
    /// `iss` is missing or not the issuer's.
    #[error("issuer not accepted")]
    Issuer,
    /// `aud` is missing or holds none of the issuer's audiences.
    #[error("audience not accepted")]
    Audience,
    /// No `exp` claim.
    #[error("no exp claim")]
    MissingExp,
    /// The issuer's keys could not be fetched yet (a JWKS unreachable since
    /// start-up): the gateway, not the token, is at fault.
    #[error("the issuer's keys are unavailable")]
    KeysUnavailable,
}

/// The token's `iss`, unverified: only to choose which issuer's keys and
/// rules to verify it with. A payload that repeats a member (`iss` or any
/// other) names no issuer: it is malformed, as [`verify`] finds it.
pub fn peek_issuer(token: &str) -> Result<String, JwtError> {
    let parts = token::split(token)?;
    let payload = token::object(parts.payload, token::Part::Payload)?;
    match payload.get("iss") {
        Some(Value::String(iss)) => Ok(iss.clone()),
        _ => Err(JwtError::Issuer),
    }
}

/// Verify `token` with `keys` under `v` at `now_unix` (seconds): its
/// signature first, then its claims.
pub fn verify(
    token: &str,
    keys: &KeySet,
    v: &Validation,
    now_unix: u64,
) -> Result<Verified, JwtError> {
    let parts = token::split(token)?;
    let header = token::header(parts.header)?;
    if !v.algorithms.contains(&header.alg) {
        return Err(JwtError::Algorithm("not allowed for the issuer"));
    }
    let signature = token::decode(parts.signature, "signature is not base64url")?;
    keys.verify(
        header.alg,
        header.kid.as_deref(),
        parts.signing_input.as_bytes(),
        &signature,
    )?;
    let claims = token::object(parts.payload, token::Part::Payload)?;
    let exp = claims::validate(&claims, v, now_unix)?;
    Ok(Verified { claims, exp })
}

#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;
