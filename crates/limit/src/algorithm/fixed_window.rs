//! `fixed_window`: at most `limit` units per aligned window (the classic
//! INCR + EXPIRE counter).
//!
//! Windows are aligned to the Unix epoch (`start = now - now % window`), or
//! are calendar months in UTC ([`Window::Month`]).
//!
//! # Formulas (integer maths; the Lua script mirrors them)
//!
//! ```text
//! (start, end) = Window::bounds(now)
//! n   = s.n if start <= s.ws < end else 0      -- a counter of another window is stale
//! ok  = n + cost <= limit
//! n'  = n + cost if ok else n;  state = {ws = start, n = n'}
//! remaining   = limit - n'                    (saturating at 0)
//! reset_after = grows_after = retry_after = ttl = end - now
//! window      = end - start
//! ```
//!
//! `grows_after` (draft 11's `t`) is the window's end: the quota grows only
//! when the next window starts.
//!
//! With unchanged parameters `s.ws` is either `start` or an older window's
//! start. After a change of `window`, a counter whose window began inside
//! the current one is kept (its units were all taken in the current window);
//! any other is dropped. A lowered `limit` leaves `n > limit`: everything is
//! rejected until the window ends.
//!
//! # Settlements ([`super::settle`])
//!
//! ```text
//! now = max(now, at);  (start, end) = Window::bounds(now)
//! n   = effective(now).n                      -- at's window while current, else the current one
//! (n', applied) = shift(n, delta, 1, 0, MAX_LEVEL)
//! state = {ws = start, n = n'};  ttl = end - now + linger if n' > 0 else 0
//! ```

use super::settle::{clamp_delta, shift, Settled, MAX_LEVEL};
use super::{at_most, nonzero, Micros, ParamError, Verdict, DAY, MAX_COUNT, MAX_DURATION};

/// The length of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// A fixed duration, windows aligned to the Unix epoch.
    Fixed(Micros),
    /// Calendar months in UTC, from the first of the month at 00:00.
    Month,
    /// A calendar period ([`crate::calendar`]) the caller computed for its
    /// clock, with the one after it: `[start, end)` then `[end, next)`. A
    /// store whose clock is already past `end` counts in the next period;
    /// one still before `start` (behind the caller's clock by less than a
    /// period) counts in `[start, end)`. The state outlives the period by
    /// a day (`ttl = end - now + DAY`).
    Calendar {
        /// The period's first instant.
        start: Micros,
        /// Its end, the next period's start.
        end: Micros,
        /// The next period's end.
        next: Micros,
    },
}

impl Window {
    /// The window holding `now`: `(start, end)`, `start <= now < end`.
    ///
    /// `Fixed(w)`: `start = now - now % w`, `end = start + w`. `Month`:
    /// `day = floor(now / DAY)`, `(y, m) = civil_from_days(day)`, `start =
    /// days_from_civil(y, m, 1) * DAY`, `end` the same for the next month.
    pub fn bounds(&self, now: Micros) -> (Micros, Micros) {
        match *self {
            Window::Fixed(w) => {
                let w = w.max(1);
                let start = now - now % w;
                (start, start.saturating_add(w))
            }
            Window::Month => {
                let (y, m, _) = civil_from_days(now / DAY);
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                (
                    days_from_civil(y, m, 1).saturating_mul(DAY),
                    days_from_civil(ny, nm, 1).saturating_mul(DAY),
                )
            }
            // Past `next` never happens for bounds computed within a
            // period of the store's clock; the window then ends just after
            // `now`, so the maths stays defined.
            Window::Calendar { start, end, next } => {
                if now >= end {
                    (end, next.max(now + 1))
                } else {
                    (start, end)
                }
            }
        }
    }

    /// How long state outlives its window: a calendar period's a day (a
    /// quota's counter is still there to read just after its period),
    /// others' nothing.
    pub fn linger(&self) -> Micros {
        match self {
            Window::Calendar { .. } => DAY,
            _ => 0,
        }
    }
}

/// The civil date `(year, month 1..=12, day 1..=31)` of `days` since
/// 1970-01-01 (Howard Hinnant's `civil_from_days`, restricted to dates from
/// 1970 so that every step is non-negative integer maths).
pub fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the epoch to 0000-03-01 so that leap days end each 400-year era.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from March 1st
    let mp = (5 * doy + 2) / 153; // [0, 11], March = 0
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// Days since 1970-01-01 of the civil date `(year >= 1970, month, day)`
/// (Howard Hinnant's `days_from_civil`); the inverse of
/// [`civil_from_days`].
pub fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = y - u64::from(m <= 2);
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).saturating_sub(719_468)
}

/// Validated parameters of a `fixed_window` limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    limit: u64,
    window: Window,
}

impl Params {
    /// At most `limit` units per `window`; `limit >= 1`, a fixed window at
    /// least 1 µs.
    pub fn new(limit: u64, window: Window) -> Result<Params, ParamError> {
        nonzero("limit", limit)?;
        at_most("limit", limit, MAX_COUNT)?;
        match window {
            Window::Fixed(w) => {
                nonzero("window", w)?;
                at_most("window", w, MAX_DURATION)?;
            }
            Window::Calendar { start, end, next } if !(start < end && end < next) => {
                return Err(ParamError::CalendarBounds);
            }
            _ => {}
        }
        Ok(Params { limit, window })
    }

    /// The quota.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window.
    pub fn window(&self) -> Window {
        self.window
    }
}

/// The stored counter of one key (Redis hash fields `ws`, `n`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State {
    /// Start of the window the count belongs to (µs since the epoch).
    pub ws: Micros,
    /// Units taken in that window.
    pub n: u64,
}

/// `state` brought to `now` under `p`: the count of the current window
/// (zero if the stored one is of another window).
pub fn effective(p: &Params, state: &State, now: Micros) -> State {
    let (start, end) = p.window.bounds(now);
    let n = if (start..end).contains(&state.ws) {
        state.n
    } else {
        0
    };
    State { ws: start, n }
}

/// Decide a request of `cost` units at `now`.
pub fn check(p: &Params, state: &State, now: Micros, cost: u64) -> Verdict<State> {
    let cost = cost.max(1);
    let (start, end) = p.window.bounds(now);
    let s = effective(p, state, now);
    let fits = cost <= p.limit;
    let allowed = fits && s.n.saturating_add(cost) <= p.limit;
    let n = if allowed { s.n + cost } else { s.n };
    let left = end - now;
    Verdict {
        allowed,
        delay: 0,
        limit: p.limit,
        window: end - start,
        remaining: p.limit.saturating_sub(n),
        reset_after: left,
        grows_after: left,
        retry_after: if allowed {
            Some(0)
        } else if fits {
            // The next window starts empty, and the request fits in it.
            Some(left)
        } else {
            None
        },
        state: State { ws: start, n },
        ttl: if n > 0 { left + p.window.linger() } else { 0 },
    }
}

/// Apply a settlement of `delta` units at `now` to a request decided at
/// `at` (module doc, "Settlements").
pub fn settle(p: &Params, state: &State, at: Micros, now: Micros, delta: i64) -> Settled<State> {
    let now = now.max(at);
    let (start, end) = p.window.bounds(now);
    let n = effective(p, state, now).n;
    let (n, applied) = shift(n, clamp_delta(delta), 1, 0, MAX_LEVEL);
    Settled {
        state: State { ws: start, n },
        ttl: if n > 0 {
            end - now + p.window.linger()
        } else {
            0
        },
        applied,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{ms, s, T0};
    use super::super::SECOND;
    use super::*;
    use proptest::prelude::*;

    fn p(limit: u64, w: Micros) -> Params {
        Params::new(limit, Window::Fixed(w)).unwrap()
    }

    #[test]
    fn rejects_meaningless_params() {
        assert_eq!(
            Params::new(0, Window::Fixed(s(1))),
            Err(ParamError::Zero("limit"))
        );
        assert_eq!(
            Params::new(1, Window::Fixed(0)),
            Err(ParamError::Zero("window"))
        );
        assert!(Params::new(1, Window::Month).is_ok());
    }

    #[test]
    fn counts_within_a_window_and_resets_at_the_boundary() {
        let p = p(3, s(60));
        let mut st = State::default();
        let t = T0 + s(10);
        for (i, left) in [(0, 2), (1, 1), (2, 0)] {
            let v = check(&p, &st, t + ms(i), 1);
            assert!(v.allowed);
            assert_eq!(v.remaining, left);
            assert_eq!(v.reset_after, s(50) - ms(i));
            assert_eq!(v.grows_after, s(50) - ms(i), "draft 11: the window's end");
            assert_eq!(v.retry_after, Some(0));
            assert_eq!(v.limit, 3);
            assert_eq!(v.window, s(60));
            assert_eq!(v.ttl, s(50) - ms(i));
            st = v.state;
        }
        let v = check(&p, &st, T0 + s(59), 1);
        assert!(!v.allowed);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.retry_after, Some(s(1)));
        assert_eq!(v.reset_after, s(1));
        // The last microsecond of the window is still in it.
        assert!(!check(&p, &st, T0 + s(60) - 1, 1).allowed);
        // The next window starts empty.
        let v = check(&p, &st, T0 + s(60), 1);
        assert!(v.allowed);
        assert_eq!(v.remaining, 2);
        assert_eq!(v.reset_after, s(60));
        assert_eq!(
            v.state,
            State {
                ws: T0 + s(60),
                n: 1
            }
        );
    }

    #[test]
    fn cost_above_one_and_above_the_limit() {
        let p = p(10, s(1));
        let v = check(&p, &State::default(), T0, 7);
        assert!(v.allowed);
        assert_eq!(v.remaining, 3);
        let st = v.state;
        let v = check(&p, &st, T0 + ms(500), 4);
        assert!(!v.allowed);
        assert_eq!(v.remaining, 3);
        assert_eq!(v.retry_after, Some(ms(500)));
        assert!(check(&p, &st, T0 + ms(500), 3).allowed);
        // More than the whole quota: never.
        let v = check(&p, &State::default(), T0, 11);
        assert!(!v.allowed);
        assert_eq!(v.retry_after, None);
        assert_eq!(v.retry_hint(), s(1));
        assert_eq!(v.remaining, 10);
        assert_eq!(v.ttl, 0);
    }

    #[test]
    fn cost_zero_counts_as_one() {
        let v = check(&p(2, s(1)), &State::default(), T0, 0);
        assert_eq!(v.state.n, 1);
    }

    #[test]
    fn long_idle_is_a_fresh_window() {
        let p = p(2, s(10));
        let st = State { ws: T0, n: 2 };
        let v = check(&p, &st, T0 + 400 * 365 * DAY, 1);
        assert!(v.allowed);
        assert_eq!(v.remaining, 1);
        assert_eq!(v.state.n, 1);
    }

    #[test]
    fn parameter_changes_keep_what_still_applies() {
        let st = State {
            ws: T0 + s(60),
            n: 4,
        };
        // A larger window holding the old one keeps its count.
        let v = check(&p(5, s(3600)), &st, T0 + s(90), 1);
        assert!(v.allowed);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.state, State { ws: T0, n: 5 });
        // A lowered limit rejects until the window ends.
        let v = check(&p(3, s(60)), &st, T0 + s(90), 1);
        assert!(!v.allowed);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.retry_after, Some(s(30)));
        // A smaller window not holding the old start starts fresh.
        let v = check(&p(3, s(10)), &st, T0 + s(90), 1);
        assert!(v.allowed);
        assert_eq!(v.remaining, 2);
    }

    #[test]
    fn calendar_months() {
        // 2024-02-10T12:00:00Z, in a leap February.
        let feb_start = days_from_civil(2024, 2, 1) * DAY;
        assert_eq!(feb_start, 1_706_745_600 * SECOND);
        let now = feb_start + 9 * DAY + 12 * 3600 * SECOND;
        let (start, end) = Window::Month.bounds(now);
        assert_eq!(start, feb_start);
        assert_eq!(end, days_from_civil(2024, 3, 1) * DAY);
        assert_eq!(end - start, 29 * DAY);
        // December rolls into January.
        let (start, end) = Window::Month.bounds(days_from_civil(2023, 12, 31) * DAY);
        assert_eq!(start, days_from_civil(2023, 12, 1) * DAY);
        assert_eq!(end, 1_704_067_200 * SECOND);

        let p = Params::new(2, Window::Month).unwrap();
        let v = check(&p, &State::default(), now, 2);
        assert!(v.allowed);
        assert_eq!(v.window, 29 * DAY);
        assert_eq!(v.reset_after, end_of(now) - now);
        let v2 = check(&p, &v.state, end_of(now) - 1, 1);
        assert!(!v2.allowed);
        assert_eq!(v2.retry_after, Some(1));
        assert!(check(&p, &v.state, end_of(now), 1).allowed);
    }

    fn end_of(now: Micros) -> Micros {
        Window::Month.bounds(now).1
    }

    #[test]
    fn civil_round_trips_known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_675), (2023, 11, 14));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1970, 1, 1), 0);
    }

    proptest! {

        #[test]
        fn civil_round_trip(day in 0u64..3_000_000) {
            let (y, m, d) = civil_from_days(day);
            prop_assert!((1..=12).contains(&m) && (1..=31).contains(&d));
            prop_assert_eq!(days_from_civil(y, m, d), day);
            let (start, end) = Window::Month.bounds(day * DAY + 1);
            prop_assert!(start <= day * DAY && day * DAY < end);
            prop_assert_eq!(civil_from_days(start / DAY).2, 1);
            prop_assert_eq!(civil_from_days(end / DAY).2, 1);
            prop_assert!((28 * DAY..=31 * DAY).contains(&(end - start)));
        }


    }
}
