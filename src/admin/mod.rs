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
use crate::limit::engine::now_micros;
use crate::limit::headers::secs_ceil;
use crate::limit::{key, Check};
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
        (&Method::GET, "/lockouts") => lockouts(gateway).await,
        (&Method::GET | &Method::DELETE, p) if p.starts_with("/limits/") => {
            limit_state(method, &p["/limits/".len()..], gateway).await
        }
        (_, "/healthz" | "/readyz" | "/config" | "/reload" | "/metrics" | "/lockouts") => json(
            StatusCode::METHOD_NOT_ALLOWED,
            serde_json::json!({"error": "method_not_allowed"}),
        ),
        _ => json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": "not_found"}),
        ),
    }
}

/// `GET` / `DELETE /limits/{limit}/{key}`: one (limit, client)'s state, or
/// reset it (and lift any lockout) on every instance.
async fn limit_state(method: &Method, rest: &str, gateway: &Gateway) -> Response<Body> {
    let rt = gateway.shared.runtime.load_full();
    let Some((limit, key)) = rest.split_once('/') else {
        return json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": "not_found"}),
        );
    };
    let (Some(limit), Some(display)) = (percent_decode(limit), percent_decode(key)) else {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "bad_key", "message": "invalid percent-encoding"}),
        );
    };
    let Some(policy) = rt.policies.get(&limit) else {
        return json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": "unknown_limit", "limit": limit}),
        );
    };
    let Some(store_key) = key::store_key_of_display(&policy.namespace, &policy.sources, &display)
    else {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "bad_key", "message": "the key does not fit the limit's key sources"}),
        );
    };
    if method == Method::DELETE {
        return match rt.limiter.reset(&store_key).await {
            Ok(()) => json(
                StatusCode::OK,
                serde_json::json!({"limit": limit, "key": display, "reset": true}),
            ),
            Err(error) => json(
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"error": "limiter_unavailable", "message": error}),
            ),
        };
    }
    let check = Check {
        key: store_key,
        params: policy.params.clone(),
        cost: 1,
        lockout: policy.lockout,
        shadow: policy.shadow,
        lease: 0,
    };
    match rt.limiter.inspect(&check).await {
        Ok((algo, lock)) => {
            let now = now_micros();
            let state = algo.unwrap_or_else(|| policy.params.fresh());
            // A request too large to ever pass changes nothing and reports
            // the state as it is: what is left, and when it is whole again.
            let peek = policy.params.check(&state, now, PEEK_COST, 0);
            // Only `concurrency` (which ignores cost) can take the peek: it
            // then counts a lease that is not really there.
            let remaining = if peek.allowed {
                (peek.remaining + 1).min(peek.limit)
            } else {
                peek.remaining
            };
            let reset = peek.reset_after;
            let locked = lock.locked(now);
            json(
                StatusCode::OK,
                serde_json::json!({
                    "limit": limit,
                    "key": display,
                    "algorithm": policy.params.name(),
                    "quota": peek.limit,
                    "remaining": remaining,
                    "reset": secs_ceil(reset),
                    "locked": locked,
                    "locked_until": locked.then(|| rfc3339(lock.lu)),
                    "locked_for": if locked { secs_ceil(lock.lu - now) } else { 0 },
                    "strikes": lock.n,
                    "lockouts": lock.lv,
                }),
            )
        }
        Err(error) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"error": "limiter_unavailable", "message": error}),
        ),
    }
}

/// The cost of the admin API's read-only look at a limit: more than any
/// capacity (`algorithm::MAX_COUNT`), so it is always rejected and stores
/// nothing.
const PEEK_COST: u64 = crate::limit::algorithm::MAX_COUNT + 1;

/// `GET /lockouts`: the clients locked out now, per limit.
async fn lockouts(gateway: &Gateway) -> Response<Body> {
    let rt = gateway.shared.runtime.load_full();
    match rt.limiter.lockouts().await {
        Ok(list) => {
            let mut by_limit: std::collections::BTreeMap<String, Vec<serde_json::Value>> =
                Default::default();
            let count = list.len();
            for client in list {
                let (limit, display) = client
                    .label
                    .map(|(l, d)| (l.to_string(), d))
                    .unwrap_or_else(|| ("unknown".to_string(), key::hex(&client.key)));
                let left = client.remaining;
                by_limit.entry(limit).or_default().push(serde_json::json!({
                    "key": display,
                    "remaining": secs_ceil(left),
                }));
            }
            json(
                StatusCode::OK,
                serde_json::json!({"count": count, "lockouts": by_limit}),
            )
        }
        Err(error) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"error": "limiter_unavailable", "message": error}),
        ),
    }
}

fn rfc3339(us: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(us);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Decode `%XX` escapes (the admin `{key}` is percent-encoded in the URL).
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
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
