//! One request's whole story, as an explicit pipeline of named stages:
//!
//! ```text
//! load runtime -> identify client, request id and trace, sampled or not (Ctx::new)
//!   -> admit: deny list, head and Host checks, path, route (admission.rs)
//!   -> decide_limits (limit/engine.rs, planned by limit/plan.rs)
//!   -> check_body_size -> respond | forward (proxy/)
//!   -> rate-limit headers -> finish: X-Request-Id, metrics, access log (and a
//!      sampled request's spans, trace/span.rs) when the body ends
//!      (after a 101: when the tunnel ends, proxy/tunnel.rs)
//! ```
//!
//! Each stage either passes the request on or ends it with a
//! [`GatewayError`], which [`GatewayError::response`] turns into the answer.
//! The stages share one `Ctx`; admission and limit planning are I/O-free
//! functions that `tollgate simulate` calls too. Nothing here blocks on
//! anything but the limit store, the upstream and the client.

use std::borrow::Cow;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HeaderName;
use http::uri::PathAndQuery;
use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode, Version};
use http_body::Body as _;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use tollgate_limit::{Decision, DecisionKind, Figure, Leases};

use crate::admission;
use crate::auth::{self, AuthOutcome};
use crate::body::{self, Body, ClientBody, ClientBodyError, ClientFault, Finish};
use crate::config::PathMatch;
use crate::error::{is_grpc, GatewayError, Rejection, Unavailable};
use crate::identity::Client;
use crate::limit;
use crate::limit::headers::add_route_limit_headers;
use crate::limit::key::{Consumer, RequestView};
use crate::limit::policy::Policy;
use crate::log::{AccessRecord, LoggedPath, Tunnelled};
use crate::meter;
use crate::metrics::Metrics;
use crate::proxy::client::ResponseBody;
use crate::proxy::headers::{
    grpc_deadline, incoming_request_id, rewrite_location, set_forwarded, strip_hop_by_hop,
    strip_hop_by_hop_keeping_trailers, to_http1, Forwarded, LocationView, X_REQUEST_ID,
};
use crate::proxy::pool::{InFlight, UpstreamPool};
use crate::proxy::tunnel::{self, Summary};
use crate::proxy::{self, balance::splitmix64, Outbound};
use crate::runtime::{Action, RouteRuntime, Runtime};
use crate::server::{ConnInfo, Handler, Responding};
use crate::shared::Shared;
use crate::trace::context::{SpanId, TraceContext, TraceId};
use crate::trace::span::Recording;
use crate::trace::Hop;

/// The gateway's request handler: every request of every traffic
/// connection goes through `handle`.
pub struct Pipeline {
    shared: Arc<Shared>,
}

impl Pipeline {
    /// The pipeline over `shared` (the runtime in force, the metrics).
    pub fn new(shared: Arc<Shared>) -> Arc<Pipeline> {
        Arc::new(Pipeline { shared })
    }
}

impl Handler for Pipeline {
    fn handle(&self, req: Request<Incoming>, conn: Arc<ConnInfo>) -> Responding {
        // `handle`'s own future, boxed: an async block around it would
        // copy the whole of it once more, into the block, on the first poll.
        boxed_in_place(|| handle(req, self.shared.clone(), conn))
    }
}

/// The future `make` makes, in a box allocated first: made first and then
/// boxed, all of it (several KB for a request's) was copied into the box.
#[inline(always)]
fn boxed_in_place<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// `$result`'s value; an error is answered by the gateway, from
/// [`handle`]: its response, stamped by [`finish`].
macro_rules! or_answer {
    ($result:expr, $ctx:ident) => {
        match $result {
            Ok(value) => value,
            Err(error) => return answer(error, $ctx),
        }
    };
}

/// Handle one request: never fails, every error becomes a response. The
/// stages between identifying the client and the response head run here
/// rather than in a function of their own: their future was copied whole
/// (~4 KB) into this one's, and the request with it (`benches/RESULTS.md`,
/// "Issue 27").
#[allow(clippy::manual_async_fn)] // an `async fn` keeps its arguments twice
fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    conn: Arc<ConnInfo>,
) -> impl Future<Output = Response<Body>> {
    // A plain function around an `async move` block rather than an `async
    // fn`: an `async fn` keeps each argument twice in its future (as passed,
    // and moved into a local at the first poll), the request's 264 bytes
    // copied once more (`benches/RESULTS.md`, "Issue 27").
    async move {
        let (shared, conn) = (&shared, &conn);
        let rt = shared.runtime.load_full();
        let mut ctx = Ctx::new(&req, &rt, shared, conn);
        let route = or_answer!(admit(&req, &mut ctx), ctx);
        // Authentication and the limits are boxed, and only awaited where they
        // apply: each keeps a limit decision's state (its store call) across
        // awaits, which would otherwise be part of every request's future,
        // copied in at each level it is awaited through (`benches/RESULTS.md`,
        // "Issue 27").
        if ctx.rt.auth.is_some() {
            or_answer!(
                boxed_in_place(|| authenticate(&req, &route, &mut ctx)).await,
                ctx
            );
        }
        // Only a route with cost limits reads anything for them: the others
        // neither build nor poll that stage's future.
        let (req, mut reserve) = match meter::reserve::any(&route.limits) {
            true => or_answer!(reserve_costs(req, &route, &mut ctx).await, ctx),
            false => (req.map(ReqBody::Streaming), Vec::new()),
        };
        let figures = match route.limits.is_empty() {
            true => Vec::new(),
            false => or_answer!(
                boxed_in_place(|| decide_limits(&req, &route, &mut ctx, &mut reserve)).await,
                ctx
            ),
        };
        let max_body = ctx.rt.config.server.max_body_bytes;
        or_answer!(admission::body_size(req.headers(), max_body), ctx);
        let mut response = match &route.action {
            Action::Respond {
                status,
                body,
                headers,
            } => respond(*status, body, headers).map(Reply::Local),
            // Boxed in place too: made on the stack, its ~3 KB were copied into
            // this future (−115 instructions a request; boxing `proxy::forward`
            // in turn cost 400 more).
            Action::Upstream(pool) => or_answer!(
                boxed_in_place(|| forward(req, &route, pool, &mut ctx)).await,
                ctx
            ),
        };
        add_route_limit_headers(
            &mut response,
            route.limit_response.headers,
            &figures,
            &route.limits,
        );
        finish(response, ctx)
    }
}

/// A request the gateway answers itself with `error`'s response.
fn answer(error: GatewayError, mut ctx: Ctx<'_>) -> Response<Body> {
    ctx.done.refused = true;
    tracing::debug!(request_id = ctx.done.record.request_id.to_str().unwrap_or_default(), %error, "request answered by the gateway");
    let response = error
        .response(&ctx.done.record.request_id, ctx.grpc)
        .map(Reply::Local);
    finish(response, ctx)
}

/// What a request's stages share: its snapshot of the runtime, who sent
/// it, what it matched, what it holds, and its access-log record.
struct Ctx<'a> {
    rt: &'a Runtime,
    shared: &'a Arc<Shared>,
    conn: &'a Arc<ConnInfo>,
    /// The request's number on its connection (1-based).
    number: u64,
    /// Who sent it.
    client: Client,
    /// A gRPC request: gateway errors are answered with `grpc-status`.
    grpc: bool,
    /// The request's HTTP version.
    version: Version,
    /// The Host the client asked for, once admitted (the access log keeps
    /// it as text).
    host: Option<HeaderValue>,
    /// The two sides of an upgrade the upstream accepted (a 101).
    upgrade: Option<tunnel::Pending>,
    /// The request read as an LLM request, for its response's reading.
    llm: Option<meter::llm::Seen>,
    /// The trace the request belongs to (continued or started here).
    trace: TraceContext,
    /// The gateway's span for this hop: the parent the upstream sees.
    span: SpanId,
    /// The request's bookkeeping (its route, what it holds, its access-log
    /// record, its cost limits' charges, its spans), ended once: with its
    /// response body or tunnel, or when the request is dropped before its
    /// response (the client gone, the shutdown grace over).
    done: Done,
}

impl<'a> Ctx<'a> {
    fn new<B>(
        req: &Request<B>,
        rt: &'a Runtime,
        shared: &'a Arc<Shared>,
        conn: &'a Arc<ConnInfo>,
    ) -> Ctx<'a> {
        let started = Instant::now();
        let number = conn.activity.begin();
        let client = Client::identify(
            conn.peer.ip(),
            req.headers(),
            &rt.config.server.trusted_proxies,
        );
        // The request id the gateway makes is a new trace id's digits (128
        // random bits in hex, as a request id always was): a trace the
        // gateway starts for the request has the request's id.
        let own = TraceId::random();
        let request_id = incoming_request_id(req.headers(), client.trusted)
            .unwrap_or_else(|| request_id_of(&own));
        // A trace the gateway starts is sampled as `telemetry.sample`
        // says (not at all without `telemetry:`: nothing records it); a
        // continued one as its parent says.
        let telemetry = rt.telemetry.as_ref();
        let trace = TraceContext::of_or_new(
            req.headers(),
            || own,
            || telemetry.is_some_and(|t| t.sample(own.bytes())),
        );
        let span = SpanId::random();
        let trace_id = trace.trace_id;
        let recording = match telemetry {
            Some(t) if trace.sampled => Some(Box::new(Recording::start(t.clone(), &trace, span))),
            _ => None,
        };
        Ctx {
            rt,
            shared,
            conn,
            number,
            client,
            grpc: is_grpc(req.headers()),
            version: req.version(),
            host: None,
            upgrade: None,
            llm: None,
            trace,
            span,
            done: Done {
                shared: shared.clone(),
                conn: conn.clone(),
                route: None,
                held: Held::default(),
                bill: None,
                recording,
                refused: false,
                ended: false,
                record: AccessRecord {
                    request_id,
                    client: client.addr,
                    method: req.method().clone(),
                    host: None,
                    path: LoggedPath::of(req.uri()),
                    route: None,
                    upstream: None,
                    status: 0,
                    decision: DecisionKind::NotApplied,
                    consumer: None,
                    trace_id,
                    started,
                },
            },
        }
    }
}

/// Stage: admission (deny list, head and Host checks, the path, the route:
/// [`admission::admit`], shared with `tollgate simulate`).
fn admit<B>(req: &Request<B>, ctx: &mut Ctx<'_>) -> Result<Arc<RouteRuntime>, GatewayError> {
    let http1 = req.version() < Version::HTTP_2;
    if http1 && ctx.conn.framing.bad_chunk(ctx.number) {
        // Seen already, with the head: refused before any route or limit.
        ctx.done.record.host = raw_host(req);
        return Err(GatewayError::BadRequest {
            reason: "bad chunk size",
            close: true,
        });
    }
    let ambiguous = http1 && ctx.conn.framing.ambiguous(ctx.number);
    let admitted = match admission::admit(req, ctx.rt, &ctx.client, ambiguous) {
        Ok(admitted) => admitted,
        Err(error) => {
            // Logged as sent, valid or not.
            ctx.done.record.host = raw_host(req);
            return Err(error);
        }
    };
    ctx.done.record.host = admitted.host.clone();
    ctx.host = admitted.host;
    // A path already in normal form is the request's own (borrowed), which
    // the record holds already.
    if let std::borrow::Cow::Owned(path) = admitted.path {
        ctx.done.record.path = LoggedPath::Text(path);
    }
    ctx.done.record.route = Some(admitted.route.name.clone());
    ctx.done.route = Some(admitted.route.clone());
    Ok(admitted.route.clone())
}

/// Stage: the route's limits (docs/configuration/limits.md), decided by the limiter (planned by
/// [`crate::limit::plan`], shared with `tollgate simulate`). An admitted
/// request keeps its concurrency leases in `ctx` and gives back the figures
/// for its rate-limit headers; a rejected one is a [`GatewayError::Limited`].
async fn decide_limits<B>(
    req: &Request<B>,
    route: &RouteRuntime,
    ctx: &mut Ctx<'_>,
    reserve: &mut limit::Estimates<GatewayError>,
) -> Result<Vec<Figure>, GatewayError> {
    if route.limits.is_empty() {
        return Ok(Vec::new());
    }
    let view = request_view(req, route, ctx);
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
    count_decisions(metrics, route, &decision);
    note_offenders(metrics, &route.limits, &decision, &view);
    record_decisions(ctx.done.recording.as_deref_mut(), &decision);
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

/// What the request's limit keys read: its client, head and route, and
/// the consumer once authenticated.
fn request_view<'a, B>(
    req: &'a Request<B>,
    route: &'a RouteRuntime,
    ctx: &'a Ctx<'_>,
) -> RequestView<'a> {
    RequestView {
        client: ctx.client.addr,
        headers: req.headers(),
        query: req.uri().query(),
        route: &route.name,
        ipv6_prefix: ctx.rt.config.server.ipv6_prefix,
        identity: ctx
            .done
            .record
            .consumer
            .as_ref()
            .map(|c| c as &dyn Consumer),
    }
}

/// The answer to a decision that refused the request: a rejection with
/// the route's `limit_response`, or the store's unavailability
/// (`on_error: deny`).
fn rejection(decision: Decision, route: &RouteRuntime) -> GatewayError {
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

/// Stage: authentication (docs/configuration/consumers.md). Finds the
/// credentials the request presents (of the route's `require`, or of every
/// configured kind on a route without `auth`) and verifies them; the
/// consumer goes into the access-log record, where the limits' identity
/// keys and the identity headers read it.
///
/// A route with `auth` answers 401 `unauthorized` when nothing is
/// presented, 401 `invalid_credentials` when a credential fails, 403
/// `forbidden` for a consumer it does not let through, 503
/// `auth_unavailable` while a token's issuer keys are not fetched; a route
/// without `auth` never rejects, an invalid credential there is none. A
/// failed credential charges `failure_limit` for the client's address;
/// a client that limit locked out is turned away (on `auth` routes) or
/// not verified (elsewhere) before any key lookup or signature check.
async fn authenticate<B>(
    req: &Request<B>,
    route: &RouteRuntime,
    ctx: &mut Ctx<'_>,
) -> Result<(), GatewayError> {
    let Some(auth) = ctx.rt.auth.as_deref() else {
        return Ok(());
    };
    let required = route.auth.as_ref();
    let kinds = auth.kinds(required);
    let cert = ctx.conn.client_cert.as_deref();
    let presented = auth.presented(required, req.headers(), req.uri().query(), cert);
    if presented.is_empty() && required.is_none() {
        return Ok(());
    }
    let metrics = &ctx.shared.metrics;
    // Before authentication: no consumer yet.
    let view = request_view(req, route, ctx);
    let failures = ctx.rt.failure_limit.as_ref();
    if let Some(f) = failures {
        if let Some(denied) = limit::failures_denied(&ctx.rt.limiter, f, &view) {
            if required.is_none() {
                // Not verified: the credential counts as none.
                return Ok(());
            }
            metrics.auth(&route.name, AuthOutcome::LockedOut, true);
            note_offenders(metrics, std::slice::from_ref(f), &denied, &view);
            record_decisions(ctx.done.recording.as_deref_mut(), &denied);
            return Err(rejection(denied, route));
        }
    }
    let verdict = auth.verify(&presented, unix_now()).await;
    let (outcome, judged) = auth::judge(required, kinds, verdict);
    metrics.auth(&route.name, outcome, judged.is_err());
    let mut charged = None;
    if let (AuthOutcome::Invalid, Some(f)) = (outcome, failures) {
        let observer = Observed::of(ctx);
        let decision =
            limit::decide(&ctx.rt.limiter, std::slice::from_ref(f), &view, &observer).await;
        note_offenders(metrics, std::slice::from_ref(f), &decision, &view);
        record_decisions(ctx.done.recording.as_deref_mut(), &decision);
        charged = Some(decision);
    }
    match judged {
        Ok(identity) => {
            ctx.done.record.consumer = identity;
            Ok(())
        }
        // The failure that put the client over `failure_limit` is
        // answered as that limit's rejection (`locked_out` when it starts
        // a lockout).
        Err(_) if matches!(charged, Some(Decision::Reject { .. })) => {
            Err(rejection(charged.unwrap_or(Decision::NotApplied), route))
        }
        Err(refusal) => Err(refused(refusal, &mut ctx.done.record)),
    }
}

/// The answer to a route's refusal; a forbidden consumer goes into the
/// access log.
fn refused(refusal: auth::Refusal, record: &mut AccessRecord) -> GatewayError {
    match refusal {
        auth::Refusal::Forbidden(identity) => {
            record.consumer = Some(identity);
            GatewayError::Forbidden
        }
        auth::Refusal::Invalid { ref reason, .. } => {
            tracing::debug!(target: "tollgate::auth", %reason, "credential refused");
            refusal_answer(refusal)
        }
        other => refusal_answer(other),
    }
}

/// The error a route's authentication refusal is answered with
/// (docs/configuration/consumers.md); `tollgate simulate` answers the same.
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

/// Stage (a `respond` route): the route's own answer.
fn respond(status: http::StatusCode, body: &bytes::Bytes, headers: &HeaderMap) -> Response<Body> {
    let mut response = Response::new(body::full(body.clone()));
    *response.status_mut() = status;
    *response.headers_mut() = headers.clone();
    response
}

/// Stage (an `upstream` route): the request, cleaned and stamped with the
/// forwarding headers, sent to a target of `pool`; the response head back,
/// without its hop-by-hop fields.
///
/// An upgrade ([`tunnel::wanted`]; not to an HTTP/2 upstream, which could
/// not carry it) keeps its `Upgrade` and `Connection: upgrade`, and the
/// upstream's 101 goes back with them, its two sides left in `ctx` for
/// [`finish`] to tunnel. Any other `Upgrade` is dropped like the other
/// hop-by-hop fields, and the request goes on as a plain one.
///
/// Why one function: it is the hot path of every proxied request, and its
/// parts share the request's head, body and upgrade by value. Split into
/// helpers for the outbound headers and the response head (with
/// `proxy::forward`'s request building), it cost 540 to 735 more
/// instructions per request (+0.9 to +1.2 %, `benches/e2e/callgrind`),
/// inlined or not: the head and response were moved through the helpers.
#[allow(clippy::manual_async_fn)] // an `async fn` keeps its arguments twice
fn forward<'a, 'c>(
    mut req: Request<ReqBody>,
    route: &'a RouteRuntime,
    pool: &'a Arc<UpstreamPool>,
    ctx: &'a mut Ctx<'c>,
) -> impl Future<Output = Result<Response<Reply>, GatewayError>> + use<'a, 'c> {
    // Not an `async fn`, which would keep the request twice ([`handle`]).
    async move {
        let client_side = (!pool.config.http2 && tunnel::wanted(req.version(), req.headers()))
            .then(|| req.extensions_mut().remove::<OnUpgrade>())
            .flatten();
        let upgrade = client_side.is_some();
        let server = &ctx.rt.config.server;
        // `hide`: the API key's query parameter is not forwarded.
        let hidden = ctx.rt.auth.as_deref().and_then(|a| a.hidden_param());
        let path_and_query = match &ctx.done.record.path {
            // The request's own path and query, unchanged: shared, not copied.
            LoggedPath::Target(pq) if !route.strip_prefix && hidden.is_none() => pq.clone(),
            path => {
                let forwarded = route.sent_path(path.as_str());
                let query = match (req.uri().query(), hidden) {
                    (Some(q), Some(name)) => {
                        auth::credentials::without_param(q, name).map(Cow::Owned)
                    }
                    (q, _) => q.map(Cow::Borrowed),
                };
                path_and_query(&forwarded, query.as_deref())?
            }
        };
        let host = ctx.host.take();
        let (parts, incoming) = req.into_parts();
        let (body, trailers, has_body) = match incoming {
            ReqBody::Buffered(bytes) => {
                let has_body = !bytes.is_empty();
                (body::full(bytes), Vec::new(), has_body)
            }
            ReqBody::Streaming(incoming) => {
                let has_body = !incoming.is_end_stream();
                // An HTTP/1 body is also failed at a chunk the framing watcher
                // found too large.
                let chunks = (has_body && parts.version < Version::HTTP_2).then(|| {
                    (
                        ctx.conn.framing.clone() as Arc<dyn body::ChunkWatch>,
                        ctx.number,
                    )
                });
                let mut incoming = ClientBody::new(incoming, server.body_read_timeout, chunks);
                if has_body {
                    // Only a body can end with trailers.
                    incoming = incoming.scrubbing(ctx.rt.trailer_scrub.clone());
                }
                let (body, trailers) = match has_body {
                    true => {
                        request_body(
                            incoming,
                            &parts.headers,
                            parts.version,
                            server.max_body_bytes,
                            ctx.grpc,
                        )
                        .await?
                    }
                    // The usual GET: no future built and polled for nothing
                    // to read.
                    false => (ended_body(incoming), Vec::new()),
                };
                (body, trailers, has_body)
            }
        };
        let mut headers = parts.headers;
        if has_body {
            strip_hop_by_hop_keeping_trailers(&mut headers, upgrade);
        } else {
            strip_hop_by_hop(&mut headers, upgrade);
        }
        if let Some(auth) = ctx.rt.auth.as_deref() {
            auth.upstream_headers(&mut headers, ctx.done.record.consumer.as_ref());
        }
        if parts.version >= Version::HTTP_2 {
            // An HTTP/2 client always takes trailers; an HTTP/1.1 upstream
            // sends them only to a peer that says so.
            headers.insert(header::TE, HeaderValue::from_static("trailers"));
        }
        if !pool.config.http2 {
            to_http1(&mut headers, &trailers);
            if has_body && body.size_hint().exact().is_none() {
                // hyper sends a GET, HEAD or CONNECT body of unknown length as
                // no body at all unless the framing is set: a body is forwarded
                // whatever the method (docs/protocols.md).
                headers.insert(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
            }
        }
        if ctx.grpc {
            grpc_deadline(&mut headers, route.timeout);
        }
        ctx.trace.set_headers(&mut headers, ctx.span);
        set_forwarded(
            &mut headers,
            &Forwarded {
                peer: ctx.client.peer,
                peer_value: Some(ctx.conn.peer_value()),
                peer_trusted: ctx.client.trusted,
                proto: ctx.conn.proto,
                host: host.as_ref(),
                request_id: &ctx.done.record.request_id,
            },
        );
        let out = Outbound {
            method: parts.method,
            headers,
            path_and_query,
            host,
            preserve_host: route.preserve_host,
            timeout: route.timeout,
            key: ip_hash(ctx.client.addr),
            body,
            upgrade,
        };
        let hop = Hop {
            context: &ctx.trace,
            recording: ctx.done.recording.as_deref(),
        };
        let (mut response, in_flight) = proxy::forward(pool, out, &ctx.shared.metrics, hop).await?;
        let target = in_flight.label().clone();
        ctx.done.record.upstream = Some(target.clone());
        ctx.done.held.in_flight = Some(in_flight);
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            let Some(client) = client_side else {
                return Err(GatewayError::UpstreamUnavailable(Arc::new(
                    std::io::Error::other(
                        "101 Switching Protocols to a request that asked for none",
                    ),
                )));
            };
            ctx.upgrade = Some(tunnel::Pending {
                client,
                upstream: hyper::upgrade::on(&mut response),
            });
            let (mut parts, _) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers, true);
            return Ok(Response::from_parts(parts, Reply::Local(body::empty())));
        }
        let (mut parts, incoming) = response.into_parts();
        strip_hop_by_hop_keeping_trailers(&mut parts.headers, false);
        if let (true, PathMatch::Prefix(prefix)) = (route.rewrite_location, &route.path) {
            let view = LocationView {
                prefix,
                target: &target,
                scheme: ctx.conn.proto,
                host: ctx.done.record.host.as_ref().and_then(|h| h.to_str().ok()),
                preserve_host: route.preserve_host,
            };
            rewrite_location(&mut parts.headers, &view);
        }
        // The client's connection is the gateway's: an HTTP/1.0 upstream does
        // not make it HTTP/1.0 (and close after the response).
        parts.version = Version::HTTP_11;
        Ok(Response::from_parts(parts, Reply::Upstream(incoming)))
    }
}

/// A response body before [`finish`] wraps it: an upstream's, kept as it
/// is so that a proxied response is boxed once (with its bookkeeping), or
/// one the gateway made.
enum Reply {
    Upstream(ResponseBody),
    Local(Body),
}

impl http_body::Body for Reply {
    type Data = bytes::Bytes;
    type Error = body::BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, body::BoxError>>> {
        match self.get_mut() {
            Reply::Upstream(b) => std::pin::Pin::new(b).poll_frame(cx).map_err(Into::into),
            Reply::Local(b) => std::pin::Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Reply::Upstream(b) => b.is_end_stream(),
            Reply::Local(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Reply::Upstream(b) => b.size_hint(),
            Reply::Local(b) => b.size_hint(),
        }
    }
}

/// The route label of requests that matched no route.
static NO_ROUTE: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));

/// Count each limit's decision and the lockouts started.
fn count_decisions(metrics: &Metrics, route: &RouteRuntime, decision: &Decision) {
    let figures = match decision {
        Decision::Allow { figures, .. } => figures,
        Decision::Reject {
            figures,
            locked_out,
            ..
        } => {
            metrics.rejection(&route.name, *locked_out);
            figures
        }
        Decision::Unavailable | Decision::NotApplied => return,
    };
    for f in figures {
        // None: the request was rejected elsewhere and this limit decided
        // nothing.
        let Some(kind) = DecisionKind::of_outcome(&f.outcome) else {
            continue;
        };
        // Figures carry their policy's name, so the pointer finds its limit.
        match route
            .limits
            .iter()
            .position(|p| Arc::ptr_eq(&p.name, &f.name))
        {
            Some(i) => metrics.route_decision(&route.metrics, &route.name, i, &f.name, kind),
            None => metrics.decision(&route.name, &f.name, kind),
        }
        if f.outcome.lock_started {
            metrics.lockout(&f.name);
        }
    }
}

/// Each of `limits` that rejected the request (`decision`) notes its
/// client among its top offenders (`GET /top`), by the key the limiter
/// decided it under; its display form is made only when it enters a
/// summary. The route's limits, or `failure_limit` for a failed
/// credential.
fn note_offenders(
    metrics: &Metrics,
    limits: &[Arc<Policy>],
    decision: &Decision,
    view: &RequestView<'_>,
) {
    let Decision::Reject { figures, .. } = decision else {
        return;
    };
    for f in figures {
        if !matches!(
            f.outcome.status,
            tollgate_limit::Status::Rejected | tollgate_limit::Status::LockedOut
        ) {
            continue;
        }
        let Some(policy) = limits.iter().find(|p| Arc::ptr_eq(&p.name, &f.name)) else {
            continue;
        };
        metrics.top.rejected(&policy.name, f.key, || {
            policy.display_key(view).unwrap_or_default()
        });
    }
}

/// The limiter's observer for one request: the store-call metrics, and
/// the request's store-call spans when it is recorded.
struct Observed<'a> {
    metrics: &'a Metrics,
    recording: Option<&'a Recording>,
}

impl<'a> Observed<'a> {
    fn of(ctx: &'a Ctx<'_>) -> Observed<'a> {
        Observed {
            metrics: &ctx.shared.metrics,
            recording: ctx.done.recording.as_deref(),
        }
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

/// Each limit's decision of `decision`, as an event of the request's span
/// (when it is recorded).
fn record_decisions(recording: Option<&mut Recording>, decision: &Decision) {
    let Some(recording) = recording else {
        return;
    };
    let figures = match decision {
        Decision::Allow { figures, .. } | Decision::Reject { figures, .. } => figures,
        Decision::Unavailable | Decision::NotApplied => return,
    };
    for f in figures {
        if let Some(kind) = DecisionKind::of_outcome(&f.outcome) {
            recording.limit_decision(&f.name, kind.label(), f.outcome.remaining);
        }
    }
}

/// What a request holds until its response body ends: its place in the
/// upstream target's in-flight count, and its concurrency leases.
#[derive(Default)]
struct Held {
    in_flight: Option<InFlight>,
    leases: Option<Leases>,
}

/// Last stage: stamp the response, and arrange for the end of the
/// request's bookkeeping ([`Done`]) when its body ends, or after a 101 when
/// its tunnel ends (the tunnel runs on the connection's task, see
/// [`ConnInfo::after_upgrade`]).
fn finish(mut response: Response<Reply>, ctx: Ctx<'_>) -> Response<Body> {
    let idle = ctx.rt.config.server.idle_timeout;
    let tap = ctx.llm.and_then(meter::llm::tap);
    if ctx.version >= Version::HTTP_2 && !response.body().is_end_stream() {
        // A stream whose window stays shut is reset after `send` (an
        // HTTP/1 connection's stuck writes are the watchdog's).
        response
            .extensions_mut()
            .insert(hyper::ext::SendStallTimeout(
                ctx.rt.config.server.send_timeout,
            ));
    }
    let Ctx {
        conn,
        upgrade,
        mut done,
        ..
    } = ctx;
    let record = &mut done.record;
    response
        .headers_mut()
        .insert(X_REQUEST_ID, record.request_id.clone());
    if record.method == http::Method::HEAD && record.upstream.is_none() {
        without_body(&mut response);
    }
    record.status = response.status().as_u16();
    if let Some(sides) = upgrade.filter(|_| response.status() == StatusCode::SWITCHING_PROTOCOLS) {
        let response = response.map(body::boxed);
        let closing = conn.closing.clone();
        conn.after_upgrade(Box::pin(async move {
            let summary = tunnel::open(sides, idle, &closing).await;
            done.run(
                summary.to_client,
                summary.end.closed_by_a_side(),
                Some(summary),
            );
        }));
        return response;
    }
    if let Some(bill) = done.bill.take() {
        return metered(response, bill, tap, done);
    }
    response.map(move |body| {
        body::boxed(Finish::new(body, move |bytes, completed| {
            done.run(bytes, completed, None)
        }))
    })
}

/// A response of a request with cost limits: its body read as it streams
/// ([`meter::body::Metered`]), and its cost limits settled once it ended
/// (docs/configuration/cost.md). A response the gateway answered itself
/// with an error, or an upstream 5xx, is an upstream error unless the
/// usage reached the client: `on_upstream_error`.
fn metered(
    mut response: Response<Reply>,
    bill: meter::Bill,
    tap: Option<Box<dyn meter::body::Tap>>,
    done: Done,
) -> Response<Body> {
    let status = response.status();
    if tap.as_ref().is_some_and(|t| t.filters()) {
        // The usage chunk the gateway asked for is taken out: the
        // upstream's length no longer holds (HTTP/1.1 goes chunked).
        response.headers_mut().remove(header::CONTENT_LENGTH);
    }
    let reading = meter::reading::Reading {
        headers: response.headers().clone(),
        upstream_error: status.is_server_error() || done.refused,
        local: done.refused,
        ..Default::default()
    };
    let shared = done.shared.clone();
    response.map(move |body| {
        let metered = meter::body::Metered::new(body, tap, reading, move |reading| {
            bill.settle(&shared, &reading);
        });
        body::boxed(Finish::new(metered, move |bytes, completed| {
            done.run(bytes, completed, None)
        }))
    })
}

/// A response to HEAD answered by the gateway itself: the headers of the
/// response a GET would get, no body (docs/protocols.md on every protocol: hyper
/// drops it on HTTP/1.1, but would send it as DATA on HTTP/2).
fn without_body(response: &mut Response<Reply>) {
    if let Some(len) = response.body().size_hint().exact() {
        response
            .headers_mut()
            .entry(header::CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(len));
    }
    *response.body_mut() = Reply::Local(body::empty());
}

/// The end of a request's bookkeeping, once its response body (or tunnel)
/// has ended: let go of what it held, count it (through the matched route's
/// metric handles, if a route matched), write its access-log line.
///
/// A request dropped before its response was made (the client went away
/// while the gateway waited for the upstream, or the shutdown grace ran
/// out) ends when its `Done` is dropped: its cost limits settle as a
/// missing usage, and it is counted and logged with status 499 (503 when
/// the shutdown grace closed it), `completed: false`. A tunnel's cost
/// limits settle when it ends, by its bytes to the client.
struct Done {
    shared: Arc<Shared>,
    conn: Arc<ConnInfo>,
    /// The matched route.
    route: Option<Arc<RouteRuntime>>,
    /// What must live until the response body ends (or the tunnel, after
    /// a 101).
    held: Held,
    /// The access-log line; its `path` is the normalised path once the
    /// request is admitted, and forwarding sends that path.
    record: AccessRecord,
    /// What the route's cost limits charged, settled when the response
    /// ends (docs/configuration/cost.md); taken by [`finish`] for the
    /// response body.
    bill: Option<meter::Bill>,
    /// The request's spans, when its trace is sampled and `telemetry:` is
    /// configured (docs/traces.md).
    recording: Option<Box<Recording>>,
    /// The gateway answered it with an error of its own ([`answer`]).
    refused: bool,
    /// Ended already.
    ended: bool,
}

impl Done {
    /// `bytes` of response body (or tunnel bytes to the client) were sent;
    /// `completed` is false when cut short.
    fn run(mut self, bytes: u64, completed: bool, tunnel: Option<Summary>) {
        self.end(bytes, completed, tunnel);
    }

    fn end(&mut self, bytes: u64, completed: bool, tunnel: Option<Summary>) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        drop(std::mem::take(&mut self.held));
        if let Some(bill) = self.bill.take() {
            // No response body settled it: the request was dropped before
            // its response (nothing said), or became a tunnel (its bytes
            // to the client said what they said).
            let reading = meter::reading::Reading {
                bytes,
                ..meter::reading::Reading::client_gone()
            };
            bill.settle(&self.shared, &reading);
        }
        let (shared, record) = (&self.shared, &self.record);
        // One clock read for the metrics, the log line and the idle clock.
        let now = Instant::now();
        let took = now.saturating_duration_since(record.started);
        match &self.route {
            Some(route) => {
                shared
                    .metrics
                    .route_request(&route.metrics, &route.name, record.status, took)
            }
            None => shared.metrics.request(&NO_ROUTE, record.status, took),
        }
        let tunnelled = tunnel.map(|t| Tunnelled {
            bytes_in: t.from_client,
            end: t.end.as_str(),
        });
        if let Some(recording) = self.recording.take() {
            let attributes = record.span_attributes(completed, recording.store_outcome());
            recording.finish(record.span_name(), attributes, record.status);
        }
        record.emit(took, bytes, completed, tunnelled);
        let since_accept = now.saturating_duration_since(self.conn.started);
        self.conn.activity.end(since_accept.as_millis() as u64);
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // Dropped before its response was made: nobody will read one.
        self.record.status = match self.conn.closing.is_cancelled() {
            true => StatusCode::SERVICE_UNAVAILABLE.as_u16(),
            false => CLIENT_CLOSED_REQUEST,
        };
        self.end(0, false, None);
    }
}

/// NGINX's status for a request whose client closed the connection before
/// the response (499, "client closed request"): logged, never sent.
const CLIENT_CLOSED_REQUEST: u16 = 499;

/// The Host the client sent (HTTP/2 `:authority`, else `Host`), for the
/// access log, valid or not.
fn raw_host<B>(req: &Request<B>) -> Option<HeaderValue> {
    let authority = (req.version() >= Version::HTTP_2)
        .then(|| req.uri().authority())
        .flatten()
        .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
    authority.or_else(|| {
        let host = req.headers().get(header::HOST)?;
        host.to_str().is_ok().then(|| host.clone())
    })
}

/// The request id written as `id`'s 32 hex digits.
fn request_id_of(id: &TraceId) -> HeaderValue {
    // Shared from the start (one allocation holding the digits and a count):
    // the id goes upstream, back to the client and into the log, and each
    // copy is then a count, where a plain value's first copy allocates.
    HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(*id.digits()))
        .unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// A 64-bit hash of the client address, for `balance: hash`.
fn ip_hash(ip: IpAddr) -> u64 {
    let bits = match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    };
    splitmix64((bits as u64) ^ splitmix64((bits >> 64) as u64))
}

/// The body of a request whose body has ended already (the usual GET):
/// nothing to box when it is empty.
fn ended_body(incoming: ClientBody<Incoming>) -> Body {
    match incoming.size_hint().exact() {
        Some(0) => body::empty(),
        _ => body::boxed(incoming),
    }
}

/// The body to send upstream, and the names of trailer fields already
/// known to follow it. Unlimited: streamed as it comes, what has already
/// arrived of it read first ([`body::prefetch`]: a chunked body's bad chunk
/// is caught before forwarding, and trailers sent with it can be declared to
/// an HTTP/1.1 upstream). With `max_body_bytes` and a Content-Length within
/// it: streamed (hyper holds the client to its length). With a limit and no
/// length (chunked, HTTP/2): read up to the limit first, so a body that
/// turns out too large gets 413 before a single byte of it reaches the
/// upstream; except a gRPC request's, which is a stream the client may keep
/// open until it has answers: streamed, the limit counted as it passes (past
/// it, the upstream's copy is cut and the call fails; 413 if no response
/// has started).
async fn request_body(
    incoming: ClientBody<Incoming>,
    headers: &HeaderMap,
    version: Version,
    max: Option<u64>,
    grpc: bool,
) -> Result<(Body, Vec<HeaderName>), GatewayError> {
    let malformed = body_error;
    let sized = admission::content_length(headers).is_some();
    if incoming.is_end_stream() {
        return Ok((ended_body(incoming), Vec::new()));
    }
    match max {
        Some(max) if !sized && grpc => {
            let limit = usize::try_from(max).unwrap_or(usize::MAX);
            body::prefetch(Limited::new(incoming, limit))
                .await
                .map_err(malformed)
        }
        Some(max) if !sized => {
            let limit = usize::try_from(max).unwrap_or(usize::MAX);
            match Limited::new(incoming, limit).collect().await {
                Ok(collected) => {
                    let names = body::trailer_names(collected.trailers());
                    let trailers = collected.trailers().cloned();
                    Ok((body::with_trailers(collected.to_bytes(), trailers), names))
                }
                Err(error) => Err(malformed(error)),
            }
        }
        // Only a chunked or HTTP/2 body can carry trailers or bad chunks.
        _ if !sized || version >= Version::HTTP_2 => {
            body::prefetch(incoming).await.map_err(malformed)
        }
        _ => Ok((body::boxed(incoming), Vec::new())),
    }
}

/// What a request body that could not be read is answered with.
fn body_error(error: body::BoxError) -> GatewayError {
    match ClientBodyError::fault_of(&error) {
        Some(ClientFault::TooLarge) => GatewayError::BodyTooLarge,
        Some(ClientFault::TimedOut) => GatewayError::BodyTimeout,
        Some(ClientFault::Broken) | None => GatewayError::BadRequest {
            reason: "malformed request body",
            close: true,
        },
    }
}

/// A request's body, as forwarding takes it: still streaming from the
/// client, or read whole first (a cost limit needed it, and may have
/// rewritten it).
enum ReqBody {
    /// Read as it is forwarded.
    Streaming(Incoming),
    /// Read whole; `content-length` says its length.
    Buffered(Bytes),
}

/// Stage: the estimates of the route's cost limits, by index in its
/// limits (docs/configuration/cost.md); an estimate's error answers the
/// request if its limit applies ([`limit::decide_reserving`]), while an
/// LLM body that cannot be read answers it here. A route one of whose limits needs
/// the request body reads it whole first: up to `max_body_bytes` (413
/// beyond), within `timeouts.body_read`. Only for a route with cost
/// limits ([`meter::reserve::any`]).
async fn reserve_costs(
    req: Request<Incoming>,
    route: &RouteRuntime,
    ctx: &mut Ctx<'_>,
) -> Result<(Request<ReqBody>, Vec<Option<limit::Estimate<GatewayError>>>), GatewayError> {
    if !meter::reserve::needs_body(&route.limits) {
        let estimates = meter::reserve::estimates(&route.limits, req.headers(), None, None);
        return Ok((req.map(ReqBody::Streaming), estimates));
    }
    let (mut parts, incoming) = req.into_parts();
    let server = &ctx.rt.config.server;
    let chunks = (parts.version < Version::HTTP_2).then(|| {
        (
            ctx.conn.framing.clone() as Arc<dyn body::ChunkWatch>,
            ctx.number,
        )
    });
    let incoming = ClientBody::new(incoming, server.body_read_timeout, chunks);
    let limit = server
        .max_body_bytes
        .map_or(usize::MAX, |m| usize::try_from(m).unwrap_or(usize::MAX));
    let bytes = Limited::new(incoming, limit)
        .collect()
        .await
        .map_err(body_error)?
        .to_bytes();
    // The API of `api: openai` is the one the path sent upstream names.
    let sent = route.sent_path(ctx.done.record.path.as_str());
    let read = meter::llm::read(&route.limits, &bytes, &sent, &parts.headers)?;
    let bytes = match &read {
        Some(read) => {
            if let meter::llm::Seen::Call {
                reads_usage: true, ..
            } = read.seen
            {
                // The usage is read from the body as it passes: it must
                // come uncompressed.
                parts.headers.insert(
                    header::ACCEPT_ENCODING,
                    HeaderValue::from_static("identity"),
                );
            }
            ctx.llm = Some(read.seen);
            read.body.clone()
        }
        None => bytes,
    };
    let estimates =
        meter::reserve::estimates(&route.limits, &parts.headers, Some(&bytes), read.as_ref());
    parts.headers.remove(header::TRANSFER_ENCODING);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    Ok((
        Request::from_parts(parts, ReqBody::Buffered(bytes)),
        estimates,
    ))
}

/// The path and query sent upstream.
fn path_and_query(path: &str, query: Option<&str>) -> Result<PathAndQuery, GatewayError> {
    let built = match query {
        Some(q) => PathAndQuery::try_from(format!("{path}?{q}")),
        None => PathAndQuery::try_from(path),
    };
    built.map_err(|_| GatewayError::BadRequest {
        reason: "invalid request target",
        close: true,
    })
}

#[cfg(test)]
mod drop_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime for `yaml`, the state around it, and a connection from
    /// `peer`.
    fn setup(yaml: &str, peer: &str) -> (Arc<Shared>, Arc<ConnInfo>) {
        let loaded = crate::config::parse(yaml, "t.yaml").expect("config");
        let rt = Runtime::build(loaded.config, String::new(), 1, None).expect("runtime");
        let conn = Arc::new(ConnInfo::new(
            format!("{peer}:40000").parse().unwrap(),
            "http",
            tokio_util::sync::CancellationToken::new(),
        ));
        (Shared::new(rt), conn)
    }

    const YAML: &str = "
server: { trusted_proxies: [\"10.0.0.0/8\"] }
limits:
  two: { algorithm: fixed_window, limit: 2, window: 1h, key: \"header:x-user\" }
routes:
  - { name: api, match: { path: /api }, respond: { status: 204 }, limits: [two] }
";

    #[tokio::test]
    async fn the_admission_and_limit_stages_on_built_requests() {
        let (shared, conn) = setup(YAML, "10.1.1.1");
        let rt = shared.runtime.load_full();
        let req = Request::builder()
            .uri("/api/./v1")
            .header("host", "h")
            .header("x-forwarded-for", "203.0.113.9")
            .header("x-user", "ann")
            .body(())
            .unwrap();
        let mut ctx = Ctx::new(&req, &rt, &shared, &conn);
        assert_eq!(ctx.client.addr, "203.0.113.9".parse::<IpAddr>().unwrap());
        let route = admit(&req, &mut ctx).expect("admitted");
        assert_eq!(&*route.name, "api");
        assert_eq!(ctx.done.record.path.as_str(), "/api/v1");
        for _ in 0..2 {
            let figures = decide_limits(&req, &route, &mut ctx, &mut [])
                .await
                .expect("allowed");
            assert_eq!(figures.len(), 1);
        }
        match decide_limits(&req, &route, &mut ctx, &mut []).await {
            Err(GatewayError::Limited(r)) => {
                assert_eq!((&*r.limit, r.locked_out), ("two", false));
                assert_eq!(ctx.done.record.decision, DecisionKind::Rejected);
            }
            other => panic!("the third is rejected: {:?}", other.err()),
        }

        let lost = Request::builder()
            .uri("/nope")
            .header("host", "h")
            .body(())
            .unwrap();
        let mut ctx = Ctx::new(&lost, &rt, &shared, &conn);
        assert!(matches!(admit(&lost, &mut ctx), Err(GatewayError::NoRoute)));
        assert!(ctx.done.route.is_none());
        assert_eq!(ctx.done.record.host, Some(HeaderValue::from_static("h")));
    }

    #[test]
    fn request_ids_are_32_lowercase_hex_digits_and_differ() {
        let (a, b) = (
            request_id_of(&TraceId::random()),
            request_id_of(&TraceId::random()),
        );
        for id in [&a, &b] {
            let text = id.to_str().unwrap();
            assert_eq!(text.len(), 32);
            assert!(text
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        }
        assert_ne!(a, b);
    }
}
