//! Tallying: each replayed request ([`Replayed`]) added to the counts the
//! report is made of, per route, per limit, per client and client key.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use tollgate_limit::{DecisionKind, StoreKey};

use super::decide::{LimitPart, Outcome, Replayed, RouteVerdict, Routed};
use super::report::{Busy, LimitReport, RouteReport};
use super::{request_view, SimulateError, BUSIEST, NO_ROUTE};
use crate::error::GatewayError;
use crate::runtime::{BuildError, Runtime};

/// One client's (or client key's) figures.
#[derive(Debug, Default, Clone, Copy)]
struct ClientCounts {
    requests: u64,
    rejected: u64,
    locked_out: u64,
}

/// The decisions of one route or one limit.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    requests: u64,
    allowed: u64,
    delayed: u64,
    shadow_rejected: u64,
    rejected: u64,
    locked_out: u64,
}

/// A route's counts, and its clients'.
struct RouteStats {
    name: String,
    counts: Counts,
    clients: HashMap<IpAddr, ClientCounts>,
}

impl RouteStats {
    fn new(name: &str) -> Self {
        RouteStats {
            name: name.to_owned(),
            counts: Counts::default(),
            clients: HashMap::new(),
        }
    }
}

/// A client key's counts, with the key as the report shows it.
struct KeyStats {
    display: Box<str>,
    counts: ClientCounts,
}

/// A limit's counts, and its client keys'.
struct LimitStats {
    name: Arc<str>,
    algorithm: &'static str,
    per_key: Option<String>,
    shadow: bool,
    routes: Vec<String>,
    counts: Counts,
    exempt: u64,
    skipped: u64,
    not_consumed: u64,
    missing_key: u64,
    lockouts: u64,
    keys: HashMap<StoreKey, KeyStats>,
}

impl LimitStats {
    /// A decision of the store for the client key `key`, whose display
    /// form `display` gives (asked only for a key seen the first time).
    fn decided(
        &mut self,
        key: StoreKey,
        kind: Option<DecisionKind>,
        lock_started: bool,
        display: impl FnOnce() -> String,
    ) {
        let key = self.keys.entry(key).or_insert_with(|| KeyStats {
            display: display().into_boxed_str(),
            counts: ClientCounts::default(),
        });
        key.counts.requests += 1;
        match kind {
            Some(DecisionKind::Allowed) => self.counts.allowed += 1,
            Some(DecisionKind::Delayed) => {
                self.counts.allowed += 1;
                self.counts.delayed += 1;
            }
            Some(DecisionKind::ShadowRejected) => {
                self.counts.allowed += 1;
                self.counts.shadow_rejected += 1;
            }
            Some(DecisionKind::Rejected) => {
                self.counts.rejected += 1;
                key.counts.rejected += 1;
            }
            Some(DecisionKind::LockedOut) => {
                self.counts.locked_out += 1;
                self.lockouts += u64::from(lock_started);
                key.counts.locked_out += 1;
            }
            // Allowed here, but another limit rejected the request. (The
            // kinds of a whole request, none and unavailable, are never
            // one limit's.)
            None | Some(DecisionKind::NotApplied | DecisionKind::Unavailable) => {
                self.counts.allowed += 1;
                self.not_consumed += 1;
            }
        }
    }
}

/// The counts so far.
pub(super) struct Tally {
    /// Requests replayed.
    pub(super) requests: u64,
    /// For each route, the index in `limits` of each of its limits.
    route_limits: Vec<Vec<usize>>,
    routes: Vec<RouteStats>,
    no_route: RouteStats,
    limits: Vec<LimitStats>,
    pub(super) denied: u64,
    pub(super) invalid_path: u64,
    pub(super) refused: u64,
}

impl Tally {
    /// Zero counts for the routes and limits of `runtime` (a limit shared
    /// by several routes is one line).
    pub(super) fn new(runtime: &Runtime) -> Result<Tally, SimulateError> {
        let mut limits: Vec<LimitStats> = runtime
            .config
            .limits
            .iter()
            .filter_map(|l| runtime.policies.get(&l.name))
            .map(|p| LimitStats {
                name: p.name.clone(),
                algorithm: p.params.name(),
                per_key: p.per_key.as_ref().map(per_key_note),
                shadow: p.shadow,
                routes: Vec::new(),
                counts: Counts::default(),
                exempt: 0,
                skipped: 0,
                not_consumed: 0,
                missing_key: 0,
                lockouts: 0,
                keys: HashMap::new(),
            })
            .collect();
        let index: HashMap<Arc<str>, usize> = limits
            .iter()
            .enumerate()
            .map(|(i, l)| (l.name.clone(), i))
            .collect();
        let mut route_limits = Vec::with_capacity(runtime.routes.len());
        for route in &runtime.routes {
            let mut ids = Vec::with_capacity(route.limits.len());
            for policy in &route.limits {
                let i = *index
                    .get(&policy.name)
                    .ok_or_else(|| SimulateError::Build {
                        file: String::new(),
                        source: BuildError::UnknownLimit(policy.name.to_string()),
                    })?;
                if !limits[i].routes.iter().any(|r| **r == *route.name) {
                    limits[i].routes.push(route.name.to_string());
                }
                ids.push(i);
            }
            route_limits.push(ids);
        }
        Ok(Tally {
            requests: 0,
            route_limits,
            routes: (runtime.routes.iter())
                .map(|r| RouteStats::new(&r.name))
                .collect(),
            no_route: RouteStats::new(NO_ROUTE),
            limits,
            denied: 0,
            invalid_path: 0,
            refused: 0,
        })
    }

    /// Count one replayed request; `req` is the request it was replayed
    /// from, for the display form of a client key seen the first time.
    pub(super) fn add(&mut self, replayed: &Replayed, req: &http::Request<()>, ipv6_prefix: u8) {
        self.requests += 1;
        match &replayed.outcome {
            Outcome::Refused(error) => self.refusal(error, replayed.client),
            Outcome::RouteRefused { route, .. } => {
                // Refused by the route's authentication or a cost estimate:
                // a request of the route that its limits never saw.
                self.refused += 1;
                let stats = &mut self.routes[route.index];
                stats.counts.requests += 1;
                stats.clients.entry(replayed.client).or_default().requests += 1;
            }
            Outcome::Routed(routed) => {
                self.route(routed, replayed.client);
                self.limits(routed, |index| {
                    let view = request_view(req, replayed.client, &routed.route, ipv6_prefix);
                    routed.route.limits[index].display_key(&view)
                });
            }
        }
    }

    /// A request answered before any route, or by none.
    fn refusal(&mut self, error: &GatewayError, client: IpAddr) {
        match error {
            GatewayError::Denied => self.denied += 1,
            GatewayError::NoRoute => {
                self.no_route.counts.requests += 1;
                self.no_route.clients.entry(client).or_default().requests += 1;
            }
            GatewayError::BadRequest { reason, .. }
                if reason.contains("path") || reason.contains("target") =>
            {
                self.invalid_path += 1
            }
            _ => self.refused += 1,
        }
    }

    /// The route's part: its verdict, for it and for the client.
    fn route(&mut self, routed: &Routed, client: IpAddr) {
        let stats = &mut self.routes[routed.route.index];
        stats.counts.requests += 1;
        let who = stats.clients.entry(client).or_default();
        who.requests += 1;
        match routed.verdict {
            RouteVerdict::Allowed {
                delayed,
                shadow_rejected,
            } => {
                stats.counts.allowed += 1;
                stats.counts.delayed += u64::from(delayed);
                stats.counts.shadow_rejected += u64::from(shadow_rejected);
            }
            RouteVerdict::Rejected {
                locked_out: true, ..
            } => {
                stats.counts.locked_out += 1;
                who.locked_out += 1;
            }
            RouteVerdict::Rejected {
                locked_out: false, ..
            } => {
                stats.counts.rejected += 1;
                who.rejected += 1;
            }
        }
    }

    /// Each limit's part; `display` gives the display form of the client
    /// key of the route's limit at an index.
    fn limits(&mut self, routed: &Routed, display: impl Fn(usize) -> Option<String>) {
        let ids = &self.route_limits[routed.route.index];
        for &(index, part) in &routed.limits {
            let l = &mut self.limits[ids[index]];
            l.counts.requests += 1;
            match part {
                LimitPart::Exempt => {
                    l.counts.allowed += 1;
                    l.exempt += 1;
                }
                LimitPart::Skipped => {
                    l.counts.allowed += 1;
                    l.skipped += 1;
                }
                LimitPart::MissingKey => {
                    l.counts.rejected += 1;
                    l.missing_key += 1;
                }
                LimitPart::Decided {
                    key,
                    kind,
                    lock_started,
                } => l.decided(key, kind, lock_started, || {
                    display(index).unwrap_or_default()
                }),
            }
        }
    }

    /// The routes' figures, in config order, then `(no route)`.
    pub(super) fn route_reports(&self) -> Vec<RouteReport> {
        let route = |s: &RouteStats| RouteReport {
            name: s.name.clone(),
            requests: s.counts.requests,
            allowed: s.counts.allowed,
            delayed: s.counts.delayed,
            shadow_rejected: s.counts.shadow_rejected,
            rejected: s.counts.rejected,
            locked_out: s.counts.locked_out,
            clients: s.clients.len() as u64,
            clients_locked_out: s.clients.values().filter(|c| c.locked_out > 0).count() as u64,
            busiest: busiest(s.clients.iter().map(|(ip, c)| (ip.to_string(), *c))),
        };
        let mut routes: Vec<RouteReport> = self.routes.iter().map(route).collect();
        routes.push(route(&self.no_route));
        routes
    }

    /// The limits' figures, in config order.
    pub(super) fn limit_reports(&self) -> Vec<LimitReport> {
        self.limits
            .iter()
            .map(|l| LimitReport {
                name: l.name.to_string(),
                algorithm: l.algorithm.to_owned(),
                per_key: l.per_key.clone(),
                mode: if l.shadow { "shadow" } else { "enforce" }.to_owned(),
                routes: l.routes.clone(),
                requests: l.counts.requests,
                allowed: l.counts.allowed,
                exempt: l.exempt,
                skipped: l.skipped,
                delayed: l.counts.delayed,
                shadow_rejected: l.counts.shadow_rejected,
                not_consumed: l.not_consumed,
                rejected: l.counts.rejected,
                missing_key: l.missing_key,
                locked_out: l.counts.locked_out,
                lockouts: l.lockouts,
                clients: l.keys.len() as u64,
                clients_locked_out: l.keys.values().filter(|k| k.counts.locked_out > 0).count()
                    as u64,
                busiest: busiest(l.keys.values().map(|k| (k.display.to_string(), k.counts))),
            })
            .collect()
    }
}

/// The [`BUSIEST`] clients by requests (ties: by name).
fn busiest(clients: impl Iterator<Item = (String, ClientCounts)>) -> Vec<Busy> {
    // Keep the top few while scanning: there may be millions of clients.
    let mut top: Vec<(String, ClientCounts)> = Vec::with_capacity(BUSIEST + 1);
    let before = |a: &(String, ClientCounts), b: &(String, ClientCounts)| {
        a.1.requests > b.1.requests || (a.1.requests == b.1.requests && a.0 < b.0)
    };
    for c in clients {
        if top.len() == BUSIEST && !top.last().is_some_and(|last| before(&c, last)) {
            continue;
        }
        let at = top.iter().position(|t| before(&c, t)).unwrap_or(top.len());
        top.insert(at, c);
        top.truncate(BUSIEST);
    }
    top.into_iter()
        .map(|(client, c)| Busy {
            client,
            requests: c.requests,
            rejected: c.rejected,
            locked_out: c.locked_out,
        })
        .collect()
}

/// What the simulation does with a limit's per-key values: attributes are
/// read as the gateway reads them; the store's values are not known here.
fn per_key_note(per_key: &crate::config::PerKeyLimits) -> String {
    let names = per_key.names().join(", ");
    if per_key.in_store() {
        format!("{names} per key from the store: not simulated (simulate has no store); every key gets the default")
    } else {
        format!("{names} per key from the consumers' attributes, as the gateway reads them (the default where a consumer has none)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busiest_keeps_the_top_five_by_requests_then_name() {
        let c = |name: &str, requests: u64| {
            (
                name.to_owned(),
                ClientCounts {
                    requests,
                    rejected: requests / 2,
                    locked_out: 0,
                },
            )
        };
        let top = busiest(
            [
                c("h", 1),
                c("b", 7),
                c("a", 3),
                c("g", 9),
                c("c", 7),
                c("z", 3),
                c("d", 2),
                c("e", 3),
            ]
            .into_iter(),
        );
        let names: Vec<(&str, u64, u64)> = top
            .iter()
            .map(|b| (b.client.as_str(), b.requests, b.rejected))
            .collect();
        assert_eq!(
            names,
            [
                ("g", 9, 4),
                ("b", 7, 3),
                ("c", 7, 3),
                ("a", 3, 1),
                ("e", 3, 1)
            ]
        );
        assert!(busiest(std::iter::empty()).is_empty());
    }
}
