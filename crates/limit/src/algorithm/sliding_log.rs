//! `sliding_log`: exact: at most `limit` units in any trailing `window`.
//!
//! The state is a log of `(t, n)` entries, `n` units taken at `t`, oldest
//! first; in Redis a sorted set scored by `t` (one member per entry, `n`
//! encoded in the member). O(limit) state per key.
//!
//! # Formulas (integer maths; the Lua script mirrors them)
//!
//! An entry counts while `now < t + w`, i.e. in the trailing window
//! `(now - w, now]`.
//!
//! ```text
//! drop every entry with t + w <= now            -- ZREMRANGEBYSCORE -inf (now - w)
//! used = sum of n
//! ok   = used + cost <= limit                   -- and cost <= limit
//! if ok: add (now, cost)
//! remaining   = limit - used'                   (saturating at 0)
//! reset_after = min(w, max t + w - now)         -- 0 for an empty log
//! ttl         = max t + w - now                 -- 0 for an empty log
//! retry_after = t_k + w - now, for the oldest entry k such that
//!               used - (n_0 + ... + n_k) + cost <= limit
//! grows_after = t_k + w - now, for the oldest entry k such that
//!               used' - (n_0 + ... + n_k) + remaining + 1 <= limit
//!               (the oldest entry, unless a lowered limit left used' > limit);
//!               w for an empty log
//! ```

use super::{at_most, nonzero, Micros, ParamError, Verdict, MAX_COUNT, MAX_DURATION};

/// Validated parameters of a `sliding_log` limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    limit: u64,
    window: Micros,
}

impl Params {
    /// At most `limit` units in any trailing `window`; both at least 1.
    pub fn new(limit: u64, window: Micros) -> Result<Params, ParamError> {
        nonzero("limit", limit)?;
        nonzero("window", window)?;
        at_most("limit", limit, MAX_COUNT)?;
        at_most("window", window, MAX_DURATION)?;
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

/// One logged admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// When it was admitted (µs since the epoch): the sorted-set score.
    pub t: Micros,
    /// Units it took.
    pub n: u64,
}

/// The log of one key, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// The entries still inside the window, sorted by `t`.
    pub entries: Vec<Entry>,
}

impl State {
    /// Units in the log.
    fn used(&self) -> u64 {
        self.entries.iter().fold(0, |a, e| a.saturating_add(e.n))
    }
}

/// `state` brought to `now` under `p`: entries that left the trailing
/// window dropped.
pub fn effective(p: &Params, state: &State, now: Micros) -> State {
    // Entries are sorted by time, so the expired ones are a prefix.
    let live = state
        .entries
        .partition_point(|e| e.t.saturating_add(p.window) <= now);
    State {
        entries: state.entries[live..].to_vec(),
    }
}

/// The wait until the oldest `entries` (sorted, live at `now`) leaving the
/// window of `w` have freed at least `excess` units: the time the entry
/// that completes them leaves. `None` if all of them free less.
fn freed_after(entries: &[Entry], excess: u64, w: Micros, now: Micros) -> Option<Micros> {
    let mut freed = 0u64;
    entries
        .iter()
        .find(|e| {
            freed = freed.saturating_add(e.n);
            freed >= excess
        })
        .map(|e| e.t.saturating_add(w).saturating_sub(now))
}

/// Decide a request of `cost` units at `now`.
pub fn check(p: &Params, state: &State, now: Micros, cost: u64) -> Verdict<State> {
    let cost = cost.max(1);
    let (w, limit) = (p.window, p.limit);
    let mut s = effective(p, state, now);
    let used = s.used();
    let fits = cost <= limit;
    let allowed = fits && used.saturating_add(cost) <= limit;
    let retry_after = if allowed {
        Some(0)
    } else if !fits {
        None
    } else {
        // Free the oldest entries until the request fits.
        freed_after(&s.entries, used.saturating_add(cost) - limit, w, now)
    };
    if allowed {
        // Entries are sorted; only a clock that stepped back puts `now`
        // before the newest one.
        let at = s.entries.partition_point(|e| e.t <= now);
        match at.checked_sub(1).and_then(|i| s.entries.get_mut(i)) {
            Some(e) if e.t == now => e.n = e.n.saturating_add(cost),
            _ => s.entries.insert(at, Entry { t: now, n: cost }),
        }
    }
    let used = if allowed { used + cost } else { used };
    let remaining = limit.saturating_sub(used);
    // The next unit comes back when the oldest entries leave the window.
    let grows_after = freed_after(
        &s.entries,
        used.saturating_add(remaining + 1) - limit,
        w,
        now,
    )
    .unwrap_or(w);
    let ttl = s
        .entries
        .last()
        .map_or(0, |e| e.t.saturating_add(w).saturating_sub(now));
    Verdict {
        allowed,
        delay: 0,
        limit,
        window: w,
        remaining,
        reset_after: ttl.min(w),
        grows_after,
        retry_after,
        state: s,
        ttl,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{ms, s, steps, T0};
    use super::super::DAY;
    use super::*;
    use proptest::prelude::*;

    fn p(limit: u64, w: Micros) -> Params {
        Params::new(limit, w).unwrap()
    }

    #[test]
    fn rejects_meaningless_params() {
        assert_eq!(Params::new(0, s(1)), Err(ParamError::Zero("limit")));
        assert_eq!(Params::new(1, 0), Err(ParamError::Zero("window")));
    }

    #[test]
    fn scripted_sequence() {
        let p = p(3, s(10));
        let mut st = State::default();
        for (at, left, reset) in [(0, 2, 10), (2, 1, 10), (4, 0, 10)] {
            let v = check(&p, &st, T0 + s(at), 1);
            assert!(v.allowed);
            assert_eq!(v.remaining, left);
            assert_eq!(v.reset_after, s(reset));
            // Draft 11: the oldest entry (at T0) leaves at T0 + 10 s.
            assert_eq!(v.grows_after, s(10 - at));
            assert_eq!(v.ttl, s(10));
            st = v.state;
        }
        let v = check(&p, &st, T0 + s(5), 1);
        assert!(!v.allowed);
        assert_eq!(v.remaining, 0);
        // The entry of T0 leaves the window at T0 + 10 s.
        assert_eq!(v.retry_after, Some(s(5)));
        assert_eq!(v.reset_after, s(9));
        assert!(!check(&p, &st, T0 + s(10) - 1, 1).allowed);
        let v = check(&p, &st, T0 + s(10), 1);
        assert!(v.allowed);
        assert_eq!(v.remaining, 0);
        assert_eq!(
            v.state.entries,
            vec![
                Entry { t: T0 + s(2), n: 1 },
                Entry { t: T0 + s(4), n: 1 },
                Entry {
                    t: T0 + s(10),
                    n: 1
                },
            ]
        );
        // Two units need the two oldest to leave: T0 + 14 s.
        let v = check(&p, &v.state, T0 + s(11), 2);
        assert_eq!(v.retry_after, Some(s(3)));
        assert_eq!((v.grows_after, v.grows_hint()), (s(1), s(3)));
        // An empty log grows nothing: the window.
        let v = check(&p, &State::default(), T0, 4);
        assert_eq!((v.remaining, v.grows_after), (3, s(10)));
    }

    #[test]
    fn cost_above_one_and_above_the_limit() {
        let p = p(10, s(1));
        let v = check(&p, &State::default(), T0, 6);
        assert!(v.allowed);
        assert_eq!(v.remaining, 4);
        let v2 = check(&p, &v.state, T0 + ms(1), 6);
        assert!(!v2.allowed);
        assert_eq!(v2.retry_after, Some(ms(999)));
        // Same instant: merged into one entry.
        let v3 = check(&p, &v.state, T0, 4);
        assert_eq!(v3.state.entries, vec![Entry { t: T0, n: 10 }]);
        let v = check(&p, &State::default(), T0, 11);
        assert!(!v.allowed);
        assert_eq!(v.retry_after, None);
        assert_eq!(v.remaining, 10);
    }

    #[test]
    fn long_idle_empties_the_log() {
        let st = State {
            entries: vec![Entry { t: T0, n: 5 }],
        };
        let v = check(&p(5, s(60)), &st, T0 + 300 * 365 * DAY, 5);
        assert!(v.allowed);
        assert_eq!(v.state.entries.len(), 1);
    }

    #[test]
    fn parameter_changes_stay_sane() {
        let st = State {
            entries: vec![
                Entry { t: T0, n: 4 },
                Entry {
                    t: T0 + s(30),
                    n: 4,
                },
            ],
        };
        // A lowered limit: rejected until enough leaves.
        let v = check(&p(5, s(60)), &st, T0 + s(40), 1);
        assert!(!v.allowed);
        assert_eq!(v.retry_after, Some(s(20)));
        // A shorter window: the old entry is already out.
        let v = check(&p(5, s(20)), &st, T0 + s(40), 1);
        assert!(v.allowed);
        assert_eq!(v.remaining, 0);
    }

    #[test]
    fn a_clock_stepping_back_keeps_the_log_sorted() {
        let p = p(5, s(10));
        let v = check(&p, &State::default(), T0 + s(5), 1);
        let v = check(&p, &v.state, T0 + s(3), 1);
        assert_eq!(v.state.entries[0].t, T0 + s(3));
        assert_eq!(v.reset_after, s(10));
        assert_eq!(v.ttl, s(12));
    }

    proptest! {

        #[test]
        fn never_more_than_limit_in_any_trailing_window(
            limit in 1u64..20,
            w in 1u64..5_000,
            history in steps(1_500, 6, 200),
        ) {
            let p = p(limit, w);
            let mut st = State::default();
            let mut now = T0;
            let mut taken: Vec<(Micros, u64)> = Vec::new();
            for (gap, cost) in history {
                now += gap;
                let v = check(&p, &st, now, cost);
                prop_assert!(v.reset_after <= v.window);
                if v.allowed {
                    taken.push((now, cost));
                    st = v.state;
                }
                let used: u64 = st.entries.iter().map(|e| e.n).sum();
                prop_assert!(used <= limit);
            }
            for &(t, _) in &taken {
                let n: u64 = taken.iter().filter(|(u, _)| *u <= t && u + w > t).map(|x| x.1).sum();
                prop_assert!(n <= limit);
            }
        }

    }
}
