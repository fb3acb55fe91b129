//! A watcher of HTTP/1 request framing under hyper.
//!
//! hyper resolves a request that has both `Content-Length` and
//! `Transfer-Encoding` safely (chunked wins, the length is dropped from the
//! header map, the connection closes after it) but gives the service no way
//! to see that it happened, and docs/protocols.md wants such a request answered 400.
//! [`SniffIo`] reads the same bytes hyper reads, follows request heads and
//! body framing (Content-Length and chunked) just enough to find each head,
//! and records the number of the first head that carried both fields. The
//! pipeline compares it with the number of the request it is handling.
//!
//! It also tells the connection's watchdog when a head has begun to arrive
//! but is not complete yet ([`Framing::head_started`]), so `header_read`
//! runs from a head's first byte: hyper's own head timer would also run
//! while a keep-alive connection is idle.
//!
//! On the way out it notes when a write could not go through (the client
//! stopped reading, or its TCP window is shut) and clears that on the next
//! byte written, so the watchdog can close a connection whose writes make no
//! progress for `timeouts.send` ([`Framing::write_blocked`]).
//!
//! It never changes a byte and never blocks: on anything it does not
//! understand (an upgrade, a malformed head that hyper will reject anyway)
//! it stops watching; on the HTTP/2 preface it stops without losing track,
//! since HTTP/2 has no heads for it to time.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The longest chunk-size or trailer line followed before giving up (a
/// chunk-size line that long is a bad chunk).
const MAX_LINE: usize = 4096;

/// The largest chunk size any request may announce: 2^63 (docs/protocols.md), past
/// which sizes overflow the signed lengths some upstreams parse them into.
pub const MAX_CHUNK: u64 = 1 << 63;

/// What the sniffer tells the pipeline (the 1-based number of the first
/// request head with both Content-Length and Transfer-Encoding) and the
/// connection's watchdog (a head being received, since when).
#[derive(Debug)]
pub struct Framing {
    /// The first ambiguous head's number, 0 if none.
    first_ambiguous: AtomicU64,
    /// The number of the first request whose body had a bad chunk-size line
    /// (a size past the cap, or a line past [`MAX_LINE`]), 0 if none.
    first_bad_chunk: AtomicU64,
    /// While a head has partly arrived: when its first byte came, in
    /// milliseconds since `started`, plus one; 0 otherwise.
    head_started: AtomicU64,
    /// The watcher stopped following an HTTP/1 connection after its first
    /// head: it can no longer say when heads start.
    blind: AtomicBool,
    /// While a write is stuck: when it first could not go through, in
    /// milliseconds since `started`, plus one; 0 otherwise.
    write_blocked: AtomicU64,
    /// When the connection was accepted.
    started: Instant,
    /// Woken when a head starts to arrive or a write gets stuck (the
    /// watchdog's).
    on_change: OnceLock<Waker>,
}

impl Framing {
    /// The watch over a connection accepted at `started`.
    pub fn new(started: Instant) -> Framing {
        Framing {
            first_ambiguous: AtomicU64::new(0),
            first_bad_chunk: AtomicU64::new(0),
            head_started: AtomicU64::new(0),
            blind: AtomicBool::new(false),
            write_blocked: AtomicU64::new(0),
            started,
            on_change: OnceLock::new(),
        }
    }

    /// Whether request number `n` (1-based, in arrival order) had both fields.
    pub fn ambiguous(&self, n: u64) -> bool {
        n != 0 && self.first_ambiguous.load(Ordering::Relaxed) == n
    }

    /// Whether request number `n`'s chunked body announced a chunk larger
    /// than the connection's cap (`max_body_bytes`, at most [`MAX_CHUNK`]),
    /// or a chunk-size line too long to follow. Set as the bytes arrive,
    /// before hyper decodes them, so a body reader that asks after each
    /// frame never passes on a byte of such a chunk.
    pub fn bad_chunk(&self, n: u64) -> bool {
        n != 0 && self.first_bad_chunk.load(Ordering::Relaxed) == n
    }

    /// When the head being received began (milliseconds since the
    /// connection started), while one has partly arrived.
    pub fn head_started(&self) -> Option<u64> {
        self.head_started.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Whether the watcher stopped following this HTTP/1 connection after
    /// a head (so [`Framing::head_started`] says nothing any more).
    pub fn blind(&self) -> bool {
        self.blind.load(Ordering::Relaxed)
    }

    /// Since when (milliseconds since the connection started) writes have
    /// not gone through, while they are stuck.
    pub fn write_blocked(&self) -> Option<u64> {
        self.write_blocked.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Wake `waker` whenever a head starts to arrive or a write gets stuck.
    pub fn wake_on_change(&self, waker: Waker) {
        let _ = self.on_change.set(waker);
    }

    fn wake(&self) {
        if let Some(waker) = self.on_change.get() {
            waker.wake_by_ref();
        }
    }

    /// A write could not go through (or some did, after `Pending`s).
    fn wrote(&self, progress: bool) {
        let blocked = self.write_blocked.load(Ordering::Relaxed) != 0;
        if progress && blocked {
            self.write_blocked.store(0, Ordering::Relaxed);
        } else if !progress && !blocked {
            let ms = self.started.elapsed().as_millis() as u64;
            self.write_blocked.store(ms + 1, Ordering::Relaxed);
            self.wake();
        }
    }

    /// A head has begun to arrive and is not complete.
    fn head_begun(&self) {
        if self.head_started.load(Ordering::Relaxed) != 0 {
            return;
        }
        let ms = self.started.elapsed().as_millis() as u64;
        self.head_started.store(ms + 1, Ordering::Relaxed);
        self.wake();
    }

    /// The head being received is complete (or no longer followed).
    fn head_ended(&self) {
        if self.head_started.load(Ordering::Relaxed) != 0 {
            self.head_started.store(0, Ordering::Relaxed);
        }
    }
}

impl crate::body::ChunkWatch for Framing {
    fn bad_chunk(&self, n: u64) -> bool {
        Framing::bad_chunk(self, n)
    }
}

#[derive(Debug)]
enum State {
    /// Reading a request head (or the empty lines before one).
    Head,
    /// Skipping this many body bytes.
    Body(u64),
    /// Reading a chunk-size line.
    ChunkSize,
    /// Skipping this many chunk bytes.
    ChunkData(u64),
    /// Reading the CRLF after a chunk.
    ChunkEnd,
    /// Reading trailer lines up to the empty one.
    Trailers,
    /// Not watching any more.
    Done,
}

pin_project! {
    /// An IO that lets hyper read through it while following the framing.
    pub struct SniffIo<T> {
        #[pin]
        inner: T,
        state: State,
        line: Vec<u8>,
        heads: u64,
        max_head: usize,
        max_chunk: u64,
        framing: Arc<Framing>,
    }
}

impl<T> SniffIo<T> {
    /// Watch `inner`; heads longer than `max_head` end the watch (hyper
    /// answers those 431 itself); a chunk larger than `max_chunk` (capped
    /// at [`MAX_CHUNK`]) is a bad chunk.
    pub fn new(inner: T, max_head: usize, max_chunk: u64, framing: Arc<Framing>) -> Self {
        SniffIo {
            inner,
            state: State::Head,
            line: Vec::new(),
            heads: 0,
            max_head,
            max_chunk: max_chunk.min(MAX_CHUNK),
            framing,
        }
    }
}

/// The framing state machine, apart from the IO so it can be tested alone.
struct Machine<'a> {
    state: &'a mut State,
    line: &'a mut Vec<u8>,
    heads: &'a mut u64,
    max_head: usize,
    max_chunk: u64,
    framing: &'a Framing,
}

impl Machine<'_> {
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match *self.state {
                State::Done => return,
                State::Body(left) => {
                    let n = (bytes.len() as u64).min(left);
                    bytes = &bytes[n as usize..];
                    *self.state = if left == n {
                        State::Head
                    } else {
                        State::Body(left - n)
                    };
                }
                State::ChunkData(left) => {
                    let n = (bytes.len() as u64).min(left);
                    bytes = &bytes[n as usize..];
                    *self.state = if left == n {
                        State::ChunkEnd
                    } else {
                        State::ChunkData(left - n)
                    };
                }
                State::Head => bytes = self.head(bytes),
                State::ChunkSize | State::ChunkEnd | State::Trailers => bytes = self.lines(bytes),
            }
        }
    }

    /// Collect a head; returns what follows it.
    fn head<'b>(&mut self, bytes: &'b [u8]) -> &'b [u8] {
        // Empty lines before a request line are tolerated (RFC 9112 §2.2).
        let bytes = if self.line.is_empty() {
            let skip = bytes
                .iter()
                .take_while(|b| **b == b'\r' || **b == b'\n')
                .count();
            &bytes[skip..]
        } else {
            bytes
        };
        if bytes.is_empty() {
            return bytes;
        }
        if self.line.is_empty() {
            // The common case: the whole head arrived in one read. Read it
            // where it lies; only a head split across reads is copied.
            if let Some((end, head)) = Head::read(bytes) {
                *self.state = self.classify(&head);
                self.framing.head_ended();
                return &bytes[end..];
            }
        }
        let search_from = self.line.len().saturating_sub(3);
        self.line.extend_from_slice(bytes);
        let Some(end) = head_end(&self.line[search_from..]).map(|i| search_from + i) else {
            if self.line.len() > self.max_head {
                self.stop();
            } else {
                self.framing.head_begun();
            }
            return &[];
        };
        let consumed_here = end - (self.line.len() - bytes.len());
        let line = std::mem::take(self.line);
        let next = match Head::read(&line[..end]) {
            Some((_, head)) => self.classify(&head),
            None => State::Done,
        };
        // Keep the buffer's capacity for the next split head.
        *self.line = line;
        self.line.clear();
        *self.state = next;
        self.framing.head_ended();
        &bytes[consumed_here..]
    }

    /// Count a head and say what comes after it.
    fn classify(&mut self, head: &Head<'_>) -> State {
        if *self.heads == 0 && head.method == b"PRI" && head.target == b"*" {
            // The HTTP/2 preface (h2c with prior knowledge): no HTTP/1
            // heads follow, and HTTP/2 is timed by its streams.
            return State::Done;
        }
        *self.heads += 1;
        if head.has_cl && head.has_te {
            let _ = self.framing.first_ambiguous.compare_exchange(
                0,
                *self.heads,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        let upgrade = head.upgrade || head.method == b"CONNECT";
        if upgrade || (head.version != b"HTTP/1.1" && head.has_te) {
            // A tunnel follows, or hyper rejects the request: stop here.
            State::Done
        } else if head.has_te {
            if head.chunked {
                State::ChunkSize
            } else {
                State::Done
            }
        } else if !head.has_cl {
            State::Head
        } else {
            match head.length {
                Some(0) => State::Head,
                Some(n) => State::Body(n),
                None => State::Done,
            }
        }
    }

    /// Collect one chunk-size, chunk-end or trailer line; returns the rest.
    fn lines<'b>(&mut self, bytes: &'b [u8]) -> &'b [u8] {
        let Some(nl) = bytes.iter().position(|b| *b == b'\n') else {
            self.line.extend_from_slice(bytes);
            if self.line.len() > MAX_LINE {
                self.overlong_line();
            }
            return &[];
        };
        self.line.extend_from_slice(&bytes[..nl]);
        if self.line.len() > MAX_LINE {
            // As when the line comes in pieces, or where the watch stops
            // would depend on how the client cut its writes.
            self.overlong_line();
            return &[];
        }
        let line = self.line.strip_suffix(b"\r").unwrap_or(self.line);
        let next = match *self.state {
            State::ChunkSize => {
                let size = line.split(|b| *b == b';').next().unwrap_or_default();
                match std::str::from_utf8(size)
                    .ok()
                    .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
                {
                    Some(0) => State::Trailers,
                    Some(n) if n > self.max_chunk => {
                        self.bad_chunk();
                        State::Done
                    }
                    Some(n) => State::ChunkData(n),
                    None => State::Done,
                }
            }
            State::ChunkEnd if line.is_empty() => State::ChunkSize,
            State::Trailers if line.is_empty() => State::Head,
            State::Trailers => State::Trailers,
            _ => State::Done,
        };
        self.line.clear();
        *self.state = next;
        &bytes[nl + 1..]
    }

    /// A chunk-size or trailer line past [`MAX_LINE`]: a bad chunk if it is
    /// a size line; the watch stops either way.
    fn overlong_line(&mut self) {
        if matches!(self.state, State::ChunkSize) {
            self.bad_chunk();
        }
        self.stop();
    }

    /// The body of the last head has a bad chunk: say so, once.
    fn bad_chunk(&mut self) {
        let _ = self.framing.first_bad_chunk.compare_exchange(
            0,
            *self.heads,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    fn stop(&mut self) {
        *self.state = State::Done;
        *self.line = Vec::new();
        self.framing.head_ended();
        if *self.heads > 0 {
            self.framing.blind.store(true, Ordering::Relaxed);
        }
    }
}

/// Where a head ends: after its first empty line. A line may end in CRLF or
/// a bare LF, as httparse (so hyper) accepts both; looking for CRLFCRLF
/// alone merged a head that ends in `\n\r\n` or `\n\n` and came in pieces
/// with the requests after it (found by fuzz/, target h1_framing).
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'\n', &buf[from..]) {
        let nl = from + i;
        match &buf[nl + 1..] {
            [b'\n', ..] => return Some(nl + 2),
            [b'\r', b'\n', ..] => return Some(nl + 3),
            _ => from = nl + 1,
        }
    }
    None
}

/// What the watcher reads of a request head: the request line's three
/// parts, and the fields that frame the body or end HTTP/1.
///
/// Read line by line, without checking what hyper's parser (httparse)
/// checks: of a head httparse accepts, this reads the same request line
/// and the same fields (a line ends in LF, after an optional CR; the
/// request line is split at its spaces, a field line at its first `:`); a
/// head httparse refuses, hyper answers 400 and closes the connection, so
/// what the watcher makes of it does not matter. It replaces a second
/// httparse parse of every head: 1,412 -> 802 instructions a request
/// (callgrind).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Head<'a> {
    method: &'a [u8],
    target: &'a [u8],
    version: &'a [u8],
    /// A `Content-Length` field, and the last one's value as a number.
    has_cl: bool,
    length: Option<u64>,
    /// A `Transfer-Encoding` field, and whether the last one ends in `chunked`.
    has_te: bool,
    chunked: bool,
    /// An `Upgrade` field.
    upgrade: bool,
}

impl<'a> Head<'a> {
    /// The head `buf` starts with (not with an empty line), and where it
    /// ends, as [`head_end`] finds it; `None` until its empty line is in.
    fn read(buf: &'a [u8]) -> Option<(usize, Head<'a>)> {
        let mut start = 0;
        let mut head: Option<Head<'a>> = None;
        for nl in memchr::memchr_iter(b'\n', buf) {
            let line = &buf[start..nl];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            start = nl + 1;
            match head.as_mut() {
                None => head = Some(Head::request_line(line)),
                Some(_) if line.is_empty() => return head.map(|h| (start, h)),
                Some(head) => head.field(line),
            }
        }
        None
    }

    fn request_line(line: &'a [u8]) -> Head<'a> {
        let mut parts = line.splitn(3, |b| *b == b' ');
        Head {
            method: parts.next().unwrap_or_default(),
            target: parts.next().unwrap_or_default(),
            version: parts.next().unwrap_or_default(),
            ..Head::default()
        }
    }

    /// Note a field line. A field is named `content-length` (any case)
    /// exactly when its line starts with that and a `:` (the first colon
    /// ends the name), so no colon is searched for.
    fn field(&mut self, line: &[u8]) {
        let named = |name: &[u8]| {
            line.len() > name.len()
                && line[name.len()] == b':'
                && line[..name.len()].eq_ignore_ascii_case(name)
        };
        // Most fields are none of the three: their first byte tells.
        match line.first() {
            Some(b'c' | b'C') if named(b"content-length") => {
                self.has_cl = true;
                self.length = std::str::from_utf8(&line[15..])
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok());
            }
            Some(b't' | b'T') if named(b"transfer-encoding") => {
                self.has_te = true;
                self.chunked = line[18..]
                    .rsplit(|b| *b == b',')
                    .next()
                    .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            }
            Some(b'u' | b'U') if named(b"upgrade") => self.upgrade = true,
            _ => {}
        }
    }
}

impl<T: AsyncRead> AsyncRead for SniffIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let polled = this.inner.poll_read(cx, buf);
        if !matches!(this.state, State::Done) {
            let mut machine = Machine {
                state: this.state,
                line: this.line,
                heads: this.heads,
                max_head: *this.max_head,
                max_chunk: *this.max_chunk,
                framing: this.framing,
            };
            machine.feed(&buf.filled()[before..]);
        }
        polled
    }
}

impl<T: AsyncWrite> AsyncWrite for SniffIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let polled = this.inner.poll_write(cx, buf);
        this.framing.wrote(polled.is_ready());
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        let polled = this.inner.poll_flush(cx);
        this.framing.wrote(polled.is_ready());
        polled
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let polled = this.inner.poll_write_vectored(cx, bufs);
        this.framing.wrote(polled.is_ready());
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `stream` in pieces of `step` bytes, chunks capped at
    /// `max_chunk`; what the watcher saw.
    fn watch(stream: &[u8], step: usize, max_chunk: u64) -> Framing {
        let framing = Framing::new(Instant::now());
        let (mut state, mut line, mut heads) = (State::Head, Vec::new(), 0);
        let mut m = Machine {
            state: &mut state,
            line: &mut line,
            heads: &mut heads,
            max_head: 16384,
            max_chunk,
            framing: &framing,
        };
        for piece in stream.chunks(step) {
            m.feed(piece);
        }
        framing
    }

    /// Feed `stream` in pieces of `step` bytes; the first ambiguous head's number.
    fn run(stream: &[u8], step: usize) -> u64 {
        watch(stream, step, MAX_CHUNK)
            .first_ambiguous
            .load(Ordering::Relaxed)
    }

    /// What httparse reads of the head `head`, as a [`Head`]; `None` if it
    /// refuses it.
    fn by_httparse(head: &[u8]) -> Option<Head<'_>> {
        let mut fields = [httparse::EMPTY_HEADER; 128];
        let mut request = httparse::Request::new(&mut fields);
        let Ok(httparse::Status::Complete(end)) = request.parse(head) else {
            return None;
        };
        assert_eq!(end, head.len(), "the same end");
        let version: &[u8] = match request.version? {
            0 => b"HTTP/1.0",
            _ => b"HTTP/1.1",
        };
        let mut read = Head {
            method: request.method?.as_bytes(),
            target: request.path?.as_bytes(),
            version,
            ..Head::default()
        };
        for h in request.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                read.has_cl = true;
                read.length = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok());
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                read.has_te = true;
                read.chunked = h
                    .value
                    .rsplit(|b| *b == b',')
                    .next()
                    .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            } else if h.name.eq_ignore_ascii_case("upgrade") {
                read.upgrade = true;
            }
        }
        Some(read)
    }

    #[test]
    fn heads_httparse_accepts_are_read_as_httparse_reads_them() {
        let heads: &[&[u8]] = &[
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET /x?y=1 HTTP/1.0\nhost: a:80\nuser-agent: u\ncookie: c=1\n\n",
            b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length:  5 \r\nTE: trailers\r\n\r\n",
            b"POST /a HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\nconnection: x\r\n\r\n",
            b"POST /a HTTP/1.1\r\nTRANSFER-ENCODING: chunked, gzip\r\n\r\n",
            b"POST /a HTTP/1.0\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n",
            b"POST /a HTTP/1.1\r\ncontent-length: 3\r\nContent-Length: x\r\n\r\n",
            b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
            b"GET / HTTP/1.1\r\nX-A:\tb: c\t\r\nContent-Type: t\r\nupgrade-insecure-requests: 1\r\n\n",
            b"GET / HTTP/1.1\r\nHost: a\n\r\n",
        ];
        for head in heads {
            let end = head_end(head).expect("a whole head");
            assert_eq!(end, head.len());
            let expected = by_httparse(head).expect("httparse accepts it");
            let with_more = [*head, b"GET / HTTP/1.1\r\n".as_slice()].concat();
            for buf in [*head, &with_more] {
                let read = Head::read(buf);
                let text = String::from_utf8_lossy(head);
                assert_eq!(read, Some((end, expected.clone())), "{text}");
            }
            assert_eq!(Head::read(&head[..end - 1]), None);
        }
    }

    #[test]
    fn chunks_past_the_cap_or_2_pow_63_and_overlong_size_lines_are_bad() {
        let second = |size: &str| {
            format!(
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n{size}\r\nabc"
            )
        };
        let bad = |stream: &str, cap: u64| {
            [1, 5, stream.len()].map(|step| {
                watch(stream.as_bytes(), step, cap)
                    .first_bad_chunk
                    .load(Ordering::Relaxed)
            })
        };
        assert_eq!(bad(&second("ffffffffffffffff"), MAX_CHUNK), [2; 3]);
        assert_eq!(bad(&second("8000000000000001"), MAX_CHUNK), [2; 3]);
        assert_eq!(bad(&second("8000000000000000;x=1"), MAX_CHUNK), [0; 3]);
        assert_eq!(bad(&second("401"), 1024), [2; 3]);
        assert_eq!(bad(&second("400"), 1024), [0; 3]);
        let long = format!("3;{}", "x".repeat(MAX_LINE + 1));
        assert_eq!(bad(&second(&long), MAX_CHUNK), [2; 3]);
    }

    #[test]
    fn the_http2_preface_is_no_head() {
        let framing = watch(
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04",
            7,
            MAX_CHUNK,
        );
        assert!(!framing.blind(), "HTTP/2 keeps its idle timeout");
        assert_eq!(framing.head_started(), None);
    }

    #[test]
    fn finds_the_ambiguous_head_after_bodies_of_both_framings() {
        let stream = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n\
POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello\
POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhe\r\n\r\r\n3\r\nabc\r\n0\r\nx-t: 1\r\n\r\n\
POST /c HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        for step in [1, 2, 3, 7, 64, stream.len()] {
            assert_eq!(run(stream, step), 4, "step {step}");
        }
    }

    #[test]
    fn a_body_that_looks_like_a_head_is_skipped() {
        let decoy = "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let stream = format!(
            "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n{decoy}GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            decoy.len()
        );
        assert_eq!(run(stream.as_bytes(), 5), 0);
        assert_eq!(run(decoy.as_bytes(), 5), 1);
    }

    #[test]
    fn te_before_cl_counts_too_and_clean_streams_report_nothing() {
        assert_eq!(
            run(
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
                4
            ),
            1
        );
        assert_eq!(
            run(
                b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
                3
            ),
            0
        );
    }
}
