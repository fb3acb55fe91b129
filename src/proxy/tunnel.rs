//! HTTP/1.1 upgrades (WebSocket and any other `Upgrade` protocol but h2c),
//! tunnelled after the upstream's `101 Switching Protocols` (docs/protocols.md).
//!
//! The upgrade request goes through the pipeline like any other (admission,
//! the route's limits, then forwarding with its `Upgrade` and
//! `Connection: upgrade` kept: [`wanted`] says when). When the upstream
//! answers 101, the gateway relays the 101 and [`run`] joins the two
//! connections hyper hands over (the client's once the 101 is written, the
//! upstream's once its head is read) and copies bytes both ways until:
//!
//! - either side closes: what it sent is flushed to the other side, which
//!   then gets a FIN, and both connections are closed;
//! - no byte went either way for `timeouts.idle`;
//! - the shutdown grace has run out;
//! - either connection fails.
//!
//! A write that makes no progress (a peer that stopped reading) stops the
//! reads that would feed it, so it ends as an idle tunnel.
//!
//! `Upgrade: h2c` is never forwarded: an h2c connection through the tunnel
//! would carry requests no route or limit ever sees.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{header, HeaderMap, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Whether a request with this version and these headers asks for an
/// upgrade the gateway forwards: HTTP/1.1, `Connection` lists `upgrade`, and
/// an `Upgrade` header offers protocols none of which is h2c.
pub fn wanted(version: Version, headers: &HeaderMap) -> bool {
    if version != Version::HTTP_11 || !headers.contains_key(header::UPGRADE) {
        return false;
    }
    let lists = |name: header::HeaderName, token: &[u8]| {
        headers.get_all(name).iter().any(|value| {
            value.as_bytes().split(|&b| b == b',').any(|t| {
                let t = t.trim_ascii();
                // A protocol may carry a version: `h2c/1`.
                let name = t.split(|&b| b == b'/').next().unwrap_or(t);
                name.eq_ignore_ascii_case(token)
            })
        })
    };
    lists(header::CONNECTION, b"upgrade") && !lists(header::UPGRADE, b"h2c")
}

/// Why a tunnel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The client closed its side.
    ClientClosed,
    /// The upstream closed its side.
    UpstreamClosed,
    /// No byte went either way for the idle timeout.
    Idle,
    /// The shutdown grace ran out.
    Shutdown,
    /// A connection failed, or one of the two was never handed over.
    Failed,
}

impl End {
    /// The name the access log gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            End::ClientClosed => "client_closed",
            End::UpstreamClosed => "upstream_closed",
            End::Idle => "idle_timeout",
            End::Shutdown => "shutdown",
            End::Failed => "error",
        }
    }

    /// Whether one of the two sides ended it (rather than the gateway or an
    /// error).
    pub fn closed_by_a_side(self) -> bool {
        matches!(self, End::ClientClosed | End::UpstreamClosed)
    }
}

/// What a tunnel carried, and why it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Bytes read from the client (and sent upstream, unless the tunnel
    /// ended midway).
    pub from_client: u64,
    /// Bytes read from the upstream (and sent to the client, likewise).
    pub to_client: u64,
    /// Why it ended.
    pub end: End,
}

/// The two sides of an upgrade the upstream accepted, until hyper hands
/// them over: the client's once the 101 is written, the upstream's once its
/// 101 has been read.
pub struct Pending {
    /// From the client's request (`hyper::upgrade::on`).
    pub client: OnUpgrade,
    /// From the upstream's 101 response.
    pub upstream: OnUpgrade,
}

/// Take over both upgraded connections and tunnel between them until one
/// of them closes, the tunnel is idle for `idle`, or `closing` is cancelled
/// (see the module doc).
pub async fn open(sides: Pending, idle: Duration, closing: &CancellationToken) -> Summary {
    let failed = Summary {
        from_client: 0,
        to_client: 0,
        end: End::Failed,
    };
    let both = async { tokio::try_join!(sides.client, sides.upstream) };
    let (client, upstream) = tokio::select! {
        joined = both => match joined {
            Ok(both) => both,
            Err(error) => {
                tracing::debug!(%error, "upgrade not completed");
                return failed;
            }
        },
        _ = closing.cancelled() => return Summary { end: End::Shutdown, ..failed },
    };
    run(TokioIo::new(client), TokioIo::new(upstream), idle, closing).await
}

/// Copy bytes between `client` and `upstream` until one of them closes, no
/// byte moved for `idle`, `closing` is cancelled, or an I/O error.
pub async fn run<C, U>(
    client: C,
    upstream: U,
    idle: Duration,
    closing: &CancellationToken,
) -> Summary
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let started = Instant::now();
    let meter = Meter {
        started,
        last_ms: AtomicU64::new(0),
        from_client: AtomicU64::new(0),
        to_client: AtomicU64::new(0),
    };
    let (client_r, mut client_w) = tokio::io::split(client);
    let (upstream_r, mut upstream_w) = tokio::io::split(upstream);
    let mut client_r = Metered {
        inner: client_r,
        meter: &meter,
        count: &meter.from_client,
    };
    let mut upstream_r = Metered {
        inner: upstream_r,
        meter: &meter,
        count: &meter.to_client,
    };
    let up = async {
        tokio::io::copy(&mut client_r, &mut upstream_w).await?;
        upstream_w.shutdown().await
    };
    let down = async {
        tokio::io::copy(&mut upstream_r, &mut client_w).await?;
        client_w.shutdown().await
    };
    tokio::pin!(up, down);
    let alarm = tokio::time::sleep(idle);
    tokio::pin!(alarm);
    let end = loop {
        tokio::select! {
            done = &mut up => break done.map_or(End::Failed, |()| End::ClientClosed),
            done = &mut down => break done.map_or(End::Failed, |()| End::UpstreamClosed),
            _ = closing.cancelled() => break End::Shutdown,
            _ = &mut alarm => {
                let last = started + Duration::from_millis(meter.last_ms.load(Ordering::Relaxed));
                if Instant::now() >= last + idle {
                    break End::Idle;
                }
                alarm.as_mut().reset(last + idle);
            }
        }
    };
    Summary {
        from_client: meter.from_client.load(Ordering::Relaxed),
        to_client: meter.to_client.load(Ordering::Relaxed),
        end,
    }
}

/// What both directions of a tunnel record: bytes each way, and when a byte
/// last moved.
struct Meter {
    started: Instant,
    /// Milliseconds from `started` to the last read that brought bytes.
    last_ms: AtomicU64,
    from_client: AtomicU64,
    to_client: AtomicU64,
}

/// A reader that counts its bytes in `count` and stamps the meter's clock.
struct Metered<'a, R> {
    inner: R,
    meter: &'a Meter,
    count: &'a AtomicU64,
}

impl<R: AsyncRead + Unpin> AsyncRead for Metered<'_, R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = (buf.filled().len() - before) as u64;
        if read > 0 {
            self.count.fetch_add(read, Ordering::Relaxed);
            let ms = self.meter.started.elapsed().as_millis() as u64;
            self.meter.last_ms.store(ms, Ordering::Relaxed);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{duplex, AsyncReadExt, DuplexStream};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn an_upgrade_is_wanted_only_when_asked_for_properly_and_not_h2c() {
        let ws = [
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
        ];
        assert!(wanted(Version::HTTP_11, &headers(&ws)));
        assert!(wanted(
            Version::HTTP_11,
            &headers(&[("connection", "upgrade"), ("upgrade", "foo/2, bar")])
        ));
        // No Connection: upgrade, no Upgrade, the wrong version.
        assert!(!wanted(
            Version::HTTP_11,
            &headers(&[("upgrade", "websocket")])
        ));
        assert!(!wanted(
            Version::HTTP_11,
            &headers(&[("connection", "upgrade")])
        ));
        assert!(!wanted(Version::HTTP_10, &headers(&ws)));
        assert!(!wanted(Version::HTTP_2, &headers(&ws)));
        // h2c, alone, versioned, or among others.
        for offer in ["h2c", "H2C", "h2c/1", "websocket, h2c"] {
            let h = headers(&[
                ("connection", "Upgrade, HTTP2-Settings"),
                ("upgrade", offer),
            ]);
            assert!(!wanted(Version::HTTP_11, &h), "{offer}");
        }
        let mut split = headers(&ws);
        split.append("upgrade", "h2c".parse().unwrap());
        assert!(!wanted(Version::HTTP_11, &split));
    }

    /// A tunnel between two in-memory pipes: the test holds the far end of
    /// each (the client's and the upstream's).
    fn pipes() -> ((DuplexStream, DuplexStream), (DuplexStream, DuplexStream)) {
        (duplex(64 * 1024), duplex(64 * 1024))
    }

    #[tokio::test]
    async fn bytes_go_both_ways_and_either_close_ends_it() {
        let ((client, mut client_far), (upstream, mut upstream_far)) = pipes();
        let closing = CancellationToken::new();
        let tunnel =
            tokio::spawn(
                async move { run(client, upstream, Duration::from_secs(60), &closing).await },
            );
        client_far.write_all(b"hello").await.unwrap();
        let mut got = [0u8; 5];
        upstream_far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
        upstream_far.write_all(b"back!!").await.unwrap();
        let mut got = [0u8; 6];
        client_far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"back!!");
        // The upstream says its last word and closes: the client gets it,
        // then the end.
        upstream_far.write_all(b"bye").await.unwrap();
        upstream_far.shutdown().await.unwrap();
        let summary = tunnel.await.unwrap();
        let mut rest = Vec::new();
        client_far.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"bye");
        assert_eq!(
            summary,
            Summary {
                from_client: 5,
                to_client: 9,
                end: End::UpstreamClosed
            }
        );

        let ((client, mut client_far), (upstream, mut upstream_far)) = pipes();
        let closing = CancellationToken::new();
        let tunnel =
            tokio::spawn(
                async move { run(client, upstream, Duration::from_secs(60), &closing).await },
            );
        client_far.write_all(b"x").await.unwrap();
        drop(client_far);
        assert_eq!(tunnel.await.unwrap().end, End::ClientClosed);
        let mut rest = Vec::new();
        upstream_far.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"x");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_tunnel_ends_after_the_idle_timeout_and_traffic_keeps_it_open() {
        let ((client, mut client_far), (upstream, mut upstream_far)) = pipes();
        let idle = Duration::from_secs(10);
        let closing = CancellationToken::new();
        let started = Instant::now();
        let tunnel = tokio::spawn(async move { run(client, upstream, idle, &closing).await });
        // A byte every 6 s, one way then the other, for 30 s: never idle.
        let mut byte = [0u8; 1];
        for i in 0..5 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            if i % 2 == 0 {
                client_far.write_all(b"c").await.unwrap();
                upstream_far.read_exact(&mut byte).await.unwrap();
            } else {
                upstream_far.write_all(b"u").await.unwrap();
                client_far.read_exact(&mut byte).await.unwrap();
            }
        }
        assert!(!tunnel.is_finished());
        let summary = tunnel.await.unwrap();
        assert_eq!(summary.end, End::Idle);
        assert_eq!((summary.from_client, summary.to_client), (3, 2));
        // The last byte at 30 s, closed 10 s later.
        assert_eq!(started.elapsed(), Duration::from_secs(40));
        // Both far ends see the close.
        assert_eq!(client_far.read(&mut byte).await.unwrap(), 0);
        assert_eq!(upstream_far.read(&mut byte).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn closing_ends_it() {
        let ((client, mut client_far), (upstream, _upstream_far)) = pipes();
        let closing = CancellationToken::new();
        let token = closing.clone();
        let tunnel =
            tokio::spawn(
                async move { run(client, upstream, Duration::from_secs(60), &token).await },
            );
        closing.cancel();
        assert_eq!(tunnel.await.unwrap().end, End::Shutdown);
        let mut byte = [0u8; 1];
        assert_eq!(client_far.read(&mut byte).await.unwrap(), 0);
    }
}
