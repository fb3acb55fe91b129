//! Quotas for tenants (docs/configuration/quotas.md), through the real
//! binary: calendar windows (periods in a time zone, anchors, the gap and
//! the fold) replayed by `tollgate simulate` on its virtual clock with the
//! issue's exact boundaries, and live on the memory store and Redis (the
//! period's `w` and `t`, the key's TTL a day past the period's end, zones
//! from consumers' attributes).

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use sha2::{Digest, Sha256};

use common::client;
use common::redis::RedisServer;
use common::{config, config_with_store, simulate, Gateway};

const DAY: u64 = 86_400;

/// `simulate --json` of `window` (a calendar window, limit 1 unless
/// `limit` says) over requests at `times` (RFC 3339), from one client:
/// whether each was allowed, in order.
fn replay(name: &str, limit: u64, window: &str, times: &[&str]) -> Vec<bool> {
    let d = simulate::scratch(&format!("quotas-{name}"));
    let config = format!(
        "limits:\n  q: {{ algorithm: fixed_window, limit: {limit}, window: {window} }}\nroutes:\n  - {{ name: api, match: {{ path: / }}, respond: {{ status: 200 }}, limits: [q] }}\n"
    );
    // One request per line, and one run per prefix: the last request's
    // verdict is the difference of two runs' counts.
    let mut allowed = Vec::new();
    let mut before = 0;
    for n in 1..=times.len() {
        let text: String = times[..n]
            .iter()
            .map(|t| format!("{{\"ts\":\"{t}\",\"client\":\"192.0.2.1\",\"method\":\"GET\",\"path\":\"/\"}}\n"))
            .collect();
        let doc = simulate::report(&d, &config, &text);
        let limit = &doc["limits"][0];
        assert_eq!(limit["name"], "q");
        let now = limit["allowed"].as_u64().unwrap();
        allowed.push(now > before);
        before = now;
    }
    allowed
}

#[test]
fn new_york_months_end_at_local_midnight() {
    let got = replay(
        "new-york",
        2,
        "{ calendar: month, tz: America/New_York }",
        &[
            "2026-03-31T23:59:58-04:00",
            "2026-03-31T23:59:59-04:00",
            // Still March in New York (April 1st, 03:59:59 UTC): over.
            "2026-03-31T23:59:59-04:00",
            // April starts at local midnight.
            "2026-04-01T00:00:00-04:00",
        ],
    );
    assert_eq!(got, [true, true, false, true]);
}

#[test]
fn anchor_day_31_ends_periods_on_the_months_last_day() {
    let got = replay(
        "anchor-31",
        1,
        "{ calendar: month, anchor_day: 31 }",
        &[
            "2027-02-27T23:59:59Z", // the period from Jan 31
            "2027-02-28T00:00:00Z", // Feb 28: a new one
            "2027-03-30T23:59:59Z", // still the Feb 28 period
            "2027-03-31T00:00:00Z", // Mar 31
            "2027-04-29T23:59:59Z",
            "2027-04-30T00:00:00Z", // Apr 30
        ],
    );
    assert_eq!(got, [true, true, false, true, false, true]);
}

#[test]
fn berlin_days_follow_the_clock_changes() {
    // anchor_time 02:30 does not exist on 2026-03-29 (02:00 -> 03:00):
    // that day's period starts at 03:00 CEST, 01:00 UTC.
    let got = replay(
        "berlin-gap",
        1,
        "{ calendar: day, tz: Europe/Berlin, anchor_time: \"02:30\" }",
        &[
            "2026-03-28T01:30:00Z", // 02:30 CET: the Mar 28 period
            "2026-03-29T00:59:59Z", // 01:59:59 CET: still it
            "2026-03-29T01:00:00Z", // 03:00 CEST: the Mar 29 period
            "2026-03-29T01:00:01Z",
        ],
    );
    assert_eq!(got, [true, false, true, false]);
    // 2026-10-25 has 25 hours: midnight to midnight is 90,000 s, so
    // 24 h after its start is still the same period.
    let got = replay(
        "berlin-fold",
        1,
        "{ calendar: day, tz: Europe/Berlin }",
        &[
            "2026-10-24T22:00:00Z", // 00:00 CEST, Oct 25
            "2026-10-25T22:00:00Z", // 23:00 CET: 24 h later, same day
            "2026-10-25T22:59:59Z",
            "2026-10-25T23:00:00Z", // 00:00 CET, Oct 26
        ],
    );
    assert_eq!(got, [true, false, false, true]);
}

#[test]
fn tokyo_weeks_start_on_monday() {
    let got = replay(
        "tokyo-week",
        1,
        "{ calendar: week, tz: Asia/Tokyo, week_start: monday }",
        &[
            "2026-11-23T00:00:00+09:00", // Monday
            "2026-11-29T23:59:59+09:00", // Sunday night: the same week
            "2026-11-30T00:00:00+09:00", // Monday: the next
        ],
    );
    assert_eq!(got, [true, false, true]);
}

#[test]
fn a_year_anchored_on_february_29() {
    let got = replay(
        "feb-29",
        1,
        "{ calendar: year, anchor_month: 2, anchor_day: 29 }",
        &[
            "2027-02-27T23:59:59Z", // the period from 2026-02-28
            "2027-02-28T00:00:00Z", // no Feb 29 in 2027: Feb 28
            "2028-02-28T23:59:59Z", // still it
            "2028-02-29T00:00:00Z", // a leap year: Feb 29
        ],
    );
    assert_eq!(got, [true, true, false, true]);
}

/// Seconds since the epoch, now.
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Seconds from `now` to the next midnight at UTC offset `offset` (hours).
fn to_midnight(now: u64, offset: i64) -> u64 {
    let local = (now as i64 + offset * 3600).rem_euclid(DAY as i64) as u64;
    DAY - local
}

/// The `(w, t)` of limit `name` in a response's `RateLimit-Policy` and
/// `RateLimit`.
fn w_and_t(r: &client::Resp, name: &str) -> (u64, u64) {
    let param = |field: &str, key: &str| -> u64 {
        let value = r.header(field).unwrap_or_else(|| panic!("no {field}"));
        let item = value
            .split(", ")
            .find(|i| i.starts_with(&format!("\"{name}\"")))
            .unwrap_or_else(|| panic!("no {name} in {value}"));
        item.split(';')
            .find_map(|p| p.strip_prefix(&format!("{key}=")))
            .unwrap()
            .parse()
            .unwrap()
    };
    (param("ratelimit-policy", "w"), param("ratelimit", "t"))
}

const DAILY: &str = r#"
limits:
  daily: { algorithm: fixed_window, limit: 3, window: { calendar: day }, key: "header:x-user" }
routes:
  - name: api
    match: { path: / }
    respond: { status: 200 }
    limits: [daily]
"#;

/// Three requests a UTC day: `w` is the day, `t` the time to midnight,
/// and the fourth waits for midnight.
async fn a_utc_day(gw: &Gateway) {
    let before = unix_now();
    for n in 1..=3 {
        let r = client::get_with(gw.addr(), "/", &[("x-user", "ann")]).await;
        assert_eq!(r.status, 200, "request {n}");
        let (w, t) = w_and_t(&r, "daily");
        assert_eq!(w, DAY);
        let after = unix_now();
        assert!(
            (to_midnight(after, 0)..=to_midnight(before, 0)).contains(&t)
                || to_midnight(before, 0) < to_midnight(after, 0),
            "t {t}"
        );
    }
    let r = client::get_with(gw.addr(), "/", &[("x-user", "ann")]).await;
    assert_eq!(r.status, 429);
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    let left = to_midnight(unix_now(), 0);
    assert!(
        retry.abs_diff(left) <= 2,
        "Retry-After {retry}, midnight in {left}"
    );
}

#[tokio::test]
async fn a_calendar_day_on_the_memory_store() {
    let gw = Gateway::start(&config(DAILY)).await;
    a_utc_day(&gw).await;
}

#[tokio::test]
async fn a_calendar_day_on_redis_keeps_its_key_a_day_past_the_period() {
    let redis = RedisServer::start();
    let store = format!(
        "{{ backend: redis, url: \"{}\", prefix: cal }}",
        redis.url()
    );
    let gw = Gateway::start(&config_with_store(&store, DAILY)).await;
    a_utc_day(&gw).await;
    let keys: Vec<String> = redis
        .keys()
        .await
        .into_iter()
        .filter(|k| k.ends_with(":s"))
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let pttl = redis.pttl(&keys[0]).await as u64 / 1000;
    let expect = to_midnight(unix_now(), 0) + DAY;
    assert!(
        pttl.abs_diff(expect) <= 3,
        "PTTL {pttl} s, expected {expect}"
    );
}

#[tokio::test]
async fn a_calendar_day_on_redis_cluster() {
    let cluster = common::cluster::RedisCluster::start();
    let store = format!(
        "{{ backend: redis_cluster, urls: {}, prefix: calc }}",
        cluster.seeds_yaml()
    );
    let gw = Gateway::start(&config_with_store(&store, DAILY)).await;
    a_utc_day(&gw).await;
}

fn digest(key: &str) -> String {
    format!("sha256:{}", hex(&Sha256::digest(key.as_bytes())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn each_tenant_counts_days_in_its_own_zone() {
    let text = format!(
        r#"
consumers:
  api_keys: {{ header: x-api-key }}
  list:
    - {{ name: tokyo, keys: ["{}"], attributes: {{ tz: Etc/GMT-9 }} }}
    - {{ name: lima, keys: ["{}"], attributes: {{ tz: Etc/GMT+5 }} }}
    - {{ name: nowhere, keys: ["{}"], attributes: {{ tz: Mars/Olympus }} }}
limits:
  daily:
    algorithm: fixed_window
    limit: 5
    window: {{ calendar: day, tz: "attr:tz" }}
    key: consumer
routes:
  - name: api
    match: {{ path: / }}
    respond: {{ status: 200 }}
    auth: {{ require: api_key }}
    limits: [daily]
"#,
        digest("tokyo-key"),
        digest("lima-key"),
        digest("nowhere-key")
    );
    let gw = Gateway::start(&config(&text)).await;
    // Etc/GMT-9 is UTC+9 and Etc/GMT+5 UTC-5 (POSIX signs); an unknown
    // zone counts in UTC.
    for (key, offset) in [("tokyo-key", 9), ("lima-key", -5), ("nowhere-key", 0)] {
        let before = unix_now();
        let r = client::get_with(gw.addr(), "/", &[("x-api-key", key)]).await;
        assert_eq!(r.status, 200, "{key}");
        let (w, t) = w_and_t(&r, "daily");
        assert_eq!(w, DAY, "{key}");
        let expect = to_midnight(before, offset);
        assert!(
            t.abs_diff(expect) <= 2 || t.abs_diff(expect) >= DAY - 2,
            "{key}: t {t}, expected {expect}"
        );
    }
}

// ---------------------------------------------------------------------------
// Per-key limits: PUT/GET/DELETE /quotas/{limit}/{key}
// ---------------------------------------------------------------------------

/// `method` on the admin API with a JSON `body`.
async fn admin(gw: &Gateway, method: http::Method, path: &str, body: &str) -> client::Resp {
    let r = client::req(method, gw.admin_addr(), path)
        .header("content-type", "application/json")
        .body(client::full(body.to_owned()))
        .unwrap();
    client::send(&client::h1(), r).await
}

/// A request of `user` on `/`.
async fn hit(gw: &Gateway, user: &str) -> u16 {
    client::get_with(gw.addr(), "/", &[("x-user", user)])
        .await
        .status
        .as_u16()
}

/// `n` requests of `user`: how many passed.
async fn passed(gw: &Gateway, user: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        if hit(gw, user).await == 200 {
            ok += 1;
        }
    }
    ok
}

const PER_KEY: &str = r#"
limits:
  monthly:
    algorithm: fixed_window
    limit: { default: 3, from: store }
    window: { calendar: month }
    key: "header:x-user"
  bucket:
    algorithm: token_bucket
    rate: { default: 1/1000d, from: store }
    burst: { default: 2, from: store }
    key: "header:x-user"
  fixed: { algorithm: fixed_window, limit: 100, window: 1h, key: "header:x-user" }
routes:
  - { name: bucket, match: { path: /bucket }, respond: { status: 200 }, limits: [bucket] }
  - { name: api, match: { path: / }, respond: { status: 200 }, limits: [monthly, fixed] }
"#;

#[tokio::test]
async fn bad_values_are_400_and_change_nothing() {
    let gw = Gateway::start(&config(PER_KEY)).await;
    use http::Method;
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "/quotas/monthly/ann",
            r#"{"limit": -5}"#,
            "bad_value",
            "at least 1, got -5",
        ),
        (
            "/quotas/monthly/ann",
            r#"{"limit": 0}"#,
            "bad_value",
            "at least 1, got 0",
        ),
        (
            "/quotas/monthly/ann",
            r#"{"limit": 2.5}"#,
            "bad_value",
            "whole number",
        ),
        (
            "/quotas/monthly/ann",
            r#"{"limit": "lots"}"#,
            "bad_value",
            "must be a number",
        ),
        (
            "/quotas/monthly/ann",
            r#"{"burst": 5}"#,
            "bad_value",
            "unknown field `burst`",
        ),
        (
            "/quotas/monthly/ann",
            r#"{}"#,
            "bad_value",
            "at least one of limit",
        ),
        (
            "/quotas/monthly/ann",
            r#"[5]"#,
            "bad_value",
            "a JSON object",
        ),
        (
            "/quotas/monthly/ann",
            r#"{"limit": 5"#,
            "bad_value",
            "not JSON",
        ),
        (
            "/quotas/monthly/ann",
            r#"{"limit": 10000000000000}"#,
            "bad_value",
            "too large",
        ),
        (
            "/quotas/bucket/ann",
            r#"{"rate": "fast"}"#,
            "bad_value",
            "rate",
        ),
        (
            "/quotas/bucket/ann",
            r#"{"burst": 0}"#,
            "bad_value",
            "at least 1",
        ),
        (
            "/quotas/monthly/ann",
            r#"{"limit": 100, "limit": 999999}"#,
            "bad_value",
            "the member `limit` is repeated",
        ),
        (
            "/quotas/monthly/ann",
            r#"{"limit": 5, "\u006cimit": 5}"#,
            "bad_value",
            "the member `limit` is repeated",
        ),
        (
            "/quotas/bucket/ann",
            r#"{"rate": "1/s", "burst": 3, "burst": 9}"#,
            "bad_value",
            "the member `burst` is repeated",
        ),
        (
            "/quotas/nope/ann",
            r#"{"limit": 5}"#,
            "unknown_limit",
            "no limit named \"nope\"",
        ),
        (
            "/quotas/fixed/ann",
            r#"{"limit": 5}"#,
            "not_per_key",
            "no per-key values",
        ),
    ];
    for (path, body, error, message) in cases {
        let r = admin(&gw, Method::PUT, path, body).await;
        assert_eq!(r.status, 400, "{path} {body}: {}", r.text());
        let j = r.json();
        assert_eq!(j["error"], *error, "{path} {body}: {j}");
        let m = j["message"].as_str().unwrap();
        assert!(m.contains(message), "{path} {body}: {m}");
    }
    for path in ["/quotas/monthly/ann", "/quotas/bucket/ann"] {
        let j = admin(&gw, Method::GET, path, "").await.json();
        assert_eq!(j["value"], Value::Null, "{path}: nothing changed: {j}");
    }
    assert_eq!(passed(&gw, "ann", 4).await, 3, "the default still applies");
    let r = admin(&gw, Method::POST, "/quotas/monthly/ann", "{}").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, PUT, DELETE"));
}

const KEYED: &str = r#"
limits:
  tokens:
    algorithm: fixed_window
    limit: { default: 1, from: store }
    window: 1h
    key: "header:x-tenant"
  by_query:
    algorithm: fixed_window
    limit: { default: 1, from: store }
    window: 1h
    key: "query:user"
  per_route:
    algorithm: fixed_window
    limit: { default: 1, from: store }
    window: 1h
    key: route
routes:
  - { name: q, match: { path: /q }, respond: { status: 200 }, limits: [by_query] }
  - { name: api, match: { path: / }, respond: { status: 200 }, limits: [tokens, per_route] }
"#;

/// The quota keys (`...:q`) in `redis`.
async fn quota_keys(redis: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = redis
        .keys()
        .await
        .into_iter()
        .filter(|k| k.ends_with(":q"))
        .collect();
    keys.sort();
    keys
}

/// Asserts `r` (of `what`) is 400 `bad_key` with a message holding
/// `reason`.
fn assert_bad_key(r: &client::Resp, what: &str, reason: &str) {
    assert_eq!(r.status, 400, "{what}: {}", r.text());
    let j = r.json();
    assert_eq!(j["error"], "bad_key", "{what}: {j}");
    let m = j["message"].as_str().unwrap_or_default();
    assert!(m.contains(reason), "{what}: {m}");
}

#[tokio::test]
async fn keys_no_request_can_have_are_bad_key_and_write_nothing() {
    use http::Method;
    let redis = RedisServer::start();
    let store = format!("{{ backend: redis, url: \"{}\", prefix: bk }}", redis.url());
    let gw = Gateway::start(&config_with_store(&store, KEYED)).await;
    let header = "component 1 (header:x-tenant): a header value";
    let cases = [
        ("%00", "cannot hold control characters"),
        ("%0D", "cannot hold control characters"),
        ("%0A", "cannot hold control characters"),
        ("a%0D%0Ab", "cannot hold control characters"),
        ("%01", "cannot hold control characters"),
        ("%7F", "cannot hold control characters"),
        ("%20a", "cannot start with a space or tab"),
        ("a%09", "cannot end with a space or tab"),
    ];
    for (key, reason) in cases {
        for (method, path) in [
            (Method::PUT, format!("/quotas/tokens/{key}")),
            (Method::GET, format!("/quotas/tokens/{key}")),
            (Method::DELETE, format!("/quotas/tokens/{key}")),
            (Method::GET, format!("/limits/tokens/{key}")),
            (Method::DELETE, format!("/limits/tokens/{key}")),
        ] {
            let r = admin(&gw, method.clone(), &path, r#"{"limit": 5}"#).await;
            assert_bad_key(
                &r,
                &format!("{method} {path}"),
                &format!("{header} {reason}"),
            );
        }
    }
    // A route component names a route that counts this limit's requests.
    for (key, reason) in [
        ("nope", "not a route this limit counts requests of (api)"),
        ("q", "not a route this limit counts requests of (api)"),
        ("@127.0.0.1", "a route is never missing"),
    ] {
        let path = format!("/quotas/per_route/{key}");
        let r = admin(&gw, Method::PUT, &path, r#"{"limit": 5}"#).await;
        assert_bad_key(&r, &path, &format!("component 1 (route): {reason}"));
    }
    assert_eq!(
        quota_keys(&redis).await,
        Vec::<String>::new(),
        "nothing written"
    );

    // The same bytes are a query parameter's, which a request can send.
    for key in ["%00", "%0D", "%0A"] {
        let path = format!("/quotas/by_query/{key}");
        let r = admin(&gw, Method::PUT, &path, r#"{"limit": 2}"#).await;
        assert_eq!(r.status, 200, "{key}: {}", r.text());
        let j = admin(&gw, Method::GET, &path, "").await.json();
        assert_eq!(j["value"], json_of(r#"{"limit": 2}"#), "{key}: {j}");
    }
    assert_eq!(quota_keys(&redis).await.len(), 3);
    let addr = gw.addr();
    let statuses = |path: &'static str| async move {
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(client::get(addr, path).await.status.as_u16());
        }
        seen
    };
    assert_eq!(
        statuses("/q?user=%0D").await,
        [200, 200, 429],
        "its own limit of 2"
    );
    assert_eq!(statuses("/q?user=%0A").await, [200, 200, 429]);
    assert_eq!(
        statuses("/q?user=x").await,
        [200, 429, 429],
        "the default of 1"
    );
    // And a header source takes what a header can carry.
    let r = admin(
        &gw,
        Method::PUT,
        "/quotas/tokens/acme%20corp",
        r#"{"limit": 2}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = admin(&gw, Method::PUT, "/quotas/per_route/api", r#"{"limit": 9}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = client::get_with(gw.addr(), "/", &[("x-tenant", "acme corp")]).await;
        seen.push(r.status.as_u16());
    }
    assert_eq!(seen, [200, 200, 429]);
}

/// Raising a key's limit unblocks it at once (a rejected request never
/// counted); lowering keeps what it used; deleting goes back to the
/// default. `q` shows the key's own limit.
async fn raise_lower_delete(gw: &Gateway) {
    use http::Method;
    assert_eq!(passed(gw, "ann", 5).await, 3);
    let r = admin(gw, Method::PUT, "/quotas/monthly/ann", r#"{"limit": 5}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert_eq!(j["value"], json_of(r#"{"limit": 5}"#));
    assert_eq!(j["default"], json_of(r#"{"limit": 3}"#));
    assert_eq!(j["replaced"], false);
    let r = client::get_with(gw.addr(), "/", &[("x-user", "ann")]).await;
    assert_eq!(r.status, 200, "raised: the next request passes");
    assert!(r
        .header("ratelimit-policy")
        .unwrap()
        .contains("\"monthly\";q=5;"));
    assert!(r.header("ratelimit").unwrap().contains("\"monthly\";r=1;"));
    // A probe decides under the key's own value too, and takes nothing.
    let probe = admin(
        gw,
        Method::POST,
        "/probe",
        r#"{"path": "/", "headers": {"x-user": "ann"}}"#,
    )
    .await;
    assert_eq!(probe.status, 200, "{}", probe.text());
    let p = probe.json();
    assert_eq!(
        (&p["decision"], &p["limits"][0]["name"]),
        (&json_of("\"allowed\""), &json_of("\"monthly\"")),
        "{p}"
    );
    assert_eq!(
        (
            &p["limits"][0]["figures"]["q"],
            &p["limits"][0]["figures"]["r"]
        ),
        (&json_of("5"), &json_of("0")),
        "{p}"
    );
    assert_eq!(passed(gw, "ann", 3).await, 1, "5 in all");
    // Other keys keep the default.
    assert_eq!(passed(gw, "bob", 4).await, 3);
    // Lowered below what was used: rejected until the period ends.
    let r = admin(gw, Method::PUT, "/quotas/monthly/ann", r#"{"limit": 4}"#).await;
    assert_eq!(r.json()["replaced"], true);
    assert_eq!(hit(gw, "ann").await, 429);
    let r = admin(gw, Method::PUT, "/quotas/monthly/ann", r#"{"limit": 7}"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(passed(gw, "ann", 3).await, 2, "5 used of 7");
    let j = admin(gw, Method::GET, "/quotas/monthly/ann", "")
        .await
        .json();
    assert_eq!(j["effective"], json_of(r#"{"limit": 7}"#));
    let r = admin(gw, Method::DELETE, "/quotas/monthly/ann", "").await;
    assert_eq!(r.json()["deleted"], true);
    let j = admin(gw, Method::GET, "/quotas/monthly/ann", "")
        .await
        .json();
    assert_eq!(j["value"], Value::Null);
    assert_eq!(j["effective"], json_of(r#"{"limit": 3}"#));
    assert_eq!(hit(gw, "ann").await, 429);
    // GET /limits shows the key's own quota.
    admin(gw, Method::PUT, "/quotas/monthly/cy", r#"{"limit": 9}"#).await;
    assert_eq!(hit(gw, "cy").await, 200);
    let j = gw.admin_get("/limits/monthly/cy").await.json();
    assert_eq!(
        (j["quota"].as_u64(), j["remaining"].as_u64()),
        (Some(9), Some(8)),
        "{j}"
    );

    // A bucket's burst per key: five at once instead of two.
    let r = admin(
        gw,
        Method::PUT,
        "/quotas/bucket/dan",
        r#"{"burst": 5, "rate": "2/s"}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["value"], json_of(r#"{"rate": "2/s", "burst": 5}"#));
    let mut ok = 0;
    for _ in 0..6 {
        let r = client::get_with(gw.addr(), "/bucket", &[("x-user", "dan")]).await;
        ok += usize::from(r.status == 200);
    }
    assert_eq!(ok, 5);
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[tokio::test]
async fn per_key_limits_on_the_memory_store() {
    let gw = Gateway::start(&config(PER_KEY)).await;
    raise_lower_delete(&gw).await;
}

#[tokio::test]
async fn per_key_limits_on_redis() {
    let redis = RedisServer::start();
    let store = format!("{{ backend: redis, url: \"{}\", prefix: pk }}", redis.url());
    let gw = Gateway::start(&config_with_store(&store, PER_KEY)).await;
    raise_lower_delete(&gw).await;
    // The values live beside the counters, with no expiry.
    let quota_keys: Vec<String> = redis
        .keys()
        .await
        .into_iter()
        .filter(|k| k.ends_with(":q"))
        .collect();
    assert_eq!(quota_keys.len(), 2, "cy and dan: {quota_keys:?}");
    for k in &quota_keys {
        assert_eq!(redis.pttl(k).await, -1, "{k} has no TTL");
        let tag = &k[k.find('{').unwrap()..=k.find('}').unwrap()];
        let state = format!("pk:{tag}:s");
        assert!(redis.keys().await.contains(&state), "{state} beside {k}");
    }
}

/// The envoyproxy/ratelimit#1077 case: instance B has rejected a key
/// (several times: a deny cache would have it by now); instance A raises
/// its limit; B's very next request of that key is decided by the store.
async fn raised_on_a_passes_on_b(store: &str) {
    // The route's one limit is the per-key one, so a deny cache could
    // answer the whole request.
    let solo = PER_KEY.replace("limits: [monthly, fixed]", "limits: [monthly]");
    let a = Gateway::start(&config_with_store(store, &solo)).await;
    let b = Gateway::start(&config_with_store(store, &solo)).await;
    assert_eq!(passed(&b, "eve", 6).await, 3);
    let r = admin(
        &a,
        http::Method::PUT,
        "/quotas/monthly/eve",
        r#"{"limit": 4}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(hit(&b, "eve").await, 200, "B asks the store");
    assert_eq!(hit(&b, "eve").await, 429);
    assert_eq!(hit(&a, "eve").await, 429, "4 used on both");
}

#[tokio::test]
async fn a_raised_limit_holds_at_once_on_every_instance_redis() {
    let redis = RedisServer::start();
    raised_on_a_passes_on_b(&format!(
        "{{ backend: redis, url: \"{}\", prefix: ab }}",
        redis.url()
    ))
    .await;
}

#[tokio::test]
async fn a_raised_limit_holds_at_once_on_every_instance_cluster() {
    let cluster = common::cluster::RedisCluster::start();
    let store = format!(
        "{{ backend: redis_cluster, urls: {}, prefix: abc }}",
        cluster.seeds_yaml()
    );
    raised_on_a_passes_on_b(&store).await;
}

#[tokio::test]
async fn limits_from_consumers_attributes() {
    let text = format!(
        r#"
consumers:
  api_keys: {{ header: x-api-key }}
  list:
    - {{ name: big, keys: ["{}"], attributes: {{ monthly: 5 }} }}
    - {{ name: small, keys: ["{}"] }}
    - {{ name: odd, keys: ["{}"], attributes: {{ monthly: lots }} }}
limits:
  monthly:
    algorithm: fixed_window
    limit: {{ default: 2, from: "attr:monthly" }}
    window: {{ calendar: month }}
    key: consumer
routes:
  - {{ name: api, match: {{ path: / }}, respond: {{ status: 200 }}, auth: {{ require: api_key }}, limits: [monthly] }}
"#,
        digest("big-key"),
        digest("small-key"),
        digest("odd-key")
    );
    let gw = Gateway::start(&config(&text)).await;
    for (key, want) in [("big-key", 5), ("small-key", 2), ("odd-key", 2)] {
        let mut ok = 0;
        for _ in 0..7 {
            let r = client::get_with(gw.addr(), "/", &[("x-api-key", key)]).await;
            ok += usize::from(r.status == 200);
        }
        assert_eq!(ok, want, "{key}");
    }
    // An attribute-driven limit takes no values from the store.
    let r = admin(
        &gw,
        http::Method::PUT,
        "/quotas/monthly/big",
        r#"{"limit": 9}"#,
    )
    .await;
    assert_eq!(r.json()["error"], "not_per_key");
}

#[test]
fn simulate_says_store_values_are_not_simulated() {
    let d = simulate::scratch("quotas-simulate-per-key");
    let config = "limits:\n  q: { algorithm: fixed_window, limit: { default: 2, from: store }, window: 1h }\nroutes:\n  - { name: api, match: { path: / }, respond: { status: 200 }, limits: [q] }\n";
    let log = "{\"ts\":1700000000,\"client\":\"192.0.2.1\",\"method\":\"GET\",\"path\":\"/\"}\n"
        .repeat(3);
    let run = |json: bool| simulate::simulate(&d, config, &log, json);
    let doc: Value = serde_json::from_slice(&run(true).stdout).unwrap();
    let q = &doc["limits"][0];
    assert_eq!(
        (q["allowed"].as_u64(), q["rejected"].as_u64()),
        (Some(2), Some(1)),
        "the default"
    );
    assert!(
        q["per_key"]
            .as_str()
            .unwrap()
            .contains("not simulated (simulate has no store)"),
        "{q}"
    );
    let text = String::from_utf8(run(false).stdout).unwrap();
    assert!(
        text.contains("note: q: limit per key from the store: not simulated"),
        "{text}"
    );
}
