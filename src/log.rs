//! Logging: JSON lines on stdout, filtered by `TOLLGATE_LOG`, and the
//! access-log line written once per request.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use tollgate_limit::DecisionKind;

use crate::auth::Identity;
use crate::trace::context::TraceId;
use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::fmt::writer::{EitherWriter, MakeWriter};
use tracing_subscriber::EnvFilter;

/// The `tracing` target of access-log lines.
pub const ACCESS_TARGET: &str = "tollgate::access";

/// Flushes the log writer's queue when dropped (keep it until exit).
pub struct LogGuard(());

impl Drop for LogGuard {
    fn drop(&mut self) {
        // Dropping the writer's guard waits for its queue to be written.
        drop(lock_guard().take());
    }
}

/// The log writer's guard, once its thread runs.
static WRITER_GUARD: Mutex<Option<WorkerGuard>> = Mutex::new(None);

fn lock_guard() -> std::sync::MutexGuard<'static, Option<WorkerGuard>> {
    WRITER_GUARD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether the gateway serves yet: from then on lines go through the
/// writer's thread ([`serving`]).
static SERVING: AtomicBool = AtomicBool::new(false);

/// The writer's queue, made at the first line written once serving.
static QUEUE: OnceLock<NonBlocking> = OnceLock::new();

/// Lines are written by a dedicated thread once the gateway serves, so a
/// request never waits on a `write` to stdout; when its queue is full, the
/// writer applies backpressure rather than dropping access-log lines.
/// Before that (start-up, `check`, `simulate`) a line is written in place.
/// The thread starts with the first line written while serving: a gateway
/// that logs nothing per request (the access log filtered out) stays
/// without it, which keeps a one-worker process single-threaded: the C
/// library and the kernel then take their single-threaded shortcuts on
/// every socket call (no `__pthread_enable_asynccancel` wrapper in glibc,
/// no file reference taken and dropped by the kernel's `fdget`/`fput`:
/// about 0.13 µs a request).
struct LazyWriter;

impl<'a> MakeWriter<'a> for LazyWriter {
    type Writer = EitherWriter<std::io::Stdout, NonBlocking>;

    fn make_writer(&'a self) -> Self::Writer {
        if !SERVING.load(Ordering::Acquire) {
            return EitherWriter::A(std::io::stdout());
        }
        EitherWriter::B(
            QUEUE
                .get_or_init(|| {
                    let (writer, guard) = NonBlockingBuilder::default()
                        .lossy(false)
                        .finish(std::io::stdout());
                    *lock_guard() = Some(guard);
                    writer
                })
                .clone(),
        )
    }
}

/// The gateway serves: lines written from now on go through the writer's
/// thread (started with the first of them).
pub fn serving() {
    SERVING.store(true, Ordering::Release);
}

/// Install the global subscriber: JSON lines on stdout, one object per event
/// with its fields at the top level, filtered by `TOLLGATE_LOG` (`RUST_LOG`
/// syntax, default `info`), written in place until [`serving`], then by
/// the log writer's thread. Keep the
/// returned guard until exit so the last lines are flushed.
pub fn init() -> LogGuard {
    let filter = EnvFilter::try_from_env("TOLLGATE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_env_filter(filter)
        .with_writer(LazyWriter)
        .try_init();
    LogGuard(())
}

/// What the access log says of one request, filled in as the request goes.
#[derive(Debug)]
pub struct AccessRecord {
    /// The request's id (also sent as `X-Request-Id`).
    pub request_id: http::HeaderValue,
    /// The client address as the gateway resolved it.
    pub client: IpAddr,
    /// The request method.
    pub method: http::Method,
    /// The Host (or `:authority`) the client sent, if any (written as text
    /// when it is; a value that is not is logged empty).
    pub host: Option<http::HeaderValue>,
    /// The normalised path (or the raw one when it could not be normalised).
    pub path: LoggedPath,
    /// The matched route's name.
    pub route: Option<Arc<str>>,
    /// The upstream target that answered (`scheme://authority`).
    pub upstream: Option<Arc<str>>,
    /// The response status.
    pub status: u16,
    /// What the route's limits decided (its label is the line's `limit`).
    pub decision: DecisionKind,
    /// The verified consumer, if any (the line's `consumer`, `tenant`,
    /// `plan`).
    pub consumer: Option<Identity>,
    /// The request's trace (the line's `trace_id`, 32 hex digits).
    pub trace_id: TraceId,
    /// When the request arrived.
    pub started: Instant,
}

/// The path an access-log line shows: the request's own, shared with the
/// request (nothing copied: the common case, a path already in normal
/// form), or one the gateway wrote.
#[derive(Debug, Clone)]
pub enum LoggedPath {
    /// The path part of the request-target as it came.
    Target(http::uri::PathAndQuery),
    /// A path the gateway wrote (normalised), or a request's path that has
    /// no path-and-query (an authority-form target: empty).
    Text(String),
}

impl LoggedPath {
    /// The path of `uri`, as [`http::Uri::path`] reads it.
    pub fn of(uri: &http::Uri) -> LoggedPath {
        match uri.path_and_query() {
            Some(pq) => LoggedPath::Target(pq.clone()),
            None => LoggedPath::Text(uri.path().to_owned()),
        }
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        match self {
            LoggedPath::Target(pq) => pq.path(),
            LoggedPath::Text(text) => text,
        }
    }
}

/// What the access log adds for a request that became a tunnel (a 101).
#[derive(Debug, Clone, Copy)]
pub struct Tunnelled {
    /// Bytes the tunnel carried from the client (`bytes` counts those to it).
    pub bytes_in: u64,
    /// Why it ended (`client_closed`, `upstream_closed`, `idle_timeout`,
    /// `shutdown`, `error`).
    pub end: &'static str,
}

impl AccessRecord {
    /// Write the access-log line: the request took `took`, `bytes` of
    /// response body (for a tunnel: bytes to the client) were sent;
    /// `completed` is false when the body was cut short (a tunnel the
    /// gateway closed, or that failed). A tunnel adds `bytes_in` and
    /// `tunnel_end`.
    pub fn emit(&self, took: Duration, bytes: u64, completed: bool, tunnel: Option<Tunnelled>) {
        let duration_ms = took.as_secs_f64() * 1000.0;
        tracing::info!(
            target: ACCESS_TARGET,
            request_id = self.request_id.to_str().unwrap_or_default(),
            trace_id = %self.trace_id,
            client = %self.client,
            method = self.method.as_str(),
            host = self.host.as_ref().and_then(|h| h.to_str().ok()).unwrap_or_default(),
            path = self.path.as_str(),
            route = self.route.as_deref().unwrap_or_default(),
            upstream = self.upstream.as_deref().unwrap_or_default(),
            status = self.status,
            limit = self.decision.label(),
            consumer = self.consumer.as_ref().map(|c| &*c.consumer),
            tenant = self.consumer.as_ref().and_then(|c| c.tenant.as_deref()),
            plan = self.consumer.as_ref().and_then(|c| c.plan.as_deref()),
            duration_ms = (duration_ms * 1000.0).round() / 1000.0,
            bytes,
            completed,
            bytes_in = tunnel.map(|t| t.bytes_in),
            tunnel_end = tunnel.map(|t| t.end),
            "access"
        );
    }
}

impl AccessRecord {
    /// The name of the request's span (docs/traces.md): `<METHOD> <route>`,
    /// or the method alone when no route matched.
    pub fn span_name(&self) -> String {
        let method = self.method.as_str();
        let route = self.route.as_deref().unwrap_or_default();
        let mut name = String::with_capacity(method.len() + 1 + route.len());
        name.push_str(method);
        if !route.is_empty() {
            name.push(' ');
            name.push_str(route);
        }
        name
    }

    /// The attributes of the request's span (docs/traces.md): the few a
    /// trace search needs, under OpenTelemetry's HTTP names where there is
    /// one. Each attribute costs about a thousand instructions by the time
    /// it is exported (converted, encoded, freed), so what the access log
    /// or a child span already says is left out.
    pub fn span_attributes(&self, completed: bool, store: Option<&'static str>) -> Vec<KeyValue> {
        use crate::trace::attributes::{attribute, int, text};
        let mut out = Vec::with_capacity(8);
        out.push(text("http.request.method", self.method.as_str()));
        out.push(text("url.path", self.path.as_str()));
        out.push(text(
            "client.address",
            &crate::client_addr::ip_text(self.client),
        ));
        out.push(int("http.response.status_code", i64::from(self.status)));
        if self.decision != DecisionKind::NotApplied {
            out.push(text("tollgate.decision", self.decision.label()));
        }
        if let Some(route) = &self.route {
            out.push(text("tollgate.route", route));
        }
        if let Some(outcome) = store {
            out.push(text("tollgate.store.outcome", outcome));
        }
        if !completed {
            out.push(attribute(
                "tollgate.completed",
                any_value::Value::BoolValue(false),
            ));
        }
        if let Some(identity) = &self.consumer {
            out.push(text("tollgate.consumer", &identity.consumer));
            if let Some(tenant) = &identity.tenant {
                out.push(text("tollgate.tenant", tenant));
            }
            if let Some(plan) = &identity.plan {
                out.push(text("tollgate.plan", plan));
            }
        }
        out
    }
}
