//! An LLM request as a cost limit reads it (`reserve: llm`): what it is
//! estimated to cost before it runs, and the rewrites that make the
//! estimate hold (`cap_output`) or make the usage readable
//! (`stream_usage: force`).
//!
//! The body is read as a request of the [`Api`] the configuration (or the
//! path) names, never as the API its shape suggests: another API's fields
//! in it are neither read nor touched. The estimate is `ceil(body bytes /
//! bytes_per_token)` plus the max output tokens the request names in its
//! API's field (see [`Api`]), else `default_max_output`, times the
//! outputs it asks for: a chat completion's `n`; for a legacy completion,
//! each prompt of a batch times the larger of `n` and `best_of` (every
//! candidate is generated and billed); none for embeddings. The body
//! counted is the one the client sent: the rewrites add a few bytes of
//! JSON that are not prompt.
//!
//! The rewrites splice the body: every byte they do not change stays as
//! the client wrote it (no re-serialising, so number formats, key order,
//! escapes and blanks are kept).

use std::fmt;

use bytes::Bytes;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::api::Api;
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

    /// A refusal for `reason` (which names the field, when one is at fault).
    pub fn new(reason: impl Into<String>) -> InvalidLlmRequest {
        InvalidLlmRequest {
            reason: reason.into(),
        }
    }

    /// Why, for the client and the log.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// What kind of JSON value a field holds, and for an array what its
/// elements are: enough to count a batch's prompts without keeping any of
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A string.
    Text,
    /// An array: how many elements, and how many are strings, numbers and
    /// arrays.
    Array {
        len: u64,
        texts: u64,
        numbers: u64,
        arrays: u64,
    },
    /// A number.
    Number,
    /// `null`, a boolean or an object.
    Other,
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Shape, D::Error> {
        d.deserialize_any(ShapeVisitor { outer: true })
    }
}

/// Reads a value's [`Shape`]; an array's elements are read with `outer`
/// false (their own elements are skipped, only their kind counts).
struct ShapeVisitor {
    outer: bool,
}

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::Text)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        let (mut len, mut texts, mut numbers, mut arrays) = (0, 0, 0, 0);
        if !self.outer {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(Shape::Array {
                len,
                texts,
                numbers,
                arrays,
            });
        }
        while let Some(kind) = seq.next_element::<Element>()? {
            len += 1;
            match kind {
                Element::Text => texts += 1,
                Element::Number => numbers += 1,
                Element::Array => arrays += 1,
                Element::Other => {}
            }
        }
        Ok(Shape::Array {
            len,
            texts,
            numbers,
            arrays,
        })
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Shape::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
        Ok(Shape::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
        Ok(Shape::Number)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Shape, E> {
        Ok(Shape::Number)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::Number)
    }

    fn visit_unit<E>(self) -> Result<Shape, E> {
        Ok(Shape::Other)
    }
}

/// The kind of one element of an array [`Shape`] counts.
enum Element {
    Text,
    Number,
    Array,
    Other,
}

impl<'de> Deserialize<'de> for Element {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Element, D::Error> {
        Ok(match d.deserialize_any(ShapeVisitor { outer: false })? {
            Shape::Text => Element::Text,
            Shape::Number => Element::Number,
            Shape::Array { .. } => Element::Array,
            Shape::Other => Element::Other,
        })
    }
}

/// The fields read; unknown ones are skipped (and checked for syntax
/// only). A field given twice is refused, so the gateway and the upstream
/// cannot read different values. Which of them count is the API's say
/// ([`Api`]); the others are not looked at.
#[derive(Deserialize)]
struct Head {
    model: Option<Value>,
    stream: Option<Value>,
    stream_options: Option<Value>,
    max_tokens: Option<Value>,
    max_completion_tokens: Option<Value>,
    max_output_tokens: Option<Value>,
    n: Option<Value>,
    best_of: Option<Value>,
    messages: Option<Shape>,
    prompt: Option<Shape>,
    input: Option<Shape>,
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
            None | Some(Value::String(_)) => {
                Err(InvalidLlmRequest::new("`model`: the body names no model"))
            }
            Some(_) => Err(InvalidLlmRequest::new("`model` is not a string")),
        }
    }

    fn stream(&self, api: Api) -> Result<bool, InvalidLlmRequest> {
        match (&self.stream, api) {
            // Embeddings do not stream: the field means nothing there.
            (_, Api::OpenAiEmbeddings) | (None, _) => Ok(false),
            (Some(Value::Bool(b)), _) => Ok(*b),
            (Some(_), _) => Err(InvalidLlmRequest::new("`stream` is not true or false")),
        }
    }

    /// A whole number field (`null` is absent).
    fn count(field: &str, v: Option<&Value>) -> Result<Option<u64>, InvalidLlmRequest> {
        v.filter(|v| !v.is_null())
            .map(|v| {
                v.as_u64().ok_or_else(|| {
                    InvalidLlmRequest::new(format!("`{field}` is not a whole number"))
                })
            })
            .transpose()
    }

    /// A count that multiplies the output (`n`, `best_of`): at least 1.
    fn multiplier(field: &str, v: Option<&Value>) -> Result<u64, InvalidLlmRequest> {
        match Head::count(field, v)? {
            Some(0) => Err(InvalidLlmRequest::new(format!("`{field}` is 0"))),
            n => Ok(n.unwrap_or(1)),
        }
    }

    /// The largest of the API's max output fields present.
    fn max_output(&self, api: Api) -> Result<Option<u64>, InvalidLlmRequest> {
        let mut max = None;
        for &field in api.max_output_fields() {
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

    /// How many outputs of up to the max output tokens each the request
    /// asks for (see the module doc); checks the field that holds the
    /// API's prompt.
    fn outputs(&self, api: Api) -> Result<u64, InvalidLlmRequest> {
        match api {
            Api::OpenAiChat => {
                require_array("messages", self.messages, api)?;
                Head::multiplier("n", self.n.as_ref())
            }
            Api::OpenAiCompletions => {
                let prompts = prompts(self.prompt)?;
                let n = Head::multiplier("n", self.n.as_ref())?;
                let best_of = Head::multiplier("best_of", self.best_of.as_ref())?;
                Ok(prompts.saturating_mul(n.max(best_of)))
            }
            Api::OpenAiResponses => match self.input {
                None | Some(Shape::Text | Shape::Array { .. }) => Ok(1),
                Some(Shape::Number | Shape::Other) => Err(InvalidLlmRequest::new(
                    "`input` is not a string or an array",
                )),
            },
            Api::OpenAiEmbeddings => match self.input {
                Some(Shape::Text) => Ok(0),
                Some(Shape::Array { len, .. }) if len > 0 => Ok(0),
                Some(_) => Err(InvalidLlmRequest::new(
                    "`input` is not a string or a non-empty array",
                )),
                None => Err(InvalidLlmRequest::new(
                    "`input` is missing: an openai_embeddings request names its input",
                )),
            },
            Api::AnthropicMessages => {
                require_array("messages", self.messages, api)?;
                Ok(1)
            }
        }
    }
}

/// `field` must be an array, as `api` requires.
fn require_array(field: &str, shape: Option<Shape>, api: Api) -> Result<(), InvalidLlmRequest> {
    match shape {
        Some(Shape::Array { .. }) => Ok(()),
        Some(_) => Err(InvalidLlmRequest::new(format!("`{field}` is not an array"))),
        None => Err(InvalidLlmRequest::new(format!(
            "`{field}` is missing: an {} request names its {field}",
            api.name()
        ))),
    }
}

/// The prompts of a legacy completion: a string or an array of token ids
/// is one, an array of strings or of token arrays one per element; absent,
/// the API completes one (from the start of a document).
fn prompts(prompt: Option<Shape>) -> Result<u64, InvalidLlmRequest> {
    let bad = || {
        InvalidLlmRequest::new(
            "`prompt` is not a string, an array of strings, an array of token ids or an array of token arrays",
        )
    };
    match prompt {
        None | Some(Shape::Text) => Ok(1),
        Some(Shape::Array {
            len,
            texts,
            numbers,
            arrays,
        }) => match () {
            _ if len == 0 => Err(InvalidLlmRequest::new("`prompt` is an empty array")),
            _ if numbers == len => Ok(1),
            _ if texts == len || arrays == len => Ok(len),
            _ => Err(bad()),
        },
        Some(Shape::Number | Shape::Other) => Err(bad()),
    }
}

/// What a cost limit needs of an LLM request, read from its body.
///
/// ```
/// use bytes::Bytes;
/// use tollgate::cost::{Api, LlmRequest, Rewrite};
///
/// let body = Bytes::from_static(br#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Hi"}]}"#);
/// let req = LlmRequest::parse(Api::OpenAiChat, &body, 1, 1024).unwrap();
/// assert_eq!(req.estimate(), body.len() as u64 + 1024);
/// let sent = req.rewrite(&body, Rewrite { cap_output: true, force_stream_usage: true });
/// assert!(sent.usage_added);
/// assert!(sent.body.ends_with(br#","max_completion_tokens":1024,"stream_options":{"include_usage":true}}"#));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmRequest {
    api: Api,
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
    /// the API's prompt field, its max output tokens (if any) and its
    /// output multipliers as whole numbers. `bytes_per_token` 0 is read as
    /// 1 (validation refuses it).
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
        let model = head.model()?;
        let max_output = head.max_output(api)?;
        let choices = head.outputs(api)?;
        let include_usage = api.has_stream_options()
            && head
                .stream_options
                .as_ref()
                .and_then(|o| o.get("include_usage"))
                == Some(&Value::Bool(true));
        let output_cap = match api.max_output_field() {
            Some(_) => max_output.unwrap_or(default_max_output),
            None => 0,
        };
        Ok(LlmRequest {
            api,
            model,
            max_output,
            output_cap,
            choices,
            prompt_estimate: (body.len() as u64).div_ceil(bytes_per_token.max(1)),
            stream: head.stream(api)?,
            include_usage,
        })
    }

    /// The API it was read as.
    pub fn api(&self) -> Api {
        self.api
    }

    /// The `model` it names.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The max output tokens it names in its API's field (the larger of
    /// two for a chat completion naming both), if any.
    pub fn max_output(&self) -> Option<u64> {
        self.max_output
    }

    /// The max output tokens of one output: [`max_output`](Self::max_output),
    /// else the default (0 for an API without output); what `cap_output`
    /// adds when the request names none.
    pub fn output_cap(&self) -> u64 {
        self.output_cap
    }

    /// How many outputs it asks for, each generating up to
    /// [`output_cap`](Self::output_cap) tokens: a chat completion's `n`, a
    /// legacy completion's prompts times the larger of `n` and `best_of`,
    /// else 1 (0 for embeddings).
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

    /// `stream: true` (never for embeddings).
    pub fn stream(&self) -> bool {
        self.stream
    }

    /// A chat or legacy completion with `stream_options.include_usage:
    /// true`.
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
        if let (true, None, Some(field)) = (
            rewrite.cap_output,
            self.max_output,
            self.api.max_output_field(),
        ) {
            let cap = self.output_cap.to_string();
            // A field that is there is `null` (else the request named its
            // max): it takes the value, not a second member of its name.
            edits.push(match root.get(field) {
                Some(member) => Edit::replace(member.value.clone(), cap),
                None => root.add(field, &cap),
            });
        }
        let mut usage_added = false;
        if rewrite.force_stream_usage
            && self.api.has_stream_options()
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
    /// `cap_output: true`: a request naming no max output tokens gets its
    /// API's field set to the amount reserved (an API without output gets
    /// nothing)
    /// ([`LlmRequest::output_cap`]); one naming them was reserved that
    /// much, and is left as it is.
    pub cap_output: bool,
    /// `stream_usage: force`: add `stream_options.include_usage: true` to a
    /// streaming chat or legacy completion that does not ask for its usage.
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
