//! The body types the gateway sends and receives.
//!
//! Everything the gateway answers is a [`Body`]: a boxed stream of `Bytes`
//! frames, so generated responses, upstream responses and error pages share
//! one type. Request bodies going upstream are wrapped in [`UpstreamBody`],
//! which lets a request whose body was never read be retried on another
//! target, and remembers whether the *client* broke its own body (a bad
//! chunk, or more than `max_body_bytes` of a streamed body), so that failure
//! is answered 400 or 413 rather than blamed on the upstream. A client's body
//! is read through [`ClientBody`], which holds it to `timeouts.body_read`
//! and fails it at a chunk the framing watcher found too large.

use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName};
use http_body::{Frame, SizeHint};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Empty, Full};
use tokio::time::{Instant, Sleep};

/// The error type carried by every body.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response or request body: a boxed stream of byte frames.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// A body holding `bytes` whole.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// Box any body whose error converts into [`BoxError`].
pub fn boxed<B>(body: B) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// A request body on its way upstream.
///
/// The body sits in a shared slot until the upstream connection first asks
/// for a frame. If an attempt fails before that (the connection was refused),
/// [`RetrySlot::take_back`] recovers the untouched body for the next target:
/// "retried only when no byte was sent" without buffering anything.
/// A body that has ended before it starts (a GET's) needs no slot: it is
/// never read (hyper sends an ended body as no body), and any attempt can
/// send it again.
pub struct UpstreamBody {
    /// The body's slot, shared with the [`RetrySlot`]; `None` for an ended body.
    slot: Option<Arc<Slot>>,
    inner: Option<Body>,
    hint: SizeHint,
    end: bool,
}

/// What an [`UpstreamBody`] and its [`RetrySlot`] share: the body until the
/// first read, and how the client's body failed.
struct Slot {
    body: Mutex<Option<Body>>,
    fault: AtomicU8,
}

/// How the client's own request body failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFault {
    /// A bad chunk, an early close: the body is broken.
    Broken,
    /// It went past `max_body_bytes` while streaming
    /// ([`http_body_util::LengthLimitError`]).
    TooLarge,
    /// It stalled for `timeouts.body_read` ([`ClientBodyError::Stalled`]).
    TimedOut,
}

/// [`UpstreamBody::fault`]'s values: none yet, then a [`ClientFault`].
const NO_FAULT: u8 = 0;
const BROKEN: u8 = 1;
const TOO_LARGE: u8 = 2;
const TIMED_OUT: u8 = 3;

/// How a [`ClientBody`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClientBodyError {
    /// No frame came for `timeouts.body_read`.
    #[error("no request body bytes within timeouts.body_read")]
    Stalled,
    /// A chunk-size line announced more than allowed (docs/protocols.md).
    #[error("a chunk larger than the gateway accepts")]
    BadChunk,
}

impl ClientBodyError {
    /// What `error` (a body's) says about the client: the fault of a
    /// [`ClientBody`] or of a [`http_body_util::Limited`] body, if it is one.
    pub fn fault_of(error: &BoxError) -> Option<ClientFault> {
        if error.is::<http_body_util::LengthLimitError>() {
            return Some(ClientFault::TooLarge);
        }
        match error.downcast_ref::<ClientBodyError>()? {
            ClientBodyError::Stalled => Some(ClientFault::TimedOut),
            ClientBodyError::BadChunk => Some(ClientFault::Broken),
        }
    }
}

/// What watches an HTTP/1 connection's chunk sizes (the server's framing
/// watcher): whether request `n`'s body had a bad chunk-size line.
pub trait ChunkWatch: Send + Sync {
    /// Whether request number `n` (1-based) announced a bad chunk.
    fn bad_chunk(&self, n: u64) -> bool;
}

/// A client's request body as the gateway reads it (docs/protocols.md): a reader that
/// waits longer than `body_read` for the next frame gets
/// [`ClientBodyError::Stalled`], and an HTTP/1 body whose framing watcher
/// saw a bad chunk-size line gets [`ClientBodyError::BadChunk`] before any
/// byte of that chunk. The wait is timed only while the body is polled and
/// has nothing, so an upstream that reads slowly is not blamed on the
/// client; its timer is made on the first wait and reused.
pub struct ClientBody<B> {
    inner: B,
    body_read: Duration,
    /// The wait timer; armed while a wait is going on.
    stall: Option<Pin<Box<Sleep>>>,
    armed: bool,
    /// The connection's framing watcher and this request's number on it
    /// (HTTP/1).
    chunks: Option<(Arc<dyn ChunkWatch>, u64)>,
    /// What the request's trailers lose before they are forwarded.
    scrub: Option<TrailerScrub>,
}

/// Removes from a request's trailers the fields that may not reach an
/// upstream from a client (the runtime's, see
/// `proxy::headers::scrub_request_trailers`).
pub type TrailerScrub = Arc<dyn Fn(&mut http::HeaderMap) + Send + Sync>;

impl<B> ClientBody<B> {
    /// Read `inner` with waits of at most `body_read`; `chunks` is the
    /// framing watcher and the request's number, for an HTTP/1 body.
    pub fn new(inner: B, body_read: Duration, chunks: Option<(Arc<dyn ChunkWatch>, u64)>) -> Self {
        ClientBody {
            inner,
            body_read,
            stall: None,
            armed: false,
            chunks,
            scrub: None,
        }
    }

    /// The same, with `scrub` applied to the trailers.
    pub fn scrubbing(mut self, scrub: TrailerScrub) -> Self {
        self.scrub = Some(scrub);
        self
    }

    fn bad_chunk(&self) -> bool {
        self.chunks.as_ref().is_some_and(|(f, n)| f.bad_chunk(*n))
    }
}

impl<B> http_body::Body for ClientBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.bad_chunk() {
            return Poll::Ready(Some(Err(ClientBodyError::BadChunk.into())));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(mut frame))) => {
                this.armed = false;
                if this.bad_chunk() {
                    return Poll::Ready(Some(Err(ClientBodyError::BadChunk.into())));
                }
                if let (Some(scrub), Some(trailers)) = (&this.scrub, frame.trailers_mut()) {
                    scrub(trailers);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let deadline = Instant::now() + this.body_read;
                let stall = match (&mut this.stall, this.armed) {
                    (Some(stall), true) => stall,
                    (Some(stall), false) => {
                        stall.as_mut().reset(deadline);
                        stall
                    }
                    (None, _) => this
                        .stall
                        .insert(Box::pin(tokio::time::sleep_until(deadline))),
                };
                this.armed = true;
                match std::future::Future::poll(stall.as_mut(), cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(ClientBodyError::Stalled.into()))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The handle that keeps an [`UpstreamBody`]'s slot, for retries and for
/// telling whether the client broke its body.
#[derive(Clone)]
pub struct RetrySlot {
    /// As [`UpstreamBody::slot`]; for an ended body, its size hint instead.
    slot: Result<Arc<Slot>, SizeHint>,
}

impl UpstreamBody {
    /// Wrap `body`; returns the body to send and the slot that can take it back.
    pub fn new(body: Body) -> (UpstreamBody, RetrySlot) {
        let hint = http_body::Body::size_hint(&body);
        if http_body::Body::is_end_stream(&body) {
            return UpstreamBody::ended(hint);
        }
        let slot = Arc::new(Slot {
            body: Mutex::new(Some(body)),
            fault: AtomicU8::new(NO_FAULT),
        });
        let handle = RetrySlot {
            slot: Ok(slot.clone()),
        };
        let body = UpstreamBody {
            slot: Some(slot),
            inner: None,
            hint,
            end: false,
        };
        (body, handle)
    }

    /// An ended body with the size hint `hint`, and its slot.
    fn ended(hint: SizeHint) -> (UpstreamBody, RetrySlot) {
        let body = UpstreamBody {
            slot: None,
            inner: None,
            hint,
            end: true,
        };
        (body, RetrySlot { slot: Err(hint) })
    }
}

impl RetrySlot {
    /// The body again, if no attempt has read from it yet.
    pub fn take_back(&self) -> Option<(UpstreamBody, RetrySlot)> {
        match &self.slot {
            Ok(slot) => {
                let body = slot.body.lock().ok()?.take()?;
                Some(UpstreamBody::new(body))
            }
            Err(hint) => Some(UpstreamBody::ended(*hint)),
        }
    }

    /// Whether, and how, the client's own body failed.
    pub fn client_fault(&self) -> Option<ClientFault> {
        let Ok(slot) = &self.slot else {
            return None;
        };
        match slot.fault.load(Ordering::Relaxed) {
            NO_FAULT => None,
            TOO_LARGE => Some(ClientFault::TooLarge),
            TIMED_OUT => Some(ClientFault::TimedOut),
            _ => Some(ClientFault::Broken),
        }
    }
}

impl http_body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let Some(slot) = &this.slot else {
            return Poll::Ready(None);
        };
        if this.inner.is_none() {
            // First read: from now on a retry could not resend this body.
            let taken = slot.body.lock().ok().and_then(|mut s| s.take());
            match taken {
                Some(body) => this.inner = Some(body),
                None => return Poll::Ready(Some(Err("request body already taken".into()))),
            }
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => {
                let fault = match ClientBodyError::fault_of(&e) {
                    Some(ClientFault::TooLarge) => TOO_LARGE,
                    Some(ClientFault::TimedOut) => TIMED_OUT,
                    Some(ClientFault::Broken) | None => BROKEN,
                };
                slot.fault.store(fault, Ordering::Relaxed);
                Poll::Ready(Some(Err(e)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Some(inner) => inner.is_end_stream(),
            None => self.end,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(inner) => inner.size_hint(),
            None => self.hint,
        }
    }
}

/// What one `poll_frame` result says about the end of a body: `Some(true)`
/// when the body has ended (this was its trailers, which always come last, or
/// a frame after which `end_stream()` says so, or the end itself),
/// `Some(false)` when it failed, `None` while it goes on.
pub fn ended<D, E>(
    polled: &Poll<Option<Result<Frame<D>, E>>>,
    end_stream: impl FnOnce() -> bool,
) -> Option<bool> {
    match polled {
        Poll::Ready(Some(Ok(frame))) => (frame.is_trailers() || end_stream()).then_some(true),
        Poll::Ready(None) => Some(true),
        Poll::Ready(Some(Err(_))) => Some(false),
        Poll::Pending => None,
    }
}

/// A response body that runs `on_end` exactly once: when the last frame has
/// been sent, when it failed, or when it is dropped (the client went away).
///
/// The pipeline uses it to write the access-log line with the real byte
/// count and, later, to release concurrency leases.
pub struct Finish<B: http_body::Body, F: FnOnce(u64, bool) + Send + 'static> {
    inner: B,
    bytes: u64,
    on_end: Option<F>,
}

impl<B: http_body::Body, F: FnOnce(u64, bool) + Send + 'static> Finish<B, F> {
    /// Wrap `inner`; `on_end(bytes_sent, completed)` runs once.
    pub fn new(inner: B, on_end: F) -> Self {
        Finish {
            inner,
            bytes: 0,
            on_end: Some(on_end),
        }
    }

    fn end(&mut self, completed: bool) {
        if let Some(f) = self.on_end.take() {
            f(self.bytes, completed);
        }
    }
}

impl<B, F> http_body::Body for Finish<B, F>
where
    B: http_body::Body<Data = Bytes, Error = BoxError> + Unpin,
    F: FnOnce(u64, bool) + Send + Unpin + 'static,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                this.bytes += data.len() as u64;
            }
        }
        if let Some(completed) = ended(&polled, || this.inner.is_end_stream()) {
            this.end(completed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: http_body::Body, F: FnOnce(u64, bool) + Send + 'static> Drop for Finish<B, F> {
    fn drop(&mut self) {
        let completed = self.inner.is_end_stream();
        self.end(completed);
    }
}

/// How much of a chunked request body [`prefetch`] reads ahead at most.
pub const PREFETCH_LIMIT: usize = 64 * 1024;

/// Read whatever part of `body` has already arrived (up to
/// [`PREFETCH_LIMIT`] bytes) without waiting for more. A malformed chunk in
/// that part is an error now, before anything is forwarded; the rest of the
/// body still streams. Also returns the names of the trailer fields read
/// (when the whole body, trailers included, had arrived), so an HTTP/1.1
/// upstream can be told to expect them.
pub async fn prefetch<B>(mut body: B) -> Result<(Body, Vec<HeaderName>), BoxError>
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    let mut frames = std::collections::VecDeque::new();
    let mut bytes = 0usize;
    let ended = std::future::poll_fn(|cx| loop {
        if bytes >= PREFETCH_LIMIT {
            return Poll::Ready(Ok(false));
        }
        match Pin::new(&mut body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                bytes += frame.data_ref().map_or(0, Bytes::len);
                frames.push_back(frame);
            }
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e.into())),
            Poll::Ready(None) => return Poll::Ready(Ok(true)),
            Poll::Pending => return Poll::Ready(Ok(false)),
        }
    })
    .await?;
    let rest = if ended { None } else { Some(boxed(body)) };
    let names = trailer_names(frames.back().and_then(Frame::trailers_ref));
    Ok((Prefetched { frames, rest }.boxed_unsync(), names))
}

/// A whole body read ahead: `data`, then `trailers` if any.
pub fn with_trailers(data: Bytes, trailers: Option<HeaderMap>) -> Body {
    let mut frames = std::collections::VecDeque::from([Frame::data(data)]);
    frames.extend(trailers.map(Frame::trailers));
    Prefetched { frames, rest: None }.boxed_unsync()
}

/// The distinct names of `trailers`, in order.
pub fn trailer_names(trailers: Option<&HeaderMap>) -> Vec<HeaderName> {
    trailers.map_or_else(Vec::new, |t| t.keys().cloned().collect())
}

/// Frames read ahead by [`prefetch`], then the rest of the body.
struct Prefetched {
    frames: std::collections::VecDeque<Frame<Bytes>>,
    rest: Option<Body>,
}

impl http_body::Body for Prefetched {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(frame) = self.frames.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty() && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }
}
