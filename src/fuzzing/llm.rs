//! The LLM targets: what a cost limit reads from request and response
//! bodies (`crate::cost`), which the client and the upstream write.

use bytes::Bytes;

use super::Lines;
use crate::cost::{Api, LlmRequest, Rewrite, UsageChunkFilter, UsageReader};

/// The most a usage reader may hold of a response at any time: one
/// event's data for the usage test (4 KiB) and the scanner's captures.
const READER_HELD_AT_MOST: usize = 16 << 10;

/// The most the usage-chunk filter may hold: the 64 KiB that
/// docs/configuration/cost.md promises for a response.
const FILTER_HELD_AT_MOST: usize = 64 << 10;

/// The API a first line names (`openai_chat`, `openai_completions`,
/// `openai_responses`, `openai_embeddings`, `anthropic`); anything else is
/// chat.
fn api(line: &[u8]) -> Api {
    match line.trim_ascii() {
        b"anthropic" => Api::AnthropicMessages,
        b"openai_completions" => Api::OpenAiCompletions,
        b"openai_responses" | b"openai" => Api::OpenAiResponses,
        b"openai_embeddings" => Api::OpenAiEmbeddings,
        _ => Api::OpenAiChat,
    }
}

/// The rest of the input after `lines` took its lines.
fn rest(data: &[u8], lines_taken: usize) -> &[u8] {
    let mut at = 0;
    for _ in 0..lines_taken {
        match data[at..].iter().position(|&b| b == b'\n') {
            Some(i) => at += i + 1,
            None => return &[],
        }
    }
    &data[at..]
}

/// `llm_request`: line 1 the API (as `cost.llm.api` names a fixed one), the
/// rest a request body. Reading it never panics, and it reads no body that is not
/// UTF-8; a body it reads is rewritten
/// (each of `cap_output` and `stream_usage: force`, alone and together)
/// into a body that reads again as the same request, whose max output is
/// the reserved amount when `cap_output` asked for it, and which asks for
/// the usage when the rewrite says it added that; a rewrite that changes
/// nothing leaves the bytes as they were.
pub fn llm_request(data: &[u8]) {
    let api = api(Lines::new(data).bytes());
    let body = Bytes::copy_from_slice(rest(data, 1));
    let Ok(req) = LlmRequest::parse(api, &body, 1, 1024) else {
        return;
    };
    assert!(
        std::str::from_utf8(&body).is_ok(),
        "read a body that is not UTF-8"
    );
    assert!(req.estimate() >= req.prompt_estimate());
    assert_eq!(
        req.output_reserved(),
        req.output_cap().saturating_mul(req.choices())
    );
    if api == Api::OpenAiEmbeddings {
        assert_eq!(req.output_reserved(), 0, "embeddings reserved an output");
    }
    for (cap_output, force_stream_usage) in
        [(false, false), (true, false), (false, true), (true, true)]
    {
        let rewrite = Rewrite {
            cap_output,
            force_stream_usage,
        };
        let out = req.rewrite(&body, rewrite);
        let again = LlmRequest::parse(api, &out.body, 1, 1024)
            .unwrap_or_else(|e| panic!("the rewritten body does not read: {}", e.reason()));
        assert_eq!(again.model(), req.model());
        assert_eq!(again.api(), req.api());
        assert_eq!(again.stream(), req.stream());
        assert_eq!(again.choices(), req.choices());
        if cap_output && api != Api::OpenAiEmbeddings {
            assert_eq!(again.max_output(), Some(req.output_cap()));
        } else {
            assert_eq!(again.max_output(), req.max_output());
        }
        if out.usage_added {
            assert!(again.include_usage() && !req.include_usage());
        }
        if api == Api::OpenAiEmbeddings {
            assert_eq!(out.body, body, "an embeddings request was rewritten");
        }
        if !cap_output && !force_stream_usage {
            assert_eq!(
                out.body, body,
                "a rewrite asked for nothing changed the body"
            );
        }
        if is_json_object(&body) {
            assert!(is_json_object(&out.body), "the rewrite is not JSON");
        }
    }
}

/// Whether `bytes` are a JSON object, as serde_json reads one.
fn is_json_object(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(bytes).is_ok_and(|v| v.is_object())
}

/// `llm_stream`: line 1 the API, line 2 where to cut the body into pieces
/// (byte offsets, comma-separated), the rest a response body. The usage a
/// [`UsageReader`] reads, and what a [`UsageChunkFilter`] passes and reads
/// (OpenAI), do not depend on where the body was cut; the reader never
/// holds more than [`READER_HELD_AT_MOST`], the filter never more than
/// [`FILTER_HELD_AT_MOST`]; a filter that removed nothing passed every
/// byte, in order, and one that removed a chunk passed fewer.
pub fn llm_stream(data: &[u8]) {
    let mut lines = Lines::new(data);
    let api = api(lines.bytes());
    let cuts_line = lines.text();
    let body = rest(data, 2);
    let mut cuts: Vec<usize> = cuts_line
        .split(',')
        .filter_map(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c <= body.len())
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let pieces = pieces(body, &cuts);

    let mut whole = UsageReader::new(api);
    whole.feed(body);
    let mut cut = UsageReader::new(api);
    for piece in &pieces {
        cut.feed(piece);
        assert!(
            cut.buffered() <= READER_HELD_AT_MOST,
            "held {}",
            cut.buffered()
        );
    }
    assert_eq!(
        whole.finish(),
        cut.finish(),
        "the usage depends on the cuts"
    );

    if !api.has_stream_options() {
        return;
    }
    let filter = |pieces: &[&[u8]]| {
        let mut f = UsageChunkFilter::new();
        let mut out = Vec::new();
        for piece in pieces {
            out.extend_from_slice(&f.push(Bytes::copy_from_slice(piece)));
            assert!(f.buffered() <= FILTER_HELD_AT_MOST, "held {}", f.buffered());
        }
        out.extend_from_slice(&f.finish());
        (out, f.usage(), f.removed())
    };
    let (out, usage, removed) = filter(&[body]);
    assert_eq!(
        (out.clone(), usage, removed),
        filter(&pieces),
        "the filter depends on the cuts"
    );
    if removed == 0 {
        assert_eq!(out, body, "nothing removed, yet the bytes changed");
    } else {
        assert!(out.len() < body.len());
    }
}

/// `body` cut at `cuts` (sorted, within it).
fn pieces<'a>(body: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut from = 0;
    for &c in cuts {
        out.push(&body[from..c]);
        from = c;
    }
    out.push(&body[from..]);
    out
}
