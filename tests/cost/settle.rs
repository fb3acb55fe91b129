//! Every reservation settles exactly once, whatever ends the request
//! (docs/configuration/cost.md, "Settlement"), through the real binary on
//! the memory store and on Redis: the client gone before the response
//! head, while the gateway connects or retries, a request body that
//! stalls, an upstream timeout, the shutdown grace, a reload in between.
//!
//! The budget's two rules are set apart so that the budget afterwards says
//! which one applied: `on_missing_usage: charge_zero` gives the whole
//! estimate back (outcome `missing_usage`), `on_upstream_error:
//! keep_estimate` keeps it (outcome `settled`, nothing to move).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::limits::ensure_room;
use crate::common::llm::MockLlm;
use crate::common::raw;
use crate::common::redis::RedisServer;
use crate::common::{config_with_server, eventually, stores, ClosedPort, Echo, Gateway};

/// The budget.
const BUDGET: u64 = 10_000;

/// A streaming chat request of exactly 100 bytes asking for 50 output
/// tokens: an estimate of 150.
fn body_100() -> String {
    let head =
        r#"{"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":""#;
    let tail = r#""}]}"#;
    let body = format!("{head}{}{tail}", "x".repeat(100 - head.len() - tail.len()));
    assert_eq!(body.len(), 100);
    body
}

/// The estimate of [`body_100`].
const ESTIMATE: u64 = 150;

/// Where the gateway sends what: the mock LLM, a pool whose first target
/// refuses and whose second never finishes a TLS handshake, an echo.
struct Upstreams {
    llm: MockLlm,
    closed: ClosedPort,
    silent: SocketAddr,
    echo: Echo,
}

impl Upstreams {
    async fn start() -> Upstreams {
        Upstreams {
            llm: MockLlm::start().await,
            closed: ClosedPort::bind(),
            silent: crate::common::upstream::black_hole().await,
            echo: Echo::start("echo").await,
        }
    }

    /// The config on `store` (memory when `None`): `/v1/` on the LLM
    /// budget (upstream timeout 2 s); `/stuck/v1/` on the same budget to
    /// the pool that never answers (stripped, so the path names chat);
    /// `/upload` charged 100 units a request, settled by the response's
    /// bytes, to the echo.
    fn config(&self, store: Option<&str>) -> String {
        let store = store.map_or(String::new(), |s| format!("store: {s}\n"));
        let rest = format!(
            r#"
{store}upstreams:
  llm: {{ targets: ["{llm}"], timeout: 2s }}
  stuck:
    targets: ["http://{closed}", "https://{silent}"]
    retries: 1
    connect_timeout: 10s
    tls: {{ verify: false }}
  echo: {{ targets: ["{echo}"] }}
limits:
  tokens:
    algorithm: fixed_window
    limit: {BUDGET}
    window: 1h
    key: "header:x-tenant"
    cost:
      reserve: llm
      settle: llm_usage
      llm: {{ api: openai, bytes_per_token: 1, stream_usage: force }}
      on_missing_usage: charge_zero
      on_upstream_error: keep_estimate
  units:
    algorithm: fixed_window
    limit: {BUDGET}
    window: 1h
    key: "header:x-tenant"
    cost: {{ reserve: 100, settle: response_bytes, on_missing_usage: charge_zero, on_upstream_error: keep_estimate }}
routes:
  - {{ name: stuck, match: {{ path: /stuck }}, strip_prefix: true, upstream: stuck, limits: [tokens] }}
  - {{ name: llm, match: {{ path: /v1/ }}, upstream: llm, limits: [tokens] }}
  - {{ name: upload, match: {{ path: /upload }}, upstream: echo, limits: [units] }}
"#,
            llm = self.llm.url(),
            closed = self.closed.addr(),
            silent = self.silent,
            echo = self.echo.url(),
        );
        config_with_server("shutdown_grace: 1s\ntimeouts: { body_read: 1s }", &rest)
    }
}

/// A gateway for `up` on `store`, at least a minute before the hour ends.
async fn start(up: &Upstreams, store: Option<&str>) -> Gateway {
    ensure_room(Duration::from_secs(3600), Duration::from_secs(60)).await;
    Gateway::start(&up.config(store)).await
}

/// The head and body of a chat request of `tenant` to `path`, with mock
/// headers.
fn chat_request(path: &str, tenant: &str, mock: &[(&str, &str)]) -> Vec<u8> {
    let body = body_100();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\nx-tenant: {tenant}\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in mock {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    format!("{head}\r\n{body}").into_bytes()
}

/// Sends `request` on a new connection and closes it `after`, whatever
/// has come back by then.
async fn send_and_leave(addr: SocketAddr, request: &[u8], after: Duration) {
    let mut conn = raw::connect(addr).await;
    conn.write(request).await.unwrap();
    tokio::time::sleep(after).await;
    drop(conn);
}

/// `GET /limits/{limit}/{key}`'s remaining figure.
async fn remaining(gw: &Gateway, limit: &str, key: &str) -> u64 {
    gw.admin_get(&format!("/limits/{limit}/{key}")).await.json()["remaining"]
        .as_u64()
        .unwrap()
}

/// Waits until `limit`'s budget for `tenant` is `want`.
async fn budget_becomes(gw: &Gateway, limit: &str, tenant: &str, want: u64) {
    eventually(Duration::from_secs(10), "the settlement", || async {
        (remaining(gw, limit, tenant).await == want).then_some(())
    })
    .await;
}

/// Every settlement of `limit` counted, by outcome.
async fn settlements(gw: &Gateway, limit: &str) -> Vec<(&'static str, u64)> {
    let mut out = Vec::new();
    for outcome in ["settled", "refund", "extra", "missing_usage", "dropped"] {
        let series =
            format!("tollgate_cost_settlements_total{{limit=\"{limit}\",outcome=\"{outcome}\"}}");
        if let Some(n) = gw.metric(&series).await {
            out.push((outcome, n as u64));
        }
    }
    out
}

/// The access line of the one request of `tenant` (there must be one).
async fn access_line(gw: &Gateway, tenant_path: &str) -> Value {
    gw.wait_access_log(tenant_path, |l| l["path"] == tenant_path)
        .await
}

/// Runs `case` on the memory store, then on a Redis.
async fn on_memory_and_redis<F, Fut>(case: F)
where
    F: Fn(Option<String>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    eprintln!("store: memory");
    case(None).await;
    let redis = RedisServer::start();
    eprintln!("store: redis");
    case(Some(stores::redis_store(&redis, "settle"))).await;
}

async fn client_gone_before_the_head(store: Option<String>) {
    let up = Upstreams::start().await;
    let gw = start(&up, store.as_deref()).await;
    // The upstream takes 0.8 s to answer; the client leaves after 0.3 s.
    let req = chat_request(
        "/v1/chat/completions",
        "gone",
        &[("x-mock-delay-ms", "800")],
    );
    let t0 = Instant::now();
    send_and_leave(gw.addr(), &req, Duration::from_millis(300)).await;
    let line = access_line(&gw, "/v1/chat/completions").await;
    assert_eq!(line["status"], 499, "{line}");
    assert_eq!(line["completed"], false, "{line}");
    assert!(
        t0.elapsed() < Duration::from_millis(700),
        "logged when the client left"
    );
    budget_becomes(&gw, "tokens", "gone", BUDGET).await;
    assert_eq!(settlements(&gw, "tokens").await, vec![("missing_usage", 1)]);
    let series = "tollgate_requests_total{route=\"llm\",status=\"499\"}";
    assert_eq!(gw.metric(series).await, Some(1.0));
    // Once, and only once: the upstream's late answer changes nothing.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(remaining(&gw, "tokens", "gone").await, BUDGET);
    assert_eq!(settlements(&gw, "tokens").await, vec![("missing_usage", 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_before_the_head_applies_on_missing_usage() {
    on_memory_and_redis(client_gone_before_the_head).await;
}

async fn client_gone_while_connecting(store: Option<String>) {
    let up = Upstreams::start().await;
    let gw = start(&up, store.as_deref()).await;
    // The first target refuses, the retry's TLS handshake never ends.
    let req = chat_request("/stuck/v1/chat/completions", "stuck", &[]);
    send_and_leave(gw.addr(), &req, Duration::from_millis(500)).await;
    let line = access_line(&gw, "/stuck/v1/chat/completions").await;
    assert_eq!(
        (line["status"].clone(), line["completed"].clone()),
        (json!(499), json!(false)),
        "{line}"
    );
    budget_becomes(&gw, "tokens", "stuck", BUDGET).await;
    assert_eq!(settlements(&gw, "tokens").await, vec![("missing_usage", 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_during_connect_or_retry_applies_on_missing_usage() {
    on_memory_and_redis(client_gone_while_connecting).await;
}

async fn upstream_timeout(store: Option<String>) {
    let up = Upstreams::start().await;
    let gw = start(&up, store.as_deref()).await;
    let req = chat_request(
        "/v1/chat/completions",
        "slow",
        &[("x-mock-delay-ms", "3000")],
    );
    let r = raw::request(gw.addr(), &req).await;
    raw::assert_error(&r, 504, "upstream_timeout");
    let line = access_line(&gw, "/v1/chat/completions").await;
    assert_eq!(line["status"], 504, "{line}");
    // keep_estimate: the estimate stays, nothing to move.
    eventually(Duration::from_secs(5), "the settlement", || async {
        (settlements(&gw, "tokens").await == vec![("settled", 1)]).then_some(())
    })
    .await;
    assert_eq!(remaining(&gw, "tokens", "slow").await, BUDGET - ESTIMATE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_timeout_applies_on_upstream_error() {
    on_memory_and_redis(upstream_timeout).await;
}

async fn stalled_body(store: Option<String>) {
    let up = Upstreams::start().await;
    let gw = start(&up, store.as_deref()).await;
    // 10 bytes of a 1,000-byte body, then nothing: `body_read` is 1 s.
    let mut conn = raw::connect(gw.addr()).await;
    conn.write(b"POST /upload HTTP/1.1\r\nhost: gw\r\nx-tenant: up\r\ncontent-length: 1000\r\n\r\n0123456789")
        .await
        .unwrap();
    let r = conn.read_response(Duration::from_secs(5)).await;
    let line = access_line(&gw, "/upload").await;
    let status = line["status"].as_u64().unwrap();
    assert!(status == 408 || status == 502, "{line}, answered {r:?}");
    assert_eq!(line["completed"], true, "{line}");
    eventually(Duration::from_secs(5), "the settlement", || async {
        (settlements(&gw, "units").await == vec![("settled", 1)]).then_some(())
    })
    .await;
    assert_eq!(remaining(&gw, "units", "up").await, BUDGET - 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_that_stalls_applies_on_upstream_error() {
    on_memory_and_redis(stalled_body).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_grace_settles_what_it_cuts_off() {
    // Memory: the line says what happened (the budget ends with the process).
    let up = Upstreams::start().await;
    let mut gw = start(&up, None).await;
    let req = chat_request(
        "/v1/chat/completions",
        "cut",
        &[("x-mock-delay-ms", "3000")],
    );
    cut_by_the_grace(&mut gw, &req).await;

    // Redis: the budget is whole again once the gateway is gone.
    let redis = RedisServer::start();
    let store = stores::redis_store(&redis, "grace");
    let mut gw = start(&up, Some(&store)).await;
    cut_by_the_grace(&mut gw, &req).await;
    let after = start(&up, Some(&store)).await;
    assert_eq!(remaining(&after, "tokens", "cut").await, BUDGET);
}

/// Sends `request`, waits until the upstream has it, sends SIGTERM: the
/// gateway exits after its 1 s grace, its line for the request says 503,
/// not completed.
async fn cut_by_the_grace(gw: &mut Gateway, request: &[u8]) {
    let mut conn = raw::connect(gw.addr()).await;
    conn.write(request).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    gw.sigterm();
    let status = gw.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.and_then(|s| s.code()), Some(0));
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "took {:?}",
        t0.elapsed()
    );
    let line = gw
        .access_logs()
        .into_iter()
        .find(|l| l["path"] == "/v1/chat/completions")
        .expect("an access line for the request cut off");
    assert_eq!(
        (line["status"].clone(), line["completed"].clone()),
        (json!(503), json!(false)),
        "{line}"
    );
    drop(conn);
}

async fn across_a_reload(store: Option<String>) {
    let up = Upstreams::start().await;
    let gw = start(&up, store.as_deref()).await;
    let held = chat_request(
        "/v1/chat/completions",
        "reload",
        &[
            ("x-mock-hold", "1"),
            ("x-mock-input-tokens", "30"),
            ("x-mock-output-tokens", "40"),
        ],
    );
    let mut conn = raw::connect(gw.addr()).await;
    conn.write(&held).await.unwrap();
    eventually(Duration::from_secs(5), "the stream open", || async {
        (up.llm.open_streams() == 1).then_some(())
    })
    .await;
    assert_eq!(remaining(&gw, "tokens", "reload").await, BUDGET - ESTIMATE);
    let generation = gw.generation().await;
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gw.generation().await, generation + 1);
    up.llm.release();
    let r = conn.read_response(Duration::from_secs(5)).await.unwrap();
    assert_eq!(r.status, 200);
    budget_becomes(&gw, "tokens", "reload", BUDGET - 70).await;
    assert_eq!(settlements(&gw, "tokens").await, vec![("refund", 1)]);
    drop(conn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_across_a_reload_settles_where_it_was_charged() {
    on_memory_and_redis(across_a_reload).await;
}

async fn upstream_5xx(store: Option<String>) {
    let up = Upstreams::start().await;
    let gw = start(&up, store.as_deref()).await;
    // A 5xx whose body reports a usage (30 tokens) reached the client:
    // it settles by that usage, not by on_upstream_error.
    let mock = [("x-mock-status", "500"), ("x-mock-error-usage", "1")];
    let r = raw::request(
        gw.addr(),
        &chat_request("/v1/chat/completions", "used", &mock),
    )
    .await;
    assert_eq!(r.status, 500);
    budget_becomes(&gw, "tokens", "used", BUDGET - 30).await;
    assert_eq!(settlements(&gw, "tokens").await, vec![("refund", 1)]);
    // One that reports none is an upstream error: keep_estimate.
    let mock = [("x-mock-status", "503")];
    let r = raw::request(
        gw.addr(),
        &chat_request("/v1/chat/completions", "none", &mock),
    )
    .await;
    assert_eq!(r.status, 503);
    eventually(Duration::from_secs(5), "the settlement", || async {
        (settlements(&gw, "tokens").await == vec![("settled", 1), ("refund", 1)]).then_some(())
    })
    .await;
    assert_eq!(remaining(&gw, "tokens", "none").await, BUDGET - ESTIMATE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_5xx_settles_by_the_usage_that_reached_the_client() {
    on_memory_and_redis(upstream_5xx).await;
}
