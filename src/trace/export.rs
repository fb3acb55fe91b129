//! Span export (`telemetry:`): the sampling decision for new traces, and a
//! bounded queue that requests hand their finished spans to, drained by a
//! task of its own that sends them in batches by OTLP: an
//! `ExportTraceServiceRequest` of the `opentelemetry-proto` types, encoded
//! by their generated protobuf code, posted over HTTP (the
//! `opentelemetry-http` hyper client) or sent by their generated gRPC
//! client (tonic).
//!
//! Nothing here is on a request's path but [`Telemetry::sample`] and
//! [`Telemetry::submit`]: one `try_send` per request that never waits. A
//! full queue (the collector is down or slow, the task still busy with a
//! batch) drops the request's spans and counts them
//! (`tollgate_spans_dropped_total{reason="queue_full"}`); a batch the
//! collector did not take within [`EXPORT_TIMEOUT`] is dropped whole and
//! counted (`reason="export_failed"`). The gateway keeps no span for
//! later.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry_http::HttpClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, ShouldSample};
use prost::Message;
use tokio::sync::{mpsc, oneshot};

use super::attributes::text;
use crate::config::{OtlpProtocol, TelemetryConfig};
use crate::metrics::SpanCounters;

/// Requests whose spans may wait for export at most (each with its span,
/// its attempts' and its store calls': a few); a request that finds the
/// queue full has its spans dropped (counted).
pub const QUEUE_CAPACITY: usize = 2048;

/// Spans a batch is sent at (a request's spans are never split, and up
/// to 64 requests are taken from the queue at once: a batch may hold a
/// few hundred more).
pub const BATCH_SIZE: usize = 128;

/// How long a span waits for its batch to fill before the batch is sent.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// How long one export may take before its batch is dropped.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// One request's spans, as queued.
type Spans = Vec<Span>;

/// The export of one `telemetry:` config: kept across a reload that does
/// not change the section, replaced (the old one sending what it holds,
/// then ending) by one that does.
pub struct Telemetry {
    /// The section it was built from.
    pub config: TelemetryConfig,
    /// The ratio sampler deciding new traces (a continued trace follows
    /// its parent's flag: parent-based sampling).
    sampler: Sampler,
    /// The queue's sending side; dropped with the last request holding
    /// this generation, which ends the task.
    queue: mpsc::Sender<Spans>,
    /// The queue's receiving side, until [`Telemetry::start`] hands it to
    /// the task.
    pending: Mutex<Option<mpsc::Receiver<Spans>>>,
    /// The counters, once started.
    counters: OnceLock<SpanCounters>,
    /// Asks the task to send everything queued now ([`Telemetry::flush`]).
    flushes: mpsc::UnboundedSender<oneshot::Sender<()>>,
    /// The flush requests' receiving side, until the task takes it.
    pending_flushes: Mutex<Option<mpsc::UnboundedReceiver<oneshot::Sender<()>>>>,
}

impl Telemetry {
    /// The export for `config`; `previous` (the runtime's before a reload)
    /// is kept when its section is the same.
    pub fn build(config: &TelemetryConfig, previous: Option<&Arc<Telemetry>>) -> Arc<Telemetry> {
        if let Some(kept) = previous.filter(|p| p.config == *config) {
            return kept.clone();
        }
        let (queue, pending) = mpsc::channel(QUEUE_CAPACITY);
        let (flushes, pending_flushes) = mpsc::unbounded_channel();
        Arc::new(Telemetry {
            config: config.clone(),
            sampler: Sampler::TraceIdRatioBased(config.sample),
            queue,
            pending: Mutex::new(Some(pending)),
            counters: OnceLock::new(),
            flushes,
            pending_flushes: Mutex::new(Some(pending_flushes)),
        })
    }

    /// Start the export task (once; a kept export is running already).
    /// Needs a Tokio runtime: only a runtime put in force starts it.
    pub fn start(&self, counters: &SpanCounters) {
        let receiver = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let flushes = self
            .pending_flushes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let (Some(receiver), Some(flushes)) = (receiver, flushes) else {
            return;
        };
        let _ = self.counters.set(counters.clone());
        let exporter = Exporter::new(&self.config);
        tokio::spawn(run(receiver, flushes, exporter, counters.clone()));
    }

    /// Send every span queued now, waiting up to `within` for it (at
    /// shutdown: the last requests' spans are not lost with the process).
    pub async fn flush(&self, within: Duration) {
        let (done, sent) = oneshot::channel();
        if self.flushes.send(done).is_ok() {
            let _ = tokio::time::timeout(within, sent).await;
        }
    }

    /// Whether a new trace (`trace_id`, 16 bytes) is recorded: the
    /// OpenTelemetry SDK's trace-id ratio sampler at `sample`.
    pub fn sample(&self, trace_id: [u8; 16]) -> bool {
        let result = self.sampler.should_sample(
            None,
            TraceId::from_bytes(trace_id),
            "",
            &SpanKind::Server,
            &[],
            &[],
        );
        result.decision == SamplingDecision::RecordAndSample
    }

    /// The queue's receiving side, for a test to read what was submitted.
    #[cfg(test)]
    pub(crate) fn take_queue(&self) -> mpsc::Receiver<Spans> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .expect("not started")
    }

    /// Queue one request's `spans` for export without waiting; if they do
    /// not fit, they are dropped and counted.
    pub fn submit(&self, spans: Spans) {
        if let Err(refused) = self.queue.try_send(spans) {
            let n = match refused {
                mpsc::error::TrySendError::Full(s) | mpsc::error::TrySendError::Closed(s) => {
                    s.len()
                }
            };
            if let Some(counters) = self.counters.get() {
                counters.queue_full.inc_by(n as u64);
            }
        }
    }
}

/// The export task: batches of about [`BATCH_SIZE`] spans, each sent when
/// full or [`FLUSH_INTERVAL`] after its first span, one export at a time;
/// a flush (shutdown) sends everything queued at once; when the queue
/// closes (the export was replaced), what is left is sent and the task
/// ends.
async fn run(
    mut receiver: mpsc::Receiver<Spans>,
    mut flushes: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
    mut exporter: Exporter,
    counters: SpanCounters,
) {
    let mut batch: Vec<Span> = Vec::with_capacity(BATCH_SIZE);
    let mut requests: Vec<Spans> = Vec::with_capacity(64);
    let mut flush_at = tokio::time::Instant::now();
    loop {
        tokio::select! {
            n = receiver.recv_many(&mut requests, 64) => {
                if n == 0 {
                    break;
                }
                if batch.is_empty() {
                    flush_at = tokio::time::Instant::now() + FLUSH_INTERVAL;
                }
                for spans in requests.drain(..) {
                    batch.extend(spans);
                }
                if batch.len() >= BATCH_SIZE {
                    exporter.export(&mut batch, &counters).await;
                }
            }
            () = tokio::time::sleep_until(flush_at), if !batch.is_empty() => {
                exporter.export(&mut batch, &counters).await;
            }
            Some(done) = flushes.recv() => {
                while let Ok(spans) = receiver.try_recv() {
                    batch.extend(spans);
                    if batch.len() >= BATCH_SIZE {
                        exporter.export(&mut batch, &counters).await;
                    }
                }
                exporter.export(&mut batch, &counters).await;
                let _ = done.send(());
            }
        }
    }
    exporter.export(&mut batch, &counters).await;
}

/// Where batches go, and what every batch says of its source.
struct Exporter {
    /// The transport.
    transport: Transport,
    /// The `service.name` and `service.version` resource.
    resource: Resource,
    /// The instrumentation scope (`tollgate`, its version).
    scope: InstrumentationScope,
}

/// OTLP/HTTP or OTLP/gRPC.
enum Transport {
    /// `POST <endpoint>` with a protobuf body.
    Http {
        client: opentelemetry_http::hyper::HyperClient,
        endpoint: http::Uri,
        headers: http::HeaderMap,
    },
    /// `TraceService/Export`, connected when first used.
    Grpc {
        client: Option<TraceServiceClient<tonic::transport::Channel>>,
        endpoint: http::Uri,
        metadata: http::HeaderMap,
    },
}

impl Exporter {
    fn new(config: &TelemetryConfig) -> Exporter {
        let otlp = &config.otlp;
        let mut headers = http::HeaderMap::with_capacity(otlp.headers.len());
        for (name, value) in &otlp.headers {
            headers.append(name.clone(), value.clone());
        }
        let transport = match otlp.protocol {
            OtlpProtocol::Http => Transport::Http {
                client: opentelemetry_http::hyper::HyperClient::with_default_connector(
                    EXPORT_TIMEOUT,
                    None,
                ),
                endpoint: otlp.endpoint.clone(),
                headers,
            },
            OtlpProtocol::Grpc => Transport::Grpc {
                client: None,
                endpoint: otlp.endpoint.clone(),
                metadata: headers,
            },
        };
        Exporter {
            transport,
            resource: Resource {
                attributes: vec![
                    text("service.name", &config.service_name),
                    text("service.version", env!("CARGO_PKG_VERSION")),
                ],
                ..Default::default()
            },
            scope: InstrumentationScope {
                name: "tollgate".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                ..Default::default()
            },
        }
    }

    /// Send `batch` (left empty); count it exported or dropped.
    async fn export(&mut self, batch: &mut Vec<Span>, counters: &SpanCounters) {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(self.scope.clone()),
                    spans: std::mem::replace(batch, Vec::with_capacity(BATCH_SIZE)),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        match tokio::time::timeout(EXPORT_TIMEOUT, self.send(request)).await {
            Ok(Ok(())) => {
                counters.exported.inc_by(n);
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, spans = n, "span export failed");
                counters.export_failed.inc_by(n);
            }
            Err(_) => {
                tracing::debug!(spans = n, "span export timed out");
                counters.export_failed.inc_by(n);
            }
        }
    }

    /// One export request, by the configured transport.
    async fn send(&mut self, request: ExportTraceServiceRequest) -> Result<(), String> {
        match &mut self.transport {
            Transport::Http {
                client,
                endpoint,
                headers,
            } => {
                let mut post = http::Request::new(Bytes::from(request.encode_to_vec()));
                *post.method_mut() = http::Method::POST;
                *post.uri_mut() = endpoint.clone();
                *post.headers_mut() = headers.clone();
                post.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/x-protobuf"),
                );
                let response = client.send_bytes(post).await.map_err(|e| e.to_string())?;
                match response.status().is_success() {
                    true => Ok(()),
                    false => Err(format!("the collector answered {}", response.status())),
                }
            }
            Transport::Grpc {
                client,
                endpoint,
                metadata,
            } => {
                let client = match client {
                    Some(client) => client,
                    None => {
                        let channel = tonic::transport::Channel::builder(endpoint.clone())
                            .connect_timeout(EXPORT_TIMEOUT)
                            .timeout(EXPORT_TIMEOUT)
                            .connect_lazy();
                        client.insert(TraceServiceClient::new(channel))
                    }
                };
                let mut call = tonic::Request::new(request);
                *call.metadata_mut() = tonic::metadata::MetadataMap::from_headers(metadata.clone());
                client
                    .export(call)
                    .await
                    .map(|_| ())
                    .map_err(|status| status.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OtlpConfig;

    fn config(sample: f64) -> TelemetryConfig {
        TelemetryConfig {
            otlp: OtlpConfig {
                endpoint: "http://127.0.0.1:4318/v1/traces".parse().unwrap(),
                protocol: OtlpProtocol::Http,
                headers: Vec::new(),
            },
            sample,
            service_name: "t".into(),
        }
    }

    #[test]
    fn new_traces_are_sampled_by_their_id_at_the_ratio() {
        let ids: Vec<[u8; 16]> = (0..4000)
            .map(|_| fastrand::u128(1..).to_be_bytes())
            .collect();
        let share = |sample: f64| {
            let t = Telemetry::build(&config(sample), None);
            ids.iter().filter(|id| t.sample(**id)).count()
        };
        assert_eq!(share(0.0), 0);
        assert_eq!(share(1.0), ids.len());
        let quarter = share(0.25);
        assert!((800..1200).contains(&quarter), "{quarter} of 4000 at 0.25");
        // The decision is the id's: the same id, the same answer.
        let t = Telemetry::build(&config(0.5), None);
        assert!(ids.iter().all(|id| t.sample(*id) == t.sample(*id)));
    }

    #[test]
    fn an_unchanged_section_keeps_its_export_and_a_changed_one_gets_a_new_one() {
        let first = Telemetry::build(&config(0.5), None);
        let kept = Telemetry::build(&config(0.5), Some(&first));
        assert!(std::sync::Arc::ptr_eq(&first, &kept));
        let changed = Telemetry::build(&config(0.25), Some(&first));
        assert!(!std::sync::Arc::ptr_eq(&first, &changed));
    }
}
