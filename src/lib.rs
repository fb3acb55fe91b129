//! tollgate: a reverse proxy and API gateway that protects HTTP backends with
//! throttling.
//!
//! A request's whole story is in [`pipeline`]; the modules, in the order a
//! request meets them:
//!
//! - [`server`]: listeners, the accept loop, connection limits and timeouts,
//!   graceful shutdown.
//! - [`route`]: the path normaliser and the route matchers.
//! - [`identity`]: who the client is (trusted proxies, `X-Forwarded-For`).
//! - [`proxy`]: upstream pools, balancing, the pooled client, header hygiene.
//! - [`pipeline`]: normalise -> match -> identify -> (limits) -> respond or
//!   forward -> access log.
//!
//! Around them:
//!
//! - [`config`]: the YAML schema, `${VAR}` expansion, units, validation into
//!   typed, immutable values with field-path errors.
//! - [`runtime`]: the compiled snapshot of one config generation, held in an
//!   `ArcSwap` and loaded once per request.
//! - [`reload`]: start-up and reload (one code path): parse, build, bind new
//!   listeners, swap.
//! - [`shared`]: the process-wide state (runtime, metrics, draining flag).
//! - [`admin`]: the admin listener (health, readiness, config, reload, limit
//!   state, lockouts) and the dashboard.
//! - [`error`]: the gateway's errors and the one function that turns them into
//!   responses.
//! - [`body`]: the body types the gateway sends and receives.
//! - [`log`]: logging set-up and the JSON access-log line.
//! - [`metrics`]: the Prometheus registry.
//! - [`simulate`]: `tollgate simulate`: replay a request log through the
//!   routes and limits on a virtual clock, and report what would be throttled.
#![forbid(unsafe_code)]

pub mod admin;
pub mod algorithm;
pub mod body;
pub mod config;
pub mod error;
pub mod identity;
pub mod limit;
pub mod log;
pub mod metrics;
pub mod pipeline;
pub mod proxy;
pub mod reload;
pub mod route;
pub mod runtime;
pub mod server;
pub mod shared;
pub mod simulate;

/// `tollgate check`: validate the config at `path` (building the runtime too,
/// so everything a start-up would reject is reported) and describe it: a
/// summary line, then one `warning: ...` line per warning.
pub fn check(path: &std::path::Path) -> Result<String, String> {
    let loaded = config::load(path).map_err(|e| e.to_string())?;
    let c = &loaded.config;
    let summary = format!(
        "{}: ok: {} listener(s), {} route(s), {} upstream(s), {} limit(s), store {}\n",
        path.display(),
        c.server.listen.len() + c.server.tls.as_ref().map_or(0, |t| t.listen.len()),
        c.routes.len(),
        c.upstreams.len(),
        c.limits.len(),
        match &c.store.backend {
            config::StoreBackend::Memory => "memory",
            config::StoreBackend::Redis { .. } => "redis",
            config::StoreBackend::RedisCluster { .. } => "redis_cluster",
        }
    );
    let warnings: String = loaded
        .warnings
        .iter()
        .map(|w| format!("warning: {w}\n"))
        .collect();
    // Building the runtime sets up (but, never driven, does not connect)
    // the store client, which wants a Tokio runtime around it.
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let _entered = tokio.enter();
    runtime::Runtime::build(loaded.config, loaded.sha256, 0, None)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(summary + &warnings)
}
