//! Traces: W3C Trace Context through the gateway.

pub mod context;
