//! TODO

pub mod headers;
