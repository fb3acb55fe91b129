//! Stage: authentication (docs/configuration/consumers.md): the request's
//! credentials found and verified, `failure_limit` consulted and charged,
//! the consumer kept for the limits' keys and the identity headers.
//!
//! Written once, [`authenticate_with`], over the I/O it needs ([`AuthIo`]):
//! the gateway's (the deny cache, the store, JWKS fetched when needed),
//! and `tollgate simulate`'s and `POST /probe`'s (a memory store or a read
//! of the store, the keys at hand), so the three decide alike by
//! construction.

use std::future::Future;
use std::sync::Arc;

use http::{HeaderMap, Request};
use tollgate_limit::Decision;

use crate::auth::mtls::PeerCert;
use crate::auth::{self, AuthOutcome, Authenticator, Identity, Presented, Verification};
use crate::error::GatewayError;
use crate::limit;
use crate::limit::key::RequestView;
use crate::limit::policy::Policy;
use crate::metrics::Metrics;
use crate::runtime::{RouteRuntime, Runtime};
use crate::trace::span::Recording;

use super::{observe, rejection, Ctx, Observed, Whose};

/// What authentication asks of the world, each caller its own way.
pub(crate) trait AuthIo {
    /// Whether `failure_limit` has the client locked out now, without
    /// verifying anything: the rejection to answer a route with `auth`.
    fn locked(&mut self) -> impl Future<Output = Option<GatewayError>>;
    /// The credentials `presented`, verified.
    fn verify(&mut self, presented: &Presented<'_>) -> impl Future<Output = Verification>;
    /// One failed credential charged to `failure_limit`: the rejection
    /// when that limit now rejects the client (`locked_out` when the
    /// failure starts a lockout).
    fn charge(&mut self) -> impl Future<Output = Option<GatewayError>>;
}

/// Why authentication turned a request away: the gateway's answer, and
/// the consumer when one was verified (a consumer the route does not let
/// through).
#[derive(Debug)]
pub struct Refused {
    /// What the gateway answers.
    pub error: GatewayError,
    /// The verified consumer the route forbids, if that is why.
    pub consumer: Option<Identity>,
}

/// What authentication made of a request.
pub(crate) struct Authenticated {
    /// The consumer (`None`: nothing presented, or nothing verified where
    /// the route requires nothing), or why the request is refused.
    pub(crate) result: Result<Option<Identity>, Refused>,
    /// `tollgate_auth_total`'s outcome and whether the route refused the
    /// request; `None` when the credentials were not looked at.
    pub(crate) counted: Option<(AuthOutcome, bool)>,
}

/// Authentication of a request with `headers`, `query` and the client
/// certificate `cert` on `route`, doing its I/O through `io`: the
/// credentials it presents (of the route's `require`, or of every
/// configured kind on a route without `auth`), verified.
///
/// A route with `auth` answers 401 `unauthorized` when nothing is
/// presented, 401 `invalid_credentials` when a credential fails, 403
/// `forbidden` for a consumer it does not let through, 503
/// `auth_unavailable` while a token's issuer keys are not fetched; a route
/// without `auth` never rejects, an invalid credential there is none. A
/// failed credential charges `failure_limit` for the client's address;
/// a client that limit locked out is turned away (on `auth` routes) or
/// not verified (elsewhere) before any key lookup or signature check, and
/// the failure that puts a client over `failure_limit` is answered as
/// that limit's rejection.
pub(crate) async fn authenticate_with<I: AuthIo>(
    auth: &Authenticator,
    route: &RouteRuntime,
    headers: &HeaderMap,
    query: Option<&str>,
    cert: Option<&PeerCert>,
    io: &mut I,
) -> Authenticated {
    let nothing = Authenticated {
        result: Ok(None),
        counted: None,
    };
    let required = route.auth.as_ref();
    let presented = auth.presented(required, headers, query, cert);
    if presented.is_empty() && required.is_none() {
        return nothing;
    }
    if let Some(rejection) = io.locked().await {
        return match required {
            // Not verified: the credential counts as none.
            None => nothing,
            Some(_) => Authenticated {
                result: Err(Refused {
                    error: rejection,
                    consumer: None,
                }),
                counted: Some((AuthOutcome::LockedOut, true)),
            },
        };
    }
    let verdict = io.verify(&presented).await;
    let (outcome, judged) = auth::judge(required, auth.kinds(required), verdict);
    let charged = match outcome {
        AuthOutcome::Invalid => io.charge().await,
        _ => None,
    };
    let counted = Some((outcome, judged.is_err()));
    let result = match (judged, charged) {
        (Ok(identity), _) => Ok(identity),
        (Err(_), Some(rejection)) => Err(Refused {
            error: rejection,
            consumer: None,
        }),
        (Err(auth::Refusal::Forbidden(identity)), None) => Err(Refused {
            error: GatewayError::Forbidden,
            consumer: Some(identity),
        }),
        (Err(refusal), None) => {
            if let auth::Refusal::Invalid { reason, .. } = &refusal {
                tracing::debug!(target: "tollgate::auth", %reason, "credential refused");
            }
            Err(Refused {
                error: refusal_answer(refusal),
                consumer: None,
            })
        }
    };
    Authenticated { result, counted }
}

/// Stage: authentication ([`authenticate_with`] over the gateway's I/O).
/// The consumer goes into the access-log record, where the limits'
/// identity keys and the identity headers read it (a consumer the route
/// forbids too, for the log).
pub(super) async fn authenticate<B>(
    req: &Request<B>,
    route: &RouteRuntime,
    ctx: &mut Ctx<'_>,
) -> Result<(), GatewayError> {
    let Some(auth) = ctx.rt.auth.as_deref() else {
        return Ok(());
    };
    let metrics = &ctx.shared.metrics;
    let cert = ctx.conn.client_cert.as_deref();
    // Before authentication: no consumer yet.
    let view = request_view!(req, route, ctx);
    let mut io = GatewayIo {
        rt: ctx.rt,
        route,
        metrics,
        failures: ctx.rt.failure_limit.as_ref(),
        view,
        recording: ctx.done.recording.as_deref_mut(),
    };
    let done = authenticate_with(auth, route, req.headers(), req.uri().query(), cert, &mut io);
    let Authenticated { result, counted } = done.await;
    if let Some((outcome, refused)) = counted {
        metrics.auth(&route.name, outcome.label(), refused);
    }
    match result {
        Ok(identity) => {
            ctx.done.record.consumer = identity;
            Ok(())
        }
        Err(Refused { error, consumer }) => {
            if consumer.is_some() {
                ctx.done.record.consumer = consumer;
            }
            Err(error)
        }
    }
}

/// The gateway's authentication I/O: `failure_limit` through the deny
/// cache and the store (its decisions observed), tokens verified with
/// their issuers' keys fetched when needed.
struct GatewayIo<'a, 'v> {
    rt: &'a Runtime,
    route: &'a RouteRuntime,
    metrics: &'a Metrics,
    failures: Option<&'a Arc<Policy>>,
    view: RequestView<'v>,
    recording: Option<&'a mut Recording>,
}

impl GatewayIo<'_, '_> {
    /// `decision` of `failure_limit` observed; its rejection, if it is one.
    fn rejected(&mut self, f: &Arc<Policy>, decision: Decision) -> Option<GatewayError> {
        let recording = self.recording.as_deref_mut();
        observe(
            self.metrics,
            Whose::Failures(f),
            &decision,
            &self.view,
            recording,
        );
        matches!(decision, Decision::Reject { .. }).then(|| rejection(decision, self.route))
    }
}

impl AuthIo for GatewayIo<'_, '_> {
    async fn locked(&mut self) -> Option<GatewayError> {
        let f = self.failures?;
        let denied = limit::failures_denied(&self.rt.limiter, f, &self.view)?;
        match self.route.auth {
            // Turned away: observed as a rejection. Elsewhere the
            // credential is only not verified.
            Some(_) => self.rejected(f, denied),
            None => Some(rejection(denied, self.route)),
        }
    }

    async fn verify(&mut self, presented: &Presented<'_>) -> Verification {
        let auth = self.rt.auth.as_deref();
        match auth {
            Some(auth) => auth.verify(presented, unix_now()).await,
            None => Verification::Missing,
        }
    }

    async fn charge(&mut self) -> Option<GatewayError> {
        let f = self.failures?;
        let observer = Observed::new(self.metrics, self.recording.as_deref());
        let one = std::slice::from_ref(f);
        let decision = limit::decide(&self.rt.limiter, one, &self.view, &observer).await;
        self.rejected(f, decision)
    }
}

/// The error a route's authentication refusal is answered with
/// (docs/configuration/consumers.md).
pub fn refusal_answer(refusal: auth::Refusal) -> GatewayError {
    match refusal {
        auth::Refusal::Unauthorized { bearer } => GatewayError::Unauthorized { bearer },
        auth::Refusal::Invalid { bearer, reason } => {
            GatewayError::InvalidCredentials { bearer, reason }
        }
        auth::Refusal::Forbidden(_) => GatewayError::Forbidden,
        auth::Refusal::Unavailable(why) => GatewayError::AuthUnavailable(why),
    }
}

/// Seconds since the Unix epoch: the clock tokens' `exp` and `nbf` are
/// read against.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
