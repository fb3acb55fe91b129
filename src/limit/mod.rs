//! The gateway's side of throttling: which of a route's limits apply to an
//! HTTP request and under which keys, and the rate-limit fields of the
//! answer. The deciding itself (algorithms, deny cache, stores, `on_error`)
//! is the `tollgate_limit` crate's [`Limiter`].
//!
//! - [`policy`]: a limit compiled from its config (namespace, key prefix,
//!   exemptions, overrides).
//! - [`key`]: client keys from a request (address, headers, query,
//!   cookies), hashed into store keys; exempt/override matching.
//! - [`plan`]: the checks a request makes, one per limit that applies.
//! - [`periods`]: a calendar window's periods, per request and consumer.
//! - [`headers`]: `RateLimit-Policy` / `RateLimit` / `X-RateLimit-*` on a
//!   response.
//!
//! [`decide`] is the stage the pipeline calls: plan, then ask the limiter.

use std::sync::Arc;

use tollgate_limit::{Decision, Limiter, Observer, Request};

pub mod headers;
pub mod key;
pub mod periods;
pub mod plan;
pub mod policy;

use key::RequestView;
use policy::Policy;

/// Decide a request against its route's `limits`: a limit whose key is
/// missing with `on_missing_key: deny` rejects it outright; otherwise the
/// limiter decides the checks that apply ([`Decision::NotApplied`] when
/// none does: every limit exempt or skipped). `observer` hears of the store
/// call.
pub async fn decide(
    limiter: &Arc<Limiter>,
    limits: &[Arc<Policy>],
    view: &RequestView<'_>,
    observer: &dyn Observer,
) -> Decision {
    match planned(limiter, limits, view) {
        Ok(plan) => {
            decide_planned(limiter, limits, view, observer, plan.checks, &plan.applied).await
        }
        Err(rejected) => rejected,
    }
}

/// A cost limit's estimate for one request (docs/configuration/cost.md).
#[derive(Debug)]
pub enum Estimate<E> {
    /// Charge this many units (an estimate of 0 charges 1).
    Units(u64),
    /// The request is no model call and the limit charges such requests
    /// nothing (`llm.other_requests: 0`): the limit does not apply.
    NoModelCall,
    /// The request has no estimate: it is answered with this error, if
    /// the limit applies to it.
    Invalid(E),
}

/// Each cost limit's [`Estimate`] for one request, by the limit's index
/// among the route's limits: `None` for a limit without `cost:`.
pub type Estimates<E> = [Option<Estimate<E>>];

/// [`decide`], each limit `i` that applies charging its estimate
/// `reserve[i]` instead of its `cost` (docs/configuration/cost.md): an
/// estimate above the limit's capacity is rejected at once, never capped.
/// An applied limit whose estimate is an error answers the request with
/// that error (taken out of `reserve`) and decides nothing; a limit that
/// does not apply (exempt, skipped) needs no estimate. Also gives back the
/// estimated limits' checks as decided (index in `limits`, check), for
/// their settlement when the response ends.
pub async fn decide_reserving<E>(
    limiter: &Arc<Limiter>,
    limits: &[Arc<Policy>],
    view: &RequestView<'_>,
    observer: &dyn Observer,
    reserve: &mut Estimates<E>,
) -> Result<(Decision, Vec<(usize, tollgate_limit::Check)>), E> {
    let plan = match planned(limiter, limits, view) {
        Ok(plan) => plan,
        Err(rejected) => return Ok((rejected, Vec::new())),
    };
    let mut plan = plan;
    let reserved = reserve_estimates(&mut plan, reserve)?;
    let decision =
        decide_planned(limiter, limits, view, observer, plan.checks, &plan.applied).await;
    Ok((decision, reserved))
}

/// Each applied check with an estimate charges it (at least 1), and one
/// that charges a request that is no model call nothing leaves the plan;
/// the checks charged so (limit index, check), or the first applied
/// limit's estimate error. `POST /probe` charges its estimates with it
/// too.
pub fn reserve_estimates<E>(
    plan: &mut plan::Plan<'_>,
    reserve: &mut Estimates<E>,
) -> Result<Vec<(usize, tollgate_limit::Check)>, E> {
    let mut reserved = Vec::new();
    let mut at = 0;
    while at < plan.checks.len() {
        let i = plan.applied[at];
        match reserve.get_mut(i).and_then(Option::take) {
            None => {}
            Some(Estimate::Units(units)) => {
                plan.checks[at].cost = units.max(1);
                reserved.push((i, plan.checks[at].clone()));
            }
            Some(Estimate::NoModelCall) => {
                plan.checks.remove(at);
                plan.applied.remove(at);
                plan.not_applied.push((i, plan::NotApplied::NoModelCall));
                continue;
            }
            Some(Estimate::Invalid(invalid)) => return Err(invalid),
        }
        at += 1;
    }
    Ok(reserved)
}

/// The request's plan, or the rejection of a limit whose key is missing
/// with `on_missing_key: deny`.
fn planned<'p>(
    limiter: &Limiter,
    limits: &'p [Arc<Policy>],
    view: &RequestView<'_>,
) -> Result<plan::Plan<'p>, Decision> {
    plan::plan(limits, view, limiter.now(), || fastrand::u64(1..)).map_err(|denied| {
        Decision::Reject {
            locked_out: false,
            limit: denied.policy.name.clone(),
            retry_after: 0,
            figures: Vec::new(),
        }
    })
}

/// The limiter's decision on `checks` (limit `limits[applied[i]]` each).
async fn decide_planned(
    limiter: &Arc<Limiter>,
    limits: &[Arc<Policy>],
    view: &RequestView<'_>,
    observer: &dyn Observer,
    checks: Vec<tollgate_limit::Check>,
    applied: &[usize],
) -> Decision {
    // The same walk that gave each key, so a key always has a display form.
    let describe = |i: usize| limits[applied[i]].display_key(view);
    let request = Request {
        checks,
        observer,
        describe: &describe,
    };
    limiter.decide(request).await
}

/// The deny cache's answer for `failure_limit` (docs/configuration/consumers.md)
/// and this client, without a store call: `Some` while the client is known
/// to be locked out by it, so its credentials need not be verified at all.
/// (A client over a `failure_limit` without a lockout is refused only on
/// its next failed credential.)
pub fn failures_denied(
    limiter: &Limiter,
    failure_limit: &Arc<Policy>,
    view: &RequestView<'_>,
) -> Option<Decision> {
    let limits = std::slice::from_ref(failure_limit);
    let plan = plan::plan(limits, view, limiter.now(), || 0).ok()?;
    limiter.cached(&plan.checks).filter(|d| {
        matches!(
            d,
            Decision::Reject {
                locked_out: true,
                ..
            }
        )
    })
}

#[cfg(test)]
mod tests {
    //! The stage on the memory store: keys from requests, exemptions,
    //! `on_missing_key`, overrides, and who a lockout is named after.

    use tollgate_limit::algorithm::SECOND;
    use tollgate_limit::{ManualClock, StoreConfig};

    use super::*;

    struct Fixture {
        limiter: Arc<Limiter>,
        limits: Vec<Arc<Policy>>,
    }

    fn fixture(limits_yaml: &str) -> Fixture {
        let loaded = crate::config::parse(limits_yaml, "t.yaml").expect("config");
        let clock = Arc::new(ManualClock::new(1_700_000_000 * SECOND));
        let limiter = Limiter::with_clock(&StoreConfig::memory(), None, clock).unwrap();
        let limits = loaded
            .config
            .limits
            .iter()
            .map(|l| Arc::new(Policy::compile(l)))
            .collect();
        Fixture { limiter, limits }
    }

    impl Fixture {
        async fn decide(&self, client: &str, headers: &http::HeaderMap) -> Decision {
            let view = RequestView {
                client: client.parse().unwrap(),
                headers,
                query: None,
                route: "r",
                ipv6_prefix: 64,
                identity: None,
            };
            decide(&self.limiter, &self.limits, &view, &()).await
        }
    }

    /// `allowed`, `not_applied`, or the rejecting limit's name.
    fn kind(decision: &Decision) -> String {
        match decision {
            Decision::Allow { .. } => "allowed".into(),
            Decision::NotApplied => "not_applied".into(),
            Decision::Reject { limit, .. } => format!("rejected by {limit}"),
            Decision::Unavailable => "unavailable".into(),
        }
    }

    #[tokio::test]
    async fn exempt_skipped_and_denied_keys() {
        let f = fixture(
            "limits:\n  k: { algorithm: gcra, rate: 1/s, key: \"header:x-user\", on_missing_key: deny, exempt: [\"10.9.0.0/16\"] }\n",
        );
        let none = http::HeaderMap::new();
        assert_eq!(kind(&f.decide("10.9.1.1", &none).await), "not_applied");
        let denied = f.decide("10.0.0.1", &none).await;
        assert_eq!(
            kind(&denied),
            "rejected by k",
            "no x-user with on_missing_key: deny"
        );
        assert!(matches!(
            denied,
            Decision::Reject {
                retry_after: 0,
                locked_out: false,
                ..
            }
        ));
        let mut h = http::HeaderMap::new();
        h.insert("x-user", http::HeaderValue::from_static("ann"));
        assert_eq!(kind(&f.decide("10.0.0.1", &h).await), "allowed");
        assert_eq!(kind(&f.decide("10.0.0.1", &h).await), "rejected by k");
        h.insert("x-user", http::HeaderValue::from_static("bob"));
        assert_eq!(
            kind(&f.decide("10.0.0.1", &h).await),
            "allowed",
            "another key"
        );

        let f = fixture(
            "limits:\n  s: { algorithm: gcra, rate: 1/s, key: \"header:x-user\", on_missing_key: skip }\n",
        );
        assert_eq!(kind(&f.decide("10.0.0.1", &none).await), "not_applied");
    }

    #[tokio::test]
    async fn an_override_gives_its_parameters() {
        let f = fixture(
            "limits:
  p:
    algorithm: token_bucket
    rate: 1/500d
    burst: 1
    overrides: [{ match: \"header:x-tier=gold\", burst: 3 }]
",
        );
        let plain = http::HeaderMap::new();
        let mut gold = http::HeaderMap::new();
        gold.insert("x-tier", http::HeaderValue::from_static("gold"));
        assert_eq!(kind(&f.decide("10.0.0.1", &plain).await), "allowed");
        assert_eq!(kind(&f.decide("10.0.0.1", &plain).await), "rejected by p");
        // The same client and key, under the override's burst of 3: one
        // token taken, two left.
        assert_eq!(kind(&f.decide("10.0.0.1", &gold).await), "allowed");
        assert_eq!(kind(&f.decide("10.0.0.1", &gold).await), "allowed");
        assert_eq!(kind(&f.decide("10.0.0.1", &gold).await), "rejected by p");
    }

    #[tokio::test]
    async fn a_lockout_is_named_by_the_requests_display_key() {
        let f = fixture(
            "limits:\n  l: { algorithm: fixed_window, limit: 1, window: 1m, key: [client_ip, \"header:x-user\"], lockout: { duration: 30s } }\n",
        );
        let mut h = http::HeaderMap::new();
        h.insert("x-user", http::HeaderValue::from_static("ann|1"));
        assert_eq!(kind(&f.decide("10.0.0.1", &h).await), "allowed");
        assert!(matches!(
            f.decide("10.0.0.1", &h).await,
            Decision::Reject {
                locked_out: true,
                ..
            }
        ));
        let locked = f.limiter.lockouts().await.unwrap();
        assert_eq!(locked.len(), 1);
        assert_eq!(
            locked[0].label,
            Some((Arc::from("l"), "10.0.0.1|ann%7C1".to_owned()))
        );
    }
}
