//! Settlements (`crate::settle`, `lua/settle.lua`) against real
//! `redis-server`s and the memory store:
//!
//! - each algorithm's Lua `settle` gives the same units, TTL and stored
//!   state as its Rust `settle`, on random traces of checks and
//!   settlements (a driven clock, `at` before, at or after windows'
//!   edges, deltas up to the clamp);
//! - through the [`Limiter`], on the memory store and on Redis: a
//!   settlement replayed 3 times is applied once; a refund stops at zero;
//!   a late one is dropped; the key's own values are honoured; every key
//!   has a TTL, a marker lives until the deadline and no longer, memory
//!   markers are swept; a decision the memory store made (`on_error:
//!   local`) is settled there; `settle_retrying` through a stalled Redis
//!   applies it once; a refund drops the key's cached rejections, on
//!   every instance;
//! - `settle.lua` refuses malformed calls before writing anything.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use ::redis::Value;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate_testkit::RedisServer;

use super::lua::{
    canonical, check, check_step, fail, fixed, ints, rate, raw_state, runner, trace_setting,
    ttl_checked, Function, CPU, T0,
};
use crate::algorithm::settle::clamp_delta;
use crate::algorithm::{sliding_window, token_bucket, Micros, SECOND};
use crate::clock::ManualClock;
use crate::quota::Quota;
use crate::store::redis::{self as store, wire};
use crate::store::{OnError, StoreBackend, StoreConfig, TimeSource};
use crate::{AlgoParams, AlgoState, Check, Decision, Figure, Limiter, SettleOutcome, Settlement};

/// What a trace step does: a request of some cost, or a settlement of
/// `delta` for a request decided `back` before now (negative: after, a
/// clock that stepped back).
#[derive(Debug, Clone)]
enum Op {
    Check(u64),
    Settle { delta: i64, back: i64 },
}

/// A trace: (gap, what, whether it uses the second parameter set).
type Trace = Vec<(i64, Op, bool)>;

fn trace(max_gap: i64) -> impl Strategy<Value = Trace> {
    let gap = prop_oneof![
        4 => 0..=max_gap,
        1 => -200i64..0,
    ];
    let delta = prop_oneof![
        8 => -12i64..=12,
        1 => Just(i64::MAX),
        1 => Just(i64::MIN),
        1 => -(1i64 << 53)..(1i64 << 53),
    ];
    let back = prop_oneof![4 => 0..=3 * max_gap, 1 => -200i64..0];
    let op = prop_oneof![
        Just(()).prop_flat_map(|_| (0u64..=8).prop_map(Op::Check)),
        (delta, back).prop_map(|(delta, back)| Op::Settle { delta, back }),
    ];
    proptest::collection::vec((gap, op, prop::bool::weighted(0.2)), 1..40)
}

/// One settlement through the algorithm's Lua `settle` on `key` and the
/// Rust `settle` on `model`, which must agree on the units and the TTL;
/// `model` becomes what is stored.
fn settle_step(
    conn: &mut redis::Connection,
    key: &str,
    p: &AlgoParams,
    (i, at, now): (usize, Micros, Micros),
    delta: i64,
    model: &mut Option<AlgoState>,
) -> Result<(), TestCaseError> {
    let mut inv = Function::of("settle_probe").key(key);
    // The store sends the clamped delta (wire::SettleArgs).
    inv.arg(wire::wire_name(p))
        .arg(at)
        .arg(now)
        .arg(clamp_delta(delta));
    for v in wire::algo_params(p) {
        inv.arg(v);
    }
    let r = ints(&inv.invoke::<Value>(conn).unwrap());
    let fresh = p.fresh();
    let s = p
        .settle(model.as_ref().unwrap_or(&fresh), at, now, delta)
        .expect("an algorithm that settles");
    prop_assert_eq!(
        (r[0], r[1]),
        (s.applied, s.ttl as i64),
        "step {}: settle {} at {} decided at {}",
        i,
        delta,
        now,
        at
    );
    let kept = ttl_checked(r[2], s.ttl).map_err(|e| fail(i, e))?;
    *model = kept.then_some(s.state);
    Ok(())
}

/// Runs `trace` through the Lua file and the Rust algorithm, comparing
/// every check's figures, every settlement's units and TTL, and the stored
/// state after each step.
fn conformance(
    conn: &mut redis::Connection,
    params: [&AlgoParams; 2],
    start: Micros,
    trace: &Trace,
) -> Result<(), TestCaseError> {
    let key = "t:{00000000000000000000000000000000}:s";
    redis::cmd("FLUSHALL").query::<()>(conn).unwrap();
    let mut model: Option<AlgoState> = None;
    let mut now = start;
    for (i, (gap, op, alt)) in trace.iter().enumerate() {
        now = now.saturating_add_signed(*gap).max(start);
        let p = params[usize::from(*alt)];
        match *op {
            Op::Check(cost) => check_step(conn, key, p, (i, now, start), (cost, 0), &mut model)?,
            Op::Settle { delta, back } => {
                let at = now.saturating_add_signed(-back);
                settle_step(conn, key, p, (i, at, now), delta, &mut model)?;
            }
        }
        let stored = canonical(raw_state(conn, key, params[0]));
        prop_assert_eq!(stored, canonical(model.clone()), "step {}: stored state", i);
    }
    Ok(())
}

/// Runs 32 random traces of [`trace_setting`]`(name)`'s params.
fn settle_matches_rust(name: &str) {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = RefCell::new(server.connection());
    let (one, start, gap) = trace_setting(name);
    runner(32)
        .run(
            &((one.clone(), one), start, trace(gap)),
            |((a, b), start, trace)| conformance(&mut conn.borrow_mut(), [&a, &b], start, &trace),
        )
        .unwrap();
}

#[test]
fn fixed_window_settle_matches_rust() {
    settle_matches_rust("fixed_window");
}

#[test]
fn calendar_window_settle_matches_rust() {
    settle_matches_rust("calendar_window");
}

#[test]
fn sliding_window_settle_matches_rust() {
    settle_matches_rust("sliding_window");
}

#[test]
fn token_bucket_settle_matches_rust() {
    settle_matches_rust("token_bucket");
}

#[test]
fn leaky_bucket_settle_matches_rust() {
    settle_matches_rust("leaky_bucket");
}

#[test]
fn gcra_settle_matches_rust() {
    settle_matches_rust("gcra");
}

// ---- through the limiter, on both stores ---------------------------------

/// How long after admission a settlement is applied in these tests.
const WITHIN: Micros = 15 * 60 * SECOND;

/// The two stores a limiter may settle on: memory, and the Redis at `url`.
fn backends(server: &RedisServer) -> [StoreBackend; 2] {
    [
        StoreBackend::Memory,
        StoreBackend::Redis { url: server.url() },
    ]
}

/// Runs `test` on a limiter over each store (memory, then a fresh Redis
/// server), its clock at `T0`, with the store's name.
async fn on_both_stores(test: impl AsyncFn(Arc<Limiter>, Arc<ManualClock>, &'static str)) {
    let _busy = CPU.read().await;
    let server = RedisServer::start();
    for backend in backends(&server) {
        let name = backend.name();
        let clock = Arc::new(ManualClock::new(T0));
        test(limiter(backend, &clock), clock, name).await;
    }
}

/// A limiter on `backend` reading the driven `clock` (`clock: local`), keys
/// under `tg`, `on_error: deny`.
fn limiter(backend: StoreBackend, clock: &Arc<ManualClock>) -> Arc<Limiter> {
    let config = StoreConfig {
        prefix: "tg".into(),
        timeout: Duration::from_secs(2),
        on_error: OnError::Deny,
        clock: TimeSource::Local,
        ..StoreConfig::with_backend(backend)
    };
    Limiter::with_clock(&config, None, clock.clone()).unwrap()
}

/// `c` decided alone: the figure of its admission.
async fn admit(l: &Arc<Limiter>, c: &Check) -> Figure {
    match l.decide(vec![c.clone()]).await {
        Decision::Allow { figures, .. } => figures[0].clone(),
        other => panic!("{other:?}"),
    }
}

/// A budget of 10,000 units an hour for client `client`, and a request
/// estimated at 150 of them.
fn budget(client: u8) -> Check {
    check(7, client, fixed(10_000, 3600 * SECOND), 150)
}

/// The units `c`'s fixed window counts now (0 for none).
async fn used(l: &Limiter, c: &Check) -> u64 {
    match l.inspect(c).await.unwrap().0 {
        Some(AlgoState::FixedWindow(s)) => s.n,
        None => 0,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_replayed_three_times_is_applied_once() {
    on_both_stores(async |l, clock, name| {
        let c = budget(1);
        clock.advance(SECOND);
        let f = admit(&l, &c).await;
        assert_eq!((f.outcome.at, f.local), (T0 + SECOND, name == "memory"));
        // Used 30 of the 150 reserved.
        let s = f.settlement(&c, -120, 42, WITHIN).unwrap();
        let mut seen = Vec::new();
        for _ in 0..3 {
            clock.advance(SECOND);
            seen.push(l.settle(s.clone()).await.unwrap());
        }
        let (applied, replayed) = (
            SettleOutcome::Applied { units: -120 },
            SettleOutcome::Replayed { units: -120 },
        );
        assert_eq!(seen, [applied, replayed, replayed], "{name}");
        assert_eq!(used(&l, &c).await, 30, "{name}");
        // Another id is another settlement.
        let more = Settlement {
            id: 43,
            delta: 50,
            ..s
        };
        let again = l.settle(more).await.unwrap();
        assert_eq!(again, SettleOutcome::Applied { units: 50 }, "{name}");
        assert_eq!(used(&l, &c).await, 80, "{name}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_stops_at_zero_and_a_charge_goes_past_the_limit() {
    on_both_stores(async |l, clock, name| {
        let c = budget(2);
        let f = admit(&l, &c).await;
        let refund = f.settlement(&c, -1_000, 1, WITHIN).unwrap();
        let got = l.settle(refund).await.unwrap();
        assert_eq!(got, SettleOutcome::Applied { units: -150 }, "{name}");
        assert_eq!(
            l.inspect(&c).await.unwrap().0,
            None,
            "{name}: an empty count is no key"
        );
        // A whole budget passes now; then 500 more than estimated.
        let all = Check {
            cost: 10_000,
            ..c.clone()
        };
        let f = admit(&l, &all).await;
        let charge = f.settlement(&all, 500, 2, WITHIN).unwrap();
        let got = l.settle(charge).await.unwrap();
        assert_eq!(got, SettleOutcome::Applied { units: 500 }, "{name}");
        assert_eq!(used(&l, &c).await, 10_500, "{name}");
        // Later requests wait for the next window; a refund of another
        // request does not bring it back under.
        let one = Check {
            cost: 1,
            ..c.clone()
        };
        assert!(matches!(
            l.decide(vec![one.clone()]).await,
            Decision::Reject { .. }
        ));
        let s = Settlement {
            id: 3,
            delta: -400,
            ..f.settlement(&all, 0, 3, WITHIN).unwrap()
        };
        l.settle(s).await.unwrap();
        assert!(matches!(
            l.decide(vec![one.clone()]).await,
            Decision::Reject { .. }
        ));
        clock.advance(3600 * SECOND);
        assert!(
            matches!(l.decide(vec![one]).await, Decision::Allow { .. }),
            "{name}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_after_its_deadline_is_dropped() {
    on_both_stores(async |l, clock, name| {
        let c = budget(3);
        let f = admit(&l, &c).await;
        let s = f.settlement(&c, -100, 9, WITHIN).unwrap();
        clock.set(T0 + WITHIN);
        assert_eq!(
            l.settle(s.clone()).await.unwrap(),
            SettleOutcome::Expired,
            "{name}"
        );
        assert_eq!(used(&l, &c).await, 150, "{name}");
        clock.set(T0 + WITHIN - 1);
        let got = l.settle(s).await.unwrap();
        assert_eq!(got, SettleOutcome::Applied { units: -100 }, "{name}");
        assert_eq!(used(&l, &c).await, 50, "{name}");
    })
    .await;
}

/// A per-key check settles under the key's own values, as it was decided:
/// a sliding window of 5 whose key has a limit of 100 takes a charge up
/// to 100, not 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_honours_the_keys_own_values() {
    on_both_stores(async |l, _clock, name| {
        let params =
            AlgoParams::SlidingWindow(sliding_window::Params::new(5, 60 * SECOND).unwrap());
        let c = check(8, 1, params, 50).per_key();
        let own = Quota {
            limit: Some(100),
            ..Quota::default()
        };
        l.set_quota(&c.key, Some(own)).await.unwrap();
        let f = admit(&l, &c).await;
        let s = f.settlement(&c, 70, 1, WITHIN).unwrap();
        assert!(s.quota);
        let got = l.settle(s).await.unwrap();
        assert_eq!(
            got,
            SettleOutcome::Applied { units: 50 },
            "{name}: up to the key's 100"
        );
    })
    .await;
}

/// After settlements on Redis every key has a TTL: the state's as its
/// check computes it (a charge lengthens a bucket's), a marker's what is
/// left of `settle_within`; keys hold only the prefix and hex; a refund to
/// empty deletes the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_keys_have_ttls_and_markers_last_until_the_deadline() {
    let _busy = CPU.read().await;
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(T0));
    let l = limiter(StoreBackend::Redis { url: server.url() }, &clock);
    let mut conn = server.connection();
    let pttl = |conn: &mut redis::Connection, key: &str| -> i64 {
        redis::cmd("PTTL").arg(key).query(conn).unwrap()
    };
    // A bucket of 1,000 tokens refilled at 1 a second, 10 taken: full
    // again in 10 s; 50 more: in 60 s.
    let tb = AlgoParams::TokenBucket(token_bucket::Params::new(rate(1, SECOND), 1_000, 0).unwrap());
    let c = check(9, 1, tb, 10);
    let f = admit(&l, &c).await;
    let state = store::keys("tg", &c.key).0;
    assert!((9_000..=10_000).contains(&pttl(&mut conn, &state)));
    clock.advance(60 * SECOND);
    let s = f.settlement(&c, 50, 0xabc, WITHIN).unwrap();
    l.settle(s.clone()).await.unwrap();
    let p = pttl(&mut conn, &state);
    assert!(
        (49_000..=50_000).contains(&p),
        "after 60 s, 50 missing: {p} ms"
    );
    let marker = store::settled_key("tg", &c.key, 0xabc);
    assert!(marker.ends_with(":c:0000000000000abc"), "{marker}");
    let left = (WITHIN - 60 * SECOND) / 1_000;
    let p = pttl(&mut conn, &marker) as u64;
    assert!(
        left - 5_000 <= p && p <= left,
        "marker PTTL {p} ms, {left} left"
    );
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    let shape = regex::Regex::new(r"^tg:\{[0-9a-f]{32}\}:(s|c:[0-9a-f]{16})$").unwrap();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for k in keys {
        assert!(shape.is_match(&k), "{k}");
        assert!(pttl(&mut conn, &k) > 0, "{k}");
    }
    // A refund of everything: the state goes, the markers stay to their end.
    let refund = Settlement {
        id: 0xabd,
        delta: -1_000,
        ..s
    };
    l.settle(refund).await.unwrap();
    assert_eq!(pttl(&mut conn, &state), -2, "a full bucket is no key");
    assert!(pttl(&mut conn, &store::settled_key("tg", &c.key, 0xabd)) > 0);
}

/// The memory store's markers answer replays until the deadline, and the
/// sweeper gives them back then.
#[test]
fn memory_markers_expire_and_are_swept() {
    let store = crate::store::memory::MemoryStore::new();
    let c = budget(4);
    let outcome = store.decide(std::slice::from_ref(&c), T0)[0];
    let figure = Figure {
        name: c.name.clone(),
        outcome,
        concurrency: false,
        key: c.key,
        local: true,
    };
    let s = figure.settlement(&c, -50, 1, WITHIN).unwrap();
    assert_eq!(
        store.settle(&s, T0 + 1),
        SettleOutcome::Applied { units: -50 }
    );
    let deadline = T0 + WITHIN;
    store.sweep(deadline - 1);
    assert_eq!(store.settled_len(), 1);
    assert_eq!(
        store.settle(&s, deadline - 1),
        SettleOutcome::Replayed { units: -50 }
    );
    store.sweep(deadline);
    assert_eq!(store.settled_len(), 0);
    assert_eq!(store.settle(&s, deadline), SettleOutcome::Expired);
}

/// With `on_error: local`, a request decided by the memory store while
/// Redis could not answer is settled there: nothing is sent to Redis (it
/// is still down), and the memory store's count moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_the_memory_store_made_is_settled_there() {
    let clock = Arc::new(ManualClock::new(T0));
    let config = StoreConfig {
        timeout: Duration::from_millis(50),
        on_error: OnError::Local,
        clock: TimeSource::Local,
        ..StoreConfig::with_backend(StoreBackend::Redis {
            url: "redis://127.0.0.1:1/0".into(),
        })
    };
    let l = Limiter::with_clock(&config, None, clock.clone()).unwrap();
    let c = budget(5);
    let f = admit(&l, &c).await;
    assert!(f.local, "decided by the fallback");
    let s = f.settlement(&c, -150, 1, WITHIN).unwrap();
    assert_eq!(
        l.settle(s.clone()).await.unwrap(),
        SettleOutcome::Applied { units: -150 }
    );
    assert_eq!(
        l.settle(s).await.unwrap(),
        SettleOutcome::Replayed { units: -150 }
    );
    // The whole budget fits again in the memory store.
    let all = Check { cost: 10_000, ..c };
    assert!(admit(&l, &all).await.local);
}

/// A settlement sent while Redis is stopped (SIGSTOP) times out, and may
/// sit unread in the socket; `settle_retrying` sends it again until Redis
/// answers. However many of its sends Redis then runs, it is applied
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_retrying_through_a_stalled_redis_applies_it_once() {
    let _busy = CPU.read().await;
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(T0));
    let config = StoreConfig {
        prefix: "tg".into(),
        timeout: Duration::from_millis(100),
        on_error: OnError::Deny,
        clock: TimeSource::Local,
        ..StoreConfig::with_backend(StoreBackend::Redis { url: server.url() })
    };
    let l = Limiter::with_clock(&config, None, clock.clone()).unwrap();
    let c = budget(6);
    let f = admit(&l, &c).await;
    let s = f.settlement(&c, -120, 77, WITHIN).unwrap();
    server.stop();
    let retrying = tokio::spawn({
        let l = l.clone();
        async move { l.settle_retrying(s).await }
    });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        !retrying.is_finished(),
        "still trying while Redis is stopped"
    );
    server.cont();
    let done = tokio::time::timeout(Duration::from_secs(10), retrying)
        .await
        .expect("settled within 10 s of Redis coming back")
        .unwrap()
        .unwrap();
    assert_eq!(done.units(), -120, "{done:?}");
    assert_eq!(used(&l, &c).await, 30);
}

/// A refund may let in what a cached rejection turned away: the
/// settlement drops the key from the deny cache. And a cached rejection
/// answers only requests of its own cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_drops_the_keys_cached_rejection() {
    on_both_stores(async |l, _clock, name| {
        let c = budget(10);
        let big = Check {
            cost: 9_900,
            ..c.clone()
        };
        let f = admit(&l, &big).await;
        // 100 left: the estimate of 150 is turned away, then by the cache.
        assert!(matches!(
            l.decide(vec![c.clone()]).await,
            Decision::Reject { .. }
        ));
        assert!(
            l.cached(std::slice::from_ref(&c)).is_some(),
            "{name}: cached"
        );
        let small = Check {
            cost: 100,
            ..c.clone()
        };
        assert!(l.cached(&[small]).is_none(), "{name}: another cost");
        // The big request used 9,000: 1,000 left, and the cache knows.
        let refund = f.settlement(&big, -900, 1, WITHIN).unwrap();
        l.settle(refund).await.unwrap();
        assert!(l.cached(std::slice::from_ref(&c)).is_none(), "{name}");
        assert!(
            matches!(l.decide(vec![c]).await, Decision::Allow { .. }),
            "{name}"
        );
    })
    .await;
}

/// On Redis a refund reaches the other instances' deny caches too, as a
/// reset does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_drops_the_other_instances_cached_rejections() {
    let _busy = CPU.read().await;
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(T0));
    let a = limiter(StoreBackend::Redis { url: server.url() }, &clock);
    let b = limiter(StoreBackend::Redis { url: server.url() }, &clock);
    // Both instances listen on the reset channel.
    let mut conn = server.connection();
    let listening = std::time::Instant::now();
    loop {
        let (_, n): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("tg:reset")
            .query(&mut conn)
            .unwrap();
        if n == 2 {
            break;
        }
        assert!(
            listening.elapsed() < Duration::from_secs(5),
            "{n} subscribers"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let c = budget(11);
    let big = Check {
        cost: 9_900,
        ..c.clone()
    };
    let f = admit(&a, &big).await;
    assert!(matches!(
        b.decide(vec![c.clone()]).await,
        Decision::Reject { .. }
    ));
    assert!(b.cached(std::slice::from_ref(&c)).is_some());
    a.settle(f.settlement(&big, -900, 1, WITHIN).unwrap())
        .await
        .unwrap();
    let told = std::time::Instant::now();
    while b.cached(std::slice::from_ref(&c)).is_some() {
        assert!(told.elapsed() < Duration::from_secs(5), "b still caches it");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(matches!(b.decide(vec![c]).await, Decision::Allow { .. }));
}

/// `settle.lua` refuses malformed calls with a clear error, before it
/// writes anything.
#[test]
fn settle_argument_errors_are_clear_and_change_nothing() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = &mut server.connection();
    let key = "t:{00000000000000000000000000000000}";
    let (state, marker) = (format!("{key}:s"), format!("{key}:c:0000000000000001"));
    let spec = "fixed_window 0 1 10 1000000";
    let t0 = T0.to_string();
    let call = |conn: &mut redis::Connection, keys: &[&str], args: &[&str]| -> String {
        let mut inv = Function::of("settle").prepare_invoke();
        for k in keys {
            inv.key(*k);
        }
        for a in args {
            inv.arg(*a);
        }
        match inv.invoke::<Value>(conn) {
            Err(e) => e.to_string(),
            Ok(v) => panic!("accepted: {v:?}"),
        }
    };
    let cases: [(&[&str], &[&str], &str); 6] = [
        (
            &[&state, &marker],
            &[&t0, "", spec, "-1"],
            "expected 5 ARGV",
        ),
        (
            &[&state, &marker],
            &[&t0, "", spec, "1.5", "9"],
            "settle: delta",
        ),
        (
            &[&state, &marker],
            &[&t0, "", spec, "-9007199254740992", "9"],
            "settle: delta",
        ),
        (&[&state], &[&t0, "", spec, "-1", "9"], "expected 2 KEYS"),
        (
            &[&state, &marker],
            &[&t0, "", "fixed_window 4 1 10 1000000", "-1", "9"],
            "expected 3 KEYS (the state key, the marker, the quota key)",
        ),
        (
            &[&state, &marker],
            &[&t0, "", "sliding_log 0 1 10 1000000", "-1", "9"],
            "sliding_log takes no settlements",
        ),
    ];
    for (keys, args, want) in cases {
        let e = call(conn, keys, args);
        assert!(e.contains(want), "{e}");
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(conn).unwrap();
    assert!(keys.is_empty(), "written: {keys:?}");
}
