//! The report of a replay: one value, printed as aligned tables or as one
//! JSON document (`--json`, the same fields).

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use tollgate_limit::Micros;

use super::BUSIEST;

/// Everything a replay found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The log's name as given.
    pub source: String,
    /// Lines read (blank ones included).
    pub lines: u64,
    /// Requests replayed (every well-formed request line).
    pub requests: u64,
    /// Log lines that are not requests (the gateway's operational events).
    pub not_requests: u64,
    /// Lines skipped because they could not be read as a request.
    pub malformed: u64,
    /// The first malformed lines, with their numbers.
    pub errors: Vec<LineReport>,
    /// The virtual time of the first request (RFC 3339), if any.
    pub from: Option<String>,
    /// The virtual time of the last request (RFC 3339), if any.
    pub to: Option<String>,
    /// Requests earlier than one before them, replayed at the latest time
    /// seen instead.
    pub out_of_order: u64,
    /// The largest such gap, in seconds.
    pub out_of_order_max_seconds: f64,
    /// Requests answered 403 by `server.deny` before any route.
    pub denied: u64,
    /// Requests answered 400 for their request-target or path before any
    /// route.
    pub invalid_path: u64,
    /// Requests refused before any route for another reason (`TRACE` or
    /// `CONNECT`, a bad or missing Host, a head too large).
    pub refused: u64,
    /// One entry per route, in config order, then `(no route)`.
    pub routes: Vec<RouteReport>,
    /// One entry per limit, in config order (named limits, then inline ones).
    pub limits: Vec<LimitReport>,
}

/// A malformed line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineReport {
    /// Its 1-based number.
    pub line: u64,
    /// Why it was skipped.
    pub error: String,
}

/// One route's figures. `requests = allowed + rejected + locked_out`.
#[derive(Debug, Clone, Serialize)]
pub struct RouteReport {
    /// The route's name, or `(no route)`.
    pub name: String,
    /// Requests that matched it.
    pub requests: u64,
    /// Requests its limits let through (all of them on a route without
    /// limits; none on `(no route)`, which is a 404).
    pub allowed: u64,
    /// Allowed requests held for a `max_delay`.
    pub delayed: u64,
    /// Allowed requests a shadow limit would have rejected.
    pub shadow_rejected: u64,
    /// Requests answered `rate_limited`.
    pub rejected: u64,
    /// Requests answered `locked_out`.
    pub locked_out: u64,
    /// Distinct client addresses.
    pub clients: u64,
    /// Distinct client addresses answered `locked_out` at least once.
    pub clients_locked_out: u64,
    /// The busiest clients, by requests.
    pub busiest: Vec<Busy>,
}

/// One limit's figures, over every route that uses it.
/// `requests = allowed + rejected + locked_out`.
#[derive(Debug, Clone, Serialize)]
pub struct LimitReport {
    /// The limit's name.
    pub name: String,
    /// Its algorithm.
    pub algorithm: String,
    /// `enforce` or `shadow`.
    pub mode: String,
    /// Where keys' own values come from, and what the simulation did with
    /// them: `null` when the limit has none.
    pub per_key: Option<String>,
    /// The routes that use it.
    pub routes: Vec<String>,
    /// Requests it decided.
    pub requests: u64,
    /// Requests it let through (whatever the route's other limits said).
    pub allowed: u64,
    /// Allowed because the client is exempt.
    pub exempt: u64,
    /// Allowed because a key component was missing and
    /// `on_missing_key: skip`.
    pub skipped: u64,
    /// Allowed after a `max_delay`.
    pub delayed: u64,
    /// Allowed by a shadow limit that would have rejected them.
    pub shadow_rejected: u64,
    /// Allowed by this limit, but another limit of the route rejected the
    /// request, so nothing was taken here.
    pub not_consumed: u64,
    /// Rejected (`rate_limited`) by this limit.
    pub rejected: u64,
    /// Rejected because a key component was missing and
    /// `on_missing_key: deny` (part of `rejected`).
    pub missing_key: u64,
    /// Answered `locked_out` (including the rejections that started a
    /// lockout).
    pub locked_out: u64,
    /// Lockouts started.
    pub lockouts: u64,
    /// Distinct client keys it counted.
    pub clients: u64,
    /// Distinct client keys locked out at least once.
    pub clients_locked_out: u64,
    /// The busiest client keys, by requests.
    pub busiest: Vec<Busy>,
}

/// A busy client (route) or client key (limit, in its display form).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Busy {
    /// The client address, or the client key.
    pub client: String,
    /// Its requests.
    pub requests: u64,
    /// How many were answered `rate_limited`.
    pub rejected: u64,
    /// How many were answered `locked_out`.
    pub locked_out: u64,
}

/// A virtual time as RFC 3339 UTC, with microseconds only when it has some.
pub(super) fn format_time(t: Micros) -> String {
    let at = UNIX_EPOCH + Duration::from_micros(t);
    if t.is_multiple_of(1_000_000) {
        humantime::format_rfc3339_seconds(at).to_string()
    } else {
        humantime::format_rfc3339_micros(at).to_string()
    }
}

/// A table: the first `left` columns align left, the others (numbers) right.
struct Table {
    header: Vec<&'static str>,
    left: usize,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(header: Vec<&'static str>, left: usize) -> Self {
        Table {
            header,
            left,
            rows: Vec::new(),
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn render(&self, out: &mut String) {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let header: Vec<String> = self.header.iter().map(|h| (*h).to_owned()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                if i < self.left {
                    let _ = write!(line, "{cell:<w$}");
                } else {
                    let _ = write!(line, "{cell:>w$}");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

fn n(v: u64) -> String {
    v.to_string()
}

/// What the tables' columns mean, below them.
const LEGEND: &str = concat!(
    "\nALLOWED includes DELAYED (held for max_delay) and SHADOW_REJ (a shadow limit\n",
    "would have rejected); a limit's ALLOWED also includes EXEMPT (exempt clients, and\n",
    "keys skipped by on_missing_key: skip). LOCKED_OUT includes the rejections that\n",
    "started a lockout; LOCKOUTS counts lockouts started.\n",
);

impl Report {
    /// The report as text: a summary, then aligned tables of routes,
    /// limits, and the busiest clients.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        self.summary(&mut out);
        out.push('\n');
        self.route_table().render(&mut out);
        if !self.limits.is_empty() {
            out.push('\n');
            self.limit_table().render(&mut out);
            for l in &self.limits {
                if let Some(note) = &l.per_key {
                    let _ = writeln!(out, "note: {}: {note}", l.name);
                }
            }
        }
        let clients = self.routes.iter().map(|r| (&r.name, &r.busiest));
        let clients = busy_table(["ROUTE", "CLIENT"], clients);
        if !clients.rows.is_empty() {
            let _ = write!(out, "\nBusiest clients per route (top {BUSIEST})\n");
            clients.render(&mut out);
        }
        let keys = self.limits.iter().map(|l| (&l.name, &l.busiest));
        let keys = busy_table(["LIMIT", "CLIENT KEY"], keys);
        if !keys.rows.is_empty() {
            let _ = write!(out, "\nBusiest client keys per limit (top {BUSIEST})\n");
            keys.render(&mut out);
        }
        out.push_str(LEGEND);
        out
    }

    /// What was replayed, over which virtual time.
    fn summary(&self, out: &mut String) {
        let _ = write!(
            out,
            "Replayed {} requests from {} ({} lines",
            self.requests, self.source, self.lines
        );
        if self.not_requests > 0 {
            let _ = write!(out, ", {} not requests", self.not_requests);
        }
        if self.malformed > 0 {
            let _ = write!(out, ", {} malformed and skipped", self.malformed);
        }
        out.push_str(")\n");
        if let (Some(from), Some(to)) = (&self.from, &self.to) {
            let _ = writeln!(out, "Virtual time {from} .. {to}");
        }
        if self.out_of_order > 0 {
            let _ = writeln!(
                out,
                "{} requests out of time order (up to {:.3} s early) were replayed at the latest time seen",
                self.out_of_order, self.out_of_order_max_seconds
            );
        }
    }

    /// A line per route, then the requests answered before any route.
    fn route_table(&self) -> Table {
        let mut routes = Table::new(
            vec![
                "ROUTE",
                "REQUESTS",
                "ALLOWED",
                "DELAYED",
                "SHADOW_REJ",
                "REJECTED",
                "LOCKED_OUT",
                "CLIENTS",
                "CLIENTS_LOCKED",
            ],
            1,
        );
        for r in &self.routes {
            routes.row(vec![
                r.name.clone(),
                n(r.requests),
                n(r.allowed),
                n(r.delayed),
                n(r.shadow_rejected),
                n(r.rejected),
                n(r.locked_out),
                n(r.clients),
                n(r.clients_locked_out),
            ]);
        }
        for (name, count) in [
            ("(denied)", self.denied),
            ("(invalid path)", self.invalid_path),
            ("(refused)", self.refused),
        ] {
            if count > 0 {
                let mut row = vec![name.to_owned(), n(count)];
                row.extend(std::iter::repeat_n(String::new(), 7));
                routes.row(row);
            }
        }
        routes
    }

    /// A line per limit.
    fn limit_table(&self) -> Table {
        let mut limits = Table::new(
            vec![
                "LIMIT",
                "ALGORITHM",
                "MODE",
                "REQUESTS",
                "ALLOWED",
                "EXEMPT",
                "DELAYED",
                "SHADOW_REJ",
                "REJECTED",
                "LOCKED_OUT",
                "LOCKOUTS",
                "CLIENTS",
                "CLIENTS_LOCKED",
            ],
            3,
        );
        for l in &self.limits {
            limits.row(vec![
                l.name.clone(),
                l.algorithm.clone(),
                l.mode.clone(),
                n(l.requests),
                n(l.allowed),
                n(l.exempt + l.skipped),
                n(l.delayed),
                n(l.shadow_rejected),
                n(l.rejected),
                n(l.locked_out),
                n(l.lockouts),
                n(l.clients),
                n(l.clients_locked_out),
            ]);
        }
        limits
    }
}

/// The busiest clients of each owner (a route or a limit), the owner named
/// on its first row.
fn busy_table<'a>(
    columns: [&'static str; 2],
    owners: impl Iterator<Item = (&'a String, &'a Vec<Busy>)>,
) -> Table {
    let mut table = Table::new(
        vec![columns[0], columns[1], "REQUESTS", "REJECTED", "LOCKED_OUT"],
        2,
    );
    for (owner, busiest) in owners {
        busy_rows(&mut table, owner, busiest);
    }
    table
}

fn busy_rows(table: &mut Table, owner: &str, busiest: &[Busy]) {
    for (i, b) in busiest.iter().enumerate() {
        table.row(vec![
            if i == 0 {
                owner.to_owned()
            } else {
                String::new()
            },
            b.client.clone(),
            n(b.requests),
            n(b.rejected),
            n(b.locked_out),
        ]);
    }
}
