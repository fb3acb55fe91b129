//! One request's whole story, as a list of stages, each in a file of its
//! own (`handle` calls them in this order):
//!
//! ```text
//! stage            file             what it does
//! Ctx::new         mod.rs           the runtime snapshot; client, request id, trace
//! admit            admit.rs         deny list, head and Host checks, path, route
//! authenticate     authenticate.rs  api key | jwt | mtls; failure_limit first
//! reserve_costs    cost.rs          the body read for cost limits; their estimates
//! decide_limits    limits.rs        the route's limits, all or nothing; leases, holds
//!   observe        observe.rs       one walk: decision metrics, top offenders, span
//! body_size        (admission.rs)   max_body_bytes against the declared length
//! respond|forward  forward.rs       the route's own answer, or the upstream's
//! finish           response.rs      rate-limit fields, X-Request-Id; the end (Done):
//!                                   held things released, cost settled, counted,
//!                                   logged, when the body or tunnel ends, or when
//!                                   the request is dropped before its response
//! ```
//!
//! Each stage either passes the request on or ends it with a
//! [`GatewayError`], which [`GatewayError::response`] turns into the answer.
//! The stages share one `Ctx`. Their decisions are I/O-free functions that
//! `tollgate simulate` and `POST /probe` call too: admission
//! ([`crate::admission`]), authentication (`authenticate_with`, over each
//! caller's I/O), the cost estimates ([`crate::meter`]), limit planning
//! ([`crate::limit::plan`]). Nothing here blocks on anything but the limit
//! store, the upstream and the client.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use http::{header, HeaderValue, Request, Response, Version};
use hyper::body::Incoming;
use tollgate_limit::{DecisionKind, Leases};

use crate::admission;
use crate::body::Body;
use crate::client_addr::Client;
use crate::error::{is_grpc, GatewayError};
use crate::limit::headers::add_route_limit_headers;

use crate::log::{AccessRecord, LoggedPath};
use crate::meter;
use crate::proxy::balance::splitmix64;
use crate::proxy::headers::incoming_request_id;
use crate::proxy::pool::InFlight;
use crate::proxy::tunnel::{self};
use crate::runtime::{Action, RouteRuntime, Runtime};
use crate::server::{ConnInfo, Handler, Responding};
use crate::shared::Shared;
use crate::trace::context::{SpanId, TraceContext, TraceId};
use crate::trace::span::Recording;

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
/// stages between identifying the client and the response head are called
/// here rather than from a function of their own: that function's future
/// was copied whole (~4 KB) into this one's, and the request with it
/// (callgrind, per request).
#[allow(clippy::manual_async_fn)] // an `async fn` keeps its arguments twice
fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    conn: Arc<ConnInfo>,
) -> impl Future<Output = Response<Body>> {
    // A plain function around an `async move` block rather than an `async
    // fn`: an `async fn` keeps each argument twice in its future (as passed,
    // and moved into a local at the first poll), the request's 264 bytes
    // copied once more.
    async move {
        let (shared, conn) = (&shared, &conn);
        let rt = shared.runtime.load_full();
        let mut ctx = Ctx::new(&req, &rt, shared, conn);
        let route = or_answer!(admit(&req, &mut ctx), ctx);
        // Authentication and the limits are boxed, and only awaited where they
        // apply: each keeps a limit decision's state (its store call) across
        // awaits, which would otherwise be part of every request's future,
        // copied in at each level it is awaited through.
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

/// What the request's limit keys read ([`RequestView`]): its client, head
/// and route, and the consumer once authenticated. A macro rather than a
/// function: it borrows only the fields it reads, so a stage may go on
/// writing the request's other bookkeeping (its span) while the view
/// lives.
macro_rules! request_view {
    ($req:expr, $route:expr, $ctx:ident) => {
        crate::limit::key::RequestView {
            client: $ctx.client.addr,
            headers: $req.headers(),
            query: $req.uri().query(),
            route: &$route.name,
            ipv6_prefix: $ctx.rt.config.server.ipv6_prefix,
            identity: $ctx
                .done
                .record
                .consumer
                .as_ref()
                .map(|c| c as &dyn crate::limit::key::Consumer),
        }
    };
}

/// What a request holds until its response body ends: its place in the
/// upstream target's in-flight count, and its concurrency leases.
#[derive(Default)]
struct Held {
    in_flight: Option<InFlight>,
    leases: Option<Leases>,
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
#[inline]
fn request_id_of(id: &TraceId) -> HeaderValue {
    // Shared from the start (one allocation holding the digits and a count):
    // the id goes upstream, back to the client and into the log, and each
    // copy is then a count, where a plain value's first copy allocates.
    HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(*id.digits()))
        .unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// A 64-bit hash of the client address, for `balance: hash`.
#[inline]
fn ip_hash(ip: IpAddr) -> u64 {
    let bits = match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    };
    splitmix64((bits as u64) ^ splitmix64((bits >> 64) as u64))
}

mod admit;
mod authenticate;
mod cost;
mod forward;
mod limits;
mod observe;
mod response;

use admit::admit;
use authenticate::authenticate;
pub(crate) use authenticate::{authenticate_with, AuthIo};
pub use authenticate::{refusal_answer, Refused};
use cost::reserve_costs;
use forward::{body_error, forward, respond, Reply, ReqBody};
use limits::{decide_limits, rejection};
use observe::{observe, Observed, Whose};
use response::finish;

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
