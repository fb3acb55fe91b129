//! The soak test's driver (benches/soak/run builds and starts it): runs the
//! real `tollgate` binary in front of a real `redis-server` and an
//! in-process upstream for a given time, sends it mixed traffic, reloads it
//! and restarts Redis on a schedule, and reports the gateway's RSS, open
//! fds, request counts, unexpected errors and p99 latency over time.
//!
//! ```text
//! soak_driver --tollgate BIN --out DIR [--redis-server BIN] [--duration 1h]
//!             [--interval 30s] [--warmup 5m] [--reload-every 10s]
//!             [--redis-restart-every 5m] [--redis-down 2s] [--p99-every 10m]
//! ```
//!
//! Traffic classes (one route each, every limit on the Redis store with
//! `on_error: local`), and what counts as expected for each:
//!
//! | class     | request                                   | expected |
//! |-----------|-------------------------------------------|----------|
//! | allowed   | `GET /allowed`, 5000 client keys          | 200, body `ok <key>` |
//! | tight     | `GET /tight`, 3 keys, sliding_window + gcra | 200, or 429 `rate_limited` |
//! | login     | `GET /login`, 5 keys, fixed_window + lockout | 200, or 429 `locked_out` |
//! | stream    | `GET /stream/N/SEED`, 16 KiB-2 MiB, concurrency limit never reached | 200 and the exact pattern; 1 in 10 dropped half-way on purpose |
//! | upload    | `POST /upload`, chunked, 16 KiB-1 MiB      | 200, the upstream saw every byte right |
//! | ws        | WebSocket `/ws`: 3 messages echoed, closed | 101, echoes equal |
//! | ws_conc   | WebSocket `/ws-conc`: 3 clients, one key, `concurrency` limit 2 | 101 and echoes, or 429 `rate_limited` |
//!
//! Anything else is an unexpected error: another status (a 5xx during a
//! Redis restart too), a connection error or timeout, a wrong body, a failed
//! or unapplied reload, a concurrency slot still taken once traffic stopped,
//! a gateway that exits or does not shut down cleanly.
//!
//! Every `--reload-every` the gateway's config file is swapped between two
//! valid configs (the `generous` limit's rate and the `/__mark` route's body
//! differ) and the gateway gets SIGHUP; the driver checks that `/config`'s
//! generation went up by one and that `/__mark` answers the new body. Every
//! `--redis-restart-every` redis-server is killed (SIGKILL, no persistence:
//! the data and the Functions library are lost) and started again on the
//! same port after `--redis-down`.
//!
//! Every `--interval` one row goes to stdout, `DIR/soak.csv` and
//! `DIR/soak.jsonl`; at the end the summary goes to stdout,
//! `DIR/summary.json` and `DIR/summary.md`. Exit status 0 if all of these
//! hold, else 1 (2 on bad usage):
//!
//! - RSS grew less than 5 % after the warm-up: the mean of the first tenth
//!   of the rows after it (at least 3) against the mean of the last tenth
//!   (single samples move by a megabyte or two with the streams in flight);
//! - the fd count stayed flat after the warm-up: max - min at most 2 per
//!   traffic worker plus 4 (each worker holds at most one client connection
//!   and the gateway one upstream connection for it; the admin calls);
//! - once the traffic stopped and the idle pools timed out (at most 120 s),
//!   the gateway holds no more fds than before the traffic began;
//! - no unexpected error.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::time::{sleep, timeout};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

type BoxBody = UnsyncBoxBody<Bytes, Infallible>;
type HttpClient = Client<HttpConnector, BoxBody>;

/// How long one short request, or one WebSocket step, may take.
const STEP: Duration = Duration::from_secs(10);
/// How long a download or an upload may take.
const LONG: Duration = Duration::from_secs(30);
/// A Redis restart "window" lasts from the kill until this long after
/// redis-server answers again (errors in it are marked, not excused).
const REDIS_GRACE: Duration = Duration::from_secs(10);

// ------------------------------------------------------------------ options

struct Opts {
    tollgate: PathBuf,
    redis_server: PathBuf,
    out: PathBuf,
    duration: Duration,
    interval: Duration,
    warmup: Duration,
    reload_every: Duration,
    redis_restart_every: Duration,
    redis_down: Duration,
    p99_every: Duration,
}

fn usage() -> ! {
    eprintln!(
        "usage: soak_driver --tollgate BIN --out DIR [--redis-server BIN] [--duration 1h] \
         [--interval 30s] [--warmup 5m] [--reload-every 10s] [--redis-restart-every 5m] \
         [--redis-down 2s] [--p99-every 10m]"
    );
    std::process::exit(2)
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        tollgate: PathBuf::new(),
        redis_server: PathBuf::from("redis-server"),
        out: PathBuf::new(),
        duration: Duration::from_secs(3600),
        interval: Duration::from_secs(30),
        warmup: Duration::from_secs(300),
        reload_every: Duration::from_secs(10),
        redis_restart_every: Duration::from_secs(300),
        redis_down: Duration::from_secs(2),
        p99_every: Duration::from_secs(600),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let Some(value) = it.next() else { usage() };
        let dur = || {
            humantime::parse_duration(value).unwrap_or_else(|e| {
                eprintln!("{flag}: {e}");
                usage()
            })
        };
        match flag.as_str() {
            "--tollgate" => o.tollgate = value.into(),
            "--redis-server" => o.redis_server = value.into(),
            "--out" => o.out = value.into(),
            "--duration" => o.duration = dur(),
            "--interval" => o.interval = dur(),
            "--warmup" => o.warmup = dur(),
            "--reload-every" => o.reload_every = dur(),
            "--redis-restart-every" => o.redis_restart_every = dur(),
            "--redis-down" => o.redis_down = dur(),
            "--p99-every" => o.p99_every = dur(),
            _ => usage(),
        }
    }
    if o.tollgate.as_os_str().is_empty() || o.out.as_os_str().is_empty() {
        usage()
    }
    if o.interval.is_zero() || o.reload_every.is_zero() || o.p99_every.is_zero() {
        eprintln!("--interval, --reload-every and --p99-every must be above zero");
        usage()
    }
    o
}

// ------------------------------------------------------------------ the pattern

// The tests' pattern (tests/common/pattern.rs): a 64 KiB block of
// pseudo-random bytes. A body with seed `s` is the pattern read from offset
// `s`: byte `p` is `pattern_block()[(s + p) % PATTERN_LEN]`, so both ends
// check every byte cheaply.
#[path = "../../tests/common/pattern.rs"]
#[allow(dead_code)]
mod pattern;
use pattern::{matches_pattern, pattern_block, PATTERN_LEN as LEN};

/// The size of the chunks bodies are sent in.
const CHUNK: usize = 16 * 1024;

/// The next chunk of a body with `seed` at stream offset `pos`, at most
/// `left` bytes (never crossing the block's end: no copy).
fn pattern_chunk(seed: u64, pos: u64, left: u64) -> Bytes {
    let start = ((seed + pos) % LEN as u64) as usize;
    let take = (LEN - start).min(CHUNK).min(left as usize);
    pattern_block().slice(start..start + take)
}

/// Whether `data` is the body with `seed` at stream offset `pos`.
fn matches(seed: u64, pos: u64, data: &[u8]) -> bool {
    matches_pattern(seed + pos, data)
}

/// A streamed body of `len` pattern bytes from `seed`; with `pause`, a
/// yield to the timer every 4 chunks (so a body really arrives in parts).
fn pattern_body(seed: u64, len: u64, pause: bool) -> BoxBody {
    let stream = futures_util::stream::unfold(0u64, move |pos| async move {
        if pos >= len {
            return None;
        }
        if pause && pos > 0 && (pos / CHUNK as u64).is_multiple_of(4) {
            sleep(Duration::from_millis(1)).await;
        }
        let chunk = pattern_chunk(seed, pos, len - pos);
        let next = pos + chunk.len() as u64;
        Some((Ok::<_, Infallible>(Frame::data(chunk)), next))
    });
    StreamBody::new(stream).boxed_unsync()
}

fn empty() -> BoxBody {
    Empty::<Bytes>::new().boxed_unsync()
}

fn full(s: impl Into<Bytes>) -> BoxBody {
    Full::new(s.into()).boxed_unsync()
}

// ------------------------------------------------------------------ the upstream

/// HTTP upstream: `/allowed`, `/tight`, `/login` answer `ok <x-client>`;
/// `/stream/N/SEED` streams N pattern bytes; `POST /upload?seed=S` reads the
/// body and answers `len=N ok=BOOL`.
async fn upstream_http(listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(upstream_answer))
                .await;
        });
    }
}

async fn upstream_answer(req: Request<Incoming>) -> Result<Response<BoxBody>, Infallible> {
    let path = req.uri().path().to_owned();
    let client = req
        .headers()
        .get("x-client")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_owned();
    let reply = |status: StatusCode, body: BoxBody| {
        let mut r = Response::new(body);
        *r.status_mut() = status;
        Ok(r)
    };
    if let Some(rest) = path.strip_prefix("/stream/") {
        let mut parts = rest.split('/').map(|p| p.parse::<u64>());
        if let (Some(Ok(len)), Some(Ok(seed))) = (parts.next(), parts.next()) {
            return reply(StatusCode::OK, pattern_body(seed, len, false));
        }
        return reply(StatusCode::BAD_REQUEST, full("bad stream path\n"));
    }
    if path == "/upload" {
        let seed: u64 = req
            .uri()
            .query()
            .and_then(|q| q.strip_prefix("seed="))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut body = req.into_body();
        let (mut len, mut ok) = (0u64, true);
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => {
                    if let Some(d) = f.data_ref() {
                        ok &= matches(seed, len, d);
                        len += d.len() as u64;
                    }
                }
                Err(_) => return reply(StatusCode::BAD_REQUEST, full("body error\n")),
            }
        }
        return reply(StatusCode::OK, full(format!("len={len} ok={ok}\n")));
    }
    reply(StatusCode::OK, full(format!("ok {client}\n")))
}

/// WebSocket upstream: every text and binary message comes back as it was.
async fn upstream_ws(listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            sleep(Duration::from_millis(10)).await;
            continue;
        };
        tokio::spawn(async move {
            let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                return;
            };
            while let Some(Ok(msg)) = ws.next().await {
                if (msg.is_text() || msg.is_binary()) && ws.send(msg).await.is_err() {
                    break;
                }
            }
        });
    }
}

// ------------------------------------------------------------------ statistics

/// One class's figures over one interval.
#[derive(Default)]
struct ClassStats {
    n: u64,
    /// Outcome ("200", "429 rate_limited", "aborted", or the error kind) -> count.
    outcomes: BTreeMap<String, u64>,
    /// Latencies in microseconds (to the whole body; WebSocket: to the 101).
    lat: Vec<u32>,
    unexpected: u64,
}

#[derive(Default)]
struct Window {
    classes: BTreeMap<&'static str, ClassStats>,
    /// "class: kind" -> count.
    errors: BTreeMap<String, u64>,
}

/// The latency groups p99 is reported for.
const GROUPS: [(&str, &[&str]); 3] = [
    ("short", &["allowed", "tight", "login"]),
    ("stream", &["stream", "upload"]),
    ("ws", &["ws", "ws_conc"]),
];

fn group_of(class: &str) -> usize {
    GROUPS
        .iter()
        .position(|(_, cs)| cs.contains(&class))
        .unwrap_or(0)
}

struct Stats {
    start: Instant,
    window: Mutex<Window>,
    /// Per `--p99-every` period (index), per group: every latency.
    periods: Mutex<BTreeMap<u64, [Vec<u32>; 3]>>,
    period: Duration,
    /// The run's length (`--duration`).
    duration: Duration,
    totals: Mutex<BTreeMap<String, u64>>,
    class_totals: Mutex<BTreeMap<&'static str, BTreeMap<String, u64>>>,
    errlog: Mutex<(std::fs::File, u64)>,
    /// Redis is down since (seconds from start), and the last time it came back.
    redis_down: Mutex<(Option<f64>, Option<f64>)>,
}

impl Stats {
    fn secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn in_redis_window(&self, t: f64) -> bool {
        let (down, up) = *self.redis_down.lock().unwrap();
        down.is_some() || up.is_some_and(|u| t - u < REDIS_GRACE.as_secs_f64())
    }

    /// Records one request of `class`: its outcome, latency, and the
    /// unexpected error (kind, detail) if it was one.
    fn record(
        &self,
        class: &'static str,
        outcome: &str,
        lat: Option<Duration>,
        unexpected: Option<(&str, String)>,
    ) {
        let us = lat.map(|d| d.as_micros().min(u32::MAX as u128) as u32);
        {
            let mut w = self.window.lock().unwrap();
            let c = w.classes.entry(class).or_default();
            c.n += 1;
            *c.outcomes.entry(outcome.to_owned()).or_default() += 1;
            if let Some(us) = us {
                c.lat.push(us);
            }
            if let Some((kind, _)) = &unexpected {
                c.unexpected += 1;
                *w.errors.entry(format!("{class}: {kind}")).or_default() += 1;
            }
        }
        *self
            .class_totals
            .lock()
            .unwrap()
            .entry(class)
            .or_default()
            .entry(outcome.to_owned())
            .or_default() += 1;
        // Latencies of requests that end after the run's end (while the
        // traffic stops) make no period of their own.
        if let Some(us) = us.filter(|_| self.start.elapsed() < self.duration) {
            let p = (self.start.elapsed().as_nanos() / self.period.as_nanos().max(1)) as u64;
            self.periods.lock().unwrap().entry(p).or_default()[group_of(class)].push(us);
        }
        if let Some((kind, detail)) = unexpected {
            self.error(&format!("{class}: {kind}"), &detail, false);
        }
    }

    /// An unexpected error outside any request (reload, Redis, leak check...).
    fn error(&self, kind: &str, detail: &str, count_in_window: bool) {
        let t = self.secs();
        if count_in_window {
            *self
                .window
                .lock()
                .unwrap()
                .errors
                .entry(kind.to_owned())
                .or_default() += 1;
        }
        *self
            .totals
            .lock()
            .unwrap()
            .entry(kind.to_owned())
            .or_default() += 1;
        let mut log = self.errlog.lock().unwrap();
        // Kept bounded: the first 20,000 lines say what there is to say.
        if log.1 < 20_000 {
            log.1 += 1;
            let redis = if self.in_redis_window(t) {
                " [redis restart window]"
            } else {
                ""
            };
            let _ = writeln!(log.0, "{t:9.3}s {kind}{redis}: {detail}");
        }
    }

    fn take_window(&self) -> Window {
        std::mem::take(&mut *self.window.lock().unwrap())
    }
}

fn p99_ms(v: &mut [u32]) -> Option<f64> {
    percentile_ms(v, 0.99)
}

fn percentile_ms(v: &mut [u32], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    Some(v[i] as f64 / 1000.0)
}

// ------------------------------------------------------------------ the context

struct Ctx {
    gw: SocketAddr,
    admin: SocketAddr,
    client: HttpClient,
    admin_client: HttpClient,
    stats: Stats,
    stop: AtomicBool,
    /// Notified when `stop` is set.
    stopped: tokio::sync::Notify,
    reloads: AtomicU64,
    reload_failures: AtomicU64,
    redis_restarts: AtomicU64,
}

fn http_client(max_idle: usize) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    // Idle pooled connections are dropped well before the gateway's idle
    // timeout (60 s), so no request races a closing connection.
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(15))
        .pool_max_idle_per_host(max_idle)
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(connector)
}

/// A request's answer, body read whole.
struct Answer {
    status: StatusCode,
    body: Bytes,
}

/// Sends `req` and reads the whole answer, within `limit`.
async fn send(
    client: &HttpClient,
    req: Request<BoxBody>,
    limit: Duration,
) -> Result<Answer, String> {
    let work = async {
        let resp = client.request(req).await.map_err(|e| {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(cause) = src {
                let _ = write!(s, ": {cause}");
                src = cause.source();
            }
            format!("connection error: {s}")
        })?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body error: {e}"))?
            .to_bytes();
        Ok(Answer { status, body })
    };
    timeout(limit, work)
        .await
        .unwrap_or_else(|_| Err(format!("timeout after {limit:?}")))
}

fn request(method: Method, uri: String, client_key: &str, body: BoxBody) -> Request<BoxBody> {
    let mut req = Request::new(body);
    *req.method_mut() = method;
    *req.uri_mut() = uri.parse().expect("a valid URI");
    if let Ok(v) = HeaderValue::from_str(client_key) {
        req.headers_mut().insert("x-client", v);
    }
    req
}

/// The `error` and `limit` fields of a rejection's JSON body.
fn rejection(body: &[u8]) -> Option<(String, String)> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some((
        v.get("error")?.as_str()?.to_owned(),
        v.get("limit")?.as_str()?.to_owned(),
    ))
}

/// The kind of an error string: what comes before the first ':' (so that
/// counts group by kind, the detail goes to the log).
fn kind(e: &str) -> &str {
    e.split(':').next().unwrap_or(e)
}

fn short_body(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(200)]);
    s.replace('\n', "\\n")
}

// ------------------------------------------------------------------ traffic

/// A short request on `path` expecting 200 `ok <key>`, or a 429 whose
/// `error` is `rejected_as` from one of `limits`.
async fn short(
    ctx: &Ctx,
    class: &'static str,
    path: &str,
    key: &str,
    rejected_as: Option<(&str, &[&str])>,
) {
    let t0 = Instant::now();
    let uri = format!("http://{}{}", ctx.gw, path);
    let got = send(&ctx.client, request(Method::GET, uri, key, empty()), STEP).await;
    let lat = t0.elapsed();
    let st = &ctx.stats;
    match got {
        Err(e) => st.record(class, kind(&e), None, Some((kind(&e), e.clone()))),
        Ok(a) if a.status == StatusCode::OK => {
            if a.body == format!("ok {key}\n").as_bytes() {
                st.record(class, "200", Some(lat), None);
            } else {
                let d = format!("200 with body {:?}", short_body(&a.body));
                st.record(class, "bad body", Some(lat), Some(("bad body", d)));
            }
        }
        Ok(a) if a.status == StatusCode::TOO_MANY_REQUESTS => {
            match (rejection(&a.body), rejected_as) {
                (Some((error, limit)), Some((want, limits)))
                    if error == want && limits.contains(&limit.as_str()) =>
                {
                    st.record(class, &format!("429 {error}"), Some(lat), None)
                }
                _ => {
                    let d = format!("429 with body {:?}", short_body(&a.body));
                    st.record(
                        class,
                        "unexpected 429",
                        Some(lat),
                        Some(("unexpected 429", d)),
                    );
                }
            }
        }
        Ok(a) => {
            let k = format!("status {}", a.status.as_u16());
            let d = format!("{k} with body {:?}", short_body(&a.body));
            st.record(class, &k, Some(lat), Some((&k, d)));
        }
    }
}

/// A download of `len` bytes, every byte checked; with `abort`, dropped
/// after about half (on purpose: the gateway must release everything).
async fn download(ctx: &Ctx, key: &str, len: u64, seed: u64, abort: bool) {
    let class = "stream";
    let t0 = Instant::now();
    let uri = format!("http://{}/stream/{len}/{seed}", ctx.gw);
    let req = request(Method::GET, uri, key, empty());
    let work = async {
        let resp = ctx
            .client
            .request(req)
            .await
            .map_err(|e| format!("connection error: {e}"))?;
        let status = resp.status();
        let mut body = resp.into_body();
        if status != StatusCode::OK {
            let b = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            return Err(format!("status {}: {:?}", status.as_u16(), short_body(&b)));
        }
        let mut pos = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("body error: {e} at byte {pos} of {len}"))?;
            if let Some(d) = frame.data_ref() {
                if !matches(seed, pos, d) {
                    return Err(format!(
                        "bad body: pattern differs in bytes {pos}..{}",
                        pos + d.len() as u64
                    ));
                }
                pos += d.len() as u64;
                if abort && pos >= len / 2 {
                    return Ok(true);
                }
            }
        }
        if pos != len {
            return Err(format!("bad body: {pos} bytes of {len}"));
        }
        Ok(false)
    };
    let got = timeout(LONG, work)
        .await
        .unwrap_or_else(|_| Err(format!("timeout after {LONG:?}")));
    let lat = t0.elapsed();
    match got {
        Ok(true) => ctx.stats.record(class, "aborted", None, None),
        Ok(false) => ctx.stats.record(class, "200", Some(lat), None),
        Err(e) => {
            let d = format!("{e} (x-client {key})");
            ctx.stats.record(class, kind(&e), None, Some((kind(&e), d)))
        }
    }
}

/// A chunked upload of `len` bytes; the upstream checks every byte.
async fn upload(ctx: &Ctx, key: &str, len: u64, seed: u64) {
    let class = "upload";
    let t0 = Instant::now();
    let uri = format!("http://{}/upload?seed={seed}", ctx.gw);
    let req = request(Method::POST, uri, key, pattern_body(seed, len, true));
    let got = send(&ctx.client, req, LONG).await;
    let lat = t0.elapsed();
    let want = format!("len={len} ok=true\n");
    match got {
        Ok(a) if a.status == StatusCode::OK && a.body == want.as_bytes() => {
            ctx.stats.record(class, "200", Some(lat), None)
        }
        Ok(a) => {
            let k = if a.status == StatusCode::OK {
                "bad body".to_owned()
            } else {
                format!("status {}", a.status.as_u16())
            };
            let d = format!("{k}: {:?}, wanted {want:?}", short_body(&a.body));
            ctx.stats.record(class, &k, None, Some((&k, d)));
        }
        Err(e) => ctx
            .stats
            .record(class, kind(&e), None, Some((kind(&e), e.clone()))),
    }
}

/// One WebSocket session on `path`: handshake, `msgs` echoes (holding the
/// tunnel `hold` between the first and the rest), close. With `limit`, a 429
/// `rate_limited` from that limit is expected too.
async fn ws_session(
    ctx: &Ctx,
    class: &'static str,
    path: &str,
    key: &str,
    msgs: usize,
    hold: Duration,
    limit: Option<&str>,
) {
    let st = &ctx.stats;
    let mut req = format!("ws://{}{}", ctx.gw, path)
        .into_client_request()
        .expect("a valid WebSocket URL");
    if let Ok(v) = HeaderValue::from_str(key) {
        req.headers_mut().insert("x-client", v);
    }
    let t0 = Instant::now();
    let mut ws = match timeout(STEP, tokio_tungstenite::connect_async(req)).await {
        Err(_) => {
            return st.record(
                class,
                "timeout",
                None,
                Some(("timeout", "handshake timed out".into())),
            )
        }
        Ok(Err(WsError::Http(resp))) => {
            let lat = t0.elapsed();
            let status = resp.status();
            let body = resp.body().clone().unwrap_or_default();
            if status == StatusCode::TOO_MANY_REQUESTS {
                if let (Some((error, l)), Some(want)) = (rejection(&body), limit) {
                    if error == "rate_limited" && l == want {
                        return st.record(class, "429 rate_limited", Some(lat), None);
                    }
                }
            }
            let k = format!("status {}", status.as_u16());
            let d = format!("handshake answered {k}: {:?}", short_body(&body));
            return st.record(class, &k, Some(lat), Some((&k, d)));
        }
        Ok(Err(e)) => {
            let d = format!("handshake: {e}");
            return st.record(
                class,
                "connection error",
                None,
                Some(("connection error", d)),
            );
        }
        Ok(Ok((ws, _))) => ws,
    };
    let lat = t0.elapsed();
    let seed = fastrand::u64(..LEN as u64);
    let work = async {
        for i in 0..msgs {
            if i == 1 && !hold.is_zero() {
                sleep(hold).await;
            }
            let msg = if i % 2 == 0 {
                Message::text(format!("message {i} of {key} seed {seed}"))
            } else {
                let n = 512 + fastrand::u64(..8192);
                let mut v = Vec::with_capacity(n as usize);
                let mut pos = 0;
                while pos < n {
                    let c = pattern_chunk(seed, pos, n - pos);
                    pos += c.len() as u64;
                    v.extend_from_slice(&c);
                }
                Message::binary(v)
            };
            ws.send(msg.clone())
                .await
                .map_err(|e| format!("send error: {e}"))?;
            match ws.next().await {
                Some(Ok(echo)) if echo == msg => {}
                Some(Ok(other)) => return Err(format!("bad echo: {:?}", other.len())),
                Some(Err(e)) => return Err(format!("receive error: {e}")),
                None => return Err("receive error: the tunnel ended".into()),
            }
        }
        ws.close(None)
            .await
            .map_err(|e| format!("close error: {e}"))?;
        loop {
            match ws.next().await {
                None | Some(Err(WsError::ConnectionClosed)) => return Ok(()),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(format!("close error: {e}")),
            }
        }
    };
    match timeout(STEP + hold, work).await {
        Ok(Ok(())) => st.record(class, "101", Some(lat), None),
        Ok(Err(e)) => st.record(class, kind(&e), Some(lat), Some((kind(&e), e.clone()))),
        Err(_) => st.record(
            class,
            "timeout",
            Some(lat),
            Some(("timeout", "session timed out".into())),
        ),
    }
}

/// A traffic worker: `class`'s request, a pause, until told to stop.
async fn worker(ctx: Arc<Ctx>, class: &'static str, n: usize) {
    // Spread the workers' starts a little.
    sleep(Duration::from_millis(fastrand::u64(..200))).await;
    while !ctx.stop.load(Ordering::Relaxed) {
        let pause = match class {
            "allowed" => {
                let key = format!("a{}", fastrand::u32(..5000));
                short(&ctx, class, "/allowed", &key, None).await;
                5
            }
            "tight" => {
                let key = format!("t{}", fastrand::u32(..3));
                short(
                    &ctx,
                    class,
                    "/tight",
                    &key,
                    Some(("rate_limited", &["tight_sw", "tight_gcra"])),
                )
                .await;
                5
            }
            "login" => {
                let key = format!("l{}", fastrand::u32(..5));
                short(
                    &ctx,
                    class,
                    "/login",
                    &key,
                    Some(("locked_out", &["login"])),
                )
                .await;
                20
            }
            "stream" => {
                let len = 16 * 1024 + fastrand::u64(..2 * 1024 * 1024);
                let seed = fastrand::u64(..LEN as u64);
                download(&ctx, &format!("s{n}"), len, seed, fastrand::u32(..10) == 0).await;
                50
            }
            "upload" => {
                let len = 16 * 1024 + fastrand::u64(..1024 * 1024);
                upload(&ctx, &format!("u{n}"), len, fastrand::u64(..LEN as u64)).await;
                50
            }
            "ws" => {
                ws_session(
                    &ctx,
                    class,
                    "/ws",
                    &format!("w{n}"),
                    3,
                    Duration::ZERO,
                    None,
                )
                .await;
                50
            }
            "ws_conc" => {
                let hold = Duration::from_millis(50 + fastrand::u64(..250));
                ws_session(&ctx, class, "/ws-conc", "wsc", 2, hold, Some("ws_conc")).await;
                20
            }
            _ => unreachable!("unknown class {class}"),
        };
        sleep(Duration::from_millis(pause)).await;
    }
}

/// The traffic: (class, workers).
const WORKERS: [(&str, usize); 7] = [
    ("allowed", 3),
    ("tight", 2),
    ("login", 1),
    ("stream", 2),
    ("upload", 1),
    ("ws", 1),
    ("ws_conc", 3),
];

// ------------------------------------------------------------------ configs

/// The gateway's config; `variant` 0 or 1 differ only in the `generous`
/// limit's rate and the `/__mark` route's body.
fn gateway_config(
    variant: usize,
    gw: u16,
    admin: u16,
    redis: u16,
    up_http: u16,
    up_ws: u16,
) -> String {
    let rate = [100_000, 200_000][variant];
    let mark = ["a", "b"][variant];
    format!(
        r#"# tollgate soak config, variant {mark} (written by benches/tools/soak_driver.rs)
server:
  listen: ["127.0.0.1:{gw}"]
  timeouts: {{ header_read: 10s, idle: 60s }}
admin:
  listen: "127.0.0.1:{admin}"
store:
  backend: redis
  url: "redis://127.0.0.1:{redis}/0"
  prefix: soak
  timeout: 50ms
  on_error: local
upstreams:
  http: {{ targets: ["http://127.0.0.1:{up_http}"] }}
  ws: {{ targets: ["http://127.0.0.1:{up_ws}"] }}
limits:
  generous: {{ algorithm: token_bucket, rate: {rate}/s, key: "header:x-client" }}
  tight_sw: {{ algorithm: sliding_window, limit: 20, window: 2s, key: "header:x-client" }}
  tight_gcra: {{ algorithm: gcra, rate: 5/s, burst: 5, key: "header:x-client" }}
  login:
    algorithm: fixed_window
    limit: 3
    window: 10s
    key: "header:x-client"
    lockout: {{ after: 1, duration: 5s, escalate: 2, max_duration: 20s }}
  # Never reached by the two download workers (one key each): a 429 here
  # means a slot was not given back.
  stream_conc: {{ algorithm: concurrency, limit: 4, key: "header:x-client", lease: 2m }}
  ws_conc: {{ algorithm: concurrency, limit: 2, key: "header:x-client", lease: 2m }}
routes:
  - name: mark
    match: {{ exact: /__mark }}
    respond: {{ status: 200, body: "{mark}\n" }}
  - name: allowed
    match: {{ exact: /allowed }}
    upstream: http
    limits: [generous]
  - name: tight
    match: {{ exact: /tight }}
    upstream: http
    limits: [tight_sw, tight_gcra]
  - name: login
    match: {{ exact: /login }}
    upstream: http
    limits: [login]
  - name: stream
    match: {{ path: /stream, methods: [GET] }}
    upstream: http
    limits: [generous, stream_conc]
  - name: upload
    match: {{ exact: /upload, methods: [POST] }}
    upstream: http
    limits: [generous]
  - name: ws
    match: {{ exact: /ws }}
    upstream: ws
    limits: [generous]
  - name: ws_conc
    match: {{ exact: /ws-conc }}
    upstream: ws
    limits: [ws_conc]
"#
    )
}

// ------------------------------------------------------------------ processes

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn log_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Records a child's pid in `DIR/pids` (the run script kills what is left
/// there if the driver itself dies).
fn note_pid(out: &Path, what: &str, pid: u32) {
    let mut f = log_file(&out.join("pids"));
    let _ = writeln!(f, "{pid} {what}");
}

fn spawn_redis(o: &Opts, port: u16) -> std::io::Result<Child> {
    let log = log_file(&o.out.join("redis.log"));
    let child = Command::new(&o.redis_server)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--daemonize", "no", "--dir"])
        .arg(&o.out)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    if let Some(pid) = child.id() {
        note_pid(&o.out, "redis-server", pid);
    }
    Ok(child)
}

/// Waits until Redis answers PING on `port` (at most `limit`).
async fn redis_ready(port: u16, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Ok(mut s)) = timeout(
            Duration::from_millis(500),
            TcpStream::connect(("127.0.0.1", port)),
        )
        .await
        {
            let mut buf = [0u8; 16];
            if s.write_all(b"PING\r\n").await.is_ok() {
                if let Ok(Ok(n)) = timeout(Duration::from_millis(500), s.read(&mut buf)).await {
                    if buf[..n].starts_with(b"+PONG") {
                        return true;
                    }
                }
            }
        }
        sleep(Duration::from_millis(50)).await;
    }
    false
}

/// One look at the gateway process in /proc.
struct ProcSample {
    /// VmRSS, KiB: what the pass condition judges.
    rss_kb: u64,
    /// RssAnon, KiB: the heap, stacks and other private memory.
    anon_kb: u64,
    /// RssFile, KiB: the binary's and libraries' pages read in so far.
    file_kb: u64,
    threads: u64,
    fds: u64,
    /// CPU time, user + system, in clock ticks.
    ticks: u64,
}

/// The memory, threads, open fds and CPU ticks of `pid`.
fn proc_sample(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(") ")?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ProcSample {
        rss_kb: field("VmRSS:")?,
        anon_kb: field("RssAnon:")?,
        file_kb: field("RssFile:")?,
        threads: field("Threads:")?,
        fds,
        ticks,
    })
}

fn ticks_per_sec() -> f64 {
    // getconf is what the bash scripts use; 100 everywhere that matters.
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

async fn admin_get(ctx: &Ctx, path: &str) -> Result<Answer, String> {
    let uri = format!("http://{}{}", ctx.admin, path);
    send(
        &ctx.admin_client,
        request(Method::GET, uri, "admin", empty()),
        STEP,
    )
    .await
}

async fn admin_json(ctx: &Ctx, path: &str) -> Result<serde_json::Value, String> {
    let a = admin_get(ctx, path).await?;
    serde_json::from_slice(&a.body).map_err(|e| format!("{path}: status {}, {e}", a.status))
}

/// The sum of the samples of `metric` (optionally with `label` in its
/// labels) in the Prometheus text.
fn metric_sum(text: &str, metric: &str, label: Option<&str>) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(metric) && l[metric.len()..].starts_with(['{', ' ']))
        .filter(|l| label.is_none_or(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

// ------------------------------------------------------------------ reloads and restarts

struct Reloader {
    path: PathBuf,
    variants: [String; 2],
    pid: u32,
    /// The generation the gateway should be at.
    expected: u64,
    next: usize,
}

impl Reloader {
    /// Swaps the config file to the other variant, sends SIGHUP and checks
    /// that the new generation and `/__mark` body are in force.
    async fn reload(&mut self, ctx: &Ctx) {
        let v = self.next;
        self.next = 1 - v;
        let tmp = self.path.with_extension("yaml.tmp");
        if let Err(e) =
            std::fs::write(&tmp, &self.variants[v]).and_then(|_| std::fs::rename(&tmp, &self.path))
        {
            return ctx.stats.error("reload: write", &e.to_string(), true);
        }
        let sent = std::process::Command::new("kill")
            .args(["-HUP", &self.pid.to_string()])
            .status();
        if !sent.as_ref().is_ok_and(|s| s.success()) {
            return ctx
                .stats
                .error("reload: kill -HUP failed", &format!("{sent:?}"), true);
        }
        ctx.reloads.fetch_add(1, Ordering::Relaxed);
        self.expected += 1;
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut last: String;
        loop {
            match admin_json(ctx, "/config").await {
                Ok(c) => {
                    let generation = c["generation"].as_u64().unwrap_or(0);
                    if generation == self.expected {
                        break;
                    }
                    last = format!(
                        "generation {generation}, wanted {}, last_error {}",
                        self.expected, c["last_error"]
                    );
                    if generation > self.expected {
                        self.expected = generation;
                        ctx.reload_failures.fetch_add(1, Ordering::Relaxed);
                        return ctx.stats.error("reload: generation skipped", &last, true);
                    }
                }
                Err(e) => last = e,
            }
            if Instant::now() > deadline {
                ctx.reload_failures.fetch_add(1, Ordering::Relaxed);
                // Do not expect this one again.
                self.expected -= 1;
                return ctx
                    .stats
                    .error("reload: not applied within 5 s", &last, true);
            }
            sleep(Duration::from_millis(50)).await;
        }
        let want = ["a\n", "b\n"][v];
        let uri = format!("http://{}/__mark", ctx.gw);
        match send(
            &ctx.admin_client,
            request(Method::GET, uri, "mark", empty()),
            STEP,
        )
        .await
        {
            Ok(a) if a.status == StatusCode::OK && a.body == want.as_bytes() => {}
            Ok(a) => {
                ctx.reload_failures.fetch_add(1, Ordering::Relaxed);
                let d = format!(
                    "/__mark answered {} {:?}, wanted {want:?}",
                    a.status,
                    short_body(&a.body)
                );
                ctx.stats
                    .error("reload: old config still answers", &d, true);
            }
            Err(e) => ctx.stats.error("reload: /__mark", &e, true),
        }
    }
}

/// Kills redis-server, waits `down`, starts it again on the same port.
async fn restart_redis(ctx: &Ctx, o: &Opts, port: u16, redis: &Mutex<Option<Child>>) {
    let old = redis.lock().unwrap().take();
    *ctx.stats.redis_down.lock().unwrap() = (Some(ctx.stats.secs()), None);
    if let Some(mut child) = old {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    sleep(o.redis_down).await;
    let mut tries = 0;
    loop {
        tries += 1;
        match spawn_redis(o, port) {
            Ok(child) => {
                *redis.lock().unwrap() = Some(child);
                if redis_ready(port, Duration::from_secs(10)).await {
                    break;
                }
                ctx.stats.error(
                    "redis: did not come back",
                    &format!("try {tries} on port {port}"),
                    true,
                );
            }
            Err(e) => ctx.stats.error("redis: spawn", &e.to_string(), true),
        }
        if tries >= 5 {
            break;
        }
        if let Some(mut c) = redis.lock().unwrap().take() {
            let _ = c.start_kill();
        }
        sleep(Duration::from_secs(1)).await;
    }
    ctx.redis_restarts.fetch_add(1, Ordering::Relaxed);
    *ctx.stats.redis_down.lock().unwrap() = (None, Some(ctx.stats.secs()));
}

// ------------------------------------------------------------------ rows

struct Row {
    elapsed: f64,
    rss_kb: u64,
    /// RssAnon and RssFile (KiB): reported beside RSS, not judged.
    anon_kb: u64,
    file_kb: u64,
    fds: u64,
    threads: u64,
    cpu_pct: f64,
    json: serde_json::Value,
    csv: String,
}

const CSV_HEAD: &str = "elapsed_s,rss_kb,rss_anon_kb,rss_file_kb,fds,threads,cpu_pct,requests,allowed,tight,tight_429,login,login_locked_out,stream,stream_aborted,upload,ws,ws_conc,ws_conc_429,unexpected,p99_short_ms,p99_stream_ms,p99_ws_ms,generation,reloads,reload_failures,redis_restarts,store_errors";

fn fmt_opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_default()
}

/// Prints one `Row`, from the window just ended and a sample of the process.
async fn take_row(ctx: &Ctx, pid: u32, last_ticks: &mut (u64, Instant), hz: f64) -> Option<Row> {
    let mut w = ctx.stats.take_window();
    let elapsed = ctx.stats.secs();
    let ProcSample {
        rss_kb,
        anon_kb,
        file_kb,
        threads,
        fds,
        ticks,
    } = proc_sample(pid)?;
    let now = Instant::now();
    let cpu_pct =
        (ticks - last_ticks.0) as f64 / hz / (now - last_ticks.1).as_secs_f64().max(1e-3) * 100.0;
    *last_ticks = (ticks, now);
    let (generation, store_errors) = {
        let g = admin_json(ctx, "/config")
            .await
            .ok()
            .and_then(|c| c["generation"].as_u64());
        let m = admin_get(ctx, "/metrics").await.ok();
        let s = m.map(|a| {
            metric_sum(
                &String::from_utf8_lossy(&a.body),
                "tollgate_store_errors_total",
                None,
            )
        });
        (g, s)
    };
    let n = |c: &str| w.classes.get(c).map_or(0, |s| s.n);
    let out = |c: &str, o: &str| {
        w.classes
            .get(c)
            .and_then(|s| s.outcomes.get(o))
            .copied()
            .unwrap_or(0)
    };
    let mut p99 = [None; 3];
    for (i, (_, classes)) in GROUPS.iter().enumerate() {
        let mut v: Vec<u32> = classes
            .iter()
            .filter_map(|c| w.classes.get(c))
            .flat_map(|s| s.lat.iter().copied())
            .collect();
        p99[i] = p99_ms(&mut v);
    }
    let requests: u64 = w.classes.values().map(|s| s.n).sum();
    let unexpected: u64 = w.errors.values().sum();
    let reloads = ctx.reloads.load(Ordering::Relaxed);
    let reload_failures = ctx.reload_failures.load(Ordering::Relaxed);
    let restarts = ctx.redis_restarts.load(Ordering::Relaxed);
    let csv = format!(
        "{:.1},{rss_kb},{anon_kb},{file_kb},{fds},{threads},{cpu_pct:.1},{requests},{},{},{},{},{},{},{},{},{},{},{},{unexpected},{},{},{},{},{reloads},{reload_failures},{restarts},{}",
        elapsed,
        n("allowed"),
        n("tight"),
        out("tight", "429 rate_limited"),
        n("login"),
        out("login", "429 locked_out"),
        n("stream"),
        out("stream", "aborted"),
        n("upload"),
        n("ws"),
        n("ws_conc"),
        out("ws_conc", "429 rate_limited"),
        fmt_opt(p99[0]),
        fmt_opt(p99[1]),
        fmt_opt(p99[2]),
        generation.map(|g| g.to_string()).unwrap_or_default(),
        store_errors.map(|g| g.to_string()).unwrap_or_default(),
    );
    let classes: serde_json::Map<String, serde_json::Value> = w
        .classes
        .iter_mut()
        .map(|(c, s)| {
            let p50 = percentile_ms(&mut s.lat, 0.5);
            let p99 = percentile_ms(&mut s.lat, 0.99);
            let max = s.lat.last().map(|&x| x as f64 / 1000.0);
            (
                c.to_string(),
                serde_json::json!({"n": s.n, "outcomes": s.outcomes, "unexpected": s.unexpected,
                                   "p50_ms": p50, "p99_ms": p99, "max_ms": max}),
            )
        })
        .collect();
    let json = serde_json::json!({
        "elapsed_s": (elapsed * 10.0).round() / 10.0, "rss_kb": rss_kb,
        "rss_anon_kb": anon_kb, "rss_file_kb": file_kb, "fds": fds, "threads": threads,
        "cpu_pct": (cpu_pct * 10.0).round() / 10.0, "requests": requests, "unexpected": unexpected,
        "errors": w.errors, "classes": classes,
        "p99_ms": {"short": p99[0], "stream": p99[1], "ws": p99[2]},
        "generation": generation, "reloads": reloads, "reload_failures": reload_failures,
        "redis_restarts": restarts, "store_errors": store_errors,
    });
    println!(
        "[{:>7.1}s] rss {:>6} KiB (anon {:>6})  fds {:>3}  thr {:>2}  cpu {:>5.1}%  req {:>6}  unexpected {:>3}  p99 short/stream/ws {}/{}/{} ms  gen {}  reloads {}  redis restarts {}  store errors {}",
        elapsed, rss_kb, anon_kb, fds, threads, cpu_pct, requests, unexpected,
        fmt_opt(p99[0]), fmt_opt(p99[1]), fmt_opt(p99[2]),
        generation.map(|g| g.to_string()).unwrap_or("?".into()), reloads, restarts,
        store_errors.map(|g| g.to_string()).unwrap_or("?".into()),
    );
    if unexpected > 0 {
        println!("           unexpected: {:?}", w.errors);
    }
    Some(Row {
        elapsed,
        rss_kb,
        anon_kb,
        file_kb,
        fds,
        threads,
        cpu_pct,
        json,
        csv,
    })
}

// ------------------------------------------------------------------ main

fn main() {
    let o = parse_opts();
    if let Err(e) = std::fs::create_dir_all(&o.out) {
        eprintln!("{}: {e}", o.out.display());
        std::process::exit(2);
    }
    // The upstream runs on a runtime (and thread) of its own, so the
    // driver's load and checks do not delay its answers, and the other way.
    let up_http = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
    let up_ws = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the WebSocket upstream");
    let ports = (
        up_http.local_addr().expect("addr").port(),
        up_ws.local_addr().expect("addr").port(),
    );
    up_http.set_nonblocking(true).expect("nonblocking");
    up_ws.set_nonblocking(true).expect("nonblocking");
    std::thread::Builder::new()
        .name("upstream".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the upstream's runtime");
            rt.block_on(async move {
                let h = TcpListener::from_std(up_http).expect("listener");
                let w = TcpListener::from_std(up_ws).expect("listener");
                tokio::join!(upstream_http(h), upstream_ws(w));
            })
        })
        .expect("the upstream's thread");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the driver's runtime");
    let code = rt.block_on(run(o, ports));
    rt.shutdown_timeout(Duration::from_secs(1));
    std::process::exit(code);
}

async fn run(o: Opts, (up_http, up_ws): (u16, u16)) -> i32 {
    let (gw_port, admin_port, redis_port) = (free_port(), free_port(), free_port());
    let variants =
        [0, 1].map(|v| gateway_config(v, gw_port, admin_port, redis_port, up_http, up_ws));
    for (v, text) in variants.iter().enumerate() {
        let _ = std::fs::write(o.out.join(format!("gateway-{}.yaml", ["a", "b"][v])), text);
    }
    let conf = o.out.join("gateway.yaml");
    std::fs::write(&conf, &variants[0]).expect("write the config");

    // Redis first, so the gateway starts with its store up.
    let redis = Arc::new(Mutex::new(Some(
        spawn_redis(&o, redis_port).expect("start redis-server"),
    )));
    if !redis_ready(redis_port, Duration::from_secs(10)).await {
        eprintln!(
            "redis-server did not answer on port {redis_port}; see {}",
            o.out.join("redis.log").display()
        );
        return 1;
    }
    let log = log_file(&o.out.join("gateway.log"));
    let mut gateway = Command::new(&o.tollgate)
        .arg("-c")
        .arg(&conf)
        .env("TOLLGATE_LOG", "info,tollgate::access=off")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("start tollgate");
    let pid = gateway.id().expect("the gateway's pid");
    note_pid(&o.out, "tollgate", pid);

    let errlog = log_file(&o.out.join("errors.log"));
    let ctx = Arc::new(Ctx {
        gw: SocketAddr::from(([127, 0, 0, 1], gw_port)),
        admin: SocketAddr::from(([127, 0, 0, 1], admin_port)),
        client: http_client(32),
        admin_client: http_client(2),
        stats: Stats {
            start: Instant::now(),
            window: Mutex::default(),
            periods: Mutex::default(),
            period: o.p99_every,
            duration: o.duration,
            totals: Mutex::default(),
            class_totals: Mutex::default(),
            errlog: Mutex::new((errlog, 0)),
            redis_down: Mutex::new((None, None)),
        },
        stop: AtomicBool::new(false),
        stopped: tokio::sync::Notify::new(),
        reloads: AtomicU64::new(0),
        reload_failures: AtomicU64::new(0),
        redis_restarts: AtomicU64::new(0),
    });

    // Ready: /readyz answers 200.
    let deadline = Instant::now() + Duration::from_secs(20);
    let generation = loop {
        if let Ok(c) = admin_json(&ctx, "/readyz").await {
            if let Some(g) = c["generation"].as_u64() {
                break g;
            }
        }
        if Instant::now() > deadline || gateway.try_wait().ok().flatten().is_some() {
            eprintln!(
                "the gateway did not become ready; see {}",
                o.out.join("gateway.log").display()
            );
            return 1;
        }
        sleep(Duration::from_millis(100)).await;
    };
    let idle_start = proc_sample(pid);
    let redis_version = std::process::Command::new(&o.redis_server)
        .arg("--version")
        .output()
        .map(|x| String::from_utf8_lossy(&x.stdout).trim().to_owned())
        .unwrap_or_default();
    println!(
        "soak: gateway pid {pid} on 127.0.0.1:{gw_port} (admin {admin_port}), redis on {redis_port} ({redis_version}), \
         upstreams {up_http}/{up_ws}; duration {:?}, interval {:?}, warm-up {:?}, reload every {:?}, redis restart every {:?}; out {}",
        o.duration, o.interval, o.warmup, o.reload_every, o.redis_restart_every, o.out.display()
    );
    let mut csv = log_file(&o.out.join("soak.csv"));
    let _ = writeln!(csv, "{CSV_HEAD}");
    let mut jsonl = log_file(&o.out.join("soak.jsonl"));

    let mut tasks = tokio::task::JoinSet::new();
    let mut nworkers = 0;
    for (class, n) in WORKERS {
        for i in 0..n {
            tasks.spawn(worker(ctx.clone(), class, i));
            nworkers += 1;
        }
    }
    let mut reloader = Reloader {
        path: conf.clone(),
        variants,
        pid,
        expected: generation,
        next: 1,
    };
    let reload_task = {
        let ctx = ctx.clone();
        let every = o.reload_every;
        tokio::spawn(async move {
            let mut next = Instant::now() + every;
            while !ctx.stop.load(Ordering::Relaxed) {
                tokio::time::sleep_until(next.into()).await;
                if ctx.stop.load(Ordering::Relaxed) {
                    break;
                }
                reloader.reload(&ctx).await;
                next += every;
            }
        })
    };
    let o = Arc::new(o);
    let end = ctx.stats.start + o.duration;
    let redis_task = {
        let (ctx, o, redis) = (ctx.clone(), o.clone(), redis.clone());
        tokio::spawn(async move {
            if o.redis_restart_every.is_zero() {
                return;
            }
            let mut next = Instant::now() + o.redis_restart_every;
            // No restart at (or after) the end: the traffic is stopping.
            while next + o.redis_down < end {
                // Woken early by a stop (an interrupted run); a restart
                // under way is finished first, so Redis is up at the end.
                let stopped = ctx.stopped.notified();
                tokio::pin!(stopped);
                stopped.as_mut().enable();
                if ctx.stop.load(Ordering::Relaxed) {
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep_until(next.into()) => {}
                    _ = stopped => break,
                }
                restart_redis(&ctx, &o, redis_port, &redis).await;
                next += o.redis_restart_every;
            }
        })
    };

    let hz = ticks_per_sec();
    let mut last_ticks = (idle_start.as_ref().map_or(0, |s| s.ticks), Instant::now());
    let mut rows: Vec<Row> = Vec::new();
    let mut next_row = Instant::now() + o.interval;
    let mut interrupted = false;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    let mut gateway_died = None;
    loop {
        let wake = next_row.min(end);
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = tokio::signal::ctrl_c() => { interrupted = true; }
            _ = sigterm.recv() => { interrupted = true; }
            status = gateway.wait() => { gateway_died = Some(format!("{status:?}")); }
        }
        if let Some(status) = &gateway_died {
            ctx.stats
                .error("gateway: exited during the run", status, true);
            break;
        }
        if interrupted {
            println!("soak: interrupted; stopping early");
            break;
        }
        if Instant::now() >= next_row || Instant::now() >= end {
            match take_row(&ctx, pid, &mut last_ticks, hz).await {
                Some(row) => {
                    let _ = writeln!(csv, "{}", row.csv);
                    let _ = writeln!(jsonl, "{}", row.json);
                    rows.push(row);
                }
                None => ctx.stats.error("gateway: /proc unreadable", "", true),
            }
            next_row += o.interval;
        }
        if Instant::now() >= end {
            break;
        }
    }

    // Stop the traffic; let what is in flight finish.
    ctx.stop.store(true, Ordering::Relaxed);
    ctx.stopped.notify_waiters();
    reload_task.abort();
    let _ = redis_task.await;
    let drained = timeout(LONG + Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        ctx.stats
            .error("driver: workers still busy 35 s after the stop", "", false);
        tasks.abort_all();
    }
    // Whatever was still counted in the last window belongs to the totals
    // already (class_totals); the window itself is dropped.
    let _ = ctx.stats.take_window();

    // Leak checks once every request and tunnel has ended: each
    // concurrency key has all its slots back.
    let mut leak_checks = Vec::new();
    if gateway_died.is_none() {
        sleep(Duration::from_secs(2)).await;
        let mut keys: Vec<(&str, String)> = vec![("ws_conc", "wsc".into())];
        let streams = WORKERS
            .iter()
            .find(|(c, _)| *c == "stream")
            .map_or(0, |w| w.1);
        for i in 0..streams {
            keys.push(("stream_conc", format!("s{i}")));
        }
        for (limit, key) in keys {
            let path = format!("/limits/{limit}/{key}");
            let mut last = String::new();
            let mut ok = false;
            // The store may still be in its back-off after the last restart.
            for _ in 0..20 {
                match admin_json(&ctx, &path).await {
                    Ok(v) if v["remaining"].is_u64() => {
                        last = v.to_string();
                        ok = v["remaining"] == v["quota"];
                        break;
                    }
                    Ok(v) => last = v.to_string(),
                    Err(e) => last = e,
                }
                sleep(Duration::from_millis(500)).await;
            }
            if !ok {
                ctx.stats.error(
                    "leak: concurrency slots still taken",
                    &format!("{path}: {last}"),
                    false,
                );
            }
            leak_checks.push(serde_json::json!({"path": path, "ok": ok, "answer": last}));
        }
    }
    // The fds with no traffic: once the driver's pool (15 s) and the
    // gateway's upstream pool (90 s) have closed their idle connections,
    // the gateway holds what it held before the traffic began.
    let mut idle_end = None;
    let mut idle_wait = 0;
    if gateway_died.is_none() {
        let want = idle_start.as_ref().map_or(0, |s| s.fds);
        for waited in 0..=IDLE_WAIT_S {
            idle_end = proc_sample(pid);
            idle_wait = waited;
            if idle_end.as_ref().is_some_and(|s| s.fds <= want) {
                break;
            }
            sleep(Duration::from_secs(1)).await;
        }
    }

    // SIGTERM: the gateway drains and exits 0.
    let shutdown = if gateway_died.is_none() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        match timeout(Duration::from_secs(45), gateway.wait()).await {
            Ok(Ok(s)) if s.success() => "exit 0".to_owned(),
            Ok(s) => {
                let d = format!("{s:?}");
                ctx.stats.error("gateway: shutdown not clean", &d, false);
                d
            }
            Err(_) => {
                let _ = gateway.start_kill();
                ctx.stats
                    .error("gateway: no exit within 45 s of SIGTERM", "", false);
                "killed after 45 s".to_owned()
            }
        }
    } else {
        "died during the run".to_owned()
    };
    if let Some(mut r) = redis.lock().unwrap().take() {
        let _ = r.start_kill();
    }

    let idle = Idle {
        start: idle_start,
        end: idle_end,
        waited_s: idle_wait,
    };
    summarise(
        &ctx,
        &o,
        &rows,
        nworkers,
        idle,
        &shutdown,
        interrupted,
        leak_checks,
        &redis_version,
    )
}

// ------------------------------------------------------------------ summary

/// The longest wait at the end for the gateway's fds to go back to their
/// count before the traffic: the upstream pool's idle timeout (90 s) and
/// its reaper's tick (a tenth of it), with a margin.
const IDLE_WAIT_S: u64 = 120;

/// The gateway's /proc samples before the traffic and after it.
struct Idle {
    start: Option<ProcSample>,
    end: Option<ProcSample>,
    /// Seconds waited after the traffic for the fds to go back.
    waited_s: u64,
}

/// Seconds as `m:ss`.
fn mmss(s: f64) -> String {
    let s = s.round() as u64;
    format!("{}:{:02}", s / 60, s % 60)
}

/// The mean of `v`.
fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Least-squares slope of (x, y).
fn slope(pts: &[(f64, f64)]) -> Option<f64> {
    if pts.len() < 2 {
        return None;
    }
    let mx = mean(&pts.iter().map(|p| p.0).collect::<Vec<_>>());
    let my = mean(&pts.iter().map(|p| p.1).collect::<Vec<_>>());
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The driver's own CPU time (this process: load, checks and the upstream), in seconds.
fn own_cpu_s() -> f64 {
    proc_sample(std::process::id()).map_or(0.0, |s| s.ticks as f64 / ticks_per_sec())
}

#[allow(clippy::too_many_arguments)]
fn summarise(
    ctx: &Ctx,
    o: &Opts,
    rows: &[Row],
    nworkers: usize,
    idle: Idle,
    shutdown: &str,
    interrupted: bool,
    leak_checks: Vec<serde_json::Value>,
    redis_version: &str,
) -> i32 {
    let warm: Vec<&Row> = rows
        .iter()
        .filter(|r| r.elapsed >= o.warmup.as_secs_f64() - 1.0)
        .collect();
    let fd_allowance = 2 * nworkers as u64 + 4;
    let (idle_start, idle_end) = (idle.start, idle.end);
    // RSS moves by a megabyte or two from one sample to the next (buffers
    // of the streams in flight, the allocator's free lists), so growth is
    // judged on means: of the first tenth of the rows after the warm-up
    // (at least 3) against the last tenth; the single samples and the
    // slope are reported too.
    let k = (warm.len() / 10).max(3).min(warm.len());
    let mean_of = |rows: &[&Row], f: fn(&Row) -> u64| {
        (!rows.is_empty()).then(|| mean(&rows.iter().map(|r| f(r) as f64).collect::<Vec<_>>()))
    };
    let first_last =
        |f: fn(&Row) -> u64| (mean_of(&warm[..k], f), mean_of(&warm[warm.len() - k..], f));
    let (rss_base_mean, rss_end_mean) = first_last(|r| r.rss_kb);
    let (anon_base_mean, anon_end_mean) = first_last(|r| r.anon_kb);
    let (file_base_mean, file_end_mean) = first_last(|r| r.file_kb);
    let growth = match (rss_base_mean, rss_end_mean) {
        (Some(a), Some(b)) if a > 0.0 && warm.len() >= 2 * k => Some((b - a) / a * 100.0),
        _ => None,
    };
    let (rss_base, rss_end) = (
        warm.first().map(|r| r.rss_kb),
        warm.last().map(|r| r.rss_kb),
    );
    let point_growth = match (rss_base, rss_end) {
        (Some(a), Some(b)) if a > 0 => Some((b as f64 - a as f64) / a as f64 * 100.0),
        _ => None,
    };
    let rss_slope = slope(
        &warm
            .iter()
            .map(|r| (r.elapsed / 3600.0, r.rss_kb as f64))
            .collect::<Vec<_>>(),
    );
    let fd_back = match (&idle_start, &idle_end) {
        (Some(a), Some(b)) => b.fds <= a.fds,
        _ => false,
    };
    let driver_cpu = own_cpu_s();
    let rss_max = warm.iter().map(|r| r.rss_kb).max();
    let fd_min = warm.iter().map(|r| r.fds).min();
    let fd_max = warm.iter().map(|r| r.fds).max();
    let totals = ctx.stats.totals.lock().unwrap().clone();
    let unexpected: u64 = totals.values().sum();
    let class_totals = ctx.stats.class_totals.lock().unwrap().clone();
    let requests: u64 = class_totals.values().flat_map(|m| m.values()).sum();
    let mut periods = std::mem::take(&mut *ctx.stats.periods.lock().unwrap());
    let p99_periods: Vec<serde_json::Value> = periods
        .iter_mut()
        .map(|(p, groups)| {
            let from = *p as f64 * o.p99_every.as_secs_f64();
            let mut g = serde_json::Map::new();
            for (i, (name, _)) in GROUPS.iter().enumerate() {
                g.insert(name.to_string(), serde_json::json!({"n": groups[i].len(), "p99_ms": p99_ms(&mut groups[i])}));
            }
            serde_json::json!({"from_s": from, "to_s": from + o.p99_every.as_secs_f64(), "groups": g})
        })
        .collect();

    let rss_ok = growth.is_some_and(|g| g < 5.0);
    let fds_ok = matches!((fd_min, fd_max), (Some(a), Some(b)) if b - a <= fd_allowance);
    let errors_ok = unexpected == 0;
    let pass = rss_ok && fds_ok && fd_back && errors_ok && !interrupted;
    let when = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let summary = serde_json::json!({
        "finished": when, "pass": pass, "interrupted": interrupted,
        "duration_s": rows.last().map(|r| r.elapsed), "warmup_s": o.warmup.as_secs_f64(),
        "interval_s": o.interval.as_secs_f64(), "reload_every_s": o.reload_every.as_secs_f64(),
        "redis_restart_every_s": o.redis_restart_every.as_secs_f64(), "redis_down_s": o.redis_down.as_secs_f64(),
        "redis": redis_version, "workers": nworkers,
        "rss_anon_kb": {"first_tenth_mean": anon_base_mean, "last_tenth_mean": anon_end_mean},
        "rss_file_kb": {"first_tenth_mean": file_base_mean, "last_tenth_mean": file_end_mean},
        "rss_kb": {"idle_start": idle_start.as_ref().map(|s| s.rss_kb), "first_row": rows.first().map(|r| r.rss_kb),
                   "after_warmup": rss_base, "end": rss_end, "max_after_warmup": rss_max,
                   "mean_rows": k, "after_warmup_mean": rss_base_mean, "end_mean": rss_end_mean,
                   "growth_pct": growth, "point_growth_pct": point_growth, "slope_kb_per_hour": rss_slope,
                   "idle_end": idle_end.as_ref().map(|s| s.rss_kb)},
        "fds": {"idle_start": idle_start.as_ref().map(|s| s.fds), "min_after_warmup": fd_min, "max_after_warmup": fd_max,
                "allowance": fd_allowance, "idle_end": idle_end.as_ref().map(|s| s.fds), "idle_end_after_s": idle.waited_s},
        "driver_cpu_s": driver_cpu,
        "threads_max": rows.iter().map(|r| r.threads).max(),
        "cpu_pct_mean": if rows.is_empty() { 0.0 } else { rows.iter().map(|r| r.cpu_pct).sum::<f64>() / rows.len() as f64 },
        "requests": requests, "classes": class_totals,
        "unexpected": unexpected, "unexpected_by_kind": totals,
        "reloads": ctx.reloads.load(Ordering::Relaxed), "reload_failures": ctx.reload_failures.load(Ordering::Relaxed),
        "redis_restarts": ctx.redis_restarts.load(Ordering::Relaxed),
        "leak_checks": leak_checks, "shutdown": shutdown, "p99_periods": p99_periods,
        "checks": {"rss_growth_below_5pct": rss_ok, "fds_flat": fds_ok, "fds_back_when_idle": fd_back, "no_unexpected_errors": errors_ok},
    });
    let _ = std::fs::write(o.out.join("summary.json"), format!("{summary:#}\n"));

    // The Markdown summary (what RESULTS.md quotes).
    let mut md = String::new();
    let kib = |v: Option<u64>| {
        v.map(|x| format!("{:.1} MiB", x as f64 / 1024.0))
            .unwrap_or("?".into())
    };
    let _ = writeln!(md, "| figure | value |\n|---|---|");
    let _ = writeln!(
        md,
        "| duration | {:.0} s ({} rows of {:?}); warm-up {:?} |",
        rows.last().map_or(0.0, |r| r.elapsed),
        rows.len(),
        o.interval,
        o.warmup
    );
    let _ = writeln!(md, "| RSS idle before traffic / first row / after warm-up / end / max after warm-up | {} / {} / {} / {} / {} |",
        kib(idle_start.as_ref().map(|s| s.rss_kb)), kib(rows.first().map(|r| r.rss_kb)), kib(rss_base), kib(rss_end), kib(rss_max));
    let _ = writeln!(md, "| RSS growth after warm-up (mean of the first {k} rows after it vs the last {k}) | {} -> {}: {} (limit < 5 %) |",
        kib(rss_base_mean.map(|x| x as u64)), kib(rss_end_mean.map(|x| x as u64)), growth.map(|g| format!("{g:+.2} %")).unwrap_or("?".into()));
    let _ = writeln!(md, "| of which RssAnon (heap, stacks) / RssFile (binary pages read in), same means | {} -> {} / {} -> {} |",
        kib(anon_base_mean.map(|x| x as u64)), kib(anon_end_mean.map(|x| x as u64)),
        kib(file_base_mean.map(|x| x as u64)), kib(file_end_mean.map(|x| x as u64)));
    let _ = writeln!(md, "| RSS growth, single samples (first row after warm-up vs last row); least-squares slope | {}; {} |",
        point_growth.map(|g| format!("{g:+.2} %")).unwrap_or("?".into()), rss_slope.map(|x| format!("{:+.0} KiB/h", x)).unwrap_or("?".into()));
    let _ = writeln!(md, "| open fds after warm-up (min-max) | {}-{} (allowance {fd_allowance}: 2 per traffic worker + 4) |", fd_min.unwrap_or(0), fd_max.unwrap_or(0));
    let _ = writeln!(md, "| open fds idle, before the traffic / after it | {} / {} ({} s after the traffic stopped; must not exceed the first) |",
        idle_start.as_ref().map_or("?".into(), |s| s.fds.to_string()), idle_end.as_ref().map_or("?".into(), |s| s.fds.to_string()), idle.waited_s);
    let _ = writeln!(
        md,
        "| requests | {requests} ({:.0}/s) |",
        requests as f64 / rows.last().map_or(1.0, |r| r.elapsed.max(1.0))
    );
    for (class, outs) in &class_totals {
        let n: u64 = outs.values().sum();
        let list: Vec<String> = outs.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(md, "| {class} | {n} ({}) |", list.join(", "));
    }
    let _ = writeln!(
        md,
        "| unexpected errors | {unexpected}{} |",
        if totals.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                totals
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        }
    );
    let _ = writeln!(
        md,
        "| reloads (SIGHUP, config swapped) | {} ({} failed or not applied) |",
        ctx.reloads.load(Ordering::Relaxed),
        ctx.reload_failures.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        md,
        "| Redis restarts (SIGKILL, {:?} down) | {} |",
        o.redis_down,
        ctx.redis_restarts.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        md,
        "| concurrency slots back at the end | {} |",
        if summary["leak_checks"]
            .as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(|c| c["ok"] == true))
        {
            "yes"
        } else {
            "NO (see summary.json)"
        }
    );
    let _ = writeln!(md, "| gateway shutdown (SIGTERM) | {shutdown} |");
    let _ = writeln!(md, "| gateway CPU (mean over rows) | {:.1} % of one core; the driver (load, checks, upstream): {driver_cpu:.0} s of CPU |", summary["cpu_pct_mean"].as_f64().unwrap_or(0.0));
    let _ = writeln!(md, "\np99 latency per {:?} (short: allowed/tight/login to the whole body; stream: downloads and uploads, whole body; ws: the 101):\n", o.p99_every);
    let _ = writeln!(md, "| from (m:ss) | short n | short p99 | stream n | stream p99 | ws n | ws p99 |\n|---|---|---|---|---|---|---|");
    for p in &p99_periods {
        let g = &p["groups"];
        let cell = |k: &str| {
            g[k]["p99_ms"]
                .as_f64()
                .map(|x| format!("{x:.1} ms"))
                .unwrap_or("-".into())
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            mmss(p["from_s"].as_f64().unwrap_or(0.0)),
            g["short"]["n"],
            cell("short"),
            g["stream"]["n"],
            cell("stream"),
            g["ws"]["n"],
            cell("ws")
        );
    }
    let verdict = format!(
        "\nverdict: {} (RSS growth < 5 %: {}; fds flat: {}; fds back when idle: {}; no unexpected errors: {}{})\n",
        if pass { "PASS" } else { "FAIL" },
        rss_ok, fds_ok, fd_back, errors_ok,
        if interrupted { "; interrupted" } else { "" }
    );
    md.push_str(&verdict);
    let _ = std::fs::write(o.out.join("summary.md"), &md);
    println!("\n{md}");
    if pass {
        0
    } else {
        1
    }
}
