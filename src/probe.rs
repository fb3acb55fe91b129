//! Probes (docs/operations.md, `POST /probe`): what the gateway would
//! answer a request now, and what each of its route's limits would say,
//! consuming nothing.
//!
//! The request goes through the gateway's own stages, as `tollgate
//! simulate` runs them ([`stages`]: the head, the client's address,
//! admission, authentication without network); its route's limits are
//! planned by [`plan::plan`] as the pipeline plans them, and the store is
//! asked with [`Limiter::probe`](tollgate_limit::Limiter::probe), which
//! writes nothing: no key, no TTL, no strike, no lease, no deny-cache
//! entry. No metric, top offender, access-log line or lockout name is
//! recorded either.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;

use tollgate_limit::headers::secs_ceil;
use tollgate_limit::verdict::{verdict, Verdict};
use tollgate_limit::{Check, DecisionKind, Micros, Outcome, Status, StoreError};

use crate::admission;
use crate::auth::Identity;
use crate::client_addr::Client;
use crate::error::{GatewayError, Rejection};
use crate::limit::key::Consumer;
use crate::limit::plan::{self, NotApplied, Plan};
use crate::limit::policy::Policy;
use crate::limit::Estimate;
use crate::meter;
use crate::runtime::{Action, RouteRuntime, Runtime};
use crate::simulate::stages::{self, FailureLedger};
use crate::simulate::{parse_client, request_view};

/// A probe as `POST /probe` takes it. Every field may be left out: `GET`,
/// `/`, no Host (an HTTP/1.0 request, as `tollgate simulate` reads a line
/// without `host`), no headers, and the address the probe itself comes from.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// The method.
    pub method: Option<String>,
    /// The Host.
    pub host: Option<String>,
    /// The request-target: the path, with its query string if any.
    pub path: Option<String>,
    /// Header fields, name -> value.
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    /// The TCP peer the gateway would see (an address, or an address with
    /// a port); behind `trusted_proxies`, `X-Forwarded-For` names the
    /// client as it does for real requests.
    pub client: Option<String>,
    /// The request body: a string is the body's text, any other JSON value
    /// the body as that JSON (an LLM request, for a route whose cost
    /// limits read it). None: a request without a body.
    pub body: Option<serde_json::Value>,
    /// The units every cost limit of the route charges, instead of what
    /// the body or the headers would make of it (as `tollgate simulate`'s
    /// `cost`).
    pub cost: Option<u64>,
}

/// Why a probe got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The probe is not one (a 400, with the reason).
    #[error("{0}")]
    Bad(String),
    /// The limit store could not answer.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The answer to a probe.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Answer {
    /// The client's address, as the gateway identifies it.
    pub client: IpAddr,
    /// The route the request matches (`None`: it is answered before one).
    pub route: Option<String>,
    /// The consumer its credentials verify.
    pub consumer: Option<ConsumerAnswer>,
    /// What its route's limits say together: `none` (no limit applies),
    /// `allowed`, `delayed`, `shadow_rejected`, `rejected`, `locked_out`;
    /// `None` when the request is answered before its limits.
    pub decision: Option<&'static str>,
    /// The status the gateway answers itself (`None`: forwarded upstream).
    pub status: Option<u16>,
    /// The upstream it is forwarded to.
    pub upstream: Option<String>,
    /// The gateway's `error`, when it refuses the request.
    pub error: Option<&'static str>,
    /// What its answer's `message` would say (which field of an LLM
    /// request is wrong).
    pub message: Option<String>,
    /// The limit (or `failure_limit`) that rejects it.
    pub limit: Option<String>,
    /// A rejection's `Retry-After`, in seconds.
    pub retry_after: Option<u64>,
    /// How long an allowed request would be held first (`max_delay`), in
    /// milliseconds, rounded up.
    pub delay_ms: u64,
    /// Each of the route's limits, in route order.
    pub limits: Vec<LimitAnswer>,
}

/// A verified consumer in an answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConsumerAnswer {
    /// Its name.
    pub name: String,
    /// Its tenant.
    pub tenant: Option<String>,
    /// Its plan.
    pub plan: Option<String>,
}

/// What one limit would say.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LimitAnswer {
    /// The limit's name.
    pub name: String,
    /// Its algorithm.
    pub algorithm: &'static str,
    /// The client's key as the gateway computed it (`GET
    /// /limits/{limit}/{key}`'s form); `None` when a component is missing.
    pub key: Option<String>,
    /// `allowed`, `delayed`, `shadow_rejected`, `rejected`, `locked_out`,
    /// `not_consumed` (it would allow, but another limit rejects the
    /// request), `exempt`, `skipped` (a key component missing,
    /// `on_missing_key: skip`), `missing_key` (`on_missing_key: deny`: it
    /// rejects the request, and no other limit is asked) or `undecided`
    /// (Redis Cluster: its slot cannot answer).
    pub decision: &'static str,
    /// This rejection would start a lockout (`locked_out` with the
    /// lockout's length).
    pub lock_started: bool,
    /// The units the request would take of it (a cost limit's estimate),
    /// when the store was asked.
    pub cost: Option<u64>,
    /// Its figures, when the store was asked.
    pub figures: Option<Figures>,
}

/// One limit's figures, as the rate-limit fields and `Retry-After` would
/// carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Figures {
    /// `q`: the quota.
    pub q: u64,
    /// `w`: the window, in seconds.
    pub w: u64,
    /// `r`: what is left (after this request, if it is taken).
    pub r: u64,
    /// `t`: seconds until the quota is back (at most `w`).
    pub t: u64,
    /// For a rejection, the seconds to wait (0 otherwise).
    pub retry_after: u64,
    /// The hold this limit asks for, in milliseconds, rounded up.
    pub delay_ms: u64,
}

impl Probe {
    /// The request it describes, coming from `peer` unless it names its
    /// own client.
    fn request(&self, peer: IpAddr) -> Result<crate::simulate::Request<'_>, ProbeError> {
        let client = match &self.client {
            None => peer,
            Some(text) => parse_client(text)
                .ok_or_else(|| ProbeError::Bad(format!("`client`: not an IP address: {text:?}")))?,
        };
        let headers = self.headers.iter().flatten();
        Ok(crate::simulate::Request {
            ts: 0,
            client,
            method: Cow::Borrowed(self.method.as_deref().unwrap_or("GET")),
            path: Cow::Borrowed(self.path.as_deref().unwrap_or("/")),
            host: self.host.as_deref().map(Cow::Borrowed),
            headers: headers
                .map(|(n, v)| (Cow::Borrowed(n.as_str()), Cow::Borrowed(v.as_str())))
                .collect(),
            cost: None,
            usage: None,
        })
    }

    /// The body's bytes (empty without one).
    fn body(&self) -> Bytes {
        match &self.body {
            None => Bytes::new(),
            Some(serde_json::Value::String(text)) => Bytes::from(text.clone()),
            Some(json) => Bytes::from(json.to_string()),
        }
    }

    /// The estimate of each of `route`'s cost limits (by index) for this
    /// probe's request `req` admitted on `path`, as the pipeline takes them
    /// (`crate::meter`): `cost` if given, else from the body and headers;
    /// the answer a real request would get when its body cannot be read.
    fn estimates(
        &self,
        rt: &Runtime,
        route: &RouteRuntime,
        req: &http::Request<()>,
        path: &str,
    ) -> Result<Vec<Option<Estimate<GatewayError>>>, GatewayError> {
        let limits = &route.limits;
        if let Some(units) = self.cost {
            let each = |p: &Arc<Policy>| p.metered.as_ref().map(|_| Estimate::Units(units));
            return Ok(limits.iter().map(each).collect());
        }
        if !meter::reserve::needs_body(limits) {
            return Ok(meter::reserve::estimates(limits, req.headers(), None, None));
        }
        let body = self.body();
        let max = rt.config.server.max_body_bytes;
        if max.is_some_and(|max| body.len() as u64 > max) {
            return Err(GatewayError::BodyTooLarge);
        }
        let read = meter::llm::read(limits, &body, &route.sent_path(path), req.headers())?;
        let body = read.as_ref().map_or(body, |r| r.body.clone());
        Ok(meter::reserve::estimates(
            limits,
            req.headers(),
            Some(&body),
            read.as_ref(),
        ))
    }
}

/// `failure_limit` as a probe sees it: the store's answer to charging this
/// client one failure, read, never charged.
struct Probed(Vec<Outcome>);

impl FailureLedger for Probed {
    fn locked_for(&mut self, _: &Check, _: Micros) -> Option<Micros> {
        let o = self.0.first()?;
        (o.status == Status::LockedOut && !o.lock_started).then_some(o.retry_after)
    }

    fn charge(&mut self, _: &Check, _: Micros) -> Vec<Outcome> {
        self.0.clone()
    }
}

/// Answer `probe` under `rt`, asked by `peer` (its default client): the
/// stages of the pipeline, in its order, each as the gateway runs it, the
/// store only read.
pub async fn probe(rt: &Runtime, probe: &Probe, peer: IpAddr) -> Result<Answer, ProbeError> {
    let line = probe.request(peer)?;
    let mut req = http::Request::new(());
    stages::head(&mut req, &line).map_err(|e| ProbeError::Bad(e.0))?;
    let server = &rt.config.server;
    let client = Client::identify(line.client, req.headers(), &server.trusted_proxies);
    if probe.body.is_some() && !req.headers().contains_key(http::header::CONTENT_LENGTH) {
        // As a client sending that body would say.
        let length = http::HeaderValue::from(probe.body().len());
        req.headers_mut()
            .insert(http::header::CONTENT_LENGTH, length);
    }
    let mut answer = Answer::new(client.addr);
    let (route, path) = match stages::admit_path(&mut req, &line.path, rt, &client) {
        Ok(admitted) => admitted,
        Err(error) => return Ok(answer.refused(&error)),
    };
    answer.route = Some(route.name.to_string());
    // What charging `failure_limit` would give, asked only when
    // authentication looks at the request at all.
    let now = rt.limiter.now();
    let failures = match stages::failure_check(rt, &route, &req, client.addr, now) {
        Some((_, check)) if stages::authenticates(rt, &route, &req) => {
            rt.limiter.probe(&[check]).await?
        }
        _ => Vec::new(),
    };
    let mut ledger = Probed(failures);
    let identity = match stages::authenticate(rt, &route, &req, client.addr, now, &mut ledger) {
        Ok(identity) => identity,
        Err(refused) => {
            answer.consumer = refused.consumer.as_ref().map(ConsumerAnswer::of);
            return Ok(answer.refused(&refused.error));
        }
    };
    answer.consumer = identity.as_ref().map(ConsumerAnswer::of);
    // A cost limit's estimate, or the body's 400, as the pipeline takes it
    // before deciding the limits.
    let mut estimates = match probe.estimates(rt, &route, &req, &path) {
        Ok(estimates) => estimates,
        Err(error) => return Ok(answer.refused(&error)),
    };
    let mut view = request_view(&req, client.addr, &route, server.ipv6_prefix);
    view.identity = identity.as_ref().map(|i| i as &dyn Consumer);
    let plan = match plan::plan(&route.limits, &view, now, || fastrand::u64(1..)) {
        Ok(plan) => plan,
        Err(denied) => {
            answer
                .limits
                .push(LimitAnswer::unasked(&route, denied.index, "missing_key"));
            answer.decision = Some(DecisionKind::Rejected.label());
            let rejected = limited(&route, denied.index, false, 0);
            return Ok(answer.refused(&rejected));
        }
    };
    let mut plan = plan;
    if let Err(error) = crate::limit::reserve_estimates(&mut plan, &mut estimates) {
        return Ok(answer.refused(&error));
    }
    let outcomes = rt.limiter.probe(&plan.checks).await?;
    answer.limits = limit_answers(&route, &plan, &outcomes, &view);
    Ok(answer.decided(&route, &plan, &outcomes, &req, rt))
}

/// Each of the route's limits, in route order: those the plan left out,
/// and those the store was asked about with its outcome.
fn limit_answers(
    route: &RouteRuntime,
    plan: &Plan<'_>,
    outcomes: &[Outcome],
    view: &crate::limit::key::RequestView<'_>,
) -> Vec<LimitAnswer> {
    let mut limits: Vec<(usize, LimitAnswer)> = plan
        .not_applied
        .iter()
        .map(|&(index, why)| {
            let decision = match why {
                NotApplied::Exempt => "exempt",
                NotApplied::Skipped => "skipped",
                NotApplied::NoModelCall => "no_model_call",
            };
            let mut limit = LimitAnswer::unasked(route, index, decision);
            limit.key = route.limits[index].display_key(view);
            (index, limit)
        })
        .collect();
    for (i, (check, o)) in plan.checks.iter().zip(outcomes).enumerate() {
        let index = plan.applied[i];
        let decision = match o.status {
            Status::NotConsumed => "not_consumed",
            Status::Undecided => "undecided",
            _ => DecisionKind::of_outcome(o).map_or("undecided", DecisionKind::label),
        };
        let limit = LimitAnswer {
            name: check.name.to_string(),
            algorithm: check.params.name(),
            key: route.limits[index].display_key(view),
            decision,
            lock_started: o.lock_started,
            cost: Some(check.cost),
            figures: (o.status != Status::Undecided).then(|| Figures::of(o)),
        };
        limits.push((index, limit));
    }
    limits.sort_by_key(|(index, _)| *index);
    limits.into_iter().map(|(_, limit)| limit).collect()
}

/// The rejection the route's limit `index` gives.
fn limited(
    route: &RouteRuntime,
    index: usize,
    locked_out: bool,
    retry_after: Micros,
) -> GatewayError {
    GatewayError::Limited(Box::new(Rejection {
        locked_out,
        limit: route.limits[index].name.clone(),
        retry_after,
        figures: Vec::new(),
        limits: Vec::new(),
        answer: route.limit_response.clone(),
    }))
}

impl Answer {
    /// An answer about a request from `client`, not yet admitted.
    fn new(client: IpAddr) -> Answer {
        Answer {
            client,
            route: None,
            consumer: None,
            decision: None,
            status: None,
            upstream: None,
            error: None,
            message: None,
            limit: None,
            retry_after: None,
            delay_ms: 0,
            limits: Vec::new(),
        }
    }

    /// The gateway answers the request with `error`.
    fn refused(mut self, error: &GatewayError) -> Answer {
        let (status, code) = error.status_and_code();
        self.status = Some(status.as_u16());
        self.error = Some(code);
        self.message = error.message().map(|m| m.into_owned());
        if let GatewayError::Limited(r) = error {
            self.limit = Some(r.limit.to_string());
            // As `Retry-After`: whole seconds, rounded up, at least 1.
            self.retry_after = Some(secs_ceil(r.retry_after).max(1));
        }
        self
    }

    /// What the gateway does once the store answered `outcomes` for the
    /// checks of `plan`: reject, or (its declared body size permitting, as
    /// the pipeline checks it after the limits) respond or forward.
    fn decided(
        mut self,
        route: &RouteRuntime,
        plan: &Plan<'_>,
        outcomes: &[Outcome],
        req: &http::Request<()>,
        rt: &Runtime,
    ) -> Answer {
        let (delay, shadow_rejected) = match verdict(outcomes) {
            Verdict::Reject {
                index,
                locked_out,
                retry_after,
            } => {
                let kind = match locked_out {
                    true => DecisionKind::LockedOut,
                    false => DecisionKind::Rejected,
                };
                self.decision = Some(kind.label());
                let rejected = limited(route, plan.applied[index], locked_out, retry_after);
                return self.refused(&rejected);
            }
            Verdict::Allow {
                delay,
                shadow_rejected,
            } => (delay, shadow_rejected),
        };
        let kind = match () {
            _ if plan.checks.is_empty() => DecisionKind::NotApplied,
            _ if delay > 0 => DecisionKind::Delayed,
            _ if shadow_rejected => DecisionKind::ShadowRejected,
            _ => DecisionKind::Allowed,
        };
        self.decision = Some(kind.label());
        self.delay_ms = delay.div_ceil(1000);
        let max_body = rt.config.server.max_body_bytes;
        if let Err(error) = admission::body_size(req.headers(), max_body) {
            return self.refused(&error);
        }
        match &route.action {
            Action::Respond { status, .. } => self.status = Some(status.as_u16()),
            Action::Upstream(pool) => self.upstream = Some(pool.name.to_string()),
        }
        self
    }
}

impl ConsumerAnswer {
    fn of(identity: &Identity) -> ConsumerAnswer {
        ConsumerAnswer {
            name: identity.consumer.to_string(),
            tenant: identity.tenant.as_deref().map(str::to_owned),
            plan: identity.plan.as_deref().map(str::to_owned),
        }
    }
}

impl LimitAnswer {
    /// The route's limit `index`, which the store was not asked about.
    fn unasked(route: &RouteRuntime, index: usize, decision: &'static str) -> LimitAnswer {
        let policy = &route.limits[index];
        LimitAnswer {
            name: policy.name.to_string(),
            algorithm: policy.params.name(),
            key: None,
            decision,
            lock_started: false,
            cost: None,
            figures: None,
        }
    }
}

impl Figures {
    /// The figures of `o`, rounded as the rate-limit fields round them.
    fn of(o: &Outcome) -> Figures {
        let w = secs_ceil(o.window).max(1);
        Figures {
            q: o.limit,
            w,
            r: o.remaining,
            // Draft 11's `t`, as `headers: standard` sends it.
            t: secs_ceil(o.grows_after).max(1),
            retry_after: match o.status {
                Status::Rejected | Status::LockedOut => secs_ceil(o.retry_after),
                _ => 0,
            },
            delay_ms: o.delay.div_ceil(1000),
        }
    }
}
