//! `gcra`: the generic cell rate algorithm with redis-cell's `CL.THROTTLE`
//! semantics and figures.
//!
//! `CL.THROTTLE key max_burst count period quantity` is this module's
//! `check` with `burst = max_burst + 1`, `rate = count / period` and `cost =
//! quantity`, and the same answers: `limited = !allowed`, `limit`,
//! `remaining`, `retry_after` (redis-cell: -1 when allowed or when it can
//! never pass; here `Some(0)` / `None`) and `reset_after`.
//!
//! # Time units
//!
//! redis-cell computes in nanoseconds and replies in whole seconds
//! (`whole_seconds + 1` if the sub-second part has a whole millisecond).
//! This module computes the same formulas in microseconds; the gateway
//! rounds to seconds when it writes headers. The figures are the same
//! whenever the emission interval `period / count` is a whole number of
//! microseconds (redis-cell truncates it to whole nanoseconds, this module
//! to whole microseconds).
//!
//! # Formulas (integer maths; the Lua script mirrors them)
//!
//! ```text
//! T     = floor(period / count)          -- emission interval, >= 1 µs
//! tau   = T * burst                      -- delay variation tolerance, the `window`
//! tat   = min(max(s.tat, now), now + tau + max_delay)   -- theoretical arrival time
//! -- cost > burst: rejected, retry_after = None, reset = tat - now
//! new   = tat + T * cost
//! wait  = max(0, new - tau - now)        -- redis-cell: -(now - (new - tau))
//! ok    = wait <= max_delay;  delay = wait
//! tat'  = new if ok else tat;  state = {tat = tat'}
//! ttl   = tat' - now                     -- redis-cell's ttl, the key's expiry
//! reset_after = min(ttl, tau)
//! remaining   = floor((tau - ttl) / T) if ttl < tau else 0
//! grows_after = ttl - tau + T if ttl >= tau else T - (tau - ttl) % T
//! retry_after = wait - max_delay         -- when the wait has shrunk to max_delay
//! ```
//!
//! `grows_after` (draft 11's `t`, not a redis-cell figure) is when the
//! next cell is back: when `remaining` grows by one. A full burst reports
//! one emission interval `T`.
//!
//! With `max_delay = 0` this is redis-cell's algorithm exactly. The `max`
//! in `tat` is redis-cell's "a missing key means `tat = now`" (its key
//! expires when `tat` passes); the `min` only acts after the parameters
//! changed (docs/operations.md), clamping a schedule longer than the new tolerance.
//!
//! # Settlements ([`super::settle`])
//!
//! ```text
//! now  = max(now, at);  tat = effective(now).tat
//! (tat', applied) = shift(tat, delta, T, now, now + tau + max_delay)
//! ttl  = tat' - now
//! ```

use super::settle::{clamp_delta, shift, Settled};
use super::{
    at_most, nonzero, ticks_to_next_unit, Micros, ParamError, Rate, Verdict, MAX_COUNT,
    MAX_DURATION,
};

/// Validated parameters of a `gcra` limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    rate: Rate,
    burst: u64,
    max_delay: Micros,
    /// The emission interval `T`.
    interval: Micros,
    /// The delay variation tolerance `tau = T * burst`.
    tolerance: Micros,
}

impl Params {
    /// `burst` requests at once on a fresh key (redis-cell's `max_burst +
    /// 1`), `rate` on average, admitting with a wait of up to `max_delay`.
    /// The emission interval `period / count` must be at least 1 µs.
    pub fn new(rate: Rate, burst: u64, max_delay: Micros) -> Result<Params, ParamError> {
        nonzero("burst", burst)?;
        at_most("burst", burst, MAX_COUNT)?;
        at_most("max_delay", max_delay, MAX_DURATION)?;
        let interval = rate.period() / rate.count();
        if interval == 0 {
            return Err(ParamError::TooFast);
        }
        let tolerance = interval
            .checked_mul(burst)
            .filter(|t| *t <= MAX_DURATION)
            .ok_or(ParamError::TooLarge {
                field: "burst",
                max: MAX_DURATION / interval,
            })?;
        Ok(Params {
            rate,
            burst,
            max_delay,
            interval,
            tolerance,
        })
    }

    /// The rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Requests allowed at once on a fresh key.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The longest wait a request may be held instead of rejected.
    pub fn max_delay(&self) -> Micros {
        self.max_delay
    }

    /// The emission interval `T = floor(period / count)`.
    pub fn interval(&self) -> Micros {
        self.interval
    }

    /// The delay variation tolerance `tau = T * burst`: the time a full
    /// burst takes to come back, the policy window.
    pub fn window(&self) -> Micros {
        self.tolerance
    }
}

/// The stored schedule of one key (Redis hash field `tat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State {
    /// The theoretical arrival time (µs since the epoch): when the key is
    /// back to a full burst. 0 on a fresh key.
    pub tat: Micros,
}

/// `state` brought to `now` under `p`: `tat` no earlier than `now` and no
/// later than `now + tau + max_delay`.
pub fn effective(p: &Params, state: &State, now: Micros) -> State {
    let top = now.saturating_add(p.tolerance + p.max_delay);
    State {
        tat: state.tat.max(now).min(top),
    }
}

/// Decide a request of `cost` units at `now`.
pub fn check(p: &Params, state: &State, now: Micros, cost: u64) -> Verdict<State> {
    let cost = cost.max(1);
    let tau = p.tolerance;
    let tat = effective(p, state, now).tat;
    let (allowed, delay, retry_after, tat2) = if cost > p.burst {
        // redis-cell: `increment > delay_variation_tolerance`, never.
        (false, 0, None, tat)
    } else {
        let new = tat.saturating_add(p.interval * cost);
        let wait = new.saturating_sub(now.saturating_add(tau));
        if wait <= p.max_delay {
            (true, wait, Some(0), new)
        } else {
            (false, 0, Some(wait - p.max_delay), tat)
        }
    };
    let ttl = tat2 - now;
    // The next cell is back when `ttl` has fallen to below the next
    // multiple of `T` under `tau`.
    let grows_after = ticks_to_next_unit(ttl, tau, p.interval);
    Verdict {
        allowed,
        delay,
        limit: p.burst,
        window: tau,
        remaining: tau.saturating_sub(ttl) / p.interval,
        reset_after: ttl.min(tau),
        grows_after,
        retry_after,
        state: State { tat: tat2 },
        ttl,
    }
}

/// Apply a settlement of `delta` cells at `now` to a request decided at
/// `at` (module doc, "Settlements").
pub fn settle(p: &Params, state: &State, at: Micros, now: Micros, delta: i64) -> Settled<State> {
    let now = now.max(at);
    let tat = effective(p, state, now).tat;
    let top = now.saturating_add(p.tolerance + p.max_delay);
    let (tat, applied) = shift(tat, clamp_delta(delta), p.interval, now, top);
    Settled {
        state: State { tat },
        ttl: tat - now,
        applied,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{ms, s, steps, T0};
    use super::super::{token_bucket, SECOND};
    use super::*;
    use proptest::prelude::*;

    /// redis-cell's reply for a duration: whole seconds, plus one if the
    /// rest has a whole millisecond.
    fn cell_secs(us: Micros) -> i64 {
        let secs = (us / SECOND) as i64;
        secs + i64::from((us % SECOND) / 1_000 > 0)
    }

    /// `CL.THROTTLE key max_burst count period quantity` on `st` at `now`:
    /// the five integers of its reply, and the new state.
    fn throttle(
        st: &mut State,
        now: Micros,
        max_burst: u64,
        count: u64,
        period: u64,
        quantity: u64,
    ) -> [i64; 5] {
        let p = Params::new(Rate::new(count, s(period)).unwrap(), max_burst + 1, 0).unwrap();
        let v = check(&p, st, now, quantity);
        if v.allowed {
            *st = v.state;
        }
        [
            i64::from(!v.allowed),
            v.limit as i64,
            v.remaining as i64,
            match v.retry_after {
                Some(r) if !v.allowed => cell_secs(r),
                _ => -1,
            },
            cell_secs(v.reset_after),
        ]
    }

    #[test]
    fn rejects_meaningless_params() {
        let r = Rate::new(1, SECOND).unwrap();
        assert_eq!(Params::new(r, 0, 0), Err(ParamError::Zero("burst")));
        let fast = Rate::new(2_000_000, SECOND).unwrap();
        assert_eq!(Params::new(fast, 1, 0), Err(ParamError::TooFast));
        let slow = Rate::new(1, 100 * 86_400 * SECOND).unwrap();
        assert!(matches!(
            Params::new(slow, 11, 0),
            Err(ParamError::TooLarge { field: "burst", .. })
        ));
    }

    #[test]
    fn grows_after_is_the_next_cell() {
        // 1 per second, burst 3: each admission leaves the next cell one
        // interval (or what is left of it) away.
        let p = Params::new(Rate::new(1, SECOND).unwrap(), 3, 0).unwrap();
        let v = check(&p, &State::default(), T0, 1);
        assert_eq!((v.remaining, v.grows_after, v.reset_after), (2, s(1), s(1)));
        let v = check(&p, &v.state, T0 + ms(300), 1);
        assert_eq!(
            (v.remaining, v.grows_after, v.reset_after),
            (1, ms(700), ms(1_700))
        );
        let v = check(&p, &v.state, T0 + ms(300), 1);
        assert_eq!((v.remaining, v.grows_after), (0, ms(700)));
        // Rejected: the wait, which is the same here.
        let v = check(&p, &v.state, T0 + ms(500), 1);
        assert_eq!(
            (v.allowed, v.grows_hint(), v.retry_hint()),
            (false, ms(500), ms(500))
        );
    }

    #[test]
    fn readme_example() {
        // CL.THROTTLE user123 15 30 60 1 on a fresh key.
        let mut st = State::default();
        assert_eq!(throttle(&mut st, T0, 15, 30, 60, 1), [0, 16, 15, -1, 2]);
        // The rest of the burst at the same instant, then limited: one
        // token every 2 s.
        for i in 2..=16 {
            assert_eq!(
                throttle(&mut st, T0, 15, 30, 60, 1),
                [0, 16, 16 - i, -1, 2 * i]
            );
        }
        assert_eq!(throttle(&mut st, T0, 15, 30, 60, 1), [1, 16, 0, 2, 32]);
        assert_eq!(
            throttle(&mut st, T0 + s(1), 15, 30, 60, 1),
            [1, 16, 0, 1, 31]
        );
        assert_eq!(
            throttle(&mut st, T0 + s(2), 15, 30, 60, 1),
            [0, 16, 0, -1, 32]
        );
        // Idle for a minute: back to a full burst.
        assert_eq!(
            throttle(&mut st, T0 + s(62), 15, 30, 60, 1),
            [0, 16, 15, -1, 2]
        );
    }

    #[test]
    fn redis_cell_test_sequence() {
        // redis-cell's own `it_rate_limits`: max_burst 4, 1 per second;
        // (offset, quantity, remaining, reset_after, retry_after, limited),
        // durations exact (redis-cell compares `time::Duration`s).
        let p = Params::new(Rate::new(1, SECOND).unwrap(), 5, 0).unwrap();
        let cases: [(Micros, u64, u64, Micros, Option<Micros>, bool); 14] = [
            (0, 6, 5, 0, None, true),
            (0, 1, 4, s(1), Some(0), false),
            (0, 1, 3, s(2), Some(0), false),
            (0, 1, 2, s(3), Some(0), false),
            (0, 1, 1, s(4), Some(0), false),
            (0, 1, 0, s(5), Some(0), false),
            (0, 1, 0, s(5), Some(s(1)), true),
            (ms(3000), 1, 2, ms(3000), Some(0), false),
            (ms(3100), 1, 1, ms(3900), Some(0), false),
            (ms(4000), 1, 1, ms(4000), Some(0), false),
            (ms(8000), 1, 4, ms(1000), Some(0), false),
            (ms(9500), 1, 4, ms(1000), Some(0), false),
            // (redis-cell's case 12, a quantity-0 peek, changes nothing.)
            (ms(9500), 2, 2, s(3), Some(0), false),
            (ms(9500), 5, 2, s(3), Some(s(3)), true),
        ];
        let mut st = State::default();
        for (i, (at, qty, remaining, reset, retry, limited)) in cases.into_iter().enumerate() {
            let v = check(&p, &st, T0 + at, qty);
            assert_eq!(
                (
                    v.allowed,
                    v.limit,
                    v.remaining,
                    v.reset_after,
                    v.retry_after
                ),
                (!limited, 5, remaining, reset, retry),
                "case {i}"
            );
            if v.allowed {
                st = v.state;
            }
        }
    }

    #[test]
    fn max_delay_reserves_and_holds() {
        // 10/s, burst 2, wait up to 300 ms: like the token bucket.
        let p = Params::new(Rate::new(10, SECOND).unwrap(), 2, ms(300)).unwrap();
        let mut st = State::default();
        let mut delays = Vec::new();
        for _ in 0..5 {
            let v = check(&p, &st, T0, 1);
            assert!(v.allowed);
            assert!(v.reset_after <= v.window);
            delays.push(v.delay);
            st = v.state;
        }
        assert_eq!(delays, vec![0, 0, ms(100), ms(200), ms(300)]);
        // Reserved 300 ms ahead: a cell is free without a wait after
        // the reservations (500 ms) less the burst (200 ms) plus one
        // interval.
        assert_eq!(check(&p, &st, T0, 3).grows_after, ms(400));
        let v = check(&p, &st, T0, 1);
        assert!(!v.allowed);
        assert_eq!(v.retry_after, Some(ms(100)));
        assert_eq!((v.remaining, v.reset_after, v.ttl), (0, ms(200), ms(500)));
        assert!(!check(&p, &st, T0 + ms(100) - 1, 1).allowed);
        assert_eq!(check(&p, &st, T0 + ms(100), 1).delay, ms(300));
    }

    #[test]
    fn long_idle_and_parameter_changes() {
        let p = Params::new(Rate::new(1, SECOND).unwrap(), 5, 0).unwrap();
        // Long idle: tat far in the past is `now`.
        let v = check(&p, &State { tat: T0 }, T0 + 400 * 365 * 86_400 * SECOND, 5);
        assert!(v.allowed);
        assert_eq!(v.remaining, 0);
        // A schedule made under a larger burst is clamped to this one's
        // tolerance: limited, but back within tau.
        let v = check(&p, &State { tat: T0 + s(100) }, T0, 1);
        assert!(!v.allowed);
        assert_eq!(v.state.tat, T0 + s(5));
        assert_eq!(v.retry_after, Some(s(1)));
        assert_eq!(v.reset_after, s(5));
    }

    proptest! {



        /// With a whole emission interval, GCRA and the token bucket are
        /// the same limiter: same decisions, delays and figures.
        #[test]
        fn same_as_the_token_bucket(
            count in 1u64..5,
            interval in 1u64..2_000,
            burst in 1u64..20,
            max_delay in prop_oneof![Just(0u64), 0u64..3_000],
            history in steps(1_000, 6, 100),
        ) {
            let rate = Rate::new(count, count * interval).unwrap();
            let g = Params::new(rate, burst, max_delay).unwrap();
            let t = token_bucket::Params::new(rate, burst, max_delay).unwrap();
            let (mut gs, mut ts) = (State::default(), token_bucket::State::default());
            let mut now = T0;
            for (gap, cost) in history {
                now += gap;
                let a = check(&g, &gs, now, cost);
                let b = token_bucket::check(&t, &ts, now, cost);
                prop_assert_eq!(
                    (a.allowed, a.delay, a.remaining, a.reset_after, a.grows_after, a.retry_after, a.window, a.ttl),
                    (b.allowed, b.delay, b.remaining, b.reset_after, b.grows_after, b.retry_after, b.window, b.ttl)
                );
                if a.allowed {
                    gs = a.state;
                    ts = b.state;
                }
            }
        }
    }
}
