//! Settlements: a cost limit's estimate, charged at admission, corrected
//! by `actual - estimate` when the response ends (docs/configuration/cost.md).
//!
//! Each algorithm that takes settlements has a `settle(p, state, at, now,
//! delta)` beside its `check`: `at` is the instant the store decided the
//! request at (its [`Outcome::at`](crate::Outcome::at)), `now` the store's
//! clock when the settlement comes, `delta` the units to add (an extra
//! charge) or, negative, to give back (a refund). Like `check` it is pure:
//! the caller stores [`Settled::state`] for [`Settled::ttl`] (0: delete
//! the key), and the Lua scripts mirror it line for line (each algorithm
//! file's `settle`, called by `lua/settle.lua`).
//!
//! # Where a settlement goes
//!
//! A settlement is applied at `max(now, at)` (a clock that stepped back
//! never applies it before its admission), to the state as the
//! algorithm's `effective` brings it there (the check's own reading):
//!
//! - `fixed_window` (fixed, monthly and calendar windows): to the window
//!   `at` was in while it is current, else to the current one: either way
//!   `bounds(now)`'s count. A window that has rolled over starts from 0.
//! - `sliding_window`: to the window `at` was in while it is the current
//!   one (`cur`) or the one before it (`prev`, whose weight fades), else
//!   to the current one (`cur`).
//! - `token_bucket`, `leaky_bucket`: to the bucket's level, drained to now:
//!   `delta` units of `unit` ticks.
//! - `gcra`: to the theoretical arrival time, `delta` emission intervals.
//! - `sliding_log` and `concurrency` take none (a log entry's time is its
//!   meaning; a lease has no cost): [`AlgoParams::settle`](super::AlgoParams::settle)
//!   answers `None`.
//!
//! # How far
//!
//! Nothing a settlement does could not have been done by requests:
//!
//! - A refund stops at empty: a count at 0, a bucket full of tokens (or
//!   drained), GCRA's tat at `now`. What already drained or rolled over
//!   is not given back twice.
//! - An extra charge may leave the key past its limit, so later requests
//!   wait, as far as the algorithm's state reaches (what its `effective`
//!   clamps a stored state to): a fixed window's count up to
//!   [`MAX_LEVEL`] (2^52, far past any limit: requests wait for the next
//!   window); a sliding window's counts up to `limit`; a token bucket to
//!   empty plus its `max_delay` backlog (`cap + slack` ticks); a leaky
//!   bucket to full; GCRA's tat to `now + tau + max_delay`. A larger debt
//!   is forgiven: the key waits as long as its longest wait.
//!
//! [`Settled::applied`] says how many of the `delta` units took effect
//! (signed like it). In a bucket or GCRA the last one may have been in
//! part (a refund of 2 units into a level of 1.5 gives back 1.5, and says
//! 2).
//!
//! # Exact below 2^53
//!
//! `delta` is first clamped to `±MAX_LEVEL` (no state moves further), so
//! it is exact as a Lua number. Then the units taken are bounded by the
//! room left: `k = min(|delta|, ceil(room / unit))`, so `k * unit < room +
//! unit` and the new level is at most `top + unit`, then clamped to `top`.
//! With `unit <= cap` that is below `2 * cap + slack`, the bound
//! `Params::new` already keeps below 2^53 for the buckets; GCRA's `top +
//! T` is an instant plus at most three [`MAX_DURATION`]s; a fixed window's
//! count stays at most 2^52, so `n + cost` in its check stays exact too.
//!
//! [`MAX_DURATION`]: super::MAX_DURATION

use super::{ceil_div, Micros};

/// The furthest a settlement moves a state (`delta` is clamped to
/// `±MAX_LEVEL` units), and the highest count it leaves a fixed window
/// at: 2^52.
pub const MAX_LEVEL: u64 = 1 << 52;

/// A settlement's result: the state to store, for how long, and the units
/// applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled<S> {
    /// The new state.
    pub state: S,
    /// How long it must live, as `check` computes it for such a state; 0:
    /// it equals a fresh key, delete it.
    pub ttl: Micros,
    /// The units of `delta` that took effect, signed like it: less than
    /// `delta` in magnitude where a refund met empty or a charge the
    /// state's top.
    pub applied: i64,
}

/// `delta` clamped to `±MAX_LEVEL`.
pub fn clamp_delta(delta: i64) -> i64 {
    const M: i64 = MAX_LEVEL as i64;
    delta.clamp(-M, M)
}

/// `level` moved by `delta` steps of `unit` within `[lo, hi]`: the new
/// level and the steps applied (see the module doc, "Exact below 2^53").
///
/// ```text
/// delta >= 0: k = min(delta, ceil(max(hi - level, 0) / unit))
///             level' = level if k = 0 else min(level + k * unit, hi)
/// delta <  0: room = max(level - lo, 0);  k = min(-delta, ceil(room / unit))
///             level' = level - min(k * unit, room);  applied = -k
/// ```
///
/// Lua: `settle_shift` (lua/common.lua). `delta` must be clamped first.
pub(crate) fn shift(level: u64, delta: i64, unit: u64, lo: u64, hi: u64) -> (u64, i64) {
    let steps = delta.unsigned_abs();
    if delta >= 0 {
        let k = steps.min(ceil_div(hi.saturating_sub(level), unit));
        if k == 0 {
            return (level, 0);
        }
        ((level + k * unit).min(hi), k as i64)
    } else {
        let room = level.saturating_sub(lo);
        let k = steps.min(ceil_div(room, unit));
        (level - (k * unit).min(room), -(k as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{ms, s, T0};
    use super::super::{fixed_window, gcra, leaky_bucket, sliding_window, token_bucket};
    use super::super::{AlgoParams, Rate, DAY, SECOND};
    use super::*;

    #[test]
    fn shift_stops_at_both_ends_and_counts_what_it_moved() {
        // Units of 10 ticks in [0, 100].
        assert_eq!(shift(35, 2, 10, 0, 100), (55, 2));
        assert_eq!(
            shift(35, 7, 10, 0, 100),
            (100, 7),
            "6.5 units of room: 7, the last in part"
        );
        assert_eq!(shift(35, 9, 10, 0, 100), (100, 7));
        assert_eq!(shift(100, 3, 10, 0, 100), (100, 0));
        assert_eq!(shift(35, -3, 10, 0, 100), (5, -3));
        assert_eq!(
            shift(35, -4, 10, 0, 100),
            (0, -4),
            "3.5 units: 4, the last in part"
        );
        assert_eq!(shift(35, -9, 10, 0, 100), (0, -4));
        assert_eq!(shift(0, -1, 10, 0, 100), (0, 0));
        // A floor above zero (GCRA's now).
        assert_eq!(shift(35, -9, 10, 20, 100), (20, -2));
        assert_eq!(shift(35, 0, 10, 0, 100), (35, 0));
        // A level already past the top (parameters lowered) is not pulled
        // down by a charge.
        assert_eq!(shift(120, 1, 10, 0, 100), (120, 0));
    }

    #[test]
    fn deltas_are_clamped_to_what_a_state_can_hold() {
        assert_eq!(clamp_delta(i64::MAX), MAX_LEVEL as i64);
        assert_eq!(clamp_delta(i64::MIN), -(MAX_LEVEL as i64));
        assert_eq!(clamp_delta(-5), -5);
        assert_eq!(
            shift(0, clamp_delta(i64::MAX), 1, 0, MAX_LEVEL),
            (MAX_LEVEL, MAX_LEVEL as i64)
        );
    }

    fn fixed(limit: u64, w: Micros) -> fixed_window::Params {
        fixed_window::Params::new(limit, fixed_window::Window::Fixed(w)).unwrap()
    }

    #[test]
    fn a_fixed_window_settles_into_the_current_window() {
        let p = fixed(100, s(60));
        // 40 taken in the window [T0, T0 + 60 s), at T0 + 10 s.
        let st = fixed_window::State { ws: T0, n: 40 };
        let at = T0 + s(10);
        // Still current: the count moves, the TTL runs to the window's end.
        let r = fixed_window::settle(&p, &st, at, T0 + s(20), -25);
        assert_eq!(
            (r.state, r.applied),
            (fixed_window::State { ws: T0, n: 15 }, -25)
        );
        assert_eq!(r.ttl, s(40));
        // A refund stops at zero, and an empty count is deleted.
        let r = fixed_window::settle(&p, &st, at, T0 + s(20), -70);
        assert_eq!((r.state.n, r.applied, r.ttl), (0, -40, 0));
        // An extra charge goes past the limit: rejected until the window ends.
        let r = fixed_window::settle(&p, &st, at, T0 + s(20), 90);
        assert_eq!((r.state.n, r.applied), (130, 90));
        let v = fixed_window::check(&p, &r.state, T0 + s(59), 1);
        assert_eq!(
            (v.allowed, v.remaining, v.retry_after),
            (false, 0, Some(s(1)))
        );
        // Rolled over: to the new window, whose count starts at 0.
        let next = T0 + s(60);
        let r = fixed_window::settle(&p, &st, at, next + s(5), 7);
        assert_eq!(r.state, fixed_window::State { ws: next, n: 7 });
        assert_eq!((r.applied, r.ttl), (7, s(55)));
        let r = fixed_window::settle(&p, &st, at, next + s(5), -7);
        assert_eq!(
            (r.state.n, r.applied, r.ttl),
            (0, 0, 0),
            "nothing to refund there"
        );
        // The new window's own count takes a refund.
        let rolled = fixed_window::State { ws: next, n: 9 };
        let r = fixed_window::settle(&p, &rolled, at, next + s(5), -4);
        assert_eq!((r.state.n, r.applied), (5, -4));
        // A clock behind `at` settles at `at`.
        let r = fixed_window::settle(&p, &st, at, at - s(30), 1);
        assert_eq!(
            (r.state, r.ttl),
            (fixed_window::State { ws: T0, n: 41 }, s(50))
        );
    }

    #[test]
    fn a_calendar_period_settles_into_the_next_once_it_has_begun() {
        let window = fixed_window::Window::Calendar {
            start: T0,
            end: T0 + s(100),
            next: T0 + s(300),
        };
        let p = fixed_window::Params::new(10, window).unwrap();
        let st = fixed_window::State { ws: T0, n: 8 };
        let r = fixed_window::settle(&p, &st, T0 + s(50), T0 + s(90), -3);
        assert_eq!(r.state, fixed_window::State { ws: T0, n: 5 });
        assert_eq!(r.ttl, s(10) + DAY, "a period's state outlives it by a day");
        let r = fixed_window::settle(&p, &st, T0 + s(50), T0 + s(150), 2);
        assert_eq!(
            r.state,
            fixed_window::State {
                ws: T0 + s(100),
                n: 2
            }
        );
        assert_eq!(r.ttl, s(150) + DAY);
    }

    #[test]
    fn a_sliding_window_settles_into_the_charged_window_while_it_counts() {
        let p = sliding_window::Params::new(100, s(10)).unwrap();
        let at = T0 + s(3);
        let st = sliding_window::State {
            ws: T0,
            cur: 50,
            prev: 20,
        };
        // Charged in the current window: `cur`.
        let r = sliding_window::settle(&p, &st, at, T0 + s(4), -30);
        assert_eq!(
            r.state,
            sliding_window::State {
                ws: T0,
                cur: 20,
                prev: 20
            }
        );
        assert_eq!((r.applied, r.ttl), (-30, s(16)));
        // The charged window is now the previous one: `prev`, fading.
        let r = sliding_window::settle(&p, &st, at, T0 + s(12), -30);
        assert_eq!(
            r.state,
            sliding_window::State {
                ws: T0 + s(10),
                cur: 0,
                prev: 20
            }
        );
        assert_eq!((r.applied, r.ttl), (-30, s(8)));
        let r = sliding_window::settle(&p, &st, at, T0 + s(12), 70);
        assert_eq!(r.state.prev, 100, "never past the limit: the check's clamp");
        assert_eq!(r.applied, 50);
        // Older: to the current window.
        let r = sliding_window::settle(&p, &st, at, T0 + s(25), 4);
        assert_eq!(
            r.state,
            sliding_window::State {
                ws: T0 + s(20),
                cur: 4,
                prev: 0
            }
        );
        assert_eq!((r.applied, r.ttl), (4, s(15)));
        let r = sliding_window::settle(&p, &st, at, T0 + s(25), -4);
        assert_eq!((r.state.cur, r.state.prev, r.applied, r.ttl), (0, 0, 0, 0));
    }

    #[test]
    fn a_bucket_settles_its_level_between_empty_and_its_top() {
        // 1 token a second, 10 of them, and 5 s of max_delay.
        let p = token_bucket::Params::new(Rate::new(1, SECOND).unwrap(), 10, s(5)).unwrap();
        let (unit, _) = p.rate().ticks();
        let st = token_bucket::State {
            d: 6 * unit,
            ts: T0,
            u: unit,
        };
        // 2 s later 2 tokens are back: 4 missing, then 3 more taken.
        let r = token_bucket::settle(&p, &st, T0, T0 + s(2), 3);
        assert_eq!(
            r.state,
            token_bucket::State {
                d: 7 * unit,
                ts: T0 + s(2),
                u: unit
            }
        );
        assert_eq!((r.applied, r.ttl), (3, s(7)));
        // A refund stops at a full bucket (deleted: a fresh key).
        let r = token_bucket::settle(&p, &st, T0, T0 + s(2), -9);
        assert_eq!((r.state.d, r.applied, r.ttl), (0, -4, 0));
        // A charge goes past empty into the max_delay backlog, no further.
        let r = token_bucket::settle(&p, &st, T0, T0 + s(2), 100);
        assert_eq!((r.state.d, r.applied, r.ttl), (15 * unit, 11, s(15)));
        let v = token_bucket::check(&p, &r.state, T0 + s(2), 1);
        // A token is 6 s away: admitted (held for max_delay) in 1 s.
        assert_eq!((v.allowed, v.retry_after), (false, Some(s(1))));

        let p = leaky_bucket::Params::new(Rate::new(1, SECOND).unwrap(), 10, 0).unwrap();
        let st = leaky_bucket::State {
            lv: 6 * unit,
            ts: T0,
            u: unit,
        };
        let r = leaky_bucket::settle(&p, &st, T0, T0 + s(2), -3);
        assert_eq!((r.state.lv, r.applied, r.ttl), (unit, -3, s(1)));
        let r = leaky_bucket::settle(&p, &st, T0, T0 + s(2), 9);
        assert_eq!(
            (r.state.lv, r.applied, r.ttl),
            (10 * unit, 6, s(10)),
            "full, no further"
        );
        let r = leaky_bucket::settle(&p, &st, T0, T0 + s(2), -5);
        assert_eq!((r.state.lv, r.applied, r.ttl), (0, -4, 0));
    }

    #[test]
    fn gcra_moves_tat_never_before_now() {
        // A cell every 100 ms, bursts of 10 (tau 1 s), no max_delay.
        let p = gcra::Params::new(Rate::new(10, SECOND).unwrap(), 10, 0).unwrap();
        let st = gcra::State { tat: T0 + ms(800) };
        let r = gcra::settle(&p, &st, T0, T0 + ms(100), -3);
        assert_eq!((r.state.tat, r.applied, r.ttl), (T0 + ms(500), -3, ms(400)));
        let r = gcra::settle(&p, &st, T0, T0 + ms(100), -9);
        assert_eq!((r.state.tat, r.applied, r.ttl), (T0 + ms(100), -7, 0));
        let r = gcra::settle(&p, &st, T0, T0 + ms(100), 50);
        assert_eq!(
            (r.state.tat, r.applied),
            (T0 + ms(1_100), 3),
            "to now + tau"
        );
    }

    #[test]
    fn only_counting_algorithms_but_the_log_settle() {
        use super::super::{concurrency, sliding_log};
        let log = AlgoParams::SlidingLog(sliding_log::Params::new(3, SECOND).unwrap());
        let slots = AlgoParams::Concurrency(concurrency::Params::new(3, SECOND).unwrap());
        for p in [log, slots] {
            assert!(!p.settles());
            assert_eq!(p.settle(&p.fresh(), 0, 0, -1), None);
        }
    }
}
