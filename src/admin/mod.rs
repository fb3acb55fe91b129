//! The admin listener: health, readiness, config status, reload and metrics.
//! Never on a traffic port. With `admin.token` set, everything but
//! `/healthz` and `/readyz` needs `Authorization: Bearer <token>`.

use std::convert::Infallible;
use std::sync::Arc;

use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use crate::body::{self, Body};
use crate::reload::Gateway;

/// Serve the admin API on `listener` for as long as the process runs.
pub fn serve(listener: TcpListener, gateway: Arc<Gateway>) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "admin listening");
    }
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let gateway = gateway.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let gateway = gateway.clone();
                    async move { Ok::<_, Infallible>(handle(req, &gateway).await) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
}

/// Answer one admin request.
pub async fn handle(req: Request<Incoming>, gateway: &Gateway) -> Response<Body> {
    let path = req.uri().path();
    let method = req.method();
    match (method, path) {
        (&Method::GET, "/healthz") => json(StatusCode::OK, serde_json::json!({"status": "ok"})),
        (&Method::GET, "/readyz") => {
            if gateway.shared.is_draining() {
                json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    serde_json::json!({"status": "draining"}),
                )
            } else {
                json(StatusCode::OK, serde_json::json!({"status": "ready"}))
            }
        }
        _ if !authorized(&req, gateway) => json(
            StatusCode::UNAUTHORIZED,
            serde_json::json!({"error": "unauthorized"}),
        ),
        (&Method::GET, "/config") => {
            let rt = gateway.shared.runtime.load();
            let loaded_at = humantime::format_rfc3339_millis(rt.loaded_at).to_string();
            json(
                StatusCode::OK,
                serde_json::json!({
                    "generation": rt.generation,
                    "loaded_at": loaded_at,
                    "sha256": rt.sha256,
                    "last_error": gateway.shared.last_error(),
                }),
            )
        }
        (&Method::POST, "/reload") => match gateway.reload().await {
            Ok(generation) => json(
                StatusCode::OK,
                serde_json::json!({"result": "success", "generation": generation}),
            ),
            Err(error) => json(
                StatusCode::BAD_REQUEST,
                serde_json::json!({"result": "failure", "error": error}),
            ),
        },
        (&Method::GET, "/metrics") => {
            let mut response = Response::new(body::full(gateway.shared.metrics.render()));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        (_, "/healthz" | "/readyz" | "/config" | "/reload" | "/metrics") => json(
            StatusCode::METHOD_NOT_ALLOWED,
            serde_json::json!({"error": "method_not_allowed"}),
        ),
        _ => json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": "not_found"}),
        ),
    }
}

/// Whether the request carries the admin token (or none is configured).
fn authorized(req: &Request<Incoming>, gateway: &Gateway) -> bool {
    let rt = gateway.shared.runtime.load();
    let Some(token) = rt.config.admin.token.as_deref() else {
        return true;
    };
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .unwrap_or_default();
    constant_time_eq(presented, token.as_bytes())
}

/// Compare without an early exit, so timing does not reveal the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

fn json(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    let mut response = Response::new(body::full(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"secret"));
        assert!(constant_time_eq(b"", b""));
    }
}
