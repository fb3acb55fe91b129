//! A streaming reader of Server-Sent Events (the WHATWG `text/event-stream`
//! format) that streams each event's `data` into a [`JsonScan`] and says
//! where each event ends, holding at most one event's data (see below).
//!
//! Lines end with CRLF, LF or CR; a blank line ends an event; a line
//! starting with `:` is a comment; an event's `data` lines are joined with
//! LF (so JSON split over several `data:` lines reads as one document);
//! other fields (`event`, `id`, `retry`) are skipped: the APIs read here
//! repeat the event's type inside its data.
//!
//! A reader made with [`SseEvents::only_with`] a test scans only the
//! events whose data passes it: the data of an event is held (up to
//! [`DATA_HOLD_LIMIT`] bytes) and scanned at its end if the test says it may
//! hold a wanted value, so the content deltas that make up nearly all of
//! an LLM stream are only searched, not lexed (every value the usage
//! readers want is an object under a `"usage"` key, and OpenAI's other
//! chunks say `"usage":null`). An event longer than the limit streams
//! through the scanner as it comes.

use super::json_scan::{JsonScan, Path};

/// The most bytes of an event's data held before it is scanned (the
/// buffer's capacity included: see [`hold`]).
pub(crate) const DATA_HOLD_LIMIT: usize = 4096;

/// Adds `bytes` to `held`, which must stay within `limit` bytes: the
/// buffer grows by doubling, but never past `limit`, so its capacity
/// (what it costs) is bounded too.
pub(crate) fn hold(held: &mut Vec<u8>, bytes: &[u8], limit: usize) {
    let need = held.len() + bytes.len();
    debug_assert!(need <= limit);
    if need > held.capacity() {
        let cap = need.max(held.capacity() * 2).min(limit);
        held.reserve_exact(cap - held.len());
    }
    held.extend_from_slice(bytes);
}

/// The longest field name compared (`data`); longer names are skipped.
const NAME_LIMIT: usize = 4;

/// Where the reader is within a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// At the start of a line.
    Start,
    /// Reading the field name.
    Name,
    /// Just after the colon: one space is skipped.
    Colon,
    /// Reading the value (streamed to the scanner when `data`).
    Value,
}

/// What one [`SseEvents::feed`] call read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fed {
    /// Bytes of the input read (always at least one of a non-empty input).
    pub(crate) consumed: usize,
    /// Of those, how many at the start finished the previous event's last
    /// line ending (the LF of a CRLF whose CR ended that event): 0 or 1.
    pub(crate) lead: usize,
    /// An event ended with the last byte read: its data's captures are in
    /// [`SseEvents::scan`] until the next call.
    pub(crate) ended: bool,
}

/// The reader; see the module doc.
#[derive(Debug)]
pub(crate) struct SseEvents {
    line: Line,
    name: [u8; NAME_LIMIT],
    name_len: usize,
    /// The name fits in `name` (else it is no field read here).
    name_ok: bool,
    /// The last byte was a CR ending a line (a following LF is its pair).
    after_cr: bool,
    /// That CR ended an event.
    cr_ended_event: bool,
    /// `data` lines of the current event so far.
    data_lines: u32,
    /// The current event's data, scanned.
    scan: JsonScan,
    /// Scan only events whose data passes this (see the module doc).
    wanted: Option<fn(&[u8]) -> bool>,
    /// The current event's data not scanned yet.
    held: Vec<u8>,
    /// The current event outgrew [`DATA_HOLD_LIMIT`]: its data goes straight
    /// to the scanner.
    streaming: bool,
    /// The previous call ended an event: start a new one first.
    ended: bool,
}

impl SseEvents {
    /// A reader capturing `paths` of each event's data.
    pub(crate) fn new(paths: &'static [Path]) -> SseEvents {
        SseEvents {
            line: Line::Start,
            name: [0; NAME_LIMIT],
            name_len: 0,
            name_ok: true,
            after_cr: false,
            cr_ended_event: false,
            data_lines: 0,
            scan: JsonScan::new(paths),
            wanted: None,
            held: Vec::new(),
            streaming: false,
            ended: false,
        }
    }

    /// A reader capturing `paths` of the events whose data passes
    /// `wanted` (the others' captures are all absent). `wanted` must pass
    /// every data in which a path holds a value its reader uses.
    pub(crate) fn only_with(paths: &'static [Path], wanted: fn(&[u8]) -> bool) -> SseEvents {
        SseEvents {
            wanted: Some(wanted),
            ..SseEvents::new(paths)
        }
    }

    /// The scanned data of the current event (or of the one just ended).
    pub(crate) fn scan(&self) -> &JsonScan {
        &self.scan
    }

    /// At the end of the stream: the scanned data of the event a closing
    /// blank line never ended, if one had started.
    pub(crate) fn unterminated(&mut self) -> Option<&JsonScan> {
        if self.ended || self.data_lines == 0 {
            return None;
        }
        self.event_ends();
        Some(&self.scan)
    }

    /// Bytes of the stream held: the scanner's buffers and the current
    /// event's data not scanned yet.
    pub(crate) fn buffered(&self) -> usize {
        self.scan.buffered() + self.held.capacity()
    }

    /// Some of the current event's data.
    fn data(&mut self, bytes: &[u8]) {
        if self.streaming || self.wanted.is_none() {
            self.scan.feed(bytes);
        } else if self.held.len() + bytes.len() <= DATA_HOLD_LIMIT {
            hold(&mut self.held, bytes, DATA_HOLD_LIMIT);
        } else {
            self.streaming = true;
            self.scan.feed(&self.held);
            self.held.clear();
            self.scan.feed(bytes);
        }
    }

    /// The current event ended: its held data scanned if it passes the
    /// test.
    fn event_ends(&mut self) {
        let wanted = self.wanted.is_some_and(|f| f(&self.held));
        if !self.streaming && wanted {
            self.scan.feed(&self.held);
        }
        self.held.clear();
        self.streaming = false;
    }

    /// Reads `input` up to the end of the next event, or all of it.
    pub(crate) fn feed(&mut self, input: &[u8]) -> Fed {
        if self.ended {
            self.ended = false;
            self.data_lines = 0;
            self.scan.reset();
            self.held.clear();
            self.streaming = false;
        }
        let mut i = 0;
        let mut lead = 0;
        if self.after_cr && self.cr_ended_event && input.first() == Some(&b'\n') {
            self.after_cr = false;
            i = 1;
            lead = 1;
        }
        while i < input.len() {
            let b = input[i];
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    i += 1;
                    continue;
                }
            }
            if b == b'\r' || b == b'\n' {
                i += 1;
                self.after_cr = b == b'\r';
                let blank = self.line_ends();
                self.cr_ended_event = blank && self.after_cr;
                if blank {
                    if self.after_cr && input.get(i) == Some(&b'\n') {
                        self.after_cr = false;
                        i += 1;
                    }
                    self.event_ends();
                    self.ended = true;
                    return Fed {
                        consumed: i,
                        lead,
                        ended: true,
                    };
                }
                continue;
            }
            i += self.within_line(&input[i..]);
        }
        Fed {
            consumed: i,
            lead,
            ended: false,
        }
    }

    /// Reads bytes of a line up to (not including) its end; returns how
    /// many (at least one).
    fn within_line(&mut self, rest: &[u8]) -> usize {
        let b = rest[0];
        match self.line {
            Line::Start | Line::Name if b == b':' => {
                self.line = Line::Colon;
                1
            }
            Line::Start | Line::Name => {
                self.line = Line::Name;
                if self.name_len < NAME_LIMIT {
                    self.name[self.name_len] = b;
                    self.name_len += 1;
                } else {
                    self.name_ok = false;
                }
                1
            }
            Line::Colon => {
                self.line = Line::Value;
                self.data_starts();
                if b == b' ' {
                    1
                } else {
                    self.value(rest)
                }
            }
            Line::Value => self.value(rest),
        }
    }

    /// The value's bytes up to the line's end, streamed when `data`.
    fn value(&mut self, rest: &[u8]) -> usize {
        let n = memchr::memchr2(b'\r', b'\n', rest).unwrap_or(rest.len());
        if self.is_data() {
            self.data(&rest[..n]);
        }
        n
    }

    fn is_data(&self) -> bool {
        self.name_ok && &self.name[..self.name_len] == b"data"
    }

    /// A `data` value starts: later lines are joined with LF.
    fn data_starts(&mut self) {
        if self.is_data() {
            if self.data_lines > 0 {
                self.data(b"\n");
            }
            self.data_lines += 1;
        }
    }

    /// A line ended; returns whether it was blank (the event ends).
    fn line_ends(&mut self) -> bool {
        match self.line {
            Line::Start => return true,
            // A field without a colon: `data` alone is an empty data line.
            Line::Name => self.data_starts(),
            Line::Colon | Line::Value => {}
        }
        self.line = Line::Start;
        self.name_len = 0;
        self.name_ok = true;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATHS: &[Path] = &[&["n"]];

    /// Every event's captured `n` (as text, `-` when none), feeding `input`
    /// in pieces cut at `cuts`.
    fn events(input: &[u8], cuts: &[usize]) -> Vec<String> {
        events_of(SseEvents::new(PATHS), input, cuts)
    }

    /// [`events`] read by `sse`.
    fn events_of(mut sse: SseEvents, input: &[u8], cuts: &[usize]) -> Vec<String> {
        let mut out = Vec::new();
        let mut bounds = vec![0];
        bounds.extend(cuts.iter().copied());
        bounds.push(input.len());
        for w in bounds.windows(2) {
            let mut piece = &input[w[0]..w[1]];
            while !piece.is_empty() {
                let fed = sse.feed(piece);
                assert!(fed.consumed > 0);
                if fed.ended {
                    out.push(
                        sse.scan()
                            .value(0)
                            .map(|v| String::from_utf8(v.to_vec()).unwrap())
                            .unwrap_or_else(|| "-".into()),
                    );
                }
                piece = &piece[fed.consumed..];
            }
        }
        out
    }

    #[test]
    fn line_endings_comments_fields_and_multi_line_data() {
        let input = b": comment\r\nevent: x\r\ndata: {\"n\":1}\r\n\r\n\
            data:{\"n\"\ndata: :2}\n\n\
            id: 7\rdata: {\"n\":3}\r\r\
            data\ndata: {\"n\":4}\n\n\
            datax: {\"n\":5}\n\n\
            data: {\"n\":\"a\ndata: b\"}\n\n";
        let want = ["1", "2", "3", "4", "-", "\"a\nb\""];
        assert_eq!(events(input, &[]), want);
        for cut in 0..input.len() {
            assert_eq!(events(input, &[cut]), want, "cut at {cut}");
        }
    }

    #[test]
    fn the_lf_of_a_crlf_ending_an_event_is_reported_as_its_tail() {
        let mut sse = SseEvents::new(PATHS);
        let fed = sse.feed(b"data: {\"n\":1}\r\n\r");
        assert_eq!((fed.consumed, fed.lead, fed.ended), (16, 0, true));
        let fed = sse.feed(b"\ndata: x");
        assert_eq!((fed.consumed, fed.lead, fed.ended), (8, 1, false));
        assert!(sse.unterminated().is_some());
        // A CRLF inside an event is not a tail.
        let mut sse = SseEvents::new(PATHS);
        sse.feed(b"data: 1\r");
        assert_eq!(sse.feed(b"\n").lead, 0);
        // A CRLF in one piece is consumed with the event.
        let mut sse = SseEvents::new(PATHS);
        let fed = sse.feed(b"data: 1\r\n\r\ndata");
        assert_eq!((fed.consumed, fed.ended), (11, true));
    }

    #[test]
    fn only_events_that_pass_the_test_are_scanned_however_cut_or_long() {
        let long = "x".repeat(DATA_HOLD_LIMIT);
        let input = format!(
            "data: {{\"n\":1}}\n\ndata: {{\"n\":2,\"k\":0}}\n\n\
             data: {{\"t\":\"{long}\",\n\
             data: \"n\":3,\"k\":1}}\n\ndata: {{\"k\":2,\"n\":4}}\n\n"
        );
        let input = input.as_bytes();
        let want = ["-", "2", "3", "4"];
        let reader =
            || SseEvents::only_with(PATHS, |d| memchr::memmem::find(d, b"\"k\"").is_some());
        assert_eq!(events_of(reader(), input, &[]), want);
        for cut in (0..input.len()).step_by(7) {
            assert_eq!(events_of(reader(), input, &[cut]), want, "cut at {cut}");
        }
        // Held: at most the limit, however long the event.
        let mut sse = reader();
        sse.feed(input);
        assert!(sse.held.capacity() <= DATA_HOLD_LIMIT);
    }
}
