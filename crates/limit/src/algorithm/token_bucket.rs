//! `token_bucket`: a bucket of `burst` tokens, refilled continuously at
//! `rate`, starting full; a request takes `cost` tokens. With `max_delay`,
//! a request that would be allowed within `max_delay` is admitted now and
//! held for that wait (the bucket goes into debt by at most `max_delay`
//! worth of tokens).
//!
//! # Formulas (integer maths; the Lua script mirrors them)
//!
//! The rate `count / period` is reduced by `g = gcd(count, period)` to
//! `unit = period / g` ticks per token and `drain = count / g` ticks per
//! microsecond, so refilling is exact. The state keeps the *deficit* `d`:
//! ticks missing from a full bucket (0 = full, a fresh key), which may
//! exceed `cap` by reservations.
//!
//! ```text
//! cap   = burst * unit;  slack = max_delay * drain;  window = ceil(cap / drain)
//! -- effective(): adopt, then refill
//! d     = s.d                                  if s.u == unit
//!       = min(ceil(s.d / s.u), ceil((cap + slack) / unit)) * unit   if s.u != unit (0 if s.u == 0)
//! d     = min(d, cap + slack)
//! el    = max(0, now - s.ts)
//! d     = 0 if el >= ceil(d / drain) else d - el * drain
//! ts    = max(s.ts, now)
//! -- check()
//! k     = cost * unit;  need = d + k
//! wait  = 0 if need <= cap else ceil((need - cap) / drain)
//! ok    = cost <= burst and wait <= max_delay;  delay = wait
//! d'    = need if ok else d;   state = {d = d', ts = ts, u = unit}
//! remaining   = floor(max(0, cap - d') / unit)     -- whole tokens in the bucket
//! ttl         = ceil(d' / drain)                   -- until full again
//! reset_after = min(ttl, window)
//! grows_after = ceil((d' - cap + unit if d' >= cap else unit - (cap - d') % unit) / drain)
//! retry_after = wait - max_delay                   -- when the wait has shrunk to max_delay
//! ```
//!
//! `grows_after` (draft 11's `t`) is when the next whole token is back
//! (`Fluid::next_unit`); a full bucket reports the time one token takes.
//!
//! `Params::new` refuses parameters where `2 * cap + slack` reaches 2^53.
//! A stored deficit in another tick size (the rate changed) is converted
//! rounding up to whole tokens; a burst change keeps the deficit, so a
//! larger bucket gains the extra tokens at once, as a fresh key would have
//! them.
//!
//! # Settlements ([`super::settle`])
//!
//! ```text
//! now = max(now, at);  s = effective(now)     -- d refilled to now
//! (d', applied) = shift(d, delta, unit, 0, cap + slack)   -- tokens out (delta > 0) or back
//! state = {d = d', ts = s.ts, u = unit};  ttl = ceil(d' / drain)
//! ```

use super::settle::{clamp_delta, shift, Settled};
use super::{at_most, nonzero, Fluid, Micros, ParamError, Rate, Verdict, MAX_COUNT, MAX_DURATION};

/// Validated parameters of a `token_bucket` limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    rate: Rate,
    burst: u64,
    max_delay: Micros,
    fluid: Fluid,
}

impl Params {
    /// `burst` tokens (at least 1; the config's default is the rate's
    /// count), refilled at `rate`, admitting with a wait of up to
    /// `max_delay` (0: never wait).
    pub fn new(rate: Rate, burst: u64, max_delay: Micros) -> Result<Params, ParamError> {
        nonzero("burst", burst)?;
        at_most("burst", burst, MAX_COUNT)?;
        at_most("max_delay", max_delay, MAX_DURATION)?;
        Ok(Params {
            rate,
            burst,
            max_delay,
            fluid: Fluid::new(rate, burst, max_delay)?,
        })
    }

    /// The refill rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The bucket size in tokens.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The longest wait a request may be held instead of rejected.
    pub fn max_delay(&self) -> Micros {
        self.max_delay
    }

    /// The time to refill an empty bucket: `ceil(burst * unit / drain)`.
    pub fn window(&self) -> Micros {
        self.fluid.time_to_drain(self.fluid.cap)
    }
}

/// The stored bucket of one key (Redis hash fields `d`, `ts`, `u`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State {
    /// Ticks missing from a full bucket (more than the bucket while
    /// reservations are outstanding).
    pub d: u64,
    /// When `d` was computed (µs since the epoch).
    pub ts: Micros,
    /// The tick size `d` is counted in (ticks per token); 0 on a fresh key.
    pub u: u64,
}

/// `state` brought to `now` under `p`: converted to its tick size, clamped,
/// and refilled for the time since `ts`.
pub fn effective(p: &Params, state: &State, now: Micros) -> State {
    let f = &p.fluid;
    let d = f.adopt(state.d, state.u);
    State {
        d: f.drained(d, now.saturating_sub(state.ts)),
        ts: state.ts.max(now),
        u: f.unit,
    }
}

/// Decide a request of `cost` tokens at `now`.
pub fn check(p: &Params, state: &State, now: Micros, cost: u64) -> Verdict<State> {
    let cost = cost.max(1);
    let f = &p.fluid;
    let s = effective(p, state, now);
    let fits = cost <= p.burst;
    let (allowed, delay, retry_after, d) = if fits {
        let need = s.d + cost * f.unit;
        let wait = f.time_to_drain(need.saturating_sub(f.cap));
        if wait <= p.max_delay {
            (true, wait, Some(0), need)
        } else {
            (false, 0, Some(wait - p.max_delay), s.d)
        }
    } else {
        (false, 0, None, s.d)
    };
    let ttl = f.time_to_drain(d);
    let window = p.window();
    Verdict {
        allowed,
        delay,
        limit: p.burst,
        window,
        remaining: f.units_free(d),
        reset_after: ttl.min(window),
        grows_after: f.next_unit(d),
        retry_after,
        state: State { d, ..s },
        ttl,
    }
}

/// Apply a settlement of `delta` tokens at `now` to a request decided at
/// `at` (module doc, "Settlements").
pub fn settle(p: &Params, state: &State, at: Micros, now: Micros, delta: i64) -> Settled<State> {
    let f = &p.fluid;
    let s = effective(p, state, now.max(at));
    let (d, applied) = shift(s.d, clamp_delta(delta), f.unit, 0, f.cap + f.slack);
    Settled {
        state: State { d, ..s },
        ttl: f.time_to_drain(d),
        applied,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{ms, s, T0};
    use super::super::{DAY, SECOND};
    use super::*;

    fn p(count: u64, period: Micros, burst: u64, max_delay: Micros) -> Params {
        Params::new(Rate::new(count, period).unwrap(), burst, max_delay).unwrap()
    }

    #[test]
    fn rejects_meaningless_params() {
        let r = Rate::new(1, SECOND).unwrap();
        assert_eq!(Params::new(r, 0, 0), Err(ParamError::Zero("burst")));
        assert!(Params::new(r, 1, MAX_DURATION + 1).is_err());
        let slow = Rate::new(7, DAY).unwrap();
        assert_eq!(Params::new(slow, 1_000_000, 0), Err(ParamError::Precision));
    }

    #[test]
    fn burst_then_refill() {
        // 10/s, burst 20: the documented `per_client` (q=20;w=2).
        let p = p(10, s(1), 20, 0);
        assert_eq!(p.window(), s(2));
        let mut st = State::default();
        for i in 0..20 {
            let v = check(&p, &st, T0, 1);
            assert!(v.allowed);
            assert_eq!(v.delay, 0);
            assert_eq!(v.remaining, 19 - i);
            assert_eq!(v.reset_after, ms(100) * (i + 1));
            assert_eq!(v.grows_after, ms(100), "draft 11: the next token");
            assert_eq!((v.limit, v.window), (20, s(2)));
            st = v.state;
        }
        let v = check(&p, &st, T0, 1);
        assert!(!v.allowed);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.retry_after, Some(ms(100)));
        assert_eq!(v.reset_after, s(2));
        assert!(!check(&p, &st, T0 + ms(100) - 1, 1).allowed);
        let v = check(&p, &st, T0 + ms(100), 1);
        assert!(v.allowed);
        assert_eq!(v.remaining, 0);
        // After one second: 10 tokens back.
        let v = check(&p, &v.state, T0 + ms(1_100), 5);
        assert!(v.allowed);
        assert_eq!(v.remaining, 5);
        assert_eq!(v.reset_after, ms(1_500));
        assert_eq!(v.grows_after, ms(100));
        // Between tokens: the next one is a part of an interval away.
        let v = check(&p, &v.state, T0 + ms(1_130), 1);
        assert_eq!((v.remaining, v.grows_after), (4, ms(70)));
        // A full bucket: the time one token takes.
        let v = check(&p, &State::default(), T0, 20 + 1);
        assert_eq!((v.remaining, v.grows_after), (20, ms(100)));
    }

    #[test]
    fn fractional_rates_are_exact() {
        // 3 per second: a token every 333_333.3 µs, and no drift.
        let p = p(3, s(1), 3, 0);
        let mut st = check(&p, &State::default(), T0, 3).state;
        let mut now = T0;
        let mut times = Vec::new();
        while times.len() < 3 {
            let v = check(&p, &st, now, 1);
            if v.allowed {
                times.push(now - T0);
                st = v.state;
            } else {
                now += v.retry_after.unwrap();
            }
        }
        assert_eq!(times, vec![333_334, 666_667, 1_000_000]);
    }

    #[test]
    fn cost_above_one_and_above_the_burst() {
        let p = p(1, s(1), 5, 0);
        let v = check(&p, &State::default(), T0, 3);
        assert!(v.allowed);
        assert_eq!(v.remaining, 2);
        let v2 = check(&p, &v.state, T0, 4);
        assert!(!v2.allowed);
        assert_eq!(v2.remaining, 2);
        assert_eq!(v2.retry_after, Some(s(2)));
        let v = check(&p, &State::default(), T0, 6);
        assert!(!v.allowed);
        assert_eq!(v.retry_after, None);
        assert_eq!(v.retry_hint(), s(5));
        assert_eq!(v.remaining, 5);
        assert_eq!(v.ttl, 0);
    }

    #[test]
    fn max_delay_reserves_and_holds() {
        let p = p(10, s(1), 2, ms(300));
        let mut st = State::default();
        let mut delays = Vec::new();
        loop {
            let v = check(&p, &st, T0, 1);
            if !v.allowed {
                // The next would wait 400 ms: it fits once that is 300 ms.
                assert_eq!(v.retry_after, Some(ms(100)));
                assert_eq!(v.remaining, 0);
                assert_eq!(v.reset_after, p.window());
                assert!(!check(&p, &st, T0 + ms(100) - 1, 1).allowed);
                let v = check(&p, &st, T0 + ms(100), 1);
                assert!(v.allowed);
                assert_eq!(v.delay, ms(300));
                break;
            }
            delays.push(v.delay);
            // Full again once every reservation is paid back.
            assert_eq!(v.ttl, ms(100) * delays.len() as u64);
            assert!(v.reset_after <= p.window());
            st = v.state;
        }
        assert_eq!(delays, vec![0, 0, ms(100), ms(200), ms(300)]);
    }

    #[test]
    fn long_idle_refills_without_overflow() {
        let p = p(1_000_000, s(1), 1_000_000, 0);
        let st = State {
            d: 1_000_000,
            ts: T0,
            u: 1,
        };
        let v = check(&p, &st, u64::MAX / 2, 1_000_000);
        assert!(v.allowed);
        let v = check(&p, &st, T0 + 500 * 365 * DAY, 1);
        assert_eq!(v.remaining, 999_999);
    }

    #[test]
    fn parameter_changes_stay_sane() {
        // 4 tokens missing at 2/s (unit 500_000) ...
        let st = State {
            d: 4 * 500_000,
            ts: T0,
            u: 500_000,
        };
        // ... are 4 tokens missing at 1/s (unit 1_000_000), in a bucket of 5.
        let v = check(&p(1, s(1), 5, 0), &st, T0, 1);
        assert!(v.allowed);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.state.u, 1_000_000);
        // A smaller bucket: the deficit is clamped to it (empty, not in debt).
        let v = check(&p(1, s(1), 2, 0), &st, T0, 1);
        assert!(!v.allowed);
        assert_eq!(v.retry_after, Some(s(1)));
        assert_eq!(v.state.d, 2_000_000);
        // A larger bucket gains the difference.
        let v = check(&p(2, s(1), 10, 0), &st, T0, 6);
        assert!(v.allowed);
        assert_eq!(v.remaining, 0);
    }
}
