//! A recorded request's spans (docs/traces.md, "What each span carries"):
//! the request's own span (kind server), one child per upstream attempt
//! (kind client, the span the upstream's `traceparent` names) and one per
//! limit-store call. Only a request whose trace is sampled while
//! `telemetry:` is configured has a [`Recording`]; the others pay for none
//! of this.
//!
//! Spans are built as OTLP's own messages (the `opentelemetry-proto`
//! types), once each: children as they end, the request's span when its
//! response has ended (with the access-log line); then a request's spans
//! go to the export queue together ([`Telemetry::submit`]). Building them
//! as the SDK's `SpanData` instead, converted to these messages at export,
//! cost half as much again: a recorded request added 23,600 instructions
//! to one with telemetry off that way, 15,400 this way (callgrind).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[cfg(test)]
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::{Event, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{Span, SpanFlags, Status};

use super::attributes::{int, text};
use super::context::{SpanId, TraceContext};
use super::export::Telemetry;

/// The `sampled` trace flag: every recorded span is sampled.
const SAMPLED: u32 = 0x01;

/// A span's `flags` for a parent that is (`remote`) or is not another
/// process's span: the trace flags, and whether the parent is remote.
fn flags(remote: bool) -> u32 {
    let known = SpanFlags::ContextHasIsRemoteMask as u32;
    let is_remote = if remote {
        SpanFlags::ContextIsRemoteMask as u32
    } else {
        0
    };
    SAMPLED | known | is_remote
}

/// Nanoseconds since the Unix epoch.
fn nanos(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// What one sampled request records until its response ends.
pub struct Recording {
    /// Where its spans go.
    telemetry: Arc<Telemetry>,
    /// The trace's 16 bytes.
    trace_id: [u8; 16],
    /// The request span's id.
    span: SpanId,
    /// The caller's span, for a continued trace.
    parent: Option<SpanId>,
    /// The `tracestate` passed on, as text.
    state: String,
    /// When the request arrived.
    start: SystemTime,
    /// One event per limit decision, in the route's order.
    events: Vec<Event>,
    /// The children that ended (attempts, store calls); the request's
    /// span joins them at the end.
    spans: Mutex<Vec<Span>>,
    /// How the request's last store call ended (`ok`, `error`), if it
    /// made one.
    store: Mutex<Option<&'static str>>,
}

impl Recording {
    /// The recording of a request in `trace` whose span is `span`, started
    /// now; its spans go to `telemetry`.
    pub fn start(telemetry: Arc<Telemetry>, trace: &TraceContext, span: SpanId) -> Recording {
        let state = trace
            .state
            .as_ref()
            .and_then(|s| s.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        Recording {
            telemetry,
            trace_id: trace.trace_id.bytes(),
            span,
            parent: trace.parent,
            state,
            start: SystemTime::now(),
            events: Vec::new(),
            spans: Mutex::new(Vec::with_capacity(3)),
            store: Mutex::default(),
        }
    }

    /// One limit's decision, as an event `limit` on the request's span.
    pub fn limit_decision(&mut self, limit: &str, decision: &'static str, remaining: u64) {
        self.events.push(Event {
            time_unix_nano: nanos(SystemTime::now()),
            name: "limit".to_owned(),
            attributes: vec![
                text("tollgate.limit", limit),
                text("tollgate.limit.decision", decision),
                int(
                    "tollgate.limit.remaining",
                    i64::try_from(remaining).unwrap_or(i64::MAX),
                ),
            ],
            ..Default::default()
        });
    }

    /// A limit-store call that just ended after `elapsed`: a child span
    /// `store <backend>`, and the store's outcome for the request's span.
    pub fn store_call(&self, backend: &'static str, ok: bool, elapsed: Duration) {
        let end = SystemTime::now();
        let outcome = if ok { "ok" } else { "error" };
        let mut attributes = vec![text("tollgate.store.outcome", outcome)];
        if backend == "redis" {
            attributes.push(text("db.system.name", "redis"));
        }
        let status = (!ok).then_some("the limit store did not answer");
        let name = match backend {
            "redis" => "store redis",
            _ => "store memory",
        };
        let start = end.checked_sub(elapsed).unwrap_or(end);
        let child = self.child(SpanId::random(), name.to_owned(), start, attributes, status);
        self.push(child);
        *self.store.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
    }

    /// How the request's store call ended (`ok`, `error`), if it made one:
    /// the request span's `tollgate.store.outcome`.
    pub fn store_outcome(&self) -> Option<&'static str> {
        *self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An upstream attempt: a child span of the request's, whose id the
    /// attempt's `traceparent` names. End it with
    /// [`Recording::end_attempt`].
    pub fn attempt(&self) -> Attempt {
        Attempt {
            span: SpanId::random(),
            start: SystemTime::now(),
        }
    }

    /// The attempt `attempt` ended: a child span `name` with `attributes`,
    /// an error status when `error` says what failed.
    pub fn end_attempt(
        &self,
        attempt: Attempt,
        name: String,
        attributes: Vec<KeyValue>,
        error: Option<&'static str>,
    ) {
        let child = self.child(attempt.span, name, attempt.start, attributes, error);
        self.push(child);
    }

    /// The request's response ended: its span (`name`, `attributes`, an
    /// error status for a 5xx) and its children go to the export queue.
    pub fn finish(self, name: String, attributes: Vec<KeyValue>, status: u16) {
        let mut spans = self
            .spans
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        spans.push(Span {
            trace_id: self.trace_id.to_vec(),
            span_id: self.span.0.to_vec(),
            trace_state: self.state,
            parent_span_id: self.parent.map(|p| p.0.to_vec()).unwrap_or_default(),
            flags: flags(self.parent.is_some()),
            name,
            kind: SpanKind::Server as i32,
            start_time_unix_nano: nanos(self.start),
            end_time_unix_nano: nanos(SystemTime::now()),
            attributes,
            events: self.events,
            // Server spans: a 5xx is the server's error, a 4xx the client's.
            status: (status >= 500).then(|| Status {
                code: StatusCode::Error as i32,
                ..Default::default()
            }),
            ..Default::default()
        });
        self.telemetry.submit(spans);
    }

    /// A child of the request's span, with the id `id`, that started at
    /// `start` and ends now.
    fn child(
        &self,
        id: SpanId,
        name: String,
        start: SystemTime,
        attributes: Vec<KeyValue>,
        error: Option<&'static str>,
    ) -> Span {
        Span {
            trace_id: self.trace_id.to_vec(),
            span_id: id.0.to_vec(),
            trace_state: self.state.clone(),
            parent_span_id: self.span.0.to_vec(),
            flags: flags(false),
            name,
            kind: SpanKind::Client as i32,
            start_time_unix_nano: nanos(start),
            end_time_unix_nano: nanos(SystemTime::now()),
            attributes,
            status: error.map(|message| Status {
                code: StatusCode::Error as i32,
                message: message.to_owned(),
            }),
            ..Default::default()
        }
    }

    fn push(&self, span: Span) {
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(span);
    }
}

/// An upstream attempt under way: its span id (sent upstream in
/// `traceparent`) and when it started.
pub struct Attempt {
    /// The attempt's span id.
    pub span: SpanId,
    start: SystemTime,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{OtlpConfig, OtlpProtocol, TelemetryConfig};

    #[tokio::test]
    async fn a_recording_links_its_children_to_the_request_and_the_request_to_the_caller() {
        let config = TelemetryConfig {
            otlp: OtlpConfig {
                endpoint: "http://127.0.0.1:9/v1/traces".parse().unwrap(),
                protocol: OtlpProtocol::Http,
                headers: Vec::new(),
            },
            sample: 1.0,
            service_name: "t".into(),
        };
        // Not started: what is submitted stays queued for the test.
        let telemetry = Telemetry::build(&config, None);
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        let trace = TraceContext::of(&headers, || false);
        let span = SpanId::random();
        let mut recording = Recording::start(telemetry.clone(), &trace, span);
        recording.limit_decision("two", "allowed", 1);
        recording.store_call("memory", true, Duration::from_micros(5));
        let attempt = recording.attempt();
        let attempt_id = attempt.span;
        recording.end_attempt(attempt, "upstream e".into(), Vec::new(), Some("timeout"));
        recording.finish("GET api".into(), Vec::new(), 502);

        let spans = telemetry.take_queue().try_recv().expect("submitted");
        assert_eq!(spans.len(), 3);
        let server = spans
            .iter()
            .find(|s| s.kind == SpanKind::Server as i32)
            .unwrap();
        let trace_id = hex::decode("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
        assert_eq!(server.trace_id, trace_id);
        assert_eq!(server.span_id, span.0);
        assert_eq!(
            server.parent_span_id,
            hex::decode("00f067aa0ba902b7").unwrap()
        );
        assert_eq!(server.flags, 0x301, "sampled, the parent known remote");
        assert_eq!(server.events.len(), 1);
        assert_eq!(server.status.as_ref().map(|s| s.code), Some(2));
        assert!(server.end_time_unix_nano >= server.start_time_unix_nano);
        for child in spans.iter().filter(|s| s.kind == SpanKind::Client as i32) {
            assert_eq!(child.trace_id, trace_id);
            assert_eq!(child.parent_span_id, server.span_id);
            assert_eq!(child.flags, 0x101, "sampled, the parent known local");
        }
        let attempt = spans.iter().find(|s| s.span_id == attempt_id.0).unwrap();
        assert_eq!(attempt.name, "upstream e");
        assert_eq!(attempt.status.as_ref().map(|s| s.code), Some(2));
        assert_eq!(recording_store(&spans), Some("ok"));
    }

    /// The store child's outcome attribute.
    fn recording_store(spans: &[Span]) -> Option<&'static str> {
        let store = spans.iter().find(|s| s.name == "store memory")?;
        let value = store.attributes[0].value.as_ref()?.value.as_ref()?;
        match value {
            any_value::Value::StringValue(s) if s == "ok" => Some("ok"),
            _ => None,
        }
    }
}
