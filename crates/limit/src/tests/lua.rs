//! The Redis scripts' own tests (`lua/`) and the Redis store around them,
//! against real `redis-server` processes (no mocks).
//!
//! - Each algorithm file, run on its own with a tiny test entry, gives the
//!   same verdicts and stores the same state as the Rust algorithm, on
//!   random traces with a driven clock; every key it writes has a TTL no
//!   longer than the Rust `ttl`.
//! - `dispatch.lua` gives the same outcomes and writes as `decide::decide`
//!   on random multi-limit requests (lockouts, shadow, cost > 1, rejections
//!   beside allowed limits); `probe.lua` answers what `dispatch.lua` then
//!   answers, and writes nothing.
//! - GCRA answers redis-cell's documented `CL.THROTTLE` figures.
//! - `refund.lua` (Redis Cluster): a request allowed and then refunded
//!   leaves every later outcome as if it had never come, per algorithm on
//!   random histories; and by hand, the documented rules where a refund cannot
//!   be exact (a rolled window, a drained bucket, GCRA's tat, one log entry,
//!   one lease, the key's TTL, a key that is gone).
//! - Arity errors are clear error replies.
//! - The store: the function library loaded at start and after FUNCTION FLUSH, deadlines under SIGSTOP, healing after a
//!   restart, the circuit breaker, key hygiene, resets over pub/sub.
//!
//! The driven clock and Redis's real clock differ, so the trace tests
//! PERSIST every key inside the same script call that wrote it (Redis
//! freezes time within a script, so the PTTL read there is exactly the one
//! set): real time never expires what the driven clock still needs.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::algorithm::fixed_window::{days_from_civil, Window};
use crate::algorithm::{
    concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
    Micros, Rate, DAY, SECOND,
};
use crate::decide::{decide, Loaded};
use ::redis::{ToRedisArgs, Value};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tollgate_testkit::RedisServer;

/// What the reference model keeps per key (the owned form of `Loaded`).
#[derive(Debug, Clone, Default)]
struct Model {
    algo: Option<AlgoState>,
    lock: LockState,
}
use crate::store::redis::{self as store, lua, wire, RedisStore, StoreError};
use crate::{AlgoParams, AlgoState, Check, Leasing, LockParams, LockState, Status, StoreKey};

/// 2023-11-14T00:00:00Z.
pub(super) const T0: Micros = 1_699_920_000 * SECOND;

/// The tests that time the store against its deadline run alone (a write
/// lock; every other test holds a read lock), so that a scheduler starved
/// by the property suites and other servers does not fail them.
pub(super) static CPU: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

pub(super) fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// The gateway's library (`lua::Library`) with the tests' own entry points
/// beside its own: every test runs the very code the gateway loads.
pub(super) fn test_library() -> &'static lua::Library {
    static LIBRARY: std::sync::OnceLock<lua::Library> = std::sync::OnceLock::new();
    LIBRARY.get_or_init(|| {
        let mut entries = lua::ENTRIES.to_vec();
        entries.extend([
            ("algo_probe", ALGO_ENTRY),
            ("release_probe", RELEASE_ENTRY),
            ("lock_probe", LOCK_ENTRY),
            ("dispatch_probe", DISPATCH_PROBE),
            ("refund_probe", REFUND_PROBE),
            ("settle_probe", SETTLE_PROBE),
            ("lease_probe", LEASE_PROBE),
        ]);
        lua::Library::with_entries(&entries)
    })
}

/// One function of [`test_library`], called the way `redis::Script` is
/// (`f.key(k).arg(a).invoke(conn)`): `FCALL`, loading the library first
/// into a server that does not have it.
#[derive(Clone)]
pub(super) struct Function {
    name: String,
}

impl Function {
    pub(super) fn of(entry: &str) -> Function {
        Function {
            name: test_library().function(entry),
        }
    }

    pub(super) fn prepare_invoke(&self) -> Invocation {
        Invocation {
            function: self.name.clone(),
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    pub(super) fn key(&self, k: impl redis::ToRedisArgs) -> Invocation {
        let mut inv = self.prepare_invoke();
        inv.key(k);
        inv
    }
}

pub(super) struct Invocation {
    function: String,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation {
    pub(super) fn key(&mut self, k: impl redis::ToRedisArgs) -> &mut Invocation {
        self.keys.extend(k.to_redis_args());
        self
    }

    pub(super) fn arg(&mut self, a: impl redis::ToRedisArgs) -> &mut Invocation {
        self.args.extend(a.to_redis_args());
        self
    }

    pub(super) fn invoke<T: redis::FromRedisValue>(
        &self,
        conn: &mut redis::Connection,
    ) -> redis::RedisResult<T> {
        let call = |conn: &mut redis::Connection| {
            redis::cmd("FCALL")
                .arg(&self.function)
                .arg(self.keys.len())
                .arg(&self.keys)
                .arg(&self.args)
                .query::<T>(conn)
        };
        match call(conn) {
            Err(e) if e.detail() == Some("Function not found") => {
                redis::cmd("FUNCTION")
                    .arg("LOAD")
                    .arg("REPLACE")
                    .arg(&test_library().src)
                    .query::<()>(conn)?;
                call(conn)
            }
            other => other,
        }
    }
}

/// The per-test entry that runs one algorithm file on its own.
const ALGO_ENTRY: &str = r#"
-- test entry: one algorithm, alone.
-- KEYS[1]: the state key. ARGV: algo, now, cost, lease, params...
-- Return: allowed, delay, limit, window, remaining, reset_after,
-- retry_after (-1: never), ttl, grows_after, then the key's PTTL right
-- after the write.
local function algo_probe(KEYS, ARGV)
  if #KEYS ~= 1 then return redis.error_reply('ERR test entry: expected 1 key') end
  local a = ALGO[ARGV[1]]
  local now = int(ARGV[2], 'now')
  local p1, p2, p3, p4 = ints(ARGV, 5, a.nparams, a.what)
  if #ARGV ~= 4 + a.nparams then
    return redis.error_reply('ERR test entry: ' .. #ARGV .. ' ARGV for ' .. a.nparams .. ' params')
  end
  local st
  if a.zset then st = a.load(KEYS[1]) else st = redis.call('MGET', KEYS[1])[1] end
  local ok, delay, limit, window, remaining, reset, retry, ttl, new, grows =
    a.check(st, now, int(ARGV[3], 'cost'), p1, p2, p3, p4, ARGV[4])
  if ok then
    if a.zset then a.store(KEYS[1], st, new, ttl, now, p1, p2, p3, p4) else put(KEYS[1], new, ttl) end
  end
  local pttl = redis.call('PTTL', KEYS[1])
  redis.call('PERSIST', KEYS[1])
  return {ok and 1 or 0, delay, limit, window, remaining, reset, retry, ttl, grows, pttl}
end
"#;

/// The per-test entry that releases a concurrency lease.
const RELEASE_ENTRY: &str = r#"
-- test entry: KEYS[1] the state key; ARGV: lease, now. Return: found, PTTL.
local function release_probe(KEYS, ARGV)
  local found = ALGO.concurrency.release(KEYS[1], ARGV[1], int(ARGV[2], 'now'))
  local pttl = redis.call('PTTL', KEYS[1])
  redis.call('PERSIST', KEYS[1])
  return {found, pttl}
end
"#;

/// The per-test entry that runs one algorithm's `settle` on its own.
const SETTLE_PROBE: &str = r#"
-- test entry: one algorithm's settle, alone.
-- KEYS[1]: the state key. ARGV: algo, at, now, delta, params...
-- Return: applied, ttl, then the key's PTTL right after the write.
local function settle_probe(KEYS, ARGV)
  local a = ALGO[ARGV[1]]
  local at, now, delta = int(ARGV[2], 'at'), int(ARGV[3], 'now'), tonumber(ARGV[4])
  local p1, p2, p3, p4 = ints(ARGV, 5, a.nparams, a.what)
  local new, ttl, applied = a.settle(redis.call('MGET', KEYS[1])[1], at, now, delta,
    p1, p2, p3, p4)
  put(KEYS[1], new, ttl)
  local pttl = redis.call('PTTL', KEYS[1])
  redis.call('PERSIST', KEYS[1])
  return {applied, ttl, pttl}
end
"#;

/// The per-test entry: a lease taken (`take`: x = cost, y = most) or given
/// back (`back`: x = the instant it was taken, y = the units) on KEYS[1].
const LEASE_PROBE: &str = r#"
-- test entry: KEYS[1] the state key. ARGV: mode, algo, now, x, y, params...
-- take: {units, allowed, remaining, ttl, pttl}; the state stored when units > 0.
-- back: {changed, ttl, applied, pttl}; the state stored when changed.
local function lease_probe(KEYS, ARGV)
  local name = ARGV[2]
  local a = ALGO[name]
  local now, x, y = int(ARGV[3], 'now'), int(ARGV[4], 'x'), int(ARGV[5], 'y')
  local p1, p2, p3, p4 = ints(ARGV, 6, a.nparams, a.what)
  local st = redis.call('MGET', KEYS[1])[1]
  if ARGV[1] == 'take' then
    local units, r = lease_take(a, st, now, x, y, p1, p2, p3, p4)
    if units > 0 then put(KEYS[1], r[9], r[8]) end
    local pttl = redis.call('PTTL', KEYS[1])
    redis.call('PERSIST', KEYS[1])
    return {units, r[1] and 1 or 0, r[5], r[8], pttl}
  end
  local new, ttl, applied = lease_give_back(a, name, st, x, now, y, p1, p2, p3, p4)
  if ttl == nil then return {0, 0, 0, -3} end
  put(KEYS[1], new, ttl)
  local pttl = redis.call('PTTL', KEYS[1])
  redis.call('PERSIST', KEYS[1])
  return {1, ttl, applied, pttl}
end
"#;

/// The Redis-side figures of one check, in the Rust verdict's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Figures {
    allowed: bool,
    delay: Micros,
    limit: u64,
    window: Micros,
    remaining: u64,
    reset_after: Micros,
    grows_after: Micros,
    retry_after: Option<Micros>,
    ttl: Micros,
}

pub(super) fn ints(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Int(n) => *n,
                other => panic!("expected an integer, got {other:?}"),
            })
            .collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

fn figures(r: &[i64]) -> Figures {
    let u = |i: usize| u64::try_from(r[i]).expect("non-negative");
    Figures {
        allowed: r[0] == 1,
        delay: u(1),
        limit: u(2),
        window: u(3),
        remaining: u(4),
        reset_after: u(5),
        grows_after: u(8),
        retry_after: u64::try_from(r[6]).ok(),
        ttl: u(7),
    }
}

/// The longest PTTL (ms) a state living `ttl` µs may have. (A PTTL read
/// right after setting it can be 0: under a millisecond left, not "no TTL",
/// which is -1.)
fn max_pttl(ttl: Micros) -> i64 {
    ttl.div_ceil(1000) as i64
}

/// The slack below which Redis 7.0 may drop a key while setting its TTL:
/// its `PEXPIRE` reads the clock twice (for the base time, then to see
/// whether the expiry has already passed), so a stall of a few milliseconds
/// between the two deletes a key given a TTL of a few milliseconds. (Redis
/// 7.2 reads the command's time once.) The state was needed for at most
/// that long anyway.
const PEXPIRE_RACE: Micros = 10_000;

/// Checks the PTTL a key has right after a write with TTL `ttl`: deleted
/// when `ttl` is 0, else at most `max_pttl(ttl)`. Returns whether the key
/// is there.
pub(super) fn ttl_checked(pttl: i64, ttl: Micros) -> Result<bool, String> {
    ttl_checked_below(pttl, ttl, max_pttl(ttl))
}

/// The longest PTTL (ms) `dispatch.lua` may give a state living `ttl` µs:
/// a limit reuses the TTL text it last wrote for a TTL up to 1/64 shorter
/// (lua/dispatch.lua, lone()), so the PTTL `p` set for `ms` needed has
/// `p - p / 64 < ms`, i.e. `p < ms + ms / 63`.
fn max_dispatch_pttl(ttl: Micros) -> i64 {
    let ms = max_pttl(ttl);
    ms + ms / 63
}

/// [`ttl_checked`] with `most` for the longest PTTL allowed.
fn ttl_checked_below(pttl: i64, ttl: Micros, most: i64) -> Result<bool, String> {
    match (ttl, pttl) {
        (0, -2) => Ok(false),
        (0, p) => Err(format!("a state with ttl 0 must be deleted, has pttl {p}")),
        (_, p) if (0..=most).contains(&p) => Ok(true),
        (t, -2) if t <= PEXPIRE_RACE => Ok(false),
        (t, p) => Err(format!("pttl {p} for ttl {t}")),
    }
}

pub(super) fn fail(step: usize, e: String) -> TestCaseError {
    TestCaseError::fail(format!("step {step}: {e}"))
}

/// A state as stored, read with plain commands (not through the scripts).
/// The `fields` integers of a state stored as one string: little-endian
/// doubles, the tag then the fields (lua/common.lua, "States").
fn packed(raw: &[u8], tag: u64, fields: usize) -> Vec<u64> {
    assert_eq!(raw.len(), 8 * (fields + 1), "the length of {raw:?}");
    let v: Vec<u64> = raw
        .chunks(8)
        .map(|b| {
            let x = f64::from_le_bytes(b.try_into().unwrap());
            assert!(x >= 0.0 && x.fract() == 0.0 && x < 2f64.powi(53), "{x}");
            x as u64
        })
        .collect();
    assert_eq!(v[0], tag, "the tag of {raw:?}");
    v[1..].to_vec()
}

/// The state stored under `key`, read with plain Redis commands.
pub(super) fn raw_state(
    conn: &mut redis::Connection,
    key: &str,
    params: &AlgoParams,
) -> Option<AlgoState> {
    let kind: String = redis::cmd("TYPE").arg(key).query(conn).unwrap();
    if kind == "none" {
        return None;
    }
    let zset = |conn: &mut redis::Connection| -> Vec<(String, u64)> {
        assert_eq!(kind, "zset", "{key}");
        let raw: Vec<(String, String)> = redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(conn)
            .unwrap();
        raw.into_iter()
            .map(|(m, s)| (m, s.parse::<f64>().unwrap() as u64))
            .collect()
    };
    let string = |conn: &mut redis::Connection, tag: u64, fields: usize| -> Vec<u64> {
        assert_eq!(kind, "string", "{key}");
        let raw: Vec<u8> = redis::cmd("GET").arg(key).query(conn).unwrap();
        packed(&raw, tag, fields)
    };
    Some(match params {
        AlgoParams::FixedWindow(_) => {
            let v = string(conn, 1, 2);
            AlgoState::FixedWindow(fixed_window::State { ws: v[0], n: v[1] })
        }
        AlgoParams::SlidingWindow(_) => {
            let v = string(conn, 2, 3);
            AlgoState::SlidingWindow(sliding_window::State {
                ws: v[0],
                cur: v[1],
                prev: v[2],
            })
        }
        AlgoParams::TokenBucket(_) => {
            let v = string(conn, 3, 3);
            AlgoState::TokenBucket(token_bucket::State {
                d: v[0],
                ts: v[1],
                u: v[2],
            })
        }
        AlgoParams::Gcra(_) => AlgoState::Gcra(gcra::State {
            tat: string(conn, 4, 1)[0],
        }),
        AlgoParams::LeakyBucket(_) => {
            let v = string(conn, 5, 3);
            AlgoState::LeakyBucket(leaky_bucket::State {
                lv: v[0],
                ts: v[1],
                u: v[2],
            })
        }
        AlgoParams::SlidingLog(_) => AlgoState::SlidingLog(sliding_log::State {
            entries: zset(conn)
                .into_iter()
                .map(|(m, score)| {
                    let (t, n) = m.split_once(':').expect("member t:n");
                    let e = sliding_log::Entry {
                        t: t.parse().unwrap(),
                        n: n.parse().unwrap(),
                    };
                    assert_eq!(e.t, score, "the score of {m} is its time");
                    e
                })
                .collect(),
        }),
        AlgoParams::Concurrency(_) => AlgoState::Concurrency(concurrency::State {
            leases: zset(conn)
                .into_iter()
                .map(|(id, exp)| concurrency::Lease {
                    id: id.parse().unwrap(),
                    exp,
                })
                .collect(),
        }),
    })
}

/// Leases in a canonical order (a set in Redis, a Vec in Rust).
pub(super) fn canonical(s: Option<AlgoState>) -> Option<AlgoState> {
    match s {
        Some(AlgoState::Concurrency(mut c)) => {
            c.leases.sort_by_key(|l| l.id);
            Some(AlgoState::Concurrency(c))
        }
        other => other,
    }
}

/// Durations and gaps are often multiples of this, so that instants meet
/// window edges and expiries exactly (the `<` versus `<=` cases).
const GRID: u64 = 100;

/// A duration in `1..max`, on the [`GRID`] half of the time.
pub(super) fn dur(max: u64) -> impl Strategy<Value = u64> + Clone {
    prop_oneof![1..max, (1..max / GRID).prop_map(|k| k * GRID)]
}

/// One step of a trace: a signed gap, a cost, a lease id, whether it is a
/// release (concurrency), whether it uses the second parameter set.
pub(super) type Step = (i64, u64, u64, bool, bool);

pub(super) fn steps(
    max_gap: i64,
    max_cost: u64,
    releases: bool,
) -> impl Strategy<Value = Vec<Step>> {
    let gap = prop_oneof![
        5 => 0..=max_gap,
        4 => (0..=max_gap / GRID as i64).prop_map(|k| k * GRID as i64),
        1 => -200i64..0,
    ];
    let release = if releases {
        any::<bool>().boxed()
    } else {
        Just(false).boxed()
    };
    proptest::collection::vec(
        (
            gap,
            0..=max_cost,
            0u64..10,
            release,
            prop::bool::weighted(0.2),
        ),
        1..40,
    )
}

/// Runs `trace` through the algorithm's Lua file and through the Rust
/// algorithm, comparing verdicts, stored state and TTLs at every step.
fn conformance(
    conn: &mut redis::Connection,
    params: [&AlgoParams; 2],
    start: Micros,
    trace: &[Step],
) -> Result<(), TestCaseError> {
    let release = Function::of("release_probe");
    let key = "t:{00000000000000000000000000000000}:s";
    redis::cmd("FLUSHALL").query::<()>(conn).unwrap();
    let mut model: Option<AlgoState> = None;
    let mut now = start;
    for (i, &(gap, cost, lease, is_release, alt)) in trace.iter().enumerate() {
        now = now.saturating_add_signed(gap).max(start);
        let p = params[usize::from(alt)];
        if is_release {
            let r = ints(
                &release
                    .key(key)
                    .arg(lease)
                    .arg(now)
                    .invoke::<Value>(conn)
                    .unwrap(),
            );
            let current = match &model {
                Some(AlgoState::Concurrency(s)) => s.clone(),
                _ => concurrency::State::default(),
            };
            let rel = concurrency::release(&current, now, lease);
            prop_assert_eq!(r[0] == 1, rel.found, "step {}: release found", i);
            let kept = ttl_checked(r[1], rel.ttl).map_err(|e| fail(i, e))?;
            model = kept.then_some(AlgoState::Concurrency(rel.state));
        } else {
            check_step(conn, key, p, (i, now, start), (cost, lease), &mut model)?;
        }
        let stored = canonical(raw_state(conn, key, params[0]));
        prop_assert_eq!(stored, canonical(model.clone()), "step {}: stored state", i);
    }
    Ok(())
}

/// Step `i` of a trace started at `start`: a request of `cost` (and
/// `lease`) at `now` under `p`, through the algorithm's Lua file on `key`
/// and through the Rust algorithm on `model`, which must agree; `model`
/// becomes what is stored.
pub(super) fn check_step(
    conn: &mut redis::Connection,
    key: &str,
    p: &AlgoParams,
    (i, now, start): (usize, Micros, Micros),
    (cost, lease): (u64, u64),
    model: &mut Option<AlgoState>,
) -> Result<(), TestCaseError> {
    let mut inv = Function::of("algo_probe").key(key);
    inv.arg(wire::wire_name(p)).arg(now).arg(cost).arg(lease);
    for v in wire::algo_params(p) {
        inv.arg(v);
    }
    let r = ints(&inv.invoke::<Value>(conn).unwrap());
    let fresh = p.fresh();
    let v = p.check(model.as_ref().unwrap_or(&fresh), now, cost, lease);
    let want = Figures {
        allowed: v.allowed,
        delay: v.delay,
        limit: v.limit,
        window: v.window,
        remaining: v.remaining,
        reset_after: v.reset_after,
        grows_after: v.grows_after,
        retry_after: v.retry_after,
        ttl: v.ttl,
    };
    prop_assert_eq!(
        figures(&r),
        want,
        "step {} at now {} cost {}",
        i,
        now - start,
        cost
    );
    if v.allowed {
        let kept = ttl_checked(r[9], v.ttl).map_err(|e| fail(i, e))?;
        *model = kept.then_some(v.state);
    }
    Ok(())
}

/// Runs `cases` random traces of parameter pairs from `params`.
fn algorithm_suite<S>(
    params: S,
    start: impl Strategy<Value = Micros>,
    trace: impl Strategy<Value = Vec<Step>>,
) where
    S: Strategy<Value = (AlgoParams, AlgoParams)>,
{
    let server = RedisServer::start();
    let conn = RefCell::new(server.connection());
    runner(32)
        .run(&(params, start, trace), |((a, b), start, trace)| {
            conformance(&mut conn.borrow_mut(), [&a, &b], start, &trace)
        })
        .unwrap();
}

pub(super) fn rate(count: u64, period: u64) -> Rate {
    Rate::new(count, period).unwrap()
}

fn bucket_params() -> impl Strategy<Value = (Rate, u64, Micros)> + Clone {
    (
        1u64..20,
        dur(5_000),
        1u64..20,
        prop_oneof![Just(0u64), dur(3_000)],
    )
        .prop_map(|(c, p, b, d)| (rate(c, p), b, d))
}

/// The trace suites' setting for the algorithm `name` (`calendar_window`
/// is fixed_window over calendar periods): random params, the trace's
/// start, and the longest gap between its steps.
///
/// Fixed windows start around a month boundary (a leap February into
/// March), so calendar months roll over too; calendar periods are of
/// unequal lengths (as months and DST days are), the trace starting
/// before the period, crossing into the next, and now and then past it.
pub(super) fn trace_setting(name: &str) -> (BoxedStrategy<AlgoParams>, BoxedStrategy<Micros>, i64) {
    let bucket = bucket_params();
    let t0 = Just(T0).boxed();
    match name {
        "fixed_window" => {
            let window = prop_oneof![
                4 => (dur(5_000)).prop_map(Window::Fixed),
                1 => Just(Window::Month),
            ];
            let one = (1u64..20, window).prop_map(|(l, w)| {
                AlgoParams::FixedWindow(fixed_window::Params::new(l, w).unwrap())
            });
            let march = days_from_civil(2024, 3, 1) * DAY;
            let start = (0u64..100_000).prop_map(move |o| march - o);
            (one.boxed(), start.boxed(), 3_000)
        }
        "calendar_window" => {
            let base = days_from_civil(2026, 3, 29) * DAY;
            let one = (1u64..20, 1u64..4_000, 1u64..4_000).prop_map(move |(l, a, b)| {
                let window = Window::Calendar {
                    start: base,
                    end: base + a,
                    next: base + a + b,
                };
                AlgoParams::FixedWindow(fixed_window::Params::new(l, window).unwrap())
            });
            let start = (0u64..2_000).prop_map(move |o| base + o);
            (one.boxed(), start.boxed(), 2_000)
        }
        "sliding_window" => {
            let one = (1u64..20, dur(50_000)).prop_map(|(l, w)| {
                AlgoParams::SlidingWindow(sliding_window::Params::new(l, w).unwrap())
            });
            (one.boxed(), (0..50_000u64).boxed(), 20_000)
        }
        "sliding_log" => {
            let one = (1u64..20, dur(5_000))
                .prop_map(|(l, w)| AlgoParams::SlidingLog(sliding_log::Params::new(l, w).unwrap()));
            (one.boxed(), t0, 1_500)
        }
        "token_bucket" => {
            let one = bucket.prop_filter_map("exact params", |(r, b, d)| {
                token_bucket::Params::new(r, b, d)
                    .ok()
                    .map(AlgoParams::TokenBucket)
            });
            (one.boxed(), t0, 1_000)
        }
        "leaky_bucket" => {
            let one = bucket.prop_filter_map("exact params", |(r, b, d)| {
                leaky_bucket::Params::new(r, b, d)
                    .ok()
                    .map(AlgoParams::LeakyBucket)
            });
            (one.boxed(), t0, 1_000)
        }
        "gcra" => {
            let one = (
                1u64..5,
                1u64..2_000,
                1u64..20,
                prop_oneof![Just(0u64), dur(3_000)],
            )
                .prop_filter_map("exact params", |(c, interval, b, d)| {
                    gcra::Params::new(rate(c, c * interval), b, d)
                        .ok()
                        .map(AlgoParams::Gcra)
                });
            (one.boxed(), t0, 1_000)
        }
        "concurrency" => {
            let one = (1u64..6, dur(3_000)).prop_map(|(l, lease)| {
                AlgoParams::Concurrency(concurrency::Params::new(l, lease).unwrap())
            });
            (one.boxed(), t0, 500)
        }
        other => panic!("no trace setting for {other}"),
    }
}

/// [`algorithm_suite`] over [`trace_setting`]`(name)`, costs up to 8 (1
/// and releases for concurrency).
fn matches_rust(name: &str) {
    let _busy = CPU.blocking_read();
    let (one, start, gap) = trace_setting(name);
    let lease = name == "concurrency";
    let cost = if lease { 1 } else { 8 };
    algorithm_suite((one.clone(), one), start, steps(gap, cost, lease));
}

#[test]
fn fixed_window_matches_rust() {
    matches_rust("fixed_window");
}

#[test]
fn calendar_window_matches_rust() {
    matches_rust("calendar_window");
}

#[test]
fn sliding_window_matches_rust() {
    matches_rust("sliding_window");
}

#[test]
fn sliding_log_matches_rust() {
    matches_rust("sliding_log");
}

#[test]
fn token_bucket_matches_rust() {
    matches_rust("token_bucket");
}

#[test]
fn gcra_matches_rust() {
    matches_rust("gcra");
}

#[test]
fn leaky_bucket_matches_rust() {
    matches_rust("leaky_bucket");
}

#[test]
fn concurrency_matches_rust() {
    matches_rust("concurrency");
}

/// The per-test entry that runs `lockout.lua` on its own: one strike.
const LOCK_ENTRY: &str = r#"
-- test entry: KEYS[1] the lockout key; ARGV: now, after, within, duration,
-- escalate, max_duration, forget_after. Counts one strike.
-- Return: the lockout it started (-1: none), ttl, then the key's PTTL.
local function lock_probe(KEYS, ARGV)
  if #KEYS ~= 1 or #ARGV ~= 7 then return redis.error_reply('ERR test entry: arity') end
  local now = int(ARGV[1], 'now')
  local after, within, duration, escalate, max_duration, forget_after = lock_params(ARGV, 2)
  local n, s, lu, lv = lock_parse(redis.call('MGET', KEYS[1])[1])
  local length
  n, s, lu, lv, length = lock_strike(n, s, lu, lv, now, after, within, duration, escalate,
    max_duration, forget_after)
  local ttl = lock_ttl(n, s, lu, lv, now, within, forget_after)
  put(KEYS[1], lock_format(n, s, lu, lv), ttl)
  local pttl = redis.call('PTTL', KEYS[1])
  redis.call('PERSIST', KEYS[1])
  return {length or -1, ttl, pttl}
end
"#;

#[test]
fn lockout_matches_rust() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = RefCell::new(server.connection());
    let script = Function::of("lock_probe");
    // Small integers, so that strikes meet the window and lock edges.
    let params = (1u64..4, 1u64..8, 1u64..8, 1u64..4, 0u64..20, 0u64..20).prop_map(
        |(after, within, duration, escalate, extra, forget_after)| LockParams {
            after,
            within,
            duration,
            escalate,
            max_duration: duration + extra,
            forget_after,
        },
    );
    let gaps = proptest::collection::vec(0u64..12, 1..40);
    runner(32)
        .run(&(params, gaps), |(p, gaps)| {
            let conn = &mut *conn.borrow_mut();
            let key = "t:{00000000000000000000000000000002}:l";
            redis::cmd("FLUSHALL").query::<()>(conn).unwrap();
            let mut model = LockState::default();
            let mut now = T0;
            for (i, gap) in gaps.into_iter().enumerate() {
                now += gap;
                let r = ints(
                    &script
                        .key(key)
                        .arg(now)
                        .arg(p.after)
                        .arg(p.within)
                        .arg(p.duration)
                        .arg(p.escalate)
                        .arg(p.max_duration)
                        .arg(p.forget_after)
                        .invoke::<Value>(conn)
                        .unwrap(),
                );
                let (next, started) = crate::algorithm::lockout::strike(&p, &model, now);
                let ttl = next.ttl(&p, now);
                prop_assert_eq!(
                    (u64::try_from(r[0]).ok(), r[1]),
                    (started, ttl as i64),
                    "step {}",
                    i
                );
                let kept = ttl_checked(r[2], ttl).map_err(|e| fail(i, e))?;
                model = if kept { next } else { LockState::default() };
                let raw: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(conn).unwrap();
                let stored = match raw {
                    None => LockState::default(),
                    Some(raw) => {
                        let v = packed(&raw, 9, 4);
                        LockState {
                            n: v[0],
                            s: v[1],
                            lu: v[2],
                            lv: v[3],
                        }
                    }
                };
                prop_assert_eq!(stored, model, "step {}", i);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn edges_found_by_hand_match_rust() {
    let _busy = CPU.blocking_read();
    // Cases random traces rarely hit exactly.
    let server = RedisServer::start();
    let mut conn = server.connection();
    let shaping =
        AlgoParams::LeakyBucket(leaky_bucket::Params::new(rate(1, 1_000), 5, 2_000).unwrap());
    // A level exactly at max_delay's worth: one more may still queue.
    let trace: Vec<Step> = vec![(0, 1, 0, false, false); 4];
    conformance(&mut conn, [&shaping, &shaping], T0, &trace).unwrap();
    // A sliding log entry leaving the window at exactly now.
    let log = AlgoParams::SlidingLog(sliding_log::Params::new(1, 1_000).unwrap());
    let trace: Vec<Step> = vec![
        (0, 1, 0, false, false),
        (999, 1, 0, false, false),
        (1, 1, 0, false, false),
    ];
    conformance(&mut conn, [&log, &log], T0, &trace).unwrap();
}

/// redis-cell's reply for a duration: whole seconds, plus one if the rest
/// has a whole millisecond.
fn cell_secs(us: Micros) -> i64 {
    let secs = (us / SECOND) as i64;
    secs + i64::from((us % SECOND) / 1_000 > 0)
}

#[test]
fn gcra_gives_redis_cells_figures() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let mut conn = server.connection();
    let script = Function::of("algo_probe");
    let key = "t:{00000000000000000000000000000001}:s";
    // `CL.THROTTLE user123 15 30 60 1` at `now`: redis-cell's five integers.
    let mut throttle = |at: Micros| -> [i64; 5] {
        let p = gcra::Params::new(rate(30, 60 * SECOND), 16, 0).unwrap();
        let mut inv = script.key(key);
        inv.arg("gcra").arg(T0 + at).arg(1).arg(0);
        for v in wire::algo_params(&AlgoParams::Gcra(p)) {
            inv.arg(v);
        }
        let f = figures(&ints(&inv.invoke::<Value>(&mut conn).unwrap()));
        [
            i64::from(!f.allowed),
            f.limit as i64,
            f.remaining as i64,
            match f.retry_after {
                Some(r) if !f.allowed => cell_secs(r),
                _ => -1,
            },
            cell_secs(f.reset_after),
        ]
    };
    // The README: a fresh key answers "not limited, 16, 15 left, -1, 2 s".
    assert_eq!(throttle(0), [0, 16, 15, -1, 2]);
    for i in 2..=16 {
        assert_eq!(throttle(0), [0, 16, 16 - i, -1, 2 * i]);
    }
    // Then limited: one token every 2 s.
    assert_eq!(throttle(0), [1, 16, 0, 2, 32]);
    assert_eq!(throttle(SECOND), [1, 16, 0, 1, 31]);
    assert_eq!(throttle(2 * SECOND), [0, 16, 0, -1, 32]);
    // Idle for a minute: a full burst again.
    assert_eq!(throttle(62 * SECOND), [0, 16, 15, -1, 2]);
}

/// A key holding another algorithm's state (a sorted set where a hash is
/// expected, or the other way round) reads as fresh, and the write replaces
/// it; an error other than WRONGTYPE still fails the call.
#[test]
fn another_algorithms_state_counts_as_fresh() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let mut conn = server.connection();
    let key = "t:{00000000000000000000000000000002}:s";
    let run = |conn: &mut redis::Connection, params: AlgoParams| -> Figures {
        let name = params.name();
        let script = Function::of("algo_probe");
        let mut inv = script.key(key);
        inv.arg(name).arg(T0).arg(1).arg(7);
        for v in wire::algo_params(&params) {
            inv.arg(v);
        }
        figures(&ints(&inv.invoke::<Value>(conn).unwrap()))
    };
    let fw = AlgoParams::FixedWindow(fixed_window::Params::new(3, Window::Fixed(SECOND)).unwrap());
    let log = AlgoParams::SlidingLog(sliding_log::Params::new(3, SECOND).unwrap());
    let lease = AlgoParams::Concurrency(concurrency::Params::new(3, SECOND).unwrap());

    // A sorted set under a fixed window's key: fresh, then a string.
    let _: () = redis::cmd("ZADD")
        .arg(key)
        .arg(1)
        .arg("x")
        .query(&mut conn)
        .unwrap();
    let f = run(&mut conn, fw.clone());
    assert!(f.allowed);
    assert_eq!(f.remaining, 2, "a fresh window: 1 of 3 taken");
    let kind: String = redis::cmd("TYPE").arg(key).query(&mut conn).unwrap();
    assert_eq!(kind, "string");
    // The hash an earlier version kept (fields ws, n): fresh too, then
    // replaced by a string.
    let _: () = redis::cmd("DEL").arg(key).query(&mut conn).unwrap();
    let _: () = redis::cmd("HSET")
        .arg(key)
        .arg("ws")
        .arg(0)
        .arg("n")
        .arg(3)
        .query(&mut conn)
        .unwrap();
    assert_eq!(run(&mut conn, fw.clone()).remaining, 2, "a fresh window");
    let kind: String = redis::cmd("TYPE").arg(key).query(&mut conn).unwrap();
    assert_eq!(kind, "string");
    // Another algorithm's state (a GCRA's: tag 4, tat): fresh.
    let gcra: Vec<u8> = [4f64, 9e15].iter().flat_map(|x| x.to_le_bytes()).collect();
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(gcra)
        .query(&mut conn)
        .unwrap();
    assert_eq!(run(&mut conn, fw.clone()).remaining, 2, "a fresh window");
    // A hash under a sliding log's (or a concurrency limit's) key: fresh,
    // then a sorted set.
    for params in [log, lease] {
        let _: () = redis::cmd("DEL").arg(key).query(&mut conn).unwrap();
        let _: () = redis::cmd("HSET")
            .arg(key)
            .arg("n")
            .arg(9)
            .query(&mut conn)
            .unwrap();
        let f = run(&mut conn, params);
        assert!(f.allowed);
        assert_eq!(f.remaining, 2, "fresh: 1 of 3 taken");
        let kind: String = redis::cmd("TYPE").arg(key).query(&mut conn).unwrap();
        assert_eq!(kind, "zset");
    }
    // A string is foreign to every algorithm as well.
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("v")
        .query(&mut conn)
        .unwrap();
    assert_eq!(run(&mut conn, fw).remaining, 2);
}

/// A check with the key `[limit, client, 0, ...]`.
pub(super) fn check(limit: u8, client: u8, params: AlgoParams, cost: u64) -> Check {
    let mut key = [0u8; 16];
    key[0] = limit;
    key[1] = client;
    Check {
        name: "t".into(),
        key,
        params,
        cost,
        lockout: None,
        shadow: false,
        lease: 0,
        quota: false,
        leasing: None,
    }
}

/// `dispatch.lua` wrapped so the test sees every key's PTTL right after the
/// write (then PERSISTs it, as the trace tests do). `persisted` serves
/// [`REFUND_PROBE`] too (it comes later in the library).
const DISPATCH_PROBE: &str = r#"
local function persisted(entry, KEYS, ARGV)
  local out = entry(KEYS, ARGV)
  local ttls = {}
  for i, k in ipairs(KEYS) do
    ttls[i] = redis.call('PTTL', k)
    redis.call('PERSIST', k)
  end
  return {out, ttls}
end

local function dispatch_probe(KEYS, ARGV)
  return persisted(dispatch, KEYS, ARGV)
end
"#;

/// `refund.lua` wrapped as [`DISPATCH_PROBE`] wraps `dispatch.lua`: the
/// number of checks given back, and each key's PTTL (then PERSISTed:
/// giving back a lease sets its key's TTL from the driven clock).
const REFUND_PROBE: &str = r#"
local function refund_probe(KEYS, ARGV)
  return persisted(refund, KEYS, ARGV)
end
"#;

fn run_script(
    conn: &mut redis::Connection,
    function: &Function,
    keys: &[String],
    args: &[String],
) -> redis::RedisResult<Value> {
    let mut inv = function.prepare_invoke();
    for k in keys {
        inv.key(k);
    }
    for a in args {
        inv.arg(a);
    }
    inv.invoke(conn)
}

/// Random params of the algorithm `name`, small enough that random
/// requests meet their limits and edges.
fn params_of(name: &str) -> BoxedStrategy<AlgoParams> {
    match name {
        "fixed_window" => (1u64..8, dur(5_000))
            .prop_map(|(l, w)| {
                AlgoParams::FixedWindow(fixed_window::Params::new(l, Window::Fixed(w)).unwrap())
            })
            .boxed(),
        "sliding_window" => (1u64..8, dur(5_000))
            .prop_map(|(l, w)| {
                AlgoParams::SlidingWindow(sliding_window::Params::new(l, w).unwrap())
            })
            .boxed(),
        "sliding_log" => (1u64..8, dur(5_000))
            .prop_map(|(l, w)| AlgoParams::SlidingLog(sliding_log::Params::new(l, w).unwrap()))
            .boxed(),
        "token_bucket" => bucket_params()
            .prop_filter_map("exact", |(r, b, d)| {
                token_bucket::Params::new(r, b, d)
                    .ok()
                    .map(AlgoParams::TokenBucket)
            })
            .boxed(),
        "gcra" => (
            1u64..3,
            1u64..2_000,
            1u64..8,
            prop_oneof![Just(0u64), 0u64..2_000],
        )
            .prop_filter_map("exact", |(c, i, b, d)| {
                gcra::Params::new(rate(c, c * i), b, d)
                    .ok()
                    .map(AlgoParams::Gcra)
            })
            .boxed(),
        "leaky_bucket" => bucket_params()
            .prop_filter_map("exact", |(r, b, d)| {
                leaky_bucket::Params::new(r, b, d)
                    .ok()
                    .map(AlgoParams::LeakyBucket)
            })
            .boxed(),
        "concurrency" => (1u64..4, dur(3_000))
            .prop_map(|(l, lease)| {
                AlgoParams::Concurrency(concurrency::Params::new(l, lease).unwrap())
            })
            .boxed(),
        other => panic!("no algorithm {other}"),
    }
}

/// One limit of the random pool the dispatcher test draws requests from.
fn any_limit() -> impl Strategy<Value = (AlgoParams, Option<LockParams>, bool)> {
    let params = proptest::strategy::Union::new(lua::ALGORITHMS.iter().map(|(n, _)| params_of(n)));
    let lockout = (
        1u64..4,
        dur(5_000),
        dur(20_000),
        1u64..4,
        0u64..10_000,
        0u64..10_000,
    )
        .prop_map(
            |(after, within, duration, escalate, extra, forget_after)| LockParams {
                after,
                within,
                duration,
                escalate,
                max_duration: duration + extra,
                forget_after,
            },
        );
    (
        params,
        proptest::option::weighted(0.5, lockout),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(p, l, shadow)| {
            // docs/configuration/: no lockout on a concurrency limit.
            let l = if matches!(p, AlgoParams::Concurrency(_)) {
                None
            } else {
                l
            };
            (p, l, shadow)
        })
}

/// A request: which of the pool's limits (a bit mask), the client, cost,
/// lease, gap.
type Request = (u8, u8, u64, u64, u64);

fn any_request() -> impl Strategy<Value = Request> {
    (1u8..16, 0u8..2, 0u64..4, 0u64..4, 0u64..3_000)
}

/// The checks of request `r` over `pool`: the limits its mask picks, for
/// its client, at its cost, under its lease id. An odd lease id makes the
/// leasable ones leased (a block of 1 to 9 units), giving back 0 to 6
/// units of a lease taken up to 6 s after the history's start: some
/// still count where they were taken, some lapsed.
fn request_checks(pool: &[(AlgoParams, Option<LockParams>, bool)], r: Request) -> Vec<Check> {
    let (mask, client, cost, lease, gap) = r;
    pool.iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(i, (p, l, shadow))| {
            let c = Check {
                lockout: *l,
                shadow: *shadow,
                lease,
                ..check(i as u8, client, p.clone(), cost)
            };
            if lease % 2 == 0 {
                return c;
            }
            c.leased(Leasing {
                back: (cost + gap) % 7,
                back_at: T0 + gap * (i as u64 + 1),
                ..Leasing::new(1 + (gap + i as u64) % 9, 1_000)
            })
        })
        .collect()
}

/// A pool of 4 random limits and up to 40 requests over it.
fn pool_and_requests() -> impl Strategy<Value = (Pool, Vec<Request>)> {
    (
        proptest::collection::vec(any_limit(), 4),
        proptest::collection::vec(any_request(), 1..40),
    )
}

/// `dispatch.lua` gives the outcomes and writes `decide::decide` gives, on
/// random multi-limit requests over a pool of limits.
///
/// Why one function: the model, the pool of limits and the replay share
/// one proptest case's state (the keys, the driven clock, the reference
/// states), which closures over it read most plainly.
#[test]
fn dispatch_matches_decide() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = RefCell::new(server.connection());
    let probe = Function::of("dispatch_probe");
    let inspect = Function::of("inspect");
    let lockouts = Function::of("lockouts");
    let strategy = pool_and_requests();
    runner(32)
        .run(&strategy, |(pool, requests)| {
            let conn = &mut *conn.borrow_mut();
            redis::cmd("FLUSHALL").query::<()>(conn).unwrap();
            let mut model: HashMap<StoreKey, Model> = HashMap::new();
            let mut index: BTreeMap<StoreKey, Micros> = BTreeMap::new();
            let mut now = T0;
            for (step, &(mask, client, cost, lease, gap)) in requests.iter().enumerate() {
                now += gap;
                let checks = request_checks(&pool, (mask, client, cost, lease, gap));
                let loaded: Vec<Loaded> = checks
                    .iter()
                    .map(|c| {
                        model.get(&c.key).map_or_else(Loaded::default, |m| Loaded {
                            algo: m.algo.as_ref(),
                            lock: m.lock,
                        })
                    })
                    .collect();
                let (want, writes) = decide(&checks, &loaded, now);

                // KEYS: a state key per check, its lockout key when it
                // has a lockout, the index last when any has; `slots` is
                // where each check's two keys are (None: not sent).
                let mut keys = Vec::new();
                let mut slots = Vec::new();
                let mut args = vec![now.to_string(), "1".to_owned(), checks.len().to_string()];
                for c in &checks {
                    let (s, l) = store::keys("t", &c.key);
                    keys.push(s);
                    let state = keys.len() - 1;
                    let lock = c.lockout.map(|_| {
                        keys.push(l);
                        keys.len() - 1
                    });
                    slots.push((state, lock));
                    wire::push_check(&mut args, c);
                }
                let locks = checks.iter().any(|c| c.lockout.is_some());
                if locks {
                    keys.push(store::index_key("t"));
                }
                let reply = run_script(conn, &probe, &keys, &args).unwrap();
                let Value::Array(parts) = reply else {
                    panic!("dispatch reply")
                };
                let (got, _) = wire::outcomes(&parts[0], checks.len()).unwrap();
                prop_assert_eq!(&got, &want, "step {}", step);
                let ttls = ints(&parts[1]);

                // Apply the reference writes; every written key carries a
                // TTL no longer than the reference's (a state's by under 1/64:
                // max_dispatch_pttl), untouched ones none.
                for (i, (c, w)) in checks.iter().zip(&writes).enumerate() {
                    let entry = model.entry(c.key).or_default();
                    let (state, lock) = slots[i];
                    let untouched = |slot: usize| {
                        if ttls[slot] < 0 {
                            Ok(())
                        } else {
                            Err(fail(step, format!("key {slot} untouched but has a TTL")))
                        }
                    };
                    match &w.algo {
                        Some((s, ttl)) => {
                            let kept =
                                ttl_checked_below(ttls[state], *ttl, max_dispatch_pttl(*ttl))
                                    .map_err(|e| fail(step, e))?;
                            entry.algo = kept.then(|| s.clone());
                        }
                        None => untouched(state)?,
                    }
                    match (&w.lock, lock) {
                        (Some((l, ttl)), Some(slot)) => {
                            let kept = ttl_checked(ttls[slot], *ttl).map_err(|e| fail(step, e))?;
                            entry.lock = if kept { *l } else { LockState::default() };
                        }
                        (None, Some(slot)) => untouched(slot)?,
                        (None, None) => {}
                        (Some(_), None) => {
                            return Err(fail(step, "a lockout written for a check without".into()))
                        }
                    }
                    if got[i].lock_started {
                        index.insert(c.key, entry.lock.lu);
                    }
                }
                let live_end = index.values().filter(|lu| **lu > now).max();
                let index_ttl = if locks {
                    ttls[ttls.len() - 1]
                } else {
                    redis::cmd("PTTL")
                        .arg(store::index_key("t"))
                        .query(conn)
                        .unwrap()
                };
                if got.iter().any(|o| o.lock_started) {
                    let end = live_end.expect("a lockout just started");
                    if !ttl_checked(index_ttl, end - now).map_err(|e| fail(step, e))? {
                        index.clear();
                    }
                } else {
                    prop_assert!(index_ttl < 0);
                }

                // The stored state of every key of the request, as the
                // admin API reads it.
                for c in &checks {
                    let (s, l) = store::keys("t", &c.key);
                    let reply =
                        run_script(conn, &inspect, &[s, l], &[c.params.name().to_owned()]).unwrap();
                    let (state, lock) = wire::inspected(&reply, &c.params).unwrap();
                    let m = model.get(&c.key).cloned().unwrap_or_default();
                    prop_assert_eq!(canonical(state), canonical(m.algo), "step {} state", step);
                    prop_assert_eq!(lock, m.lock, "step {} lock", step);
                }
                // GET /lockouts.
                let reply = run_script(
                    conn,
                    &lockouts,
                    &[store::index_key("t")],
                    &[now.to_string()],
                )
                .unwrap();
                let mut live: Vec<(StoreKey, Micros)> = index
                    .iter()
                    .filter(|(_, lu)| **lu > now)
                    .map(|(k, lu)| (*k, *lu - now))
                    .collect();
                live.sort_by_key(|(k, left)| (*left, hex::encode(k)));
                prop_assert_eq!(
                    wire::lockouts(&reply).unwrap(),
                    live,
                    "step {} lockouts",
                    step
                );
            }
            Ok(())
        })
        .unwrap();
}

/// What is stored under `prefix` (the prefix cut off): each key's value, as
/// Redis dumps it. (No key has a TTL between calls: `dispatch_probe`
/// records and removes them.)
fn stored(conn: &mut redis::Connection, prefix: &str) -> BTreeMap<String, Vec<u8>> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query(conn)
        .unwrap();
    keys.into_iter()
        .map(|k| {
            let kind: String = redis::cmd("TYPE").arg(&k).query(conn).unwrap();
            let value: Vec<u8> = if kind == "string" {
                redis::cmd("GET").arg(&k).query(conn).unwrap()
            } else {
                let members: Vec<(String, String)> = redis::cmd("ZRANGE")
                    .arg(&k)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(conn)
                    .unwrap();
                format!("{members:?}").into_bytes()
            };
            (k[prefix.len()..].to_owned(), value)
        })
        .collect()
}

/// One dispatch call for `requests` at `now`, keys under `prefix`, encoded
/// as the store sends it, through `dispatch_probe`: every check's outcome,
/// in order, and the call's `now` (a refund's `at`). `ttls` gets the TTL
/// (ms) each key written by the call got (the prefix cut off); the probe
/// removes them, so nothing expires in real time.
fn dispatch_call(
    conn: &mut redis::Connection,
    prefix: &str,
    requests: &[Vec<Check>],
    now: Micros,
    ttls: &mut BTreeMap<String, i64>,
) -> (Vec<crate::Outcome>, Micros) {
    let keys = store::DispatchKeys {
        prefix,
        requests,
        index: true,
    };
    let names: Vec<String> = keys
        .to_redis_args()
        .into_iter()
        .map(|k| String::from_utf8(k).unwrap())
        .collect();
    let mut inv = Function::of("dispatch_probe").prepare_invoke();
    inv.key(&names);
    inv.arg(wire::DispatchArgs {
        now: Some(now),
        requests,
    });
    let Value::Array(parts) = inv.invoke::<Value>(conn).unwrap() else {
        panic!("dispatch_probe's reply")
    };
    for (name, ttl) in names.iter().zip(ints(&parts[1])) {
        let name = name[prefix.len()..].to_owned();
        match ttl {
            -2 => {
                ttls.remove(&name);
            }
            -1 => {}
            t => {
                ttls.insert(name, t);
            }
        }
    }
    let checks = requests.iter().map(Vec::len).sum();
    wire::outcomes(&parts[0], checks).unwrap()
}

#[test]
fn a_batch_decides_as_its_requests_would_one_by_one() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = RefCell::new(server.connection());
    // Rounds of requests over a pool of 4 limits and 2 clients (so keys
    // repeat within a batch), each round one call at one now.
    let strategy = (
        proptest::collection::vec(any_limit(), 4),
        proptest::collection::vec(
            (proptest::collection::vec(any_request(), 1..12), 0u64..3_000),
            1..10,
        ),
    );
    runner(32)
        .run(&strategy, |(pool, rounds)| {
            batch_as_one_by_one(&mut conn.borrow_mut(), &pool, &rounds)
        })
        .unwrap();
}

/// A lone call's state keeps the TTL text its limit last wrote while the
/// TTL needed is less than 1/64 shorter (lua/dispatch.lua, lone()): never
/// shorter than needed, and a fresh text once it would be 1/64 too long.
#[test]
fn a_lone_call_reuses_a_ttl_up_to_a_64th_longer() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let mut conn = server.connection();
    let hour = 3600 * SECOND;
    let params =
        AlgoParams::FixedWindow(fixed_window::Params::new(1000, Window::Fixed(hour)).unwrap());
    let request = vec![vec![check(1, 1, params, 1)]];
    let start = T0 - T0 % hour;
    // (now, the PTTL needed, the PTTL set)
    for (now, need, set) in [
        (start + 1000, 3_599_999, 3_599_999),
        // 10 s later: 10 s shorter, under 1/64 of an hour (56 s)
        (start + 10 * SECOND + 1000, 3_589_999, 3_599_999),
        // 100 s later: a fresh text
        (start + 100 * SECOND + 1000, 3_499_999, 3_499_999),
    ] {
        let mut ttls = BTreeMap::new();
        let (got, _) = dispatch_call(&mut conn, "a", &request, now, &mut ttls);
        assert_eq!(got[0].status, crate::Status::Allowed);
        let pttl = *ttls.values().next().expect("the state written");
        // Redis counts the TTL down from the write until PTTL reads it: a
        // millisecond or two on a busy machine (the texts this tells apart
        // differ by 10 s).
        assert!(
            (set - 1000..=set).contains(&pttl),
            "at {}: PTTL {pttl}, set {set} (needs {need})",
            now - start
        );
        assert!(pttl <= max_dispatch_pttl((need as u64) * 1000));
    }
}

/// One `probe.lua` call for `checks` at `now`, keys under `prefix`,
/// encoded as the store sends it: every check's outcome, in order.
fn probe_call(
    conn: &mut redis::Connection,
    prefix: &str,
    checks: &[Check],
    now: Micros,
) -> Vec<crate::Outcome> {
    let requests = [checks];
    let mut inv = Function::of("probe").prepare_invoke();
    inv.key(store::DispatchKeys {
        prefix,
        requests: &requests,
        index: false,
    });
    inv.arg(wire::DispatchArgs {
        now: Some(now),
        requests: &requests,
    });
    let reply: Value = inv.invoke(conn).unwrap();
    wire::outcomes(&reply, checks.len()).unwrap().0
}

/// `probe.lua` answers what `dispatch.lua` then answers (each request
/// probed, then decided), strikes and lockouts that would start included,
/// on random multi-limit requests; and it leaves every key, value and TTL
/// as it was (`dispatch_probe` PERSISTs what it writes, so no key has a
/// TTL between calls). Redis knows it as `no-writes`.
#[test]
fn probe_answers_what_dispatch_then_does_and_writes_nothing() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = RefCell::new(server.connection());
    let strategy = pool_and_requests();
    runner(32)
        .run(&strategy, |(pool, requests)| {
            let conn = &mut *conn.borrow_mut();
            redis::cmd("FLUSHALL").query::<()>(conn).unwrap();
            let mut ttls = BTreeMap::new();
            let mut now = T0;
            for (step, &r) in requests.iter().enumerate() {
                now += r.4;
                let checks = request_checks(&pool, r);
                let before = stored(conn, "t");
                let probed = probe_call(conn, "t", &checks, now);
                prop_assert_eq!(&stored(conn, "t"), &before, "step {} wrote", step);
                for key in before.keys() {
                    let pttl: i64 = redis::cmd("PTTL")
                        .arg(format!("t{key}"))
                        .query(conn)
                        .unwrap();
                    prop_assert_eq!(pttl, -1, "step {}: {} got a TTL", step, key);
                }
                let (decided, _) = dispatch_call(conn, "t", &[checks], now, &mut ttls);
                prop_assert_eq!(probed, decided, "step {}", step);
            }
            Ok(())
        })
        .unwrap();
    let mut conn = conn.into_inner();
    let listed: Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(&test_library().name)
        .query(&mut conn)
        .unwrap();
    let text = format!("{listed:?}");
    let probe = test_library().function("probe");
    let at = text.find(&probe).expect("the probe is registered");
    let flags = &text[at..text[at..].find("name").map_or(text.len(), |n| at + n)];
    assert!(flags.contains("no-writes"), "{text}");
}

/// The pool of limits [`a_batch_decides_as_its_requests_would_one_by_one`]
/// draws from.
type Pool = Vec<(AlgoParams, Option<LockParams>, bool)>;

/// Each round's requests (prefix `a`) decided in one call, and one by one
/// (prefix `b`): the same answers, keys, values and TTLs.
fn batch_as_one_by_one(
    conn: &mut redis::Connection,
    pool: &Pool,
    rounds: &[(Vec<Request>, u64)],
) -> Result<(), TestCaseError> {
    redis::cmd("FLUSHALL").query::<()>(conn).unwrap();
    let (mut ttl_a, mut ttl_b) = (BTreeMap::new(), BTreeMap::new());
    let mut now = T0;
    // The longest a round took from its batch's start to the end of its
    // one-by-one calls, so far.
    let mut spread = Duration::ZERO;
    for (round, (requests, gap)) in rounds.iter().enumerate() {
        now += gap;
        let requests: Vec<Vec<Check>> = requests.iter().map(|&r| request_checks(pool, r)).collect();
        let t0 = Instant::now();
        let (batch, _) = dispatch_call(conn, "a", &requests, now, &mut ttl_a);
        let mut single = Vec::new();
        for r in &requests {
            let r = std::slice::from_ref(r);
            single.extend(dispatch_call(conn, "b", r, now, &mut ttl_b).0);
        }
        // A key's PTTL is read at the end of a call that touched it, in
        // real time, and a key read but not written this round was
        // written in an earlier one: "a"'s and "b"'s copies were written
        // and read apart by up to this round's or an earlier round's span
        // from the batch to the last one-by-one call (a loaded machine
        // makes that several ms: TTL 1 against 3 was seen).
        spread = spread.max(t0.elapsed());
        prop_assert_eq!(&batch, &single, "round {}: the answers", round);
        // The same keys, values and TTLs (give or take the millisecond a
        // TTL may lose before the probe reads it, `spread`, and the 1/64
        // a lone call's TTL may add: max_dispatch_pttl).
        prop_assert_eq!(stored(conn, "a"), stored(conn, "b"), "round {}", round);
        prop_assert_eq!(
            ttl_a.keys().collect::<Vec<_>>(),
            ttl_b.keys().collect::<Vec<_>>()
        );
        let slack = 1 + spread.as_millis() as i64;
        for (key, t) in &ttl_a {
            prop_assert!(
                (t - ttl_b[key]).abs() <= slack + t.max(&ttl_b[key]) / 63,
                "round {}: {} TTL {} vs {}",
                round,
                key,
                t,
                ttl_b[key]
            );
        }
    }
    Ok(())
}

/// Every entry point answers a call with the wrong number of keys or
/// arguments with a clear error reply, and runs nothing.
///
/// Why one function: one table, a row per malformed call.
#[test]
fn arity_errors_are_clear() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let mut conn = server.connection();
    let err = |r: redis::RedisResult<Value>| -> String {
        let e = r.expect_err("an error reply");
        e.to_string()
    };
    let dispatch = Function::of("dispatch");
    let keys = |n: usize| -> Vec<String> { (0..n).map(|i| format!("k{i}")).collect() };
    let s = |v: &[&str]| -> Vec<String> { v.iter().map(|x| x.to_string()).collect() };

    // (KEYS, ARGV, what the error says)
    let cases: [(usize, &[&str], &str); 15] = [
        (
            2,
            &["1", "1", "1", "fixed_window 0 1 5 9"],
            "dispatch: the checks need 1 KEYS",
        ),
        (1, &["1", "1"], "ARGV must start with now, r, n"),
        (
            1,
            &["1", "1", "1", "fixed_window 0 1 5"],
            "fixed_window (limit, window): expected 2 params",
        ),
        (
            1,
            &["1", "1", "1", "fixed_window 0 1 5 9 7"],
            "takes 5 words here, got 6",
        ),
        (
            1,
            &["1", "1", "1", "fixed_window 0 1 5 9", "7"],
            "1 requests take 4 arguments, got 5",
        ),
        (1, &["1", "1", "1", "nope 0 1"], "unknown algorithm nope"),
        (
            1,
            &["1", "1", "1", "gcra 0 -3 1 1 0"],
            "cost: expected a non-negative integer, got -3",
        ),
        (
            1,
            &["1", "1", "1", "gcra 16 1 1 1 0"],
            "flags must be 0 to 15, got 16",
        ),
        (
            1,
            &["1", "1", "1", "sliding_log 8 1 1 1 5", "0", "0"],
            "sliding_log takes no leases",
        ),
        (
            1,
            &["1", "1", "1", "gcra 8 1 1 1 0"],
            "lease size: expected a non-negative integer",
        ),
        (
            1,
            &["1", "1", "1", "gcra 8 1 1 1 0 5", "0"],
            "check 1: the lease to give back is missing",
        ),
        (
            1,
            &["1", "1", "1", "gcra 8 1 1 1 0 5", "x", "0"],
            "give-back units: expected a non-negative integer",
        ),
        (
            1,
            &["1", "1", "1", "gcra 4 1 1 1 0"],
            "the KEYS end before the quota key of check 1",
        ),
        (
            3,
            &["1", "1", "1", "gcra 2 1 1 1 0 1 1"],
            "lockout (after, within",
        ),
        (
            1,
            &["1", "1", "1", "concurrency 0 1 1 1000"],
            "the lease id is missing",
        ),
    ];
    for (n_keys, args, want) in cases {
        let e = err(run_script(&mut conn, &dispatch, &keys(n_keys), &s(args)));
        assert!(e.contains(want), "{args:?}: {e}");
    }
    // A failed call writes no string state.
    let e = err(run_script(
        &mut conn,
        &dispatch,
        &keys(2),
        &s(&["1", "2", "1", "gcra 0 1 1 1 0", "1", "nope 0 1"]),
    ));
    assert!(e.contains("unknown algorithm nope"), "{e}");
    let n: i64 = redis::cmd("EXISTS").arg("k0").query(&mut conn).unwrap();
    assert_eq!(n, 0, "the first request's state was not written");

    for (entry, n_keys, args, want) in [
        ("release", 2, s(&["1", "1"]), "release: expected 1 KEYS"),
        ("release", 1, s(&["1"]), "release: expected 1 KEYS"),
        ("inspect", 1, s(&["gcra"]), "inspect: expected 2 KEYS"),
        (
            "inspect",
            2,
            s(&["nope"]),
            "inspect: unknown algorithm nope",
        ),
        ("lockouts", 1, s(&[]), "lockouts: expected 1 KEYS"),
        (
            "refund",
            1,
            s(&["1"]),
            "refund: ARGV must start with at, now",
        ),
        (
            "refund",
            1,
            s(&["x", "1", "fixed_window 0 1 5 9"]),
            "refund: at: expected a non-negative integer, got x",
        ),
        (
            "refund",
            1,
            s(&["1", "1", "fixed_window 0 1 5 9", "7"]),
            "refund: 1 keys and 4 arguments do not make whole checks",
        ),
        (
            "refund",
            1,
            s(&["1", "1", "concurrency 0 1 3 9"]),
            "refund: the lease of check 1 is missing",
        ),
        // Two keys, one spec.
        (
            "refund",
            2,
            s(&["1", "1", "fixed_window 0 1 5 9"]),
            "refund: 2 keys, but the arguments end at key 2",
        ),
        // A quota flag whose quota key is missing.
        (
            "refund",
            1,
            s(&["1", "1", "fixed_window 4 1 5 9"]),
            "refund: 1 keys and 3 arguments do not make whole checks",
        ),
        (
            "probe",
            1,
            s(&["1", "2", "1", "fixed_window 0 1 5 9"]),
            "probe: ARGV must start with now, 1, n",
        ),
        (
            "probe",
            2,
            s(&["1", "1", "1", "fixed_window 0 1 5 9"]),
            "probe: the checks need 1 KEYS",
        ),
        (
            "probe",
            1,
            s(&["1", "1", "1", "fixed_window 0 1 5 9", "7"]),
            "probe: 1 checks take 4 arguments, got 5",
        ),
        (
            "probe",
            0,
            s(&["1", "1", "1", "fixed_window 0 1 5 9"]),
            "probe: no KEYS",
        ),
    ] {
        let script = Function::of(entry);
        let e = err(run_script(&mut conn, &script, &keys(n_keys), &args));
        assert!(e.contains(want), "{e}");
        // Each names its entry.
        assert!(e.contains(entry), "{e}");
    }
    // An algorithm file on its own checks its params too.
    let script = Function::of("algo_probe");
    let e = err(run_script(
        &mut conn,
        &script,
        &keys(1),
        &s(&["token_bucket", "1", "1", "0", "1", "1"]),
    ));
    assert!(
        e.contains("token_bucket (unit, drain, burst, max_delay): expected 4 params"),
        "{e}"
    );
}

// ---- refunds (Redis Cluster: lua/refund.lua) -------------------------------

/// One refund call through `refund_probe` for `checks` (allowed by one
/// dispatch call whose `now` was `at`), keys under `prefix`, its `ARGV`
/// written by `wire::RefundArgs` as the cluster store writes it: how many
/// checks it gave back, and each key's PTTL right after it.
fn refund_call(
    conn: &mut redis::Connection,
    prefix: &str,
    checks: &[&Check],
    at: Micros,
    now: Option<Micros>,
) -> (i64, Vec<i64>) {
    let keys: Vec<String> = checks
        .iter()
        .map(|c| store::keys(prefix, &c.key).0)
        .collect();
    let mut inv = Function::of("refund_probe").prepare_invoke();
    inv.key(&keys);
    inv.arg(wire::RefundArgs { at, now, checks });
    let Value::Array(parts) = inv.invoke::<Value>(conn).unwrap() else {
        panic!("refund_probe's reply")
    };
    let Value::Int(n) = parts[0] else {
        panic!("refund's reply: {:?}", parts[0])
    };
    (n, ints(&parts[1]))
}

/// Decides the one check `c` at `now`, keys under `prefix`: its outcome and
/// the call's `now`.
fn take(
    conn: &mut redis::Connection,
    prefix: &str,
    c: &Check,
    now: Micros,
) -> (crate::Outcome, Micros) {
    let (o, at) = dispatch_call(conn, prefix, &[vec![c.clone()]], now, &mut BTreeMap::new());
    (o[0], at)
}

/// The state stored for `c` under the prefix `t`.
pub(super) fn state_of(conn: &mut redis::Connection, c: &Check) -> Option<AlgoState> {
    canonical(raw_state(conn, &store::keys("t", &c.key).0, &c.params))
}

/// The refunded request's lease id: none of the history's (`any_request`'s
/// are below 4), so its call acquires a lease rather than renewing one.
const REFUNDED_LEASE: u64 = 99;

/// The differential test of one algorithm's refund: the keys under `a` and
/// `b` get the same random calls, except that `a` also gets, at t, a call
/// that is allowed and then given back (`at` = that call's `now`, the
/// refund's `now` t or a little later), as the cluster store does when
/// another slot rejects the request. Every later outcome must be the same
/// on both: the refunded request consumed nothing.
///
/// Here no call comes between the taking and the refund, and the clock only
/// moves forward; then every algorithm's refund is exact:
/// - fixed and sliding window: the units come off the count of the window
///   that held `at`, still the stored one;
/// - sliding_log: the entry at `at` shrinks by the cost (or goes): the one
///   the call made or merged into;
/// - token and leaky bucket: draining is max(level - elapsed * drain, 0),
///   which composes, and max(max(L + k - x, 0) - k, 0) = max(L - x, 0) for
///   the level L at t, the units k and the drain x until the refund's
///   `now`: what drained of the units is not given back twice;
/// - gcra: max(tat' - T * cost, now) = max(tat, t, now), and every later
///   check reads max(tat, now');
/// - concurrency: the lease the call acquired (a fresh id) is released.
///
/// With calls in between (the cluster's refund comes after other requests
/// on the key may have been decided), no refund can be exact; the tests
/// after this one check the documented rules there: a window that rolled gets
/// nothing back, a bucket never goes below empty, gcra's tat never before
/// now. (A clock that steps back is not exact either: the call moved a
/// bucket's `ts` forward, the refund cannot move it back.)
fn refund_is_as_if_never_taken(name: &str) {
    const CASES: u32 = 32;
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = RefCell::new(server.connection());
    let refunded = Cell::new(0);
    let strategy = (
        params_of(name),
        proptest::collection::vec(any_request(), 0..10),
        (prop_oneof![Just(0u64), 0u64..3_000], 0u64..4),
        prop_oneof![Just(0u64), dur(3_000)],
        proptest::collection::vec(any_request(), 1..12),
    );
    runner(CASES)
        .run(
            &strategy,
            |(params, history, (gap, cost), later, future)| {
                let conn = &mut *conn.borrow_mut();
                redis::cmd("FLUSHALL").query::<()>(conn).unwrap();
                // A request's cost and lease, on both keys at `now`.
                let both = |conn: &mut redis::Connection, r: &Request, now: Micros| {
                    let &(_, _, cost, lease, _) = r;
                    let c = Check {
                        lease,
                        ..check(0, 0, params.clone(), cost)
                    };
                    (take(conn, "a", &c, now).0, take(conn, "b", &c, now).0)
                };
                let mut now = T0;
                for (step, r) in history.iter().enumerate() {
                    now += r.4;
                    let (a, b) = both(conn, r, now);
                    prop_assert_eq!(a, b, "history step {}", step);
                }
                now += gap;
                let taken = Check {
                    lease: REFUNDED_LEASE,
                    ..check(0, 0, params.clone(), cost)
                };
                let (o, at) = take(conn, "a", &taken, now);
                prop_assert_eq!(at, now, "dispatch reports the now it decided at");
                // (A rejected call took nothing: there is nothing to give back.)
                if o.status == Status::Allowed {
                    let (n, _) = refund_call(conn, "a", &[&taken], at, Some(now + later));
                    prop_assert_eq!(n, 1);
                    refunded.set(refunded.get() + 1);
                }
                now += later;
                for (step, r) in future.iter().enumerate() {
                    now += r.4;
                    let (a, b) = both(conn, r, now);
                    prop_assert_eq!(
                        a,
                        b,
                        "step {} after the refund of {:?} taken at T0 + {}, refunded {} later",
                        step,
                        o,
                        at - T0,
                        later
                    );
                }
                Ok(())
            },
        )
        .unwrap();
    assert!(
        refunded.get() >= CASES / 4,
        "only {} of {CASES} cases reached a refund",
        refunded.get()
    );
}

#[test]
fn fixed_window_refund_is_as_if_never_taken() {
    refund_is_as_if_never_taken("fixed_window");
}

#[test]
fn sliding_window_refund_is_as_if_never_taken() {
    refund_is_as_if_never_taken("sliding_window");
}

#[test]
fn sliding_log_refund_is_as_if_never_taken() {
    refund_is_as_if_never_taken("sliding_log");
}

#[test]
fn token_bucket_refund_is_as_if_never_taken() {
    refund_is_as_if_never_taken("token_bucket");
}

#[test]
fn leaky_bucket_refund_is_as_if_never_taken() {
    refund_is_as_if_never_taken("leaky_bucket");
}

#[test]
fn gcra_refund_is_as_if_never_taken() {
    refund_is_as_if_never_taken("gcra");
}

#[test]
fn concurrency_refund_is_as_if_never_taken() {
    refund_is_as_if_never_taken("concurrency");
}

/// Units taken in a window that has rolled over by the refund are not given
/// to the new window (which never counted them); a sliding window still
/// weighs its previous window's units, so they come off that count.
#[test]
fn a_refund_after_the_window_rolled_gives_the_new_window_nothing() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = &mut server.connection();
    // T0 is a multiple of 1000: windows [T0, T0 + 1000), [T0 + 1000, ...).
    let c = check(0, 0, fixed(3, 1_000), 2);
    let one = Check {
        cost: 1,
        ..c.clone()
    };
    let (o, at) = take(conn, "t", &c, T0 + 900);
    assert_eq!((o.status, o.remaining), (Status::Allowed, 1));
    assert_eq!(take(conn, "t", &one, T0 + 1_000).0.remaining, 2);
    assert_eq!(refund_call(conn, "t", &[&c], at, Some(T0 + 1_010)).0, 1);
    assert_eq!(
        state_of(conn, &c),
        Some(AlgoState::FixedWindow(fixed_window::State {
            ws: T0 + 1_000,
            n: 1
        }))
    );
    let o = take(conn, "t", &c, T0 + 1_010).0;
    assert_eq!((o.status, o.remaining), (Status::Allowed, 0));

    let sw = |k: u8| {
        check(
            k,
            0,
            AlgoParams::SlidingWindow(sliding_window::Params::new(4, 1_000).unwrap()),
            3,
        )
    };
    // One window on: off the previous count.
    let (_, at) = take(conn, "t", &sw(1), T0 + 900);
    let o = take(conn, "t", &Check { cost: 1, ..sw(1) }, T0 + 1_000).0;
    assert_eq!(o.status, Status::Allowed);
    refund_call(conn, "t", &[&sw(1)], at, Some(T0 + 1_000));
    assert_eq!(
        state_of(conn, &sw(1)),
        Some(AlgoState::SlidingWindow(sliding_window::State {
            ws: T0 + 1_000,
            cur: 1,
            prev: 0
        }))
    );
    // Two windows on, they weigh nothing: nothing changes.
    let (_, at) = take(conn, "t", &sw(2), T0 + 900);
    take(conn, "t", &Check { cost: 1, ..sw(2) }, T0 + 2_000);
    refund_call(conn, "t", &[&sw(2)], at, Some(T0 + 2_000));
    assert_eq!(
        state_of(conn, &sw(2)),
        Some(AlgoState::SlidingWindow(sliding_window::State {
            ws: T0 + 2_000,
            cur: 1,
            prev: 0
        }))
    );
}

/// A refund takes the units off the level drained to its `now`, never
/// below empty: units that drained before the refund came are no longer
/// held. (The next check would clamp a level below empty, but it is no
/// state the algorithm has: the Rust side reads levels as unsigned, and
/// `inspect` would fail on it.)
#[test]
fn a_bucket_refund_never_goes_below_empty() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = &mut server.connection();
    // 1 unit a millisecond, 5 at once.
    for params in [
        AlgoParams::TokenBucket(token_bucket::Params::new(rate(1, 1_000), 5, 0).unwrap()),
        AlgoParams::LeakyBucket(leaky_bucket::Params::new(rate(1, 1_000), 5, 0).unwrap()),
    ] {
        let name = params.name();
        let c = check(0, 0, params, 3);
        redis::cmd("FLUSHALL").query::<()>(conn).unwrap();
        let (o, at) = take(conn, "t", &c, T0);
        assert_eq!((o.status, o.remaining), (Status::Allowed, 2), "{name}");
        // 2.5 of the 3 units have drained when the refund comes.
        refund_call(conn, "t", &[&c], at, Some(T0 + 2_500));
        let level = match state_of(conn, &c) {
            Some(AlgoState::TokenBucket(s)) => (s.d, s.ts),
            Some(AlgoState::LeakyBucket(s)) => (s.lv, s.ts),
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(level, (0, T0 + 2_500), "{name}: empty, not below");
        // A full burst, and not one more.
        let burst = Check {
            cost: 5,
            ..c.clone()
        };
        let o = take(conn, "t", &burst, T0 + 2_500).0;
        assert_eq!((o.status, o.remaining), (Status::Allowed, 0), "{name}");
        let one = Check { cost: 1, ..c };
        assert_eq!(
            take(conn, "t", &one, T0 + 2_500).0.status,
            Status::Rejected,
            "{name}"
        );
    }
}

/// GCRA's refund moves the theoretical arrival time back by the cells,
/// never before the refund's `now`, and leaves a tat already past alone.
#[test]
fn a_gcra_refund_never_moves_tat_before_now() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = &mut server.connection();
    // A cell every 1000 µs, 3 at once.
    let c = check(
        0,
        0,
        AlgoParams::Gcra(gcra::Params::new(rate(1, 1_000), 3, 0).unwrap()),
        2,
    );
    let one = Check {
        cost: 1,
        ..c.clone()
    };
    let tat = |conn: &mut redis::Connection| match state_of(conn, &c) {
        Some(AlgoState::Gcra(s)) => s.tat,
        other => panic!("{other:?}"),
    };
    let (_, at) = take(conn, "t", &c, T0);
    take(conn, "t", &one, T0);
    assert_eq!(tat(conn), T0 + 3_000);
    refund_call(conn, "t", &[&c], at, Some(T0));
    assert_eq!(tat(conn), T0 + 1_000, "back by the two cells");
    refund_call(conn, "t", &[&c], at, Some(T0 + 500));
    assert_eq!(tat(conn), T0 + 500, "back to now, not before");
    refund_call(conn, "t", &[&c], at, Some(T0 + 600));
    assert_eq!(tat(conn), T0 + 500, "a tat already past stays");
    // A full burst, and not one more.
    let burst = Check {
        cost: 3,
        ..c.clone()
    };
    assert_eq!(take(conn, "t", &burst, T0 + 600).0.status, Status::Allowed);
    assert_eq!(take(conn, "t", &one, T0 + 600).0.status, Status::Rejected);
}

/// A sliding log's refund takes the cost off the one entry made at `at`:
/// the others stay as they are.
#[test]
fn a_sliding_log_refund_shrinks_only_the_entry_at_at() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = &mut server.connection();
    let log = AlgoParams::SlidingLog(sliding_log::Params::new(20, 10_000).unwrap());
    let with = |cost: u64| check(0, 0, log.clone(), cost);
    let entries = |conn: &mut redis::Connection| -> Vec<(Micros, u64)> {
        match state_of(conn, &with(1)) {
            Some(AlgoState::SlidingLog(s)) => s.entries.iter().map(|e| (e.t - T0, e.n)).collect(),
            other => panic!("{other:?}"),
        }
    };
    take(conn, "t", &with(2), T0);
    let (_, at) = take(conn, "t", &with(3), T0 + 10);
    // One instant's units are one entry.
    take(conn, "t", &with(1), T0 + 10);
    take(conn, "t", &with(1), T0 + 20);
    assert_eq!(entries(conn), [(0, 2), (10, 4), (20, 1)]);
    assert_eq!(refund_call(conn, "t", &[&with(1)], at, Some(T0 + 30)).0, 1);
    assert_eq!(entries(conn), [(0, 2), (10, 3), (20, 1)]);
    refund_call(conn, "t", &[&with(3)], at, Some(T0 + 30));
    assert_eq!(entries(conn), [(0, 2), (20, 1)], "the entry gone");
    // No entry at `at`: nothing to give back.
    refund_call(conn, "t", &[&with(3)], T0 + 5, Some(T0 + 30));
    refund_call(conn, "t", &[&with(3)], at, Some(T0 + 30));
    assert_eq!(entries(conn), [(0, 2), (20, 1)]);
    // Never more than the entry holds, never another entry.
    refund_call(conn, "t", &[&with(3)], T0, Some(T0 + 30));
    assert_eq!(entries(conn), [(20, 1)]);
}

/// A concurrency refund releases the request's own lease; another stays.
#[test]
fn a_concurrency_refund_releases_exactly_its_lease() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = &mut server.connection();
    let params = AlgoParams::Concurrency(concurrency::Params::new(3, 10_000).unwrap());
    let lease = |id: u64| Check {
        lease: id,
        ..check(0, 0, params.clone(), 1)
    };
    let (_, at) = take(conn, "t", &lease(1), T0);
    take(conn, "t", &lease(2), T0 + 1);
    assert_eq!(refund_call(conn, "t", &[&lease(1)], at, Some(T0 + 2)).0, 1);
    assert_eq!(
        state_of(conn, &lease(1)),
        Some(AlgoState::Concurrency(concurrency::State {
            leases: vec![concurrency::Lease {
                id: 2,
                exp: T0 + 10_001
            }]
        }))
    );
    // Two slots free again, not three.
    for id in [3, 4] {
        assert_eq!(
            take(conn, "t", &lease(id), T0 + 3).0.status,
            Status::Allowed
        );
    }
    assert_eq!(
        take(conn, "t", &lease(5), T0 + 3).0.status,
        Status::Rejected
    );
}

/// A refund whose arguments do not fit its keys must change nothing, as
/// dispatch's argument errors do: a Redis function's writes stay when it
/// fails afterwards, and the cluster store takes an error reply for "the
/// units stay taken".
#[test]
fn a_refund_with_wrong_arguments_changes_nothing() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = &mut server.connection();
    let c = check(0, 0, fixed(3, 60 * SECOND), 2);
    let (_, at) = take(conn, "t", &c, T0);
    let taken = state_of(conn, &c);
    let (key, other) = (store::keys("t", &c.key).0, store::keys("t", &[9; 16]).0);
    let mut args = vec![at.to_string(), at.to_string()];
    wire::push_check(&mut args, &c);
    let refund = Function::of("refund");
    // One argument too many; one spec for two keys.
    let extra = [&args[..], &["7".to_owned()]].concat();
    for (keys, args) in [(vec![key.clone()], extra), (vec![key, other], args)] {
        assert!(run_script(conn, &refund, &keys, &args).is_err());
        assert_eq!(state_of(conn, &c), taken, "{args:?}");
    }
}

/// One limit of each algorithm, `limit` at once (and per `d`), its
/// durations `d`.
fn one_of_each(limit: u64, d: Micros) -> [AlgoParams; 7] {
    [
        fixed(limit, d),
        AlgoParams::SlidingWindow(sliding_window::Params::new(limit, d).unwrap()),
        AlgoParams::SlidingLog(sliding_log::Params::new(limit, d).unwrap()),
        AlgoParams::TokenBucket(token_bucket::Params::new(rate(limit, d), limit, 0).unwrap()),
        AlgoParams::Gcra(gcra::Params::new(rate(limit, d), limit, 0).unwrap()),
        AlgoParams::LeakyBucket(leaky_bucket::Params::new(rate(limit, d), limit, 0).unwrap()),
        AlgoParams::Concurrency(concurrency::Params::new(limit, d).unwrap()),
    ]
}

/// A check of each algorithm of [`one_of_each`], its own key each, `cost`
/// units, lease 1.
fn one_check_of_each(limit: u64, d: Micros, cost: u64) -> Vec<Check> {
    one_of_each(limit, d)
        .into_iter()
        .enumerate()
        .map(|(i, p)| Check {
            lease: 1,
            ..check(i as u8, 0, p, cost)
        })
        .collect()
}

/// A refund keeps the key's TTL: a string state keeps it as it is (KEEPTTL),
/// a sorted set's is never lengthened. The refund's `now` is a second after
/// the taking, so a TTL computed afresh would show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_keeps_the_keys_ttl() {
    let _busy = CPU.read().await;
    let server = RedisServer::start();
    let store = local_store(&server);
    let mut conn = server.connection();
    for first in one_check_of_each(10, 60 * SECOND, 1) {
        let name = first.params.name();
        // Two requests, so that the refund of the second leaves a state.
        let second = Check {
            lease: 2,
            ..first.clone()
        };
        assert_eq!(one(&store, &first, T0).await.status, Status::Allowed);
        assert_eq!(one(&store, &second, T0 + 1).await.status, Status::Allowed);
        let key = store::keys("tg", &second.key).0;
        let before: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap();
        let (_, after) = refund_call(&mut conn, "tg", &[&second], T0 + 1, Some(T0 + SECOND));
        let after = after[0];
        assert!(
            0 < after && after <= before,
            "{name}: PTTL {before} ms before the refund, {after} after"
        );
        if name != "concurrency" {
            // (Releasing a lease sets the TTL to the last lease left's.)
            assert!(
                before - after < 500,
                "{name}: PTTL {before} ms, then {after}"
            );
        }
    }
}

/// A refund that comes after its key is gone (expired, or reset) creates
/// nothing: no state that a later request would count, no key without a
/// TTL.
#[test]
fn a_refund_of_a_missing_key_creates_nothing() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = &mut server.connection();
    for c in one_check_of_each(3, SECOND, 2) {
        let name = c.params.name();
        let key = store::keys("t", &c.key).0;
        let (o, at) = take(conn, "t", &c, T0);
        assert_eq!(o.status, Status::Allowed, "{name}");
        redis::cmd("DEL").arg(&key).query::<()>(conn).unwrap();
        assert_eq!(refund_call(conn, "t", &[&c], at, Some(T0 + 1)).0, 1);
        let exists: i64 = redis::cmd("EXISTS").arg(&key).query(conn).unwrap();
        assert_eq!(exists, 0, "{name}: the refund created the key");
        // The next request counts as on a fresh key.
        let third = Check { lease: 3, ..c };
        assert_eq!(
            take(conn, "t", &third, T0 + 2).0,
            take(conn, "u", &third, T0 + 2).0,
            "{name}"
        );
    }
}

/// One refund call gives back every check it names (all of one slot), its
/// `ARGV` as `wire::RefundArgs` writes it: a lease id beyond 2^53 arrives as
/// its digits, and `now: None` is the store's clock.
#[test]
fn one_refund_call_gives_back_every_check_it_names() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = &mut server.connection();
    let request = |lease: u64| {
        vec![
            check(0, 0, fixed(3, 60 * SECOND), 2),
            Check {
                lease,
                ..check(
                    1,
                    0,
                    AlgoParams::Concurrency(concurrency::Params::new(1, 60 * SECOND).unwrap()),
                    1,
                )
            },
            check(
                2,
                0,
                AlgoParams::TokenBucket(token_bucket::Params::new(rate(1, SECOND), 4, 0).unwrap()),
                3,
            ),
        ]
    };
    let mut ttls = BTreeMap::new();
    let taken = request(u64::MAX);
    let (o, at) = dispatch_call(conn, "t", std::slice::from_ref(&taken), T0, &mut ttls);
    assert!(o.iter().all(|o| o.status == Status::Allowed), "{o:?}");
    let all: Vec<&Check> = taken.iter().collect();
    assert_eq!(refund_call(conn, "t", &all, at, Some(at)).0, 3);
    // Another request (another lease) answers as on fresh keys: the lease
    // is free again, the window and the bucket have their units back.
    let again = [request(7)];
    assert_eq!(
        dispatch_call(conn, "t", &again, T0, &mut ttls).0,
        dispatch_call(conn, "u", &again, T0, &mut ttls).0
    );
    // Redis TIME as the clock: a window's refund goes by `at` alone.
    assert_eq!(refund_call(conn, "t", &all[..1], at, None).0, 1);
    assert_eq!(
        state_of(conn, &taken[0]),
        Some(AlgoState::FixedWindow(fixed_window::State { ws: T0, n: 0 }))
    );
}

// ---- the store -------------------------------------------------------------

const TIMEOUT: Duration = Duration::from_millis(100);

pub(super) fn fixed(limit: u64, window: Micros) -> AlgoParams {
    AlgoParams::FixedWindow(fixed_window::Params::new(limit, Window::Fixed(window)).unwrap())
}

/// A store with the test clock and a generous deadline (the functional
/// tests run beside CPU-heavy ones).
pub(super) fn local_store(server: &RedisServer) -> RedisStore {
    RedisStore::new(&server.url(), "tg", Duration::from_secs(2), true).unwrap()
}

/// A store with the tight deadline [`TIMEOUT`], for the timing tests.
fn timed_store(server: &RedisServer) -> RedisStore {
    RedisStore::new(&server.url(), "tg", TIMEOUT, true).unwrap()
}

/// Decides one check.
async fn one(store: &RedisStore, c: &Check, now: Micros) -> crate::Outcome {
    store
        .decide(std::slice::from_ref(c), now)
        .await
        .expect("a decision")[0]
}

/// Calls `decide` until it succeeds or `within` passes.
async fn until_ok(
    store: &RedisStore,
    checks: &[Check],
    within: Duration,
) -> Result<(), StoreError> {
    let deadline = Instant::now() + within;
    loop {
        match store.decide(checks, T0).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejecting_limit_consumes_nothing_anywhere() {
    let _busy = CPU.read().await;
    let server = RedisServer::start();
    let store = local_store(&server);
    let tb = AlgoParams::TokenBucket(token_bucket::Params::new(rate(10, SECOND), 5, 0).unwrap());
    let full = check(1, 0, fixed(1, 60 * SECOND), 1);
    let checks = [
        check(0, 0, tb.clone(), 2),
        full.clone(),
        check(2, 0, fixed(9, SECOND), 3),
    ];
    // Fill the second limit on its own.
    let o = store.decide(std::slice::from_ref(&full), T0).await.unwrap();
    assert_eq!(o[0].status, Status::Allowed);
    let o = store.decide(&checks, T0 + 1).await.unwrap();
    let statuses: Vec<Status> = o.iter().map(|o| o.status).collect();
    assert_eq!(
        statuses,
        [Status::NotConsumed, Status::Rejected, Status::NotConsumed]
    );
    assert_eq!((o[0].remaining, o[2].remaining), (5, 9));
    assert_eq!(o[1].retry_after, 60 * SECOND - 1);
    for c in [&checks[0], &checks[2]] {
        assert_eq!(
            store.inspect(c, T0).await.unwrap(),
            (None, LockState::default())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockouts_inspect_reset_and_release() {
    let _busy = CPU.read().await;
    let server = RedisServer::start();
    let store = local_store(&server);
    let mut c = check(3, 1, fixed(1, 10 * SECOND), 1);
    c.lockout = Some(LockParams {
        after: 1,
        within: 10 * SECOND,
        duration: 30 * SECOND,
        escalate: 2,
        max_duration: 300 * SECOND,
        forget_after: 600 * SECOND,
    });
    assert_eq!(one(&store, &c, T0).await.status, Status::Allowed);
    let o = one(&store, &c, T0 + SECOND).await;
    assert_eq!(
        (o.status, o.lock_started, o.retry_after, o.grows_after),
        (Status::LockedOut, true, 30 * SECOND, 30 * SECOND)
    );
    // Locked: 20 s left, reported as draft 11's t = left and draft 10's
    // t = min(left, window).
    let o = one(&store, &c, T0 + 11 * SECOND).await;
    assert_eq!(
        (
            o.status,
            o.lock_started,
            o.retry_after,
            o.reset,
            o.grows_after
        ),
        (
            Status::LockedOut,
            false,
            20 * SECOND,
            10 * SECOND,
            20 * SECOND
        )
    );
    assert_eq!(
        store.lockouts(T0 + 21 * SECOND).await.unwrap(),
        vec![(c.key, 10 * SECOND)]
    );
    let (state, lock) = store.inspect(&c, T0).await.unwrap();
    assert_eq!(
        state,
        Some(AlgoState::FixedWindow(fixed_window::State { ws: T0, n: 1 }))
    );
    assert_eq!((lock.lu, lock.lv), (T0 + 31 * SECOND, 1));
    // The lock's last microsecond, then its end.
    let o = one(&store, &c, T0 + 31 * SECOND - 1).await;
    assert_eq!((o.status, o.retry_after), (Status::LockedOut, 1));
    let o = one(&store, &c, T0 + 31 * SECOND).await;
    assert_eq!(o.status, Status::Allowed);

    store.reset(&c.key).await.unwrap();
    assert_eq!(
        store.inspect(&c, T0).await.unwrap(),
        (None, LockState::default())
    );
    assert!(store.lockouts(T0 + 21 * SECOND).await.unwrap().is_empty());
    assert_eq!(
        one(&store, &c, T0 + 21 * SECOND).await.status,
        Status::Allowed
    );

    // Concurrency: a released lease frees its slot at once.
    let mut lease = check(
        4,
        1,
        AlgoParams::Concurrency(concurrency::Params::new(1, 60 * SECOND).unwrap()),
        1,
    );
    lease.lease = u64::MAX;
    assert_eq!(one(&store, &lease, T0).await.status, Status::Allowed);
    let other = Check {
        lease: 7,
        ..lease.clone()
    };
    assert_eq!(one(&store, &other, T0).await.status, Status::Rejected);
    assert!(store.release(&lease.key, u64::MAX, T0 + 1).await.unwrap());
    assert!(!store.release(&lease.key, u64::MAX, T0 + 1).await.unwrap());
    assert_eq!(
        store.decide(&[other], T0 + 2).await.unwrap()[0].status,
        Status::Allowed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_clock_is_redis_time() {
    let _busy = CPU.read().await;
    let server = RedisServer::start();
    let store = RedisStore::new(&server.url(), "tg", TIMEOUT, false).unwrap();
    let c = check(0, 0, fixed(2, 3_600 * SECOND), 1);
    // `now` is ignored: Redis TIME decides.
    for _ in 0..2 {
        assert_eq!(one(&store, &c, 0).await.status, Status::Allowed);
    }
    let o = one(&store, &c, 0).await;
    assert_eq!(o.status, Status::Rejected);
    assert!(o.retry_after > 0 && o.retry_after <= 3_600 * SECOND);
    let (state, _) = store.inspect(&c, 0).await.unwrap();
    let Some(AlgoState::FixedWindow(s)) = state else {
        panic!("{state:?}")
    };
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    assert!(s.ws <= wall && wall - s.ws <= 3_600 * SECOND + 60 * SECOND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_is_loaded_at_start_and_again_after_function_flush() {
    let _busy = CPU.read().await;
    let server = RedisServer::start();
    let mut conn = server.connection();
    let libraries = |conn: &mut redis::Connection| -> Vec<String> {
        let list: Vec<Value> = redis::cmd("FUNCTION").arg("LIST").query(conn).unwrap();
        list.iter()
            .map(|lib| {
                let Value::Array(fields) = lib else {
                    panic!("{lib:?}")
                };
                let at = fields
                    .iter()
                    .position(|f| matches!(f, Value::BulkString(b) if b == b"library_name"))
                    .unwrap();
                redis::from_redis_value(fields[at + 1].clone()).unwrap()
            })
            .collect()
    };
    let name = lua::Library::gateway().name;
    // Loaded when the store starts, before any call.
    let store = local_store(&server);
    let mut waited = Duration::ZERO;
    while libraries(&mut conn) != [name.clone()] && waited < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    assert_eq!(libraries(&mut conn), std::slice::from_ref(&name));
    let c = [check(0, 0, fixed(100, SECOND), 1)];
    assert_eq!(store.decide(&c, T0).await.unwrap()[0].remaining, 99);
    // Gone (FUNCTION FLUSH, or a restart without persistence): the next
    // call loads it again and is answered, counted once.
    redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query::<()>(&mut conn)
        .unwrap();
    assert!(libraries(&mut conn).is_empty());
    assert_eq!(store.decide(&c, T0).await.unwrap()[0].remaining, 98);
    assert_eq!(libraries(&mut conn), std::slice::from_ref(&name));
    assert_eq!(store.decide(&c, T0).await.unwrap()[0].remaining, 97);

    // Every request in flight finds it missing at once (a failover): one
    // load between them, and each request counted once.
    redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query::<()>(&mut conn)
        .unwrap();
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(&mut conn)
        .unwrap();
    // Frozen while the calls are sent, so that all of them reach it before
    // any answer (the store's deadline here is 2 s).
    server.stop();
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let (store, c) = (store.clone(), c.clone());
            tokio::spawn(async move { store.decide(&c, T0).await.unwrap()[0].status })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.cont();
    for call in calls {
        assert_eq!(call.await.unwrap(), Status::Allowed);
    }
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    let loads = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_function|load:calls="))
        .and_then(|rest| rest.split(',').next())
        .unwrap_or("0");
    assert_eq!(loads, "1", "{stats}");
    assert_eq!(libraries(&mut conn), [name]);
    assert_eq!(store.decide(&c, T0).await.unwrap()[0].remaining, 46);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_times_out_within_the_deadline() {
    let _alone = CPU.write().await;
    let server = RedisServer::start();
    let store = timed_store(&server);
    let c = [check(0, 0, fixed(100, SECOND), 1)];
    store.decide(&c, T0).await.unwrap();
    server.stop();
    let t = Instant::now();
    let r = store.decide(&c, T0).await;
    let took = t.elapsed();
    server.cont();
    assert!(matches!(r, Err(StoreError::Timeout)), "{r:?}");
    assert!(
        took >= TIMEOUT && took <= TIMEOUT + Duration::from_millis(50),
        "{took:?}"
    );
    until_ok(&store, &c, Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_at_start_then_killed_and_restarted() {
    let _alone = CPU.write().await;
    let server = RedisServer::start();
    server.kill();
    // Unreachable at start-up: not an error; calls fail within the deadline.
    let store = timed_store(&server);
    let c = [check(0, 0, fixed(100, SECOND), 1)];
    let t = Instant::now();
    assert!(store.decide(&c, T0).await.is_err());
    assert!(t.elapsed() <= TIMEOUT + Duration::from_millis(50));
    server.restart();
    until_ok(&store, &c, Duration::from_secs(5)).await.unwrap();
    // Killed and restarted (empty, without the scripts): back within 5 s.
    server.kill();
    assert!(store.decide(&c, T0).await.is_err());
    server.restart();
    let t = Instant::now();
    until_ok(&store, &c, Duration::from_secs(5)).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_opens_fails_fast_and_probes() {
    let _alone = CPU.write().await;
    let server = RedisServer::start();
    let store = timed_store(&server);
    let c = [check(0, 0, fixed(1_000, SECOND), 1)];
    store.decide(&c, T0).await.unwrap();
    server.stop();
    for _ in 0..store::breaker::TRIP_AFTER {
        assert!(matches!(
            store.decide(&c, T0).await,
            Err(StoreError::Timeout)
        ));
    }
    assert!(!store.is_available());
    let t = Instant::now();
    assert!(matches!(
        store.decide(&c, T0).await,
        Err(StoreError::BreakerOpen)
    ));
    assert!(t.elapsed() < Duration::from_millis(20), "fails fast");
    // After the back-off, one probe goes (and times out); the next fail fast.
    tokio::time::sleep(store::breaker::MIN_BACKOFF).await;
    assert!(matches!(
        store.decide(&c, T0).await,
        Err(StoreError::Timeout)
    ));
    let t = Instant::now();
    assert!(matches!(
        store.decide(&c, T0).await,
        Err(StoreError::BreakerOpen)
    ));
    assert!(t.elapsed() < Duration::from_millis(20));
    server.cont();
    // A probe after the (doubled) back-off closes it.
    until_ok(&store, &c, Duration::from_secs(3)).await.unwrap();
    assert!(store.is_available());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_has_a_ttl_and_holds_only_the_prefix_and_hex() {
    let _busy = CPU.read().await;
    let server = RedisServer::start();
    let store = local_store(&server);
    let lock = LockParams {
        after: 1,
        within: 10 * SECOND,
        duration: 5 * SECOND,
        escalate: 1,
        max_duration: 5 * SECOND,
        forget_after: 20 * SECOND,
    };
    let all = one_of_each(1, 10 * SECOND);
    for (i, p) in all.iter().enumerate() {
        let mut c = check(i as u8, 9, p.clone(), 1);
        c.lockout = (!matches!(p, AlgoParams::Concurrency(_))).then_some(lock);
        // Allowed, then rejected: a strike that locks.
        store.decide(std::slice::from_ref(&c), T0).await.unwrap();
        c.lease = 1;
        let o = one(&store, &c, T0 + 1).await;
        assert_ne!(o.status, Status::Allowed, "{}", p.name());
    }
    let mut conn = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    let shape = regex::Regex::new(r"^tg:(\{[0-9a-f]{32}\}:[sl]|lockouts)$").unwrap();
    assert_eq!(keys.len(), 2 * all.len());
    for k in keys {
        assert!(shape.is_match(&k), "{k}");
        let pttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut conn).unwrap();
        assert!(pttl > 0, "{k}: {pttl}");
    }
}

async fn next(rx: &mut tokio::sync::mpsc::Receiver<Option<StoreKey>>) -> Option<StoreKey> {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("a reset within 5 s")
        .expect("the subscriber runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_reach_subscribers_and_survive_a_restart() {
    let _busy = CPU.read().await;
    let server = RedisServer::start();
    let store = local_store(&server);
    let mut resets = store.subscribe_resets();
    let key = [0x5a; 16];
    // The subscription starts in the background: publish until it hears.
    let deadline = Instant::now() + Duration::from_secs(5);
    let first = loop {
        store.publish_reset(&key).await.unwrap();
        if let Ok(Some(r)) = tokio::time::timeout(Duration::from_millis(100), resets.recv()).await {
            break r;
        }
        assert!(Instant::now() < deadline, "no reset heard");
    };
    assert_eq!(first, Some(key));
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(200), resets.recv()).await {}
    // A restart loses the subscription: once back, the subscriber says
    // "clear everything" (resets may have been missed) and hears again.
    server.restart();
    assert_eq!(next(&mut resets).await, None);
    until_ok(
        &store,
        &[check(0, 0, fixed(9, SECOND), 1)],
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    store.publish_reset(&key).await.unwrap();
    assert_eq!(next(&mut resets).await, Some(key));
}

/// A quota text to store: a valid one (which may not fit the limit, or
/// name another algorithm's value), or one `Quota::decode` refuses.
fn quota_text() -> impl Strategy<Value = String> {
    let count = prop_oneof![4 => 1u64..20, 1 => Just(0u64), 1 => Just(10_000_000_000_000u64)];
    let valid = (
        proptest::option::of(count.clone()),
        proptest::option::of((1u64..5, dur(5_000))),
        proptest::option::of(count),
    )
        .prop_filter_map("at least one value", |(l, r, b)| {
            let q = crate::quota::Quota {
                limit: l,
                rate: r.and_then(|(c, p)| Rate::new(c, p).ok()),
                burst: b,
            };
            (q != crate::quota::Quota::default()).then(|| q.encode())
        });
    let broken = prop_oneof![
        Just(String::new()),
        Just("l=".to_owned()),
        Just("l=5 l=6".to_owned()),
        Just("r=5".to_owned()),
        Just("x=1".to_owned()),
        Just("l=-3".to_owned()),
        Just("l=5  b=2".to_owned()),
    ];
    prop_oneof![4 => valid, 1 => broken]
}

/// A key's own values (`lua/quota.lua`, read by `dispatch.lua` from the
/// key's quota key) give the decisions `AlgoParams::under` gives on the
/// memory store holding the same text: random limits of every algorithm,
/// random texts (fitting, ill-fitting, of another algorithm's values,
/// malformed), random requests.
#[test]
fn quota_values_match_rust() {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = RefCell::new(server.connection());
    let params = proptest::strategy::Union::new(lua::ALGORITHMS.iter().map(|(n, _)| params_of(n)));
    let strategy = (
        params,
        quota_text(),
        proptest::collection::vec((0u64..3, 0u64..3_000), 1..30),
    );
    runner(64)
        .run(&strategy, |(params, text, steps)| {
            let conn = &mut *conn.borrow_mut();
            redis::cmd("FLUSHALL").query::<()>(conn).unwrap();
            let memory = crate::store::memory::MemoryStore::new();
            let key = check(0, 0, params.clone(), 1).key;
            let _: () = redis::cmd("SET")
                .arg(store::tagged("t", &key, "q"))
                .arg(&text)
                .query(conn)
                .unwrap();
            memory.set_quota(&key, crate::quota::Quota::decode(&text));
            let mut ttls = BTreeMap::new();
            let mut now = T0;
            for (step, &(cost, gap)) in steps.iter().enumerate() {
                now += gap;
                let c = Check {
                    lease: step as u64 + 1,
                    ..check(0, 0, params.clone(), cost)
                }
                .per_key();
                let want = memory.decide(std::slice::from_ref(&c), now);
                let (got, _) = dispatch_call(conn, "t", &[vec![c]], now, &mut ttls);
                prop_assert_eq!(&got, &want, "step {} under {:?}", step, text);
            }
            Ok(())
        })
        .unwrap();
}
