//! The body of `GET /api/stats`: a typed `Serialize` struct per section
//! (config, total, routes, limits, lockouts, series), each built by one
//! function from the figures read at one moment ([`Sources`]).

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::Value;
use tollgate_limit::headers::secs_ceil;
use tollgate_limit::DecisionKind;

use super::{Locked, LockoutView, RATE_SAMPLES, SAMPLE_INTERVAL};
use crate::metrics::stats::{
    epoch_ms, LimitCounts, ReloadEvent, RouteCounts, RouteSample, Sample, Snapshot, HISTORY_LEN,
};
use crate::runtime::Runtime;

/// What `/api/stats` is made of, read at one moment.
pub(super) struct Sources<'a> {
    pub(super) rt: &'a Runtime,
    pub(super) now: SystemTime,
    /// When the counters started.
    pub(super) started: SystemTime,
    pub(super) draining: bool,
    /// The last reload's error, if it failed.
    pub(super) last_error: Option<String>,
    /// Reloads so far: (succeeded, failed).
    pub(super) reloads: (u64, u64),
    pub(super) last_reload: Option<ReloadEvent>,
    /// The counters since start.
    pub(super) totals: Snapshot,
    /// Every sample of the history, oldest first.
    pub(super) samples: Vec<Sample>,
    /// The latest sample's number.
    pub(super) seq: u64,
    /// `?since=`: the series holds the samples after this one.
    pub(super) since: u64,
    /// Whether the series is wanted (not `?series=0`).
    pub(super) series: bool,
    /// The lockouts, or why the store could not list them.
    pub(super) lockouts: Result<LockoutView, String>,
    /// The upstreams section, as `GET /upstreams` answers it.
    pub(super) upstreams: Value,
    /// The consumers section, as `GET /consumers` answers it.
    pub(super) consumers: Value,
    /// The top offenders, as `GET /top` answers them.
    pub(super) top: Value,
}

/// The body of `GET /api/stats`.
#[derive(Debug, Serialize)]
pub(super) struct ApiStats<'a> {
    now_ms: u64,
    started_ms: u64,
    draining: bool,
    /// How often samples are taken.
    interval_ms: u64,
    /// How many samples are kept.
    history: usize,
    seq: u64,
    config: ConfigSection<'a>,
    total: Rates,
    routes: Vec<RouteSection<'a>>,
    limits: Vec<LimitSection<'a>>,
    lockouts: LockoutSection<'a>,
    upstreams: &'a Value,
    consumers: &'a Value,
    top: &'a Value,
    /// `null` with `?series=0`.
    series: Option<Series<'a>>,
}

impl<'a> ApiStats<'a> {
    /// The body, section by section.
    pub(super) fn new(src: &'a Sources<'a>) -> Self {
        let ctx = Ctx::new(src);
        ApiStats {
            now_ms: epoch_ms(src.now),
            started_ms: epoch_ms(src.started),
            draining: src.draining,
            interval_ms: u64::try_from(SAMPLE_INTERVAL.as_millis()).unwrap_or(u64::MAX),
            history: HISTORY_LEN,
            seq: src.seq,
            config: ctx.config(),
            total: ctx.rates(|s| Some(&s.total)),
            routes: ctx.routes(),
            limits: ctx.limits(),
            lockouts: ctx.lockouts(),
            upstreams: &src.upstreams,
            consumers: &src.consumers,
            top: &src.top,
            series: ctx.series(),
        }
    }
}

/// The config in force and the reloads.
#[derive(Debug, Serialize)]
struct ConfigSection<'a> {
    generation: u64,
    loaded_at: String,
    sha256: &'a str,
    last_error: Option<&'a str>,
    last_reload: Option<LastReload>,
    reloads: Reloads,
    /// The store backend's name.
    store: &'static str,
}

#[derive(Debug, Serialize)]
struct LastReload {
    at: String,
    /// `success` or `failure`.
    result: &'static str,
}

#[derive(Debug, Serialize)]
struct Reloads {
    success: u64,
    failure: u64,
}

/// Per second over the last [`RATE_SAMPLES`] samples, and the latest
/// sample's latency percentiles: of one route, or of all together.
#[derive(Debug, Serialize)]
struct Rates {
    rps: f64,
    rejected_ps: f64,
    locked_out_ps: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
}

/// One route (or `""`, the requests no route matched): totals since start
/// and its rates.
#[derive(Debug, Serialize)]
struct RouteSection<'a> {
    name: &'a str,
    /// Its limits' names.
    limits: Vec<&'a str>,
    requests: u64,
    rejected: u64,
    locked_out: u64,
    /// Requests its authentication refused (401, 403, locked out by
    /// `failure_limit`).
    auth_failures: u64,
    #[serde(flatten)]
    rates: Rates,
}

/// One limit: its settings, its decisions since start and their rates.
#[derive(Debug, Serialize)]
struct LimitSection<'a> {
    name: &'a str,
    algorithm: Option<&'static str>,
    shadow: bool,
    /// Whether it has a lockout.
    lockout: bool,
    decisions: PerDecision<u64>,
    rates: PerDecision<f64>,
    /// Lockouts started.
    lockouts: u64,
    /// Clients locked out now; `null` when the store could not say.
    locked_now: Option<usize>,
}

/// The lockouts now, capped; when the store could not list them, its
/// error and no counts.
#[derive(Debug, Serialize)]
struct LockoutSection<'a> {
    total: Option<usize>,
    matching: Option<usize>,
    shown: usize,
    by_limit: BTreeMap<&'a str, usize>,
    items: Vec<LockoutItem<'a>>,
    error: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct LockoutItem<'a> {
    limit: &'a str,
    key: &'a str,
    /// Seconds left, rounded up.
    remaining: u64,
    remaining_ms: u64,
    known: bool,
}

/// The samples newer than `?since=` as columns aligned with `t` (ms since
/// the epoch).
#[derive(Debug, Serialize)]
struct Series<'a> {
    seq: Vec<u64>,
    t: Vec<u64>,
    interval_ms: Vec<u64>,
    total: RouteSeries,
    routes: BTreeMap<&'a str, RouteSeries>,
    limits: BTreeMap<&'a str, LimitSeries>,
}

/// A route's (or all routes') counts per sample.
#[derive(Debug, Serialize)]
struct RouteSeries {
    requests: Vec<u64>,
    rejected: Vec<u64>,
    locked_out: Vec<u64>,
    p50_ms: Vec<Option<f64>>,
    p99_ms: Vec<Option<f64>>,
}

/// A limit's decisions and lockouts started per sample.
#[derive(Debug, Serialize)]
struct LimitSeries {
    #[serde(flatten)]
    decisions: PerDecision<Vec<u64>>,
    lockouts: Vec<u64>,
}

/// One value per kind of a limit's decision, in the order of
/// [`DecisionKind::PER_LIMIT`], serialised as an object keyed by their
/// labels.
#[derive(Debug)]
struct PerDecision<T>([T; DecisionKind::PER_LIMIT.len()]);

impl<T: Serialize> Serialize for PerDecision<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (kind, value) in DecisionKind::PER_LIMIT.iter().zip(&self.0) {
            map.serialize_entry(kind.label(), value)?;
        }
        map.end()
    }
}

/// The sources, with what several sections read.
struct Ctx<'a> {
    src: &'a Sources<'a>,
    /// The routes shown, with their limits: in config order, then `""`
    /// (the requests no route matched) if there were any.
    routes: Vec<(&'a str, Vec<&'a str>)>,
    /// The samples rates are averaged over.
    recent: &'a [Sample],
    /// Their length, in milliseconds.
    recent_ms: u64,
}

impl<'a> Ctx<'a> {
    fn new(src: &'a Sources<'a>) -> Self {
        let mut routes: Vec<(&str, Vec<&str>)> = src
            .rt
            .routes
            .iter()
            .map(|r| (&*r.name, r.limits.iter().map(|p| &*p.name).collect()))
            .collect();
        if src.totals.routes.get("").is_some_and(|c| c.requests > 0) {
            routes.push(("", Vec::new()));
        }
        let recent = &src.samples[src.samples.len().saturating_sub(RATE_SAMPLES)..];
        Ctx {
            src,
            routes,
            recent,
            recent_ms: recent.iter().map(|s| s.interval_ms).sum(),
        }
    }

    fn config(&self) -> ConfigSection<'a> {
        let rt = self.src.rt;
        let (success, failure) = self.src.reloads;
        ConfigSection {
            generation: rt.generation,
            loaded_at: rfc3339_millis(rt.loaded_at),
            sha256: &rt.sha256,
            last_error: self.src.last_error.as_deref(),
            last_reload: self.src.last_reload.as_ref().map(|r| LastReload {
                at: rfc3339_millis(r.at),
                result: if r.ok { "success" } else { "failure" },
            }),
            reloads: Reloads { success, failure },
            store: rt.config.store.backend.name(),
        }
    }

    /// The rates of what `of` picks from each sample (a route, or the
    /// total); a sample without it counts nothing.
    fn rates(&self, of: impl Fn(&'a Sample) -> Option<&'a RouteSample>) -> Rates {
        let sum = |count: fn(&RouteCounts) -> u64| -> u64 {
            self.recent
                .iter()
                .filter_map(&of)
                .map(|r| count(&r.counts))
                .sum()
        };
        let latest = self.src.samples.last().and_then(&of);
        Rates {
            rps: per_second(sum(|c| c.requests), self.recent_ms),
            rejected_ps: per_second(sum(|c| c.rejected), self.recent_ms),
            locked_out_ps: per_second(sum(|c| c.locked_out), self.recent_ms),
            p50_ms: ms(latest.and_then(|r| r.p50_ms)),
            p99_ms: ms(latest.and_then(|r| r.p99_ms)),
        }
    }

    fn routes(&self) -> Vec<RouteSection<'a>> {
        self.routes
            .iter()
            .map(|(name, limits)| {
                let t = self
                    .src
                    .totals
                    .routes
                    .get(*name)
                    .copied()
                    .unwrap_or_default();
                RouteSection {
                    name,
                    limits: limits.clone(),
                    requests: t.requests,
                    rejected: t.rejected,
                    locked_out: t.locked_out,
                    auth_failures: t.auth_failures,
                    rates: self.rates(|s| s.routes.get(*name)),
                }
            })
            .collect()
    }

    /// The limits, in config order.
    fn limits(&self) -> Vec<LimitSection<'a>> {
        let locked = self.src.lockouts.as_ref().ok();
        self.src
            .rt
            .config
            .limits
            .iter()
            .map(|l| {
                let name = l.name.as_str();
                let t = self
                    .src
                    .totals
                    .limits
                    .get(name)
                    .copied()
                    .unwrap_or_default();
                let policy = self.src.rt.policies.get(name);
                let counts = || self.recent.iter().filter_map(|s| s.limits.get(name));
                LimitSection {
                    name,
                    algorithm: policy.map(|p| p.params.name()),
                    shadow: policy.is_some_and(|p| p.shadow),
                    lockout: policy.is_some_and(|p| p.lockout.is_some()),
                    decisions: PerDecision(t.decisions),
                    rates: PerDecision(std::array::from_fn(|i| {
                        per_second(counts().map(|c| c.decisions[i]).sum(), self.recent_ms)
                    })),
                    lockouts: t.lockouts,
                    locked_now: locked.map(|v| v.by_limit.get(name).copied().unwrap_or(0)),
                }
            })
            .collect()
    }

    fn lockouts(&self) -> LockoutSection<'a> {
        match &self.src.lockouts {
            Ok(view) => LockoutSection {
                total: Some(view.total),
                matching: Some(view.matching),
                shown: view.shown.len(),
                by_limit: view
                    .by_limit
                    .iter()
                    .map(|(k, n)| (k.as_str(), *n))
                    .collect(),
                items: view.shown.iter().map(LockoutItem::of).collect(),
                error: None,
            },
            Err(error) => LockoutSection {
                total: None,
                matching: None,
                shown: 0,
                by_limit: BTreeMap::new(),
                items: Vec::new(),
                error: Some(error),
            },
        }
    }

    fn series(&self) -> Option<Series<'a>> {
        if !self.src.series {
            return None;
        }
        let src = self.src;
        let newer: Vec<&Sample> = src.samples.iter().filter(|s| s.seq > src.since).collect();
        let column = |f: fn(&Sample) -> u64| newer.iter().map(|s| f(s)).collect();
        let route = |name: &str| RouteSeries::of(&newer, |s| s.routes.get(name).copied());
        let limit = |name: &str| LimitSeries::of(&newer, |s| s.limits.get(name).copied());
        Some(Series {
            seq: column(|s| s.seq),
            t: column(|s| s.at_ms),
            interval_ms: column(|s| s.interval_ms),
            total: RouteSeries::of(&newer, |s| Some(s.total)),
            routes: self.routes.iter().map(|(n, _)| (*n, route(n))).collect(),
            limits: src
                .rt
                .config
                .limits
                .iter()
                .map(|l| (&*l.name, limit(&l.name)))
                .collect(),
        })
    }
}

impl<'a> LockoutItem<'a> {
    fn of(l: &'a Locked) -> Self {
        LockoutItem {
            limit: &l.limit,
            key: &l.key,
            remaining: secs_ceil(l.remaining),
            remaining_ms: l.remaining / 1000,
            known: l.known,
        }
    }
}

impl RouteSeries {
    /// The column of what `of` picks from each sample (zero when absent).
    fn of(samples: &[&Sample], of: impl Fn(&Sample) -> Option<RouteSample>) -> Self {
        let get = |s: &&Sample| of(s).unwrap_or_default();
        let column = |f: fn(&RouteSample) -> u64| samples.iter().map(|s| f(&get(s))).collect();
        RouteSeries {
            requests: column(|r| r.counts.requests),
            rejected: column(|r| r.counts.rejected),
            locked_out: column(|r| r.counts.locked_out),
            p50_ms: samples.iter().map(|s| ms(get(s).p50_ms)).collect(),
            p99_ms: samples.iter().map(|s| ms(get(s).p99_ms)).collect(),
        }
    }
}

impl LimitSeries {
    /// The columns of what `of` picks from each sample (zero when absent).
    fn of(samples: &[&Sample], of: impl Fn(&Sample) -> Option<LimitCounts>) -> Self {
        let counts: Vec<LimitCounts> = samples.iter().map(|s| of(s).unwrap_or_default()).collect();
        LimitSeries {
            decisions: PerDecision(std::array::from_fn(|i| {
                counts.iter().map(|c| c.decisions[i]).collect()
            })),
            lockouts: counts.iter().map(|c| c.lockouts).collect(),
        }
    }
}

/// A time as RFC 3339 with milliseconds.
fn rfc3339_millis(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Round to `places` decimals, for compact JSON.
fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

/// `count` over `ms` milliseconds, per second.
fn per_second(count: u64, ms: u64) -> f64 {
    if ms == 0 {
        return 0.0;
    }
    round(count as f64 * 1000.0 / ms as f64, 2)
}

/// A latency in milliseconds, to the microsecond.
fn ms(v: Option<f64>) -> Option<f64> {
    v.map(|x| round(x, 3))
}

/// `/api/stats` on fixed figures, against the JSON it answered before its
/// sections became typed structs, so their shape cannot drift.
#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, UNIX_EPOCH};

    use serde_json::json;
    use tollgate_limit::DecisionKind as Kind;

    use super::*;
    use crate::metrics::stats::{History, Stats};

    const CONFIG: &str = "\
limits:
  per_ip: { algorithm: fixed_window, limit: 5, window: 1s, lockout: { duration: 1m } }
  trial: { algorithm: gcra, rate: 5/s, mode: shadow }
  unused: { algorithm: sliding_window, limit: 3, window: 10s }
routes:
  - name: api
    match: { path: /api }
    limits: [per_ip, trial, { algorithm: token_bucket, rate: 2/s }]
    respond: {}
  - name: open
    respond: {}
";

    fn at(secs: u64, ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs) + Duration::from_millis(ms)
    }

    fn runtime() -> Runtime {
        let config = crate::config::parse(CONFIG, "gateway.yaml")
            .expect("config")
            .config;
        let mut rt = Runtime::build(config, "ab12".into(), 3, None).expect("runtime");
        rt.loaded_at = at(0, 250);
        rt
    }

    /// Seven samples of traffic on both routes, unmatched requests and
    /// every decision, one interval a little long.
    fn history(stats: &Stats) -> History {
        let history = History::default();
        let (api, open, none) = (Arc::from("api"), Arc::from("open"), Arc::from(""));
        let (per_ip, trial, inline) = (Arc::from("per_ip"), Arc::from("trial"), Arc::from("api.2"));
        for k in 1..=7u64 {
            for i in 0..k {
                stats.request(&api, Duration::from_micros(300 + 700 * i));
                stats.decision(&per_ip, if i < 5 { Kind::Allowed } else { Kind::Rejected });
                stats.decision(
                    &trial,
                    if i % 3 == 0 {
                        Kind::ShadowRejected
                    } else {
                        Kind::Allowed
                    },
                );
                stats.decision(&inline, if i == 2 { Kind::Delayed } else { Kind::Allowed });
            }
            if k >= 5 {
                stats.rejection(&api, false);
            }
            if k == 6 {
                stats.rejection(&api, true);
                stats.decision(&per_ip, Kind::LockedOut);
                stats.lockout(&per_ip);
            }
            stats.request(&open, Duration::from_millis(40 * k));
            if k % 2 == 0 {
                stats.request(&none, Duration::from_micros(90));
            }
            let skew = if k == 4 { 3 } else { 0 };
            history.record(stats.snapshot(), at(k, skew + 2 * (k - 1)));
        }
        history
    }

    fn lockouts() -> LockoutView {
        LockoutView {
            total: 3,
            by_limit: [("per_ip".to_owned(), 2), (String::new(), 1)].into(),
            matching: 2,
            shown: vec![
                Locked {
                    limit: "per_ip".into(),
                    key: "10.0.0.1".into(),
                    remaining: 59_500_001,
                    known: true,
                },
                Locked {
                    limit: String::new(),
                    key: "0a1b".into(),
                    remaining: 999,
                    known: false,
                },
            ],
        }
    }

    fn sources<'a>(rt: &'a Runtime, stats: &Stats, history: &History) -> Sources<'a> {
        let (samples, seq) = history.since(0);
        Sources {
            rt,
            now: at(8, 7),
            started: at(0, 0),
            draining: false,
            last_error: Some("gateway.yaml:3:5: routes[0]: nope".into()),
            reloads: (3, 1),
            last_reload: Some(ReloadEvent {
                at: at(5, 120),
                ok: false,
            }),
            totals: stats.snapshot(),
            samples,
            seq,
            since: 4,
            series: true,
            lockouts: Ok(lockouts()),
            upstreams: json!([]),
            consumers: json!({"consumers": [], "credentials": []}),
            top: json!({"limits": {}}),
        }
    }

    #[test]
    fn api_stats_answers_the_json_it_always_has() {
        // Byte for byte: key order, `1.0` against `1`, nulls.
        let rt = runtime();
        let stats = Stats::new();
        let history = history(&stats);
        let src = sources(&rt, &stats, &history);
        assert_eq!(
            serde_json::to_value(ApiStats::new(&src))
                .expect("json")
                .to_string(),
            GOLDEN_FULL
        );
        let src = Sources {
            lockouts: Err("redis: no answer within the timeout".into()),
            series: false,
            last_reload: None,
            last_error: None,
            draining: true,
            ..sources(&rt, &stats, &History::default())
        };
        assert_eq!(
            serde_json::to_value(ApiStats::new(&src))
                .expect("json")
                .to_string(),
            GOLDEN_DEGRADED
        );
    }

    /// Seven samples, lockouts listed, the series after sample 4.
    const GOLDEN_FULL: &str = include_str!("testdata/api_stats_full.json");
    /// No samples, the store unreachable, no series, draining.
    const GOLDEN_DEGRADED: &str = include_str!("testdata/api_stats_degraded.json");
}
