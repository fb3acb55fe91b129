//! `sliding_window`: Cloudflare's approximate sliding window, from the
//! counts of the current and the previous aligned window:
//! `estimate = prev * (1 - elapsed / window) + cur`. O(1) state.
//!
//! # Formulas (integer maths; the Lua script mirrors them)
//!
//! The previous window's weight `1 - elapsed / window` is a fixed-point
//! fraction in thousandths, rounded up (so the estimate never undercounts):
//!
//! ```text
//! S     = 1000                                   -- WEIGHT_SCALE
//! start = now - now % w;  e = now - start        -- 0 <= e < w
//! (prev, cur) = (s.prev, s.cur) if s.ws >= start
//!             = (s.cur, 0)      if s.ws + w >= start    -- s is the previous window
//!             = (0, 0)          otherwise
//! prev = min(prev, limit); cur = min(cur, limit)   -- after a lowered limit
//! wt    = ceil((w - e) * S / w) = floor(((w - e) * S + w - 1) / w)   -- 1..=S
//! room  = max(0, floor((limit * S - prev * wt) / S) - cur)
//! ok    = cost <= room      -- i.e. prev * wt + (cur + cost) * S <= limit * S
//! cur'  = cur + cost if ok else cur;  state = {ws = start, cur = cur', prev = prev}
//! remaining   = room - cost if ok else room
//! reset_after = w if cur' > 0, else w - e if prev > 0, else 0
//! ttl         = 2w - e if cur' > 0, else w - e if prev > 0, else 0
//! ```
//!
//! `reset_after` is capped at `w`: units of the current window only stop
//! counting at the end of the next one (`2w - e`).
//!
//! `fade(n)` is the wait, within this window, until `prev`'s decaying
//! weight leaves room for `n` units on top of `cur`, if it ever does
//! before the window ends:
//!
//! ```text
//! fade(n): if n <= limit and prev > 0:
//!     R  = floor((limit - n) * S / prev)            -- the largest weight that fits
//!     e* = w - floor(R * w / S)                     -- the first e with wt(e) <= R
//!     if e* < w: e* - e
//! ```
//!
//! `grows_after` (draft 11's `t`) is when the fading weight frees the next
//! unit, `fade(cur' + remaining + 1)`, or the window's end (`w - e`) if it
//! frees none in this window.
//!
//! `retry_after` (rejected, `cost <= limit`) is the first instant the
//! estimate admits the request, as `prev`'s weight decays:
//!
//! ```text
//! fade(cur + cost), if any                       -- later in this window
//! otherwise, in the next window (prev = cur, cur = 0):
//!     R2 = floor((limit - cost) * S / cur)  (cur > 0; else the next window admits at once)
//!     e2 = 0 if R2 >= S else w - floor(R2 * w / S)
//!     retry_after = (w - e) + e2                    -- e2 = w: the window after, empty
//! ```
//!
//! Bounds: `w <= MAX_WINDOW` keeps `(w - e) * S + w` and `R * w` below
//! 2^53; `limit <= MAX_COUNT` keeps `prev * S + (cur + cost) * S` below
//! 2^53.
//!
//! # Settlements ([`super::settle`])
//!
//! ```text
//! now = max(now, at);  s = effective(now)     -- start, cur, prev (each at most limit)
//! charged = at - at % w
//! (prev', applied) = shift(prev, delta, 1, 0, limit)   if charged + w == start  -- the previous window
//! (cur', applied)  = shift(cur, delta, 1, 0, limit)    otherwise        -- the current one, or older: now
//! ttl = 2w - e if cur' > 0, else w - e if prev' > 0, else 0
//! ```

use super::settle::{clamp_delta, shift, Settled};
use super::{at_most, nonzero, Micros, ParamError, Verdict, DAY, MAX_COUNT};

/// The fixed-point scale of the previous window's weight (thousandths).
pub const WEIGHT_SCALE: u64 = 1_000;

/// The longest window accepted: 100 days (so `w * (S + 1) < 2^53`).
pub const MAX_WINDOW: Micros = 100 * DAY;

/// Validated parameters of a `sliding_window` limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    limit: u64,
    window: Micros,
}

impl Params {
    /// At most about `limit` units per trailing `window`; both at least 1.
    pub fn new(limit: u64, window: Micros) -> Result<Params, ParamError> {
        nonzero("limit", limit)?;
        nonzero("window", window)?;
        at_most("limit", limit, MAX_COUNT)?;
        at_most("window", window, MAX_WINDOW)?;
        Ok(Params { limit, window })
    }

    /// The quota.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window, in microseconds.
    pub fn window(&self) -> Micros {
        self.window
    }
}

/// The stored counters of one key (Redis hash fields `ws`, `cur`, `prev`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State {
    /// Start of the window `cur` belongs to (µs since the epoch).
    pub ws: Micros,
    /// Units taken in the window starting at `ws`.
    pub cur: u64,
    /// Units taken in the window before it.
    pub prev: u64,
}

/// `state` brought to `now` under `p`: `ws` the current window's start,
/// counters shifted (or dropped) accordingly and clamped to `limit`.
pub fn effective(p: &Params, state: &State, now: Micros) -> State {
    let w = p.window;
    let start = now - now % w;
    let (prev, cur) = if state.ws >= start {
        (state.prev, state.cur)
    } else if state.ws.saturating_add(w) >= start {
        (state.cur, 0)
    } else {
        (0, 0)
    };
    State {
        ws: start,
        cur: cur.min(p.limit),
        prev: prev.min(p.limit),
    }
}

/// The previous window's weight at `e` into a window of `w`, in
/// thousandths, rounded up: `ceil((w - e) * S / w)`.
fn weight(w: Micros, e: Micros) -> u64 {
    ((w - e) * WEIGHT_SCALE).div_ceil(w)
}

/// The first offset `e` into a window of `w` at which the weight is at most
/// `r` (`r < S`): `w - floor(r * w / S)`.
fn first_offset_with_weight(w: Micros, r: u64) -> Micros {
    w - r * w / WEIGHT_SCALE
}

/// Decide a request of `cost` units at `now`.
pub fn check(p: &Params, state: &State, now: Micros, cost: u64) -> Verdict<State> {
    let cost = cost.max(1);
    let (w, limit) = (p.window, p.limit);
    let s = effective(p, state, now);
    let e = now - s.ws;
    let (prev, cur) = (s.prev, s.cur);
    let wt = weight(w, e);
    let room =
        ((limit * WEIGHT_SCALE).saturating_sub(prev * wt) / WEIGHT_SCALE).saturating_sub(cur);
    let fits = cost <= limit;
    let allowed = fits && cost <= room;
    let cur2 = if allowed { cur + cost } else { cur };
    let retry_after = if allowed {
        Some(0)
    } else if !fits {
        None
    } else {
        Some(retry(w, limit, e, prev, cur, cost))
    };
    let remaining = if allowed { room - cost } else { room };
    let grows_after = fade(w, limit, e, prev, cur2 + remaining + 1).unwrap_or(w - e);
    let (reset_after, ttl) = if cur2 > 0 {
        (w, 2 * w - e)
    } else if prev > 0 {
        (w - e, w - e)
    } else {
        (0, 0)
    };
    Verdict {
        allowed,
        delay: 0,
        limit,
        window: w,
        remaining,
        reset_after,
        grows_after,
        retry_after,
        state: State {
            ws: s.ws,
            cur: cur2,
            prev,
        },
        ttl,
    }
}

/// The wait from offset `e` until `prev`'s decaying weight leaves room for
/// `n` units (the current count included) within `limit`, if that happens
/// before the window of `w` ends.
fn fade(w: Micros, limit: u64, e: Micros, prev: u64, n: u64) -> Option<Micros> {
    if n > limit || prev == 0 {
        return None;
    }
    let r = (limit - n) * WEIGHT_SCALE / prev;
    let first = first_offset_with_weight(w, r.min(WEIGHT_SCALE));
    (first < w).then(|| first.saturating_sub(e))
}

/// The wait until a rejected request (`cost <= limit`) at offset `e` would
/// be admitted, with the counters `prev`, `cur` of the current window.
fn retry(w: Micros, limit: u64, e: Micros, prev: u64, cur: u64, cost: u64) -> Micros {
    if let Some(wait) = fade(w, limit, e, prev, cur + cost) {
        return wait;
    }
    // In the next window the current count becomes `prev`, decaying from
    // full weight, and nothing is current.
    let e2 = match ((limit - cost) * WEIGHT_SCALE).checked_div(cur) {
        Some(r2) if r2 < WEIGHT_SCALE => first_offset_with_weight(w, r2),
        _ => 0,
    };
    (w - e) + e2
}

/// Apply a settlement of `delta` units at `now` to a request decided at
/// `at` (module doc, "Settlements").
pub fn settle(p: &Params, state: &State, at: Micros, now: Micros, delta: i64) -> Settled<State> {
    let now = now.max(at);
    let (w, limit) = (p.window, p.limit);
    let s = effective(p, state, now);
    let delta = clamp_delta(delta);
    let (mut cur, mut prev) = (s.cur, s.prev);
    let applied;
    if at - at % w + w == s.ws {
        (prev, applied) = shift(prev, delta, 1, 0, limit);
    } else {
        (cur, applied) = shift(cur, delta, 1, 0, limit);
    }
    let e = now - s.ws;
    let ttl = if cur > 0 {
        2 * w - e
    } else if prev > 0 {
        w - e
    } else {
        0
    };
    Settled {
        state: State {
            ws: s.ws,
            cur,
            prev,
        },
        ttl,
        applied,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{ms, s, T0};
    use super::*;

    fn p(limit: u64, w: Micros) -> Params {
        Params::new(limit, w).unwrap()
    }

    #[test]
    fn rejects_meaningless_params() {
        assert_eq!(Params::new(0, s(1)), Err(ParamError::Zero("limit")));
        assert_eq!(Params::new(1, 0), Err(ParamError::Zero("window")));
        assert!(Params::new(1, MAX_WINDOW + 1).is_err());
    }

    #[test]
    fn weight_is_in_thousandths_rounded_up() {
        assert_eq!(weight(s(10), 0), 1000);
        assert_eq!(weight(s(10), 1), 1000);
        assert_eq!(weight(s(10), ms(10)), 999);
        assert_eq!(weight(s(10), s(5)), 500);
        assert_eq!(weight(s(10), s(10) - 1), 1);
        assert_eq!(first_offset_with_weight(s(10), 500), s(5));
        assert_eq!(first_offset_with_weight(s(10), 0), s(10));
    }

    #[test]
    fn scripted_sequence_across_windows() {
        let p = p(10, s(10));
        let mut st = State::default();
        let t = T0 + s(1);
        for i in 0..10 {
            let v = check(&p, &st, t, 1);
            assert!(v.allowed);
            assert_eq!(v.remaining, 9 - i);
            assert_eq!(v.reset_after, s(10));
            // No previous window to fade: the quota grows when this one ends.
            assert_eq!(v.grows_after, s(9));
            assert_eq!(v.ttl, s(19));
            st = v.state;
        }
        assert_eq!(
            st,
            State {
                ws: T0,
                cur: 10,
                prev: 0
            }
        );
        // Full: the next window admits once prev's weight is <= 0.9.
        let v = check(&p, &st, t, 1);
        assert!(!v.allowed);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.retry_after, Some(s(10)));
        assert!(!check(&p, &st, T0 + s(11) - 1, 1).allowed);
        let v = check(&p, &st, T0 + s(11), 1);
        assert!(v.allowed);
        assert_eq!(v.remaining, 0);
        assert_eq!(
            v.state,
            State {
                ws: T0 + s(10),
                cur: 1,
                prev: 10
            }
        );
        st = v.state;
        // Half-way through: prev counts for 5, cur is 1 -> room 4.
        let at = T0 + s(15);
        let v = check(&p, &st, at, 5);
        assert!(!v.allowed);
        assert_eq!(v.remaining, 4);
        // Needs prev's weight <= 0.4, at e = 6 s.
        assert_eq!(v.retry_after, Some(s(1)));
        assert!(!check(&p, &st, at + s(1) - 1, 5).allowed);
        assert!(check(&p, &st, at + s(1), 5).allowed);
        let v = check(&p, &st, at, 4);
        assert!(v.allowed);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.reset_after, s(10));
        // cur 5, prev 10: one more unit fits once prev weighs 0.4, at 6 s.
        assert_eq!(v.grows_after, s(1));
        assert_eq!(check(&p, &v.state, at + s(1) - 1, 11).remaining, 0);
        assert_eq!(check(&p, &v.state, at + s(1), 11).remaining, 1);
        assert_eq!(v.ttl, s(15));
    }

    #[test]
    fn retry_in_the_next_window_and_the_one_after() {
        let p = p(10, s(10));
        // cur = 10 and a cost of 10: prev must have fully decayed -> the
        // window after the next.
        let st = State {
            ws: T0,
            cur: 10,
            prev: 0,
        };
        let v = check(&p, &st, T0 + s(3), 10);
        assert_eq!(v.retry_after, Some(s(17)));
        assert!(!check(&p, &st, T0 + s(20) - 1, 10).allowed);
        assert!(check(&p, &st, T0 + s(20), 10).allowed);
        // cur = 4, cost 8: next window once 4 * wt <= 2000 (wt <= 500).
        let st = State {
            ws: T0,
            cur: 4,
            prev: 9,
        };
        let v = check(&p, &st, T0 + s(3), 8);
        assert_eq!(v.retry_after, Some(s(12)));
    }

    #[test]
    fn cost_above_the_limit_never_passes() {
        let v = check(&p(10, s(10)), &State::default(), T0, 11);
        assert!(!v.allowed);
        assert_eq!(v.retry_after, None);
        assert_eq!(v.retry_hint(), s(10));
        assert_eq!(v.remaining, 10);
        assert_eq!(v.ttl, 0);
    }

    #[test]
    fn long_idle_forgets_everything() {
        let st = State {
            ws: T0,
            cur: 10,
            prev: 10,
        };
        let v = check(&p(10, s(10)), &st, T0 + 500 * 365 * DAY, 10);
        assert!(v.allowed);
        assert_eq!(v.state.prev, 0);
    }

    #[test]
    fn parameter_changes_stay_sane() {
        // Counters above a lowered limit are clamped to it.
        let st = State {
            ws: T0,
            cur: 50,
            prev: 80,
        };
        let v = check(&p(10, s(10)), &st, T0 + s(5), 1);
        assert!(!v.allowed);
        assert_eq!(
            v.state,
            State {
                ws: T0,
                cur: 10,
                prev: 10
            }
        );
        assert!(v.retry_after.is_some());
        // A shorter window: the old window started within the previous one.
        let st = State {
            ws: T0,
            cur: 6,
            prev: 4,
        };
        let v = check(&p(10, s(5)), &st, T0 + s(7), 1);
        assert_eq!(
            v.state,
            State {
                ws: T0 + s(5),
                cur: 1,
                prev: 6
            }
        );
    }
}
