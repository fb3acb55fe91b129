//! What a response said about its cost, gathered as it streamed
//! (docs/configuration/cost.md `settle`): its body's bytes, the LLM usage
//! it reported, its headers and trailers, and how it ended.

use http::HeaderMap;

use crate::config::{CostConfig, OnMissingUsage, OnUpstreamError, Settle};

/// A response, as far as its settlement is concerned.
#[derive(Debug, Default, Clone)]
pub struct Reading {
    /// Body bytes sent to the client.
    pub bytes: u64,
    /// LLM tokens the response reported (input + output), if it did.
    pub usage: Option<u64>,
    /// The response's headers (those a `settle: header:NAME` reads).
    pub headers: HeaderMap,
    /// Its trailers, if it ended with some.
    pub trailers: Option<HeaderMap>,
    /// No upstream response body reached the client: the gateway answered
    /// an error itself, or the upstream answered 5xx.
    pub upstream_error: bool,
}

/// What one cost limit settles to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actual {
    /// The response said it cost this many units.
    Units(u64),
    /// It did not say (no usage, the stream ended early, the client went
    /// away): `on_missing_usage` gave this many.
    Missing(u64),
    /// No response body reached the client: `on_upstream_error` gave this
    /// many.
    UpstreamError(u64),
}

impl Actual {
    /// The units to settle to.
    pub fn units(self) -> u64 {
        match self {
            Actual::Units(n) | Actual::Missing(n) | Actual::UpstreamError(n) => n,
        }
    }
}

impl Reading {
    /// What a limit with `cost` that reserved `estimate` settles to;
    /// `None` when it never settles (`settle: none`).
    pub fn actual(&self, cost: &CostConfig, estimate: u64) -> Option<Actual> {
        if cost.settle == Settle::None {
            return None;
        }
        if self.upstream_error {
            return Some(Actual::UpstreamError(match cost.on_upstream_error {
                OnUpstreamError::Refund => 0,
                OnUpstreamError::KeepEstimate => estimate,
            }));
        }
        let said = match &cost.settle {
            Settle::LlmUsage => self.usage,
            Settle::ResponseBytes => Some(self.bytes),
            Settle::Header(name) => number(self.headers.get(name)),
            Settle::Trailer(name) => number(self.trailers.as_ref().and_then(|t| t.get(name))),
            Settle::None => None,
        };
        Some(match said {
            Some(units) => Actual::Units(units),
            None => Actual::Missing(match cost.on_missing_usage {
                OnMissingUsage::KeepEstimate => estimate,
                OnMissingUsage::ChargeZero => 0,
            }),
        })
    }
}

/// A header value that is a whole number.
fn number(value: Option<&http::HeaderValue>) -> Option<u64> {
    value?.to_str().ok()?.trim().parse().ok()
}
