//! Per-key limits: a (limit, client)'s own `limit`, `rate` or `burst`,
//! stored beside its counters and read inside the same atomic step as the
//! decision (a check with [`Check::quota`](crate::Check::quota) set).
//!
//! The store keeps the values as written, never parameters derived from
//! them: `l=<limit>`, `r=<count>/<period µs>`, `b=<burst>`, space-separated
//! (for example `r=100/1000000 b=200`). The algorithm's parameters are
//! derived from them and the check's other parameters at each decision
//! ([`AlgoParams::with_quota`]), on the memory store here and in
//! `lua/quota.lua` on Redis, so a reload that changes the limit's other
//! parameters (a window, a `max_delay`) keeps every key's own values. A
//! value that does not fit the parameters (a `max_delay` raised since, so
//! the bucket would no longer be exact) is ignored: the default applies.

use std::fmt;

use crate::algorithm::{
    concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
    AlgoParams, ParamError, Rate,
};

/// A key's own values; at least one is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quota {
    /// `limit` (window algorithms and `concurrency`).
    pub limit: Option<u64>,
    /// `rate` (buckets and GCRA).
    pub rate: Option<Rate>,
    /// `burst` (buckets and GCRA).
    pub burst: Option<u64>,
}

impl Quota {
    /// The stored text (see the module doc).
    pub fn encode(&self) -> String {
        self.to_string()
    }

    /// A stored text read back; `None` if it is not one [`Quota::encode`]
    /// writes.
    pub fn decode(text: &str) -> Option<Quota> {
        let mut q = Quota::default();
        for word in text.split(' ') {
            let (name, value) = word.split_once('=')?;
            match name {
                "l" if q.limit.is_none() => q.limit = Some(value.parse().ok()?),
                "b" if q.burst.is_none() => q.burst = Some(value.parse().ok()?),
                "r" if q.rate.is_none() => {
                    let (count, period) = value.split_once('/')?;
                    q.rate = Some(Rate::new(count.parse().ok()?, period.parse().ok()?).ok()?);
                }
                _ => return None,
            }
        }
        (q != Quota::default()).then_some(q)
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        if let Some(l) = self.limit {
            write!(f, "l={l}")?;
            sep = " ";
        }
        if let Some(r) = self.rate {
            write!(f, "{sep}r={}/{}", r.count(), r.period())?;
            sep = " ";
        }
        if let Some(b) = self.burst {
            write!(f, "{sep}b={b}")?;
        }
        Ok(())
    }
}

/// Which values an algorithm takes from a [`Quota`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// A value this algorithm does not have (`rate` on a window).
    #[error("{algorithm} has no `{field}`")]
    NotAParameter {
        /// The algorithm.
        algorithm: &'static str,
        /// The value given.
        field: &'static str,
    },
    /// The value is not a valid parameter with the limit's others.
    #[error(transparent)]
    Param(#[from] ParamError),
}

impl AlgoParams {
    /// These parameters with `quota`'s values in place of their own; the
    /// rest (a window, a lease, `max_delay`) as they are.
    pub fn with_quota(&self, quota: &Quota) -> Result<AlgoParams, QuotaError> {
        let refuse = |field| QuotaError::NotAParameter {
            algorithm: self.name(),
            field,
        };
        let window_like = |limit: u64| {
            if quota.rate.is_some() {
                return Err(refuse("rate"));
            }
            if quota.burst.is_some() {
                return Err(refuse("burst"));
            }
            Ok(quota.limit.unwrap_or(limit))
        };
        let bucket_like = |rate: Rate, burst: u64| {
            if quota.limit.is_some() {
                return Err(refuse("limit"));
            }
            Ok((quota.rate.unwrap_or(rate), quota.burst.unwrap_or(burst)))
        };
        Ok(match self {
            AlgoParams::FixedWindow(p) => AlgoParams::FixedWindow(fixed_window::Params::new(
                window_like(p.limit())?,
                p.window(),
            )?),
            AlgoParams::SlidingWindow(p) => AlgoParams::SlidingWindow(sliding_window::Params::new(
                window_like(p.limit())?,
                p.window(),
            )?),
            AlgoParams::SlidingLog(p) => AlgoParams::SlidingLog(sliding_log::Params::new(
                window_like(p.limit())?,
                p.window(),
            )?),
            AlgoParams::Concurrency(p) => AlgoParams::Concurrency(concurrency::Params::new(
                window_like(p.limit())?,
                p.lease(),
            )?),
            AlgoParams::TokenBucket(p) => {
                let (rate, burst) = bucket_like(p.rate(), p.burst())?;
                AlgoParams::TokenBucket(token_bucket::Params::new(rate, burst, p.max_delay())?)
            }
            AlgoParams::Gcra(p) => {
                let (rate, burst) = bucket_like(p.rate(), p.burst())?;
                AlgoParams::Gcra(gcra::Params::new(rate, burst, p.max_delay())?)
            }
            AlgoParams::LeakyBucket(p) => {
                let (rate, burst) = bucket_like(p.rate(), p.burst())?;
                AlgoParams::LeakyBucket(leaky_bucket::Params::new(rate, burst, p.max_delay())?)
            }
        })
    }

    /// The parameters a check decides under when the store holds `quota`
    /// for its key: [`AlgoParams::with_quota`], or these when the values no
    /// longer fit them.
    pub fn under(&self, quota: Option<&Quota>) -> AlgoParams {
        quota
            .and_then(|q| self.with_quota(q).ok())
            .unwrap_or_else(|| self.clone())
    }

    /// The values a [`Quota`] would replace, as these parameters have them.
    pub fn quota_values(&self) -> Quota {
        match self {
            AlgoParams::FixedWindow(p) => Quota {
                limit: Some(p.limit()),
                ..Quota::default()
            },
            AlgoParams::SlidingWindow(p) => Quota {
                limit: Some(p.limit()),
                ..Quota::default()
            },
            AlgoParams::SlidingLog(p) => Quota {
                limit: Some(p.limit()),
                ..Quota::default()
            },
            AlgoParams::Concurrency(p) => Quota {
                limit: Some(p.limit()),
                ..Quota::default()
            },
            AlgoParams::TokenBucket(p) => Quota {
                rate: Some(p.rate()),
                burst: Some(p.burst()),
                limit: None,
            },
            AlgoParams::Gcra(p) => Quota {
                rate: Some(p.rate()),
                burst: Some(p.burst()),
                limit: None,
            },
            AlgoParams::LeakyBucket(p) => Quota {
                rate: Some(p.rate()),
                burst: Some(p.burst()),
                limit: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::SECOND;

    #[test]
    fn the_stored_text_round_trips() {
        let q = Quota {
            limit: None,
            rate: Some(Rate::new(100, SECOND).unwrap()),
            burst: Some(200),
        };
        assert_eq!(q.encode(), "r=100/1000000 b=200");
        assert_eq!(Quota::decode(&q.encode()), Some(q));
        let l = Quota {
            limit: Some(5),
            ..Quota::default()
        };
        assert_eq!(l.encode(), "l=5");
        assert_eq!(Quota::decode("l=5"), Some(l));
        for bad in [
            "", "l=", "l=x", "l=1 l=2", "x=1", "r=0/5", "r=5", "l=5  b=1", "l=-1",
        ] {
            assert_eq!(Quota::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn values_replace_only_their_parameters() {
        let w = AlgoParams::FixedWindow(
            fixed_window::Params::new(10, fixed_window::Window::Fixed(60 * SECOND)).unwrap(),
        );
        let q = Quota {
            limit: Some(500),
            ..Quota::default()
        };
        let got = w.with_quota(&q).unwrap();
        assert_eq!(got.capacity(), Some(500));
        assert_eq!(got.policy().1, 60 * SECOND);
        assert!(matches!(
            w.with_quota(&Quota {
                burst: Some(3),
                ..Quota::default()
            }),
            Err(QuotaError::NotAParameter { field: "burst", .. })
        ));
        assert!(matches!(
            w.with_quota(&Quota {
                limit: Some(0),
                ..Quota::default()
            }),
            Err(QuotaError::Param(ParamError::Zero("limit")))
        ));
        let tb = AlgoParams::TokenBucket(
            token_bucket::Params::new(Rate::new(1, SECOND).unwrap(), 5, 0).unwrap(),
        );
        let got = tb
            .with_quota(&Quota {
                burst: Some(50),
                ..Quota::default()
            })
            .unwrap();
        assert_eq!(got.capacity(), Some(50));
        assert_eq!(got.quota_values().rate, Some(Rate::new(1, SECOND).unwrap()));
        // A value that no longer fits: the default applies.
        let huge = Quota {
            burst: Some(1_000_000_000_000),
            rate: Some(Rate::new(7, 86_400 * SECOND).unwrap()),
            limit: None,
        };
        assert!(tb.with_quota(&huge).is_err());
        assert_eq!(tb.under(Some(&huge)), tb);
    }
}
