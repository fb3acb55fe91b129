//! Settling a request's cost limits when its response ended
//! (docs/configuration/cost.md): `actual - estimate` applied once to the
//! (limit, key) admission charged, in the background, retried on store
//! errors until `settle_within` after admission, never holding the
//! response; every outcome counted in `tollgate_cost_settlements_total`.

use std::future::Future as _;
use std::sync::Arc;
use std::task::{Context, Waker};

use tollgate_limit::{Limiter, SettleOutcome, Settlement};

use super::reading::{Actual, Reading};
use super::Meter;
use crate::shared::Shared;

/// Settle each of `meters` from `reading`: count what it settles to, and
/// apply the difference in the background (nothing to apply when it is
/// zero).
pub fn settle(limiter: &Arc<Limiter>, shared: &Arc<Shared>, meters: Vec<Meter>, reading: &Reading) {
    let metrics = &shared.metrics;
    for meter in meters {
        let Some(cost) = meter.policy.metered.as_ref() else {
            continue;
        };
        let estimate = meter.estimate();
        let Some(actual) = reading.actual(cost, estimate) else {
            continue;
        };
        let name = &meter.policy.name;
        metrics.cost_units(name, "settled", actual.units());
        let delta = i64::try_from(actual.units())
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(estimate).unwrap_or(i64::MAX));
        let outcome = match (actual, delta) {
            (Actual::Missing(_), _) => "missing_usage",
            (_, d) if d < 0 => "refund",
            (_, d) if d > 0 => "extra",
            _ => "settled",
        };
        if delta == 0 {
            metrics.settlement(name, outcome);
            continue;
        }
        let within = u64::try_from(cost.settle_within.as_micros()).unwrap_or(u64::MAX);
        let Some(settlement) = meter
            .figure
            .settlement(&meter.check, delta, meter.id, within)
        else {
            metrics.settlement(name, outcome);
            continue;
        };
        let (limiter, owner) = (limiter.clone(), shared.clone());
        let mut task = Box::pin(async move {
            let applied = apply(&limiter, &settlement).await;
            let outcome = if applied { outcome } else { "dropped" };
            owner.metrics.settlement(&settlement.name, outcome);
        });
        // The memory store answers at once: no task for it (a task costs
        // about 3,000 instructions, callgrind). A store call that waits
        // (Redis) goes on in a task of its own, which polls it again with
        // its own waker; shutdown waits for those.
        let mut cx = Context::from_waker(Waker::noop());
        // Outside a runtime (a request dropped as the process ends) there
        // is nothing to run it on: it is dropped rather than panic in a
        // destructor.
        if task.as_mut().poll(&mut cx).is_pending() && tokio::runtime::Handle::try_current().is_ok()
        {
            shared.settling.spawn(task);
        }
    }
}

/// Apply `s`, sent again while the store cannot answer (it is
/// idempotent) until its deadline; whether it was applied (or found
/// applied already).
async fn apply(limiter: &Limiter, s: &Settlement) -> bool {
    match limiter.settle_retrying(s.clone()).await {
        Ok(SettleOutcome::Applied { .. } | SettleOutcome::Replayed { .. }) => true,
        Ok(SettleOutcome::Expired | SettleOutcome::Unsupported) => false,
        Err(error) => {
            tracing::warn!(limit = %s.name, %error, "cost settlement dropped: the store did not take it within settle_within");
            false
        }
    }
}
