//! What a request's limit decisions leave behind, from one walk over each
//! decision's figures: the decision and lockout metrics, the top
//! offenders (`GET /top`), the events of the request's span; and the
//! limiter's [`Observed`] store calls.

use std::sync::Arc;
use std::time::Duration;

use tollgate_limit::{Decision, DecisionKind, Status};

use crate::limit::key::RequestView;
use crate::limit::policy::Policy;
use crate::metrics::Metrics;
use crate::runtime::RouteRuntime;
use crate::trace::span::Recording;

use super::Ctx;

/// Whose decision is observed.
#[derive(Clone, Copy)]
pub(super) enum Whose<'a> {
    /// The route's limits: counted in the decision metrics (per route),
    /// their rejections and lockouts too.
    Route(&'a RouteRuntime),
    /// `failure_limit`, charged for a failed credential: top offenders and
    /// span events only.
    Failures(&'a Arc<Policy>),
}

impl<'a> Whose<'a> {
    /// The limits the decision's figures may name.
    fn limits(self) -> &'a [Arc<Policy>] {
        match self {
            Whose::Route(route) => &route.limits,
            Whose::Failures(policy) => std::slice::from_ref(policy),
        }
    }
}

/// One walk over `decision`'s figures (decided for the request `view`):
/// each limit's decision counted (the route's), each limit that rejected
/// noting its client among its top offenders (by the key the limiter
/// decided it under; the display form is made only when the client enters
/// a summary), each decision an event of the request's span when it is
/// recorded.
pub(super) fn observe(
    metrics: &Metrics,
    whose: Whose<'_>,
    decision: &Decision,
    view: &RequestView<'_>,
    mut recording: Option<&mut Recording>,
) {
    let (figures, rejected) = match decision {
        Decision::Allow { figures, .. } => (figures, false),
        Decision::Reject {
            figures,
            locked_out,
            ..
        } => {
            if let Whose::Route(route) = whose {
                metrics.rejection(&route.name, *locked_out);
            }
            (figures, true)
        }
        Decision::Unavailable | Decision::NotApplied => return,
    };
    let limits = whose.limits();
    for f in figures {
        // None: the request was rejected elsewhere and this limit decided
        // nothing.
        let Some(kind) = DecisionKind::of_outcome(&f.outcome) else {
            continue;
        };
        // Figures carry their policy's name, so the pointer finds its limit.
        let index = limits.iter().position(|p| Arc::ptr_eq(&p.name, &f.name));
        if let Whose::Route(route) = whose {
            match index {
                Some(i) => metrics.route_decision(&route.metrics, &route.name, i, &f.name, kind),
                None => metrics.decision(&route.name, &f.name, kind),
            }
            if f.outcome.lock_started {
                metrics.lockout(&f.name);
            }
        }
        let offends = matches!(f.outcome.status, Status::Rejected | Status::LockedOut);
        if let (true, true, Some(i)) = (rejected, offends, index) {
            let policy = &limits[i];
            metrics.top.rejected(&policy.name, f.key, || {
                policy.display_key(view).unwrap_or_default()
            });
        }
        if let Some(recording) = recording.as_deref_mut() {
            recording.limit_decision(&f.name, kind.label(), f.outcome.remaining);
        }
    }
}

/// The limiter's observer for one request: the store-call metrics, and
/// the request's store-call spans when it is recorded.
pub(super) struct Observed<'a> {
    metrics: &'a Metrics,
    recording: Option<&'a Recording>,
}

impl<'a> Observed<'a> {
    /// Store calls counted in `metrics`, and spans of `recording`.
    pub(super) fn new(metrics: &'a Metrics, recording: Option<&'a Recording>) -> Observed<'a> {
        Observed { metrics, recording }
    }

    /// The observer of `ctx`'s request.
    pub(super) fn of(ctx: &'a Ctx<'_>) -> Observed<'a> {
        Observed::new(&ctx.shared.metrics, ctx.done.recording.as_deref())
    }
}

impl tollgate_limit::Observer for Observed<'_> {
    fn store_call(&self, store: &'static str, ok: bool, elapsed: Duration) {
        self.metrics.store_call(store, ok, elapsed);
        if let Some(recording) = self.recording {
            recording.store_call(store, ok, elapsed);
        }
    }
}
