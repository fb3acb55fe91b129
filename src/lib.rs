//! tollgate: a reverse proxy and API gateway that protects HTTP backends with
//! throttling.
//!
//! A request's whole story is in [`pipeline`]; the modules, in the order a
//! request meets them:
//!
//! - [`server`]: listeners, the accept loop, connection limits and timeouts,
//!   graceful shutdown.
//! - [`route`]: the path normaliser and the route matchers.
//! - [`client_addr`]: who the client is by address (trusted proxies,
//!   `X-Forwarded-For`).
//! - [`auth`]: consumers, clients the gateway has verified (API keys, JWTs,
//!   client certificates).
//! - [`limit`]: which of a route's limits apply to a request, under which
//!   keys, and the rate-limit fields of the answer; the deciding is the
//!   `tollgate_limit` crate's (`crates/limit`: algorithms, deny cache,
//!   memory and Redis stores).
//! - [`cost`]: cost limits' LLM side: a request's estimate and rewrites
//!   (`cap_output`, `stream_usage`), the usage read from its response.
//! - [`proxy`]: upstream pools, balancing, the pooled client, header hygiene.
//! - [`pipeline`]: normalise -> match -> identify -> authenticate -> (limits) -> respond or
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
//! - [`probe`]: the admin API's probes: what the gateway would answer a
//!   request now, each limit's decision with its figures, consuming nothing.
//! - `json_strict` (crate-private): JSON that refuses an object repeating a
//!   member name (JWT headers and claims, `PUT /quotas` bodies).
//! - `fuzzing` (hidden, only with the `fuzzing` feature): the fuzz targets'
//!   bodies and invariants, shared by `fuzz/` and `tests/fuzz_regressions.rs`.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod admin;
pub mod admission;
pub mod app;
pub mod auth;
pub mod body;
pub mod client_addr;
pub mod config;
pub mod cost;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod json_strict;
pub mod limit;
pub mod log;
pub mod meter;
pub mod metrics;
pub mod pipeline;
pub mod probe;
pub mod proxy;
pub mod reload;
pub mod route;
pub mod runtime;
pub mod server;
pub mod shared;
pub mod simulate;
pub mod tls;
pub mod trace;
