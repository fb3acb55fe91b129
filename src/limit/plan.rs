//! A request's limits, planned (docs/configuration/limits.md): which of its route's
//! limits apply to this client, under which key and parameters ([`plan`]).
//!
//! A plain function of the request and the limits, with no I/O: the
//! pipeline ([`super::decide`]) and `tollgate simulate` call the same one,
//! so a simulation applies exactly the gateway's rules; both read the
//! store's answers with `tollgate_limit::verdict`.

use std::sync::Arc;

use tollgate_limit::{Check, Micros};

use super::key::{client_matches, KeyOutcome, RequestView};
use super::policy::Policy;

/// Why one of a route's limits does not apply to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotApplied {
    /// The client is in the limit's `exempt` list.
    Exempt,
    /// A key component is missing and `on_missing_key: skip`.
    Skipped,
    /// A cost limit that charges a request that is no model call nothing
    /// (`llm.other_requests: 0`, docs/configuration/cost.md).
    NoModelCall,
}

/// The checks a request makes, one per limit that applies, in route order.
#[derive(Debug)]
pub struct Plan<'p> {
    limits: &'p [Arc<Policy>],
    /// What the store decides, all or nothing.
    pub checks: Vec<Check>,
    /// For each check, the index of its limit in the route's limits.
    pub applied: Vec<usize>,
    /// The route's limits that do not apply (index, why); usually empty.
    pub not_applied: Vec<(usize, NotApplied)>,
}

impl<'p> Plan<'p> {
    /// The limit of check `i`.
    pub fn policy(&self, i: usize) -> &'p Arc<Policy> {
        &self.limits[self.applied[i]]
    }

    /// The limits of the checks, in order.
    pub fn policies(&self) -> impl Iterator<Item = &'p Arc<Policy>> + '_ {
        self.applied.iter().map(|&i| &self.limits[i])
    }
}

/// A limit whose key component is missing with `on_missing_key: deny`: the
/// request is rejected by it, and no other limit is decided.
#[derive(Debug, Clone, Copy)]
pub struct Denied<'p> {
    /// The limit.
    pub policy: &'p Arc<Policy>,
    /// Its index in the route's limits.
    pub index: usize,
}

/// Plan a request against its route's `limits`: exempt clients and keys
/// missing with `skip` leave a limit out; the first override that matches
/// gives the parameters, and a calendar window its bounds at `now`; shadow
/// limits never lock out. `lease` numbers each `concurrency` check (the
/// gateway draws a random id, `simulate` counts).
pub fn plan<'p>(
    limits: &'p [Arc<Policy>],
    view: &RequestView<'_>,
    now: Micros,
    mut lease: impl FnMut() -> u64,
) -> Result<Plan<'p>, Denied<'p>> {
    let mut plan = Plan {
        limits,
        checks: Vec::with_capacity(limits.len()),
        applied: Vec::with_capacity(limits.len()),
        not_applied: Vec::new(),
    };
    for (index, policy) in limits.iter().enumerate() {
        if policy.exempt.iter().any(|m| client_matches(m, view)) {
            plan.not_applied.push((index, NotApplied::Exempt));
            continue;
        }
        let key = match policy.store_key(view) {
            KeyOutcome::Key(key) => key,
            KeyOutcome::Skip => {
                plan.not_applied.push((index, NotApplied::Skipped));
                continue;
            }
            KeyOutcome::Deny => return Err(Denied { policy, index }),
        };
        let params = policy.params_at(view, now);
        plan.checks.push(Check {
            name: policy.name.clone(),
            key,
            params,
            cost: policy.cost,
            lockout: if policy.shadow { None } else { policy.lockout },
            shadow: policy.shadow,
            lease: if policy.is_concurrency() { lease() } else { 0 },
            quota: policy.per_key_in_store(),
            leasing: policy.leasing,
        });
        plan.applied.push(index);
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;

    fn policies(yaml: &str) -> Vec<Arc<Policy>> {
        let loaded = config::parse(yaml, "t.yaml").expect("config");
        loaded
            .config
            .limits
            .iter()
            .map(|l| Arc::new(Policy::compile(l)))
            .collect()
    }

    fn view<'a>(
        client: &str,
        headers: &'a http::HeaderMap,
        query: Option<&'a str>,
    ) -> RequestView<'a> {
        RequestView {
            client: client.parse().unwrap(),
            headers,
            query,
            route: "r",
            ipv6_prefix: 64,
            identity: None,
        }
    }

    #[test]
    fn exempt_skipped_overridden_and_denied() {
        let limits = policies(
            "limits:
  a: { algorithm: fixed_window, limit: 5, window: 1m, exempt: [\"10.0.0.0/8\"] }
  b: { algorithm: fixed_window, limit: 5, window: 1m, key: \"header:x-user\", on_missing_key: skip }
  c:
    algorithm: token_bucket
    rate: 10/s
    overrides: [{ match: \"query:tier=gold\", burst: 100 }]
  d: { algorithm: concurrency, limit: 2, mode: shadow }
  e: { algorithm: gcra, rate: 1/s, key: \"cookie:sid\", on_missing_key: deny }
",
        );
        let headers = http::HeaderMap::new();
        let leases = std::cell::Cell::new(0);
        let next = || {
            leases.set(leases.get() + 1);
            leases.get()
        };
        // Exempt from `a`, no x-user for `b`, gold for `c`, denied by `e`.
        let denied = plan(
            &limits,
            &view("10.1.2.3", &headers, Some("tier=gold")),
            0,
            &next,
        )
        .expect_err("no sid cookie");
        assert_eq!((denied.index, &*denied.policy.name), (4, "e"));

        let first_four = &limits[..4];
        let p = plan(
            first_four,
            &view("10.1.2.3", &headers, Some("tier=gold")),
            0,
            &next,
        )
        .expect("planned");
        assert_eq!(
            p.not_applied,
            [(0, NotApplied::Exempt), (1, NotApplied::Skipped)]
        );
        assert_eq!(p.applied, [2, 3]);
        assert_eq!(p.policy(0).name.as_ref(), "c");
        assert_eq!(
            p.checks[0].params.capacity(),
            Some(100),
            "the override's burst"
        );
        assert_eq!(p.checks[0].lease, 0);
        assert_eq!(
            p.checks[1].lease,
            leases.get(),
            "a concurrency check gets a lease id"
        );
        assert!(p.checks[1].shadow && p.checks[1].lockout.is_none());

        let p = plan(first_four, &view("192.0.2.1", &headers, None), 0, next).expect("planned");
        assert_eq!(p.not_applied, [(1, NotApplied::Skipped)]);
        assert_eq!(p.applied, [0, 2, 3]);
        assert_eq!(p.checks[1].params.capacity(), Some(10), "no override");
    }
}
