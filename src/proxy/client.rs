//! The upstream HTTP client: a small per-target connection pool built
//! directly on hyper's connection API.
//!
//! **HTTP/1.1.** Each target keeps a stack of idle keep-alive connections,
//! each open and ready when it was pushed. A request pops the most recently
//! used one, or opens a new one; nothing is hashed, boxed or spawned per
//! request. The
//! connection has no task of its own: the request's task polls it while it
//! waits for the response, and the response body's polls go on polling it
//! ([`super::drive`]). The response body ([`ResponseBody`]) pushes the
//! connection back when it reaches its end, and drops it (which closes the
//! connection) when it is dropped early or fails; a connection still busy
//! then (sending the request's body after an early response) finishes in a
//! task of its own and is closed, as is one that switched protocols. A
//! request that a reused connection hands back unsent (the upstream had
//! closed it before the request was written) is sent once more, on the next
//! idle connection or a new one.
//!
//! **HTTP/2** (`http2: true`: h2c with prior knowledge, or h2 by ALPN on an
//! `https://` target). One multiplexed connection per target, shared by
//! every request, opened again when it closes; one request opens it while
//! the others wait for it.
//!
//! **TLS** (`https://` targets): the handshake is part of the connect, within
//! the connect timeout; a TLS connection is pooled and reused like a plain
//! one.
//!
//! **Idle connections** are closed after the idle timeout by one reaper task
//! per client, which holds only a `Weak` reference and ends with the client;
//! at each tick it also drops the HTTP/1.1 connections their upstream has
//! closed.
//! Its ticks also drive a coarse clock (`idle / 10` per tick) that stamps
//! connections when they go idle, so returning a connection reads no clock.
//! At most [`MAX_IDLE_PER_TARGET`] idle connections are kept per target and
//! thread.
//!
//! **Threads.** Idle HTTP/1.1 connections are kept per worker thread (up to
//! `IDLE_LISTS` lists): a connection's task runs on the thread that opened
//! it, so a request on another thread would cross threads twice per
//! exchange; each thread takes back only what it opened.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::Either;
use http::uri::Authority;
use http::{Request, Response, StatusCode};
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::drive::Driven;
use crate::body::{self, UpstreamBody};

/// The most idle connections kept per target; a connection coming back to a
/// full idle list is closed instead.
pub const MAX_IDLE_PER_TARGET: usize = 1024;

/// Idle lists per target: one per worker thread, threads beyond this share.
const IDLE_LISTS: usize = 8;

/// Reaper ticks per idle timeout: a connection is closed after between 1 and
/// 1.1 idle timeouts without use.
const REAP_TICKS: u32 = 10;

type Sender1 = http1::SendRequest<UpstreamBody>;
type Sender2 = http2::SendRequest<UpstreamBody>;

/// Why a request to an upstream target failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TCP connection could not be made (nothing was sent).
    #[error("connect: {0}")]
    Connect(#[source] std::io::Error),
    /// The TCP connection was not made within the connect timeout (nothing
    /// was sent).
    #[error("connect timed out after {0:?}")]
    ConnectTimeout(Duration),
    /// The TLS handshake failed (nothing was sent).
    #[error("TLS handshake: {0}")]
    Tls(#[source] std::io::Error),
    /// The HTTP/2 handshake failed on a new connection (nothing was sent).
    #[error("handshake: {0}")]
    Handshake(#[source] hyper::Error),
    /// The request failed on an established connection: part of it may have
    /// been sent.
    #[error("{0}")]
    Request(#[source] hyper::Error),
}

impl ClientError {
    /// Whether no connection could be made, so nothing of the request reached
    /// the target.
    pub fn is_connect(&self) -> bool {
        !matches!(self, ClientError::Request(_))
    }
}

/// A pooled HTTP client for the targets of one upstream.
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: Vec<Endpoint>,
    http2: bool,
    connect_timeout: Duration,
    idle_timeout: Duration,
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
    /// Reaper ticks so far: the coarse clock idle connections are stamped with.
    clock: AtomicU32,
    /// Whether the reaper task has been started (on the first connect).
    reaper: AtomicBool,
}

/// How to reach one target: its authority, the port when it has none, and
/// TLS for an `https://` target.
pub struct Dial<'a> {
    /// `host[:port]`.
    pub authority: &'a Authority,
    /// The port when `authority` has none (80, or 443 for TLS).
    pub default_port: u16,
    /// TLS: the client config, and the name to verify (and send as SNI).
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
}

/// This thread's idle list: threads are numbered as they first ask.
fn idle_list() -> usize {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    thread_local! {
        static LIST: usize = NEXT.fetch_add(1, Ordering::Relaxed) as usize % IDLE_LISTS;
    }
    LIST.with(|l| *l)
}

/// One target: where to connect, and its pooled connections.
struct Endpoint {
    /// The host, without IPv6 brackets (for resolving).
    host: Box<str>,
    port: u16,
    /// The host when it is an IP literal: no resolving needed.
    ip: Option<IpAddr>,
    /// TLS over the TCP connection, for an `https://` target.
    tls: Option<(TlsConnector, ServerName<'static>)>,
    /// Idle HTTP/1.1 connections, the most recently returned last, per
    /// thread ([`idle_list`]).
    idle: [Mutex<Vec<Idle>>; IDLE_LISTS],
    /// The shared HTTP/2 connection.
    shared: Mutex<Option<Shared>>,
    /// Held while an HTTP/2 connection is being opened, so only one is.
    connecting: tokio::sync::Mutex<()>,
}

struct Idle {
    conn: Conn1,
    /// The clock when it went idle.
    since: u32,
}

/// An HTTP/1.1 connection: its request sender, and its future, driven by
/// the task that uses it.
struct Conn1 {
    sender: Sender1,
    driven: Driven,
}

struct Shared {
    sender: Sender2,
    /// The clock when a request last used it.
    used: u32,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Client {
    /// A client for `targets`, speaking HTTP/2 when `http2` (with prior
    /// knowledge, or by ALPN over TLS), with `connect_timeout` for each new
    /// connection (TLS handshake included) and closing connections idle for
    /// `idle_timeout`. The target index of [`Client::send`] is the position
    /// in `targets`.
    pub fn new<'a>(
        targets: impl IntoIterator<Item = Dial<'a>>,
        http2: bool,
        connect_timeout: Duration,
        idle_timeout: Duration,
    ) -> Client {
        let endpoints = targets
            .into_iter()
            .map(|dial| {
                let Dial {
                    authority,
                    default_port,
                    tls,
                } = dial;
                let host = authority.host();
                let host = host
                    .strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .unwrap_or(host);
                Endpoint {
                    ip: host.parse().ok(),
                    host: host.into(),
                    port: authority.port_u16().unwrap_or(default_port),
                    tls: tls.map(|(config, name)| (TlsConnector::from(config), name)),
                    idle: Default::default(),
                    shared: Mutex::new(None),
                    connecting: tokio::sync::Mutex::new(()),
                }
            })
            .collect();
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new());
        Client {
            inner: Arc::new(Inner {
                endpoints,
                http2,
                connect_timeout,
                idle_timeout,
                h1: http1::Builder::new(),
                h2,
                clock: AtomicU32::new(0),
                reaper: AtomicBool::new(false),
            }),
        }
    }

    /// Send `request` to target `target` and return the response head.
    ///
    /// HTTP/1.1 requests must be in origin form, HTTP/2 requests absolute;
    /// the Host header is sent as given. The connection goes back to the
    /// pool when the response body has been read to its end.
    ///
    /// Not an async fn: the HTTP/1.1 path's future is returned as it is,
    /// without one more future around it (which would hold the request and
    /// the response once more, each copied through it).
    pub fn send(
        &self,
        target: usize,
        request: Request<UpstreamBody>,
    ) -> impl Future<Output = Result<Response<ResponseBody>, ClientError>> + Send + '_ {
        if self.inner.http2 {
            // Boxed: kept out of the HTTP/1.1 path's future, which every
            // request of a plain upstream carries.
            Either::Left(Box::pin(self.send_h2(target, request)))
        } else {
            Either::Right(self.send_h1(target, request))
        }
    }

    /// How many idle HTTP/1.1 connections target `target` holds right now.
    #[cfg(test)]
    fn idle_connections(&self, target: usize) -> usize {
        self.inner
            .endpoints
            .get(target)
            .map_or(0, |ep| ep.idle.iter().map(|l| lock(l).len()).sum())
    }

    /// Not an `async fn`, which would keep the request twice in its future
    /// (as passed, and moved into a local at the first poll).
    #[allow(clippy::manual_async_fn)] // an `async fn` keeps its arguments twice
    fn send_h1(
        &self,
        target: usize,
        mut request: Request<UpstreamBody>,
    ) -> impl Future<Output = Result<Response<ResponseBody>, ClientError>> + Send + '_ {
        async move {
            let mut pooled = self.inner.checkout(target);
            loop {
                let reused = pooled.is_some();
                let mut conn = match pooled.take() {
                    Some(conn) => conn,
                    // Boxed: connecting is rare, and its future (resolving,
                    // connecting, the TLS handshake) would otherwise swell
                    // every request's.
                    None => Box::pin(self.connect_h1(target)).await?,
                };
                let mut sent = std::pin::pin!(conn.sender.try_send_request(request));
                let result = std::future::poll_fn(|cx| {
                    conn.driven.poll_with(cx, |cx| sent.as_mut().poll(cx))
                })
                .await;
                match result {
                    Ok(response) => {
                        return Ok(ResponseBody::pooled(response, &self.inner, target, conn))
                    }
                    Err(mut error) => match error.take_message() {
                        // The reused connection closed before the request was
                        // written: once more, on the next pooled one or a new
                        // one.
                        Some(unsent) if reused => {
                            tracing::debug!(error = %error.error(), "pooled upstream connection closed; retrying on another");
                            request = unsent;
                            pooled = self.inner.checkout(target);
                        }
                        _ => return Err(ClientError::Request(error.into_error())),
                    },
                }
            }
        }
    }

    async fn send_h2(
        &self,
        target: usize,
        mut request: Request<UpstreamBody>,
    ) -> Result<Response<ResponseBody>, ClientError> {
        let (mut sender, mut reused) = match self.inner.shared(target) {
            Some(sender) => (sender, true),
            None => (self.connect_h2(target, false).await?, false),
        };
        loop {
            match sender.try_send_request(request).await {
                Ok(response) => {
                    return Ok(response.map(|inner| ResponseBody {
                        inner,
                        checkin: None,
                    }))
                }
                Err(mut error) => match error.take_message() {
                    Some(unsent) if reused => {
                        tracing::debug!(error = %error.error(), "shared upstream connection closed; retrying on a new one");
                        request = unsent;
                        sender = self.connect_h2(target, true).await?;
                        reused = false;
                    }
                    _ => return Err(ClientError::Request(error.into_error())),
                },
            }
        }
    }

    /// A new HTTP/1.1 connection to `target`.
    async fn connect_h1(&self, target: usize) -> Result<Conn1, ClientError> {
        let io = self.inner.connect(target).await?;
        let (sender, conn) = self
            .inner
            .h1
            .handshake(io)
            .await
            .map_err(ClientError::Handshake)?;
        Ok(Conn1 {
            sender,
            driven: Driven::new(conn.with_upgrades()),
        })
    }

    /// The shared HTTP/2 connection of `target`, opened (or, with `replace`,
    /// opened again) by whichever request gets here first.
    async fn connect_h2(&self, target: usize, replace: bool) -> Result<Sender2, ClientError> {
        let ep = &self.inner.endpoints[target];
        let _connecting = ep.connecting.lock().await;
        if !replace {
            // Another request may have opened it while this one waited.
            if let Some(sender) = self.inner.shared(target) {
                return Ok(sender);
            }
        }
        let io = self.inner.connect(target).await?;
        let handshake = self.inner.h2.handshake(io);
        let (sender, conn) = tokio::time::timeout(self.inner.connect_timeout, handshake)
            .await
            .map_err(|_| ClientError::ConnectTimeout(self.inner.connect_timeout))?
            .map_err(ClientError::Handshake)?;
        tokio::spawn(async move {
            if let Err(error) = conn.await {
                tracing::debug!(%error, "upstream HTTP/2 connection ended with an error");
            }
        });
        *lock(&ep.shared) = Some(Shared {
            sender: sender.clone(),
            used: self.inner.clock.load(Ordering::Relaxed),
        });
        Ok(sender)
    }
}

/// A connection to a target: TCP, or TLS over it.
pub enum Stream {
    /// `http://`.
    Plain(TcpStream),
    /// `https://`.
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl Inner {
    /// The idle HTTP/1.1 connection of `target` used most recently. Only
    /// open and ready connections are pooled ([`Inner::checkin`]); one the
    /// upstream has closed since is found when the request is sent on it.
    fn checkout(&self, target: usize) -> Option<Conn1> {
        lock(&self.endpoints[target].idle[idle_list()])
            .pop()
            .map(|idle| idle.conn)
    }

    /// Return an HTTP/1.1 connection whose response has ended: to the pool
    /// when it is open and ready for another request; to a task of its own
    /// when it still has work (it is closed after that); dropped, which
    /// closes it, when it has ended or failed.
    fn checkin(&self, target: usize, conn: Conn1) {
        if conn.driven.has_ended() || conn.sender.is_closed() {
            return;
        }
        if !conn.sender.is_ready() {
            conn.driven.detach(());
            return;
        }
        conn.driven.park();
        let since = self.clock.load(Ordering::Relaxed);
        let mut idle = lock(&self.endpoints[target].idle[idle_list()]);
        if idle.len() < MAX_IDLE_PER_TARGET {
            idle.push(Idle { conn, since });
        }
    }

    /// The shared HTTP/2 connection of `target`, if it is open.
    fn shared(&self, target: usize) -> Option<Sender2> {
        let mut shared = lock(&self.endpoints[target].shared);
        match shared.as_mut() {
            Some(s) if !s.sender.is_closed() => {
                s.used = self.clock.load(Ordering::Relaxed);
                Some(s.sender.clone())
            }
            Some(_) => {
                *shared = None;
                None
            }
            None => None,
        }
    }

    /// A connection to `target` within the connect timeout (resolving and
    /// the TLS handshake included), trying each resolved address in turn
    /// with an equal share of the time left.
    async fn connect(self: &Arc<Self>, target: usize) -> Result<TokioIo<Stream>, ClientError> {
        self.start_reaper();
        let ep = &self.endpoints[target];
        let timeout = self.connect_timeout;
        let deadline = Instant::now() + timeout;
        let addrs: Vec<SocketAddr> = match ep.ip {
            Some(ip) => vec![SocketAddr::new(ip, ep.port)],
            None => {
                tokio::time::timeout_at(deadline, tokio::net::lookup_host((&*ep.host, ep.port)))
                    .await
                    .map_err(|_| ClientError::ConnectTimeout(timeout))?
                    .map_err(ClientError::Connect)?
                    .collect()
            }
        };
        let mut last = ClientError::Connect(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} resolved to no address", ep.host),
        ));
        for (i, addr) in addrs.iter().enumerate() {
            let share =
                deadline.saturating_duration_since(Instant::now()) / (addrs.len() - i) as u32;
            match tokio::time::timeout(share, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    stream.set_nodelay(true).map_err(ClientError::Connect)?;
                    let Some((connector, name)) = &ep.tls else {
                        return Ok(TokioIo::new(Stream::Plain(stream)));
                    };
                    let handshake = connector.connect(name.clone(), stream);
                    return match tokio::time::timeout_at(deadline, handshake).await {
                        Ok(Ok(tls)) => Ok(TokioIo::new(Stream::Tls(Box::new(tls)))),
                        Ok(Err(error)) => Err(ClientError::Tls(error)),
                        Err(_) => Err(ClientError::ConnectTimeout(timeout)),
                    };
                }
                Ok(Err(error)) => last = ClientError::Connect(error),
                Err(_) => last = ClientError::ConnectTimeout(timeout),
            }
        }
        Err(last)
    }

    /// Start the reaper task, once.
    fn start_reaper(self: &Arc<Self>) {
        if self.reaper.load(Ordering::Relaxed) || self.reaper.swap(true, Ordering::Relaxed) {
            return;
        }
        let tick = (self.idle_timeout / REAP_TICKS).max(Duration::from_millis(1));
        tokio::spawn(reap(Arc::downgrade(self), tick));
    }

    /// One reaper tick at clock `now`: drop the connections idle for more
    /// than [`REAP_TICKS`] ticks, and those the upstream has closed (each
    /// idle HTTP/1.1 connection is polled once, without a system call unless
    /// its socket has news).
    fn reap(&self, now: u32) {
        let expired = |since: u32| now.wrapping_sub(since) > REAP_TICKS;
        for ep in &self.endpoints {
            for list in &ep.idle {
                lock(list).retain_mut(|i| !expired(i.since) && i.conn.driven.poll_parked());
            }
            let mut shared = lock(&ep.shared);
            if shared
                .as_ref()
                .is_some_and(|s| s.sender.is_closed() || expired(s.used))
            {
                *shared = None;
            }
        }
    }
}

/// Every `tick`, advance the client's clock and close its expired idle
/// connections; ends when the client is gone.
async fn reap(inner: Weak<Inner>, tick: Duration) {
    let mut interval = tokio::time::interval_at(Instant::now() + tick, tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let now = inner.clock.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        inner.reap(now);
    }
}

/// An upstream response body. Over HTTP/1.1 it holds the connection and
/// returns it to the pool when the body ends (the last data frame, the
/// trailers, or the end of stream); dropped earlier, or failed, it drops the
/// connection instead, which closes it.
pub struct ResponseBody {
    inner: Incoming,
    checkin: Option<Checkin>,
}

struct Checkin {
    client: Arc<Inner>,
    target: usize,
    conn: Conn1,
}

impl ResponseBody {
    fn pooled(
        response: Response<Incoming>,
        client: &Arc<Inner>,
        target: usize,
        conn: Conn1,
    ) -> Response<ResponseBody> {
        // After a 101 the connection is no longer HTTP: its task hands the
        // stream over to the upgrade when it ends.
        let checkin = if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            conn.driven.detach(conn.sender);
            None
        } else {
            Some(Checkin {
                client: client.clone(),
                target,
                conn,
            })
        };
        let mut body = response.map(|inner| ResponseBody { inner, checkin });
        if body.body().inner.is_end_stream() {
            body.body_mut().release();
        }
        body
    }

    /// The body has ended: the connection can serve another request.
    fn release(&mut self) {
        if let Some(c) = self.checkin.take() {
            c.client.checkin(c.target, c.conn);
        }
    }
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let inner = &mut this.inner;
        let polled = match (Pin::new(&mut *inner).poll_frame(cx), &mut this.checkin) {
            // Nothing yet: the connection delivers the body, it is polled
            // along. (A frame already here needs no poll of it: the
            // connection reads ahead into the body's channel.)
            (Poll::Pending, Some(c)) => c
                .conn
                .driven
                .poll_with(cx, |cx| Pin::new(&mut *inner).poll_frame(cx)),
            (polled, _) => polled,
        };
        match body::ended(&polled, || this.inner.is_end_stream()) {
            Some(true) => this.release(),
            Some(false) => this.checkin = None,
            None => {}
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

impl Drop for ResponseBody {
    fn drop(&mut self) {
        // A reader that saw `is_end_stream` may stop polling before `None`.
        if self.inner.is_end_stream() {
            self.release();
        }
    }
}

#[cfg(test)]
mod tests {
    //! Against a real upstream on loopback: a tiny blocking HTTP/1.1 server
    //! on its own threads, so it can act while the test's runtime is busy.

    use std::io::{BufRead, BufReader, Write};
    use std::net::{Shutdown, TcpListener};
    use std::sync::atomic::AtomicUsize;

    use http_body_util::BodyExt;

    use super::*;

    /// How many bytes `/big` answers with.
    const BIG: usize = 16 * 1024 * 1024;

    #[derive(Default)]
    struct Counts {
        accepted: AtomicUsize,
        requests: AtomicUsize,
        closed: AtomicUsize,
        streams: Mutex<Vec<std::net::TcpStream>>,
    }

    /// A keep-alive HTTP/1.1 upstream: `GET /` is `hello`, `GET /big` is
    /// [`BIG`] bytes with a Content-Length. Runs until the test process ends.
    struct Upstream {
        authority: Authority,
        counts: Arc<Counts>,
    }

    impl Upstream {
        fn start() -> Upstream {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = listener.local_addr().expect("local addr");
            let counts = Arc::new(Counts::default());
            let c = counts.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    c.accepted.fetch_add(1, Ordering::SeqCst);
                    if let Ok(clone) = stream.try_clone() {
                        lock(&c.streams).push(clone);
                    }
                    let c = c.clone();
                    std::thread::spawn(move || serve(stream, &c));
                }
            });
            Upstream {
                authority: addr.to_string().parse().expect("authority"),
                counts,
            }
        }

        fn accepted(&self) -> usize {
            self.counts.accepted.load(Ordering::SeqCst)
        }

        fn requests(&self) -> usize {
            self.counts.requests.load(Ordering::SeqCst)
        }

        /// Connections the client closed.
        fn closed(&self) -> usize {
            self.counts.closed.load(Ordering::SeqCst)
        }

        /// Close every connection from the upstream's side (a FIN, no
        /// `Connection: close`).
        fn close_all(&self) {
            for s in lock(&self.counts.streams).iter() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }

        fn client(&self, idle_timeout: Duration) -> Client {
            let dial = Dial {
                authority: &self.authority,
                default_port: 80,
                tls: None,
            };
            Client::new([dial], false, Duration::from_secs(2), idle_timeout)
        }
    }

    /// An HTTP/1.1 client for one target given as `host:port`.
    fn client_for(authority: &str, connect_timeout: Duration) -> Client {
        let authority: Authority = authority.parse().expect("authority");
        let dial = Dial {
            authority: &authority,
            default_port: 80,
            tls: None,
        };
        Client::new([dial], false, connect_timeout, Duration::from_secs(60))
    }

    fn serve(stream: std::net::TcpStream, counts: &Counts) {
        let Ok(mut out) = stream.try_clone() else {
            return;
        };
        let mut lines = BufReader::new(stream);
        loop {
            let mut path = None;
            loop {
                let mut line = String::new();
                match lines.read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        counts.closed.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    Ok(_) if line == "\r\n" => break,
                    Ok(_) => {
                        if path.is_none() {
                            path = line.split(' ').nth(1).map(str::to_string);
                        }
                    }
                }
            }
            counts.requests.fetch_add(1, Ordering::SeqCst);
            let written = if path.as_deref() == Some("/big") {
                let chunk = vec![b'x'; 64 * 1024];
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {BIG}\r\n\r\n");
                out.write_all(head.as_bytes())
                    .and_then(|()| (0..BIG / chunk.len()).try_for_each(|_| out.write_all(&chunk)))
            } else if path.as_deref() == Some("/chunked") {
                out.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                    .and_then(|()| out.write_all(b"3\r\nhel\r\n"))
                    .and_then(|()| {
                        // The rest in a read of its own.
                        std::thread::sleep(Duration::from_millis(30));
                        out.write_all(b"2\r\nlo\r\n0\r\n\r\n")
                    })
            } else if path.as_deref() == Some("/none") {
                out.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            } else {
                out.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
            };
            if written.is_err() {
                counts.closed.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
    }

    fn get(path: &str) -> Request<UpstreamBody> {
        let mut request = Request::new(UpstreamBody::new(body::empty()).0);
        *request.uri_mut() = path.parse().expect("path");
        request
            .headers_mut()
            .insert(http::header::HOST, http::HeaderValue::from_static("up"));
        request
    }

    async fn get_text(client: &Client, path: &str) -> String {
        let response = client.send(0, get(path)).await.expect("response");
        let bytes = response.into_body().collect().await.expect("body");
        String::from_utf8_lossy(&bytes.to_bytes()).into_owned()
    }

    async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..200 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for {what}");
    }

    #[tokio::test]
    async fn one_connection_serves_sequential_requests() {
        let up = Upstream::start();
        let client = up.client(Duration::from_secs(60));
        for _ in 0..20 {
            assert_eq!(get_text(&client, "/").await, "hello");
        }
        assert_eq!(get_text(&client, "/big").await.len(), BIG);
        assert_eq!(get_text(&client, "/").await, "hello");
        assert_eq!(up.accepted(), 1);
        assert_eq!(up.requests(), 22);
        assert_eq!(client.idle_connections(0), 1);
    }

    #[tokio::test]
    async fn idle_connections_are_closed_after_the_idle_timeout() {
        let up = Upstream::start();
        let idle = Duration::from_millis(200);
        let client = up.client(idle);
        assert_eq!(get_text(&client, "/").await, "hello");
        let returned = std::time::Instant::now();
        assert_eq!(client.idle_connections(0), 1);
        // No further traffic: the reaper closes it.
        wait_for("the idle connection to be closed", || up.closed() == 1).await;
        let waited = returned.elapsed();
        assert!(waited >= idle, "closed after {waited:?}, before {idle:?}");
        assert_eq!(client.idle_connections(0), 0);
        // The next request opens a new one.
        assert_eq!(get_text(&client, "/").await, "hello");
        assert_eq!(up.accepted(), 2);
    }

    #[tokio::test]
    async fn a_body_dropped_early_does_not_return_its_connection() {
        let up = Upstream::start();
        let client = up.client(Duration::from_secs(60));
        let response = client.send(0, get("/big")).await.expect("response");
        let mut body = response.into_body();
        let first = body.frame().await.expect("a frame").expect("data");
        assert!(first.is_data());
        drop(body);
        assert_eq!(client.idle_connections(0), 0);
        wait_for("the connection to be closed", || up.closed() == 1).await;
        assert_eq!(get_text(&client, "/").await, "hello");
        assert_eq!(up.accepted(), 2);
    }

    #[tokio::test]
    async fn a_connection_closed_by_the_upstream_is_not_reused() {
        let up = Upstream::start();
        let client = up.client(Duration::from_secs(60));
        assert_eq!(get_text(&client, "/").await, "hello");
        up.close_all();
        wait_for("the upstream to see the close", || up.closed() == 1).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(get_text(&client, "/").await, "hello");
        assert_eq!(up.accepted(), 2);
        assert_eq!(up.requests(), 2);
    }

    /// The connection is polled by the request's task, then by the response
    /// body's polls: whatever the framing (a length, chunks arriving in two
    /// reads, no body), it is back in the pool, ready, once the body ends,
    /// and every request goes on the one connection.
    #[tokio::test]
    async fn a_connection_is_reused_after_each_kind_of_response_body() {
        let up = Upstream::start();
        let client = up.client(Duration::from_secs(60));
        for path in ["/", "/chunked", "/none", "/chunked", "/", "/none"] {
            let want = if path == "/none" { "" } else { "hello" };
            assert_eq!(get_text(&client, path).await, want, "{path}");
            assert_eq!(client.idle_connections(0), 1, "{path}");
        }
        assert_eq!((up.accepted(), up.requests()), (1, 6));
    }

    /// A request body that never ends: the upstream answers before it has
    /// all of it.
    struct Endless;

    impl http_body::Body for Endless {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Pending
        }
    }

    /// An early response: the upstream answers while the request's body is
    /// still being sent. The response comes through whole; the connection,
    /// busy with the body, is not pooled (it finishes in a task of its own),
    /// and the next request goes on a new one.
    #[tokio::test]
    async fn a_connection_still_sending_after_an_early_response_is_not_pooled() {
        let up = Upstream::start();
        let client = up.client(Duration::from_secs(60));
        let mut request = Request::new(UpstreamBody::new(body::boxed(Endless)).0);
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = "/".parse().expect("path");
        let headers = request.headers_mut();
        headers.insert(http::header::HOST, http::HeaderValue::from_static("up"));
        headers.insert(
            http::header::CONTENT_LENGTH,
            http::HeaderValue::from_static("10"),
        );
        let response = tokio::time::timeout(Duration::from_secs(5), client.send(0, request))
            .await
            .expect("no hang")
            .expect("response");
        let bytes = response.into_body().collect().await.expect("body");
        assert_eq!(&bytes.to_bytes()[..], b"hello");
        assert_eq!(client.idle_connections(0), 0);
        assert_eq!(get_text(&client, "/").await, "hello");
        assert_eq!(up.accepted(), 2);
    }

    /// Idle connections have no task watching them: two the upstream has
    /// closed (their FIN taken in by the runtime, the reaper not run yet) are
    /// handed out in turn; each hands the request back unsent before
    /// writing it, and it goes on the next, then on a new connection.
    #[tokio::test]
    async fn a_request_handed_back_unsent_by_pooled_connections_goes_on_another() {
        let up = Upstream::start();
        let client = up.client(Duration::from_secs(60));
        let (a, b) = tokio::join!(get_text(&client, "/"), get_text(&client, "/"));
        assert_eq!((a.as_str(), b.as_str()), ("hello", "hello"));
        assert_eq!((up.accepted(), client.idle_connections(0)), (2, 2));
        up.close_all();
        wait_for("the upstream to see the closes", || up.closed() == 2).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(client.idle_connections(0), 2, "the reaper has not run");
        assert_eq!(get_text(&client, "/").await, "hello");
        assert_eq!(up.accepted(), 3);
        assert_eq!(up.requests(), 3);
        assert_eq!(client.idle_connections(0), 1);
    }

    /// The reaper drops an idle connection the upstream has closed at its
    /// next tick (a tenth of the idle timeout), long before the timeout.
    #[tokio::test]
    async fn the_reaper_drops_an_idle_connection_the_upstream_closed() {
        let up = Upstream::start();
        let client = up.client(Duration::from_secs(5));
        assert_eq!(get_text(&client, "/").await, "hello");
        assert_eq!(client.idle_connections(0), 1);
        up.close_all();
        wait_for("the reaper to drop it", || client.idle_connections(0) == 0).await;
        assert_eq!(get_text(&client, "/").await, "hello");
        assert_eq!((up.accepted(), up.requests()), (2, 2));
    }

    #[tokio::test]
    async fn a_host_name_is_resolved() {
        let up = Upstream::start();
        let port = up.authority.port_u16().expect("port");
        let client = client_for(&format!("localhost:{port}"), Duration::from_secs(2));
        assert_eq!(get_text(&client, "/").await, "hello");
        assert_eq!(up.accepted(), 1);
    }

    #[tokio::test]
    async fn the_connect_timeout_applies() {
        // A listener that never accepts, its backlog full: further SYNs go
        // unanswered.
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.1:0".parse().expect("addr"))
            .expect("bind");
        let listener = socket.listen(1).expect("listen");
        let addr = listener.local_addr().expect("addr");
        let mut queued = Vec::new();
        for _ in 0..4 {
            let attempt =
                tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr));
            if let Ok(Ok(stream)) = attempt.await {
                queued.push(stream);
            }
        }
        let timeout = Duration::from_millis(300);
        let client = client_for(&addr.to_string(), timeout);
        let started = std::time::Instant::now();
        let error = client.send(0, get("/")).await.err().expect("timed out");
        assert!(matches!(error, ClientError::ConnectTimeout(_)), "{error}");
        assert!(error.is_connect());
        let took = started.elapsed();
        assert!(took >= timeout && took < timeout * 3, "took {took:?}");
    }

    #[tokio::test]
    async fn connect_failures_say_so() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let client = client_for(&addr.to_string(), Duration::from_secs(2));
        let error = client.send(0, get("/")).await.err().expect("refused");
        assert!(error.is_connect(), "{error}");
    }
}
