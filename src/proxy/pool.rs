//! An upstream pool: its targets and their health ([`Health`]), the
//! balancer, one pooled keep-alive client ([`Client`]) shared by every
//! request to the pool, and its active health checker (`probe_loop`:
//! one task, holding only a `Weak` to the pool between rounds, so it ends
//! with the pool, or as soon as a reload retires the pool).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use http::uri::{Authority, Scheme};
use http::{header, HeaderValue, Request, Uri, Version};
use http_body_util::BodyExt;

use super::balance::Balancer;
use super::client::{Client, Dial};
use super::health::{self, Change, Health};
use crate::body::{self, UpstreamBody};
use crate::config::units::format_duration;
use crate::config::{ActiveHealth, UpstreamConfig};
use crate::metrics::UpstreamMetrics;
use crate::tls::{self, TlsError};

/// How long an idle pooled upstream connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(90);

/// The `User-Agent` of probes.
const PROBE_AGENT: &str = concat!("tollgate/", env!("CARGO_PKG_VERSION"), " health-check");

/// One upstream server of a pool.
#[derive(Debug)]
pub struct Target {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// `host:port` to connect to.
    pub authority: Authority,
    /// `authority` as a Host value (`preserve_host: false`).
    pub host: HeaderValue,
    /// `scheme://authority`, for logs and metrics.
    pub label: Arc<str>,
    /// Requests to this target whose response has not finished.
    pub in_flight: AtomicUsize,
    /// Its health, shared with the pools of earlier generations that had
    /// this target.
    pub health: Arc<Health>,
}

/// A compiled upstream: targets, balancer and client. Reused across reloads
/// while its config is unchanged, so pooled connections survive a reload;
/// rebuilt otherwise, taking over the health of the targets it keeps.
pub struct UpstreamPool {
    /// The upstream's name (metrics label).
    pub name: Arc<str>,
    /// The config this pool was built from.
    pub config: UpstreamConfig,
    /// The targets, in config order.
    pub targets: Vec<Target>,
    balancer: Balancer,
    /// The pooled client, its target indices those of `targets`; one per
    /// pool because connect timeout and HTTP/2 differ per upstream.
    pub client: Client,
    /// Whether its active health checker has been started.
    probing: AtomicBool,
    /// Set when a reload put another pool in its place: its checker stops
    /// and records nothing more.
    retired: AtomicBool,
    /// Its metric handles (one process-wide registry: a pool serves one).
    pub metrics: UpstreamMetrics,
}

/// Why an upstream pool could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// A target that cannot be used.
    #[error("upstreams.{upstream}.targets[{index}]: {message}")]
    Target {
        /// The upstream.
        upstream: String,
        /// The target's position.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// The upstream's TLS material could not be loaded.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

impl UpstreamPool {
    /// Build the pool for `config`; each target whose URL `previous` (the
    /// same upstream's pool in the generation before) has keeps its health.
    pub fn new(
        config: &UpstreamConfig,
        previous: Option<&UpstreamPool>,
    ) -> Result<Self, PoolError> {
        let now = health::now_ms();
        let mut targets = Vec::with_capacity(config.targets.len());
        for (index, t) in config.targets.iter().enumerate() {
            let err = |message: &str| PoolError::Target {
                upstream: config.name.clone(),
                index,
                message: message.to_string(),
            };
            let scheme = t
                .url
                .scheme()
                .cloned()
                .ok_or_else(|| err("missing scheme"))?;
            let authority = t
                .url
                .authority()
                .cloned()
                .ok_or_else(|| err("missing host"))?;
            let host = HeaderValue::from_str(authority.as_str())
                .map_err(|_| err("the host is not a valid Host value"))?;
            let label: Arc<str> = format!("{scheme}://{authority}").into();
            let health = previous
                .and_then(|p| {
                    p.targets
                        .iter()
                        .find(|t| t.label.eq_ignore_ascii_case(&label))
                })
                .map_or_else(|| Arc::new(Health::new(now)), |t| t.health.clone());
            targets.push(Target {
                host,
                label,
                scheme,
                authority,
                in_flight: AtomicUsize::new(0),
                health,
            });
        }
        // One TLS client config for the upstream's https:// targets.
        let tls = if targets.iter().any(|t| t.scheme == Scheme::HTTPS) {
            Some(tls::client_config(
                &config.name,
                config.tls.as_ref(),
                config.http2,
            )?)
        } else {
            None
        };
        let dials = targets.iter().map(|t| {
            let https = t.scheme == Scheme::HTTPS;
            let tls = tls
                .clone()
                .filter(|_| https)
                .zip(tls::server_name(t.authority.host(), config.tls.as_ref()));
            Dial {
                authority: &t.authority,
                default_port: if https { 443 } else { 80 },
                tls,
            }
        });
        let client = Client::new(dials, config.http2, config.connect_timeout, POOL_IDLE);
        let weights = config.targets.iter().map(|t| t.weight).collect();
        Ok(UpstreamPool {
            name: config.name.as_str().into(),
            config: config.clone(),
            targets,
            balancer: Balancer::new(config.balance, weights),
            client,
            probing: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            metrics: UpstreamMetrics::new(config.targets.len()),
        })
    }

    /// Pick a target that is up and not in `tried`, for a client whose key
    /// hashes to `key`. With every untried target down, none.
    pub fn pick(&self, key: u64, tried: &[usize]) -> Option<usize> {
        self.balancer.pick(
            key,
            |t| !tried.contains(&t) && self.targets[t].health.is_up_when(health::now_ms),
            |t| self.targets[t].in_flight.load(Ordering::Relaxed),
        )
    }

    /// Record the outcome of a request to `target` for passive health: a
    /// success resets its failure count; `failures` in a row eject it for
    /// `eject`.
    pub fn record(&self, target: usize, ok: bool) {
        let Some(passive) = &self.config.health.passive else {
            return;
        };
        let t = &self.targets[target];
        if t.health.record(ok, passive, health::now_ms) == Some(Change::Ejected) {
            tracing::warn!(upstream = %self.name, target = %t.label, eject_ms = passive.eject.as_millis() as u64, "upstream target ejected (passive health)");
        }
    }

    /// Put the pool in force (at start-up, or a reload that made or kept
    /// it): its targets forget what checks it does not run said, and its
    /// active checker starts, once.
    pub fn start(self: &Arc<Self>) {
        let checks = &self.config.health;
        let now = health::now_ms();
        for t in &self.targets {
            t.health
                .forget(checks.passive.is_none(), checks.active.is_none(), now);
        }
        if let Some(active) = &checks.active {
            if !self.probing.swap(true, Ordering::Relaxed) {
                tokio::spawn(probe_loop(Arc::downgrade(self), active.clone()));
            }
        }
    }

    /// A reload put another pool in this one's place: stop its checker
    /// (the new pool probes the targets they share).
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }
}

/// Counts a request in its target's `in_flight` until dropped.
pub struct InFlight {
    pool: Arc<UpstreamPool>,
    target: usize,
}

impl InFlight {
    /// Count one request on `target` of `pool`.
    pub fn new(pool: Arc<UpstreamPool>, target: usize) -> Self {
        pool.targets[target]
            .in_flight
            .fetch_add(1, Ordering::Relaxed);
        InFlight { pool, target }
    }

    /// The target's label.
    pub fn label(&self) -> &Arc<str> {
        &self.pool.targets[self.target].label
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.pool.targets[self.target]
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// The active checker of `pool`: every `active.interval` (the first round
/// at once) probe each target, concurrently, and record the outcomes. Ends
/// when the pool is dropped or retired.
async fn probe_loop(pool: Weak<UpstreamPool>, active: ActiveHealth) {
    let mut tick = tokio::time::interval(active.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        if pool.retired.load(Ordering::Relaxed) {
            return;
        }
        let probes = (0..pool.targets.len()).map(|target| probe(&pool, target, &active));
        let outcomes = futures_util::future::join_all(probes).await;
        let now = health::now_ms();
        for (target, outcome) in pool.targets.iter().zip(outcomes) {
            let error = outcome.as_ref().err().cloned();
            match target.health.probe(outcome, &active, now, &pool.retired) {
                Some(Change::ProbedDown) => {
                    tracing::warn!(upstream = %pool.name, target = %target.label, error = error.as_deref().unwrap_or_default(), "upstream target down (active health)");
                }
                Some(Change::ProbedUp) => {
                    tracing::info!(upstream = %pool.name, target = %target.label, "upstream target up (active health)");
                }
                _ => {}
            }
        }
    }
}

/// One probe: `GET <path>` to `target` through the pool's own client. `Ok`
/// for a 2xx response head within the timeout; the body is then read (until
/// the timeout) so the connection can serve again.
async fn probe(pool: &UpstreamPool, target: usize, active: &ActiveHealth) -> Result<(), String> {
    let t = &pool.targets[target];
    let (uri, version) = if pool.config.http2 {
        let uri = Uri::builder()
            .scheme(t.scheme.clone())
            .authority(t.authority.clone())
            .path_and_query(active.path.clone())
            .build()
            .map_err(|e| e.to_string())?;
        (uri, Version::HTTP_2)
    } else {
        (Uri::from(active.path.clone()), Version::HTTP_11)
    };
    let mut request = Request::new(UpstreamBody::new(body::empty()).0);
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    let headers = request.headers_mut();
    headers.insert(header::HOST, t.host.clone());
    headers.insert(header::USER_AGENT, HeaderValue::from_static(PROBE_AGENT));
    let deadline = tokio::time::Instant::now() + active.timeout;
    let response = tokio::time::timeout_at(deadline, pool.client.send(target, request))
        .await
        .map_err(|_| format!("no answer within {}", format_duration(active.timeout)))?
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let mut body = response.into_body();
    let _ = tokio::time::timeout_at(deadline, async {
        while let Some(Ok(_)) = body.frame().await {}
    })
    .await;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("status {}", status.as_u16()))
    }
}
