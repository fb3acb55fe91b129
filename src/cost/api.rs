//! The LLM APIs a cost limit reads, and the fields each keeps its prompt,
//! its max output tokens and its usage in.
//!
//! Which API a request is for comes from the configuration (`cost.llm.api`)
//! or, with `api: openai`, from the path it is sent upstream on
//! ([`Api::of_openai_path`]); never from the body's shape: a body is read
//! as its API's request, and another API's fields in it are not read.

/// An LLM API endpoint whose requests a cost limit reads.
///
/// | API | prompt | max output field (`cap_output` writes the first) | choices | usage |
/// | --- | --- | --- | --- | --- |
/// | `openai_chat` | `messages` | `max_completion_tokens`, `max_tokens` (the larger when both) | `n` | `prompt_tokens` + `completion_tokens` |
/// | `openai_completions` | `prompt` (a batch of k prompts is k) | `max_tokens` | k x the larger of `n` and `best_of` | `prompt_tokens` + `completion_tokens` |
/// | `openai_responses` | `input` | `max_output_tokens` | 1 | `input_tokens` + `output_tokens` |
/// | `openai_embeddings` | `input` | none (no output) | 0 | `prompt_tokens` |
/// | `anthropic` (messages) | `messages` | `max_tokens` | 1 | input (with cache) + `output_tokens` |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI chat completions (`POST /v1/chat/completions`).
    OpenAiChat,
    /// OpenAI legacy completions (`POST /v1/completions`).
    OpenAiCompletions,
    /// OpenAI responses (`POST /v1/responses`).
    OpenAiResponses,
    /// OpenAI embeddings (`POST /v1/embeddings`).
    OpenAiEmbeddings,
    /// Anthropic messages (`POST /v1/messages`).
    AnthropicMessages,
}

/// The OpenAI endpoints by the end of the path, most specific first: a
/// path whose last segments are one of these is that endpoint's.
const OPENAI_PATHS: &[(&str, Api)] = &[
    ("/chat/completions", Api::OpenAiChat),
    ("/completions", Api::OpenAiCompletions),
    ("/responses", Api::OpenAiResponses),
    ("/embeddings", Api::OpenAiEmbeddings),
];

impl Api {
    /// The API as `cost.llm.api` names it.
    pub fn name(self) -> &'static str {
        match self {
            Api::OpenAiChat => "openai_chat",
            Api::OpenAiCompletions => "openai_completions",
            Api::OpenAiResponses => "openai_responses",
            Api::OpenAiEmbeddings => "openai_embeddings",
            Api::AnthropicMessages => "anthropic",
        }
    }

    /// The OpenAI endpoint `path` (as sent upstream, without its query)
    /// names by its last segments: `…/chat/completions`,
    /// `…/completions`, `…/responses`, `…/embeddings`, so that
    /// `/v1/chat/completions` and Azure's
    /// `/openai/deployments/NAME/chat/completions` are both chat; `None`
    /// for any other path (`/v1/models`, `/v1/files`, a trailing slash).
    pub fn of_openai_path(path: &str) -> Option<Api> {
        OPENAI_PATHS
            .iter()
            .find(|(end, _)| path.ends_with(end))
            .map(|&(_, api)| api)
    }

    /// The fields that hold the max output tokens, in the order read (the
    /// largest present counts); none for an API without output.
    pub fn max_output_fields(self) -> &'static [&'static str] {
        match self {
            Api::OpenAiChat => &["max_completion_tokens", "max_tokens"],
            Api::OpenAiCompletions | Api::AnthropicMessages => &["max_tokens"],
            Api::OpenAiResponses => &["max_output_tokens"],
            Api::OpenAiEmbeddings => &[],
        }
    }

    /// The field `cap_output` adds when the request names none (for chat
    /// completions the current one: `max_tokens` is deprecated there, and
    /// OpenAI's reasoning models refuse it); `None` for an API without
    /// output.
    pub fn max_output_field(self) -> Option<&'static str> {
        self.max_output_fields().first().copied()
    }

    /// Whether a streaming request asks for its usage with
    /// `stream_options.include_usage` (else its stream carries it always,
    /// or it does not stream).
    pub fn has_stream_options(self) -> bool {
        matches!(self, Api::OpenAiChat | Api::OpenAiCompletions)
    }

    /// Whether the API is OpenAI's (its usage and stream shapes).
    pub fn is_openai(self) -> bool {
        !matches!(self, Api::AnthropicMessages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_paths_by_their_last_segments() {
        let cases = [
            ("/v1/chat/completions", Some(Api::OpenAiChat)),
            (
                "/openai/deployments/gpt/chat/completions",
                Some(Api::OpenAiChat),
            ),
            ("/v1/completions", Some(Api::OpenAiCompletions)),
            ("/v1/responses", Some(Api::OpenAiResponses)),
            ("/openai/v1/responses", Some(Api::OpenAiResponses)),
            ("/v1/embeddings", Some(Api::OpenAiEmbeddings)),
            ("/v1/models", None),
            ("/v1/files", None),
            ("/v1/chat/completions/", None),
            ("/v1/chat/completions/abc", None),
            ("/v1/responses/resp_1", None),
            ("/v1/xcompletions", None),
            ("/v1/Chat/Completions", None),
            ("/v1/messages", None),
            ("/", None),
        ];
        for (path, api) in cases {
            assert_eq!(Api::of_openai_path(path), api, "{path}");
        }
    }
}
