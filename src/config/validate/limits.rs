//! `limits:` and a route's inline limits: the key, cost, mode, lockout and
//! overrides around an algorithm's parameters (`params`).

use super::params::{micros, Written};
use super::{Ctx, Result, DAY, SECOND};
use crate::config::cost::{CostConfig, Settle};
use crate::config::model::{
    AlgoParams, ClientMatch, Distribution, KeySource, LimitConfig, LockParams, Mode, OnMissingKey,
    Override,
};
use crate::config::per_key::{PerKeyLimits, ValueSource};
use crate::config::raw::{
    AlgorithmKind, Ordered, PerKey, RawDistribution, RawLimit, RawLockout, RawOverride, RawWindow,
};
use crate::config::units::{format_duration, Window};
use tollgate_limit::algorithm::fixed_window;

impl Ctx<'_> {
    /// `limits:` (the named limits, or policies), in file order.
    pub(super) fn policies(&mut self, raw: Ordered<RawLimit>) -> Result<Vec<LimitConfig>> {
        let mut out: Vec<LimitConfig> = Vec::new();
        for (name, raw) in raw.0 {
            let path = format!("limits.{name}");
            self.name(&path, "limit", &name)?;
            if out.iter().any(|l| l.name == name) {
                return Err(self.err(&path, format!("duplicate limit name \"{name}\"")));
            }
            if raw.name.is_some() {
                return Err(self.err(
                    &format!("{path}.name"),
                    "a policy is named by its key under `limits:`; `name` is only for inline limits",
                ));
            }
            let limit = self.limit(&path, name, raw)?;
            out.push(limit);
        }
        Ok(out)
    }

    /// The limit `name` at `path` (a policy, or a route's inline limit).
    pub(super) fn limit(&mut self, path: &str, name: String, raw: RawLimit) -> Result<LimitConfig> {
        let kind = raw.algorithm;
        let calendar = match &raw.window {
            Some(RawWindow::Calendar(c)) if kind == AlgorithmKind::FixedWindow => {
                Some(self.calendar(&format!("{path}.window"), c)?)
            }
            Some(RawWindow::Calendar(_)) => {
                return Err(self.err(
                    &format!("{path}.window"),
                    format!(
                        "calendar windows are only supported by fixed_window, not {}",
                        kind.name()
                    ),
                ))
            }
            _ => None,
        };
        let per_key = self.per_key(path, &raw)?;
        let written = Written {
            limit: raw.limit.as_ref().map(|l| *l.value()),
            window: match raw.window {
                Some(RawWindow::Plain(w)) => Some(w),
                _ => None,
            },
            rate: raw.rate.as_ref().map(|r| *r.value()),
            burst: raw.burst.as_ref().map(|b| *b.value()),
            max_delay: raw.max_delay.map(|d| d.0),
            lease: raw.lease.map(|d| d.0),
            calendar: calendar.as_ref().map(|c| c.default.window(wall_clock())),
        };
        for param in written.given() {
            if !kind.params().contains(&param) {
                return Err(self.err(
                    &format!("{path}.{param}"),
                    format!(
                        "`{param}` is not a parameter of {} (it takes {})",
                        kind.name(),
                        kind.params().join(", ")
                    ),
                ));
            }
        }
        let params = self.params(path, kind, &written, None)?;
        let key = self.key(path, raw.key.map(|k| k.0))?;
        let exempt = raw.exempt.unwrap_or_default();
        for (i, m) in exempt.iter().enumerate() {
            if let ClientMatch::Source { source, .. } = m {
                self.identity_source(&format!("{path}.exempt[{i}]"), source)?;
            }
        }
        let (cost, metered) = self.cost(path, kind, raw.cost.as_ref())?;
        self.cost_fits(&format!("{path}.cost"), cost, &params, None)?;
        if let Some(l) = metered.as_ref().and_then(|m| m.llm) {
            let field = format!("{path}.cost.llm.other_requests");
            self.cost_fits(&field, l.other_requests, &params, None)?;
        }
        let lockout = match raw.lockout {
            None => None,
            Some(_) if kind == AlgorithmKind::Concurrency => {
                return Err(self.err(
                    &format!("{path}.lockout"),
                    "a lockout is not supported on a concurrency limit",
                ));
            }
            Some(l) => Some(self.lockout(&format!("{path}.lockout"), l, &written)?),
        };
        let overrides = self.overrides(
            path,
            raw.overrides.unwrap_or_default(),
            kind,
            &written,
            cost,
        )?;
        let distribution = self.distribution(
            path,
            raw.distribution,
            kind,
            metered.as_ref(),
            per_key.as_ref(),
            &written,
        )?;
        Ok(LimitConfig {
            name,
            params,
            key,
            on_missing_key: raw.on_missing_key.unwrap_or(OnMissingKey::ClientIp),
            cost,
            mode: raw.mode.unwrap_or(Mode::Enforce),
            lockout,
            exempt,
            overrides,
            calendar,
            per_key,
            metered,
            distribution,
        })
    }

    /// `key` of the limit at `path` (default `client_ip`): at least one
    /// source, identity sources only with consumers.
    fn key(&self, path: &str, raw: Option<Vec<KeySource>>) -> Result<Vec<KeySource>> {
        let key = raw.unwrap_or_else(|| vec![KeySource::ClientIp]);
        if key.is_empty() {
            return Err(self.err(
                &format!("{path}.key"),
                "key needs at least one source (client_ip, header:NAME, ...)",
            ));
        }
        for (i, source) in key.iter().enumerate() {
            let field = match key.len() {
                1 => format!("{path}.key"),
                _ => format!("{path}.key[{i}]"),
            };
            self.identity_source(&field, source)?;
        }
        Ok(key)
    }

    /// `distribution` of the limit at `path` (docs/scaling-out.md, "Leased
    /// limits"): leases only where the units a lease takes are the units
    /// requests would take one by one, and stay so.
    fn distribution(
        &self,
        path: &str,
        raw: Option<RawDistribution>,
        kind: AlgorithmKind,
        metered: Option<&CostConfig>,
        per_key: Option<&PerKeyLimits>,
        written: &Written,
    ) -> Result<Option<Distribution>> {
        let field = format!("{path}.distribution");
        let lease = match raw {
            None | Some(RawDistribution::Exact) => return Ok(None),
            Some(RawDistribution::Leased(l)) => l,
        };
        let refuse = |why: String| Err(self.err(&field, why));
        if !matches!(
            kind,
            AlgorithmKind::FixedWindow
                | AlgorithmKind::SlidingWindow
                | AlgorithmKind::TokenBucket
                | AlgorithmKind::Gcra
        ) {
            return refuse(format!(
                "leased limits are supported by fixed_window, sliding_window, token_bucket and gcra, not {} (its units are {})",
                kind.name(),
                match kind {
                    AlgorithmKind::SlidingLog => "timestamped entries, which a lease cannot hold",
                    AlgorithmKind::LeakyBucket => "a queue that shapes each request's delay",
                    _ => "slots held while a request runs",
                }
            ));
        }
        if metered.is_some_and(|m| m.settle != Settle::None) {
            return refuse(
                "a leased limit cannot have a cost that settles (`cost.settle`): a settlement corrects units in the store that a lease spent locally; use `distribution: exact`, or `settle: none`".to_owned(),
            );
        }
        if let Some(p) = per_key.filter(|p| p.in_store()) {
            return refuse(format!(
                "a leased limit cannot take its {} from the store (`from: store`): a lease is taken under one value, and a raised limit must count on the very next request",
                p.names().join("/")
            ));
        }
        if written.max_delay.is_some_and(|d| !d.is_zero()) {
            return refuse(
                "a leased limit cannot queue (`max_delay`): a lease admits or refuses at once, without the store's schedule".to_owned(),
            );
        }
        if lease.lease == 0 {
            return Err(self.err(&format!("{field}.lease"), "lease must be at least 1 unit"));
        }
        let ttl = lease.ttl.map_or(Distribution::DEFAULT_TTL, |d| d.0);
        if ttl.is_zero() {
            return Err(self.err(&format!("{field}.ttl"), "ttl must be greater than 0"));
        }
        Ok(Some(Distribution {
            lease: lease.lease,
            ttl,
        }))
    }

    /// The values of the limit at `path` that keys may have of their own
    /// (`{default, from}`), all from one place.
    fn per_key(&self, path: &str, raw: &RawLimit) -> Result<Option<PerKeyLimits>> {
        let mut out = PerKeyLimits::default();
        let fields = [
            ("limit", raw.limit.as_ref().and_then(PerKey::from)),
            ("rate", raw.rate.as_ref().and_then(PerKey::from)),
            ("burst", raw.burst.as_ref().and_then(PerKey::from)),
        ];
        for (name, from) in fields {
            let Some(from) = from else { continue };
            let field = format!("{path}.{name}.from");
            let source = match from.strip_prefix("attr:") {
                _ if from == "store" => ValueSource::Store,
                Some(attr) if !attr.is_empty() => {
                    self.identity_source(&field, &KeySource::Attr(attr.to_owned()))?;
                    ValueSource::Attr(attr.to_owned())
                }
                _ => {
                    return Err(self.err(
                        &field,
                        format!("from is `store` or `attr:NAME`, got \"{from}\""),
                    ))
                }
            };
            let slot = match name {
                "limit" => &mut out.limit,
                "rate" => &mut out.rate,
                _ => &mut out.burst,
            };
            *slot = Some(source);
        }
        let mut first: Option<(&str, &ValueSource)> = None;
        for (name, source) in [
            ("limit", &out.limit),
            ("rate", &out.rate),
            ("burst", &out.burst),
        ] {
            let Some(source) = source else { continue };
            match first {
                None => first = Some((name, source)),
                Some((other, s)) if (*s == ValueSource::Store) != (*source == ValueSource::Store) => {
                    return Err(self.err(
                        &format!("{path}.{name}.from"),
                        format!("a limit's per-key values come from one place: `{other}` is from {}, this from {}",
                            describe(s), describe(source)),
                    ))
                }
                Some(_) => {}
            }
        }
        let any = first.is_some();
        Ok(any.then_some(out))
    }

    /// The overrides of the limit at `path`, each with the parameters it
    /// gives its clients, on which `cost` must still fit.
    fn overrides(
        &self,
        path: &str,
        raw: Vec<RawOverride>,
        kind: AlgorithmKind,
        written: &Written,
        cost: u64,
    ) -> Result<Vec<Override>> {
        let mut overrides = Vec::with_capacity(raw.len());
        for (i, o) in raw.into_iter().enumerate() {
            let opath = format!("{path}.overrides[{i}]");
            if o.window.is_some() && written.calendar.is_some() {
                return Err(self.err(
                    &format!("{opath}.window"),
                    "an override cannot change a calendar window (it may set `limit`)",
                ));
            }
            if let ClientMatch::Source { source, .. } = &o.matcher {
                self.identity_source(&format!("{opath}.match"), source)?;
            }
            let params = self.override_(path, &opath, o.limit_params(), kind, written)?;
            self.cost_fits(&format!("{path}.cost"), cost, &params, Some(&opath))?;
            overrides.push(Override {
                matcher: o.matcher,
                params,
            });
        }
        Ok(overrides)
    }

    /// An override of the limit at `path`: only parameters an override may
    /// set, at least one, validated on top of the limit's own.
    fn override_(
        &self,
        path: &str,
        opath: &str,
        over: Written,
        kind: AlgorithmKind,
        written: &Written,
    ) -> Result<AlgoParams> {
        let allowed = kind.override_params();
        let given = over.given();
        if let Some(param) = given.iter().find(|p| !allowed.contains(p)) {
            return Err(self.err(
                &format!("{opath}.{param}"),
                format!(
                    "`{param}` is not a parameter of {} (an override may set {})",
                    kind.name(),
                    allowed.join(", ")
                ),
            ));
        }
        if given.is_empty() {
            return Err(self.err(
                opath,
                format!("an override needs at least one of {}", allowed.join(", ")),
            ));
        }
        self.params(path, kind, written, Some((opath, &over)))
    }

    /// A request costing more than the limit can ever hold would be
    /// rejected every time: an error, at `field` (or at the override that
    /// lowers the capacity).
    fn cost_fits(
        &self,
        field: &str,
        cost: u64,
        params: &AlgoParams,
        over: Option<&str>,
    ) -> Result<()> {
        match params.capacity() {
            Some(capacity) if cost > capacity => {
                let whose = over.map_or(String::new(), |o| format!(" for the clients of {o}"));
                Err(self.err(
                    over.unwrap_or(field),
                    format!(
                        "cost {cost} is more than the limit's capacity {capacity}{whose}: every request would be rejected; raise `{}` or lower `cost`",
                        capacity_param(params)
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// A limit's `lockout` at `path`, with the documented defaults.
    fn lockout(&self, path: &str, raw: RawLockout, written: &Written) -> Result<LockParams> {
        let duration = raw
            .duration
            .ok_or_else(|| self.err(path, "missing field `duration`"))?
            .0;
        if duration.is_zero() {
            return Err(self.err(
                &format!("{path}.duration"),
                "duration must be greater than 0",
            ));
        }
        // Strikes are counted over the limit's own window (or rate period).
        let default_within = match (written.window, written.rate, written.lease) {
            _ if written.calendar.is_some() => match written.calendar {
                Some(fixed_window::Window::Calendar { start, end, .. }) => {
                    std::time::Duration::from_micros(end - start)
                }
                _ => 31 * DAY,
            },
            (Some(Window::Fixed(d)), _, _) => d,
            (Some(Window::Month), _, _) => 31 * DAY,
            (None, Some(rate), _) => rate.period,
            (None, None, lease) => lease.unwrap_or(5 * 60 * SECOND),
        };
        let max_duration = raw.max_duration.map_or(duration.max(DAY), |d| d.0);
        if max_duration < duration {
            return Err(self.err(
                &format!("{path}.max_duration"),
                format!(
                    "max_duration ({}) must be at least duration ({})",
                    format_duration(max_duration),
                    format_duration(duration)
                ),
            ));
        }
        let within = self.positive(
            &format!("{path}.within"),
            raw.within.map(|d| d.0),
            default_within,
        )?;
        let forget_after = self.positive(
            &format!("{path}.forget_after"),
            raw.forget_after.map(|d| d.0),
            DAY,
        )?;
        Ok(LockParams {
            after: u64::from(self.at_least_one(&format!("{path}.after"), raw.after, 1)?),
            within: micros(within),
            duration: micros(duration),
            escalate: u64::from(self.at_least_one(&format!("{path}.escalate"), raw.escalate, 1)?),
            max_duration: micros(max_duration),
            forget_after: micros(forget_after),
        })
    }
}

/// The parameter that sets a limit's capacity.
fn capacity_param(params: &AlgoParams) -> &'static str {
    match params {
        AlgoParams::TokenBucket(_) | AlgoParams::Gcra(_) | AlgoParams::LeakyBucket(_) => "burst",
        _ => "limit",
    }
}

/// Now, in microseconds since the epoch: the instant a calendar window's
/// load-time bounds are computed at.
fn wall_clock() -> tollgate_limit::Micros {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A value source as the operator wrote it.
fn describe(source: &ValueSource) -> String {
    match source {
        ValueSource::Store => "store".into(),
        ValueSource::Attr(a) => format!("attr:{a}"),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{parse, PerKeyLimits, ValueSource};

    fn limit(body: &str) -> Result<Option<PerKeyLimits>, (String, String)> {
        let text = format!("limits:\n  q:\n{body}");
        parse(&text, "gateway.yaml")
            .map(|l| l.config.limits[0].per_key.clone())
            .map_err(|e| (e.field, e.message))
    }

    #[test]
    fn per_key_values_and_their_source() {
        let got = limit(
            "    algorithm: fixed_window\n    limit: { default: 5, from: store }\n    window: 1h\n",
        );
        let per_key = got.unwrap().expect("per key");
        assert_eq!(per_key.limit, Some(ValueSource::Store));
        assert!(per_key.in_store());
        let got = limit(
            "    algorithm: token_bucket\n    rate: { default: 1/s, from: store }\n    burst: 4\n",
        );
        let per_key = got.unwrap().unwrap();
        assert_eq!(
            (per_key.rate, per_key.burst),
            (Some(ValueSource::Store), None)
        );
        assert_eq!(
            limit("    algorithm: fixed_window\n    limit: 5\n    window: 1h\n"),
            Ok(None)
        );
    }

    #[test]
    fn per_key_mistakes_at_their_field() {
        let cases = [
            ("    algorithm: fixed_window\n    limit: { default: 5, from: redis }\n    window: 1h\n", "limits.q.limit.from", "`store` or `attr:NAME`"),
            ("    algorithm: fixed_window\n    limit: { default: 5, from: \"attr:x\" }\n    window: 1h\n", "limits.q.limit.from", "no `consumers:` section"),
            ("    algorithm: fixed_window\n    limit: { from: store }\n    window: 1h\n", "limits.q.limit", "missing field `default`"),
            ("    algorithm: fixed_window\n    limit: { default: 0, from: store }\n    window: 1h\n", "limits.q.limit", "at least 1"),
            ("    algorithm: fixed_window\n    limit: { default: 5, from: store, max: 9 }\n    window: 1h\n", "limits.q.limit", "unknown field `max`"),
            ("    algorithm: token_bucket\n    rate: { default: 1/s, from: store }\n    limit: 5\n", "limits.q.limit", "not a parameter of token_bucket"),
        ];
        for (body, field, message) in cases {
            let (f, m) = limit(body).expect_err(body);
            assert_eq!(f, field, "{body}: {m}");
            assert!(m.contains(message), "{body}: {m}");
        }
    }
}
