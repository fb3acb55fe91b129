//! The wire format between [`RedisStore`](super::RedisStore) and the Lua
//! scripts: how checks travel in `ARGV`, and how replies come back. The
//! scripts' headers (`lua/*.lua`) give the same contract from their side.
//!
//! Every number is a decimal integer. A request's `ARGV` is `now` (µs; empty
//! for Redis `TIME`), the number of checks, then per check:
//!
//! ```text
//! algo cost shadow(0|1) lease lockout(0|1) [after within duration escalate max_duration forget_after] params...
//! ```
//!
//! with the algorithm's params from [`algo_params`].

use redis::Value;

use crate::limit::algorithm::{
    concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
};
use crate::limit::{AlgoParams, AlgoState, Check, LockState, Micros, Outcome, Status, StoreKey};

/// An algorithm's params as its Lua file reads them:
///
/// | algorithm | params |
/// |---|---|
/// | `fixed_window` | limit, window (0 = calendar months) |
/// | `sliding_window`, `sliding_log` | limit, window |
/// | `token_bucket`, `leaky_bucket` | unit, drain ([`Rate::ticks`](crate::limit::algorithm::Rate::ticks)), burst, max_delay |
/// | `gcra` | interval, burst, max_delay |
/// | `concurrency` | limit, lease |
pub fn algo_params(p: &AlgoParams) -> Vec<u64> {
    match p {
        AlgoParams::FixedWindow(p) => vec![
            p.limit(),
            match p.window() {
                fixed_window::Window::Fixed(w) => w,
                fixed_window::Window::Month => 0,
            },
        ],
        AlgoParams::SlidingWindow(p) => vec![p.limit(), p.window()],
        AlgoParams::SlidingLog(p) => vec![p.limit(), p.window()],
        AlgoParams::TokenBucket(p) => {
            let (unit, drain) = p.rate().ticks();
            vec![unit, drain, p.burst(), p.max_delay()]
        }
        AlgoParams::Gcra(p) => vec![p.interval(), p.burst(), p.max_delay()],
        AlgoParams::LeakyBucket(p) => {
            let (unit, drain) = p.rate().ticks();
            vec![unit, drain, p.burst(), p.max_delay()]
        }
        AlgoParams::Concurrency(p) => vec![p.limit(), p.lease()],
    }
}

/// Appends one check's part of `dispatch.lua`'s `ARGV` to `args`.
pub fn push_check(args: &mut Vec<String>, c: &Check) {
    args.push(c.params.name().to_owned());
    args.push(c.cost.to_string());
    args.push(if c.shadow { "1" } else { "0" }.to_owned());
    args.push(c.lease.to_string());
    match &c.lockout {
        None => args.push("0".to_owned()),
        Some(l) => {
            args.push("1".to_owned());
            for v in [
                l.after,
                l.within,
                l.duration,
                l.escalate,
                l.max_duration,
                l.forget_after,
            ] {
                args.push(v.to_string());
            }
        }
    }
    args.extend(algo_params(&c.params).iter().map(u64::to_string));
}

/// The figures per check in `dispatch.lua`'s reply.
const OUTCOME_WIDTH: usize = 8;

/// `dispatch.lua`'s reply: one [`Outcome`] per check.
pub fn outcomes(reply: &Value, checks: usize) -> Result<Vec<Outcome>, String> {
    let items = array(reply)?;
    if items.len() != checks * OUTCOME_WIDTH {
        return Err(format!(
            "dispatch: {} values for {checks} checks, expected {}",
            items.len(),
            checks * OUTCOME_WIDTH
        ));
    }
    items
        .chunks(OUTCOME_WIDTH)
        .map(|o| {
            let n = |i: usize| int(&o[i]);
            Ok(Outcome {
                status: match n(0)? {
                    0 => Status::Allowed,
                    1 => Status::Rejected,
                    2 => Status::LockedOut,
                    3 => Status::ShadowRejected,
                    4 => Status::NotConsumed,
                    s => return Err(format!("dispatch: unknown status {s}")),
                },
                lock_started: n(1)? == 1,
                delay: n(2)?,
                limit: n(3)?,
                window: n(4)?,
                remaining: n(5)?,
                reset: n(6)?,
                retry_after: n(7)?,
            })
        })
        .collect()
}

/// `inspect.lua`'s reply: the stored state (`None`: a fresh key) and the
/// lockout state.
pub fn inspected(
    reply: &Value,
    params: &AlgoParams,
) -> Result<(Option<AlgoState>, LockState), String> {
    let items = array(reply)?;
    let [found, state, lock] = items else {
        return Err(format!("inspect: {} values, expected 3", items.len()));
    };
    let state = if int(found)? == 1 {
        Some(algo_state(params, array(state)?)?)
    } else {
        None
    };
    let lock = match array(lock)? {
        [n, s, lu, lv] => LockState {
            n: int(n)?,
            s: int(s)?,
            lu: int(lu)?,
            lv: int(lv)?,
        },
        other => {
            return Err(format!(
                "inspect: lock of {} values, expected 4",
                other.len()
            ))
        }
    };
    Ok((state, lock))
}

/// An algorithm's state from its Lua `encode()`.
fn algo_state(params: &AlgoParams, f: &[Value]) -> Result<AlgoState, String> {
    let want = |n: usize| {
        if f.len() == n {
            Ok(())
        } else {
            Err(format!(
                "inspect: {} state of {} values, expected {n}",
                params.name(),
                f.len()
            ))
        }
    };
    let pairs = || {
        if f.len().is_multiple_of(2) {
            Ok(f.chunks(2))
        } else {
            Err(format!("inspect: {} state of odd length", params.name()))
        }
    };
    Ok(match params {
        AlgoParams::FixedWindow(_) => {
            want(2)?;
            AlgoState::FixedWindow(fixed_window::State {
                ws: int(&f[0])?,
                n: int(&f[1])?,
            })
        }
        AlgoParams::SlidingWindow(_) => {
            want(3)?;
            AlgoState::SlidingWindow(sliding_window::State {
                ws: int(&f[0])?,
                cur: int(&f[1])?,
                prev: int(&f[2])?,
            })
        }
        AlgoParams::SlidingLog(_) => AlgoState::SlidingLog(sliding_log::State {
            entries: pairs()?
                .map(|e| {
                    Ok(sliding_log::Entry {
                        t: int(&e[0])?,
                        n: int(&e[1])?,
                    })
                })
                .collect::<Result<_, String>>()?,
        }),
        AlgoParams::TokenBucket(_) => {
            want(3)?;
            AlgoState::TokenBucket(token_bucket::State {
                d: int(&f[0])?,
                ts: int(&f[1])?,
                u: int(&f[2])?,
            })
        }
        AlgoParams::Gcra(_) => {
            want(1)?;
            AlgoState::Gcra(gcra::State { tat: int(&f[0])? })
        }
        AlgoParams::LeakyBucket(_) => {
            want(3)?;
            AlgoState::LeakyBucket(leaky_bucket::State {
                lv: int(&f[0])?,
                ts: int(&f[1])?,
                u: int(&f[2])?,
            })
        }
        AlgoParams::Concurrency(_) => AlgoState::Concurrency(concurrency::State {
            leases: pairs()?
                .map(|l| {
                    Ok(concurrency::Lease {
                        id: int(&l[0])?,
                        exp: int(&l[1])?,
                    })
                })
                .collect::<Result<_, String>>()?,
        }),
    })
}

/// `lockouts.lua`'s reply: `(key, remaining)` pairs.
pub fn lockouts(reply: &Value) -> Result<Vec<(StoreKey, Micros)>, String> {
    let items = array(reply)?;
    if items.len() % 2 != 0 {
        return Err("lockouts: odd reply".to_owned());
    }
    items
        .chunks(2)
        .map(|e| {
            let hex = text(&e[0])?;
            let key = parse_key(&hex).ok_or_else(|| format!("lockouts: bad key {hex:?}"))?;
            Ok((key, int(&e[1])?))
        })
        .collect()
}

/// A store key from its 32 hex digits.
pub fn parse_key(hex: &str) -> Option<StoreKey> {
    let mut key = [0u8; 16];
    hex::decode_to_slice(hex, &mut key).ok()?;
    Some(key)
}

fn array(v: &Value) -> Result<&[Value], String> {
    match v {
        Value::Array(items) | Value::Set(items) => Ok(items),
        other => Err(format!("expected an array, got {other:?}")),
    }
}

/// A non-negative integer: a Lua number arrives as an integer reply, a
/// string (a lease id beyond 2^53) as a bulk string.
fn int(v: &Value) -> Result<u64, String> {
    match v {
        Value::Int(i) => u64::try_from(*i).map_err(|_| format!("negative value {i}")),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("not an integer: {:?}", String::from_utf8_lossy(b))),
        other => Err(format!("expected an integer, got {other:?}")),
    }
}

fn text(v: &Value) -> Result<String, String> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        other => Err(format!("expected a string, got {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::algorithm::{Rate, SECOND};
    use crate::limit::LockParams;

    #[test]
    fn a_check_is_encoded_in_the_documented_order() {
        let c = Check {
            key: [0; 16],
            params: AlgoParams::TokenBucket(
                token_bucket::Params::new(Rate::new(10, SECOND).unwrap(), 20, 0).unwrap(),
            ),
            cost: 2,
            lockout: Some(LockParams {
                after: 1,
                within: 60,
                duration: 5,
                escalate: 2,
                max_duration: 50,
                forget_after: 100,
            }),
            shadow: true,
            lease: u64::MAX,
        };
        let mut args = Vec::new();
        push_check(&mut args, &c);
        assert_eq!(
            args,
            [
                "token_bucket",
                "2",
                "1",
                "18446744073709551615",
                "1",
                "1",
                "60",
                "5",
                "2",
                "50",
                "100",
                "100000",
                "1",
                "20",
                "0"
            ]
        );
    }

    #[test]
    fn replies_that_do_not_fit_are_errors_not_panics() {
        assert!(outcomes(&Value::Int(1), 1).is_err());
        assert!(outcomes(&Value::Array(vec![Value::Int(9); 8]), 1).is_err());
        assert!(outcomes(&Value::Array(vec![Value::Int(-1); 8]), 1).is_err());
        assert!(lockouts(&Value::Array(vec![Value::Int(1)])).is_err());
        assert_eq!(parse_key("zz"), None);
        assert_eq!(parse_key(&"ab".repeat(16)), Some([0xab; 16]));
    }
}
