//! Live statistics for the dashboard (`GET /api/stats`).
//!
//! prometheus-client's families cannot be read back, so the pipeline's
//! counts are kept a second time here, as plain atomics the admin API can
//! read: per route (requests, rejections, lockout rejections, latency
//! buckets) and per limit (decisions by kind, lockouts started). They are fed
//! by the same [`Metrics`](crate::metrics::Metrics) methods that feed the
//! Prometheus series, so both always agree. Feeding one costs a lock-free map
//! lookup and one or two relaxed atomic increments.
//!
//! A [`History`] samples the counters once a second and keeps the last
//! [`HISTORY_LEN`] per-second deltas, so a dashboard that opens late still
//! draws the last two minutes, and latency percentiles come from the bucket
//! deltas of the last [`PERCENTILE_WINDOW`] samples.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use tollgate_limit::DecisionKind;

/// Upper bounds of the latency buckets, in microseconds (the Prometheus
/// histogram's, 100 µs to 30 s); one more bucket counts everything slower.
pub const BUCKET_BOUNDS_US: [u64; 17] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000,
];

/// Number of latency buckets, the overflow bucket included.
pub const BUCKETS: usize = BUCKET_BOUNDS_US.len() + 1;

/// The labels of the limit decisions counted, in the order of
/// [`LimitCounts::decisions`] ([`DecisionKind::PER_LIMIT`]).
pub const DECISIONS: [&str; 5] = {
    let kinds = DecisionKind::PER_LIMIT;
    [
        kinds[0].label(),
        kinds[1].label(),
        kinds[2].label(),
        kinds[3].label(),
        kinds[4].label(),
    ]
};

/// Samples kept: two minutes at one a second.
pub const HISTORY_LEN: usize = 120;

/// Latency percentiles are computed over this many of the latest samples.
pub const PERCENTILE_WINDOW: usize = 10;

/// How many names a table holds at most: far above any sane config, so a
/// bug elsewhere cannot grow it without bound.
const MAX_NAMES: usize = 10_000;

/// The counters of one route.
#[derive(Debug, Default)]
pub struct RouteCounters {
    requests: AtomicU64,
    rejected: AtomicU64,
    locked_out: AtomicU64,
    /// Requests refused by authentication (401, 403, 503, and 429 from
    /// `failure_limit`).
    auth_failures: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl RouteCounters {
    /// One request answered after `took`.
    pub fn request(&self, took: Duration) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.buckets[bucket_of(took)].fetch_add(1, Ordering::Relaxed);
    }
}

/// The counters of one limit.
#[derive(Debug, Default)]
pub struct LimitCounters {
    decisions: [AtomicU64; DECISIONS.len()],
    lockouts: AtomicU64,
}

impl LimitCounters {
    /// One decision (a kind of [`DecisionKind::PER_LIMIT`]; others are
    /// not counted).
    pub fn decision(&self, decision: DecisionKind) {
        if let Some(i) = decision.per_limit_index() {
            self.decisions[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A map from names to counters, read without a lock: writers (a name seen
/// for the first time, a prune) copy the map and swap it in.
struct Table<T> {
    map: ArcSwap<HashMap<Arc<str>, Arc<T>>>,
    write: Mutex<()>,
}

impl<T: Default> Table<T> {
    fn new() -> Self {
        Table {
            map: ArcSwap::from_pointee(HashMap::new()),
            write: Mutex::new(()),
        }
    }

    /// Run `f` on the counters of `name`, creating them on first use.
    fn with(&self, name: &Arc<str>, f: impl FnOnce(&T)) {
        if let Some(counters) = self.map.load().get(name) {
            f(counters);
            return;
        }
        if let Some(counters) = self.get_or_create(name) {
            f(&counters);
        }
    }

    /// The counters of `name`, created on first use; none once the table
    /// holds [`MAX_NAMES`] names.
    fn get_or_create(&self, name: &Arc<str>) -> Option<Arc<T>> {
        if let Some(counters) = self.map.load().get(name) {
            return Some(counters.clone());
        }
        let _guard = self.write.lock().ok()?;
        let current = self.map.load_full();
        if let Some(counters) = current.get(name) {
            return Some(counters.clone());
        }
        if current.len() >= MAX_NAMES {
            return None;
        }
        let counters = Arc::new(T::default());
        let mut next = HashMap::clone(&current);
        next.insert(name.clone(), counters.clone());
        self.map.store(Arc::new(next));
        Some(counters)
    }

    /// Forget every name `keep` says no to.
    fn retain(&self, keep: impl Fn(&str) -> bool) {
        let Ok(_guard) = self.write.lock() else {
            return;
        };
        let current = self.map.load_full();
        if current.keys().all(|k| keep(k)) {
            return;
        }
        let next = current
            .iter()
            .filter(|(k, _)| keep(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.map.store(Arc::new(next));
    }

    fn entries(&self) -> Vec<(Arc<str>, Arc<T>)> {
        let map = self.map.load();
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// A reload as the dashboard shows it.
#[derive(Debug, Clone)]
pub struct ReloadEvent {
    /// When it finished.
    pub at: SystemTime,
    /// Whether it succeeded.
    pub ok: bool,
}

/// Every counter the dashboard reads back.
pub struct Stats {
    routes: Table<RouteCounters>,
    limits: Table<LimitCounters>,
    reloads: [AtomicU64; 2],
    last_reload: Mutex<Option<ReloadEvent>>,
    /// When the process started counting.
    pub started: SystemTime,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

/// The bucket a latency falls in.
fn bucket_of(took: Duration) -> usize {
    let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    BUCKET_BOUNDS_US.partition_point(|&bound| bound < us)
}

impl Stats {
    /// Empty counters.
    pub fn new() -> Self {
        Stats {
            routes: Table::new(),
            limits: Table::new(),
            reloads: Default::default(),
            last_reload: Mutex::new(None),
            started: SystemTime::now(),
        }
    }

    /// One request of `route` answered after `took`.
    pub fn request(&self, route: &Arc<str>, took: Duration) {
        self.routes.with(route, |c| c.request(took));
    }

    /// The counters of `route`, to count its requests without looking the
    /// name up each time (none if the table is full). A route the dashboard
    /// later forgets (see [`Stats::retain`]) is no longer current, so what its
    /// handle counts after that is not shown, as it would not be anyway.
    pub fn route(&self, route: &Arc<str>) -> Option<Arc<RouteCounters>> {
        self.routes.get_or_create(route)
    }

    /// One request of `route` rejected by its limits (`locked_out`: because
    /// the client is locked out).
    pub fn rejection(&self, route: &Arc<str>, locked_out: bool) {
        self.routes.with(route, |c| {
            let counter = if locked_out {
                &c.locked_out
            } else {
                &c.rejected
            };
            counter.fetch_add(1, Ordering::Relaxed);
        });
    }

    /// One request `route` refused for its authentication (401, 403, 503,
    /// or locked out by `failure_limit`).
    pub fn auth_refused(&self, route: &Arc<str>) {
        self.routes.with(route, |c| {
            c.auth_failures.fetch_add(1, Ordering::Relaxed);
        });
    }

    /// One decision of `limit` (a kind of [`DecisionKind::PER_LIMIT`]).
    pub fn decision(&self, limit: &Arc<str>, decision: DecisionKind) {
        if decision.per_limit_index().is_some() {
            self.limits.with(limit, |c| c.decision(decision));
        }
    }

    /// The counters of `limit`, to count its decisions without looking the
    /// name up each time (none if the table is full); see [`Stats::route`].
    pub fn limit(&self, limit: &Arc<str>) -> Option<Arc<LimitCounters>> {
        self.limits.get_or_create(limit)
    }

    /// One lockout of `limit` started.
    pub fn lockout(&self, limit: &Arc<str>) {
        self.limits.with(limit, |c| {
            c.lockouts.fetch_add(1, Ordering::Relaxed);
        });
    }

    /// One reload finished.
    pub fn reload(&self, ok: bool) {
        self.reloads[usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_reload.lock() {
            *last = Some(ReloadEvent {
                at: SystemTime::now(),
                ok,
            });
        }
    }

    /// The last reload, if any happened since start-up.
    pub fn last_reload(&self) -> Option<ReloadEvent> {
        self.last_reload.lock().ok().and_then(|l| l.clone())
    }

    /// Reloads so far: (succeeded, failed).
    pub fn reloads(&self) -> (u64, u64) {
        (
            self.reloads[0].load(Ordering::Relaxed),
            self.reloads[1].load(Ordering::Relaxed),
        )
    }

    /// Forget routes and limits the config no longer has (the route of
    /// unmatched requests, `""`, always stays).
    pub fn retain(&self, routes: &HashSet<&str>, limits: &HashSet<&str>) {
        self.routes
            .retain(|name| name.is_empty() || routes.contains(name));
        self.limits.retain(|name| limits.contains(name));
    }

    /// Every counter now.
    pub fn snapshot(&self) -> Snapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let routes = self
            .routes
            .entries()
            .into_iter()
            .map(|(name, c)| {
                let counts = RouteCounts {
                    requests: load(&c.requests),
                    rejected: load(&c.rejected),
                    locked_out: load(&c.locked_out),
                    auth_failures: load(&c.auth_failures),
                    buckets: std::array::from_fn(|i| load(&c.buckets[i])),
                };
                (name, counts)
            })
            .collect();
        let limits = self
            .limits
            .entries()
            .into_iter()
            .map(|(name, c)| {
                let counts = LimitCounts {
                    decisions: std::array::from_fn(|i| load(&c.decisions[i])),
                    lockouts: load(&c.lockouts),
                };
                (name, counts)
            })
            .collect();
        Snapshot { routes, limits }
    }
}

/// One route's counts (cumulative, or a delta between two snapshots).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteCounts {
    /// Requests answered.
    pub requests: u64,
    /// Requests rejected by a limit (`rate_limited`).
    pub rejected: u64,
    /// Requests rejected because the client is locked out.
    pub locked_out: u64,
    /// Requests refused by authentication (401, 403, or locked out by
    /// `failure_limit`).
    pub auth_failures: u64,
    /// Requests per latency bucket ([`BUCKET_BOUNDS_US`], then the rest).
    pub buckets: [u64; BUCKETS],
}

impl RouteCounts {
    fn minus(&self, earlier: &RouteCounts) -> RouteCounts {
        RouteCounts {
            requests: self.requests.saturating_sub(earlier.requests),
            rejected: self.rejected.saturating_sub(earlier.rejected),
            locked_out: self.locked_out.saturating_sub(earlier.locked_out),
            auth_failures: self.auth_failures.saturating_sub(earlier.auth_failures),
            buckets: std::array::from_fn(|i| self.buckets[i].saturating_sub(earlier.buckets[i])),
        }
    }

    fn add(&mut self, other: &RouteCounts) {
        self.requests += other.requests;
        self.rejected += other.rejected;
        self.locked_out += other.locked_out;
        self.auth_failures += other.auth_failures;
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
    }
}

/// One limit's counts (cumulative, or a delta).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitCounts {
    /// Decisions, in the order of [`DECISIONS`].
    pub decisions: [u64; DECISIONS.len()],
    /// Lockouts started.
    pub lockouts: u64,
}

impl LimitCounts {
    fn minus(&self, earlier: &LimitCounts) -> LimitCounts {
        LimitCounts {
            decisions: std::array::from_fn(|i| {
                self.decisions[i].saturating_sub(earlier.decisions[i])
            }),
            lockouts: self.lockouts.saturating_sub(earlier.lockouts),
        }
    }
}

/// Every counter at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Per route.
    pub routes: HashMap<Arc<str>, RouteCounts>,
    /// Per limit.
    pub limits: HashMap<Arc<str>, LimitCounts>,
}

/// The `q` quantile (0..=1) of a latency histogram, in milliseconds, by
/// linear interpolation inside the bucket it falls in (as Prometheus'
/// `histogram_quantile`); `None` without observations. The overflow bucket
/// answers its lower bound.
pub fn quantile_ms(buckets: &[u64; BUCKETS], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut seen = 0u64;
    for (i, &count) in buckets.iter().enumerate() {
        if count == 0 {
            continue;
        }
        if (seen + count) as f64 >= rank {
            let lower = if i == 0 { 0 } else { BUCKET_BOUNDS_US[i - 1] };
            let Some(&upper) = BUCKET_BOUNDS_US.get(i) else {
                return Some(lower as f64 / 1000.0);
            };
            let into = ((rank - seen as f64) / count as f64).clamp(0.0, 1.0);
            return Some((lower as f64 + (upper - lower) as f64 * into) / 1000.0);
        }
        seen += count;
    }
    Some(BUCKET_BOUNDS_US[BUCKET_BOUNDS_US.len() - 1] as f64 / 1000.0)
}

/// What one sample says of a route: the counts of its interval, and the
/// latency percentiles of the last [`PERCENTILE_WINDOW`] samples.
#[derive(Debug, Clone, Copy, Default)]
pub struct RouteSample {
    /// Counts during the sample's interval.
    pub counts: RouteCounts,
    /// Median latency over the window, in milliseconds.
    pub p50_ms: Option<f64>,
    /// 99th percentile latency over the window, in milliseconds.
    pub p99_ms: Option<f64>,
}

/// One per-second sample of every counter.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Its number (1 for the first sample since start).
    pub seq: u64,
    /// When it was taken, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The length of its interval, in milliseconds.
    pub interval_ms: u64,
    /// Per route.
    pub routes: HashMap<Arc<str>, RouteSample>,
    /// All routes together.
    pub total: RouteSample,
    /// Per limit, the counts of the interval.
    pub limits: HashMap<Arc<str>, LimitCounts>,
}

/// The samples kept, oldest first.
#[derive(Default)]
struct HistoryState {
    seq: u64,
    last: Snapshot,
    last_at: Option<SystemTime>,
    samples: VecDeque<Sample>,
}

/// The last [`HISTORY_LEN`] per-second samples.
#[derive(Default)]
pub struct History {
    state: Mutex<HistoryState>,
}

/// Milliseconds since the Unix epoch.
pub fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl History {
    /// Take one sample of `now` against the previous one. The first sample
    /// counts from zero, so the samples add up to the totals while the
    /// history still reaches back to start-up.
    pub fn record(&self, now: Snapshot, at: SystemTime) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let interval_ms = state
            .last_at
            .and_then(|last| at.duration_since(last).ok())
            .map_or(1000, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .max(1);
        let mut routes = HashMap::with_capacity(now.routes.len());
        let mut total = RouteSample::default();
        for (name, counts) in &now.routes {
            let before = state.last.routes.get(name).copied().unwrap_or_default();
            let delta = counts.minus(&before);
            total.counts.add(&delta);
            routes.insert(
                name.clone(),
                RouteSample {
                    counts: delta,
                    ..RouteSample::default()
                },
            );
        }
        let limits = now
            .limits
            .iter()
            .map(|(name, counts)| {
                let before = state.last.limits.get(name).copied().unwrap_or_default();
                (name.clone(), counts.minus(&before))
            })
            .collect();
        // Percentiles over this sample and the ones before it in the window.
        let window = || {
            state
                .samples
                .iter()
                .rev()
                .take(PERCENTILE_WINDOW.saturating_sub(1))
        };
        for (name, sample) in routes.iter_mut() {
            let mut buckets = sample.counts.buckets;
            for earlier in window() {
                if let Some(e) = earlier.routes.get(name) {
                    for (a, b) in buckets.iter_mut().zip(&e.counts.buckets) {
                        *a += b;
                    }
                }
            }
            sample.p50_ms = quantile_ms(&buckets, 0.5);
            sample.p99_ms = quantile_ms(&buckets, 0.99);
        }
        let mut buckets = total.counts.buckets;
        for earlier in window() {
            for (a, b) in buckets.iter_mut().zip(&earlier.total.counts.buckets) {
                *a += b;
            }
        }
        total.p50_ms = quantile_ms(&buckets, 0.5);
        total.p99_ms = quantile_ms(&buckets, 0.99);
        state.seq += 1;
        let sample = Sample {
            seq: state.seq,
            at_ms: epoch_ms(at),
            interval_ms,
            routes,
            total,
            limits,
        };
        if state.samples.len() >= HISTORY_LEN {
            state.samples.pop_front();
        }
        state.samples.push_back(sample);
        state.last = now;
        state.last_at = Some(at);
    }

    /// The samples newer than `since` (oldest first), and the latest
    /// sample's number.
    pub fn since(&self, since: u64) -> (Vec<Sample>, u64) {
        let Ok(state) = self.state.lock() else {
            return (Vec::new(), 0);
        };
        let samples = state
            .samples
            .iter()
            .filter(|s| s.seq > since)
            .cloned()
            .collect();
        (samples, state.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn buckets_by_upper_bound() {
        assert_eq!(bucket_of(Duration::from_micros(0)), 0);
        assert_eq!(bucket_of(Duration::from_micros(100)), 0);
        assert_eq!(bucket_of(Duration::from_micros(101)), 1);
        assert_eq!(bucket_of(Duration::from_millis(1)), 3);
        assert_eq!(bucket_of(Duration::from_secs(30)), 16);
        assert_eq!(bucket_of(Duration::from_secs(31)), 17);
    }

    #[test]
    fn quantiles_interpolate_inside_the_bucket() {
        let mut b = [0u64; BUCKETS];
        assert_eq!(quantile_ms(&b, 0.5), None);
        // 100 observations between 1 ms and 2.5 ms.
        b[4] = 100;
        assert_eq!(quantile_ms(&b, 0.5), Some(1.75));
        assert_eq!(quantile_ms(&b, 1.0), Some(2.5));
        // One slow outlier beyond every bound.
        b[17] = 1;
        assert_eq!(quantile_ms(&b, 0.999), Some(30_000.0));
        let p99 = quantile_ms(&b, 0.99).unwrap();
        assert!((2.4..=2.5).contains(&p99), "{p99}");
    }

    #[test]
    fn counters_feed_snapshots_and_samples_add_up() {
        let stats = Stats::new();
        let history = History::default();
        let (a, l) = (name("a"), name("l"));
        for _ in 0..3 {
            stats.request(&a, Duration::from_millis(2));
        }
        stats.rejection(&a, false);
        stats.rejection(&a, true);
        stats.decision(&l, DecisionKind::Allowed);
        stats.decision(&l, DecisionKind::LockedOut);
        // A whole request's kind, not a limit's: not counted.
        stats.decision(&l, DecisionKind::Unavailable);
        stats.lockout(&l);
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        history.record(stats.snapshot(), t0);
        stats.request(&a, Duration::from_millis(2));
        history.record(stats.snapshot(), t0 + Duration::from_millis(1_000));

        let snap = stats.snapshot();
        let ra = snap.routes[&a];
        assert_eq!((ra.requests, ra.rejected, ra.locked_out), (4, 1, 1));
        assert_eq!(ra.buckets[4], 4);
        assert_eq!(snap.limits[&l].decisions, [1, 0, 1, 0, 0]);
        assert_eq!(snap.limits[&l].lockouts, 1);

        let (samples, seq) = history.since(0);
        assert_eq!(seq, 2);
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].routes[&a].counts.requests, 3);
        assert_eq!(samples[1].routes[&a].counts.requests, 1);
        assert_eq!(samples[1].interval_ms, 1_000);
        assert_eq!(samples[1].total.counts.requests, 1);
        // The window covers both samples: 4 observations in 1..2.5 ms.
        assert_eq!(samples[1].routes[&a].p50_ms, Some(1.75));
        assert_eq!(history.since(1).0.len(), 1);
        assert!(history.since(2).0.is_empty());
    }

    #[test]
    fn history_is_bounded_and_retain_prunes() {
        let stats = Stats::new();
        let history = History::default();
        let (a, gone) = (name("a"), name("gone"));
        stats.request(&a, Duration::ZERO);
        stats.request(&gone, Duration::ZERO);
        stats.request(&name(""), Duration::ZERO);
        for i in 0..(HISTORY_LEN as u64 + 5) {
            history.record(stats.snapshot(), UNIX_EPOCH + Duration::from_secs(i));
        }
        let (samples, seq) = history.since(0);
        assert_eq!(samples.len(), HISTORY_LEN);
        assert_eq!(seq, HISTORY_LEN as u64 + 5);
        stats.retain(&HashSet::from(["a"]), &HashSet::new());
        let snap = stats.snapshot();
        assert!(snap.routes.contains_key(&a) && snap.routes.contains_key(""));
        assert!(!snap.routes.contains_key(&gone));
    }
}
