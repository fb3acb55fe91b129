//! Response bodies as the APIs send them, for the tests: shapes from the
//! OpenAI and Anthropic SDKs' types (`ChatCompletionChunk`,
//! `ChatCompletion`, the Responses stream events, `RawMessageStartEvent`,
//! `RawMessageDeltaEvent`, `Message`), values from real exchanges.

use super::api::Api;
use super::usage::Usage;

/// A streamed chat completion with `stream_options.include_usage`: every
/// chunk carries `"usage": null` but the last, usage-only one.
pub(crate) const CHAT_STREAM_WITH_USAGE: &str = r#"data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Qx3"}

data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"mS"}

data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,"delta":{"content":"! How can I help?"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"k"}

data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null,"obfuscation":"9Zq"}

data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_eb9dce56a8","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"obfuscation":"2a"}

data: [DONE]

"#;

/// [`CHAT_STREAM_WITH_USAGE`] without its usage-only chunk: what a client
/// that did not ask for usage receives when the gateway asked for it.
pub(crate) fn chat_stream_without_usage_chunk() -> String {
    let at = CHAT_STREAM_WITH_USAGE
        .find(r#"data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_eb9dce56a8","choices":[],"#)
        .expect("the usage chunk");
    let end = at + CHAT_STREAM_WITH_USAGE[at..].find("\n\n").expect("its end") + 2;
    format!(
        "{}{}",
        &CHAT_STREAM_WITH_USAGE[..at],
        &CHAT_STREAM_WITH_USAGE[end..]
    )
}

/// A streamed chat completion without usage (the client did not ask).
pub(crate) const CHAT_STREAM_NO_USAGE: &str = r#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":"stop"}]}

data: [DONE]

"#;

/// A chat completion, pretty-printed as some servers send it.
pub(crate) const CHAT_JSON: &str = r#"{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "gpt-4.1-2025-04-14",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "Hello! How can I assist you today? {\"usage\": 1}",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 19,
    "completion_tokens": 10,
    "total_tokens": 29,
    "prompt_tokens_details": { "cached_tokens": 0, "audio_tokens": 0 },
    "completion_tokens_details": { "reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0 }
  },
  "service_tier": "default"
}
"#;

/// A streamed response (`/v1/responses`).
pub(crate) const RESPONSES_STREAM: &str = r#"event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","created_at":1741290958,"status":"in_progress","error":null,"incomplete_details":null,"instructions":"You are a helpful assistant.","max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}

event: response.in_progress
data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","created_at":1741290958,"status":"in_progress","output":[],"usage":null}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","type":"message","status":"in_progress","role":"assistant","content":[]}}

event: response.content_part.added
data: {"type":"response.content_part.added","sequence_number":3,"item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"delta":"Hi"}

event: response.output_text.done
data: {"type":"response.output_text.done","sequence_number":5,"item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"text":"Hi there! \"usage\":{\"input_tokens\":1}"}

event: response.content_part.done
data: {"type":"response.content_part.done","sequence_number":6,"item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"part":{"type":"output_text","text":"Hi there!","annotations":[]}}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":7,"output_index":0,"item":{"id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi there!","annotations":[]}]}}

event: response.completed
data: {"type":"response.completed","sequence_number":8,"response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","created_at":1741290958,"status":"completed","error":null,"incomplete_details":null,"instructions":"You are a helpful assistant.","max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[{"id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi there!","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":0},"output_tokens":11,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":48},"user":null,"metadata":{}}}

"#;

/// A response from `/v1/responses` without `stream`.
pub(crate) const RESPONSES_JSON: &str = r#"{"id":"resp_67ccd3a9da748190baa7f1570fe91ac604becb25c45c1d41","object":"response","created_at":1741476777,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4o-2024-08-06","output":[{"type":"message","id":"msg_67ccd3acc8d48190a77525dc6de64b4104becb25c45c1d41","status":"completed","role":"assistant","content":[{"type":"output_text","text":"The image depicts a scenic landscape.","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":328,"input_tokens_details":{"cached_tokens":0},"output_tokens":52,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":380},"user":null,"metadata":{}}"#;

/// A streamed Anthropic message, with prompt caching and a ping.
pub(crate) const MESSAGES_STREAM: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5-20250929","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":2048,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard"}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"! \"usage\":{\"output_tokens\":1}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}

event: message_stop
data: {"type":"message_stop"}

"#;

/// An Anthropic message without `stream`.
pub(crate) const MESSAGES_JSON: &str = r#"{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hi! My name is Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":2095,"cache_creation_input_tokens":300,"cache_read_input_tokens":0,"output_tokens":503,"service_tier":"standard"}}"#;

/// A streamed legacy completion with `stream_options.include_usage`: the
/// text chunks carry `"usage": null`, the last chunk has no choices.
pub(crate) const COMPLETIONS_STREAM: &str = r#"data: {"id":"cmpl-AbC123","object":"text_completion","created":1741570300,"model":"gpt-3.5-turbo-instruct","choices":[{"text":"This","index":0,"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"cmpl-AbC123","object":"text_completion","created":1741570300,"model":"gpt-3.5-turbo-instruct","choices":[{"text":" is a test.","index":0,"logprobs":null,"finish_reason":"length"}],"usage":null}

data: {"id":"cmpl-AbC123","object":"text_completion","created":1741570300,"model":"gpt-3.5-turbo-instruct","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}

data: [DONE]

"#;

/// A legacy completion without `stream`.
pub(crate) const COMPLETIONS_JSON: &str = r#"{"id":"cmpl-uqkvlQyYK7bGYrRHQ0eXlWi7","object":"text_completion","created":1589478378,"model":"gpt-3.5-turbo-instruct","system_fingerprint":"fp_44709d6fcb","choices":[{"text":"\n\nThis is indeed a test","index":0,"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}"#;

/// An embeddings answer: `prompt_tokens` and `total_tokens`, no output.
pub(crate) const EMBEDDINGS_JSON: &str = r#"{"object":"list","data":[{"object":"embedding","embedding":[0.0023064255,-0.009327292,-0.0028842222],"index":0}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}"#;

/// Every fixture: a name, its API, its body and the usage it reports.
pub(crate) fn all() -> Vec<(&'static str, Api, &'static str, Option<Usage>)> {
    vec![
        (
            "chat stream",
            Api::OpenAiChat,
            CHAT_STREAM_WITH_USAGE,
            Some(Usage::new(19, 10)),
        ),
        (
            "chat stream, no usage",
            Api::OpenAiChat,
            CHAT_STREAM_NO_USAGE,
            None,
        ),
        (
            "chat json",
            Api::OpenAiChat,
            CHAT_JSON,
            Some(Usage::new(19, 10)),
        ),
        (
            "responses stream",
            Api::OpenAiResponses,
            RESPONSES_STREAM,
            Some(Usage::new(37, 11)),
        ),
        (
            "responses json",
            Api::OpenAiResponses,
            RESPONSES_JSON,
            Some(Usage::new(328, 52)),
        ),
        (
            "completions stream",
            Api::OpenAiCompletions,
            COMPLETIONS_STREAM,
            Some(Usage::new(5, 7)),
        ),
        (
            "completions json",
            Api::OpenAiCompletions,
            COMPLETIONS_JSON,
            Some(Usage::new(5, 7)),
        ),
        (
            "embeddings json",
            Api::OpenAiEmbeddings,
            EMBEDDINGS_JSON,
            Some(Usage::new(8, 0)),
        ),
        (
            "chat json read as responses",
            Api::OpenAiResponses,
            CHAT_JSON,
            None,
        ),
        (
            "responses json read as chat",
            Api::OpenAiChat,
            RESPONSES_JSON,
            None,
        ),
        (
            "messages stream",
            Api::AnthropicMessages,
            MESSAGES_STREAM,
            Some(Usage::new(25 + 2048, 15)),
        ),
        (
            "messages json",
            Api::AnthropicMessages,
            MESSAGES_JSON,
            Some(Usage::new(2095 + 300, 503)),
        ),
    ]
}

/// `text` with its line endings as written (LF), as CRLF and as CR.
pub(crate) fn line_endings(text: &str) -> [(&'static str, Vec<u8>); 3] {
    [
        ("LF", text.as_bytes().to_vec()),
        ("CRLF", text.replace('\n', "\r\n").into_bytes()),
        ("CR", text.replace('\n', "\r").into_bytes()),
    ]
}
