//! The admin listener (docs/operations.md): health, readiness, config status, reload,
//! metrics, limit state and lockouts, probes, upstream health, and the dashboard.
//! Never on a traffic port.
//!
//! With `admin.token` set, everything but `/healthz` and `/readyz` needs
//! `Authorization: Bearer <token>` (the scheme name in any case; 401
//! otherwise, compared in constant time; two or more `Authorization` fields
//! are ambiguous, a 400). A browser cannot add that header when it opens a page, so the
//! dashboard page alone (`GET /`) also takes the token as `?token=`; the
//! page then keeps it in the tab's `sessionStorage`, removes it from the
//! address bar, and sends it as a bearer header on every fetch. Without it,
//! `GET /` answers 401 with a small form asking for the token.
//!
//! | endpoint | module |
//! |---|---|
//! | `/healthz`, `/readyz`, `/config`, `/reload`, `/metrics`, `/limits/...`, `/lockouts`, `/upstreams`, `/consumers`, `/top` | here |
//! | `/quotas/{limit}/{key}` (keys' own values) | `quotas` |
//! | `/probe` | here, answered by [`crate::probe`] |
//! | `/` (the page), `/api/stats` (what it polls) | [`dashboard`] |
//! | the counters behind `/api/stats` | [`crate::metrics::stats`] |

pub mod dashboard;
mod quotas;

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use subtle::ConstantTimeEq;
use tollgate_limit::headers::secs_ceil;
use tollgate_limit::Check;

use crate::body::{self, Body};
use crate::config::units::format_duration;
use crate::limit::key;
use crate::proxy::health;
use crate::reload::Gateway;
use crate::runtime::Runtime;

use dashboard::Dashboard;

/// What every admin request can reach: the gateway and the dashboard's
/// state (its history of samples, its cache of the lockout list).
pub struct Admin {
    /// The running gateway.
    pub gateway: Arc<Gateway>,
    /// The dashboard's state.
    pub dashboard: Dashboard,
}

/// Serve the admin API on `listener` for as long as the process runs, and
/// start sampling the dashboard's statistics.
pub fn serve(listener: TcpListener, gateway: Arc<Gateway>) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "admin listening");
    }
    let admin = Arc::new(Admin {
        gateway,
        dashboard: Dashboard::default(),
    });
    dashboard::start_sampler(&admin);
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let admin = admin.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let admin = admin.clone();
                    async move { Ok::<_, Infallible>(handle(req, &admin, peer.ip()).await) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
}

/// Answer one admin request from `peer`.
pub async fn handle(req: Request<Incoming>, admin: &Admin, peer: IpAddr) -> Response<Body> {
    let gateway = &admin.gateway;
    let path = req.uri().path();
    let method = req.method();
    let query = Query::parse(req.uri().query());
    match (method, path) {
        (&Method::GET, "/healthz") => json(StatusCode::OK, serde_json::json!({"status": "ok"})),
        (&Method::GET, "/readyz") => readyz(gateway),
        (&Method::GET, "/") => match authorize(&req, gateway, query.get("token")) {
            Auth::Granted => dashboard::page(),
            Auth::Denied => dashboard::login_page(),
            Auth::Ambiguous => ambiguous_authorization(),
        },
        _ => match authorize(&req, gateway, None) {
            Auth::Granted => endpoint(req, admin, query, peer).await,
            Auth::Denied => unauthorized(),
            Auth::Ambiguous => ambiguous_authorization(),
        },
    }
}

/// Answer a request from `peer` to an endpoint that needs the token, once
/// it was shown.
async fn endpoint(
    req: Request<Incoming>,
    admin: &Admin,
    query: Query,
    peer: IpAddr,
) -> Response<Body> {
    if let Some(rest) = req.uri().path().strip_prefix("/quotas/") {
        let rest = rest.to_owned();
        return quotas::handle(req, &rest, admin).await;
    }
    let gateway = &admin.gateway;
    let path = req.uri().path();
    let method = req.method();
    match (method, path) {
        (&Method::GET, "/api/stats") => dashboard::api_stats(admin, &query).await,
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
                serde_json::json!({"result": "failure", "error": error.to_string()}),
            ),
        },
        (&Method::GET, "/metrics") => {
            let metrics = &gateway.shared.metrics;
            metrics.upstream_health(target_health(&gateway.shared.runtime.load()));
            let mut response = Response::new(body::full(metrics.render()));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        (&Method::GET, "/lockouts") => lockouts(admin, &query).await,
        (&Method::GET, "/upstreams") => json(
            StatusCode::OK,
            serde_json::json!({"upstreams": upstreams(&gateway.shared.runtime.load())}),
        ),
        (&Method::GET, "/top") => json(StatusCode::OK, top(&gateway.shared.metrics)),
        (&Method::GET, "/consumers") => {
            json(StatusCode::OK, consumers(&gateway.shared.runtime.load()))
        }
        (&Method::POST, "/probe") => probe(req, gateway, peer).await,
        (&Method::GET | &Method::DELETE, p) if p.starts_with("/limits/") => {
            limit_state(method, &p["/limits/".len()..], admin).await
        }
        (_, p) if p.starts_with("/limits/") => method_not_allowed("GET, DELETE"),
        (_, "/reload" | "/probe") => method_not_allowed("POST"),
        (
            _,
            "/" | "/healthz" | "/readyz" | "/config" | "/metrics" | "/lockouts" | "/upstreams"
            | "/api/stats" | "/consumers" | "/top",
        ) => method_not_allowed("GET"),
        _ => json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": "not_found"}),
        ),
    }
}

/// `GET /readyz`: 200 while a config is in force and its listeners are
/// bound (the admin listener only starts once they are), 503 once draining.
fn readyz(gateway: &Gateway) -> Response<Body> {
    if gateway.shared.is_draining() {
        return json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "draining"}),
        );
    }
    let generation = gateway.shared.runtime.load().generation;
    json(
        StatusCode::OK,
        serde_json::json!({"status": "ready", "generation": generation}),
    )
}

/// A `{limit}/{key}` of the admin API, resolved.
struct LimitKey {
    /// The limit's name.
    limit: String,
    /// The key as written (components joined with `|`).
    display: String,
    /// The limit.
    policy: Arc<crate::limit::policy::Policy>,
    /// Its store key for that client.
    store_key: tollgate_limit::StoreKey,
}

impl LimitKey {
    /// `rest` (`{limit}/{key}`, percent-encoded) resolved in `rt`; an
    /// unknown limit is answered with `unknown` (404 for `/limits`, 400
    /// for `/quotas`), a key no request to the running config can have
    /// (`key::store_key_of_display`) with 400 `bad_key` and the reason.
    fn resolve(
        rt: &Runtime,
        rest: &str,
        unknown: StatusCode,
    ) -> Result<LimitKey, (StatusCode, serde_json::Value)> {
        let Some((limit, key)) = rest.split_once('/') else {
            return Err((
                StatusCode::NOT_FOUND,
                serde_json::json!({"error": "not_found"}),
            ));
        };
        let (Some(limit), Some(display)) = (percent_decode(limit), percent_decode(key)) else {
            return Err((
                StatusCode::BAD_REQUEST,
                serde_json::json!({"error": "bad_key", "message": "invalid percent-encoding"}),
            ));
        };
        let Some(policy) = rt.policies.get(&limit).cloned() else {
            return Err((
                unknown,
                serde_json::json!({"error": "unknown_limit", "limit": limit, "message": format!("no limit named \"{limit}\"")}),
            ));
        };
        let routes = routes_counted(rt, &policy);
        let domain = key::KeyDomain {
            on_missing: policy.on_missing,
            routes: &routes,
        };
        let store_key = match key::store_key_of_display(
            &policy.namespace,
            &policy.sources,
            &domain,
            &display,
        ) {
            Ok(store_key) => store_key,
            Err(why) => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    serde_json::json!({"error": "bad_key", "message": format!("no request can have this key: {why}")}),
                ))
            }
        };
        Ok(LimitKey {
            limit,
            display,
            policy,
            store_key,
        })
    }
}

/// The names of the routes whose requests `policy` counts: those that list
/// it, or every route for `consumers.failure_limit` (charged on any route).
fn routes_counted<'a>(rt: &'a Runtime, policy: &Arc<crate::limit::policy::Policy>) -> Vec<&'a str> {
    let everywhere = rt
        .failure_limit
        .as_ref()
        .is_some_and(|f| Arc::ptr_eq(f, policy));
    rt.routes
        .iter()
        .filter(|r| everywhere || r.limits.iter().any(|l| Arc::ptr_eq(l, policy)))
        .map(|r| &*r.name)
        .collect()
}

/// 503 for a store that could not answer.
fn store_unavailable(error: &tollgate_limit::StoreError) -> Response<Body> {
    json(
        StatusCode::SERVICE_UNAVAILABLE,
        serde_json::json!({"error": "limiter_unavailable", "message": error.to_string()}),
    )
}

/// `GET` / `DELETE /limits/{limit}/{key}`: one (limit, client)'s state, or
/// reset it (and lift any lockout) on every instance.
async fn limit_state(method: &Method, rest: &str, admin: &Admin) -> Response<Body> {
    let rt = admin.gateway.shared.runtime.load_full();
    let LimitKey {
        limit,
        display,
        policy,
        store_key,
    } = match LimitKey::resolve(&rt, rest, StatusCode::NOT_FOUND) {
        Ok(found) => found,
        Err((status, body)) => return json(status, body),
    };
    if method == Method::DELETE {
        let reset = rt.limiter.reset(&store_key).await;
        admin.dashboard.forget_lockouts().await;
        return match reset {
            Ok(()) => json(
                StatusCode::OK,
                serde_json::json!({"limit": limit, "key": display, "reset": true}),
            ),
            Err(error) => store_unavailable(&error),
        };
    }
    let now = rt.limiter.now();
    let mut params = policy.own_params(now);
    if policy.per_key_in_store() {
        match rt.limiter.quota(&store_key).await {
            Ok(quota) => params = params.under(quota.as_ref()),
            Err(error) => return store_unavailable(&error),
        }
    }
    let check = Check {
        name: policy.name.clone(),
        key: store_key,
        params: params.clone(),
        cost: 1,
        lockout: policy.lockout,
        shadow: policy.shadow,
        lease: 0,
        quota: false,
        leasing: None,
    };
    match rt.limiter.inspect(&check).await {
        Ok((algo, lock)) => {
            let state = algo.unwrap_or_else(|| params.fresh());
            // A request too large to ever pass changes nothing and reports
            // the state as it is: what is left, and when it is whole again.
            let peek = params.check(&state, now, PEEK_COST, 0);
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
        Err(error) => store_unavailable(&error),
    }
}

/// The largest probe `POST /probe` reads: room for the body of an LLM
/// request it carries.
const PROBE_MAX_BYTES: usize = 8 << 20;

/// `POST /probe` (docs/operations.md): the decision a request would get
/// now, consuming nothing ([`crate::probe`]); `peer` is the client when the
/// probe names none. 400 for a body that is not a probe, 503 when the
/// store cannot answer.
async fn probe(req: Request<Incoming>, gateway: &Gateway, peer: IpAddr) -> Response<Body> {
    let bad = |message: String| {
        json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "bad_probe", "message": message}),
        )
    };
    let body = match Limited::new(req.into_body(), PROBE_MAX_BYTES)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(error) => return bad(format!("the body could not be read: {error}")),
    };
    // An object: serde would take a probe's fields from an array too.
    let asked = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(v) if v.is_object() => serde_json::from_value::<crate::probe::Probe>(v),
        Ok(_) => return bad("not a probe: expected a JSON object".to_owned()),
        Err(error) => Err(error),
    };
    let asked = match asked {
        Ok(asked) => asked,
        Err(error) => return bad(format!("not a probe: {error}")),
    };
    let rt = gateway.shared.runtime.load_full();
    match crate::probe::probe(&rt, &asked, peer).await {
        Ok(answer) => json(StatusCode::OK, answer),
        Err(crate::probe::ProbeError::Bad(message)) => bad(message),
        Err(crate::probe::ProbeError::Store(error)) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"error": "limiter_unavailable", "message": error.to_string()}),
        ),
    }
}

/// The cost of the admin API's read-only look at a limit: more than any
/// capacity (`algorithm::MAX_COUNT`), so it is always rejected and stores
/// nothing.
const PEEK_COST: u64 = tollgate_limit::algorithm::MAX_COUNT + 1;

/// `GET /lockouts`: the clients locked out now, per limit, the longest
/// remaining first. `?limit=NAME` keeps one limit's, `?max=N` the first N
/// (`count` is still every match).
async fn lockouts(admin: &Admin, query: &Query) -> Response<Body> {
    let filter = dashboard::LockoutFilter {
        limit: query.get("limit").map(str::to_owned),
        key: None,
        max: query.number("max").unwrap_or(usize::MAX),
    };
    match admin
        .dashboard
        .lockouts(&admin.gateway, &filter, false)
        .await
    {
        Ok(view) => {
            let mut by_limit: std::collections::BTreeMap<&str, Vec<serde_json::Value>> =
                Default::default();
            for client in &view.shown {
                by_limit
                    .entry(&client.limit)
                    .or_default()
                    .push(serde_json::json!({
                        "key": client.key,
                        "remaining": secs_ceil(client.remaining),
                    }));
            }
            json(
                StatusCode::OK,
                serde_json::json!({
                    "count": view.matching,
                    "truncated": view.shown.len() < view.matching,
                    "lockouts": by_limit,
                }),
            )
        }
        Err(error) => store_unavailable(&error),
    }
}

/// Every target of `rt` as `(upstream, target, up)`, for the
/// `tollgate_upstream_healthy` gauge.
fn target_health(rt: &Runtime) -> Vec<(Arc<str>, Arc<str>, bool)> {
    let now = health::now_ms();
    rt.upstreams
        .values()
        .flat_map(|pool| {
            pool.targets
                .iter()
                .map(|t| (pool.name.clone(), t.label.clone(), t.health.is_up(now)))
        })
        .collect()
}

/// Clients `GET /top` lists per limit.
const TOP_SHOWN: usize = 10;

/// `GET /top`'s body (and the dashboard's `top`): per limit, the clients
/// it rejected most in the last ten minutes.
fn top(metrics: &crate::metrics::Metrics) -> serde_json::Value {
    serde_json::json!({ "limits": metrics.top.top(TOP_SHOWN) })
}

/// `GET /consumers` (docs/operations.md): every configured consumer's name,
/// tenant, plan, attributes and credential kinds, never a key or a digest;
/// and which credential kinds the gateway verifies.
pub fn consumers(rt: &Runtime) -> serde_json::Value {
    let Some(auth) = rt.auth.as_deref() else {
        return serde_json::json!({"consumers": [], "credentials": []});
    };
    let c = &auth.config;
    let kinds: Vec<&str> = c.kinds().into_iter().map(|k| k.name()).collect();
    serde_json::json!({
        "consumers": auth.registry.listing(c),
        "credentials": kinds,
    })
}

/// `GET /upstreams` (and the dashboard's `upstreams`): each upstream of
/// `rt` in config order, its health settings, and its targets with their
/// health and requests in flight.
pub fn upstreams(rt: &Runtime) -> serde_json::Value {
    let now = health::now_ms();
    let time = |at: u64| humantime::format_rfc3339_millis(health::wall_clock(at)).to_string();
    let list: Vec<serde_json::Value> = rt
        .config
        .upstreams
        .iter()
        .filter_map(|c| rt.upstreams.get(&c.name))
        .map(|pool| {
            let checks = &pool.config.health;
            let targets: Vec<serde_json::Value> = pool
                .targets
                .iter()
                .zip(&pool.config.targets)
                .map(|(t, config)| {
                    let v = t.health.view(now);
                    serde_json::json!({
                        "url": &*t.label,
                        "weight": config.weight,
                        "healthy": v.up,
                        "state": if v.up { "up" } else { "down" },
                        "why": v.why,
                        "since": time(v.since),
                        "in_flight": t.in_flight.load(std::sync::atomic::Ordering::Relaxed),
                        "passive": {
                            "failures": v.failures,
                            "ejections": v.ejections,
                            "ejected_until": v.ejected_until.map(time),
                        },
                        "active": {
                            "successes": v.probe_successes,
                            "failures": v.probe_failures,
                            "probes": v.probes,
                            "last_error": v.last_error,
                        },
                    })
                })
                .collect();
            serde_json::json!({
                "name": &*pool.name,
                "healthy": targets.iter().filter(|t| t["healthy"] == true).count(),
                "passive": checks.passive.as_ref().map(|p| serde_json::json!({
                    "failures": p.failures,
                    "eject": format_duration(p.eject),
                })),
                "active": checks.active.as_ref().map(|a| serde_json::json!({
                    "path": a.path.as_str(),
                    "interval": format_duration(a.interval),
                    "timeout": format_duration(a.timeout),
                    "healthy": a.healthy,
                    "unhealthy": a.unhealthy,
                })),
                "targets": targets,
            })
        })
        .collect();
    serde_json::Value::Array(list)
}

fn rfc3339(us: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(us);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Decode `%XX` escapes (the admin `{key}` is percent-encoded in the URL);
/// `None` when the result is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(std::borrow::Cow::into_owned)
}

/// What a request's credentials say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Auth {
    /// It carries the token, or none is configured.
    Granted,
    /// No token, or not the right one: 401.
    Denied,
    /// Several `Authorization` fields: which one counts is anyone's guess
    /// (a proxy in front may read another than the gateway), so 400.
    Ambiguous,
}

/// Whether the request carries the admin token (or none is configured):
/// as a bearer header, or as `query_token` where the caller allows one.
fn authorize(req: &Request<Incoming>, gateway: &Gateway, query_token: Option<&str>) -> Auth {
    let rt = gateway.shared.runtime.load();
    let Some(token) = rt.config.admin.token.as_deref() else {
        return Auth::Granted;
    };
    check_credentials(req.headers(), token.as_bytes(), query_token)
}

/// [`authorize`] on the request's `headers`, against `token`.
fn check_credentials(headers: &http::HeaderMap, token: &[u8], query_token: Option<&str>) -> Auth {
    let mut fields = headers.get_all(header::AUTHORIZATION).iter();
    let field = fields.next();
    if fields.next().is_some() {
        return Auth::Ambiguous;
    }
    let presented = match (field, query_token) {
        (Some(field), _) => bearer_token(field.as_bytes()),
        (None, Some(q)) => Some(q.as_bytes()),
        (None, None) => None,
    };
    match presented {
        Some(p) if bool::from(p.ct_eq(token)) => Auth::Granted,
        _ => Auth::Denied,
    }
}

/// The credentials of a `Bearer` authorization (RFC 9110 §11.4, RFC 6750
/// §2.1): the scheme name in any case, one or more spaces, the token.
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer";
    let (scheme, rest) = value.split_at_checked(SCHEME.len())?;
    if !scheme.eq_ignore_ascii_case(SCHEME) || rest.first() != Some(&b' ') {
        return None;
    }
    Some(rest.trim_ascii_start())
}

/// 400: two or more `Authorization` fields.
fn ambiguous_authorization() -> Response<Body> {
    json(
        StatusCode::BAD_REQUEST,
        serde_json::json!({
            "error": "bad_request",
            "message": "several Authorization fields: send exactly one",
        }),
    )
}

/// 401, saying which scheme is wanted.
fn unauthorized() -> Response<Body> {
    let mut response = json(
        StatusCode::UNAUTHORIZED,
        serde_json::json!({"error": "unauthorized"}),
    );
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"tollgate admin\""),
    );
    response
}

/// 405 with the methods the endpoint takes.
fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut response = json(
        StatusCode::METHOD_NOT_ALLOWED,
        serde_json::json!({"error": "method_not_allowed"}),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

/// A request's query string, form-decoded (`+` is a space).
#[derive(Debug, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    /// Parse `a=1&b=two`.
    pub fn parse(query: Option<&str>) -> Query {
        let pairs = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        Query(pairs)
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of `name` as a number, if it is one.
    pub fn number<T: std::str::FromStr>(&self, name: &str) -> Option<T> {
        self.get(name)?.parse().ok()
    }
}

/// A JSON response (a struct's fields in their order).
fn json(status: StatusCode, value: impl serde::Serialize) -> Response<Body> {
    let text = serde_json::to_string(&value).unwrap_or_default();
    let mut response = Response::new(body::full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::{bearer_token, check_credentials, Auth, Query};
    use http::{header::AUTHORIZATION, HeaderMap, HeaderValue};

    #[test]
    fn bearer_scheme_in_any_case() {
        for ok in ["Bearer t", "bearer t", "BEARER t", "bEaReR   t"] {
            assert_eq!(bearer_token(ok.as_bytes()), Some(&b"t"[..]), "{ok:?}");
        }
        for bad in ["Bearert", "Bearer", "Basic t", "Bearer\tt", "Bear t", ""] {
            assert_eq!(bearer_token(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn one_authorization_field_decides() {
        let with = |values: &[&'static str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(AUTHORIZATION, HeaderValue::from_static(v));
            }
            h
        };
        let token = b"s3cret";
        let check = |values: &[&'static str], query| check_credentials(&with(values), token, query);
        assert_eq!(check(&["bearer s3cret"], None), Auth::Granted);
        assert_eq!(check(&["Bearer s3cre"], None), Auth::Denied);
        assert_eq!(check(&[], None), Auth::Denied);
        assert_eq!(check(&[], Some("s3cret")), Auth::Granted);
        // A header, when there is one, decides over the query.
        assert_eq!(check(&["Bearer x"], Some("s3cret")), Auth::Denied);
        for two in [
            ["Bearer s3cret", "Bearer s3cret"],
            ["Bearer s3cret", "Bearer x"],
            ["Bearer x", "Bearer s3cret"],
        ] {
            assert_eq!(check(&two, None), Auth::Ambiguous, "{two:?}");
            assert_eq!(check(&two, Some("s3cret")), Auth::Ambiguous, "{two:?}");
        }
    }

    #[test]
    fn query_strings() {
        let q = Query::parse(Some("token=a%2Bb+c&max=20&&flag&max=3"));
        assert_eq!(q.get("token"), Some("a+b c"));
        assert_eq!(q.number::<usize>("max"), Some(20));
        assert_eq!(q.get("flag"), Some(""));
        assert_eq!(q.number::<usize>("token"), None);
        assert_eq!(Query::parse(None).get("x"), None);
    }
}
