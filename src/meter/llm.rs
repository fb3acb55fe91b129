//! The LLM side of a request's cost limits: its body read as an LLM
//! request (the estimate, the `cap_output` and `stream_usage: force`
//! rewrites), and the [`Tap`] that reads the response's usage.

use std::sync::Arc;

use bytes::Bytes;

use super::body::Tap;
use crate::config::{CostConfig, LlmApi, LlmCost, Reserve, Settle, StreamUsage};
use crate::cost::{self, LlmRequest, Rewrite, UsageChunkFilter, UsageReader};
use crate::error::GatewayError;
use crate::limit::policy::Policy;

/// The API of `cost.llm.api`, as [`crate::cost`] names it.
fn api(api: LlmApi) -> cost::Api {
    match api {
        LlmApi::Openai => cost::Api::OpenAi,
        LlmApi::Anthropic => cost::Api::Anthropic,
    }
}

/// What reading the response needs to know of its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The API.
    pub api: cost::Api,
    /// `include_usage` was added: the usage-only chunk is the gateway's,
    /// and does not reach the client.
    pub usage_added: bool,
    /// Some limit settles from the usage.
    pub reads_usage: bool,
}

/// A request body read as an LLM request: each limit's estimate (by
/// index), the body to forward, and what reading the response needs.
pub type Read = (Vec<Option<u64>>, Bytes, Seen);

/// A request body read for `limits`: each `reserve: llm` limit's estimate
/// (by index; under its own `llm` settings), the body to forward (the
/// first limit with an `llm` block decides the rewrites), and what the
/// response's reading needs. `None` when no limit has an `llm` block.
pub fn read(limits: &[Arc<Policy>], body: &Bytes) -> Result<Option<Read>, GatewayError> {
    let Some(first) = limits.iter().find_map(|p| with_llm(p).map(|(_, l)| l)) else {
        return Ok(None);
    };
    let parse = |l: &LlmCost| {
        LlmRequest::parse(api(l.api), body, l.bytes_per_token, l.default_max_output)
            .map_err(|e| GatewayError::InvalidLlmRequest(e.reason().into()))
    };
    let request = parse(&first)?;
    let mut estimates = Vec::with_capacity(limits.len());
    let mut reads_usage = false;
    for p in limits {
        estimates.push(match with_llm(p) {
            Some((c, l)) => {
                reads_usage |= c.settle == Settle::LlmUsage;
                match c.reserve {
                    Reserve::Llm if l == first => Some(request.estimate()),
                    Reserve::Llm => Some(parse(&l)?.estimate()),
                    _ => None,
                }
            }
            None => None,
        });
    }
    let rewrite = Rewrite {
        cap_output: first.cap_output,
        force_stream_usage: first.stream_usage == StreamUsage::Force,
    };
    let rewritten = request.rewrite(body, rewrite);
    let seen = Seen {
        api: api(first.api),
        usage_added: rewritten.usage_added,
        reads_usage,
    };
    Ok(Some((estimates, rewritten.body, seen)))
}

/// A limit's cost spec and its `llm` block, if it has one.
fn with_llm(p: &Policy) -> Option<(&CostConfig, LlmCost)> {
    p.metered.as_ref().and_then(|c| c.llm.map(|l| (c, l)))
}

/// The tap a response to a request `seen` needs: the usage-chunk filter
/// when `include_usage` was added, else a reader when a limit settles from
/// the usage, else none.
pub fn tap(seen: Seen) -> Option<Box<dyn Tap>> {
    if seen.usage_added {
        return Some(Box::new(Filtering(UsageChunkFilter::new())));
    }
    seen.reads_usage
        .then(|| Box::new(Reading(Some(UsageReader::new(seen.api)))) as Box<dyn Tap>)
}

/// Reads the usage, passing every byte.
struct Reading(Option<UsageReader>);

impl Tap for Reading {
    fn push(&mut self, chunk: Bytes) -> Bytes {
        if let Some(reader) = self.0.as_mut() {
            reader.feed(&chunk);
        }
        chunk
    }

    fn finish(&mut self) -> (Bytes, Option<u64>) {
        let usage = self.0.take().and_then(UsageReader::finish);
        (Bytes::new(), usage.map(|u| u.total))
    }

    fn filters(&self) -> bool {
        false
    }
}

/// Removes the usage-only chunk the gateway asked for, reading the usage.
struct Filtering(UsageChunkFilter);

impl Tap for Filtering {
    fn push(&mut self, chunk: Bytes) -> Bytes {
        self.0.push(chunk)
    }

    fn finish(&mut self) -> (Bytes, Option<u64>) {
        let rest = self.0.finish();
        (rest, self.0.usage().map(|u| u.total))
    }

    fn filters(&self) -> bool {
        true
    }
}
