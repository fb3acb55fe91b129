//! The response body of a request with cost limits: passes every frame to
//! the client as it comes (an SSE filter may hold back the part of an event
//! not complete yet), counts the bytes sent, lets a [`Tap`] read the LLM
//! usage, keeps the trailers, and hands the [`Reading`] to `on_end` exactly
//! once: when the body ended, failed, or was dropped (the client went
//! away).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use super::reading::Reading;
use crate::body::BoxError;

/// Reads a response body's LLM usage as it passes, and may change what the
/// client gets (the usage chunk a forced `include_usage` added).
pub trait Tap: Send + Unpin {
    /// What of `chunk` goes to the client now.
    fn push(&mut self, chunk: Bytes) -> Bytes;
    /// At the body's end: whatever was held back, and the usage read
    /// (input + output tokens), if any.
    fn finish(&mut self) -> (Bytes, Option<u64>);
    /// Whether it may change the bytes (else the body's length stays
    /// known).
    fn filters(&self) -> bool;
}

/// What runs once the body is over.
type OnEnd = Box<dyn FnOnce(Reading) + Send>;

/// A response body under cost limits.
pub struct Metered<B> {
    inner: B,
    tap: Option<Box<dyn Tap>>,
    reading: Reading,
    /// Held-back bytes to send before the trailers or the end.
    pending_trailers: Option<http::HeaderMap>,
    done: bool,
    on_end: Option<OnEnd>,
}

impl<B> Metered<B> {
    /// `inner`, read by `tap` (if any), with `reading` filled as it goes
    /// (its headers and upstream-error mark set by the caller) and handed
    /// to `on_end` once.
    pub fn new(
        inner: B,
        tap: Option<Box<dyn Tap>>,
        reading: Reading,
        on_end: impl FnOnce(Reading) + Send + 'static,
    ) -> Self {
        Metered {
            inner,
            tap,
            reading,
            pending_trailers: None,
            done: false,
            on_end: Some(Box::new(on_end)),
        }
    }

    /// Hand the reading over (once), with the tap's usage.
    fn end(&mut self) {
        if let Some(f) = self.on_end.take() {
            if let Some(tap) = self.tap.as_mut() {
                let (_, usage) = tap.finish();
                self.reading.usage = self.reading.usage.or(usage);
            }
            f(std::mem::take(&mut self.reading));
        }
    }

    /// At the end of the inner body (or before its trailers): what the tap
    /// held back, as a last data frame, with the usage kept for `end`.
    fn flush(&mut self) -> Option<Frame<Bytes>> {
        let tap = self.tap.as_mut()?;
        let (rest, usage) = tap.finish();
        self.reading.usage = self.reading.usage.or(usage);
        self.tap = None;
        (!rest.is_empty()).then(|| {
            self.reading.bytes += rest.len() as u64;
            Frame::data(rest)
        })
    }
}

impl<B> http_body::Body for Metered<B>
where
    B: http_body::Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(trailers) = this.pending_trailers.take() {
                this.reading.trailers = Some(trailers.clone());
                this.done = true;
                this.end();
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
            if this.done {
                this.end();
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let data = match this.tap.as_mut() {
                            Some(tap) => tap.push(data),
                            None => data,
                        };
                        if data.is_empty() {
                            continue;
                        }
                        this.reading.bytes += data.len() as u64;
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Err(frame) => {
                        let Ok(trailers) = frame.into_trailers() else {
                            continue;
                        };
                        this.pending_trailers = Some(trailers);
                        if let Some(rest) = this.flush() {
                            return Poll::Ready(Some(Ok(rest)));
                        }
                    }
                },
                Poll::Ready(None) => {
                    this.done = true;
                    if let Some(rest) = this.flush() {
                        return Poll::Ready(Some(Ok(rest)));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    this.end();
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        (self.done && self.pending_trailers.is_none())
            || (self.tap.is_none() && self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match &self.tap {
            // A filter may drop bytes: the length is not known.
            Some(tap) if tap.filters() => SizeHint::default(),
            _ => self.inner.size_hint(),
        }
    }
}

impl<B> Drop for Metered<B> {
    fn drop(&mut self) {
        self.end();
    }
}
