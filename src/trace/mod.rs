//! Traces: W3C Trace Context through the gateway ([`context`]), and the
//! spans of sampled requests ([`span`]) exported by OTLP ([`export`]).

pub mod attributes;
pub mod context;
pub mod export;
pub mod span;

/// What forwarding needs of a request's trace: the context every attempt's
/// `traceparent` continues, and the recording its attempt spans go to.
#[derive(Clone, Copy)]
pub struct Hop<'a> {
    /// The request's trace.
    pub context: &'a context::TraceContext,
    /// Its recording, when it is sampled and `telemetry:` is configured.
    pub recording: Option<&'a span::Recording>,
}
