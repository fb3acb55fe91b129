//! Cost limits' side of LLM traffic: what a request is estimated to cost
//! before it runs, and what its response says it cost.
//!
//! - [`api`]: the APIs (OpenAI chat, legacy completions, responses,
//!   embeddings; Anthropic messages), the fields each keeps its prompt,
//!   max output tokens and usage in, and OpenAI's endpoints by path.
//! - [`llm_request`]: reads a request body (`reserve: llm`): the estimate,
//!   `stream`, `include_usage`; the `cap_output` and `stream_usage: force`
//!   rewrites.
//! - [`usage`]: reads the usage from a response body as it streams past
//!   (`settle: llm_usage`), holding none of it.
//! - [`usage_chunk`]: removes the usage-only chunk that `stream_usage:
//!   force` caused from what the client receives, reading the usage.
//!
//! All of it is plain functions of bytes, tested without a network; the
//! pipeline wires them to requests and response bodies.

pub mod api;
mod json_edit;
mod json_scan;
pub mod llm_request;
mod sse;
pub mod usage;
pub mod usage_chunk;

#[cfg(test)]
mod fixtures;

pub use api::Api;
pub use llm_request::{InvalidLlmRequest, LlmRequest, Rewrite, Rewritten};
pub use usage::{Usage, UsageReader};
pub use usage_chunk::UsageChunkFilter;
