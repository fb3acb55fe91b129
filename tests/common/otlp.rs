//! A real OTLP trace receiver on a free port, for the telemetry tests and
//! the benchmark's collector (benches/tools/otlp_sink.rs): OTLP/HTTP (`POST /v1/traces`, protobuf) and
//! OTLP/gRPC (`TraceService/Export`, over h2c) on one listener, each
//! decoded with the `opentelemetry-proto` types (the wire format as a
//! collector reads it). Every span received is kept, flattened, with the
//! protocol and the headers it came with; or, started with
//! [`Collector::start_counting`] (the benchmark's), only counted.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;
use tokio::net::TcpListener;
use tonic::codegen::Service;

/// How a batch reached the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP, protobuf body.
    Http,
    /// OTLP/gRPC.
    Grpc,
}

/// One span as received, flattened.
#[derive(Debug, Clone)]
pub struct Span {
    /// How its batch came.
    pub protocol: Protocol,
    /// The batch's request headers (gRPC metadata included), lower-case.
    pub headers: HashMap<String, String>,
    /// The resource's `service.name`.
    pub service_name: String,
    /// The instrumentation scope's name.
    pub scope: String,
    /// 32 lower-case hex digits.
    pub trace_id: String,
    /// 16 lower-case hex digits.
    pub span_id: String,
    /// 16 lower-case hex digits, empty for a root span.
    pub parent_span_id: String,
    /// The span's name.
    pub name: String,
    /// OTLP's `SpanKind` number (2 server, 3 client).
    pub kind: i32,
    /// Start and end, nanoseconds since the epoch.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
    /// Attributes, each value as text.
    pub attributes: HashMap<String, String>,
    /// Events: name and attributes.
    pub events: Vec<(String, HashMap<String, String>)>,
    /// OTLP's `StatusCode` number (0 unset, 1 ok, 2 error).
    pub status: i32,
    /// The span's flags field (bit 8: the parent is remote is known;
    /// bit 9: it is remote).
    pub flags: u32,
}

impl Span {
    /// An attribute's value as text.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// OTLP span kinds.
pub const KIND_SERVER: i32 = 2;
/// See [`KIND_SERVER`].
pub const KIND_CLIENT: i32 = 3;
/// OTLP status code `ERROR`.
pub const STATUS_ERROR: i32 = 2;

#[derive(Default)]
struct State {
    spans: Mutex<Vec<Span>>,
    /// Count spans (in `counted`) instead of keeping them.
    counting: bool,
    /// Spans received, when `counting`.
    counted: AtomicUsize,
    /// Batches received.
    batches: AtomicUsize,
    /// Milliseconds each answer waits (a slow collector).
    delay_ms: AtomicU64,
}

/// A running receiver; stops when dropped.
pub struct Collector {
    addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    /// A receiver on a free port of 127.0.0.1.
    pub async fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        Collector::serve(listener, false)
    }

    /// A receiver on `addr` that counts what it is sent and keeps none of
    /// it: [`count`](Collector::count) and [`batches`](Collector::batches)
    /// as with [`start`](Collector::start), but [`spans`](Collector::spans)
    /// is always empty, so its memory stays flat over a long benchmark
    /// (benches/tools/otlp_sink.rs). Each batch is still decoded whole (one
    /// that does not decode is refused and not counted).
    pub async fn start_counting(addr: SocketAddr) -> std::io::Result<Collector> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Collector::serve(listener, true))
    }

    /// Serve `listener` until dropped; `counting`: see
    /// [`start_counting`](Collector::start_counting).
    fn serve(listener: TcpListener, counting: bool) -> Collector {
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State {
            counting,
            ..State::default()
        });
        let st = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                while conns.try_join_next().is_some() {}
                let st = st.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |req| answer(st.clone(), req));
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Collector { addr, state, task }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`: the base of an OTLP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far (none when counting).
    pub fn spans(&self) -> Vec<Span> {
        self.state
            .spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many spans were received.
    pub fn count(&self) -> usize {
        if self.state.counting {
            return self.state.counted.load(Ordering::SeqCst);
        }
        self.state
            .spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// How many export requests were received.
    pub fn batches(&self) -> usize {
        self.state.batches.load(Ordering::SeqCst)
    }

    /// Make every answer wait `delay` (a slow collector); zero: answer at
    /// once.
    pub fn set_delay(&self, delay: Duration) {
        self.state
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// The spans of trace `trace_id`, polling up to `timeout` until there
    /// are at least `n`.
    pub async fn wait_trace(&self, trace_id: &str, n: usize, timeout: Duration) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let found: Vec<Span> = self
                .spans()
                .into_iter()
                .filter(|s| s.trace_id == trace_id)
                .collect();
            if found.len() >= n || tokio::time::Instant::now() > deadline {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The gRPC service: keeps what it is sent.
#[derive(Clone)]
struct Receiver(Arc<State>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let headers = text_headers(&request.metadata().clone().into_headers());
        keep(&self.0, Protocol::Grpc, headers, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

type Answer = Response<http_body_util::combinators::UnsyncBoxBody<Bytes, tonic::Status>>;

async fn answer(state: Arc<State>, req: Request<Incoming>) -> Result<Answer, Infallible> {
    let delay = state.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let grpc = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        let mut server = TraceServiceServer::new(Receiver(state));
        let response = server.call(req).await.unwrap_or_else(|e| match e {});
        return Ok(response.map(|b| b.boxed_unsync()));
    }
    let plain = |status: u16| {
        Response::builder()
            .status(status)
            .body(
                Full::new(Bytes::new())
                    .map_err(|e| match e {})
                    .boxed_unsync(),
            )
            .expect("response")
    };
    if req.method() != hyper::Method::POST || req.uri().path() != "/v1/traces" {
        return Ok(plain(404));
    }
    let headers = text_headers(req.headers());
    let Ok(body) = req.into_body().collect().await else {
        return Ok(plain(400));
    };
    let Ok(decoded) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return Ok(plain(400));
    };
    keep(&state, Protocol::Http, headers, decoded);
    let body = ExportTraceServiceResponse::default().encode_to_vec();
    Ok(Response::builder()
        .header("content-type", "application/x-protobuf")
        .body(
            Full::new(Bytes::from(body))
                .map_err(|e| match e {})
                .boxed_unsync(),
        )
        .expect("response"))
}

/// Flatten and keep a batch (when counting: count its spans).
fn keep(
    state: &State,
    protocol: Protocol,
    headers: HashMap<String, String>,
    batch: ExportTraceServiceRequest,
) {
    state.batches.fetch_add(1, Ordering::SeqCst);
    if state.counting {
        let n: usize = batch
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        state.counted.fetch_add(n, Ordering::SeqCst);
        return;
    }
    let mut out = Vec::new();
    for resource_spans in batch.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service_name = resource.get("service.name").cloned().unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            let scope = scope_spans.scope.map(|s| s.name).unwrap_or_default();
            for s in scope_spans.spans {
                out.push(Span {
                    protocol,
                    headers: headers.clone(),
                    service_name: service_name.clone(),
                    scope: scope.clone(),
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    name: s.name,
                    kind: s.kind,
                    start_ns: s.start_time_unix_nano,
                    end_ns: s.end_time_unix_nano,
                    attributes: attributes(&s.attributes),
                    events: s
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), attributes(&e.attributes)))
                        .collect(),
                    status: s.status.map_or(0, |st| st.code),
                    flags: s.flags,
                });
            }
        }
    }
    state
        .spans
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(out);
}

/// A request's header fields as text, by lower-case name.
fn text_headers(headers: &http::HeaderMap) -> HashMap<String, String> {
    headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::IntValue(i)) => i.to_string(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::DoubleValue(d)) => d.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}
