//! Serving one connection: HTTP/1.1 or HTTP/2 (h2c with prior knowledge,
//! or h2 chosen by ALPN over TLS) through hyper-util's auto builder, plus a
//! watchdog for what hyper does not time: a connection that sends nothing
//! (or not a whole head) within `header_read` of opening, a later head not
//! complete within `header_read` of its first byte (the framing watcher,
//! [`super::sniff`], says when one began), and a keep-alive connection idle
//! for `idle`. hyper's own head timer is off: it starts when a response
//! ends, so it would also close keep-alive connections idle for
//! `header_read`, and it arms a timer for every request. A TLS connection's
//! handshake must finish within `header_read` too.
//!
//! The watchdog's timer and the shutdown signals are polled only when one
//! of them fired ([`Gate`]), not on each of the connection's wake-ups,
//! which are nearly all for its I/O.
//!
//! An HTTP/1.1 upgrade ends hyper's part: once the 101 is written, hyper's
//! connection future completes and hands the connection's I/O to the
//! request's `OnUpgrade` (it closes nothing itself). The watchdog ends with
//! it, so it never times a tunnel out or closes what hyper handed over;
//! the tunnel the handler registered ([`ConnInfo::after_upgrade`]) then runs
//! on this task, with its own idle timer, so the connection stays counted
//! (`max_connections`, the connections gauge) and tracked for shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::sniff::SniffIo;
use super::{ConnInfo, Handler};
use crate::shared::Shared;

/// hyper refuses read buffers smaller than this.
const MIN_BUF: usize = 8192;

/// Serve `stream` (over TLS with `tls`) until the client closes, a timeout
/// fires, or shutdown.
pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    shared: Arc<Shared>,
    handler: Arc<dyn Handler>,
    shutdown: CancellationToken,
    closing: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    shared.metrics.connections.inc();
    match tls {
        None => serve_io(stream, "http", peer, &shared, handler, shutdown, closing).await,
        // Boxed: a TLS connection's state (rustls' connection, the
        // handshake) is several KiB, which every plain connection's task
        // would otherwise reserve too, idle or not.
        Some(config) => {
            Box::pin(serve_tls(
                stream, config, peer, &shared, handler, shutdown, closing,
            ))
            .await
        }
    }
    shared.metrics.connections.dec();
}

/// The TLS handshake within `header_read`, then HTTP over TLS.
async fn serve_tls(
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    handler: Arc<dyn Handler>,
    shutdown: CancellationToken,
    closing: CancellationToken,
) {
    let header_read = shared.runtime.load().config.server.header_read_timeout;
    let handshake = TlsAcceptor::from(config).accept(stream);
    match tokio::time::timeout(header_read, handshake).await {
        Ok(Ok(stream)) => {
            serve_io(stream, "https", peer, shared, handler, shutdown, closing).await;
        }
        Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "no TLS handshake within header_read: closing"),
    }
}

/// Serve HTTP on `io` (`proto`: `http` or `https`, for X-Forwarded-Proto).
async fn serve_io<IO>(
    io: IO,
    proto: &'static str,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    handler: Arc<dyn Handler>,
    shutdown: CancellationToken,
    closing: CancellationToken,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (header_read, idle, max_header_bytes) = {
        let rt = shared.runtime.load();
        let s = &rt.config.server;
        (s.header_read_timeout, s.idle_timeout, s.max_header_bytes)
    };
    let info = Arc::new(ConnInfo::new(peer, proto, closing));
    let io = SniffIo::new(io, max_header_bytes.max(MIN_BUF), info.framing.clone());

    let svc = {
        let info = info.clone();
        service_fn(move |req| {
            // Boxed by the handler (see `Handler`): the pipeline's future is
            // ~3.4 KB, and lives only as long as its request.
            let handling = handler.handle(req, info.clone());
            async move { Ok::<_, Infallible>(handling.await) }
        })
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        // The watchdog times heads (see the module doc).
        .header_read_timeout(None)
        .max_buf_size(max_header_bytes.max(MIN_BUF))
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(max_header_bytes).unwrap_or(u32::MAX));
    // hyper's part, until its connection future completes (the client
    // closed, or an upgrade handed the I/O over) or the watchdog or the
    // shutdown deadline closes the connection. hyper's connection is dropped
    // at the end of the block, so a tunnel registered on a connection closed
    // meanwhile finds no I/O and ends at once.
    {
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
        tokio::pin!(conn);
        let gate = Gate::new();
        info.framing.wake_on_head(gate.waker.clone());
        let watchdog = Watchdog::new(&info, header_read, idle, shutdown);
        tokio::pin!(watchdog);
        loop {
            tokio::select! {
                biased;
                result = conn.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, error = %error, "connection ended with an error");
                    }
                    break;
                }
                alarm = gate.watch(watchdog.as_mut()) => match alarm {
                    Alarm::Drain => conn.as_mut().graceful_shutdown(),
                    Alarm::Close(why) => {
                        tracing::debug!(%peer, "{why}: closing");
                        break;
                    }
                },
            }
        }
    }
    if let Some(tunnel) = info.take_upgraded() {
        tunnel.await;
    }
}

/// What the watchdog asks of the connection.
#[derive(Debug, PartialEq, Eq)]
enum Alarm {
    /// Shutdown began: finish the requests in flight, take no more.
    Drain,
    /// Close it now, for this reason.
    Close(&'static str),
}

pin_project_lite::pin_project! {
    /// The timeouts hyper does not apply, and the shutdown signals, for one
    /// connection.
    struct Watchdog {
        info: Arc<ConnInfo>,
        start: Instant,
        header_read: Duration,
        idle: Duration,
        draining: bool,
        #[pin]
        alarm: Sleep,
        #[pin]
        shutdown: WaitForCancellationFutureOwned,
        #[pin]
        closing: WaitForCancellationFutureOwned,
    }
}

impl Watchdog {
    fn new(
        info: &Arc<ConnInfo>,
        header_read: Duration,
        idle: Duration,
        shutdown: CancellationToken,
    ) -> Watchdog {
        let start = Instant::now();
        Watchdog {
            info: info.clone(),
            start,
            header_read,
            idle,
            draining: false,
            alarm: tokio::time::sleep_until(start + header_read),
            shutdown: shutdown.cancelled_owned(),
            closing: info.closing.clone().cancelled_owned(),
        }
    }

    /// Look at the connection: an alarm, or pending with the timer set to
    /// the next moment something may be due.
    fn poll_alarm(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Alarm> {
        let mut this = self.project();
        if !*this.draining && this.shutdown.as_mut().poll(cx).is_ready() {
            *this.draining = true;
            return Poll::Ready(Alarm::Drain);
        }
        if this.closing.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Alarm::Close("shutdown grace over"));
        }
        let (in_flight, requests, last_end_ms) = this.info.activity.snapshot();
        let look = Look {
            in_flight,
            requests,
            last_end_ms,
            head_started_ms: this.info.framing.head_started(),
            blind: this.info.framing.blind(),
        };
        let now = Instant::now();
        let next = match look.limit(*this.header_read, *this.idle) {
            // Busy: the idle clock starts when the response ends.
            None => now + (*this.idle).min(*this.header_read),
            Some((limit, why)) => {
                let limit = *this.start + limit;
                if now >= limit {
                    return Poll::Ready(Alarm::Close(why));
                }
                limit
            }
        };
        if this.alarm.deadline() != next {
            this.alarm.as_mut().reset(next);
        }
        // Registers the timer; should it have passed already, look again.
        if this.alarm.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

/// What the watchdog knows of a connection when it looks; times in
/// milliseconds since the connection started.
#[derive(Debug, Clone, Copy)]
struct Look {
    in_flight: usize,
    /// Requests that reached the handler so far.
    requests: u64,
    /// When the last response ended.
    last_end_ms: u64,
    /// When the head being received began, if one has partly arrived.
    head_started_ms: Option<u64>,
    /// The framing watcher stopped following heads.
    blind: bool,
}

impl Look {
    /// When the connection must be closed unless something happens first
    /// (since its start), and why; `None` while a request is in flight.
    fn limit(&self, header_read: Duration, idle: Duration) -> Option<(Duration, &'static str)> {
        const HEAD: &str = "no request head within header_read";
        if self.requests == 0 {
            return Some((header_read, HEAD));
        }
        if self.in_flight > 0 {
            return None;
        }
        let last_end = Duration::from_millis(self.last_end_ms);
        Some(match (self.head_started_ms, self.blind) {
            // A head cannot be read before the response ahead of it ends.
            (Some(began), _) => (
                Duration::from_millis(began).max(last_end) + header_read,
                HEAD,
            ),
            // Heads no longer followed: as hyper's own timer would, from
            // the end of the last response.
            (None, true) => (last_end + idle.min(header_read), "idle or no request head"),
            (None, false) => (last_end + idle, "idle timeout"),
        })
    }
}

/// Polls a future only once one of its own wakers has fired (or on the
/// first poll), whatever wakes the task it runs in.
struct Gate {
    flag: Arc<GateFlag>,
    /// The waker the gated future is polled with.
    waker: Waker,
}

struct GateFlag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for GateFlag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Gate {
    fn new() -> Gate {
        let flag = Arc::new(GateFlag {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Gate {
            waker: Waker::from(flag.clone()),
            flag,
        }
    }

    /// The watchdog's next alarm: `watchdog` polled only when the gate was
    /// woken.
    fn watch<'a>(
        &'a self,
        mut watchdog: Pin<&'a mut Watchdog>,
    ) -> impl Future<Output = Alarm> + 'a {
        std::future::poll_fn(move |cx| self.poll(cx, |cx| watchdog.as_mut().poll_alarm(cx)))
    }

    /// `inner` polled with the gate's waker if the gate was woken since the
    /// last time; pending otherwise. The task of `cx` is woken with it.
    fn poll<T>(
        &self,
        cx: &mut Context<'_>,
        inner: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        self.flag.task.register(cx.waker());
        if !self.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        inner(&mut Context::from_waker(&self.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HR: Duration = Duration::from_secs(10);
    const IDLE: Duration = Duration::from_secs(60);

    fn look(requests: u64, in_flight: usize, last_end_ms: u64) -> Look {
        Look {
            in_flight,
            requests,
            last_end_ms,
            head_started_ms: None,
            blind: false,
        }
    }

    fn secs(limit: Option<(Duration, &str)>) -> Option<u64> {
        limit.map(|(d, _)| d.as_secs())
    }

    #[test]
    fn heads_are_timed_from_their_first_byte_and_idle_from_the_last_response() {
        // Nothing yet: header_read from the start.
        assert_eq!(secs(look(0, 0, 0).limit(HR, IDLE)), Some(10));
        // Busy: nothing due.
        assert_eq!(secs(look(1, 1, 0).limit(HR, IDLE)), None);
        // Idle after a response at 5 s: `idle` from then, not header_read.
        assert_eq!(secs(look(1, 0, 5_000).limit(HR, IDLE)), Some(65));
        // A head began at 30 s: header_read from its first byte.
        let partial = Look {
            head_started_ms: Some(30_000),
            ..look(1, 0, 5_000)
        };
        assert_eq!(secs(partial.limit(HR, IDLE)), Some(40));
        // One that began while a response was on its way: from that end.
        let early = Look {
            head_started_ms: Some(2_000),
            ..look(1, 0, 5_000)
        };
        assert_eq!(secs(early.limit(HR, IDLE)), Some(15));
        // Heads no longer followed: the earlier of the two, from the end.
        let blind = Look {
            blind: true,
            ..look(1, 0, 5_000)
        };
        assert_eq!(secs(blind.limit(HR, IDLE)), Some(15));
    }

    #[test]
    fn a_gated_future_is_polled_only_when_its_own_waker_fired() {
        let gate = Gate::new();
        let task = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&task);
        let inner_waker = std::cell::RefCell::new(None);
        let mut poll = || {
            gate.poll(&mut cx, |inner: &mut Context<'_>| {
                *inner_waker.borrow_mut() = Some(inner.waker().clone());
                Poll::<()>::Pending
            })
        };
        assert!(poll().is_pending());
        let waker = inner_waker.take().expect("the first poll goes through");
        // The task woke for something else: the inner future is not polled.
        assert!(poll().is_pending());
        assert!(inner_waker.borrow().is_none());
        waker.wake();
        assert!(poll().is_pending());
        assert!(
            inner_waker.borrow().is_some(),
            "polled again once its own waker fired"
        );
    }
}
