//! The circuit breaker in front of Redis (docs/scaling-out.md): after
//! repeated failures the gateway stops calling the store for a short,
//! growing back-off and probes it again.
//!
//! ```text
//! closed --TRIP_AFTER consecutive failures--> open (back-off MIN_BACKOFF)
//! open   --back-off over--> one probe is let through, the others fail fast
//! probe ok --> closed;  probe failed --> open, back-off doubled (<= MAX_BACKOFF)
//! open   --a fresh connection swapped in--> the next call probes at once
//! ```

use std::time::{Duration, Instant};

/// Consecutive failures that open the breaker.
pub(crate) const TRIP_AFTER: u32 = 3;
/// The first back-off.
pub(crate) const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// The longest back-off.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The breaker's state; the store keeps it behind a mutex.
#[derive(Debug)]
pub(crate) struct Breaker {
    /// Consecutive failed calls.
    failures: u32,
    /// While open: when the next probe may go.
    open_until: Option<Instant>,
    /// The current back-off.
    backoff: Duration,
    /// A probe is in flight: everything else fails fast until it ends.
    probing: bool,
}

/// What [`Breaker::admit`] lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// The breaker is closed: a normal call.
    Call,
    /// The breaker is open and this call is the one probe.
    Probe,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            failures: 0,
            open_until: None,
            backoff: MIN_BACKOFF,
            probing: false,
        }
    }
}

impl Breaker {
    /// Whether a call may go at `now`; `None`: fail fast.
    pub(crate) fn admit(&mut self, now: Instant) -> Option<Admission> {
        match self.open_until {
            None => Some(Admission::Call),
            Some(t) if now < t || self.probing => None,
            Some(_) => {
                self.probing = true;
                Some(Admission::Probe)
            }
        }
    }

    /// Whether calls go through (the breaker is closed).
    pub(crate) fn is_closed(&self) -> bool {
        self.open_until.is_none()
    }

    /// A call got an answer from Redis: close.
    pub(crate) fn success(&mut self) {
        *self = Breaker::default();
    }

    /// A fresh connection replaced the one that failed (a failover was
    /// followed): while open, the next call may probe at once instead of
    /// waiting out the back-off, which may have grown to seconds.
    pub(crate) fn reconnected(&mut self, now: Instant) {
        if let Some(t) = &mut self.open_until {
            *t = (*t).min(now);
        }
    }

    /// A call failed at `now` (an error reaching Redis, or its deadline).
    /// Returns true if this (re)opened the breaker.
    pub(crate) fn failure(&mut self, now: Instant, admission: Admission) -> bool {
        self.failures = self.failures.saturating_add(1);
        match admission {
            Admission::Probe => {
                self.probing = false;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                self.open_until = Some(now + self.backoff);
                true
            }
            // A call admitted before the breaker opened changes nothing more.
            Admission::Call if self.open_until.is_some() => false,
            Admission::Call if self.failures >= TRIP_AFTER => {
                self.backoff = MIN_BACKOFF;
                self.open_until = Some(now + self.backoff);
                true
            }
            Admission::Call => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_repeated_failures_and_probes_with_growing_backoff() {
        let mut b = Breaker::default();
        let t = Instant::now();
        for _ in 0..TRIP_AFTER - 1 {
            assert_eq!(b.admit(t), Some(Admission::Call));
            assert!(!b.failure(t, Admission::Call));
        }
        assert!(b.failure(t, Admission::Call));
        assert!(!b.is_closed());
        assert_eq!(b.admit(t + Duration::from_millis(99)), None);
        let t1 = t + MIN_BACKOFF;
        assert_eq!(b.admit(t1), Some(Admission::Probe));
        // One probe at a time.
        assert_eq!(b.admit(t1), None);
        assert!(b.failure(t1, Admission::Probe));
        assert_eq!(b.admit(t1 + MIN_BACKOFF), None);
        let t2 = t1 + 2 * MIN_BACKOFF;
        assert_eq!(b.admit(t2), Some(Admission::Probe));
        b.success();
        assert!(b.is_closed());
        assert_eq!(b.admit(t2), Some(Admission::Call));
    }

    #[test]
    fn a_fresh_connection_lets_a_probe_go_at_once() {
        let mut b = Breaker::default();
        let t = Instant::now();
        for _ in 0..TRIP_AFTER {
            b.failure(t, Admission::Call);
        }
        let t1 = t + MIN_BACKOFF;
        assert_eq!(b.admit(t1), Some(Admission::Probe));
        b.failure(t1, Admission::Probe);
        assert_eq!(b.admit(t1 + MIN_BACKOFF), None, "backing off");
        b.reconnected(t1 + MIN_BACKOFF);
        assert_eq!(b.admit(t1 + MIN_BACKOFF), Some(Admission::Probe));
        assert_eq!(b.admit(t1 + MIN_BACKOFF), None, "one probe at a time");
        // Closed, it stays closed.
        b.success();
        b.reconnected(t1);
        assert!(b.is_closed());
    }

    #[test]
    fn backoff_is_capped() {
        let mut b = Breaker::default();
        let mut t = Instant::now();
        for _ in 0..TRIP_AFTER {
            b.failure(t, Admission::Call);
        }
        for _ in 0..20 {
            t += MAX_BACKOFF;
            assert_eq!(b.admit(t), Some(Admission::Probe));
            b.failure(t, Admission::Probe);
        }
        assert_eq!(b.backoff, MAX_BACKOFF);
    }

    #[test]
    fn success_resets_the_count() {
        let mut b = Breaker::default();
        let t = Instant::now();
        b.failure(t, Admission::Call);
        b.failure(t, Admission::Call);
        b.success();
        b.failure(t, Admission::Call);
        assert!(b.is_closed());
    }
}
