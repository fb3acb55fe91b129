//! The mock LLM upstream (`tests/common/llm.rs`) on its own, without a
//! gateway: each API's answers in JSON and SSE, the usage as its headers
//! set it (read back by the gateway's own readers, `tollgate::cost`), the
//! rewrites it records, delays, errors, cut and held streams.

mod common;

use std::time::{Duration, Instant};

use common::client::{self, Resp};
use common::llm::MockLlm;
use http::{Method, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};
use tollgate::cost::{Api, Usage, UsageChunkFilter, UsageReader};

/// `POST path` with a JSON body and headers; the response head.
async fn post(
    mock: &MockLlm,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> Response<Incoming> {
    let mut req =
        client::req(Method::POST, mock.addr(), path).header("content-type", "application/json");
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let req = req.body(client::full(body.to_string())).unwrap();
    tokio::time::timeout(client::REQUEST_TIMEOUT, client::h1().request(req))
        .await
        .expect("the response head in time")
        .expect("a response")
}

/// `POST` and collect the whole answer.
async fn call(mock: &MockLlm, path: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
    client::collect(post(mock, path, body, headers).await)
        .await
        .unwrap()
}

/// The usage the gateway's reader finds in a body.
fn usage(api: Api, body: &[u8]) -> Option<Usage> {
    let mut reader = UsageReader::new(api);
    reader.feed(body);
    reader.finish()
}

/// The `data:` payloads of an SSE body, parsed (`[DONE]` as a string).
fn events(body: &[u8]) -> Vec<Value> {
    String::from_utf8(body.to_vec())
        .unwrap()
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| json!(d)))
        .collect()
}

fn chat(stream: bool) -> Value {
    json!({"model": "gpt-4o-mini", "stream": stream, "messages": [{"role": "user", "content": "Hi"}]})
}

const TOKENS: &[(&str, &str)] = &[
    ("x-mock-input-tokens", "120"),
    ("x-mock-output-tokens", "30"),
];

#[tokio::test]
async fn chat_completions_json_and_sse_with_usage_only_when_asked() {
    let mock = MockLlm::start().await;
    let r = call(&mock, "/v1/chat/completions", &chat(false), TOKENS).await;
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json()["usage"]["total_tokens"], 150);
    assert_eq!(usage(Api::OpenAiChat, &r.body), Some(Usage::new(120, 30)));

    let r = call(&mock, "/v1/chat/completions", &chat(true), TOKENS).await;
    assert_eq!(
        r.header("content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    let evs = events(&r.body);
    assert_eq!(
        evs.len(),
        3 + 2 + 1,
        "role, 3 deltas, finish, [DONE]: {evs:?}"
    );
    assert!(evs.iter().all(|e| e.get("usage").is_none()));
    assert_eq!(evs.last(), Some(&json!("[DONE]")));
    assert_eq!(usage(Api::OpenAiChat, &r.body), None);

    let mut asked = chat(true);
    asked["stream_options"] = json!({"include_usage": true});
    let r = call(&mock, "/v1/chat/completions", &asked, TOKENS).await;
    let evs = events(&r.body);
    assert_eq!(evs.len(), 7);
    assert!(evs[..5]
        .iter()
        .all(|e| e["usage"].is_null() && e.get("usage").is_some()));
    assert_eq!(evs[5]["choices"], json!([]));
    assert_eq!(evs[5]["usage"]["prompt_tokens"], 120);
    assert_eq!(usage(Api::OpenAiChat, &r.body), Some(Usage::new(120, 30)));
    // What a client that did not ask gets once the gateway's filter ran.
    let mut filter = UsageChunkFilter::new();
    let mut out = filter.push(r.body.clone()).to_vec();
    out.extend_from_slice(&filter.finish());
    assert_eq!(events(&out).len(), 6);
    assert_eq!(filter.usage(), Some(Usage::new(120, 30)));

    let seen = mock.requests();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[2].path, "/v1/chat/completions");
    assert_eq!(seen[2].json(), asked);
    assert_eq!(seen[2].header("x-mock-input-tokens"), Some("120"));
}

#[tokio::test]
async fn responses_and_messages_in_json_and_sse() {
    let mock = MockLlm::start().await;
    let resp = |stream| json!({"model": "gpt-4.1", "input": "Hi", "stream": stream});
    let msg = |stream| {
        json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": stream,
        "messages": [{"role": "user", "content": "Hi"}]})
    };
    let r = call(&mock, "/v1/responses", &resp(false), TOKENS).await;
    assert_eq!(r.json()["usage"]["total_tokens"], 150);
    assert_eq!(
        usage(Api::OpenAiResponses, &r.body),
        Some(Usage::new(120, 30))
    );

    let r = call(&mock, "/v1/responses", &resp(true), TOKENS).await;
    let evs = events(&r.body);
    let kinds: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"));
    assert_eq!(kinds.last(), Some(&"response.completed"));
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "response.output_text.delta")
            .count(),
        3
    );
    assert!(evs[0]["response"]["usage"].is_null());
    assert_eq!(
        usage(Api::OpenAiResponses, &r.body),
        Some(Usage::new(120, 30))
    );

    let r = call(&mock, "/v1/messages", &msg(false), TOKENS).await;
    assert_eq!(r.json()["usage"]["output_tokens"], 30);
    assert_eq!(
        usage(Api::AnthropicMessages, &r.body),
        Some(Usage::new(120, 30))
    );

    let r = call(&mock, "/v1/messages", &msg(true), TOKENS).await;
    let evs = events(&r.body);
    assert_eq!(evs[0]["type"], "message_start");
    assert_eq!(evs[0]["message"]["usage"]["input_tokens"], 120);
    assert_eq!(evs[evs.len() - 2]["usage"]["output_tokens"], 30);
    assert_eq!(
        usage(Api::AnthropicMessages, &r.body),
        Some(Usage::new(120, 30))
    );
    assert!(r.text().contains("event: message_delta\ndata: "));
}

#[tokio::test]
async fn output_stops_at_the_requests_max_output_tokens() {
    let mock = MockLlm::start().await;
    let headers = &[("x-mock-output-tokens", "500")];
    let mut body = chat(false);
    body["max_completion_tokens"] = json!(40);
    let r = call(&mock, "/v1/chat/completions", &body, headers).await;
    assert_eq!(r.json()["choices"][0]["finish_reason"], "length");
    assert_eq!(usage(Api::OpenAiChat, &r.body), Some(Usage::new(10, 40)));
    let body = json!({"model": "m", "input": "x", "stream": true, "max_output_tokens": 7});
    let r = call(&mock, "/v1/responses", &body, headers).await;
    assert_eq!(
        events(&r.body).last().unwrap()["type"],
        "response.incomplete"
    );
    assert_eq!(
        usage(Api::OpenAiResponses, &r.body),
        Some(Usage::new(10, 7))
    );
    let body = json!({"model": "m", "max_tokens": 9, "stream": true, "messages": []});
    let r = call(&mock, "/v1/messages", &body, headers).await;
    assert_eq!(
        usage(Api::AnthropicMessages, &r.body),
        Some(Usage::new(10, 9))
    );
}

#[tokio::test]
async fn omitted_usage_errors_and_events() {
    let mock = MockLlm::start().await;
    let omit = &[("x-mock-omit-usage", "1")];
    let mut asked = chat(true);
    asked["stream_options"] = json!({"include_usage": true});
    for (path, api, body) in [
        ("/v1/chat/completions", Api::OpenAiChat, chat(false)),
        ("/v1/chat/completions", Api::OpenAiChat, asked),
        (
            "/v1/responses",
            Api::OpenAiResponses,
            json!({"model": "m", "input": "x", "stream": true}),
        ),
        (
            "/v1/messages",
            Api::AnthropicMessages,
            json!({"model": "m", "stream": true, "messages": []}),
        ),
        (
            "/v1/messages",
            Api::AnthropicMessages,
            json!({"model": "m", "messages": []}),
        ),
    ] {
        let r = call(&mock, path, &body, omit).await;
        assert_eq!(r.status, 200);
        assert_eq!(usage(api, &r.body), None, "{path} {body}: {}", r.text());
    }
    let r = call(
        &mock,
        "/v1/chat/completions",
        &chat(true),
        &[("x-mock-status", "500")],
    )
    .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["error"]["type"], "server_error");
    let r = call(
        &mock,
        "/v1/messages",
        &chat(true),
        &[("x-mock-status", "529")],
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["type"].clone()),
        (529, json!("error"))
    );
    assert_eq!(mock.started_streams(), 3, "no stream for an error");
    let r = call(
        &mock,
        "/v1/responses",
        &json!({"model": "m", "stream": true}),
        &[("x-mock-events", "7")],
    )
    .await;
    assert_eq!(
        r.text().matches("response.output_text.delta").count(),
        2 * 7
    );
}

#[tokio::test]
async fn delays_before_the_head_and_between_events() {
    let mock = MockLlm::start().await;
    let t = Instant::now();
    let head = post(
        &mock,
        "/v1/chat/completions",
        &chat(true),
        &[("x-mock-delay-ms", "300")],
    )
    .await;
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    client::collect(head).await.unwrap();

    let headers = &[("x-mock-chunk-delay-ms", "100"), ("x-mock-events", "2")];
    let t = Instant::now();
    let mut body = post(&mock, "/v1/chat/completions", &chat(true), headers)
        .await
        .into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "first event at once: {:?}",
        t.elapsed()
    );
    assert!(first.starts_with(b"data: {"));
    let rest = body.collect().await.unwrap().to_bytes();
    // Four more events, 100 ms apart: 2 deltas, finish, [DONE].
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    assert!(rest.ends_with(b"data: [DONE]\n\n"));
}

#[tokio::test]
async fn held_cut_and_abandoned_streams_are_counted() {
    let mock = MockLlm::start().await;
    let mut held = Vec::new();
    for _ in 0..5 {
        let mut body = post(
            &mock,
            "/v1/messages",
            &json!({"model": "m", "stream": true}),
            &[("x-mock-hold", "1")],
        )
        .await
        .into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(first.starts_with(b"event: message_start\n"));
        held.push(body);
    }
    assert_eq!(
        (
            mock.open_streams(),
            mock.peak_streams(),
            mock.finished_streams()
        ),
        (5, 5, 0)
    );
    // A client that goes away closes its stream.
    drop(held.pop());
    common::eventually(
        Duration::from_secs(5),
        "the abandoned stream closed",
        || async { (mock.open_streams() == 4).then_some(()) },
    )
    .await;
    mock.release();
    for body in held {
        let rest = body.collect().await.unwrap().to_bytes();
        assert!(rest.ends_with(b"data: {\"type\":\"message_stop\"}\n\n"));
    }
    common::eventually(Duration::from_secs(5), "every stream closed", || async {
        (mock.open_streams() == 0).then_some(())
    })
    .await;
    assert_eq!(
        (
            mock.started_streams(),
            mock.finished_streams(),
            mock.peak_streams()
        ),
        (5, 4, 5)
    );

    // A stream cut after two events: the client sees an error, no usage.
    let mut body = post(
        &mock,
        "/v1/chat/completions",
        &chat(true),
        &[("x-mock-abort-after", "2")],
    )
    .await
    .into_body();
    let mut got = Vec::new();
    let err = loop {
        match body.frame().await {
            Some(Ok(f)) => got.extend_from_slice(&f.into_data().unwrap()),
            Some(Err(e)) => break Some(e),
            None => break None,
        }
    };
    assert!(
        err.is_some(),
        "the cut stream ended cleanly: {}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(events(&got).len(), 2);
    assert_eq!(mock.finished_streams(), 4);
}
