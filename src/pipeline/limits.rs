//! Stage: the route's limits (docs/configuration/limits.md), planned by
//! [`crate::limit::plan`] (as `tollgate simulate` and `POST /probe` plan
//! them) and decided by the limiter, cost estimates charged with them.

use std::sync::Arc;
use std::time::Duration;

use http::Request;
use tollgate_limit::{Decision, Figure};

use crate::error::{GatewayError, Rejection, Unavailable};
use crate::limit;
use crate::meter;

use crate::runtime::RouteRuntime;

use super::{observe, Ctx, Observed, Whose};

/// Stage: the route's limits (docs/configuration/limits.md), decided by the limiter (planned by
/// [`crate::limit::plan`], shared with `tollgate simulate`). An admitted
/// request keeps its concurrency leases in `ctx` and gives back the figures
/// for its rate-limit headers; a rejected one is a [`GatewayError::Limited`].
pub(super) async fn decide_limits<B>(
    req: &Request<B>,
    route: &RouteRuntime,
    ctx: &mut Ctx<'_>,
    reserve: &mut limit::Estimates<GatewayError>,
) -> Result<Vec<Figure>, GatewayError> {
    if route.limits.is_empty() {
        return Ok(Vec::new());
    }
    let view = request_view!(req, route, ctx);
    let metrics = &ctx.shared.metrics;
    let limiter = &ctx.rt.limiter;
    let observer = Observed::of(ctx);
    let (decision, reserved) =
        limit::decide_reserving(limiter, &route.limits, &view, &observer, reserve).await?;
    // A request that is no model call has no usage to settle from: its
    // charge is final.
    let no_call = ctx.llm == Some(meter::llm::Seen::NoCall);
    let meters: Vec<meter::Meter> = match &decision {
        Decision::Allow { figures, .. } => reserved
            .into_iter()
            .filter_map(|(i, check)| {
                let policy = route.limits[i].clone();
                let figure = figures
                    .iter()
                    .find(|f| Arc::ptr_eq(&f.name, &policy.name))?
                    .clone();
                metrics.cost_units(&policy.name, "reserved", check.cost);
                let from_usage = policy
                    .metered
                    .as_ref()
                    .is_some_and(|c| c.settle == crate::config::Settle::LlmUsage);
                if no_call && from_usage {
                    return None;
                }
                Some(meter::Meter {
                    policy,
                    check,
                    figure,
                    id: fastrand::u64(1..),
                })
            })
            .collect(),
        _ => Vec::new(),
    };
    let recording = ctx.done.recording.as_deref_mut();
    observe(metrics, Whose::Route(route), &decision, &view, recording);
    if !meters.is_empty() {
        ctx.done.bill = Some(meter::Bill::new(meters, ctx.rt.limiter.clone()));
    }
    ctx.done.record.decision = decision.kind();
    match decision {
        Decision::Allow {
            delay,
            figures,
            leases,
            ..
        } => {
            ctx.done.held.leases = leases;
            if delay > 0 {
                tokio::time::sleep(Duration::from_micros(delay)).await;
            }
            Ok(figures)
        }
        Decision::NotApplied => Ok(Vec::new()),
        refused => Err(rejection(refused, route)),
    }
}

/// The answer to a decision that refused the request: a rejection with
/// the route's `limit_response`, or the store's unavailability
/// (`on_error: deny`).
pub(super) fn rejection(decision: Decision, route: &RouteRuntime) -> GatewayError {
    match decision {
        Decision::Reject {
            locked_out,
            limit,
            retry_after,
            figures,
        } => GatewayError::Limited(Box::new(Rejection {
            locked_out,
            limit,
            retry_after,
            figures,
            limits: route.limits.clone(),
            answer: route.limit_response.clone(),
        })),
        _ => GatewayError::LimiterUnavailable(Some(Box::new(Unavailable {
            answer: route.limit_response.clone(),
            limits: route.limits.iter().map(|p| p.name.clone()).collect(),
        }))),
    }
}
