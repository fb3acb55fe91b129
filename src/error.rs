//! The gateway's errors, and the one function that turns them into responses.
//!
//! Every error the gateway answers itself (not the upstream's own errors) is a
//! [`GatewayError`]; [`GatewayError::response`] is the only place that picks
//! its status, its JSON `error` string and whether the connection must close.

use http::{header, HeaderValue, Response, StatusCode};

use crate::body::{self, Body};

/// An error the gateway answers itself.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
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
    /// A transfer coding other than `chunked`.
    #[error("unsupported transfer coding")]
    UnsupportedTransferCoding,
    /// The request head is larger than `server.max_header_bytes`.
    #[error("request head too large")]
    HeadTooLarge,
    /// The request body is larger than `server.max_body_bytes`.
    #[error("request body too large")]
    BodyTooLarge,
    /// The upstream refused, reset or could not be reached.
    #[error("upstream unavailable: {0}")]
    UpstreamUnavailable(String),
    /// Every target of the upstream is ejected.
    #[error("no healthy upstream target")]
    NoHealthyUpstream,
    /// The upstream did not answer within the route's timeout.
    #[error("upstream timed out")]
    UpstreamTimeout,
    /// The limit store could not decide and `on_error: deny` applies.
    #[error("limit store unavailable")]
    LimiterUnavailable,
}

impl GatewayError {
    /// The status code and the JSON `error` string of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            GatewayError::NoRoute => (StatusCode::NOT_FOUND, "no_route"),
            GatewayError::Denied => (StatusCode::FORBIDDEN, "forbidden"),
            GatewayError::BadRequest { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
            GatewayError::UnsupportedTransferCoding => {
                (StatusCode::NOT_IMPLEMENTED, "unsupported_transfer_coding")
            }
            GatewayError::HeadTooLarge => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "request_header_too_large",
            ),
            GatewayError::BodyTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            GatewayError::UpstreamUnavailable(_) => {
                (StatusCode::BAD_GATEWAY, "upstream_unavailable")
            }
            GatewayError::NoHealthyUpstream => {
                (StatusCode::SERVICE_UNAVAILABLE, "no_healthy_upstream")
            }
            GatewayError::UpstreamTimeout => (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout"),
            GatewayError::LimiterUnavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, "limiter_unavailable")
            }
        }
    }

    /// Whether the connection must close after this answer: the request's
    /// framing is suspect, or its body was left unread.
    pub fn closes_connection(&self) -> bool {
        match self {
            GatewayError::BadRequest { close, .. } => *close,
            GatewayError::UnsupportedTransferCoding
            | GatewayError::HeadTooLarge
            | GatewayError::BodyTooLarge => true,
            _ => false,
        }
    }

    /// The response for this error: its status, a JSON body
    /// `{"error": ..., "request_id": ...}`, and `Connection: close` when the
    /// connection can't be reused.
    pub fn response(&self, request_id: &HeaderValue) -> Response<Body> {
        let (status, code) = self.status_and_code();
        let mut response = json_error(status, code, request_id);
        if self.closes_connection() {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// A JSON error response `{"error": code, "request_id": id}` with `status`.
pub fn json_error(status: StatusCode, code: &str, request_id: &HeaderValue) -> Response<Body> {
    let body = serde_json::json!({
        "error": code,
        "request_id": request_id.to_str().unwrap_or_default(),
    });
    let mut response = Response::new(body::full(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body_json(response: Response<Body>) -> serde_json::Value {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn every_error_maps_to_its_status_code_and_string() {
        let id = HeaderValue::from_static("abc");
        let cases = [
            (GatewayError::NoRoute, 404, "no_route", false),
            (GatewayError::Denied, 403, "forbidden", false),
            (
                GatewayError::BadRequest {
                    reason: "x",
                    close: true,
                },
                400,
                "bad_request",
                true,
            ),
            (
                GatewayError::BadRequest {
                    reason: "x",
                    close: false,
                },
                400,
                "bad_request",
                false,
            ),
            (
                GatewayError::UnsupportedTransferCoding,
                501,
                "unsupported_transfer_coding",
                true,
            ),
            (
                GatewayError::HeadTooLarge,
                431,
                "request_header_too_large",
                true,
            ),
            (GatewayError::BodyTooLarge, 413, "payload_too_large", true),
            (
                GatewayError::UpstreamUnavailable("refused".into()),
                502,
                "upstream_unavailable",
                false,
            ),
            (
                GatewayError::NoHealthyUpstream,
                503,
                "no_healthy_upstream",
                false,
            ),
            (
                GatewayError::UpstreamTimeout,
                504,
                "upstream_timeout",
                false,
            ),
        ];
        for (error, status, code, close) in cases {
            let response = error.response(&id);
            assert_eq!(response.status().as_u16(), status, "{error:?}");
            assert_eq!(
                response.headers().get(header::CONNECTION).is_some(),
                close,
                "{error:?}"
            );
            assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
            let json = body_json(response).await;
            assert_eq!(json["error"], code);
            assert_eq!(json["request_id"], "abc");
        }
    }
}
