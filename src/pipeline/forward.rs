//! Stage: the answer, from the route itself (`respond`) or from the
//! upstream (`forward`): the request cleaned and stamped with the
//! forwarding headers, its body streamed (or sent as read), the response
//! head back.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::header::HeaderName;
use http::uri::PathAndQuery;
use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode, Version};
use http_body::Body as _;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;

use crate::admission;
use crate::auth::{self};
use crate::body::{self, Body, ClientBody, ClientBodyError, ClientFault};
use crate::config::PathMatch;
use crate::error::GatewayError;
use crate::log::LoggedPath;
use crate::proxy::client::ResponseBody;
use crate::proxy::headers::{
    grpc_deadline, rewrite_location, set_forwarded, strip_hop_by_hop,
    strip_hop_by_hop_keeping_trailers, to_http1, Forwarded, LocationView,
};
use crate::proxy::pool::UpstreamPool;
use crate::proxy::tunnel::{self};
use crate::proxy::{self, Outbound};
use crate::runtime::RouteRuntime;
use crate::trace::Hop;

use super::{ip_hash, Ctx};

/// Stage (a `respond` route): the route's own answer.
#[inline]
pub(super) fn respond(
    status: http::StatusCode,
    body: &bytes::Bytes,
    headers: &HeaderMap,
) -> Response<Body> {
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
pub(super) fn forward<'a, 'c>(
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
pub(super) enum Reply {
    Upstream(ResponseBody),
    Local(Body),
}

impl http_body::Body for Reply {
    type Data = bytes::Bytes;
    type Error = body::BoxError;

    #[inline]
    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, body::BoxError>>> {
        match self.get_mut() {
            Reply::Upstream(b) => std::pin::Pin::new(b).poll_frame(cx).map_err(Into::into),
            Reply::Local(b) => std::pin::Pin::new(b).poll_frame(cx),
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match self {
            Reply::Upstream(b) => b.is_end_stream(),
            Reply::Local(b) => b.is_end_stream(),
        }
    }

    #[inline]
    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Reply::Upstream(b) => b.size_hint(),
            Reply::Local(b) => b.size_hint(),
        }
    }
}

/// The body of a request whose body has ended already (the usual GET):
/// nothing to box when it is empty.
#[inline]
pub(super) fn ended_body(incoming: ClientBody<Incoming>) -> Body {
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
pub(super) async fn request_body(
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
pub(super) fn body_error(error: body::BoxError) -> GatewayError {
    // An error that is not the client's own failure is a broken body too.
    ClientBodyError::fault_of(&error)
        .unwrap_or(ClientFault::Broken)
        .into()
}

/// A request's body, as forwarding takes it: still streaming from the
/// client, or read whole first (a cost limit needed it, and may have
/// rewritten it).
pub(super) enum ReqBody {
    /// Read as it is forwarded.
    Streaming(Incoming),
    /// Read whole; `content-length` says its length.
    Buffered(Bytes),
}

/// The path and query sent upstream.
pub(super) fn path_and_query(
    path: &str,
    query: Option<&str>,
) -> Result<PathAndQuery, GatewayError> {
    let built = match query {
        Some(q) => PathAndQuery::try_from(format!("{path}?{q}")),
        None => PathAndQuery::try_from(path),
    };
    built.map_err(|_| GatewayError::BadRequest {
        reason: "invalid request target",
        close: true,
    })
}
