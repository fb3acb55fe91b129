//! `tollgate simulate` (docs/simulation.md): replay a request log through
//! a config's routes and limits on a virtual clock, and report what the
//! config would have throttled, before it goes live.
//!
//! Each request of the log goes through the gateway's own functions, not a
//! copy of them: the client's identity
//! ([`Client::identify`](crate::client_addr::Client::identify): trusted
//! proxies, `X-Forwarded-For`), admission
//! ([`admit`](crate::admission::admit): deny list, Host, method,
//! request-target, path normalisation, the route), the declared body size,
//! then the route's limits as the limiter plans them
//! ([`plan`](crate::limit::plan::plan): exemptions, client keys,
//! `on_missing_key`, overrides), decided by a fresh [`MemoryStore`] in one
//! all-or-nothing step and read back by
//! [`verdict`](tollgate_limit::verdict::verdict). Whatever `store:` the
//! config names, the replay uses the memory store: both stores give the
//! same decisions (docs/scaling-out.md).
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

mod decide;
mod input;
mod report;
pub mod stages;
mod tally;

use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::path::Path;

use tollgate_limit::store::memory::MemoryStore;
use tollgate_limit::Micros;

use crate::config::{Config, StoreBackend};
use crate::limit::key::RequestView;
use crate::runtime::{RouteRuntime, Runtime};

pub use input::{parse_client, parse_line, parse_rfc3339, Line, LineError, Request};
pub use report::{Busy, LimitReport, LineReport, Report, RouteReport};

/// How many malformed lines are kept (with their numbers) for the report.
pub const ERRORS_KEPT: usize = 20;

/// How many clients the report lists per route and per limit.
pub const BUSIEST: usize = 5;

/// The name of the line counting requests that match no route.
pub const NO_ROUTE: &str = "(no route)";

/// Expired limit state is swept from the store every this much virtual time.
const SWEEP_EVERY: Micros = 60_000_000;

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
///
/// Each request is decided (`decide`: what the gateway would do with it,
/// one value), then tallied (`tally`: added to the report's counts) and
/// answered from that same value.
pub struct Simulator {
    runtime: Runtime,
    store: MemoryStore,
    clock: Clock,
    tally: tally::Tally,
    lines: u64,
    not_requests: u64,
    malformed: u64,
    errors: Vec<LineReport>,
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
        Ok(Simulator {
            tally: tally::Tally::new(&runtime)?,
            runtime,
            store: MemoryStore::new(),
            clock: Clock::default(),
            lines: 0,
            not_requests: 0,
            malformed: 0,
            errors: Vec::new(),
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

    /// Replay one request: decide what the gateway would do with it, count
    /// that, and answer it.
    fn request(&mut self, r: &Request<'_>) -> Result<Answer, LineError> {
        self.build(r)?;
        let now = self.tick(r.ts);
        let replayed = self.decide(r, now);
        let ipv6_prefix = self.runtime.config.server.ipv6_prefix;
        self.tally.add(&replayed, &self.req, ipv6_prefix);
        Ok(replayed.answer(self.lines))
    }

    /// The virtual time of a request at `ts`; expired limit state is swept
    /// every [`SWEEP_EVERY`] of it.
    fn tick(&mut self, ts: Micros) -> Micros {
        let now = self.clock.tick(ts);
        if now >= self.clock.last_sweep.saturating_add(SWEEP_EVERY) {
            self.store.sweep(now);
            self.clock.last_sweep = now;
        }
        now
    }

    /// The figures so far. `source` names the log in the report.
    pub fn report(&self, source: &str) -> Report {
        Report {
            source: source.to_owned(),
            lines: self.lines,
            requests: self.tally.requests,
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
            denied: self.tally.denied,
            invalid_path: self.tally.invalid_path,
            refused: self.tally.refused,
            routes: self.tally.route_reports(),
            limits: self.tally.limit_reports(),
        }
    }
}

/// The limiter's view of `req` from `client` on `route` (no consumer yet).
pub(crate) fn request_view<'a>(
    req: &'a http::Request<()>,
    client: IpAddr,
    route: &'a RouteRuntime,
    ipv6_prefix: u8,
) -> RequestView<'a> {
    RequestView {
        client,
        headers: req.headers(),
        query: req.uri().query(),
        route: &route.name,
        ipv6_prefix,
        identity: None,
    }
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

    #[test]
    fn credentials_are_verified_as_the_gateway_does() {
        let key = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";
        let text = format!(
            "consumers:
  api_keys: {{ header: x-api-key }}
  list:
    - {{ name: acme, plan: gold, keys: [\"{key}\"] }}
    - {{ name: zed, plan: free, keys: [\"sha256:{}\"] }}
  failure_limit: fails
limits:
  fails: {{ algorithm: fixed_window, limit: 2, window: 1h, lockout: {{ duration: 1h }} }}
  per_consumer: {{ algorithm: fixed_window, limit: 1, window: 1h, key: consumer }}
routes:
  - {{ name: gold, match: {{ path: /gold }}, respond: {{ status: 200 }}, auth: {{ plans: [gold] }}, limits: [per_consumer] }}
  - {{ name: open, match: {{ path: / }}, respond: {{ status: 200 }}, limits: [per_consumer] }}
",
            hex::encode(crate::auth::consumers::digest(b"zed-key"))
        );
        let config = crate::config::parse(&text, "t.yaml").unwrap().config;
        let mut sim = Simulator::new(config).unwrap();
        let mut send = |path: &str, client: &str, key: Option<&str>| {
            let headers = key.map_or(String::new(), |k| {
                format!(r#","headers":{{"x-api-key":"{k}"}}"#)
            });
            let line = format!(
                r#"{{"ts":1700000000,"client":"{client}","method":"GET","path":"{path}"{headers}}}"#
            );
            let a = sim.feed(line.as_bytes()).unwrap().unwrap();
            (a.status, a.error, a.limit)
        };
        let ok = (Some(200), None, None);
        assert_eq!(send("/gold", "10.0.0.1", Some("foo")), ok);
        // One bucket per consumer, whatever the address.
        assert_eq!(
            send("/gold", "10.0.0.2", Some("foo")),
            (Some(429), Some("rate_limited"), Some("per_consumer".into()))
        );
        assert_eq!(
            send("/gold", "10.0.0.1", None),
            (Some(401), Some("unauthorized"), None)
        );
        assert_eq!(
            send("/gold", "10.0.0.1", Some("zed-key")),
            (Some(403), Some("forbidden"), None)
        );
        assert_eq!(send("/", "10.0.0.1", Some("zed-key")), ok);
        // Failed credentials: two charged, the third starts the lockout;
        // then even a valid key is turned away on `auth` routes, and
        // ignored elsewhere (the open route keys on the missing consumer:
        // the address stands in).
        let bad = (Some(401), Some("invalid_credentials"), None);
        assert_eq!(send("/gold", "10.9.9.9", Some("guess1")), bad);
        assert_eq!(send("/", "10.9.9.9", Some("guess2")), ok);
        assert_eq!(
            send("/gold", "10.9.9.9", Some("guess3")),
            (Some(429), Some("locked_out"), Some("fails".into()))
        );
        assert_eq!(
            send("/gold", "10.9.9.9", Some("zed-key")),
            (Some(429), Some("locked_out"), Some("fails".into()))
        );
        assert_eq!(
            send("/", "10.9.9.9", Some("zed-key")),
            (Some(429), Some("rate_limited"), Some("per_consumer".into()))
        );
    }
}
