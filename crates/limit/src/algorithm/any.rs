//! One type over every algorithm: [`AlgoParams`] and [`AlgoState`], so a
//! store can keep and check any limit without knowing which one it is.

use super::settle::Settled;
use super::{
    concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
    Micros, Verdict,
};

/// The parameters of one limit (after any per-client override).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlgoParams {
    /// `fixed_window`.
    FixedWindow(fixed_window::Params),
    /// `sliding_window`.
    SlidingWindow(sliding_window::Params),
    /// `sliding_log`.
    SlidingLog(sliding_log::Params),
    /// `token_bucket`.
    TokenBucket(token_bucket::Params),
    /// `gcra`.
    Gcra(gcra::Params),
    /// `leaky_bucket`.
    LeakyBucket(leaky_bucket::Params),
    /// `concurrency`.
    Concurrency(concurrency::Params),
}

/// The stored state of one (limit, client), whatever its algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlgoState {
    /// `fixed_window`.
    FixedWindow(fixed_window::State),
    /// `sliding_window`.
    SlidingWindow(sliding_window::State),
    /// `sliding_log`.
    SlidingLog(sliding_log::State),
    /// `token_bucket`.
    TokenBucket(token_bucket::State),
    /// `gcra`.
    Gcra(gcra::State),
    /// `leaky_bucket`.
    LeakyBucket(leaky_bucket::State),
    /// `concurrency`.
    Concurrency(concurrency::State),
}

/// `$state` (an [`AlgoState`]) as algorithm `$variant`'s own state, or
/// `$module`'s fresh one (a state of another algorithm counts as a fresh
/// key), bound to `$s` in `$body`.
macro_rules! own_state {
    ($state:expr, $variant:ident, $module:ident, |$s:ident| $body:expr) => {{
        let fresh;
        let $s = match $state {
            AlgoState::$variant(s) => s,
            _ => {
                fresh = $module::State::default();
                &fresh
            }
        };
        $body
    }};
}

/// An algorithm's verdict with the state erased to [`AlgoState`].
pub type AnyVerdict = Verdict<AlgoState>;

fn erase<S>(v: Verdict<S>, wrap: impl FnOnce(S) -> AlgoState) -> AnyVerdict {
    Verdict {
        allowed: v.allowed,
        delay: v.delay,
        limit: v.limit,
        window: v.window,
        remaining: v.remaining,
        reset_after: v.reset_after,
        grows_after: v.grows_after,
        retry_after: v.retry_after,
        state: wrap(v.state),
        ttl: v.ttl,
    }
}

impl AlgoParams {
    /// The algorithm's config name.
    pub fn name(&self) -> &'static str {
        match self {
            AlgoParams::FixedWindow(_) => "fixed_window",
            AlgoParams::SlidingWindow(_) => "sliding_window",
            AlgoParams::SlidingLog(_) => "sliding_log",
            AlgoParams::TokenBucket(_) => "token_bucket",
            AlgoParams::Gcra(_) => "gcra",
            AlgoParams::LeakyBucket(_) => "leaky_bucket",
            AlgoParams::Concurrency(_) => "concurrency",
        }
    }

    /// The most units one key can take at once (`limit`, or `burst` for the
    /// buckets and GCRA): a request costing more can never pass. `None` for
    /// `concurrency`, which counts requests, not their cost.
    pub fn capacity(&self) -> Option<u64> {
        match self {
            AlgoParams::FixedWindow(p) => Some(p.limit()),
            AlgoParams::SlidingWindow(p) => Some(p.limit()),
            AlgoParams::SlidingLog(p) => Some(p.limit()),
            AlgoParams::TokenBucket(p) => Some(p.burst()),
            AlgoParams::Gcra(p) => Some(p.burst()),
            AlgoParams::LeakyBucket(p) => Some(p.burst()),
            AlgoParams::Concurrency(_) => None,
        }
    }

    /// A fresh key's state for this algorithm.
    pub fn fresh(&self) -> AlgoState {
        match self {
            AlgoParams::FixedWindow(_) => AlgoState::FixedWindow(Default::default()),
            AlgoParams::SlidingWindow(_) => AlgoState::SlidingWindow(Default::default()),
            AlgoParams::SlidingLog(_) => AlgoState::SlidingLog(Default::default()),
            AlgoParams::TokenBucket(_) => AlgoState::TokenBucket(Default::default()),
            AlgoParams::Gcra(_) => AlgoState::Gcra(Default::default()),
            AlgoParams::LeakyBucket(_) => AlgoState::LeakyBucket(Default::default()),
            AlgoParams::Concurrency(_) => AlgoState::Concurrency(Default::default()),
        }
    }

    /// Check `cost` units at `now` against `state` (a state of another
    /// algorithm counts as a fresh key). `lease` identifies the request for
    /// `concurrency`.
    pub fn check(&self, state: &AlgoState, now: Micros, cost: u64, lease: u64) -> AnyVerdict {
        macro_rules! run {
            ($variant:ident, $module:ident, $p:expr, $call:expr) => {
                own_state!(state, $variant, $module, |s| erase(
                    $call($p, s),
                    AlgoState::$variant
                ))
            };
        }
        match self {
            AlgoParams::FixedWindow(p) => run!(FixedWindow, fixed_window, p, |p, s| {
                fixed_window::check(p, s, now, cost)
            }),
            AlgoParams::SlidingWindow(p) => run!(SlidingWindow, sliding_window, p, |p, s| {
                sliding_window::check(p, s, now, cost)
            }),
            AlgoParams::SlidingLog(p) => run!(SlidingLog, sliding_log, p, |p, s| {
                sliding_log::check(p, s, now, cost)
            }),
            AlgoParams::TokenBucket(p) => run!(TokenBucket, token_bucket, p, |p, s| {
                token_bucket::check(p, s, now, cost)
            }),
            AlgoParams::Gcra(p) => run!(Gcra, gcra, p, |p, s| gcra::check(p, s, now, cost)),
            AlgoParams::LeakyBucket(p) => run!(LeakyBucket, leaky_bucket, p, |p, s| {
                leaky_bucket::check(p, s, now, cost)
            }),
            AlgoParams::Concurrency(p) => run!(Concurrency, concurrency, p, |p, s| {
                concurrency::acquire(p, s, now, lease)
            }),
        }
    }

    /// The quota `q` and window `w` of this limit, for `RateLimit-Policy`.
    pub fn policy(&self) -> (u64, Micros) {
        let v = self.check(&self.fresh(), 0, 1, 0);
        (v.limit, v.window)
    }
}

impl AlgoParams {
    /// Whether this algorithm takes settlements (all but `sliding_log`
    /// and `concurrency`).
    pub fn settles(&self) -> bool {
        !matches!(self, AlgoParams::SlidingLog(_) | AlgoParams::Concurrency(_))
    }

    /// Apply `delta` units to `state` at `now` for a request the store
    /// decided at `at` (a state of another algorithm counts as a fresh
    /// key): the module doc's rules. `None` for an algorithm that takes no
    /// settlements.
    pub fn settle(
        &self,
        state: &AlgoState,
        at: Micros,
        now: Micros,
        delta: i64,
    ) -> Option<Settled<AlgoState>> {
        macro_rules! run {
            ($variant:ident, $module:ident, $p:expr) => {{
                let r = own_state!(state, $variant, $module, |s| {
                    $module::settle($p, s, at, now, delta)
                });
                Some(Settled {
                    state: AlgoState::$variant(r.state),
                    ttl: r.ttl,
                    applied: r.applied,
                })
            }};
        }
        match self {
            AlgoParams::FixedWindow(p) => run!(FixedWindow, fixed_window, p),
            AlgoParams::SlidingWindow(p) => run!(SlidingWindow, sliding_window, p),
            AlgoParams::TokenBucket(p) => run!(TokenBucket, token_bucket, p),
            AlgoParams::Gcra(p) => run!(Gcra, gcra, p),
            AlgoParams::LeakyBucket(p) => run!(LeakyBucket, leaky_bucket, p),
            AlgoParams::SlidingLog(_) | AlgoParams::Concurrency(_) => None,
        }
    }
}
