//! `tollgate simulate` (SPEC §9): replay a request log through a config's
//! routes and limits on a virtual clock, and report what the config would
//! have throttled, before it goes live.
//!
//! Each request of the log goes through the gateway's own functions, not a
//! copy of them: the client's identity ([`Client::identify`]: trusted
//! proxies, `X-Forwarded-For`), admission ([`admission::admit`]: deny list,
//! Host, method, request-target, path normalisation, the route), the
//! declared body size, then the route's limits as the limiter plans them
//! ([`plan::plan`]: exemptions, client keys, `on_missing_key`, overrides),
//! decided by a fresh [`MemoryStore`] in one all-or-nothing step and read
//! back by [`plan::verdict`]. Whatever `store:` the config names, the
//! replay uses the memory store: both stores give the same decisions (SPEC
//! §6).
//!
//! A line becomes an HTTP/1.1 request with its `host` as `Host` (HTTP/1.0,
//! which may omit it, when the line has none), its `path` as the
//! request-target and its `headers`; `--decisions` prints what the gateway
//! would answer each one.
//!
//! # The virtual clock
//!
//! A request is decided at its own `ts`. A line earlier than one before it
//! (logs written by several threads are out of order by a little) is
//! decided at the latest time seen so far, `max(previous, ts)`, so the
//! clock never runs backwards; the report counts such lines and the
//! largest gap. Sort a log that is out of order by more than a second or so.
//!
//! # Differences from the live gateway
//!
//! - A `concurrency` limit's lease is held for zero time: it is released
//!   right after the decision (the log says when a request came, not when
//!   its response ended), so only requests of the same instant compete.
//! - `max_delay` delays are not waited: a delayed request counts as allowed
//!   (and delayed), at its arrival time.
//! - The local deny cache is not used: it only spares store calls, and
//!   answers only what the store would (see `limit::engine`).
//! - Access-log lines carry no headers nor query string: limits keyed on
//!   them see them missing and `on_missing_key` applies.
//!
//! # What is counted
//!
//! Per route: requests, allowed (of which delayed, and shadow-rejected: a
//! shadow limit would have rejected), rejected (`rate_limited`), locked out,
//! distinct clients and distinct clients locked out, and the busiest
//! clients. Requests that match no route count under `(no route)`; requests
//! answered before routing count as `denied` (`server.deny`),
//! `invalid_path` (a request-target or path the gateway answers 400) or
//! `refused` (`TRACE`/`CONNECT`, Host, head size).
//!
//! Per limit (a limit shared by several routes is one state, one line):
//! requests it decided, allowed (of which exempt, skipped by
//! `on_missing_key: skip`, delayed, shadow-rejected, and not consumed
//! because another limit of the route rejected the request), rejected (of
//! which `on_missing_key: deny`), locked out, lockouts started, distinct
//! client keys and keys locked out, and the busiest keys. A request
//! rejected by `on_missing_key: deny` is counted under that limit only: the
//! gateway decides none of the route's other limits for it.

mod input;
mod report;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use http::{header, HeaderName, HeaderValue, Method, Uri, Version};
use tollgate_limit::store::memory::MemoryStore;
use tollgate_limit::verdict::{verdict, Verdict};
use tollgate_limit::{Micros, Status, StoreKey};

use crate::admission;
use crate::config::{Config, StoreBackend};
use crate::error::GatewayError;
use crate::identity::Client;
use crate::limit::key::RequestView;
use crate::limit::plan::{self, NotApplied};
use crate::runtime::{Action, Runtime};

pub use input::{parse_line, parse_rfc3339, Line, LineError, Request};
pub use report::{Busy, LimitReport, LineReport, Report, RouteReport};

/// How many malformed lines are kept (with their numbers) for the report.
pub const ERRORS_KEPT: usize = 20;

/// How many clients the report lists per route and per limit.
pub const BUSIEST: usize = 5;

/// The name of the line counting requests that match no route.
pub const NO_ROUTE: &str = "(no route)";

/// Expired limit state is swept from the store every this much virtual time.
const SWEEP_EVERY: Micros = 60_000_000;

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

struct KeyStats {
    display: Box<str>,
    counts: ClientCounts,
}

struct LimitStats {
    name: Arc<str>,
    algorithm: &'static str,
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

/// What the gateway would answer one request of the log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Answer {
    /// The line's number (1-based).
    pub line: u64,
    /// The route it matched.
    pub route: Option<String>,
    /// Forwarded to the route's upstream (which then answers).
    pub upstream: bool,
    /// The status the gateway answers itself (`None` when forwarded).
    pub status: Option<u16>,
    /// The gateway's `error` string, when it refuses the request.
    pub error: Option<&'static str>,
    /// The limit that rejected it.
    pub limit: Option<String>,
}

impl Answer {
    fn refused(line: u64, error: &GatewayError) -> Answer {
        let (status, code) = error.status_and_code();
        Answer {
            line,
            route: None,
            upstream: false,
            status: Some(status.as_u16()),
            error: Some(code),
            limit: None,
        }
    }
}

/// The virtual clock: never runs backwards.
#[derive(Debug, Default)]
struct Clock {
    now: Micros,
    first: Option<Micros>,
    out_of_order: u64,
    max_lag: Micros,
    last_sweep: Micros,
}

impl Clock {
    fn tick(&mut self, ts: Micros) -> Micros {
        match self.first {
            None => {
                self.first = Some(ts);
                self.now = ts;
                self.last_sweep = ts;
            }
            Some(_) if ts < self.now => {
                self.out_of_order += 1;
                self.max_lag = self.max_lag.max(self.now - ts);
            }
            Some(_) => self.now = ts,
        }
        self.now
    }
}

/// A replay in progress: feed it lines, then ask for the [`Report`].
pub struct Simulator {
    runtime: Runtime,
    store: MemoryStore,
    clock: Clock,
    /// For each route, the index in `limits` of each of its limits.
    route_limits: Vec<Vec<usize>>,
    routes: Vec<RouteStats>,
    no_route: RouteStats,
    limits: Vec<LimitStats>,
    lines: u64,
    requests: u64,
    not_requests: u64,
    malformed: u64,
    errors: Vec<LineReport>,
    denied: u64,
    invalid_path: u64,
    refused: u64,
    next_lease: u64,
    // Reused per line, so its header map is allocated once.
    req: http::Request<()>,
}

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The runtime could not be built from the config.
    #[error("{file}: {source}")]
    Build {
        /// The config file.
        file: String,
        /// What failed.
        #[source]
        source: crate::runtime::BuildError,
    },
    /// The log could not be opened.
    #[error("cannot open {log}: {error}")]
    Open {
        /// The log as named.
        log: String,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// The log could not be read.
    #[error("cannot read {log}: {error}")]
    Log {
        /// The log as named.
        log: String,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// The report could not be written.
    #[error("cannot write the report: {0}")]
    Output(std::io::Error),
}

impl Simulator {
    /// A simulator for `config`, with empty limit state. The config's
    /// `store:` is ignored: the replay runs on a fresh memory store.
    pub fn new(mut config: Config) -> Result<Simulator, SimulateError> {
        // The memory store needs no network and no async runtime.
        config.store.backend = StoreBackend::Memory;
        let runtime = Runtime::build(config, String::new(), 0, None).map_err(|source| {
            SimulateError::Build {
                file: String::new(),
                source,
            }
        })?;
        let cfg = runtime.config.clone();
        let mut limits: Vec<LimitStats> = cfg
            .limits
            .iter()
            .filter_map(|l| runtime.policies.get(&l.name))
            .map(|p| LimitStats {
                name: p.name.clone(),
                algorithm: p.params.name(),
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
                        source: crate::runtime::BuildError::UnknownLimit(policy.name.to_string()),
                    })?;
                if !limits[i].routes.iter().any(|r| **r == *route.name) {
                    limits[i].routes.push(route.name.to_string());
                }
                ids.push(i);
            }
            route_limits.push(ids);
        }
        let routes = runtime
            .routes
            .iter()
            .map(|r| RouteStats::new(&r.name))
            .collect();
        Ok(Simulator {
            runtime,
            store: MemoryStore::new(),
            clock: Clock::default(),
            route_limits,
            routes,
            no_route: RouteStats::new(NO_ROUTE),
            limits,
            lines: 0,
            requests: 0,
            not_requests: 0,
            malformed: 0,
            errors: Vec::new(),
            denied: 0,
            invalid_path: 0,
            refused: 0,
            next_lease: 0,
            req: http::Request::new(()),
        })
    }

    /// Replay every line of `reader`; `on_error` hears of each malformed
    /// line (its 1-based number and why) as it is met. Fails only when the
    /// reader does.
    pub fn replay<R: BufRead>(
        &mut self,
        mut reader: R,
        mut on_error: impl FnMut(u64, &LineError),
        mut on_answer: impl FnMut(&Answer),
    ) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(4096);
        loop {
            buf.clear();
            if reader.read_until(b'\n', &mut buf)? == 0 {
                return Ok(());
            }
            match self.feed(&buf) {
                Ok(Some(answer)) => on_answer(&answer),
                Ok(None) => {}
                Err(e) => on_error(self.lines, &e),
            }
        }
    }

    /// Replay one line (its line ending may be included): what the gateway
    /// would answer, if it is a request. A malformed line is counted,
    /// remembered (the first [`ERRORS_KEPT`]) and returned.
    pub fn feed(&mut self, line: &[u8]) -> Result<Option<Answer>, LineError> {
        self.lines += 1;
        let mut line = line.trim_ascii();
        if self.lines == 1 {
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            return Ok(None);
        }
        let result = match parse_line(line) {
            Ok(Line::Request(r)) => self.request(&r).map(Some),
            Ok(Line::NotARequest) => {
                self.not_requests += 1;
                Ok(None)
            }
            Err(e) => Err(e),
        };
        if let Err(e) = &result {
            self.malformed += 1;
            if self.errors.len() < ERRORS_KEPT {
                self.errors.push(LineReport {
                    line: self.lines,
                    error: e.to_string(),
                });
            }
        }
        result
    }

    /// Make `r` the request to replay: `self.req`, reused from line to line.
    fn build(&mut self, r: &Request<'_>) -> Result<(), LineError> {
        let method = Method::from_bytes(r.method.as_bytes())
            .map_err(|_| LineError(format!("`method`: not a method: {:?}", r.method)))?;
        let headers = self.req.headers_mut();
        headers.clear();
        for (name, value) in &r.headers {
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| LineError(format!("`headers`: bad header name {name:?}")))?;
            let v = HeaderValue::from_bytes(value.as_bytes())
                .map_err(|_| LineError(format!("`headers`: bad value of {name:?}")))?;
            headers.append(n, v);
        }
        let version = match &r.host {
            Some(host) if !headers.contains_key(header::HOST) => {
                let v = HeaderValue::from_str(host)
                    .map_err(|_| LineError(format!("`host`: not a header value: {host:?}")))?;
                headers.insert(header::HOST, v);
                Version::HTTP_11
            }
            Some(_) => Version::HTTP_11,
            // A request without Host is one an HTTP/1.0 client may send.
            None if headers.contains_key(header::HOST) => Version::HTTP_11,
            None => Version::HTTP_10,
        };
        *self.req.method_mut() = method;
        *self.req.version_mut() = version;
        Ok(())
    }

    /// Replay one request: admission, then the route's limits, as the
    /// gateway runs them.
    fn request(&mut self, r: &Request<'_>) -> Result<Answer, LineError> {
        self.build(r)?;
        let line = self.lines;
        let now = self.clock.tick(r.ts);
        if now >= self.clock.last_sweep.saturating_add(SWEEP_EVERY) {
            self.store.sweep(now);
            self.clock.last_sweep = now;
        }
        self.requests += 1;

        let server = &self.runtime.config.server;
        let client = Client::identify(r.client, self.req.headers(), &server.trusted_proxies);
        // A target the gateway's HTTP parser would not take is a 400 too.
        let Ok(uri) = Uri::try_from(r.path.as_ref()) else {
            self.invalid_path += 1;
            let error = GatewayError::BadRequest {
                reason: "invalid request target",
                close: false,
            };
            return Ok(Answer::refused(line, &error));
        };
        *self.req.uri_mut() = uri;
        let admitted = admission::admit(&self.req, &self.runtime, &client, false).and_then(|a| {
            admission::body_size(self.req.headers(), server.max_body_bytes)?;
            Ok(a)
        });
        let route = match admitted {
            Ok(admitted) => admitted.route,
            Err(error) => {
                match &error {
                    GatewayError::Denied => self.denied += 1,
                    GatewayError::NoRoute => count_unrouted(&mut self.no_route, client.addr),
                    GatewayError::BadRequest { reason, .. }
                        if reason.contains("path") || reason.contains("target") =>
                    {
                        self.invalid_path += 1
                    }
                    _ => self.refused += 1,
                }
                return Ok(Answer::refused(line, &error));
            }
        };
        let mut answer = Answer {
            line,
            route: Some(route.name.to_string()),
            upstream: matches!(route.action, Action::Upstream(_)),
            status: match &route.action {
                Action::Respond { status, .. } => Some(status.as_u16()),
                Action::Upstream(_) => None,
            },
            error: None,
            limit: None,
        };
        let view = RequestView {
            client: client.addr,
            headers: self.req.headers(),
            query: self.req.uri().query(),
            route: &route.name,
            ipv6_prefix: server.ipv6_prefix,
        };
        let stats = &mut self.routes[route.index];
        stats.counts.requests += 1;
        let who = stats.clients.entry(client.addr).or_default();
        who.requests += 1;
        let ids = &self.route_limits[route.index];

        // The route's limits, as the limiter plans them.
        let next_lease = &mut self.next_lease;
        let planned = plan::plan(&route.limits, &view, || {
            *next_lease += 1;
            *next_lease
        });
        let plan = match planned {
            Ok(plan) => plan,
            Err(denied) => {
                let l = &mut self.limits[ids[denied.index]];
                l.counts.requests += 1;
                l.counts.rejected += 1;
                l.missing_key += 1;
                stats.counts.rejected += 1;
                who.rejected += 1;
                let status = route.limit_response.status.as_u16();
                answer.upstream = false;
                answer.status = Some(status);
                answer.error = Some("rate_limited");
                answer.limit = Some(denied.policy.name.to_string());
                return Ok(answer);
            }
        };
        let outcomes = if plan.checks.is_empty() {
            Vec::new()
        } else {
            self.store.decide(&plan.checks, now)
        };
        let verdict = verdict(&outcomes);
        if let Verdict::Allow { .. } = verdict {
            // Leases are held for zero time (see the module doc).
            for check in plan.checks.iter().filter(|c| c.lease != 0) {
                self.store.release(check, now);
            }
        }
        match verdict {
            Verdict::Reject {
                index, locked_out, ..
            } => {
                if locked_out {
                    stats.counts.locked_out += 1;
                    who.locked_out += 1;
                } else {
                    stats.counts.rejected += 1;
                    who.rejected += 1;
                }
                answer.upstream = false;
                answer.status = Some(route.limit_response.status.as_u16());
                answer.error = Some(if locked_out {
                    "locked_out"
                } else {
                    "rate_limited"
                });
                answer.limit = Some(plan.policy(index).name.to_string());
            }
            Verdict::Allow {
                delay,
                shadow_rejected,
            } => {
                stats.counts.allowed += 1;
                stats.counts.delayed += u64::from(delay > 0);
                stats.counts.shadow_rejected += u64::from(shadow_rejected);
            }
        }

        // Each limit's part.
        for &(index, why) in &plan.not_applied {
            let l = &mut self.limits[ids[index]];
            l.counts.requests += 1;
            l.counts.allowed += 1;
            match why {
                NotApplied::Exempt => l.exempt += 1,
                NotApplied::Skipped => l.skipped += 1,
            }
        }
        for (i, o) in outcomes.iter().enumerate() {
            let policy = plan.policy(i);
            let l = &mut self.limits[ids[plan.applied[i]]];
            l.counts.requests += 1;
            let key = l
                .keys
                .entry(plan.checks[i].key)
                .or_insert_with(|| KeyStats {
                    display: policy
                        .display_key(&view)
                        .unwrap_or_default()
                        .into_boxed_str(),
                    counts: ClientCounts::default(),
                });
            key.counts.requests += 1;
            match o.status {
                Status::Allowed => {
                    l.counts.allowed += 1;
                    l.counts.delayed += u64::from(o.delay > 0);
                }
                // (Undecided comes from Redis Cluster only, never here.)
                Status::NotConsumed | Status::Undecided => {
                    l.counts.allowed += 1;
                    l.not_consumed += 1;
                }
                Status::ShadowRejected => {
                    l.counts.allowed += 1;
                    l.counts.shadow_rejected += 1;
                }
                Status::Rejected => {
                    l.counts.rejected += 1;
                    key.counts.rejected += 1;
                }
                Status::LockedOut => {
                    l.counts.locked_out += 1;
                    l.lockouts += u64::from(o.lock_started);
                    key.counts.locked_out += 1;
                }
            }
        }
        Ok(answer)
    }

    /// The figures so far. `source` names the log in the report.
    pub fn report(&self, source: &str) -> Report {
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
        let limits = self
            .limits
            .iter()
            .map(|l| LimitReport {
                name: l.name.to_string(),
                algorithm: l.algorithm.to_owned(),
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
            .collect();
        Report {
            source: source.to_owned(),
            lines: self.lines,
            requests: self.requests,
            not_requests: self.not_requests,
            malformed: self.malformed,
            errors: self.errors.clone(),
            from: self.clock.first.map(report::format_time),
            to: self
                .clock
                .first
                .map(|_| report::format_time(self.clock.now)),
            out_of_order: self.clock.out_of_order,
            out_of_order_max_seconds: self.clock.max_lag as f64 / 1e6,
            denied: self.denied,
            invalid_path: self.invalid_path,
            refused: self.refused,
            routes,
            limits,
        }
    }
}

fn count_unrouted(stats: &mut RouteStats, client: IpAddr) {
    stats.counts.requests += 1;
    stats.clients.entry(client).or_default().requests += 1;
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

/// What `tollgate simulate` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// The report, as aligned tables.
    Text,
    /// The report, as one JSON document (`--json`).
    Json,
    /// One JSON line per request with what the gateway would answer it
    /// (`--decisions`), instead of the report.
    Decisions,
}

/// `tollgate simulate`: replay the log at `log` (`-`: standard input)
/// through the config at `config`, write the report (or each request's
/// answer) to `out`, and tell `diagnostics` of malformed lines (the first
/// [`ERRORS_KEPT`], then how many in all) and of a log out of time order.
/// Fails (exit 1) when the config is invalid or the log cannot be read;
/// malformed lines are skipped, not fatal.
pub fn run(
    config: &Path,
    log: &Path,
    output: Output,
    out: &mut dyn Write,
    diagnostics: &mut dyn Write,
) -> Result<(), SimulateError> {
    let loaded = crate::config::load(config)?;
    let mut sim = Simulator::new(loaded.config).map_err(|e| match e {
        SimulateError::Build { source, .. } => SimulateError::Build {
            file: config.display().to_string(),
            source,
        },
        e => e,
    })?;
    let source = log.display().to_string();
    let mut shown = 0usize;
    let mut on_error = |line: u64, e: &LineError| {
        if shown < ERRORS_KEPT {
            shown += 1;
            let _ = writeln!(diagnostics, "{source}:{line}: {e}");
        }
    };
    let mut written = Ok(());
    let mut on_answer = |answer: &Answer| {
        if output == Output::Decisions && written.is_ok() {
            written = serde_json::to_writer(&mut *out, answer)
                .map_err(std::io::Error::from)
                .and_then(|()| out.write_all(b"\n"));
        }
    };
    let read_error = |error| SimulateError::Log {
        log: source.clone(),
        error,
    };
    if log == Path::new("-") {
        sim.replay(std::io::stdin().lock(), &mut on_error, &mut on_answer)
            .map_err(read_error)?;
    } else {
        let file = std::fs::File::open(log).map_err(|error| SimulateError::Open {
            log: source.clone(),
            error,
        })?;
        sim.replay(
            std::io::BufReader::with_capacity(1 << 16, file),
            &mut on_error,
            &mut on_answer,
        )
        .map_err(read_error)?;
    }
    written.map_err(SimulateError::Output)?;
    let report = sim.report(&source);
    if report.malformed > shown as u64 {
        let _ = writeln!(
            diagnostics,
            "{source}: {} malformed lines in all (the first {shown} shown)",
            report.malformed
        );
    }
    if report.out_of_order_max_seconds > 1.0 {
        let _ = writeln!(
            diagnostics,
            "{source}: warning: not in time order ({} lines up to {:.3} s early, replayed at the latest time seen); sort it by time for a faithful replay",
            report.out_of_order, report.out_of_order_max_seconds
        );
    }
    let text = match output {
        Output::Decisions => String::new(),
        Output::Json => {
            let mut s = serde_json::to_string_pretty(&report)
                .map_err(|e| SimulateError::Output(e.into()))?;
            s.push('\n');
            s
        }
        Output::Text => report.to_text(),
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(SimulateError::Output)
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

    #[test]
    fn the_clock_never_runs_backwards() {
        let mut clock = Clock::default();
        assert_eq!(clock.tick(10), 10);
        assert_eq!(clock.tick(7), 10);
        assert_eq!(clock.tick(4), 10);
        assert_eq!(clock.tick(12), 12);
        assert_eq!(
            (clock.first, clock.out_of_order, clock.max_lag),
            (Some(10), 2, 6)
        );
    }
}
