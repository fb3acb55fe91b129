//! The process-wide state every connection and the admin API share.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::metrics::Metrics;
use crate::runtime::Runtime;

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
}

impl Shared {
    /// Shared state around the first runtime.
    pub fn new(runtime: Runtime) -> Arc<Shared> {
        let shared = Arc::new(Shared {
            runtime: ArcSwap::from_pointee(runtime),
            metrics: Metrics::new(),
            draining: AtomicBool::new(false),
            last_error: Mutex::new(None),
        });
        shared
            .metrics
            .generation
            .set(shared.runtime.load().generation as i64);
        shared
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

/// What a connection's watchdog needs to know to enforce the header-read
/// and idle timeouts: requests in flight, and when the last one ended.
#[derive(Debug, Default)]
pub struct Activity {
    in_flight: AtomicUsize,
    requests: AtomicU64,
    /// Milliseconds since the connection started, when the last response ended.
    last_end_ms: AtomicU64,
}

impl Activity {
    /// A request head arrived; returns its number on the connection (1-based).
    pub fn begin(&self) -> u64 {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A response ended (sent or abandoned) at `now_ms` since the connection started.
    pub fn end(&self, now_ms: u64) {
        self.last_end_ms.store(now_ms, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// (requests in flight, requests seen, when the last one ended).
    pub fn snapshot(&self) -> (usize, u64, u64) {
        (
            self.in_flight.load(Ordering::Relaxed),
            self.requests.load(Ordering::Relaxed),
            self.last_end_ms.load(Ordering::Relaxed),
        )
    }
}
