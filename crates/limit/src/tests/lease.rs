//! `lua/lease.lua` against `algorithm::lease` on a real `redis-server`: after
//! a random history of requests (each through the algorithm's Lua file
//! and the Rust algorithm, which must agree), a lease takes the same units
//! with the same figures and stores the same state, and giving back part
//! of it later leaves the same state, per leasable algorithm.

use std::cell::RefCell;

use ::redis::Value;
use proptest::prelude::*;
use tollgate_testkit::RedisServer;

use super::lua::{
    canonical, check_step, ints, raw_state, runner, steps, trace_setting, Function, CPU,
};
use crate::algorithm::lease;
use crate::algorithm::Micros;
use crate::store::redis::wire;
use crate::{AlgoParams, AlgoState};

/// The per-test entry: a lease taken (`take`: x = cost, y = most) or given
/// back (`back`: x = the instant it was taken, y = the units) on KEYS[1].
pub(super) const LEASE_PROBE: &str = r#"
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

/// The entry called with `mode` on `key`.
fn probe(
    conn: &mut redis::Connection,
    key: &str,
    mode: &str,
    p: &AlgoParams,
    (now, x, y): (Micros, u64, u64),
) -> Vec<i64> {
    let mut inv = Function::of("lease_probe").key(key);
    inv.arg(mode).arg(wire::wire_name(p)).arg(now).arg(x).arg(y);
    for v in wire::algo_params(p) {
        inv.arg(v);
    }
    ints(&inv.invoke::<Value>(conn).unwrap())
}

/// One algorithm's suite (`name` as `trace_setting` knows it).
fn lease_matches_rust(name: &str) {
    let _busy = CPU.blocking_read();
    let server = RedisServer::start();
    let conn = RefCell::new(server.connection());
    let (params, start, gap) = trace_setting(name);
    let lease_args = (1u64..4, 1u64..40, 0u64..40, 0..=2 * gap.unsigned_abs());
    runner(48)
        .run(
            &(params, start, steps(gap, 6, false), lease_args),
            |(p, start, trace, (cost, most, back, later))| {
                let conn = &mut conn.borrow_mut();
                let key = "t:{00000000000000000000000000000000}:s";
                redis::cmd("FLUSHALL").query::<()>(conn).unwrap();
                let mut model: Option<AlgoState> = None;
                let mut now = start;
                for (i, &(g, c, _, _, _)) in trace.iter().enumerate() {
                    now = now.saturating_add_signed(g).max(start);
                    check_step(conn, key, &p, (i, now, start), (c, 0), &mut model)?;
                }
                let fresh = p.fresh();
                let taken = lease::take(&p, model.as_ref().unwrap_or(&fresh), now, cost, most);
                let r = probe(conn, key, "take", &p, (now, cost, most));
                let v = &taken.verdict;
                prop_assert_eq!(
                    (r[0] as u64, r[1] == 1, r[2] as u64, r[3] as u64),
                    (taken.units, v.allowed, v.remaining, v.ttl),
                    "take {} of at most {} at {}",
                    cost,
                    most,
                    now
                );
                if taken.units > 0 {
                    model = (v.ttl > 0).then(|| v.state.clone());
                }
                prop_assert_eq!(
                    canonical(raw_state(conn, key, &p)),
                    canonical(model.clone())
                );
                let back = back.min(taken.units);
                let later = now + later;
                let given =
                    lease::give_back(&p, model.as_ref().unwrap_or(&fresh), now, later, back);
                let r = probe(conn, key, "back", &p, (later, now, back));
                prop_assert_eq!(
                    r[0] == 1,
                    given.is_some(),
                    "give back {} at {}",
                    back,
                    later
                );
                if let Some(g) = given {
                    prop_assert_eq!((r[1] as u64, r[2]), (g.ttl, g.applied));
                    model = (g.ttl > 0).then_some(g.state);
                }
                prop_assert_eq!(canonical(raw_state(conn, key, &p)), canonical(model));
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn fixed_window_leases_match_rust() {
    lease_matches_rust("fixed_window");
}

#[test]
fn calendar_window_leases_match_rust() {
    lease_matches_rust("calendar_window");
}

#[test]
fn sliding_window_leases_match_rust() {
    lease_matches_rust("sliding_window");
}

#[test]
fn token_bucket_leases_match_rust() {
    lease_matches_rust("token_bucket");
}

#[test]
fn gcra_leases_match_rust() {
    lease_matches_rust("gcra");
}
