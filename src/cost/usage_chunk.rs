//! `stream_usage: force`: when the gateway added
//! `stream_options.include_usage` to a streaming OpenAI chat or legacy
//! completions request, the
//! upstream's answer carries one chunk the client did not ask for, a
//! `data:` event whose `choices` is `[]` and whose `usage` is an object.
//! [`UsageChunkFilter`] removes that event (and only that one) from what
//! the client receives, and reads the usage as [`UsageReader`] would.
//!
//! Every other byte passes unchanged, event by event: an event is held
//! only until the blank line that ends it (or until it outgrows
//! [`HOLD_LIMIT`], when it cannot be the small usage-only chunk and the
//! rest of it passes as it comes). The other chunks keep the `"usage":
//! null` field OpenAI adds to every chunk of such a stream; a client
//! ignores a null field it does not know. A body that turns out to be
//! JSON (an error, or an upstream that ignored `stream`) passes untouched.
//!
//! [`UsageReader`]: super::usage::UsageReader

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use super::api::Api;
use super::json_scan::CAPTURE_LIMIT;
use super::sse::{hold, DATA_HOLD_LIMIT};
use super::usage::{is_usage_only_chunk, Framing, Tally, Usage, PATHS};

/// The most bytes of one event held back; with the scanner's captures
/// (at most 2 KiB each, and one more being copied) and the event's data
/// held for the usage test (`sse`), a response holds at most 64 KiB.
pub const HOLD_LIMIT: usize = 48 * 1024;
const _: () =
    assert!(HOLD_LIMIT + DATA_HOLD_LIMIT + (PATHS.len() + 1) * CAPTURE_LIMIT <= 64 * 1024);

/// Removes the usage-only chunk from a streamed OpenAI chat (or legacy)
/// completion and reads the usage; made to sit in a response body wrapper: each data
/// frame goes through [`push`](Self::push), the end of the body through
/// [`finish`](Self::finish), and what they return goes to the client.
///
/// ```
/// use bytes::Bytes;
/// use tollgate::cost::UsageChunkFilter;
///
/// let mut filter = UsageChunkFilter::new();
/// let mut to_client = Vec::new();
/// for piece in [
///     &b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n"[..],
///     b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"compl",
///     b"etion_tokens\":2,\"total_tokens\":11}}\n\ndata: [DONE]\n\n",
/// ] {
///     to_client.extend_from_slice(&filter.push(Bytes::copy_from_slice(piece)));
/// }
/// to_client.extend_from_slice(&filter.finish());
/// assert_eq!(
///     to_client,
///     b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\ndata: [DONE]\n\n"
/// );
/// assert_eq!(filter.usage().map(|u| u.total), Some(11));
/// ```
#[derive(Debug)]
pub struct UsageChunkFilter {
    framing: Framing,
    tally: Tally,
    /// The current event's bytes so far (capacity at most [`HOLD_LIMIT`]).
    held: Vec<u8>,
    /// The current event outgrew [`HOLD_LIMIT`]: the rest of it passes.
    overflowed: bool,
    /// The last event that ended was removed (with the LF that may still
    /// finish its CRLF).
    removed_last: bool,
    removed: u64,
}

impl Default for UsageChunkFilter {
    fn default() -> Self {
        UsageChunkFilter::new()
    }
}

impl UsageChunkFilter {
    /// A filter for one response.
    pub fn new() -> UsageChunkFilter {
        UsageChunkFilter {
            framing: Framing::Unknown,
            // Chat and legacy completions chunks name their usage alike.
            tally: Tally::new(Api::OpenAiChat),
            held: Vec::new(),
            overflowed: false,
            removed_last: false,
            removed: 0,
        }
    }

    /// The next piece of the upstream's body; returns what may go to the
    /// client now (possibly empty: part of an event not yet ended).
    pub fn push(&mut self, chunk: Bytes) -> Bytes {
        let Some(at) = self.framing.decide(&chunk, PATHS) else {
            return chunk;
        };
        let sse = match &mut self.framing {
            Framing::Sse(sse) => sse,
            Framing::Json(scan) => {
                scan.feed(&chunk[at..]);
                return chunk;
            }
            Framing::Unknown => return chunk,
        };
        let mut out = Out::new(&chunk);
        out.range(0..at);
        let mut i = at;
        while i < chunk.len() {
            let fed = sse.feed(&chunk[i..]);
            if fed.lead > 0 && !self.removed_last {
                out.range(i..i + fed.lead);
            }
            let event = i + fed.lead..i + fed.consumed;
            i += fed.consumed;
            if fed.ended {
                let remove = !self.overflowed && is_usage_only_chunk(sse.scan());
                self.tally.event(sse.scan());
                if remove {
                    self.removed += 1;
                    self.held.clear();
                } else {
                    out.bytes(&self.held);
                    self.held.clear();
                    out.range(event);
                }
                self.removed_last = remove;
                self.overflowed = false;
            } else if self.overflowed {
                out.range(event);
            } else if self.held.len() + event.len() > HOLD_LIMIT {
                out.bytes(&self.held);
                self.held = Vec::new();
                out.range(event);
                self.overflowed = true;
            } else {
                hold(&mut self.held, &chunk[event], HOLD_LIMIT);
            }
        }
        out.finish()
    }

    /// The upstream's body ended (or was cut short): returns the bytes
    /// still held, unless they are the usage-only chunk that no blank line
    /// ended.
    pub fn finish(&mut self) -> Bytes {
        let held = Bytes::from(std::mem::take(&mut self.held));
        match &mut self.framing {
            Framing::Unknown => held,
            Framing::Json(scan) => {
                self.tally.body(scan);
                held
            }
            Framing::Sse(sse) => match sse.unterminated() {
                Some(scan) => {
                    let remove = !self.overflowed && is_usage_only_chunk(scan);
                    self.tally.event(scan);
                    if remove {
                        self.removed += 1;
                        Bytes::new()
                    } else {
                        held
                    }
                }
                None => held,
            },
        }
    }

    /// The usage the response reported (complete once
    /// [`finish`](Self::finish) was called).
    pub fn usage(&self) -> Option<Usage> {
        self.tally.usage()
    }

    /// How many usage-only chunks were removed.
    pub fn removed(&self) -> u64 {
        self.removed
    }

    /// Bytes of the response held now (at most 64 KiB).
    pub fn buffered(&self) -> usize {
        self.held.capacity() + self.framing.buffered()
    }
}

/// What one [`UsageChunkFilter::push`] returns: ranges of the chunk (kept
/// as a slice of it while they are one run) and held bytes.
struct Out<'a> {
    chunk: &'a Bytes,
    run: Range<usize>,
    copied: Option<BytesMut>,
}

impl<'a> Out<'a> {
    fn new(chunk: &'a Bytes) -> Out<'a> {
        Out {
            chunk,
            run: 0..0,
            copied: None,
        }
    }

    fn range(&mut self, r: Range<usize>) {
        if r.is_empty() {
            return;
        }
        match &mut self.copied {
            Some(buf) => buf.extend_from_slice(&self.chunk[r]),
            None if self.run.is_empty() => self.run = r,
            None if self.run.end == r.start => self.run.end = r.end,
            None => {
                let mut buf = BytesMut::from(&self.chunk[self.run.clone()]);
                buf.extend_from_slice(&self.chunk[r]);
                self.copied = Some(buf);
            }
        }
    }

    fn bytes(&mut self, b: &[u8]) {
        if b.is_empty() {
            return;
        }
        let buf = self
            .copied
            .get_or_insert_with(|| BytesMut::from(&self.chunk[self.run.clone()]));
        buf.extend_from_slice(b);
    }

    fn finish(self) -> Bytes {
        match self.copied {
            Some(buf) => buf.freeze(),
            None => self.chunk.slice(self.run),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures as fx;
    use super::*;
    use proptest::prelude::*;

    /// What the client gets from `body` cut at `cuts`, and the usage read.
    fn run(body: &[u8], cuts: &[usize]) -> (Vec<u8>, Option<Usage>, u64) {
        let mut filter = UsageChunkFilter::new();
        let mut out = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain([body.len()].iter()) {
            out.extend_from_slice(&filter.push(Bytes::copy_from_slice(&body[from..cut])));
            assert!(filter.buffered() <= 64 << 10);
            from = cut;
        }
        out.extend_from_slice(&filter.finish());
        (out, filter.usage(), filter.removed())
    }

    /// An upstream body, what the client must get of it, and its usage.
    struct Case {
        name: String,
        input: Vec<u8>,
        want: Vec<u8>,
        usage: Option<Usage>,
    }

    /// Every case, in every line ending.
    fn cases() -> Vec<Case> {
        let without = fx::chat_stream_without_usage_chunk();
        let mut out = Vec::new();
        let pairs = [
            (
                "with usage",
                fx::CHAT_STREAM_WITH_USAGE,
                without.as_str(),
                Some(Usage::new(19, 10)),
            ),
            (
                "no usage",
                fx::CHAT_STREAM_NO_USAGE,
                fx::CHAT_STREAM_NO_USAGE,
                None,
            ),
            (
                "json",
                fx::CHAT_JSON,
                fx::CHAT_JSON,
                Some(Usage::new(19, 10)),
            ),
        ];
        for (name, input, want, usage) in pairs {
            let inputs = fx::line_endings(input);
            let wants = fx::line_endings(want);
            for ((ending, i), (_, w)) in inputs.into_iter().zip(wants) {
                out.push(Case {
                    name: format!("{name} ({ending})"),
                    input: i,
                    want: w,
                    usage,
                });
            }
        }
        out
    }

    #[test]
    fn removes_only_the_usage_chunk_cut_anywhere() {
        for Case {
            name,
            input,
            want,
            usage,
        } in cases()
        {
            let removed = u64::from(input != want);
            assert_eq!(run(&input, &[]), (want.clone(), usage, removed), "{name}");
            for cut in 0..=input.len() {
                let got = run(&input, &[cut]);
                assert_eq!(got, (want.clone(), usage, removed), "{name} cut at {cut}");
            }
            let bytes: Vec<usize> = (1..input.len()).collect();
            assert_eq!(
                run(&input, &bytes),
                (want, usage, removed),
                "{name} byte by byte"
            );
        }
    }

    proptest! {
        #[test]
        fn any_cuts_pass_every_other_byte(
            case in 0..cases().len(),
            raw_cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..24),
        ) {
            let Case { name, input, want, usage } = cases().swap_remove(case);
            let mut cuts: Vec<usize> = raw_cuts.iter().map(|i| i.index(input.len() + 1)).collect();
            cuts.sort_unstable();
            let (out, got, _) = run(&input, &cuts);
            prop_assert_eq!(out, want, "{} cut at {:?}", name, cuts);
            prop_assert_eq!(got, usage);
        }
    }

    #[test]
    fn events_pass_as_soon_as_they_end() {
        let mut filter = UsageChunkFilter::new();
        let first = Bytes::from_static(
            b": keep-alive\n\ndata: {\"choices\":[{\"index\":0}]}\n\ndata: {\"cho",
        );
        let out = filter.push(first.clone());
        assert_eq!(&out[..], &first[..first.len() - 11]);
        // A whole chunk of whole events is the chunk itself, not a copy.
        assert_eq!(out.as_ptr(), first.as_ptr());
        let out = filter.push(Bytes::from_static(b"ices\":[{\"index\":0}]}\r\n\r"));
        assert_eq!(&out[..], b"data: {\"choices\":[{\"index\":0}]}\r\n\r");
        assert_eq!(
            &filter.push(Bytes::from_static(b"\ndata: [DONE]\n\n"))[..],
            b"\ndata: [DONE]\n\n"
        );
    }

    #[test]
    fn a_removed_events_crlf_tail_goes_with_it() {
        let mut filter = UsageChunkFilter::new();
        let usage =
            b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\r\n\r";
        assert!(filter.push(Bytes::copy_from_slice(usage)).is_empty());
        assert_eq!(
            &filter.push(Bytes::from_static(b"\ndata: [DONE]\r\n\r\n"))[..],
            b"data: [DONE]\r\n\r\n"
        );
        assert_eq!(filter.removed(), 1);
    }

    #[test]
    fn chunks_that_are_not_usage_only_stay() {
        for event in [
            // Usage on a chunk with choices (servers that report it on every chunk).
            &b"data: {\"choices\":[{\"index\":0}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n"[..],
            // No choices but no usage: a moderation chunk.
            b"data: {\"choices\":[],\"usage\":null,\"moderation\":{}}\n\n",
            b"data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n",
            b"event: error\ndata: {\"error\":{\"message\":\"overloaded\"}}\n\n",
        ] {
            assert_eq!(run(event, &[]).0, event, "{}", String::from_utf8_lossy(event));
        }
        // `choices: [ ]` with blanks is still empty.
        let spaced = b"data: {\"choices\": [ ], \"usage\": {\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n";
        assert_eq!(run(spaced, &[]), (Vec::new(), Some(Usage::new(1, 2)), 1));
    }

    #[test]
    fn an_event_larger_than_the_hold_limit_passes_as_it_comes() {
        let content = "y".repeat(2 * HOLD_LIMIT);
        let event =
            format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{content}\"}}}}]}}\n\n");
        let mut filter = UsageChunkFilter::new();
        let (mut sent, mut out) = (0, Vec::new());
        for piece in event.as_bytes().chunks(4096) {
            sent += piece.len();
            out.extend_from_slice(&filter.push(Bytes::copy_from_slice(piece)));
            assert!(sent - out.len() <= HOLD_LIMIT, "held {}", sent - out.len());
            assert!(filter.buffered() <= 64 << 10, "held {}", filter.buffered());
        }
        assert!(filter.finish().is_empty());
        assert_eq!(out, event.as_bytes());
    }

    #[test]
    fn an_unterminated_usage_chunk_at_the_end_is_removed_and_read() {
        let body = b"data: [DONE]\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":5}}";
        assert_eq!(
            run(body, &[]),
            (b"data: [DONE]\n\n".to_vec(), Some(Usage::new(4, 5)), 1)
        );
        let cut = b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"comp";
        assert_eq!(run(cut, &[]), (cut.to_vec(), None, 0));
    }
}
