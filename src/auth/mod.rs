//! Consumers: clients the gateway has verified. [`mtls`] reads the names
//! of a verified client certificate.

pub mod mtls;
