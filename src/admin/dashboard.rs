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

mod stats;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use http::{header, HeaderValue, Response, StatusCode};
use sha2::{Digest, Sha256};
use tollgate_limit::{Limiter, LockedClient, Micros, StoreError};

use super::{Admin, Query};
use crate::body::{self, Body};
use crate::metrics::stats::History;
use crate::reload::Gateway;

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

impl LockoutFilter {
    /// The dashboard's: `?limit=`, `?key=` (a substring), `?lockouts=N`
    /// (default [`DEFAULT_LOCKOUTS_SHOWN`], at most [`MAX_LOCKOUTS_SHOWN`]).
    fn of_dashboard(query: &Query) -> LockoutFilter {
        LockoutFilter {
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
        }
    }
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

/// `GET /api/stats` (see the module doc for the query).
pub async fn api_stats(admin: &Admin, query: &Query) -> Response<Body> {
    let gateway = &admin.gateway;
    let shared = &gateway.shared;
    let rt = shared.runtime.load_full();
    let now = SystemTime::now();
    let stats = &shared.metrics.stats;
    let totals = stats.snapshot();
    let (samples, seq) = admin.dashboard.history.since(0);
    let filter = LockoutFilter::of_dashboard(query);
    let lockouts = admin.dashboard.lockouts(gateway, &filter, true).await;
    let sources = stats::Sources {
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
        consumers: super::consumers(&rt),
        top: super::top(&shared.metrics),
    };
    // Through a `Value`, whose objects sort their keys: the body reads as
    // it always has, whatever the order of the structs' fields.
    let mut response = match serde_json::to_value(stats::ApiStats::new(&sources)) {
        Ok(body) => super::json(StatusCode::OK, body),
        Err(e) => super::json(
            StatusCode::INTERNAL_SERVER_ERROR,
            serde_json::json!({ "error": e.to_string() }),
        ),
    };
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
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
