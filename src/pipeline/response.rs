//! Last stage: the response stamped, and the end of the request's
//! bookkeeping ([`Done`]) arranged for when its body (or tunnel) ends, or
//! for when the request is dropped before its response; the settlement of
//! its cost limits with it.

use std::sync::Arc;
use std::time::Instant;

use http::{header, HeaderValue, Response, StatusCode, Version};
use http_body::Body as _;

use crate::body::{self, Body, Finish};
use crate::log::Tunnelled;
use crate::meter;
use crate::proxy::headers::X_REQUEST_ID;
use crate::proxy::tunnel::{self, Summary};

use super::{Ctx, Done, Reply};

/// The route label of requests that matched no route.
pub(super) static NO_ROUTE: std::sync::LazyLock<Arc<str>> =
    std::sync::LazyLock::new(|| Arc::from(""));

/// Last stage: stamp the response, and arrange for the end of the
/// request's bookkeeping ([`Done`]) when its body ends, or after a 101 when
/// its tunnel ends (the tunnel runs on the connection's task, see
/// [`ConnInfo::after_upgrade`]).
#[inline]
pub(super) fn finish(mut response: Response<Reply>, ctx: Ctx<'_>) -> Response<Body> {
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
pub(super) fn metered(
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
pub(super) fn without_body(response: &mut Response<Reply>) {
    if let Some(len) = response.body().size_hint().exact() {
        response
            .headers_mut()
            .entry(header::CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(len));
    }
    *response.body_mut() = Reply::Local(body::empty());
}

impl Done {
    /// `bytes` of response body (or tunnel bytes to the client) were sent;
    /// `completed` is false when cut short.
    #[inline]
    fn run(mut self, bytes: u64, completed: bool, tunnel: Option<Summary>) {
        self.end(bytes, completed, tunnel);
    }

    #[inline]
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
pub(super) const CLIENT_CLOSED_REQUEST: u16 = 499;
