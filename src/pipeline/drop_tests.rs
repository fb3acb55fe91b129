//! A request future dropped at random points (the client gone at any
//! moment): every reservation is settled exactly once, and the budget in
//! the store is what the rule says (docs/configuration/cost.md).
//!
//! The gateway's handler runs behind a real hyper server connection on an
//! in-memory pipe, in front of a real upstream on loopback that streams a
//! chat completion with its usage; the handler's future is dropped after
//! its k-th poll, for random k. What the budget may then hold is one of
//! three things, told apart by what was seen: nothing charged (dropped
//! before admission), the estimate (`on_missing_usage: keep_estimate`:
//! dropped after admission, before the response was whole), or the usage
//! (the response read to its end).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use proptest::prelude::*;
use tokio::net::TcpListener;

use super::handle;
use crate::body::Body;
use crate::runtime::Runtime;
use crate::server::ConnInfo;
use crate::shared::Shared;

/// The usage the upstream reports: 10 prompt and 20 completion tokens.
const USAGE: u64 = 30;

/// The request body: 57 bytes, `max_tokens` 60: an estimate of 117.
const BODY: &str = r#"{"model":"m","max_tokens":60,"messages":[],"stream":true}"#;

/// An upstream streaming a chat completion in a few chunks, a little
/// apart, with its usage (the gateway forces `include_usage`); counts the
/// requests it got.
async fn upstream() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    count.fetch_add(1, Ordering::SeqCst);
                    async move {
                        let _ = req.into_body().collect().await;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
                        tokio::spawn(async move {
                            for chunk in [
                                &b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n"[..],
                                b"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"usage\":null}\n\n",
                                b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":20}}\n\n",
                                b"data: [DONE]\n\n",
                            ] {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                if tx.send(Bytes::from_static(chunk)).await.is_err() {
                                    return;
                                }
                            }
                        });
                        let body = http_body_util::StreamBody::new(
                            tokio_stream_of(rx)
                                .map(|b| Ok::<_, Infallible>(hyper::body::Frame::data(b))),
                        );
                        Ok::<_, Infallible>(Response::new(body))
                    }
                });
                let io = TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    (url, seen)
}

/// The frames `rx` receives, as a stream.
fn tokio_stream_of(
    rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
}

use futures_util::StreamExt as _;

/// The handler's future, dropped after `polls` polls: the connection then
/// ends as if the client had gone.
struct DropAfter<F> {
    inner: Option<Pin<Box<F>>>,
    polls: usize,
}

impl<F: Future<Output = Response<Body>>> Future for DropAfter<F> {
    type Output = Result<Response<Body>, std::io::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.polls == 0 {
            self.inner = None;
            return Poll::Ready(Err(std::io::Error::other("the client went away")));
        }
        self.polls -= 1;
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(Err(std::io::Error::other("dropped")));
        };
        inner.as_mut().poll(cx).map(Ok)
    }
}

/// How far a request's response got to its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Got {
    /// Nothing: the handler was dropped first.
    Nothing,
    /// The head and some of the body: the client left then.
    Head,
    /// The whole body.
    Whole,
}

/// One request whose handler is dropped after `polls` polls and whose
/// client reads at most `frames` frames of the response body before it
/// leaves; how far its response got.
async fn one_request(shared: &Arc<Shared>, tenant: &str, polls: usize, frames: usize) -> Got {
    let (client_io, server_io) = tokio::io::duplex(64 << 10);
    let conn = Arc::new(ConnInfo::new(
        "127.0.0.1:40000".parse().unwrap(),
        "http",
        tokio_util::sync::CancellationToken::new(),
    ));
    let shared2 = shared.clone();
    let server = tokio::spawn(async move {
        let service = hyper::service::service_fn(move |req: Request<Incoming>| DropAfter {
            inner: Some(Box::pin(handle(req, shared2.clone(), conn.clone()))),
            polls,
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(server_io), service)
            .await;
    });
    let whole = async {
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(client_io))
                .await
                .ok()?;
        tokio::spawn(connection);
        let req = Request::post("/v1/chat/completions")
            .header("host", "gw")
            .header("content-type", "application/json")
            .header("x-tenant", tenant)
            .body(Full::new(Bytes::from_static(BODY.as_bytes())))
            .ok()?;
        let response = sender.send_request(req).await.ok()?;
        let mut body = response.into_body();
        let mut text = Vec::new();
        for _ in 0..frames {
            match body.frame().await {
                Some(Ok(frame)) => text.extend_from_slice(frame.data_ref().map_or(&[][..], |d| d)),
                _ => break,
            }
        }
        // The client leaves here (the connection with it).
        let ended = body.is_end_stream() || text.ends_with(b"data: [DONE]\n\n");
        Some(if ended { Got::Whole } else { Got::Head })
    };
    let got = tokio::time::timeout(Duration::from_secs(5), whole)
        .await
        .ok()
        .flatten()
        .unwrap_or(Got::Nothing);
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    got
}

/// The units `tenant` has used of the budget, as the store says.
async fn used(shared: &Shared, tenant: &str) -> u64 {
    let rt = shared.runtime.load_full();
    let route = rt.routes.first().expect("the route").clone();
    let mut headers = http::HeaderMap::new();
    headers.insert("x-tenant", tenant.parse().unwrap());
    let view = crate::limit::key::RequestView {
        client: "127.0.0.1".parse().unwrap(),
        headers: &headers,
        query: None,
        route: &route.name,
        ipv6_prefix: 64,
        identity: None,
    };
    let plan = crate::limit::plan::plan(&route.limits, &view, rt.limiter.now(), || 1).unwrap();
    let outcome = rt.limiter.probe(&plan.checks).await.unwrap().remove(0);
    // The probe takes 1 unit: what is left is one more than it says.
    100_000 - (outcome.remaining + 1)
}

/// A counter of `metrics` for the budget, by its labels' tail.
fn counter(shared: &Shared, series: &str) -> u64 {
    let text = shared.metrics.render();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

fn settled(shared: &Shared) -> u64 {
    ["settled", "refund", "extra", "missing_usage", "dropped"]
        .iter()
        .map(|o| {
            counter(
                shared,
                &format!("tollgate_cost_settlements_total{{limit=\"tokens\",outcome=\"{o}\"}}"),
            )
        })
        .sum()
}

fn reserved(shared: &Shared) -> u64 {
    counter(
        shared,
        "tollgate_cost_units_total{limit=\"tokens\",phase=\"reserved\"}",
    )
}

/// The gateway's state in front of `upstream`.
fn gateway(upstream: &str) -> Arc<Shared> {
    let yaml = format!(
        r#"
upstreams:
  llm: {{ targets: ["{upstream}"] }}
limits:
  tokens:
    algorithm: fixed_window
    limit: 100000
    window: 1000d
    key: "header:x-tenant"
    cost:
      reserve: llm
      settle: llm_usage
      llm: {{ api: openai, bytes_per_token: 1, stream_usage: force }}
      on_missing_usage: keep_estimate
routes:
  - {{ name: llm, match: {{ path: /v1/ }}, upstream: llm, limits: [tokens] }}
"#
    );
    let loaded = crate::config::parse(&yaml, "t.yaml").expect("config");
    Shared::new(Runtime::build(loaded.config, String::new(), 1, None).expect("runtime"))
}

/// Runs the cases `drops` (the handler's polls, the body frames read) one
/// after the other, each from a tenant of its own, and checks each one's
/// ledger.
async fn check_drops(drops: &[(usize, usize)]) -> Result<(), TestCaseError> {
    let (url, seen) = upstream().await;
    let shared = gateway(&url);
    let estimate = BODY.len() as u64 + 60;
    for (i, &(polls, frames)) in drops.iter().enumerate() {
        let tenant = format!("t{i}");
        let (reserved0, settled0, seen0) = (
            reserved(&shared),
            settled(&shared),
            seen.load(Ordering::SeqCst),
        );
        let got = one_request(&shared, &tenant, polls, frames).await;
        // Settlements to the memory store are applied at once.
        let admitted = reserved(&shared) - reserved0;
        let forwarded = seen.load(Ordering::SeqCst) > seen0;
        let used = used(&shared, &tenant).await;
        let settlements = settled(&shared) - settled0;
        prop_assert!(
            admitted == 0 || admitted == estimate,
            "{polls} polls: reserved {admitted}"
        );
        prop_assert!(
            !forwarded || admitted == estimate,
            "{polls} polls: forwarded unadmitted"
        );
        prop_assert_eq!(
            settlements,
            u64::from(admitted > 0),
            "{} polls: settled once",
            polls
        );
        let ok = match (admitted > 0, got) {
            (false, _) => used == 0,
            (true, Got::Whole) => used == USAGE,
            // Dropped before the response: nothing says what it cost.
            (true, Got::Nothing) => used == estimate,
            // Gone mid-body: the usage, if the gateway read it before.
            (true, Got::Head) => used == estimate || used == USAGE,
        };
        prop_assert!(
            ok,
            "{} polls, {} frames: {:?}, used {}",
            polls,
            frames,
            got,
            used
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn a_request_dropped_anywhere_settles_exactly_once(
        drops in proptest::collection::vec((0usize..12, 0usize..8), 12),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(check_drops(&drops))?;
    }
}

#[tokio::test]
async fn every_drop_point_up_to_a_whole_response() {
    // Each poll count from none to enough for the head, then each frame
    // count from none to the whole body.
    let mut drops: Vec<(usize, usize)> = (0..12).map(|p| (p, 8)).collect();
    drops.extend((0..8).map(|f| (100, f)));
    check_drops(&drops).await.unwrap();
}
