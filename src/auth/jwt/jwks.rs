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

/// The shortest background refresh interval: a zero from a config that
/// did not refuse it must not become a fetch loop.
const MIN_REFRESH: Duration = Duration::from_millis(100);

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
    /// system's roots), refreshed every `refresh` (at least 100 ms).
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
        let refresh = refresh.max(MIN_REFRESH);
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

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::atomic::AtomicUsize;

    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::auth::jwt::testkit::{self, TestKey};
    use crate::auth::jwt::Algorithm;

    const ISS: &str = "https://issuer.example/";

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn validation() -> Validation {
        Validation {
            issuer: ISS.into(),
            audiences: vec![],
            algorithms: vec![Algorithm::ES256],
            leeway: Duration::from_secs(0),
        }
    }

    fn token(key: &TestKey, kid: &str) -> String {
        let claims = json!({"iss": ISS, "sub": kid, "exp": now() + 600});
        testkit::token(key, Algorithm::ES256, Some(kid), &claims)
    }

    /// A plain-HTTP JWKS server on 127.0.0.1: answers every request with
    /// `body` (503 while it is `None`) and counts them.
    struct Server {
        addr: SocketAddr,
        body: Arc<Mutex<Option<Vec<u8>>>>,
        fetches: Arc<AtomicUsize>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Server {
        async fn start(addr: &str, body: Option<Vec<u8>>) -> Server {
            let listener = TcpListener::bind(addr).await.unwrap();
            let addr = listener.local_addr().unwrap();
            let body = Arc::new(Mutex::new(body));
            let fetches = Arc::new(AtomicUsize::new(0));
            let (b, f) = (body.clone(), fetches.clone());
            let task = tokio::spawn(async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    let (b, f) = (b.clone(), f.clone());
                    tokio::spawn(async move {
                        let mut head = Vec::new();
                        let mut buf = [0u8; 1024];
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                            match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => head.extend_from_slice(&buf[..n]),
                            }
                        }
                        f.fetch_add(1, Ordering::SeqCst);
                        let body = lock(&b).clone();
                        let (status, body) = match body {
                            Some(body) => ("200 OK", body),
                            None => ("503 Service Unavailable", Vec::new()),
                        };
                        let head = format!(
                            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\nconnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = stream.write_all(head.as_bytes()).await;
                        let _ = stream.write_all(&body).await;
                        let _ = stream.shutdown().await;
                    });
                }
            });
            Server {
                addr,
                body,
                fetches,
                task,
            }
        }

        fn url(&self) -> String {
            format!("http://{}/.well-known/jwks.json", self.addr)
        }

        fn serve(&self, keys: &[serde_json::Value]) {
            *lock(&self.body) = Some(testkit::jwks(keys));
        }

        fn fetches(&self) -> usize {
            self.fetches.load(Ordering::SeqCst)
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    /// A JWKS state whose token-caused fetches are `min_refetch` apart.
    fn jwks(url: &str, refresh: Duration, min_refetch: Duration) -> Arc<Jwks> {
        let mut jwks = Jwks::new(url, refresh, None).unwrap();
        Arc::get_mut(&mut jwks).unwrap().min_refetch = min_refetch;
        jwks
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[tokio::test]
    async fn a_flood_of_unknown_kids_fetches_once() {
        let a = testkit::p256();
        let server = Server::start("127.0.0.1:0", None).await;
        server.serve(&[a.jwk_with("a", None)]);
        let jwks = jwks(&server.url(), HOUR, Duration::from_secs(1));
        let (cache, v) = (TokenCache::new(100), validation());
        // No set yet: the first token fetches it.
        assert!(jwks
            .verify(&token(&a, "a"), &v, now(), &cache)
            .await
            .is_ok());
        assert_eq!(server.fetches(), 1);
        tokio::time::sleep(Duration::from_millis(1050)).await;
        let forged = token(&a, "unknown");
        let concurrent = (0..1000).map(|_| jwks.verify(&forged, &v, now(), &cache));
        for outcome in futures_util::future::join_all(concurrent).await {
            assert_eq!(outcome, Err(JwtError::UnknownKid));
        }
        for _ in 0..1000 {
            let outcome = jwks.verify(&forged, &v, now(), &cache).await;
            assert_eq!(outcome, Err(JwtError::UnknownKid));
        }
        assert_eq!(server.fetches(), 2);
    }

    #[tokio::test]
    async fn a_rotated_key_appears_after_the_refetch() {
        let (a, b) = (testkit::p256(), testkit::p256());
        let server = Server::start("127.0.0.1:0", None).await;
        server.serve(&[a.jwk_with("a", None)]);
        let jwks = jwks(&server.url(), HOUR, Duration::from_millis(300));
        let (cache, v) = (TokenCache::new(100), validation());
        assert!(jwks
            .verify(&token(&a, "a"), &v, now(), &cache)
            .await
            .is_ok());
        // The issuer rotates in b; within the rate limit nothing is fetched.
        server.serve(&[a.jwk_with("a", None), b.jwk_with("b", None)]);
        let b_token = token(&b, "b");
        assert_eq!(
            jwks.verify(&b_token, &v, now(), &cache).await,
            Err(JwtError::UnknownKid)
        );
        assert_eq!(server.fetches(), 1);
        tokio::time::sleep(Duration::from_millis(350)).await;
        let verified = jwks.verify(&b_token, &v, now(), &cache).await.unwrap();
        assert_eq!(verified.claims["sub"], "b");
        assert_eq!(server.fetches(), 2);
        assert_eq!(jwks.keys().unwrap().keys().len(), 2);
    }

    #[tokio::test]
    async fn a_jwks_down_at_start_up_is_not_fatal() {
        let a = testkit::p256();
        // A free port, with nothing listening on it yet.
        let addr = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let url = format!("http://{addr}/jwks");
        let jwks = jwks(&url, HOUR, Duration::from_secs(1));
        jwks.start();
        let (cache, v, t) = (TokenCache::new(100), validation(), token(&a, "a"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(jwks.keys().is_none());
        assert_eq!(
            jwks.verify(&t, &v, now(), &cache).await,
            Err(JwtError::KeysUnavailable)
        );
        let server = Server::start(&addr.to_string(), None).await;
        server.serve(&[a.jwk_with("a", None)]);
        // Still within the rate limit of the failed start-up fetch.
        assert_eq!(
            jwks.verify(&t, &v, now(), &cache).await,
            Err(JwtError::KeysUnavailable)
        );
        assert_eq!(server.fetches(), 0);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(jwks.verify(&t, &v, now(), &cache).await.is_ok());
        assert_eq!(server.fetches(), 1);
    }

    #[tokio::test]
    async fn refreshes_keep_the_last_good_set_and_stop_with_the_state() {
        let (a, b) = (testkit::p256(), testkit::p256());
        let server = Server::start("127.0.0.1:0", None).await;
        server.serve(&[a.jwk_with("a", None)]);
        let jwks = jwks(&server.url(), Duration::from_millis(100), HOUR);
        jwks.start();
        jwks.start(); // once only
        tokio::time::sleep(Duration::from_millis(50)).await;
        let first = jwks.keys().unwrap();
        assert_eq!(first.keys()[0].kid(), Some("a"));
        // Broken answers: the last good set stays.
        *lock(&server.body) = Some(b"{\"keys\": []}".to_vec());
        tokio::time::sleep(Duration::from_millis(250)).await;
        *lock(&server.body) = None;
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(Arc::ptr_eq(&jwks.keys().unwrap(), &first));
        let fetched = server.fetches();
        assert!(fetched >= 3, "{fetched} fetches");
        // A good answer again: the refresher picks it up.
        server.serve(&[b.jwk_with("b", None)]);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(jwks.keys().unwrap().keys()[0].kid(), Some("b"));
        // Dropped: the refresher ends at once, holding nothing.
        let weak = Arc::downgrade(&jwks);
        drop(jwks);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(weak.upgrade().is_none());
        let fetched = server.fetches();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(server.fetches(), fetched);
    }

    #[tokio::test]
    async fn reloads_reuse_the_state_of_the_same_url() {
        let a = testkit::p256();
        let server = Server::start("127.0.0.1:0", None).await;
        server.serve(&[a.jwk_with("a", None)]);
        let url = server.url();
        let old = Jwks::new(&url, HOUR, None).unwrap();
        let keys = old.refetch().await.unwrap();
        let same = Jwks::new(&url, HOUR, Some(&old)).unwrap();
        assert!(Arc::ptr_eq(&same, &old));
        let retimed = Jwks::new(&url, HOUR / 2, Some(&old)).unwrap();
        assert!(!Arc::ptr_eq(&retimed, &old));
        assert!(Arc::ptr_eq(&retimed.keys().unwrap(), &keys));
        let elsewhere = format!("http://{}/other", server.addr);
        assert!(Jwks::new(&elsewhere, HOUR, Some(&old))
            .unwrap()
            .keys()
            .is_none());
        assert_eq!(retimed.url(), url);
    }

    #[test]
    fn urls_must_be_http_or_https_with_a_host() {
        for bad in [
            "ftp://issuer.example/jwks",
            "/jwks",
            "issuer.example",
            "http://",
        ] {
            assert!(Jwks::new(bad, HOUR, None).is_err(), "{bad}");
        }
        // An https URL gets a TLS client config (the system's roots).
        let jwks = Jwks::new("https://issuer.example/.well-known/jwks.json", HOUR, None);
        assert!(jwks.is_ok());
    }
}
