//! Throttling.

pub mod algorithm;
