//! An LLM request as a cost limit reads it (`reserve: llm`): what it is
//! estimated to cost before it runs, and the rewrites that make the
//! estimate hold (`cap_output`) or make the usage readable
//! (`stream_usage: force`).
//!
//! The estimate is `ceil(body bytes / bytes_per_token)` plus the max output
//! tokens the request names (see [`Api`] for the field of each endpoint),
//! else `default_max_output`, times a chat completion's `n` (each choice
//! may generate that many, and OpenAI counts them all). The body counted is
//! the one the client sent: the rewrites add a few bytes of JSON that are
//! not prompt.
//!
//! The rewrites splice the body: every byte they do not change stays as
//! the client wrote it (no re-serialising, so number formats, key order,
//! escapes and blanks are kept).

use bytes::Bytes;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use super::api::{Api, Endpoint};
use super::json_edit::{self, Edit, Object};

/// A request body that `reserve: llm` cannot read: the gateway answers it
/// 400 with the error code [`InvalidLlmRequest::CODE`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct InvalidLlmRequest {
    reason: String,
}

impl InvalidLlmRequest {
    /// The error code of the 400 answer.
    pub const CODE: &'static str = "invalid_llm_request";

    fn new(reason: impl Into<String>) -> InvalidLlmRequest {
        InvalidLlmRequest {
            reason: reason.into(),
        }
    }

    /// Why, for the client and the log.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// The fields read; unknown ones are skipped (and checked for syntax
/// only). A field given twice is refused, so the gateway and the upstream
/// cannot read different values.
#[derive(Deserialize)]
struct Head {
    model: Option<Value>,
    stream: Option<Value>,
    stream_options: Option<Value>,
    max_tokens: Option<Value>,
    max_completion_tokens: Option<Value>,
    max_output_tokens: Option<Value>,
    n: Option<Value>,
    messages: Option<IgnoredAny>,
}

impl Head {
    /// Reads the body (known to start with `{`).
    fn read(body: &[u8]) -> Result<Head, InvalidLlmRequest> {
        serde_json::from_slice(body).map_err(|e| {
            InvalidLlmRequest::new(match e.classify() {
                serde_json::error::Category::Data => {
                    format!("the body is not a valid request: {e}")
                }
                _ => format!("the body is not valid JSON: {e}"),
            })
        })
    }

    fn model(&self) -> Result<String, InvalidLlmRequest> {
        match &self.model {
            Some(Value::String(m)) if !m.is_empty() => Ok(m.clone()),
            None | Some(Value::String(_)) => Err(InvalidLlmRequest::new("the body names no model")),
            Some(_) => Err(InvalidLlmRequest::new("`model` is not a string")),
        }
    }

    fn stream(&self) -> Result<bool, InvalidLlmRequest> {
        match &self.stream {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(InvalidLlmRequest::new("`stream` is not true or false")),
        }
    }

    /// A whole number field (`null` is absent).
    fn count(field: &str, v: Option<&Value>) -> Result<Option<u64>, InvalidLlmRequest> {
        v.map(|v| {
            v.as_u64()
                .ok_or_else(|| InvalidLlmRequest::new(format!("`{field}` is not a whole number")))
        })
        .transpose()
    }

    /// The largest of the endpoint's max output fields present.
    fn max_output(&self, endpoint: Endpoint) -> Result<Option<u64>, InvalidLlmRequest> {
        let mut max = None;
        for &field in endpoint.max_output_fields() {
            let v = match field {
                "max_tokens" => self.max_tokens.as_ref(),
                "max_completion_tokens" => self.max_completion_tokens.as_ref(),
                _ => self.max_output_tokens.as_ref(),
            };
            if let Some(n) = Head::count(field, v)? {
                max = Some(max.map_or(n, |m: u64| m.max(n)));
            }
        }
        Ok(max)
    }

    /// A chat completion's `n`: how many choices share the max output.
    fn choices(&self, endpoint: Endpoint) -> Result<u64, InvalidLlmRequest> {
        if endpoint != Endpoint::ChatCompletions {
            return Ok(1);
        }
        match Head::count("n", self.n.as_ref())? {
            Some(0) => Err(InvalidLlmRequest::new("`n` is 0")),
            n => Ok(n.unwrap_or(1)),
        }
    }
}

/// What a cost limit needs of an LLM request, read from its body.
///
/// ```
/// use bytes::Bytes;
/// use tollgate::cost::{Api, LlmRequest, Rewrite};
///
/// let body = Bytes::from_static(br#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Hi"}]}"#);
/// let req = LlmRequest::parse(Api::OpenAi, &body, 1, 1024).unwrap();
/// assert_eq!(req.estimate(), body.len() as u64 + 1024);
/// let sent = req.rewrite(&body, Rewrite { cap_output: true, force_stream_usage: true });
/// assert!(sent.usage_added);
/// assert!(sent.body.ends_with(br#","max_completion_tokens":1024,"stream_options":{"include_usage":true}}"#));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmRequest {
    endpoint: Endpoint,
    model: String,
    max_output: Option<u64>,
    output_cap: u64,
    choices: u64,
    prompt_estimate: u64,
    stream: bool,
    include_usage: bool,
}

impl LlmRequest {
    /// Reads `body` as a request to `api`: a JSON object naming a `model`,
    /// its max output tokens (if any) and a chat completion's `n` whole
    /// numbers. `bytes_per_token` 0 is read as 1 (validation refuses it).
    pub fn parse(
        api: Api,
        body: &[u8],
        bytes_per_token: u64,
        default_max_output: u64,
    ) -> Result<LlmRequest, InvalidLlmRequest> {
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(InvalidLlmRequest::new("the body is not a JSON object"));
        }
        // JSON is UTF-8 (RFC 8259 §8.1); the reader below skips the
        // strings it does not need without looking at their bytes.
        if std::str::from_utf8(body).is_err() {
            return Err(InvalidLlmRequest::new("the body is not UTF-8"));
        }
        let head = Head::read(body)?;
        let endpoint = match api {
            Api::Anthropic => Endpoint::Messages,
            Api::OpenAi if head.messages.is_some() => Endpoint::ChatCompletions,
            Api::OpenAi => Endpoint::Responses,
        };
        let max_output = head.max_output(endpoint)?;
        let include_usage = endpoint == Endpoint::ChatCompletions
            && head
                .stream_options
                .as_ref()
                .and_then(|o| o.get("include_usage"))
                == Some(&Value::Bool(true));
        Ok(LlmRequest {
            endpoint,
            model: head.model()?,
            max_output,
            output_cap: max_output.unwrap_or(default_max_output),
            choices: head.choices(endpoint)?,
            prompt_estimate: (body.len() as u64).div_ceil(bytes_per_token.max(1)),
            stream: head.stream()?,
            include_usage,
        })
    }

    /// Which endpoint the body is for.
    pub fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    /// The `model` it names.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The max output tokens it names (the larger of two for a chat
    /// completion naming both), if any.
    pub fn max_output(&self) -> Option<u64> {
        self.max_output
    }

    /// The max output tokens of one choice: [`max_output`](Self::max_output),
    /// else the default; what `cap_output` adds when the request names none.
    pub fn output_cap(&self) -> u64 {
        self.output_cap
    }

    /// How many choices it asks for (a chat completion's `n`, else 1), each
    /// generating up to [`output_cap`](Self::output_cap) tokens.
    pub fn choices(&self) -> u64 {
        self.choices
    }

    /// `ceil(body bytes / bytes_per_token)`: the prompt's share.
    pub fn prompt_estimate(&self) -> u64 {
        self.prompt_estimate
    }

    /// The output's share: [`output_cap`](Self::output_cap) times
    /// [`choices`](Self::choices) (OpenAI counts every choice's tokens).
    pub fn output_reserved(&self) -> u64 {
        self.output_cap.saturating_mul(self.choices)
    }

    /// What admission charges: the prompt's and the output's shares.
    pub fn estimate(&self) -> u64 {
        self.prompt_estimate.saturating_add(self.output_reserved())
    }

    /// `stream: true`.
    pub fn stream(&self) -> bool {
        self.stream
    }

    /// A chat completion with `stream_options.include_usage: true`.
    pub fn include_usage(&self) -> bool {
        self.include_usage
    }

    /// `body` (the one [`parse`](Self::parse) read) as the upstream
    /// should get it.
    pub fn rewrite(&self, body: &Bytes, rewrite: Rewrite) -> Rewritten {
        let unchanged = Rewritten {
            body: body.clone(),
            usage_added: false,
        };
        let Some(root) = json_edit::object(body, 0) else {
            return unchanged;
        };
        let mut edits = Vec::new();
        if rewrite.cap_output && self.max_output.is_none() {
            let cap = self.output_cap.to_string();
            edits.push(root.add(self.endpoint.max_output_field(), &cap));
        }
        let mut usage_added = false;
        if rewrite.force_stream_usage
            && self.endpoint == Endpoint::ChatCompletions
            && self.stream
            && !self.include_usage
        {
            if let Some(edit) = usage_edit(&root, body) {
                edits.push(edit);
                usage_added = true;
            }
        }
        if edits.is_empty() {
            return unchanged;
        }
        Rewritten {
            body: Bytes::from(json_edit::apply(body, edits)),
            usage_added,
        }
    }
}

/// `stream_options.include_usage: true`, however `stream_options` is
/// (absent, null, an object with or without `include_usage`); `None` when
/// it is something else (the upstream refuses such a request anyway).
fn usage_edit(root: &Object, body: &[u8]) -> Option<Edit> {
    let Some(options) = root.get("stream_options") else {
        return Some(root.add("stream_options", r#"{"include_usage":true}"#));
    };
    if &body[options.value.clone()] == b"null" {
        let text = r#"{"include_usage":true}"#.to_string();
        return Some(Edit::replace(options.value.clone(), text));
    }
    let inner = json_edit::object(body, options.value.start)?;
    Some(match inner.get("include_usage") {
        Some(m) => Edit::replace(m.value.clone(), "true".into()),
        None => inner.add("include_usage", "true"),
    })
}

/// The rewrites a cost limit asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rewrite {
    /// `cap_output: true`: a request naming no max output tokens gets the
    /// endpoint's field set to the amount reserved
    /// ([`LlmRequest::output_cap`]); one naming them was reserved that
    /// much, and is left as it is.
    pub cap_output: bool,
    /// `stream_usage: force`: add `stream_options.include_usage: true` to a
    /// streaming chat completion that does not ask for its usage.
    pub force_stream_usage: bool,
}

/// A request body after [`LlmRequest::rewrite`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    /// The body to send (the same bytes when nothing changed).
    pub body: Bytes,
    /// `include_usage` was added: the response's usage-only chunk must not
    /// reach the client ([`UsageChunkFilter`](super::UsageChunkFilter)).
    pub usage_added: bool,
}

#[cfg(test)]
mod tests;
