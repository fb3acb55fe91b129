//! What the gateway answers by itself, through the real binary: custom
//! rejection messages (docs/configuration/limit-response.md `limit_response.body` `content_type`,
//! `locked_body`, per route and server-wide), gRPC requests getting every
//! gateway error as `grpc-status` (docs/protocols.md), `TRACE` and `CONNECT` (405),
//! and `limiter_unavailable` (503) when the store is down under
//! `on_error: deny`.

mod common;

use http::Method;

use common::client::{self, Resp};
use common::{config, config_with_server, raw, Gateway, OneRoute};

/// Routes with one request per client each (`burst: 1`, a refill far off).
const LIMITED: &str = r#"
limits:
  once: { algorithm: token_bucket, rate: 1/1000d, burst: 1, key: "header:x-user" }
  locking: { algorithm: gcra, rate: 1/1000d, burst: 1, key: "header:x-user", lockout: { duration: 1h } }
routes:
  - name: plain
    match: { exact: /plain }
    respond: { status: 200 }
    limits: [once]
  - name: custom
    match: { exact: /custom }
    respond: { status: 200 }
    limits: [once]
    limit_response:
      status: 503
      body: "Too many requests, retry in {retry_after}s ({limit})"
  - name: json
    match: { exact: /json }
    respond: { status: 200 }
    limits: [locking]
    limit_response:
      content_type: application/json
      body: '{"message": "slow down", "id": "{request_id}"}'
      locked_body: '{"message": "{error} by {limit}", "id": "{request_id}"}'
"#;

/// The server-wide default every route above without its own body takes.
const SERVER_DEFAULT: &str = r#"
limit_response:
  body: "quota {limit} used up ({error})"
  content_type: text/plain; charset=utf-8
"#;

async fn get_as(gw: &Gateway, path: &str, user: &str, extra: &[(&str, &str)]) -> Resp {
    let mut headers = vec![("x-user", user)];
    headers.extend_from_slice(extra);
    client::get_with(gw.addr(), path, &headers).await
}

#[tokio::test]
async fn custom_rejection_messages_per_route_and_server_wide() {
    let gw = Gateway::start(&config_with_server(SERVER_DEFAULT, LIMITED)).await;

    // The server-wide message, on a route that names none.
    assert_eq!(get_as(&gw, "/plain", "ann", &[]).await.status, 200);
    let r = get_as(&gw, "/plain", "ann", &[]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.text(), "quota once used up (rate_limited)");
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert!(r.header("retry-after").is_some());
    assert!(r.header("ratelimit").is_some());

    // The route's own status and message (its content type: the server's).
    assert_eq!(get_as(&gw, "/custom", "bob", &[]).await.status, 200);
    let r = get_as(&gw, "/custom", "bob", &[]).await;
    assert_eq!(r.status, 503);
    let retry = r.header("retry-after").unwrap().to_owned();
    assert_eq!(
        r.text(),
        format!("Too many requests, retry in {retry}s (once)")
    );

    // JSON: `locked_body` for the rejection that locks, values escaped.
    assert_eq!(get_as(&gw, "/json", "cy", &[]).await.status, 200);
    let r = get_as(&gw, "/json", "cy", &[]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let id = r.header("x-request-id").unwrap().to_owned();
    assert_eq!(
        r.json(),
        serde_json::json!({"message": "locked_out by locking", "id": id})
    );
}

#[tokio::test]
async fn the_default_rejection_is_the_spec_json() {
    let gw = Gateway::start(&config(LIMITED)).await;
    assert_eq!(get_as(&gw, "/plain", "ann", &[]).await.status, 200);
    let r = get_as(&gw, "/plain", "ann", &[]).await;
    r.assert_error(429, "rate_limited");
    let j = r.json();
    assert_eq!(j["limit"], "once");
    assert!(j["retry_after"].as_u64().unwrap() > 1000);
    assert_eq!(r.header("content-type"), Some("application/json"));
}

/// A gRPC request over h2c: `content-type: application/grpc`.
async fn grpc(gw: &Gateway, path: &str, user: &str) -> Resp {
    let req = client::req(Method::POST, gw.addr(), path)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-user", user)
        .body(client::empty())
        .unwrap();
    client::send(&client::h2c(), req).await
}

#[tokio::test]
async fn grpc_requests_get_grpc_status_for_every_gateway_error() {
    let gw = Gateway::start(&config_with_server(SERVER_DEFAULT, LIMITED)).await;
    // No route: UNIMPLEMENTED (12).
    let r = grpc(&gw, "/pkg.Service/Missing", "ann").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/grpc"));
    assert_eq!(r.header("grpc-status"), Some("12"));
    assert_eq!(r.header("grpc-message"), Some("no_route"));
    assert!(r.body.is_empty());
    // Rate limited: RESOURCE_EXHAUSTED (8), the configured message.
    assert_eq!(
        grpc(&gw, "/custom", "dan").await.header("grpc-status"),
        None
    );
    let r = grpc(&gw, "/custom", "dan").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("grpc-status"), Some("8"));
    let retry = r.header("retry-after").unwrap().to_owned();
    assert_eq!(
        r.header("grpc-message"),
        Some(format!("Too many requests, retry in {retry}s (once)").as_str())
    );
    // A bad request target (a `..` above the root): INTERNAL (13), as
    // gRPC's table maps HTTP 400.
    let r = grpc(&gw, "/../../etc/passwd", "dan").await;
    assert_eq!(
        (r.status.as_u16(), r.header("grpc-status")),
        (200, Some("13"))
    );
}

#[tokio::test]
async fn grpc_requests_get_unavailable_when_the_store_is_down_under_deny() {
    // A Redis URL nobody listens on, and on_error: deny.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let gw = OneRoute::new()
        .store(&format!(
            "{{ backend: redis, url: \"redis://127.0.0.1:{port}/0\", on_error: deny, timeout: 100ms }}"
        ))
        .limit("l", "{ algorithm: gcra, rate: 10/s }")
        .start()
        .await;
    client::get(gw.addr(), "/")
        .await
        .assert_error(503, "limiter_unavailable");
    let r = grpc(&gw, "/svc/Method", "x").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("grpc-status"), Some("14"));
    assert_eq!(r.header("grpc-message"), Some("limiter_unavailable"));
}

#[tokio::test]
async fn problem_details_for_rejections_and_an_undecidable_store() {
    // Two limits, both rejecting the second request: both are violated.
    let gw = OneRoute::new()
        .server("limit_response: { format: problem }")
        .limit(
            "a",
            "{ algorithm: fixed_window, limit: 1, window: 1h, key: client_ip }",
        )
        .limit(
            "b",
            "{ algorithm: token_bucket, rate: 1/1000d, burst: 1, key: client_ip }",
        )
        .start()
        .await;
    assert_eq!(client::get(gw.addr(), "/").await.status, 200);
    let r = client::get(gw.addr(), "/").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let j = r.json();
    assert_eq!(
        j["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(
        (j["title"].as_str(), j["status"].as_u64()),
        (Some("Quota Exceeded"), Some(429))
    );
    assert_eq!(j["violated-policies"], serde_json::json!(["a", "b"]));
    assert_eq!(
        j["retry_after"].as_u64().map(|s| s.to_string()).as_deref(),
        r.header("retry-after")
    );
    assert_eq!(j["request_id"].as_str(), r.header("x-request-id"));

    // on_error: deny with the store down: 503 temporary-reduced-capacity.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let gw = OneRoute::new()
        .server("limit_response: { format: problem }")
        .store(&format!(
            "{{ backend: redis, url: \"redis://127.0.0.1:{port}/0\", on_error: deny, timeout: 100ms }}"
        ))
        .limit("l", "{ algorithm: gcra, rate: 10/s }")
        .start()
        .await;
    let r = client::get(gw.addr(), "/").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let j = r.json();
    assert_eq!(
        j["type"],
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    );
    assert_eq!(j["violated-policies"], serde_json::json!(["l"]));
}

#[tokio::test]
async fn trace_and_connect_are_answered_405() {
    let gw = OneRoute::new().named("all").start().await;
    let r = raw::request(
        gw.addr(),
        b"TRACE /anything HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
    )
    .await;
    raw::assert_error(&r, 405, "method_not_allowed");
    let mut conn = raw::connect(gw.addr()).await;
    conn.write(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
        .await
        .unwrap();
    let r = conn
        .read_response(std::time::Duration::from_secs(3))
        .await
        .unwrap();
    raw::assert_error(&r, 405, "method_not_allowed");
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "a CONNECT never tunnels"
    );
}
