//! Span export (`telemetry:`, docs/traces.md) against a real OTLP receiver
//! started here (tests/common/otlp.rs, decoding the wire format with
//! the `opentelemetry-proto` types), over OTLP/HTTP and OTLP/gRPC: a span
//! per request with its route, status and limit decisions, a child per
//! upstream attempt and per store call, linked to the client's trace and
//! named in the upstream's `traceparent`; parent-based sampling; a
//! collector that is down or slow drops spans (counted) without slowing
//! requests; a reload that changes the exporter drops no request.

mod common;

use std::time::{Duration, Instant};

use common::client::{self, Proto};
use common::otlp::{self, Collector, Protocol, Span};
use common::{ClosedPort, Echo, Gateway};
use http::Request;
use sha2::{Digest, Sha256};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
const WAIT: Duration = Duration::from_secs(10);
/// The API key of consumer `acme-app` (tenant `acme`, plan `gold`).
const API_KEY: &str = "k-4f2a9c1e77d04b3a";

/// The gateway's config: routes `api` (limit `two`: 2 per `x-user`),
/// `lock` (limit `locking`: 1 per `x-user`, then locked out), `broken`
/// (an upstream that refuses connections), `local` (answered by the
/// gateway) and `keyed` (an API key required), exporting to `endpoint` over `protocol` with `sample`.
fn config(echo: &Echo, down: &ClosedPort, endpoint: &str, protocol: &str, sample: &str) -> String {
    common::config(&format!(
        r#"
        upstreams:
          e: {{ targets: ["{echo}"] }}
          down: {{ targets: ["http://{down}"] }}
        limits:
          two: {{ algorithm: fixed_window, limit: 2, window: 1h, key: "header:x-user" }}
          locking: {{ algorithm: fixed_window, limit: 1, window: 1h, key: "header:x-user", lockout: {{ after: 1, duration: 1h }} }}
        routes:
          - {{ name: api, match: {{ path: /api }}, upstream: e, limits: [two] }}
          - {{ name: lock, match: {{ path: /lock }}, upstream: e, limits: [locking] }}
          - {{ name: broken, match: {{ path: /broken }}, upstream: down }}
          - {{ name: local, match: {{ path: /local }}, respond: {{ status: 204 }} }}
          - {{ name: keyed, match: {{ path: /keyed }}, upstream: e, auth: {{ require: [api_key] }} }}
        consumers:
          api_keys: {{ header: x-api-key }}
          list:
            - {{ name: acme-app, tenant: acme, plan: gold, keys: ["sha256:{key}"] }}
        telemetry:
          otlp: {{ endpoint: "{endpoint}", protocol: {protocol}, headers: {{ x-tenant: acme }} }}
          sample: {sample}
          service_name: edge
        "#,
        echo = echo.url(),
        down = down.addr(),
        key = hex::encode(Sha256::digest(API_KEY.as_bytes())),
    ))
}

/// `GET path` with `headers`; the status.
async fn get(gw: &Gateway, path: &str, headers: &[(&str, &str)]) -> u16 {
    let mut req = Request::builder().uri(path).header("host", "gw.example");
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let r = client::send_on_new_conn(gw.addr(), Proto::H1, req.body(client::empty()).unwrap())
        .await
        .unwrap();
    r.status.as_u16()
}

/// [`get`] with the client's `traceparent` for trace `trace` (sampled)
/// before `headers`.
async fn get_traced(gw: &Gateway, path: &str, trace: &str, headers: &[(&str, &str)]) -> u16 {
    let parent = parent(trace);
    let mut all = vec![("traceparent", parent.as_str())];
    all.extend_from_slice(headers);
    get(gw, path, &all).await
}

/// A client's `traceparent` for trace `trace` (sampled).
fn parent(trace: &str) -> String {
    format!("00-{trace}-{PARENT}-01")
}

/// A new trace id for one request of a test.
fn trace_id(n: u8) -> String {
    format!("{TRACE:.30}{n:02x}")
}

fn one<'a>(spans: &'a [Span], what: &str, pred: impl Fn(&Span) -> bool) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| pred(s)).collect();
    assert_eq!(found.len(), 1, "one {what} span: {spans:#?}");
    found[0]
}

/// The request's server span, its attempt spans and its store spans.
fn parts(spans: &[Span]) -> (&Span, Vec<&Span>, Vec<&Span>) {
    let server = one(spans, "server", |s| s.kind == otlp::KIND_SERVER);
    let attempts = spans
        .iter()
        .filter(|s| s.name.starts_with("upstream "))
        .collect();
    let stores = spans
        .iter()
        .filter(|s| s.name.starts_with("store "))
        .collect();
    (server, attempts, stores)
}

/// The limit events of a span: (limit, decision).
fn decisions(span: &Span) -> Vec<(String, String)> {
    span.events
        .iter()
        .filter(|(name, _)| name == "limit")
        .map(|(_, a)| {
            (
                a["tollgate.limit"].clone(),
                a["tollgate.limit.decision"].clone(),
            )
        })
        .collect()
}

/// The allowed, rejected, locked-out and upstream-error requests' spans,
/// exported over `protocol`.
async fn spans_of_each_outcome(protocol: Protocol) {
    let (collector, echo, down) = (
        Collector::start().await,
        Echo::start("e").await,
        ClosedPort::bind(),
    );
    let name = match protocol {
        Protocol::Http => "http",
        Protocol::Grpc => "grpc",
    };
    let gw = Gateway::start(&config(&echo, &down, &collector.url(), name, "1.0")).await;

    // Allowed: continued from the client's span, one attempt, one store
    // call, the upstream's parent is the attempt.
    let t = trace_id(1);
    assert_eq!(
        get_traced(&gw, "/api/a", &t, &[("x-user", "ann")]).await,
        200
    );
    let seen = echo.last().unwrap().header("traceparent").unwrap();
    let spans = collector.wait_trace(&t, 3, WAIT).await;
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let (server, attempts, stores) = parts(&spans);
    assert_eq!(server.protocol, protocol);
    assert_eq!(server.service_name, "edge");
    assert_eq!(server.scope, "tollgate");
    assert_eq!(
        server.headers.get("x-tenant").map(String::as_str),
        Some("acme")
    );
    assert_eq!(server.name, "GET api");
    assert_eq!(
        server.parent_span_id, PARENT,
        "the client's span is the parent"
    );
    assert_eq!(server.attr("tollgate.route"), Some("api"));
    assert_eq!(server.attr("http.response.status_code"), Some("200"));
    assert_eq!(server.attr("http.request.method"), Some("GET"));
    assert_eq!(server.attr("url.path"), Some("/api/a"));
    assert_eq!(server.attr("tollgate.decision"), Some("allowed"));
    assert_eq!(server.attr("tollgate.store.outcome"), Some("ok"));
    assert_ne!(server.status, otlp::STATUS_ERROR);
    assert_eq!(decisions(server), vec![("two".into(), "allowed".into())]);
    assert!(server.start_ns > 0 && server.end_ns >= server.start_ns);
    assert_eq!(attempts.len(), 1);
    let attempt = attempts[0];
    assert_eq!(attempt.kind, otlp::KIND_CLIENT);
    assert_eq!(attempt.parent_span_id, server.span_id);
    assert_eq!(attempt.name, "upstream e");
    assert_eq!(attempt.attr("http.response.status_code"), Some("200"));
    assert_eq!(
        seen,
        format!("00-{t}-{}-01", attempt.span_id),
        "the upstream's parent is the gateway's attempt span"
    );
    assert_eq!(stores.len(), 1);
    assert_eq!(stores[0].name, "store memory");
    assert_eq!(stores[0].parent_span_id, server.span_id);
    assert_eq!(stores[0].attr("tollgate.store.outcome"), Some("ok"));
    assert!(attempt.start_ns >= server.start_ns && attempt.end_ns <= server.end_ns);

    // Rejected: the limit's decision, no attempt.
    assert_eq!(get(&gw, "/api/b", &[("x-user", "bob")]).await, 200);
    assert_eq!(get(&gw, "/api/b", &[("x-user", "bob")]).await, 200);
    let t = trace_id(2);
    assert_eq!(
        get_traced(&gw, "/api/b", &t, &[("x-user", "bob")]).await,
        429
    );
    let spans = collector.wait_trace(&t, 2, WAIT).await;
    let (server, attempts, _) = parts(&spans);
    assert_eq!(server.attr("http.response.status_code"), Some("429"));
    assert_eq!(server.attr("tollgate.decision"), Some("rejected"));
    assert_eq!(decisions(server), vec![("two".into(), "rejected".into())]);
    assert!(attempts.is_empty(), "{spans:#?}");
    assert_ne!(
        server.status,
        otlp::STATUS_ERROR,
        "a 429 is not the server's error"
    );

    // Locked out: the first request passes, the second starts the
    // lockout, the third is turned away by it.
    assert_eq!(get(&gw, "/lock", &[("x-user", "cy")]).await, 200);
    assert_eq!(get(&gw, "/lock", &[("x-user", "cy")]).await, 429);
    let t = trace_id(3);
    assert_eq!(get_traced(&gw, "/lock", &t, &[("x-user", "cy")]).await, 429);
    let spans = collector.wait_trace(&t, 1, WAIT).await;
    let (server, attempts, _) = parts(&spans);
    assert_eq!(server.attr("tollgate.decision"), Some("locked_out"));
    assert_eq!(
        decisions(server),
        vec![("locking".into(), "locked_out".into())]
    );
    assert!(attempts.is_empty());

    // Upstream error: the attempt failed, the request span is an error.
    let t = trace_id(4);
    assert_eq!(get_traced(&gw, "/broken", &t, &[]).await, 502);
    let spans = collector.wait_trace(&t, 2, WAIT).await;
    let (server, attempts, stores) = parts(&spans);
    assert_eq!(server.attr("http.response.status_code"), Some("502"));
    assert_eq!(server.status, otlp::STATUS_ERROR);
    assert_eq!(attempts.len(), 1, "{spans:#?}");
    assert_eq!(attempts[0].status, otlp::STATUS_ERROR);
    assert_eq!(attempts[0].attr("error.type"), Some("error"));
    assert!(stores.is_empty(), "no limit, no store call");

    // A verified consumer: named on the request's span.
    let t = trace_id(9);
    assert_eq!(
        get_traced(&gw, "/keyed", &t, &[("x-api-key", API_KEY)]).await,
        200
    );
    let spans = collector.wait_trace(&t, 2, WAIT).await;
    let (server, _, _) = parts(&spans);
    assert_eq!(server.attr("tollgate.consumer"), Some("acme-app"));
    assert_eq!(server.attr("tollgate.tenant"), Some("acme"));
    assert_eq!(server.attr("tollgate.plan"), Some("gold"));
    assert_eq!(server.attr("tollgate.route"), Some("keyed"));

    // Answered by the gateway: a server span alone.
    let t = trace_id(5);
    assert_eq!(get_traced(&gw, "/local", &t, &[]).await, 204);
    let spans = collector.wait_trace(&t, 1, WAIT).await;
    assert_eq!(spans.len(), 1, "{spans:#?}");
    assert_eq!(spans[0].name, "GET local");

    let exported = gw
        .metric("tollgate_spans_exported_total")
        .await
        .unwrap_or(0.0);
    assert!(exported >= 11.0, "exported {exported}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_of_each_outcome_arrive_over_otlp_http() {
    spans_of_each_outcome(Protocol::Http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_of_each_outcome_arrive_over_otlp_grpc() {
    spans_of_each_outcome(Protocol::Grpc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_follows_the_parent_and_the_ratio_decides_new_traces() {
    let (collector, echo, down) = (
        Collector::start().await,
        Echo::start("e").await,
        ClosedPort::bind(),
    );
    // `sample: 0`: no new trace is recorded, a sampled parent still is.
    let gw = Gateway::start(&config(&echo, &down, &collector.url(), "http", "0")).await;
    for n in 0..5 {
        assert_eq!(get(&gw, &format!("/local/{n}"), &[]).await, 204);
    }
    assert_eq!(get(&gw, "/api/new", &[("x-user", "a")]).await, 200);
    let sent = echo.last().unwrap().header("traceparent").unwrap();
    assert!(
        sent.ends_with("-00"),
        "a trace not recorded is not sampled: {sent}"
    );
    let t = trace_id(6);
    assert_eq!(get_traced(&gw, "/local", &t, &[]).await, 204);
    assert_eq!(collector.wait_trace(&t, 1, WAIT).await.len(), 1);
    // An unsampled parent is followed too: nothing recorded, the flag kept.
    let t2 = trace_id(7);
    let unsampled = format!("00-{t2}-{PARENT}-00");
    assert_eq!(
        get(
            &gw,
            "/api/u",
            &[("traceparent", &unsampled), ("x-user", "b")]
        )
        .await,
        200
    );
    let sent = echo.last().unwrap().header("traceparent").unwrap();
    assert!(
        sent.starts_with(&format!("00-{t2}-")) && sent.ends_with("-00"),
        "{sent}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let spans = collector.spans();
    assert!(
        spans.iter().all(|s| s.trace_id == t),
        "only the sampled parent's trace: {spans:#?}"
    );
    drop(gw);

    // `sample: 1`: a new trace is recorded and sent upstream sampled; a
    // malformed `traceparent` is replaced by it, never forwarded.
    let gw = Gateway::start(&config(&echo, &down, &collector.url(), "http", "1")).await;
    let bad = format!("00-{}-{PARENT}-01", TRACE.to_uppercase());
    assert_eq!(
        get(&gw, "/api/m", &[("traceparent", &bad), ("x-user", "c")]).await,
        200
    );
    let sent = echo.last().unwrap().header("traceparent").unwrap();
    let fields: Vec<&str> = sent.split('-').collect();
    assert_ne!(sent, bad);
    assert_eq!(fields[3], "01", "{sent}");
    let spans = collector.wait_trace(fields[1], 3, WAIT).await;
    let (server, attempts, _) = parts(&spans);
    assert_eq!(server.parent_span_id, "", "a new trace's span is a root");
    assert_eq!(attempts[0].span_id, fields[2]);
    let logged = gw
        .wait_access_log("/api/m", |l| l["path"] == "/api/m")
        .await;
    assert_eq!(logged["trace_id"], fields[1]);
}

/// p99 of `n` sequential requests to `path`, in microseconds.
async fn p99(gw: &Gateway, path: &str, n: usize) -> u128 {
    let client = client::h1();
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let r = client::send(
            &client,
            client::req(http::Method::GET, gw.addr(), path)
                .body(client::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 204);
        took.push(started.elapsed().as_micros());
    }
    took.sort_unstable();
    took[n * 99 / 100]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_down_or_slow_drops_spans_and_slows_no_request() {
    let (echo, down) = (Echo::start("e").await, ClosedPort::bind());
    let nowhere = ClosedPort::bind();
    let slow = Collector::start().await;
    slow.set_delay(Duration::from_secs(30));
    let off = Gateway::start(&common::config(
        r#"
        routes:
          - { name: local, match: { path: /local }, respond: { status: 204 } }
        "#,
    ))
    .await;
    let to_nowhere = Gateway::start(&config(
        &echo,
        &down,
        &format!("http://{}", nowhere.addr()),
        "http",
        "1",
    ))
    .await;
    let to_slow = Gateway::start(&config(&echo, &down, &slow.url(), "grpc", "1")).await;
    // Warm up, then interleave: the same machine, the same moments.
    for gw in [&off, &to_nowhere, &to_slow] {
        p99(gw, "/local", 50).await;
    }
    let (mut base, mut down_p99, mut slow_p99) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        base.push(p99(&off, "/local", 200).await);
        down_p99.push(p99(&to_nowhere, "/local", 200).await);
        slow_p99.push(p99(&to_slow, "/local", 200).await);
    }
    let best = |v: &Vec<u128>| *v.iter().min().unwrap();
    let (b, d, s) = (best(&base), best(&down_p99), best(&slow_p99));
    // Within noise: a generous margin on a busy 2-CPU machine, far below
    // what waiting on the collector would add (connect retries, a 5 s
    // export timeout, the slow collector's 30 s).
    let margin = b * 3 + 5_000;
    assert!(
        d <= margin,
        "p99 with the collector down: {d} µs, without telemetry {b} µs"
    );
    assert!(
        s <= margin,
        "p99 with a slow collector: {s} µs, without telemetry {b} µs"
    );

    let failed = common::eventually(
        Duration::from_secs(15),
        "spans dropped, collector down",
        || async {
            let v = to_nowhere
                .metric(r#"tollgate_spans_dropped_total{reason="export_failed"}"#)
                .await?;
            (v >= 650.0).then_some(v)
        },
    )
    .await;
    // 650 requests (50 to warm up, 3 x 200), one span each: every one of
    // them dropped as its export failed, none for want of room.
    assert_eq!(failed, 650.0);
    assert_eq!(
        to_nowhere
            .metric(r#"tollgate_spans_dropped_total{reason="queue_full"}"#)
            .await,
        Some(0.0)
    );
    assert_eq!(
        to_nowhere.metric("tollgate_spans_exported_total").await,
        Some(0.0)
    );
    // The slow collector holds the first batch past the export timeout:
    // dropped, counted; the gateway never waited for it.
    common::eventually(
        Duration::from_secs(15),
        "spans dropped, slow collector",
        || async {
            let v = to_slow
                .metric(r#"tollgate_spans_dropped_total{reason="export_failed"}"#)
                .await?;
            (v >= 1.0).then_some(v)
        },
    )
    .await;
    assert_eq!(slow.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_exporter_without_dropping_requests() {
    let (echo, down) = (Echo::start("e").await, ClosedPort::bind());
    let (first, second) = (Collector::start().await, Collector::start().await);
    let gw = Gateway::start(&config(&echo, &down, &first.url(), "http", "1")).await;
    let addr = gw.addr();
    let load = tokio::spawn(async move {
        let client = client::h1();
        let mut statuses = Vec::new();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(3) {
            let r = client::send(
                &client,
                client::req(http::Method::GET, addr, "/local")
                    .body(client::empty())
                    .unwrap(),
            )
            .await;
            statuses.push(r.status);
        }
        statuses
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    let before = gw.generation().await;
    gw.rewrite_config(&config(&echo, &down, &second.url(), "grpc", "1"));
    gw.sighup();
    common::eventually(WAIT, "the reload", || async {
        (gw.generation().await > before).then_some(())
    })
    .await;
    let statuses = load.await.unwrap();
    assert!(statuses.len() > 100, "{} requests", statuses.len());
    assert!(statuses.iter().all(|s| *s == 204), "every request answered");
    // Each collector got the spans of its generation, and between them all
    // of them: none lost at the switch.
    let total = common::eventually(WAIT, "every span exported", || async {
        let n = first.count() + second.count();
        (n >= statuses.len()).then_some(n)
    })
    .await;
    assert_eq!(total, statuses.len());
    assert!(
        first.count() > 0 && second.count() > 0,
        "{} / {}",
        first.count(),
        second.count()
    );
    assert!(first.spans().iter().all(|s| s.protocol == Protocol::Http));
    assert!(second.spans().iter().all(|s| s.protocol == Protocol::Grpc));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_spans_are_sent_at_shutdown() {
    let (collector, echo, down) = (
        Collector::start().await,
        Echo::start("e").await,
        ClosedPort::bind(),
    );
    let mut gw = Gateway::start(&config(&echo, &down, &collector.url(), "http", "1")).await;
    let t = trace_id(8);
    assert_eq!(get_traced(&gw, "/local", &t, &[]).await, 204);
    // Before the batch's second is up: only the shutdown's flush sends it.
    gw.sigterm();
    let status = gw.wait_exit(Duration::from_secs(10)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert_eq!(
        collector
            .wait_trace(&t, 1, Duration::from_secs(1))
            .await
            .len(),
        1
    );
}
