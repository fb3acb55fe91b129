//! One request's whole story, as an explicit pipeline:
//!
//! ```text
//! load runtime -> identify client -> deny list -> check framing and Host
//!   -> normalise path -> match route -> limits -> check body size
//!   -> respond | forward -> response headers -> access log (when the body ends)
//! ```
//!
//! Each stage either passes the request on or ends it with a
//! [`GatewayError`], which [`GatewayError::response`] turns into the answer.
//! Nothing here blocks on anything but the upstream and the client.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::uri::PathAndQuery;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, Version};
use http_body::Body as _;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::body::{self, Body, Finish};
use crate::config::HeaderStyle;
use crate::error::GatewayError;
use crate::identity;
use crate::limit::engine::{Decision, Figure, Leases};
use crate::limit::headers::{self as limit_headers, LimitFigures};
use crate::limit::key::RequestView;
use crate::limit::Status;
use crate::log::AccessRecord;
use crate::metrics::Metrics;
use crate::proxy::headers::{
    incoming_request_id, set_forwarded, strip_hop_by_hop, Forwarded, X_REQUEST_ID,
};
use crate::proxy::pool::InFlight;
use crate::proxy::{self, balance::splitmix64, Outbound};
use crate::route::matcher::strip_prefix;
use crate::route::normalise::normalise_path;
use crate::runtime::{Action, RouteRuntime, Runtime};
use crate::server::{ConnInfo, Handler, Responding};
use crate::shared::Shared;

/// The gateway's request handler: every request of every traffic
/// connection goes through [`handle`].
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
        let shared = self.shared.clone();
        Box::pin(async move { handle(req, &shared, &conn).await })
    }
}

/// Handle one request: never fails, every error becomes a response.
pub async fn handle(
    req: Request<Incoming>,
    shared: &Arc<Shared>,
    conn: &Arc<ConnInfo>,
) -> Response<Body> {
    let started = Instant::now();
    let number = conn.activity.begin();
    let rt = shared.runtime.load_full();
    let server = &rt.config.server;

    // Identify the client: who sent it, and whether its forwarded headers count.
    let peer = identity::canonical_ip(conn.peer.ip());
    let trusted = identity::is_trusted(peer, &server.trusted_proxies);
    let request_id = incoming_request_id(req.headers(), trusted).unwrap_or_else(new_request_id);
    let client = identity::client_addr(peer, req.headers(), &server.trusted_proxies);

    let mut record = AccessRecord {
        request_id,
        client,
        method: req.method().clone(),
        host: None,
        path: req.uri().path().to_owned(),
        route: None,
        upstream: None,
        status: 0,
        decision: "none",
        started,
    };
    let origin = Origin {
        peer,
        trusted,
        conn,
        number,
    };
    let mut matched = None;
    let routed = route_request(req, &rt, shared, &mut record, &origin, &mut matched).await;
    let (response, held) = match routed {
        Ok(answer) => answer,
        Err(error) => {
            tracing::debug!(request_id = record.request_id.to_str().unwrap_or_default(), %error, "request rejected");
            (error.response(&record.request_id), Held::default())
        }
    };
    let route = matched.map(|index| (rt, index));
    finish(response, record, shared, conn, held, route)
}

/// Who sent a request, and on which connection.
#[derive(Clone, Copy)]
struct Origin<'a> {
    /// The TCP peer's address.
    peer: IpAddr,
    /// Whether the peer is a trusted proxy.
    trusted: bool,
    /// The connection.
    conn: &'a ConnInfo,
    /// The request's number on the connection (1-based).
    number: u64,
}

/// The stages between identifying the client and the response head.
async fn route_request(
    req: Request<Incoming>,
    rt: &Runtime,
    shared: &Shared,
    record: &mut AccessRecord,
    origin: &Origin<'_>,
    matched: &mut Option<usize>,
) -> Result<(Response<Body>, Held), GatewayError> {
    let Origin {
        peer,
        trusted,
        conn,
        number,
    } = *origin;
    let server = &rt.config.server;
    if identity::in_any(peer, &server.deny) || identity::in_any(record.client, &server.deny) {
        return Err(GatewayError::Denied);
    }
    check_head(&req, server.max_header_bytes)?;
    if req.version() < Version::HTTP_2 && conn.framing.ambiguous(number) {
        // hyper dropped the Content-Length it saw beside Transfer-Encoding.
        return Err(GatewayError::BadRequest {
            reason: "both Content-Length and Transfer-Encoding",
            close: true,
        });
    }
    let host = request_host(&req)?;
    record.host = host
        .as_ref()
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);

    if req.uri().path() == "*" {
        // `OPTIONS *` (check_head allowed it): about the server, not a route.
        return Err(GatewayError::NoRoute);
    }
    let path = normalise_path(req.uri().path()).map_err(|_| GatewayError::BadRequest {
        reason: "invalid path",
        close: false,
    })?;
    record.path.clear();
    record.path.push_str(&path);

    let index = rt
        .router
        .find(record.host.as_deref(), req.method(), &path, req.headers())
        .ok_or(GatewayError::NoRoute)?;
    let route = &rt.routes[index];
    record.route = Some(route.name.clone());
    *matched = Some(index);

    // Limits: decided here, between matching the route and answering it.
    let mut held = Held::default();
    let mut figures = Vec::new();
    if !route.limits.is_empty() {
        let view = RequestView {
            client: record.client,
            headers: req.headers(),
            query: req.uri().query(),
            route: &route.name,
            ipv6_prefix: server.ipv6_prefix,
        };
        let decision = rt
            .limiter
            .check(&route.limits, &view, &shared.metrics)
            .await;
        count_decisions(&shared.metrics, route, &decision);
        match decision {
            Decision::Allow {
                delay,
                figures: f,
                leases,
                shadow_rejected,
            } => {
                record.decision = if delay > 0 {
                    "delayed"
                } else if shadow_rejected {
                    "shadow_rejected"
                } else {
                    "allowed"
                };
                figures = f;
                held.leases = leases;
                if delay > 0 {
                    tokio::time::sleep(Duration::from_micros(delay)).await;
                }
            }
            Decision::Reject {
                locked_out,
                limit,
                retry_after,
                figures,
            } => {
                record.decision = if locked_out { "locked_out" } else { "rejected" };
                let mut response = limit_headers::rejection(
                    route.reject_status,
                    locked_out,
                    &limit,
                    retry_after,
                    &record.request_id,
                    limit_headers::is_grpc(req.headers()),
                );
                add_limit_headers(&mut response, route.header_style, &figures);
                return Ok((response, held));
            }
            Decision::Unavailable => {
                record.decision = "unavailable";
                return Err(GatewayError::LimiterUnavailable);
            }
            Decision::NotApplied => {}
        }
    }

    if let (Some(max), Some(len)) = (server.max_body_bytes, content_length(req.headers())) {
        if len > max {
            return Err(GatewayError::BodyTooLarge);
        }
    }

    match &route.action {
        Action::Respond {
            status,
            body,
            headers,
        } => {
            let mut response = Response::new(body::full(body.clone()));
            *response.status_mut() = *status;
            *response.headers_mut() = headers.clone();
            add_limit_headers(&mut response, route.header_style, &figures);
            Ok((response, held))
        }
        Action::Upstream(pool) => {
            let forwarded_path = if route.strip_prefix {
                strip_prefix(&route.path, &path)
            } else {
                std::borrow::Cow::Borrowed(path.as_ref())
            };
            let path_and_query = path_and_query(&forwarded_path, req.uri().query())?;
            let (parts, incoming) = req.into_parts();
            let has_body = !incoming.is_end_stream();
            let body = request_body(incoming, &parts.headers, server.max_body_bytes).await?;
            let mut headers = parts.headers;
            if has_body {
                strip_hop_by_hop_keeping_trailers(&mut headers);
            } else {
                strip_hop_by_hop(&mut headers, false);
            }
            if parts.version >= Version::HTTP_2 {
                // An HTTP/2 client always takes trailers; an HTTP/1.1
                // upstream sends them only to a peer that says so.
                headers.insert(header::TE, HeaderValue::from_static("trailers"));
            }
            set_forwarded(
                &mut headers,
                &Forwarded {
                    peer,
                    peer_trusted: trusted,
                    proto: conn.proto,
                    host: host.as_ref(),
                    request_id: &record.request_id,
                },
            );
            let out = Outbound {
                method: parts.method,
                headers,
                path_and_query,
                host,
                preserve_host: route.preserve_host,
                timeout: route.timeout,
                key: ip_hash(record.client),
                body,
            };
            let (response, in_flight) = proxy::forward(pool, out, &shared.metrics).await?;
            record.upstream = Some(in_flight.label().clone());
            held.in_flight = Some(in_flight);
            let (mut parts, incoming) = response.into_parts();
            strip_hop_by_hop_keeping_trailers(&mut parts.headers);
            let mut response = Response::from_parts(parts, body::boxed(incoming));
            add_limit_headers(&mut response, route.header_style, &figures);
            Ok((response, held))
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
        let label = match f.outcome.status {
            Status::Allowed if f.outcome.delay > 0 => "delayed",
            Status::Allowed => "allowed",
            Status::Rejected => "rejected",
            Status::LockedOut => "locked_out",
            Status::ShadowRejected => "shadow_rejected",
            // The request was rejected elsewhere; this limit decided nothing.
            Status::NotConsumed => continue,
        };
        // Figures carry their policy's name, so the pointer finds its limit.
        match route
            .limits
            .iter()
            .position(|p| Arc::ptr_eq(&p.name, &f.name))
        {
            Some(i) => metrics.route_decision(&route.metrics, &route.name, i, &f.name, label),
            None => metrics.decision(&route.name, &f.name, label),
        }
        if f.outcome.lock_started {
            metrics.lockout(&f.name);
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

/// Add the route's rate-limit headers for `figures` to `response`.
fn add_limit_headers(response: &mut Response<Body>, style: HeaderStyle, figures: &[Figure]) {
    if figures.is_empty() {
        return;
    }
    let limits: Vec<LimitFigures<'_>> = figures
        .iter()
        .map(|f| LimitFigures {
            name: &f.name,
            outcome: &f.outcome,
            concurrency: f.concurrency,
        })
        .collect();
    limit_headers::add_headers(response.headers_mut(), style, &limits);
}

/// Last stage: stamp the response, count it (through the matched route's
/// metric handles, if a route matched), and arrange for the access-log line
/// (and the end of the request's bookkeeping) when its body ends.
fn finish(
    mut response: Response<Body>,
    mut record: AccessRecord,
    shared: &Arc<Shared>,
    conn: &Arc<ConnInfo>,
    held: Held,
    route: Option<(Arc<Runtime>, usize)>,
) -> Response<Body> {
    response
        .headers_mut()
        .insert(X_REQUEST_ID, record.request_id.clone());
    record.status = response.status().as_u16();
    let conn = conn.clone();
    let shared = shared.clone();
    response.map(move |body| {
        body::boxed(Finish::new(body, move |bytes, completed| {
            drop(held);
            let took = record.started.elapsed();
            match (&route, &record.route) {
                (Some((rt, index)), Some(name)) => {
                    let handles = &rt.routes[*index].metrics;
                    shared
                        .metrics
                        .route_request(handles, name, record.status, took)
                }
                _ => {
                    let name = record.route.as_ref().unwrap_or(&NO_ROUTE);
                    shared.metrics.request(name, record.status, took)
                }
            }
            record.emit(bytes, completed);
            conn.activity.end(conn.started.elapsed().as_millis() as u64);
        }))
    })
}

/// Strip hop-by-hop headers, then declare again the trailer fields the
/// sender declared: `Trailer` is hop-by-hop, but hyper's HTTP/1 encoder only
/// sends trailer fields the message declares, so the gateway re-declares them
/// as part of its own framing.
fn strip_hop_by_hop_keeping_trailers(headers: &mut HeaderMap) {
    let declared: Vec<HeaderValue> = if headers.contains_key(header::TRAILER) {
        headers.get_all(header::TRAILER).iter().cloned().collect()
    } else {
        Vec::new()
    };
    strip_hop_by_hop(headers, false);
    for value in declared {
        headers.append(header::TRAILER, value);
    }
}

/// A fresh request id: 128 random bits in hex.
fn new_request_id() -> HeaderValue {
    let mut id = [0u8; 32];
    // 16 bytes always fit 32 hex digits; the fallback is never taken.
    if hex::encode_to_slice(fastrand::u128(..).to_be_bytes(), &mut id).is_err() {
        return HeaderValue::from_static("0");
    }
    HeaderValue::from_bytes(&id).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// A 64-bit hash of the client address, for `balance: hash`.
fn ip_hash(ip: IpAddr) -> u64 {
    let bits = match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    };
    splitmix64((bits as u64) ^ splitmix64((bits >> 64) as u64))
}

/// SPEC §4 framing and head rules, for what hyper lets through: a single
/// `chunked` transfer coding and no Content-Length beside it, exactly one
/// Host on HTTP/1.1, an origin-form target, and a head within the limit.
fn check_head(req: &Request<Incoming>, max_header_bytes: usize) -> Result<(), GatewayError> {
    let headers = req.headers();
    let head_bytes: usize = req.uri().path().len()
        + req.uri().query().map_or(0, str::len)
        + headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum::<usize>();
    if head_bytes > max_header_bytes {
        return Err(GatewayError::HeadTooLarge);
    }
    if req.version() >= Version::HTTP_2 {
        return Ok(());
    }
    let mut codings = headers.get_all(header::TRANSFER_ENCODING).iter();
    if let Some(first) = codings.next() {
        if headers.contains_key(header::CONTENT_LENGTH) {
            return Err(GatewayError::BadRequest {
                reason: "both Content-Length and Transfer-Encoding",
                close: true,
            });
        }
        if codings.next().is_some()
            || !first
                .as_bytes()
                .trim_ascii()
                .eq_ignore_ascii_case(b"chunked")
        {
            return Err(GatewayError::UnsupportedTransferCoding);
        }
    }
    let mut hosts = headers.get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if req.version() == Version::HTTP_11 => {
            return Err(GatewayError::BadRequest {
                reason: "missing Host",
                close: false,
            })
        }
        (Some(_), Some(_)) => {
            return Err(GatewayError::BadRequest {
                reason: "several Host fields",
                close: true,
            })
        }
        _ => {}
    }
    let uri = req.uri();
    let origin_form =
        uri.scheme().is_none() && uri.authority().is_none() && uri.path().starts_with('/');
    let asterisk = uri.path() == "*" && req.method() == Method::OPTIONS;
    if !origin_form && !asterisk {
        return Err(GatewayError::BadRequest {
            reason: "request target is not origin-form",
            close: false,
        });
    }
    Ok(())
}

/// The Host the client asked for: HTTP/2's `:authority`, else the Host
/// field. It must be a valid authority without user info.
fn request_host(req: &Request<Incoming>) -> Result<Option<HeaderValue>, GatewayError> {
    let bad = || GatewayError::BadRequest {
        reason: "invalid Host",
        close: false,
    };
    if req.version() >= Version::HTTP_2 {
        if let Some(authority) = req.uri().authority() {
            return HeaderValue::from_str(authority.as_str())
                .map(Some)
                .map_err(|_| bad());
        }
    }
    let Some(value) = req.headers().get(header::HOST) else {
        return Ok(None);
    };
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.contains(&b'@') {
        return Err(bad());
    }
    let authority = http::uri::Authority::try_from(bytes).map_err(|_| bad())?;
    // `Authority` accepts any text after the last ':'; a port must be digits.
    let host_end = authority.as_str().rfind(']').unwrap_or(0);
    if authority.as_str()[host_end..].contains(':') && authority.port_u16().is_none() {
        return Err(bad());
    }
    Ok(Some(value.clone()))
}

/// The request's Content-Length, if it has a valid one.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The body to send upstream. Unlimited: streamed as it comes (a chunked
/// body's already-arrived part is checked first, see [`body::prefetch`]). With
/// `max_body_bytes` and a Content-Length within it: streamed (hyper holds the
/// client to its length). With a limit and no length (chunked, HTTP/2): read
/// up to the limit first, so a body that turns out too large gets 413 before
/// a single byte of it reaches the upstream.
async fn request_body(
    incoming: Incoming,
    headers: &HeaderMap,
    max: Option<u64>,
) -> Result<Body, GatewayError> {
    let malformed = |_| GatewayError::BadRequest {
        reason: "malformed request body",
        close: true,
    };
    let sized = content_length(headers).is_some();
    let Some(max) = max else {
        if sized || incoming.is_end_stream() {
            return Ok(body::boxed(incoming));
        }
        // Chunked: what has already arrived is checked before forwarding.
        return body::prefetch(incoming).await.map_err(malformed);
    };
    if sized || incoming.is_end_stream() {
        return Ok(body::boxed(incoming));
    }
    let limit = usize::try_from(max).unwrap_or(usize::MAX);
    match Limited::new(incoming, limit).collect().await {
        Ok(collected) => Ok(body::full(collected.to_bytes())),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            Err(GatewayError::BodyTooLarge)
        }
        Err(error) => Err(malformed(error)),
    }
}

/// The path and query sent upstream.
fn path_and_query(path: &str, query: Option<&str>) -> Result<PathAndQuery, GatewayError> {
    let built = match query {
        Some(q) => PathAndQuery::try_from(format!("{path}?{q}")),
        None => PathAndQuery::try_from(path),
    };
    built.map_err(|_| GatewayError::BadRequest {
        reason: "invalid request target",
        close: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_32_lowercase_hex_digits_and_differ() {
        let (a, b) = (new_request_id(), new_request_id());
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
