//! The dashboard: one page at `GET /`, and the JSON it polls every second
//! at `GET /api/stats`.
//!
//! The page is plain HTML, CSS and JavaScript embedded in the binary
//! (`assets/`), inlined into one response and pinned by a
//! Content-Security-Policy that allows only those inline blocks (by hash)
//! and fetches to the admin listener itself: no build step, no external
//! fetch. Charts are drawn on canvases by the page's own code.
//!
//! `/api/stats` answers, in one object: the config in force and the last
//! reload; per route and per limit, the totals since start, the rates of
//! the last five seconds and p50/p99 latency of the last ten; the per-second
//! samples newer than `?since=` (the page asks for what it has not seen, so
//! a poll carries one sample, the first poll the last two minutes); and the
//! active lockouts, capped (`?lockouts=N`, default 200, at most 1000), the
//! longest remaining first, with their total count, filtered by `?limit=`
//! and `?key=` (a substring). With 10,000 lockouts the answer stays small.
//!
//! The lockout list is read from the store at most every
//! [`LOCKOUTS_MAX_AGE`] whatever the number of open dashboards, and
//! forgotten at once after an unlock (`DELETE /limits/...`).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use http::{header, HeaderValue, Response, StatusCode};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use tollgate_limit::headers::secs_ceil;
use tollgate_limit::{Limiter, LockedClient, Micros, StoreError};

use super::{Admin, Query};
use crate::body::{self, Body};
use crate::metrics::stats::{
    epoch_ms, History, ReloadEvent, Sample, Snapshot, DECISIONS, HISTORY_LEN,
};
use crate::reload::Gateway;
use crate::runtime::Runtime;

/// Lockouts listed by `/api/stats` unless `?lockouts=` says otherwise.
pub const DEFAULT_LOCKOUTS_SHOWN: usize = 200;

/// The most lockouts `/api/stats` lists, whatever `?lockouts=` says.
pub const MAX_LOCKOUTS_SHOWN: usize = 1000;

/// How long a lockout list read from the store is reused.
pub const LOCKOUTS_MAX_AGE: Duration = Duration::from_millis(500);

/// How often the counters are sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Rates are averaged over this many of the latest samples.
const RATE_SAMPLES: usize = 5;

/// The dashboard's state, beside the gateway's.
#[derive(Default)]
pub struct Dashboard {
    /// Per-second samples of the counters.
    pub history: History,
    lockouts: tokio::sync::Mutex<Option<CachedLockouts>>,
}

/// A lockout list as the store gave it.
struct CachedLockouts {
    at: Instant,
    limiter: Arc<Limiter>,
    list: Arc<Vec<LockedClient>>,
}

/// Which lockouts to list.
#[derive(Debug, Clone, Default)]
pub struct LockoutFilter {
    /// Only this limit's.
    pub limit: Option<String>,
    /// Only keys containing this (ASCII case-insensitive).
    pub key: Option<String>,
    /// At most this many.
    pub max: usize,
}

/// One locked-out client.
#[derive(Debug, Clone)]
pub struct Locked {
    /// Its limit's name; empty when no instance recorded it.
    pub limit: String,
    /// Its display key (as `DELETE /limits/{limit}/{key}` takes it), or the
    /// store key in hex when unknown.
    pub key: String,
    /// Time left.
    pub remaining: Micros,
    /// Whether the admin API can name it to lift the lock.
    pub known: bool,
}

/// Lockouts, filtered and capped.
#[derive(Debug, Clone, Default)]
pub struct LockoutView {
    /// Every lockout, unfiltered.
    pub total: usize,
    /// Every lockout per limit, unfiltered.
    pub by_limit: BTreeMap<String, usize>,
    /// The lockouts the filter matched.
    pub matching: usize,
    /// The first `max` of them, the longest remaining first.
    pub shown: Vec<Locked>,
}

impl Dashboard {
    /// The lockouts now, filtered and capped. `cached`: a list read from the
    /// store less than [`LOCKOUTS_MAX_AGE`] ago will do (the dashboard's
    /// polls); otherwise (`GET /lockouts`) the store is asked.
    pub async fn lockouts(
        &self,
        gateway: &Gateway,
        filter: &LockoutFilter,
        cached: bool,
    ) -> Result<LockoutView, StoreError> {
        let limiter = gateway.shared.runtime.load().limiter.clone();
        let (list, age) = {
            let mut cache = self.lockouts.lock().await;
            let fresh = cache.as_ref().filter(|c| {
                cached && Arc::ptr_eq(&c.limiter, &limiter) && c.at.elapsed() < LOCKOUTS_MAX_AGE
            });
            match fresh {
                Some(c) => (c.list.clone(), c.at.elapsed()),
                None => {
                    let list = Arc::new(limiter.lockouts().await?);
                    *cache = Some(CachedLockouts {
                        at: Instant::now(),
                        limiter,
                        list: list.clone(),
                    });
                    (list, Duration::ZERO)
                }
            }
        };
        let aged = u64::try_from(age.as_micros()).unwrap_or(u64::MAX);
        let needle = filter.key.as_deref().map(str::to_ascii_lowercase);
        let mut view = LockoutView::default();
        let mut matched = Vec::new();
        for client in list.iter() {
            let remaining = client.remaining.saturating_sub(aged);
            if remaining == 0 {
                continue;
            }
            let (limit, key, known) = match &client.label {
                Some((limit, display)) => (limit.as_ref(), display.clone(), true),
                None => ("", tollgate_limit::key::hex(&client.key), false),
            };
            view.total += 1;
            *view.by_limit.entry(limit.to_owned()).or_default() += 1;
            if filter.limit.as_deref().is_some_and(|l| l != limit) {
                continue;
            }
            if let Some(needle) = &needle {
                if !key.to_ascii_lowercase().contains(needle.as_str()) {
                    continue;
                }
            }
            matched.push(Locked {
                limit: limit.to_owned(),
                key,
                remaining,
                known,
            });
        }
        view.matching = matched.len();
        let order = |a: &Locked, b: &Locked| {
            b.remaining
                .cmp(&a.remaining)
                .then_with(|| a.limit.cmp(&b.limit))
                .then_with(|| a.key.cmp(&b.key))
        };
        if matched.len() > filter.max {
            matched.select_nth_unstable_by(filter.max, order);
            matched.truncate(filter.max);
        }
        matched.sort_unstable_by(order);
        view.shown = matched;
        Ok(view)
    }

    /// Drop the cached lockout list (a lock was just lifted).
    pub async fn forget_lockouts(&self) {
        *self.lockouts.lock().await = None;
    }
}

/// Sample the counters every [`SAMPLE_INTERVAL`] for as long as the admin
/// listener lives, and forget routes and limits the config dropped.
pub fn start_sampler(admin: &Arc<Admin>) {
    let weak: Weak<Admin> = Arc::downgrade(admin);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate: the first sample comes a second in.
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(admin) = weak.upgrade() else {
                return;
            };
            let shared = &admin.gateway.shared;
            {
                let rt = shared.runtime.load();
                let routes: HashSet<&str> = rt.routes.iter().map(|r| r.name.as_ref()).collect();
                let limits: HashSet<&str> = rt.policies.keys().map(String::as_str).collect();
                shared.metrics.stats.retain(&routes, &limits);
            }
            let snapshot = shared.metrics.stats.snapshot();
            admin.dashboard.history.record(snapshot, SystemTime::now());
        }
    });
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

fn opt_ms(v: Option<f64>) -> Value {
    v.map_or(Value::Null, |x| json!(round(x, 3)))
}

/// `GET /api/stats` (see the module doc for the query).
pub async fn api_stats(admin: &Admin, query: &Query) -> Response<Body> {
    let gateway = &admin.gateway;
    let shared = &gateway.shared;
    let rt = shared.runtime.load_full();
    let now = SystemTime::now();
    let stats = &shared.metrics.stats;
    let totals = stats.snapshot();
    let (samples, seq) = admin.dashboard.history.since(0);
    let filter = LockoutFilter {
        limit: query
            .get("limit")
            .filter(|l| !l.is_empty())
            .map(str::to_owned),
        key: query
            .get("key")
            .filter(|k| !k.is_empty())
            .map(str::to_owned),
        max: query
            .number("lockouts")
            .unwrap_or(DEFAULT_LOCKOUTS_SHOWN)
            .min(MAX_LOCKOUTS_SHOWN),
    };
    let lockouts = admin.dashboard.lockouts(gateway, &filter, true).await;
    let sources = Sources {
        rt: &rt,
        now,
        started: stats.started,
        draining: shared.is_draining(),
        last_error: shared.last_error(),
        reloads: stats.reloads(),
        last_reload: stats.last_reload(),
        totals,
        samples,
        seq,
        since: query.number::<u64>("since").unwrap_or(0),
        series: query.get("series") != Some("0"),
        lockouts: lockouts.map_err(|e| e.to_string()),
        upstreams: super::upstreams(&rt),
    };
    let mut response = super::json(StatusCode::OK, stats_json(&sources));
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// What `/api/stats` is made of, read at one moment.
struct Sources<'a> {
    rt: &'a Runtime,
    now: SystemTime,
    started: SystemTime,
    draining: bool,
    last_error: Option<String>,
    reloads: (u64, u64),
    last_reload: Option<ReloadEvent>,
    totals: Snapshot,
    /// Every sample of the history, oldest first.
    samples: Vec<Sample>,
    seq: u64,
    /// `?since=`: the series holds the samples after this one.
    since: u64,
    /// Whether the series is wanted (not `?series=0`).
    series: bool,
    lockouts: Result<LockoutView, String>,
    upstreams: Value,
}

/// The body of `/api/stats`.
fn stats_json(src: &Sources<'_>) -> Value {
    let rt = src.rt;
    let now = src.now;
    let totals = &src.totals;
    let since = src.since;
    let (all, seq) = (&src.samples, src.seq);
    let recent = &all[all.len().saturating_sub(RATE_SAMPLES)..];
    let recent_ms: u64 = recent.iter().map(|s| s.interval_ms).sum();
    let latest = all.last();

    // The config in force and the reloads.
    let (succeeded, failed) = src.reloads;
    let last_reload = src.last_reload.as_ref().map(|r| {
        json!({
            "at": humantime::format_rfc3339_millis(r.at).to_string(),
            "result": if r.ok { "success" } else { "failure" },
        })
    });
    let backend = rt.config.store.backend.name();
    let config = json!({
        "generation": rt.generation,
        "loaded_at": humantime::format_rfc3339_millis(rt.loaded_at).to_string(),
        "sha256": rt.sha256,
        "last_error": src.last_error,
        "last_reload": last_reload,
        "reloads": {"success": succeeded, "failure": failed},
        "store": backend,
    });
    // Routes, in config order, then unmatched requests if there were any.
    let mut names: Vec<(Arc<str>, Vec<&str>)> = rt
        .routes
        .iter()
        .map(|r| {
            (
                r.name.clone(),
                r.limits.iter().map(|p| p.name.as_ref()).collect(),
            )
        })
        .collect();
    if totals.routes.get("").is_some_and(|c| c.requests > 0) {
        names.push((Arc::from(""), Vec::new()));
    }
    let routes: Vec<Value> = names
        .iter()
        .map(|(name, limits)| {
            let t = totals.routes.get(name).copied().unwrap_or_default();
            let sum = |f: fn(&crate::metrics::stats::RouteCounts) -> u64| -> u64 {
                recent
                    .iter()
                    .filter_map(|s| s.routes.get(name))
                    .map(|r| f(&r.counts))
                    .sum()
            };
            let last = latest.and_then(|s| s.routes.get(name));
            json!({
                "name": name.as_ref(),
                "limits": limits,
                "requests": t.requests,
                "rejected": t.rejected,
                "locked_out": t.locked_out,
                "rps": per_second(sum(|c| c.requests), recent_ms),
                "rejected_ps": per_second(sum(|c| c.rejected), recent_ms),
                "locked_out_ps": per_second(sum(|c| c.locked_out), recent_ms),
                "p50_ms": opt_ms(last.and_then(|r| r.p50_ms)),
                "p99_ms": opt_ms(last.and_then(|r| r.p99_ms)),
            })
        })
        .collect();

    let (lockouts, view) = match &src.lockouts {
        Ok(view) => {
            let items: Vec<Value> = view
                .shown
                .iter()
                .map(|l| {
                    json!({
                        "limit": l.limit,
                        "key": l.key,
                        "remaining": secs_ceil(l.remaining),
                        "remaining_ms": l.remaining / 1000,
                        "known": l.known,
                    })
                })
                .collect();
            let value = json!({
                "total": view.total,
                "matching": view.matching,
                "shown": items.len(),
                "by_limit": view.by_limit,
                "items": items,
                "error": null,
            });
            (value, Some(view.clone()))
        }
        Err(error) => (
            json!({"total": null, "matching": null, "shown": 0, "by_limit": {},
                   "items": [], "error": error.to_string()}),
            None,
        ),
    };

    // Limits, in config order.
    let limits: Vec<Value> = rt
        .config
        .limits
        .iter()
        .map(|l| {
            let name = l.name.as_str();
            let t = totals.limits.get(name).copied().unwrap_or_default();
            let decisions: Map<String, Value> = DECISIONS
                .iter()
                .zip(t.decisions)
                .map(|(d, n)| ((*d).to_owned(), json!(n)))
                .collect();
            let rates: Map<String, Value> = DECISIONS
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let n = recent
                        .iter()
                        .filter_map(|s| s.limits.get(name))
                        .map(|c| c.decisions[i])
                        .sum();
                    ((*d).to_owned(), json!(per_second(n, recent_ms)))
                })
                .collect();
            let policy = rt.policies.get(name);
            json!({
                "name": name,
                "algorithm": policy.map(|p| p.params.name()),
                "shadow": policy.is_some_and(|p| p.shadow),
                "lockout": policy.is_some_and(|p| p.lockout.is_some()),
                "decisions": decisions,
                "rates": rates,
                "lockouts": t.lockouts,
                "locked_now": view.as_ref().map(|v| v.by_limit.get(name).copied().unwrap_or(0)),
            })
        })
        .collect();

    let series = if !src.series {
        Value::Null
    } else {
        let newer: Vec<&Sample> = all.iter().filter(|s| s.seq > since).collect();
        series_json(&newer, &names, &rt.config.limits)
    };
    let total = latest.map(|s| s.total).unwrap_or_default();
    let all_requests: u64 = recent.iter().map(|s| s.total.counts.requests).sum();
    let all_rejected: u64 = recent.iter().map(|s| s.total.counts.rejected).sum();
    let all_locked: u64 = recent.iter().map(|s| s.total.counts.locked_out).sum();
    json!({
        "now_ms": epoch_ms(now),
        "started_ms": epoch_ms(src.started),
        "draining": src.draining,
        "interval_ms": SAMPLE_INTERVAL.as_millis() as u64,
        "history": HISTORY_LEN,
        "seq": seq,
        "config": config,
        "total": {
            "rps": per_second(all_requests, recent_ms),
            "rejected_ps": per_second(all_rejected, recent_ms),
            "locked_out_ps": per_second(all_locked, recent_ms),
            "p50_ms": opt_ms(total.p50_ms),
            "p99_ms": opt_ms(total.p99_ms),
        },
        "routes": routes,
        "limits": limits,
        "lockouts": lockouts,
        "upstreams": src.upstreams,
        "series": series,
    })
}

/// The samples as columns: `t` (ms since the epoch), then per route and
/// per limit one array per count, aligned with `t`.
fn series_json(
    samples: &[&Sample],
    routes: &[(Arc<str>, Vec<&str>)],
    limits: &[crate::config::LimitConfig],
) -> Value {
    let column = |f: &dyn Fn(&Sample) -> Value| -> Value {
        Value::Array(samples.iter().map(|s| f(s)).collect())
    };
    let mut route_series = Map::new();
    for (name, _) in routes {
        let get = |s: &Sample| s.routes.get(name).copied().unwrap_or_default();
        route_series.insert(
            name.to_string(),
            json!({
                "requests": column(&|s| json!(get(s).counts.requests)),
                "rejected": column(&|s| json!(get(s).counts.rejected)),
                "locked_out": column(&|s| json!(get(s).counts.locked_out)),
                "p50_ms": column(&|s| opt_ms(get(s).p50_ms)),
                "p99_ms": column(&|s| opt_ms(get(s).p99_ms)),
            }),
        );
    }
    let mut limit_series = Map::new();
    for limit in limits {
        let name = limit.name.as_str();
        let get = |s: &Sample| s.limits.get(name).copied().unwrap_or_default();
        let mut m = Map::new();
        for (i, d) in DECISIONS.iter().enumerate() {
            m.insert((*d).to_owned(), column(&|s| json!(get(s).decisions[i])));
        }
        m.insert("lockouts".into(), column(&|s| json!(get(s).lockouts)));
        limit_series.insert(name.to_owned(), Value::Object(m));
    }
    json!({
        "seq": column(&|s| json!(s.seq)),
        "t": column(&|s| json!(s.at_ms)),
        "interval_ms": column(&|s| json!(s.interval_ms)),
        "total": {
            "requests": column(&|s| json!(s.total.counts.requests)),
            "rejected": column(&|s| json!(s.total.counts.rejected)),
            "locked_out": column(&|s| json!(s.total.counts.locked_out)),
            "p50_ms": column(&|s| opt_ms(s.total.p50_ms)),
            "p99_ms": column(&|s| opt_ms(s.total.p99_ms)),
        },
        "routes": route_series,
        "limits": limit_series,
    })
}

/// The dashboard page, with its style and script inlined.
static PAGE: LazyLock<Page> = LazyLock::new(|| {
    Page::new(
        include_str!("assets/index.html")
            .replace("/*@STYLE@*/", include_str!("assets/style.css"))
            .replace("/*@SCRIPT@*/", include_str!("assets/app.js")),
    )
});

/// The page asking for the admin token.
static LOGIN: LazyLock<Page> = LazyLock::new(|| {
    Page::new(
        include_str!("assets/login.html").replace("/*@STYLE@*/", include_str!("assets/style.css")),
    )
});

/// An HTML page and the Content-Security-Policy that allows exactly its
/// inline blocks.
struct Page {
    html: String,
    csp: HeaderValue,
}

impl Page {
    fn new(html: String) -> Page {
        let hashes = |tag: &str| -> String {
            inline_blocks(&html, tag)
                .map(|block| format!(" 'sha256-{}'", base64(&Sha256::digest(block.as_bytes()))))
                .collect()
        };
        let csp = format!(
            "default-src 'none'; script-src{}; style-src{}; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
            hashes("script"),
            hashes("style"),
        );
        let csp =
            HeaderValue::from_str(&csp).unwrap_or(HeaderValue::from_static("default-src 'none'"));
        Page { html, csp }
    }

    fn response(&self, status: StatusCode) -> Response<Body> {
        let mut response = Response::new(body::full(self.html.clone()));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        headers.insert(header::CONTENT_SECURITY_POLICY, self.csp.clone());
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        response
    }
}

/// The text inside each `<tag>...</tag>` of `html`.
fn inline_blocks<'a>(html: &'a str, tag: &str) -> impl Iterator<Item = &'a str> + 'a {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut rest = html;
    std::iter::from_fn(move || {
        let start = rest.find(&open)? + open.len();
        let len = rest[start..].find(&close)?;
        let block = &rest[start..start + len];
        rest = &rest[start + len + close.len()..];
        Some(block)
    })
}

/// Standard base64 with padding (for CSP hashes).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `GET /` with the token (or without one configured): the dashboard.
pub fn page() -> Response<Body> {
    PAGE.response(StatusCode::OK)
}

/// `GET /` without the token: 401 and a form asking for it (the form
/// comes back as `GET /?token=...`).
pub fn login_page() -> Response<Body> {
    let mut response = LOGIN.response(StatusCode::UNAUTHORIZED);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"tollgate admin\""),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn the_pages_are_self_contained_and_pinned_by_their_csp() {
        for page in [&*PAGE, &*LOGIN] {
            let html = &page.html;
            assert!(!html.contains("@STYLE@") && !html.contains("@SCRIPT@"));
            // Nothing is fetched from elsewhere.
            for needle in ["src=", "href=\"http", "@import", "url(http", "//cdn"] {
                assert!(!html.contains(needle), "page contains {needle:?}");
            }
            let csp = page.csp.to_str().unwrap();
            assert!(
                csp.starts_with("default-src 'none'; script-src 'sha256-"),
                "{csp}"
            );
            assert!(csp.contains("style-src 'sha256-"), "{csp}");
        }
        assert_eq!(inline_blocks(&PAGE.html, "script").count(), 1);
        assert_eq!(
            inline_blocks("<b>x</b><b>yz</b>", "b").collect::<Vec<_>>(),
            ["x", "yz"]
        );
    }
}

/// `/api/stats` on fixed figures, against the JSON it answered before its
/// sections became typed structs, so their shape cannot drift.
#[cfg(test)]
mod stats_tests {
    use std::time::UNIX_EPOCH;

    use tollgate_limit::DecisionKind as Kind;

    use super::*;
    use crate::metrics::stats::Stats;

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
        }
    }

    #[test]
    fn api_stats_answers_the_json_it_always_has() {
        // Byte for byte: key order, `1.0` against `1`, nulls.
        let rt = runtime();
        let stats = Stats::new();
        let history = history(&stats);
        let src = sources(&rt, &stats, &history);
        assert_eq!(stats_json(&src).to_string(), GOLDEN_FULL);
        let src = Sources {
            lockouts: Err("redis: no answer within the timeout".into()),
            series: false,
            last_reload: None,
            last_error: None,
            draining: true,
            ..sources(&rt, &stats, &History::default())
        };
        assert_eq!(stats_json(&src).to_string(), GOLDEN_DEGRADED);
    }

    /// Seven samples, lockouts listed, the series after sample 4.
    const GOLDEN_FULL: &str = include_str!("testdata/api_stats_full.json");
    /// No samples, the store unreachable, no series, draining.
    const GOLDEN_DEGRADED: &str = include_str!("testdata/api_stats_degraded.json");
}
