//! Consumers (docs/configuration/consumers.md): identity a client cannot
//! forge. API keys looked up by digest, JWTs verified against their
//! issuer's keys, client certificates verified by TLS; the consumer they
//! name is what identity key sources, identity headers and the access log
//! read.

pub mod identity;

pub use identity::Identity;
