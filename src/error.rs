//! The gateway's errors, and the one place that turns them into responses.
//!
//! Every answer the gateway gives itself instead of the upstream's (a bad
//! request, no route, a rate-limit rejection, an upstream that failed) is a
//! [`GatewayError`]; [`GatewayError::response`] alone picks its status, its
//! body, its headers, and whether the connection must close. A gRPC
//! request gets each one as HTTP 200 with `grpc-status` and `grpc-message`
//! (docs/protocols.md): gRPC's HTTP-to-gRPC table (`400` → 13, `401` → 16, `403` → 7, `404` → 12,
//! `502`/`503` → 14, anything else → 2), except `504` → 4
//! (DEADLINE_EXCEEDED) and rate limits → 8 (RESOURCE_EXHAUSTED), as
//! docs/protocols.md and docs/configuration/limit-response.md say.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;

use http::header::{HeaderName, CACHE_CONTROL, CONNECTION, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use tollgate_limit::headers::secs_ceil;

use tollgate_limit::{Figure, Micros, Status};

use crate::body::{self, Body, ClientFault};
use crate::config::template::Values;
use crate::config::{LimitResponse, ResponseFormat};
use crate::limit::headers::add_route_limit_headers;

/// An error the gateway answers itself.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GatewayError {
    /// No route matched the request.
    #[error("no route matches the request")]
    NoRoute,
    /// The client address is in `server.deny`.
    #[error("client address is denied")]
    Denied,
    /// A malformed request (bad Host, bad path, bad target). `close` asks for
    /// the connection to be closed because its framing can't be trusted.
    #[error("bad request: {reason}")]
    BadRequest {
        /// What was wrong, for the log.
        reason: &'static str,
        /// Whether the connection must be closed after the answer.
        close: bool,
    },
    /// `TRACE` or `CONNECT` (docs/protocols.md): never forwarded.
    #[error("method {0} is not allowed")]
    MethodNotAllowed(http::Method),
    /// A transfer coding other than `chunked`.
    #[error("unsupported transfer coding")]
    UnsupportedTransferCoding,
    /// The request head is larger than `server.max_header_bytes`.
    #[error("request head too large")]
    HeadTooLarge,
    /// The request body is larger than `server.max_body_bytes`.
    #[error("request body too large")]
    BodyTooLarge,
    /// A request a cost limit must estimate from its LLM body is not an
    /// LLM request: not a JSON object, or no `model`
    /// (docs/configuration/cost.md); why, for the log.
    #[error("not an LLM request: {0}")]
    InvalidLlmRequest(Arc<str>),
    /// A cost limit's `reserve: header:NAME` found no whole number there.
    #[error("no whole number in the cost header {0}")]
    InvalidCost(HeaderName),
    /// The request body stalled for `timeouts.body_read` before a response
    /// began.
    #[error("request body stalled past timeouts.body_read")]
    BodyTimeout,
    /// A limit rejected the request.
    #[error("{} by limit {}", if .0.locked_out { "locked out" } else { "rate limited" }, .0.limit)]
    Limited(Box<Rejection>),
    /// The limit store could not decide and `on_error: deny` applies; with
    /// the route's answer and limits, for a problem-details answer.
    #[error("limit store unavailable")]
    LimiterUnavailable(Option<Box<Unavailable>>),
    /// The route requires a credential and none was presented
    /// (docs/configuration/consumers.md). `bearer`: a JWT is one it takes,
    /// so the answer says `WWW-Authenticate: Bearer`.
    #[error("no credential presented")]
    Unauthorized {
        /// The route accepts a JWT.
        bearer: bool,
    },
    /// A presented credential did not verify (unknown key, bad signature,
    /// expired, wrong issuer or audience...), or two name different
    /// consumers. `bearer`: a JWT was among them (RFC 6750
    /// `error="invalid_token"`).
    #[error("invalid credentials: {reason}")]
    InvalidCredentials {
        /// A JWT failed.
        bearer: bool,
        /// Why, for the log (never the credential).
        reason: Arc<str>,
    },
    /// The consumer is verified but not one the route lets through.
    #[error("consumer not allowed on this route")]
    Forbidden,
    /// A credential could not be checked: its issuer's keys have not been
    /// fetched yet.
    #[error("authentication unavailable: {0}")]
    AuthUnavailable(Arc<str>),
    /// The upstream refused, reset or could not be reached (the source is
    /// the upstream client's error).
    #[error("upstream unavailable: {0}")]
    UpstreamUnavailable(#[source] Arc<dyn std::error::Error + Send + Sync>),
    /// Every target of the upstream is ejected.
    #[error("no healthy upstream target")]
    NoHealthyUpstream,
    /// The upstream did not answer within the route's timeout.
    #[error("upstream timed out")]
    UpstreamTimeout,
}

/// A request a limit rejected, with what its route answers (docs/configuration/limit-response.md).
#[derive(Debug, Clone)]
pub struct Rejection {
    /// `locked_out` rather than `rate_limited`.
    pub locked_out: bool,
    /// The limit that rejected it (the one with the longest wait).
    pub limit: Arc<str>,
    /// The wait to advertise (`Retry-After`).
    pub retry_after: Micros,
    /// Every limit's figures, for the rate-limit headers.
    pub figures: Vec<Figure>,
    /// The route's limits, whose cost limits' units the headers name
    /// (empty where none counts tokens or bytes).
    pub limits: Vec<Arc<crate::limit::policy::Policy>>,
    /// The route's `limit_response`.
    pub answer: Arc<LimitResponse>,
}

/// What a route says when its limits could not be decided
/// (`on_error: deny`): its `limit_response`, and its limits' names.
#[derive(Debug, Clone)]
pub struct Unavailable {
    /// The route's `limit_response` (its `format` decides the body).
    pub answer: Arc<LimitResponse>,
    /// The route's limits, none of which could be decided.
    pub limits: Vec<Arc<str>>,
}

/// The problem types of draft-ietf-httpapi-ratelimit-headers-11, section
/// "Problem Types" (registered in its "Update HTTP Problem Type registry"
/// section, with these titles): a quota exceeded (429) ...
const QUOTA_EXCEEDED: (&str, &str) = (
    "https://iana.org/assignments/http-problem-types#quota-exceeded",
    "Quota Exceeded",
);
/// ... and a temporary reduction in capacity (503: the limit store could
/// not decide).
const TEMPORARY_REDUCED_CAPACITY: (&str, &str) = (
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
    "Temporary Reduced Capacity",
);

/// RFC 9457 problem details with the draft's `violated-policies`.
#[derive(serde::Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'static str,
    status: u16,
    #[serde(rename = "violated-policies")]
    violated_policies: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after: Option<u64>,
    request_id: &'a str,
}

impl Problem<'_> {
    /// The answer: `status`, `application/problem+json`.
    fn response(&self) -> Response<Body> {
        let json = serde_json::to_vec(self).unwrap_or_default();
        let mut r = Response::new(body::full(json));
        *r.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        r.headers_mut()
            .insert(CONTENT_TYPE, APPLICATION_PROBLEM_JSON);
        r
    }
}

/// gRPC status codes the gateway answers with.
mod grpc {
    pub(super) const UNKNOWN: u8 = 2;
    pub(super) const DEADLINE_EXCEEDED: u8 = 4;
    pub(super) const PERMISSION_DENIED: u8 = 7;
    pub(super) const RESOURCE_EXHAUSTED: u8 = 8;
    pub(super) const UNIMPLEMENTED: u8 = 12;
    pub(super) const INTERNAL: u8 = 13;
    pub(super) const UNAVAILABLE: u8 = 14;
    pub(super) const UNAUTHENTICATED: u8 = 16;
}

/// RFC 6750's challenge to a request without a token ...
const BEARER: HeaderValue = HeaderValue::from_static("Bearer realm=\"tollgate\"");
/// ... and to one whose token did not verify.
const BEARER_INVALID: HeaderValue =
    HeaderValue::from_static("Bearer realm=\"tollgate\", error=\"invalid_token\"");

/// `grpc-status`.
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message`.
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

impl GatewayError {
    /// The status code and the JSON `error` string of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            GatewayError::NoRoute => (StatusCode::NOT_FOUND, "no_route"),
            GatewayError::Denied => (StatusCode::FORBIDDEN, "forbidden"),
            GatewayError::BadRequest { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
            GatewayError::MethodNotAllowed(_) => {
                (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
            }
            GatewayError::UnsupportedTransferCoding => {
                (StatusCode::NOT_IMPLEMENTED, "unsupported_transfer_coding")
            }
            GatewayError::HeadTooLarge => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "request_header_too_large",
            ),
            GatewayError::BodyTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            GatewayError::BodyTimeout => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            GatewayError::InvalidLlmRequest(_) => (StatusCode::BAD_REQUEST, "invalid_llm_request"),
            GatewayError::InvalidCost(_) => (StatusCode::BAD_REQUEST, "invalid_cost"),
            GatewayError::Limited(r) => (r.answer.status, r.code()),
            GatewayError::LimiterUnavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "limiter_unavailable")
            }
            GatewayError::Unauthorized { .. } => (StatusCode::UNAUTHORIZED, "unauthorized"),
            GatewayError::InvalidCredentials { .. } => {
                (StatusCode::UNAUTHORIZED, "invalid_credentials")
            }
            GatewayError::Forbidden => (StatusCode::FORBIDDEN, "forbidden"),
            GatewayError::AuthUnavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "auth_unavailable")
            }
            GatewayError::UpstreamUnavailable(_) => {
                (StatusCode::BAD_GATEWAY, "upstream_unavailable")
            }
            GatewayError::NoHealthyUpstream => {
                (StatusCode::SERVICE_UNAVAILABLE, "no_healthy_upstream")
            }
            GatewayError::UpstreamTimeout => (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout"),
        }
    }

    /// The `grpc-status` this error gets on a gRPC request (see the module
    /// doc for the table).
    pub fn grpc_status(&self) -> u8 {
        match self {
            GatewayError::Limited(_) => grpc::RESOURCE_EXHAUSTED,
            GatewayError::UpstreamTimeout => grpc::DEADLINE_EXCEEDED,
            _ => match self.status_and_code().0.as_u16() {
                400 => grpc::INTERNAL,
                401 => grpc::UNAUTHENTICATED,
                403 => grpc::PERMISSION_DENIED,
                404 => grpc::UNIMPLEMENTED,
                429 | 502..=504 => grpc::UNAVAILABLE,
                _ => grpc::UNKNOWN,
            },
        }
    }

    /// What the client is told besides the code, when the code alone does
    /// not say what to mend: which field of an LLM request is wrong, which
    /// header holds no estimate.
    pub fn message(&self) -> Option<Cow<'_, str>> {
        match self {
            GatewayError::InvalidLlmRequest(why) => Some(Cow::Borrowed(why)),
            GatewayError::InvalidCost(name) => Some(Cow::Owned(format!(
                "the {name} header holds no whole number of units"
            ))),
            _ => None,
        }
    }

    /// Whether the connection must close after this answer: the request's
    /// framing is suspect, or its body was left unread.
    pub fn closes_connection(&self) -> bool {
        match self {
            GatewayError::BadRequest { close, .. } => *close,
            // A CONNECT's "body" is the tunnel the client meant to open.
            GatewayError::MethodNotAllowed(method) => method == http::Method::CONNECT,
            GatewayError::UnsupportedTransferCoding
            | GatewayError::HeadTooLarge
            | GatewayError::BodyTooLarge
            | GatewayError::BodyTimeout => true,
            _ => false,
        }
    }

    /// The answer to this error: its status and a JSON body `{"error": ...,
    /// "request_id": ...}` (a rejection: docs/configuration/limit-response.md
    /// or the route's own message), or for a gRPC request HTTP 200 with
    /// `grpc-status` and `grpc-message`; `Connection: close` when the
    /// connection can't be reused.
    pub fn response(&self, request_id: &HeaderValue, grpc: bool) -> Response<Body> {
        let mut response = match self {
            GatewayError::Limited(rejection) => rejection.response(request_id, grpc),
            GatewayError::LimiterUnavailable(Some(u))
                if !grpc && u.answer.format == ResponseFormat::Problem =>
            {
                Problem {
                    kind: TEMPORARY_REDUCED_CAPACITY.0,
                    title: TEMPORARY_REDUCED_CAPACITY.1,
                    status: 503,
                    violated_policies: u.limits.iter().map(|l| &**l).collect(),
                    retry_after: None,
                    request_id: request_id.to_str().unwrap_or_default(),
                }
                .response()
            }
            _ => {
                let (status, code) = self.status_and_code();
                let message = self.message();
                match (grpc, &message) {
                    (true, Some(why)) => grpc_answer(self.grpc_status(), &format!("{code}: {why}")),
                    (true, None) => grpc_answer(self.grpc_status(), code),
                    (false, _) => json_error(status, code, message.as_deref(), request_id),
                }
            }
        };
        if self.closes_connection() {
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        let challenge = match self {
            GatewayError::Unauthorized { bearer: true } => Some(BEARER),
            GatewayError::InvalidCredentials { bearer: true, .. } => Some(BEARER_INVALID),
            _ => None,
        };
        if let Some(challenge) = challenge {
            response
                .headers_mut()
                .insert(http::header::WWW_AUTHENTICATE, challenge);
        }
        response
    }
}

/// How a client's request body that failed is answered (the one mapping:
/// read whole for a cost limit, streamed upstream, or prefetched).
impl From<ClientFault> for GatewayError {
    fn from(fault: ClientFault) -> GatewayError {
        match fault {
            ClientFault::TooLarge => GatewayError::BodyTooLarge,
            ClientFault::TimedOut => GatewayError::BodyTimeout,
            ClientFault::Broken => GatewayError::BadRequest {
                reason: "malformed request body",
                close: true,
            },
        }
    }
}

impl Rejection {
    /// `rate_limited` or `locked_out`.
    pub fn code(&self) -> &'static str {
        Rejection::code_for(self.locked_out)
    }

    /// The code of a rejection, `locked_out` or `rate_limited`, for
    /// whoever names one without a `Rejection` at hand (`simulate`).
    pub fn code_for(locked_out: bool) -> &'static str {
        if locked_out {
            "locked_out"
        } else {
            "rate_limited"
        }
    }

    /// docs/configuration/limit-response.md: the route's status with its
    /// message (by default the JSON body `{"error", "limit", "retry_after",
    /// "request_id"}`), or for gRPC HTTP 200 with `grpc-status: 8` and the same
    /// message in `grpc-message`; `Retry-After` (whole seconds, rounded up, at
    /// least 1), `Cache-Control: no-store` and the route's rate-limit fields.
    ///
    /// `retry_after` is the rejecting outcome's, which is never less than
    /// its `reset`, so `Retry-After` is never earlier than the `t` reported
    /// for that limit (both round up).
    fn response(&self, request_id: &HeaderValue, grpc: bool) -> Response<Body> {
        let secs = secs_ceil(self.retry_after).max(1);
        let values = Values {
            error: self.code(),
            limit: &self.limit,
            retry_after: secs,
            request_id: request_id.to_str().unwrap_or_default(),
        };
        let template = if self.locked_out {
            self.answer
                .locked_body
                .as_ref()
                .or(self.answer.body.as_ref())
        } else {
            self.answer.body.as_ref()
        };
        let mut response = match (template, grpc) {
            (Some(template), _) => {
                let content_type = self.answer.content_type.clone().unwrap_or(TEXT_PLAIN);
                let message = template.render(&values, is_json(&content_type));
                if grpc {
                    grpc_answer(grpc::RESOURCE_EXHAUSTED, &message)
                } else {
                    let mut r = Response::new(body::full(message));
                    *r.status_mut() = self.answer.status;
                    r.headers_mut().insert(CONTENT_TYPE, content_type);
                    r
                }
            }
            (None, true) => {
                let mut message = String::with_capacity(self.limit.len() + 40);
                let _ = write!(
                    message,
                    "{}: limit {}, retry after {secs}s",
                    values.error, values.limit
                );
                grpc_answer(grpc::RESOURCE_EXHAUSTED, &message)
            }
            (None, false) if self.answer.format == ResponseFormat::Problem => {
                // Every limit that rejected (figures), else the one named.
                let mut violated: Vec<&str> = self
                    .figures
                    .iter()
                    .filter(|f| matches!(f.outcome.status, Status::Rejected | Status::LockedOut))
                    .map(|f| &*f.name)
                    .collect();
                if violated.is_empty() {
                    violated.push(values.limit);
                }
                Problem {
                    kind: QUOTA_EXCEEDED.0,
                    title: QUOTA_EXCEEDED.1,
                    status: self.answer.status.as_u16(),
                    violated_policies: violated,
                    retry_after: Some(secs),
                    request_id: values.request_id,
                }
                .response()
            }
            (None, false) => {
                let json = serde_json::to_vec(&RejectionBody {
                    error: values.error,
                    limit: values.limit,
                    retry_after: secs,
                    request_id: values.request_id,
                })
                .unwrap_or_default();
                let mut r = Response::new(body::full(json));
                *r.status_mut() = self.answer.status;
                let content_type = self.answer.content_type.clone().unwrap_or(APPLICATION_JSON);
                r.headers_mut().insert(CONTENT_TYPE, content_type);
                r
            }
        };
        let h = response.headers_mut();
        h.insert(RETRY_AFTER, HeaderValue::from(secs));
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        add_route_limit_headers(
            &mut response,
            self.answer.headers,
            &self.figures,
            &self.limits,
        );
        response
    }
}

/// Whether the request is gRPC: `content-type: application/grpc`, or
/// `application/grpc+proto`, `application/grpc-web...`, with parameters.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    headers.get(CONTENT_TYPE).is_some_and(|ct| {
        let ct = ct.as_bytes();
        ct.len() >= GRPC.len()
            && ct[..GRPC.len()].eq_ignore_ascii_case(GRPC)
            && matches!(ct.get(GRPC.len()), None | Some(b'+' | b'-' | b';' | b' '))
    })
}

const TEXT_PLAIN: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");
const APPLICATION_PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

/// Whether a content type is JSON (`application/json`, `application/*+json`),
/// so placeholders are escaped for it.
fn is_json(content_type: &HeaderValue) -> bool {
    let essence = content_type
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// A gRPC answer carrying only headers (trailers-only): HTTP 200,
/// `content-type: application/grpc`, `grpc-status`, `grpc-message`.
fn grpc_answer(status: u8, message: &str) -> Response<Body> {
    let mut r = Response::new(body::empty());
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert(GRPC_STATUS, HeaderValue::from(u16::from(status)));
    if let Ok(v) = HeaderValue::from_str(&grpc_percent_encode(message)) {
        h.insert(GRPC_MESSAGE, v);
    }
    r
}

/// gRPC's `grpc-message` encoding: bytes outside visible ASCII and space,
/// and `%`, as `%XX`.
fn grpc_percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (b' '..=b'~').contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The default body of a rejection (docs/configuration/limit-response.md).
#[derive(serde::Serialize)]
struct RejectionBody<'a> {
    error: &'a str,
    limit: &'a str,
    retry_after: u64,
    request_id: &'a str,
}

/// The body of every other gateway error.
#[derive(serde::Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    request_id: &'a str,
}

/// A JSON error response `{"error": code, "message": why, "request_id":
/// id}` with `status` (`message` only when there is one).
pub fn json_error(
    status: StatusCode,
    code: &str,
    message: Option<&str>,
    request_id: &HeaderValue,
) -> Response<Body> {
    let body = serde_json::to_vec(&ErrorBody {
        error: code,
        message,
        request_id: request_id.to_str().unwrap_or_default(),
    })
    .unwrap_or_default();
    let mut response = Response::new(body::full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, APPLICATION_JSON);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{HeaderStyle, Template};
    use http_body_util::BodyExt;
    use tollgate_limit::Outcome;

    async fn body(response: Response<Body>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn connect_error() -> GatewayError {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        GatewayError::UpstreamUnavailable(Arc::new(refused))
    }

    fn rejection(locked_out: bool, retry_after: Micros, answer: LimitResponse) -> GatewayError {
        let outcome = Outcome {
            status: if locked_out {
                Status::LockedOut
            } else {
                Status::Rejected
            },
            lock_started: false,
            delay: 0,
            limit: 5,
            window: 60_000_000,
            remaining: 0,
            reset: retry_after,
            grows_after: retry_after,
            retry_after,
            at: 0,
            taken: 0,
        };
        GatewayError::Limited(Box::new(Rejection {
            locked_out,
            limit: "login".into(),
            retry_after,
            figures: vec![Figure {
                name: "login".into(),
                outcome,
                concurrency: false,
                key: [0; 16],
                local: false,
            }],
            limits: Vec::new(),
            answer: Arc::new(answer),
        }))
    }

    /// Every error: its status, its `error` string, whether the connection
    /// closes, and its `grpc-status` (docs/protocols.md).
    ///
    /// Why one function: one table, a row per error variant, so a variant
    /// missing from it is seen at a glance.
    #[tokio::test]
    async fn every_error_maps_to_its_status_code_string_and_grpc_status() {
        let id = HeaderValue::from_static("abc");
        let bad = |close| GatewayError::BadRequest { reason: "x", close };
        let cases = [
            (GatewayError::NoRoute, 404, "no_route", false, 12),
            (GatewayError::Denied, 403, "forbidden", false, 7),
            (bad(true), 400, "bad_request", true, 13),
            (bad(false), 400, "bad_request", false, 13),
            (
                GatewayError::MethodNotAllowed(http::Method::TRACE),
                405,
                "method_not_allowed",
                false,
                2,
            ),
            (
                GatewayError::MethodNotAllowed(http::Method::CONNECT),
                405,
                "method_not_allowed",
                true,
                2,
            ),
            (
                GatewayError::UnsupportedTransferCoding,
                501,
                "unsupported_transfer_coding",
                true,
                2,
            ),
            (
                GatewayError::HeadTooLarge,
                431,
                "request_header_too_large",
                true,
                2,
            ),
            (
                GatewayError::BodyTooLarge,
                413,
                "payload_too_large",
                true,
                2,
            ),
            (GatewayError::BodyTimeout, 408, "request_timeout", true, 2),
            (
                GatewayError::LimiterUnavailable(None),
                503,
                "limiter_unavailable",
                false,
                14,
            ),
            (connect_error(), 502, "upstream_unavailable", false, 14),
            (
                GatewayError::NoHealthyUpstream,
                503,
                "no_healthy_upstream",
                false,
                14,
            ),
            (
                GatewayError::UpstreamTimeout,
                504,
                "upstream_timeout",
                false,
                4,
            ),
            (
                rejection(false, 2_000_000, LimitResponse::default()),
                429,
                "rate_limited",
                false,
                8,
            ),
            (
                rejection(true, 2_000_000, LimitResponse::default()),
                429,
                "locked_out",
                false,
                8,
            ),
        ];
        for (error, status, code, close, grpc_status) in cases {
            let response = error.response(&id, false);
            assert_eq!(response.status().as_u16(), status, "{error:?}");
            assert_eq!(
                response.headers().get(CONNECTION).is_some(),
                close,
                "{error:?}"
            );
            assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
            let json: serde_json::Value = serde_json::from_str(&body(response).await).unwrap();
            assert_eq!(json["error"], code);
            assert_eq!(json["request_id"], "abc");

            assert_eq!(error.grpc_status(), grpc_status, "{error:?}");
            let response = error.response(&id, true);
            assert_eq!(response.status(), 200, "{error:?}");
            let h = response.headers();
            assert_eq!(h[CONTENT_TYPE], "application/grpc");
            assert_eq!(h[GRPC_STATUS], grpc_status.to_string().as_str());
            assert!(
                h[GRPC_MESSAGE].to_str().unwrap().starts_with(code),
                "{error:?}"
            );
            assert!(body(response).await.is_empty(), "a trailers-only answer");
        }
    }

    #[tokio::test]
    async fn a_rejection_as_spec_5_4_says() {
        let id = HeaderValue::from_static("req-1");
        let r = rejection(false, 1_200_000, LimitResponse::default()).response(&id, false);
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()[RETRY_AFTER], "2");
        assert_eq!(r.headers()[CACHE_CONTROL], "no-store");
        assert_eq!(r.headers()[CONTENT_TYPE], "application/json");
        assert_eq!(r.headers()["ratelimit"], "\"login\";r=0;t=2");
        assert_eq!(r.headers()["ratelimit-policy"], "\"login\";q=5;w=60");
        let json: serde_json::Value = serde_json::from_str(&body(r).await).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"error": "rate_limited", "limit": "login", "retry_after": 2, "request_id": "req-1"})
        );
        let answer = LimitResponse {
            status: StatusCode::SERVICE_UNAVAILABLE,
            headers: HeaderStyle::Legacy,
            ..LimitResponse::default()
        };
        let r = rejection(true, 0, answer).response(&id, false);
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()[RETRY_AFTER], "1", "never less than 1");
        assert!(r.headers().get("ratelimit").is_none());
        assert_eq!(r.headers()["x-ratelimit-remaining"], "0");

        let r = rejection(true, 42_000_000, LimitResponse::default()).response(&id, true);
        assert_eq!(r.status(), 200);
        let h = r.headers();
        assert_eq!(h[GRPC_STATUS], "8");
        assert_eq!(h[GRPC_MESSAGE], "locked_out: limit login, retry after 42s");
        assert_eq!(h[RETRY_AFTER], "42");
        assert_eq!(h[CACHE_CONTROL], "no-store");
        assert_eq!(h["ratelimit"], "\"login\";r=0;t=42");
        assert_eq!(grpc_percent_encode("a%b\né"), "a%25b%0A%C3%A9");
    }

    #[tokio::test]
    async fn problem_details_with_the_drafts_types() {
        let id = HeaderValue::from_static("req-2");
        let problem = LimitResponse {
            format: ResponseFormat::Problem,
            ..LimitResponse::default()
        };
        let r = rejection(true, 3_000_000, problem.clone()).response(&id, false);
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()[CONTENT_TYPE], "application/problem+json");
        assert_eq!(r.headers()[RETRY_AFTER], "3");
        assert_eq!(r.headers()[CACHE_CONTROL], "no-store");
        assert_eq!(r.headers()["ratelimit"], "\"login\";r=0;t=3");
        let json: serde_json::Value = serde_json::from_str(&body(r).await).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
                "title": "Quota Exceeded",
                "status": 429,
                "violated-policies": ["login"],
                "retry_after": 3,
                "request_id": "req-2"
            })
        );
        // gRPC is unchanged.
        let r = rejection(false, 3_000_000, problem.clone()).response(&id, true);
        assert_eq!(r.headers()[GRPC_STATUS], "8");
        // The store could not decide and `on_error: deny`: 503.
        let unavailable = GatewayError::LimiterUnavailable(Some(Box::new(Unavailable {
            answer: Arc::new(problem),
            limits: vec!["a".into(), "b".into()],
        })));
        let r = unavailable.response(&id, false);
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()[CONTENT_TYPE], "application/problem+json");
        let json: serde_json::Value = serde_json::from_str(&body(r).await).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "type": "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
                "title": "Temporary Reduced Capacity",
                "status": 503,
                "violated-policies": ["a", "b"],
                "request_id": "req-2"
            })
        );
        // The JSON format keeps its body.
        let json_route = GatewayError::LimiterUnavailable(Some(Box::new(Unavailable {
            answer: Arc::new(LimitResponse::default()),
            limits: vec![],
        })));
        let r = json_route.response(&id, false);
        assert_eq!(r.headers()[CONTENT_TYPE], "application/json");
    }

    #[tokio::test]
    async fn custom_messages_with_placeholders() {
        let id = HeaderValue::from_static("id-\"7");
        let answer = LimitResponse {
            body: Some(
                Template::parse("Too many requests, retry in {retry_after}s ({limit})").unwrap(),
            ),
            locked_body: Some(
                Template::parse("{\"e\": \"{error}\", \"id\": \"{request_id}\"}").unwrap(),
            ),
            ..LimitResponse::default()
        };
        let r = rejection(false, 2_500_000, answer.clone()).response(&id, false);
        assert_eq!(r.headers()[CONTENT_TYPE], "text/plain; charset=utf-8");
        assert_eq!(r.headers()[RETRY_AFTER], "3");
        assert_eq!(body(r).await, "Too many requests, retry in 3s (login)");
        // `locked_body` for a lockout; text/plain does not escape.
        let r = rejection(true, 1, answer.clone()).response(&id, false);
        assert_eq!(body(r).await, "{\"e\": \"locked_out\", \"id\": \"id-\"7\"}");
        // A JSON content type escapes the values.
        let json = LimitResponse {
            content_type: Some(HeaderValue::from_static("application/problem+json")),
            ..answer.clone()
        };
        let r = rejection(true, 1, json).response(&id, false);
        assert_eq!(r.headers()[CONTENT_TYPE], "application/problem+json");
        let text = body(r).await;
        assert_eq!(text, "{\"e\": \"locked_out\", \"id\": \"id-\\\"7\"}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap()["id"],
            "id-\"7"
        );
        // gRPC: the same text in grpc-message.
        let r = rejection(false, 2_500_000, answer).response(&id, true);
        assert_eq!(r.headers()[GRPC_STATUS], "8");
        assert_eq!(
            r.headers()[GRPC_MESSAGE],
            "Too many requests, retry in 3s (login)"
        );
    }

    proptest::proptest! {
        /// Retry-After is the `t` reported (never earlier than legacy's
        /// reset), and both fields stay valid structured fields.
        #[test]
        fn retry_after_never_before_t(
            window in 0u64..10_000_000_000,
            reset_frac in 0u64..=1000,
            extra in 0u64..100_000_000,
            remaining in 0u64..100,
        ) {
            let reset = window / 1000 * reset_frac;
            let outcome = Outcome {
                status: Status::Rejected,
                lock_started: false,
                delay: 0,
                limit: 100,
                window,
                remaining,
                reset,
                grows_after: reset + extra,
                retry_after: reset + extra,
                at: 0,
                taken: 0,
            };
            let error = GatewayError::Limited(Box::new(Rejection {
                locked_out: false,
                limit: "l".into(),
                retry_after: outcome.retry_after,
                figures: vec![Figure { name: "l".into(), outcome, concurrency: false, key: [0; 16], local: false }],
                limits: Vec::new(),
                answer: Arc::new(LimitResponse { headers: HeaderStyle::Both, ..LimitResponse::default() }),
            }));
            let r = error.response(&HeaderValue::from_static("x"), false);
            let h = r.headers();
            let retry: u64 = h[RETRY_AFTER].to_str().unwrap().parse().unwrap();
            let field = |name: &str, key: &str| -> u64 {
                let list = sfv::Parser::new(h[name].as_bytes()).parse::<sfv::List>().unwrap();
                let sfv::ListEntry::Item(item) = &list[0] else { panic!("an item") };
                let value = item.params.get(key).unwrap();
                value.as_integer().map(|i| i64::from(i) as u64).unwrap()
            };
            let (t, w) = (field("ratelimit", "t"), field("ratelimit-policy", "w"));
            proptest::prop_assert!(retry >= 1);
            proptest::prop_assert_eq!(retry, t, "draft 11: t is Retry-After's wait");
            proptest::prop_assert!(w >= 1);
            // The legacy reset keeps draft 10's figure: at most w, never
            // later than Retry-After.
            let legacy: u64 = h["x-ratelimit-reset"].to_str().unwrap().parse().unwrap();
            proptest::prop_assert!(legacy <= w && legacy <= retry);
        }
    }

    #[test]
    fn grpc_requests_are_told_by_their_content_type() {
        let mut req = HeaderMap::new();
        for (ct, grpc) in [
            ("application/grpc", true),
            ("application/grpc+proto", true),
            ("Application/GRPC; charset=x", true),
            ("application/grpc-web+proto", true),
            ("application/json", false),
            ("application/grpcx", false),
            ("application/grp", false),
        ] {
            req.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
            assert_eq!(is_grpc(&req), grpc, "{ct}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn a_failed_client_body_is_answered_by_its_fault() {
        let status = |fault| GatewayError::from(fault).status_and_code();
        assert_eq!(
            status(ClientFault::TooLarge),
            (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
        );
        assert_eq!(
            status(ClientFault::TimedOut),
            (StatusCode::REQUEST_TIMEOUT, "request_timeout")
        );
        assert_eq!(
            status(ClientFault::Broken),
            (StatusCode::BAD_REQUEST, "bad_request")
        );
        assert!(GatewayError::from(ClientFault::Broken).closes_connection());
    }
}
