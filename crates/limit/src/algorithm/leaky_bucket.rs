//! `leaky_bucket`: a bucket of size `burst` draining at `rate`; a request
//! adds its `cost` if it fits, else it is rejected (the classic funnel).
//!
//! - `max_delay = 0` (policing): admitted requests pass at once.
//! - `max_delay > 0` (shaping, like NGINX `limit_req` without `nodelay`):
//!   each admitted request is held until everything ahead of it in the
//!   bucket has drained, so requests leave evenly spaced at `rate`; one
//!   whose wait would exceed `max_delay` is rejected.
//!
//! # Formulas (integer maths; the Lua script mirrors them)
//!
//! The level is kept in ticks, as in `token_bucket`: `unit = period / g`
//! ticks per unit, `drain = count / g` ticks per microsecond, `g =
//! gcd(count, period)`.
//!
//! ```text
//! cap   = burst * unit;  md = max_delay * drain;  window = ceil(cap / drain)
//! -- effective(): adopt, then drain
//! lv    = s.lv                                 if s.u == unit
//!       = min(ceil(s.lv / s.u), burst) * unit  if s.u != unit (0 if s.u == 0)
//! lv    = min(lv, cap)
//! el    = max(0, now - s.ts)
//! lv    = 0 if el >= ceil(lv / drain) else lv - el * drain
//! ts    = max(s.ts, now)
//! -- check()
//! k     = cost * unit
//! delay = ceil(lv / drain) if max_delay > 0 else 0      -- the level ahead, drained
//! ok    = cost <= burst and lv + k <= cap and delay <= max_delay
//! lv'   = lv + k if ok else lv;  state = {lv = lv', ts = ts, u = unit}
//! remaining   = floor((cap - lv') / unit)                        (policing)
//!             = min(that, floor((md - lv') / unit) + 1 if lv' <= md else 0)  (shaping)
//! reset_after = ttl = ceil(lv' / drain)
//! grows_after = max(next_unit(lv') if remaining == free else 0,      -- room for one more
//!                   ceil((lv' + remaining * unit - md) / drain) if shaping)   -- a shorter queue
//!   (free = floor((cap - lv') / unit); next_unit is Fluid::next_unit)
//! retry_after = max(ceil((lv + k - cap) / drain) if lv + k > cap else 0,
//!                   ceil((lv - md) / drain) if shaping and lv > md else 0)
//! ```
//!
//! `grows_after` (draft 11's `t`) is when enough has drained for
//! `remaining` to grow by one; a bucket with nothing left to grow reports
//! the time one unit takes to drain.
//!
//! # Settlements ([`super::settle`])
//!
//! ```text
//! now = max(now, at);  s = effective(now)     -- lv drained to now
//! (lv', applied) = shift(lv, delta, unit, 0, cap)
//! state = {lv = lv', ts = s.ts, u = unit};  ttl = ceil(lv' / drain)
//! ```

use super::settle::{clamp_delta, shift, Settled};
use super::{at_most, nonzero, Fluid, Micros, ParamError, Rate, Verdict, MAX_COUNT, MAX_DURATION};

/// Validated parameters of a `leaky_bucket` limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    rate: Rate,
    burst: u64,
    max_delay: Micros,
    /// The bucket, never overfilled (no slack).
    fluid: Fluid,
    /// `max_delay * drain`: the most level a request may wait behind.
    md: u64,
}

impl Params {
    /// A bucket of `burst` units (at least 1) draining at `rate`; shaping
    /// with a wait of up to `max_delay` if it is above 0, policing if 0.
    pub fn new(rate: Rate, burst: u64, max_delay: Micros) -> Result<Params, ParamError> {
        nonzero("burst", burst)?;
        at_most("burst", burst, MAX_COUNT)?;
        at_most("max_delay", max_delay, MAX_DURATION)?;
        // Validate with the slack so `md` is exact too, then drop it: the
        // level never exceeds the bucket.
        let fluid = Fluid::new(rate, burst, max_delay)?;
        Ok(Params {
            rate,
            burst,
            max_delay,
            md: fluid.slack,
            fluid: Fluid { slack: 0, ..fluid },
        })
    }

    /// The drain rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The bucket size in units.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The longest wait of an admitted request; 0 for policing.
    pub fn max_delay(&self) -> Micros {
        self.max_delay
    }

    /// The time a full bucket takes to drain: `ceil(burst * unit / drain)`.
    pub fn window(&self) -> Micros {
        self.fluid.time_to_drain(self.fluid.cap)
    }
}

/// The stored bucket of one key (Redis hash fields `lv`, `ts`, `u`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State {
    /// The level, in ticks (0 = empty, a fresh key).
    pub lv: u64,
    /// When `lv` was computed (µs since the epoch).
    pub ts: Micros,
    /// The tick size `lv` is counted in (ticks per unit); 0 on a fresh key.
    pub u: u64,
}

/// `state` brought to `now` under `p`: converted to its tick size, clamped
/// to the bucket, and drained for the time since `ts`.
pub fn effective(p: &Params, state: &State, now: Micros) -> State {
    let f = &p.fluid;
    let lv = f.adopt(state.lv, state.u);
    State {
        lv: f.drained(lv, now.saturating_sub(state.ts)),
        ts: state.ts.max(now),
        u: f.unit,
    }
}

/// Decide a request of `cost` units at `now`.
pub fn check(p: &Params, state: &State, now: Micros, cost: u64) -> Verdict<State> {
    let cost = cost.max(1);
    let f = &p.fluid;
    let shaping = p.max_delay > 0;
    let s = effective(p, state, now);
    let lv = s.lv;
    let fits = cost <= p.burst;
    let (allowed, delay, retry_after) = if fits {
        let k = cost * f.unit;
        let ahead = if shaping { f.time_to_drain(lv) } else { 0 };
        if lv + k <= f.cap && ahead <= p.max_delay {
            (true, ahead, Some(0))
        } else {
            // Room in the bucket, and (shaping) a short enough queue.
            let room = f.time_to_drain((lv + k).saturating_sub(f.cap));
            let queue = if shaping {
                f.time_to_drain(lv.saturating_sub(p.md))
            } else {
                0
            };
            (false, 0, Some(room.max(queue)))
        }
    } else {
        (false, 0, None)
    };
    let lv2 = if allowed { lv + cost * f.unit } else { lv };
    let free = f.units_free(lv2);
    let mut remaining = free;
    if shaping {
        let queued = if lv2 <= p.md {
            (p.md - lv2) / f.unit + 1
        } else {
            0
        };
        remaining = remaining.min(queued);
    }
    // `remaining + 1` passes once the bucket has room for one more unit
    // (if that is what binds) and, shaping, the queue is short enough.
    let mut grows_after = if remaining == free {
        f.next_unit(lv2)
    } else {
        0
    };
    if shaping {
        let queue = (lv2 + remaining * f.unit).saturating_sub(p.md);
        grows_after = grows_after.max(f.time_to_drain(queue));
    }
    let ttl = f.time_to_drain(lv2);
    Verdict {
        allowed,
        delay,
        limit: p.burst,
        window: p.window(),
        remaining,
        reset_after: ttl,
        grows_after,
        retry_after,
        state: State { lv: lv2, ..s },
        ttl,
    }
}

/// Apply a settlement of `delta` units at `now` to a request decided at
/// `at` (module doc, "Settlements").
pub fn settle(p: &Params, state: &State, at: Micros, now: Micros, delta: i64) -> Settled<State> {
    let f = &p.fluid;
    let s = effective(p, state, now.max(at));
    let (lv, applied) = shift(s.lv, clamp_delta(delta), f.unit, 0, f.cap);
    Settled {
        state: State { lv, ..s },
        ttl: f.time_to_drain(lv),
        applied,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{ms, s, steps, T0};
    use super::super::{DAY, SECOND};
    use super::*;
    use proptest::prelude::*;

    fn p(count: u64, period: Micros, burst: u64, max_delay: Micros) -> Params {
        Params::new(Rate::new(count, period).unwrap(), burst, max_delay).unwrap()
    }

    #[test]
    fn rejects_meaningless_params() {
        let r = Rate::new(1, SECOND).unwrap();
        assert_eq!(Params::new(r, 0, 0), Err(ParamError::Zero("burst")));
        assert!(Params::new(r, 1, MAX_DURATION + 1).is_err());
    }

    #[test]
    fn policing_passes_at_once() {
        let p = p(1, s(1), 3, 0);
        assert_eq!(p.window(), s(3));
        let mut st = State::default();
        for left in [2, 1, 0] {
            let v = check(&p, &st, T0, 1);
            assert!(v.allowed);
            assert_eq!(v.delay, 0);
            assert_eq!(v.remaining, left);
            assert_eq!(v.reset_after, s(3 - left));
            assert_eq!(v.grows_after, s(1), "draft 11: the next unit drained");
            st = v.state;
        }
        let v = check(&p, &st, T0 + ms(400), 1);
        assert!(!v.allowed);
        assert_eq!(v.retry_after, Some(ms(600)));
        assert_eq!(v.grows_hint(), ms(600));
        assert_eq!(v.grows_after, ms(600));
        assert_eq!(v.reset_after, ms(2_600));
        assert!(!check(&p, &st, T0 + s(1) - 1, 1).allowed);
        assert!(check(&p, &st, T0 + s(1), 1).allowed);
    }

    #[test]
    fn shaping_spaces_requests_evenly() {
        // 2/s, bucket of 5, wait up to 10 s: the bucket is the limit.
        let p = p(2, s(1), 5, s(10));
        let mut st = State::default();
        let mut delays = Vec::new();
        for left in [4, 3, 2, 1, 0] {
            let v = check(&p, &st, T0, 1);
            assert!(v.allowed);
            assert_eq!(v.remaining, left);
            delays.push(v.delay);
            st = v.state;
        }
        assert_eq!(delays, vec![0, ms(500), s(1), ms(1_500), s(2)]);
        let v = check(&p, &st, T0, 1);
        assert!(!v.allowed);
        assert_eq!(v.retry_after, Some(ms(500)));
        assert_eq!(v.reset_after, ms(2_500));
        // Half a unit later, one fits, and it leaves after the others.
        let v = check(&p, &st, T0 + ms(500), 1);
        assert!(v.allowed);
        assert_eq!(T0 + ms(500) + v.delay, T0 + ms(2_500));
    }

    #[test]
    fn shaping_rejects_waits_beyond_max_delay() {
        // 2/s, bucket of 5, wait up to 1 s: three at once, then full queue.
        let p = p(2, s(1), 5, s(1));
        let mut st = State::default();
        let v = check(&p, &st, T0, 1);
        assert_eq!(v.remaining, 2);
        // The queue binds (the bucket has 4 free): a third fits once the
        // unit ahead has drained.
        assert_eq!(v.grows_after, ms(500));
        assert_eq!(check(&p, &v.state, T0 + ms(500) - 1, 9).remaining, 2);
        assert_eq!(check(&p, &v.state, T0 + ms(500), 9).remaining, 3);
        st = v.state;
        let v = check(&p, &st, T0, 1);
        assert_eq!((v.delay, v.remaining), (ms(500), 1));
        st = v.state;
        let v = check(&p, &st, T0, 1);
        assert_eq!((v.delay, v.remaining), (s(1), 0));
        st = v.state;
        let v = check(&p, &st, T0, 1);
        assert!(!v.allowed);
        assert_eq!(v.retry_after, Some(ms(500)));
        assert_eq!(check(&p, &st, T0 + ms(500), 1).delay, s(1));
        assert!(!check(&p, &st, T0 + ms(500) - 1, 1).allowed);
    }

    #[test]
    fn cost_above_one_and_above_the_burst() {
        let p = p(1, s(1), 4, s(5));
        let v = check(&p, &State::default(), T0, 3);
        assert!(v.allowed);
        assert_eq!(v.delay, 0);
        assert_eq!(v.remaining, 1);
        // Behind 3 units: waits 3 s, but 2 more do not fit before 1 s.
        let v2 = check(&p, &v.state, T0, 2);
        assert!(!v2.allowed);
        assert_eq!(v2.retry_after, Some(s(1)));
        let v3 = check(&p, &v.state, T0 + s(1), 2);
        assert!(v3.allowed);
        assert_eq!(v3.delay, s(2));
        let v = check(&p, &State::default(), T0, 5);
        assert!(!v.allowed);
        assert_eq!(v.retry_after, None);
        assert_eq!(v.retry_hint(), s(4));
    }

    #[test]
    fn long_idle_empties_the_bucket() {
        let p = p(1, DAY, 10, 0);
        let st = State {
            lv: 10 * p.fluid.unit,
            ts: T0,
            u: p.fluid.unit,
        };
        let v = check(&p, &st, T0 + 300 * 365 * DAY, 10);
        assert!(v.allowed);
        assert_eq!(v.reset_after, 10 * DAY);
    }

    #[test]
    fn parameter_changes_stay_sane() {
        // 8 units at 2/s (unit 500_000) in a new bucket of 4 at 1/s: full.
        let st = State {
            lv: 8 * 500_000,
            ts: T0,
            u: 500_000,
        };
        let v = check(&p(1, s(1), 4, 0), &st, T0, 1);
        assert!(!v.allowed);
        assert_eq!(v.state.lv, 4_000_000);
        assert_eq!(v.retry_after, Some(s(1)));
        assert_eq!(v.reset_after, s(4));
    }

    fn replay(
        p: &Params,
        history: &[(Micros, u64)],
    ) -> (State, Micros, Vec<(Micros, Micros, u64)>) {
        let mut st = State::default();
        let mut now = T0;
        let mut taken = Vec::new();
        for &(g, c) in history {
            now += g;
            let v = check(p, &st, now, c);
            assert!(v.reset_after <= v.window && v.ttl <= v.window);
            assert!(v.delay <= p.max_delay());
            if v.allowed {
                taken.push((now, now + v.delay, c));
                st = v.state;
            }
        }
        (st, now, taken)
    }

    proptest! {


        #[test]
        fn shaped_requests_leave_spaced_at_the_rate(
            count in 1u64..20,
            period in 1u64..5_000,
            burst in 1u64..20,
            max_delay in 1u64..5_000,
            history in steps(1_000, 6, 150),
        ) {
            let p = p(count, period, burst, max_delay);
            let (_, _, taken) = replay(&p, &history);
            // Up to the whole microsecond each delay is rounded to.
            for w in taken.windows(2) {
                let (gap, cost) = (w[1].1 - w[0].1, w[0].2);
                prop_assert!((gap + 1) * count > cost * period);
            }
        }


    }
}
