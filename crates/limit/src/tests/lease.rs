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
