//! Serving one connection: HTTP/1.1 or HTTP/2 (h2c with prior knowledge,
//! or h2 chosen by ALPN over TLS) through hyper-util's auto builder, plus a
//! watchdog for what hyper does not time: a connection that sends nothing
//! (or not a whole head) within `header_read` of opening, and a keep-alive
//! connection idle for `idle`. A TLS connection's handshake must finish
//! within `header_read` too.
//!
//! An HTTP/1.1 upgrade ends hyper's part: once the 101 is written, hyper's
//! connection future completes and hands the connection's I/O to the
//! request's `OnUpgrade` (it closes nothing itself). The watchdog ends with
//! it, so it never times a tunnel out or closes what hyper handed over;
//! the tunnel the handler registered ([`ConnInfo::after_upgrade`]) then runs
//! on this task, with its own idle timer, so the connection stays counted
//! (`max_connections`, the connections gauge) and tracked for shutdown.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

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
        Some(config) => {
            let header_read = shared.runtime.load().config.server.header_read_timeout;
            let handshake = TlsAcceptor::from(config).accept(stream);
            match tokio::time::timeout(header_read, handshake).await {
                Ok(Ok(stream)) => {
                    serve_io(stream, "https", peer, &shared, handler, shutdown, closing).await;
                }
                Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "no TLS handshake within header_read: closing"),
            }
        }
    }
    shared.metrics.connections.dec();
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
        .timer(TokioTimer::new())
        .header_read_timeout(header_read)
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

        // The watchdog: until the first request, `header_read` from the start;
        // then `idle` from the end of the last response while none is in flight.
        // It wakes only when a deadline may have passed and reads the clock the
        // requests leave in `activity`: nothing per request.
        let start = tokio::time::Instant::now();
        let look_every = idle.min(header_read);
        let alarm = tokio::time::sleep_until(start + look_every);
        tokio::pin!(alarm);
        let mut draining = false;
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, error = %error, "connection ended with an error");
                    }
                    break;
                }
                _ = shutdown.cancelled(), if !draining => {
                    draining = true;
                    conn.as_mut().graceful_shutdown();
                }
                _ = info.closing.cancelled() => break,
                _ = &mut alarm => {
                    let (in_flight, requests, last_end_ms) = info.activity.snapshot();
                    let now = tokio::time::Instant::now();
                    let next = if in_flight > 0 {
                        // Busy: the idle clock starts when the response ends.
                        now + look_every
                    } else if requests == 0 {
                        let limit = start + header_read;
                        if now >= limit {
                            tracing::debug!(%peer, "no request head within header_read: closing");
                            break;
                        }
                        limit
                    } else {
                        let limit = start + Duration::from_millis(last_end_ms) + idle;
                        if now >= limit {
                            tracing::debug!(%peer, "idle timeout: closing");
                            break;
                        }
                        limit
                    };
                    alarm.as_mut().reset(next);
                }
            }
        }
    }
    if let Some(tunnel) = info.take_upgraded() {
        tunnel.await;
    }
}
