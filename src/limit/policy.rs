//! A limit compiled from its config (whose parameters, overrides and lockout
//! were validated with it): its hashed key prefix, and the namespace its
//! state lives under.
//!
//! The namespace is what docs/operations.md hangs state survival on: it is derived from
//! the limit's name, its algorithm and its key sources, so a reload that
//! changes only a rate or a size keeps the state (the algorithms re-read it
//! under the new parameters), while one that changes the algorithm or the key
//! starts fresh.

use std::sync::Arc;

use tollgate_limit::algorithm::fixed_window;
use tollgate_limit::quota::Quota;
use tollgate_limit::{AlgoParams, LockParams, Micros, StoreKey};

use super::periods::Periods;

use crate::config::{
    ClientMatch, KeySource, LimitConfig, Mode, OnMissingKey, PerKeyLimits, ValueSource,
};
use crate::limit::key::{self, client_matches, Consumer, KeyOutcome, KeyPrefix, RequestView};

/// One compiled limit.
#[derive(Debug)]
pub struct Policy {
    /// The limit's name (headers, logs, metrics, admin API).
    pub name: Arc<str>,
    /// Bytes identifying the limit's state space (see the module doc).
    pub namespace: Vec<u8>,
    /// `namespace` already hashed, for this limit's store keys.
    pub key_prefix: KeyPrefix,
    /// The parameters for every client without an override.
    pub params: AlgoParams,
    /// The key sources (a composite key when more than one).
    pub sources: Vec<KeySource>,
    /// What to do when a header, query or cookie source is absent.
    pub on_missing: OnMissingKey,
    /// Units one request takes.
    pub cost: u64,
    /// `mode: shadow`.
    pub shadow: bool,
    /// The lockout policy.
    pub lockout: Option<LockParams>,
    /// Clients this limit never counts.
    pub exempt: Vec<ClientMatch>,
    /// Other parameters for some clients; the first match wins.
    pub overrides: Vec<(ClientMatch, AlgoParams)>,
    /// A calendar window's periods: the plan writes each request's bounds
    /// into its parameters.
    pub periods: Option<Periods>,
    /// The values keys may have of their own, and where from.
    pub per_key: Option<PerKeyLimits>,
    /// `cost: { reserve, settle, ... }`: estimated at admission, settled
    /// when the response ends.
    pub metered: Option<crate::config::CostConfig>,
    /// `distribution: { lease, ttl }`: the terms of this limit's leases
    /// (docs/scaling-out.md); `None`: exact.
    pub leasing: Option<tollgate_limit::Leasing>,
}

impl Policy {
    /// Compile `cfg` (its parameters were validated with the config).
    pub fn compile(cfg: &LimitConfig) -> Policy {
        let params = cfg.params.clone();
        let overrides = cfg
            .overrides
            .iter()
            .map(|o| (o.matcher.clone(), o.params.clone()))
            .collect();
        let mut namespace = Vec::with_capacity(64);
        for part in [
            "tollgate/1",
            cfg.name.as_str(),
            params.name(),
            &cfg.key
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ] {
            namespace.extend_from_slice(&(part.len() as u64).to_be_bytes());
            namespace.extend_from_slice(part.as_bytes());
        }
        Policy {
            name: cfg.name.as_str().into(),
            key_prefix: KeyPrefix::new(&namespace),
            namespace,
            params,
            sources: cfg.key.clone(),
            on_missing: cfg.on_missing_key,
            cost: cfg.cost.max(1),
            shadow: cfg.mode == Mode::Shadow,
            lockout: cfg.lockout,
            exempt: cfg.exempt.clone(),
            overrides,
            periods: cfg.calendar.as_ref().map(Periods::new),
            per_key: cfg.per_key.clone(),
            metered: cfg.metered.clone(),
            leasing: cfg.distribution.map(|d| {
                let ttl = u64::try_from(d.ttl.as_micros()).unwrap_or(u64::MAX);
                tollgate_limit::Leasing::new(d.lease, ttl)
            }),
        }
    }

    /// Whether keys' own values live in the store (the check reads them in
    /// its decision's call).
    pub fn per_key_in_store(&self) -> bool {
        self.per_key.as_ref().is_some_and(PerKeyLimits::in_store)
    }

    /// The parameters for a request at `now` (its override's, or the
    /// limit's own), with a calendar window's bounds for that instant and
    /// its consumer, and its consumer's own values where they come from
    /// attributes (values from the store are the store's to apply).
    pub fn params_at(&self, view: &RequestView<'_>, now: Micros) -> AlgoParams {
        let params = self
            .overrides
            .iter()
            .find(|(m, _)| client_matches(m, view))
            .map_or(&self.params, |(_, p)| p);
        let params = self.in_period(params, now, view.identity);
        match (&self.per_key, view.identity) {
            (Some(per_key), Some(consumer)) if !per_key.in_store() => {
                let quota = attr_quota(per_key, consumer);
                params.under(quota.as_ref())
            }
            _ => params,
        }
    }

    /// The limit's own parameters at `now`, a calendar window's bounds
    /// those of its configured rule (the admin API knows no consumer).
    pub fn own_params(&self, now: Micros) -> AlgoParams {
        self.in_period(&self.params, now, None)
    }

    /// `params` with a calendar window's bounds at `now` for `consumer`.
    fn in_period(
        &self,
        params: &AlgoParams,
        now: Micros,
        consumer: Option<&dyn Consumer>,
    ) -> AlgoParams {
        match (&self.periods, params) {
            (Some(periods), AlgoParams::FixedWindow(p)) => {
                let window = periods.window(now, consumer);
                fixed_window::Params::new(p.limit(), window)
                    .map_or_else(|_| params.clone(), AlgoParams::FixedWindow)
            }
            _ => params.clone(),
        }
    }

    /// Whether this is a `concurrency` limit.
    pub fn is_concurrency(&self) -> bool {
        matches!(self.params, AlgoParams::Concurrency(_))
    }

    /// This limit's store key for the request, without its display form
    /// (the request path; [`Policy::display_key`] gives that when needed).
    pub fn store_key(&self, view: &RequestView<'_>) -> KeyOutcome<StoreKey> {
        self.key_prefix
            .store_key(&self.sources, self.on_missing, view)
    }

    /// This limit's key for the request: store key and display form.
    pub fn client_key(&self, view: &RequestView<'_>) -> KeyOutcome {
        self.key_prefix
            .client_key(&self.sources, self.on_missing, view)
    }

    /// The display form of this limit's key for the request (`None` when the
    /// request has no key under it).
    pub fn display_key(&self, view: &RequestView<'_>) -> Option<String> {
        key::display_key(&self.sources, self.on_missing, view)
    }
}

/// A consumer's own values from its attributes: each per-key value whose
/// attribute it has and that reads as one (a count, or a rate like
/// `100/s`); `None` when it has none (the defaults apply). Values that do
/// not fit the limit are dropped by [`AlgoParams::under`].
fn attr_quota(per_key: &PerKeyLimits, consumer: &dyn Consumer) -> Option<Quota> {
    let attr = |source: &Option<ValueSource>| match source {
        Some(ValueSource::Attr(name)) => consumer.attr(name).map(str::trim),
        _ => None,
    };
    let quota = Quota {
        limit: attr(&per_key.limit).and_then(|v| v.parse().ok()),
        rate: attr(&per_key.rate)
            .and_then(|v| v.parse::<crate::config::Rate>().ok())
            .and_then(|r| r.to_limit().ok()),
        burst: attr(&per_key.burst).and_then(|v| v.parse().ok()),
    };
    (quota != Quota::default()).then_some(quota)
}
