//! Prometheus metrics: one registry per process, rendered at admin
//! `GET /metrics`. Label values are route, upstream and outcome names from the
//! config, never client-supplied values, so cardinality stays bounded.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of `tollgate_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The route's name, or empty when no route matched.
    pub route: String,
    /// The response status code.
    pub status: u16,
}

/// Labels of `tollgate_config_reloads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `success` or `failure`.
    pub result: &'static str,
}

/// Every metric the gateway exports.
pub struct Metrics {
    registry: Registry,
    /// Requests answered, by route and status.
    pub requests: Family<RequestLabels, Counter>,
    /// Config reloads by result.
    pub reloads: Family<ReloadLabels, Counter>,
    /// The generation of the config in force.
    pub generation: Gauge,
    /// Client connections open now.
    pub connections: Gauge,
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "tollgate_requests",
            "Requests answered, by route and status",
            requests.clone(),
        );
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "tollgate_config_reloads",
            "Config reloads, by result",
            reloads.clone(),
        );
        let generation = Gauge::default();
        registry.register(
            "tollgate_config_generation",
            "Generation of the config in force",
            generation.clone(),
        );
        let connections = Gauge::default();
        registry.register(
            "tollgate_connections_active",
            "Client connections open now",
            connections.clone(),
        );
        // Both outcomes exist from the start, at 0.
        for result in ["success", "failure"] {
            let _ = reloads.get_or_create(&ReloadLabels { result });
        }
        Metrics {
            registry,
            requests,
            reloads,
            generation,
            connections,
        }
    }

    /// Count one reload with its result.
    pub fn reload(&self, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
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
