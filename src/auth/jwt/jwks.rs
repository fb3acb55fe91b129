//! An issuer's key set fetched from its JWKS URL: refreshed in the
//! background, refetched (rate limited, single-flight) when a token names a
//! `kid` the set lacks, the last good set kept through failures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{header, HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{JwtError, KeySet, TokenCache, Validation, Verified};
use crate::body::{self, UpstreamBody};
use crate::proxy::client::{Client, Dial};
use crate::tls;

/// The largest JWKS document read (bytes).
const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// The longest a fetch may take, connecting included.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The least time between two fetches that tokens cause (unknown `kid`, no
/// set yet), so forged tokens cannot make the gateway hammer the issuer.
const MIN_REFETCH: Duration = Duration::from_secs(30);

/// After a failed background fetch, the next one comes this soon (or at
/// the refresh interval if that is sooner).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);

/// The log target of everything authentication logs.
const LOG_TARGET: &str = "tollgate::auth";

/// The `User-Agent` of JWKS fetches.
const AGENT: &str = concat!("tollgate/", env!("CARGO_PKG_VERSION"), " jwks");

/// One issuer's JWKS: the last good key set, and how to fetch it again.
pub struct Jwks {
    /// The URL, for logs and reuse across reloads.
    url: String,
    /// The background refresh interval.
    refresh: Duration,
    /// `Host` and the origin-form target of the request.
    host: HeaderValue,
    path: PathAndQuery,
    /// The gateway's own client, one target: the JWKS server.
    client: Client,
    /// The last good key set; `None` until a fetch succeeds.
    keys: ArcSwapOption<KeySet>,
    /// Held for the whole of a fetch, so only one runs at a time.
    fetching: tokio::sync::Mutex<()>,
    /// When the last fetch began.
    last_fetch: Mutex<Option<Instant>>,
    /// [`MIN_REFETCH`] (shorter in tests).
    min_refetch: Duration,
    /// Whether the background refresher has been started.
    started: AtomicBool,
    /// Dropped with the state, which ends the refresher at once.
    stop: watch::Sender<()>,
}

impl Jwks {
    /// The JWKS of `url` (`http://` or `https://`, TLS verified against the
    /// system's roots), refreshed every `refresh`.
    ///
    /// `previous` is the same issuer's JWKS in the config generation before:
    /// with the same URL and interval it is reused as it is (its key set,
    /// its refresher); with the same URL only, the new one starts from its
    /// key set.
    pub fn new(
        url: &str,
        refresh: Duration,
        previous: Option<&Arc<Jwks>>,
    ) -> Result<Arc<Jwks>, String> {
        let previous = previous.filter(|p| p.url == url);
        if let Some(p) = previous.filter(|p| p.refresh == refresh) {
            return Ok(p.clone());
        }
        let uri: Uri = url.parse().map_err(|e| format!("{url:?}: {e}"))?;
        let https = match uri.scheme() {
            Some(s) if *s == Scheme::HTTPS => true,
            Some(s) if *s == Scheme::HTTP => false,
            _ => return Err(format!("{url:?}: not an http:// or https:// URL")),
        };
        let authority: Authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| format!("{url:?}: no host"))?;
        let tls = if https {
            let config = tls::client_config("jwks", None, false).map_err(|e| e.to_string())?;
            let name = tls::server_name(authority.host(), None)
                .ok_or_else(|| format!("{url:?}: the host is not a valid TLS name"))?;
            Some((config, name))
        } else {
            None
        };
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|_| format!("{url:?}: the host is not a valid Host value"))?;
        let dial = Dial {
            authority: &authority,
            default_port: if https { 443 } else { 80 },
            tls,
        };
        Ok(Arc::new(Jwks {
            url: url.to_string(),
            refresh,
            host,
            path: uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
            client: Client::new([dial], false, FETCH_TIMEOUT, Duration::from_secs(90)),
            keys: ArcSwapOption::new(previous.and_then(|p| p.keys())),
            fetching: tokio::sync::Mutex::new(()),
            last_fetch: Mutex::new(previous.and_then(|p| *lock(&p.last_fetch))),
            min_refetch: MIN_REFETCH,
            started: AtomicBool::new(false),
            stop: watch::channel(()).0,
        }))
    }

    /// Start the background refresher (once; later calls do nothing): a
    /// fetch at once unless a key set is already held, then one every
    /// `refresh`. It ends when the state is dropped. Needs a Tokio runtime.
    pub fn start(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::Relaxed) {
            return;
        }
        let first = if self.keys().is_some() {
            self.refresh
        } else {
            Duration::ZERO
        };
        tokio::spawn(refresher(
            Arc::downgrade(self),
            self.stop.subscribe(),
            first,
        ));
    }

    /// The URL it fetches.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The last good key set; `None` until a fetch has succeeded.
    pub fn keys(&self) -> Option<Arc<KeySet>> {
        self.keys.load_full()
    }

    /// Verify `token` under `v` with this issuer's keys, through `cache`.
    ///
    /// No key set yet: one fetch is tried (rate limited), else
    /// [`JwtError::KeysUnavailable`]. An unknown `kid`: the JWKS is fetched
    /// again (at most once per 30 s, one fetch however many tokens ask) and,
    /// if that brought a new set, the token is checked once more.
    pub async fn verify(
        &self,
        token: &str,
        v: &Validation,
        now_unix: u64,
        cache: &TokenCache,
    ) -> Result<Arc<Verified>, JwtError> {
        let keys = match self.keys() {
            Some(keys) => keys,
            None => self.refetch().await.ok_or(JwtError::KeysUnavailable)?,
        };
        match cache.verify(token, &keys, v, now_unix) {
            Err(JwtError::UnknownKid) => match self.refetch().await {
                Some(fresh) if !Arc::ptr_eq(&fresh, &keys) => {
                    cache.verify(token, &fresh, v, now_unix)
                }
                _ => Err(JwtError::UnknownKid),
            },
            outcome => outcome,
        }
    }

    /// Fetch again because a token asked (an unknown `kid`, no set yet),
    /// unless a fetch began less than 30 s ago; a fetch already running is
    /// waited for instead. The key set after.
    pub async fn refetch(&self) -> Option<Arc<KeySet>> {
        let before = self.keys();
        let _one = self.fetching.lock().await;
        let now = self.keys();
        let changed = match (&before, &now) {
            (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
            (a, b) => a.is_some() != b.is_some(),
        };
        let recent = lock(&self.last_fetch).is_some_and(|at| at.elapsed() < self.min_refetch);
        if changed || recent {
            return now;
        }
        self.fetch_locked("unknown kid or no key set").await;
        self.keys()
    }

    /// One fetch, the fetch lock held by the caller: the set is replaced
    /// when it succeeds, kept (with a warning) when it fails.
    async fn fetch_locked(&self, why: &'static str) -> bool {
        *lock(&self.last_fetch) = Some(Instant::now());
        match tokio::time::timeout(FETCH_TIMEOUT, self.fetch()).await {
            Ok(Ok(keys)) => {
                if !keys.skipped().is_empty() {
                    tracing::debug!(target: LOG_TARGET, url = %self.url, skipped = ?keys.skipped(), "JWKS keys skipped");
                }
                tracing::debug!(target: LOG_TARGET, url = %self.url, keys = keys.keys().len(), why, "JWKS fetched");
                self.keys.store(Some(Arc::new(keys)));
                true
            }
            outcome => {
                let error = match outcome {
                    Ok(Err(error)) => error,
                    _ => format!("no answer within {}s", FETCH_TIMEOUT.as_secs()),
                };
                let keeping = self.keys.load().is_some();
                tracing::warn!(target: LOG_TARGET, url = %self.url, %error, keeping_last_good_set = keeping, why, "JWKS fetch failed");
                false
            }
        }
    }

    /// GET the JWKS and parse it.
    async fn fetch(&self) -> Result<KeySet, String> {
        let mut request = Request::new(UpstreamBody::new(body::empty()).0);
        *request.uri_mut() = Uri::from(self.path.clone());
        let headers = request.headers_mut();
        headers.insert(header::HOST, self.host.clone());
        headers.insert(header::USER_AGENT, HeaderValue::from_static(AGENT));
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/jwk-set+json, application/json"),
        );
        let response = self
            .client
            .send(0, request)
            .await
            .map_err(|e| e.to_string())?;
        if response.status() != StatusCode::OK {
            return Err(format!("status {}", response.status().as_u16()));
        }
        let body = Limited::new(response.into_body(), MAX_JWKS_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the body: {e}"))?
            .to_bytes();
        KeySet::from_jwks(&body)
    }
}

/// The background refresher of one [`Jwks`]: the first fetch after
/// `first`, then every `refresh` (sooner after a failure). Holds only a
/// `Weak` between fetches and ends as soon as the state is dropped.
async fn refresher(state: Weak<Jwks>, mut stop: watch::Receiver<()>, first: Duration) {
    let mut wait = first;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
        let Some(jwks) = state.upgrade() else {
            return;
        };
        let ok = {
            let _one = jwks.fetching.lock().await;
            jwks.fetch_locked("refresh").await
        };
        wait = if ok {
            jwks.refresh
        } else {
            jwks.refresh.min(RETRY_AFTER_FAILURE)
        };
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
