//! The LLM APIs a cost limit reads, and where each keeps its max output
//! tokens.

/// An LLM API as `cost.llm.api` names it.
///
/// The max output tokens a request names, per API and endpoint (the
/// endpoint is told from the body, see [`Endpoint`]):
///
/// | API | endpoint | field read | field added by `cap_output` |
/// | --- | --- | --- | --- |
/// | `openai` | chat completions | `max_completion_tokens`, `max_tokens` (the larger when both) | `max_completion_tokens` |
/// | `openai` | responses | `max_output_tokens` | `max_output_tokens` |
/// | `anthropic` | messages | `max_tokens` | `max_tokens` |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
pub enum Api {
    /// `openai`: chat completions (`POST /v1/chat/completions`) and
    /// responses (`POST /v1/responses`), and servers compatible with them.
    #[serde(rename = "openai")]
    OpenAi,
    /// `anthropic`: messages (`POST /v1/messages`).
    #[serde(rename = "anthropic")]
    Anthropic,
}

/// Which endpoint of its [`Api`] a request is for.
///
/// An OpenAI request is told apart by its body: one with `messages` is a
/// chat completion, any other a response (`input`). The route decides
/// which requests a cost limit sees, so a route for other OpenAI endpoints
/// (embeddings, legacy completions) should not carry one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// OpenAI chat completions.
    ChatCompletions,
    /// OpenAI responses.
    Responses,
    /// Anthropic messages.
    Messages,
}

impl Endpoint {
    /// The fields that hold the max output tokens, in the order read.
    pub fn max_output_fields(self) -> &'static [&'static str] {
        match self {
            Endpoint::ChatCompletions => &["max_completion_tokens", "max_tokens"],
            Endpoint::Responses => &["max_output_tokens"],
            Endpoint::Messages => &["max_tokens"],
        }
    }

    /// The field `cap_output` adds when the request names none: for chat
    /// completions the current one (`max_tokens` is deprecated, and OpenAI's
    /// reasoning models refuse it).
    pub fn max_output_field(self) -> &'static str {
        self.max_output_fields()[0]
    }
}
