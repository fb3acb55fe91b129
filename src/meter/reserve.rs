//! A request's estimate per cost limit, taken at admission
//! (docs/configuration/cost.md `reserve`): a constant, a request header's
//! number, the request body's length, or (`llm`) its tokens plus the
//! output it may ask for.

use std::sync::Arc;

use http::HeaderMap;

use crate::config::{CostConfig, Reserve};
use crate::error::GatewayError;
use crate::limit::policy::Policy;

/// Whether any of `limits` needs the request body before the limits are
/// decided (an `llm` or `request_bytes` estimate, or an LLM request to
/// rewrite): the pipeline then reads it whole first.
pub fn needs_body(limits: &[Arc<Policy>]) -> bool {
    limits.iter().any(|p| {
        p.metered.as_ref().is_some_and(|c| {
            matches!(c.reserve, Reserve::Llm | Reserve::RequestBytes) || c.llm.is_some()
        })
    })
}

/// Whether any of `limits` has a `cost:` spec.
pub fn any(limits: &[Arc<Policy>]) -> bool {
    limits.iter().any(|p| p.metered.is_some())
}

/// The estimate of each of `limits` (by index; `None` for a limit without
/// a `cost:` spec) for a request with `headers` and, when
/// [`needs_body`], its whole `body`; `llm[i]` is limit `i`'s estimate of
/// the body as an LLM request ([`super::llm::read`]), for `reserve: llm`.
pub fn estimates(
    limits: &[Arc<Policy>],
    headers: &HeaderMap,
    body: Option<&[u8]>,
    llm: &[Option<u64>],
) -> Result<Vec<Option<u64>>, GatewayError> {
    limits
        .iter()
        .enumerate()
        .map(|(i, p)| match &p.metered {
            None => Ok(None),
            Some(cost) => estimate(cost, headers, body, llm.get(i).copied().flatten()).map(Some),
        })
        .collect()
}

/// One limit's estimate.
fn estimate(
    cost: &CostConfig,
    headers: &HeaderMap,
    body: Option<&[u8]>,
    llm: Option<u64>,
) -> Result<u64, GatewayError> {
    match &cost.reserve {
        Reserve::Units(n) => Ok(*n),
        Reserve::Header(name) => headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| GatewayError::InvalidCost(name.clone())),
        Reserve::RequestBytes => Ok(body.map_or(0, |b| b.len() as u64)),
        Reserve::Llm => llm.ok_or_else(|| {
            GatewayError::InvalidLlmRequest(
                "the request body was not read as an LLM request".into(),
            )
        }),
    }
}
