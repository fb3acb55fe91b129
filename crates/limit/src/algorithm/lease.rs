//! Leased limits' maths (SPEC "Leased limits", docs/scaling-out.md): an
//! instance takes a block of up to `most` units of a key in one decision
//! and spends them locally ([`crate::leases`]).
//!
//! [`take`] asks the algorithm's own `check` for the largest `k` in
//! `[cost, most]` that it allows now, so a lease can never take what
//! requests could not have taken one by one: `check(k)` allowed means `k`
//! requests of one unit each would have been. The last units of a budget
//! are shared out (a lease shrinks to what is left, never below the cost
//! of the request that asked for it). Every algorithm a lease applies to
//! is monotone in the cost (if `k` units fit, fewer do), so the largest
//! `k` is found by bisection: `check` runs at most `2 + log2(most)` times.
//! `lua/lease.lua` mirrors it with the algorithms' Lua `check`.
//!
//! [`give_back`] returns what a lease did not spend when it ends: a
//! settlement of `-unspent` ([`super::settle`]: never below empty) to the
//! window or bucket the units came from, while it still counts. Unlike a
//! cost settlement, units of a fixed window that has ended, or of a
//! sliding window older than the previous one, are not moved into the
//! current window: they lapsed with theirs.

use super::settle::Settled;
use super::{AlgoParams, AlgoState, AnyVerdict, Micros};

/// What [`take`] took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The units taken: in `[cost, most]` when `verdict` allows, else 0.
    pub units: u64,
    /// `check`'s verdict for those units (the state to store, the
    /// figures); for 0 units, its rejection of `cost`.
    pub verdict: AnyVerdict,
}

/// Whether `params` is an algorithm a lease may be taken from: a fixed or
/// sliding window, a token bucket or GCRA (not a log, whose entries are
/// their times, not a leaky bucket, which shapes, nor concurrency).
pub fn leasable(params: &AlgoParams) -> bool {
    matches!(
        params,
        AlgoParams::FixedWindow(_)
            | AlgoParams::SlidingWindow(_)
            | AlgoParams::TokenBucket(_)
            | AlgoParams::Gcra(_)
    )
}

/// Take up to `most` units (at least `cost`, itself at least 1) of a key
/// in `state` at `now`: the largest number `check` allows, or none when
/// `cost` does not fit (see the module doc).
pub fn take(params: &AlgoParams, state: &AlgoState, now: Micros, cost: u64, most: u64) -> Taken {
    let cost = cost.max(1);
    let most = most.max(cost);
    let check = |k: u64| params.check(state, now, k, 0);
    let full = check(most);
    if full.allowed {
        return Taken {
            units: most,
            verdict: full,
        };
    }
    let least = check(cost);
    if !least.allowed {
        return Taken {
            units: 0,
            verdict: least,
        };
    }
    // `least` allowed and `most` not: the answer is in [cost, most).
    // `remaining` after `cost` bounds it from above for the windows; the
    // bisection does not rely on it.
    let (mut lo, mut hi, mut best) = (cost, most, least);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let v = check(mid);
        if v.allowed {
            (lo, best) = (mid, v);
        } else {
            hi = mid;
        }
    }
    Taken {
        units: lo,
        verdict: best,
    }
}

/// Until when (the store's clock) units taken at `at` count where they
/// were taken: a fixed or calendar window's end, a sliding window's end
/// (after it they weigh less in the next one, so spending them there could
/// admit more than the limit); `None` for a bucket or GCRA, whose units
/// count whenever they are spent. A lease ends by then.
pub fn counts_until(params: &AlgoParams, at: Micros) -> Option<Micros> {
    match params {
        AlgoParams::FixedWindow(p) => Some(p.window().bounds(at).1),
        AlgoParams::SlidingWindow(p) => {
            let w = p.window().max(1);
            Some((at / w).saturating_add(1).saturating_mul(w))
        }
        _ => None,
    }
}

/// Give back `units` of a lease taken at `at` (the store's clock then),
/// at `now` (see the module doc); `None` when nothing changes: no units,
/// their window has ended, or the algorithm takes no leases.
pub fn give_back(
    params: &AlgoParams,
    state: &AlgoState,
    at: Micros,
    now: Micros,
    units: u64,
) -> Option<Settled<AlgoState>> {
    let now = now.max(at);
    let counts = match params {
        AlgoParams::FixedWindow(p) => p.window().bounds(at) == p.window().bounds(now),
        AlgoParams::SlidingWindow(p) => {
            let w = p.window();
            now / w - at / w <= 1
        }
        AlgoParams::TokenBucket(_) | AlgoParams::Gcra(_) => true,
        _ => false,
    };
    if units == 0 || !counts {
        return None;
    }
    let delta = -i64::try_from(units).unwrap_or(i64::MAX);
    params.settle(state, at, now, delta)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::algorithm::testutil::{steps, T0};
    use crate::algorithm::{fixed_window, gcra, sliding_window, token_bucket, Rate};

    /// Small parameters of each leasable algorithm, `max_delay` included.
    fn leasable_params() -> impl Strategy<Value = AlgoParams> {
        prop_oneof![
            (1u64..40, 1u64..5_000).prop_map(|(limit, w)| AlgoParams::FixedWindow(
                fixed_window::Params::new(limit, fixed_window::Window::Fixed(w)).unwrap()
            )),
            (1u64..40, 1u64..50_000).prop_map(|(limit, w)| AlgoParams::SlidingWindow(
                sliding_window::Params::new(limit, w).unwrap()
            )),
            (
                1u64..20,
                1u64..5_000,
                1u64..40,
                prop_oneof![Just(0u64), 0u64..3_000]
            )
                .prop_map(|(count, period, burst, d)| {
                    let rate = Rate::new(count, period).unwrap();
                    AlgoParams::TokenBucket(token_bucket::Params::new(rate, burst, d).unwrap())
                }),
            (1u64..2_000, 1u64..40, prop_oneof![Just(0u64), 0u64..3_000]).prop_map(
                |(interval, burst, d)| {
                    let rate = Rate::new(1, interval).unwrap();
                    AlgoParams::Gcra(gcra::Params::new(rate, burst, d).unwrap())
                }
            ),
        ]
    }

    /// The state after `history` (gap, cost) from `T0`, and the time of
    /// its last request.
    fn replay(params: &AlgoParams, history: &[(Micros, u64)]) -> (AlgoState, Micros) {
        let mut state = params.fresh();
        let mut now = T0;
        for &(g, c) in history {
            now += g;
            let v = params.check(&state, now, c, 0);
            if v.allowed {
                state = v.state;
            }
        }
        (state, now)
    }

    proptest! {
        /// After any history, a lease takes exactly the largest number of
        /// units in `[cost, most]` that `check` allows (found by trying
        /// every one), with that check's verdict; none when `cost` does
        /// not fit.
        #[test]
        fn a_lease_takes_the_most_that_fits(
            params in leasable_params(),
            history in steps(3_000, 5, 30),
            gap in 0u64..3_000,
            cost in 1u64..4,
            most in 1u64..60,
        ) {
            let (state, mut now) = replay(&params, &history);
            now += gap;
            let taken = take(&params, &state, now, cost, most);
            let top = most.max(cost);
            let brute = (cost..=top).rev().find(|&k| params.check(&state, now, k, 0).allowed);
            match brute {
                Some(k) => {
                    prop_assert_eq!(taken.units, k);
                    prop_assert_eq!(&taken.verdict, &params.check(&state, now, k, 0));
                }
                None => {
                    prop_assert_eq!(taken.units, 0);
                    prop_assert!(!taken.verdict.allowed);
                    prop_assert_eq!(&taken.verdict, &params.check(&state, now, cost, 0));
                }
            }
        }
    }

    #[test]
    fn the_last_units_are_shared_out() {
        let p = AlgoParams::FixedWindow(
            fixed_window::Params::new(25, fixed_window::Window::Fixed(60_000_000)).unwrap(),
        );
        let mut state = p.fresh();
        let mut took = Vec::new();
        for _ in 0..4 {
            let t = take(&p, &state, T0, 1, 10);
            took.push(t.units);
            if t.verdict.allowed {
                state = t.verdict.state;
            }
        }
        assert_eq!(took, [10, 10, 5, 0]);
    }

    proptest! {
        /// A lease taken and given back in part (or whole) leaves taken
        /// exactly the units spent: what passes is what passed before,
        /// less them.
        #[test]
        fn what_a_lease_did_not_spend_goes_back(
            params in leasable_params(),
            history in steps(3_000, 5, 20),
            most in 1u64..30,
            spent in 0u64..30,
        ) {
            let (state, now) = replay(&params, &history);
            let before = params.check(&state, now, 1, 0).remaining;
            let taken = take(&params, &state, now, 1, most);
            if taken.units == 0 {
                // Nothing taken, nothing to give back.
                return Ok(());
            }
            let spent = spent.min(taken.units);
            let back = give_back(&params, &taken.verdict.state, now, now, taken.units - spent);
            let after = back.map_or(taken.verdict.state.clone(), |b| b.state);
            let left = params.check(&after, now, 1, 0).remaining;
            // What passes now: `before` less what was spent; exactly for
            // the windows, within one unit for a bucket or GCRA (whose
            // figures count whole units of a level that may hold a part
            // of one).
            let want = before.saturating_sub(spent);
            let windows = matches!(
                params,
                AlgoParams::FixedWindow(_) | AlgoParams::SlidingWindow(_)
            );
            if windows {
                prop_assert_eq!(left, want, "before {} spent {}", before, spent);
            } else {
                prop_assert!(
                    left + 1 >= want && left <= want + 1,
                    "before {} spent {} left {}", before, spent, left
                );
            }
        }
    }

    #[test]
    fn units_of_an_ended_window_lapse_with_it() {
        let p = AlgoParams::FixedWindow(
            fixed_window::Params::new(25, fixed_window::Window::Fixed(60_000_000)).unwrap(),
        );
        let t = take(&p, &p.fresh(), T0, 1, 10);
        assert_eq!(t.units, 10);
        let state = t.verdict.state;
        let back = give_back(&p, &state, T0, T0 + 1_000, 4).unwrap();
        assert_eq!(p.check(&back.state, T0 + 1_000, 1, 0).remaining, 25 - 6 - 1);
        // The window ended: nothing moves into the next one.
        assert_eq!(give_back(&p, &state, T0, T0 + 60_000_000, 4), None);
    }

    #[test]
    fn only_windows_and_buckets_are_leasable() {
        let rate = Rate::new(1, 1_000).unwrap();
        assert!(leasable(&AlgoParams::Gcra(
            gcra::Params::new(rate, 5, 0).unwrap()
        )));
        let log = crate::algorithm::sliding_log::Params::new(5, 1_000).unwrap();
        assert!(!leasable(&AlgoParams::SlidingLog(log)));
    }
}
