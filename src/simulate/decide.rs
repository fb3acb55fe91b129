//! Deciding: one request of the log replayed through the gateway's own
//! admission and limit planning, on the virtual clock, into a value that
//! says what happened ([`Replayed`]). Counting it is `tally`'s; answering
//! it is [`Replayed::answer`].

use std::net::IpAddr;
use std::sync::Arc;

use tollgate_limit::verdict::{verdict, Verdict};
use tollgate_limit::{DecisionKind, Micros, StoreKey};

use super::{request_view, stages, Answer, LineError, Request, Simulator};
use crate::admission;
use crate::auth::Identity;
use crate::client_addr::Client;
use crate::error::{GatewayError, Rejection};
use crate::limit::plan::{self, NotApplied};
use crate::runtime::{Action, RouteRuntime};

/// What the gateway would do with one request of the log.
pub(super) struct Replayed {
    /// The client, as the gateway identifies it.
    pub(super) client: IpAddr,
    /// How far the request got, and what stopped it.
    pub(super) outcome: Outcome,
}

/// How far a request got.
pub(super) enum Outcome {
    /// Answered before any route, or by none (`NoRoute`).
    Refused(GatewayError),
    /// Matched a route that refused it before its limits decided: its
    /// authentication (401, 403, 503, or 429 from `failure_limit`), or a
    /// cost limit's estimate (400 `invalid_cost`).
    RouteRefused {
        route: Arc<RouteRuntime>,
        error: GatewayError,
    },
    /// Matched a route, whose limits decided.
    Routed(Routed),
}

/// A request that matched a route.
pub(super) struct Routed {
    pub(super) route: Arc<RouteRuntime>,
    /// What the route's limits said together.
    pub(super) verdict: RouteVerdict,
    /// What each limit that met the request said, by its index among the
    /// route's limits.
    pub(super) limits: Vec<(usize, LimitPart)>,
}

/// What a route's limits said of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RouteVerdict {
    /// Let through, perhaps after a `max_delay` hold, perhaps over a shadow
    /// limit.
    Allowed {
        delayed: bool,
        shadow_rejected: bool,
    },
    /// Rejected in the name of the route's limit `index`.
    Rejected { index: usize, locked_out: bool },
}

/// What one limit said of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LimitPart {
    /// Not applied: the client is exempt.
    Exempt,
    /// Not applied: a key component is missing and `on_missing_key: skip`.
    Skipped,
    /// Rejected: a key component is missing and `on_missing_key: deny`.
    MissingKey,
    /// Decided by the store for the client key `key`, as `kind` (`None`:
    /// allowed, but another limit rejected the request, so nothing was
    /// taken).
    Decided {
        key: StoreKey,
        kind: Option<DecisionKind>,
        /// This rejection started a lockout.
        lock_started: bool,
    },
}

impl Simulator {
    /// Make `r` the request to replay: `self.req`, reused from line to line.
    pub(super) fn build(&mut self, r: &Request<'_>) -> Result<(), LineError> {
        stages::head(&mut self.req, r)
    }

    /// What the gateway would do with `self.req`, from `r`, at `now`: the
    /// client, admission, then the route's limits, as the gateway runs
    /// them.
    pub(super) fn decide(&mut self, r: &Request<'_>, now: Micros) -> Replayed {
        let server = &self.runtime.config.server;
        let client = Client::identify(r.client, self.req.headers(), &server.trusted_proxies);
        let outcome = match self.admit(r, &client) {
            Ok(route) => {
                let (rt, req) = (&self.runtime, &self.req);
                match stages::authenticate(rt, &route, req, client.addr, now, &mut self.store) {
                    Ok(identity) => match self.decide_limits(
                        route.clone(),
                        client.addr,
                        identity.as_ref(),
                        now,
                        (r.cost, r.usage),
                    ) {
                        Ok(routed) => Outcome::Routed(routed),
                        Err(error) => Outcome::RouteRefused { route, error },
                    },
                    Err(refused) => Outcome::RouteRefused {
                        route,
                        error: refused.error,
                    },
                }
            }
            Err(error) => Outcome::Refused(error),
        };
        Replayed {
            client: client.addr,
            outcome,
        }
    }

    /// Admission ([`stages::admit`]) and the declared body size; the
    /// route, or why the gateway answers without one.
    fn admit(
        &mut self,
        r: &Request<'_>,
        client: &Client,
    ) -> Result<Arc<RouteRuntime>, GatewayError> {
        let route = stages::admit(&mut self.req, &r.path, &self.runtime, client)?;
        admission::body_size(
            self.req.headers(),
            self.runtime.config.server.max_body_bytes,
        )?;
        Ok(route)
    }

    /// The route's limits, as the limiter plans them, decided by the memory
    /// store in one all-or-nothing step; leases are held for zero time
    /// (see the module doc). An applied cost limit without an estimate
    /// (no number in its `reserve` header) refuses the request instead.
    fn decide_limits(
        &mut self,
        route: Arc<RouteRuntime>,
        client: IpAddr,
        identity: Option<&Identity>,
        now: Micros,
        (cost, usage): (Option<u64>, Option<u64>),
    ) -> Result<Routed, GatewayError> {
        let prefix = self.runtime.config.server.ipv6_prefix;
        let mut view = request_view(&self.req, client, &route, prefix);
        view.identity = identity.map(|i| i as &dyn crate::limit::key::Consumer);
        let next_lease = &mut self.next_lease;
        let planned = plan::plan(&route.limits, &view, now, || {
            *next_lease += 1;
            *next_lease
        });
        let plan = match planned {
            Ok(plan) => plan,
            Err(denied) => {
                let index = denied.index;
                return Ok(Routed {
                    route,
                    verdict: RouteVerdict::Rejected {
                        index,
                        locked_out: false,
                    },
                    limits: vec![(index, LimitPart::MissingKey)],
                });
            }
        };
        let mut plan = plan;
        for (check, &i) in plan.checks.iter_mut().zip(&plan.applied) {
            if let Some(metered) = &route.limits[i].metered {
                check.cost = estimate(metered, cost, self.req.headers())?.max(1);
            }
        }
        let outcomes = if plan.checks.is_empty() {
            Vec::new()
        } else {
            self.store.decide(&plan.checks, now)
        };
        if matches!(verdict(&outcomes), Verdict::Allow { .. }) {
            self.settle(&route, &plan.checks, &plan.applied, &outcomes, usage, now);
        }
        let verdict = match verdict(&outcomes) {
            Verdict::Allow {
                delay,
                shadow_rejected,
            } => {
                for check in plan.checks.iter().filter(|c| c.lease != 0) {
                    self.store.release(check, now);
                }
                RouteVerdict::Allowed {
                    delayed: delay > 0,
                    shadow_rejected,
                }
            }
            Verdict::Reject {
                index, locked_out, ..
            } => RouteVerdict::Rejected {
                index: plan.applied[index],
                locked_out,
            },
        };
        let not_applied = plan.not_applied.iter().map(|&(index, why)| match why {
            NotApplied::Exempt => (index, LimitPart::Exempt),
            // A line has no body: every request is read as a model call.
            NotApplied::Skipped | NotApplied::NoModelCall => (index, LimitPart::Skipped),
        });
        let decided = outcomes.iter().enumerate().map(|(i, o)| {
            let part = LimitPart::Decided {
                key: plan.checks[i].key,
                kind: DecisionKind::of_outcome(o),
                lock_started: o.lock_started,
            };
            (plan.applied[i], part)
        });
        let limits = not_applied.chain(decided).collect();
        Ok(Routed {
            route,
            verdict,
            limits,
        })
    }
}

impl Simulator {
    /// Each admitted cost check settled at once, from the line's `usage`
    /// (`on_missing_usage` without one), as the gateway settles when a
    /// response ends.
    fn settle(
        &mut self,
        route: &RouteRuntime,
        checks: &[tollgate_limit::Check],
        applied: &[usize],
        outcomes: &[tollgate_limit::Outcome],
        usage: Option<u64>,
        now: Micros,
    ) {
        for ((check, &i), outcome) in checks.iter().zip(applied).zip(outcomes) {
            let Some(metered) = &route.limits[i].metered else {
                continue;
            };
            if metered.settle == crate::config::Settle::None {
                continue;
            }
            // The line's `usage` is what the response said, whatever the
            // limit reads it from.
            let actual = usage.unwrap_or(match metered.on_missing_usage {
                crate::config::OnMissingUsage::KeepEstimate => check.cost,
                crate::config::OnMissingUsage::ChargeZero => 0,
            });
            let delta = i64::try_from(actual).unwrap_or(i64::MAX)
                - i64::try_from(check.cost).unwrap_or(i64::MAX);
            let within = u64::try_from(metered.settle_within.as_micros()).unwrap_or(u64::MAX);
            self.next_lease += 1;
            if let Some(s) = tollgate_limit::Settlement::new(
                check,
                (outcome, true),
                delta,
                self.next_lease,
                within,
            ) {
                self.store.settle(&s, now);
            }
        }
    }
}

/// A line's estimate for a cost limit: its `cost`, else what the gateway
/// takes from the request head (a constant, a header's number, or
/// `invalid_cost`), else its `content-length` for `request_bytes` (the
/// body's length when the body was whole), else 1 (`llm`: the simulation
/// has no body to read).
fn estimate(
    metered: &crate::config::CostConfig,
    cost: Option<u64>,
    headers: &http::HeaderMap,
) -> Result<u64, GatewayError> {
    if let Some(n) = cost {
        return Ok(n);
    }
    crate::meter::reserve::from_head(metered, headers).unwrap_or_else(|| {
        Ok(match metered.reserve {
            crate::config::Reserve::RequestBytes => headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(0),
            _ => 1,
        })
    })
}

impl Replayed {
    /// What the gateway would answer it; `line` is its line's number.
    pub(super) fn answer(&self, line: u64) -> Answer {
        let routed = match &self.outcome {
            Outcome::Refused(error) => return Answer::refused(line, error),
            Outcome::RouteRefused { route, error } => {
                let mut answer = Answer::refused(line, error);
                answer.route = Some(route.name.to_string());
                if let GatewayError::Limited(r) = error {
                    answer.limit = Some(r.limit.to_string());
                }
                return answer;
            }
            Outcome::Routed(routed) => routed,
        };
        let route = &routed.route;
        let (upstream, status, limit) = match routed.verdict {
            RouteVerdict::Allowed { .. } => match &route.action {
                Action::Respond { status, .. } => (false, Some(status.as_u16()), None),
                Action::Upstream(_) => (true, None, None),
            },
            RouteVerdict::Rejected { index, .. } => (
                false,
                Some(route.limit_response.status.as_u16()),
                Some(route.limits[index].name.to_string()),
            ),
        };
        Answer {
            line,
            route: Some(route.name.to_string()),
            upstream,
            status,
            error: routed.verdict.error(),
            limit,
        }
    }
}

impl Answer {
    /// The answer to a request refused with `error`.
    fn refused(line: u64, error: &GatewayError) -> Answer {
        let (status, code) = error.status_and_code();
        Answer {
            line,
            route: None,
            upstream: false,
            status: Some(status.as_u16()),
            error: Some(code),
            limit: None,
        }
    }
}

impl RouteVerdict {
    /// The gateway's `error` for it, if it rejects.
    pub(super) fn error(self) -> Option<&'static str> {
        match self {
            RouteVerdict::Allowed { .. } => None,
            RouteVerdict::Rejected { locked_out, .. } => Some(Rejection::code_for(locked_out)),
        }
    }
}
