//! The `RateLimit` field's `t` through the real binary
//! (docs/configuration/limit-response.md): draft 11's figure for every
//! algorithm, exact to the second, on the memory store and on Redis, beside
//! the `draft10` style's figures for the same requests; a rejection's `t`
//! is its `Retry-After`, also when the local deny cache answers it.
//!
//! Each test runs three gateways at once (memory, Redis, memory with
//! `headers: draft10`) through the same requests, with real sleeps: every
//! expected `t` is at least 0.3 s from a whole second, far more than a
//! request takes.

mod common;

use std::time::{Duration, Instant, UNIX_EPOCH};

use common::limits::*;
use common::redis::RedisServer;
use common::{Echo, Gateway, OneRoute};

/// One request of a script, or a wait.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Allowed, with the limit's `r` and `t`.
    Ok(i64, i64),
    /// Rejected, with its `r`, `t` and `Retry-After`.
    No(i64, i64, u64),
    /// Wait until this many milliseconds after the script started.
    At(u64),
    /// Wait until this many milliseconds into the next aligned window of
    /// this many seconds.
    Next(u64, u64),
}

use Step::{At, Next, No, Ok};

/// The three gateways of a test: draft 11 on memory and on Redis, and
/// draft 10 on memory, each with limit `l` (`spec`) on its one route.
struct Trio {
    _redis: RedisServer,
    memory: Gateway,
    redis: Gateway,
    draft10: Gateway,
}

async fn trio(spec: &str, upstream: Option<&Echo>) -> Trio {
    let redis = RedisServer::start();
    let route = |store: Option<String>, style: &str| {
        let mut r = OneRoute::new()
            .limit("l", spec)
            .server(&format!("limit_response: {{ headers: {style} }}"));
        if let Some(echo) = upstream {
            r = r.upstream(echo).upstream_keys("retries: 0");
        }
        if let Some(store) = store {
            r = r.store(&store);
        }
        r
    };
    let store = format!(
        "{{ backend: redis, url: \"{}\", timeout: 2s, on_error: deny }}",
        redis.url()
    );
    Trio {
        memory: route(None, "standard").start().await,
        redis: route(Some(store), "standard").start().await,
        draft10: route(None, "draft10").start().await,
        _redis: redis,
    }
}

/// Runs `steps` against `gw` (requests to `path`), checking every answer.
async fn script(gw: &Gateway, what: &str, path: &str, steps: &[Step]) {
    let c = Caller::new(gw.addr());
    let start = Instant::now();
    for (i, &step) in steps.iter().enumerate() {
        let at = |r: &common::client::Resp| format!("{what} step {i} {step:?}: {:?}", r.headers);
        match step {
            At(ms) => sleep_until(start, Duration::from_millis(ms)).await,
            Next(secs, ms) => {
                next_window(Duration::from_secs(secs), Duration::from_millis(ms)).await
            }
            Ok(r, t) => {
                let resp = c.get(path).await;
                assert_ok(&resp);
                let f = rl(&resp, "l");
                assert_eq!((f.r, f.t), (r, t), "{}", at(&resp));
            }
            No(r, t, ra) => {
                let resp = c.get(path).await;
                let retry = assert_rejected(&resp, "rate_limited", "l");
                let f = rl(&resp, "l");
                assert_eq!((f.r, f.t, retry), (r, t, ra), "{}", at(&resp));
            }
        }
    }
}

/// Runs the draft-11 script on memory and Redis and the draft-10 one, at
/// once.
async fn run(trio: &Trio, path: &str, draft11: &[Step], draft10: &[Step]) {
    tokio::join!(
        script(&trio.memory, "memory", path, draft11),
        script(&trio.redis, "redis", path, draft11),
        script(&trio.draft10, "draft10", path, draft10),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_t_is_the_windows_end() {
    let trio = trio(
        "{ algorithm: fixed_window, limit: 2, window: 10s, key: client_ip }",
        None,
    )
    .await;
    // 300 ms into a 10 s window: 9.7 s left, in both drafts.
    align(Duration::from_secs(10), Duration::from_millis(300)).await;
    let steps = [Ok(1, 10), Ok(0, 10), No(0, 10, 10)];
    run(&trio, "/", &steps, &steps).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_month_t_is_the_seconds_to_the_months_end() {
    let trio = trio(
        "{ algorithm: fixed_window, limit: 5, window: month, key: client_ip }",
        None,
    )
    .await;
    // The next month's first second, UTC, read from the wall clock.
    let month_end = |at: std::time::SystemTime| -> u64 {
        let text = humantime::format_rfc3339_seconds(at).to_string();
        let (y, m): (u64, u64) = (text[..4].parse().unwrap(), text[5..7].parse().unwrap());
        let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        let next = humantime::parse_rfc3339(&format!("{y:04}-{m:02}-01T00:00:00Z")).unwrap();
        next.duration_since(UNIX_EPOCH).unwrap().as_secs()
    };
    for (gw, what) in [
        (&trio.memory, "memory"),
        (&trio.redis, "redis"),
        (&trio.draft10, "draft10"),
    ] {
        let c = Caller::new(gw.addr());
        let before = unix_now();
        let r = c.get("/").await;
        let after = unix_now();
        assert_ok(&r);
        let f = rl(&r, "l");
        let end = month_end(UNIX_EPOCH + before);
        // t = ceil(end - now) for the request's instant in [before, after].
        let (earliest, latest) = (end - after.as_secs(), end - before.as_secs());
        assert!(
            (earliest as i64..=latest as i64).contains(&f.t),
            "{what}: t {} for a month ending in {earliest}..={latest} s: {f:?}",
            f.t
        );
        assert!((28 * 86_400..=31 * 86_400).contains(&f.w), "{what}: {f:?}");
        assert_eq!((f.q, f.r), (5, 4), "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_window_t_is_when_the_fading_window_frees_a_unit() {
    let trio = trio(
        "{ algorithm: sliding_window, limit: 4, window: 8s, key: client_ip }",
        None,
    )
    .await;
    // 300 ms into a window with no previous one: nothing fades, so the
    // quota grows when the window ends (7.7 s). The rejection waits for
    // the next window's 2 s (previous weight 0.75): 9.7 s, more than w,
    // which draft 10 caps at w.
    align(Duration::from_secs(8), Duration::from_millis(300)).await;
    // Then 4.5 s into the next window: the previous 4 weigh 0.438, room
    // 2. With 1 taken, a third fits once they weigh 0.25, at 6 s: in 1.5 s.
    let draft11 = [
        Ok(3, 8),
        Ok(2, 8),
        Ok(1, 8),
        Ok(0, 8),
        No(0, 10, 10),
        Next(8, 4_500),
        Ok(1, 2),
        Ok(0, 2),
        No(0, 2, 2),
    ];
    // Draft 10: the whole window while the current one holds units.
    let draft10 = [
        Ok(3, 8),
        Ok(2, 8),
        Ok(1, 8),
        Ok(0, 8),
        No(0, 8, 10),
        Next(8, 4_500),
        Ok(1, 8),
        Ok(0, 8),
        No(0, 2, 2),
    ];
    run(&trio, "/", &draft11, &draft10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_log_t_is_when_the_oldest_entry_leaves() {
    let trio = trio(
        "{ algorithm: sliding_log, limit: 3, window: 4s, key: client_ip }",
        None,
    )
    .await;
    // The first entry leaves at 4 s: t is 4, then 2.5 s later 3.
    let draft11 = [Ok(2, 4), At(1_500), Ok(1, 3), Ok(0, 3), No(0, 3, 3)];
    // Draft 10: until the newest entry leaves.
    let draft10 = [Ok(2, 4), At(1_500), Ok(1, 4), Ok(0, 4), No(0, 3, 3)];
    run(&trio, "/", &draft11, &draft10).await;
}

/// A bucket (`algorithm`) at 2 per 5 s (a unit every 2.5 s) with a burst
/// of 3: draft 11's `t` is the next unit's 2.5 s whatever the level, draft
/// 10's the time to be whole again (2.5, 5, 7.5 s). The rejection 1 s
/// later is answered from the deny cache, with the 1.5 s the store would
/// say.
async fn bucket_t_is_the_next_unit(algorithm: &str) {
    let spec = format!("{{ algorithm: {algorithm}, rate: 2/5s, burst: 3, key: client_ip }}");
    let trio = trio(&spec, None).await;
    let draft11 = [
        Ok(2, 3),
        Ok(1, 3),
        Ok(0, 3),
        No(0, 3, 3),
        At(1_000),
        No(0, 2, 2),
    ];
    let draft10 = [
        Ok(2, 3),
        Ok(1, 5),
        Ok(0, 8),
        No(0, 3, 3),
        At(1_000),
        No(0, 2, 2),
    ];
    run(&trio, "/", &draft11, &draft10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_t_is_the_next_token() {
    bucket_t_is_the_next_unit("token_bucket").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_t_is_the_next_cell() {
    bucket_t_is_the_next_unit("gcra").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaky_bucket_t_is_the_next_unit_drained() {
    bucket_t_is_the_next_unit("leaky_bucket").await;
}

/// Shaping with `max_delay: 1s` (0.4 of a unit): after one request the
/// queue admits nothing until 0.6 of it has drained, 1.5 s; draft 10 says
/// the bucket is empty in 2.5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaky_bucket_shaping_t_is_when_the_queue_admits_one_more() {
    let trio = trio(
        "{ algorithm: leaky_bucket, rate: 2/5s, burst: 3, max_delay: 1s, key: client_ip }",
        None,
    )
    .await;
    run(
        &trio,
        "/",
        &[Ok(0, 2), No(0, 2, 2)],
        &[Ok(0, 3), No(0, 2, 2)],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_t_is_one_second_and_a_rejection_waits_for_a_lease() {
    let echo = Echo::start("e").await;
    let trio = trio(
        "{ algorithm: concurrency, limit: 1, lease: 20s, key: client_ip }",
        Some(&echo),
    )
    .await;
    let mut held = Vec::new();
    for gw in [&trio.memory, &trio.redis, &trio.draft10] {
        let r = Caller::new(gw.addr()).get("/delay/0").await;
        assert_ok(&r);
        let f = rl(&r, "l");
        assert_eq!(f.qu.as_deref(), Some("concurrent-requests"), "{f:?}");
        let draft10 = std::ptr::eq(gw, &trio.draft10);
        // Draft 10: the lease's 20 s; draft 11: 1 s.
        assert_eq!((f.r, f.t), (0, if draft10 { 20 } else { 1 }), "{f:?}");
        // That request's slot comes back after its response ended, in the
        // background (on Redis, a call of its own): wait for it, or the
        // next request races it.
        common::eventually(Duration::from_secs(3), "the slot given back", || async {
            (limit_state(gw, "l", "127.0.0.1").await["remaining"] == 1).then_some(())
        })
        .await;
        let c = Caller::new(gw.addr());
        held.push(tokio::spawn(async move { c.get("/delay/3000").await }));
    }
    common::eventually(
        Duration::from_secs(3),
        "three requests in flight",
        || async { (echo.in_flight() == 3).then_some(()) },
    )
    .await;
    // The slot is taken for up to its lease (19.x s): t and Retry-After
    // say so, in both drafts (20 s is the window too).
    let reject = [No(0, 20, 20)];
    run(&trio, "/delay/0", &reject, &reject).await;
    for h in held {
        assert_ok(&h.await.unwrap());
    }
}
