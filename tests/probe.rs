//! `POST /probe` (docs/operations.md) against the real binary: the
//! decision a request would get now, consuming nothing.
//!
//! - After traffic that leaves counters, sorted sets, strikes and a
//!   lockout behind, 1,000 mixed probes (allowed, rejected, about to lock,
//!   locked out, new clients, a client holding a slot) answer exact
//!   figures and change nothing: on Redis every key, value and expiry
//!   instant (`PEXPIRETIME`) and every strike count stay as they were and
//!   no write command runs; on the memory store no client state, lockout,
//!   top offender or decision metric moves.
//! - A probe answers the decision the next real request then gets, on
//!   either store.
//! - The answer's shape: route, consumer, each limit (exempt, skipped,
//!   missing key, shadow, delayed), what the gateway answers (404, 403,
//!   401, 413, `failure_limit`); and the 400s of bad probes.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use http::Method;
use serde_json::{json, Value};

use common::limits::*;
use common::redis::{CommandStat, RedisServer};
use common::{Echo, Gateway, OneRoute};

const PREFIX: &str = "tgt";

/// A route to `echo` under four limits per `x-user`: a fixed window with a
/// lockout (the third rejection in an hour locks for an hour), a sliding
/// log and a concurrency limit (sorted sets on Redis), a token bucket. A
/// slow request may hold its slot for minutes.
fn four_limits(echo: &Echo) -> OneRoute {
    OneRoute::proxy(echo)
        .upstream_keys("timeout: 5m")
        .limit(
            "per_user",
            r#"{ algorithm: fixed_window, limit: 5, window: 1h, key: "header:x-user", lockout: { after: 3, within: 1h, duration: 1h } }"#,
        )
        .limit(
            "log",
            r#"{ algorithm: sliding_log, limit: 100, window: 1h, key: "header:x-user" }"#,
        )
        .limit(
            "bucket",
            r#"{ algorithm: token_bucket, rate: 10/h, burst: 10, key: "header:x-user" }"#,
        )
        .limit(
            "slots",
            r#"{ algorithm: concurrency, limit: 10, key: "header:x-user" }"#,
        )
}

/// The store on `redis`.
fn redis_store(redis: &RedisServer) -> String {
    format!(
        "{{ backend: redis, url: \"{}\", prefix: {PREFIX}, timeout: 2s, on_error: deny }}",
        redis.url()
    )
}

/// The probe of a `GET /` from `user`.
fn probe_of(user: &str) -> String {
    json!({"method": "GET", "path": "/", "headers": {"x-user": user}, "client": "127.0.0.1"})
        .to_string()
}

/// The traffic the probes then look at: `ok` used 2 of 5, `full` 5 and
/// took one strike, `strike2` two strikes (its next rejection locks),
/// `locked` is locked out, `slow` holds a slot of `slots` (as long as the
/// returned connection is open).
async fn drive(gw: &Gateway) -> common::raw::RawConn {
    let c = Caller::new(gw.addr());
    let ok = [200; 5];
    for (user, want) in [
        ("ok", &[200, 200][..]),
        ("full", &[&ok[..], &[429]].concat()),
        ("strike2", &[&ok[..], &[429, 429]].concat()),
        ("locked", &[&ok[..], &[429, 429, 429, 429]].concat()),
    ] {
        let got = c.statuses("/", &[("x-user", user)], want.len()).await;
        assert_eq!(got, want, "{user}");
    }
    assert_rejected(
        &c.get_h("/", &[("x-user", "locked")]).await,
        "locked_out",
        "per_user",
    );
    // Sent raw and never read: held as long as the connection is.
    let mut held = common::raw::connect(gw.addr()).await;
    held.write(b"GET /delay/240000 HTTP/1.1\r\nhost: h\r\nx-user: slow\r\n\r\n")
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    while limit_state(gw, "slots", "slow").await["remaining"] != 9 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "slow never took its slot"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    held
}

/// Seconds from `at` (since the epoch) to the end of its aligned hour,
/// rounded up, as `t` reports it.
fn to_hour_end(at: Duration) -> u64 {
    let us = at.as_micros() as u64;
    let end = (us / 3_600_000_000 + 1) * 3_600_000_000;
    (end - us).div_ceil(1_000_000)
}

/// What a probe of `user` must answer: the request's decision, and each
/// limit's decision and `r`.
fn expected(user: &str) -> (&'static str, [(&'static str, u64); 4]) {
    match user {
        "ok" => (
            "allowed",
            [
                ("allowed", 2),
                ("allowed", 97),
                ("allowed", 7),
                ("allowed", 9),
            ],
        ),
        "full" => (
            "rejected",
            [
                ("rejected", 0),
                ("not_consumed", 95),
                ("not_consumed", 5),
                ("not_consumed", 10),
            ],
        ),
        "strike2" | "locked" => (
            "locked_out",
            [
                ("locked_out", 0),
                ("not_consumed", 95),
                ("not_consumed", 5),
                ("not_consumed", 10),
            ],
        ),
        "slow" => (
            "allowed",
            [
                ("allowed", 3),
                ("allowed", 98),
                ("allowed", 8),
                ("allowed", 8),
            ],
        ),
        _ => (
            "allowed",
            [
                ("allowed", 4),
                ("allowed", 99),
                ("allowed", 9),
                ("allowed", 9),
            ],
        ),
    }
}

/// Checks the answer `a` to a probe of `user`, `per_user`'s `t` being
/// within `t` (the bounds the probe's clock was within).
#[track_caller]
fn check_answer(a: &Value, user: &str, t: (u64, u64)) {
    let (decision, limits) = expected(user);
    assert_eq!(a["client"], "127.0.0.1", "{a}");
    assert_eq!(a["route"], "all", "{a}");
    assert_eq!(a["consumer"], Value::Null, "{a}");
    assert_eq!(a["decision"], decision, "{user}: {a}");
    let names = ["per_user", "log", "bucket", "slots"];
    let algorithms = ["fixed_window", "sliding_log", "token_bucket", "concurrency"];
    let listed = a["limits"].as_array().expect("limits");
    assert_eq!(listed.len(), 4, "{a}");
    for (i, l) in listed.iter().enumerate() {
        assert_eq!(l["name"], names[i], "{a}");
        assert_eq!(l["algorithm"], algorithms[i], "{a}");
        assert_eq!(l["key"], user, "{a}");
        assert_eq!(
            (
                l["decision"].as_str().unwrap(),
                l["figures"]["r"].as_u64().unwrap()
            ),
            limits[i],
            "{user}: {}: {a}",
            names[i]
        );
        let q = [5, 100, 10, 10][i];
        assert_eq!(l["figures"]["q"], q, "{a}");
        assert_eq!(l["figures"]["delay_ms"], 0, "{a}");
        assert_eq!(l["lock_started"], user == "strike2" && i == 0, "{a}");
    }
    let per_user = &listed[0]["figures"];
    let log = &listed[1]["figures"];
    assert_eq!((&per_user["w"], &log["w"]), (&json!(3600), &json!(3600)));
    // Draft 11's t of the log: until its oldest entry leaves the hour (the
    // traffic was sent seconds ago), the whole hour for an empty log.
    let log_t = log["t"].as_u64().unwrap();
    assert!((3590..=3600).contains(&log_t), "{user}: log t {log_t}: {a}");
    if user.starts_with("new") {
        assert_eq!(log_t, 3600, "{user}: an empty log: {a}");
    }
    let within = |v: &Value| {
        let v = v.as_u64().unwrap();
        assert!(t.0 <= v && v <= t.1, "{user}: {v} not within {t:?}: {a}");
    };
    match user {
        "strike2" => {
            assert_eq!(
                (&per_user["t"], &per_user["retry_after"]),
                (&json!(3600), &json!(3600))
            );
        }
        "full" | "locked" => {
            within(&per_user["t"]);
            within(&per_user["retry_after"]);
        }
        _ => {
            within(&per_user["t"]);
            assert_eq!(per_user["retry_after"], 0, "{a}");
        }
    }
    if decision == "allowed" {
        assert_eq!(
            (&a["status"], &a["upstream"], &a["error"], &a["retry_after"]),
            (&Value::Null, &json!("e"), &Value::Null, &Value::Null),
            "{a}"
        );
    } else {
        assert_eq!(
            (&a["status"], &a["upstream"]),
            (&json!(429), &Value::Null),
            "{a}"
        );
        let error = if decision == "rejected" {
            "rate_limited"
        } else {
            decision
        };
        assert_eq!(
            (&a["error"], &a["limit"]),
            (&json!(error), &json!("per_user")),
            "{a}"
        );
        assert_eq!(a["retry_after"], per_user["retry_after"], "{a}");
    }
}

/// Sends the 1,000 probes, each checked: a sixth each of `ok`, `full`,
/// `strike2`, `locked`, `slow` and a new client.
async fn thousand_probes(gw: &Gateway) {
    let users = ["ok", "full", "strike2", "locked", "slow"];
    for i in 0..1000 {
        let new = format!("new{i}");
        let user = users.get(i % 6).copied().unwrap_or(new.as_str());
        let locked_for = || async {
            limit_state(gw, "per_user", "locked").await["locked_for"]
                .as_u64()
                .unwrap()
        };
        let (before, hi_lock) = (
            unix_now(),
            if user == "locked" {
                locked_for().await
            } else {
                0
            },
        );
        let a = probe(gw, &probe_of(user)).await;
        let (after, lo_lock) = (
            unix_now(),
            if user == "locked" {
                locked_for().await
            } else {
                0
            },
        );
        let t = match user {
            "locked" => (lo_lock, hi_lock),
            _ => (to_hour_end(after), to_hour_end(before)),
        };
        check_answer(&a, user, t);
    }
}

/// What `GET /limits` says of each client the probes looked at, but for
/// the figures that move with the clock.
async fn limit_states(gw: &Gateway) -> Vec<Value> {
    let mut out = Vec::new();
    for user in ["ok", "full", "strike2", "locked", "slow", "new0", "new5"] {
        for limit in ["per_user", "log", "bucket", "slots"] {
            let mut v = limit_state(gw, limit, user).await;
            let o = v.as_object_mut().unwrap();
            for moving in ["reset", "locked_for"] {
                o.remove(moving);
            }
            out.push(v);
        }
    }
    out
}

/// The metrics series that count decisions, rejections and requests.
async fn counted(gw: &Gateway) -> Vec<String> {
    let text = admin(gw, Method::GET, "/metrics").await.text();
    text.lines()
        .filter(|l| {
            [
                "tollgate_limit_decisions_total",
                "tollgate_lockouts_total",
                "tollgate_requests_total",
                "tollgate_store_duration_seconds_count",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .map(str::to_owned)
        .collect()
}

/// Everything a client can see that a probe could have changed: each
/// probed client's state and strikes, the lockouts, the top offenders,
/// the decision metrics.
async fn visible(gw: &Gateway) -> (Vec<Value>, Value, Value, Vec<String>) {
    let mut locked = lockouts(gw).await;
    for client in locked["lockouts"]["per_user"].as_array_mut().unwrap() {
        client.as_object_mut().unwrap().remove("remaining");
    }
    let top = admin(gw, Method::GET, "/top").await.json();
    (limit_states(gw).await, locked, top, counted(gw).await)
}

/// Every key under the prefix: its type, value and expiry instant (ms
/// since the epoch; -1: none).
async fn snapshot(redis: &RedisServer) -> BTreeMap<String, (String, String, i64)> {
    let mut out = BTreeMap::new();
    for key in redis.keys().await {
        let kind: String = redis.cmd(&["TYPE", &key]).await;
        let value = match kind.as_str() {
            "string" => {
                let bytes: Vec<u8> = redis.cmd(&["GET", &key]).await;
                hex_of(&bytes)
            }
            "zset" => {
                let members: Vec<String> =
                    redis.cmd(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]).await;
                members.join(" ")
            }
            other => panic!("{key} is a {other}"),
        };
        let expiry: i64 = redis.cmd(&["PEXPIRETIME", &key]).await;
        out.insert(key, (kind, value, expiry));
    }
    out
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The strike count of every lockout key (a lockout's state: 8-byte
/// doubles tag 9, n, s, lu, lv).
fn strikes(keys: &BTreeMap<String, (String, String, i64)>) -> Vec<(String, u64, u64)> {
    keys.iter()
        .filter(|(k, _)| k.ends_with(":l"))
        .map(|(k, (_, value, _))| {
            let bytes: Vec<u8> = (0..value.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&value[i..i + 2], 16).unwrap())
                .collect();
            let field = |i: usize| f64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap());
            assert_eq!(field(0), 9.0, "{k}: a lockout state");
            (k.clone(), field(1) as u64, field(4) as u64)
        })
        .collect()
}

/// The write commands Redis ran (scripts' included), by name.
fn writes(stats: &BTreeMap<String, CommandStat>) -> BTreeMap<String, u64> {
    const WRITES: [&str; 11] = [
        "set",
        "del",
        "unlink",
        "pexpire",
        "expire",
        "persist",
        "zadd",
        "zrem",
        "zremrangebyscore",
        "hset",
        "publish",
    ];
    stats
        .iter()
        .filter(|(name, _)| WRITES.contains(&name.as_str()))
        .map(|(name, s)| (name.clone(), s.calls))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_probes_change_nothing_on_redis() {
    ensure_room(Duration::from_secs(3600), Duration::from_secs(120)).await;
    let redis = RedisServer::start();
    let echo = Echo::start("e").await;
    let gw = four_limits(&echo).store(&redis_store(&redis)).start().await;
    let held = drive(&gw).await;
    // The lockout's name is written beside it off the request path.
    let t0 = std::time::Instant::now();
    while !redis.keys().await.iter().any(|k| k.ends_with(":n")) {
        assert!(t0.elapsed() < Duration::from_secs(5), "no lockout label");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let keys = snapshot(&redis).await;
    let kinds: Vec<&str> = keys.values().map(|(k, _, _)| k.as_str()).collect();
    assert!(kinds.contains(&"zset"), "sorted sets are there: {keys:?}");
    assert_eq!(
        strikes(&keys)
            .into_iter()
            .map(|(_, n, lv)| (n, lv))
            .collect::<std::collections::BTreeSet<_>>(),
        [(0, 1), (1, 0), (2, 0)].into_iter().collect(),
        "full: 1 strike, strike2: 2, locked: locked once"
    );
    let seen = visible(&gw).await;
    let stats = redis.command_stats().await;

    thousand_probes(&gw).await;

    let after = redis.command_stats().await;
    assert_eq!(writes(&after), writes(&stats), "no write command ran");
    let fcalls = |s: &BTreeMap<String, CommandStat>| s.get("fcall").map_or(0, |c| c.calls);
    assert!(
        fcalls(&after) - fcalls(&stats) >= 1000,
        "every probe asked Redis"
    );
    assert_eq!(
        snapshot(&redis).await,
        keys,
        "every key, value and expiry instant"
    );
    let dbsize: u64 = redis.cmd(&["DBSIZE"]).await;
    assert_eq!(dbsize as usize, keys.len());
    assert_eq!(visible(&gw).await, seen);
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_probes_change_nothing_on_the_memory_store() {
    ensure_room(Duration::from_secs(3600), Duration::from_secs(120)).await;
    let echo = Echo::start("e").await;
    let gw = four_limits(&echo).start().await;
    let held = drive(&gw).await;
    let seen = visible(&gw).await;
    assert_eq!(seen.1["count"], 1, "locked is locked out: {}", seen.1);
    thousand_probes(&gw).await;
    assert_eq!(visible(&gw).await, seen);
    // New clients were probed, never counted: their keys are whole.
    for i in [5, 503, 995] {
        let v = limit_state(&gw, "per_user", &format!("new{i}")).await;
        assert_eq!(
            (&v["remaining"], &v["strikes"]),
            (&json!(5), &json!(0)),
            "{v}"
        );
    }
    drop(held);
}

/// The figures of `limit` in a probe's answer `a`.
fn figures<'a>(a: &'a Value, limit: &str) -> &'a Value {
    let limits = a["limits"].as_array().expect("limits");
    let l = limits.iter().find(|l| l["name"] == limit);
    &l.unwrap_or_else(|| panic!("{limit} not in {a}"))["figures"]
}

/// Probe, then send the same request, eleven times over: allowed, then
/// rejected, the rejection that starts the lockout, locked out; each
/// probe's decision, status, rejecting limit, `Retry-After` and every
/// limit's `q`, `w`, `r` are those the request then gets (`t` at most a
/// second less: the clock moved).
async fn probes_foretell_the_next_request(store: Option<&RedisServer>) {
    ensure_room(Duration::from_secs(3600), Duration::from_secs(60)).await;
    let echo = Echo::start("e").await;
    let mut route = four_limits(&echo);
    if let Some(redis) = store {
        route = route.store(&redis_store(redis));
    }
    let gw = route.start().await;
    let c = Caller::new(gw.addr());
    let mut kinds = Vec::new();
    for step in 0..11 {
        // The last request's slot is given back after its response ended,
        // in the background: the probe and the request must both see it
        // back, or they would race it.
        let t0 = std::time::Instant::now();
        while limit_state(&gw, "slots", "d").await["remaining"] != 10 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "step {step}: the slot never came back"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let a = probe(&gw, &probe_of("d")).await;
        let r = c.get_h("/", &[("x-user", "d")]).await;
        match a["status"].as_u64() {
            None => {
                assert_ok(&r);
                assert_eq!(a["upstream"], "e");
            }
            Some(status) => {
                let error = a["error"].as_str().unwrap();
                assert_eq!(r.status.as_u16() as u64, status, "step {step}: {a}");
                let retry = assert_rejected(&r, error, a["limit"].as_str().unwrap());
                let said = a["retry_after"].as_u64().unwrap();
                assert!(
                    said == retry || said == retry + 1,
                    "step {step}: {said} {retry}"
                );
            }
        }
        for limit in ["per_user", "log", "bucket", "slots"] {
            let f = figures(&a, limit);
            let got = rl(&r, limit);
            assert_eq!(
                (f["q"].as_i64(), f["w"].as_i64(), f["r"].as_i64()),
                (Some(got.q), Some(got.w), Some(got.r)),
                "step {step}: {limit}: {a}"
            );
            let t = f["t"].as_i64().unwrap();
            assert!(
                t == got.t || t == got.t + 1,
                "step {step}: {limit}: {t} {got:?}"
            );
        }
        kinds.push(a["decision"].as_str().unwrap().to_owned());
    }
    let want = [
        ["allowed"; 5].as_slice(),
        &["rejected"; 2],
        &["locked_out"; 4],
    ]
    .concat();
    assert_eq!(kinds, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_foretells_the_next_request_on_the_memory_store() {
    probes_foretell_the_next_request(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_foretells_the_next_request_on_redis() {
    let redis = RedisServer::start();
    probes_foretell_the_next_request(Some(&redis)).await;
}

/// A gateway with consumers, a `failure_limit`, a deny list, a body limit,
/// an admin token and routes whose limits show every way a limit can
/// answer.
async fn showcase() -> Gateway {
    let config = OneRoute::new()
        .named("gold")
        .matching("{ path: /gold }")
        .route_keys("auth: { plans: [gold] }")
        .server(
            r#"
            deny: ["10.9.9.9/32"]
            trusted_proxies: ["127.0.0.0/8"]
            max_body_bytes: 100
            "#,
        )
        .admin("token: s3cret")
        .define(
            "fails",
            "{ algorithm: fixed_window, limit: 2, window: 1h, lockout: { after: 1, duration: 1h } }",
        )
        .limit(
            "per_consumer",
            "{ algorithm: fixed_window, limit: 3, window: 1h, key: consumer }",
        )
        .define(
            "ex",
            r#"{ algorithm: fixed_window, limit: 3, window: 1h, exempt: ["10.1.0.0/16"] }"#,
        )
        .define(
            "opt",
            r#"{ algorithm: gcra, rate: 1/s, key: "header:x-opt", on_missing_key: skip }"#,
        )
        .define(
            "req",
            r#"{ algorithm: gcra, rate: 1/s, key: "header:x-req", on_missing_key: deny }"#,
        )
        .define(
            "shadow",
            "{ algorithm: fixed_window, limit: 1, window: 1h, mode: shadow }",
        )
        .define(
            "slow",
            "{ algorithm: token_bucket, rate: 1/s, burst: 1, max_delay: 5s }",
        )
        .route("{ name: mixed, match: { path: /mixed }, respond: { status: 201 }, limits: [ex, opt, shadow] }")
        .route("{ name: strict, match: { path: /strict }, respond: { status: 200 }, limits: [ex, req] }")
        .route("{ name: hold, match: { path: /hold }, respond: { status: 200 }, limits: [slow] }")
        .route("{ name: hosted, match: { hosts: [api.example], path: /h }, respond: { status: 202 } }")
        .config();
    let consumers = r#"
consumers:
  api_keys: { header: x-api-key }
  list:
    - { name: acme, tenant: t1, plan: gold, keys: ["sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"] }
    - { name: zed, plan: free, keys: ["sha256:fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9"] }
  failure_limit: fails
"#;
    Gateway::start(&(config + consumers)).await
}

/// `POST /probe` on `gw` with the token: 200 and its JSON.
async fn ask(gw: &Gateway, body: Value) -> Value {
    let r = probe_with(gw, &body.to_string(), Some("s3cret")).await;
    assert_eq!(r.status, 200, "POST /probe {body}: {}", r.text());
    r.json()
}

/// A probe's `(status, error, limit)`.
fn answered(a: &Value) -> (Value, Value, Value) {
    (a["status"].clone(), a["error"].clone(), a["limit"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_probes_are_400s_and_the_token_is_required() {
    let gw = showcase().await;
    let r = probe_with(&gw, "{}", None).await;
    assert_eq!(r.status, 401, "{}", r.text());
    let r = probe_with(&gw, "{}", Some("wrong")).await;
    assert_eq!(r.status, 401, "{}", r.text());
    let mut get = admin(&gw, Method::GET, "/probe").await;
    assert_eq!(get.status, 401);
    get = common::client::send(
        &common::client::h1(),
        common::client::req(Method::GET, gw.admin_addr(), "/probe")
            .header("authorization", "Bearer s3cret")
            .body(common::client::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (get.status.as_u16(), get.header("allow")),
        (405, Some("POST"))
    );
    for (body, why) in [
        ("", "not a probe: EOF"),
        ("{", "not a probe: EOF"),
        ("[]", "not a probe: expected a JSON object"),
        (
            r#"["GET", null, "/"]"#,
            "not a probe: expected a JSON object",
        ),
        (r#"{"pth": "/"}"#, "not a probe: unknown field `pth`"),
        (
            r#"{"headers": {"x": 1}}"#,
            "not a probe: invalid type: integer `1`",
        ),
        (
            r#"{"client": "10.0.0.300"}"#,
            "`client`: not an IP address: \"10.0.0.300\"",
        ),
        (r#"{"method": "GE T"}"#, "`method`: not a method"),
        (
            r#"{"headers": {"bad name": "x"}}"#,
            "`headers`: bad header name",
        ),
        (
            r#"{"headers": {"x": "a\u0001"}}"#,
            "`headers`: bad value of \"x\"",
        ),
    ] {
        let r = probe_with(&gw, body, Some("s3cret")).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let v = r.json();
        assert_eq!(v["error"], "bad_probe", "{body}: {v}");
        let message = v["message"].as_str().unwrap();
        assert!(message.starts_with(why), "{body}: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_name_the_route_the_consumer_and_each_limit() {
    let gw = showcase().await;
    // Nothing but defaults: GET / from the asking address, no route.
    let a = ask(&gw, json!({})).await;
    assert_eq!(
        a,
        json!({
            "client": "127.0.0.1", "route": null, "consumer": null, "decision": null,
            "status": 404, "upstream": null, "error": "no_route", "message": null,
            "limit": null, "retry_after": null, "delay_ms": 0, "limits": [],
        })
    );
    // The whole answer for a verified consumer.
    let gold =
        |key: &str| json!({"path": "/gold", "headers": {"x-api-key": key}, "client": "127.0.0.5"});
    let a = ask(&gw, gold("foo")).await;
    let t = a["limits"][0]["figures"]["t"].clone();
    assert_eq!(
        a,
        json!({
            "client": "127.0.0.5", "route": "gold",
            "consumer": {"name": "acme", "tenant": "t1", "plan": "gold"},
            "decision": "allowed", "status": 200, "upstream": null, "error": null,
            "message": null, "limit": null, "retry_after": null, "delay_ms": 0,
            "limits": [{
                "name": "per_consumer", "algorithm": "fixed_window", "key": "acme",
                "decision": "allowed", "lock_started": false, "cost": 1,
                "figures": {"q": 3, "w": 3600, "r": 2, "t": t, "retry_after": 0, "delay_ms": 0},
            }],
        })
    );
    let a = ask(&gw, gold("bar")).await;
    assert_eq!(answered(&a), (json!(403), json!("forbidden"), Value::Null));
    assert_eq!(
        a["consumer"],
        json!({"name": "zed", "tenant": null, "plan": "free"})
    );
    assert_eq!(a["limits"], json!([]));
    let a = ask(&gw, json!({"path": "/gold"})).await;
    assert_eq!(
        answered(&a),
        (json!(401), json!("unauthorized"), Value::Null)
    );
    assert_eq!(
        (&a["route"], &a["consumer"]),
        (&json!("gold"), &Value::Null)
    );

    // The deny list, for the peer or for the client it forwards for.
    let a = ask(&gw, json!({"path": "/mixed", "client": "10.9.9.9"})).await;
    assert_eq!(answered(&a), (json!(403), json!("forbidden"), Value::Null));
    let xff = json!({"path": "/mixed", "headers": {"x-forwarded-for": "10.9.9.9"}});
    let a = ask(&gw, xff).await;
    assert_eq!(
        (&a["client"], &a["route"], &a["status"]),
        (&json!("10.9.9.9"), &Value::Null, &json!(403))
    );

    // Exempt, skipped, then shadow-rejected once a real request used the
    // shadow limit's one.
    let mixed = json!({"path": "/mixed", "client": "10.1.2.3"});
    let a = ask(&gw, mixed.clone()).await;
    let decisions = |a: &Value| -> Vec<(String, Value)> {
        a["limits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| (l["decision"].as_str().unwrap().to_owned(), l["key"].clone()))
            .collect()
    };
    assert_eq!(
        decisions(&a),
        [
            ("exempt".into(), json!("10.1.2.3")),
            ("skipped".into(), Value::Null),
            ("allowed".into(), json!("10.1.2.3"))
        ]
    );
    assert_eq!(
        (&a["decision"], &a["status"]),
        (&json!("allowed"), &json!(201))
    );
    assert_eq!(a["limits"][0]["figures"], Value::Null);
    let c = Caller::new(gw.addr());
    let r = c.get_h("/mixed", &[("x-forwarded-for", "10.1.2.3")]).await;
    assert_eq!(r.status, 201);
    let a = ask(&gw, mixed).await;
    assert_eq!(a["limits"][2]["decision"], "shadow_rejected");
    assert_eq!(
        (&a["decision"], &a["status"]),
        (&json!("shadow_rejected"), &json!(201))
    );

    // A key missing with on_missing_key: deny: that limit alone, rejecting.
    let a = ask(
        &gw,
        json!({"path": "/strict", "headers": {"x-forwarded-for": "192.0.2.1"}}),
    )
    .await;
    assert_eq!(
        answered(&a),
        (json!(429), json!("rate_limited"), json!("req"))
    );
    assert_eq!(
        (&a["decision"], &a["retry_after"]),
        (&json!("rejected"), &json!(1))
    );
    assert_eq!(
        a["limits"],
        json!([{"name": "req", "algorithm": "gcra", "key": null, "decision": "missing_key", "lock_started": false, "cost": null, "figures": null}])
    );

    // max_delay: held, not rejected.
    assert_eq!(c.get("/hold").await.status, 200);
    let a = ask(&gw, json!({"path": "/hold"})).await;
    let delay = a["delay_ms"].as_u64().unwrap();
    assert!(delay > 900 && delay <= 1000, "{a}");
    assert_eq!(
        (&a["decision"], &a["status"]),
        (&json!("delayed"), &json!(200))
    );
    assert_eq!(
        (
            &a["limits"][0]["decision"],
            &a["limits"][0]["figures"]["delay_ms"]
        ),
        (&json!("delayed"), &json!(delay))
    );

    // A body over max_body_bytes: 413, after the limits (as the gateway
    // counts it).
    let big = json!({"path": "/mixed", "method": "POST", "headers": {"content-length": "1000"}});
    let a = ask(&gw, big).await;
    assert_eq!(
        answered(&a),
        (json!(413), json!("payload_too_large"), Value::Null)
    );
    assert_eq!(a["decision"], "allowed");

    // Routes by host: none without one (an HTTP/1.0 request).
    let a = ask(&gw, json!({"path": "/h", "host": "api.example"})).await;
    assert_eq!((&a["route"], &a["status"]), (&json!("hosted"), &json!(202)));
    assert_eq!(ask(&gw, json!({"path": "/h"})).await["status"], 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_limit_is_read_never_charged() {
    let gw = showcase().await;
    let bad = json!({"path": "/gold", "headers": {"x-api-key": "guess"}, "client": "127.0.0.7"});
    let good = json!({"path": "/gold", "headers": {"x-api-key": "foo"}, "client": "127.0.0.7"});
    let strikes = || async {
        let path = "/limits/fails/127.0.0.7";
        let r = common::client::send(
            &common::client::h1(),
            common::client::req(Method::GET, gw.admin_addr(), path)
                .header("authorization", "Bearer s3cret")
                .body(common::client::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        r.json()
    };
    for _ in 0..5 {
        let a = ask(&gw, bad.clone()).await;
        assert_eq!(
            answered(&a),
            (json!(401), json!("invalid_credentials"), Value::Null)
        );
    }
    assert_eq!(strikes().await["remaining"], 2, "no failure was charged");
    let c = Caller::from(gw.addr(), 7);
    for _ in 0..2 {
        let r = c.get_h("/gold", &[("x-api-key", "guess")]).await;
        assert_eq!(r.status, 401);
    }
    // The third failure would start the lockout: the probe says so, and
    // charges nothing.
    for _ in 0..3 {
        let a = ask(&gw, bad.clone()).await;
        assert_eq!(
            answered(&a),
            (json!(429), json!("locked_out"), json!("fails"))
        );
        assert_eq!(a["retry_after"], 3600);
        assert_eq!(ask(&gw, good.clone()).await["status"], 200);
    }
    let state = strikes().await;
    assert_eq!(
        (&state["locked"], &state["strikes"]),
        (&json!(false), &json!(0)),
        "{state}"
    );
    assert_rejected(
        &c.get_h("/gold", &[("x-api-key", "guess")]).await,
        "locked_out",
        "fails",
    );
    // Locked out: turned away before verifying, whatever the key.
    let a = ask(&gw, good).await;
    assert_eq!(
        answered(&a),
        (json!(429), json!("locked_out"), json!("fails"))
    );
    assert_eq!(a["consumer"], Value::Null);
}
