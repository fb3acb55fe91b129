//! Limits under stress (issue 14, docs/configuration/limit-response.md,
//! docs/scaling-out.md): a concurrency slot whose release meets a Redis stall
//! is released once Redis answers again (not at the end of its 5-minute lease),
//! and a rejection answered from the local deny cache carries the figures of
//! the store decision that put the client there (its `r`, not 0), its wait
//! counting down, on the memory store and on Redis.

mod common;

use std::time::{Duration, Instant};

use common::limits::*;
use common::redis::RedisServer;
use common::{Echo, Gateway, OneRoute};

// ---------------------------------------------------------------------------
// Concurrency release during a Redis stall (docs/scaling-out.md)
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stall_at_release_time_does_not_keep_the_slot_taken() {
    let redis = RedisServer::start();
    let echo = Echo::start("e").await;
    let store = format!(
        "{{ backend: redis, url: \"{}\", timeout: 200ms, on_error: deny }}",
        redis.url()
    );
    // `conc` keeps its default lease (5 minutes); `fw` is only there to
    // meet the stall with ordinary requests.
    let gw = OneRoute::new()
        .store(&store)
        .named("c")
        .matching("{ path: /delay }")
        .upstream(&echo)
        .upstream_keys("retries: 0")
        .limit("conc", "{ algorithm: concurrency, limit: 1, key: route }")
        .define(
            "fw",
            "{ algorithm: fixed_window, limit: 1000, window: 1h, key: route }",
        )
        .route("{ name: f, match: { path: /f }, respond: { status: 200, body: ok }, limits: [fw] }")
        .start()
        .await;
    let c = Caller::new(gw.addr());

    let held = {
        let c = c.clone();
        tokio::spawn(async move { c.get("/delay/3000").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = c.get("/delay/0").await;
    assert_rejected(&r, "rate_limited", "conc");

    // Redis stalls while the request is in flight. Requests meeting the
    // stall time out (503 with on_error: deny) and open the breaker, so
    // the release, when the response ends, fails without reaching Redis
    // (a release written to a stalled connection would still be applied
    // when the server wakes; this one is not).
    tokio::time::sleep(Duration::from_millis(700)).await;
    redis.stop();
    for _ in 0..3 {
        assert_eq!(c.get("/f").await.status, 503);
    }
    // It ends during the stall (Redis is resumed only after this).
    assert_ok(&held.await.expect("the held request"));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    redis.cont();

    // Redis is back: the slot must come free by itself within seconds (the
    // breaker's back-off, at most 5 s, plus a retry round), not when its
    // lease ends in 5 minutes.
    let resumed = Instant::now();
    let mut seen = Vec::new();
    loop {
        let r = c.get("/delay/0").await;
        seen.push(r.status.as_u16());
        if r.status == 200 {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(8),
            "the slot is still taken {:?} after Redis came back: {:?}",
            resumed.elapsed(),
            tally(seen)
        );
        if r.status == 429 {
            assert_rejected(&r, "rate_limited", "conc");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And it is a real release: one request at a time still.
    let held = {
        let c = c.clone();
        tokio::spawn(async move { c.get("/delay/1000").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_rejected(&c.get("/delay/0").await, "rate_limited", "conc");
    assert_ok(&held.await.expect("the second held request"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_taken_by_a_call_that_timed_out_is_given_back() {
    let redis = RedisServer::start();
    let store = format!(
        "{{ backend: redis, url: \"{}\", timeout: 200ms, on_error: local }}",
        redis.url()
    );
    let gw = OneRoute::new()
        .store(&store)
        .named("c")
        .matching("{ path: /c }")
        .respond("{ status: 200, body: ok }")
        .limit("conc", "{ algorithm: concurrency, limit: 1, key: route }")
        .start()
        .await;
    let c = Caller::new(gw.addr());
    assert_ok(&c.get("/c").await);
    // The slot is released when the response has been written, which can
    // be just after the client has read it: allow the release its round
    // trip to Redis.
    common::eventually(
        Duration::from_secs(2),
        "the first slot's release",
        || async { (limit_state(&gw, "conc", "c").await["remaining"] == 1).then_some(()) },
    )
    .await;

    // Redis stalls: the request is decided locally after the timeout
    // (on_error: local) and ends, but its call waits in Redis's socket and
    // takes the slot when Redis resumes, with no response left to free it.
    redis.stop();
    assert_ok(&c.get("/c").await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.cont();

    // The slot is given back within seconds, not when its lease (5 minutes)
    // ends.
    let resumed = Instant::now();
    let mut seen = Vec::new();
    loop {
        let r = admin(&gw, http::Method::GET, "/limits/conc/c").await;
        let left = (r.status == 200)
            .then(|| r.json()["remaining"].as_u64())
            .flatten();
        seen.push(left);
        if left == Some(1) {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(8),
            "the slot is still taken {:?} after Redis came back: {seen:?}",
            resumed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("free again {:?} after Redis came back", resumed.elapsed());
    assert_ok(&c.get("/c").await);
}

// ---------------------------------------------------------------------------
// Deny-cache rejections carry the deciding figures (docs/configuration/limit-response.md)
// ---------------------------------------------------------------------------

/// Limits of 10 units at `cost: 3`: three requests pass (r = 7, 4, 1), the
/// fourth is rejected by the store with one unit still there.
const COSTLY: [(&str, &str); 4] = [
    (
        "tb",
        "{ algorithm: token_bucket, rate: 10/m, burst: 10, cost: 3, key: client_ip }",
    ),
    (
        "fw",
        "{ algorithm: fixed_window, limit: 10, window: 1h, cost: 3, key: client_ip }",
    ),
    (
        "gc",
        "{ algorithm: gcra, rate: 10/m, burst: 10, cost: 3, key: client_ip }",
    ),
    (
        "lb",
        "{ algorithm: leaky_bucket, rate: 10/m, burst: 10, cost: 3, key: client_ip }",
    ),
];

/// A gateway with one route `/<name>` per [`COSTLY`] limit, on `store`
/// (`None`: memory).
async fn costly_gateway(store: Option<&RedisServer>) -> Gateway {
    let mut body = String::from("limits:\n");
    for (name, limit) in COSTLY {
        body.push_str(&format!("  {name}: {limit}\n"));
    }
    body.push_str("routes:\n");
    for (name, _) in COSTLY {
        body.push_str(&format!(
            "  - {{ name: {name}, match: {{ path: /{name} }}, respond: {{ status: 200, body: ok }}, limits: [{name}] }}\n"
        ));
    }
    let config = match store {
        None => common::config(&body),
        Some(redis) => common::config_with_store(
            &format!(
                "{{ backend: redis, url: \"{}\", timeout: 2s, on_error: deny }}",
                redis.url()
            ),
            &body,
        ),
    };
    Gateway::start(&config).await
}

/// Store calls made so far (the deny cache makes none).
async fn store_calls(gw: &Gateway, backend: &str) -> f64 {
    metric_with(
        gw,
        "tollgate_store_duration_seconds_count",
        &[("backend", backend), ("outcome", "ok")],
    )
    .await
    .unwrap_or(0.0)
}

async fn deny_cache_keeps_the_deciding_figures(store: Option<&RedisServer>) {
    let backend = if store.is_some() { "redis" } else { "memory" };
    // `fw`'s hourly window must not end during the test.
    ensure_room(Duration::from_secs(3600), Duration::from_secs(30)).await;
    let gw = costly_gateway(store).await;
    let c = Caller::new(gw.addr());
    for (name, _) in COSTLY {
        let path = format!("/{name}");
        for want in [7, 4, 1] {
            let r = c.get(&path).await;
            assert_ok(&r);
            assert_eq!(remaining(&r, name), want, "{backend} {name}");
        }
        let calls = store_calls(&gw, backend).await;
        let by_store = c.get(&path).await;
        let ra_store = assert_rejected(&by_store, "rate_limited", name);
        let decided = rl(&by_store, name);
        assert_eq!(decided.r, 1, "{backend} {name}: one unit is left");
        assert_eq!(
            store_calls(&gw, backend).await,
            calls + 1.0,
            "{backend} {name}: the store decided the first rejection"
        );

        let cached = c.get(&path).await;
        let ra_cached = assert_rejected(&cached, "rate_limited", name);
        let f = rl(&cached, name);
        assert_eq!(
            store_calls(&gw, backend).await,
            calls + 1.0,
            "{backend} {name}: the deny cache answered the second"
        );
        assert_eq!(
            (f.q, f.w, f.r),
            (decided.q, decided.w, decided.r),
            "{backend} {name}: a deny-cache rejection carries the store's figures: \
             store {decided:?}, cached {f:?}"
        );
        assert!(
            f.t <= decided.t && f.t + 1 >= decided.t,
            "{backend} {name}: t {f:?} vs {decided:?}"
        );
        assert!(ra_cached <= ra_store && ra_cached + 1 >= ra_store);
        assert_eq!(ra_cached as i64, f.t, "{backend} {name}: Retry-After = t");
    }

    // The waits count down; `r` stays what the store said.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    for (name, _) in COSTLY {
        let path = format!("/{name}");
        let first = c.get(&path).await;
        let before = rl(&first, name);
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let calls = store_calls(&gw, backend).await;
        let later = c.get(&path).await;
        let ra = assert_rejected(&later, "rate_limited", name);
        let f = rl(&later, name);
        assert_eq!(store_calls(&gw, backend).await, calls, "{backend} {name}");
        assert_eq!(f.r, 1, "{backend} {name}: {f:?}");
        assert!(
            f.t < before.t,
            "{backend} {name}: t must count down: {before:?} then {f:?}"
        );
        assert_eq!(ra as i64, f.t, "{backend} {name}: Retry-After = t");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_cache_rejections_keep_the_store_figures_on_memory() {
    deny_cache_keeps_the_deciding_figures(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_cache_rejections_keep_the_store_figures_on_redis() {
    let redis = RedisServer::start();
    deny_cache_keeps_the_deciding_figures(Some(&redis)).await;
}
