//! Deciding: one request of the log replayed through the gateway's own
//! admission and limit planning, on the virtual clock, into a value that
//! says what happened ([`Replayed`]). Counting it is `tally`'s; answering
//! it is [`Replayed::answer`].

use std::net::IpAddr;
use std::sync::Arc;

use futures_util::FutureExt as _;
use http::{header, HeaderName, HeaderValue, Method, Uri, Version};
use tollgate_limit::algorithm::SECOND;
use tollgate_limit::verdict::{verdict, Verdict};
use tollgate_limit::{DecisionKind, Micros, StoreKey};

use super::{request_view, Answer, LineError, Request, Simulator};
use crate::admission;
use crate::auth::{self, AuthOutcome, Identity};
use crate::error::{GatewayError, Rejection};
use crate::identity::Client;
use crate::limit::plan::{self, NotApplied};
use crate::limit::policy::Policy;
use crate::pipeline::refusal_answer;
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
    /// Matched a route whose authentication refused it (401, 403, 503, or
    /// 429 from `failure_limit`); its limits decided nothing.
    Unauthenticated {
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
        let method = Method::from_bytes(r.method.as_bytes())
            .map_err(|_| LineError(format!("`method`: not a method: {:?}", r.method)))?;
        let headers = self.req.headers_mut();
        headers.clear();
        for (name, value) in &r.headers {
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| LineError(format!("`headers`: bad header name {name:?}")))?;
            let v = HeaderValue::from_bytes(value.as_bytes())
                .map_err(|_| LineError(format!("`headers`: bad value of {name:?}")))?;
            headers.append(n, v);
        }
        let version = match &r.host {
            Some(host) if !headers.contains_key(header::HOST) => {
                let v = HeaderValue::from_str(host)
                    .map_err(|_| LineError(format!("`host`: not a header value: {host:?}")))?;
                headers.insert(header::HOST, v);
                Version::HTTP_11
            }
            Some(_) => Version::HTTP_11,
            // A request without Host is one an HTTP/1.0 client may send.
            None if headers.contains_key(header::HOST) => Version::HTTP_11,
            None => Version::HTTP_10,
        };
        *self.req.method_mut() = method;
        *self.req.version_mut() = version;
        Ok(())
    }

    /// What the gateway would do with `self.req`, from `r`, at `now`: the
    /// client, admission, then the route's limits, as the gateway runs
    /// them.
    pub(super) fn decide(&mut self, r: &Request<'_>, now: Micros) -> Replayed {
        let server = &self.runtime.config.server;
        let client = Client::identify(r.client, self.req.headers(), &server.trusted_proxies);
        let outcome = match self.admit(r, &client) {
            Ok(route) => match self.authenticate(&route, client.addr, now) {
                Ok(identity) => {
                    Outcome::Routed(self.decide_limits(route, client.addr, identity.as_ref(), now))
                }
                Err(error) => Outcome::Unauthenticated { route, error },
            },
            Err(error) => Outcome::Refused(error),
        };
        Replayed {
            client: client.addr,
            outcome,
        }
    }

    /// Admission: the request-target, `admission::admit` and the declared
    /// body size; the route, or why the gateway answers without one.
    fn admit(
        &mut self,
        r: &Request<'_>,
        client: &Client,
    ) -> Result<Arc<RouteRuntime>, GatewayError> {
        // A target the gateway's HTTP parser would not take is a 400 too.
        let uri = Uri::try_from(r.path.as_ref()).map_err(|_| GatewayError::BadRequest {
            reason: "invalid request target",
            close: false,
        })?;
        *self.req.uri_mut() = uri;
        let admitted = admission::admit(&self.req, &self.runtime, client, false)?;
        admission::body_size(
            self.req.headers(),
            self.runtime.config.server.max_body_bytes,
        )?;
        Ok(admitted.route.clone())
    }

    /// The route's limits, as the limiter plans them, decided by the memory
    /// store in one all-or-nothing step; leases are held for zero time
    /// (see the module doc).
    fn decide_limits(
        &mut self,
        route: Arc<RouteRuntime>,
        client: IpAddr,
        identity: Option<&Identity>,
        now: Micros,
    ) -> Routed {
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
                return Routed {
                    route,
                    verdict: RouteVerdict::Rejected {
                        index,
                        locked_out: false,
                    },
                    limits: vec![(index, LimitPart::MissingKey)],
                };
            }
        };
        let outcomes = if plan.checks.is_empty() {
            Vec::new()
        } else {
            self.store.decide(&plan.checks, now)
        };
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
            NotApplied::Skipped => (index, LimitPart::Skipped),
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
        Routed {
            route,
            verdict,
            limits,
        }
    }
}

impl Simulator {
    /// Authentication, as the gateway's stage runs it
    /// (docs/configuration/consumers.md): the same credential finding,
    /// verification ([`Authenticator::verify`](crate::auth::Authenticator::verify),
    /// at the request's virtual time; JWKS from a URL are not fetched, so
    /// such tokens are `auth_unavailable`) and judgement
    /// ([`auth::judge`]); `failure_limit` decided by the replay's store. A
    /// client `failure_limit` locked out is turned away before verifying
    /// (on routes with `auth`), as the gateway's deny cache does.
    fn authenticate(
        &mut self,
        route: &Arc<RouteRuntime>,
        client: IpAddr,
        now: Micros,
    ) -> Result<Option<Identity>, GatewayError> {
        let Some(auth) = self.runtime.auth.clone() else {
            return Ok(None);
        };
        let required = route.auth.as_ref();
        let kinds = auth.kinds(required);
        let (headers, query) = (self.req.headers(), self.req.uri().query());
        let presented = auth.presented(required, headers, query, None);
        if presented.is_empty() && required.is_none() {
            return Ok(None);
        }
        let failures = self.runtime.failure_limit.clone();
        let prefix = self.runtime.config.server.ipv6_prefix;
        let view = request_view(&self.req, client, route, prefix);
        let failure_check = failures.as_ref().and_then(|f| {
            let plan = plan::plan(std::slice::from_ref(f), &view, now, || 0).ok()?;
            plan.checks.into_iter().next().map(|c| (f.clone(), c))
        });
        if let Some((policy, check)) = &failure_check {
            let (_, lock) = self.store.inspect(&check.key, now);
            if lock.locked(now) {
                if required.is_none() {
                    return Ok(None);
                }
                return Err(failure_rejection(policy, route, true, lock.lu - now));
            }
        }
        let verified = auth
            .verify(&presented, now / SECOND)
            .now_or_never()
            .unwrap_or(auth::Verdict::Unavailable("not fetched".into()));
        let (outcome, judged) = auth::judge(required, kinds, verified);
        let mut charged = None;
        if let (AuthOutcome::Invalid, Some((policy, check))) = (outcome, &failure_check) {
            let outcomes = self.store.decide(std::slice::from_ref(check), now);
            if let Verdict::Reject {
                locked_out,
                retry_after,
                ..
            } = verdict(&outcomes)
            {
                charged = Some(failure_rejection(policy, route, locked_out, retry_after));
            }
        }
        match (judged, charged) {
            (Ok(identity), _) => Ok(identity),
            (Err(_), Some(rejection)) => Err(rejection),
            (Err(refusal), None) => Err(refusal_answer(refusal)),
        }
    }
}

/// The rejection `failure_limit` gives, answered with the route's
/// `limit_response`.
fn failure_rejection(
    policy: &Policy,
    route: &RouteRuntime,
    locked_out: bool,
    retry_after: Micros,
) -> GatewayError {
    GatewayError::Limited(Box::new(Rejection {
        locked_out,
        limit: policy.name.clone(),
        retry_after,
        figures: Vec::new(),
        answer: route.limit_response.clone(),
    }))
}

impl Replayed {
    /// What the gateway would answer it; `line` is its line's number.
    pub(super) fn answer(&self, line: u64) -> Answer {
        let routed = match &self.outcome {
            Outcome::Refused(error) => return Answer::refused(line, error),
            Outcome::Unauthenticated { route, error } => {
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
