//! The gateway's stages as `tollgate simulate` runs them, as plain
//! functions of a request described by its fields: a line of a log, or a
//! probe of the admin API (`POST /probe`, docs/operations.md). The request
//! head ([`head`]), admission ([`admit`]), and authentication with no
//! network ([`authenticate`]: JWKS are not fetched) whose `failure_limit`
//! is read and charged through a [`FailureLedger`]: the replay's memory
//! store, or a probe's read-only answers. The replay and
//! [`crate::probe`] call the same ones, so both answer as the gateway
//! would.

use std::net::IpAddr;
use std::sync::Arc;

use http::{header, HeaderName, HeaderValue, Method, Uri, Version};
use tollgate_limit::algorithm::SECOND;
use tollgate_limit::store::memory::MemoryStore;
use tollgate_limit::verdict::{verdict, Verdict};
use tollgate_limit::{Check, Micros, Outcome};

use super::{request_view, LineError, Request};
use crate::admission;
use crate::auth::{Identity, Presented};
use crate::client_addr::Client;
use crate::error::{GatewayError, Rejection};
use crate::limit::plan;
use crate::limit::policy::Policy;
use crate::pipeline::{authenticate_with, AuthIo, Refused};
use crate::runtime::{RouteRuntime, Runtime};
use futures_util::FutureExt as _;

/// Make `req` the head `r` describes: its method, its `headers`, and its
/// `host` as `Host` (HTTP/1.1; HTTP/1.0, which may omit it, when there is
/// neither). The request-target is [`admit`]'s.
pub fn head(req: &mut http::Request<()>, r: &Request<'_>) -> Result<(), LineError> {
    let method = Method::from_bytes(r.method.as_bytes())
        .map_err(|_| LineError(format!("`method`: not a method: {:?}", r.method)))?;
    let headers = req.headers_mut();
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
    *req.method_mut() = method;
    *req.version_mut() = version;
    Ok(())
}

/// Admission: `path` as the request-target of `req` (one the gateway's
/// HTTP parser would not take is a 400 too), then [`admission::admit`]:
/// the route, or why the gateway answers without one.
pub fn admit(
    req: &mut http::Request<()>,
    path: &str,
    rt: &Runtime,
    client: &Client,
) -> Result<Arc<RouteRuntime>, GatewayError> {
    admit_path(req, path, rt, client).map(|(route, _)| route)
}

/// [`admit`], with the path as the route sees it (normalised, before any
/// `strip_prefix`).
pub fn admit_path(
    req: &mut http::Request<()>,
    path: &str,
    rt: &Runtime,
    client: &Client,
) -> Result<(Arc<RouteRuntime>, String), GatewayError> {
    let uri = Uri::try_from(path).map_err(|_| GatewayError::BadRequest {
        reason: "invalid request target",
        close: false,
    })?;
    *req.uri_mut() = uri;
    let admitted = admission::admit(req, rt, client, false)?;
    Ok((admitted.route.clone(), admitted.path.into_owned()))
}

/// What authentication asks of the limit store about `failure_limit`
/// (docs/configuration/consumers.md): the replay's memory store decides
/// (a failed credential counts), a probe reads what the store would say.
pub trait FailureLedger {
    /// The time left of the client's `failure_limit` lockout, while one runs.
    fn locked_for(&mut self, check: &Check, now: Micros) -> Option<Micros>;
    /// One failed credential charged: the outcome of `check`.
    fn charge(&mut self, check: &Check, now: Micros) -> Vec<Outcome>;
}

impl FailureLedger for MemoryStore {
    fn locked_for(&mut self, check: &Check, now: Micros) -> Option<Micros> {
        let (_, lock) = self.inspect(&check.key, now);
        lock.locked(now).then(|| lock.lu - now)
    }

    fn charge(&mut self, check: &Check, now: Micros) -> Vec<Outcome> {
        self.decide(std::slice::from_ref(check), now)
    }
}

/// `failure_limit`'s check for a request `req` from `client` to `route`:
/// the limit and the client's check under it, when it is configured and
/// applies, planned at `now`.
pub fn failure_check(
    rt: &Runtime,
    route: &RouteRuntime,
    req: &http::Request<()>,
    client: IpAddr,
    now: Micros,
) -> Option<(Arc<Policy>, Check)> {
    let failures = rt.failure_limit.as_ref()?;
    let view = request_view(req, client, route, rt.config.server.ipv6_prefix);
    let plan = plan::plan(std::slice::from_ref(failures), &view, now, || 0).ok()?;
    let check = plan.checks.into_iter().next()?;
    Some((failures.clone(), check))
}

/// Whether authentication has anything to do with `req` on `route`: a
/// route with `auth`, or credentials presented (else the request goes on
/// with no consumer, and `failure_limit` is not looked at).
pub fn authenticates(rt: &Runtime, route: &RouteRuntime, req: &http::Request<()>) -> bool {
    let Some(auth) = rt.auth.as_deref() else {
        return false;
    };
    let required = route.auth.as_ref();
    required.is_some()
        || !auth
            .presented(required, req.headers(), req.uri().query(), None)
            .is_empty()
}

/// Authentication, as the gateway's stage runs it
/// (`pipeline::authenticate_with`, written once): the same
/// credential finding, judgement and `failure_limit` handling, over the
/// I/O of a replay or a probe: tokens verified with the keys at hand
/// ([`Authenticator::verify_offline`](crate::auth::Authenticator::verify_offline)
/// at `now`: no JWKS is fetched, so a token that needs a fetch is
/// `auth_unavailable`), `failure_limit` read and charged through `ledger`.
/// The consumer, if one was presented and verified.
pub fn authenticate(
    rt: &Runtime,
    route: &Arc<RouteRuntime>,
    req: &http::Request<()>,
    client: IpAddr,
    now: Micros,
    ledger: &mut dyn FailureLedger,
) -> Result<Option<Identity>, Refused> {
    let Some(auth) = rt.auth.as_deref() else {
        return Ok(None);
    };
    let mut io = Offline {
        auth,
        route,
        failure: failure_check(rt, route, req, client, now),
        ledger,
        now,
    };
    let (headers, query) = (req.headers(), req.uri().query());
    // Every step of `Offline` answers on the spot.
    match authenticate_with(auth, route, headers, query, None, &mut io).now_or_never() {
        Some(authenticated) => authenticated.result,
        None => Err(Refused {
            error: GatewayError::AuthUnavailable("not answered on the spot".into()),
            consumer: None,
        }),
    }
}

/// Authentication's I/O in a replay or a probe: `failure_limit` through a
/// [`FailureLedger`], tokens verified with the keys at hand; every step
/// ready at once.
struct Offline<'a> {
    auth: &'a crate::auth::Authenticator,
    route: &'a RouteRuntime,
    /// `failure_limit` and the client's check under it, when it applies.
    failure: Option<(Arc<Policy>, Check)>,
    ledger: &'a mut dyn FailureLedger,
    now: Micros,
}

impl AuthIo for Offline<'_> {
    async fn locked(&mut self) -> Option<GatewayError> {
        let (policy, check) = self.failure.as_ref()?;
        let left = self.ledger.locked_for(check, self.now)?;
        Some(failure_rejection(policy, self.route, true, left))
    }

    async fn verify(&mut self, presented: &Presented<'_>) -> crate::auth::Verification {
        self.auth.verify_offline(presented, self.now / SECOND)
    }

    async fn charge(&mut self) -> Option<GatewayError> {
        let (policy, check) = self.failure.as_ref()?;
        match verdict(&self.ledger.charge(check, self.now)) {
            Verdict::Reject {
                locked_out,
                retry_after,
                ..
            } => Some(failure_rejection(
                policy,
                self.route,
                locked_out,
                retry_after,
            )),
            Verdict::Allow { .. } => None,
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
        limits: Vec::new(),
        answer: route.limit_response.clone(),
    }))
}
