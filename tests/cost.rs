//! Cost limits (docs/configuration/cost.md), through the real binary and a
//! mock LLM upstream (tests/common/llm.rs): an estimate charged at
//! admission, atomically with the route's other limits, and settled from
//! the response's usage once it ends; exact under concurrency on the
//! memory store, Redis and a Redis Cluster.

mod common;

/// Every LLM API a budget reads (docs/configuration/cost.md, "Which API").
#[path = "cost/apis.rs"]
mod apis;
/// Settlement however a request ends.
#[path = "cost/settle.rs"]
mod settle;

use std::time::Duration;

use futures_util::future::join_all;
use http::Method;
use serde_json::Value;

use common::client::{self, Resp};
use common::cluster::RedisCluster;
use common::limits::ensure_room;
use common::llm::MockLlm;
use common::redis::RedisServer;
use common::{config, config_with_store, eventually, stores, Gateway};

/// A streaming chat request of exactly 100 bytes asking for 50 output
/// tokens: with `bytes_per_token: 1`, an estimate of 150.
fn body_100() -> String {
    let head =
        r#"{"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":""#;
    let tail = r#""}]}"#;
    let pad = 100 - head.len() - tail.len();
    let body = format!("{head}{}{tail}", "x".repeat(pad));
    assert_eq!(body.len(), 100);
    body
}

/// The route `/v1/` to `llm` with a 10,000-token hourly budget per
/// `x-tenant`, `extra` lines under its `cost:`, and a requests limit
/// (1,000 an hour, the token budget's window: with a minute's, a test that
/// ran across a minute's end found the window new and its count gone) and a
/// concurrency limit beside it.
fn budget(llm: &MockLlm, cost_extra: &str) -> String {
    format!(
        r#"
upstreams:
  llm: {{ targets: ["{}"] }}
limits:
  tokens:
    algorithm: fixed_window
    limit: 10000
    window: 1h
    key: "header:x-tenant"
    cost:
      reserve: llm
      settle: llm_usage
      llm: {{ api: openai, bytes_per_token: 1, stream_usage: force }}
{cost_extra}
  requests: {{ algorithm: fixed_window, limit: 1000, window: 1h, key: "header:x-tenant" }}
  in_flight: {{ algorithm: concurrency, limit: 1000, key: "header:x-tenant" }}
routes:
  - {{ name: llm, match: {{ path: /v1/ }}, upstream: llm, limits: [tokens, requests, in_flight] }}
"#,
        llm.url()
    )
}

/// A chat request of `tenant` with mock headers.
async fn chat(gw: &Gateway, tenant: &str, mock: &[(&str, &str)]) -> Resp {
    let mut req = client::req(Method::POST, gw.addr(), "/v1/chat/completions")
        .header("content-type", "application/json")
        .header("x-tenant", tenant);
    for (k, v) in mock {
        req = req.header(*k, *v);
    }
    client::send(&client::h1(), req.body(client::full(body_100())).unwrap()).await
}

/// `GET /limits/{limit}/{key}`'s remaining figure.
async fn remaining(gw: &Gateway, limit: &str, key: &str) -> u64 {
    gw.admin_get(&format!("/limits/{limit}/{key}")).await.json()["remaining"]
        .as_u64()
        .unwrap()
}

/// 200 concurrent streams estimated at 150 each on a 10,000 budget,
/// usage `usage` each: exactly 66 admitted; after the streams end the
/// budget holds `usage` x 66; the route's other limits counted the
/// admitted only.
async fn exactly_66_of_200(gw: &Gateway, llm: &MockLlm, tenant: &str, usage: (&str, &str)) {
    let mock = [
        ("x-mock-input-tokens", usage.0),
        ("x-mock-output-tokens", usage.1),
        ("x-mock-hold", "1"),
    ];
    let held = join_all((0..200).map(|_| {
        let gw = &*gw;
        async move { chat(gw, tenant, &mock).await }
    }));
    // The admitted streams wait on the mock until released: all 200 are
    // decided while the 66 are in flight.
    let released = async {
        let t0 = std::time::Instant::now();
        while llm.open_streams() != 66 {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "66 streams open: {} open, {} started, {} requests seen",
                llm.open_streams(),
                llm.started_streams(),
                llm.count()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Every rejection has been answered by now or will be: give the
        // stragglers a moment, then let the streams finish.
        tokio::time::sleep(Duration::from_millis(300)).await;
        llm.release();
    };
    let (answers, ()) = tokio::join!(held, released);
    let ok = answers.iter().filter(|r| r.status == 200).count();
    let rejected: Vec<&Resp> = answers.iter().filter(|r| r.status == 429).collect();
    assert_eq!((ok, rejected.len()), (66, 134));
    for r in &rejected {
        assert_eq!(r.json()["limit"], "tokens", "{}", r.text());
    }
    let used = 66 * (usage.0.parse::<u64>().unwrap() + usage.1.parse::<u64>().unwrap());
    let t0 = std::time::Instant::now();
    loop {
        let left = remaining(gw, "tokens", tenant).await;
        if left == 10_000 - used {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the settlements: {left} left, expected {}",
            10_000 - used
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The other limits took only the admitted requests.
    assert_eq!(remaining(gw, "requests", tenant).await, 1000 - 66);
}

/// A gateway on `store` (memory when `None`) in front of a fresh mock.
async fn gateway(store: Option<&str>, cost_extra: &str) -> (Gateway, MockLlm) {
    let llm = MockLlm::start().await;
    let text = budget(&llm, cost_extra);
    (gateway_with(store, &text).await, llm)
}

/// The gateway on `text`, started with a minute at least before the hour
/// ends: the limits here count in hourly windows aligned to the clock, and a
/// test that ran across an hour's end found its window new and its counts
/// gone.
async fn start(text: &str) -> Gateway {
    ensure_room(Duration::from_secs(3600), Duration::from_secs(60)).await;
    Gateway::start(text).await
}

/// A gateway with the config `text` on `store` (memory when `None`).
async fn gateway_with(store: Option<&str>, text: &str) -> Gateway {
    match store {
        Some(store) => start(&config_with_store(store, text)).await,
        None => start(&config(text)).await,
    }
}

/// Runs `case` on every store ([`stores::on_every_store`]).
async fn on_every_store<F, Fut>(case: F)
where
    F: Fn(Option<String>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    stores::on_every_store("cost", case).await;
}

async fn budget_is_exact(store: Option<&str>) {
    // Usage 150 each: 9,900 used.
    let (gw, llm) = gateway(store, "").await;
    exactly_66_of_200(&gw, &llm, "acme", ("100", "50")).await;
    // Usage 30 each: 1,980 used, and what was freed admits more (a mock
    // of its own: the first one lets every stream run now).
    let (gw, llm) = gateway(store, "").await;
    exactly_66_of_200(&gw, &llm, "beta", ("10", "20")).await;
    let mut later = 0;
    for _ in 0..60 {
        if chat(
            &gw,
            "beta",
            &[
                ("x-mock-input-tokens", "100"),
                ("x-mock-output-tokens", "50"),
            ],
        )
        .await
        .status
            == 200
        {
            later += 1;
        }
    }
    // 8,020 left: 53 more at 150 each (settled as they end).
    assert_eq!(later, 53);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_budget_is_exact_on_the_memory_store() {
    budget_is_exact(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_budget_is_exact_on_redis() {
    let redis = RedisServer::start();
    budget_is_exact(Some(&stores::redis_store(&redis, "cost"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_budget_is_exact_on_redis_cluster() {
    let cluster = RedisCluster::start();
    budget_is_exact(Some(&stores::cluster_store(&cluster, "cost"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_refund_and_missing_usage_keeps_the_estimate() {
    on_every_store(upstream_errors_and_missing_usage).await;
}

async fn upstream_errors_and_missing_usage(store: Option<String>) {
    let (gw, _llm) = gateway(store.as_deref(), "").await;
    // 500 before any body: refunded.
    let r = chat(&gw, "e1", &[("x-mock-status", "500")]).await;
    assert_eq!(r.status, 500);
    eventually(Duration::from_secs(5), "the refund", || async {
        (remaining(&gw, "tokens", "e1").await == 10_000).then_some(())
    })
    .await;
    // No usage in the stream: the estimate stays.
    let r = chat(&gw, "e2", &[("x-mock-omit-usage", "1")]).await;
    assert_eq!(r.status, 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(remaining(&gw, "tokens", "e2").await, 10_000 - 150);
    let series = "tollgate_cost_settlements_total{limit=\"tokens\",outcome=\"missing_usage\"}";
    assert_eq!(gw.metric(series).await, Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_estimate_above_the_budget_is_rejected_at_once() {
    on_every_store(an_estimate_above_the_budget).await;
}

async fn an_estimate_above_the_budget(store: Option<String>) {
    let llm = MockLlm::start().await;
    let text = budget(&llm, "").replace("limit: 10000", "limit: 120");
    let gw = gateway_with(store.as_deref(), &text).await;
    let r = chat(&gw, "big", &[]).await;
    assert_eq!(r.status, 429, "{}", r.text());
    let policy = r.header("ratelimit-policy").unwrap();
    assert!(
        policy.contains("\"tokens\";q=120;w=3600;tollgate-unit=\"tokens\""),
        "{policy}"
    );
    assert_eq!(
        r.header("retry-after"),
        Some("3600"),
        "never fits: the window"
    );
    assert_eq!(llm.count(), 0);
    assert_eq!(
        remaining(&gw, "requests", "big").await,
        1000,
        "no burned units"
    );
}

#[tokio::test]
async fn a_body_that_is_not_an_llm_request_is_400() {
    let llm = MockLlm::start().await;
    let gw = start(&config(&budget(&llm, ""))).await;
    for body in ["[1,2]", "{\"messages\": []}", "not json"] {
        let req = client::req(Method::POST, gw.addr(), "/v1/chat/completions")
            .header("x-tenant", "t")
            .body(client::full(body.to_owned()))
            .unwrap();
        let r = client::send(&client::h1(), req).await;
        r.assert_error(400, "invalid_llm_request");
    }
    assert_eq!(llm.count(), 0);
}

/// A budget charged the number in `x-cost`, exempting `x-internal: yes`,
/// beside a request limit.
const HEADER_BUDGET: &str = r#"
limits:
  units:
    algorithm: token_bucket
    rate: 1/h
    burst: 20
    key: "header:x-tenant"
    exempt: ["header:x-internal=yes"]
    cost: { reserve: "header:x-cost", settle: none }
  requests: { algorithm: fixed_window, limit: 100, window: 1h, key: "header:x-tenant" }
routes:
  - name: units
    match: { path: /units }
    respond: { status: 200, body: "ok\n" }
    limits: [requests, units]
"#;

#[tokio::test]
async fn a_header_estimate_is_charged_and_its_absence_is_400_where_it_applies() {
    let gw = start(&config(HEADER_BUDGET)).await;
    let send = |headers: &'static [(&'static str, &'static str)]| {
        client::get_with(gw.addr(), "/units", headers)
    };
    let r = send(&[("x-tenant", "a"), ("x-cost", "7")]).await;
    assert_eq!(r.status, 200);
    assert!(r.header("ratelimit").unwrap().contains("\"units\";r=13;"));
    for bad in ["", "x", "-1", "1.5"] {
        let headers: &'static [(&str, &str)] = match bad {
            "" => &[("x-tenant", "a")],
            "x" => &[("x-tenant", "a"), ("x-cost", "x")],
            "-1" => &[("x-tenant", "a"), ("x-cost", "-1")],
            _ => &[("x-tenant", "a"), ("x-cost", "1.5")],
        };
        send(headers).await.assert_error(400, "invalid_cost");
    }
    // Exempt from the cost limit: no estimate needed.
    let r = send(&[("x-tenant", "a"), ("x-internal", "yes")]).await;
    assert_eq!(r.status, 200);
    // 13 left: 14 does not fit and burns nothing; 13 does.
    let r = send(&[("x-tenant", "a"), ("x-cost", "14")]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["limit"], "units");
    assert_eq!(
        send(&[("x-tenant", "a"), ("x-cost", "13")]).await.status,
        200
    );
    assert_eq!(remaining(&gw, "units", "a").await, 0);
    assert_eq!(
        remaining(&gw, "requests", "a").await,
        97,
        "three requests got past the estimates: 7, exempt, 13"
    );
}

#[tokio::test]
async fn headers_show_the_budget_left_after_the_estimate_in_tokens() {
    let llm = MockLlm::start().await;
    let gw = start(&config(&budget(&llm, ""))).await;
    let r = chat(&gw, "h", &[]).await;
    assert_eq!(r.status, 200);
    let policy = r.header("ratelimit-policy").unwrap();
    assert!(
        policy.contains("\"tokens\";q=10000;w=3600;tollgate-unit=\"tokens\""),
        "{policy}"
    );
    let state = r.header("ratelimit").unwrap();
    assert!(state.contains("\"tokens\";r=9850;"), "{state}");
    let _: Value = Value::Null;
}

// ---------------------------------------------------------------------------
// Bytes: settle: response_bytes
// ---------------------------------------------------------------------------

/// A megabyte an hour per `x-tenant`, each download reserving 100,000
/// bytes and settling to what it sent.
fn bytes_budget(echo: &common::Echo) -> String {
    format!(
        r#"
upstreams:
  files: {{ targets: ["http://{}"] }}
limits:
  bytes:
    algorithm: fixed_window
    limit: 1000000
    window: 1h
    key: "header:x-tenant"
    cost: {{ reserve: 100000, settle: response_bytes }}
routes:
  - {{ name: files, match: {{ path: /download/ }}, upstream: files, limits: [bytes] }}
"#,
        echo.addr()
    )
}

#[tokio::test]
async fn downloads_are_charged_their_bytes_even_abandoned() {
    use tokio::io::AsyncReadExt;
    let echo = common::Echo::start("files").await;
    let gw = start(&config(&bytes_budget(&echo))).await;
    // 250,000 bytes: the 100,000 reserved, then 150,000 more.
    let r = client::get_with(gw.addr(), "/download/250000", &[("x-tenant", "dl")]).await;
    assert_eq!((r.status.as_u16(), r.body.len()), (200, 250_000));
    let policy = r.header("ratelimit-policy").unwrap();
    assert!(
        policy.contains("\"bytes\";q=1000000;w=3600;qu=\"content-bytes\""),
        "{policy}"
    );
    assert!(r
        .header("ratelimit")
        .unwrap()
        .contains("\"bytes\";r=900000;"));
    let t0 = std::time::Instant::now();
    while remaining(&gw, "bytes", "dl").await != 750_000 {
        assert!(t0.elapsed() < Duration::from_secs(5), "the settlement");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // 8 MB asked, 64 KiB read, then the client goes: charged what was
    // sent, more than it read and far less than the file.
    let mut conn = common::raw::connect(gw.addr()).await;
    conn.write(b"GET /download/8000000 HTTP/1.1\r\nhost: h\r\nx-tenant: gone\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 65_536];
    let mut read = 0;
    while read < 65_536 {
        let n = conn.stream.read(&mut buf[read..]).await.unwrap();
        assert!(n > 0);
        read += n;
    }
    drop(conn);
    let t0 = std::time::Instant::now();
    let used = loop {
        let used = 1_000_000 - remaining(&gw, "bytes", "gone").await;
        if used != 100_000 {
            break used;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the abandoned download's settlement"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!((60_000..4_000_000).contains(&used), "charged {used}");
    // Both sent more than they reserved.
    let series = "tollgate_cost_settlements_total{limit=\"bytes\",outcome=\"extra\"}";
    assert_eq!(gw.metric(series).await, Some(2.0));
}

#[tokio::test]
async fn the_forced_usage_chunk_never_reaches_the_client_and_output_is_capped() {
    let llm = MockLlm::start().await;
    let extra =
        "      llm: { api: openai, bytes_per_token: 1, stream_usage: force, cap_output: true }";
    let text = budget(&llm, "").replace(
        "      llm: { api: openai, bytes_per_token: 1, stream_usage: force }",
        extra,
    );
    let gw = start(&config(&text)).await;
    // No max_tokens in the request: the default 1024 is reserved, and set.
    // The stream chunked, then with a content-length (which the removed
    // chunk makes wrong: the gateway must drop it).
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    for (i, framing) in ["chunked", "content-length"].into_iter().enumerate() {
        let mut req = client::req(Method::POST, gw.addr(), "/v1/chat/completions")
            .header("x-tenant", "cap")
            .header("x-mock-input-tokens", "7")
            .header("x-mock-output-tokens", "5");
        if framing == "content-length" {
            req = req.header("x-mock-content-length", "1");
        }
        let r = client::send(
            &client::h1(),
            req.body(client::full(body.to_owned())).unwrap(),
        )
        .await;
        assert_eq!(r.status, 200, "{framing}");
        assert_eq!(r.header("content-length"), None, "{framing}");
        let seen = llm.last().unwrap().json();
        assert_eq!(seen["max_completion_tokens"], 1024, "{seen}");
        assert_eq!(seen["stream_options"]["include_usage"], true, "{seen}");
        let text = r.text();
        assert!(text.ends_with("data: [DONE]\n\n"), "{framing}: {text}");
        assert!(
            !text.contains("\"choices\":[]"),
            "the usage chunk reached the client: {text}"
        );
        // Settled from the usage the gateway asked for: 12 tokens each.
        let t0 = std::time::Instant::now();
        while remaining(&gw, "tokens", "cap").await != 10_000 - 12 * (i as u64 + 1) {
            assert!(t0.elapsed() < Duration::from_secs(5), "the settlement");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// `cap_output: false`, estimate 100 (a 50-byte body and 50 output
/// tokens), actual 250: the budget may be overspent by at most the
/// requests in flight x 150, then rejects until the window ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cap_output_overspend_is_bounded_by_what_was_in_flight() {
    on_every_store(overspend_without_cap_output).await;
}

async fn overspend_without_cap_output(store: Option<String>) {
    let llm = MockLlm::start().await;
    // 50 bytes, no max field: default_max_output 50 makes 100.
    let text = budget(&llm, "")
        .replace("limit: 10000", "limit: 1000")
        .replace(
            "bytes_per_token: 1, stream_usage: force",
            "bytes_per_token: 1, stream_usage: force, default_max_output: 50",
        );
    let gw = gateway_with(store.as_deref(), &text).await;
    let body = r#"{"model":"m","stream":true,"messages":[]}"#;
    let body = format!("{body}{}", " ".repeat(50 - body.len()));
    assert_eq!(body.len(), 50);
    let send = || {
        let gw = &gw;
        let body = body.clone();
        async move {
            let req = client::req(Method::POST, gw.addr(), "/v1/chat/completions")
                .header("x-tenant", "over")
                .header("x-mock-input-tokens", "50")
                .header("x-mock-output-tokens", "200")
                .header("x-mock-hold", "1")
                .body(client::full(body))
                .unwrap();
            client::send(&client::h1(), req).await
        }
    };
    // 10 in flight at once: 10 x 100 = the whole budget.
    let (answers, ()) = tokio::join!(join_all((0..12).map(|_| send())), async {
        let t0 = std::time::Instant::now();
        while llm.open_streams() < 10 {
            assert!(t0.elapsed() < Duration::from_secs(10), "10 open");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        llm.release();
    });
    let ok = answers.iter().filter(|r| r.status == 200).count();
    assert_eq!(ok, 10);
    // Each settles 150 more: 2,500 used of 1,000, overspent by exactly
    // (in flight) x 150.
    let t0 = std::time::Instant::now();
    loop {
        let j = gw.admin_get("/limits/tokens/over").await.json();
        if j["remaining"] == 0 && j["quota"] == 1000 {
            let series = "tollgate_cost_units_total{limit=\"tokens\",phase=\"settled\"}";
            if gw.metric(series).await == Some(2500.0) {
                break;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "settled: {j}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Then every request waits for the window.
    let r = send().await;
    assert_eq!(r.status, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_stream_keeps_the_estimate() {
    on_every_store(client_gone_mid_stream).await;
}

async fn client_gone_mid_stream(store: Option<String>) {
    use tokio::io::AsyncReadExt;
    let (gw, llm) = gateway(store.as_deref(), "").await;
    let body = body_100();
    let mut conn = common::raw::connect(gw.addr()).await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: h\r\nx-tenant: gone\r\nx-mock-hold: 1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write(head.as_bytes()).await.unwrap();
    // The head and the first event, then the client goes.
    let mut buf = vec![0u8; 4096];
    let n = conn.stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    drop(conn);
    let series = "tollgate_cost_settlements_total{limit=\"tokens\",outcome=\"missing_usage\"}";
    let t0 = std::time::Instant::now();
    while gw.metric(series).await != Some(1.0) {
        assert!(t0.elapsed() < Duration::from_secs(5), "the settlement");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(remaining(&gw, "tokens", "gone").await, 10_000 - 150);
    llm.release();
}

/// The gateway killed (SIGKILL) with 50 streams in flight, on Redis and
/// on a Redis Cluster (on the memory store the state dies with it): their
/// estimates stay charged, nothing else is written, and every key keeps
/// a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_gateway_leaves_its_estimates_charged_and_no_key_without_ttl() {
    let redis = RedisServer::start();
    killed_with_streams_in_flight(&stores::redis_store(&redis, "cost"), &[&redis]).await;
    let cluster = RedisCluster::start();
    killed_with_streams_in_flight(&stores::cluster_store(&cluster, "cost"), &cluster.masters())
        .await;
}

/// [`a_killed_gateway_leaves_its_estimates_charged_and_no_key_without_ttl`]
/// on `store`, whose keys are on `servers`.
async fn killed_with_streams_in_flight(store: &str, servers: &[&RedisServer]) {
    let (gw, llm) = gateway(Some(store), "").await;
    let streams: Vec<_> = (0..50)
        .map(|_| {
            let addr = gw.addr();
            tokio::spawn(async move {
                let req = client::req(Method::POST, addr, "/v1/chat/completions")
                    .header("x-tenant", "k")
                    .header("x-mock-hold", "1")
                    .body(client::full(body_100()))
                    .unwrap();
                client::try_send(&client::h1(), req).await
            })
        })
        .collect();
    let t0 = std::time::Instant::now();
    while llm.open_streams() < 50 {
        assert!(t0.elapsed() < Duration::from_secs(10), "50 open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = std::process::Command::new("kill")
        .args(["-9", &gw.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    for s in streams {
        let _ = s.await;
    }
    llm.release();
    let mut seen = 0;
    for server in servers {
        for k in &server.keys().await {
            seen += 1;
            assert!(server.pttl(k).await > 0, "{k} has no TTL");
            assert!(!k.contains(":c:"), "a settlement marker: {k}");
        }
    }
    assert!(seen > 0);
    // A new gateway on the same store reads 50 x 150 used.
    let (gw, _llm) = gateway(Some(store), "").await;
    assert_eq!(remaining(&gw, "tokens", "k").await, 10_000 - 50 * 150);
}

/// `simulate` reads `cost` (the estimate) and `usage` (what the response
/// said) from its lines and settles at once on its virtual clock: twelve
/// requests reserving 400 and settling to 100 on a 1,000 budget admit 7
/// (without settling, 2 would pass).
#[test]
fn simulate_reserves_and_settles() {
    let dir = common::simulate::scratch("cost-simulate");
    let config = "limits:\n  tokens:\n    algorithm: fixed_window\n    limit: 1000\n    window: 1h\n    cost: { reserve: llm, settle: llm_usage, llm: { api: openai } }\nroutes:\n  - { name: api, match: { path: / }, respond: { status: 200 }, limits: [tokens] }\n";
    let run = |lines: String| {
        let doc = common::simulate::report(&dir, config, &lines);
        let l = &doc["limits"][0];
        (
            l["allowed"].as_u64().unwrap(),
            l["rejected"].as_u64().unwrap(),
        )
    };
    let line = |i: u64, usage: &str| {
        format!("{{\"ts\":{},\"client\":\"192.0.2.1\",\"method\":\"POST\",\"path\":\"/\",\"cost\":400{usage}}}\n", 1_700_000_000 + i)
    };
    assert_eq!(
        run((0..12).map(|i| line(i, ",\"usage\":100")).collect()),
        (7, 5)
    );
    // No usage: the estimate stays (on_missing_usage: keep_estimate).
    assert_eq!(run((0..12).map(|i| line(i, "")).collect()), (2, 10));
}

/// `tollgate check` says, for each cost limit, whether its estimate is a
/// true bound or which overspend bound applies.
#[test]
fn check_says_which_estimates_are_bounds() {
    let dir = common::simulate::scratch("cost-check");
    let cfg = dir.join("gateway.yaml");
    std::fs::write(
        &cfg,
        "limits:
  bound: { algorithm: fixed_window, limit: 1000, window: 1h, cost: { reserve: llm, settle: llm_usage, llm: { api: openai, cap_output: true } } }
  uncapped: { algorithm: fixed_window, limit: 1000, window: 1h, cost: { reserve: llm, settle: llm_usage, llm: { api: openai } } }
  coarse: { algorithm: token_bucket, rate: 100/s, cost: { reserve: llm, settle: llm_usage, llm: { api: anthropic, cap_output: true, bytes_per_token: 4 } } }
  bytes: { algorithm: fixed_window, limit: 100000, window: 1h, cost: { reserve: 1000, settle: response_bytes } }
routes:
  - { name: r, match: { path: / }, respond: { status: 200 }, limits: [bound, uncapped, coarse, bytes] }
",
    )
    .unwrap();
    let (code, out, err) =
        common::gateway::run_cli(&["check", "-c", cfg.to_str().unwrap()], &[], None);
    assert_eq!(code, 0, "{err}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("cost: {name}: ")))
            .unwrap_or_else(|| panic!("no line for {name}: {out}"))
            .to_owned()
    };
    assert!(
        line("bound").contains("the estimate is a true bound"),
        "{out}"
    );
    assert!(line("uncapped").contains("without cap_output"), "{out}");
    assert!(line("coarse").contains("bytes_per_token: 4"), "{out}");
    assert!(
        line("bytes").contains("may settle to more than its reserve"),
        "{out}"
    );
    for name in ["uncapped", "coarse", "bytes"] {
        assert!(line(name).contains("sum, over requests in flight, of (actual - estimate)"));
    }
}
