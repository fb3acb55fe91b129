//! Consumers: identities the gateway has verified.
//!
//! - [`jwt`]: JSON Web Tokens verified against an issuer's keys (JWKS, PEM
//!   or a shared secret), and the cache of verified tokens.

pub mod jwt;
