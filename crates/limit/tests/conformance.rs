//! One conformance suite for both stores (both give the same decisions for
//! the same sequence of requests and times, docs/scaling-out.md): scripted
//! sequences with hand-derived figures, and random traces, run through the
//! memory store and through a real Redis with a driven clock (`clock:
//! local`, the gateway passes `now`).

use std::time::Duration;

use proptest::prelude::*;
use tollgate_limit::algorithm::{
    concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
    Micros, Rate,
};
use tollgate_limit::store::memory::MemoryStore;
use tollgate_limit::store::redis::RedisStore;
use tollgate_limit::{AlgoParams, Check, LockParams, Outcome, Status};
use tollgate_testkit::RedisServer;

/// Seconds, in microseconds.
const S: Micros = 1_000_000;
/// A start aligned to every window used here.
const T0: Micros = 1_700_000_000 * S;

/// The two stores, side by side.
struct Stores {
    _server: RedisServer,
    rt: tokio::runtime::Runtime,
    redis: RedisStore,
    memory: MemoryStore,
}

impl Stores {
    fn new() -> Stores {
        let server = RedisServer::start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let redis = rt
            .block_on(async {
                RedisStore::new(&server.url(), "conf", Duration::from_secs(2), true)
            })
            .unwrap();
        Stores {
            _server: server,
            rt,
            redis,
            memory: MemoryStore::new(),
        }
    }

    /// Decide on both stores; they must agree exactly.
    fn decide(&self, checks: &[Check], now: Micros) -> Vec<Outcome> {
        let memory = self.memory.decide(checks, now);
        let redis = self
            .rt
            .block_on(self.redis.decide(checks, now))
            .expect("redis decide");
        assert_eq!(memory, redis, "memory and redis disagree at {}", now - T0);
        memory
    }

    fn release(&self, check: &Check, now: Micros) {
        self.memory.release(check, now);
        self.rt
            .block_on(self.redis.release(&check.key, check.lease, now))
            .expect("redis release");
    }
}

fn key(n: u8) -> [u8; 16] {
    let mut k = [n; 16];
    k[1] = 0xA5;
    k
}

fn check(key_n: u8, params: AlgoParams, cost: u64) -> Check {
    Check {
        name: "t".into(),
        key: key(key_n),
        params,
        cost,
        lockout: None,
        shadow: false,
        lease: 0,
        quota: false,
        leasing: None,
    }
}

/// One scripted step: at `T0 + at_ms`, a request of `cost`; the expected
/// status, `remaining`, `retry_after` (ms) and `reset` (ms).
type Step = (u64, u64, Status, u64, u64, u64);

use Status::{Allowed as A, LockedOut as L, Rejected as R};

fn run(stores: &Stores, key_n: u8, params: AlgoParams, steps: &[Step]) {
    for &(at_ms, cost, status, remaining, retry_ms, reset_ms) in steps {
        let now = T0 + at_ms * 1000;
        let o = stores.decide(&[check(key_n, params.clone(), cost)], now)[0];
        let got = (o.status, o.remaining, o.retry_after / 1000, o.reset / 1000);
        assert_eq!(
            got,
            (status, remaining, retry_ms, reset_ms),
            "{} at {at_ms} ms, cost {cost}: (status, remaining, retry ms, reset ms)",
            params.name()
        );
        assert!(o.reset <= o.window, "draft 10: t <= w");
        assert!(o.grows_after >= 1, "draft 11: t is never 0");
        if o.status != A {
            assert!(o.retry_after >= o.reset, "Retry-After >= t");
            assert_eq!(o.grows_after, o.retry_after, "draft 11: t = Retry-After");
        }
    }
}

#[test]
fn fixed_window_boundaries_cost_and_idle() {
    let stores = Stores::new();
    let p = AlgoParams::FixedWindow(
        fixed_window::Params::new(3, fixed_window::Window::Fixed(10 * S)).unwrap(),
    );
    run(
        &stores,
        1,
        p,
        &[
            (0, 1, A, 2, 0, 10_000),
            (1_000, 1, A, 1, 0, 9_000),
            (2_000, 1, A, 0, 0, 8_000),
            (3_000, 1, R, 0, 7_000, 7_000),
            (9_999, 1, R, 0, 1, 1),
            // The next window.
            (10_000, 2, A, 1, 0, 10_000),
            (10_000, 2, R, 1, 10_000, 10_000),
            // More than the limit can never pass: Retry-After is the window.
            (10_000, 4, R, 1, 10_000, 10_000),
            // Long idle.
            (1_000_000, 1, A, 2, 0, 10_000),
        ],
    );
}

#[test]
fn sliding_window_estimate() {
    let stores = Stores::new();
    let p = AlgoParams::SlidingWindow(sliding_window::Params::new(4, 10 * S).unwrap());
    run(
        &stores,
        2,
        p,
        &[
            (0, 1, A, 3, 0, 10_000),
            (1_000, 1, A, 2, 0, 10_000),
            (1_000, 1, A, 1, 0, 10_000),
            (1_000, 1, A, 0, 0, 10_000),
            // Full: the previous window's weight lets one in at 12.5 s.
            (5_000, 1, R, 0, 7_500, 7_500),
            (10_000, 1, R, 0, 2_500, 2_500),
            (12_499, 1, R, 0, 1, 1),
            (12_500, 1, A, 0, 0, 10_000),
            (1_000_000, 1, A, 3, 0, 10_000),
        ],
    );
}

#[test]
fn sliding_log_is_exact() {
    let stores = Stores::new();
    let p = AlgoParams::SlidingLog(sliding_log::Params::new(3, 10 * S).unwrap());
    run(
        &stores,
        3,
        p,
        &[
            (0, 1, A, 2, 0, 10_000),
            (2_000, 1, A, 1, 0, 10_000),
            (4_000, 1, A, 0, 0, 10_000),
            (6_000, 1, R, 0, 4_000, 4_000),
            (9_999, 1, R, 0, 1, 1),
            (10_000, 1, A, 0, 0, 10_000),
            (10_000, 4, R, 0, 10_000, 10_000),
        ],
    );
}

#[test]
fn token_bucket_refill_burst_and_max_delay() {
    let stores = Stores::new();
    let rate = Rate::new(1, S).unwrap();
    let p = AlgoParams::TokenBucket(token_bucket::Params::new(rate, 2, 0).unwrap());
    run(
        &stores,
        4,
        p,
        &[
            (0, 1, A, 1, 0, 1_000),
            (0, 1, A, 0, 0, 2_000),
            (0, 1, R, 0, 1_000, 1_000),
            (500, 1, R, 0, 500, 500),
            (1_000, 1, A, 0, 0, 2_000),
            (1_000, 3, R, 0, 2_000, 2_000),
            (100_000, 1, A, 1, 0, 1_000),
        ],
    );
    // With max_delay, a request that fits within it waits instead.
    let p = AlgoParams::TokenBucket(token_bucket::Params::new(rate, 1, 2 * S).unwrap());
    let delays: Vec<(Status, Micros)> = (0..4)
        .map(|_| {
            let o = stores.decide(&[check(5, p.clone(), 1)], T0)[0];
            (o.status, o.delay)
        })
        .collect();
    assert_eq!(delays, vec![(A, 0), (A, S), (A, 2 * S), (R, 0)]);
}

#[test]
fn gcra_matches_cl_throttle() {
    let stores = Stores::new();
    let rate = Rate::new(5, 10 * S).unwrap();
    let p = AlgoParams::Gcra(gcra::Params::new(rate, 5, 0).unwrap());
    run(
        &stores,
        6,
        p,
        &[
            (0, 1, A, 4, 0, 2_000),
            (0, 1, A, 3, 0, 4_000),
            (0, 1, A, 2, 0, 6_000),
            (0, 1, A, 1, 0, 8_000),
            (0, 1, A, 0, 0, 10_000),
            (0, 1, R, 0, 2_000, 2_000),
            (1_000, 1, R, 0, 1_000, 1_000),
            (2_000, 1, A, 0, 0, 10_000),
            (2_000, 6, R, 0, 10_000, 10_000),
            (1_000_000, 1, A, 4, 0, 2_000),
        ],
    );
}

#[test]
fn leaky_bucket_policing_and_shaping() {
    let stores = Stores::new();
    let rate = Rate::new(1, S).unwrap();
    let p = AlgoParams::LeakyBucket(leaky_bucket::Params::new(rate, 2, 0).unwrap());
    run(
        &stores,
        7,
        p,
        &[
            (0, 1, A, 1, 0, 1_000),
            (0, 1, A, 0, 0, 2_000),
            (0, 1, R, 0, 1_000, 1_000),
            (1_500, 1, A, 0, 0, 1_500),
        ],
    );
    // Shaping: each request waits for what is ahead of it.
    let p = AlgoParams::LeakyBucket(leaky_bucket::Params::new(rate, 3, 2 * S).unwrap());
    let shaped: Vec<(Status, Micros, u64)> = (0..4)
        .map(|_| {
            let o = stores.decide(&[check(8, p.clone(), 1)], T0)[0];
            (o.status, o.delay, o.remaining)
        })
        .collect();
    assert_eq!(shaped, vec![(A, 0, 2), (A, S, 1), (A, 2 * S, 0), (R, 0, 0)]);
    let o = stores.decide(&[check(8, p, 1)], T0 + S)[0];
    assert_eq!((o.status, o.delay), (A, 2 * S));
}

#[test]
fn concurrency_leases() {
    let stores = Stores::new();
    let p = AlgoParams::Concurrency(concurrency::Params::new(2, 60 * S).unwrap());
    let lease = |id| Check {
        lease: id,
        ..check(9, p.clone(), 1)
    };
    let status = |id, at| {
        let o = stores.decide(&[lease(id)], T0 + at)[0];
        (o.status, o.remaining, o.retry_after / S)
    };
    assert_eq!(status(1, 0), (A, 1, 0));
    assert_eq!(status(2, 0), (A, 0, 0));
    assert_eq!(status(3, 0), (R, 0, 60));
    stores.release(&lease(1), T0 + S);
    assert_eq!(status(3, S), (A, 0, 0));
    // Leases expire: at 61 s both left are gone.
    assert_eq!(status(4, 61 * S), (A, 1, 0));
}

#[test]
fn lockouts_escalate_and_are_forgotten() {
    let stores = Stores::new();
    let p = AlgoParams::FixedWindow(
        fixed_window::Params::new(1, fixed_window::Window::Fixed(10 * S)).unwrap(),
    );
    let c = Check {
        lockout: Some(LockParams {
            after: 2,
            within: 10 * S,
            duration: 5 * S,
            escalate: 2,
            max_duration: 15 * S,
            forget_after: 30 * S,
        }),
        ..check(10, p, 1)
    };
    let at = |s: u64| {
        let o = stores.decide(std::slice::from_ref(&c), T0 + s * S)[0];
        (o.status, o.lock_started, o.retry_after / S)
    };
    assert_eq!(at(0), (A, false, 0));
    assert_eq!(at(1), (R, false, 9));
    assert_eq!(
        at(2),
        (L, true, 5),
        "the locking rejection answers locked_out"
    );
    assert_eq!(at(3), (L, false, 4), "no strike during the lock");
    assert_eq!(at(7), (R, false, 3));
    assert_eq!(at(8), (L, true, 10), "escalated");
    assert_eq!(at(18), (A, false, 0));
    // Forgotten 30 s after the last lock ended: back to 5 s.
    assert_eq!(at(50), (A, false, 0));
    assert_eq!(at(51), (R, false, 9));
    assert_eq!(at(52), (L, true, 5));
}

#[test]
fn parameter_changes_keep_state_under_new_parameters() {
    let stores = Stores::new();
    let rate = Rate::new(1, S).unwrap();
    let five = AlgoParams::TokenBucket(token_bucket::Params::new(rate, 5, 0).unwrap());
    for _ in 0..5 {
        assert_eq!(
            stores.decide(&[check(11, five.clone(), 1)], T0)[0].status,
            A
        );
    }
    // The burst shrinks to 2: the empty bucket stays empty.
    let two = AlgoParams::TokenBucket(token_bucket::Params::new(rate, 2, 0).unwrap());
    let o = stores.decide(&[check(11, two.clone(), 1)], T0)[0];
    assert_eq!((o.status, o.retry_after), (R, S));
    // It grows to 10 after 1 s: 5 taken, 1 refilled, 1 more taken now.
    let ten = AlgoParams::TokenBucket(token_bucket::Params::new(rate, 10, 0).unwrap());
    let o = stores.decide(&[check(11, ten, 1)], T0 + S)[0];
    assert_eq!((o.status, o.remaining), (A, 5));
}

#[test]
fn all_or_nothing_across_limits() {
    let stores = Stores::new();
    let fw = |limit| {
        AlgoParams::FixedWindow(
            fixed_window::Params::new(limit, fixed_window::Window::Fixed(10 * S)).unwrap(),
        )
    };
    let both = [check(12, fw(10), 1), check(13, fw(1), 1)];
    assert_eq!(stores.decide(&both, T0)[0].remaining, 9);
    let second = stores.decide(&both, T0);
    assert_eq!(second[1].status, R);
    assert_eq!(second[0].status, Status::NotConsumed);
    // Limit 12 still has 9 left.
    let alone = stores.decide(&[check(12, fw(10), 1)], T0)[0];
    assert_eq!(alone.remaining, 8);
}

fn any_params() -> impl Strategy<Value = AlgoParams> {
    let rate = (1u64..5, 1u64..4).prop_map(|(n, s)| Rate::new(n, s * S).unwrap());
    prop_oneof![
        (1u64..6, 1u64..4).prop_map(|(l, w)| AlgoParams::FixedWindow(
            fixed_window::Params::new(l, fixed_window::Window::Fixed(w * S)).unwrap()
        )),
        (1u64..6, 1u64..4).prop_map(|(l, w)| AlgoParams::SlidingWindow(
            sliding_window::Params::new(l, w * S).unwrap()
        )),
        (1u64..6, 1u64..4)
            .prop_map(|(l, w)| AlgoParams::SlidingLog(sliding_log::Params::new(l, w * S).unwrap())),
        (rate.clone(), 1u64..5, 0u64..3).prop_map(|(r, b, d)| AlgoParams::TokenBucket(
            token_bucket::Params::new(r, b, d * S).unwrap()
        )),
        (rate.clone(), 1u64..5, 0u64..3)
            .prop_map(|(r, b, d)| AlgoParams::Gcra(gcra::Params::new(r, b, d * S).unwrap())),
        (rate, 1u64..5, 0u64..3).prop_map(|(r, b, d)| AlgoParams::LeakyBucket(
            leaky_bucket::Params::new(r, b, d * S).unwrap()
        )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random traces of multi-limit requests (two clients, lockouts on one
    /// limit, costs 1..3, gaps up to 3 s) get identical outcomes from both
    /// stores, step after step.
    #[test]
    fn random_traces_agree(
        limits in proptest::collection::vec(any_params(), 1..4),
        steps in proptest::collection::vec((0u8..2, 0u64..8, 1u64..4, 0u64..3_000), 1..40),
    ) {
        let stores = Stores::new();
        let mut now = T0;
        for (client, mask, cost, gap_ms) in steps {
            now += gap_ms * 1000;
            let checks: Vec<Check> = limits
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0 || *i == 0)
                .map(|(i, p)| Check {
                    lockout: (i == 0).then_some(LockParams {
                        after: 2,
                        within: 5 * S,
                        duration: 2 * S,
                        escalate: 2,
                        max_duration: 6 * S,
                        forget_after: 10 * S,
                    }),
                    ..check(40 + 2 * i as u8 + client, p.clone(), cost)
                })
                .collect();
            stores.decide(&checks, now);
        }
    }
}
