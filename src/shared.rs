//! The process-wide state every connection and the admin API share.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::metrics::Metrics;
use crate::runtime::Runtime;
use crate::server::{self, ConnSettings, Timeouts};

/// State shared by the listeners, the pipeline, reloads and the admin API.
pub struct Shared {
    /// The config generation in force; each request loads it once.
    pub runtime: ArcSwap<Runtime>,
    /// Every exported metric.
    pub metrics: Metrics,
    /// Set once shutdown has begun: `/readyz` answers 503.
    pub draining: AtomicBool,
    /// The error of the last failed reload, cleared by a successful one.
    pub last_error: Mutex<Option<String>>,
    /// Cost settlements on their way to the store (docs/configuration/cost.md):
    /// shutdown waits for them ([`Shared::finish_settling`]).
    pub settling: tokio_util::task::TaskTracker,
}

impl Shared {
    /// Shared state around the first runtime.
    pub fn new(runtime: Runtime) -> Arc<Shared> {
        let shared = Arc::new(Shared {
            runtime: ArcSwap::from_pointee(runtime),
            metrics: Metrics::new(),
            draining: AtomicBool::new(false),
            last_error: Mutex::new(None),
            settling: tokio_util::task::TaskTracker::new(),
        });
        shared
            .metrics
            .generation
            .set(shared.runtime.load().generation as i64);
        shared.observe_leases(&shared.runtime.load().limiter);
        shared
    }

    /// Count `limiter`'s lease events in `tollgate_leases_total` (once per
    /// limiter: a reload that keeps it keeps its observer).
    pub fn observe_leases(self: &Arc<Self>, limiter: &tollgate_limit::Limiter) {
        let weak = Arc::downgrade(self);
        limiter.on_lease(move |limit, event| {
            if let Some(shared) = weak.upgrade() {
                shared.metrics.lease(limit, event);
            }
        });
    }

    /// Start `runtime`'s span export, if it has one (a kept export is
    /// running already); its counters are this process's.
    pub fn start_telemetry(&self, runtime: &crate::runtime::Runtime) {
        if let Some(telemetry) = &runtime.telemetry {
            telemetry.start(&self.metrics.spans);
        }
    }

    /// Wait, at most `bound`, for the cost settlements still on their way
    /// to the store (those of the requests the shutdown grace cut off
    /// among them); whether they all arrived.
    pub async fn finish_settling(&self, bound: std::time::Duration) -> bool {
        self.settling.close();
        tokio::time::timeout(bound, self.settling.wait())
            .await
            .is_ok()
    }

    /// Whether shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// The last reload error, if the last reload failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// Record the outcome of a reload.
    pub fn set_last_error(&self, error: Option<String>) {
        if let Ok(mut slot) = self.last_error.lock() {
            *slot = error;
        }
    }
}

/// The server's settings are the config generation in force's, loaded per
/// connection: a reload applies to the connections accepted after it.
impl server::Settings for Shared {
    fn connection(&self, addr: SocketAddr) -> ConnSettings {
        let runtime = self.runtime.load();
        let s = &runtime.config.server;
        ConnSettings {
            tls: runtime.tls_for(addr),
            timeouts: Timeouts {
                header_read: s.header_read_timeout,
                idle: s.idle_timeout,
                send: s.send_timeout,
            },
            max_header_bytes: s.max_header_bytes,
            max_chunk_bytes: s.max_body_bytes.unwrap_or(u64::MAX),
        }
    }

    fn connections_changed(&self, delta: i64) {
        self.metrics.connections.inc_by(delta);
    }
}
