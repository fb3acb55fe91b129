//! Span export (`telemetry:`): the sampling decision for new traces, and a
//! bounded queue that requests hand their finished spans to, drained by a
//! task of its own that sends them in batches through the OpenTelemetry
//! SDK's OTLP exporter (HTTP/protobuf or gRPC).
//!
//! Nothing here is on a request's path but [`Telemetry::sample`] and
//! [`Telemetry::submit`]: a `try_send` per span that never waits. A full
//! queue (the collector is down or slow, the task still busy with a batch)
//! drops the span and counts it (`tollgate_spans_dropped_total{reason=
//! "queue_full"}`); a batch the collector did not take within
//! [`EXPORT_TIMEOUT`] is dropped whole and counted
//! (`reason="export_failed"`). The gateway keeps no span for later.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, ShouldSample, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use tokio::sync::{mpsc, oneshot};

use crate::config::{OtlpProtocol, TelemetryConfig};
use crate::metrics::SpanCounters;

/// Spans waiting for export at most; more are dropped (counted).
pub const QUEUE_CAPACITY: usize = 4096;

/// Spans sent in one export at most.
pub const BATCH_SIZE: usize = 512;

/// How long a span waits for its batch to fill before the batch is sent.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// How long one export may take, retries included, before its batch is
/// dropped.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

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
    queue: mpsc::Sender<SpanData>,
    /// The queue's receiving side, until [`Telemetry::start`] hands it to
    /// the task.
    pending: Mutex<Option<mpsc::Receiver<SpanData>>>,
    /// The counters, once started.
    counters: OnceLock<SpanCounters>,
    /// Asks the task to send everything queued now ([`Telemetry::flush`]).
    flushes: mpsc::UnboundedSender<oneshot::Sender<()>>,
    /// The flush requests' receiving side, until the task takes it.
    pending_flushes: Mutex<Option<mpsc::UnboundedReceiver<oneshot::Sender<()>>>>,
    /// The scope every span names (`tollgate`, the gateway's version).
    pub(crate) scope: InstrumentationScope,
}

impl Telemetry {
    /// The export for `config`; `previous` (the runtime's before a reload)
    /// is kept when its section is the same.
    pub fn build(
        config: &TelemetryConfig,
        previous: Option<&std::sync::Arc<Telemetry>>,
    ) -> std::sync::Arc<Telemetry> {
        if let Some(kept) = previous.filter(|p| p.config == *config) {
            return kept.clone();
        }
        let (queue, pending) = mpsc::channel(QUEUE_CAPACITY);
        let (flushes, pending_flushes) = mpsc::unbounded_channel();
        std::sync::Arc::new(Telemetry {
            config: config.clone(),
            sampler: Sampler::TraceIdRatioBased(config.sample),
            queue,
            pending: Mutex::new(Some(pending)),
            counters: OnceLock::new(),
            flushes,
            pending_flushes: Mutex::new(Some(pending_flushes)),
            scope: InstrumentationScope::builder("tollgate")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
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
        let (config, counters) = (self.config.clone(), counters.clone());
        tokio::spawn(run(receiver, flushes, config, counters));
    }

    /// Send every span queued now, waiting up to `within` for it (at
    /// shutdown: the last requests' spans are not lost with the process).
    pub async fn flush(&self, within: Duration) {
        let (done, sent) = oneshot::channel();
        if self.flushes.send(done).is_ok() {
            let _ = tokio::time::timeout(within, sent).await;
        }
    }

    /// Whether a new trace (`trace_id`, 16 bytes) is recorded: the SDK's
    /// trace-id ratio sampler at `sample`.
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

    /// Queue `spans` for export without waiting: a span that does not fit
    /// is dropped and counted.
    pub fn submit(&self, spans: impl IntoIterator<Item = SpanData>) {
        for span in spans {
            if self.queue.try_send(span).is_err() {
                if let Some(counters) = self.counters.get() {
                    counters.queue_full.inc();
                }
            }
        }
    }
}

/// The export task: batches of up to [`BATCH_SIZE`] spans, each sent when
/// full or [`FLUSH_INTERVAL`] after its first span, one export at a time;
/// a flush (shutdown) sends everything queued at once; when the queue
/// closes (the export was replaced), what is left is sent and the task
/// ends.
async fn run(
    mut receiver: mpsc::Receiver<SpanData>,
    mut flushes: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
    config: TelemetryConfig,
    counters: SpanCounters,
) {
    let exporter = match exporter(&config) {
        Ok(exporter) => Some(exporter),
        Err(error) => {
            tracing::error!(%error, endpoint = %config.otlp.endpoint, "the OTLP exporter could not be built; spans are dropped");
            None
        }
    };
    let exporter = exporter.as_ref();
    let mut batch = Vec::with_capacity(BATCH_SIZE);
    let mut flush_at = tokio::time::Instant::now();
    loop {
        let room = BATCH_SIZE - batch.len();
        tokio::select! {
            n = receiver.recv_many(&mut batch, room) => {
                if n == 0 {
                    break;
                }
                if batch.len() == n {
                    flush_at = tokio::time::Instant::now() + FLUSH_INTERVAL;
                }
                if batch.len() >= BATCH_SIZE {
                    export(exporter, std::mem::take(&mut batch), &counters).await;
                }
            }
            () = tokio::time::sleep_until(flush_at), if !batch.is_empty() => {
                export(exporter, std::mem::take(&mut batch), &counters).await;
            }
            Some(done) = flushes.recv() => {
                while let Ok(span) = receiver.try_recv() {
                    batch.push(span);
                    if batch.len() >= BATCH_SIZE {
                        export(exporter, std::mem::take(&mut batch), &counters).await;
                    }
                }
                if !batch.is_empty() {
                    export(exporter, std::mem::take(&mut batch), &counters).await;
                }
                let _ = done.send(());
            }
        }
    }
    if !batch.is_empty() {
        export(exporter, batch, &counters).await;
    }
    if let Some(exporter) = exporter {
        let _ = exporter.shutdown();
    }
}

/// Send one batch; count it exported or dropped.
async fn export(
    exporter: Option<&opentelemetry_otlp::SpanExporter>,
    spans: Vec<SpanData>,
    counters: &SpanCounters,
) {
    let n = spans.len() as u64;
    let Some(exporter) = exporter else {
        counters.export_failed.inc_by(n);
        return;
    };
    match tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(spans)).await {
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

/// The SDK's OTLP exporter for `config`, with the `service.name` resource.
/// Built in the export task: a gRPC channel needs a Tokio runtime.
fn exporter(
    config: &TelemetryConfig,
) -> Result<opentelemetry_otlp::SpanExporter, opentelemetry_otlp::ExporterBuildError> {
    let otlp = &config.otlp;
    let endpoint = otlp.endpoint.to_string();
    let mut exporter = match otlp.protocol {
        OtlpProtocol::Http => {
            let headers: HashMap<String, String> = otlp
                .headers
                .iter()
                .filter_map(|(n, v)| Some((n.to_string(), v.to_str().ok()?.to_owned())))
                .collect();
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(endpoint)
                .with_timeout(EXPORT_TIMEOUT)
                .with_headers(headers)
                .build()?
        }
        OtlpProtocol::Grpc => {
            let mut metadata = http::HeaderMap::with_capacity(otlp.headers.len());
            for (name, value) in &otlp.headers {
                metadata.append(name.clone(), value.clone());
            }
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .with_timeout(EXPORT_TIMEOUT)
                .with_metadata(
                    opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(metadata),
                )
                .build()?
        }
    };
    let resource = Resource::builder_empty()
        .with_service_name(config.service_name.clone())
        .with_attributes([KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))])
        .build();
    exporter.set_resource(&resource);
    Ok(exporter)
}
