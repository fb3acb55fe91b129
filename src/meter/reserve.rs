//! A request's estimate per cost limit, taken at admission
//! (docs/configuration/cost.md `reserve`): a constant, a request header's
//! number, the request body's length, or (`llm`) its tokens plus the
//! output it may ask for.

use std::sync::Arc;

use http::HeaderMap;

use crate::config::{CostConfig, Reserve};
use crate::error::GatewayError;
use crate::limit::policy::Policy;
use crate::limit::Estimate;

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
/// [`needs_body`], its whole `body`; `llm` is the body read as an LLM
/// request ([`super::llm::read`]), whose estimates `reserve: llm` limits
/// charge (a request that is no model call charged 0 leaves the limit
/// out). A limit's error (no number in its header) answers the request
/// only if that limit applies to it ([`crate::limit::decide_reserving`]).
pub fn estimates(
    limits: &[Arc<Policy>],
    headers: &HeaderMap,
    body: Option<&[u8]>,
    llm: Option<&super::llm::Read>,
) -> Vec<Option<Estimate<GatewayError>>> {
    limits
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let cost = p.metered.as_ref()?;
            if let Some(e) = from_head(cost, headers) {
                return Some(e.map_or_else(Estimate::Invalid, Estimate::Units));
            }
            Some(match cost.reserve {
                Reserve::RequestBytes => Estimate::Units(body.map_or(0, |b| b.len() as u64)),
                _ => match llm.map(|r| (r.estimates.get(i).copied().flatten(), r.seen.is_call())) {
                    Some((Some(0), false)) => Estimate::NoModelCall,
                    Some((Some(units), _)) => Estimate::Units(units),
                    _ => Estimate::Invalid(GatewayError::InvalidLlmRequest(
                        "the request body was not read as an LLM request".into(),
                    )),
                },
            })
        })
        .collect()
}

/// The estimate of a limit whose `reserve` needs only the request head: a
/// constant, or the whole number in a header (`invalid_cost` when there is
/// none); `None` for the estimates read from the body. `tollgate simulate`
/// takes these from a log line's headers the same way.
pub fn from_head(cost: &CostConfig, headers: &HeaderMap) -> Option<Result<u64, GatewayError>> {
    match &cost.reserve {
        Reserve::Units(n) => Some(Ok(*n)),
        Reserve::Header(name) => Some(
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| GatewayError::InvalidCost(name.clone())),
        ),
        Reserve::RequestBytes | Reserve::Llm => None,
    }
}
