//! Forwarding to upstreams: pools, balancing and target health ([`pool`],
//! [`balance`], [`health`]), header hygiene ([`headers`]), and [`forward`],
//! which sends one request with the retry rules of docs/protocols.md.

pub mod balance;
pub mod client;
pub mod deadline;
pub mod drive;
pub mod headers;
pub mod health;
pub mod pool;
pub mod tunnel;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::uri::PathAndQuery;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, Uri, Version};
use smallvec::SmallVec;

use crate::body::{Body, UpstreamBody};
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::trace::context::{SpanId, TRACEPARENT};
use crate::trace::span::{Attempt, Recording};
use crate::trace::Hop;
use client::ResponseBody;
use pool::{InFlight, UpstreamPool};

/// A request ready to go upstream: headers already cleaned by
/// [`headers::strip_hop_by_hop`] and [`headers::set_forwarded`].
pub struct Outbound {
    /// The method.
    pub method: Method,
    /// The headers to send (Host is set here).
    pub headers: HeaderMap,
    /// The normalised (and possibly stripped) path, with the client's query.
    pub path_and_query: PathAndQuery,
    /// The client's Host (or `:authority`), sent when `preserve_host`.
    pub host: Option<HeaderValue>,
    /// Send the client's Host rather than the target's authority.
    pub preserve_host: bool,
    /// How long to wait for the response head.
    pub timeout: Duration,
    /// The client key's hash, for `balance: hash`.
    pub key: u64,
    /// The request body.
    pub body: Body,
    /// An upgrade request ([`tunnel::wanted`]): retried only when it could
    /// not be sent at all, whatever its method, since what it asks for is a
    /// connection rather than an answer.
    pub upgrade: bool,
}

/// `timeout` after `start`; a timeout too long for the clock is 30 years,
/// as `tokio::time::timeout` takes it.
fn deadline_after(start: tokio::time::Instant, timeout: Duration) -> tokio::time::Instant {
    const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);
    start.checked_add(timeout).unwrap_or_else(|| start + FAR)
}

/// Whether a method is idempotent (RFC 9110 §9.2.2).
fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Send `out` to a target of `pool` and return the response head with the
/// guard that counts the request against its target until the response ends.
///
/// Retries (up to `retries`, each on a target not tried yet) happen only when
/// the request can be replayed as it was: the body was never read by the
/// failed attempt, and either nothing was sent (the connection could not be
/// made) or the method is idempotent and the request no upgrade (no response
/// byte came). A timeout is never retried: the request may be running
/// upstream.
///
/// Why one function: each attempt builds its request in place and sends
/// it within the retry loop, on the hot path of every proxied request;
/// building it in a helper moved the request and its headers (see
/// `pipeline::forward`, measured with it).
///
/// `out`'s fields are used where they lie: destructured into locals, they
/// were kept twice in the future (the argument and the locals), which is
/// copied whole into each future that awaits it.
#[allow(clippy::manual_async_fn)] // an `async fn` keeps its arguments twice
pub fn forward<'a>(
    pool: &'a Arc<UpstreamPool>,
    mut out: Outbound,
    metrics: &'a Metrics,
    hop: Hop<'a>,
) -> impl Future<Output = Result<(Response<ResponseBody>, InFlight), GatewayError>> + use<'a> {
    // Not an `async fn`, which would keep `out` twice in the future (as
    // passed, and moved into a local at the first poll).
    async move {
        // Each attempt goes to a target not tried yet.
        let attempts = (pool.config.retries as usize + 1).min(pool.targets.len());
        let version = if pool.config.http2 {
            Version::HTTP_2
        } else {
            Version::HTTP_11
        };
        let (body, mut slot) = UpstreamBody::new(out.body);
        let mut body = Some(body);
        let mut tried: SmallVec<[usize; 4]> = SmallVec::new();
        let mut last_error = GatewayError::NoHealthyUpstream;

        while tried.len() < attempts {
            let Some(target) = pool.pick(out.key, &tried) else {
                break;
            };
            let Some(this_body) = body.take() else {
                break;
            };
            tried.push(target);
            let t = &pool.targets[target];
            // HTTP/1.1 sends the origin form; HTTP/2 needs `:scheme` and
            // `:authority`.
            let uri = if pool.config.http2 {
                Uri::builder()
                    .scheme(t.scheme.clone())
                    .authority(t.authority.clone())
                    .path_and_query(out.path_and_query.clone())
                    .build()
                    .map_err(|_| GatewayError::BadRequest {
                        reason: "request target",
                        close: false,
                    })?
            } else {
                Uri::from(out.path_and_query.clone())
            };
            let host_value = match (&out.host, out.preserve_host) {
                (Some(h), true) => h.clone(),
                _ => t.host.clone(),
            };
            // Keep the headers for a possible retry only when one could happen.
            let last_chance = tried.len() == attempts;
            let mut request_headers = if last_chance {
                std::mem::take(&mut out.headers)
            } else {
                out.headers.clone()
            };
            request_headers.insert(header::HOST, host_value);
            // A recorded attempt's span is the upstream's parent; a retry is
            // another hop, with a span id of its own.
            let attempt = hop.recording.map(Recording::attempt);
            match &attempt {
                Some(a) => {
                    request_headers.insert(TRACEPARENT.clone(), hop.context.traceparent(a.span));
                }
                None if tried.len() > 1 => {
                    let span = SpanId::random();
                    request_headers.insert(TRACEPARENT.clone(), hop.context.traceparent(span));
                }
                None => {}
            }
            let mut request = Request::new(this_body);
            *request.method_mut() = out.method.clone();
            *request.uri_mut() = uri;
            *request.version_mut() = version;
            *request.headers_mut() = request_headers;

            let guard = InFlight::new(pool.clone(), target);
            // One clock read for the deadline and the latency.
            let started = tokio::time::Instant::now();
            let result = deadline::within(
                deadline_after(started, out.timeout),
                pool.client.send(target, request),
            )
            .await;
            let outcome = match &result {
                Some(Ok(_)) => "response",
                Some(Err(_)) => "error",
                None => "timeout",
            };
            let took = started.elapsed();
            metrics.pool_upstream(&pool.metrics, &pool.name, (target, &t.label), outcome, took);
            if let (Some(recording), Some(attempt)) = (hop.recording, attempt) {
                let status = result
                    .as_ref()
                    .and_then(|r| r.as_ref().ok())
                    .map(|r| r.status());
                record_attempt(recording, attempt, pool, t, tried.len(), status, outcome);
            }
            match result {
                Some(Ok(response)) => {
                    pool.record(target, !response.status().is_server_error());
                    return Ok((response, guard));
                }
                Some(Err(error)) => {
                    if let Some(fault) = slot.client_fault() {
                        return Err(fault.into());
                    }
                    pool.record(target, false);
                    tracing::debug!(upstream = %pool.config.name, target = %t.label, %error, "upstream request failed");
                    let retry = error.is_connect() || (idempotent(&out.method) && !out.upgrade);
                    last_error = GatewayError::UpstreamUnavailable(Arc::new(error));
                    if !retry {
                        break;
                    }
                    match slot.take_back() {
                        Some((b, s)) => {
                            body = Some(b);
                            slot = s;
                        }
                        None => break,
                    }
                }
                None => {
                    pool.record(target, false);
                    return Err(GatewayError::UpstreamTimeout);
                }
            }
        }
        Err(last_error)
    }
}

/// A recorded attempt's span, `upstream <pool>`: its target, and what
/// came of it (a response's status; `outcome`, `error` or `timeout`, for
/// none; a 5xx or no response is an error); its number when it is a
/// retry. Few attributes: each costs about a thousand instructions by the
/// time it is exported.
fn record_attempt(
    recording: &Recording,
    attempt: Attempt,
    pool: &UpstreamPool,
    target: &pool::Target,
    number: usize,
    status: Option<http::StatusCode>,
    outcome: &'static str,
) {
    use crate::trace::attributes::{int, text};
    let mut attributes = Vec::with_capacity(3);
    attributes.push(text("tollgate.upstream.target", &target.label));
    let error = match status {
        Some(status) => {
            attributes.push(int("http.response.status_code", i64::from(status.as_u16())));
            status.is_server_error().then_some("upstream 5xx")
        }
        None => {
            attributes.push(text("error.type", outcome));
            Some(outcome)
        }
    };
    if number > 1 {
        attributes.push(int("tollgate.attempt", number as i64));
    }
    let mut name = String::with_capacity(9 + pool.name.len());
    name.push_str("upstream ");
    name.push_str(&pool.name);
    recording.end_attempt(attempt, name, attributes, error);
}
