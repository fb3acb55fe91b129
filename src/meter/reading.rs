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
    /// The request failed: the gateway answered an error itself, or the
    /// upstream answered 5xx (`on_upstream_error`, unless the response
    /// said what it cost).
    pub upstream_error: bool,
    /// The body is an error the gateway answered itself, not the
    /// upstream's (nor a `respond` route's): nothing in it says what the
    /// request cost.
    pub local: bool,
}

/// What one cost limit settles to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actual {
    /// The response said it cost this many units.
    Units(u64),
    /// It did not say (no usage, the stream ended early, the client went
    /// away): `on_missing_usage` gave this many.
    Missing(u64),
    /// The request failed and its response did not say: `on_upstream_error`
    /// gave this many.
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
    /// The reading of a request that ended before its response was made
    /// (the client went away, or the shutdown grace closed it): nothing
    /// said, no error seen.
    pub fn client_gone() -> Reading {
        Reading::default()
    }

    /// What a limit with `cost` that reserved `estimate` settles to;
    /// `None` when it never settles (`settle: none`). What the upstream's
    /// response said it cost counts first, whatever its status (a 5xx
    /// whose usage reached the client settles by that usage); else a
    /// failed request is `on_upstream_error`'s, and any other
    /// `on_missing_usage`'s.
    pub fn actual(&self, cost: &CostConfig, estimate: u64) -> Option<Actual> {
        if cost.settle == Settle::None {
            return None;
        }
        let said = match &cost.settle {
            _ if self.local => None,
            Settle::LlmUsage => self.usage,
            Settle::ResponseBytes => Some(self.bytes),
            Settle::Header(name) => number(self.headers.get(name)),
            Settle::Trailer(name) => number(self.trailers.as_ref().and_then(|t| t.get(name))),
            Settle::None => None,
        };
        Some(match said {
            Some(units) => Actual::Units(units),
            None if self.upstream_error => Actual::UpstreamError(match cost.on_upstream_error {
                OnUpstreamError::Refund => 0,
                OnUpstreamError::KeepEstimate => estimate,
            }),
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{Reserve, Settle};

    fn cost(settle: Settle) -> CostConfig {
        CostConfig {
            reserve: Reserve::Units(100),
            settle,
            llm: None,
            on_missing_usage: OnMissingUsage::ChargeZero,
            on_upstream_error: OnUpstreamError::KeepEstimate,
            settle_within: Duration::from_secs(60),
        }
    }

    #[test]
    fn what_the_response_said_comes_first_then_the_error_then_missing() {
        let usage = cost(Settle::LlmUsage);
        let said = Reading {
            usage: Some(30),
            upstream_error: true,
            ..Reading::default()
        };
        // A 5xx whose usage reached the client settles by it.
        assert_eq!(said.actual(&usage, 100), Some(Actual::Units(30)));
        let failed = Reading {
            upstream_error: true,
            ..Reading::default()
        };
        assert_eq!(failed.actual(&usage, 100), Some(Actual::UpstreamError(100)));
        assert_eq!(
            Reading::client_gone().actual(&usage, 100),
            Some(Actual::Missing(0))
        );
        // The gateway's own error body says nothing, its bytes included.
        let bytes = cost(Settle::ResponseBytes);
        let refused = Reading {
            bytes: 80,
            upstream_error: true,
            local: true,
            ..Reading::default()
        };
        assert_eq!(
            refused.actual(&bytes, 100),
            Some(Actual::UpstreamError(100))
        );
        // An upstream 5xx's bytes reached the client: they are charged.
        let upstream_5xx = Reading {
            bytes: 80,
            upstream_error: true,
            ..Reading::default()
        };
        assert_eq!(upstream_5xx.actual(&bytes, 100), Some(Actual::Units(80)));
        assert_eq!(Reading::default().actual(&cost(Settle::None), 100), None);
    }
}
