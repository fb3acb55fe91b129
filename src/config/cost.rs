//! Cost limits as configured (docs/configuration/cost.md): what a request
//! is charged at admission (an estimate), and what settles it when its
//! response ends.

use std::time::Duration;

use http::HeaderName;

/// `cost: { reserve, settle, llm, on_missing_usage, on_upstream_error,
/// settle_within }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostConfig {
    /// What admission charges.
    pub reserve: Reserve,
    /// What the response's end settles to.
    pub settle: Settle,
    /// How LLM requests are estimated and read (with `reserve: llm` or
    /// `settle: llm_usage`).
    pub llm: Option<LlmCost>,
    /// When the response carried no usage.
    pub on_missing_usage: OnMissingUsage,
    /// When no response body reached the client (an upstream error).
    pub on_upstream_error: OnUpstreamError,
    /// A settlement later than this after admission is dropped.
    pub settle_within: Duration,
}

/// `reserve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserve {
    /// `llm`: the request body's tokens plus its max output tokens.
    Llm,
    /// A constant number of units.
    Units(u64),
    /// `header:NAME`: a whole number in that request header.
    Header(HeaderName),
    /// `request_bytes`: the request body's length.
    RequestBytes,
}

/// `settle`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// `llm_usage`: the tokens the response reports.
    LlmUsage,
    /// `header:NAME`: a whole number in that response header.
    Header(HeaderName),
    /// `trailer:NAME`: a whole number in that response trailer.
    Trailer(HeaderName),
    /// `response_bytes`: the response body's bytes.
    ResponseBytes,
    /// `none`: the estimate is the charge.
    None,
}

/// `cost.llm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlmCost {
    /// The API the upstream speaks (or, `openai`, the path says).
    pub api: LlmApi,
    /// What a request that is no model call is charged (no body, or a
    /// multipart upload): 0, the default, charges nothing.
    pub other_requests: u64,
    /// Max output tokens for a request that names none.
    pub default_max_output: u64,
    /// The prompt's estimate is `ceil(body bytes / bytes_per_token)`.
    pub bytes_per_token: u64,
    /// Rewrite the request's max output tokens to what was reserved.
    pub cap_output: bool,
    /// Ask a streaming OpenAI chat request for its usage.
    pub stream_usage: StreamUsage,
}

/// `cost.llm.api`: the API requests are read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LlmApi {
    /// OpenAI, the endpoint told by the path a request is sent upstream on
    /// ([`cost::Api::of_openai_path`](crate::cost::Api::of_openai_path)).
    Openai,
    /// OpenAI chat completions.
    OpenaiChat,
    /// OpenAI legacy completions.
    OpenaiCompletions,
    /// OpenAI responses.
    OpenaiResponses,
    /// OpenAI embeddings.
    OpenaiEmbeddings,
    /// Anthropic messages (`anthropic_messages` is the same).
    #[serde(alias = "anthropic_messages")]
    Anthropic,
}

impl LlmApi {
    /// The API a request sent upstream on `path` is read as: the
    /// configured one, or for `openai` the one the path names (`None`:
    /// a path of no known API).
    pub fn resolve(self, path: &str) -> Option<crate::cost::Api> {
        use crate::cost::Api;
        Some(match self {
            LlmApi::Openai => return Api::of_openai_path(path),
            LlmApi::OpenaiChat => Api::OpenAiChat,
            LlmApi::OpenaiCompletions => Api::OpenAiCompletions,
            LlmApi::OpenaiResponses => Api::OpenAiResponses,
            LlmApi::OpenaiEmbeddings => Api::OpenAiEmbeddings,
            LlmApi::Anthropic => Api::AnthropicMessages,
        })
    }

    /// Whether some request of this API may stream without its usage
    /// (`stream_usage: force` applies).
    pub fn may_force_usage(self) -> bool {
        matches!(
            self,
            LlmApi::Openai | LlmApi::OpenaiChat | LlmApi::OpenaiCompletions
        )
    }
}

/// `cost.llm.stream_usage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamUsage {
    /// Add `stream_options.include_usage`, and keep the usage chunk from a
    /// client that did not ask for it.
    Force,
    /// Send the request as the client wrote it.
    AsSent,
}

/// `cost.on_missing_usage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnMissingUsage {
    /// The estimate stays charged.
    KeepEstimate,
    /// The estimate is given back.
    ChargeZero,
}

/// `cost.on_upstream_error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUpstreamError {
    /// The estimate is given back.
    Refund,
    /// The estimate stays charged.
    KeepEstimate,
}

/// What a cost limit counts, for the rate-limit fields' unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostUnit {
    /// LLM tokens (`tollgate-unit="tokens"`).
    Tokens,
    /// Body bytes (`qu="content-bytes"`).
    Bytes,
    /// Whatever a header or a constant counts: no unit shown.
    Units,
}

impl CostConfig {
    /// The unit this limit counts.
    pub fn unit(&self) -> CostUnit {
        match (&self.reserve, &self.settle) {
            (Reserve::Llm, _) | (_, Settle::LlmUsage) => CostUnit::Tokens,
            (Reserve::RequestBytes, _) | (_, Settle::ResponseBytes) => CostUnit::Bytes,
            _ => CostUnit::Units,
        }
    }

    /// Whether a request's estimate is a true upper bound of what it
    /// settles to, so the budget is never overspent whatever the
    /// concurrency: `None` when it is, else why not and the bound that
    /// applies (`tollgate check` prints it).
    pub fn overspend(&self) -> Option<String> {
        let bound = "overspend is at most the sum, over requests in flight, of (actual - estimate)";
        match (&self.reserve, &self.settle, &self.llm) {
            (_, Settle::None, _) => None,
            (Reserve::Llm, Settle::LlmUsage, Some(l)) if l.cap_output && l.bytes_per_token == 1 => {
                // Assuming the whole prompt is in the body (docs say when
                // it is not).
                None
            }
            (Reserve::Llm, Settle::LlmUsage, Some(l)) if !l.cap_output => Some(format!(
                "the estimate is not a bound: without cap_output a response may use more output tokens than reserved; {bound}"
            )),
            (Reserve::Llm, Settle::LlmUsage, Some(l)) => Some(format!(
                "the estimate is not a bound: with bytes_per_token: {} a prompt may count more tokens than estimated; {bound}",
                l.bytes_per_token
            )),
            _ => Some(format!(
                "the estimate is not a bound: a response may settle to more than its reserve; {bound}"
            )),
        }
    }
}
