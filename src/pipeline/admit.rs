//! Stage: admission (deny list, head and Host checks, the path, the
//! route), the gateway's side of [`crate::admission::admit`], which
//! `tollgate simulate` and `POST /probe` call too.

use std::sync::Arc;

use http::{Request, Version};

use crate::admission;
use crate::error::GatewayError;
use crate::log::LoggedPath;
use crate::runtime::RouteRuntime;

use super::{raw_host, Ctx};

/// Stage: admission (deny list, head and Host checks, the path, the route:
/// [`admission::admit`], shared with `tollgate simulate`).
pub(super) fn admit<B>(
    req: &Request<B>,
    ctx: &mut Ctx<'_>,
) -> Result<Arc<RouteRuntime>, GatewayError> {
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
