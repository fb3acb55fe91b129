//! The rate-limiting algorithms (docs/configuration/limits.md): pure maths on (params, stored
//! state, now, cost).
//!
//! Every algorithm module has the same shape:
//!
//! - `Params`: validated parameters, built from config values (counts as
//!   `u64`, durations as [`Micros`]); `Params::new` rejects what is
//!   meaningless (zero, or too large to stay exact, see below).
//! - `State`: what the store keeps per (limit, client). `State::default()` is
//!   a fresh key. Its field names are short because they are the Redis hash
//!   fields the Lua scripts use.
//! - `effective(p, state, now) -> State`: the stored state brought to `now`
//!   and made sane under `p` (docs/operations.md: a limit whose rate or size changed
//!   keeps its state under the new parameters, so e.g. a backlog larger than
//!   the new bucket is clamped). `check` starts with it; with unchanged
//!   parameters it only moves time forward.
//! - `check(p, state, now, cost) -> Verdict<State>`: the decision. Nothing is
//!   stored by `check`: the caller commits [`Verdict::state`] (with
//!   [`Verdict::ttl`]) only if every limit of the request allowed it
//!   (all-or-nothing, docs/configuration/limits.md). A `cost` of 0 is treated as 1 (config
//!   validation rejects it before it gets here).
//!
//! - `settle(p, state, at, now, delta) -> Settled<State>`: a cost limit's
//!   estimate corrected once the response ends ([`settle`]: where and how
//!   far), for every algorithm but `sliding_log` and `concurrency`.
//!
//! `concurrency` differs: `acquire` / `release` a lease instead of `check`.
//!
//! # Integer maths, mirrored in Lua
//!
//! The Redis scripts mirror these functions line for line, and Lua 5.1
//! numbers are doubles (exact for integers up to 2^53). So time is `u64`
//! microseconds since the Unix epoch, there is no floating point in any
//! decision, every division says how it rounds (`floor` unless the
//! formula says `ceil`), and `Params::new` refuses parameters for which any
//! intermediate value could reach 2^53 (see [`MAX_EXACT`]). Each module's
//! doc gives its formulas.
//!
//! In Lua, `math.floor(a / b)` and `math.ceil(a / b)` are exact for
//! integers `0 <= a < 2^53`, `b >= 1`: the double division's rounding error
//! is below `a / b * 2^-53 < 1 / b`, less than the distance from a
//! non-integer quotient to the nearest integer, so rounding never crosses
//! one.
//!
//! # A request that can never pass
//!
//! A request whose `cost` exceeds the capacity (`limit` or `burst`) is
//! always rejected and no wait helps: its [`Verdict::retry_after`] is `None`.
//! [`Verdict::retry_hint`] gives the figure to put in `Retry-After` then
//! (the policy window: retrying sooner is pointless).
//!
//! # Headers
//!
//! `q` = [`Verdict::limit`], `w` = [`Verdict::window`], `r` =
//! [`Verdict::remaining`], `Retry-After` = [`Verdict::retry_hint`], and
//! `t` = [`Verdict::grows_hint`] (draft 11: `grows_after`, the time until
//! the available quota next grows; on a rejection the wait until this
//! request could pass, equal to `Retry-After`), or for the `draft10` style
//! [`Verdict::reset_hint`] (`reset_after`, the time until the quota is
//! whole again; on a rejection the same wait capped at `w`); seconds
//! rounded up.
//!
//! `grows_after` keeps a promise: a client that takes at most `remaining`
//! units within the next `grows_after` (or any longer span: without
//! traffic no algorithm's `remaining` ever shrinks) is never rejected by
//! the limit. Each module's doc gives its formula; where nothing can grow
//! (a full bucket, an unused window) it is the time the next unit would
//! take, or the window's end, never 0.

pub mod any;
pub mod concurrency;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod lease;
pub mod lockout;
#[cfg(test)]
mod promise;
#[cfg(test)]
mod properties;
pub mod settle;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

pub use any::{AlgoParams, AlgoState, AnyVerdict};
pub use lockout::{LockParams, LockState};

/// Microseconds: instants since the Unix epoch (UTC), and durations.
pub type Micros = u64;

/// One second in [`Micros`].
pub const SECOND: Micros = 1_000_000;

/// One day in [`Micros`].
pub const DAY: Micros = 86_400 * SECOND;

/// The largest integer a Lua 5.1 number (a double) holds exactly, 2^53 - 1.
/// No stored or intermediate value may exceed it.
pub const MAX_EXACT: u64 = (1 << 53) - 1;

/// The largest count (`limit`, `burst`, a rate's count) accepted: 10^12.
pub const MAX_COUNT: u64 = 1_000_000_000_000;

/// The longest duration (window, period, lease, `max_delay`) accepted:
/// 1000 days. With instants below 2^53 µs (the year 2255), sums of an
/// instant and such durations stay exact.
pub const MAX_DURATION: Micros = 1000 * DAY;

/// What one check says about one request under one limit.
///
/// Nothing is stored by a check: the caller commits `state` (for `ttl`) only
/// if every limit of the request allowed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict<S> {
    /// Whether the request may pass (possibly after `delay`).
    pub allowed: bool,
    /// How long to hold an admitted request before forwarding it (> 0 only
    /// with `max_delay` on `token_bucket` / `gcra`, or shaping on
    /// `leaky_bucket`); 0 when rejected.
    pub delay: Micros,
    /// The quota `q` for headers: `limit`, or `burst` for the buckets.
    pub limit: u64,
    /// The policy window `w` for headers: the window, or the time a bucket
    /// takes to go from empty to a full `burst`, or the lease.
    pub window: Micros,
    /// Units left after this request if it is allowed, or now if it is
    /// rejected (what requests of cost 1 could still take at this instant).
    pub remaining: u64,
    /// Time until the quota is fully back with no more traffic (draft 10's
    /// `t`). Always `<= window`: where the exact figure is larger (a
    /// `max_delay` reservation, a sliding window's current count that
    /// decays over the next window) it is capped at `window`.
    pub reset_after: Micros,
    /// Time until the available quota (`remaining`, as this verdict leaves
    /// the state) next grows with no more traffic: draft 11's `t`. At
    /// least 1; see the module doc for what it promises.
    pub grows_after: Micros,
    /// `Some(0)` when allowed. When rejected: `Some(d)`, the earliest wait
    /// after which the same request would pass if nothing else happened
    /// (exact: it is rejected at `now + d - 1` and allowed at `now + d`), or
    /// `None` when it can never pass (its cost exceeds the capacity).
    pub retry_after: Option<Micros>,
    /// The new state to store if the request is committed.
    pub state: S,
    /// How long the stored `state` must live; 0 means it equals a fresh key
    /// and may be deleted.
    pub ttl: Micros,
}

impl<S> Verdict<S> {
    /// The wait to advertise in `Retry-After` for a rejection: `retry_after`,
    /// or the policy `window` when the request can never pass. (It can
    /// exceed `window` only for `sliding_window`, up to twice it.)
    pub fn retry_hint(&self) -> Micros {
        self.retry_after.unwrap_or(self.window)
    }

    /// The draft-11 `t` to report for this limit
    /// (docs/configuration/limit-response.md): `grows_after` when allowed;
    /// on a rejection the time until this request could pass,
    /// [`Verdict::retry_hint`], so `t` and `Retry-After` are the same wait.
    pub fn grows_hint(&self) -> Micros {
        if self.allowed {
            self.grows_after
        } else {
            self.retry_hint()
        }
    }

    /// The draft-10 `t` to report for this limit (the `draft10` header
    /// style): `reset_after` when allowed; on a rejection the time until
    /// this request could pass, [`Verdict::retry_hint`], capped at
    /// `window` so that `t <= w` holds. `Retry-After` is never earlier than
    /// `t`; rounding both up to whole seconds keeps the order.
    pub fn reset_hint(&self) -> Micros {
        if self.allowed {
            self.reset_after
        } else {
            self.retry_hint().min(self.window)
        }
    }
}

/// Parameters an algorithm cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// A count or duration is zero where that means nothing.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// A value is too large to keep the maths exact (see [`MAX_EXACT`]).
    #[error("{field} is too large (at most {max})")]
    TooLarge {
        /// The offending parameter.
        field: &'static str,
        /// The largest accepted value, in the parameter's unit.
        max: u64,
    },
    /// A calendar window whose bounds are not `start < end < next`.
    #[error("a calendar window's bounds must be start < end < next")]
    CalendarBounds,
    /// A rate faster than one unit per microsecond, which GCRA's integer
    /// emission interval cannot express.
    #[error("rate is too fast: at most one per microsecond")]
    TooFast,
    /// The combination of `burst`, the rate and `max_delay` needs more than
    /// 2^53 in the exact integer representation.
    #[error("burst, rate and max_delay together are too large to stay exact; lower the burst or max_delay, or use a rate whose period divides more evenly by its count")]
    Precision,
}

/// A rate: `count` units per `period`, kept as two integers so the maths
/// stays exact (`5/10s` is not rounded to 0.5/s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    count: u64,
    period: Micros,
}

impl Rate {
    /// `count` units per `period` microseconds; both at least 1, at most
    /// [`MAX_COUNT`] and [`MAX_DURATION`].
    pub fn new(count: u64, period: Micros) -> Result<Rate, ParamError> {
        nonzero("rate count", count)?;
        nonzero("rate period", period)?;
        at_most("rate count", count, MAX_COUNT)?;
        at_most("rate period", period, MAX_DURATION)?;
        Ok(Rate { count, period })
    }

    /// Units per period.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period, in microseconds.
    pub fn period(&self) -> Micros {
        self.period
    }

    /// The rate as a reduced fraction `(unit, drain)`: `drain / unit` units
    /// per microsecond, with `g = gcd(count, period)`, `unit = period / g`
    /// and `drain = count / g`.
    ///
    /// The buckets keep their level in *ticks*: one unit is `unit` ticks and
    /// one microsecond drains (or refills) `drain` ticks, so continuous
    /// refilling is exact integer maths.
    pub fn ticks(&self) -> (u64, u64) {
        let g = gcd(self.count, self.period);
        (self.period / g, self.count / g)
    }
}

/// Greatest common divisor (Euclid); `gcd(x, 0) = x`.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `ceil(a / b)`, and 0 when `b` is 0 (never the case with validated
/// parameters; it keeps the function total). Lua: `math.ceil(a / b)`.
pub(crate) fn ceil_div(a: u64, b: u64) -> u64 {
    a.checked_div(b)
        .map_or(0, |q| q + u64::from(q.wrapping_mul(b) != a))
}

/// `Err(Zero)` if `v` is 0.
pub(crate) fn nonzero(field: &'static str, v: u64) -> Result<(), ParamError> {
    if v == 0 {
        Err(ParamError::Zero(field))
    } else {
        Ok(())
    }
}

/// `Err(TooLarge)` if `v > max`.
pub(crate) fn at_most(field: &'static str, v: u64, max: u64) -> Result<(), ParamError> {
    if v > max {
        Err(ParamError::TooLarge { field, max })
    } else {
        Ok(())
    }
}

/// The fluid shared by `token_bucket` (where the level is the tokens
/// missing from a full bucket) and `leaky_bucket` (where it is the water in
/// the bucket): a level in ticks that drains continuously at the rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fluid {
    /// Ticks per unit (`Rate::ticks().0`).
    pub unit: u64,
    /// Ticks drained per microsecond (`Rate::ticks().1`).
    pub drain: u64,
    /// The bucket: `burst * unit` ticks.
    pub cap: u64,
    /// The most the level may exceed `cap` (a `max_delay` reservation):
    /// `max_delay * drain` ticks.
    pub slack: u64,
}

impl Fluid {
    /// The fluid for `burst` units at `rate`, allowing `max_delay` of
    /// backlog beyond a full bucket. Rejects combinations where
    /// `2 * cap + slack` (the largest intermediate: a level at `cap + slack`
    /// plus a cost of up to `cap`) would exceed [`MAX_EXACT`].
    pub(crate) fn new(rate: Rate, burst: u64, max_delay: Micros) -> Result<Fluid, ParamError> {
        let (unit, drain) = rate.ticks();
        let cap = burst.checked_mul(unit).ok_or(ParamError::Precision)?;
        let slack = max_delay.checked_mul(drain).ok_or(ParamError::Precision)?;
        let top = cap
            .checked_mul(2)
            .and_then(|c| c.checked_add(slack))
            .ok_or(ParamError::Precision)?;
        if top > MAX_EXACT {
            return Err(ParamError::Precision);
        }
        Ok(Fluid {
            unit,
            drain,
            cap,
            slack,
        })
    }

    /// The time to drain `level` ticks: `ceil(level / drain)`.
    pub(crate) fn time_to_drain(&self, level: u64) -> Micros {
        ceil_div(level, self.drain)
    }

    /// `level` after `elapsed` microseconds of draining, floored at 0:
    /// `0` if `elapsed >= ceil(level / drain)`, else `level - elapsed *
    /// drain`. Comparing first keeps `elapsed * drain` below `level +
    /// drain`, so a long idle key never overflows.
    pub(crate) fn drained(&self, level: u64, elapsed: Micros) -> u64 {
        if elapsed >= self.time_to_drain(level) {
            0
        } else {
            level - elapsed * self.drain
        }
    }

    /// A stored level brought to these parameters: converted from the tick
    /// size `old_unit` it was stored with if that differs (rounded up to
    /// whole units: `ceil(level / old_unit) * unit`, capped first so the
    /// product stays exact), then clamped to `cap + slack`. A stored level
    /// without a unit (`old_unit = 0`) means nothing and becomes 0.
    pub(crate) fn adopt(&self, level: u64, old_unit: u64) -> u64 {
        let top = self.cap + self.slack;
        let level = if old_unit == self.unit {
            level
        } else if old_unit == 0 {
            0
        } else {
            let units = ceil_div(level, old_unit).min(ceil_div(top, self.unit));
            units * self.unit
        };
        level.min(top)
    }

    /// Whole units below the cap at `level`: `floor((cap - level) / unit)`,
    /// 0 if the level is at or above the cap.
    pub(crate) fn units_free(&self, level: u64) -> u64 {
        self.cap.saturating_sub(level) / self.unit.max(1)
    }

    /// The time until [`Fluid::units_free`] at `level` grows by one: the
    /// ticks to drain down to `cap - (free + 1) * unit`,
    ///
    /// ```text
    /// ticks = level - cap + unit                   if level >= cap
    ///       = unit - (cap - level) % unit          otherwise
    /// next  = ceil(ticks / drain)
    /// ```
    ///
    /// At least 1. A full bucket (nothing left to grow) gets one unit's
    /// time, `ceil(unit / drain)`.
    pub(crate) fn next_unit(&self, level: u64) -> Micros {
        self.time_to_drain(ticks_to_next_unit(level, self.cap, self.unit))
    }
}

/// How far `level` must fall for the whole units below `cap`,
/// `floor((cap - level) / unit)`, to grow by one: `level - cap + unit`
/// above the cap, else `unit - (cap - level) % unit`; one `unit` when
/// `level` is 0 and nothing can grow. At least 1. (GCRA's `ttl` below its
/// tolerance is such a level, in microseconds.)
pub(crate) fn ticks_to_next_unit(level: u64, cap: u64, unit: u64) -> u64 {
    let unit = unit.max(1);
    if level >= cap {
        level - cap + unit
    } else {
        unit - (cap - level) % unit
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Helpers shared by the algorithm tests.

    use super::{Micros, SECOND};

    /// 2023-11-14T00:00:00Z, aligned to every window that divides a day.
    pub(crate) const T0: Micros = 1_699_920_000 * SECOND;

    /// Milliseconds in [`Micros`].
    pub(crate) const fn ms(n: u64) -> Micros {
        n * 1_000
    }

    /// Seconds in [`Micros`].
    pub(crate) const fn s(n: u64) -> Micros {
        n * SECOND
    }

    /// A random request history: `(gap since the previous request, cost)`.
    pub(crate) fn steps(
        max_gap: Micros,
        max_cost: u64,
        len: usize,
    ) -> impl proptest::strategy::Strategy<Value = Vec<(Micros, u64)>> {
        proptest::collection::vec((0..=max_gap, 1..=max_cost), 0..len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_ticks_are_reduced() {
        assert_eq!(Rate::new(10, SECOND).unwrap().ticks(), (100_000, 1));
        assert_eq!(Rate::new(5, 10 * SECOND).unwrap().ticks(), (2_000_000, 1));
        assert_eq!(Rate::new(3, SECOND).unwrap().ticks(), (1_000_000, 3));
        assert_eq!(Rate::new(1_000_000, DAY).unwrap().ticks(), (86_400, 1));
        assert_eq!(Rate::new(0, SECOND), Err(ParamError::Zero("rate count")));
        assert_eq!(Rate::new(1, 0), Err(ParamError::Zero("rate period")));
    }

    #[test]
    fn hints_keep_retry_after_no_earlier_than_t() {
        let v = Verdict {
            allowed: false,
            delay: 0,
            limit: 20,
            window: 2 * SECOND,
            remaining: 0,
            reset_after: 2 * SECOND,
            grows_after: 300_000,
            retry_after: Some(100_000),
            state: (),
            ttl: 2 * SECOND,
        };
        assert_eq!((v.reset_hint(), v.retry_hint()), (100_000, 100_000));
        assert_eq!(v.grows_hint(), 100_000, "a rejection's t is its wait");
        let never = Verdict {
            retry_after: None,
            reset_after: 0,
            ..v.clone()
        };
        assert_eq!(
            (never.reset_hint(), never.retry_hint()),
            (2 * SECOND, 2 * SECOND)
        );
        let long = Verdict {
            retry_after: Some(5 * SECOND),
            reset_after: SECOND,
            ..v.clone()
        };
        assert_eq!(
            (long.reset_hint(), long.retry_hint()),
            (2 * SECOND, 5 * SECOND),
            "the wait, capped at the window"
        );
        assert_eq!(long.grows_hint(), 5 * SECOND, "draft 11: not capped");
        assert_eq!(never.grows_hint(), 2 * SECOND, "never: the window");
        let ok = Verdict {
            allowed: true,
            retry_after: Some(0),
            ..v
        };
        assert_eq!(ok.reset_hint(), 2 * SECOND);
        assert_eq!(ok.grows_hint(), 300_000);
    }

    #[test]
    fn ceil_div_rounds_up_and_is_total() {
        assert_eq!(ceil_div(0, 3), 0);
        assert_eq!(ceil_div(6, 3), 2);
        assert_eq!(ceil_div(7, 3), 3);
        assert_eq!(ceil_div(u64::MAX, 1), u64::MAX);
        assert_eq!(ceil_div(5, 0), 0);
    }

    #[test]
    fn fluid_drains_without_overflow() {
        let f = Fluid::new(Rate::new(3, SECOND).unwrap(), 10, 0).unwrap();
        assert_eq!(f.cap, 10_000_000);
        assert_eq!(f.drained(f.cap, 1), f.cap - 3);
        assert_eq!(f.drained(f.cap, u64::MAX), 0);
        assert_eq!(f.time_to_drain(f.cap), 3_333_334);
    }

    #[test]
    fn fluid_next_unit_is_when_one_more_unit_is_free() {
        // 3 ticks per µs, units of 1_000_000 ticks, a bucket of 10.
        let f = Fluid::new(Rate::new(3, SECOND).unwrap(), 10, SECOND).unwrap();
        // Full: one unit's time.
        assert_eq!(f.next_unit(0), 333_334);
        // 2.5 units in: 7.5 free, so 7 whole; the 8th after half a unit.
        assert_eq!(f.units_free(2_500_000), 7);
        assert_eq!(f.next_unit(2_500_000), 166_667);
        assert_eq!(f.units_free(2_500_000 - 3 * 166_667), 8);
        assert_eq!(f.units_free(2_500_000 - 3 * 166_666), 7);
        // Exactly 3 units in: a whole unit to go.
        assert_eq!(f.next_unit(3_000_000), 333_334);
        // Over the cap (a reservation): back under it, then a unit more.
        assert_eq!(f.next_unit(f.cap + 600_000), 533_334);
        assert_eq!(f.next_unit(f.cap), 333_334);
    }

    #[test]
    fn fluid_adopts_other_units() {
        let f = Fluid::new(Rate::new(1, SECOND).unwrap(), 10, 0).unwrap();
        // 2.5 units at 2/s (unit 500_000) -> 3 units at 1/s.
        assert_eq!(f.adopt(1_250_000, 500_000), 3_000_000);
        // More than the new bucket -> clamped to it.
        assert_eq!(f.adopt(50 * 500_000, 500_000), f.cap);
        assert_eq!(f.adopt(7, 0), 0);
        assert_eq!(f.adopt(7, f.unit), 7);
    }

    #[test]
    fn fluid_rejects_inexact_sizes() {
        let r = Rate::new(7, DAY).unwrap();
        assert_eq!(Fluid::new(r, 1_000_000, 0), Err(ParamError::Precision));
        assert!(Fluid::new(r, 1_000, 0).is_ok());
    }
}
