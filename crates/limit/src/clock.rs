//! Whose time the limiter reads: the wall clock in the gateway, a clock the
//! test drives in unit tests (so lockouts, deny-cache expiry and refills are
//! tested without sleeping).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::Micros;

/// A source of "now", in microseconds since the Unix epoch.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> Micros;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Micros {
        now_micros()
    }
}

/// The wall clock in microseconds since the Unix epoch.
pub fn now_micros() -> Micros {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A clock that only moves when told to.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock showing `now`.
    pub fn new(now: Micros) -> ManualClock {
        ManualClock(AtomicU64::new(now))
    }

    /// Move it forward by `by`.
    pub fn advance(&self, by: Micros) {
        self.0.fetch_add(by, Ordering::Relaxed);
    }

    /// Set it to `now`.
    pub fn set(&self, now: Micros) {
        self.0.store(now, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Micros {
        self.0.load(Ordering::Relaxed)
    }
}
