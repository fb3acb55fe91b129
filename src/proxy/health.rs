//! Target health (docs/protocols.md): passive (consecutive failed requests eject a
//! target for `eject`) and active (a probe of `path` on every target every
//! `interval`; `unhealthy` failed probes in a row take it down, `healthy`
//! passing ones bring it back). A target is up only when neither says it is
//! down; balancing skips the others.
//!
//! [`Health`] is one target's state. It lives in an `Arc` that a pool
//! rebuilt by a reload takes over from the previous one when the upstream's
//! name and the target's URL are unchanged, so a reload forgets nothing.
//! Its time is [`now_ms`], a monotonic clock; every method takes the time as
//! an argument, so the unit tests drive it. The request path reads two
//! atomics to pick a target and one to record a success; the mutex is taken
//! on failures, probes and reads by the admin API.
//!
//! This is the state alone: it knows nothing of pools. What sends the
//! probes is the pool's (`pool.rs`), which records their outcomes here.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crate::config::{ActiveHealth, PassiveHealth};

/// The start of [`now_ms`], on both clocks.
static EPOCH: LazyLock<(Instant, SystemTime)> =
    LazyLock::new(|| (Instant::now(), SystemTime::now()));

/// Milliseconds on the clock health is kept in: monotonic, from the first
/// call in this process.
pub fn now_ms() -> u64 {
    u64::try_from(EPOCH.0.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The wall-clock time of `at` (a [`now_ms`] reading), for the admin API:
/// the wall clock at the epoch plus `at`, so a time reads the same every
/// time it is shown.
pub fn wall_clock(at: u64) -> SystemTime {
    EPOCH.1 + Duration::from_millis(at)
}

/// One target's health.
#[derive(Debug)]
pub struct Health {
    /// Failed requests in a row (passive).
    failures: AtomicU32,
    /// Until when passive health keeps the target out; 0 if never ejected.
    ejected_until: AtomicU64,
    /// Whether active health has taken the target down.
    probed_down: AtomicBool,
    state: Mutex<State>,
}

/// What the admin API shows, and what events need to tell transitions.
#[derive(Debug, Default)]
struct State {
    /// Whether the target was down after the last event, and since when.
    down: bool,
    since: u64,
    /// When active health last brought the target up.
    probed_up_at: u64,
    /// The failures in a row that caused the last ejection.
    ejected_after: u32,
    ejections: u64,
    /// Probes passed and failed in a row (one of them is 0).
    probe_successes: u32,
    probe_failures: u32,
    probes: u64,
    /// What went wrong with the last probe that failed.
    last_error: Option<String>,
}

/// A target's health as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// Whether balancing may pick it.
    pub up: bool,
    /// Why it is down; `None` when up.
    pub why: Option<String>,
    /// Since when it has been up or down ([`now_ms`]).
    pub since: u64,
    /// Failed requests in a row now (passive).
    pub failures: u32,
    /// How many times passive health ejected it.
    pub ejections: u64,
    /// Until when it is ejected, while it is.
    pub ejected_until: Option<u64>,
    /// Probes passed in a row now.
    pub probe_successes: u32,
    /// Probes failed in a row now.
    pub probe_failures: u32,
    /// Probes sent in all.
    pub probes: u64,
    /// What went wrong with the last probe that failed (`status 500`,
    /// `no answer within 1s`, a connect error).
    pub last_error: Option<String>,
}

/// A health transition an event caused, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Passive health ejected the target.
    Ejected,
    /// Active health took the target down.
    ProbedDown,
    /// Active health brought the target back up.
    ProbedUp,
}

impl Health {
    /// A target first seen at `now`: up.
    pub fn new(now: u64) -> Health {
        Health {
            failures: AtomicU32::new(0),
            ejected_until: AtomicU64::new(0),
            probed_down: AtomicBool::new(false),
            state: Mutex::new(State {
                since: now,
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether balancing may pick the target at `now`.
    pub fn is_up(&self, now: u64) -> bool {
        self.is_up_when(|| now)
    }

    /// [`Health::is_up`], reading the clock (`now`) only for a target that
    /// was ejected at some point: most never are, and balancing asks for
    /// every request.
    pub fn is_up_when(&self, now: impl FnOnce() -> u64) -> bool {
        if self.probed_down.load(Ordering::Relaxed) {
            return false;
        }
        match self.ejected_until.load(Ordering::Relaxed) {
            0 => true,
            until => until <= now(),
        }
    }

    /// Bring the recorded state up to `now`: an ejection ends by itself, so
    /// a target recorded down may be up without an event.
    fn settle(&self, s: &mut State, now: u64) {
        if s.down && self.is_up(now) {
            s.down = false;
            s.since = self
                .ejected_until
                .load(Ordering::Relaxed)
                .max(s.probed_up_at);
        }
    }

    /// Record a request's outcome for passive health; `now` is read only on
    /// a failure. A success resets the count; `passive.failures` in a row
    /// eject the target for `passive.eject` (failures of requests still in
    /// flight when it was ejected do not extend the ejection).
    pub fn record(
        &self,
        ok: bool,
        passive: &PassiveHealth,
        now: impl FnOnce() -> u64,
    ) -> Option<Change> {
        if ok {
            if self.failures.load(Ordering::Relaxed) != 0 {
                self.failures.store(0, Ordering::Relaxed);
            }
            return None;
        }
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures < passive.failures {
            return None;
        }
        let mut s = self.lock();
        self.failures.store(0, Ordering::Relaxed);
        let now = now();
        if self.ejected_until.load(Ordering::Relaxed) > now {
            return None;
        }
        self.settle(&mut s, now);
        let until =
            now.saturating_add(u64::try_from(passive.eject.as_millis()).unwrap_or(u64::MAX));
        self.ejected_until.store(until, Ordering::Relaxed);
        s.ejected_after = failures;
        s.ejections += 1;
        if !s.down {
            s.down = true;
            s.since = now;
        }
        Some(Change::Ejected)
    }

    /// Record a probe's outcome at `now`: `Ok` for a 2xx within the
    /// timeout, else what went wrong. Nothing is recorded once `retired` is
    /// set: it is read under the lock [`Health::forget`] takes, so a round
    /// that ends after a reload retired its prober and forgot the check
    /// cannot take the target down again.
    pub fn probe(
        &self,
        outcome: Result<(), String>,
        active: &ActiveHealth,
        now: u64,
        retired: &AtomicBool,
    ) -> Option<Change> {
        let mut s = self.lock();
        if retired.load(Ordering::Relaxed) {
            return None;
        }
        self.settle(&mut s, now);
        s.probes += 1;
        let down = self.probed_down.load(Ordering::Relaxed);
        let change = match outcome {
            Ok(()) => {
                s.probe_failures = 0;
                s.probe_successes = s.probe_successes.saturating_add(1);
                (down && s.probe_successes >= active.healthy).then_some(Change::ProbedUp)
            }
            Err(error) => {
                s.probe_successes = 0;
                s.probe_failures = s.probe_failures.saturating_add(1);
                s.last_error = Some(error);
                (!down && s.probe_failures >= active.unhealthy).then_some(Change::ProbedDown)
            }
        };
        match change {
            Some(Change::ProbedUp) => {
                self.probed_down.store(false, Ordering::Relaxed);
                s.probed_up_at = now;
                self.settle(&mut s, now);
            }
            Some(Change::ProbedDown) => {
                self.probed_down.store(true, Ordering::Relaxed);
                if !s.down {
                    s.down = true;
                    s.since = now;
                }
            }
            _ => {}
        }
        change
    }

    /// Forget, at `now`, what a check the upstream no longer runs said (a
    /// reload removed `passive` or `active`), so nothing keeps the target
    /// down that no event can bring back.
    pub fn forget(&self, passive: bool, active: bool, now: u64) {
        let mut s = self.lock();
        if passive {
            self.failures.store(0, Ordering::Relaxed);
            if self.ejected_until.load(Ordering::Relaxed) > now {
                self.ejected_until.store(now, Ordering::Relaxed);
            }
        }
        if active {
            if self.probed_down.swap(false, Ordering::Relaxed) {
                s.probed_up_at = now;
            }
            s.probe_successes = 0;
            s.probe_failures = 0;
        }
        self.settle(&mut s, now);
    }

    /// The state at `now`, for the admin API.
    pub fn view(&self, now: u64) -> View {
        let mut s = self.lock();
        self.settle(&mut s, now);
        let until = self.ejected_until.load(Ordering::Relaxed);
        let ejected = until > now;
        let probed_down = self.probed_down.load(Ordering::Relaxed);
        let mut why = Vec::new();
        if ejected {
            why.push(format!(
                "passive: {} failed requests in a row",
                s.ejected_after
            ));
        }
        if probed_down {
            why.push(format!(
                "active: {} failed probes in a row (last: {})",
                s.probe_failures,
                s.last_error.as_deref().unwrap_or("?")
            ));
        }
        View {
            up: !(ejected || probed_down),
            why: (!why.is_empty()).then(|| why.join("; ")),
            since: s.since,
            failures: self.failures.load(Ordering::Relaxed),
            ejections: s.ejections,
            ejected_until: ejected.then_some(until),
            probe_successes: s.probe_successes,
            probe_failures: s.probe_failures,
            probes: s.probes,
            last_error: s.last_error.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passive(failures: u32, eject_ms: u64) -> PassiveHealth {
        PassiveHealth {
            failures,
            eject: Duration::from_millis(eject_ms),
        }
    }

    fn active(healthy: u32, unhealthy: u32) -> ActiveHealth {
        ActiveHealth {
            path: http::uri::PathAndQuery::from_static("/healthz"),
            interval: Duration::from_millis(100),
            timeout: Duration::from_millis(50),
            healthy,
            unhealthy,
        }
    }

    /// The `retired` flag of a prober still in force.
    static LIVE: AtomicBool = AtomicBool::new(false);

    fn failed(h: &Health, p: &PassiveHealth, now: u64) -> Option<Change> {
        h.record(false, p, || now)
    }

    #[test]
    fn passive_ejects_after_failures_in_a_row_until_eject_has_passed() {
        let p = passive(3, 1000);
        let h = Health::new(10);
        assert_eq!(failed(&h, &p, 100), None);
        assert_eq!(failed(&h, &p, 110), None);
        // A success resets the count.
        assert_eq!(
            h.record(true, &p, || unreachable!("no clock on success")),
            None
        );
        assert_eq!(failed(&h, &p, 200), None);
        assert_eq!(failed(&h, &p, 210), None);
        assert!(h.is_up(210));
        assert_eq!(failed(&h, &p, 220), Some(Change::Ejected));
        assert!(!h.is_up(220) && !h.is_up(1219));
        let v = h.view(500);
        assert_eq!(
            (v.up, v.since, v.ejected_until, v.ejections),
            (false, 220, Some(1220), 1)
        );
        assert_eq!(
            v.why.as_deref(),
            Some("passive: 3 failed requests in a row")
        );
        // Back by itself once `eject` has passed, up since the ejection ended.
        assert!(h.is_up(1220));
        let v = h.view(5000);
        assert_eq!(
            (v.up, v.since, v.why, v.ejected_until),
            (true, 1220, None, None)
        );
    }

    #[test]
    fn failures_of_requests_still_in_flight_do_not_extend_an_ejection() {
        let p = passive(1, 1000);
        let h = Health::new(0);
        assert_eq!(failed(&h, &p, 100), Some(Change::Ejected));
        assert_eq!(failed(&h, &p, 150), None);
        assert!(h.is_up(1100));
        assert_eq!(h.view(2000).ejections, 1);
        // After it, failures count again.
        assert_eq!(failed(&h, &p, 2000), Some(Change::Ejected));
        assert_eq!(h.view(2000).since, 2000);
    }

    #[test]
    fn active_goes_down_after_unhealthy_and_up_after_healthy_probes() {
        let a = active(2, 3);
        let h = Health::new(0);
        let fail = || Err("status 500".to_owned());
        assert_eq!(h.probe(Ok(()), &a, 100, &LIVE), None);
        assert_eq!(h.probe(fail(), &a, 200, &LIVE), None);
        assert_eq!(h.probe(fail(), &a, 300, &LIVE), None);
        assert!(h.is_up(300));
        assert_eq!(h.probe(fail(), &a, 400, &LIVE), Some(Change::ProbedDown));
        assert!(!h.is_up(400));
        assert_eq!(h.probe(fail(), &a, 500, &LIVE), None);
        let v = h.view(550);
        assert_eq!(
            (v.up, v.since, v.probe_failures, v.probes),
            (false, 400, 4, 5)
        );
        assert_eq!(
            v.why.as_deref(),
            Some("active: 4 failed probes in a row (last: status 500)")
        );
        // One pass is not enough; a failure in between starts again.
        assert_eq!(h.probe(Ok(()), &a, 600, &LIVE), None);
        assert_eq!(h.probe(fail(), &a, 700, &LIVE), None);
        assert_eq!(h.probe(Ok(()), &a, 800, &LIVE), None);
        assert!(!h.is_up(800));
        assert_eq!(h.probe(Ok(()), &a, 900, &LIVE), Some(Change::ProbedUp));
        let v = h.view(950);
        assert_eq!((v.up, v.since, v.why), (true, 900, None));
        assert_eq!(
            v.last_error.as_deref(),
            Some("status 500"),
            "kept after recovery"
        );
    }

    #[test]
    fn down_when_either_says_so_up_when_both_agree() {
        let (p, a) = (passive(1, 1000), active(1, 1));
        let h = Health::new(0);
        assert_eq!(
            h.probe(Err("connect: refused".into()), &a, 100, &LIVE),
            Some(Change::ProbedDown)
        );
        assert_eq!(failed(&h, &p, 200), Some(Change::Ejected));
        let v = h.view(300);
        assert_eq!(v.since, 100, "down since the first reason");
        assert_eq!(
            v.why.as_deref(),
            Some("passive: 1 failed requests in a row; active: 1 failed probes in a row (last: connect: refused)")
        );
        // Probes pass again, but the ejection runs until 1200.
        assert_eq!(h.probe(Ok(()), &a, 400, &LIVE), Some(Change::ProbedUp));
        assert!(!h.is_up(400) && !h.view(400).up);
        assert_eq!(h.view(400).since, 100);
        let v = h.view(1300);
        assert_eq!((v.up, v.since), (true, 1200));

        // The other order: the ejection ends first, the probes decide.
        let h = Health::new(0);
        assert_eq!(failed(&h, &p, 100), Some(Change::Ejected));
        assert_eq!(
            h.probe(Err("status 503".into()), &a, 200, &LIVE),
            Some(Change::ProbedDown)
        );
        assert!(!h.is_up(1500));
        assert_eq!(
            h.view(1500).why.as_deref(),
            Some("active: 1 failed probes in a row (last: status 503)")
        );
        assert_eq!(h.probe(Ok(()), &a, 1600, &LIVE), Some(Change::ProbedUp));
        assert_eq!(h.view(1700).since, 1600);
    }

    #[test]
    fn forgetting_a_check_a_reload_removed_brings_the_target_back() {
        let (p, a) = (passive(1, 60_000), active(1, 1));
        let h = Health::new(0);
        failed(&h, &p, 100);
        h.probe(Err("status 500".into()), &a, 100, &LIVE);
        h.forget(false, true, 200);
        assert!(!h.is_up(200), "still ejected");
        h.forget(true, false, 300);
        assert!(h.is_up(300));
        assert_eq!(h.view(400).since, 300);
        // Forgetting what says nothing changes nothing.
        h.forget(true, true, 500);
        assert_eq!(h.view(600).since, 300);
        // A retired prober's late result is not recorded.
        let retired = AtomicBool::new(true);
        assert_eq!(h.probe(Err("status 500".into()), &a, 700, &retired), None);
        assert!(h.is_up(700));
        assert_eq!(h.view(700).probes, 1);
    }
}
