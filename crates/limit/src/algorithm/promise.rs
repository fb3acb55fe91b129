//! The promise of draft 11's `t` ([`Verdict::grows_hint`](super::Verdict::grows_hint)),
//! checked per algorithm from any state a history of requests reaches:
//!
//! - `t >= 1` µs; on a rejection `t` is the wait `Retry-After` shows
//!   ([`Verdict::retry_hint`](super::Verdict::retry_hint)), to the
//!   microsecond;
//! - a client that takes at most `r` units (`remaining`), split any way, at
//!   any times within the next `t` rounded up to whole seconds (as the
//!   header shows it), is never rejected by the limit (held by a delay is
//!   not rejected);
//! - `t` is when the quota grows (the algorithm's formula, not a safe
//!   guess): after an admission, with no more traffic, `remaining` is
//!   still `r` a microsecond before `t` and larger at `t`, except where the
//!   formula says nothing grows before the window ends (`sliding_window`);
//!   `concurrency` reports 1 s by rule (a release can free a slot any
//!   moment).

use proptest::prelude::*;

use super::testutil::{steps, T0};
use super::{
    concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
    AlgoParams, AlgoState, Micros, Rate, SECOND,
};

/// A duration from a microsecond to a minute: microseconds, milliseconds
/// or tenths of a second, so that `t` rounded up to a second is sometimes
/// far longer than the window and sometimes about as long.
fn span() -> impl Strategy<Value = Micros> + Clone {
    prop_oneof![
        1u64..5_000,
        (1u64..5_000).prop_map(|n| n * 1_000),
        (1u64..600).prop_map(|n| n * 100_000),
    ]
}

/// Parameters of `algo` (the config name) with a scale of time for their
/// histories (about the window, or the time one unit takes).
fn params(algo: &'static str) -> BoxedStrategy<(AlgoParams, Micros)> {
    let max_delay = |period: Micros| prop_oneof![Just(0), 0..=period];
    match algo {
        "fixed_window" => (1u64..20, span())
            .prop_map(|(limit, w)| {
                let p = fixed_window::Params::new(limit, fixed_window::Window::Fixed(w));
                (AlgoParams::FixedWindow(p.unwrap()), w)
            })
            .boxed(),
        "sliding_window" => (1u64..30, span())
            .prop_map(|(limit, w)| {
                let p = sliding_window::Params::new(limit, w).unwrap();
                (AlgoParams::SlidingWindow(p), w)
            })
            .boxed(),
        "sliding_log" => (1u64..20, span())
            .prop_map(|(limit, w)| {
                let p = sliding_log::Params::new(limit, w).unwrap();
                (AlgoParams::SlidingLog(p), w)
            })
            .boxed(),
        "token_bucket" | "leaky_bucket" => (1u64..20, span(), 1u64..20)
            .prop_flat_map(move |(count, period, burst)| {
                (Just((count, period, burst)), max_delay(period))
            })
            .prop_map(move |((count, period, burst), d)| {
                let rate = Rate::new(count, period).unwrap();
                let p = if algo == "token_bucket" {
                    AlgoParams::TokenBucket(token_bucket::Params::new(rate, burst, d).unwrap())
                } else {
                    AlgoParams::LeakyBucket(leaky_bucket::Params::new(rate, burst, d).unwrap())
                };
                (p, period)
            })
            .boxed(),
        "gcra" => (1u64..5, span(), 1u64..20)
            .prop_flat_map(move |(count, period, burst)| {
                (Just((count, period, burst)), max_delay(period))
            })
            .prop_filter_map("too fast", |((count, period, burst), d)| {
                let p = gcra::Params::new(Rate::new(count, period).ok()?, burst, d).ok()?;
                Some((AlgoParams::Gcra(p), period))
            })
            .boxed(),
        "concurrency" => (1u64..10, span())
            .prop_map(|(limit, lease)| {
                let p = concurrency::Params::new(limit, lease).unwrap();
                (AlgoParams::Concurrency(p), lease)
            })
            .boxed(),
        other => unreachable!("no strategy for {other}"),
    }
}

/// A history of requests (gaps up to twice `scale`), the gap before the
/// decision, its cost, and raw numbers for the client's spending plan.
type Case = (AlgoParams, Vec<(Micros, u64)>, Micros, u64, Vec<(u64, u64)>);

fn case(algo: &'static str) -> impl Strategy<Value = Case> {
    params(algo).prop_flat_map(|(p, scale)| {
        (
            Just(p),
            steps(2 * scale, 6, 40),
            0..=2 * scale,
            1u64..8,
            proptest::collection::vec(any::<(u64, u64)>(), 0..30),
        )
    })
}

/// The state after `history` (gaps and costs) from `T0`, each request
/// with its own lease id, and the time of the last request.
fn replay(params: &AlgoParams, history: &[(Micros, u64)]) -> (AlgoState, Micros) {
    let mut state = params.fresh();
    let mut now = T0;
    for (i, &(gap, cost)) in history.iter().enumerate() {
        now += gap;
        let v = params.check(&state, now, cost, i as u64 + 1);
        if v.allowed {
            state = v.state;
        }
    }
    (state, now)
}

/// What `state` leaves at `at` with no traffic: the `remaining` of a
/// request too large to pass (it takes nothing).
fn available(params: &AlgoParams, state: &AlgoState, at: Micros) -> u64 {
    let too_large = params.capacity().map_or(u64::MAX, |c| c + 1);
    params.check(state, at, too_large, 0).remaining
}

/// The client's spending: at most `budget` units in requests at offsets
/// below `span`, in time order, from the raw numbers of `plan`.
fn spending(plan: &[(u64, u64)], budget: u64, span: Micros) -> Vec<(Micros, u64)> {
    let mut left = budget;
    let mut out: Vec<(Micros, u64)> = plan
        .iter()
        .map_while(|&(at, cost)| {
            let cost = 1 + cost % left.max(1);
            (left > 0).then(|| {
                left -= cost.min(left);
                (at % span, cost)
            })
        })
        .collect();
    out.sort_unstable();
    out
}

/// The three promises of `t` for one case.
fn keeps_its_promise(case: Case) -> Result<(), TestCaseError> {
    let (params, history, gap, cost, plan) = case;
    let (state, last) = replay(&params, &history);
    let now = last + gap;
    let v = params.check(&state, now, cost, 1_000);
    let (r, t) = (v.remaining, v.grows_hint());
    prop_assert!(t >= 1, "t is never 0");
    if !v.allowed {
        prop_assert_eq!(t, v.retry_hint(), "a rejection's t is Retry-After's wait");
    }
    let state = if v.allowed { v.state.clone() } else { state };

    if v.allowed && !matches!(params, AlgoParams::Concurrency(_)) {
        prop_assert_eq!(
            available(&params, &state, now + t - 1),
            r,
            "nothing grows before t = {}",
            t
        );
        let window_end = match &params {
            AlgoParams::SlidingWindow(p) => t == p.window() - now % p.window(),
            _ => false,
        };
        if !window_end {
            prop_assert!(
                available(&params, &state, now + t) > r,
                "the quota grows at t = {}",
                t
            );
        }
    }

    // The header shows t in whole seconds, rounded up.
    let span = t.div_ceil(SECOND) * SECOND;
    let mut state = state;
    for (i, (offset, units)) in spending(&plan, r, span).into_iter().enumerate() {
        let w = params.check(&state, now + offset, units, 2_000 + i as u64);
        prop_assert!(
            w.allowed,
            "r = {}, t = {}: {} units at +{} rejected ({:?})",
            r,
            t,
            units,
            offset,
            w
        );
        state = w.state;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn fixed_window_keeps_its_promise(c in case("fixed_window")) {
        keeps_its_promise(c)?;
    }

    #[test]
    fn sliding_window_keeps_its_promise(c in case("sliding_window")) {
        keeps_its_promise(c)?;
    }

    #[test]
    fn sliding_log_keeps_its_promise(c in case("sliding_log")) {
        keeps_its_promise(c)?;
    }

    #[test]
    fn token_bucket_keeps_its_promise(c in case("token_bucket")) {
        keeps_its_promise(c)?;
    }

    #[test]
    fn gcra_keeps_its_promise(c in case("gcra")) {
        keeps_its_promise(c)?;
    }

    #[test]
    fn leaky_bucket_keeps_its_promise(c in case("leaky_bucket")) {
        keeps_its_promise(c)?;
    }

    #[test]
    fn concurrency_keeps_its_promise(c in case("concurrency")) {
        keeps_its_promise(c)?;
    }

    /// Calendar periods: the promise inside `[start, next)`, where the
    /// caller's bounds hold (the store never sees a clock past `next`).
    #[test]
    fn calendar_windows_keep_their_promise(
        (limit, first, second) in (1u64..20, span(), span()),
        history in steps(1_000, 6, 40),
        (gap, cost) in (0u64..1_000, 1u64..8),
        plan in proptest::collection::vec(any::<(u64, u64)>(), 0..30),
        month: bool,
    ) {
        let window = if month {
            fixed_window::Window::Month
        } else {
            fixed_window::Window::Calendar { start: T0, end: T0 + first, next: T0 + first + second }
        };
        // The history and the decision within the first period (after
        // it, `t` ends at the next period's start, where only bounds the
        // caller computes anew would roll over), the client's spending
        // anywhere.
        let scale = |g: Micros| if month { g * 1_000_000 } else { g * first / 50_000 };
        let history: Vec<(Micros, u64)> = history.into_iter().map(|(g, c)| (scale(g), c)).collect();
        let p = AlgoParams::FixedWindow(fixed_window::Params::new(limit, window).unwrap());
        keeps_its_promise((p, history, scale(gap), cost, plan))?;
    }
}
