//! Serving one connection: HTTP/1.1 or HTTP/2 (h2c with prior knowledge,
//! or h2 chosen by ALPN over TLS), plus a watchdog for what hyper does not time: a head not complete within
//! `header_read` of its first byte (the framing watcher, [`super::sniff`],
//! says when one began), a connection with no request in progress for
//! `idle` (from its start, or from its last response's end), and writes
//! that make no progress for `send` (the framing watcher notes a stuck
//! write). hyper's own head timer is off: it starts when a response ends,
//! so it would also close keep-alive connections idle for `header_read`,
//! and it arms a timer for every request. A TLS connection's handshake must
//! finish within `header_read`. An HTTP/2 stream that waits for window past
//! `send` is hyper's to reset (the pipeline asks for it on each response,
//! see `vendor/README.md`), and a stalled request body is the body reader's
//! (`body::ClientBody`).
//!
//! A plain connection whose first bytes are not the HTTP/2 preface (peeked,
//! not read) is served by hyper's HTTP/1 connection itself; any other, and
//! every TLS connection, by hyper-util's auto connection, which reads the
//! preface (or its absence) first ([`serve_plain`]).
//!
//! Over TLS, the names of the client certificate rustls verified (if the
//! listener asks for one, `server.tls.client_auth`) are read once, after
//! the handshake, into [`ConnInfo::client_cert`].
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
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::settings::{ConnSettings, Timeouts};
use super::sniff::SniffIo;
use super::{ConnInfo, Handler, Responding};
use crate::auth::mtls::PeerCert;
use crate::body::Body;

/// hyper refuses read buffers smaller than this.
const MIN_BUF: usize = 8192;

/// Serve `stream` (over TLS when `settings` say so) until the client
/// closes, a timeout fires, or shutdown.
pub(super) async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    mut settings: ConnSettings,
    handler: Arc<dyn Handler>,
    shutdown: CancellationToken,
    closing: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    match settings.tls.take() {
        None => {
            let info = ConnInfo::new(peer, "http", closing);
            serve_plain(stream, info, &settings, handler, shutdown).await
        }
        // Boxed: a TLS connection's state (rustls' connection, the
        // handshake) is several KiB, which every plain connection's task
        // would otherwise reserve too, idle or not.
        Some(config) => {
            Box::pin(serve_tls(
                stream, config, peer, &settings, handler, shutdown, closing,
            ))
            .await
        }
    }
}

/// The TLS handshake within `header_read`, then HTTP over TLS.
async fn serve_tls(
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
    peer: SocketAddr,
    settings: &ConnSettings,
    handler: Arc<dyn Handler>,
    shutdown: CancellationToken,
    closing: CancellationToken,
) {
    let handshake = TlsAcceptor::from(config).accept(stream);
    match tokio::time::timeout(settings.timeouts.header_read, handshake).await {
        Ok(Ok(stream)) => {
            let cert = client_cert(stream.get_ref().1, peer);
            let info = ConnInfo::new(peer, "https", closing).with_client_cert(cert);
            serve_io(stream, info, settings, handler, shutdown).await;
        }
        Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "no TLS handshake within header_read: closing"),
    }
}

/// The names of the client certificate `tls` verified, if the client
/// presented one. rustls verified it already, so one x509-parser cannot
/// read is a gap between the two parsers, not the client's doing: logged,
/// and the connection goes on with no certificate identity.
fn client_cert(tls: &rustls::ServerConnection, peer: SocketAddr) -> Option<Arc<PeerCert>> {
    let end_entity = tls.peer_certificates()?.first()?;
    match PeerCert::from_der(end_entity) {
        Ok(cert) => Some(Arc::new(cert)),
        Err(error) => {
            tracing::warn!(%peer, %error, "verified client certificate unreadable: no consumer");
            None
        }
    }
}

/// The HTTP/2 connection preface (RFC 9113 §3.4), with which a client
/// speaking h2c with prior knowledge opens.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Serve a plain TCP connection. Its first bytes, peeked (hyper reads them
/// later), say whether it is HTTP/1 for certain: they differ from the
/// HTTP/2 preface. Then hyper's own HTTP/1 connection serves it, without
/// hyper-util's auto connection around it, whose version detection passes
/// every later read through one more reader (the bytes it read first are
/// replayed from there) and whose future holds an HTTP/2 connection's state
/// beside the HTTP/1 one. Anything else (the preface, a part of it so far,
/// the end of the stream, an error) goes to the auto connection, as over
/// TLS, which reads the version as it always did.
async fn serve_plain(
    stream: TcpStream,
    info: ConnInfo,
    settings: &ConnSettings,
    handler: Arc<dyn Handler>,
    shutdown: CancellationToken,
) {
    let info = Arc::new(info);
    let gate = Gate::new();
    info.framing.wake_on_change(gate.waker.clone());
    let watchdog = Watchdog::new(&info, settings.timeouts, shutdown);
    tokio::pin!(watchdog);
    let http1 = tokio::select! {
        biased;
        http1 = surely_http1(&stream) => http1,
        // No byte yet: a drain or a close ends the connection, as either
        // ended the auto connection's version detection.
        alarm = gate.watch(watchdog.as_mut()) => {
            if let Alarm::Close(why) = alarm {
                tracing::debug!(peer = %info.peer, "{why}: closing");
            }
            return;
        }
    };
    let io = TokioIo::new(sniffing(stream, &info, settings));
    let svc = Serve {
        handler,
        info: info.clone(),
    };
    if http1 {
        let mut builder = hyper::server::conn::http1::Builder::new();
        http1_settings(&mut builder, settings);
        let conn = builder.serve_connection(io, svc).with_upgrades();
        drive(conn, |c| c.graceful_shutdown(), &info, &gate, watchdog).await;
    } else {
        // Boxed: rare, and the auto connection's future is larger.
        let builder = auto_builder(settings);
        let conn = builder.serve_connection_with_upgrades(io, svc);
        Box::pin(drive(
            conn,
            |c| c.graceful_shutdown(),
            &info,
            &gate,
            watchdog,
        ))
        .await;
    }
    if let Some(tunnel) = info.take_upgraded() {
        tunnel.await;
    }
}

/// Whether the first bytes to arrive on `stream` (left there for hyper)
/// differ from the HTTP/2 preface.
async fn surely_http1(stream: &TcpStream) -> bool {
    let mut first = [0u8; H2_PREFACE.len()];
    match stream.peek(&mut first).await {
        Ok(n) if n > 0 => first[..n] != H2_PREFACE[..n],
        _ => false,
    }
}

/// `io` under the framing watcher of the connection `info` tells of.
fn sniffing<IO>(io: IO, info: &ConnInfo, settings: &ConnSettings) -> SniffIo<IO> {
    SniffIo::new(
        io,
        settings.max_header_bytes.max(MIN_BUF),
        settings.max_chunk_bytes,
        info.framing.clone(),
    )
}

/// hyper's HTTP/1 settings for a connection served with `settings`.
fn http1_settings(builder: &mut hyper::server::conn::http1::Builder, settings: &ConnSettings) {
    builder
        // The watchdog times heads (see the module doc).
        .header_read_timeout(None)
        .max_buf_size(settings.max_header_bytes.max(MIN_BUF))
        .keep_alive(true);
}

/// hyper-util's auto (HTTP/1 or HTTP/2) connection builder, for a
/// connection served with `settings`.
fn auto_builder(settings: &ConnSettings) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        // The watchdog times heads (see the module doc).
        .header_read_timeout(None)
        .max_buf_size(settings.max_header_bytes.max(MIN_BUF))
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(settings.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// Serve HTTP on `io` (over TLS), the connection `info` tells of, through
/// the auto connection (HTTP/1, or HTTP/2 by its preface).
async fn serve_io<IO>(
    io: IO,
    info: ConnInfo,
    settings: &ConnSettings,
    handler: Arc<dyn Handler>,
    shutdown: CancellationToken,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let info = Arc::new(info);
    let io = TokioIo::new(sniffing(io, &info, settings));
    let svc = Serve {
        handler,
        info: info.clone(),
    };
    let builder = auto_builder(settings);
    let conn = builder.serve_connection_with_upgrades(io, svc);
    let gate = Gate::new();
    info.framing.wake_on_change(gate.waker.clone());
    let watchdog = Watchdog::new(&info, settings.timeouts, shutdown);
    tokio::pin!(watchdog);
    drive(conn, |c| c.graceful_shutdown(), &info, &gate, watchdog).await;
    if let Some(tunnel) = info.take_upgraded() {
        tunnel.await;
    }
}

/// hyper's part of a connection, `conn`, until its future completes (the
/// client closed, or an upgrade handed the I/O over) or the watchdog or the
/// shutdown deadline closes the connection; `drain` asks it to finish the
/// requests in flight and take no more. hyper's connection is dropped at
/// the end, so a tunnel registered on a connection closed meanwhile finds
/// no I/O and ends at once.
async fn drive<C, E>(
    conn: C,
    drain: fn(Pin<&mut C>),
    info: &ConnInfo,
    gate: &Gate,
    mut watchdog: Pin<&mut Watchdog>,
) where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    tokio::pin!(conn);
    loop {
        tokio::select! {
            biased;
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(peer = %info.peer, error = %error, "connection ended with an error");
                }
                break;
            }
            alarm = gate.watch(watchdog.as_mut()) => match alarm {
                Alarm::Drain => drain(conn.as_mut()),
                Alarm::Close(why) => {
                    tracing::debug!(peer = %info.peer, "{why}: closing");
                    break;
                }
            },
        }
    }
}

/// The service hyper calls for each request of a connection: the handler,
/// with what the connection knows of itself.
struct Serve {
    handler: Arc<dyn Handler>,
    info: Arc<ConnInfo>,
}

impl hyper::service::Service<Request<Incoming>> for Serve {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, req: Request<Incoming>) -> Answer {
        // Boxed by the handler (see `Handler`): the pipeline's future is
        // several KiB, and lives only as long as its request.
        Answer(self.handler.handle(req, self.info.clone()))
    }
}

/// A response on its way, as hyper's service future: it never fails.
struct Answer(Responding);

impl Future for Answer {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx).map(Ok)
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
        timeouts: Timeouts,
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
    fn new(info: &Arc<ConnInfo>, timeouts: Timeouts, shutdown: CancellationToken) -> Watchdog {
        let start = Instant::now();
        Watchdog {
            info: info.clone(),
            start,
            timeouts,
            draining: false,
            alarm: tokio::time::sleep_until(start + timeouts.idle),
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
            write_blocked_ms: this.info.framing.write_blocked(),
        };
        let now = Instant::now();
        let t = *this.timeouts;
        let next = match look.limit(t) {
            // Busy: the idle clock starts when the response ends.
            None => now + t.idle.min(t.header_read),
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
    /// Since when writes have not gone through, while they are stuck.
    write_blocked_ms: Option<u64>,
}

impl Look {
    /// When the connection must be closed unless something happens first
    /// (since its start), and why; `None` while a request is in flight and
    /// its writes go through.
    ///
    /// `header_read` runs from a head's first byte, `idle` while no request
    /// is in progress (from the start, or from the last response's end),
    /// `send` while a write makes no progress, whatever else is going on.
    fn limit(&self, t: Timeouts) -> Option<(Duration, &'static str)> {
        const HEAD: &str = "no request head within header_read";
        let stuck = self.write_blocked_ms.map(|since| {
            (
                Duration::from_millis(since) + t.send,
                "no write progress within send",
            )
        });
        if self.in_flight > 0 {
            return stuck;
        }
        let last_end = Duration::from_millis(self.last_end_ms);
        let waiting = match (self.head_started_ms, self.blind) {
            // A head cannot be read before the response ahead of it ends.
            (Some(began), _) => (
                Duration::from_millis(began).max(last_end) + t.header_read,
                HEAD,
            ),
            // Heads no longer followed: as hyper's own timer would, from
            // the end of the last response.
            (None, true) if self.requests > 0 => (
                last_end + t.idle.min(t.header_read),
                "idle or no request head",
            ),
            (None, _) => (last_end + t.idle, "idle timeout"),
        };
        Some(match stuck {
            Some(stuck) if stuck.0 < waiting.0 => stuck,
            _ => waiting,
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
        // A load first: the usual answer (not woken) costs no atomic write.
        if !self.flag.woken.load(Ordering::Acquire)
            || !self.flag.woken.swap(false, Ordering::AcqRel)
        {
            return Poll::Pending;
        }
        inner(&mut Context::from_waker(&self.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::mtls::CertField;
    use crate::server::Responding;
    use crate::tls::test_pki::{self, Ca};
    use crate::tls::{server_config, ClientAuth};
    use http::{Request, Response};
    use http_body_util::{BodyExt, Empty};
    use hyper::body::{Bytes, Incoming};
    use tokio::net::TcpListener;

    /// Answers with the connection's proto and the names of its client
    /// certificate.
    struct Names;

    impl Handler for Names {
        fn handle(&self, _: Request<Incoming>, conn: Arc<ConnInfo>) -> Responding {
            let names = conn.client_cert.as_ref().map(|cert| {
                CertField::ALL
                    .map(|field| cert.name(field).unwrap_or("-"))
                    .join(" ")
            });
            let text = format!("{} {}", conn.proto, names.as_deref().unwrap_or("none"));
            Box::pin(async move { Response::new(crate::body::full(text)) })
        }
    }

    /// One connection served with `tls` (none: plain), on a fresh port.
    async fn one_connection(tls: Option<Arc<rustls::ServerConfig>>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let settings = ConnSettings {
            tls,
            timeouts: T,
            max_header_bytes: 16 * 1024,
            max_chunk_bytes: u64::MAX,
        };
        tokio::spawn(async move {
            let (stream, peer) = listener.accept().await.unwrap();
            let (shutdown, closing) = (CancellationToken::new(), CancellationToken::new());
            serve(stream, peer, settings, Arc::new(Names), shutdown, closing).await;
        });
        addr
    }

    /// The body of a `GET /` over `io`, in HTTP/2 or HTTP/1.1.
    async fn get<IO>(io: IO, h2: bool) -> String
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let io = TokioIo::new(io);
        let response = if h2 {
            let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(conn);
            let req = Request::get("https://localhost/").body(Empty::<Bytes>::new());
            send.send_request(req.unwrap()).await.unwrap()
        } else {
            let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            let req = Request::get("/").header("host", "localhost");
            send.send_request(req.body(Empty::<Bytes>::new()).unwrap())
                .await
                .unwrap()
        };
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn requests_see_the_client_certificate_of_their_connection() {
        let dir = tollgate_testkit::temp_dir("conn-mtls");
        let (servers, clients) = (Ca::new(&dir, "servers"), Ca::new(&dir, "clients"));
        let certificate = servers.server(&dir);
        let auth = ClientAuth {
            ca: &clients.pem,
            required: false,
        };
        let config = server_config(std::slice::from_ref(&certificate), Some(auth)).unwrap();
        let identity = || Some(clients.client("svc.internal", "spiffe://t/svc", "svc"));
        for (alpn, h2) in [(b"h2".as_slice(), true), (b"http/1.1".as_slice(), false)] {
            let client = test_pki::client_config(servers.roots(), identity(), &[alpn]);
            let addr = one_connection(Some(config.clone())).await;
            let tls = test_pki::connect(addr, client).await.unwrap();
            assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn));
            let body = get(tls, h2).await;
            assert_eq!(body, "https svc.internal spiffe://t/svc svc", "h2: {h2}");
        }
        // Over TLS without a certificate, and over plain HTTP: none.
        let anonymous = test_pki::client_config(servers.roots(), None, &[b"http/1.1"]);
        let addr = one_connection(Some(config)).await;
        let tls = test_pki::connect(addr, anonymous).await.unwrap();
        assert_eq!(get(tls, false).await, "https none");
        let addr = one_connection(None).await;
        let plain = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert_eq!(get(plain, false).await, "http none");
        let _ = std::fs::remove_dir_all(&dir);
    }

    const T: Timeouts = Timeouts {
        header_read: Duration::from_secs(10),
        idle: Duration::from_secs(60),
        send: Duration::from_secs(20),
    };

    fn look(requests: u64, in_flight: usize, last_end_ms: u64) -> Look {
        Look {
            in_flight,
            requests,
            last_end_ms,
            head_started_ms: None,
            blind: false,
            write_blocked_ms: None,
        }
    }

    fn secs(look: Look) -> Option<u64> {
        look.limit(T).map(|(d, _)| d.as_secs())
    }

    #[test]
    fn heads_are_timed_from_their_first_byte_and_idle_from_the_last_response() {
        // Nothing yet, not a byte: idle from the start.
        assert_eq!(secs(look(0, 0, 0)), Some(60));
        // The first head began at 3 s: header_read from its first byte.
        let first = Look {
            head_started_ms: Some(3_000),
            ..look(0, 0, 0)
        };
        assert_eq!(secs(first), Some(13));
        // Busy: nothing due.
        assert_eq!(secs(look(1, 1, 0)), None);
        // Idle after a response at 5 s: `idle` from then, not header_read.
        assert_eq!(secs(look(1, 0, 5_000)), Some(65));
        // A head began at 30 s: header_read from its first byte.
        let partial = Look {
            head_started_ms: Some(30_000),
            ..look(1, 0, 5_000)
        };
        assert_eq!(secs(partial), Some(40));
        // One that began while a response was on its way: from that end.
        let early = Look {
            head_started_ms: Some(2_000),
            ..look(1, 0, 5_000)
        };
        assert_eq!(secs(early), Some(15));
        // Heads no longer followed: the earlier of the two, from the end.
        let blind = Look {
            blind: true,
            ..look(1, 0, 5_000)
        };
        assert_eq!(secs(blind), Some(15));
    }

    #[test]
    fn a_write_that_makes_no_progress_is_timed_by_send_whatever_else_goes_on() {
        // In flight, its writes stuck since 7 s.
        let stuck = Look {
            write_blocked_ms: Some(7_000),
            ..look(1, 1, 0)
        };
        assert_eq!(secs(stuck), Some(27));
        // Idle (the last response handed over at 5 s) with a write stuck
        // since 4 s: the earlier limit.
        let idle = Look {
            write_blocked_ms: Some(4_000),
            ..look(1, 0, 5_000)
        };
        assert_eq!(secs(idle), Some(24));
        let late = Look {
            write_blocked_ms: Some(50_000),
            ..look(1, 0, 5_000)
        };
        assert_eq!(secs(late), Some(65));
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
