//! The token usage an LLM response reports, read as the response streams
//! past: [`UsageReader`] is fed the body's pieces as they go to the client
//! and holds none of them back.
//!
//! What it reads, per [`Api`] (a body whose first non-blank byte is `{` is
//! read as one JSON document, any other as Server-Sent Events), each API's
//! own usage fields and no other's:
//!
//! - `openai_chat` and `openai_completions`: the body's `usage`
//!   (`prompt_tokens`, `completion_tokens`), or in a stream the `usage` of
//!   the last `data:` chunk that has one (the chunk
//!   `stream_options.include_usage` asks for; the others carry `"usage":
//!   null`); `data: [DONE]` is no chunk.
//! - `openai_responses`: the body's `usage` (`input_tokens`,
//!   `output_tokens`), or in a stream `response.usage` of the terminal
//!   event, `response.completed`, or `response.incomplete` (a response cut
//!   at its `max_output_tokens`, as `cap_output` may cause) or
//!   `response.failed`.
//! - `openai_embeddings`: the body's `usage.prompt_tokens` (no output).
//! - `anthropic`, SSE: `message_start`'s `message.usage`, updated by each
//!   `message_delta`'s `usage` (whose counts are cumulative; `input_tokens`
//!   and the cache counts there, when present, replace the start's), as
//!   Anthropic's SDK accumulates them; complete once a `message_delta`
//!   arrived.
//! - `anthropic`, JSON: the body's `usage`.
//!
//! The actual cost is input + output tokens, each as the API counts it in
//! the total it bills: OpenAI's `prompt_tokens`/`input_tokens` include the
//! cached prompt tokens and `completion_tokens`/`output_tokens` the
//! reasoning tokens (so input + output is their `total_tokens`);
//! Anthropic's total input is `input_tokens + cache_creation_input_tokens +
//! cache_read_input_tokens` (its `input_tokens` alone leaves the cached
//! part out), and its `output_tokens` includes thinking.
//!
//! Memory: nothing is buffered but the values at the paths above, at most
//! 2 KiB each; a document of any size (a 10 MB completion, a
//! `response.completed` event repeating the whole output) is scanned
//! without being held (see `json_scan`). Robust to pieces cut anywhere,
//! CRLF, LF or CR line endings, comments and `data` split over lines. A
//! usage missing, cut short or not a number gives `None`, never a guess.

use serde::Deserialize;

use super::api::Api;
use super::json_scan::{JsonScan, Path};
use super::sse::SseEvents;

/// The paths captured in a body or an event's data; the indices below
/// name them.
pub(crate) const PATHS: &[Path] = &[
    &["type"],
    &["usage"],
    &["response", "usage"],
    &["message", "usage"],
    &["choices"],
];
const TYPE: usize = 0;
const USAGE: usize = 1;
const RESPONSE_USAGE: usize = 2;
const MESSAGE_USAGE: usize = 3;
/// A chat chunk's `choices` (for the usage-only chunk).
pub(crate) const CHOICES: usize = 4;

/// Whether an event's data may hold a usage this module reads: a
/// `"usage"` key (as written) whose value is an object. Events without
/// one (content deltas, OpenAI's `"usage":null` chunks) are not scanned
/// (see `sse`); a false positive (the text inside a string) is only
/// scanned.
fn has_usage_object(data: &[u8]) -> bool {
    static KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"usage\""));
    KEY.find_iter(data).any(|at| {
        let mut rest = data[at + b"\"usage\"".len()..]
            .iter()
            .skip_while(|b| b.is_ascii_whitespace());
        rest.next() == Some(&b':') && rest.find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
    })
}

/// Tokens an LLM response reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub input: u64,
    /// Generated tokens, reasoning included.
    pub output: u64,
    /// `input + output`: the request's actual cost.
    pub total: u64,
}

impl Usage {
    /// A usage of `input` and `output` tokens.
    pub fn new(input: u64, output: u64) -> Usage {
        Usage {
            input,
            output,
            total: input.saturating_add(output),
        }
    }
}

/// A usage object as either API writes it; unknown fields are skipped.
#[derive(Debug, Default, Deserialize)]
struct RawUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl RawUsage {
    /// The captured value, if it is a usage object.
    fn parse(value: Option<&[u8]>) -> Option<RawUsage> {
        serde_json::from_slice(value?).ok()
    }

    /// An OpenAI API's counts, under that API's own names.
    fn openai(&self, api: Api) -> Option<Usage> {
        match api {
            Api::OpenAiResponses => Some(Usage::new(self.input_tokens?, self.output_tokens?)),
            Api::OpenAiEmbeddings => Some(Usage::new(self.prompt_tokens?, 0)),
            _ => Some(Usage::new(self.prompt_tokens?, self.completion_tokens?)),
        }
    }
}

/// Anthropic's counts so far in a stream.
#[derive(Debug, Default, Clone, Copy)]
struct AnthropicTally {
    input: Option<u64>,
    cache_creation: u64,
    cache_read: u64,
    output: Option<u64>,
}

impl AnthropicTally {
    /// Takes every count `raw` has.
    fn update(&mut self, raw: &RawUsage) {
        if raw.input_tokens.is_some() {
            self.input = raw.input_tokens;
        }
        self.cache_creation = raw
            .cache_creation_input_tokens
            .unwrap_or(self.cache_creation);
        self.cache_read = raw.cache_read_input_tokens.unwrap_or(self.cache_read);
    }

    fn usage(&self) -> Option<Usage> {
        let input = self
            .input?
            .saturating_add(self.cache_creation)
            .saturating_add(self.cache_read);
        Some(Usage::new(input, self.output?))
    }
}

/// The usage found so far in one response, from its JSON body or events.
#[derive(Debug)]
pub(crate) struct Tally {
    api: Api,
    openai: Option<Usage>,
    anthropic: AnthropicTally,
}

impl Tally {
    pub(crate) fn new(api: Api) -> Tally {
        Tally {
            api,
            openai: None,
            anthropic: AnthropicTally::default(),
        }
    }

    /// A whole JSON body, scanned.
    pub(crate) fn body(&mut self, scan: &JsonScan) {
        let Some(raw) = RawUsage::parse(scan.value(USAGE)) else {
            return;
        };
        match self.api {
            Api::AnthropicMessages => {
                let mut tally = AnthropicTally::default();
                tally.update(&raw);
                tally.output = raw.output_tokens;
                self.anthropic = tally;
            }
            openai => self.openai = raw.openai(openai),
        }
    }

    /// One event's data, scanned.
    pub(crate) fn event(&mut self, scan: &JsonScan) {
        let kind = scan.value(TYPE).unwrap_or_default();
        let at = match self.api {
            Api::AnthropicMessages => return self.anthropic_event(kind, scan),
            // A response's usage is in its terminal event only.
            Api::OpenAiResponses => {
                let terminal = [
                    &b"\"response.completed\""[..],
                    b"\"response.incomplete\"",
                    b"\"response.failed\"",
                ];
                if !terminal.contains(&kind) {
                    return;
                }
                RESPONSE_USAGE
            }
            // Embeddings do not stream.
            Api::OpenAiEmbeddings => return,
            Api::OpenAiChat | Api::OpenAiCompletions => USAGE,
        };
        if let Some(usage) = RawUsage::parse(scan.value(at)).and_then(|r| r.openai(self.api)) {
            self.openai = Some(usage);
        }
    }

    /// One event of an Anthropic stream.
    fn anthropic_event(&mut self, kind: &[u8], scan: &JsonScan) {
        if kind == b"\"message_start\"" {
            if let Some(raw) = RawUsage::parse(scan.value(MESSAGE_USAGE)) {
                self.anthropic.update(&raw);
            }
        } else if kind == b"\"message_delta\"" {
            if let Some(raw) = RawUsage::parse(scan.value(USAGE)) {
                if raw.output_tokens.is_some() {
                    self.anthropic.update(&raw);
                    self.anthropic.output = raw.output_tokens;
                }
            }
        }
    }

    /// The usage, when complete.
    pub(crate) fn usage(&self) -> Option<Usage> {
        match self.api {
            Api::AnthropicMessages => self.anthropic.usage(),
            _ => self.openai,
        }
    }
}

/// Whether an event's data is OpenAI's usage-only chat chunk: `choices`
/// an empty array and `usage` an object.
pub(crate) fn is_usage_only_chunk(scan: &JsonScan) -> bool {
    let empty = scan.value(CHOICES).is_some_and(|c| {
        let mut solid = c.iter().filter(|b| !b.is_ascii_whitespace());
        solid.next() == Some(&b'[') && solid.next() == Some(&b']') && solid.next().is_none()
    });
    empty && scan.value(USAGE).is_some_and(|u| u.first() == Some(&b'{'))
}

/// How a response body is framed, told from its first non-blank byte.
#[derive(Debug)]
pub(crate) enum Framing {
    /// Nothing but blanks yet.
    Unknown,
    /// One JSON document.
    Json(JsonScan),
    /// Server-Sent Events.
    Sse(SseEvents),
}

impl Framing {
    /// Decides the framing from `chunk` if it can: returns the index of
    /// the first byte to read as that framing (blanks before it are
    /// nothing in either).
    pub(crate) fn decide(&mut self, chunk: &[u8], paths: &'static [Path]) -> Option<usize> {
        if !matches!(self, Framing::Unknown) {
            return Some(0);
        }
        let at = chunk.iter().position(|b| !b.is_ascii_whitespace())?;
        *self = if chunk[at] == b'{' {
            Framing::Json(JsonScan::new(paths))
        } else {
            Framing::Sse(SseEvents::only_with(paths, has_usage_object))
        };
        Some(at)
    }

    /// Bytes held.
    pub(crate) fn buffered(&self) -> usize {
        match self {
            Framing::Unknown => 0,
            Framing::Json(scan) => scan.buffered(),
            Framing::Sse(sse) => sse.buffered(),
        }
    }
}

/// Reads the usage of one response as its body streams past.
///
/// ```
/// use tollgate::cost::{Api, UsageReader};
///
/// let mut reader = UsageReader::new(Api::AnthropicMessages);
/// reader.feed(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":");
/// reader.feed(b"{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n");
/// reader.feed(b"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n");
/// let usage = reader.finish().unwrap();
/// assert_eq!((usage.input, usage.output, usage.total), (25, 15, 40));
/// ```
#[derive(Debug)]
pub struct UsageReader {
    framing: Framing,
    tally: Tally,
}

impl UsageReader {
    /// A reader for a response of `api`.
    pub fn new(api: Api) -> UsageReader {
        UsageReader {
            framing: Framing::Unknown,
            tally: Tally::new(api),
        }
    }

    /// Reads the next piece of the body (the bytes are only looked at).
    pub fn feed(&mut self, chunk: &[u8]) {
        let Some(at) = self.framing.decide(chunk, &PATHS[..CHOICES]) else {
            return;
        };
        let mut rest = &chunk[at..];
        match &mut self.framing {
            Framing::Unknown => {}
            Framing::Json(scan) => scan.feed(rest),
            Framing::Sse(sse) => {
                while !rest.is_empty() {
                    let fed = sse.feed(rest);
                    if fed.ended {
                        self.tally.event(sse.scan());
                    }
                    rest = &rest[fed.consumed..];
                }
            }
        }
    }

    /// The body ended (or was cut short): the usage it reported, if any.
    /// An event that no blank line ended is still read.
    pub fn finish(mut self) -> Option<Usage> {
        match &mut self.framing {
            Framing::Unknown => {}
            Framing::Json(scan) => self.tally.body(scan),
            Framing::Sse(sse) => {
                if let Some(scan) = sse.unterminated() {
                    self.tally.event(scan);
                }
            }
        }
        self.tally.usage()
    }

    /// Bytes of the response this reader holds (at most a few KiB).
    pub fn buffered(&self) -> usize {
        self.framing.buffered()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures as fx;
    use super::*;
    use proptest::prelude::*;

    /// The usage of `body` fed in pieces cut at `cuts` (sorted, in range).
    fn read(api: Api, body: &[u8], cuts: &[usize]) -> Option<Usage> {
        let mut reader = UsageReader::new(api);
        let mut from = 0;
        for &cut in cuts.iter().chain([body.len()].iter()) {
            reader.feed(&body[from..cut]);
            from = cut;
        }
        reader.finish()
    }

    /// Every fixture, in each line ending, with the usage it reports.
    fn cases() -> Vec<(String, Api, Vec<u8>, Option<Usage>)> {
        let mut out = Vec::new();
        for (name, api, body, usage) in fx::all() {
            for (ending, text) in fx::line_endings(body) {
                out.push((format!("{name} ({ending})"), api, text, usage));
            }
        }
        out
    }

    #[test]
    fn every_fixture_read_whole_and_cut_at_every_byte() {
        for (name, api, body, want) in cases() {
            assert_eq!(read(api, &body, &[]), want, "{name} whole");
            for cut in 0..=body.len() {
                assert_eq!(read(api, &body, &[cut]), want, "{name} cut at {cut}");
            }
            let bytes: Vec<usize> = (1..body.len()).collect();
            assert_eq!(read(api, &body, &bytes), want, "{name} byte by byte");
        }
    }

    proptest! {
        #[test]
        fn any_cuts_give_the_same_usage(
            case in 0..cases().len(),
            raw_cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..24),
        ) {
            let (name, api, body, want) = cases().swap_remove(case);
            let mut cuts: Vec<usize> = raw_cuts.iter().map(|i| i.index(body.len() + 1)).collect();
            cuts.sort_unstable();
            prop_assert_eq!(read(api, &body, &cuts), want, "{} cut at {:?}", name, cuts);
        }
    }

    #[test]
    fn openai_chat_takes_the_last_chunk_with_a_usage() {
        let body =
            b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n\
            data: {\"choices\":[],\"usage\":null}\n\n\
            data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":9}}\n\n\
            data: {\"choices\":[],\"usage\":null}\n\ndata: [DONE]\n\n";
        assert_eq!(read(Api::OpenAiChat, body, &[]), Some(Usage::new(7, 9)));
        assert_eq!(
            read(Api::OpenAiCompletions, body, &[]),
            Some(Usage::new(7, 9))
        );
        // Another API's usage fields are not read.
        assert_eq!(read(Api::OpenAiResponses, body, &[]), None);
    }

    #[test]
    fn each_openai_api_reads_its_own_usage_names() {
        let chat = br#"{"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#;
        let responses = br#"{"usage":{"input_tokens":3,"output_tokens":4,"total_tokens":7}}"#;
        let embeddings = br#"{"usage":{"prompt_tokens":3,"total_tokens":3}}"#;
        let cases: &[(Api, &[u8], Option<Usage>)] = &[
            (Api::OpenAiChat, chat, Some(Usage::new(3, 4))),
            (Api::OpenAiChat, responses, None),
            (Api::OpenAiCompletions, chat, Some(Usage::new(3, 4))),
            (Api::OpenAiCompletions, responses, None),
            (Api::OpenAiResponses, responses, Some(Usage::new(3, 4))),
            (Api::OpenAiResponses, chat, None),
            (Api::OpenAiEmbeddings, embeddings, Some(Usage::new(3, 0))),
            (Api::OpenAiEmbeddings, chat, Some(Usage::new(3, 0))),
            (Api::OpenAiEmbeddings, responses, None),
        ];
        for (api, body, want) in cases {
            assert_eq!(
                read(*api, body, &[]),
                *want,
                "{api:?} {}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn openai_responses_reads_only_terminal_events() {
        let ev = |kind: &str, usage: &str| {
            format!("data: {{\"type\":\"{kind}\",\"response\":{{\"usage\":{usage}}}}}\n\n")
        };
        let u = r#"{"input_tokens":5,"output_tokens":6,"total_tokens":11}"#;
        for kind in [
            "response.completed",
            "response.incomplete",
            "response.failed",
        ] {
            let body = ev("response.created", "null") + &ev(kind, u);
            assert_eq!(
                read(Api::OpenAiResponses, body.as_bytes(), &[]),
                Some(Usage::new(5, 6)),
                "{kind}"
            );
        }
        let body = ev("response.in_progress", u);
        assert_eq!(read(Api::OpenAiResponses, body.as_bytes(), &[]), None);
    }

    #[test]
    fn anthropic_counts_cache_tokens_and_takes_delta_input_when_present() {
        let start = r#"data: {"type":"message_start","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":1}}}"#;
        let delta = |u: &str| format!("data: {{\"type\":\"message_delta\",\"usage\":{u}}}\n\n");
        let body = format!("{start}\n\n{}", delta(r#"{"output_tokens":4}"#));
        assert_eq!(
            read(Api::AnthropicMessages, body.as_bytes(), &[]),
            Some(Usage::new(1110, 4))
        );
        let body = format!(
            "{start}\n\n{}{}",
            delta(r#"{"output_tokens":4}"#),
            delta(r#"{"input_tokens":20,"cache_read_input_tokens":0,"output_tokens":9}"#)
        );
        assert_eq!(
            read(Api::AnthropicMessages, body.as_bytes(), &[]),
            Some(Usage::new(120, 9))
        );
        // No message_delta: the output is unknown.
        let body = format!("{start}\n\n");
        assert_eq!(read(Api::AnthropicMessages, body.as_bytes(), &[]), None);
        // No message_start: the input is unknown.
        assert_eq!(
            read(
                Api::AnthropicMessages,
                delta(r#"{"output_tokens":4}"#).as_bytes(),
                &[]
            ),
            None
        );
    }

    #[test]
    fn missing_malformed_or_cut_usage_is_none() {
        let cases: &[(Api, &[u8])] = &[
            (Api::OpenAiChat, b""),
            (Api::OpenAiChat, b"  \r\n "),
            (Api::OpenAiChat, b"{\"error\":{\"message\":\"overloaded\"}}"),
            (Api::OpenAiChat, b"{\"usage\":{\"prompt_tokens\":1}}"),
            (
                Api::OpenAiChat,
                b"{\"usage\":{\"prompt_tokens\":-1,\"completion_tokens\":2}}",
            ),
            (
                Api::OpenAiChat,
                b"{\"usage\":{\"prompt_tokens\":\"1\",\"completion_tokens\":2}}",
            ),
            (
                Api::OpenAiChat,
                b"{\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tok",
            ),
            (
                Api::OpenAiChat,
                b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"compl",
            ),
            (
                Api::OpenAiChat,
                b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n",
            ),
            (
                Api::AnthropicMessages,
                b"event: error\ndata: {\"type\":\"error\"}\n\n",
            ),
        ];
        for (api, body) in cases {
            assert_eq!(
                read(*api, body, &[]),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn an_unterminated_last_event_still_counts() {
        let body =
            b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}";
        assert_eq!(read(Api::OpenAiChat, body, &[]), Some(Usage::new(3, 4)));
    }

    #[test]
    fn only_a_usage_object_makes_an_event_worth_scanning() {
        for yes in [
            &br#"{"usage":{"prompt_tokens":1}}"#[..],
            br#"{"choices":[],"usage" : 
 {"a":1}}"#,
            br#"{"usage":null,"x":{"usage":{}}}"#,
        ] {
            assert!(has_usage_object(yes), "{}", String::from_utf8_lossy(yes));
        }
        for no in [
            &br#"{"choices":[{"delta":{"content":"hi"}}],"usage":null}"#[..],
            br#"{"usage""#,
            br#"{"usage":[1]}"#,
            b"",
        ] {
            assert!(!has_usage_object(no), "{}", String::from_utf8_lossy(no));
        }
    }

    #[test]
    fn a_huge_body_or_event_is_read_in_bounded_memory() {
        let text = "x".repeat(4 << 20);
        let json = format!(
            r#"{{"choices":[{{"message":{{"content":"{text}"}}}}],"usage":{{"prompt_tokens":8,"completion_tokens":1048576}}}}"#
        );
        let sse = format!(
            "data: {{\"type\":\"response.completed\",\"response\":{{\"output\":[{{\"text\":\"{text}\"}}],\"usage\":{{\"input_tokens\":8,\"output_tokens\":9}}}}}}\n\n"
        );
        let cases = [
            (Api::OpenAiChat, json, Usage::new(8, 1048576)),
            (Api::OpenAiResponses, sse, Usage::new(8, 9)),
        ];
        for (api, body, want) in cases {
            let mut reader = UsageReader::new(api);
            let mut most = 0;
            for piece in body.as_bytes().chunks(16 << 10) {
                reader.feed(piece);
                most = most.max(reader.buffered());
            }
            assert!(most <= 16 << 10, "held {most} bytes");
            assert_eq!(reader.finish(), Some(want));
        }
    }
}
