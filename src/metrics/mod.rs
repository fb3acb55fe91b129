//! Prometheus metrics (docs/operations.md): one registry per process, rendered at
//! admin `GET /metrics` by the `prometheus-client` crate.
//!
//! Label values are only route, limit, upstream, target, backend and outcome
//! names from the config or the code, never client-supplied values, so the
//! number of series is bounded by the config. Route and limit names are
//! `Arc<str>` shared with the runtime, so counting a request allocates
//! nothing.
//!
//! The same methods feed [`Stats`], the counters the dashboard reads back
//! (prometheus-client's families cannot be iterated), so the dashboard and
//! `/metrics` always agree.

pub mod stats;
pub mod top;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use tollgate_limit::{DecisionKind, StoreKey};

use stats::{LimitCounters, RouteCounters, Stats, DECISIONS};

/// Latency buckets suited to a proxy: 100 µs to 30 s.
const LATENCY_BUCKETS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Labels of `tollgate_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The route's name, or empty when no route matched.
    pub route: Arc<str>,
    /// The response status code.
    pub status: u16,
}

/// Labels naming a route.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The route's name, or empty when no route matched.
    pub route: Arc<str>,
}

/// Labels of `tollgate_limit_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// The route's name.
    pub route: Arc<str>,
    /// The limit's name.
    pub limit: Arc<str>,
    /// `allowed`, `rejected`, `locked_out`, `delayed`, `shadow_rejected`.
    pub decision: &'static str,
}

/// Labels of `tollgate_auth_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthLabels {
    /// The route's name.
    pub route: Arc<str>,
    /// `ok`, `missing`, `invalid`, `forbidden`, `locked_out` or
    /// `unavailable` (`auth::AuthOutcome::label`).
    pub outcome: &'static str,
}

/// Labels of `tollgate_cost_settlements_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SettlementLabels {
    /// The limit's name.
    pub limit: Arc<str>,
    /// `settled` (as estimated), `refund`, `extra`, `missing_usage` or
    /// `dropped` (not applied within `settle_within`).
    pub outcome: &'static str,
}

/// Labels of `tollgate_leases_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    /// The limit's name.
    pub limit: Arc<str>,
    /// `taken`, `empty`, `returned` or `stranded`
    /// ([`tollgate_limit::LeaseEvent`]).
    pub outcome: &'static str,
}

/// Labels of `tollgate_cost_units_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CostUnitLabels {
    /// The limit's name.
    pub limit: Arc<str>,
    /// `reserved` (estimates charged at admission) or `settled` (what the
    /// responses said they cost).
    pub phase: &'static str,
}

/// Labels naming a limit.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    /// The limit's name.
    pub limit: Arc<str>,
}

/// Labels of `tollgate_upstream_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    /// The upstream's name.
    pub upstream: Arc<str>,
    /// The target (`scheme://authority`).
    pub target: Arc<str>,
    /// `response`, `error` or `timeout`.
    pub outcome: &'static str,
}

/// Labels naming one target of an upstream.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabels {
    /// The upstream's name.
    pub upstream: Arc<str>,
    /// The target (`scheme://authority`).
    pub target: Arc<str>,
}

/// Labels naming an upstream.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamNameLabels {
    /// The upstream's name.
    pub upstream: Arc<str>,
}

/// Labels of `tollgate_store_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    /// `memory` or `redis`.
    pub backend: &'static str,
    /// `ok` or `error`.
    pub outcome: &'static str,
}

/// Labels naming a store backend.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabels {
    /// `memory` or `redis`.
    pub backend: &'static str,
}

/// Labels of `tollgate_spans_dropped_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpanDropLabels {
    /// `queue_full` (the export queue was full when the request ended) or
    /// `export_failed` (the collector did not take the batch in time).
    pub reason: &'static str,
}

/// The span export's counters, handed to the exporter's task
/// ([`crate::trace::export`]): clones share their values.
#[derive(Clone, Debug)]
pub struct SpanCounters {
    /// `tollgate_spans_exported_total`.
    pub exported: Counter,
    /// `tollgate_spans_dropped_total{reason="queue_full"}`.
    pub queue_full: Counter,
    /// `tollgate_spans_dropped_total{reason="export_failed"}`.
    pub export_failed: Counter,
}

/// Labels of `tollgate_config_reloads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `success` or `failure`.
    pub result: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// The statuses whose request counter a route keeps at hand; others are
/// looked up by label each time.
const COMMON_STATUSES: [u16; 16] = [
    200, 201, 204, 206, 301, 302, 304, 400, 401, 403, 404, 429, 500, 502, 503, 504,
];

/// One route's metric handles, resolved on the route's first request and
/// kept with the compiled route, so counting a request does no label
/// lookup (a lookup hashes the labels and takes the family's lock; it was
/// ~2 % of a proxied request's instructions). Handles share the families'
/// counters: what they count is what `/metrics` shows.
pub struct RouteMetrics {
    resolved: OnceLock<RouteHandles>,
    /// One per limit of the route, in the route's order.
    limits: Vec<LimitHandles>,
}

/// A route's handles for one of its limits' decisions.
#[derive(Default)]
struct LimitHandles {
    decisions: [OnceLock<Counter>; DECISIONS.len()],
    stats: OnceLock<Option<Arc<LimitCounters>>>,
}

impl RouteMetrics {
    /// Empty handles for a route with `limits` limits.
    pub fn new(limits: usize) -> Self {
        RouteMetrics {
            resolved: OnceLock::new(),
            limits: (0..limits).map(|_| LimitHandles::default()).collect(),
        }
    }
}

/// The outcomes of an attempt sent upstream, in the order of
/// [`UpstreamMetrics`]' handles.
const UPSTREAM_OUTCOMES: [&str; 3] = ["response", "error", "timeout"];

/// One upstream pool's metric handles, resolved on first use and kept with
/// the pool (as [`RouteMetrics`] are with a route), so an attempt sent
/// upstream is counted without a label lookup.
pub struct UpstreamMetrics {
    duration: OnceLock<Histogram>,
    /// Per target (in the pool's order), per outcome.
    attempts: Vec<[OnceLock<Counter>; UPSTREAM_OUTCOMES.len()]>,
}

impl UpstreamMetrics {
    /// Empty handles for a pool of `targets` targets.
    pub fn new(targets: usize) -> Self {
        UpstreamMetrics {
            duration: OnceLock::new(),
            attempts: (0..targets).map(|_| Default::default()).collect(),
        }
    }
}

struct RouteHandles {
    duration: Histogram,
    statuses: [OnceLock<Counter>; COMMON_STATUSES.len()],
    stats: Option<Arc<RouteCounters>>,
}

/// `metric`, registered as `name` with `help`.
fn registered<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// Every metric the gateway exports.
pub struct Metrics {
    registry: Registry,
    /// `tollgate_requests_total{route,status}`.
    pub requests: Family<RequestLabels, Counter>,
    /// `tollgate_request_duration_seconds{route}`.
    pub request_duration: Histograms<RouteLabels>,
    /// `tollgate_limit_decisions_total{route,limit,decision}`.
    pub decisions: Family<DecisionLabels, Counter>,
    /// `tollgate_lockouts_total{limit}`.
    pub lockouts: Family<LimitLabels, Counter>,
    /// `tollgate_auth_total{route,outcome}`: no consumer label, ever
    /// (consumers are unbounded).
    pub auth: Family<AuthLabels, Counter>,
    /// `tollgate_cost_settlements_total{limit,outcome}`.
    pub cost_settlements: Family<SettlementLabels, Counter>,
    /// `tollgate_cost_units_total{limit,phase}`.
    pub cost_units: Family<CostUnitLabels, Counter>,
    /// `tollgate_leases_total{limit,outcome}`.
    pub leases: Family<LeaseLabels, Counter>,
    /// `tollgate_upstream_requests_total{upstream,target,outcome}`.
    pub upstream_requests: Family<UpstreamLabels, Counter>,
    /// `tollgate_upstream_duration_seconds{upstream}`.
    pub upstream_duration: Histograms<UpstreamNameLabels>,
    /// `tollgate_upstream_healthy{upstream,target}`: 1 up, 0 down.
    pub upstream_healthy: Family<TargetLabels, Gauge>,
    /// The series `upstream_healthy` holds now.
    healthy_series: Mutex<HashSet<TargetLabels>>,
    /// `tollgate_store_duration_seconds{backend,outcome}`.
    pub store_duration: Histograms<StoreLabels>,
    /// `tollgate_store_errors_total{backend}`.
    pub store_errors: Family<BackendLabels, Counter>,
    /// `tollgate_spans_exported_total` and
    /// `tollgate_spans_dropped_total{reason}`.
    pub spans: SpanCounters,
    /// `tollgate_config_reloads_total{result}`.
    pub reloads: Family<ReloadLabels, Counter>,
    /// `tollgate_config_generation`.
    pub generation: Gauge,
    /// `tollgate_connections_active`.
    pub connections: Gauge,
    /// The counters the dashboard reads back.
    pub stats: Stats,
    /// Per limit, the clients rejected most in the last ten minutes
    /// (`GET /top`).
    pub top: TopOffenders,
}

/// The top-offender sketches of every limit, by name: at most
/// 1,000 limits (names come from configs; a flood of clients adds
/// none).
#[derive(Debug, Default)]
pub struct TopOffenders(Mutex<HashMap<Arc<str>, top::Offenders>>);

/// Limits whose offenders are kept at most.
const TOP_LIMITS: usize = 1_000;

impl TopOffenders {
    /// One rejection of the client `key` by `limit`; `display` names it
    /// (asked only when it enters a summary).
    pub fn rejected(&self, limit: &Arc<str>, key: StoreKey, display: impl FnOnce() -> String) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut table = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !table.contains_key(limit) && table.len() >= TOP_LIMITS {
            return;
        }
        table
            .entry(limit.clone())
            .or_default()
            .rejected(key, display, now);
    }

    /// Each limit's `n` clients rejected most in the last ten minutes, by
    /// limit name (limits without a rejection left out).
    pub fn top(&self, n: usize) -> std::collections::BTreeMap<String, Vec<top::Offender>> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let table = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        table
            .iter()
            .map(|(name, o)| (name.to_string(), o.top(n, now)))
            .filter(|(_, list)| !list.is_empty())
            .collect()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    ///
    /// Why one function: one registration per metric, in the order
    /// `/metrics` lists them, each with its help text.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let r = &mut registry;
        let metrics = Metrics {
            requests: registered(
                r,
                "tollgate_requests",
                "Requests answered, by route and status",
                Family::<RequestLabels, Counter>::default(),
            ),
            request_duration: registered::<Histograms<RouteLabels>>(
                r,
                "tollgate_request_duration_seconds",
                "Time from the request head to the end of the response, by route",
                Family::new_with_constructor(latency_histogram),
            ),
            decisions: registered(
                r,
                "tollgate_limit_decisions",
                "Limit decisions, by route, limit and decision",
                Family::<DecisionLabels, Counter>::default(),
            ),
            lockouts: registered(
                r,
                "tollgate_lockouts",
                "Lockouts started, by limit",
                Family::<LimitLabels, Counter>::default(),
            ),
            auth: registered(
                r,
                "tollgate_auth",
                "Authentication outcomes, by route and outcome",
                Family::<AuthLabels, Counter>::default(),
            ),
            cost_settlements: registered(
                r,
                "tollgate_cost_settlements",
                "Cost limits' settlements, by limit and outcome",
                Family::<SettlementLabels, Counter>::default(),
            ),
            leases: registered(
                r,
                "tollgate_leases",
                "Leased limits' leases, by limit and outcome (taken, empty, returned, stranded)",
                Family::<LeaseLabels, Counter>::default(),
            ),
            cost_units: registered(
                r,
                "tollgate_cost_units",
                "Cost limits' units, reserved at admission and settled, by limit",
                Family::<CostUnitLabels, Counter>::default(),
            ),
            upstream_requests: registered(
                r,
                "tollgate_upstream_requests",
                "Attempts sent upstream, by upstream, target and outcome",
                Family::<UpstreamLabels, Counter>::default(),
            ),
            upstream_duration: registered::<Histograms<UpstreamNameLabels>>(
                r,
                "tollgate_upstream_duration_seconds",
                "Time until the upstream's response head, by upstream",
                Family::new_with_constructor(latency_histogram),
            ),
            upstream_healthy: registered(
                r,
                "tollgate_upstream_healthy",
                "Whether an upstream target is up (1) or down (0)",
                Family::<TargetLabels, Gauge>::default(),
            ),
            healthy_series: Mutex::default(),
            store_duration: registered::<Histograms<StoreLabels>>(
                r,
                "tollgate_store_duration_seconds",
                "Limit store calls, by backend and outcome",
                Family::new_with_constructor(latency_histogram),
            ),
            store_errors: registered(
                r,
                "tollgate_store_errors",
                "Limit store calls that failed, by backend",
                Family::<BackendLabels, Counter>::default(),
            ),
            spans: span_counters(r),
            reloads: registered(
                r,
                "tollgate_config_reloads",
                "Config reloads, by result",
                Family::<ReloadLabels, Counter>::default(),
            ),
            generation: registered(
                r,
                "tollgate_config_generation",
                "Generation of the config in force",
                Gauge::default(),
            ),
            connections: registered(
                r,
                "tollgate_connections_active",
                "Client connections open now",
                Gauge::default(),
            ),
            stats: Stats::new(),
            top: TopOffenders::default(),
            registry,
        };
        // Both outcomes exist from the start, at 0.
        for result in ["success", "failure"] {
            let _ = metrics.reloads.get_or_create(&ReloadLabels { result });
        }
        metrics
    }

    /// Count one reload with its result.
    pub fn reload(&self, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
        self.stats.reload(ok);
    }

    /// Count one answered request.
    pub fn request(&self, route: &Arc<str>, status: u16, took: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.clone(),
                status,
            })
            .inc();
        self.request_duration
            .get_or_create(&RouteLabels {
                route: route.clone(),
            })
            .observe(took.as_secs_f64());
        self.stats.request(route, took);
    }

    /// Count one answered request of a route through its handles: as
    /// [`Metrics::request`], without the label lookups.
    pub fn route_request(
        &self,
        handles: &RouteMetrics,
        route: &Arc<str>,
        status: u16,
        took: Duration,
    ) {
        let h = handles.resolved.get_or_init(|| RouteHandles {
            duration: self
                .request_duration
                .get_or_create(&RouteLabels {
                    route: route.clone(),
                })
                .clone(),
            statuses: Default::default(),
            stats: self.stats.route(route),
        });
        match COMMON_STATUSES.iter().position(|&s| s == status) {
            Some(i) => h.statuses[i]
                .get_or_init(|| {
                    self.requests
                        .get_or_create(&RequestLabels {
                            route: route.clone(),
                            status,
                        })
                        .clone()
                })
                .inc(),
            None => self
                .requests
                .get_or_create(&RequestLabels {
                    route: route.clone(),
                    status,
                })
                .inc(),
        };
        h.duration.observe(took.as_secs_f64());
        if let Some(stats) = &h.stats {
            stats.request(took);
        }
    }

    /// Count one decision of the route's limit number `index` (in the
    /// route's order) named `limit`: as [`Metrics::decision`], without the
    /// label lookups.
    pub fn route_decision(
        &self,
        handles: &RouteMetrics,
        route: &Arc<str>,
        index: usize,
        limit: &Arc<str>,
        decision: DecisionKind,
    ) {
        let (Some(h), Some(d)) = (handles.limits.get(index), decision.per_limit_index()) else {
            return self.decision(route, limit, decision);
        };
        h.decisions[d]
            .get_or_init(|| {
                self.decisions
                    .get_or_create(&DecisionLabels {
                        route: route.clone(),
                        limit: limit.clone(),
                        decision: decision.label(),
                    })
                    .clone()
            })
            .inc();
        if let Some(stats) = h.stats.get_or_init(|| self.stats.limit(limit)) {
            stats.decision(decision);
        }
    }

    /// Count one request of `route` rejected by its limits (`locked_out`:
    /// because the client is locked out), for the dashboard.
    pub fn rejection(&self, route: &Arc<str>, locked_out: bool) {
        self.stats.rejection(route, locked_out);
    }

    /// Count one lockout of `limit` started.
    pub fn lockout(&self, limit: &Arc<str>) {
        self.lockouts
            .get_or_create(&LimitLabels {
                limit: limit.clone(),
            })
            .inc();
        self.stats.lockout(limit);
    }

    /// Count one authentication outcome of a request to `route` (its
    /// label: `AuthOutcome::label`); `refused`: the route turned the
    /// request away for it (the dashboard counts those).
    pub fn auth(&self, route: &Arc<str>, outcome: &'static str, refused: bool) {
        self.auth
            .get_or_create(&AuthLabels {
                route: route.clone(),
                outcome,
            })
            .inc();
        if refused {
            self.stats.auth_refused(route);
        }
    }

    /// Count one settlement of a cost limit.
    pub fn settlement(&self, limit: &Arc<str>, outcome: &'static str) {
        self.cost_settlements
            .get_or_create(&SettlementLabels {
                limit: limit.clone(),
                outcome,
            })
            .inc();
    }

    /// Count one lease event of a leased limit.
    pub fn lease(&self, limit: &Arc<str>, event: tollgate_limit::LeaseEvent) {
        self.leases
            .get_or_create(&LeaseLabels {
                limit: limit.clone(),
                outcome: event.as_str(),
            })
            .inc();
    }

    /// Count a cost limit's units: `reserved` or `settled`.
    pub fn cost_units(&self, limit: &Arc<str>, phase: &'static str, units: u64) {
        self.cost_units
            .get_or_create(&CostUnitLabels {
                limit: limit.clone(),
                phase,
            })
            .inc_by(units);
    }

    /// Count one limit decision.
    pub fn decision(&self, route: &Arc<str>, limit: &Arc<str>, decision: DecisionKind) {
        self.decisions
            .get_or_create(&DecisionLabels {
                route: route.clone(),
                limit: limit.clone(),
                decision: decision.label(),
            })
            .inc();
        self.stats.decision(limit, decision);
    }

    /// Count one attempt sent upstream.
    pub fn upstream(
        &self,
        upstream: &Arc<str>,
        target: &Arc<str>,
        outcome: &'static str,
        took: Duration,
    ) {
        self.upstream_requests
            .get_or_create(&UpstreamLabels {
                upstream: upstream.clone(),
                target: target.clone(),
                outcome,
            })
            .inc();
        self.upstream_duration
            .get_or_create(&UpstreamNameLabels {
                upstream: upstream.clone(),
            })
            .observe(took.as_secs_f64());
    }

    /// Count one attempt sent to target number `index` (named `target`) of
    /// the upstream `upstream` through the pool's handles: as
    /// [`Metrics::upstream`], without the label lookups.
    pub fn pool_upstream(
        &self,
        handles: &UpstreamMetrics,
        upstream: &Arc<str>,
        (index, target): (usize, &Arc<str>),
        outcome: &'static str,
        took: Duration,
    ) {
        let (Some(attempts), Some(o)) = (
            handles.attempts.get(index),
            UPSTREAM_OUTCOMES.iter().position(|&x| x == outcome),
        ) else {
            return self.upstream(upstream, target, outcome, took);
        };
        attempts[o]
            .get_or_init(|| {
                self.upstream_requests
                    .get_or_create(&UpstreamLabels {
                        upstream: upstream.clone(),
                        target: target.clone(),
                        outcome,
                    })
                    .clone()
            })
            .inc();
        handles
            .duration
            .get_or_init(|| {
                self.upstream_duration
                    .get_or_create(&UpstreamNameLabels {
                        upstream: upstream.clone(),
                    })
                    .clone()
            })
            .observe(took.as_secs_f64());
    }

    /// Set `tollgate_upstream_healthy` to these `(upstream, target, up)`:
    /// the series of targets not among them (a reload removed them) go.
    /// The admin API calls it before each rendering, so a scrape always
    /// sees the health in force then (an ejection ends without an event).
    pub fn upstream_health(&self, targets: impl IntoIterator<Item = (Arc<str>, Arc<str>, bool)>) {
        let mut series = self
            .healthy_series
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut now = HashSet::with_capacity(series.len());
        for (upstream, target, up) in targets {
            let labels = TargetLabels { upstream, target };
            self.upstream_healthy
                .get_or_create(&labels)
                .set(i64::from(up));
            now.insert(labels);
        }
        for gone in series.difference(&now) {
            self.upstream_healthy.remove(gone);
        }
        *series = now;
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The limiter's store calls reach the store metrics
/// (`tollgate_store_duration_seconds`, `tollgate_store_errors_total`).
/// The span export's counters, registered; both drop reasons exist from
/// the start, at 0.
fn span_counters(r: &mut Registry) -> SpanCounters {
    let exported = registered(
        r,
        "tollgate_spans_exported",
        "Spans the OTLP collector accepted",
        Counter::default(),
    );
    let dropped = registered(
        r,
        "tollgate_spans_dropped",
        "Spans not exported, by reason (queue_full, export_failed)",
        Family::<SpanDropLabels, Counter>::default(),
    );
    let reason = |reason| dropped.get_or_create(&SpanDropLabels { reason }).clone();
    SpanCounters {
        exported,
        queue_full: reason("queue_full"),
        export_failed: reason("export_failed"),
    }
}

impl tollgate_limit::Observer for Metrics {
    /// Count one store call of `backend` that took `took`.
    fn store_call(&self, backend: &'static str, ok: bool, took: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        self.store_duration
            .get_or_create(&StoreLabels { backend, outcome })
            .observe(took.as_secs_f64());
        if !ok {
            self.store_errors
                .get_or_create(&BackendLabels { backend })
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The series lines of `/metrics` for `tollgate_requests_total`, the
    /// duration count and the decisions.
    fn request_lines(m: &Metrics) -> Vec<String> {
        series(
            m,
            &[
                "tollgate_requests_total",
                "tollgate_request_duration_seconds_count",
                "tollgate_limit_decisions_total",
            ],
        )
    }

    /// The series lines of `/metrics` that start with one of `names`, sorted.
    fn series(m: &Metrics, names: &[&str]) -> Vec<String> {
        let mut lines: Vec<String> = m
            .render()
            .lines()
            .filter(|l| names.iter().any(|n| l.starts_with(n)))
            .map(str::to_owned)
            .collect();
        // Series order follows hash maps: compare as sets.
        lines.sort();
        lines
    }

    #[test]
    fn route_handles_count_what_label_lookups_count() {
        let route: Arc<str> = Arc::from("api");
        let took = Duration::from_micros(300);
        let (by_label, by_handle) = (Metrics::new(), Metrics::new());
        let handles = RouteMetrics::new(0);
        // A common status (kept at hand) and a rare one (looked up).
        for status in [200, 200, 418, 429] {
            by_label.request(&route, status, took);
            by_handle.route_request(&handles, &route, status, took);
        }
        let handles = RouteMetrics::new(2);
        let limits: [Arc<str>; 2] = [Arc::from("per_ip"), Arc::from("global")];
        for (i, decision) in [
            (0, DecisionKind::Allowed),
            (0, DecisionKind::Allowed),
            (1, DecisionKind::Rejected),
            // Not a limit's kind: looked up by label, not kept at hand.
            (0, DecisionKind::NotApplied),
        ] {
            by_label.decision(&route, &limits[i], decision);
            by_handle.route_decision(&handles, &route, i, &limits[i], decision);
        }
        let lines = request_lines(&by_handle);
        assert!(lines.contains(
            &r#"tollgate_limit_decisions_total{route="api",limit="per_ip",decision="allowed"} 2"#
                .to_owned()
        ));
        let snapshot = by_handle.stats.snapshot();
        assert_eq!(snapshot.limits[&limits[0]].decisions[0], 2);
        assert_eq!(snapshot.limits[&limits[1]].decisions[1], 1);
        assert_eq!(lines, request_lines(&by_label));
        assert!(
            lines.contains(&r#"tollgate_requests_total{route="api",status="200"} 2"#.to_owned())
        );
        assert!(
            lines.contains(&r#"tollgate_requests_total{route="api",status="418"} 1"#.to_owned())
        );
        assert!(
            lines.contains(&r#"tollgate_request_duration_seconds_count{route="api"} 4"#.to_owned())
        );
        let stats = by_handle.stats.snapshot();
        assert_eq!(stats.routes[&route].requests, 4);
    }

    #[test]
    fn upstream_handles_count_what_label_lookups_count() {
        let (by_label, by_handle) = (Metrics::new(), Metrics::new());
        let handles = UpstreamMetrics::new(2);
        let (u, a, b): (Arc<str>, Arc<str>, Arc<str>) =
            ("u".into(), "http://a:1".into(), "http://b:1".into());
        let took = Duration::from_millis(2);
        for (i, t, outcome) in [
            (0, &a, "response"),
            (0, &a, "response"),
            (1, &b, "timeout"),
            (0, &a, "error"),
            (5, &b, "response"),
        ] {
            by_label.upstream(&u, t, outcome, took);
            by_handle.pool_upstream(&handles, &u, (i, t), outcome, took);
        }
        let lines = |m: &Metrics| {
            series(
                m,
                &[
                    "tollgate_upstream_requests_total",
                    "tollgate_upstream_duration_seconds_count",
                ],
            )
        };
        assert_eq!(lines(&by_handle), lines(&by_label));
        assert!(lines(&by_handle).contains(
            &r#"tollgate_upstream_requests_total{upstream="u",target="http://a:1",outcome="response"} 2"#
                .to_owned()
        ));
    }

    #[test]
    fn upstream_health_shows_exactly_the_targets_given() {
        let m = Metrics::new();
        let healthy = |m: &Metrics| -> Vec<String> {
            let mut lines: Vec<String> = m
                .render()
                .lines()
                .filter(|l| l.starts_with("tollgate_upstream_healthy{"))
                .map(str::to_owned)
                .collect();
            lines.sort();
            lines
        };
        let (u, a, b): (Arc<str>, Arc<str>, Arc<str>) =
            ("u".into(), "http://a:1".into(), "http://b:1".into());
        m.upstream_health([(u.clone(), a.clone(), true), (u.clone(), b.clone(), false)]);
        assert_eq!(
            healthy(&m),
            [
                r#"tollgate_upstream_healthy{upstream="u",target="http://a:1"} 1"#,
                r#"tollgate_upstream_healthy{upstream="u",target="http://b:1"} 0"#,
            ]
        );
        m.upstream_health([(u, a, false)]);
        assert_eq!(
            healthy(&m),
            [r#"tollgate_upstream_healthy{upstream="u",target="http://a:1"} 0"#]
        );
    }
}
