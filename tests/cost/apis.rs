//! Token budgets on every LLM API (docs/configuration/cost.md, "Which
//! API"), through the real binary and the mock LLM upstream
//! (tests/common/llm.rs): each API's request read by its own fields, never
//! by the body's shape; the true bound `tollgate check` promises held
//! under concurrency on the memory store, Redis and a Redis Cluster by an
//! upstream that spends exactly each request's ceiling; requests that
//! carry no model call passing at `other_requests`.

use std::time::Duration;

use futures_util::future::join_all;
use http::Method;
use serde_json::{json, Value};

use crate::common::client::{self, Resp};
use crate::common::limits::ensure_room;
use crate::common::llm::MockLlm;
use crate::common::{config, config_with_store, eventually, stores, Gateway};

/// The budget every case spends: 2,000 tokens an hour per `x-tenant`.
const BUDGET: u64 = 2000;

/// Two routes in front of `llm`: `/v1/messages` on an Anthropic budget,
/// the rest of `/v1/` on an OpenAI budget whose API each request's path
/// names; both `cap_output: true`, `bytes_per_token: 1` (a true bound),
/// `default_max_output` 300, and `llm` lines added under both.
fn budgets(llm: &MockLlm, extra: &str) -> String {
    format!(
        r#"
upstreams:
  llm: {{ targets: ["{url}"] }}
limits:
  tokens:
    algorithm: fixed_window
    limit: {BUDGET}
    window: 1h
    key: "header:x-tenant"
    cost:
      reserve: llm
      settle: llm_usage
      llm: {{ api: openai, cap_output: true, bytes_per_token: 1, default_max_output: 300, stream_usage: force{extra} }}
  atokens:
    algorithm: fixed_window
    limit: {BUDGET}
    window: 1h
    key: "header:x-tenant"
    cost:
      reserve: llm
      settle: llm_usage
      llm: {{ api: anthropic, cap_output: true, bytes_per_token: 1, default_max_output: 300{extra} }}
routes:
  - {{ name: anthropic, match: {{ exact: /v1/messages }}, upstream: llm, limits: [atokens] }}
  - {{ name: openai, match: {{ path: /v1/ }}, upstream: llm, limits: [tokens] }}
"#,
        url = llm.url()
    )
}

/// A gateway on `store` (memory when `None`) for `text`, started at least a
/// minute before the hour ends (the budgets' windows are clock hours).
async fn start(store: Option<&str>, text: &str) -> Gateway {
    ensure_room(Duration::from_secs(3600), Duration::from_secs(60)).await;
    match store {
        Some(store) => Gateway::start(&config_with_store(store, text)).await,
        None => Gateway::start(&config(text)).await,
    }
}

/// `method path` with `body` (JSON) from `tenant`, with mock headers.
async fn send(
    gw: &Gateway,
    method: Method,
    path: &str,
    tenant: &str,
    body: Option<&Value>,
    mock: &[(&str, &str)],
) -> Resp {
    let mut req = client::req(method, gw.addr(), path).header("x-tenant", tenant);
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    for (k, v) in mock {
        req = req.header(*k, *v);
    }
    let body = body.map_or_else(String::new, Value::to_string);
    client::send(&client::h1(), req.body(client::full(body)).unwrap()).await
}

/// `GET /limits/{limit}/{key}`'s remaining figure.
async fn remaining(gw: &Gateway, limit: &str, key: &str) -> u64 {
    gw.admin_get(&format!("/limits/{limit}/{key}")).await.json()["remaining"]
        .as_u64()
        .unwrap()
}

/// One API's case: a request body on a path, the limit it spends, and its
/// estimate (its body's bytes plus the output it may ask for, which the
/// mock then spends to the last token).
struct Case {
    name: &'static str,
    path: &'static str,
    limit: &'static str,
    body: Value,
    /// The output share of the estimate.
    output: u64,
}

impl Case {
    fn estimate(&self) -> u64 {
        self.body.to_string().len() as u64 + self.output
    }
}

/// A case per API, each with its own output ceiling: named in the API's
/// field, or the default written there by `cap_output`; multiplied by
/// chat's `n`, and by a legacy completion's prompts and `best_of`.
fn cases() -> Vec<Case> {
    let msgs = json!([{"role": "user", "content": "Say hi"}]);
    vec![
        Case {
            name: "chat, n 2",
            path: "/v1/chat/completions",
            limit: "tokens",
            body: json!({"model": "m", "messages": msgs, "n": 2, "max_tokens": 300}),
            output: 600,
        },
        Case {
            name: "chat, no max (capped at the default)",
            path: "/v1/chat/completions",
            limit: "tokens",
            body: json!({"model": "m", "messages": msgs}),
            output: 300,
        },
        Case {
            // The issue's case: max_tokens was never read.
            name: "completions, max_tokens 1500",
            path: "/v1/completions",
            limit: "tokens",
            body: json!({"model": "m", "prompt": "hi", "max_tokens": 1500}),
            output: 1500,
        },
        Case {
            name: "completions, a batch of 2 with best_of 3",
            path: "/v1/completions",
            limit: "tokens",
            body: json!({"model": "m", "prompt": ["a", "b"], "best_of": 3, "max_tokens": 100}),
            output: 600,
        },
        Case {
            name: "completions, no max (capped at the default)",
            path: "/v1/completions",
            limit: "tokens",
            body: json!({"model": "m", "prompt": "hello"}),
            output: 300,
        },
        Case {
            // The issue's case: read as chat, capped in the wrong field.
            name: "responses with a messages field",
            path: "/v1/responses",
            limit: "tokens",
            body: json!({"model": "m", "messages": msgs, "input": "hi", "max_output_tokens": 700}),
            output: 700,
        },
        Case {
            name: "responses, no max (capped at the default)",
            path: "/v1/responses",
            limit: "tokens",
            body: json!({"model": "m", "input": "hi"}),
            output: 300,
        },
        Case {
            name: "embeddings",
            path: "/v1/embeddings",
            limit: "tokens",
            body: json!({"model": "e", "input": ["hello world", "x".repeat(120)]}),
            output: 0,
        },
        Case {
            name: "anthropic messages",
            path: "/v1/messages",
            limit: "atokens",
            body: json!({"model": "claude", "max_tokens": 450, "messages": msgs}),
            output: 450,
        },
    ]
}

/// Each case from its own tenant: 5 more concurrent requests than the
/// budget holds estimates, against a mock that holds each answer 1.5 s (so
/// every request is decided while the admitted ones run) and then spends
/// exactly its ceiling. Exactly `BUDGET / estimate` are admitted; what the
/// upstream spent never exceeds the budget; the settlements leave the
/// budget at exactly what was spent.
async fn never_overspends(store: Option<String>) {
    let llm = MockLlm::start().await;
    let gw = start(store.as_deref(), &budgets(&llm, "")).await;
    for (n, case) in cases().iter().enumerate() {
        let tenant = format!("t{n}");
        let fits = BUDGET / case.estimate();
        let before = llm.spent();
        let mock = [("x-mock-ceiling", "1"), ("x-mock-delay-ms", "1500")];
        let answers = join_all((0..fits + 5).map(|_| {
            send(
                &gw,
                Method::POST,
                case.path,
                &tenant,
                Some(&case.body),
                &mock,
            )
        }))
        .await;
        let ok = answers.iter().filter(|r| r.status == 200).count() as u64;
        let rejected = answers.iter().filter(|r| r.status == 429).count() as u64;
        assert_eq!(
            (ok, rejected),
            (fits, 5),
            "{}: estimate {}",
            case.name,
            case.estimate()
        );
        let spent = llm.spent() - before;
        assert!(
            spent <= BUDGET,
            "{}: the upstream spent {spent} of a {BUDGET} budget",
            case.name
        );
        assert!(spent > 0, "{}: nothing spent", case.name);
        let want = BUDGET - spent;
        eventually(Duration::from_secs(10), case.name, || async {
            (remaining(&gw, case.limit, &tenant).await == want).then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_api_is_a_true_bound_on_every_store() {
    stores::on_every_store("apis", never_overspends).await;
}

#[tokio::test]
async fn cap_output_writes_the_field_each_api_reads_and_nothing_elsewhere() {
    let llm = MockLlm::start().await;
    let gw = start(None, &budgets(&llm, "")).await;
    let cases = [
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": []}),
            Some("max_completion_tokens"),
        ),
        (
            "/v1/completions",
            json!({"model": "m", "prompt": "p"}),
            Some("max_tokens"),
        ),
        (
            "/v1/responses",
            json!({"model": "m", "input": "p"}),
            Some("max_output_tokens"),
        ),
        ("/v1/embeddings", json!({"model": "m", "input": "p"}), None),
        (
            "/v1/messages",
            json!({"model": "m", "messages": []}),
            Some("max_tokens"),
        ),
    ];
    for (path, body, field) in cases {
        let r = send(&gw, Method::POST, path, "cap", Some(&body), &[]).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let sent = llm.last().unwrap();
        assert_eq!(sent.path, path);
        let mut want = body.clone();
        if let Some(field) = field {
            want[field] = json!(300);
        }
        assert_eq!(sent.json(), want, "{path}: what the upstream got");
    }
}

#[tokio::test]
async fn a_streamed_legacy_completion_is_asked_for_its_usage_and_settled() {
    let llm = MockLlm::start().await;
    let gw = start(None, &budgets(&llm, "")).await;
    let body = json!({"model": "m", "prompt": "hi", "stream": true, "max_tokens": 50});
    let mock = [("x-mock-input-tokens", "7"), ("x-mock-output-tokens", "30")];
    let r = send(
        &gw,
        Method::POST,
        "/v1/completions",
        "s",
        Some(&body),
        &mock,
    )
    .await;
    assert_eq!(r.status, 200);
    let sent = llm.last().unwrap().json();
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    // The usage-only chunk the gateway asked for is not the client's.
    assert!(r.text().contains("tok0"), "{}", r.text());
    assert!(!r.text().contains("\"usage\":{"), "{}", r.text());
    eventually(Duration::from_secs(5), "the settlement", || async {
        (remaining(&gw, "tokens", "s").await == BUDGET - 37).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_body_that_does_not_fit_its_api_is_400_naming_the_field() {
    let llm = MockLlm::start().await;
    let gw = start(None, &budgets(&llm, "")).await;
    let cases = [
        (
            "/v1/chat/completions",
            json!({"model": "m", "prompt": "p"}),
            "`messages` is missing",
        ),
        (
            "/v1/completions",
            json!({"model": "m", "prompt": {"p": 1}}),
            "`prompt` is not a string",
        ),
        (
            "/v1/embeddings",
            json!({"model": "m"}),
            "`input` is missing",
        ),
        (
            "/v1/messages",
            json!({"model": "m", "prompt": "p"}),
            "`messages` is missing",
        ),
        ("/v1/chat/completions", json!({"messages": []}), "`model`"),
        (
            "/v1/responses",
            json!({"model": "m", "max_output_tokens": "9"}),
            "`max_output_tokens` is not a whole number",
        ),
        // A JSON body on a path of no API the budget knows.
        (
            "/v1/audio/speech",
            json!({"model": "tts", "input": "hi"}),
            "the path /v1/audio/speech names no API",
        ),
    ];
    for (path, body, reason) in cases {
        let r = send(&gw, Method::POST, path, "bad", Some(&body), &[]).await;
        r.assert_error(400, "invalid_llm_request");
        let message = r.json()["message"].as_str().unwrap_or_default().to_string();
        assert!(message.starts_with(reason), "{path}: {message}");
    }
    assert_eq!(llm.count(), 0, "no refused request reached the upstream");
    assert_eq!(remaining(&gw, "tokens", "bad").await, BUDGET);
}

/// A multipart upload's body.
fn multipart(gw: &Gateway, tenant: &str) -> http::Request<crate::common::Body> {
    let body =
        "--xyz\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--xyz--\r\n";
    client::req(Method::POST, gw.addr(), "/v1/files")
        .header("x-tenant", tenant)
        .header("content-type", "multipart/form-data; boundary=xyz")
        .body(client::full(body.to_owned()))
        .unwrap()
}

#[tokio::test]
async fn requests_without_a_model_call_pass_at_other_requests() {
    let llm = MockLlm::start().await;
    // Default: other_requests 0, nothing charged, even on a spent budget.
    let gw = start(None, &budgets(&llm, "")).await;
    let spend = json!({"model": "m", "prompt": "hi", "max_tokens": 1900});
    let ceiling = [("x-mock-ceiling", "1")];
    let r = send(
        &gw,
        Method::POST,
        "/v1/completions",
        "o",
        Some(&spend),
        &ceiling,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    eventually(Duration::from_secs(5), "the settlement", || async {
        (remaining(&gw, "tokens", "o").await == BUDGET - 1904).then_some(())
    })
    .await;
    let r = send(&gw, Method::POST, "/v1/completions", "o", Some(&spend), &[]).await;
    assert_eq!(r.status, 429, "the budget is spent");
    let left = remaining(&gw, "tokens", "o").await;
    for method in [Method::GET, Method::HEAD, Method::DELETE] {
        let r = send(&gw, method.clone(), "/v1/models", "o", None, &[]).await;
        assert_eq!(r.status, 200, "{method} /v1/models");
    }
    let r = client::send(&client::h1(), multipart(&gw, "o")).await;
    assert_eq!(
        r.status,
        404,
        "the upload reached the upstream: {}",
        r.text()
    );
    assert_eq!(remaining(&gw, "tokens", "o").await, left);
    // The metric shows no settlement for them.
    let series = "tollgate_cost_settlements_total{limit=\"tokens\",outcome=\"missing_usage\"}";
    assert_eq!(gw.metric(series).await, None);

    // other_requests: 5 charges each such request 5, for good.
    let gw = start(None, &budgets(&llm, ", other_requests: 5")).await;
    for _ in 0..3 {
        let r = send(&gw, Method::GET, "/v1/models", "five", None, &[]).await;
        assert_eq!(r.status, 200);
    }
    let r = client::send(&client::h1(), multipart(&gw, "five")).await;
    assert_eq!(r.status, 404);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(remaining(&gw, "tokens", "five").await, BUDGET - 20);
    let r = send(&gw, Method::GET, "/v1/models", "five", None, &[]).await;
    let fields = r.header("ratelimit").unwrap();
    let want = format!("\"tokens\";r={};t=", BUDGET - 25);
    assert!(fields.starts_with(&want), "{fields}");
}

#[tokio::test]
async fn a_probe_costs_what_the_request_would_cost_and_spends_nothing() {
    let llm = MockLlm::start().await;
    let gw = start(None, &budgets(&llm, "")).await;
    let probe = |body: Value| {
        let gw = &gw;
        async move { crate::common::limits::probe(gw, &body.to_string()).await }
    };
    let big = json!({"model": "m", "prompt": "hi", "max_tokens": 1500});
    let estimate = big.to_string().len() as u64 + 1500;
    let asked = |tenant: &str, body: Value| json!({"method": "POST", "path": "/v1/completions", "headers": {"x-tenant": tenant, "content-type": "application/json"}, "body": body});
    // The estimate, and the decision at that cost.
    let a = probe(asked("p", big.clone())).await;
    assert_eq!(
        (a["decision"].clone(), a["upstream"].clone()),
        (json!("allowed"), json!("llm")),
        "{a}"
    );
    assert_eq!(a["limits"][0]["cost"], estimate, "{a}");
    assert_eq!(a["limits"][0]["figures"]["r"], BUDGET - estimate, "{a}");
    // The body as text is the same request.
    let a = probe(asked("p", json!(big.to_string()))).await;
    assert_eq!(a["limits"][0]["cost"], estimate, "{a}");
    // Spent to 96 left: the probe says the request would be rejected.
    let ceiling = [("x-mock-ceiling", "1")];
    let r = send(
        &gw,
        Method::POST,
        "/v1/completions",
        "p",
        Some(&json!({"model": "m", "prompt": "hi", "max_tokens": 1900})),
        &ceiling,
    )
    .await;
    assert_eq!(r.status, 200);
    budget_becomes_left(&gw, "p", BUDGET - 1904).await;
    let a = probe(asked("p", big.clone())).await;
    assert_eq!(
        (a["decision"].clone(), a["status"].clone()),
        (json!("rejected"), json!(429)),
        "{a}"
    );
    // A small one still fits.
    let small = json!({"model": "m", "prompt": "hi", "max_tokens": 10});
    let a = probe(asked("p", small)).await;
    assert_eq!(a["decision"], "allowed", "{a}");
    // The 400 the request would get, with its reason.
    let a = probe(asked("p", json!({"model": "m", "prompt": 5}))).await;
    assert_eq!(
        (a["status"].clone(), a["error"].clone()),
        (json!(400), json!("invalid_llm_request")),
        "{a}"
    );
    assert!(
        a["message"]
            .as_str()
            .unwrap()
            .starts_with("`prompt` is not a string"),
        "{a}"
    );
    // No body: no model call, the budget does not apply (other_requests 0).
    let a =
        probe(json!({"method": "GET", "path": "/v1/models", "headers": {"x-tenant": "p"}})).await;
    assert_eq!(a["limits"][0]["decision"], "no_model_call", "{a}");
    assert_eq!(
        (a["status"].clone(), a["upstream"].clone()),
        (Value::Null, json!("llm")),
        "{a}"
    );
    // `cost` stands for the estimate.
    let mut with_cost = asked("q", big);
    with_cost["cost"] = json!(7);
    let a = probe(with_cost).await;
    assert_eq!(
        (
            a["limits"][0]["cost"].clone(),
            a["limits"][0]["figures"]["r"].clone()
        ),
        (json!(7), json!(BUDGET - 7)),
        "{a}"
    );
    // Nothing was spent by the probes.
    assert_eq!(remaining(&gw, "tokens", "p").await, BUDGET - 1904);
    assert_eq!(remaining(&gw, "tokens", "q").await, BUDGET);
    assert_eq!(llm.count(), 1, "only the real request reached the upstream");
}

/// Waits until the OpenAI budget of `tenant` has `left`.
async fn budget_becomes_left(gw: &Gateway, tenant: &str, left: u64) {
    eventually(Duration::from_secs(5), "the settlement", || async {
        (remaining(gw, "tokens", tenant).await == left).then_some(())
    })
    .await;
}
