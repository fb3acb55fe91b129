//! Stage: the estimates of the route's cost limits
//! (docs/configuration/cost.md), the request body read whole first when a
//! limit needs it (and rewritten for an LLM request).

use std::sync::Arc;

use http::{header, HeaderValue, Request, Version};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::body::{self, ClientBody};
use crate::error::GatewayError;
use crate::limit;
use crate::meter;
use crate::runtime::RouteRuntime;

use super::{body_error, Ctx, ReqBody};

/// Stage: the estimates of the route's cost limits, by index in its
/// limits (docs/configuration/cost.md); an estimate's error answers the
/// request if its limit applies ([`limit::decide_reserving`]), while an
/// LLM body that cannot be read answers it here. A route one of whose limits needs
/// the request body reads it whole first: up to `max_body_bytes` (413
/// beyond), within `timeouts.body_read`. Only for a route with cost
/// limits ([`meter::reserve::any`]).
pub(super) async fn reserve_costs(
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
