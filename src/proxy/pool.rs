//! An upstream pool: its targets, their passive health, the balancer, and
//! one pooled keep-alive client ([`Client`]) shared by every request to the
//! pool.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::balance::Balancer;
use super::client::{Client, Dial};
use crate::config::UpstreamConfig;
use crate::tls::{self, TlsError};
use http::uri::{Authority, Scheme};
use http::HeaderValue;

/// How long an idle pooled upstream connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(90);

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
    /// Consecutive failures (passive health).
    failures: AtomicU32,
    /// Until when the target is ejected, in milliseconds since the pool's
    /// epoch; 0 when it is not.
    ejected_until: AtomicU64,
}

/// A compiled upstream: targets, balancer and client. Reused across reloads
/// while its config is unchanged, so pooled connections survive a reload.
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
    epoch: Instant,
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
    /// Build the pool for `config`.
    pub fn new(config: &UpstreamConfig) -> Result<Self, PoolError> {
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
            targets.push(Target {
                host,
                label: format!("{scheme}://{authority}").into(),
                scheme,
                authority,
                in_flight: AtomicUsize::new(0),
                failures: AtomicU32::new(0),
                ejected_until: AtomicU64::new(0),
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
            epoch: Instant::now(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Pick a healthy target not in `tried`, for a client whose key hashes to
    /// `key`. With every untried target ejected, none.
    pub fn pick(&self, key: u64, tried: &[usize]) -> Option<usize> {
        let now = self.now_ms();
        self.balancer.pick(
            key,
            |t| !tried.contains(&t) && self.targets[t].ejected_until.load(Ordering::Relaxed) <= now,
            |t| self.targets[t].in_flight.load(Ordering::Relaxed),
        )
    }

    /// Record the outcome of a request to `target` for passive health: a
    /// success resets its failure count; `failures` consecutive failures eject
    /// it for `eject`.
    pub fn record(&self, target: usize, ok: bool) {
        let Some(passive) = &self.config.health.passive else {
            return;
        };
        let t = &self.targets[target];
        if ok {
            if t.failures.load(Ordering::Relaxed) != 0 {
                t.failures.store(0, Ordering::Relaxed);
            }
            return;
        }
        let failures = t.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= passive.failures {
            t.failures.store(0, Ordering::Relaxed);
            let until = self.now_ms() + passive.eject.as_millis() as u64;
            t.ejected_until.store(until, Ordering::Relaxed);
            tracing::warn!(upstream = %self.config.name, target = %t.label, eject_ms = passive.eject.as_millis() as u64, "upstream target ejected");
        }
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
