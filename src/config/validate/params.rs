//! An algorithm's parameters as written (a limit's own, or an override's
//! on top of them), validated by the algorithm's own constructors and its
//! complaints put in the operator's words.

use std::time::Duration;

use tollgate_limit::algorithm::{
    self as algo, concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window,
    token_bucket, ParamError,
};

use super::{leaf, Ctx, Result, SECOND};

use crate::config::error::ConfigError;
use crate::config::model::AlgoParams;
use crate::config::raw::{AlgorithmKind, RawOverride};
use crate::config::units::{format_duration, Rate, Window};

impl Ctx<'_> {
    /// The validated parameters of a `kind` limit at `path` written as
    /// `written`, with an override's fields (at `over`'s path) replacing
    /// the ones it sets. Errors name the field that holds the bad value.
    pub(super) fn params(
        &self,
        path: &str,
        kind: AlgorithmKind,
        written: &Written,
        over: Option<(&str, &Written)>,
    ) -> Result<AlgoParams> {
        // Where a parameter's value comes from: the override if it sets it.
        let field = |param: &str| match over {
            Some((opath, o)) if o.given().contains(&param) => format!("{opath}.{param}"),
            _ => format!("{path}.{param}"),
        };
        let pick = |o: fn(&Written) -> bool| over.filter(|(_, w)| o(w)).map(|(_, w)| w);
        let limit = pick(|w| w.limit.is_some()).unwrap_or(written).limit;
        let window = pick(|w| w.window.is_some()).unwrap_or(written).window;
        let rate = pick(|w| w.rate.is_some()).unwrap_or(written).rate;
        // `burst` defaults to the count of the limit's own rate.
        let burst = pick(|w| w.burst.is_some())
            .unwrap_or(written)
            .burst
            .or(written.rate.map(|r| r.count));
        let missing = |param: &str| {
            self.err(
                path,
                format!("missing field `{param}`, which {} requires", kind.name()),
            )
        };
        let fail = |e: ParamError| self.param_error(&field(param_of(&e)), kind, &e);
        let params = match kind {
            AlgorithmKind::FixedWindow if written.calendar.is_some() => {
                let limit = limit.ok_or_else(|| missing("limit"))?;
                let bounds = written.calendar.ok_or_else(|| missing("window"))?;
                AlgoParams::FixedWindow(fixed_window::Params::new(limit, bounds).map_err(fail)?)
            }
            AlgorithmKind::FixedWindow
            | AlgorithmKind::SlidingWindow
            | AlgorithmKind::SlidingLog => {
                let limit = limit.ok_or_else(|| missing("limit"))?;
                let window = window.ok_or_else(|| missing("window"))?;
                let window = self.window(&field("window"), window, kind)?;
                match (kind, window) {
                    (AlgorithmKind::FixedWindow, w) => {
                        AlgoParams::FixedWindow(fixed_window::Params::new(limit, w).map_err(fail)?)
                    }
                    (AlgorithmKind::SlidingWindow, fixed_window::Window::Fixed(w)) => {
                        AlgoParams::SlidingWindow(
                            sliding_window::Params::new(limit, w).map_err(fail)?,
                        )
                    }
                    (_, fixed_window::Window::Fixed(w)) => {
                        AlgoParams::SlidingLog(sliding_log::Params::new(limit, w).map_err(fail)?)
                    }
                    // `window()` allows months on fixed_window only, and
                    // gives no calendar bounds (a policy computes them).
                    (_, fixed_window::Window::Month | fixed_window::Window::Calendar { .. }) => {
                        return Err(missing("window"))
                    }
                }
            }
            AlgorithmKind::TokenBucket | AlgorithmKind::Gcra | AlgorithmKind::LeakyBucket => {
                let r = rate.ok_or_else(|| missing("rate"))?;
                let r = algo::Rate::new(r.count, micros(r.period)).map_err(fail)?;
                let burst = burst.unwrap_or(r.count());
                let max_delay = micros(written.max_delay.unwrap_or(Duration::ZERO));
                match kind {
                    AlgorithmKind::TokenBucket => AlgoParams::TokenBucket(
                        token_bucket::Params::new(r, burst, max_delay).map_err(fail)?,
                    ),
                    AlgorithmKind::Gcra => {
                        AlgoParams::Gcra(gcra::Params::new(r, burst, max_delay).map_err(fail)?)
                    }
                    _ => AlgoParams::LeakyBucket(
                        leaky_bucket::Params::new(r, burst, max_delay).map_err(fail)?,
                    ),
                }
            }
            AlgorithmKind::Concurrency => {
                let limit = limit.ok_or_else(|| missing("limit"))?;
                let lease = micros(written.lease.unwrap_or(5 * 60 * SECOND));
                AlgoParams::Concurrency(concurrency::Params::new(limit, lease).map_err(fail)?)
            }
        };
        Ok(params)
    }

    /// A parameter the algorithm refused, in the operator's words: durations
    /// as durations, the rate's parts as `rate`.
    fn param_error(&self, field: &str, kind: AlgorithmKind, e: &ParamError) -> ConfigError {
        let name = leaf(field);
        let message = match e {
            ParamError::Zero(_) if matches!(name, "window" | "lease" | "max_delay") => {
                format!("{name} must be greater than 0")
            }
            ParamError::Zero("rate period") => "a rate's period must be greater than 0".into(),
            ParamError::Zero("rate count") => "a rate's count must be at least 1".into(),
            ParamError::Zero(_) => format!("{name} must be at least 1"),
            ParamError::TooLarge { field: p, max } if is_duration(p) => format!(
                "{} is too large (at most {})",
                p.trim_start_matches("rate "),
                format_duration(Duration::from_micros(*max))
            ),
            ParamError::TooLarge { field: p, max } => format!("{p} is too large (at most {max})"),
            ParamError::TooFast => format!(
                "rate is too fast for {}: at most one request per microsecond",
                kind.name()
            ),
            ParamError::Precision | ParamError::CalendarBounds => e.to_string(),
        };
        self.err(field, message)
    }

    /// Checks a window: `month` only on fixed_window.
    fn window(
        &self,
        field: &str,
        window: Window,
        kind: AlgorithmKind,
    ) -> Result<fixed_window::Window> {
        match window {
            Window::Fixed(d) => Ok(fixed_window::Window::Fixed(micros(d))),
            Window::Month if kind == AlgorithmKind::FixedWindow => Ok(fixed_window::Window::Month),
            Window::Month => Err(self.err(
                field,
                format!(
                    "`window: month` is only supported by fixed_window, not {}",
                    kind.name()
                ),
            )),
        }
    }
}

impl AlgorithmKind {
    /// The algorithm's name as written.
    pub(super) fn name(self) -> &'static str {
        match self {
            AlgorithmKind::FixedWindow => "fixed_window",
            AlgorithmKind::SlidingWindow => "sliding_window",
            AlgorithmKind::SlidingLog => "sliding_log",
            AlgorithmKind::TokenBucket => "token_bucket",
            AlgorithmKind::Gcra => "gcra",
            AlgorithmKind::LeakyBucket => "leaky_bucket",
            AlgorithmKind::Concurrency => "concurrency",
        }
    }

    /// The algorithm's own parameters.
    pub(super) fn params(self) -> &'static [&'static str] {
        match self {
            AlgorithmKind::FixedWindow
            | AlgorithmKind::SlidingWindow
            | AlgorithmKind::SlidingLog => &["limit", "window"],
            AlgorithmKind::TokenBucket | AlgorithmKind::Gcra | AlgorithmKind::LeakyBucket => {
                &["rate", "burst", "max_delay"]
            }
            AlgorithmKind::Concurrency => &["limit", "lease"],
        }
    }

    /// What an override may replace.
    pub(super) fn override_params(self) -> &'static [&'static str] {
        match self {
            AlgorithmKind::FixedWindow
            | AlgorithmKind::SlidingWindow
            | AlgorithmKind::SlidingLog => &["limit", "window"],
            AlgorithmKind::TokenBucket | AlgorithmKind::Gcra | AlgorithmKind::LeakyBucket => {
                &["rate", "burst"]
            }
            AlgorithmKind::Concurrency => &["limit"],
        }
    }
}

/// A limit's parameters as written (or an override's), before validation.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Written {
    pub(super) limit: Option<u64>,
    pub(super) window: Option<Window>,
    pub(super) rate: Option<Rate>,
    pub(super) burst: Option<u64>,
    pub(super) max_delay: Option<Duration>,
    pub(super) lease: Option<Duration>,
    /// A calendar window's bounds at load time (the plan computes each
    /// request's); `window` is then `None`.
    pub(super) calendar: Option<fixed_window::Window>,
}

impl Written {
    /// The parameters given, by name.
    pub(super) fn given(&self) -> Vec<&'static str> {
        [
            ("limit", self.limit.is_some()),
            ("window", self.window.is_some() || self.calendar.is_some()),
            ("rate", self.rate.is_some()),
            ("burst", self.burst.is_some()),
            ("max_delay", self.max_delay.is_some()),
            ("lease", self.lease.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }
}

impl RawOverride {
    /// The parameters this override sets.
    pub(super) fn limit_params(&self) -> Written {
        Written {
            limit: self.limit,
            window: self.window,
            rate: self.rate,
            burst: self.burst,
            ..Written::default()
        }
    }
}

/// The config parameter an algorithm's complaint is about.
fn param_of(e: &ParamError) -> &'static str {
    match e {
        ParamError::Zero(p) | ParamError::TooLarge { field: p, .. } => {
            p.strip_prefix("rate ").map_or(p, |_| "rate")
        }
        ParamError::TooFast => "rate",
        ParamError::Precision => "burst",
        ParamError::CalendarBounds => "window",
    }
}

/// Whether an algorithm's parameter is a duration (its bounds are shown as one).
fn is_duration(param: &str) -> bool {
    matches!(param, "window" | "lease" | "max_delay" | "rate period")
}

/// A duration in microseconds, saturating (the algorithms bound every
/// duration far below `u64::MAX` µs).
pub(super) fn micros(d: Duration) -> algo::Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
