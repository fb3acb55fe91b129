//! Where limit state lives: [`memory`] (one process; also the `on_error:
//! local` fallback) and [`redis`] (shared by every instance: one server,
//! Sentinel, or Redis Cluster), and the configuration that picks one.

use std::time::Duration;

pub mod memory;
pub mod redis;

/// Where state lives and what a store that cannot answer decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The backend.
    pub backend: StoreBackend,
    /// Every Redis key starts with `"<prefix>:"`; non-empty, no whitespace.
    pub prefix: String,
    /// Deadline of one store call (greater than zero).
    pub timeout: Duration,
    /// What a failed or late store call decides.
    pub on_error: OnError,
    /// Whose clock limits use.
    pub clock: TimeSource,
    /// Certificates for `rediss://` (`None`: the system's roots, no client
    /// certificate).
    pub tls: Option<StoreTls>,
}

impl StoreConfig {
    /// The memory store, with the defaults of the gateway's `store:`.
    pub fn memory() -> StoreConfig {
        StoreConfig::with_backend(StoreBackend::Memory)
    }

    /// `backend` with the defaults of the gateway's `store:`: prefix
    /// `tollgate`, a 50 ms timeout, `on_error: local`, Redis's clock, no
    /// TLS settings.
    pub fn with_backend(backend: StoreBackend) -> StoreConfig {
        StoreConfig {
            backend,
            prefix: "tollgate".to_owned(),
            timeout: Duration::from_millis(50),
            on_error: OnError::Local,
            clock: TimeSource::Store,
            tls: None,
        }
    }
}

/// Certificates for `rediss://` URLs, as PEM bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreTls {
    /// The CA certificates trusted instead of the system's roots.
    pub ca: Option<Vec<u8>>,
    /// A client certificate chain and its key, for servers that require
    /// one (`tls-auth-clients yes`).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
    /// The name the server's certificate is verified against (and sent as
    /// SNI) instead of the URL's host. `Redis` and `Sentinel` only.
    pub server_name: Option<String>,
}

/// Where limit state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreBackend {
    /// In-process, per instance.
    Memory,
    /// One Redis server.
    Redis {
        /// `redis://` or `rediss://` URL, credentials allowed.
        url: String,
    },
    /// A Redis master found (and followed through failovers) by Sentinel.
    Sentinel {
        /// The sentinels' URLs (`redis://` or `rediss://`; credentials, if
        /// any, are the sentinels' own).
        sentinels: Vec<String>,
        /// The monitored service.
        master_name: String,
        /// How to reach the master once found: scheme, credentials and
        /// database (its host is `master_name`). `None`: the first
        /// sentinel URL's scheme, no credentials, database 0.
        master: Option<String>,
    },
    /// Redis Cluster (or Valkey cluster).
    Cluster {
        /// Seed nodes: any reachable one gives the topology.
        seeds: Vec<String>,
    },
}

impl StoreBackend {
    /// The backend's name in the gateway's config (`store.backend`).
    pub fn name(&self) -> &'static str {
        match self {
            StoreBackend::Memory => "memory",
            StoreBackend::Redis { .. } => "redis",
            StoreBackend::Sentinel { .. } => "redis_sentinel",
            StoreBackend::Cluster { .. } => "redis_cluster",
        }
    }
}

/// What a store call that fails or times out decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Decide with the per-instance memory store.
    Local,
    /// Let the request pass.
    Allow,
    /// Refuse it ([`Decision::Unavailable`](crate::Decision::Unavailable)).
    Deny,
}

/// Whose clock the limits read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeSource {
    /// Redis `TIME`, inside the scripts, so instances with skewed clocks
    /// agree.
    Store,
    /// This process's clock (the limiter's [`Clock`](crate::Clock)).
    Local,
}
